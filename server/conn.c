/* One connection of the HTTP front, on its loop's thread: its requests are read (the head parsed by
 * http1.c, then the body, counted in the buffered-bytes budget), handed to the api, and answered;
 * every refusal is answered at once, mid-body too, and the connection is then shut for writing
 * and read to its end for a moment (a lingering close), so that a reset does not destroy the
 * answer. While a job runs the connection is not read but watched: a client that closes it (a FIN,
 * a half-close included, or a reset) is gone, and its job is cancelled at its next check. A
 * request lives from its complete head to its written answer, or to the end of its job when that
 * comes later; the job's callback hands the answer back through the loop's queue. */
#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <time.h>

/* ---- the budget of buffered bytes ---- */

/* Counts n more bytes in the budget when they fit; returns whether they did. A refusal makes the
 * loops drop the answers their clients have stopped reading. */
static int budget_take(struct srv *s, size_t n) {
  size_t cur = __atomic_load_n(&s->buffered, __ATOMIC_SEQ_CST);
  do {
    if (n > s->cfg.max_buffered || cur > s->cfg.max_buffered - n) {
      double until = api_now_ms() + PRESSURE_MS;
      __atomic_store(&s->pressure_until, &until, __ATOMIC_SEQ_CST);
      return 0;
    }
  } while (!__atomic_compare_exchange_n(&s->buffered, &cur, cur + n, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST));
  return 1;
}

static void budget_give(struct srv *s, size_t n) {
  if (n) __atomic_sub_fetch(&s->buffered, n, __ATOMIC_SEQ_CST);
}

/* ---- requests ---- */

/* Called by a worker thread (through the cancel token): has the client left? */
static int client_gone(void *udata) {
  struct request *r = udata;
  return __atomic_load_n(&r->gone, __ATOMIC_RELAXED);
}

/* Reports the answer (or its absence, 499) to the api once; while the job still writes the
 * trace, its callback reports it instead. */
static void observe(struct srv *s, struct request *r, int status, size_t bytes) {
  if (r->observed) return;
  r->observed = 1;
  r->outcome = (struct api_outcome){status, r->received, bytes};
  if (r->job)
    r->late = 1;
  else
    api_observe(s->api, &r->req, &r->outcome);
}

static void request_free(struct srv *s, struct request *r) {
  budget_give(s, r->counted);
  api_response_free(r->resp);
  free(r->body);
  free(r->head);
  free(r);
  __atomic_store_n(&s->freed, 1, __ATOMIC_SEQ_CST);
}

/* The connection is done with its request: answered, or closed before. A request whose job still
 * runs stays allocated for it; its callback frees it. */
static void request_done(struct conn *c) {
  struct srv *s = c->loop->srv;
  struct request *r = c->req;
  if (!r) return;
  c->req = NULL;
  __atomic_sub_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
  if (!r->answered) {
    __atomic_store_n(&r->gone, 1, __ATOMIC_SEQ_CST);
    observe(s, r, 499, 0);
  }
  if (r->job)
    r->conn = NULL;
  else
    request_free(s, r);
}

/* A copy of header name's value, or NULL (the request's copy of the head holds it). */
static const char *header(const struct request *r, const char *name) {
  return http1_field(&r->h, name);
}

/* What the api sees of the request (its body comes with submit); from as much of the head as
 * was read. */
static void begin(struct srv *s, struct conn *c, struct request *r) {
  const struct sockaddr *sa = (const struct sockaddr *)&c->addr;
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, r->remote, sizeof(r->remote));
  api_request_id(s->api, header(r, "X-Request-Id"), r->id);
  r->head_only = r->h.method && strcmp(r->h.method, "HEAD") == 0;
  r->req = (struct api_request){.method = r->h.method ? r->h.method : "-",
                                .uri = r->h.target ? r->h.target : "-",
                                .content_type = header(r, "Content-Type"),
                                .accept = header(r, "Accept"),
                                .accept_encoding = header(r, "Accept-Encoding"),
                                .if_none_match = header(r, "If-None-Match"),
                                .deadline = r->deadline,
                                .client_gone = client_gone,
                                .authorization = header(r, "Authorization"),
                                .api_key = header(r, "X-API-Key"),
                                .origin = header(r, "Origin"),
                                .cors_method = header(r, "Access-Control-Request-Method"),
                                .id = r->id,
                                .remote = r->remote,
                                .t_start = c->head_start,
                                .trace = &r->trace};
}

/* ---- connections ---- */

static void set_events(struct conn *c, unsigned events) {
  if (c->events == events) return;
  struct epoll_event ev = {.events = events, .data.ptr = c};
  epoll_ctl(c->loop->ep, EPOLL_CTL_MOD, c->fd, &ev);
  c->events = events;
}

/* Closes the connection and lets go of its request and answer. The struct stays (CS_DEAD) until
 * free_dead, so that the code that closed it, and a later event of the same batch, can still see
 * that it is closed. */
void conn_close(struct conn *c) {
  struct loop *l = c->loop;
  struct srv *s = l->srv;
  if (c->state == CS_DEAD) return;
  c->state = CS_DEAD;
  epoll_ctl(l->ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  request_done(c);
  budget_give(s, c->counted);
  gate_release(s->gate, (const struct sockaddr *)&c->addr, c->over >= 0);
  if (c->prev) c->prev->next = c->next;
  if (c->next) c->next->prev = c->prev;
  if (l->conns == c) l->conns = c->next;
  free(c->in);
  free(c->out);
  free(c->body);
  c->in = c->out = NULL, c->body = NULL;
  c->next = l->dead;
  l->dead = c;
  __atomic_store_n(&s->freed, 1, __ATOMIC_SEQ_CST);
}

void conn_free_dead(struct loop *l) {
  while (l->dead) {
    struct conn *c = l->dead;
    l->dead = c->next;
    free(c);
  }
}

/* Shuts the sending side and drops what the client still sends until it closes, or LINGER_MS. */
static void conn_linger(struct conn *c) {
  if (shutdown(c->fd, SHUT_WR) != 0) {
    conn_close(c);
    return;
  }
  c->state = CS_LINGER;
  c->until = api_now_ms() + LINGER_MS;
  c->in_len = 0;
  set_events(c, EPOLLIN | EPOLLRDHUP);
}

static void conn_write(struct conn *c);

/* Sends resp (taken over; NULL: out of memory) as the answer to the connection's request, or to
 * no request (a head that timed out half-way); close: the connection closes after it. */
static void answer(struct conn *c, struct api_response *resp, int close) {
  static char oom[] = "{\"error\":{\"status\":500,\"code\":\"internal_error\","
                      "\"message\":\"The service could not build a response.\"}}";
  struct srv *s = c->loop->srv;
  struct request *r = c->req;
  if (r) api_finish(s->api, &r->req, resp);
  int status = resp ? resp->status : 500;
  size_t len = resp ? resp->len : sizeof(oom) - 1;
  c->close_after |= close || __atomic_load_n(&s->draining, __ATOMIC_SEQ_CST) || c->over >= 0 ||
                    !r || !r->h.keep_alive;
  size_t cap = 512 + (resp ? (size_t)resp->nheaders * 420 : 0);
  char *out = malloc(cap);
  if (!out) {
    api_response_free(resp);
    conn_close(c);
    return;
  }
  int n = snprintf(out, cap, "HTTP/1.1 %d %s\r\nDate: %s\r\n", status, http_reason(status),
                   http_date());
  if (!resp || resp->content_type)
    n += snprintf(out + n, cap - (size_t)n, "Content-Type: %s\r\n",
                  resp ? resp->content_type : "application/json");
  if (status != 204 && status != 304)
    n += snprintf(out + n, cap - (size_t)n, "Content-Length: %zu\r\n", len);
  if (r) n += snprintf(out + n, cap - (size_t)n, "X-Request-Id: %s\r\n", r->id);
  for (int i = 0; resp && i < resp->nheaders; i++)
    n += snprintf(out + n, cap - (size_t)n, "%s: %s\r\n", resp->headers[i].name,
                  resp->headers[i].value);
  if (c->close_after)
    n += snprintf(out + n, cap - (size_t)n, "Connection: close\r\n");
  else if (r->h.minor == 0)
    n += snprintf(out + n, cap - (size_t)n, "Connection: keep-alive\r\n");
  n += snprintf(out + n, cap - (size_t)n, "\r\n");
  c->out = out;
  c->out_len = (size_t)n;
  c->body = resp ? resp->body : (uint8_t *)strdup(oom);
  c->body_len = r && r->head_only ? 0 : len;
  c->sent = 0;
  c->counted = c->out_len + len;
  __atomic_add_fetch(&s->buffered, c->counted, __ATOMIC_SEQ_CST);
  if (resp) resp->body = NULL;
  api_response_free(resp);
  if (r) {
    r->answered = 1;
    __atomic_store_n(&r->gone, 1, __ATOMIC_SEQ_CST); /* a job still running need not go on */
    observe(s, r, status, len);
  }
  c->state = CS_WRITE;
  c->until = fmax(r ? r->deadline : 0, api_now_ms() + WRITE_GRACE_MS);
  set_events(c, EPOLLOUT);
  conn_write(c);
}

/* Answers error e (msg: NULL for its sentence) and closes the connection after it. */
static void refuse(struct conn *c, enum err e, const char *msg) {
  char text[200];
  if (e == ERR_BODY_TOO_LARGE && !msg) {
    snprintf(text, sizeof(text), "The request body is larger than the limit of %zu bytes.",
             c->loop->srv->cfg.max_body);
    msg = text;
  }
  answer(c, api_error_response(e, msg), 1);
}

/* The refusal of a connection of the reserve (over a limit) that sent no probe. */
static void refuse_over(struct conn *c) {
  struct srv *s = c->loop->srv;
  api_refused(s->api, s->canned[c->over].e);
  refuse(c, s->canned[c->over].e, NULL);
}

static void head_in(struct conn *c);

/* The answer is written: the next request, or the close. */
static void write_done(struct conn *c) {
  struct srv *s = c->loop->srv;
  budget_give(s, c->counted);
  c->counted = 0;
  free(c->out);
  free(c->body);
  c->out = NULL, c->body = NULL;
  request_done(c);
  if (c->close_after) {
    conn_linger(c);
    return;
  }
  c->state = CS_HEAD;
  c->head_start = 0;
  c->progress = api_now_ms();
  set_events(c, EPOLLIN | EPOLLRDHUP);
  if (!c->parsing) head_in(c); /* a request the client sent behind the last one */
}

static void conn_write(struct conn *c) {
  while (c->sent < c->out_len + c->body_len) {
    struct iovec iov[2];
    int n = 0;
    if (c->sent < c->out_len) iov[n++] = (struct iovec){c->out + c->sent, c->out_len - c->sent};
    size_t off = c->sent > c->out_len ? c->sent - c->out_len : 0;
    if (c->body_len > off) iov[n++] = (struct iovec){c->body + off, c->body_len - off};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t k = sendmsg(c->fd, &m, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return; /* EPOLLOUT will tell */
    if (k < 0) {
      conn_close(c);
      return;
    }
    c->sent += (size_t)k;
    c->progress = api_now_ms();
  }
  write_done(c);
}

/* ---- reading a request ---- */

/* Called by a worker thread once the job is done: the loop takes the answer. */
static void on_done(void *udata, struct api_response *resp) {
  struct request *r = udata;
  struct loop *l = r->loop;
  r->resp = resp;
  pthread_mutex_lock(&l->mu);
  r->next = l->done;
  l->done = r;
  pthread_mutex_unlock(&l->mu);
  loop_wake(l);
}

/* The body is complete: the api answers at once, or queues a job. */
static void submit(struct conn *c) {
  struct srv *s = c->loop->srv;
  struct request *r = c->req;
  r->req.body = r->body;
  r->req.body_len = r->len;
  r->req.t_received = api_now_ms();
  r->job = 1;
  __atomic_add_fetch(&s->jobs, 1, __ATOMIC_SEQ_CST);
  struct api_response *resp = api_handle(s->api, &r->req, on_done, r);
  if (resp) { /* no job: done never comes */
    r->job = 0;
    __atomic_sub_fetch(&s->jobs, 1, __ATOMIC_SEQ_CST);
    answer(c, resp, 0);
    return;
  }
  c->state = CS_JOB;
  set_events(c, EPOLLRDHUP); /* not EPOLLIN: what the client sends next waits in the kernel */
}

/* n more body bytes: checked by the api as they stream in, kept when they fit the limits.
 * Returns 0, or -1 after refusing the request. */
static int body_in(struct conn *c, const uint8_t *data, size_t n) {
  struct srv *s = c->loop->srv;
  struct request *r = c->req;
  char msg[256];
  r->received += n;
  if (r->received > s->cfg.max_body) {
    refuse(c, ERR_BODY_TOO_LARGE, NULL);
    return -1;
  }
  enum err e = api_body_chunk(s->api, &r->req, data, n, msg, sizeof(msg));
  if (e != ERR_OK) {
    refuse(c, e, msg);
    return -1;
  }
  if (r->len + n > r->cap) { /* a chunked body grows, counted in the budget */
    size_t cap = r->cap ? r->cap : 65536;
    while (cap < r->len + n) cap *= 2;
    if (cap > s->cfg.max_body) cap = s->cfg.max_body;
    if (cap > r->counted && !budget_take(s, cap - r->counted)) {
      refuse(c, ERR_BUFFER_FULL, NULL);
      return -1;
    }
    if (cap > r->counted) r->counted = cap;
    uint8_t *b = realloc(r->body, cap);
    if (!b) {
      refuse(c, ERR_OUT_OF_MEMORY, NULL);
      return -1;
    }
    r->body = b, r->cap = cap;
  }
  if (data != r->body + r->len) memcpy(r->body + r->len, data, n);
  r->len += n;
  return 0;
}

/* Takes the first n bytes of the input buffer. */
static void consume(struct conn *c, size_t n) {
  memmove(c->in, c->in + n, c->in_len - n);
  c->in_len -= n;
  c->scanned = 0;
}

/* Feeds the input buffer's bytes to the body being read; submits the request when it is whole.
 * The bytes after the body stay for the next request. */
static void body_from_buffer(struct conn *c) {
  struct request *r = c->req;
  char msg[200];
  while (c->state == CS_BODY) {
    if (!r->h.chunked) {
      size_t k = r->h.content_length - r->len;
      if (k > c->in_len) k = c->in_len;
      if (k && body_in(c, (const uint8_t *)c->in, k) != 0) return;
      consume(c, k);
      if (r->len == r->h.content_length) submit(c);
      return;
    }
    size_t used = 0, len = 0;
    const uint8_t *data;
    int done = 0;
    enum err e = http1_chunk(&r->chunk, (const uint8_t *)c->in, c->in_len, &used, &data, &len,
                             &done, msg, sizeof(msg));
    if (e != ERR_OK) {
      refuse(c, e, msg);
      return;
    }
    if (len && body_in(c, data, len) != 0) return;
    consume(c, used);
    if (done) submit(c);
    if (done || used == 0) return;
  }
}

/* A request head of n bytes is at the start of the input buffer: checks it, admits the request
 * and starts its body. */
static void head_complete(struct conn *c, size_t n) {
  struct srv *s = c->loop->srv;
  char msg[200];
  struct request *r = calloc(1, sizeof(*r));
  char *head = r ? malloc(n + 1) : NULL;
  if (!head) {
    free(r);
    conn_close(c);
    return;
  }
  memcpy(head, c->in, n);
  head[n] = 0;
  consume(c, n);
  r->loop = c->loop, r->conn = c, r->head = head;
  r->deadline = c->head_start + 1e3 * s->cfg.request_timeout_s;
  c->req = r;
  __atomic_add_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
  enum err e = http1_parse_head(head, n, &r->h, msg, sizeof(msg));
  begin(s, c, r);
  if (e != ERR_OK) {
    refuse(c, e, msg);
    return;
  }
  if (c->over >= 0 && !api_is_probe(r->h.method, r->h.target)) {
    refuse_over(c);
    return;
  }
  int body = r->h.chunked || r->h.content_length > 0;
  struct api_response *early = api_admit(s->api, &r->req);
  if (early) { /* a 401 or a preflight's answer: unread, a body would be taken for a request */
    answer(c, early, body);
    return;
  }
  if (r->h.content_length > s->cfg.max_body) {
    refuse(c, ERR_BODY_TOO_LARGE, NULL);
    return;
  }
  if (r->h.content_length > 0) {
    if (!budget_take(s, (size_t)r->h.content_length)) {
      refuse(c, ERR_BUFFER_FULL, NULL);
      return;
    }
    r->counted = r->cap = (size_t)r->h.content_length;
    if (!(r->body = malloc(r->cap))) {
      refuse(c, ERR_OUT_OF_MEMORY, NULL);
      return;
    }
  }
  if (!body) {
    submit(c);
    return;
  }
  if (r->h.expect_continue) {
    static const char go[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (send(c->fd, go, sizeof(go) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof(go) - 1) {
      conn_close(c); /* 25 bytes on an idle connection: only a client that left refuses them */
      return;
    }
  }
  c->state = CS_BODY;
  body_from_buffer(c);
}

/* Takes the request heads in the input buffer while the connection waits for one. */
static void head_in(struct conn *c) {
  c->parsing = 1;
  while (c->state == CS_HEAD && c->in_len > 0) {
    if (!c->head_start) { /* empty lines before a request line are skipped (RFC 9112 2.2) */
      size_t k = 0;
      while (k + 1 < c->in_len && c->in[k] == '\r' && c->in[k + 1] == '\n') k += 2;
      if (k) consume(c, k);
      if (!c->in_len || (c->in_len == 1 && c->in[0] == '\r')) break;
      c->head_start = api_now_ms();
    }
    size_t end = http1_head_end(c->in, c->in_len, &c->scanned);
    if (!end) {
      enum err e = http1_head_overlong(c->in, c->in_len);
      if (e != ERR_OK) refuse(c, e, NULL);
      break;
    }
    head_complete(c, end);
  }
  c->parsing = 0;
}

/* The client closed its side, or the connection failed. */
static void client_left(struct conn *c) {
  if (c->req && !c->req->answered) __atomic_store_n(&c->req->gone, 1, __ATOMIC_SEQ_CST);
  conn_close(c);
}

/* Reads what the connection has: heads, bodies, or bytes to drop. */
static void conn_read(struct conn *c) {
  for (int i = 0; i < READS_PER_EVENT; i++) {
    if (c->state != CS_HEAD && c->state != CS_BODY && c->state != CS_LINGER) return;
    struct request *r = c->req;
    uint8_t *dst;
    size_t room;
    if (c->state == CS_BODY && !r->h.chunked) { /* straight into the body */
      dst = r->body + r->len, room = r->h.content_length - r->len;
    } else {
      size_t want = c->state == CS_HEAD ? HTTP1_HEAD_MAX + 2 : IN_CHUNKED;
      if (c->state == CS_LINGER) c->in_len = 0;
      if (c->in_len == c->in_cap) {
        size_t cap = c->in_cap ? 2 * c->in_cap : IN_START;
        if (cap > want) cap = want;
        char *b = cap > c->in_cap ? realloc(c->in, cap) : NULL;
        if (!b) { /* full: a head past the limits was refused, so this is out of memory */
          conn_close(c);
          return;
        }
        c->in = b, c->in_cap = cap;
      }
      dst = (uint8_t *)c->in + c->in_len, room = c->in_cap - c->in_len;
    }
    ssize_t k = recv(c->fd, dst, room, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (k <= 0) {
      if (c->state == CS_LINGER)
        conn_close(c);
      else
        client_left(c);
      return;
    }
    c->progress = api_now_ms();
    if (c->state == CS_LINGER) continue;
    if (c->state == CS_BODY && !r->h.chunked) { /* the bytes are in place: count, check them */
      if (body_in(c, dst, (size_t)k) != 0) return;
      if (r->len == r->h.content_length) submit(c);
      continue;
    }
    c->in_len += (size_t)k;
    if (c->state == CS_HEAD)
      head_in(c);
    else
      body_from_buffer(c);
  }
}

void conn_event(struct conn *c, unsigned events) {
  if (c->state == CS_DEAD) return;
  if (events & (EPOLLHUP | EPOLLERR)) {
    if (c->state == CS_LINGER)
      conn_close(c);
    else
      client_left(c);
    return;
  }
  if (c->state == CS_JOB && events & EPOLLRDHUP) {
    client_left(c); /* a half-close too: nobody will read the answer of a job left behind */
    return;
  }
  if (c->state == CS_WRITE && events & EPOLLOUT) {
    conn_write(c);
    return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP)) conn_read(c);
}

void conn_tick(struct conn *c, double now, int draining, int pressure) {
  struct srv *s = c->loop->srv;
  double idle = c->progress + 1e3 * (c->over >= 0 ? RESERVE_MS / 1e3 : s->cfg.timeout_s);
  switch (c->state) {
  case CS_HEAD: /* a probe passed on while draining (over) has its RESERVE_MS */
    if (!c->head_start && !c->in_len) {
      if ((draining && c->over < 0) || now > idle) conn_close(c);
    } else if (draining && c->over < 0) {
      refuse(c, ERR_SHUTTING_DOWN, NULL);
    } else if (now > idle || now > c->head_start + 1e3 * s->cfg.request_timeout_s) {
      refuse(c, ERR_REQUEST_TIMEOUT, "The request's head did not arrive in time.");
    }
    break;
  case CS_BODY:
    if (draining)
      refuse(c, ERR_SHUTTING_DOWN, "The service is shutting down; the upload was not finished.");
    else if (now > idle || now > c->req->deadline)
      refuse(c, ERR_REQUEST_TIMEOUT, "The request's body did not arrive in time.");
    break;
  case CS_JOB:
    if (now > c->req->deadline) answer(c, api_error_response(ERR_DEADLINE_EXCEEDED, NULL), 0);
    break;
  case CS_WRITE:
    if (now > c->until || (pressure && now - c->progress > STALL_MS)) conn_close(c);
    break;
  case CS_LINGER:
    if (now > c->until) conn_close(c);
    break;
  case CS_DEAD:
    break;
  }
}

void conn_job_done(struct request *r, struct api_response *resp) {
  struct srv *s = r->loop->srv;
  r->job = 0;
  if (r->late) api_observe(s->api, &r->req, &r->outcome);
  if (r->conn && !r->answered) {
    answer(r->conn, resp, 0);
  } else {
    api_response_free(resp);
    if (!r->conn) request_free(s, r);
  }
}

/* The HTTP/1.1 server: event loops that read requests (http1.c parses them), hand them to the api
 * and write its answers. The gate (gate.c) accepts connections and passes each to one loop, a
 * thread with an epoll set of its own; everything about a connection and its current request
 * happens on that thread, but for a job's callback, which hands the answer back to the loop
 * through a queue and an eventfd.
 *
 * A request is read completely before the api sees it: its head first (refused with blurd's JSON
 * error and the connection closed when it is not strict HTTP/1.1), then its body, counted in the
 * buffered-bytes budget before it is read when Content-Length declares it, as it grows when it is
 * chunked. Every refusal is answered at once, mid-body too, and the connection is then shut for
 * writing and read to its end for a moment (a lingering close), so that a reset does not destroy
 * the answer. While a job runs the loop does not read from the connection, but watches it: a client
 * that closes it (a FIN, a half-close included, or a reset) is gone, and its job is cancelled at
 * its next check. Each loop checks its connections' clocks every TICK_MS: the request deadline
 * (an answer 503 while the job still runs, a 408 while the request is still arriving, a cut while
 * its answer is unread), the idle timeout, and the lingering closes. */
#include "server.h"

#include "../api/api.h"
#include "gate.h"
#include "http1.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS         100   /* how often a loop checks its connections' clocks */
#define WRITE_GRACE_MS  1000  /* to write an answer that was ready at (or after) the deadline */
#define LINGER_MS       1000  /* a closing connection's unread bytes are dropped this long */
#define RESERVE_MS      2000  /* a connection over the limits has this long to send a probe */
#define STALL_MS        1000  /* an answer unread this long is dropped while the budget is short */
#define PRESSURE_MS     1000  /* how long a refused body keeps the budget short */
#define RESERVE_CONNS   16    /* probes over the connection limits served at once */
#define IN_START        4096  /* the first input buffer of a connection */
#define IN_CHUNKED      65536 /* the input buffer a chunked body is read through */
#define READS_PER_EVENT 16    /* reads of one connection before the loop serves the others */

enum conn_state {
  CS_HEAD,   /* waiting for a request head, or the rest of one */
  CS_BODY,   /* reading the body of req */
  CS_JOB,    /* req's job runs: nothing is read; a close of the client's side cancels it */
  CS_WRITE,  /* writing the answer */
  CS_LINGER, /* answered and shut for writing: what comes is dropped until the end or LINGER_MS */
  CS_DEAD,   /* closed: freed once the loop is done with the events at hand */
};

struct srv;
struct loop;

struct request {
  struct loop *loop;
  struct conn *conn; /* NULL once its connection is done with it (the job's callback frees) */
  char *head;        /* the head's bytes, parsed in place: h's strings point into them */
  struct http1_request h;
  uint8_t *body; /* the body so far */
  size_t len, cap;
  size_t counted;  /* bytes of the budget it holds */
  size_t received; /* body bytes received */
  struct http1_chunked chunk;
  int head_only;      /* HEAD: the answer's body is not sent */
  int job;            /* its job has not called back yet */
  int gone;           /* the client left, or was answered without the job (atomic) */
  int answered;       /* its answer is written or being written */
  int observed, late; /* reported to the api; late: when the job calls back */
  struct api_outcome outcome;
  struct api_response *resp; /* the job's answer, handed to the loop */
  struct request *next;      /* in loop->done */
  double deadline;           /* api_now_ms() by which the answer must be ready */
  struct api_request req;    /* what the api sees */
  struct api_trace trace;
  char id[API_REQUEST_ID_MAX + 1];
  char remote[INET6_ADDRSTRLEN];
};

struct conn {
  struct loop *loop;
  int fd;
  struct sockaddr_storage addr;
  int over; /* -1, or the enum gate_refusal of a connection over the limits */
  enum conn_state state;
  char *in; /* bytes read and not yet taken: a head, a chunked body, what follows */
  size_t in_len, in_cap, scanned;
  double head_start;   /* api_now_ms() at the first byte of the head being read; 0: none yet */
  struct request *req; /* the request being read or answered */
  char *out;           /* the answer's status line and header fields */
  size_t out_len;
  uint8_t *body;   /* the answer's body (owned) */
  size_t body_len; /* the bytes of it to send (0 for HEAD) */
  size_t sent;     /* of out, then body */
  size_t counted;  /* bytes of the budget the answer holds */
  int close_after; /* close once the answer is written */
  double until;    /* CS_WRITE: cut past it; CS_LINGER: closed at it */
  double progress; /* api_now_ms() of the last byte read or written */
  unsigned events; /* the epoll interest */
  int parsing;     /* head_in runs: it takes the next request itself */
  struct conn *prev, *next;
};

struct loop {
  struct srv *srv;
  int ep, efd;
  pthread_t thread;
  int started;
  pthread_mutex_t mu;    /* guards incoming and done */
  struct conn *incoming; /* passed on by the gate, not yet in the epoll set */
  struct request *done;  /* jobs that called back */
  struct conn *conns;    /* the loop's connections (its thread only) */
  struct conn *dead;     /* closed ones, freed after the events at hand */
  int index;
};

/* The answer to a connection refused unread: the error's status and JSON body. */
struct canned {
  enum api_error e;
  struct api_response *resp;
};

struct srv {
  struct gate *gate;
  struct canned canned[3]; /* by enum gate_refusal */
  struct api_ctx *api;
  struct srv_config cfg;
  struct loop *loops;
  int nloops;
  unsigned next_loop;    /* the loop the next connection goes to (atomic) */
  int inflight;          /* requests from their complete head to their written answer (atomic) */
  int jobs;              /* jobs that have not called back (atomic) */
  int draining;          /* atomic */
  int stop;              /* the loops end (atomic) */
  int freed;             /* memory was freed since the last malloc_trim (atomic) */
  size_t buffered;       /* bytes of bodies held or promised and of answers not yet written */
  double pressure_until; /* api_now_ms() until which unread answers are dropped (atomic) */
  int port;
};

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

static void wake(struct loop *l) {
  uint64_t one = 1;
  if (write(l->efd, &one, sizeof(one)) < 0) { /* the counter cannot overflow in practice */
  }
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
static void conn_close(struct conn *c) {
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

static void free_dead(struct loop *l) {
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

static const char *reason(int status) {
  switch (status) {
  case 100:
    return "Continue";
  case 200:
    return "OK";
  case 204:
    return "No Content";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 406:
    return "Not Acceptable";
  case 408:
    return "Request Timeout";
  case 413:
    return "Content Too Large";
  case 414:
    return "URI Too Long";
  case 415:
    return "Unsupported Media Type";
  case 417:
    return "Expectation Failed";
  case 422:
    return "Unprocessable Content";
  case 429:
    return "Too Many Requests";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 501:
    return "Not Implemented";
  case 503:
    return "Service Unavailable";
  case 505:
    return "HTTP Version Not Supported";
  default:
    return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

/* The Date header's value for now, formatted once a second per thread. */
static const char *http_date(void) {
  static _Thread_local char text[40];
  static _Thread_local time_t last = -1;
  time_t t = time(NULL);
  if (t != last) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    last = t;
  }
  return text;
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
  int n = snprintf(out, cap, "HTTP/1.1 %d %s\r\nDate: %s\r\n", status, reason(status), http_date());
  if (!resp || resp->content_type)
    n += snprintf(out + n, cap - (size_t)n, "Content-Type: %s\r\n",
                  resp ? resp->content_type : "application/json");
  if (status != 204) n += snprintf(out + n, cap - (size_t)n, "Content-Length: %zu\r\n", len);
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
static void refuse(struct conn *c, enum api_error e, const char *msg) {
  char text[200];
  if (e == API_BODY_TOO_LARGE) {
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
  wake(l);
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
    refuse(c, API_BODY_TOO_LARGE, NULL);
    return -1;
  }
  enum api_error e = api_body_chunk(s->api, &r->req, data, n, msg, sizeof(msg));
  if (e != API_OK) {
    refuse(c, e, msg);
    return -1;
  }
  if (r->len + n > r->cap) { /* a chunked body grows, counted in the budget */
    size_t cap = r->cap ? r->cap : 65536;
    while (cap < r->len + n) cap *= 2;
    if (cap > s->cfg.max_body) cap = s->cfg.max_body;
    if (cap > r->counted && !budget_take(s, cap - r->counted)) {
      refuse(c, API_BUFFER_FULL, NULL);
      return -1;
    }
    if (cap > r->counted) r->counted = cap;
    uint8_t *b = realloc(r->body, cap);
    if (!b) {
      refuse(c, API_OUT_OF_MEMORY, NULL);
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
    enum api_error e = http1_chunk(&r->chunk, (const uint8_t *)c->in, c->in_len, &used, &data, &len,
                                   &done, msg, sizeof(msg));
    if (e != API_OK) {
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
  enum api_error e = http1_parse_head(head, n, &r->h, msg, sizeof(msg));
  begin(s, c, r);
  if (e != API_OK) {
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
    refuse(c, API_BODY_TOO_LARGE, NULL);
    return;
  }
  if (r->h.content_length > 0) {
    if (!budget_take(s, (size_t)r->h.content_length)) {
      refuse(c, API_BUFFER_FULL, NULL);
      return;
    }
    r->counted = r->cap = (size_t)r->h.content_length;
    if (!(r->body = malloc(r->cap))) {
      refuse(c, API_OUT_OF_MEMORY, NULL);
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
      enum api_error e = http1_head_overlong(c->in, c->in_len);
      if (e != API_OK) refuse(c, e, NULL);
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

static void conn_event(struct conn *c, unsigned events) {
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

/* ---- the loop ---- */

/* The jobs that called back: their answers go out on their connections, or are dropped. */
static void take_done(struct loop *l) {
  struct srv *s = l->srv;
  pthread_mutex_lock(&l->mu);
  struct request *r = l->done;
  l->done = NULL;
  pthread_mutex_unlock(&l->mu);
  while (r) {
    struct request *next = r->next;
    struct api_response *resp = r->resp;
    r->resp = NULL;
    r->job = 0;
    if (r->late) api_observe(s->api, &r->req, &r->outcome);
    if (r->conn && !r->answered) {
      answer(r->conn, resp, 0);
    } else {
      api_response_free(resp);
      if (!r->conn) request_free(s, r);
    }
    __atomic_sub_fetch(&s->jobs, 1, __ATOMIC_SEQ_CST); /* the last touch: srv_drain waits */
    r = next;
  }
}

/* The connections the gate passed on join the loop's epoll set. */
static void take_incoming(struct loop *l) {
  pthread_mutex_lock(&l->mu);
  struct conn *c = l->incoming;
  l->incoming = NULL;
  pthread_mutex_unlock(&l->mu);
  while (c) {
    struct conn *next = c->next;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    c->events = ev.events;
    c->prev = NULL, c->next = l->conns;
    if (l->conns) l->conns->prev = c;
    l->conns = c;
    if (epoll_ctl(l->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) conn_close(c);
    c = next;
  }
}

/* One connection's clocks. */
static void tick(struct conn *c, double now, int draining, int pressure) {
  struct srv *s = c->loop->srv;
  double idle = c->progress + 1e3 * (c->over >= 0 ? RESERVE_MS / 1e3 : s->cfg.timeout_s);
  switch (c->state) {
  case CS_HEAD:
    if (!c->head_start && !c->in_len) {
      if (draining || now > idle) conn_close(c);
    } else if (draining) {
      refuse(c, API_SHUTTING_DOWN, NULL);
    } else if (now > idle || now > c->head_start + 1e3 * s->cfg.request_timeout_s) {
      refuse(c, API_REQUEST_TIMEOUT, "The request's head did not arrive in time.");
    }
    break;
  case CS_BODY:
    if (draining)
      refuse(c, API_SHUTTING_DOWN, "The service is shutting down; the upload was not finished.");
    else if (now > idle || now > c->req->deadline)
      refuse(c, API_REQUEST_TIMEOUT, "The request's body did not arrive in time.");
    break;
  case CS_JOB:
    if (now > c->req->deadline) answer(c, api_error_response(API_DEADLINE_EXCEEDED, NULL), 0);
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

static void ticks(struct loop *l) {
  struct srv *s = l->srv;
  double now = api_now_ms(), until;
  __atomic_load(&s->pressure_until, &until, __ATOMIC_SEQ_CST);
  int draining = __atomic_load_n(&s->draining, __ATOMIC_SEQ_CST);
  for (struct conn *c = l->conns, *next; c; c = next) {
    next = c->next;
    tick(c, now, draining, now < until);
  }
  /* Idle: the freed uploads, images and answers go back to the system, so that RSS returns to
   * its baseline after a burst. */
  if (l->index == 0 && __atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST) == 0 &&
      __atomic_exchange_n(&s->freed, 0, __ATOMIC_SEQ_CST))
    malloc_trim(0);
}

static void *loop_main(void *arg) {
  struct loop *l = arg;
  struct srv *s = l->srv;
  struct epoll_event ev[128];
  double next_tick = api_now_ms() + TICK_MS;
  pthread_setname_np(pthread_self(), "blurd-http");
  while (!__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) {
    double now = api_now_ms();
    int timeout = now >= next_tick ? 0 : (int)(next_tick - now) + 1;
    int n = epoll_wait(l->ep, ev, 128, timeout);
    for (int i = 0; i < n; i++) {
      if (ev[i].data.ptr) {
        conn_event(ev[i].data.ptr, ev[i].events);
        continue;
      }
      uint64_t k;
      if (read(l->efd, &k, sizeof(k)) < 0) { /* another wake-up read it */
      }
      take_incoming(l);
      take_done(l);
      if (__atomic_load_n(&s->draining, __ATOMIC_SEQ_CST)) next_tick = 0; /* sweep now */
    }
    if (api_now_ms() >= next_tick) {
      ticks(l);
      next_tick = api_now_ms() + TICK_MS;
    }
    free_dead(l);
  }
  take_incoming(l);
  while (l->conns) conn_close(l->conns);
  free_dead(l);
  return NULL;
}

/* ---- the gate's callbacks ---- */

/* gate_config.pass: a loop takes the connection. */
static int pass(void *arg, int fd, const struct sockaddr *sa, socklen_t len, int over) {
  struct srv *s = arg;
  struct conn *c = calloc(1, sizeof(*c));
  int one = 1;
  if (!c || fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
    free(c);
    close(fd);
    return -1;
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct loop *l = &s->loops[__atomic_fetch_add(&s->next_loop, 1, __ATOMIC_RELAXED) % s->nloops];
  c->loop = l, c->fd = fd, c->over = over, c->progress = api_now_ms();
  memcpy(&c->addr, sa, len < sizeof(c->addr) ? len : sizeof(c->addr));
  pthread_mutex_lock(&l->mu);
  c->next = l->incoming;
  l->incoming = c;
  pthread_mutex_unlock(&l->mu);
  wake(l);
  return 0;
}

/* gate_config.is_probe: whether the request line line[0..n) asks for a probe. */
static int probe_line(void *arg, const char *line, size_t n) {
  char copy[512], *sp1, *sp2;
  (void)arg;
  if (n >= sizeof(copy)) return 0;
  memcpy(copy, line, n);
  copy[n] = 0;
  if (!(sp1 = strchr(copy, ' ')) || !(sp2 = strchr(sp1 + 1, ' '))) return 0;
  *sp1 = *sp2 = 0;
  return api_is_probe(copy, sp1 + 1);
}

/* gate_config.answer: the refusal's error, Retry-After, and an X-Request-Id of its own. */
static size_t gate_answer(void *arg, enum gate_refusal why, char *buf, size_t cap) {
  struct srv *s = arg;
  const struct canned *c = &s->canned[why];
  char id[API_REQUEST_ID_MAX + 1];
  api_request_id(s->api, NULL, id);
  api_refused(s->api, c->e);
  int n = snprintf(buf, cap,
                   "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nRetry-After: 1\r\nX-Request-Id: %s\r\n"
                   "Connection: close\r\n\r\n%.*s",
                   c->resp->status, reason(c->resp->status), http_date(), c->resp->len, id,
                   (int)c->resp->len, (const char *)c->resp->body);
  return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* ---- the server ---- */

int srv_listen(const char *bind, int port, char *err, size_t errlen) {
  return gate_listen(bind, port, err, errlen);
}

static int loops_start(struct srv *s, char *err, size_t errlen) {
  s->nloops = s->cfg.threads > 0 ? s->cfg.threads : 1;
  if (!(s->loops = calloc((size_t)s->nloops, sizeof(*s->loops)))) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < s->nloops; i++) {
    struct loop *l = &s->loops[i];
    *l = (struct loop){.srv = s, .ep = -1, .efd = -1, .index = i};
    pthread_mutex_init(&l->mu, NULL);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if ((l->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
        epoll_ctl(l->ep, EPOLL_CTL_ADD, l->efd, &ev) != 0 ||
        pthread_create(&l->thread, NULL, loop_main, l) != 0) {
      snprintf(err, errlen, "cannot start the HTTP threads: %s", strerror(errno));
      return -1;
    }
    l->started = 1;
  }
  return 0;
}

struct srv *srv_new(const struct srv_config *cfg, struct api_ctx *api, char *err, size_t errlen) {
  struct srv *s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(err, errlen, "out of memory");
    close(cfg->listen_fd);
    return NULL;
  }
  s->api = api;
  s->cfg = *cfg;
  static const enum api_error refusals[] = {[GATE_TOO_MANY] = API_TOO_MANY_CONNECTIONS,
                                            [GATE_TOO_MANY_FROM_IP] =
                                                API_TOO_MANY_CONNECTIONS_FROM_ADDRESS,
                                            [GATE_DRAINING] = API_SHUTTING_DOWN};
  int ok = 1;
  for (int i = 0; i < 3; i++) {
    s->canned[i] = (struct canned){refusals[i], api_error_response(refusals[i], NULL)};
    ok &= s->canned[i].resp != NULL;
  }
  if (!ok) snprintf(err, errlen, "out of memory");
  struct gate_config gc = {.fd = cfg->listen_fd,
                           .max_conns = cfg->max_conns,
                           .max_per_ip = cfg->max_conns_ip,
                           .reserve = RESERVE_CONNS,
                           .pass = pass,
                           .is_probe = probe_line,
                           .answer = gate_answer,
                           .arg = s};
  if (!ok || loops_start(s, err, errlen) != 0) {
    close(cfg->listen_fd);
  } else {
    s->gate = gate_new(&gc, err, errlen);
  }
  /* s->gate is set before the gate accepts: a connection it passes on may close at once, and its
   * loop releases it through s->gate */
  if (!s->gate || gate_start(s->gate, err, errlen) != 0) {
    srv_free(s);
    return NULL;
  }
  s->port = gate_port(s->gate);
  return s;
}

int srv_port(const struct srv *s) {
  return s->port;
}

int srv_drain(struct srv *s, double timeout_s) {
  __atomic_store_n(&s->draining, 1, __ATOMIC_SEQ_CST);
  gate_drain(s->gate); /* new connections: 503 shutting_down */
  for (int i = 0; i < s->nloops; i++) wake(&s->loops[i]);
  double end = api_now_ms() + timeout_s * 1e3;
  int n;
  /* requests with a complete head whose answers are not written, and jobs that have not called
   * back (of requests answered at their deadline, or whose clients left) */
  while ((n = __atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST) +
              __atomic_load_n(&s->jobs, __ATOMIC_SEQ_CST)) > 0 &&
         api_now_ms() < end)
    nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
  return n;
}

void srv_free(struct srv *s) {
  if (!s) return;
  gate_stop(s->gate); /* no new connections */
  __atomic_store_n(&s->stop, 1, __ATOMIC_SEQ_CST);
  for (int i = 0; s->loops && i < s->nloops; i++) {
    struct loop *l = &s->loops[i];
    if (l->started) {
      wake(l);
      pthread_join(l->thread, NULL); /* it closes its connections */
    }
    if (l->efd >= 0) close(l->efd);
    if (l->ep >= 0) close(l->ep);
    pthread_mutex_destroy(&l->mu);
  }
  gate_free(s->gate);
  for (int i = 0; i < 3; i++) api_response_free(s->canned[i].resp);
  free(s->loops);
  free(s);
}

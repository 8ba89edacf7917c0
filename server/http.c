/* libmicrohttpd glue. One struct request per HTTP request, created by the URI log callback (so
 * the raw request target, query string included, is kept as the client sent it). Once the
 * headers are in, the request's framing is checked (RFC 9112 6.3: one decimal Content-Length or
 * Transfer-Encoding chunked, never both; no Expect but 100-continue), the api admits it (API key,
 * CORS preflight) and its declared body is counted against the buffered-bytes budget, all before
 * the body is read. A request whose work is queued suspends its connection; the worker's callback
 * stores the response and resumes it, and the next call of the access handler sends it. A request
 * still queued at its deadline is answered 503 by the watchdog instead, so a request has two
 * holders while its job is queued (libmicrohttpd and the job) and is freed by whichever lets go
 * last. Every response carries the request's X-Request-Id and is reported back to the api
 * (api_observe) for the metrics and the access log; libmicrohttpd's own messages go to the
 * access log too (api_log). */
#include "server.h"

#include "../api/api.h"
#include "gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <microhttpd.h>
#include <malloc.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A TCP connection watched for its deadline. libmicrohttpd's timeout is an idle timeout, so a
 * client that trickles a byte a second (slow headers, slow body, slow reading) would hold a
 * connection for ever; the watchdog shuts down the socket of any connection past its absolute
 * deadline, which makes libmicrohttpd close it. A connection suspended on a queued job is
 * answered instead: the watchdog gives its request the 503 and resumes it. Entries are added and
 * removed by libmicrohttpd's connection notifications (removal comes before it closes the
 * socket) under watch_mu, so the watchdog never touches a socket number that has been reused,
 * and req is cleared (under watch_mu) before its request can be freed. */
struct conn_watch {
  MHD_socket fd;
  struct sockaddr_storage addr; /* the client's, for the gate's count */
  double deadline;     /* api_now_ms() of the cut; INFINITY between requests (idle timeout) */
  struct request *req; /* suspended on a job: the watchdog answers it at the deadline */
  struct conn_watch *prev, *next;
};

#define WATCH_PERIOD_MS 100
#define WATCH_GRACE_MS  1000 /* to write an answer that was ready at (or after) the deadline */

/* The answer to a connection refused unread: the error's status and JSON body. */
struct canned {
  enum api_error e;
  struct api_response *resp;
};

struct srv {
  struct MHD_Daemon *d;
  struct gate *gate;
  struct canned canned[3]; /* by enum gate_refusal */
  struct api_ctx *api;
  struct srv_config cfg;
  int inflight;    /* requests between their complete headers and their completion (atomic) */
  int draining;    /* responses say Connection: close (atomic) */
  int jobs;        /* requests a job holds: their done callbacks are to come (atomic) */
  size_t buffered; /* bytes of bodies held or promised and of responses not yet freed (atomic) */
  int port;
  pthread_mutex_t watch_mu;   /* guards watched and every entry's fields */
  struct conn_watch *watched; /* open connections */
  pthread_t watchdog;
  int watchdog_started;
  int stop;  /* tells the watchdog to end (atomic) */
  int freed; /* memory was freed since the last malloc_trim (atomic) */
};

#define NHEADERS 6 /* the headers the api reads (see begin) */

struct request {
  struct srv *srv;
  struct MHD_Connection *conn;
  char *uri;     /* raw request target */
  uint8_t *body; /* the body so far */
  size_t len, cap;
  size_t declared;        /* its Content-Length; 0 when chunked or empty */
  size_t counted;         /* bytes of it counted in srv->buffered */
  int started;            /* the access handler has seen the headers (counted in inflight) */
  enum api_error refusal; /* the body is dropped and this is the answer (API_OK: none) */
  char *refusal_msg;      /* its sentence (NULL: the error's own) */
  int cut; /* the rest of the body is dropped unread: answered at its end, or closed (on_request) */
  int close;                  /* the answer says Connection: close */
  int submitted;              /* handed to the api */
  pthread_mutex_t mu;         /* guards the fields below, shared with the worker and watchdog */
  struct api_response *resp;  /* the worker's (or the watchdog's) response, not yet sent */
  struct api_response *early; /* api_admit's answer, sent once the (empty) body is read */
  int suspended;              /* the connection waits for resp */
  int holders;                /* libmicrohttpd, plus the job while it runs: the last one frees */
  int job;                    /* a job holds the request (its done callback is to come) */
  int expired;                /* the watchdog answered it: the job's response is dropped */
  int closed;                 /* libmicrohttpd is done with it: conn must not be touched */
  int late;                   /* observe waits for the job (which still writes the trace) */
  struct api_outcome outcome; /* what observe reports */
  double deadline;            /* api_now_ms() by which the response must be ready */
  double t_start;             /* api_now_ms() at the request line */
  size_t received;            /* body bytes received, kept or dropped */
  int observed;               /* reported (or to be reported) to api_observe */
  struct api_request req;     /* what the api sees: headers from the first call, then body */
  struct api_trace trace;     /* the api's notes, handed back to api_observe */
  char *headers[NHEADERS];    /* copies of the headers req points to: its job may outlive the
                                 connection, whose memory holds libmicrohttpd's */
  char method[16];            /* HTTP method, for the log */
  char id[API_REQUEST_ID_MAX + 1]; /* X-Request-Id */
  char remote[INET6_ADDRSTRLEN];   /* the client's address */
};

static struct conn_watch *watch_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

/* Sets the connection's deadline (INFINITY: none) and the request suspended on a job (NULL:
 * none). */
static void watch_set(struct srv *s, struct MHD_Connection *c, double deadline,
                      struct request *req) {
  struct conn_watch *w = watch_of(c);
  if (!w) return;
  pthread_mutex_lock(&s->watch_mu);
  w->deadline = deadline;
  w->req = req;
  pthread_mutex_unlock(&s->watch_mu);
}

/* The response is ready: the connection gets at least WATCH_GRACE_MS more to write it. */
static void watch_answer(struct request *r) {
  watch_set(r->srv, r->conn, fmax(r->deadline, api_now_ms() + WATCH_GRACE_MS), NULL);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code) {
  struct srv *s = cls;
  struct conn_watch *w = *socket_ctx;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD),
                                   *ad = MHD_get_connection_info(
                                       c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!fd || !(w = calloc(1, sizeof(*w)))) { /* cannot watch it: the gate forgets it now */
      gate_release(s->gate, ad ? ad->client_addr : NULL);
      if (fd) shutdown(fd->connect_fd, SHUT_RDWR);
      return;
    }
    w->fd = fd->connect_fd;
    w->deadline = api_now_ms() + 1e3 * s->cfg.request_timeout_s;
    if (ad && ad->client_addr) memcpy(&w->addr, ad->client_addr, sizeof(struct sockaddr_in));
    pthread_mutex_lock(&s->watch_mu);
    w->next = s->watched;
    if (s->watched) s->watched->prev = w;
    s->watched = w;
    pthread_mutex_unlock(&s->watch_mu);
    *socket_ctx = w;
  } else if (w) {
    pthread_mutex_lock(&s->watch_mu);
    if (w->prev) w->prev->next = w->next;
    if (w->next) w->next->prev = w->prev;
    if (s->watched == w) s->watched = w->next;
    pthread_mutex_unlock(&s->watch_mu);
    gate_release(s->gate, (struct sockaddr *)&w->addr);
    free(w);
    *socket_ctx = NULL;
    __atomic_store_n(&s->freed, 1, __ATOMIC_SEQ_CST);
  }
}

/* Counts n more bytes in the budget when they fit; returns whether they did. */
static int budget_take(struct srv *s, size_t n) {
  size_t cur = __atomic_load_n(&s->buffered, __ATOMIC_SEQ_CST);
  do {
    if (n > s->cfg.max_buffered || cur > s->cfg.max_buffered - n) return 0;
  } while (!__atomic_compare_exchange_n(&s->buffered, &cur, cur + n, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST));
  return 1;
}

static void budget_give(struct srv *s, size_t n) {
  __atomic_sub_fetch(&s->buffered, n, __ATOMIC_SEQ_CST);
}

/* The watchdog's answer to a request still waiting for its job at the deadline (under
 * watch_mu): the 503 the job would give, sent now; the job's own response will be dropped.
 * Returns 0 when the connection is not suspended (yet, or any more: its answer is on its way). */
static int expire(struct request *r) {
  pthread_mutex_lock(&r->mu);
  int now = r->suspended;
  if (now) {
    r->resp = api_error_response(API_DEADLINE_EXCEEDED, NULL);
    r->expired = 1;
    r->suspended = 0;
    MHD_resume_connection(r->conn);
  }
  pthread_mutex_unlock(&r->mu);
  return now;
}

static void *watchdog_main(void *arg) {
  struct srv *s = arg;
  pthread_setname_np(pthread_self(), "blurd-watch");
  while (!__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) {
    nanosleep(&(struct timespec){0, WATCH_PERIOD_MS * 1000 * 1000}, NULL);
    double now = api_now_ms();
    pthread_mutex_lock(&s->watch_mu);
    for (struct conn_watch *w = s->watched; w; w = w->next) {
      if (now <= w->deadline) continue;
      if (w->req) { /* answer it, and cut it if the answer is not written in time either */
        if (expire(w->req)) w->req = NULL, w->deadline = now + WATCH_GRACE_MS;
      } else {
        shutdown(w->fd, SHUT_RDWR); /* libmicrohttpd sees the end and closes the connection */
        w->deadline = INFINITY;
      }
    }
    pthread_mutex_unlock(&s->watch_mu);
    /* Idle: the freed uploads, images and answers go back to the system, so that RSS returns to
     * its baseline after a burst. */
    if (__atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_exchange_n(&s->freed, 0, __ATOMIC_SEQ_CST))
      malloc_trim(0);
  }
  return NULL;
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
  struct srv *s = cls;
  static _Thread_local int named; /* libmicrohttpd's threads, named on their first request */
  if (!named) named = pthread_setname_np(pthread_self(), "blurd-http") == 0;
  struct request *r = calloc(1, sizeof(*r));
  if (!r || !(r->uri = strdup(uri ? uri : "/"))) {
    free(r);
    return NULL; /* the access handler then closes the connection */
  }
  r->srv = s;
  r->conn = conn;
  r->t_start = api_now_ms();
  r->deadline = r->t_start + 1e3 * s->cfg.request_timeout_s;
  r->holders = 1; /* libmicrohttpd */
  watch_set(s, conn, r->deadline, NULL);
  pthread_mutex_init(&r->mu, NULL);
  return r;
}

/* Reports the answer to the api, once; while a job still writes the trace, its done callback
 * reports it instead. */
static void observe(struct request *r, int status, size_t response_bytes) {
  if (r->observed) return;
  r->observed = 1;
  r->outcome = (struct api_outcome){status, r->received, response_bytes};
  pthread_mutex_lock(&r->mu);
  int late = r->late = r->job; /* on_done clears r->late when it reports */
  pthread_mutex_unlock(&r->mu);
  if (!late) api_observe(r->srv->api, &r->req, &r->outcome);
}

/* Frees r and what it holds; its last holder calls it. */
static void request_free(struct request *r) {
  struct srv *s = r->srv;
  api_response_free(r->resp);
  api_response_free(r->early);
  pthread_mutex_destroy(&r->mu);
  budget_give(s, r->counted);
  for (int i = 0; i < NHEADERS; i++) free(r->headers[i]);
  free(r->refusal_msg);
  free(r->body);
  free(r->uri);
  free(r);
  __atomic_store_n(&s->freed, 1, __ATOMIC_SEQ_CST);
}

/* Drops one holder under r->mu; returns whether it was the last. */
static int release(struct request *r) {
  pthread_mutex_lock(&r->mu);
  int last = --r->holders == 0;
  pthread_mutex_unlock(&r->mu);
  return last;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
  struct srv *s = cls;
  struct request *r = *req_cls;
  (void)toe;
  if (!r) return;
  *req_cls = NULL;
  if (r->started && !r->observed) /* no response was sent: the client left, or the body was cut */
    observe(r, r->refusal ? api_error_status(r->refusal) : 499, 0);
  watch_set(s, conn, INFINITY, NULL); /* idle until the next request: the idle timeout applies */
  pthread_mutex_lock(&r->mu);
  r->closed = 1; /* a job still running must not touch the connection */
  r->suspended = 0;
  pthread_mutex_unlock(&r->mu);
  int counted = r->started;
  if (release(r)) request_free(r);
  if (counted) __atomic_sub_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
}

struct held { /* a response body libmicrohttpd holds, counted in the budget */
  struct srv *srv;
  uint8_t *body;
  size_t len;
};

static void held_free(void *cls) {
  struct held *h = cls;
  budget_give(h->srv, h->len);
  free(h->body);
  free(h);
}

/* A libmicrohttpd response over resp's body (taken from resp), counted in the budget until
 * libmicrohttpd frees it. */
static struct MHD_Response *mhd_response(struct srv *s, struct api_response *resp) {
  struct held *h = malloc(sizeof(*h));
  struct MHD_Response *m = NULL;
  if (h) {
    *h = (struct held){s, resp->body, resp->len};
    m = MHD_create_response_from_buffer_with_free_callback_cls(resp->len, resp->body, held_free, h);
  }
  if (!m) {
    free(h);
    return NULL;
  }
  __atomic_add_fetch(&s->buffered, resp->len, __ATOMIC_SEQ_CST);
  resp->body = NULL; /* held_free frees it */
  return m;
}

static enum MHD_Result send_response(struct request *r, struct api_response *resp) {
  static char oom[] = "{\"error\":{\"status\":500,\"code\":\"internal_error\","
                      "\"message\":\"The service could not build a response.\"}}";
  struct MHD_Response *m;
  int status = resp ? resp->status : 500;
  size_t len = resp ? resp->len : sizeof(oom) - 1;
  api_finish(r->srv->api, &r->req, resp);
  if (resp)
    m = mhd_response(r->srv, resp);
  else
    m = MHD_create_response_from_buffer(sizeof(oom) - 1, oom, MHD_RESPMEM_PERSISTENT);
  if (!m) {
    api_response_free(resp);
    return MHD_NO;
  }
  if (!resp || resp->content_type)
    MHD_add_response_header(m, "Content-Type", resp ? resp->content_type : "application/json");
  MHD_add_response_header(m, "X-Request-Id", r->id);
  for (int i = 0; resp && i < resp->nheaders; i++)
    MHD_add_response_header(m, resp->headers[i].name, resp->headers[i].value);
  if (r->close || __atomic_load_n(&r->srv->draining, __ATOMIC_SEQ_CST))
    MHD_add_response_header(m, "Connection", "close");
  enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, m);
  MHD_destroy_response(m);
  api_response_free(resp);
  observe(r, status, len);
  return ret;
}

/* Called by a worker thread: can the client no longer read the answer? A suspended connection
 * is not polled by libmicrohttpd, so the worker looks at the socket itself and skips the work.
 * A client that only shut its sending side (POLLRDHUP) still reads: it is not gone. */
static int client_gone(void *udata) {
  struct request *r = udata;
  pthread_mutex_lock(&r->mu);
  int gone = r->closed || r->expired;
  if (!gone) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct pollfd p = {ci ? ci->connect_fd : -1, POLLIN, 0};
    gone = ci && poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
  }
  pthread_mutex_unlock(&r->mu);
  return gone;
}

/* Called by a worker thread when the job is done. The connection is resumed under r->mu, so
 * that on_completed (which sets closed under r->mu) cannot have let libmicrohttpd free it, even
 * at shutdown; r itself stays allocated after the resume, whatever libmicrohttpd's thread then
 * does, because the job is one of its holders and lets go last (release). */
static void on_done(void *udata, struct api_response *resp) {
  struct request *r = udata;
  struct srv *s = r->srv;
  pthread_mutex_lock(&r->mu);
  int keep = !r->expired && !r->closed, late = r->late;
  r->job = r->late = 0;
  if (keep) r->resp = resp;
  if (keep && r->suspended) {
    r->suspended = 0;
    MHD_resume_connection(r->conn);
  }
  pthread_mutex_unlock(&r->mu);
  if (!keep) api_response_free(resp); /* the client had its answer, or left */
  if (late) api_observe(s->api, &r->req, &r->outcome);
  if (release(r)) request_free(r);
  __atomic_sub_fetch(&s->jobs, 1, __ATOMIC_SEQ_CST); /* the last touch of s: srv_drain waits */
}

/* Refuses the body with e (msg: NULL for e's sentence): what comes of it is dropped. */
static void refuse_body(struct request *r, enum api_error e, const char *msg) {
  if (!r->refusal) {
    r->refusal = e;
    r->refusal_msg = msg ? strdup(msg) : NULL;
  }
  free(r->body);
  r->body = NULL;
  r->len = r->cap = 0;
}

/* The answer to a refused body. */
static enum MHD_Result send_refusal(struct request *r) {
  char msg[160];
  const char *text = r->refusal_msg;
  if (r->refusal == API_BODY_TOO_LARGE) {
    snprintf(msg, sizeof(msg), "The request body is larger than the limit of %zu bytes.",
             r->srv->cfg.max_body);
    text = msg;
  }
  return send_response(r, api_error_response(r->refusal, text));
}

/* Room for n more bytes of body, counted in the budget. Returns 0, or -1 after refusing it. */
static int grow(struct request *r, size_t n) {
  size_t max = r->srv->cfg.max_body, cap = r->declared ? r->declared : r->cap ? r->cap : 65536;
  while (cap < r->len + n) cap *= 2;
  if (cap > max) cap = max;
  if (cap > r->counted && !budget_take(r->srv, cap - r->counted)) {
    refuse_body(r, API_BUFFER_FULL, NULL);
    return -1;
  }
  if (cap > r->counted) r->counted = cap;
  uint8_t *b = realloc(r->body, cap);
  if (!b) {
    refuse_body(r, API_OUT_OF_MEMORY, NULL);
    r->cut = 1; /* drop the rest like an oversized body */
    return -1;
  }
  r->body = b;
  r->cap = cap;
  return 0;
}

static void append(struct request *r, const char *data, size_t n) {
  char msg[256];
  r->received += n;
  if (r->received > r->srv->cfg.max_body && r->refusal != API_BODY_TOO_LARGE) {
    /* whatever came first, this one cuts it off */
    free(r->refusal_msg);
    r->refusal_msg = NULL;
    r->refusal = API_OK;
    refuse_body(r, API_BODY_TOO_LARGE, NULL);
    r->cut = 1;
    return;
  }
  if (r->refusal || r->cut) return;
  enum api_error e =
      api_body_chunk(r->srv->api, &r->req, (const uint8_t *)data, n, msg, sizeof(msg));
  if (e != API_OK) {
    refuse_body(r, e, msg);
    return;
  }
  if (r->len + n > r->cap && grow(r, n) != 0) return;
  memcpy(r->body + r->len, data, n);
  r->len += n;
}

/* The client's address as text in r->remote. */
static void remote_address(struct request *r) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = ci ? ci->client_addr : NULL;
  if (sa && sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, r->remote, sizeof(r->remote));
  else if (sa && sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, r->remote,
              sizeof(r->remote));
}

/* A copy of header name (the i-th kept), or NULL when it is absent (or out of memory). */
static const char *keep_header(struct request *r, int i, const char *name) {
  const char *v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
  return r->headers[i] = v ? strdup(v) : NULL;
}

/* The headers are in: fill what the api sees of the request (its body comes in submit). */
static void begin(struct request *r, const char *method) {
  snprintf(r->method, sizeof(r->method), "%s", method);
  api_request_id(r->srv->api, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id"),
                 r->id);
  remote_address(r);
  r->req = (struct api_request){.method = r->method,
                                .uri = r->uri,
                                .content_type = keep_header(r, 0, "Content-Type"),
                                .accept = keep_header(r, 1, "Accept"),
                                .deadline = r->deadline,
                                .client_gone = client_gone,
                                .authorization = keep_header(r, 2, "Authorization"),
                                .api_key = keep_header(r, 3, "X-API-Key"),
                                .origin = keep_header(r, 4, "Origin"),
                                .cors_method = keep_header(r, 5, "Access-Control-Request-Method"),
                                .id = r->id,
                                .remote = r->remote,
                                .t_start = r->t_start,
                                .trace = &r->trace};
}

/* The body is complete: hand the request to the api. While its job is queued the request has
 * two holders and the watchdog may answer it (watch_set before r->mu: the watchdog takes
 * watch_mu, then r->mu). */
static enum MHD_Result submit(struct request *r) {
  struct MHD_Connection *c = r->conn;
  r->req.body = r->body;
  r->req.body_len = r->len;
  r->req.t_received = api_now_ms();
  r->submitted = 1;
  pthread_mutex_lock(&r->mu);
  r->holders++, r->job = 1; /* done may come before api_handle returns */
  pthread_mutex_unlock(&r->mu);
  __atomic_add_fetch(&r->srv->jobs, 1, __ATOMIC_SEQ_CST);
  struct api_response *resp = api_handle(r->srv->api, &r->req, on_done, r);
  if (resp) { /* no job: done never comes */
    pthread_mutex_lock(&r->mu);
    r->holders--, r->job = 0;
    pthread_mutex_unlock(&r->mu);
    __atomic_sub_fetch(&r->srv->jobs, 1, __ATOMIC_SEQ_CST);
    return send_response(r, resp);
  }
  watch_set(r->srv, c, r->deadline, r);
  pthread_mutex_lock(&r->mu);
  resp = r->resp; /* the job may already be done */
  r->resp = NULL;
  if (!resp) {
    MHD_suspend_connection(c);
    r->suspended = 1;
  }
  pthread_mutex_unlock(&r->mu);
  if (!resp) return MHD_YES;
  watch_answer(r);
  return send_response(r, resp);
}

static enum MHD_Result send_early(struct request *r) {
  struct api_response *resp = r->early;
  r->early = NULL;
  return send_response(r, resp);
}

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
  (void)kind;
  api_framing_add(cls, key, value);
  return MHD_YES;
}

/* Whether the request's framing is one blurd serves (api_framing_check); otherwise the error,
 * with a sentence in msg. */
static enum api_error framing_error(struct MHD_Connection *c, char *msg, size_t n) {
  struct api_framing f = {0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &f);
  return api_framing_check(&f, msg, n);
}

/* The answer sent before the body is read: the connection closes after it, as libmicrohttpd
 * cannot tell where an unread body ends. */
static enum MHD_Result refuse_now(struct request *r, enum api_error e, const char *msg) {
  r->close = 1;
  refuse_body(r, e, msg);
  return send_refusal(r);
}

/* The first call of the access handler: the headers are in, the body (if any) is not. */
static enum MHD_Result headers_in(struct request *r, const char *method) {
  struct MHD_Connection *c = r->conn;
  char msg[160];
  r->started = 1;
  __atomic_add_fetch(&r->srv->inflight, 1, __ATOMIC_SEQ_CST);
  begin(r, method);
  enum api_error e = framing_error(c, msg, sizeof(msg));
  if (e != API_OK) return refuse_now(r, e, msg);
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
  unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
  r->early = api_admit(r->srv->api, &r->req);
  /* An answer sent now closes the connection: when there is no body, it waits for the next
   * call and the connection stays open. */
  if (r->early &&
      (declared > 0 || MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding"))) {
    r->close = 1;
    return send_early(r);
  }
  if (r->early) return MHD_YES;
  if (declared > r->srv->cfg.max_body) return refuse_now(r, API_BODY_TOO_LARGE, NULL);
  if (declared > 0 && !budget_take(r->srv, (size_t)declared))
    return refuse_now(r, API_BUFFER_FULL, NULL);
  r->declared = r->counted = (size_t)declared;
  return MHD_YES;
}

/* Why on_request just closed a connection on purpose (for mhd_log's next line), or NULL. */
static _Thread_local const char *closing_why;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **req_cls) {
  struct request *r = *req_cls;
  (void)cls, (void)url, (void)version, (void)conn;
  if (!r) return MHD_NO; /* out of memory in on_uri */
  if (!r->started) return headers_in(r, method);
  if (*upload_size > 0 && r->early) { /* a body after all (chunked): refuse it unread */
    *upload_size = 0;
    return send_early(r);
  }
  if (*upload_size > 0) {
    append(r, upload_data, *upload_size);
    *upload_size = 0;
    /* libmicrohttpd cannot answer before the body is read (MHD_queue_response refuses mid-body),
     * so the rest of a chunked body over --max-body is read and dropped, and answered 413 at its
     * end; past another --max-body bytes, or past the request deadline, the connection is closed
     * instead. */
    size_t max = r->srv->cfg.max_body;
    int past_limit = r->cut && r->received > max && r->received - max > max;
    if (past_limit || api_now_ms() > r->deadline) {
      closing_why =
          past_limit ? "a chunked body past twice --max-body" : "an upload past its deadline";
      return MHD_NO;
    }
    return MHD_YES;
  }
  if (r->early) return send_early(r);
  if (r->refusal) return send_refusal(r);
  if (!r->submitted) return submit(r);
  watch_answer(r); /* resumed: the worker (or the watchdog) left the response */
  pthread_mutex_lock(&r->mu);
  struct api_response *resp = r->resp;
  r->resp = NULL;
  pthread_mutex_unlock(&r->mu);
  return send_response(r, resp);
}

/* libmicrohttpd's messages (a bad request it answered itself, an internal error) as JSON lines of
 * the access log instead of plain text on stderr. Its "Application reported internal error" right
 * after on_request closed a connection on purpose (closing_why, same thread) is labelled as that,
 * at level info, so that nobody reads it as a fault. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
  struct srv *s = cls;
  char msg[512], labelled[700];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  msg[strcspn(msg, "\n")] = 0;
  const char *why = closing_why;
  closing_why = NULL;
  if (why && strncmp(msg, "Application reported internal error", 35) == 0) {
    snprintf(labelled, sizeof(labelled), "expected: blurd closed the connection on %s (%s)", why,
             msg);
    api_log(s->api, "info", "libmicrohttpd", labelled);
    return;
  }
  api_log(s->api, "warn", "libmicrohttpd", msg);
}

/* gate_config.pass: libmicrohttpd takes the connection. */
static int pass(void *arg, int fd, const struct sockaddr *sa, socklen_t len) {
  struct srv *s = arg;
  return MHD_add_connection(s->d, fd, sa, len) == MHD_YES ? 0 : -1;
}

/* gate_config.answer: the refusal's error, Retry-After, and an X-Request-Id of its own. */
static size_t answer(void *arg, enum gate_refusal why, char *buf, size_t cap) {
  struct srv *s = arg;
  const struct canned *c = &s->canned[why];
  char id[API_REQUEST_ID_MAX + 1];
  api_request_id(s->api, NULL, id);
  api_refused(s->api, c->e);
  int n = snprintf(buf, cap,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Retry-After: 1\r\nX-Request-Id: %s\r\nConnection: close\r\n\r\n%.*s",
                   c->resp->status, MHD_get_reason_phrase_for((unsigned)c->resp->status),
                   c->resp->len, id, (int)c->resp->len, (const char *)c->resp->body);
  return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

int srv_listen(const char *bind, int port, char *err, size_t errlen) {
  return gate_listen(bind, port, err, errlen);
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
  pthread_mutex_init(&s->watch_mu, NULL);
  static const enum api_error refusals[] = {[GATE_TOO_MANY] = API_TOO_MANY_CONNECTIONS,
                                            [GATE_TOO_MANY_FROM_IP] =
                                                API_TOO_MANY_CONNECTIONS_FROM_ADDRESS,
                                            [GATE_DRAINING] = API_SHUTTING_DOWN};
  for (int i = 0; i < 3; i++) {
    s->canned[i] = (struct canned){refusals[i], api_error_response(refusals[i], NULL)};
    if (!s->canned[i].resp) {
      snprintf(err, errlen, "out of memory");
      close(cfg->listen_fd);
      srv_free(s);
      return NULL;
    }
  }
  /* The gate accepts; libmicrohttpd serves what it passes on. Its own limits stay out of the way
   * (it divides the total among its threads). */
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                   MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
  s->d = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
      MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->threads, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s,
      MHD_OPTION_CONNECTION_LIMIT, (cfg->max_conns + 16) * (unsigned)cfg->threads,
      MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
  struct gate_config gc = {cfg->listen_fd, cfg->max_conns, cfg->max_conns_ip, pass, answer, s};
  if (!s->d) {
    snprintf(err, errlen, "cannot start the HTTP threads");
    close(cfg->listen_fd);
  } else {
    s->gate = gate_new(&gc, err, errlen);
  }
  /* s->gate is set before the gate accepts: a connection it passes on may close at once, and
   * on_connection releases it there (a restart under load crashed on the NULL gate in CI) */
  if (!s->gate || gate_start(s->gate, err, errlen) != 0) {
    srv_free(s);
    return NULL;
  }
  s->port = gate_port(s->gate);
  s->watchdog_started = pthread_create(&s->watchdog, NULL, watchdog_main, s) == 0;
  return s;
}

int srv_port(const struct srv *s) {
  return s->port;
}

int srv_drain(struct srv *s, double timeout_s) {
  __atomic_store_n(&s->draining, 1, __ATOMIC_SEQ_CST);
  gate_drain(s->gate); /* new connections: 503 shutting_down */
  double end = api_now_ms() + timeout_s * 1e3;
  int n;
  /* requests with complete headers, and jobs whose requests were answered (at their deadline)
   * but whose done callbacks are still to come */
  while ((n = __atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST) +
              __atomic_load_n(&s->jobs, __ATOMIC_SEQ_CST)) > 0 &&
         api_now_ms() < end)
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  return n;
}

void srv_free(struct srv *s) {
  if (!s) return;
  gate_stop(s->gate); /* no new connections */
  if (s->d)
    MHD_stop_daemon(s->d); /* closes every connection: the watch list empties, and each
                              one's count goes back to the gate */
  gate_free(s->gate);
  __atomic_store_n(&s->stop, 1, __ATOMIC_SEQ_CST);
  if (s->watchdog_started) pthread_join(s->watchdog, NULL);
  pthread_mutex_destroy(&s->watch_mu);
  for (int i = 0; i < 3; i++) api_response_free(s->canned[i].resp);
  free(s);
}

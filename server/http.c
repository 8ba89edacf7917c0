/* libmicrohttpd glue. One struct request per HTTP request, created by the URI log callback (so
 * the raw request target, query string included, is kept as the client sent it) and freed in
 * one place, the request-completed callback. Once the headers are in, the api admits the request
 * (API key, CORS preflight) before its body is read. A request whose work is queued suspends its
 * connection; the worker's callback stores the response and resumes it, and the next call of
 * the access handler sends it. Every response carries the request's X-Request-Id and is reported
 * back to the api (api_observe) for the metrics and the access log. */
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A TCP connection watched for its deadline. libmicrohttpd's timeout is an idle timeout, so a
 * client that trickles a byte a second (slow headers, slow body, slow reading) would hold a
 * connection for ever; the watchdog shuts down the socket of any connection past its absolute
 * deadline, which makes libmicrohttpd close it. Entries are added and removed by libmicrohttpd's
 * connection notifications (removal comes before it closes the socket) under watch_mu, so the
 * watchdog never touches a socket number that has been reused. */
struct conn_watch {
  MHD_socket fd;
  struct sockaddr_storage addr; /* the client's, for the gate's count */
  double deadline; /* api_now_ms() of the cut; INFINITY between requests (idle timeout) */
  int suspended;   /* a job holds it: it gets WATCH_GRACE_MS to answer 503 itself */
  struct conn_watch *prev, *next;
};

#define WATCH_PERIOD_MS 100
#define WATCH_GRACE_MS  1000

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
  int inflight; /* requests between their first line and their completion (atomic) */
  int draining; /* responses say Connection: close (atomic) */
  int port;
  pthread_mutex_t watch_mu;   /* guards watched and every entry's fields */
  struct conn_watch *watched; /* open connections */
  pthread_t watchdog;
  int watchdog_started;
  int stop;  /* tells the watchdog to end (atomic) */
  int freed; /* memory was freed since the last malloc_trim (atomic) */
};

static struct conn_watch *watch_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

/* Sets the connection's deadline (INFINITY: none) and whether a job holds it. */
static void watch_set(struct srv *s, struct MHD_Connection *c, double deadline, int suspended) {
  struct conn_watch *w = watch_of(c);
  if (!w) return;
  pthread_mutex_lock(&s->watch_mu);
  w->deadline = deadline;
  w->suspended = suspended;
  pthread_mutex_unlock(&s->watch_mu);
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

static void *watchdog_main(void *arg) {
  struct srv *s = arg;
  while (!__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) {
    nanosleep(&(struct timespec){0, WATCH_PERIOD_MS * 1000 * 1000}, NULL);
    double now = api_now_ms();
    pthread_mutex_lock(&s->watch_mu);
    for (struct conn_watch *w = s->watched; w; w = w->next)
      if (now > w->deadline + (w->suspended ? WATCH_GRACE_MS : 0)) {
        shutdown(w->fd, SHUT_RDWR); /* libmicrohttpd sees the end and closes the connection */
        w->deadline = INFINITY;
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

struct request {
  struct srv *srv;
  struct MHD_Connection *conn;
  char *uri;     /* raw request target */
  uint8_t *body; /* the body so far */
  size_t len, cap;
  int started;                /* the access handler has seen the headers */
  int too_large;              /* the body passed max_body: it is dropped, the answer is 413 */
  int no_memory;              /* the body could not be stored: the answer is 503 */
  int submitted;              /* handed to the api */
  pthread_mutex_t mu;         /* guards resp and suspended, shared with the worker */
  struct api_response *resp;  /* the worker's response, not yet sent */
  struct api_response *early; /* api_admit's answer, sent once the (empty) body is read */
  int suspended;
  double deadline;                 /* api_now_ms() by which the response must be ready */
  double t_start;                  /* api_now_ms() at the request line */
  size_t received;                 /* body bytes received, kept or dropped */
  int observed;                    /* reported to api_observe */
  struct api_request req;          /* what the api sees: headers from the first call, then body */
  struct api_trace trace;          /* the api's notes, handed back to api_observe */
  char method[16];                 /* HTTP method, for the log */
  char id[API_REQUEST_ID_MAX + 1]; /* X-Request-Id */
  char remote[INET6_ADDRSTRLEN];   /* the client's address */
};

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
  struct srv *s = cls;
  struct request *r = calloc(1, sizeof(*r));
  if (!r) return NULL;
  r->srv = s;
  r->conn = conn;
  r->uri = strdup(uri ? uri : "/");
  r->t_start = api_now_ms();
  r->deadline = r->t_start + 1e3 * s->cfg.request_timeout_s;
  watch_set(s, conn, r->deadline, 0);
  pthread_mutex_init(&r->mu, NULL);
  __atomic_add_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
  return r;
}

/* Reports the answer to the api, once. */
static void observe(struct request *r, int status, size_t response_bytes) {
  if (r->observed) return;
  r->observed = 1;
  struct api_outcome o = {status, r->received, response_bytes};
  api_observe(r->srv->api, &r->req, &o);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
  struct srv *s = cls;
  struct request *r = *req_cls;
  (void)toe;
  if (!r) return;
  *req_cls = NULL;
  if (r->started && !r->observed) /* no response was sent: the client left, or the body was cut */
    observe(r, r->no_memory ? 503 : r->too_large ? 413 : 499, 0);
  watch_set(s, conn, INFINITY, 0); /* idle until the next request: the idle timeout applies */
  api_response_free(r->resp);
  api_response_free(r->early);
  pthread_mutex_destroy(&r->mu);
  free(r->body);
  free(r->uri);
  free(r);
  __atomic_store_n(&s->freed, 1, __ATOMIC_SEQ_CST);
  __atomic_sub_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
}

static enum MHD_Result send_response(struct request *r, struct api_response *resp) {
  static char oom[] = "{\"error\":{\"status\":500,\"code\":\"internal_error\","
                      "\"message\":\"The service could not build a response.\"}}";
  struct MHD_Response *m;
  int status = resp ? resp->status : 500;
  size_t len = resp ? resp->len : sizeof(oom) - 1;
  api_finish(r->srv->api, &r->req, resp);
  if (resp) {
    m = MHD_create_response_from_buffer(resp->len, resp->body, MHD_RESPMEM_MUST_FREE);
    if (m) resp->body = NULL; /* MHD frees it */
  } else {
    m = MHD_create_response_from_buffer(sizeof(oom) - 1, oom, MHD_RESPMEM_PERSISTENT);
  }
  if (!m) {
    api_response_free(resp);
    return MHD_NO;
  }
  if (!resp || resp->content_type)
    MHD_add_response_header(m, "Content-Type", resp ? resp->content_type : "application/json");
  MHD_add_response_header(m, "X-Request-Id", r->id);
  for (int i = 0; resp && i < resp->nheaders; i++)
    MHD_add_response_header(m, resp->headers[i].name, resp->headers[i].value);
  if (__atomic_load_n(&r->srv->draining, __ATOMIC_SEQ_CST))
    MHD_add_response_header(m, "Connection", "close");
  enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, m);
  MHD_destroy_response(m);
  api_response_free(resp);
  observe(r, status, len);
  return ret;
}

/* Called by a worker thread: has the client closed its side? A suspended connection is not
 * polled by libmicrohttpd, so the worker looks at the socket itself and skips the work. */
static int client_gone(void *udata) {
  struct request *r = udata;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  struct pollfd p = {ci ? ci->connect_fd : -1, POLLIN | POLLRDHUP, 0};
  return ci && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Called by a worker thread when the job is done. The connection is resumed after r->mu is
 * released, and r is not touched after that: once resumed, libmicrohttpd's thread may see that the
 * client has gone and free r in on_completed (mutex included) before this thread runs again. */
static void on_done(void *udata, struct api_response *resp) {
  struct request *r = udata;
  struct MHD_Connection *conn = r->conn;
  pthread_mutex_lock(&r->mu);
  r->resp = resp;
  int resume = r->suspended;
  r->suspended = 0;
  pthread_mutex_unlock(&r->mu);
  if (resume) MHD_resume_connection(conn); /* still suspended until here: r and conn live */
}

static enum MHD_Result too_large(struct request *r) {
  char msg[160];
  if (r->no_memory) return send_response(r, api_error_response(API_OUT_OF_MEMORY, NULL));
  snprintf(msg, sizeof(msg), "The request body is larger than the limit of %zu bytes.",
           r->srv->cfg.max_body);
  return send_response(r, api_error_response(API_BODY_TOO_LARGE, msg));
}

static void append(struct request *r, const char *data, size_t n) {
  size_t max = r->srv->cfg.max_body;
  r->received += n;
  if (r->too_large || n > max - r->len) {
    r->too_large = 1;
    free(r->body);
    r->body = NULL;
    r->len = r->cap = 0;
    return;
  }
  if (r->len + n > r->cap) {
    size_t cap = r->cap ? r->cap : 64 * 1024;
    while (cap < r->len + n) cap *= 2;
    if (cap > max) cap = max;
    uint8_t *b = realloc(r->body, cap);
    if (!b) {
      r->no_memory = r->too_large = 1; /* drop the rest like an oversized body */
      return;
    }
    r->body = b;
    r->cap = cap;
  }
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

/* The headers are in: fill what the api sees of the request (its body comes in submit). */
static void begin(struct request *r, const char *method) {
  struct MHD_Connection *c = r->conn;
#define HEADER(name) MHD_lookup_connection_value(c, MHD_HEADER_KIND, name)
  snprintf(r->method, sizeof(r->method), "%s", method);
  api_request_id(r->srv->api, HEADER("X-Request-Id"), r->id);
  remote_address(r);
  r->req = (struct api_request){.method = r->method,
                                .uri = r->uri,
                                .content_type = HEADER("Content-Type"),
                                .accept = HEADER("Accept"),
                                .deadline = r->deadline,
                                .client_gone = client_gone,
                                .authorization = HEADER("Authorization"),
                                .api_key = HEADER("X-API-Key"),
                                .origin = HEADER("Origin"),
                                .cors_method = HEADER("Access-Control-Request-Method"),
                                .id = r->id,
                                .remote = r->remote,
                                .t_start = r->t_start,
                                .trace = &r->trace};
#undef HEADER
}

/* The body is complete: hand the request to the api. */
static enum MHD_Result submit(struct request *r) {
  struct MHD_Connection *c = r->conn;
  r->req.body = r->body;
  r->req.body_len = r->len;
  r->req.t_received = api_now_ms();
  r->submitted = 1;
  struct api_response *resp = api_handle(r->srv->api, &r->req, on_done, r);
  if (resp) return send_response(r, resp);
  pthread_mutex_lock(&r->mu);
  resp = r->resp; /* the job may already be done */
  r->resp = NULL;
  if (!resp) {
    watch_set(r->srv, c, r->deadline, 1);
    MHD_suspend_connection(c);
    r->suspended = 1;
  }
  pthread_mutex_unlock(&r->mu);
  return resp ? send_response(r, resp) : MHD_YES;
}

static enum MHD_Result send_early(struct request *r) {
  struct api_response *resp = r->early;
  r->early = NULL;
  return send_response(r, resp);
}

/* The first call of the access handler: the headers are in, the body (if any) is not. */
static enum MHD_Result headers_in(struct request *r, const char *method) {
  struct MHD_Connection *c = r->conn;
  r->started = 1;
  begin(r, method);
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
  r->early = api_admit(r->srv->api, &r->req);
  /* An answer sent now closes the connection (libmicrohttpd cannot tell where an unread body
   * ends): when there is no body, it waits for the next call and the connection stays open. */
  if (r->early && ((cl && strtoull(cl, NULL, 10) > 0) ||
                   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding")))
    return send_early(r);
  if (!r->early && cl && strtoull(cl, NULL, 10) > r->srv->cfg.max_body) return too_large(r);
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **req_cls) {
  struct request *r = *req_cls;
  (void)cls, (void)url, (void)version;
  if (!r) return MHD_NO; /* out of memory in on_uri */
  if (!r->started) return headers_in(r, method);
  if (*upload_size > 0 && r->early) { /* a body after all (chunked): refuse it unread */
    *upload_size = 0;
    return send_early(r);
  }
  if (*upload_size > 0) {
    append(r, upload_data, *upload_size);
    *upload_size = 0;
    /* libmicrohttpd cannot answer before the body is read (MHD_queue_response refuses): an
     * oversized chunked body, or an upload past the request deadline, is cut off by closing
     * the connection. */
    if (r->too_large || api_now_ms() > r->deadline) return MHD_NO;
    return MHD_YES;
  }
  if (r->early) return send_early(r);
  if (r->too_large) return too_large(r);
  if (!r->submitted) return submit(r);
  watch_set(r->srv, conn, r->deadline, 0);
  pthread_mutex_lock(&r->mu); /* resumed: the worker left the response */
  struct api_response *resp = r->resp;
  r->resp = NULL;
  pthread_mutex_unlock(&r->mu);
  return send_response(r, resp);
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
      flags, 0, NULL, NULL, on_request, s, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->threads,
      MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
      MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
      (cfg->max_conns + 16) * (unsigned)cfg->threads, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
      s, MHD_OPTION_END);
  struct gate_config gc = {cfg->listen_fd, cfg->max_conns, cfg->max_conns_ip, pass, answer, s};
  if (!s->d) {
    snprintf(err, errlen, "cannot start the HTTP threads");
    close(cfg->listen_fd);
  } else {
    s->gate = gate_new(&gc, err, errlen);
  }
  if (!s->gate) {
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
  while ((n = __atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST)) > 0 && api_now_ms() < end)
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

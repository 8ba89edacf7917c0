/* Request ids and the access log. Every request gets an id (the client's X-Request-Id when it is
 * sane, else a new one) that the server returns in X-Request-Id; when the request is answered,
 * api_observe counts it in the metrics and writes one JSON line to the access log: time, id,
 * client, path, endpoint, algorithm, status, bytes and stage times. A line is formatted into a
 * buffer on the stack and written with a single write(), so HTTP threads never wait on a lock
 * for it and lines from different threads never interleave (O_APPEND; lines stay under
 * PIPE_BUF). api_log writes the libraries' messages (libmicrohttpd's) to the same log as JSON
 * lines of their own, with a level and a source instead of a request. */
#include "api_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES  4096 /* PIPE_BUF: a write this size to a pipe is atomic */
#define PATH_MAX_LOG    256  /* bytes of the path that are logged */
#define LOG_MESSAGE_MAX 600  /* bytes of a library's message that are logged (6 each, escaped) */

/* splitmix64's finaliser: a bijection, so distinct counters give distinct ids. */
static uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void api_request_id(struct api_ctx *ctx, const char *given, char *out) {
  size_t n = given ? strnlen(given, API_REQUEST_ID_MAX + 1) : 0;
  int ok = n > 0 && n <= API_REQUEST_ID_MAX;
  for (size_t i = 0; ok && i < n; i++) ok = given[i] >= 0x20 && given[i] <= 0x7e;
  if (ok) {
    memcpy(out, given, n + 1);
    return;
  }
  uint64_t k = __atomic_add_fetch(&ctx->id_count, 1, __ATOMIC_RELAXED);
  snprintf(out, API_REQUEST_ID_MAX + 1, "%016llx", (unsigned long long)mix(ctx->id_seed + k));
}

struct line { /* one log line being formatted */
  char buf[LINE_MAX_BYTES];
  size_t len;
  int full; /* it did not fit: the line is not written */
};

static void add(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(struct line *l, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = l->full ? -1 : vsnprintf(l->buf + l->len, sizeof(l->buf) - l->len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof(l->buf) - l->len)
    l->full = 1;
  else
    l->len += (size_t)n;
}

/* s[0..n) as a JSON string (null when s is NULL); bytes outside printable ASCII become \u00XX,
 * so the line is valid JSON whatever the client sent. */
static void add_str(struct line *l, const char *s, size_t n) {
  if (!s) {
    add(l, "null");
    return;
  }
  add(l, "\"");
  for (size_t i = 0; i < n && s[i]; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      add(l, "\\%c", c);
    else if (c < 0x20 || c > 0x7e)
      add(l, "\\u%04x", c);
    else
      add(l, "%c", c);
  }
  add(l, "\"");
}

static void add_time(struct line *l) {
  struct timespec ts;
  struct tm tm;
  char text[32];
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &tm);
  add(l, "{\"time\":\"%s.%03ldZ\"", text, ts.tv_nsec / 1000000);
}

static void write_line(int fd, const struct api_request *req, const struct api_trace *t,
                       const struct api_outcome *o) {
  struct line l;
  l.len = 0, l.full = 0; /* the buffer is written before it is read */
  add_time(&l);
  add(&l, ",\"request_id\":"), add_str(&l, req->id, API_REQUEST_ID_MAX);
  add(&l, ",\"remote\":"), add_str(&l, req->remote, 64);
  add(&l, ",\"http_method\":"), add_str(&l, req->method, 16);
  size_t plen = route_path_len(req->uri);
  add(&l, ",\"path\":"), add_str(&l, req->uri, plen < PATH_MAX_LOG ? plen : PATH_MAX_LOG);
  add(&l, ",\"endpoint\":"), add_str(&l, t->endpoint, 64);
  add(&l, ",\"method\":"), add_str(&l, t->algorithm, 64);
  add(&l, ",\"status\":%d,\"request_bytes\":%zu,\"response_bytes\":%zu,\"stages_ms\":{", o->status,
      o->request_bytes, o->response_bytes);
  for (int i = 0; i < t->nstages; i++)
    add(&l, "%s\"%s\":%.3f", i ? "," : "", t->stage[i], t->stage_ms[i]);
  add(&l, "},\"total_ms\":%.3f}\n", req->t_start > 0 ? api_now_ms() - req->t_start : 0.0);
  if (l.full) return; /* cannot happen with the caps above; never write half a line */
  ssize_t n = write(fd, l.buf, l.len);
  (void)n; /* a full disk loses log lines, not requests */
}

void api_log(struct api_ctx *ctx, const char *level, const char *source, const char *message) {
  struct line l;
  if (ctx->log_fd < 0) return;
  l.len = 0, l.full = 0;
  add_time(&l);
  add(&l, ",\"level\":"), add_str(&l, level, 16);
  add(&l, ",\"source\":"), add_str(&l, source, 64);
  add(&l, ",\"message\":"), add_str(&l, message, LOG_MESSAGE_MAX);
  add(&l, "}\n");
  if (l.full) return; /* cannot happen with the caps above */
  ssize_t n = write(ctx->log_fd, l.buf, l.len);
  (void)n; /* a full disk loses log lines, not requests */
}

void api_refused(struct api_ctx *ctx, enum err e) {
  metrics_refused(ctx->metrics, e);
}

void api_observe(struct api_ctx *ctx, const struct api_request *req, const struct api_outcome *o) {
  static const struct api_trace none = {0};
  const struct api_trace *t = req->trace ? req->trace : &none;
  if (req->trace && req->trace->admitted) {
    req->trace->admitted = 0;
    metrics_in_flight(ctx->metrics, -1);
  }
  /* an answer before api_admit (a 417, a 431) still counts under its path's route */
  const struct route *r = t->endpoint ? NULL : route_find(req->uri);
  const char *route = t->endpoint ? t->endpoint : r ? r->path : NULL;
  metrics_count(ctx->metrics, route, t->algorithm, o->status);
  if (req->t_start > 0)
    metrics_duration(ctx->metrics, route, req->method, o->status, api_now_ms() - req->t_start);
  for (int i = 0; i < t->nstages; i++) metrics_stage(ctx->metrics, t->stage[i], t->stage_ms[i]);
  if (ctx->log_fd >= 0) write_line(ctx->log_fd, req, t, o);
}

/* Integration tests of the HTTP front: strict HTTP/1.1 (every malformed or ambiguous request,
 * RFC 9112, gets one answer, blurd's JSON error with Connection: close, and a request smuggled
 * behind it is never served; heads past the limits get 414 and 431), refused requests in the
 * access log, an answer for a request whose deadline passes while its job is queued, a client
 * that half-closes (gone: its job is cancelled, 499), uploads abandoned half-way (released at
 * once), probes answered while one address holds a thousand idle connections, too few file
 * descriptors for --max-conns, the --max-buffered budget (its default, chunked bodies, unread
 * answers, slow readers dropped first), a drain that answers the uploads still arriving and exits
 * at once, and empty API keys refused at start. Requests are written on raw sockets where the bytes
 * matter; every test checks that /healthz answers within a second while the attack runs. */
#include "harness.h"
#include "test.h"

#include "../codecs/codecs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void send_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) TEST_FAIL("send: %s", strerror(errno));
    p += k, n -= (size_t)k;
  }
}

struct raw { /* what came back on a raw connection */
  char buf[65536];
  size_t len;
  int closed; /* the server closed it (EOF or reset) */
};

/* Reads what the server sends on fd until it closes, or timeout_s passes (closed stays 0). */
static void read_until_closed(int fd, double timeout_s, struct raw *out) {
  double end = now_s() + timeout_s;
  out->len = 0, out->closed = 0;
  while (now_s() < end) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = recv(fd, out->buf + out->len, sizeof(out->buf) - 1 - out->len, 0);
    if (n <= 0) {
      out->closed = 1;
      break;
    }
    out->len += (size_t)n;
  }
  out->buf[out->len] = 0;
}

/* Reads one whole response (headers and a Content-Length body) within timeout_s; returns its
 * status, or -1. */
static int read_response(int fd, double timeout_s, struct raw *out) {
  double end = now_s() + timeout_s;
  out->len = 0, out->closed = 0;
  while (now_s() < end) {
    out->buf[out->len] = 0;
    const char *eoh = strstr(out->buf, "\r\n\r\n"), *cl = strcasestr(out->buf, "Content-Length:");
    if (eoh && cl && out->len >= (size_t)(eoh + 4 - out->buf) + (size_t)atol(cl + 15))
      return atoi(out->buf + 9);
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = recv(fd, out->buf + out->len, sizeof(out->buf) - 1 - out->len, 0);
    if (n <= 0) {
      out->closed = 1;
      return -1;
    }
    out->len += (size_t)n;
  }
  return -1;
}

/* How many responses raw holds, read one after the other by their Content-Length; bytes after
 * the last one that do not make a whole response count as one more. */
static int responses(const struct raw *raw) {
  int n = 0;
  for (const char *p = raw->buf, *end = raw->buf + raw->len; p < end; n++) {
    const char *eoh = strstr(p, "\r\n\r\n"), *cl = strcasestr(p, "\r\nContent-Length:");
    if (strncmp(p, "HTTP/1.1 ", 9) != 0 || !eoh || !cl || cl > eoh) return n + 1;
    p = eoh + 4 + atol(cl + 17);
  }
  return n;
}

/* The error code of the JSON body of the first response in raw, or "" when it is not JSON. */
static void error_code(const struct raw *raw, char *code, size_t n) {
  const char *body = strstr(raw->buf, "\r\n\r\n");
  json_t *j = body ? json_loads(body + 4, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
  const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
  snprintf(code, n, "%s", c ? c : "");
  json_decref(j);
}

/* GET /healthz answers 200 within a second. */
static void healthz_fast(const struct server *s) {
  struct http_resp r;
  ASSERT(http_request(s, "GET", "/healthz", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  ASSERT_DBL(r.seconds, <, 1.0);
  http_resp_free(&r);
}

static int raw_connect(const struct server *s) {
  int fd = connect_from(s, "127.0.0.1");
  ASSERT(fd >= 0);
  return fd;
}

#define SMUGGLED  "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
#define POST_BLUR "POST /blur HTTP/1.1\r\nHost: x\r\n"

struct framing_case {
  const char *name;
  const char *bytes; /* a request, then SMUGGLED */
  size_t len;        /* 0: strlen(bytes) */
  int status;
  const char *code; /* blurd's JSON error code */
};

static const struct framing_case framing_cases[] = {
    {"equal Content-Lengths",
     POST_BLUR "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello" SMUGGLED, 0, 400,
     "invalid_request"},
    {"different Content-Lengths",
     POST_BLUR "Content-Length: 0\r\nContent-Length: 34\r\n\r\n" SMUGGLED, 0, 400,
     "invalid_request"},
    {"Content-Length with chunked",
     POST_BLUR "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" SMUGGLED, 0, 400,
     "invalid_request"},
    {"unknown Transfer-Encoding", POST_BLUR "Transfer-Encoding: gzip\r\n\r\n" SMUGGLED, 0, 501,
     "not_implemented"},
    {"chunked twice",
     POST_BLUR "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" SMUGGLED,
     0, 501, "not_implemented"},
    {"unknown Expect", POST_BLUR "Expect: 999-foo\r\nContent-Length: 5\r\n\r\nhello" SMUGGLED, 0,
     417, "expectation_failed"},
    {"a Content-Length list", POST_BLUR "Content-Length: 5, 5\r\n\r\nhello" SMUGGLED, 0, 400,
     "invalid_request"},
    {"Content-Length +N", POST_BLUR "Content-Length: +5\r\n\r\nhello" SMUGGLED, 0, 400,
     "invalid_request"},
    {"Content-Length -1", POST_BLUR "Content-Length: -1\r\n\r\nhello" SMUGGLED, 0, 400,
     "invalid_request"},
    {"an overlong Content-Length",
     POST_BLUR "Content-Length: 000000000000000000000000005\r\n\r\nhello" SMUGGLED, 0, 400,
     "invalid_request"},
    {"Content-Length abc", POST_BLUR "Content-Length: abc\r\n\r\nhello" SMUGGLED, 0, 400,
     "invalid_request"},
    {"a space before the colon",
     POST_BLUR "Transfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello" SMUGGLED, 0, 400,
     "invalid_request"},
    {"obs-fold",
     POST_BLUR "Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\nhello" SMUGGLED, 0, 400,
     "invalid_request"},
    {"a NUL in a value", POST_BLUR "X-A: a\0b\r\nContent-Length: 5\r\n\r\nhello" SMUGGLED,
     sizeof(POST_BLUR "X-A: a\0b\r\nContent-Length: 5\r\n\r\nhello" SMUGGLED) - 1, 400,
     "invalid_request"},
    {"a bare CR in a value", POST_BLUR "X-A: a\rb\r\nContent-Length: 0\r\n\r\n" SMUGGLED, 0, 400,
     "invalid_request"},
    {"a bare LF", "GET /healthz HTTP/1.1\nHost: x\n\n" SMUGGLED, 0, 400, "invalid_request"},
    {"HTTP/1.1 without Host", "GET /healthz HTTP/1.1\r\nAccept: */*\r\n\r\n" SMUGGLED, 0, 400,
     "invalid_request"},
    {"two Hosts", "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" SMUGGLED, 0, 400,
     "invalid_request"},
    {"a header line without a colon",
     "GET /healthz HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n" SMUGGLED, 0, 400, "invalid_request"},
    {"HTTP/2.0", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n" SMUGGLED, 0, 505,
     "http_version_not_supported"},
    {"a malformed request line", "GET  /healthz HTTP/1.1\r\nHost: x\r\n\r\n" SMUGGLED, 0, 400,
     "invalid_request"},
    {"a bad chunk size",
     POST_BLUR "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n" SMUGGLED, 0, 400,
     "invalid_request"},
    {"a chunk without its CRLF",
     POST_BLUR
     "Content-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n" SMUGGLED,
     0, 400, "invalid_request"},
};

/* Each request blurd must refuse gets exactly one answer, blurd's JSON error with Connection:
 * close, and the request after it in the same packet is never served. A control request with a
 * sound framing (and a mixed-case Expect: 100-continue) shows that the same bytes do serve a
 * pipelined second request. tests/http_strict.py checks the same answers with a strict HTTP
 * parser (h11). */
static void test_framing(void) {
  struct server s;
  struct raw raw;
  char code[64];
  const char *args[] = {"--timeout", "5", NULL};
  server_start(&s, args);
  for (size_t i = 0; i < sizeof(framing_cases) / sizeof(framing_cases[0]); i++) {
    const struct framing_case *c = &framing_cases[i];
    fprintf(stderr, "    %s\n", c->name);
    int fd = raw_connect(&s);
    send_all(fd, c->bytes, c->len ? c->len : strlen(c->bytes));
    healthz_fast(&s);
    read_until_closed(fd, 3.0, &raw);
    close(fd);
    if (!raw.closed) TEST_FAIL("%s: the connection stayed open; got '%.200s'", c->name, raw.buf);
    ASSERT_INT(atoi(raw.buf + 9), ==, c->status);
    if (responses(&raw) != 1)
      TEST_FAIL("%s: %d answers: '%.600s'", c->name, responses(&raw), raw.buf);
    ASSERT(strcasestr(raw.buf, "\r\nConnection: close\r\n") != NULL);
    ASSERT(strcasestr(raw.buf, "\r\nContent-Type: application/json\r\n") != NULL);
    error_code(&raw, code, sizeof(code));
    ASSERT_STR(code, c->code);
  }
  int fd = raw_connect(&s);
  const char *ok = "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\n\r\n" SMUGGLED;
  send_all(fd, ok, strlen(ok));
  double t0 = now_s();
  while (responses(&raw) < 2 && now_s() - t0 < 3) read_until_closed(fd, 0.3, &raw);
  close(fd);
  ASSERT_INT(responses(&raw), ==, 2);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* A head past the limits gets its JSON answer as soon as the limit is passed, before the rest is
 * sent: a request line over 8192 bytes 414, a header section over 32768 bytes 431. */
static void test_head_limits(void) {
  struct server s;
  struct raw raw;
  char code[64], *big = malloc(40000);
  ASSERT(big);
  server_start(&s, NULL);
  for (int k = 0; k < 2; k++) {
    int fd = raw_connect(&s);
    if (k == 0) {
      memcpy(big, "GET /", 5);
      memset(big + 5, 'a', 9000);
      send_all(fd, big, 9005);
    } else {
      const char *start = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
      send_all(fd, start, strlen(start));
      for (int i = 0; i < 400; i++)
        send_all(fd,
                 "X-Padding: "
                 "0123456789012345678901234567890123456789012345678901234567890123456789012345\r\n",
                 90);
    }
    read_until_closed(fd, 3.0, &raw);
    close(fd);
    ASSERT(raw.closed);
    ASSERT_INT(responses(&raw), ==, 1);
    ASSERT_INT(atoi(raw.buf + 9), ==, k == 0 ? 414 : 431);
    error_code(&raw, code, sizeof(code));
    ASSERT_STR(code, k == 0 ? "uri_too_long" : "headers_too_large");
  }
  healthz_fast(&s);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(big);
}

/* A refused request is a line of the access log like any other, with its status: every line is
 * JSON, and the malformed request's line has status 400. */
static void test_errors_logged(void) {
  char path[64], line[4096];
  struct server s;
  struct raw raw;
  snprintf(path, sizeof(path), "/tmp/blurd-framing-log.%d", (int)getpid());
  unlink(path);
  const char *args[] = {"--access-log", path, NULL};
  server_start(&s, args);
  int fd = raw_connect(&s);
  const char *bad = "POST /blur HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n";
  send_all(fd, bad, strlen(bad));
  read_until_closed(fd, 3.0, &raw);
  close(fd);
  ASSERT(raw.closed);
  ASSERT_INT(atoi(raw.buf + 9), ==, 400);
  healthz_fast(&s);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  FILE *f = fopen(path, "r");
  int lines = 0, refused = 0;
  while (f && fgets(line, sizeof(line), f)) {
    json_t *j = json_loads(line, 0, NULL);
    if (!j) TEST_FAIL("not a JSON line in the access log: '%s'", line);
    const char *p = json_string_value(json_object_get(j, "path"));
    refused +=
        json_integer_value(json_object_get(j, "status")) == 400 && p && strcmp(p, "/blur") == 0;
    json_decref(j);
    lines++;
  }
  if (f) fclose(f);
  unlink(path);
  ASSERT_INT(refused, ==, 1);
  ASSERT_INT(lines, >, refused); /* the healthz requests' own lines */
}

/* Writes a POST of len body bytes (all of them when body is set, else only the headers). */
static void post_raw(int fd, const char *path, const char *ctype, const void *body, size_t len) {
  char head[512];
  int n = snprintf(head, sizeof(head),
                   "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                   path, ctype, len);
  send_all(fd, head, (size_t)n);
  if (body) send_all(fd, body, len);
}

#define QUEUED 8 /* requests queued behind the slow one */

/* A 6000x4000 JPEG of noise (about 20 MB at quality 85, 4:2:0): its PNG encode at compression 9
 * takes about 2 s on the 2-core build machine, so a 1 s deadline stops it. Caller frees. */
static uint8_t *noise_jpeg(size_t *len) {
  struct codec_image img = {malloc((size_t)6000 * 4000 * 3), 6000, 4000, 3, 8, CODEC_NONE, 1};
  struct codec_encode_opts o = {
      .format = CODEC_JPEG, .quality = 85, .compression = 6, .lossless = 0};
  uint8_t *out = NULL;
  char msg[128];
  uint32_t x = 12345;
  ASSERT(img.pixels);
  for (size_t i = 0; i < (size_t)6000 * 4000 * 3; i++) {
    x = x * 1664525u + 1013904223u;
    img.pixels[i] = (uint8_t)(x >> 24);
  }
  ASSERT_INT(codec_encode(&img, &o, &out, len, msg, sizeof(msg)), ==, CODEC_OK);
  codec_image_free(&img);
  return out;
}

/* A request still queued (or running) at its deadline gets its 503 deadline_exceeded with
 * Retry-After at the deadline, not an empty reply when the watchdog cuts the connection. One
 * worker is busy encoding a large noisy PNG while QUEUED more of the same wait behind it, each
 * with an Origin (its CORS header, from the request's copy, outlives the connection): the first
 * runs once the slow one has stopped at its deadline and runs into its own, the rest are still
 * queued at theirs; the jobs left behind end later, and the server still drains and exits 0
 * (each request stays allocated until its job lets go). */
static void test_deadline_while_queued(void) {
  struct server s;
  struct raw raw;
  char code[64], head[256];
  size_t big_len;
  int queued[QUEUED];
  uint8_t *big = noise_jpeg(&big_len);
  const char *env[] = {"BLURD_MAX_COST=0", NULL};
  const char *args[] = {"--backend", "cpu", "--workers",      "1", "--request-timeout", "1",
                        "--queue",   "16",  "--cors-origins", "*", "--drain-timeout",   "120",
                        NULL};
  server_start_env(&s, args, env);
  int slow = raw_connect(&s);
  post_raw(slow, "/convert?format=png&compression=9", "image/jpeg", big, big_len);
  usleep(300 * 1000); /* the worker takes it */
  double t0 = now_s();
  for (int i = 0; i < QUEUED; i++) {
    queued[i] = raw_connect(&s);
    int n = snprintf(head, sizeof(head),
                     "POST /convert?format=png&compression=9 HTTP/1.1\r\nHost: x\r\n"
                     "Origin: https://q%d.example\r\nContent-Type: image/jpeg\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     i, big_len);
    send_all(queued[i], head, (size_t)n);
    send_all(queued[i], big, big_len);
  }
  healthz_fast(&s);
  for (int i = 0; i < QUEUED; i++) {
    int status = read_response(queued[i], 6.0, &raw);
    double waited = now_s() - t0;
    if (i == 0) fprintf(stderr, "    first queued request: %d after %.3f s\n", status, waited);
    if (status != 503)
      TEST_FAIL("%d: status %d after %.2f s: '%.300s'", i, status, waited, raw.buf);
    error_code(&raw, code, sizeof(code));
    ASSERT_STR(code, "deadline_exceeded");
    ASSERT(strcasestr(raw.buf, "\r\nRetry-After: ") != NULL);
    snprintf(head, sizeof(head), "\r\nAccess-Control-Allow-Origin: https://q%d.example\r\n", i);
    ASSERT(strcasestr(raw.buf, head) != NULL);
    ASSERT_DBL(waited, >, 0.8);
    ASSERT_DBL(waited, <, 1.8); /* the deadline (1 s) and the watchdog's period, not the encode */
    close(queued[i]);
  }
  ASSERT_INT(read_response(slow, 2.0, &raw), ==, 503); /* the running one too */
  healthz_fast(&s);
  close(slow);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(big);
}

/* A client that shuts its sending side while its job runs has left, as nginx takes it: the job
 * is cancelled at its next check (the server's CPU in the second after is under 0.1 s), the
 * connection is closed without an answer, and the access log records 499. */
static void test_half_close(void) {
  struct server s;
  struct raw raw;
  size_t len;
  char path[64], line[4096];
  uint8_t *img = fixture("photo_1080p.jpg", &len);
  snprintf(path, sizeof(path), "/tmp/blurd-framing-hc.%d", (int)getpid());
  unlink(path);
  const char *args[] = {"--backend", "cpu", "--workers", "1", "--access-log", path, NULL};
  const char *env[] = {"BLURD_MAX_COST=0", NULL};
  server_start_env(&s, args, env);
  int fd = raw_connect(&s);
  double c0 = server_cpu_s(&s, NULL);
  post_raw(fd, "/variance?method=naive&radius=120&psnr=false", "image/jpeg", img, len);
  usleep(1000 * 1000);
  double c1 = server_cpu_s(&s, NULL);
  ASSERT_DBL(c1 - c0, >, 0.3); /* the job runs (minutes of work) */
  ASSERT(shutdown(fd, SHUT_WR) == 0);
  read_until_closed(fd, 2.0, &raw);
  close(fd);
  ASSERT(raw.closed);
  ASSERT_INT(raw.len, ==, 0);
  usleep(200 * 1000);
  double c2 = server_cpu_s(&s, NULL);
  usleep(1000 * 1000);
  double c3 = server_cpu_s(&s, NULL);
  fprintf(stderr,
          "    CPU %.2f s in the second before the half-close, %.3f s in the second after\n",
          c1 - c0, c3 - c2);
  ASSERT_DBL(c3 - c2, <, 0.1);
  healthz_fast(&s);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  FILE *f = fopen(path, "r");
  int gone = 0;
  while (f && fgets(line, sizeof(line), f))
    gone += strstr(line, "\"path\":\"/variance\"") && strstr(line, "\"status\":499");
  if (f) fclose(f);
  unlink(path);
  ASSERT_INT(gone, ==, 1);
  free(img);
}

#define ABANDONED 300

/* ABANDONED clients send their headers and half their bodies, then close: within a second every
 * one is released (the in-flight gauge is back to the scrape alone, and no socket of the server's
 * port is in CLOSE_WAIT), whatever --timeout is; SIGTERM then exits 0 within a second. */
static void test_abandoned_uploads(void) {
  struct server s;
  static int fds[ABANDONED];
  static const char *from[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4"}; /* 100 an address */
  uint8_t *half = calloc(1, 50000);
  const char *args[] = {"--backend", "cpu", "--timeout", "30", NULL};
  ASSERT(half);
  server_start(&s, args);
  for (int i = 0; i < ABANDONED; i++) {
    ASSERT((fds[i] = connect_from(&s, from[i % 3])) >= 0);
    post_raw(fds[i], "/blur", "image/png", NULL, 100000);
    send_all(fds[i], half, 50000);
  }
  double t = now_s();
  while (server_metric(&s, "blurd_in_flight") != ABANDONED + 1 && now_s() - t < 5) usleep(20000);
  ASSERT_DBL(server_metric(&s, "blurd_in_flight"), ==, ABANDONED + 1); /* and the scrape */
  double t0 = now_s();
  for (int i = 0; i < ABANDONED; i++) close(fds[i]);
  double inflight = -1;
  int waiting = -1;
  while (now_s() - t0 < 3) {
    inflight = server_metric(&s, "blurd_in_flight");
    waiting = server_close_wait(&s);
    if (inflight == 1 && waiting == 0) break;
    usleep(20000);
  }
  double took = now_s() - t0;
  fprintf(stderr,
          "    %d uploads abandoned: released after %.3f s (in flight %.0f, CLOSE_WAIT %d)\n",
          ABANDONED, took, inflight, waiting);
  ASSERT_DBL(inflight, ==, 1);
  ASSERT_INT(waiting, ==, 0);
  ASSERT_DBL(took, <, 1.0);
  healthz_fast(&s);
  t0 = now_s();
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  ASSERT_DBL(now_s() - t0, <, 1.0);
  free(half);
}

#define FLOOD 1100

/* Sends a probe's request on a new connection from src and returns its status, read within a
 * second, and its time in *seconds. */
static int probe_from(const struct server *s, const char *src, const char *path, double *seconds) {
  struct raw raw;
  char req[128];
  double t0 = now_s();
  int fd = connect_from(s, src);
  ASSERT(fd >= 0);
  int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
  send_all(fd, req, (size_t)n);
  int status = read_response(fd, 1.0, &raw);
  *seconds = now_s() - t0;
  close(fd);
  return status;
}

/* FLOOD idle connections from one address, with the default limits (256 from an address) and
 * with none per address (1024 in all): /healthz and /readyz from that address answer 200 within a
 * second, and a request that is not a probe gets its refusal. */
static void test_health_under_flood(void) {
  static int fds[FLOOD];
  struct rlimit lim;
  ASSERT(getrlimit(RLIMIT_NOFILE, &lim) == 0);
  if (lim.rlim_cur < FLOOD + 200 && lim.rlim_max >= FLOOD + 200) {
    lim.rlim_cur = FLOOD + 200;
    ASSERT(setrlimit(RLIMIT_NOFILE, &lim) == 0);
  }
  ASSERT_INT(lim.rlim_cur, >=, FLOOD + 200);
  for (int v = 0; v < 2; v++) {
    struct server s;
    struct raw raw;
    char code[64];
    double t;
    const char *per_ip[] = {"--max-conns-per-ip", "0", NULL};
    server_start(&s, v ? per_ip : NULL);
    for (int i = 0; i < FLOOD; i++) ASSERT((fds[i] = connect_from(&s, "127.0.0.2")) >= 0);
    usleep(300 * 1000);
    ASSERT_INT(probe_from(&s, "127.0.0.2", "/healthz", &t), ==, 200);
    fprintf(stderr, "    %d idle connections (%s): /healthz 200 in %.3f s\n", FLOOD,
            v ? "no limit per address" : "the default limits", t);
    ASSERT_DBL(t, <, 1.0);
    ASSERT_INT(probe_from(&s, "127.0.0.2", "/readyz", &t), ==, 200);
    ASSERT_DBL(t, <, 1.0);
    ASSERT_INT(probe_from(&s, "127.0.0.2", "/methods", &t), ==, v ? 503 : 429);
    healthz_fast(&s);
    int fd = raw_connect(&s); /* a request that is not a probe from another address */
    const char *req = "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(fd, req, strlen(req));
    int status = read_response(fd, 1.0, &raw);
    close(fd);
    ASSERT_INT(status, ==, v ? 503 : 404); /* served (not found), or refused */
    if (v) {
      error_code(&raw, code, sizeof(code));
      ASSERT_STR(code, "too_many_connections");
    }
    for (int i = 0; i < FLOOD; i++) close(fds[i]);
    ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  }
}

#define UPLOADS_32M 40

/* --max-buffered by default: 1 GiB here (two bodies of --max-body, 32 MiB, a core are less) or a
 * quarter of the memory, whichever is smaller: of UPLOADS_32M uploads that each declare 32 MiB, at
 * most 32 are taken, and the others get 503 buffer_full with Retry-After at once, before their
 * bodies. */
static void test_default_budget(void) {
  struct server s;
  struct raw raw;
  char code[64];
  int fds[UPLOADS_32M], taken = 0, refused = 0;
  const char *args[] = {"--backend", "cpu", NULL};
  server_start(&s, args);
  for (int i = 0; i < UPLOADS_32M; i++) {
    ASSERT((fds[i] = connect_from(&s, "127.0.0.2")) >= 0);
    post_raw(fds[i], "/blur", "image/png", NULL, 32 << 20);
  }
  usleep(300 * 1000);
  for (int i = 0; i < UPLOADS_32M; i++) {
    struct pollfd p = {fds[i], POLLIN, 0};
    if (poll(&p, 1, 0) == 0) {
      taken++;
      continue;
    }
    ASSERT_INT(read_response(fds[i], 1.0, &raw), ==, 503);
    error_code(&raw, code, sizeof(code));
    ASSERT_STR(code, "buffer_full");
    ASSERT(strcasestr(raw.buf, "\r\nRetry-After: ") != NULL);
    refused++;
  }
  fprintf(stderr, "    %d uploads of 32 MiB declared: %d taken, %d refused\n", UPLOADS_32M, taken,
          refused);
  ASSERT_INT(taken, <=, 32);
  ASSERT_INT(taken + refused, ==, UPLOADS_32M);
  for (int i = 0; i < UPLOADS_32M; i++) close(fds[i]);
  healthz_fast(&s);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* SIGTERM while a client trickles its body: that request gets 503 shutting_down at once, and the
 * process exits 0 within a second, not after --drain-timeout. */
static void test_drain_trickle(void) {
  struct server s;
  struct raw raw;
  char code[64];
  const char *args[] = {"--drain-timeout", "30", NULL};
  server_start(&s, args);
  int fd = raw_connect(&s);
  post_raw(fd, "/blur", "image/png", NULL, 1000);
  for (int i = 0; i < 5; i++) {
    send_all(fd, "x", 1);
    usleep(100 * 1000);
  }
  double t0 = now_s();
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  double took = now_s() - t0;
  fprintf(stderr, "    exit 0 after %.3f s\n", took);
  ASSERT_DBL(took, <, 1.0);
  ASSERT_INT(read_response(fd, 1.0, &raw), ==, 503);
  error_code(&raw, code, sizeof(code));
  ASSERT_STR(code, "shutting_down");
  close(fd);
}

#define FD_LIMIT 200 /* the child's RLIMIT_NOFILE, soft and hard */
#define FD_CONNS 160 /* more than the server can hold under it, fewer than the child may open */

/* The child of test_fd_limit, under RLIMIT_NOFILE FD_LIMIT: --max-conns 1000 cannot be met, so
 * the server lowers it (saying so on stderr, captured in errpath) and the connections past it
 * get 503 too_many_connections, for their request or unasked when the descriptors run out; the
 * others are served. None waits for a descriptor. */
static void fd_limit_child(const char *errpath) {
  struct server s;
  struct raw raw;
  char code[64], text[1024] = "";
  int fds[FD_CONNS], refused = 0, served = 0;
  struct rlimit lim = {FD_LIMIT, FD_LIMIT};
  ASSERT(setrlimit(RLIMIT_NOFILE, &lim) == 0);
  int saved = dup(2), err = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT(saved >= 0 && err >= 0 && dup2(err, 2) == 2);
  const char *args[] = {"--max-conns", "1000", "--workers", "1", "--backend", "cpu", NULL};
  server_start(&s, args);
  dup2(saved, 2);
  close(saved);
  for (int i = 0; i < FD_CONNS; i++) ASSERT((fds[i] = raw_connect(&s)) >= 0);
  usleep(500 * 1000);
  for (int i = 0; i < FD_CONNS; i++) {
    struct pollfd p = {fds[i], POLLIN, 0};
    if (poll(&p, 1, 0) == 1) { /* answered unasked: a refusal */
      ASSERT_INT(read_response(fds[i], 1.0, &raw), ==, 503);
      error_code(&raw, code, sizeof(code));
      ASSERT_STR(code, "too_many_connections");
      refused++;
      continue;
    }
    const char *req = "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"; /* not a probe */
    send_all(fds[i], req, strlen(req));
    int status = read_response(fds[i], 2.0, &raw);
    if (status == 503) {
      error_code(&raw, code, sizeof(code));
      ASSERT_STR(code, "too_many_connections");
      refused++;
      continue;
    }
    ASSERT_INT(status, ==, 404); /* served */
    served++;
  }
  for (int i = 0; i < FD_CONNS; i++) close(fds[i]);
  ASSERT_INT(refused, >=, 1);
  ASSERT_INT(served, >=, 50);
  ASSERT_INT(refused + served, ==, FD_CONNS);
  usleep(200 * 1000);
  healthz_fast(&s);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  FILE *f = fopen(errpath, "r");
  ASSERT(f && fread(text, 1, sizeof(text) - 1, f) > 0);
  fclose(f);
  if (!strstr(text, "--max-conns 1000") || !strstr(text, "RLIMIT_NOFILE"))
    TEST_FAIL("stderr says nothing about the descriptors: '%s'", text);
  fprintf(stderr, "    %d connections served, %d refused\n", served, refused);
}

static void test_fd_limit(void) {
  char errpath[64];
  int status;
  snprintf(errpath, sizeof(errpath), "/tmp/blurd-framing-err.%d", (int)getpid());
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    fd_limit_child(errpath);
    _exit(0);
  }
  ASSERT(waitpid(pid, &status, 0) == pid);
  unlink(errpath);
  ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

#define UPLOADS     8
#define UPLOAD_SIZE (4 << 20)

/* --max-buffered 9M: of eight uploads that each declare 4 MiB, two fit; the others get 503
 * buffer_full with Retry-After at once, before their bodies are sent. Once the two are done, a
 * new one fits again, and the server's peak memory grew by about the two bodies, not eight. */
static void test_max_buffered(void) {
  struct server s;
  struct raw raw;
  char code[64];
  int fds[UPLOADS], accepted[UPLOADS], naccepted = 0;
  uint8_t *body = calloc(1, UPLOAD_SIZE);
  const char *args[] = {"--backend", "cpu", NULL}, *env[] = {"BLURD_MAX_BUFFERED=9M", NULL};
  ASSERT(body);
  server_start_env(&s, args, env);
  long hwm0 = server_hwm_kb(&s);
  for (int i = 0; i < UPLOADS; i++) {
    fds[i] = raw_connect(&s);
    post_raw(fds[i], "/blur", "image/png", NULL, UPLOAD_SIZE);
    usleep(50 * 1000);
  }
  healthz_fast(&s);
  for (int i = 0; i < UPLOADS; i++) {
    struct pollfd p = {fds[i], POLLIN, 0};
    accepted[i] = poll(&p, 1, 300) == 0;
    naccepted += accepted[i];
    if (accepted[i]) continue;
    ASSERT_INT(read_response(fds[i], 1.0, &raw), ==, 503);
    error_code(&raw, code, sizeof(code));
    ASSERT_STR(code, "buffer_full");
    ASSERT(strcasestr(raw.buf, "\r\nRetry-After: ") != NULL);
  }
  ASSERT_INT(naccepted, ==, 2);
  for (int i = 0; i < UPLOADS; i++) /* all of them held at once, but for their last byte */
    if (accepted[i]) send_all(fds[i], body, UPLOAD_SIZE - 1);
  usleep(300 * 1000);
  long hwm = server_hwm_kb(&s);
  for (int i = 0; i < UPLOADS; i++) {
    if (accepted[i]) {
      send_all(fds[i], body, 1);
      int status = read_response(fds[i], 10.0, &raw); /* zeros: not an image, but read */
      ASSERT(status >= 400 && status < 500);
    }
    close(fds[i]);
  }
  healthz_fast(&s);
  usleep(300 * 1000); /* the two requests are freed */
  int fd = raw_connect(&s);
  post_raw(fd, "/blur", "image/png", body, UPLOAD_SIZE);
  int status = read_response(fd, 10.0, &raw);
  ASSERT(status >= 400 && status < 500);
  close(fd);
  fprintf(stderr, "    VmHWM %ld kB at start, %ld kB with the uploads held\n", hwm0, hwm);
  ASSERT_INT(hwm - hwm0, <, 3 * UPLOAD_SIZE / 1024 + 4096); /* 8 held: 32 MiB and more */
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(body);
}

/* A chunked upload has no length to check up front: it is counted as it grows, and once it passes
 * --max-buffered it gets its 503 buffer_full at once, before the client has sent the rest, and
 * the connection is closed; the server never holds more than the budget. */
static void test_chunked_over_budget(void) {
  struct server s;
  struct raw raw;
  char code[64], size[32];
  uint8_t *chunk = calloc(1, 1 << 20);
  const char *args[] = {"--backend", "cpu", NULL}, *env[] = {"BLURD_MAX_BUFFERED=1M", NULL};
  const char *head = "POST /blur HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n";
  ASSERT(chunk);
  server_start_env(&s, args, env);
  long hwm0 = server_hwm_kb(&s);
  int fd = raw_connect(&s), sent = 0;
  send_all(fd, head, strlen(head));
  for (int i = 0; i < 4; i++) { /* up to 4 MiB, until the answer comes */
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 300) == 1) break;
    int n = snprintf(size, sizeof(size), "%x\r\n", 1 << 20);
    send_all(fd, size, (size_t)n);
    send_all(fd, chunk, 1 << 20);
    send_all(fd, "\r\n", 2);
    sent++;
  }
  healthz_fast(&s);
  read_until_closed(fd, 3.0, &raw);
  ASSERT(raw.closed);
  ASSERT_INT(atoi(raw.buf + 9), ==, 503);
  error_code(&raw, code, sizeof(code));
  ASSERT_STR(code, "buffer_full");
  ASSERT(strcasestr(raw.buf, "\r\nRetry-After: ") != NULL);
  close(fd);
  long hwm = server_hwm_kb(&s);
  fprintf(stderr, "    answered after %d MiB of chunks; VmHWM %ld kB at start, %ld kB after\n",
          sent, hwm0, hwm);
  ASSERT_INT(sent, <=, 2);             /* the first MiB fits, the second does not */
  ASSERT_INT(hwm - hwm0, <, 3 * 1024); /* at most the 1 MiB budget and buffers */
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(chunk);
}

/* A connection to the server whose receive buffer is small, for a client that reads slowly. */
static int small_window_connect(const struct server *s) {
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
  int fd = socket(AF_INET, SOCK_STREAM, 0), size = 4096;
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  ASSERT(fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)) == 0);
  ASSERT(connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0);
  return fd;
}

/* A response the client does not read counts against --max-buffered (with its request's body)
 * until the request deadline, when the watchdog drops it: meanwhile an upload that would pass the
 * budget gets 503 buffer_full; afterwards it fits. The answer must be larger than what the
 * kernel takes into the socket's send buffer (Linux's default tcp_wmem caps it at 4 MiB; on the
 * build machine it took 2.8 MB of the 3.7 MB), or libmicrohttpd would be done with it at once. */
static void test_unread_response(void) {
  struct server s;
  struct raw raw;
  char code[64];
  size_t len;
  uint8_t *img = fixture("photo_1080p.jpg", &len), *zeros = calloc(1, 2 << 20);
  const char *args[] = {"--backend", "cpu", "--request-timeout", "3", NULL};
  const char *env[] = {"BLURD_MAX_BUFFERED=6M", NULL};
  ASSERT(zeros);
  server_start_env(&s, args, env);
  double t0 = now_s();
  int reader = small_window_connect(&s); /* a 3.7 MB answer it never reads */
  char head[256];
  int n = snprintf(head, sizeof(head),
                   "POST /convert?format=png HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n"
                   "Content-Type: image/jpeg\r\nContent-Length: %zu\r\n\r\n",
                   len);
  send_all(reader, head, (size_t)n);
  send_all(reader, img, len);
  usleep(1500 * 1000);      /* the answer is ready; the kernel holds a part of it, blurd the rest */
  int fd = raw_connect(&s); /* 4.2 MB held (the upload and the answer), 2 MB more: too much */
  post_raw(fd, "/blur", "image/png", NULL, 2 << 20);
  ASSERT_INT(read_response(fd, 1.0, &raw), ==, 503);
  error_code(&raw, code, sizeof(code));
  ASSERT_STR(code, "buffer_full");
  close(fd);
  healthz_fast(&s);
  usleep((useconds_t)((t0 + 3.6 - now_s()) * 1e6)); /* past the deadline: the answer is dropped */
  fd = raw_connect(&s);
  post_raw(fd, "/blur", "image/png", NULL, 2 << 20);
  struct pollfd p = {fd, POLLIN, 0};
  ASSERT_INT(poll(&p, 1, 300), ==, 0); /* not refused */
  send_all(fd, zeros, 2 << 20);
  int status = read_response(fd, 10.0, &raw);
  ASSERT(status >= 400 && status < 500); /* zeros: not an image, but read */
  close(fd);
  size_t got = 0; /* what reaches the reader now: the part the kernel held, then the end */
  for (ssize_t k; (k = recv(reader, zeros, 2 << 20, 0)) > 0;) got += (size_t)k;
  fprintf(stderr, "    the reader got %zu bytes of the answer before it was cut\n", got);
  ASSERT_INT(got, <, 3 << 20);
  close(reader);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(img);
  free(zeros);
}

/* While the budget is short, an answer its client has stopped reading is dropped first: once an
 * upload has been refused for want of room, a reader stalled for a second loses its answer, and
 * the same upload fits a moment later, long before the request deadline (30 s). */
static void test_slow_reader_dropped(void) {
  struct server s;
  struct raw raw;
  char code[64], head[256];
  size_t len;
  uint8_t *img = fixture("photo_1080p.jpg", &len), *zeros = calloc(1, 2 << 20);
  const char *args[] = {"--backend", "cpu", "--request-timeout", "30", NULL};
  const char *env[] = {"BLURD_MAX_BUFFERED=6M", NULL};
  ASSERT(zeros);
  server_start_env(&s, args, env);
  int reader = small_window_connect(&s); /* a 3.7 MB answer it never reads */
  int n = snprintf(head, sizeof(head),
                   "POST /convert?format=png HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n"
                   "Content-Type: image/jpeg\r\nContent-Length: %zu\r\n\r\n",
                   len);
  send_all(reader, head, (size_t)n);
  send_all(reader, img, len);
  usleep(1500 * 1000); /* the answer is ready, and stalled */
  double t0 = now_s();
  int fd = raw_connect(&s);
  post_raw(fd, "/blur", "image/png", NULL, 2 << 20);
  ASSERT_INT(read_response(fd, 1.0, &raw), ==, 503);
  error_code(&raw, code, sizeof(code));
  ASSERT_STR(code, "buffer_full");
  close(fd);
  int fits = 0;
  while (!fits && now_s() - t0 < 5) {
    usleep(200 * 1000);
    fd = raw_connect(&s);
    post_raw(fd, "/blur", "image/png", NULL, 2 << 20);
    struct pollfd p = {fd, POLLIN, 0};
    fits = poll(&p, 1, 200) == 0; /* not refused */
    if (fits) {
      send_all(fd, zeros, 2 << 20);
      int status = read_response(fd, 10.0, &raw);
      ASSERT(status >= 400 && status < 500); /* zeros: not an image, but read */
    }
    close(fd);
  }
  double took = now_s() - t0;
  fprintf(stderr, "    the upload fitted %.2f s after its refusal\n", took);
  ASSERT(fits);
  ASSERT_DBL(took, <, 4.0);
  close(reader);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(img);
  free(zeros);
}

/* SIGTERM while a client is still sending its headers: that request is not in flight yet, so
 * the drain does not wait for it, and the exit status is 0. */
static void test_drain_slow_headers(void) {
  struct server s;
  const char *args[] = {"--drain-timeout", "10", NULL};
  server_start(&s, args);
  int fd = raw_connect(&s);
  const char *part = "POST /blur HTTP/1.1\r\nHost: x\r\n";
  send_all(fd, part, strlen(part));
  usleep(300 * 1000);
  healthz_fast(&s);
  double t0 = now_s();
  int rc = server_stop(&s, SIGTERM);
  double took = now_s() - t0;
  close(fd);
  fprintf(stderr, "    exit %d after %.3f s\n", rc, took);
  ASSERT_INT(rc, ==, 0);
  /* the GPU backend's teardown of its workers' contexts alone takes about 1.2 s (H200) */
  const char *backend = getenv("BLURD_EXPECT_BACKEND");
  ASSERT_DBL(took, <, backend && strncmp(backend, "cuda", 4) == 0 ? 2.5 : 1.0);
}

/* An empty API key, from any source, is refused at start (exit 2, and a sentence saying why)
 * instead of turning authentication off. */
static void test_empty_keys(void) {
  char path[64], err[2048];
  snprintf(path, sizeof(path), "/tmp/blurd-framing-key.%d", (int)getpid());
  FILE *f = fopen(path, "w");
  ASSERT(f && fputs(" \t \n", f) >= 0 && fclose(f) == 0);
  const char *flag[] = {"--api-key", "", NULL}, *none[] = {NULL},
             *file[] = {"--api-key-file", path, NULL};
  const char *env[] = {"BLURD_API_KEY=", NULL};
  ASSERT_INT(refused_start(flag, NULL, err, sizeof(err)), ==, 2);
  ASSERT(strstr(err, "--api-key") && strstr(err, "empty"));
  ASSERT_INT(refused_start(none, env, err, sizeof(err)), ==, 2);
  ASSERT(strstr(err, "BLURD_API_KEY") && strstr(err, "empty"));
  ASSERT_INT(refused_start(file, NULL, err, sizeof(err)), ==, 2);
  ASSERT(strstr(err, path) && strstr(err, "blank"));
  unlink(path);
}

/* Runs every test, or only the one named by the first argument (e.g. test_half_close). */
int main(int argc, char **argv) {
#define PICK(test)                                                                                 \
  if (argc < 2 || strcmp(argv[1], #test) == 0) RUN(test)
  PICK(test_framing);
  PICK(test_head_limits);
  PICK(test_errors_logged);
  PICK(test_deadline_while_queued);
  PICK(test_half_close);
  PICK(test_abandoned_uploads);
  PICK(test_health_under_flood);
  PICK(test_default_budget);
  PICK(test_drain_trickle);
  PICK(test_fd_limit);
  PICK(test_max_buffered);
  PICK(test_chunked_over_budget);
  PICK(test_unread_response);
  PICK(test_slow_reader_dropped);
  PICK(test_drain_slow_headers);
  PICK(test_empty_keys);
#undef PICK
  fprintf(stderr, "integ_framing: all passed\n");
  return 0;
}

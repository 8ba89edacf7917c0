/* Overload against the real binary: every connection gets an HTTP answer. Connections over
 * --max-conns-per-ip get 429 and over --max-conns 503, with Retry-After and the JSON error (the
 * first few over a limit, the reserve, once they send a request that is not a probe, which they
 * get answered; the rest unread);
 * 200 concurrent uploads from one address, against a queue of 8 or a connection limit of 50, get
 * only 200s and 503s, never a reset; SIGTERM at capacity lets the admitted requests finish with
 * 200 while new ones get 503 shutting_down; after SIGKILL under load only the requests in flight
 * fail and the restarted server serves at once; and a worker's first request, after its
 * warm-up, is as fast as the ones after it. */
#include "harness.h"
#include "test.h"

#include <curl/curl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reads fd's whole answer (until the server closes, or a second passes) into buf. */
static size_t read_answer(int fd, char *buf, size_t cap) {
  size_t n = 0;
  struct pollfd p = {fd, POLLIN, 0};
  while (n < cap - 1 && poll(&p, 1, 1000) > 0) {
    ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
    if (k <= 0) break;
    n += (size_t)k;
  }
  buf[n] = 0;
  return n;
}

/* Asserts that buf is an HTTP answer of this status with Retry-After and the JSON error code. */
static void expect_refusal(const char *buf, int status, const char *code) {
  char line[32];
  snprintf(line, sizeof(line), "HTTP/1.1 %d ", status);
  if (strncmp(buf, line, strlen(line)) != 0)
    TEST_FAIL("expected %d %s, got: %.80s", status, code, buf);
  ASSERT(strstr(buf, "\r\nRetry-After: 1\r\n"));
  ASSERT(strstr(buf, "\r\nContent-Type: application/json\r\n"));
  const char *body = strstr(buf, "\r\n\r\n");
  ASSERT(body);
  json_t *j = json_loads(body + 4, 0, NULL);
  ASSERT(j);
  ASSERT_INT(json_integer_value(json_object_get(json_object_get(j, "error"), "status")), ==,
             status);
  ASSERT_INT(strcmp(json_string_value(json_object_get(json_object_get(j, "error"), "code")), code),
             ==, 0);
  json_decref(j);
}

/* Sends GET /healthz on fd and asserts a 200. */
static void expect_admitted(int fd) {
  char buf[4096];
  const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req));
  read_answer(fd, buf, sizeof(buf));
  if (strncmp(buf, "HTTP/1.1 200 ", 13) != 0) TEST_FAIL("expected 200, got: %.80s", buf);
}

/* The value of series ("name{labels} ", at the start of a line) in /metrics, or -1. */
static long metric(const struct server *s, const char *series) {
  struct http_resp r;
  char line[256];
  snprintf(line, sizeof(line), "\n%s", series);
  ASSERT(http_request(s, "GET", "/metrics", NULL, NULL, NULL, 0, &r) == 0);
  const char *p = strstr(r.body, line);
  long v = p ? atol(p + strlen(line)) : -1;
  http_resp_free(&r);
  return v;
}

/* Sends a request that is not a probe (GET /methods) on fd, and reads the answer into buf. */
static void ask_methods(int fd, char *buf, size_t cap) {
  const char *req = "GET /methods HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req));
  ASSERT(read_answer(fd, buf, cap) > 0);
}

/* More connections than each limit, from one address and in total: the ones within the limits
 * are served; one over a limit waits for its request line: a request that is not a probe gets the
 * refusal, a probe is served, and a connection that sends nothing gets the refusal unread after
 * 2 s. The gate accepts in order, so which ones are refused is exact. */
static void test_connection_limits(void) {
  struct server s;
  const char *args[] = {"--max-conns-per-ip", "4", "--max-conns", "8", NULL};
  int fds[20], n = 0;
  char buf[4096];
  server_start(&s, args);
  usleep(200000); /* the start-up probe's connection is closed and its slot free again */
  for (int i = 0; i < 10; i++) ASSERT((fds[n++] = connect_from(&s, "127.0.0.2")) >= 0);
  for (int i = 4; i < 10; i++) { /* 6 over the per-address limit: 429 for a request */
    ask_methods(fds[i], buf, sizeof(buf));
    expect_refusal(buf, 429, "too_many_connections_from_address");
  }
  for (int i = 0; i < 4; i++) ASSERT((fds[n++] = connect_from(&s, "127.0.0.3")) >= 0);
  for (int i = 0; i < 3; i++) ASSERT((fds[n++] = connect_from(&s, "127.0.0.4")) >= 0);
  for (int i = 14; i < 16; i++) { /* 8 open: the total limit, whatever the address */
    ask_methods(fds[i], buf, sizeof(buf));
    expect_refusal(buf, 503, "too_many_connections");
  }
  expect_admitted(fds[16]); /* a probe over the limits is served */
  double t0 = now_s();
  struct pollfd p = {fds[n++] = connect_from(&s, "127.0.0.4"), POLLIN, 0};
  ASSERT_INT(poll(&p, 1, 4000), ==, 1); /* sent nothing: refused after a while, unread */
  double waited = now_s() - t0;
  ASSERT(read_answer(p.fd, buf, sizeof(buf)) > 0);
  expect_refusal(buf, 503, "too_many_connections");
  ASSERT_DBL(waited, >, 1.5);
  for (int i = 0; i < 4; i++) expect_admitted(fds[i]); /* the admitted ones are served */
  for (int i = 10; i < 14; i++) expect_admitted(fds[i]);
  for (int i = 0; i < n; i++) close(fds[i]);
  usleep(200000); /* their slots are free again */
  ASSERT_INT(
      metric(&s, "blurd_connections_refused_total{reason=\"too_many_connections_from_address\"} "),
      ==, 6);
  ASSERT_INT(metric(&s, "blurd_connections_refused_total{reason=\"too_many_connections\"} "), ==,
             3);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* n concurrent multipart uploads of img to path from one address; the status of each into
 * status[] (0 when no HTTP answer came: a reset, a timeout). */
static void concurrent_uploads(const struct server *s, const char *path, const uint8_t *img,
                               size_t len, int n, long *status) {
  CURLM *m = curl_multi_init();
  CURL **e = calloc((size_t)n, sizeof(*e));
  curl_mime **forms = calloc((size_t)n, sizeof(*forms));
  struct http_buf *bodies = calloc((size_t)n, sizeof(*bodies));
  char url[256];
  snprintf(url, sizeof(url), "%s%s", s->base, path);
  curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, 0L);
  for (int i = 0; i < n; i++) {
    e[i] = curl_easy_init();
    forms[i] = curl_mime_init(e[i]);
    curl_mimepart *part = curl_mime_addpart(forms[i]);
    curl_mime_name(part, "image");
    curl_mime_data(part, (const char *)img, len);
    curl_mime_filename(part, "in.png");
    curl_easy_setopt(e[i], CURLOPT_URL, url);
    curl_easy_setopt(e[i], CURLOPT_MIMEPOST, forms[i]);
    curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, http_collect);
    curl_easy_setopt(e[i], CURLOPT_WRITEDATA, &bodies[i]);
    curl_easy_setopt(e[i], CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(e[i], CURLOPT_FORBID_REUSE, 1L);
    curl_multi_add_handle(m, e[i]);
  }
  int running = 1;
  while (running) {
    curl_multi_perform(m, &running);
    curl_multi_poll(m, NULL, 0, 100, NULL);
  }
  for (int i = 0; i < n; i++) {
    status[i] = 0;
    curl_easy_getinfo(e[i], CURLINFO_RESPONSE_CODE, &status[i]);
    curl_multi_remove_handle(m, e[i]);
    curl_mime_free(forms[i]);
    curl_easy_cleanup(e[i]);
    free(bodies[i].p);
  }
  curl_multi_cleanup(m);
  free(bodies);
  free(forms);
  free(e);
}

/* 200 concurrent uploads from one address: against --queue 8, and against --max-conns 50. Every
 * one gets a 200 or a 503; none is reset. */
static void test_upload_flood(void) {
  size_t len;
  uint8_t *img = fixture("camera.png", &len);
  const char *const variants[][5] = {{"--queue", "8", NULL}, {"--max-conns", "50", NULL}};
  for (int v = 0; v < 2; v++) {
    struct server s;
    long status[200];
    int ok = 0, busy = 0;
    server_start(&s, variants[v]);
    concurrent_uploads(&s, "/blur?sigma=8", img, len, 200, status);
    for (int i = 0; i < 200; i++) {
      ok += status[i] == 200;
      busy += status[i] == 503;
      if (status[i] != 200 && status[i] != 503) TEST_FAIL("upload %d: status %ld", i, status[i]);
    }
    fprintf(stderr, "    %s %s: 200 concurrent uploads, %d got 200, %d got 503, none reset\n",
            variants[v][0], variants[v][1], ok, busy);
    ASSERT_INT(ok, >, 0);
    ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  }
  free(img);
}

struct drain_state {
  const struct server *s;
  const uint8_t *img;
  size_t len;
  int first, n; /* which of the requests this thread sends */
  long status[6];
};

static void *heavy_uploads(void *arg) {
  struct drain_state *d = arg;
  /* a PNG at compression 9 keeps even a GPU worker busy: its encoder runs on the CPU */
  concurrent_uploads(d->s, "/blur?sigma=12&format=png&compression=9", d->img, d->len, d->n,
                     d->status + d->first);
  return NULL;
}

/* Polls a gauge until it reads want, for at most 30 s. */
static void await_metric(const struct server *s, const char *series, long want) {
  for (int i = 0; i < 1500 && metric(s, series) != want; i++) usleep(20000);
  ASSERT_INT(metric(s, series), ==, want);
}

/* SIGTERM at capacity (one worker, a queue of 4, 6 requests): the admitted ones finish with 200,
 * the one over the queue had its 503 queue_full, a new connection gets 503 shutting_down with
 * Retry-After unless it asks for /healthz (200: alive while draining), and the server exits 0 once
 * the admitted ones are answered. The first request runs before the other five are sent, so a slow
 * machine cannot finish it before they all arrive. */
static void test_drain_at_capacity(void) {
  struct server s;
  const char *args[] = {"--workers", "1", "--queue", "4", "--drain-timeout", "300", NULL};
  struct drain_state d = {&s, NULL, 0, 0, 1, {0}};
  char buf[4096];
  d.img = fixture("photo_1080p.jpg", &d.len);
  server_start(&s, args);
  pthread_t t, t2;
  ASSERT(pthread_create(&t, NULL, heavy_uploads, &d) == 0);
  await_metric(&s, "blurd_jobs_running ", 1);
  struct drain_state rest = d;
  rest.first = 1, rest.n = 5;
  ASSERT(pthread_create(&t2, NULL, heavy_uploads, &rest) == 0);
  await_metric(&s, "blurd_queue_depth ", 4); /* and one running */
  kill(s.pid, SIGTERM);
  usleep(100000);
  int fd = connect_from(&s, "127.0.0.2"); /* a request line that is no probe: refused at once */
  ASSERT(fd >= 0);
  const char *line = "GET /methods HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT(send(fd, line, strlen(line), MSG_NOSIGNAL) == (ssize_t)strlen(line));
  ASSERT(read_answer(fd, buf, sizeof(buf)) > 0);
  expect_refusal(buf, 503, "shutting_down");
  close(fd);
  fd = connect_from(&s, "127.0.0.2"); /* liveness stays 200 while draining */
  ASSERT(fd >= 0);
  expect_admitted(fd);
  close(fd);
  pthread_join(t, NULL);
  pthread_join(t2, NULL);
  memcpy(d.status + 1, rest.status + 1, 5 * sizeof(*d.status));
  int ok = 0, full = 0;
  for (int i = 0; i < 6; i++) ok += d.status[i] == 200, full += d.status[i] == 503;
  fprintf(stderr, "    SIGTERM at capacity: %d admitted finished with 200, %d got 503\n", ok, full);
  ASSERT_INT(ok, ==, 5);
  ASSERT_INT(full, ==, 1);
  ASSERT_INT(server_stop(&s, 0), ==, 0); /* it has exited by itself: status 0 */
  free((void *)d.img);
}

struct client {
  struct server *s; /* the server's port stays; its process changes */
  const uint8_t *img;
  size_t len;
  int *restarted; /* atomic: the new server is up */
  int failed, ok_after;
};

/* Uploads in a loop; after a failure (the server was killed) waits for the restart, as a client
 * with back-off would, then sends 5 more, each of which must succeed. */
static void *client_main(void *arg) {
  struct client *c = arg;
  for (;;) {
    struct http_resp r;
    int after = __atomic_load_n(c->restarted, __ATOMIC_SEQ_CST);
    int rc = http_post_form(c->s, "/blur?sigma=3", "image", c->img, c->len, NULL, NULL, &r);
    int ok = rc == 0 && r.status == 200;
    http_resp_free(&r); /* filled in either case */
    if (!ok && !after) {
      c->failed++;
      while (!__atomic_load_n(c->restarted, __ATOMIC_SEQ_CST)) usleep(10000);
    } else if (after) {
      if (!ok) TEST_FAIL("a request to the restarted server failed (rc %d)", rc);
      if (++c->ok_after == 5) return NULL;
    }
  }
}

struct watcher {
  int port;
  int *restarted;
  double t0, listening; /* seconds from t0 until the port took a connection */
};

/* Times how soon the restarted server's port takes connections. */
static void *watch_port(void *arg) {
  struct watcher *w = arg;
  struct server probe = {0, w->port, ""};
  int fd;
  while ((fd = connect_from(&probe, "127.0.0.1")) < 0) usleep(1000);
  close(fd);
  w->listening = now_s() - w->t0;
  return NULL;
}

/* SIGKILL under load, then a restart on the same port: only the requests in flight fail (at most
 * one per client), and once the new process answers /healthz every request succeeds. */
static void test_kill_restart(void) {
  struct server s;
  struct client c[4];
  pthread_t t[4], wt;
  int restarted = 0;
  size_t len;
  uint8_t *img = fixture("camera.png", &len);
  server_start(&s, NULL);
  for (int i = 0; i < 4; i++) {
    c[i] = (struct client){&s, img, len, &restarted, 0, 0};
    ASSERT(pthread_create(&t[i], NULL, client_main, &c[i]) == 0);
  }
  sleep(1);
  server_stop(&s, SIGKILL);
  char port[16];
  snprintf(port, sizeof(port), "%d", s.port);
  const char *args[] = {"--port", port, NULL};
  struct watcher w = {s.port, &restarted, now_s(), 0};
  ASSERT(pthread_create(&wt, NULL, watch_port, &w) == 0);
  server_start(&s, args); /* returns once /healthz answers */
  double up = now_s() - w.t0;
  pthread_join(wt, NULL);
  __atomic_store_n(&restarted, 1, __ATOMIC_SEQ_CST);
  int failed = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    failed += c[i].failed;
    ASSERT_INT(c[i].failed, <=, 1);
    ASSERT_INT(c[i].ok_after, ==, 5);
  }
  fprintf(stderr,
          "    SIGKILL under load: %d requests in flight failed; the restarted server listened "
          "after %.3f s and answered /healthz after %.2f s; all 20 requests after that got 200\n",
          failed, w.listening, up);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(img);
}

/* The median of the n values v (sorted in place). */
static double median_of(double *v, int n) {
  for (int i = 0; i < n; i++) /* insertion sort */
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A fresh worker warms up before it takes jobs (/readyz says "warming" until then): its first
 * request takes no longer than 1.5 times the median of the next ten. On the CPU backend that is
 * the server's CPU time for each request (wall time on a busy machine measures the machine), with
 * 30 ms for the clock's ticks; on the GPU backend the wall time plus 1.5 ms: there the first
 * request's JPEG decode takes about 1 ms more than the next ones', which the warm-up does not
 * remove. The default warm-up image on the backend the server picks. */
static void test_warm_start(void) {
  struct server s;
  const char *args[] = {"--workers", "1", "--warm-image", "auto", NULL};
  const char *backend = getenv("BLURD_EXPECT_BACKEND");
  int gpu = backend && strncmp(backend, "cuda", 4) == 0;
  size_t len;
  uint8_t *img = fixture("photo_1080p.jpg", &len);
  double cost[11];
  server_start(&s, args);
  struct http_resp r;
  for (int i = 0; i < 600; i++) { /* the warm-up: up to a minute */
    ASSERT(http_request(&s, "GET", "/readyz", NULL, NULL, NULL, 0, &r) == 0);
    long st = r.status;
    if (i == 0 && st == 503) ASSERT(strstr(r.body, "\"warming\""));
    http_resp_free(&r);
    if (st == 200) break;
    usleep(100000);
  }
  for (int i = 0; i < 11; i++) {
    double cpu0 = server_cpu_s(&s, NULL);
    ASSERT(http_post_form(&s, "/blur?sigma=12", "image", img, len, NULL, NULL, &r) == 0);
    ASSERT_INT(r.status, ==, 200);
    char desc[64], timing[512];
    cost[i] =
        gpu ? http_stage(&r, "total", desc, sizeof(desc)) : 1e3 * (server_cpu_s(&s, NULL) - cpu0);
    if (i < 2 && http_header(&r, "Server-Timing", timing, sizeof(timing)))
      fprintf(stderr, "    request %d: %s\n", i + 1, timing);
    http_resp_free(&r);
  }
  double median = median_of(cost + 1, 10);
  fprintf(stderr, "    first request %.1f ms (%s), median of the next ten %.1f ms (%.2fx)\n",
          cost[0], gpu ? "wall" : "server CPU", median, cost[0] / median);
  ASSERT_DBL(cost[0], <=, 1.5 * median + (gpu ? 1.5 : 30));
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(img);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  RUN(test_connection_limits);
  RUN(test_upload_flood);
  RUN(test_drain_at_capacity);
  RUN(test_kill_restart);
  RUN(test_warm_start);
  curl_global_cleanup();
  fprintf(stderr, "integ_overload: all passed\n");
  return 0;
}

/* Hardening tests against the real binary: every limit at limit-1, limit and limit+1 (body
 * bytes with Content-Length and chunked, pixels, width, height, the params JSON, each numeric
 * parameter); slow headers, slow bodies and slow readers cut at the request deadline while other
 * clients are served; clients that hang up while their job waits (connection limits are in
 * integ_overload.c); memory back near its baseline after abuse; /convert; and the fault paths that
 * CI can reach (--backend gpu without a GPU) or that a GPU run reaches (an injected sticky error).
 */
#include "harness.h"
#include "test.h"

#include "../codecs/codecs.h"

#include <curl/curl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int on_gpu(void) {
  const char *b = getenv("BLURD_EXPECT_BACKEND");
  return b && strncmp(b, "cuda", 4) == 0;
}

static void expect_status(const struct http_resp *r, long status, const char *code) {
  if (r->status != status)
    TEST_FAIL("status %ld, expected %ld: %.300s", r->status, status, r->body);
  if (code && !strstr(r->body, code)) TEST_FAIL("body lacks %s: %.300s", code, r->body);
}

/* A PNG of w x h pixels cut from a photograph (gray), padded with zero bytes after IEND (which
 * decoders ignore) to exactly size bytes when size is not 0. */
static uint8_t *png_of(int w, int h, size_t size, size_t *len) {
  struct codec_image photo, img = {NULL, w, h, 1, 8, CODEC_PNG, 1};
  uint8_t *out = NULL;
  char path[512];
  snprintf(path, sizeof(path), "%s/camera.png",
           getenv("BLURD_DATA") ? getenv("BLURD_DATA") : "tests/data");
  ASSERT(codec_decode_file(path, &photo) == CODEC_OK);
  img.pixels = malloc((size_t)w * h);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      img.pixels[(size_t)y * w + x] = photo.pixels[(size_t)(y % 512) * 512 + x % 512];
  struct codec_encode_opts o = {
      .format = CODEC_PNG, .quality = 90, .compression = 1, .lossless = 0};
  ASSERT(codec_encode(&img, &o, &out, len, NULL, 0) == CODEC_OK);
  if (size) {
    ASSERT(*len <= size);
    out = realloc(out, size);
    memset(out + *len, 0, size - *len);
    *len = size;
  }
  free(img.pixels);
  codec_image_free(&photo);
  return out;
}

static void post_png(const struct server *s, const char *query, const uint8_t *img, size_t len,
                     struct http_resp *r) {
  char path[256];
  snprintf(path, sizeof(path), "/blur?%s", query);
  ASSERT(http_request(s, "POST", path, "image/png", NULL, img, len, r) == 0);
}

static size_t read_from(char *buf, size_t size, size_t n, void *ud) {
  struct http_buf *b = ud; /* p: the data, len: bytes left */
  size_t k = size * n < b->len ? size * n : b->len;
  memcpy(buf, b->p, k);
  b->p += k, b->len -= k;
  return k;
}

/* A POST whose body is streamed: chunked, or with Content-Length and "Expect: 100-continue"
 * (the server may answer before the body). Returns the curl result; *uploaded gets the bytes
 * sent. */
static CURLcode post_streamed(const struct server *s, const uint8_t *body, size_t len, int chunked,
                              long *status, curl_off_t *uploaded) {
  char url[128];
  struct http_buf src = {(char *)body, len}, sink = {NULL, 0};
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: image/png");
  hl = curl_slist_append(hl, chunked ? "Transfer-Encoding: chunked" : "Expect: 100-continue");
  CURL *c = curl_easy_init();
  snprintf(url, sizeof(url), "%s/blur?sigma=1", s->base);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, read_from);
  curl_easy_setopt(c, CURLOPT_READDATA, &src);
  if (!chunked) curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
  CURLcode rc = curl_easy_perform(c);
  *status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
  curl_easy_getinfo(c, CURLINFO_SIZE_UPLOAD_T, uploaded);
  curl_easy_cleanup(c);
  curl_slist_free_all(hl);
  free(sink.p);
  return rc;
}

/* Body bytes: 413 before the body is read when Content-Length passes the limit; a chunked body
 * that passes it is read to its end and answered 413, or cut off once it passes twice the limit. */
static void test_body_limit(void) {
  struct server s;
  const char *args[] = {"--max-body", "200000", NULL};
  size_t len;
  long status;
  curl_off_t up;
  server_start(&s, args);
  uint8_t *big = png_of(500, 400, 200001, &len);
  for (int k = -1; k <= 1; k++) {
    struct http_resp r;
    post_png(&s, "sigma=1", big, (size_t)(200000 + k), &r);
    expect_status(&r, k <= 0 ? 200 : 413, k <= 0 ? NULL : "body_too_large");
    http_resp_free(&r);
  }
  ASSERT(post_streamed(&s, big, 200001, 0, &status, &up) == CURLE_OK);
  ASSERT_INT(status, ==, 413);
  ASSERT_INT(up, ==, 0); /* refused from the headers: the body never left */
  ASSERT(post_streamed(&s, big, 200000, 1, &status, &up) == CURLE_OK);
  ASSERT_INT(status, ==, 200);
  ASSERT(post_streamed(&s, big, 200001, 1, &status, &up) == CURLE_OK);
  ASSERT_INT(status, ==, 413); /* libmicrohttpd answers only after the body: it was all read */
  ASSERT_INT(up, >=, 200001);  /* with the chunks' framing */
  uint8_t *huge = calloc(1, 4 << 20);
  memcpy(huge, big, 200000);
  CURLcode rc = post_streamed(&s, huge, 4 << 20, 1, &status, &up);
  ASSERT(rc != CURLE_OK || status != 200); /* cut off: no answer, the connection closed */
  fprintf(stderr, "    chunked 4 MiB: %s, status %ld, %ld bytes sent\n", curl_easy_strerror(rc),
          status, (long)up);
  struct http_resp r;
  ASSERT(http_request(&s, "GET", "/healthz", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
  free(huge);
  free(big);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* Pixels, width and height, from the file header. */
static void test_image_limits(void) {
  struct server s;
  const char *a1[] = {"--max-pixels", "60000",  "--max-width", "100000",
                      "--max-height", "100000", NULL};
  const int px[3][2] = {{3529, 17}, {250, 240}, {2069, 29}}; /* 59999, 60000, 60001 pixels */
  server_start(&s, a1);
  for (int k = 0; k < 3; k++) {
    size_t len;
    struct http_resp r;
    uint8_t *img = png_of(px[k][0], px[k][1], 0, &len);
    post_png(&s, "sigma=1&psnr=false", img, len, &r);
    expect_status(&r, k < 2 ? 200 : 422, k < 2 ? NULL : "image_too_large");
    http_resp_free(&r);
    free(img);
  }
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  const char *a2[] = {"--max-width", "300", "--max-height", "300", NULL};
  server_start(&s, a2);
  for (int k = -1; k <= 1; k++)
    for (int axis = 0; axis < 2; axis++) {
      size_t len;
      struct http_resp r;
      uint8_t *img = axis ? png_of(10, 300 + k, 0, &len) : png_of(300 + k, 10, 0, &len);
      post_png(&s, "sigma=1&psnr=false", img, len, &r);
      expect_status(&r, k <= 0 ? 200 : 422, k <= 0 ? NULL : axis ? "height" : "width");
      http_resp_free(&r);
      free(img);
    }
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* The params JSON (16384 bytes) and every numeric parameter's range. */
static void test_param_limits(struct server *s) {
  size_t len;
  uint8_t *img = png_of(40, 30, 0, &len);
  for (int k = -1; k <= 1; k++) {
    size_t n = (size_t)(16384 + k);
    char *json = malloc(n + 1);
    memset(json, ' ', n);
    memcpy(json, "{\"sigma\": 1}", 12);
    json[n] = 0;
    struct http_resp r;
    ASSERT(http_post_form(s, "/blur", "image", img, len, json, NULL, &r) == 0);
    expect_status(&r, k <= 0 ? 200 : 400, k <= 0 ? NULL : "invalid_json");
    http_resp_free(&r);
    free(json);
  }
  static const struct {
    const char *q;
    int ok;
  } cases[] = {
      {"sigma=0.49999", 0},
      {"sigma=0.5", 1},
      {"sigma=300", 1},
      {"sigma=300.00001", 0},
      {"sigma=2&quality=0", 0},
      {"sigma=2&quality=1", 1},
      {"sigma=2&quality=100", 1},
      {"sigma=2&quality=101", 0},
      {"sigma=2&compression=-1", 0},
      {"sigma=2&compression=0", 1},
      {"sigma=2&compression=9", 1},
      {"sigma=2&compression=10", 0},
      {"sigma=2&method=fir&truncate=0.99", 0},
      {"sigma=2&method=fir&truncate=1", 1},
      {"sigma=2&method=fir&truncate=8", 1},
      {"sigma=2&method=fir&truncate=8.01", 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct http_resp r;
    char q[96];
    snprintf(q, sizeof(q), "%s&psnr=false", cases[i].q);
    post_png(s, q, img, len, &r);
    expect_status(&r, cases[i].ok ? 200 : 400, cases[i].ok ? NULL : "invalid_parameter");
    http_resp_free(&r);
  }
  free(img);
}

/* /convert: decode, then encode to format. */
static void test_convert(struct server *s) {
  size_t len;
  struct http_resp r;
  char buf[128];
  uint8_t *img = fixture("rocket.jpg", &len);
  ASSERT(http_request(s, "POST", "/convert?format=png", "image/jpeg", NULL, img, len, &r) == 0);
  expect_status(&r, 200, NULL);
  ASSERT_STR(http_header(&r, "Content-Type", buf, sizeof(buf)), "image/png");
  http_expect_stages(&r, 0, expected_codec("jpeg"), "deflate-rle"); /* PNG's default level */
  ASSERT(!http_header(&r, "X-PSNR", buf, sizeof(buf)));
  struct codec_image out;
  ASSERT(codec_decode((uint8_t *)r.body, r.len, &(struct codec_limits){0, 0, 0}, &out, NULL, 0) ==
         CODEC_OK);
  ASSERT_INT(out.width, ==, 640);
  ASSERT_INT(out.height, ==, 427);
  codec_image_free(&out);
  http_resp_free(&r);
  ASSERT(http_request(s, "POST", "/convert?format=jpeg&quality=50", "image/jpeg",
                      "application/json", img, len, &r) == 0);
  expect_status(&r, 200, "\"format\":\"jpeg\"");
  ASSERT(!strstr(r.body, "psnr_db"));
  http_resp_free(&r);
  ASSERT(http_request(s, "POST", "/convert?sigma=2", "image/jpeg", NULL, img, len, &r) == 0);
  expect_status(&r, 400, "unknown_parameter");
  http_resp_free(&r);
  free(img);
}

static void send_all(int fd, const char *text) {
  ASSERT(send(fd, text, strlen(text), MSG_NOSIGNAL) == (ssize_t)strlen(text));
}

/* Trickles one byte every period seconds into every socket until the server closes them or
 * `until` seconds pass; returns how many the server closed. */
static int trickle(int *fds, int n, const char *bytes, double period, double until) {
  int closed = 0, open[16];
  size_t k = 0;
  double t0 = now_s();
  for (int i = 0; i < n; i++) open[i] = 1;
  while (closed < n && now_s() - t0 < until) {
    for (int i = 0; i < n; i++) {
      if (!open[i]) continue;
      char c = bytes[k % strlen(bytes)];
      struct pollfd p = {fds[i], POLLIN, 0};
      if (send(fds[i], &c, 1, MSG_NOSIGNAL) != 1 ||
          (poll(&p, 1, 0) > 0 && wait_closed(fds[i], 0.01) >= 0))
        open[i] = 0, closed++;
    }
    k++;
    usleep((useconds_t)(period * 1e6));
  }
  return closed;
}

/* While slow clients hold connections, a client from another address gets its answers. */
static void expect_served(const struct server *s) {
  size_t len;
  struct http_resp r;
  uint8_t *img = png_of(64, 48, 0, &len);
  post_png(s, "sigma=2", img, len, &r);
  expect_status(&r, 200, NULL);
  ASSERT_DBL(r.seconds, <, 1.5);
  http_resp_free(&r);
  free(img);
}

/* Slow headers, slow body, slow reader: each cut at the request deadline (2 s here). */
static void slow_clients(const struct server *s) {
  int fds[6];
  for (int i = 0; i < 6; i++) {
    ASSERT((fds[i] = connect_from(s, "127.0.0.2")) >= 0);
    send_all(fds[i], i < 3 ? "POST /blur?sigma=2 HTTP/1.1\r\nHost: x\r\n"
                           : "POST /blur?sigma=2 HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                             "Content-Length: 100000\r\n\r\n");
  }
  expect_served(s);
  double t0 = now_s();
  int closed = trickle(fds, 6, "X-Slow: aaaaaaaaaaaaaaaaa\r\n", 0.2, 6);
  double took = now_s() - t0;
  fprintf(stderr, "    slow headers and bodies: %d of 6 cut after %.1f s\n", closed, took);
  ASSERT_INT(closed, ==, 6);
  ASSERT_DBL(took, <, 4.5);
  for (int i = 0; i < 6; i++) close(fds[i]);
  /* a reader that never reads a large answer: 25 MB, more than the socket buffers hold */
  size_t len;
  uint8_t *img = png_of(5000, 5000, 0, &len);
  int fd = connect_from(s, "127.0.0.2");
  char head[256];
  snprintf(head, sizeof(head),
           "POST /convert?compression=0 HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
           "Content-Length: %zu\r\n\r\n",
           len);
  send_all(fd, head);
  ASSERT(send(fd, img, len, MSG_NOSIGNAL) == (ssize_t)len);
  sleep(4); /* the answer fills the socket buffers; the deadline passes */
  expect_served(s);
  double closed_after = wait_closed(fd, 3);
  fprintf(stderr, "    slow reader: closed %.2f s after it started reading\n", closed_after);
  ASSERT_DBL(closed_after, >=, 0);
  close(fd);
  free(img);
  sleep(1);
}

/* The slow clients twice: the second round must not grow the server's memory (the first may, as
 * workers set up their staging buffers and allocator arenas on their first jobs). */
static void test_slow_clients(void) {
  struct server s;
  const char *args[] = {"--request-timeout", "2", "--timeout", "30", NULL};
  server_start(&s, args);
  long rss0 = server_rss_kb(&s);
  slow_clients(&s);
  long rss1 = server_rss_kb(&s);
  slow_clients(&s);
  long rss2 = server_rss_kb(&s);
  fprintf(stderr,
          "    RSS at start %ld kB, after the slow clients %ld kB, after a second round %ld kB\n",
          rss0, rss1, rss2);
  if (!getenv("BLURD_SAN")) /* ASan's quarantine keeps freed memory */
    ASSERT_INT(rss2 - rss1, <, 8 * 1024);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

static double timed_heavy(const struct server *s, const uint8_t *img, size_t len) {
  struct http_resp r;
  ASSERT(http_request(s, "POST", "/blur?method=separable&sigma=60&psnr=false", "image/png", NULL,
                      img, len, &r) == 0);
  expect_status(&r, 200, NULL);
  double t = r.seconds;
  http_resp_free(&r);
  return t;
}

/* Clients that hang up mid-upload or while their job waits cost (almost) nothing: the worker
 * sees the closed socket and skips the job. */
static void test_hangups(void) {
  struct server s;
  const char *args[] = {"--workers", "1", "--queue", "16", NULL};
  size_t len;
  server_start(&s, args);
  long rss0 = server_rss_kb(&s);
  uint8_t *img = fixture("astronaut.png", &len);
  double one = timed_heavy(&s, img, len);
  char head[256];
  snprintf(head, sizeof(head),
           "POST /blur?method=separable&sigma=60&psnr=false HTTP/1.1\r\nHost: x\r\nContent-Type: "
           "image/png\r\nContent-Length: %zu\r\n\r\n",
           len);
  for (int i = 0; i < 8; i++) { /* mid-upload */
    int fd = connect_from(&s, "127.0.0.2");
    send_all(fd, head);
    ASSERT(send(fd, img, len / 2, MSG_NOSIGNAL) == (ssize_t)(len / 2));
    close(fd);
  }
  for (int i = 0; i < 6; i++) { /* whole request, then gone while queued or running */
    int fd = connect_from(&s, "127.0.0.2");
    send_all(fd, head);
    ASSERT(send(fd, img, len, MSG_NOSIGNAL) == (ssize_t)len);
    usleep(20000);
    /* a reset: after a whole request a plain close (FIN) is, to the server, a client that only
     * shut its sending side and still reads, and it is answered (integ_framing's half-close) */
    struct linger reset = {1, 0};
    ASSERT(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)) == 0);
    close(fd);
  }
  double t = timed_heavy(&s, img, len);
  fprintf(stderr, "    one heavy job %.2f s; after 6 abandoned ones, the next took %.2f s\n", one,
          t);
  ASSERT_DBL(t, <, 3 * one + 0.5); /* 7 jobs' worth if the abandoned ones had run */
  sleep(1);
  long rss1 = server_rss_kb(&s);
  fprintf(stderr, "    RSS before %ld kB, after %ld kB\n", rss0, rss1);
  if (!getenv("BLURD_SAN")) ASSERT_INT(rss1 - rss0, <, 16 * 1024);
  free(img);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* CI: no GPU, so --backend gpu is refused with a clear error. A GPU run: an injected sticky
 * error gives 503 gpu_lost, /readyz 503, and the process exits 70. */
static void test_faults(void) {
  if (!on_gpu()) {
    char msg[512];
    int st = refused_start((const char *[]){"--backend", "gpu", NULL}, NULL, msg, sizeof(msg));
    fprintf(stderr, "    --backend gpu: exit %d: %s", st, msg);
    ASSERT_INT(st, ==, 1);
    ASSERT(strstr(msg, "--backend gpu"));
    return;
  }
  struct server s;
  const char *env[] = {"BLURD_TEST_GPU_FAULT=1", NULL};
  size_t len;
  struct http_resp r;
  server_start_env(&s, NULL, env);
  uint8_t *img = png_of(64, 48, 0, &len);
  post_png(&s, "sigma=2", img, len, &r);
  expect_status(&r, 503, "gpu_lost");
  http_resp_free(&r);
  ASSERT(http_request(&s, "GET", "/readyz", NULL, NULL, NULL, 0, &r) == 0);
  expect_status(&r, 503, "gpu_lost");
  http_resp_free(&r);
  int st = 0;
  ASSERT(waitpid(s.pid, &st, 0) == s.pid);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 70);
  free(img);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  signal(SIGPIPE, SIG_IGN);
  struct server s;
  server_start(&s, NULL);
  test_param_limits(&s);
  test_convert(&s);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  RUN(test_body_limit);
  RUN(test_image_limits);
  RUN(test_slow_clients);
  RUN(test_hangups);
  RUN(test_faults);
  curl_global_cleanup();
  fprintf(stderr, "integ_hardening: all passed\n");
  return 0;
}

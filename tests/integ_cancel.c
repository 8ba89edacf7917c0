/* Cancellable work and regions bounded by the image, against the real binary on the CPU backend
 * with one worker. A /variance that would run for minutes (naive, radius 127, 2000x2000) answers
 * 503 deadline_exceeded within a moment of --request-timeout, and the next request on the same
 * worker is served at once; a client that hangs up mid-job frees the worker as quickly; /healthz
 * answers meanwhile. 64 regions that each cover a 3000x3000 RGBA image keep the peak memory
 * (VmHWM) within a few images of a whole-image blur's, and answer by their deadline; overlapping
 * regions still blur the input.
 *
 * Every stage stops: for a costly filter, the PSNR reference, each encoder (PNG by libdeflate at
 * level 9 and by blurd's run-length coder, JPEG, lossy WebP by libwebp at effort 6 and by blurd's
 * VP8 encoder, lossless WebP, AVIF and JPEG XL at effort 6, each in a child process killed at the
 * stop) and a slow decode (an interlaced PNG, libpng's), at a 1 s deadline
 * and for a client that resets its connection at 1 s, the server's user CPU time (its threads' and
 * its children's, from /proc) in the second after the answer or the reset is under 0.1 s, and all
 * of its CPU time under 0.5 s (the kernel's share: the stopped stage's large buffers given back
 * to the system), where the stage would otherwise have gone on for seconds (test_stages_deadline,
 * test_stages_gone). The uploads decode in a part of the time their encode takes: stored PNGs (no
 * compression), or ones of noise that repeats along the rows, which inflate fast. Where a stage
 * takes about a second (the run-length coder, JPEG, the VP8 encoder, the interlaced decode), a
 * first request's Server-Timing says when it runs, and the body's last byte is held back so that 1
 * s comes a quarter of the way into it.
 *
 * BLURD_CANCEL_RUNS=20 repeats the deadline and hang-up cases and prints the median and largest
 * time (docs/engineering-notes.md); `integ_cancel test_deadline` runs one test, and
 * BLURD_STAGES=JPEG only the stages of test_stages whose name has that text. The images are made
 * here, as PNGs. */
#include "harness.h"
#include "test.h"

#include "../codecs/codecs.h"

#include <curl/curl.h>
#include <dirent.h>
#include <jansson.h>
#include <png.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A width x height PNG (channels 1, 3 or 4, 8-bit) of gradients that wrap every 256 levels, which
 * compress well (3000x3000 RGBA: 382 KB); with noise, of noise over them. */
static uint8_t *image_png(int width, int height, int channels, int noise, size_t *len) {
  size_t n = (size_t)width * height * channels;
  uint8_t *px = malloc(n), *out = NULL;
  ASSERT(px);
  for (int y = 0; y < height; y++)
    for (int x = 0; x < width; x++)
      for (int c = 0; c < channels; c++)
        px[((size_t)y * width + x) * channels + c] =
            (uint8_t)((c == 3 ? 255 - (x + y) / 24 : (x * (c + 1) + y * (3 - c)) / 32) +
                      (noise ? ((unsigned)(x * 7919 + y * 104729 + c * 31) * 2654435761u) >> 26
                             : 0));
  struct codec_image img = {px, width, height, channels, 8, CODEC_PNG, 1};
  struct codec_encode_opts o = {
      .format = CODEC_PNG, .quality = 90, .compression = 6, .lossless = 0};
  char msg[128];
  ASSERT_INT(codec_encode(&img, &o, &out, len, msg, sizeof(msg)), ==, CODEC_OK);
  free(px);
  return out;
}

static uint8_t *gradient_png(int width, int height, int channels, size_t *len) {
  return image_png(width, height, channels, 0, len);
}

/* POST of img as the multipart field "image" to path, giving up after timeout_ms (the client
 * then resets its connection). Returns the status, 0 when no answer came; *seconds: the wall
 * time; the body into body (cap bytes, NUL-terminated) when not NULL. */
static long post_raw(const struct server *s, const char *path, const uint8_t *img, size_t len,
                     long timeout_ms, double *seconds, struct http_buf *b);

static long post(const struct server *s, const char *path, const uint8_t *img, size_t len,
                 long timeout_ms, double *seconds, char *body, size_t cap) {
  struct http_buf b = {calloc(1, 1), 0};
  ASSERT(b.p);
  long status = post_raw(s, path, img, len, timeout_ms, seconds, &b);
  if (body) snprintf(body, cap, "%s", b.p);
  free(b.p);
  return status;
}

/* CURLOPT_SOCKOPTFUNCTION: the connection ends with a reset (SO_LINGER 0) when the client gives
 * up, the way a client that can no longer read shows itself. A plain close after a whole request
 * is a half-close to the server, which answers it (tests/integ_framing.c). */
static int reset_on_close(void *arg, curl_socket_t fd, curlsocktype purpose) {
  struct linger l = {1, 0};
  (void)arg, (void)purpose;
  return setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)) == 0 ? CURL_SOCKOPT_OK
                                                                   : CURL_SOCKOPT_ERROR;
}

/* post, the answer's bytes into b (a NUL-terminated buffer the caller frees). */
static long post_raw(const struct server *s, const char *path, const uint8_t *img, size_t len,
                     long timeout_ms, double *seconds, struct http_buf *b) {
  char url[2048];
  CURL *c = curl_easy_init();
  ASSERT(c);
  curl_mime *m = curl_mime_init(c);
  curl_mimepart *part = curl_mime_addpart(m);
  curl_mime_name(part, "image");
  curl_mime_filename(part, "upload.png");
  curl_mime_data(part, (const char *)img, len);
  struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
  snprintf(url, sizeof(url), "%s%s", s->base, path);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_MIMEPOST, m);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_SOCKOPTFUNCTION, reset_on_close);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
  double t0 = now_s();
  long status = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  *seconds = now_s() - t0;
  curl_slist_free_all(hl);
  curl_mime_free(m);
  curl_easy_cleanup(c);
  return status;
}

/* The error code of a JSON error body ("deadline_exceeded"), into code. */
static void error_code(const char *body, char *code, size_t n) {
  json_t *j = json_loads(body, 0, NULL);
  const char *s = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
  snprintf(code, n, "%s", s ? s : "");
  json_decref(j);
}

/* Seconds /healthz takes to answer 200 (fails the test otherwise). */
static double healthz(const struct server *s) {
  struct http_resp r;
  ASSERT_INT(http_request(s, "GET", "/healthz", NULL, NULL, NULL, 0, &r), ==, 0);
  ASSERT_INT(r.status, ==, 200);
  double t = r.seconds;
  http_resp_free(&r);
  return t;
}

/* Peak resident memory of the server (VmHWM), in kB. */
static long vm_hwm_kb(const struct server *s) {
  long kb = server_hwm_kb(s);
  ASSERT(kb > 0);
  return kb;
}

/* Whether build/blurd knows flag (an option another change may add): its --help names it. */
static int has_flag(const char *flag) {
  char cmd[512], line[512];
  const char *bin = getenv("BLURD_BIN") ? getenv("BLURD_BIN") : "build/blurd";
  int found = 0;
  snprintf(cmd, sizeof(cmd), "%s --help 2>&1", bin);
  FILE *p = popen(cmd, "r");
  ASSERT(p);
  while (fgets(line, sizeof(line), p))
    if (strstr(line, flag)) found = 1;
  pclose(p);
  return found;
}

/* The server's flags: one worker, the CPU backend, timeout seconds, and no cost budget where the
 * binary has one (the requests here are costly on purpose). */
static void start(struct server *s, const char *timeout) {
  const char *args[] = {"--backend",
                        "cpu",
                        "--workers",
                        "1",
                        "--request-timeout",
                        timeout,
                        has_flag("--max-cost") ? "--max-cost" : NULL,
                        "0",
                        NULL};
  server_start(s, args);
}

struct attack { /* a request run on its own thread while the test looks at the server */
  const struct server *s;
  const char *path;
  const uint8_t *img;
  size_t len;
  long timeout_ms;
  long status;
  double seconds;
  char body[1024];
};

static void *attack_main(void *arg) {
  struct attack *a = arg;
  a->status =
      post(a->s, a->path, a->img, a->len, a->timeout_ms, &a->seconds, a->body, sizeof(a->body));
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define VARIANCE_PATH "/variance?radius=127&method=naive"

/* The deadline case: 503 deadline_exceeded within 2.6 s of a 2 s timeout (the filter alone would
 * take minutes), /healthz within 1 s meanwhile, and a small /blur on the same single worker
 * served at once after. */
static void test_deadline(void) {
  struct server s;
  size_t len, small_len;
  uint8_t *img = gradient_png(2000, 2000, 1, &len), *small = gradient_png(64, 64, 4, &small_len);
  int runs = getenv("BLURD_CANCEL_RUNS") ? atoi(getenv("BLURD_CANCEL_RUNS")) : 1;
  double past[100];
  runs = runs < 1 ? 1 : runs > 100 ? 100 : runs;
  start(&s, "2");
  for (int i = 0; i < runs; i++) {
    struct attack a = {&s, VARIANCE_PATH, img, len, 30000, 0, 0, ""};
    pthread_t th;
    char code[64], body[1024];
    ASSERT_INT(pthread_create(&th, NULL, attack_main, &a), ==, 0);
    usleep(1000000); /* the variance is running */
    ASSERT_DBL(healthz(&s), <, 1.0);
    pthread_join(th, NULL);
    error_code(a.body, code, sizeof(code));
    if (a.status != 503 || strcmp(code, "deadline_exceeded") != 0)
      TEST_FAIL("variance: %ld %s after %.3f s", a.status, a.body, a.seconds);
    ASSERT_DBL(a.seconds, <, 2.6);
    past[i] = a.seconds - 2.0;
    double t;
    long st = post(&s, "/blur?sigma=2", small, small_len, 5000, &t, body, sizeof(body));
    if (st != 200) TEST_FAIL("the next /blur: %ld %s after %.3f s", st, body, t);
    ASSERT_DBL(t, <, 1.0);
  }
  qsort(past, (size_t)runs, sizeof(double), cmp_double);
  fprintf(stderr, "    %d runs: past the 2 s deadline, median %.3f s, max %.3f s\n", runs,
          past[runs / 2], past[runs - 1]);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(img);
  free(small);
}

/* The client hangs up 300 ms into the same request (with a 60 s deadline): the worker is free
 * for the next request within a moment (BLURD_CANCEL_RUNS times). */
static void test_client_gone(void) {
  struct server s;
  size_t len, small_len;
  uint8_t *img = gradient_png(2000, 2000, 1, &len), *small = gradient_png(64, 64, 4, &small_len);
  int runs = getenv("BLURD_CANCEL_RUNS") ? atoi(getenv("BLURD_CANCEL_RUNS")) : 1;
  double next[100];
  runs = runs < 1 ? 1 : runs > 100 ? 100 : runs;
  start(&s, "60");
  for (int i = 0; i < runs; i++) {
    char body[1024];
    double t;
    ASSERT_INT(post(&s, VARIANCE_PATH, img, len, 300, &t, NULL, 0), ==, 0); /* gave up */
    double t0 = now_s();
    long st = post(&s, "/blur?sigma=2", small, small_len, 5000, &t, body, sizeof(body));
    if (st != 200) TEST_FAIL("the /blur after the hang-up: %ld %s after %.3f s", st, body, t);
    next[i] = now_s() - t0;
    ASSERT_DBL(next[i], <, 1.0);
    ASSERT_DBL(healthz(&s), <, 1.0);
  }
  qsort(next, (size_t)runs, sizeof(double), cmp_double);
  fprintf(stderr,
          "    %d runs: the next /blur answered after the hang-up in a median %.3f s, max %.3f s\n",
          runs, next[runs / 2], next[runs - 1]);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(img);
  free(small);
}

/* 64 regions, each the whole 3000x3000 RGBA image, with a 10 s deadline: the peak memory stays
 * within 5 images of a whole-image blur's (copying every box first took 64 images, 2.47 GB),
 * and the answer comes by the deadline: 200, 503 deadline_exceeded, or 422 where a cost budget
 * refuses it. */
static void test_regions_memory(void) {
  struct server s;
  size_t len;
  uint8_t *img = gradient_png(3000, 3000, 4, &len);
  long image_kb = 3000L * 3000 * 4 / 1024;
  char path[1200], body[1024], code[64];
  int at = snprintf(path, sizeof(path), "/blur?sigma=2&method=separable&regions=");
  for (int i = 0; i < 64; i++)
    at += snprintf(path + at, sizeof(path) - at, "%s0,0,3000,3000", i ? ";" : "");
  ASSERT(at < (int)sizeof(path) - 1);
  start(&s, "10");
  double t;
  long st = post(&s, "/blur?sigma=2&method=separable", img, len, 30000, &t, body, sizeof(body));
  if (st != 200) TEST_FAIL("the whole-image /blur: %ld %s", st, body);
  long base_kb = vm_hwm_kb(&s);
  struct attack a = {&s, path, img, len, 30000, 0, 0, ""};
  pthread_t th;
  ASSERT_INT(pthread_create(&th, NULL, attack_main, &a), ==, 0);
  usleep(2000000);
  ASSERT_DBL(healthz(&s), <, 1.0);
  pthread_join(th, NULL);
  long peak_kb = vm_hwm_kb(&s);
  error_code(a.body, code, sizeof(code));
  fprintf(stderr, "    64 regions: %ld after %.3f s; VmHWM %ld MB, %ld MB after a whole blur\n",
          a.status, a.seconds, peak_kb / 1024, base_kb / 1024);
  if (a.status != 200 && !(a.status == 503 && strcmp(code, "deadline_exceeded") == 0) &&
      !(a.status == 422 && strcmp(code, "too_expensive") == 0))
    TEST_FAIL("64 regions: %ld %s after %.3f s", a.status, a.body, a.seconds);
  ASSERT_DBL(a.seconds, <, 10.6);
  /* under ASan its quarantine keeps up to 256 MB of freed memory (quarantine_size_mb) */
  long quarantine_kb = getenv("BLURD_SAN") ? 256 * 1024 : 0;
  ASSERT_INT(peak_kb, <, base_kb + 5 * image_kb + quarantine_kb);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  free(img);
}

/* The answer of path for img, decoded (200 expected). */
static void blur_of(const struct server *s, const char *path, const uint8_t *img, size_t len,
                    struct codec_image *out) {
  struct http_buf b = {calloc(1, 1), 0};
  struct codec_limits lim = {10000, 10000, 100000000};
  char msg[128];
  double t;
  ASSERT(b.p);
  long st = post_raw(s, path, img, len, 30000, &t, &b);
  if (st != 200) TEST_FAIL("%s: %ld %s", path, st, b.p);
  ASSERT_INT(codec_decode((const uint8_t *)b.p, b.len, &lim, out, msg, sizeof(msg)), ==, CODEC_OK);
  free(b.p);
}

/* Overlapping regions blur the input, not each other's blend: with separable (the same bytes in
 * a box as in the whole image) the union of two overlapping regions and one inside both equals
 * the whole-image blur, and the rest is the input. Boxes are cut from a copy of the input only
 * when they overlap an earlier blend, so this guards that decision. */
static void test_regions_overlap(void) {
  struct server s;
  size_t len;
  uint8_t *png = image_png(600, 400, 3, 1, &len);
  struct codec_image in, whole, reg;
  struct codec_limits lim = {10000, 10000, 100000000};
  char msg[128];
  ASSERT_INT(codec_decode(png, len, &lim, &in, msg, sizeof(msg)), ==, CODEC_OK);
  start(&s, "60");
  blur_of(&s, "/blur?sigma=8&method=separable", png, len, &whole);
  blur_of(&s,
          "/blur?sigma=8&method=separable&regions=100,100,200,150;180,160,200,150;190,170,20,20",
          png, len, &reg);
  int differ = 0, changed = 0;
  for (int y = 0; y < in.height; y++)
    for (int x = 0; x < in.width; x++) {
      int inside = (x >= 100 && x < 300 && y >= 100 && y < 250) ||
                   (x >= 180 && x < 380 && y >= 160 && y < 310);
      for (int c = 0; c < 3; c++) {
        size_t k = ((size_t)y * in.width + x) * 3 + c;
        differ += reg.pixels[k] != (inside ? whole.pixels[k] : in.pixels[k]);
        changed += inside && reg.pixels[k] != in.pixels[k];
      }
    }
  fprintf(stderr, "    %d samples differ from the whole blur or the input; %d changed\n", differ,
          changed);
  ASSERT_INT(differ, ==, 0);
  ASSERT_INT(changed, >, 3 * 200 * 150);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  codec_image_free(&in), codec_image_free(&whole), codec_image_free(&reg);
  free(png);
}

/* ---- every stage stops ---- */

/* How a client that gives up leaves: a reset (SO_LINGER 0), or a plain close (FIN). */
enum close_style { CLOSE_RESET, CLOSE_FIN };

static int fin_on_close(void *arg, curl_socket_t fd, curlsocktype purpose) {
  (void)arg, (void)fd, (void)purpose;
  return CURL_SOCKOPT_OK;
}

struct raw_post { /* a raw image body POSTed on its own thread */
  const struct server *s;
  const char *path;
  const uint8_t *body;
  size_t len, sent;
  double last_byte_at; /* now_s() before which the body's last byte is not sent; 0: at once */
  double give_up_at;   /* now_s() at which the client leaves, as close says */
  enum close_style close;
  long status;                   /* 0 when no answer came */
  double t_start, t_body, t_end; /* now_s() at the start, the last byte, the answer or leaving */
  char answer[512];
  char headers[4096]; /* the answer's, NUL-terminated */
};

/* The answer's first bytes (an error's JSON), the rest counted and dropped: a large image would
 * cost a growing buffer's copies, which under ASan take longer than the server lets a response. */
static size_t raw_body(char *p, size_t size, size_t n, void *arg) {
  struct raw_post *a = arg;
  size_t have = strlen(a->answer), add = size * n;
  size_t keep = have + add < sizeof(a->answer) ? add : sizeof(a->answer) - 1 - have;
  memcpy(a->answer + have, p, keep);
  a->answer[have + keep] = 0;
  return size * n;
}

static size_t raw_header(char *p, size_t size, size_t n, void *arg) {
  struct raw_post *a = arg;
  size_t have = strlen(a->headers), add = size * n;
  if (have + add < sizeof(a->headers))
    memcpy(a->headers + have, p, add), a->headers[have + add] = 0;
  return size * n;
}

/* The body for libcurl, its last byte held back until last_byte_at. */
static size_t raw_read(char *buf, size_t size, size_t nitems, void *arg) {
  struct raw_post *a = arg;
  size_t n = a->len - a->sent, room = size * nitems;
  if (n == 1 && a->last_byte_at > 0)
    while (now_s() < a->last_byte_at) usleep(1000);
  if (n > 1) n--; /* the last byte goes alone */
  n = n < room ? n : room;
  memcpy(buf, a->body + a->sent, n);
  a->sent += n;
  if (a->sent == a->len) a->t_body = now_s();
  return n;
}

static void *raw_post_main(void *arg) {
  struct raw_post *a = arg;
  char url[1024];
  CURL *c = curl_easy_init();
  ASSERT(c);
  struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
  hl = curl_slist_append(hl, "Content-Type: image/png");
  snprintf(url, sizeof(url), "%s%s", a->s->base, a->path);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, raw_read);
  curl_easy_setopt(c, CURLOPT_READDATA, a);
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)a->len);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)((a->give_up_at - now_s()) * 1000));
  curl_easy_setopt(c, CURLOPT_SOCKOPTFUNCTION,
                   a->close == CLOSE_RESET ? reset_on_close : fin_on_close);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, raw_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, raw_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
  curl_easy_cleanup(c); /* a connection given up on is closed here, as close says */
  a->t_end = now_s();
  curl_slist_free_all(hl);
  return NULL;
}

/* The contents of the test images: noise over gradients, sent stored (no compression); noise that
 * repeats every 64 pixels along the rows over gradients down the columns, which libdeflate
 * compresses a hundredfold (the upload is small and inflates fast, the encoders get noise); a
 * gradient (smooth: blurd's VP8 encoder takes it), compressed. */
enum content { NOISE_STORED, NOISE_REPEATING, SMOOTH };

static uint8_t *test_png(int width, int height, int channels, enum content what, size_t *len) {
  size_t n = (size_t)width * height * channels;
  uint8_t *px = malloc(n), *out = NULL;
  ASSERT(px);
  for (int y = 0; y < height; y++)
    for (int x = 0; x < width; x++)
      for (int c = 0; c < channels; c++) {
        int xn = what == NOISE_REPEATING ? x % 64 : x, xg = what == NOISE_REPEATING ? 0 : x;
        unsigned noise = ((unsigned)(xn * 7919 + y * 104729 + c * 31) * 2654435761u) >> 26;
        px[((size_t)y * width + x) * channels + c] =
            (uint8_t)((xg * (c + 1) + y * (3 - c)) / (what == SMOOTH ? 24 : 16) +
                      (what == SMOOTH ? 0 : noise));
      }
  struct codec_image img = {px, width, height, channels, 8, CODEC_PNG, 1};
  struct codec_encode_opts o = {.format = CODEC_PNG, .compression = what == NOISE_STORED ? 0 : 3};
  char msg[128];
  ASSERT_INT(codec_encode(&img, &o, &out, len, msg, sizeof(msg)), ==, CODEC_OK);
  free(px);
  return out;
}

struct png_mem { /* libpng's output, grown by png_grow */
  uint8_t *p;
  size_t len, cap;
};

static void png_grow(png_structp png, png_bytep data, size_t n) {
  struct png_mem *m = png_get_io_ptr(png);
  if (m->len + n > m->cap) {
    m->cap = (m->len + n) * 2;
    m->p = realloc(m->p, m->cap);
    ASSERT(m->p);
  }
  memcpy(m->p + m->len, data, n);
  m->len += n;
}

/* An interlaced (Adam7) width x height RGBA PNG of gradients, zlib level 1: libpng decodes it a
 * row of a pass at a time, slowly. */
static uint8_t *interlaced_png(int width, int height, size_t *len) {
  struct png_mem m = {NULL, 0, 0};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  uint8_t *row = malloc((size_t)width * 4);
  ASSERT(png && info && row && !setjmp(png_jmpbuf(png)));
  png_set_write_fn(png, &m, png_grow, NULL);
  png_set_compression_level(png, 1);
  png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB_ALPHA,
               PNG_INTERLACE_ADAM7, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  int passes = png_set_interlace_handling(png);
  for (int pass = 0; pass < passes; pass++)
    for (int y = 0; y < height; y++) {
      for (int x = 0; x < width; x++)
        for (int c = 0; c < 4; c++) row[4 * x + c] = (uint8_t)((x * (c + 1) + y * (4 - c)) / 8);
      png_write_row(png, row);
    }
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(row);
  *len = m.len;
  return m.p;
}

/* A stage that takes about a second is aimed at, by a first request's Server-Timing. */
enum aim { AIM_NONE, AIM_DECODE, AIM_ENCODE };

struct stage_case { /* one stage where a request would run for a while */
  const char *what, *path;
  uint8_t *img;
  size_t len;
  enum aim aim;
  double decode_s, encode_s; /* the first request's, when aimed */
};

/* The decode and encode times of c's request in r (answered in full). */
static void note_times(const struct http_resp *r, struct stage_case *c) {
  c->decode_s = http_stage(r, "decode", NULL, 0) / 1e3;
  c->encode_s = http_stage(r, "encode", NULL, 0) / 1e3;
  ASSERT(c->decode_s >= 0 && c->encode_s > 0);
}

/* The decode and encode times of c's request answered in full by s (a long deadline). A first
 * request may find the server's memory cold and decode slower: the aim then comes later in the
 * encode, or after it, and is taken again from the answer (expect_worker_free). */
static void probe(const struct server *s, struct stage_case *c) {
  double t0 = now_s();
  struct raw_post a = {s, c->path, c->img, c->len, 0, 0, t0 + 120, CLOSE_FIN, 0, t0, 0, 0, "", ""};
  raw_post_main(&a);
  if (a.status != 200)
    TEST_FAIL("%s: %ld after %.3f s: %s", c->what, a.status, a.t_end - t0, a.answer);
  struct http_resp r = {.headers = a.headers};
  note_times(&r, c);
}

#define AIM 0.25 /* where in an aimed stage 1 s comes */

/* c's request on s, which has one worker: given up by the server at its 1 s deadline (gone: by
 * the client, which leaves as close says at 1 s). For an aimed stage the body's last byte is held
 * back so that 1 s comes AIM of the way into it; when the answer comes first after all (the
 * stage went faster than its first request's), it is aimed again by the answer's times, up to
 * three times. Returns whether the server's CPU time in the second after the answer or the leaving
 * was too much: 0.1 s of user time, or 0.5 s in all (test_stages fails after the last stage when
 * one was). */
static int expect_worker_free(const struct server *s, struct stage_case *c, int gone,
                              enum close_style close) {
  struct raw_post a;
  double t0, before, sys0 = 0, sys1 = 0, sys_before = 0;
  for (int attempt = 0;; attempt++) {
    double lead = c->aim == AIM_DECODE   ? AIM * c->decode_s
                  : c->aim == AIM_ENCODE ? c->decode_s + AIM * c->encode_s
                                         : 1;
    t0 = now_s();
    a = (struct raw_post){s, c->path, c->img, c->len, 0, 0, 0, close, 0, t0, 0, 0, "", ""};
    a.last_byte_at = lead < 1 ? t0 + 1 - lead : 0;
    a.give_up_at = t0 + (gone ? 1 : 30);
    pthread_t th;
    before = server_cpu_s(s, &sys_before);
    ASSERT_INT(pthread_create(&th, NULL, raw_post_main, &a), ==, 0);
    pthread_join(th, NULL);
    if (!c->aim || a.status != 200 || attempt == 2) break;
    struct http_resp r = {.headers = a.headers};
    note_times(&r, c);
    fprintf(stderr, "    %-42s answered before 1 s: aimed again (%.2f s, %.2f s)\n", c->what,
            c->decode_s, c->encode_s);
  }
  double cpu0 = server_cpu_s(s, &sys0), t1 = now_s();
  usleep(1000000);
  double cpu1 = server_cpu_s(s, &sys1), dt = now_s() - t1;
  char code[64];
  error_code(a.answer, code, sizeof(code));
  fprintf(
      stderr,
      "    %-42s %-17s at %.2f s (body %.2f s): CPU %.2f s before, %.3f s (system %.3f s) in %.2f"
      " s after\n",
      c->what,
      gone              ? "left"
      : a.status == 503 ? code
                        : "?",
      a.t_end - t0, a.t_body - t0, cpu0 - before, cpu1 - cpu0, sys1 - sys0, dt);
  if (gone && a.status != 0)
    TEST_FAIL("%s: answered %ld before the client left", c->what, a.status);
  if (!gone && (a.status != 503 || strcmp(code, "deadline_exceeded") != 0))
    TEST_FAIL("%s: %ld %s after %.3f s", c->what, a.status, a.answer, a.t_end - t0);
  int over = cpu1 - cpu0 - (sys1 - sys0) >= 0.1 || cpu1 - cpu0 >= 0.5;
  if (over)
    fprintf(stderr,
            "    FAILED: %s (%s): the server used %.3f s of CPU (system %.3f s) in the second "
            "after\n",
            c->what, gone ? "the client left" : "the deadline", cpu1 - cpu0, sys1 - sys0);
  return over;
}

/* The server for these: one worker, the CPU backend, no cost budget, room for 8000x8000 images
 * sent whole; timeout seconds to answer. */
static void start_big(struct server *s, const char *timeout) {
  const char *args[] = {
      "--backend",    "cpu",  "--workers",  "1",    "--request-timeout", timeout, "--max-cost", "0",
      "--max-pixels", "100M", "--max-body", "400M", "--max-buffered",    "2G",    NULL};
  server_start(s, args);
}

/* Each stage, at a deadline (a server with a 1 s one) and for a client that closes its
 * connection at 1 s, a plain close (a server with a long one, which also answers the first
 * requests of the aimed stages); test_client_gone closes with a reset. */
static void test_stages(void) {
  struct server deadline, gone;
  start_big(&deadline, "1");
  start_big(&gone, "60");
  struct stage_case cases[] = {
      {"filter: /variance, naive, radius 127", VARIANCE_PATH, NULL, 0, AIM_NONE, 0, 0},
      {"reference: yvv at sigma 300, and the PSNR", "/blur?method=yvv&sigma=300&format=jpeg", NULL,
       0, AIM_NONE, 0, 0},
      {"encode: PNG by libdeflate, level 9", "/convert?format=png&compression=9", NULL, 0, AIM_NONE,
       0, 0},
      {"encode: WebP by libwebp, effort 6", "/convert?format=webp&effort=6&quality=100", NULL, 0,
       AIM_NONE, 0, 0},
      {"encode: lossless WebP by libwebp", "/convert?format=webp&lossless=true", NULL, 0, AIM_NONE,
       0, 0},
      {"encode: PNG by the run-length coder", "/convert?format=png&compression=2", NULL, 0,
       AIM_ENCODE, 0, 0},
      {"encode: JPEG, quality 100", "/convert?format=jpeg&quality=100", NULL, 0, AIM_ENCODE, 0, 0},
      {"encode: WebP by blurd's VP8 encoder", "/convert?format=webp&quality=100", NULL, 0,
       AIM_ENCODE, 0, 0},
      {"decode: an interlaced PNG (libpng)", "/convert?format=png&compression=0", NULL, 0,
       AIM_DECODE, 0, 0},
      {"encode: AVIF by libavif and aom, effort 6", "/convert?format=avif&effort=6", NULL, 0,
       AIM_NONE, 0, 0},
      {"encode: JPEG XL by libjxl, effort 6", "/convert?format=jxl&effort=6", NULL, 0, AIM_NONE, 0,
       0}};
  const char *only = getenv("BLURD_STAGES"); /* the cases whose name has this, or all */
  /* Under ASan, which takes several times as long to encode, a smaller image: what it does when
   * the memory is freed (poisoning, its quarantine) would otherwise show in the second after. */
  int big = getenv("BLURD_SAN") ? 5000 : 8000, failed = 0;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct stage_case *c = &cases[i];
    if (only && !strstr(c->what, only)) continue;
    if (i == 0) c->img = gradient_png(2000, 2000, 1, &c->len);
    if (i == 1) c->img = test_png(4000, 4000, 1, NOISE_STORED, &c->len);
    if (i == 2 || i == 3) c->img = test_png(3000, 3000, 4, NOISE_STORED, &c->len);
    if (i == 4) c->img = test_png(4000, 4000, 4, NOISE_STORED, &c->len);
    if (i == 5) c->img = test_png(big, big, 4, NOISE_REPEATING, &c->len);
    if (i == 6) c->img = test_png(big, big, 3, NOISE_REPEATING, &c->len);
    if (i == 7) c->img = test_png(big, big, 3, SMOOTH, &c->len);
    if (i == 8) c->img = interlaced_png(6000, 6000, &c->len);
    if (i == 9) c->img = test_png(2000, 2000, 3, NOISE_STORED, &c->len);
    if (i == 10) /* 3 s of libjxl; under ASan, whose child frees its memory more slowly, less */
      c->img =
          test_png(big == 8000 ? 1200 : 900, big == 8000 ? 1200 : 900, 3, NOISE_STORED, &c->len);
    for (int gone_ = 0; gone_ < 2; gone_++) { /* aimed by a request just before: load varies */
      if (c->aim) probe(&gone, c);
      if (c->aim)
        fprintf(stderr, "    %-42s decodes in %.2f s, encodes in %.2f s\n", c->what, c->decode_s,
                c->encode_s);
      failed += expect_worker_free(gone_ ? &gone : &deadline, c, gone_, CLOSE_FIN);
    }
    free(c->img);
  }
  ASSERT_INT(failed, ==, 0);
  ASSERT_INT(server_stop(&deadline, SIGTERM), ==, 0);
  ASSERT_INT(server_stop(&gone, SIGTERM), ==, 0);
}

/* Runs the tests named on the command line ("test_deadline"), or all of them. */
int main(int argc, char **argv) {
  static const struct {
    const char *name;
    void (*fn)(void);
  } tests[] = {{"test_deadline", test_deadline},
               {"test_client_gone", test_client_gone},
               {"test_regions_memory", test_regions_memory},
               {"test_regions_overlap", test_regions_overlap},
               {"test_stages", test_stages}};
  /* The stages are sized for two cores: on a larger machine the servers (which inherit this
   * affinity) use two, so that every stage still runs past its deadline. */
  cpu_set_t cpus, two;
  CPU_ZERO(&two);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 2) {
    for (int c = 0, n = 0; c < CPU_SETSIZE && n < 2; c++)
      if (CPU_ISSET(c, &cpus)) CPU_SET(c, &two), n++;
    sched_setaffinity(0, sizeof(two), &two);
  }
  curl_global_init(CURL_GLOBAL_ALL);
  for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
    int wanted = argc < 2;
    for (int k = 1; k < argc; k++) wanted |= strcmp(argv[k], tests[i].name) == 0;
    if (!wanted) continue;
    fprintf(stderr, "  %s\n", tests[i].name);
    tests[i].fn();
  }
  curl_global_cleanup();
  fprintf(stderr, "integ_cancel: all passed\n");
  return 0;
}

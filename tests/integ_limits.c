/* Integration tests of the request limits against the real binary (issue 33): the cost budget
 * (--max-cost, 422 too_expensive before decoding: an O(r^2) variance radius, fir at a large sigma
 * and truncate, 64 regions over a large RGBA image; a 31x31 kernel on 0.25 MP runs), an image
 * past the size limits refused as image_too_large from its header whatever its cost, JSON bodies
 * bounded in values and bytes outside the image and parsed off the HTTP threads, multipart's
 * quoted parameters and empty body, parameter messages, and the demo page's assets open with a
 * key set. Every attack asserts its status, that /healthz answers within a second meanwhile,
 * and, where memory is at stake, the server's peak resident memory (VmHWM). */
#include "harness.h"
#include "test.h"

#include "../codecs/codecs.h"

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct server srv;

/* The server's peak resident memory in MB (VmHWM). */
static double server_hwm_mb(const struct server *s) {
  long kb = server_hwm_kb(s);
  ASSERT_INT(kb, >, 0);
  return kb / 1024.0;
}

/* A flat width x height PNG of channels channels, with a gradient row so it is not all zero. */
static uint8_t *make_png(int width, int height, int channels, size_t *len) {
  size_t n = (size_t)width * height * channels;
  uint8_t *px = calloc(n, 1), *out = NULL;
  ASSERT(px != NULL);
  for (size_t i = 0; i < (size_t)width * channels; i++) px[i] = (uint8_t)(i * 7);
  for (size_t i = 0; i < n; i += 4099) px[i] = (uint8_t)(i >> 3); /* some texture */
  struct codec_image img = {px, width, height, channels, 8, CODEC_PNG, 1};
  struct codec_encode_opts o = {
      .format = CODEC_PNG, .quality = 90, .compression = 1, .lossless = 0};
  char msg[128];
  ASSERT_INT(codec_encode(&img, &o, &out, len, msg, sizeof(msg)), ==, CODEC_OK);
  free(px);
  return out;
}

struct attack { /* a request sent by a thread of its own, as often as given */
  const char *path, *ctype;
  const void *body;
  size_t len;
  int times;
  long status[8];
  double seconds[8];
  char code[8][48];
  pthread_t thread;
};

static void *attack_run(void *arg) {
  struct attack *a = arg;
  for (int i = 0; i < a->times && i < 8; i++) {
    struct http_resp r;
    ASSERT_INT(http_request(&srv, "POST", a->path, a->ctype, NULL, a->body, a->len, &r), ==, 0);
    a->status[i] = r.status;
    a->seconds[i] = r.seconds;
    json_t *j = json_loads(r.body, 0, NULL);
    snprintf(a->code[i], sizeof(a->code[i]), "%s",
             json_string_value(json_object_get(json_object_get(j, "error"), "code"))
                 ? json_string_value(json_object_get(json_object_get(j, "error"), "code"))
                 : "");
    json_decref(j);
    http_resp_free(&r);
  }
  return NULL;
}

/* Runs n attacks at once while GET /healthz is timed every 50 ms: returns the slowest answer. */
static double under_attack(struct attack *a, int n) {
  double worst = 0;
  for (int i = 0; i < n; i++)
    ASSERT_INT(pthread_create(&a[i].thread, NULL, attack_run, &a[i]), ==, 0);
  for (int k = 0; k < 6; k++) {
    struct http_resp r;
    ASSERT_INT(http_request(&srv, "GET", "/healthz", NULL, NULL, NULL, 0, &r), ==, 0);
    ASSERT_INT(r.status, ==, 200);
    if (r.seconds > worst) worst = r.seconds;
    http_resp_free(&r);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < n; i++) pthread_join(a[i].thread, NULL);
  return worst;
}

/* One request that must be a 422 too_expensive within 50 ms, with its estimate and the limit in
 * the error object, while /healthz answers within a second. */
static void expect_too_expensive(const char *what, const char *path, const char *ctype,
                                 const void *img, size_t len) {
  struct http_resp r;
  ASSERT_INT(http_request(&srv, "POST", path, ctype, NULL, img, len, &r), ==, 0);
  http_expect_error(&r, 422, "too_expensive");
  json_t *j = json_loads(r.body, 0, NULL), *err = json_object_get(j, "error");
  double est = json_number_value(json_object_get(err, "estimate_s"));
  ASSERT_DBL(est, >, 30);
  ASSERT_DBL(json_number_value(json_object_get(err, "max_cost_s")), ==, 30);
  ASSERT(strstr(json_string_value(json_object_get(err, "message")), "limit (--max-cost) is 30 s"));
  fprintf(stderr, "    %s: 422 in %.1f ms, estimate %.1f s\n", what, r.seconds * 1000, est);
  ASSERT_DBL(r.seconds, <, 0.05);
  json_decref(j);
  http_resp_free(&r);
  struct attack a[2] = {{path, ctype, img, len, 8, {0}, {0}, {{0}}, 0},
                        {path, ctype, img, len, 8, {0}, {0}, {{0}}, 0}};
  double worst = under_attack(a, 2);
  fprintf(stderr, "    %s: /healthz within %.1f ms under 16 of them\n", what, worst * 1000);
  ASSERT_DBL(worst, <, 1.0);
  for (int i = 0; i < 8; i++) {
    ASSERT_INT(a[0].status[i], ==, 422);
    ASSERT_INT(a[1].status[i], ==, 422);
  }
}

static void test_cost_budget(void) {
  size_t len;
  uint8_t *img = make_png(500, 500, 3, &len);
  double before = server_hwm_mb(&srv);
  expect_too_expensive("variance welford r=127, 500x500", "/variance?radius=127&method=welford",
                       "image/png", img, len);
  free(img);
  img = make_png(6000, 4000, 3, &len); /* 24 MP: fir at 4801 taps an axis */
  expect_too_expensive("fir sigma 300 truncate 8, 6000x4000",
                       "/blur?method=fir&sigma=300&truncate=8", "image/png", img, len);
  free(img);
  img = make_png(6000, 4000, 4, &len); /* the encode's cost: WebP's slowest effort with alpha */
  expect_too_expensive("WebP effort 6 of 6000x4000 RGBA", "/convert?format=webp&effort=6",
                       "image/png", img, len);
  free(img);
  img = make_png(3000, 3000, 4, &len); /* 64 regions that each cover it */
  char params[2048] = "{\"sigma\": 20, \"regions\": [";
  for (int i = 0; i < 64; i++) strcat(params, i ? ", [0, 0, 3000, 3000]" : "[0, 0, 3000, 3000]");
  strcat(params, "]}");
  size_t flen;
  char *f = form_body(img, len, params, &flen);
  expect_too_expensive("64 regions over 3000x3000 RGBA", "/blur", FORM_TYPE, f, flen);
  free(f);
  free(img);
  double hwm = server_hwm_mb(&srv);
  fprintf(stderr, "    VmHWM %.0f MB before, %.0f MB after\n", before, hwm);
  /* nothing was decoded: a 3000x3000 RGBA image alone is 36 MB (the GPU backend starts at about
   * 190 MB, the CPU one at 7) */
  ASSERT_DBL(hwm - before, <, 100);
}

/* A PNG of only a header (IHDR, an empty IDAT, IEND: 65 bytes) that says width x height, RGB. */
static size_t header_png(uint8_t *out, uint32_t width, uint32_t height) {
  static const uint8_t idat[] = {
      0, 0, 0, 10, 'I', 'D', 'A', 'T', 0x78, 0x9c,
      3, 0, 0, 0,  0,   1,   0,   0,   0,    0}; /* an empty zlib stream; the CRC is not read */
  static const uint8_t iend[] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
  uint8_t ihdr[25] = {0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  for (int i = 0; i < 4; i++) {
    ihdr[8 + i] = (uint8_t)(width >> (24 - 8 * i));
    ihdr[12 + i] = (uint8_t)(height >> (24 - 8 * i));
  }
  ihdr[16] = 8, ihdr[17] = 2; /* 8-bit RGB; the CRC (21..24) is not read before the limits */
  memcpy(out, "\x89PNG\r\n\x1a\n", 8);
  memcpy(out + 8, ihdr, sizeof(ihdr));
  memcpy(out + 33, idat, sizeof(idat));
  memcpy(out + 53, iend, sizeof(iend));
  return 65;
}

/* An image past --max-width, --max-height or --max-pixels gets 422 image_too_large, from its
 * header and whatever its cost: the limit it passes, and no estimate. Its cost would be far past
 * the budget (a 100000x100000 blur at sigma 300 with the PSNR); within the limits that cost is
 * what refuses it. */
static void test_image_limits(void) {
  static const struct {
    uint32_t w, h;
    const char *path, *code, *flag;
  } cases[] = {
      {100000, 100000, "/blur?sigma=300", "image_too_large", "--max-width"},
      {100, 20000, "/variance?method=welford&radius=127", "image_too_large", "--max-height"},
      {8000, 6000, "/convert?format=webp&effort=6", "image_too_large", "--max-pixels"},
      {8000, 5000, "/blur?method=fir&sigma=300&truncate=8", "too_expensive", "--max-cost"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    uint8_t png[80];
    size_t len = header_png(png, cases[i].w, cases[i].h);
    struct http_resp r;
    ASSERT_INT(http_request(&srv, "POST", cases[i].path, "image/png", NULL, png, len, &r), ==, 0);
    fprintf(stderr, "    %ux%u %s: %ld %s in %.1f ms\n", cases[i].w, cases[i].h, cases[i].path,
            r.status, cases[i].code, r.seconds * 1000);
    http_expect_error(&r, 422, cases[i].code);
    json_t *j = json_loads(r.body, 0, NULL), *err = json_object_get(j, "error");
    ASSERT(strstr(json_string_value(json_object_get(err, "message")), cases[i].flag));
    ASSERT_INT(json_object_get(err, "estimate_s") != NULL, ==,
               strcmp(cases[i].code, "too_expensive") == 0);
    ASSERT_DBL(r.seconds, <, 0.05); /* from the header: nothing decoded */
    json_decref(j);
    http_resp_free(&r);
  }
}

static void test_within_budget(void) {
  size_t len;
  uint8_t *img = make_png(500, 500, 3, &len);
  char params[8192] = "{\"kernel\": [";
  for (int i = 0; i < 31 * 31; i++) strcat(params, i ? ",1" : "1");
  strcat(params, "]}");
  size_t flen;
  char *f = form_body(img, len, params, &flen);
  struct http_resp r;
  ASSERT_INT(http_request(&srv, "POST", "/convolve", FORM_TYPE, NULL, f, flen, &r), ==, 0);
  if (r.status != 200) TEST_FAIL("%ld: %s", r.status, r.body);
  free(f);
  char desc[64];
  fprintf(stderr, "    31x31 convolve on 500x500: 200 in %.0f ms (filter %.0f ms)\n",
          r.seconds * 1000, http_stage(&r, "filter", desc, sizeof(desc)));
  ASSERT_DBL(r.seconds, <, 30); /* within the request deadline (60 s) with room */
  http_resp_free(&r);
  /* an O(r^2) method at a radius the budget admits on this size runs */
  ASSERT_INT(http_request(&srv, "POST", "/variance?radius=3&method=welford", "image/png", NULL, img,
                          len, &r),
             ==, 0);
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
  free(img);
  /* /methods gives the budget, each blur method's cost per sample, and each variance method's
   * radius limit at a few sizes */
  ASSERT_INT(http_request(&srv, "GET", "/methods", NULL, NULL, NULL, 0, &r), ==, 0);
  json_t *m = json_loads(r.body, 0, NULL), *e;
  ASSERT_DBL(json_number_value(json_object_get(json_object_get(m, "limits"), "max_cost_s")), ==,
             30);
  size_t i;
  int seen = 0;
  json_array_foreach(json_object_get(m, "methods"), i, e) {
    const char *name = json_string_value(json_object_get(e, "name"));
    json_t *maxr =
        json_object_get(json_object_get(json_object_get(e, "cost"), "max_radius"), "40MP");
    json_t *blur = json_object_get(json_object_get(e, "cost"), "ns_per_sample_at_sigma");
    if (strcmp(json_string_value(json_object_get(e, "endpoint")), "/blur") == 0)
      ASSERT_DBL(json_number_value(json_object_get(blur, "300")), >, 0); /* every blur method */
    if (strcmp(name, "fir") == 0) /* O(taps) per sample: far past yvv's at sigma 300 */
      ASSERT_DBL(json_number_value(json_object_get(blur, "300")), >, 100);
    if (strcmp(json_string_value(json_object_get(e, "endpoint")), "/variance") != 0) continue;
    seen++;
    ASSERT(json_is_integer(maxr));
    if (strcmp(name, "welford") == 0 || strcmp(name, "naive") == 0)
      ASSERT_INT(json_integer_value(maxr), <, 20); /* O(r^2): limited at 40 MP */
    if (strcmp(name, "exact") == 0) ASSERT_INT(json_integer_value(maxr), ==, 127);
  }
  ASSERT_INT(seen, ==, 7);
  json_decref(m);
  http_resp_free(&r);
}

/* {"x":[{},{},...]} of about size bytes (caller frees). */
static char *many_objects(size_t size, size_t *len) {
  char *b = malloc(size + 16);
  ASSERT(b != NULL);
  size_t n = (size_t)sprintf(b, "{\"x\":[");
  while (n + 3 < size) memcpy(b + n, "{},", 3), n += 3;
  n += (size_t)sprintf(b + n, "{}]}");
  *len = n;
  return b;
}

static void test_json_bodies(void) {
  double before = server_hwm_mb(&srv);
  size_t len;
  char *body = many_objects((32u << 20) - 64, &len);
  struct http_resp r;
  ASSERT_INT(http_request(&srv, "POST", "/blur?sigma=2", "application/json", NULL, body, len, &r),
             ==, 0);
  http_expect_error(&r, 400, "invalid_json");
  ASSERT(strstr(r.body, "4096 values") != NULL);
  fprintf(stderr, "    32 MB of {}: 400 in %.0f ms\n", r.seconds * 1000);
  ASSERT_DBL(r.seconds, <, 1.0); /* the upload of 32 MB included */
  http_resp_free(&r);
  struct attack a[3];
  for (int i = 0; i < 3; i++)
    a[i] = (struct attack){"/blur?sigma=2", "application/json", body, len, 2, {0}, {0}, {{0}}, 0};
  double worst = under_attack(a, 3);
  fprintf(stderr, "    three at once: /healthz within %.1f ms\n", worst * 1000);
  ASSERT_DBL(worst, <, 1.0);
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 2; k++) {
      ASSERT_INT(a[i].status[k], ==, 400);
      ASSERT_STR(a[i].code[k], "invalid_json");
      ASSERT_DBL(a[i].seconds[k], <, 2.0);
    }
  free(body);
  /* a custom kernel of 16.7 million numbers */
  size_t n = 16700000, ilen;
  uint8_t *img = make_png(8, 8, 3, &ilen);
  char *json = json_body(img, ilen, "", NULL); /* {"image": "..."} */
  size_t jl = strlen(json);
  body = malloc(jl + 2 * n + 32);
  ASSERT(body != NULL);
  memcpy(body, json, jl - 1); /* without its '}' */
  size_t w = jl - 1 + (size_t)sprintf(body + jl - 1, ", \"kernel\": [");
  for (size_t i = 0; i < n; i++) memcpy(body + w, "0,", 2), w += 2;
  w += (size_t)sprintf(body + w, "0]}");
  ASSERT_INT(http_request(&srv, "POST", "/convolve", "application/json", NULL, body, w, &r), ==, 0);
  http_expect_error(&r, 400, "invalid_json");
  fprintf(stderr, "    a kernel of 16.7 million numbers: 400 in %.0f ms\n", r.seconds * 1000);
  ASSERT_DBL(r.seconds, <, 1.0);
  http_resp_free(&r);
  double hwm = server_hwm_mb(&srv);
  fprintf(stderr, "    VmHWM %.0f MB before, %.0f MB after\n", before, hwm);
  /* three 32 MB bodies held at once, and no parse tree (ASan's quarantine holds freed memory) */
  ASSERT_DBL(hwm - before, <, getenv("BLURD_SAN") ? 800 : 200);
  free(body);
  free(json);
  free(img);
}

/* A multipart body with the image and a params part whose filename holds ";name=image;". */
static void test_multipart(void) {
  size_t len;
  uint8_t *img = make_png(16, 16, 3, &len);
  const char *head =
      "--XX\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n"
      "Content-Type: image/png\r\n\r\n";
  const char *mid = "\r\n--XX\r\nContent-Disposition: form-data; filename=\"a;name=image;\"; "
                    "name=\"params\"\r\n\r\n{\"sigma\": 3}\r\n--XX--\r\n";
  size_t hl = strlen(head), ml = strlen(mid);
  char *body = malloc(hl + len + ml);
  ASSERT(body != NULL);
  memcpy(body, head, hl);
  memcpy(body + hl, img, len);
  memcpy(body + hl + len, mid, ml);
  struct http_resp r;
  char buf[64];
  ASSERT_INT(http_request(&srv, "POST", "/blur", "multipart/form-data; boundary=XX", NULL, body,
                          hl + len + ml, &r),
             ==, 0);
  if (r.status != 200) TEST_FAIL("%ld: %s", r.status, r.body);
  ASSERT_STR(http_header(&r, "X-Sigma", buf, sizeof(buf)), "3,3");
  http_resp_free(&r);
  ASSERT_INT(http_request(&srv, "POST", "/blur?sigma=2", "multipart/form-data; boundary=XX", NULL,
                          "", 0, &r),
             ==, 0);
  http_expect_error(&r, 400, "invalid_multipart");
  http_resp_free(&r);
  free(body);
  free(img);
}

static void test_messages(void) {
  size_t len;
  uint8_t *img = make_png(8, 8, 3, &len);
  char *body = json_body(img, len, "", "{\"sigma\": true}");
  struct http_resp r;
  ASSERT_INT(http_post_json(&srv, "/blur", body, NULL, &r), ==, 0);
  http_expect_error(&r, 400, "invalid_parameter");
  ASSERT(strstr(r.body, "got a boolean") != NULL);
  http_resp_free(&r);
  free(body);
  static const char *const paths[] = {"/blur?sigma=0x10", "/blur?sigma=inf", "/blur?sigma=nan",
                                      "/blur?sigma=1e400"};
  for (int i = 0; i < 4; i++) {
    ASSERT_INT(http_request(&srv, "POST", paths[i], "image/png", NULL, img, len, &r), ==, 0);
    http_expect_error(&r, 400, "invalid_parameter");
    http_resp_free(&r);
  }
  ASSERT_INT(http_request(&srv, "POST", "/blur?sigma=1e1", "image/png", NULL, img, len, &r), ==, 0);
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
  free(img);
}

/* With a key, the demo page and its assets are open and the rest is not. */
static void test_demo_with_key(void) {
  struct server keyed;
  const char *const args[] = {"--api-key", "k3y", NULL};
  server_start(&keyed, args);
  static const char *const open[] = {"/", "/demo.js", "/demo.css", "/methods", "/openapi.json"};
  struct http_resp r;
  for (int i = 0; i < 5; i++) {
    ASSERT_INT(http_request(&keyed, "GET", open[i], NULL, NULL, NULL, 0, &r), ==, 0);
    if (r.status != 200) TEST_FAIL("%s: %ld", open[i], r.status);
    http_resp_free(&r);
  }
  ASSERT_INT(http_request(&keyed, "POST", "/blur?sigma=2", "image/png", NULL, "x", 1, &r), ==, 0);
  ASSERT_INT(r.status, ==, 401);
  http_resp_free(&r);
  /* the page asks for the key and sends it as X-API-Key */
  ASSERT_INT(http_request(&keyed, "GET", "/demo.js", NULL, NULL, NULL, 0, &r), ==, 0);
  ASSERT(strstr(r.body, "'X-API-Key'") && strstr(r.body, "sessionStorage"));
  http_resp_free(&r);
  ASSERT_INT(http_request(&keyed, "GET", "/", NULL, NULL, NULL, 0, &r), ==, 0);
  ASSERT(strstr(r.body, "type=\"password\"") != NULL);
  http_resp_free(&r);
  ASSERT_INT(server_stop(&keyed, SIGTERM), ==, 0);
}

/* Runs test unless the command line names others (integ_limits test_messages ...). */
#define RUN_IF(test)                                                                               \
  do {                                                                                             \
    int run_ = argc < 2;                                                                           \
    for (int i_ = 1; i_ < argc; i_++) run_ |= strcmp(argv[i_], #test) == 0;                        \
    if (run_) RUN(test);                                                                           \
  } while (0)

int main(int argc, char **argv) {
  const char *const args[] = {"--workers", "2", NULL};
  server_start(&srv, args);
  RUN_IF(test_cost_budget);
  RUN_IF(test_image_limits);
  RUN_IF(test_within_budget);
  RUN_IF(test_json_bodies);
  RUN_IF(test_multipart);
  RUN_IF(test_messages);
  RUN_IF(test_demo_with_key);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  fprintf(stderr, "integ_limits: all passed\n");
  return 0;
}

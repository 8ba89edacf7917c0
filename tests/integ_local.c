/* Integration tests of POST /variance, /contrast and /convolve against the real binary: every
 * variance method with both windows and both outputs (status, 16-bit gray PNG, X-PSNR, X-Scale,
 * the exact map equal to its CPU twin), the JSON mode's statistics, odd sizes made in-test,
 * every parameter error, every named kernel and custom kernels from the params JSON and the
 * query string against cpu_convolve_image, and contrast against cpu_contrast_image. The twins
 * run here on the decoded upload, so the tests pass unchanged on the GPU backend
 * (BLURD_EXPECT_BACKEND=cuda:), where exact and convolve are bit-identical and contrast is
 * within one level. */
#include "harness.h"
#include "test.h"

#include "../codecs/codecs.h"
#include "../cpu/cpu.h"

#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>

static struct server srv;

static const char *expected_backend(void) {
  return getenv("BLURD_EXPECT_BACKEND") ? getenv("BLURD_EXPECT_BACKEND") : "cpu";
}

static void decode(const void *data, size_t len, struct codec_image *img) {
  char msg[256];
  if (codec_decode(data, len, &(struct codec_limits){0, 0, 0}, img, msg, sizeof(msg)) != CODEC_OK)
    TEST_FAIL("not an image: %s", msg);
}

/* Asserts a 200 image answer with the timing and backend headers; decodes it into out. */
static void expect_image(const struct http_resp *r, const char *mime, struct codec_image *out) {
  char buf[384];
  if (r->status != 200) TEST_FAIL("status %ld: %.300s", r->status, r->body);
  ASSERT_STR(http_header(r, "Content-Type", buf, sizeof(buf)), mime);
  const char *want = expected_backend();
  ASSERT(http_header(r, "X-Backend", buf, sizeof(buf)) && strncmp(buf, want, strlen(want)) == 0);
  http_expect_stages(r, 1, NULL, strcmp(mime, "image/png") == 0 ? "deflate-rle" : NULL);
  decode(r->body, r->len, out);
}

/* POSTs img as the form field image to path, with params JSON (or NULL). */
static void post(const char *path, const uint8_t *img, size_t len, const char *params,
                 const char *accept, struct http_resp *r) {
  ASSERT(http_post_form(&srv, path, "image", img, len, params, accept, r) == 0);
}

static void post_fixture(const char *path, const char *name, const char *params,
                         struct http_resp *r) {
  size_t len;
  uint8_t *img = fixture(name, &len);
  post(path, img, len, params, NULL, r);
  free(img);
}

static struct cpu_image view(const struct codec_image *c) {
  return (struct cpu_image){c->pixels, c->width, c->height, c->channels, c->depth};
}

/* A w x h PNG of pseudo-random samples (seeded), *len bytes, malloc'd. */
static uint8_t *make_png(int w, int h, int channels, int depth, unsigned seed, size_t *len) {
  size_t n = (size_t)w * h * channels;
  struct codec_image img = {malloc(n * (size_t)(depth / 8)), w, h, channels, depth, CODEC_PNG, 1};
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    unsigned v = seed >> 8;
    if (depth == 8)
      img.pixels[i] = (uint8_t)v;
    else
      ((uint16_t *)img.pixels)[i] = (uint16_t)v;
  }
  uint8_t *out;
  struct codec_encode_opts o = {
      .format = CODEC_PNG, .quality = 90, .compression = 1, .lossless = 0};
  ASSERT(codec_encode(&img, &o, &out, len, NULL, 0) == CODEC_OK);
  codec_image_free(&img);
  return out;
}

/* ---- /variance ---- */

struct var_case {
  const char *method; /* as sent; auto runs exact */
  int radius;
  int window; /* enum cpu_window */
  int stddev; /* output=stddev, else variance */
};

/* The map the service must send for exact: the twin on the luma of the decoded upload. */
static double *exact_twin(const struct codec_image *in, const struct var_case *c) {
  size_t n = (size_t)in->width * in->height;
  struct cpu_image src = view(in), luma = src;
  luma.channels = 1;
  luma.data = malloc(cpu_image_bytes(&luma));
  ASSERT_INT(cpu_luma(&src, &luma), ==, ERR_OK);
  double *var = malloc(n * sizeof(double));
  struct cpu_var v = {CPU_VAR_EXACT, c->window, c->radius};
  ASSERT(cpu_variance(NULL, &v, &luma, NULL, var) == ERR_OK);
  for (size_t i = 0; i < n; i++) {
    double x = var[i] > 0 ? var[i] : 0;
    var[i] = c->stddev ? sqrt(x) : x;
  }
  free(luma.data);
  return var;
}

static double expected_scale(int depth, int stddev) {
  return depth == 8 ? (stddev ? 256 : 4) : (stddev ? 2 : 1.0 / 16384);
}

/* One /variance request on the upload img: status, shape, headers; exact is checked sample by
 * sample against the twin, the float methods by their PSNR. */
static void check_variance(const uint8_t *img, size_t len, const struct var_case *c,
                           double min_psnr) {
  char path[256], buf[64];
  struct http_resp r;
  struct codec_image in, out;
  snprintf(path, sizeof(path), "/variance?method=%s&radius=%d&window=%s&output=%s", c->method,
           c->radius, c->window == CPU_WINDOW_BOX ? "box" : "triangle",
           c->stddev ? "stddev" : "variance");
  post(path, img, len, NULL, NULL, &r);
  expect_image(&r, "image/png", &out);
  decode(img, len, &in);
  ASSERT_INT(out.width, ==, in.width);
  ASSERT_INT(out.height, ==, in.height);
  ASSERT_INT(out.channels, ==, 1);
  ASSERT_INT(out.depth, ==, 16);
  double scale = http_header_num(&r, "X-Scale");
  ASSERT_DBL(scale, ==, expected_scale(in.depth, c->stddev));
  int exact = !strcmp(c->method, "exact") || !strcmp(c->method, "auto");
  ASSERT_STR(http_header(&r, "X-Method", buf, sizeof(buf)), exact ? "exact" : c->method);
  double psnr = http_header_num(&r, "X-PSNR");
  if (exact) {
    ASSERT(isinf(psnr));
    double *twin = exact_twin(&in, c);
    const uint16_t *px = (const uint16_t *)out.pixels;
    for (size_t i = 0; i < (size_t)in.width * in.height; i++) {
      double s = floor(twin[i] * scale + 0.5);
      if (px[i] != (s > 65535 ? 65535 : s))
        TEST_FAIL("%s: sample %zu is %u, the twin gives %.0f", path, i, px[i], s);
    }
    free(twin);
  } else {
    if (!(psnr >= min_psnr)) TEST_FAIL("%s: X-PSNR %.2f < %.0f", path, psnr, min_psnr);
  }
  codec_image_free(&in);
  codec_image_free(&out);
  http_resp_free(&r);
}

/* Every method (threewise at 2^k - 1), both windows, both outputs, on colour (luma) and gray. */
static void test_variance_methods(void) {
  const char *methods[] = {"naive", "koenig", "welford", "pairwise", "threewise", "exact", "auto"};
  const char *inputs[] = {"coffee.png", "camera.png"};
  for (int f = 0; f < 2; f++) {
    size_t len;
    uint8_t *img = fixture(inputs[f], &len);
    for (int m = 0; m < 7; m++)
      for (int w = 0; w < 2; w++)
        for (int s = 0; s < 2; s++) {
          struct var_case c = {methods[m], m == 4 ? 3 + 4 * f : 7 - 2 * f, w, s};
          /* measured on the CPU: koenig 87 dB at worst (stddev on a gray 16-bit image), the
           * others above 140 dB */
          check_variance(img, len, &c, m == 1 ? 70 : 100);
        }
    free(img);
  }
}

/* 16-bit input: the other scales; radii larger than the image; odd shapes. */
static void test_variance_sizes(void) {
  size_t len;
  uint8_t *img = fixture("gray16.png", &len);
  for (int s = 0; s < 2; s++) {
    check_variance(img, len, &(struct var_case){"exact", 5, CPU_WINDOW_TRIANGLE, s}, 0);
    check_variance(img, len, &(struct var_case){"welford", 3, CPU_WINDOW_BOX, s}, 100);
  }
  free(img);
  img = fixture("rgb16.png", &len);
  check_variance(img, len, &(struct var_case){"exact", 127, CPU_WINDOW_BOX, 1}, 0);
  free(img);
  img = fixture("gray_alpha.png", &len);
  check_variance(img, len, &(struct var_case){"auto", 2, CPU_WINDOW_TRIANGLE, 0}, 0);
  free(img);
  static const int shapes[][4] = {{1, 1, 1, 8}, {1, 37, 3, 8}, {41, 1, 1, 16}, {17, 13, 4, 8}};
  for (int i = 0; i < 4; i++) {
    img = make_png(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], 7u + i, &len);
    check_variance(img, len, &(struct var_case){"exact", 7, CPU_WINDOW_TRIANGLE, 1}, 0);
    check_variance(img, len, &(struct var_case){"pairwise", 3, CPU_WINDOW_BOX, 0}, 90);
    check_variance(img, len, &(struct var_case){"threewise", 1, CPU_WINDOW_TRIANGLE, 1}, 90);
    free(img);
  }
}

/* JSON mode: the map's min, mean and max in levels, the scale, the method; and the raw body. */
static void test_variance_json(void) {
  struct http_resp r;
  size_t len;
  uint8_t *img = fixture("camera.png", &len);
  post("/variance?radius=3", img, len, NULL, "application/json", &r);
  ASSERT_INT(r.status, ==, 200);
  json_t *j = json_loads(r.body, 0, NULL);
  ASSERT(j);
  ASSERT_STR(json_string_value(json_object_get(j, "method")), "exact");
  ASSERT_STR(json_string_value(json_object_get(j, "requested_method")), "auto");
  ASSERT_STR(json_string_value(json_object_get(j, "output")), "stddev");
  ASSERT_STR(json_string_value(json_object_get(j, "window")), "triangle");
  ASSERT_INT(json_integer_value(json_object_get(j, "radius")), ==, 3);
  ASSERT_INT(json_integer_value(json_object_get(j, "bit_depth")), ==, 16);
  ASSERT_INT(json_integer_value(json_object_get(j, "channels")), ==, 1);
  ASSERT_DBL(json_number_value(json_object_get(j, "scale")), ==, 256);
  ASSERT(json_is_null(json_object_get(j, "psnr_db"))); /* exact: identical */
  struct codec_image in;
  decode(img, len, &in);
  double *twin = exact_twin(&in, &(struct var_case){"exact", 3, CPU_WINDOW_TRIANGLE, 1});
  double lo = twin[0], hi = twin[0], sum = 0;
  size_t n = (size_t)in.width * in.height;
  for (size_t i = 0; i < n; i++) lo = fmin(lo, twin[i]), hi = fmax(hi, twin[i]), sum += twin[i];
  double min = json_number_value(json_object_get(j, "min"));
  double mean = json_number_value(json_object_get(j, "mean"));
  double max = json_number_value(json_object_get(j, "max"));
  ASSERT(0 <= min && min <= mean && mean <= max && max <= 127.5);
  ASSERT_NEAR(min, lo, 1e-9);
  ASSERT_NEAR(max, hi, 1e-9);
  ASSERT_NEAR(mean, sum / n, 1e-9 * hi);
  ASSERT_DBL(mean, >, 1); /* a photograph has texture */
  free(twin);
  codec_image_free(&in);
  json_decref(j);
  http_resp_free(&r);
  /* variance in levels^2, float method with a PSNR; raw body upload */
  ASSERT(http_request(&srv, "POST", "/variance?output=variance&method=pairwise", "image/png",
                      "application/json", img, len, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  j = json_loads(r.body, 0, NULL);
  ASSERT(json_number_value(json_object_get(j, "max")) <= 127.5 * 127.5);
  ASSERT_DBL(json_number_value(json_object_get(j, "psnr_db")), >=, 100);
  ASSERT_NEAR(json_number_value(json_object_get(j, "psnr_db")), http_header_num(&r, "X-PSNR"),
              0.005);
  json_t *ref = json_object_get(json_object_get(j, "timing_ms"), "reference");
  ASSERT(json_is_number(ref)); /* the exact map is timed as its own stage */
  ASSERT_DBL(json_number_value(ref), >, 0);
  json_decref(j);
  http_resp_free(&r);
  post("/variance?psnr=false&method=naive", img, len, NULL, NULL, &r);
  char buf[64];
  ASSERT_INT(r.status, ==, 200);
  ASSERT(!http_header(&r, "X-PSNR", buf, sizeof(buf)));
  http_resp_free(&r);
  free(img);
}

/* ---- /convolve ---- */

/* The bytes cpu_convolve_image gives for c on the decoded upload must be the answer's. */
static void expect_convolved(const struct http_resp *r, const uint8_t *img, size_t len,
                             const struct cpu_conv *c, const char *method) {
  struct codec_image in, out;
  char buf[64];
  expect_image(r, "image/png", &out);
  ASSERT_STR(http_header(r, "X-Method", buf, sizeof(buf)), method);
  ASSERT(!http_header(r, "X-PSNR", buf, sizeof(buf)));
  decode(img, len, &in);
  ASSERT_INT(out.width, ==, in.width);
  ASSERT_INT(out.height, ==, in.height);
  ASSERT_INT(out.channels, ==, in.channels);
  ASSERT_INT(out.depth, ==, in.depth);
  struct cpu_image src = view(&in), dst = src;
  dst.data = malloc(cpu_image_bytes(&src));
  ASSERT_INT(cpu_convolve_image(NULL, c, &src, &dst), ==, ERR_OK);
  if (memcmp(dst.data, out.pixels, cpu_image_bytes(&src)) != 0)
    TEST_FAIL("%s: the answer differs from cpu_convolve_image", method);
  free(dst.data);
  codec_image_free(&in);
  codec_image_free(&out);
}

static void test_convolve_named(void) {
  const char *inputs[] = {"coffee.png", "gray_alpha.png", "rgb16.png"};
  for (int f = 0; f < 3; f++) {
    size_t len;
    uint8_t *img = fixture(inputs[f], &len);
    for (int k = 0; cpu_conv_names[k]; k++) {
      struct http_resp r;
      struct cpu_conv c;
      char path[64];
      snprintf(path, sizeof(path), "/convolve?kernel=%s", cpu_conv_names[k]);
      post(path, img, len, NULL, NULL, &r);
      ASSERT(cpu_conv_named(cpu_conv_names[k], &c) == ERR_OK);
      expect_convolved(&r, img, len, &c, cpu_conv_names[k]);
      http_resp_free(&r);
    }
    free(img);
  }
}

static void test_convolve_custom(void) {
  size_t len;
  uint8_t *img = fixture("chelsea.png", &len);
  struct http_resp r;
  struct cpu_conv c = {.size = 5};
  /* rows in the params JSON, normalised: a 5x5 mean */
  post("/convolve", img, len,
       "{\"kernel\": [[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1]]}", NULL, &r);
  for (int i = 0; i < 25; i++) c.k[i] = (float)(1.0 / 25);
  expect_convolved(&r, img, len, &c, "custom");
  http_resp_free(&r);
  /* a flat array in the query string (URL-encoded JSON), normalised by 16: gauss3's weights */
  post("/convolve?kernel=%5B1%2C2%2C1%2C2%2C4%2C2%2C1%2C2%2C1%5D", img, len, NULL, NULL, &r);
  ASSERT(cpu_conv_named("gauss3", &c) == ERR_OK);
  expect_convolved(&r, img, len, &c, "custom");
  http_resp_free(&r);
  /* not normalised, with a bias: twice the input minus 10.5; the same kernel in both places */
  post("/convolve?kernel=[0,0,0,0,2,0,0,0,0]&normalize=false&bias=-10.5", img, len,
       "{\"kernel\": [[0,0,0],[0,2,0],[0,0,0]], \"normalize\": false}", NULL, &r);
  c = (struct cpu_conv){.size = 3, .bias = -10.5f};
  c.k[4] = 2;
  expect_convolved(&r, img, len, &c, "custom");
  http_resp_free(&r);
  /* a 1x1 kernel, and a named kernel whose own bias a given bias overrides */
  post("/convolve?kernel=[3]", img, len, "{\"normalize\": true}", NULL, &r);
  c = (struct cpu_conv){.size = 1, .k = {1}};
  expect_convolved(&r, img, len, &c, "custom");
  http_resp_free(&r);
  post("/convolve?kernel=emboss&bias=0", img, len, NULL, NULL, &r);
  ASSERT(cpu_conv_named("emboss", &c) == ERR_OK);
  c.bias = 0;
  expect_convolved(&r, img, len, &c, "emboss");
  http_resp_free(&r);
  free(img);
  /* odd sizes, a 31x31 kernel */
  char params[8192] = "{\"kernel\": [";
  for (int i = 0; i < 31 * 31; i++) strcat(params, i ? ",1" : "1");
  strcat(params, "], \"format\": \"png\"}");
  c = (struct cpu_conv){.size = 31};
  for (int i = 0; i < 31 * 31; i++) c.k[i] = (float)(1.0 / (31 * 31));
  static const int shapes[][4] = {{1, 1, 3, 8}, {1, 29, 1, 16}, {17, 13, 4, 8}};
  for (int i = 0; i < 3; i++) {
    img = make_png(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], 99u + i, &len);
    post("/convolve", img, len, params, NULL, &r);
    expect_convolved(&r, img, len, &c, "custom");
    http_resp_free(&r);
    free(img);
  }
}

/* ---- /contrast ---- */

/* The answer must be cpu_contrast_image's within tol levels, with the upload's shape. */
static void expect_contrast(const struct http_resp *r, const uint8_t *img, size_t len,
                            const struct cpu_contrast *c, const char *mime) {
  struct codec_image in, out;
  char buf[64];
  expect_image(r, mime, &out);
  ASSERT(!http_header(r, "X-PSNR", buf, sizeof(buf)));
  decode(img, len, &in);
  ASSERT_INT(out.width, ==, in.width);
  ASSERT_INT(out.height, ==, in.height);
  ASSERT_INT(out.channels, ==, in.channels);
  ASSERT_INT(out.depth, ==, in.depth);
  struct cpu_image src = view(&in), dst = src;
  dst.data = malloc(cpu_image_bytes(&src));
  ASSERT(cpu_contrast_image(NULL, c, &src, &dst) == ERR_OK);
  size_t n = (size_t)in.width * in.height * in.channels;
  int worst = 0;
  for (size_t i = 0; i < n; i++) {
    int a = in.depth == 8 ? ((uint8_t *)dst.data)[i] : ((uint16_t *)dst.data)[i];
    int b = in.depth == 8 ? out.pixels[i] : ((uint16_t *)out.pixels)[i];
    worst = abs(a - b) > worst ? abs(a - b) : worst;
  }
  ASSERT_INT(worst, <=, 1); /* 0 on the CPU; the GPU is within one level */
  free(dst.data);
  codec_image_free(&in);
  codec_image_free(&out);
}

static void test_contrast(void) {
  struct http_resp r;
  size_t len;
  uint8_t *img = fixture("coffee.png", &len);
  post("/contrast", img, len, NULL, NULL, &r);
  expect_contrast(&r, img, len, &(struct cpu_contrast){5, 0.5, 128, 0.5, 50}, "image/png");
  char buf[64];
  ASSERT_STR(http_header(&r, "X-Method", buf, sizeof(buf)), "wallis");
  http_resp_free(&r);
  post("/contrast?radius=12&a=0.2", img, len, "{\"b\": 1, \"s0\": 80, \"m0\": 100}", NULL, &r);
  expect_contrast(&r, img, len, &(struct cpu_contrast){12, 0.2, 100, 1, 80}, "image/png");
  http_resp_free(&r);
  free(img);
  const char *inputs[] = {"rgba16.png", "camera.png", "gray16.png", "palette_trns.png"};
  for (int i = 0; i < 4; i++) {
    img = fixture(inputs[i], &len);
    post("/contrast?radius=2", img, len, NULL, NULL, &r);
    expect_contrast(&r, img, len, &(struct cpu_contrast){2, 0.5, 128, 0.5, 50}, "image/png");
    http_resp_free(&r);
    free(img);
  }
  /* a gray picture in RGB stays gray: R = G = B */
  struct codec_image g = {malloc(40 * 30 * 3), 40, 30, 3, 8, CODEC_PNG, 1}, out;
  for (int i = 0; i < 40 * 30; i++) memset(g.pixels + 3 * i, (i * 37 + i / 40 * 11) % 256, 3);
  uint8_t *png;
  ASSERT(codec_encode(&g,
                      &(struct codec_encode_opts){
                          .format = CODEC_PNG, .quality = 90, .compression = 1, .lossless = 0},
                      &png, &len, NULL, 0) == CODEC_OK);
  post("/contrast", png, len, NULL, NULL, &r);
  expect_contrast(&r, png, len, &(struct cpu_contrast){5, 0.5, 128, 0.5, 50}, "image/png");
  decode(r.body, r.len, &out);
  for (int i = 0; i < 40 * 30; i++)
    if (out.pixels[3 * i] != out.pixels[3 * i + 1] || out.pixels[3 * i] != out.pixels[3 * i + 2])
      TEST_FAIL("pixel %d is not gray", i);
  codec_image_free(&out);
  codec_image_free(&g);
  http_resp_free(&r);
  free(png);
  /* JPEG in, JPEG out by default */
  img = fixture("rocket.jpg", &len);
  post("/contrast", img, len, NULL, NULL, &r);
  expect_image(&r, "image/jpeg", &out);
  codec_image_free(&out);
  http_resp_free(&r);
  free(img);
}

/* ---- errors ---- */

static void test_errors(void) {
  static const struct {
    const char *path, *params;
    long status;
    const char *code, *says;
  } cases[] = {
      {"/variance?method=threewise&radius=5", NULL, 400, "invalid_parameter", "1 3 7 15 31 63"},
      {"/variance?method=threewise", "{\"radius\": 6}", 400, "invalid_parameter", "got 6"},
      {"/variance?radius=0", NULL, 400, "invalid_parameter", "radius"},
      {"/variance?radius=200", NULL, 400, "invalid_parameter", "127"},
      {"/variance?window=gauss", NULL, 400, "invalid_parameter", "triangle, box"},
      {"/variance?output=mean", NULL, 400, "invalid_parameter", "stddev, variance"},
      {"/variance?format=jpeg", NULL, 400, "invalid_parameter", "png"},
      {"/variance?method=fast", NULL, 400, "unknown_method", "threewise"},
      {"/variance?sigma=2", NULL, 400, "unknown_parameter", "radius"},
      {"/variance?radius=3", "{\"radius\": 5}", 400, "conflicting_parameter", "radius"},
      {"/variance", "{\"radius\": ", 400, "invalid_json", "JSON"},
      {"/contrast?a=1.5", NULL, 400, "invalid_parameter", "0 to 1"},
      {"/contrast?s0=0", NULL, 400, "invalid_parameter", "s0"},
      {"/contrast?radius=0", NULL, 400, "invalid_parameter", "radius"},
      {"/contrast?quality=0", NULL, 400, "invalid_parameter", "quality"},
      {"/contrast?b=0.5", "{\"b\": 0.25}", 400, "conflicting_parameter", "b"},
      {"/convolve", NULL, 400, "missing_parameter", "kernel"},
      {"/convolve?kernel=blur", NULL, 400, "invalid_parameter", "edge, sharpen, emboss"},
      {"/convolve", "{\"kernel\": [[1,2],[3,4]]}", 400, "invalid_parameter", "got 2x2"},
      {"/convolve?kernel=[1,2,3,4]", NULL, 400, "invalid_parameter", "got 2x2"},
      {"/convolve", "{\"kernel\": [1,2,3,4,5]}", 400, "invalid_parameter", "not a square"},
      {"/convolve", "{\"kernel\": [[1,2,3],[4,5,6]]}", 400, "invalid_parameter", "odd side"},
      {"/convolve", "{\"kernel\": [[1,2,3],[4,5],[7,8,9]]}", 400, "invalid_parameter",
       "row 2 has 2"},
      {"/convolve", "{\"kernel\": [[1,2,3],[4,\"x\",6],[7,8,9]]}", 400, "invalid_parameter",
       "row 2, column 2"},
      {"/convolve", "{\"kernel\": [1,2,null,4,5,6,7,8,9]}", 400, "invalid_parameter",
       "row 1, column 3"},
      {"/convolve", "{\"kernel\": [1e7,0,0,0,0,0,0,0,0]}", 400, "invalid_parameter", "1e+06"},
      {"/convolve", "{\"kernel\": {\"a\": 1}}", 400, "invalid_parameter", "JSON array"},
      {"/convolve", "{\"kernel\": []}", 400, "invalid_parameter", "0 numbers"},
      {"/convolve?kernel=%5B1%2C2", NULL, 400, "invalid_parameter", "not valid JSON"},
      {"/convolve", "{\"kernel\": \"[[1,2]\"}", 400, "invalid_parameter", "not valid JSON"},
      {"/convolve", "{\"kernel\": [[1,2,3],[4,5,6],[7,8,9]}", 400, "invalid_json", "params"},
      {"/convolve?kernel=[1,-1,0,0,1e-7,0,0,0,0]&normalize=true", NULL, 400, "invalid_parameter",
       "too close to 0"},
      {"/convolve?kernel=edge", "{\"kernel\": \"sharpen\"}", 400, "conflicting_parameter",
       "kernel"},
      {"/convolve?kernel=[1,1,1,1,1,1,1,1,1]", "{\"kernel\": [1,1,1,1,2,1,1,1,1]}", 400,
       "conflicting_parameter", "kernel"},
      {"/convolve?kernel=box&bias=70000", NULL, 400, "invalid_parameter", "bias"},
      {"/convolve?kernel=box&format=gif", NULL, 400, "invalid_parameter", "format"},
  };
  char big[4096] = "{\"kernel\": [";
  for (int i = 0; i < 33 * 33; i++) strcat(big, i ? ",1" : "1");
  strcat(big, "]}");
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) + 1; i++) {
    struct http_resp r;
    int last = i == sizeof(cases) / sizeof(cases[0]);
    const char *path = last ? "/convolve" : cases[i].path;
    post_fixture(path, "camera.png", last ? big : cases[i].params, &r);
    http_expect_error(&r, last ? 400 : cases[i].status, last ? "invalid_parameter" : cases[i].code);
    const char *says = last ? "got 33x33" : cases[i].says;
    if (!strstr(r.body, says)) TEST_FAIL("%s: '%s' does not say '%s'", path, r.body, says);
    http_resp_free(&r);
  }
  /* the same value in both places is fine */
  struct http_resp r;
  post_fixture("/convolve?kernel=edge&bias=2", "camera.png",
               "{\"kernel\": \"edge\", \"bias\": 2.0}", &r);
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
  ASSERT(http_request(&srv, "GET", "/variance", NULL, NULL, NULL, 0, &r) == 0);
  http_expect_error(&r, 405, "method_not_allowed");
  http_resp_free(&r);
  ASSERT(http_request(&srv, "POST", "/contrast", "text/plain", NULL, "hello", 5, &r) == 0);
  http_expect_error(&r, 415, "unsupported_media_type");
  http_resp_free(&r);
  post_fixture("/convolve?kernel=box", "truncated.png", NULL, &r);
  http_expect_error(&r, 422, "undecodable_image");
  http_resp_free(&r);
  ASSERT(http_request(&srv, "POST", "/variance", NULL, NULL, "", 0, &r) == 0);
  http_expect_error(&r, 400, "missing_image");
  http_resp_free(&r);
}

/* /methods describes the three endpoints: methods, parameters, normalisation, scale. */
static void test_methods(void) {
  struct http_resp r;
  ASSERT(http_request(&srv, "GET", "/methods", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  json_t *j = json_loads(r.body, 0, NULL), *m;
  size_t i;
  int variance = 0, contrast = 0, convolve = 0;
  json_array_foreach(json_object_get(j, "methods"), i, m) {
    const char *ep = json_string_value(json_object_get(m, "endpoint"));
    ASSERT(json_array_size(json_object_get(m, "backends")) >= 1);
    ASSERT(strlen(json_string_value(json_object_get(m, "description"))) > 10);
    if (strcmp(ep, "/variance") == 0) {
      variance++;
      ASSERT(strstr(json_string_value(json_object_get(m, "normalization")), "W - 1"));
      json_t *s = json_object_get(json_object_get(m, "scale"), "8bit");
      ASSERT_DBL(json_number_value(json_object_get(s, "stddev")), ==, 256);
      ASSERT_INT(json_array_size(json_object_get(m, "params")), ==, 7);
    }
    contrast += strcmp(ep, "/contrast") == 0;
    if (strcmp(ep, "/convolve") == 0) {
      convolve++;
      json_t *k = json_array_get(json_object_get(m, "params"), 0);
      ASSERT_STR(json_string_value(json_object_get(k, "name")), "kernel");
      ASSERT(json_is_true(json_object_get(k, "required")));
      ASSERT_INT(json_integer_value(json_object_get(k, "max_size")), ==, 31);
      ASSERT_INT(json_array_size(json_object_get(k, "choices")), ==, 5);
    }
  }
  ASSERT_INT(variance, ==, 7);
  ASSERT_INT(contrast, ==, 1);
  ASSERT_INT(convolve, ==, 1);
  json_decref(j);
  http_resp_free(&r);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  server_start(&srv, NULL);
  RUN(test_methods);
  RUN(test_variance_methods);
  RUN(test_variance_sizes);
  RUN(test_variance_json);
  RUN(test_convolve_named);
  RUN(test_convolve_custom);
  RUN(test_contrast);
  RUN(test_errors);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  curl_global_cleanup();
  fprintf(stderr, "integ_local: all passed\n");
  return 0;
}

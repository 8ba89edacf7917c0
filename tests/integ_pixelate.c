/* Integration tests of POST /pixelate against the real binary: every block of the answer is the
 * mean of the input's block (worked out here in integers, colour premultiplied by alpha, rounded
 * half up), blocks on the right and bottom edges cut short; regions change nothing outside them
 * and give the whole image's mosaic inside; the JSON mode's fields; bad parameters are 400s with
 * a JSON error, a region outside the image too; and the cost estimate meets --max-cost. */
#include "harness.h"
#include "test.h"

#include "../codecs/codecs.h"

#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct server srv;

static void decode(const void *data, size_t len, struct codec_image *img) {
  char msg[256] = "";
  struct codec_limits lim = {100000, 100000, 1000000000};
  if (codec_decode(data, len, &lim, img, msg, sizeof(msg)) != CODEC_OK)
    TEST_FAIL("does not decode: %s", msg);
}

/* POSTs fixture name to path as a raw PNG body; expects 200 and decodes the answer into out. */
static void pixelate(const char *path, const char *name, struct codec_image *in,
                     struct codec_image *out) {
  size_t len;
  uint8_t *data = fixture(name, &len);
  struct http_resp r;
  char buf[64];
  decode(data, len, in);
  ASSERT_INT(http_request(&srv, "POST", path, "image/png", NULL, data, len, &r), ==, 0);
  if (r.status != 200) TEST_FAIL("%s %s: %ld %s", path, name, r.status, r.body);
  ASSERT_STR(http_header(&r, "Content-Type", buf, sizeof(buf)), "image/png");
  ASSERT_STR(http_header(&r, "X-Method", buf, sizeof(buf)), "mosaic");
  decode(r.body, r.len, out);
  ASSERT_INT(out->width, ==, in->width);
  ASSERT_INT(out->height, ==, in->height);
  ASSERT_INT(out->channels, ==, in->channels);
  http_resp_free(&r);
  free(data);
}

/* The mean of channel ch over the block at (bx, by) of side b of img (8-bit), rounded half up;
 * colour premultiplied by alpha when the image has alpha (0 where the block is transparent). */
static int block_mean(const struct codec_image *img, int bx, int by, int b, int ch) {
  int c = img->channels, alpha = c == 2 || c == 4;
  long long sum = 0, wsum = 0, n = 0;
  for (int y = by; y < by + b && y < img->height; y++)
    for (int x = bx; x < bx + b && x < img->width; x++) {
      const uint8_t *p = img->pixels + ((size_t)y * img->width + x) * c;
      long long a = alpha ? p[c - 1] : 1;
      sum += alpha && ch < c - 1 ? p[ch] * a : p[ch];
      wsum += a;
      n++;
    }
  if (alpha && ch < c - 1) return wsum ? (int)((2 * sum + wsum) / (2 * wsum)) : 0;
  return (int)((2 * sum + n) / (2 * n));
}

/* Every sample of out inside rect (x0, y0, x1, y1) is the mean of its block of side b of in (each
 * block's means worked out once: a sample at a time would cost the block's area per sample). */
static void expect_mosaic(const struct codec_image *in, const struct codec_image *out, int b,
                          const int rect[4]) {
  int c = in->channels, bad = 0, nbx = (in->width + b - 1) / b, nby = (in->height + b - 1) / b;
  int *mean = malloc(sizeof(int) * (size_t)nbx * nby * c);
  ASSERT(mean != NULL);
  for (int j = 0; j < nby; j++)
    for (int i = 0; i < nbx; i++)
      for (int ch = 0; ch < c; ch++)
        mean[((size_t)j * nbx + i) * c + ch] = block_mean(in, i * b, j * b, b, ch);
  for (int y = rect[1]; y < rect[3]; y++)
    for (int x = rect[0]; x < rect[2]; x++)
      for (int ch = 0; ch < c; ch++) {
        int want = mean[((size_t)(y / b) * nbx + x / b) * c + ch];
        int got = out->pixels[((size_t)y * out->width + x) * c + ch];
        if (got != want && bad++ < 3)
          fprintf(stderr, "  (%d, %d) channel %d: %d, the block's mean is %d\n", x, y, ch, got,
                  want);
      }
  free(mean);
  ASSERT_INT(bad, ==, 0);
}

static void test_whole(void) {
  static const struct {
    const char *name, *query;
    int block;
  } cases[] = {
      {"camera.png", "", 16},              /* gray, the default block */
      {"chelsea.png", "?block=7", 7},      /* RGB, 451x300: edge blocks cut short */
      {"logo.png", "?block=32", 32},       /* RGBA: colour premultiplied by alpha */
      {"gray_alpha.png", "?block=2", 2},   /* gray and alpha, the smallest block */
      {"coffee.png", "?block=1024", 1024}, /* one block: the image's mean */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char path[64];
    struct codec_image in, out;
    snprintf(path, sizeof(path), "/pixelate%s", cases[i].query);
    pixelate(path, cases[i].name, &in, &out);
    int all[4] = {0, 0, in.width, in.height};
    expect_mosaic(&in, &out, cases[i].block, all);
    codec_image_free(&in);
    codec_image_free(&out);
  }
}

/* Regions: outside them (and their feather) the input's pixels; inside, the whole image's
 * mosaic, the blocks aligned to the image, not to the region. */
static void test_regions(void) {
  struct codec_image in, out;
  static const int r[2][4] = {{10, 20, 100, 50}, {300, 200, 151, 100}}; /* x, y, w, h */
  pixelate("/pixelate?block=12&regions=10,20,100,50;300,200,151,100", "chelsea.png", &in, &out);
  size_t px = (size_t)in.channels, changed = 0, outside_changed = 0;
  for (int y = 0; y < in.height; y++)
    for (int x = 0; x < in.width; x++) {
      int inside = 0;
      for (int k = 0; k < 2; k++)
        inside |= x >= r[k][0] && x < r[k][0] + r[k][2] && y >= r[k][1] && y < r[k][1] + r[k][3];
      int differs = memcmp(in.pixels + ((size_t)y * in.width + x) * px,
                           out.pixels + ((size_t)y * in.width + x) * px, px) != 0;
      changed += differs;
      outside_changed += differs && !inside;
    }
  ASSERT_INT(outside_changed, ==, 0);
  ASSERT_INT(changed, >, 5000); /* a photograph's blocks are not flat */
  for (int k = 0; k < 2; k++) {
    int rect[4] = {r[k][0], r[k][1], r[k][0] + r[k][2], r[k][1] + r[k][3]};
    if (rect[2] > in.width) rect[2] = in.width; /* the second is clipped to the image */
    if (rect[3] > in.height) rect[3] = in.height;
    expect_mosaic(&in, &out, 12, rect);
  }
  codec_image_free(&in);
  codec_image_free(&out);
}

/* The JSON mode: the image in base64 and the operation's fields. */
static void test_json(void) {
  size_t len;
  uint8_t *data = fixture("camera.png", &len);
  struct http_resp r;
  ASSERT_INT(http_post_form(&srv, "/pixelate?block=8", "image", data, len,
                            "{\"regions\": [[0, 0, 64, 64]], \"feather\": 4}", "application/json",
                            &r),
             ==, 0);
  ASSERT_INT(r.status, ==, 200);
  json_t *j = json_loads(r.body, 0, NULL);
  ASSERT(j != NULL);
  ASSERT_INT(json_integer_value(json_object_get(j, "block")), ==, 8);
  ASSERT_INT(json_integer_value(json_object_get(j, "regions")), ==, 1);
  ASSERT_STR(json_string_value(json_object_get(j, "method")), "mosaic");
  ASSERT_INT(json_integer_value(json_object_get(j, "width")), ==, 512);
  ASSERT(json_string_length(json_object_get(j, "image")) > 1000);
  json_decref(j);
  http_resp_free(&r);
  free(data);
}

static void expect_400(const char *path, const char *code, const char *words) {
  size_t len;
  uint8_t *data = fixture("camera.png", &len);
  struct http_resp r;
  ASSERT_INT(http_request(&srv, "POST", path, "image/png", NULL, data, len, &r), ==, 0);
  http_expect_error(&r, 400, code);
  if (!strstr(r.body, words)) TEST_FAIL("%s: %s has no '%s'", path, r.body, words);
  http_resp_free(&r);
  free(data);
}

static void test_errors(void) {
  expect_400("/pixelate?block=1", "invalid_parameter", "block");
  expect_400("/pixelate?block=1025", "invalid_parameter", "block");
  expect_400("/pixelate?block=abc", "invalid_parameter", "block");
  expect_400("/pixelate?block=16.5", "invalid_parameter", "block");
  expect_400("/pixelate?feather=3", "invalid_parameter", "feather applies only with regions");
  expect_400("/pixelate?regions=600,600,10,10", "invalid_parameter", "wholly outside");
  expect_400("/pixelate?sigma=3", "unknown_parameter", "block");
}

/* Sets the width and height in the IHDR of a PNG and makes it RGBA: the budget reads only the
 * header (the rest then fails to decode, but is never decoded when the budget says no). */
static void set_shape(uint8_t *png, uint32_t w, uint32_t h) {
  for (int i = 0; i < 4; i++) {
    png[16 + i] = (uint8_t)(w >> (24 - 8 * i));
    png[20 + i] = (uint8_t)(h >> (24 - 8 * i));
  }
  png[25] = 6;
}

/* The estimate of the 422 too_expensive under --max-cost 1 (its error object's estimate_s). */
static double refused_estimate(struct server *s, const char *path, const uint8_t *data,
                               size_t len) {
  struct http_resp r;
  ASSERT_INT(http_request(s, "POST", path, "image/png", NULL, data, len, &r), ==, 0);
  http_expect_error(&r, 422, "too_expensive");
  json_t *j = json_loads(r.body, 0, NULL), *err = json_object_get(j, "error");
  double est = json_number_value(json_object_get(err, "estimate_s"));
  ASSERT_DBL(json_number_value(json_object_get(err, "max_cost_s")), ==, 1);
  json_decref(j);
  http_resp_free(&r);
  return est;
}

/* The cost estimate meets --max-cost before anything is decoded: 20000x20000 RGBA (the limits
 * raised to take it) is 1.6 billion samples, seconds of one core; with a 16x16 region the mosaic
 * costs next to nothing, and the estimate is the request's own (its upload, decode and answer). At
 * the default limits the same header is a 422 image_too_large, whatever its cost. */
static void test_cost(void) {
  struct server limited;
  static const char *const args[] = {"--max-cost",   "1",           "--max-pixels",
                                     "400M",         "--max-width", "20000",
                                     "--max-height", "20000",       NULL};
  size_t len;
  uint8_t *data = fixture("camera.png", &len);
  set_shape(data, 20000, 20000);
  server_start(&limited, args);
  double whole = refused_estimate(&limited, "/pixelate", data, len);
  double region = refused_estimate(&limited, "/pixelate?regions=0,0,16,16", data, len);
  fprintf(stderr, "    20000x20000 RGBA: estimate %.1f s, with a 16x16 region %.1f s\n", whole,
          region);
  ASSERT_DBL(whole, <, 60);
  ASSERT_DBL(region, >, 1);
  ASSERT_DBL(whole - region, >, 1); /* 1.6 billion samples' mosaic */
  ASSERT_INT(server_stop(&limited, SIGTERM), ==, 0);
  struct http_resp r;
  ASSERT_INT(http_request(&srv, "POST", "/pixelate", "image/png", NULL, data, len, &r), ==, 0);
  http_expect_error(&r, 422, "image_too_large");
  http_resp_free(&r);
  free(data);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  server_start(&srv, NULL);
  RUN(test_whole);
  RUN(test_regions);
  RUN(test_json);
  RUN(test_errors);
  RUN(test_cost);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  curl_global_cleanup();
  fprintf(stderr, "integ_pixelate: all passed\n");
  return 0;
}

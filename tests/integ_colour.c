/* Integration tests of the output options that issue 36 added, against the real binary: the
 * upload's ICC profile goes out with the result in JPEG, PNG and WebP (the same bytes);
 * colorspace=srgb converts the pixels as Little CMS does (tests/data/p3_srgb.png, made by
 * Pillow's ImageCms) and attaches no profile; /variance answers format=raw and npy with the map's
 * samples and its shape in headers; WebP's effort trades time for size and is range-checked. */
#include "../codecs/codecs.h"
#include "harness.h"
#include "test.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

static struct server srv;

/* POSTs fixture name (of Content-Type ctype) raw to path; the answer in r, which must be a 200. */
static void post(const char *path, const char *name, const char *ctype, struct http_resp *r) {
  size_t len;
  uint8_t *img = fixture(name, &len);
  ASSERT_INT(http_request(&srv, "POST", path, ctype, NULL, img, len, r), ==, 0);
  free(img);
  if (r->status != 200) TEST_FAIL("%s %s: status %ld: %.300s", path, name, r->status, r->body);
}

/* The ICC profile of buf (NULL when it has none), its length in *len. */
static uint8_t *profile(const void *buf, size_t n, size_t *len) {
  uint8_t *icc = NULL;
  *len = 0;
  ASSERT_INT(codec_icc_read(buf, n, &icc, len), ==, CODEC_OK);
  return icc;
}

static void test_profile_kept(void) {
  size_t len, want_len, got_len;
  uint8_t *want = fixture("display_p3.icc", &want_len);
  const char *files[][3] = {{"p3.jpg", "image/jpeg", "/blur?sigma=2"},
                            {"p3.png", "image/png", "/blur?sigma=2"},
                            {"p3.webp", "image/webp", "/blur?sigma=2"},
                            {"p3.png", "image/png", "/sharpen?sigma=1&format=jpeg"},
                            {"p3.jpg", "image/jpeg", "/pixelate?block=8&format=webp"}};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    struct http_resp r;
    uint8_t *in = fixture(files[i][0], &len);
    size_t in_len;
    uint8_t *in_icc = profile(in, len, &in_len);
    ASSERT(in_icc != NULL); /* the fixture carries it */
    ASSERT_INT(in_len, ==, want_len);
    post(files[i][2], files[i][0], files[i][1], &r);
    uint8_t *got = profile(r.body, r.len, &got_len);
    if (!got) TEST_FAIL("%s %s: the answer has no profile", files[i][2], files[i][0]);
    ASSERT_INT(got_len, ==, want_len);
    ASSERT_INT(memcmp(got, want, want_len), ==, 0);
    free(got);
    free(in_icc);
    free(in);
    http_resp_free(&r);
  }
  free(want);
}

static void test_srgb(void) {
  struct http_resp r;
  struct codec_limits lim = {0, 0, 0};
  struct codec_image got, ref;
  char msg[128];
  size_t ref_len, icc_len;
  post("/convert?colorspace=srgb&format=png", "p3.png", "image/png", &r);
  uint8_t *icc = profile(r.body, r.len, &icc_len);
  ASSERT(icc == NULL); /* converted: no profile attached */
  uint8_t *ref_buf = fixture("p3_srgb.png", &ref_len);
  ASSERT_INT(codec_decode((const uint8_t *)r.body, r.len, &lim, &got, msg, sizeof(msg)), ==,
             CODEC_OK);
  ASSERT_INT(codec_decode(ref_buf, ref_len, &lim, &ref, msg, sizeof(msg)), ==, CODEC_OK);
  ASSERT_INT(got.width * got.height * got.channels, ==, ref.width * ref.height * ref.channels);
  int worst = 0, changed = 0;
  size_t n = (size_t)got.width * got.height * got.channels, in_len;
  uint8_t *in_buf = fixture("p3.png", &in_len);
  struct codec_image in;
  ASSERT_INT(codec_decode(in_buf, in_len, &lim, &in, msg, sizeof(msg)), ==, CODEC_OK);
  for (size_t i = 0; i < n; i++) {
    int d = abs((int)got.pixels[i] - (int)ref.pixels[i]);
    worst = d > worst ? d : worst;
    changed += got.pixels[i] != in.pixels[i];
  }
  printf("    srgb: largest difference from lcms2's conversion %d, %d of %zu samples changed\n",
         worst, changed, n);
  ASSERT_INT(worst, <=, 1);
  ASSERT_INT(changed, >, (int)(n / 4)); /* P3 to sRGB moves most samples */
  codec_image_free(&in);
  codec_image_free(&got);
  codec_image_free(&ref);
  free(in_buf);
  free(ref_buf);
  http_resp_free(&r);
}

static void test_variance_data(void) {
  struct http_resp r, png;
  char buf[64];
  post("/variance?radius=3&format=raw", "camera.png", "image/png", &r);
  ASSERT_STR(http_header(&r, "Content-Type", buf, sizeof(buf)), "application/octet-stream");
  int w = (int)http_header_num(&r, "X-Width"), h = (int)http_header_num(&r, "X-Height");
  ASSERT_INT(w, ==, 512);
  ASSERT_INT(h, ==, 512);
  ASSERT_STR(http_header(&r, "X-Sample-Type", buf, sizeof(buf)), "uint16le");
  ASSERT_INT(r.len, ==, (size_t)w * h * 2);
  /* the same samples as the PNG's */
  post("/variance?radius=3", "camera.png", "image/png", &png);
  struct codec_limits lim = {0, 0, 0};
  struct codec_image map;
  char msg[128];
  ASSERT_INT(codec_decode((const uint8_t *)png.body, png.len, &lim, &map, msg, sizeof(msg)), ==,
             CODEC_OK);
  ASSERT_INT(map.depth, ==, 16);
  const uint16_t *s = (const uint16_t *)map.pixels;
  size_t differ = 0;
  for (size_t i = 0; i < (size_t)w * h; i++) {
    const uint8_t *b = (const uint8_t *)r.body + 2 * i;
    differ += (uint16_t)(b[0] | b[1] << 8) != s[i];
  }
  ASSERT_INT(differ, ==, 0);
  codec_image_free(&map);
  http_resp_free(&png);
  http_resp_free(&r);
  post("/variance?radius=3&format=npy", "camera.png", "image/png", &r);
  ASSERT_STR(http_header(&r, "Content-Type", buf, sizeof(buf)), "application/x-npy");
  ASSERT(r.len > (size_t)512 * 512 * 2 && memcmp(r.body, "\x93NUMPY", 6) == 0);
  ASSERT(strstr(r.body + 10, "'<u2'") != NULL);
  ASSERT(strstr(r.body + 10, "(512, 512)") != NULL);
  http_resp_free(&r);
  size_t len;
  uint8_t *img = fixture("camera.png", &len); /* only /variance answers raw */
  ASSERT_INT(
      http_request(&srv, "POST", "/blur?sigma=2&format=raw", "image/png", NULL, img, len, &r), ==,
      0);
  http_expect_error(&r, 400, "invalid_parameter");
  free(img);
  http_resp_free(&r);
}

static void test_effort(void) {
  struct http_resp fast, small, bad;
  post("/blur?sigma=1&format=webp&effort=0", "astronaut.png", "image/png", &fast);
  post("/blur?sigma=1&format=webp&effort=6", "astronaut.png", "image/png", &small);
  printf("    webp effort 0: %zu bytes in %.1f ms; effort 6: %zu bytes in %.1f ms\n", fast.len,
         http_stage(&fast, "encode", NULL, 0), small.len, http_stage(&small, "encode", NULL, 0));
  ASSERT(memcmp(fast.body + 8, "WEBP", 4) == 0 && memcmp(small.body + 8, "WEBP", 4) == 0);
  ASSERT_INT(small.len, <, fast.len);
  size_t len;
  uint8_t *img = fixture("camera.png", &len);
  ASSERT_INT(
      http_request(&srv, "POST", "/blur?sigma=1&effort=7", "image/png", NULL, img, len, &bad), ==,
      0);
  http_expect_error(&bad, 400, "invalid_parameter");
  free(img);
  http_resp_free(&bad);
  http_resp_free(&fast);
  http_resp_free(&small);
}

int main(void) {
  server_start(&srv, NULL);
  RUN(test_profile_kept);
  RUN(test_srgb);
  RUN(test_variance_data);
  RUN(test_effort);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  fprintf(stderr, "integ_colour: all passed\n");
  return 0;
}

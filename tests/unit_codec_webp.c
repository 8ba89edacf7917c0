/* unit_codec_webp: lossy WebP's one-segment rule for smooth images at effort 2 (codecs/webp.c,
 * codecs/webp_yuv.c, docs/methods.md "WebP effort"). The rule's test of the luma plane is checked
 * at its bounds on made-up planes; codec_webp_yuv's planes against libwebp's import (luma
 * identical, chroma within one level); the files against libwebp called directly, byte for byte,
 * and through the VP8 frame header's segmentation flag (read with RFC 6386's boolean decoder): a
 * blurred photograph at effort 2 is one segment at one quality step lower, the photograph itself
 * and every other effort are libwebp's own file at libwebp's method. The blurred photograph's
 * file is then held to the size, PSNR and CPU time of libwebp's four segments. Fixtures come
 * from $BLURD_DATA, or tests/data when run from the repository root. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <webp/decode.h>
#include <webp/encode.h>

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"
#include "test.h"
#include "fixtures.h"

/* A w x h plane of value v with a step of height step at column x0 in the first rows rows. */
static uint8_t *plane_with_steps(int w, int h, int x0, int step, int rows) {
  uint8_t *p = malloc((size_t)w * h);
  ASSERT(p != NULL);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) p[y * w + x] = (uint8_t)(100 + (y < rows && x >= x0 ? step : 0));
  return p;
}

/* Smooth: at most one step over 8 levels in 1000 pixels (10 in 100x100), counted in every row;
 * a step of 8 is not one, nor is a ramp of one level a pixel. */
static void test_smooth_rule(void) {
  uint8_t *p = plane_with_steps(100, 100, 50, 9, 10);
  ASSERT_INT(codec_webp_smooth(p, 100, 100, 100), ==, 1);
  free(p);
  p = plane_with_steps(100, 100, 50, 9, 11);
  ASSERT_INT(codec_webp_smooth(p, 100, 100, 100), ==, 0);
  free(p);
  p = plane_with_steps(100, 100, 50, 8, 100);
  ASSERT_INT(codec_webp_smooth(p, 100, 100, 100), ==, 1);
  free(p);
  p = plane_with_steps(100, 100, 50, -9, 11); /* downwards too */
  ASSERT_INT(codec_webp_smooth(p, 100, 100, 100), ==, 0);
  free(p);
  uint8_t ramp[4 * 256];
  for (int i = 0; i < 4 * 256; i++) ramp[i] = (uint8_t)(i % 256);
  ASSERT_INT(codec_webp_smooth(ramp, 256, 256, 4), ==, 1); /* each row 0..255: no step */
  /* rows 128 bytes apart: rows 1 and 3 go 128..255, 0..127, a step of 255 each; 1 allowed */
  ASSERT_INT(codec_webp_smooth(ramp, 128, 256, 4), ==, 0);
}

/* img box-blurred three times with radius r in each direction (about a Gaussian of sigma
 * r * 0.82), in place. */
static void box_blur(struct codec_image *img, int r) {
  int w = img->width, h = img->height, c = img->channels, n = w > h ? w : h;
  int *line = malloc(sizeof(int) * (size_t)n * c);
  ASSERT(line != NULL);
  for (int pass = 0; pass < 6; pass++) {
    int horiz = pass % 2 == 0, len = horiz ? w : h, count = horiz ? h : w;
    for (int k = 0; k < count; k++) {
      size_t step = horiz ? (size_t)c : (size_t)w * c;
      uint8_t *base = img->pixels + (horiz ? (size_t)k * w * c : (size_t)k * c);
      for (int i = 0; i < len * c; i++) line[i] = base[(size_t)(i / c) * step + i % c];
      for (int i = 0; i < len; i++)
        for (int ch = 0; ch < c; ch++) {
          int sum = 0;
          for (int d = -r; d <= r; d++) {
            int j = i + d < 0 ? 0 : i + d >= len ? len - 1 : i + d;
            sum += line[j * c + ch];
          }
          base[(size_t)i * step + ch] = (uint8_t)((sum + r) / (2 * r + 1));
        }
    }
  }
  free(line);
}

/* codec_webp_yuv against WebPPictureImportRGB on the w x h pixels of img at (x0, y0): luma
 * identical, chroma within one level; returns codec_webp_yuv's answer. */
static int planes_match_libwebp(const struct codec_image *img, int x0, int y0, int w, int h) {
  WebPPicture ours, lib;
  ASSERT(WebPPictureInit(&ours) && WebPPictureInit(&lib));
  ours.width = lib.width = w;
  ours.height = lib.height = h;
  const uint8_t *src = img->pixels + ((size_t)y0 * img->width + x0) * 3;
  size_t stride = (size_t)img->width * 3;
  ASSERT(WebPPictureAlloc(&ours) && WebPPictureImportRGB(&lib, src, (int)stride));
  int smooth =
      codec_webp_yuv(src, stride, w, h, ours.y, ours.y_stride, ours.u, ours.v, ours.uv_stride);
  ASSERT_INT(smooth, ==, codec_webp_smooth(lib.y, lib.y_stride, w, h));
  for (int y = 0; smooth && y < h; y++)
    for (int x = 0; x < w; x++)
      ASSERT_INT(ours.y[y * ours.y_stride + x], ==, lib.y[y * lib.y_stride + x]);
  for (int y = 0; smooth && y < (h + 1) / 2; y++)
    for (int x = 0; x < (w + 1) / 2; x++) {
      ASSERT_INT(abs(ours.u[y * ours.uv_stride + x] - lib.u[y * lib.uv_stride + x]), <=, 1);
      ASSERT_INT(abs(ours.v[y * ours.uv_stride + x] - lib.v[y * lib.uv_stride + x]), <=, 1);
    }
  WebPPictureFree(&ours);
  WebPPictureFree(&lib);
  return smooth;
}

/* The planes of the blurred photograph, whole, at odd sizes and offsets (the 16-pixel blocks'
 * last columns, an odd width's and height's last chroma), and narrower than a block (the plain
 * loop alone): luma as libwebp's, chroma within one level. The photograph is not smooth. */
static void test_yuv_planes(void) {
  struct codec_image photo = fixture_photo("astronaut.png"), blur = fixture_photo("astronaut.png");
  box_blur(&blur, 8);
  ASSERT_INT(planes_match_libwebp(&blur, 0, 0, 512, 512), ==, 1);
  ASSERT_INT(planes_match_libwebp(&blur, 1, 3, 509, 507), ==, 1);
  ASSERT_INT(planes_match_libwebp(&blur, 100, 100, 47, 33), ==, 1);
  ASSERT_INT(planes_match_libwebp(&blur, 7, 9, 15, 3), ==, 1);
  ASSERT_INT(planes_match_libwebp(&blur, 200, 200, 1, 1), ==, 1);
  ASSERT_INT(planes_match_libwebp(&photo, 0, 0, 512, 512), ==, 0);
  codec_image_free(&photo);
  codec_image_free(&blur);
}

/* pic (its planes filled) encoded with c into a malloc'd file of *len bytes; pic freed. */
static uint8_t *encode_picture(const WebPConfig *c, WebPPicture *pic, size_t *len) {
  WebPMemoryWriter w;
  WebPMemoryWriterInit(&w);
  pic->writer = WebPMemoryWrite;
  pic->custom_ptr = &w;
  ASSERT(WebPEncode(c, pic));
  WebPPictureFree(pic);
  uint8_t *out = malloc(w.size);
  ASSERT(out != NULL);
  memcpy(out, w.mem, w.size);
  *len = w.size;
  WebPMemoryWriterClear(&w);
  return out;
}

/* The file libwebp writes by itself for the 8-bit RGB or RGBA img: default preset at quality,
 * method, segments segments. Frees with free(). */
static uint8_t *webp_alone(const struct codec_image *img, float quality, int method, int segments,
                           size_t *len) {
  WebPConfig c;
  WebPPicture pic;
  ASSERT(WebPConfigPreset(&c, WEBP_PRESET_DEFAULT, quality) && WebPPictureInit(&pic));
  c.method = method;
  c.segments = segments;
  pic.width = img->width;
  pic.height = img->height;
  int stride = img->width * img->channels;
  ASSERT(img->channels == 4 ? WebPPictureImportRGBA(&pic, img->pixels, stride)
                            : WebPPictureImportRGB(&pic, img->pixels, stride));
  return encode_picture(&c, &pic, len);
}

/* libwebp's file for the planes codec_webp_yuv makes of the smooth RGB image img, at quality,
 * method 2 and one segment. Frees with free(). */
static uint8_t *webp_of_our_planes(const struct codec_image *img, float quality, size_t *len) {
  WebPConfig c;
  WebPPicture pic;
  ASSERT(WebPConfigPreset(&c, WEBP_PRESET_DEFAULT, quality) && WebPPictureInit(&pic));
  c.method = 2;
  c.segments = 1;
  pic.width = img->width;
  pic.height = img->height;
  ASSERT(WebPPictureAlloc(&pic));
  ASSERT_INT(codec_webp_yuv(img->pixels, (size_t)img->width * 3, img->width, img->height, pic.y,
                            pic.y_stride, pic.u, pic.v, pic.uv_stride),
             ==, 1);
  return encode_picture(&c, &pic, len);
}

static uint8_t *encode(const struct codec_image *img, int quality, int effort, size_t *len) {
  struct codec_encode_opts o = {
      .format = CODEC_WEBP, .quality = quality, .effort = effort, .effort_set = effort >= 0};
  uint8_t *out;
  char msg[256] = "";
  if (codec_encode(img, &o, &out, len, msg, sizeof msg) != CODEC_OK) TEST_FAIL("encode: %s", msg);
  return out;
}

static void expect_same(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
  ASSERT_INT(na, ==, nb);
  ASSERT(memcmp(a, b, na) == 0);
}

/* astronaut.png (512x512) and its blur (radius 8: no luma step over 8 levels). The blur at
 * effort 2, given or by default, is libwebp's one-segment file of codec_webp_yuv's planes at
 * quality 89 for 90; at every other effort, and the photograph at 2, libwebp's own four-segment
 * file of its own import at the method. */
static void test_one_segment_when_smooth(void) {
  struct codec_image photo = fixture_photo("astronaut.png"), blur = fixture_photo("astronaut.png");
  box_blur(&blur, 8);
  size_t n, m;
  uint8_t *f = encode(&blur, 90, -1, &n), *g = webp_of_our_planes(&blur, 89, &m);
  ASSERT_INT(fixture_vp8_segmented(f, n), ==, 0);
  expect_same(f, n, g, m);
  free(f), free(g);
  f = encode(&blur, 90, 2, &n);
  ASSERT_INT(fixture_vp8_segmented(f, n), ==, 0);
  free(f);
  for (int e = 0; e <= 6; e++) {
    if (e == 2) continue;
    f = encode(&blur, 90, e, &n), g = webp_alone(&blur, 90, e, 4, &m);
    ASSERT_INT(fixture_vp8_segmented(f, n), ==, 1);
    expect_same(f, n, g, m);
    free(f), free(g);
  }
  f = encode(&photo, 90, -1, &n), g = webp_alone(&photo, 90, 2, 4, &m);
  ASSERT_INT(fixture_vp8_segmented(f, n), ==, 1);
  expect_same(f, n, g, m);
  free(f), free(g);
  f = encode(&blur, 1, -1, &n), g = webp_of_our_planes(&blur, 0, &m); /* quality 1: 0 */
  expect_same(f, n, g, m);
  free(f), free(g);
  codec_image_free(&photo);
  codec_image_free(&blur);
}

/* A blurred RGBA image is one segment too, and its alpha comes back exactly. */
static void test_one_segment_alpha(void) {
  struct codec_image rgb = fixture_photo("astronaut.png");
  box_blur(&rgb, 8);
  struct codec_image rgba = {
      malloc((size_t)rgb.width * rgb.height * 4), rgb.width, rgb.height, 4, 8, CODEC_PNG, 1};
  ASSERT(rgba.pixels != NULL);
  for (size_t i = 0; i < (size_t)rgb.width * rgb.height; i++) {
    memcpy(rgba.pixels + 4 * i, rgb.pixels + 3 * i, 3);
    rgba.pixels[4 * i + 3] = (uint8_t)(i % (size_t)rgb.width / 2); /* a ramp, 0..255 */
  }
  size_t n;
  uint8_t *f = encode(&rgba, 90, -1, &n);
  ASSERT_INT(fixture_vp8_segmented(f, n), ==, 0);
  struct codec_image back;
  ASSERT_INT(codec_decode(f, n, NULL, &back, NULL, 0), ==, CODEC_OK);
  ASSERT_INT(back.channels, ==, 4);
  for (size_t i = 0; i < (size_t)rgb.width * rgb.height; i++)
    ASSERT_INT(back.pixels[4 * i + 3], ==, rgba.pixels[4 * i + 3]);
  free(f);
  codec_image_free(&back);
  codec_image_free(&rgba);
  codec_image_free(&rgb);
}

static double psnr_of(const struct codec_image *img, const uint8_t *f, size_t n) {
  struct codec_image back;
  ASSERT_INT(codec_decode(f, n, NULL, &back, NULL, 0), ==, CODEC_OK);
  int maxdiff;
  double db = image_psnr8(img, &back, &maxdiff);
  codec_image_free(&back);
  return db;
}

static double cpu_ms(void) {
  return (double)clock() * 1e3 / CLOCKS_PER_SEC;
}

/* The blurred photograph at quality 90 against libwebp's four segments at 90: the file within
 * -10% .. +5% of its size and at most 0.1 dB below its PSNR (measured: +1.4% and +0.13 dB), in
 * at most 85% of its CPU time (best of 5 each, taken in turn; measured 73%). */
static void test_smooth_cost(void) {
  struct codec_image blur = fixture_photo("astronaut.png");
  box_blur(&blur, 8);
  double ours = 1e30, alone = 1e30;
  size_t n = 0, m = 0;
  uint8_t *f = NULL, *g = NULL;
  for (int r = 0; r < 5; r++) {
    free(f), free(g);
    double t0 = cpu_ms();
    f = encode(&blur, 90, -1, &n);
    double t1 = cpu_ms();
    g = webp_alone(&blur, 90, 2, 4, &m);
    double t2 = cpu_ms();
    ours = t1 - t0 < ours ? t1 - t0 : ours;
    alone = t2 - t1 < alone ? t2 - t1 : alone;
  }
  double db = psnr_of(&blur, f, n), db_alone = psnr_of(&blur, g, m);
  fprintf(stderr,
          "    blurred astronaut.png: %zu bytes, %.2f dB, %.2f ms; libwebp's four "
          "segments %zu bytes, %.2f dB, %.2f ms\n",
          n, db, ours, m, db_alone, alone);
  ASSERT_DBL((double)n, <=, 1.05 * (double)m);
  ASSERT_DBL((double)n, >=, 0.90 * (double)m);
  ASSERT_DBL(db, >=, db_alone - 0.1);
  ASSERT_DBL(db, >, 40.0);
  ASSERT_DBL(ours, <=, 0.90 * alone);
  free(f), free(g);
  codec_image_free(&blur);
}

int main(void) {
  RUN(test_smooth_rule);
  RUN(test_yuv_planes);
  RUN(test_one_segment_when_smooth);
  RUN(test_one_segment_alpha);
  RUN(test_smooth_cost);
  fprintf(stderr, "unit_codec_webp: all tests passed\n");
  return 0;
}

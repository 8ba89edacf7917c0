/* unit_codec_out: encode options and outputs beyond PNG's: WebP effort, and the raw and .npy
 * data outputs for variance maps. Fixtures come from $BLURD_DATA, or tests/data when run from
 * the repository root. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../codecs/codecs.h"
#include "test.h"
#include "fixtures.h"

static uint8_t *encode(const struct codec_image *img, const struct codec_encode_opts *o,
                       size_t *len) {
  uint8_t *out;
  char msg[256] = "";
  if (codec_encode(img, o, &out, len, msg, sizeof msg) != CODEC_OK) TEST_FAIL("encode: %s", msg);
  return out;
}

/* Each effort is libwebp's method: the default is CODEC_EFFORT_DEFAULT's file byte for
 * byte, the extremes differ, every file decodes, and 7 is refused. */
static void test_webp_effort(void) {
  struct codec_image img = fixture_photo("chelsea.png");
  size_t n_default, n[7];
  uint8_t *def =
      encode(&img, &(struct codec_encode_opts){.format = CODEC_WEBP, .quality = 80}, &n_default);
  uint8_t *files[7];
  for (int e = 0; e <= 6; e++) {
    struct codec_encode_opts o = {
        .format = CODEC_WEBP, .quality = 80, .effort = e, .effort_set = 1};
    files[e] = encode(&img, &o, &n[e]);
    struct codec_image back;
    ASSERT_INT(codec_decode(files[e], n[e], NULL, &back, NULL, 0), ==, CODEC_OK);
    ASSERT_INT(back.width, ==, img.width);
    codec_image_free(&back);
  }
  ASSERT_INT(n_default, ==, n[CODEC_EFFORT_DEFAULT]);
  ASSERT(memcmp(def, files[CODEC_EFFORT_DEFAULT], n_default) == 0);
  ASSERT(n[0] != n[6] || memcmp(files[0], files[6], n[0]) != 0);
  for (int e = 0; e <= 6; e++) free(files[e]);
  free(def);
  struct codec_encode_opts bad = {
      .format = CODEC_WEBP, .quality = 80, .effort = 7, .effort_set = 1};
  uint8_t *out = NULL;
  size_t len;
  char msg[128];
  ASSERT_INT(codec_encode(&img, &bad, &out, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(msg, "WebP effort 7 is outside 0..6");
  ASSERT(out == NULL);
  codec_image_free(&img);
}

static void write_file(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  ASSERT(f != NULL);
  ASSERT_INT(fwrite(p, 1, n, f), ==, n);
  fclose(f);
}

/* What numpy.load says about the .npy file npy, next to the raw file raw of the same samples:
 * dtype, shape, the samples' sum and whether the two hold the same array. */
static void numpy_says(const uint8_t *npy, size_t npy_len, const uint8_t *raw, size_t raw_len,
                       char *line, size_t cap) {
  char dir[] = "/tmp/unit_codec_out.XXXXXX", cmd[1024], a[64], b[64];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(a, sizeof a, "%s/a.npy", dir);
  snprintf(b, sizeof b, "%s/a.raw", dir);
  write_file(a, npy, npy_len);
  write_file(b, raw, raw_len);
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c \"import numpy as n, sys; a = n.load(sys.argv[1]); "
           "r = n.fromfile(sys.argv[2], dtype=a.dtype).reshape(a.shape); "
           "print(a.dtype.str, a.shape, repr(a.sum(dtype='float64')), n.array_equal(a, r))\" %s %s",
           a, b);
  FILE *p = popen(cmd, "r");
  ASSERT(p != NULL);
  if (fgets(line, (int)cap, p) == NULL) line[0] = '\0';
  ASSERT_INT(pclose(p), ==, 0);
  line[strcspn(line, "\n")] = '\0';
  remove(a), remove(b), rmdir(dir);
}

static double sample_sum(const struct codec_image *img) {
  size_t n = (size_t)img->width * img->height * img->channels;
  double s = 0;
  for (size_t i = 0; i < n; i++) {
    uint16_t v = img->pixels[i];
    if (img->depth == 16) memcpy(&v, img->pixels + 2 * i, 2);
    s += v;
  }
  return s;
}

/* 16-bit gray and RGBA and 8-bit gray, as raw and npy: numpy reads the npy back as the same
 * samples as the raw file, with the dtype and shape the image has. */
static void test_raw_and_npy(void) {
  static const char *files[] = {"gray16.png", "rgba16.png", "camera.png"};
  for (size_t i = 0; i < 3; i++) {
    struct codec_image img = fixture_photo(files[i]);
    size_t nraw, nnpy;
    uint8_t *raw = encode(&img, &(struct codec_encode_opts){.format = CODEC_RAW}, &nraw);
    uint8_t *npy = encode(&img, &(struct codec_encode_opts){.format = CODEC_NPY}, &nnpy);
    size_t bytes = (size_t)img.width * img.height * img.channels * (img.depth / 8);
    ASSERT_INT(nraw, ==, bytes);
    ASSERT_INT((nnpy - bytes) % 64, ==, 0); /* the header pads the data to 64 bytes */
    ASSERT(memcmp(npy + nnpy - bytes, raw, bytes) == 0);
    if (img.depth == 16) ASSERT_INT(raw[0] | raw[1] << 8, ==, *(uint16_t *)img.pixels);
    char line[256], want[256], shape[64];
    if (img.channels == 1)
      snprintf(shape, sizeof shape, "(%d, %d)", img.height, img.width);
    else
      snprintf(shape, sizeof shape, "(%d, %d, %d)", img.height, img.width, img.channels);
    snprintf(want, sizeof want, "%s %s %.1f True", img.depth == 8 ? "|u1" : "<u2", shape,
             sample_sum(&img));
    numpy_says(npy, nnpy, raw, nraw, line, sizeof line);
    ASSERT_STR(line, want);
    free(raw), free(npy);
    codec_image_free(&img);
  }
}

static void test_float_npy(void) {
  const float v[6] = {0.5f, -1.25f, 3.0f, 1e-3f, 65535.0f, 0.0f};
  uint8_t *npy, *raw;
  size_t nnpy, nraw;
  ASSERT_INT(codec_encode_float(v, 3, 2, 1, CODEC_NPY, &npy, &nnpy, NULL, 0), ==, CODEC_OK);
  ASSERT_INT(codec_encode_float(v, 3, 2, 1, CODEC_RAW, &raw, &nraw, NULL, 0), ==, CODEC_OK);
  ASSERT_INT(nraw, ==, sizeof v);
  ASSERT_INT(nnpy, ==, 128 + sizeof v);
  ASSERT(memcmp(npy, "\x93NUMPY\x01\x00", 8) == 0);
  char line[256], got_dtype[16], got_eq[8];
  double sum = 0, got_sum;
  for (int i = 0; i < 6; i++) sum += (double)v[i];
  numpy_says(npy, nnpy, raw, nraw, line, sizeof line);
  ASSERT_INT(sscanf(line, "%15s (2, 3) %lf %7s", got_dtype, &got_sum, got_eq), ==, 3);
  ASSERT_STR(got_dtype, "<f4");
  ASSERT_DBL(got_sum, ==, sum);
  ASSERT_STR(got_eq, "True");
  free(npy), free(raw);
  ASSERT_INT(codec_encode_float(v, 3, 2, 1, CODEC_PNG, &raw, &nraw, NULL, 0), ==,
             CODEC_UNSUPPORTED);
  ASSERT(raw == NULL);
}

int main(void) {
  RUN(test_webp_effort);
  RUN(test_raw_and_npy);
  RUN(test_float_npy);
  fprintf(stderr, "unit_codec_out: all tests passed\n");
  return 0;
}

/* Test images for the unit tests, the GPU test suite and the tools: photographs decoded from
 * tests/data (or $BLURD_DATA), their luma as /variance computes it, and one sample of an 8- or
 * 16-bit image. Include after test.h. */
#ifndef BLURD_FIXTURES_H
#define BLURD_FIXTURES_H

#include "../codecs/codecs.h"
#include "../cpu/cpu.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The bytes of the file at path (malloc'd, the caller frees them) and their count in *len; NULL
 * when it cannot be opened. */
static inline uint8_t *fixture_read(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  ASSERT(buf != NULL);
  ASSERT_INT(fread(buf, 1, (size_t)n, f), ==, n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* The bytes of tests/data/name (or $BLURD_DATA/name); fails the test when it is missing. */
static inline uint8_t *fixture_bytes(const char *name, size_t *len) {
  const char *dir = getenv("BLURD_DATA");
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "tests/data", name);
  uint8_t *buf = fixture_read(path, len);
  if (buf == NULL)
    TEST_FAIL("cannot open %s (run from the repository root or set BLURD_DATA)", path);
  return buf;
}

/* The decoded photograph name; fails the test when it cannot be read. Free with
 * codec_image_free(). */
static inline struct codec_image fixture_photo(const char *name) {
  char path[512];
  struct codec_image img;
  snprintf(path, sizeof(path), "%s/%s", getenv("BLURD_DATA") ? getenv("BLURD_DATA") : "tests/data",
           name);
  if (codec_decode_file(path, &img) != CODEC_OK) TEST_FAIL("cannot decode %s", path);
  return img;
}

/* The luma of photograph name (cpu_luma), a gray plane the caller frees (its data). */
static inline struct cpu_image fixture_luma(const char *name) {
  struct codec_image c = fixture_photo(name);
  struct cpu_image src = {c.pixels, c.width, c.height, c.channels, c.depth};
  struct cpu_image y = {malloc((size_t)c.width * c.height * (c.depth / 8)), c.width, c.height, 1,
                        c.depth};
  ASSERT(y.data);
  cpu_luma(&src, &y);
  codec_image_free(&c);
  return y;
}

/* Sample i (counting every channel) of img. */
static inline unsigned image_sample(const struct cpu_image *img, size_t i) {
  return img->depth == 16 ? ((uint16_t *)img->data)[i] : ((uint8_t *)img->data)[i];
}

/* PSNR of the 8-bit image b against a (same shape, checked), INFINITY when they are equal; the
 * largest difference in levels into *maxdiff. */
static inline double image_psnr8(const struct codec_image *a, const struct codec_image *b,
                                 int *maxdiff) {
  ASSERT_INT(a->width, ==, b->width);
  ASSERT_INT(a->height, ==, b->height);
  ASSERT_INT(a->channels, ==, b->channels);
  ASSERT(a->depth == 8 && b->depth == 8);
  size_t n = (size_t)a->width * a->height * a->channels;
  double se = 0;
  *maxdiff = 0;
  for (size_t i = 0; i < n; i++) {
    int d = abs((int)a->pixels[i] - (int)b->pixels[i]);
    se += (double)d * d;
    if (d > *maxdiff) *maxdiff = d;
  }
  return se == 0 ? INFINITY : 10 * log10(255.0 * 255.0 * (double)n / se);
}

#endif

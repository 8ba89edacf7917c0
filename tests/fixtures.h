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
#include <string.h>

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

/* codec_encode of img with o, its n-th allocation made to fail for n = 0, 1, ... until a run in
 * which none fails: every failing run must say CODEC_NOMEM and hand nothing back (a failure the
 * encoder absorbs, the final shrink of a buffer, may still succeed). Returns the file of the run
 * in which nothing failed (*len bytes; free() it), and the number of runs that failed in
 * *failed. */
static inline uint8_t *fixture_encode_failing(const struct codec_image *img,
                                              const struct codec_encode_opts *o, size_t *len,
                                              int *failed) {
  *failed = 0;
  for (long n = 0;; n++) {
    uint8_t *out = NULL;
    codec_test_fail_alloc(n);
    enum codec_status st = codec_encode(img, o, &out, len, NULL, 0);
    int armed = codec_test_fail_alloc(-1) >= 0; /* still armed: nothing failed */
    if (st == CODEC_OK && armed) return out;
    if (st == CODEC_OK) {
      free(out);
      continue;
    }
    ASSERT_INT(st, ==, CODEC_NOMEM);
    ASSERT(out == NULL);
    (*failed)++;
  }
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
  ASSERT(cpu_luma(&src, &y) == ERR_OK);
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

/* RFC 6386's boolean decoder (section 7.3), for the first bits of a VP8 frame's first partition. */
struct fixture_bool_dec {
  const uint8_t *p, *end;
  unsigned value, range;
  int bits;
};

static inline int fixture_bool_read(struct fixture_bool_dec *d, int prob) {
  unsigned split = 1 + (((d->range - 1) * (unsigned)prob) >> 8), big = split << 8;
  int bit = d->value >= big;
  if (bit) {
    d->range -= split;
    d->value -= big;
  } else {
    d->range = split;
  }
  while (d->range < 128) {
    d->value <<= 1;
    d->range <<= 1;
    if (++d->bits == 8) {
      d->bits = 0;
      if (d->p < d->end) d->value |= *d->p++;
    }
  }
  return bit;
}

/* The segmentation_enabled flag of the key frame in the WebP file f (its "VP8 " chunk, after
 * color_space and clamping_type): 1 when libwebp coded more than one segment. Fails the test
 * when there is no such chunk (a lossless file). */
static inline int fixture_vp8_segmented(const uint8_t *f, size_t len) {
  size_t at = 12;
  while (at + 8 <= len && memcmp(f + at, "VP8 ", 4) != 0)
    at += 8 +
          ((size_t)(f[at + 4] | f[at + 5] << 8 | f[at + 6] << 16 | (unsigned)f[at + 7] << 24) + 1) /
              2 * 2;
  if (at + 8 + 12 > len) TEST_FAIL("no VP8 chunk in the WebP file");
  const uint8_t *frame = f + at + 8;
  ASSERT_INT(frame[0] & 1, ==, 0); /* a key frame */
  ASSERT(frame[3] == 0x9d && frame[4] == 0x01 && frame[5] == 0x2a);
  struct fixture_bool_dec d = {frame + 12, f + len, (unsigned)(frame[10] << 8 | frame[11]), 255, 0};
  fixture_bool_read(&d, 128); /* color_space */
  fixture_bool_read(&d, 128); /* clamping_type */
  return fixture_bool_read(&d, 128);
}

/* ---- cancellation (codec_cancel_set) ---- */

struct stopper { /* a hook that says stop from its call `at` on (0: never); counts its calls */
  long at;
  long calls; /* atomic: a codec's helper threads ask too */
};

static inline int stop_at(void *arg) {
  struct stopper *s = arg;
  long n = __atomic_add_fetch(&s->calls, 1, __ATOMIC_RELAXED);
  return s->at > 0 && n >= s->at;
}

/* codec_encode under the hook s (NULL: none); the thread's hook is cleared after. Fails the test
 * on any status but CODEC_OK and CODEC_CANCELLED. */
static inline enum codec_status encode_with(const struct codec_image *img,
                                            const struct codec_encode_opts *o, struct stopper *s,
                                            uint8_t **out, size_t *len) {
  struct codec_cancel hook = {stop_at, s};
  char msg[256] = "";
  codec_cancel_set(s ? &hook : NULL);
  enum codec_status st = codec_encode(img, o, out, len, msg, sizeof msg);
  codec_cancel_set(NULL);
  if (st != CODEC_OK && st != CODEC_CANCELLED) TEST_FAIL("encode: %d: %s", (int)st, msg);
  return st;
}

/* codec_decode of buf under the hook s (NULL: none), as encode_with. */
static inline enum codec_status decode_with(const uint8_t *buf, size_t len, struct stopper *s,
                                            struct codec_image *img) {
  struct codec_cancel hook = {stop_at, s};
  char msg[256] = "";
  codec_cancel_set(s ? &hook : NULL);
  enum codec_status st = codec_decode(buf, len, NULL, img, msg, sizeof msg);
  codec_cancel_set(NULL);
  if (st != CODEC_OK && st != CODEC_CANCELLED) TEST_FAIL("decode: %d: %s", (int)st, msg);
  return st;
}

/* The call of a hook that asked calls times in a whole run that at names: at itself, or -1 for the
 * last, -2 for the middle one. */
static inline long stop_call(long at, long calls) {
  return at == -1 ? calls : at == -2 ? (calls / 2 > 1 ? calls / 2 : 1) : at;
}

/* img encoded with o: with a hook that never says stop, the bytes of an encode without one and at
 * least min_calls questions; with one that says stop at each call of at[] (stop_call's; 0 ends
 * it), CODEC_CANCELLED and no output. Returns the calls of a whole encode. */
static inline long expect_encode_stops(const struct codec_image *img,
                                       const struct codec_encode_opts *o, long min_calls,
                                       const long *at, const char *what) {
  uint8_t *plain, *hooked;
  size_t plain_len, hooked_len;
  struct stopper never = {0, 0};
  ASSERT_INT(encode_with(img, o, NULL, &plain, &plain_len), ==, CODEC_OK);
  ASSERT_INT(encode_with(img, o, &never, &hooked, &hooked_len), ==, CODEC_OK);
  if (hooked_len != plain_len || memcmp(hooked, plain, plain_len) != 0)
    TEST_FAIL("%s: other bytes with a hook that never stops", what);
  if (never.calls < min_calls) TEST_FAIL("%s: the hook asked %ld times", what, never.calls);
  for (; *at; at++) {
    struct stopper s = {stop_call(*at, never.calls), 0};
    uint8_t *out = (uint8_t *)&s;
    size_t len = 1;
    if (encode_with(img, o, &s, &out, &len) != CODEC_CANCELLED)
      TEST_FAIL("%s: not stopped at call %ld of %ld", what, s.at, never.calls);
    ASSERT(out == NULL && len == 0);
  }
  free(plain), free(hooked);
  return never.calls;
}

/* The same for a decode of buf: the pixels of a decode without a hook. */
static inline long expect_decode_stops(const uint8_t *buf, size_t len, long min_calls,
                                       const long *at, const char *what) {
  struct codec_image plain, hooked;
  struct stopper never = {0, 0};
  ASSERT_INT(decode_with(buf, len, NULL, &plain), ==, CODEC_OK);
  ASSERT_INT(decode_with(buf, len, &never, &hooked), ==, CODEC_OK);
  size_t bytes = (size_t)plain.width * plain.height * plain.channels * (plain.depth / 8);
  if (hooked.width != plain.width || hooked.height != plain.height ||
      hooked.channels != plain.channels || hooked.depth != plain.depth ||
      memcmp(plain.pixels, hooked.pixels, bytes) != 0)
    TEST_FAIL("%s: other pixels with a hook that never stops", what);
  if (never.calls < min_calls) TEST_FAIL("%s: the hook asked %ld times", what, never.calls);
  for (; *at; at++) {
    struct stopper s = {stop_call(*at, never.calls), 0};
    struct codec_image img;
    if (decode_with(buf, len, &s, &img) != CODEC_CANCELLED)
      TEST_FAIL("%s: not stopped at call %ld of %ld", what, s.at, never.calls);
    ASSERT(img.pixels == NULL);
  }
  codec_image_free(&plain), codec_image_free(&hooked);
  return never.calls;
}

#endif

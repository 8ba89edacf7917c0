/* unit_codec_png: the PNG encoder (codecs/png_write.c) at every level and filter strategy.
 *
 * Each output is read back by two decoders that share no code with the encoder nor with each
 * other: libpng (formats/png.c's decoder, reached through codecs_int.h) and libspng, called here
 * directly; both must give back every sample. The filter bytes of the rows are read from the
 * inflated IDAT stream, so a strategy that was asked for and not used fails. Fixtures come from
 * $BLURD_DATA, or tests/data when run from the repository root. */
#include <libdeflate.h>
#include <spng.h>
#include <stdint.h>
#include <stdio.h>
#include <zlib.h>

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"
#include "test.h"
#include "fixtures.h"

static size_t image_bytes(const struct codec_image *img) {
  return (size_t)img->width * img->height * img->channels * (img->depth / 8);
}

/* The top-left w x h pixels of img, as a new image. */
static struct codec_image crop(const struct codec_image *img, int w, int h) {
  size_t bpp = (size_t)img->channels * (img->depth / 8);
  struct codec_image c = *img;
  c.width = w;
  c.height = h;
  c.pixels = malloc((size_t)w * h * bpp);
  ASSERT(c.pixels != NULL);
  for (int y = 0; y < h; y++)
    memcpy(c.pixels + (size_t)y * w * bpp, img->pixels + (size_t)y * img->width * bpp, w * bpp);
  return c;
}

/* Decodes png with libspng in the file's own format (host byte order) and compares with img. */
static void expect_spng(const uint8_t *png, size_t len, const struct codec_image *img) {
  spng_ctx *ctx = spng_ctx_new(0);
  ASSERT(ctx != NULL);
  ASSERT_INT(spng_set_png_buffer(ctx, png, len), ==, 0);
  size_t n;
  ASSERT_INT(spng_decoded_image_size(ctx, SPNG_FMT_PNG, &n), ==, 0);
  ASSERT_INT(n, ==, image_bytes(img));
  uint8_t *px = malloc(n);
  ASSERT_INT(spng_decode_image(ctx, px, n, SPNG_FMT_PNG, 0), ==, 0);
  spng_ctx_free(ctx);
  ASSERT(memcmp(px, img->pixels, n) == 0);
  free(px);
}

/* Decodes png with libpng (png.c) and compares with img. */
static void expect_libpng(const uint8_t *png, size_t len, const struct codec_image *img) {
  struct codec_image back = {0};
  char msg[256] = "";
  enum codec_status st = codec_png_decode(png, len, NULL, &back, msg, sizeof msg);
  if (st != CODEC_OK) TEST_FAIL("libpng: %s", msg);
  ASSERT_INT(back.channels, ==, img->channels);
  ASSERT_INT(back.depth, ==, img->depth);
  ASSERT(memcmp(back.pixels, img->pixels, image_bytes(img)) == 0);
  codec_image_free(&back);
}

/* The IDAT chunks of png, inflated: height rows of a filter byte and the row. Also counts them. */
static uint8_t *inflate_idat(const uint8_t *png, size_t len, size_t raw_len, int *chunks) {
  uint8_t *z = malloc(len), *raw = malloc(raw_len);
  size_t zn = 0;
  *chunks = 0;
  for (size_t p = 8; p + 12 <= len;) {
    size_t n =
        (size_t)png[p] << 24 | (size_t)png[p + 1] << 16 | (size_t)png[p + 2] << 8 | png[p + 3];
    if (memcmp(png + p + 4, "IDAT", 4) == 0) memcpy(z + zn, png + p + 8, n), zn += n, ++*chunks;
    p += n + 12;
  }
  uLongf out = raw_len;
  ASSERT_INT(uncompress(raw, &out, z, zn), ==, Z_OK);
  ASSERT_INT(out, ==, raw_len);
  free(z);
  return raw;
}

/* Every row's filter byte is want (or any of 0..4 when want is -1). */
static void expect_filters(const uint8_t *png, size_t len, const struct codec_image *img,
                           int want) {
  size_t row = (size_t)img->width * img->channels * (img->depth / 8) + 1;
  int chunks;
  uint8_t *raw = inflate_idat(png, len, row * img->height, &chunks);
  int seen[5] = {0};
  for (int y = 0; y < img->height; y++) {
    ASSERT_INT(raw[y * row], <=, 4);
    seen[raw[y * row]]++;
    if (want >= 0 && raw[y * row] != want)
      TEST_FAIL("row %d has filter %d, not %d", y, raw[y * row], want);
  }
  if (want < 0) ASSERT_INT(seen[0] + seen[1] + seen[2] + seen[3] + seen[4], ==, img->height);
  free(raw);
}

/* The filter byte each strategy writes; AUTO: none at level 0, up at 1, paeth at 2, and from 3
 * up for 8 bits and paeth for 16. */
static int filter_byte(enum codec_png_filter f, int level, int depth) {
  switch (f) {
  case CODEC_PNG_FILTER_NONE:
    return 0;
  case CODEC_PNG_FILTER_SUB:
    return 1;
  case CODEC_PNG_FILTER_UP:
    return 2;
  case CODEC_PNG_FILTER_PAETH:
    return 4;
  case CODEC_PNG_FILTER_ADAPTIVE:
    return -1;
  default:
    return level == 0 ? 0 : level == 1 ? 2 : level == 2 || depth == 16 ? 4 : 2;
  }
}

static void check_all_levels(const struct codec_image *img, const char *what) {
  size_t size[10] = {0};
  for (int level = 0; level <= 9; level++)
    for (int f = CODEC_PNG_FILTER_AUTO; f <= CODEC_PNG_FILTER_ADAPTIVE; f++) {
      struct codec_encode_opts o = {.format = CODEC_PNG, .compression = level, .png_filter = f};
      uint8_t *png;
      size_t len;
      char msg[256] = "";
      if (codec_encode(img, &o, &png, &len, msg, sizeof msg) != CODEC_OK)
        TEST_FAIL("%s level %d filter %d: %s", what, level, f, msg);
      expect_libpng(png, len, img);
      expect_spng(png, len, img);
      expect_filters(png, len, img, filter_byte(f, level, img->depth));
      if (f == CODEC_PNG_FILTER_AUTO) size[level] = len;
      free(png);
    }
  ASSERT_INT(size[0], >, image_bytes(img)); /* stored: every byte, plus filter bytes and chunks */
  ASSERT_INT(size[1], <, size[0]);
  ASSERT_INT(size[9], <=, size[1]);
}

static void test_levels_and_filters(void) {
  static const char *fixtures[] = {"gray16.png", "rgba16.png",       "gray_alpha.png",
                                   "rgb16.png",  "palette_trns.png", "gray1.png"};
  for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
    struct codec_image img = fixture_photo(fixtures[i]);
    check_all_levels(&img, fixtures[i]);
    codec_image_free(&img);
  }
  struct codec_image photo = fixture_photo("photo_1080p.jpg"), part = crop(&photo, 203, 97);
  check_all_levels(&part, "photo crop");
  free(part.pixels);
  codec_image_free(&photo);
}

/* A stored stream over 1 MiB goes out in several IDAT chunks, which both decoders join. */
static void test_idat_chunks(void) {
  struct codec_image photo = fixture_photo("photo_1080p.jpg"), part = crop(&photo, 1024, 400);
  struct codec_encode_opts o = {.format = CODEC_PNG, .compression = 0};
  uint8_t *png;
  size_t len;
  ASSERT_INT(codec_encode(&part, &o, &png, &len, NULL, 0), ==, CODEC_OK);
  int chunks;
  free(inflate_idat(png, len, (1024 * 3 + 1) * 400, &chunks));
  ASSERT_INT(chunks, ==, 2); /* 1,228,800 bytes stored: one chunk of 1 MiB and the rest */
  expect_libpng(png, len, &part);
  expect_spng(png, len, &part);
  free(png);
  free(part.pixels);
  codec_image_free(&photo);
}

static void test_bad_filter(void) {
  struct codec_image img = fixture_photo("gray16.png");
  struct codec_encode_opts o = {.format = CODEC_PNG, .compression = 6, .png_filter = 6};
  uint8_t *png = NULL;
  size_t len;
  char msg[128];
  ASSERT_INT(codec_encode(&img, &o, &png, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(msg, "PNG filter 6 is not one of codec_png_filter");
  ASSERT(png == NULL);
  codec_image_free(&img);
}

/* The zlib stream z of zn bytes, inflated by zlib and by libdeflate, is exactly in[0..n). */
static void expect_inflates_to(const uint8_t *z, size_t zn, const uint8_t *in, size_t n) {
  uint8_t *back = malloc(n + 1);
  ASSERT(back != NULL);
  uLongf got = n + 1;
  ASSERT_INT(uncompress(back, &got, z, zn), ==, Z_OK);
  ASSERT_INT(got, ==, n);
  ASSERT(memcmp(back, in, n) == 0);
  struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
  size_t got2 = 0;
  memset(back, 0, n + 1);
  ASSERT_INT(libdeflate_zlib_decompress(d, z, zn, back, n + 1, &got2), ==, LIBDEFLATE_SUCCESS);
  libdeflate_free_decompressor(d);
  ASSERT_INT(got2, ==, n);
  ASSERT(memcmp(back, in, n) == 0);
  free(back);
}

static struct codec_image tiled_photo(int w, int h, int c, int depth);

/* deflate_rle.c's stream of in[0..n), read back by zlib and by libdeflate; returns its length. */
static size_t rle_roundtrip(const uint8_t *in, size_t n) {
  size_t bound = codec_deflate_rle_bound(n);
  uint8_t *z = malloc(bound);
  ASSERT(z != NULL);
  size_t zn = codec_deflate_rle(in, n, z);
  ASSERT_INT(zn, >, 6);
  ASSERT_INT(zn, <=, bound);
  expect_inflates_to(z, zn, in, n);
  free(z);
  return zn;
}

static uint32_t next_random(uint32_t *x) { /* xorshift32: the same bytes on every run */
  *x ^= *x << 13;
  *x ^= *x >> 17;
  *x ^= *x << 5;
  return *x;
}

/* The run-length coder on the inputs that reach its corners: empty and tiny inputs, runs at and
 * past 258 bytes, noise (stored blocks, never larger than the bound), several 256 KiB blocks,
 * and a histogram skewed enough (Fibonacci counts) that the Huffman codes must be shortened to 15
 * bits. Two inflaters that share no code must read each stream back exactly. */
static void test_rle_streams(void) {
  size_t big = 3u << 20;
  uint8_t *b = malloc(big);
  uint32_t x = 2463534242u;
  ASSERT(b != NULL);
  for (size_t n = 0; n < 300; n++) {
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(next_random(&x) % 3);
    rle_roundtrip(b, n);
    memset(b, 7, n);
    rle_roundtrip(b, n);
  }
  memset(b, 0, big);
  ASSERT_INT(rle_roundtrip(b, big), <, big / 200); /* runs of 258 bytes cost a few bits each */
  for (size_t i = 0; i < big; i++) b[i] = (uint8_t)next_random(&x);
  ASSERT_INT(rle_roundtrip(b, big), <=, big + big / 65535 * 5 + 100); /* stored */
  for (size_t i = 0; i < big; i++) /* residual-like: mostly small, with runs of every length */
    b[i] = (uint8_t)(next_random(&x) % 61 == 0 ? next_random(&x) % 300 : 0);
  rle_roundtrip(b, big);
  size_t n = 0;
  for (uint32_t s = 0, f1 = 1, f2 = 1; s < 26; s++, f2 += f1, f1 = f2 - f1)
    for (uint32_t k = 0; k < f1 && n < big; k++) b[n++] = (uint8_t)s;
  for (size_t i = n; i > 1; i--) { /* shuffled, so runs are rare and literals keep their counts */
    size_t j = next_random(&x) % i;
    uint8_t t = b[i - 1];
    b[i - 1] = b[j];
    b[j] = t;
  }
  rle_roundtrip(b, n);
  free(b);
}

/* Fills b[0..n) with runs whose lengths cycle through those around deflate's limits (3, 258) and
 * the coder's 16- and 64-byte steps, each run's byte unlike its neighbours'. */
static void fill_runs(uint8_t *b, size_t n) {
  static const size_t lens[] = {2,  3,  258, 259, 1,   4,   63,  64,  65,  16,  17,
                                15, 62, 255, 256, 257, 260, 516, 517, 129, 130, 5};
  size_t nl = sizeof lens / sizeof *lens;
  for (size_t i = 0, r = 0; i < n; r++)
    for (size_t k = 0; k < lens[r % nl] && i < n; k++) b[i++] = (uint8_t)(r % 3 * 85 + 1);
}

/* in[0..n) compressed in parts cut at cut[0..ncut) (ascending, inside 0..n) with
 * codec_deflate_rle_part and joined as png_write.c joins them; each part within its bound, the
 * stream read back exactly. Returns the stream's length. */
static size_t rle_parts_roundtrip(const uint8_t *in, size_t n, const size_t *cut, int ncut) {
  size_t cap = 2 + 4, s = 0;
  for (int k = 0; k <= ncut; s = k < ncut ? cut[k] : n, k++)
    cap += codec_deflate_rle_part_bound((k < ncut ? cut[k] : n) - s);
  uint8_t *z = malloc(cap), *at = z + 2;
  ASSERT(z != NULL);
  z[0] = 0x78, z[1] = 0x01;
  s = 0;
  for (int k = 0; k <= ncut; k++) {
    size_t e = k < ncut ? cut[k] : n, zn = codec_deflate_rle_part(in, s, e, k == ncut, at);
    ASSERT_INT(zn, >, 0);
    ASSERT_INT(zn, <=, codec_deflate_rle_part_bound(e - s));
    at += zn, s = e;
  }
  codec_put_be32(at, libdeflate_adler32(1, in, n));
  size_t len = (size_t)(at + 4 - z);
  expect_inflates_to(z, len, in, n);
  free(z);
  return len;
}

/* Adversarial inputs for the run-length coder's parse (runs found 64 bytes at a time, the last
 * bytes of a block one by one): one byte value over several blocks; runs of every length near
 * deflate's limits and the parse's steps, at every offset in a window; runs across a block's
 * boundary at every distance from it; one byte; parts cut inside, at and next to runs. Each stream
 * is read back exactly and stays within the bound; the sizes are those of the coder that parsed
 * byte by byte (same stream, same bytes), so a run that the parse misses or cuts short fails. */
static void test_rle_adversarial(void) {
  size_t block = 1u << 18, n = 3 * block + 1000, sizes[8] = {0};
  uint8_t *b = malloc(n);
  uint32_t x = 12345;
  ASSERT(b != NULL);
  memset(b, 0xff, n);
  sizes[0] = rle_roundtrip(b, n);
  fill_runs(b, n);
  sizes[1] = rle_roundtrip(b, n);
  for (size_t off = 0; off < 80; off++) { /* the pattern from every offset in a window */
    for (size_t i = 0; i < off; i++) b[i] = (uint8_t)(next_random(&x) % 4);
    fill_runs(b + off, 3000);
    sizes[2] += rle_roundtrip(b, off + 3000);
  }
  static const size_t dist[] = {0, 1, 2, 3, 4, 15, 16, 17, 63, 64, 65, 79, 80, 81, 257, 258, 300};
  for (size_t d = 0; d < sizeof dist / sizeof *dist; d++) /* a run of zeros across a block's end */
    for (size_t after = 1; after <= 260; after += 37) {
      for (size_t i = 0; i < block + 400; i++) b[i] = (uint8_t)(1 + next_random(&x) % 15);
      memset(b + block - dist[d], 0, dist[d] + after);
      sizes[3] += rle_roundtrip(b, block + 400);
    }
  b[0] = 42;
  sizes[4] = rle_roundtrip(b, 1);
  fill_runs(b, n);
  size_t cuts[] = {1, 2, 3, 259, 260, 262, 517, 4096, 4097, block - 1, block + 1, 2 * block + 63};
  sizes[5] = rle_parts_roundtrip(b, n, cuts, sizeof cuts / sizeof *cuts);
  memset(b, 0, n);
  sizes[6] = rle_parts_roundtrip(b, n, cuts + 2, 3); /* cut inside runs of 258 */
  for (size_t i = 0; i < 5000; i++) b[i] = (uint8_t)next_random(&x);
  sizes[7] = rle_parts_roundtrip(b, 5000, cuts + 6, 3); /* noise: stored parts */
  static const size_t want[8] = {829, 6910, 5610, 17830943, 12, 7086, 870, 5041};
  for (int k = 0; k < 8; k++) {
    if (sizes[k] != want[k]) TEST_FAIL("input %d: %zu bytes, not %zu", k, sizes[k], want[k]);
  }
  free(b);
}

/* The IDAT chunks of png joined: its zlib stream, malloc'd, of *n bytes. */
static uint8_t *idat_stream(const uint8_t *png, size_t len, size_t *n) {
  uint8_t *z = malloc(len);
  ASSERT(z != NULL);
  *n = 0;
  for (size_t p = 8; p + 12 <= len;) {
    size_t c =
        (size_t)png[p] << 24 | (size_t)png[p + 1] << 16 | (size_t)png[p + 2] << 8 | png[p + 3];
    if (memcmp(png + p + 4, "IDAT", 4) == 0) memcpy(z + *n, png + p + 8, c), *n += c;
    p += c + 12;
  }
  return z;
}

/* The run-length levels on one thread filter a block's rows at a time and code each block as it
 * fills (png_write.c's deflate_rle_rows): the zlib stream must be byte for byte codec_deflate_rle
 * of the whole filtered image, with rows across the blocks' ends, a last block of exactly 256 KiB
 * (one and two blocks of 512-byte rows), a last fill that passes a block's end (a block, then one
 * row), rows of 128 KiB, and allocation k failing a clean CODEC_NOMEM for every k until the
 * encode makes no more. */
static void test_rle_rows_stream(void) {
  struct codec_image imgs[] = {tiled_photo(1000, 700, 3, 8), tiled_photo(511, 512, 1, 8),
                               tiled_photo(511, 1024, 1, 8), tiled_photo(511, 513, 1, 8),
                               tiled_photo(16384, 9, 4, 16)};
  for (size_t i = 0; i < sizeof imgs / sizeof *imgs; i++) {
    struct codec_image *img = &imgs[i];
    size_t raw_len = (image_bytes(img) / img->height + 1) * img->height;
    for (int level = 1; level <= 2; level++) {
      struct codec_encode_opts o = {.format = CODEC_PNG, .compression = level};
      uint8_t *png;
      size_t len, zn;
      ASSERT_INT(codec_encode(img, &o, &png, &len, NULL, 0), ==, CODEC_OK);
      int chunks;
      uint8_t *raw = inflate_idat(png, len, raw_len, &chunks), *z = idat_stream(png, len, &zn);
      uint8_t *want = malloc(codec_deflate_rle_bound(raw_len));
      ASSERT(want != NULL);
      ASSERT_INT(codec_deflate_rle(raw, raw_len, want), ==, zn);
      ASSERT(memcmp(want, z, zn) == 0);
      free(want), free(z), free(raw), free(png);
    }
    long k = 0;
    for (;; k++) {
      struct codec_encode_opts o = {.format = CODEC_PNG, .compression = 2};
      uint8_t *png = NULL;
      size_t len = 0;
      codec_test_fail_alloc(k);
      enum codec_status st = codec_encode(img, &o, &png, &len, NULL, 0);
      int failed = codec_test_fail_alloc(-1) == -1;
      if (!failed) {
        ASSERT_INT(st, ==, CODEC_OK);
        free(png);
        break;
      }
      ASSERT_INT(st, ==, CODEC_NOMEM);
      ASSERT(png == NULL);
    }
    ASSERT_INT(k, >=, 4); /* the row buffer, the stream, the coder, the filter's rows, ... */
    codec_image_free(img);
  }
}

/* The decoder skips the pixel data's checksums (IDAT CRCs, zlib's Adler-32), so a file whose only
 * damage is there decodes to its pixels; a damaged IHDR CRC is still refused (unit_codecs). */
static void test_data_checksums_skipped(void) {
  struct codec_image photo = fixture_photo("photo_1080p.jpg"), part = crop(&photo, 64, 48);
  struct codec_encode_opts o = {.format = CODEC_PNG, .compression = CODEC_PNG_COMPRESSION_DEFAULT};
  uint8_t *png;
  size_t len;
  ASSERT_INT(codec_encode(&part, &o, &png, &len, NULL, 0), ==, CODEC_OK);
  size_t idat = 33, n = (size_t)png[idat] << 24 | png[idat + 1] << 16 | png[idat + 2] << 8 |
                        png[idat + 3]; /* the first chunk after IHDR: no profile was given */
  ASSERT(memcmp(png + idat + 4, "IDAT", 4) == 0);
  png[idat + 8 + n - 1] ^= 0x5a; /* the Adler-32's last byte */
  png[idat + 8 + n] ^= 0xa5;     /* the IDAT's CRC */
  expect_libpng(png, len, &part);
  png[idat + 8 + n - 5] ^= 0xff; /* the deflate data itself: inflate or the pixels must notice */
  struct codec_image back = {0};
  enum codec_status st = codec_png_decode(png, len, NULL, &back, NULL, 0);
  ASSERT(st == CODEC_CORRUPT ||
         (st == CODEC_OK && memcmp(back.pixels, part.pixels, image_bytes(&part)) != 0));
  codec_image_free(&back);
  free(png);
  free(part.pixels);
  codec_image_free(&photo);
}

/* The number of IDAT chunks in png. */
static int idat_count(const uint8_t *png, size_t len) {
  int n = 0;
  for (size_t p = 8; p + 12 <= len;) {
    size_t clen =
        (size_t)png[p] << 24 | (size_t)png[p + 1] << 16 | (size_t)png[p + 2] << 8 | png[p + 3];
    n += memcmp(png + p + 4, "IDAT", 4) == 0;
    p += clen + 12;
  }
  return n;
}

/* png rewrapped (png_inflate.c): one IDAT whose stream inflates to the same filtered rows, and
 * libspng (which shares no code with libpng nor libdeflate) reads the same pixels from both. */
static void expect_rewrap(const uint8_t *png, size_t len, const struct codec_image *img,
                          const char *what) {
  uint8_t *copy = NULL;
  size_t copy_len = 0;
  if (codec_png_rewrap(png, len, &copy, &copy_len) != CODEC_OK)
    TEST_FAIL("%s: not rewrapped", what);
  ASSERT_INT(idat_count(copy, copy_len), ==, 1);
  size_t row = ((size_t)img->width * img->channels * img->depth + 7) / 8 + 1;
  int chunks;
  uint8_t *a = inflate_idat(png, len, row * img->height, &chunks),
          *b = inflate_idat(copy, copy_len, row * img->height, &chunks);
  ASSERT(memcmp(a, b, row * img->height) == 0);
  ASSERT_INT(copy_len, >, row * img->height); /* stored: every filtered byte is there */
  expect_spng(copy, copy_len, img);
  expect_libpng(copy, copy_len, img);
  free(a);
  free(b);
  codec_free(copy);
}

/* libspng reads the same RGBA8 pixels from a and b (files of under 8 bits, or a palette). */
static void expect_same_rgba8(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
  uint8_t *px[2];
  size_t n[2];
  for (int k = 0; k < 2; k++) {
    spng_ctx *ctx = spng_ctx_new(0);
    ASSERT(ctx != NULL);
    ASSERT_INT(spng_set_png_buffer(ctx, k ? b : a, k ? blen : alen), ==, 0);
    ASSERT_INT(spng_decoded_image_size(ctx, SPNG_FMT_RGBA8, &n[k]), ==, 0);
    px[k] = malloc(n[k]);
    ASSERT_INT(spng_decode_image(ctx, px[k], n[k], SPNG_FMT_RGBA8, SPNG_DECODE_TRNS), ==, 0);
    spng_ctx_free(ctx);
  }
  ASSERT_INT(n[0], ==, n[1]);
  ASSERT(memcmp(px[0], px[1], n[0]) == 0);
  free(px[0]);
  free(px[1]);
}

/* The libdeflate inflate route: blurd's own files at several levels and IDAT splits, and the
 * fixtures of other encoders, are rewrapped losslessly; an interlaced file, a damaged stream and
 * a chunk between two IDATs are left to libpng, which decodes or refuses them as before. */
static void test_rewrap(void) {
  static const char *fixtures[] = {"gray16.png", "rgba16.png", "gray_alpha.png", "rgb16.png"};
  for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
    size_t len;
    uint8_t *png = fixture_bytes(fixtures[i], &len);
    struct codec_image img = fixture_photo(fixtures[i]);
    expect_rewrap(png, len, &img, fixtures[i]);
    codec_image_free(&img);
    free(png);
  }
  struct codec_image photo = fixture_photo("photo_1080p.jpg"), part = crop(&photo, 1024, 400);
  for (int level = 0; level <= 6; level += 2) {
    struct codec_encode_opts o = {.format = CODEC_PNG, .compression = level};
    uint8_t *png, *copy = NULL;
    size_t len, copy_len;
    ASSERT_INT(codec_encode(&part, &o, &png, &len, NULL, 0), ==, CODEC_OK);
    expect_rewrap(png, len, &part, "photo crop");
    if (level == 0) { /* two IDATs: put a chunk between them */
      ASSERT_INT(idat_count(png, len), ==, 2);
      size_t second = 33 + 12 + (1u << 20);
      uint8_t *odd = malloc(len + 12);
      memcpy(odd, png, second);
      memcpy(odd + second, "\0\0\0\0tEXt\0\0\0\0", 12);
      memcpy(odd + second + 12, png + second, len - second);
      ASSERT_INT(codec_png_rewrap(odd, len + 12, &copy, &copy_len), ==, CODEC_UNSUPPORTED);
      free(odd);
    }
    png[len - 12 - 4 - 400] ^= 0x10; /* inside the stream: libdeflate's Adler-32 check fails */
    ASSERT_INT(codec_png_rewrap(png, len, &copy, &copy_len), ==, CODEC_UNSUPPORTED);
    ASSERT(copy == NULL);
    free(png);
  }
  static const char *small[] = {"gray1.png", "palette.png", "palette_trns.png", "interlaced.png"};
  for (size_t i = 0; i < sizeof small / sizeof *small; i++) {
    size_t len, copy_len;
    uint8_t *copy = NULL, *png = fixture_bytes(small[i], &len);
    enum codec_status st = codec_png_rewrap(png, len, &copy, &copy_len);
    ASSERT_INT(st, ==, i == 3 ? CODEC_UNSUPPORTED : CODEC_OK); /* the last is interlaced */
    if (copy) expect_same_rgba8(png, len, copy, copy_len);
    codec_free(copy);
    free(png);
  }
  free(part.pixels);
  codec_image_free(&photo);
}

/* A PNG header of w x h 8-bit RGB and an empty IDAT: enough for codec_png_rewrap to decide. */
static size_t header_only(uint8_t *png, uint32_t w, uint32_t h) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  uint8_t ihdr[4 + 13] = {'I',     'H',    'D', 'R', w >> 24, w >> 16, w >> 8, w, h >> 24,
                          h >> 16, h >> 8, h,   8,   2,       0,       0,      0};
  memcpy(png, sig, 8);
  memcpy(png + 8, "\0\0\0\x0d", 4);
  memcpy(png + 12, ihdr, 17);
  uint32_t crc = (uint32_t)crc32(0, ihdr, 17);
  uint8_t c[4] = {crc >> 24, crc >> 16, crc >> 8, crc};
  memcpy(png + 29, c, 4);
  memcpy(png + 33, "\0\0\0\0IDAT\x35\xaf\x06\x1e", 12); /* IDAT's CRC over no data */
  memcpy(png + 45, "\0\0\0\0IEND\xae\x42\x60\x82", 12);
  return 57;
}

/* The copy costs memory only up to REWRAP_MAX: a 5000x5000 RGB file (75 MB filtered) is left to
 * libpng before anything is allocated, a 4000x4000 one (48 MB) is tried, so a failed allocation
 * shows. */
static void test_rewrap_cap(void) {
  uint8_t png[64], *copy = NULL;
  size_t copy_len;
  size_t len = header_only(png, 5000, 5000);
  codec_test_fail_alloc(0);
  ASSERT_INT(codec_png_rewrap(png, len, &copy, &copy_len), ==, CODEC_UNSUPPORTED);
  ASSERT_INT(codec_test_fail_alloc(-1), ==, 0); /* still armed: nothing was allocated */
  len = header_only(png, 4000, 4000);
  codec_test_fail_alloc(0);
  ASSERT_INT(codec_png_rewrap(png, len, &copy, &copy_len), ==, CODEC_NOMEM);
  ASSERT_INT(codec_test_fail_alloc(-1), ==, -1);
  ASSERT_INT(codec_png_rewrap(png, len, &copy, &copy_len), ==, CODEC_UNSUPPORTED); /* no data */
  ASSERT(copy == NULL);
}

/* The photograph tiled (mirrored) to w x h of c channels at depth bits (16: each sample times
 * 257 plus a ramp, so both bytes vary). */
static struct codec_image tiled_photo(int w, int h, int c, int depth) {
  struct codec_image ph = fixture_photo("photo_1080p.jpg");
  struct codec_image img = {NULL, w, h, c, depth, CODEC_PNG, 1};
  img.pixels = malloc(image_bytes(&img));
  ASSERT(img.pixels != NULL);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int k = 0; k < c; k++) {
        int px = (x / ph.width) % 2 ? ph.width - 1 - x % ph.width : x % ph.width;
        int py = (y / ph.height) % 2 ? ph.height - 1 - y % ph.height : y % ph.height;
        unsigned v = ph.pixels[((size_t)py * ph.width + px) * ph.channels + k % ph.channels];
        size_t i = ((size_t)y * w + x) * c + k;
        if (depth == 8)
          img.pixels[i] = (uint8_t)v;
        else
          ((uint16_t *)img.pixels)[i] = (uint16_t)(v * 257 - (unsigned)(x % 200));
      }
  codec_image_free(&ph);
  return img;
}

static void pool_for(void *pool, int n, void (*fn)(void *arg, int begin, int end), void *arg) {
  cpu_parallel_for(pool, n, fn, arg);
}

/* A pool that gives up on a batch (as cpu_parallel_for does on a cancelled job's): the call whose
 * number *ctx counts down to 0 runs all but the last index. */
static void giving_up_for(void *ctx, int n, void (*fn)(void *arg, int begin, int end), void *arg) {
  int *left = ctx;
  fn(arg, 0, (*left)-- == 0 ? n - 1 : n);
}

/* A large image at levels 1 and 2 on 4 threads (codec_encode_opts.parallel): the same filtered
 * rows as on one thread (zlib inflates both), decoded exactly by png.c and libspng, a few bytes
 * larger (a sync flush between parts); and out of memory at any of its first allocations, or a
 * band or part the threads never made, a clean CODEC_NOMEM. 8-bit RGB (5 parts of 4 MiB) and 16-bit
 * gray (bands start mid-image). */
static void test_parallel_parts(void) {
  struct cpu_pool *pool = cpu_pool_new(4);
  ASSERT(pool != NULL);
  struct codec_image imgs[2] = {tiled_photo(3000, 2000, 3, 8), tiled_photo(2600, 2000, 1, 16)};
  for (int i = 0; i < 2; i++) {
    struct codec_image *img = &imgs[i];
    size_t raw_len = (image_bytes(img) / img->height + 1) * img->height;
    for (int level = 1; level <= 2; level++) {
      struct codec_encode_opts o = {.format = CODEC_PNG, .compression = level};
      struct codec_encode_opts par = o;
      par.parallel = pool_for, par.parallel_ctx = pool;
      uint8_t *one, *many;
      size_t one_len, many_len;
      char msg[256] = "";
      ASSERT_INT(codec_encode(img, &o, &one, &one_len, msg, sizeof msg), ==, CODEC_OK);
      ASSERT_INT(codec_encode(img, &par, &many, &many_len, msg, sizeof msg), ==, CODEC_OK);
      expect_libpng(many, many_len, img);
      expect_spng(many, many_len, img);
      int c1, c2;
      uint8_t *r1 = inflate_idat(one, one_len, raw_len, &c1),
              *r2 = inflate_idat(many, many_len, raw_len, &c2);
      ASSERT(memcmp(r1, r2, raw_len) == 0);
      size_t parts = (raw_len + (4u << 20) - 1) / (4u << 20);
      fprintf(stderr, "    %dx%dx%d/%d level %d: %zu parts, %zu bytes against %zu on one thread\n",
              img->width, img->height, img->channels, img->depth, level, parts, many_len, one_len);
      ASSERT_INT(parts, >=, 3);
      ASSERT_INT(many_len, >, one_len);
      ASSERT_INT(many_len, <=, one_len + 5 * parts + 12 * 2);
      free(r1), free(r2), free(one), free(many);
    }
    for (long k = 0; k < 12; k++) { /* the k-th allocation fails, on whichever thread makes it */
      struct codec_encode_opts par = {.format = CODEC_PNG, .compression = 2};
      par.parallel = pool_for, par.parallel_ctx = pool;
      uint8_t *out = NULL;
      size_t len = 0;
      char msg[256] = "";
      codec_test_fail_alloc(k);
      enum codec_status st = codec_encode(img, &par, &out, &len, msg, sizeof msg);
      codec_test_fail_alloc(-1);
      if (st == CODEC_OK)
        expect_spng(out, len, img), free(out);
      else
        ASSERT_INT(st, ==, CODEC_NOMEM);
    }
    for (int call = 0; call < 2; call++) { /* the bands' batch, then the parts' */
      int left = call;
      struct codec_encode_opts par = {.format = CODEC_PNG, .compression = 2};
      par.parallel = giving_up_for, par.parallel_ctx = &left;
      uint8_t *out = NULL;
      size_t len = 0;
      char msg[256] = "";
      ASSERT_INT(codec_encode(img, &par, &out, &len, msg, sizeof msg), ==, CODEC_NOMEM);
      ASSERT(out == NULL);
    }
    codec_image_free(img);
  }
  cpu_pool_free(pool);
}

/* ---- cancellation (codec_cancel_set) ---- */

/* Every level, filter strategy and libpng asks every row it filters and before each block of the
 * run-length coder, and stops there; libdeflate's whole-buffer compress of 2 MB or more runs on a
 * thread of its own that the hook stops, and writes the same bytes; the parallel path asks on the
 * pool's threads. */
static void test_cancel_encode(void) {
  struct codec_image small = tiled_photo(300, 200, 3, 8), large = tiled_photo(1100, 700, 3, 8);
  for (int level = 0; level <= 9; level++) {
    struct codec_encode_opts o = {.format = CODEC_PNG, .compression = level};
    const long at[] = {1, 100, -1, 0};
    expect_encode_stops(&small, &o, small.height, at, "PNG encode");
    o.png_filter = CODEC_PNG_FILTER_ADAPTIVE;
    expect_encode_stops(&small, &o, small.height, at, "PNG encode, adaptive filter");
  }
  struct codec_encode_opts libpng = {.format = CODEC_PNG, .compression = 6, .png_libpng = 1};
  const long rows_at[] = {1, 100, -1, 0};
  expect_encode_stops(&small, &libpng, small.height, rows_at, "libpng's encode");
  ASSERT_INT(image_bytes(&large) + large.height, >=, CODEC_STOP_THREAD_BYTES);
  for (int level = 6; level <= 9; level += 3) { /* stopped in the filter, then in libdeflate */
    struct codec_encode_opts o = {.format = CODEC_PNG, .compression = level};
    const long at[] = {1, large.height + 2, 0};
    expect_encode_stops(&large, &o, large.height + 1, at, "libdeflate on its thread");
  }
  struct cpu_pool *pool = cpu_pool_new(3);
  struct codec_image big = tiled_photo(3000, 2000, 3, 8);
  struct codec_encode_opts par = {.format = CODEC_PNG, .compression = 2};
  par.parallel = pool_for, par.parallel_ctx = pool;
  const long par_at[] = {1, 1000, 2002, 0}; /* in the bands, and in the parts */
  expect_encode_stops(&big, &par, big.height + 5, par_at, "the parallel encode");
  cpu_pool_free(pool);
  codec_image_free(&big), codec_image_free(&small), codec_image_free(&large);
}

/* A copy of the PNG file png with a tRNS chunk (an RGB colour key) before its first IDAT: libpng's
 * path, its pixel data inflated by codec_png_rewrap. */
static uint8_t *with_trns(const uint8_t *png, size_t len, size_t *out_len) {
  uint8_t chunk[18] = {0, 0, 0, 6, 't', 'R', 'N', 'S', 0, 1, 0, 2, 0, 3};
  codec_put_be32(chunk + 14, (uint32_t)crc32(0, chunk + 4, 10));
  size_t at = 33; /* after the signature and IHDR */
  uint8_t *p = malloc(len + sizeof chunk);
  memcpy(p, png, at);
  memcpy(p + at, chunk, sizeof chunk);
  memcpy(p + at + sizeof chunk, png + at, len - at);
  *out_len = len + sizeof chunk;
  return p;
}

/* The decoders: png.c's own path asks every megabyte of rows it unfilters and while libdeflate
 * inflates (on a thread of its own from 2 MB); libpng's asks every row it reads (every pass of an
 * interlaced file), after codec_png_rewrap's inflate, which the hook stops too. */
static void test_cancel_decode(void) {
  struct codec_image large = tiled_photo(1100, 700, 3, 8), small = tiled_photo(600, 400, 3, 8);
  for (int i = 0; i < 2; i++) {
    const struct codec_image *img = i ? &small : &large;
    struct codec_encode_opts o = {.format = CODEC_PNG, .compression = 2};
    uint8_t *png, *trns;
    size_t len, trns_len;
    char msg[256] = "";
    ASSERT_INT(codec_encode(img, &o, &png, &len, msg, sizeof msg), ==, CODEC_OK);
    ASSERT(codec_png_direct(png, len));
    trns = with_trns(png, len, &trns_len);
    ASSERT(!codec_png_direct(trns, trns_len));
    if (i ==
        0) { /* inflated on a thread: asked every few milliseconds, as many times as it takes */
      const long at[] = {1, 2, 0};
      expect_decode_stops(png, len, 2, at, "png.c's own path, inflating on a thread");
      expect_decode_stops(trns, trns_len, img->height, at, "libpng after a rewrap on a thread");
    } else {
      const long direct_at[] = {1, -1, 0}, libpng_at[] = {1, 2, 100, -1, 0};
      expect_decode_stops(png, len, 2, direct_at, "png.c's own path");
      expect_decode_stops(trns, trns_len, img->height + 1, libpng_at, "libpng after the rewrap");
    }
    free(png), free(trns);
  }
  static const char *files[] = {"interlaced.png", "palette.png", "gray1.png"};
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    size_t n;
    uint8_t *buf = fixture_bytes(files[f], &n);
    const long at[] = {1, 10, -1, 0};
    expect_decode_stops(buf, n, 16, at, files[f]);
    free(buf);
  }
  codec_image_free(&large), codec_image_free(&small);
}

int main(void) {
  RUN(test_rewrap_cap);
  RUN(test_rewrap);
  RUN(test_data_checksums_skipped);
  RUN(test_rle_streams);
  RUN(test_rle_adversarial);
  RUN(test_rle_rows_stream);
  RUN(test_levels_and_filters);
  RUN(test_idat_chunks);
  RUN(test_bad_filter);
  RUN(test_parallel_parts);
  RUN(test_cancel_encode);
  RUN(test_cancel_decode);
  fprintf(stderr, "unit_codec_png: all tests passed\n");
  return 0;
}

/* unit_codecs: tests of codecs/ against the fixtures in tests/data (see tests/data/README.md).
 *
 * Most PNG fixtures are rebuilt here, sample by sample, from the photographs they were made of
 * (the formulas of tests/data/make-fixtures.py), so decoding is checked exactly and independently
 * of libpng's own idea of the file. JPEG is lossy, so JPEG results are compared with a mean
 * absolute difference, except for flat images, which survive quality 100 exactly. The EXIF parser
 * is fed hand-made and randomly damaged segments, so ASan and valgrind see it read only inside
 * its buffer. The JPEG decoder's own limits (scans, memory, warnings) are checked on files that
 * libjpeg's compressor writes here, in memory, with long scan scripts or a patched frame header.
 * The WebP fixtures (written by PIL's libwebp) are checked against the same photographs: exactly
 * when lossless, by PSNR when lossy; a header that claims 16384x16384 pixels is refused with no
 * allocation made. Allocation failures are injected with codec_test_fail_alloc() at every
 * allocation of a decode or encode in turn; run under ASan or valgrind, that shows every failure
 * path is leak-free. Fixtures come from $BLURD_DATA, or tests/data when run from the repository
 * root. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <jpeglib.h>
#include <png.h>
#include <turbojpeg.h>
#include <webp/encode.h>
#include <zlib.h>

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"
#include "test.h"
#include "fixtures.h"

/* The regions the small PNG fixtures were cut from (make-fixtures.py REGION and REGION_B). */
#define RX  200
#define RY  100
#define RW  97
#define RH  65
#define RBW 101
#define RBH 75

static struct codec_image camera, astronaut, coffee, chelsea; /* decoded once, in main */

/* ---- helpers ---- */

static struct codec_image load(const char *name) {
  size_t len;
  uint8_t *buf = fixture_bytes(name, &len);
  struct codec_image img;
  char msg[256];
  enum codec_status st = codec_decode(buf, len, NULL, &img, msg, sizeof msg);
  if (st != CODEC_OK) TEST_FAIL("decoding %s: status %d: %s", name, (int)st, msg);
  free(buf);
  return img;
}

static enum codec_status decode_file(const char *name, const struct codec_limits *lim,
                                     struct codec_image *img, char *msg, size_t msglen) {
  size_t len;
  uint8_t *buf = fixture_bytes(name, &len);
  enum codec_status st = codec_decode(buf, len, lim, img, msg, msglen);
  free(buf);
  return st;
}

static void expect_shape(const struct codec_image *img, int w, int h, int channels, int depth) {
  ASSERT(img->pixels != NULL);
  ASSERT_INT(img->width, ==, w);
  ASSERT_INT(img->height, ==, h);
  ASSERT_INT(img->channels, ==, channels);
  ASSERT_INT(img->depth, ==, depth);
}

static unsigned sample(const struct codec_image *img, int x, int y, int c) {
  size_t i = ((size_t)y * (size_t)img->width + (size_t)x) * (size_t)img->channels + (size_t)c;
  if (img->depth == 8) return img->pixels[i];
  uint16_t v;
  memcpy(&v, img->pixels + 2 * i, sizeof v);
  return v;
}

static size_t image_bytes(const struct codec_image *img) {
  return (size_t)img->width * (size_t)img->height * (size_t)img->channels *
         (size_t)(img->depth / 8);
}

/* Mean |a - b| over all samples of two 8-bit images of the same shape; b may be offset into a
 * larger image by (bx, by). */
static double mean_diff(const struct codec_image *a, const struct codec_image *b, int bx, int by) {
  ASSERT_INT(a->channels, ==, b->channels);
  double sum = 0;
  for (int y = 0; y < a->height; y++)
    for (int x = 0; x < a->width; x++)
      for (int c = 0; c < a->channels; c++)
        sum += fabs((double)sample(a, x, y, c) - (double)sample(b, x + bx, y + by, c));
  return sum / ((double)a->width * a->height * a->channels);
}

static int max_diff(const struct codec_image *a, const struct codec_image *b) {
  int worst = 0;
  for (int y = 0; y < a->height; y++)
    for (int x = 0; x < a->width; x++)
      for (int c = 0; c < a->channels; c++) {
        int d = abs((int)sample(a, x, y, c) - (int)sample(b, x, y, c));
        if (d > worst) worst = d;
      }
  return worst;
}

static uint32_t rng_state = 12345;
static uint32_t rng(void) { /* a fixed LCG, so every run tests the same inputs */
  rng_state = rng_state * 1664525u + 1013904223u;
  return rng_state >> 8;
}

static struct codec_image encode_decode(const struct codec_image *img,
                                        const struct codec_encode_opts *o, uint8_t **file,
                                        size_t *len) {
  char msg[256];
  enum codec_status st = codec_encode(img, o, file, len, msg, sizeof msg);
  if (st != CODEC_OK) TEST_FAIL("encode: status %d: %s", (int)st, msg);
  struct codec_image back;
  st = codec_decode(*file, *len, NULL, &back, msg, sizeof msg);
  if (st != CODEC_OK) TEST_FAIL("decode of encoded image: status %d: %s", (int)st, msg);
  return back;
}

/* ---- expected pixels of the generated PNG fixtures ---- */

static unsigned ramp(int x, int y, unsigned max, int w, int h) {
  return (unsigned)((x + y) * max / (unsigned)(w + h - 2));
}
static unsigned photo(const struct codec_image *p, int x, int y, int c) {
  return sample(p, x + RX, y + RY, c);
}
static unsigned exp_gray16(int x, int y, int c) {
  (void)c;
  return photo(&camera, x, y, 0) * 256 + photo(&coffee, x, y, 1);
}
static unsigned exp_gray_alpha(int x, int y, int c) {
  return c == 0 ? photo(&camera, x, y, 0) : ramp(x, y, 255, RW, RH);
}
static unsigned exp_gray_alpha16(int x, int y, int c) {
  if (c == 1) return ramp(x, y, 65535, RW, RH);
  return photo(&camera, x, y, 0) * 256 + photo(&coffee, x, y, 0);
}
static unsigned exp_rgb16(int x, int y, int c) {
  if (c == 3) return ramp(x, y, 65535, RW, RH);
  return photo(&astronaut, x, y, c) * 256 + photo(&coffee, x, y, c);
}
static unsigned exp_palette(int x, int y, int c) {
  static const unsigned mask[3] = {0xe0, 0xe0, 0xc0}; /* posterised to 3-3-2 bits */
  if (c == 3) return ((photo(&astronaut, x, y, 2) & 0xc0) >> 6) * 85;
  return photo(&astronaut, x, y, c) & mask[c];
}
static unsigned exp_gray_trns(int x, int y, int c) { /* key 0 (make-fixtures.py GRAY_KEY) */
  unsigned v = photo(&camera, x, y, 0) & 0xc0;
  return c == 0 ? v : v == 0 ? 0 : 255;
}
static unsigned exp_rgb_trns(int x, int y, int c) { /* key (192,128,128): RGB_KEY */
  unsigned r = photo(&astronaut, x, y, 0) & 0xc0, g = photo(&astronaut, x, y, 1) & 0xc0,
           b = photo(&astronaut, x, y, 2) & 0xc0;
  if (c < 3) return photo(&astronaut, x, y, c) & 0xc0;
  return r == 192 && g == 128 && b == 128 ? 0 : 255;
}
static unsigned exp_gray1(int x, int y, int c) {
  (void)c;
  return photo(&camera, x, y, 0) >= 128 ? 255 : 0;
}
static unsigned exp_interlaced(int x, int y, int c) {
  return photo(&astronaut, x, y, c);
}
static unsigned exp_red_square(int x, int y, int c) {
  static const unsigned red[4] = {255, 0, 0, 255};
  return x >= 20 && x < 44 && y >= 20 && y < 44 ? red[c] : 0;
}
static unsigned exp_opaque(int x, int y, int c) { /* logo.png: only its alpha is known */
  (void)x, (void)y, (void)c;
  return 255;
}

struct png_case {
  const char *file;
  int w, h, channels, depth;
  unsigned (*expect)(int x, int y, int c); /* NULL: the shape is all we know */
  int png_depth, png_colour;               /* IHDR of our re-encoded file */
};

static const struct png_case png_cases[] = {
    {"camera.png", 512, 512, 1, 8, NULL, 8, 0},
    {"astronaut.png", 512, 512, 3, 8, NULL, 8, 2},
    {"chelsea.png", 451, 300, 3, 8, NULL, 8, 2},
    {"coffee.png", 600, 400, 3, 8, NULL, 8, 2},
    {"logo.png", 500, 500, 4, 8, NULL, 8, 6},
    {"gray16.png", RW, RH, 1, 16, exp_gray16, 16, 0},
    {"gray_alpha.png", RW, RH, 2, 8, exp_gray_alpha, 8, 4},
    {"gray_alpha16.png", RW, RH, 2, 16, exp_gray_alpha16, 16, 4},
    {"rgb16.png", RW, RH, 3, 16, exp_rgb16, 16, 2},
    {"rgba16.png", RW, RH, 4, 16, exp_rgb16, 16, 6},
    {"palette.png", RW, RH, 3, 8, exp_palette, 8, 2},
    {"palette_trns.png", RW, RH, 4, 8, exp_palette, 8, 6},
    {"gray_trns.png", RW, RH, 2, 8, exp_gray_trns, 8, 4},
    {"rgb_trns.png", RW, RH, 4, 8, exp_rgb_trns, 8, 6},
    {"gray1.png", RBW, RBH, 1, 8, exp_gray1, 8, 0},
    {"interlaced.png", RBW, RBH, 3, 8, exp_interlaced, 8, 2},
    {"red_square.png", 64, 64, 4, 8, exp_red_square, 8, 6},
};
#define NCASES (sizeof png_cases / sizeof png_cases[0])

/* ---- tests ---- */

static void test_sniff_and_names(void) {
  static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  static const uint8_t jpeg[3] = {0xff, 0xd8, 0xff};
  ASSERT_INT(codec_sniff(png, 8), ==, CODEC_PNG);
  ASSERT_INT(codec_sniff(png, 7), ==, CODEC_NONE);
  ASSERT_INT(codec_sniff(jpeg, 3), ==, CODEC_JPEG);
  ASSERT_INT(codec_sniff(jpeg, 2), ==, CODEC_NONE);
  ASSERT_INT(codec_sniff((const uint8_t *)"RIFF\x10\0\0\0WEBPVP8L", 16), ==, CODEC_WEBP);
  ASSERT_INT(codec_sniff((const uint8_t *)"RIFF\x10\0\0\0WEBP", 11), ==, CODEC_NONE);
  ASSERT_INT(codec_sniff((const uint8_t *)"RIFF\x10\0\0\0WAVE", 12), ==, CODEC_NONE);
  ASSERT_INT(codec_sniff((const uint8_t *)"GIF89a", 6), ==, CODEC_GIF);
  ASSERT_INT(codec_sniff((const uint8_t *)"BM\0\0\0\0", 6), ==, CODEC_NONE);
  ASSERT_INT(codec_sniff(NULL, 0), ==, CODEC_NONE);
  ASSERT_STR(codec_format_name(CODEC_PNG), "png");
  ASSERT_STR(codec_format_name(CODEC_JPEG), "jpeg");
  ASSERT_STR(codec_format_name(CODEC_WEBP), "webp");
  ASSERT(codec_format_name(CODEC_NONE) == NULL);
  ASSERT_INT(codec_format_from_name("jpg"), ==, CODEC_JPEG);
  ASSERT_INT(codec_format_from_name("jpeg"), ==, CODEC_JPEG);
  ASSERT_INT(codec_format_from_name("png"), ==, CODEC_PNG);
  ASSERT_INT(codec_format_from_name("webp"), ==, CODEC_WEBP);
  ASSERT_INT(codec_format_from_name("gif"), ==, CODEC_GIF);
  ASSERT_INT(codec_format_from_name("jpg"), ==, CODEC_JPEG);
  ASSERT_INT(codec_format_from_name("bmp"), ==, CODEC_NONE);
  ASSERT_INT(codec_format_from_name("PNG"), ==, CODEC_NONE);
  ASSERT_INT(codec_format_from_name(NULL), ==, CODEC_NONE);
  ASSERT_STR(codec_mime(CODEC_PNG), "image/png");
  ASSERT_STR(codec_mime(CODEC_JPEG), "image/jpeg");
  ASSERT_STR(codec_mime(CODEC_WEBP), "image/webp");
  ASSERT(codec_mime(CODEC_NONE) == NULL);
  ASSERT_STR(codec_status_msg(CODEC_OK), "ok");
  ASSERT_STR(codec_status_msg(CODEC_UNKNOWN), "the data is in no format this service reads");
  ASSERT_STR(codec_status_msg(CODEC_NOMEM), "out of memory");
  ASSERT_STR(codec_status_msg((enum codec_status)99), "unknown codec status");
}

static void test_decode_png_fixtures(void) {
  for (size_t i = 0; i < NCASES; i++) {
    const struct png_case *t = &png_cases[i];
    struct codec_image img = load(t->file);
    expect_shape(&img, t->w, t->h, t->channels, t->depth);
    ASSERT_INT(img.format, ==, CODEC_PNG);
    ASSERT_INT(img.orientation, ==, 1);
    unsigned (*expect)(int, int, int) = t->expect;
    if (expect == NULL && t->channels == 4) expect = exp_opaque;
    for (int y = 0; y < img.height && expect; y++)
      for (int x = 0; x < img.width; x++)
        for (int c = t->expect ? 0 : t->channels - 1; c < t->channels; c++)
          if (sample(&img, x, y, c) != expect(x, y, c))
            TEST_FAIL("%s (%d,%d) channel %d: got %u, expected %u", t->file, x, y, c,
                      sample(&img, x, y, c), expect(x, y, c));
    codec_image_free(&img);
    codec_image_free(&img); /* safe twice */
    ASSERT(img.pixels == NULL);
  }
}

/* decode -> encode PNG -> decode gives the same samples, for every PNG type. */
static void test_png_round_trip(void) {
  for (size_t i = 0; i < NCASES; i++) {
    const struct png_case *t = &png_cases[i];
    struct codec_image img = load(t->file);
    uint8_t *file;
    size_t len;
    struct codec_encode_opts o = {.format = CODEC_PNG, .compression = 6};
    struct codec_image back = encode_decode(&img, &o, &file, &len);
    ASSERT_INT(codec_sniff(file, len), ==, CODEC_PNG);
    ASSERT_INT(file[24], ==, t->png_depth);
    ASSERT_INT(file[25], ==, t->png_colour);
    expect_shape(&back, img.width, img.height, img.channels, img.depth);
    if (memcmp(back.pixels, img.pixels, image_bytes(&img)) != 0)
      TEST_FAIL("%s: pixels differ after a PNG round trip", t->file);
    free(file);
    codec_image_free(&back);
    codec_image_free(&img);
  }
}

/* Compression 0 stores, 9 deflates hard; both decode to the same pixels. */
static void test_png_compression_levels(void) {
  struct codec_image img = load("rgb16.png");
  uint8_t *f0, *f9;
  size_t n0, n9;
  struct codec_encode_opts o0 = {.format = CODEC_PNG, .compression = 0};
  struct codec_encode_opts o9 = {.format = CODEC_PNG, .compression = 9};
  struct codec_image b0 = encode_decode(&img, &o0, &f0, &n0);
  struct codec_image b9 = encode_decode(&img, &o9, &f9, &n9);
  ASSERT_INT(n0, >, image_bytes(&img)); /* stored: every sample plus overhead */
  ASSERT_INT(n9, <, n0);
  ASSERT(memcmp(b0.pixels, img.pixels, image_bytes(&img)) == 0);
  ASSERT(memcmp(b9.pixels, img.pixels, image_bytes(&img)) == 0);
  free(f0), free(f9);
  codec_image_free(&b0), codec_image_free(&b9), codec_image_free(&img);
}

/* 16-bit PNG samples are big-endian in the file whatever the host order. In the first row every
 * PNG filter leaves the first pixel's bytes as they are, so they can be read from the inflated
 * IDAT without unfiltering. */
static void test_png_16bit_byte_order(void) {
  uint16_t px[2] = {0x1234, 0xabcd};
  struct codec_image img = {
      .pixels = (uint8_t *)px, .width = 1, .height = 1, .channels = 2, .depth = 16};
  uint8_t *file;
  size_t len;
  struct codec_encode_opts o = {.format = CODEC_PNG, .compression = 9};
  ASSERT_INT(codec_encode(&img, &o, &file, &len, NULL, 0), ==, CODEC_OK);
  size_t pos = 8;
  while (pos + 8 <= len && memcmp(file + pos + 4, "IDAT", 4) != 0)
    pos += 12 + ((size_t)file[pos] << 24 | (size_t)file[pos + 1] << 16 |
                 (size_t)file[pos + 2] << 8 | file[pos + 3]);
  ASSERT(pos + 8 <= len);
  uLong idat = (uLong)file[pos] << 24 | (uLong)file[pos + 1] << 16 | (uLong)file[pos + 2] << 8 |
               file[pos + 3];
  uint8_t raw[16];
  uLongf rawlen = sizeof raw;
  ASSERT_INT(uncompress(raw, &rawlen, file + pos + 8, idat), ==, Z_OK);
  ASSERT_INT(rawlen, ==, 5); /* filter byte + 2 samples of 2 bytes */
  ASSERT_INT(raw[0], <=, 4);
  ASSERT_INT(raw[1], ==, 0x12);
  ASSERT_INT(raw[2], ==, 0x34);
  ASSERT_INT(raw[3], ==, 0xab);
  ASSERT_INT(raw[4], ==, 0xcd);
  struct codec_image back;
  ASSERT_INT(codec_decode(file, len, NULL, &back, NULL, 0), ==, CODEC_OK);
  ASSERT_INT(sample(&back, 0, 0, 0), ==, 0x1234);
  ASSERT_INT(sample(&back, 0, 0, 1), ==, 0xabcd);
  codec_image_free(&back);
  free(file);
}

static int has_marker(const char *name, int marker) {
  size_t len;
  uint8_t *buf = fixture_bytes(name, &len);
  int found = 0;
  for (size_t i = 2; i + 1 < len && !found; i++) found = buf[i] == 0xff && buf[i + 1] == marker;
  free(buf);
  return found;
}

static void test_decode_jpeg(void) {
  struct codec_image img = load("rocket.jpg");
  expect_shape(&img, 640, 427, 3, 8);
  ASSERT_INT(img.format, ==, CODEC_JPEG);
  ASSERT_INT(img.orientation, ==, 1);
  ASSERT(has_marker("rocket.jpg", 0xc0)); /* baseline */
  codec_image_free(&img);

  img = load("hubble_deep_field.jpg"); /* baseline with EXIF (orientation 1), XMP and Adobe */
  expect_shape(&img, 1000, 872, 3, 8);
  ASSERT_INT(img.orientation, ==, 1);
  codec_image_free(&img);

  img = load("photo_1080p.jpg");
  expect_shape(&img, 1920, 1080, 3, 8);
  codec_image_free(&img);

  img = load("progressive.jpg"); /* chelsea.png at quality 90, progressive */
  ASSERT(has_marker("progressive.jpg", 0xc2));
  expect_shape(&img, 451, 300, 3, 8);
  ASSERT_DBL(mean_diff(&img, &chelsea, 0, 0), <, 2.5);
  codec_image_free(&img);

  img = load("gray.jpg"); /* camera.png's top-left 480x360 at quality 90 */
  expect_shape(&img, 480, 360, 1, 8);
  ASSERT_DBL(mean_diff(&img, &camera, 0, 0), <, 1.6);
  ASSERT_DBL(mean_diff(&img, &camera, 1, 0), >, 3.0); /* the comparison can tell a shift */
  codec_image_free(&img);
}

/* Every orientN.jpg is stored so that applying its orientation gives the same upright 64x48
 * image; 5..8 are stored 48x64. */
static void test_exif_orientations(void) {
  struct codec_image up = load("orient1.jpg");
  expect_shape(&up, 64, 48, 3, 8);
  tjhandle tj = tjInitDecompress();
  for (int o = 1; o <= 8; o++) {
    char name[32];
    snprintf(name, sizeof name, "orient%d.jpg", o);
    size_t len;
    uint8_t *buf = fixture_bytes(name, &len);
    ASSERT_INT(codec_exif_orientation(buf, len), ==, o);
    int w, h, ss, cs;
    ASSERT_INT(tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h, &ss, &cs), ==, 0);
    ASSERT_INT(w, ==, o >= 5 ? 48 : 64);
    ASSERT_INT(h, ==, o >= 5 ? 64 : 48);
    free(buf);
    struct codec_image img = load(name);
    expect_shape(&img, 64, 48, 3, 8);
    ASSERT_INT(img.orientation, ==, o);
    double mean = mean_diff(&img, &up, 0, 0);
    int worst = max_diff(&img, &up);
    if (mean > 1.5 || worst > 12)
      TEST_FAIL("%s differs from orient1.jpg: mean %.3f, max %d", name, mean, worst);
    codec_image_free(&img);
  }
  tjDestroy(tj);
  /* A mirrored image must fail that comparison, or the test proves nothing. */
  uint8_t *copy = malloc(image_bytes(&up));
  memcpy(copy, up.pixels, image_bytes(&up));
  struct codec_image mirrored = up;
  mirrored.pixels = copy;
  ASSERT_INT(codec_orient(&mirrored, 2), ==, CODEC_OK);
  ASSERT_DBL(mean_diff(&mirrored, &up, 0, 0), >, 20.0);
  codec_image_free(&mirrored);
  codec_image_free(&up);
}

/* codec_orient on a 3x2 image, against the transforms worked out by hand. */
static void test_orient_mapping(void) {
  static const uint8_t want[9][6] = {
      {0},
      {1, 2, 3, 4, 5, 6}, /* 1: as stored */
      {3, 2, 1, 6, 5, 4}, /* 2: mirror left-right */
      {6, 5, 4, 3, 2, 1}, /* 3: rotate 180 */
      {4, 5, 6, 1, 2, 3}, /* 4: mirror top-bottom */
      {1, 4, 2, 5, 3, 6}, /* 5: transpose, 2x3 */
      {4, 1, 5, 2, 6, 3}, /* 6: rotate 90 clockwise */
      {6, 3, 5, 2, 4, 1}, /* 7: transverse */
      {3, 6, 2, 5, 1, 4}, /* 8: rotate 90 anticlockwise */
  };
  for (int o = 1; o <= 8; o++) {
    for (int depth = 8; depth <= 16; depth += 8) {
      struct codec_image img = {.pixels = malloc(6 * 2 * (depth / 8)),
                                .width = 3,
                                .height = 2,
                                .channels = 2,
                                .depth = depth};
      for (int i = 0; i < 6; i++) /* channel 0 = the label, channel 1 = 10 * label */
        for (int c = 0; c < 2; c++) {
          unsigned v = (unsigned)(i + 1) * (c ? 10u : 1u) * (depth == 16 ? 257u : 1u);
          if (depth == 8)
            img.pixels[i * 2 + c] = (uint8_t)v;
          else
            memcpy(img.pixels + (i * 2 + c) * 2, &(uint16_t){(uint16_t)v}, 2);
        }
      ASSERT_INT(codec_orient(&img, o), ==, CODEC_OK);
      ASSERT_INT(img.width, ==, o >= 5 ? 2 : 3);
      ASSERT_INT(img.height, ==, o >= 5 ? 3 : 2);
      for (int i = 0; i < 6; i++) {
        unsigned scale = depth == 16 ? 257u : 1u;
        ASSERT_INT(sample(&img, i % img.width, i / img.width, 0), ==, want[o][i] * scale);
        ASSERT_INT(sample(&img, i % img.width, i / img.width, 1), ==, want[o][i] * 10 * scale);
      }
      codec_image_free(&img);
    }
  }
}

static void expect_limit(const char *file, struct codec_limits lim, enum codec_status want,
                         const char *want_msg) {
  struct codec_image img;
  char msg[256] = "unchanged";
  enum codec_status st = decode_file(file, &lim, &img, msg, sizeof msg);
  if (st != want) TEST_FAIL("%s: status %d, expected %d (%s)", file, (int)st, (int)want, msg);
  if (want_msg) ASSERT_STR(msg, want_msg);
  if (st != CODEC_OK) ASSERT(img.pixels == NULL);
  codec_image_free(&img);
}

/* Each limit one above the image's size, at it and one below it, alone and all three together,
 * for PNG, JPEG and WebP: only below fails, with a sentence naming the value and the limit.
 * orient6.jpg is stored 48x64 but upright 64x48: limits apply to the upright size. */
static void test_limits(void) {
  static const struct {
    const char *file;
    uint32_t w, h;
  } cases[] = {{"chelsea.png", 451, 300},     {"interlaced.png", RBW, RBH},
               {"gray16.png", RW, RH},        {"rocket.jpg", 640, 427},
               {"progressive.jpg", 451, 300}, {"gray.jpg", 480, 360},
               {"orient6.jpg", 64, 48},       {"lossy.webp", 451, 300},
               {"lossless.webp", RW, RH},     {"alpha_lossy.webp", RW, RH}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *f = cases[i].file;
    uint32_t w = cases[i].w, h = cases[i].h;
    uint64_t px = (uint64_t)w * h;
    char over_w[128], over_h[128], over_px[128];
    snprintf(over_w, sizeof over_w, "width %u exceeds the limit of %u", w, w - 1);
    snprintf(over_h, sizeof over_h, "height %u exceeds the limit of %u", h, h - 1);
    snprintf(over_px, sizeof over_px, "pixel count %llu (%ux%u) exceeds the limit of %llu",
             (unsigned long long)px, w, h, (unsigned long long)px - 1);
    expect_limit(f, (struct codec_limits){0, 0, 0}, CODEC_OK, NULL);
    for (int d = 1; d >= -1; d--) { /* each limit is the image's size + d */
      enum codec_status want = d >= 0 ? CODEC_OK : CODEC_TOO_LARGE;
      expect_limit(f, (struct codec_limits){w + d, 0, 0}, want, d >= 0 ? "" : over_w);
      expect_limit(f, (struct codec_limits){0, h + d, 0}, want, d >= 0 ? "" : over_h);
      expect_limit(f, (struct codec_limits){0, 0, px + d}, want, d >= 0 ? "" : over_px);
      expect_limit(f, (struct codec_limits){w + d, h + d, px + d}, want, d >= 0 ? "" : over_w);
    }
  }
}

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A PNG whose IHDR claims a huge size is refused from the header, before any allocation. */
static void test_limits_huge_png_header(void) {
  uint8_t png[8 + 25 + 12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_be32(png + 8, 13);
  memcpy(png + 12, "IHDR", 4);
  put_be32(png + 16, 100000);
  put_be32(png + 20, 70000);
  png[24] = 16, png[25] = 6; /* RGBA 16: 56 GB of pixels */
  put_be32(png + 29, (uint32_t)crc32(0, png + 12, 17));
  put_be32(png + 33, 0);
  memcpy(png + 37, "IEND", 4);
  put_be32(png + 41, (uint32_t)crc32(0, png + 37, 4));
  struct codec_image img;
  char msg[256];
  struct codec_limits lim = {16384, 16384, 0};
  ASSERT_INT(codec_decode(png, sizeof png, &lim, &img, msg, sizeof msg), ==, CODEC_TOO_LARGE);
  ASSERT_STR(msg, "width 100000 exceeds the limit of 16384");
  lim = (struct codec_limits){0, 0, 50000000};
  ASSERT_INT(codec_decode(png, sizeof png, &lim, &img, msg, sizeof msg), ==, CODEC_TOO_LARGE);
  ASSERT_STR(msg, "pixel count 7000000000 (100000x70000) exceeds the limit of 50000000");
  /* Without limits the header passes, and the missing IDAT makes it corrupt, still unallocated. */
  ASSERT_INT(codec_decode(png, sizeof png, NULL, &img, msg, sizeof msg), ==, CODEC_CORRUPT);
  ASSERT(img.pixels == NULL);
  /* The largest size PNG allows is more than any buffer can hold, limits or not. */
  put_be32(png + 16, 0x7fffffff);
  put_be32(png + 20, 0x7fffffff);
  put_be32(png + 29, (uint32_t)crc32(0, png + 12, 17));
  ASSERT_INT(codec_decode(png, sizeof png, NULL, &img, msg, sizeof msg), ==, CODEC_TOO_LARGE);
  ASSERT_STR(msg, "the image size 2147483647x2147483647 is beyond what this service can hold");
  /* A bad IHDR CRC skips the early check; libpng then refuses the file as corrupt. */
  png[29] ^= 1;
  ASSERT_INT(codec_decode(png, sizeof png, NULL, &img, msg, sizeof msg), ==, CODEC_CORRUPT);
  ASSERT(img.pixels == NULL);
}

static void test_check_size(void) {
  size_t n;
  char msg[256];
  struct codec_limits lim = {100, 50, 4000};
  ASSERT_INT(codec_check_size(100, 40, 3, &lim, &n, msg, sizeof msg), ==, CODEC_OK);
  ASSERT_INT(n, ==, 12000);
  ASSERT_INT(codec_check_size(80, 51, 3, &lim, &n, msg, sizeof msg), ==, CODEC_TOO_LARGE);
  ASSERT_STR(msg, "height 51 exceeds the limit of 50");
  ASSERT_INT(n, ==, 0);
  ASSERT_INT(codec_check_size(0, 5, 3, &lim, &n, msg, sizeof msg), ==, CODEC_CORRUPT);
  ASSERT_INT(codec_check_size(1ull << 40, 1ull << 40, 8, NULL, &n, msg, sizeof msg), ==,
             CODEC_TOO_LARGE);
  ASSERT_STR(msg,
             "the image size 1099511627776x1099511627776 is beyond what this service can hold");
  ASSERT_INT(codec_check_size(0xffffffffu, 0xffffffffu, 1, &lim, &n, NULL, 0), ==, CODEC_TOO_LARGE);
  ASSERT_INT(codec_check_size(1u << 31, 1, 1, NULL, &n, msg, sizeof msg), ==, CODEC_TOO_LARGE);
  lim = (struct codec_limits){0, 0, 0xffffffffffffffffull};
  ASSERT_INT(codec_check_size(0xffffffffu, 0xffffffffu, 1, &lim, &n, NULL, 0), ==, CODEC_TOO_LARGE);
}

static void expect_status(const uint8_t *buf, size_t len, enum codec_status want,
                          const char *what) {
  struct codec_image img;
  char msg[256] = "";
  enum codec_status st = codec_decode(buf, len, NULL, &img, msg, sizeof msg);
  if (st != want)
    TEST_FAIL("%s (%zu bytes): status %d, expected %d (%s)", what, len, (int)st, (int)want, msg);
  if (st != CODEC_OK) {
    ASSERT(img.pixels == NULL);
    ASSERT(msg[0] != '\0');
  }
  codec_image_free(&img);
}

static void test_truncated(void) {
  struct codec_image img;
  char msg[256];
  ASSERT_INT(decode_file("truncated.png", NULL, &img, msg, sizeof msg), ==, CODEC_CORRUPT);
  ASSERT(strstr(msg, "truncated") != NULL);
  ASSERT(img.pixels == NULL);
  ASSERT_INT(decode_file("truncated.jpg", NULL, &img, msg, sizeof msg), ==, CODEC_CORRUPT);
  ASSERT(img.pixels == NULL);
  /* Every cut of a whole file: too short to sniff is unknown, anything else is corrupt, even
   * one byte short of the end (PNG: no IEND; JPEG: no EOI, a libjpeg warning; WebP: shorter than
   * its RIFF header says). */
  static const char *files[] = {"gray1.png",        "palette_trns.png",   "orient1.jpg",
                                "gray.jpg",         "lossy.webp",         "lossless.webp",
                                "alpha_lossy.webp", "alpha_lossless.webp"};
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    size_t len;
    uint8_t *buf = fixture_bytes(files[f], &len);
    static const size_t sigs[] = {[CODEC_PNG] = 8, [CODEC_JPEG] = 3, [CODEC_WEBP] = 12};
    size_t sig = sigs[codec_sniff(buf, len)], step = len / 300 + 1;
    for (size_t cut = 0; cut < len; cut += cut + 2 >= len ? 1 : step) {
      uint8_t *part = malloc(cut ? cut : 1); /* exact size, so ASan sees any over-read */
      memcpy(part, buf, cut);
      expect_status(part, cut, cut < sig ? CODEC_UNKNOWN : CODEC_CORRUPT, files[f]);
      free(part);
    }
    expect_status(buf, len, CODEC_OK, files[f]);
    free(buf);
  }
}

static void test_garbage_and_unknown(void) {
  uint8_t buf[4096];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)rng();
  static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  memcpy(buf, png, 8);
  expect_status(buf, sizeof buf, CODEC_CORRUPT, "PNG signature + garbage");
  memcpy(buf, "\xff\xd8\xff", 3);
  expect_status(buf, sizeof buf, CODEC_CORRUPT, "JPEG signature + garbage");
  buf[0] = 'G';
  expect_status(buf, sizeof buf, CODEC_UNKNOWN, "garbage");
  expect_status((const uint8_t *)"BM\0\0\0\0", 6, CODEC_UNKNOWN, "BMP");
  expect_status(buf, 0, CODEC_UNKNOWN, "empty buffer");
  expect_status(NULL, 0, CODEC_UNKNOWN, "NULL buffer");
  struct codec_image img;
  char msg[256];
  ASSERT_INT(codec_decode(buf, sizeof buf, NULL, &img, msg, sizeof msg), ==, CODEC_UNKNOWN);
  ASSERT_STR(msg, "the data is in no format this service reads");
  ASSERT_INT(codec_decode(buf, 0, NULL, &img, msg, sizeof msg), ==, CODEC_UNKNOWN);
  ASSERT_STR(msg, "the image data is empty");
  ASSERT_INT(codec_decode(buf, sizeof buf, NULL, &img, NULL, 0), ==, CODEC_UNKNOWN);
  ASSERT_INT(codec_decode(buf, sizeof buf, NULL, &img, msg, 1), ==, CODEC_UNKNOWN);
  ASSERT_STR(msg, "");
}

/* Random damage to small valid files never crashes, leaks or returns a half-made image. */
static void test_damaged_files(void) {
  static const char *files[] = {"gray1.png",       "interlaced.png", "orient6.jpg",
                                "progressive.jpg", "lossless.webp",  "alpha_lossy.webp"};
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    size_t len;
    uint8_t *orig = fixture_bytes(files[f], &len);
    uint8_t *buf = malloc(len);
    size_t keep = codec_sniff(orig, len) == CODEC_WEBP ? 12 : 8; /* the magic bytes */
    for (int iter = 0; iter < 150; iter++) {
      memcpy(buf, orig, len);
      for (int k = 1 + (int)(rng() % 4); k > 0; k--)
        buf[keep + rng() % (len - keep)] = (uint8_t)rng(); /* exercise the decoders */
      struct codec_image img;
      struct codec_limits lim = {4096, 4096, 1 << 22}; /* a damaged SOF may claim 65535x65535 */
      enum codec_status st = codec_decode(buf, len, &lim, &img, NULL, 0);
      if (st == CODEC_OK) {
        ASSERT(img.pixels != NULL);
        ASSERT(img.orientation >= 1 && img.orientation <= 8);
      } else {
        ASSERT(img.pixels == NULL);
        if (st != CODEC_CORRUPT && st != CODEC_UNSUPPORTED && st != CODEC_TOO_LARGE)
          TEST_FAIL("damaged %s: status %d", files[f], (int)st);
      }
      codec_image_free(&img);
    }
    free(buf);
    free(orig);
  }
}

/* CMYK decodes to RGB (the samples are checked in unit_codec_icc). */
static void test_cmyk(void) {
  struct codec_image img;
  char msg[256];
  ASSERT_INT(decode_file("cmyk.jpg", NULL, &img, msg, sizeof msg), ==, CODEC_OK);
  expect_shape(&img, 96, 64, 3, 8);
  codec_image_free(&img);
}

/* ---- JPEG limits: scans, memory, warnings, unsupported processes ---- */

/* In the tests a libjpeg error is a failed test (its default error_exit would call exit()). */
static void jpeg_test_error(j_common_ptr cinfo) {
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  TEST_FAIL("libjpeg: %s", text);
}

static void jpeg_quiet(j_common_ptr cinfo) {
  (void)cinfo;
}

/* A progressive scan script for one component with exactly n scans, 2 <= n <= 1 + 63 * 11: the DC
 * scan, then every AC coefficient k in a band of its own, sent in s_k successive-approximation
 * steps (first Al = s_k - 1, then refinements down to bit 0; libjpeg allows Al <= 10), the s_k
 * spread as evenly as n allows. Returns n. */
static int scan_script(jpeg_scan_info *scans, int n) {
  int ac = n - 1, i = 0;
  scans[i++] = (jpeg_scan_info){.comps_in_scan = 1, .Ss = 0, .Se = 0, .Ah = 0, .Al = 0};
  for (int k = 1; k <= 63; k++) {
    int steps = ac / 63 + (k <= ac % 63);
    ASSERT(steps <= 11);
    for (int al = steps - 1; al >= 0; al--)
      scans[i++] = (jpeg_scan_info){
          .comps_in_scan = 1, .Ss = k, .Se = k, .Ah = al == steps - 1 ? 0 : al + 1, .Al = al};
  }
  ASSERT_INT(i, ==, n);
  return i;
}

static unsigned gray_pattern(int x, int y) { /* a ramp under a checkerboard of 4x4 squares */
  return (unsigned)(x * 3 + y * 2 + (x / 4 + y / 4) % 2 * 64);
}

/* A w x h gray JPEG of gray_pattern() at quality 95, written by libjpeg with the nscans-scan
 * script above (nscans 0: baseline), with arithmetic coding when arith is set. Returns a
 * malloc'd file of *len bytes. */
static uint8_t *gray_jpeg(int w, int h, int nscans, int arith, size_t *len) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr err;
  static jpeg_scan_info scans[64 * 11];
  unsigned char *file = NULL, row[256];
  unsigned long n = 0;
  ASSERT(w <= 256);
  c.err = jpeg_std_error(&err);
  err.error_exit = jpeg_test_error;
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &file, &n);
  c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h;
  c.input_components = 1, c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  if (nscans > 0) c.num_scans = scan_script(scans, nscans), c.scan_info = scans;
  c.arith_code = arith ? TRUE : FALSE;
  jpeg_start_compress(&c, TRUE);
  for (JSAMPROW r = row; c.next_scanline < c.image_height; jpeg_write_scanlines(&c, &r, 1))
    for (int x = 0; x < w; x++) row[x] = (unsigned char)gray_pattern(x, (int)c.next_scanline);
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  *len = n;
  return file;
}

/* Decodes buf with libjpeg's own defaults, where warnings are only counted, and returns their
 * number and the number of scans; an error fails the test. */
static long libjpeg_warnings(const uint8_t *buf, size_t len, int *nscans) {
  struct jpeg_decompress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  err.error_exit = jpeg_test_error;
  err.output_message = jpeg_quiet;
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, buf, (unsigned long)len);
  jpeg_read_header(&c, TRUE);
  jpeg_start_decompress(&c);
  JSAMPARRAY row = (*c.mem->alloc_sarray)((j_common_ptr)&c, JPOOL_IMAGE,
                                          c.output_width * (JDIMENSION)c.output_components, 1);
  while (c.output_scanline < c.output_height) jpeg_read_scanlines(&c, row, 1);
  jpeg_finish_decompress(&c);
  long n = err.num_warnings;
  if (nscans) *nscans = c.input_scan_number;
  jpeg_destroy_decompress(&c);
  return n;
}

/* 256 scans decode; 257 are refused although libjpeg reads them without complaint. (With fewer
 * than 64 scans the script leaves coefficients out, so only the shape is checked.) */
static void test_jpeg_scan_limit(void) {
  static const int counts[] = {10, 255, 256, 257, 300, 694};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    size_t len;
    uint8_t *file = gray_jpeg(40, 24, counts[i], 0, &len);
    int scans = 0;
    ASSERT_INT(libjpeg_warnings(file, len, &scans), ==, 0);
    ASSERT_INT(scans, ==, counts[i]);
    struct codec_image img;
    char msg[256];
    enum codec_status st = codec_decode(file, len, NULL, &img, msg, sizeof msg);
    if (counts[i] <= 256) {
      if (st != CODEC_OK) TEST_FAIL("%d scans: status %d (%s)", counts[i], (int)st, msg);
      expect_shape(&img, 40, 24, 1, 8);
      double sum = 0;
      for (int y = 0; y < 24; y++)
        for (int x = 0; x < 40; x++)
          sum += fabs((double)sample(&img, x, y, 0) - gray_pattern(x, y));
      if (counts[i] >= 64) ASSERT_DBL(sum / (40 * 24), <, 2.0); /* every coefficient sent */
    } else {
      ASSERT_INT(st, ==, CODEC_CORRUPT);
      ASSERT_STR(msg, "the JPEG file has too many scans (more than 256)");
      ASSERT(img.pixels == NULL);
    }
    codec_image_free(&img);
    free(file);
  }
}

/* Offset of the segment with marker m (its 0xff byte), walking the segments after SOI. */
static size_t jpeg_segment(const uint8_t *b, size_t len, int m) {
  for (size_t pos = 2; pos + 4 <= len && b[pos] == 0xff;
       pos += 2 + ((size_t)b[pos + 2] << 8 | b[pos + 3]))
    if (b[pos + 1] == m) return pos;
  TEST_FAIL("no marker 0x%02x", m);
}

static void set_frame_size(uint8_t *b, size_t len, int sof, unsigned w, unsigned h) {
  size_t at = jpeg_segment(b, len, sof); /* ff, marker, length (2), precision, height, width */
  b[at + 5] = (uint8_t)(h >> 8), b[at + 6] = (uint8_t)h;
  b[at + 7] = (uint8_t)(w >> 8), b[at + 8] = (uint8_t)w;
}

/* A progressive gray file whose frame header claims w x h needs libjpeg's whole-image buffer of
 * ceil(w / 8) * ceil(h / 8) blocks of 128 bytes, all asked for before any scan is read. Over the
 * 512 MiB cap the decode is too large; under it, the claim gets its memory and the 40x24 scans
 * that follow are a corrupt file instead. No limits are given, so only the cap can refuse. */
static void test_jpeg_memory_cap(void) {
  static const struct {
    unsigned side;
    enum codec_status want;
  } cases[] = {{65000, CODEC_TOO_LARGE}, /* 7.9 GiB */
               {16800, CODEC_TOO_LARGE}, /* 2100^2 * 128 = 538 MiB */
               {16000, CODEC_CORRUPT},   /* 2000^2 * 128 = 488 MiB */
               {4000, CODEC_CORRUPT}};
  size_t len;
  uint8_t *file = gray_jpeg(40, 24, 10, 0, &len);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    set_frame_size(file, len, 0xc2, cases[i].side, cases[i].side);
    struct codec_image img;
    char msg[256];
    enum codec_status st = codec_decode(file, len, NULL, &img, msg, sizeof msg);
    if (st != cases[i].want)
      TEST_FAIL("%ux%u: status %d, expected %d (%s)", cases[i].side, cases[i].side, (int)st,
                (int)cases[i].want, msg);
    if (st == CODEC_TOO_LARGE)
      ASSERT_STR(msg, "decoding this JPEG image needs more than 512 MiB of memory");
    ASSERT(img.pixels == NULL);
  }
  free(file);
}

/* Damaged entropy-coded data: libjpeg decodes to the end with warnings only, and the policy of
 * no warnings makes the file corrupt. The damage is 16 bytes a third of the way into the first
 * scan overwritten with ff 00 (stuffed 0xff bytes, 64 one-bits), which these files' Huffman
 * tables (libjpeg's, written by PIL) cannot decode. Arbitrary flips are not always noticed: the
 * Huffman decoder often falls back into step, and JPEG has no checksum to tell. */
static void test_jpeg_corrupt_data(void) {
  static const char *files[] = {"gray.jpg", "orient6.jpg", "progressive.jpg"};
  for (size_t f = 0; f < 3; f++) {
    size_t len;
    uint8_t *buf = fixture_bytes(files[f], &len);
    ASSERT_INT(libjpeg_warnings(buf, len, NULL), ==, 0);
    size_t sos = jpeg_segment(buf, len, 0xda);
    size_t data = sos + 2 + ((size_t)buf[sos + 2] << 8 | buf[sos + 3]);
    size_t mid = data + (len - data) / 3;
    for (size_t k = 0; k < 16; k++) buf[mid + k] = k % 2 ? 0x00 : 0xff;
    if (libjpeg_warnings(buf, len, NULL) == 0) TEST_FAIL("%s: no warning from libjpeg", files[f]);
    struct codec_image img;
    char msg[256];
    ASSERT_INT(codec_decode(buf, len, NULL, &img, msg, sizeof msg), ==, CODEC_CORRUPT);
    ASSERT(strncmp(msg, "the JPEG data is corrupt or truncated (libjpeg: Corrupt JPEG data", 65) ==
           0);
    ASSERT(img.pixels == NULL);
    free(buf);
  }
}

/* Processes libjpeg does not decode (lossless, 12-bit) are unsupported, not corrupt. */
static void test_jpeg_unsupported(void) {
  size_t len;
  uint8_t *buf = fixture_bytes("gray.jpg", &len);
  size_t sof = jpeg_segment(buf, len, 0xc0);
  struct codec_image img;
  char msg[256];
  buf[sof + 1] = 0xc3; /* lossless */
  ASSERT_INT(codec_decode(buf, len, NULL, &img, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(msg, "this kind of JPEG is not supported (libjpeg: Unsupported JPEG process: SOF "
                  "type 0xc3)");
  buf[sof + 1] = 0xc1, buf[sof + 4] = 12; /* extended sequential, 12-bit samples */
  ASSERT_INT(codec_decode(buf, len, NULL, &img, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(msg, "this kind of JPEG is not supported (libjpeg: Unsupported JPEG data precision "
                  "12)");
  ASSERT(img.pixels == NULL);
  free(buf);
}

/* codec_decode and codec_jpeg_probe on buf: the same failure in the same words. */
static void expect_probe_refuses(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                 enum codec_status want) {
  struct codec_image img;
  struct codec_jpeg_info info;
  char m1[256], m2[256];
  ASSERT_INT(codec_decode(buf, len, lim, &img, m1, sizeof m1), ==, want);
  ASSERT_INT(codec_jpeg_probe(buf, len, lim, &info, m2, sizeof m2), ==, want);
  ASSERT_STR(m2, m1);
}

/* codec_jpeg_probe reads each kind's headers, refuses at the headers what codec_decode refuses
 * there, in the same words, and sees files cut short, damaged or of kinds only libjpeg decodes. */
static void test_jpeg_probe(void) {
  static const struct {
    const char *name;
    int w, h, channels, orientation, progressive, plain, complete;
    const char *chroma;
  } cases[] = {{"photo_1080p.jpg", 1920, 1080, 3, 1, 0, 1, 1, "4:2:0"},
               {"rocket.jpg", 640, 427, 3, 1, 0, 1, 1, "4:4:4"},
               {"hubble_deep_field.jpg", 1000, 872, 3, 1, 0, 1, 1, "4:4:4"},
               {"progressive.jpg", 451, 300, 3, 1, 1, 1, 1, "4:2:0"},
               {"gray.jpg", 480, 360, 1, 1, 0, 1, 1, "gray"},
               {"orient6.jpg", 48, 64, 3, 6, 0, 1, 1, "4:4:4"}, /* as stored */
               {"truncated.jpg", 128, 96, 3, 1, 0, 1, 0, "4:2:0"}};
  struct codec_jpeg_info info;
  char msg[256];
  size_t len;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    uint8_t *buf = fixture_bytes(cases[i].name, &len);
    ASSERT_INT(codec_jpeg_probe(buf, len, NULL, &info, msg, sizeof msg), ==, CODEC_OK);
    ASSERT_INT(info.width, ==, cases[i].w);
    ASSERT_INT(info.height, ==, cases[i].h);
    ASSERT_INT(info.channels, ==, cases[i].channels);
    ASSERT_INT(info.orientation, ==, cases[i].orientation);
    ASSERT_INT(info.progressive, ==, cases[i].progressive);
    ASSERT_INT(info.plain, ==, cases[i].plain);
    ASSERT_INT(info.complete, ==, cases[i].complete);
    ASSERT_STR(info.chroma, cases[i].chroma);
    free(buf);
  }
  uint8_t *buf = fixture_bytes("photo_1080p.jpg", &len);
  expect_probe_refuses(buf, 300, NULL, CODEC_CORRUPT); /* cut before the scan header (at 609) */
  expect_probe_refuses(buf, len, &(struct codec_limits){1000, 0, 0}, CODEC_TOO_LARGE);
  memset(buf + len / 3, 0xff, 64); /* ends on a marker code that cannot stand in a scan */
  ASSERT_INT(codec_jpeg_probe(buf, len, NULL, &info, NULL, 0), ==, CODEC_OK);
  ASSERT_INT(info.complete, ==, 0);
  free(buf);
  buf = fixture_bytes("cmyk.jpg", &len); /* decodes to RGB, on libjpeg only */
  ASSERT_INT(codec_jpeg_probe(buf, len, NULL, &info, msg, sizeof msg), ==, CODEC_OK);
  ASSERT_INT(info.channels, ==, 3);
  ASSERT_INT(info.plain, ==, 0);
  free(buf);
  buf = fixture_bytes("camera.png", &len);
  ASSERT_INT(codec_jpeg_probe(buf, len, NULL, &info, msg, sizeof msg), ==, CODEC_UNKNOWN);
  free(buf);
  buf = gray_jpeg(40, 24, 0, 1, &len); /* arithmetic coding: libjpeg only */
  ASSERT_INT(codec_jpeg_probe(buf, len, NULL, &info, msg, sizeof msg), ==, CODEC_OK);
  ASSERT(info.plain == 0 && info.complete == 1 && info.channels == 1);
  struct codec_image img;
  ASSERT_INT(codec_decode(buf, len, NULL, &img, msg, sizeof msg), ==, CODEC_OK);
  codec_image_free(&img);
  free(buf);
}

/* ---- allocation failures ---- */

static int same_image(const struct codec_image *a, const struct codec_image *b) {
  return a->width == b->width && a->height == b->height && a->channels == b->channels &&
         a->depth == b->depth && a->orientation == b->orientation &&
         memcmp(a->pixels, b->pixels, image_bytes(a)) == 0;
}

/* Decodes name with allocation n failing, for n = 0, 1, 2, ... until a decode makes fewer than
 * n + 1 allocations. Every decode that met the failure must be CODEC_NOMEM with a sentence and no
 * image, except where *absorbed may count a failure libpng recovers from (an ancillary chunk it
 * drops); then the image must be the same. Returns the number of allocations of one decode. */
static long decode_failing_each(const char *name, int *absorbed) {
  size_t len;
  uint8_t *buf = fixture_bytes(name, &len);
  struct codec_image want = load(name);
  long n = 0;
  for (*absorbed = 0;; n++) {
    struct codec_image img;
    char msg[256] = "";
    ASSERT_INT(codec_test_fail_alloc(n), ==, -1);
    enum codec_status st = codec_decode(buf, len, NULL, &img, msg, sizeof msg);
    int failed = codec_test_fail_alloc(-1) == -1;
    if (st == CODEC_OK) {
      if (!same_image(&img, &want)) TEST_FAIL("%s, allocation %ld failing: other pixels", name, n);
      codec_image_free(&img);
      if (!failed) break;
      ++*absorbed;
      continue;
    }
    if (!failed || st != CODEC_NOMEM)
      TEST_FAIL("%s, allocation %ld failing: status %d (%s)", name, n, (int)st, msg);
    ASSERT(img.pixels == NULL);
    ASSERT(msg[0] != '\0');
  }
  free(buf);
  codec_image_free(&want);
  return n;
}

/* The hook reaches libpng, zlib and libjpeg (many allocations a decode), and only libpng's
 * ancillary chunks absorb a failure. */
static void test_alloc_failures_decode(void) {
  static const struct {
    const char *file;
    long min_allocs;
    int absorbable;
  } cases[] = {{"gray_alpha.png", 5, 0},   {"rgb16.png", 5, 0},       {"palette_trns.png", 5, 0},
               {"interlaced.png", 5, 0},   {"astronaut.png", 5, 1},   {"rocket.jpg", 15, 0},
               {"progressive.jpg", 15, 0}, {"gray.jpg", 15, 0},       {"orient6.jpg", 15, 0},
               {"lossless.webp", 1, 0},    {"alpha_lossy.webp", 1, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int absorbed;
    long n = decode_failing_each(cases[i].file, &absorbed);
    if (n < cases[i].min_allocs || (absorbed > 0 && !cases[i].absorbable))
      TEST_FAIL("%s: %ld allocations, %d failures absorbed", cases[i].file, n, absorbed);
  }
  ASSERT_INT(codec_test_fail_alloc(-1), ==, -1);
}

/* Encodes img with allocation n failing, n = 0, 1, ... until an encode makes fewer than n + 1.
 * A failed encode is CODEC_NOMEM with no output; one that absorbed the failure (the PNG
 * encoder's final shrink) decodes to img. Returns the number of allocations of one encode. */
static long encode_failing_each(const struct codec_image *img, const struct codec_encode_opts *o) {
  long n = 0;
  for (;; n++) {
    uint8_t *file = (uint8_t *)&n;
    size_t len = 1;
    char msg[256] = "";
    codec_test_fail_alloc(n);
    enum codec_status st = codec_encode(img, o, &file, &len, msg, sizeof msg);
    int failed = codec_test_fail_alloc(-1) == -1;
    if (st == CODEC_OK) {
      struct codec_image back;
      ASSERT_INT(codec_decode(file, len, NULL, &back, NULL, 0), ==, CODEC_OK);
      if (o->format == CODEC_PNG && !same_image(&back, img))
        TEST_FAIL("PNG encode, allocation %ld failing: other pixels", n);
      codec_image_free(&back);
      free(file);
      if (!failed) return n;
      continue;
    }
    if (!failed || st != CODEC_NOMEM)
      TEST_FAIL("encode, allocation %ld failing: status %d (%s)", n, (int)st, msg);
    ASSERT(file == NULL && len == 0 && msg[0] != '\0');
  }
}

static void test_alloc_failures_encode(void) {
  static const char *files[] = {"rgb16.png", "gray1.png", "palette_trns.png"};
  for (size_t f = 0; f < 3; f++) {
    struct codec_image img = load(files[f]);
    struct codec_encode_opts png = {.format = CODEC_PNG, .compression = 6};
    struct codec_encode_opts jpeg = {.format = CODEC_JPEG, .quality = 90};
    long n = encode_failing_each(&img, &png);
    if (n < 5) TEST_FAIL("%s: PNG encode made only %ld allocations", files[f], n);
    n = encode_failing_each(&img, &jpeg); /* the 8-bit copy (but for gray1), the encoder's state
                                             and the output's growth */
    ASSERT_INT(n, >=, img.depth == 8 && img.channels == 1 ? 2 : 3);
    for (int lossless = 0; lossless < 2; lossless++) { /* the RGB(A) copy, the output's growth */
      struct codec_encode_opts webp = {
          .format = CODEC_WEBP, .quality = 80, .compression = 6, .lossless = lossless};
      n = encode_failing_each(&img, &webp);
      if (n < 2) TEST_FAIL("%s: WebP encode made only %ld allocations", files[f], n);
    }
    codec_image_free(&img);
  }
}

/* A flat gray image survives JPEG quality 100 exactly (a flat RGB one within 1, from the YCbCr
 * round trip), so the 16-bit scaling and the compositing over white can be checked to the unit.
 * The oracle is the formula in double. */
static unsigned over_white(double v, double a, double max) {
  return (unsigned)lround((v * a / max + max * (1.0 - a / max)) * 255.0 / max);
}

static struct codec_image flat(int channels, int depth, const unsigned *value) {
  struct codec_image img = {.width = 16, .height = 16, .channels = channels, .depth = depth};
  img.pixels = malloc(image_bytes(&img));
  for (int i = 0; i < 16 * 16 * channels; i++) {
    unsigned v = value[i % channels];
    if (depth == 8)
      img.pixels[i] = (uint8_t)v;
    else
      memcpy(img.pixels + 2 * i, &(uint16_t){(uint16_t)v}, 2);
  }
  return img;
}

static void expect_flat_jpeg(int channels, int depth, const unsigned *value, const unsigned *want) {
  struct codec_image img = flat(channels, depth, value);
  struct codec_encode_opts o = {.format = CODEC_JPEG, .quality = 100};
  uint8_t *file;
  size_t len;
  struct codec_image back = encode_decode(&img, &o, &file, &len);
  int out_channels = channels <= 2 ? 1 : 3, tolerance = channels <= 2 ? 0 : 1;
  expect_shape(&back, 16, 16, out_channels, 8);
  for (int y = 0; y < 16; y++)
    for (int x = 0; x < 16; x++)
      for (int c = 0; c < out_channels; c++)
        if (abs((int)sample(&back, x, y, c) - (int)want[c]) > tolerance)
          TEST_FAIL("flat %d-channel %d-bit image: channel %d is %u, expected %u", channels, depth,
                    c, sample(&back, x, y, c), want[c]);
  free(file);
  codec_image_free(&back);
  codec_image_free(&img);
}

static void test_jpeg_encode_flat(void) {
  /* 16-bit: (v * 255 + 32767) / 65535, on both sides of a rounding edge (100.498, 100.502). */
  expect_flat_jpeg(1, 16, (const unsigned[]){25828}, (const unsigned[]){100});
  expect_flat_jpeg(1, 16, (const unsigned[]){25829}, (const unsigned[]){101});
  expect_flat_jpeg(1, 16, (const unsigned[]){65535}, (const unsigned[]){255});
  expect_flat_jpeg(3, 16, (const unsigned[]){25828, 25829, 65535},
                   (const unsigned[]){100, 101, 255});
  /* 8-bit gray + alpha: colour * a + 255 * (1 - a), rounded. */
  ASSERT_INT(over_white(0, 128, 255), ==, 127);
  ASSERT_INT(over_white(128, 128, 255), ==, 191);
  ASSERT_INT(over_white(200, 100, 255), ==, 233);
  expect_flat_jpeg(2, 8, (const unsigned[]){0, 128}, (const unsigned[]){127});
  expect_flat_jpeg(2, 8, (const unsigned[]){128, 128}, (const unsigned[]){191});
  expect_flat_jpeg(2, 8, (const unsigned[]){200, 100}, (const unsigned[]){233});
  expect_flat_jpeg(2, 8, (const unsigned[]){77, 255}, (const unsigned[]){77});
  expect_flat_jpeg(2, 8, (const unsigned[]){0, 0}, (const unsigned[]){255});
  /* 16-bit gray + alpha: one rounding for scaling and compositing together. */
  ASSERT_INT(over_white(25829, 49151, 65535), ==, 139);
  expect_flat_jpeg(2, 16, (const unsigned[]){25829, 49151}, (const unsigned[]){139});
  expect_flat_jpeg(2, 16, (const unsigned[]){0, 0}, (const unsigned[]){255});
  /* RGBA: half-transparent colour; fully transparent black is white. */
  expect_flat_jpeg(4, 8, (const unsigned[]){0, 128, 255, 128}, (const unsigned[]){127, 191, 255});
  expect_flat_jpeg(4, 8, (const unsigned[]){0, 0, 0, 0}, (const unsigned[]){255, 255, 255});
  expect_flat_jpeg(4, 16, (const unsigned[]){65535, 0, 0, 65535}, (const unsigned[]){255, 0, 0});
}

/* red_square.png to JPEG: the transparent (0,0,0,0) border becomes white, not black. */
static void test_jpeg_encode_red_square(void) {
  struct codec_image sq = load("red_square.png"); /* transparent (0,0,0,0) around opaque red */
  struct codec_encode_opts o = {.format = CODEC_JPEG, .quality = 90};
  uint8_t *file;
  size_t len;
  struct codec_image back = encode_decode(&sq, &o, &file, &len);
  expect_shape(&back, 64, 64, 3, 8);
  static const int where[][2] = {{0, 0}, {63, 0}, {0, 63}, {63, 63}, {10, 32}};
  for (size_t i = 0; i < 5; i++) /* transparent black composites to white, not black */
    for (int c = 0; c < 3; c++) ASSERT_NEAR(sample(&back, where[i][0], where[i][1], c), 255, 2);
  ASSERT_NEAR(sample(&back, 32, 32, 0), 255, 3);
  ASSERT_NEAR(sample(&back, 32, 32, 1), 0, 3);
  ASSERT_NEAR(sample(&back, 32, 32, 2), 0, 3);
  free(file);
  codec_image_free(&back);
  codec_image_free(&sq);
}

/* 16-bit images with alpha to JPEG: within JPEG error of the composite over white computed
 * from the 16-bit samples; gray + alpha gives a gray JPEG, RGBA an RGB one. */
static void test_jpeg_encode_alpha16(void) {
  static const char *files[] = {"rgba16.png", "gray_alpha16.png"};
  for (int f = 0; f < 2; f++) {
    struct codec_image img = load(files[f]);
    struct codec_encode_opts o = {.format = CODEC_JPEG, .quality = 95};
    uint8_t *file;
    size_t len;
    struct codec_image back = encode_decode(&img, &o, &file, &len);
    int colours = img.channels - 1;
    expect_shape(&back, RW, RH, colours, 8);
    double sum = 0;
    for (int y = 0; y < RH; y++)
      for (int x = 0; x < RW; x++)
        for (int c = 0; c < colours; c++)
          sum += fabs((double)sample(&back, x, y, c) -
                      over_white(sample(&img, x, y, c), sample(&img, x, y, colours), 65535));
    ASSERT_DBL(sum / (RW * RH * colours), <, 1.5);
    free(file);
    codec_image_free(&back);
    codec_image_free(&img);
  }
}

static int jpeg_subsampling(const uint8_t *file, size_t len) {
  tjhandle tj = tjInitDecompress();
  int w, h, ss, cs;
  ASSERT_INT(tjDecompressHeader3(tj, file, (unsigned long)len, &w, &h, &ss, &cs), ==, 0);
  tjDestroy(tj);
  return ss;
}

static void test_jpeg_encode_quality(void) {
  static const struct {
    int quality, subsampling;
    double max_mean;
  } cases[] = {{90, TJSAMP_444, 2.5}, {89, TJSAMP_420, 3.0}, {50, TJSAMP_420, 4.5}};
  for (size_t i = 0; i < 3; i++) {
    struct codec_encode_opts o = {.format = CODEC_JPEG, .quality = cases[i].quality};
    uint8_t *file;
    size_t len;
    struct codec_image back = encode_decode(&astronaut, &o, &file, &len);
    expect_shape(&back, 512, 512, 3, 8);
    ASSERT_INT(jpeg_subsampling(file, len), ==, cases[i].subsampling);
    ASSERT_DBL(mean_diff(&back, &astronaut, 0, 0), <, cases[i].max_mean);
    free(file);
    codec_image_free(&back);
  }
  struct codec_encode_opts o = {.format = CODEC_JPEG, .quality = 90};
  uint8_t *file;
  size_t len;
  struct codec_image back = encode_decode(&camera, &o, &file, &len);
  expect_shape(&back, 512, 512, 1, 8);
  ASSERT_INT(jpeg_subsampling(file, len), ==, TJSAMP_GRAY);
  ASSERT_DBL(mean_diff(&back, &camera, 0, 0), <, 2.5);
  ASSERT_INT(codec_exif_orientation(file, len), ==, 1);
  free(file);
  codec_image_free(&back);
}

static void test_encode_bad_arguments(void) {
  uint8_t *file = (uint8_t *)&file;
  size_t len = 7;
  char msg[256];
  struct codec_encode_opts o = {.format = CODEC_JPEG, .quality = 0};
  ASSERT_INT(codec_encode(&camera, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(msg, "JPEG quality 0 is outside 1..100");
  ASSERT(file == NULL && len == 0);
  o = (struct codec_encode_opts){.format = CODEC_PNG, .compression = 10};
  ASSERT_INT(codec_encode(&camera, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(msg, "PNG compression 10 is outside 0..9");
  o = (struct codec_encode_opts){.format = CODEC_NONE};
  ASSERT_INT(codec_encode(&camera, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  o.format = CODEC_PNG;
  struct codec_image bad = camera;
  bad.channels = 5;
  ASSERT_INT(codec_encode(&bad, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  bad = camera, bad.depth = 12;
  ASSERT_INT(codec_encode(&bad, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  bad = camera, bad.width = 0;
  ASSERT_INT(codec_encode(&bad, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_INT(codec_encode(NULL, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  bad = camera, bad.width = 70000, bad.height = 1, o.format = CODEC_JPEG, o.quality = 80;
  ASSERT_INT(codec_encode(&bad, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT(file == NULL);
  o = (struct codec_encode_opts){.format = CODEC_WEBP, .quality = 101};
  ASSERT_INT(codec_encode(&camera, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(msg, "WebP quality 101 is outside 1..100");
  bad = camera, bad.width = 16384, bad.height = 1, o.quality = 80;
  ASSERT_INT(codec_encode(&bad, &o, &file, &len, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(msg, "WebP cannot hold a 16384x1 image; the largest side is 16383 pixels");
  ASSERT(file == NULL && len == 0);
}

/* ---- WebP ---- */

/* PSNR of the first `colours` channels of the 8-bit image b against a (same size), over the
 * pixels where a's alpha (channel `colours`, when a has one) is not 0. */
static double colour_psnr(const struct codec_image *a, const struct codec_image *b, int colours) {
  double se = 0, n = 0;
  for (int y = 0; y < a->height; y++)
    for (int x = 0; x < a->width; x++) {
      if (a->channels > colours && sample(a, x, y, colours) == 0) continue;
      for (int c = 0; c < colours; c++, n++) {
        double d = (double)sample(a, x, y, c) - (double)sample(b, x, y, c);
        se += d * d;
      }
    }
  return se == 0 ? INFINITY : 10 * log10(255.0 * 255.0 * n / se);
}

/* The picture of the small WebP fixtures (make-fixtures.py): astronaut's REGION as RGB, or RGBA
 * with the ramp as alpha. */
static struct codec_image astronaut_region(int alpha) {
  struct codec_image img = {NULL, RW, RH, 3 + alpha, 8, CODEC_WEBP, 1};
  img.pixels = malloc(image_bytes(&img));
  for (int y = 0; y < RH; y++)
    for (int x = 0; x < RW; x++)
      for (int c = 0; c < img.channels; c++)
        img.pixels[((size_t)y * RW + (size_t)x) * (size_t)img.channels + (size_t)c] =
            (uint8_t)(c < 3 ? photo(&astronaut, x, y, c) : ramp(x, y, 255, RW, RH));
  return img;
}

/* The fixtures that PIL's libwebp wrote: lossless ones give back their source exactly, lossy
 * ones are close to it, and alpha is decoded exactly (WebP stores it losslessly here). */
static void test_webp_decode(void) {
  struct codec_image rgb = astronaut_region(0), rgba = astronaut_region(1);
  struct codec_image img = load("lossless.webp");
  expect_shape(&img, RW, RH, 3, 8);
  ASSERT_INT(img.format, ==, CODEC_WEBP);
  ASSERT(same_image(&img, &rgb));
  codec_image_free(&img);
  img = load("alpha_lossless.webp");
  expect_shape(&img, RW, RH, 4, 8);
  ASSERT(same_image(&img, &rgba));
  codec_image_free(&img);
  img = load("alpha_lossy.webp");
  expect_shape(&img, RW, RH, 4, 8);
  for (int y = 0; y < RH; y++)
    for (int x = 0; x < RW; x++) ASSERT_INT(sample(&img, x, y, 3), ==, ramp(x, y, 255, RW, RH));
  double db = colour_psnr(&rgba, &img, 3);
  codec_image_free(&img);
  img = load("lossy.webp");
  expect_shape(&img, 451, 300, 3, 8);
  fprintf(stderr, "    alpha_lossy.webp %.2f dB, lossy.webp %.2f dB against their sources\n", db,
          colour_psnr(&chelsea, &img, 3));
  ASSERT_DBL(db, >, 34.0);                             /* measured 34.52 */
  ASSERT_DBL(colour_psnr(&chelsea, &img, 3), >, 36.0); /* measured 36.69 */
  codec_image_free(&img);
  codec_image_free(&rgb);
  codec_image_free(&rgba);
}

/* back, img encoded as lossless WebP and decoded, is img in 8-bit RGB or RGBA exactly: 16-bit
 * samples scaled as (v * 255 + 32767) / 65535, gray repeated, alpha kept unless opaque
 * everywhere (libwebp then writes none). */
static void expect_webp_exact(const struct codec_image *img, const struct codec_image *back) {
  int alpha = img->channels == 2 || img->channels == 4, gray = img->channels <= 2;
  int opaque = 1;
  for (int y = 0; alpha && y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      opaque &= sample(img, x, y, img->channels - 1) == (img->depth == 8 ? 255u : 65535u);
  expect_shape(back, img->width, img->height, alpha && !opaque ? 4 : 3, 8);
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < back->channels; c++) {
        unsigned v = sample(img, x, y, c == 3 ? img->channels - 1 : gray ? 0 : c);
        if (img->depth == 16) v = (v * 255 + 32767) / 65535;
        if (sample(back, x, y, c) != v)
          TEST_FAIL("(%d, %d) channel %d is %u, expected %u", x, y, c, sample(back, x, y, c), v);
      }
}

static void test_webp_lossless_round_trip(void) {
  struct codec_image rgba = astronaut_region(1);
  ASSERT_INT(sample(&rgba, 0, 0, 3), ==, 0); /* a transparent pixel with a colour: kept */
  ASSERT_INT(sample(&rgba, 0, 0, 0), >, 0);
  static const char *files[] = {"astronaut.png", "palette_trns.png", "red_square.png",
                                "logo.png",      "rgba16.png",       "gray16.png",
                                "camera.png",    "gray_alpha.png",   "gray_alpha16.png"};
  struct codec_encode_opts o = {.format = CODEC_WEBP,
                                .quality = 0,
                                .compression = 0,
                                .lossless = 1}; /* lossless: quality is not used */
  for (size_t i = 0; i <= sizeof files / sizeof files[0]; i++) {
    struct codec_image img = i < sizeof files / sizeof files[0] ? load(files[i]) : rgba;
    uint8_t *file;
    size_t len;
    struct codec_image back = encode_decode(&img, &o, &file, &len);
    ASSERT_INT(back.format, ==, CODEC_WEBP);
    expect_webp_exact(&img, &back);
    free(file);
    codec_image_free(&back);
    codec_image_free(&img);
  }
}

/* Lossy WebP: the PSNR grows with quality (floors measured with libwebp 1.2.4), and alpha is
 * kept exactly, not composited as for JPEG. */
static void test_webp_lossy(void) {
  static const struct {
    int quality;
    double min_db; /* measured: 33.17, 34.67, 37.68 dB */
  } cases[] = {{50, 32.5}, {75, 34.0}, {90, 37.0}};
  size_t last = 0;
  for (size_t i = 0; i < 3; i++) {
    struct codec_encode_opts o = {
        .format = CODEC_WEBP, .quality = cases[i].quality, .compression = 6, .lossless = 0};
    uint8_t *file;
    size_t len;
    struct codec_image back = encode_decode(&astronaut, &o, &file, &len);
    expect_shape(&back, 512, 512, 3, 8);
    double db = colour_psnr(&astronaut, &back, 3);
    fprintf(stderr, "    astronaut.png at quality %d: %zu bytes, %.2f dB\n", cases[i].quality, len,
            db);
    ASSERT_DBL(db, >, cases[i].min_db);
    ASSERT_INT(len, >, last);
    last = len;
    free(file);
    codec_image_free(&back);
  }
  struct codec_image rgba = astronaut_region(1);
  struct codec_encode_opts o = {
      .format = CODEC_WEBP, .quality = 80, .compression = 6, .lossless = 0};
  uint8_t *file;
  size_t len;
  struct codec_image back = encode_decode(&rgba, &o, &file, &len);
  expect_shape(&back, RW, RH, 4, 8);
  for (int y = 0; y < RH; y++)
    for (int x = 0; x < RW; x++) ASSERT_INT(sample(&back, x, y, 3), ==, sample(&rgba, x, y, 3));
  ASSERT_DBL(colour_psnr(&rgba, &back, 3), >, 33.0);
  free(file);
  codec_image_free(&back);
  codec_image_free(&rgba);
}

/* A flat 16-bit RGBA and gray + alpha image to lossless WebP: the 16-bit scaling to the unit, on
 * both sides of a rounding edge, with alpha kept. */
static void test_webp_encode_flat16(void) {
  struct codec_encode_opts o = {
      .format = CODEC_WEBP, .quality = 90, .compression = 6, .lossless = 1};
  struct codec_image img[2] = {flat(4, 16, (const unsigned[]){25828, 25829, 65535, 32768}),
                               flat(2, 16, (const unsigned[]){25829, 49151})};
  static const unsigned want[2][4] = {{100, 101, 255, 128}, {101, 101, 101, 191}};
  for (int i = 0; i < 2; i++) {
    uint8_t *file;
    size_t len;
    struct codec_image back = encode_decode(&img[i], &o, &file, &len);
    expect_shape(&back, 16, 16, 4, 8);
    for (int c = 0; c < 4; c++) ASSERT_INT(sample(&back, 7, 9, c), ==, want[i][c]);
    expect_webp_exact(&img[i], &back);
    free(file);
    codec_image_free(&back);
    codec_image_free(&img[i]);
  }
}

static void put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

/* A lossless WebP whose header claims 16384x16384 RGBA (1 GiB of pixels) and holds nothing else
 * is refused from its header: no allocation is made (the armed countdown is untouched). An
 * animated file is refused in words that say so. */
static void test_webp_refused(void) {
  uint8_t f[12 + 8 + 6] = "RIFF\0\0\0\0WEBPVP8L";
  put_le32(f + 4, sizeof f - 8);
  put_le32(f + 16, 6);
  f[20] = 0x2f; /* the VP8L signature, then width - 1 and height - 1 in 14 bits each, alpha */
  put_le32(f + 21, 16383u | 16383u << 14 | 1u << 28);
  struct codec_image img;
  char msg[256];
  struct codec_limits lim = {16384, 16384, 40000000};
  ASSERT_INT(codec_test_fail_alloc(0), ==, -1);
  ASSERT_INT(codec_decode(f, sizeof f, &lim, &img, msg, sizeof msg), ==, CODEC_TOO_LARGE);
  ASSERT_INT(codec_test_fail_alloc(-1), ==, 0); /* the first allocation is still to fail */
  ASSERT_STR(msg, "pixel count 268435456 (16384x16384) exceeds the limit of 40000000");
  ASSERT(img.pixels == NULL);
  lim = (struct codec_limits){8192, 0, 0};
  ASSERT_INT(codec_decode(f, sizeof f, &lim, &img, msg, sizeof msg), ==, CODEC_TOO_LARGE);
  ASSERT_STR(msg, "width 16384 exceeds the limit of 8192");
  lim = (struct codec_limits){16384, 16384, 0};
  ASSERT_INT(codec_test_fail_alloc(0), ==, -1); /* within the limits: the pixels are next */
  ASSERT_INT(codec_decode(f, sizeof f, &lim, &img, msg, sizeof msg), ==, CODEC_NOMEM);
  ASSERT_STR(msg, "out of memory for a 16384x16384 WebP image");
  ASSERT_INT(codec_test_fail_alloc(-1), ==, -1);
  ASSERT_INT(decode_file("animated.webp", NULL, &img, msg, sizeof msg), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(msg, "animated WebP is not supported; send a still image (one frame)");
  ASSERT(img.pixels == NULL);
  size_t len;
  uint8_t *buf = fixture_bytes("lossless.webp", &len);
  ASSERT_INT(codec_decode(buf, len - 1, NULL, &img, msg, sizeof msg), ==, CODEC_CORRUPT);
  char want[128];
  snprintf(want, sizeof want, "the WebP file is truncated: it ends after %zu bytes", len - 1);
  ASSERT_STR(msg, want);
  ASSERT_INT(buf[20], ==, 0x2f);
  buf[20] = 0x2e; /* not the VP8L signature */
  ASSERT_INT(codec_decode(buf, len, NULL, &img, msg, sizeof msg), ==, CODEC_CORRUPT);
  ASSERT_STR(msg, "the WebP data is corrupt (libwebp: bitstream error)");
  free(buf);
}

/* ---- EXIF parser on hand-made and damaged segments ---- */

struct tiff {
  uint8_t b[256];
  size_t len;
  int be;
};

static void put16(struct tiff *t, size_t at, unsigned v) {
  t->b[at + (t->be ? 0 : 1)] = (uint8_t)(v >> 8);
  t->b[at + (t->be ? 1 : 0)] = (uint8_t)v;
}
static void put32(struct tiff *t, size_t at, uint32_t v) {
  put16(t, at + (t->be ? 0 : 2), v >> 16);
  put16(t, at + (t->be ? 2 : 0), v & 0xffff);
}

/* An APP1 payload with IFD0 at offset 8 holding n entries: entry i has tag tags[i], type SHORT,
 * count 1, value value. */
static struct tiff app1(int be, int n, const unsigned *tags, unsigned value) {
  struct tiff t = {.be = be};
  memcpy(t.b, "Exif\0\0", 6);
  memcpy(t.b + 6, be ? "MM" : "II", 2);
  put16(&t, 8, 42);
  put32(&t, 10, 8);
  put16(&t, 14, (unsigned)n);
  for (int i = 0; i < n; i++) {
    size_t e = 16 + 12 * (size_t)i;
    put16(&t, e, tags[i]);
    put16(&t, e + 2, 3);
    put32(&t, e + 4, 1);
    put16(&t, e + 8, value);
  }
  put32(&t, 16 + 12 * (size_t)n, 0);
  t.len = 20 + 12 * (size_t)n;
  return t;
}

static int parse_exact(const uint8_t *b, size_t len) { /* from an exact-size copy */
  uint8_t *copy = malloc(len ? len : 1);
  memcpy(copy, b, len);
  int o = codec_exif_parse(copy, len);
  free(copy);
  return o;
}

/* Parses app1(be, 3, tags, value) after writing a bits-wide field v at offset at (bits 0: none). */
static int parse_patched(int be, const unsigned *tags, unsigned value, size_t at, int bits,
                         uint32_t v) {
  struct tiff t = app1(be, 3, tags, value);
  if (bits == 16) put16(&t, at, v);
  if (bits == 32) put32(&t, at, v);
  return parse_exact(t.b, t.len);
}

static void test_exif_parser(void) {
  static const unsigned tags[3] = {0x010f, 0x0112, 0x0131}, other[3] = {0x010f, 0x0110, 0x0131};
  enum { IFD_OFFSET = 10, COUNT = 14, ENTRY1 = 16 + 12 };
  for (int be = 0; be <= 1; be++) {
    struct tiff t = app1(be, 3, tags, 6);
    ASSERT_INT(parse_exact(t.b, t.len), ==, 6);
    for (size_t cut = 0; cut < t.len; cut++) /* entry 1 ends at 6 + 8 + 2 + 24 = 40 */
      ASSERT_INT(parse_exact(t.b, cut), ==, cut >= 40 ? 6 : 1);
    ASSERT_INT(parse_patched(be, tags, 0, 0, 0, 0), ==, 1);
    ASSERT_INT(parse_patched(be, tags, 9, 0, 0, 0), ==, 1);
    ASSERT_INT(parse_patched(be, tags, 0x0800, 0, 0, 0), ==, 1);
    ASSERT_INT(parse_patched(be, other, 6, 0, 0, 0), ==, 1);           /* no 0x0112 */
    ASSERT_INT(parse_patched(be, tags, 6, ENTRY1 + 2, 16, 4), ==, 1);  /* LONG, not SHORT */
    ASSERT_INT(parse_patched(be, tags, 6, ENTRY1 + 4, 32, 2), ==, 1);  /* count 2 */
    ASSERT_INT(parse_patched(be, tags, 6, 8, 16, 43), ==, 1);          /* TIFF magic 43 */
    ASSERT_INT(parse_patched(be, tags, 6, COUNT, 16, 0xffff), ==, 6);  /* huge count, found */
    ASSERT_INT(parse_patched(be, other, 6, COUNT, 16, 0xffff), ==, 1); /* huge count, runs off */
    static const uint32_t offsets[] = {0xffffffffu, 0xfffffff0u, 0x80000000u, 1000, 49, 33, 0};
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) /* IFD0 past the end */
      ASSERT_INT(parse_patched(be, tags, 6, IFD_OFFSET, 32, offsets[i]), ==, 1);
  }
  struct tiff t = app1(0, 3, tags, 6);
  memcpy(t.b + 6, "IM", 2);
  ASSERT_INT(parse_exact(t.b, t.len), ==, 1);
  t = app1(0, 3, tags, 6);
  t.b[4] = 'X';
  ASSERT_INT(parse_exact(t.b, t.len), ==, 1);
  ASSERT_INT(codec_exif_parse(NULL, 0), ==, 1);
  for (int i = 0; i < 20000; i++) { /* random bytes behind a valid header */
    size_t len = rng() % 64;
    uint8_t b[64];
    for (size_t k = 0; k < len; k++) b[k] = (uint8_t)rng();
    if (len >= 10) memcpy(b, i & 1 ? "Exif\0\0MM\0\x2a" : "Exif\0\0II\x2a\0", 10);
    int o = parse_exact(b, len);
    ASSERT(o >= 1 && o <= 8);
  }
}

static int orientation_exact(const uint8_t *b, size_t len) {
  uint8_t *copy = malloc(len ? len : 1);
  memcpy(copy, b, len);
  int o = codec_exif_orientation(copy, len);
  free(copy);
  return o;
}

/* A JPEG prefix: SOI, then the given segments, then SOS. */
static size_t jpeg_with(uint8_t *out, const uint8_t *segments, size_t n) {
  memcpy(out, "\xff\xd8", 2);
  memcpy(out + 2, segments, n);
  memcpy(out + 2 + n, "\xff\xda\x00\x02", 4);
  return n + 6;
}

static size_t segment(uint8_t *out, int marker, const uint8_t *payload, size_t n) {
  out[0] = 0xff, out[1] = (uint8_t)marker, out[2] = (uint8_t)((n + 2) >> 8);
  out[3] = (uint8_t)(n + 2);
  memcpy(out + 4, payload, n);
  return n + 4;
}

static void test_exif_in_jpeg(void) {
  static const unsigned tags[1] = {0x0112};
  struct tiff t = app1(1, 1, tags, 8);
  uint8_t segs[512], file[600];
  size_t n = segment(segs, 0xe1, t.b, t.len);
  ASSERT_INT(orientation_exact(file, jpeg_with(file, segs, n)), ==, 8);
  /* XMP APP1 and APP0 before it are skipped; fill bytes before a marker are allowed. */
  n = segment(segs, 0xe0, (const uint8_t *)"JFIF\0\1\1", 7);
  n += segment(segs + n, 0xe1, (const uint8_t *)"http://ns.adobe.com/xap/1.0/\0<x/>", 33);
  segs[n++] = 0xff;
  n += segment(segs + n, 0xe1, t.b, t.len);
  size_t len = jpeg_with(file, segs, n);
  ASSERT_INT(orientation_exact(file, len), ==, 8);
  for (size_t cut = 0; cut <= len; cut++) /* the EXIF segment counts only when all there */
    ASSERT_INT(orientation_exact(file, cut), ==, cut >= 2 + n ? 8 : 1);
  /* After SOS nothing counts. */
  n = segment(segs, 0xe0, (const uint8_t *)"JFIF", 4);
  memcpy(segs + n, "\xff\xda\x00\x02", 4), n += 4;
  n += segment(segs + n, 0xe1, t.b, t.len);
  ASSERT_INT(orientation_exact(file, jpeg_with(file, segs, n)), ==, 1);
  /* Segment lengths below 2 or past the end. */
  n = segment(segs, 0xe1, t.b, t.len);
  segs[2] = 0, segs[3] = 1;
  ASSERT_INT(orientation_exact(file, jpeg_with(file, segs, n)), ==, 1);
  segs[2] = 0xff, segs[3] = 0xff;
  ASSERT_INT(orientation_exact(file, jpeg_with(file, segs, n)), ==, 1);
  ASSERT_INT(orientation_exact((const uint8_t *)"\xff\xd8", 2), ==, 1);
  ASSERT_INT(orientation_exact((const uint8_t *)"\x89PNG", 4), ==, 1);
}

/* Random damage to the first 200 bytes of a real file, which hold its EXIF segment. */
static void test_exif_damaged_jpeg(void) {
  size_t flen;
  uint8_t *orig = fixture_bytes("orient7.jpg", &flen);
  size_t head = flen < 200 ? flen : 200;
  for (int i = 0; i < 20000; i++) {
    uint8_t b[200];
    memcpy(b, orig, head);
    for (int k = 1 + (int)(rng() % 4); k > 0; k--) b[2 + rng() % (head - 2)] = (uint8_t)rng();
    int o = orientation_exact(b, 2 + rng() % (head - 1));
    ASSERT(o >= 1 && o <= 8);
  }
  free(orig);
}

/* ---- cancellation (codec_cancel_set) ---- */

struct stopper { /* a hook that says stop from its call `at` on (0: never); counts its calls */
  long at;
  long calls; /* atomic: the PNG encoder's helpers ask too */
};

static int stop_at(void *arg) {
  struct stopper *s = arg;
  long n = __atomic_add_fetch(&s->calls, 1, __ATOMIC_RELAXED);
  return s->at > 0 && n >= s->at;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* codec_encode under the hook s (NULL: none); the thread's hook is cleared after. */
static enum codec_status encode_with(const struct codec_image *img,
                                     const struct codec_encode_opts *o, struct stopper *s,
                                     uint8_t **out, size_t *len) {
  struct codec_cancel hook = {stop_at, s};
  char msg[256];
  codec_cancel_set(s ? &hook : NULL);
  enum codec_status st = codec_encode(img, o, out, len, msg, sizeof msg);
  codec_cancel_set(NULL);
  if (st != CODEC_OK && st != CODEC_CANCELLED) TEST_FAIL("encode: %d: %s", (int)st, msg);
  return st;
}

static enum codec_status decode_with(const uint8_t *buf, size_t len, struct stopper *s,
                                     struct codec_image *img) {
  struct codec_cancel hook = {stop_at, s};
  char msg[256];
  codec_cancel_set(s ? &hook : NULL);
  enum codec_status st = codec_decode(buf, len, NULL, img, msg, sizeof msg);
  codec_cancel_set(NULL);
  if (st != CODEC_OK && st != CODEC_CANCELLED) TEST_FAIL("decode: %d: %s", (int)st, msg);
  return st;
}

/* Encodes img with o: with a hook that never says stop, the bytes of an encode without one, the
 * hook asked at least min_calls times; with one that says stop at its first call, at half its
 * calls and at its last, CODEC_CANCELLED and no output. Returns the calls of a whole encode. */
static long expect_encode_stops(const struct codec_image *img, const struct codec_encode_opts *o,
                                long min_calls, const char *what) {
  uint8_t *plain, *hooked;
  size_t plain_len, hooked_len;
  struct stopper never = {0, 0};
  ASSERT_INT(encode_with(img, o, NULL, &plain, &plain_len), ==, CODEC_OK);
  ASSERT_INT(encode_with(img, o, &never, &hooked, &hooked_len), ==, CODEC_OK);
  if (hooked_len != plain_len || memcmp(hooked, plain, plain_len) != 0)
    TEST_FAIL("%s: other bytes with a hook that never stops", what);
  if (never.calls < min_calls) TEST_FAIL("%s: the hook asked %ld times", what, never.calls);
  long at[3] = {1, never.calls / 2 > 1 ? never.calls / 2 : 1, never.calls};
  for (int i = 0; i < 3; i++) {
    struct stopper s = {at[i], 0};
    uint8_t *out = (uint8_t *)&s;
    size_t len = 1;
    if (encode_with(img, o, &s, &out, &len) != CODEC_CANCELLED)
      TEST_FAIL("%s: not stopped at call %ld of %ld", what, at[i], never.calls);
    ASSERT(out == NULL && len == 0);
  }
  free(plain), free(hooked);
  return never.calls;
}

/* The same for a decode of buf: the pixels of a decode without a hook. */
static long expect_decode_stops(const uint8_t *buf, size_t len, long min_calls, const char *what) {
  struct codec_image plain, hooked;
  struct stopper never = {0, 0};
  ASSERT_INT(decode_with(buf, len, NULL, &plain), ==, CODEC_OK);
  ASSERT_INT(decode_with(buf, len, &never, &hooked), ==, CODEC_OK);
  if (!same_image(&plain, &hooked))
    TEST_FAIL("%s: other pixels with a hook that never stops", what);
  if (never.calls < min_calls) TEST_FAIL("%s: the hook asked %ld times", what, never.calls);
  long at[3] = {1, never.calls / 2 > 1 ? never.calls / 2 : 1, never.calls};
  for (int i = 0; i < 3; i++) {
    struct stopper s = {at[i], 0};
    struct codec_image img;
    if (decode_with(buf, len, &s, &img) != CODEC_CANCELLED)
      TEST_FAIL("%s: not stopped at call %ld of %ld", what, at[i], never.calls);
    ASSERT(img.pixels == NULL);
  }
  codec_image_free(&plain), codec_image_free(&hooked);
  return never.calls;
}

/* tjCompress2's file of img (8-bit gray or RGB) at quality, as jpeg.c's encoder once was. */
static uint8_t *turbojpeg_file(const struct codec_image *img, int quality, size_t *len) {
  tjhandle tj = tjInitCompress();
  unsigned char *jpeg = NULL;
  unsigned long n = 0;
  int samp = img->channels == 1                  ? TJSAMP_GRAY
             : quality >= CODEC_JPEG_FULL_CHROMA ? TJSAMP_444
                                                 : TJSAMP_420;
  ASSERT(tj != NULL);
  ASSERT_INT(tjCompress2(tj, img->pixels, img->width, 0, img->height,
                         img->channels == 1 ? TJPF_GRAY : TJPF_RGB, &jpeg, &n, samp, quality, 0),
             ==, 0);
  uint8_t *copy = malloc(n);
  memcpy(copy, jpeg, n);
  tjFree(jpeg);
  tjDestroy(tj);
  *len = n;
  return copy;
}

/* The top-left w x h of img, a copy. */
static struct codec_image corner(const struct codec_image *img, int w, int h) {
  size_t px = (size_t)img->channels * (size_t)(img->depth / 8), row = (size_t)w * px;
  struct codec_image c = *img;
  c.width = w, c.height = h;
  c.pixels = malloc(row * (size_t)h);
  for (int y = 0; y < h; y++)
    memcpy(c.pixels + (size_t)y * row, img->pixels + (size_t)y * (size_t)img->width * px, row);
  return c;
}

/* libjpeg's compressor fed ENCODE_ROWS rows at a time with a progress monitor writes tjCompress2's
 * bytes, for gray and RGB, 4:2:0 and 4:4:4, both DCTs, odd sizes; it stops when the hook says so,
 * which it asks every 16 rows. */
static void test_cancel_jpeg_encode(void) {
  struct codec_image gray = corner(&camera, 511, 301), rgb = corner(&astronaut, 509, 257);
  static const int qualities[] = {1, 50, 89, 90, 95, 96, 100};
  for (int i = 0; i < 2; i++) {
    const struct codec_image *img = i ? &rgb : &gray;
    for (size_t q = 0; q < sizeof qualities / sizeof qualities[0]; q++) {
      struct codec_encode_opts o = {.format = CODEC_JPEG, .quality = qualities[q]};
      uint8_t *mine;
      size_t mine_len, tj_len;
      uint8_t *tj = turbojpeg_file(img, qualities[q], &tj_len);
      ASSERT_INT(encode_with(img, &o, NULL, &mine, &mine_len), ==, CODEC_OK);
      if (mine_len != tj_len || memcmp(mine, tj, tj_len) != 0)
        TEST_FAIL("%s at quality %d: %zu bytes, tjCompress2 %zu", i ? "RGB" : "gray", qualities[q],
                  mine_len, tj_len);
      free(mine), free(tj);
      expect_encode_stops(img, &o, img->height / 16, "JPEG encode");
    }
  }
  struct codec_encode_opts o = {.format = CODEC_JPEG, .quality = 90};
  struct codec_image rgba16 = load("rgba16.png"); /* codec_to_8bit first, asked every row */
  expect_encode_stops(&rgba16, &o, rgba16.height, "JPEG encode of 16-bit RGBA");
  codec_image_free(&rgba16), codec_image_free(&gray), codec_image_free(&rgb);
}

/* The JPEG decoder asks the hook every row it hands out (and, for a progressive file, every MCU
 * row it absorbs), as do the CMYK conversion and the turn upright. */
static void test_cancel_jpeg_decode(void) {
  static const char *files[] = {"photo_1080p.jpg", "progressive.jpg", "cmyk.jpg", "orient6.jpg"};
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    size_t len;
    uint8_t *buf = fixture_bytes(files[f], &len);
    struct codec_jpeg_info info;
    ASSERT_INT(codec_jpeg_probe(buf, len, NULL, &info, NULL, 0), ==, CODEC_OK);
    long calls = expect_decode_stops(buf, len, info.height, files[f]);
    /* and again each row of the conversion, or of the turn upright */
    if (strcmp(files[f], "cmyk.jpg") == 0 || strcmp(files[f], "orient6.jpg") == 0)
      ASSERT_INT(calls, >=, info.height + (info.orientation >= 5 ? info.width : info.height));
    free(buf);
  }
}

/* A computation that would take seconds, stopped by the hook within milliseconds of it saying
 * so (on a thread cancelled where it stands); small or without a hook it runs on the caller's
 * thread to the end. */
struct spin {
  uint64_t rounds, x;
};

static void spin_run(void *arg) {
  struct spin *s = arg;
  uint64_t x = s->x;
  for (uint64_t i = 0; i < s->rounds; i++) x = x * 6364136223846793005u + 1442695040888963407u;
  s->x = x;
}

static int past_time(void *arg) {
  return now_s() >= *(const double *)arg;
}

static void test_cancel_stoppable(void) {
  struct spin s = {4000000000u, 1}; /* seconds of multiplies */
  double at = now_s() + 0.05, t0 = now_s();
  struct codec_cancel hook = {past_time, &at};
  codec_cancel_set(&hook);
  ASSERT_INT(codec_run_stoppable(spin_run, &s, CODEC_STOP_THREAD_BYTES), ==, CODEC_CANCELLED);
  double took = now_s() - t0;
  fprintf(stderr, "    stopped after %.3f s (the hook said stop at 0.050 s)\n", took);
  ASSERT_DBL(took, <, 0.5);
  struct spin small = {1000, 1}, threaded = {1000, 1};
  at = now_s() + 100;
  ASSERT_INT(codec_run_stoppable(spin_run, &small, 100), ==, CODEC_OK);
  ASSERT_INT(codec_run_stoppable(spin_run, &threaded, CODEC_STOP_THREAD_BYTES), ==, CODEC_OK);
  ASSERT(small.x != 1 && small.x == threaded.x);
  at = 0; /* said stop already: the small one does not start */
  small.x = 1;
  ASSERT_INT(codec_run_stoppable(spin_run, &small, 100), ==, CODEC_CANCELLED);
  ASSERT(small.x == 1);
  codec_cancel_set(NULL);
  ASSERT_INT(codec_run_stoppable(spin_run, &small, CODEC_STOP_THREAD_BYTES), ==, CODEC_OK);
  ASSERT(small.x == threaded.x);
}

/* Child processes: the output comes back through the pipe with the exit status; one that would
 * run for seconds is killed within milliseconds of the hook saying stop; one asleep on a lock
 * another thread held at the fork is found stuck and its work left to the caller. */
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;

static int child_writes(void *arg, int fd) {
  const char *text = arg;
  return codec_write_all(fd, text, strlen(text)) == 0 ? 7 : 1;
}

static int child_spins(void *arg, int fd) {
  struct spin *s = arg;
  (void)fd;
  spin_run(s);
  return (int)(s->x & 1);
}

static int child_locks(void *arg, int fd) {
  (void)arg, (void)fd;
  pthread_mutex_lock(&held); /* locked in the parent when it forked: never given */
  return 0;
}

static int child_dies(void *arg, int fd) {
  (void)arg, (void)fd;
  raise(SIGUSR1);
  return 0;
}

static void test_cancel_child(void) {
  struct codec_buf out = {NULL, 0, 0};
  double at = now_s() + 100;
  int status = -1;
  struct codec_cancel hook = {past_time, &at};
  char text[] = "a file, as a child writes it";
  ASSERT_INT(codec_run_child(child_writes, text, &out, &status), ==,
             CODEC_UNSUPPORTED); /* no hook */
  codec_cancel_set(&hook);
  ASSERT_INT(codec_run_child(child_writes, text, &out, &status), ==, CODEC_OK);
  ASSERT_INT(status, ==, 7);
  ASSERT(out.len == strlen(text) && memcmp(out.data, text, out.len) == 0);
  ASSERT_INT(codec_run_child(child_dies, NULL, &out, &status), ==, CODEC_OK);
  ASSERT_INT(status, ==, 128 + SIGUSR1);
  struct spin s = {4000000000u, 1};
  double t0 = now_s();
  at = t0 + 0.05;
  ASSERT_INT(codec_run_child(child_spins, &s, &out, &status), ==, CODEC_CANCELLED);
  double took = now_s() - t0;
  ASSERT(out.len == strlen(text)); /* what was there stays */
  fprintf(stderr, "    child killed after %.3f s (the hook said stop at 0.050 s)\n", took);
  ASSERT_DBL(took, <, 0.5);
  at = now_s() + 100;
  pthread_mutex_lock(&held);
  t0 = now_s();
  ASSERT_INT(codec_run_child(child_locks, NULL, &out, &status), ==, CODEC_UNSUPPORTED);
  took = now_s() - t0;
  pthread_mutex_unlock(&held);
  fprintf(stderr, "    a child asleep on an inherited lock given up after %.3f s\n", took);
  ASSERT_DBL(took, <, 5);
  codec_cancel_set(NULL);
  free(out.data);
}

/* The 8-bit conversion, the turn upright, the CMYK conversion and the sRGB conversion ask the
 * hook every row. */
static void test_cancel_conversions(void) {
  struct codec_image img = load("rgba16.png");
  struct stopper s = {2, 0};
  struct codec_cancel hook = {stop_at, &s};
  uint8_t *out = (uint8_t *)&s;
  int ch = -1;
  codec_cancel_set(&hook);
  ASSERT_INT(codec_to_8bit(&img, 3, 1, &out, &ch), ==, CODEC_CANCELLED);
  ASSERT(out == NULL);
  s = (struct stopper){0, 0};
  ASSERT_INT(codec_to_8bit(&img, 3, 1, &out, &ch), ==, CODEC_OK);
  ASSERT_INT(s.calls, ==, img.height);
  free(out);
  s = (struct stopper){3, 0};
  uint8_t *before = img.pixels;
  ASSERT_INT(codec_orient(&img, 6), ==, CODEC_CANCELLED);
  ASSERT(img.pixels == before);
  s = (struct stopper){3, 0};
  uint8_t cmyk[4 * 8 * 8];
  memset(cmyk, 100, sizeof cmyk);
  ASSERT_INT(codec_cmyk_to_rgb(cmyk, 8, 8, 1, NULL, 0), ==, CODEC_CANCELLED);
  size_t plen;
  uint8_t *p3 = fixture_bytes("display_p3.icc", &plen);
  struct codec_image rgb = corner(&astronaut, 64, 64);
  s = (struct stopper){3, 0};
  ASSERT_INT(codec_to_srgb(&rgb, p3, plen), ==, -1);
  s = (struct stopper){0, 0};
  ASSERT_INT(codec_to_srgb(&rgb, p3, plen), ==, 1);
  ASSERT_INT(s.calls, ==, 64);
  codec_cancel_set(NULL);
  free(p3);
  codec_image_free(&rgb), codec_image_free(&img);
}

/* ---- how soon a stopped codec returns (BLURD_STOP_BENCH) ----
 * Not a test: with BLURD_STOP_BENCH=SIDE, each decoder and encoder on a SIDE x SIDE image at its
 * slowest settings, under a hook that says stop from a given moment on. Printed: the longest
 * interval between the hook's questions before that moment, how long after it the call returned
 * (the worker is free), and the process's CPU time in the 200 ms after (threads or children left
 * running would show there). docs/engineering-notes.md, "Every stage stops at the deadline". */

struct clock_hook { /* says stop from `at` (now_s()) on; notes the longest interval between asks */
  pthread_mutex_t mu;
  double at, last, gap;
  long calls;
};

static int clock_stop(void *arg) {
  struct clock_hook *h = arg;
  double t = now_s();
  pthread_mutex_lock(&h->mu);
  if (t < h->at && t - h->last > h->gap) h->gap = t - h->last;
  if (t < h->at) h->last = t;
  h->calls++;
  pthread_mutex_unlock(&h->mu);
  return t >= h->at;
}

static double process_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pool_for(void *pool, int n, void (*fn)(void *arg, int begin, int end), void *arg) {
  cpu_parallel_for(pool, n, fn, arg);
}

/* One line of the table: img encoded with o (or, when img is NULL, buf decoded), stopped after
 * delay seconds. */
static void bench_stop(const char *what, const struct codec_image *img,
                       const struct codec_encode_opts *o, const uint8_t *buf, size_t len,
                       double delay) {
  struct clock_hook h = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0};
  struct codec_cancel hook = {clock_stop, &h};
  struct codec_image out = {0};
  uint8_t *file = NULL;
  size_t n = 0;
  h.last = now_s(), h.at = h.last + delay;
  codec_cancel_set(&hook);
  enum codec_status st =
      img ? codec_encode(img, o, &file, &n, NULL, 0) : codec_decode(buf, len, NULL, &out, NULL, 0);
  double back = now_s(), cpu0 = process_cpu_s();
  codec_cancel_set(NULL);
  usleep(200000);
  double cpu = process_cpu_s() - cpu0;
  fprintf(stderr,
          "    %-46s %s: asked %6ld times, at most %6.1f ms apart; free %6.1f ms after; "
          "%5.1f ms of CPU in the 200 ms after\n",
          what, st == CODEC_CANCELLED ? "stopped" : "FINISHED", h.calls, h.gap * 1e3,
          (back - h.at) * 1e3, cpu * 1e3);
  free(file);
  codec_image_free(&out);
}

/* side x side pixels of channels 8-bit samples: noise over gradients (smooth: gradients). */
static struct codec_image bench_image(int side, int channels, int smooth) {
  struct codec_image img = {
      malloc((size_t)side * side * channels), side, side, channels, 8, CODEC_PNG, 1};
  ASSERT(img.pixels != NULL);
  for (int y = 0; y < side; y++)
    for (int x = 0; x < side; x++)
      for (int c = 0; c < channels; c++) {
        unsigned noise = ((unsigned)(x * 7919 + y * 104729 + c * 31) * 2654435761u) >> 26;
        img.pixels[((size_t)y * side + x) * channels + c] =
            (uint8_t)((x * (c + 1) + y * (3 - c)) / (smooth ? 24 : 16) + (smooth ? 0 : noise));
      }
  return img;
}

static uint8_t *bench_file(const struct codec_image *img, struct codec_encode_opts o, size_t *len) {
  uint8_t *file;
  ASSERT_INT(codec_encode(img, &o, &file, len, NULL, 0), ==, CODEC_OK);
  return file;
}

struct mem_file { /* libpng's output in memory */
  uint8_t *p;
  size_t len, cap;
};

static void mem_write(png_structp png, png_bytep data, size_t n) {
  struct mem_file *m = png_get_io_ptr(png);
  if (m->len + n > m->cap) m->cap = 2 * (m->len + n), m->p = realloc(m->p, m->cap);
  ASSERT(m->p != NULL);
  memcpy(m->p + m->len, data, n);
  m->len += n;
}

/* img (8-bit RGBA) as an interlaced PNG, zlib level 1, written by libpng. */
static uint8_t *interlaced_file(const struct codec_image *img, size_t *len) {
  struct mem_file m = {NULL, 0, 0};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  ASSERT(png && info && !setjmp(png_jmpbuf(png)));
  png_set_write_fn(png, &m, mem_write, NULL);
  png_set_compression_level(png, 1);
  png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8,
               PNG_COLOR_TYPE_RGB_ALPHA, PNG_INTERLACE_ADAM7, 0, 0);
  png_write_info(png, info);
  for (int pass = png_set_interlace_handling(png); pass > 0; pass--)
    for (int y = 0; y < img->height; y++)
      png_write_row(png, img->pixels + (size_t)y * img->width * 4);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  *len = m.len;
  return m.p;
}

/* img (8-bit RGB) as a progressive JPEG at quality 100, by TurboJPEG. */
static uint8_t *progressive_file(const struct codec_image *img, size_t *len) {
  tjhandle tj = tjInitCompress();
  unsigned char *jpeg = NULL;
  unsigned long n = 0;
  ASSERT_INT(tjCompress2(tj, img->pixels, img->width, 0, img->height, TJPF_RGB, &jpeg, &n,
                         TJSAMP_444, 100, TJFLAG_PROGRESSIVE),
             ==, 0);
  uint8_t *copy = malloc(n);
  memcpy(copy, jpeg, n);
  tjFree(jpeg), tjDestroy(tj);
  *len = n;
  return copy;
}

/* libwebp's progress hook alone, as libwebp calls it (the longest interval between calls, the
 * encode's time): why a long encode runs in a child process. */
static double webp_last, webp_gap;

static int webp_progress(int percent, const WebPPicture *pic) {
  double t = now_s();
  (void)percent, (void)pic;
  if (t - webp_last > webp_gap) webp_gap = t - webp_last;
  webp_last = t;
  return 1;
}

static int webp_discard(const uint8_t *data, size_t n, const WebPPicture *pic) {
  (void)data, (void)n, (void)pic;
  return 1;
}

static void bench_webp_progress(const char *what, const struct codec_image *img, int lossless,
                                int method) {
  WebPConfig config;
  WebPPicture pic;
  ASSERT(WebPConfigInit(&config) && WebPPictureInit(&pic));
  if (lossless) ASSERT(WebPConfigLosslessPreset(&config, 2));
  if (!lossless) ASSERT(WebPConfigPreset(&config, WEBP_PRESET_DEFAULT, 100));
  if (!lossless) config.method = method;
  pic.use_argb = lossless, pic.width = img->width, pic.height = img->height;
  pic.writer = webp_discard, pic.progress_hook = webp_progress;
  int stride = img->width * img->channels;
  ASSERT(img->channels == 4 ? WebPPictureImportRGBA(&pic, img->pixels, stride)
                            : WebPPictureImportRGB(&pic, img->pixels, stride));
  double t0 = webp_last = now_s();
  webp_gap = 0;
  ASSERT(WebPEncode(&config, &pic));
  webp_progress(100, &pic); /* to the end */
  double took = now_s() - t0;
  fprintf(
      stderr,
      "    %-46s libwebp's progress hook at most %7.1f ms apart in %7.1f ms (%5.0f ns a pixel)\n",
      what, webp_gap * 1e3, took * 1e3, took * 1e9 / ((double)img->width * img->height));
  WebPPictureFree(&pic);
}

static void bench_stop_latency(int side) {
  struct codec_image rgba = bench_image(side, 4, 0), rgb = bench_image(side, 3, 0),
                     smooth = bench_image(side, 3, 1);
  struct cpu_pool *pool = cpu_pool_new(2);
  struct codec_encode_opts png9 = {.format = CODEC_PNG, .compression = 9},
                           rle = {.format = CODEC_PNG, .compression = 2},
                           rle_par = {.format = CODEC_PNG, .compression = 2},
                           libpng = {.format = CODEC_PNG, .compression = 9, .png_libpng = 1},
                           jpeg = {.format = CODEC_JPEG, .quality = 100},
                           effort6 = {.format = CODEC_WEBP,
                                      .quality = 100,
                                      .effort = 6,
                                      .effort_set = 1},
                           lossless = {.format = CODEC_WEBP, .lossless = 1},
                           vp8 = {.format = CODEC_WEBP, .quality = 100};
  rle_par.parallel = pool_for, rle_par.parallel_ctx = pool;
  struct codec_image small_rgba = bench_image(1000, 4, 0), small_rgb = bench_image(1000, 3, 0);
  fprintf(stderr, "  1000x1000, noise over gradients, quality 100 (webp.c's rates: twice these)\n");
  for (int effort = 0; effort <= 6; effort++)
    for (int c = 3; c <= 4; c++) {
      char what[64];
      snprintf(what, sizeof(what), "lossy WebP, effort %d, %s", effort, c == 4 ? "RGBA" : "RGB");
      bench_webp_progress(what, c == 4 ? &small_rgba : &small_rgb, 0, effort);
    }
  bench_webp_progress("lossless WebP, RGB", &small_rgb, 1, 0);
  bench_webp_progress("lossless WebP, RGBA", &small_rgba, 1, 0);
  codec_image_free(&small_rgba), codec_image_free(&small_rgb);
  fprintf(stderr, "  %dx%d, noise over gradients (RGBA unless said)\n", side, side);
  bench_stop("PNG level 9, libdeflate", &rgba, &png9, NULL, 0, 2.0);
  bench_stop("PNG level 2, run-length coder", &rgba, &rle, NULL, 0, 0.05);
  bench_stop("PNG level 2, run-length coder, 2 threads", &rgba, &rle_par, NULL, 0, 0.2);
  bench_stop("PNG level 9, libpng and zlib", &rgba, &libpng, NULL, 0, 1.0);
  bench_stop("JPEG quality 100, RGB", &rgb, &jpeg, NULL, 0, 0.3);
  bench_stop("JPEG quality 100, RGBA (8-bit copy first)", &rgba, &jpeg, NULL, 0, 0.05);
  bench_stop("lossy WebP, libwebp effort 6, quality 100", &rgba, &effort6, NULL, 0, 1.0);
  bench_stop("lossless WebP, libwebp", &rgba, &lossless, NULL, 0, 1.0);
  bench_stop("lossy WebP, blurd's VP8 (smooth RGB)", &smooth, &vp8, NULL, 0, 0.2);
  size_t len;
  uint8_t *f = bench_file(&rgba, rle, &len);
  bench_stop("decode: PNG, own path (inflate on a thread)", NULL, NULL, f, len, 0.05);
  bench_stop("decode: PNG, own path (unfiltering)", NULL, NULL, f, len, 0.25);
  free(f);
  f = interlaced_file(&rgba, &len);
  bench_stop("decode: interlaced PNG, libpng", NULL, NULL, f, len, 0.5);
  free(f);
  f = bench_file(&rgb, jpeg, &len);
  bench_stop("decode: JPEG quality 100, RGB", NULL, NULL, f, len, 0.2);
  free(f);
  f = progressive_file(&rgb, &len);
  bench_stop("decode: progressive JPEG, RGB", NULL, NULL, f, len, 0.5);
  free(f);
  f = bench_file(&rgba, effort6, &len);
  bench_stop("decode: lossy WebP", NULL, NULL, f, len, 0.2);
  free(f);
  f = bench_file(&rgba, lossless, &len);
  bench_stop("decode: lossless WebP", NULL, NULL, f, len, 0.2);
  free(f);
  cpu_pool_free(pool);
  codec_image_free(&rgba), codec_image_free(&rgb), codec_image_free(&smooth);
}

/* ---- what the hooks cost when nothing stops (BLURD_STOP_COST) ----
 * Not a test: with BLURD_STOP_COST=N, each codec N times on the 1080p photograph (RGBA: with an
 * alpha ramp) without a hook and with one that never says stop, alternated; printed: the median
 * CPU time (the process's and its children's) and wall time of each. */

static double cpu_with_children_s(void) {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec +
                  kids.ru_stime.tv_sec) +
         (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec +
                  kids.ru_stime.tv_usec) /
             1e6;
}

static int never_stop(void *arg) {
  (void)arg;
  return 0;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void cost_line(const char *what, const struct codec_image *img,
                      const struct codec_encode_opts *o, const uint8_t *buf, size_t len, int n) {
  double cpu[2][64], wall[2][64];
  struct codec_cancel hook = {never_stop, NULL};
  n = n > 64 ? 64 : n;
  for (int i = 0; i < n; i++)
    for (int h = 0; h < 2; h++) {
      struct codec_image out = {0};
      uint8_t *file = NULL;
      size_t flen = 0;
      codec_cancel_set(h ? &hook : NULL);
      double c0 = cpu_with_children_s(), t0 = now_s();
      enum codec_status st = img ? codec_encode(img, o, &file, &flen, NULL, 0)
                                 : codec_decode(buf, len, NULL, &out, NULL, 0);
      wall[h][i] = now_s() - t0, cpu[h][i] = cpu_with_children_s() - c0;
      codec_cancel_set(NULL);
      ASSERT_INT(st, ==, CODEC_OK);
      free(file);
      codec_image_free(&out);
    }
  for (int h = 0; h < 2; h++) qsort(cpu[h], (size_t)n, sizeof(double), cmp_dbl);
  for (int h = 0; h < 2; h++) qsort(wall[h], (size_t)n, sizeof(double), cmp_dbl);
  fprintf(stderr,
          "    %-40s no hook %7.2f ms CPU, %7.2f ms wall; hook %7.2f ms CPU, %7.2f ms wall\n", what,
          cpu[0][n / 2] * 1e3, wall[0][n / 2] * 1e3, cpu[1][n / 2] * 1e3, wall[1][n / 2] * 1e3);
}

static void hook_cost(int n) {
  struct codec_image rgb = load("photo_1080p.jpg"), rgba = {0};
  size_t px = (size_t)rgb.width * rgb.height;
  rgba = (struct codec_image){malloc(px * 4), rgb.width, rgb.height, 4, 8, CODEC_PNG, 1};
  for (size_t i = 0; i < px; i++) {
    memcpy(rgba.pixels + 4 * i, rgb.pixels + 3 * i, 3);
    rgba.pixels[4 * i + 3] = (uint8_t)(i % rgb.width / 8);
  }
  struct codec_encode_opts png6 = {.format = CODEC_PNG, .compression = 6},
                           png2 = {.format = CODEC_PNG, .compression = 2},
                           jpeg = {.format = CODEC_JPEG, .quality = 90},
                           webp = {.format = CODEC_WEBP, .quality = 90},
                           lossless = {.format = CODEC_WEBP, .lossless = 1};
  fprintf(stderr, "  photo_1080p.jpg (1920x1080), medians of %d\n", n);
  cost_line("PNG level 6 (libdeflate on a thread)", &rgb, &png6, NULL, 0, n);
  cost_line("PNG level 2 (run-length coder)", &rgb, &png2, NULL, 0, n);
  cost_line("JPEG quality 90", &rgb, &jpeg, NULL, 0, n);
  double tj[64];
  for (int i = 0; i < n && i < 64; i++) { /* TurboJPEG, as the encoder was */
    size_t len;
    double c0 = cpu_with_children_s();
    free(turbojpeg_file(&rgb, 90, &len));
    tj[i] = cpu_with_children_s() - c0;
  }
  qsort(tj, (size_t)(n < 64 ? n : 64), sizeof(double), cmp_dbl);
  fprintf(stderr, "    %-40s %7.2f ms CPU\n", "JPEG quality 90 by tjCompress2",
          tj[(n < 64 ? n : 64) / 2] * 1e3);
  cost_line("WebP effort 2, RGB (libwebp, in a child)", &rgb, &webp, NULL, 0, n);
  cost_line("WebP effort 2, RGBA (libwebp, in a child)", &rgba, &webp, NULL, 0, n);
  cost_line("lossless WebP, RGB (in a child)", &rgb, &lossless, NULL, 0, n);
  size_t len;
  uint8_t *f = bench_file(&rgb, png2, &len);
  cost_line("decode: PNG (inflate on a thread)", NULL, NULL, f, len, n);
  free(f);
  f = bench_file(&rgb, jpeg, &len);
  cost_line("decode: JPEG", NULL, NULL, f, len, n);
  free(f);
  f = bench_file(&rgb, webp, &len);
  cost_line("decode: lossy WebP (incremental)", NULL, NULL, f, len, n);
  free(f);
  f = bench_file(&rgb, lossless, &len);
  cost_line("decode: lossless WebP (incremental)", NULL, NULL, f, len, n);
  free(f);
  codec_image_free(&rgb), codec_image_free(&rgba);
}

int main(void) {
  if (getenv("BLURD_STOP_BENCH")) { /* not a test: see bench_stop_latency */
    bench_stop_latency(atoi(getenv("BLURD_STOP_BENCH")));
    return 0;
  }
  if (getenv("BLURD_STOP_COST")) { /* not a test: see hook_cost */
    hook_cost(atoi(getenv("BLURD_STOP_COST")));
    return 0;
  }
  camera = load("camera.png");
  astronaut = load("astronaut.png");
  coffee = load("coffee.png");
  chelsea = load("chelsea.png");
  RUN(test_sniff_and_names);
  RUN(test_decode_png_fixtures);
  RUN(test_png_round_trip);
  RUN(test_png_compression_levels);
  RUN(test_png_16bit_byte_order);
  RUN(test_decode_jpeg);
  RUN(test_exif_orientations);
  RUN(test_orient_mapping);
  RUN(test_limits);
  RUN(test_limits_huge_png_header);
  RUN(test_check_size);
  RUN(test_truncated);
  RUN(test_garbage_and_unknown);
  RUN(test_damaged_files);
  RUN(test_cmyk);
  RUN(test_jpeg_scan_limit);
  RUN(test_jpeg_memory_cap);
  RUN(test_jpeg_corrupt_data);
  RUN(test_jpeg_unsupported);
  RUN(test_jpeg_probe);
  RUN(test_alloc_failures_decode);
  RUN(test_alloc_failures_encode);
  RUN(test_jpeg_encode_flat);
  RUN(test_jpeg_encode_red_square);
  RUN(test_jpeg_encode_alpha16);
  RUN(test_jpeg_encode_quality);
  RUN(test_encode_bad_arguments);
  RUN(test_webp_decode);
  RUN(test_webp_lossless_round_trip);
  RUN(test_webp_lossy);
  RUN(test_webp_encode_flat16);
  RUN(test_webp_refused);
  RUN(test_exif_parser);
  RUN(test_exif_in_jpeg);
  RUN(test_exif_damaged_jpeg);
  RUN(test_cancel_jpeg_encode);
  RUN(test_cancel_jpeg_decode);
  RUN(test_cancel_stoppable);
  RUN(test_cancel_child);
  RUN(test_cancel_conversions);
  codec_image_free(&camera);
  codec_image_free(&astronaut);
  codec_image_free(&coffee);
  codec_image_free(&chelsea);
  fprintf(stderr, "unit_codecs: all tests passed\n");
  return 0;
}

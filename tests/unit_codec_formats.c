/* unit_codec_formats: the HEIC, AVIF, JPEG XL, TIFF and GIF codecs (formats/heif.c, jxl.c,
 * tiff.c, gif.c) through their own entry points, on the files tests/data/make-formats.sh made
 * with Debian's encoders.
 *
 * Each decoder's pixels are compared with what an independent decoder gave for the same file
 * (stored beside it: a PNG, or a NAME.ref line with the samples' CRC-32 for the larger ones):
 * exactly where the decoder is the same library (heif-convert for HEIC and AVIF, djxl for JPEG
 * XL), exactly against the source for lossless files, within 1 level against libtiff and Pillow.
 * Then for every file: the probe agrees with the decode, a limit one pixel short is
 * CODEC_TOO_LARGE with a sentence (before the pixel buffer: an allocation that fails from the
 * first one on does not change it where the decoder's first allocation is the image), the file
 * cut short is CODEC_CORRUPT with a sentence, and the cancellation hook stops the decode at its
 * first call, half way and at its last. The transforms and alpha are checked on pixels (marker
 * corners, the alpha ramp), the colour profiles through Little CMS. The AVIF and JPEG XL
 * encoders: their files decode, with blurd's decoder and with avifdec or libjxl's own API, to at
 * least the PSNR their quality gives on the 1080p photograph (docs/engineering-notes.md, "New
 * formats' codecs"), lossless JPEG XL to every sample; they stop when the hook says so. HEIC's
 * pictures verb (the GPU's video decoders' input) gives each picture's stream and place, and the
 * reason for what it leaves to the CPU. */
#include "test.h"

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"
#include "fixtures.h"

#include <jxl/decode.h>
#include <lcms2.h>
#include <stdatomic.h>
#include <unistd.h>
#include <zlib.h>

/* ---- the decoders under test, and their files ---- */

struct file {
  const char *name;
  const struct codec_format_desc *f;
  int first_alloc_is_image; /* the decoder's first codec_malloc is the pixel buffer */
};

static const struct file files[] = {
    {"heic_grid_rot.heic", &codec_heic_format, 1}, {"heic_transform.heic", &codec_heic_format, 1},
    {"heic_icc.heic", &codec_heic_format, 1},      {"avif10_alpha.avif", &codec_avif_format, 1},
    {"avif8_p3.avif", &codec_avif_format, 1},      {"jxl_p3_lossless.jxl", &codec_jxl_format, 0},
    {"jxl_rgb16.jxl", &codec_jxl_format, 0},       {"jxl_gray_alpha.jxl", &codec_jxl_format, 0},
    {"jxl_lossy.jxl", &codec_jxl_format, 0},       {"jxl_float.jxl", &codec_jxl_format, 0},
    {"jxl_orient6.jxl", &codec_jxl_format, 0},     {"tiff_tiled16.tif", &codec_tiff_format, 1},
    {"tiff_palette.tif", &codec_tiff_format, 1},   {"tiff_orient6.tif", &codec_tiff_format, 1},
    {"tiff_assoc.tif", &codec_tiff_format, 1},     {"tiff_cmyk.tif", &codec_tiff_format, 1},
    {"tiff_jpeg.tif", &codec_tiff_format, 1},      {"tiff_bilevel.tif", &codec_tiff_format, 1},
    {"gif_transparent.gif", &codec_gif_format, 1}, {"gif_interlaced.gif", &codec_gif_format, 1},
};

#define NFILES (sizeof files / sizeof files[0])

/* Decodes tests/data/name with f, no limits; fails the test on any failure. */
static struct codec_image decode(const char *name, const struct codec_format_desc *f) {
  size_t len;
  uint8_t *buf = fixture_bytes(name, &len);
  struct codec_image img;
  char msg[256] = "";
  ASSERT(f->sniff(buf, len));
  enum codec_status st = f->decode(buf, len, NULL, &img, msg, sizeof msg);
  if (st != CODEC_OK) TEST_FAIL("%s: status %d: %s", name, (int)st, msg);
  free(buf);
  return img;
}

static unsigned sample(const struct codec_image *img, int x, int y, int c) {
  size_t i = ((size_t)y * (size_t)img->width + (size_t)x) * (size_t)img->channels + (size_t)c;
  if (img->depth == 8) return img->pixels[i];
  uint16_t v;
  memcpy(&v, img->pixels + 2 * i, 2);
  return v;
}

/* The largest difference between two images' samples, after checking they have the same
 * shape. */
static unsigned max_diff(const struct codec_image *a, const struct codec_image *b) {
  ASSERT_INT(a->width, ==, b->width);
  ASSERT_INT(a->height, ==, b->height);
  ASSERT_INT(a->channels, ==, b->channels);
  ASSERT_INT(a->depth, ==, b->depth);
  unsigned worst = 0;
  for (int y = 0; y < a->height; y++)
    for (int x = 0; x < a->width; x++)
      for (int c = 0; c < a->channels; c++) {
        unsigned p = sample(a, x, y, c), q = sample(b, x, y, c), d = p > q ? p - q : q - p;
        worst = d > worst ? d : worst;
      }
  return worst;
}

/* The CRC-32 of img's samples, row by row, 16-bit samples little-endian. */
static uint32_t samples_crc(const struct codec_image *img) {
  size_t n = (size_t)img->width * img->height * img->channels;
  uLong crc = crc32(0, NULL, 0);
  if (img->depth == 8) return (uint32_t)crc32(crc, img->pixels, (uInt)n);
  for (size_t i = 0; i < n; i++) {
    uint16_t v;
    memcpy(&v, img->pixels + 2 * i, 2);
    uint8_t le[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    crc = crc32(crc, le, 2);
  }
  return (uint32_t)crc;
}

/* img against the reference line tests/data/NAME.ref (NAME: name without its extension). */
static void expect_ref(const char *name, const struct codec_image *img) {
  char ref[256];
  size_t len;
  snprintf(ref, sizeof ref, "%.*s.ref", (int)(strrchr(name, '.') - name), name);
  uint8_t *text = fixture_bytes(ref, &len);
  int w, h, ch, depth;
  unsigned crc;
  char line[256];
  snprintf(line, sizeof line, "%.*s", (int)len, (const char *)text);
  free(text);
  if (sscanf(line, "%dx%d %d %d %x", &w, &h, &ch, &depth, &crc) != 5)
    TEST_FAIL("%s: cannot read '%s'", ref, line);
  ASSERT_INT(img->width, ==, w);
  ASSERT_INT(img->height, ==, h);
  ASSERT_INT(img->channels, ==, ch);
  ASSERT_INT(img->depth, ==, depth);
  if (samples_crc(img) != crc)
    TEST_FAIL("%s: the samples' CRC-32 is %08x, the reference decoder's %08x", name,
              samples_crc(img), crc);
}

/* The mean of channel c over the w x h block at (x, y), in 8 bits. */
static double block_mean(const struct codec_image *img, int x0, int y0, int w, int h, int c) {
  double sum = 0;
  for (int y = y0; y < y0 + h; y++)
    for (int x = x0; x < x0 + w; x++)
      sum += img->depth == 8 ? sample(img, x, y, c) : sample(img, x, y, c) / 257.0;
  return sum / (w * h);
}

/* The block is red (want 0) or blue (want 2): that channel high, the others low. */
static void expect_marker(const struct codec_image *img, int x, int y, int size, int want) {
  for (int c = 0; c < 3; c++) {
    double m = block_mean(img, x, y, size, size, c);
    if (c == want ? m < 200 : m > 60)
      TEST_FAIL("block (%d, %d) of %d: channel %d has mean %.1f", x, y, size, c, m);
  }
}

/* ---- colour profiles ---- */

/* The red colorant (the XYZ of full red) of an ICC profile. */
static cmsCIEXYZ red_colorant(const uint8_t *icc, size_t len) {
  cmsHPROFILE p = cmsOpenProfileFromMem(icc, (cmsUInt32Number)len);
  ASSERT(p != NULL);
  const cmsCIEXYZ *r = cmsReadTag(p, cmsSigRedColorantTag);
  ASSERT(r != NULL);
  cmsCIEXYZ v = *r;
  cmsCloseProfile(p);
  return v;
}

/* icc's red colorant within 0.002 of that of reference (same primaries, D50-adapted). */
static void expect_same_primaries(const uint8_t *icc, size_t len, const uint8_t *ref,
                                  size_t ref_len) {
  cmsCIEXYZ a = red_colorant(icc, len), b = red_colorant(ref, ref_len);
  ASSERT_NEAR(a.X, b.X, 0.002);
  ASSERT_NEAR(a.Y, b.Y, 0.002);
  ASSERT_NEAR(a.Z, b.Z, 0.002);
}

/* The ICC profile embedded in PNG fixture name (codec_icc_read). */
static uint8_t *png_icc(const char *name, size_t *len) {
  size_t n;
  uint8_t *buf = fixture_bytes(name, &n), *icc = NULL;
  ASSERT_INT(codec_icc_read(buf, n, &icc, len), ==, CODEC_OK);
  ASSERT(icc != NULL);
  free(buf);
  return icc;
}

static uint8_t *file_icc(const char *name, const struct codec_format_desc *f, size_t *len) {
  size_t n;
  uint8_t *buf = fixture_bytes(name, &n), *icc = NULL;
  ASSERT_INT(f->icc(buf, n, &icc, len), ==, CODEC_OK);
  free(buf);
  return icc;
}

/* ---- HEIC and AVIF ---- */

/* The 1024x768 photograph stored with a red marker at its top-left and a blue one at its
 * top-right, rotated 90 degrees anticlockwise (irot): upright 768x1024, orientation 8, the red
 * marker at the bottom-left and the blue one at the top-left; heif-convert's pixels exactly. */
static void test_heic_grid(void) {
  struct codec_image img = decode("heic_grid_rot.heic", &codec_heic_format);
  expect_ref("heic_grid_rot.heic", &img);
  ASSERT_INT(img.orientation, ==, 8);
  expect_marker(&img, 8, img.height - 56, 48, 0);
  expect_marker(&img, 8, 8, 48, 2);
  codec_image_free(&img);
}

/* irot 270 then imir left-right: a transpose (orientation 5); the red marker (stored top-left)
 * stays at the top-left, the blue one (stored top-right) goes to the bottom-left. */
static void test_heic_transform(void) {
  struct codec_image img = decode("heic_transform.heic", &codec_heic_format);
  expect_ref("heic_transform.heic", &img);
  ASSERT_INT(img.orientation, ==, 5);
  ASSERT_INT(img.width, ==, 192);
  expect_marker(&img, 4, 4, 24, 0);
  expect_marker(&img, 4, img.height - 28, 24, 2);
  codec_image_free(&img);
}

/* heif-enc's own single picture: its pixels, and the Display P3 profile of the PNG it came
 * from, byte for byte. */
static void test_heic_icc(void) {
  struct codec_image img = decode("heic_icc.heic", &codec_heic_format);
  expect_ref("heic_icc.heic", &img);
  size_t n, ref_n;
  uint8_t *icc = file_icc("heic_icc.heic", &codec_heic_format, &n),
          *ref = png_icc("p3.png", &ref_n);
  ASSERT(icc != NULL);
  ASSERT_INT(n, ==, ref_n);
  ASSERT(memcmp(icc, ref, n) == 0);
  free(icc), free(ref), codec_image_free(&img);
}

/* HEIC's pictures verb, which hands the coded pictures to the GPU's video decoders: the rotated
 * 2x2 grid as 4 pictures of 512x512 in row order, each an Annex B stream (a start code, then the
 * VPS, SPS and PPS of its hvcC before its own slice), its upright size the decode's; the
 * transposed picture; and the files it leaves to the CPU's decode, with their reasons: an alpha
 * plane, pictures that share their data, and what is not HEIC. */
static void test_heic_pictures(void) {
  const struct codec_limits lim = {0, 0, 0};
  struct codec_pictures p;
  const char *why = NULL;
  size_t len;
  uint8_t *buf = fixture_bytes("heic_grid_rot.heic", &len);
  ASSERT_INT(codec_heic_format.pictures(buf, len, &lim, &p, &why), ==, CODEC_OK);
  ASSERT(why == NULL);
  ASSERT_INT(p.n, ==, 4);
  ASSERT_INT(p.width, ==, 1024);
  ASSERT_INT(p.height, ==, 768);
  ASSERT_INT(p.tile_w, ==, 512);
  ASSERT_INT(p.tile_h, ==, 512);
  ASSERT_INT(p.bits, ==, 8);
  ASSERT_INT(p.orientation, ==, 8);
  for (int i = 0; i < p.n; i++) {
    const uint8_t *s = p.stream + p.pic[i].off;
    ASSERT_INT(p.pic[i].x, ==, i % 2 * 512);
    ASSERT_INT(p.pic[i].y, ==, i / 2 * 512);
    ASSERT_INT(p.pic[i].off, ==, i ? p.pic[i - 1].off + p.pic[i - 1].len : 0);
    ASSERT(p.pic[i].len > 100 && memcmp(s, "\0\0\0\1", 4) == 0);
    ASSERT_INT((s[4] >> 1) & 63, ==, 32); /* NAL unit type 32: a VPS first */
  }
  codec_pictures_free(&p);
  codec_pictures_free(&p); /* twice: nothing left to free */
  free(buf);
  buf = fixture_bytes("heic_transform.heic", &len);
  ASSERT_INT(codec_heic_format.pictures(buf, len, &lim, &p, &why), ==, CODEC_OK);
  ASSERT_INT(p.n, ==, 1);
  ASSERT_INT(p.orientation, ==, 5);
  ASSERT_INT(p.height, ==, 192); /* stored 256x192, upright 192x256 */
  codec_pictures_free(&p), free(buf);
  buf = fixture_bytes("heic_alpha.heic", &len);
  ASSERT_INT(codec_heic_format.pictures(buf, len, &lim, &p, &why), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(why, "an alpha plane");
  ASSERT(p.stream == NULL && p.pic == NULL && p.n == 0);
  free(buf);
  buf = fixture_bytes("heic_grid_rot.heic", &len);
  ASSERT_INT(codec_heic_format.pictures(buf, len / 2, &lim, &p, &why), !=, CODEC_OK);
  ASSERT(p.stream == NULL && p.n == 0);
  const struct codec_limits small = {512, 512, 0};
  ASSERT_INT(codec_heic_format.pictures(buf, len, &small, &p, &why), ==, CODEC_TOO_LARGE);
  free(buf);
  ASSERT(codec_avif_format.pictures == NULL && codec_jpeg_format.pictures == NULL);
  /* 48 pictures that share one tile's data: their streams would be over 20 times the file's
   * 4 KiB; refused, with the reason, and decoded by the CPU's decoder (every tile the first) */
  buf = fixture_bytes("heic_shared.heic", &len);
  ASSERT_INT(codec_heic_format.pictures(buf, len, &lim, &p, &why), ==, CODEC_UNSUPPORTED);
  ASSERT_STR(why, "pictures that share their data");
  ASSERT(p.stream == NULL && p.n == 0);
  struct codec_image img;
  ASSERT_INT(codec_heic_format.decode(buf, len, &lim, &img, NULL, 0), ==, CODEC_OK);
  ASSERT_INT(img.width, ==, 1024);
  expect_marker(&img, 8, 8, 48, 0);   /* the first tile's red marker, */
  expect_marker(&img, 136, 8, 48, 0); /* and the same in the next tile */
  codec_image_free(&img);
  free(buf);
}

/* 10-bit AVIF with alpha: 16-bit RGBA, heif-convert's samples scaled; the alpha ramp (0 at the
 * top-left, full at the bottom-right) on the pixels; its nclx 1/13/6 as an sRGB profile. */
static void test_avif10_alpha(void) {
  struct codec_image img = decode("avif10_alpha.avif", &codec_avif_format);
  expect_ref("avif10_alpha.avif", &img);
  ASSERT_INT(sample(&img, 0, 0, 3), <=, 64 * 65535 / 1023);
  ASSERT_INT(sample(&img, img.width - 1, img.height - 1, 3), >=, 65535 - 64 * 65535 / 1023);
  double mid = sample(&img, img.width / 2, img.height / 2, 3) / 65535.0;
  ASSERT_NEAR(mid, 0.5, 0.02);
  size_t n;
  uint8_t *icc = file_icc("avif10_alpha.avif", &codec_avif_format, &n);
  ASSERT(icc != NULL && codec_icc_colours(icc, n) == 3);
  cmsHPROFILE srgb = cmsCreate_sRGBProfile();
  cmsUInt32Number srgb_n = 0;
  ASSERT(cmsSaveProfileToMem(srgb, NULL, &srgb_n));
  uint8_t *srgb_icc = malloc(srgb_n);
  ASSERT(cmsSaveProfileToMem(srgb, srgb_icc, &srgb_n));
  expect_same_primaries(icc, n, srgb_icc, srgb_n);
  cmsCloseProfile(srgb);
  free(srgb_icc), free(icc), codec_image_free(&img);
}

/* 8-bit 4:2:0 AVIF tagged nclx 12/13/6: heif-convert's pixels; a profile with Display P3's
 * primaries (as p3.png's, made by Little CMS from the published chromaticities). */
static void test_avif8_p3(void) {
  struct codec_image img = decode("avif8_p3.avif", &codec_avif_format);
  expect_ref("avif8_p3.avif", &img);
  size_t n, ref_n;
  uint8_t *icc = file_icc("avif8_p3.avif", &codec_avif_format, &n),
          *ref = png_icc("p3.png", &ref_n);
  ASSERT(icc != NULL);
  expect_same_primaries(icc, n, ref, ref_n);
  free(icc), free(ref), codec_image_free(&img);
}

/* ---- JPEG XL ---- */

/* Lossless P3: the PNG's samples exactly; the profile of the decoded pixels is the PNG's. */
static void test_jxl_p3(void) {
  struct codec_image img = decode("jxl_p3_lossless.jxl", &codec_jxl_format),
                     src = fixture_photo("p3.png");
  ASSERT_INT(max_diff(&img, &src), ==, 0);
  size_t n, ref_n;
  uint8_t *icc = file_icc("jxl_p3_lossless.jxl", &codec_jxl_format, &n),
          *ref = png_icc("p3.png", &ref_n);
  ASSERT(icc != NULL);
  if (n != ref_n || memcmp(icc, ref, n) != 0) expect_same_primaries(icc, n, ref, ref_n);
  free(icc), free(ref), codec_image_free(&img), codec_image_free(&src);
}

/* Lossless 16-bit RGB and 8-bit gray+alpha: the PNGs' samples exactly, alpha included (its ramp:
 * 0 at the top-left, 255 at the bottom-right). */
static void test_jxl_lossless_files(void) {
  struct codec_image img = decode("jxl_rgb16.jxl", &codec_jxl_format),
                     src = fixture_photo("rgb16.png");
  ASSERT_INT(img.depth, ==, 16);
  ASSERT_INT(max_diff(&img, &src), ==, 0);
  codec_image_free(&img), codec_image_free(&src);
  img = decode("jxl_gray_alpha.jxl", &codec_jxl_format), src = fixture_photo("gray_alpha.png");
  ASSERT_INT(img.channels, ==, 2);
  ASSERT_INT(max_diff(&img, &src), ==, 0);
  ASSERT_INT(sample(&img, 0, 0, 1), ==, 0);
  ASSERT_INT(sample(&img, img.width - 1, img.height - 1, 1), ==, 255);
  codec_image_free(&img), codec_image_free(&src);
}

/* Lossless 32-bit float (chelsea.png's samples / 255): 16-bit samples, v * 257 within one. */
static void test_jxl_float(void) {
  struct codec_image img = decode("jxl_float.jxl", &codec_jxl_format),
                     src = fixture_photo("chelsea.png");
  ASSERT_INT(img.depth, ==, 16);
  ASSERT_INT(img.channels, ==, 3);
  ASSERT_INT(img.width, ==, 64);
  ASSERT_INT(img.height, ==, 48);
  for (int y = 0; y < img.height; y++)
    for (int x = 0; x < img.width; x++)
      for (int c = 0; c < 3; c++)
        ASSERT_NEAR(sample(&img, x, y, c), sample(&src, x, y, c) * 257, 1);
  codec_image_free(&img), codec_image_free(&src);
}

/* Lossy (XYB): djxl's pixels exactly. */
static void test_jxl_lossy(void) {
  struct codec_image img = decode("jxl_lossy.jxl", &codec_jxl_format);
  expect_ref("jxl_lossy.jxl", &img);
  codec_image_free(&img);
}

/* A JPEG recompressed with its EXIF orientation 6: upright 64x48 as djxl gives it, the
 * orientation reported, and within a few levels of orient1.jpg (the same picture stored
 * upright) at each quadrant's centre. */
static void test_jxl_orientation(void) {
  struct codec_image img = decode("jxl_orient6.jxl", &codec_jxl_format),
                     up = fixture_photo("orient1.jpg");
  expect_ref("jxl_orient6.jxl", &img);
  ASSERT_INT(img.orientation, ==, 6);
  for (int q = 0; q < 4; q++)
    for (int c = 0; c < 3; c++) {
      int x = (q & 1) * 32 + 8, y = (q >> 1) * 24 + 6;
      ASSERT_NEAR(block_mean(&img, x, y, 16, 12, c), block_mean(&up, x, y, 16, 12, c), 8);
    }
  codec_image_free(&img), codec_image_free(&up);
}

/* ---- TIFF ---- */

static void test_tiff(void) {
  struct codec_image img = decode("tiff_tiled16.tif", &codec_tiff_format),
                     ref = fixture_photo("rgb16.png");
  ASSERT_INT(max_diff(&img, &ref), ==, 0); /* 16-bit RGB in 32x32 LZW tiles */
  codec_image_free(&img), codec_image_free(&ref);
  img = decode("tiff_palette.tif", &codec_tiff_format), ref = fixture_photo("palette.png");
  ASSERT_INT(max_diff(&img, &ref), ==, 0); /* a palette, to RGB */
  codec_image_free(&img), codec_image_free(&ref);
  img = decode("tiff_orient6.tif", &codec_tiff_format), ref = fixture_photo("tiff_orient6.ref.png");
  ASSERT_INT(max_diff(&img, &ref), ==, 0);
  ASSERT_INT(img.orientation, ==, 6); /* the red marker, stored top-left, now top-right */
  expect_marker(&img, img.width - 28, 4, 24, 0);
  codec_image_free(&img), codec_image_free(&ref);
  img = decode("tiff_cmyk.tif", &codec_tiff_format), ref = fixture_photo("tiff_cmyk.ref.png");
  ASSERT_INT(max_diff(&img, &ref), <=, 1); /* CMYK, as tiff2rgba converts it */
  codec_image_free(&img), codec_image_free(&ref);
  img = decode("tiff_jpeg.tif", &codec_tiff_format), ref = fixture_photo("tiff_jpeg.ref.png");
  ASSERT_INT(max_diff(&img, &ref), <=, 1); /* JPEG-compressed YCbCr, as Pillow reads it */
  codec_image_free(&img), codec_image_free(&ref);
  img = decode("tiff_bilevel.tif", &codec_tiff_format), ref = fixture_photo("tiff_bilevel.ref.png");
  ASSERT_INT(max_diff(&img, &ref), ==, 0); /* 1-bit, to 0 and 255 */
  codec_image_free(&img), codec_image_free(&ref);
}

/* Associated alpha comes back unpremultiplied: alpha exactly, colours within the rounding of a
 * premultiplied sample, 255 / (2 alpha) + 1 levels. */
static void test_tiff_alpha(void) {
  struct codec_image img = decode("tiff_assoc.tif", &codec_tiff_format),
                     ref = fixture_photo("tiff_assoc.ref.png");
  ASSERT_INT(img.channels, ==, 4);
  for (int y = 0; y < img.height; y++)
    for (int x = 0; x < img.width; x++) {
      unsigned a = sample(&ref, x, y, 3);
      ASSERT_INT(sample(&img, x, y, 3), ==, a);
      for (int c = 0; c < 3 && a > 0; c++)
        ASSERT_NEAR(sample(&img, x, y, c), sample(&ref, x, y, c), 255.0 / (2 * a) + 1);
    }
  codec_image_free(&img), codec_image_free(&ref);
}

/* 32-bit floating-point samples are refused with a sentence. */
static void test_tiff_float(void) {
  size_t len;
  uint8_t *buf = fixture_bytes("tiff_float.tif", &len);
  struct codec_image img;
  char msg[256] = "";
  ASSERT_INT(codec_tiff_format.decode(buf, len, NULL, &img, msg, sizeof msg), ==,
             CODEC_UNSUPPORTED);
  ASSERT(img.pixels == NULL && strstr(msg, "floating-point") != NULL);
  free(buf);
}

/* ---- GIF ---- */

/* Transparency is alpha: Pillow's alpha exactly, its colours where opaque, (0, 0, 0, 0) where
 * transparent; an interlaced frame's rows in place, RGB. */
static void test_gif(void) {
  struct codec_image img = decode("gif_transparent.gif", &codec_gif_format),
                     ref = fixture_photo("gif_transparent.ref.png");
  int transparent = 0;
  ASSERT_INT(img.channels, ==, 4);
  for (int y = 0; y < img.height; y++)
    for (int x = 0; x < img.width; x++) {
      unsigned a = sample(&ref, x, y, 3);
      ASSERT_INT(sample(&img, x, y, 3), ==, a);
      transparent += a == 0;
      for (int c = 0; c < 3; c++)
        ASSERT_INT(sample(&img, x, y, c), ==, a ? sample(&ref, x, y, c) : 0);
    }
  ASSERT_INT(transparent, >, 0);
  codec_image_free(&img), codec_image_free(&ref);
  img = decode("gif_interlaced.gif", &codec_gif_format),
  ref = fixture_photo("gif_interlaced.ref.png");
  ASSERT_INT(max_diff(&img, &ref), ==, 0);
  codec_image_free(&img);
  /* The same file with a logical screen of 120x80: the frame at the top-left, opaque, the rest
   * transparent, RGBA. */
  size_t len;
  uint8_t *buf = fixture_bytes("gif_interlaced.gif", &len);
  buf[6] = 120, buf[7] = 0, buf[8] = 80, buf[9] = 0;
  char msg[256] = "";
  ASSERT_INT(codec_gif_format.decode(buf, len, NULL, &img, msg, sizeof msg), ==, CODEC_OK);
  ASSERT_INT(img.width, ==, 120);
  ASSERT_INT(img.height, ==, 80);
  ASSERT_INT(img.channels, ==, 4);
  for (int y = 0; y < img.height; y++)
    for (int x = 0; x < img.width; x++) {
      int in = x < ref.width && y < ref.height;
      ASSERT_INT(sample(&img, x, y, 3), ==, in ? 255 : 0);
      for (int c = 0; c < 3; c++)
        ASSERT_INT(sample(&img, x, y, c), ==, in ? sample(&ref, x, y, c) : 0);
    }
  free(buf), codec_image_free(&img), codec_image_free(&ref);
}

/* ---- every file: probe, limits, truncation ---- */

static void test_probe(void) {
  for (size_t i = 0; i < NFILES; i++) {
    size_t len;
    uint8_t *buf = fixture_bytes(files[i].name, &len);
    struct codec_shape s;
    struct codec_image img = decode(files[i].name, files[i].f);
    if (files[i].f->probe(buf, len, &s) != 0) TEST_FAIL("%s: the probe fails", files[i].name);
    if (s.width != img.width || s.height != img.height || s.channels != img.channels ||
        s.depth != img.depth)
      TEST_FAIL("%s: probe %dx%d %d %d, decode %dx%d %d %d", files[i].name, s.width, s.height,
                s.channels, s.depth, img.width, img.height, img.channels, img.depth);
    for (size_t k = 0; k < NFILES; k++) /* each sniff claims its own files only */
      ASSERT_INT(files[k].f->sniff(buf, len), ==, files[k].f == files[i].f);
    codec_image_free(&img);
    free(buf);
  }
}

/* Decodes buf under lim and expects st with a sentence and no pixels. */
static void expect_refused(const struct file *f, const uint8_t *buf, size_t len,
                           const struct codec_limits *lim, enum codec_status want,
                           const char *what) {
  struct codec_image img;
  char msg[256] = "";
  enum codec_status st = f->f->decode(buf, len, lim, &img, msg, sizeof msg);
  if (st != want)
    TEST_FAIL("%s, %s: status %d, not %d (%s)", f->name, what, (int)st, (int)want, msg);
  if (img.pixels != NULL || msg[0] == 0) TEST_FAIL("%s, %s: pixels or no sentence", f->name, what);
}

/* A limit one short of the upright width, height or pixel count: CODEC_TOO_LARGE with a sentence;
 * where the image is the decoder's first allocation, also when every allocation fails. */
static void test_limits(void) {
  for (size_t i = 0; i < NFILES; i++) {
    size_t len;
    uint8_t *buf = fixture_bytes(files[i].name, &len);
    struct codec_shape s;
    ASSERT_INT(files[i].f->probe(buf, len, &s), ==, 0);
    struct codec_limits lims[3] = {{(uint32_t)s.width - 1, 0, 0},
                                   {0, (uint32_t)s.height - 1, 0},
                                   {0, 0, (uint64_t)s.width * (uint64_t)s.height - 1}};
    for (int k = 0; k < 3; k++) {
      expect_refused(&files[i], buf, len, &lims[k], CODEC_TOO_LARGE, "a limit one short");
      if (!files[i].first_alloc_is_image) continue;
      codec_test_fail_alloc(0);
      expect_refused(&files[i], buf, len, &lims[k], CODEC_TOO_LARGE, "no allocation allowed");
      codec_test_fail_alloc(-1);
    }
    free(buf);
  }
}

/* The first third or half: CODEC_CORRUPT with a sentence. (The cuts fall in the pixel data of
 * every file: a TIFF cut only in its last tags or profile can still decode, as libtiff does
 * without them.) */
static void test_truncated(void) {
  for (size_t i = 0; i < NFILES; i++) {
    size_t len;
    uint8_t *buf = fixture_bytes(files[i].name, &len);
    size_t cuts[2] = {len / 3, len / 2};
    for (int k = 0; k < 2; k++) {
      uint8_t *part = malloc(cuts[k]); /* exactly: ASan sees a read past its end */
      memcpy(part, buf, cuts[k]);
      expect_refused(&files[i], part, cuts[k], NULL, CODEC_CORRUPT, k ? "halved" : "a third");
      free(part);
    }
    free(buf);
  }
}

/* ---- cancellation ---- */

/* With a hook that never says stop, the pixels of a decode without one; with one that says stop
 * at its first call, half way and at its last, CODEC_CANCELLED and no pixels. */
static void test_cancel(void) {
  static const long first_half_last[] = {1, -2, -1, 0}; /* stop_call's */
  for (size_t i = 0; i < NFILES; i++) {
    size_t len;
    uint8_t *buf = fixture_bytes(files[i].name, &len);
    expect_decode_stops(buf, len, 1, first_half_last, files[i].name);
    free(buf);
  }
}

/* ---- the encoders ---- */

/* PSNR of b against a over the colour channels, in 8 bits (16-bit samples scaled). */
static double psnr(const struct codec_image *a, const struct codec_image *b) {
  double se = 0;
  int colours = a->channels <= 2 ? 1 : 3;
  for (int y = 0; y < a->height; y++)
    for (int x = 0; x < a->width; x++)
      for (int c = 0; c < colours; c++) {
        double p = a->depth == 8 ? sample(a, x, y, c) : sample(a, x, y, c) / 257.0;
        double q = b->depth == 8 ? sample(b, x, y, c) : sample(b, x, y, c) / 257.0;
        se += (p - q) * (p - q);
      }
  return 10 * log10(255.0 * 255 * a->width * a->height * colours / se);
}

/* The file avifdec (libavif with dav1d: another AV1 decoder's container reader and colour
 * conversion) decodes buf to. */
static struct codec_image avifdec(const uint8_t *buf, size_t len) {
  char in[] = "/tmp/blurd-avif-XXXXXX", out[64], cmd[256];
  int fd = mkstemp(in);
  ASSERT(fd >= 0);
  ASSERT_INT(write(fd, buf, len), ==, len);
  close(fd);
  snprintf(out, sizeof out, "%s.png", in);
  snprintf(cmd, sizeof cmd, "avifdec --jobs 1 '%s' '%s' >/dev/null 2>&1", in, out);
  if (system(cmd) != 0)
    TEST_FAIL("avifdec failed or is missing (sh scripts/install-deps.sh installs libavif-bin)");
  struct codec_image img;
  ASSERT_INT(codec_decode_file(out, &img), ==, CODEC_OK);
  unlink(in), unlink(out);
  return img;
}

/* The PSNR each quality gives at the default effort on photo_1080p.jpg (measured; the notes'
 * table), less 0.25 dB. */
static const struct {
  int quality;
  double avif, jxl;
} promised[] = {{50, 34.55, 34.35}, {75, 38.9, 36.9}, {90, 46.4, 41.5}};

/* AVIF of the photograph at 50, 75 and 90: blurd's decoder and avifdec both give at least the
 * promised PSNR. */
static void test_avif_encode(void) {
  struct codec_image photo = fixture_photo("photo_1080p.jpg");
  for (size_t i = 0; i < sizeof promised / sizeof promised[0]; i++) {
    struct codec_encode_opts o = {.quality = promised[i].quality};
    uint8_t *file = NULL;
    size_t len = 0;
    char msg[256] = "";
    ASSERT_INT(codec_avif_format.encode(&photo, &o, &file, &len, msg, sizeof msg), ==, CODEC_OK);
    ASSERT(codec_avif_format.sniff(file, len));
    struct codec_image ours, theirs = avifdec(file, len);
    ASSERT_INT(codec_avif_format.decode(file, len, NULL, &ours, msg, sizeof msg), ==, CODEC_OK);
    double p = psnr(&photo, &ours), q = psnr(&photo, &theirs);
    fprintf(stderr, "    AVIF quality %d: %zu bytes, PSNR %.2f (avifdec %.2f)\n",
            promised[i].quality, len, p, q);
    ASSERT_DBL(p, >=, promised[i].avif);
    ASSERT_DBL(q, >=, promised[i].avif);
    codec_image_free(&ours), codec_image_free(&theirs), free(file);
  }
  codec_image_free(&photo);
}

/* AVIF keeps alpha and 16 bits (as 10-bit AV1): rgba16.png comes back RGBA 16-bit, colour and
 * alpha close at quality 90; gray comes back as RGB with its levels. */
static void test_avif_encode_kinds(void) {
  static const char *names[] = {"rgba16.png", "gray_alpha.png", "camera.png"};
  for (size_t i = 0; i < 3; i++) {
    struct codec_image src = fixture_photo(names[i]), back;
    struct codec_encode_opts o = {.quality = 90};
    uint8_t *file = NULL;
    size_t len;
    char msg[256] = "";
    ASSERT_INT(codec_avif_format.encode(&src, &o, &file, &len, msg, sizeof msg), ==, CODEC_OK);
    ASSERT_INT(codec_avif_format.decode(file, len, NULL, &back, msg, sizeof msg), ==, CODEC_OK);
    int alpha = src.channels == 2 || src.channels == 4;
    ASSERT_INT(back.channels, ==, alpha ? 4 : 3);
    ASSERT_INT(back.depth, ==, src.depth);
    ASSERT_DBL(psnr(&src, &back), >=, 38);
    for (int y = 0; alpha && y < src.height; y++)
      for (int x = 0; x < src.width; x++) {
        double a = sample(&src, x, y, src.channels - 1) / (src.depth == 8 ? 255.0 : 65535.0);
        double b = sample(&back, x, y, 3) / (back.depth == 8 ? 255.0 : 65535.0);
        ASSERT_NEAR(a, b, 0.03);
      }
    codec_image_free(&src), codec_image_free(&back), free(file);
  }
}

/* libjxl's own decoder, used directly (not through jxl.c): the image of a JPEG XL file in the
 * format want (channels, type). */
static struct codec_image libjxl_decode(const uint8_t *buf, size_t len, int channels, int depth) {
  JxlDecoder *d = JxlDecoderCreate(NULL);
  JxlPixelFormat fmt = {(uint32_t)channels, depth == 8 ? JXL_TYPE_UINT8 : JXL_TYPE_UINT16,
                        JXL_NATIVE_ENDIAN, 0};
  struct codec_image img = {NULL, 0, 0, channels, depth, CODEC_NONE, 1};
  JxlBasicInfo info;
  ASSERT(JxlDecoderSubscribeEvents(d, JXL_DEC_BASIC_INFO | JXL_DEC_FULL_IMAGE) == JXL_DEC_SUCCESS);
  ASSERT(JxlDecoderSetInput(d, buf, len) == JXL_DEC_SUCCESS);
  JxlDecoderCloseInput(d);
  for (;;) {
    JxlDecoderStatus s = JxlDecoderProcessInput(d);
    if (s == JXL_DEC_BASIC_INFO) {
      ASSERT(JxlDecoderGetBasicInfo(d, &info) == JXL_DEC_SUCCESS);
      img.width = (int)info.xsize, img.height = (int)info.ysize;
    } else if (s == JXL_DEC_NEED_IMAGE_OUT_BUFFER) {
      size_t n;
      ASSERT(JxlDecoderImageOutBufferSize(d, &fmt, &n) == JXL_DEC_SUCCESS);
      img.pixels = malloc(n);
      ASSERT(JxlDecoderSetImageOutBuffer(d, &fmt, img.pixels, n) == JXL_DEC_SUCCESS);
    } else if (s == JXL_DEC_FULL_IMAGE || s == JXL_DEC_SUCCESS) {
      break;
    } else {
      TEST_FAIL("libjxl's decoder: status %d", (int)s);
    }
  }
  JxlDecoderDestroy(d);
  ASSERT(img.pixels != NULL);
  return img;
}

/* Lossless JPEG XL keeps every sample (16-bit RGBA, gray+alpha, 16-bit gray, P3 RGB with its
 * profile byte for byte), through jxl.c and through libjxl directly. */
static void test_jxl_lossless(void) {
  static const char *names[] = {"rgba16.png", "gray_alpha.png", "gray16.png", "p3.png"};
  for (size_t i = 0; i < 4; i++) {
    struct codec_image src = fixture_photo(names[i]), back;
    size_t icc_len = 0, n = 0;
    uint8_t *icc = strcmp(names[i], "p3.png") == 0 ? png_icc(names[i], &icc_len) : NULL;
    struct codec_encode_opts o = {.lossless = 1, .icc = icc, .icc_len = icc_len};
    uint8_t *file = NULL, *back_icc = NULL;
    size_t len;
    char msg[256] = "";
    ASSERT_INT(codec_jxl_format.encode(&src, &o, &file, &len, msg, sizeof msg), ==, CODEC_OK);
    ASSERT(codec_jxl_format.sniff(file, len));
    ASSERT_INT(codec_jxl_format.decode(file, len, NULL, &back, msg, sizeof msg), ==, CODEC_OK);
    ASSERT_INT(max_diff(&src, &back), ==, 0);
    codec_image_free(&back);
    back = libjxl_decode(file, len, src.channels, src.depth);
    ASSERT_INT(max_diff(&src, &back), ==, 0);
    ASSERT_INT(codec_jxl_format.icc(file, len, &back_icc, &n), ==, CODEC_OK);
    if (icc) ASSERT(n == icc_len && memcmp(back_icc, icc, n) == 0);
    codec_image_free(&src), codec_image_free(&back), free(file), free(icc), free(back_icc);
  }
}

/* Lossy JPEG XL of the photograph at 50, 75 and 90: at least the promised PSNR, jxl.c and
 * libjxl's own decoder giving the same pixels; a higher quality a larger file. */
static void test_jxl_lossy_encode(void) {
  struct codec_image photo = fixture_photo("photo_1080p.jpg");
  size_t last = 0;
  for (size_t i = 0; i < sizeof promised / sizeof promised[0]; i++) {
    struct codec_encode_opts o = {.quality = promised[i].quality};
    uint8_t *file = NULL;
    size_t len;
    char msg[256] = "";
    ASSERT_INT(codec_jxl_format.encode(&photo, &o, &file, &len, msg, sizeof msg), ==, CODEC_OK);
    struct codec_image ours, theirs = libjxl_decode(file, len, 3, 8);
    ASSERT_INT(codec_jxl_format.decode(file, len, NULL, &ours, msg, sizeof msg), ==, CODEC_OK);
    ASSERT_INT(max_diff(&ours, &theirs), ==, 0);
    double p = psnr(&photo, &ours);
    fprintf(stderr, "    JPEG XL quality %d: %zu bytes, PSNR %.2f\n", promised[i].quality, len, p);
    ASSERT_DBL(p, >=, promised[i].jxl);
    ASSERT_INT(len, >, last);
    last = len;
    codec_image_free(&ours), codec_image_free(&theirs), free(file);
  }
  codec_image_free(&photo);
}

/* Both encoders stop when the hook says so, at its first call: CODEC_CANCELLED, no file. */
static void test_encode_cancel(void) {
  struct codec_image photo = fixture_photo("coffee.png");
  for (int k = 0; k < 3; k++) {
    struct codec_encode_opts o = {.quality = 75, .lossless = k == 2};
    struct stopper s = {1, 0};
    struct codec_cancel hook = {stop_at, &s};
    uint8_t *file = (uint8_t *)&s;
    size_t len = 1;
    codec_cancel_set(&hook);
    enum codec_status st = k == 0 ? codec_avif_format.encode(&photo, &o, &file, &len, NULL, 0)
                                  : codec_jxl_format.encode(&photo, &o, &file, &len, NULL, 0);
    codec_cancel_set(NULL);
    ASSERT_INT(st, ==, CODEC_CANCELLED);
    ASSERT(file == NULL && len == 0);
  }
  codec_image_free(&photo);
}

int main(void) {
  RUN(test_heic_grid);
  RUN(test_heic_transform);
  RUN(test_heic_icc);
  RUN(test_heic_pictures);
  RUN(test_avif10_alpha);
  RUN(test_avif8_p3);
  RUN(test_jxl_p3);
  RUN(test_jxl_lossless_files);
  RUN(test_jxl_float);
  RUN(test_jxl_lossy);
  RUN(test_jxl_orientation);
  RUN(test_tiff);
  RUN(test_tiff_alpha);
  RUN(test_tiff_float);
  RUN(test_gif);
  RUN(test_probe);
  RUN(test_limits);
  RUN(test_truncated);
  RUN(test_cancel);
  RUN(test_avif_encode);
  RUN(test_avif_encode_kinds);
  RUN(test_jxl_lossless);
  RUN(test_jxl_lossy_encode);
  RUN(test_encode_cancel);
  fprintf(stderr, "unit_codec_formats: all passed\n");
  return 0;
}

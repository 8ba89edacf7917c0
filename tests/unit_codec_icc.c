/* unit_codec_icc: colour profiles through codecs/ (icc.c and the encoders), and CMYK JPEGs.
 *
 * The fixtures p3.png, p3.jpg and p3.webp carry display_p3.icc (made by Little CMS; see
 * tests/data/make-icc-fixtures.py). The profile read from each, and from every file blurd writes
 * with it, must be those bytes exactly; libspng, which parses iCCP itself, must find it in
 * blurd's PNG too. codec_to_srgb must match p3_srgb.png, PIL's ImageCms conversion with lcms2,
 * within one level. CMYK JPEGs decode to RGB: cmyk.jpg (Adobe, no profile) by the naive formula,
 * checked against libjpeg's own CMYK samples, and, where Debian's Ghostscript profiles are
 * installed (libgs-common), the same file with ps_cmyk.icc inserted against lcms2's transform.
 * Damaged copies of the fixtures must never make the reader fail or read out of bounds. */
#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h>
#include <lcms2.h>
#include <spng.h>

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"
#include "test.h"
#include "fixtures.h"

static struct codec_image decode(const uint8_t *buf, size_t len) {
  struct codec_image img;
  char msg[256];
  if (codec_decode(buf, len, NULL, &img, msg, sizeof msg) != CODEC_OK) TEST_FAIL("decode: %s", msg);
  return img;
}

/* The profile read from buf is exactly want (want NULL: no profile). */
static void expect_icc(const uint8_t *buf, size_t len, const uint8_t *want, size_t want_len) {
  uint8_t *icc;
  size_t n;
  ASSERT_INT(codec_icc_read(buf, len, &icc, &n), ==, CODEC_OK);
  if (want == NULL) {
    ASSERT(icc == NULL);
    ASSERT_INT(n, ==, 0);
    return;
  }
  ASSERT(icc != NULL);
  ASSERT_INT(n, ==, want_len);
  ASSERT(memcmp(icc, want, n) == 0);
  free(icc);
}

static void test_read_fixtures(void) {
  size_t plen, len;
  uint8_t *p3 = fixture_bytes("display_p3.icc", &plen);
  ASSERT_INT(codec_icc_colours(p3, plen), ==, 3);
  static const char *files[] = {"p3.png", "p3.jpg", "p3.webp"};
  for (size_t i = 0; i < 3; i++) {
    uint8_t *buf = fixture_bytes(files[i], &len);
    expect_icc(buf, len, p3, plen);
    free(buf);
  }
  uint8_t *plain = fixture_bytes("photo_1080p.jpg", &len);
  expect_icc(plain, len, NULL, 0);
  free(plain);
  free(p3);
}

/* libspng's own iCCP parser finds the profile in png. */
static void expect_spng_iccp(const uint8_t *png, size_t len, const uint8_t *icc, size_t icc_len) {
  spng_ctx *ctx = spng_ctx_new(0);
  struct spng_iccp iccp;
  ASSERT_INT(spng_set_png_buffer(ctx, png, len), ==, 0);
  ASSERT_INT(spng_get_iccp(ctx, &iccp), ==, 0);
  ASSERT_INT(iccp.profile_len, ==, icc_len);
  ASSERT(memcmp(iccp.profile, icc, icc_len) == 0);
  spng_ctx_free(ctx);
}

/* Every encoder writes the profile it is given, and the file still decodes. */
static void test_encoders_write_profile(void) {
  size_t plen, len;
  uint8_t *p3 = fixture_bytes("display_p3.icc", &plen), *buf = fixture_bytes("p3.png", &len);
  struct codec_image img = decode(buf, len);
  struct codec_encode_opts opts[] = {
      {.format = CODEC_PNG, .compression = 6}, {.format = CODEC_PNG, .compression = 0},
      {.format = CODEC_JPEG, .quality = 90},   {.format = CODEC_WEBP, .quality = 80},
      {.format = CODEC_WEBP, .lossless = 1},
  };
  for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) {
    opts[i].icc = p3;
    opts[i].icc_len = plen;
    uint8_t *out;
    size_t n;
    ASSERT_INT(codec_encode(&img, &opts[i], &out, &n, NULL, 0), ==, CODEC_OK);
    expect_icc(out, n, p3, plen);
    if (opts[i].format == CODEC_PNG) expect_spng_iccp(out, n, p3, plen);
    struct codec_image back = decode(out, n);
    ASSERT_INT(back.width, ==, 160);
    ASSERT_INT(back.height, ==, 120);
    codec_image_free(&back);
    opts[i].icc = NULL; /* and without it, none */
    free(out);
    ASSERT_INT(codec_encode(&img, &opts[i], &out, &n, NULL, 0), ==, CODEC_OK);
    expect_icc(out, n, NULL, 0);
    free(out);
  }
  codec_image_free(&img);
  free(buf);
  free(p3);
}

/* An RGB profile is not attached to a gray PNG or JPEG, nor a CMYK one to anything. */
static void test_mismatched_profile_dropped(void) {
  size_t plen, len;
  uint8_t *p3 = fixture_bytes("display_p3.icc", &plen), *buf = fixture_bytes("camera.png", &len);
  struct codec_image gray = decode(buf, len);
  enum codec_format formats[] = {CODEC_PNG, CODEC_JPEG};
  for (size_t i = 0; i < 2; i++) {
    struct codec_encode_opts o = {
        .format = formats[i], .quality = 90, .compression = 1, .icc = p3, .icc_len = plen};
    uint8_t *out;
    size_t n;
    ASSERT_INT(codec_encode(&gray, &o, &out, &n, NULL, 0), ==, CODEC_OK);
    expect_icc(out, n, NULL, 0);
    free(out);
  }
  uint8_t cmyk[200] = {0};
  memcpy(cmyk, p3, 128);
  cmyk[0] = cmyk[1] = cmyk[2] = 0, cmyk[3] = 200;
  memcpy(cmyk + 16, "CMYK", 4);
  ASSERT_INT(codec_icc_colours(cmyk, sizeof cmyk), ==, 4);
  ASSERT_INT(codec_icc_colours(cmyk, sizeof cmyk - 1), ==, 0); /* its header says 200 bytes */
  codec_image_free(&gray);
  free(buf);
  free(p3);
}

static void test_to_srgb_matches_lcms(void) {
  size_t plen, len, rlen;
  uint8_t *p3 = fixture_bytes("display_p3.icc", &plen), *buf = fixture_bytes("p3.png", &len);
  uint8_t *ref_buf = fixture_bytes("p3_srgb.png", &rlen);
  struct codec_image img = decode(buf, len), ref = decode(ref_buf, rlen);
  struct codec_image untouched = decode(buf, len);
  ASSERT_INT(codec_to_srgb(&img, p3, plen), ==, 1);
  int worst = 0, changed = 0;
  for (size_t i = 0; i < (size_t)img.width * img.height * 3; i++) {
    int d = abs(img.pixels[i] - ref.pixels[i]);
    worst = d > worst ? d : worst;
    changed += img.pixels[i] != untouched.pixels[i];
  }
  ASSERT_INT(worst, <=, 1);
  ASSERT_INT(changed, >, 160 * 120); /* P3 to sRGB moves most samples */
  ASSERT_INT(codec_to_srgb(&untouched, NULL, 0), ==, 0);
  ASSERT_INT(codec_to_srgb(&untouched, p3, plen - 1), ==, 0);
  codec_image_free(&img), codec_image_free(&ref), codec_image_free(&untouched);
  free(buf), free(ref_buf), free(p3);
}

/* A 150,000-byte profile needs three APP2 segments; they come back joined, after APP0. */
static void test_insert_large_profile(void) {
  size_t plen, len;
  uint8_t *p3 = fixture_bytes("display_p3.icc", &plen),
          *jpeg = fixture_bytes("photo_1080p.jpg", &len);
  size_t big_len = 150000;
  uint8_t *big = malloc(big_len);
  for (size_t i = 0; i < big_len; i++) big[i] = (uint8_t)(i * 7 + i / 251);
  memcpy(big, p3, 128);
  big[0] = 0, big[1] = (uint8_t)(big_len >> 16), big[2] = (uint8_t)(big_len >> 8);
  big[3] = (uint8_t)big_len;
  uint8_t *out;
  size_t n;
  ASSERT_INT(codec_jpeg_insert_icc(jpeg, len, big, big_len, &out, &n), ==, CODEC_OK);
  ASSERT_INT(n, ==, len + big_len + 3 * 18);
  ASSERT(out[2] == 0xff && out[3] == 0xe0); /* JFIF's APP0 stays first */
  expect_icc(out, n, big, big_len);
  struct codec_image img = decode(out, n);
  ASSERT_INT(img.width, ==, 1920);
  codec_image_free(&img);
  free(out);
  /* A missing segment (the second of three, removed) means no profile. */
  uint8_t *cut;
  ASSERT_INT(codec_jpeg_insert_icc(jpeg, len, big, big_len, &cut, &n), ==, CODEC_OK);
  size_t at = 4 + ((size_t)cut[4] << 8 | cut[5]),
         seg1 = 2 + ((size_t)cut[at + 2] << 8 | cut[at + 3]);
  size_t seg2 = 2 + ((size_t)cut[at + seg1 + 2] << 8 | cut[at + seg1 + 3]);
  ASSERT_INT(cut[at + seg1 + 4 + 12], ==, 2);
  memmove(cut + at + seg1, cut + at + seg1 + seg2, n - at - seg1 - seg2);
  expect_icc(cut, n - seg2, NULL, 0);
  ASSERT_INT(codec_jpeg_insert_icc(p3, plen, big, big_len, &out, &n), ==, CODEC_UNSUPPORTED);
  free(cut), free(big), free(jpeg), free(p3);
}

/* libjpeg's own CMYK samples of buf; *adobe says whether they are stored inverted. */
static uint8_t *raw_cmyk(const uint8_t *buf, size_t len, int *w, int *h, int *adobe) {
  struct jpeg_decompress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, buf, (unsigned long)len);
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_CMYK;
  jpeg_start_decompress(&c);
  *w = (int)c.output_width, *h = (int)c.output_height, *adobe = c.saw_Adobe_marker;
  uint8_t *px = malloc((size_t)*w * *h * 4);
  while (c.output_scanline < c.output_height) {
    JSAMPROW r = px + (size_t)c.output_scanline * *w * 4;
    jpeg_read_scanlines(&c, &r, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return px;
}

static void test_cmyk_without_profile(void) {
  size_t len;
  uint8_t *buf = fixture_bytes("cmyk.jpg", &len);
  int w, h, adobe;
  uint8_t *cmyk = raw_cmyk(buf, len, &w, &h, &adobe);
  ASSERT(adobe);
  struct codec_image img = decode(buf, len);
  ASSERT_INT(img.channels, ==, 3);
  ASSERT_INT(img.width, ==, w);
  for (size_t i = 0; i < (size_t)w * h; i++)
    for (int c = 0; c < 3; c++) /* inverted: the samples are 255 - ink */
      ASSERT_INT(img.pixels[i * 3 + c], ==, (cmyk[i * 4 + c] * cmyk[i * 4 + 3] + 127) / 255);
  struct codec_jpeg_info info;
  ASSERT_INT(codec_jpeg_probe(buf, len, NULL, &info, NULL, 0), ==, CODEC_OK);
  ASSERT_INT(info.channels, ==, 3);
  ASSERT_INT(info.plain, ==, 0); /* not for nvJPEG */
  codec_image_free(&img);
  free(cmyk), free(buf);
}

static void test_cmyk_with_profile(void) {
  size_t plen, len;
  uint8_t *prof = fixture_read("/usr/share/color/icc/ghostscript/ps_cmyk.icc", &plen);
  if (prof == NULL) {
    fprintf(stderr, "    (skipped: no /usr/share/color/icc/ghostscript/ps_cmyk.icc)\n");
    return;
  }
  ASSERT_INT(codec_icc_colours(prof, plen), ==, 4);
  uint8_t *buf = fixture_bytes("cmyk.jpg", &len), *with;
  size_t n;
  ASSERT_INT(codec_jpeg_insert_icc(buf, len, prof, plen, &with, &n), ==, CODEC_OK);
  int w, h, adobe;
  uint8_t *cmyk = raw_cmyk(with, n, &w, &h, &adobe), *want = malloc((size_t)w * h * 3);
  cmsHPROFILE in = cmsOpenProfileFromMem(prof, (cmsUInt32Number)plen),
              out = cmsCreate_sRGBProfile();
  cmsHTRANSFORM t = cmsCreateTransform(in, TYPE_CMYK_8_REV, out, TYPE_RGB_8, INTENT_PERCEPTUAL, 0);
  ASSERT(t != NULL);
  cmsDoTransform(t, cmyk, want, (cmsUInt32Number)(w * h));
  cmsDeleteTransform(t), cmsCloseProfile(in), cmsCloseProfile(out);
  struct codec_image img = decode(with, n);
  int worst = 0, naive_differs = 0;
  for (size_t i = 0; i < (size_t)w * h * 3; i++) {
    int d = abs(img.pixels[i] - want[i]);
    worst = d > worst ? d : worst;
    naive_differs += abs(want[i] - (cmyk[i / 3 * 4 + i % 3] * cmyk[i / 3 * 4 + 3] + 127) / 255) > 8;
  }
  ASSERT_INT(worst, <=, 1);
  ASSERT_INT(naive_differs, >, 0); /* the profile made a difference */
  codec_image_free(&img);
  free(cmyk), free(want), free(with), free(buf), free(prof);
}

/* Damaged copies: the reader returns OK, with a profile or without, and reads only the buffer. */
static void test_damaged(void) {
  static const char *files[] = {"p3.png", "p3.jpg", "p3.webp"};
  srand(36);
  for (size_t f = 0; f < 3; f++) {
    size_t len;
    uint8_t *orig = fixture_bytes(files[f], &len);
    for (int round = 0; round < 300; round++) {
      size_t n = round % 3 == 0 ? (size_t)rand() % 2000 : len;
      uint8_t *b = malloc(n ? n : 1);
      memcpy(b, orig, n);
      for (int k = round % 3 == 0 ? 0 : 1 + rand() % 8; k > 0; k--)
        b[(size_t)rand() % (n < 1200 ? n : 1200)] = (uint8_t)rand();
      uint8_t *icc;
      size_t icc_len;
      ASSERT_INT(codec_icc_read(b, n, &icc, &icc_len), ==, CODEC_OK);
      if (icc) ASSERT_INT(codec_icc_colours(icc, icc_len), >, 0);
      free(icc);
      free(b);
    }
    free(orig);
  }
}

/* Every allocation of an encode with a profile, and of reading it back, may fail in turn: the
 * call then says CODEC_NOMEM and holds nothing (ASan sees the leaks, if any). */
static void test_alloc_failures(void) {
  size_t plen, len;
  uint8_t *p3 = fixture_bytes("display_p3.icc", &plen), *buf = fixture_bytes("p3.jpg", &len);
  struct codec_image img = decode(buf, len);
  enum codec_format formats[] = {CODEC_PNG, CODEC_JPEG, CODEC_WEBP};
  for (size_t f = 0; f < 3; f++) {
    struct codec_encode_opts o = {
        .format = formats[f], .quality = 80, .compression = 1, .icc = p3, .icc_len = plen};
    size_t outlen;
    int failed;
    uint8_t *out = fixture_encode_failing(&img, &o, &outlen, &failed);
    expect_icc(out, outlen, p3, plen);
    free(out);
    ASSERT_INT(failed, >=, 2);
  }
  for (long n = 0; n < 3; n++) { /* reading: the joined segments, then the copy */
    uint8_t *icc = (uint8_t *)1;
    size_t icc_len;
    codec_test_fail_alloc(n);
    enum codec_status st = codec_icc_read(buf, len, &icc, &icc_len);
    codec_test_fail_alloc(-1);
    if (st == CODEC_OK) {
      ASSERT_INT(icc_len, ==, plen);
      free(icc);
      break;
    }
    ASSERT_INT(st, ==, CODEC_NOMEM);
    ASSERT(icc == NULL);
  }
  codec_image_free(&img);
  free(buf), free(p3);
}

int main(void) {
  RUN(test_read_fixtures);
  RUN(test_encoders_write_profile);
  RUN(test_mismatched_profile_dropped);
  RUN(test_to_srgb_matches_lcms);
  RUN(test_insert_large_profile);
  RUN(test_cmyk_without_profile);
  RUN(test_cmyk_with_profile);
  RUN(test_damaged);
  RUN(test_alloc_failures);
  fprintf(stderr, "unit_codec_icc: all tests passed\n");
  return 0;
}

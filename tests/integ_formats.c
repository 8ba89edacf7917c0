/* Integration tests of the formats of the codecs' table through the real binary: a HEIC, an
 * AVIF, a JPEG XL, a TIFF and a GIF made by Debian's encoders (tests/data/make-formats.sh), each
 * uploaded raw with its media type and in a multipart form. The tests check that
 *   - /convert answers each in the format format=input gives (HEIC as JPEG, TIFF and GIF as PNG,
 *     AVIF and JPEG XL as themselves), upright, with the decoder named in Server-Timing, and
 *     that format=png gives the pixels blurd's own decoder reads from the file exactly (16-bit
 *     TIFF and GIF's transparency included);
 *   - /blur of a HEIC answers a JPEG with its PSNR;
 *   - `Accept: image/avif` on a JPEG upload answers AVIF; format=heic and format=gif (formats
 *     read, not written) are a 400 that lists the outputs; an unknown file is a 415 that lists
 *     the inputs;
 *   - under --max-cost, an AVIF answer asked for by Accept is refused as format=avif is;
 *   - a GIF and a TIFF that claim 60000 x 60000 in a few bytes are a 422 image_too_large;
 *   - /readyz names a reader for every format of the table;
 *   - every HEIC of tests/data converts to the pixels of blurd's own decoder, exactly, by the
 *     decoder Server-Timing names: with BLURD_EXPECT_VIDEO_DECODERS=1 (a GPU with video decoders)
 *     the video decoders ("nvdec") for the files they take, and the CPU's with the reason for
 *     the others (an alpha plane, pictures under their smallest size, pictures that share their
 *     data), each counted in blurd_heic_decodes_total. */
#include "harness.h"
#include "test.h"

#include "../codecs/codecs.h"

#include <jansson.h>
#include <signal.h>

static struct server srv;

struct upload {
  const char *file;
  enum codec_format in, out; /* the file's format, and what format=input answers */
  int lossless;              /* format=png gives the decoder's samples exactly */
};

static const struct upload uploads[] = {
    {"heic_grid_rot.heic", CODEC_HEIC, CODEC_JPEG, 0},
    {"avif10_alpha.avif", CODEC_AVIF, CODEC_AVIF, 0},
    {"jxl_p3_lossless.jxl", CODEC_JXL, CODEC_JXL, 1},
    {"tiff_tiled16.tif", CODEC_TIFF, CODEC_PNG, 1},
    {"gif_transparent.gif", CODEC_GIF, CODEC_PNG, 1},
};

/* Whether the server runs HEIC on a GPU's video decoders (BLURD_EXPECT_VIDEO_DECODERS=1, which
 * make test-gpu sets for a build with them). */
static int expect_video(void) {
  const char *gpu = getenv("BLURD_EXPECT_VIDEO_DECODERS");
  return gpu && strcmp(gpu, "1") == 0;
}

static void decode_answer(const struct http_resp *r, struct codec_image *img) {
  char msg[256];
  if (r->status != 200) TEST_FAIL("status %ld: %.300s", r->status, r->body);
  if (codec_decode((const uint8_t *)r->body, r->len, &(struct codec_limits){0, 0, 0}, img, msg,
                   sizeof(msg)) != CODEC_OK)
    TEST_FAIL("the answer is not an image: %s", msg);
}

static void test_convert_each(void) {
  for (size_t i = 0; i < sizeof(uploads) / sizeof(uploads[0]); i++) {
    const struct upload *u = &uploads[i];
    size_t len;
    uint8_t *file = fixture(u->file, &len);
    struct codec_image src, got;
    ASSERT_INT(codec_decode(file, len, &(struct codec_limits){0, 0, 0}, &src, NULL, 0), ==,
               CODEC_OK);
    ASSERT_INT(src.format, ==, u->in);
    int w = src.width, h = src.height; /* upright: the decoder applied the orientation */
    struct http_resp r;
    char ct[64], dec[64];
    ASSERT(http_request(&srv, "POST", "/convert", codec_mime(u->in), NULL, file, len, &r) == 0);
    decode_answer(&r, &got);
    ASSERT_STR(http_header(&r, "Content-Type", ct, sizeof(ct)), codec_mime(u->out));
    ASSERT_INT(got.format, ==, u->out);
    ASSERT_INT(got.width, ==, w);
    ASSERT_INT(got.height, ==, h);
    ASSERT_INT(got.orientation, ==, 1);
    ASSERT(http_stage(&r, "decode", dec, sizeof(dec)) >= 0);
    if (strcmp(dec, "nvdec") != 0 || !expect_video()) ASSERT_STR(dec, codec_format(u->in)->lib);
    fprintf(stderr, "    %-20s %dx%d, %d channels of %d bits -> %s, %zu bytes\n", u->file, w, h,
            src.channels, src.depth, codec_format_name(u->out), r.len);
    codec_image_free(&got);
    http_resp_free(&r);
    /* a multipart form and format=png: the decoder's samples, where it kept them */
    ASSERT(http_post_form(&srv, "/convert?format=png", "image", file, len, NULL, NULL, &r) == 0);
    decode_answer(&r, &got);
    ASSERT_INT(got.format, ==, CODEC_PNG);
    ASSERT_INT(got.width, ==, w);
    ASSERT_INT(got.height, ==, h);
    if (u->lossless) {
      ASSERT_INT(got.channels, ==, src.channels);
      ASSERT_INT(got.depth, ==, src.depth);
      size_t bytes = (size_t)w * h * src.channels * (src.depth / 8);
      ASSERT(memcmp(got.pixels, src.pixels, bytes) == 0);
    }
    codec_image_free(&got);
    codec_image_free(&src);
    http_resp_free(&r);
    free(file);
  }
}

struct heic_case {
  const char *file;
  const char *gpu_decoder; /* Server-Timing's decode desc with the video decoders */
};

static void test_heic_decoders(void) {
  static const struct heic_case cases[] = {
      {"heic10.heic", "nvdec"},
      {"heic444.heic", "nvdec"},
      {"heic10_444.heic", "nvdec"},
      {"heic_grid_rot.heic", "nvdec"},
      {"heic_transform.heic", NULL}, /* printed: a crop goes to the CPU */
      {"heic_alpha.heic", "libheif (video decoders: an alpha plane)"},
      {"heic_shared.heic", "libheif (video decoders: pictures that share their data)"},
      {"heic_icc.heic", "libheif (video decoders: pictures under the video decoders' smallest "
                        "size)"},
  };
  double nv0 = server_metric(&srv, "blurd_heic_decodes_total{decoder=\"nvdec\",reason=\"\"}");
  int on_video = 0;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t len;
    uint8_t *file = fixture(cases[i].file, &len);
    struct codec_image src, got;
    struct http_resp r;
    char dec[160];
    ASSERT_INT(codec_decode(file, len, &(struct codec_limits){0, 0, 0}, &src, NULL, 0), ==,
               CODEC_OK);
    ASSERT(http_request(&srv, "POST", "/convert?format=png", "image/heic", NULL, file, len, &r) ==
           0);
    decode_answer(&r, &got);
    ASSERT(http_stage(&r, "decode", dec, sizeof(dec)) >= 0);
    const char *want = expect_video() ? cases[i].gpu_decoder : codec_format(CODEC_HEIC)->lib;
    if (want) ASSERT_STR(dec, want);
    on_video += strcmp(dec, "nvdec") == 0;
    ASSERT_INT(got.width, ==, src.width);
    ASSERT_INT(got.height, ==, src.height);
    ASSERT_INT(got.channels, ==, src.channels);
    ASSERT_INT(got.depth, ==, src.depth);
    size_t n = (size_t)src.width * src.height * src.channels, differ = 0;
    int worst = 0;
    for (size_t k = 0; k < n; k++) {
      int a = src.depth == 8 ? src.pixels[k] : ((uint16_t *)src.pixels)[k];
      int b = src.depth == 8 ? got.pixels[k] : ((uint16_t *)got.pixels)[k];
      differ += a != b;
      worst = abs(a - b) > worst ? abs(a - b) : worst;
    }
    fprintf(stderr,
            "    %-20s %dx%d, %d bits: decoded by %s, %zu of %zu samples differ (largest %d)\n",
            cases[i].file, src.width, src.height, src.depth, dec, differ, n, worst);
    ASSERT_INT(differ, ==, 0);
    codec_image_free(&got);
    codec_image_free(&src);
    http_resp_free(&r);
    free(file);
  }
  double nv = server_metric(&srv, "blurd_heic_decodes_total{decoder=\"nvdec\",reason=\"\"}");
  if (expect_video()) {
    ASSERT(on_video >= 4);
    ASSERT_INT((int)(nv - nv0), ==, on_video);
    ASSERT(server_metric(&srv, "blurd_heic_decodes_total{decoder=\"cpu\",reason=\"an alpha "
                               "plane\"}") >= 1);
  } else {
    ASSERT_INT(on_video, ==, 0);
    ASSERT(nv <= 0); /* no series, or 0 */
  }
}

static void test_blur_heic(void) {
  size_t len;
  uint8_t *file = fixture("heic_icc.heic", &len);
  struct http_resp r;
  struct codec_image got;
  char ct[64];
  ASSERT(http_request(&srv, "POST", "/blur?sigma=3", codec_mime(CODEC_HEIC), NULL, file, len, &r) ==
         0);
  decode_answer(&r, &got);
  ASSERT_STR(http_header(&r, "Content-Type", ct, sizeof(ct)), codec_mime(CODEC_JPEG));
  ASSERT_INT(got.width, ==, 160);
  ASSERT_INT(got.height, ==, 120);
  ASSERT(http_header_num(&r, "X-PSNR") > 40);
  codec_image_free(&got);
  http_resp_free(&r);
  free(file);
}

static void test_accept_and_refusals(void) {
  size_t len;
  uint8_t *jpeg = fixture("photo_1080p.jpg", &len);
  struct http_resp r;
  char ct[64];
  ASSERT(http_request(&srv, "POST", "/convert", "image/jpeg", "image/avif,*/*;q=0.8", jpeg, len,
                      &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  ASSERT_STR(http_header(&r, "Content-Type", ct, sizeof(ct)), "image/avif");
  ASSERT(r.len > 12 && memcmp(r.body + 4, "ftypavif", 8) == 0);
  http_resp_free(&r);
  const char *unwritten[] = {"/convert?format=heic", "/convert?format=gif", "/blur?format=tiff"};
  for (int i = 0; i < 3; i++) {
    ASSERT(http_request(&srv, "POST", unwritten[i], "image/jpeg", NULL, jpeg, len, &r) == 0);
    http_expect_error(&r, 400, "invalid_parameter");
    ASSERT(strstr(r.body, "avif") && strstr(r.body, "jxl") && strstr(r.body, "webp"));
    http_resp_free(&r);
  }
  ASSERT(http_request(&srv, "POST", "/convert", "image/bmp", NULL, "BM\0\0\0\0\0\0", 8, &r) == 0);
  http_expect_error(&r, 415, "unsupported_media_type");
  ASSERT(strstr(r.body, "image/heic") && strstr(r.body, "image/gif"));
  http_resp_free(&r);
  free(jpeg);
}

/* A GIF whose screen and a TIFF whose first page say 60000 x 60000 in a few bytes: a 422
 * image_too_large from the header, before any pixel is allocated. */
static void test_bombs(void) {
  static const uint8_t gif[] = {'G', 'I', 'F',  '8',  '9',  'a', 0x60, 0xea, 0x60, 0xea, 0,    0,
                                0,   ',', 0,    0,    0,    0,   1,    0,    1,    0,    0x80, 0,
                                0,   0,   0xff, 0xff, 0xff, 2,   2,    0x44, 1,    0,    ';'};
  uint8_t tiff[8 + 2 + 9 * 12 + 4 + 1] = {'I', 'I', 42, 0, 8, 0, 0, 0, 9, 0};
  static const uint16_t tags[9][2] = {{256, 4}, {257, 4}, {258, 3}, {259, 3}, {262, 3},
                                      {273, 4}, {277, 3}, {278, 4}, {279, 4}};
  const uint32_t values[9] = {60000, 60000, 8, 1, 1, sizeof(tiff) - 1, 1, 60000, 1};
  for (int i = 0; i < 9; i++) {
    uint8_t *e = tiff + 10 + 12 * i;
    e[0] = tags[i][0] & 0xff, e[1] = tags[i][0] >> 8, e[2] = (uint8_t)tags[i][1], e[4] = 1;
    for (int k = 0; k < 4; k++) e[8 + k] = (uint8_t)(values[i] >> (8 * k));
  }
  const struct {
    const void *body;
    size_t len;
    enum codec_format f;
  } bombs[] = {{gif, sizeof(gif), CODEC_GIF}, {tiff, sizeof(tiff), CODEC_TIFF}};
  for (int i = 0; i < 2; i++) {
    struct http_resp r;
    ASSERT_INT(codec_sniff(bombs[i].body, bombs[i].len), ==, bombs[i].f);
    ASSERT(http_request(&srv, "POST", "/blur?sigma=2", codec_mime(bombs[i].f), NULL, bombs[i].body,
                        bombs[i].len, &r) == 0);
    http_expect_error(&r, 422, "image_too_large");
    ASSERT(strstr(r.body, "60000") != NULL);
    http_resp_free(&r);
  }
}

/* The output Accept picks is costed as format= is: under --max-cost 1, /convert of the 1080p
 * JPEG runs, and answering it as AVIF (about 2 s of encode) is refused before any decode, by
 * Accept as by format=. */
static void test_accept_costed(void) {
  struct server s;
  const char *args[] = {"--max-cost", "1", NULL};
  server_start(&s, args);
  size_t len;
  uint8_t *jpeg = fixture("photo_1080p.jpg", &len);
  struct http_resp r;
  ASSERT(http_request(&s, "POST", "/convert", "image/jpeg", NULL, jpeg, len, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
  ASSERT(http_request(&s, "POST", "/convert", "image/jpeg", "image/avif", jpeg, len, &r) == 0);
  http_expect_error(&r, 422, "too_expensive");
  http_resp_free(&r);
  ASSERT(http_request(&s, "POST", "/convert?format=avif", "image/jpeg", NULL, jpeg, len, &r) == 0);
  http_expect_error(&r, 422, "too_expensive");
  http_resp_free(&r);
  free(jpeg);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

static void test_readyz_lists_readers(void) {
  struct http_resp r;
  ASSERT(http_request(&srv, "GET", "/readyz", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  json_t *j = json_loads(r.body, 0, NULL), *c = json_object_get(j, "codecs");
  ASSERT(json_is_object(c));
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++) {
    const struct codec_format_desc *d = codec_format((enum codec_format)f);
    char key[32];
    snprintf(key, sizeof(key), "%s_decode", d->name);
    if (d->decode && d->sniff && !json_string_value(json_object_get(c, key)))
      TEST_FAIL("/readyz names no %s: %.400s", key, r.body);
  }
  json_decref(j);
  http_resp_free(&r);
}

int main(void) {
  server_start(&srv, NULL);
  RUN(test_convert_each);
  RUN(test_blur_heic);
  RUN(test_heic_decoders);
  RUN(test_accept_and_refusals);
  RUN(test_bombs);
  RUN(test_accept_costed);
  RUN(test_readyz_lists_readers);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  fprintf(stderr, "integ_formats: all passed\n");
  return 0;
}

/* unit_codec_out: encode options and outputs beyond PNG's: WebP effort, and the raw and .npy
 * data outputs for variance maps. Fixtures come from $BLURD_DATA, or tests/data when run from
 * the repository root. */
#include <stdint.h>
#include <stdio.h>

#include "../codecs/codecs.h"
#include "test.h"

static struct codec_image load(const char *name) {
  const char *dir = getenv("BLURD_DATA");
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "tests/data", name);
  struct codec_image img;
  if (codec_decode_file(path, &img) != CODEC_OK) TEST_FAIL("cannot decode %s", path);
  return img;
}

static uint8_t *encode(const struct codec_image *img, const struct codec_encode_opts *o,
                       size_t *len) {
  uint8_t *out;
  char msg[256] = "";
  if (codec_encode(img, o, &out, len, msg, sizeof msg) != CODEC_OK) TEST_FAIL("encode: %s", msg);
  return out;
}

/* Each effort is libwebp's method: the default is CODEC_WEBP_EFFORT_DEFAULT's file byte for
 * byte, the extremes differ, every file decodes, and 7 is refused. */
static void test_webp_effort(void) {
  struct codec_image img = load("chelsea.png");
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
  ASSERT_INT(n_default, ==, n[CODEC_WEBP_EFFORT_DEFAULT]);
  ASSERT(memcmp(def, files[CODEC_WEBP_EFFORT_DEFAULT], n_default) == 0);
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

int main(void) {
  RUN(test_webp_effort);
  fprintf(stderr, "unit_codec_out: all tests passed\n");
  return 0;
}

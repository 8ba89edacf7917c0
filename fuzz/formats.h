/* formats.h: the body the fuzz targets of the HEIC/AVIF, JPEG XL, TIFF and GIF decoders share
 * (fuzz/heif.c, jxl.c, tiff.c, gif.c). Their decoders are called through the format table
 * (codecs/table.c), as codec_decode calls them. Include after fuzz.h. */
#ifndef BLURD_FUZZ_FORMATS_H
#define BLURD_FUZZ_FORMATS_H

#include "fuzz.h"

/* The targets; each returns the codec status, or -1 for a skipped input. */
int fuzz_heif(const uint8_t *data, size_t size);
int fuzz_jxl(const uint8_t *data, size_t size);
int fuzz_tiff(const uint8_t *data, size_t size);
int fuzz_gif(const uint8_t *data, size_t size);

/* Decodes data when it sniffs as format a or b, under fuzz.h's limits (4096 x 4096, 4 Mpx):
 * a failure leaves no pixels and has a sentence; an image is within the limits, with 1-4
 * channels of 8 or 16 bits and an orientation in 1..8, agrees with the probe, and comes back
 * exactly from the PNG encoder and decoder. The ICC reader gives NULL or a profile of 1, 3 or 4
 * colours. A format's pictures verb (HEIC's, for the GPU's video decoders) gives nothing on a
 * failure, a reason when it gives one at all, and otherwise pictures that follow one another in its
 * stream, each starting with a start code, placed within the image, whose upright size is the
 * decode's. Returns the codec status, or -1 for a skipped input. */
static inline int fuzz_format(const uint8_t *data, size_t size, enum codec_format a,
                              enum codec_format b) {
  static const struct codec_limits lim = {4096, 4096, 4u << 20};
  struct codec_image img;
  struct codec_shape shape;
  uint8_t *icc = NULL;
  size_t icc_len = 0;
  char msg[256] = "";
  enum codec_format got = codec_sniff(data, size);
  if (got == CODEC_NONE || (got != a && got != b)) return -1;
  const struct codec_format_desc *f = codec_format(got);
  FUZZ_CHECK(!f->icc || f->icc(data, size, &icc, &icc_len) == CODEC_OK);
  FUZZ_CHECK(icc == NULL || (icc_len > 0 && codec_icc_colours(icc, icc_len) > 0));
  free(icc);
  struct codec_pictures pic;
  const char *why = NULL;
  enum codec_status ps = f->pictures ? f->pictures(data, size, &lim, &pic, &why) : CODEC_CORRUPT;
  if (f->pictures && ps != CODEC_OK)
    FUZZ_CHECK(pic.stream == NULL && pic.pic == NULL && pic.n == 0);
  if (ps == CODEC_UNSUPPORTED && why != NULL) FUZZ_CHECK(why[0] != 0);
  if (ps == CODEC_OK) {
    FUZZ_CHECK(pic.n >= 1 && pic.width >= 1 && pic.height >= 1 && pic.tile_w >= 1);
    FUZZ_CHECK(pic.bits >= 8 && pic.bits <= 16 && pic.orientation >= 1 && pic.orientation <= 8);
    for (int i = 0; i < pic.n; i++) {
      const struct codec_picture *p = &pic.pic[i];
      FUZZ_CHECK(p->off == (i ? pic.pic[i - 1].off + pic.pic[i - 1].len : 0));
      FUZZ_CHECK(p->len >= 4 && memcmp(pic.stream + p->off, "\0\0\0\1", 4) == 0);
      FUZZ_CHECK(p->x >= 0 && p->x < pic.width && p->y >= 0 && p->y < pic.height);
    }
  }
  enum codec_status st = f->decode(data, size, &lim, &img, msg, sizeof(msg));
  if (ps == CODEC_OK && st == CODEC_OK) {
    int swap = pic.orientation >= 5;
    FUZZ_CHECK(img.width == (swap ? pic.height : pic.width));
    FUZZ_CHECK(img.height == (swap ? pic.width : pic.height));
  }
  if (f->pictures) codec_pictures_free(&pic);
  if (st != CODEC_OK) {
    FUZZ_CHECK(img.pixels == NULL && msg[0] != 0);
    return (int)st;
  }
  FUZZ_CHECK(img.pixels != NULL);
  FUZZ_CHECK(img.width >= 1 && img.width <= 4096 && img.height >= 1 && img.height <= 4096);
  FUZZ_CHECK((uint64_t)img.width * (uint64_t)img.height <= lim.max_pixels);
  FUZZ_CHECK(img.channels >= 1 && img.channels <= 4 && (img.depth == 8 || img.depth == 16));
  FUZZ_CHECK(img.orientation >= 1 && img.orientation <= 8);
  FUZZ_CHECK(f->probe(data, size, &shape) == 0);
  FUZZ_CHECK(shape.width == img.width && shape.height == img.height);
  FUZZ_CHECK(shape.channels == img.channels && shape.depth == img.depth);
  fuzz_round_trip(&img, CODEC_PNG, &lim);
  codec_image_free(&img);
  return (int)st;
}

#endif

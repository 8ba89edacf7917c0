/* fuzz.h: what the libFuzzer targets in fuzz/ share. Each target fuzz/X.c defines
 * fuzz_X(data, size), the whole body of the target, and, unless FUZZ_NO_MAIN is defined, the
 * libFuzzer entry LLVMFuzzerTestOneInput that calls it. tests/unit_fuzz.c defines FUZZ_NO_MAIN,
 * includes every fuzz/X.c and replays the corpora and the regressions through the same fuzz_X,
 * so a crash found by fuzzing stays fixed under `make test`.
 *
 * The targets check the contracts the headers state (sizes within limits, a sentence with every
 * failure, part data inside the body, a response for every request) with FUZZ_CHECK, which
 * aborts: libFuzzer then reports it like any crash. */
#ifndef BLURD_FUZZ_H
#define BLURD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"

#include <webp/decode.h>

#define FUZZ_CHECK(e)                                                                              \
  do {                                                                                             \
    if (!(e)) {                                                                                    \
      fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #e);                   \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* The targets. Each returns what the input came to, for the replay test: the codec status (-1
 * for an input the target skips), the api_error, or the HTTP status for the handler. */
int fuzz_png(const uint8_t *data, size_t size);
int fuzz_jpeg(const uint8_t *data, size_t size);
int fuzz_webp(const uint8_t *data, size_t size);
int fuzz_multipart(const uint8_t *data, size_t size);
int fuzz_params(const uint8_t *data, size_t size);
int fuzz_handler(const uint8_t *data, size_t size);
int fuzz_framing(const uint8_t *data, size_t size);
/* Frees the api context fuzz_handler creates on first use; safe to call twice. */
void fuzz_handler_free(void);

/* libFuzzer's entry points (the handler target alone has the second). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Sample c of pixel i of img, scaled to 8 bits as the encoders scale it. */
static inline unsigned fuzz_sample8(const struct codec_image *img, size_t i, int c) {
  size_t k = i * (size_t)img->channels + (size_t)c;
  uint16_t v;
  if (img->depth == 8) return img->pixels[k];
  memcpy(&v, img->pixels + 2 * k, sizeof(v));
  return (v * 255u + 32767u) / 65535u;
}

/* back, the lossless WebP of img decoded, must be img in 8-bit RGB or RGBA: gray repeated, alpha
 * kept (libwebp leaves out an alpha that is opaque everywhere), every sample exact. */
static inline void fuzz_check_webp(const struct codec_image *img, const struct codec_image *back) {
  int alpha = img->channels == 2 || img->channels == 4, gray = img->channels <= 2;
  FUZZ_CHECK(back->depth == 8 && (back->channels == 3 + alpha || back->channels == 3));
  for (size_t i = 0; i < (size_t)img->width * (size_t)img->height; i++) {
    const uint8_t *p = back->pixels + i * (size_t)back->channels;
    for (int c = 0; c < 3; c++) FUZZ_CHECK(p[c] == fuzz_sample8(img, i, gray ? 0 : c));
    unsigned a = alpha ? fuzz_sample8(img, i, img->channels - 1) : 255;
    FUZZ_CHECK((back->channels == 4 ? p[3] : 255u) == a);
  }
}

/* Encodes img as f, decodes the result and checks it: a PNG must give back exactly img, a JPEG
 * the same size as 8-bit gray or RGB, a lossless WebP img's samples in 8 bits exactly. */
static inline void fuzz_round_trip(const struct codec_image *img, enum codec_format f,
                                   const struct codec_limits *lim) {
  struct codec_encode_opts o = {
      .format = f, .quality = 75, .lossless = 1}; /* quality 75 (4:2:0); lossless */
  o.png_filter = (enum codec_png_filter)((img->width + img->height) % 6); /* each strategy */
  o.compression = 1 + (img->width * 7 + img->height) % 3; /* the run-length coder, libdeflate */
  struct codec_image back;
  uint8_t *enc = NULL;
  size_t len = 0;
  char msg[256] = "";
  FUZZ_CHECK(codec_encode(img, &o, &enc, &len, msg, sizeof(msg)) == CODEC_OK);
  FUZZ_CHECK(enc != NULL && len > 0 && codec_sniff(enc, len) == f);
  FUZZ_CHECK(codec_decode(enc, len, lim, &back, msg, sizeof(msg)) == CODEC_OK);
  FUZZ_CHECK(back.width == img->width && back.height == img->height && back.format == f);
  if (f == CODEC_PNG) {
    FUZZ_CHECK(back.channels == img->channels && back.depth == img->depth);
    size_t bytes = (size_t)img->width * img->height * img->channels * (img->depth / 8);
    FUZZ_CHECK(memcmp(back.pixels, img->pixels, bytes) == 0);
  } else if (f == CODEC_WEBP) {
    fuzz_check_webp(img, &back);
  } else {
    FUZZ_CHECK(back.channels == (img->channels <= 2 ? 1 : 3) && back.depth == 8);
  }
  codec_image_free(&back);
  free(enc);
}

/* blurd's VP8 encoder (codecs/vp8_enc.c) on the planes webp_yuv.c makes of an 8-bit RGB image
 * of at most 1 Mpx, whatever its content (the planes are zero past where a detailed image stops
 * the conversion), at a quality from its size: libwebp decodes the file to the encoder's
 * reconstruction, sample for sample. */
static inline void fuzz_vp8(const struct codec_image *img) {
  int w = img->width, h = img->height, cw = (w + 1) / 2, ch = (h + 1) / 2;
  if (img->depth != 8 || img->channels != 3 || (uint64_t)w * (uint64_t)h > (1u << 20)) return;
  uint8_t *y = calloc((size_t)w * h, 1), *u = calloc((size_t)cw * ch, 1),
          *v = calloc((size_t)cw * ch, 1), *rec = NULL;
  FUZZ_CHECK(y != NULL && u != NULL && v != NULL);
  codec_webp_yuv(img->pixels, (size_t)w * 3, w, h, y, w, u, v, cw);
  struct codec_buf out = {NULL, 0, 0};
  FUZZ_CHECK(codec_vp8_encode(y, w, u, v, cw, w, h, (w * 31 + h) % 101, &out, &rec) == CODEC_OK);
  int dw, dh, ys, uvs;
  uint8_t *du, *dv, *dy = WebPDecodeYUV(out.data, out.len, &dw, &dh, &du, &dv, &ys, &uvs);
  FUZZ_CHECK(dy != NULL && dw == w && dh == h);
  size_t rs = (size_t)(w + 15) / 16 * 16, rh = (size_t)(h + 15) / 16 * 16;
  const uint8_t *ru = rec + rs * rh, *rv = ru + rs / 2 * (rh / 2);
  for (int r = 0; r < h; r++) FUZZ_CHECK(memcmp(dy + (size_t)r * ys, rec + r * rs, (size_t)w) == 0);
  for (int r = 0; r < ch; r++) {
    FUZZ_CHECK(memcmp(du + (size_t)r * uvs, ru + r * rs / 2, (size_t)cw) == 0);
    FUZZ_CHECK(memcmp(dv + (size_t)r * uvs, rv + r * rs / 2, (size_t)cw) == 0);
  }
  WebPFree(dy);
  free(rec), free(out.data), free(y), free(u), free(v);
}

/* The ICC profile reader on the upload: whatever it finds is well-formed, and a colour profile
 * goes into a PNG and comes back out of it byte for byte. */
static inline void fuzz_icc(const uint8_t *data, size_t size) {
  uint8_t *icc = NULL, *png = NULL, *back = NULL;
  size_t n = 0, len = 0, back_len = 0;
  FUZZ_CHECK(codec_icc_read(data, size, &icc, &n) == CODEC_OK);
  if (icc == NULL) return;
  int colours = codec_icc_colours(icc, n);
  FUZZ_CHECK(colours > 0 && n <= CODEC_ICC_MAX);
  if (colours != 4) {
    uint8_t px[3] = {1, 2, 3};
    struct codec_image img = {px, 1, 1, colours, 8, CODEC_PNG, 1};
    struct codec_encode_opts o = {.format = CODEC_PNG,
                                  .quality = 90,
                                  .compression = 1,
                                  .lossless = 0,
                                  .icc = icc,
                                  .icc_len = n};
    FUZZ_CHECK(codec_encode(&img, &o, &png, &len, NULL, 0) == CODEC_OK);
    FUZZ_CHECK(codec_icc_read(png, len, &back, &back_len) == CODEC_OK);
    FUZZ_CHECK(back_len == n && back != NULL && memcmp(back, icc, n) == 0);
  }
  free(back);
  free(png);
  free(icc);
}

/* The codec targets: decodes data when it starts with the magic bytes of want (so that each
 * target explores its own decoder), checks the image against the limits, and when it decodes,
 * encodes it back as PNG, as JPEG and (but for JPEG input, whose 8-bit gray and RGB the PNG
 * target covers, so the JPEG target keeps its speed) as lossless WebP. Returns the codec status,
 * or -1 for a skipped input. */
static inline int fuzz_codec(const uint8_t *data, size_t size, enum codec_format want) {
  static const struct codec_limits lim = {4096, 4096, 4u << 20}; /* 4 Mpx */
  struct codec_image img;
  char msg[256] = "";
  if (codec_sniff(data, size) != want) return -1;
  fuzz_icc(data, size);
  enum codec_status st = codec_decode(data, size, &lim, &img, msg, sizeof(msg));
  if (st != CODEC_OK) {
    FUZZ_CHECK(img.pixels == NULL && msg[0] != 0);
    return (int)st;
  }
  FUZZ_CHECK(img.pixels != NULL && img.format == want);
  FUZZ_CHECK(img.width >= 1 && img.width <= 4096 && img.height >= 1 && img.height <= 4096);
  FUZZ_CHECK((uint64_t)img.width * (uint64_t)img.height <= lim.max_pixels);
  FUZZ_CHECK(img.channels >= 1 && img.channels <= 4 && (img.depth == 8 || img.depth == 16));
  FUZZ_CHECK(img.orientation >= 1 && img.orientation <= 8);
  fuzz_round_trip(&img, CODEC_PNG, &lim);
  fuzz_round_trip(&img, CODEC_JPEG, &lim);
  if (want != CODEC_JPEG) fuzz_round_trip(&img, CODEC_WEBP, &lim);
  fuzz_vp8(&img);
  codec_image_free(&img);
  return (int)st;
}

#endif

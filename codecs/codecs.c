/* codecs.c: the format-neutral front of the codecs module.
 *
 * It probes and names formats and statuses, checks the arguments of codec_decode, codec_encode
 * and codec_encode_held, and hands the work to png.c, png_write.c, jpeg.c, webp.c or data.c; for
 * JPEG with a profile it adds the APP2 segments (icc.c) to libjpeg's file. The helpers those files
 * share (the allocator, the sentences, the size check, the 8-bit conversion, format sniffing) live
 * in common.c, so the format files depend on common.c only and never call back into this file. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs_int.h"

/* PNG: the IHDR chunk right after the signature (colour type 0 gray, 2 RGB, 3 palette, 4 gray
 * and alpha, 6 RGBA). */
static int png_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  static const int channels[] = {1, 0, 3, 4, 2, 0, 4};
  if (len < 33 || codec_be32(buf + 8) != 13 || memcmp(buf + 12, "IHDR", 4) != 0) return -1;
  uint32_t w = codec_be32(buf + 16), h = codec_be32(buf + 20);
  int type = buf[25];
  if (w == 0 || h == 0 || w > INT32_MAX || h > INT32_MAX || type > 6 || !channels[type]) return -1;
  *out = (struct codec_shape){(int)w, (int)h, channels[type], buf[24] == 16 ? 16 : 8};
  return 0;
}

int codec_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  struct codec_jpeg_info info;
  struct codec_limits none = {0, 0, 0};
  char msg[128];
  switch (codec_sniff(buf, len)) {
  case CODEC_PNG:
    return png_probe(buf, len, out);
  case CODEC_JPEG:
    if (codec_jpeg_probe(buf, len, &none, &info, msg, sizeof(msg)) != CODEC_OK) return -1;
    *out = (struct codec_shape){info.width, info.height, info.channels, 8};
    return 0;
  case CODEC_WEBP:
    return codec_webp_probe(buf, len, out);
  default:
    return -1;
  }
}

const char *codec_format_name(enum codec_format f) {
  switch (f) {
  case CODEC_PNG:
    return "png";
  case CODEC_JPEG:
    return "jpeg";
  case CODEC_WEBP:
    return "webp";
  case CODEC_RAW:
    return "raw";
  case CODEC_NPY:
    return "npy";
  default:
    return NULL;
  }
}

enum codec_format codec_format_from_name(const char *name) {
  if (name == NULL) return CODEC_NONE;
  if (strcmp(name, "png") == 0) return CODEC_PNG;
  if (strcmp(name, "jpeg") == 0 || strcmp(name, "jpg") == 0) return CODEC_JPEG;
  if (strcmp(name, "webp") == 0) return CODEC_WEBP;
  if (strcmp(name, "raw") == 0) return CODEC_RAW;
  if (strcmp(name, "npy") == 0) return CODEC_NPY;
  return CODEC_NONE;
}

const char *codec_mime(enum codec_format f) {
  switch (f) {
  case CODEC_PNG:
    return "image/png";
  case CODEC_JPEG:
    return "image/jpeg";
  case CODEC_WEBP:
    return "image/webp";
  case CODEC_RAW:
    return "application/octet-stream";
  case CODEC_NPY:
    return "application/x-npy";
  default:
    return NULL;
  }
}

const char *codec_status_msg(enum codec_status s) {
  switch (s) {
#define X(e, text)                                                                                 \
  case CODEC_##e:                                                                                  \
    return text;
    CODEC_STATUSES(X)
#undef X
  }
  return "unknown codec status";
}

enum codec_status codec_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                               struct codec_image *out, char *msg, size_t msglen) {
  enum codec_status st;
  if (msg != NULL && msglen > 0) msg[0] = '\0';
  if (out == NULL) {
    codec_msgf(msg, msglen, "codec_decode was called without an output image");
    return CODEC_UNSUPPORTED;
  }
  memset(out, 0, sizeof *out);
  switch (codec_sniff(buf, len)) {
  case CODEC_PNG:
    st = codec_png_decode(buf, len, lim, out, msg, msglen);
    break;
  case CODEC_JPEG:
    st = codec_jpeg_decode(buf, len, lim, out, msg, msglen);
    break;
  case CODEC_WEBP:
    st = codec_webp_decode(buf, len, lim, out, msg, msglen);
    break;
  default:
    if (buf == NULL || len == 0) codec_msgf(msg, msglen, "the image data is empty");
    st = CODEC_UNKNOWN;
    break;
  }
  if (st != CODEC_OK) {
    codec_image_free(out);
    memset(out, 0, sizeof *out);
    if (msg != NULL && msglen > 0 && msg[0] == '\0')
      codec_msgf(msg, msglen, "%s", codec_status_msg(st));
  }
  return st;
}

/* Says why img cannot be encoded, or returns NULL when it can be. */
static const char *encode_problem(const struct codec_image *img) {
  if (img == NULL || img->pixels == NULL) return "there is no image to encode";
  if (img->width < 1 || img->height < 1) return "the image has a width or height of zero";
  if (img->channels < 1 || img->channels > 4) return "the image must have 1 to 4 channels";
  if (img->depth != 8 && img->depth != 16) return "the image must have 8- or 16-bit samples";
  return NULL;
}

/* Whether o can be used; if not, says why in msg. */
static int options_ok(const struct codec_encode_opts *o, char *msg, size_t msglen) {
  int level_ok = o->compression >= 0 && o->compression <= 9;
  int quality_ok = o->quality >= 1 && o->quality <= 100;
  if (o->format == CODEC_PNG && !level_ok)
    codec_msgf(msg, msglen, "PNG compression %d is outside 0..9", o->compression);
  else if (o->format == CODEC_PNG &&
           (o->png_filter < CODEC_PNG_FILTER_AUTO || o->png_filter > CODEC_PNG_FILTER_ADAPTIVE))
    codec_msgf(msg, msglen, "PNG filter %d is not one of codec_png_filter", (int)o->png_filter);
  else if (o->format == CODEC_JPEG && !quality_ok)
    codec_msgf(msg, msglen, "JPEG quality %d is outside 1..100", o->quality);
  else if (o->format == CODEC_WEBP && o->effort_set && (o->effort < 0 || o->effort > 6))
    codec_msgf(msg, msglen, "WebP effort %d is outside 0..6", o->effort);
  else if (o->format == CODEC_WEBP && !o->lossless && !quality_ok)
    codec_msgf(msg, msglen, "WebP quality %d is outside 1..100", o->quality);
  else if (o->format != CODEC_PNG && o->format != CODEC_JPEG && o->format != CODEC_WEBP &&
           o->format != CODEC_RAW && o->format != CODEC_NPY)
    codec_msgf(msg, msglen, "the output format must be PNG, JPEG, WebP, raw or npy");
  else
    return 1;
  return 0;
}

/* libjpeg's file (jpeg.c), with o->icc inserted when there is one. */
static enum codec_status jpeg_with_icc(const struct codec_image *img,
                                       const struct codec_encode_opts *o, uint8_t **out,
                                       size_t *outlen, char *msg, size_t msglen) {
  enum codec_status st = codec_jpeg_encode(img, o->quality, out, outlen, msg, msglen);
  if (st != CODEC_OK || o->icc == NULL) return st;
  uint8_t *with;
  size_t with_len;
  st = codec_jpeg_insert_icc(*out, *outlen, o->icc, o->icc_len, &with, &with_len);
  codec_free(*out);
  *out = with;
  *outlen = with_len;
  if (st != CODEC_OK) codec_msgf(msg, msglen, "could not add the ICC profile to the JPEG file");
  return st;
}

enum codec_status codec_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                               uint8_t **out, size_t *outlen, char *msg, size_t msglen) {
  if (msg != NULL && msglen > 0) msg[0] = '\0';
  if (out == NULL || outlen == NULL || o == NULL) {
    codec_msgf(msg, msglen, "codec_encode was called without options or an output buffer");
    return CODEC_UNSUPPORTED;
  }
  *out = NULL;
  *outlen = 0;
  const char *problem = encode_problem(img);
  if (problem != NULL) {
    codec_msgf(msg, msglen, "%s", problem);
    return CODEC_UNSUPPORTED;
  }
  if (!options_ok(o, msg, msglen)) return CODEC_UNSUPPORTED;
  if (o->format == CODEC_RAW || o->format == CODEC_NPY)
    return codec_data_encode(img, o->format, out, outlen, msg, msglen);
  struct codec_encode_opts eo = *o;
  int colours = o->format == CODEC_WEBP || img->channels >= 3 ? 3 : 1; /* what the file holds */
  if (codec_icc_colours(o->icc, o->icc_len) != colours) eo.icc = NULL, eo.icc_len = 0;
  if (o->format == CODEC_PNG && o->png_libpng)
    return codec_png_encode(img, o->compression, out, outlen, msg, msglen);
  if (o->format == CODEC_PNG) return codec_png_write(img, &eo, out, outlen, msg, msglen);
  if (o->format == CODEC_JPEG) return jpeg_with_icc(img, &eo, out, outlen, msg, msglen);
  return codec_webp_encode(img, &eo, out, outlen, msg, msglen);
}

enum codec_status codec_encode_held(const struct codec_image *img,
                                    const struct codec_encode_opts *o,
                                    const struct codec_vp8_analyser *an, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  if (msg != NULL && msglen > 0) msg[0] = '\0';
  *out = NULL;
  *outlen = 0;
  if (img == NULL || o == NULL || an == NULL || o->format != CODEC_WEBP || !options_ok(o, NULL, 0))
    return CODEC_UNSUPPORTED; /* codec_encode says why, from the pixels */
  struct codec_encode_opts eo = *o;
  if (codec_icc_colours(o->icc, o->icc_len) != 3) eo.icc = NULL, eo.icc_len = 0;
  return codec_webp_encode_held(img, &eo, an, out, outlen, msg, msglen);
}

void codec_image_free(struct codec_image *img) {
  if (img == NULL) return;
  codec_free(img->pixels);
  img->pixels = NULL;
}

enum codec_status codec_decode_file(const char *path, struct codec_image *out) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  long n = -1;
  memset(out, 0, sizeof(*out));
  if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
    buf = codec_malloc((size_t)n + 1);
  enum codec_status st = CODEC_UNKNOWN;
  if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n)
    st = codec_decode(buf, (size_t)n, &(struct codec_limits){0, 0, 0}, out, NULL, 0);
  codec_free(buf);
  if (f) fclose(f);
  return st;
}

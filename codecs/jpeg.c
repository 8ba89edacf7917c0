/* jpeg.c: JPEG decode and encode with libjpeg-turbo's TurboJPEG API (2.1), from and to memory.
 *
 * TurboJPEG keeps libjpeg's setjmp inside itself and returns -1 with a message, so this file needs
 * none. Decoding reads the header first, refuses CMYK and YCCK, reads the EXIF orientation and
 * checks the upright width, height and pixel count against the caller's limits before it
 * allocates anything. It decodes with TJFLAG_STOPONWARNING, so every libjpeg warning (a truncated
 * file, bad Huffman data, extraneous bytes) is a corrupt file, the same policy as PNG; and with
 * TJFLAG_LIMITSCANS, so a progressive file with an absurd number of scans is refused instead of
 * burning CPU. Gray JPEGs decode to 1 channel, everything else to RGB; the EXIF orientation is
 * then applied (exif.c).
 *
 * Encoding writes 8-bit gray (1 or 2 channels in) or RGB (3 or 4 in). 16-bit samples are scaled
 * to 8 bits with rounding, alpha is composited over white and dropped, both in one step so there
 * is a single rounding. Chroma is 4:4:4 at quality 90 and above and 4:2:0 below, as libvips
 * chooses. The output carries no EXIF, since the pixels are already upright. */
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "codecs_int.h"

#define DECODE_FLAGS     (TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)
#define JPEG_MAX_SIDE    65500 /* libjpeg's JPEG_MAX_DIMENSION */
#define QUALITY_FULL_444 90    /* from this quality up, chroma is not subsampled */

/* Reads the frame header: size and channels (1 for gray, 3 for YCbCr or RGB). */
static enum codec_status read_header(tjhandle tj, const uint8_t *buf, size_t len, int *w, int *h,
                                     int *channels, char *msg, size_t msglen) {
  int subsamp = -1, colorspace = -1;
  *w = *h = 0;
  if (tjDecompressHeader3(tj, buf, (unsigned long)len, w, h, &subsamp, &colorspace) != 0) {
    codec_msgf(msg, msglen, "the JPEG header is corrupt (libjpeg: %s)", tjGetErrorStr2(tj));
    return CODEC_CORRUPT;
  }
  /* A file cut before its frame header reads as a tables-only stream: success, no size. */
  if (*w < 1 || *h < 1) {
    codec_msgf(msg, msglen, "the JPEG file is truncated or corrupt: it has no frame header");
    return CODEC_CORRUPT;
  }
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
    codec_msgf(msg, msglen, "CMYK JPEG images are not supported; convert the image to RGB first");
    return CODEC_UNSUPPORTED;
  }
  *channels = colorspace == TJCS_GRAY ? 1 : 3;
  return CODEC_OK;
}

static enum codec_status decode_with(tjhandle tj, const uint8_t *buf, size_t len,
                                     const struct codec_limits *lim, struct codec_image *out,
                                     char *msg, size_t msglen) {
  int w, h, channels;
  enum codec_status st = read_header(tj, buf, len, &w, &h, &channels, msg, msglen);
  if (st != CODEC_OK) return st;
  int o = codec_exif_orientation(buf, len);
  size_t nbytes; /* limits apply to the upright image */
  st = codec_check_size((uint64_t)(o >= 5 ? h : w), (uint64_t)(o >= 5 ? w : h), (unsigned)channels,
                        lim, &nbytes, msg, msglen);
  if (st != CODEC_OK) return st;
  uint8_t *pixels = malloc(nbytes);
  if (pixels == NULL) {
    codec_msgf(msg, msglen, "out of memory for a %dx%d JPEG image", w, h);
    return CODEC_NOMEM;
  }
  if (tjDecompress2(tj, buf, (unsigned long)len, pixels, w, 0, h,
                    channels == 1 ? TJPF_GRAY : TJPF_RGB, DECODE_FLAGS) != 0) {
    codec_msgf(msg, msglen, "the JPEG data is corrupt or truncated (libjpeg: %s)",
               tjGetErrorStr2(tj));
    free(pixels);
    return CODEC_CORRUPT;
  }
  *out = (struct codec_image){.pixels = pixels,
                              .width = w,
                              .height = h,
                              .channels = channels,
                              .depth = 8,
                              .format = CODEC_JPEG,
                              .orientation = o};
  if (codec_orient(out, o) != CODEC_OK) {
    codec_msgf(msg, msglen, "out of memory turning a %dx%d JPEG image upright", w, h);
    return CODEC_NOMEM; /* codec_decode frees out */
  }
  return CODEC_OK;
}

enum codec_status codec_jpeg_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen) {
  if ((unsigned long)len != len) {
    codec_msgf(msg, msglen, "the JPEG file is too large to decode");
    return CODEC_TOO_LARGE;
  }
  tjhandle tj = tjInitDecompress();
  if (tj == NULL) {
    codec_msgf(msg, msglen, "could not start the JPEG decoder (%s)", tjGetErrorStr2(NULL));
    return CODEC_NOMEM;
  }
  enum codec_status st = decode_with(tj, buf, len, lim, out, msg, msglen);
  tjDestroy(tj);
  return st;
}

static unsigned sample_at(const uint8_t *p, int i, int depth) {
  if (depth == 8) return p[i];
  uint16_t v;
  memcpy(&v, p + 2 * i, sizeof v);
  return v;
}

/* Converts img to 8-bit gray (1, 2 channels) or RGB (3, 4): each output sample is
 * round(255 * (v * a + M * (M - a)) / M^2) with M = 255 or 65535 and a = M without alpha, i.e.
 * the colour composited over white, scaled to 8 bits, rounded once. Returns a malloc'd buffer of
 * width * height * (1 or 3) bytes, or NULL. */
static uint8_t *to_gray_or_rgb8(const struct codec_image *img) {
  int in_ch = img->channels, out_ch = in_ch <= 2 ? 1 : 3, alpha = in_ch == 2 || in_ch == 4;
  size_t npix = (size_t)img->width * (size_t)img->height, in_px = (size_t)in_ch * (img->depth / 8);
  uint64_t max = img->depth == 8 ? 255 : 65535, den = max * max;
  uint8_t *dst = malloc(npix * (size_t)out_ch);
  if (dst == NULL) return NULL;
  for (size_t i = 0; i < npix; i++) {
    const uint8_t *p = img->pixels + i * in_px;
    uint64_t a = alpha ? sample_at(p, in_ch - 1, img->depth) : max;
    for (int c = 0; c < out_ch; c++) {
      uint64_t v = sample_at(p, c, img->depth);
      dst[i * (size_t)out_ch + (size_t)c] =
          (uint8_t)(((v * a + max * (max - a)) * 255 + den / 2) / den);
    }
  }
  return dst;
}

static enum codec_status compress_with(tjhandle tj, const uint8_t *src,
                                       const struct codec_image *img, int out_ch, int quality,
                                       uint8_t **out, size_t *outlen, char *msg, size_t msglen) {
  unsigned char *jpeg = NULL;
  unsigned long jlen = 0;
  int samp = out_ch == 1 ? TJSAMP_GRAY : quality >= QUALITY_FULL_444 ? TJSAMP_444 : TJSAMP_420;
  if (tjCompress2(tj, src, img->width, 0, img->height, out_ch == 1 ? TJPF_GRAY : TJPF_RGB, &jpeg,
                  &jlen, samp, quality, 0) != 0) {
    codec_msgf(msg, msglen, "libjpeg could not write the image: %s", tjGetErrorStr2(tj));
    tjFree(jpeg);
    return CODEC_UNSUPPORTED;
  }
  *out = malloc(jlen); /* the caller frees with free(), not tjFree() */
  if (*out == NULL) {
    tjFree(jpeg);
    codec_msgf(msg, msglen, "out of memory encoding the JPEG image");
    return CODEC_NOMEM;
  }
  memcpy(*out, jpeg, jlen);
  *outlen = jlen;
  tjFree(jpeg);
  return CODEC_OK;
}

enum codec_status codec_jpeg_encode(const struct codec_image *img, int quality, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  if (img->width > JPEG_MAX_SIDE || img->height > JPEG_MAX_SIDE) {
    codec_msgf(msg, msglen, "JPEG cannot hold a %dx%d image; the largest side is %d pixels",
               img->width, img->height, JPEG_MAX_SIDE);
    return CODEC_UNSUPPORTED;
  }
  int out_ch = img->channels <= 2 ? 1 : 3;
  int direct = img->depth == 8 && (img->channels == 1 || img->channels == 3);
  uint8_t *converted = direct ? NULL : to_gray_or_rgb8(img);
  if (!direct && converted == NULL) {
    codec_msgf(msg, msglen, "out of memory converting the image for JPEG");
    return CODEC_NOMEM;
  }
  tjhandle tj = tjInitCompress();
  enum codec_status st = CODEC_NOMEM;
  if (tj == NULL)
    codec_msgf(msg, msglen, "could not start the JPEG encoder");
  else
    st = compress_with(tj, direct ? img->pixels : converted, img, out_ch, quality, out, outlen, msg,
                       msglen);
  if (tj != NULL) tjDestroy(tj);
  free(converted);
  return st;
}

/* webp.c: WebP decode and encode with libwebp (1.2), from and to memory.
 *
 * Decoding reads the header with WebPGetFeatures, which allocates nothing: an animated file is
 * refused there, and width, height and pixel count are checked against the caller's limits
 * before the pixel buffer is allocated (with codec_malloc). libwebp then decodes straight into
 * that buffer, as 8-bit RGB, or RGBA (not premultiplied) when the file has alpha. Lossy (VP8)
 * and lossless (VP8L) files, with or without an extended header (VP8X) and alpha (ALPH), all go
 * the same way. WebPDecode is told that it has the whole file, so a file cut short anywhere is
 * CODEC_CORRUPT, like bad data. EXIF and XMP are ignored: samples are passed through as stored,
 * and the EXIF orientation is not applied; an ICC profile is read from the bytes by icc.c.
 *
 * Encoding takes 8-bit RGB or RGBA as it is; anything else is converted first (codec_to_8bit:
 * 16-bit samples scaled to 8 bits, gray repeated into RGB, alpha kept). Lossy output uses
 * libwebp's default preset at the quality asked for. At effort 2 an image whose luma is smooth
 * (codec_webp_smooth) is coded at one quality step lower: an RGB one is converted to YUV 4:2:0 by
 * webp_yuv.c (three times as fast as libwebp's import) and coded by blurd's own VP8 encoder
 * (vp8_enc.c: 16x16 predictors only, one pass), in two thirds of the CPU time of libwebp's
 * fastest setting (one segment) for a smaller file at a higher PSNR; an RGBA one goes to libwebp as
 * one segment, which skips its analysis pass (docs/methods.md, "WebP effort"). Lossless output uses
 * libwebp's lossless preset WEBP_LOSSLESS_LEVEL and keeps the colour of transparent pixels (exact),
 * so it decodes to exactly the samples it was given. An ICC profile is added with WebPMux (a VP8X
 * header and an ICCP chunk) after libwebp has written the file. The file grows in a codec_buf
 * (codec_realloc), so allocation-failure tests reach the encoder's output; libwebp's own working
 * memory is its own malloc's. */
#include <stdio.h>
#include <string.h>
#include <webp/decode.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include "codecs_int.h"

/* libwebp's lossless preset (cwebp -z): 0 fastest .. 9 smallest. photo_1080p.jpg blurred at
 * sigma 3 and 40 took 1,135,330 and 208,830 bytes at 2, against 1,160,186 and 272,822 at 1 and
 * 1,030,460 and 187,018 at cwebp's default 6, which took up to twice as long as 2; libpng at
 * level 6 took 1,449,993 and 351,898 bytes. On the photograph itself 9 took 16 times as long as
 * 6. */
#define WEBP_LOSSLESS_LEVEL 2

/* A sentence for a libwebp decoder status other than OK, and its codec status. */
static enum codec_status decode_failure(VP8StatusCode vs, size_t len, char *msg, size_t msglen) {
  switch (vs) {
  case VP8_STATUS_NOT_ENOUGH_DATA:
    codec_msgf(msg, msglen, "the WebP file is truncated: it ends after %zu bytes", len);
    return CODEC_CORRUPT;
  case VP8_STATUS_OUT_OF_MEMORY:
    codec_msgf(msg, msglen, "out of memory decoding the WebP image");
    return CODEC_NOMEM;
  case VP8_STATUS_UNSUPPORTED_FEATURE:
    codec_msgf(msg, msglen, "the WebP file uses a feature libwebp does not support");
    return CODEC_UNSUPPORTED;
  case VP8_STATUS_BITSTREAM_ERROR:
    codec_msgf(msg, msglen, "the WebP data is corrupt (libwebp: bitstream error)");
    return CODEC_CORRUPT;
  default:
    codec_msgf(msg, msglen, "the WebP data is corrupt (libwebp status %d)", (int)vs);
    return CODEC_CORRUPT;
  }
}

int codec_webp_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  WebPBitstreamFeatures f;
  if (WebPGetFeatures(buf, len, &f) != VP8_STATUS_OK || f.width <= 0 || f.height <= 0) return -1;
  *out = (struct codec_shape){f.width, f.height, f.has_alpha ? 4 : 3, 8};
  return 0;
}

enum codec_status codec_webp_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {
    codec_msgf(msg, msglen, "libwebp's decoder does not match the headers it was built with");
    return CODEC_UNSUPPORTED;
  }
  VP8StatusCode vs = WebPGetFeatures(buf, len, &config.input);
  if (vs != VP8_STATUS_OK) return decode_failure(vs, len, msg, msglen);
  if (config.input.has_animation) {
    codec_msgf(msg, msglen, "animated WebP is not supported; send a still image (one frame)");
    return CODEC_UNSUPPORTED;
  }
  int w = config.input.width, h = config.input.height, channels = config.input.has_alpha ? 4 : 3;
  size_t nbytes;
  enum codec_status st = codec_check_size((uint64_t)(w > 0 ? w : 0), (uint64_t)(h > 0 ? h : 0),
                                          (unsigned)channels, lim, &nbytes, msg, msglen);
  if (st != CODEC_OK) return st;
  uint8_t *pixels = codec_malloc(nbytes);
  if (pixels == NULL) {
    codec_msgf(msg, msglen, "out of memory for a %dx%d WebP image", w, h);
    return CODEC_NOMEM;
  }
  config.output.colorspace = channels == 4 ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA = (WebPRGBABuffer){pixels, w * channels, nbytes};
  vs = WebPDecode(buf, len, &config);
  WebPFreeDecBuffer(&config.output); /* the pixels are ours: this frees nothing of them */
  if (vs != VP8_STATUS_OK) {
    codec_free(pixels);
    return decode_failure(vs, len, msg, msglen);
  }
  *out = (struct codec_image){pixels, w, h, channels, 8, CODEC_WEBP, 1};
  return CODEC_OK;
}

struct webp_out {        /* pic.custom_ptr */
  struct codec_buf file; /* the encoded file so far */
  int oom;               /* growing it failed */
};

static int on_write(const uint8_t *data, size_t n, const WebPPicture *pic) {
  struct webp_out *o = pic->custom_ptr;
  if (codec_buf_append(&o->file, data, n) == CODEC_OK) return 1;
  o->oom = 1;
  return 0; /* WebPEncode stops with VP8_ENC_ERROR_BAD_WRITE */
}

/* Imports the 8-bit RGB or RGBA pixels src (rows stride bytes apart) into pic for lossy
 * output at libwebp's method, and applies the one-segment rule to config. libwebp's analysis pass
 * (a DCT histogram of every macroblock under each intra-16 and chroma predictor, to split the
 * image into four segments quantised apart) is about 30% of an effort-2 encode and is skipped
 * when there is one segment. On smooth images (blurs) one segment at a quality one lower gives
 * about the same size and PSNR (the 1080p photograph blurred at sigma 12: +2.5%, +0.17 dB) in 70%
 * of the time, where one segment at the same quality would be 7% larger; on detailed ones
 * (photographs, pixelated images) the segments save 10 to 15% of the size, so they keep them.
 * Efforts 0 and 1 analyse whatever the segments (their mode choice needs it), and 3 to 6 are
 * asked for for size. A smooth RGB image is converted by codec_webp_yuv, in a third of the time
 * of libwebp's import, and *own set: vp8_enc.c codes it; an RGBA one by libwebp, with its alpha.
 * Returns 0 when libwebp fails (pic->error_code says why). */
static int import_lossy(WebPPicture *pic, WebPConfig *config, const uint8_t *src, int channels,
                        int stride, int *own) {
  int smooth = 0, ok = 1;
  if (channels == 3 && config->method == 2) {
    if (!WebPPictureAlloc(pic)) return 0;
    smooth = *own = codec_webp_yuv(src, (size_t)stride, pic->width, pic->height, pic->y,
                                   pic->y_stride, pic->u, pic->v, pic->uv_stride);
  }
  if (!smooth) {
    ok = channels == 4 ? WebPPictureImportRGBA(pic, src, stride)
                       : WebPPictureImportRGB(pic, src, stride);
    smooth = ok && channels == 4 && config->method == 2 &&
             codec_webp_smooth(pic->y, pic->y_stride, pic->width, pic->height);
  }
  if (smooth) {
    config->segments = 1;
    config->quality = (float)CODEC_WEBP_SMOOTH_QUALITY((int)config->quality);
  }
  return ok;
}

/* Encodes the 8-bit RGB or RGBA pixels src (img's size, channels channels) into e. */
static enum codec_status encode_run(const struct codec_image *img, const uint8_t *src, int channels,
                                    const struct codec_encode_opts *o, struct webp_out *e,
                                    char *msg, size_t msglen) {
  WebPConfig config;
  WebPPicture pic;
  int own = 0, ok = WebPConfigInit(&config) && WebPPictureInit(&pic);
  if (ok && o->lossless) ok = WebPConfigLosslessPreset(&config, WEBP_LOSSLESS_LEVEL);
  if (ok && !o->lossless) ok = WebPConfigPreset(&config, WEBP_PRESET_DEFAULT, (float)o->quality);
  if (!ok) {
    codec_msgf(msg, msglen, "libwebp's encoder does not match the headers it was built with");
    return CODEC_UNSUPPORTED;
  }
  config.exact = o->lossless; /* keep the colour under alpha 0, so lossless is exact */
  if (!o->lossless) config.method = o->effort_set ? o->effort : CODEC_WEBP_EFFORT_DEFAULT;
  pic.use_argb = o->lossless;
  pic.width = img->width;
  pic.height = img->height;
  pic.writer = on_write;
  pic.custom_ptr = e;
  int stride = img->width * channels;
  if (o->lossless)
    ok = channels == 4 ? WebPPictureImportRGBA(&pic, src, stride)
                       : WebPPictureImportRGB(&pic, src, stride);
  else
    ok = import_lossy(&pic, &config, src, channels, stride, &own);
  if (ok && own) { /* blurd's encoder; libwebp's for a frame too large for it */
    enum codec_status st =
        codec_vp8_encode(pic.y, pic.y_stride, pic.u, pic.v, pic.uv_stride, img->width, img->height,
                         (int)config.quality, &e->file, NULL);
    if (st != CODEC_TOO_LARGE) {
      WebPPictureFree(&pic);
      if (st != CODEC_OK) codec_msgf(msg, msglen, "out of memory encoding the WebP image");
      if (st == CODEC_OK && o->encoder) *o->encoder = "blurd-vp8";
      return st;
    }
  }
  if (ok) ok = WebPEncode(&config, &pic);
  if (o->encoder) *o->encoder = "libwebp";
  enum WebPEncodingError err = pic.error_code;
  WebPPictureFree(&pic);
  if (ok) return CODEC_OK;
  if (e->oom || err == VP8_ENC_ERROR_OUT_OF_MEMORY ||
      err == VP8_ENC_ERROR_BITSTREAM_OUT_OF_MEMORY) {
    codec_msgf(msg, msglen, "out of memory encoding the WebP image");
    return CODEC_NOMEM;
  }
  codec_msgf(msg, msglen, "libwebp could not write the image (error %d)", (int)err);
  return CODEC_UNSUPPORTED;
}

/* Adds the ICC profile icc to the WebP file in e (WebPMux: a VP8X header and an ICCP chunk). */
static enum codec_status add_icc(struct webp_out *e, const uint8_t *icc, size_t icc_len) {
  WebPData file = {e->file.data, e->file.len}, profile = {icc, icc_len}, joined = {NULL, 0};
  WebPMux *mux = WebPMuxCreate(&file, 0);
  int ok = mux != NULL && WebPMuxSetChunk(mux, "ICCP", &profile, 0) == WEBP_MUX_OK &&
           WebPMuxAssemble(mux, &joined) == WEBP_MUX_OK;
  WebPMuxDelete(mux);
  uint8_t *p = ok ? codec_malloc(joined.size) : NULL;
  if (p != NULL) {
    memcpy(p, joined.bytes, joined.size);
    codec_free(e->file.data);
    e->file = (struct codec_buf){p, joined.size, joined.size};
  }
  WebPDataClear(&joined);
  return p != NULL ? CODEC_OK : CODEC_NOMEM; /* WebPMux fails only for memory on its own file */
}

/* After the encode (st): the ICC profile o carries added, and e's file handed to *out; on
 * failure e's file freed. */
static enum codec_status finish(struct webp_out *e, enum codec_status st,
                                const struct codec_encode_opts *o, uint8_t **out, size_t *outlen,
                                char *msg, size_t msglen) {
  if (st == CODEC_OK && o->icc != NULL && (st = add_icc(e, o->icc, o->icc_len)) != CODEC_OK)
    codec_msgf(msg, msglen, "out of memory adding the ICC profile to the WebP file");
  if (st != CODEC_OK) {
    codec_free(e->file.data);
    return st;
  }
  codec_buf_take(&e->file, out, outlen);
  return CODEC_OK;
}

enum codec_status codec_webp_encode(const struct codec_image *img,
                                    const struct codec_encode_opts *o, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  if (img->width > WEBP_MAX_DIMENSION || img->height > WEBP_MAX_DIMENSION) {
    codec_msgf(msg, msglen, "WebP cannot hold a %dx%d image; the largest side is %d pixels",
               img->width, img->height, WEBP_MAX_DIMENSION);
    return CODEC_UNSUPPORTED;
  }
  int channels = img->channels;
  int direct = img->depth == 8 && (channels == 3 || channels == 4);
  uint8_t *converted = direct ? NULL : codec_to_8bit(img, 3, 1, &channels);
  if (!direct && converted == NULL) {
    codec_msgf(msg, msglen, "out of memory converting the image for WebP");
    return CODEC_NOMEM;
  }
  struct webp_out e = {{NULL, 0, 0}, 0};
  enum codec_status st =
      encode_run(img, direct ? img->pixels : converted, channels, o, &e, msg, msglen);
  codec_free(converted);
  return finish(&e, st, o, out, outlen, msg, msglen);
}

enum codec_status codec_webp_from_vp8(const struct codec_vp8_mbs *a,
                                      const struct codec_encode_opts *o, uint8_t **out,
                                      size_t *outlen, char *msg, size_t msglen) {
  struct webp_out e = {{NULL, 0, 0}, 0};
  struct codec_encode_opts eo = *o; /* a profile goes with an RGB image only, as codec_encode's */
  if (codec_icc_colours(o->icc, o->icc_len) != 3) eo.icc = NULL, eo.icc_len = 0;
  enum codec_status st = codec_vp8_write(a, &e.file);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory encoding the WebP image");
  if (st == CODEC_OK && o->encoder) *o->encoder = "blurd-vp8";
  return finish(&e, st, &eo, out, outlen, msg, msglen);
}

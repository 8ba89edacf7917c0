/* webp.c: WebP decode and encode, from and to memory. libwebp (1.2) decodes every file, through
 * its incremental decoder, and encodes lossless files, lossy ones at efforts other than 2, and
 * what is not smooth; blurd's own VP8 encoder (vp8_enc.c) codes lossy effort 2 of a smooth RGB
 * image, from codec_webp_yuv's planes or from the first pass of an analyser where the image is
 * held (codec_encode_held). The file grows in a codec_buf, and an ICC profile is added with
 * WebPMux. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <webp/decode.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include "formats.h"

/* libwebp's lossless preset (cwebp -z): 0 fastest .. 9 smallest (docs/engineering-notes.md,
 * "Notes moved from the code's comments"). */
#define WEBP_LOSSLESS_LEVEL 2

/* Rates of libwebp's encoder in ns a pixel, at least twice those measured on noise at quality 100
 * (BLURD_STOP_BENCH in tests/unit_codecs.c prints them; docs/engineering-notes.md, "Every stage
 * stops at the deadline"): lossy by effort, what an alpha plane adds to it by effort, and
 * lossless. An encode predicted to take CHILD_MS or more runs in a child process (run_libwebp). */
static const double ns_lossy[7] = {150, 170, 180, 280, 280, 320, 740};
static const double ns_alpha[7] = {180, 270, 280, 390, 650, 810, 18000};
#define NS_LOSSLESS 380
#define CHILD_MS    100

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

/* Bytes of the file fed to the incremental decoder at a time: about a megapixel's worth of it,
 * from 4 to 64 KB, so that each piece decodes in milliseconds however well the file compresses. */
static size_t feed_bytes(size_t len, uint64_t pixels) {
  size_t n = (size_t)(len / (pixels / (1u << 20) + 1));
  return n < 4096 ? 4096 : n > 65536 ? 65536 : n;
}

/* Decodes buf into config's output a piece at a time (the pixels WebPDecode would give), asking
 * the thread's hook before each piece; *stopped is set when it said stop. Returns libwebp's
 * status, NOT_ENOUGH_DATA for a file that ends before its image. */
static VP8StatusCode decode_pieces(const uint8_t *buf, size_t len, WebPDecoderConfig *config,
                                   uint64_t pixels, int *stopped) {
  WebPIDecoder *idec = WebPIDecode(NULL, 0, config);
  if (idec == NULL) return VP8_STATUS_OUT_OF_MEMORY;
  size_t step = feed_bytes(len, pixels), fed = 0;
  VP8StatusCode vs = VP8_STATUS_SUSPENDED;
  while (vs == VP8_STATUS_SUSPENDED && fed < len && !(*stopped = codec_stopped())) {
    fed = len - fed > step ? fed + step : len;
    vs = WebPIUpdate(idec, buf, fed); /* the file so far, in place: nothing is copied */
  }
  WebPIDelete(idec);
  return vs == VP8_STATUS_SUSPENDED ? VP8_STATUS_NOT_ENOUGH_DATA : vs;
}

/* The header is read with WebPGetFeatures, which allocates nothing: an animated file is refused
 * there, and the size checked against lim before the pixel buffer is allocated (codec_malloc).
 * libwebp then decodes into that buffer, as 8-bit RGB, or RGBA (not premultiplied) when the file
 * has alpha: lossy (VP8) and lossless (VP8L) files, with or without an extended header (VP8X)
 * and alpha (ALPH), all through decode_pieces. A file that ends before its image does is
 * CODEC_CORRUPT, like bad data. EXIF and XMP are ignored: the samples are passed through as
 * stored, the EXIF orientation is not applied; icc.c reads an ICC profile from the bytes. */
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
  /* The file is what its RIFF header says, as WebPDecode takes it: the incremental decoder would
   * finish an image whose last bytes are missing, where they make no pixel. */
  size_t riff = (size_t)codec_be32((const uint8_t[4]){buf[7], buf[6], buf[5], buf[4]});
  if (riff > len - 8) return decode_failure(VP8_STATUS_NOT_ENOUGH_DATA, len, msg, msglen);
  len = riff + 8;
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
  int stopped = 0;
  vs = decode_pieces(buf, len, &config, (uint64_t)w * (uint64_t)h, &stopped);
  WebPFreeDecBuffer(&config.output); /* the pixels are ours: this frees nothing of them */
  if (stopped || vs != VP8_STATUS_OK) codec_free(pixels);
  if (stopped) return CODEC_CANCELLED;
  if (vs != VP8_STATUS_OK) return decode_failure(vs, len, msg, msglen);
  *out = (struct codec_image){pixels, w, h, channels, 8, CODEC_WEBP, 1};
  return CODEC_OK;
}

/* The file grows through codec_realloc, so the allocation-failure tests reach the encoder's
 * output; libwebp's own working memory is its own malloc's. */
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

/* One segment, at a quality one lower: lossy effort 2's rule for a smooth image. libwebp skips
 * its analysis pass (a DCT histogram of every macroblock under each intra-16 and chroma
 * predictor, to split the image into four segments quantised apart) when there is one segment;
 * on a smooth image (a blur) one segment at a quality one lower gives about the size and PSNR of
 * four in less time, where on a detailed one (photographs, block mosaics) the segments make
 * the file smaller, so it keeps them (docs/methods.md, "WebP effort"). Efforts 0 and 1 analyse
 * whatever the segments (their mode choice needs it), and 3 to 6 are asked for for size. */
static void one_segment(WebPConfig *config) {
  config->segments = 1;
  config->quality = (float)CODEC_WEBP_SMOOTH_QUALITY((int)config->quality);
}

struct webp_job { /* one encode by libwebp, here or in a child process */
  WebPConfig config;
  WebPPicture pic;
  const uint8_t *src; /* 8-bit RGB or RGBA, rows stride bytes apart */
  int channels, stride, lossless;
  int imported; /* pic holds the image already (webp_yuv.c's planes) */
  int fd;       /* in the child: where the file goes */
};

/* libwebp's import of j's pixels (unless pic has them), with lossy effort 2's one-segment rule
 * for an RGBA image's luma, and its encode; pic.writer takes the file. Returns WebPEncode's
 * answer: 0 when it failed, pic.error_code saying why. */
static int libwebp_encode(struct webp_job *j) {
  WebPPicture *pic = &j->pic;
  if (!j->imported) {
    int ok = j->channels == 4 ? WebPPictureImportRGBA(pic, j->src, j->stride)
                              : WebPPictureImportRGB(pic, j->src, j->stride);
    if (!ok) return 0;
    if (!j->lossless && j->channels == 4 && j->config.method == 2 &&
        codec_webp_smooth(pic->y, pic->y_stride, pic->width, pic->height))
      one_segment(&j->config);
  }
  return WebPEncode(&j->config, pic);
}

/* In the child: libwebp's writer, the file to the pipe. */
static int to_pipe(const uint8_t *data, size_t n, const WebPPicture *pic) {
  return codec_write_all(((const struct webp_job *)pic->custom_ptr)->fd, data, n) == 0;
}

/* The child's work: the encode, its file to fd. Returns 0, or 1 + libwebp's error code. */
static int child_encode(void *arg, int fd) {
  struct webp_job *j = arg;
  j->fd = fd;
  j->pic.writer = to_pipe, j->pic.custom_ptr = j, j->pic.progress_hook = NULL;
  return libwebp_encode(j) ? 0 : 1 + (int)j->pic.error_code;
}

/* Here: libwebp asks this each time its percent changes. */
static int on_progress(int percent, const WebPPicture *pic) {
  (void)percent, (void)pic;
  return !codec_stopped();
}

/* Whether j's encode may run CHILD_MS or more (its pixels at the rates above). */
static int long_encode(const struct webp_job *j) {
  int m = j->config.method < 0 ? 0 : j->config.method > 6 ? 6 : j->config.method;
  double ns = j->lossless ? NS_LOSSLESS : ns_lossy[m] + (j->channels == 4 ? ns_alpha[m] : 0);
  return (double)j->pic.width * j->pic.height * ns >= CHILD_MS * 1e6;
}

/* libwebp's encode of j into e, in a child process when it may run long and the thread has a
 * hook, else here. libwebp asks its progress hook only when its whole percent changes, and not at
 * all while it codes an alpha plane or writes its tokens, so an encode that may run CHILD_MS or
 * longer runs in a child process that is killed when the thread's hook says stop
 * (codec_run_child, stop.c); a shorter one, over within CHILD_MS even if nothing stops it, runs
 * here and stops at its progress hook. Both write the same bytes. */
static enum codec_status run_libwebp(struct webp_job *j, struct webp_out *e, char *msg,
                                     size_t msglen) {
  int status = 0;
  enum codec_status st =
      long_encode(j) ? codec_run_child(child_encode, j, &e->file, &status) : CODEC_UNSUPPORTED;
  enum WebPEncodingError err = VP8_ENC_OK;
  if (st == CODEC_UNSUPPORTED) { /* here, stopped by its progress hook */
    j->pic.progress_hook = codec_cancel_get() ? on_progress : NULL;
    err = libwebp_encode(j) ? VP8_ENC_OK : j->pic.error_code;
  } else if (st == CODEC_OK && status >= 128) {
    codec_msgf(msg, msglen, "libwebp's encoder was stopped by signal %d", status - 128);
    return status == 128 + SIGKILL ? CODEC_NOMEM : CODEC_UNSUPPORTED; /* SIGKILL: out of memory */
  } else if (st == CODEC_OK && status > 0) {
    err = (enum WebPEncodingError)(status - 1);
  } else if (st != CODEC_OK) {
    return st; /* cancelled, or out of memory for the file */
  }
  if (err == VP8_ENC_OK) return CODEC_OK;
  if (err == VP8_ENC_ERROR_USER_ABORT) return CODEC_CANCELLED;
  if (e->oom || err == VP8_ENC_ERROR_OUT_OF_MEMORY ||
      err == VP8_ENC_ERROR_BITSTREAM_OUT_OF_MEMORY) {
    codec_msgf(msg, msglen, "out of memory encoding the WebP image");
    return CODEC_NOMEM;
  }
  codec_msgf(msg, msglen, "libwebp could not write the image (error %d)", (int)err);
  return CODEC_UNSUPPORTED;
}

/* Whether a lossy WebP of channels 8-bit channels with o is blurd's own encoder's when the image
 * is smooth: an RGB one at effort 2. */
static int own_vp8(const struct codec_encode_opts *o, int channels) {
  return !o->lossless && channels == 3 && (o->effort_set ? o->effort : CODEC_EFFORT_DEFAULT) == 2;
}

/* Lossy effort 2 of a smooth RGB image: its planes by codec_webp_yuv (faster than libwebp's
 * import) into j's picture (j->imported: the image is smooth and there), and blurd's own encoder
 * into e, which asks the thread's hook every macroblock row. Returns CODEC_TOO_LARGE when the image
 * is not smooth, or its frame too large for that encoder (libwebp then codes it), else the
 * encoder's status (CODEC_CANCELLED too when the hook said stop during the conversion). */
static enum codec_status own_encode(struct webp_job *j, int width, int height,
                                    const struct codec_encode_opts *o, struct webp_out *e,
                                    char *msg, size_t msglen) {
  WebPPicture *pic = &j->pic;
  if (!WebPPictureAlloc(pic)) {
    codec_msgf(msg, msglen, "out of memory encoding the WebP image");
    return CODEC_NOMEM;
  }
  int smooth = codec_webp_yuv(j->src, (size_t)j->stride, width, height, pic->y, pic->y_stride,
                              pic->u, pic->v, pic->uv_stride);
  if (smooth < 0) return CODEC_CANCELLED;
  if (!(j->imported = smooth)) return CODEC_TOO_LARGE;
  one_segment(&j->config);
  enum codec_status st = codec_vp8_encode(pic->y, pic->y_stride, pic->u, pic->v, pic->uv_stride,
                                          width, height, (int)j->config.quality, &e->file, NULL);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory encoding the WebP image");
  if (st == CODEC_OK && o->encoder) *o->encoder = "blurd-vp8";
  return st;
}

/* Encodes the 8-bit RGB or RGBA pixels src (img's size, channels channels) into e: lossy with
 * libwebp's default preset at o->quality and o's effort as its method, blurd's own encoder for a
 * smooth RGB image at effort 2 (own_vp8); lossless with libwebp's lossless preset
 * WEBP_LOSSLESS_LEVEL, keeping the colour of transparent pixels (exact), so that the file decodes
 * to exactly the samples it was given. */
static enum codec_status encode_run(const struct codec_image *img, const uint8_t *src, int channels,
                                    const struct codec_encode_opts *o, struct webp_out *e,
                                    char *msg, size_t msglen) {
  struct webp_job j = {.src = src, .channels = channels, .lossless = o->lossless};
  int ok = WebPConfigInit(&j.config) && WebPPictureInit(&j.pic);
  if (ok && o->lossless) ok = WebPConfigLosslessPreset(&j.config, WEBP_LOSSLESS_LEVEL);
  if (ok && !o->lossless) ok = WebPConfigPreset(&j.config, WEBP_PRESET_DEFAULT, (float)o->quality);
  if (!ok) {
    codec_msgf(msg, msglen, "libwebp's encoder does not match the headers it was built with");
    return CODEC_UNSUPPORTED;
  }
  j.config.exact = o->lossless; /* keep the colour under alpha 0, so lossless is exact */
  if (!o->lossless) j.config.method = o->effort_set ? o->effort : CODEC_EFFORT_DEFAULT;
  j.pic.use_argb = o->lossless;
  j.pic.width = img->width;
  j.pic.height = img->height;
  j.pic.writer = on_write;
  j.pic.custom_ptr = e;
  j.stride = img->width * channels;
  enum codec_status st = CODEC_TOO_LARGE;
  if (own_vp8(o, channels)) st = own_encode(&j, img->width, img->height, o, e, msg, msglen);
  if (st == CODEC_TOO_LARGE) { /* libwebp's */
    if (o->encoder) *o->encoder = "libwebp";
    st = run_libwebp(&j, e, msg, msglen);
  }
  WebPPictureFree(&j.pic);
  return st;
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

/* 8-bit RGB and RGBA are encoded as they are; anything else is converted first (codec_to_8bit:
 * 16-bit samples scaled to 8 bits, gray repeated into RGB, alpha kept). */
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
  uint8_t *converted = NULL;
  enum codec_status st = direct ? CODEC_OK : codec_to_8bit(img, 3, 1, &converted, &channels);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory converting the image for WebP");
  if (st != CODEC_OK) return st;
  struct webp_out e = {{NULL, 0, 0}, 0};
  st = encode_run(img, direct ? img->pixels : converted, channels, o, &e, msg, msglen);
  codec_free(converted);
  return finish(&e, st, o, out, outlen, msg, msglen);
}

/* The file of the first pass a, handed to *out by finish(); o->icc is an RGB profile or NULL. */
static enum codec_status write_vp8(const struct codec_vp8_mbs *a, const struct codec_encode_opts *o,
                                   uint8_t **out, size_t *outlen, char *msg, size_t msglen) {
  struct webp_out e = {{NULL, 0, 0}, 0};
  enum codec_status st = codec_vp8_write(a, &e.file); /* asks the thread's hook as it goes */
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory encoding the WebP image");
  return finish(&e, st, o, out, outlen, msg, msglen);
}

enum codec_status codec_webp_from_vp8(const struct codec_vp8_mbs *a,
                                      const struct codec_encode_opts *o, uint8_t **out,
                                      size_t *outlen, char *msg, size_t msglen) {
  *out = NULL, *outlen = 0;
  struct codec_encode_opts eo = *o; /* a profile goes with an RGB image only, as codec_encode's */
  if (codec_icc_colours(o->icc, o->icc_len) != 3) eo.icc = NULL, eo.icc_len = 0;
  enum codec_status st = write_vp8(a, &eo, out, outlen, msg, msglen);
  if (st == CODEC_OK && o->encoder) *o->encoder = "blurd-vp8";
  return st;
}

/* own_encode's path with the analyser's first pass in place of the planes: the same quality and
 * quantisers, the same test of smoothness (made by the analyser), the same file. The thread's
 * hook is asked between the pass and the file, and by the writer every macroblock row. */
enum codec_status codec_webp_encode_held(const struct codec_image *img,
                                         const struct codec_encode_opts *o,
                                         const struct codec_vp8_analyser *an, uint8_t **out,
                                         size_t *outlen, char *msg, size_t msglen) {
  if (img->depth != 8 || !own_vp8(o, img->channels) || img->width < 1 || img->height < 1 ||
      img->width > WEBP_MAX_DIMENSION || img->height > WEBP_MAX_DIMENSION)
    return CODEC_UNSUPPORTED;
  int quality = CODEC_WEBP_SMOOTH_QUALITY(o->quality);
  struct codec_vp8_pass p = {
      img->width, img->height, CODEC_WEBP_SMOOTH_STEP, CODEC_WEBP_SMOOTH_PER, {{{0}}}};
  struct codec_vp8_mbs a = {img->width, img->height, quality, NULL, NULL, NULL, NULL};
  codec_vp8_quant(quality, p.q);
  if (!an->analyse(an->arg, &p, &a)) return CODEC_UNSUPPORTED; /* from the pixels */
  if (codec_stopped()) return CODEC_CANCELLED;
  enum codec_status st = write_vp8(&a, o, out, outlen, msg, msglen);
  return st == CODEC_TOO_LARGE ? CODEC_UNSUPPORTED : st; /* too large: libwebp's, from the pixels */
}

/* ---- the format's descriptor ---- */

static int webp_sniff(const uint8_t *buf, size_t len) {
  return len >= 12 && memcmp(buf, "RIFF", 4) == 0 && memcmp(buf + 8, "WEBP", 4) == 0;
}

/* Whether the WebP file buf holds a lossless (VP8L) image: its first chunk, or past an extended
 * header (VP8X) and its ALPH or other chunks the first image chunk. Its decode costs otherwise
 * than a lossy one's. */
static int webp_lossless(const uint8_t *buf, size_t len) {
  for (size_t at = 12; at + 8 <= len;) {
    if (memcmp(buf + at, "VP8L", 4) == 0) return 1;
    if (memcmp(buf + at, "VP8 ", 4) == 0) return 0;
    uint32_t n = buf[at + 4] | buf[at + 5] << 8 | buf[at + 6] << 16 | (uint32_t)buf[at + 7] << 24;
    if (n > len - at - 8) break;
    at += 8 + (size_t)n + (n & 1);
  }
  return 0;
}

static double webp_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  double px = (double)s->width * s->height, samples = px * s->channels,
         alpha = s->channels == 2 || s->channels == 4 ? px : 0;
  if (webp_lossless(buf, len))
    return samples * COST_DECODE_WEBPLL_NS_SAMPLE + (double)len * COST_DECODE_WEBPLL_NS_BYTE +
           alpha * COST_DECODE_WEBPLL_NS_ALPHA;
  return samples * COST_DECODE_WEBP_NS_SAMPLE + (double)len * COST_DECODE_WEBP_NS_BYTE +
         alpha * COST_DECODE_WEBP_NS_ALPHA;
}

/* Lossy: the colour by effort and quality, and the alpha plane by effort and size; lossless by
 * size. */
static double webp_encode_ns(const struct codec_encode_opts *o, const struct codec_shape *s) {
  static const double sizes[] = COST_WEBP_SIZES, q[] = COST_WEBP_QUALITY,
                      lossless[] = COST_WEBP_LOSSLESS_NS_PIXEL;
  static const double colour[][CODEC_NELEM(q)] = COST_WEBP_NS_PIXEL,
                      alpha[][CODEC_NELEM(lossless)] = COST_WEBP_ALPHA_NS_PIXEL;
  double px = (double)s->width * s->height;
  int a = s->channels == 2 || s->channels == 4;
  int effort = o->effort_set ? o->effort : CODEC_EFFORT_DEFAULT;
  effort = effort < 0 ? 0 : effort >= CODEC_NELEM(colour) ? CODEC_NELEM(colour) - 1 : effort;
  if (o->lossless) return px * codec_by_size(sizes, lossless, CODEC_NELEM(sizes), px);
  return px * (codec_interpolate(q, colour[effort], CODEC_NELEM(q), o->quality) +
               (a ? codec_by_size(sizes, alpha[effort], CODEC_NELEM(sizes), px) : 0));
}

const struct codec_format_desc codec_webp_format = {
    .name = "webp",
    .title = "WebP",
    .mime = "image/webp",
    .mimes = "",
    .exts = "webp",
    .lib = "libwebp",
    .reader = "libwebp",
    .writer = "blurd-vp8 (smooth RGB images at effort 2), libwebp",
    .quality = 1,
    .lossless = 1,
    .rgb_only = 1,
    .sniff = webp_sniff,
    .probe = codec_webp_probe,
    .decode = codec_webp_decode,
    .icc = codec_webp_icc,
    .encode = codec_webp_encode,
    .encode_held = codec_webp_encode_held,
    .decode_ns = webp_decode_ns,
    .encode_ns = webp_encode_ns,
};

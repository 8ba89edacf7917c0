/* jxl.c: JPEG XL input and output (libjxl 0.7), from and to memory.
 *
 * Both directions run libjxl with a parallel runner of this file's own (stop_runner), which
 * libjxl calls for each parallel stage of its work: it asks the thread's cancellation hook before
 * the stage and before each of its tasks (a group of pixels), skips the remaining tasks once the
 * hook says stop and then fails the stage, so libjxl gives up with an error and the call returns
 * CODEC_CANCELLED. The tasks run on libjxl's thread pool (JxlThreadParallelRunner, one thread per
 * online CPU, made on the first stage with more than one task) or, for a stage of one task, on
 * the caller's thread. libjxl's memory comes from codec_malloc.
 *
 * Decoding feeds the file a piece at a time (FEED bytes) and asks the hook between pieces. The
 * basic info gives the size, checked against the limits (upright: libjxl applies the orientation,
 * as its default) before the pixel buffer is allocated; libjxl then decodes straight into it:
 * gray or RGB, with alpha when there is one (unpremultiplied when stored premultiplied), 8-bit
 * for samples of up to 8 bits and 16-bit otherwise (libjxl scales 9..16-bit samples and converts
 * floating-point ones, clamped, to the full 16-bit range). An animation gives its first frame. The
 * pixels are in the colour space of the profile codec_jxl_icc returns (libjxl's "target data"
 * profile: the original for lossless files, the encoded colour space or an ICC made from it for
 * the rest). A file that ends early is CODEC_CORRUPT.
 *
 * Encoding takes 8- or 16-bit gray or RGB with or without alpha as it is. Lossless output
 * (o->lossless) keeps every sample; lossy output is XYB at distance jxl_distance(o->quality), the
 * mapping cjxl's -q uses. o->effort 0..6 maps to libjxl's effort 1, 2, 3, 5, 7, 8, 9
 * (docs/engineering-notes.md, "New formats' codecs"). o->icc is written when its colours match
 * the image's, else the samples are tagged sRGB. */
#include <jxl/decode.h>
#include <jxl/encode.h>
#include <jxl/thread_parallel_runner.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "codecs_int.h"

#define FEED (256u << 10) /* bytes of the file given to the decoder at a time */

static const int jxl_effort[7] = {1, 2, 3, 5, 7, 8, 9}; /* for o->effort 0..6 */

int codec_jxl_sniff(const uint8_t *buf, size_t len) {
  static const uint8_t box[12] = {0, 0, 0, 12, 'J', 'X', 'L', ' ', 0x0d, 0x0a, 0x87, 0x0a};
  if (buf == NULL) return 0;
  if (len >= 2 && buf[0] == 0xff && buf[1] == 0x0a) return 1; /* a bare codestream */
  return len >= sizeof box && memcmp(buf, box, sizeof box) == 0;
}

/* ---- memory and the stoppable runner ---- */

static void *mm_alloc(void *opaque, size_t size) {
  (void)opaque;
  return codec_malloc(size);
}

static void mm_free(void *opaque, void *address) {
  (void)opaque;
  codec_free(address);
}

static const JxlMemoryManager memory = {NULL, mm_alloc, mm_free};

struct stopper {                   /* stop_runner's opaque */
  void *pool;                      /* JxlThreadParallelRunner's, made on first use; or NULL */
  int no_pool;                     /* making it failed: run on the caller's thread */
  const struct codec_cancel *hook; /* the caller's, asked from any thread */
  atomic_int stopped;              /* the hook said stop */
};

struct stage { /* one call of the runner: libjxl's functions, for the trampolines */
  JxlParallelRunInit init;
  JxlParallelRunFunction func;
  void *opaque;
  struct stopper *s;
};

static int should_stop(struct stopper *s) {
  if (atomic_load_explicit(&s->stopped, memory_order_relaxed)) return 1;
  if (s->hook && s->hook->stop && s->hook->stop(s->hook->arg)) {
    atomic_store(&s->stopped, 1);
    return 1;
  }
  return 0;
}

static JxlParallelRetCode stage_init(void *opaque, size_t threads) {
  struct stage *st = opaque;
  return st->init(st->opaque, threads);
}

static void stage_func(void *opaque, uint32_t value, size_t thread) {
  struct stage *st = opaque;
  if (!should_stop(st->s)) st->func(st->opaque, value, thread);
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* libjxl's runner: the stage's tasks on the pool (or here), the hook asked before each; fails
 * the stage when the hook said stop. */
static JxlParallelRetCode stop_runner(void *runner_opaque, void *jpegxl_opaque,
                                      JxlParallelRunInit init, JxlParallelRunFunction func,
                                      uint32_t start, uint32_t end) {
  struct stopper *s = runner_opaque;
  struct stage st = {init, func, jpegxl_opaque, s};
  if (should_stop(s)) return -1;
  if (end - start > 1 && s->pool == NULL && !s->no_pool && online_cpus() > 1) {
    s->pool = JxlThreadParallelRunnerCreate(&memory, (size_t)online_cpus());
    s->no_pool = s->pool == NULL;
  }
  JxlParallelRetCode r = 0;
  if (s->pool != NULL && end - start > 1) {
    r = JxlThreadParallelRunner(s->pool, &st, stage_init, stage_func, start, end);
  } else if ((r = init(jpegxl_opaque, 1)) == 0) {
    for (uint32_t v = start; v < end; v++) stage_func(&st, v, 0);
  }
  return r != 0 ? r : atomic_load(&s->stopped) ? -1 : 0;
}

static void stopper_free(struct stopper *s) {
  if (s->pool) JxlThreadParallelRunnerDestroy(s->pool);
  s->pool = NULL;
}

/* ---- decoding ---- */

struct jxl_dec { /* one decode */
  JxlDecoder *dec;
  struct stopper stop;
  const uint8_t *buf;
  size_t len, pos, fed; /* pos: the first byte libjxl has not consumed; fed: given so far */
  JxlBasicInfo info;
  JxlPixelFormat format;
  struct codec_image img; /* the pixels, once allocated */
};

static enum codec_status dec_open(struct jxl_dec *d, const uint8_t *buf, size_t len, int events) {
  *d = (struct jxl_dec){.buf = buf, .len = len};
  d->stop.hook = codec_cancel_get();
  if ((d->dec = JxlDecoderCreate(&memory)) == NULL) return CODEC_NOMEM;
  if (JxlDecoderSubscribeEvents(d->dec, events) != JXL_DEC_SUCCESS ||
      JxlDecoderSetParallelRunner(d->dec, stop_runner, &d->stop) != JXL_DEC_SUCCESS)
    return CODEC_NOMEM;
  return CODEC_OK;
}

static void dec_close(struct jxl_dec *d) {
  if (d->dec) JxlDecoderDestroy(d->dec);
  stopper_free(&d->stop);
  d->dec = NULL;
}

/* Gives the decoder the next piece of the file; returns 0, or -1 when it has it all. */
static int dec_feed(struct jxl_dec *d) {
  if (d->fed == d->len) return -1;
  if (d->fed > 0) d->pos = d->fed - JxlDecoderReleaseInput(d->dec);
  d->fed = d->len - d->fed > FEED ? d->fed + FEED : d->len;
  JxlDecoderSetInput(d->dec, d->buf + d->pos, d->fed - d->pos);
  if (d->fed == d->len) JxlDecoderCloseInput(d->dec);
  return 0;
}

/* Runs the decoder to its next event, feeding it as it asks; the hook is asked between pieces.
 * Returns libjxl's status, JXL_DEC_NEED_MORE_INPUT for a file that ends early, or
 * JXL_DEC_ERROR with d->stop.stopped set when the hook said stop. */
static JxlDecoderStatus dec_next(struct jxl_dec *d) {
  for (;;) {
    if (should_stop(&d->stop)) return JXL_DEC_ERROR;
    JxlDecoderStatus s = JxlDecoderProcessInput(d->dec);
    if (s != JXL_DEC_NEED_MORE_INPUT || dec_feed(d) != 0) return s;
  }
}

static enum codec_status dec_failure(const struct jxl_dec *d, JxlDecoderStatus s, char *msg,
                                     size_t msglen) {
  if (atomic_load(&d->stop.stopped)) return CODEC_CANCELLED;
  if (s == JXL_DEC_NEED_MORE_INPUT)
    codec_msgf(msg, msglen, "the JPEG XL file is truncated: it ends after %zu bytes", d->len);
  else if (s == JXL_DEC_SUCCESS)
    codec_msgf(msg, msglen, "the JPEG XL file holds no image");
  else
    codec_msgf(msg, msglen, "the JPEG XL data is corrupt or truncated (libjxl: decoder error)");
  return CODEC_CORRUPT;
}

/* The size after libjxl applies the orientation. */
static void upright(const JxlBasicInfo *b, uint64_t *w, uint64_t *h) {
  int swap = b->orientation >= JXL_ORIENT_TRANSPOSE;
  *w = swap ? b->ysize : b->xsize, *h = swap ? b->xsize : b->ysize;
}

/* At the basic info: the output format, the limit check, the pixel buffer. */
static enum codec_status dec_basic(struct jxl_dec *d, const struct codec_limits *lim, char *msg,
                                   size_t msglen) {
  JxlBasicInfo *b = &d->info;
  if (JxlDecoderGetBasicInfo(d->dec, b) != JXL_DEC_SUCCESS)
    return dec_failure(d, JXL_DEC_ERROR, msg, msglen);
  int alpha = b->alpha_bits > 0,
      depth = b->bits_per_sample > 8 || b->exponent_bits_per_sample ? 16 : 8;
  int channels = (b->num_color_channels == 1 ? 1 : 3) + alpha;
  uint64_t w, h;
  size_t nbytes;
  upright(b, &w, &h);
  enum codec_status st =
      codec_check_size(w, h, (unsigned)(channels * depth / 8), lim, &nbytes, msg, msglen);
  if (st != CODEC_OK) return st;
  d->format = (JxlPixelFormat){(uint32_t)channels, depth == 8 ? JXL_TYPE_UINT8 : JXL_TYPE_UINT16,
                               JXL_NATIVE_ENDIAN, 0};
  if (alpha && b->alpha_premultiplied) JxlDecoderSetUnpremultiplyAlpha(d->dec, JXL_TRUE);
  if ((d->img.pixels = codec_malloc(nbytes)) == NULL) {
    codec_msgf(msg, msglen, "out of memory for a %llux%llu JPEG XL image", (unsigned long long)w,
               (unsigned long long)h);
    return CODEC_NOMEM;
  }
  d->img = (struct codec_image){d->img.pixels,      (int)w, (int)h, channels, depth, CODEC_NONE,
                                (int)b->orientation};
  return CODEC_OK;
}

static enum codec_status dec_set_buffer(struct jxl_dec *d, char *msg, size_t msglen) {
  size_t need = 0, have = (size_t)d->img.width * (size_t)d->img.height * (size_t)d->img.channels *
                          (size_t)(d->img.depth / 8);
  if (d->img.pixels == NULL ||
      JxlDecoderImageOutBufferSize(d->dec, &d->format, &need) != JXL_DEC_SUCCESS || need != have ||
      JxlDecoderSetImageOutBuffer(d->dec, &d->format, d->img.pixels, have) != JXL_DEC_SUCCESS) {
    codec_msgf(msg, msglen, "the JPEG XL frame does not match the image's size");
    return CODEC_CORRUPT;
  }
  return CODEC_OK;
}

enum codec_status codec_jxl_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_image *out, char *msg, size_t msglen) {
  struct jxl_dec d;
  *out = (struct codec_image){0};
  enum codec_status st = dec_open(&d, buf, len, JXL_DEC_BASIC_INFO | JXL_DEC_FULL_IMAGE);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory starting the JPEG XL decoder");
  while (st == CODEC_OK) {
    JxlDecoderStatus s = dec_next(&d);
    if (s == JXL_DEC_BASIC_INFO)
      st = dec_basic(&d, lim, msg, msglen);
    else if (s == JXL_DEC_NEED_IMAGE_OUT_BUFFER)
      st = dec_set_buffer(&d, msg, msglen);
    else if (s == JXL_DEC_FULL_IMAGE)
      break; /* the first frame */
    else
      st = dec_failure(&d, s, msg, msglen);
  }
  if (st == CODEC_OK && codec_stopped()) st = CODEC_CANCELLED;
  dec_close(&d);
  if (st != CODEC_OK) {
    codec_free(d.img.pixels);
    return st;
  }
  *out = d.img;
  return CODEC_OK;
}

int codec_jxl_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  struct jxl_dec d;
  int r = -1;
  if (dec_open(&d, buf, len, JXL_DEC_BASIC_INFO) == CODEC_OK &&
      dec_next(&d) == JXL_DEC_BASIC_INFO &&
      JxlDecoderGetBasicInfo(d.dec, &d.info) == JXL_DEC_SUCCESS) {
    const JxlBasicInfo *b = &d.info;
    uint64_t w, h;
    upright(b, &w, &h);
    int depth = b->bits_per_sample > 8 || b->exponent_bits_per_sample ? 16 : 8;
    *out = (struct codec_shape){(int)w, (int)h,
                                (b->num_color_channels == 1 ? 1 : 3) + (b->alpha_bits > 0), depth};
    r = w > 0 && h > 0 && w <= INT32_MAX && h <= INT32_MAX ? 0 : -1;
  }
  dec_close(&d);
  return r;
}

enum codec_status codec_jxl_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len) {
  struct jxl_dec d;
  size_t n = 0;
  enum codec_status st = dec_open(&d, buf, len, JXL_DEC_COLOR_ENCODING);
  *icc = NULL, *icc_len = 0;
  if (st == CODEC_OK && dec_next(&d) == JXL_DEC_COLOR_ENCODING &&
      JxlDecoderGetICCProfileSize(d.dec, NULL, JXL_COLOR_PROFILE_TARGET_DATA, &n) ==
          JXL_DEC_SUCCESS &&
      n > 0 && n <= CODEC_ICC_MAX) {
    if ((*icc = codec_malloc(n)) == NULL)
      st = CODEC_NOMEM;
    else if (JxlDecoderGetColorAsICCProfile(d.dec, NULL, JXL_COLOR_PROFILE_TARGET_DATA, *icc, n) !=
             JXL_DEC_SUCCESS)
      codec_free(*icc), *icc = NULL;
    else
      *icc_len = n;
  }
  dec_close(&d);
  return st == CODEC_NOMEM ? CODEC_NOMEM : CODEC_OK;
}

/* ---- encoding ---- */

float codec_jxl_distance(int quality) {
  if (quality >= 100) return 0.1f;
  if (quality >= 30) return 0.1f + (float)(100 - quality) * 0.09f;
  return 6.4f + (float)pow(2.5, (30 - quality) / 5.0) / 6.25f;
}

/* Basic info, colour and frame settings for img with o. Returns 0, or -1 when libjxl refused. */
static int enc_setup(JxlEncoder *enc, const struct codec_image *img,
                     const struct codec_encode_opts *o, JxlEncoderFrameSettings **fs) {
  JxlBasicInfo b;
  int alpha = img->channels == 2 || img->channels == 4, gray = img->channels <= 2;
  JxlEncoderInitBasicInfo(&b);
  b.xsize = (uint32_t)img->width, b.ysize = (uint32_t)img->height;
  b.bits_per_sample = (uint32_t)img->depth, b.exponent_bits_per_sample = 0;
  b.num_color_channels = gray ? 1 : 3;
  b.num_extra_channels = (uint32_t)alpha, b.alpha_bits = alpha ? (uint32_t)img->depth : 0;
  b.uses_original_profile = o->lossless ? JXL_TRUE : JXL_FALSE;
  if (JxlEncoderSetBasicInfo(enc, &b) != JXL_ENC_SUCCESS) return -1;
  JxlColorEncoding ce;
  int icc = o->icc && codec_icc_colours(o->icc, o->icc_len) == (gray ? 1 : 3);
  JxlColorEncodingSetToSRGB(&ce, gray);
  if (icc ? JxlEncoderSetICCProfile(enc, o->icc, o->icc_len) != JXL_ENC_SUCCESS
          : JxlEncoderSetColorEncoding(enc, &ce) != JXL_ENC_SUCCESS)
    return -1;
  if ((*fs = JxlEncoderFrameSettingsCreate(enc, NULL)) == NULL) return -1;
  int e = o->effort_set ? o->effort : CODEC_WEBP_EFFORT_DEFAULT;
  JxlEncoderFrameSettingsSetOption(*fs, JXL_ENC_FRAME_SETTING_EFFORT,
                                   jxl_effort[e < 0   ? 0
                                              : e > 6 ? 6
                                                      : e]);
  if (o->lossless) return JxlEncoderSetFrameLossless(*fs, JXL_TRUE) == JXL_ENC_SUCCESS ? 0 : -1;
  return JxlEncoderSetFrameDistance(*fs, codec_jxl_distance(o->quality)) == JXL_ENC_SUCCESS ? 0
                                                                                            : -1;
}

/* Collects the encoder's output into b. */
static enum codec_status enc_output(JxlEncoder *enc, struct codec_buf *b, struct stopper *s) {
  JxlEncoderStatus r = JXL_ENC_NEED_MORE_OUTPUT;
  while (r == JXL_ENC_NEED_MORE_OUTPUT) {
    if (b->cap - b->len < 4096) {
      size_t cap = b->cap ? b->cap * 2 : 65536;
      uint8_t *p = codec_realloc(b->data, cap);
      if (p == NULL) return CODEC_NOMEM;
      b->data = p, b->cap = cap;
    }
    uint8_t *next = b->data + b->len;
    size_t avail = b->cap - b->len;
    r = JxlEncoderProcessOutput(enc, &next, &avail);
    b->len = (size_t)(next - b->data);
  }
  if (r == JXL_ENC_SUCCESS) return CODEC_OK;
  if (atomic_load(&s->stopped)) return CODEC_CANCELLED;
  return JxlEncoderGetError(enc) == JXL_ENC_ERR_OOM ? CODEC_NOMEM : CODEC_UNSUPPORTED;
}

enum codec_status codec_jxl_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                                   uint8_t **out, size_t *outlen, char *msg, size_t msglen) {
  struct stopper s = {.hook = codec_cancel_get()};
  struct codec_buf file = {NULL, 0, 0};
  JxlEncoderFrameSettings *fs = NULL;
  JxlPixelFormat fmt = {(uint32_t)img->channels, img->depth == 8 ? JXL_TYPE_UINT8 : JXL_TYPE_UINT16,
                        JXL_NATIVE_ENDIAN, 0};
  size_t n =
      (size_t)img->width * (size_t)img->height * (size_t)img->channels * (size_t)(img->depth / 8);
  *out = NULL, *outlen = 0;
  JxlEncoder *enc = JxlEncoderCreate(&memory);
  enum codec_status st = enc ? CODEC_OK : CODEC_NOMEM;
  if (st == CODEC_OK && (JxlEncoderSetParallelRunner(enc, stop_runner, &s) != JXL_ENC_SUCCESS ||
                         enc_setup(enc, img, o, &fs) != 0 ||
                         JxlEncoderAddImageFrame(fs, &fmt, img->pixels, n) != JXL_ENC_SUCCESS))
    st = should_stop(&s)                              ? CODEC_CANCELLED
         : JxlEncoderGetError(enc) == JXL_ENC_ERR_OOM ? CODEC_NOMEM
                                                      : CODEC_UNSUPPORTED;
  if (st == CODEC_OK) {
    JxlEncoderCloseInput(enc);
    st = should_stop(&s) ? CODEC_CANCELLED : enc_output(enc, &file, &s);
  }
  if (enc) JxlEncoderDestroy(enc);
  stopper_free(&s);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory encoding the JPEG XL image");
  if (st == CODEC_UNSUPPORTED) codec_msgf(msg, msglen, "libjxl could not encode the image");
  if (st != CODEC_OK) {
    codec_free(file.data);
    return st;
  }
  codec_buf_take(&file, out, outlen);
  return CODEC_OK;
}

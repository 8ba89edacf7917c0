/* jxl.c: JPEG XL input and output (libjxl 0.7), from and to memory.
 *
 * libjxl runs on a parallel runner of this file's (lazy_runner): a stage of several tasks goes
 * to libjxl's thread pool (JxlThreadParallelRunner, one thread per online CPU, made for the
 * first such stage, so a small image makes no threads), a stage of one task runs on the caller's
 * thread. libjxl's memory comes from codec_malloc. A stage is never failed from the runner to
 * stop the work: libjxl checks some stages with an assertion that aborts the process.
 *
 * Decoding feeds the file a piece at a time (FEED bytes): libjxl decodes what each piece
 * completes, and the thread's cancellation hook is asked between pieces. The basic info gives
 * the size, checked against the limits before the pixel buffer is allocated (upright: libjxl
 * applies the orientation, its default, and reports the upright size; the orientation itself is
 * read from the header by a second decoder that keeps it). libjxl then decodes straight into the
 * buffer: gray or RGB, with alpha when there is one (unpremultiplied when stored premultiplied),
 * 8-bit for samples of up to 8 bits and 16-bit otherwise (libjxl scales 9..16-bit samples, and
 * converts floating-point ones, clamped, to the full 16-bit range). An animation gives its first
 * frame. The pixels are in the colour space of the profile jxl_icc returns (libjxl's
 * "target data" profile: the original for lossless files, the encoded colour space or an ICC
 * made from it for the rest). The input is never closed, so a file that ends early makes libjxl
 * ask for more, which is CODEC_CORRUPT (a closed input would make it print to stderr).
 *
 * Encoding takes 8- or 16-bit gray or RGB with or without alpha as it is. Lossless output
 * (o->lossless) keeps every sample; lossy output is XYB at distance jxl_distance(quality),
 * the mapping cjxl's -q uses. o->effort 0..6 maps to libjxl's effort 1, 2, 3, 5, 7, 8, 9
 * (docs/engineering-notes.md, "New formats' codecs"). o->icc is written when its colours match
 * the image's, else the samples are tagged sRGB. libjxl's encoder has no hook: with one, an image
 * of JXL_CHILD_PIXELS or more is encoded in a child process that is killed when the hook says
 * stop (codec_run_child), a smaller one here, with the hook asked before and after. */
#include <jxl/decode.h>
#include <jxl/encode.h>
#include <jxl/thread_parallel_runner.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "formats.h"

/* Bytes of the file given to the decoder at a time: it decodes the groups each piece completes,
 * and the hook is asked between pieces. */
#define FEED (64u << 10)

static const int jxl_effort[7] = {1, 2, 3, 5, 7, 8, 9}; /* for o->effort 0..6 */

/* Pixels of an image whose encode runs here even with a hook; larger ones run in a child
 * process that is killed when the hook says stop (libjxl's encoder has no hook, and failing one
 * of its parallel stages can abort the process). */
#define JXL_CHILD_PIXELS (256 * 256)

/* A bare codestream (FF 0A) or the ISOBMFF container. */
static int jxl_sniff(const uint8_t *buf, size_t len) {
  static const uint8_t box[12] = {0, 0, 0, 12, 'J', 'X', 'L', ' ', 0x0d, 0x0a, 0x87, 0x0a};
  if (buf == NULL) return 0;
  if (len >= 2 && buf[0] == 0xff && buf[1] == 0x0a) return 1; /* a bare codestream */
  return len >= sizeof box && memcmp(buf, box, sizeof box) == 0;
}

/* ---- memory and threads ---- */

static void *mm_alloc(void *opaque, size_t size) {
  (void)opaque;
  return codec_malloc(size);
}

static void mm_free(void *opaque, void *address) {
  (void)opaque;
  codec_free(address);
}

static const JxlMemoryManager memory = {NULL, mm_alloc, mm_free};

struct pool {   /* lazy_runner's opaque */
  void *runner; /* JxlThreadParallelRunner's, made for the first stage of several tasks */
  int none;     /* making it failed, or one CPU: run on the caller's thread */
};

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* libjxl's runner: a stage of several tasks on the thread pool, made when first needed (a small
 * image makes no threads), a stage of one task here. It never fails a stage: libjxl checks some
 * stages' results with an assertion that aborts the process. */
static JxlParallelRetCode lazy_runner(void *runner_opaque, void *jpegxl_opaque,
                                      JxlParallelRunInit init, JxlParallelRunFunction func,
                                      uint32_t start, uint32_t end) {
  struct pool *p = runner_opaque;
  if (end - start > 1 && p->runner == NULL && !p->none) {
    p->runner =
        online_cpus() > 1 ? JxlThreadParallelRunnerCreate(&memory, (size_t)online_cpus()) : NULL;
    p->none = p->runner == NULL;
  }
  if (p->runner != NULL && end - start > 1)
    return JxlThreadParallelRunner(p->runner, jpegxl_opaque, init, func, start, end);
  JxlParallelRetCode r = init(jpegxl_opaque, 1);
  for (uint32_t v = start; r == 0 && v < end; v++) func(jpegxl_opaque, v, 0);
  return r;
}

static void pool_free(struct pool *p) {
  if (p->runner) JxlThreadParallelRunnerDestroy(p->runner);
  p->runner = NULL;
}

/* ---- decoding ---- */

struct jxl_dec { /* one decode */
  JxlDecoder *dec;
  struct pool pool;
  int ask;     /* ask the thread's hook between pieces */
  int stopped; /* it said stop */
  const uint8_t *buf;
  size_t len, pos, fed; /* pos: the first byte libjxl has not consumed; fed: given so far */
  JxlBasicInfo info;
  JxlPixelFormat format;
  struct codec_image img; /* the pixels, once allocated */
};

static enum codec_status dec_open(struct jxl_dec *d, const uint8_t *buf, size_t len, int events) {
  *d = (struct jxl_dec){.buf = buf, .len = len, .ask = 1};
  if ((d->dec = JxlDecoderCreate(&memory)) == NULL) return CODEC_NOMEM;
  if (JxlDecoderSubscribeEvents(d->dec, events) != JXL_DEC_SUCCESS ||
      JxlDecoderSetParallelRunner(d->dec, lazy_runner, &d->pool) != JXL_DEC_SUCCESS)
    return CODEC_NOMEM;
  return CODEC_OK;
}

static void dec_close(struct jxl_dec *d) {
  if (d->dec) JxlDecoderDestroy(d->dec);
  pool_free(&d->pool);
  d->dec = NULL;
}

/* Gives the decoder the next piece of the file; returns 0, or -1 when it has it all. */
static int dec_feed(struct jxl_dec *d) {
  if (d->fed == d->len) return -1;
  if (d->fed > 0) d->pos = d->fed - JxlDecoderReleaseInput(d->dec);
  d->fed = d->len - d->fed > FEED ? d->fed + FEED : d->len;
  JxlDecoderSetInput(d->dec, d->buf + d->pos, d->fed - d->pos);
  return 0; /* not closed: at the end libjxl asks for more, which says truncated */
}

/* Runs the decoder to its next event, feeding it as it asks; the hook is asked between pieces.
 * Returns libjxl's status, JXL_DEC_NEED_MORE_INPUT for a file that ends early, or
 * JXL_DEC_ERROR with d->stopped set when the hook said stop. */
static JxlDecoderStatus dec_next(struct jxl_dec *d) {
  for (;;) {
    if (d->ask && (d->stopped = codec_stopped())) return JXL_DEC_ERROR;
    JxlDecoderStatus s = JxlDecoderProcessInput(d->dec);
    if (s != JXL_DEC_NEED_MORE_INPUT || dec_feed(d) != 0) return s;
  }
}

static enum codec_status dec_failure(const struct jxl_dec *d, JxlDecoderStatus s, char *msg,
                                     size_t msglen) {
  if (d->stopped) return CODEC_CANCELLED;
  if (s == JXL_DEC_NEED_MORE_INPUT)
    codec_msgf(msg, msglen, "the JPEG XL file is truncated: it ends after %zu bytes", d->len);
  else if (s == JXL_DEC_SUCCESS)
    codec_msgf(msg, msglen, "the JPEG XL file holds no image");
  else
    codec_msgf(msg, msglen, "the JPEG XL data is corrupt or truncated (libjxl: decoder error)");
  return CODEC_CORRUPT;
}

/* The orientation the file's header gives (libjxl reports 1, with the upright size, once it is
 * to apply it; this asks a decoder told to keep it), or 1. It reads a few bytes: the hook is not
 * asked. */
static int header_orientation(const uint8_t *buf, size_t len) {
  struct jxl_dec d;
  JxlBasicInfo b;
  int o = 1;
  enum codec_status st = dec_open(&d, buf, len, JXL_DEC_BASIC_INFO);
  d.ask = 0;
  if (st == CODEC_OK && JxlDecoderSetKeepOrientation(d.dec, JXL_TRUE) == JXL_DEC_SUCCESS &&
      dec_next(&d) == JXL_DEC_BASIC_INFO && JxlDecoderGetBasicInfo(d.dec, &b) == JXL_DEC_SUCCESS &&
      b.orientation >= 1 && b.orientation <= 8)
    o = (int)b.orientation;
  dec_close(&d);
  return o;
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
  uint64_t w = b->xsize, h = b->ysize; /* upright: libjxl turns the pixels */
  size_t nbytes;
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
  d->img = (struct codec_image){d->img.pixels, (int)w, (int)h, channels, depth, CODEC_NONE, 1};
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

static enum codec_status jxl_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen) {
  struct jxl_dec d;
  *out = (struct codec_image){0};
  int o = header_orientation(buf, len);
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
  out->orientation = o;
  return CODEC_OK;
}

static int jxl_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  struct jxl_dec d;
  int r = -1;
  if (dec_open(&d, buf, len, JXL_DEC_BASIC_INFO) == CODEC_OK &&
      dec_next(&d) == JXL_DEC_BASIC_INFO &&
      JxlDecoderGetBasicInfo(d.dec, &d.info) == JXL_DEC_SUCCESS) {
    const JxlBasicInfo *b = &d.info;
    uint64_t w = b->xsize, h = b->ysize; /* upright, as libjxl gives them */
    int depth = b->bits_per_sample > 8 || b->exponent_bits_per_sample ? 16 : 8;
    *out = (struct codec_shape){(int)w, (int)h,
                                (b->num_color_channels == 1 ? 1 : 3) + (b->alpha_bits > 0), depth};
    r = w > 0 && h > 0 && w <= INT32_MAX && h <= INT32_MAX ? 0 : -1;
  }
  dec_close(&d);
  return r;
}

static enum codec_status jxl_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len) {
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

/* The Butteraugli distance lossy JPEG XL uses at quality (1..100), as cjxl -q maps it:
 * 0.1 + (100 - q) * 0.09 from q 30 up (1.0 at 90), 6.4 + 2.5^((30 - q) / 5) / 6.25 below. */
static float jxl_distance(int quality) {
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
  int e = o->effort_set ? o->effort : CODEC_EFFORT_DEFAULT;
  JxlEncoderFrameSettingsSetOption(*fs, JXL_ENC_FRAME_SETTING_EFFORT,
                                   jxl_effort[e < 0   ? 0
                                              : e > 6 ? 6
                                                      : e]);
  if (o->lossless) return JxlEncoderSetFrameLossless(*fs, JXL_TRUE) == JXL_ENC_SUCCESS ? 0 : -1;
  return JxlEncoderSetFrameDistance(*fs, jxl_distance(o->quality)) == JXL_ENC_SUCCESS ? 0 : -1;
}

/* Collects the encoder's output into b. */
static enum codec_status enc_output(JxlEncoder *enc, struct codec_buf *b) {
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
  return JxlEncoderGetError(enc) == JXL_ENC_ERR_OOM ? CODEC_NOMEM : CODEC_UNSUPPORTED;
}

struct jxl_job { /* one encode, here or in a child process */
  const struct codec_image *img;
  const struct codec_encode_opts *o;
  struct codec_buf file; /* the file, as it grows */
};

/* The whole encode of j into j->file. */
static enum codec_status enc_run(struct jxl_job *j) {
  const struct codec_image *img = j->img;
  struct pool pool = {NULL, 0};
  JxlEncoderFrameSettings *fs = NULL;
  JxlPixelFormat fmt = {(uint32_t)img->channels, img->depth == 8 ? JXL_TYPE_UINT8 : JXL_TYPE_UINT16,
                        JXL_NATIVE_ENDIAN, 0};
  size_t n =
      (size_t)img->width * (size_t)img->height * (size_t)img->channels * (size_t)(img->depth / 8);
  JxlEncoder *enc = JxlEncoderCreate(&memory);
  enum codec_status st = enc ? CODEC_OK : CODEC_NOMEM;
  if (st == CODEC_OK && (JxlEncoderSetParallelRunner(enc, lazy_runner, &pool) != JXL_ENC_SUCCESS ||
                         enc_setup(enc, img, j->o, &fs) != 0 ||
                         JxlEncoderAddImageFrame(fs, &fmt, img->pixels, n) != JXL_ENC_SUCCESS))
    st = JxlEncoderGetError(enc) == JXL_ENC_ERR_OOM ? CODEC_NOMEM : CODEC_UNSUPPORTED;
  if (st == CODEC_OK) {
    JxlEncoderCloseInput(enc);
    st = enc_output(enc, &j->file);
  }
  if (enc) JxlEncoderDestroy(enc);
  pool_free(&pool);
  return st;
}

/* In the child: the encode, its file to fd. Exit status 0, or 1 + the failure. */
static int enc_child(void *arg, int fd) {
  struct jxl_job *j = arg;
  enum codec_status st = enc_run(j);
  if (st == CODEC_OK && codec_write_all(fd, j->file.data, j->file.len) != 0) st = CODEC_NOMEM;
  return st == CODEC_OK ? 0 : 1 + (int)st;
}

/* Lossless when o->lossless (every sample kept), else lossy at jxl_distance(o->quality); effort
 * 0..6 as libjxl's 1, 2, 3, 5, 7, 8, 9; 8- or 16-bit, alpha kept, o->icc written. */
static enum codec_status jxl_encode(const struct codec_image *img,
                                    const struct codec_encode_opts *o, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  struct jxl_job j = {img, o, {NULL, 0, 0}};
  struct codec_buf file = {NULL, 0, 0};
  int status = 0;
  *out = NULL, *outlen = 0;
  enum codec_status st = (uint64_t)img->width * (uint64_t)img->height >= JXL_CHILD_PIXELS
                             ? codec_run_child(enc_child, &j, &file, &status)
                             : CODEC_UNSUPPORTED;
  if (st == CODEC_UNSUPPORTED) { /* here, to the end */
    st = codec_stopped() ? CODEC_CANCELLED : enc_run(&j);
    file = j.file;
    if (st == CODEC_OK && codec_stopped()) st = CODEC_CANCELLED;
  } else if (st == CODEC_OK && status != 0) {
    st = status == 128 + 9                             ? CODEC_NOMEM /* killed: out of memory */
         : status > 0 && status <= 1 + CODEC_CANCELLED ? (enum codec_status)(status - 1)
                                                       : CODEC_UNSUPPORTED;
  }
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory encoding the JPEG XL image");
  if (st == CODEC_UNSUPPORTED) codec_msgf(msg, msglen, "libjxl could not encode the image");
  if (st != CODEC_OK) {
    codec_free(file.data);
    return st;
  }
  codec_buf_take(&file, out, outlen);
  return CODEC_OK;
}

/* ---- the format's descriptor ---- */

/* Whether the file keeps its original colour space (not XYB): what lossless files do, and what
 * makes a decode about ten times as long a sample. */
static int jxl_original_profile(const uint8_t *buf, size_t len) {
  struct jxl_dec d;
  int r = 0;
  if (dec_open(&d, buf, len, JXL_DEC_BASIC_INFO) == CODEC_OK &&
      dec_next(&d) == JXL_DEC_BASIC_INFO &&
      JxlDecoderGetBasicInfo(d.dec, &d.info) == JXL_DEC_SUCCESS)
    r = d.info.uses_original_profile != 0;
  dec_close(&d);
  return r;
}

/* XYB files by the JXL terms, those in their original colour space (lossless) by the JXLLL ones. */
static double jxl_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  double px = (double)s->width * s->height, alpha = s->channels == 2 || s->channels == 4 ? px : 0;
  if (jxl_original_profile(buf, len))
    return px * s->channels * COST_DECODE_JXLLL_NS_SAMPLE +
           (double)len * COST_DECODE_JXLLL_NS_BYTE + alpha * COST_DECODE_JXLLL_NS_ALPHA;
  return px * s->channels * COST_DECODE_JXL_NS_SAMPLE + (double)len * COST_DECODE_JXL_NS_BYTE +
         alpha * COST_DECODE_JXL_NS_ALPHA;
}

/* Per pixel by effort, lossy at the default quality, or lossless. */
static double jxl_encode_ns(const struct codec_encode_opts *o, const struct codec_shape *s) {
  static const double lossy[] = COST_JXL_NS_PIXEL, lossless[] = COST_JXL_LOSSLESS_NS_PIXEL;
  int effort = o->effort_set ? o->effort : CODEC_EFFORT_DEFAULT;
  effort = effort < 0 ? 0 : effort >= CODEC_NELEM(lossy) ? CODEC_NELEM(lossy) - 1 : effort;
  return (double)s->width * s->height * (o->lossless ? lossless : lossy)[effort];
}

const struct codec_format_desc codec_jxl_format = {
    .name = "jxl",
    .title = "JPEG XL",
    .mime = "image/jxl",
    .mimes = "",
    .exts = "jxl",
    .lib = "libjxl",
    .reader = "libjxl",
    .writer = "libjxl",
    .exact16 = 0,
    .quality = 1,
    .lossless = 1,
    .sniff = jxl_sniff,
    .probe = jxl_probe,
    .decode = jxl_decode,
    .icc = jxl_icc,
    .encode = jxl_encode,
    .decode_ns = jxl_decode_ns,
    .encode_ns = jxl_encode_ns,
};

/* avif.c: AVIF output through libavif with aom, lossy only: the quality sets aom's quantizer, the
 * effort its speed; 16-bit input becomes 10-bit AV1, alpha is kept. aom has no progress hook, so
 * with a cancellation hook a large encode runs in a child process killed when the hook says stop.
 * Also the AVIF format descriptor, whose decode is heif.c's. */
#include <avif/avif.h>
#include <string.h>
#include <unistd.h>

#include "heif_int.h"

#define MAX_THREADS 16 /* aom's threads, at most one per online CPU */

/* aom's speed for effort 0 (fastest) .. 6 (smallest), as libavif sets it (0..10). */
static const int avif_speed[7] = {9, 8, 7, 6, 5, 4, 3};

/* Pixels of an image whose encode runs here even with a hook: one this small is over within
 * milliseconds at any speed. */
#define AVIF_CHILD_PIXELS (128 * 128)

/* Online CPUs, at most MAX_THREADS. */
static int avif_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* aom's quantizer (0 best .. 63) for quality q (1..100), the mapping of libheif's and later
 * libavif's quality setting. */
static int avif_quantizer(int q) {
  q = q < 0 ? 0 : q > 100 ? 100 : q;
  return ((100 - q) * 63 + 50) / 100;
}

/* img's samples as libavif's RGB: 8 or 16 bits, RGB or RGBA; gray is repeated into RGB in a
 * codec_malloc'd copy (*copy, NULL when img is used as it is). */
static int avif_rgb(const struct codec_image *img, avifRGBImage *rgb, uint8_t **copy) {
  int alpha = img->channels == 2 || img->channels == 4, bytes = img->depth / 8;
  int ch = 3 + alpha;
  rgb->format = alpha ? AVIF_RGB_FORMAT_RGBA : AVIF_RGB_FORMAT_RGB;
  rgb->depth = (uint32_t)img->depth;
  rgb->rowBytes = (uint32_t)((size_t)img->width * (size_t)(ch * bytes));
  *copy = NULL;
  if (img->channels >= 3) {
    rgb->pixels = img->pixels;
    return 0;
  }
  size_t n = (size_t)img->width * (size_t)img->height;
  if ((*copy = codec_malloc(n * (size_t)(ch * bytes))) == NULL) return -1;
  for (size_t i = 0; i < n; i++)
    for (int c = 0; c < ch; c++)
      memcpy(*copy + (i * (size_t)ch + (size_t)c) * (size_t)bytes,
             img->pixels + (i * (size_t)img->channels + (size_t)(c < 3 ? 0 : 1)) * (size_t)bytes,
             (size_t)bytes);
  rgb->pixels = *copy;
  return 0;
}

struct avif_job { /* one encode by libavif with aom, here or in a child process */
  const struct codec_image *img;
  const struct codec_encode_opts *o;
  struct codec_buf file; /* the file */
  avifResult result;     /* libavif's answer */
};

/* The image as libavif's: 8-bit, or 10-bit from 16-bit samples; 4:2:0 below
 * CODEC_JPEG_FULL_CHROMA, 4:4:4 from it, 4:0:0 for gray; nclx sRGB (BT.709 primaries, sRGB
 * transfer, BT.601 matrix, full range), or o->icc when its colours match. */
static avifImage *avif_image(const struct codec_image *img, const struct codec_encode_opts *o,
                             avifResult *r) {
  int gray = img->channels <= 2;
  avifPixelFormat yuv = gray                                   ? AVIF_PIXEL_FORMAT_YUV400
                        : o->quality >= CODEC_JPEG_FULL_CHROMA ? AVIF_PIXEL_FORMAT_YUV444
                                                               : AVIF_PIXEL_FORMAT_YUV420;
  avifImage *image =
      avifImageCreate((uint32_t)img->width, (uint32_t)img->height, img->depth == 16 ? 10 : 8, yuv);
  avifRGBImage rgb;
  uint8_t *copy = NULL;
  *r = AVIF_RESULT_OUT_OF_MEMORY;
  if (image == NULL) return NULL;
  image->colorPrimaries = AVIF_COLOR_PRIMARIES_BT709;
  image->transferCharacteristics = AVIF_TRANSFER_CHARACTERISTICS_SRGB;
  image->matrixCoefficients = AVIF_MATRIX_COEFFICIENTS_BT601;
  image->yuvRange = AVIF_RANGE_FULL;
  if (o->icc && codec_icc_colours(o->icc, o->icc_len) == (gray ? 1 : 3))
    avifImageSetProfileICC(image, o->icc, o->icc_len);
  avifRGBImageSetDefaults(&rgb, image);
  if (avif_rgb(img, &rgb, &copy) == 0) *r = avifImageRGBToYUV(image, &rgb);
  codec_free(copy);
  if (*r != AVIF_RESULT_OK) avifImageDestroy(image), image = NULL;
  return image;
}

/* The whole encode of j into j->file; j->result says how it went. */
static void avif_run(struct avif_job *j) {
  const struct codec_encode_opts *o = j->o;
  avifRWData out = AVIF_DATA_EMPTY;
  avifImage *image = avif_image(j->img, o, &j->result);
  avifEncoder *enc = image ? avifEncoderCreate() : NULL;
  if (image && enc == NULL) j->result = AVIF_RESULT_OUT_OF_MEMORY;
  if (enc) {
    int effort = o->effort_set ? o->effort : CODEC_EFFORT_DEFAULT;
    enc->codecChoice = AVIF_CODEC_CHOICE_AOM;
    enc->speed = avif_speed[effort < 0 ? 0 : effort > 6 ? 6 : effort];
    enc->maxThreads = avif_threads();
    enc->minQuantizer = enc->maxQuantizer = avif_quantizer(o->quality);
    enc->minQuantizerAlpha = enc->maxQuantizerAlpha = avif_quantizer(o->quality);
    j->result = avifEncoderWrite(enc, image, &out);
    if (j->result == AVIF_RESULT_OK && codec_buf_append(&j->file, out.data, out.size) != CODEC_OK)
      j->result = AVIF_RESULT_OUT_OF_MEMORY;
    avifRWDataFree(&out);
    avifEncoderDestroy(enc);
  }
  if (image) avifImageDestroy(image);
}

/* In the child: the encode, its file to fd. Exit status 0, or 1 + libavif's result. */
static int avif_child(void *arg, int fd) {
  struct avif_job *j = arg;
  avif_run(j);
  if (j->result == AVIF_RESULT_OK && codec_write_all(fd, j->file.data, j->file.len) != 0)
    j->result = AVIF_RESULT_IO_ERROR;
  return j->result == AVIF_RESULT_OK ? 0 : 1 + ((int)j->result & 0x7f);
}

/* Lossy AVIF at o->quality (1..100) and o->effort (0..6; effort_set), alpha kept, 16-bit input
 * as 10-bit, o->icc embedded. CODEC_UNSUPPORTED for o->lossless. */
static enum codec_status avif_encode(const struct codec_image *img,
                                     const struct codec_encode_opts *o, uint8_t **out,
                                     size_t *outlen, char *msg, size_t msglen) {
  struct avif_job j = {img, o, {NULL, 0, 0}, AVIF_RESULT_OK};
  struct codec_buf file = {NULL, 0, 0};
  int status = 0;
  *out = NULL, *outlen = 0;
  if (o->lossless) {
    codec_msgf(msg, msglen, "lossless AVIF is not supported; ask for PNG, WebP or JPEG XL");
    return CODEC_UNSUPPORTED;
  }
  enum codec_status st = (uint64_t)img->width * (uint64_t)img->height >= AVIF_CHILD_PIXELS
                             ? codec_run_child(avif_child, &j, &file, &status)
                             : CODEC_UNSUPPORTED;
  if (st == CODEC_UNSUPPORTED) { /* here, to the end */
    if (codec_stopped()) return CODEC_CANCELLED;
    avif_run(&j);
    file = j.file;
    status = j.result == AVIF_RESULT_OK ? 0 : 1 + ((int)j.result & 0x7f);
    st = status == 0 && codec_stopped() ? CODEC_CANCELLED : CODEC_OK;
  }
  if (st == CODEC_OK && status != 0) {
    int nomem = status == 1 + AVIF_RESULT_OUT_OF_MEMORY || status == 128 + 9;
    st = nomem ? CODEC_NOMEM : CODEC_UNSUPPORTED;
    if (status >= 128)
      codec_msgf(msg, msglen, "the AVIF encoder was stopped by signal %d", status - 128);
    else
      codec_msgf(msg, msglen, "libavif could not encode the image: %s",
                 avifResultToString((avifResult)(status - 1)));
  }
  if (st != CODEC_OK) {
    codec_free(file.data);
    return st;
  }
  codec_buf_take(&file, out, outlen);
  return CODEC_OK;
}

/* ---- the format's descriptor ---- */

/* AVIF is read by heif.c's decode, as HEIC is; the cost of that decode differs by codec. */
static double avif_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  (void)buf;
  double px = (double)s->width * s->height, alpha = s->channels == 2 || s->channels == 4 ? px : 0;
  return px * s->channels * COST_DECODE_AVIF_NS_SAMPLE + (double)len * COST_DECODE_AVIF_NS_BYTE +
         alpha * COST_DECODE_AVIF_NS_ALPHA;
}

/* Per pixel by effort (aom's speed), at the default quality; alpha as much again. */
static double avif_encode_ns(const struct codec_encode_opts *o, const struct codec_shape *s) {
  static const double ns[] = COST_AVIF_NS_PIXEL;
  int effort = o->effort_set ? o->effort : CODEC_EFFORT_DEFAULT;
  effort = effort < 0 ? 0 : effort >= CODEC_NELEM(ns) ? CODEC_NELEM(ns) - 1 : effort;
  double px = (double)s->width * s->height;
  return px * ns[effort] * (s->channels == 2 || s->channels == 4 ? 2 : 1);
}

const struct codec_format_desc codec_avif_format = {
    .name = "avif",
    .title = "AVIF",
    .mime = "image/avif",
    .mimes = "image/avif-sequence",
    .exts = "avif",
    .lib = "libheif",
    .reader = "libheif, dav1d",
    .writer = "libavif, aom",
    .quality = 1,
    .sniff = codec_avif_sniff,
    .probe = codec_heif_probe,
    .decode = codec_heif_decode,
    .icc = codec_heif_icc,
    .encode = avif_encode,
    .decode_ns = avif_decode_ns,
    .encode_ns = avif_encode_ns,
};

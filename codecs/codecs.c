/* codecs.c: the format-neutral half of the codecs module.
 *
 * It recognises a format from its magic bytes, names formats and statuses, checks arguments, and
 * hands the work to png.c, jpeg.c or webp.c. It also holds the two helpers every decoder uses, so
 * that all of them word their failures alike: codec_msgf() for the sentence and
 * codec_check_size() for the limit check that must happen before any pixel buffer is allocated;
 * the conversion to 8-bit samples that the JPEG and WebP encoders share; and the module's
 * allocator, through which every allocation passes so that tests can make any one of them fail. */
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "codecs_int.h"

static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
static const uint8_t jpeg_magic[3] = {0xff, 0xd8, 0xff};
#define WEBP_MAGIC_LEN 12 /* "RIFF", the RIFF size (4 bytes), "WEBP" */

enum codec_format codec_sniff(const uint8_t *buf, size_t len) {
  if (buf == NULL) return CODEC_NONE;
  if (len >= sizeof png_magic && memcmp(buf, png_magic, sizeof png_magic) == 0) return CODEC_PNG;
  if (len >= sizeof jpeg_magic && memcmp(buf, jpeg_magic, sizeof jpeg_magic) == 0)
    return CODEC_JPEG;
  if (len >= WEBP_MAGIC_LEN && memcmp(buf, "RIFF", 4) == 0 && memcmp(buf + 8, "WEBP", 4) == 0)
    return CODEC_WEBP;
  return CODEC_NONE;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* PNG: the IHDR chunk right after the signature (colour type 0 gray, 2 RGB, 3 palette, 4 gray
 * and alpha, 6 RGBA). */
static int png_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  static const int channels[] = {1, 0, 3, 4, 2, 0, 4};
  if (len < 33 || be32(buf + 8) != 13 || memcmp(buf + 12, "IHDR", 4) != 0) return -1;
  uint32_t w = be32(buf + 16), h = be32(buf + 20);
  int type = buf[25];
  if (w == 0 || h == 0 || w > INT32_MAX || h > INT32_MAX || type > 6 || !channels[type]) return -1;
  *out = (struct codec_shape){(int)w, (int)h, channels[type]};
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
    *out = (struct codec_shape){info.width, info.height, info.channels};
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

/* Allocations still to succeed before one fails; -1: none will (the service never arms it). */
static atomic_long alloc_countdown = -1;

long codec_test_fail_alloc(long n) {
  return atomic_exchange(&alloc_countdown, n < 0 ? -1 : n);
}

int codec_alloc_fails(void) {
  long left = atomic_load_explicit(&alloc_countdown, memory_order_relaxed);
  while (left >= 0) /* 0: this is the one to fail; then the countdown disarms itself at -1 */
    if (atomic_compare_exchange_weak(&alloc_countdown, &left, left - 1)) return left == 0;
  return 0;
}

void *codec_alloc_pixels(size_t n) {
  enum { HUGE_PAGE = 2 << 20 };
  uint8_t *p = malloc(n);
  uintptr_t lo = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
  uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(HUGE_PAGE - 1);
  if (p && hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a hint: failure is harmless */
  return p;
}

void *codec_malloc(size_t n) {
  return codec_alloc_fails() ? NULL : codec_alloc_pixels(n);
}

void *codec_realloc(void *p, size_t n) {
  return codec_alloc_fails() ? NULL : realloc(p, n);
}

enum codec_status codec_buf_append(struct codec_buf *b, const void *data, size_t n) {
  if (n > b->cap - b->len) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n) {
      if (cap > SIZE_MAX / 2) return CODEC_TOO_LARGE;
      cap *= 2;
    }
    uint8_t *p = codec_realloc(b->data, cap);
    if (p == NULL) return CODEC_NOMEM;
    b->data = p;
    b->cap = cap;
  }
  memcpy(b->data + b->len, data, n);
  b->len += n;
  return CODEC_OK;
}

void codec_buf_take(struct codec_buf *b, uint8_t **out, size_t *len) {
  uint8_t *shrunk = codec_realloc(b->data, b->len); /* give back the slack of the doubling */
  *out = shrunk != NULL ? shrunk : b->data;
  *len = b->len;
  *b = (struct codec_buf){NULL, 0, 0};
}

void codec_free(void *p) {
  free(p);
}

void codec_msgf(char *msg, size_t msglen, const char *fmt, ...) {
  if (msg == NULL || msglen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, msglen, fmt, ap);
  va_end(ap);
}

static enum codec_status check_limits(uint64_t w, uint64_t h, const struct codec_limits *lim,
                                      char *msg, size_t msglen) {
  if (lim == NULL) return CODEC_OK;
  if (lim->max_width && w > lim->max_width) {
    codec_msgf(msg, msglen, "width %llu exceeds the limit of %lu", (unsigned long long)w,
               (unsigned long)lim->max_width);
    return CODEC_TOO_LARGE;
  }
  if (lim->max_height && h > lim->max_height) {
    codec_msgf(msg, msglen, "height %llu exceeds the limit of %lu", (unsigned long long)h,
               (unsigned long)lim->max_height);
    return CODEC_TOO_LARGE;
  }
  if (lim->max_pixels && w * h > lim->max_pixels) {
    codec_msgf(msg, msglen, "pixel count %llu (%llux%llu) exceeds the limit of %llu",
               (unsigned long long)(w * h), (unsigned long long)w, (unsigned long long)h,
               (unsigned long long)lim->max_pixels);
    return CODEC_TOO_LARGE;
  }
  return CODEC_OK;
}

static enum codec_status beyond_reach(uint64_t w, uint64_t h, char *msg, size_t msglen) {
  codec_msgf(msg, msglen, "the image size %llux%llu is beyond what this service can hold",
             (unsigned long long)w, (unsigned long long)h);
  return CODEC_TOO_LARGE;
}

enum codec_status codec_check_size(uint64_t w, uint64_t h, unsigned bytes_per_pixel,
                                   const struct codec_limits *lim, size_t *nbytes, char *msg,
                                   size_t msglen) {
  *nbytes = 0;
  if (w == 0 || h == 0) {
    codec_msgf(msg, msglen, "the image has a width or height of zero");
    return CODEC_CORRUPT;
  }
  if (w > UINT32_MAX || h > UINT32_MAX) return beyond_reach(w, h, msg, msglen);
  enum codec_status st = check_limits(w, h, lim, msg, msglen); /* w * h fits 64 bits */
  if (st != CODEC_OK) return st;
  uint64_t pixels = w * h;
  if (w > INT_MAX || h > INT_MAX || bytes_per_pixel == 0 ||
      pixels > (uint64_t)SIZE_MAX / bytes_per_pixel) /* codec_image holds int sizes */
    return beyond_reach(w, h, msg, msglen);
  *nbytes = (size_t)(pixels * bytes_per_pixel);
  return CODEC_OK;
}

static uint64_t sample_at(const uint8_t *p, int i, int depth) {
  if (depth == 8) return p[i];
  uint16_t v;
  memcpy(&v, p + 2 * i, sizeof v);
  return v;
}

uint8_t *codec_to_8bit(const struct codec_image *img, int colours, int keep_alpha, int *channels) {
  int in_ch = img->channels, alpha = in_ch == 2 || in_ch == 4, gray = in_ch <= 2;
  int out_ch = colours + (alpha && keep_alpha);
  size_t npix = (size_t)img->width * (size_t)img->height, in_px = (size_t)in_ch * (img->depth / 8);
  uint64_t max = img->depth == 8 ? 255 : 65535, den = max * max;
  uint8_t *dst = codec_malloc(npix * (size_t)out_ch);
  if (dst == NULL) return NULL;
  for (size_t i = 0; i < npix; i++) {
    const uint8_t *p = img->pixels + i * in_px;
    uint64_t a = alpha ? sample_at(p, in_ch - 1, img->depth) : max;
    uint64_t w = keep_alpha ? max : a; /* the colour's weight against white */
    uint8_t *d = dst + i * (size_t)out_ch;
    for (int c = 0; c < colours; c++)
      d[c] = (uint8_t)(((sample_at(p, gray ? 0 : c, img->depth) * w + max * (max - w)) * 255 +
                        den / 2) /
                       den);
    if (out_ch > colours) d[colours] = (uint8_t)((a * max * 255 + den / 2) / den);
  }
  *channels = out_ch;
  return dst;
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

/* TurboJPEG's file, with o->icc inserted when there is one. */
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

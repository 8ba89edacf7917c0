/* The helpers every file of codecs/ shares, below the format files: the allocator (through which
 * every allocation passes, so that tests can make any one fail), the growing output buffer, the
 * statuses' sentences and the limit check, the conversion to 8-bit samples, the cost model's
 * curves, and the thread's cancellation hook. Nothing here calls a format file. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"

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

static _Thread_local const struct codec_cancel *cancel_hook; /* codec_cancel_set's */

void codec_cancel_set(const struct codec_cancel *c) {
  cancel_hook = c;
}

const struct codec_cancel *codec_cancel_get(void) {
  return cancel_hook;
}

int codec_stopped(void) {
  const struct codec_cancel *c = cancel_hook;
  return c && c->stop && c->stop(c->arg) != 0;
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

uint32_t codec_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void codec_put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
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

enum codec_status codec_to_8bit(const struct codec_image *img, int colours, int keep_alpha,
                                uint8_t **out, int *channels) {
  int in_ch = img->channels, alpha = in_ch == 2 || in_ch == 4, gray = in_ch <= 2;
  int out_ch = colours + (alpha && keep_alpha);
  size_t npix = (size_t)img->width * (size_t)img->height, in_px = (size_t)in_ch * (img->depth / 8);
  uint64_t max = img->depth == 8 ? 255 : 65535, den = max * max;
  uint8_t *dst = *out = codec_malloc(npix * (size_t)out_ch);
  if (dst == NULL) return CODEC_NOMEM;
  for (size_t i = 0; i < npix; i++) {
    if (i % (size_t)img->width == 0 && codec_stopped()) { /* each row: at most 65535 pixels */
      codec_free(dst);
      *out = NULL;
      return CODEC_CANCELLED;
    }
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
  return CODEC_OK;
}

double codec_interpolate(const double *xs, const double *ys, int n, double x) {
  if (x <= xs[0]) return ys[0];
  for (int i = 1; i < n; i++)
    if (x <= xs[i]) return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
  return ys[n - 1];
}

double codec_by_size(const double *sizes, const double *ys, int n, double pixels) {
  double logs[16];
  n = n < 16 ? n : 16;
  for (int i = 0; i < n; i++) logs[i] = log(sizes[i]);
  return codec_interpolate(logs, ys, n, log(pixels > 1 ? pixels : 1));
}

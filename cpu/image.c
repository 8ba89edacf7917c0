/* Whole-image blurring on the CPU (cpu_blur_image): each channel filtered along x with sigma_x,
 * then along y with sigma_y, through planes of doubles, and rounded back (or handed to fir.c's
 * integers or sep.c's tiles); then, when asked, the result measured against the exact reference,
 * which takes the same planes. */
#include "cpu_int.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* Every 1-D pass runs over STRIP lines side by side, so the inner loops run across the lines and
 * vectorise: the x pass gathers STRIP image rows of one channel and leaves a transposed plane,
 * the y pass gathers STRIP of its rows (image columns). The strip filters mirror the one-line
 * statements in gauss.c operation for operation, so both give the same bits (tested). */
#define STRIP     16 /* columns filtered side by side */
#define PAD       4  /* scratch rows before and after a strip, for recursive filters' edges */
/* Differences below this many levels are the double-precision reference's own rounding: they
 * count as none, so an exactly right output scores an infinite PSNR. */
#define REF_NOISE 1e-6

/* Four doubles, and four doubles at any address (one unaligned vector move; two without AVX). */
typedef double vd __attribute__((vector_size(32)));
typedef double vdu __attribute__((vector_size(32), aligned(8), may_alias));
typedef long long vl __attribute__((vector_size(32)));
typedef int vi4 __attribute__((vector_size(16)));
#define LDD(p) (*(const vdu *)(p))

enum filter_kind { FILTER_FIR, FILTER_YVV, FILTER_YVV2WAY, FILTER_DERICHE, FILTER_PYRAMID };

struct filter { /* one method along one axis, ready to run on strips */
  enum filter_kind kind;
  int radius;           /* FIR, PYRAMID: kernel radius; YVV2WAY: the centre pixel's FIR radius */
  double *w;            /* FIR, YVV2WAY, PYRAMID: w[0..radius], owned */
  double *tail;         /* FIR: tail[j] = w[j] + ... + w[radius], j in [0, radius+1], owned */
  struct cpu_yvv yvv;   /* YVV, YVV2WAY */
  struct cpu_deriche d; /* DERICHE */
  int k;                /* PYRAMID: reduction factor */
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void filter_free(struct filter *f) {
  free(f->w);
  free(f->tail);
  f->w = f->tail = NULL;
}

/* The sampled Gaussian of sigma and radius into f, with its tail sums. Returns ERR_OK, or
 * ERR_OUT_OF_MEMORY. */
static enum err filter_kernel(struct filter *f, double sigma, int radius) {
  f->radius = radius;
  f->w = malloc((size_t)(radius + 1) * sizeof(double));
  f->tail = malloc((size_t)(radius + 2) * sizeof(double));
  if (!f->w || !f->tail) {
    filter_free(f);
    return ERR_OUT_OF_MEMORY;
  }
  cpu_gauss_kernel(sigma, radius, f->w);
  f->tail[radius + 1] = 0;
  for (int j = radius; j >= 0; j--) f->tail[j] = f->tail[j + 1] + f->w[j];
  return ERR_OK;
}

/* Method b->method along one axis, whose sigma is sigma (b->sigma_x or b->sigma_y). Returns
 * ERR_OK, ERR_OUT_OF_MEMORY or cpu_yvv_coeffs's ERR_BAD_PARAMETER. */
static enum err filter_init(struct filter *f, const struct cpu_blur *b, double sigma) {
  enum err e;
  memset(f, 0, sizeof(*f));
  switch (b->method) {
  case CPU_YVV:
  case CPU_YVV_BLOCKED: /* the same filter; only the GPU computes it block by block */
    f->kind = FILTER_YVV;
    return cpu_yvv_coeffs(sigma, b->coeffs, &f->yvv);
  case CPU_YVV2WAY:
    f->kind = FILTER_YVV2WAY;
    if ((e = cpu_yvv_coeffs(sigma, b->coeffs, &f->yvv)) != ERR_OK) return e;
    return filter_kernel(f, sigma, cpu_paper_radius(sigma));
  case CPU_DERICHE:
    f->kind = FILTER_DERICHE;
    cpu_deriche_coeffs(sigma, &f->d);
    return ERR_OK;
  case CPU_PYRAMID: {
    struct cpu_pyramid p;
    cpu_pyramid_params(sigma, b->truncate, &p);
    f->kind = p.k > 1 ? FILTER_PYRAMID : FILTER_FIR, f->k = p.k;
    return filter_kernel(f, p.sigma_low, p.radius);
  }
  default: /* separable, and the exact reference */
    f->kind = FILTER_FIR;
    return filter_kernel(f, sigma, cpu_gauss_radius(sigma, b->truncate));
  }
}

/* f[0] along x (b->sigma_x) and f[1] along y (b->sigma_y). Returns what filter_init returns;
 * free with filters_free() whatever it returns. */
static enum err filters_init(struct filter f[2], const struct cpu_blur *b) {
  enum err ex = filter_init(&f[0], b, b->sigma_x), ey = filter_init(&f[1], b, b->sigma_y);
  return ex != ERR_OK ? ex : ey;
}

static void filters_free(struct filter f[2]) {
  filter_free(&f[0]);
  filter_free(&f[1]);
}

#ifdef CPU_AVX512
typedef double vd8 __attribute__((vector_size(64)));
typedef double vd8u __attribute__((vector_size(64), aligned(8), may_alias));
#define LDD8(p) (*(const vd8u *)(p))

/* Row c's nv vectors of eight doubles (nv 2: one row of STRIP, 4: two rows) filtered into o. */
CPU_AVX512 static inline void fir_rows8(const double *w, int r, const double *c, double *o,
                                        int nv) {
  vd8 a[4];
  for (int v = 0; v < nv; v++) a[v] = w[0] * LDD8(c + 8 * v);
  for (int k = 1; k <= r; k++) {
    const double *lo = c - (size_t)k * STRIP, *hi = c + (size_t)k * STRIP;
    for (int v = 0; v < nv; v++) a[v] += w[k] * (LDD8(lo + 8 * v) + LDD8(hi + 8 * v));
  }
  for (int v = 0; v < nv; v++) *(vd8u *)(o + 8 * v) = a[v];
}

/* fir_strip's rows [i0, i1), away from the edges, with eight doubles a vector (one AVX-512
 * register) and two rows a step: four registers of sums in flight, each a chain of dependent
 * adds. The same operations in the same order as fir_strip's, so the same bits. in and out do
 * not overlap. */
CPU_AVX512 static void fir_interior8(const double *w, int r, const double *in, double *out, int i0,
                                     int i1) {
  int i = i0;
  for (; i + 2 <= i1; i += 2) fir_rows8(w, r, in + (size_t)i * STRIP, out + (size_t)i * STRIP, 4);
  for (; i < i1; i++) fir_rows8(w, r, in + (size_t)i * STRIP, out + (size_t)i * STRIP, 2);
}
#endif

/* FIR down a strip: in and out hold n rows of STRIP values. Taps that fall outside [0, n) land
 * on the edge rows, so their weights are added there at once (tail sums): the cost per output
 * is at most min(2r+1, n) + 2 rows, also when the kernel is wider than the image. Away from the
 * edges the symmetric taps are folded: one multiply per pair. A wide kernel on a long strip is
 * a lot of work, so the cancel token is looked at every CPU_TICK_WORK taps; a cancelled strip is
 * left unfinished. */
CPU_HOT static void fir_strip(const struct filter *f, const double *in, double *out, int n) {
  const double *w = f->w, *tail = f->tail;
  int r = f->radius;
  long left = 0, per_row = (long)STRIP * (r + 1);
  for (int i = 0; i < n; i++) {
    double *o = out + (size_t)i * STRIP;
    const double *c = in + (size_t)i * STRIP;
    if (cpu_tick(&left, per_row)) return;
#ifdef CPU_AVX512
    if (i >= r && i + r < n && __builtin_cpu_supports("avx512f")) {
      int i1 =
          n - r - i > 1 + CPU_TICK_WORK / per_row ? i + 1 + (int)(CPU_TICK_WORK / per_row) : n - r;
      fir_interior8(w, r, in, out, i, i1);
      left -= (i1 - i - 1) * per_row;
      i = i1 - 1;
      continue;
    }
#endif
    if (i >= r && i + r < n) { /* the sums in registers: out may alias in for all GCC knows */
      vd a[STRIP / 4];
      for (int v = 0; v < STRIP / 4; v++) a[v] = w[0] * LDD(c + 4 * v);
      for (int k = 1; k <= r; k++) {
        const double *lo = c - (size_t)k * STRIP, *hi = c + (size_t)k * STRIP;
        for (int v = 0; v < STRIP / 4; v++) a[v] += w[k] * (LDD(lo + 4 * v) + LDD(hi + 4 * v));
      }
      for (int v = 0; v < STRIP / 4; v++) *(vdu *)(o + 4 * v) = a[v];
      continue;
    }
    double wl = i + 1 <= r ? tail[i + 1] : 0;
    double wr = n - i <= r ? tail[n - i] : 0;
    const double *first = in, *last = in + (size_t)(n - 1) * STRIP;
    vd a[STRIP / 4]; /* in registers too: near the edges a row is up to 2r + 1 taps */
    for (int v = 0; v < STRIP / 4; v++) a[v] = wl * LDD(first + 4 * v) + wr * LDD(last + 4 * v);
    int lo = i < r ? -i : -r, hi = n - 1 - i < r ? n - 1 - i : r;
    for (int k = lo; k <= hi; k++) {
      double wk = w[k < 0 ? -k : k];
      const double *row = in + (size_t)(i + k) * STRIP;
      for (int v = 0; v < STRIP / 4; v++) a[v] += wk * LDD(row + 4 * v);
    }
    for (int v = 0; v < STRIP / 4; v++) *(vdu *)(o + 4 * v) = a[v];
  }
}

/* Rows -PAD..-1 of x get row 0 times g, rows n..n+PAD-1 get row n-1 times g2. */
static void pad_edges(double *x, int n, double g, double g2) {
  const double *first = x, *last = x + (size_t)(n - 1) * STRIP;
  for (int j = 1; j <= PAD; j++)
    for (int s = 0; s < STRIP; s++) {
      x[-j * STRIP + s] = first[s] * g;
      x[(size_t)(n - 1 + j) * STRIP + s] = last[s] * g2;
    }
}

/* Young-van Vliet down a strip, in place; x has PAD scratch rows on each side. As
 * cpu_yvv_line, STRIP lines at a time. */
CPU_HOT static void yvv_strip(const struct cpu_yvv *c, double *x, int n) {
  double b = c->b, a1 = c->a[0], a2 = c->a[1], a3 = c->a[2];
  double *xl = x + (size_t)(n - 1) * STRIP, edge[STRIP];
  memcpy(edge, xl, sizeof(edge));
  pad_edges(x, n, 1, 1);
  for (int k = 0; k < n; k++) {
    double *u = x + (size_t)k * STRIP;
    for (int s = 0; s < STRIP; s++)
      u[s] = b * u[s] + a1 * u[s - STRIP] + a2 * u[s - 2 * STRIP] + a3 * u[s - 3 * STRIP];
  }
  for (int s = 0; s < STRIP; s++) {
    double d0 = xl[s] - edge[s], d1 = xl[s - STRIP] - edge[s], d2 = xl[s - 2 * STRIP] - edge[s];
    for (int i = 0; i < 3; i++)
      xl[s + i * STRIP] = b * (c->m[i][0] * d0 + c->m[i][1] * d1 + c->m[i][2] * d2) + edge[s];
  }
  for (int k = n - 2; k >= 0; k--) {
    double *v = x + (size_t)k * STRIP;
    for (int s = 0; s < STRIP; s++)
      v[s] = b * v[s] + a1 * v[s + STRIP] + a2 * v[s + 2 * STRIP] + a3 * v[s + 3 * STRIP];
  }
}

/* Deriche down a strip: in (padded) to out; tmp (padded) holds the anti-causal part. As
 * cpu_deriche_line. */
CPU_HOT static void deriche_strip(const struct cpu_deriche *c, double *in, double *out, double *tmp,
                                  int n) {
  const double *a = c->a, *b = c->bc, *ba = c->ba;
  pad_edges(in, n, 1, 1);
  for (int j = 1; j <= PAD; j++) /* each part's steady state beyond its starting edge */
    for (int s = 0; s < STRIP; s++) {
      out[-j * STRIP + s] = in[s] * c->gc;
      tmp[(size_t)(n - 1 + j) * STRIP + s] = in[(size_t)(n - 1) * STRIP + s] * c->ga;
    }
  for (int k = 0; k < n; k++) {
    const double *x = in + (size_t)k * STRIP;
    double *y = out + (size_t)k * STRIP;
    for (int s = 0; s < STRIP; s++)
      y[s] = b[0] * x[s] + b[1] * x[s - STRIP] + b[2] * x[s - 2 * STRIP] + b[3] * x[s - 3 * STRIP] -
             (a[1] * y[s - STRIP] + a[2] * y[s - 2 * STRIP] + a[3] * y[s - 3 * STRIP] +
              a[4] * y[s - 4 * STRIP]);
  }
  for (int k = n - 1; k >= 0; k--) {
    const double *x = in + (size_t)k * STRIP;
    double *y = tmp + (size_t)k * STRIP, *o = out + (size_t)k * STRIP;
    for (int s = 0; s < STRIP; s++) {
      y[s] = ba[1] * x[s + STRIP] + ba[2] * x[s + 2 * STRIP] + ba[3] * x[s + 3 * STRIP] +
             ba[4] * x[s + 4 * STRIP] -
             (a[1] * y[s + STRIP] + a[2] * y[s + 2 * STRIP] + a[3] * y[s + 3 * STRIP] +
              a[4] * y[s + 4 * STRIP]);
      o[s] += y[s];
    }
  }
}

/* The two-way partitioned filter down a strip: in (padded) to out (padded). As cpu_yvv2way_line. */
CPU_HOT static void yvv2way_strip(const struct filter *f, double *in, double *out, int n) {
  const struct cpu_yvv *c = &f->yvv;
  double b = c->b, a1 = c->a[0], a2 = c->a[1], a3 = c->a[2], pc[STRIP] = {0};
  int h = n / 2, r = f->radius;
  for (int k = -r; k <= r; k++) {
    int j = h + k < 0 ? 0 : h + k >= n ? n - 1 : h + k;
    for (int s = 0; s < STRIP; s++) pc[s] += f->w[k < 0 ? -k : k] * in[(size_t)j * STRIP + s];
  }
  for (int j = 1; j <= 3; j++) /* the first pass starts from the replicated edges */
    for (int s = 0; s < STRIP; s++) {
      out[-j * STRIP + s] = in[s];
      out[(size_t)(n - 1 + j) * STRIP + s] = in[(size_t)(n - 1) * STRIP + s];
    }
  for (int i = 0; i < h; i++) {
    double *u = out + (size_t)i * STRIP;
    for (int s = 0; s < STRIP; s++)
      u[s] = b * in[(size_t)i * STRIP + s] + a1 * u[s - STRIP] + a2 * u[s - 2 * STRIP] +
             a3 * u[s - 3 * STRIP];
  }
  for (int i = n - 1; i > h; i--) {
    double *u = out + (size_t)i * STRIP;
    for (int s = 0; s < STRIP; s++)
      u[s] = b * in[(size_t)i * STRIP + s] + a1 * u[s + STRIP] + a2 * u[s + 2 * STRIP] +
             a3 * u[s + 3 * STRIP];
  }
  /* The second passes start from the centre value on both sides; the right block's first rows
   * are still needed by its own second pass, so the seeds live in state, not in out. */
  double l1[STRIP], l2[STRIP], l3[STRIP], r1[STRIP], r2[STRIP], r3[STRIP];
  for (int s = 0; s < STRIP; s++) l1[s] = l2[s] = l3[s] = r1[s] = r2[s] = r3[s] = pc[s];
  for (int i = h - 1; i >= 0; i--) {
    double *u = out + (size_t)i * STRIP;
    for (int s = 0; s < STRIP; s++) {
      u[s] = b * u[s] + a1 * l1[s] + a2 * l2[s] + a3 * l3[s];
      l3[s] = l2[s], l2[s] = l1[s], l1[s] = u[s];
    }
  }
  for (int i = h + 1; i < n; i++) {
    double *u = out + (size_t)i * STRIP;
    for (int s = 0; s < STRIP; s++) {
      u[s] = b * u[s] + a1 * r1[s] + a2 * r2[s] + a3 * r3[s];
      r3[s] = r2[s], r2[s] = r1[s], r1[s] = u[s];
    }
  }
  memcpy(out + (size_t)h * STRIP, pc, sizeof(pc));
}

/* Rows of scratch pyramid_strip needs for n rows: the reduced strip with its edges, twice. */
static size_t pyramid_rows(const struct filter *f, int n) {
  return f->kind == FILTER_PYRAMID ? 2 * (size_t)((n + f->k - 1) / f->k + 2 * (f->radius + 1)) : 0;
}

/* pyramid down a strip: in (n rows) to out, through low (pyramid_rows). As cpu_pyramid_line. */
CPU_HOT static void pyramid_strip(const struct filter *f, const double *in, double *out,
                                  double *low, int n) {
  int k = f->k, r = f->radius, m = (n + k - 1) / k, e = r + 1;
  const double *w = f->w;
  double *fl = low + (size_t)(m + 2 * e) * STRIP;
  for (int j = -e; j < m + e; j++) { /* cell j at row j + e */
    double *s = low + (size_t)(j + e) * STRIP;
    for (int c = 0; c < STRIP; c++) s[c] = 0;
    for (int a = -(k / 2); a < 2 * k - k / 2; a++) {
      int i = k * j + a;
      double t = cpu_pyramid_tri(k, a);
      const double *x = in + (size_t)(i < 0 ? 0 : i >= n ? n - 1 : i) * STRIP;
      for (int c = 0; c < STRIP; c++) s[c] += t * x[c];
    }
    for (int c = 0; c < STRIP; c++) s[c] /= (double)k * k;
  }
  for (int j = e - 1; j <= m + e; j++) {
    double *s = fl + (size_t)j * STRIP;
    const double *c0 = low + (size_t)j * STRIP;
    for (int c = 0; c < STRIP; c++) s[c] = w[0] * c0[c];
    for (int t = 1; t <= r; t++) {
      const double *lo = c0 - (size_t)t * STRIP, *hi = c0 + (size_t)t * STRIP;
      for (int c = 0; c < STRIP; c++) s[c] += w[t] * (lo[c] + hi[c]);
    }
  }
  for (int i = 0; i < n; i++) {
    int j = i / k;
    double wt[3], *o = out + (size_t)i * STRIP;
    const double *a = fl + (size_t)(j + e - 1) * STRIP, *b = a + STRIP, *c = b + STRIP;
    cpu_pyramid_weights(k, i - j * k, wt);
    for (int s = 0; s < STRIP; s++) o[s] = wt[0] * a[s] + wt[1] * b[s] + wt[2] * c[s];
  }
}

/* One 1-D pass over a channel, STRIP lines at a time: along x (rows), from the image's channel
 * into the plane between the passes, or along y (columns), from that plane into a plane of h
 * rows of w and/or the image. The plane holds the image's columns in strips of STRIP, each h
 * rows of STRIP values with PAD rows before and after: the y pass's strips as they are filtered,
 * read in place, and the x pass writes each of its strips into blocks of STRIP x STRIP values
 * (2 KB, contiguous). The x pass gathers its strip straight from the image's channel. */
struct pass {
  const struct filter *f;      /* the filter of this pass's axis */
  const struct cpu_image *img; /* along x: the image, its channel ch, premultiplied or not */
  int ch, premultiply;
  double *t;             /* the plane between the passes (between_size()) */
  double *out;           /* along y: the result, h rows of w, or NULL */
  struct cpu_image *dst; /* along y: the result rounded into channel ch of dst, or NULL */
  const double *alpha;   /* with dst: the filtered alpha plane that colour is divided by, or NULL */
  int along_y;
  int failed; /* set when a chunk could not get its scratch memory */
};

/* Filtered values v[0..n) of pixels j..j+n-1 (n <= STRIP; v has STRIP values) rounded into
 * channel ch of img; with alpha, v is premultiplied colour, divided by each pixel's filtered
 * alpha. The rounding runs on all STRIP values at once (vectorised), the stores one by one. */
CPU_HOT static void store(struct cpu_image *img, size_t j, int ch, const double *v, int n,
                          const double *alpha) {
  double max = (1 << img->depth) - 1, x[STRIP];
  int c = img->channels, q[STRIP];
  memcpy(x, v, sizeof(x));
  /* colour of a pixel whose alpha rounds to 0 is 0: invisible, and the same everywhere */
  for (int i = 0; alpha && i < n; i++) x[i] = alpha[j + i] >= 0.5 ? x[i] * max / alpha[j + i] : 0;
  const vd zero = {0, 0, 0, 0}, top = {max, max, max, max};
  for (int i = 0; i < STRIP; i += 4) { /* floor(x + 0.5) in [0, max]: clamped, then truncated */
    vd y = LDD(x + i);
    vl big = y >= top;
    y = (vd)((vl)y & (y > zero)); /* below 0 (or NaN): 0 */
    y = (vd)(((vl)y & ~big) | ((vl)top & big));
    vi4 r = __builtin_convertvector(y + 0.5, vi4);
    memcpy(q + i, &r, sizeof(r));
  }
  if (img->depth == 8) {
    uint8_t *d = (uint8_t *)img->data + j * c + ch;
    for (int i = 0; i < n; i++) d[(size_t)i * c] = (uint8_t)q[i];
  } else {
    uint16_t *d = (uint16_t *)img->data + j * c + ch;
    for (int i = 0; i < n; i++) d[(size_t)i * c] = (uint16_t)q[i];
  }
}

/* 8-bit samples p[s rs + x c] of sl rows (s < sl) into in[x STRIP + s], x in [0, w): a pixel of
 * every row at a time, so that in is written in order; image row by image row, each write would
 * land in a different cache line of a buffer larger than L1. */
CPU_HOT static void gather8(const uint8_t *p, size_t rs, int c, int w, int sl, double *in) {
  for (int x = 0; x < w; x++) {
    const uint8_t *q = p + (size_t)x * c;
    double *d = in + (size_t)x * STRIP;
    if (sl == STRIP)
      for (int s = 0; s < STRIP; s++) d[s] = q[s * rs];
    else
      for (int s = 0; s < sl; s++) d[s] = q[s * rs];
  }
}

/* Strip `strip` of image rows (of channel ps->ch) into in: w rows of STRIP. Returns the rows it
 * holds. */
static int gather(const struct pass *ps, int strip, double *in) {
  const struct cpu_image *img = ps->img;
  int w = img->width, h = img->height, c = img->channels, l0 = strip * STRIP;
  int sl = h - l0 < STRIP ? h - l0 : STRIP;
  double inv_max = 1.0 / ((1 << img->depth) - 1);
  if (img->depth == 8 && !ps->premultiply) { /* the common case, without the branches */
    size_t rs = (size_t)w * c;
    gather8((const uint8_t *)img->data + l0 * rs + ps->ch, rs, c, w, sl, in);
    return sl;
  }
  for (int s = 0; s < sl; s++) {
    size_t row = (size_t)(l0 + s) * w * c;
    for (int x = 0; x < w; x++) {
      size_t i = row + (size_t)x * c;
      double v = cpu_sample(img, i + ps->ch);
      if (ps->premultiply) v *= cpu_sample(img, i + c - 1) * inv_max;
      in[(size_t)x * STRIP + s] = v;
    }
  }
  return sl;
}

/* Doubles in the plane between the passes. */
static size_t between_size(const struct cpu_image *img) {
  return (size_t)((img->width + STRIP - 1) / STRIP) * (img->height + 2 * PAD) * STRIP;
}

/* The x pass's output o (n rows of STRIP: sample k of image rows l0..l0 + sl) into the plane t
 * between the passes: value s of row k to row l0 + s, column k % STRIP of t's strip k / STRIP
 * (hs rows each, PAD before). A block of STRIP x STRIP values at a time, a transpose within L1. */
CPU_HOT static void scatter(double *t, size_t hs, int l0, const double *o, int n, int sl) {
  for (int kb = 0; kb < n; kb += STRIP) {
    int nk = n - kb < STRIP ? n - kb : STRIP;
    double *d = t + ((size_t)(kb / STRIP) * hs + PAD + l0) * STRIP;
    const double *v = o + (size_t)kb * STRIP;
    if (nk == STRIP && sl == STRIP) {
      for (int s = 0; s < STRIP; s++)
        for (int k = 0; k < STRIP; k++) d[s * STRIP + k] = v[k * STRIP + s];
      continue;
    }
    for (int s = 0; s < sl; s++)
      for (int k = 0; k < nk; k++) d[(size_t)s * STRIP + k] = v[(size_t)k * STRIP + s];
  }
}

static void pass_chunk(void *arg, int begin, int end) {
  struct pass *ps = arg;
  int w = ps->img->width, h = ps->img->height, n = ps->along_y ? h : w;
  size_t rows = (size_t)n + 2 * PAD, hs = (size_t)h + 2 * PAD; /* rows of a strip of t */
  double *buf = calloc((3 * rows + pyramid_rows(ps->f, n)) * STRIP, sizeof(double));
  if (!buf) {
    __atomic_store_n(&ps->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  double *in = buf + PAD * STRIP, *out = in + rows * STRIP, *tmp = out + rows * STRIP;
  for (int strip = begin; strip < end && cpu_cancelled() == CPU_RUNNING; strip++) {
    int l0 = strip * STRIP, sl = w - l0 < STRIP ? w - l0 : STRIP;
    double *a = in, *o = out; /* the strip's input and output */
    if (ps->along_y)
      a = ps->t + ((size_t)strip * hs + PAD) * STRIP;
    else
      sl = gather(ps, strip, a);
    switch (ps->f->kind) {
    case FILTER_YVV: /* in place */
      yvv_strip(&ps->f->yvv, o = a, n);
      break;
    case FILTER_YVV2WAY:
      yvv2way_strip(ps->f, a, o, n);
      break;
    case FILTER_DERICHE:
      deriche_strip(&ps->f->d, a, o, tmp, n);
      break;
    case FILTER_FIR:
      fir_strip(ps->f, a, o, n);
      break;
    case FILTER_PYRAMID:
      pyramid_strip(ps->f, a, o, tmp + rows * STRIP, n);
      break;
    }
    if (!ps->along_y) {
      scatter(ps->t, hs, l0, o, n, sl);
      continue;
    }
    for (int k = 0; k < n; k++) { /* sample k of the strip's lines: sl adjacent values */
      const double *v = o + (size_t)k * STRIP;
      if (ps->out) memcpy(ps->out + (size_t)k * w + l0, v, sl * sizeof(double));
      if (ps->dst) store(ps->dst, (size_t)k * w + l0, ps->ch, v, sl, ps->alpha);
    }
  }
  free(buf);
}

/* Planes go in transparent huge pages where the kernel offers them (madvise): with 4 KB pages
 * the passes' scattered writes would fault a page in at a time, and miss the TLB. The mapping
 * starts and ends on 2 MB boundaries: a part of a huge page at either end would still be faulted
 * in 4 KB at a time, and a small image's plane (a region's box) would have none. */
#define HUGE_PAGE ((size_t)2 << 20)
static size_t pages_bytes(size_t bytes) {
  return (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

void *cpu_pages_new(size_t bytes) {
  bytes = pages_bytes(bytes);
  uint8_t *m =
      mmap(NULL, bytes + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  uint8_t *p = (uint8_t *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (p > m) munmap(m, (size_t)(p - m));
  munmap(p + bytes, (size_t)(m + HUGE_PAGE - p));
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void cpu_pages_free(void *p, size_t bytes) {
  if (p) munmap(p, pages_bytes(bytes));
}

/* Filters channel ch of img with f[0] along x and f[1] along y into out (h rows of w) and/or,
 * rounded, into channel ch of dst (colour divided by alpha when alpha is not NULL); t is scratch
 * of between_size(img) doubles. Returns ERR_OK, or ERR_OUT_OF_MEMORY when a chunk lacked its
 * scratch (a stop is the caller's to report). */
static enum err blur_channel(struct cpu_pool *pool, const struct filter f[2],
                             const struct cpu_image *img, int ch, int premultiply, double *out,
                             struct cpu_image *dst, const double *alpha, double *t) {
  struct pass ps = {&f[0], img, ch, premultiply, t, out, dst, alpha, 0, 0};
  cpu_parallel_for(pool, (img->height + STRIP - 1) / STRIP, pass_chunk, &ps);
  ps.f = &f[1], ps.along_y = 1;
  if (!ps.failed) cpu_parallel_for(pool, (img->width + STRIP - 1) / STRIP, pass_chunk, &ps);
  return ps.failed ? ERR_OUT_OF_MEMORY : ERR_OK;
}

/* The channels in the order they are filtered: alpha first, so colour can be divided by it. */
static int channel_at(const struct cpu_image *img, int k) {
  int alpha = img->channels == 2 || img->channels == 4;
  return alpha ? (k + img->channels - 1) % img->channels : k;
}

/* A double-precision method (f[0] along x, f[1] along y) over every channel of src into dst.
 * Returns ERR_OK, or ERR_OUT_OF_MEMORY. */
static enum err blur_doubles(struct cpu_pool *pool, const struct filter f[2],
                             const struct cpu_image *src, struct cpu_image *dst) {
  size_t px = (size_t)src->width * src->height;
  int alpha = src->channels == 2 || src->channels == 4;
  size_t n = between_size(src) + alpha * px;
  double *t = cpu_pages_new(n * sizeof(double));
  if (!t) return ERR_OUT_OF_MEMORY;
  double *fa = alpha ? t + between_size(src) : NULL;
  enum err rc = ERR_OK;
  for (int k = 0; rc == ERR_OK && k < src->channels; k++) {
    int ch = channel_at(src, k), is_alpha = alpha && ch == src->channels - 1;
    rc = blur_channel(pool, f, src, ch, alpha && !is_alpha, is_alpha ? fa : NULL, dst,
                      alpha && !is_alpha ? fa : NULL, t);
  }
  cpu_pages_free(t, n * sizeof(double));
  return rc;
}

struct sse { /* error of one output channel against a reference plane */
  const struct cpu_image *out;
  int ch;
  const double *ref;   /* reference channel, premultiplied when alpha is set */
  const double *alpha; /* reference alpha when the image has alpha, else NULL */
  double *rows;        /* per row: the sum of squared errors, then the largest error */
};

#define SSE_ROWS 4 /* rows summed side by side: each row's sum is a chain of dependent adds */

/* With alpha, colour is compared premultiplied: the colour of a transparent pixel is invisible,
 * so only colour times alpha counts. */
static void sse_chunk(void *arg, int begin, int end) {
  const struct sse *e = arg;
  const struct cpu_image *img = e->out;
  int c = img->channels;
  double inv_max = 1.0 / ((1 << img->depth) - 1);
  long left = 0;
  for (int y0 = begin; y0 < end; y0 += SSE_ROWS) {
    if (cpu_tick(&left, 8L * SSE_ROWS * img->width)) return;
    int nr = end - y0 < SSE_ROWS ? end - y0 : SSE_ROWS;
    double acc[SSE_ROWS] = {0}, max[SSE_ROWS] = {0};
    for (int x = 0; x < img->width; x++)
      for (int q = 0; q < nr; q++) { /* row y0 + q, in the order of x as alone */
        size_t j = (size_t)(y0 + q) * img->width + x, i = j * c;
        double v = cpu_sample(img, i + e->ch), r = e->ref[j];
        if (e->alpha) v *= cpu_sample(img, i + c - 1) * inv_max;
        double d = fabs(v - r) < REF_NOISE ? 0 : fabs(v - r);
        acc[q] += d * d;
        max[q] = d > max[q] ? d : max[q];
      }
    for (int q = 0; q < nr; q++) {
      e->rows[2 * (y0 + q)] = acc[q];
      e->rows[2 * (y0 + q) + 1] = max[q];
    }
  }
}

/* cpu_measure, and with write (out itself) the reference rounded into it first, channel by
 * channel: separable computed exactly, measured in the same passes (cpu_separable_exact).
 * Returns what cpu_measure returns. */
static enum err measure(struct cpu_pool *pool, double sigma_x, double sigma_y,
                        const struct cpu_image *src, const struct cpu_image *out,
                        struct cpu_image *write, struct cpu_accuracy *acc) {
  struct filter ref[2];
  struct cpu_blur rb = {CPU_SEPARABLE, sigma_x, sigma_y, CPU_TRUNCATE, 0};
  size_t px = (size_t)src->width * src->height;
  int alpha = src->channels == 2 || src->channels == 4;
  enum err rc = filters_init(ref, &rb);
  size_t n = (1 + alpha) * px + between_size(src);
  double *p = rc == ERR_OK ? cpu_pages_new(n * sizeof(double)) : NULL;
  double *rows = malloc(2 * (size_t)src->height * sizeof(double)), sse = 0, max = 0;
  rc = p && rows ? rc : ERR_OUT_OF_MEMORY;
  double *tmp = p ? p + px : NULL, *ra = p && alpha ? tmp + between_size(src) : NULL;
  for (int k = 0; rc == ERR_OK && k < src->channels; k++) {
    int ch = channel_at(src, k), is_alpha = alpha && ch == src->channels - 1;
    rc = blur_channel(pool, ref, src, ch, alpha && !is_alpha, is_alpha ? ra : p, write,
                      write && alpha && !is_alpha ? ra : NULL, tmp);
    struct sse e = {out, ch, is_alpha ? ra : p, alpha && !is_alpha ? ra : NULL, rows};
    if (rc == ERR_OK) cpu_parallel_for(pool, src->height, sse_chunk, &e);
    for (int y = 0; rc == ERR_OK && y < src->height; y++) {
      sse += rows[2 * y];
      max = rows[2 * y + 1] > max ? rows[2 * y + 1] : max;
    }
  }
  free(rows);
  cpu_pages_free(p, n * sizeof(double));
  filters_free(ref);
  rc = cpu_result(rc);
  double peak = (1 << src->depth) - 1, mse = sse / ((double)px * src->channels);
  if (rc == ERR_OK)
    *acc = (struct cpu_accuracy){mse > 0 ? 10 * log10(peak * peak / mse) : INFINITY, max};
  return rc;
}

enum err cpu_measure(struct cpu_pool *pool, double sigma_x, double sigma_y,
                     const struct cpu_image *src, const struct cpu_image *out,
                     struct cpu_accuracy *acc) {
  return measure(pool, sigma_x, sigma_y, src, out, NULL, acc);
}

int cpu_separable_exact(const struct cpu_blur *b) {
  return b->method == CPU_SEPARABLE && b->truncate == CPU_TRUNCATE;
}

/* Is f one sep.c's single-precision tiles can run (the sampled Gaussian, short enough)? An
 * image goes to them when the filters of both axes are. */
static int sep_fits(const struct filter *f) {
  return f->kind == FILTER_FIR && f->radius <= CPU_SEP_RADIUS_MAX;
}

/* Faults in dst's pages a few calls at a time, on the pool's threads, before the filters write
 * them: a fresh buffer's first writes otherwise take a page fault each 4 KB (where it is not in
 * huge pages), and on a virtual machine each fault is dear; the kernel zeroes each page it maps,
 * which would otherwise fall to one thread. Chunks of 2 MB, on 2 MB boundaries (the huge
 * pages'). A hint: where the kernel lacks it, nothing changes. */
#define PREFAULT_CHUNK ((uintptr_t)2 << 20)
struct span {
  uintptr_t base, lo, hi; /* chunk i starts at base + i PREFAULT_CHUNK; [lo, hi) is faulted in */
};
static void prefault_chunk(void *arg, int begin, int end) {
#ifdef MADV_POPULATE_WRITE
  const struct span *s = arg;
  uintptr_t a = s->base + (uintptr_t)begin * PREFAULT_CHUNK,
            b = s->base + (uintptr_t)end * PREFAULT_CHUNK;
  a = a < s->lo ? s->lo : a, b = b > s->hi ? s->hi : b;
  if (b > a) madvise((void *)a, b - a, MADV_POPULATE_WRITE);
#else
  (void)arg, (void)begin, (void)end;
#endif
}

static void prefault(struct cpu_pool *pool, struct cpu_image *dst) {
  uintptr_t lo = ((uintptr_t)dst->data + 4095) & ~(uintptr_t)4095;
  struct span s = {lo & ~(PREFAULT_CHUNK - 1), lo,
                   ((uintptr_t)dst->data + cpu_image_bytes(dst)) & ~(uintptr_t)4095};
  if (s.hi <= s.lo) return;
  cpu_parallel_for(pool, (int)((s.hi - s.base + PREFAULT_CHUNK - 1) / PREFAULT_CHUNK),
                   prefault_chunk, &s);
}

enum err cpu_blur_image(struct cpu_pool *pool, const struct cpu_blur *b,
                        const struct cpu_image *src, struct cpu_image *dst,
                        struct cpu_accuracy *acc, struct cpu_timing *t) {
  struct filter f[2];
  double t0 = now_ms();
  enum err rc;
  prefault(pool, dst);
  if (acc && cpu_separable_exact(b)) { /* the reference is the filter: no second pass */
    rc = measure(pool, b->sigma_x, b->sigma_y, src, dst, dst, acc);
    if (t) *t = (struct cpu_timing){now_ms() - t0, 0};
    return rc;
  }
  if (cpu_method_is_fir(b->method)) {
    rc = cpu_fir_image(pool, b, src, dst);
  } else {
    rc = filters_init(f, b);
    if (rc == ERR_OK && sep_fits(&f[0]) && sep_fits(&f[1]))
      rc = cpu_sep_image(pool, f[0].w, f[0].radius, f[1].w, f[1].radius, src, dst);
    else if (rc == ERR_OK)
      rc = blur_doubles(pool, f, src, dst);
    filters_free(f);
  }
  rc = cpu_result(rc);
  double t1 = now_ms();
  if (rc == ERR_OK && acc) rc = cpu_measure(pool, b->sigma_x, b->sigma_y, src, dst, acc);
  if (t) *t = (struct cpu_timing){t1 - t0, acc ? now_ms() - t1 : 0};
  return rc;
}

/* The separable sampled Gaussian over an 8- or 16-bit image in single precision, tile by tile
 * (cpu_sep_image), with a kernel of its own on each axis: both passes stay in cache and no plane
 * of the whole image is allocated, where image.c's planes of doubles spend most of their time at
 * small sigma moving data. The results equal theirs up to single-precision rounding. */
#include "cpu_int.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#ifdef CPU_AVX512
#include <immintrin.h>
#endif

#define RING_BYTES (192 * 1024) /* a tile's ring of x-filtered rows: kept in L2 */
#define VEC        32           /* outputs computed side by side, in registers (fir) */
#define VEC16      64           /* and in fir16: four AVX-512 registers */
#define SLACK      VEC16        /* samples past the end of a row that a fir may read and write */

/* A tile is a band of output rows by a block of interleaved samples. Each of its input rows is
 * converted to float and filtered along x into a ring of 2 ry + 2 rows, and output rows, two at a
 * time, are the weighted sums of the ring's rows at that column, rounded into the image. The ring
 * is sized to stay in L2, so neither pass goes through memory between them. */
struct sep {
  const struct cpu_image *src;
  struct cpu_image *dst;
  const float *wx, *wy; /* wx[0..rx] along x, wy[0..ry] along y */
  int rx, ry;
  int cols;  /* samples per tile row, a multiple of channels */
  int band;  /* output rows per tile */
  int ncols; /* tiles across a row */
  int failed;
};

/* Row y of the image, samples [x0 - rx c, x1 + rx c) with the edge pixel replicated, as floats
 * (colour premultiplied by alpha / max when the image has alpha) into p; then a prefetch of row
 * y + 1's samples [x0, x1), which the tile reads next (a tile's rows are short runs far apart,
 * which the hardware's prefetcher is slow to follow). */
CPU_HOT static void load_row(const struct sep *s, int y, int x0, int x1, float *p) {
  const struct cpu_image *img = s->src;
  int c = img->channels, w = img->width, alpha = c == 2 || c == 4;
  size_t row = (size_t)y * w * c;
  int p0 = x0 / c - s->rx, p1 = x1 / c + s->rx; /* pixels [p0, p1) */
  int lo = p0 < 0 ? 0 : p0, hi = p1 > w ? w : p1;
  float *q = p;
  for (int px = p0; px < lo; px++, q += c)
    for (int k = 0; k < c; k++) q[k] = (float)cpu_sample(img, row + k);
  if (img->depth == 16)
    for (const uint16_t *i = (const uint16_t *)img->data + row + lo * c,
                        *e = (const uint16_t *)img->data + row + hi * c;
         i < e; i++)
      *q++ = *i;
  else
    for (const uint8_t *i = (const uint8_t *)img->data + row + lo * c,
                       *e = (const uint8_t *)img->data + row + hi * c;
         i < e; i++)
      *q++ = *i;
  for (int px = hi; px < p1; px++, q += c)
    for (int k = 0; k < c; k++) q[k] = (float)cpu_sample(img, row + (size_t)(w - 1) * c + k);
  if (y + 1 < img->height) { /* the next row's samples on their way into the cache */
    size_t bytes = img->depth / 8;
    const char *next = (const char *)img->data + (row + (size_t)w * c + (size_t)x0) * bytes;
    for (size_t o = 0; o < (size_t)(x1 - x0) * bytes; o += 64) __builtin_prefetch(next + o);
  }
  float inv_max = 1.0f / (float)((1 << img->depth) - 1);
  if (alpha)
    for (float *a = p; a < q; a += c)
      for (int k = 0; k < c - 1; k++) a[k] *= a[c - 1] * inv_max;
}

/* Eight floats, and eight floats at any address (one unaligned vector move; two without AVX). */
typedef float vf __attribute__((vector_size(32)));
typedef float vfu __attribute__((vector_size(32), aligned(4), may_alias));
typedef int vi __attribute__((vector_size(32)));
typedef uint8_t vb __attribute__((vector_size(8)));
typedef uint8_t vb32 __attribute__((vector_size(32)));
typedef uint16_t vh __attribute__((vector_size(16)));
typedef uint16_t vh16 __attribute__((vector_size(32)));
#define LD(p) (*(const vfu *)(p))

/* out[i] = w0 rows[0][i] + sum_k wk (rows[-k][i] + rows[k][i]) for i in [0, n), VEC at a time
 * (rows and out have SLACK samples of slack past n). Along x, rows[k] is in + k step. */
CPU_HOT static void fir(const float *w, int r, const float *const *rows, float *out, int n) {
  for (int i = 0; i < n; i += VEC) {
    vf a[VEC / 8];
    for (int v = 0; v < VEC / 8; v++) a[v] = w[0] * LD(rows[0] + i + 8 * v);
    for (int k = 1; k <= r; k++) {
      const float *lo = rows[-k] + i, *hi = rows[k] + i;
      for (int v = 0; v < VEC / 8; v++) a[v] += w[k] * (LD(lo + 8 * v) + LD(hi + 8 * v));
    }
    for (int v = 0; v < VEC / 8; v++) *(vfu *)(out + i + 8 * v) = a[v];
  }
}

#ifdef CPU_AVX512
/* fir() with sixteen floats a vector, one AVX-512 register, and VEC16 outputs a step (four
 * registers of sums in flight, each a chain of dependent adds): the same operations in the same
 * order. fir() keeps eight floats a vector, since GCC lowers sixteen-float vectors for AVX2
 * through the stack. */
typedef float vw __attribute__((vector_size(64)));
typedef float vwu __attribute__((vector_size(64), aligned(4), may_alias));
#define LDW(p) (*(const vwu *)(p))
CPU_AVX512 static void fir16(const float *w, int r, const float *const *rows, float *out, int n) {
  for (int i = 0; i < n; i += VEC16) {
    vw a[VEC16 / 16];
    for (int v = 0; v < VEC16 / 16; v++) a[v] = w[0] * LDW(rows[0] + i + 16 * v);
    for (int k = 1; k <= r; k++) {
      const float *lo = rows[-k] + i, *hi = rows[k] + i;
      for (int v = 0; v < VEC16 / 16; v++) a[v] += w[k] * (LDW(lo + 16 * v) + LDW(hi + 16 * v));
    }
    for (int v = 0; v < VEC16 / 16; v++) *(vwu *)(out + i + 16 * v) = a[v];
  }
}

/* The samples of v selected by m rounded into 8- or 16-bit samples at out, as store_row() rounds
 * them: v + 0.5 truncated, then clamped to [0, max] (AVX-512's saturating narrowing stores). */
CPU_AVX512 static inline void store16(vw v, int depth, __mmask16 m, void *out) {
  __m512i q = _mm512_max_epi32(_mm512_cvttps_epi32((__m512)(v + 0.5f)), _mm512_setzero_si512());
  if (depth == 16)
    _mm512_mask_cvtusepi32_storeu_epi16(out, m, q);
  else
    _mm512_mask_cvtusepi32_storeu_epi8(out, m, q);
}

/* Output rows y and, when out1 is not NULL, y + 1 of a tile along y, from the ring's rows[-r]
 * .. rows[r + 1] (rows[0] is row y's centre), rounded straight into the image at out0 and out1
 * (8 or 16 bits, no alpha): each sum is fir16()'s, the same operations in the same order, and
 * each rounding store_row()'s. A ring row is loaded once for both outputs: row y's k-th pair is
 * (rows[-k], rows[k]) and row y + 1's is (rows[1 - k], rows[1 + k]), so step k loads rows[-k]
 * and rows[k + 1] and keeps the other two from step k - 1. Half of the y pass's loads, which come
 * from L2, and no row of sums written and read back. */
CPU_AVX512 static void fir16_pair(const float *w, int r, const float *const *rows, int n, int depth,
                                  void *out0, void *out1) {
  for (int i = 0; i < n; i += VEC16) {
    vw a[VEC16 / 16], b[VEC16 / 16], lo[VEC16 / 16], hi[VEC16 / 16];
    for (int v = 0; v < VEC16 / 16; v++) {
      lo[v] = LDW(rows[0] + i + 16 * v), hi[v] = LDW(rows[1] + i + 16 * v);
      a[v] = w[0] * lo[v], b[v] = w[0] * hi[v];
    }
    for (int k = 1; k <= r; k++) {
      const float *l = rows[-k] + i, *h = rows[k + 1] + i;
      for (int v = 0; v < VEC16 / 16; v++) {
        vw nl = LDW(l + 16 * v), nh = LDW(h + 16 * v);
        a[v] += w[k] * (nl + hi[v]);
        b[v] += w[k] * (lo[v] + nh);
        lo[v] = nl, hi[v] = nh;
      }
    }
    for (int v = 0; v < VEC16 / 16; v++) {
      int left = n - i - 16 * v;
      __mmask16 m = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
      size_t at = (size_t)(i + 16 * v) * (size_t)(depth / 8);
      store16(a[v], depth, m, (char *)out0 + at);
      if (out1) store16(b[v], depth, m, (char *)out1 + at);
    }
  }
}
#endif

/* fir(), or fir16() where the CPU has AVX-512. */
static void fir_any(const float *w, int r, const float *const *rows, float *out, int n) {
#ifdef CPU_AVX512
  if (__builtin_cpu_supports("avx512f")) {
    fir16(w, r, rows, out, n);
    return;
  }
#endif
  fir(w, r, rows, out, n);
}

/* The filtered samples v of n / c pixels rounded into samples [i0, i0 + n) of img; with alpha,
 * colour is divided by the pixel's filtered alpha, as image.c's store() does. */
CPU_HOT static void store_row(const float *v, int n, struct cpu_image *img, size_t i0) {
  int i = 0, c = img->channels, max = (1 << img->depth) - 1;
  if (c != 2 && c != 4)
    for (; i + 8 <= n; i += 8) { /* v + 0.5 truncated, clamped to [0, max] in integers */
      vi q = __builtin_convertvector(LD(v + i) + 0.5f, vi);
      q &= ~(q < 0);
      q = (q & ~(q > max)) | (max & (q > max));
      if (img->depth == 16) {
        vh h = __builtin_shufflevector((vh16)q, (vh16)q, 0, 2, 4, 6, 8, 10, 12, 14);
        memcpy((uint16_t *)img->data + i0 + i, &h, sizeof(h));
      } else {
        vb b = __builtin_shufflevector((vb32)q, (vb32)q, 0, 4, 8, 12, 16, 20, 24, 28);
        memcpy((uint8_t *)img->data + i0 + i, &b, sizeof(b));
      }
    }
  for (; i < n; i++) {
    int a = c == 2 || c == 4 ? i - i % c + c - 1 : i; /* this pixel's alpha */
    float x = a == i ? v[i] : v[a] >= 0.5f ? v[i] * (float)max / v[a] : 0;
    cpu_set_sample(img, i0 + i, x <= 0 ? 0 : x >= max ? (unsigned)max : (unsigned)(x + 0.5f));
  }
}

static int clampi(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* n zeroed floats on a 64-byte boundary, so that the y pass's loads of the ring's rows do not
 * straddle cache lines (an AVX-512 load that does takes two). */
static float *aligned_floats(size_t n) {
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  float *p = aligned_alloc(64, bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

/* Output rows y and, when two, y + 1 of a tile along y from the ring's rows[-ry] .. rows[ry + 1]
 * (rows[0] is row y's centre) into the image from sample i0 on; acc is a row of scratch. */
static void sep_rows(const struct sep *s, const float *const *rows, int two, size_t i0, int cols,
                     float *acc) {
  struct cpu_image *dst = s->dst;
  size_t n = (size_t)dst->width * dst->channels;
#ifdef CPU_AVX512
  if (__builtin_cpu_supports("avx512f") && dst->channels != 2 && dst->channels != 4) {
    size_t bytes = (size_t)dst->depth / 8;
    char *out = (char *)dst->data + i0 * bytes;
    fir16_pair(s->wy, s->ry, rows, cols, dst->depth, out, two ? out + n * bytes : NULL);
    return;
  }
#endif
  for (int t = 0; t <= two; t++) {
    fir_any(s->wy, s->ry, rows + t, acc, cols);
    store_row(acc, cols, dst, i0 + t * n);
  }
}

static void sep_chunk(void *arg, int begin, int end) {
  struct sep *s = arg;
  const struct cpu_image *img = s->src;
  int c = img->channels, rx = s->rx, ry = s->ry, m = 2 * ry + 2, h = img->height;
  int n = img->width * c;
  size_t stride = ((size_t)s->cols + SLACK + 15) / 16 * 16; /* rows on 64-byte boundaries */
  float *ring = aligned_floats(((size_t)m + 1) * stride);
  float *pad = aligned_floats((size_t)s->cols + 2 * (size_t)rx * c + SLACK);
  const float **rows = malloc(((size_t)m + 2 * (size_t)rx + 1) * sizeof(*rows));
  if (!ring || !pad || !rows) {
    __atomic_store_n(&s->failed, 1, __ATOMIC_RELAXED);
    goto out;
  }
  float *acc = ring + (size_t)m * stride;
  const float **xrows = rows + m + rx; /* along x: xrows[k] = the loaded row + k c */
  long left = 0;
  for (int t = begin; t < end; t++) {
    int x0 = t % s->ncols * s->cols, x1 = x0 + s->cols < n ? x0 + s->cols : n;
    int y0 = t / s->ncols * s->band, y1 = y0 + s->band < h ? y0 + s->band : h;
    /* ring slot j % m holds row j (clamped to the image) filtered along x; output rows go in
     * pairs (y0, y0 + 1), ..., each once its last input row is in, the last one alone when the
     * band's height is odd */
    for (int j = y0 - ry; j < y1 + ry; j++) {
      if (cpu_tick(&left, (long)(x1 - x0) * (2 * rx + 2 * ry + 2))) goto out;
      load_row(s, clampi(j, 0, h - 1), x0, x1, pad);
      for (int k = -rx; k <= rx; k++) xrows[k] = pad + (ptrdiff_t)(rx + k) * c;
      fir_any(s->wx, rx, xrows, ring + (size_t)((j % m + m) % m) * stride, x1 - x0);
      int y = j - ry; /* the output row whose last input row this was */
      if (y < y0 || ((y - y0) % 2 == 0 && y + 1 < y1)) continue;
      int first = y - (y - y0) % 2;
      for (int k = -ry; k <= ry + 1; k++)
        rows[k + ry] = ring + (size_t)(((first + k) % m + m) % m) * stride;
      sep_rows(s, rows + ry, y > first, (size_t)first * n + x0, x1 - x0, acc);
    }
  }
out:
  free(ring);
  free(pad);
  free(rows);
}

enum err cpu_sep_image(struct cpu_pool *pool, const double *wx, int rx, const double *wy, int ry,
                       const struct cpu_image *src, struct cpu_image *dst) {
  float *wf = malloc((size_t)(rx + ry + 2) * sizeof(float));
  if (!wf) return ERR_OUT_OF_MEMORY;
  for (int k = 0; k <= rx; k++) wf[k] = (float)wx[k];
  for (int k = 0; k <= ry; k++) wf[rx + 1 + k] = (float)wy[k];
  int c = src->channels, n = src->width * c;
  int cols = RING_BYTES / (int)sizeof(float) / (2 * ry + 1);
  cols = cols < 4 * VEC ? 4 * VEC : cols;
  cols = cols >= n ? n : cols / (c * VEC) * (c * VEC);
  int band = 8 * ry > 64 ? 8 * ry : 64; /* a band filters 2 ry rows beyond it: a quarter more */
  struct sep s = {src, dst, wf, wf + rx + 1, rx, ry, cols, band, (n + cols - 1) / cols, 0};
  cpu_parallel_for(pool, s.ncols * ((src->height + s.band - 1) / s.band), sep_chunk, &s);
  free(wf);
  return cpu_result(s.failed ? ERR_OUT_OF_MEMORY : ERR_OK);
}

/* The fir family on the CPU (cpu_fir_image), in exact integer arithmetic, so that the GPU's
 * direct 2-D kernels (GF_Default, GF_SM and GF_SM_MWPT: one thread per pixel, a shared-memory
 * tile, several outputs per thread) give the same bits as this twin, which evaluates the same
 * double sum as a row pass then a column pass, at O(rx + ry) per pixel. */
#include "cpu_int.h"

#include <stdlib.h>
#include <string.h>

/* The kernel of each axis is its sampled Gaussian rounded to k-bit integers that sum to 2^k
 * exactly (cpu_fir_weights): ax[] along x with sigma_x, ay[] along y with sigma_y, the same k.
 * Every sum, sum_i ay[i] (sum_j ax[j] x[y+i][x+j]), is then an exact 64-bit integer, so the order
 * of the additions does not matter. Without alpha the output is round(sum / 2^2k). With alpha,
 * colour is premultiplied exactly (c * a, an integer), and the output colour is
 * round(sum(c a) / sum(a)), an exact rational. */
struct fir_axis { /* the integer kernel of one axis */
  int r;          /* radius */
  uint32_t *a;    /* a[0..r], summing to 2^k over -r..r */
  uint64_t *tail; /* tail[j] = a[j] + ... + a[r], j in [0, r+1] */
};

struct fir { /* one fir request, ready to run */
  const struct cpu_image *src;
  int k;               /* each axis's weights sum to 2^k */
  struct fir_axis x;   /* along x (the row pass) */
  struct fir_axis y;   /* along y (the column pass) */
  int ch, premultiply; /* the channel being filtered; multiply it by alpha */
  uint64_t *h;         /* row pass result, height rows of width */
  uint64_t *v;         /* column pass result */
};

static uint64_t weight_sum(const struct fir_axis *a, int lo) { /* taps at distance >= lo */
  return lo <= a->r ? a->tail[lo] : 0;
}

/* The kernel of an axis whose sigma is sigma. Returns ERR_OK, or ERR_OUT_OF_MEMORY; free with
 * axis_free() either way. */
static enum err axis_init(struct fir_axis *a, double sigma, double truncate, int k) {
  a->r = cpu_gauss_radius(sigma, truncate);
  a->a = malloc((size_t)(a->r + 1) * sizeof(*a->a));
  a->tail = malloc((size_t)(a->r + 2) * sizeof(*a->tail));
  if (!a->a || !a->tail) return ERR_OUT_OF_MEMORY;
  cpu_fir_weights(sigma, a->r, k, a->a);
  a->tail[a->r + 1] = 0;
  for (int j = a->r; j >= 0; j--) a->tail[j] = a->tail[j + 1] + a->a[j];
  return ERR_OK;
}

static void axis_free(struct fir_axis *a) {
  free(a->a);
  free(a->tail);
  a->a = NULL, a->tail = NULL;
}

/* Row pass: h[y][x] = sum_j ax[|j|] X[y][clamp(x+j)], folding the taps past each edge. */
static void rows_chunk(void *arg, int begin, int end) {
  const struct fir *f = arg;
  const struct fir_axis *ax = &f->x;
  const struct cpu_image *img = f->src;
  int w = img->width, c = img->channels, r = ax->r;
  uint32_t *x = malloc((size_t)w * sizeof(*x));
  long left = 0;
  if (!x) return; /* cpu_fir_image checks the scratch itself: see below */
  for (int y = begin; y < end; y++) {
    if (cpu_tick(&left, (long)w * (2 * r + 3))) break;
    size_t row = (size_t)y * w * c;
    for (int i = 0; i < w; i++) {
      uint32_t v = cpu_sample(img, row + (size_t)i * c + f->ch);
      x[i] = f->premultiply ? v * cpu_sample(img, row + (size_t)i * c + c - 1) : v;
    }
    uint64_t *h = f->h + (size_t)y * w;
    for (int i = 0; i < w; i++) {
      int lo = i < r ? -i : -r, hi = w - 1 - i < r ? w - 1 - i : r;
      uint64_t acc = weight_sum(ax, i + 1) * x[0] + weight_sum(ax, w - i) * x[w - 1];
      for (int j = lo; j <= hi; j++) acc += (uint64_t)ax->a[j < 0 ? -j : j] * x[i + j];
      h[i] = acc;
    }
  }
  free(x);
}

/* Column pass: v[y][x] = sum_i ay[|i|] h[clamp(y+i)][x]. */
static void cols_chunk(void *arg, int begin, int end) {
  const struct fir *f = arg;
  const struct fir_axis *ay = &f->y;
  int w = f->src->width, n = f->src->height, r = ay->r;
  long left = 0;
  for (int y = begin; y < end; y++) {
    uint64_t *v = f->v + (size_t)y * w, wl = weight_sum(ay, y + 1), wr = weight_sum(ay, n - y);
    const uint64_t *first = f->h, *last = f->h + (size_t)(n - 1) * w;
    for (int x = 0; x < w; x++) v[x] = wl * first[x] + wr * last[x];
    int lo = y < r ? -y : -r, hi = n - 1 - y < r ? n - 1 - y : r;
    for (int i = lo; i <= hi; i++) {
      if (cpu_tick(&left, w)) return;
      const uint64_t *row = f->h + (size_t)(y + i) * w;
      uint64_t ai = ay->a[i < 0 ? -i : i];
      for (int x = 0; x < w; x++) v[x] += ai * row[x];
    }
  }
}

struct fir_store {
  struct cpu_image *dst;
  int ch, k;
  const uint64_t *v;     /* the channel's sums */
  const uint64_t *alpha; /* alpha's sums when colour is premultiplied, else NULL */
};

static void store_chunk(void *arg, int begin, int end) {
  const struct fir_store *s = arg;
  struct cpu_image *img = s->dst;
  uint64_t half = (uint64_t)1 << (2 * s->k - 1);
  long left = 0;
  for (int y = begin; y < end; y++) {
    if (cpu_tick(&left, 4L * img->width)) return;
    for (int x = 0; x < img->width; x++) {
      size_t j = (size_t)y * img->width + x;
      uint64_t out;
      if (!s->alpha) {
        out = (s->v[j] + half) >> (2 * s->k);
      } else if ((s->alpha[j] + half) >> (2 * s->k) == 0) { /* transparent: colour 0 */
        out = 0;
      } else { /* round(v / alpha), half up; 2 * rem < 2^63 since alpha < 2^62 */
        uint64_t q = s->v[j] / s->alpha[j], rem = s->v[j] - q * s->alpha[j];
        out = q + (2 * rem >= s->alpha[j]);
      }
      cpu_set_sample(img, j * img->channels + s->ch, (unsigned)out);
    }
  }
}

enum err cpu_fir_image(struct cpu_pool *pool, const struct cpu_blur *b, const struct cpu_image *src,
                       struct cpu_image *dst) {
  size_t px = (size_t)src->width * src->height;
  int alpha = src->channels == 2 || src->channels == 4;
  struct fir f = {.src = src, .k = cpu_fir_shift(src->depth, alpha)};
  enum err ex = axis_init(&f.x, b->sigma_x, b->truncate, f.k);
  enum err ey = axis_init(&f.y, b->sigma_y, b->truncate, f.k);
  f.h = malloc((2 + alpha) * px * sizeof(uint64_t));
  enum err rc = ex == ERR_OK && ey == ERR_OK && f.h ? ERR_OK : ERR_OUT_OF_MEMORY;
  uint64_t *va = NULL;
  if (rc == ERR_OK) {
    f.v = f.h + px;
    va = alpha ? f.v + px : NULL;
  }
  for (int n = 0; rc == ERR_OK && n < src->channels; n++) {
    /* alpha first, so colour can be divided by its sums */
    f.ch = alpha ? (n + src->channels - 1) % src->channels : n;
    int is_alpha = alpha && f.ch == src->channels - 1;
    f.premultiply = alpha && !is_alpha;
    uint64_t *out = f.v;
    f.v = is_alpha ? va : f.v;
    /* a row that a chunk lacking scratch (or stopped by the token) left out keeps this */
    memset(f.h, 0xff, px * sizeof(uint64_t));
    cpu_parallel_for(pool, src->height, rows_chunk, &f);
    for (size_t i = 0; i < px && rc == ERR_OK; i += (size_t)src->width)
      if (f.h[i] == UINT64_MAX) rc = ERR_OUT_OF_MEMORY; /* or the token's stop: see below */
    if (rc == ERR_OK) cpu_parallel_for(pool, src->height, cols_chunk, &f);
    struct fir_store s = {dst, f.ch, f.k, f.v, f.premultiply ? va : NULL};
    if (rc == ERR_OK) cpu_parallel_for(pool, src->height, store_chunk, &s);
    f.v = out;
  }
  free(f.h);
  axis_free(&f.x);
  axis_free(&f.y);
  return cpu_result(rc);
}

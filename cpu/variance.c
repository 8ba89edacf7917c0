/* Local variance on one gray plane: the three direct O(r^2) float32 methods (naive, koenig,
 * welford), the exact method in integers, and cpu_variance's dispatch to them and to
 * var_merge.c's separable float32 methods (pairwise, threewise). */
#include "cpu_int.h"

#include <stdlib.h>
#include <string.h>

#define EXACT_STRIP 128 /* columns per unit of work of the exact method */

/* The window is the product of two 1-D windows of 2r + 1 taps (triangle 1 2 .. n .. 2 1 with
 * n = r + 1, or box), over the plane extended by replicating its edges. Weight of tap k
 * (|k| <= r) of one axis. */
static int axis_tap(enum cpu_window w, int r, int k) {
  return w == CPU_WINDOW_BOX ? 1 : r + 1 - (k < 0 ? -k : k);
}

/* Total weight of one axis: 2r + 1 for the box, n^2 = (r + 1)^2 for the triangle. */
static uint64_t axis_weight(enum cpu_window w, int r) {
  return w == CPU_WINDOW_BOX ? (uint64_t)(2 * r + 1) : (uint64_t)(r + 1) * (uint64_t)(r + 1);
}

static int clamp_index(int i, int n) {
  return i < 0 ? 0 : i >= n ? n - 1 : i;
}

/* ---- direct float32 methods: every tap of the 2-D window, rows top to bottom ---- */

struct direct_job {
  enum cpu_var_method method;
  int r, width, height, row_step;
  const float *plane; /* the samples as float32 */
  const float *wt;    /* wt[k + r]: the axis weights as float32 */
  float total;        /* W as float32 */
  double *mean, *var;
};

/* One pixel by the usual formula: the weighted mean, then sum w (x - mean)^2 / W. */
static void naive_pixel(const struct direct_job *j, int x, int y, float *mean, float *var) {
  int r = j->r;
  float s = 0, q = 0;
  for (int dy = -r; dy <= r; dy++) {
    const float *row = j->plane + (size_t)clamp_index(y + dy, j->height) * j->width;
    for (int dx = -r; dx <= r; dx++)
      s += (j->wt[dy + r] * j->wt[dx + r]) * row[clamp_index(x + dx, j->width)];
  }
  float m = s / j->total;
  for (int dy = -r; dy <= r; dy++) {
    const float *row = j->plane + (size_t)clamp_index(y + dy, j->height) * j->width;
    for (int dx = -r; dx <= r; dx++) {
      float d = row[clamp_index(x + dx, j->width)] - m;
      q += (j->wt[dy + r] * j->wt[dx + r]) * (d * d);
    }
  }
  *mean = m;
  *var = q / j->total;
}

/* One pixel by Koenig's E[x^2] - E[x]^2: one pass, two sums. */
static void koenig_pixel(const struct direct_job *j, int x, int y, float *mean, float *var) {
  int r = j->r;
  float s1 = 0, s2 = 0;
  for (int dy = -r; dy <= r; dy++) {
    const float *row = j->plane + (size_t)clamp_index(y + dy, j->height) * j->width;
    for (int dx = -r; dx <= r; dx++) {
      float w = j->wt[dy + r] * j->wt[dx + r], v = row[clamp_index(x + dx, j->width)];
      s1 += w * v;
      s2 += w * (v * v);
    }
  }
  float m = s1 / j->total;
  *mean = m;
  *var = s2 / j->total - m * m;
}

/* One pixel by Welford's update with weights (West 1979): after a tap of weight w, the running
 * weight, mean and sum of squared deviations M2 are updated without ever forming sum x^2. */
static void welford_pixel(const struct direct_job *j, int x, int y, float *mean, float *var) {
  int r = j->r;
  float sw = 0, m = 0, m2 = 0;
  for (int dy = -r; dy <= r; dy++) {
    const float *row = j->plane + (size_t)clamp_index(y + dy, j->height) * j->width;
    for (int dx = -r; dx <= r; dx++) {
      float w = j->wt[dy + r] * j->wt[dx + r], d = row[clamp_index(x + dx, j->width)] - m;
      sw += w;
      float step = d * w / sw;
      m += step;
      m2 += (sw - w) * d * step;
    }
  }
  *mean = m;
  *var = m2 / sw;
}

/* A pixel is (2r + 1)^2 taps (naive: twice), a lot of work at large radii, so the cancel token is
 * looked at every few pixels there, every few rows at small radii. */
static void direct_rows(void *arg, int begin, int end) {
  const struct direct_job *j = arg;
  long taps = (2L * j->r + 1) * (2L * j->r + 1), left = 0;
  for (int y = begin; y < end; y++) {
    if (y % j->row_step) continue;
    for (int x = 0; x < j->width; x++) {
      if (cpu_tick(&left, taps)) return;
      float m, v;
      if (j->method == CPU_VAR_NAIVE)
        naive_pixel(j, x, y, &m, &v);
      else if (j->method == CPU_VAR_KOENIG)
        koenig_pixel(j, x, y, &m, &v);
      else
        welford_pixel(j, x, y, &m, &v);
      size_t i = (size_t)y * j->width + x;
      j->var[i] = v;
      if (j->mean) j->mean[i] = m;
    }
  }
}

static enum err direct_variance(struct cpu_pool *pool, const struct cpu_var *v,
                                const struct cpu_image *src, int row_step, double *mean,
                                double *var) {
  size_t n = (size_t)src->width * src->height;
  float *plane = malloc(n * sizeof(float)), wt[2 * CPU_VAR_RADIUS_MAX + 1];
  if (!plane) return ERR_OUT_OF_MEMORY;
  for (size_t i = 0; i < n; i++) plane[i] = (float)cpu_sample(src, i);
  for (int k = -v->radius; k <= v->radius; k++)
    wt[k + v->radius] = (float)axis_tap(v->window, v->radius, k);
  uint64_t w1 = axis_weight(v->window, v->radius);
  struct direct_job j = {v->method, v->radius, src->width,       src->height, row_step,
                         plane,     wt,        (float)(w1 * w1), mean,        var};
  cpu_parallel_for(pool, src->height, direct_rows, &j);
  free(plane);
  return ERR_OK;
}

/* ---- exact: sliding integer sums ----
 * The triangle is a box of n convolved with itself: two sliding box sums per axis give
 * S1 = sum w x and S2 = sum w x^2 in 64-bit integers at O(1) per pixel, and the variance is
 * (W S2 - S1^2) / W^2 with the numerator in 128 bits (16-bit input and r up to 127 reach
 * 2^88) and one double division, so every backend that follows it gets the same bits. */

/* out[i] = in[i] + ... + in[i + len - 1] for i in [0, n): a running sum (adding before
 * subtracting, so the unsigned sum never wraps). */
static void slide(const uint64_t *in, int n, int len, uint64_t *out) {
  uint64_t s = 0;
  for (int k = 0; k < len; k++) s += in[k];
  out[0] = s;
  for (int i = 1; i < n; i++) {
    s += in[i + len - 1];
    s -= in[i - 1];
    out[i] = s;
  }
}

/* out[i] = sum_k t_k ext[i + r + k] for i in [0, n), where ext holds n + 2r samples: the box
 * directly, the triangle as a box of r + 1 over a box of r + 1 (tmp holds n + r values). */
static void window_sums(const uint64_t *ext, int n, int r, enum cpu_window w, uint64_t *tmp,
                        uint64_t *out) {
  if (w == CPU_WINDOW_BOX) {
    slide(ext, n, 2 * r + 1, out);
  } else {
    slide(ext, n + r, r + 1, tmp);
    slide(tmp, n, r + 1, out);
  }
}

struct exact_job {
  const struct cpu_image *src;
  int r;
  enum cpu_window window;
  uint64_t total; /* W */
  double *mean, *var;
  int failed; /* set when a strip could not get its scratch memory */
};

struct exact_scratch {     /* one strip's buffers */
  uint64_t *s1, *s2;       /* the x pass: cw * height row sums each */
  uint64_t *e1, *e2, *tmp; /* one extended line and the triangle's intermediate */
  uint64_t *o1, *o2;       /* one line of window sums */
};

static void scratch_free(struct exact_scratch *s) {
  free(s->s1), free(s->s2), free(s->e1), free(s->e2), free(s->tmp), free(s->o1), free(s->o2);
}

static enum err scratch_new(struct exact_scratch *s, int cw, int h, int r) {
  size_t line = (size_t)(cw > h ? cw : h) + 2 * (size_t)r, plane = (size_t)cw * h;
  s->s1 = malloc(plane * sizeof(uint64_t)), s->s2 = malloc(plane * sizeof(uint64_t));
  s->e1 = malloc(line * sizeof(uint64_t)), s->e2 = malloc(line * sizeof(uint64_t));
  s->tmp = malloc(line * sizeof(uint64_t));
  s->o1 = malloc(line * sizeof(uint64_t)), s->o2 = malloc(line * sizeof(uint64_t));
  if (s->s1 && s->s2 && s->e1 && s->e2 && s->tmp && s->o1 && s->o2) return ERR_OK;
  scratch_free(s);
  return ERR_OUT_OF_MEMORY;
}

/* var = (W S2 - S1^2) / W^2: the numerator exactly in 128 bits, rounded once to double, and
 * divided once by W^2 (exact in 64 bits, rounded to double). mean = S1 / W. */
static void exact_finish(uint64_t total, uint64_t s1, uint64_t s2, double *mean, double *var) {
  unsigned __int128 num = (unsigned __int128)total * s2 - (unsigned __int128)s1 * s1;
  *var = (double)num / (double)(total * total);
  if (mean) *mean = (double)s1 / (double)total;
}

/* The x pass over columns [c0, c0 + cw) of every row into s->s1, s->s2 (cw values a row). */
static void exact_rows(const struct exact_job *j, struct exact_scratch *s, int c0, int cw) {
  const struct cpu_image *src = j->src;
  long left = 0;
  for (int y = 0; y < src->height; y++) {
    if (cpu_tick(&left, 4L * (cw + 2 * j->r))) return;
    size_t row = (size_t)y * src->width;
    for (int k = 0; k < cw + 2 * j->r; k++) {
      uint64_t x = cpu_sample(src, row + clamp_index(c0 - j->r + k, src->width));
      s->e1[k] = x, s->e2[k] = x * x;
    }
    window_sums(s->e1, cw, j->r, j->window, s->tmp, s->s1 + (size_t)y * cw);
    window_sums(s->e2, cw, j->r, j->window, s->tmp, s->s2 + (size_t)y * cw);
  }
}

/* The y pass down each column of the strip, then the division. */
static void exact_cols(const struct exact_job *j, struct exact_scratch *s, int c0, int cw) {
  int h = j->src->height;
  long left = 0;
  for (int c = 0; c < cw; c++) {
    if (cpu_tick(&left, 6L * (h + 2 * j->r))) return;
    for (int k = 0; k < h + 2 * j->r; k++) {
      size_t at = (size_t)clamp_index(k - j->r, h) * cw + c;
      s->e1[k] = s->s1[at], s->e2[k] = s->s2[at];
    }
    window_sums(s->e1, h, j->r, j->window, s->tmp, s->o1);
    window_sums(s->e2, h, j->r, j->window, s->tmp, s->o2);
    for (int y = 0; y < h; y++) {
      size_t i = (size_t)y * j->src->width + c0 + c;
      exact_finish(j->total, s->o1[y], s->o2[y], j->mean ? j->mean + i : NULL, j->var + i);
    }
  }
}

static void exact_strips(void *arg, int begin, int end) {
  struct exact_job *j = arg;
  for (int strip = begin; strip < end; strip++) {
    int c0 = strip * EXACT_STRIP, cw = j->src->width - c0;
    if (cw > EXACT_STRIP) cw = EXACT_STRIP;
    struct exact_scratch s;
    if (scratch_new(&s, cw, j->src->height, j->r) != ERR_OK) {
      __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
      return;
    }
    exact_rows(j, &s, c0, cw);
    exact_cols(j, &s, c0, cw);
    scratch_free(&s);
  }
}

static enum err exact_variance(struct cpu_pool *pool, const struct cpu_var *v,
                               const struct cpu_image *src, double *mean, double *var) {
  uint64_t w1 = axis_weight(v->window, v->radius);
  struct exact_job j = {src, v->radius, v->window, w1 * w1, mean, var, 0};
  cpu_parallel_for(pool, (src->width + EXACT_STRIP - 1) / EXACT_STRIP, exact_strips, &j);
  return j.failed ? ERR_OUT_OF_MEMORY : ERR_OK;
}

enum err cpu_variance_sampled(struct cpu_pool *pool, const struct cpu_var *v,
                              const struct cpu_image *src, int row_step, double *mean,
                              double *var) {
  switch (v->method) {
  case CPU_VAR_NAIVE:
  case CPU_VAR_KOENIG:
  case CPU_VAR_WELFORD:
    return cpu_result(direct_variance(pool, v, src, row_step < 1 ? 1 : row_step, mean, var));
  case CPU_VAR_PAIRWISE:
  case CPU_VAR_THREEWISE:
    return cpu_var_merge(pool, v, src, mean, var);
  case CPU_VAR_EXACT:
  default:
    return cpu_result(exact_variance(pool, v, src, mean, var));
  }
}

enum err cpu_variance(struct cpu_pool *pool, const struct cpu_var *v, const struct cpu_image *src,
                      double *mean, double *var) {
  return cpu_variance_sampled(pool, v, src, 1, mean, var);
}

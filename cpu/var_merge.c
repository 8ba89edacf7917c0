/* The separable float32 local-variance methods (cpu_var_merge): pairwise (Chan, Golub & LeVeque)
 * and threewise (Gouin, Ancourt & Guettier's Threewise, their Algorithm 1), which merge weighted
 * sample sets along x, then along y. */
#include "cpu_int.h"

#include <stdlib.h>
#include <string.h>

#define MERGE_STRIP 128 /* columns per unit of work */

struct stat { /* a weighted sample set */
  float w;    /* total weight */
  float mean; /* weighted mean */
  float m2;   /* sum of w (x - mean)^2 */
};

/* Chan et al.'s merge of two sets: W = Wa + Wb, d = mb - ma, mean = ma + d Wb / W,
 * M2 = M2a + M2b + d^2 Wa Wb / W. */
static struct stat merge2(struct stat a, struct stat b) {
  struct stat o;
  o.w = a.w + b.w;
  float d = b.mean - a.mean, f = b.w / o.w;
  o.mean = a.mean + d * f;
  o.m2 = a.m2 + b.m2 + (d * d) * (a.w * f);
  return o;
}

/* Three sets around a centre b: M2 = sum M2 + sum over pairs wi wj (mi - mj)^2 / W (eq. 18
 * when the weights are w, 2w, w). */
static struct stat merge3(struct stat a, struct stat b, struct stat c) {
  struct stat o;
  o.w = a.w + b.w + c.w;
  float da = a.mean - b.mean, dc = c.mean - b.mean, dac = a.mean - c.mean;
  o.mean = b.mean + (a.w * da + c.w * dc) / o.w;
  float spread = a.w * b.w * (da * da) + a.w * c.w * (dac * dac) + b.w * c.w * (dc * dc);
  o.m2 = a.m2 + b.m2 + c.m2 + spread / o.w;
  return o;
}

/* pairwise builds a box of L samples by doubling (boxes of 1, 2, 4, .. merged pairwise, then
 * the boxes of L's binary digits merged left to right): O(log r) merges a pixel, any radius.
 * The triangle is a box of r + 1 over a box of r + 1.
 *
 * acc[i] = the merge of p[i .. i + len) for i in [0, n - len]; p is overwritten by the
 * doubling levels (level j holds boxes of 2^j). */
static void box_merge(struct stat *p, int n, int len, struct stat *acc) {
  int off = 0;
  for (int size = 1; size <= len; size *= 2) {
    if (len & size) {
      for (int i = 0; i + off + size <= n; i++) acc[i] = off ? merge2(acc[i], p[i + off]) : p[i];
      off += size;
    }
    if (2 * size <= len)
      for (int i = 0; i + 2 * size <= n; i++) p[i] = merge2(p[i], p[i + size]);
  }
}

/* Pairwise over one extended line e of n + 2r triples (overwritten); returns the n results,
 * which lie in a or b. */
static struct stat *pairwise_line(struct stat *e, int n, int r, enum cpu_window w, struct stat *a,
                                  struct stat *b) {
  if (w == CPU_WINDOW_BOX) {
    box_merge(e, n + 2 * r, 2 * r + 1, a);
    return a;
  }
  box_merge(e, n + 2 * r, r + 1, a);
  box_merge(a, n + r, r + 1, b);
  return b;
}

/* Threewise over one extended line e of n + 2r triples (kept); returns the n results, which
 * lie in a or b. It merges three taps at -d, 0, +d for d = 1, 2, .., (r + 1) / 2: with weights
 * 1 2 1 that builds the triangle (Threewise's eq. 17; the merge of its eq. 18), and for the box
 * window the centre tap is the lone pixel between two boxes of radius d - 1, which builds the box
 * of radius 2d - 1. Both need r = 2^k - 1. Algorithm 1 as printed adds the three M2 and the three
 * means without the centre's weight 2; we follow equation 18, the weighted merge, which is what
 * makes the result a variance. */
static struct stat *threewise_line(const struct stat *e, int n, int r, enum cpu_window w,
                                   struct stat *a, struct stat *b) {
  const struct stat *cur = e;
  struct stat *out = a;
  int m = n + 2 * r;
  for (int d = 1; d <= (r + 1) / 2; d *= 2) {
    for (int i = 0; i + 2 * d < m; i++) {
      struct stat mid = cur[i + d];
      if (w == CPU_WINDOW_BOX) {
        mid = e[i + 2 * d - 1]; /* the lone centre pixel between two boxes of radius d - 1 */
      } else {
        mid.w *= 2, mid.m2 *= 2; /* the sparse vector's centre weight */
      }
      out[i] = merge3(cur[i], mid, cur[i + 2 * d]);
    }
    m -= 2 * d;
    cur = out;
    out = out == a ? b : a;
  }
  return (struct stat *)cur;
}

struct merge_job {
  const struct cpu_var *v;
  const struct cpu_image *src;
  double *mean, *var;
  int failed; /* set when a strip could not get its scratch memory */
};

struct merge_scratch { /* one strip's buffers */
  struct stat *rows;   /* the x pass: cw * height triples */
  struct stat *e;      /* one extended line */
  struct stat *a, *b;  /* work lines */
};

static void merge_scratch_free(struct merge_scratch *s) {
  free(s->rows), free(s->e), free(s->a), free(s->b);
}

static enum err merge_scratch_new(struct merge_scratch *s, int cw, int h, int r) {
  size_t line = (size_t)(cw > h ? cw : h) + 2 * (size_t)r;
  s->rows = malloc((size_t)cw * h * sizeof(struct stat));
  s->e = malloc(line * sizeof(struct stat));
  s->a = malloc(line * sizeof(struct stat)), s->b = malloc(line * sizeof(struct stat));
  if (s->rows && s->e && s->a && s->b) return ERR_OK;
  merge_scratch_free(s);
  return ERR_OUT_OF_MEMORY;
}

static struct stat *merge_line(const struct cpu_var *v, struct merge_scratch *s, int n) {
  if (v->method == CPU_VAR_PAIRWISE)
    return pairwise_line(s->e, n, v->radius, v->window, s->a, s->b);
  return threewise_line(s->e, n, v->radius, v->window, s->a, s->b);
}

/* The x pass over columns [c0, c0 + cw) of every row, turning every pixel into the (weight,
 * mean, M2) triple of its row window, then the y pass down each column, merging those triples;
 * var = M2 / W. Lines are extended by r replicated samples (or triples) at each end first, so a
 * pixel near the edge sees exactly the replicate-border window of the direct methods. */
static void merge_strip(const struct merge_job *j, struct merge_scratch *s, int c0, int cw) {
  const struct cpu_image *src = j->src;
  int r = j->v->radius, h = src->height;
  long left = 0;
  for (int y = 0; y < h; y++) {
    if (cpu_tick(&left, 8L * (cw + 2 * r))) return;
    size_t row = (size_t)y * src->width;
    for (int k = 0; k < cw + 2 * r; k++) {
      int x = c0 - r + k;
      x = x < 0 ? 0 : x >= src->width ? src->width - 1 : x;
      s->e[k] = (struct stat){1, (float)cpu_sample(src, row + x), 0};
    }
    memcpy(s->rows + (size_t)y * cw, merge_line(j->v, s, cw), (size_t)cw * sizeof(struct stat));
  }
  for (int c = 0; c < cw; c++) {
    if (cpu_tick(&left, 8L * (h + 2 * r))) return;
    for (int k = 0; k < h + 2 * r; k++) {
      int y = k - r < 0 ? 0 : k - r >= h ? h - 1 : k - r;
      s->e[k] = s->rows[(size_t)y * cw + c];
    }
    const struct stat *col = merge_line(j->v, s, h);
    for (int y = 0; y < h; y++) {
      size_t i = (size_t)y * src->width + c0 + c;
      j->var[i] = col[y].m2 / col[y].w;
      if (j->mean) j->mean[i] = col[y].mean;
    }
  }
}

static void merge_strips(void *arg, int begin, int end) {
  struct merge_job *j = arg;
  for (int strip = begin; strip < end; strip++) {
    int c0 = strip * MERGE_STRIP, cw = j->src->width - c0;
    if (cw > MERGE_STRIP) cw = MERGE_STRIP;
    struct merge_scratch s;
    if (merge_scratch_new(&s, cw, j->src->height, j->v->radius) != ERR_OK) {
      __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
      return;
    }
    merge_strip(j, &s, c0, cw);
    merge_scratch_free(&s);
  }
}

enum err cpu_var_merge(struct cpu_pool *pool, const struct cpu_var *v, const struct cpu_image *src,
                       double *mean, double *var) {
  if (!cpu_var_radius_ok(v->method, v->radius)) return ERR_BAD_PARAMETER;
  struct merge_job j = {v, src, mean, var, 0};
  cpu_parallel_for(pool, (src->width + MERGE_STRIP - 1) / MERGE_STRIP, merge_strips, &j);
  return cpu_result(j.failed ? ERR_OUT_OF_MEMORY : ERR_OK);
}

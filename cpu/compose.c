/* Operations that combine an image with its blur, on the host whatever backend blurred it: the
 * unsharp mask of /sharpen and the blend of a blurred box into an image for /blur's regions. */
#include "cpu_int.h"

#include <math.h>
#include <stdlib.h>

static double clamp_round(double v, double max) {
  v = floor(v + 0.5);
  return v < 0 ? 0 : v > max ? max : v;
}

static void put(struct cpu_image *img, size_t i, double v) {
  if (img->depth == 8)
    ((uint8_t *)img->data)[i] = (uint8_t)v;
  else
    ((uint16_t *)img->data)[i] = (uint16_t)v;
}

/* BT.601 luma of the colour of pixel i (its first sample for gray), in levels. */
static double luma(const struct cpu_image *img, size_t i) {
  if (img->channels < 3) return cpu_sample(img, i);
  return 0.299 * cpu_sample(img, i) + 0.587 * cpu_sample(img, i + 1) +
         0.114 * cpu_sample(img, i + 2);
}

struct unsharp_job {
  const struct cpu_unsharp *u;
  const struct cpu_image *src, *blur;
  struct cpu_image *dst;
};

static void unsharp_rows(void *arg, int begin, int end) {
  const struct unsharp_job *j = arg;
  const struct cpu_image *s = j->src, *b = j->blur;
  int c = s->channels, alpha = c == 2 || c == 4, colours = alpha ? c - 1 : c;
  double max = (1 << s->depth) - 1, amount = j->u->amount, thr = j->u->threshold;
  long left = 0;
  for (int y = begin; y < end; y++) {
    if (cpu_tick(&left, 8L * c * s->width)) return;
    for (int x = 0; x < s->width; x++) {
      size_t i = ((size_t)y * s->width + x) * c;
      if (alpha) put(j->dst, i + c - 1, cpu_sample(s, i + c - 1));
      if (j->u->luma) { /* one difference for the pixel, added to every colour */
        double d = luma(s, i) - luma(b, i);
        for (int k = 0; k < colours; k++)
          put(j->dst, i + k,
              clamp_round(cpu_sample(s, i + k) + (fabs(d) < thr ? 0 : amount * d), max));
        continue;
      }
      /* colour premultiplied by alpha: the colour of a transparent pixel does not bleed */
      double a = alpha ? cpu_sample(s, i + c - 1) / max : 1;
      double ab = alpha ? cpu_sample(b, i + c - 1) / max : 1;
      for (int k = 0; k < colours; k++) {
        double v = cpu_sample(s, i + k), d = v * a - cpu_sample(b, i + k) * ab;
        double o = fabs(d) < thr || a == 0 ? v : (v * a + amount * d) / a;
        put(j->dst, i + k, clamp_round(o, max));
      }
    }
  }
}

enum err cpu_unsharp_image(struct cpu_pool *pool, const struct cpu_unsharp *u,
                           const struct cpu_image *src, const struct cpu_image *blur,
                           struct cpu_image *dst) {
  struct unsharp_job j = {u, src, blur, dst};
  cpu_parallel_for(pool, src->height, unsharp_rows, &j);
  return cpu_result(ERR_OK);
}

/* The weight of the blur at d pixels outside a region whose edge fades over feather pixels:
 * 1 inside, smoothstep down to 0 at feather + 1. */
static double ramp(int d, int feather) {
  if (d <= 0) return 1;
  if (d > feather) return 0;
  double t = 1 - (double)d / (feather + 1);
  return t * t * (3 - 2 * t);
}

enum err cpu_blend_box(struct cpu_image *dst, const struct cpu_image *box, int bx, int by,
                       const int rect[4], int feather) {
  int c = dst->channels, x0 = rect[0] - feather, x1 = rect[2] + feather;
  int y0 = rect[1] - feather, y1 = rect[3] + feather;
  double max = (1 << dst->depth) - 1;
  x0 = x0 < bx ? bx : x0, y0 = y0 < by ? by : y0;
  x1 = x1 > bx + box->width ? bx + box->width : x1;
  y1 = y1 > by + box->height ? by + box->height : y1;
  long left = 0;
  for (int y = y0; y < y1; y++) {
    if (cpu_tick(&left, 4L * c * (x1 - x0))) break;
    int dy = y < rect[1] ? rect[1] - y : y - (rect[3] - 1);
    for (int x = x0; x < x1; x++) {
      int dx = x < rect[0] ? rect[0] - x : x - (rect[2] - 1);
      double m = ramp(dx, feather) * ramp(dy, feather);
      size_t i = ((size_t)y * dst->width + x) * c, k = ((size_t)(y - by) * box->width + x - bx) * c;
      for (int ch = 0; m > 0 && ch < c; ch++) {
        double v = cpu_sample(dst, i + ch);
        put(dst, i + ch,
            m == 1 ? cpu_sample(box, k + ch)
                   : clamp_round(v + m * (cpu_sample(box, k + ch) - v), max));
      }
    }
  }
  return cpu_result(ERR_OK);
}

int cpu_blur_reach(const struct cpu_blur *b, double sigma) {
  int r = cpu_gauss_radius(sigma, CPU_TRUNCATE), m = r;
  if (cpu_method_is_fir(b->method) || b->method == CPU_SEPARABLE)
    m = cpu_gauss_radius(sigma, b->truncate);
  if (b->method == CPU_PYRAMID) {
    struct cpu_pyramid py;
    cpu_pyramid_params(sigma, b->truncate, &py);
    m = py.k > 1 ? py.k * (py.radius + 3) : cpu_gauss_radius(sigma, b->truncate);
  }
  return (r > m ? r : m) + 16;
}

static int clamp_to(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

void cpu_region_box(int width, int height, int rx, int ry, const int rect[4], int box[4]) {
  box[0] = clamp_to(rect[0] - rx, 0, width) / 16 * 16;
  box[1] = clamp_to(rect[1] - ry, 0, height) / 16 * 16;
  box[2] = clamp_to(rect[2] + rx, 0, width) - box[0];
  box[3] = clamp_to(rect[3] + ry, 0, height) - box[1];
}

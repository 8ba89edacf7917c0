/* /variance's whole compute on the CPU (cpu_variance_image), the twin of gpu/varimage.cu: a
 * colour image's luma, the local variance map, the values the user asked for (variance or
 * standard deviation), their statistics, the PSNR against the exact map, and the 16-bit image. */
#include "cpu_int.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

double cpu_var_scale(int depth, int stddev) {
  if (depth == 8) return stddev ? 256 : 4;
  return stddev ? 2 : 1.0 / 16384;
}

/* A variance as the value asked for: below 0 (float cancellation) as 0, stddev its root. */
static double var_value(double v, int stddev) {
  v = v > 0 ? v : 0;
  return stddev ? sqrt(v) : v;
}

struct values_job {
  int width, stddev;
  double scale;
  double *map, *ref; /* in place: variances in, values out; ref NULL when not measured */
  uint16_t *out;
  double *rows; /* per row: sum, min, max, squared error against ref */
};

static void values_rows(void *arg, int begin, int end) {
  const struct values_job *j = arg;
  long left = 0;
  for (int y = begin; y < end; y++) {
    if (cpu_tick(&left, 4L * j->width)) return;
    double sum = 0, se = 0, *m = j->map + (size_t)y * j->width, lo = INFINITY, hi = -INFINITY;
    for (int x = 0; x < j->width; x++) {
      double v = m[x] = var_value(m[x], j->stddev), s = floor(v * j->scale + 0.5);
      j->out[(size_t)y * j->width + x] = s >= 65535 ? 65535 : s >= 0 ? (uint16_t)s : 0;
      sum += v, lo = fmin(lo, v), hi = fmax(hi, v);
      if (!j->ref) continue;
      double r = var_value(j->ref[(size_t)y * j->width + x], j->stddev);
      se += (v - r) * (v - r);
    }
    double *row = j->rows + 4 * (size_t)y;
    row[0] = sum, row[1] = lo, row[2] = hi, row[3] = se;
  }
}

/* The values of map (and ref) into out and their statistics into s. The sums run each row left
 * to right and then the rows top to bottom, the order the GPU's reduction follows, so that the
 * exact method's statistics have the same bits on both backends. Returns ERR_OK,
 * ERR_OUT_OF_MEMORY or the token's stop. */
static enum err var_finish(struct cpu_pool *pool, const struct cpu_var_out *o, double *map,
                           double *ref, const struct cpu_image *plane, uint16_t *out,
                           struct cpu_var_stats *s) {
  double *rows = calloc(4 * (size_t)plane->height, sizeof(double));
  if (!rows) return ERR_OUT_OF_MEMORY;
  struct values_job j = {plane->width, o->stddev, s->scale, map, ref, out, rows};
  cpu_parallel_for(pool, plane->height, values_rows, &j);
  double sum = 0, se = 0, half = plane->depth == 8 ? 127.5 : 32767.5;
  double peak = o->stddev ? half : half * half, n = (double)plane->width * plane->height;
  s->min = INFINITY, s->max = -INFINITY;
  for (int y = 0; y < plane->height; y++) {
    sum += rows[4 * y], s->min = fmin(s->min, rows[4 * y + 1]);
    s->max = fmax(s->max, rows[4 * y + 2]), se += rows[4 * y + 3];
  }
  s->mean = sum / n;
  if (ref) s->psnr = se == 0 ? INFINITY : 10 * log10(peak * peak * n / se);
  free(rows);
  return cpu_result(ERR_OK);
}

enum err cpu_variance_image(struct cpu_pool *pool, const struct cpu_var *v,
                            const struct cpu_var_out *o, const struct cpu_image *src, uint16_t *out,
                            struct cpu_var_stats *s) {
  size_t n = (size_t)src->width * src->height;
  int measure = o->measure && v->method != CPU_VAR_EXACT;
  double *map = malloc(n * sizeof(double)), *ref = measure ? malloc(n * sizeof(double)) : NULL;
  struct cpu_image plane = *src;
  void *owned = NULL;
  enum err rc = ERR_OK;
  plane.channels = 1;
  if (src->channels != 1 && (plane.data = owned = malloc(cpu_image_bytes(&plane))))
    rc = cpu_luma(src, &plane);
  s->scale = cpu_var_scale(src->depth, o->stddev);
  s->psnr = v->method == CPU_VAR_EXACT ? INFINITY : NAN;
  if (!map || (measure && !ref) || !plane.data) rc = cpu_result(ERR_OUT_OF_MEMORY);
  if (rc == ERR_OK) rc = cpu_variance(pool, v, &plane, NULL, map);
  struct cpu_var exact = *v;
  exact.method = CPU_VAR_EXACT;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  s->reference_ms = -1;
  if (rc == ERR_OK && measure) rc = cpu_variance(pool, &exact, &plane, NULL, ref);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (measure) s->reference_ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  if (rc == ERR_OK) rc = var_finish(pool, o, map, ref, &plane, out, s);
  free(owned);
  free(ref);
  free(map);
  return cpu_result(rc);
}

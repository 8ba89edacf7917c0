/* The block mosaic of /pixelate, the CPU twin of gpu/pixelate.cu and its oracle: every block of
 * the image (aligned to its origin) takes the mean of its pixels, in exact integer arithmetic so
 * that the GPU gives the same bytes, and with regions the mosaic (of the blocks that meet them)
 * is blended into a copy of the image through cpu_blend_box, as /blur blends its regions. */
#include "cpu_int.h"

#include <stdlib.h>
#include <string.h>

/* The mean of the pixels of src in [x0, x1) x [y0, y1) into q, rounded half up: colour
 * premultiplied by alpha where there is alpha (round(sum(c a) / sum(a)), 0 when the block is
 * wholly transparent), alpha and alpha-less colour round(sum / pixels). The sums fit 64 bits: a
 * product of two 16-bit samples, doubled, over fewer than 2^31 pixels. */
static void block_mean(const struct cpu_image *src, int x0, int y0, int x1, int y1, unsigned q[4]) {
  int c = src->channels, alpha = c == 2 || c == 4, colours = alpha ? c - 1 : c;
  uint64_t sum[4] = {0, 0, 0, 0}, sa = 0, n = (uint64_t)(x1 - x0) * (uint64_t)(y1 - y0);
  for (int y = y0; y < y1; y++)
    for (int x = x0; x < x1; x++) {
      size_t i = ((size_t)y * src->width + x) * c;
      uint64_t a = alpha ? cpu_sample(src, i + c - 1) : 1;
      for (int k = 0; k < colours; k++) sum[k] += cpu_sample(src, i + k) * a;
      sa += a;
    }
  for (int k = 0; k < colours; k++)
    q[k] = alpha ? (sa ? (unsigned)((2 * sum[k] + sa) / (2 * sa)) : 0)
                 : (unsigned)((2 * sum[k] + n) / (2 * n));
  if (alpha) q[c - 1] = (unsigned)((2 * sa + n) / (2 * n));
}

struct mosaic_job {
  int block;
  const struct cpu_image *src;
  struct cpu_image *dst;
  const int (*rect)[4]; /* with n > 0, only the blocks that meet a region's window are needed */
  int n, feather;
};

/* Whether the block [x0, x1) x [y0, y1) meets a region or its feather (always, without regions):
 * cpu_blend_box reads the mosaic nowhere else. */
static int block_needed(const struct mosaic_job *j, int x0, int y0, int x1, int y1) {
  for (int i = 0; i < j->n; i++) {
    const int *r = j->rect[i];
    if (x0 < r[2] + j->feather && r[0] - j->feather < x1 && y0 < r[3] + j->feather &&
        r[1] - j->feather < y1)
      return 1;
  }
  return j->n == 0;
}

/* Block rows [begin, end) of the mosaic. */
static void mosaic_rows(void *arg, int begin, int end) {
  const struct mosaic_job *j = arg;
  const struct cpu_image *s = j->src;
  int b = j->block, c = s->channels;
  long left = 0;
  for (int by = begin; by < end; by++) {
    int y0 = by * b, y1 = y0 + b < s->height ? y0 + b : s->height;
    for (int x0 = 0; x0 < s->width; x0 += b) {
      int x1 = x0 + b < s->width ? x0 + b : s->width;
      if (!block_needed(j, x0, y0, x1, y1)) continue;
      if (cpu_tick(&left, 2L * c * (x1 - x0) * (y1 - y0))) return;
      unsigned q[4];
      block_mean(s, x0, y0, x1, y1, q);
      for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
          for (int k = 0; k < c; k++)
            cpu_set_sample(j->dst, ((size_t)y * s->width + x) * c + k, q[k]);
    }
  }
}

enum err cpu_pixelate(struct cpu_pool *pool, const struct cpu_pixelate *p,
                      const struct cpu_image *src, const int (*rect)[4], int n, int feather,
                      struct cpu_image *dst) {
  if (p->block < 1) return ERR_BAD_PARAMETER;
  size_t bytes = cpu_image_bytes(src);
  struct cpu_image mosaic = *dst;
  /* With regions the mosaic goes to a buffer of its own and dst starts as a copy of src. */
  if (n > 0 && !(mosaic.data = malloc(bytes))) return cpu_result(ERR_OUT_OF_MEMORY);
  struct mosaic_job j = {p->block, src, &mosaic, rect, n, feather};
  int rows = (src->height + p->block - 1) / p->block;
  cpu_parallel_for(pool, rows, mosaic_rows, &j);
  enum err e = cpu_result(ERR_OK);
  if (n > 0 && e == ERR_OK) {
    memcpy(dst->data, src->data, bytes);
    for (int i = 0; e == ERR_OK && i < n; i++)
      e = cpu_blend_box(dst, &mosaic, 0, 0, rect[i], feather);
  }
  if (n > 0) free(mosaic.data);
  return e;
}

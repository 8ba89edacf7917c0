/* Internals shared by the files of cpu/: the hot loops' clones, their cancel checks and what
 * they return, sample access, and the entry points that cpu_blur_image (fir.c, sep.c) and
 * cpu_variance (var_merge.c, and tools/var_accuracy.c's sampled rows) dispatch to. */
#ifndef BLURD_CPU_INT_H
#define BLURD_CPU_INT_H

#include "cpu.h"

/* A hot loop (image.c's strips, sep.c's tiles): an AVX-512 or AVX2 clone is picked at run time
 * where the CPU has it. Without FMA contraction every clone gives the same bits. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define CPU_HOT    __attribute__((target_clones("avx512f", "avx2", "default")))
#define CPU_AVX512 __attribute__((target("avx512f"))) /* a function only called where it runs */
#else
#define CPU_HOT
#endif

/* Work between two cancellation checks in a hot loop, counted in its inner steps (multiply-adds,
 * samples): 2^18 of them, a fraction of a millisecond, so the clock read of a check costs nothing
 * measurable. Loops tick once a row (a strip, a column), or once a pixel where a pixel is dear
 * (the O(r^2) variance methods); where a tick inside a row slowed the loop down (fir's row pass,
 * the convolution: the compiler shapes the inner loop differently) they tick once a row, the
 * longest rows taking some milliseconds (docs/engineering-notes.md, "Notes moved from the code's
 * comments"). */
#define CPU_TICK_WORK ((long)1 << 18)

/* Counts work done in *left (start it at 0: the first call checks) and checks the calling
 * thread's cancel token each CPU_TICK_WORK of it. Returns non-zero once the job is cancelled:
 * the loop then returns, its output unfinished, and the public function that ran it returns the
 * token's stop (cpu_result). */
static inline int cpu_tick(long *left, long work) {
  if ((*left -= work) > 0) return 0;
  *left = CPU_TICK_WORK;
  return cpu_cancelled() != CPU_RUNNING;
}

/* What a function that ran loops under the calling thread's token returns: the token's stop when
 * it stopped the work (its output is then unfinished, and whatever else failed no longer
 * matters), else rc. */
static inline enum err cpu_result(enum err rc) {
  enum err stop = cpu_stop_error();
  return stop != ERR_OK ? stop : rc;
}

/* Sample i of img (an index into the interleaved samples). */
static inline unsigned cpu_sample(const struct cpu_image *img, size_t i) {
  return img->depth == 16 ? ((const uint16_t *)img->data)[i] : ((const uint8_t *)img->data)[i];
}

static inline void cpu_set_sample(struct cpu_image *img, size_t i, unsigned v) {
  if (img->depth == 16)
    ((uint16_t *)img->data)[i] = (uint16_t)v;
  else
    ((uint8_t *)img->data)[i] = (uint8_t)v;
}

/* The fir family over a whole image in exact integer arithmetic: src into dst (same shape).
 * Returns ERR_OK, ERR_OUT_OF_MEMORY or the token's stop. */
enum err cpu_fir_image(struct cpu_pool *pool, const struct cpu_blur *b, const struct cpu_image *src,
                       struct cpu_image *dst);

/* The separable filter with wx[0..rx] along x and wy[0..ry] along y over an image in single
 * precision, tiled (sep.c): src into dst (same shape), colour premultiplied by alpha as in
 * image.c. Returns ERR_OK, ERR_OUT_OF_MEMORY or the token's stop. For rx, ry <=
 * CPU_SEP_RADIUS_MAX: wider kernels take image.c's double-precision planes, which fold the taps
 * beyond the edges into edge weights, where the tiles would filter every replicated row and
 * column out to the radius. */
#define CPU_SEP_RADIUS_MAX 64
enum err cpu_sep_image(struct cpu_pool *pool, const double *wx, int rx, const double *wy, int ry,
                       const struct cpu_image *src, struct cpu_image *dst);

/* cpu_variance(), but the direct O(r^2) methods (naive, koenig, welford) compute only the rows
 * y with y % row_step == 0 and leave the others untouched: the accuracy tool samples rows at
 * large radii. Other methods compute every row. Returns what cpu_variance returns. */
enum err cpu_variance_sampled(struct cpu_pool *pool, const struct cpu_var *v,
                              const struct cpu_image *src, int row_step, double *mean, double *var);

/* The separable float32 methods, pairwise and threewise (var_merge.c). Returns ERR_OK,
 * ERR_OUT_OF_MEMORY, ERR_BAD_PARAMETER when cpu_var_radius_ok refuses the radius (threewise: one
 * that is not 2^k - 1), or the token's stop. */
enum err cpu_var_merge(struct cpu_pool *pool, const struct cpu_var *v, const struct cpu_image *src,
                       double *mean, double *var);

#endif

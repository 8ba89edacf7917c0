/* Internals shared by the files of cpu/: sample access and the integer fir family (fir.c),
 * which cpu_blur_image() in image.c dispatches to. */
#ifndef BLURD_CPU_INT_H
#define BLURD_CPU_INT_H

#include "cpu.h"

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
 * Returns 0, or -1 when out of memory. */
int cpu_fir_image(struct cpu_pool *pool, const struct cpu_blur *b, const struct cpu_image *src,
                  struct cpu_image *dst);

#endif

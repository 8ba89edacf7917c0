/* The accuracy of several blurred regions taken together, as /blur with regions reports it: each
 * region's PSNR stands for a sum of squared errors over its samples, and the sums are added. */
#include "cpu.h"

#include <math.h>

double cpu_accuracy_merge(const struct cpu_accuracy *acc, const double *samples, int n, int depth) {
  double sse = 0, count = 0, peak = (1 << depth) - 1;
  for (int i = 0; i < n; i++) {
    if (!isinf(acc[i].psnr)) sse += samples[i] * peak * peak / pow(10, acc[i].psnr / 10);
    count += samples[i];
  }
  return sse > 0 ? 10 * log10(peak * peak * count / sse) : INFINITY;
}

/* Luma, local contrast enhancement and generic convolution on the CPU: the twins of the GPU
 * kernels for /contrast and /convolve, and of /variance's luma. */
#include "cpu_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
/* The matrices of "Digital Image Processing with a GPU" (its figure 2) for edge, sharpen and the
 * 3x3 Gaussian; box is the 3x3 mean;
 * emboss is the usual diagonal relief, which sums to 0, with a bias of 128 so flat areas come
 * out mid-gray on 8-bit images. */
static const struct {
  const char *name;
  float div, bias;
  float k[9];
} named[] = {
    {"edge",    1,  0,   {-1, -1, -1, -1, 8, -1, -1, -1, -1}},
    {"sharpen", 1,  0,   { 0, -1,  0, -1, 5, -1,  0, -1,  0}},
    {"emboss",  1,  128, {-2, -1,  0, -1, 0,  1,  0,  1,  2}},
    {"box",     9,  0,   { 1,  1,  1,  1, 1,  1,  1,  1,  1}},
    {"gauss3",  16, 0,   { 1,  2,  1,  2, 4,  2,  1,  2,  1}},
};
/* clang-format on */

const char *const cpu_conv_names[] = {"edge", "sharpen", "emboss", "box", "gauss3", NULL};

enum err cpu_conv_named(const char *name, struct cpu_conv *c) {
  for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
    if (strcmp(name, named[i].name) != 0) continue;
    memset(c, 0, sizeof(*c));
    c->size = 3;
    for (int t = 0; t < 9; t++) c->k[t] = named[i].k[t] / named[i].div;
    c->bias = named[i].bias;
    return ERR_OK;
  }
  return ERR_BAD_PARAMETER;
}

static int is_alpha(const struct cpu_image *img, int ch) {
  return (img->channels == 2 || img->channels == 4) && ch == img->channels - 1;
}

static unsigned sample_max(const struct cpu_image *img) {
  return img->depth == 16 ? 65535u : 255u;
}

/* floor(v + 0.5) clamped to [0, max]; NaN gives 0. */
static unsigned round_clamp(double v, unsigned max) {
  double f = floor(v + 0.5);
  return f >= max ? max : f > 0 ? (unsigned)f : 0;
}

enum err cpu_luma(const struct cpu_image *src, struct cpu_image *dst) {
  size_t n = (size_t)src->width * src->height;
  int ch = src->channels;
  long left = 0;
  for (size_t i = 0; i < n; i++) {
    if (i % 4096 == 0 && cpu_tick(&left, 4 * 4096)) break;
    const size_t p = i * ch;
    uint64_t y;
    if (ch <= 2) {
      y = cpu_sample(src, p);
    } else {
      uint64_t r = cpu_sample(src, p), g = cpu_sample(src, p + 1), b = cpu_sample(src, p + 2);
      y = src->depth == 16 ? (19595 * r + 38470 * g + 7471 * b + 32768) >> 16
                           : (77 * r + 150 * g + 29 * b + 128) >> 8;
    }
    cpu_set_sample(dst, i, (unsigned)y);
  }
  return cpu_result(ERR_OK);
}

/* ---- contrast ----
 * The local mean and standard deviation come from the exact variance (box window) of the
 * integer luma; the Wallis formula runs in double and moves R, G and B by the same amount as
 * luma. */

struct contrast_job {
  const struct cpu_contrast *c;
  const struct cpu_image *src, *luma;
  struct cpu_image *dst;
  const double *mean, *var;
};

/* Y' - Y at pixel i: Wallis, a m0 + (1 - a) m + (Y - m) b s0 / (s0 + b s). */
static double contrast_shift(const struct contrast_job *j, size_t i) {
  const struct cpu_contrast *c = j->c;
  double scale = j->src->depth == 16 ? 257 : 1, m0 = c->m0 * scale, s0 = c->s0 * scale;
  double y = cpu_sample(j->luma, i), m = j->mean[i], s = sqrt(j->var[i]);
  double den = s0 + c->b * s, gain = den > 0 ? c->b * s0 / den : 0;
  return c->a * m0 + (1 - c->a) * m + (y - m) * gain - y;
}

static void contrast_rows(void *arg, int begin, int end) {
  const struct contrast_job *j = arg;
  int nc = j->src->channels;
  unsigned max = sample_max(j->src);
  long left = 0;
  for (size_t i = (size_t)begin * j->src->width; i < (size_t)end * j->src->width; i++) {
    if (i % 4096 == 0 && cpu_tick(&left, 4096L * (8 + nc))) return;
    double shift = contrast_shift(j, i);
    for (int ch = 0; ch < nc; ch++) {
      unsigned x = cpu_sample(j->src, i * nc + ch);
      cpu_set_sample(j->dst, i * nc + ch, is_alpha(j->src, ch) ? x : round_clamp(x + shift, max));
    }
  }
}

enum err cpu_contrast_image(struct cpu_pool *pool, const struct cpu_contrast *c,
                            const struct cpu_image *src, struct cpu_image *dst) {
  size_t n = (size_t)src->width * src->height;
  struct cpu_image luma = {malloc(n * (size_t)(src->depth / 8)), src->width, src->height, 1,
                           src->depth};
  double *mean = malloc(n * sizeof(double)), *var = malloc(n * sizeof(double));
  struct cpu_var v = {CPU_VAR_EXACT, CPU_WINDOW_BOX, c->radius};
  enum err rc = luma.data && mean && var ? cpu_luma(src, &luma) : ERR_OUT_OF_MEMORY;
  if (rc == ERR_OK) rc = cpu_variance(pool, &v, &luma, mean, var);
  if (rc == ERR_OK) {
    struct contrast_job j = {c, src, &luma, dst, mean, var};
    cpu_parallel_for(pool, src->height, contrast_rows, &j);
  }
  free(luma.data);
  free(mean);
  free(var);
  return cpu_result(rc);
}

/* ---- convolution ----
 * The sum runs in float32 in one fixed order (rows of the kernel top to bottom, taps left to
 * right, starting from 0, the bias added last, then floor(v + 0.5)), each product and each sum
 * rounded on its own: the build's -std=c11 keeps gcc from contracting them into fused
 * multiply-adds, and the GPU kernel spells the same operations with __fmul_rn and __fadd_rn, so
 * both give the same bytes. */

struct conv_job {
  const struct cpu_conv *c;
  const struct cpu_image *src;
  struct cpu_image *dst;
  int ch; /* the channel being filtered */
};

static int clamp_index(int i, int n) {
  return i < 0 ? 0 : i >= n ? n - 1 : i;
}

/* One output sample: the taps in the documented order, products and sums rounded apart. */
static float conv_pixel(const struct conv_job *j, int x, int y) {
  const struct cpu_conv *c = j->c;
  int half = c->size / 2, w = j->src->width, nc = j->src->channels;
  float acc = 0;
  for (int ky = 0; ky < c->size; ky++) {
    size_t row = (size_t)clamp_index(y + ky - half, j->src->height) * w;
    for (int kx = 0; kx < c->size; kx++) {
      size_t at = (row + clamp_index(x + kx - half, w)) * nc + j->ch;
      float prod = c->k[ky * c->size + kx] * (float)cpu_sample(j->src, at);
      acc = acc + prod;
    }
  }
  return acc + c->bias;
}

/* The cancel token is checked each row: at most 16384 x 31 x 31 taps, some milliseconds. */
static void conv_rows(void *arg, int begin, int end) {
  const struct conv_job *j = arg;
  int nc = j->src->channels;
  unsigned max = sample_max(j->src);
  long left = 0;
  for (int y = begin; y < end; y++) {
    if (cpu_tick(&left, (long)j->src->width * j->c->size * j->c->size)) return;
    for (int x = 0; x < j->src->width; x++) {
      float f = floorf(conv_pixel(j, x, y) + 0.5f);
      unsigned q = f >= (float)max ? max : f > 0 ? (unsigned)f : 0;
      cpu_set_sample(j->dst, ((size_t)y * j->src->width + x) * nc + j->ch, q);
    }
  }
}

enum err cpu_convolve_image(struct cpu_pool *pool, const struct cpu_conv *c,
                            const struct cpu_image *src, struct cpu_image *dst) {
  size_t n = (size_t)src->width * src->height;
  int nc = src->channels;
  for (int ch = 0; ch < nc; ch++) {
    if (is_alpha(src, ch)) {
      for (size_t i = 0; i < n; i++) cpu_set_sample(dst, i * nc + ch, cpu_sample(src, i * nc + ch));
      continue;
    }
    struct conv_job j = {c, src, dst, ch};
    cpu_parallel_for(pool, src->height, conv_rows, &j);
  }
  return cpu_result(ERR_OK);
}

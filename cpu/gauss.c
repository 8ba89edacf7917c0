/* The numbers behind every method: sampled Gaussian kernels, Young-van Vliet coefficients with
 * their Triggs-Sdika boundary matrix, and the one-line filters that the tests use as the
 * readable statement of each method. image.c runs the same maths over whole planes. */
#include "cpu.h"

#include <complex.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *const method_names[] = {
#define X(e, name, desc, acc) name,
    CPU_METHODS(X)
#undef X
};

static const char *const method_descs[] = {
#define X(e, name, desc, acc) desc,
    CPU_METHODS(X)
#undef X
};

/* Accuracy classes: the lowest PSNR over three photographs at sigma 0.5 to 300, measured by
 * `make report` (docs/accuracy.md). */
#define ACC_FIR       "exact integer sums: >= 58.89 dB on 8-bit photographs (rounding level)"
#define ACC_SEPARABLE "single precision: >= 58.89 dB on 8-bit photographs (rounding level)"
#define ACC_YVV       ">= 55.40 dB on photographs (calibrated coefficients)"
#define ACC_YVV2WAY   "56.9 dB at sigma 0.5, falling to 22.8 dB at sigma 100 (centre hand-off)"
#define ACC_DERICHE   ">= 58.89 dB on photographs (rounding level)"
#define ACC_PYRAMID   ">= 58.89 dB on photographs (rounding level), largest error 0.53 levels"

static const char *const method_accuracy[] = {
#define X(e, name, desc, acc) acc,
    CPU_METHODS(X)
#undef X
};

const char *cpu_method_accuracy(enum cpu_method m) {
  return (unsigned)m < CPU_NMETHODS ? method_accuracy[m] : NULL;
}

const char *cpu_method_name(enum cpu_method m) {
  return (unsigned)m < CPU_NMETHODS ? method_names[m] : NULL;
}

const char *cpu_method_desc(enum cpu_method m) {
  return (unsigned)m < CPU_NMETHODS ? method_descs[m] : NULL;
}

enum err cpu_method_from_name(const char *name, enum cpu_method *m) {
  for (int k = 0; k < CPU_NMETHODS; k++)
    if (strcmp(name, method_names[k]) == 0) {
      *m = (enum cpu_method)k;
      return ERR_OK;
    }
  return ERR_BAD_PARAMETER;
}

int cpu_method_is_fir(enum cpu_method m) {
  return m == CPU_FIR || m == CPU_FIR_SHARED || m == CPU_FIR_MWPT;
}

int cpu_method_has_coeffs(enum cpu_method m) {
  return m == CPU_YVV || m == CPU_YVV_BLOCKED || m == CPU_YVV2WAY;
}

size_t cpu_image_bytes(const struct cpu_image *img) {
  return (size_t)img->width * (size_t)img->height * (size_t)img->channels *
         (size_t)(img->depth / 8);
}

int cpu_gauss_radius(double sigma, double truncate) {
  int r = (int)ceil(truncate * sigma);
  return r < 1 ? 1 : r;
}

void cpu_gauss_kernel(double sigma, int radius, double *w) {
  double sum = 0;
  for (int k = radius; k >= 0; k--) { /* small terms first */
    w[k] = exp(-0.5 * (double)k * k / (sigma * sigma));
    sum += k ? 2 * w[k] : w[k];
  }
  for (int k = 0; k <= radius; k++) w[k] /= sum;
}

int cpu_paper_radius(double sigma) {
  int r = (int)lround(2 * sigma) / 2;
  return r < 1 ? 1 : r;
}

int cpu_fir_shift(int depth, int alpha) {
  int bits = alpha ? 2 * depth : depth; /* the largest sample, premultiplied */
  return (64 - bits) / 2 - 1;           /* sum a * (sum a * x) < 2^(2k + bits) <= 2^62 */
}

void cpu_fir_weights(double sigma, int radius, int k, uint32_t *a) {
  double *w = malloc((size_t)(radius + 1) * sizeof(double)), scale = ldexp(1, k);
  uint64_t sum = 0;
  if (!w) { /* tiny; cannot happen in practice, and a box of one tap is still a valid kernel */
    memset(a, 0, (size_t)(radius + 1) * sizeof(*a));
    a[0] = (uint32_t)1 << k;
    return;
  }
  cpu_gauss_kernel(sigma, radius, w);
  for (int i = 1; i <= radius; i++) sum += 2 * (uint64_t)(a[i] = (uint32_t)llround(w[i] * scale));
  a[0] = (uint32_t)(((uint64_t)1 << k) - sum); /* the centre takes the rounding: exact sum */
  free(w);
}

/* Triggs & Sdika 2006, eq. 15, for u[k] = B x[k] + a1 u[k-1] + a2 u[k-2] + a3 u[k-3]. */
static void triggs_sdika_matrix(struct cpu_yvv *c) {
  double a1 = c->a[0], a2 = c->a[1], a3 = c->a[2];
  double d = (1 + a1 - a2 + a3) * (1 - a1 - a2 - a3) * (1 + a2 + (a1 - a3) * a3);
  double m[3][3] = {
      {1 - a2 - a1 * a3 - a3 * a3, (a1 + a3) * (a2 + a1 * a3), a3 * (a1 + a2 * a3)},
      {a1 + a2 * a3, (1 - a2) * (a2 + a1 * a3), a3 * (1 - a2 - a1 * a3 - a3 * a3)},
      {a1 * a3 + a2 + a1 * a1 - a2 * a2,
       a1 * a2 + a2 * a2 * a3 - a1 * a3 * a3 - a3 * a3 * a3 - a2 * a3 + a3, a3 * (a1 + a2 * a3)},
  };
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) c->m[i][j] = m[i][j] / d;
}

static void yvv_finish(struct cpu_yvv *c) {
  c->b = 1 - c->a[0] - c->a[1] - c->a[2];
  triggs_sdika_matrix(c);
}

/* Young & van Vliet 1995 (as Lee, Ko & Choe's eq. 3-4 give them): b0..b3 as polynomials in q. */
static void yvv_1995(double q, struct cpu_yvv *c) {
  double b0 = 1.57825 + 2.44413 * q + 1.4281 * q * q + 0.422205 * q * q * q;
  c->a[0] = (2.44413 * q + 2.85619 * q * q + 1.26661 * q * q * q) / b0;
  c->a[1] = -(1.4281 * q * q + 1.26661 * q * q * q) / b0;
  c->a[2] = 0.422205 * q * q * q / b0;
  yvv_finish(c);
}

static double q_1995(double sigma) {
  return sigma >= 2.5 ? 0.98711 * sigma - 0.96330 : 3.97156 - 4.14554 * sqrt(1 - 0.26891 * sigma);
}

/* Young, van Vliet & van Ginkel 2002 (IEEE TSP 50(11)). */
static void yvv_2002(double sigma, struct cpu_yvv *c) {
  double m0 = 1.16680, m1 = 1.10783, m2 = 1.40586;
  double q = 1.31564 * (sqrt(1 + 0.490811 * sigma * sigma) - 1);
  double s = (m0 + q) * (m1 * m1 + m2 * m2 + 2 * m1 * q + q * q);
  c->a[0] = q * (2 * m0 * m1 + m1 * m1 + m2 * m2 + (2 * m0 + 4 * m1) * q + 3 * q * q) / s;
  c->a[1] = -q * q * (m0 + 2 * m1 + 3 * q) / s;
  c->a[2] = q * q * q / s;
  yvv_finish(c);
}

/* van Vliet, Young & Verbeek 1998: poles d = 1.41650 +- 1.00829i and 1.86543 (for sigma 2),
 * raised to the power 1/q. With r = 1/d the causal denominator is
 * (1 - r1 z^-1)(1 - conj(r1) z^-1)(1 - r3 z^-1). */
static void yvv_poles(double q, struct cpu_yvv *c) {
  double complex d1 = cpow(1.41650 + 1.00829 * I, 1 / q);
  double d3 = pow(1.86543, 1 / q);
  double complex r1 = 1 / d1;
  double r3 = 1 / d3, re = creal(r1), m2 = creal(r1 * conj(r1));
  c->a[0] = 2 * re + r3;
  c->a[1] = -(m2 + 2 * re * r3);
  c->a[2] = m2 * r3;
  yvv_finish(c);
}

/* Variance of the symmetric filter with the 1998 poles scaled by q: 2 sum d/(d-1)^2. */
static double poles_variance(double q) {
  double complex d1 = cpow(1.41650 + 1.00829 * I, 1 / q);
  double d3 = pow(1.86543, 1 / q);
  return 2 * (2 * creal(d1 / ((d1 - 1) * (d1 - 1))) + d3 / ((d3 - 1) * (d3 - 1)));
}

/* The q whose poles give variance sigma^2 exactly (bisection; the variance grows with q). */
static double q_exact_variance(double sigma) {
  double lo = 0.01, hi = 2 * sigma + 2;
  for (int i = 0; i < 100; i++) {
    double mid = 0.5 * (lo + hi);
    if (poles_variance(mid) < sigma * sigma)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}

/* Squared L2 distance between the filter's impulse response and the reference kernel. */
static double impulse_error(const struct cpu_yvv *c, const double *g, int r, double *line, int n) {
  memset(line, 0, (size_t)n * sizeof(double));
  line[n / 2] = 1;
  cpu_yvv_line(c, line, n);
  double e = 0;
  for (int k = 0; k < n; k++) {
    int d = abs(k - n / 2);
    double ref = d <= r ? g[d] : 0;
    e += (line[k] - ref) * (line[k] - ref);
  }
  return e;
}

/* The calibrated set: the 1998 poles with the q, near the exact-variance one, that brings the
 * impulse response closest (least squares) to the reference kernel (golden-section search);
 * or the 2002 set when that fits better still (it does at sigma 0.5). Returns ERR_OK, or
 * ERR_OUT_OF_MEMORY. */
static enum err yvv_calibrated(double sigma, struct cpu_yvv *c) {
  int r = cpu_gauss_radius(sigma, CPU_TRUNCATE), n = 2 * (int)ceil(12 * sigma + 40) + 1;
  double *g = malloc((size_t)(r + 1) * sizeof(double)), *line = malloc((size_t)n * sizeof(double));
  double q0 = q_exact_variance(sigma), lo = 0.5 * q0, hi = 1.5 * q0;
  const double phi = 0.6180339887498949;
  if (!g || !line) {
    free(g);
    free(line);
    return ERR_OUT_OF_MEMORY;
  }
  cpu_gauss_kernel(sigma, r, g);
  double x1 = hi - phi * (hi - lo), x2 = lo + phi * (hi - lo), f1, f2;
  yvv_poles(x1, c), f1 = impulse_error(c, g, r, line, n);
  yvv_poles(x2, c), f2 = impulse_error(c, g, r, line, n);
  for (int i = 0; i < 40; i++) {
    if (f1 < f2) {
      hi = x2, x2 = x1, f2 = f1, x1 = hi - phi * (hi - lo);
      yvv_poles(x1, c), f1 = impulse_error(c, g, r, line, n);
    } else {
      lo = x1, x1 = x2, f1 = f2, x2 = lo + phi * (hi - lo);
      yvv_poles(x2, c), f2 = impulse_error(c, g, r, line, n);
    }
  }
  struct cpu_yvv alt;
  yvv_poles(0.5 * (lo + hi), c);
  yvv_2002(sigma, &alt);
  if (impulse_error(&alt, g, r, line, n) < impulse_error(c, g, r, line, n)) *c = alt;
  free(g);
  free(line);
  return ERR_OK;
}

/* The calibrated sets of the last CAL_CACHE sigmas: the search costs more than a request's
 * kernels (docs/engineering-notes.md, "Notes moved from the code's comments"), and a service sees
 * the same few sigmas again and again. */
#define CAL_CACHE 16
static struct {
  double sigma; /* 0: empty */
  struct cpu_yvv c;
} cal_cache[CAL_CACHE];
static int cal_next;
static pthread_mutex_t cal_lock = PTHREAD_MUTEX_INITIALIZER;

static enum err yvv_calibrated_cached(double sigma, struct cpu_yvv *c) {
  pthread_mutex_lock(&cal_lock);
  for (int i = 0; i < CAL_CACHE; i++)
    if (cal_cache[i].sigma == sigma) {
      *c = cal_cache[i].c;
      pthread_mutex_unlock(&cal_lock);
      return ERR_OK;
    }
  pthread_mutex_unlock(&cal_lock);
  enum err e = yvv_calibrated(sigma, c);
  if (e != ERR_OK) return e;
  pthread_mutex_lock(&cal_lock);
  cal_cache[cal_next].sigma = sigma, cal_cache[cal_next].c = *c;
  cal_next = (cal_next + 1) % CAL_CACHE;
  pthread_mutex_unlock(&cal_lock);
  return ERR_OK;
}

enum err cpu_yvv_coeffs(double sigma, enum cpu_yvv_set set, struct cpu_yvv *c) {
  switch (set) {
  case CPU_YVV_1995:
    yvv_1995(q_1995(sigma), c);
    return ERR_OK;
  case CPU_YVV_2002:
    yvv_2002(sigma, c);
    return ERR_OK;
  case CPU_YVV_1998:
    yvv_poles(0.00399341 + 0.4715161 * sigma, c);
    return ERR_OK;
  case CPU_YVV_EXACT_VARIANCE:
    yvv_poles(q_exact_variance(sigma), c);
    return ERR_OK;
  case CPU_YVV_CALIBRATED:
    return yvv_calibrated_cached(sigma, c);
  }
  return ERR_BAD_PARAMETER;
}

/* Sets v[n-1], v[n], v[n+1] (pointed to by v) from the last three causal outputs u[n-1],
 * u[n-2], u[n-3] and the replicated edge value x[n-1]: Triggs-Sdika for a constant extension. */
static void triggs_sdika(const struct cpu_yvv *c, double u1, double u2, double u3, double edge,
                         double *v) {
  double d[3] = {u1 - edge, u2 - edge, u3 - edge};
  for (int i = 0; i < 3; i++)
    v[i] = c->b * (c->m[i][0] * d[0] + c->m[i][1] * d[1] + c->m[i][2] * d[2]) + edge;
}

void cpu_yvv_line(const struct cpu_yvv *c, double *x, int n) {
  double b = c->b, a1 = c->a[0], a2 = c->a[1], a3 = c->a[2];
  double edge = x[n - 1];
  double u1 = x[0], u2 = x[0], u3 = x[0]; /* u[k-1], u[k-2], u[k-3] */
  for (int k = 0; k < n; k++) {
    double u = b * x[k] + a1 * u1 + a2 * u2 + a3 * u3;
    u3 = u2;
    u2 = u1;
    u1 = u;
    x[k] = u;
  }
  double v[3]; /* v[n-1], v[n], v[n+1] */
  triggs_sdika(c, x[n - 1], n > 1 ? x[n - 2] : u2, n > 2 ? x[n - 3] : u3, edge, v);
  x[n - 1] = v[0];
  double v1 = v[0], v2 = v[1], v3 = v[2]; /* v[k+1], v[k+2], v[k+3] */
  for (int k = n - 2; k >= 0; k--) {
    double vk = b * x[k] + a1 * v1 + a2 * v2 + a3 * v3;
    v3 = v2;
    v2 = v1;
    v1 = vk;
    x[k] = vk;
  }
}

void cpu_fir_line(const double *w, int radius, const double *in, double *out, int n) {
  for (int i = 0; i < n; i++) {
    double acc = 0;
    for (int k = -radius; k <= radius; k++) {
      int j = i + k < 0 ? 0 : i + k >= n ? n - 1 : i + k;
      acc += w[k < 0 ? -k : k] * in[j];
    }
    out[i] = acc;
  }
}

/* Deriche 1993: h(x) = sum_k alpha_k exp(-lambda_k x / sigma) / (sqrt(2 pi) sigma), x >= 0, with
 * complex alpha and lambda in conjugate pairs. */
void cpu_deriche_coeffs(double sigma, struct cpu_deriche *c) {
  static const double complex alpha[4] = {0.84 + 1.8675 * I, 0.84 - 1.8675 * I,
                                          -0.34015 - 0.1299 * I, -0.34015 + 0.1299 * I};
  static const double complex lambda[4] = {1.783 + 0.6318 * I, 1.783 - 0.6318 * I,
                                           1.723 + 1.997 * I, 1.723 - 1.997 * I};
  double complex p[4], r[4], A[5] = {1}, bc[4] = {0}, ba[5] = {0};
  for (int k = 0; k < 4; k++) {
    p[k] = cexp(-lambda[k] / sigma);
    r[k] = alpha[k] / (sqrt(2 * M_PI) * sigma);
    for (int m = k + 1; m > 0; m--) A[m] -= p[k] * A[m - 1]; /* A *= (1 - p_k z^-1) */
  }
  for (int k = 0; k < 4; k++) { /* P = prod_{j != k} (1 - p_j z^-1) */
    double complex P[4] = {1};
    for (int j = 0, deg = 0; j < 4; j++) {
      if (j == k) continue;
      deg++;
      for (int m = deg; m > 0; m--) P[m] -= p[j] * P[m - 1];
    }
    for (int m = 0; m < 4; m++) {
      bc[m] += r[k] * P[m];            /* causal: sum r_k / (1 - p_k z^-1) */
      ba[m + 1] += r[k] * p[k] * P[m]; /* anti-causal: sum r_k p_k z / (1 - p_k z) */
    }
  }
  double sa = 0, sc = 0, sb = 0;
  for (int m = 0; m < 5; m++) c->a[m] = creal(A[m]), sa += c->a[m];
  for (int m = 0; m < 4; m++) c->bc[m] = creal(bc[m]), sc += c->bc[m];
  for (int m = 0; m < 5; m++) c->ba[m] = creal(ba[m]), sb += c->ba[m];
  double g = (sc + sb) / sa; /* total DC gain, made exactly 1 */
  for (int m = 0; m < 4; m++) c->bc[m] /= g;
  for (int m = 0; m < 5; m++) c->ba[m] /= g;
  c->gc = sc / g / sa;
  c->ga = sb / g / sa;
  for (int j = 0; j < 2; j++) { /* poles 2j and 2j+1 are conjugate */
    struct cpu_deriche_sec *s = &c->sec[j];
    double complex q = p[2 * j], rr = r[2 * j] / g;
    double a2 = creal(q * conj(q));
    s->b0 = 2 * creal(rr), s->b1 = -2 * creal(rr * conj(q));
    s->c1 = 2 * creal(rr * q), s->c2 = -2 * creal(rr) * a2;
    s->k1 = -creal((1 - q) * conj(1 - q)), s->k2 = a2; /* 1 + a1 + a2 = |1 - q|^2 */
    s->gc = (s->b0 + s->b1) / -s->k1, s->ga = (s->c1 + s->c2) / -s->k1;
  }
}

void cpu_deriche_line(const struct cpu_deriche *c, const double *in, double *out, int n) {
  const double *a = c->a, *b = c->bc;
  double x1 = in[0], x2 = in[0], x3 = in[0], y1 = in[0] * c->gc, y2 = y1, y3 = y1, y4 = y1;
  for (int k = 0; k < n; k++) {
    double y = b[0] * in[k] + b[1] * x1 + b[2] * x2 + b[3] * x3 -
               (a[1] * y1 + a[2] * y2 + a[3] * y3 + a[4] * y4);
    x3 = x2, x2 = x1, x1 = in[k];
    y4 = y3, y3 = y2, y2 = y1, y1 = y;
    out[k] = y;
  }
  b = c->ba;
  double e = in[n - 1];
  x1 = x2 = x3 = e; /* x[k+1], x[k+2], x[k+3]; x[k+4] is x4 */
  double x4 = e;
  y1 = y2 = y3 = y4 = e * c->ga;
  for (int k = n - 1; k >= 0; k--) {
    double y = b[1] * x1 + b[2] * x2 + b[3] * x3 + b[4] * x4 -
               (a[1] * y1 + a[2] * y2 + a[3] * y3 + a[4] * y4);
    x4 = x3, x3 = x2, x2 = x1, x1 = in[k];
    y4 = y3, y3 = y2, y2 = y1, y1 = y;
    out[k] += y;
  }
}

void cpu_deriche_sections_line(const struct cpu_deriche *c, const double *in, double *out, int n) {
  for (int k = 0; k < n; k++) out[k] = 0;
  for (int j = 0; j < 2; j++) {
    const struct cpu_deriche_sec *s = &c->sec[j];
    double x1 = in[0], y = in[0] * s->gc, d = 0;
    for (int k = 0; k < n; k++) {
      d = s->b0 * in[k] + s->b1 * x1 + s->k1 * y + s->k2 * d;
      y += d, x1 = in[k];
      out[k] += y;
    }
    double xa = in[n - 1], xb = xa; /* x[k+1], x[k+2] */
    y = xa * s->ga, d = 0;
    for (int k = n - 1; k >= 0; k--) {
      d = s->c1 * xa + s->c2 * xb + s->k1 * y + s->k2 * d;
      y += d, xb = xa, xa = in[k];
      out[k] += y;
    }
  }
}

/* Line 3 of Lee, Ko & Choe's Algorithm 1 writes the left edge into w[0..2] and starts at 3, which
 * would drop pixels 1 and 2; its text says the values before w[0] are taken from in[0], which is
 * also what the right block does (w[n..n+2] = in[n-1]). We follow the text. */
void cpu_yvv2way_line(const struct cpu_yvv *c, const double *w, int radius, const double *in,
                      double *out, int n) {
  double b = c->b, a1 = c->a[0], a2 = c->a[1], a3 = c->a[2];
  int h = n / 2;
  double pc = 0;
  for (int k = -radius; k <= radius; k++) {
    int j = h + k < 0 ? 0 : h + k >= n ? n - 1 : h + k;
    pc += w[k < 0 ? -k : k] * in[j];
  }
  /* first pass: the left block forward, the right block backward */
  double u1 = in[0], u2 = in[0], u3 = in[0];
  for (int i = 0; i < h; i++) {
    out[i] = b * in[i] + a1 * u1 + a2 * u2 + a3 * u3;
    u3 = u2, u2 = u1, u1 = out[i];
  }
  u1 = u2 = u3 = in[n - 1];
  for (int i = n - 1; i > h; i--) {
    out[i] = b * in[i] + a1 * u1 + a2 * u2 + a3 * u3;
    u3 = u2, u2 = u1, u1 = out[i];
  }
  /* second pass, seeded with the centre value on both sides */
  u1 = u2 = u3 = pc;
  for (int i = h - 1; i >= 0; i--) {
    out[i] = b * out[i] + a1 * u1 + a2 * u2 + a3 * u3;
    u3 = u2, u2 = u1, u1 = out[i];
  }
  u1 = u2 = u3 = pc;
  for (int i = h + 1; i < n; i++) {
    out[i] = b * out[i] + a1 * u1 + a2 * u2 + a3 * u3;
    u3 = u2, u2 = u1, u1 = out[i];
  }
  out[h] = pc;
}

void cpu_pyramid_params(double sigma, double truncate, struct cpu_pyramid *p) {
  int k = 1;
  while (2 * k <= sigma / CPU_PYRAMID_SIGMA && 2 * k <= CPU_PYRAMID_KMAX) k *= 2;
  p->k = k;
  p->sigma_low = sigma, p->radius = cpu_gauss_radius(sigma, truncate);
  if (p->k == 1) return;
  double sv = 0; /* the triangle's variance: its weights sum to k^2 */
  for (int a = -(k / 2); a < 2 * k - k / 2; a++)
    sv += cpu_pyramid_tri(k, a) * (a - (k - 1) / 2.0) * (a - (k - 1) / 2.0);
  p->sigma_low = sqrt((sigma * sigma - sv / (k * k)) / (k * k) - 0.25);
  p->radius = cpu_gauss_radius(p->sigma_low, truncate);
}

double cpu_pyramid_tri(int k, int a) {
  double d = fabs(a - (k - 1) / 2.0);
  return d < k ? k - d : 0;
}

void cpu_pyramid_weights(int k, int r, double wt[3]) {
  double t = (r - (k - 1) / 2.0) / k; /* the sample's place from its cell's centre, in cells */
  wt[0] = (0.5 - t) * (0.5 - t) / 2, wt[1] = 0.75 - t * t, wt[2] = (0.5 + t) * (0.5 + t) / 2;
}

enum err cpu_pyramid_line(const struct cpu_pyramid *p, const double *w, const double *in,
                          double *out, int n) {
  int k = p->k, r = p->radius, m = (n + k - 1) / k, e = r + 1;
  double *low = malloc(2 * (size_t)(m + 2 * e) * sizeof(double)), *f = low + m + 2 * e;
  if (!low) return ERR_OUT_OF_MEMORY;
  for (int j = -e; j < m + e; j++) { /* cell j at low[j + e] */
    double s = 0;
    for (int a = -(k / 2); a < 2 * k - k / 2; a++) {
      int i = k * j + a;
      s += cpu_pyramid_tri(k, a) * in[i < 0 ? 0 : i >= n ? n - 1 : i];
    }
    low[j + e] = s / ((double)k * k);
  }
  for (int j = e - 1; j <= m + e; j++) {
    double s = w[0] * low[j];
    for (int t = 1; t <= r; t++) s += w[t] * (low[j - t] + low[j + t]);
    f[j] = s;
  }
  for (int i = 0; i < n; i++) {
    int j = i / k;
    double wt[3];
    cpu_pyramid_weights(k, i - j * k, wt);
    out[i] = wt[0] * f[j + e - 1] + wt[1] * f[j + e] + wt[2] * f[j + e + 1];
  }
  free(low);
  return ERR_OK;
}

/* The CPU rule for `auto`: separable up to sigma CPU_AUTO_SEPARABLE, yvv above. Both reach 58 dB
 * on photographs. separable's cost grows with its radius (sep.c: single precision, tiled), yvv's
 * does not; the two cross near sigma 10 (docs/methods.md, "auto"; docs/engineering-notes.md,
 * "Notes moved from the code's comments"). */
#define CPU_AUTO_SEPARABLE 10
enum cpu_method cpu_auto_method(double sigma, int width, int height) {
  (void)width, (void)height;
  return sigma <= CPU_AUTO_SEPARABLE ? CPU_SEPARABLE : CPU_YVV;
}

/* The cascade of c: its real pole p (a root of z^3 - a1 z^2 - a2 z - a3, which is negative at
 * -1 and B > 0 at 1 for a stable filter) and the section left over, z^2 - c1 z - c2. Rounded to
 * single precision when single, with q = 1 - p and g = 1 - c1 - c2 taken from the rounded values
 * (exact in float), so that each section keeps unit gain. */
static void yvv_cascade(const struct cpu_yvv *c, int single, struct cpu_yvv_blocked *m) {
  double lo = -1, hi = 1;
  for (int i = 0; i < 64; i++) {
    double z = 0.5 * (lo + hi);
    if (((z - c->a[0]) * z - c->a[1]) * z - c->a[2] < 0)
      lo = z;
    else
      hi = z;
  }
  double p = 0.5 * (lo + hi), c1 = c->a[0] - p, c2 = c->a[1] + p * c1;
  if (single) p = (float)p, c1 = (float)c1, c2 = (float)c2;
  m->p = p, m->q = 1 - p, m->c1 = c1, m->c2 = c2, m->g = 1 - c1 - c2;
}

/* One sample x through the cascade from state s = (w, u[k-1], u[k-2]), which becomes (w, u[k],
 * u[k-1]); returns u[k]. */
static double cascade_step(const struct cpu_yvv_blocked *m, double x, double s[3]) {
  s[0] = m->p * s[0] + m->q * x;
  double u = m->g * s[0] + m->c2 * s[2] + m->c1 * s[1];
  s[2] = s[1], s[1] = u;
  return u;
}

/* n samples of x (zero when NULL) through the cascade from state s, forwards or backwards, into y
 * (which may be x, or NULL); s ends as the state after them. */
static void cascade_run(const struct cpu_yvv_blocked *m, const double *x, double s[3], double *y,
                        int n, int backward) {
  for (int i = 0; i < n; i++) {
    int k = backward ? n - 1 - i : i;
    double u = cascade_step(m, x ? x[k] : 0, s);
    if (y) y[k] = u;
  }
}

static void mat_mul(const double a[3][3], const double b[3][3], double r[3][3]) {
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) r[i][j] = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
}

/* Triggs-Sdika in the cascade's states. With the input continued by its last value (subtracted
 * from every state), the causal state s after the last sample goes on as A^(j+1) s, A the
 * zero-input step, with outputs u[n+j] = (A^(j+1) s)_1; the anti-causal state entering the last
 * sample is sum_j A^j b u[n+j], b the state a unit input makes from zero. So ts = sum_j A^j C A^j
 * with C = b (row 1 of A), summed by doubling. */
static void cascade_boundary(struct cpu_yvv_blocked *m) {
  double a[3][3], b[3] = {0, 0, 0}, f[3][3], t[3][3], u[3][3];
  for (int j = 0; j < 3; j++) {
    double s[3] = {j == 0, j == 1, j == 2};
    cascade_step(m, 0, s);
    for (int i = 0; i < 3; i++) a[i][j] = s[i];
  }
  cascade_step(m, 1, b);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) f[i][j] = b[i] * a[1][j];
  for (int k = 0; k < 64; k++) { /* f holds the first 2^k terms, a = A^(2^k) */
    mat_mul(a, f, t);
    mat_mul(t, a, u);
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3; j++) f[i][j] += u[i][j];
    mat_mul(a, a, t);
    memcpy(a, t, sizeof(t));
  }
  memcpy(m->ts, f, sizeof(f));
}

void cpu_yvv_blocked_matrices(const struct cpu_yvv *c, int b, int single,
                              struct cpu_yvv_blocked *m) {
  double u[CPU_BLOCK_MAX];
  m->b = b;
  yvv_cascade(c, single, m);
  for (int j = 0; j < b; j++) { /* responses to a unit impulse at j, from zero states */
    double x[CPU_BLOCK_MAX] = {0}, s[3] = {0, 0, 0}, e[3] = {0, 0, 0};
    x[j] = 1;
    cascade_run(m, x, s, u, b, 0);
    cascade_run(m, u, e, NULL, b, 1);
    for (int i = 0; i < 3; i++) m->mp[i][j] = s[i], m->me[i][j] = e[i];
  }
  for (int j = 0; j < 3; j++) { /* responses to each state, with zero input */
    double s[3] = {j == 0, j == 1, j == 2}, e[3] = {0, 0, 0};
    cascade_run(m, NULL, s, u, b, 0);
    cascade_run(m, u, e, NULL, b, 1);
    for (int i = 0; i < 3; i++) m->t[i][j] = s[i], m->c[i][j] = e[i];
  }
  cascade_boundary(m);
}

static void mat_acc(const double m[3][3], const double x[3], double *y) {
  for (int i = 0; i < 3; i++) y[i] += m[i][0] * x[0] + m[i][1] * x[1] + m[i][2] * x[2];
}

enum err cpu_yvv_blocked_line(const struct cpu_yvv_blocked *m, double *x, int n) {
  int b = m->b, nb = (n + b - 1) / b, l0 = (nb - 1) * b, len = n - l0;
  double(*s)[3] = malloc((size_t)nb * sizeof(*s)), (*e)[3] = malloc((size_t)nb * sizeof(*e));
  double *u = malloc((size_t)b * sizeof(double)), edge = x[n - 1], st[3], d[3];
  if (!s || !e || !u) {
    free(u), free(e), free(s);
    return ERR_OUT_OF_MEMORY;
  }
  /* stage A, every block but the last: zero-state carries, as dot products with the input */
  for (int k = 0; k < nb - 1; k++)
    for (int i = 0; i < 3; i++) {
      const double *xb = x + (size_t)k * b;
      s[k + 1][i] = e[k][i] = 0; /* P-bar in s[k+1], E-bar in e[k] for now */
      for (int j = 0; j < b; j++)
        s[k + 1][i] += m->mp[i][j] * xb[j], e[k][i] += m->me[i][j] * xb[j];
    }
  /* fix the causal states left to right: s[k+1] = P-bar[k] + T s[k] */
  s[0][0] = s[0][1] = s[0][2] = x[0];
  for (int k = 0; k < nb - 1; k++) mat_acc(m->t, s[k], s[k + 1]);
  /* the last block: causal, Triggs-Sdika for the state after it, anti-causal */
  memcpy(st, s[nb - 1], sizeof(st));
  cascade_run(m, x + l0, st, u, len, 0);
  for (int i = 0; i < 3; i++) d[i] = st[i] - edge, e[nb - 1][i] = edge;
  mat_acc(m->ts, d, e[nb - 1]);
  memcpy(st, e[nb - 1], sizeof(st));
  cascade_run(m, u, st, NULL, len, 1);
  /* fix the anti-causal states right to left: E[k-1] = E-bar[k] + C s[k] + T E[k] */
  for (int k = nb - 2; k >= 0; k--) {
    double cur[3];
    memcpy(cur, e[k], sizeof(cur));
    mat_acc(m->c, s[k], cur);
    mat_acc(m->t, st, cur);
    memcpy(e[k], st, sizeof(st)); /* block k's own end state */
    memcpy(st, cur, sizeof(cur));
  }
  /* stage C: every block again, from its true states */
  for (int k = 0; k < nb; k++) {
    double *xb = x + (size_t)k * b;
    int l = k == nb - 1 ? len : b;
    cascade_run(m, xb, s[k], u, l, 0);
    cascade_run(m, u, e[k], xb, l, 1);
  }
  free(u);
  free(e);
  free(s);
  return ERR_OK;
}

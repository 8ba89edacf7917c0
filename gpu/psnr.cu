/* The PSNR of a blur against the exact Gaussian on the device: the reference in double precision
 * (run_reference), in single precision with a proven error bound (r32), or in integers on the
 * tensor cores (ri8, which also computes separable exactly and measures itself); the bound
 * decides when the fast references fix the PSNR, else the double one runs (docs/methods.md,
 * "PSNR"). */
#include "gpu_int.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reference's kernel for sigma (radius ceil(CPU_TRUNCATE sigma), in double) into slot; its
 * radius in *r. */
static enum gpu_status upload_ref(struct gpu_ctx *ctx, enum w_slot slot, double sigma, int *r) {
  *r = cpu_gauss_radius(sigma, CPU_TRUNCATE);
  double *w = (double *)malloc((size_t)(*r + 1) * sizeof(double));
  if (!w) return GPU_NO_MEMORY;
  cpu_gauss_kernel(sigma, *r, w);
  enum gpu_status st = upload_w(ctx, slot, w, (size_t)(*r + 1) * sizeof(double));
  free(w);
  return st;
}

enum gpu_status run_reference(struct gpu_ctx *ctx, double sigma_x, double sigma_y,
                              const struct cpu_image *img, void *d_in, void *d_out,
                              double *d_stats) {
  int rx, ry;
  enum gpu_status st = upload_ref(ctx, W_REF_X, sigma_x, &rx);
  if (st == GPU_OK) st = upload_ref(ctx, W_REF_Y, sigma_y, &ry);
  if (st == GPU_OK)
    st = scratch_grow(ctx, SLOT_REF, reference_bytes(img->width, img->height, img->channels, ry));
  if (st != GPU_OK) return st;
  CUDA_TRY(ctx, launch_reference(packed_of(d_in, img), packed_of(d_out, img),
                                 ctx->scratch[SLOT_REF].p, (const double *)w_at(ctx, W_REF_X), rx,
                                 (const double *)w_at(ctx, W_REF_Y), ry, d_stats, ctx->s));
  return GPU_OK;
}

void accuracy_of(const struct cpu_image *img, const double *stats, struct cpu_accuracy *acc) {
  double peak = (1 << img->depth) - 1;
  double mse = stats[0] / ((double)img->width * img->height * img->channels);
  acc->psnr = mse > 0 ? 10 * log10(peak * peak / mse) : INFINITY;
  acc->max_abs = stats[1];
}

/* One pass of the single-precision reference: its float weights (padded with zeros to r8) and the
 * terms of its error bound (docs/methods.md, "PSNR"), in units of the largest input sample. */
struct r32_pass {
  int r8;        /* the radius rounded up to a multiple of 8 (at least 8) */
  double mass;   /* the float weights' sum, both sides */
  double wround; /* the sum of |float weight - double weight|, both sides */
  double chain;  /* the sum of the masses under every rounded step, in r32_line's order */
  double pairs;  /* 2 x the sum of the weights w[1..]: the pairs' own roundings */
};

static enum gpu_status r32_weights(struct gpu_ctx *ctx, enum w_slot slot, double sigma,
                                   struct r32_pass *p) {
  int r = cpu_gauss_radius(sigma, CPU_TRUNCATE);
  p->r8 = r < 8 ? 8 : (r + 7) / 8 * 8;
  if (p->r8 > R32_RMAX) return GPU_ERROR;
  double *w = (double *)malloc((size_t)(r + 1) * sizeof(double));
  float *f = (float *)calloc((size_t)p->r8 + 1, sizeof(float));
  enum gpu_status st = w && f ? GPU_OK : GPU_NO_MEMORY;
  if (st == GPU_OK) {
    cpu_gauss_kernel(sigma, r, w);
    double mass[4] = {0, 0, 0, 0};
    p->chain = p->pairs = p->wround = 0;
    for (int m = 0; m <= r; m++) {
      f[m] = (float)w[m];
      p->wround += (m ? 2 : 1) * fabs((double)f[m] - w[m]);
    }
    for (int m = p->r8; m >= 1; m--) /* tap m's accumulator: m mod 4 (r8 a multiple of 8) */
      if (f[m] != 0) mass[m & 3] += 2.0 * f[m], p->chain += mass[m & 3], p->pairs += 2.0 * f[m];
    double all = mass[0] + mass[1] + mass[2] + mass[3];
    p->mass = all + f[0];
    p->chain += 2 * all + p->mass; /* two pairs of accumulators, their sum, then the centre tap */
    st = upload_w(ctx, slot, f, ((size_t)p->r8 + 1) * sizeof(float));
  }
  free(w);
  free(f);
  return st;
}

/* The bound on |float reference - double reference| of every sample (docs/methods.md): the row
 * pass on samples up to peak (exact integers, or premultiplied with 3 roundings), then the column
 * pass on the row pass's sums, each step's rounding at most u times the value it rounds. */
static double r32_bound(const struct r32_pass *x, const struct r32_pass *y, int depth, int alpha) {
  const double u = ldexp(1.0, -24), slack = 1.01;
  double peak = (1 << depth) - 1;
  double e_in = alpha ? 3 * u * peak : 0; /* the premultiplication, in float */
  double e1 = e_in * x->mass + peak * x->wround +
              slack * u * peak * (x->chain + (alpha ? x->pairs : 0)); /* integers add exactly */
  double m2 = peak * x->mass * (1 + 1e-6) + e1; /* the column pass's largest input */
  return e1 * y->mass + m2 * y->wround + slack * u * m2 * (y->chain + y->pairs) + 1e-9;
}

/* Whether the float reference's sums (stats: squared errors, absolute errors) fix the PSNR to
 * within 0.01 dB of the double reference's, for n samples and a bound e on each sample's error:
 * |SSE - SSE'| <= 2 e sum|D'| + n (e^2 + (2 e + 1e-6)^2), and 10 log10 of the ratio <= 0.01.
 * 1e-5 SSE' more covers the integer reference's sums begun in float (2^-18 of them at most). */
static int r32_certain(const double *stats, double n, double e) {
  double b = 2 * e * stats[1] + n * (e * e + (2 * e + 1e-6) * (2 * e + 1e-6)) + 1e-5 * stats[0];
  return stats[0] > 0 && b <= (1 - pow(10, -0.001)) * stats[0];
}

/* The A fragments of the integer reference's k-steps (kernels_ref32.cu) for the weights
 * q[0..p->r]: entry (s, b, lane) holds the 16 bytes that lane (g, t) = (lane / 4, lane % 4) keeps
 * of byte b of A[i][k] = q[|32 s + k - i - R|] (0 past r) in mma.sync's layout: rows g and g + 8,
 * columns 4t..4t+3, then 16 + 4t..16 + 4t + 3 (registers x, y, z, w: (g, 4t), (g + 8, 4t),
 * (g, 16 + 4t), (g + 8, 16 + 4t)), a byte a column. */
static void ri_table(const uint32_t *q, const ri_pass *p, uint32_t *table) {
  for (int wd = 0; wd < p->ks * 3 * 32 * 4; wd++) {
    int reg = wd & 3, lane = (wd >> 2) & 31, b = (wd >> 7) % 3, s = (wd >> 7) / 3;
    int i = (lane >> 2) + (reg & 1) * 8, k0 = 4 * (lane & 3) + (reg >> 1) * 16;
    uint32_t v = 0;
    for (int e = 0; e < 4; e++) {
      int d = abs(32 * s + k0 + e - i - p->R);
      v |= d <= p->r ? ((q[d] >> (8 * b)) & 255u) << (8 * e) : 0u;
    }
    table[wd] = v;
  }
}

/* The integer reference's weights for sigma into slot, as ri_table's A fragments: q = round(w 2^S)
 * with S the largest that keeps q[0] under 2^24; wround and mass: over every tap, the sums of
 * |q 2^-S - w| and of q 2^-S. GPU_ERROR when the kernel is wider than it takes. */
struct ri_w {
  ri_pass p;
  double wround, mass;
  double top;  /* over every tap: the sum of q's byte 1 + 257 byte 2 */
  double left; /* as the column pass's: the most its sum errs by, levels 0 and 1 left out */
};

/* What the reference's slots hold when ri_weights filled them: each request at the same sigma
 * then skips the weights, the table (about 1,000 words) and its comparison with the slot. */
struct ri_held {
  double sigma[2]; /* W_REF_X's, W_REF_Y's; 0: something else */
  struct ri_w w[2];
};

void ri_forget(struct gpu_ctx *ctx, enum w_slot slot) {
  if (ctx->ri_held && slot >= W_REF_X) ctx->ri_held->sigma[slot - W_REF_X] = 0;
}

static enum gpu_status ri_weights(struct gpu_ctx *ctx, enum w_slot slot, double sigma,
                                  struct ri_w *o) {
  struct ri_held *h = ctx->ri_held;
  if (h && h->sigma[slot - W_REF_X] == sigma) {
    *o = h->w[slot - W_REF_X];
    return GPU_OK;
  }
  int r = cpu_gauss_radius(sigma, CPU_TRUNCATE), R = r < 8 ? 8 : (r + 7) / 8 * 8;
  if (R > R32_RMAX) return GPU_ERROR;
  o->p = {r, R, 0, (16 + 2 * R + 31) / 32, 0};
  double *w = (double *)malloc((size_t)(r + 1) * sizeof(double));
  uint32_t *q = (uint32_t *)malloc((size_t)(r + 1) * sizeof(uint32_t));
  uint32_t *table = (uint32_t *)malloc(RI_TABLE_BYTES(o->p.ks));
  enum gpu_status st = w && q && table ? GPU_OK : GPU_NO_MEMORY;
  if (st == GPU_OK) {
    cpu_gauss_kernel(sigma, r, w);
    int S = 23; /* w[0] <= 1, the largest weight */
    while (llround(ldexp(w[0], S + 1)) < (1 << 24)) S++;
    o->p.S = S;
    o->wround = o->mass = o->top = 0;
    long long low = 0, mid = 0; /* over every tap: the sums of q's bytes 0 and 1 */
    for (int m = 0; m <= r; m++) {
      q[m] = (uint32_t)llround(ldexp(w[m], S));
      double e = ldexp((double)q[m], -S);
      o->wround += (m ? 2 : 1) * fabs(e - w[m]), o->mass += (m ? 2 : 1) * e;
      low += (m ? 2 : 1) * (q[m] & 255u), mid += (m ? 2 : 1) * (q[m] >> 8 & 255u);
      o->top += (m ? 2 : 1) * ((q[m] >> 8 & 255u) + 257.0 * (q[m] >> 16));
    }
    /* as the column pass's weights, the products it leaves out (hq's bytes 0 and 1 at most 255):
     * level 0, h0 q0, and level 1, 2^8 (h0 q1 + h1 q0), add up to at most 255 (low + 2^8 (low +
     * mid)) and at least 0; adding half of it, the sum errs by at most the other half */
    long long most = 255 * (low + 256 * (low + mid));
    o->p.half = most / 2;
    o->left = ldexp((double)(most - o->p.half), -(RI_F + S));
    ri_table(q, &o->p, table);
    st = upload_w(ctx, slot, table, RI_TABLE_BYTES(o->p.ks));
  }
  if (st == GPU_OK && (h || (h = ctx->ri_held = (struct ri_held *)calloc(1, sizeof(*h))))) {
    h->sigma[slot - W_REF_X] = sigma;
    h->w[slot - W_REF_X] = *o;
  }
  free(w);
  free(q);
  free(table);
  return st;
}

/* The bound on |integer reference - double reference| of every sample (docs/methods.md): the
 * row pass errs by the weights' rounding on samples up to 255 and hq's rounding (2^-17); the
 * column pass carries that through its weights, adds its own weights' rounding, leaves out the
 * products of levels 0 and 1 (y->left, with half their most added), and sums the rest in float:
 * four roundings of at most 2^-24 of the largest reference. */
static double ri_bound(const struct ri_w *x, const struct ri_w *y) {
  double half = ldexp(1.0, -(RI_F + 1)), e1 = 255 * x->wround + half, m2 = 255 * x->mass + half;
  double top = m2 * y->mass + e1 + 1; /* more than any reference the column pass sums */
  return e1 * y->mass + m2 * y->wround + y->left + 4 * ldexp(top, -24) + 1e-9;
}

/* The integer reference of b's sigmas on in (8-bit, 1 or 3 channels), its sums into d_stats and
 * its bound in *e; with write, rounded into out (separable), else measuring out. No wait.
 * GPU_ERROR: the kernel is too wide, or its sums would not fit. */
enum gpu_status launch_ri8(struct gpu_ctx *ctx, const struct cpu_blur *b, packed in, packed out,
                           int write, double *e) {
  struct ri_w x, y;
  enum gpu_status st = ri_weights(ctx, W_REF_X, b->sigma_x, &x);
  if (st == GPU_OK) st = ri_weights(ctx, W_REF_Y, b->sigma_y, &y);
  if (st != GPU_OK) return st;
  /* hq fits its 24 bits; the column pass's levels 3 + 256 x level 4 (hq's bytes 1 and 2 times
   * the weights' bytes 2 and 1, and 2 and 2) fit an int: at most 255 y.top */
  if (!(255 * x.mass * (1 << RI_F) + 1 < (1 << 24) && 255 * y.top < 2147483647.0)) return GPU_ERROR;
  *e = ri_bound(&x, &y);
  st = scratch_grow(ctx, SLOT_REF, reference_i8_bytes(in.w, in.h, in.c, y.p.R));
  if (st == GPU_OK && write) st = kernels_start(ctx);
  if (st != GPU_OK) return st;
  CUDA_TRY(ctx,
           launch_reference_i8(in, out, ctx->scratch[SLOT_REF].p, w_at(ctx, W_REF_X), x.p,
                               w_at(ctx, W_REF_Y), y.p, *e + 1e-6, ctx->d_stats, write, ctx->s));
  return GPU_OK;
}

int gpu_separable_exact(const struct gpu_ctx *ctx, const struct cpu_blur *b,
                        const struct cpu_image *img) {
  int rx = cpu_gauss_radius(b->sigma_x, CPU_TRUNCATE),
      ry = cpu_gauss_radius(b->sigma_y, CPU_TRUNCATE);
  return ctx->ref_int && !ctx->ref_double && !ctx->force_double && img->depth == 8 &&
         (img->channels == 1 || img->channels == 3) && b->truncate == CPU_TRUNCATE &&
         (rx + 7) / 8 * 8 <= R32_RMAX && (ry + 7) / 8 * 8 <= R32_RMAX;
}

/* Launches the integer reference (8-bit images of 1 or 3 channels, compute capability 8.0 on,
 * BLURD_PSNR_REFERENCE not float) or else the single-precision one against d_out, with their
 * sums into d_stats and the bound on each sample's error in *e; no wait. GPU_ERROR: neither
 * takes the kernel (too wide). */
static enum gpu_status launch_fast_reference(struct gpu_ctx *ctx, const struct cpu_blur *b,
                                             const struct cpu_image *img, double *e) {
  packed in = packed_of(ctx->d_in, img), out = packed_of(ctx->d_out, img);
  if (ctx->ref_int && img->depth == 8 && (img->channels == 1 || img->channels == 3)) {
    enum gpu_status st = launch_ri8(ctx, b, in, out, 0, e);
    if (st != GPU_ERROR) return st;
  }
  struct r32_pass px, py;
  enum gpu_status st = r32_weights(ctx, W_REF_X, b->sigma_x, &px);
  if (st == GPU_OK) st = r32_weights(ctx, W_REF_Y, b->sigma_y, &py);
  if (st != GPU_OK) return st;
  *e = r32_bound(&px, &py, img->depth, img->channels == 2 || img->channels == 4);
  st =
      scratch_grow(ctx, SLOT_REF, reference32_bytes(img->width, img->height, img->channels, py.r8));
  if (st != GPU_OK) return st;
  CUDA_TRY(ctx, launch_reference32(
                    in, out, ctx->scratch[SLOT_REF].p, (const float *)w_at(ctx, W_REF_X), px.r8,
                    (const float *)w_at(ctx, W_REF_Y), py.r8, *e + 1e-6, ctx->d_stats, ctx->s));
  return GPU_OK;
}

/* The reference and the PSNR of d_out against the blur of d_in: from the integer or the single-
 * precision reference when its bound makes the PSNR certain to 0.01 dB, else (or when
 * BLURD_PSNR_REFERENCE=double, or the kernel is wider than R32_RMAX) the double reference's.
 * Waits for the GPU; acc filled. Sets *exact when the double reference ran. */
enum gpu_status run_psnr(struct gpu_ctx *ctx, const struct cpu_blur *b, const struct cpu_image *img,
                         struct cpu_accuracy *acc, int *exact) {
  double e = ctx->sep_e; /* the method measured itself: no reference to run */
  enum gpu_status st = e > 0             ? GPU_OK
                       : ctx->ref_double ? GPU_ERROR
                                         : launch_fast_reference(ctx, b, img, &e);
  if (st == GPU_OK) {
    CUDA_TRY(ctx, cudaMemcpyAsync(ctx->h_stats, ctx->d_stats, 3 * sizeof(double),
                                  cudaMemcpyDeviceToHost, ctx->s));
    CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_MEASURED], ctx->s));
    CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_MEASURED]));
    size_t n = (size_t)img->width * img->height * img->channels;
    if (r32_certain(ctx->h_stats, (double)n, e)) {
      double s[2] = {ctx->h_stats[0], ctx->h_stats[2]};
      accuracy_of(img, s, acc);
      *exact = 0;
      return GPU_OK;
    }
  } else if (st != GPU_ERROR) {
    return st;
  }
  *exact = 1; /* the double reference decides */
  st = run_reference(ctx, b->sigma_x, b->sigma_y, img, ctx->d_in, ctx->d_out, ctx->d_stats);
  if (st != GPU_OK) return st;
  CUDA_TRY(ctx, cudaMemcpyAsync(ctx->h_stats, ctx->d_stats, 2 * sizeof(double),
                                cudaMemcpyDeviceToHost, ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_MEASURED], ctx->s));
  CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_MEASURED]));
  accuracy_of(img, ctx->h_stats, acc);
  return GPU_OK;
}

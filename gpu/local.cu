/* The host side of local statistics, contrast and convolution on the GPU (gpu_variance,
 * gpu_contrast, gpu_convolve, gpu_variance_bench). A job follows gpu_blur's shape: the input is
 * copied into the context's pinned staging and uploaded, the kernels of kernels_local.cu run
 * from buffers that only grow, the result comes back through pinned staging, and CUDA events on
 * the context's stream time each part. The float methods' results come back as float32 and are
 * widened here; exact's come back as the doubles the kernels computed. */
#include "gpu_int.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONTRAST_RADIUS_MAX 1000 /* the x pass stages 2r + 2 halo samples in shared memory */

/* A refused request: the device is untouched. */
static enum gpu_status refuse(struct gpu_ctx *ctx, const char *why) {
  snprintf(ctx->err, sizeof(ctx->err), "%s", why);
  return GPU_ERROR;
}

static int depth_ok(const struct cpu_image *img) {
  return (img->depth == 8 || img->depth == 16) && img->width > 0 && img->height > 0;
}

static enum gpu_status check_var(struct gpu_ctx *ctx, const struct cpu_var *v,
                                 const struct cpu_image *src) {
  if (!depth_ok(src) || src->channels != 1)
    return refuse(ctx, "local variance takes one gray plane of 8 or 16 bits");
  if (!cpu_var_radius_ok(v->method, v->radius) ||
      (v->window != CPU_WINDOW_TRIANGLE && v->window != CPU_WINDOW_BOX))
    return refuse(ctx, "local variance: this method does not take this radius or window");
  return GPU_OK;
}

/* Bytes of one result plane: float32 for the float methods, double for exact. */
static size_t var_elem(const struct cpu_var *v) {
  return v->method == CPU_VAR_EXACT ? sizeof(double) : sizeof(float);
}

/* exact's two planes of row sums in d_lv[0], d_lv[1]. */
static enum gpu_status grow_exact(struct gpu_ctx *ctx, const struct cpu_image *img) {
  size_t s2 = 0, s1 = var_exact_bytes(img->width, img->height, img->depth, &s2);
  enum gpu_status st = scratch_grow(ctx, SLOT_LV + 0, s1);
  return st == GPU_OK ? scratch_grow(ctx, SLOT_LV + 1, s2) : st;
}

enum gpu_status run_variance(struct gpu_ctx *ctx, const struct cpu_var *v,
                             const struct cpu_image *img, void *d_plane, int want_mean) {
  size_t plane = (size_t)img->width * img->height * var_elem(v);
  enum gpu_status st = scratch_grow(ctx, SLOT_VAR, plane);
  if (st == GPU_OK && want_mean) st = scratch_grow(ctx, SLOT_MEAN, plane);
  packed in = packed_of(d_plane, img);
  int tri = v->window == CPU_WINDOW_TRIANGLE;
  void *mean = want_mean ? ctx->scratch[SLOT_MEAN].p : NULL;
  cudaError_t e = cudaSuccess;
  if (st != GPU_OK) return st;
  if (v->method == CPU_VAR_EXACT) {
    if ((st = grow_exact(ctx, img)) != GPU_OK) return st;
    e = launch_var_exact(in, v->radius, tri, ctx->scratch[SLOT_LV + 0].p,
                         ctx->scratch[SLOT_LV + 1].p, (double *)ctx->scratch[SLOT_VAR].p,
                         (double *)mean, ctx->s);
  } else if (v->method == CPU_VAR_PAIRWISE || v->method == CPU_VAR_THREEWISE) {
    size_t line = var_merge_bytes(img->width, img->height, v->radius);
    for (int i = 0; i < 4 && st == GPU_OK; i++) st = scratch_grow(ctx, SLOT_LV + i, line);
    if (st != GPU_OK) return st;
    void *const lines[4] = {ctx->scratch[SLOT_LV].p, ctx->scratch[SLOT_LV + 1].p,
                            ctx->scratch[SLOT_LV + 2].p, ctx->scratch[SLOT_LV + 3].p};
    e = launch_var_merge(v->method, in, v->radius, tri, lines, (float *)ctx->scratch[SLOT_VAR].p,
                         (float *)mean, ctx->s);
  } else {
    e = launch_var_direct(v->method, in, v->radius, tri, (float *)ctx->scratch[SLOT_VAR].p,
                          (float *)mean, ctx->s);
  }
  return status_of(ctx, e, "local variance kernels");
}

/* Copies src to pinned staging (at least host_need bytes) and uploads it to d_in, between the
 * events EV_START and EV_UPLOADED. */
static enum gpu_status upload(struct gpu_ctx *ctx, const struct cpu_image *src, size_t host_need) {
  size_t bytes = cpu_image_bytes(src);
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = grow_host(ctx, bytes > host_need ? bytes : host_need);
  if (st == GPU_OK) st = grow(ctx, &ctx->d_in, &ctx->in_cap, bytes);
  if (st != GPU_OK) return st;
  memcpy(ctx->h_in, src->data, bytes);
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_START], ctx->s));
  CUDA_TRY(ctx, cudaMemcpyAsync(ctx->d_in, ctx->h_in, bytes, cudaMemcpyHostToDevice, ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s));
  return GPU_OK;
}

/* After the kernels: downloads n[i] bytes of d[i] into h_out one after the other (EV_MEASURED to
 * EV_DONE), waits, and fills t. */
static enum gpu_status download(struct gpu_ctx *ctx, void *const d[2], const size_t n[2],
                                struct gpu_times *t) {
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_FILTERED], ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_MEASURED], ctx->s)); /* no reference here */
  for (int i = 0; i < 2 && d[i]; i++)
    CUDA_TRY(ctx, cudaMemcpyAsync((char *)ctx->h_out + (i ? n[0] : 0), d[i], n[i],
                                  cudaMemcpyDeviceToHost, ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_DONE], ctx->s));
  CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_DONE])); /* a blocking-sync event */
  if (t) {
    t->upload = elapsed(ctx, EV_START, EV_UPLOADED);
    t->kernel = elapsed(ctx, EV_UPLOADED, EV_FILTERED);
    t->reference = 0;
    t->download = elapsed(ctx, EV_MEASURED, EV_DONE);
  }
  return GPU_OK;
}

/* Copies the n values of a result plane out of staging, widening float32 to double. */
static void widen(const void *h, size_t n, int is_double, double *out) {
  if (is_double) {
    memcpy(out, h, n * sizeof(double));
    return;
  }
  for (size_t i = 0; i < n; i++) out[i] = ((const float *)h)[i];
}

enum gpu_status gpu_variance(struct gpu_ctx *ctx, const struct cpu_var *v,
                             const struct cpu_image *src, double *mean, double *var,
                             struct gpu_times *t) {
  enum gpu_status st = check_var(ctx, v, src);
  size_t px = (size_t)src->width * src->height, plane = px * var_elem(v);
  if (st == GPU_OK) st = upload(ctx, src, plane * (mean ? 2 : 1));
  if (st == GPU_OK) st = run_variance(ctx, v, src, ctx->d_in, mean != NULL);
  void *d[2] = {ctx->scratch[SLOT_VAR].p, mean ? ctx->scratch[SLOT_MEAN].p : NULL};
  size_t n[2] = {plane, plane};
  if (st == GPU_OK) st = download(ctx, d, n, t);
  if (st != GPU_OK) return st;
  int dbl = v->method == CPU_VAR_EXACT;
  widen(ctx->h_out, px, dbl, var);
  if (mean) widen((char *)ctx->h_out + plane, px, dbl, mean);
  return GPU_OK;
}

struct var_run { /* the arguments of run_variance, for bench_median */
  const struct cpu_var *v;
  const struct cpu_image *src;
};

static enum gpu_status run_var(struct gpu_ctx *ctx, const void *arg) {
  const struct var_run *r = (const struct var_run *)arg;
  return run_variance(ctx, r->v, r->src, ctx->d_in, 0);
}

enum gpu_status gpu_variance_bench(struct gpu_ctx *ctx, const struct cpu_var *v,
                                   const struct cpu_image *src, int reps, double *ms) {
  enum gpu_status st = check_var(ctx, v, src);
  if (st != GPU_OK || reps < 1) return st != GPU_OK ? st : refuse(ctx, "reps < 1");
  size_t bytes = cpu_image_bytes(src);
  struct var_run r = {v, src};
  st = status_of(ctx, cudaSetDevice(ctx->dev), "device");
  if (st == GPU_OK) st = grow(ctx, &ctx->d_in, &ctx->in_cap, bytes);
  if (st == GPU_OK)
    st = status_of(ctx, cudaMemcpy(ctx->d_in, src->data, bytes, cudaMemcpyHostToDevice), "upload");
  /* two warm-up runs; one when a single timed run is asked for (a slow case: seconds) */
  return st == GPU_OK ? bench_median(ctx, reps > 1 ? 2 : 1, reps, run_var, &r, ms) : st;
}

static int image_ok(const struct cpu_image *img) {
  return depth_ok(img) && img->channels >= 1 && img->channels <= 4;
}

/* Luma into d_gray, its exact box statistics into d_mean and d_var, then the formula. */
static enum gpu_status run_contrast(struct gpu_ctx *ctx, const struct cpu_contrast *c,
                                    const struct cpu_image *src) {
  size_t px = (size_t)src->width * src->height;
  struct cpu_image g = {NULL, src->width, src->height, 1, src->depth};
  enum gpu_status st = grow(ctx, &ctx->d_out, &ctx->out_cap, cpu_image_bytes(src));
  if (st == GPU_OK) st = scratch_grow(ctx, SLOT_OP + 2, cpu_image_bytes(&g));
  if (st == GPU_OK) st = scratch_grow(ctx, SLOT_VAR, px * sizeof(double));
  if (st == GPU_OK) st = scratch_grow(ctx, SLOT_MEAN, px * sizeof(double));
  if (st == GPU_OK) st = grow_exact(ctx, &g);
  if (st != GPU_OK) return st;
  packed in = packed_of(ctx->d_in, src), gray = packed_of(ctx->scratch[SLOT_OP + 2].p, &g);
  CUDA_TRY(ctx, launch_luma(in, gray, ctx->s));
  CUDA_TRY(ctx, launch_var_exact(gray, c->radius, 0, ctx->scratch[SLOT_LV + 0].p,
                                 ctx->scratch[SLOT_LV + 1].p, (double *)ctx->scratch[SLOT_VAR].p,
                                 (double *)ctx->scratch[SLOT_MEAN].p, ctx->s));
  CUDA_TRY(ctx, launch_contrast(in, gray, (const double *)ctx->scratch[SLOT_MEAN].p,
                                (const double *)ctx->scratch[SLOT_VAR].p, *c,
                                packed_of(ctx->d_out, src), ctx->s));
  return GPU_OK;
}

/* Kernel time of the work enqueued since EV_UPLOADED, once it is done. */
static enum gpu_status finish_kernels(struct gpu_ctx *ctx, struct gpu_times *t) {
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_FILTERED], ctx->s));
  CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_FILTERED])); /* a blocking-sync event */
  if (t) t->kernel = elapsed(ctx, EV_UPLOADED, EV_FILTERED), t->reference = 0;
  return GPU_OK;
}

enum gpu_status gpu_contrast_resident(struct gpu_ctx *ctx, const struct cpu_contrast *c,
                                      const struct cpu_image *img, struct gpu_times *t) {
  if (!image_ok(img)) return refuse(ctx, "contrast takes 1 to 4 channels of 8 or 16 bits");
  if (c->radius < 0 || c->radius > CONTRAST_RADIUS_MAX)
    return refuse(ctx, "contrast: radius out of range");
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s));
  enum gpu_status st = run_contrast(ctx, c, img);
  return st == GPU_OK ? finish_kernels(ctx, t) : st;
}

enum gpu_status gpu_convolve_resident(struct gpu_ctx *ctx, const struct cpu_conv *c,
                                      const struct cpu_image *img, struct gpu_times *t) {
  if (!image_ok(img)) return refuse(ctx, "convolve takes 1 to 4 channels of 8 or 16 bits");
  if (c->size < 1 || c->size > CPU_CONV_MAX || c->size % 2 == 0)
    return refuse(ctx, "convolve: the kernel side must be odd, 1 to 31");
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = grow(ctx, &ctx->d_out, &ctx->out_cap, cpu_image_bytes(img));
  if (st != GPU_OK) return st;
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s));
  CUDA_TRY(ctx, launch_convolve(packed_of(ctx->d_in, img), packed_of(ctx->d_out, img), *c, ctx->s));
  return finish_kernels(ctx, t);
}

/* Upload, run (a *_resident filter), download: the whole job on host buffers. */
static enum gpu_status on_host(struct gpu_ctx *ctx, const struct cpu_image *src,
                               struct cpu_image *dst, struct gpu_times *t,
                               enum gpu_status (*run)(struct gpu_ctx *, const void *,
                                                      const struct cpu_image *, struct gpu_times *),
                               const void *arg) {
  struct gpu_times g = {0, 0, 0, 0};
  void *pixels = NULL;
  enum gpu_status st = gpu_upload(ctx, src, &g);
  if (st == GPU_OK) st = run(ctx, arg, src, &g);
  if (st == GPU_OK) st = gpu_download(ctx, GPU_OUTPUT, src, &pixels, &g);
  if (st != GPU_OK) return st;
  deliver(src, pixels, dst);
  if (t) *t = g;
  return GPU_OK;
}

static enum gpu_status run_contrast_resident(struct gpu_ctx *ctx, const void *c,
                                             const struct cpu_image *img, struct gpu_times *t) {
  return gpu_contrast_resident(ctx, (const struct cpu_contrast *)c, img, t);
}

static enum gpu_status run_convolve_resident(struct gpu_ctx *ctx, const void *c,
                                             const struct cpu_image *img, struct gpu_times *t) {
  return gpu_convolve_resident(ctx, (const struct cpu_conv *)c, img, t);
}

enum gpu_status gpu_contrast(struct gpu_ctx *ctx, const struct cpu_contrast *c,
                             const struct cpu_image *src, struct cpu_image *dst,
                             struct gpu_times *t) {
  if (!image_ok(src)) return refuse(ctx, "contrast takes 1 to 4 channels of 8 or 16 bits");
  return on_host(ctx, src, dst, t, run_contrast_resident, c);
}

enum gpu_status gpu_convolve(struct gpu_ctx *ctx, const struct cpu_conv *c,
                             const struct cpu_image *src, struct cpu_image *dst,
                             struct gpu_times *t) {
  if (!image_ok(src)) return refuse(ctx, "convolve takes 1 to 4 channels of 8 or 16 bits");
  return on_host(ctx, src, dst, t, run_convolve_resident, c);
}

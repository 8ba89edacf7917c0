/* /variance on the device, the twin of cpu/varimage.c's cpu_variance_image: a colour image's
 * luma (launch_luma), the method's map (run_variance), the values asked for and the 16-bit image
 * (values_kernel), the exact map when the PSNR is measured, and the statistics. The sums follow
 * the CPU's order, each row left to right by one thread of row_stats and then the rows top to
 * bottom by one thread of total_stats, with no fused multiply-add: for the exact method the same
 * map gives the same bits. Only the four statistics come to the host; the image stays on the
 * device as the output image, for gpu_download and the PNG encoder. */
#include "gpu_int.cuh"

#include <math.h>
#include <stdio.h>

/* A variance as the value asked for: below 0 (float cancellation) as 0, stddev its root (IEEE
 * square root, as the host's). */
__device__ __forceinline__ double var_value(double v, int stddev) {
  v = v > 0 ? v : 0;
  return stddev ? sqrt(v) : v;
}

/* Pixel i of the map: its value into vals and round(value * scale), clamped, into out. */
template <class T>
__global__ void values_kernel(const T *map, size_t n, int stddev, double scale, double *vals,
                              uint16_t *out) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double v = var_value((double)map[i], stddev), s = floor(__dadd_rn(__dmul_rn(v, scale), 0.5));
  vals[i] = v;
  out[i] = s >= 65535 ? 65535 : s >= 0 ? (uint16_t)s : 0;
}

/* Row y of vals: its sum, min, max and (ref not NULL) squared error against the exact map's
 * values, into rows[4 y ..], in cpu/varimage.c's order. */
__global__ void row_stats(const double *vals, const double *ref, int w, int h, int stddev,
                          double *rows) {
  int y = blockIdx.x * blockDim.x + threadIdx.x;
  if (y >= h) return;
  const double *v = vals + (size_t)y * w, *r = ref ? ref + (size_t)y * w : NULL;
  double sum = 0, se = 0, lo = INFINITY, hi = -INFINITY;
  for (int x = 0; x < w; x++) {
    sum = __dadd_rn(sum, v[x]), lo = fmin(lo, v[x]), hi = fmax(hi, v[x]);
    if (!r) continue;
    double d = __dsub_rn(v[x], var_value(r[x], stddev));
    se = __dadd_rn(se, __dmul_rn(d, d));
  }
  rows[4 * (size_t)y] = sum, rows[4 * (size_t)y + 1] = lo;
  rows[4 * (size_t)y + 2] = hi, rows[4 * (size_t)y + 3] = se;
}

/* The rows' statistics, top to bottom, into stats: sum, min, max, squared error. */
__global__ void total_stats(const double *rows, int h, double *stats) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double sum = 0, se = 0, lo = INFINITY, hi = -INFINITY;
  for (int y = 0; y < h; y++) {
    sum = __dadd_rn(sum, rows[4 * y]), lo = fmin(lo, rows[4 * y + 1]);
    hi = fmax(hi, rows[4 * y + 2]), se = __dadd_rn(se, rows[4 * y + 3]);
  }
  stats[0] = sum, stats[1] = lo, stats[2] = hi, stats[3] = se;
}

static cudaError_t launch_values(const void *map, int is_double, size_t n, int stddev, double scale,
                                 double *vals, uint16_t *out, cudaStream_t s) {
  unsigned t = 256, g = div_up((unsigned)n, t);
  if (is_double)
    values_kernel<double><<<g, t, 0, s>>>((const double *)map, n, stddev, scale, vals, out);
  else
    values_kernel<float><<<g, t, 0, s>>>((const float *)map, n, stddev, scale, vals, out);
  return cudaGetLastError();
}

static cudaError_t launch_stats(const double *vals, const double *ref, int w, int h, int stddev,
                                double *rows, double *stats, cudaStream_t s) {
  row_stats<<<div_up(h, 64), 64, 0, s>>>(vals, ref, w, h, stddev, rows);
  total_stats<<<1, 1, 0, s>>>(rows, h, stats);
  return cudaGetLastError();
}

static enum gpu_status refuse(struct gpu_ctx *ctx, const char *why) {
  snprintf(ctx->err, sizeof(ctx->err), "%s", why);
  return GPU_ERROR;
}

/* The buffers of a w x h job: the output image, the values, the rows' statistics, the luma. */
static enum gpu_status grow_all(struct gpu_ctx *ctx, const struct cpu_image *img) {
  size_t n = (size_t)img->width * img->height;
  struct cpu_image plane = {NULL, img->width, img->height, 1, img->depth};
  enum gpu_status st = grow(ctx, &ctx->d_out, &ctx->out_cap, n * sizeof(uint16_t));
  if (st == GPU_OK) st = scratch_grow(ctx, SLOT_OP + 0, 4 * (size_t)img->height * 8);
  if (st == GPU_OK) st = scratch_grow(ctx, SLOT_OP + 1, n * sizeof(double));
  if (st == GPU_OK && img->channels > 1)
    st = scratch_grow(ctx, SLOT_OP + 2, cpu_image_bytes(&plane));
  return st;
}

/* The statistics from the host's copy of total_stats' four doubles (h), as cpu/varimage.c. */
static void stats_of(const struct cpu_image *img, const struct cpu_var *v,
                     const struct cpu_var_out *o, int measure, const double *h,
                     struct cpu_var_stats *s) {
  double n = (double)img->width * img->height, half = img->depth == 8 ? 127.5 : 32767.5;
  double peak = o->stddev ? half : half * half;
  s->scale = cpu_var_scale(img->depth, o->stddev);
  s->min = h[1], s->max = h[2], s->mean = h[0] / n;
  s->psnr = v->method == CPU_VAR_EXACT ? INFINITY
            : measure                  ? (h[3] == 0 ? INFINITY : 10 * log10(peak * peak * n / h[3]))
                                       : NAN;
}

enum gpu_status gpu_variance_resident(struct gpu_ctx *ctx, const struct cpu_var *v,
                                      const struct cpu_var_out *o, const struct cpu_image *img,
                                      struct cpu_var_stats *s, struct gpu_times *t) {
  if ((img->depth != 8 && img->depth != 16) || img->channels < 1 || img->channels > 4 ||
      img->width < 1 || img->height < 1)
    return refuse(ctx, "variance takes 1 to 4 channels of 8 or 16 bits");
  if (!cpu_var_radius_ok(v->method, v->radius) ||
      (v->window != CPU_WINDOW_TRIANGLE && v->window != CPU_WINDOW_BOX))
    return refuse(ctx, "local variance: this method does not take this radius or window");
  size_t n = (size_t)img->width * img->height;
  int measure = o->measure && v->method != CPU_VAR_EXACT;
  struct cpu_image plane = {NULL, img->width, img->height, 1, img->depth};
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = grow_all(ctx, img);
  if (st != GPU_OK) return st;
  void *d_plane = img->channels > 1 ? ctx->scratch[SLOT_OP + 2].p : ctx->d_in;
  double *vals = (double *)ctx->scratch[SLOT_OP + 1].p,
         *rows = (double *)ctx->scratch[SLOT_OP + 0].p;
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s));
  if (img->channels > 1)
    CUDA_TRY(ctx, launch_luma(packed_of(ctx->d_in, img), packed_of(d_plane, &plane), ctx->s));
  if ((st = run_variance(ctx, v, &plane, d_plane, 0)) != GPU_OK) return st;
  CUDA_TRY(ctx, launch_values(ctx->scratch[SLOT_VAR].p, v->method == CPU_VAR_EXACT, n, o->stddev,
                              cpu_var_scale(img->depth, o->stddev), vals, (uint16_t *)ctx->d_out,
                              ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_FILTERED], ctx->s));
  struct cpu_var exact = *v;
  exact.method = CPU_VAR_EXACT;
  if (measure && (st = run_variance(ctx, &exact, &plane, d_plane, 0)) != GPU_OK) return st;
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_MEASURED], ctx->s));
  CUDA_TRY(ctx, launch_stats(vals, measure ? (const double *)ctx->scratch[SLOT_VAR].p : NULL,
                             img->width, img->height, o->stddev, rows, ctx->d_stats, ctx->s));
  CUDA_TRY(ctx, cudaMemcpyAsync(ctx->h_stats, ctx->d_stats, 4 * sizeof(double),
                                cudaMemcpyDeviceToHost, ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_DONE], ctx->s));
  CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_DONE])); /* a blocking-sync event */
  stats_of(img, v, o, measure, ctx->h_stats, s);
  s->reference_ms = measure ? elapsed(ctx, EV_FILTERED, EV_MEASURED) : -1;
  if (t) {
    t->kernel = elapsed(ctx, EV_UPLOADED, EV_FILTERED) + elapsed(ctx, EV_MEASURED, EV_DONE);
    t->reference = measure ? elapsed(ctx, EV_FILTERED, EV_MEASURED) : 0;
  }
  return GPU_OK;
}

/* /sharpen on the device: the blur of the input image by the method's own kernels
 * (gpu_blur_resident), then unsharp_kernel, the twin of cpu/compose.c's cpu_unsharp_image,
 * composes in + amount (in - blurred) over the blurred image in place. The composition spells
 * the CPU's double operations in the same order through the _rn intrinsics, so that nvcc cannot
 * contract them into fused multiply-adds: given the same blurred image, the same bytes. The image
 * stays on the device, ready for the GPU encoder. */
#include "gpu_int.cuh"

#include <stdio.h>

struct unsharp_params { /* cpu_unsharp, by value */
  double amount, threshold;
  int luma;
};

/* Sample i of im as a double. */
__device__ __forceinline__ double sample_d(const packed &im, size_t i) {
  return (double)raw_sample(im, i);
}

/* BT.601 luma of the colour of the pixel at i (its first sample for gray): cpu/compose.c's. */
__device__ __forceinline__ double luma_at(const packed &im, size_t i) {
  if (im.c < 3) return sample_d(im, i);
  return __dadd_rn(
      __dadd_rn(__dmul_rn(0.299, sample_d(im, i)), __dmul_rn(0.587, sample_d(im, i + 1))),
      __dmul_rn(0.114, sample_d(im, i + 2)));
}

/* floor(v + 0.5) within [0, max], as cpu/compose.c's clamp_round. */
__device__ __forceinline__ double clamp_round_d(double v, double max) {
  v = floor(__dadd_rn(v, 0.5));
  return v < 0 ? 0 : v > max ? max : v;
}

/* Pixel (x, y): in (the input) and the blur (in out) into out. Every sample of the pixel is read
 * before any is written. */
__global__ void unsharp_kernel(packed in, packed out, unsharp_params u) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= in.w || y >= in.h) return;
  int c = in.c, alpha = c == 2 || c == 4, colours = alpha ? c - 1 : c;
  double max = (1 << in.depth) - 1, o[4] = {0, 0, 0, 0};
  size_t i = ((size_t)y * in.w + x) * c;
  if (u.luma) { /* one difference for the pixel, added to every colour */
    double d = __dsub_rn(luma_at(in, i), luma_at(out, i));
    double add = fabs(d) < u.threshold ? 0 : __dmul_rn(u.amount, d);
    for (int k = 0; k < colours; k++)
      o[k] = clamp_round_d(__dadd_rn(sample_d(in, i + k), add), max);
  } else { /* colour premultiplied by alpha */
    double a = alpha ? __ddiv_rn(sample_d(in, i + c - 1), max) : 1;
    double ab = alpha ? __ddiv_rn(sample_d(out, i + c - 1), max) : 1;
    for (int k = 0; k < colours; k++) {
      double v = sample_d(in, i + k), va = __dmul_rn(v, a);
      double d = __dsub_rn(va, __dmul_rn(sample_d(out, i + k), ab));
      double r =
          fabs(d) < u.threshold || a == 0 ? v : __ddiv_rn(__dadd_rn(va, __dmul_rn(u.amount, d)), a);
      o[k] = clamp_round_d(r, max);
    }
  }
  if (alpha) o[c - 1] = sample_d(in, i + c - 1);
  for (int k = 0; k < c; k++) {
    if (out.depth == 16)
      ((uint16_t *)out.p)[i + k] = (uint16_t)o[k];
    else
      ((uint8_t *)out.p)[i + k] = (uint8_t)o[k];
  }
}

static cudaError_t launch_unsharp(packed in, packed out, const struct cpu_unsharp *u,
                                  cudaStream_t s) {
  unsharp_params p = {u->amount, u->threshold, u->luma};
  dim3 block(32, 8), grid(div_up(in.w, 32), div_up(in.h, 8));
  unsharp_kernel<<<grid, block, 0, s>>>(in, out, p);
  return cudaGetLastError();
}

enum gpu_status gpu_sharpen_resident(struct gpu_ctx *ctx, const struct cpu_blur *b,
                                     const struct cpu_unsharp *u, const struct cpu_image *img,
                                     struct cpu_accuracy *acc, struct gpu_times *t) {
  if ((img->depth != 8 && img->depth != 16) || img->channels < 1 || img->channels > 4 ||
      img->width < 1 || img->height < 1) {
    snprintf(ctx->err, sizeof(ctx->err), "sharpen takes 1 to 4 channels of 8 or 16 bits");
    return GPU_ERROR;
  }
  struct gpu_times g = {0, 0, 0, 0};
  enum gpu_status st = gpu_blur_resident(ctx, b, img, acc, &g);
  if (st != GPU_OK) return st;
  /* the blur's events are read; EV_MEASURED and EV_DONE time the composition */
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_MEASURED], ctx->s));
  CUDA_TRY(ctx, launch_unsharp(packed_of(ctx->d_in, img), packed_of(ctx->d_out, img), u, ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_DONE], ctx->s));
  CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_DONE])); /* a blocking-sync event */
  if (t) {
    t->kernel = g.kernel + elapsed(ctx, EV_MEASURED, EV_DONE);
    t->reference = g.reference;
  }
  return GPU_OK;
}

/* gpu: the CUDA backend's compute, as a small plain-C API. CUDA types stay inside the .cu
 * files behind the opaque struct gpu_ctx: one context per worker, each with its own device,
 * stream, CUDA events, pinned host staging buffers and device buffers that grow when an image
 * needs more and are reused across jobs (no cudaMalloc per request in steady state).
 *
 * Every method of cpu/ has a kernel here and its CPU function is the oracle the GPU test suite
 * compares against: the fir family gives the same bytes (exact integer sums), the others stay
 * within 1 level. The coefficients come from cpu/ so both backends filter with the same
 * numbers. */
#ifndef BLURD_GPU_H
#define BLURD_GPU_H

#include "../cpu/cpu.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gpu_status {
  GPU_OK = 0,
  GPU_NO_MEMORY, /* device or pinned memory ran out: this job fails, the service carries on */
  GPU_ERROR,     /* another error that leaves the device usable */
  GPU_FATAL,     /* a sticky error (illegal address, launch failure): the device is lost */
};

/* Number of visible CUDA devices (CUDA_VISIBLE_DEVICES applies); 0 without a driver. */
int gpu_device_count(void);

struct gpu_device_info {
  char name[96];    /* "NVIDIA H200" */
  size_t mem_total; /* bytes */
  size_t mem_free;  /* bytes, when asked */
  int sm_count;
  int major, minor; /* compute capability */
};

/* Fills info for device dev. Returns 0, or -1. */
int gpu_device_info(int dev, struct gpu_device_info *info);

struct gpu_ctx;

/* A context on device dev: a stream, events, and empty buffers. Returns NULL with a sentence in
 * err on failure. */
struct gpu_ctx *gpu_ctx_new(int dev, char *err, size_t errlen);
/* Frees ctx and its buffers; ctx may be NULL. */
void gpu_ctx_free(struct gpu_ctx *ctx);
/* "cuda:0 NVIDIA H200" */
const char *gpu_ctx_name(const struct gpu_ctx *ctx);
/* Device bytes this context holds. */
size_t gpu_ctx_bytes(const struct gpu_ctx *ctx);

struct gpu_times {  /* milliseconds, from CUDA events on the context's stream */
  double upload;    /* host to device, from pinned staging */
  double kernel;    /* the method's kernels */
  double reference; /* the exact reference and the PSNR, on the GPU; 0 when not asked for */
  double download;  /* device to host */
};

/* Blurs src into dst (same shape, its own buffer) on ctx's device. When acc is not NULL the exact
 * reference is computed on the GPU too, and dst is measured against it as cpu_blur_image does.
 * When dst->data is NULL it is set to ctx's pinned staging buffer instead of copying the result
 * out of it; that buffer is valid until the next call on ctx. t may be NULL. */
enum gpu_status gpu_blur(struct gpu_ctx *ctx, const struct cpu_blur *b, const struct cpu_image *src,
                         struct cpu_image *dst, struct cpu_accuracy *acc, struct gpu_times *t);

/* For benchmarks: uploads src once, runs the method's kernels reps times and stores the median
 * kernel time (CUDA events) in *ms. Nothing is downloaded. */
enum gpu_status gpu_bench(struct gpu_ctx *ctx, const struct cpu_blur *b,
                          const struct cpu_image *src, int reps, double *ms);

/* The method `auto` stands for on the GPU: the fastest one that reaches 48 dB for this sigma
 * and image size (README, "auto"). */
enum cpu_method gpu_auto_method(double sigma, int width, int height);

/* yvv and yvv2way on 8-bit images run in single precision up to this sigma and in double above
 * it, where their direct forms in single precision drift more than a level from the CPU twin
 * (measured by tests/gpu_check.c; README). yvv_blocked (a cascade) and deriche (two sections in
 * delta form) stay in single precision at every sigma. 16-bit images always use double. */
#define GPU_FLOAT_SIGMA_MAX 20.0

/* ---- local statistics, contrast and convolution (the twins of cpu_variance,
 * cpu_contrast_image and cpu_convolve_image; same arguments and conventions) ---- */

/* Local mean (when mean is not NULL) and variance of the gray plane src on ctx's device, into
 * host arrays of width*height doubles. exact gives the same bits as cpu_variance; the float32
 * methods stay within the tolerance tests/gpu_check.c states. t may be NULL (upload, kernel,
 * download are filled; reference is 0). */
enum gpu_status gpu_variance(struct gpu_ctx *ctx, const struct cpu_var *v,
                             const struct cpu_image *src, double *mean, double *var,
                             struct gpu_times *t);
/* cpu_contrast_image on the GPU: within one level of the CPU twin. */
enum gpu_status gpu_contrast(struct gpu_ctx *ctx, const struct cpu_contrast *c,
                             const struct cpu_image *src, struct cpu_image *dst,
                             struct gpu_times *t);
/* cpu_convolve_image on the GPU, a shared-memory tile with halo (seed 003): the same bytes. */
enum gpu_status gpu_convolve(struct gpu_ctx *ctx, const struct cpu_conv *c,
                             const struct cpu_image *src, struct cpu_image *dst,
                             struct gpu_times *t);
/* For benchmarks: uploads src once, runs the variance kernels reps times and stores the median
 * kernel time (CUDA events) in *ms. */
enum gpu_status gpu_variance_bench(struct gpu_ctx *ctx, const struct cpu_var *v,
                                   const struct cpu_image *src, int reps, double *ms);

/* Tests only: launches a kernel that writes through an invalid address, which leaves ctx's
 * device with a sticky error (cudaErrorIllegalAddress) for the rest of the process. */
enum gpu_status gpu_inject_fault(struct gpu_ctx *ctx);

/* A sentence for the last error of ctx. */
const char *gpu_ctx_error(const struct gpu_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif

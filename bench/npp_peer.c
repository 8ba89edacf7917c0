/* NPP peer for the benchmark. NPP is on the GPU machine only, so bench/run.sh builds this file
 * there (nvcc npp_peer.c -lnppif -lnppc). It times NVIDIA's Gaussian filters on RGBA8 images
 * with a replicated border, like blurd's kernels: nppiFilterGaussBorder_8u_C4R_Ctx with its
 * fixed masks (3x3 to 15x15) and nppiFilterGaussAdvancedBorder_8u_C4R_Ctx with the sampled
 * Gaussian of blurd's reference (radius ceil(4 sigma)), CUDA events around each call, median of
 * the repetitions after a warm-up. A spot check against a CPU computation of the same kernel
 * confirms the advanced filter really ran. CSV on stdout: size,method,sigma,ms,gpix_s.
 *
 * Usage: npp_peer [sizes (1920x1080,3840x2160,8192x8192)] [sigmas (1,2,3,12,40,100)] */
#include <cuda_runtime.h>
#include <math.h>
#include <npp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static NppStreamContext context(cudaStream_t s) {
  NppStreamContext c;
  struct cudaDeviceProp p;
  int dev = 0;
  memset(&c, 0, sizeof(c));
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&p, dev);
  c.hStream = s;
  c.nCudaDeviceId = dev;
  c.nMultiProcessorCount = p.multiProcessorCount;
  c.nMaxThreadsPerMultiProcessor = p.maxThreadsPerMultiProcessor;
  c.nMaxThreadsPerBlock = p.maxThreadsPerBlock;
  c.nSharedMemPerBlock = p.sharedMemPerBlock;
  c.nCudaDevAttrComputeCapabilityMajor = p.major;
  c.nCudaDevAttrComputeCapabilityMinor = p.minor;
  cudaStreamGetFlags(s, &c.nStreamFlags);
  return c;
}

static int cmp(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

struct job {
  Npp8u *src, *dst;
  int w, h, step, taps;
  NppiMaskSize mask;
  const Npp32f *kernel; /* device memory */
  NppStreamContext ctx;
};

static NppStatus run(const struct job *j) {
  NppiSize size = {j->w, j->h};
  NppiPoint origin = {0, 0};
  if (j->kernel)
    return nppiFilterGaussAdvancedBorder_8u_C4R_Ctx(j->src, j->step, size, origin, j->dst, j->step,
                                                    size, j->taps, j->kernel, NPP_BORDER_REPLICATE,
                                                    j->ctx);
  return nppiFilterGaussBorder_8u_C4R_Ctx(j->src, j->step, size, origin, j->dst, j->step, size,
                                          j->mask, NPP_BORDER_REPLICATE, j->ctx);
}

/* Median time of reps calls, or -1 (NPP refused; the status is printed). */
static double time_it(const struct job *j, int reps) {
  cudaEvent_t a, b;
  float t[32];
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  NppStatus st = run(j); /* warm-up */
  cudaStreamSynchronize(j->ctx.hStream);
  if (st != NPP_SUCCESS) {
    fprintf(stderr, "npp_peer: status %d\n", (int)st);
    return -1;
  }
  for (int i = 0; i < reps; i++) {
    cudaEventRecord(a, j->ctx.hStream);
    run(j);
    cudaEventRecord(b, j->ctx.hStream);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&t[i], a, b);
  }
  qsort(t, (size_t)reps, sizeof(float), cmp);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[reps / 2];
}

/* The advanced filter at pixel (x, y), channel 0, computed on the CPU: the spot check. */
static double cpu_pixel(const unsigned char *img, int w, int h, const float *k, int r, int x,
                        int y) {
  double acc = 0;
  for (int i = -r; i <= r; i++) {
    int yy = y + i < 0 ? 0 : y + i >= h ? h - 1 : y + i;
    double row = 0;
    for (int jj = -r; jj <= r; jj++) {
      int xx = x + jj < 0 ? 0 : x + jj >= w ? w - 1 : x + jj;
      row += k[jj + r] * img[((size_t)yy * w + xx) * 4];
    }
    acc += k[i + r] * row;
  }
  return acc;
}

int main(int argc, char **argv) {
  const char *sizes = argc > 1 ? argv[1] : "1920x1080,3840x2160,8192x8192";
  const char *sig = argc > 2 ? argv[2] : "1,2,3,12,40,100";
  cudaStream_t s;
  cudaStreamCreate(&s);
  printf("size,method,sigma,ms,gpix_s\n");
  for (const char *p = sizes; *p;) {
    int w, h, used = 0;
    if (sscanf(p, "%dx%d%n", &w, &h, &used) != 2) break;
    p += used + (p[used] == ',');
    size_t bytes = (size_t)w * h * 4;
    unsigned char *host = malloc(bytes), *back = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) host[i] = (unsigned char)((i * 2654435761u) >> 24);
    struct job j = {NULL, NULL, w, h, w * 4, 0, NPP_MASK_SIZE_3_X_3, NULL, context(s)};
    cudaMalloc((void **)&j.src, bytes);
    cudaMalloc((void **)&j.dst, bytes);
    cudaMemcpy(j.src, host, bytes, cudaMemcpyHostToDevice);
    const NppiMaskSize masks[] = {
        NPP_MASK_SIZE_3_X_3,   NPP_MASK_SIZE_5_X_5,   NPP_MASK_SIZE_7_X_7,  NPP_MASK_SIZE_9_X_9,
        NPP_MASK_SIZE_11_X_11, NPP_MASK_SIZE_13_X_13, NPP_MASK_SIZE_15_X_15};
    for (int m = 0; m < 7; m++) {
      j.mask = masks[m];
      double ms = time_it(&j, 10);
      printf("%dx%d,npp_gauss_border_%dx%d,mask,%.4f,%.2f\n", w, h, 3 + 2 * m, 3 + 2 * m, ms,
             ms > 0 ? (double)w * h / (ms * 1e6) : 0);
    }
    for (const char *q = sig; *q;) {
      char *end;
      double sigma = strtod(q, &end);
      q = *end ? end + 1 : end;
      int r = (int)ceil(4 * sigma), taps = 2 * r + 1;
      float *k = malloc(sizeof(float) * (size_t)taps), sum = 0;
      for (int i = -r; i <= r; i++) sum += k[i + r] = (float)exp(-0.5 * i * i / (sigma * sigma));
      for (int i = 0; i < taps; i++) k[i] /= sum;
      float *d_k;
      cudaMalloc((void **)&d_k, sizeof(float) * (size_t)taps);
      cudaMemcpy(d_k, k, sizeof(float) * (size_t)taps, cudaMemcpyHostToDevice);
      j.kernel = d_k, j.taps = taps;
      double work = (double)taps * taps * w * h; /* budget the slow direct filter */
      double ms = time_it(&j, work > 5e12 ? 1 : work > 5e11 ? 3 : 10);
      cudaMemcpy(back, j.dst, bytes, cudaMemcpyDeviceToHost);
      double want = cpu_pixel(host, w, h, k, r, w / 2, h / 2);
      int got = back[((size_t)(h / 2) * w + w / 2) * 4];
      printf("%dx%d,npp_gauss_advanced_border_%dtaps,%g,%.4f,%.2f\n", w, h, taps, sigma, ms,
             ms > 0 ? (double)w * h / (ms * 1e6) : 0);
      fprintf(stderr, "npp_peer: %dx%d sigma %g: spot check %d vs %.2f (%s)\n", w, h, sigma, got,
              want, fabs(got - want) <= 1.5 ? "ok" : "MISMATCH");
      fflush(stdout);
      cudaFree(d_k);
      free(k);
      j.kernel = NULL;
    }
    cudaFree(j.src);
    cudaFree(j.dst);
    free(host);
    free(back);
  }
  return 0;
}

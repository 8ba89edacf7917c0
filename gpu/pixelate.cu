/* /pixelate on the device, bit for bit cpu/pixelate.c's cpu_pixelate: the block sums are exact
 * integers (their order does not matter), the means are rounded with the same integer divisions,
 * and the regions' blend is cpu_blend_box's double operations in the same order (blend_weight,
 * no fused multiply-adds). Three kernels: each thread of row_sums adds one row of one block,
 * each of block_means adds a block's rows and rounds, and mosaic_kernel writes every pixel, its
 * block's mean or, with regions, the input blended towards it region after region. Blocks of up
 * to PIX_DIRECT_MAX pixels a side skip row_sums. */
#include "gpu_int.cuh"

#include <stdio.h>

#define PIX_LANES      4 /* sums per block row: colour (times alpha where there is alpha), alpha */
#define PIX_DIRECT_MAX 8 /* blocks up to this side are summed pixel by pixel by one thread */

/* Adds the pixel whose samples start at i to the block sums s: colour times alpha and alpha where
 * there is alpha, the samples otherwise (cpu/pixelate.c's block_mean). */
__device__ __forceinline__ void add_pixel(const packed &in, size_t i, unsigned long long s[4]) {
  int c = in.c, alpha = c == 2 || c == 4, colours = alpha ? c - 1 : c;
  unsigned long long a = alpha ? raw_sample(in, i + c - 1) : 1;
  for (int k = 0; k < colours; k++) s[k] += raw_sample(in, i + k) * a;
  if (alpha) s[c - 1] += a;
}

/* The samples of row y of block column bx added up into rows[(y * nbx + bx) * 4 + lane]: colour
 * times alpha and alpha itself where there is alpha, plain sums otherwise. */
__global__ void row_sums(packed in, int block, int nbx, unsigned long long *rows) {
  int bx = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (bx >= nbx || y >= in.h) return;
  int x0 = bx * block, x1 = min(x0 + block, in.w);
  unsigned long long s[PIX_LANES] = {0, 0, 0, 0};
  for (int x = x0; x < x1; x++) add_pixel(in, ((size_t)y * in.w + x) * in.c, s);
  unsigned long long *r = rows + ((size_t)y * nbx + bx) * PIX_LANES;
  for (int k = 0; k < PIX_LANES; k++) r[k] = s[k];
}

/* Block (bx, by)'s mean, rounded half up as cpu/pixelate.c's block_mean, into means: from the
 * sums of its rows, or (rows NULL) from its pixels. */
__global__ void block_means(packed in, int block, int nbx, int nby, const unsigned long long *rows,
                            uint4 *means) {
  int bx = blockIdx.x * blockDim.x + threadIdx.x, by = blockIdx.y * blockDim.y + threadIdx.y;
  if (bx >= nbx || by >= nby) return;
  int c = in.c, alpha = c == 2 || c == 4, colours = alpha ? c - 1 : c;
  int y0 = by * block, y1 = min(y0 + block, in.h), x0 = bx * block, x1 = min(x0 + block, in.w);
  unsigned long long s[PIX_LANES] = {0, 0, 0, 0};
  for (int y = y0; y < y1 && rows; y++)
    for (int k = 0; k < PIX_LANES; k++) s[k] += rows[((size_t)y * nbx + bx) * PIX_LANES + k];
  for (int y = y0; y < y1 && !rows; y++)
    for (int x = x0; x < x1; x++) add_pixel(in, ((size_t)y * in.w + x) * in.c, s);
  unsigned long long n = (unsigned long long)(x1 - x0) * (y1 - y0);
  unsigned long long sa = alpha ? s[c - 1] : 0;
  unsigned q[4] = {0, 0, 0, 0};
  for (int k = 0; k < colours; k++)
    q[k] = alpha ? (sa ? (unsigned)((2 * s[k] + sa) / (2 * sa)) : 0)
                 : (unsigned)((2 * s[k] + n) / (2 * n));
  if (alpha) q[c - 1] = (unsigned)((2 * sa + n) / (2 * n));
  means[(size_t)by * nbx + bx] = make_uint4(q[0], q[1], q[2], q[3]);
}

struct pix_regions { /* the regions (x0, y0, x1, y1, exclusive ends), blended in order */
  int4 rect[GPU_REGIONS_MAX];
  int n, feather;
};

/* Pixel (x, y): its block's mean, or with regions the input blended towards it as
 * cpu_blend_box blends, one region after the other. */
__global__ void mosaic_kernel(packed in, packed out, int block, int nbx, const uint4 *means,
                              const __grid_constant__ pix_regions r) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= in.w || y >= in.h) return;
  uint4 m4 = means[(size_t)(y / block) * nbx + x / block];
  double q[4] = {(double)m4.x, (double)m4.y, (double)m4.z, (double)m4.w}, v[4] = {0, 0, 0, 0};
  double peak = (1 << in.depth) - 1;
  size_t i = ((size_t)y * in.w + x) * in.c;
  for (int k = 0; k < in.c; k++) v[k] = r.n ? (double)raw_sample(in, i + k) : q[k];
  for (int j = 0; j < r.n; j++) {
    double m = blend_weight(x, y, r.rect[j], r.feather);
    if (m <= 0) continue;
    for (int k = 0; k < in.c; k++) {
      if (m == 1) {
        v[k] = q[k];
        continue;
      }
      double o = floor(__dadd_rn(__dadd_rn(v[k], __dmul_rn(m, __dsub_rn(q[k], v[k]))), 0.5));
      v[k] = o < 0 ? 0 : o > peak ? peak : o;
    }
  }
  for (int k = 0; k < in.c; k++) {
    if (in.depth == 16)
      ((uint16_t *)out.p)[i + k] = (uint16_t)v[k];
    else
      ((uint8_t *)out.p)[i + k] = (uint8_t)v[k];
  }
}

static cudaError_t launch_row_sums(packed in, int block, int nbx, unsigned long long *rows,
                                   cudaStream_t s) {
  dim3 t(32, 8), g(div_up(nbx, 32), div_up(in.h, 8));
  row_sums<<<g, t, 0, s>>>(in, block, nbx, rows);
  return cudaGetLastError();
}

static cudaError_t launch_block_means(packed in, int block, int nbx, int nby,
                                      const unsigned long long *rows, uint4 *means,
                                      cudaStream_t s) {
  dim3 t(32, 8), g(div_up(nbx, 32), div_up(nby, 8));
  block_means<<<g, t, 0, s>>>(in, block, nbx, nby, rows, means);
  return cudaGetLastError();
}

static cudaError_t launch_mosaic(packed in, packed out, int block, int nbx, const uint4 *means,
                                 const pix_regions &r, cudaStream_t s) {
  dim3 t(32, 8), g(div_up(in.w, 32), div_up(in.h, 8));
  mosaic_kernel<<<g, t, 0, s>>>(in, out, block, nbx, means, r);
  return cudaGetLastError();
}

/* The regions as the kernel takes them; GPU_ERROR past GPU_REGIONS_MAX. */
static enum gpu_status regions_of(struct gpu_ctx *ctx, const int (*rect)[4], int n, int feather,
                                  pix_regions *r) {
  if (n < 0 || n > GPU_REGIONS_MAX || feather < 0) {
    snprintf(ctx->err, sizeof(ctx->err), "pixelate: %d regions (at most %d), feather %d", n,
             GPU_REGIONS_MAX, feather);
    return GPU_ERROR;
  }
  r->n = n, r->feather = feather;
  for (int i = 0; i < n; i++)
    r->rect[i] = make_int4(rect[i][0], rect[i][1], rect[i][2], rect[i][3]);
  return GPU_OK;
}

enum gpu_status gpu_pixelate_resident(struct gpu_ctx *ctx, const struct cpu_pixelate *p,
                                      const struct cpu_image *img, const int (*rect)[4], int n,
                                      int feather, struct gpu_times *t) {
  if ((img->depth != 8 && img->depth != 16) || img->channels < 1 || img->channels > 4 ||
      img->width < 1 || img->height < 1 || p->block < 1) {
    snprintf(ctx->err, sizeof(ctx->err),
             "pixelate takes 1 to 4 channels of 8 or 16 bits, block >= 1");
    return GPU_ERROR;
  }
  pix_regions r;
  enum gpu_status st = regions_of(ctx, rect, n, feather, &r);
  int nbx = (img->width + p->block - 1) / p->block, nby = (img->height + p->block - 1) / p->block;
  /* Small blocks are summed by one thread each; larger ones a row per thread first, in at most
   * 32 bytes per 9 pixels. */
  int by_rows = p->block > PIX_DIRECT_MAX;
  size_t rows = by_rows ? (size_t)nbx * img->height * PIX_LANES * sizeof(unsigned long long) : 16;
  size_t means = (size_t)nbx * nby * sizeof(uint4);
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  if (st == GPU_OK) st = grow(ctx, &ctx->d_out, &ctx->out_cap, cpu_image_bytes(img));
  if (st == GPU_OK) st = scratch_grow(ctx, SLOT_OP + 0, rows);
  if (st == GPU_OK) st = scratch_grow(ctx, SLOT_OP + 1, means);
  if (st != GPU_OK) return st;
  packed in = packed_of(ctx->d_in, img), out = packed_of(ctx->d_out, img);
  unsigned long long *d_rows = (unsigned long long *)ctx->scratch[SLOT_OP + 0].p;
  uint4 *d_means = (uint4 *)ctx->scratch[SLOT_OP + 1].p;
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s));
  if (by_rows) CUDA_TRY(ctx, launch_row_sums(in, p->block, nbx, d_rows, ctx->s));
  CUDA_TRY(ctx,
           launch_block_means(in, p->block, nbx, nby, by_rows ? d_rows : NULL, d_means, ctx->s));
  CUDA_TRY(ctx, launch_mosaic(in, out, p->block, nbx, d_means, r, ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_FILTERED], ctx->s));
  CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_FILTERED])); /* a blocking-sync event */
  if (t) t->kernel = elapsed(ctx, EV_UPLOADED, EV_FILTERED), t->reference = 0;
  return GPU_OK;
}

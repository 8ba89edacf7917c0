/* Region blur on the device: each region's box is blurred by the method's own kernels (and
 * measured against the exact reference) and blended into the image by blend_kernel, the twin of
 * cpu/compose.c's cpu_blend_box. pyramid, `auto` from sigma 12, reads the boxes where they lie in
 * the image, all of them in each of its launches, and without the PSNR blurs only each region's
 * window and blends it as it expands it; the other methods take each box cut out of the image,
 * one after the other. Nothing leaves the device, so the answer can be encoded there too. */
#include "gpu_int.cuh"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>

/* A region's blend: its box (bx, by, bw wide), the region and its window (region_window). */
struct blend_item {
  const void *box;
  int bx, by, bw;
  int4 rect, win;
};
#define BLEND_BATCH 16 /* regions a launch blends, when their windows do not overlap */
struct blend_batch {
  blend_item it[BLEND_BATCH];
  int n;
};

/* Pixel (x, y) of dst blended with region blockIdx.z's box: cpu_blend_box's formula. */
template <class T>
__global__ void blend_kernel(packed dst, const __grid_constant__ blend_batch b, int feather) {
  const blend_item it = b.it[blockIdx.z];
  int x = it.win.x + blockIdx.x * blockDim.x + threadIdx.x,
      y = it.win.y + blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= it.win.z || y >= it.win.w) return;
  double m = blend_weight(x, y, it.rect, feather);
  if (m <= 0) return;
  const T *p = (const T *)it.box + ((size_t)(y - it.by) * it.bw + x - it.bx) * dst.c;
  unsigned q[4];
#pragma unroll
  for (int k = 0; k < 4; k++) q[k] = k < dst.c ? p[k] : 0;
  blend_px(dst, x, y, q, m);
}

static cudaError_t launch_blend(void *dst, const struct cpu_image *img, const blend_batch &b,
                                int feather, cudaStream_t s) {
  if (b.n == 0) return cudaSuccess;
  int w = 0, h = 0;
  for (int i = 0; i < b.n; i++)
    w = max(w, b.it[i].win.z - b.it[i].win.x), h = max(h, b.it[i].win.w - b.it[i].win.y);
  dim3 block(32, 8), grid(div_up(w, 32), div_up(h, 8), b.n);
  if (img->depth == 8)
    blend_kernel<uint8_t><<<grid, block, 0, s>>>(packed_of(dst, img), b, feather);
  else
    blend_kernel<uint16_t><<<grid, block, 0, s>>>(packed_of(dst, img), b, feather);
  return cudaGetLastError();
}

/* Regions r[0..n) blended into dst in order, their boxes at box + at[i]: a launch for each run of
 * regions whose windows do not overlap (their order does not matter there). */
static cudaError_t blend_all(void *dst, const struct cpu_image *img, const struct gpu_region *r,
                             int n, const char *box, const size_t *at, int feather,
                             cudaStream_t s) {
  blend_batch b;
  b.n = 0;
  for (int i = 0; i < n; i++) {
    blend_item it = {box + at[i],
                     r[i].box[0],
                     r[i].box[1],
                     r[i].box[2],
                     make_int4(r[i].rect[0], r[i].rect[1], r[i].rect[2], r[i].rect[3]),
                     region_window(&r[i], feather)};
    if (it.win.x >= it.win.z || it.win.y >= it.win.w) continue;
    bool overlaps = b.n == BLEND_BATCH;
    for (int j = 0; j < b.n && !overlaps; j++) overlaps = rects_overlap(it.win, b.it[j].win);
    if (overlaps) {
      cudaError_t e = launch_blend(dst, img, b, feather, s);
      if (e != cudaSuccess) return e;
      b.n = 0;
    }
    b.it[b.n++] = it;
  }
  return launch_blend(dst, img, b, feather, s);
}

static void swap_buffers(void **a, size_t *acap, void **b, size_t *bcap) {
  void *p = *a;
  size_t n = *acap;
  *a = *b, *acap = *bcap;
  *b = p, *bcap = n;
}

/* Box r as an image of img's pixel format, without pixels. */
static struct cpu_image box_of(const struct cpu_image *img, const struct gpu_region *r) {
  return (struct cpu_image){NULL, r->box[2], r->box[3], img->channels, img->depth};
}

/* The bytes of box r's pixels, rounded up so that the next box starts aligned for any kernel. */
static size_t box_bytes(const struct cpu_image *img, const struct gpu_region *r) {
  struct cpu_image box = box_of(img, r);
  return (cpu_image_bytes(&box) + 255) / 256 * 256;
}

/* One region blur's settings, for blur_batch. */
struct boxes {
  const struct cpu_blur *b;
  const struct cpu_image *img;
  const struct gpu_region *r;
  int feather;
  int batched;                 /* pyramid's kernels take all the boxes at once */
  struct cpu_pyramid pyx, pyy; /* its parameters, when batched */
  int measure;                 /* the PSNR of each box */
  void *dst;                   /* where the blends go: the WHOLE slot or RES */
};

/* Regions i0 to i1 of bx, their boxes side by side in d_in and d_out at at[i - i0]: cut from the
 * image, blurred, blended into bx->dst, then measured; adds the kernels' and the references' ms to
 * *kernel and *reference. Waits for the GPU. */
static enum gpu_status blur_batch(struct gpu_ctx *ctx, const struct boxes *bx, int i0, int i1,
                                  const size_t *at, double *kernel, double *reference) {
  const struct cpu_image *img = bx->img;
  const struct gpu_region *r = bx->r;
  const void *whole = ctx->scratch[SLOT_WHOLE].p;
  size_t px = (size_t)img->channels * (img->depth / 8);
  enum gpu_status st = grow_images(ctx, at[i1 - i0]);
  if (st != GPU_OK) return st;
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s));
  for (int i = i0; i < i1 && (bx->measure || !bx->batched); i++) /* the reference reads the boxes */
    CUDA_TRY(ctx, cudaMemcpy2DAsync((char *)ctx->d_in + at[i - i0], r[i].box[2] * px,
                                    (const char *)whole +
                                        ((size_t)r[i].box[1] * img->width + r[i].box[0]) * px,
                                    img->width * px, r[i].box[2] * px, r[i].box[3],
                                    cudaMemcpyDeviceToDevice, ctx->s));
  if (bx->batched)
    st = run_pyramid_boxes(ctx, &bx->pyx, &bx->pyy, img, whole, r + i0, i1 - i0, ctx->d_out, at);
  for (int i = i0; !bx->batched && i < i1 && st == GPU_OK; i++) {
    struct cpu_image box = box_of(img, &r[i]);
    st = run_method(ctx, bx->b, &box, (char *)ctx->d_in + at[i - i0],
                    (char *)ctx->d_out + at[i - i0]);
  }
  if (st != GPU_OK) return st;
  CUDA_TRY(ctx, blend_all(bx->dst, img, r + i0, i1 - i0, (const char *)ctx->d_out, at, bx->feather,
                          ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_FILTERED], ctx->s));
  for (int i = i0; bx->measure && i < i1; i++) {
    struct cpu_image box = box_of(img, &r[i]);
    st = run_reference(ctx, bx->b->sigma_x, bx->b->sigma_y, &box, (char *)ctx->d_in + at[i - i0],
                       (char *)ctx->d_out + at[i - i0], ctx->d_stats + 2 * i);
    if (st != GPU_OK) return st;
  }
  if (bx->measure)
    CUDA_TRY(ctx, cudaMemcpyAsync(ctx->h_stats + 2 * i0, ctx->d_stats + 2 * i0,
                                  2 * (i1 - i0) * sizeof(double), cudaMemcpyDeviceToHost, ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_MEASURED], ctx->s));
  CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_MEASURED]));
  *kernel += elapsed(ctx, i0 ? EV_UPLOADED : EV_START, EV_FILTERED);
  *reference += elapsed(ctx, EV_FILTERED, EV_MEASURED);
  return GPU_OK;
}

enum gpu_status gpu_blur_regions(struct gpu_ctx *ctx, const struct cpu_blur *b,
                                 const struct cpu_image *img, const struct gpu_region *r, int n,
                                 int feather, struct cpu_accuracy *acc, struct gpu_times *t) {
  size_t bytes = cpu_image_bytes(img);
  if (n > GPU_REGIONS_MAX) {
    snprintf(ctx->err, sizeof(ctx->err), "%d regions, more than %d", n, GPU_REGIONS_MAX);
    return GPU_ERROR;
  }
  /* The image moves aside to the WHOLE slot. pyramid without the PSNR, for at most PYR_BATCH
   * regions, blurs only their windows and blends them there as it expands them
   * (run_pyramid_windows). Otherwise d_in and d_out hold the boxes side by side, as many at a time
   * as fit in the image's bytes (blur_batch), with no wait between boxes. The boxes are blurred
   * from the input (overlapping regions blur the input): when they all fit at once they are all
   * blurred before the first blend, which then goes into the WHOLE slot itself; otherwise into
   * RES, a copy of it. */
  struct boxes bx = {b, img, r, feather, 0, {}, {}, acc != NULL, NULL};
  bx.batched = pyramid_reduces(b, &bx.pyx, &bx.pyy); /* all the boxes in each launch */
  int windows = bx.batched && !acc && n <= PYR_BATCH;
  size_t all = 0;
  for (int i = 0; i < n; i++) all += box_bytes(img, &r[i]);
  int in_place = all <= bytes;
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = scratch_grow(ctx, SLOT_WHOLE, bytes);
  if (st != GPU_OK) return st;
  swap_buffers(&ctx->d_in, &ctx->in_cap, &ctx->scratch[SLOT_WHOLE].p,
               &ctx->scratch[SLOT_WHOLE].cap);
  double kernel = 0, reference = 0;
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_START], ctx->s));
  if (windows) {
    st = run_pyramid_windows(ctx, &bx.pyx, &bx.pyy, img, ctx->scratch[SLOT_WHOLE].p, r, n, feather,
                             &windows);
    if (st != GPU_OK) return st;
    in_place = in_place || windows;
    CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_FILTERED], ctx->s));
    CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_FILTERED]));
    kernel = elapsed(ctx, EV_START, EV_FILTERED);
  }
  if (!in_place) {
    if ((st = scratch_grow(ctx, SLOT_RES, bytes)) != GPU_OK) return st;
    CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_START], ctx->s));
    CUDA_TRY(ctx, cudaMemcpyAsync(ctx->scratch[SLOT_RES].p, ctx->scratch[SLOT_WHOLE].p, bytes,
                                  cudaMemcpyDeviceToDevice, ctx->s));
  }
  int into = in_place ? SLOT_WHOLE : SLOT_RES;
  bx.dst = ctx->scratch[into].p;
  for (int i0 = 0, i1; !windows && i0 < n; i0 = i1) {
    size_t at[GPU_REGIONS_MAX + 1] = {0}; /* box i at at[i - i0] */
    for (i1 = i0; i1 < n && (i1 == i0 || at[i1 - i0] + box_bytes(img, &r[i1]) <= bytes); i1++)
      at[i1 - i0 + 1] = at[i1 - i0] + box_bytes(img, &r[i1]);
    if ((st = blur_batch(ctx, &bx, i0, i1, at, &kernel, &reference)) != GPU_OK) return st;
  }
  swap_buffers(&ctx->d_out, &ctx->out_cap, &ctx->scratch[into].p, &ctx->scratch[into].cap);
  for (int i = 0; acc && i < n; i++) {
    struct cpu_image box = box_of(img, &r[i]);
    accuracy_of(&box, ctx->h_stats + 2 * i, &acc[i]);
  }
  if (t) {
    t->kernel = kernel;
    t->reference = acc ? reference : 0;
  }
  return GPU_OK;
}

enum gpu_status gpu_bench_regions(struct gpu_ctx *ctx, const struct cpu_blur *b,
                                  const struct cpu_image *src, const struct gpu_region *r, int n,
                                  int feather, int reps, double ms[4]) {
  double *t = (double *)calloc(4 * (size_t)reps, sizeof(double)); /* ms[k]'s at t + k reps */
  if (!t) return GPU_NO_MEMORY;
  struct cpu_pyramid px, py;
  int windows = pyramid_reduces(b, &px, &py) && n <= PYR_BATCH;
  enum gpu_status st = gpu_upload(ctx, src, NULL);
  for (int i = -2; st == GPU_OK && i < reps; i++) {
    struct gpu_times g;
    if ((st = gpu_blur_regions(ctx, b, src, r, n, feather, NULL, &g)) != GPU_OK) break;
    double one = g.kernel;
    if ((st = gpu_blur_resident(ctx, b, src, NULL, &g)) != GPU_OK) break;
    st = status_of(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s), "event");
    for (int k = 0; windows && k < 3 && st == GPU_OK; k++)
      st = run_pyramid_windows(ctx, &px, &py, src, ctx->d_in, r, n, feather, &windows);
    if (st == GPU_OK) st = status_of(ctx, cudaEventRecord(ctx->ev[EV_FILTERED], ctx->s), "event");
    for (int k = 0; k < 3 && st == GPU_OK; k++) st = run_method(ctx, b, src, ctx->d_in, ctx->d_out);
    if (st == GPU_OK) st = status_of(ctx, cudaEventRecord(ctx->ev[EV_MEASURED], ctx->s), "event");
    if (st == GPU_OK) st = status_of(ctx, cudaEventSynchronize(ctx->ev[EV_MEASURED]), "kernels");
    if (st == GPU_OK && i >= 0) {
      t[i] = one, t[reps + i] = g.kernel;
      t[2 * reps + i] = windows ? elapsed(ctx, EV_UPLOADED, EV_FILTERED) / 3 : -1;
      t[3 * reps + i] = elapsed(ctx, EV_FILTERED, EV_MEASURED) / 3;
    }
  }
  for (int k = 0; st == GPU_OK && k < 4; k++) {
    qsort(t + k * reps, (size_t)reps, sizeof(double), cmp_double);
    ms[k] = t[k * reps + reps / 2];
  }
  free(t);
  return st;
}

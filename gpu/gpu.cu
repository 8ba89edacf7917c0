/* The host side of the CUDA backend: devices, contexts (stream, events, pinned staging and
 * device buffers that only grow), one job as upload -> kernels -> reference -> download timed
 * with CUDA events, and the classification of CUDA errors into "this job failed" and "the
 * device is lost" (sticky errors, after which the process must be restarted: status.cu). */
#include "gpu_int.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gpu_device_count(void) {
  int n = 0;
  /* Every kernel loaded when CUDA starts, not at its first launch (CUDA 12's lazy loading): the
   * first request that needs a kernel the warm-up did not run is as fast as the next. A value the
   * user set stays. */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

/* Block rather than spin while waiting for the GPU: the worker's CPU time goes to the codecs of
 * other requests (the default spins when there are more cores than contexts). A failure to set
 * the flag only costs CPU time, so it is not an error. */
int gpu_device_open(int dev) {
  if (cudaSetDevice(dev) != cudaSuccess) return -1;
  if (cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) != cudaSuccess) cudaGetLastError();
  /* The pool that grow allocates from keeps what is freed, for the next worker that grows,
   * instead of giving it back to the driver at each synchronisation. */
  cudaMemPool_t pool;
  uint64_t keep = UINT64_MAX;
  if (cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess)
    cudaGetLastError();
  return cudaFree(0) == cudaSuccess ? 0
                                    : -1; /* the context is made at the first call that needs it */
}

int gpu_device_info(int dev, int with_free, struct gpu_device_info *info) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return -1;
  memset(info, 0, sizeof(*info));
  snprintf(info->name, sizeof(info->name), "%.95s", p.name);
  info->mem_total = p.totalGlobalMem;
  info->sm_count = p.multiProcessorCount;
  info->major = p.major, info->minor = p.minor;
  size_t fr = 0, tot = 0;
  if (with_free && cudaSetDevice(dev) == cudaSuccess && cudaMemGetInfo(&fr, &tot) == cudaSuccess)
    info->mem_free = fr;
  return 0;
}

struct gpu_ctx *gpu_ctx_new(int dev, char *err, size_t errlen) {
  struct gpu_ctx *ctx = (struct gpu_ctx *)calloc(1, sizeof(*ctx));
  struct gpu_device_info info;
  if (!ctx || gpu_device_info(dev, 0, &info) != 0) {
    snprintf(err, errlen, "cannot use CUDA device %d", dev);
    free(ctx);
    return NULL;
  }
  ctx->dev = dev;
  ctx->early = info.major >= 9;
  snprintf(ctx->name, sizeof(ctx->name), "cuda:%d %.96s", dev, info.name);
  const char *prec = getenv("BLURD_GPU_PRECISION");
  ctx->force_double = !prec                         ? 0
                      : strcmp(prec, "double") == 0 ? 1
                      : strcmp(prec, "float") == 0  ? -1
                                                    : 0;
  const char *ref = getenv("BLURD_PSNR_REFERENCE");
  ctx->ref_double = ref && strcmp(ref, "double") == 0;
  ctx->ref_int = info.major >= 8 && !(ref && strcmp(ref, "float") == 0);
  int ok = gpu_device_open(dev) == 0;
  ok = ok && cudaStreamCreateWithFlags(&ctx->s, cudaStreamNonBlocking) == cudaSuccess &&
       cudaMalloc(&ctx->d_stats, 2 * GPU_REGIONS_MAX * sizeof(double)) == cudaSuccess &&
       cudaMallocHost(&ctx->h_stats, 2 * GPU_REGIONS_MAX * sizeof(double)) == cudaSuccess;
  for (int i = 0; ok && i < NEV; i++)
    ok = cudaEventCreateWithFlags(&ctx->ev[i], cudaEventBlockingSync) == cudaSuccess;
  if (!ok) {
    snprintf(err, errlen, "%s: %s", ctx->name, cudaGetErrorString(cudaGetLastError()));
    gpu_ctx_free(ctx);
    return NULL;
  }
  return ctx;
}

void gpu_ctx_free(struct gpu_ctx *ctx) {
  if (!ctx) return;
  cudaSetDevice(ctx->dev);
  if (ctx->s) cudaStreamSynchronize(ctx->s);
  jpeg_ctx_free(ctx);
  void *dev_bufs[] = {ctx->d_in, ctx->d_out, ctx->d_w, ctx->d_stats};
  for (size_t i = 0; i < sizeof(dev_bufs) / sizeof(dev_bufs[0]); i++) cudaFree(dev_bufs[i]);
  for (int i = 0; i < GPU_SLOTS; i++) cudaFree(ctx->scratch[i].p);
  cudaFreeHost(ctx->h_in);
  cudaFreeHost(ctx->h_out);
  cudaFreeHost(ctx->h_stats);
  cudaFreeHost(ctx->h_vp8);
  free(ctx->h_w);
  free(ctx->ri_held);
  for (int i = 0; i < NEV; i++)
    if (ctx->ev[i]) cudaEventDestroy(ctx->ev[i]);
  if (ctx->s) cudaStreamDestroy(ctx->s);
  free(ctx);
}

const char *gpu_ctx_name(const struct gpu_ctx *ctx) {
  return ctx->name;
}

size_t gpu_ctx_bytes(const struct gpu_ctx *ctx) {
  return ctx->bytes;
}

const char *gpu_ctx_error(const struct gpu_ctx *ctx) {
  return ctx->err;
}

/* Makes *p hold at least need bytes of device memory (growing by a quarter, so that slightly
 * larger images do not reallocate every time). Stream-ordered, from the device's pool: the old
 * buffer is freed after the worker's stream is done with it, and nothing waits for the other
 * workers' streams, as cudaFree and cudaMalloc do (the first large images reached every worker
 * at once and stalled them all). The wait on this stream at the end lets other streams (the JPEG
 * decoder's) use the new buffer. */
enum gpu_status grow(struct gpu_ctx *ctx, void **p, size_t *cap, size_t need) {
  if (need <= *cap) return GPU_OK;
  if (*p) CUDA_TRY(ctx, cudaFreeAsync(*p, ctx->s));
  ctx->bytes -= *cap;
  *p = NULL, *cap = 0;
  size_t want = need + need / 4;
  if (cudaMallocAsync(p, want, ctx->s) != cudaSuccess) {
    cudaGetLastError();
    want = need;
    CUDA_TRY(ctx, cudaMallocAsync(p, want, ctx->s));
  }
  *cap = want;
  ctx->bytes += want;
  CUDA_TRY(ctx, cudaStreamSynchronize(ctx->s));
  return GPU_OK;
}

enum gpu_status scratch_grow(struct gpu_ctx *ctx, int slot, size_t need) {
  return grow(ctx, &ctx->scratch[slot].p, &ctx->scratch[slot].cap, need);
}

enum gpu_status grow_host(struct gpu_ctx *ctx, size_t need) {
  if (need <= ctx->h_cap) return GPU_OK;
  CUDA_TRY(ctx, cudaStreamSynchronize(ctx->s));
  cudaFreeHost(ctx->h_in);
  cudaFreeHost(ctx->h_out);
  ctx->h_in = ctx->h_out = NULL, ctx->h_cap = 0;
  size_t want = need + need / 4;
  CUDA_TRY(ctx, cudaMallocHost(&ctx->h_in, want));
  CUDA_TRY(ctx, cudaMallocHost(&ctx->h_out, want));
  ctx->h_cap = want;
  return GPU_OK;
}

/* The kernel buffer d_w has a slot per kernel, each large enough for the widest (radius
 * ceil(8 CPU_SIGMA_MAX), 8 bytes a tap): the method's along x and along y, then the
 * reference's. It is allocated whole at its first use, so a slot's address stays put while the
 * others are filled. */
static_assert(W_SLOTS == sizeof(((gpu_ctx *)0)->w_len) / sizeof(size_t), "a length per slot");

static size_t w_slot_bytes(void) { /* a multiple of 16: the integer reference reads uint4s */
  size_t n = 8 * (size_t)(cpu_gauss_radius(CPU_SIGMA_MAX, 8) + 1);
  static_assert(RI_TABLE_BYTES((16 + 2 * R32_RMAX + 31) / 32) <= 8 * (8 * CPU_SIGMA_MAX + 1),
                "the integer reference's widest table fits a slot");
  return (n + 15) / 16 * 16;
}

void *w_at(const struct gpu_ctx *ctx, enum w_slot slot) {
  return (char *)ctx->d_w + slot * w_slot_bytes();
}

/* Uploads n bytes of host data into slot, unless the slot's last upload was the same bytes (it
 * holds them by then, in the stream's order): a copy from pageable memory waits for the stream's
 * work before it, and the next request (or region) usually has the same kernels. h_w keeps what
 * each slot was given. */
enum gpu_status upload_w(struct gpu_ctx *ctx, enum w_slot slot, const void *data, size_t n) {
  if (n > w_slot_bytes()) {
    snprintf(ctx->err, sizeof(ctx->err), "a kernel of %zu bytes is wider than its slot", n);
    return GPU_ERROR;
  }
  enum gpu_status st = grow(ctx, &ctx->d_w, &ctx->w_cap, W_SLOTS * w_slot_bytes());
  if (st != GPU_OK) return st;
  if (!ctx->h_w && !(ctx->h_w = calloc(W_SLOTS, w_slot_bytes()))) return GPU_NO_MEMORY;
  char *held = (char *)ctx->h_w + slot * w_slot_bytes();
  if (ctx->w_len[slot] == n && memcmp(held, data, n) == 0) return GPU_OK;
  ctx->w_len[slot] = 0;
  ri_forget(ctx, slot);
  CUDA_TRY(ctx, cudaMemcpyAsync(w_at(ctx, slot), data, n, cudaMemcpyHostToDevice, ctx->s));
  memcpy(held, data, n);
  ctx->w_len[slot] = n;
  return GPU_OK;
}

/* Recursive filters run in double for 16-bit images (one level is 1/65535 there). On 8-bit
 * images yvv_blocked (a cascade) and deriche (two sections in delta form) run in single
 * precision at every sigma, yvv and yvv2way up to GPU_FLOAT_SIGMA_MAX on both axes (measured:
 * tests/gpu_check.c). */
static int use_double(const struct gpu_ctx *ctx, const struct cpu_blur *b, int depth) {
  if (ctx->force_double) return ctx->force_double > 0;
  return depth == 16 || ((b->method == CPU_YVV || b->method == CPU_YVV2WAY) &&
                         fmax(b->sigma_x, b->sigma_y) > GPU_FLOAT_SIGMA_MAX);
}

/* Under gpu_bench, the timing starts here, once the host has prepared the method's kernels
 * (coefficients, weights uploaded, buffers grown): the benchmark reports kernel time only. */
enum gpu_status kernels_start(struct gpu_ctx *ctx) {
  if (!ctx->bench) return GPU_OK;
  return status_of(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s), "event");
}

/* The fir family's integer kernel for sigma (radius ceil(truncate sigma), shift k) into slot;
 * its radius in *r. */
static enum gpu_status upload_fir(struct gpu_ctx *ctx, enum w_slot slot, double sigma,
                                  double truncate, int k, int *r) {
  *r = cpu_gauss_radius(sigma, truncate);
  uint32_t *a = (uint32_t *)malloc((size_t)(*r + 1) * sizeof(uint32_t));
  if (!a) return GPU_NO_MEMORY;
  cpu_fir_weights(sigma, *r, k, a);
  enum gpu_status st = upload_w(ctx, slot, a, (size_t)(*r + 1) * sizeof(uint32_t));
  free(a);
  return st;
}

static enum gpu_status run_fir(struct gpu_ctx *ctx, const struct cpu_blur *b, packed in,
                               packed out) {
  int alpha = in.c == 2 || in.c == 4, k = cpu_fir_shift(in.depth, alpha), rx, ry;
  enum gpu_status st = upload_fir(ctx, W_X, b->sigma_x, b->truncate, k, &rx);
  if (st == GPU_OK) st = upload_fir(ctx, W_Y, b->sigma_y, b->truncate, k, &ry);
  if (st != GPU_OK || (st = kernels_start(ctx)) != GPU_OK) return st;
  return status_of(ctx,
                   launch_fir(b->method - CPU_FIR, in, out, (const uint32_t *)w_at(ctx, W_X), rx,
                              (const uint32_t *)w_at(ctx, W_Y), ry, k, ctx->s),
                   "fir kernels");
}

/* The sampled Gaussian of sigma, w[0..r], into slot in single precision. */
static enum gpu_status upload_gauss(struct gpu_ctx *ctx, enum w_slot slot, double sigma, int r) {
  double *w = (double *)malloc((size_t)(r + 1) * sizeof(double));
  float *wf = (float *)malloc((size_t)(r + 1) * sizeof(float));
  enum gpu_status st = w && wf ? GPU_OK : GPU_NO_MEMORY;
  if (st == GPU_OK) {
    cpu_gauss_kernel(sigma, r, w);
    for (int i = 0; i <= r; i++) wf[i] = (float)w[i];
    st = upload_w(ctx, slot, wf, (size_t)(r + 1) * sizeof(float));
  }
  free(w);
  free(wf);
  return st;
}

/* separable: in integers on the tensor cores where gpu_separable_exact says so (the integer
 * reference's passes, each output rounded from it and measured in the same pass: ctx->sep_e),
 * else in single or double precision. */
static enum gpu_status run_separable(struct gpu_ctx *ctx, const struct cpu_blur *b, packed in,
                                     packed out, mid m) {
  struct cpu_image shape = {NULL, in.w, in.h, in.c, in.depth};
  if (gpu_separable_exact(ctx, b, &shape)) {
    double e = 0;
    enum gpu_status st = launch_ri8(ctx, b, in, out, 1, &e);
    if (st != GPU_ERROR) ctx->sep_e = st == GPU_OK ? e : 0;
    if (st != GPU_ERROR) return st; /* GPU_ERROR: its sums would not fit; the float passes */
  }
  int rx = cpu_gauss_radius(b->sigma_x, b->truncate),
      ry = cpu_gauss_radius(b->sigma_y, b->truncate);
  enum gpu_status st = upload_gauss(ctx, W_X, b->sigma_x, rx);
  if (st == GPU_OK) st = upload_gauss(ctx, W_Y, b->sigma_y, ry);
  if (st != GPU_OK || (st = kernels_start(ctx)) != GPU_OK) return st;
  return status_of(ctx,
                   launch_separable(in, out, m, (const float *)w_at(ctx, W_X), rx,
                                    (const float *)w_at(ctx, W_Y), ry, ctx->s),
                   "separable kernels");
}

/* pyramid with k > 1 on at least one axis (k = 1 on both is separable) over the images of b,
 * whose in, x0, y0 and out are set. */
static enum gpu_status run_pyramid(struct gpu_ctx *ctx, const struct cpu_pyramid *pyx,
                                   const struct cpu_pyramid *pyy, pyr_batch *b) {
  pyr_params px = {pyx->k, pyx->radius}, py = {pyy->k, pyy->radius};
  enum gpu_status st = upload_gauss(ctx, W_X, pyx->sigma_low, pyx->radius);
  if (st == GPU_OK) st = upload_gauss(ctx, W_Y, pyy->sigma_low, pyy->radius);
  if (st == GPU_OK) st = scratch_grow(ctx, SLOT_TMP, pyr_plan(px, py, b, NULL));
  if (st != GPU_OK || (st = kernels_start(ctx)) != GPU_OK) return st;
  pyr_plan(px, py, b, (float4 *)ctx->scratch[SLOT_TMP].p);
  return status_of(ctx,
                   launch_pyramid(px, py, *b, (const float *)w_at(ctx, W_X),
                                  (const float *)w_at(ctx, W_Y), ctx->s),
                   "pyramid kernels");
}

int pyramid_reduces(const struct cpu_blur *b, struct cpu_pyramid *px, struct cpu_pyramid *py) {
  if (b->method != CPU_PYRAMID) return 0;
  cpu_pyramid_params(b->sigma_x, b->truncate, px);
  cpu_pyramid_params(b->sigma_y, b->truncate, py);
  return px->k > 1 || py->k > 1;
}

/* Region r's box (or, when d_out is NULL, its window: the region and its feather within the box,
 * from a multiple of 16) as a pyramid item reading the packed image d_img, img's shape. */
static pyr_item pyr_region(const struct cpu_image *img, const void *d_img,
                           const struct gpu_region *r, void *d_out, int feather) {
  pyr_item it;
  const int *b = r->box;
  it.in = packed_of((void *)d_img, img);
  it.clip = make_int4(b[0], b[1], b[0] + b[2], b[1] + b[3]);
  it.x0 = b[0], it.y0 = b[1];
  struct cpu_image box = {NULL, b[2], b[3], img->channels, img->depth};
  if (d_out) {
    it.out = packed_of(d_out, &box);
    return it;
  }
  int4 w = region_window(r, feather);
  it.x0 = w.x / 16 * 16, it.y0 = w.y / 16 * 16;
  box.width = max(w.z - it.x0, 0), box.height = max(w.w - it.y0, 0);
  it.out = packed_of(NULL, &box);
  return it;
}

enum gpu_status run_pyramid_boxes(struct gpu_ctx *ctx, const struct cpu_pyramid *px,
                                  const struct cpu_pyramid *py, const struct cpu_image *img,
                                  const void *d_img, const struct gpu_region *r, int n, void *d_out,
                                  const size_t *at) {
  for (int i0 = 0; i0 < n; i0 += PYR_BATCH) {
    pyr_batch batch;
    batch.n = min(n - i0, PYR_BATCH);
    for (int i = 0; i < batch.n; i++)
      batch.it[i] = pyr_region(img, d_img, &r[i0 + i], (char *)d_out + at[i0 + i], 0);
    enum gpu_status st = run_pyramid(ctx, px, py, &batch);
    if (st != GPU_OK) return st;
  }
  return GPU_OK;
}

enum gpu_status run_pyramid_windows(struct gpu_ctx *ctx, const struct cpu_pyramid *px,
                                    const struct cpu_pyramid *py, const struct cpu_image *img,
                                    void *d_img, const struct gpu_region *r, int n, int feather,
                                    int *done) {
  pyr_batch batch;
  pyr_params ax = {px->k, px->radius}, ay = {py->k, py->radius};
  batch.n = 0, batch.feather = feather, batch.early = ctx->early;
  for (int i = 0; i < n; i++) {
    batch.it[batch.n] = pyr_region(img, d_img, &r[i], NULL, feather);
    batch.rect[batch.n] = make_int4(r[i].rect[0], r[i].rect[1], r[i].rect[2], r[i].rect[3]);
    batch.n += batch.it[batch.n].out.w > 0 && batch.it[batch.n].out.h > 0;
  }
  pyr_plan(ax, ay, &batch, NULL);
  *done = batch.split; /* pyr_reduce reads no clip: its items are whole images or boxes */
  return batch.n && batch.split ? run_pyramid(ctx, px, py, &batch) : GPU_OK;
}

/* The coefficients of every recursive method along one axis (sigma; yvv2way's kernel, when
 * it does not fit p, in slot), from cpu/. */
static enum gpu_status rec_prepare(struct gpu_ctx *ctx, const struct cpu_blur *b, double sigma,
                                   enum w_slot slot, int dbl, rec_params *p) {
  struct cpu_yvv c;
  struct cpu_deriche d;
  memset(p, 0, sizeof(*p));
  if (cpu_yvv_coeffs(sigma, (enum cpu_yvv_set)b->coeffs, &c) != ERR_OK) return GPU_NO_MEMORY;
  p->b = c.b;
  memcpy(p->a, c.a, sizeof(p->a));
  memcpy(p->m, c.m, sizeof(p->m));
  cpu_deriche_coeffs(sigma, &d);
  memcpy(p->d_sec, d.sec, sizeof(p->d_sec));
  if (b->method == CPU_YVV_BLOCKED) {
    struct cpu_yvv_blocked m;
    int blen = dbl ? BLOCKED_B_DOUBLE : BLOCKED_B_FLOAT;
    cpu_yvv_blocked_matrices(&c, blen, !dbl, &m);
    double casc[5] = {m.p, m.q, m.g, m.c1, m.c2};
    memcpy(p->casc, casc, sizeof(p->casc));
    memcpy(p->bt, m.t, sizeof(p->bt));
    memcpy(p->bc, m.c, sizeof(p->bc));
    memcpy(p->bts, m.ts, sizeof(p->bts));
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < blen; j++) {
        if (dbl)
          p->mp.d[i][j] = m.mp[i][j], p->me.d[i][j] = m.me[i][j];
        else
          p->mp.f[i][j] = (float)m.mp[i][j], p->me.f[i][j] = (float)m.me[i][j];
      }
  }
  if (b->method == CPU_YVV2WAY) {
    p->radius = cpu_paper_radius(sigma);
    double *w = (double *)malloc((size_t)(p->radius + 1) * sizeof(double));
    if (!w) return GPU_NO_MEMORY;
    cpu_gauss_kernel(sigma, p->radius, w);
    enum gpu_status st = GPU_OK;
    if (p->radius < 64)
      memcpy(p->w, w, (size_t)(p->radius + 1) * sizeof(double));
    else if ((st = upload_w(ctx, slot, w, (size_t)(p->radius + 1) * sizeof(double))) == GPU_OK)
      p->d_w = (const double *)w_at(ctx, slot);
    free(w);
    return st;
  }
  return GPU_OK;
}

static enum gpu_status run_recursive(struct gpu_ctx *ctx, const struct cpu_blur *b, packed in,
                                     packed out, mid m) {
  size_t px = (size_t)in.w * in.h;
  int dbl = use_double(ctx, b, in.depth);
  rec_params cx, cy; /* the coefficients along x and along y */
  enum rec_kind kind = b->method == CPU_YVV       ? REC_YVV
                       : b->method == CPU_YVV2WAY ? REC_YVV2WAY
                       : b->method == CPU_DERICHE ? REC_DERICHE
                                                  : REC_YVV_BLOCKED;
  enum gpu_status st = rec_prepare(ctx, b, b->sigma_x, W_X, dbl, &cx);
  if (st == GPU_OK) st = rec_prepare(ctx, b, b->sigma_y, W_Y, dbl, &cy);
  if (st == GPU_OK && kind != REC_YVV_BLOCKED)
    st = scratch_grow(ctx, SLOT_TMP, px * sizeof(float4));
  if (st == GPU_OK && kind == REC_YVV_BLOCKED)
    st = scratch_grow(ctx, SLOT_CARRY, blocked_carry_bytes(in.w, in.h, dbl));
  if (st != GPU_OK || (st = kernels_start(ctx)) != GPU_OK) return st;
  return status_of(ctx,
                   launch_recursive(kind, cx, cy, dbl, in, out, m,
                                    (float4 *)ctx->scratch[SLOT_TMP].p, ctx->scratch[SLOT_CARRY].p,
                                    ctx->s),
                   "recursive kernels");
}

enum gpu_status run_method(struct gpu_ctx *ctx, const struct cpu_blur *b,
                           const struct cpu_image *img, void *d_in, void *d_out) {
  packed in = packed_of(d_in, img), out = packed_of(d_out, img);
  size_t px = (size_t)img->width * img->height;
  mid m = {ctx->scratch[SLOT_MID].p, img->width, img->height, img->depth == 8};
  struct cpu_pyramid pyx, pyy;
  if (cpu_method_is_fir(b->method)) return run_fir(ctx, b, in, out);
  if (pyramid_reduces(b, &pyx, &pyy)) {
    pyr_batch one;
    one.n = 1, one.it[0].in = in, one.it[0].x0 = one.it[0].y0 = 0, one.it[0].out = out;
    one.it[0].clip = make_int4(0, 0, img->width, img->height);
    return run_pyramid(ctx, &pyx, &pyy, &one);
  }
  enum gpu_status st = scratch_grow(ctx, SLOT_MID, px * (m.half ? 8 : 16));
  m.p = ctx->scratch[SLOT_MID].p;
  if (st != GPU_OK) return st;
  if (b->method == CPU_SEPARABLE || b->method == CPU_PYRAMID)
    return run_separable(ctx, b, in, out, m);
  return run_recursive(ctx, b, in, out, m);
}

double elapsed(const struct gpu_ctx *ctx, int a, int b) {
  float ms = 0;
  return cudaEventElapsedTime(&ms, ctx->ev[a], ctx->ev[b]) == cudaSuccess ? ms : -1;
}

cudaError_t smem_allow_max(const void *kernel) {
  int dev = 0, optin = 0;
  cudaFuncAttributes a = {};
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, kernel);
  int most = optin - (int)a.sharedSizeBytes;
  if (e == cudaSuccess && a.maxDynamicSharedSizeBytes != most)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  return e;
}

/* Makes d_in and d_out hold bytes each. */
enum gpu_status grow_images(struct gpu_ctx *ctx, size_t bytes) {
  enum gpu_status st = grow(ctx, &ctx->d_in, &ctx->in_cap, bytes);
  return st == GPU_OK ? grow(ctx, &ctx->d_out, &ctx->out_cap, bytes) : st;
}

enum gpu_status gpu_upload(struct gpu_ctx *ctx, const struct cpu_image *src, struct gpu_times *t) {
  size_t bytes = cpu_image_bytes(src);
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = grow_host(ctx, bytes);
  if (st == GPU_OK) st = grow_images(ctx, bytes);
  if (st != GPU_OK) return st;
  memcpy(ctx->h_in, src->data, bytes);
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_START], ctx->s));
  CUDA_TRY(ctx, cudaMemcpyAsync(ctx->d_in, ctx->h_in, bytes, cudaMemcpyHostToDevice, ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s));
  CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_UPLOADED])); /* a blocking-sync event */
  if (t) t->upload = elapsed(ctx, EV_START, EV_UPLOADED);
  return GPU_OK;
}

enum gpu_status gpu_download(struct gpu_ctx *ctx, enum gpu_image which, const struct cpu_image *img,
                             void **pixels, struct gpu_times *t) {
  size_t bytes = cpu_image_bytes(img);
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = grow_host(ctx, bytes);
  if (st != GPU_OK) return st;
  void *d = which == GPU_INPUT ? ctx->d_in : ctx->d_out;
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_MEASURED], ctx->s));
  CUDA_TRY(ctx, cudaMemcpyAsync(ctx->h_out, d, bytes, cudaMemcpyDeviceToHost, ctx->s));
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_DONE], ctx->s));
  CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_DONE]));
  *pixels = ctx->h_out;
  if (t) t->download = elapsed(ctx, EV_MEASURED, EV_DONE);
  return GPU_OK;
}

enum gpu_status gpu_blur_resident(struct gpu_ctx *ctx, const struct cpu_blur *b,
                                  const struct cpu_image *img, struct cpu_accuracy *acc,
                                  struct gpu_times *t) {
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = grow_images(ctx, cpu_image_bytes(img));
  if (st != GPU_OK) return st;
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s));
  ctx->sep_e = 0;
  if ((st = run_method(ctx, b, img, ctx->d_in, ctx->d_out)) != GPU_OK) return st;
  CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_FILTERED], ctx->s));
  ctx->ref_exact = 0;
  if (acc) {
    if ((st = run_psnr(ctx, b, img, acc, &ctx->ref_exact)) != GPU_OK) return st;
  } else {
    CUDA_TRY(ctx, cudaEventRecord(ctx->ev[EV_MEASURED], ctx->s));
    CUDA_TRY(ctx, cudaEventSynchronize(ctx->ev[EV_MEASURED])); /* a blocking-sync event */
  }
  if (t) {
    t->kernel = elapsed(ctx, EV_UPLOADED, EV_FILTERED);
    t->reference = acc ? elapsed(ctx, EV_FILTERED, EV_MEASURED) : 0;
  }
  return GPU_OK;
}

int gpu_reference_exact(const struct gpu_ctx *ctx) {
  return ctx->ref_exact;
}

/* Hands the image in staging (pixels) to dst: copied, or lent when dst->data is NULL. */
void deliver(const struct cpu_image *img, void *pixels, struct cpu_image *dst) {
  if (dst->data)
    memcpy(dst->data, pixels, cpu_image_bytes(img));
  else
    dst->data = pixels;
}

enum gpu_status gpu_blur(struct gpu_ctx *ctx, const struct cpu_blur *b, const struct cpu_image *src,
                         struct cpu_image *dst, struct cpu_accuracy *acc, struct gpu_times *t) {
  struct gpu_times g = {0, 0, 0, 0};
  void *pixels = NULL;
  enum gpu_status st = gpu_upload(ctx, src, &g);
  if (st == GPU_OK) st = gpu_blur_resident(ctx, b, src, acc, &g);
  if (st == GPU_OK) st = gpu_download(ctx, GPU_OUTPUT, src, &pixels, &g);
  if (st != GPU_OK) return st;
  deliver(src, pixels, dst);
  if (t) *t = g;
  return GPU_OK;
}

int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum gpu_status bench_median(struct gpu_ctx *ctx, int warmups, int reps,
                             enum gpu_status (*run)(struct gpu_ctx *ctx, const void *arg),
                             const void *arg, double *ms) {
  double *times = (double *)calloc((size_t)reps, sizeof(double));
  if (!times) return GPU_NO_MEMORY;
  enum gpu_status st = GPU_OK;
  for (int i = -warmups; st == GPU_OK && i < reps; i++) {
    st = status_of(ctx, cudaEventRecord(ctx->ev[EV_UPLOADED], ctx->s), "event");
    if (st == GPU_OK) st = run(ctx, arg);
    if (st == GPU_OK) st = status_of(ctx, cudaEventRecord(ctx->ev[EV_FILTERED], ctx->s), "event");
    if (st == GPU_OK) st = status_of(ctx, cudaEventSynchronize(ctx->ev[EV_FILTERED]), "kernels");
    if (st == GPU_OK && i >= 0) times[i] = elapsed(ctx, EV_UPLOADED, EV_FILTERED);
  }
  if (st == GPU_OK) {
    qsort(times, (size_t)reps, sizeof(double), cmp_double);
    *ms = times[reps / 2];
  }
  free(times);
  return st;
}

struct blur_run { /* the arguments of run_method, for bench_median */
  const struct cpu_blur *b;
  const struct cpu_image *src;
};

static enum gpu_status run_blur(struct gpu_ctx *ctx, const void *arg) {
  const struct blur_run *r = (const struct blur_run *)arg;
  return run_method(ctx, r->b, r->src, ctx->d_in, ctx->d_out);
}

enum gpu_status gpu_bench(struct gpu_ctx *ctx, const struct cpu_blur *b,
                          const struct cpu_image *src, int reps, double *ms) {
  size_t bytes = cpu_image_bytes(src);
  struct blur_run r = {b, src};
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = grow_images(ctx, bytes);
  if (st == GPU_OK)
    st =
        status_of(ctx, cudaMemcpyAsync(ctx->d_in, src->data, bytes, cudaMemcpyHostToDevice, ctx->s),
                  "upload");
  if (st != GPU_OK) return st;
  ctx->bench = 1;
  st = bench_median(ctx, 2, reps, run_blur, &r, ms); /* two warm-ups */
  ctx->bench = 0;
  return st;
}

/* The GPU rule for `auto`, by kernel time (docs/methods.md, "auto"; docs/gpu_bench.md): separable
 * is the fastest method at sigma 1 and, below 3840x2160, up to sigma 3; elsewhere below sigma 12
 * yvv_blocked, whose cost does not grow with the kernel, wins; from sigma 12 pyramid is faster at
 * every size, since its reduction runs more threads on small grids. All reach 48 dB. */
enum cpu_method gpu_auto_method(double sigma, int width, int height) {
  int small = (double)width * height < 3840.0 * 2160;
  if (sigma <= 1 || (sigma <= 3 && small)) return CPU_SEPARABLE;
  return sigma >= 12 ? CPU_PYRAMID : CPU_YVV_BLOCKED;
}

__global__ void fault_kernel(int *p) {
  *p = 1;
}

enum gpu_status gpu_inject_fault(struct gpu_ctx *ctx) {
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  fault_kernel<<<1, 1, 0, ctx->s>>>((int *)(uintptr_t)16); /* never a valid device address */
  return status_of(ctx, cudaStreamSynchronize(ctx->s), "injected fault");
}

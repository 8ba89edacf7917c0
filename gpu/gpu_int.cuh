/* Internals shared by the .cu files of gpu/: the context and its host helpers (gpu.cu, used by
 * local.cu too), device views of images, 4-lane pixel values, loads with premultiplication and
 * stores with un-premultiplication and rounding (the same formulas as cpu/image.c), and the
 * host launch functions of every kernel family. */
#ifndef BLURD_GPU_INT_CUH
#define BLURD_GPU_INT_CUH

#include "gpu.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* ---- the context (gpu.cu) ---- */

enum { EV_START, EV_UPLOADED, EV_FILTERED, EV_MEASURED, EV_DONE, NEV };

/* The device scratch a context lends by slot (scratch_grow): each layer of a job has slots of its
 * own, so that a layer's buffers outlive the calls of the layers it runs on; an operation's
 * compute takes SLOT_OP and the slots after it, which nothing it calls uses. A buffer only grows,
 * and is freed with the context. */
enum gpu_slot {
  SLOT_MID,               /* a blur method's x pass output, 8 or 16 bytes a pixel */
  SLOT_TMP,               /* the recursive methods' and pyramid's scratch (float4) */
  SLOT_CARRY,             /* yvv_blocked's carries */
  SLOT_REF,               /* the PSNR reference's intermediate and its sums */
  SLOT_WHOLE,             /* region blur: the image set aside (compose.cu) */
  SLOT_RES,               /* region blur: the blended result */
  SLOT_LV,                /* local statistics: exact's row sums, the merge methods' lines (4) */
  SLOT_VAR = SLOT_LV + 4, /* local variance, float or double a pixel */
  SLOT_MEAN,              /* local mean */
  SLOT_ENC,               /* an encoder's first pass on the device (vp8.cu) */
  SLOT_OP,                /* an operation's own: SLOT_OP to SLOT_OP + 3 */
  GPU_SLOTS = SLOT_OP + 4
};

struct gpu_buf {
  void *p;
  size_t cap; /* bytes */
};

struct gpu_ctx {
  int dev;
  char name[128]; /* "cuda:0 " and the device's name */
  char err[256];  /* the last error, as a sentence */
  cudaStream_t s;
  cudaEvent_t ev[NEV];
  void *h_in, *h_out; /* pinned staging, h_cap bytes each */
  size_t h_cap;
  double *h_stats;    /* pinned: sum of squared errors and largest error, per region */
  void *d_in, *d_out; /* packed images */
  size_t in_cap, out_cap;
  void *d_w; /* kernels: the method's along x and y, the reference's along x and y (gpu.cu) */
  size_t w_cap;
  void *h_w;               /* what each slot of d_w was last given (gpu.cu's upload_w), */
  size_t w_len[4];         /* and its bytes (0: unknown), a slot each */
  struct ri_held *ri_held; /* the integer reference's weights its slots hold (psnr.cu), or NULL */
  double *d_stats;         /* two doubles per region (GPU_REGIONS_MAX) */
  struct gpu_buf scratch[GPU_SLOTS]; /* device scratch by slot (enum gpu_slot), grown on demand */
  size_t bytes;                      /* device bytes held */
  void *h_vp8; /* pinned: lossy WebP's first pass's outputs and the luma steps' count */
  size_t h_vp8_cap;
  struct jpeg_ctx *jpeg; /* nvJPEG decoder and encoder states (jpeg.cu), or NULL */
  int force_double;      /* BLURD_GPU_PRECISION: -1 float, 1 double, 0 by sigma */
  int bench;             /* gpu_bench: kernel time only, after the host's preparation */
  int early;             /* programmatic dependent launch: compute capability 9.0 on */
  int ref_double; /* BLURD_PSNR_REFERENCE=double: the PSNR always from the double reference */
  int ref_int;    /* the integer reference runs here (8.0 on), unless BLURD_PSNR_REFERENCE=float */
  int ref_exact;  /* the last PSNR came from the double reference (gpu_reference_exact) */
  double sep_e;   /* > 0: the method's own pass measured it, its bound (gpu.cu's run_separable) */
};

/* Says how bad e is (GPU_FATAL for a sticky error) and, unless it is cudaSuccess, logs it to
 * stderr as "file:line: what: cudaGetErrorString (name)" and keeps the sentence in ctx->err
 * (status.cu). status_of(ctx, e, what) passes its caller's file and line. */
enum gpu_status status_at(struct gpu_ctx *ctx, cudaError_t e, const char *what, const char *file,
                          int line);
#define status_of(ctx, e, what) status_at(ctx, e, what, __FILE__, __LINE__)

/* Runs the CUDA call x and returns its gpu_status from the calling function unless it is
 * GPU_OK, the error logged with this file and line. */
#define CUDA_TRY(ctx, x)                                                                           \
  do {                                                                                             \
    enum gpu_status st_ = status_at(ctx, (x), #x, __FILE__, __LINE__);                             \
    if (st_ != GPU_OK) return st_;                                                                 \
  } while (0)

/* The method's kernels (b) from the packed image d_in to d_out, both of shape img; no wait. */
enum gpu_status run_method(struct gpu_ctx *ctx, const struct cpu_blur *b,
                           const struct cpu_image *img, void *d_in, void *d_out);
/* Whether b is pyramid with k > 1 on an axis (px and py its parameters), whose kernels take a
 * batch of images at once. */
int pyramid_reduces(const struct cpu_blur *b, struct cpu_pyramid *px, struct cpu_pyramid *py);
/* pyramid with the parameters px and py (pyramid_reduces') over the boxes of r[0..n) in the
 * packed image d_img (shape img), box i into d_out + at[i]: run_method's kernels for each box,
 * PYR_BATCH boxes a launch; no wait. */
enum gpu_status run_pyramid_boxes(struct gpu_ctx *ctx, const struct cpu_pyramid *px,
                                  const struct cpu_pyramid *py, const struct cpu_image *img,
                                  const void *d_img, const struct gpu_region *r, int n, void *d_out,
                                  const size_t *at);
/* pyramid as run_pyramid_boxes, over the windows of regions r[0..n) (n <= PYR_BATCH) only (each
 * region with its feather, within its box), blended into d_img in place, in order; no wait.
 * *done 0: nothing done, as the windows' reduction would not fit in two steps (run_pyramid_boxes
 * then), or their smoothing in a block's shared memory (a radius along y over 81 cells). */
enum gpu_status run_pyramid_windows(struct gpu_ctx *ctx, const struct cpu_pyramid *px,
                                    const struct cpu_pyramid *py, const struct cpu_image *img,
                                    void *d_img, const struct gpu_region *r, int n, int feather,
                                    int *done);
/* The exact reference of d_in (sigma_x along x, sigma_y along y) and the error of d_out against
 * it into d_stats (two doubles: the sum of squared errors, the largest error); no wait. */
enum gpu_status run_reference(struct gpu_ctx *ctx, double sigma_x, double sigma_y,
                              const struct cpu_image *img, void *d_in, void *d_out,
                              double *d_stats);
/* The accuracy of an image img from its stats (run_reference's two doubles). */
void accuracy_of(const struct cpu_image *img, const double *stats, struct cpu_accuracy *acc);

/* The local-variance method v's kernels (local.cu) from the gray plane d_plane (shape img) into
 * d_var (float32 for the float methods, double for exact), and into d_mean when want_mean;
 * no wait. */
enum gpu_status run_variance(struct gpu_ctx *ctx, const struct cpu_var *v,
                             const struct cpu_image *img, void *d_plane, int want_mean);

/* The kernel buffer d_w's slots (gpu.cu): the method's kernels along x and y, the reference's. */
enum w_slot { W_X, W_Y, W_REF_X, W_REF_Y, W_SLOTS };
/* Marks where a method's kernels start (after the host's preparation: coefficients, weights
 * uploaded, buffers grown), for gpu_bench's kernel time; nothing outside it. */
enum gpu_status kernels_start(struct gpu_ctx *ctx);
/* The device address of d_w's slot. */
void *w_at(const struct gpu_ctx *ctx, enum w_slot slot);
/* Uploads n bytes of host data into d_w's slot, unless it holds them already. */
enum gpu_status upload_w(struct gpu_ctx *ctx, enum w_slot slot, const void *data, size_t n);
/* The integer reference's weights in slot are no longer what it holds (psnr.cu). */
void ri_forget(struct gpu_ctx *ctx, enum w_slot slot);
/* The PSNR of d_out against the exact blur b of d_in (psnr.cu): from the fastest reference whose
 * bound makes it certain to 0.01 dB, else the double one (then *exact is set). Waits for the GPU.
 */
enum gpu_status run_psnr(struct gpu_ctx *ctx, const struct cpu_blur *b, const struct cpu_image *img,
                         struct cpu_accuracy *acc, int *exact);

/* Makes *p hold at least need bytes of device memory; *cap is its size. */
enum gpu_status grow(struct gpu_ctx *ctx, void **p, size_t *cap, size_t need);
/* Makes scratch slot hold at least need bytes (grow); its pointer is ctx->scratch[slot].p. */
enum gpu_status scratch_grow(struct gpu_ctx *ctx, int slot, size_t need);
/* Makes both pinned staging buffers hold at least need bytes. */
enum gpu_status grow_host(struct gpu_ctx *ctx, size_t need);
/* Makes d_in and d_out hold bytes each. */
enum gpu_status grow_images(struct gpu_ctx *ctx, size_t bytes);
/* Hands the image img in pinned staging (pixels) to dst: copied into dst->data, or lent (dst->data
 * set to pixels) when it is NULL. */
void deliver(const struct cpu_image *img, void *pixels, struct cpu_image *dst);
/* Copies the image at src (stored sw x sh, bpp bytes a pixel) upright into dst, by EXIF
 * orientation o (codecs/exif.c's mapping); no wait (jpeg.cu). */
cudaError_t launch_orient(const uint8_t *src, uint8_t *dst, int sw, int sh, int bpp, int o,
                          cudaStream_t s);
/* Frees ctx->jpeg (jpeg.cu); safe when it is NULL. */
void jpeg_ctx_free(struct gpu_ctx *ctx);
/* Lets kernel take as much dynamic shared memory as the current device allows a block, less its
 * static shared memory. The limit is an attribute of the kernel that every worker shares: set
 * before each launch to that launch's size, one worker could lower it under another's launch
 * between the other's two calls, which would then fail (cudaErrorInvalidValue or
 * cudaErrorLaunchOutOfResources). Raised to the most, it is never lowered. Returns the CUDA
 * error, which also stays the last error, so that the launch after it reports it. */
cudaError_t smem_allow_max(const void *kernel);
/* Milliseconds between events a and b of ctx, or -1. */
double elapsed(const struct gpu_ctx *ctx, int a, int b);
/* qsort's comparison of two doubles. */
int cmp_double(const void *a, const void *b);
/* For the benchmarks: runs run(ctx, arg) warmups times, then reps times between CUDA events, and
 * stores the median time in *ms. */
enum gpu_status bench_median(struct gpu_ctx *ctx, int warmups, int reps,
                             enum gpu_status (*run)(struct gpu_ctx *ctx, const void *arg),
                             const void *arg, double *ms);

static inline unsigned div_up(unsigned a, unsigned b) {
  return (a + b - 1) / b;
}

/* Whether two rectangles (x0, y0, x1, y1, exclusive ends) overlap. */
static inline bool rects_overlap(int4 a, int4 b) {
  return a.x < b.z && b.x < a.z && a.y < b.w && b.y < a.w;
}

/* Region r's window: where the region and its feather meet its box (x0, y0, x1, y1, exclusive
 * ends; empty where x0 >= x1 or y0 >= y1). */
static inline int4 region_window(const struct gpu_region *r, int feather) {
  return make_int4(max(r->rect[0] - feather, r->box[0]), max(r->rect[1] - feather, r->box[1]),
                   min(r->rect[2] + feather, r->box[0] + r->box[2]),
                   min(r->rect[3] + feather, r->box[1] + r->box[3]));
}

struct packed { /* an interleaved 8- or 16-bit image on the device */
  void *p;      /* width*height*c samples */
  int w, h, c, depth;
};

/* The integer reference (ri8) of b from in (psnr.cu): with write, rounded into out (separable
 * exactly), else measuring out; its error bound in *e. No wait. GPU_ERROR: the kernel is too wide
 * or its sums would not fit. */
enum gpu_status launch_ri8(struct gpu_ctx *ctx, const struct cpu_blur *b, packed in, packed out,
                           int write, double *e);

static inline packed packed_of(void *p, const struct cpu_image *img) {
  packed k = {p, img->width, img->height, img->channels, img->depth};
  return k;
}

/* 4 lanes, one per channel (alpha, when there is one, is lane c-1; unused lanes stay 0). */
template <class R> struct v4 { R l[4]; };

template <class R> __device__ __forceinline__ v4<R> v4_zero() {
  v4<R> v = {{0, 0, 0, 0}};
  return v;
}

template <class R> __device__ __forceinline__ void v4_fma(v4<R> &acc, R w, const v4<R> &x) {
#pragma unroll
  for (int i = 0; i < 4; i++) acc.l[i] += w * x.l[i];
}

template <class R> __device__ __forceinline__ v4<R> v4_axpy(R w, const v4<R> &x, const v4<R> &y) {
  v4<R> r;
#pragma unroll
  for (int i = 0; i < 4; i++) r.l[i] = w * x.l[i] + y.l[i];
  return r;
}

__device__ __forceinline__ int clampi(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

__device__ __forceinline__ unsigned raw_sample(const packed &im, size_t i) {
  return im.depth == 16 ? ((const uint16_t *)im.p)[i] : ((const uint8_t *)im.p)[i];
}

/* An 8-bit RGBA pixel as 4 lanes, colour premultiplied by alpha / 255. */
template <class R> __device__ __forceinline__ v4<R> px_of_rgba8(uchar4 q) {
  v4<R> v = {{(R)q.x, (R)q.y, (R)q.z, (R)q.w}};
  R a = v.l[3] * (R)(1.0 / 255);
#pragma unroll
  for (int k = 0; k < 3; k++) v.l[k] *= a;
  return v;
}

/* Pixel (x, y) as 4 lanes, colour premultiplied by alpha / max (as cpu/image.c loads it). */
template <class R> __device__ __forceinline__ v4<R> load_px(const packed &im, int x, int y) {
  size_t i = ((size_t)y * im.w + x) * im.c;
  if (im.c == 4 && im.depth == 8)
    return px_of_rgba8<R>(*(const uchar4 *)((const uint8_t *)im.p + i));
  v4<R> v = v4_zero<R>();
#pragma unroll
  for (int k = 0; k < 4; k++) /* fixed bounds: the lanes stay in registers */
    if (k < im.c) v.l[k] = (R)raw_sample(im, i + k);
  if (im.c == 2 || im.c == 4) {
    R a = (im.c == 4 ? v.l[3] : v.l[1]) * (im.depth == 16 ? (R)(1.0 / 65535) : (R)(1.0 / 255));
#pragma unroll
    for (int k = 0; k < 3; k++)
      if (k < im.c - 1) v.l[k] *= a;
  }
  return v;
}

/* A lane as a sample of max: rounded half up, clamped (the conversion saturates below 0). */
template <class R> __device__ __forceinline__ unsigned sample_of(R t, R max) {
  if constexpr (sizeof(R) == sizeof(float))
    return __float2uint_rd(fminf(t + 0.5f, max));
  else
    return __double2uint_rd(fmin(t + 0.5, max));
}

/* n / d: in single precision the fast division (2 ulp), in double the exact one. */
template <class R> __device__ __forceinline__ R quot(R n, R d) {
  if constexpr (sizeof(R) == sizeof(float))
    return __fdividef(n, d);
  else
    return n / d;
}

/* 4 lanes as an 8-bit RGBA pixel: colour divided by alpha (transparent: 0), rounded, clamped. */
template <class R> __device__ __forceinline__ uchar4 rgba8_of_px(const v4<R> &v) {
  R a = v.l[3], inv = a >= (R)0.5 ? quot((R)255, a) : (R)0;
  return make_uchar4(sample_of(v.l[0] * inv, (R)255), sample_of(v.l[1] * inv, (R)255),
                     sample_of(v.l[2] * inv, (R)255), sample_of(a, (R)255));
}

/* 4 lanes as the samples of a pixel of im's format: colour divided by alpha, rounded half up,
 * clamped (rgba8_of_px's values for 8-bit RGBA). */
template <class R>
__device__ __forceinline__ void samples_of_px(const packed &im, const v4<R> &v, unsigned q[4]) {
  R max = (R)((1 << im.depth) - 1);
  int alpha = im.c == 2 || im.c == 4;
  R a = im.c == 4 ? v.l[3] : v.l[1], inv = alpha && a >= (R)0.5 ? quot(max, a) : (R)0;
#pragma unroll
  for (int k = 0; k < 4; k++) /* fixed bounds: the lanes stay in registers */
    q[k] = k < im.c ? sample_of(alpha && k < im.c - 1 ? v.l[k] * inv : v.l[k], max) : 0;
}

/* Stores 4 lanes into pixel (x, y): colour divided by alpha, rounded half up, clamped. */
template <class R>
__device__ __forceinline__ void store_px(const packed &im, int x, int y, const v4<R> &v) {
  size_t i = ((size_t)y * im.w + x) * im.c;
  if (im.c == 4 && im.depth == 8) {
    *(uchar4 *)((uint8_t *)im.p + i) = rgba8_of_px<R>(v);
    return;
  }
  unsigned q[4];
  samples_of_px<R>(im, v, q); /* 1 division */
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if (k >= im.c) break;
    if (im.depth == 16)
      ((uint16_t *)im.p)[i + k] = (uint16_t)q[k];
    else
      ((uint8_t *)im.p)[i + k] = (uint8_t)q[k];
  }
}

/* The weight of a region's blur at d pixels outside it, its edge fading over feather pixels
 * (cpu/compose.c's ramp, in the same operations: no contraction into fused multiply-adds, which
 * would round differently from the host). */
__device__ __forceinline__ double ramp(int d, int feather) {
  if (d <= 0) return 1;
  if (d > feather) return 0;
  double t = __dsub_rn(1, __ddiv_rn(d, feather + 1));
  return __dmul_rn(__dmul_rn(t, t), __dsub_rn(3, __dmul_rn(2, t)));
}

/* The weight of a region's blur (rect: x0, y0, x1, y1, exclusive ends) at pixel (x, y). */
__device__ __forceinline__ double blend_weight(int x, int y, int4 rect, int feather) {
  int dx = x < rect.x ? rect.x - x : x - (rect.z - 1),
      dy = y < rect.y ? rect.y - y : y - (rect.w - 1);
  return __dmul_rn(ramp(dx, feather), ramp(dy, feather));
}

/* Pixel (x, y) of im blended with the samples q of a region's blur at weight m (0 < m <= 1), as
 * cpu_blend_box blends it. */
__device__ __forceinline__ void blend_px(const packed &im, int x, int y, const unsigned q[4],
                                         double m) {
  size_t i = ((size_t)y * im.w + x) * im.c;
  double peak = (1 << im.depth) - 1;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if (k >= im.c) break;
    double v = raw_sample(im, i + k), o = q[k];
    if (m != 1) {
      o = floor(__dadd_rn(__dadd_rn(v, __dmul_rn(m, __dsub_rn(o, v))), 0.5));
      o = o < 0 ? 0 : o > peak ? peak : o;
    }
    if (im.depth == 16)
      ((uint16_t *)im.p)[i + k] = (uint16_t)o;
    else
      ((uint8_t *)im.p)[i + k] = (uint8_t)o;
  }
}

/* The intermediate between the x pass and the y pass: 4 lanes per pixel in half precision
 * (8-bit images: 0.06 of a level at most) or single precision (16-bit images). */
struct mid {
  void *p;
  int w, h;
  int half; /* 1: 4 halves per pixel, 0: 4 floats */
};

/* 4 halves as 4 lanes. */
template <class R> __device__ __forceinline__ v4<R> v4_of_half4(uint2 raw) {
  __half2 a = *(__half2 *)&raw.x, b = *(__half2 *)&raw.y;
  float2 fa = __half22float2(a), fb = __half22float2(b);
  v4<R> v = {{fa.x, fa.y, fb.x, fb.y}};
  return v;
}

template <class R> __device__ __forceinline__ v4<R> load_mid(const mid &m, int x, int y) {
  size_t i = (size_t)y * m.w + x;
  v4<R> v;
  if (m.half) {
    v = v4_of_half4<R>(((const uint2 *)m.p)[i]);
  } else {
    float4 f = ((const float4 *)m.p)[i];
    v.l[0] = f.x, v.l[1] = f.y, v.l[2] = f.z, v.l[3] = f.w;
  }
  return v;
}

template <class R>
__device__ __forceinline__ void store_mid(const mid &m, int x, int y, const v4<R> &v) {
  size_t i = (size_t)y * m.w + x;
  if (m.half) {
    __half2 a = __floats2half2_rn((float)v.l[0], (float)v.l[1]);
    __half2 b = __floats2half2_rn((float)v.l[2], (float)v.l[3]);
    uint2 raw;
    raw.x = *(unsigned *)&a, raw.y = *(unsigned *)&b;
    ((uint2 *)m.p)[i] = raw;
  } else {
    ((float4 *)m.p)[i] = make_float4((float)v.l[0], (float)v.l[1], (float)v.l[2], (float)v.l[3]);
  }
}

/* One 1-D pass reads lines from a source and writes them to a destination: the x pass from the
 * packed input to the intermediate, the y pass from the intermediate to the packed output. A
 * line is a row (x pass) or a column (y pass); sample i of line l is pixel (i, l) or (l, i). */
struct pass_io {
  packed img;   /* the packed image: the source of the x pass, the destination of the y pass */
  mid m;        /* the intermediate */
  int vertical; /* 0: x pass (rows), 1: y pass (columns) */
  int n;        /* samples per line */
  int lines;    /* number of lines */
};

template <class R> __device__ __forceinline__ v4<R> pass_load(const pass_io &io, int line, int i) {
  return io.vertical ? load_mid<R>(io.m, line, i) : load_px<R>(io.img, i, line);
}

template <class R>
__device__ __forceinline__ void pass_store(const pass_io &io, int line, int i, const v4<R> &v) {
  if (io.vertical)
    store_px<R>(io.img, line, i, v);
  else
    store_mid<R>(io.m, i, line, v);
}

/* A scratch plane of 4 floats per pixel, indexed like the pass's lines. */
__device__ __forceinline__ size_t scratch_index(const pass_io &io, int line, int i) {
  return io.vertical ? (size_t)i * io.lines + line : (size_t)line * io.n + i;
}

/* ---- launches (each returns cudaGetLastError() after its kernels) ---- */

/* The fir family: variant 0 fir (global), 1 fir_shared, 2 fir_mwpt. d_ax holds the weights
 * along x, ax[0..rx], d_ay those along y, ay[0..ry], both with the same k. */
cudaError_t launch_fir(int variant, packed in, packed out, const uint32_t *d_ax, int rx,
                       const uint32_t *d_ay, int ry, int k, cudaStream_t s);

/* Separable FIR through shared memory: the row pass with d_wx[0..rx], the column pass with
 * d_wy[0..ry]. */
cudaError_t launch_separable(packed in, packed out, mid m, const float *d_wx, int rx,
                             const float *d_wy, int ry, cudaStream_t s);

/* The exact reference in double (rows with d_wx[0..rx], columns with d_wy[0..ry]) and the error
 * of out against it: d_stats[0] = the sum of squared errors, d_stats[1] = the largest error, the
 * same bits for the same image. d_ref holds reference_bytes(w, h, c, ry): tall images go through
 * it in strips of rows, so that it stays near 128 MB. */
size_t reference_bytes(int w, int h, int c, int ry);
cudaError_t launch_reference(packed in, packed out, void *d_ref, const double *d_wx, int rx,
                             const double *d_wy, int ry, double *d_stats, cudaStream_t s);
/* The single-precision reference (kernels_ref32.cu): weights w[0..r8] (r8 a multiple of 8, zeros
 * past the radius), d_ref of reference32_bytes(w, h, c, ry8); d_stats[0..2] get the sums of squared
 * and of absolute errors and the largest error, errors under tau counted as none. */
#define R32_RMAX 160 /* the largest r8 it takes (sigma 40): the column pass stages 4 lanes */
size_t reference32_bytes(int w, int h, int c, int ry8);
cudaError_t launch_reference32(packed in, packed out, void *d_ref, const float *d_wx, int rx8,
                               const float *d_wy, int ry8, double tau, double *d_stats,
                               cudaStream_t s);

/* The integer reference on the tensor cores (kernels_ref32.cu), for 8-bit images of 1 or 3
 * channels on compute capability 8.0 on: a pass's weights q[0..r] = round(w 2^S) (under 2^24),
 * R = r rounded up to 8 (at most R32_RMAX), ks k-steps of 32 samples (16 + 2 R at least), and
 * d_tx, d_ty the passes' A fragments (RI_TABLE_BYTES(ks): gpu.cu's ri_weights); d_ref of
 * reference_i8_bytes(w, h, c, py.R); d_stats as launch_reference32's. With write, the
 * reference rounded to the nearest level is written to out and measured (the GPU's separable);
 * without, out is measured against it. */
#define RI_TABLE_BYTES(ks) ((size_t)(ks)*3 * 32 * 16)
#define RI_F               16 /* the row pass's sums, hq = round(h 2^RI_F), in 24 bits */
struct ri_pass {
  int r, R, S, ks;
  long long half; /* the column pass's: half the most its levels 0 and 1 can add (gpu.cu) */
};
size_t reference_i8_bytes(int w, int h, int c, int R);
cudaError_t launch_reference_i8(packed in, packed out, void *d_ref, const void *d_tx, ri_pass px,
                                const void *d_ty, ri_pass py, double tau, double *d_stats,
                                int write, cudaStream_t s);

/* yvv_blocked's block length in samples (float, double). */
#define BLOCKED_B_FLOAT  64
#define BLOCKED_B_DOUBLE 32

struct rec_params {                /* everything the recursive kernels need, passed by value */
  double b, a[3], m[3][3];         /* Young-van Vliet */
  struct cpu_deriche_sec d_sec[2]; /* Deriche, as two sections */
  int radius;                      /* yvv2way: the centre pixel's FIR radius */
  double w[64];                    /* yvv2way: its kernel, when radius < 64 */
  const double *d_w;               /* yvv2way: its kernel in device memory otherwise */
  double casc[5];                  /* yvv_blocked (cpu_yvv_blocked): its cascade p, q, g, c1, c2, */
  double bt[3][3], bc[3][3], bts[3][3]; /* carry matrices t, c and Triggs-Sdika ts, */
  union {                               /* yvv_blocked: zero-state carries as dot */
    double d[3][BLOCKED_B_DOUBLE];      /* products, in the pass's precision */
    float f[3][BLOCKED_B_FLOAT];
  } mp, me;
};

enum rec_kind { REC_YVV, REC_YVV2WAY, REC_DERICHE, REC_YVV_BLOCKED };

/* A recursive method over both passes: the x pass with px, the y pass with py. d_tmp is a
 * scratch plane of 4 floats per pixel; d_carry holds yvv_blocked's carries (see gpu.cu for its
 * size). use_double picks the precision. */
cudaError_t launch_recursive(enum rec_kind kind, const rec_params &px, const rec_params &py,
                             int use_double, packed in, packed out, mid m, float4 *d_tmp,
                             void *d_carry, cudaStream_t s);

/* The bytes yvv_blocked's carries need. */
size_t blocked_carry_bytes(int w, int h, int use_double);

/* pyramid (kernels_pyr.cu, cpu_pyramid_line along x then y) with k > 1 on at least one axis,
 * over a batch of images with the same parameters (a whole image, or a request's region boxes):
 * per axis its parameters (px, py) and the reduced Gaussian's weights w[0..radius] (d_wx, d_wy).
 * An axis with k = 1 is not reduced: the plain sampled Gaussian, as the CPU twin filters it. */
struct pyr_params { /* one axis */
  int k, radius;
};
#define PYR_BATCH 16 /* images a launch covers */
/* One image of a batch: its input, out.w x out.h pixels at (x0, y0) of in; out.p NULL: blended
 * into in there. pyr_reduce takes one by value, and a larger struct makes nvcc reload its fields
 * from the parameter space at every pixel, hence the batch holds what only regions need. */
struct pyr_item {
  packed in;
  int x0, y0;
  packed out;
  float4 *g, *gx, *rows; /* its grids and the reduction's rows, in the batch's scratch */
  int mw, mh, lw, lh;    /* cells of the image along x and y, and with their margins */
  int r0, nr;            /* the rows of in the two-step reduction weights: r0 .. r0 + nr - 1 */
  int4 clip; /* the pixels of in it reads (x0, y0, x1, y1, exclusive ends): the nearest of them
                stands for a pixel outside (the edge of the image, or of its box) */
};
static_assert(sizeof(pyr_item) <= 128, "pyr_reduce's item in registers (see above)");
struct pyr_batch {
  pyr_item it[PYR_BATCH];
  int n;
  int split;            /* the reduction in two steps (pyr_plan decides) */
  int4 rect[PYR_BATCH]; /* items blended into their input: their regions (x0, y0, x1, y1) */
  int feather;          /* and the regions' feather */
  int early;            /* items blended: their kernels after the first launched early (sm_90 on) */
};
/* Fills in the items' cells and rows and places their grids in d_tmp (NULL: nowhere, to size it);
 * in, x0, y0, out and clip (and rect and feather for items with out.p NULL) are the caller's.
 * Returns the bytes the batch's grids take. */
size_t pyr_plan(const pyr_params &px, const pyr_params &py, pyr_batch *b, float4 *d_tmp);
cudaError_t launch_pyramid(const pyr_params &px, const pyr_params &py, const pyr_batch &b,
                           const float *d_wx, const float *d_wy, cudaStream_t s);

/* ---- local statistics, contrast and convolution (kernels_local.cu) ---- */

/* naive, koenig or welford: every tap of the window for each pixel, float32, into var and (when
 * not NULL) mean, w*h floats each. tri: the triangle window, else the box. */
cudaError_t launch_var_direct(enum cpu_var_method m, packed in, int r, int tri, float *var,
                              float *mean, cudaStream_t s);

/* Bytes of each of the 4 scratch lines launch_var_merge needs. */
size_t var_merge_bytes(int w, int h, int r);
/* pairwise or threewise: passes of merges along x then y over extended lines, float32. */
cudaError_t launch_var_merge(enum cpu_var_method m, packed in, int r, int tri, void *const buf[4],
                             float *var, float *mean, cudaStream_t s);

/* Bytes of the row sums launch_var_exact needs in d_s1 and d_s2. */
size_t var_exact_bytes(int w, int h, int depth, size_t *s2_bytes);
/* exact: running integer sums along x (into d_s1, d_s2), then along y with the division, into
 * var and (when not NULL) mean, w*h doubles each: the bits of cpu_variance. */
cudaError_t launch_var_exact(packed in, int r, int tri, void *d_s1, void *d_s2, double *var,
                             double *mean, cudaStream_t s);

/* The luma plane of in (cpu_luma): gray has one channel, in's size and depth. */
cudaError_t launch_luma(packed in, packed gray, cudaStream_t s);
/* Wallis statistical differencing (cpu_contrast_image) from the luma plane's exact mean and
 * variance, colour moved with luma, alpha copied. */
cudaError_t launch_contrast(packed in, packed gray, const double *mean, const double *var,
                            const struct cpu_contrast &c, packed out, cudaStream_t s);
/* cpu_convolve_image: a shared-memory tile with halo, the same float32 operations in the same
 * order. */
cudaError_t launch_convolve(packed in, packed out, const struct cpu_conv &c, cudaStream_t s);

#endif

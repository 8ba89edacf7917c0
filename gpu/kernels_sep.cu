/* Separable FIR on the GPU: a row pass and a column pass, each staging its inputs in shared
 * memory, with the window taken in chunks so that any radius fits. `separable` runs it in
 * single precision through the half/float intermediate; the exact reference runs in double
 * through a double intermediate, with a row pass of its own (ref_rows: four outputs a thread)
 * and the column kernel, whose reference form compares with the method's output instead of
 * storing (the PSNR of cpu/image.c: colour premultiplied, errors under 1e-6 of a level count as
 * none). */
#include "gpu_int.cuh"

#define ROW_T     256 /* outputs per row block */
#define ROW_CH    256 /* taps per chunk in the row pass */
#define COL_W     32  /* columns per column block */
#define COL_R     32  /* output rows per column block (4 per thread) */
#define COL_CH    32  /* taps per chunk in the column pass */
#define REF_NOISE 1e-6
static_assert(COL_R == 4 * 8, "a column block has 8 rows of threads with 4 outputs each");

/* Row pass: pixel (x, y) of the packed input into the intermediate (the reference's has a kernel
 * of its own, ref_rows). */
template <class R> __global__ void sep_rows(packed in, mid m, const R *w, int r) {
  __shared__ v4<R> s[ROW_T + ROW_CH];
  int y = blockIdx.y, x0 = blockIdx.x * ROW_T, tx = threadIdx.x, x = x0 + tx;
  v4<R> acc = v4_zero<R>();
  int ch = 2 * r + 1 < ROW_CH ? 2 * r + 1 : ROW_CH; /* taps per chunk: no wider than the kernel */
  for (int base = -r; base <= r; base += ch) {
    for (int j = tx; j < ROW_T + ch - 1; j += ROW_T)
      s[j] = load_px<R>(in, clampi(x0 + base + j, 0, in.w - 1), y);
    __syncthreads();
    int kend = base + ch - 1 < r ? base + ch - 1 : r;
    for (int k = base; k <= kend; k++) v4_fma(acc, w[k < 0 ? -k : k], s[tx + k - base]);
    __syncthreads();
  }
  if (x < in.w) store_mid<R>(m, x, y, acc);
}

/* Column pass of `separable`: a block of COL_W x 8 threads owns COL_W columns and COL_R output
 * rows, a thread 4 of them (rows ty + 8q); the chunk's weights are staged in shared memory. */
template <class R> __global__ void sep_cols(mid m, packed out, const R *w, int r) {
  extern __shared__ unsigned char s_raw[];
  __shared__ R s_w[COL_CH];
  v4<R> *s = (v4<R> *)s_raw; /* (COL_R + COL_CH) rows of COL_W */
  int tx = threadIdx.x, ty = threadIdx.y, x = blockIdx.x * COL_W + tx, y0 = blockIdx.y * COL_R;
  v4<R> acc[COL_R / 8];
  for (int q = 0; q < COL_R / 8; q++) acc[q] = v4_zero<R>();
  int ch = 2 * r + 1 < COL_CH ? 2 * r + 1 : COL_CH; /* taps per chunk */
  for (int base = -r; base <= r; base += ch) {
    int kend = base + ch - 1 < r ? base + ch - 1 : r;
    for (int j = ty * COL_W + tx; j <= kend - base; j += 8 * COL_W) s_w[j] = w[abs(base + j)];
    for (int j = ty; j < COL_R + ch - 1; j += 8)
      s[j * COL_W + tx] =
          x < out.w ? load_mid<R>(m, x, clampi(y0 + base + j, 0, out.h - 1)) : v4_zero<R>();
    __syncthreads();
    for (int q = 0; q < COL_R / 8; q++) {
      int oy = ty + 8 * q;
      for (int k = base; k <= kend; k++)
        v4_fma(acc[q], s_w[k - base], s[(oy + k - base) * COL_W + tx]);
    }
    __syncthreads();
  }
  for (int q = 0; q < COL_R / 8; q++) {
    int y = y0 + ty + 8 * q;
    if (x < out.w && y < out.h) store_px<R>(out, x, y, acc[q]);
  }
}

cudaError_t launch_separable(packed in, packed out, mid m, const float *d_wx, int rx,
                             const float *d_wy, int ry, cudaStream_t s) {
  size_t smem = (size_t)(COL_R + COL_CH) * COL_W * sizeof(v4<float>);
  sep_rows<float><<<dim3(div_up(in.w, ROW_T), in.h), ROW_T, 0, s>>>(in, m, d_wx, rx);
  cudaFuncSetAttribute(sep_cols<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  sep_cols<float><<<dim3(div_up(in.w, COL_W), div_up(in.h, COL_R)), dim3(COL_W, 8), smem, s>>>(
      m, out, d_wy, ry);
  return cudaGetLastError();
}

/* ---- the exact reference: a double-precision separable pass with the image's own lanes (L,
 * its channels, colour premultiplied) through a plane of L doubles a pixel, and the error of the
 * method's output against it. A thread sums 4 adjacent outputs from one staged window (slide4),
 * so that every sample read from shared memory serves four outputs. ---- */

/* Adds the n taps of one chunk into a thread's 4 outputs acc[q], with one sliding window of
 * weights: staged sample i (lane c at s[c][p0 + (i / 4) gs + (i % 4) us]) is tap i - q of output
 * q, so each sample is read once from shared memory for 4 outputs. The weights w are padded:
 * w[3 + k] is tap k of the chunk, and w[0..2] and w[n + 3..] are 0 (REF_WPAD of them), so that
 * the samples come in groups of 4 whose offsets are constants, with no test a sample. Each
 * output takes its taps in increasing order, as one output at a time would (the zeros add
 * nothing): the sums are the same bits. */
#define REF_WPAD 8
template <int L>
__device__ __forceinline__ void slide4(double (&acc)[4][L], double *const *s, const double *w,
                                       int n, int p0, int gs, int us) {
  for (int g = 0; 4 * g < n + 3; g++, p0 += gs) {
    double wg[8]; /* wg[j] = w[4 g + j]: sample 4 g + u is tap 4 g + u - q of output q */
    const double2 *w2 = (const double2 *)(w + 4 * g);
#pragma unroll
    for (int j = 0; j < 4; j++) wg[2 * j] = w2[j].x, wg[2 * j + 1] = w2[j].y;
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
      for (int c = 0; c < L; c++) {
        double v = s[c][p0 + u * us];
#pragma unroll
        for (int q = 0; q < 4; q++) acc[q][c] += wg[u - q + 3] * v;
      }
  }
}

/* Stages the chunk's n weights from w (base + j its taps' distances) into s_w, padded as slide4
 * wants, by the block's nt threads, thread t. */
__device__ __forceinline__ void stage_weights(double *s_w, const double *w, int base, int n, int t,
                                              int nt) {
  for (int j = t; j < n + 3 + REF_WPAD; j += nt)
    s_w[j] = j >= 3 && j < n + 3 ? w[abs(base + j - 3)] : 0.0;
}

/* Row pass: a thread has the 4 adjacent outputs 4 tx + q. The pixels are staged lane by lane,
 * sample j at j + j / 4: 4 apart for neighbouring threads, which the padding spreads over
 * distinct banks. */
#define REF_T  128 /* threads per row block */
#define REF_CH 256 /* taps per chunk */
__device__ __forceinline__ int ref_pad(int j) {
  return j + j / 4;
}
__host__ __device__ inline int ref_rows_plane(int r) { /* the doubles a lane stages */
  return (4 * REF_T + (2 * r + 1 < REF_CH ? 2 * r + 1 : REF_CH) + 4) * 5 / 4;
}

/* Plane row j holds image row y_first + j. */
template <int L>
__global__ void ref_rows(packed in, double *ref, const double *w, int r, int y_first) {
  extern __shared__ double s_raw_d[];
  __shared__ __align__(16) double s_w[REF_CH + 3 + REF_WPAD];
  double *s[L];
#pragma unroll
  for (int c = 0; c < L; c++) s[c] = s_raw_d + c * ref_rows_plane(r);
  int y = y_first + blockIdx.y, x0 = blockIdx.x * 4 * REF_T, tx = threadIdx.x;
  double acc[4][L] = {};
  int ch = 2 * r + 1 < REF_CH ? 2 * r + 1 : REF_CH;
  for (int base = -r; base <= r; base += ch) {
    int n = base + ch - 1 < r ? ch : r - base + 1; /* taps in this chunk */
    /* n + 3 samples past the first output's, rounded up to slide4's groups of 4 */
    for (int j = tx; j < 4 * REF_T + n + 3; j += REF_T) {
      v4<double> v = load_px<double>(in, clampi(x0 + base + j, 0, in.w - 1), y);
#pragma unroll
      for (int c = 0; c < L; c++) s[c][ref_pad(j)] = v.l[c];
    }
    stage_weights(s_w, w, base, n, tx, REF_T);
    __syncthreads();
    slide4<L>(acc, s, s_w, n, 5 * tx, 5, 1); /* ref_pad(4 tx + 4 g + u) */
    __syncthreads();
  }
  for (int q = 0; q < 4; q++) {
    int x = x0 + 4 * tx + q;
    if (x < in.w)
      for (int c = 0; c < L; c++) ref[((size_t)blockIdx.y * in.w + x) * L + c] = acc[q][c];
  }
}

/* Writes a block's squared errors and largest error to part[2 b] and part[2 b + 1] (every
 * thread calls it): the warps' sums are added in order, so that the same image gives the same
 * bits (ref_sum adds the blocks' in order too). */
__device__ __forceinline__ void block_stats(double *part, size_t b, double sse, double max) {
  __shared__ double s_red[32][2];
  for (int o = 16; o > 0; o /= 2) {
    sse += __shfl_down_sync(0xffffffff, sse, o);
    max = fmax(max, __shfl_down_sync(0xffffffff, max, o));
  }
  int t = threadIdx.y * blockDim.x + threadIdx.x, nw = blockDim.x * blockDim.y / 32;
  if ((t & 31) == 0) s_red[t / 32][0] = sse, s_red[t / 32][1] = max;
  __syncthreads();
  if (t == 0) {
    for (int i = 1; i < nw; i++) sse += s_red[i][0], max = fmax(max, s_red[i][1]);
    part[2 * b] = sse, part[2 * b + 1] = max;
  }
}

/* stats[0] = the sum of the n blocks' squared errors, stats[1] = the largest error: one block
 * of REF_SUM threads, each adding every REF_SUM-th block in order, then a tree. */
#define REF_SUM 1024
__global__ void ref_sum(const double *part, size_t n, double *stats) {
  __shared__ double s_sse[REF_SUM], s_max[REF_SUM];
  double sse = 0, max = 0;
  for (size_t b = threadIdx.x; b < n; b += REF_SUM)
    sse += part[2 * b], max = fmax(max, part[2 * b + 1]);
  s_sse[threadIdx.x] = sse, s_max[threadIdx.x] = max;
  __syncthreads();
  for (int h = REF_SUM / 2; h > 0; h /= 2) {
    if ((int)threadIdx.x < h) {
      s_sse[threadIdx.x] += s_sse[threadIdx.x + h];
      s_max[threadIdx.x] = fmax(s_max[threadIdx.x], s_max[threadIdx.x + h]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) stats[0] = s_sse[0], stats[1] = s_max[0];
}

/* Squared error and largest error of the output pixel against the reference's lanes ref. */
__device__ __forceinline__ void pixel_error(const packed &out, int x, int y, const v4<double> &ref,
                                            double *sse, double *max) {
  size_t i = ((size_t)y * out.w + x) * out.c;
  int alpha = out.c == 2 || out.c == 4;
  double a = raw_sample(out, i + out.c - 1) / (double)((1 << out.depth) - 1);
  for (int c = 0; c < out.c; c++) {
    double v = raw_sample(out, i + c);
    if (alpha && c < out.c - 1) v *= a;
    double d = fabs(v - ref.l[c]);
    d = d < REF_NOISE ? 0 : d;
    *sse += d * d;
    *max = fmax(*max, d);
  }
}

/* Column pass, compared with the method's output instead of stored: a block of REF_CW x 16
 * threads owns REF_CW columns and 64 output rows, a thread the 4 adjacent rows 4 ty + q. The
 * rows are staged lane by lane, up to REF_CCH taps per chunk: the tall block reads each row of
 * the double plane about (64 + 2r) / 64 times (2.5 at radius 48). The plane holds image rows
 * pf to pl (those a strip of output rows from y_out, a multiple of REF_CR, reads), and rows past
 * them are read as their nearest: the image's edge, or rows only slide4's zero weights reach. */
#define REF_CW  16                                     /* columns per column block */
#define REF_CR  64                                     /* output rows per column block */
#define REF_CCH 128                                    /* taps per chunk */
__host__ __device__ inline int ref_cols_chunk(int r) { /* taps per chunk at radius r */
  return 2 * r + 1 < REF_CCH ? 2 * r + 1 : REF_CCH;
}
__host__ __device__ inline int ref_cols_plane(int r) { /* the doubles a lane stages */
  return (REF_CR + ref_cols_chunk(r) + 4) * REF_CW;
}
template <int L>
__global__ void ref_cols(const double *ref, packed out, const double *w, int r, double *part,
                         int y_out, int pf, int pl) {
  extern __shared__ double s_raw_d[];
  __shared__ __align__(16) double s_w[REF_CCH + 3 + REF_WPAD];
  double *s[L];
#pragma unroll
  for (int c = 0; c < L; c++) s[c] = s_raw_d + c * ref_cols_plane(r);
  int tx = threadIdx.x, ty = threadIdx.y, x = blockIdx.x * REF_CW + tx,
      y0 = y_out + blockIdx.y * REF_CR;
  double acc[4][L] = {};
  int ch = ref_cols_chunk(r);
  for (int base = -r; base <= r; base += ch) {
    int n = base + ch - 1 < r ? ch : r - base + 1;
    stage_weights(s_w, w, base, n, ty * REF_CW + tx, 16 * REF_CW);
    for (int j = ty; j < REF_CR + n + 3; j += 16) {
      const double *p = ref + ((size_t)(clampi(y0 + base + j, pf, pl) - pf) * out.w + x) * L;
#pragma unroll
      for (int c = 0; c < L; c++) s[c][j * REF_CW + tx] = x < out.w ? p[c] : 0.0;
    }
    __syncthreads();
    slide4<L>(acc, s, s_w, n, 4 * ty * REF_CW + tx, 4 * REF_CW, REF_CW);
    __syncthreads();
  }
  double sse = 0, max = 0;
#pragma unroll
  for (int q = 0; q < 4; q++) {
    v4<double> d = v4_zero<double>(); /* the lanes by value: acc stays in registers */
#pragma unroll
    for (int c = 0; c < L; c++) d.l[c] = acc[q][c];
    int y = y0 + 4 * ty + q;
    if (x < out.w && y < out.h) pixel_error(out, x, y, d, &sse, &max);
  }
  block_stats(part, (size_t)(y0 / REF_CR) * gridDim.x + blockIdx.x, sse, max);
}

/* The column pass's grid. */
static dim3 cols_grid(int w, int h) {
  return dim3(div_up(w, REF_CW), div_up(h, REF_CR));
}

/* The output rows of a strip of the reference: the whole image when its double plane fits in
 * REF_PLANE_BYTES, else the most whole column blocks whose plane (with r rows above and below)
 * does, but at least 4 r rows, so that the rows computed twice stay under half the work. */
#define REF_PLANE_BYTES ((size_t)128 << 20)
static int ref_strip(int w, int h, int c, int r) {
  long fit = (long)(REF_PLANE_BYTES / ((size_t)w * c * sizeof(double))) - 2 * r;
  long s = fit / REF_CR * REF_CR, least = div_up(4 * r > REF_CR ? 4 * r : REF_CR, REF_CR) * REF_CR;
  s = s < least ? least : s;
  return s >= h ? h : (int)s;
}

/* The plane's rows: a strip's and r above and below it, at most the image's. */
static int ref_plane_rows(int w, int h, int c, int r) {
  int rows = ref_strip(w, h, c, r) + 2 * r;
  return rows < h ? rows : h;
}

size_t reference_bytes(int w, int h, int c, int r) {
  dim3 g = cols_grid(w, h);
  return ((size_t)w * ref_plane_rows(w, h, c, r) * c + 2 * (size_t)g.x * g.y) * sizeof(double);
}

/* Strip by strip: the rows pass for the plane rows pf to pl, then the columns pass for the strip's
 * output rows; the blocks' sums all go into part, and ref_sum adds them once. */
template <int L>
static cudaError_t launch_ref(packed in, packed out, double *ref, const double *wx, int rx,
                              const double *wy, int ry, double *stats, cudaStream_t s) {
  size_t smem = (size_t)L * ref_cols_plane(ry) * sizeof(double);
  int strip = ref_strip(in.w, in.h, L, ry);
  double *part = ref + (size_t)in.w * ref_plane_rows(in.w, in.h, L, ry) * L; /* the blocks' sums */
  dim3 grid = cols_grid(in.w, in.h);
  smem_allow_max((const void *)ref_cols<L>); /* smem grows with ry */
  for (int y = 0; y < in.h; y += strip) {
    int end = y + strip < in.h ? y + strip : in.h;
    int pf = y - ry > 0 ? y - ry : 0, pl = end - 1 + ry < in.h - 1 ? end - 1 + ry : in.h - 1;
    ref_rows<L><<<dim3(div_up(in.w, 4 * REF_T), pl - pf + 1), REF_T,
                  L * ref_rows_plane(rx) * sizeof(double), s>>>(in, ref, wx, rx, pf);
    ref_cols<L><<<dim3(grid.x, div_up(end - y, REF_CR)), dim3(REF_CW, 16), smem, s>>>(
        ref, out, wy, ry, part, y, pf, pl);
  }
  ref_sum<<<1, REF_SUM, 0, s>>>(part, (size_t)grid.x * grid.y, stats);
  return cudaGetLastError();
}

cudaError_t launch_reference(packed in, packed out, void *d_ref, const double *d_wx, int rx,
                             const double *d_wy, int ry, double *d_stats, cudaStream_t s) {
  double *ref = (double *)d_ref;
  switch (in.c) {
  case 1:
    return launch_ref<1>(in, out, ref, d_wx, rx, d_wy, ry, d_stats, s);
  case 2:
    return launch_ref<2>(in, out, ref, d_wx, rx, d_wy, ry, d_stats, s);
  case 3:
    return launch_ref<3>(in, out, ref, d_wx, rx, d_wy, ry, d_stats, s);
  default:
    return launch_ref<4>(in, out, ref, d_wx, rx, d_wy, ry, d_stats, s);
  }
}

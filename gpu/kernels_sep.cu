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

/* The reference's row pass. A thread has 4 adjacent outputs, 4 x + q, and slides one window of
 * weights over the staged pixels (as cols_slide), so each staged sample is read once from shared
 * memory for 4 outputs. The pixels are staged lane by lane, and sample j sits at j + j / 4: 4
 * apart for neighbouring threads, which the padding spreads over distinct banks. The taps are
 * taken in the order one output at a time would take them, so the sums are sep_rows<double>'s,
 * bit for bit (ncu, 1920x1080 RGB, sigma 12, H100: 198 us, where one output a thread took 614). */
#define REF_T  128 /* threads per row block */
#define REF_CH 256 /* taps per chunk */
__device__ __forceinline__ int ref_pad(int j) {
  return j + j / 4;
}

__global__ void ref_rows(packed in, v4<double> *ref, const double *w, int r) {
  __shared__ double s[4][(4 * REF_T + REF_CH) * 5 / 4];
  __shared__ double s_w[REF_CH];
  int y = blockIdx.y, x0 = blockIdx.x * 4 * REF_T, tx = threadIdx.x;
  v4<double> acc[4] = {v4_zero<double>(), v4_zero<double>(), v4_zero<double>(), v4_zero<double>()};
  int ch = 2 * r + 1 < REF_CH ? 2 * r + 1 : REF_CH;
  for (int base = -r; base <= r; base += ch) {
    int n = base + ch - 1 < r ? ch : r - base + 1; /* taps in this chunk */
    for (int j = tx; j < 4 * REF_T + n - 1; j += REF_T) {
      v4<double> v = load_px<double>(in, clampi(x0 + base + j, 0, in.w - 1), y);
      for (int c = 0; c < 4; c++) s[c][ref_pad(j)] = v.l[c];
    }
    for (int j = tx; j < n; j += REF_T) s_w[j] = w[abs(base + j)];
    __syncthreads();
    double wq[4] = {0, 0, 0, 0};
    for (int i = 0; i < n + 3; i++) {
      wq[3] = wq[2], wq[2] = wq[1], wq[1] = wq[0];
      wq[0] = i < n ? s_w[i] : 0.0;
      int p = ref_pad(4 * tx + i);
#pragma unroll
      for (int c = 0; c < 4; c++) {
        double v = s[c][p];
#pragma unroll
        for (int q = 0; q < 4; q++) acc[q].l[c] += wq[q] * v;
      }
    }
    __syncthreads();
  }
  for (int q = 0; q < 4; q++) {
    int x = x0 + 4 * tx + q;
    if (x < in.w) ref[(size_t)y * in.w + x] = acc[q];
  }
}

__device__ __forceinline__ void stats_add(double *stats, double sse, double max) {
  for (int o = 16; o > 0; o /= 2) {
    sse += __shfl_down_sync(0xffffffff, sse, o);
    max = fmax(max, __shfl_down_sync(0xffffffff, max, o));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&stats[0], sse);
    atomicMax((unsigned long long *)&stats[1], (unsigned long long)__double_as_longlong(max));
  }
}

/* Squared error and largest error of the output pixel against reference lanes ref. */
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

/* The reference's column taps for one chunk of n taps (their weights in w): this thread's 4
 * outputs are the adjacent rows 4 ty + q, so each staged row is read once from shared memory and
 * added into all 4 sums with a sliding window of weights (wq[q] is the weight of row i for output
 * q, 0 outside the chunk). The sums take the taps in the same order as one output at a time
 * would. */
template <class R>
__device__ __forceinline__ void cols_slide(v4<R> *acc, const v4<R> *s, const R *w, int n, int ty,
                                           int tx) {
  R wq[4] = {0, 0, 0, 0};
  for (int i = 0; i < n + 3; i++) {
    wq[3] = wq[2], wq[2] = wq[1], wq[1] = wq[0];
    wq[0] = i < n ? w[i] : (R)0;
    v4<R> v = s[(4 * ty + i) * COL_W + tx];
#pragma unroll
    for (int q = 0; q < 4; q++) v4_fma(acc[q], wq[q], v);
  }
}

/* Column pass: a block of COL_W x 8 threads owns COL_W columns and COL_R output rows; a thread
 * has 4 of them, rows ty + 8q (separable) or 4 ty + q (the reference, see cols_slide). The
 * chunk's weights are staged in shared memory. The reference takes twice the taps per chunk,
 * so that the rows staged for the chunks' overlap are read fewer times from the double plane. */
template <class R, bool REF>
__global__ void sep_cols(mid m, const v4<double> *ref, packed out, const R *w, int r,
                         double *stats) {
  constexpr int CH = REF ? 2 * COL_CH : COL_CH;
  extern __shared__ unsigned char s_raw[];
  __shared__ R s_w[CH];
  v4<R> *s = (v4<R> *)s_raw; /* (COL_R + CH) rows of COL_W */
  int tx = threadIdx.x, ty = threadIdx.y, x = blockIdx.x * COL_W + tx, y0 = blockIdx.y * COL_R;
  v4<R> acc[COL_R / 8];
  for (int q = 0; q < COL_R / 8; q++) acc[q] = v4_zero<R>();
  int ch = 2 * r + 1 < CH ? 2 * r + 1 : CH; /* taps per chunk */
  for (int base = -r; base <= r; base += ch) {
    int kend = base + ch - 1 < r ? base + ch - 1 : r;
    for (int j = ty * COL_W + tx; j <= kend - base; j += 8 * COL_W) s_w[j] = w[abs(base + j)];
    for (int j = ty; j < COL_R + ch - 1; j += 8) {
      int yy = clampi(y0 + base + j, 0, out.h - 1);
      v4<R> v = v4_zero<R>();
      if (x < out.w && REF) {
        v4<double> d = ref[(size_t)yy * out.w + x];
        for (int c = 0; c < 4; c++) v.l[c] = (R)d.l[c];
      } else if (x < out.w) {
        v = load_mid<R>(m, x, yy);
      }
      s[j * COL_W + tx] = v;
    }
    __syncthreads();
    if (REF) {
      cols_slide<R>(acc, s, s_w, kend - base + 1, ty, tx);
    } else {
      for (int q = 0; q < COL_R / 8; q++) {
        int oy = ty + 8 * q;
        for (int k = base; k <= kend; k++)
          v4_fma(acc[q], s_w[k - base], s[(oy + k - base) * COL_W + tx]);
      }
    }
    __syncthreads();
  }
  double sse = 0, max = 0;
  for (int q = 0; q < COL_R / 8; q++) {
    int y = y0 + (REF ? 4 * ty + q : ty + 8 * q);
    if (x >= out.w || y >= out.h) continue;
    if (REF) {
      v4<double> d;
      for (int c = 0; c < 4; c++) d.l[c] = acc[q].l[c];
      pixel_error(out, x, y, d, &sse, &max);
    } else {
      store_px<R>(out, x, y, acc[q]);
    }
  }
  if (REF) stats_add(stats, sse, max);
}

template <class R, bool REF>
static cudaError_t launch_both(packed in, packed out, mid m, v4<double> *ref, const R *w, int r,
                               double *stats, cudaStream_t s) {
  dim3 cg(div_up(in.w, COL_W), div_up(in.h, COL_R));
  size_t smem = (size_t)(COL_R + (REF ? 2 : 1) * COL_CH) * COL_W * sizeof(v4<R>);
  if constexpr (REF)
    ref_rows<<<dim3(div_up(in.w, 4 * REF_T), in.h), REF_T, 0, s>>>(in, ref, w, r);
  else
    sep_rows<R><<<dim3(div_up(in.w, ROW_T), in.h), ROW_T, 0, s>>>(in, m, w, r);
  cudaFuncSetAttribute(sep_cols<R, REF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  sep_cols<R, REF><<<cg, dim3(COL_W, 8), smem, s>>>(m, ref, out, w, r, stats);
  return cudaGetLastError();
}

cudaError_t launch_separable(packed in, packed out, mid m, const float *d_w, int r,
                             cudaStream_t s) {
  return launch_both<float, false>(in, out, m, NULL, d_w, r, NULL, s);
}

cudaError_t launch_reference(packed in, packed out, void *d_ref, const double *d_w, int r,
                             double *d_stats, cudaStream_t s) {
  mid none = {NULL, in.w, in.h, 0};
  return launch_both<double, true>(in, out, none, (v4<double> *)d_ref, d_w, r, d_stats, s);
}

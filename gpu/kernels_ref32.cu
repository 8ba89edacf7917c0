/* The PSNR's reference in single precision, with a proven bound on its error (docs/methods.md,
 * "PSNR"): the same separable Gaussian as the double reference (kernels_sep.cu), summed so that
 * every partial sum is small and non-negative. A thread has 8 adjacent outputs of one lane; the
 * taps are taken in symmetric pairs from the tails inward, w_m (y[i - m] + y[i + m]) for m = R8
 * down to 1 (R8: the radius rounded up to 8, the weights past the radius 0), into four accumulators
 * by m mod 4, which are added and then the centre tap w_0 y[i]. Two windows of 8
 * samples slide through registers, one load each a pair. The row pass writes a float plane (the
 * image's lanes, colour premultiplied, a plane each); the column pass compares the method's output
 * with its sums in double, counting an error under the threshold `tau` (the bound plus 1e-6) as
 * none, and each block writes its sum of squared errors, sum of absolute errors and largest error;
 * one block adds them in order (the same image gives the same bits). gpu.cu's run_psnr decides from
 * the sums whether the result is certain to within 0.01 dB, and runs the double reference when it
 * is not. */
#include "gpu_int.cuh"

#define R32_P  8   /* outputs a thread */
#define R32_T  128 /* threads a row block: R32_T * R32_P outputs */
#define R32_CW 32  /* columns a column block */
#define R32_CT 8   /* threads down a column block: R32_CT * R32_P output rows */
#define R32_CR (R32_CT * R32_P)

/* Staged sample j of the row pass at j + j / 8: threads 8 samples apart hit distinct banks. */
__host__ __device__ __forceinline__ int r32_pad(int j) {
  return j + (j >> 3);
}

/* Sample j of a staged line: the row pass's padded line, or the column pass's column tx of rows of
 * R32_CW. */
template <bool COL> __device__ __forceinline__ float r32_at(const float *s, int j, int tx) {
  return COL ? s[j * R32_CW + tx] : s[r32_pad(j)];
}

/* The 8 sums h[i] = w0 y[J + i] + sum over m of w[m] (y[J + i - m] + y[J + i + m]) of a staged
 * line s (weights w[0..r8], r8 a multiple of 8), each into 4 accumulators by m mod 4, added as
 * (a0 + a1) + (a2 + a3). Window slot (i + u) & 7 of lo holds y[J + i - m] and slot (i - u) & 7 of
 * hi holds y[J + i + m] at step u of each group of 8 taps: each step loads one new sample into
 * each, and after 8 steps the slots are where they started. */
template <bool COL>
__device__ __forceinline__ void r32_line(const float *s, const float *w, int r8, int J, int tx,
                                         float h[R32_P]) {
  float lo[8], hi[8], a[4][8];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    lo[i] = r32_at<COL>(s, J + i - r8, tx), hi[i] = r32_at<COL>(s, J + i + r8, tx);
#pragma unroll
    for (int k = 0; k < 4; k++) a[k][i] = 0.f;
  }
  for (int m0 = r8; m0 > 0; m0 -= 8) {
#pragma unroll
    for (int u = 0; u < 8; u++) {
      int m = m0 - u;
      float wm = w[m];
#pragma unroll
      for (int i = 0; i < 8; i++)
        a[u & 3][i] = fmaf(wm, lo[(i + u) & 7] + hi[(i - u) & 7], a[u & 3][i]);
      lo[u] = r32_at<COL>(s, J + 8 - m, tx);
      hi[(7 - u) & 7] = r32_at<COL>(s, J + m - 1, tx);
    }
  }
#pragma unroll
  for (int i = 0; i < 8; i++)
    h[i] = fmaf(w[0], r32_at<COL>(s, J + i, tx), (a[0][i] + a[1][i]) + (a[2][i] + a[3][i]));
}

__host__ __device__ inline int r32_row_span(int r8) { /* floats a lane stages in the row pass */
  return r32_pad(R32_T * R32_P + 2 * r8) + 1;
}

/* Row pass: plane row j (of lane c: plane + (c * rows + j) * pitch) is image row y_first + j. */
template <int L>
__global__ void r32_rows(packed in, float *plane, int pitch, int rows, const float *w, int r8,
                         int y_first) {
  extern __shared__ float s_r32[];
  float *s_w = s_r32 + L * r32_row_span(r8);
  int y = y_first + blockIdx.y, x0 = blockIdx.x * R32_T * R32_P, t = threadIdx.x;
  for (int j = t; j < R32_T * R32_P + 2 * r8; j += R32_T) {
    v4<float> v = load_px<float>(in, clampi(x0 - r8 + j, 0, in.w - 1), y);
#pragma unroll
    for (int c = 0; c < L; c++) s_r32[c * r32_row_span(r8) + r32_pad(j)] = v.l[c];
  }
  for (int j = t; j <= r8; j += R32_T) s_w[j] = w[j];
  __syncthreads();
  int x = x0 + R32_P * t;
  if (x >= in.w) return;
#pragma unroll
  for (int c = 0; c < L; c++) {
    float h[R32_P];
    r32_line<false>(s_r32 + c * r32_row_span(r8), s_w, r8, r8 + R32_P * t, 0, h);
    float4 *o = (float4 *)(plane + ((size_t)c * rows + blockIdx.y) * pitch + x);
    o[0] = make_float4(h[0], h[1], h[2], h[3]); /* pitch: a multiple of 4, past the width */
    if (x + 4 < in.w) o[1] = make_float4(h[4], h[5], h[6], h[7]);
  }
}

/* A block's three sums (every thread calls it), its warps' added in order. */
__device__ __forceinline__ void r32_block_stats(double *part, size_t b, double v[3]) {
  __shared__ double s_red[32][3];
  for (int o = 16; o > 0; o /= 2) {
    v[0] += __shfl_down_sync(0xffffffff, v[0], o);
    v[1] += __shfl_down_sync(0xffffffff, v[1], o);
    v[2] = fmax(v[2], __shfl_down_sync(0xffffffff, v[2], o));
  }
  int t = threadIdx.y * blockDim.x + threadIdx.x, nw = blockDim.x * blockDim.y / 32;
  if ((t & 31) == 0) s_red[t / 32][0] = v[0], s_red[t / 32][1] = v[1], s_red[t / 32][2] = v[2];
  __syncthreads();
  if (t == 0) {
    for (int i = 1; i < nw; i++)
      v[0] += s_red[i][0], v[1] += s_red[i][1], v[2] = fmax(v[2], s_red[i][2]);
    part[3 * b] = v[0], part[3 * b + 1] = v[1], part[3 * b + 2] = v[2];
  }
}

/* The output's error at (x, y) against the lanes ref (L: the image's channels), in double: an
 * error under tau counts as none (premultiplied colour, as pixel_error in kernels_sep.cu). */
template <int L>
__device__ __forceinline__ void r32_error(const packed &out, int x, int y, const float (&ref)[L],
                                          double tau, double v[3]) {
  size_t i = ((size_t)y * out.w + x) * L;
  const bool alpha = L == 2 || L == 4;
  double a = raw_sample(out, i + L - 1) / (double)((1 << out.depth) - 1);
#pragma unroll
  for (int c = 0; c < L; c++) {
    double s = raw_sample(out, i + c);
    if (alpha && c < L - 1) s *= a;
    double d = fabs(s - (double)ref[c]);
    d = d < tau ? 0 : d;
    v[0] += d * d, v[1] += d, v[2] = fmax(v[2], d);
  }
}

/* Column pass: a block of R32_CW x R32_CT threads owns R32_CW columns and R32_CR output rows
 * from y_out (a strip's first row, a multiple of R32_CR), a thread 8 adjacent rows. The plane
 * holds image rows pf to pl; rows past them are read as their nearest (the image's edge, or rows
 * that only the zero weights past the radius reach). */
template <int L>
__global__ void r32_cols(const float *plane, int pitch, int rows, packed out, const float *w,
                         int r8, double tau, double *part, int y_out, int pf, int pl) {
  extern __shared__ float s_r32[]; /* L lines of (R32_CR + 2 r8) rows of R32_CW, then weights */
  int span = (R32_CR + 2 * r8) * R32_CW;
  float *s_w = s_r32 + L * span;
  int tx = threadIdx.x, ty = threadIdx.y, x = blockIdx.x * R32_CW + tx;
  int y0 = y_out + blockIdx.y * R32_CR, t = ty * R32_CW + tx;
  for (int j = t; j <= r8; j += R32_CW * R32_CT) s_w[j] = w[j];
  for (int j = ty; j < R32_CR + 2 * r8; j += R32_CT) { /* every lane at once: one wait */
    int row = clampi(clampi(y0 - r8 + j, 0, out.h - 1), pf, pl) - pf;
#pragma unroll
    for (int c = 0; c < L; c++)
      s_r32[c * span + j * R32_CW + tx] =
          x < out.w ? plane[((size_t)c * rows + row) * pitch + x] : 0.f;
  }
  __syncthreads();
  float ref[R32_P][L];
#pragma unroll
  for (int c = 0; c < L; c++) {
    float h[R32_P];
    r32_line<true>(s_r32 + c * span, s_w, r8, r8 + R32_P * ty, tx, h);
#pragma unroll
    for (int i = 0; i < R32_P; i++) ref[i][c] = h[i];
  }
  double v[3] = {0, 0, 0};
#pragma unroll
  for (int i = 0; i < R32_P; i++) {
    int y = y0 + R32_P * ty + i;
    if (x < out.w && y < out.h) r32_error<L>(out, x, y, ref[i], tau, v);
  }
  r32_block_stats(part, (size_t)(y0 / R32_CR) * gridDim.x + blockIdx.x, v);
}

/* stats[0..2]: the n blocks' sums of squared and of absolute errors, and the largest error. */
#define R32_SUM 1024
__global__ void r32_sum(const double *part, size_t n, double *stats) {
  __shared__ double s[3][R32_SUM];
  double v[3] = {0, 0, 0};
  for (size_t b = threadIdx.x; b < n; b += R32_SUM)
    v[0] += part[3 * b], v[1] += part[3 * b + 1], v[2] = fmax(v[2], part[3 * b + 2]);
  for (int k = 0; k < 3; k++) s[k][threadIdx.x] = v[k];
  __syncthreads();
  for (int h = R32_SUM / 2; h > 0; h /= 2) {
    if ((int)threadIdx.x < h) {
      s[0][threadIdx.x] += s[0][threadIdx.x + h];
      s[1][threadIdx.x] += s[1][threadIdx.x + h];
      s[2][threadIdx.x] = fmax(s[2][threadIdx.x], s[2][threadIdx.x + h]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) stats[0] = s[0][0], stats[1] = s[1][0], stats[2] = s[2][0];
}

/* ---- host side: strips, sizes, launches ---- */

static int r32_pitch(int w) {
  return (w + 3) / 4 * 4;
}

/* Output rows of a strip: the whole image when its float plane fits in R32_PLANE_BYTES, else the
 * most whole column blocks whose plane (with r8 rows above and below) does, but at least 4 r8. */
#define R32_PLANE_BYTES ((size_t)64 << 20)
static int r32_strip(int w, int h, int c, int r8) {
  long fit = (long)(R32_PLANE_BYTES / ((size_t)r32_pitch(w) * c * sizeof(float))) - 2 * r8;
  long s = fit / R32_CR * R32_CR, least = div_up(4 * r8, R32_CR) * R32_CR;
  s = s < least ? least : s;
  return s >= h ? h : (int)s;
}

static int r32_plane_rows(int w, int h, int c, int r8) {
  int rows = r32_strip(w, h, c, r8) + 2 * r8;
  return rows < h ? rows : h;
}

static dim3 r32_cols_grid(int w, int h) {
  return dim3(div_up(w, R32_CW), div_up(h, R32_CR));
}

size_t reference32_bytes(int w, int h, int c, int r8) {
  dim3 g = r32_cols_grid(w, h);
  size_t plane = (size_t)r32_pitch(w) * r32_plane_rows(w, h, c, r8) * c * sizeof(float);
  return (plane + 15) / 16 * 16 + 3 * (size_t)g.x * g.y * sizeof(double);
}

template <int L>
static cudaError_t launch_r32(packed in, packed out, void *d_ref, const float *wx, int rx8,
                              const float *wy, int ry8, double tau, double *stats, cudaStream_t s) {
  int pitch = r32_pitch(in.w), rows = r32_plane_rows(in.w, in.h, L, ry8);
  int strip = r32_strip(in.w, in.h, L, ry8);
  float *plane = (float *)d_ref;
  size_t pbytes = ((size_t)pitch * rows * L * sizeof(float) + 15) / 16 * 16;
  double *part = (double *)((char *)d_ref + pbytes);
  dim3 grid = r32_cols_grid(in.w, in.h);
  size_t rsmem = ((size_t)L * r32_row_span(rx8) + rx8 + 1) * sizeof(float);
  size_t csmem = ((size_t)L * (R32_CR + 2 * ry8) * R32_CW + ry8 + 1) * sizeof(float);
  smem_allow_max((const void *)r32_rows<L>);
  smem_allow_max((const void *)r32_cols<L>);
  for (int y = 0; y < in.h; y += strip) {
    int end = y + strip < in.h ? y + strip : in.h;
    int pf = y - ry8 > 0 ? y - ry8 : 0, pl = end - 1 + ry8 < in.h - 1 ? end - 1 + ry8 : in.h - 1;
    r32_rows<L><<<dim3(div_up(in.w, R32_T * R32_P), pl - pf + 1), R32_T, rsmem, s>>>(
        in, plane, pitch, rows, wx, rx8, pf);
    r32_cols<L><<<dim3(grid.x, div_up(end - y, R32_CR)), dim3(R32_CW, R32_CT), csmem, s>>>(
        plane, pitch, rows, out, wy, ry8, tau, part, y, pf, pl);
  }
  r32_sum<<<1, R32_SUM, 0, s>>>(part, (size_t)grid.x * grid.y, stats);
  return cudaGetLastError();
}

cudaError_t launch_reference32(packed in, packed out, void *d_ref, const float *d_wx, int rx8,
                               const float *d_wy, int ry8, double tau, double *d_stats,
                               cudaStream_t s) {
  switch (in.c) {
  case 1:
    return launch_r32<1>(in, out, d_ref, d_wx, rx8, d_wy, ry8, tau, d_stats, s);
  case 2:
    return launch_r32<2>(in, out, d_ref, d_wx, rx8, d_wy, ry8, tau, d_stats, s);
  case 3:
    return launch_r32<3>(in, out, d_ref, d_wx, rx8, d_wy, ry8, tau, d_stats, s);
  default:
    return launch_r32<4>(in, out, d_ref, d_wx, rx8, d_wy, ry8, tau, d_stats, s);
  }
}

/* The PSNR's fast references, each with a proven bound on its error (docs/methods.md, "PSNR"):
 * in integers on the tensor cores for 8-bit images without alpha (the second half of this file),
 * and in single precision for the rest. Each one's column pass writes, block by block, the sums of
 * squared and of absolute errors and the largest error, added in order by one block (the same
 * image gives the same bits); gpu.cu's run_psnr decides from the sums whether the result is
 * certain to within 0.01 dB, and runs the double reference when it is not. */
#include "gpu_int.cuh"

/* ---- the single-precision reference ----
 * The same separable Gaussian as the double reference (kernels_sep.cu), summed so that every
 * partial sum is small and non-negative. A thread has 8 adjacent outputs of one lane; the taps are
 * taken in symmetric pairs from the tails inward, w_m (y[i - m] + y[i + m]) for m = R8 down to 1
 * (R8: the radius rounded up to 8, the weights past the radius 0), into four accumulators by m mod
 * 4, which are added and then the centre tap w_0 y[i]. Two windows of 8 samples slide through
 * registers, one load each a pair. The row pass writes a float plane (the image's lanes, colour
 * premultiplied, a plane each); the column pass compares the method's output with its sums in
 * double, counting an error under the threshold `tau` (the bound plus 1e-6) as none. */

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

/* Output rows of a strip of either fast reference: the whole image when its plane (row_bytes a
 * row, with halo rows above and below and pad rows more) fits in R32_PLANE_BYTES, else the most
 * whole column blocks of `block` rows whose plane does, but at least 4 halo. */
#define R32_PLANE_BYTES ((size_t)64 << 20)
static int ref_strip(size_t row_bytes, int h, int halo, int pad, int block) {
  long fit = (long)(R32_PLANE_BYTES / row_bytes) - 2 * halo - pad;
  long s = fit / block * block, least = div_up(4 * halo, block) * block;
  s = s < least ? least : s;
  return s >= h ? h : (int)s;
}

/* The image rows a strip's plane holds: the strip and its halo rows above and below, at most h. */
static int ref_plane_rows(int strip, int halo, int h) {
  return strip + 2 * halo < h ? strip + 2 * halo : h;
}

static int r32_strip(int w, int h, int c, int r8) {
  return ref_strip((size_t)r32_pitch(w) * c * sizeof(float), h, r8, 0, R32_CR);
}

static int r32_plane_rows(int w, int h, int c, int r8) {
  return ref_plane_rows(r32_strip(w, h, c, r8), r8, h);
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

/* ---- the integer reference on the tensor cores (8-bit images without alpha) ----
 *
 * Each pass's weights are integers q_m = round(w_m 2^S) under 2^24 (S the largest that keeps
 * q_0 there), split into 3 bytes, and a pass is a product of integer matrices on mma.sync's
 * u8 x u8 -> s32 path, which is exact: for 16 outputs of 8 lines at once, A is the 16 x 32 block
 * of the Toeplitz matrix of one weight byte at k-step s (A[i][k] = byte b of q[|32 s + k - i - R|],
 * 0 past the radius r; R is r rounded up to 8), B the 32 input samples of each line from the
 * tile's first output - R + 32 s. The row pass multiplies the image's bytes by the 3 weight bytes
 * and rounds each sum to hq = round(h 2^16) (24 bits: 8 above the point, 16 below), written as
 * three byte planes in column order (a column's rows adjacent), which the column pass reads as
 * its lines: 3 input bytes times 3 weight bytes, products of the same level a + b summed in one
 * accumulator (at most 3 x 255 x 255 x 321 < 2^31), added in 64-bit integers and scaled to the
 * reference in double. The only errors are the weights' rounding and hq's (docs/methods.md). */
#define RI_T  256 /* threads a block */
#define RI_RP 128 /* row pass: outputs along a line a block */
#define RI_CP 256 /* column pass: output rows a block */
#define RI_RL 32  /* lines a block: image rows (row pass) or columns (column pass) */

/* Samples staged a line for n outputs (the last tile's at n - 16, then its k-steps), and the bytes
 * a staged line takes: 16 past a multiple of 128, so that lines g = 0..7 start 4 banks apart. */
__host__ __device__ inline int ri_span(int ks, int n) {
  return 32 * ks + n - 16;
}

__host__ __device__ inline int ri_stride(int ks, int n) {
  return (ri_span(ks, n) + 127) / 128 * 128 + 16;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define RI_MMA 0 /* mma.sync's u8 shape m16n8k32 came with compute capability 8.0 */
#else
#define RI_MMA 1
#endif

/* d += a b over one k-step (a: 16 x 32 bytes, b: 32 x 8 bytes, fragments as mma.sync lays them). */
__device__ __forceinline__ void ri_mma(int (&d)[4], const uint4 &a, uint32_t b0, uint32_t b1) {
#if RI_MMA
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

/* Asynchronous copies from global to shared memory (cp.async, compute capability 8.0 on): the
 * staging issues every copy of a block before it waits for any (ri_async_wait), with no register
 * held for them. */
template <int N> /* 4, 8 or 16 bytes */
__device__ __forceinline__ void ri_async(void *dst, const void *src) {
#if RI_MMA
  unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  if (N == 4)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src));
  else if (N == 8)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src));
#else
  memcpy(dst, src, N);
#endif
}

/* Waits for this thread's copies; a __syncthreads after it makes every thread's visible. */
__device__ __forceinline__ void ri_async_wait() {
#if RI_MMA
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

/* acc[gi][a + b - LO] += the products of input byte plane a (NA planes, `plane` bytes apart) and
 * weight byte b over every k-step, for two groups of 8 lines (ls bytes a line; group gi from
 * line 8 gi), levels a + b under LO left out: ln is this lane's first sample, line g's staged
 * sample p0 + 4t. */
template <int NA, int LO>
__device__ __forceinline__ void ri_tile(const uint8_t *ln, int ls, int plane, const uint4 *s_a,
                                        int ks, int (&acc)[2][NA + 2 - LO][4]) {
  int lane = threadIdx.x & 31;
  for (int s = 0; s < ks; s++) {
    uint4 a[3];
#pragma unroll
    for (int b = 0; b < 3; b++) a[b] = s_a[(s * 3 + b) * 32 + lane];
#pragma unroll
    for (int gi = 0; gi < 2; gi++)
#pragma unroll
      for (int ai = 0; ai < NA; ai++) {
        const uint8_t *q = ln + gi * 8 * ls + ai * plane + 32 * s;
        uint32_t b0 = *(const uint32_t *)q, b1 = *(const uint32_t *)(q + 16);
#pragma unroll
        for (int b = 0; b < 3; b++)
          if (ai + b >= LO) ri_mma(acc[gi][ai + b - LO], a[b], b0, b1);
      }
  }
}

/* Copies the pass's A fragments (gpu.cu's ri_weights builds them) into shared memory,
 * asynchronously (ri_async_wait). */
__device__ __forceinline__ void ri_table_in(uint4 *s_a, const uint4 *table, int ks) {
  for (int j = threadIdx.x; j < ks * 3 * 32; j += RI_T) ri_async<16>(s_a + j, table + j);
}

/* Pixels x..x+3 of an 8-bit row of L lanes (1 or 3) at px, a word a lane: one word load for a
 * gray row, three for RGB, sorted into lanes with byte permutes. px: word-aligned. */
template <int L> __device__ __forceinline__ void ri_words(const uint8_t *px, uint32_t (&v)[L]) {
  const uint32_t *w = (const uint32_t *)px;
  if (L == 1) {
    v[0] = w[0];
  } else { /* w0 = r0 g0 b0 r1, w1 = g1 b1 r2 g2, w2 = b2 r3 g3 b3 */
    uint32_t a = w[0], b = w[1], c = w[2];
    v[0] = __byte_perm(__byte_perm(a, b, 0x0630), c, 0x5210);
    v[1 % L] = __byte_perm(__byte_perm(a, b, 0x0741), c, 0x6210);
    v[2 % L] = __byte_perm(__byte_perm(a, b, 0x0052), c, 0x7410);
  }
}

/* Row pass: plane rows 0..rows-1 are image rows pf..; output hq of lane c, column x, plane row y
 * goes to byte plane a at plane + ((a * L + c) * w + x) * hp + y (hp: a multiple of 32). A block
 * has RI_RL rows and RI_RP columns of every lane; a warp's task is 16 columns of 16 rows. Staging:
 * thread t takes row t / 8 and 4 pixels at a time from column 4 (t % 8), each lane's 4 bytes
 * stored as a word: whole words, 4 groups of pixels in flight, where the block's columns are
 * inside the image and rows start on a word, else byte by byte with the columns clamped. */
template <int L>
__global__ void __launch_bounds__(RI_T)
    ri_rows(packed in, uint8_t *plane, int hp, int rows, const uint4 *table, ri_pass p, int pf) {
  extern __shared__ __align__(16) uint8_t s_ri[];
  int ls = ri_stride(p.ks, RI_RP), span = ri_span(p.ks, RI_RP);
  uint4 *s_a = (uint4 *)s_ri;
  uint8_t *s_in = s_ri + p.ks * 3 * 32 * 16, *s_out = s_in + L * RI_RL * ls;
  int xb = blockIdx.x * RI_RP, yb = blockIdx.y * RI_RL, lane = threadIdx.x & 31;
  ri_table_in(s_a, table, p.ks);
  int i = threadIdx.x >> 3, y = pf + min(yb + i, rows - 1), x0 = xb - p.R;
  const uint8_t *row = (const uint8_t *)in.p + (size_t)y * in.w * L;
  uint8_t *dst = s_in + i * ls;
  if (x0 >= 0 && x0 + span <= in.w && (in.w * L) % 4 == 0) { /* 4 words of pixels in flight */
    for (int j = 4 * (threadIdx.x & 7); j < span; j += 128) {
      uint32_t v[4][L] = {};
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (j + 32 * u < span) ri_words<L>(row + (size_t)(x0 + j + 32 * u) * L, v[u]);
#pragma unroll
      for (int u = 0; u < 4; u++)
#pragma unroll
        for (int c = 0; c < L; c++)
          if (j + 32 * u < span) *(uint32_t *)(dst + c * RI_RL * ls + j + 32 * u) = v[u][c];
    }
  } else {
    for (int j = 4 * (threadIdx.x & 7); j < span; j += 32) {
      uint32_t v[L] = {};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const uint8_t *px = row + clampi(x0 + j + e, 0, in.w - 1) * L;
#pragma unroll
        for (int c = 0; c < L; c++) v[c] |= (uint32_t)px[c] << (8 * e);
      }
#pragma unroll
      for (int c = 0; c < L; c++) *(uint32_t *)(dst + c * RI_RL * ls + j) = v[c];
    }
  }
  ri_async_wait();
  __syncthreads();
  int sh = p.S - RI_F, g = lane >> 2, t = lane & 3;
  for (int task = threadIdx.x >> 5; task < L * 16; task += RI_T / 32) {
    int c = task >> 4, pt = (task >> 1) & 7, h = task & 1;
    int acc[2][3][4] = {};
    ri_tile<1, 0>(s_in + (c * RI_RL + h * 16 + g) * ls + pt * 16 + 4 * t, ls, 0, s_a, p.ks, acc);
#pragma unroll
    for (int gi = 0; gi < 2; gi++)
#pragma unroll
      for (int hr = 0; hr < 2; hr++) { /* lines 2t and 2t + 1 of one column: a 16-bit store */
        uint32_t hq[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
          long long v = acc[gi][0][2 * hr + e] + ((long long)acc[gi][1][2 * hr + e] << 8) +
                        ((long long)acc[gi][2][2 * hr + e] << 16);
          hq[e] = (uint32_t)((v + (1ll << (sh - 1))) >> sh);
        }
        int pos = pt * 16 + g + hr * 8, line = h * 16 + gi * 8 + 2 * t;
#pragma unroll
        for (int a = 0; a < 3; a++)
          *(uint16_t *)(s_out + ((a * L + c) * RI_RP + pos) * RI_RL + line) =
              (uint16_t)(((hq[0] >> (8 * a)) & 255u) | ((hq[1] >> (8 * a)) & 255u) << 8);
      }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < 3 * L * RI_RP * 2; k += RI_T) {
    int r = k >> 1, pos = r % RI_RP, ac = r / RI_RP;
    if (xb + pos < in.w)
      ((uint4 *)(plane + ((size_t)ac * in.w + xb + pos) * hp + yb))[k & 1] =
          ((const uint4 *)(s_out + r * RI_RL))[k & 1];
  }
}

/* The column pass's staging: thread t takes column t / 8 of the block and chunks of 8 rows
 * 8 (t % 8) + 64 m of its staged rows (y0 - R on) from the three byte planes: every chunk whose
 * rows are all in pf..pl copied whole and asynchronously (all of them in flight at once:
 * ri_async_wait; rows start 8-byte aligned, since hp is a multiple of 32 and y0, R and pf of 8);
 * then the few chunks at the strip's or the image's top and bottom byte by byte, rows outside
 * taking their nearest. */
template <int L>
__device__ __forceinline__ void ri_cols_in(uint8_t *s_in, int ls, int pst, int span,
                                           const uint8_t *plane, int hp, const packed &out, int xb,
                                           int y0, int R, int pf, int pl) {
  int i = threadIdx.x >> 3, x = min(xb + i, out.w - 1), j0 = 8 * (threadIdx.x & 7);
  const uint8_t *col = plane + ((size_t)blockIdx.z * out.w + x) * hp;
  size_t pstep = (size_t)L * out.w * hp; /* from one byte plane to the next */
  uint8_t *dst = s_in + i * ls;
  int lo = pf - (y0 - R), hi = pl - 7 - (y0 - R); /* chunks j from lo to hi are whole */
  const uint8_t *src = col + (y0 - R - pf);
  for (int k = max(j0, j0 + (lo - j0 + 63) / 64 * 64); k < span && k <= hi; k += 64)
#pragma unroll
    for (int a = 0; a < 3; a++) ri_async<8>(dst + a * pst + k, src + a * pstep + k);
  for (int j = j0; j < span; j += 64) {
    if (j >= lo && j <= hi) continue;
    uint32_t v[3][2] = {}; /* every load issued before the stores (they might alias) */
#pragma unroll
    for (int e = 0; e < 8; e++) {
      int k = clampi(clampi(y0 - R + j + e, 0, out.h - 1), pf, pl) - pf;
#pragma unroll
      for (int a = 0; a < 3; a++) v[a][e >> 2] |= (uint32_t)col[a * pstep + k] << (8 * (e & 3));
    }
#pragma unroll
    for (int a = 0; a < 3; a++) *(uint2 *)(dst + a * pst + j) = make_uint2(v[a][0], v[a][1]);
  }
}

/* Bytes a row of the column pass's staged output samples: the block's RI_RL pixels, and room for
 * the row's offset in the image's aligned 16 bytes (ri_out_in). */
__host__ __device__ inline int ri_orow(int L) {
  return RI_RL * L + 16;
}

/* The output's rows y0 .. y0 + n - 1, columns xb .. xb + RI_RL - 1 (those in the image), every
 * lane, into s_o: row r's bytes from a (its first) at s_o + r ri_orow(L) + (a & 15), in 16-byte
 * copies of the image's aligned 16 bytes that hold them (neighbours' bytes come along), all in
 * flight with the planes'; the image's last bytes, short of 16, byte by byte. */
template <int L>
__device__ __forceinline__ void ri_out_in(uint8_t *s_o, const packed &out, int xb, int y0, int n) {
  const int rs = ri_orow(L);
  int ob = min(RI_RL, out.w - xb) * L;
  size_t stride = (size_t)out.w * L, end = stride * out.h, a0 = ((size_t)y0 * out.w + xb) * L;
  const uint8_t *o = (const uint8_t *)out.p;
  for (int j = threadIdx.x; j < n * (rs / 16); j += RI_T) {
    int r = j / (rs / 16), k = 16 * (j % (rs / 16));
    size_t a = a0 + r * stride, c = a - (a & 15) + k; /* row r's first byte, the copy's */
    if (c >= a + ob) continue;
    if (c + 16 <= end)
      ri_async<16>(s_o + r * rs + k, o + c);
    else
      for (size_t e = c; e < end; e++) s_o[r * rs + k + (e - c)] = o[e];
  }
}

/* Column pass over lane blockIdx.z of an 8-bit image: a block has RI_RL columns and RI_CP output
 * rows from y_out + RI_CP blockIdx.y (y_out: the strip's first row, a multiple of RI_CP; rows from
 * y_end on are the next strip's), reading the planes' rows pf..pl (their nearest past them); the
 * reference is (U + p.half) 2^-K (U: the sum of every level l's products times 2^(8 l)), its error
 * against out counted as r32_error does. The products of levels 0 and 1 (the input's and the
 * weights' low bytes, and each low byte with the other's byte 1) are left out: they add up to at
 * most twice p.half, so with it added U errs by at most p.half (gpu.cu's ri_weights and ri_bound).
 * A block stages and computes only the tiles of 16 rows that have outputs (the last block of a
 * strip often has fewer than RI_CP: 56 of 256 in a 1080-row image), and (OST) stages its output
 * samples with the planes. The reference is summed in float, two conversions and two FMAs, each a
 * rounding of at most 2^-24 of the largest reference (gpu.cu's ri_bound counts the four); its
 * difference with the sample is exact where the two are within a factor of 2, else rounded by at
 * most 2^-24 of it. A thread's 32 or fewer errors are summed in float, then a block's in double
 * (with the difference's rounding, within 2^-18 of the sums: gpu.cu's r32_certain counts it). An
 * error under ftau (tau less 2^-21 of it) counts as none. SRC: where the samples measured come
 * from: RI_READ the output image, RI_STAGED the same staged with the planes, RI_WRITE the
 * reference itself, rounded to the nearest level and written to the output (the GPU's
 * separable: gpu.cu's run_separable). */
enum { RI_READ, RI_STAGED, RI_WRITE };
template <int L, int SRC>
__global__ void __launch_bounds__(RI_T, 3)
    ri_cols(const uint8_t *plane, int hp, packed out, const uint4 *table, ri_pass p, int K,
            float ftau, double *part, int y_out, int y_end, int pf, int pl, int nby) {
  extern __shared__ __align__(16) uint8_t s_ri[];
  int ls = ri_stride(p.ks, RI_CP), pst = RI_RL * ls;
  uint4 *s_a = (uint4 *)s_ri;
  uint8_t *s_in = s_ri + p.ks * 3 * 32 * 16, *s_o = s_in + 3 * pst;
  int xb = blockIdx.x * RI_RL, y0 = y_out + blockIdx.y * RI_CP, lane = threadIdx.x & 31;
  ri_table_in(s_a, table, p.ks);
  int tiles = min(RI_CP, y_end - y0 + 15) / 16; /* the last block's rows may end sooner */
  ri_cols_in<L>(s_in, ls, pst, ri_span(p.ks, 16 * tiles), plane, hp, out, xb, y0, p.R, pf, pl);
  if (SRC == RI_STAGED) ri_out_in<L>(s_o, out, xb, y0, min(RI_CP, y_end - y0));
  uint8_t *o = (uint8_t *)out.p;
  ri_async_wait();
  __syncthreads();
  int g = lane >> 2, t = lane & 3;
  /* the reference hi 2^(24 - K) + level 2's sum 2^(16 - K) + p.half 2^-K in float FMAs */
  float c2 = ldexpf(1.0f, 16 - K), c3 = ldexpf(1.0f, 24 - K), hf = (float)ldexp((double)p.half, -K);
  float v[3] = {0, 0, 0};
  for (int task = threadIdx.x >> 5; task < 2 * tiles; task += RI_T / 32) {
    int pt = task >> 1, h = task & 1;
    int acc[2][3][4] = {};
    ri_tile<3, 2>(s_in + (h * 16 + g) * ls + pt * 16 + 4 * t, ls, pst, s_a, p.ks, acc);
#pragma unroll
    for (int gi = 0; gi < 2; gi++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int hi = acc[gi][1][e] + (acc[gi][2][e] << 8); /* levels 3 and 4: under 2^31 (gpu.cu) */
        int xi = h * 16 + gi * 8 + 2 * t + (e & 1), yi = pt * 16 + g + (e >> 1) * 8;
        if (xb + xi < out.w && y0 + yi < y_end) {
          float r = fmaf((float)hi, c3, fmaf((float)acc[gi][0][e], c2, hf));
          unsigned b = ((unsigned)(y0 + yi) * out.w + xb) * L; /* mod 2^32: its low bits */
          uint8_t *at = o + ((size_t)(y0 + yi) * out.w + xb + xi) * L + blockIdx.z;
          int smp = SRC == RI_STAGED ? s_o[yi * ri_orow(L) + (b & 15) + xi * L + blockIdx.z]
                    : SRC == RI_READ ? *at
                                     : min(255, __float2int_rd(r + 0.5f)); /* r >= 0 */
          if (SRC == RI_WRITE) *at = (uint8_t)smp;
          float d = fabsf(r - (float)smp);
          d = d < ftau ? 0 : d;
          v[0] = fmaf(d, d, v[0]), v[1] += d, v[2] = fmaxf(v[2], d);
        }
      }
  }
  double vd[3] = {v[0], v[1], v[2]};
  r32_block_stats(part, ((size_t)blockIdx.z * nby + y0 / RI_CP) * gridDim.x + blockIdx.x, vd);
}

/* Output rows of a strip: three byte planes of every lane, rows padded to 32 (ri_pitch). */
static int ri_strip(int w, int h, int c, int R) {
  return ref_strip((size_t)3 * c * w, h, R, 32, RI_CP);
}

static int ri_pitch(int rows) {
  return (rows + 31) / 32 * 32;
}

/* The byte planes of a strip, rounded up to 16 bytes (the block sums follow them in d_ref). */
static size_t ri_plane_bytes(int w, int h, int c, int R) {
  size_t rows = ri_pitch(ref_plane_rows(ri_strip(w, h, c, R), R, h));
  return ((size_t)3 * c * w * rows + 15) / 16 * 16;
}

size_t reference_i8_bytes(int w, int h, int c, int R) {
  size_t blocks = (size_t)c * div_up(h, RI_CP) * div_up(w, RI_RL);
  return ri_plane_bytes(w, h, c, R) + 3 * blocks * sizeof(double);
}

/* Blocks of `bytes` of shared memory an SM of sm bytes holds, at most 3 (1 KB a block is the
 * driver's). */
static int ri_blocks(int sm, size_t bytes) {
  int n = (int)((size_t)sm / (bytes + 1024));
  return n < 3 ? n : 3;
}

template <int L>
static cudaError_t launch_ri(packed in, packed out, void *d_ref, const uint4 *tx, ri_pass px,
                             const uint4 *ty, ri_pass py, int K, float ftau, double *stats,
                             int write, cudaStream_t s) {
  int strip = ri_strip(in.w, in.h, L, py.R), nby = div_up(in.h, RI_CP), gx = div_up(in.w, RI_RL);
  uint8_t *plane = (uint8_t *)d_ref;
  double *part = (double *)((char *)d_ref + ri_plane_bytes(in.w, in.h, L, py.R));
  size_t rsmem =
      RI_TABLE_BYTES(px.ks) + (size_t)L * RI_RL * ri_stride(px.ks, RI_RP) + 3 * L * RI_RP * RI_RL;
  /* the column pass stages its output samples where that leaves it as many blocks an SM (at most
   * 3, by its registers): at sigma 12 it does, at 16 it would hold 2 instead of 3 */
  size_t cbase = RI_TABLE_BYTES(py.ks) + 3 * RI_RL * ri_stride(py.ks, RI_CP);
  size_t cost = cbase + RI_CP * ri_orow(L);
  int dev = 0, sm = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  bool ost = !write && ri_blocks(sm, cost) >= ri_blocks(sm, cbase);
  smem_allow_max((const void *)ri_rows<L>);
  smem_allow_max(ost     ? (const void *)ri_cols<L, RI_STAGED>
                 : write ? (const void *)ri_cols<L, RI_WRITE>
                         : (const void *)ri_cols<L, RI_READ>);
  for (int y = 0; y < in.h; y += strip) {
    int end = y + strip < in.h ? y + strip : in.h;
    int pf = y - py.R > 0 ? y - py.R : 0,
        pl = end - 1 + py.R < in.h - 1 ? end - 1 + py.R : in.h - 1;
    int rows = pl - pf + 1, hp = ri_pitch(rows);
    ri_rows<L><<<dim3(div_up(in.w, RI_RP), div_up(rows, RI_RL)), RI_T, rsmem, s>>>(
        in, plane, hp, rows, tx, px, pf);
    dim3 grid(gx, div_up(end - y, RI_CP), L);
    if (ost)
      ri_cols<L, RI_STAGED>
          <<<grid, RI_T, cost, s>>>(plane, hp, out, ty, py, K, ftau, part, y, end, pf, pl, nby);
    else if (write)
      ri_cols<L, RI_WRITE>
          <<<grid, RI_T, cbase, s>>>(plane, hp, out, ty, py, K, ftau, part, y, end, pf, pl, nby);
    else
      ri_cols<L, RI_READ>
          <<<grid, RI_T, cbase, s>>>(plane, hp, out, ty, py, K, ftau, part, y, end, pf, pl, nby);
  }
  r32_sum<<<1, R32_SUM, 0, s>>>(part, (size_t)L * nby * gx, stats);
  return cudaGetLastError();
}

cudaError_t launch_reference_i8(packed in, packed out, void *d_ref, const void *d_tx, ri_pass px,
                                const void *d_ty, ri_pass py, double tau, double *d_stats,
                                int write, cudaStream_t s) {
  int K = RI_F + py.S;
  float ftau = (float)(tau * (1 - ldexp(1.0, -21))); /* under tau (1 - 2^-22) after rounding */
  const uint4 *tx = (const uint4 *)d_tx, *ty = (const uint4 *)d_ty;
  if (in.c == 1) return launch_ri<1>(in, out, d_ref, tx, px, ty, py, K, ftau, d_stats, write, s);
  return launch_ri<3>(in, out, d_ref, tx, px, ty, py, K, ftau, d_stats, write, s);
}

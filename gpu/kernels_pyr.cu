/* pyramid on the GPU: cpu_pyramid_line along x then y. The packed image is reduced kx times
 * along x and ky times along y with the triangle weights into a grid of float4 cells with
 * e = radius + 1 cells of margin on each side of each axis (cells outside the image see its
 * replicated edge, as the CPU twin's lines do), the sampled Gaussian runs along x then y over
 * the grid, and the quadratic B-spline expands it into the packed output. The grid is
 * 1/(kx ky) of the image, so the reduction's reads and the expansion's writes are most of the
 * work whatever sigma is. An axis with k = 1 (sigma below 6 while the other axis is reduced)
 * keeps one cell per sample and expands by copying them: the CPU twin's plain sampled Gaussian. */
#include "gpu_int.cuh"

#define PYR_RUN        8         /* at most, cells one reducing thread stacks vertically */
#define PYR_THREADS    (1 << 18) /* fewer reducing threads than this leave a large GPU idle */
#define PYR_ROWS_BYTES ((size_t)128 << 20) /* the most the two-step reduction's rows take */

/* Weight of the sample a places after the start of its cell (a in [-(K/2), 2K - K/2)): the
 * triangle K - |a - (K - 1) / 2|, 0 outside (K = 1: 1 for the cell's own sample, 0 beside). */
template <int K> __device__ __forceinline__ float tri(int a) {
  float d = fabsf((float)a - (K - 1) * 0.5f);
  return d < K ? K - d : 0.f;
}

/* A row of in in cell column cx of an image at x0 of it, weighted along x: sum over a of tri(a)
 * pixel x0 + clamp(K cx + a, lo, hi) of row yy. in is a copy in registers: read from the item,
 * its fields would be loaded again at every pixel (ptxas). */
template <int K>
__device__ __forceinline__ v4<float> tri_row(const packed in, int x0, int cx, int yy, int lo,
                                             int hi) {
  if constexpr (K == 1) return load_px<float>(in, x0 + clampi(cx, lo, hi), yy);
  v4<float> h = v4_zero<float>();
#pragma unroll
  for (int a = -(K / 2); a < 2 * K - K / 2; a++)
    v4_fma(h, tri<K>(a), load_px<float>(in, x0 + clampi(K * cx + a, lo, hi), yy));
  return h;
}

/* Row y of item it's image, clamped to it, as a row of its input: pyr_reduce's items read
 * nothing outside their image, whose clip is the image itself. */
__device__ __forceinline__ int image_row(const pyr_item &it, int y) {
  return it.y0 + clampi(y, 0, it.out.h - 1);
}

/* The nearest in the item's clip of row y of its image, as a row of its input. */
__device__ __forceinline__ int clip_row(const pyr_item &it, int y) {
  return it.y0 + clampi(y, it.clip.y - it.y0, it.clip.w - 1 - it.y0);
}

static __device__ __forceinline__ float4 float4_of(const v4<float> &v, float norm) {
  return make_float4(v.l[0] * norm, v.l[1] * norm, v.l[2] * norm, v.l[3] * norm);
}

/* Cells (cx, cy0 .. cy0 + run - 1) of item it's grid (indices from -ex along x, -ey along y;
 * grid cell (cx + ex, cy + ey)). A row of the image falls in two neighbouring cells: the second
 * half of cell cy and the first half of cy + 1, so within a run each row is weighted along x once
 * (a shorter run on a small grid gives more threads, a row between runs read twice). The rows of
 * a cell are unrolled when KX == KY only: unrolled, the 20 pairs of different K would take
 * several times as long to compile as the rest of gpu/. One item a launch: read from a batch by
 * blockIdx.z, the item's fields would be loaded again inside the loops, much slower on a large
 * image. */
template <int KX, int KY> __global__ void pyr_reduce(const pyr_item it, int ex, int ey, int run) {
  int gx = blockIdx.x * blockDim.x + threadIdx.x,
      gy0 = (blockIdx.y * blockDim.y + threadIdx.y) * run;
  if (gx >= it.lw || gy0 >= it.lh) return;
  int cx = gx - ex;
  const float norm = 1.f / (KX * KX * KY * KY); /* the triangle's weights sum to K^2 per axis */
  v4<float> next = v4_zero<float>();
#pragma unroll(KX == KY ? KY : 1)
  for (int a = -(KY / 2); a < KY - KY / 2; a++)
    v4_fma(next, tri<KY>(a),
           tri_row<KX>(it.in, it.x0, cx, image_row(it, KY * (gy0 - ey) + a), 0, it.out.w - 1));
  for (int q = 0; q < run && gy0 + q < it.lh; q++) {
    int cy = gy0 + q - ey;
    v4<float> cur = next;
    next = v4_zero<float>();
#pragma unroll(KX == KY ? KY : 1)
    for (int a = KY - KY / 2; a < 2 * KY - KY / 2; a++) {
      v4<float> h = tri_row<KX>(it.in, it.x0, cx, image_row(it, KY * cy + a), 0, it.out.w - 1);
      v4_fma(cur, tri<KY>(a), h);
      v4_fma(next, tri<KY>(a - KY), h);
    }
    it.g[(size_t)(gy0 + q) * it.lw + gx] = float4_of(cur, norm);
  }
}

/* Programmatic dependent launch (sm_90 on), which a batch of windows uses: a kernel launched
 * with it waits in wait_previous until the kernel before it has finished and its writes show, and
 * the kernel before lets it start (be launched, its blocks placed) with let_next_start. Both are
 * nothing on older GPUs, and wait_previous returns at once in a kernel launched without it. */
__device__ __forceinline__ void wait_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}

__device__ __forceinline__ void let_next_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}

/* Row y of the input weighted along x for cell column gx (the first step of two). */
template <int KX>
__device__ __forceinline__ float4 row_of_cells(const pyr_item &it, int gx, int ex, int y) {
  return float4_of(tri_row<KX>(it.in, it.x0, gx - ex, y, it.clip.x - it.x0, it.clip.z - 1 - it.x0),
                   1.f);
}

/* Cell (gx, cy) from its rows (the second step): rows holds row_of_cells' values of the input's
 * rows from r0 on, pitch lw. */
template <int KX, int KY>
__device__ __forceinline__ float4 cell_of_rows(const pyr_item &it, const float4 *rows, int r0,
                                               int gx, int cy) {
  v4<float> cur = v4_zero<float>();
#pragma unroll
  for (int a = -(KY / 2); a < 2 * KY - KY / 2; a++) {
    float4 h = rows[(size_t)(clip_row(it, KY * cy + a) - r0) * it.lw + gx];
    v4<float> v = {{h.x, h.y, h.z, h.w}};
    v4_fma(cur, tri<KY>(a), v);
  }
  return float4_of(cur, 1.f / (KX * KX * KY * KY));
}

/* pyr_reduce in two steps: pyr_rows weights the rows of the input the cells read (r0 .. r0 + nr -
 * 1) along x into a plane of lw cells by nr rows, a thread per cell and row, and pyr_cols sums
 * each cell's rows of it. The same operations in the same order as pyr_reduce, so the same grid.
 * pyr_reduce's thread sums 4 KX KY pixels in a chain of dependent loads, which leaves the GPU idle
 * on grids of fewer cells than PYR_THREADS and is slow from K = 8 on both axes; elsewhere the
 * plane's traffic costs more than it saves. The plane takes at most PYR_ROWS_BYTES. */
template <int KX> __global__ void pyr_rows(const __grid_constant__ pyr_batch b, int ex) {
  const pyr_item it = b.it[blockIdx.z];
  let_next_start();
  int gx = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (gx >= it.lw || y >= it.nr) return;
  it.rows[(size_t)y * it.lw + gx] = row_of_cells<KX>(it, gx, ex, it.r0 + y);
}

template <int KX, int KY> __global__ void pyr_cols(const __grid_constant__ pyr_batch b, int ey) {
  const pyr_item it = b.it[blockIdx.z];
  int gx = blockIdx.x * blockDim.x + threadIdx.x, gy = blockIdx.y * blockDim.y + threadIdx.y;
  if (gx >= it.lw || gy >= it.lh) return;
  it.g[(size_t)gy * it.lw + gx] = cell_of_rows<KX, KY>(it, it.rows, it.r0, gx, gy - ey);
}

/* The sampled Gaussian w[0..r] at c, its taps s apart (G: c in global memory). */
template <bool G>
__device__ __forceinline__ float4 fir_at(const float4 *c, ptrdiff_t s, const float *w, int r) {
  float w0 = __ldg(&w[0]);
  float4 v = G ? __ldg(c) : *c, acc = make_float4(w0 * v.x, w0 * v.y, w0 * v.z, w0 * v.w);
  for (int t = 1; t <= r; t++) {
    float wt = __ldg(&w[t]);
    float4 lo = G ? __ldg(c - t * s) : c[-t * s], hi = G ? __ldg(c + t * s) : c[t * s];
    acc.x += wt * (lo.x + hi.x), acc.y += wt * (lo.y + hi.y);
    acc.z += wt * (lo.z + hi.z), acc.w += wt * (lo.w + hi.w);
  }
  return acc;
}

/* The sampled Gaussian w[0..r] along one axis of item blockIdx.z's grid: along x (pass 0) from g
 * (pitch lw) into gx, cells -1 .. mw of every row; along y (pass 1) from gx (pitch mw + 2) back
 * into g, rows -1 .. mh of those. */
__global__ void pyr_fir(const __grid_constant__ pyr_batch b, int pass, int ex, int ey,
                        const float *w, int r) {
  const pyr_item it = b.it[blockIdx.z];
  int ow = it.mw + 2, oh = pass ? it.mh + 2 : it.lh;
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= ow || y >= oh) return;
  const float4 *in = pass ? it.gx : it.g;
  float4 *out = pass ? it.g : it.gx;
  int ip = pass ? ow : it.lw, s = pass ? ow : 1;
  const float4 *c = in + (size_t)(y + (pass ? ey - 1 : 0)) * ip + x + (pass ? 0 : ex - 1);
  out[(size_t)y * ow + x] = fir_at<true>(c, s, w, r);
}

/* The B-spline weights of cells j-1, j, j+1 for the sample r places into cell j
 * (cpu_pyramid_weights); K = 1: the cell itself. */
template <int K> __device__ __forceinline__ void bspline(int r, float wt[3]) {
  if constexpr (K == 1) {
    wt[0] = 0.f, wt[1] = 1.f, wt[2] = 0.f;
    return;
  }
  float t = (float)r * (1.f / K) - (K - 1) * (0.5f / K);
  wt[0] = 0.5f * (0.5f - t) * (0.5f - t), wt[1] = 0.75f - t * t;
  wt[2] = 0.5f * (0.5f + t) * (0.5f + t);
}

/* Samples x0 .. x0+3 of row y of an image from its smoothed grid (cells -1 .. mw of rows -1 ..
 * mh: fw = mw + 2 columns), of which f holds rows from row0 and columns from col0, pitch p: the
 * column weights of the cells they need (j-1 .. j+1 around their cell j; KX = 2: two cells, so
 * four; KX = 1: four cells, so six), then the samples. */
template <int KX, int KY>
__device__ __forceinline__ void expand4(const float4 *f, int p, int row0, int col0, int fw, int x0,
                                        int y, v4<float> o[4]) {
  const int NC = KX < 4 ? 4 / KX + 2 : 3;
  int cy = y / KY, j0 = x0 / KX;
  float wy[3];
  bspline<KY>(y - cy * KY, wy);
  v4<float> col[NC];
#pragma unroll
  for (int b = 0; b < NC; b++) {
    col[b] = v4_zero<float>();
#pragma unroll
    for (int a = 0; a < 3; a++) {
      float4 v =
          f[(size_t)(cy + a - row0) * p + min(j0 + b, fw - 1) - col0]; /* KX < 4: past the edge */
      v4<float> p = {{v.x, v.y, v.z, v.w}};
      v4_fma(col[b], wy[a], p);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int d = KX < 4 ? i / KX : 0, r = KX < 4 ? i % KX : x0 - j0 * KX + i; /* cell j0 + d */
    float wx[3];
    bspline<KX>(r, wx);
    o[i] = v4_zero<float>();
#pragma unroll
    for (int b = 0; b < 3; b++) v4_fma(o[i], wx[b], col[b + d]);
  }
}

/* Samples x0 .. x0+3 of row y of window it (o, from expand4) blended into its input where they
 * lie, with the weights of region rect and its feather. */
__device__ __forceinline__ void blend4(const pyr_item &it, int4 rect, int feather, int x0, int y,
                                       const v4<float> o[4]) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int x = it.x0 + x0 + i, yy = it.y0 + y;
    double m = x0 + i < it.out.w ? blend_weight(x, yy, rect, feather) : 0;
    if (m <= 0) continue;
    unsigned q[4];
    samples_of_px<float>(it.in, o[i], q);
    blend_px(it.in, x, yy, q, m);
  }
}

/* Samples x0 .. x0+3 of row y of item blockIdx.z's output (x0 = 4 i) from its grid g, which
 * holds cells -1 .. mw of the grid's rows -1 .. mh (pitch mw + 2). 8-bit RGBA rows whose width is
 * a multiple of 4 take one 16-byte store. */
template <int KX, int KY> __global__ void pyr_expand(const __grid_constant__ pyr_batch b) {
  const pyr_item it = b.it[blockIdx.z];
  const packed &out = it.out;
  int x0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x), y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x0 >= out.w || y >= out.h) return;
  v4<float> o[4];
  expand4<KX, KY>(it.g, it.mw + 2, 0, 0, it.mw + 2, x0, y, o);
  if (out.c == 4 && out.depth == 8 && out.w % 4 == 0) {
    uchar4 q[4];
#pragma unroll
    for (int i = 0; i < 4; i++) q[i] = rgba8_of_px<float>(o[i]);
    *(uint4 *)((uint8_t *)out.p + ((size_t)y * out.w + x0) * 4) = *(uint4 *)q;
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; i++)
    if (x0 + i < out.w) store_px<float>(out, x0 + i, y, o[i]);
}

/* Regions' windows take three launches: pyr_rows, then pyr_cols_fir (pyr_cols and the Gaussian
 * along x), then pyr_fir_blend (the Gaussian along y, the expansion and the blend), whose blocks
 * each read what they need into shared memory, each launched while the one before runs
 * (programmatic dependent launch). Their grids are small, so a launch for each step (five) would
 * be mostly latency, with few warps active, waiting on L2. The same operations in the same order,
 * so the same samples. pyr_fir_blend's blocks take two rows of cells with 512 threads, a run of
 * four samples each, which is faster than four rows of 256 threads. */
#define PYR_TX 64  /* pyr_cols_fir: cells of a row a block smooths */
#define PYR_TY 4   /* and rows */
#define PYR_CX 16  /* pyr_fir_blend: cells of a row a block expands */
#define PYR_CY 2   /* and rows */
#define PYR_FB 512 /* and its threads */

/* pyr_cols_fir's shared memory for a radius r along x. */
static size_t cols_fir_bytes(int r) {
  return sizeof(float4) * PYR_TY * (PYR_TX + 2 * r);
}

/* pyr_fir_blend's for a radius r along y: the rows of gx it smooths, then the smoothed rows. */
static size_t fir_blend_bytes(int r) {
  return sizeof(float4) * (PYR_CX + 2) * (2 * (PYR_CY + 2) + 2 * r);
}

/* Cells gx[gy][x0 .. x0 + PYR_TX - 1] of item blockIdx.z (gy = PYR_TY blockIdx.y + threadIdx.y,
 * x0 = PYR_TX blockIdx.x) from the cells g[gy][x0 .. x0 + PYR_TX - 1 + 2 r] of its rows (r the
 * radius along x, ex = r + 1), which pyr_cols would write. */
template <int KX, int KY>
__global__ void pyr_cols_fir(const __grid_constant__ pyr_batch b, int ey, const float *w, int r) {
  const pyr_item it = b.it[blockIdx.z];
  extern __shared__ float4 sm[];
  wait_previous();
  let_next_start();
  int n = PYR_TX + 2 * r, x0 = blockIdx.x * PYR_TX, gy = blockIdx.y * PYR_TY + threadIdx.y,
      fw = it.mw + 2;
  if (x0 >= fw || (int)blockIdx.y * PYR_TY >= it.lh) return; /* the whole block */
  float4 *row = sm + threadIdx.y * n;
  for (int c = threadIdx.x; gy < it.lh && c < n && x0 + c < it.lw; c += PYR_TX)
    row[c] = cell_of_rows<KX, KY>(it, it.rows, it.r0, x0 + c, gy - ey);
  __syncthreads();
  int x = x0 + threadIdx.x;
  if (gy < it.lh && x < fw)
    it.gx[(size_t)gy * fw + x] = fir_at<false>(row + threadIdx.x + r, 1, w, r);
}

/* Grid columns c0 .. c0 + PYR_CX - 1 and rows j0 .. j0 + PYR_CY - 1 of window first + blockIdx.z
 * expanded and blended into its input (c0 = PYR_CX blockIdx.x, j0 = PYR_CY blockIdx.y): the rows
 * of gx they read (j0 .. j0 + PYR_CY + 1 smoothed along y, with r either side) into shared memory,
 * those smoothed, then the samples. */
template <int KX, int KY>
__global__ void __launch_bounds__(PYR_FB)
    pyr_fir_blend(const __grid_constant__ pyr_batch b, int first, const float *w, int r) {
  const pyr_item it = b.it[first + blockIdx.z];
  extern __shared__ float4 sm[];
  wait_previous();
  let_next_start(); /* the next run of windows */
  const int p = PYR_CX + 2, nj = PYR_CY + 2, xs = PYR_CX * KX / 4;
  int fw = it.mw + 2, c0 = blockIdx.x * PYR_CX, j0 = blockIdx.y * PYR_CY, t = threadIdx.x,
      nt = blockDim.x;
  if (c0 >= it.mw || j0 >= it.mh) return; /* the whole block */
  float4 *col = sm, *f = sm + (nj + 2 * r) * p;
  for (int i = t; i < (nj + 2 * r) * p; i += nt) /* past the grid: never read */
    col[i] = it.gx[(size_t)min(j0 + i / p, it.lh - 1) * fw + min(c0 + i % p, fw - 1)];
  __syncthreads();
  for (int i = t; i < nj * p; i += nt) f[i] = fir_at<false>(col + (i / p + r) * p + i % p, p, w, r);
  __syncthreads();
  for (int i = t; i < PYR_CY * KY * xs; i += nt) {
    int x0 = KX * c0 + 4 * (i % xs), y = KY * j0 + i / xs;
    if (x0 >= it.out.w || y >= it.out.h) continue;
    v4<float> o[4];
    expand4<KX, KY>(f, p, j0, c0, fw, x0, y, o);
    blend4(it, b.rect[first + blockIdx.z], b.feather, x0, y, o);
  }
}

/* Cells along one axis of n samples: m of the image and, with e of margin each side, l. */
static void pyr_dims(const pyr_params &p, int n, int *m, int *l) {
  *m = (int)div_up(n, p.k), *l = *m + 2 * (p.radius + 1);
}

size_t pyr_plan(const pyr_params &px, const pyr_params &py, pyr_batch *b, float4 *d_tmp) {
  size_t plane = 0, cells = 0, at = 0;
  int ey = py.radius + 1;
  for (int i = 0; i < b->n; i++) {
    pyr_item &it = b->it[i];
    pyr_dims(px, it.out.w, &it.mw, &it.lw);
    pyr_dims(py, it.out.h, &it.mh, &it.lh);
    /* the rows of cells -ey .. lh - ey - 1: k cell - k / 2 .. k (cell + 2) - k / 2 - 1 */
    it.r0 = max(it.y0 - py.k * ey - py.k / 2, it.clip.y);
    it.nr = min(it.y0 + py.k * (it.lh - ey + 1) - py.k / 2, it.clip.w) - it.r0;
    plane += (size_t)it.lw * it.nr * sizeof(float4), cells += (size_t)it.lw * it.lh;
  }
  /* windows always take two steps (pyr_cols_fir reads the rows), and pyr_fir_blend's shared
   * memory must be no more than a block has without asking (CPU_SIGMA_MAX: a radius of 75 at
   * most: 45,504 bytes) */
  bool windows = b->n > 0 && !b->it[0].out.p;
  b->split = plane <= PYR_ROWS_BYTES && (cells < PYR_THREADS || px.k * py.k >= 64 || windows) &&
             (!windows || fir_blend_bytes(py.radius) <= (48 << 10));
  for (int i = 0; i < b->n; i++) { /* each item's grids on a 256-byte boundary */
    pyr_item &it = b->it[i];
    size_t g = at, gx = g + (size_t)it.lw * it.lh, rows = gx + (size_t)(it.mw + 2) * it.lh;
    at = (rows + (b->split ? (size_t)it.lw * it.nr : 0) + 15) / 16 * 16;
    it.g = d_tmp ? d_tmp + g : NULL, it.gx = d_tmp ? d_tmp + gx : NULL;
    it.rows = d_tmp && b->split ? d_tmp + rows : NULL;
  }
  return at * sizeof(float4);
}

/* Where an item's image lies in its input. */
static int4 extent(const pyr_item &a) {
  return make_int4(a.x0, a.y0, a.x0 + a.out.w, a.y0 + a.out.h);
}

/* Launches kernel k (grid g, block t, smem bytes of shared memory) on s with args, early (with
 * programmatic dependent launch: it must wait_previous) or not. */
template <class... P, class... A>
static void launch_early(bool early, void (*k)(P...), dim3 g, dim3 t, size_t smem, cudaStream_t s,
                         A... args) {
  cudaLaunchAttribute at;
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t c = {};
  c.gridDim = g, c.blockDim = t, c.dynamicSmemBytes = smem, c.stream = s;
  c.attrs = &at, c.numAttrs = early;
  cudaLaunchKernelEx(&c, k, args...);
}

/* The smoothing along y, expansion and blend of windows first .. first + n - 1. */
template <int KX, int KY>
static void fir_blend_launch(const pyr_params &py, const pyr_batch &b, int first, int n,
                             const float *d_wy, cudaStream_t s) {
  int mw = 0, mh = 0;
  for (int i = first; i < first + n; i++) mw = max(mw, b.it[i].mw), mh = max(mh, b.it[i].mh);
  launch_early(b.early, pyr_fir_blend<KX, KY>, dim3(div_up(mw, PYR_CX), div_up(mh, PYR_CY), n),
               dim3(PYR_FB), fir_blend_bytes(py.radius), s, b, first, d_wy, py.radius);
}

/* The kernels for one KX and KY: the reduction (in one step or two), the Gaussian along x and
 * along y, the expansion; each launch covers the batch's items, blockIdx.z the item. A batch of
 * windows (reduced in two steps) takes pyr_cols_fir and pyr_fir_blend, whose windows blend in
 * order where they overlap: a launch for each run of windows that do not. */
template <int KX, int KY>
static void pyr_launch(const pyr_params &px, const pyr_params &py, const pyr_batch &b,
                       const float *d_wx, const float *d_wy, cudaStream_t s) {
  int ex = px.radius + 1, ey = py.radius + 1, nr = 0, mw = 0, mh = 0, lw = 0, lh = 0, w = 0, h = 0;
  for (int i = 0; i < b.n; i++) { /* the grid spans the largest item on each axis */
    const pyr_item &it = b.it[i];
    nr = max(nr, it.nr), mw = max(mw, it.mw), mh = max(mh, it.mh);
    lw = max(lw, it.lw), lh = max(lh, it.lh), w = max(w, it.out.w), h = max(h, it.out.h);
  }
  dim3 t(32, 8);
  if (b.split) pyr_rows<KX><<<dim3(div_up(lw, 32), div_up(nr, 8), b.n), t, 0, s>>>(b, ex);
  if (!b.it[0].out.p) { /* windows, always split (pyr_plan) */
    launch_early(b.early, pyr_cols_fir<KX, KY>,
                 dim3(div_up(mw + 2, PYR_TX), div_up(lh, PYR_TY), b.n), dim3(PYR_TX, PYR_TY),
                 cols_fir_bytes(px.radius), s, b, ey, d_wx, px.radius);
    int first = 0;
    for (int i = 1; i < b.n; i++)
      for (int j = first; j < i; j++)
        if (rects_overlap(extent(b.it[i]), extent(b.it[j]))) {
          fir_blend_launch<KX, KY>(py, b, first, i - first, d_wy, s), first = i;
          break;
        }
    fir_blend_launch<KX, KY>(py, b, first, b.n - first, d_wy, s);
    return;
  }
  if (b.split) {
    pyr_cols<KX, KY><<<dim3(div_up(lw, 32), div_up(lh, 8), b.n), t, 0, s>>>(b, ey);
  } else {
    for (int i = 0; i < b.n; i++) {
      const pyr_item &it = b.it[i];
      int run = PYR_RUN; /* shorter runs on smaller grids: more threads, rows read more often */
      while (run > 1 && (size_t)it.lw * div_up(it.lh, run) < PYR_THREADS) run /= 2;
      pyr_reduce<KX, KY>
          <<<dim3(div_up(it.lw, 32), div_up(div_up(it.lh, run), 8)), t, 0, s>>>(it, ex, ey, run);
    }
  }
  pyr_fir<<<dim3(div_up(mw + 2, 32), div_up(lh, 8), b.n), t, 0, s>>>(b, 0, ex, ey, d_wx, px.radius);
  pyr_fir<<<dim3(div_up(mw + 2, 32), div_up(mh + 2, 8), b.n), t, 0, s>>>(b, 1, ex, ey, d_wy,
                                                                         py.radius);
  pyr_expand<KX, KY><<<dim3(div_up(w, 4 * 32), div_up(h, 8), b.n), t, 0, s>>>(b);
}

/* pyr_launch for KX and py.k. */
template <int KX>
static void pyr_launch_y(const pyr_params &px, const pyr_params &py, const pyr_batch &b,
                         const float *d_wx, const float *d_wy, cudaStream_t s) {
  switch (py.k) {
  case 1:
    pyr_launch<KX, 1>(px, py, b, d_wx, d_wy, s);
    break;
  case 2:
    pyr_launch<KX, 2>(px, py, b, d_wx, d_wy, s);
    break;
  case 4:
    pyr_launch<KX, 4>(px, py, b, d_wx, d_wy, s);
    break;
  case 8:
    pyr_launch<KX, 8>(px, py, b, d_wx, d_wy, s);
    break;
  default:
    pyr_launch<KX, 16>(px, py, b, d_wx, d_wy, s);
  }
}

cudaError_t launch_pyramid(const pyr_params &px, const pyr_params &py, const pyr_batch &b,
                           const float *d_wx, const float *d_wy, cudaStream_t s) {
  switch (px.k) {
  case 1:
    pyr_launch_y<1>(px, py, b, d_wx, d_wy, s);
    break;
  case 2:
    pyr_launch_y<2>(px, py, b, d_wx, d_wy, s);
    break;
  case 4:
    pyr_launch_y<4>(px, py, b, d_wx, d_wy, s);
    break;
  case 8:
    pyr_launch_y<8>(px, py, b, d_wx, d_wy, s);
    break;
  default:
    pyr_launch_y<16>(px, py, b, d_wx, d_wy, s);
  }
  return cudaGetLastError();
}

/* pyramid on the GPU: cpu_pyramid_line along x then y. The packed image is reduced kx times
 * along x and ky times along y with the triangle weights into a grid of float4 cells with
 * e = radius + 1 cells of margin on each side of each axis (cells outside the image see its
 * replicated edge, as the CPU twin's lines do), the sampled Gaussian runs along x then y over
 * the grid, and the quadratic B-spline expands it into the packed output. The grid is
 * 1/(kx ky) of the image, so the reduction's reads and the expansion's writes are most of the
 * work whatever sigma is. An axis with k = 1 (sigma below 6 while the other axis is reduced)
 * keeps one cell per sample and expands by copying them: the plain sampled Gaussian of the CPU
 * twin. */
#include "gpu_int.cuh"

#define PYR_RUN     8         /* at most, cells one reducing thread stacks vertically */
#define PYR_THREADS (1 << 18) /* fewer reducing threads than this leave a large GPU idle */

/* Weight of the sample a places after the start of its cell (a in [-(K/2), 2K - K/2)): the
 * triangle K - |a - (K - 1) / 2|, 0 outside (K = 1: 1 for the cell's own sample, 0 beside). */
template <int K> __device__ __forceinline__ float tri(int a) {
  float d = fabsf((float)a - (K - 1) * 0.5f);
  return d < K ? K - d : 0.f;
}

/* Row y of cell column cx, weighted along x: sum over a of tri(a) pixel (K cx + a, y), clamped. */
template <int K> __device__ __forceinline__ v4<float> tri_row(const packed &in, int cx, int y) {
  int yy = clampi(y, 0, in.h - 1);
  if constexpr (K == 1) return load_px<float>(in, clampi(cx, 0, in.w - 1), yy);
  v4<float> h = v4_zero<float>();
#pragma unroll
  for (int a = -(K / 2); a < 2 * K - K / 2; a++)
    v4_fma(h, tri<K>(a), load_px<float>(in, clampi(K * cx + a, 0, in.w - 1), yy));
  return h;
}

/* Cells (cx, cy0 .. cy0 + run - 1) of the grid (indices from -ex along x, -ey along y;
 * grid cell (cx + ex, cy + ey)). A row of the image falls in two neighbouring cells: the second
 * half of cell cy and the first half of cy + 1, so within a run each row is weighted along x
 * once (a shorter run on a small grid gives more threads, a row between runs read twice). The rows
 * of a cell are unrolled when KX == KY only: unrolled, the 20 pairs of different K would take
 * several times as long to compile as the rest of gpu/. */
template <int KX, int KY>
__global__ void pyr_reduce(packed in, float4 *g, int ex, int ey, int lw, int lh, int run) {
  int gx = blockIdx.x * blockDim.x + threadIdx.x,
      gy0 = (blockIdx.y * blockDim.y + threadIdx.y) * run;
  if (gx >= lw || gy0 >= lh) return;
  int cx = gx - ex;
  const float norm = 1.f / (KX * KX * KY * KY); /* the triangle's weights sum to K^2 per axis */
  v4<float> next = v4_zero<float>();
#pragma unroll(KX == KY ? KY : 1)
  for (int a = -(KY / 2); a < KY - KY / 2; a++)
    v4_fma(next, tri<KY>(a), tri_row<KX>(in, cx, KY * (gy0 - ey) + a));
  for (int q = 0; q < run && gy0 + q < lh; q++) {
    int cy = gy0 + q - ey;
    v4<float> cur = next;
    next = v4_zero<float>();
#pragma unroll(KX == KY ? KY : 1)
    for (int a = KY - KY / 2; a < 2 * KY - KY / 2; a++) {
      v4<float> h = tri_row<KX>(in, cx, KY * cy + a);
      v4_fma(cur, tri<KY>(a), h);
      v4_fma(next, tri<KY>(a - KY), h);
    }
    g[(size_t)(gy0 + q) * lw + gx] =
        make_float4(cur.l[0] * norm, cur.l[1] * norm, cur.l[2] * norm, cur.l[3] * norm);
  }
}

/* The sampled Gaussian w[0..r] along one axis of the grid: out (ow x oh) from in (pitch ip),
 * out (x, y) centred on in (x + dx, y + dy), step s along the axis (1: x, ip: y). */
__global__ void pyr_fir(const float4 *in, int ip, float4 *out, int ow, int oh, int dx, int dy,
                        int s, const float *w, int r) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= ow || y >= oh) return;
  const float4 *c = in + (size_t)(y + dy) * ip + x + dx;
  float w0 = __ldg(&w[0]);
  float4 v = __ldg(c), acc = make_float4(w0 * v.x, w0 * v.y, w0 * v.z, w0 * v.w);
  for (int t = 1; t <= r; t++) {
    float wt = __ldg(&w[t]);
    float4 lo = __ldg(c - (ptrdiff_t)t * s), hi = __ldg(c + (ptrdiff_t)t * s);
    acc.x += wt * (lo.x + hi.x), acc.y += wt * (lo.y + hi.y);
    acc.z += wt * (lo.z + hi.z), acc.w += wt * (lo.w + hi.w);
  }
  out[(size_t)y * ow + x] = acc;
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

/* Samples x0 .. x0+3 of row y of the output (x0 = 4 i): the column weights of the cells they
 * need (j-1 .. j+1 around their cell j; KX = 2: two cells, so four; KX = 1: four cells, so
 * six), then the samples. f holds cells -1 .. mw of the grid's rows -1 .. mh (pitch fw). 8-bit
 * RGBA rows whose width is a multiple of 4 take one 16-byte store. */
template <int KX, int KY> __global__ void pyr_expand(const float4 *f, int fw, packed out) {
  const int NC = KX < 4 ? 4 / KX + 2 : 3;
  int x0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x), y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x0 >= out.w || y >= out.h) return;
  int cy = y / KY, j0 = x0 / KX;
  float wy[3];
  bspline<KY>(y - cy * KY, wy);
  v4<float> col[NC];
#pragma unroll
  for (int b = 0; b < NC; b++) {
    col[b] = v4_zero<float>();
#pragma unroll
    for (int a = 0; a < 3; a++) {
      float4 v = f[(size_t)(cy + a) * fw + min(j0 + b, fw - 1)]; /* KX < 4: past the edge */
      v4<float> p = {{v.x, v.y, v.z, v.w}};
      v4_fma(col[b], wy[a], p);
    }
  }
  v4<float> o[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int d = KX < 4 ? i / KX : 0, r = KX < 4 ? i % KX : x0 - j0 * KX + i; /* cell j0 + d */
    float wx[3];
    bspline<KX>(r, wx);
    o[i] = v4_zero<float>();
#pragma unroll
    for (int b = 0; b < 3; b++) v4_fma(o[i], wx[b], col[b + d]);
  }
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

/* Cells along one axis of n samples: m of the image and, with e of margin each side, l. */
static void pyr_dims(const pyr_params &p, int n, int *m, int *l) {
  *m = (int)div_up(n, p.k), *l = *m + 2 * (p.radius + 1);
}

size_t pyramid_tmp_bytes(const pyr_params &px, const pyr_params &py, int w, int h) {
  int mw, mh, lw, lh;
  pyr_dims(px, w, &mw, &lw);
  pyr_dims(py, h, &mh, &lh);
  return ((size_t)lw * lh + (size_t)(mw + 2) * lh) * sizeof(float4);
}

/* The four kernels for one KX and KY. */
template <int KX, int KY>
static void pyr_launch(const pyr_params &px, const pyr_params &py, packed in, packed out,
                       float4 *d_tmp, const float *d_wx, const float *d_wy, cudaStream_t s) {
  int mw, mh, lw, lh, ex = px.radius + 1, ey = py.radius + 1;
  pyr_dims(px, in.w, &mw, &lw);
  pyr_dims(py, in.h, &mh, &lh);
  float4 *g = d_tmp, *gx = d_tmp + (size_t)lw * lh; /* the grid; after the x pass; after y: g */
  dim3 t(32, 8);
  int run = PYR_RUN; /* shorter runs on small grids: more threads, each row read more often */
  while (run > 1 && (size_t)lw * div_up(lh, run) < PYR_THREADS) run /= 2;
  pyr_reduce<KX, KY>
      <<<dim3(div_up(lw, 32), div_up(div_up(lh, run), 8)), t, 0, s>>>(in, g, ex, ey, lw, lh, run);
  /* x: cells -1 .. mw of every grid row; y: rows -1 .. mh of those */
  pyr_fir<<<dim3(div_up(mw + 2, 32), div_up(lh, 8)), t, 0, s>>>(g, lw, gx, mw + 2, lh, ex - 1, 0, 1,
                                                                d_wx, px.radius);
  pyr_fir<<<dim3(div_up(mw + 2, 32), div_up(mh + 2, 8)), t, 0, s>>>(
      gx, mw + 2, g, mw + 2, mh + 2, 0, ey - 1, mw + 2, d_wy, py.radius);
  pyr_expand<KX, KY><<<dim3(div_up(in.w, 4 * 32), div_up(in.h, 8)), t, 0, s>>>(g, mw + 2, out);
}

/* pyr_launch for KX and py.k. */
template <int KX>
static void pyr_launch_y(const pyr_params &px, const pyr_params &py, packed in, packed out,
                         float4 *d_tmp, const float *d_wx, const float *d_wy, cudaStream_t s) {
  switch (py.k) {
  case 1:
    pyr_launch<KX, 1>(px, py, in, out, d_tmp, d_wx, d_wy, s);
    break;
  case 2:
    pyr_launch<KX, 2>(px, py, in, out, d_tmp, d_wx, d_wy, s);
    break;
  case 4:
    pyr_launch<KX, 4>(px, py, in, out, d_tmp, d_wx, d_wy, s);
    break;
  case 8:
    pyr_launch<KX, 8>(px, py, in, out, d_tmp, d_wx, d_wy, s);
    break;
  default:
    pyr_launch<KX, 16>(px, py, in, out, d_tmp, d_wx, d_wy, s);
  }
}

cudaError_t launch_pyramid(const pyr_params &px, const pyr_params &py, packed in, packed out,
                           float4 *d_tmp, const float *d_wx, const float *d_wy, cudaStream_t s) {
  switch (px.k) {
  case 1:
    pyr_launch_y<1>(px, py, in, out, d_tmp, d_wx, d_wy, s);
    break;
  case 2:
    pyr_launch_y<2>(px, py, in, out, d_tmp, d_wx, d_wy, s);
    break;
  case 4:
    pyr_launch_y<4>(px, py, in, out, d_tmp, d_wx, d_wy, s);
    break;
  case 8:
    pyr_launch_y<8>(px, py, in, out, d_tmp, d_wx, d_wy, s);
    break;
  default:
    pyr_launch_y<16>(px, py, in, out, d_tmp, d_wx, d_wy, s);
  }
  return cudaGetLastError();
}

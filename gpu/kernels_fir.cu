/* The fir family on the GPU: direct 2-D convolution with the integer kernel of cpu/fir.c, in the
 * three memory strategies of "Gaussian Filtering With GPU". fir (GF_Default): one thread per
 * pixel reading global memory. fir_shared (GF_SM): a 16x16 tile and its halo staged in shared
 * memory, in bands of rows so that any radius fits. fir_mwpt (GF_SM_MWPT): the same with a 2x2
 * block of outputs per thread, so each row sum read from shared memory serves four outputs. Every
 * sum is an exact 64-bit integer, so all three give the bytes of the CPU twin. */
#include "gpu_int.cuh"

struct fir_args {
  packed in, out;
  const uint32_t *ax, *ay; /* ax[0..rx] along x, ay[0..ry] along y */
  int rx, ry, k;           /* each kernel sums with its mirror taps to 2^k */
};

/* Pixel (x, y) as 4 exact integer lanes, colour premultiplied: c * a. */
__device__ __forceinline__ uint4 load_int(const packed &im, int x, int y) {
  size_t i = ((size_t)y * im.w + x) * im.c;
  unsigned v[4] = {0, 0, 0, 0};
  if (im.c == 4 && im.depth == 8) {
    uchar4 q = *(const uchar4 *)((const uint8_t *)im.p + i);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    for (int k = 0; k < im.c; k++) v[k] = raw_sample(im, i + k);
  }
  if (im.c == 2 || im.c == 4)
    for (int k = 0; k < im.c - 1; k++) v[k] *= v[im.c - 1];
  return make_uint4(v[0], v[1], v[2], v[3]);
}

/* round(sum / 2^2k), or with alpha round(colour sum / alpha sum), as cpu/fir.c stores. */
__device__ __forceinline__ void store_int(const packed &im, int x, int y, const uint64_t acc[4],
                                          int k) {
  uint64_t half = (uint64_t)1 << (2 * k - 1), a = acc[im.c - 1];
  int alpha = im.c == 2 || im.c == 4;
  size_t i = ((size_t)y * im.w + x) * im.c;
  for (int c = 0; c < im.c; c++) {
    uint64_t out;
    if (!alpha || c == im.c - 1) {
      out = (acc[c] + half) >> (2 * k);
    } else if ((a + half) >> (2 * k) == 0) { /* transparent: colour 0, as cpu/fir.c */
      out = 0;
    } else {
      uint64_t q = acc[c] / a, rem = acc[c] - q * a;
      out = q + (2 * rem >= a);
    }
    if (im.depth == 16)
      ((uint16_t *)im.p)[i + c] = (uint16_t)out;
    else
      ((uint8_t *)im.p)[i + c] = (uint8_t)out;
  }
}

__device__ __forceinline__ void mac(uint64_t acc[4], uint32_t w, uint4 v) {
  acc[0] += (uint64_t)w * v.x;
  acc[1] += (uint64_t)w * v.y;
  acc[2] += (uint64_t)w * v.z;
  acc[3] += (uint64_t)w * v.w;
}

/* GF_Default: one thread per output pixel, every tap read from global memory. */
__global__ void fir_global(fir_args f) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= f.in.w || y >= f.in.h) return;
  uint64_t acc[4] = {0, 0, 0, 0};
  for (int i = -f.ry; i <= f.ry; i++) {
    int yy = clampi(y + i, 0, f.in.h - 1);
    uint64_t row[4] = {0, 0, 0, 0};
    for (int j = -f.rx; j <= f.rx; j++)
      mac(row, __ldg(&f.ax[j < 0 ? -j : j]), load_int(f.in, clampi(x + j, 0, f.in.w - 1), yy));
    uint64_t ai = __ldg(&f.ay[i < 0 ? -i : i]);
    for (int c = 0; c < 4; c++) acc[c] += ai * row[c];
  }
  store_int(f.out, x, y, acc, f.k);
}

/* GF_SM (M = 1) and GF_SM_MWPT (M = 2): a block of 16x16 threads owns a tile of 16M x 16M
 * outputs. The input rows the tile needs (tile + 2ry) pass through shared memory in bands of
 * band_rows rows of tile + 2rx pixels; for each input row a thread forms the horizontal sums of
 * its M output columns once and adds them, weighted, to its M output rows. */
template <int M> __global__ void fir_tiled(fir_args f, int band_rows) {
  extern __shared__ uint4 s_band[];
  const int T = 16 * M, rx = f.rx, ry = f.ry, sw = T + 2 * rx, rows = T + 2 * ry;
  int x0 = blockIdx.x * T, y0 = blockIdx.y * T, tx = threadIdx.x, ty = threadIdx.y;
  int tid = ty * 16 + tx;
  uint64_t acc[M][M][4];
#pragma unroll
  for (int my = 0; my < M; my++)
#pragma unroll
    for (int mx = 0; mx < M; mx++)
      for (int c = 0; c < 4; c++) acc[my][mx][c] = 0;
  for (int b0 = 0; b0 < rows; b0 += band_rows) {
    int nb = rows - b0 < band_rows ? rows - b0 : band_rows;
    for (int idx = tid; idx < nb * sw; idx += 256) {
      int yy = clampi(y0 - ry + b0 + idx / sw, 0, f.in.h - 1);
      int xx = clampi(x0 - rx + idx % sw, 0, f.in.w - 1);
      s_band[idx] = load_int(f.in, xx, yy);
    }
    __syncthreads();
    for (int br = 0; br < nb; br++) {
      int iy = y0 - ry + b0 + br; /* the input row */
      int oy = y0 + ty * M;       /* the thread's first output row */
      if (iy < oy - ry || iy > oy + M - 1 + ry) continue;
      uint64_t inner[M][4];
#pragma unroll
      for (int mx = 0; mx < M; mx++)
        for (int c = 0; c < 4; c++) inner[mx][c] = 0;
      const uint4 *row = s_band + br * sw + tx * M; /* tap -rx of the first output column */
      for (int j = 0; j <= 2 * rx + M - 1; j++) {
        uint4 v = row[j];
#pragma unroll
        for (int mx = 0; mx < M; mx++) {
          int d = j - rx - mx; /* tap offset for output column mx */
          if (d >= -rx && d <= rx) mac(inner[mx], __ldg(&f.ax[d < 0 ? -d : d]), v);
        }
      }
#pragma unroll
      for (int my = 0; my < M; my++) {
        int i = iy - (oy + my);
        if (i < -ry || i > ry) continue;
        uint64_t ai = __ldg(&f.ay[i < 0 ? -i : i]);
#pragma unroll
        for (int mx = 0; mx < M; mx++)
          for (int c = 0; c < 4; c++) acc[my][mx][c] += ai * inner[mx][c];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int my = 0; my < M; my++)
#pragma unroll
    for (int mx = 0; mx < M; mx++) {
      int x = x0 + tx * M + mx, y = y0 + ty * M + my;
      if (x < f.out.w && y < f.out.h) store_int(f.out, x, y, acc[my][mx], f.k);
    }
}

#define FIR_SMEM_MAX (96 * 1024) /* shared memory a tiled block may take */

template <int M> static cudaError_t launch_tiled(const fir_args &f, cudaStream_t s) {
  int T = 16 * M, sw = T + 2 * f.rx, rows = T + 2 * f.ry;
  int band = FIR_SMEM_MAX / (sw * (int)sizeof(uint4));
  if (band < 1) return cudaErrorInvalidValue; /* rx beyond 3000: refused before this point */
  if (band > rows) band = rows;
  size_t smem = (size_t)band * sw * sizeof(uint4);
  cudaFuncSetAttribute(fir_tiled<M>, cudaFuncAttributeMaxDynamicSharedMemorySize, FIR_SMEM_MAX);
  dim3 grid(div_up(f.in.w, T), div_up(f.in.h, T)), block(16, 16);
  fir_tiled<M><<<grid, block, smem, s>>>(f, band);
  return cudaGetLastError();
}

cudaError_t launch_fir(int variant, packed in, packed out, const uint32_t *d_ax, int rx,
                       const uint32_t *d_ay, int ry, int k, cudaStream_t s) {
  fir_args f = {in, out, d_ax, d_ay, rx, ry, k};
  if (variant == 1) return launch_tiled<1>(f, s);
  if (variant == 2) return launch_tiled<2>(f, s);
  dim3 block(32, 8), grid(div_up(in.w, 32), div_up(in.h, 8));
  fir_global<<<grid, block, 0, s>>>(f);
  return cudaGetLastError();
}

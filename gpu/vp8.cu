/* Lossy WebP's first pass on the device: the twin of codecs/vp8_enc.c's analyse_mb and of
 * codecs/webp_yuv.c's conversion, the same integer steps in the same order, so that the modes
 * and levels are the CPU's bit for bit (tests/gpu_codecs.c compares them) and the file the
 * codecs then write is the same bytes.
 *
 * Two kernels. vp8_planes: one thread per 2x2 block converts the RGB image to YUV 4:2:0 (luma as
 * libwebp's, chroma from the block's plain mean) and counts the luma steps over the smoothness
 * threshold; the host reads the count and stops there when the image is not smooth. vp8_rows:
 * a wavefront, one warp per macroblock row. A macroblock needs the reconstruction of the one to
 * its left (the same warp, the step before) and the bottom row of the ones above (another warp):
 * each row publishes its bottom rows to `line` and its progress, and the row below waits for
 * the macroblock above before it starts. Rows are taken in order from a ticket, so the row a
 * warp waits on has always been taken by a warp already running: no wait can deadlock. Within
 * a macroblock the 32 lanes share the mode choice (8 luma and 4 chroma samples each), then lanes
 * 0..15 take the luma blocks and 16..23 the chroma blocks, lane 0 the Y2 block between. Then
 * vp8_stats counts the tokens the frame will code, one thread a block, so that the host only
 * chooses the probabilities and writes (codec_vp8_write with stats). */
#include "gpu_int.cuh"

namespace {

__constant__ uint8_t kZigzag[16] = {0, 1, 4, 8, 5, 2, 3, 6, 9, 12, 13, 10, 7, 11, 14, 15};

enum { DC_PRED, V_PRED, H_PRED, TM_PRED };

/* The quantisers (codec_vp8_quant's q[Y, Y2, UV][step, bias, iq][DC, AC]). */
struct vp8q {
  int v[3][3][2];
};

struct vp8_args {
  const uint8_t *y, *u, *v; /* the planes */
  int w, h, cw, ch, mbw, mbh;
  uint8_t *line_y, *line_u, *line_v; /* per macroblock row: its reconstruction's bottom row */
  int *progress;                     /* per macroblock row: its macroblocks done */
  int *ticket;                       /* the next row to take */
  uint8_t *modes;
  int16_t *levels;
  int8_t *last;
  vp8q q;
};

__device__ __forceinline__ uint8_t luma_of(const uint8_t *p) {
  return (uint8_t)((16839 * p[0] + 33059 * p[1] + 6420 * p[2] + (16 << 16) + (1 << 15)) >> 16);
}

/* webp_yuv.c's planes and its count of luma steps over `step` levels. */
__global__ void vp8_planes(const uint8_t *rgb, int w, int h, int step, uint8_t *y, uint8_t *u,
                           uint8_t *v, unsigned long long *steps) {
  int cw = (w + 1) / 2, cx = blockIdx.x * blockDim.x + threadIdx.x, cy = blockIdx.y;
  unsigned n = 0;
  if (cx < cw) {
    int x0 = 2 * cx, y0 = 2 * cy, x1 = min(x0 + 1, w - 1), y1 = min(y0 + 1, h - 1);
    for (int r = y0; r <= y1; r++) {
      const uint8_t *row = rgb + (size_t)r * w * 3;
      int prev = x0 > 0 ? luma_of(row + 3 * (x0 - 1)) : -1;
      for (int x = x0; x <= x1; x++) {
        int l = luma_of(row + 3 * x);
        y[(size_t)r * w + x] = (uint8_t)l;
        n += prev >= 0 && abs(l - prev) > step;
        prev = l;
      }
    }
    const uint8_t *a = rgb + ((size_t)y0 * w + x0) * 3, *b = rgb + ((size_t)y0 * w + x1) * 3,
                  *c = rgb + ((size_t)y1 * w + x0) * 3, *d = rgb + ((size_t)y1 * w + x1) * 3;
    int sr = a[0] + b[0] + c[0] + d[0], sg = a[1] + b[1] + c[1] + d[1],
        sb = a[2] + b[2] + c[2] + d[2];
    size_t at = (size_t)cy * cw + cx;
    u[at] = (uint8_t)((-9719 * sr - 19081 * sg + 28800 * sb + (128 << 18) + (1 << 17)) >> 18);
    v[at] = (uint8_t)((28800 * sr - 24116 * sg - 4684 * sb + (128 << 18) + (1 << 17)) >> 18);
  }
  for (int o = 16; o > 0; o >>= 1) n += __shfl_down_sync(0xffffffffu, n, o);
  if ((threadIdx.x & 31) == 0 && n) atomicAdd(steps, (unsigned long long)n);
}

/* ---- vp8_enc.c's steps, one 4x4 block at a time ---- */

/* The prediction of mode at (r, c) of an n x n block (vp8_enc.c's predict). */
__device__ __forceinline__ int pred_at(int mode, int r, int c, const uint8_t *top,
                                       const uint8_t *left, int p, int dc) {
  int v = mode == DC_PRED  ? dc
          : mode == V_PRED ? top[c]
          : mode == H_PRED ? left[r]
                           : left[r] + top[c] - p;
  return v < 0 ? 0 : v > 255 ? 255 : v;
}

__device__ __forceinline__ int dc_of(int n, const uint8_t *top, const uint8_t *left, int has_top,
                                     int has_left) {
  int s = 0, shift = n == 16 ? 4 : 3, k = has_top + has_left;
  for (int i = 0; i < n; i++) s += (has_top ? top[i] : 0) + (has_left ? left[i] : 0);
  return k == 0 ? 128 : (s + (n * k >> 1)) >> (shift + k - 1);
}

/* vp8_enc.c's flat: every AC level zero by the bound, and the DC. */
__device__ int flat4(const uint8_t *src, const uint8_t *pred, int stride, const int q[3][2],
                     int *dc) {
  int r[16], sum = 0, dev = 0;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) sum += r[4 * i + j] = src[i * stride + j] - pred[i * stride + j];
  for (int k = 0; k < 16; k++) dev += abs(16 * r[k] - sum);
  *dc = (sum + 1) >> 1;
  return dev * 875 < (q[0][1] - q[1][1] - 1) * 16384;
}

/* vp8_enc.c's fdct4, lane by lane. */
__device__ void fdct4(const uint8_t *src, const uint8_t *pred, int stride, int16_t *out) {
  int t[4][4];
  for (int j = 0; j < 4; j++) {
    int r0 = src[j] - pred[j], r1 = src[stride + j] - pred[stride + j],
        r2 = src[2 * stride + j] - pred[2 * stride + j],
        r3 = src[3 * stride + j] - pred[3 * stride + j];
    int a = r0 + r3, b = r1 + r2, c = r1 - r2, d = r0 - r3;
    t[0][j] = (a + b) * 8, t[2][j] = (a - b) * 8;
    t[1][j] = (d * 5352 + c * 2217 + 256) >> 9, t[3][j] = (d * 2217 - c * 5352 + 256) >> 9;
  }
  for (int k = 0; k < 4; k++) {
    int a = t[k][0] + t[k][3], b = t[k][1] + t[k][2], c = t[k][1] - t[k][2], d = t[k][0] - t[k][3];
    out[4 * k] = (int16_t)((a + b + 8) >> 4), out[4 * k + 2] = (int16_t)((a - b + 8) >> 4);
    out[4 * k + 1] = (int16_t)((d * 5352 + c * 2217 + (1 << 15)) >> 16);
    out[4 * k + 3] = (int16_t)((d * 2217 - c * 5352 + (1 << 15)) >> 16);
  }
}

/* RFC 6386's inverse DCT added to pred into dst (vp8_enc.c's idct4_add). */
__device__ void idct4_add(const int16_t *in, int dc_only, const uint8_t *pred, int ps, uint8_t *dst,
                          int ds) {
  int m[4][4];
  if (dc_only) {
    for (int i = 0; i < 16; i++) m[i / 4][i % 4] = (in[0] + 4) >> 3;
  } else {
    int t[4][4];
    for (int j = 0; j < 4; j++) {
      int a = in[j] + in[8 + j], b = in[j] - in[8 + j];
      int c = ((in[4 + j] * 35468) >> 16) - (in[12 + j] + ((in[12 + j] * 20091) >> 16));
      int d = in[4 + j] + ((in[4 + j] * 20091) >> 16) + ((in[12 + j] * 35468) >> 16);
      t[0][j] = a + d, t[1][j] = b + c, t[2][j] = b - c, t[3][j] = a - d;
    }
    for (int i = 0; i < 4; i++) {
      int a = t[i][0] + t[i][2], b = t[i][0] - t[i][2];
      int c = ((t[i][1] * 35468) >> 16) - (t[i][3] + ((t[i][3] * 20091) >> 16));
      int d = t[i][1] + ((t[i][1] * 20091) >> 16) + ((t[i][3] * 35468) >> 16);
      m[i][0] = (a + d + 4) >> 3, m[i][1] = (b + c + 4) >> 3;
      m[i][2] = (b - c + 4) >> 3, m[i][3] = (a - d + 4) >> 3;
    }
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      int s = pred[i * ps + j] + m[i][j];
      dst[i * ds + j] = (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
    }
}

/* vp8_enc.c's quantize with the quantiser q (step, bias, iq by DC and AC). */
__device__ int quantize(int16_t *c, int16_t *zz, const int q[3][2], int first) {
  int16_t lv[16];
  for (int k = 0; k < 16; k++) {
    int ac = k > 0, v = c[k], neg = v >> 31;
    int l = (((v ^ neg) - neg + q[1][ac]) * q[2][ac]) >> 16;
    l = l > 2048 ? 2048 : l;
    l = (l ^ neg) - neg;
    lv[k] = (int16_t)l, c[k] = (int16_t)(l * q[0][ac]);
  }
  if (first) lv[0] = 0;
  int last = first - 1;
  for (int i = first; i < 16; i++) {
    zz[i] = lv[kZigzag[i]];
    if (zz[i]) last = i;
  }
  return last;
}

__device__ void fwht4(const int16_t *dc, int16_t *out) {
  int t[16];
  for (int i = 0; i < 4; i++) {
    const int16_t *r = dc + 4 * i;
    int a = r[0] + r[3], b = r[1] + r[2], c = r[1] - r[2], d = r[0] - r[3];
    t[4 * i] = a + b, t[4 * i + 1] = c + d, t[4 * i + 2] = a - b, t[4 * i + 3] = d - c;
  }
  for (int i = 0; i < 4; i++) {
    int a = t[i] + t[12 + i], b = t[4 + i] + t[8 + i], c = t[4 + i] - t[8 + i],
        d = t[i] - t[12 + i];
    int v[4] = {a + b, c + d, a - b, d - c};
    for (int j = 0; j < 4; j++) out[4 * j + i] = (int16_t)((v[j] + (v[j] > 0)) >> 1);
  }
}

__device__ void iwht4(const int16_t *in, int16_t *out) {
  int t[16];
  for (int i = 0; i < 4; i++) {
    int a = in[i] + in[12 + i], b = in[4 + i] + in[8 + i], c = in[4 + i] - in[8 + i],
        d = in[i] - in[12 + i];
    t[i] = a + b, t[4 + i] = c + d, t[8 + i] = a - b, t[12 + i] = d - c;
  }
  for (int i = 0; i < 4; i++) {
    const int *r = t + 4 * i;
    int a = r[0] + r[3], b = r[1] + r[2], c = r[1] - r[2], d = r[0] - r[3];
    out[4 * i] = (int16_t)((a + b + 3) >> 3), out[4 * i + 1] = (int16_t)((c + d + 3) >> 3);
    out[4 * i + 2] = (int16_t)((a - b + 3) >> 3), out[4 * i + 3] = (int16_t)((d - c + 3) >> 3);
  }
}

__device__ __forceinline__ uint32_t warp_sum(uint32_t v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* The wavefront: one warp a macroblock row, left to right (the header says how rows wait). */
__global__ void __launch_bounds__(32) vp8_rows(vp8_args a) {
  __shared__ uint8_t src[256], srcuv[128], pred[256], preduv[128], rec[256], recuv[128];
  __shared__ uint8_t top[3][16], left[3][16];
  __shared__ int16_t coef[25][16], zz[25][16], dcs[16];
  __shared__ int lasts[25], dc_only[16], corner[3], row;
  const int t = threadIdx.x;
  if (t == 0) row = atomicAdd(a.ticket, 1);
  __syncwarp();
  const int my = row, lw = a.mbw * 16;
  if (my >= a.mbh) return;
  for (int mx = 0; mx < a.mbw; mx++) {
    if (t == 0 && my > 0) {
      while (*(volatile int *)&a.progress[my - 1] < mx + 1) {
      }
      __threadfence();
    }
    __syncwarp();
    /* the edges: the row above from the line, the column left from the last reconstruction */
    const uint8_t *lines[3] = {a.line_y, a.line_u, a.line_v};
    for (int k = 0; k < 3; k++) {
      int n = k ? 8 : 16, lwk = k ? lw / 2 : lw;
      const uint8_t *above = lines[k] + (size_t)(my > 0 ? my - 1 : 0) * lwk + (size_t)mx * n;
      if (t < n) {
        top[k][t] = my > 0 ? __ldcg(above + t) : 127;
        left[k][t] = mx == 0 ? 129 : k == 0 ? rec[t * 16 + 15] : recuv[(k - 1) * 64 + t * 8 + 7];
      }
      if (t == 0) corner[k] = my == 0 ? 127 : mx == 0 ? 129 : __ldcg(above - 1);
    }
    for (int i = t; i < 256; i += 32) {
      int r = min(my * 16 + i / 16, a.h - 1), c = min(mx * 16 + i % 16, a.w - 1);
      src[i] = a.y[(size_t)r * a.w + c];
    }
    for (int i = t; i < 128; i += 32) {
      int j = i % 64, r = min(my * 8 + j / 8, a.ch - 1), c = min(mx * 8 + j % 8, a.cw - 1);
      srcuv[i] = (i < 64 ? a.u : a.v)[(size_t)r * a.cw + c];
    }
    __syncwarp();
    /* the modes: the smallest squared error, the first of equals (vp8_enc.c's choose) */
    int dcy = dc_of(16, top[0], left[0], my > 0, mx > 0);
    int dcu = dc_of(8, top[1], left[1], my > 0, mx > 0),
        dcv = dc_of(8, top[2], left[2], my > 0, mx > 0);
    uint32_t ey[4] = {0, 0, 0, 0}, euv[4] = {0, 0, 0, 0};
    for (int i = t; i < 256; i += 32)
      for (int m = 0; m < 4; m++) {
        int d = src[i] - pred_at(m, i / 16, i % 16, top[0], left[0], corner[0], dcy);
        ey[m] += (uint32_t)(d * d);
      }
    for (int i = t; i < 128; i += 32) {
      int k = 1 + i / 64, j = i % 64;
      for (int m = 0; m < 4; m++) {
        int d = srcuv[i] - pred_at(m, j / 8, j % 8, top[k], left[k], corner[k], k == 1 ? dcu : dcv);
        euv[m] += (uint32_t)(d * d);
      }
    }
    int ymode = 0, uvmode = 0;
    uint32_t by = UINT32_MAX, buv = UINT32_MAX;
    for (int m = 0; m < 4; m++) {
      uint32_t s = warp_sum(ey[m]), su = warp_sum(euv[m]);
      if (s < by) by = s, ymode = m;
      if (su < buv) buv = su, uvmode = m;
    }
    for (int i = t; i < 256; i += 32)
      pred[i] = (uint8_t)pred_at(ymode, i / 16, i % 16, top[0], left[0], corner[0], dcy);
    for (int i = t; i < 128; i += 32) {
      int k = 1 + i / 64, j = i % 64;
      preduv[i] =
          (uint8_t)pred_at(uvmode, j / 8, j % 8, top[k], left[k], corner[k], k == 1 ? dcu : dcv);
    }
    __syncwarp();
    /* the blocks: luma by lanes 0..15 (the DCs to Y2 first), chroma by lanes 16..23 */
    if (t < 16) {
      int o = (t >> 2) * 64 + (t & 3) * 4, d;
      dc_only[t] = flat4(src + o, pred + o, 16, a.q.v[0], &d);
      if (dc_only[t]) {
        for (int k = 0; k < 16; k++) coef[t][k] = 0;
        coef[t][0] = (int16_t)d;
      } else {
        fdct4(src + o, pred + o, 16, coef[t]);
      }
      dcs[t] = coef[t][0];
    } else if (t < 24) {
      int b = t, i = (b - 16) & 3, po = (b < 20 ? 0 : 64) + (i >> 1) * 32 + (i & 1) * 4, d;
      const int(*q)[2] = a.q.v[2];
      if (flat4(srcuv + po, preduv + po, 8, q, &d)) {
        int l = ((d < 0 ? -d : d) + q[1][0]) * q[2][0] >> 16;
        for (int k = 0; k < 16; k++) coef[b][k] = 0;
        zz[b][0] = (int16_t)(d < 0 ? -l : l), coef[b][0] = (int16_t)(zz[b][0] * q[0][0]);
        lasts[b] = l ? 0 : -1;
      } else {
        fdct4(srcuv + po, preduv + po, 8, coef[b]);
        lasts[b] = quantize(coef[b], zz[b], q, 0);
      }
      idct4_add(coef[b], lasts[b] < 1, preduv + po, 8, recuv + po, 8);
    }
    __syncwarp();
    if (t == 0) {
      fwht4(dcs, coef[24]);
      lasts[24] = quantize(coef[24], zz[24], a.q.v[1], 0);
      iwht4(coef[24], dcs);
    }
    __syncwarp();
    if (t < 16) {
      int o = (t >> 2) * 64 + (t & 3) * 4;
      lasts[t] = dc_only[t] ? 0 : quantize(coef[t], zz[t], a.q.v[0], 1);
      coef[t][0] = dcs[t];
      idct4_add(coef[t], lasts[t] < 1, pred + o, 16, rec + o, 16);
    }
    __syncwarp();
    /* the analysis out, the bottom rows to the line, then the progress */
    size_t mb = (size_t)my * a.mbw + mx;
    for (int k = t; k < 400; k += 32) {
      int b = k / 16, j = k % 16;
      a.levels[mb * 400 + k] = j >= (b < 16) && j <= lasts[b] ? zz[b][j] : 0;
    }
    if (t < 25) a.last[mb * 25 + t] = (int8_t)lasts[t];
    int any = t < 25 && lasts[t] >= (t < 16);
    any = __any_sync(0xffffffffu, any);
    if (t == 0) a.modes[mb] = (uint8_t)(ymode | uvmode << 2 | !any << 4);
    if (t < 16) a.line_y[(size_t)my * lw + (size_t)mx * 16 + t] = rec[15 * 16 + t];
    if (t < 8) {
      a.line_u[(size_t)my * (lw / 2) + (size_t)mx * 8 + t] = recuv[7 * 8 + t];
      a.line_v[(size_t)my * (lw / 2) + (size_t)mx * 8 + t] = recuv[64 + 7 * 8 + t];
    }
    __threadfence();
    __syncwarp();
    if (t == 0) atomicExch(&a.progress[my], mx + 1);
  }
}

__constant__ uint8_t kBand[17] = {0, 1, 2, 3, 6, 4, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 0};

/* Whether block b of macroblock mb has levels (its context for the blocks below and right). */
__device__ __forceinline__ int has_levels(const int8_t *last, size_t mb, int b) {
  return last[mb * 25 + b] >= (b < 16);
}

/* The tokens' counts (vp8_enc.c's tokens with no writer), one thread a block, into stats
 * ([type][band][context][node][bit], 1056 * 2): the first token's context from the blocks above
 * and left in the same plane (none outside the frame; a skipped macroblock's have none), the
 * next ones' from the level before. Counted in shared memory, then added to stats. */
__global__ void vp8_stats(const int16_t *levels, const int8_t *last, const uint8_t *modes, int mbw,
                          int mbh, unsigned *stats) {
  __shared__ unsigned s[1056 * 2];
  for (int k = threadIdx.x; k < 1056 * 2; k += blockDim.x) s[k] = 0;
  __syncthreads();
  size_t n = (size_t)mbw * mbh * 25;
  for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n;
       g += (size_t)gridDim.x * blockDim.x) {
    size_t mb = g / 25;
    int b = (int)(g % 25), mx = (int)(mb % mbw), my = (int)(mb / mbw), type, first = 0, ctx;
    if (modes[mb] >> 4) continue; /* skipped: no tokens */
    if (b < 16) {
      type = 0, first = 1;
      ctx = (b >= 4 ? has_levels(last, mb, b - 4) : my > 0 && has_levels(last, mb - mbw, b + 12)) +
            ((b & 3) ? has_levels(last, mb, b - 1) : mx > 0 && has_levels(last, mb - 1, b + 3));
    } else if (b < 24) {
      int i = (b - 16) & 3;
      type = 2;
      ctx = (i >= 2 ? has_levels(last, mb, b - 2) : my > 0 && has_levels(last, mb - mbw, b + 2)) +
            ((i & 1) ? has_levels(last, mb, b - 1) : mx > 0 && has_levels(last, mb - 1, b + 1));
    } else {
      type = 1;
      ctx = (my > 0 && has_levels(last, mb - mbw, 24)) + (mx > 0 && has_levels(last, mb - 1, 24));
    }
    const int16_t *zz = levels + g * 16;
    int end = last[g], after_zero = 0;
    for (int i = first; i < 16; i++) {
      unsigned *c = s + (type * 264 + (kBand[i] * 3 + ctx) * 11) * 2;
      if (!after_zero) {
        atomicAdd(&c[0 * 2 + (i <= end)], 1u);
        if (i > end) break;
      }
      int v = abs(zz[i]);
      after_zero = v == 0;
      atomicAdd(&c[1 * 2 + (v != 0)], 1u);
      if (v == 0) {
        ctx = 0;
        continue;
      }
      atomicAdd(&c[2 * 2 + (v > 1)], 1u);
      if (v > 1) {
        atomicAdd(&c[3 * 2 + (v > 4)], 1u);
        if (v <= 4) {
          atomicAdd(&c[4 * 2 + (v > 2)], 1u);
          if (v > 2) atomicAdd(&c[5 * 2 + (v == 4)], 1u);
        } else {
          int cat = v <= 6 ? 0 : v <= 10 ? 1 : v <= 18 ? 2 : v <= 34 ? 3 : v <= 66 ? 4 : 5;
          atomicAdd(&c[6 * 2 + (cat > 1)], 1u);
          if (cat <= 1) {
            atomicAdd(&c[7 * 2 + cat], 1u);
          } else {
            atomicAdd(&c[8 * 2 + (cat > 3)], 1u);
            atomicAdd(&c[(cat > 3 ? 10 : 9) * 2 + (cat & 1)], 1u);
          }
        }
      }
      ctx = v > 1 ? 2 : 1;
    }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < 1056 * 2; k += blockDim.x)
    if (s[k]) atomicAdd(&stats[k], s[k]);
}

} // namespace

/* The device buffer's parts, in order, each 16-byte aligned: planes, lines, outputs, counters. */
struct vp8_layout {
  size_t y, u, v, line_y, line_u, line_v, modes, levels, last, stats, count, total, out_bytes;
};

static vp8_layout layout(int w, int h) {
  size_t cw = (size_t)(w + 1) / 2, ch = (size_t)(h + 1) / 2, mbw = (size_t)(w + 15) / 16,
         mbh = (size_t)(h + 15) / 16, n = mbw * mbh, at = 0;
  vp8_layout l;
  size_t sizes[] = {(size_t)w * h,  cw * ch, cw * ch, mbh * mbw * 16, mbh * mbw * 8,
                    mbh * mbw * 8,  n,       n * 800, n * 25,         1056 * 2 * 4,
                    8 + 4 + 4 * mbh};
  size_t *parts[] = {&l.y,     &l.u,      &l.v,    &l.line_y, &l.line_u, &l.line_v,
                     &l.modes, &l.levels, &l.last, &l.stats,  &l.count};
  for (int i = 0; i < 11; i++) *parts[i] = at, at += (sizes[i] + 15) / 16 * 16;
  l.total = at;
  l.out_bytes = l.count - l.modes; /* modes, levels, last and stats, copied out in one piece */
  return l;
}

enum gpu_status gpu_vp8_analyse(struct gpu_ctx *ctx, enum gpu_image which,
                                const struct cpu_image *img, const int q[3][3][2], int smooth_step,
                                int smooth_per, struct gpu_vp8 *out) {
  out->smooth = 0;
  if (img->channels != 3 || img->depth != 8) return GPU_ERROR;
  int w = img->width, h = img->height, cw = (w + 1) / 2, ch = (h + 1) / 2;
  vp8_layout l = layout(w, h);
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = scratch_grow(ctx, SLOT_ENC, l.total);
  if (st == GPU_OK && l.out_bytes + 8 > ctx->h_vp8_cap) {
    CUDA_TRY(ctx, cudaStreamSynchronize(ctx->s));
    cudaFreeHost(ctx->h_vp8);
    ctx->h_vp8 = NULL, ctx->h_vp8_cap = 0;
    CUDA_TRY(ctx, cudaMallocHost(&ctx->h_vp8, l.out_bytes + 8));
    ctx->h_vp8_cap = l.out_bytes + 8;
  }
  if (st != GPU_OK) return st;
  uint8_t *d = (uint8_t *)ctx->scratch[SLOT_ENC].p, *h_out = (uint8_t *)ctx->h_vp8;
  unsigned long long *steps = (unsigned long long *)(d + l.count);
  CUDA_TRY(ctx, cudaMemsetAsync(d + l.stats, 0, l.total - l.stats, ctx->s));
  const uint8_t *rgb = (const uint8_t *)(which == GPU_INPUT ? ctx->d_in : ctx->d_out);
  vp8_planes<<<dim3((unsigned)(cw + 127) / 128, (unsigned)ch), 128, 0, ctx->s>>>(
      rgb, w, h, smooth_step, d + l.y, d + l.u, d + l.v, steps);
  CUDA_TRY(ctx, cudaGetLastError());
  unsigned long long *h_steps = (unsigned long long *)(h_out + l.out_bytes);
  CUDA_TRY(ctx, cudaMemcpyAsync(h_steps, steps, 8, cudaMemcpyDeviceToHost, ctx->s));
  CUDA_TRY(ctx, cudaStreamSynchronize(ctx->s));
  if (*h_steps > (unsigned long long)w * (unsigned long long)h / (unsigned)smooth_per)
    return GPU_OK; /* not smooth: libwebp's, from the host */
  vp8_args a;
  a.y = d + l.y, a.u = d + l.u, a.v = d + l.v;
  a.w = w, a.h = h, a.cw = cw, a.ch = ch, a.mbw = (w + 15) / 16, a.mbh = (h + 15) / 16;
  a.line_y = d + l.line_y, a.line_u = d + l.line_u, a.line_v = d + l.line_v;
  a.ticket = (int *)(d + l.count + 8), a.progress = a.ticket + 1;
  a.modes = d + l.modes, a.levels = (int16_t *)(d + l.levels), a.last = (int8_t *)(d + l.last);
  memcpy(a.q.v, q, sizeof a.q.v);
  vp8_rows<<<(unsigned)a.mbh, 32, 0, ctx->s>>>(a);
  CUDA_TRY(ctx, cudaGetLastError());
  size_t blocks = (size_t)a.mbw * a.mbh * 25;
  vp8_stats<<<(unsigned)min((blocks + 255) / 256, (size_t)264), 256, 0, ctx->s>>>(
      a.levels, a.last, a.modes, a.mbw, a.mbh, (unsigned *)(d + l.stats));
  CUDA_TRY(ctx, cudaGetLastError());
  CUDA_TRY(ctx, cudaMemcpyAsync(h_out, d + l.modes, l.out_bytes, cudaMemcpyDeviceToHost, ctx->s));
  CUDA_TRY(ctx, cudaStreamSynchronize(ctx->s));
  out->smooth = 1;
  out->modes = h_out;
  out->levels = (const int16_t *)(h_out + (l.levels - l.modes));
  out->last = (const int8_t *)(h_out + (l.last - l.modes));
  out->stats = (const uint32_t *)(h_out + (l.stats - l.modes));
  return GPU_OK;
}

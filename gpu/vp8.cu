/* Lossy WebP's first pass on the device, the twin of codecs/webp_yuv.c's conversion and of
 * codecs/vp8_enc.c's analyse_mb: the same integer steps (codecs/vp8_dsp.h) in the same order, so
 * that the modes, levels and token counts are the CPU's bit for bit (tests/gpu_codecs.c compares
 * them) and the file the codecs write from them is the same bytes. Three kernels: vp8_planes
 * converts the image and counts its luma steps (the host stops there when the image is not
 * smooth), vp8_rows codes the macroblocks as a wavefront, vp8_stats counts the tokens. */
#include "gpu_int.cuh"

#include "../codecs/vp8_dsp.h"

namespace {

__constant__ uint8_t kZigzag[16] = VP8_ZIGZAG;
__constant__ uint8_t kBand[17] = VP8_BANDS;

enum { DC_PRED, V_PRED, H_PRED, TM_PRED };

/* The quantisers, gpu_vp8_analyse's q: [Y, Y2, UV], each vp8_dsp.h's [step, bias, iq][DC, AC]. */
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

/* webp_yuv.c's planes, one thread per 2x2 block, and its count of luma steps over `step`
 * levels. */
__global__ void vp8_planes(const uint8_t *rgb, int w, int h, int step, uint8_t *y, uint8_t *u,
                           uint8_t *v, unsigned long long *steps) {
  int cw = (w + 1) / 2, cx = blockIdx.x * blockDim.x + threadIdx.x, cy = blockIdx.y;
  unsigned n = 0;
  if (cx < cw) {
    int x0 = 2 * cx, y0 = 2 * cy, x1 = min(x0 + 1, w - 1), y1 = min(y0 + 1, h - 1);
    for (int r = y0; r <= y1; r++) {
      const uint8_t *row = rgb + (size_t)r * w * 3;
      int prev = x0 > 0 ? vp8_luma(row + 3 * (x0 - 1)) : -1;
      for (int x = x0; x <= x1; x++) {
        int l = vp8_luma(row + 3 * x);
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
    u[at] = vp8_chroma_u(sr, sg, sb);
    v[at] = vp8_chroma_v(sr, sg, sb);
  }
  for (int o = 16; o > 0; o >>= 1) n += __shfl_down_sync(0xffffffffu, n, o);
  if ((threadIdx.x & 31) == 0 && n) atomicAdd(steps, (unsigned long long)n);
}

/* ---- vp8_rows: one macroblock row per warp ---- */

/* The prediction of mode at (r, c) of an n x n block (vp8_enc.c's predict), dc its DC. */
__device__ __forceinline__ int pred_at(int mode, int r, int c, const uint8_t *top,
                                       const uint8_t *left, int p, int dc) {
  int v = mode == DC_PRED  ? dc
          : mode == V_PRED ? top[c]
          : mode == H_PRED ? left[r]
                           : left[r] + top[c] - p;
  return v < 0 ? 0 : v > 255 ? 255 : v;
}

__device__ __forceinline__ uint32_t warp_sum(uint32_t v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* A macroblock's working set, in shared memory: planes Y (256 bytes) and U, V (64 each). */
struct mb_work {
  uint8_t src[256], srcuv[128];   /* the source, its pixels past the image repeating the last */
  uint8_t pred[256], preduv[128]; /* the chosen modes' prediction */
  uint8_t rec[256], recuv[128];   /* the reconstruction, the next macroblock's left edge */
  uint8_t top[3][16], left[3][16];
  int corner[3];        /* the pixel above-left, per plane */
  int16_t coef[25][16]; /* per block (Y 0..15, U 16..19, V 20..23, Y2 24), natural order */
  int16_t zz[25][16];   /* the levels, zigzag order */
  int16_t dcs[16];      /* the luma DCs, then their reconstruction from Y2 */
  int lasts[25];        /* each block's last level (vp8_quantize's) */
  int dc_only[16];      /* the luma block is flat: its DC alone */
};

/* Lane 0 waits until the row above has finished macroblock mx (the one above this one). */
__device__ __forceinline__ void wait_for_row_above(const vp8_args &a, int my, int mx, int t) {
  if (t == 0 && my > 0) {
    while (*(volatile int *)&a.progress[my - 1] < mx + 1) {
    }
    __threadfence();
  }
  __syncwarp();
}

/* The edges of macroblock (mx, my): the row above from the line the row above published (read
 * with __ldcg, from the L2: the L1 may hold a stale copy), the column left from the last
 * reconstruction, 127s and 129s outside the frame. */
__device__ __forceinline__ void load_edges(const vp8_args &a, int my, int mx, int t, mb_work &s) {
  const uint8_t *lines[3] = {a.line_y, a.line_u, a.line_v};
  const int lw = a.mbw * 16;
  for (int k = 0; k < 3; k++) {
    int n = k ? 8 : 16, lwk = k ? lw / 2 : lw;
    const uint8_t *above = lines[k] + (size_t)(my > 0 ? my - 1 : 0) * lwk + (size_t)mx * n;
    if (t < n) {
      s.top[k][t] = my > 0 ? __ldcg(above + t) : 127;
      s.left[k][t] = mx == 0  ? 129
                     : k == 0 ? s.rec[t * 16 + 15]
                              : s.recuv[(k - 1) * 64 + t * 8 + 7];
    }
    if (t == 0) s.corner[k] = my == 0 ? 127 : mx == 0 ? 129 : __ldcg(above - 1);
  }
}

/* The source pixels of macroblock (mx, my), the image's last row and column repeated past it. */
__device__ __forceinline__ void load_source(const vp8_args &a, int my, int mx, int t, mb_work &s) {
  for (int i = t; i < 256; i += 32) {
    int r = min(my * 16 + i / 16, a.h - 1), c = min(mx * 16 + i % 16, a.w - 1);
    s.src[i] = a.y[(size_t)r * a.w + c];
  }
  for (int i = t; i < 128; i += 32) {
    int j = i % 64, r = min(my * 8 + j / 8, a.ch - 1), c = min(mx * 8 + j % 8, a.cw - 1);
    s.srcuv[i] = (i < 64 ? a.u : a.v)[(size_t)r * a.cw + c];
  }
}

/* The luma and chroma modes with the smallest squared error, the first of equals (vp8_enc.c's
 * choose), each lane summing its 8 luma and 4 chroma samples; their prediction into s.pred and
 * s.preduv. Returns the modes byte's luma mode | chroma mode << 2. */
__device__ __forceinline__ int choose_modes(int my, int mx, int t, mb_work &s) {
  int dcy = vp8_dc_pred(16, s.top[0], s.left[0], my > 0, mx > 0);
  int dcu = vp8_dc_pred(8, s.top[1], s.left[1], my > 0, mx > 0),
      dcv = vp8_dc_pred(8, s.top[2], s.left[2], my > 0, mx > 0);
  uint32_t ey[4] = {0, 0, 0, 0}, euv[4] = {0, 0, 0, 0};
  for (int i = t; i < 256; i += 32)
    for (int m = 0; m < 4; m++) {
      int d = s.src[i] - pred_at(m, i / 16, i % 16, s.top[0], s.left[0], s.corner[0], dcy);
      ey[m] += (uint32_t)(d * d);
    }
  for (int i = t; i < 128; i += 32) {
    int k = 1 + i / 64, j = i % 64;
    for (int m = 0; m < 4; m++) {
      int d = s.srcuv[i] -
              pred_at(m, j / 8, j % 8, s.top[k], s.left[k], s.corner[k], k == 1 ? dcu : dcv);
      euv[m] += (uint32_t)(d * d);
    }
  }
  int ymode = 0, uvmode = 0;
  uint32_t by = UINT32_MAX, buv = UINT32_MAX;
  for (int m = 0; m < 4; m++) {
    uint32_t e = warp_sum(ey[m]), eu = warp_sum(euv[m]);
    if (e < by) by = e, ymode = m;
    if (eu < buv) buv = eu, uvmode = m;
  }
  for (int i = t; i < 256; i += 32)
    s.pred[i] = (uint8_t)pred_at(ymode, i / 16, i % 16, s.top[0], s.left[0], s.corner[0], dcy);
  for (int i = t; i < 128; i += 32) {
    int k = 1 + i / 64, j = i % 64;
    s.preduv[i] = (uint8_t)pred_at(uvmode, j / 8, j % 8, s.top[k], s.left[k], s.corner[k],
                                   k == 1 ? dcu : dcv);
  }
  return ymode | uvmode << 2;
}

/* Lane t < 16: luma block t's DCT (its DC alone when flat), its DC to s.dcs for Y2. */
__device__ __forceinline__ void transform_luma(const vp8_args &a, int t, mb_work &s) {
  int o = (t >> 2) * 64 + (t & 3) * 4, d;
  s.dc_only[t] = vp8_flat(s.src + o, s.pred + o, 16, a.q.v[0], &d);
  if (s.dc_only[t]) {
    for (int k = 0; k < 16; k++) s.coef[t][k] = 0;
    s.coef[t][0] = (int16_t)d;
  } else {
    vp8_fdct4(s.src + o, s.pred + o, 16, s.coef[t]);
  }
  s.dcs[t] = s.coef[t][0];
}

/* Chroma block b (16..23) whole: its DCT (its DC alone when flat), levels and reconstruction. */
__device__ __forceinline__ void code_chroma(const vp8_args &a, int b, mb_work &s) {
  int i = (b - 16) & 3, po = (b < 20 ? 0 : 64) + (i >> 1) * 32 + (i & 1) * 4, d;
  const int(*q)[2] = a.q.v[2];
  if (vp8_flat(s.srcuv + po, s.preduv + po, 8, q, &d)) {
    for (int k = 0; k < 16; k++) s.coef[b][k] = 0;
    s.coef[b][0] = (int16_t)d;
    s.zz[b][0] = vp8_level(&s.coef[b][0], q[0][0], q[1][0], q[2][0]);
    s.lasts[b] = s.zz[b][0] ? 0 : -1;
  } else {
    vp8_fdct4(s.srcuv + po, s.preduv + po, 8, s.coef[b]);
    s.lasts[b] = vp8_quantize(s.coef[b], s.zz[b], q, 0, kZigzag);
  }
  vp8_idct4_add(s.coef[b], s.lasts[b] < 1, s.preduv + po, 8, s.recuv + po, 8);
}

/* Lane 0: the Y2 block, from the luma DCs to its levels and back to their reconstruction. */
__device__ __forceinline__ void code_y2(const vp8_args &a, mb_work &s) {
  vp8_fwht4(s.dcs, s.coef[24]);
  s.lasts[24] = vp8_quantize(s.coef[24], s.zz[24], a.q.v[1], 0, kZigzag);
  vp8_iwht4(s.coef[24], s.dcs);
}

/* Lane t < 16: luma block t's AC levels and its reconstruction with the DC Y2 gave back. */
__device__ __forceinline__ void code_luma(const vp8_args &a, int t, mb_work &s) {
  int o = (t >> 2) * 64 + (t & 3) * 4;
  s.lasts[t] = s.dc_only[t] ? 0 : vp8_quantize(s.coef[t], s.zz[t], a.q.v[0], 1, kZigzag);
  s.coef[t][0] = s.dcs[t];
  vp8_idct4_add(s.coef[t], s.lasts[t] < 1, s.pred + o, 16, s.rec + o, 16);
}

/* Macroblock (mx, my)'s analysis out (its levels, block ends and modes byte, skip when no block
 * has levels), its bottom rows to the lines, then its progress for the row below. */
__device__ __forceinline__ void publish(const vp8_args &a, int my, int mx, int t, const mb_work &s,
                                        int modes) {
  const int lw = a.mbw * 16;
  size_t mb = (size_t)my * a.mbw + mx;
  for (int k = t; k < 400; k += 32) {
    int b = k / 16, j = k % 16;
    a.levels[mb * 400 + k] = j >= (b < 16) && j <= s.lasts[b] ? s.zz[b][j] : 0;
  }
  if (t < 25) a.last[mb * 25 + t] = (int8_t)s.lasts[t];
  int any = t < 25 && s.lasts[t] >= (t < 16);
  any = __any_sync(0xffffffffu, any);
  if (t == 0) a.modes[mb] = (uint8_t)(modes | !any << 4);
  if (t < 16) a.line_y[(size_t)my * lw + (size_t)mx * 16 + t] = s.rec[15 * 16 + t];
  if (t < 8) {
    a.line_u[(size_t)my * (lw / 2) + (size_t)mx * 8 + t] = s.recuv[7 * 8 + t];
    a.line_v[(size_t)my * (lw / 2) + (size_t)mx * 8 + t] = s.recuv[64 + 7 * 8 + t];
  }
  __threadfence();
  __syncwarp();
  if (t == 0) atomicExch(&a.progress[my], mx + 1);
}

/* The wavefront: one warp a macroblock row, left to right. A macroblock needs the reconstruction
 * of the one to its left (this warp's, the step before) and the bottom row of the ones above
 * (another warp's): each row publishes its bottom rows to the lines and its progress, and the row
 * below waits for the macroblock above before it starts. Rows are taken in order from a ticket,
 * so the row a warp waits on has always been taken by a warp already running: no wait can
 * deadlock. Within a macroblock the 32 lanes share the mode choice, then lanes 0..15 take the
 * luma blocks and 16..23 the chroma blocks, lane 0 the Y2 block between. */
__global__ void __launch_bounds__(32) vp8_rows(vp8_args a) {
  __shared__ mb_work s;
  __shared__ int row;
  const int t = threadIdx.x;
  if (t == 0) row = atomicAdd(a.ticket, 1);
  __syncwarp();
  const int my = row;
  if (my >= a.mbh) return;
  for (int mx = 0; mx < a.mbw; mx++) {
    wait_for_row_above(a, my, mx, t);
    load_edges(a, my, mx, t, s);
    load_source(a, my, mx, t, s);
    __syncwarp();
    int modes = choose_modes(my, mx, t, s);
    __syncwarp();
    if (t < 16)
      transform_luma(a, t, s);
    else if (t < 24)
      code_chroma(a, t, s);
    __syncwarp();
    if (t == 0) code_y2(a, s);
    __syncwarp();
    if (t < 16) code_luma(a, t, s);
    __syncwarp();
    publish(a, my, mx, t, s, modes);
  }
}

/* Whether block b of macroblock mb has levels (its context for the blocks below and right). */
__device__ __forceinline__ int has_levels(const int8_t *last, size_t mb, int b) {
  return last[mb * 25 + b] >= (b < 16);
}

/* The tokens' counts (vp8_enc.c's tokens with no writer), one thread a block, into stats
 * ([type][band][context][node][bit], 1056 * 2): the first token's context from the blocks above
 * and left in the same plane (none outside the frame; a skipped macroblock's have none), the
 * next ones' from the level before. Counted in shared memory, then added to stats, so that the
 * host only chooses the probabilities and writes (codec_vp8_write with the counts given). */
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

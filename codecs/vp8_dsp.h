/* vp8_dsp.h: the integer steps of blurd's VP8 encoder that the host and the device share, so
 * that its first pass gives the same levels bit for bit wherever it runs: codecs/vp8_enc.c and
 * codecs/webp_yuv.c on the host, gpu/vp8.cu on the device. Plain C that nvcc reads too: VP8_DSP
 * makes the functions __host__ __device__ there, and the tables they read are passed in, each
 * side keeping its own copy made from the initialisers below. */
#ifndef BLURD_CODECS_VP8_DSP_H
#define BLURD_CODECS_VP8_DSP_H

#include <stdint.h>
#include <stdlib.h>

#ifdef __CUDACC__
#define VP8_DSP __host__ __device__
#else
#define VP8_DSP
#endif

/* The coefficients' zigzag order and their bands (RFC 6386 section 13), as array initialisers. */
/* clang-format off */
#define VP8_ZIGZAG {0, 1, 4, 8, 5, 2, 3, 6, 9, 12, 13, 10, 7, 11, 14, 15}
#define VP8_BANDS  {0, 1, 2, 3, 6, 4, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 0}
/* clang-format on */

/* libwebp's luma of the RGB pixel p (BT.601, limited range, VP8RGBToY's rounding). */
static inline VP8_DSP uint8_t vp8_luma(const uint8_t *p) {
  return (uint8_t)((16839 * p[0] + 33059 * p[1] + 6420 * p[2] + (16 << 16) + (1 << 15)) >> 16);
}

/* libwebp's chroma (VP8RGBToU and VP8RGBToV) of the sums r, g, b of a 2x2 block's pixels. */
static inline VP8_DSP uint8_t vp8_chroma_u(int r, int g, int b) {
  return (uint8_t)((-9719 * r - 19081 * g + 28800 * b + (128 << 18) + (1 << 17)) >> 18);
}
static inline VP8_DSP uint8_t vp8_chroma_v(int r, int g, int b) {
  return (uint8_t)((28800 * r - 24116 * g - 4684 * b + (128 << 18) + (1 << 17)) >> 18);
}

/* The DC prediction of an n x n block (n = 16 or 8) from the row above and the column left:
 * the mean of the edges inside the frame, 128 when neither is (RFC 6386 section 12.2). */
static inline VP8_DSP int vp8_dc_pred(int n, const uint8_t *top, const uint8_t *left, int has_top,
                                      int has_left) {
  int s = 0, shift = n == 16 ? 4 : 3, k = has_top + has_left;
  for (int i = 0; i < n; i++) s += (has_top ? top[i] : 0) + (has_left ? left[i] : 0);
  return k == 0 ? 128 : (s + (n * k >> 1)) >> (shift + k - 1);
}

/* The forward DCT of the 4x4 residue src - pred (rows stride apart) to VP8's scale (twice the
 * orthonormal DCT, which RFC 6386's inverse undoes), in fixed point: sqrt(2) cos(pi/8) = 5352 /
 * 4096, sqrt(2) sin(pi/8) = 2217 / 4096; the vertical pass keeps 3 more bits. Not normative: any
 * close forward transform decodes. out is in natural order. */
static inline VP8_DSP void vp8_fdct4(const uint8_t *src, const uint8_t *pred, int stride,
                                     int16_t *out) {
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

/* RFC 6386 section 14.4's inverse DCT of in (dequantised), added to pred (rows ps apart) and
 * clamped into dst (rows ds apart), vertical pass first. A block with only its DC (dc_only)
 * adds (DC + 4) >> 3 everywhere, which is what the full inverse gives. */
static inline VP8_DSP void vp8_idct4_add(const int16_t *in, int dc_only, const uint8_t *pred,
                                         int ps, uint8_t *dst, int ds) {
  if (dc_only) {
    int dc = (in[0] + 4) >> 3;
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) {
        int s = pred[i * ps + j] + dc;
        dst[i * ds + j] = (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
      }
    return;
  }
  int t[4][4], m[4][4];
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
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      int s = pred[i * ps + j] + m[i][j];
      dst[i * ds + j] = (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
    }
}

/* The forward Walsh-Hadamard transform of the 16 luma DCs into the Y2 block (RFC 6386's inverse
 * is M X M / 8 with M symmetric and M M = 4 I, so the forward is M D M / 2). */
static inline VP8_DSP void vp8_fwht4(const int16_t *dc, int16_t *out) {
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

/* The inverse Walsh-Hadamard transform of RFC 6386 section 14.3: the Y2 block (dequantised) back
 * to the 16 luma DCs. */
static inline VP8_DSP void vp8_iwht4(const int16_t *in, int16_t *out) {
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

/* A quantiser, q[step, bias, iq][DC, AC]: a coefficient c's level is ((|c| + bias) * iq) >> 16,
 * at most 2048, with iq = 2^16 / step rounded up; a bias under half a step is a dead zone. */

/* 1 when every AC coefficient of the 4x4 residue src - pred (rows stride apart) quantises to
 * zero with q, by a bound that needs no transform: an AC coefficient (twice the orthonormal
 * DCT's) is at most 2 * 0.6533^2 = 0.8536 times the residue's sum of absolute deviations from its
 * mean, and a level is zero when |X| + bias < step (one level of margin for vp8_fdct4's
 * rounding). *dc is then the DC vp8_fdct4 gives, (sum + 1) >> 1. */
static inline VP8_DSP int vp8_flat(const uint8_t *src, const uint8_t *pred, int stride,
                                   const int q[3][2], int *dc) {
  int r[16], sum = 0, dev = 0;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) sum += r[4 * i + j] = src[i * stride + j] - pred[i * stride + j];
  for (int k = 0; k < 16; k++) dev += abs(16 * r[k] - sum);
  *dc = (sum + 1) >> 1;
  return dev * 875 < (q[0][1] - q[1][1] - 1) * 16384; /* dev / 16 * 0.8545 < room */
}

/* The level of the coefficient *c with the step, bias and iq of its quantiser, *c replaced by
 * its dequantised value. */
static inline VP8_DSP int16_t vp8_level(int16_t *c, int step, int bias, int iq) {
  int v = *c, neg = v >> 31;
  int l = (((v ^ neg) - neg + bias) * iq) >> 16;
  l = l > 2048 ? 2048 : l;
  l = (l ^ neg) - neg;
  *c = (int16_t)(l * step);
  return (int16_t)l;
}

/* Quantises the coefficients c (natural order) with q into levels zz in zigzag order (the table
 * zigzag: VP8_ZIGZAG), from zigzag position first, and replaces c by their dequantised values.
 * Returns the last nonzero zigzag position, or first - 1 when every level is zero. */
static inline VP8_DSP int vp8_quantize(int16_t *c, int16_t *zz, const int q[3][2], int first,
                                       const uint8_t *zigzag) {
  int16_t lv[16];
  for (int k = 0; k < 16; k++) lv[k] = vp8_level(c + k, q[0][k > 0], q[1][k > 0], q[2][k > 0]);
  if (first) lv[0] = 0;
  int last = first - 1;
  for (int i = first; i < 16; i++) {
    zz[i] = lv[zigzag[i]];
    if (zz[i]) last = i;
  }
  return last;
}

#endif

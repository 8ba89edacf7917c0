/* vp8_enc.c: blurd's own VP8 key-frame encoder (RFC 6386), for lossy WebP of smooth images:
 * 16x16 predictors only, one segment, one token partition, the normal loop filter. A first pass
 * (analyse_mb) predicts, transforms, quantises and reconstructs every macroblock and counts its
 * tokens; a second writes the levels it kept with the boolean coder, under the probabilities those
 * counts chose. The first pass's integer steps are vp8_dsp.h's, which its twin on the device
 * (gpu/vp8.cu) shares, and codec_vp8_write makes the same file from that twin's arrays. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codecs_int.h"
#include "vp8_dsp.h"
#include "vp8_tables.h"

enum { DC_PRED, V_PRED, H_PRED, TM_PRED };
enum { TYPE_Y_AFTER_Y2, TYPE_Y2, TYPE_UV }; /* RFC 6386's block types 0, 1, 2 (3 is unused) */

static const uint8_t zigzag[16] = VP8_ZIGZAG;
static const uint8_t band[17] = VP8_BANDS;
/* The extra bits of categories 1 to 6 (base 5, 7, 11, 19, 35, 67), most significant first. */
static const uint8_t cat_probs[6][12] = {
    {159},
    {165, 145},
    {173, 148, 140},
    {176, 155, 140, 135},
    {180, 157, 141, 134, 130},
    {254, 254, 243, 230, 196, 177, 153, 140, 133, 130, 129},
};
static const int cat_base[6] = {5, 7, 11, 19, 35, 67};

/* ---- The boolean coder (RFC 6386 section 7). ---- */

struct bw {
  uint8_t *buf;
  size_t n, cap;
  uint32_t range; /* 128..255 between bits */
  uint32_t low;   /* the interval's low end: the bits not yet written, over an 8-bit window */
  int pending;    /* bits of low above its window, not yet written */
  int oom;
};

static void bw_init(struct bw *w, size_t cap) {
  *w = (struct bw){codec_malloc(cap), 0, cap, 255, 0, 0, 0};
  w->oom = w->buf == NULL;
}

static void bw_append(struct bw *w, uint8_t byte) {
  if (w->n == w->cap && !w->oom) {
    uint8_t *p = codec_realloc(w->buf, 2 * w->cap);
    if (p == NULL)
      w->oom = 1;
    else
      w->buf = p, w->cap *= 2;
  }
  if (!w->oom) w->buf[w->n++] = byte;
}

/* Writes the oldest pending byte (pending is 8..15), first carrying into the bytes out. */
static void bw_byte(struct bw *w) {
  int p = w->pending;
  if (w->low >> (p + 8) & 1 && !w->oom) {
    size_t i = w->n;
    while (i > 0 && w->buf[i - 1] == 0xff) w->buf[--i] = 0;
    if (i > 0) w->buf[i - 1]++;
  }
  bw_append(w, (uint8_t)(w->low >> p));
  w->low &= (1u << p) - 1;
  w->pending = p - 8;
}

/* One bool, 0 with probability prob / 256. */
static inline void bw_put(struct bw *w, int bit, int prob) {
  uint32_t split = 1 + (((w->range - 1) * (uint32_t)prob) >> 8);
  if (bit)
    w->low += split, w->range -= split;
  else
    w->range = split;
  if (w->range < 128) {
    int s = __builtin_clz(w->range) - 24;
    w->range <<= s, w->low <<= s, w->pending += s;
    if (w->pending >= 8) bw_byte(w);
  }
}

static void bw_literal(struct bw *w, uint32_t v, int bits) {
  while (bits-- > 0) bw_put(w, v >> bits & 1, 128);
}

/* Writes every bit of the interval's low end, then two zero bytes: libwebp's reader fails a
 * partition it must read past the end of. */
static void bw_finish(struct bw *w) {
  w->low <<= 8, w->pending += 8;
  bw_byte(w);
  if (w->pending > 0) {
    w->low <<= 8 - w->pending, w->pending = 8;
    bw_byte(w);
  }
  bw_append(w, 0);
  bw_append(w, 0);
}

/* ---- Quantisers (vp8_dsp.h's q[step, bias, iq][DC, AC]). ---- */

/* The quantiser of steps dc and ac; the ACs' rounding bias is ac_bias_q8 / 256 of a step (less
 * than half: a dead zone), the DC's half a step. */
static void quant_init(int q[3][2], int dc, int ac, int ac_bias_q8) {
  for (int k = 0; k < 2; k++) {
    int step = k ? ac : dc;
    q[0][k] = step, q[1][k] = k ? step * ac_bias_q8 >> 8 : step / 2;
    q[2][k] = (65536 + step - 1) / step;
  }
}

/* ---- Prediction (RFC 6386 section 12, the 16x16 and 8x8 modes). ---- */

/* v clamped to 0..255, lane by lane: four 32-bit lanes (GCC's and clang's vector extension). */
typedef int32_t v4 __attribute__((vector_size(16)));
static inline v4 clamp255(v4 v) {
  v &= ~(v >> 31);
  v4 over = v > 255;
  return (v & ~over) | (over & 255);
}

/* The n x n prediction (n = 16 or 8) of mode from the row above (127s on the frame's top row),
 * the column left (129s on its left column) and the pixel above-left p. DC averages only the
 * edges inside the frame (128 when none is). */
static void predict(uint8_t *dst, int n, int mode, const uint8_t *top, const uint8_t *left, int p,
                    int has_top, int has_left) {
  if (mode == DC_PRED) {
    memset(dst, vp8_dc_pred(n, top, left, has_top, has_left), (size_t)(n * n));
  } else if (mode == V_PRED) {
    for (int r = 0; r < n; r++) memcpy(dst + r * n, top, (size_t)n);
  } else if (mode == H_PRED) {
    for (int r = 0; r < n; r++) memset(dst + r * n, left[r], (size_t)n);
  } else {
    v4 t[4];
    for (int c = 0; c < n; c += 4) t[c / 4] = (v4){top[c], top[c + 1], top[c + 2], top[c + 3]};
    for (int r = 0; r < n; r++)
      for (int c = 0; c < n; c += 4) {
        v4 v = clamp255(t[c / 4] + (left[r] - p));
        for (int j = 0; j < 4; j++) dst[r * n + c + j] = (uint8_t)v[j];
      }
  }
}

static uint32_t sse(const uint8_t *a, const uint8_t *b, int n) {
  uint32_t s = 0;
  for (int i = 0; i < n; i++) s += (uint32_t)((a[i] - b[i]) * (a[i] - b[i]));
  return s;
}

/* ---- The encoder's state. ---- */

struct plane {
  const uint8_t *src;
  int stride;
  uint8_t *rec; /* the reconstruction, whole macroblocks */
  int rstride;
};

struct enc {
  int w, h, mbw, mbh;
  struct plane pl[3]; /* Y, U, V */
  int quant[3][3][2]; /* Y, Y2, UV: vp8_dsp.h's quantisers */
  uint8_t *modes;     /* per macroblock: luma mode | chroma mode << 2 | skip << 4 */
  int16_t *lv;        /* the levels kept, per coded block: its end, then its levels */
  size_t nlv, caplv;
  uint32_t stats[VP8_PROBS][2];
  uint8_t probs[VP8_PROBS];
  uint8_t *nz_top; /* per macroblock column: 4 Y, 2 U, 2 V, Y2: had levels */
  uint8_t nz_left[9];
  int q, level;                      /* the quantiser index, the loop filter's level */
  const struct codec_vp8_mbs *given; /* the first pass's arrays with their counts, or NULL */
  int oom;
  int stopped; /* the thread's hook said stop (codec_stopped) */
};

/* The n x n block of plane pl at (x, y), its pixels past the image repeating the last ones. */
static void load(const struct plane *pl, int x, int y, int n, int w, int h, uint8_t *dst) {
  for (int r = 0; r < n; r++) {
    const uint8_t *row = pl->src + (size_t)(y + r < h ? y + r : h - 1) * (size_t)pl->stride;
    if (x + n <= w)
      memcpy(dst + r * n, row + x, (size_t)n);
    else
      for (int c = 0; c < n; c++) dst[r * n + c] = row[x + c < w ? x + c : w - 1];
  }
}

/* Chooses the mode of one n x n block (of the 1 or 2 planes from pl at macroblock (mx, my)) with
 * the smallest squared error against src, writing its prediction into pred. */
static int choose(struct plane *pl, int planes, int n, int mx, int my, const uint8_t *src,
                  uint8_t *pred) {
  uint8_t cand[4][2 * 256], top[2][16], left[2][16];
  int p[2];
  for (int k = 0; k < planes; k++) {
    const uint8_t *rec = pl[k].rec + (size_t)(my * n) * (size_t)pl[k].rstride + (size_t)(mx * n);
    int rs = pl[k].rstride;
    for (int i = 0; i < n; i++) {
      top[k][i] = my > 0 ? rec[i - rs] : 127;
      left[k][i] = mx > 0 ? rec[i * rs - 1] : 129;
    }
    p[k] = my == 0 ? 127 : mx == 0 ? 129 : rec[-rs - 1];
  }
  int best = 0;
  uint32_t best_err = UINT32_MAX;
  for (int m = DC_PRED; m <= TM_PRED; m++) {
    uint32_t err = 0;
    for (int k = 0; k < planes; k++) {
      predict(cand[m] + k * n * n, n, m, top[k], left[k], p[k], my > 0, mx > 0);
      err += sse(cand[m] + k * n * n, src + k * n * n, n * n);
    }
    if (err < best_err) best_err = err, best = m;
  }
  memcpy(pred, cand[best], (size_t)(planes * n * n));
  return best;
}

/* Keeps a block's levels zz[first..last] after its end, last + 1. */
static void keep(struct enc *e, const int16_t *zz, int first, int last) {
  size_t need = e->nlv + 17;
  if (need > e->caplv && !e->oom) {
    size_t cap = e->caplv * 2 > need ? e->caplv * 2 : need;
    int16_t *p = codec_realloc(e->lv, cap * sizeof *p);
    if (p == NULL)
      e->oom = 1;
    else
      e->lv = p, e->caplv = cap;
  }
  if (e->oom) return;
  e->lv[e->nlv++] = (int16_t)(last + 1);
  for (int i = first; i <= last; i++) e->lv[e->nlv++] = zz[i];
}

/* ---- Tokens (RFC 6386 section 13). ---- */

/* The tokens of one block's levels zz[first..last] (zigzag order; last < first: none), its
 * first token in context ctx, with the probabilities p of its type ([band][ctx][node]): written
 * with w, or when w is NULL counted into st (per node, the 0s and the 1s). */
static void tokens(struct bw *w, uint32_t (*st)[2], const uint8_t *p, const int16_t *zz, int first,
                   int last, int ctx) {
  int after_zero = 0;
  for (int i = first; i < 16; i++) {
    int base = (band[i] * 3 + ctx) * 11;
#define NODE(node, bit)                                                                            \
  do {                                                                                             \
    if (w)                                                                                         \
      bw_put(w, (bit), p[base + (node)]);                                                          \
    else                                                                                           \
      st[base + (node)][(bit)]++;                                                                  \
  } while (0)
    if (!after_zero) {
      NODE(0, i <= last);
      if (i > last) return;
    }
    int v = zz[i] < 0 ? -zz[i] : zz[i];
    after_zero = v == 0;
    NODE(1, v != 0);
    if (v == 0) {
      ctx = 0;
      continue;
    }
    NODE(2, v > 1);
    if (v > 1) {
      NODE(3, v > 4);
      if (v <= 4) {
        NODE(4, v > 2);
        if (v > 2) NODE(5, v == 4);
      } else {
        int cat = v <= 6 ? 0 : v <= 10 ? 1 : v <= 18 ? 2 : v <= 34 ? 3 : v <= 66 ? 4 : 5;
        NODE(6, cat > 1);
        if (cat <= 1)
          NODE(7, cat);
        else {
          NODE(8, cat > 3);
          NODE(cat > 3 ? 10 : 9, cat & 1);
        }
        if (w) {
          int bits = 0, x = v - cat_base[cat];
          while (cat_probs[cat][bits]) bits++;
          for (int b = 0; b < bits; b++) bw_put(w, x >> (bits - 1 - b) & 1, cat_probs[cat][b]);
        }
      }
    }
#undef NODE
    if (w) bw_put(w, zz[i] < 0, 128);
    ctx = v > 1 ? 2 : 1;
  }
}

/* ---- One macroblock. ---- */

/* Predicts, transforms, quantises and reconstructs macroblock (mx, my): its levels in zz (block
 * b: Y 0..15, U 16..19, V 20..23, Y2 24; zigzag order) up to last[b] (first - 1: none). Returns
 * its modes byte: luma mode | chroma mode << 2 | skip << 4, skip when every level is zero. The
 * luma and chroma modes (DC, V, H, TM: on a smooth image, what codec_webp_smooth accepts, the
 * 16x16 predictors are the ones that win) are those with the smallest squared error against the
 * source, predicted from the reconstruction as the decoder will see it. Most blocks of a smooth
 * image are flat (vp8_flat) and skip the DCT; the reconstruction is the decoder's, bit for bit. */
static int analyse_mb(struct enc *e, int mx, int my, int16_t zz[25][16], int last[25]) {
  uint8_t src[256], srcuv[128], pred[256], preduv[128];
  int16_t coef[25][16], dc[16];
  load(&e->pl[0], mx * 16, my * 16, 16, e->w, e->h, src);
  int cw = (e->w + 1) / 2, ch = (e->h + 1) / 2;
  load(&e->pl[1], mx * 8, my * 8, 8, cw, ch, srcuv);
  load(&e->pl[2], mx * 8, my * 8, 8, cw, ch, srcuv + 64);
  int ymode = choose(&e->pl[0], 1, 16, mx, my, src, pred);
  int uvmode = choose(&e->pl[1], 2, 8, mx, my, srcuv, preduv);
  int dc_only[16];
  for (int b = 0; b < 16; b++) {
    int o = (b >> 2) * 64 + (b & 3) * 4, d;
    dc_only[b] = vp8_flat(src + o, pred + o, 16, e->quant[0], &d);
    if (dc_only[b])
      memset(coef[b], 0, sizeof coef[b]), coef[b][0] = (int16_t)d;
    else
      vp8_fdct4(src + o, pred + o, 16, coef[b]);
    dc[b] = coef[b][0];
  }
  vp8_fwht4(dc, coef[24]);
  last[24] = vp8_quantize(coef[24], zz[24], e->quant[1], 0, zigzag);
  vp8_iwht4(coef[24], dc);
  uint8_t *ry = e->pl[0].rec + (size_t)(my * 16) * (size_t)e->pl[0].rstride + (size_t)(mx * 16);
  for (int b = 0; b < 16; b++) {
    int o = (b >> 2) * 64 + (b & 3) * 4;
    last[b] = dc_only[b] ? 0 : vp8_quantize(coef[b], zz[b], e->quant[0], 1, zigzag);
    coef[b][0] = dc[b];
    vp8_idct4_add(coef[b], last[b] < 1, pred + o, 16,
                  ry + (b >> 2) * 4 * e->pl[0].rstride + (b & 3) * 4, e->pl[0].rstride);
  }
  for (int b = 16; b < 24; b++) {
    int k = b < 20 ? 1 : 2, i = (b - 16) & 3, bx = (i & 1) * 4, by = (i >> 1) * 4;
    const uint8_t *s = srcuv + (k - 1) * 64 + by * 8 + bx, *p = preduv + (k - 1) * 64 + by * 8 + bx;
    int d;
    if (vp8_flat(s, p, 8, e->quant[2], &d))
      memset(coef[b], 0, sizeof coef[b]), coef[b][0] = (int16_t)d;
    else
      vp8_fdct4(s, p, 8, coef[b]);
    last[b] = vp8_quantize(coef[b], zz[b], e->quant[2], 0, zigzag);
    struct plane *pl = &e->pl[k];
    vp8_idct4_add(coef[b], last[b] < 1, p, 8,
                  pl->rec + (size_t)(my * 8 + by) * (size_t)pl->rstride + (size_t)(mx * 8 + bx),
                  pl->rstride);
  }
  int any = 0;
  for (int b = 0; b < 25; b++) any |= last[b] >= (b < 16);
  return ymode | uvmode << 2 | !any << 4;
}

/* Takes macroblock (mx, my)'s analysis (analyse_mb's, or the GPU's): its modes byte, and unless
 * it is skipped, its blocks' tokens counted in their contexts and their levels kept. */
static void account_mb(struct enc *e, int mx, int my, int modes, const int16_t (*zz)[16],
                       const int *last) {
  uint8_t *top = e->nz_top + 9 * mx, *left = e->nz_left;
  e->modes[my * e->mbw + mx] = (uint8_t)modes;
  if (modes >> 4) {
    memset(top, 0, 9), memset(left, 0, 9);
    return;
  }
  /* Y2, then Y, U and V, as the decoder reads them; contexts: the blocks above and left */
  static const uint8_t order[25] = {24, 0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                    12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};
  for (int j = 0; j < 25; j++) {
    int b = order[j], type, t, l, first = 0;
    if (b == 24)
      type = TYPE_Y2, t = 8, l = 8;
    else if (b < 16)
      type = TYPE_Y_AFTER_Y2, t = b & 3, l = b >> 2, first = 1;
    else {
      int c = b < 20 ? 4 : 6, i = (b - 16) & 3;
      type = TYPE_UV, t = c + (i & 1), l = c + (i >> 1);
    }
    tokens(NULL, e->stats + type * 264, NULL, zz[b], first, last[b], top[t] + left[l]);
    top[t] = left[l] = last[b] >= first;
    keep(e, zz[b], first, last[b]);
  }
}

/* ---- The frame. ---- */

/* Bits to code n0 zeros and n1 ones at probability p / 256 of a zero. */
static double bits(uint32_t n0, uint32_t n1, int p) {
  return -(n0 * log2(p / 256.0) + n1 * log2(1 - p / 256.0));
}

/* The token probabilities: each node's from its counts where that saves more than its update
 * costs (RFC 6386 section 13.4), else the default. */
static void choose_probs(struct enc *e) {
  for (int i = 0; i < VP8_PROBS; i++) {
    uint32_t n0 = e->stats[i][0], n1 = e->stats[i][1];
    int old = vp8_coeff_default[i], u = vp8_coeff_update[i];
    e->probs[i] = (uint8_t)old;
    if (n0 + n1 == 0) continue;
    int p = (int)((n0 * 256ull + (n0 + n1) / 2) / (n0 + n1));
    p = p < 1 ? 1 : p > 255 ? 255 : p;
    double gain = bits(n0, n1, old) - bits(n0, n1, p) - 8 - bits(0, 1, u) + bits(1, 0, u);
    if (gain > 0) e->probs[i] = (uint8_t)p;
  }
}

/* The first partition: the frame header, the token probabilities' updates, and every
 * macroblock's skip flag and modes (key-frame trees, RFC 6386 sections 11.2 and 11.4). */
static void write_header(struct enc *e, struct bw *w, int q, int level) {
  bw_literal(w, 0, 2); /* colour space BT.601; the decoder clamps */
  bw_literal(w, 0, 1); /* no segmentation */
  bw_literal(w, 0, 1); /* the normal loop filter */
  bw_literal(w, (uint32_t)level, 6);
  bw_literal(w, 0, 3); /* sharpness */
  bw_literal(w, 0, 1); /* no filter adjustments per mode */
  bw_literal(w, 0, 2); /* one token partition */
  bw_literal(w, (uint32_t)q, 7);
  bw_literal(w, 0, 3);                   /* no delta for Y DC, Y2 DC, Y2 AC */
  bw_literal(w, 1 << 5 | 2 << 1 | 1, 6); /* chroma DC: -2 */
  bw_literal(w, 1 << 5 | 4 << 1 | 1, 6); /* chroma AC: -4 */
  bw_literal(w, 0, 1);                   /* the probabilities are for this frame */
  for (int i = 0; i < VP8_PROBS; i++) {
    int upd = e->probs[i] != vp8_coeff_default[i];
    bw_put(w, upd, vp8_coeff_update[i]);
    if (upd) bw_literal(w, e->probs[i], 8);
  }
  size_t n = (size_t)e->mbw * (size_t)e->mbh, coded = 0;
  for (size_t i = 0; i < n; i++) coded += !(e->modes[i] >> 4);
  int pskip = (int)((coded * 256 + n / 2) / n);
  pskip = pskip < 1 ? 1 : pskip > 255 ? 255 : pskip;
  bw_literal(w, 1, 1);
  bw_literal(w, (uint32_t)pskip, 8);
  for (size_t i = 0; i < n; i++) {
    int y = e->modes[i] & 3, uv = e->modes[i] >> 2 & 3;
    bw_put(w, e->modes[i] >> 4, pskip);
    bw_put(w, 1, 145); /* not B_PRED */
    bw_put(w, y >= H_PRED, 156);
    bw_put(w, y & 1, y >= H_PRED ? 128 : 163);
    bw_put(w, uv != DC_PRED, 142);
    if (uv != DC_PRED) {
      bw_put(w, uv != V_PRED, 114);
      if (uv != V_PRED) bw_put(w, uv == TM_PRED, 183);
    }
  }
  bw_finish(w);
}

/* The token partition, from the levels kept, with the contexts of the first pass. */
static void write_tokens(struct enc *e, struct bw *w) {
  const int16_t *lv = e->lv;
  memset(e->nz_top, 0, (size_t)e->mbw * 9);
  for (int my = 0; my < e->mbh && !(e->stopped = codec_stopped()); my++) {
    memset(e->nz_left, 0, 9);
    for (int mx = 0; mx < e->mbw; mx++) {
      uint8_t *top = e->nz_top + 9 * mx, *left = e->nz_left;
      if (e->modes[my * e->mbw + mx] >> 4) {
        memset(top, 0, 9), memset(left, 0, 9);
        continue;
      }
      for (int b = 0; b < 25; b++) { /* Y2, Y, U, V */
        int type = b == 0    ? TYPE_Y2
                   : b <= 16 ? TYPE_Y_AFTER_Y2
                             : TYPE_UV,
            first = b >= 1 && b <= 16;
        int t, l;
        if (b == 0)
          t = l = 8;
        else if (b <= 16)
          t = (b - 1) & 3, l = (b - 1) >> 2;
        else {
          int c = b <= 20 ? 4 : 6, i = (b - 17) & 3;
          t = c + (i & 1), l = c + (i >> 1);
        }
        int16_t zz[16];
        const int16_t *z = zz;
        int end;
        if (e->given) { /* the first pass's arrays: block 24 is Y2 there */
          size_t at = (size_t)(my * e->mbw + mx) * 25 + (size_t)(b == 0 ? 24 : b - 1);
          end = e->given->last[at] + 1, z = e->given->levels + at * 16;
        } else {
          end = *lv++;
          memcpy(zz + first, lv, (size_t)(end > first ? end - first : 0) * sizeof *lv);
          lv += end > first ? end - first : 0;
        }
        tokens(w, NULL, e->probs + type * 264, z, first, end - 1, top[t] + left[l]);
        top[t] = left[l] = end > first;
      }
    }
  }
  bw_finish(w);
}

/* libwebp 1.2's quantiser index for one segment at quality (0..100), as its frame headers show,
 * so that `quality` keeps its meaning (docs/engineering-notes.md, "Notes moved from the
 * code's comments"). */
static int quality_to_q(int quality) {
  double c = quality / 100.0, lin = c < 0.75 ? c * 2 / 3 : 2 * c - 1;
  return lin <= 0 ? 127 : (int)(127 * (1 - cbrt(lin)));
}

static void put_le(struct codec_buf *b, uint32_t v, int n, enum codec_status *st) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  if (*st == CODEC_OK) *st = codec_buf_append(b, x, (size_t)n);
}

/* The quantisers of quality: qs[Y, Y2, UV] (libwebp's chroma deltas, DC -2 and AC -4; Y2's
 * steps as RFC 6386 scales them). Returns the quantiser index. */
static int quants_of(int quality, int qs[3][3][2]) {
  int q = quality_to_q(quality), quv_dc = q - 2 < 0 ? 0 : q - 2, quv_ac = q - 4 < 0 ? 0 : q - 4;
  int y2ac = vp8_ac_q[q] * 155 / 100, uvdc = vp8_dc_q[quv_dc];
  quant_init(qs[0], vp8_dc_q[q], vp8_ac_q[q], 56);
  quant_init(qs[1], vp8_dc_q[q] * 2, y2ac < 8 ? 8 : y2ac, 128);
  quant_init(qs[2], uvdc > 132 ? 132 : uvdc, vp8_ac_q[quv_ac], 56);
  return q;
}

/* An encoder for a w x h frame at quality: its quantisers, loop filter level (0 when filter is
 * 0; else 0.875 of the AC step, docs/methods.md "WebP effort") and the per-macroblock state of
 * the second pass; NULL when out of memory. */
static struct enc *enc_new(int w, int h, int quality, int filter) {
  struct enc *e = codec_malloc(sizeof *e);
  if (e == NULL) return NULL;
  memset(e, 0, sizeof *e);
  e->w = w, e->h = h, e->mbw = (w + 15) / 16, e->mbh = (h + 15) / 16;
  e->modes = codec_malloc((size_t)e->mbw * (size_t)e->mbh);
  e->nz_top = codec_malloc((size_t)e->mbw * 9);
  e->caplv = 1 << 16;
  e->lv = codec_malloc(e->caplv * sizeof *e->lv);
  int q = e->q = quants_of(quality, e->quant);
  e->level = q <= 2 || !filter ? 0 : vp8_ac_q[q] * 28 >> 5;
  e->level = e->level > 63 ? 63 : e->level;
  if (e->modes == NULL || e->nz_top == NULL || e->lv == NULL)
    e->oom = 1;
  else
    memset(e->nz_top, 0, (size_t)e->mbw * 9);
  return e;
}

static void enc_free(struct enc *e) {
  if (e) codec_free(e->modes), codec_free(e->nz_top), codec_free(e->lv), codec_free(e);
}

/* After every macroblock is accounted: the token probabilities, both partitions, and the file
 * appended to out. */
static enum codec_status enc_finish(struct enc *e, struct codec_buf *out) {
  if (e->stopped) return CODEC_CANCELLED;
  if (e->oom) return CODEC_NOMEM;
  struct bw hdr, tok;
  choose_probs(e);
  bw_init(&hdr, 4096 + (size_t)e->mbw * (size_t)e->mbh / 2);
  bw_init(&tok, 4096 + e->nlv);
  if (!hdr.oom) write_header(e, &hdr, e->q, e->level);
  if (!tok.oom) write_tokens(e, &tok);
  enum codec_status st = CODEC_OK;
  if (e->stopped)
    st = CODEC_CANCELLED;
  else if (hdr.oom || tok.oom)
    st = CODEC_NOMEM;
  else if (hdr.n >= 1u << 19)
    st = CODEC_TOO_LARGE; /* the first partition's size field */
  if (st == CODEC_OK) {
    size_t vp8 = 10 + hdr.n + tok.n;
    static const uint8_t start[3] = {0x9d, 0x01, 0x2a};
    st = codec_buf_append(out, "RIFF", 4);
    put_le(out, (uint32_t)(4 + 8 + vp8 + (vp8 & 1)), 4, &st);
    if (st == CODEC_OK) st = codec_buf_append(out, "WEBPVP8 ", 8);
    put_le(out, (uint32_t)vp8, 4, &st);
    put_le(out, (uint32_t)(hdr.n << 5 | 1 << 4), 3, &st); /* a key frame, shown, version 0 */
    if (st == CODEC_OK) st = codec_buf_append(out, start, 3);
    put_le(out, (uint32_t)e->w, 2, &st);
    put_le(out, (uint32_t)e->h, 2, &st);
    if (st == CODEC_OK) st = codec_buf_append(out, hdr.buf, hdr.n);
    if (st == CODEC_OK) st = codec_buf_append(out, tok.buf, tok.n);
    if (vp8 & 1) put_le(out, 0, 1, &st);
  }
  codec_free(hdr.buf), codec_free(tok.buf);
  return st;
}

void codec_vp8_quant(int quality, int q[3][3][2]) {
  quants_of(quality, q);
}

/* The first pass over the planes: each macroblock analysed and accounted, and when modes is not
 * NULL stored into the arrays too (levels zero beyond each block's last). The thread's hook is
 * asked every macroblock row (e->stopped), as write_tokens does. Returns the reconstruction, NULL
 * when out of memory (e->oom). */
static uint8_t *first_pass(struct enc *e, const uint8_t *y, int y_stride, const uint8_t *u,
                           const uint8_t *v, int uv_stride, uint8_t *modes, int16_t *levels,
                           int8_t *lasts) {
  size_t ys = (size_t)e->mbw * 16, yn = ys * (size_t)e->mbh * 16, cs = ys / 2, cn = yn / 4;
  uint8_t *rec = codec_malloc(yn + 2 * cn);
  e->pl[0] = (struct plane){y, y_stride, rec, (int)ys};
  e->pl[1] = (struct plane){u, uv_stride, rec + yn, (int)cs};
  e->pl[2] = (struct plane){v, uv_stride, rec + yn + cn, (int)cs};
  if (rec == NULL) e->oom = 1;
  for (int my = 0, i = 0; !e->oom && my < e->mbh && !(e->stopped = codec_stopped()); my++) {
    memset(e->nz_left, 0, 9);
    for (int mx = 0; mx < e->mbw; mx++, i++) {
      int16_t zz[25][16];
      int last[25], m = analyse_mb(e, mx, my, zz, last);
      account_mb(e, mx, my, m, (const int16_t(*)[16])zz, last);
      if (modes == NULL) continue;
      modes[i] = (uint8_t)m;
      for (int b = 0; b < 25; b++) {
        int16_t *l = levels + ((size_t)i * 25 + (size_t)b) * 16;
        lasts[(size_t)i * 25 + (size_t)b] = (int8_t)last[b];
        for (int k = 0; k < 16; k++) l[k] = k >= (b < 16) && k <= last[b] ? zz[b][k] : 0;
      }
    }
  }
  return rec;
}

enum codec_status codec_vp8_encode(const uint8_t *y, int y_stride, const uint8_t *u,
                                   const uint8_t *v, int uv_stride, int w, int h, int quality,
                                   struct codec_buf *out, uint8_t **recon) {
  struct enc *e = enc_new(w, h, quality, recon == NULL);
  if (e == NULL) return CODEC_NOMEM;
  uint8_t *rec = first_pass(e, y, y_stride, u, v, uv_stride, NULL, NULL, NULL);
  enum codec_status st = enc_finish(e, out);
  if (recon != NULL && st == CODEC_OK)
    *recon = rec;
  else
    codec_free(rec);
  enc_free(e);
  return st;
}

enum codec_status codec_vp8_analyse(const uint8_t *y, int y_stride, const uint8_t *u,
                                    const uint8_t *v, int uv_stride, int w, int h, int quality,
                                    uint8_t *modes, int16_t *levels, int8_t *last,
                                    uint32_t *stats) {
  struct enc *e = enc_new(w, h, quality, 0);
  if (e == NULL) return CODEC_NOMEM;
  codec_free(first_pass(e, y, y_stride, u, v, uv_stride, modes, levels, last));
  enum codec_status st = e->stopped ? CODEC_CANCELLED : e->oom ? CODEC_NOMEM : CODEC_OK;
  if (stats != NULL) memcpy(stats, e->stats, sizeof e->stats);
  enc_free(e);
  return st;
}

enum codec_status codec_vp8_write(const struct codec_vp8_mbs *a, struct codec_buf *out) {
  struct enc *e = enc_new(a->width, a->height, a->quality, 1);
  if (e == NULL) return CODEC_NOMEM;
  if (a->stats != NULL && !e->oom) { /* counted with the first pass: the tokens come from a */
    memcpy(e->stats, a->stats, sizeof e->stats);
    memcpy(e->modes, a->modes, (size_t)e->mbw * (size_t)e->mbh);
    e->given = a;
  }
  for (int my = 0, i = 0; !e->given && !e->oom && my < e->mbh && !(e->stopped = codec_stopped());
       my++) {
    memset(e->nz_left, 0, 9);
    for (int mx = 0; mx < e->mbw; mx++, i++) {
      int last[25];
      for (int b = 0; b < 25; b++) last[b] = a->last[(size_t)i * 25 + (size_t)b];
      account_mb(e, mx, my, a->modes[i], (const int16_t(*)[16])(a->levels + (size_t)i * 400), last);
    }
  }
  enum codec_status st = enc_finish(e, out);
  enc_free(e);
  return st;
}

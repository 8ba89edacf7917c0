/* png_unfilter.c: PNG's row filters undone in place, for png.c's own path through the pixel data.
 * The filters are the PNG specification's (ISO/IEC 15948, 9.2): none, sub, up, average and paeth,
 * each byte reconstructed modulo 256 from the byte bpp to its left (a), the byte above (b) and the
 * byte above that one (c); the first row's prior row is zeros. On x86-64 the serial filters run in
 * SSE2 registers, a pixel at a time and runs of paeth rows together; elsewhere, and in the plain-C
 * twin the tests compare with (codec_png_unfilter_c), they are C loops. */
#include <string.h>

#include "codecs_int.h"

#if defined(__SSE2__) && !defined(BLURD_NO_SIMD)
#include <emmintrin.h>
#define UNFILTER_SSE2 1
#endif

enum { F_NONE, F_SUB, F_UP, F_AVG, F_PAETH, F_AVG_FIRST };
#define ROOM_ROWS CODEC_PNG_ROOM_ROWS

/* The filters in C. out may overlap in (out <= in): each loop reads in[i] before it writes
 * out[i], and reads out[] only behind it. prior is the previous output row; NULL for row 0. */
static void sub_c(uint8_t *out, const uint8_t *in, size_t n, unsigned bpp) {
  for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(in[i] + (i >= bpp ? out[i - bpp] : 0));
}

static void up_c(uint8_t *out, const uint8_t *in, const uint8_t *prior, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(in[i] + prior[i]);
}

static void avg_c(uint8_t *out, const uint8_t *in, const uint8_t *prior, size_t n, unsigned bpp) {
  for (size_t i = 0; i < n; i++) {
    unsigned a = i >= bpp ? out[i - bpp] : 0, b = prior ? prior[i] : 0;
    out[i] = (uint8_t)(in[i] + ((a + b) >> 1));
  }
}

/* PNG's predictor: whichever of a, b, c is nearest to a + b - c, preferring a, then b. */
static unsigned paeth(unsigned a, unsigned b, unsigned c) {
  int pa = (int)b - (int)c, pb = (int)a - (int)c, pc = pa + pb;
  pa = pa < 0 ? -pa : pa;
  pb = pb < 0 ? -pb : pb;
  pc = pc < 0 ? -pc : pc;
  unsigned ab = pb < pa ? b : a; /* the same choice, as selects rather than branches */
  return pc < pa && pc < pb ? c : ab;
}

/* Paeth from byte `from` of the row on. */
static void paeth_c(uint8_t *out, const uint8_t *in, const uint8_t *prior, size_t from, size_t n,
                    unsigned bpp) {
  for (size_t i = from; i < bpp && i < n; i++) out[i] = (uint8_t)(in[i] + prior[i]);
  for (size_t i = from > bpp ? from : bpp; i < n; i++)
    out[i] = (uint8_t)(in[i] + paeth(out[i - bpp], prior[i], prior[i - bpp]));
}

/* One row in C: filter f (F_AVG_FIRST: average on row 0). */
static void row_c(int f, uint8_t *out, const uint8_t *in, const uint8_t *prior, size_t n,
                  unsigned bpp) {
  if (f == F_NONE) memmove(out, in, n);
  if (f == F_SUB) sub_c(out, in, n, bpp);
  if (f == F_UP) up_c(out, in, prior, n);
  if (f == F_AVG || f == F_AVG_FIRST) avg_c(out, in, f == F_AVG ? prior : NULL, n, bpp);
  if (f == F_PAETH) paeth_c(out, in, prior, 0, n, bpp);
}

#ifdef UNFILTER_SSE2
/* ---- SSE2 ----
 * Sub, average and paeth are serial along a row: each pixel needs the one before it. On x86-64
 * (SSE2, its baseline) a pixel is one register, a byte (paeth: a 16-bit lane) per sample byte, so
 * a few instructions make the whole pixel; up is 16 bytes at a time. Paeth, what photographs get,
 * is then bound by the latency of that chain, so runs of paeth rows are made up to four at a time,
 * each row a pixel behind the one above, in chains the processor overlaps: for pixels of up to 4
 * bytes two rows a register, two registers (paeth_quad, paeth_pair); for 6 or 8 bytes (16-bit RGB,
 * RGBA) a register a row (paeth_wide). Sub and average on pixels of 1 or 2 bytes take the C
 * loops. */

/* A pixel of `wide` bytes (4 or 8) to the low lanes of a register, and back. The loops below use
 * them for every pixel but the row's last: the bytes past a smaller pixel are the next pixel's,
 * whose own step rewrites them, and the output runs three rows behind the input, so no store
 * reaches a byte still to be read. */
static inline __m128i load_px(const uint8_t *p, size_t wide) {
  if (wide == 4) {
    int v;
    memcpy(&v, p, 4);
    return _mm_cvtsi32_si128(v);
  }
  return _mm_loadl_epi64((const __m128i *)(const void *)p);
}

static inline void store_px(uint8_t *p, __m128i v, size_t wide) {
  if (wide == 4) {
    int x = _mm_cvtsi128_si32(v);
    memcpy(p, &x, 4);
  } else {
    _mm_storel_epi64((__m128i *)(void *)p, v);
  }
}

/* The row's last pixel, of bpp bytes, through a zeroed buffer. */
static inline __m128i load_last(const uint8_t *p, unsigned bpp) {
  uint8_t t[8] = {0};
  memcpy(t, p, bpp);
  return _mm_loadl_epi64((const __m128i *)(const void *)t);
}

static inline void store_last(uint8_t *p, __m128i v, unsigned bpp) {
  uint8_t t[8];
  _mm_storel_epi64((__m128i *)(void *)t, v);
  memcpy(p, t, bpp);
}

static void up_sse2(uint8_t *out, const uint8_t *in, const uint8_t *prior, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) { /* stores land behind the next load: out < in */
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(in + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(prior + i));
    _mm_storeu_si128((__m128i *)(void *)(out + i), _mm_add_epi8(x, b));
  }
  up_c(out + i, in + i, prior + i, n - i);
}

/* Sub, average and paeth for pixels of 3..8 bytes, `wide` being 4 or 8; a and c are the pixels
 * left of this one and above that (zeros at the row's start). The average is floor((a + b) / 2):
 * SSE2's rounding-up average less the bit that rounded up. Paeth runs in 16-bit lanes, where
 * a + b - c and the distances fit; its choice is c when pc is below both others, else b when pb
 * is below pa, else a. */
static inline __m128i sub_px(__m128i x, __m128i a) {
  return _mm_add_epi8(x, a);
}

static inline __m128i avg_px(__m128i x, __m128i a, __m128i b) {
  __m128i one = _mm_set1_epi8(1);
  __m128i avg = _mm_sub_epi8(_mm_avg_epu8(a, b), _mm_and_si128(_mm_xor_si128(a, b), one));
  return _mm_add_epi8(x, avg);
}

static inline __m128i abs16(__m128i v) {
  return _mm_max_epi16(v, _mm_sub_epi16(_mm_setzero_si128(), v));
}

/* a, b, c and x in 16-bit lanes; the result too, each lane 0..255. */
static inline __m128i paeth_px(__m128i x, __m128i a, __m128i b, __m128i c) {
  __m128i pa = _mm_sub_epi16(b, c), pb = _mm_sub_epi16(a, c);
  __m128i pc = abs16(_mm_add_epi16(pa, pb));
  pa = abs16(pa);
  pb = abs16(pb);
  __m128i use_c = _mm_cmplt_epi16(pc, _mm_min_epi16(pa, pb)), use_b = _mm_cmplt_epi16(pb, pa);
  __m128i ab = _mm_or_si128(_mm_and_si128(use_b, b), _mm_andnot_si128(use_b, a));
  __m128i pred = _mm_or_si128(_mm_and_si128(use_c, c), _mm_andnot_si128(use_c, ab));
  return _mm_and_si128(_mm_add_epi16(x, pred), _mm_set1_epi16(0xff));
}

static inline void serial_sse2(int f, uint8_t *out, const uint8_t *in, const uint8_t *prior,
                               size_t n, unsigned bpp, size_t wide) {
  const __m128i zero = _mm_setzero_si128();
  __m128i a = zero, c = zero; /* paeth: 16-bit lanes; sub and average: bytes */
  for (size_t i = 0; i < n; i += bpp) {
    int last = i + wide > n;
    __m128i x = last ? load_last(in + i, bpp) : load_px(in + i, wide), r;
    if (f == F_SUB) {
      r = a = sub_px(x, a);
    } else if (f == F_AVG || f == F_AVG_FIRST) {
      __m128i b = f == F_AVG ? (last ? load_last(prior + i, bpp) : load_px(prior + i, wide)) : zero;
      r = a = avg_px(x, a, b);
    } else {
      __m128i b = last ? load_last(prior + i, bpp) : load_px(prior + i, wide);
      b = _mm_unpacklo_epi8(b, zero);
      a = paeth_px(_mm_unpacklo_epi8(x, zero), a, b, c);
      c = b;
      r = _mm_packus_epi16(a, a);
    }
    if (last) /* the row's end: no byte past it */
      store_last(out + i, r, bpp);
    else
      store_px(out + i, r, wide);
  }
}

/* Paeth on two rows at once, for pixels of 1 to 4 bytes: row y's pixel i in the low four 16-bit
 * lanes and row y + 1's pixel i - bpp in the high four, whose a, b and c are then row y + 1's
 * left pixel and row y's pixels just made. One chain of dependent instructions then makes two
 * pixels. Lanes past a pixel's bytes carry the next pixel's, which its own step overwrites; the
 * tails after the last full 4 bytes are C's. n >= 4 bpp. */
static void paeth_pair(uint8_t *out0, const uint8_t *in0, const uint8_t *prior, uint8_t *out1,
                       const uint8_t *in1, size_t n, unsigned bpp) {
  const __m128i zero = _mm_setzero_si128();
  __m128i c = _mm_unpacklo_epi8(load_px(prior, 4), zero); /* high lanes: row y + 1's c, 0 */
  __m128i a = paeth_px(_mm_unpacklo_epi8(load_px(in0, 4), zero), zero, c, zero);
  store_px(out0, _mm_packus_epi16(a, a), 4); /* high lanes 0: row y + 1's first a */
  size_t i = bpp;
  for (; i + 4 <= n; i += bpp) {
    __m128i b = _mm_unpacklo_epi64(_mm_unpacklo_epi8(load_px(prior + i, 4), zero), a);
    __m128i x = _mm_unpacklo_epi32(load_px(in0 + i, 4), load_px(in1 + i - bpp, 4));
    a = paeth_px(_mm_unpacklo_epi8(x, zero), a, b, c);
    c = b;
    __m128i r = _mm_packus_epi16(a, a);
    store_px(out0 + i, r, 4);
    store_px(out1 + i - bpp, _mm_srli_si128(r, 4), 4);
  }
  paeth_c(out0, in0, prior, i, n, bpp);
  paeth_c(out1, in1, out0, i - bpp, n, bpp);
}

/* Paeth on four rows at once: rows y and y + 1 as paeth_pair has them, rows y + 2 and y + 3 in a
 * second register two pixels behind, whose b and c come from row y + 1's pixels the first
 * register made one step before. Two independent chains then make four pixels a step. Row
 * y + 3's output runs 3 strides behind row y's input at most (the room codec_png_unfilter
 * asks for). n >= 8 bpp. */
static void paeth_quad(uint8_t *out0, const uint8_t *in0, const uint8_t *prior, size_t stride,
                       unsigned bpp) {
  const __m128i zero = _mm_setzero_si128();
  uint8_t *out1 = out0 + stride, *out2 = out1 + stride, *out3 = out2 + stride;
  const uint8_t *in1 = in0 + stride + 1, *in2 = in1 + stride + 1, *in3 = in2 + stride + 1;
  size_t n = stride, i = 3 * (size_t)bpp;
  paeth_c(out0, in0, prior, 0, i, bpp); /* the staircase the loop starts from */
  paeth_c(out1, in1, out0, 0, i - bpp, bpp);
  paeth_c(out2, in2, out1, 0, i - 2 * bpp, bpp);
#define WIDE(p) _mm_unpacklo_epi8(load_px((p), 4), zero)
  __m128i ap = _mm_unpacklo_epi64(WIDE(out0 + i - bpp), WIDE(out1 + i - 2 * bpp));
  __m128i cp = _mm_unpacklo_epi64(WIDE(prior + i - bpp), WIDE(out0 + i - 2 * bpp));
  __m128i aq = WIDE(out2 + i - 3 * bpp), cq = WIDE(out1 + i - 3 * bpp); /* row y + 3: zeros */
#undef WIDE
  for (; i + 4 <= n; i += bpp) {
    __m128i bp = _mm_unpacklo_epi64(_mm_unpacklo_epi8(load_px(prior + i, 4), zero), ap);
    __m128i bq = _mm_unpacklo_epi64(_mm_srli_si128(ap, 8), aq);
    __m128i xp = _mm_unpacklo_epi32(load_px(in0 + i, 4), load_px(in1 + i - bpp, 4));
    __m128i xq = _mm_unpacklo_epi32(load_px(in2 + i - 2 * bpp, 4), load_px(in3 + i - 3 * bpp, 4));
    ap = paeth_px(_mm_unpacklo_epi8(xp, zero), ap, bp, cp);
    aq = paeth_px(_mm_unpacklo_epi8(xq, zero), aq, bq, cq);
    cp = bp;
    cq = bq;
    __m128i rp = _mm_packus_epi16(ap, ap), rq = _mm_packus_epi16(aq, aq);
    store_px(out0 + i, rp, 4);
    store_px(out1 + i - bpp, _mm_srli_si128(rp, 4), 4);
    store_px(out2 + i - 2 * bpp, rq, 4);
    store_px(out3 + i - 3 * bpp, _mm_srli_si128(rq, 4), 4);
  }
  paeth_c(out0, in0, prior, i, n, bpp);
  paeth_c(out1, in1, out0, i - bpp, n, bpp);
  paeth_c(out2, in2, out1, i - 2 * bpp, n, bpp);
  paeth_c(out3, in3, out2, i - 3 * bpp, n, bpp);
}

/* Paeth on k (2 or 4) rows at once for pixels of 6 or 8 bytes (16-bit RGB, RGBA), a register a
 * row, each row a pixel behind the one above, whose b and c are the pixels that row made the
 * step before: k independent chains a step. Rows go from the last to the first, so that row r
 * reads row r - 1's register before it moves on. n >= 8 bpp. */
static inline void paeth_wide(uint8_t *out0, const uint8_t *in0, const uint8_t *prior,
                              size_t stride, unsigned bpp, size_t k) {
  const __m128i zero = _mm_setzero_si128();
  __m128i a[4], c[4];
  size_t i = (k - 1) * bpp;
  for (size_t r = 0; r < k; r++) { /* the staircase, then each row's a and c left of it */
    uint8_t *out = out0 + r * stride;
    const uint8_t *in = in0 + r * (stride + 1), *above = r ? out - stride : prior;
    size_t at = i - r * bpp; /* row r's next pixel */
    paeth_c(out, in, above, 0, at, bpp);
    a[r] = at ? _mm_unpacklo_epi8(load_px(out + at - bpp, 8), zero) : zero;
    c[r] = at ? _mm_unpacklo_epi8(load_px(above + at - bpp, 8), zero) : zero;
  }
  for (; i + 8 <= stride; i += bpp)
    for (size_t r = k; r-- > 0;) {
      size_t at = i - r * bpp;
      __m128i b = r ? a[r - 1] : _mm_unpacklo_epi8(load_px(prior + i, 8), zero);
      __m128i x = _mm_unpacklo_epi8(load_px(in0 + r * (stride + 1) + at, 8), zero);
      a[r] = paeth_px(x, a[r], b, c[r]);
      c[r] = b;
      store_px(out0 + r * stride + at, _mm_packus_epi16(a[r], a[r]), 8);
    }
  for (size_t r = 0; r < k; r++) {
    uint8_t *out = out0 + r * stride;
    paeth_c(out, in0 + r * (stride + 1), r ? out - stride : prior, i - r * bpp, stride, bpp);
  }
}

/* One row: SSE2 where it pays, else C. */
static void row(int f, uint8_t *out, const uint8_t *in, const uint8_t *prior, size_t n,
                unsigned bpp) {
  if (f == F_UP) {
    up_sse2(out, in, prior, n);
  } else if (f == F_NONE || (bpp < 3 && f != F_PAETH)) { /* C's sub and average are as fast */
    row_c(f, out, in, prior, n, bpp);
  } else if (bpp <= 4) {
    if (f == F_SUB) serial_sse2(F_SUB, out, in, prior, n, bpp, 4);
    if (f == F_AVG) serial_sse2(F_AVG, out, in, prior, n, bpp, 4);
    if (f == F_AVG_FIRST) serial_sse2(F_AVG_FIRST, out, in, prior, n, bpp, 4);
    if (f == F_PAETH) serial_sse2(F_PAETH, out, in, prior, n, bpp, 4);
  } else {
    if (f == F_SUB) serial_sse2(F_SUB, out, in, prior, n, bpp, 8);
    if (f == F_AVG) serial_sse2(F_AVG, out, in, prior, n, bpp, 8);
    if (f == F_AVG_FIRST) serial_sse2(F_AVG_FIRST, out, in, prior, n, bpp, 8);
    if (f == F_PAETH) serial_sse2(F_PAETH, out, in, prior, n, bpp, 8);
  }
}
#else
#define row row_c
#endif

/* Big-endian 16-bit samples of one row to host order (the caller knows the host is little-endian
 * when it asks). */
static void swap16(uint8_t *p, size_t n) {
  for (size_t i = 0; i + 1 < n; i += 2) {
    uint8_t t = p[i];
    p[i] = p[i + 1];
    p[i + 1] = t;
  }
}

static enum codec_status bad_filter(size_t y, int f, char *msg, size_t msglen) {
  codec_msgf(msg, msglen, "the PNG data is corrupt: row %zu has filter type %d (PNG has 0 to 4)", y,
             f);
  return CODEC_CORRUPT;
}

#ifdef UNFILTER_SSE2
/* How many rows from y (y >= 1) unfilter together as paeth: 4, 2 or 1. */
static size_t paeth_rows(const uint8_t *data, size_t y, size_t height, size_t stride, unsigned bpp,
                         int plain_c) {
  const uint8_t *f = data + ROOM_ROWS * stride + y * (stride + 1);
  size_t k = 0;
  if (!plain_c && y > 0 && stride >= 8 * bpp)
    while (k < 4 && y + k < height && f[k * (stride + 1)] == F_PAETH) k++;
  return k == 4 ? 4 : k >= 2 ? 2 : 1;
}

/* k rows from out (k = paeth_rows' answer, > 1) made by paeth_quad, paeth_pair or paeth_wide. */
static void paeth_together(uint8_t *out, const uint8_t *in, const uint8_t *prior, size_t stride,
                           unsigned bpp, size_t k) {
  if (bpp <= 4 && k == 4) paeth_quad(out, in, prior, stride, bpp);
  if (bpp <= 4 && k == 2) paeth_pair(out, in, prior, out + stride, in + stride + 1, stride, bpp);
  if (bpp > 4 && k == 4) paeth_wide(out, in, prior, stride, bpp, 4);
  if (bpp > 4 && k == 2) paeth_wide(out, in, prior, stride, bpp, 2);
}
#endif

/* The inflated pixel data of a non-interlaced PNG is `height` rows of one filter-type byte and
 * `stride` filtered bytes; png.c inflates it after three rows of room at the start of the pixel
 * buffer, and this turns it, in place, into `height` packed rows of `stride` bytes from the
 * buffer's start. Row y's output starts 3 strides + y + 1 bytes before its filtered bytes, so even
 * row y + 3, made alongside row y, writes only over bytes already read; the row above (the
 * filters' "prior" row) is always output by then. 16-bit samples, big-endian in the file, are
 * swapped to host order once the rows below no longer read them. */
static enum codec_status unfilter(uint8_t *data, size_t height, size_t stride, unsigned bpp,
                                  int swap, int plain_c, char *msg, size_t msglen) {
  size_t swapped = 0;                                    /* rows [0, swapped) are in host order */
  size_t ask = (1u << 20) / (stride + 1) + 1, asked = 0; /* rows between questions to the hook */
  for (size_t y = 0; y < height;) {
    if (y >= asked) {
      if (codec_stopped()) return CODEC_CANCELLED;
      asked = y + ask;
    }
    uint8_t *out = data + y * stride, *in = data + ROOM_ROWS * stride + y * (stride + 1) + 1;
    const uint8_t *prior = y ? out - stride : NULL;
    int f = in[-1];
    if (f > F_PAETH) return bad_filter(y, f, msg, msglen);
#ifdef UNFILTER_SSE2
    size_t k = paeth_rows(data, y, height, stride, bpp, plain_c);
    if (k > 1) {
      paeth_together(out, in, prior, stride, bpp, k);
      y += k;
    } else
#endif
    {
      if (y == 0) /* the prior row is zeros: up is none, paeth is sub (a is nearest) */
        f = f == F_UP ? F_NONE : f == F_PAETH ? F_SUB : f == F_AVG ? F_AVG_FIRST : f;
      if (plain_c)
        row_c(f, out, in, prior, stride, bpp);
      else
        row(f, out, in, prior, stride, bpp);
      y += 1;
    }
    for (; swap && swapped + 1 < y; swapped++) swap16(data + swapped * stride, stride);
  }
  for (; swap && swapped < height; swapped++) swap16(data + swapped * stride, stride);
  return CODEC_OK;
}

enum codec_status codec_png_unfilter(uint8_t *data, size_t height, size_t stride, unsigned bpp,
                                     int swap, char *msg, size_t msglen) {
  return unfilter(data, height, stride, bpp, swap, 0, msg, msglen);
}

enum codec_status codec_png_unfilter_c(uint8_t *data, size_t height, size_t stride, unsigned bpp,
                                       int swap, char *msg, size_t msglen) {
  return unfilter(data, height, stride, bpp, swap, 1, msg, msglen);
}

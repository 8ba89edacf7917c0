/* webp_yuv.c: lossy WebP's RGB to YUV 4:2:0 conversion for smooth images, with the test of
 * smoothness on the way (docs/methods.md, "WebP effort"): what blurd's own VP8 encoder codes, in
 * place of WebPPictureImportRGB. Luma is libwebp's, bit for bit, so the test sees the plane
 * libwebp would make; chroma is libwebp's formula on the plain mean of each 2x2 block, where
 * libwebp averages in linear light through gamma tables (vp8_dsp.h holds both formulas). On
 * x86-64 with AVX2 sixteen pixels go at a time; elsewhere, and for the last columns, a plain loop
 * computes the same values. */
#include <stdlib.h>

#include "codecs_int.h"
#include "vp8_dsp.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define YUV_AVX2 1
#define AVX2     __attribute__((target("avx2")))
#endif

/* The pixels of row that differ from their left neighbour by more than CODEC_WEBP_SMOOTH_STEP. */
static unsigned row_steps(const uint8_t *row, int w) {
  unsigned steps = 0;
  for (int x = 1; x < w; x++) steps += abs(row[x] - row[x - 1]) > CODEC_WEBP_SMOOTH_STEP;
  return steps;
}

int codec_webp_smooth(const uint8_t *y, int stride, int w, int h) {
  uint64_t left = (uint64_t)w * (uint64_t)h / CODEC_WEBP_SMOOTH_PER; /* steps allowed */
  for (int r = 0; r < h; r++) {
    unsigned steps = row_steps(y + (size_t)r * (size_t)stride, w);
    if (steps > left) return 0; /* detail found: stop early, as on most photographs */
    left -= steps;
  }
  return 1;
}

#ifdef YUV_AVX2
/* The 16 RGB pixels at p as planes of 16 bytes (SSSE3 shuffles). */
AVX2 static inline void split16(const uint8_t *p, __m128i *r, __m128i *g, __m128i *b) {
  const __m128i a = _mm_loadu_si128((const __m128i *)p);
  const __m128i m = _mm_loadu_si128((const __m128i *)(p + 16));
  const __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
#define Z -1 /* a zero byte */
  *r = _mm_or_si128(
      _mm_or_si128(
          _mm_shuffle_epi8(a, _mm_setr_epi8(0, 3, 6, 9, 12, 15, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z)),
          _mm_shuffle_epi8(m, _mm_setr_epi8(Z, Z, Z, Z, Z, Z, 2, 5, 8, 11, 14, Z, Z, Z, Z, Z))),
      _mm_shuffle_epi8(c, _mm_setr_epi8(Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, 1, 4, 7, 10, 13)));
  *g = _mm_or_si128(
      _mm_or_si128(
          _mm_shuffle_epi8(a, _mm_setr_epi8(1, 4, 7, 10, 13, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z)),
          _mm_shuffle_epi8(m, _mm_setr_epi8(Z, Z, Z, Z, Z, 0, 3, 6, 9, 12, 15, Z, Z, Z, Z, Z))),
      _mm_shuffle_epi8(c, _mm_setr_epi8(Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, 2, 5, 8, 11, 14)));
  *b = _mm_or_si128(
      _mm_or_si128(
          _mm_shuffle_epi8(a, _mm_setr_epi8(2, 5, 8, 11, 14, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z)),
          _mm_shuffle_epi8(m, _mm_setr_epi8(Z, Z, Z, Z, Z, 1, 4, 7, 10, 13, Z, Z, Z, Z, Z, Z))),
      _mm_shuffle_epi8(c, _mm_setr_epi8(Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, 0, 3, 6, 9, 12, 15)));
#undef Z
}

/* Luma of row s's first pixels, 16 at a time; returns how many were done. 33059 does not fit a
 * 16-bit multiplier, so green goes in twice, as 33059 - 16384 beside red and 16384 beside blue
 * (libwebp's kRG_y and kGB_y); the unpacks and packs work within 128-bit lanes and undo each
 * other's order. */
AVX2 static int luma_avx2(const uint8_t *s, int w, uint8_t *d) {
  const __m256i krg = _mm256_set1_epi32(16839 | (33059 - 16384) << 16);
  const __m256i kgb = _mm256_set1_epi32(16384 | 6420 << 16);
  const __m256i k = _mm256_set1_epi32((16 << 16) + (1 << 15));
  int x = 0;
  for (; x + 16 <= w; x += 16) {
    __m128i r8, g8, b8;
    split16(s + 3 * x, &r8, &g8, &b8);
    __m256i r = _mm256_cvtepu8_epi16(r8), g = _mm256_cvtepu8_epi16(g8);
    __m256i b = _mm256_cvtepu8_epi16(b8);
    __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(_mm256_unpacklo_epi16(r, g), krg),
                                  _mm256_madd_epi16(_mm256_unpacklo_epi16(g, b), kgb));
    __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(_mm256_unpackhi_epi16(r, g), krg),
                                  _mm256_madd_epi16(_mm256_unpackhi_epi16(g, b), kgb));
    __m256i y16 = _mm256_packs_epi32(_mm256_srai_epi32(_mm256_add_epi32(lo, k), 16),
                                     _mm256_srai_epi32(_mm256_add_epi32(hi, k), 16));
    _mm_storeu_si128((__m128i *)(d + x), _mm_packus_epi16(_mm256_castsi256_si128(y16),
                                                          _mm256_extracti128_si256(y16, 1)));
  }
  return x;
}

/* The sums of the 2x2 blocks of 16 pixels of two rows (a, b): 8 in order. */
AVX2 static inline __m256i block_sums(__m128i a, __m128i b) {
  __m256i s = _mm256_add_epi16(_mm256_cvtepu8_epi16(a), _mm256_cvtepu8_epi16(b));
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

/* 8 chroma samples of the sums r, g, b to d, with the coefficients cr, cg, cb of vp8_chroma_u or
 * vp8_chroma_v. */
AVX2 static inline void chroma8(uint8_t *d, __m256i r, __m256i g, __m256i b, int cr, int cg,
                                int cb) {
  __m256i s = _mm256_add_epi32(_mm256_mullo_epi32(r, _mm256_set1_epi32(cr)),
                               _mm256_mullo_epi32(g, _mm256_set1_epi32(cg)));
  s = _mm256_add_epi32(s, _mm256_mullo_epi32(b, _mm256_set1_epi32(cb)));
  s = _mm256_srai_epi32(_mm256_add_epi32(s, _mm256_set1_epi32((128 << 18) + (1 << 17))), 18);
  __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  _mm_storel_epi64((__m128i *)d, _mm_packus_epi16(w, w));
}

/* Chroma of rows s0 and s1's first pixels, 16 at a time; returns how many were done. */
AVX2 static int chroma_avx2(const uint8_t *s0, const uint8_t *s1, int w, uint8_t *u, uint8_t *v) {
  int x = 0;
  for (; x + 16 <= w; x += 16) {
    __m128i pr, pg, pb, qr, qg, qb;
    split16(s0 + 3 * x, &pr, &pg, &pb);
    split16(s1 + 3 * x, &qr, &qg, &qb);
    __m256i r = block_sums(pr, qr), g = block_sums(pg, qg), b = block_sums(pb, qb);
    chroma8(u + x / 2, r, g, b, -9719, -19081, 28800);
    chroma8(v + x / 2, r, g, b, 28800, -24116, -4684);
  }
  return x;
}
#endif

/* Luma of the w pixels of row s into d; returns its steps (row_steps). */
static unsigned luma_row(const uint8_t *s, int w, uint8_t *d, int simd) {
  int x = 0;
#ifdef YUV_AVX2
  if (simd) x = luma_avx2(s, w, d);
#endif
  for (; x < w; x++) d[x] = vp8_luma(s + 3 * x);
  (void)simd;
  return row_steps(d, w);
}

/* Chroma of rows s0 and s1 (the same row for an odd height's last); an odd width's last column
 * counts twice. */
static void chroma_row(const uint8_t *s0, const uint8_t *s1, int w, uint8_t *u, uint8_t *v,
                       int simd) {
  int x = 0;
#ifdef YUV_AVX2
  if (simd) x = chroma_avx2(s0, s1, w, u, v);
#endif
  for (; x < w; x += 2) {
    int x1 = x + 1 < w ? x + 1 : x;
    const uint8_t *a = s0 + 3 * x, *b = s0 + 3 * x1, *c = s1 + 3 * x, *d = s1 + 3 * x1;
    int r = a[0] + b[0] + c[0] + d[0], g = a[1] + b[1] + c[1] + d[1];
    int bl = a[2] + b[2] + c[2] + d[2];
    u[x / 2] = vp8_chroma_u(r, g, bl);
    v[x / 2] = vp8_chroma_v(r, g, bl);
  }
  (void)simd;
}

/* Two rows at a time, luma first: the conversion stops at the row where the image proves not
 * smooth (a detailed image within its first rows), and the caller then has libwebp import it.
 * On a smooth image the four pixels of a block are nearly equal, and the chroma is within one
 * level of libwebp's (tests/unit_codec_webp). The thread's hook is asked every 64 rows. */
int codec_webp_yuv(const uint8_t *rgb, size_t stride, int w, int h, uint8_t *y, int y_stride,
                   uint8_t *u, uint8_t *v, int uv_stride) {
  int simd = 0;
#ifdef YUV_AVX2
  simd = __builtin_cpu_supports("avx2");
#endif
  uint64_t left = (uint64_t)w * (uint64_t)h / CODEC_WEBP_SMOOTH_PER; /* as codec_webp_smooth */
  for (int r = 0; r < h; r += 2) {
    if (r % 64 == 0 && codec_stopped()) return -1;
    const uint8_t *s0 = rgb + (size_t)r * stride, *s1 = r + 1 < h ? s0 + stride : s0;
    unsigned steps = luma_row(s0, w, y + (size_t)r * (size_t)y_stride, simd);
    if (r + 1 < h) steps += luma_row(s1, w, y + (size_t)(r + 1) * (size_t)y_stride, simd);
    if (steps > left) return 0;
    left -= steps;
    size_t at = (size_t)(r / 2) * (size_t)uv_stride;
    chroma_row(s0, s1, w, u + at, v + at, simd);
  }
  return 1;
}

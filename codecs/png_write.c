/* png_write.c: the PNG encoder: rows filtered here, the zlib stream made by libdeflate or by
 * deflate_rle.c, then the file assembled: signature, IHDR, an optional iCCP, IDAT chunks of at
 * most IDAT_MAX bytes and IEND. Each `compression` level 0..9 is a plan: a deflater and a row
 * filter for 8- and 16-bit samples. Both deflaters are faster than zlib's, where libpng's own
 * encoder spends most of its time. libdeflate allocates through codec_malloc, so
 * codec_test_fail_alloc() reaches its compressor too. */
#include <libdeflate.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "codecs_int.h"

#define IDAT_MAX (1u << 20) /* bytes per IDAT chunk: any decoder reads them as one stream */

/* What each `compression` level does: the zlib stream's maker (RLE: deflate_rle.c's run-length
 * and Huffman coder; otherwise libdeflate at that level, 0 being stored) and the row filter for
 * 8- and 16-bit samples, chosen by measurement (docs/methods.md, "PNG output"): the run-length
 * coder after paeth is about as small as libdeflate's low levels in less time than its level 1,
 * so it makes levels 1 (after up, the cheapest filter) and 2; 3..8 keep libdeflate's 3..8 and 9
 * is its slowest and smallest, 12. After libdeflate, up is the smallest and fastest filter for
 * 8-bit samples and paeth the smallest for 16-bit. */
#define RLE -1
static const struct level_plan {
  int deflate;                   /* libdeflate's level, or RLE */
  enum codec_png_filter f8, f16; /* filters for 8- and 16-bit samples */
} plans[10] = {
    {0, CODEC_PNG_FILTER_NONE, CODEC_PNG_FILTER_NONE},
    {RLE, CODEC_PNG_FILTER_UP, CODEC_PNG_FILTER_UP},
    {RLE, CODEC_PNG_FILTER_PAETH, CODEC_PNG_FILTER_PAETH},
    {3, CODEC_PNG_FILTER_UP, CODEC_PNG_FILTER_PAETH},
    {4, CODEC_PNG_FILTER_UP, CODEC_PNG_FILTER_PAETH},
    {5, CODEC_PNG_FILTER_UP, CODEC_PNG_FILTER_PAETH},
    {6, CODEC_PNG_FILTER_UP, CODEC_PNG_FILTER_PAETH},
    {7, CODEC_PNG_FILTER_UP, CODEC_PNG_FILTER_PAETH},
    {8, CODEC_PNG_FILTER_UP, CODEC_PNG_FILTER_PAETH},
    {12, CODEC_PNG_FILTER_UP, CODEC_PNG_FILTER_PAETH},
};

const char *codec_png_deflater(int compression) {
  int level = compression < 0 ? 0 : compression > 9 ? 9 : compression;
  return plans[level].deflate == RLE ? "deflate-rle" : "libdeflate";
}

static pthread_once_t allocator_once = PTHREAD_ONCE_INIT;

static void use_codec_allocator(void) {
  libdeflate_set_memory_allocator(codec_malloc, codec_free);
}

/* PNG's paeth predictor, written without branches (p - a is b - c, and so on) so that the
 * compiler vectorises the filter loop. */
static uint8_t paeth(uint8_t a, uint8_t b, uint8_t c) {
  int16_t pa = (int16_t)(b - c), pb = (int16_t)(a - c), pc = (int16_t)(pa + pb);
  pa = pa < 0 ? (int16_t)-pa : pa;
  pb = pb < 0 ? (int16_t)-pb : pb;
  pc = pc < 0 ? (int16_t)-pc : pc;
  return ((pa <= pb) & (pa <= pc)) ? a : pb <= pc ? b : c;
}

#ifdef __SSE2__
static inline __m128i abs_epi16(__m128i x) {
  return _mm_max_epi16(x, _mm_sub_epi16(_mm_setzero_si128(), x));
}

/* paeth() of eight 16-bit lanes, with masks in place of its branches. */
static inline __m128i paeth_epi16(__m128i a, __m128i b, __m128i c) {
  __m128i pa = _mm_sub_epi16(b, c), pb = _mm_sub_epi16(a, c), pc = _mm_add_epi16(pa, pb);
  pa = abs_epi16(pa), pb = abs_epi16(pb), pc = abs_epi16(pc);
  __m128i not_a = _mm_or_si128(_mm_cmpgt_epi16(pa, pb), _mm_cmpgt_epi16(pa, pc));
  __m128i use_c = _mm_cmpgt_epi16(pb, pc);
  __m128i bc = _mm_or_si128(_mm_and_si128(use_c, c), _mm_andnot_si128(use_c, b));
  return _mm_or_si128(_mm_and_si128(not_a, bc), _mm_andnot_si128(not_a, a));
}

/* The paeth residuals of cur[i..) into dst, 16 bytes at a time (i >= bpp); returns where the
 * 16-byte steps stopped. Faster than the compiler's own vectorisation of the scalar loop. */
static size_t paeth_sse2(uint8_t *dst, const uint8_t *cur, const uint8_t *prev, size_t i, size_t n,
                         size_t bpp) {
  const __m128i z = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16) {
    __m128i a = _mm_loadu_si128((const __m128i *)(cur + i - bpp));
    __m128i b = _mm_loadu_si128((const __m128i *)(prev + i));
    __m128i c = _mm_loadu_si128((const __m128i *)(prev + i - bpp));
    __m128i lo =
        paeth_epi16(_mm_unpacklo_epi8(a, z), _mm_unpacklo_epi8(b, z), _mm_unpacklo_epi8(c, z));
    __m128i hi =
        paeth_epi16(_mm_unpackhi_epi8(a, z), _mm_unpackhi_epi8(b, z), _mm_unpackhi_epi8(c, z));
    __m128i x = _mm_loadu_si128((const __m128i *)(cur + i));
    _mm_storeu_si128((__m128i *)(dst + i), _mm_sub_epi8(x, _mm_packus_epi16(lo, hi)));
  }
  return i;
}
#endif

/* Writes row cur filtered with type (0..4) into dst[0..n); prev is the row above (zeros for the
 * first row), bpp the bytes per pixel. */
static void filter_row(int type, uint8_t *dst, const uint8_t *cur, const uint8_t *prev, size_t n,
                       size_t bpp) {
  size_t i;
  switch (type) {
  case 0:
    memcpy(dst, cur, n);
    break;
  case 1:
    for (i = 0; i < bpp && i < n; i++) dst[i] = cur[i];
    for (; i < n; i++) dst[i] = (uint8_t)(cur[i] - cur[i - bpp]);
    break;
  case 2:
    for (i = 0; i < n; i++) dst[i] = (uint8_t)(cur[i] - prev[i]);
    break;
  case 3:
    for (i = 0; i < bpp && i < n; i++) dst[i] = (uint8_t)(cur[i] - (prev[i] >> 1));
    for (; i < n; i++) dst[i] = (uint8_t)(cur[i] - ((cur[i - bpp] + prev[i]) >> 1));
    break;
  default:
    for (i = 0; i < bpp && i < n; i++) dst[i] = (uint8_t)(cur[i] - prev[i]);
#ifdef __SSE2__
    i = paeth_sse2(dst, cur, prev, i, n, bpp);
#endif
    for (; i < n; i++) dst[i] = (uint8_t)(cur[i] - paeth(cur[i - bpp], prev[i], prev[i - bpp]));
    break;
  }
}

static uint64_t signed_sum(const uint8_t *p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++) s += (uint64_t)abs((int8_t)p[i]);
  return s;
}

/* Filters one row into out (its filter byte, then n bytes); scratch holds n bytes. The filters
 * are PNG's none, sub, up, average and paeth; "adaptive" tries all five and picks the one whose
 * bytes, read as signed, have the smallest sum of magnitudes (libpng's heuristic). */
static void filter_one(enum codec_png_filter f, uint8_t *out, const uint8_t *cur,
                       const uint8_t *prev, size_t n, size_t bpp, uint8_t *scratch) {
  static const int fixed[] = {[CODEC_PNG_FILTER_NONE] = 0,
                              [CODEC_PNG_FILTER_SUB] = 1,
                              [CODEC_PNG_FILTER_UP] = 2,
                              [CODEC_PNG_FILTER_PAETH] = 4};
  if (f != CODEC_PNG_FILTER_ADAPTIVE) {
    out[0] = (uint8_t)fixed[f];
    filter_row(out[0], out + 1, cur, prev, n, bpp);
    return;
  }
  out[0] = 0;
  filter_row(0, out + 1, cur, prev, n, bpp);
  uint64_t best = signed_sum(out + 1, n);
  for (int t = 1; t <= 4; t++) {
    filter_row(t, scratch, cur, prev, n, bpp);
    uint64_t s = signed_sum(scratch, n);
    if (s < best) {
      best = s;
      out[0] = (uint8_t)t;
      memcpy(out + 1, scratch, n);
    }
  }
}

/* Copies row src of n bytes into dst with 16-bit samples big-endian, as PNG stores them. */
static const uint8_t *big_endian_row(const uint8_t *src, uint8_t *dst, size_t n, int depth) {
  const uint16_t one = 1;
  uint8_t first;
  memcpy(&first, &one, 1);
  if (depth == 8 || first == 0) return src;
  for (size_t i = 0; i + 1 < n; i += 2) {
    dst[i] = src[i + 1];
    dst[i + 1] = src[i];
  }
  return dst;
}

/* Filters rows y0..y1 of img into out, row y0 first, asking the thread's hook every row.
 * Returns CODEC_OK, CODEC_NOMEM or CODEC_CANCELLED. */
static enum codec_status filter_rows(const struct codec_image *img, enum codec_png_filter f,
                                     uint8_t *out, size_t y0, size_t y1) {
  size_t n = (size_t)img->width * (size_t)img->channels * (size_t)(img->depth / 8);
  size_t bpp = (size_t)img->channels * (size_t)(img->depth / 8);
  uint8_t *work = codec_malloc(4 * n);
  if (work == NULL) return CODEC_NOMEM;
  uint8_t *rows[2] = {work, work + n}, *scratch = work + 2 * n, *zero = work + 3 * n;
  memset(zero, 0, n);
  const uint8_t *prev =
      y0 ? big_endian_row(img->pixels + (y0 - 1) * n, rows[(y0 - 1) & 1], n, img->depth) : zero;
  size_t y = y0;
  for (; y < y1 && !codec_stopped(); y++) {
    const uint8_t *cur = big_endian_row(img->pixels + y * n, rows[y & 1], n, img->depth);
    filter_one(f, out + (y - y0) * (n + 1), cur, prev, n, bpp, scratch);
    prev = cur;
  }
  codec_free(work);
  return y == y1 ? CODEC_OK : CODEC_CANCELLED;
}

/* The filtered image into *raw: height rows of a filter byte and the row's bytes. Returns
 * CODEC_OK, CODEC_NOMEM or CODEC_CANCELLED (*raw then NULL). */
static enum codec_status filter_image(const struct codec_image *img, enum codec_png_filter f,
                                      uint8_t **raw, size_t *total) {
  size_t n = (size_t)img->width * (size_t)img->channels * (size_t)(img->depth / 8);
  *total = (n + 1) * (size_t)img->height;
  uint8_t *out = *raw = codec_malloc(*total);
  enum codec_status st = out ? filter_rows(img, f, out, 0, (size_t)img->height) : CODEC_NOMEM;
  if (st == CODEC_OK) return st;
  codec_free(out);
  *raw = NULL;
  return st;
}

/* A large image at the run-length levels, with the caller's threads (o->parallel): its rows are
 * filtered in bands, then its filtered bytes compressed in parts of PART_BYTES (a multiple of
 * deflate_rle.c's blocks), each part ending in a sync flush, and the parts joined in order into
 * one zlib stream. The blocks are those of one thread's stream, so the file is the same but for
 * the flushes (5 bytes or less a part). */
#define PART_BYTES (4u << 20)

struct parts {
  const struct codec_image *img;
  enum codec_png_filter f;
  const struct codec_cancel *cancel; /* the caller's hook, set on the threads that help */
  uint8_t *raw;                      /* the filtered image */
  size_t raw_len;                    /* its bytes */
  size_t band_rows;                  /* rows a band filters */
  uint8_t *z;        /* the zlib stream: part k's blocks first written at 2 + k * slot */
  size_t slot;       /* codec_deflate_rle_part_bound(PART_BYTES) */
  size_t *zlen;      /* each part's bytes (0: not made) */
  int nparts, nomem; /* nomem: set (atomically) by a band that ran out of memory */
  int stopped;       /* set (atomically) by a band or part that the hook stopped */
  int bands_done;    /* bands filtered (atomic): a pool that gives up on a batch skips some */
};

static void filter_bands(void *arg, int begin, int end) {
  struct parts *p = arg;
  const struct codec_cancel *mine = codec_cancel_get();
  codec_cancel_set(p->cancel);
  for (int k = begin; k < end; k++) {
    size_t y0 = (size_t)k * p->band_rows, y1 = y0 + p->band_rows;
    if (y1 > (size_t)p->img->height) y1 = (size_t)p->img->height;
    enum codec_status st =
        filter_rows(p->img, p->f, p->raw + y0 * (p->raw_len / (size_t)p->img->height), y0, y1);
    if (st == CODEC_OK) __atomic_add_fetch(&p->bands_done, 1, __ATOMIC_RELAXED);
    if (st == CODEC_NOMEM) __atomic_store_n(&p->nomem, 1, __ATOMIC_RELAXED);
    if (st == CODEC_CANCELLED) __atomic_store_n(&p->stopped, 1, __ATOMIC_RELAXED);
  }
  codec_cancel_set(mine);
}

/* Each part takes milliseconds: the hook is asked before each. */
static void compress_parts(void *arg, int begin, int end) {
  struct parts *p = arg;
  for (int k = begin; k < end; k++) {
    size_t s = (size_t)k * PART_BYTES,
           e = s + PART_BYTES < p->raw_len ? s + PART_BYTES : p->raw_len;
    if (p->cancel && p->cancel->stop && p->cancel->stop(p->cancel->arg)) {
      __atomic_store_n(&p->stopped, 1, __ATOMIC_RELAXED);
      return;
    }
    p->zlen[k] = codec_deflate_rle_part(p->raw, s, e, k == p->nparts - 1, p->z + 2 + k * p->slot);
  }
}

/* The parts moved together after the zlib header, then the Adler-32 of the filtered image. */
static size_t join_parts(const struct parts *p) {
  uint8_t *at = p->z + 2;
  p->z[0] = 0x78, p->z[1] = 0x01; /* as codec_deflate_rle's */
  for (int k = 0; k < p->nparts; k++) {
    memmove(at, p->z + 2 + k * p->slot, p->zlen[k]); /* never to the right of where it is */
    at += p->zlen[k];
  }
  codec_put_be32(at, libdeflate_adler32(1, p->raw, p->raw_len));
  return (size_t)(at + 4 - p->z);
}

static enum codec_status deflate_parts(const struct codec_image *img, enum codec_png_filter f,
                                       const struct codec_encode_opts *o, size_t row, uint8_t **z,
                                       size_t *zlen) {
  struct parts p = {
      .img = img, .f = f, .cancel = codec_cancel_get(), .raw_len = row * (size_t)img->height};
  p.band_rows = PART_BYTES / row ? PART_BYTES / row : 1;
  p.nparts = (int)((p.raw_len + PART_BYTES - 1) / PART_BYTES);
  p.slot = codec_deflate_rle_part_bound(PART_BYTES);
  p.raw = codec_malloc(p.raw_len);
  p.z = p.raw ? codec_malloc(2 + (size_t)p.nparts * p.slot + 4) : NULL;
  p.zlen = p.z ? codec_malloc((size_t)p.nparts * sizeof *p.zlen) : NULL;
  int bands = (int)((img->height + p.band_rows - 1) / p.band_rows), made = p.zlen != NULL;
  if (made) memset(p.zlen, 0, (size_t)p.nparts * sizeof *p.zlen);
  if (made) o->parallel(o->parallel_ctx, bands, filter_bands, &p);
  made = made && !p.nomem && p.bands_done == bands;
  if (made) o->parallel(o->parallel_ctx, p.nparts, compress_parts, &p);
  for (int k = 0; made && k < p.nparts; k++) made = p.zlen[k] > 0; /* 0: not made */
  if (made) *zlen = join_parts(&p);
  codec_free(p.zlen);
  codec_free(p.raw);
  if (!made) codec_free(p.z);
  *z = made ? p.z : NULL;
  if (made) return CODEC_OK;
  /* a band or part not made: stopped, or out of memory (a pool that gives up skips some) */
  return p.stopped || codec_stopped() ? CODEC_CANCELLED : CODEC_NOMEM;
}

/* Writes a chunk (length, type, data, CRC) at p; returns the bytes written. */
static size_t put_chunk(uint8_t *p, const char *type, const uint8_t *data, size_t n) {
  codec_put_be32(p, (uint32_t)n);
  memcpy(p + 4, type, 4);
  if (n) memcpy(p + 8, data, n);
  codec_put_be32(p + 8 + n, libdeflate_crc32(0, p + 4, n + 4));
  return n + 12;
}

/* The iCCP chunk's data for profile icc: a name, a NUL, method 0 and the zlib-compressed profile.
 * Returns a codec_malloc'd buffer of *n bytes, or NULL when out of memory. */
static uint8_t *iccp_data(const uint8_t *icc, size_t icc_len, size_t *n) {
  static const char name[] = "ICC profile"; /* 11 bytes and the NUL */
  struct libdeflate_compressor *c = libdeflate_alloc_compressor(9);
  size_t bound = c ? libdeflate_zlib_compress_bound(c, icc_len) : 0;
  uint8_t *d = c ? codec_malloc(sizeof name + 1 + bound) : NULL;
  size_t z = d ? libdeflate_zlib_compress(c, icc, icc_len, d + sizeof name + 1, bound) : 0;
  if (c) libdeflate_free_compressor(c);
  if (z == 0) {
    codec_free(d);
    return NULL;
  }
  memcpy(d, name, sizeof name);
  d[sizeof name] = 0; /* compression method: zlib */
  *n = sizeof name + 1 + z;
  return d;
}

/* Assembles the file from the zlib stream z of zlen bytes and the iCCP data (may be NULL). */
static uint8_t *assemble(const struct codec_image *img, const uint8_t *z, size_t zlen,
                         const uint8_t *iccp, size_t iccp_len, size_t *outlen) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  static const uint8_t colour[5] = {0, 0, 4, 2, 6};
  size_t nidat = zlen / IDAT_MAX + 1;
  size_t total = 8 + 25 + (iccp ? 12 + iccp_len : 0) + 12 * nidat + zlen + 12;
  uint8_t *out = codec_malloc(total), *p = out, ihdr[13];
  if (out == NULL) return NULL;
  codec_put_be32(ihdr, (uint32_t)img->width);
  codec_put_be32(ihdr + 4, (uint32_t)img->height);
  ihdr[8] = (uint8_t)img->depth;
  ihdr[9] = colour[img->channels];
  ihdr[10] = ihdr[11] = ihdr[12] = 0; /* deflate, adaptive filtering, no interlace */
  memcpy(p, sig, 8);
  p += 8;
  p += put_chunk(p, "IHDR", ihdr, 13);
  if (iccp) p += put_chunk(p, "iCCP", iccp, iccp_len);
  size_t off = 0;
  do { /* a zlib stream is never empty, so there is at least one IDAT */
    size_t n = zlen - off < IDAT_MAX ? zlen - off : IDAT_MAX;
    p += put_chunk(p, "IDAT", z + off, n);
    off += n;
  } while (off < zlen);
  p += put_chunk(p, "IEND", NULL, 0);
  *outlen = (size_t)(p - out);
  return out;
}

/* The run-length levels on one thread: the rows are filtered into a buffer of one of the coder's
 * blocks and a row, each block is coded as soon as it is full (codec_rle_block) and the rest moved
 * to the front, so the filtered image is never whole in memory (a buffer the cache holds, and
 * no page faults for 6 MB of fresh memory at every 1080p encode). buf[0] keeps the byte before the
 * block, which a run may reach back to. The same stream as codec_deflate_rle of the whole image. */
static enum codec_status deflate_rle_rows(const struct codec_image *img, enum codec_png_filter f,
                                          size_t row, uint8_t **z, size_t *zlen) {
  size_t h = (size_t)img->height, have = 0, y = 0;
  uint8_t *buf = codec_malloc(1 + CODEC_RLE_BLOCK + row);
  *z = buf ? codec_malloc(codec_deflate_rle_bound(row * h)) : NULL;
  struct codec_rle *c = *z ? codec_rle_new(*z + 2) : NULL;
  uint32_t adler = 1;
  enum codec_status st = c != NULL ? CODEC_OK : CODEC_NOMEM;
  while (st == CODEC_OK) {
    if (y < h && have < CODEC_RLE_BLOCK) { /* fill past the block's end, at most a row past */
      size_t rows = (CODEC_RLE_BLOCK - have) / row + 1;
      rows = rows < h - y ? rows : h - y;
      st = filter_rows(img, f, buf + 1 + have, y, y + rows);
      have += rows * row, y += rows;
      continue;
    }
    size_t len = have < CODEC_RLE_BLOCK ? have : CODEC_RLE_BLOCK;
    int last = y == h && len == have;
    codec_rle_block(c, buf, 1, 1 + len, last);
    adler = libdeflate_adler32(adler, buf + 1, len);
    if (last) break;
    memmove(buf, buf + len, have - len + 1); /* the block's last byte, then what follows it */
    have -= len;
  }
  size_t n = c ? codec_rle_end(c, 0) : 0;
  codec_free(buf);
  if (st != CODEC_OK) {
    codec_free(*z);
    *z = NULL;
    return st;
  }
  (*z)[0] = 0x78, (*z)[1] = 0x01; /* as codec_deflate_rle's */
  codec_put_be32(*z + 2 + n, adler);
  *zlen = 2 + n + 4;
  return CODEC_OK;
}

/* One libdeflate compress, run by codec_run_stoppable. */
struct compress_job {
  struct libdeflate_compressor *c;
  const uint8_t *in;
  size_t n;
  uint8_t *out;
  size_t bound, zlen; /* zlen: 0 until it is done */
};

static void compress_run(void *arg) {
  struct compress_job *j = arg;
  j->zlen = libdeflate_zlib_compress(j->c, j->in, j->n, j->out, j->bound);
}

/* Filters and compresses img; on success *z holds the zlib stream of *zlen bytes. libdeflate
 * compresses a whole buffer in one call, so for it every row is filtered into one buffer (filter
 * byte + row, samples big-endian), and the call runs where stop.c can stop it
 * (codec_run_stoppable); the run-length coder takes a block at a time (deflate_rle_rows), or a
 * large image's parts on the caller's threads when it gives them (deflate_parts). The thread's
 * cancellation hook is asked every row as the rows are filtered (on the helping threads too), and
 * before each of the run-length coder's blocks and parts. */
static enum codec_status deflate_image(const struct codec_image *img, enum codec_png_filter f,
                                       int level, const struct codec_encode_opts *o, uint8_t **z,
                                       size_t *zlen) {
  size_t row = (size_t)img->width * (size_t)img->channels * (size_t)(img->depth / 8) + 1;
  if (level == RLE && o->parallel && row * (size_t)img->height >= 2 * PART_BYTES)
    return deflate_parts(img, f, o, row, z, zlen);
  if (level == RLE) return deflate_rle_rows(img, f, row, z, zlen);
  struct compress_job j = {NULL, NULL, 0, NULL, 0, 0};
  uint8_t *raw;
  enum codec_status st = filter_image(img, f, &raw, &j.n);
  j.in = raw;
  if (st == CODEC_OK) j.c = libdeflate_alloc_compressor(level);
  if (j.c) j.bound = libdeflate_zlib_compress_bound(j.c, j.n);
  j.out = j.bound ? codec_malloc(j.bound) : NULL;
  if (st == CODEC_OK) /* the bound always fits: only an allocation can fail */
    st = j.out ? codec_run_stoppable(compress_run, &j, j.n) : CODEC_NOMEM;
  if (j.c) libdeflate_free_compressor(j.c);
  codec_free(raw);
  if (st == CODEC_OK && j.zlen == 0) st = CODEC_NOMEM;
  if (st != CODEC_OK) codec_free(j.out);
  *z = st == CODEC_OK ? j.out : NULL;
  *zlen = j.zlen;
  return st;
}

enum codec_status codec_png_write(const struct codec_image *img, const struct codec_encode_opts *o,
                                  uint8_t **out, size_t *outlen, char *msg, size_t msglen) {
  pthread_once(&allocator_once, use_codec_allocator);
  enum codec_png_filter f = o->png_filter;
  const struct level_plan *plan = &plans[o->compression];
  if (f == CODEC_PNG_FILTER_AUTO) f = img->depth == 16 ? plan->f16 : plan->f8;
  uint8_t *z = NULL, *iccp = NULL;
  size_t zlen = 0, iccp_len = 0;
  enum codec_status st = deflate_image(img, f, plan->deflate, o, &z, &zlen);
  if (st == CODEC_OK && o->icc && o->icc_len) {
    iccp = iccp_data(o->icc, o->icc_len, &iccp_len);
    if (iccp == NULL) st = CODEC_NOMEM;
  }
  if (st == CODEC_OK) *out = assemble(img, z, zlen, iccp, iccp_len, outlen);
  if (st == CODEC_OK && *out == NULL) st = CODEC_NOMEM;
  codec_free(z);
  codec_free(iccp);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory encoding the PNG image");
  return st;
}

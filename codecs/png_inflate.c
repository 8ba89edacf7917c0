/* png_inflate.c: a PNG's pixel data inflated by libdeflate, handed to libpng as stored blocks.
 *
 * Half or more of a libpng decode is zlib's inflate, which libdeflate does about twice as fast,
 * but libpng has no hook for another inflater. So, for a non-interlaced PNG whose IDAT chunks
 * are consecutive, this inflates their joined zlib stream with libdeflate into the exact size
 * IHDR implies, and writes a copy of the file whose one IDAT chunk holds the same bytes as a
 * stored (uncompressed) zlib stream, which libpng's inflate copies at memory speed. libpng still
 * reads every chunk, unfilters, converts and checks the file as before; only the inflater
 * changed. Anything unexpected (a damaged or short stream, one that inflates to another size,
 * chunks out of order, an interlaced image, a filtered image over REWRAP_MAX bytes) leaves the
 * file as it is, for libpng to decode or refuse in its own words. */
#include <libdeflate.h>
#include <string.h>

#include "codecs_int.h"

/* Filtered bytes (21 MP of 8-bit RGB) above which libpng keeps its own inflate: the inflated rows
 * and the copy add up to twice this to a decode's memory while the copy is made, and once this
 * while libpng reads it. */
#define REWRAP_MAX (64u << 20)
#define STORED_MAX 65535u /* bytes in one stored deflate block */

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* The filtered size of the non-interlaced image IHDR (at buf + 16) describes, or 0. */
static size_t filtered_size(const uint8_t *ihdr) {
  static const int samples[7] = {1, 0, 3, 1, 2, 0, 4}; /* per pixel, by colour type */
  uint32_t w = be32(ihdr), h = be32(ihdr + 4);
  int depth = ihdr[8], colour = ihdr[9];
  if (colour > 6 || samples[colour] == 0 || ihdr[12] != 0 || depth < 1 || depth > 16) return 0;
  uint64_t row = ((uint64_t)w * (uint64_t)(samples[colour] * depth) + 7) / 8 + 1;
  uint64_t total = row * h;
  return w && h && total <= REWRAP_MAX ? (size_t)total : 0;
}

/* Finds the IDAT chunks: [*first, *end) spans them all, consecutive, holding *zlen data bytes.
 * Returns 0, or -1 when the file is not laid out so. */
static int find_idat(const uint8_t *buf, size_t len, size_t *first, size_t *end, size_t *zlen) {
  size_t pos = 8;
  *first = *end = *zlen = 0;
  while (pos + 12 <= len) {
    size_t n = be32(buf + pos);
    if (n > len - pos - 12) return -1;
    int idat = memcmp(buf + pos + 4, "IDAT", 4) == 0;
    if (idat && *first && *end != pos) return -1; /* a chunk between two IDATs */
    if (idat && !*first) *first = pos;
    if (idat) *end = pos + 12 + n, *zlen += n;
    if (memcmp(buf + pos + 4, "IEND", 4) == 0) break;
    pos += 12 + n;
  }
  return *first ? 0 : -1;
}

/* The joined IDAT data of buf[first..end), inflated by libdeflate into raw[0..n): CODEC_OK,
 * CODEC_NOMEM, or CODEC_CORRUPT when the stream does not inflate to exactly n bytes. */
static enum codec_status inflate_idat(const uint8_t *buf, size_t first, size_t end, size_t zlen,
                                      uint8_t *raw, size_t n) {
  uint8_t *z = codec_malloc(zlen ? zlen : 1);
  struct libdeflate_decompressor *d = z ? libdeflate_alloc_decompressor() : NULL;
  size_t at = 0;
  for (size_t pos = first; d && pos < end; pos += 12 + be32(buf + pos)) {
    memcpy(z + at, buf + pos + 8, be32(buf + pos));
    at += be32(buf + pos);
  }
  enum codec_status st =
      d == NULL                                                                    ? CODEC_NOMEM
      : libdeflate_zlib_decompress(d, z, zlen, raw, n, NULL) == LIBDEFLATE_SUCCESS ? CODEC_OK
                                                                                   : CODEC_CORRUPT;
  if (d) libdeflate_free_decompressor(d);
  codec_free(z);
  return st;
}

/* Writes raw[0..n) at p as one IDAT chunk holding a stored zlib stream; returns its bytes. */
static size_t stored_idat(uint8_t *p, const uint8_t *raw, size_t n) {
  uint8_t *d = p + 8, *q = d;
  *q++ = 0x78; /* deflate, 32 KiB window; 0x7801 is a multiple of 31 */
  *q++ = 0x01;
  size_t off = 0;
  do {
    size_t m = n - off > STORED_MAX ? STORED_MAX : n - off;
    *q++ = off + m == n; /* BFINAL on the last block; BTYPE 0, stored */
    uint8_t hdr[4] = {(uint8_t)m, (uint8_t)(m >> 8), (uint8_t)~m, (uint8_t)(~m >> 8)};
    memcpy(q, hdr, 4);
    memcpy(q + 4, raw + off, m);
    q += 4 + m;
    off += m;
  } while (off < n);
  put32(q, libdeflate_adler32(1, raw, n));
  q += 4;
  size_t dlen = (size_t)(q - d);
  put32(p, (uint32_t)dlen);
  memcpy(p + 4, "IDAT", 4);
  put32(q, libdeflate_crc32(0, p + 4, dlen + 4));
  return dlen + 12;
}

enum codec_status codec_png_rewrap(const uint8_t *buf, size_t len, uint8_t **out, size_t *outlen) {
  size_t first, end, zlen, n;
  *out = NULL;
  if (len < 33 || memcmp(buf + 12, "IHDR", 4) != 0 || be32(buf + 8) != 13 ||
      libdeflate_crc32(0, buf + 12, 17) != be32(buf + 29))
    return CODEC_UNSUPPORTED; /* libpng refuses it, or checked the limits from this IHDR */
  if ((n = filtered_size(buf + 16)) == 0 || find_idat(buf, len, &first, &end, &zlen) != 0)
    return CODEC_UNSUPPORTED;
  size_t blocks = n / STORED_MAX + 1, idat_len = 12 + 2 + 5 * blocks + n + 4;
  uint8_t *raw = codec_malloc(n), *file = raw ? codec_malloc(len - (end - first) + idat_len) : NULL;
  enum codec_status st = file ? inflate_idat(buf, first, end, zlen, raw, n) : CODEC_NOMEM;
  if (st != CODEC_OK) {
    codec_free(raw);
    codec_free(file);
    return st == CODEC_NOMEM ? CODEC_NOMEM : CODEC_UNSUPPORTED;
  }
  memcpy(file, buf, first);
  size_t at = first + stored_idat(file + first, raw, n);
  memcpy(file + at, buf + end, len - end);
  codec_free(raw);
  *out = file;
  *outlen = at + len - end;
  return CODEC_OK;
}

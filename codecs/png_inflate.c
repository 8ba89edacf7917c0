/* png_inflate.c: a PNG's pixel data found and inflated by libdeflate, for png.c's own path
 * through the pixel data or handed to libpng as stored blocks. codec_png_layout walks the chunks
 * and codec_png_inflate inflates the joined IDAT data into the exact size IHDR implies, which
 * png.c unfilters itself for the common files (png_unfilter.c); for the others (palettes, low bit
 * depths, tRNS, odd chunk layouts) codec_png_rewrap hands libpng a copy of the file whose pixel
 * data is already inflated. libdeflate inflates a whole stream in one call, with no hook: a large
 * one runs where the thread's cancellation hook can stop it (codec_run_stoppable), and is then
 * CODEC_CANCELLED. */
#include <libdeflate.h>
#include <string.h>

#include "codecs_int.h"

/* Filtered bytes (21 MP of 8-bit RGB) above which libpng keeps its own inflate: the inflated rows
 * and the copy add up to twice this to a decode's memory while the copy is made, and once this
 * while libpng reads it. */
#define REWRAP_MAX (64u << 20)
#define STORED_MAX 65535u /* bytes in one stored deflate block */

/* The filtered size of the non-interlaced image IHDR (at buf + 16) describes, or 0. */
static size_t filtered_size(const uint8_t *ihdr) {
  static const int samples[7] = {1, 0, 3, 1, 2, 0, 4}; /* per pixel, by colour type */
  uint32_t w = codec_be32(ihdr), h = codec_be32(ihdr + 4);
  int depth = ihdr[8], colour = ihdr[9];
  if (colour > 6 || samples[colour] == 0 || ihdr[12] != 0 || depth < 1 || depth > 16) return 0;
  uint64_t row = ((uint64_t)w * (uint64_t)(samples[colour] * depth) + 7) / 8 + 1;
  uint64_t total = row * h;
  return w && h && total <= REWRAP_MAX ? (size_t)total : 0;
}

static int is_letter(uint8_t c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* Whether a chunk after the pixel data is one libpng would pass over: an ancillary chunk (its
 * first letter lower case) with a well-formed name and no more data than libpng keeps. */
static int harmless_after(const uint8_t *type, size_t n) {
  for (int i = 0; i < 4; i++)
    if (!is_letter(type[i])) return 0;
  return (type[0] & 0x20) && n <= CODEC_PNG_CHUNK_MAX;
}

int codec_png_layout(const uint8_t *buf, size_t len, struct codec_png_layout *l) {
  size_t pos = 8;
  int after = 0, odd = 0; /* past the IDAT chunks; a chunk libpng might not pass over */
  *l = (struct codec_png_layout){0};
  while (pos + 12 <= len) {
    size_t n = codec_be32(buf + pos);
    const uint8_t *type = buf + pos + 4;
    if (n > len - pos - 12) return -1;
    int idat = memcmp(type, "IDAT", 4) == 0;
    if (idat && after) return -1; /* a chunk between two IDATs */
    if (idat && !l->first) l->first = pos;
    if (idat) l->end = pos + 12 + n, l->zlen += n;
    if (!idat && l->first) after = 1;
    if (!l->first && memcmp(type, "tRNS", 4) == 0) l->trns = 1;
    if (memcmp(type, "IEND", 4) == 0) {
      l->tidy = l->first && !odd && n == 0;
      break;
    }
    if (after && !harmless_after(type, n)) odd = 1;
    pos += 12 + n;
  }
  return l->first ? 0 : -1;
}

/* The zlib header (RFC 1950): deflate, a window of at most 32 KiB, no preset dictionary. */
/* One libdeflate inflate, run by codec_run_stoppable. */
struct inflate_job {
  struct libdeflate_decompressor *d;
  const uint8_t *z; /* the deflate stream, after the zlib header */
  size_t zlen;
  uint8_t *raw; /* receives at most n bytes */
  size_t n, used, got;
  enum libdeflate_result r;
};

static void inflate_run(void *arg) {
  struct inflate_job *j = arg;
  j->r = libdeflate_deflate_decompress_ex(j->d, j->z, j->zlen, j->raw, j->n, &j->used, &j->got);
}

static int zlib_header_ok(const uint8_t *z, size_t n) {
  return n >= 2 && (z[0] & 15) == 8 && z[0] >> 4 <= 7 && !(z[1] & 0x20) &&
         (z[0] << 8 | z[1]) % 31 == 0;
}

enum codec_status codec_png_inflate(const uint8_t *buf, const struct codec_png_layout *l, int adler,
                                    uint8_t *raw, size_t n, char *msg, size_t msglen) {
  const uint8_t *z = buf + l->first + 8;
  uint8_t *joined = NULL; /* the data of several IDAT chunks, joined */
  if (l->end - l->first != l->zlen + 12) {
    if ((joined = codec_malloc(l->zlen ? l->zlen : 1)) == NULL) return CODEC_NOMEM;
    size_t at = 0;
    for (size_t pos = l->first; pos < l->end; pos += 12 + codec_be32(buf + pos)) {
      memcpy(joined + at, buf + pos + 8, codec_be32(buf + pos));
      at += codec_be32(buf + pos);
    }
    z = joined;
  }
  int header = zlib_header_ok(z, l->zlen);
  struct inflate_job j = {
      libdeflate_alloc_decompressor(), z + 2, l->zlen - 2, raw, n, 0, 0, LIBDEFLATE_BAD_DATA};
  enum codec_status st = j.d && header ? codec_run_stoppable(inflate_run, &j, n) : CODEC_OK;
  size_t used = j.used, got = j.got;
  enum libdeflate_result r = j.r;
  if (r == LIBDEFLATE_SUCCESS && adler &&
      (l->zlen - 2 - used < 4 || codec_be32(z + 2 + used) != libdeflate_adler32(1, raw, got)))
    r = LIBDEFLATE_BAD_DATA;
  if (j.d) libdeflate_free_decompressor(j.d);
  codec_free(joined);
  if (j.d == NULL) return CODEC_NOMEM;
  if (st == CODEC_CANCELLED) return st;
  if (r == LIBDEFLATE_SUCCESS && got == n) return CODEC_OK;
  if (!header)
    codec_msgf(msg, msglen, "the PNG pixel data is corrupt: it does not start with a zlib header");
  else if (r == LIBDEFLATE_INSUFFICIENT_SPACE)
    codec_msgf(msg, msglen,
               "the PNG pixel data is corrupt: it inflates to more than the %zu bytes its rows "
               "take",
               n);
  else if (r == LIBDEFLATE_SUCCESS)
    codec_msgf(msg, msglen,
               "the PNG pixel data is corrupt: it inflates to %zu bytes where its rows take %zu",
               got, n);
  else
    codec_msgf(msg, msglen, "the PNG pixel data is corrupt: its zlib stream is damaged");
  return CODEC_CORRUPT;
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
  codec_put_be32(q, libdeflate_adler32(1, raw, n));
  q += 4;
  size_t dlen = (size_t)(q - d);
  codec_put_be32(p, (uint32_t)dlen);
  memcpy(p + 4, "IDAT", 4);
  codec_put_be32(q, libdeflate_crc32(0, p + 4, dlen + 4));
  return dlen + 12;
}

/* Much of a libpng decode is zlib's inflate, which libdeflate does faster, but libpng has no hook
 * for another inflater. So, for a non-interlaced PNG whose IDAT chunks are consecutive, this
 * inflates their joined zlib stream with libdeflate and writes a copy of the file whose one IDAT
 * chunk holds the same bytes as a stored (uncompressed) zlib stream, which libpng's inflate copies
 * at memory speed. libpng still reads every chunk, unfilters, converts and checks the file; only
 * the inflater differs. Anything unexpected (a damaged or short stream, one that inflates to
 * another size, chunks out of order, an interlaced image, a filtered image over REWRAP_MAX bytes)
 * leaves the file as it is, for libpng to decode or refuse in its own words. */
enum codec_status codec_png_rewrap(const uint8_t *buf, size_t len, uint8_t **out, size_t *outlen) {
  struct codec_png_layout l;
  size_t n;
  *out = NULL;
  if (len < 33 || memcmp(buf + 12, "IHDR", 4) != 0 || codec_be32(buf + 8) != 13 ||
      libdeflate_crc32(0, buf + 12, 17) != codec_be32(buf + 29))
    return CODEC_UNSUPPORTED; /* libpng refuses it, or checked the limits from this IHDR */
  if ((n = filtered_size(buf + 16)) == 0 || codec_png_layout(buf, len, &l) != 0)
    return CODEC_UNSUPPORTED;
  size_t blocks = n / STORED_MAX + 1, idat_len = 12 + 2 + 5 * blocks + n + 4;
  uint8_t *raw = codec_malloc(n),
          *file = raw ? codec_malloc(len - (l.end - l.first) + idat_len) : NULL;
  enum codec_status st = file ? codec_png_inflate(buf, &l, 1, raw, n, NULL, 0) : CODEC_NOMEM;
  if (st != CODEC_OK) {
    codec_free(raw);
    codec_free(file);
    return st == CODEC_NOMEM || st == CODEC_CANCELLED ? st : CODEC_UNSUPPORTED;
  }
  memcpy(file, buf, l.first);
  size_t at = l.first + stored_idat(file + l.first, raw, n);
  memcpy(file + at, buf + l.end, len - l.end);
  codec_free(raw);
  *out = file;
  *outlen = at + len - l.end;
  return CODEC_OK;
}

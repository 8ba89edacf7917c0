/* exif.c: the EXIF Orientation tag of a JPEG file, and turning decoded pixels upright. Cameras
 * store pixels as the sensor read them and record in EXIF how to turn them for display. jpeg.c
 * calls codec_exif_orientation() on the file and codec_orient() on the decoded pixels, so callers
 * always get an upright image. Every value the parser reads comes from an untrusted upload, so
 * every offset is checked against the buffer in 64-bit arithmetic before it is used; anything
 * malformed means "no orientation" (1), never an error, because a broken EXIF block does not make
 * the picture itself unreadable. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "codecs_int.h"

#define TAG_ORIENTATION 0x0112
#define TYPE_SHORT      3

static const uint8_t exif_magic[6] = {'E', 'x', 'i', 'f', 0, 0};

static unsigned rd16(const uint8_t *p, int big_endian) {
  return big_endian ? (unsigned)p[0] << 8 | p[1] : (unsigned)p[1] << 8 | p[0];
}

static uint32_t rd32(const uint8_t *p, int big_endian) {
  if (big_endian) return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
  return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

int codec_exif_parse(const uint8_t *app1, size_t len) {
  if (app1 == NULL || len < sizeof exif_magic + 8) return 1;
  if (memcmp(app1, exif_magic, sizeof exif_magic) != 0) return 1;
  const uint8_t *tiff = app1 + sizeof exif_magic;
  uint64_t n = len - sizeof exif_magic;
  int be;
  if (tiff[0] == 'M' && tiff[1] == 'M')
    be = 1;
  else if (tiff[0] == 'I' && tiff[1] == 'I')
    be = 0;
  else
    return 1;
  if (rd16(tiff + 2, be) != 42) return 1;
  uint64_t ifd = rd32(tiff + 4, be);
  if (ifd + 2 > n) return 1;
  unsigned count = rd16(tiff + ifd, be);
  for (unsigned i = 0; i < count; i++) {
    uint64_t e = ifd + 2 + 12 * (uint64_t)i;
    if (e + 12 > n) return 1; /* the entry count claims more than the segment holds */
    if (rd16(tiff + e, be) != TAG_ORIENTATION) continue;
    if (rd16(tiff + e + 2, be) != TYPE_SHORT || rd32(tiff + e + 4, be) != 1) return 1;
    unsigned v = rd16(tiff + e + 8, be); /* a single SHORT sits at the start of the value field */
    return v >= 1 && v <= 8 ? (int)v : 1;
  }
  return 1;
}

/* Markers without a length field: TEM, RST0..7 and SOI. */
static int standalone_marker(unsigned m) {
  return m == 0x01 || (m >= 0xd0 && m <= 0xd8);
}

/* Walks the JPEG markers up to the first scan and takes the first APP1 segment that starts
 * "Exif\0\0"; codec_exif_parse reads its TIFF header (II or MM byte order) and looks for tag
 * 0x0112 (SHORT, count 1) in IFD0. */
int codec_exif_orientation(const uint8_t *jpeg, size_t len) {
  if (jpeg == NULL || len < 4 || jpeg[0] != 0xff || jpeg[1] != 0xd8) return 1;
  size_t pos = 2;
  while (len - pos >= 4) {
    if (jpeg[pos] != 0xff) return 1;
    unsigned m = jpeg[pos + 1];
    if (m == 0xff) { /* fill byte before a marker */
      pos++;
      continue;
    }
    if (standalone_marker(m)) {
      pos += 2;
      continue;
    }
    if (m == 0xda || m == 0xd9) return 1; /* start of scan or end of image: no EXIF before it */
    size_t seglen = (size_t)jpeg[pos + 2] << 8 | jpeg[pos + 3]; /* includes its own 2 bytes */
    if (seglen < 2 || seglen > len - pos - 2) return 1;
    const uint8_t *payload = jpeg + pos + 4;
    if (m == 0xe1 && seglen - 2 >= sizeof exif_magic &&
        memcmp(payload, exif_magic, sizeof exif_magic) == 0)
      return codec_exif_parse(payload, seglen - 2);
    pos += 2 + seglen;
  }
  return 1;
}

/* Where output pixel (x, y) comes from in a stored image of sw x sh pixels of bpp bytes:
 * base + x * step_x + y * step_y bytes into the stored pixels. */
struct walk {
  ptrdiff_t base, step_x, step_y;
};

static struct walk walk_for(int o, ptrdiff_t sw, ptrdiff_t sh, ptrdiff_t bpp) {
  ptrdiff_t row = sw * bpp, last_row = (sh - 1) * row, last_col = (sw - 1) * bpp;
  switch (o) {
  case 2:
    return (struct walk){last_col, -bpp, row}; /* mirror left-right */
  case 3:
    return (struct walk){last_row + last_col, -bpp, -row}; /* rotate 180 */
  case 4:
    return (struct walk){last_row, bpp, -row}; /* mirror top-bottom */
  case 5:
    return (struct walk){0, row, bpp}; /* transpose */
  case 6:
    return (struct walk){last_row, -row, bpp}; /* rotate 90 clockwise */
  case 7:
    return (struct walk){last_row + last_col, -row, -bpp}; /* transverse */
  case 8:
    return (struct walk){last_col, row, -bpp}; /* rotate 90 anticlockwise */
  default:
    return (struct walk){0, bpp, row};
  }
}

enum codec_status codec_orient(struct codec_image *img, int o) {
  if (o < 2 || o > 8 || img->pixels == NULL) return CODEC_OK;
  size_t bpp = (size_t)img->channels * (size_t)(img->depth / 8);
  size_t sw = (size_t)img->width, sh = (size_t)img->height;
  uint8_t *dst = codec_malloc(sw * sh * bpp); /* the decoder already allocated this much */
  if (dst == NULL) return CODEC_NOMEM;
  size_t dw = o >= 5 ? sh : sw, dh = o >= 5 ? sw : sh;
  struct walk w = walk_for(o, (ptrdiff_t)sw, (ptrdiff_t)sh, (ptrdiff_t)bpp);
  const uint8_t *src = img->pixels;
  uint8_t *d = dst;
  for (size_t y = 0; y < dh; y++) {
    if (codec_stopped()) {
      codec_free(dst);
      return CODEC_CANCELLED;
    }
    ptrdiff_t off = w.base + (ptrdiff_t)y * w.step_y;
    for (size_t x = 0; x < dw; x++, off += w.step_x, d += bpp) memcpy(d, src + off, bpp);
  }
  codec_free(img->pixels);
  img->pixels = dst;
  img->width = (int)dw;
  img->height = (int)dh;
  return CODEC_OK;
}

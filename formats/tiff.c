/* tiff.c: TIFF input (libtiff 4.5), the first page only, from memory.
 *
 * libtiff reads the file through TIFFClientOpenExt over the caller's buffer (mapped: strips are
 * read in place), with handlers of this file's own for its errors (the first becomes the
 * sentence) and warnings (ignored); the process-wide handlers, which print to stderr, are turned
 * off once, so nothing libtiff says reaches stderr. Its largest single allocation is bounded by
 * what the limits allow an image to hold.
 *
 * The first directory's tags are read and checked, and width, height and pixel count against the
 * limits, before any pixel buffer is allocated. Then:
 *   - gray (min-is-black or min-is-white), palette, RGB and CMYK of unsigned samples, 1, 2, 4, 8
 *     or 16 bits (palettes up to 8, CMYK 8), contiguous or in separate planes, stripped or
 *     tiled, with any compression libtiff decodes (none, LZW, Deflate, PackBits, JPEG, ...), are
 *     read strip by strip or tile by tile with TIFFReadEncodedStrip/Tile and unpacked here: gray
 *     below 8 bits is scaled to 8, palettes expand to RGB (8-bit colour maps as libtiff detects
 *     them), 16-bit gray and RGB stay 16-bit, CMYK becomes RGB through its ICC profile when it has
 *     one (codec_cmyk_to_rgb), JPEG-compressed YCbCr is converted to RGB by libtiff's JPEG codec;
 *   - the first extra sample is alpha (gray+alpha, RGBA; unassociated or unspecified as it is,
 *     associated alpha unpremultiplied); further extra samples are dropped;
 *   - other photometric interpretations libtiff can render (YCbCr without JPEG, CIE L*a*b*, ...)
 *     go through its RGBA interface (TIFFRGBAImageGet) a strip's rows at a time, as 8-bit RGB
 *     or unpremultiplied RGBA.
 * Signed or floating-point samples, 32-bit samples, 16-bit palettes or CMYK and anything libtiff
 * cannot render are refused with CODEC_UNSUPPORTED and a sentence. The Orientation tag is applied
 * (codec_orient) and reported. The thread's cancellation hook is asked before every strip or
 * tile. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <tiffio.h>

#include "formats.h"

/* TIFF and BigTIFF (II*, MM*, II+, MM+). The decoder gives the first page: 8-bit or 16-bit gray,
 * gray+alpha, RGB or RGBA (palettes and CMYK to RGB, bilevel and 2- or 4-bit gray to 8 bits,
 * associated alpha unpremultiplied), the Orientation tag applied; floating-point and signed
 * samples are CODEC_UNSUPPORTED. The ICC reader gives the first page's profile tag. */
static int tiff_sniff(const uint8_t *buf, size_t len) {
  if (buf == NULL || len < 4) return 0;
  return memcmp(buf, "II*\0", 4) == 0 || memcmp(buf, "MM\0*", 4) == 0 ||
         memcmp(buf, "II+\0", 4) == 0 || memcmp(buf, "MM\0+", 4) == 0; /* and BigTIFF */
}

/* ---- libtiff over a buffer ---- */

struct tiff_io { /* the client data of one TIFF handle */
  const uint8_t *buf;
  size_t len;
  uint64_t pos;
  char err[200]; /* libtiff's first error */
};

static tmsize_t io_read(thandle_t h, void *dst, tmsize_t n) {
  struct tiff_io *io = h;
  if (n <= 0 || io->pos >= io->len) return 0;
  size_t k = (uint64_t)n < io->len - io->pos ? (size_t)n : (size_t)(io->len - io->pos);
  memcpy(dst, io->buf + io->pos, k);
  io->pos += k;
  return (tmsize_t)k;
}

static tmsize_t io_write(thandle_t h, void *src, tmsize_t n) {
  (void)h, (void)src, (void)n;
  return -1; /* read-only */
}

static toff_t io_seek(thandle_t h, toff_t off, int whence) {
  struct tiff_io *io = h;
  uint64_t base = whence == SEEK_CUR ? io->pos : whence == SEEK_END ? io->len : 0;
  if (off > UINT64_MAX - base) return (toff_t)-1;
  io->pos = base + off;
  return io->pos;
}

static int io_close(thandle_t h) {
  (void)h;
  return 0;
}

static toff_t io_size(thandle_t h) {
  return ((struct tiff_io *)h)->len;
}

static int io_map(thandle_t h, void **base, toff_t *size) {
  struct tiff_io *io = h;
  *base = (void *)(uintptr_t)io->buf; /* read-only mode: libtiff never writes through it */
  *size = io->len;
  return 1;
}

static void io_unmap(thandle_t h, void *base, toff_t size) {
  (void)h, (void)base, (void)size;
}

static int on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap) {
  struct tiff_io *io = user;
  (void)tif, (void)module;
  if (io->err[0] == 0) vsnprintf(io->err, sizeof io->err, fmt, ap);
  return 1; /* handled: the process-wide handlers are not called */
}

static int on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap) {
  (void)tif, (void)user, (void)module, (void)fmt, (void)ap;
  return 1;
}

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

/* libtiff's process-wide handlers print to stderr, and run where no handle exists yet. */
static void quiet(void) {
  TIFFSetErrorHandler(NULL);
  TIFFSetWarningHandler(NULL);
}

/* Opens the first directory of buf; *io receives libtiff's errors. lim bounds libtiff's largest
 * single allocation (16-bit RGBA of lim's pixels, and a megabyte). */
static TIFF *tiff_open(struct tiff_io *io, const uint8_t *buf, size_t len,
                       const struct codec_limits *lim) {
  pthread_once(&quiet_once, quiet);
  *io = (struct tiff_io){buf, len, 0, ""};
  TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
  if (opts == NULL) return NULL;
  TIFFOpenOptionsSetErrorHandlerExtR(opts, on_error, io);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, on_warning, io);
  if (lim && lim->max_pixels && lim->max_pixels < (uint64_t)INT64_MAX / 16)
    TIFFOpenOptionsSetMaxSingleMemAlloc(opts, (tmsize_t)(lim->max_pixels * 8 + (1u << 20)));
  TIFF *tif = TIFFClientOpenExt("upload", "r", io, io_read, io_write, io_seek, io_close, io_size,
                                io_map, io_unmap, opts);
  TIFFOpenOptionsFree(opts);
  return tif;
}

static enum codec_status tiff_failure(const struct tiff_io *io, const char *what, char *msg,
                                      size_t msglen) {
  codec_msgf(msg, msglen, "the TIFF file is corrupt or truncated: %s (libtiff: %s)", what,
             io->err[0] ? io->err : "no detail");
  return CODEC_CORRUPT;
}

/* ---- what the first directory holds ---- */

enum route { ROUTE_SAMPLES, ROUTE_RGBA };

struct tinfo {
  uint32_t w, h;
  uint16_t bps, spp, photo, planar, orient;
  int colours;         /* colour samples a pixel: 1 (gray or palette index), 3 or 4 (CMYK) */
  int alpha, assoc;    /* the sample after the colours is alpha; premultiplied */
  int channels, depth; /* the image: channels (CMYK: 4, made 3 after) and bits */
  enum route route;
  uint16_t *cmap[3];  /* palette: libtiff's colour map */
  int cmap8;          /* its entries are 8-bit (all below 256) */
  const uint8_t *icc; /* the ICC profile tag, or NULL (CMYK uses it) */
  uint32_t icc_len;
};

static uint16_t tag16(TIFF *tif, ttag_t tag, uint16_t dflt) {
  uint16_t v = dflt;
  if (!TIFFGetFieldDefaulted(tif, tag, &v)) v = dflt;
  return v;
}

static enum codec_status refuse(char *msg, size_t msglen, const char *what) {
  codec_msgf(msg, msglen, "TIFF with %s is not supported", what);
  return CODEC_UNSUPPORTED;
}

/* The extra samples: whether the first is alpha, and associated. */
static void read_extra(TIFF *tif, struct tinfo *t) {
  uint16_t n = 0, *types = NULL;
  t->alpha = t->spp > t->colours;
  if (t->alpha && TIFFGetField(tif, TIFFTAG_EXTRASAMPLES, &n, &types) && n > 0 && types)
    t->assoc = types[0] == EXTRASAMPLE_ASSOCALPHA;
}

/* The palette's colour map, and whether its entries are 8-bit. */
static int read_cmap(TIFF *tif, struct tinfo *t) {
  if (!TIFFGetField(tif, TIFFTAG_COLORMAP, &t->cmap[0], &t->cmap[1], &t->cmap[2])) return -1;
  t->cmap8 = 1;
  for (size_t i = 0; i < (size_t)1 << t->bps && t->cmap8; i++)
    t->cmap8 = t->cmap[0][i] < 256 && t->cmap[1][i] < 256 && t->cmap[2][i] < 256;
  return 0;
}

/* Decides how t's directory is read: CODEC_OK with t filled, or the refusal. */
static enum codec_status choose_route(TIFF *tif, struct tinfo *t, char *msg, size_t msglen) {
  uint16_t fmt = tag16(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT);
  if (fmt == SAMPLEFORMAT_IEEEFP) return refuse(msg, msglen, "floating-point samples");
  if (fmt != SAMPLEFORMAT_UINT && fmt != SAMPLEFORMAT_VOID)
    return refuse(msg, msglen, "signed or complex samples");
  if (t->bps != 1 && t->bps != 2 && t->bps != 4 && t->bps != 8 && t->bps != 16)
    return refuse(msg, msglen, "samples of other than 1, 2, 4, 8 or 16 bits");
  if (t->spp == 0) return refuse(msg, msglen, "no samples");
  uint16_t comp = tag16(tif, TIFFTAG_COMPRESSION, COMPRESSION_NONE);
  if (t->photo == PHOTOMETRIC_YCBCR && comp == COMPRESSION_JPEG && t->bps == 8) {
    TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB); /* libjpeg converts */
    t->photo = PHOTOMETRIC_RGB;
  }
  switch (t->photo) {
  case PHOTOMETRIC_MINISBLACK:
  case PHOTOMETRIC_MINISWHITE:
    t->colours = 1;
    break;
  case PHOTOMETRIC_PALETTE:
    if (t->bps > 8) return refuse(msg, msglen, "a palette of more than 8 bits");
    if (read_cmap(tif, t) != 0) {
      codec_msgf(msg, msglen, "the TIFF palette image has no colour map");
      return CODEC_CORRUPT;
    }
    t->colours = 1;
    break;
  case PHOTOMETRIC_RGB:
    t->colours = 3;
    break;
  case PHOTOMETRIC_SEPARATED:
    if (tag16(tif, TIFFTAG_INKSET, INKSET_CMYK) != INKSET_CMYK || t->bps != 8)
      return refuse(msg, msglen, "separated colour other than 8-bit CMYK");
    t->colours = 4;
    break;
  default:
    t->route = ROUTE_RGBA;
  }
  if (t->route == ROUTE_SAMPLES && t->spp < t->colours)
    return refuse(msg, msglen, "fewer samples than its colours");
  return CODEC_OK;
}

/* Checks t's upright size (after the orientation) against lim, for bytes a pixel. */
static enum codec_status check_upright(const struct tinfo *t, unsigned bytes,
                                       const struct codec_limits *lim, char *msg, size_t msglen) {
  size_t nbytes;
  int swap = t->orient >= 5;
  return codec_check_size(swap ? t->h : t->w, swap ? t->w : t->h, bytes, lim, &nbytes, msg, msglen);
}

/* Reads the first directory's tags into t, and checks its size against lim. */
static enum codec_status tiff_info(TIFF *tif, const struct codec_limits *lim, struct tinfo *t,
                                   char *msg, size_t msglen) {
  *t = (struct tinfo){0};
  size_t nbytes;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &t->w) ||
      !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &t->h))
    return codec_check_size(0, 0, 1, lim, &nbytes, msg, msglen);
  t->orient = tag16(tif, TIFFTAG_ORIENTATION, ORIENTATION_TOPLEFT);
  if (t->orient < 1 || t->orient > 8) t->orient = 1;
  enum codec_status st = check_upright(t, 1, lim, msg, msglen);
  if (st != CODEC_OK) return st;
  t->bps = tag16(tif, TIFFTAG_BITSPERSAMPLE, 1);
  t->spp = tag16(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
  t->photo =
      tag16(tif, TIFFTAG_PHOTOMETRIC, t->spp >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK);
  t->planar = tag16(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  uint32_t n = 0;
  void *icc = NULL;
  if (TIFFGetField(tif, TIFFTAG_ICCPROFILE, &n, &icc) && icc && n <= CODEC_ICC_MAX)
    t->icc = icc, t->icc_len = n;
  if ((st = choose_route(tif, t, msg, msglen)) != CODEC_OK) return st;
  if (t->route == ROUTE_SAMPLES) read_extra(tif, t);
  int alpha = t->route == ROUTE_RGBA ? 1 : t->alpha; /* RGBA: decided after TIFFRGBAImageBegin */
  t->channels = (t->photo == PHOTOMETRIC_PALETTE ? 3 : t->colours) + alpha;
  if (t->route == ROUTE_RGBA) t->channels = 4;
  if (t->colours == 4) t->channels = 4; /* CMYK: alpha dropped, RGB after the conversion */
  t->depth = t->route == ROUTE_SAMPLES && t->bps == 16 ? 16 : 8;
  return check_upright(t, (unsigned)(t->channels * t->depth / 8), lim, msg, msglen);
}

/* ---- samples to pixels ---- */

/* Sample i of a row of bps-bit samples, packed from the most significant bit. */
static unsigned sample_of(const uint8_t *row, size_t i, int bps) {
  if (bps == 8) return row[i];
  if (bps == 16) {
    uint16_t v;
    memcpy(&v, row + 2 * i, 2); /* libtiff has swapped it to host order */
    return v;
  }
  size_t bit = i * (size_t)bps;
  return (unsigned)(row[bit / 8] >> (8 - bps - (int)(bit % 8))) & ((1u << bps) - 1);
}

static void put_sample(uint8_t *px, int c, int depth, unsigned v) {
  if (depth == 8)
    px[c] = (uint8_t)v;
  else
    memcpy(px + 2 * c, &(uint16_t){(uint16_t)v}, 2);
}

/* Puts sample s (0-based within the pixel) of value v into pixel px. */
static void place(const struct tinfo *t, uint8_t *px, int s, unsigned v) {
  unsigned max = (1u << t->bps) - 1;
  if (s < t->colours && t->photo == PHOTOMETRIC_PALETTE) {
    for (int c = 0; c < 3; c++) {
      unsigned e = t->cmap[c][v];
      px[c] = (uint8_t)(t->cmap8 ? e : e >> 8); /* v * 256 or v * 257 written: v */
    }
  } else if (s < t->colours) {
    if (t->photo == PHOTOMETRIC_MINISWHITE) v = max - v;
    if (t->bps < 8) v = v * 255u / max;
    put_sample(px, s, t->depth, v);
  } else if (s == t->colours && t->alpha && t->colours != 4) {
    put_sample(px, t->channels - 1, t->depth, t->bps < 8 ? v * 255u / max : v);
  }
}

/* Writes n pixels of one strip or tile row, samples s0 .. s0 + per - 1 of each (per: all the
 * samples of a contiguous pixel, or one plane's), to dst. */
static void put_row(const struct tinfo *t, const uint8_t *src, size_t n, int s0, int per,
                    uint8_t *dst) {
  size_t px = (size_t)t->channels * (size_t)(t->depth / 8);
  for (size_t x = 0; x < n; x++)
    for (int s = 0; s < per; s++)
      place(t, dst + x * px, s0 + s, sample_of(src, x * (size_t)per + (size_t)s, t->bps));
}

/* Associated alpha to unassociated: each colour sample times max over alpha, rounded (0 where
 * alpha is 0). */
static enum codec_status unpremultiply(struct codec_image *img) {
  int ch = img->channels, colours = ch - 1;
  uint32_t max = img->depth == 8 ? 255 : 65535;
  for (int y = 0; y < img->height; y++) {
    if (codec_stopped()) return CODEC_CANCELLED;
    for (size_t x = 0; x < (size_t)img->width; x++) {
      size_t i = ((size_t)y * (size_t)img->width + x) * (size_t)ch;
      if (img->depth == 8) {
        uint8_t *p = img->pixels + i;
        for (int c = 0; c < colours; c++) {
          uint32_t v = p[ch - 1] ? (p[c] * max + p[ch - 1] / 2u) / p[ch - 1] : 0;
          p[c] = (uint8_t)(v > max ? max : v);
        }
      } else {
        uint16_t *p = (uint16_t *)(void *)img->pixels + i;
        for (int c = 0; c < colours; c++) {
          uint32_t v = p[ch - 1] ? (p[c] * max + p[ch - 1] / 2u) / p[ch - 1] : 0;
          p[c] = (uint16_t)(v > max ? max : v);
        }
      }
    }
  }
  return CODEC_OK;
}

/* ---- reading strips and tiles ---- */

struct unit {     /* one strip or tile of one plane, where it goes */
  uint32_t x, y;  /* its top-left pixel */
  uint32_t w, h;  /* its size (a strip: the image's width, its rows) */
  uint16_t plane; /* the sample plane (separate planes), else 0 */
};

/* Decodes unit u (number idx) into buf, then its rows, clipped to the image, into img. */
static enum codec_status read_unit(TIFF *tif, struct tiff_io *io, const struct tinfo *t, int tiled,
                                   uint32_t idx, const struct unit *u, uint8_t *buf, tmsize_t size,
                                   struct codec_image *img, char *msg, size_t msglen) {
  tmsize_t got =
      tiled ? TIFFReadEncodedTile(tif, idx, buf, size) : TIFFReadEncodedStrip(tif, idx, buf, size);
  if (got < 0)
    return tiff_failure(io, tiled ? "a tile cannot be read" : "a strip cannot be read", msg,
                        msglen);
  int separate = t->planar == PLANARCONFIG_SEPARATE;
  int per = separate ? 1 : t->spp;
  size_t stride = ((size_t)u->w * (size_t)per * t->bps + 7) / 8;
  size_t px = (size_t)t->channels * (size_t)(t->depth / 8);
  uint32_t w = u->x + u->w > t->w ? t->w - u->x : u->w;
  for (uint32_t r = 0; r < u->h && u->y + r < t->h; r++) {
    if ((size_t)(r + 1) * stride > (size_t)got) break; /* a short strip: the rest stays 0 */
    uint8_t *dst = img->pixels + ((size_t)(u->y + r) * t->w + u->x) * px;
    put_row(t, buf + (size_t)r * stride, w, separate ? u->plane : 0, per, dst);
  }
  return CODEC_OK;
}

/* Every strip or tile of t's planes into img, asking the hook before each. */
static enum codec_status read_units(TIFF *tif, struct tiff_io *io, const struct tinfo *t,
                                    struct codec_image *img, char *msg, size_t msglen) {
  int tiled = TIFFIsTiled(tif);
  uint32_t uw = t->w, uh = 0;
  if (tiled &&
      (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, &uw) || !TIFFGetField(tif, TIFFTAG_TILELENGTH, &uh)))
    uw = uh = 0;
  if (!tiled && !TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &uh)) uh = 0;
  if (uh > t->h) uh = t->h;
  tmsize_t size = tiled ? TIFFTileSize(tif) : TIFFStripSize(tif);
  if (uw == 0 || uh == 0 || size <= 0)
    return tiff_failure(io, "its strips or tiles are malformed", msg, msglen);
  uint8_t *buf = codec_malloc((size_t)size);
  if (buf == NULL) return CODEC_NOMEM;
  enum codec_status st = CODEC_OK;
  uint16_t planes = t->planar == PLANARCONFIG_SEPARATE ? t->spp : 1;
  for (uint16_t p = 0; p < planes && st == CODEC_OK; p++)
    for (uint32_t y = 0; y < t->h && st == CODEC_OK; y += uh)
      for (uint32_t x = 0; x < t->w && st == CODEC_OK; x += uw) {
        struct unit u = {x, y, uw, uh, p};
        uint32_t idx = tiled ? TIFFComputeTile(tif, x, y, 0, p) : TIFFComputeStrip(tif, y, p);
        if (codec_stopped())
          st = CODEC_CANCELLED;
        else
          st = read_unit(tif, io, t, tiled, idx, &u, buf, size, img, msg, msglen);
      }
  codec_free(buf);
  return st;
}

/* libtiff's RGBA interface (8-bit, premultiplied), a strip's rows at a time, into img (RGBA);
 * *alpha says whether the file has alpha. */
static enum codec_status read_rgba(TIFF *tif, struct tiff_io *io, const struct tinfo *t,
                                   struct codec_image *img, int *alpha, char *msg, size_t msglen) {
  char emsg[1024] = "";
  TIFFRGBAImage ri;
  if (!TIFFRGBAImageOK(tif, emsg) || !TIFFRGBAImageBegin(&ri, tif, 0, emsg)) {
    codec_msgf(msg, msglen, "TIFF of this kind is not supported (libtiff: %s)", emsg);
    return CODEC_UNSUPPORTED;
  }
  ri.req_orientation = t->orient; /* rows as stored: codec_orient turns them */
  *alpha = ri.alpha != 0;
  uint32_t rows = 0;
  if (!TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rows) || rows == 0 || rows > 256)
    rows = 64;
  uint32_t *raster = codec_malloc((size_t)t->w * rows * 4);
  enum codec_status st = raster ? CODEC_OK : CODEC_NOMEM;
  for (uint32_t y = 0; y < t->h && st == CODEC_OK; y += rows) {
    uint32_t n = t->h - y < rows ? t->h - y : rows;
    ri.row_offset = (int)y, ri.col_offset = 0;
    if (codec_stopped())
      st = CODEC_CANCELLED;
    else if (!TIFFRGBAImageGet(&ri, raster, t->w, n))
      st = tiff_failure(io, "its rows cannot be read", msg, msglen);
    for (uint32_t r = 0; st == CODEC_OK && r < n; r++)
      for (uint32_t x = 0; x < t->w; x++) {
        uint32_t v = raster[(size_t)r * t->w + x];
        uint8_t *p = img->pixels + (((size_t)(y + r)) * t->w + x) * 4;
        p[0] = (uint8_t)TIFFGetR(v), p[1] = (uint8_t)TIFFGetG(v), p[2] = (uint8_t)TIFFGetB(v);
        p[3] = (uint8_t)TIFFGetA(v);
      }
  }
  codec_free(raster);
  TIFFRGBAImageEnd(&ri);
  return st;
}

/* Packs RGBA pixels to RGB in place. */
static void drop_alpha(struct codec_image *img) {
  size_t n = (size_t)img->width * (size_t)img->height;
  for (size_t i = 0; i < n; i++) memmove(img->pixels + 3 * i, img->pixels + 4 * i, 3);
  img->channels = 3;
}

/* The pixels of t's directory into img (allocated here), before the orientation. */
static enum codec_status read_pixels(TIFF *tif, struct tiff_io *io, const struct tinfo *t,
                                     struct codec_image *img, char *msg, size_t msglen) {
  size_t n = (size_t)t->w * t->h * (size_t)t->channels * (size_t)(t->depth / 8);
  *img = (struct codec_image){NULL, (int)t->w, (int)t->h, t->channels, t->depth, CODEC_NONE, 1};
  if ((img->pixels = codec_malloc(n)) == NULL) return CODEC_NOMEM;
  memset(img->pixels, 0, n);               /* what a short or missing strip leaves */
  int alpha = t->alpha && t->colours != 4; /* CMYK's alpha is dropped */
  enum codec_status st = t->route == ROUTE_RGBA ? read_rgba(tif, io, t, img, &alpha, msg, msglen)
                                                : read_units(tif, io, t, img, msg, msglen);
  if (st == CODEC_OK && t->colours == 4)
    st = codec_cmyk_to_rgb(img->pixels, t->w, t->h, 0, t->icc, t->icc_len), img->channels = 3;
  if (st == CODEC_OK && (t->route == ROUTE_RGBA || t->assoc) && alpha) st = unpremultiply(img);
  if (st == CODEC_OK && t->route == ROUTE_RGBA && !alpha) drop_alpha(img);
  return st;
}

static enum codec_status tiff_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                     struct codec_image *out, char *msg, size_t msglen) {
  struct tiff_io io;
  struct tinfo t;
  *out = (struct codec_image){0};
  TIFF *tif = tiff_open(&io, buf, len, lim);
  if (tif == NULL) {
    if (io.err[0] == 0) snprintf(io.err, sizeof io.err, "out of memory");
    return tiff_failure(&io, "its header cannot be read", msg, msglen);
  }
  enum codec_status st = tiff_info(tif, lim, &t, msg, msglen);
  if (st == CODEC_OK) st = read_pixels(tif, &io, &t, out, msg, msglen);
  if (st == CODEC_OK) st = codec_orient(out, t.orient);
  TIFFClose(tif);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory decoding the TIFF image");
  if (st != CODEC_OK) {
    codec_image_free(out);
    return st;
  }
  out->orientation = t.orient;
  return CODEC_OK;
}

static int tiff_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  struct tiff_io io;
  struct tinfo t;
  TIFF *tif = tiff_open(&io, buf, len, NULL);
  if (tif == NULL) return -1;
  enum codec_status st = tiff_info(tif, NULL, &t, NULL, 0);
  if (st == CODEC_OK && t.route == ROUTE_RGBA) {
    char emsg[1024];
    TIFFRGBAImage ri;
    if (TIFFRGBAImageOK(tif, emsg) && TIFFRGBAImageBegin(&ri, tif, 0, emsg)) {
      t.channels = ri.alpha ? 4 : 3;
      TIFFRGBAImageEnd(&ri);
    } else {
      st = CODEC_UNSUPPORTED;
    }
  }
  TIFFClose(tif);
  if (st != CODEC_OK) return -1;
  int swap = t.orient >= 5, ch = t.colours == 4 ? 3 : t.channels;
  *out = (struct codec_shape){(int)(swap ? t.h : t.w), (int)(swap ? t.w : t.h), ch, t.depth};
  return 0;
}

static enum codec_status tiff_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len) {
  struct tiff_io io;
  *icc = NULL, *icc_len = 0;
  TIFF *tif = tiff_open(&io, buf, len, NULL);
  if (tif == NULL) return CODEC_OK;
  uint32_t n = 0;
  void *p = NULL;
  enum codec_status st = CODEC_OK;
  if (TIFFGetField(tif, TIFFTAG_ICCPROFILE, &n, &p) && p && n > 0 && n <= CODEC_ICC_MAX &&
      codec_icc_colours(p, n) > 0) {
    if ((*icc = codec_malloc(n)) == NULL)
      st = CODEC_NOMEM;
    else
      memcpy(*icc, p, n), *icc_len = n;
  }
  TIFFClose(tif);
  return st;
}

/* ---- the format's descriptor ---- */

/* Uncompressed pages by the TIFF terms, compressed ones (LZW, Deflate, JPEG, ...) by TIFFZ's. */
static double tiff_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  struct tiff_io io;
  TIFF *tif = tiff_open(&io, buf, len, NULL);
  int plain = tif != NULL && tag16(tif, TIFFTAG_COMPRESSION, COMPRESSION_NONE) == COMPRESSION_NONE;
  if (tif != NULL) TIFFClose(tif);
  double px = (double)s->width * s->height, alpha = s->channels == 2 || s->channels == 4 ? px : 0;
  if (!plain)
    return px * s->channels * COST_DECODE_TIFFZ_NS_SAMPLE +
           (double)len * COST_DECODE_TIFFZ_NS_BYTE + alpha * COST_DECODE_TIFFZ_NS_ALPHA;
  return px * s->channels * COST_DECODE_TIFF_NS_SAMPLE + (double)len * COST_DECODE_TIFF_NS_BYTE +
         alpha * COST_DECODE_TIFF_NS_ALPHA;
}

const struct codec_format_desc codec_tiff_format = {
    .name = "tiff",
    .title = "TIFF",
    .mime = "image/tiff",
    .mimes = "image/tiff-fx",
    .exts = "tif tiff",
    .lib = "libtiff",
    .reader = "libtiff",
    .as = CODEC_PNG,
    .sniff = tiff_sniff,
    .probe = tiff_probe,
    .decode = tiff_decode,
    .icc = tiff_icc,
    .decode_ns = tiff_decode_ns,
};

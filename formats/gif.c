/* gif.c: GIF input (giflib 5.2), the first frame only, from memory.
 *
 * giflib reads the file through a callback over the caller's buffer. The logical screen's size
 * (the screen descriptor) is checked against the limits as soon as the file is opened; then the
 * records up to the first image descriptor are read: a graphics control extension gives the
 * transparent index, an ICCRGBG1012 application extension the ICC profile. The frame is
 * checked against the limits too (giflib decodes all of it, even what lies off the screen),
 * the image is allocated at the screen's size and the frame's rows are decoded one at a time
 * (in the order of the four passes of an interlaced frame, each placed where it belongs) and
 * composed onto the screen, clipped to it, with the thread's cancellation hook asked every row.
 *
 * The image is 8-bit RGB when the frame covers the whole screen and has no transparent index;
 * otherwise RGBA, transparent (0, 0, 0, 0) where the frame is transparent or absent, as
 * browsers show the screen before the first frame (the background colour is not painted). A
 * screen of width or height 0 takes the first frame's extent. An index past the colour table is
 * opaque black. Animation is out of scope: the frames after the first are not read, so an
 * animated GIF gives its first frame; the file's remaining bytes are not checked. A file that
 * ends before the first frame's last row, or whose LZW data is damaged, is CODEC_CORRUPT. */
#include <gif_lib.h>
#include <string.h>

#include "formats.h"

/* GIF87a and GIF89a. The decoder gives the first frame composed onto the logical screen: 8-bit
 * RGB, or RGBA when the frame has a transparent index or leaves part of the screen uncovered; the
 * ICC reader the profile of an ICCRGBG1012 application extension before the first frame. */
static int gif_sniff(const uint8_t *buf, size_t len) {
  return buf != NULL && len >= 6 &&
         (memcmp(buf, "GIF87a", 6) == 0 || memcmp(buf, "GIF89a", 6) == 0);
}

struct gif_src { /* giflib's UserData: the file */
  const uint8_t *buf;
  size_t len, pos;
};

static int on_read(GifFileType *g, GifByteType *dst, int n) {
  struct gif_src *s = g->UserData;
  size_t k = n > 0 ? (size_t)n : 0;
  if (k > s->len - s->pos) k = s->len - s->pos;
  memcpy(dst, s->buf + s->pos, k);
  s->pos += k;
  return (int)k;
}

struct gif_head {       /* what comes before the first frame's pixels */
  int transparent;      /* the transparent index, or -1 */
  struct codec_buf icc; /* the ICC profile's bytes, when asked for */
  int icc_state;        /* 0: none yet; 1: reading one; 2: done */
};

static enum codec_status gif_failure(int err, char *msg, size_t msglen) {
  const char *why = GifErrorString(err);
  if (err == D_GIF_ERR_NOT_ENOUGH_MEM) {
    codec_msgf(msg, msglen, "out of memory decoding the GIF image");
    return CODEC_NOMEM;
  }
  codec_msgf(msg, msglen, "the GIF file is corrupt or truncated (giflib: %s)",
             why ? why : "unknown error");
  return CODEC_CORRUPT;
}

/* One extension record: a graphics control block's transparent index, an ICC profile's
 * sub-blocks when want_icc; the rest skipped. */
static int read_extension(GifFileType *g, struct gif_head *h, int want_icc) {
  int code;
  GifByteType *ext = NULL;
  if (DGifGetExtension(g, &code, &ext) != GIF_OK) return -1;
  if (code == GRAPHICS_EXT_FUNC_CODE && ext != NULL && ext[0] >= 4)
    h->transparent = (ext[1] & 1) ? ext[4] : -1;
  int icc = want_icc && code == APPLICATION_EXT_FUNC_CODE && h->icc_state == 0 && ext != NULL &&
            ext[0] == 11 && memcmp(ext + 1, "ICCRGBG1012", 11) == 0;
  if (icc) h->icc_state = 1;
  while (ext != NULL) {
    if (DGifGetExtensionNext(g, &ext) != GIF_OK) return -1;
    if (icc && ext != NULL && h->icc.len + ext[0] <= CODEC_ICC_MAX &&
        codec_buf_append(&h->icc, ext + 1, ext[0]) != CODEC_OK)
      return -2;
  }
  if (icc) h->icc_state = 2;
  return 0;
}

/* Reads records up to the first image descriptor (into g->Image). Returns CODEC_OK, or the
 * failure with a sentence. */
static enum codec_status read_head(GifFileType *g, struct gif_head *h, int want_icc, char *msg,
                                   size_t msglen) {
  GifRecordType type;
  h->transparent = -1;
  for (;;) {
    if (DGifGetRecordType(g, &type) != GIF_OK) return gif_failure(g->Error, msg, msglen);
    if (type == IMAGE_DESC_RECORD_TYPE) break;
    if (type == TERMINATE_RECORD_TYPE) {
      codec_msgf(msg, msglen, "the GIF file ends before its first image");
      return CODEC_CORRUPT;
    }
    int r = type == EXTENSION_RECORD_TYPE ? read_extension(g, h, want_icc) : 0;
    if (r == -2) return CODEC_NOMEM;
    if (r != 0) return gif_failure(g->Error, msg, msglen);
  }
  if (DGifGetImageDesc(g) != GIF_OK) return gif_failure(g->Error, msg, msglen);
  if (g->Image.Width <= 0 || g->Image.Height <= 0) {
    codec_msgf(msg, msglen, "the GIF file's first frame is empty");
    return CODEC_CORRUPT;
  }
  return CODEC_OK;
}

static GifFileType *gif_open(struct gif_src *src, char *msg, size_t msglen, enum codec_status *st) {
  int err = 0;
  GifFileType *g = DGifOpen(src, on_read, &err);
  *st = g != NULL ? CODEC_OK : gif_failure(err, msg, msglen);
  return g;
}

/* The screen's size: the descriptor's, or the first frame's extent when it gives 0. */
static void screen_size(const GifFileType *g, uint64_t *w, uint64_t *h) {
  const GifImageDesc *d = &g->Image;
  *w = g->SWidth > 0 ? (uint64_t)g->SWidth : (uint64_t)d->Left + (uint64_t)d->Width;
  *h = g->SHeight > 0 ? (uint64_t)g->SHeight : (uint64_t)d->Top + (uint64_t)d->Height;
}

/* Whether frame d covers the w x h screen. */
static int covers(const GifImageDesc *d, uint64_t w, uint64_t h) {
  return d->Left <= 0 && d->Top <= 0 && (uint64_t)d->Left + (uint64_t)d->Width >= w &&
         (uint64_t)d->Top + (uint64_t)d->Height >= h;
}

static int gif_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  struct gif_src src = {buf, len, 0};
  struct gif_head h = {0};
  enum codec_status st;
  GifFileType *g = gif_open(&src, NULL, 0, &st);
  if (g == NULL) return -1;
  st = read_head(g, &h, 0, NULL, 0);
  uint64_t w, hh;
  screen_size(g, &w, &hh);
  int alpha = h.transparent >= 0 || !covers(&g->Image, w, hh);
  DGifCloseFile(g, NULL);
  if (st != CODEC_OK || w == 0 || hh == 0 || w > INT32_MAX || hh > INT32_MAX) return -1;
  *out = (struct codec_shape){(int)w, (int)hh, alpha ? 4 : 3, 8};
  return 0;
}

/* The row of the frame that the i-th row decoded holds: in order, or by the passes of an
 * interlaced frame (every 8th row from 0, every 8th from 4, every 4th from 2, every 2nd from 1). */
static int frame_row(int i, int height, int interlaced) {
  static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
  if (!interlaced) return i;
  for (int p = 0; p < 4; p++) {
    int n = height > start[p] ? (height - start[p] + step[p] - 1) / step[p] : 0;
    if (i < n) return start[p] + i * step[p];
    i -= n;
  }
  return height - 1;
}

/* Composes one decoded row (line: w indices) of frame d onto the image. */
static void put_row(const GifImageDesc *d, const ColorMapObject *map, int transparent,
                    const GifPixelType *line, int y, struct codec_image *img) {
  int sy = d->Top + y, ch = img->channels;
  if (sy < 0 || sy >= img->height) return;
  uint8_t *row = img->pixels + (size_t)sy * (size_t)img->width * (size_t)ch;
  for (int x = 0; x < d->Width; x++) {
    int sx = d->Left + x, i = line[x];
    if (sx < 0 || sx >= img->width || i == transparent) continue;
    uint8_t *p = row + (size_t)sx * (size_t)ch;
    if (i < map->ColorCount)
      p[0] = map->Colors[i].Red, p[1] = map->Colors[i].Green, p[2] = map->Colors[i].Blue;
    else
      p[0] = p[1] = p[2] = 0;
    if (ch == 4) p[3] = 255;
  }
}

/* Decodes the frame g->Image onto img, a row at a time. */
static enum codec_status read_frame(GifFileType *g, int transparent, struct codec_image *img,
                                    char *msg, size_t msglen) {
  const GifImageDesc *d = &g->Image;
  const ColorMapObject *map = d->ColorMap ? d->ColorMap : g->SColorMap;
  if (map == NULL || map->Colors == NULL || map->ColorCount <= 0) {
    codec_msgf(msg, msglen, "the GIF file's first frame has no colour table");
    return CODEC_CORRUPT;
  }
  GifPixelType *line = codec_malloc((size_t)d->Width);
  if (line == NULL) return CODEC_NOMEM;
  enum codec_status st = CODEC_OK;
  for (int i = 0; i < d->Height && st == CODEC_OK; i++) {
    if (codec_stopped())
      st = CODEC_CANCELLED;
    else if (DGifGetLine(g, line, d->Width) != GIF_OK)
      st = gif_failure(g->Error, msg, msglen);
    else
      put_row(d, map, transparent, line, frame_row(i, d->Height, d->Interlace), img);
  }
  codec_free(line);
  return st;
}

/* Allocates img for g's screen, after the limit checks on the screen and the frame. */
static enum codec_status make_canvas(GifFileType *g, const struct gif_head *h,
                                     const struct codec_limits *lim, struct codec_image *img,
                                     char *msg, size_t msglen) {
  uint64_t w, hh;
  size_t nbytes;
  screen_size(g, &w, &hh);
  int alpha = h->transparent >= 0 || !covers(&g->Image, w, hh);
  enum codec_status st = codec_check_size((uint64_t)g->Image.Width, (uint64_t)g->Image.Height, 1,
                                          lim, &nbytes, msg, msglen);
  if (st == CODEC_OK) st = codec_check_size(w, hh, alpha ? 4 : 3, lim, &nbytes, msg, msglen);
  if (st != CODEC_OK) return st;
  img->pixels = codec_malloc(nbytes);
  if (img->pixels == NULL) {
    codec_msgf(msg, msglen, "out of memory for a %llux%llu GIF image", (unsigned long long)w,
               (unsigned long long)hh);
    return CODEC_NOMEM;
  }
  if (alpha) memset(img->pixels, 0, nbytes);
  img->width = (int)w, img->height = (int)hh, img->channels = alpha ? 4 : 3, img->depth = 8;
  img->format = CODEC_NONE, img->orientation = 1;
  return CODEC_OK;
}

static enum codec_status gif_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen) {
  struct gif_src src = {buf, len, 0};
  struct gif_head h = {0};
  struct codec_image img = {0};
  size_t nbytes;
  enum codec_status st;
  *out = (struct codec_image){0};
  GifFileType *g = gif_open(&src, msg, msglen, &st);
  if (g == NULL) return st;
  if (g->SWidth > 0 && g->SHeight > 0) /* the screen first: before any record is read */
    st = codec_check_size((uint64_t)g->SWidth, (uint64_t)g->SHeight, 3, lim, &nbytes, msg, msglen);
  if (st == CODEC_OK) st = read_head(g, &h, 0, msg, msglen);
  if (st == CODEC_OK) st = make_canvas(g, &h, lim, &img, msg, msglen);
  if (st == CODEC_OK) st = read_frame(g, h.transparent, &img, msg, msglen);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory decoding the GIF image");
  DGifCloseFile(g, NULL);
  if (st != CODEC_OK) {
    codec_free(img.pixels);
    return st;
  }
  *out = img;
  return CODEC_OK;
}

static enum codec_status gif_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len) {
  struct gif_src src = {buf, len, 0};
  struct gif_head h = {0};
  enum codec_status st;
  *icc = NULL, *icc_len = 0;
  GifFileType *g = gif_open(&src, NULL, 0, &st);
  if (g == NULL) return CODEC_OK;
  st = read_head(g, &h, 1, NULL, 0);
  DGifCloseFile(g, NULL);
  if (st == CODEC_NOMEM) {
    codec_free(h.icc.data);
    return CODEC_NOMEM;
  }
  if (h.icc_state == 2 && codec_icc_colours(h.icc.data, h.icc.len) > 0) {
    codec_buf_take(&h.icc, icc, icc_len);
    return CODEC_OK;
  }
  codec_free(h.icc.data);
  return CODEC_OK;
}

/* ---- the format's descriptor ---- */

static double gif_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  (void)buf;
  double px = (double)s->width * s->height, alpha = s->channels == 2 || s->channels == 4 ? px : 0;
  return px * s->channels * COST_DECODE_GIF_NS_SAMPLE + (double)len * COST_DECODE_GIF_NS_BYTE +
         alpha * COST_DECODE_GIF_NS_ALPHA;
}

const struct codec_format_desc codec_gif_format = {
    .name = "gif",
    .title = "GIF",
    .mime = "image/gif",
    .mimes = "",
    .exts = "gif",
    .lib = "giflib",
    .reader = "giflib (the first frame)",
    .as = CODEC_PNG,
    .sniff = gif_sniff,
    .probe = gif_probe,
    .decode = gif_decode,
    .icc = gif_icc,
    .decode_ns = gif_decode_ns,
};

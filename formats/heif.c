/* heif.c: HEIC and AVIF input through libheif: the ftyp sniffs, the probe, the decode and the
 * ICC profile (the colr box's, or one made from its nclx code points). libheif checks the file;
 * the primary image is then decoded by the tile path (heif_box.c, heif_tiles.c) or, where that
 * path does not decode it, by libheif itself. Also the HEIC format descriptor. */
#include <lcms2.h>
#include <libheif/heif.h>
#include <string.h>

#include "heif_int.h"

/* ---- sniffing: the ftyp box's brands ---- */

enum heif_kind { KIND_NONE, KIND_HEIC, KIND_AVIF };

static enum heif_kind brand_kind(uint32_t b) {
  static const char *heic[] = {"heic", "heix", "hevc", "hevx", "heim", "heis"};
  for (size_t i = 0; i < sizeof heic / sizeof heic[0]; i++)
    if (b == FOURCC(heic[i])) return KIND_HEIC;
  return b == FOURCC("avif") || b == FOURCC("avis") ? KIND_AVIF : KIND_NONE;
}

/* HEIC or AVIF from the ftyp box: its major brand, else its compatible brands; a file that
 * names only the structural brands mif1 or msf1 by the codec configuration it carries (hvcC or
 * av1C within its first 64 KiB). */
static enum heif_kind ftyp_kind(const uint8_t *buf, size_t len) {
  if (buf == NULL || len < 16 || memcmp(buf + 4, "ftyp", 4) != 0) return KIND_NONE;
  size_t size = codec_be32(buf);
  if (size < 16) return KIND_NONE;
  if (size > len) size = len;
  enum heif_kind k = brand_kind(codec_be32(buf + 8));
  int mif = 0;
  for (size_t p = 16; k == KIND_NONE && p + 4 <= size; p += 4) {
    uint32_t b = codec_be32(buf + p);
    k = brand_kind(b);
    mif |= b == FOURCC("mif1") || b == FOURCC("msf1");
  }
  if (k != KIND_NONE || !mif) return k;
  size_t scan = len < 65536 ? len : 65536;
  if (memmem(buf, scan, "hvcC", 4) != NULL) return KIND_HEIC;
  return memmem(buf, scan, "av1C", 4) != NULL ? KIND_AVIF : KIND_NONE;
}

int codec_heic_sniff(const uint8_t *buf, size_t len) {
  return ftyp_kind(buf, len) == KIND_HEIC;
}

int codec_avif_sniff(const uint8_t *buf, size_t len) {
  return ftyp_kind(buf, len) == KIND_AVIF;
}

/* ---- the decoder ---- */

struct hctx { /* libheif's view of the file */
  struct heif_context *ctx;
  struct heif_image_handle *handle;
};

static void hctx_close(struct hctx *h) {
  if (h->handle) heif_image_handle_release(h->handle);
  if (h->ctx) heif_context_free(h->ctx);
  h->handle = NULL, h->ctx = NULL;
}

/* A libheif error as a codec status, with a sentence. */
static enum codec_status heif_failure(struct heif_error e, char *msg, size_t msglen) {
  const char *text = e.message && e.message[0] ? e.message : "no detail";
  switch (e.code) {
  case heif_error_Memory_allocation_error:
    if (e.subcode == heif_suberror_Security_limit_exceeded) {
      codec_msgf(msg, msglen, "the HEIF image is larger than the limits (libheif: %s)", text);
      return CODEC_TOO_LARGE;
    }
    codec_msgf(msg, msglen, "out of memory decoding the HEIF image (libheif: %s)", text);
    return CODEC_NOMEM;
  case heif_error_Unsupported_filetype:
  case heif_error_Unsupported_feature:
    codec_msgf(msg, msglen, "the HEIF file uses a feature that is not supported (libheif: %s)",
               text);
    return CODEC_UNSUPPORTED;
  default:
    codec_msgf(msg, msglen, "the HEIF file is corrupt or truncated (libheif: %s)", text);
    return CODEC_CORRUPT;
  }
}

/* libheif's context over buf, its security limit the largest side lim allows (plus one:
 * libheif refuses a grid as wide as its limit), and the primary image's handle. */
static enum codec_status hctx_open(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct hctx *h, char *msg, size_t msglen) {
  *h = (struct hctx){0};
  if ((h->ctx = heif_context_alloc()) == NULL) {
    codec_msgf(msg, msglen, "out of memory reading the HEIF file");
    return CODEC_NOMEM;
  }
  uint32_t side = lim ? (lim->max_width > lim->max_height ? lim->max_width : lim->max_height) : 0;
  if (side > 0 && side < 32768) heif_context_set_maximum_image_size_limit(h->ctx, (int)side + 1);
  struct heif_error e = heif_context_read_from_memory_without_copy(h->ctx, buf, len, NULL);
  if (e.code == heif_error_Ok) e = heif_context_get_primary_image_handle(h->ctx, &h->handle);
  if (e.code == heif_error_Ok) return CODEC_OK;
  enum codec_status st = heif_failure(e, msg, msglen); /* e.message is the context's */
  hctx_close(h);
  return st;
}

static void plan_free(struct hplan *p) {
  codec_free(p->col.tiles), codec_free(p->alpha.tiles);
  p->col.tiles = p->alpha.tiles = NULL;
}

/* The plan for f's primary image: CODEC_OK (p->libheif set when libheif must decode it), or a
 * failure with a sentence. want_alpha is libheif's view. What the tile path checks but does not
 * decode is libheif's: a 'clap' crop, a YCgCo or chromaticity-derived matrix, an alpha plane of
 * another size or codec than the colour's. */
static enum codec_status plan_make(const struct hfile *f, int want_alpha,
                                   const struct codec_limits *lim, struct hplan *p, char *msg,
                                   size_t msglen) {
  *p = (struct hplan){0};
  /* The stored pictures against the limits either way round: the upright size is checked
   * exactly, from libheif's, before this. */
  uint32_t side = lim ? (lim->max_width == 0 || lim->max_height == 0 ? 0
                         : lim->max_width > lim->max_height          ? lim->max_width
                                                                     : lim->max_height)
                      : 0;
  struct codec_limits sym = {side, side, lim ? lim->max_pixels : 0};
  lim = &sym;
  enum codec_status st = hf_layout(f, f->primary, lim, &p->col, msg, msglen);
  if (st != CODEC_OK) return st;
  int crop;
  hf_orientation(f, hf_item(f, f->primary), &crop);
  const struct hitem *first = hf_item(f, p->col.tiles[0]);
  int m, full, kk = hf_nclx(f, first, &m, &full) ? (hf_coeffs(m, full, &p->k) ? 1 : -1) : 0;
  p->has_k = kk == 1;
  uint32_t a = want_alpha ? hf_alpha(f, f->primary) : 0;
  if (a != 0) {
    st = hf_layout(f, a, lim, &p->alpha, msg, msglen);
    if (st != CODEC_OK) return st;
    p->has_alpha = 1;
  }
  p->libheif =
      crop || kk < 0 || (want_alpha && !p->has_alpha) ||
      (p->has_alpha && (p->alpha.width != p->col.width || p->alpha.height != p->col.height ||
                        p->alpha.codec != p->col.codec));
  p->channels = p->has_alpha ? 4 : 3;
  p->depth = p->col.bits > 8 || (p->has_alpha && p->alpha.bits > 8) ? 16 : 8;
  return CODEC_OK;
}

/* libheif's own decode of h's primary image into out, transforms applied, whole and on its own
 * threads: it asks no hook, so the caller asks before and after. */
static enum codec_status libheif_decode(struct hctx *h, int alpha, int depth, int threads,
                                        const struct codec_limits *lim, struct codec_image *out,
                                        char *msg, size_t msglen) {
  enum heif_chroma chroma =
      depth == 8
          ? (alpha ? heif_chroma_interleaved_RGBA : heif_chroma_interleaved_RGB)
          : (alpha ? heif_chroma_interleaved_RRGGBBAA_LE : heif_chroma_interleaved_RRGGBB_LE);
  struct heif_image *img = NULL;
  heif_context_set_max_decoding_threads(h->ctx, threads);
  struct heif_error e = heif_decode_image(h->handle, &img, heif_colorspace_RGB, chroma, NULL);
  if (e.code != heif_error_Ok) return heif_failure(e, msg, msglen);
  int w = heif_image_get_width(img, heif_channel_interleaved);
  int hh = heif_image_get_height(img, heif_channel_interleaved);
  int bits = heif_image_get_bits_per_pixel_range(img, heif_channel_interleaved), stride;
  const uint8_t *src = heif_image_get_plane_readonly(img, heif_channel_interleaved, &stride);
  int ch = alpha ? 4 : 3, max = (1 << (bits > 8 ? bits : 8)) - 1;
  size_t nbytes, row = (size_t)w * (size_t)ch * (size_t)(depth / 8);
  enum codec_status st = codec_check_size(w > 0 ? (uint64_t)w : 0, hh > 0 ? (uint64_t)hh : 0,
                                          (unsigned)(ch * depth / 8), lim, &nbytes, msg, msglen);
  if (st == CODEC_OK && (w != heif_image_handle_get_width(h->handle) ||
                         hh != heif_image_handle_get_height(h->handle))) {
    codec_msgf(msg, msglen, "the HEIF image decodes to %dx%d where its header says %dx%d", w, hh,
               heif_image_handle_get_width(h->handle), heif_image_handle_get_height(h->handle));
    st = CODEC_CORRUPT;
  }
  uint8_t *px = st == CODEC_OK && src ? codec_malloc(nbytes) : NULL;
  if (st == CODEC_OK && px == NULL) st = CODEC_NOMEM;
  for (int y = 0; st == CODEC_OK && y < hh; y++) {
    if (codec_stopped()) st = CODEC_CANCELLED;
    const uint8_t *s = src + (ptrdiff_t)y * stride;
    if (depth == 8)
      memcpy(px + (size_t)y * row, s, row);
    else
      for (size_t x = 0; x < row / 2; x++)
        ((uint16_t *)(void *)(px + (size_t)y * row))[x] =
            hf_to16(s[2 * x] | s[2 * x + 1] << 8, max);
  }
  heif_image_release(img);
  if (st != CODEC_OK) {
    codec_free(px);
    if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory for a HEIF image");
    return st;
  }
  *out = (struct codec_image){px, w, hh, ch, depth, CODEC_NONE, 1};
  return CODEC_OK;
}

/* The tile path for h's file. *libheif is set, with CODEC_UNSUPPORTED, when libheif must decode
 * it instead (its pictures checked as this path checks them); *orientation is set from the
 * primary item's transforms when they could be read. */
static enum codec_status tile_decode(const uint8_t *buf, size_t len, struct hctx *h, int threads,
                                     const struct codec_limits *lim, struct codec_image *out,
                                     int *orientation, int *libheif, char *msg, size_t msglen) {
  struct hfile f;
  struct hplan p = {0};
  *libheif = 0;
  if (hf_parse(&f, buf, len) != 0) {
    codec_msgf(msg, msglen, "the HEIF file's item boxes are malformed");
    return CODEC_CORRUPT;
  }
  enum codec_status st = CODEC_CORRUPT;
  const struct hitem *prim = hf_item(&f, f.primary);
  heif_item_id id = 0;
  heif_context_get_primary_image_ID(h->ctx, &id);
  if (prim == NULL || f.primary != id) {
    codec_msgf(msg, msglen, "the HEIF file's primary item is missing");
  } else {
    int crop;
    *orientation = hf_orientation(&f, prim, &crop);
    st = plan_make(&f, heif_image_handle_has_alpha_channel(h->handle), lim, &p, msg, msglen);
  }
  int swap = *orientation >= 5;
  if (st == CODEC_OK &&
      ((swap ? p.col.height : p.col.width) != heif_image_handle_get_width(h->handle) ||
       (swap ? p.col.width : p.col.height) != heif_image_handle_get_height(h->handle)))
    p.libheif = 1; /* libheif sees another size: its decode decides */
  if (st == CODEC_OK && p.libheif &&
      (!hf_pictures_ok(&f, &p.col) || !hf_pictures_ok(&f, &p.alpha))) {
    codec_msgf(msg, msglen, "a HEIF picture is missing, lies outside the file or does not decode");
    st = CODEC_CORRUPT;
  }
  if (st == CODEC_OK && !p.libheif) {
    p.threads = threads;
    st = hf_decode_tiles(&f, &p, lim, out, msg, msglen);
    p.libheif = st == CODEC_UNSUPPORTED; /* a picture's colour matrix */
  }
  if (st == CODEC_OK && p.libheif) st = CODEC_UNSUPPORTED;
  *libheif = p.libheif;
  plan_free(&p);
  hf_free(&f);
  return st;
}

/* libheif reads the file first: it checks the structure, and every item's size against its
 * security limit (set from lim); the upright size is checked against lim. Then the tile path
 * decodes it, or leaves it to libheif's own decode. Either way the output is 8-bit RGB, or RGBA
 * with an alpha plane, 10 or 12 bits as 16-bit samples scaled to the full range; irot and imir
 * are applied and out->orientation is the EXIF value they amount to. */
enum codec_status codec_heif_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen) {
  struct hctx h;
  *out = (struct codec_image){0};
  codec_msgf(msg, msglen, "%s", "");
  enum codec_status st = hctx_open(buf, len, lim, &h, msg, msglen);
  if (st != CODEC_OK) return st;
  int w = heif_image_handle_get_width(h.handle), hh = heif_image_handle_get_height(h.handle);
  int alpha = heif_image_handle_has_alpha_channel(h.handle);
  int bits = heif_image_handle_get_luma_bits_per_pixel(h.handle);
  int depth = bits > 8 ? 16 : 8, o = 1, lh = 0;
  size_t nbytes;
  st = codec_check_size(w > 0 ? (uint64_t)w : 0, hh > 0 ? (uint64_t)hh : 0,
                        (unsigned)((alpha ? 4 : 3) * depth / 8), lim, &nbytes, msg, msglen);
  if (st == CODEC_OK && bits <= 0) { /* as the probe: libheif cannot read its configuration */
    codec_msgf(msg, msglen, "the HEIF image's coding configuration is malformed");
    st = CODEC_CORRUPT;
  }
  if (st == CODEC_OK && codec_stopped()) st = CODEC_CANCELLED;
  int threads = hf_threads_begin();
  if (st == CODEC_OK) st = tile_decode(buf, len, &h, threads, lim, out, &o, &lh, msg, msglen);
  if (st == CODEC_OK) {
    st = codec_orient(out, o);
    if (st != CODEC_OK) codec_image_free(out);
    if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory turning the HEIF image");
  } else if (st == CODEC_UNSUPPORTED && lh) {
    codec_msgf(msg, msglen, "%s", "");
    st = libheif_decode(&h, alpha, depth, threads, lim, out, msg, msglen);
  }
  if (st == CODEC_OK && codec_stopped()) st = CODEC_CANCELLED, codec_image_free(out);
  if (st == CODEC_OK) out->orientation = o;
  hf_threads_end();
  if (st != CODEC_OK && msg && msglen && msg[0] == 0) /* every failure has its sentence */
    codec_msgf(msg, msglen, "HEIF: %s", codec_status_msg(st));
  hctx_close(&h);
  return st;
}

/* ---- the coded pictures, for a video decoder ---- */

/* Appends count NAL units of r (size-byte lengths) to dst + *n, each after a start code (dst
 * NULL: counts the bytes only). Returns 0, or -1 when one runs past the end. */
static int annexb(struct rd *r, unsigned size, uint64_t count, uint8_t *dst, size_t *n) {
  for (uint64_t i = 0; i < count && r->n > 0; i++) {
    uint64_t k = rd_uint(r, size);
    if (r->bad || k > r->n) return -1;
    if (dst) memcpy(dst + *n, "\0\0\0\1", 4), memcpy(dst + *n + 4, r->p, (size_t)k);
    *n += 4 + (size_t)k;
    r->p += k, r->n -= (size_t)k;
  }
  return r->bad ? -1 : 0;
}

/* Picture it as Annex B (its hvcC's arrays, then its data) at dst + *n (NULL: counts). Returns 0,
 * or -1 when it has no hvcC, its data cannot be read, or it holds no NAL unit. */
static int picture_annexb(const struct hfile *f, const struct hitem *it, uint8_t *dst, size_t *n) {
  struct span conf, data;
  uint8_t *owned = NULL;
  if (hf_prop(f, it, FOURCC("hvcC"), &conf) != 0 || conf.n < 23 ||
      hf_data(f, it, &data, &owned) != CODEC_OK)
    return -1;
  struct rd r = {conf.p + 22, conf.n - 22, 0}, d = {data.p, data.n, 0};
  uint64_t arrays = rd_uint(&r, 1);
  int bad = 0;
  for (uint64_t a = 0; a < arrays && !bad; a++) {
    rd_uint(&r, 1);
    bad = annexb(&r, 2, rd_uint(&r, 2), dst, n) != 0;
  }
  size_t before = *n; /* the picture's own NAL units: at least one */
  bad = bad || annexb(&d, (conf.p[21] & 3) + 1u, UINT64_MAX, dst, n) != 0 || *n == before;
  codec_free(owned);
  return bad ? -1 : 0;
}

/* The most stream bytes a picture may bring beyond the file's: its configuration's copy. */
#define CONF_BYTES 512

/* The stream of p's colour pictures into out (its size known). CODEC_UNSUPPORTED when the
 * stream would be larger than twice the file plus CONF_BYTES a picture: pictures that share
 * their data (a file's stream can otherwise be 4096 times its size), which the CPU decodes
 * picture by picture. Counting stops there, so its time is bounded by the file's size too. */
static enum codec_status pictures_stream(const struct hfile *f, const struct hplan *p,
                                         struct codec_pictures *out) {
  int n = p->col.rows * p->col.cols;
  size_t total = 0, most = 2 * f->len + (size_t)n * CONF_BYTES;
  for (int i = 0; i < n; i++) {
    const struct hitem *it = hf_item(f, p->col.tiles[i]);
    if (it == NULL || picture_annexb(f, it, NULL, &total) != 0) return CODEC_CORRUPT;
    if (total > most) return CODEC_UNSUPPORTED;
  }
  out->pic = codec_malloc((size_t)n * sizeof *out->pic);
  out->stream = codec_malloc(total ? total : 1);
  if (out->pic == NULL || out->stream == NULL) return CODEC_NOMEM;
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    size_t from = at;
    picture_annexb(f, hf_item(f, p->col.tiles[i]), out->stream, &at);
    out->pic[i] = (struct codec_picture){from, at - from, i % p->col.cols * p->col.tile_w,
                                         i / p->col.cols * p->col.tile_h};
  }
  out->n = n;
  return CODEC_OK;
}

/* HEIC's pictures verb: what codec_heif_decode checks first (libheif's reading, the limits),
 * then its tile path's plan, when that plan is its colour pictures alone. */
static enum codec_status heic_pictures(const uint8_t *buf, size_t len,
                                       const struct codec_limits *lim, struct codec_pictures *out,
                                       const char **why) {
  struct hctx h;
  struct hfile f = {0};
  struct hplan p = {0};
  size_t nbytes;
  *out = (struct codec_pictures){0};
  *why = NULL;
  enum codec_status st = hctx_open(buf, len, lim, &h, NULL, 0);
  if (st != CODEC_OK) return st;
  int w = heif_image_handle_get_width(h.handle), hh = heif_image_handle_get_height(h.handle);
  int alpha = heif_image_handle_has_alpha_channel(h.handle);
  int bits = heif_image_handle_get_luma_bits_per_pixel(h.handle);
  st = codec_check_size(w > 0 ? (uint64_t)w : 0, hh > 0 ? (uint64_t)hh : 0,
                        (unsigned)((alpha ? 4 : 3) * (bits > 8 ? 2 : 1)), lim, &nbytes, NULL, 0);
  if (st == CODEC_OK && (bits <= 0 || hf_parse(&f, buf, len) != 0)) st = CODEC_CORRUPT;
  heif_item_id id = 0;
  heif_context_get_primary_image_ID(h.ctx, &id);
  const struct hitem *prim = st == CODEC_OK ? hf_item(&f, f.primary) : NULL;
  if (st == CODEC_OK && (prim == NULL || f.primary != id)) st = CODEC_CORRUPT;
  int crop = 0;
  if (st == CODEC_OK) out->orientation = hf_orientation(&f, prim, &crop);
  if (st == CODEC_OK) st = plan_make(&f, alpha, lim, &p, NULL, 0);
  int swap = out->orientation >= 5;
  if (st == CODEC_OK) {
    if (alpha)
      *why = "an alpha plane";
    else if (crop)
      *why = "a crop (clap)";
    else if (p.col.codec != FOURCC("hvc1"))
      *why = "pictures that are not HEVC";
    else if (p.libheif || (swap ? p.col.height : p.col.width) != w ||
             (swap ? p.col.width : p.col.height) != hh)
      *why = "a colour matrix or size that libheif decodes";
    st = *why ? CODEC_UNSUPPORTED : pictures_stream(&f, &p, out);
    if (st == CODEC_UNSUPPORTED && !*why) *why = "pictures that share their data";
  } else if (st == CODEC_UNSUPPORTED) {
    *why = "an item type or grid that libheif decodes"; /* hf_layout's: not 'grid' of one kind */
  }
  if (st == CODEC_OK) {
    out->width = p.col.width, out->height = p.col.height;
    out->tile_w = p.col.tile_w, out->tile_h = p.col.tile_h;
    out->bits = p.col.bits;
    out->has_k = p.has_k, out->k = p.k;
    out->coeffs = hf_coeffs;
  } else {
    codec_pictures_free(out);
  }
  plan_free(&p);
  hf_free(&f);
  hctx_close(&h);
  return st;
}

int codec_heif_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  struct hctx h;
  if (hctx_open(buf, len, NULL, &h, NULL, 0) != CODEC_OK) return -1;
  int w = heif_image_handle_get_width(h.handle), hh = heif_image_handle_get_height(h.handle);
  int bits = heif_image_handle_get_luma_bits_per_pixel(h.handle);
  *out = (struct codec_shape){w, hh, heif_image_handle_has_alpha_channel(h.handle) ? 4 : 3,
                              bits > 8 ? 16 : 8};
  hctx_close(&h);
  return w > 0 && hh > 0 && bits > 0 ? 0 : -1;
}

/* ---- colour profiles ---- */

/* An ICC profile for nclx primaries and transfer, or NULL for others (PQ, HLG, unspecified,
 * primaries other than BT.709, Display P3 and BT.2020). */
static cmsHPROFILE nclx_profile(int prim, int trc) {
  static const cmsCIExyYTRIPLE primaries[3] = {
      {{0.640, 0.330, 1}, {0.300, 0.600, 1}, {0.150, 0.060, 1}}, /* BT.709 / sRGB */
      {{0.680, 0.320, 1}, {0.265, 0.690, 1}, {0.150, 0.060, 1}}, /* Display P3 */
      {{0.708, 0.292, 1}, {0.170, 0.797, 1}, {0.131, 0.046, 1}}, /* BT.2020 */
  };
  const cmsCIExyY d65 = {0.3127, 0.3290, 1};
  int pi = prim == 1 ? 0 : prim == 12 ? 1 : prim == 9 ? 2 : -1;
  /* Parametric curves, type 4: Y = (aX + b)^g for X >= d, else cX. */
  cmsFloat64Number srgb[5] = {2.4, 1 / 1.055, 0.055 / 1.055, 1 / 12.92, 0.04045};
  cmsFloat64Number bt709[5] = {1 / 0.45, 1 / 1.099, 0.099 / 1.099, 1 / 4.5, 0.081};
  cmsToneCurve *c = NULL;
  if (trc == 13)
    c = cmsBuildParametricToneCurve(NULL, 4, srgb);
  else if (trc == 1 || trc == 6 || trc == 14 || trc == 15)
    c = cmsBuildParametricToneCurve(NULL, 4, bt709);
  else if (trc == 8 || trc == 4 || trc == 5)
    c = cmsBuildGamma(NULL, trc == 8 ? 1.0 : trc == 4 ? 2.2 : 2.8);
  if (pi < 0 || c == NULL) {
    if (c) cmsFreeToneCurve(c);
    return NULL;
  }
  cmsToneCurve *curves[3] = {c, c, c};
  cmsHPROFILE p = cmsCreateRGBProfile(&d65, &primaries[pi], curves);
  cmsFreeToneCurve(c);
  return p;
}

/* Writes profile p (freed here) to a malloc'd buffer with a description. */
static enum codec_status profile_bytes(cmsHPROFILE p, const char *desc, uint8_t **icc,
                                       size_t *icc_len) {
  cmsMLU *mlu = cmsMLUalloc(NULL, 1);
  cmsUInt32Number n = 0;
  if (mlu) cmsMLUsetASCII(mlu, "en", "US", desc), cmsWriteTag(p, cmsSigProfileDescriptionTag, mlu);
  if (mlu) cmsMLUfree(mlu);
  if (!cmsSaveProfileToMem(p, NULL, &n) || n == 0) {
    cmsCloseProfile(p);
    return CODEC_NOMEM;
  }
  *icc = codec_malloc(n);
  if (*icc != NULL && !cmsSaveProfileToMem(p, *icc, &n)) codec_free(*icc), *icc = NULL;
  cmsCloseProfile(p);
  if (*icc == NULL) return CODEC_NOMEM;
  *icc_len = n;
  return CODEC_OK;
}

static enum codec_status nclx_icc(const struct heif_color_profile_nclx *n, uint8_t **icc,
                                  size_t *icc_len) {
  static const char *names[] = {"sRGB/BT.709", "Display P3", "BT.2020"};
  int prim = (int)n->color_primaries, trc = (int)n->transfer_characteristics;
  cmsHPROFILE p = nclx_profile(prim, trc);
  if (p == NULL) return CODEC_OK;
  char desc[96];
  snprintf(desc, sizeof desc, "%s primaries, transfer %d (from the HEIF nclx colour)",
           names[prim == 1    ? 0
                 : prim == 12 ? 1
                              : 2],
           trc);
  return profile_bytes(p, desc, icc, icc_len);
}

/* The colr ICC profile as stored, or one made from its nclx code points; PQ, HLG and the
 * primaries and transfers nclx_profile does not name have none. */
enum codec_status codec_heif_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len) {
  struct hctx h;
  *icc = NULL, *icc_len = 0;
  if (hctx_open(buf, len, NULL, &h, NULL, 0) != CODEC_OK) return CODEC_OK;
  enum codec_status st = CODEC_OK;
  enum heif_color_profile_type t = heif_image_handle_get_color_profile_type(h.handle);
  struct heif_color_profile_nclx *nclx = NULL;
  size_t n = heif_image_handle_get_raw_color_profile_size(h.handle);
  if ((t == heif_color_profile_type_prof || t == heif_color_profile_type_rICC) && n > 0 &&
      n <= CODEC_ICC_MAX) {
    *icc = codec_malloc(n);
    if (*icc == NULL)
      st = CODEC_NOMEM;
    else if (heif_image_handle_get_raw_color_profile(h.handle, *icc).code != heif_error_Ok)
      codec_free(*icc), *icc = NULL;
    else
      *icc_len = n;
  } else {
    /* libheif hands over the profile even when it refuses one of its code points */
    if (heif_image_handle_get_nclx_color_profile(h.handle, &nclx).code == heif_error_Ok)
      st = nclx_icc(nclx, icc, icc_len);
    if (nclx) heif_nclx_color_profile_free(nclx);
  }
  hctx_close(&h);
  return st;
}

/* ---- the format's descriptor ---- */

/* HEIC and AVIF share the box reader and the decode; what tells them apart is the sniff. */
static double heic_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  (void)buf;
  double px = (double)s->width * s->height, alpha = s->channels == 2 || s->channels == 4 ? px : 0;
  return px * s->channels * COST_DECODE_HEIC_NS_SAMPLE + (double)len * COST_DECODE_HEIC_NS_BYTE +
         alpha * COST_DECODE_HEIC_NS_ALPHA;
}

const struct codec_format_desc codec_heic_format = {
    .name = "heic",
    .title = "HEIC",
    .mime = "image/heic",
    .mimes = "image/heif image/heic-sequence image/heif-sequence",
    .exts = "heic heif hif",
    .lib = "libheif",
    .reader = "libheif, libde265",
    .as = CODEC_JPEG,
    .sniff = codec_heic_sniff,
    .probe = codec_heif_probe,
    .decode = codec_heif_decode,
    .icc = codec_heif_icc,
    .decode_ns = heic_decode_ns,
    .pictures = heic_pictures,
};

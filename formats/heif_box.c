/* heif_box.c: reads a HEIF file's boxes for heif.c's tile path: the meta box's items, locations,
 * references and properties, every span bounded by the file; from them an item's data, its
 * orientation and alpha item, and the layout of an image (one coded picture or a grid of them),
 * checked against the limits and against a decompression bomb. */
#include <stdlib.h>
#include <string.h>

#include "heif_int.h"

#define MAX_TILES   4096 /* tiles in a grid; 48 for a 12 MP phone photograph */
#define MAX_EXTENTS 32   /* extents of one item's data */

/* ---- reading boxes ---- */

/* Takes the box at the start of *in: its type and body; a size of 0 runs to the end of *in.
 * Returns 0, or -1 when the header or the body does not fit. */
static int box_take(struct span *in, uint32_t *type, struct span *body) {
  if (in->n < 8) return -1;
  uint64_t size = codec_be32(in->p), hdr = 8;
  *type = codec_be32(in->p + 4);
  if (size == 1) {
    if (in->n < 16) return -1;
    size = (uint64_t)codec_be32(in->p + 8) << 32 | codec_be32(in->p + 12);
    hdr = 16;
  } else if (size == 0) {
    size = in->n;
  }
  if (size < hdr || size > in->n) return -1;
  *body = (struct span){in->p + hdr, (size_t)(size - hdr)};
  in->p += size, in->n -= (size_t)size;
  return 0;
}

void hf_free(struct hfile *f) {
  codec_free(f->items), codec_free(f->props), codec_free(f->prop_type);
  f->items = NULL, f->props = NULL, f->prop_type = NULL;
}

static int item_cmp(const void *a, const void *b) {
  uint32_t x = ((const struct hitem *)a)->id, y = ((const struct hitem *)b)->id;
  return x < y ? -1 : x > y;
}

struct hitem *hf_item(const struct hfile *f, uint32_t id) {
  struct hitem key = {.id = id};
  return bsearch(&key, f->items, f->nitems, sizeof key, item_cmp);
}

/* How many boxes the span holds, or -1 when one does not fit. */
static long count_boxes(struct span s) {
  long n = 0;
  uint32_t t;
  struct span body;
  while (s.n > 0) {
    if (box_take(&s, &t, &body) != 0) return -1;
    n++;
  }
  return n;
}

/* iinf: the items' IDs and types, sorted by ID (IDs must differ). */
static int parse_iinf(struct hfile *f, struct span s) {
  struct rd r = {s.p, s.n, 0};
  int version = (int)rd_uint(&r, 4) >> 24;
  rd_uint(&r, version == 0 ? 2 : 4); /* entry_count: the boxes that follow are counted instead */
  struct span kids = {r.p, r.n};
  long n = r.bad ? -1 : count_boxes(kids);
  if (n <= 0) return -1;
  f->items = codec_malloc((size_t)n * sizeof *f->items);
  if (f->items == NULL) return -1;
  uint32_t t;
  struct span body;
  while (box_take(&kids, &t, &body) == 0) {
    if (t != FOURCC("infe")) continue;
    struct rd e = {body.p, body.n, 0};
    int v = (int)(rd_uint(&e, 4) >> 24);
    struct hitem it = {0};
    it.id = (uint32_t)rd_uint(&e, v >= 3 ? 4 : 2);
    rd_uint(&e, 2); /* item_protection_index */
    if (v >= 2) it.type = (uint32_t)rd_uint(&e, 4);
    if (e.bad) return -1;
    f->items[f->nitems++] = it;
  }
  qsort(f->items, f->nitems, sizeof *f->items, item_cmp);
  for (size_t i = 1; i < f->nitems; i++)
    if (f->items[i].id == f->items[i - 1].id) return -1;
  return 0;
}

/* Skips one iloc entry's fields after the item_ID; returns -1 past the end. */
static int skip_loc(const struct hfile *f, struct rd *r) {
  if (f->iloc_version >= 1) rd_uint(r, 2); /* construction_method */
  rd_uint(r, 2);                           /* data_reference_index */
  rd_uint(r, (unsigned)f->base_size);
  uint64_t n = rd_uint(r, 2);
  size_t each = (size_t)(f->idx_size + f->off_size + f->len_size);
  if (r->bad || n * each > r->n) return -1;
  r->p += n * each, r->n -= n * each;
  return 0;
}

static int valid_size(int s) {
  return s == 0 || s == 4 || s == 8;
}

/* iloc: where each item's data lies. */
static int parse_iloc(struct hfile *f, struct span s) {
  struct rd r = {s.p, s.n, 0};
  f->iloc_version = (int)(rd_uint(&r, 4) >> 24);
  unsigned a = (unsigned)rd_uint(&r, 1), b = (unsigned)rd_uint(&r, 1);
  f->off_size = (int)(a >> 4), f->len_size = (int)(a & 15), f->base_size = (int)(b >> 4);
  f->idx_size = f->iloc_version >= 1 ? (int)(b & 15) : 0;
  if (f->iloc_version > 2 || !valid_size(f->off_size) || !valid_size(f->len_size) ||
      !valid_size(f->base_size) || !valid_size(f->idx_size))
    return -1;
  uint64_t n = rd_uint(&r, f->iloc_version < 2 ? 2 : 4);
  for (uint64_t i = 0; i < n && !r.bad; i++) {
    uint32_t id = (uint32_t)rd_uint(&r, f->iloc_version < 2 ? 2 : 4);
    const uint8_t *start = r.p;
    if (skip_loc(f, &r) != 0) return -1;
    struct hitem *it = hf_item(f, id);
    if (it != NULL && it->loc.p == NULL) it->loc = (struct span){start, (size_t)(r.p - start)};
  }
  return r.bad ? -1 : 0;
}

/* ipma: each item's property associations. */
static int parse_ipma(struct hfile *f, struct span s) {
  struct rd r = {s.p, s.n, 0};
  uint32_t vf = (uint32_t)rd_uint(&r, 4);
  f->ipma_wide_id = (vf >> 24) >= 1, f->ipma_wide_idx = vf & 1;
  uint64_t n = rd_uint(&r, 4);
  for (uint64_t i = 0; i < n && !r.bad; i++) {
    uint32_t id = (uint32_t)rd_uint(&r, f->ipma_wide_id ? 4 : 2);
    int k = (int)rd_uint(&r, 1);
    size_t bytes = (size_t)k * (f->ipma_wide_idx ? 2 : 1);
    if (r.bad || bytes > r.n) return -1;
    struct hitem *it = hf_item(f, id);
    if (it != NULL && it->ipa.p == NULL) it->ipa = (struct span){r.p, bytes}, it->nassoc = k;
    r.p += bytes, r.n -= bytes;
  }
  return r.bad ? -1 : 0;
}

/* ipco: the property boxes, in order. */
static int parse_ipco(struct hfile *f, struct span s) {
  long n = count_boxes(s);
  if (n < 0) return -1;
  f->props = codec_malloc((size_t)(n ? n : 1) * sizeof *f->props);
  f->prop_type = codec_malloc((size_t)(n ? n : 1) * sizeof *f->prop_type);
  if (f->props == NULL || f->prop_type == NULL) return -1;
  while (box_take(&s, &f->prop_type[f->nprops], &f->props[f->nprops]) == 0) f->nprops++;
  return 0;
}

static int parse_iprp(struct hfile *f, struct span s, struct span *ipma) {
  uint32_t t;
  struct span body;
  while (box_take(&s, &t, &body) == 0) {
    if (t == FOURCC("ipco") && f->props == NULL && parse_ipco(f, body) != 0) return -1;
    if (t == FOURCC("ipma") && ipma->p == NULL) *ipma = body;
  }
  return s.n == 0 ? 0 : -1;
}

/* The meta box's children this file reads. */
static int parse_meta(struct hfile *f, struct span meta) {
  struct span iinf = {0}, iloc = {0}, ipma = {0}, body;
  uint32_t t;
  int pitm = 0;
  while (box_take(&meta, &t, &body) == 0) {
    struct rd r = {body.p, body.n, 0};
    if (t == FOURCC("pitm")) {
      int v = (int)(rd_uint(&r, 4) >> 24);
      f->primary = (uint32_t)rd_uint(&r, v == 0 ? 2 : 4);
      pitm = !r.bad;
    } else if (t == FOURCC("iinf") && iinf.p == NULL) {
      iinf = body;
    } else if (t == FOURCC("iloc") && iloc.p == NULL) {
      iloc = body;
    } else if (t == FOURCC("iref") && f->iref.p == NULL && body.n >= 4) {
      f->iref_wide = body.p[0] == 1;
      f->iref = (struct span){body.p + 4, body.n - 4};
    } else if (t == FOURCC("iprp") && parse_iprp(f, body, &ipma) != 0) {
      return -1;
    } else if (t == FOURCC("idat") && f->idat.p == NULL) {
      f->idat = body;
    }
  }
  if (meta.n != 0 || !pitm || iinf.p == NULL || iloc.p == NULL || ipma.p == NULL ||
      f->props == NULL)
    return -1;
  if (parse_iinf(f, iinf) != 0 || parse_iloc(f, iloc) != 0) return -1;
  return parse_ipma(f, ipma);
}

/* Every span read is bounded by the file; the boxes after the meta box may be cut short. */
int hf_parse(struct hfile *f, const uint8_t *buf, size_t len) {
  *f = (struct hfile){.buf = buf, .len = len};
  struct span s = {buf, len}, body;
  uint32_t t;
  while (s.n > 0) {
    if (box_take(&s, &t, &body) != 0) break; /* a cut mdat: the meta box came before it */
    if (t != FOURCC("meta")) continue;
    if (body.n < 4 || parse_meta(f, (struct span){body.p + 4, body.n - 4}) != 0) break;
    return 0;
  }
  hf_free(f);
  return -1;
}

/* Property number k (1-based) of item it's associations: its index, and whether it is
 * essential. Returns 0 when k is past the last. */
static size_t assoc_at(const struct hfile *f, const struct hitem *it, int k, int *essential) {
  if (k >= it->nassoc) return 0;
  unsigned v =
      f->ipma_wide_idx ? (unsigned)it->ipa.p[2 * k] << 8 | it->ipa.p[2 * k + 1] : it->ipa.p[k];
  *essential = f->ipma_wide_idx ? (v >> 15) & 1 : (v >> 7) & 1;
  return f->ipma_wide_idx ? v & 0x7fff : v & 0x7f;
}

int hf_prop(const struct hfile *f, const struct hitem *it, uint32_t t, struct span *body) {
  int essential;
  for (int k = 0; k < it->nassoc; k++) {
    size_t i = assoc_at(f, it, k, &essential);
    if (i >= 1 && i <= f->nprops && f->prop_type[i - 1] == t) {
      *body = f->props[i - 1];
      return 0;
    }
  }
  return -1;
}

/* The references of type t from item `from`, in order, into to[0..max). Returns how many there
 * are (possibly more than max), or -1 for a malformed iref. */
static long hf_refs(const struct hfile *f, uint32_t t, uint32_t from, uint32_t *to, size_t max) {
  struct span s = f->iref, body;
  uint32_t rt;
  unsigned w = f->iref_wide ? 4 : 2;
  while (s.n > 0) {
    if (box_take(&s, &rt, &body) != 0) return -1;
    struct rd r = {body.p, body.n, 0};
    if (rt != t || (uint32_t)rd_uint(&r, w) != from) continue;
    uint64_t n = rd_uint(&r, 2);
    if (r.bad || n * w > r.n) return -1;
    for (uint64_t i = 0; i < n && i < max; i++) to[i] = (uint32_t)rd_uint(&r, w);
    return (long)n;
  }
  return 0;
}

/* The data must lie in this file: iloc construction method 0 (the file) or 1 (the idat box), at
 * most MAX_EXTENTS extents. */
enum codec_status hf_data(const struct hfile *f, const struct hitem *it, struct span *out,
                          uint8_t **owned) {
  *owned = NULL;
  if (it->loc.p == NULL) return CODEC_CORRUPT;
  struct rd r = {it->loc.p, it->loc.n, 0};
  unsigned method = f->iloc_version >= 1 ? (unsigned)rd_uint(&r, 2) & 15 : 0;
  uint64_t dref = rd_uint(&r, 2), base = rd_uint(&r, (unsigned)f->base_size);
  uint64_t n = rd_uint(&r, 2);
  if (method > 1 || dref != 0) return CODEC_UNSUPPORTED;
  struct span src = method == 0 ? (struct span){f->buf, f->len} : f->idat;
  if (n == 0 || n > MAX_EXTENTS) return CODEC_CORRUPT;
  struct span ext[MAX_EXTENTS];
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; i++) {
    rd_uint(&r, (unsigned)f->idx_size);
    uint64_t off = rd_uint(&r, (unsigned)f->off_size), l = rd_uint(&r, (unsigned)f->len_size);
    if (r.bad || base > src.n || off > src.n - base) return CODEC_CORRUPT;
    if (l == 0) l = src.n - base - off; /* 0: to the end */
    if (l > src.n - base - off) return CODEC_CORRUPT;
    ext[i] = (struct span){src.p + base + off, (size_t)l};
    total += l;
  }
  if (n == 1) {
    *out = ext[0];
    return CODEC_OK;
  }
  if (total > f->len) return CODEC_CORRUPT;
  uint8_t *p = *owned = codec_malloc(total ? (size_t)total : 1);
  if (p == NULL) return CODEC_NOMEM;
  for (uint64_t i = 0; i < n; i++) memcpy(p, ext[i].p, ext[i].n), p += ext[i].n;
  *out = (struct span){*owned, (size_t)total};
  return CODEC_OK;
}

/* ---- the image's layout: which pictures make it up, and where ---- */

/* The EXIF orientation (1..8) of each transform, as the map (x, y) -> (m[0] x + m[1] y,
 * m[2] x + m[3] y) from stored to displayed coordinates about the centre (y down). */
static const int orient_map[9][4] = {
    {0, 0, 0, 0}, {1, 0, 0, 1},  {-1, 0, 0, 1},  {-1, 0, 0, -1}, {1, 0, 0, -1},
    {0, 1, 1, 0}, {0, -1, 1, 0}, {0, -1, -1, 0}, {0, 1, -1, 0},
};

/* Orientation a followed by b. */
static int orient_then(int a, int b) {
  const int *x = orient_map[a], *y = orient_map[b];
  int m[4] = {y[0] * x[0] + y[1] * x[2], y[0] * x[1] + y[1] * x[3], y[2] * x[0] + y[3] * x[2],
              y[2] * x[1] + y[3] * x[3]};
  for (int o = 1; o <= 8; o++)
    if (memcmp(orient_map[o], m, sizeof m) == 0) return o;
  return 1;
}

/* irot and imir are applied in the order the item lists them; imir's axis 0 flips top to
 * bottom, 1 left to right, as libheif reads it. */
int hf_orientation(const struct hfile *f, const struct hitem *it, int *crop) {
  static const int irot[4] = {1, 8, 3, 6}; /* anticlockwise by 0, 90, 180, 270 degrees */
  int o = 1, essential;
  *crop = 0;
  for (int k = 0; k < it->nassoc; k++) {
    size_t i = assoc_at(f, it, k, &essential);
    if (i < 1 || i > f->nprops) continue;
    uint32_t t = f->prop_type[i - 1];
    const struct span *b = &f->props[i - 1];
    if (t == FOURCC("irot") && b->n >= 1) o = orient_then(o, irot[b->p[0] & 3]);
    if (t == FOURCC("imir") && b->n >= 1) o = orient_then(o, b->p[0] & 1 ? 2 : 4);
    *crop |= t == FOURCC("clap");
  }
  return o;
}

int hf_nclx(const struct hfile *f, const struct hitem *it, int *matrix, int *full) {
  for (int i = 0; i < it->nassoc; i++) {
    int essential;
    size_t p = assoc_at(f, it, i, &essential);
    if (p < 1 || p > f->nprops || f->prop_type[p - 1] != FOURCC("colr")) continue;
    struct span body = f->props[p - 1];
    struct rd r = {body.p, body.n, 0};
    if ((uint32_t)rd_uint(&r, 4) != FOURCC("nclx")) continue;
    rd_uint(&r, 4); /* primaries, transfer */
    int m = (int)rd_uint(&r, 2), fr = (int)(rd_uint(&r, 1) >> 7);
    if (r.bad) continue;
    *matrix = m, *full = fr;
    return 1;
  }
  return 0;
}

/* The ispe of item it, within what this service can hold. */
static int item_size(const struct hfile *f, const struct hitem *it, int *w, int *h) {
  struct span s;
  if (hf_prop(f, it, FOURCC("ispe"), &s) != 0) return -1;
  struct rd r = {s.p, s.n, 0};
  rd_uint(&r, 4);
  uint64_t a = rd_uint(&r, 4), b = rd_uint(&r, 4);
  if (r.bad || a == 0 || b == 0 || a > INT32_MAX || b > INT32_MAX) return -1;
  *w = (int)a, *h = (int)b;
  return 0;
}

/* The luma bit depth in a coded picture's configuration (hvcC or av1C), or 0. */
static int config_bits(uint32_t codec, struct span c) {
  if (codec == FOURCC("hvc1")) return c.n >= 23 ? (c.p[17] & 7) + 8 : 0;
  if (c.n < 4) return 0;
  return c.p[2] & 0x40 ? (c.p[2] & 0x20 ? 12 : 10) : 8;
}

/* Checks coded picture item it (hvc1 or av01 with its configuration and size) as a tile of l.
 * Grids of other than coded pictures, overlays and derived images are refused. */
static enum codec_status check_tile(const struct hfile *f, const struct hitem *it,
                                    struct hlayout *l, char *msg, size_t msglen) {
  struct span c;
  int w, h;
  uint32_t conf = it->type == FOURCC("hvc1") ? FOURCC("hvcC") : FOURCC("av1C");
  if (it->type != FOURCC("hvc1") && it->type != FOURCC("av01")) {
    /* not libheif's either: a grid of grids, or a derived image, can recurse without end there */
    codec_msgf(msg, msglen, "HEIF image items of type '%c%c%c%c' are not supported",
               (int)(it->type >> 24 & 0x7f), (int)(it->type >> 16 & 0x7f),
               (int)(it->type >> 8 & 0x7f), (int)(it->type & 0x7f));
    return CODEC_UNSUPPORTED;
  }
  if (l->codec != 0 && it->type != l->codec) {
    codec_msgf(msg, msglen, "the HEIF grid's tiles are of different codecs");
    return CODEC_UNSUPPORTED;
  }
  if (hf_prop(f, it, conf, &c) != 0 || item_size(f, it, &w, &h) != 0 ||
      config_bits(it->type, c) == 0) {
    codec_msgf(msg, msglen, "the HEIF picture item %u has no valid configuration or size",
               (unsigned)it->id);
    return CODEC_CORRUPT;
  }
  if (l->codec == 0) l->codec = it->type, l->tile_w = w, l->tile_h = h;
  if (l->bits == 0) l->bits = config_bits(it->type, c);
  if (w != l->tile_w || h != l->tile_h || config_bits(it->type, c) != l->bits) {
    codec_msgf(msg, msglen, "the HEIF grid's tiles are of different sizes or depths");
    return CODEC_UNSUPPORTED;
  }
  return CODEC_OK;
}

/* The grid item it's rows, columns and size (the grid's own data), checked against the tiles
 * it lists and against a decompression bomb. */
static enum codec_status grid_layout(const struct hfile *f, const struct hitem *it,
                                     const struct codec_limits *lim, struct hlayout *l, char *msg,
                                     size_t msglen) {
  struct span d;
  uint8_t *owned;
  enum codec_status st = hf_data(f, it, &d, &owned);
  if (st != CODEC_OK) {
    codec_msgf(msg, msglen, "the HEIF grid's description cannot be read from the file");
    return st;
  }
  struct rd r = {d.p, d.n, 0};
  rd_uint(&r, 1);
  unsigned flags = (unsigned)rd_uint(&r, 1);
  l->rows = (int)rd_uint(&r, 1) + 1, l->cols = (int)rd_uint(&r, 1) + 1;
  uint64_t w = rd_uint(&r, flags & 1 ? 4 : 2), h = rd_uint(&r, flags & 1 ? 4 : 2);
  codec_free(owned);
  if (r.bad || w == 0 || h == 0 || w > INT32_MAX || h > INT32_MAX) {
    codec_msgf(msg, msglen, "the HEIF grid's description is malformed");
    return CODEC_CORRUPT;
  }
  l->width = (int)w, l->height = (int)h;
  size_t nbytes;
  if ((st = codec_check_size(w, h, 4, lim, &nbytes, msg, msglen)) != CODEC_OK) return st;
  if ((long)l->rows * l->cols > MAX_TILES) {
    codec_msgf(msg, msglen, "the HEIF grid has %d tiles; at most %d are accepted",
               l->rows * l->cols, MAX_TILES);
    return CODEC_TOO_LARGE;
  }
  return CODEC_OK;
}

/* The tiles of grid l (its size known), checked: all of one codec, size and depth, covering the
 * image with no row or column wholly outside it, each within the limits. */
static enum codec_status grid_tiles(const struct hfile *f, uint32_t id,
                                    const struct codec_limits *lim, struct hlayout *l, char *msg,
                                    size_t msglen) {
  size_t n = (size_t)l->rows * (size_t)l->cols, nbytes;
  if ((l->tiles = codec_malloc(n * sizeof *l->tiles)) == NULL) return CODEC_NOMEM;
  if (hf_refs(f, FOURCC("dimg"), id, l->tiles, n) != (long)n) {
    codec_msgf(msg, msglen, "the HEIF grid lists another number of tiles than its %dx%d", l->cols,
               l->rows);
    return CODEC_CORRUPT;
  }
  for (size_t i = 0; i < n; i++) {
    const struct hitem *t = hf_item(f, l->tiles[i]);
    enum codec_status st = t ? check_tile(f, t, l, msg, msglen) : CODEC_CORRUPT;
    if (t == NULL) codec_msgf(msg, msglen, "the HEIF grid refers to a missing tile");
    if (st != CODEC_OK) return st;
  }
  uint64_t tw = (uint64_t)l->tile_w, th = (uint64_t)l->tile_h;
  if (tw * (uint64_t)l->cols < (uint64_t)l->width || th * (uint64_t)l->rows < (uint64_t)l->height ||
      tw * (uint64_t)(l->cols - 1) >= (uint64_t)l->width ||
      th * (uint64_t)(l->rows - 1) >= (uint64_t)l->height) {
    codec_msgf(msg, msglen, "the HEIF grid's %dx%d tiles of %dx%d do not fit its %dx%d image",
               l->cols, l->rows, l->tile_w, l->tile_h, l->width, l->height);
    return CODEC_CORRUPT;
  }
  return codec_check_size(tw, th, 4, lim, &nbytes, msg, msglen);
}

enum codec_status hf_layout(const struct hfile *f, uint32_t id, const struct codec_limits *lim,
                            struct hlayout *l, char *msg, size_t msglen) {
  *l = (struct hlayout){0};
  const struct hitem *it = hf_item(f, id);
  size_t nbytes;
  if (it == NULL) {
    codec_msgf(msg, msglen, "the HEIF file's primary item %u does not exist", (unsigned)id);
    return CODEC_CORRUPT;
  }
  if (it->type == FOURCC("grid")) {
    enum codec_status st = grid_layout(f, it, lim, l, msg, msglen);
    return st == CODEC_OK ? grid_tiles(f, id, lim, l, msg, msglen) : st;
  }
  enum codec_status st = check_tile(f, it, l, msg, msglen);
  if (st != CODEC_OK) return st;
  if ((l->tiles = codec_malloc(sizeof *l->tiles)) == NULL) return CODEC_NOMEM;
  l->tiles[0] = id;
  l->rows = l->cols = 1, l->width = l->tile_w, l->height = l->tile_h;
  return codec_check_size((uint64_t)l->width, (uint64_t)l->height, 4, lim, &nbytes, msg, msglen);
}

/* Whether auxC property s names an alpha plane. */
static int is_alpha_aux(struct span s) {
  static const char *urn[] = {"urn:mpeg:mpegB:cicp:systems:auxiliary:alpha",
                              "urn:mpeg:hevc:2015:auxid:1", "urn:mpeg:avc:2015:auxid:1"};
  if (s.n < 5) return 0;
  for (size_t i = 0; i < sizeof urn / sizeof urn[0]; i++) {
    size_t n = strlen(urn[i]) + 1; /* with its NUL */
    if (s.n - 4 >= n && memcmp(s.p + 4, urn[i], n) == 0) return 1;
  }
  return 0;
}

/* The first auxl reference to `primary` from an item whose auxC names an alpha plane. */
uint32_t hf_alpha(const struct hfile *f, uint32_t primary) {
  struct span s = f->iref, body;
  uint32_t t;
  unsigned w = f->iref_wide ? 4 : 2;
  while (box_take(&s, &t, &body) == 0) {
    struct rd r = {body.p, body.n, 0};
    uint32_t from = (uint32_t)rd_uint(&r, w);
    uint64_t n = rd_uint(&r, 2);
    const struct hitem *it = t == FOURCC("auxl") ? hf_item(f, from) : NULL;
    struct span aux;
    if (it == NULL || hf_prop(f, it, FOURCC("auxC"), &aux) != 0 || !is_alpha_aux(aux)) continue;
    for (uint64_t i = 0; i < n && !r.bad; i++)
      if ((uint32_t)rd_uint(&r, w) == primary && !r.bad) return from;
  }
  return 0;
}

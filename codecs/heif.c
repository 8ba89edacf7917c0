/* heif.c: HEIC and AVIF input, AVIF output (libheif 1.15, with libde265 and dav1d for the
 * coded pictures).
 *
 * A HEIF file is a box structure (ISO/IEC 23008-12) whose primary item is a coded picture (HEVC
 * 'hvc1' for HEIC, AV1 'av01' for AVIF) or a 'grid' of such pictures (phones write 512x512
 * tiles), with properties: its size ('ispe'), colour ('colr': an ICC profile or nclx code
 * points), transforms ('irot', 'imir', 'clap') and an alpha plane as an auxiliary item ('auxl').
 *
 * Decoding first has libheif read the file (it checks the structure, and every item's size
 * against its own security limit, which is set from the caller's limits), and checks the
 * primary image's upright size against the limits. Then this file reads the boxes itself
 * (hf_parse: the item table, locations, references and properties, each bounded by the file) to
 * find the pictures, checks every tile against the limits and the grid against a decompression
 * bomb (at most MAX_TILES tiles, no row or column of them wholly outside the image), allocates
 * the image, and decodes the tiles on threads of its own: each thread takes the next tile,
 * decodes it with libde265 (one decoder a thread, reset between tiles) or dav1d, whose picture
 * allocations are bounded by the tile's size, and converts its YCbCr straight into its place in
 * the image. The conversion is libheif 1.15's (nearest chroma, single-precision arithmetic in the
 * same order, the matrix and range of the tile's colr nclx or else of its bitstream), so the
 * pixels equal heif-convert's (the identity matrix of lossless AVIF copies the planes; a
 * monochrome picture becomes gray RGB); it runs over rows of planes in loops the compiler
 * vectorises. The thread's cancellation hook is asked before every tile. A picture's data must
 * lie in the file (iloc construction method 0 or 1); grids of other than coded pictures,
 * overlays and derived images are refused (libheif 1.15 recurses without end on a grid of grids).
 * What this path checks but does not decode (a 'clap' crop, YCgCo or chromaticity-derived
 * matrices, an alpha plane of another size or codec) libheif decodes whole, on its threads, the
 * hook asked before and after; AV1 pictures are decoded once first, since libheif's dav1d plugin
 * leaks on some that dav1d refuses.
 * An image of one coded picture is one tile, which libde265 (on its own threads) or dav1d decodes
 * in one call without a hook: it is asked before and after.
 *
 * Output: 8-bit RGB, or RGBA when there is an alpha plane; pictures of 10 or 12 bits become
 * 16-bit samples scaled to the full range, round(v * 65535 / (2^bits - 1)). The transforms are
 * applied (irot and imir in the order the item lists them; imir's axis 0 flips top to bottom, 1
 * left to right, as libheif reads it) and out->orientation is the EXIF value they amount to. An
 * 'nclx' colour description becomes an ICC profile for the sRGB/BT.709, Display P3 and BT.2020
 * primaries with the sRGB, BT.709, linear or pure-gamma transfers (codec_heif_icc); PQ, HLG and
 * the rest have none.
 *
 * AVIF output goes through libavif with libaom (measured against libheif's aom encoder, rav1e and
 * SVT-AV1: docs/engineering-notes.md, "New formats' codecs"): lossy, quality 1..100 to aom's
 * quantizer ((100 - q) * 63 + 50) / 100 for colour and alpha, effort 0..6 to aom's speed 9..3,
 * 4:2:0 below CODEC_JPEG_FULL_CHROMA and 4:4:4 from it, 4:0:0 for gray, 16-bit input as 10-bit
 * AV1, alpha kept, nclx sRGB or the caller's ICC profile. aom has no progress hook: with a
 * cancellation hook an encode of AVIF_CHILD_PIXELS or more runs in a child process that is killed
 * when the hook says stop (codec_run_child). */
#include <avif/avif.h>
#include <dav1d/dav1d.h>
#include <lcms2.h>
#include <libde265/de265.h>
#include <libheif/heif.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codecs_int.h"
#include "cost_table.h"

#define FOURCC(s) ((uint32_t)(s)[0] << 24 | (uint32_t)(s)[1] << 16 | (uint32_t)(s)[2] << 8 | (s)[3])

#define MAX_TILES   4096 /* tiles in a grid; 48 for a 12 MP phone photograph */
#define MAX_THREADS 16   /* decoding threads, at most one per online CPU */
#define MAX_EXTENTS 32   /* extents of one item's data */
/* How far a coded picture may exceed its item's size: coding blocks pad it to a multiple of 64. */
#define PAD         64

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

/* ---- reading boxes ---- */

struct span { /* bytes of the file */
  const uint8_t *p;
  size_t n;
};

/* A reader over a span whose failures stick: a read past the end sets bad and returns 0. */
struct rd {
  const uint8_t *p;
  size_t n;
  int bad;
};

static uint64_t rd_uint(struct rd *r, unsigned bytes) {
  uint64_t v = 0;
  if (r->bad || r->n < bytes) {
    r->bad = 1;
    return 0;
  }
  for (unsigned i = 0; i < bytes; i++) v = v << 8 | r->p[i];
  r->p += bytes, r->n -= bytes;
  return v;
}

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

struct hitem {     /* one item of the file */
  uint32_t id;     /* item_ID */
  uint32_t type;   /* item_type ('hvc1', 'av01', 'grid', ...), 0 for an infe before version 2 */
  struct span loc; /* its iloc entry after the item_ID, or p NULL */
  struct span ipa; /* its ipma associations after the count, or p NULL */
  int nassoc;      /* how many */
};

struct hfile {        /* what hf_parse found in the meta box */
  const uint8_t *buf; /* the file */
  size_t len;
  uint32_t primary;    /* pitm */
  struct hitem *items; /* sorted by id; codec_malloc'd */
  size_t nitems;
  struct span *props; /* ipco's property boxes: props[i] is property index i + 1 */
  uint32_t *prop_type;
  size_t nprops;
  struct span iref, idat;          /* bodies; iref after its version and flags */
  int iref_wide;                   /* iref version 1: 32-bit item IDs */
  int ipma_wide_id, ipma_wide_idx; /* ipma version 1 / flags bit 0 */
  int iloc_version, off_size, len_size, base_size, idx_size;
};

static void hf_free(struct hfile *f) {
  codec_free(f->items), codec_free(f->props), codec_free(f->prop_type);
  f->items = NULL, f->props = NULL, f->prop_type = NULL;
}

static int item_cmp(const void *a, const void *b) {
  uint32_t x = ((const struct hitem *)a)->id, y = ((const struct hitem *)b)->id;
  return x < y ? -1 : x > y;
}

static struct hitem *hf_item(const struct hfile *f, uint32_t id) {
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

/* Reads the file's top-level meta box. Returns 0, or -1 when it is missing or malformed. */
static int hf_parse(struct hfile *f, const uint8_t *buf, size_t len) {
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

/* The first property of type t associated with it, into *body. Returns 0, or -1 when none. */
static int hf_prop(const struct hfile *f, const struct hitem *it, uint32_t t, struct span *body) {
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

/* Item it's data: *out points into the file (one extent) or at *owned (several, joined;
 * codec_free it). Returns CODEC_OK, CODEC_CORRUPT (a location outside the file, or none),
 * CODEC_UNSUPPORTED (another file or construction method) or CODEC_NOMEM. */
static enum codec_status hf_data(const struct hfile *f, const struct hitem *it, struct span *out,
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

/* The orientation item it's irot and imir properties amount to, in the order it lists them;
 * *crop is set when it has a clap. */
static int item_orientation(const struct hfile *f, const struct hitem *it, int *crop) {
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

struct hlayout {      /* one image made of coded pictures */
  uint32_t codec;     /* 'hvc1' or 'av01', the pictures' */
  int width, height;  /* the image, before the transforms */
  int rows, cols;     /* 1 x 1 for a single picture */
  int tile_w, tile_h; /* every picture's item size (ispe) */
  int bits;           /* the pictures' luma bit depth, from their configuration */
  uint32_t *tiles;    /* rows * cols item IDs, row by row; codec_malloc'd */
};

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

/* Checks coded picture item it (hvc1 or av01 with its configuration and size) as a tile of l. */
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

/* The layout of image item id: a single coded picture or a grid of them. Returns CODEC_OK or the
 * failure with a sentence (CODEC_UNSUPPORTED for another item type or mixed tiles). l->tiles is
 * the caller's to free either way. */
static enum codec_status hf_layout(const struct hfile *f, uint32_t id,
                                   const struct codec_limits *lim, struct hlayout *l, char *msg,
                                   size_t msglen) {
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

/* The alpha item of image `primary`: the first auxl reference to it from an item whose auxC
 * names an alpha plane, or 0. */
static uint32_t hf_alpha(const struct hfile *f, uint32_t primary) {
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

/* ---- coded pictures ---- */

struct yuv { /* a decoded picture's planes, and who owns them */
  int w, h, bits;
  int sx, sy;           /* chroma subsampling: shifts of x and y */
  int mono;             /* no chroma planes */
  const uint8_t *p[3];  /* Y, Cb, Cr */
  ptrdiff_t stride[3];  /* bytes */
  int mtrx, full, prim; /* the bitstream's colour description */
  Dav1dContext *dav1d;  /* an AV1 picture's decoder, which owns it; an HEVC picture is its
                           worker's decoder's */
  Dav1dPicture pic;
};

static void yuv_free(struct yuv *y) {
  if (y->dav1d) {
    dav1d_picture_unref(&y->pic);
    dav1d_close(&y->dav1d);
  }
  y->dav1d = NULL;
}

struct guard { /* the largest picture a libde265 decoder may allocate */
  int w, h;
};

struct worker {                 /* what one decoding thread keeps from tile to tile */
  de265_decoder_context *de265; /* reset between tiles, so its picture buffers are reused */
  int threads;                  /* libde265's own threads: for an image of one picture */
  struct guard g;               /* its allocation limit, for the tile at hand */
  float *scratch;               /* the conversion's rows */
};

static int guard_get_buffer(de265_decoder_context *ctx, struct de265_image_spec *spec,
                            struct de265_image *img, void *arg) {
  const struct guard *g = arg;
  if (spec->width > g->w + PAD || spec->height > g->h + PAD) return 0;
  return de265_get_default_image_allocation_functions()->get_buffer(ctx, spec, img, NULL);
}

static void guard_release(de265_decoder_context *ctx, struct de265_image *img, void *arg) {
  (void)arg;
  de265_get_default_image_allocation_functions()->release_buffer(ctx, img, NULL);
}

/* Pushes the NAL units of an hvcC's arrays (2-byte lengths) or of an item's data (size-byte
 * lengths) to libde265. Returns 0, or -1 when one runs past the end. */
static int push_nals(de265_decoder_context *c, struct rd *r, unsigned size, uint64_t count) {
  for (uint64_t i = 0; i < count && r->n > 0; i++) {
    uint64_t n = rd_uint(r, size);
    if (r->bad || n > r->n || n > INT32_MAX) return -1;
    de265_push_NAL(c, r->p, (int)n, 0, NULL);
    r->p += n, r->n -= (size_t)n;
  }
  return r->bad ? -1 : 0;
}

static int push_hevc(de265_decoder_context *c, struct span conf, struct span data) {
  struct rd r = {conf.p + 22, conf.n - 22, 0};
  unsigned size = (conf.p[21] & 3) + 1u;
  uint64_t arrays = rd_uint(&r, 1);
  for (uint64_t a = 0; a < arrays; a++) {
    rd_uint(&r, 1);
    if (push_nals(c, &r, 2, rd_uint(&r, 2)) != 0) return -1;
  }
  struct rd d = {data.p, data.n, 0};
  return push_nals(c, &d, size, UINT64_MAX);
}

/* An HEVC picture (hvcC conf, item data) of at most w->g's size (plus coding padding), by w's
 * decoder (made on first use, reset after). */
static enum codec_status decode_hevc(struct span conf, struct span data, struct worker *w,
                                     struct yuv *y) {
  static struct de265_image_allocation alloc = {guard_get_buffer, guard_release};
  if (w->de265 == NULL) {
    if ((w->de265 = de265_new_decoder()) == NULL) return CODEC_NOMEM;
    de265_set_image_allocation_functions(w->de265, &alloc, &w->g);
    if (w->threads > 1) de265_start_worker_threads(w->de265, w->threads);
  } else {
    de265_reset(w->de265);
  }
  de265_decoder_context *c = w->de265;
  if (push_hevc(c, conf, data) != 0) return CODEC_CORRUPT;
  de265_flush_data(c);
  const struct de265_image *img = NULL;
  int more = 1;
  while (more && img == NULL) {
    more = 0;
    if (!de265_isOK(de265_decode(c, &more))) break;
    img = de265_peek_next_picture(c);
  }
  if (img == NULL) return CODEC_CORRUPT;
  enum de265_chroma ch = de265_get_chroma_format(img);
  y->w = de265_get_image_width(img, 0), y->h = de265_get_image_height(img, 0);
  y->bits = de265_get_bits_per_pixel(img, 0);
  y->mono = ch == de265_chroma_mono;
  y->sx = ch == de265_chroma_420 || ch == de265_chroma_422, y->sy = ch == de265_chroma_420;
  for (int i = 0; i < (y->mono ? 1 : 3); i++) {
    int stride;
    y->p[i] = de265_get_image_plane(img, i, &stride);
    y->stride[i] = stride;
    if (i > 0 && de265_get_bits_per_pixel(img, i) != y->bits) return CODEC_CORRUPT;
  }
  y->mtrx = de265_get_image_matrix_coefficients(img);
  y->full = de265_get_image_full_range_flag(img);
  y->prim = de265_get_image_colour_primaries(img);
  return CODEC_OK;
}

static void no_free(const uint8_t *data, void *cookie) {
  (void)data, (void)cookie; /* the file's bytes are the caller's */
}

/* An AV1 picture of at most g's size (plus padding), on `threads` threads of dav1d's. */
static enum codec_status decode_av1(struct span data, const struct guard *g, int threads,
                                    struct yuv *y) {
  Dav1dSettings s;
  if (data.n == 0) return CODEC_CORRUPT; /* dav1d takes no empty data */
  dav1d_default_settings(&s);
  s.n_threads = threads, s.max_frame_delay = 1, s.all_layers = 0;
  uint64_t most = (uint64_t)(g->w + PAD) * (uint64_t)(g->h + PAD);
  s.frame_size_limit = most > UINT32_MAX ? UINT32_MAX : (unsigned)most;
  s.logger.callback = NULL; /* no logging to stderr */
  if (dav1d_open(&y->dav1d, &s) != 0) return CODEC_NOMEM;
  Dav1dData d = {0};
  if (dav1d_data_wrap(&d, data.p, data.n, no_free, NULL) != 0) return CODEC_NOMEM;
  int got = DAV1D_ERR(EAGAIN);
  while (d.sz > 0 && got == DAV1D_ERR(EAGAIN)) {
    int sent = dav1d_send_data(y->dav1d, &d);
    got = sent < 0 && sent != DAV1D_ERR(EAGAIN) ? sent : dav1d_get_picture(y->dav1d, &y->pic);
  }
  for (int i = 0; i < 2 && got == DAV1D_ERR(EAGAIN); i++) /* frames still in flight */
    got = dav1d_get_picture(y->dav1d, &y->pic);
  dav1d_data_unref(&d);
  if (got != 0) return CODEC_CORRUPT;
  const Dav1dPicture *p = &y->pic;
  y->w = p->p.w, y->h = p->p.h, y->bits = p->p.bpc;
  y->mono = p->p.layout == DAV1D_PIXEL_LAYOUT_I400;
  y->sx = p->p.layout == DAV1D_PIXEL_LAYOUT_I420 || p->p.layout == DAV1D_PIXEL_LAYOUT_I422;
  y->sy = p->p.layout == DAV1D_PIXEL_LAYOUT_I420;
  for (int i = 0; i < 3; i++) y->p[i] = p->data[i], y->stride[i] = p->stride[i ? 1 : 0];
  y->mtrx = p->seq_hdr->mtrx, y->full = p->seq_hdr->color_range, y->prim = p->seq_hdr->pri;
  return CODEC_OK;
}

/* ---- YCbCr to RGB, as libheif 1.15 converts it ---- */

struct coeffs { /* R = Y + r_cr Cr; G = Y + g_cb Cb + g_cr Cr; B = Y + b_cb Cb */
  float r_cr, g_cb, g_cr, b_cb;
  int full;     /* full range; else Y and C are expanded from the video range first */
  int identity; /* matrix 0: G = Y, B = Cb, R = Cr (lossless AVIF) */
};

/* The coefficients for matrix_coefficients m, from Kr and Kb as libheif derives them; 0 for the
 * matrices this file does not convert (identity, YCgCo, chromaticity-derived). */
static int coeffs_for(int m, int full, struct coeffs *k) {
  float kr = 0, kb = 0;
  if (m == 8 || m == 12 || m == 13) return 0;
  *k = (struct coeffs){0, 0, 0, 0, full, m == 0};
  if (m == 0) return 1;
  if (m == 1) kr = 0.2126f, kb = 0.0722f;
  if (m == 4) kr = 0.30f, kb = 0.11f;
  if (m == 5 || m == 6) kr = 0.299f, kb = 0.114f;
  if (m == 7) kr = 0.212f, kb = 0.087f;
  if (m == 9 || m == 10) kr = 0.2627f, kb = 0.0593f;
  if (kr == 0) {
    *k = (struct coeffs){1.402f, -0.344136f, -0.714136f, 1.772f, full, 0};
  } else {
    k->r_cr = 2 * (-kr + 1);
    k->g_cb = 2 * kb * (-kb + 1) / (kb + kr - 1);
    k->g_cr = 2 * kr * (-kr + 1) / (kb + kr - 1);
    k->b_cb = 2 * (-kb + 1);
    k->full = full;
  }
  return 1;
}

static int sample_at(const uint8_t *row, int x, int wide) {
  if (!wide) return row[x];
  uint16_t v;
  memcpy(&v, row + 2 * (size_t)x, 2);
  return v;
}

/* Samples row[0..n) of 8 or 16 bits as float, minus sub. */
static void samples_float(const uint8_t *row, int n, int wide, int sub, float *out) {
  if (!wide) {
    for (int x = 0; x < n; x++) out[x] = (float)(row[x] - sub);
    return;
  }
  const uint16_t *r16 = (const uint16_t *)(const void *)row; /* planes are 2-byte aligned */
  for (int x = 0; x < n; x++) out[x] = (float)(r16[x] - sub);
}

/* Repeats each of in[0..) (1 << shift) times into out[0..n). */
static void upsample(const float *in, int shift, int n, float *out) {
  if (shift == 0) {
    memcpy(out, in, (size_t)n * sizeof *out);
    return;
  }
  for (int x = 0; x < n / 2; x++) out[2 * x] = out[2 * x + 1] = in[x];
  if (n & 1) out[n - 1] = in[n / 2];
}

/* The chroma terms of row y of picture p at full width n: tr = r_cr Cr, tgb = g_cb Cb,
 * tgr = g_cr Cr, tb = b_cb Cb, each C minus half the range (times 1.1429 in the video range).
 * cb and cr are scratch of n + 1 floats each. */
static void chroma_terms(const struct yuv *p, const struct coeffs *k, int y, int n, float *cb,
                         float *cr, float *tr, float *tgb, float *tgr, float *tb) {
  int cn = (n + (1 << p->sx) - 1) >> p->sx, half = 1 << (p->bits - 1), wide = p->bits > 8;
  samples_float(p->p[1] + (ptrdiff_t)(y >> p->sy) * p->stride[1], cn, wide, half, cb);
  samples_float(p->p[2] + (ptrdiff_t)(y >> p->sy) * p->stride[2], cn, wide, half, cr);
  if (!k->full)
    for (int x = 0; x < cn; x++) cb[x] *= 1.1429f, cr[x] *= 1.1429f;
  for (int x = 0; x < cn; x++) /* the products in place, then repeated to full width */
    tr[x] = k->r_cr * cr[x], tgb[x] = k->g_cb * cb[x], tgr[x] = k->g_cr * cr[x],
    tb[x] = k->b_cb * cb[x];
  if (p->sx == 0) return;
  memcpy(cb, tb, (size_t)cn * sizeof *cb), upsample(cb, 1, n, tb);
  memcpy(cb, tgb, (size_t)cn * sizeof *cb), upsample(cb, 1, n, tgb);
  memcpy(cb, tgr, (size_t)cn * sizeof *cb), upsample(cb, 1, n, tgr);
  memcpy(cb, tr, (size_t)cn * sizeof *cb), upsample(cb, 1, n, tr);
}

/* Each of f[0..n) + 0.5 truncated and clamped to 0..max, as libheif rounds, into v. */
static void round_clip(const float *f, int n, int max, int32_t *v) {
  for (int x = 0; x < n; x++) {
    int32_t i = (int32_t)(f[x] + 0.5f);
    v[x] = i < 0 ? 0 : i > max ? max : i;
  }
}

/* Scales v[0..n) from 0..max to 0..65535, rounded. */
static void scale16(int32_t *v, int n, int max) {
  for (int x = 0; x < n; x++)
    v[x] = (int32_t)(((uint32_t)v[x] * 65535u + (uint32_t)max / 2) / (uint32_t)max);
}

/* Writes the samples r, g and b (n of each, of depth bits) into dst's pixels of `channels`
 * samples. Three channels are packed and stored a pixel at a time, each store also writing the
 * first sample of the next pixel, which the next store rewrites (the last pixel is stored
 * sample by sample, as is every pixel of four channels, whose alpha another thread may be
 * writing). */
static void interleave(const int32_t *r, const int32_t *g, const int32_t *b, int n, int depth,
                       int channels, uint8_t *dst) {
  int packed = channels == 3 ? n - 1 : 0;
  if (depth == 8) {
    for (int x = 0; x < packed; x++) {
      uint32_t v = (uint32_t)r[x] | (uint32_t)g[x] << 8 | (uint32_t)b[x] << 16;
      memcpy(dst + 3 * (size_t)x, &v, 4);
    }
    for (int x = packed; x < n; x++) {
      uint8_t *d = dst + (size_t)x * (size_t)channels;
      d[0] = (uint8_t)r[x], d[1] = (uint8_t)g[x], d[2] = (uint8_t)b[x];
    }
    return;
  }
  for (int x = 0; x < packed; x++) {
    uint64_t v = (uint64_t)r[x] | (uint64_t)g[x] << 16 | (uint64_t)b[x] << 32;
    memcpy(dst + 6 * (size_t)x, &v, 8); /* host order: little-endian, as the samples */
  }
  for (int x = packed; x < n; x++) {
    uint16_t s[3] = {(uint16_t)r[x], (uint16_t)g[x], (uint16_t)b[x]};
    memcpy(dst + (size_t)x * (size_t)channels * 2, s, sizeof s);
  }
}

/* Row y of picture p (matrix 0) into v[0..3n): R = Cr, G = Y, B = Cb as stored, or in the video
 * range libheif's (v * 219 + 128) / 256 + 16 (scaled to the depth) of each. */
static void identity_row(const struct yuv *p, int full, int y, int n, int32_t *v) {
  int wide = p->bits > 8, off = 16 << (p->bits - 8);
  const uint8_t *rows[3] = {p->p[2] + (ptrdiff_t)(y >> p->sy) * p->stride[2],
                            p->p[0] + (ptrdiff_t)y * p->stride[0],
                            p->p[1] + (ptrdiff_t)(y >> p->sy) * p->stride[1]};
  for (int c = 0; c < 3; c++)
    for (int x = 0; x < n; x++) {
      int s = sample_at(rows[c], c == 1 || p->mono ? x : x >> p->sx, wide);
      v[c * n + x] = full ? s : ((s * 219 + 128) >> 8) + off;
    }
}

/* Row y of picture p, n pixels, into dst (RGB or RGBA of depth bits, `channels` samples a
 * pixel); the alpha sample is left alone. scratch holds 12 * n + 4 floats. */
static void rgb_row(const struct yuv *p, const struct coeffs *k, int y, int n, uint8_t *dst,
                    int channels, int depth, float *scratch) {
  float *tr = scratch, *tgb = tr + n, *tgr = tgb + n, *tb = tgr + n, *yv = tb + n;
  float *cb = yv + n, *cr = cb + n + 2, *f = cr + n + 2;
  int32_t *v = (int32_t *)(void *)yv; /* r, g, b; yv's, cb's and cr's room, used up by then */
  int max = (1 << p->bits) - 1;
  if (k->identity && !p->mono) {
    identity_row(p, k->full, y, n, v);
    if (depth == 16)
      for (int c = 0; c < 3; c++) scale16(v + c * n, n, max);
    interleave(v, v + n, v + 2 * n, n, depth, channels, dst);
    return;
  }
  if (p->mono) /* libheif's path for 4:0:0: chroma of half the range, terms of 0 */
    memset(tr, 0, 4 * (size_t)n * sizeof *tr);
  else
    chroma_terms(p, k, y, n, cb, cr, tr, tgb, tgr, tb);
  samples_float(p->p[0] + (ptrdiff_t)y * p->stride[0], n, p->bits > 8, 0, yv);
  if (!k->full) {
    float off = (float)(16 << (p->bits - 8));
    for (int x = 0; x < n; x++) yv[x] = (yv[x] - off) * 1.1689f;
  }
  for (int x = 0; x < n; x++) f[x] = yv[x] + tgb[x] + tgr[x]; /* libheif's order */
  for (int x = 0; x < n; x++) tgb[x] = yv[x] + tr[x];
  for (int x = 0; x < n; x++) tgr[x] = yv[x] + tb[x];
  round_clip(tgb, n, max, v);
  round_clip(f, n, max, v + n);
  round_clip(tgr, n, max, v + 2 * n);
  if (depth == 16)
    for (int c = 0; c < 3; c++) scale16(v + c * n, n, max);
  interleave(v, v + n, v + 2 * n, n, depth, channels, dst);
}

/* Scales an n-bit sample to 16 bits: round(v * 65535 / (2^n - 1)). */
static uint16_t to16(int v, int max) {
  return (uint16_t)(((uint32_t)v * 65535u + (uint32_t)max / 2) / (uint32_t)max);
}

/* Row y of alpha picture p, n samples, into every `channels`-th sample of dst from channel 3. */
static void alpha_row(const struct yuv *p, int y, int n, uint8_t *dst, int channels, int depth) {
  const uint8_t *ys = p->p[0] + (ptrdiff_t)y * p->stride[0];
  int wide = p->bits > 8, max = (1 << p->bits) - 1;
  if (depth == 8) {
    for (int x = 0; x < n; x++) dst[(size_t)x * (size_t)channels + 3] = ys[x];
    return;
  }
  uint16_t *d = (uint16_t *)(void *)dst;
  for (int x = 0; x < n; x++)
    d[(size_t)x * (size_t)channels + 3] = to16(sample_at(ys, x, wide), max);
}

/* ---- decoding the tiles on threads ---- */

struct htask { /* one picture to decode into the image */
  uint32_t id; /* its item */
  int x, y;    /* its top-left pixel in the image */
  int alpha;   /* an alpha tile */
};

struct hjob { /* the tiles of one image, and the threads that decode them */
  const struct hfile *f;
  const struct hlayout *col, *alpha; /* alpha: NULL when none */
  struct htask *tasks;
  int ntasks, threads;
  uint8_t *pixels; /* the image: width * height * channels samples of depth bits */
  int width, height, channels, depth;
  const struct coeffs *item_k;     /* the colour tiles' colr nclx, or NULL: each picture's own */
  const struct codec_cancel *hook; /* the caller's, set on every thread */
  atomic_int next;                 /* the next task to take */
  atomic_int failed;               /* a task failed or the hook said stop: take no more */
  pthread_mutex_t mu;              /* guards st and msg */
  enum codec_status st;            /* the first failure */
  char msg[200];
};

static void job_fail(struct hjob *j, enum codec_status st, const char *what, uint32_t id) {
  pthread_mutex_lock(&j->mu);
  if (j->st == CODEC_OK) {
    j->st = st;
    if (what) snprintf(j->msg, sizeof j->msg, "%s (item %u)", what, (unsigned)id);
  }
  pthread_mutex_unlock(&j->mu);
  atomic_store(&j->failed, 1);
}

/* Decodes the picture of task t into y, checked against its layout. */
static enum codec_status task_decode(struct hjob *j, const struct htask *t, struct worker *w,
                                     struct yuv *y) {
  const struct hlayout *l = t->alpha ? j->alpha : j->col;
  const struct hitem *it = hf_item(j->f, t->id);
  struct span conf, data;
  uint8_t *owned = NULL;
  w->g = (struct guard){l->tile_w, l->tile_h};
  enum codec_status st = hf_data(j->f, it, &data, &owned);
  if (st != CODEC_OK) { /* libheif reads no other layout: no reason to try it */
    st = st == CODEC_NOMEM ? st : CODEC_CORRUPT;
    job_fail(j, st, "the HEIF picture's data cannot be read (outside the file, or elsewhere)",
             t->id);
    return st;
  }
  if (l->codec == FOURCC("hvc1")) {
    hf_prop(j->f, it, FOURCC("hvcC"), &conf);
    st = decode_hevc(conf, data, w, y);
  } else {
    st = decode_av1(data, &w->g, j->ntasks == 1 ? j->threads : 1, y);
  }
  codec_free(owned);
  if (st == CODEC_OK && (y->bits != l->bits || y->w < 1 || y->h < 1 || y->w > l->tile_w + PAD ||
                         y->h > l->tile_h + PAD))
    st = CODEC_CORRUPT;
  if (st != CODEC_OK)
    job_fail(j, st,
             st == CODEC_NOMEM ? "out of memory decoding a HEIF picture"
                               : "a HEIF picture is corrupt or truncated",
             t->id);
  return st;
}

/* Decodes task t and writes it into its place in the image. */
static void task_run(struct hjob *j, const struct htask *t, struct worker *wk) {
  const struct hlayout *l = t->alpha ? j->alpha : j->col;
  struct yuv y = {0};
  if (task_decode(j, t, wk, &y) == CODEC_OK) {
    int w = j->width - t->x, h = j->height - t->y;
    w = w < l->tile_w ? w : l->tile_w, w = w < y.w ? w : y.w;
    h = h < l->tile_h ? h : l->tile_h, h = h < y.h ? h : y.h;
    struct coeffs own;
    const struct coeffs *k = j->item_k;
    if (k == NULL && !t->alpha && !coeffs_for(y.mtrx, y.full, &own)) {
      job_fail(j, CODEC_UNSUPPORTED, "the HEIF picture's colour matrix is not supported", t->id);
    } else {
      k = k ? k : &own;
      size_t px = (size_t)j->channels * (size_t)(j->depth / 8);
      for (int r = 0; r < h; r++) {
        uint8_t *dst = j->pixels + ((size_t)(t->y + r) * (size_t)j->width + (size_t)t->x) * px;
        if (t->alpha)
          alpha_row(&y, r, w, dst, j->channels, j->depth);
        else
          rgb_row(&y, k, r, w, dst, j->channels, j->depth, wk->scratch);
      }
    }
  }
  yuv_free(&y);
}

static void *job_thread(void *arg) {
  struct hjob *j = arg;
  codec_cancel_set(j->hook);
  int widest =
      j->col->tile_w > (j->alpha ? j->alpha->tile_w : 0) ? j->col->tile_w : j->alpha->tile_w;
  struct worker w = {NULL, j->ntasks == 1 ? j->threads : 0, {0, 0}, NULL};
  w.scratch = codec_malloc(((size_t)(widest + PAD) * 12 + 4) * sizeof(float));
  if (w.scratch == NULL) job_fail(j, CODEC_NOMEM, "out of memory converting a HEIF picture", 0);
  while (w.scratch != NULL && !atomic_load(&j->failed)) {
    int i = atomic_fetch_add(&j->next, 1);
    if (i >= j->ntasks) break;
    if (codec_stopped()) {
      job_fail(j, CODEC_CANCELLED, NULL, 0);
      break;
    }
    task_run(j, &j->tasks[i], &w);
  }
  if (w.de265) de265_free_decoder(w.de265);
  codec_free(w.scratch);
  codec_cancel_set(NULL);
  return NULL;
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* Runs j's tasks on up to j->threads threads, the caller's among them. */
static void job_run(struct hjob *j) {
  pthread_t th[MAX_THREADS];
  int started = 0;
  for (int i = 1; i < j->threads && i < j->ntasks; i++)
    if (pthread_create(&th[started], NULL, job_thread, j) == 0) started++;
  job_thread(j);
  codec_cancel_set(j->hook); /* job_thread cleared it on this thread */
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
}

/* The tasks for layout l into tasks[*n...]. */
static void add_tasks(const struct hlayout *l, int alpha, struct htask *tasks, int *n) {
  for (int r = 0; r < l->rows; r++)
    for (int c = 0; c < l->cols; c++)
      tasks[(*n)++] = (struct htask){l->tiles[(size_t)r * (size_t)l->cols + (size_t)c],
                                     c * l->tile_w, r * l->tile_h, alpha};
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

/* The conversion given by item it's colr nclx into *k; returns 0 when it has none, 1 when it
 * has one, -1 when its matrix is not converted here. */
static int item_coeffs(const struct hfile *f, const struct hitem *it, struct coeffs *k) {
  uint32_t t;
  struct span body;
  for (int i = 0; i < it->nassoc; i++) {
    int essential;
    size_t p = assoc_at(f, it, i, &essential);
    if (p < 1 || p > f->nprops || f->prop_type[p - 1] != FOURCC("colr")) continue;
    body = f->props[p - 1];
    struct rd r = {body.p, body.n, 0};
    t = (uint32_t)rd_uint(&r, 4);
    if (t != FOURCC("nclx")) continue;
    rd_uint(&r, 4); /* primaries, transfer */
    int m = (int)rd_uint(&r, 2), full = (int)(rd_uint(&r, 1) >> 7);
    if (r.bad) continue;
    return coeffs_for(m, full, k) ? 1 : -1;
  }
  return 0;
}

struct hplan { /* what the tile path decodes */
  struct hlayout col, alpha;
  int has_alpha, depth, channels;
  struct coeffs k; /* the colour tiles' colr nclx, when has_k */
  int has_k;
  int libheif; /* its pictures are checked, but libheif must decode them */
};

static void plan_free(struct hplan *p) {
  codec_free(p->col.tiles), codec_free(p->alpha.tiles);
  p->col.tiles = p->alpha.tiles = NULL;
}

/* The plan for f's primary image: CODEC_OK (p->libheif set when libheif must decode it), or a
 * failure with a sentence. want_alpha is libheif's view. */
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
  item_orientation(f, hf_item(f, f->primary), &crop);
  const struct hitem *first = hf_item(f, p->col.tiles[0]);
  int kk = item_coeffs(f, first, &p->k);
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

/* Decodes p's tiles into out (not yet oriented). */
static enum codec_status plan_run(const struct hfile *f, const struct hplan *p,
                                  const struct codec_limits *lim, struct codec_image *out,
                                  char *msg, size_t msglen) {
  size_t nbytes;
  enum codec_status st =
      codec_check_size((uint64_t)p->col.width, (uint64_t)p->col.height,
                       (unsigned)(p->channels * p->depth / 8), lim, &nbytes, msg, msglen);
  if (st != CODEC_OK) return st;
  int n = p->col.rows * p->col.cols + (p->has_alpha ? p->alpha.rows * p->alpha.cols : 0);
  struct hjob j = {.f = f,
                   .col = &p->col,
                   .alpha = p->has_alpha ? &p->alpha : NULL,
                   .width = p->col.width,
                   .height = p->col.height,
                   .channels = p->channels,
                   .depth = p->depth,
                   .item_k = p->has_k ? &p->k : NULL,
                   .hook = codec_cancel_get(),
                   .threads = online_cpus(),
                   .mu = PTHREAD_MUTEX_INITIALIZER};
  j.tasks = codec_malloc((size_t)n * sizeof *j.tasks);
  j.pixels = codec_malloc(nbytes);
  if (j.tasks == NULL || j.pixels == NULL) {
    codec_free(j.tasks), codec_free(j.pixels);
    codec_msgf(msg, msglen, "out of memory for a %dx%d HEIF image", j.width, j.height);
    return CODEC_NOMEM;
  }
  add_tasks(&p->col, 0, j.tasks, &j.ntasks);
  if (p->has_alpha) add_tasks(&p->alpha, 1, j.tasks, &j.ntasks);
  job_run(&j);
  codec_free(j.tasks);
  if (j.st != CODEC_OK) {
    codec_free(j.pixels);
    codec_msgf(msg, msglen, "%s", j.msg);
    return j.st;
  }
  *out = (struct codec_image){j.pixels, j.width, j.height, j.channels, j.depth, CODEC_NONE, 1};
  return CODEC_OK;
}

/* libheif's own decode of h's primary image into out, transforms applied. */
static enum codec_status libheif_decode(struct hctx *h, int alpha, int depth,
                                        const struct codec_limits *lim, struct codec_image *out,
                                        char *msg, size_t msglen) {
  enum heif_chroma chroma =
      depth == 8
          ? (alpha ? heif_chroma_interleaved_RGBA : heif_chroma_interleaved_RGB)
          : (alpha ? heif_chroma_interleaved_RRGGBBAA_LE : heif_chroma_interleaved_RRGGBB_LE);
  struct heif_image *img = NULL;
  heif_context_set_max_decoding_threads(h->ctx, online_cpus());
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
        ((uint16_t *)(void *)(px + (size_t)y * row))[x] = to16(s[2 * x] | s[2 * x + 1] << 8, max);
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

/* Whether every picture of layout l (none listed: nothing to check) has data in the file, and
 * an AV1 one decodes. */
static int has_data(const struct hfile *f, const struct hlayout *l) {
  for (size_t i = 0; l->tiles != NULL && i < (size_t)l->rows * (size_t)l->cols; i++) {
    const struct hitem *it = hf_item(f, l->tiles[i]);
    struct span d;
    uint8_t *owned = NULL;
    struct guard g = {l->tile_w, l->tile_h};
    struct yuv y = {0};
    int ok = it != NULL && hf_data(f, it, &d, &owned) == CODEC_OK && d.n > 0;
    /* AV1 pictures are decoded once here: libheif's dav1d plugin leaks what dav1d refuses */
    if (ok && l->codec == FOURCC("av01")) ok = decode_av1(d, &g, 1, &y) == CODEC_OK;
    yuv_free(&y);
    codec_free(owned);
    if (!ok) return 0;
  }
  return 1;
}

/* The tile path for h's file. *libheif is set, with CODEC_UNSUPPORTED, when libheif must decode
 * it instead (its pictures checked as this path checks them); *orientation is set from the
 * primary item's transforms when they could be read. */
static enum codec_status tile_decode(const uint8_t *buf, size_t len, struct hctx *h,
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
    *orientation = item_orientation(&f, prim, &crop);
    st = plan_make(&f, heif_image_handle_has_alpha_channel(h->handle), lim, &p, msg, msglen);
  }
  int swap = *orientation >= 5;
  if (st == CODEC_OK &&
      ((swap ? p.col.height : p.col.width) != heif_image_handle_get_width(h->handle) ||
       (swap ? p.col.width : p.col.height) != heif_image_handle_get_height(h->handle)))
    p.libheif = 1; /* libheif sees another size: its decode decides */
  if (st == CODEC_OK && p.libheif && (!has_data(&f, &p.col) || !has_data(&f, &p.alpha))) {
    codec_msgf(msg, msglen, "a HEIF picture is missing, lies outside the file or does not decode");
    st = CODEC_CORRUPT;
  }
  if (st == CODEC_OK && !p.libheif) {
    st = plan_run(&f, &p, lim, out, msg, msglen);
    p.libheif = st == CODEC_UNSUPPORTED; /* a picture's colour matrix */
  }
  if (st == CODEC_OK && p.libheif) st = CODEC_UNSUPPORTED;
  *libheif = p.libheif;
  plan_free(&p);
  hf_free(&f);
  return st;
}

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
  if (st == CODEC_OK) st = tile_decode(buf, len, &h, lim, out, &o, &lh, msg, msglen);
  if (st == CODEC_OK) {
    st = codec_orient(out, o);
    if (st != CODEC_OK) codec_image_free(out);
    if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory turning the HEIF image");
  } else if (st == CODEC_UNSUPPORTED && lh) {
    codec_msgf(msg, msglen, "%s", "");
    st = libheif_decode(&h, alpha, depth, lim, out, msg, msglen);
  }
  if (st == CODEC_OK && codec_stopped()) st = CODEC_CANCELLED, codec_image_free(out);
  if (st == CODEC_OK) out->orientation = o;
  if (st != CODEC_OK && msg && msglen && msg[0] == 0) /* every failure has its sentence */
    codec_msgf(msg, msglen, "HEIF: %s", codec_status_msg(st));
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

/* ---- AVIF output ---- */

/* aom's speed for effort 0 (fastest) .. 6 (smallest), as libavif sets it (0..10). */
static const int avif_speed[7] = {9, 8, 7, 6, 5, 4, 3};

/* Pixels of an image whose encode runs here even with a hook: one this small is over within
 * milliseconds at any speed. */
#define AVIF_CHILD_PIXELS (128 * 128)

/* aom's quantizer (0 best .. 63) for quality q (1..100), the mapping of libheif's and later
 * libavif's quality setting. */
static int avif_quantizer(int q) {
  q = q < 0 ? 0 : q > 100 ? 100 : q;
  return ((100 - q) * 63 + 50) / 100;
}

/* img's samples as libavif's RGB: 8 or 16 bits, RGB or RGBA; gray is repeated into RGB in a
 * codec_malloc'd copy (*copy, NULL when img is used as it is). */
static int avif_rgb(const struct codec_image *img, avifRGBImage *rgb, uint8_t **copy) {
  int alpha = img->channels == 2 || img->channels == 4, bytes = img->depth / 8;
  int ch = 3 + alpha;
  rgb->format = alpha ? AVIF_RGB_FORMAT_RGBA : AVIF_RGB_FORMAT_RGB;
  rgb->depth = (uint32_t)img->depth;
  rgb->rowBytes = (uint32_t)((size_t)img->width * (size_t)(ch * bytes));
  *copy = NULL;
  if (img->channels >= 3) {
    rgb->pixels = img->pixels;
    return 0;
  }
  size_t n = (size_t)img->width * (size_t)img->height;
  if ((*copy = codec_malloc(n * (size_t)(ch * bytes))) == NULL) return -1;
  for (size_t i = 0; i < n; i++)
    for (int c = 0; c < ch; c++)
      memcpy(*copy + (i * (size_t)ch + (size_t)c) * (size_t)bytes,
             img->pixels + (i * (size_t)img->channels + (size_t)(c < 3 ? 0 : 1)) * (size_t)bytes,
             (size_t)bytes);
  rgb->pixels = *copy;
  return 0;
}

struct avif_job { /* one encode by libavif with aom, here or in a child process */
  const struct codec_image *img;
  const struct codec_encode_opts *o;
  struct codec_buf file; /* the file */
  avifResult result;     /* libavif's answer */
};

/* The image as libavif's: 8-bit, or 10-bit from 16-bit samples; 4:2:0 below
 * CODEC_JPEG_FULL_CHROMA, 4:4:4 from it, 4:0:0 for gray; nclx sRGB (BT.709 primaries, sRGB
 * transfer, BT.601 matrix, full range), or o->icc when its colours match. */
static avifImage *avif_image(const struct codec_image *img, const struct codec_encode_opts *o,
                             avifResult *r) {
  int gray = img->channels <= 2;
  avifPixelFormat yuv = gray                                   ? AVIF_PIXEL_FORMAT_YUV400
                        : o->quality >= CODEC_JPEG_FULL_CHROMA ? AVIF_PIXEL_FORMAT_YUV444
                                                               : AVIF_PIXEL_FORMAT_YUV420;
  avifImage *image =
      avifImageCreate((uint32_t)img->width, (uint32_t)img->height, img->depth == 16 ? 10 : 8, yuv);
  avifRGBImage rgb;
  uint8_t *copy = NULL;
  *r = AVIF_RESULT_OUT_OF_MEMORY;
  if (image == NULL) return NULL;
  image->colorPrimaries = AVIF_COLOR_PRIMARIES_BT709;
  image->transferCharacteristics = AVIF_TRANSFER_CHARACTERISTICS_SRGB;
  image->matrixCoefficients = AVIF_MATRIX_COEFFICIENTS_BT601;
  image->yuvRange = AVIF_RANGE_FULL;
  if (o->icc && codec_icc_colours(o->icc, o->icc_len) == (gray ? 1 : 3))
    avifImageSetProfileICC(image, o->icc, o->icc_len);
  avifRGBImageSetDefaults(&rgb, image);
  if (avif_rgb(img, &rgb, &copy) == 0) *r = avifImageRGBToYUV(image, &rgb);
  codec_free(copy);
  if (*r != AVIF_RESULT_OK) avifImageDestroy(image), image = NULL;
  return image;
}

/* The whole encode of j into j->file; j->result says how it went. */
static void avif_run(struct avif_job *j) {
  const struct codec_encode_opts *o = j->o;
  avifRWData out = AVIF_DATA_EMPTY;
  avifImage *image = avif_image(j->img, o, &j->result);
  avifEncoder *enc = image ? avifEncoderCreate() : NULL;
  if (image && enc == NULL) j->result = AVIF_RESULT_OUT_OF_MEMORY;
  if (enc) {
    int effort = o->effort_set ? o->effort : CODEC_EFFORT_DEFAULT;
    enc->codecChoice = AVIF_CODEC_CHOICE_AOM;
    enc->speed = avif_speed[effort < 0 ? 0 : effort > 6 ? 6 : effort];
    enc->maxThreads = online_cpus();
    enc->minQuantizer = enc->maxQuantizer = avif_quantizer(o->quality);
    enc->minQuantizerAlpha = enc->maxQuantizerAlpha = avif_quantizer(o->quality);
    j->result = avifEncoderWrite(enc, image, &out);
    if (j->result == AVIF_RESULT_OK && codec_buf_append(&j->file, out.data, out.size) != CODEC_OK)
      j->result = AVIF_RESULT_OUT_OF_MEMORY;
    avifRWDataFree(&out);
    avifEncoderDestroy(enc);
  }
  if (image) avifImageDestroy(image);
}

/* In the child: the encode, its file to fd. Exit status 0, or 1 + libavif's result. */
static int avif_child(void *arg, int fd) {
  struct avif_job *j = arg;
  avif_run(j);
  if (j->result == AVIF_RESULT_OK && codec_write_all(fd, j->file.data, j->file.len) != 0)
    j->result = AVIF_RESULT_IO_ERROR;
  return j->result == AVIF_RESULT_OK ? 0 : 1 + ((int)j->result & 0x7f);
}

enum codec_status codec_avif_encode(const struct codec_image *img,
                                    const struct codec_encode_opts *o, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  struct avif_job j = {img, o, {NULL, 0, 0}, AVIF_RESULT_OK};
  struct codec_buf file = {NULL, 0, 0};
  int status = 0;
  *out = NULL, *outlen = 0;
  if (o->lossless) {
    codec_msgf(msg, msglen, "lossless AVIF is not supported; ask for PNG, WebP or JPEG XL");
    return CODEC_UNSUPPORTED;
  }
  enum codec_status st = (uint64_t)img->width * (uint64_t)img->height >= AVIF_CHILD_PIXELS
                             ? codec_run_child(avif_child, &j, &file, &status)
                             : CODEC_UNSUPPORTED;
  if (st == CODEC_UNSUPPORTED) { /* here, to the end */
    if (codec_stopped()) return CODEC_CANCELLED;
    avif_run(&j);
    file = j.file;
    status = j.result == AVIF_RESULT_OK ? 0 : 1 + ((int)j.result & 0x7f);
    st = status == 0 && codec_stopped() ? CODEC_CANCELLED : CODEC_OK;
  }
  if (st == CODEC_OK && status != 0) {
    int nomem = status == 1 + AVIF_RESULT_OUT_OF_MEMORY || status == 128 + 9;
    st = nomem ? CODEC_NOMEM : CODEC_UNSUPPORTED;
    if (status >= 128)
      codec_msgf(msg, msglen, "the AVIF encoder was stopped by signal %d", status - 128);
    else
      codec_msgf(msg, msglen, "libavif could not encode the image: %s",
                 avifResultToString((avifResult)(status - 1)));
  }
  if (st != CODEC_OK) {
    codec_free(file.data);
    return st;
  }
  codec_buf_take(&file, out, outlen);
  return CODEC_OK;
}

/* ---- the format's descriptor ---- */

/* HEIC and AVIF share the box reader and the decode; what tells them apart is the sniff. */
static double heic_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  (void)buf;
  double px = (double)s->width * s->height, alpha = s->channels == 2 || s->channels == 4 ? px : 0;
  return px * s->channels * COST_DECODE_HEIC_NS_SAMPLE + (double)len * COST_DECODE_HEIC_NS_BYTE +
         alpha * COST_DECODE_HEIC_NS_ALPHA;
}

static double avif_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  (void)buf;
  double px = (double)s->width * s->height, alpha = s->channels == 2 || s->channels == 4 ? px : 0;
  return px * s->channels * COST_DECODE_AVIF_NS_SAMPLE + (double)len * COST_DECODE_AVIF_NS_BYTE +
         alpha * COST_DECODE_AVIF_NS_ALPHA;
}

/* Per pixel by effort (aom's speed), at the default quality; alpha as much again. */
static double avif_encode_ns(const struct codec_encode_opts *o, const struct codec_shape *s) {
  static const double ns[] = COST_AVIF_NS_PIXEL;
  int effort = o->effort_set ? o->effort : CODEC_EFFORT_DEFAULT;
  effort = effort < 0 ? 0 : effort >= CODEC_NELEM(ns) ? CODEC_NELEM(ns) - 1 : effort;
  double px = (double)s->width * s->height;
  return px * ns[effort] * (s->channels == 2 || s->channels == 4 ? 2 : 1);
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
};

const struct codec_format_desc codec_avif_format = {
    .name = "avif",
    .title = "AVIF",
    .mime = "image/avif",
    .mimes = "image/avif-sequence",
    .exts = "avif",
    .lib = "libheif",
    .reader = "libheif, dav1d",
    .writer = "libavif, aom",
    .quality = 1,
    .sniff = codec_avif_sniff,
    .probe = codec_heif_probe,
    .decode = codec_heif_decode,
    .icc = codec_heif_icc,
    .encode = codec_avif_encode,
    .decode_ns = avif_decode_ns,
    .encode_ns = avif_encode_ns,
};

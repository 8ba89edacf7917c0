/* heif_int.h: what heif.c, heif_box.c and heif_tiles.c share (and tests/gpu_nvdec.c reads files
 * with). heif_box.c reads a HEIF file's boxes (hf_parse) and lays out an image's coded pictures
 * (hf_layout); heif_tiles.c decodes such a layout on threads into an image (hf_decode_tiles);
 * heif.c opens the file with libheif and chooses between that path and libheif's own decode. */
#ifndef BLURD_HEIF_INT_H
#define BLURD_HEIF_INT_H

#include "formats.h"

#define FOURCC(s) ((uint32_t)(s)[0] << 24 | (uint32_t)(s)[1] << 16 | (uint32_t)(s)[2] << 8 | (s)[3])

/* ---- the boxes (heif_box.c) ---- */

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

/* The next `bytes` (0..8) bytes of r as a big-endian number. */
static inline uint64_t rd_uint(struct rd *r, unsigned bytes) {
  uint64_t v = 0;
  if (r->bad || r->n < bytes) {
    r->bad = 1;
    return 0;
  }
  for (unsigned i = 0; i < bytes; i++) v = v << 8 | r->p[i];
  r->p += bytes, r->n -= bytes;
  return v;
}

/* A HEIF file (ISO/IEC 23008-12) is a box structure whose meta box lists items. Its primary item
 * is a coded picture (HEVC 'hvc1' for HEIC, AV1 'av01' for AVIF) or a 'grid' of such pictures
 * (phones write 512x512 tiles), with properties: its size ('ispe'), colour ('colr': an ICC
 * profile or nclx code points), transforms ('irot', 'imir', 'clap'); an alpha plane is an
 * auxiliary item ('auxl') that refers to it. */
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

/* Reads the file's top-level meta box into *f, whose spans point into buf. Returns 0, or -1 when
 * it is missing or malformed (nothing to free then). */
int hf_parse(struct hfile *f, const uint8_t *buf, size_t len);
/* Frees what hf_parse allocated; safe to call twice. */
void hf_free(struct hfile *f);
/* Item id, or NULL. */
struct hitem *hf_item(const struct hfile *f, uint32_t id);
/* The first property of type t associated with it, into *body. Returns 0, or -1 when none. */
int hf_prop(const struct hfile *f, const struct hitem *it, uint32_t t, struct span *body);
/* Item it's data: *out points into the file (one extent) or at *owned (several, joined;
 * codec_free it). Returns CODEC_OK, CODEC_CORRUPT (a location outside the file, or none),
 * CODEC_UNSUPPORTED (another file or construction method) or CODEC_NOMEM. */
enum codec_status hf_data(const struct hfile *f, const struct hitem *it, struct span *out,
                          uint8_t **owned);
/* The EXIF orientation (1..8) item it's irot and imir properties amount to; *crop is set when it
 * has a clap. */
int hf_orientation(const struct hfile *f, const struct hitem *it, int *crop);
/* The matrix_coefficients and full_range_flag of item it's first well-formed colr nclx. Returns
 * 1, or 0 when it has none. */
int hf_nclx(const struct hfile *f, const struct hitem *it, int *matrix, int *full);
/* The alpha item of image `primary`, or 0. */
uint32_t hf_alpha(const struct hfile *f, uint32_t primary);

struct hlayout {      /* one image made of coded pictures */
  uint32_t codec;     /* 'hvc1' or 'av01', the pictures' */
  int width, height;  /* the image, before the transforms */
  int rows, cols;     /* 1 x 1 for a single picture */
  int tile_w, tile_h; /* every picture's item size (ispe) */
  int bits;           /* the pictures' luma bit depth, from their configuration */
  uint32_t *tiles;    /* rows * cols item IDs, row by row; codec_malloc'd */
};

/* The layout of image item id: a single coded picture or a grid of them, checked against lim.
 * Returns CODEC_OK or the failure with a sentence (CODEC_UNSUPPORTED for another item type or
 * mixed tiles). l->tiles is the caller's to free either way. */
enum codec_status hf_layout(const struct hfile *f, uint32_t id, const struct codec_limits *lim,
                            struct hlayout *l, char *msg, size_t msglen);

/* ---- the coded pictures (heif_tiles.c) ---- */

/* The coefficients for matrix_coefficients m, from Kr and Kb as libheif 1.15 derives them.
 * Returns 1, or 0 for the matrices the tile path does not convert (YCgCo, chromaticity-derived). */
int hf_coeffs(int m, int full, struct codec_yuv *k);

struct hplan { /* what the tile path decodes */
  struct hlayout col, alpha;
  int has_alpha, depth, channels;
  struct codec_yuv k; /* the colour tiles' colr nclx, when has_k */
  int has_k;
  int libheif; /* its pictures are checked, but libheif must decode them */
  int threads; /* decoding threads, from hf_threads_begin */
};

/* Decodes p's pictures into out (not yet oriented), on up to hf_online_cpus() threads. Returns
 * CODEC_OK with out->pixels codec_malloc'd, or the failure with a sentence (CODEC_UNSUPPORTED
 * for a picture's own colour matrix that is not converted here). */
enum codec_status hf_decode_tiles(const struct hfile *f, const struct hplan *p,
                                  const struct codec_limits *lim, struct codec_image *out,
                                  char *msg, size_t msglen);
/* Whether every picture of layout l (none listed: nothing to check) has data in the file, and
 * an AV1 one decodes. */
int hf_pictures_ok(const struct hfile *f, const struct hlayout *l);
/* Online CPUs, at most the decoding threads' maximum. */
int hf_online_cpus(void);
/* The threads a decode starting now may use (its tiles' threads, or libde265's, dav1d's or
 * libheif's for one picture): the online CPUs shared among the HEIF decodes running in the
 * process, this one counted, at least 1. Each call is paired with hf_threads_end. Under load every
 * decode then takes one thread, and the service's workers are the parallelism. */
int hf_threads_begin(void);
void hf_threads_end(void);

/* Scales an n-bit sample to 16 bits: round(v * 65535 / (2^n - 1)), max being 2^n - 1. */
static inline uint16_t hf_to16(int v, int max) {
  return (uint16_t)(((uint32_t)v * 65535u + (uint32_t)max / 2) / (uint32_t)max);
}

/* The entry points avif.c shares with heif.c, which reads both HEIC (ftyp brand heic, heix,
 * hevc, hevx, heim or heis; or mif1/msf1 with an hvcC) and AVIF (brand avif or avis; or
 * mif1/msf1 with an av1C). */
int codec_heic_sniff(const uint8_t *buf, size_t len);
int codec_avif_sniff(const uint8_t *buf, size_t len);
/* Both: 8-bit RGB or RGBA, or 16-bit scaled from 10 or 12 bits; irot/imir applied. */
int codec_heif_probe(const uint8_t *buf, size_t len, struct codec_shape *out);
enum codec_status codec_heif_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen);
/* The colr ICC profile; or one made from an nclx description for the sRGB/BT.709, Display P3
 * and BT.2020 primaries with the sRGB, BT.709, linear or gamma transfers; else NULL. */
enum codec_status codec_heif_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len);

#endif

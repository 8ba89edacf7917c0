/* heif_tiles.c: decodes the coded pictures of a HEIF image (a layout from heif_box.c) on threads
 * of its own: each thread takes the next picture, decodes it with libde265 or dav1d and converts
 * its YCbCr into its place in the image the way libheif does, so the pixels equal libheif's. The
 * thread's cancellation hook is asked before every picture. */
#include <dav1d/dav1d.h>
#include <libde265/de265.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "heif_int.h"

#define MAX_THREADS 16 /* decoding threads, at most one per online CPU */
/* How far a coded picture may exceed its item's size: coding blocks pad it to a multiple of 64. */
#define PAD         64

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

/* An image of one picture is one tile, which libde265 decodes on its own threads, or dav1d on
 * its own: a call without a hook, so the hook is asked only before and after it. */
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

/* ---- YCbCr to RGB, as libheif 1.15 converts it ----
 *
 * Nearest chroma, and single-precision arithmetic in libheif's order, with the matrix and range of
 * the tile's colr nclx or else of its bitstream; the identity matrix of lossless AVIF copies the
 * planes, and a monochrome picture becomes gray RGB. Each step runs over a row of a plane, in
 * loops the compiler vectorises. */

int hf_coeffs(int m, int full, struct codec_yuv *k) {
  float kr = 0, kb = 0;
  if (m == 8 || m == 12 || m == 13) return 0;
  *k = (struct codec_yuv){0, 0, 0, 0, full, m == 0};
  if (m == 0) return 1;
  if (m == 1) kr = 0.2126f, kb = 0.0722f;
  if (m == 4) kr = 0.30f, kb = 0.11f;
  if (m == 5 || m == 6) kr = 0.299f, kb = 0.114f;
  if (m == 7) kr = 0.212f, kb = 0.087f;
  if (m == 9 || m == 10) kr = 0.2627f, kb = 0.0593f;
  if (kr == 0) {
    *k = (struct codec_yuv){1.402f, -0.344136f, -0.714136f, 1.772f, full, 0};
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
static void chroma_terms(const struct yuv *p, const struct codec_yuv *k, int y, int n, float *cb,
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
static void rgb_row(const struct yuv *p, const struct codec_yuv *k, int y, int n, uint8_t *dst,
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
    d[(size_t)x * (size_t)channels + 3] = hf_to16(sample_at(ys, x, wide), max);
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
  const struct codec_yuv *item_k;  /* the colour tiles' colr nclx, or NULL: each picture's own */
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
    struct codec_yuv own;
    const struct codec_yuv *k = j->item_k;
    if (k == NULL && !t->alpha && !hf_coeffs(y.mtrx, y.full, &own)) {
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

/* One decoding thread: it takes the next task until none is left or one failed, asking the
 * caller's cancellation hook before each. */
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

static atomic_int decoding; /* HEIF decodes running (hf_threads_begin) */

int hf_threads_begin(void) {
  int n = atomic_fetch_add(&decoding, 1) + 1, t = hf_online_cpus() / n;
  return t < 1 ? 1 : t;
}

void hf_threads_end(void) {
  atomic_fetch_sub(&decoding, 1);
}

int hf_online_cpus(void) {
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

enum codec_status hf_decode_tiles(const struct hfile *f, const struct hplan *p,
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
                   .threads = p->threads > 0 ? p->threads : 1,
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

/* AV1 pictures are decoded once here, for a file libheif is to decode: libheif's dav1d plugin
 * leaks on some that dav1d refuses. */
int hf_pictures_ok(const struct hfile *f, const struct hlayout *l) {
  for (size_t i = 0; l->tiles != NULL && i < (size_t)l->rows * (size_t)l->cols; i++) {
    const struct hitem *it = hf_item(f, l->tiles[i]);
    struct span d;
    uint8_t *owned = NULL;
    struct guard g = {l->tile_w, l->tile_h};
    struct yuv y = {0};
    int ok = it != NULL && hf_data(f, it, &d, &owned) == CODEC_OK && d.n > 0;
    if (ok && l->codec == FOURCC("av01")) ok = decode_av1(d, &g, 1, &y) == CODEC_OK;
    yuv_free(&y);
    codec_free(owned);
    if (!ok) return 0;
  }
  return 1;
}

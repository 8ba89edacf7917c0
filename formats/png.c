/* png.c: PNG decode and encode with libpng, from and to memory buffers. libpng reports errors by
 * longjmp, which stays in this file: each entry point creates the libpng structs in a small
 * wrapper, runs the work in a function that owns the setjmp and turns what the error callback
 * recorded into a status and a sentence. State that must survive a longjmp lives in a struct owned
 * by the wrapper, never in locals of the function that calls setjmp. For the common files png.c
 * takes the pixel data itself (png_inflate.c, png_unfilter.c); every other file is libpng's. */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "formats.h"

#define CHUNK_CACHE_MAX 128 /* ancillary chunks (text, sPLT, unknown) libpng will keep */

/* What the libpng callbacks record; the error and memory pointer of every libpng struct here. */
struct png_ctx {
  int oom;       /* an allocation failed */
  int truncated; /* the read callback ran out of data */
  int cancelled; /* the row callback stopped the work (codec_stopped) */
  char err[160]; /* libpng's last error text */
};

struct png_dec {
  struct png_ctx ctx;
  const uint8_t *buf;
  size_t len, pos;                       /* read position in buf */
  const struct codec_png_layout *direct; /* set: png.c takes the pixel data (direct_ok) */
  png_structp png;
  png_infop info;
  uint8_t *pixels; /* owned until handed to the caller's codec_image */
  int swap;        /* the direct path swaps 16-bit samples to host order */
};

struct png_enc {
  struct png_ctx ctx;
  png_structp png;
  png_infop info;
  struct codec_buf file; /* the encoded file so far */
};

static int host_little_endian(void) {
  const uint16_t one = 1;
  uint8_t first;
  memcpy(&first, &one, 1);
  return first == 1;
}

static void on_error(png_structp png, png_const_charp text) {
  struct png_ctx *ctx = png_get_error_ptr(png);
  snprintf(ctx->err, sizeof ctx->err, "%s", text);
  png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp text) {
  (void)png; /* warnings (bad ancillary CRCs, odd ICC profiles) do not stop a decode */
  (void)text;
}

/* Every allocation, libpng's and zlib's included (the *_struct_2 constructors get on_malloc and
 * on_free), goes through codec_malloc, so any failed allocation makes the call CODEC_NOMEM. Two
 * failures are survived: libpng drops an ancillary chunk it cannot allocate with a warning, and
 * the encoder keeps its larger buffer when the final shrinking realloc fails. */
static png_voidp on_malloc(png_structp png, png_alloc_size_t size) {
  void *p = codec_malloc(size);
  if (p == NULL) ((struct png_ctx *)png_get_mem_ptr(png))->oom = 1;
  return p;
}

static void on_free(png_structp png, png_voidp p) {
  (void)png;
  codec_free(p);
}

/* After each row libpng reads or writes: the work stops when the thread's cancellation hook
 * (codec_cancel_set) says so, through the same longjmp as an error, and the call returns
 * CODEC_CANCELLED. On the direct path libdeflate's inflate runs where it can be stopped
 * (codec_run_stoppable) and the unfilter asks every megabyte of rows. */
static void on_row(png_structp png, png_uint_32 row, int pass) {
  (void)row, (void)pass;
  if (!codec_stopped()) return;
  ((struct png_ctx *)png_get_error_ptr(png))->cancelled = 1;
  png_error(png, "stopped");
}

static void on_read(png_structp png, png_bytep data, size_t n) {
  struct png_dec *d = png_get_io_ptr(png);
  if (n > d->len - d->pos) {
    d->ctx.truncated = 1;
    png_error(png, "unexpected end of file");
  }
  memcpy(data, d->buf + d->pos, n);
  d->pos += n;
}

/* Checks the limits against the IHDR chunk where PNG puts it (right after the signature), when it
 * is there with a valid CRC; libpng rejects anything else as corrupt later. */
static enum codec_status precheck_ihdr(const uint8_t *buf, size_t len,
                                       const struct codec_limits *lim, char *msg, size_t msglen) {
  if (len < 33 || codec_be32(buf + 8) != 13 || memcmp(buf + 12, "IHDR", 4) != 0) return CODEC_OK;
  if ((crc32(0, buf + 12, 17) & 0xffffffffu) != codec_be32(buf + 29)) return CODEC_OK;
  size_t nbytes;
  uint32_t w = codec_be32(buf + 16), h = codec_be32(buf + 20);
  if (codec_check_size(w, h, 8, lim, &nbytes, NULL, 0) != CODEC_TOO_LARGE) return CODEC_OK;
  return codec_check_size(w, h, 8, lim, &nbytes, msg, msglen); /* again, for the sentence */
}

static void set_read_limits(png_structp png, const struct codec_limits *lim) {
  uint32_t w = lim && lim->max_width ? lim->max_width : PNG_UINT_31_MAX;
  uint32_t h = lim && lim->max_height ? lim->max_height : PNG_UINT_31_MAX;
  png_set_user_limits(png, w > PNG_UINT_31_MAX ? PNG_UINT_31_MAX : w,
                      h > PNG_UINT_31_MAX ? PNG_UINT_31_MAX : h);
  png_set_chunk_malloc_max(png, CODEC_PNG_CHUNK_MAX);
  png_set_chunk_cache_max(png, CHUNK_CACHE_MAX);
  /* Skip, without allocating, the chunks the decoder ignores: libpng only warns when one passes
   * CODEC_PNG_CHUNK_MAX and would first allocate (and zero) the length a text chunk claims, up to
   * 2 GiB for a 41-byte file (fuzz/regressions/png). */
  static const png_byte skip[] = "tEXt\0zTXt\0iTXt\0sPLT\0pCAL\0sCAL\0iCCP\0eXIf\0";
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, skip, (int)(sizeof(skip) - 1) / 5);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, 0); /* and unknown ones */
}

/* From the first IDAT on, libpng neither checks the chunks' CRCs nor zlib's Adler-32 of the
 * pixel data, a measurable part of a decode (docs/methods.md, "PNG input"). Damaged pixel data
 * then decodes to other pixels, or fails in inflate, within the same limits; the headers before
 * it (IHDR, PLTE, tRNS) keep their CRC checks, and a file cut short is still refused. */
static void skip_data_checksums(png_structp png) {
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_DEFAULT);
#ifdef PNG_IGNORE_ADLER32
  png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
}

/* Asks libpng for 1..4 channels of 8 or 16 bits in host byte order. */
static void set_read_transforms(png_structp png, png_infop info) {
  int colour = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (depth == 16 && host_little_endian()) png_set_swap(png);
}

/* Whether png.c takes the pixel data of buf itself rather than libpng: a non-interlaced image of
 * 8- or 16-bit gray, gray+alpha, RGB or RGBA without tRNS, its IDAT chunks consecutive and
 * followed only by what libpng would pass over up to IEND (codec_png_layout), so that
 * png_read_end() has nothing left to refuse. libpng still reads such a file up to its pixel data;
 * then libdeflate inflates it into the pixel buffer (png_inflate.c) and png_unfilter.c undoes the
 * row filters in place, faster than libpng's own path (docs/methods.md, "PNG input"). *l
 * describes the file when it returns 1. */
static int direct_ok(const uint8_t *buf, size_t len, struct codec_png_layout *l) {
  if (len < 33 || codec_be32(buf + 8) != 13 || memcmp(buf + 12, "IHDR", 4) != 0) return 0;
  int depth = buf[24], colour = buf[25], interlace = buf[28];
  if ((depth != 8 && depth != 16) || (colour & 1) || colour > 6 || interlace != 0) return 0;
  return codec_png_layout(buf, len, l) == 0 && l->tidy && !l->trns;
}

int codec_png_direct(const uint8_t *buf, size_t len) {
  struct codec_png_layout l;
  return direct_ok(buf, len, &l);
}

/* The pixel data of d's file, inflated (png_inflate.c) into the pixel buffer after three rows
 * of room, filter bytes included, then unfiltered in place to its start (png_unfilter.c). The
 * buffer keeps the 3 strides + h bytes it has beyond the image. */
static enum codec_status decode_direct(struct png_dec *d, size_t h, size_t stride, size_t nbytes,
                                       unsigned bpp, char *msg, size_t msglen) {
  size_t room = CODEC_PNG_ROOM_ROWS * stride; /* <= 3 / h of nbytes */
  if (nbytes > SIZE_MAX - room - h) return CODEC_NOMEM;
  d->pixels = codec_malloc(room + nbytes + h);
  if (d->pixels == NULL) return CODEC_NOMEM;
  enum codec_status st =
      codec_png_inflate(d->buf, d->direct, 0, d->pixels + room, nbytes + h, msg, msglen);
  if (st != CODEC_OK) return st;
  return codec_png_unfilter(d->pixels, h, stride, bpp, d->swap, msg, msglen);
}

/* libpng's own path: the rows unfiltered (and deinterlaced, converted) by libpng, then the rest
 * of the file up to IEND checked. May longjmp to decode_run's setjmp. */
static enum codec_status decode_rows(struct png_dec *d, uint32_t h, size_t stride, size_t nbytes,
                                     int passes) {
  d->pixels = codec_malloc(nbytes);
  if (d->pixels == NULL) return CODEC_NOMEM;
  for (int pass = 0; pass < passes; pass++)
    for (uint32_t y = 0; y < h; y++) png_read_row(d->png, d->pixels + y * stride, NULL);
  png_read_end(d->png, d->info);
  return CODEC_OK;
}

/* The decode proper; owns the setjmp. On success d->pixels holds the image described in out. */
static enum codec_status decode_run(struct png_dec *d, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen) {
  if (setjmp(png_jmpbuf(d->png)))
    return d->ctx.cancelled ? CODEC_CANCELLED : d->ctx.oom ? CODEC_NOMEM : CODEC_CORRUPT;
  png_set_read_fn(d->png, d, on_read);
  png_set_read_status_fn(d->png, on_row);
  set_read_limits(d->png, lim);
  png_read_info(d->png, d->info);
  skip_data_checksums(d->png);
  set_read_transforms(d->png, d->info);
  int passes = png_set_interlace_handling(d->png);
  png_read_update_info(d->png, d->info);

  uint32_t w = png_get_image_width(d->png, d->info), h = png_get_image_height(d->png, d->info);
  int channels = png_get_channels(d->png, d->info), depth = png_get_bit_depth(d->png, d->info);
  size_t nbytes, stride = (size_t)w * (size_t)channels * (size_t)(depth / 8);
  enum codec_status st =
      codec_check_size(w, h, (unsigned)(channels * depth / 8), lim, &nbytes, msg, msglen);
  if (st != CODEC_OK) return st;
  if (channels < 1 || channels > 4 || (depth != 8 && depth != 16) ||
      png_get_rowbytes(d->png, d->info) != stride) {
    codec_msgf(msg, msglen, "libpng produced %d channels of %d bits, which is not expected",
               channels, depth);
    return CODEC_UNSUPPORTED;
  }
  if (d->direct && passes == 1 && !png_get_valid(d->png, d->info, PNG_INFO_tRNS)) {
    d->swap = depth == 16 && host_little_endian();
    st = decode_direct(d, h, stride, nbytes, (unsigned)(channels * depth / 8), msg, msglen);
  } else {
    st = decode_rows(d, h, stride, nbytes, passes);
  }
  if (st == CODEC_NOMEM)
    codec_msgf(msg, msglen, "out of memory for a %ux%u PNG image", (unsigned)w, (unsigned)h);
  if (st != CODEC_OK) return st;
  *out = (struct codec_image){.width = (int)w,
                              .height = (int)h,
                              .channels = channels,
                              .depth = depth,
                              .format = CODEC_PNG,
                              .orientation = 1};
  return CODEC_OK;
}

/* Checks width, height and pixel count twice: from the IHDR bytes before libpng is started (so
 * an oversized image is reported as too large, not as libpng's "Invalid IHDR data" from the user
 * limits), and from png_read_info() before the pixel buffer is allocated. Output is 1..4 channels
 * of 8 or 16 bits in host byte order: palettes expand to RGB (RGBA with tRNS), gray below 8 bits
 * to 8 bits, tRNS to an alpha channel; interlaced files are deinterlaced. Running out of data
 * anywhere, including before IEND, is a corrupt file. Colour profiles, gamma and text chunks are
 * ignored: samples are passed through as stored. A file that is not direct_ok is libpng's to the
 * end, its data inflated by libdeflate where it can (codec_png_rewrap). */
enum codec_status codec_png_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_image *out, char *msg, size_t msglen) {
  enum codec_status st = precheck_ihdr(buf, len, lim, msg, msglen);
  if (st != CODEC_OK) return st;
  struct codec_png_layout layout;
  int direct = direct_ok(buf, len, &layout);
  uint8_t *copy = NULL; /* the file with its pixel data inflated by libdeflate (png_inflate.c) */
  size_t copy_len = 0;
  st = direct ? CODEC_UNSUPPORTED : codec_png_rewrap(buf, len, &copy, &copy_len);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory decoding the PNG image");
  if (st == CODEC_NOMEM || st == CODEC_CANCELLED) return st;
  struct png_dec d = {
      .buf = copy ? copy : buf, .len = copy ? copy_len : len, .direct = direct ? &layout : NULL};
  d.png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &d.ctx, on_error, on_warning, &d.ctx,
                                   on_malloc, on_free);
  if (d.png != NULL) d.info = png_create_info_struct(d.png);
  if (d.png == NULL || d.info == NULL) {
    png_destroy_read_struct(&d.png, NULL, NULL);
    codec_free(copy);
    codec_msgf(msg, msglen, "out of memory starting the PNG decoder");
    return CODEC_NOMEM;
  }
  st = decode_run(&d, lim, out, msg, msglen);
  png_destroy_read_struct(&d.png, &d.info, NULL);
  codec_free(copy);
  if (st == CODEC_OK) {
    out->pixels = d.pixels;
    return CODEC_OK;
  }
  codec_free(d.pixels);
  if (d.ctx.err[0] == '\0' || st == CODEC_CANCELLED) return st; /* decode_run wrote the sentence */
  if (st == CODEC_NOMEM)
    codec_msgf(msg, msglen, "out of memory decoding the PNG image");
  else if (d.ctx.truncated)
    codec_msgf(msg, msglen, "the PNG file is truncated: it ends after %zu bytes", len);
  else
    codec_msgf(msg, msglen, "the PNG data is corrupt (libpng: %s)", d.ctx.err);
  return st;
}

static void on_write(png_structp png, png_bytep data, size_t n) {
  struct png_enc *e = png_get_io_ptr(png);
  enum codec_status st = codec_buf_append(&e->file, data, n);
  if (st == CODEC_TOO_LARGE) png_error(png, "the encoded image is too large");
  if (st == CODEC_NOMEM) {
    e->ctx.oom = 1;
    png_error(png, "out of memory");
  }
}

static void on_flush(png_structp png) {
  (void)png;
}

/* The encode proper; owns the setjmp. On success e->file holds the whole file. */
static enum codec_status encode_run(struct png_enc *e, const struct codec_image *img,
                                    int compression) {
  static const int colour[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  if (setjmp(png_jmpbuf(e->png)))
    return e->ctx.cancelled ? CODEC_CANCELLED : e->ctx.oom ? CODEC_NOMEM : CODEC_UNSUPPORTED;
  png_set_write_fn(e->png, e, on_write, on_flush);
  png_set_write_status_fn(e->png, on_row);
  png_set_compression_level(e->png, compression);
  png_set_IHDR(e->png, e->info, (uint32_t)img->width, (uint32_t)img->height, img->depth,
               colour[img->channels], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(e->png, e->info);
  if (img->depth == 16 && host_little_endian()) png_set_swap(e->png);
  size_t stride = (size_t)img->width * (size_t)img->channels * (size_t)(img->depth / 8);
  for (size_t y = 0; y < (size_t)img->height; y++) png_write_row(e->png, img->pixels + y * stride);
  png_write_end(e->png, NULL);
  return CODEC_OK;
}

enum codec_status codec_png_encode(const struct codec_image *img, int compression, uint8_t **out,
                                   size_t *outlen, char *msg, size_t msglen) {
  struct png_enc e = {.png = NULL};
  e.png = png_create_write_struct_2(PNG_LIBPNG_VER_STRING, &e.ctx, on_error, on_warning, &e.ctx,
                                    on_malloc, on_free);
  if (e.png != NULL) e.info = png_create_info_struct(e.png);
  if (e.png == NULL || e.info == NULL) {
    png_destroy_write_struct(&e.png, NULL);
    codec_msgf(msg, msglen, "out of memory starting the PNG encoder");
    return CODEC_NOMEM;
  }
  enum codec_status st = encode_run(&e, img, compression);
  png_destroy_write_struct(&e.png, &e.info);
  if (st != CODEC_OK) {
    codec_free(e.file.data);
    if (st == CODEC_NOMEM)
      codec_msgf(msg, msglen, "out of memory encoding the PNG image");
    else if (st != CODEC_CANCELLED)
      codec_msgf(msg, msglen, "libpng could not write the image: %s", e.ctx.err);
    return st;
  }
  codec_buf_take(&e.file, out, outlen);
  return CODEC_OK;
}

/* ---- the format's descriptor ---- */

static int png_sniff(const uint8_t *buf, size_t len) {
  static const uint8_t magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return len >= sizeof magic && memcmp(buf, magic, sizeof magic) == 0;
}

/* The IHDR chunk right after the signature (colour type 0 gray, 2 RGB, 3 palette, 4 gray and
 * alpha, 6 RGBA). */
static int png_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  static const int channels[] = {1, 0, 3, 4, 2, 0, 4};
  if (len < 33 || codec_be32(buf + 8) != 13 || memcmp(buf + 12, "IHDR", 4) != 0) return -1;
  uint32_t w = codec_be32(buf + 16), h = codec_be32(buf + 20);
  int type = buf[25];
  if (w == 0 || h == 0 || w > INT32_MAX || h > INT32_MAX || type > 6 || !channels[type]) return -1;
  *out = (struct codec_shape){(int)w, (int)h, channels[type], buf[24] == 16 ? 16 : 8};
  return 0;
}

static const char *png_decoder(const uint8_t *buf, size_t len) {
  return codec_png_direct(buf, len) ? "libdeflate" : "libpng";
}

/* blurd's writer (png_write.c: the run-length coder or libdeflate by level), or libpng's. */
static enum codec_status png_encode(const struct codec_image *img,
                                    const struct codec_encode_opts *o, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  if (o->encoder) *o->encoder = o->png_libpng ? "libpng" : codec_png_deflater(o->compression);
  if (o->png_libpng) return codec_png_encode(img, o->compression, out, outlen, msg, msglen);
  return codec_png_write(img, o, out, outlen, msg, msglen);
}

static double png_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  (void)buf;
  double px = (double)s->width * s->height, alpha = s->channels == 2 || s->channels == 4 ? px : 0;
  return px * s->channels * COST_DECODE_PNG_NS_SAMPLE + (double)len * COST_DECODE_PNG_NS_BYTE +
         alpha * COST_DECODE_PNG_NS_ALPHA;
}

static double png_encode_ns(const struct codec_encode_opts *o, const struct codec_shape *s) {
  static const double png8[] = COST_PNG_NS_BYTE, png16[] = COST_PNG16_NS_BYTE;
  int level = o->compression < 0 || o->compression > 9 ? 9 : o->compression;
  double bytes = (double)s->width * s->height * s->channels * (s->depth / 8);
  return bytes * (s->depth == 16 ? png16 : png8)[level];
}

const struct codec_format_desc codec_png_format = {
    .name = "png",
    .title = "PNG",
    .mime = "image/png",
    .mimes = "image/apng",
    .exts = "png",
    .lib = "libpng",
    .reader = "libdeflate (8- and 16-bit, not interlaced, no tRNS), libpng",
    .writer = "deflate-rle (levels 1 and 2), libdeflate",
    .exact16 = 1,
    .sniff = png_sniff,
    .probe = png_probe,
    .decode = codec_png_decode,
    .decoder = png_decoder,
    .icc = codec_png_icc,
    .encode = png_encode,
    .decode_ns = png_decode_ns,
    .encode_ns = png_encode_ns,
};

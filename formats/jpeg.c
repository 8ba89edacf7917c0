/* jpeg.c: JPEG decode and encode with the libjpeg API (libjpeg-turbo 2.1), from and to memory.
 * Decoding uses libjpeg itself, because TurboJPEG 2.1 cannot limit memory: the headers are read
 * and checked against the caller's limits before the pixels are allocated, libjpeg's errors come
 * back through a longjmp into this file (as png.c does with libpng) as a status and a sentence,
 * and three more limits bound what a hostile file can cost. codec_jpeg_probe runs the header
 * stage alone. Encoding makes the bytes TurboJPEG's tjCompress2 would, fed a few rows at a time
 * so that it can be stopped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

#include "formats.h"

/* What a hostile file can cost, beyond the caller's limits on the upright width, height and pixel
 * count:
 *   - memory: libjpeg may hold at most JPEG_MAX_MEMORY_MIB for its whole-image coefficient buffers
 *     (cinfo.mem->max_memory_to_use). Only progressive and other multi-scan files need them, about
 *     2 bytes per sample per component (6 bytes a pixel for 4:4:4 colour, so 512 MiB is about 89
 *     million pixels). libjpeg asks for them all at once in jpeg_start_decompress; as
 *     libjpeg-turbo has no backing store (jmemnobs.c), a file that needs more fails there with
 *     JERR_NO_BACKING_STORE, before anything large is allocated, and is CODEC_TOO_LARGE. Baseline
 *     files decode a few rows at a time and need no such buffer.
 *   - scans: at most JPEG_MAX_SCANS. A progress monitor looks at the scan number as libjpeg reads;
 *     one scan more makes the file CODEC_CORRUPT, so an absurd scan script cannot burn CPU.
 *     Encoders write about 10.
 *   - warnings: none. The first libjpeg warning (a truncated file, bad Huffman data, extraneous
 *     bytes) makes the file CODEC_CORRUPT, the same policy as for PNG. */
#define JPEG_MAX_MEMORY_MIB 512   /* libjpeg's whole-image buffers, per decode */
#define JPEG_MAX_SCANS      256   /* scans a multi-scan (progressive) file may have */
#define JPEG_MAX_WARNINGS   0     /* libjpeg warnings tolerated; the next one is a corrupt file */
#define JPEG_MAX_SIDE       65500 /* libjpeg's JPEG_MAX_DIMENSION */
#define ENCODE_ROWS         16    /* rows fed to the compressor at a time: an MCU row at 4:2:0 */

/* The allocation methods of libjpeg's memory manager, as it made them; the wrappers call them. */
struct jpeg_alloc_methods {
  void *(*small)(j_common_ptr, int, size_t);
  void *(*large)(j_common_ptr, int, size_t);
  JSAMPARRAY (*sarray)(j_common_ptr, int, JDIMENSION, JDIMENSION);
  JBLOCKARRAY (*barray)(j_common_ptr, int, JDIMENSION, JDIMENSION);
  void (*realize)(j_common_ptr);
};

/* Where a callback that stops libjpeg jumps to: the first member of jpeg_dec and jpeg_enc, whose
 * cinfo.client_data points back to them for the callbacks. */
struct jpeg_fail {
  jmp_buf jmp;
  enum codec_status status;        /* set by the callback that jumped */
  char text[JMSG_LENGTH_MAX + 96]; /* its sentence */
};

/* One decode: the state that must survive a longjmp, owned by codec_jpeg_decode (or
 * codec_jpeg_probe); every path ends in jpeg_destroy_decompress. */
struct jpeg_dec {
  struct jpeg_fail fail; /* first */
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr err;
  struct jpeg_progress_mgr progress;
  struct jpeg_alloc_methods mem;
  uint8_t *pixels; /* owned until handed to the caller's codec_image */
  int adobe;       /* an Adobe APP14 marker: CMYK samples are stored inverted (255: no ink) */
};

static _Noreturn void bail(j_common_ptr cinfo, enum codec_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records st and a sentence, then jumps back to the setjmp of decode_run, probe_run or
 * compress_run. */
static _Noreturn void bail(j_common_ptr cinfo, enum codec_status st, const char *fmt, ...) {
  struct jpeg_fail *f = cinfo->client_data;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->text, sizeof f->text, fmt, ap);
  va_end(ap);
  f->status = st;
  longjmp(f->jmp, 1);
}

static void on_error_exit(j_common_ptr cinfo) {
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  switch (cinfo->err->msg_code) {
  case JERR_OUT_OF_MEMORY:
    bail(cinfo, CODEC_NOMEM, "out of memory decoding the JPEG image (libjpeg: %s)", text);
  case JERR_NO_BACKING_STORE: /* the whole-image buffers would pass max_memory_to_use */
    bail(cinfo, CODEC_TOO_LARGE, "decoding this JPEG image needs more than %d MiB of memory",
         JPEG_MAX_MEMORY_MIB);
  case JERR_IMAGE_TOO_BIG:
  case JERR_WIDTH_OVERFLOW:
    bail(cinfo, CODEC_TOO_LARGE, "the JPEG image is too large (libjpeg: %s)", text);
  case JERR_BAD_PRECISION:
  case JERR_SOF_UNSUPPORTED:
    bail(cinfo, CODEC_UNSUPPORTED, "this kind of JPEG is not supported (libjpeg: %s)", text);
  default:
    bail(cinfo, CODEC_CORRUPT, "the JPEG data is corrupt or truncated (libjpeg: %s)", text);
  }
}

/* libjpeg calls this with level -1 for a warning and 0.. for trace messages. */
static void on_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0 || ++cinfo->err->num_warnings <= JPEG_MAX_WARNINGS) return;
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  bail(cinfo, CODEC_CORRUPT, "the JPEG data is corrupt or truncated (libjpeg: %s)", text);
}

static void on_output_message(j_common_ptr cinfo) {
  (void)cinfo; /* a server does not print libjpeg's messages on stderr */
}

/* libjpeg calls this for every jpeg_read_scanlines and, while it absorbs a multi-scan file,
 * before each piece of input it consumes (an MCU row), so it sees every new scan as soon as its
 * header has been read. It also asks the thread's cancellation hook and stops the work through
 * the same longjmp (CODEC_CANCELLED); the CMYK conversion and the turn upright ask it every row. */
static void on_progress(j_common_ptr cinfo) {
  if (((j_decompress_ptr)cinfo)->input_scan_number > JPEG_MAX_SCANS)
    bail(cinfo, CODEC_CORRUPT, "the JPEG file has too many scans (more than %d)", JPEG_MAX_SCANS);
  if (codec_stopped()) bail(cinfo, CODEC_CANCELLED, "%s", codec_status_msg(CODEC_CANCELLED));
}

/* The wrappers of libjpeg's allocation methods. libjpeg allocates through its own memory manager
 * (jmemmgr.c over malloc), which cannot be routed through codec_malloc without replacing it. So
 * that allocation-failure tests still reach libjpeg's error paths, its allocation methods are
 * wrapped after jpeg_create_decompress: each request first asks codec_alloc_fails() and, when told
 * to fail, raises JERR_OUT_OF_MEMORY as the memory manager itself would. What
 * jpeg_create_decompress allocates, and the mallocs behind the pools, are out of the tests'
 * reach. */
static struct jpeg_alloc_methods *real_methods(j_common_ptr cinfo) {
  if (codec_alloc_fails()) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  return &((struct jpeg_dec *)cinfo->client_data)->mem;
}
static void *wrap_small(j_common_ptr cinfo, int pool, size_t n) {
  return real_methods(cinfo)->small(cinfo, pool, n);
}
static void *wrap_large(j_common_ptr cinfo, int pool, size_t n) {
  return real_methods(cinfo)->large(cinfo, pool, n);
}
static JSAMPARRAY wrap_sarray(j_common_ptr cinfo, int pool, JDIMENSION per_row, JDIMENSION rows) {
  return real_methods(cinfo)->sarray(cinfo, pool, per_row, rows);
}
static JBLOCKARRAY wrap_barray(j_common_ptr cinfo, int pool, JDIMENSION per_row, JDIMENSION rows) {
  return real_methods(cinfo)->barray(cinfo, pool, per_row, rows);
}
static void wrap_realize(j_common_ptr cinfo) {
  real_methods(cinfo)->realize(cinfo);
}

/* Sets the limits, the progress monitor and the allocation wrappers on a created decoder. */
static void set_limits(struct jpeg_dec *d) {
  struct jpeg_memory_mgr *m = d->cinfo.mem;
  m->max_memory_to_use = (long)JPEG_MAX_MEMORY_MIB << 20; /* replaces $JPEGMEM */
  d->mem = (struct jpeg_alloc_methods){m->alloc_small, m->alloc_large, m->alloc_sarray,
                                       m->alloc_barray, m->realize_virt_arrays};
  m->alloc_small = wrap_small;
  m->alloc_large = wrap_large;
  m->alloc_sarray = wrap_sarray;
  m->alloc_barray = wrap_barray;
  m->realize_virt_arrays = wrap_realize;
  d->progress.progress_monitor = on_progress;
  d->cinfo.progress = &d->progress;
}

/* After jpeg_read_header: refuses colour spaces other than gray, YCbCr, RGB, CMYK and YCCK, asks
 * for 1, 3 or (CMYK and YCCK, which libjpeg turns into CMYK) 4 channels, and checks the upright
 * size (orientation o) against lim. */
static enum codec_status check_header(j_decompress_ptr c, int o, const struct codec_limits *lim,
                                      int *channels, size_t *nbytes, char *msg, size_t msglen) {
  int cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
  if (!cmyk && c->jpeg_color_space != JCS_GRAYSCALE && c->jpeg_color_space != JCS_YCbCr &&
      c->jpeg_color_space != JCS_RGB) {
    codec_msgf(msg, msglen, "JPEG images of %d colour components are not supported",
               c->num_components);
    return CODEC_UNSUPPORTED;
  }
  *channels = cmyk ? 4 : c->jpeg_color_space == JCS_GRAYSCALE ? 1 : 3; /* CMYK: RGB later */
  c->out_color_space = cmyk ? JCS_CMYK : *channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  uint64_t w = c->image_width, h = c->image_height; /* limits apply to the upright image */
  return codec_check_size(o >= 5 ? h : w, o >= 5 ? w : h, (unsigned)*channels, lim, nbytes, msg,
                          msglen);
}

/* After jpeg_start_decompress: allocates d->pixels and reads every row into it, then the rest
 * of the file up to EOI. */
static enum codec_status read_pixels(struct jpeg_dec *d, int channels, size_t nbytes, char *msg,
                                     size_t msglen) {
  j_decompress_ptr c = &d->cinfo;
  if (c->output_components != channels || c->output_width != c->image_width ||
      c->output_height != c->image_height) {
    codec_msgf(msg, msglen, "libjpeg produced %d channels at %ux%u, which is not expected",
               c->output_components, (unsigned)c->output_width, (unsigned)c->output_height);
    return CODEC_UNSUPPORTED;
  }
  d->pixels = codec_malloc(nbytes);
  if (d->pixels == NULL) {
    codec_msgf(msg, msglen, "out of memory for a %ux%u JPEG image", (unsigned)c->output_width,
               (unsigned)c->output_height);
    return CODEC_NOMEM;
  }
  size_t stride = (size_t)c->output_width * (size_t)channels;
  while (c->output_scanline < c->output_height) {
    JSAMPROW row = d->pixels + (size_t)c->output_scanline * stride;
    if (jpeg_read_scanlines(c, &row, 1) != 1) { /* cannot happen with a memory source */
      codec_msgf(msg, msglen, "libjpeg stopped at row %u", (unsigned)c->output_scanline);
      return CODEC_CORRUPT;
    }
  }
  jpeg_finish_decompress(c); /* reads up to EOI: a warning there is a corrupt file too */
  return CODEC_OK;
}

/* The header stage of decode_run and probe_run, called under their setjmp: creates the decoder,
 * reads the headers up to the first scan and the EXIF orientation (*o), and checks them. */
static enum codec_status read_headers(struct jpeg_dec *d, const uint8_t *buf, size_t len,
                                      const struct codec_limits *lim, int *o, int *channels,
                                      size_t *nbytes, char *msg, size_t msglen) {
  jpeg_create_decompress(&d->cinfo);
  set_limits(d);
  jpeg_mem_src(&d->cinfo, buf, (unsigned long)len);
  jpeg_read_header(&d->cinfo, TRUE); /* a file without a frame header is an error */
  *o = codec_exif_orientation(buf, len);
  return check_header(&d->cinfo, *o, lim, channels, nbytes, msg, msglen);
}

/* The decode proper; owns the setjmp. On success d->pixels holds the stored (not yet upright)
 * image described in out. */
static enum codec_status decode_run(struct jpeg_dec *d, const uint8_t *buf, size_t len,
                                    const struct codec_limits *lim, struct codec_image *out,
                                    char *msg, size_t msglen) {
  int o, channels;
  size_t nbytes;
  if (setjmp(d->fail.jmp)) {
    codec_msgf(msg, msglen, "%s", d->fail.text);
    return d->fail.status;
  }
  enum codec_status st = read_headers(d, buf, len, lim, &o, &channels, &nbytes, msg, msglen);
  if (st != CODEC_OK) return st;
  jpeg_start_decompress(&d->cinfo); /* reads every scan of a multi-scan file */
  st = read_pixels(d, channels, nbytes, msg, msglen);
  if (st != CODEC_OK) return st;
  d->adobe = d->cinfo.saw_Adobe_marker;
  *out = (struct codec_image){.width = (int)d->cinfo.output_width,
                              .height = (int)d->cinfo.output_height,
                              .channels = channels,
                              .depth = 8,
                              .format = CODEC_JPEG,
                              .orientation = o};
  return CODEC_OK;
}

/* A decoder whose errors come back to this file: d's callbacks set, nothing created yet. Returns
 * CODEC_OK, or CODEC_TOO_LARGE when len does not fit libjpeg's source manager. */
static enum codec_status dec_init(struct jpeg_dec *d, size_t len, char *msg, size_t msglen) {
  if ((unsigned long)len != len) {
    codec_msgf(msg, msglen, "the JPEG file is too large to decode");
    return CODEC_TOO_LARGE;
  }
  *d = (struct jpeg_dec){.pixels = NULL};
  d->cinfo.err = jpeg_std_error(&d->err);
  d->err.error_exit = on_error_exit;
  d->err.emit_message = on_emit_message;
  d->err.output_message = on_output_message;
  d->cinfo.client_data = d; /* jpeg_create_decompress keeps err and client_data */
  return CODEC_OK;
}

/* Whether every component but luma is sampled 1x1 and luma at 1 or 2 in each direction: 4:4:4,
 * 4:2:2, 4:2:0, 4:4:0, the layouts the GPU decoders upsample as libjpeg does. */
static int common_sampling(j_decompress_ptr c) {
  const jpeg_component_info *y = &c->comp_info[0];
  if (y->h_samp_factor > 2 || y->v_samp_factor > 2) return 0;
  for (int i = 1; i < c->num_components; i++)
    if (c->comp_info[i].h_samp_factor != 1 || c->comp_info[i].v_samp_factor != 1) return 0;
  return 1;
}

/* The chroma subsampling of a file with common_sampling: from luma's sampling factors. */
static const char *chroma_name(j_decompress_ptr c) {
  static const char *const names[2][2] = {{"4:4:4", "4:4:0"}, {"4:2:2", "4:2:0"}};
  if (c->num_components == 1) return "gray";
  if (!common_sampling(c)) return "other";
  return names[c->comp_info[0].h_samp_factor - 1][c->comp_info[0].v_samp_factor - 1];
}

/* Whether the data after the first scan header looks whole: every 0xFF in it is a stuffed 0xFF
 * (FF 00), fill (FF FF), a restart marker or, in a progressive file, a marker that may stand
 * between scans, up to an EOI marker. A file cut short has no EOI; a damaged one often has a
 * marker code that cannot be there. (libjpeg warns about both, and blurd refuses the file.) */
static int scans_look_whole(const uint8_t *p, size_t n, int progressive) {
  const uint8_t *end = p + n;
  while (end - p >= 2) {
    const uint8_t *ff = memchr(p, 0xff, (size_t)(end - p) - 1);
    if (ff == NULL) return 0;
    unsigned m = ff[1];
    if (m == 0xd9) return 1; /* EOI */
    int between_scans = m == 0xc4 || m == 0xda || m == 0xdb || m == 0xdd || m == 0xfe ||
                        (m >= 0xe0 && m <= 0xef); /* DHT, SOS, DQT, DRI, COM, APPn */
    if (m != 0x00 && m != 0xff && (m < 0xd0 || m > 0xd7) && !(progressive && between_scans))
      return 0;
    p = ff + 1;
  }
  return 0;
}

/* codec_jpeg_probe's work; owns the setjmp. */
static enum codec_status probe_run(struct jpeg_dec *d, const uint8_t *buf, size_t len,
                                   const struct codec_limits *lim, struct codec_jpeg_info *info,
                                   char *msg, size_t msglen) {
  int o, channels;
  size_t nbytes;
  j_decompress_ptr c = &d->cinfo;
  if (setjmp(d->fail.jmp)) {
    codec_msgf(msg, msglen, "%s", d->fail.text);
    return d->fail.status;
  }
  enum codec_status st = read_headers(d, buf, len, lim, &o, &channels, &nbytes, msg, msglen);
  if (st != CODEC_OK) return st;
  size_t scan = len - c->src->bytes_in_buffer; /* the first scan's data starts here */
  *info = (struct codec_jpeg_info){
      .width = (int)c->image_width,
      .height = (int)c->image_height,
      .channels = channels == 4 ? 3 : channels, /* CMYK decodes to RGB */
      .orientation = o,
      .progressive = c->progressive_mode,
      .chroma = chroma_name(c),
      .plain = c->data_precision == 8 && !c->arith_code &&
               (c->jpeg_color_space == JCS_YCbCr || c->jpeg_color_space == JCS_GRAYSCALE) &&
               common_sampling(c),
      .complete = scans_look_whole(buf + scan, len - scan, c->progressive_mode)};
  return CODEC_OK;
}

static int jpeg_sniff(const uint8_t *buf, size_t len) {
  return len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff;
}

/* The same header stage as the decoder's, without decoding: the service asks it whether a file
 * can go to the GPU decoder, so that what the CPU decoder would refuse at its headers is refused
 * in the same words either way. */
enum codec_status codec_jpeg_probe(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_jpeg_info *info, char *msg, size_t msglen) {
  struct jpeg_dec d;
  if (msg != NULL && msglen > 0) msg[0] = '\0';
  memset(info, 0, sizeof(*info));
  if (!jpeg_sniff(buf, len)) {
    codec_msgf(msg, msglen, "the data is not a JPEG file");
    return CODEC_UNKNOWN;
  }
  enum codec_status st = dec_init(&d, len, msg, msglen);
  if (st != CODEC_OK) return st;
  st = probe_run(&d, buf, len, lim, info, msg, msglen);
  jpeg_destroy_decompress(&d.cinfo);
  return st;
}

/* A decoded CMYK image (Adobe's inverted samples when adobe is set) to RGB, through the file's
 * CMYK profile when it has one. Returns CODEC_OK, CODEC_NOMEM or CODEC_CANCELLED. */
static enum codec_status to_rgb(struct codec_image *img, const uint8_t *buf, size_t len,
                                int adobe) {
  uint8_t *icc;
  size_t icc_len;
  enum codec_status st = codec_icc_read(buf, len, &icc, &icc_len);
  if (st == CODEC_OK)
    st = codec_cmyk_to_rgb(img->pixels, (size_t)img->width, (size_t)img->height, adobe, icc,
                           icc_len);
  codec_free(icc);
  if (st == CODEC_OK) img->channels = 3;
  return st;
}

/* Reads the header and the EXIF orientation and checks the upright width, height and pixel count
 * against lim before it allocates the pixels. Gray JPEGs decode to 1 channel, YCbCr and RGB ones
 * to RGB; CMYK and YCCK ones (libjpeg gives CMYK for both) become RGB through the file's CMYK
 * profile, or without one by the naive (1 - C)(1 - K) (icc.c); the EXIF orientation is then
 * applied (exif.c). */
enum codec_status codec_jpeg_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen) {
  struct jpeg_dec d;
  enum codec_status st = dec_init(&d, len, msg, msglen);
  if (st != CODEC_OK) return st;
  st = decode_run(&d, buf, len, lim, out, msg, msglen);
  jpeg_destroy_decompress(&d.cinfo);
  if (st != CODEC_OK) {
    codec_free(d.pixels);
    return st;
  }
  out->pixels = d.pixels; /* on failure from here, codec_decode frees it */
  if (out->channels == 4 && (st = to_rgb(out, buf, len, d.adobe)) != CODEC_OK) {
    if (st == CODEC_NOMEM)
      codec_msgf(msg, msglen, "out of memory converting a %dx%d CMYK JPEG image to RGB", out->width,
                 out->height);
    return st;
  }
  if ((st = codec_orient(out, out->orientation)) == CODEC_NOMEM)
    codec_msgf(msg, msglen, "out of memory turning a %dx%d JPEG image upright", out->width,
               out->height);
  return st;
}

/* One encode, for the callbacks as struct jpeg_dec is for the decoder's. */
struct jpeg_enc {
  struct jpeg_fail fail; /* first */
  struct jpeg_compress_struct cinfo;
  struct jpeg_error_mgr err;
  struct jpeg_progress_mgr progress;
  struct jpeg_destination_mgr dest;
  struct codec_buf file;         /* the file so far */
  JOCTET stage[(size_t)1 << 14]; /* the compressor's output, before it goes into file */
};

static void on_compress_error(j_common_ptr cinfo) {
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  if (cinfo->err->msg_code == JERR_OUT_OF_MEMORY)
    bail(cinfo, CODEC_NOMEM, "out of memory encoding the JPEG image");
  bail(cinfo, CODEC_UNSUPPORTED, "libjpeg could not write the image: %s", text);
}

/* Before each jpeg_write_scanlines, ENCODE_ROWS rows apart. */
static void on_compress_progress(j_common_ptr cinfo) {
  if (codec_stopped()) bail(cinfo, CODEC_CANCELLED, "%s", codec_status_msg(CODEC_CANCELLED));
}

/* The destination: the stage, emptied into the file whenever it is full, and at the end. */
static void dest_init(j_compress_ptr cinfo) {
  struct jpeg_enc *e = cinfo->client_data;
  e->dest.next_output_byte = e->stage;
  e->dest.free_in_buffer = sizeof e->stage;
}

static void dest_put(j_compress_ptr cinfo, size_t n) {
  struct jpeg_enc *e = cinfo->client_data;
  if (codec_buf_append(&e->file, e->stage, n) != CODEC_OK) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  dest_init(cinfo);
}

static boolean dest_empty(j_compress_ptr cinfo) {
  dest_put(cinfo, sizeof((struct jpeg_enc *)cinfo->client_data)->stage);
  return TRUE;
}

static void dest_term(j_compress_ptr cinfo) {
  struct jpeg_enc *e = cinfo->client_data;
  dest_put(cinfo, sizeof e->stage - e->dest.free_in_buffer);
}

/* tjCompress2's settings (setCompDefaults: baseline Huffman tables, the accurate integer DCT from
 * quality 96, the fast one below) for out_ch channels at quality, with TurboJPEG's sampling
 * factors: 4:4:4 from CODEC_JPEG_FULL_CHROMA, else 4:2:0, as libvips chooses. The bytes are then
 * tjCompress2's (tests/unit_codecs.c compares them). */
static void compress_settings(j_compress_ptr c, int out_ch, int quality) {
  int f = out_ch == 1 || quality >= CODEC_JPEG_FULL_CHROMA ? 1 : 2;
  c->in_color_space = out_ch == 1 ? JCS_GRAYSCALE : JCS_EXT_RGB;
  c->input_components = out_ch;
  jpeg_set_defaults(c);
  jpeg_set_quality(c, quality, TRUE);
  c->dct_method = quality >= 96 ? JDCT_ISLOW : JDCT_FASTEST;
  jpeg_set_colorspace(c, out_ch == 1 ? JCS_GRAYSCALE : JCS_YCbCr);
  c->comp_info[0].h_samp_factor = c->comp_info[0].v_samp_factor = f;
  c->comp_info[1].h_samp_factor = c->comp_info[1].v_samp_factor = 1;
  c->comp_info[2].h_samp_factor = c->comp_info[2].v_samp_factor = 1;
}

/* The encode proper; owns the setjmp. src: width x height pixels of out_ch 8-bit samples. */
static enum codec_status compress_run(struct jpeg_enc *e, const uint8_t *src, int width, int height,
                                      int out_ch, int quality) {
  j_compress_ptr c = &e->cinfo;
  if (setjmp(e->fail.jmp)) return e->fail.status;
  jpeg_create_compress(c);
  e->dest = (struct jpeg_destination_mgr){NULL, 0, dest_init, dest_empty, dest_term};
  e->progress.progress_monitor = on_compress_progress;
  c->dest = &e->dest;
  c->progress = &e->progress;
  c->image_width = (JDIMENSION)width;
  c->image_height = (JDIMENSION)height;
  compress_settings(c, out_ch, quality);
  jpeg_start_compress(c, TRUE);
  size_t stride = (size_t)width * (size_t)out_ch;
  while (c->next_scanline < c->image_height) {
    JSAMPROW rows[ENCODE_ROWS];
    JDIMENSION n = c->image_height - c->next_scanline;
    n = n < ENCODE_ROWS ? n : ENCODE_ROWS;
    for (JDIMENSION i = 0; i < n; i++)
      rows[i] = (JSAMPROW)(src + (size_t)(c->next_scanline + i) * stride);
    jpeg_write_scanlines(c, rows, n);
  }
  jpeg_finish_compress(c);
  return CODEC_OK;
}

/* Writes 8-bit gray (1 or 2 channels in) or RGB (3 or 4 in). 16-bit samples are scaled to 8 bits
 * with rounding, alpha is composited over white and dropped, both in one step so there is a single
 * rounding (codec_to_8bit, shared with the WebP encoder). The output carries no EXIF, since the
 * pixels are already upright. The compressor is fed ENCODE_ROWS rows at a time, with a progress
 * monitor that asks the thread's cancellation hook before each: TurboJPEG writes a whole image in
 * one call, with no hook. The file grows in a codec_buf. */
enum codec_status codec_jpeg_encode(const struct codec_image *img, int quality, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen) {
  if (img->width > JPEG_MAX_SIDE || img->height > JPEG_MAX_SIDE) {
    codec_msgf(msg, msglen, "JPEG cannot hold a %dx%d image; the largest side is %d pixels",
               img->width, img->height, JPEG_MAX_SIDE);
    return CODEC_UNSUPPORTED;
  }
  int out_ch = img->channels <= 2 ? 1 : 3;
  int direct = img->depth == 8 && (img->channels == 1 || img->channels == 3);
  uint8_t *converted = NULL;
  enum codec_status st = direct ? CODEC_OK : codec_to_8bit(img, out_ch, 0, &converted, &out_ch);
  if (st == CODEC_NOMEM) codec_msgf(msg, msglen, "out of memory converting the image for JPEG");
  if (st != CODEC_OK) return st;
  struct jpeg_enc *e = codec_malloc(sizeof *e);
  if (e == NULL) {
    codec_free(converted);
    codec_msgf(msg, msglen, "out of memory encoding the JPEG image");
    return CODEC_NOMEM;
  }
  memset(e, 0, sizeof *e);
  e->cinfo.err = jpeg_std_error(&e->err);
  e->err.error_exit = on_compress_error;
  e->err.output_message = on_output_message;
  e->cinfo.client_data = e; /* jpeg_create_compress keeps err and client_data */
  st = compress_run(e, direct ? img->pixels : converted, img->width, img->height, out_ch, quality);
  jpeg_destroy_compress(&e->cinfo);
  codec_free(converted);
  if (st == CODEC_OK)
    codec_buf_take(&e->file, out, outlen);
  else
    codec_free(e->file.data);
  if (st != CODEC_OK && st != CODEC_CANCELLED) codec_msgf(msg, msglen, "%s", e->fail.text);
  codec_free(e);
  return st;
}

/* ---- the format's descriptor ---- */

static int jpeg_probe(const uint8_t *buf, size_t len, struct codec_shape *out) {
  struct codec_jpeg_info info;
  struct codec_limits none = {0, 0, 0};
  char msg[128];
  if (codec_jpeg_probe(buf, len, &none, &info, msg, sizeof(msg)) != CODEC_OK) return -1;
  *out = (struct codec_shape){info.width, info.height, info.channels, 8};
  return 0;
}

/* libjpeg's file, with o->icc inserted as APP2 segments when there is one (icc.c). */
static enum codec_status jpeg_encode(const struct codec_image *img,
                                     const struct codec_encode_opts *o, uint8_t **out,
                                     size_t *outlen, char *msg, size_t msglen) {
  enum codec_status st = codec_jpeg_encode(img, o->quality, out, outlen, msg, msglen);
  if (st != CODEC_OK || o->icc == NULL) return st;
  uint8_t *with;
  size_t with_len;
  st = codec_jpeg_insert_icc(*out, *outlen, o->icc, o->icc_len, &with, &with_len);
  codec_free(*out);
  *out = with;
  *outlen = with_len;
  if (st != CODEC_OK) codec_msgf(msg, msglen, "could not add the ICC profile to the JPEG file");
  return st;
}

static double jpeg_decode_ns(const uint8_t *buf, size_t len, const struct codec_shape *s) {
  (void)buf;
  return (double)s->width * s->height * s->channels * COST_DECODE_JPEG_NS_SAMPLE +
         (double)len * COST_DECODE_JPEG_NS_BYTE;
}

/* Per colour sample (alpha dropped): three a pixel, one for gray. */
static double jpeg_encode_ns(const struct codec_encode_opts *o, const struct codec_shape *s) {
  static const double q[] = COST_JPEG_QUALITY, ns[] = COST_JPEG_NS_SAMPLE;
  return (double)s->width * s->height * (s->channels >= 3 ? 3 : 1) *
         codec_interpolate(q, ns, CODEC_NELEM(q), o->quality);
}

const struct codec_format_desc codec_jpeg_format = {
    .name = "jpeg",
    .title = "JPEG",
    .mime = "image/jpeg",
    .mimes = "image/jpg image/pjpeg",
    .exts = "jpg jpeg jpe jfif",
    .lib = "libjpeg-turbo",
    .reader = "libjpeg-turbo",
    .writer = "libjpeg-turbo",
    .quality = 1,
    .sniff = jpeg_sniff,
    .probe = jpeg_probe,
    .decode = codec_jpeg_decode,
    .icc = codec_jpeg_icc,
    .encode = jpeg_encode,
    .decode_ns = jpeg_decode_ns,
    .encode_ns = jpeg_encode_ns,
};

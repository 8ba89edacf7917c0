/* codecs: image files to and from interleaved pixels, through the format table: each format is
 * a descriptor in its own file under formats/ (libpng, libjpeg-turbo, libwebp, libheif, libjxl,
 * libtiff, giflib, ...) and a line of CODEC_FORMATS. codecs/ holds the table and the front
 * (table.c), blurd's own coders (deflate-RLE, PNG inflate and unfilter, the PNG writer, the VP8
 * encoder), colour profiles, EXIF, and the runtime they share: allocator, output buffer,
 * cancellation. Decoders read the header and check the caller's limits before allocating any
 * pixel buffer, and report failures as a status plus a sentence a person understands. */
#ifndef BLURD_CODECS_H
#define BLURD_CODECS_H

#include <stddef.h>
#include <stdint.h>

/* The formats, in the order their sniffs are tried and the docs list them: one line each, and
 * the format's own file fills its struct codec_format_desc (codec_<name>_format). RAW and NPY
 * are outputs only (data.c): samples for programs, not pictures. */
#define CODEC_FORMATS(X)                                                                           \
  X(PNG, png)                                                                                      \
  X(JPEG, jpeg)                                                                                    \
  X(WEBP, webp)                                                                                    \
  X(HEIC, heic)                                                                                    \
  X(AVIF, avif)                                                                                    \
  X(JXL, jxl)                                                                                      \
  X(TIFF, tiff)                                                                                    \
  X(GIF, gif)                                                                                      \
  X(RAW, raw)                                                                                      \
  X(NPY, npy)

enum codec_format {
  CODEC_NONE = 0,
#define X(id, name) CODEC_##id,
  CODEC_FORMATS(X)
#undef X
      CODEC_NFORMATS
};

/* clang-format off */
#define CODEC_STATUSES(X)                                                    \
  X(OK,          "ok")                                                       \
  X(UNKNOWN,     "the data is in no format this service reads")              \
  X(CORRUPT,     "the image data is corrupt or truncated")                    \
  X(TOO_LARGE,   "the image is larger than the configured limits")            \
  X(UNSUPPORTED, "the image uses a feature this service does not support")    \
  X(NOMEM,       "out of memory")                                             \
  X(CANCELLED,   "the work was stopped before it finished")
/* clang-format on */

enum codec_status {
#define X(e, msg) CODEC_##e,
  CODEC_STATUSES(X)
#undef X
};

struct codec_limits {
  uint32_t max_width;  /* pixels; 0 means no limit */
  uint32_t max_height; /* pixels; 0 means no limit */
  uint64_t max_pixels; /* width*height; 0 means no limit */
};

/* A decoded image: 1 (gray), 2 (gray+alpha), 3 (RGB) or 4 (RGBA) channels of 8- or 16-bit
 * samples in host byte order. Palettes are expanded to RGB, or RGBA when they carry tRNS; gray
 * below 8 bits becomes 8 bits; tRNS on gray or RGB becomes an alpha channel. JPEG EXIF
 * orientation is applied, so the pixels are upright. WebP, lossy or lossless, decodes to 8-bit
 * RGB, or RGBA when it has alpha; an animated WebP is refused as unsupported. */
struct codec_image {
  uint8_t *pixels;          /* owned; free with codec_image_free() */
  int width, height;        /* pixels */
  int channels;             /* 1..4, alpha last when 2 or 4 */
  int depth;                /* 8 or 16 bits per sample, host byte order */
  enum codec_format format; /* the format it was decoded from */
  int orientation;          /* EXIF orientation found in the file (1..8), already applied */
};

/* A way to stop a decode or an encode part-way, given to codec_cancel_set. stop(arg) returns
 * nonzero when the work should stop; it may be called from any thread the codec uses. */
struct codec_cancel {
  int (*stop)(void *arg);
  void *arg;
};

/* Makes c the calling thread's cancellation hook (NULL: none), until it is set again; c must
 * outlive its use. Every codec_decode, codec_encode, codec_encode_held and codec_to_srgb the
 * thread then runs asks it at least every few milliseconds of work, on whatever threads or
 * processes the work runs (codecs/stop.c), and once it says stop frees what the call holds and
 * returns CODEC_CANCELLED (codec_to_srgb: -1), never a result made from unfinished work. Work
 * inside a library with no hook of its own is stopped from outside: libdeflate on a thread
 * cancelled where it stands, libwebp's encoder in a child process that is killed. */
void codec_cancel_set(const struct codec_cancel *c);

/* Whether codec_decode reads the PNG file buf itself (libdeflate's inflate and blurd's unfilter:
 * 8- and 16-bit gray, gray+alpha, RGB and RGBA, not interlaced, no tRNS) rather than through
 * libpng's rows. */
int codec_png_direct(const uint8_t *buf, size_t len);
/* The generic sentence for status s. */
const char *codec_status_msg(enum codec_status s);

/* Decodes buf into out (zeroed first). On failure out holds no memory, and when msg is not NULL
 * it receives a sentence that says what was wrong (e.g. "width 20000 exceeds the limit of
 * 16384"). Returns CODEC_OK or the failure: CODEC_CANCELLED when the thread's hook said stop
 * (codec_cancel_set). */
enum codec_status codec_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                               struct codec_image *out, char *msg, size_t msglen);

/* PNG row filters: AUTO is the one each compression level uses (png_write.c's plans); ADAPTIVE
 * picks one of PNG's five per row, as libpng does. */
enum codec_png_filter {
  CODEC_PNG_FILTER_AUTO = 0,
  CODEC_PNG_FILTER_NONE,
  CODEC_PNG_FILTER_SUB,
  CODEC_PNG_FILTER_UP,
  CODEC_PNG_FILTER_PAETH,
  CODEC_PNG_FILTER_ADAPTIVE
};

/* What makes the zlib stream of a PNG at compression level (0..9): "deflate-rle" (blurd's
 * run-length coder, codecs/deflate_rle.c) or "libdeflate" (png_write.c's plans). */
const char *codec_png_deflater(int compression);

/* The compression levels the measurements chose for PNG output, images and /variance's 16-bit
 * maps (docs/methods.md, "PNG output"): level 2, the run-length coder after paeth, costs a small
 * part of libdeflate's level 6 (images) and 3 (maps) for files of about their size. Both are also
 * written as text, for the API's parameter tables. */
#define CODEC_PNG_COMPRESSION_DEFAULT         2
#define CODEC_PNG_COMPRESSION_DEFAULT_STR     "2"
#define CODEC_PNG_MAP_COMPRESSION_DEFAULT     2
#define CODEC_PNG_MAP_COMPRESSION_DEFAULT_STR "2"

/* The effort of lossy WebP, AVIF and JPEG XL when none is given (docs/methods.md, "WebP effort").
 */
#define CODEC_EFFORT_DEFAULT 2

/* Fields after the first four are optional: a zeroed field keeps the behaviour it describes as
 * the default, so callers that set only the first four get what they always got. */
struct codec_encode_opts {
  enum codec_format format; /* CODEC_PNG, CODEC_JPEG, CODEC_WEBP, CODEC_RAW or CODEC_NPY */
  int quality;              /* JPEG and lossy WebP quality 1..100 */
  int compression;          /* PNG level 0 (stored) .. 9 (smallest) */
  int lossless;             /* WebP: lossless, every sample exact (quality unused); 0: lossy */
  enum codec_png_filter png_filter; /* PNG: AUTO (the level's own), or one strategy for all rows */
  int png_libpng; /* PNG: encode with libpng and zlib instead (tests and benchmarks compare) */
  int effort;     /* lossy WebP: libwebp's method, 0 (fastest) .. 6 (smallest); needs effort_set */
  int effort_set; /* 0: CODEC_EFFORT_DEFAULT */
  const uint8_t *icc; /* an ICC profile to embed (PNG iCCP, JPEG APP2, WebP ICCP), or NULL */
  size_t icc_len;     /* its bytes; the caller keeps ownership */
  /* Threads for a large PNG at levels 1 and 2, or NULL: parallel(parallel_ctx, n, fn, arg) calls
   * fn(arg, begin, end) over [0, n) and returns when every call has (the CPU backend's pool). */
  void (*parallel)(void *ctx, int n, void (*fn)(void *arg, int begin, int end), void *arg);
  void *parallel_ctx;
  /* When not NULL, set after a successful encode to the encoder that wrote the file: the
   * format's lib, or one of its own ("blurd-vp8" for a smooth RGB WebP at effort 2), or
   * codec_encode_held's analyser's name. */
  const char **encoder;
};

/* Encodes img. PNG keeps channels and depth. JPEG is 8-bit gray or RGB: 16-bit samples are
 * scaled to 8 bits, and alpha is composited over white. WebP is 8-bit RGB or RGBA: 16-bit samples
 * are scaled to 8 bits, gray becomes RGB and alpha is kept; a lossless WebP holds every sample of
 * an 8-bit RGB or RGBA image exactly, transparent pixels' colours included. On success *out is a
 * malloc'd buffer owned by the caller, of *outlen bytes. Returns CODEC_OK, CODEC_NOMEM,
 * CODEC_UNSUPPORTED, or CODEC_CANCELLED when the thread's hook said stop (codec_cancel_set). */
enum codec_status codec_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                               uint8_t **out, size_t *outlen, char *msg, size_t msglen);

/* ---- An image the caller holds elsewhere (a GPU's memory) ----
 * Lossy WebP at effort 2 codes an 8-bit RGB image whose luma is smooth with blurd's own VP8
 * encoder (codecs/vp8_enc.c). Its first pass (the YUV 4:2:0 planes, the test of smoothness, and
 * every macroblock's prediction, transforms, quantisation and reconstruction) may run where the
 * image is, given as an analyser: the GPU backend's is gpu/vp8.cu, the twin of vp8_enc.c's, whose
 * arrays give the file the CPU would write. */

/* A frame's first pass, macroblocks in raster order (ceil(width / 16) by ceil(height / 16)). */
struct codec_vp8_mbs {
  int width, height, quality; /* quality: the VP8 encoder's, one below the one asked for */
  const uint8_t *modes;       /* per macroblock: luma mode | chroma mode << 2 | skip << 4 */
  const int16_t *levels;      /* 25 blocks of 16 per macroblock: Y 0..15, U 16..19, V 20..23,
                                 Y2 24, in zigzag order */
  const int8_t *last;         /* per block: its last nonzero zigzag position (first - 1: none) */
  /* The tokens' counts, or NULL (then counted from the arrays): for each of VP8's 1056 token
   * probabilities, [block type][band][context][node] as RFC 6386 orders them, the 0s then the
   * 1s its tree node codes over the frame's coded blocks (block types: 0 luma after Y2, 1 Y2,
   * 2 chroma). */
  const uint32_t *stats;
};

/* What an analyser's first pass is asked for. */
struct codec_vp8_pass {
  int width, height;           /* the image's */
  int smooth_step, smooth_per; /* smooth: at most width * height / smooth_per pixels (rounded
                                  down) differ from their left neighbour's luma by more than
                                  smooth_step levels */
  int q[3][3][2]; /* the quantisers: [Y, Y2, UV][step, bias, 2^16 / step rounded up][DC, AC]; a
                     coefficient's level is ((|c| + bias) * that) >> 16, at most 2048 */
};

/* A first pass of blurd's VP8 encoder over an 8-bit RGB image that the caller holds. analyse(arg,
 * p, out), given out with its width, height and quality, returns 1 when the image is smooth, with
 * out's modes, levels, last and stats set (arrays the analyser owns, valid until it is called
 * again); 0 when it is not smooth, or when the pass could not run (the image is then encoded from
 * its pixels). */
struct codec_vp8_analyser {
  int (*analyse)(void *arg, const struct codec_vp8_pass *p, struct codec_vp8_mbs *out);
  void *arg;
  const char *name; /* what codec_encode_opts.encoder reports for a file made from its pass */
};

/* Encodes an image whose pixels the caller holds elsewhere (img gives its shape; img->pixels is
 * not read), where a codec can do so from an analyser's first pass: lossy WebP at effort 2 of a
 * smooth 8-bit RGB image, the same file codec_encode writes from the pixels. Returns
 * CODEC_UNSUPPORTED, having written nothing, when no codec takes the image that way: another
 * format or setting, an image that is not smooth, a frame too large for blurd's VP8 encoder, or
 * an analyser that could not run; the caller then brings the pixels to the host and calls
 * codec_encode. Else as codec_encode, *o->encoder set to an->name after a success. */
enum codec_status codec_encode_held(const struct codec_image *img,
                                    const struct codec_encode_opts *o,
                                    const struct codec_vp8_analyser *an, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen);

/* ---- ICC colour profiles (icc.c) ---- */

#define CODEC_ICC_MAX (4u << 20) /* bytes: a larger profile is treated as absent */

/* The ICC profile embedded in the PNG (iCCP), JPEG (APP2 ICC_PROFILE segments) or WebP (ICCP)
 * file in buf, read from the bytes alone, so it works whichever decoder runs (the GPU's too).
 * On success *icc is a malloc'd copy (free it with free()) of *icc_len bytes, or NULL when the
 * file has none, or one that is malformed, inconsistent or over CODEC_ICC_MAX. Returns CODEC_OK,
 * or CODEC_NOMEM. */
enum codec_status codec_icc_read(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len);

/* The colour channels an ICC profile describes: 1 (GRAY), 3 (RGB) or 4 (CMYK); 0 when icc is
 * NULL, malformed (its header must give its own length and "acsp") or of another space. The
 * encoders embed codec_encode_opts.icc only where this matches the output (1 for gray PNG and
 * JPEG, 3 for colour; WebP is always 3), so a CMYK or gray profile is never attached to RGB. */
int codec_icc_colours(const uint8_t *icc, size_t len);

/* Copies the JPEG file jpeg with icc inserted as APP2 "ICC_PROFILE" segments after SOI (and an
 * APP0 right after it), split into as many as it takes (at most 255): for JPEG files made by
 * another encoder (nvJPEG). On success *out is malloc'd (free()) and *outlen its size. Returns
 * CODEC_OK, CODEC_NOMEM, or CODEC_UNSUPPORTED when jpeg is not a JPEG or icc is empty or over
 * 255 segments. */
enum codec_status codec_jpeg_insert_icc(const uint8_t *jpeg, size_t len, const uint8_t *icc,
                                        size_t icc_len, uint8_t **out, size_t *outlen);

/* colorspace=srgb: converts img's samples in place from the profile icc to sRGB with Little CMS
 * (perceptual intent; alpha copied; gray images to a gray profile with sRGB's tone curve), so
 * the caller then drops the profile. Returns 1 when it converted, 0 when it left the pixels as
 * they are: no profile, one lcms2 cannot read, or one whose colour space is not the image's; -1
 * when the thread's hook said stop (codec_cancel_set), with the pixels part converted. */
int codec_to_srgb(struct codec_image *img, const uint8_t *icc, size_t icc_len);

/* RAW and NPY through codec_encode write img's 8- or 16-bit samples as they are (little-endian;
 * npy: a NumPy 1.0 file of dtype uint8 or <u2 and shape (height, width[, channels])). This
 * writes float32 samples (width * height * channels of them, interleaved) the same way, npy
 * dtype <f4. On success *out is malloc'd (free()). Returns CODEC_OK, CODEC_NOMEM, or
 * CODEC_UNSUPPORTED for another format or a bad shape. */
enum codec_status codec_encode_float(const float *samples, int width, int height, int channels,
                                     enum codec_format f, uint8_t **out, size_t *outlen, char *msg,
                                     size_t msglen);

/* JPEG output keeps full-resolution chroma (4:4:4) from this quality up and is 4:2:0 below, as
 * libvips chooses; every JPEG encoder of blurd follows this rule. */
#define CODEC_JPEG_FULL_CHROMA 90

struct codec_jpeg_info { /* what codec_jpeg_probe found in a JPEG's headers */
  int width, height;     /* as stored, before the orientation is applied */
  int channels;          /* 1 (gray) or 3 (colour), as codec_decode would give */
  int orientation;       /* EXIF orientation, 1..8 */
  int progressive;       /* a multi-scan (progressive) file */
  const char *chroma;    /* "4:4:4", "4:2:2", "4:2:0", "4:4:0", "gray", or "other" */
  int plain;    /* 8-bit Huffman DCT, YCbCr or gray, 4:4:4/4:2:2/4:2:0/4:4:0 chroma: the files
                   other decoders (nvJPEG) decode as libjpeg does; 0 for arithmetic coding, 12-bit
                   samples, Adobe RGB, unusual sampling */
  int complete; /* the scans hold only the markers that belong there, up to an EOI: the file is
                   not cut short, nor damaged in a way a marker scan can see */
};

/* Reads the headers of the JPEG file in buf up to its first scan, with codec_decode's checks and
 * sentences: a file refused here (corrupt headers, CMYK, over the limits) is refused by
 * codec_decode in the same words. It decodes no pixels, so it costs microseconds. On success
 * info describes the file. Returns CODEC_OK, or codec_decode's failure. */
enum codec_status codec_jpeg_probe(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_jpeg_info *info, char *msg, size_t msglen);

struct codec_shape { /* what codec_probe reads from a file's header */
  int width, height; /* pixels, as stored */
  int channels;      /* as codec_decode would give; a PNG palette counts 4 (tRNS may follow) */
  int depth;         /* bits a sample as codec_decode would give: 16 for a 16-bit PNG, else 8 */
};

/* ---- Coded pictures for a video decoder ----
 * A format whose image is made of video-coded pictures (HEIC: HEVC intra frames in a grid) can
 * hand them over as they are, for a decoder elsewhere (the GPU's video engines) that then converts
 * them as the format's own decoder does, to the same pixels. */

struct codec_yuv { /* YCbCr to RGB: R = Y + r_cr Cr; G = Y + g_cb Cb + g_cr Cr; B = Y + b_cb Cb */
  float r_cr, g_cb, g_cr, b_cb;
  int full;     /* full range; else Y and C are expanded from the video range first */
  int identity; /* matrix 0: G = Y, B = Cb, R = Cr */
};

struct codec_picture { /* one coded picture: stream[off, off + len) of its image */
  size_t off, len;
  int x, y; /* its top-left pixel in the image */
};

struct codec_pictures {      /* an image as coded pictures (the format's pictures verb) */
  uint8_t *stream;           /* every picture's Annex B bytes (its configuration's NAL units,
                                then its own), one after another; codec_malloc'd */
  struct codec_picture *pic; /* n of them, row by row; codec_malloc'd */
  int n;
  int width, height;  /* the image as stored (before the orientation) */
  int tile_w, tile_h; /* every picture's size (the image's, for one picture) */
  int bits;           /* the pictures' bit depth (8, 10, 12): depth 16 above 8 */
  int orientation;    /* EXIF 1..8, the transforms still to apply */
  int has_k;          /* k is the item's (its colr nclx); else each picture's own matrix */
  struct codec_yuv k;
  /* The conversion of a picture's own matrix_coefficients and full_range_flag (its VUI), as
   * the format's decoder does it: 1, or 0 for a matrix it does not convert here. */
  int (*coeffs)(int matrix, int full, struct codec_yuv *k);
};

/* Frees what p holds; safe to call twice. */
void codec_pictures_free(struct codec_pictures *p);

/* ---- The format table (formats.c) ----
 * A format is its file, which fills a struct codec_format_desc, and one line of CODEC_FORMATS.
 * Everything that names, sniffs, probes, decodes, encodes or prices a format reads the table:
 * codec_decode, codec_encode and codec_encode_held here, and outside codecs/ the upload's accepted
 * types, content negotiation, format= and its docs, the command line's file names, /readyz and the
 * cost model.
 * A decoder reads the whole file in buf: out is zeroed first, limits are checked from the header
 * before any pixel buffer is allocated, a failure leaves out holding no memory and puts a sentence
 * in msg (when not NULL), the thread's hook (codec_cancel_set) makes it return CODEC_CANCELLED,
 * and out->orientation is the EXIF value of the transform already applied (1: none). An ICC
 * reader sets *icc to a malloc'd profile of *icc_len bytes, or NULL when the file has none or it
 * cannot be read, and returns CODEC_OK or CODEC_NOMEM. An encoder takes an image codec_encode
 * has checked and on success sets *out to a malloc'd file owned by the caller. */

struct codec_format_desc {
  const char *name;   /* format= and the logs: "jpeg" */
  const char *title;  /* how the docs name it: "JPEG" */
  const char *mime;   /* its media type: "image/jpeg" */
  const char *mimes;  /* other media types an upload may say, space-separated ("image/jpg") */
  const char *exts;   /* file name extensions, space-separated, the first for files written; format=
                         takes them too */
  const char *lib;    /* the library that reads and writes it ("libpng"): the codec's name */
  const char *reader; /* what decodes it, as /readyz says; NULL: not an input */
  const char *writer; /* what encodes it, as /readyz says; NULL: not an output */
  enum codec_format as; /* what format=input answers a file of it in: itself (CODEC_NONE) or
                           another (HEIC answers JPEG: browsers cannot show it) */
  int data;             /* samples for programs (raw, npy), not a picture */
  int exact16;          /* its encoder keeps 16-bit gray samples exactly (a /variance map) */
  int quality;          /* its encoder takes quality (1..100) */
  int lossless;         /* its encoder takes lossless=true */
  int rgb_only;         /* it holds colour only: an ICC profile must describe RGB to go in */
  /* 1 when buf starts like a file of it (any len; NULL: 0). NULL: never sniffed (outputs). */
  int (*sniff)(const uint8_t *buf, size_t len);
  /* Width and height (upright), channels and depth from the header, without decoding pixels or
   * checking limits: microseconds. Returns 0, or -1 when the header cannot be read. */
  int (*probe)(const uint8_t *buf, size_t len, struct codec_shape *out);
  enum codec_status (*decode)(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                              struct codec_image *out, char *msg, size_t msglen);
  /* What decodes buf, when that is not always lib ("libdeflate"); NULL: lib. */
  const char *(*decoder)(const uint8_t *buf, size_t len);
  /* The file's ICC profile as codec_icc_read gives it; NULL: it never has one. */
  enum codec_status (*icc)(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len);
  enum codec_status (*encode)(const struct codec_image *img, const struct codec_encode_opts *o,
                              uint8_t **out, size_t *outlen, char *msg, size_t msglen);
  /* codec_encode_held's encoder, for an image held elsewhere (o checked, o->icc kept only when
   * it fits the file); NULL: the format has none. */
  enum codec_status (*encode_held)(const struct codec_image *img, const struct codec_encode_opts *o,
                                   const struct codec_vp8_analyser *an, uint8_t **out,
                                   size_t *outlen, char *msg, size_t msglen);
  /* The cost model's terms, in ns of one core (formats/cost_table.h, measured by
   * scripts/cost-calibration.sh): decoding buf (of shape s) beyond a stored PNG's decode, and
   * encoding an image of shape s with o beyond a stored PNG's encode. NULL: none. */
  /* The primary image's coded pictures (struct codec_pictures), checked as decode checks the
   * file, when they alone make the image: CODEC_OK; else CODEC_UNSUPPORTED with the reason in
   * *why (a static phrase: "an alpha plane"), or, *why NULL, decode's own failure (decode then
   * says it in its words). NULL: the format has none. */
  enum codec_status (*pictures)(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                struct codec_pictures *out, const char **why);
  double (*decode_ns)(const uint8_t *buf, size_t len, const struct codec_shape *s);
  double (*encode_ns)(const struct codec_encode_opts *o, const struct codec_shape *s);
};

/* Each format's descriptor, defined at the end of its file (codec_png_format in png.c, ...). */
#define X(id, name) extern const struct codec_format_desc codec_##name##_format;
CODEC_FORMATS(X)
#undef X
/* Format f's descriptor, or NULL for CODEC_NONE or a value past the table. */
const struct codec_format_desc *codec_format(enum codec_format f);
/* The format of buf from its magic bytes, or CODEC_NONE. */
enum codec_format codec_sniff(const uint8_t *buf, size_t len);
/* f's name ("png"), or NULL. */
const char *codec_format_name(enum codec_format f);
/* The format that name ("png", "jpeg") or one of its extensions ("jpg") names, exactly (lower
 * case), or CODEC_NONE. */
enum codec_format codec_format_from_name(const char *name);
/* The format of a file called path, by its extension (any case), or CODEC_NONE. */
enum codec_format codec_format_from_path(const char *path);
/* The input format whose media type, or one of its others, is the media type of content_type
 * (before any ';', any case), or CODEC_NONE. */
enum codec_format codec_format_from_mime(const char *content_type);
/* What codec_decode decodes buf with ("libpng", "libdeflate"), or NULL when no format reads it. */
const char *codec_decoder(const uint8_t *buf, size_t len);
/* f's media type ("image/png"), or NULL. */
const char *codec_mime(enum codec_format f);
/* The formats that want(d) picks, each as word(d) says, as "a, b, c" with last before the last
 * one (" or ", " and "), into buf. Returns buf. */
char *codec_format_list(char *buf, size_t n, int (*want)(const struct codec_format_desc *d),
                        const char *(*word)(const struct codec_format_desc *d), const char *last);
/* The titles of the inputs (mime == 0) or their media types, as "PNG, JPEG, WebP or GIF" (titles)
 * or "image/png, image/jpeg or image/gif" (mime != 0), into buf. Returns buf. */
char *codec_inputs_text(char *buf, size_t n, int mime);

/* Reads the width, height, channels and depth of the file in buf from its header (the format's
 * probe) without decoding pixels or checking limits: microseconds, for estimating a request's
 * cost before it is decoded. Returns 0, or -1 when the header cannot be read (codec_decode then
 * says why). */
int codec_probe(const uint8_t *buf, size_t len, struct codec_shape *out);
/* The cost model's terms for buf's decode and for an encode with o (the formats' decode_ns and
 * encode_ns), in ns of one core; 0 where the format has none. */
double codec_decode_cost_ns(const uint8_t *buf, size_t len, const struct codec_shape *s);
double codec_encode_cost_ns(const struct codec_encode_opts *o, const struct codec_shape *s);

/* Reads the file at path and decodes it without limits (for tools and tests; the service
 * decodes uploads with codec_decode). Returns CODEC_OK, the decoder's failure, or CODEC_UNKNOWN
 * when the file cannot be read. */
enum codec_status codec_decode_file(const char *path, struct codec_image *out);

/* malloc(n), with the whole 2 MB pages inside the buffer advised into transparent huge pages
 * (madvise), as the codecs' own pixel buffers are: writing a fresh 3840x2160 RGB image then takes
 * a dozen page faults, not 6,000, which in a virtual machine cost microseconds each. Free it with
 * free(). */
void *codec_alloc_pixels(size_t n);

/* Frees img's pixels and sets the pointer to NULL; safe to call twice. */
void codec_image_free(struct codec_image *img);

/* ---- Tests only: the service never calls this. ----
 * Allocation-failure injection. After n more allocations made by codecs/ succeed, the next one
 * fails, once; a negative n disarms it. It counts the allocations of codecs/ itself, of libpng
 * and zlib inside the PNG codec, and the requests libjpeg makes through its memory manager while
 * decoding; not the memory manager's own setup, nor what libjpeg allocates when encoding (its file
 * is counted), nor libwebp's own working memory (the WebP codec's pixel and output buffers are
 * counted). Returns the countdown before the call: -1 when nothing was armed or the failure has
 * happened. The countdown is shared by all threads, so arm it only in single-threaded tests. */
long codec_test_fail_alloc(long n);

#endif

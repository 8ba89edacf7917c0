/* codecs_int.h: the per-format entry points of codecs/, not part of the public interface.
 *
 * codecs.c dispatches to the per-format decoders and encoders below (png.c and png_write.c,
 * jpeg.c, webp.c, data.c) after it has checked the arguments; exif.c holds the EXIF orientation
 * parser and the code that turns decoded pixels upright, icc.c the CMYK conversion; png.c's
 * decoder uses png_inflate.c's chunk walker and inflater and png_unfilter.c's row filters. The
 * helpers all of these share are in common.h (common.c). unit_codecs.c includes this header to test
 * the EXIF parser and the libpng decoder directly. */
#ifndef BLURD_CODECS_INT_H
#define BLURD_CODECS_INT_H

#include "common.h"

/* Per-format decoders: buf holds the whole file, out is zeroed by the caller. On failure out
 * holds no memory and msg (when not NULL) has a sentence. */
enum codec_status codec_png_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_image *out, char *msg, size_t msglen);
enum codec_status codec_jpeg_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen);
enum codec_status codec_webp_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen);

/* png_inflate.c: a copy of the PNG file buf whose pixel data libdeflate has inflated and stored
 * again uncompressed in one IDAT, for libpng to decode faster. Returns CODEC_OK with *out
 * (codec_malloc'd; codec_free it) of *outlen bytes, CODEC_UNSUPPORTED when the file should be
 * decoded as it is (interlaced, oversized, laid out or compressed unexpectedly), CODEC_NOMEM, or
 * CODEC_CANCELLED (the thread's hook said stop). */
enum codec_status codec_png_rewrap(const uint8_t *buf, size_t len, uint8_t **out, size_t *outlen);

/* Bytes libpng may allocate for one ancillary chunk (png.c); png.c's own path through the pixel
 * data takes files whose chunks after the pixel data stay under it. */
#define CODEC_PNG_CHUNK_MAX (8u << 20)

/* Where a PNG file's pixel data lies (png_inflate.c). */
struct codec_png_layout {
  size_t first, end; /* [first, end): the IDAT chunks, consecutive */
  size_t zlen;       /* the data bytes they hold */
  int trns;          /* a tRNS chunk comes before them */
  int tidy;          /* after them only ancillary chunks (letters, <= CODEC_PNG_CHUNK_MAX), then
                      * an empty IEND, all within the file */
};

/* Walks the chunks of the PNG file buf from its signature to IEND. Returns 0 with *l filled, or
 * -1 when the IDAT chunks are missing, not consecutive, or a chunk runs past the file's end. */
int codec_png_layout(const uint8_t *buf, size_t len, struct codec_png_layout *l);

/* Inflates the joined IDAT data of buf (as l describes it) with libdeflate into raw, which must
 * receive exactly n bytes; zlib's Adler-32 after the stream is checked only when adler is set
 * (png.c's own path skips it as libpng does: skip_data_checksums). Returns CODEC_OK,
 * CODEC_NOMEM, CODEC_CANCELLED (the thread's hook said stop: raw is then part written), or
 * CODEC_CORRUPT with a sentence in msg (when not NULL) for a stream that is damaged or inflates
 * to fewer or more than n bytes. */
enum codec_status codec_png_inflate(const uint8_t *buf, const struct codec_png_layout *l, int adler,
                                    uint8_t *raw, size_t n, char *msg, size_t msglen);

/* png_unfilter.c: undoes PNG's row filters in place. data holds CODEC_PNG_ROOM_ROWS * stride
 * bytes of room, then height rows, each a filter-type byte and stride filtered bytes of pixels of
 * bpp bytes (1..8); it receives height packed rows of stride bytes from its start. swap (16-bit
 * samples on a little-endian host) swaps each sample's two bytes. Returns CODEC_OK,
 * CODEC_CANCELLED when the thread's hook said stop (it is asked every megabyte of rows), or
 * CODEC_CORRUPT with a sentence naming the row whose filter type is not 0..4 (the rows before it
 * are then undone, the rest not). codec_png_unfilter_c does the same in plain C, without SIMD: the
 * reference its tests compare with. */
#define CODEC_PNG_ROOM_ROWS 3
enum codec_status codec_png_unfilter(uint8_t *data, size_t height, size_t stride, unsigned bpp,
                                     int swap, char *msg, size_t msglen);
enum codec_status codec_png_unfilter_c(uint8_t *data, size_t height, size_t stride, unsigned bpp,
                                       int swap, char *msg, size_t msglen);

/* WebP's width, height and channels from its header (WebPGetFeatures). Returns 0, or -1. */
int codec_webp_probe(const uint8_t *buf, size_t len, struct codec_shape *out);

/* Per-format encoders; img has been checked (pixels set, sizes >= 1, channels 1..4, depth 8 or
 * 16). On success *out is malloc'd and owned by the caller. */
enum codec_status codec_png_encode(const struct codec_image *img, int compression, uint8_t **out,
                                   size_t *outlen, char *msg, size_t msglen);
/* The PNG encoder on libdeflate (png_write.c): o->compression and o->png_filter in range. */
enum codec_status codec_png_write(const struct codec_image *img, const struct codec_encode_opts *o,
                                  uint8_t **out, size_t *outlen, char *msg, size_t msglen);
/* The zlib stream of in[0..n) as deflate_rle.c makes it (Huffman-coded literals and runs of one
 * byte, fpng's scheme) into out, which holds codec_deflate_rle_bound(n) bytes. Returns its
 * length, or 0 when out of memory. */
size_t codec_deflate_rle_bound(size_t n);
size_t codec_deflate_rle(const uint8_t *in, size_t n, uint8_t *out);
/* The deflate blocks (no zlib header or checksum) of in[s..e) into out, which holds
 * codec_deflate_rle_part_bound(e - s) bytes: the last of them final when last is set, else
 * followed by a sync flush (an empty stored block), so that the parts of a buffer, made apart,
 * join into one stream. Blocks start every 256 KiB from s; a run may reach back to in[s - 1],
 * which must be the stream's byte before the part. Returns the bytes written, 0 when out of
 * memory. */
size_t codec_deflate_rle_part_bound(size_t n);
size_t codec_deflate_rle_part(const uint8_t *in, size_t s, size_t e, int last, uint8_t *out);
/* The same deflate blocks made a piece at a time, for a caller that makes its bytes as it goes
 * (png_write.c filters a block's rows, codes them, and reuses the buffer): codec_rle_new(out)
 * starts a stream at out, which holds codec_deflate_rle_part_bound of all the bytes to come
 * (NULL when out of memory); codec_rle_block codes in[s..e) as the next blocks, one per
 * CODEC_RLE_BLOCK bytes, the last final when last is set, where in[s - 1] must be the stream's
 * byte before unless these are the stream's first; codec_rle_end adds a sync flush when sync is
 * set, frees the stream and returns the bytes written. Pieces of CODEC_RLE_BLOCK bytes but the
 * last give the bytes of codec_deflate_rle_part of the whole. */
#define CODEC_RLE_BLOCK (1u << 18)
struct codec_rle;
struct codec_rle *codec_rle_new(uint8_t *out);
void codec_rle_block(struct codec_rle *c, const uint8_t *in, size_t s, size_t e, int last);
size_t codec_rle_end(struct codec_rle *c, int sync);
/* A 32-bit big-endian value at p (PNG's lengths and CRCs, zlib's Adler-32), read or written. */
uint32_t codec_be32(const uint8_t *p);
void codec_put_be32(uint8_t *p, uint32_t v);
enum codec_status codec_jpeg_encode(const struct codec_image *img, int quality, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen);
/* o->quality is in range for lossy output, as codec_encode checks. */
enum codec_status codec_webp_encode(const struct codec_image *img,
                                    const struct codec_encode_opts *o, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen);
/* 1 if the w x h 8-bit luma plane y (rows stride bytes apart) is smooth in the sense of lossy
 * WebP's one-segment rule at effort 2 (webp.c, docs/methods.md "WebP effort"): at most
 * w * h / CODEC_WEBP_SMOOTH_PER pixels (rounded down) differ from their left neighbour by more
 * than CODEC_WEBP_SMOOTH_STEP levels; else 0. */
int codec_webp_smooth(const uint8_t *y, int stride, int w, int h);
/* Converts the w x h 8-bit RGB pixels rgb (rows stride bytes apart) to YUV 4:2:0 planes y, u and
 * v as libwebp lays them out, if the image is smooth (codec_webp_smooth of its luma): luma as
 * libwebp's, chroma from the plain mean of each 2x2 block (webp_yuv.c). Returns 1 when smooth and
 * every plane is filled; 0 as soon as it is not, or -1 when the thread's hook said stop (asked
 * every 64 rows), with the planes partly written. */
int codec_webp_yuv(const uint8_t *rgb, size_t stride, int w, int h, uint8_t *y, int y_stride,
                   uint8_t *u, uint8_t *v, int uv_stride);
/* Appends a lossy WebP file (RIFF, one VP8 key frame) of the w x h YUV 4:2:0 planes y, u and v
 * (rows y_stride and uv_stride bytes apart) at quality 0..100 to out: blurd's own encoder for
 * smooth images (vp8_enc.c), 16x16 predictors only. When recon is not NULL the loop filter is
 * off and *recon gets the reconstruction (codec_free it): Y, U and V planes of whole macroblocks,
 * rows 16 * ceil(w / 16) and half that apart, which any decoder's output equals. Returns
 * CODEC_OK, CODEC_NOMEM, CODEC_CANCELLED (the thread's hook, asked every macroblock row), or
 * CODEC_TOO_LARGE when the modes' partition passes VP8's 512 KiB. */
enum codec_status codec_vp8_encode(const uint8_t *y, int y_stride, const uint8_t *u,
                                   const uint8_t *v, int uv_stride, int w, int h, int quality,
                                   struct codec_buf *out, uint8_t **recon);
/* codec_vp8_encode's first pass alone, into arrays laid out as struct codec_vp8_mbs's (levels
 * zero beyond each block's last) and, when stats is not NULL, its tokens' counts (VP8_PROBS * 2):
 * what the GPU's twin (gpu/vp8.cu) is compared with. Returns CODEC_OK, CODEC_NOMEM or
 * CODEC_CANCELLED. */
enum codec_status codec_vp8_analyse(const uint8_t *y, int y_stride, const uint8_t *u,
                                    const uint8_t *v, int uv_stride, int w, int h, int quality,
                                    uint8_t *modes, int16_t *levels, int8_t *last, uint32_t *stats);
/* Appends the lossy WebP file (RIFF, one VP8 key frame) of the first pass a to out, the same
 * bytes codec_vp8_encode writes for the planes a was made from. Returns as codec_vp8_encode. */
enum codec_status codec_vp8_write(const struct codec_vp8_mbs *a, struct codec_buf *out);

/* Raw samples or a .npy file of img (data.c); f is CODEC_RAW or CODEC_NPY. */
enum codec_status codec_data_encode(const struct codec_image *img, enum codec_format f,
                                    uint8_t **out, size_t *outlen, char *msg, size_t msglen);

/* Converts width x height CMYK pixels (4 bytes each; inverted: Adobe's convention, 255 is no
 * ink) to 8-bit RGB in place, packed at 3 bytes a pixel from the start of pixels: through the
 * CMYK profile icc with lcms2 when there is one, else each channel (1 - C)(1 - K). Returns
 * CODEC_OK, CODEC_NOMEM (pixels then unchanged) or CODEC_CANCELLED (the thread's hook said stop,
 * which it asks every row: pixels then part converted). */
enum codec_status codec_cmyk_to_rgb(uint8_t *pixels, size_t width, size_t height, int inverted,
                                    const uint8_t *icc, size_t icc_len);

/* The EXIF orientation (1..8) of a JPEG file: the Orientation tag of IFD0 in the first APP1
 * "Exif" segment before the first scan. Returns 1 when there is none or it is malformed; never
 * reads outside jpeg[0..len). */
int codec_exif_orientation(const uint8_t *jpeg, size_t len);

/* The Orientation tag (1..8) of one APP1 payload (starting "Exif\0\0"), or 1 when it has none or
 * it is malformed; never reads outside app1[0..len). */
int codec_exif_parse(const uint8_t *app1, size_t len);

/* Rewrites img's pixels so that an image stored with EXIF orientation o (1..8) is upright;
 * orientations 5..8 swap width and height. Any other o leaves img alone. Returns CODEC_OK, or
 * CODEC_NOMEM or CODEC_CANCELLED (the thread's hook, asked every row) with img unchanged. */
enum codec_status codec_orient(struct codec_image *img, int o);

/* The ICC profiles of PNG (iCCP), JPEG (APP2 ICC_PROFILE segments) and WebP (ICCP), read from
 * the bytes alone (icc.c), as codec_icc_read gives them. */
enum codec_status codec_png_icc(const uint8_t *b, size_t len, uint8_t **icc, size_t *icc_len);
enum codec_status codec_jpeg_icc(const uint8_t *b, size_t len, uint8_t **icc, size_t *icc_len);
enum codec_status codec_webp_icc(const uint8_t *b, size_t len, uint8_t **icc, size_t *icc_len);

/* ---- The formats read and written by heif.c, jxl.c, tiff.c and gif.c ----
 * Each decoder is a function over the whole file in buf, with the same contract as the ones
 * above: out is zeroed first, limits are checked from the header before any pixel buffer is
 * allocated, a failure leaves out holding no memory and puts a sentence in msg (when not NULL),
 * and the thread's hook (codec_cancel_set) makes it return CODEC_CANCELLED. Their images have
 * out->format CODEC_NONE (the format table names them) and out->orientation the EXIF value of
 * the transform already applied (1: none). Each sniff returns 1 when buf starts like its format
 * (0 otherwise; any len, NULL buf gives 0). Each probe fills *out from the header without
 * decoding pixels or checking limits (width and height upright, after the orientation) and
 * returns 0, or -1 when the header cannot be read. Each *_icc sets *icc to a malloc'd ICC profile
 * (free it with free()) of *icc_len bytes, or NULL when the file has none or it cannot be read,
 * and returns CODEC_OK or CODEC_NOMEM. Encoders take an image as codec_encode does (checked:
 * pixels set, sizes >= 1, channels 1..4, depth 8 or 16) and on success set *out to a malloc'd
 * file owned by the caller. */

/* heif.c: HEIC (ftyp brand heic, heix, hevc, hevx, heim or heis; or mif1/msf1 with an hvcC) and
 * AVIF (brand avif or avis; or mif1/msf1 with an av1C). */
int codec_heic_sniff(const uint8_t *buf, size_t len);
int codec_avif_sniff(const uint8_t *buf, size_t len);
/* Both: 8-bit RGB or RGBA, or 16-bit scaled from 10 or 12 bits; irot/imir applied. */
int codec_heif_probe(const uint8_t *buf, size_t len, struct codec_shape *out);
enum codec_status codec_heif_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen);
/* The colr ICC profile; or one made from an nclx description for the sRGB/BT.709, Display P3
 * and BT.2020 primaries with the sRGB, BT.709, linear or gamma transfers; else NULL. */
enum codec_status codec_heif_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len);
/* Lossy AVIF at o->quality (1..100) and o->effort (0..6; effort_set), alpha kept, 16-bit input
 * as 10-bit, o->icc embedded when its colours match. CODEC_UNSUPPORTED for o->lossless. */
enum codec_status codec_avif_encode(const struct codec_image *img,
                                    const struct codec_encode_opts *o, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen);

/* gif.c: GIF87a and GIF89a, the first frame composed onto the logical screen: 8-bit RGB, or
 * RGBA when the frame has a transparent index or leaves part of the screen uncovered. */
int codec_gif_sniff(const uint8_t *buf, size_t len);
int codec_gif_probe(const uint8_t *buf, size_t len, struct codec_shape *out);
enum codec_status codec_gif_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_image *out, char *msg, size_t msglen);
/* The profile of an ICCRGBG1012 application extension before the first frame, or NULL. */
enum codec_status codec_gif_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len);

/* tiff.c: TIFF and BigTIFF (II*, MM*, II+, MM+), the first page: 8-bit or 16-bit gray, gray+alpha,
 * RGB or RGBA (palettes to RGB, CMYK to RGB, bilevel and 2- or 4-bit gray to 8 bits, associated
 * alpha unpremultiplied), the Orientation tag applied. Floating-point and signed samples are
 * CODEC_UNSUPPORTED. */
int codec_tiff_sniff(const uint8_t *buf, size_t len);
int codec_tiff_probe(const uint8_t *buf, size_t len, struct codec_shape *out);
enum codec_status codec_tiff_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen);
/* The ICC profile tag of the first page, or NULL. */
enum codec_status codec_tiff_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len);

/* jxl.c: JPEG XL, a bare codestream (FF 0A) or the ISOBMFF container. Decoding gives 8-bit or
 * 16-bit (9..16-bit and floating-point samples) gray, gray+alpha, RGB or RGBA, upright, the first
 * frame of an animation. */
int codec_jxl_sniff(const uint8_t *buf, size_t len);
int codec_jxl_probe(const uint8_t *buf, size_t len, struct codec_shape *out);
enum codec_status codec_jxl_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_image *out, char *msg, size_t msglen);
/* The ICC profile of the decoded pixels (libjxl's target-data profile: the file's own, or one
 * libjxl makes from its colour encoding), or NULL. */
enum codec_status codec_jxl_icc(const uint8_t *buf, size_t len, uint8_t **icc, size_t *icc_len);
/* JPEG XL of img: lossless when o->lossless (every sample kept), else lossy at distance
 * codec_jxl_distance(o->quality); o->effort 0..6 (effort_set) as libjxl's effort 1, 2, 3, 5, 7,
 * 8, 9; 8- or 16-bit, alpha kept, o->icc written when its colours match. */
enum codec_status codec_jxl_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                                   uint8_t **out, size_t *outlen, char *msg, size_t msglen);
/* The Butteraugli distance lossy JPEG XL uses at quality q (1..100), as cjxl -q maps it:
 * 0.1 + (100 - q) * 0.09 from q 30 up (1.0 at 90), 6.4 + 2.5^((30 - q) / 5) / 6.25 below. */
float codec_jxl_distance(int quality);

#endif

/* codecs_int.h: internals shared by the files of codecs/, not part of the public interface.
 *
 * codecs.c dispatches to the per-format decoders and encoders below (png.c, jpeg.c, webp.c) after
 * it has checked the arguments; exif.c holds the EXIF orientation parser and the code that turns
 * decoded pixels upright. The limit and message helpers live in codecs.c so that every decoder
 * words its sentences the same way. unit_codecs.c includes this header to test the EXIF parser
 * directly. */
#ifndef BLURD_CODECS_INT_H
#define BLURD_CODECS_INT_H

#include "codecs.h"

/* Per-format decoders: buf holds the whole file, out is zeroed by the caller. On failure out
 * holds no memory and msg (when not NULL) has a sentence. */
enum codec_status codec_png_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_image *out, char *msg, size_t msglen);
enum codec_status codec_jpeg_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen);
enum codec_status codec_webp_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                    struct codec_image *out, char *msg, size_t msglen);

/* WebP's width, height and channels from its header (WebPGetFeatures). Returns 0, or -1. */
int codec_webp_probe(const uint8_t *buf, size_t len, struct codec_shape *out);

/* Per-format encoders; img has been checked (pixels set, sizes >= 1, channels 1..4, depth 8 or
 * 16). On success *out is malloc'd and owned by the caller. */
enum codec_status codec_png_encode(const struct codec_image *img, int compression, uint8_t **out,
                                   size_t *outlen, char *msg, size_t msglen);
/* The PNG encoder on libdeflate (png_write.c): o->compression and o->png_filter in range. */
enum codec_status codec_png_write(const struct codec_image *img, const struct codec_encode_opts *o,
                                  uint8_t **out, size_t *outlen, char *msg, size_t msglen);
enum codec_status codec_jpeg_encode(const struct codec_image *img, int quality, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen);
/* o->quality is in range for lossy output, as codec_encode checks. */
enum codec_status codec_webp_encode(const struct codec_image *img,
                                    const struct codec_encode_opts *o, uint8_t **out,
                                    size_t *outlen, char *msg, size_t msglen);

/* Raw samples or a .npy file of img (data.c); f is CODEC_RAW or CODEC_NPY. */
enum codec_status codec_data_encode(const struct codec_image *img, enum codec_format f,
                                    uint8_t **out, size_t *outlen, char *msg, size_t msglen);

/* An 8-bit copy of img for the encoders that take 8-bit samples only, with `colours` colour
 * channels (1: gray, for gray images only; 3: RGB, gray repeated) and, when keep_alpha is set
 * and img has alpha, its alpha after them; otherwise alpha is composited over white and
 * dropped. Each sample is round(255 * (v * a + M * (M - a)) / M^2), M = 255 or 65535 and a = M
 * when alpha is kept or absent: scaled to 8 bits and composited in one rounding. Returns a
 * codec_malloc'd buffer of width * height * *channels bytes, or NULL when out of memory. */
uint8_t *codec_to_8bit(const struct codec_image *img, int colours, int keep_alpha, int *channels);

/* The allocator of codecs/: every buffer the codecs allocate, and libpng's allocations, go
 * through these, so that codec_test_fail_alloc() can make any one of them fail. They behave as
 * malloc, realloc and free (a buffer from codec_malloc may be handed to a caller who frees it
 * with free()). codec_realloc counts as one allocation and leaves p alone when it fails. */
void *codec_malloc(size_t n);
void *codec_realloc(void *p, size_t n);
void codec_free(void *p);

/* An encoded file as it is written: data grows by doubling, through codec_realloc. */
struct codec_buf {
  uint8_t *data;
  size_t len, cap;
};

/* Appends n bytes to b. Returns CODEC_OK, CODEC_NOMEM, or CODEC_TOO_LARGE when the buffer would
 * pass SIZE_MAX / 2; b is unchanged on failure. */
enum codec_status codec_buf_append(struct codec_buf *b, const void *data, size_t n);
/* Hands b's file to the caller (*out, *len; freed with free()), without the doubling's slack. */
void codec_buf_take(struct codec_buf *b, uint8_t **out, size_t *len);

/* Counts one allocation against codec_test_fail_alloc(): returns 1 when this one must fail. For
 * allocators codecs/ does not call itself (libjpeg's memory manager, in jpeg.c). */
int codec_alloc_fails(void);

/* Writes a printf-style sentence into msg when msg is not NULL and msglen > 0. */
void codec_msgf(char *msg, size_t msglen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks an image of width x height pixels of bytes_per_pixel bytes against lim (NULL: no
 * limits) and against what this process can address. Returns CODEC_OK and the buffer size in
 * *nbytes, CODEC_CORRUPT for a zero size, or CODEC_TOO_LARGE with a sentence naming the value and
 * the limit. */
enum codec_status codec_check_size(uint64_t width, uint64_t height, unsigned bytes_per_pixel,
                                   const struct codec_limits *lim, size_t *nbytes, char *msg,
                                   size_t msglen);

/* Converts width x height CMYK pixels (4 bytes each; inverted: Adobe's convention, 255 is no
 * ink) to 8-bit RGB in place, packed at 3 bytes a pixel from the start of pixels: through the
 * CMYK profile icc with lcms2 when there is one, else each channel (1 - C)(1 - K). Returns
 * CODEC_OK or CODEC_NOMEM (pixels then unchanged). */
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
 * CODEC_NOMEM with img unchanged. */
enum codec_status codec_orient(struct codec_image *img, int o);

#endif

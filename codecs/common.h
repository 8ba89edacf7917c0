/* common.h: the helpers shared by every file of codecs/ (common.c), not part of the public
 * interface: the allocator and its failure injection, the growing output buffer, sentences, the
 * size check every decoder makes before allocating, the 8-bit conversion of the JPEG and WebP
 * encoders. It includes only codecs.h: the per-format files depend on it, never on codecs.c. */
#ifndef BLURD_CODECS_COMMON_H
#define BLURD_CODECS_COMMON_H

#include "codecs.h"

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

#endif

/* common.h: the helpers shared by every file of codecs/ (common.c), not part of the public
 * interface: the allocator and its failure injection, the growing output buffer, sentences, the
 * size check every decoder makes before allocating, the 8-bit conversion of the JPEG and WebP
 * encoders, the thread's cancellation hook, and the two ways stop.c stops work inside a library
 * that has no hook. It includes only codecs.h: the per-format files depend on it, never on
 * codecs.c. */
#ifndef BLURD_CODECS_COMMON_H
#define BLURD_CODECS_COMMON_H

#include "codecs.h"

/* An encoded file as it is written: data grows by doubling, through codec_realloc. */
struct codec_buf {
  uint8_t *data;
  size_t len, cap;
};

/* ---- cancellation (codec_cancel_set) ----
 * The codecs' loops ask codec_stopped() every row or block, at least every few milliseconds of
 * work; the hook it asks (api/job.c's: a clock read and a flag) costs tens of nanoseconds. */

/* The calling thread's hook, or NULL: for work handed to other threads, which set it there. */
const struct codec_cancel *codec_cancel_get(void);
/* Whether the calling thread's hook says stop (0 when it has none). */
int codec_stopped(void);

/* Runs fn(arg) and returns CODEC_OK once it has finished, or CODEC_CANCELLED when the thread's
 * hook said stop first. fn must only compute over memory it is given: no allocation, no lock, no
 * system call (libdeflate's compress and decompress, with their state made beforehand). With a
 * hook and at least CODEC_STOP_THREAD_BYTES of work (bytes, as the caller counts them), fn runs
 * on a thread of its own, cancelled where it stands when the hook says stop (stop.c); otherwise
 * on the caller's, to the end. */
#define CODEC_STOP_THREAD_BYTES (1u << 21)
enum codec_status codec_run_stoppable(void (*fn)(void *arg), void *arg, size_t bytes);

/* Runs fn(arg, fd) in a child process (fork) with no hook and only fd, a pipe's writing end, and
 * the standard streams open; fn writes its output to fd and returns the child's exit status
 * (0..255). Meanwhile the output is appended to out, and the thread's hook is asked every few
 * milliseconds: when it says stop, the child is killed. Returns CODEC_OK when the child ended,
 * with *status its exit status, or 128 + the signal that killed it; CODEC_CANCELLED (out's new
 * bytes then dropped); CODEC_NOMEM when out could not grow; or CODEC_UNSUPPORTED when the work
 * did not run there (no hook; no pipe or process; or a child that sleeps without using the CPU,
 * as one would that inherited a lock another thread held at the fork), for the caller to run it
 * itself. */
enum codec_status codec_run_child(int (*fn)(void *arg, int fd), void *arg, struct codec_buf *out,
                                  int *status);
/* Writes p[0..n) to fd whole (a child's output), retrying short writes. Returns 0, or -1. */
int codec_write_all(int fd, const void *p, size_t n);

/* An 8-bit copy of img for the encoders that take 8-bit samples only, with `colours` colour
 * channels (1: gray, for gray images only; 3: RGB, gray repeated) and, when keep_alpha is set
 * and img has alpha, its alpha after them; otherwise alpha is composited over white and
 * dropped. Each sample is round(255 * (v * a + M * (M - a)) / M^2), M = 255 or 65535 and a = M
 * when alpha is kept or absent: scaled to 8 bits and composited in one rounding. On success *out
 * is a codec_malloc'd buffer of width * height * *channels bytes. Returns CODEC_OK, CODEC_NOMEM
 * or CODEC_CANCELLED (*out then NULL). */
enum codec_status codec_to_8bit(const struct codec_image *img, int colours, int keep_alpha,
                                uint8_t **out, int *channels);

/* The allocator of codecs/: every buffer the codecs allocate, and libpng's allocations, go
 * through these, so that codec_test_fail_alloc() can make any one of them fail. They behave as
 * malloc, realloc and free (a buffer from codec_malloc may be handed to a caller who frees it
 * with free()). codec_realloc counts as one allocation and leaves p alone when it fails. */
void *codec_malloc(size_t n);
void *codec_realloc(void *p, size_t n);
void codec_free(void *p);

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

/* The cost model's curves (decode_ns and encode_ns): y at x along the curve through (xs[i],
 * ys[i]), xs ascending, linear between them and flat past the ends; codec_by_size the same with
 * x and the xs in logarithms (sizes in pixels). */
double codec_interpolate(const double *xs, const double *ys, int n, double x);
double codec_by_size(const double *sizes, const double *ys, int n, double pixels);
#define CODEC_NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Checks an image of width x height pixels of bytes_per_pixel bytes against lim (NULL: no
 * limits) and against what this process can address. Returns CODEC_OK and the buffer size in
 * *nbytes, CODEC_CORRUPT for a zero size, or CODEC_TOO_LARGE with a sentence naming the value and
 * the limit. */
enum codec_status codec_check_size(uint64_t width, uint64_t height, unsigned bytes_per_pixel,
                                   const struct codec_limits *lim, size_t *nbytes, char *msg,
                                   size_t msglen);

#endif

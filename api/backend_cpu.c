/* The CPU backend: its verbs (backend_ops) on host buffers, every worker feeding the one fork-join
 * pool, with the CPU codecs (libjpeg-turbo, libpng, libwebp) that every backend also uses for
 * what stays on the host. An operation runs as its descriptor's CPU compute (op->cpu). */
#include "api_int.h"

#include <stdio.h>

enum api_error backend_codec_error(enum codec_status s) {
  switch (s) {
  case CODEC_OK:
    return API_OK;
  case CODEC_UNKNOWN:
    return API_UNSUPPORTED_MEDIA;
  case CODEC_CORRUPT:
    return API_UNDECODABLE;
  case CODEC_TOO_LARGE:
    return API_IMAGE_TOO_LARGE;
  case CODEC_UNSUPPORTED:
    return API_UNSUPPORTED_IMAGE;
  case CODEC_NOMEM:
    return API_OUT_OF_MEMORY;
  case CODEC_CANCELLED: /* the job's hook said stop: its token says why */
    return op_cancelled() != API_OK ? op_cancelled() : API_DEADLINE_EXCEEDED;
  }
  return API_INTERNAL;
}

/* ---- the CPU codecs (every backend's, for what stays on the host) ---- */

const char *backend_host_codec(enum codec_format f) {
  return f == CODEC_PNG    ? "libpng"
         : f == CODEC_JPEG ? "libjpeg-turbo"
         : f == CODEC_WEBP ? "libwebp"
                           : NULL;
}

enum api_error backend_host_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_image *img, const char **codec, char *msg,
                                   size_t msglen) {
  enum codec_status s = codec_decode(buf, len, lim, img, msg, msglen);
  enum codec_format f = s == CODEC_OK ? img->format : codec_sniff(buf, len);
  *codec = f == CODEC_PNG && codec_png_direct(buf, len) ? "libdeflate" : backend_host_codec(f);
  return backend_codec_error(s);
}

enum api_error backend_host_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                                   uint8_t **out, size_t *len, const char **codec, char *msg,
                                   size_t msglen) {
  *codec = o->format == CODEC_PNG && !o->png_libpng ? codec_png_deflater(o->compression)
           : o->format == CODEC_RAW                 ? "raw"
           : o->format == CODEC_NPY                 ? "npy"
                                                    : backend_host_codec(o->format);
  struct codec_encode_opts named = *o; /* WebP says which of its encoders wrote the file */
  named.encoder = codec;
  return backend_codec_error(codec_encode(img, &named, out, len, msg, msglen));
}

/* ---- the CPU backend's verbs ---- */

static enum api_error cpu_decode(void *state, const uint8_t *buf, size_t len,
                                 const struct codec_limits *lim, struct codec_image *img,
                                 const char **codec, char *msg, size_t msglen) {
  (void)state;
  return backend_host_decode(buf, len, lim, img, codec, msg, msglen);
}

static void pool_for(void *pool, int n, void (*fn)(void *arg, int begin, int end), void *arg) {
  cpu_parallel_for(pool, n, fn, arg);
}

/* The encode, with the pool's threads for a large PNG (codec_encode_opts.parallel). */
static enum api_error cpu_encode(void *state, const struct codec_image *img,
                                 const struct codec_encode_opts *o, uint8_t **out, size_t *len,
                                 const char **codec, double *download, char *msg, size_t msglen) {
  struct codec_encode_opts threads = *o;
  threads.parallel = pool_for, threads.parallel_ctx = state;
  *download = -1;
  return backend_host_encode(img, &threads, out, len, codec, msg, msglen);
}

static enum api_error cpu_to_host(void *state, struct codec_image *img) {
  (void)state, (void)img; /* always there */
  return API_OK;
}

static int cpu_worker_new(void *shared, int index, void **state, char *err, size_t errlen) {
  (void)index, (void)err, (void)errlen;
  *state = shared; /* every worker feeds the one pool */
  return 0;
}

static void cpu_worker_free(void *state) {
  (void)state;
}

static int cpu_measures_itself(struct op_env *env, const struct cpu_blur *b,
                               const struct codec_image *img) {
  (void)env, (void)img;
  return cpu_separable_exact(b);
}

static enum api_error cpu_run(void *state, const struct api_op *op, const void *params,
                              struct op_io *io) {
  struct op_env env = {state, NULL, cpu_auto_method, cpu_measures_itself};
  return op->cpu(&env, params, io);
}

static const char *cpu_worker_name(void *state) {
  (void)state;
  return "cpu";
}

const struct backend_ops backend_cpu_ops = {.kind = "cpu",
                                            .worker_new = cpu_worker_new,
                                            .worker_free = cpu_worker_free,
                                            .decode = cpu_decode,
                                            .run = cpu_run,
                                            .encode = cpu_encode,
                                            .to_host = cpu_to_host,
                                            .auto_method = cpu_auto_method,
                                            .worker_name = cpu_worker_name,
                                            .keeps_images = 0};

void *backend_cpu_shared(int n) {
  return cpu_pool_new(n);
}

void backend_cpu_shared_free(void *shared) {
  cpu_pool_free(shared);
}

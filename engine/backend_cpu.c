/* The CPU backend: its verbs (backend_ops) on host buffers, every worker feeding the one fork-join
 * pool, with the CPU codecs (libjpeg-turbo, libpng, libwebp) that every backend also uses for
 * what stays on the host. An operation runs as its CPU compute (the ENGINE_CPU column). */
#include "engine_int.h"

#include <stdio.h>

enum err backend_codec_error(enum codec_status s) {
  switch (s) {
  case CODEC_OK:
    return ERR_OK;
  case CODEC_UNKNOWN:
    return ERR_UNSUPPORTED_MEDIA;
  case CODEC_CORRUPT:
    return ERR_UNDECODABLE;
  case CODEC_TOO_LARGE:
    return ERR_IMAGE_TOO_LARGE;
  case CODEC_UNSUPPORTED:
    return ERR_UNSUPPORTED_IMAGE;
  case CODEC_NOMEM:
    return ERR_OUT_OF_MEMORY;
  case CODEC_CANCELLED: { /* the job's hook said stop: its token says why */
    enum err stop = cpu_stop_error();
    return stop != ERR_OK ? stop : ERR_DEADLINE_EXCEEDED;
  }
  }
  return ERR_INTERNAL;
}

/* ---- the CPU codecs (every backend's, for what stays on the host) ---- */

const char *backend_host_codec(enum codec_format f) {
  const struct codec_format_desc *d = codec_format(f);
  return d ? d->lib : NULL;
}

enum err backend_host_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                             struct codec_image *img, const char **codec, char *msg,
                             size_t msglen) {
  *codec = codec_decoder(buf, len);
  return backend_codec_error(codec_decode(buf, len, lim, img, msg, msglen));
}

enum err backend_host_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                             uint8_t **out, size_t *len, const char **codec, char *msg,
                             size_t msglen) {
  struct codec_encode_opts named = *o; /* the codec says which of its encoders wrote the file */
  *codec = backend_host_codec(o->format);
  named.encoder = codec;
  return backend_codec_error(codec_encode(img, &named, out, len, msg, msglen));
}

/* ---- the CPU backend's verbs ---- */

static enum err cpu_decode(void *state, const uint8_t *buf, size_t len,
                           const struct codec_limits *lim, struct codec_image *img,
                           const char **codec, char *msg, size_t msglen) {
  (void)state;
  return backend_host_decode(buf, len, lim, img, codec, msg, msglen);
}

static void pool_for(void *pool, int n, void (*fn)(void *arg, int begin, int end), void *arg) {
  cpu_parallel_for(pool, n, fn, arg);
}

/* The encode, with the pool's threads for a large PNG (codec_encode_opts.parallel). */
static enum err cpu_encode(void *state, const struct codec_image *img,
                           const struct codec_encode_opts *o, uint8_t **out, size_t *len,
                           const char **codec, double *download, char *msg, size_t msglen) {
  struct codec_encode_opts threads = *o;
  threads.parallel = pool_for, threads.parallel_ctx = state;
  *download = -1;
  return backend_host_encode(img, &threads, out, len, codec, msg, msglen);
}

static enum err cpu_to_host(void *state, struct codec_image *img) {
  (void)state, (void)img; /* always there */
  return ERR_OK;
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

static struct op_env cpu_env(void *state) {
  return (struct op_env){state, cpu_auto_method, cpu_measures_itself};
}

static const char *cpu_worker_name(void *state) {
  (void)state;
  return "cpu";
}

static int cpu_probe(const struct engine_config *cfg, char *why, size_t n) {
  (void)cfg, (void)why, (void)n;
  return 0; /* always here, with no devices */
}

/* Every worker feeds the one pool, of a thread a core. */
static void *cpu_shared_new(const struct engine_config *cfg, int ndev, int cores, char *err,
                            size_t n) {
  (void)cfg, (void)ndev;
  struct cpu_pool *pool = cpu_pool_new(cores);
  if (!pool) snprintf(err, n, "cannot start the CPU thread pool");
  return pool;
}

static void cpu_shared_free(void *shared) {
  cpu_pool_free(shared);
}

static int cpu_workers(const struct engine_config *cfg, int ndev, int cores, int fast_codecs) {
  (void)ndev, (void)fast_codecs;
  return cfg->workers > 0 ? cfg->workers : cores;
}

static void cpu_name(int ndev, char *buf, size_t n) {
  (void)ndev;
  snprintf(buf, n, "cpu");
}

const struct backend_ops backend_cpu_ops = {.kind = "cpu",
                                            .column = ENGINE_CPU,
                                            .probe = cpu_probe,
                                            .shared_new = cpu_shared_new,
                                            .shared_free = cpu_shared_free,
                                            .workers_per_device = cpu_workers,
                                            .name = cpu_name,
                                            .worker_new = cpu_worker_new,
                                            .worker_free = cpu_worker_free,
                                            .decode = cpu_decode,
                                            .encode = cpu_encode,
                                            .to_host = cpu_to_host,
                                            .env = cpu_env,
                                            .auto_method = cpu_auto_method,
                                            .worker_name = cpu_worker_name};

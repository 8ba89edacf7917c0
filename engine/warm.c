/* Warm start: a worker runs the stages of a typical job once, on a synthetic image of the
 * configured size, before it takes jobs: its pinned and device buffers grow to that size, the
 * allocator maps what such a job uses, the GPU's kernels load and its codecs (when the backend
 * has its own) size their state. The first request is then as fast as the ones after it. The
 * computes it runs are the configuration's (engine_config.warm_ops), in order, then a JPEG round
 * trip of their result. */
#include "engine_int.h"

#include <stdlib.h>

/* The workers warm up in parallel, as far as their warm-up images (the input and the output, on
 * the host) take at most WARM_HOST_BYTES together; one always may. Returns 0 when this one may
 * start, -1 when the engine is stopping. */
#define WARM_HOST_BYTES ((size_t)1 << 30)
static int warm_enter(struct engine *e, size_t bytes) {
  pthread_mutex_lock(&e->warm_mu);
  while (e->warm_bytes > 0 && e->warm_bytes + bytes > WARM_HOST_BYTES && !engine_stopping(e))
    pthread_cond_wait(&e->warm_cv, &e->warm_mu);
  int stop = engine_stopping(e);
  if (!stop) e->warm_bytes += bytes;
  pthread_mutex_unlock(&e->warm_mu);
  return stop ? -1 : 0;
}

static void warm_leave(struct engine *e, size_t bytes) {
  pthread_mutex_lock(&e->warm_mu);
  e->warm_bytes -= bytes;
  pthread_cond_broadcast(&e->warm_cv);
  pthread_mutex_unlock(&e->warm_mu);
}

/* A JPEG round trip of img through w's encoder and decoder. */
static void warm_jpeg(struct worker *w, const struct codec_image *img) {
  struct codec_encode_opts jpeg = {
      .format = CODEC_JPEG, .quality = 90, .compression = 6, .lossless = 0};
  struct codec_limits lim = {(uint32_t)img->width, (uint32_t)img->height,
                             (uint64_t)img->width * img->height};
  struct codec_image back = {0};
  uint8_t *enc = NULL;
  size_t len;
  const char *codec;
  double download;
  char msg[256];
  if (w->ops->encode(w->state, img, &jpeg, &enc, &len, &codec, &download, msg, sizeof(msg)) ==
          ERR_OK &&
      w->ops->decode(w->state, enc, len, &lim, &back, &codec, msg, sizeof(msg)) == ERR_OK)
    w->ops->to_host(w->state, &back);
  codec_image_free(&back);
  free(enc);
}

/* The warm-up's computes on in (a texture, so that the codecs have work) into out: each of the
 * configuration's, on the worker's backend. Returns whether the last one succeeded. */
static int warm_computes(struct engine *e, struct worker *w, struct codec_image *in,
                         struct codec_image *out) {
  struct stage_times st;
  struct op_result res;
  char msg[256];
  struct op_io io = {in, out, &res, &st, msg, sizeof(msg)};
  struct op_env env = w->ops->env(w->state);
  int ok = 0;
  for (int k = 0; k < e->cfg.nwarm_ops; k++) {
    op_compute_fn fn = e->cfg.warm_ops[k].compute[w->ops->column];
    if (e->cfg.warm_ops[k].device_only && !e->ndev) continue;
    codec_image_free(out);
    *out = (struct codec_image){0};
    ok = fn && fn(&env, e->cfg.warm_ops[k].params, &io) == ERR_OK;
  }
  return ok;
}

void engine_warm_up(struct engine *e, struct worker *w) {
  int width = e->warm[0], height = e->warm[1], ch = e->warm[2];
  struct codec_image in = {NULL, width, height, ch, 8, CODEC_PNG, 1}, out = {0};
  struct cpu_image src = {NULL, width, height, ch, 8};
  size_t bytes = cpu_image_bytes(&src);
  if (width <= 0 || height <= 0 || warm_enter(e, 2 * bytes) != 0) return;
  if (!(in.pixels = malloc(bytes))) {
    warm_leave(e, 2 * bytes);
    return;
  }
  for (size_t i = 0; i < bytes; i++) /* a texture, so the codecs have work */
    in.pixels[i] = (uint8_t)((i * 2654435761u) >> 24 & 0x3f) + (uint8_t)(i / (size_t)(width * ch));
  if (w->ops->job_begin) w->ops->job_begin(w->state);
  if (warm_computes(e, w, &in, &out)) {
    /* through the JPEG encoder and back through the decoder: the output itself when JPEG can
     * hold it, else the input's first samples read as RGB or gray (after the download a PNG
     * answer takes) */
    struct codec_image color = in;
    color.channels = ch < 3 ? 1 : 3;
    if (ch == 2 || ch == 4) w->ops->to_host(w->state, &out);
    warm_jpeg(w, ch == 2 || ch == 4 ? &color : &out);
  }
  if (w->ops->job_end) w->ops->job_end(w->state);
  codec_image_free(&out);
  codec_image_free(&in);
  warm_leave(e, 2 * bytes);
}

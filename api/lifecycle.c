/* The api context's life cycle: api_new makes what the api keeps (metrics, the access log, the
 * request id seed, the API key and CORS origins, the engine), api_free releases it. Apart from
 * the rest of the api, so that the files it starts (metrics, the access log, the backend) can
 * ask the context's state (ctx.c) without importing its making. */
#include "api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Opens the log that path names (see api_config.access_log). Returns its descriptor, -1 for no
 * log, or -2 with err filled. */
static int access_log_open(const char *path, char *err, size_t errlen) {
  if (!path || !*path || strcmp(path, "off") == 0) return -1;
  if (strcmp(path, "-") == 0) return STDERR_FILENO;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, errlen, "--access-log %s: %s", path, strerror(errno));
    return -2;
  }
  return fd;
}

/* Closes fd unless it is stderr or none. */
static void access_log_close(int fd) {
  if (fd > STDERR_FILENO) close(fd);
}

/* A copy of s, or NULL when s is NULL or empty; *oom is set when the copy failed. */
static char *copy_option(const char *s, int *oom) {
  char *c = s && *s ? strdup(s) : NULL;
  if (s && *s && !c) *oom = 1;
  return c;
}

/* What the api keeps besides the backend: metrics, the access log, the id seed, key and CORS,
 * and /openapi.json's text. */
static int setup(struct api_ctx *ctx, const struct api_config *cfg, char *err, size_t errlen) {
  int oom = 0;
  ctx->log_fd = access_log_open(cfg->access_log, err, errlen);
  if (ctx->log_fd == -2) return -1;
  if (getrandom(&ctx->id_seed, sizeof(ctx->id_seed), GRND_NONBLOCK) != sizeof(ctx->id_seed))
    ctx->id_seed = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid(); /* entropy not ready yet */
  ctx->metrics = metrics_new();
  ctx->api_key = copy_option(cfg->api_key, &oom);
  ctx->cors = copy_option(cfg->cors_origins, &oom);
  ctx->openapi = api_openapi_text(ctx); /* built once: 2 ms, that each request spent before */
  ctx->openapi_len = ctx->openapi ? strlen(ctx->openapi) : 0;
  if (!ctx->metrics || oom || !ctx->openapi) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  return 0;
}

/* The engine's settings from the api's: the workers, the queue, the codecs, and the warm-up,
 * which blurs at sigma 12 as a first request would (without the PSNR first, on a device: its
 * method's kernels load too). */
static struct engine_config engine_settings(struct api_ctx *ctx, const struct api_config *cfg) {
  static const enum engine_choice choice[] = {[API_BACKEND_AUTO] = ENGINE_AUTO,
                                              [API_BACKEND_CPU] = ENGINE_ONLY_CPU,
                                              [API_BACKEND_GPU] = ENGINE_ONLY_GPU};
  static const enum engine_gpu_codecs codecs[] = {[API_GPU_CODECS_AUTO] = ENGINE_GPU_CODECS_AUTO,
                                                  [API_GPU_CODECS_ON] = ENGINE_GPU_CODECS_ON,
                                                  [API_GPU_CODECS_OFF] = ENGINE_GPU_CODECS_OFF};
  struct engine_config e = {.backend = choice[cfg->backend],
                            .workers = cfg->workers,
                            .queue = cfg->queue,
                            .gpu_codecs = codecs[cfg->gpu_codecs],
                            .jpeg_batch_wait_us = cfg->jpeg_batch_wait_us,
                            .jpeg_decoders = cfg->jpeg_decoders,
                            .heic_decoders = cfg->heic_decoders,
                            .on_fatal = api_fail,
                            .on_fatal_arg = ctx};
  memcpy(e.warm, cfg->warm, sizeof(e.warm));
  char msg[256];
  static const char *const queries[ENGINE_WARM_MAX] = {"sigma=12&psnr=false", "sigma=12"};
  for (int k = 0; k < ENGINE_WARM_MAX; k++)
    if (params_parse(&api_blur_endpoint, queries[k], NULL, 0, &ctx->warm[k], msg, sizeof(msg)) ==
        ERR_OK)
      e.warm_ops[e.nwarm_ops++] = (struct engine_warm){op_blur.compute, &ctx->warm[k], k == 0};
  return e;
}

struct api_ctx *api_new(const struct api_config *cfg, char *err, size_t errlen) {
  struct api_ctx *ctx = calloc(1, sizeof(*ctx));
  if (!ctx) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  ctx->cfg = *cfg;
  ctx->log_fd = -1;
  struct engine_config ec = engine_settings(ctx, cfg);
  if (setup(ctx, cfg, err, errlen) != 0 || !(ctx->engine = engine_new(&ec, err, errlen))) {
    api_free(ctx);
    return NULL;
  }
  return ctx;
}

void api_free(struct api_ctx *ctx) {
  if (!ctx) return;
  engine_free(ctx->engine);
  metrics_free(ctx->metrics);
  access_log_close(ctx->log_fd);
  free(ctx->api_key);
  free(ctx->cors);
  free(ctx->openapi);
  free(ctx);
}

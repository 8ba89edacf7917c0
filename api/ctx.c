/* The api context's state as the rest of the api and the server ask it: lost GPU, draining,
 * warming, the backend's name. Its making and freeing are in lifecycle.c. */
#include "api_int.h"

const char *api_backend_name(const struct api_ctx *ctx) {
  return engine_name(ctx->engine);
}

void api_fail(void *arg, int status) {
  struct api_ctx *ctx = arg;
  if (__atomic_exchange_n(&ctx->failed, 1, __ATOMIC_SEQ_CST)) return; /* told once */
  if (ctx->cfg.on_fatal) ctx->cfg.on_fatal(ctx->cfg.on_fatal_arg, status);
}

int api_failed(struct api_ctx *ctx) {
  return __atomic_load_n(&ctx->failed, __ATOMIC_SEQ_CST);
}

int api_leave_to_exit(const struct api_ctx *ctx) {
  return engine_leave_to_exit(ctx->engine);
}

int api_warming(struct api_ctx *ctx) {
  return engine_warming(ctx->engine);
}

void api_set_draining(struct api_ctx *ctx) {
  __atomic_store_n(&ctx->draining, 1, __ATOMIC_SEQ_CST);
}

int api_cores(void) {
  char why[700]; /* said on stderr by the engine, once it starts */
  int n = cpu_cores("", why, sizeof(why));
  return n > 0 ? n : 1;
}

const char *api_backends_built(void) {
  return engine_built();
}

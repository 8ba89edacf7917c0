/* The api context's state as the rest of the api and the server ask it: lost GPU, draining,
 * warming, the backend's name. Its making and freeing are in lifecycle.c. */
#include "api_int.h"

const char *api_backend_name(const struct api_ctx *ctx) {
  return backend_name(ctx->backend);
}

void api_fail(struct api_ctx *ctx) {
  if (__atomic_exchange_n(&ctx->failed, 1, __ATOMIC_SEQ_CST)) return; /* told once */
  if (ctx->cfg.on_fatal) ctx->cfg.on_fatal(ctx->cfg.on_fatal_arg);
}

int api_failed(struct api_ctx *ctx) {
  return __atomic_load_n(&ctx->failed, __ATOMIC_SEQ_CST);
}

int api_leave_to_exit(const struct api_ctx *ctx) {
  return backend_leave_to_exit(ctx->backend);
}

int api_warming(struct api_ctx *ctx) {
  return backend_warming(ctx->backend);
}

void api_set_draining(struct api_ctx *ctx) {
  __atomic_store_n(&ctx->draining, 1, __ATOMIC_SEQ_CST);
}

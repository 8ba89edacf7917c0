/* The answers of the routes that answer at once (/healthz, /readyz, /methods, /metrics), and
 * the parsing and validation half of the image endpoints, whose work is queued as a job (job.c):
 * the upload's parameters, its image and its estimated cost against the budget (--max-cost),
 * checked before anything is decoded. A JSON body is parsed by its job on a worker
 * (upload_json), never on an HTTP thread. /methods is the table of operations' rows (op.h). The
 * routes that lead here are in routes.c. */
#include "api_int.h"

#include <stdlib.h>
#include <string.h>

#define ROUTE_UNUSED (void)ctx, (void)r, (void)req, (void)query, (void)done, (void)udata

struct api_response *handler_healthz(ROUTE_ARGS) {
  ROUTE_UNUSED;
  return response_json(200, json_pack("{s:s}", "status", "ok"));
}

struct api_response *handler_readyz(ROUTE_ARGS) {
  ROUTE_UNUSED;
  int queued, running, cap, workers;
  engine_stats(ctx->engine, &queued, &running, &cap, &workers);
  int failed = api_failed(ctx), draining = __atomic_load_n(&ctx->draining, __ATOMIC_SEQ_CST);
  int warming = engine_warming(ctx->engine);
  int ready = !failed && !draining && !warming && workers > 0;
  const char *status = failed ? "gpu_lost" : draining ? "draining" : warming ? "warming" : "ready";
  return response_json(ready ? 200 : 503,
                       json_pack("{s:b, s:s, s:s, s:o, s:o, s:i, s:i, s:{s:i, s:i}, s:i}", "ready",
                                 ready, "status", status, "backend", engine_name(ctx->engine),
                                 "devices", engine_devices(ctx->engine), "codecs",
                                 engine_codecs(ctx->engine), "workers", workers, "workers_ready",
                                 engine_workers_ready(ctx->engine), "queue", "depth", queued,
                                 "capacity", cap, "running", running));
}

struct api_response *handler_metrics(ROUTE_ARGS) {
  ROUTE_UNUSED;
  return metrics_response(ctx);
}

struct api_response *handler_methods(ROUTE_ARGS) {
  ROUTE_UNUSED;
  json_t *list = json_array();
  for (int i = 0; list && api_ops[i]; i++)
    if (api_ops[i]->methods) api_ops[i]->methods(ctx, list);
  const struct api_config *c = &ctx->cfg;
  return response_json(
      200, json_pack("{s:s, s:o, s:o, s:o, s:{s:I, s:I, s:I, s:I, s:f, s:s}}", "backend",
                     engine_name(ctx->engine), "devices", engine_devices(ctx->engine), "codecs",
                     engine_codecs(ctx->engine), "methods", list, "limits", "max_body_bytes",
                     (json_int_t)c->max_body, "max_pixels", (json_int_t)c->max_pixels, "max_width",
                     (json_int_t)c->max_width, "max_height", (json_int_t)c->max_height,
                     "max_cost_s", c->max_cost, "cost",
                     "each request's work is estimated from its image's header before decoding, "
                     "in seconds of one CPU core (the filter and the PSNR reference); past "
                     "max_cost_s (0: no limit) the answer is 422 too_expensive"));
}

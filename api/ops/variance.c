/* POST /variance: the local variance or standard deviation map of the upload's luma, as a 16-bit
 * gray PNG with its scale (X-Scale) and statistics. Gouin et al.'s local-variance methods
 * (Threewise among them) and an exact one; the float methods are measured against the exact map
 * (X-PSNR). The compute is cpu_variance_image on the CPU and gpu_variance_resident on the device;
 * /methods gives each method's cost per pixel and the largest radius the budget admits. */
#include "../api_int.h"
#include "cost_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const var_method_choices[] = {
#define X(e, name, desc) name,
    CPU_VAR_METHODS(X)
#undef X
        "auto",
    NULL,
};
static const char *const window_choices[] = {"triangle", "box", NULL};    /* enum cpu_window */
static const char *const output_choices[] = {"stddev", "variance", NULL}; /* enum var_output */

#define OFF(field) offsetof(struct var_params, field)

static const struct param_spec var_params[] = {
    {"method", PT_ENUM, 0, 0, var_method_choices, "auto", OFF(method),
     "Local variance algorithm; auto is exact (exact integer sums, O(1) per pixel).", 0},
    {"radius", PT_INT, 1, CPU_VAR_RADIUS_MAX, NULL, "7", OFF(radius),
     "Window radius r: 2r + 1 pixels per axis; threewise takes r = 2^k - 1 only.", 0},
    {"window", PT_ENUM, 0, 0, window_choices, "triangle", OFF(window),
     "Weights per axis: triangle is 1 2 ... r+1 ... 2 1 (as in Threewise), box is all ones.", 0},
    {"output", PT_ENUM, 0, 0, output_choices, "stddev", OFF(output),
     "The map: local standard deviation or variance of luma, population convention (divided by "
     "the total weight W, not W - 1), times the scale in X-Scale.",
     0},
    {"format", PT_ENUM, 0, 0, params_map_formats, params_map_default, OFF(format),
     "Output format: a 16-bit gray PNG; or the samples as they are for code that computes on the "
     "map, raw (little-endian uint16, row after row; X-Width, X-Height, X-Sample-Type) or npy (a "
     "NumPy file). JPEG and WebP hold 8 bits only.",
     0},
    OP_COMPRESSION_PARAM(struct var_params, CODEC_PNG_MAP_COMPRESSION_DEFAULT_STR),
    {"psnr", PT_BOOL, 0, 1, params_bool_choices, "true", OFF(psnr),
     "Measure the map against the exact method's (X-PSNR); costs one exact run.", 0},
};

/* threewise takes r = 2^k - 1 only: the message lists the radii it takes. */
static enum err var_check(void *params, char *msg, size_t msglen) {
  const struct var_params *p = params;
  int m = p->method == VAR_AUTO ? CPU_VAR_EXACT : p->method;
  if (cpu_var_radius_ok(m, p->radius)) return ERR_OK;
  size_t n =
      (size_t)snprintf(msg, msglen, "Method %s takes these radii only:", cpu_var_method_name(m));
  for (int r = 1; r <= CPU_VAR_RADIUS_MAX && n < msglen; r++)
    if (cpu_var_radius_ok(m, r)) n += (size_t)snprintf(msg + n, msglen - n, " %d", r);
  if (n < msglen) snprintf(msg + n, msglen - n, " (2^k - 1); got %d.", p->radius);
  return ERR_BAD_PARAMETER;
}

/* ---- the cost (cost_table.h; docs/operations.md, "Limits and costs") ---- */

/* ns per pixel of method m at radius r, from the luma plane: the O(r^2) methods per pixel of the
 * window, the merging ones per doubling of the radius, exact at any radius. */
static double var_ns(int m, int r) {
  double w = (2.0 * r + 1) * (2.0 * r + 1), doublings = log2(r + 1.0);
  switch (m) {
  case CPU_VAR_NAIVE:
    return COST_VAR_NAIVE_NS_PIXEL + COST_VAR_NAIVE_NS_TAP * w;
  case CPU_VAR_KOENIG:
    return COST_VAR_KOENIG_NS_PIXEL + COST_VAR_KOENIG_NS_TAP * w;
  case CPU_VAR_WELFORD:
    return COST_VAR_WELFORD_NS_PIXEL + COST_VAR_WELFORD_NS_TAP * w;
  case CPU_VAR_PAIRWISE:
    return COST_VAR_PAIRWISE_NS_PIXEL + COST_VAR_PAIRWISE_NS_LOG * doublings;
  case CPU_VAR_THREEWISE:
    return COST_VAR_THREEWISE_NS_PIXEL + COST_VAR_THREEWISE_NS_LOG * doublings;
  default:
    return COST_VAR_EXACT_NS_PIXEL;
  }
}

/* ns per pixel of the PSNR's reference (an exact map) and its comparison, for method m. */
static double var_psnr_ns(int m) {
  return m == CPU_VAR_EXACT ? 0 : COST_VAR_PSNR_NS_PIXEL;
}

/* Seconds of CPU by the cost model: a colour image's luma, the map, the PSNR. */
static double var_cost(const void *params, const struct codec_shape *s) {
  const struct var_params *p = params;
  int m = p->method == VAR_AUTO ? CPU_VAR_EXACT : p->method;
  double ns = var_ns(m, p->radius) + (s->channels > 1 ? COST_VAR_LUMA_NS_PIXEL : 0) +
              (p->psnr ? var_psnr_ns(m) : 0);
  return (double)s->width * s->height * ns * 1e-9;
}

const struct endpoint api_variance_endpoint = {
    "/variance", var_params, OP_NPARAMS(var_params), 0, CPU_VAR_NMETHODS, -1, var_check, var_cost};

/* ---- /methods ---- */

/* The largest radius of method m whose estimate (psnr on, the default) for an image of pixels is
 * within the budget: 0 when none is, CPU_VAR_RADIUS_MAX when all are. */
static int var_max_radius(const struct api_ctx *ctx, int m, double pixels) {
  double extra = var_psnr_ns(m), limit = ctx->cfg.max_cost;
  int r = 0;
  while (r < CPU_VAR_RADIUS_MAX &&
         (limit <= 0 || (var_ns(m, r + 1) + extra) * pixels * 1e-9 <= limit))
    r++;
  return r;
}

/* What method m costs: ns per pixel at a few radii, and the largest radius the budget
 * (--max-cost) admits at a few image sizes (an O(r^2) method's radius limit depends on it). */
static json_t *var_cost_entry(const struct api_ctx *ctx, int m) {
  static const double mp[] = {1, 12, 40};
  static const int radii[] = {1, 7, 31, 127};
  json_t *ns = json_object(), *maxr = json_object();
  char key[32];
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof(key), "%d", radii[i]);
    json_object_set_new(ns, key, json_real(round(var_ns(m, radii[i]) * 100) / 100));
  }
  for (int i = 0; i < 3; i++) {
    snprintf(key, sizeof(key), "%gMP", mp[i]);
    json_object_set_new(maxr, key, json_integer(var_max_radius(ctx, m, mp[i] * 1e6)));
  }
  return json_pack("{s:o, s:o, s:s}", "ns_per_pixel_at_radius", ns, "max_radius", maxr, "rule",
                   "the map from the luma, in ns per pixel; max_radius: the largest radius whose "
                   "map and PSNR reference (the default) are within limits.max_cost_s, beyond "
                   "which a request gets 422 too_expensive (its estimate adds its upload, decode "
                   "and encode)");
}

/* The methods, with the map's normalisation and scaling. */
static void var_methods(const struct api_ctx *ctx, json_t *list) {
  for (int m = 0; m <= CPU_VAR_NMETHODS; m++) {
    int is_auto = m == CPU_VAR_NMETHODS, exact = m == CPU_VAR_EXACT || is_auto;
    json_t *e = op_method_entry(is_auto ? "auto" : cpu_var_method_name(m), &api_variance_endpoint,
                                is_auto ? "exact: exact and O(1) per pixel at any radius"
                                        : cpu_var_method_desc(m),
                                exact ? "exact (integer sums; the same bits on every backend)"
                                      : "float32; X-PSNR measures each request against exact",
                                is_auto ? -1 : m);
    json_object_set_new(e, "cost", var_cost_entry(ctx, is_auto ? CPU_VAR_EXACT : m));
    json_object_set_new(e, "normalization",
                        json_string("population: sum w (x - mean)^2 / W, W the total weight "
                                    "(not W - 1); on luma (BT.601, integer), one map per image"));
    json_object_set_new(e, "scale",
                        json_pack("{s:{s:i, s:i}, s:{s:i, s:f}, s:s}", "8bit", "stddev", 256,
                                  "variance", 4, "16bit", "stddev", 2, "variance", 1.0 / 16384,
                                  "rule", "sample = min(65535, round(value * scale)); X-Scale"));
    json_array_append_new(list, e);
  }
}

static void var_result(json_t *o, const void *params, const struct op_result *res) {
  const struct var_params *v = params;
  if (v->method == VAR_AUTO) json_object_set_new(o, "requested_method", json_string("auto"));
  json_object_update_new(o, json_pack("{s:i, s:s, s:s, s:f, s:f, s:f, s:f}", "radius", v->radius,
                                      "window", v->window == CPU_WINDOW_BOX ? "box" : "triangle",
                                      "output", v->output == VAR_STDDEV ? "stddev" : "variance",
                                      "scale", res->scale, "min", res->min, "mean", res->mean,
                                      "max", res->max));
}

/* ---- the compute ---- */

/* The variance of p, how its map becomes an image, and the method the client is told of. */
static struct cpu_var var_of(const struct var_params *p, struct cpu_var_out *o,
                             struct op_result *res) {
  struct cpu_var v = {p->method == VAR_AUTO ? CPU_VAR_EXACT : (enum cpu_var_method)p->method,
                      (enum cpu_window)p->window, p->radius};
  *o = (struct cpu_var_out){p->output == VAR_STDDEV, p->psnr};
  res->method = cpu_var_method_name(v.method);
  return v;
}

/* The statistics s of the map into res; the PSNR only when asked for. */
static void var_report(const struct var_params *p, const struct cpu_var_stats *s,
                       struct op_result *res) {
  res->scale = s->scale, res->min = s->min, res->mean = s->mean, res->max = s->max;
  if (p->psnr) res->psnr = s->psnr;
}

static enum err var_cpu(struct op_env *env, const void *params, struct op_io *io) {
  const struct var_params *p = params;
  struct cpu_var_out o;
  struct cpu_var_stats s;
  struct cpu_var v = var_of(p, &o, io->res);
  struct cpu_image src = op_image(io->in);
  int w = io->in->width, h = io->in->height;
  uint16_t *px = malloc((size_t)w * h * sizeof(*px));
  if (!px) return ERR_OUT_OF_MEMORY;
  *io->out = (struct codec_image){(uint8_t *)px, w, h, 1, 16, CODEC_PNG, 1};
  double t0 = api_now_ms();
  enum err e = cpu_variance_image(env->worker, &v, &o, &src, px, &s);
  if (e != ERR_OK) return e;
  double ref = s.reference_ms; /* timed as its own stage, as the GPU's */
  *io->t = (struct stage_times){api_now_ms() - t0 - (ref > 0 ? ref : 0), ref, -1, -1, -1};
  var_report(p, &s, io->res);
  return ERR_OK;
}

#ifdef BLURD_CUDA
struct var_arg { /* launch_variance's */
  struct cpu_var v;
  struct cpu_var_out o;
  struct cpu_var_stats *s;
};

static enum gpu_status launch_variance(struct gpu_ctx *ctx, const void *arg,
                                       const struct cpu_image *img, struct cpu_accuracy *acc,
                                       struct gpu_times *g) {
  const struct var_arg *a = arg;
  (void)acc;
  return gpu_variance_resident(ctx, &a->v, &a->o, img, a->s, g);
}

/* On the device: the 16-bit map stays there for the encode's download. */
static enum err var_gpu(struct op_env *env, const void *params, struct op_io *io) {
  const struct var_params *p = params;
  struct cpu_var_stats s;
  struct var_arg a = {.s = &s};
  a.v = var_of(p, &a.o, io->res);
  enum err e = op_gpu_run(env, io, launch_variance, &a, NULL);
  io->out->channels = 1, io->out->depth = 16, io->out->format = CODEC_PNG;
  if (e == ERR_OK) var_report(p, &s, io->res);
  return e;
}
#else
#define var_gpu NULL
#endif

const struct api_op op_variance = {
    "variance",
    "Local variance or standard deviation map of the upload's luma (the methods the Threewise "
    "paper compares, and an exact one), as a 16-bit gray PNG.",
    "The method that ran, auto resolved to the one it chose.",
    &api_variance_endpoint,
    sizeof(struct var_params),
    var_methods,
    {{"radius", "integer", "the window radius."},
     {"window", "string", "triangle or box."},
     {"output", "string", "stddev or variance."},
     {"scale", "number", "PNG sample = min(65535, round(value * scale))."},
     {"min", "number", "the map's smallest value, unscaled."},
     {"mean", "number", "the map's mean, unscaled."},
     {"max", "number", "the map's largest value, unscaled."}},
    var_result,
    {[ENGINE_CPU] = var_cpu, [ENGINE_GPU] = var_gpu},
};

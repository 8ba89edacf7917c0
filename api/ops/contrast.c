/* POST /contrast: local contrast enhancement (Wallis statistical differencing) on luma, colour
 * kept. cpu_contrast_image on the CPU, gpu_contrast_resident on the device. */
#include "../api_int.h"
#include "cost_table.h"

#include <stdio.h>

#define OFF(field) offsetof(struct contrast_params, field)

static const struct param_spec contrast_params[] = {
    {"radius", PT_INT, 1, CPU_VAR_RADIUS_MAX, NULL, "5", OFF(radius),
     "Box window radius of the local mean and standard deviation of luma (5: libvips stdif's "
     "11x11).",
     0},
    {"a", PT_NUMBER, 0, 1, NULL, "0.5", OFF(a),
     "Weight of the target mean m0 against the local mean.", 0},
    {"m0", PT_NUMBER, 0, 255, NULL, "128", OFF(m0),
     "Target mean in 8-bit levels (times 257 for 16-bit images).", 0},
    {"b", PT_NUMBER, 0, 1, NULL, "0.5", OFF(b),
     "Gain weight: how far the local standard deviation is pulled towards s0.", 0},
    {"s0", PT_NUMBER, 1, 255, NULL, "50", OFF(s0),
     "Target standard deviation in 8-bit levels (times 257 for 16-bit images).", 0},
    OP_OUTPUT_PARAMS(struct contrast_params),
};

/* Seconds of CPU by the cost model: per pixel and per sample, at any radius (running sums). */
static double contrast_cost(const void *params, const struct codec_shape *s) {
  (void)params;
  return (double)s->width * s->height *
         (COST_CONTRAST_NS_PIXEL + COST_CONTRAST_NS_SAMPLE * s->channels) * 1e-9;
}

const struct endpoint api_contrast_endpoint = {
    "/contrast", contrast_params, OP_NPARAMS(contrast_params), -1, 0, -1, NULL, contrast_cost};

static void contrast_methods(const struct api_ctx *ctx, json_t *list) {
  (void)ctx;
  json_array_append_new(
      list, op_method_entry("wallis", &api_contrast_endpoint,
                            "Wallis statistical differencing on luma, colour kept: Y' = a m0 + (1 "
                            "- a) m + (Y - m) b s0 / (s0 + b s), m and s the box mean and stddev",
                            "double on the CPU; the GPU within 1 level", -1));
}

static void contrast_result(json_t *o, const void *params, const struct op_result *res) {
  const struct contrast_params *c = params;
  (void)res;
  json_object_update_new(o, json_pack("{s:i, s:f, s:f, s:f, s:f}", "radius", c->radius, "a", c->a,
                                      "m0", c->m0, "b", c->b, "s0", c->s0));
}

static struct cpu_contrast contrast_of(const struct contrast_params *p, struct op_io *io) {
  io->res->method = "wallis";
  return (struct cpu_contrast){p->radius, p->a, p->m0, p->b, p->s0};
}

static enum err contrast_cpu(struct op_env *env, const void *params, struct op_io *io) {
  struct cpu_contrast c = contrast_of(params, io);
  struct cpu_image src = op_image(io->in), dst;
  if (op_host_output(io) != ERR_OK) return ERR_OUT_OF_MEMORY;
  dst = op_image(io->out);
  double t0 = api_now_ms();
  enum err e = cpu_contrast_image(env->worker, &c, &src, &dst);
  *io->t = (struct stage_times){api_now_ms() - t0, -1, -1, -1, -1};
  return e;
}

#ifdef BLURD_CUDA
static enum gpu_status launch_contrast(struct gpu_ctx *ctx, const void *arg,
                                       const struct cpu_image *img, struct cpu_accuracy *acc,
                                       struct gpu_times *g) {
  (void)acc;
  return gpu_contrast_resident(ctx, arg, img, g);
}

static enum err contrast_gpu(struct op_env *env, const void *params, struct op_io *io) {
  struct cpu_contrast c = contrast_of(params, io);
  return op_gpu_run(env, io, launch_contrast, &c, NULL);
}
#else
#define contrast_gpu NULL
#endif

const struct api_op op_contrast = {
    "contrast",
    "Local contrast enhancement (Wallis statistical differencing) on luma, colour kept.",
    "Always wallis.",
    &api_contrast_endpoint,
    sizeof(struct contrast_params),
    contrast_methods,
    {{"radius", "integer", "the window radius."},
     {"a", "number", "weight of the target mean."},
     {"m0", "number", "target mean."},
     {"b", "number", "gain weight."},
     {"s0", "number", "target standard deviation."}},
    contrast_result,
    {[ENGINE_CPU] = contrast_cpu, [ENGINE_GPU] = contrast_gpu},
};

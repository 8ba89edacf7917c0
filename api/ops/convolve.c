/* POST /convolve: 2-D convolution with a named (edge, sharpen, emboss, box, gauss3) or custom odd
 * square kernel, replicate border, per channel, alpha copied. Its check builds the kernel to run
 * from kernel, normalize and bias; cpu_convolve_image on the CPU, gpu_convolve_resident on the
 * device, the same bytes. */
#include "../api_int.h"
#include "cost_table.h"

#include <math.h>
#include <stdio.h>

#define OFF(field) offsetof(struct conv_params, field)

static const struct param_spec conv_params[] = {
    {"kernel", PT_KERNEL, 0, 0, cpu_conv_names, NULL, OFF(kernel),
     "A named kernel, or an odd square JSON array of numbers up to 31x31: an array of rows, or "
     "size*size numbers row by row.",
     0},
    {"normalize", PT_BOOL, 0, 1, params_bool_choices, "true", OFF(normalize),
     "Custom kernels: divide the weights by their sum when it is not 0 (named kernels are "
     "normalised already).",
     0},
    {"bias", PT_NUMBER, -65535, 65535, NULL, "0", OFF(bias),
     "Added to every sum, in sample levels; when not given, a named kernel's own (emboss: a "
     "mid-gray), else 0.",
     0},
    OP_OUTPUT_PARAMS(struct conv_params),
};

/* Builds the kernel to run from the kernel, normalize and bias parameters. */
static enum err conv_check(void *params, char *msg, size_t msglen) {
  struct conv_params *p = params;
  const struct api_kernel *k = &p->kernel;
  struct cpu_conv *c = &p->conv;
  int bias_given = op_given(&api_convolve_endpoint, p->given, "bias");
  if (k->named >= 0) {
    if (cpu_conv_named(cpu_conv_names[k->named], c) != ERR_OK) return ERR_INTERNAL;
    if (bias_given) c->bias = (float)p->bias;
    return ERR_OK;
  }
  int n = k->size * k->size;
  double sum = 0, abs_sum = 0;
  for (int i = 0; i < n; i++) sum += k->w[i], abs_sum += fabs(k->w[i]);
  double div = p->normalize && fabs(sum) > 1e-9 * abs_sum ? sum : 1;
  for (int i = 0; i < n; i++) {
    double w = k->w[i] / div;
    if (fabs(w) > KERNEL_WEIGHT_MAX) {
      snprintf(msg, msglen,
               "Normalised, the kernel has a weight of %g (the limit is %g): its sum %g is too "
               "close to 0; send normalize=false.",
               w, KERNEL_WEIGHT_MAX, sum);
      return ERR_BAD_PARAMETER;
    }
    c->k[i] = (float)w;
  }
  c->size = k->size;
  c->bias = (float)p->bias;
  return ERR_OK;
}

/* Seconds of CPU by the cost model: per colour sample (alpha is copied), and per weight of the
 * kernel for each. */
static double conv_cost(const void *params, const struct codec_shape *s) {
  const struct conv_params *p = params;
  double k = p->conv.size,
         colour = s->channels == 2 || s->channels == 4 ? s->channels - 1 : s->channels;
  return (double)s->width * s->height * colour * (COST_CONV_NS_SAMPLE + COST_CONV_NS_TAP * k * k) *
         1e-9;
}

const struct endpoint api_convolve_endpoint = {"/convolve", conv_params, OP_NPARAMS(conv_params),
                                               -1,          0,           (int)OFF(given),
                                               conv_check,  conv_cost};

static void conv_methods(const struct api_ctx *ctx, json_t *list) {
  (void)ctx;
  json_t *e = op_method_entry("convolve", &api_convolve_endpoint,
                              "2-D convolution with a named or custom odd square kernel, replicate "
                              "border, per channel, alpha copied",
                              "float32 in a fixed order: the same bytes on every backend", -1);
  json_t *names = json_array();
  for (int i = 0; cpu_conv_names[i]; i++)
    json_array_append_new(names, json_string(cpu_conv_names[i]));
  json_object_set_new(e, "kernels", names);
  json_array_append_new(list, e);
}

static void conv_result(json_t *o, const void *params, const struct op_result *res) {
  const struct conv_params *p = params;
  (void)res;
  json_object_update_new(
      o, json_pack("{s:i, s:f}", "kernel_size", p->conv.size, "bias", (double)p->conv.bias));
}

static const struct cpu_conv *conv_of(const struct conv_params *p, struct op_io *io) {
  io->res->method = p->kernel.named >= 0 ? cpu_conv_names[p->kernel.named] : "custom";
  return &p->conv;
}

static enum err conv_cpu(struct op_env *env, const void *params, struct op_io *io) {
  const struct cpu_conv *c = conv_of(params, io);
  struct cpu_image src = op_image(io->in), dst;
  if (op_host_output(io) != ERR_OK) return ERR_OUT_OF_MEMORY;
  dst = op_image(io->out);
  double t0 = api_now_ms();
  enum err e = cpu_convolve_image(env->worker, c, &src, &dst);
  *io->t = (struct stage_times){api_now_ms() - t0, -1, -1, -1, -1};
  return e;
}

#ifdef BLURD_CUDA
static enum gpu_status launch_convolve(struct gpu_ctx *ctx, const void *arg,
                                       const struct cpu_image *img, struct cpu_accuracy *acc,
                                       struct gpu_times *g) {
  (void)acc;
  return gpu_convolve_resident(ctx, arg, img, g);
}

static enum err conv_gpu(struct op_env *env, const void *params, struct op_io *io) {
  return op_gpu_run(env, io, launch_convolve, conv_of(params, io), NULL);
}
#else
#define conv_gpu NULL
#endif

const struct api_op op_convolve = {
    "convolve",
    "2-D convolution with a named 3x3 kernel (edge, sharpen, emboss, box, gauss3) or a custom "
    "odd square kernel.",
    "The kernel's name, or custom.",
    &api_convolve_endpoint,
    sizeof(struct conv_params),
    conv_methods,
    {{"kernel_size", "integer", "the kernel's side."}, {"bias", "number", "added to every sum."}},
    conv_result,
    {[ENGINE_CPU] = conv_cpu, [ENGINE_GPU] = conv_gpu},
};

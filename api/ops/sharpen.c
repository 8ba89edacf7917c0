/* POST /sharpen: the unsharp mask, out = in + amount (in - G_sigma(in)) where |in - G| reaches
 * the threshold, on colour (premultiplied) or on luma only. The blur is any /blur method's. On
 * the CPU: cpu_blur_image, then cpu_unsharp_image; on the device: gpu_sharpen_resident, the image
 * never leaving it before the encode. */
#include "../api_int.h"
#include "cost_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define OFF(field) offsetof(struct blur_params, field)

static const struct param_spec sharpen_params[] = {
    {"method", PT_ENUM, 0, 0, op_method_choices, "auto", OFF(method),
     "Blur algorithm of the mask; auto picks the fastest one that reaches 48 dB, the PSNR "
     "included (as /blur's).",
     0},
    {"sigma", PT_NUMBER, CPU_SIGMA_MIN, 50, NULL, "1", OFF(sigma),
     "Standard deviation of the Gaussian in pixels: the size of the detail that is sharpened.", 0},
    {"amount", PT_NUMBER, 0, 10, NULL, "1", OFF(amount),
     "out = in + amount * (in - blurred): 0 leaves the image as it is.", 0},
    {"threshold", PT_NUMBER, 0, 65535, NULL, "0", OFF(threshold),
     "Differences in - blurred smaller than this many levels (of the image's depth) are left "
     "alone, so flat noise is not sharpened.",
     0},
    {"luma", PT_BOOL, 0, 1, params_bool_choices, "false", OFF(luma),
     "Sharpen luma only (BT.601) and add its change to R, G and B: no colour fringes.", 0},
    {"truncate", PT_NUMBER, 1, 8, NULL, "4", OFF(truncate),
     "Kernel radius in sigmas, as for /blur.", OP_FIR_FAMILY | 1u << CPU_PYRAMID},
    {"coeffs", PT_ENUM, 0, 0, op_coeff_choices, "calibrated", OFF(coeffs),
     "Young-van Vliet coefficient set, as for /blur.", OP_YVV_FAMILY},
    OP_OUTPUT_PARAMS(struct blur_params),
    {"psnr", PT_BOOL, 0, 1, params_bool_choices, "true", OFF(psnr),
     "Measure the mask's blur against the exact Gaussian (X-PSNR).", 0},
};

static enum err sharpen_check(void *params, char *msg, size_t msglen) {
  struct blur_params *p = params;
  (void)msg, (void)msglen;
  p->sigma_x = p->sigma_y = p->sigma;
  return ERR_OK;
}

/* Seconds of CPU of the filter by the cost model: the blur, as /blur's on the whole image, and
 * the mask per sample. */
static double sharpen_cost(const void *params, const struct codec_shape *s) {
  const struct blur_params *p = params;
  struct cpu_blur b = op_blur_cpu(p, s->width, s->height);
  return op_blur_s(&b, p->psnr, s->width, s->height, s->channels) +
         (double)s->width * s->height * s->channels * COST_UNSHARP_NS_SAMPLE * 1e-9;
}

const struct endpoint api_sharpen_endpoint = {
    "/sharpen",    sharpen_params, OP_NPARAMS(sharpen_params), 0, CPU_NMETHODS, (int)OFF(given),
    sharpen_check, sharpen_cost};

static void sharpen_methods(const struct api_ctx *ctx, json_t *list) {
  (void)ctx;
  json_array_append_new(
      list, op_method_entry("unsharp", &api_sharpen_endpoint,
                            "unsharp mask: out = in + amount (in - G_sigma(in)) where |in - G| >= "
                            "threshold; the Gaussian by any /blur method (parameter method)",
                            "the mask's blur as the /blur method's; X-PSNR measures it", -1));
}

static void sharpen_result(json_t *o, const void *params, const struct op_result *res) {
  const struct blur_params *p = params;
  (void)res;
  if (p->method == METHOD_AUTO) json_object_set_new(o, "requested_method", json_string("auto"));
  json_object_update_new(o, json_pack("{s:f, s:f}", "sigma_x", p->sigma_x, "sigma_y", p->sigma_y));
  if (p->sigma_x == p->sigma_y) json_object_set_new(o, "sigma", json_real(p->sigma_x));
  json_object_update_new(o,
                         json_pack("{s:f, s:f}", "amount", p->amount, "threshold", p->threshold));
}

/* The blur of p and the unsharp mask, with what the client is told of them. */
static struct cpu_blur sharpen_blur(struct op_env *env, const struct blur_params *p,
                                    struct op_io *io, struct cpu_unsharp *u) {
  struct cpu_blur b = op_blur_resolve(env, p, io);
  *u = (struct cpu_unsharp){p->amount, p->threshold, p->luma};
  return b;
}

static enum err sharpen_cpu(struct op_env *env, const void *params, struct op_io *io) {
  const struct blur_params *p = params;
  struct cpu_unsharp u;
  struct cpu_blur b = sharpen_blur(env, p, io, &u);
  struct cpu_image src = op_image(io->in), blurred = src, dst;
  struct cpu_accuracy acc;
  struct cpu_timing ct;
  if (op_host_output(io) != ERR_OK) return ERR_OUT_OF_MEMORY;
  dst = op_image(io->out);
  if (!(blurred.data = codec_alloc_pixels(cpu_image_bytes(&src)))) return ERR_OUT_OF_MEMORY;
  /* an unfinished blur (out of memory, or stopped by the job's token) is not sharpened */
  enum err e = cpu_blur_image(env->worker, &b, &src, &blurred, p->psnr ? &acc : NULL, &ct);
  if (e == ERR_OK) {
    double t0 = api_now_ms();
    e = cpu_unsharp_image(env->worker, &u, &src, &blurred, &dst);
    *io->t = (struct stage_times){ct.filter + api_now_ms() - t0, p->psnr ? ct.reference : -1, -1,
                                  -1, -1};
    if (p->psnr) io->res->psnr = acc.psnr;
  }
  free(blurred.data);
  return e;
}

#ifdef BLURD_CUDA
struct sharpen_arg { /* launch_sharpen's */
  struct cpu_blur b;
  struct cpu_unsharp u;
};

static enum gpu_status launch_sharpen(struct gpu_ctx *ctx, const void *arg,
                                      const struct cpu_image *img, struct cpu_accuracy *acc,
                                      struct gpu_times *g) {
  const struct sharpen_arg *a = arg;
  return gpu_sharpen_resident(ctx, &a->b, &a->u, img, acc, g);
}

static enum err sharpen_gpu(struct op_env *env, const void *params, struct op_io *io) {
  const struct blur_params *p = params;
  struct sharpen_arg a;
  struct cpu_accuracy acc;
  a.b = sharpen_blur(env, p, io, &a.u);
  enum err e = op_gpu_run(env, io, launch_sharpen, &a, p->psnr ? &acc : NULL);
  if (e == ERR_OK && p->psnr) io->res->psnr = acc.psnr;
  return e;
}
#else
#define sharpen_gpu NULL
#endif

const struct api_op op_sharpen = {
    "sharpen",
    "Unsharp mask: out = in + amount (in - G_sigma(in)), with a threshold, on colour "
    "(premultiplied) or on luma only.",
    "The blur method that ran, auto resolved to the one it chose.",
    &api_sharpen_endpoint,
    sizeof(struct blur_params),
    sharpen_methods,
    {{"sigma_x", "number", "sigma along x."},
     {"sigma_y", "number", "sigma along y."},
     {"amount", "number", "the gain of the mask."},
     {"threshold", "number", "the threshold in levels."}},
    sharpen_result,
    {[ENGINE_CPU] = sharpen_cpu, [ENGINE_GPU] = sharpen_gpu},
};

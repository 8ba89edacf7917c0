/* What the operation descriptors share: the blur's method and coefficient choices and its cost
 * model (for /blur and /sharpen), the clipping of a region, the /methods entry, and the images a
 * compute starts from. No descriptor is here: each is in its own file beside this one. */
#include "../api_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const op_method_choices[] = {
#define X(e, name, desc, acc) name,
    CPU_METHODS(X)
#undef X
        "auto",
    NULL,
};
const char *const op_coeff_choices[] = {
#define X(e, name) name,
    CPU_YVV_SETS(X)
#undef X
        NULL,
};

/* ---- the cost model of a blur ----
 * ns per sample measured with scripts/cost-calibration.sh on the 2-core build machine
 * (docs/engineering-notes.md, "Cost model"): the filter stage and the PSNR reference. The
 * constants are the slowest of the repeats' minima, rounded up. */
#define NS_FIR_BASE 9.0   /* fir family: per sample, plus NS_FIR_TAP per tap of an axis */
#define NS_FIR_TAP  0.40  /* the taps of an axis: 2 ceil(truncate sigma) + 1, at most its size */
#define NS_SEP_BASE 1.0   /* separable, in doubles: per sample */
#define NS_SEP_TAP  0.044 /* separable: per tap of an axis */
#define NS_REF_BASE 3.0   /* the PSNR reference (separable at CPU_TRUNCATE), and the SSE */
#define NS_REF_TAP  0.071 /* the reference: per tap of an axis */
#define NS_YVV      2.5   /* yvv, yvv_blocked */
#define NS_DERICHE  3.5
#define NS_YVV2WAY  4.0
#define NS_PYRAMID  12.0

/* Taps of the Gaussian of sigma cut at truncate sigmas along an axis of n pixels: past the
 * image's size the edge is replicated and the sums cost no more. */
static double axis_taps(double sigma, double truncate, int n) {
  double t = 2 * ceil(truncate * sigma) + 1;
  return t < n ? t : n;
}

double op_blur_ns(const struct cpu_blur *b, int psnr, int width, int height) {
  double tx = axis_taps(b->sigma_x, b->truncate, width),
         ty = axis_taps(b->sigma_y, b->truncate, height), ns;
  if (cpu_method_is_fir(b->method))
    ns = NS_FIR_BASE + NS_FIR_TAP * (tx + ty) / 2;
  else if (b->method == CPU_SEPARABLE)
    ns = NS_SEP_BASE + NS_SEP_TAP * (tx + ty) / 2;
  else if (b->method == CPU_DERICHE)
    ns = NS_DERICHE;
  else if (b->method == CPU_YVV2WAY)
    ns = NS_YVV2WAY;
  else if (b->method == CPU_PYRAMID)
    ns = NS_PYRAMID;
  else
    ns = NS_YVV;
  if (psnr)
    ns += NS_REF_BASE + NS_REF_TAP *
                            (axis_taps(b->sigma_x, CPU_TRUNCATE, width) +
                             axis_taps(b->sigma_y, CPU_TRUNCATE, height)) /
                            2;
  return ns;
}

struct cpu_blur op_blur_of(const struct blur_params *p, int width, int height,
                           enum cpu_method (*auto_method)(double, int, int)) {
  struct cpu_blur b = {p->method, p->sigma_x, p->sigma_y, p->truncate, p->coeffs};
  double sigma = p->sigma_x > p->sigma_y ? p->sigma_x : p->sigma_y;
  if (p->method == METHOD_AUTO) b.method = auto_method(sigma, width, height);
  return b;
}

struct cpu_blur op_blur_resolve(struct op_env *env, const struct blur_params *p, struct op_io *io) {
  struct cpu_blur b = op_blur_of(p, io->in->width, io->in->height, env->auto_method), s = b;
  s.method = CPU_SEPARABLE;
  if (p->method == METHOD_AUTO && p->psnr && p->regions.n == 0 && env->measures_itself &&
      env->measures_itself(env, &s, io->in))
    b = s;
  io->res->method = cpu_method_name(b.method);
  io->res->sigma_x = p->sigma_x, io->res->sigma_y = p->sigma_y;
  return b;
}

int op_param(const struct endpoint *ep, const void *params, const char *name, int def) {
  const struct param_spec *s = params_spec(ep, name);
  return s ? *(const int *)((const char *)params + s->offset) : def;
}

const char *op_choice(const struct endpoint *ep, const void *params, const char *name,
                      const char *def) {
  const struct param_spec *s = params_spec(ep, name);
  return s ? s->choices[*(const int *)((const char *)params + s->offset)] : def;
}

struct codec_encode_opts op_output(const struct endpoint *ep, const void *params,
                                   enum codec_format input) {
  struct codec_encode_opts o = {
      .format = codec_format_from_name(op_choice(ep, params, "format", "input")),
      .quality = op_param(ep, params, "quality", 90),
      .compression = op_param(ep, params, "compression", CODEC_PNG_COMPRESSION_DEFAULT),
      .lossless = op_param(ep, params, "lossless", 0)};
  o.effort = op_param(ep, params, "effort", -1);
  o.effort_set = o.effort >= 0;
  if (o.format == CODEC_NONE) o.format = input;
  return o;
}

/* ---- the cost model of an encode ----
 * The encode stage of /convert on the 2-core build machine, one core, 2000x2000 RGB and RGBA
 * images of noise and of smooth noise (blurred at sigma 12), the slower of the two, rounded up
 * (scripts/cost-calibration.sh, 2026-11-26): PNG per byte of samples (the smooth image at levels
 * 7 to 9, where libdeflate's search takes up to 400 ns a byte), WebP and JPEG per pixel (lossy
 * WebP's alpha plane at effort 6: 2.5 us a pixel of noise). */
#define NS_JPEG          20.0
#define NS_WEBP_LOSSLESS 200.0
static const double ns_png_byte[10] = {3, 5, 2.5, 9, 10, 10, 11, 21, 60, 440}; /* by level */
static const double ns_webp[7] = {80, 95, 110, 150, 150, 170, 380};            /* by effort */
static const double ns_webp_alpha[7] = {40, 50, 50, 50, 60, 60, 2500};         /* plus, alpha */

double op_encode_s(const struct codec_encode_opts *o, const struct codec_shape *s) {
  double px = (double)s->width * s->height, ns = NS_JPEG;
  int level = o->compression < 0 || o->compression > 9 ? 9 : o->compression;
  int effort = o->effort_set ? o->effort : CODEC_WEBP_EFFORT_DEFAULT;
  effort = effort < 0 || effort > 6 ? 6 : effort;
  if (o->format == CODEC_RAW || o->format == CODEC_NPY) ns = 0;
  if (o->format == CODEC_PNG) ns = ns_png_byte[level] * s->channels * (s->depth == 16 ? 2 : 1);
  if (o->format == CODEC_WEBP)
    ns = o->lossless
             ? NS_WEBP_LOSSLESS
             : ns_webp[effort] + (s->channels == 2 || s->channels == 4 ? ns_webp_alpha[effort] : 0);
  return px * ns * 1e-9;
}

/* API_IMAGE_TOO_LARGE, with a sentence in msg, when the image of shape s passes ctx's limits on
 * its width, height or pixels (as the decoder would find, before any cost is counted). */
static enum api_error image_limits(const struct api_ctx *ctx, const struct codec_shape *s,
                                   char *msg, size_t msglen) {
  const struct api_config *c = &ctx->cfg;
  uint64_t px = (uint64_t)s->width * (uint64_t)s->height;
  if (c->max_width && (uint32_t)s->width > c->max_width)
    snprintf(msg, msglen, "The image is %d pixels wide; the limit (--max-width) is %u.", s->width,
             c->max_width);
  else if (c->max_height && (uint32_t)s->height > c->max_height)
    snprintf(msg, msglen, "The image is %d pixels high; the limit (--max-height) is %u.", s->height,
             c->max_height);
  else if (c->max_pixels && px > c->max_pixels)
    snprintf(msg, msglen, "The image has %llu pixels (%dx%d); the limit (--max-pixels) is %llu.",
             (unsigned long long)px, s->width, s->height, (unsigned long long)c->max_pixels);
  else
    return API_OK;
  return API_IMAGE_TOO_LARGE;
}

enum api_error op_budget(const struct api_ctx *ctx, const struct endpoint *ep, const void *params,
                         const uint8_t *image, size_t len, double *estimate_s, char *msg,
                         size_t msglen) {
  struct codec_shape shape;
  double limit = ctx->cfg.max_cost;
  *estimate_s = 0;
  if (codec_probe(image, len, &shape) != 0) return API_OK;
  enum api_error e = image_limits(ctx, &shape, msg, msglen);
  if (e != API_OK || limit <= 0) return e;
  struct codec_encode_opts out = op_output(ep, params, codec_sniff(image, len));
  *estimate_s = (ep->cost ? ep->cost(params, &shape) : 0) + op_encode_s(&out, &shape);
  if (*estimate_s <= limit) return API_OK;
  snprintf(msg, msglen,
           "This request would take about %.1f s of one CPU core (%s on a %dx%d image of %d "
           "channel%s); the limit (--max-cost) is %g s. Use a faster method, a smaller radius, "
           "sigma, kernel or region, psnr=false, a lower effort or compression, or a smaller "
           "image.",
           *estimate_s, ep->path, shape.width, shape.height, shape.channels,
           shape.channels == 1 ? "" : "s", limit);
  return API_TOO_EXPENSIVE;
}

int op_given(const struct endpoint *ep, unsigned given, const char *name) {
  const struct param_spec *s = params_spec(ep, name);
  return s ? given >> (s - ep->params) & 1 : 0;
}

enum api_error op_region_rect(const struct api_regions *rg, int i, int width, int height,
                              int rect[4], char *msg, size_t msglen) {
  const int *r = rg->r[i];
  long x0 = r[0], y0 = r[1], x1 = (long)r[0] + r[2], y1 = (long)r[1] + r[3];
  rect[0] = (int)(x0 < 0 ? 0 : x0), rect[1] = (int)(y0 < 0 ? 0 : y0);
  rect[2] = (int)(x1 > width ? width : x1), rect[3] = (int)(y1 > height ? height : y1);
  if (rect[0] < rect[2] && rect[1] < rect[3]) return API_OK;
  snprintf(msg, msglen,
           "regions: rectangle %d [%d, %d, %d, %d] lies wholly outside the %dx%d image.", i + 1,
           r[0], r[1], r[2], r[3], width, height);
  return API_BAD_PARAMETER;
}

struct cpu_image op_image(const struct codec_image *img) {
  return (struct cpu_image){img->pixels, img->width, img->height, img->channels, img->depth};
}

enum api_error op_host_output(struct op_io *io) {
  struct cpu_image shape = op_image(io->in);
  *io->out = *io->in;
  io->out->pixels = codec_alloc_pixels(cpu_image_bytes(&shape));
  return io->out->pixels ? API_OK : API_OUT_OF_MEMORY;
}

enum api_error op_cancelled(void) {
  switch (cpu_cancelled()) {
  case CPU_STOP_DEADLINE:
    return API_DEADLINE_EXCEEDED;
  case CPU_STOP_GONE:
    return API_CLIENT_GONE;
  default:
    return API_OK;
  }
}

/* The backends this build has: "cpu", and "cuda" when compiled with nvcc. */
static json_t *backends(void) {
#ifdef BLURD_CUDA
  return json_pack("[s, s]", "cpu", "cuda");
#else
  return json_pack("[s]", "cpu");
#endif
}

json_t *op_method_entry(const char *name, const struct endpoint *ep, const char *desc,
                        const char *accuracy, int m) {
  return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o}", "name", name, "endpoint", ep->path,
                   "description", desc, "accuracy", accuracy, "backends", backends(), "params",
                   params_describe(ep, m));
}

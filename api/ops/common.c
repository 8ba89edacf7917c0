/* What the operation descriptors share: the blur's method and coefficient choices, the cost model
 * (a request's own part, a blur's for /blur and /sharpen, an answer's encode) and the budget that
 * holds a request to it, the clipping of a region, the /methods entry, and the images a compute
 * starts from. No descriptor is here: each is in its own file beside this one. */
#include "../api_int.h"
#include "cost_table.h"

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

/* ---- the cost model ----
 * Seconds of CPU (user and system, every thread) that a request costs the server, with the
 * constants that scripts/cost-calibration.sh measured and fitted (cost_table.h): the request and
 * its stored-PNG round trip (op_request_s), the operation (each descriptor's cost, built from the
 * terms here for a blur), and what the answer's format adds (op_encode_s). The terms and how they
 * were measured: docs/operations.md, "Limits and costs". */

/* 0 up to lo, 1 from hi, linear in log x between: how far a working set of x bytes has left a
 * cache of lo to hi bytes. */
static double ramp(double x, double lo, double hi) {
  return x <= lo ? 0 : x >= hi ? 1 : log(x / lo) / log(hi / lo);
}

/* Taps that a line of n samples takes on average from a kernel of radius r whose taps past the
 * ends fall on the edge samples (fir.c's loops). */
static double clipped_taps(int r, int n) {
  double s =
      r >= n - 1 ? (double)n * (n - 1) / 2 : (double)r * (r + 1) / 2 + (double)(n - 1 - r) * r;
  return 1 + 2 * s / n;
}

/* image.c's strips of doubles: clipped_taps, but one multiply per symmetric pair of taps away
 * from the edges. */
static double strip_taps(int r, int n) {
  return clipped_taps(r, n) - (n > 2 * r ? (double)(n - 2 * r) * r / n : 0);
}

/* The fir family (fir.c): a row pass, then a column pass whose per-tap cost grows once its rows
 * of 64-bit sums (the kernel's height times the image's width) outgrow the last-level cache. */
static double fir_ns(int rx, int ry, int w, int h) {
  double rows = (2.0 * ry + 1 < h ? 2.0 * ry + 1 : h) * w * 8;
  double m = ramp(rows, COST_L3_BYTES / 2.0, COST_L3_BYTES), ty = clipped_taps(ry, h);
  return COST_FIR_NS_SAMPLE + COST_FIR_ROW_NS_TAP * clipped_taps(rx, w) +
         ty * (COST_FIR_COL_NS_TAP * (1 - m) + COST_FIR_COL_MEM_NS_TAP * m);
}

/* separable in sep.c's single-precision tiles (radii up to CPU_SEP_RADIUS_MAX): a band of rows
 * filters 2 ry rows more along x, and every tap is taken, past the edges too. */
static double sep_ns(int rx, int ry) {
  double band = 8 * ry > 64 ? 8 * ry : 64;
  return COST_SEP_NS_SAMPLE + COST_SEP_NS_TAP * (2.0 * rx + 2 * ry + 2) * (1 + 2 * ry / band);
}

struct terms { /* a blur's cost: ns per sample, per line (a row or a column of a channel), and
                  per pixel with alpha (premultiplied, then divided by alpha) */
  double sample, line, alpha;
};

/* The exact reference (image.c's strips of doubles at CPU_TRUNCATE), its error sums and its
 * rounding, on a w x h image of samples samples: dearer a sample as they grow from an eighth of
 * the last-level cache to all of it (its planes of doubles, fresh pages each time). */
static struct terms reference(const struct cpu_blur *b, int w, int h, double samples) {
  return (struct terms){
      COST_REFERENCE_NS_SAMPLE +
          COST_REFERENCE_MEM_NS_SAMPLE * ramp(samples, COST_L3_BYTES / 8.0, COST_L3_BYTES) +
          COST_STRIPS_NS_TAP * (strip_taps(cpu_gauss_radius(b->sigma_x, CPU_TRUNCATE), w) +
                                strip_taps(cpu_gauss_radius(b->sigma_y, CPU_TRUNCATE), h)),
      COST_REFERENCE_NS_LINE, COST_REFERENCE_NS_ALPHA};
}

/* pyramid along a line of n samples whose sigma is sigma: cpu_pyramid_line's multiply-adds per
 * sample (the reduction by k over the line and the kernel's margin, the reduced Gaussian in
 * symmetric pairs, the expansion). */
static double pyramid_ops(double sigma, double truncate, int n) {
  struct cpu_pyramid p;
  cpu_pyramid_params(sigma, truncate, &p);
  double m = (n + p.k - 1) / p.k, e = p.radius + 1;
  return ((m + 2 * e) * 2 * p.k + (m + 2) * e + 3.0 * n) / n;
}

/* sep.c's tiles take radii up to cpu_int.h's CPU_SEP_RADIUS_MAX; wider kernels, the strips. */
#define SEP_RADIUS_MAX 64

/* The filter of blur b alone on a w x h image on the CPU. */
static struct terms filter(const struct cpu_blur *b, int w, int h) {
  int rx = cpu_gauss_radius(b->sigma_x, b->truncate),
      ry = cpu_gauss_radius(b->sigma_y, b->truncate);
  int sep = b->method == CPU_SEPARABLE || b->method == CPU_PYRAMID;
  struct cpu_pyramid p;
  cpu_pyramid_params(b->sigma_x > b->sigma_y ? b->sigma_x : b->sigma_y, b->truncate, &p);
  if (cpu_method_is_fir(b->method)) return (struct terms){fir_ns(rx, ry, w, h), 0, 0};
  if (b->method == CPU_PYRAMID && p.k > 1)
    return (struct terms){COST_PYRAMID_NS_SAMPLE +
                              COST_PYRAMID_NS_OP * (pyramid_ops(b->sigma_x, b->truncate, w) +
                                                    pyramid_ops(b->sigma_y, b->truncate, h)),
                          COST_PYRAMID_NS_LINE, COST_PYRAMID_NS_ALPHA};
  if (sep && rx <= SEP_RADIUS_MAX && ry <= SEP_RADIUS_MAX)
    return (struct terms){sep_ns(rx, ry), COST_SEP_NS_LINE, COST_SEP_NS_ALPHA};
  if (sep)
    return (struct terms){COST_STRIPS_NS_SAMPLE +
                              COST_STRIPS_NS_TAP * (strip_taps(rx, w) + strip_taps(ry, h)),
                          COST_STRIPS_NS_LINE, COST_STRIPS_NS_ALPHA};
  if (b->method == CPU_DERICHE)
    return (struct terms){COST_DERICHE_NS_SAMPLE, COST_DERICHE_NS_LINE, COST_DERICHE_NS_ALPHA};
  if (b->method == CPU_YVV2WAY)
    return (struct terms){COST_YVV2WAY_NS_SAMPLE, COST_YVV2WAY_NS_LINE, COST_YVV2WAY_NS_ALPHA};
  return (struct terms){COST_YVV_NS_SAMPLE, COST_YVV_NS_LINE, COST_YVV_NS_ALPHA};
}

double op_blur_s(const struct cpu_blur *b, int psnr, int width, int height, int channels) {
  double px = (double)width * height, alpha = channels == 2 || channels == 4 ? px : 0;
  struct terms t = {0, 0, 0}, r = psnr ? reference(b, width, height, px * channels) : t;
  if (!(psnr && cpu_separable_exact(b))) /* else the reference is the filter */
    t = filter(b, width, height);
  return (px * channels * (t.sample + r.sample) +
          (double)(width + height) * channels * (t.line + r.line) + alpha * (t.alpha + r.alpha)) *
         1e-9;
}

double op_region_box_s(int width, int height, int channels) {
  double samples = (double)width * height * channels;
  return (samples *
              (COST_REGION_NS_SAMPLE +
               COST_REGION_MEM_NS_SAMPLE * ramp(samples, COST_L3_BYTES / 8.0, COST_L3_BYTES)) +
          COST_REGION_NS) *
         1e-9;
}

double op_region_copy_s(int width, int height, int channels) {
  return (double)width * height * channels * COST_REGION_COPY_NS_SAMPLE * 1e-9;
}

struct cpu_blur op_blur_of(const struct blur_params *p, int width, int height,
                           enum cpu_method (*auto_method)(double, int, int)) {
  struct cpu_blur b = {p->method, p->sigma_x, p->sigma_y, p->truncate, p->coeffs};
  double sigma = p->sigma_x > p->sigma_y ? p->sigma_x : p->sigma_y;
  if (p->method == METHOD_AUTO) b.method = auto_method(sigma, width, height);
  return b;
}

struct cpu_blur op_blur_cpu(const struct blur_params *p, int width, int height) {
  struct cpu_blur b = op_blur_of(p, width, height, cpu_auto_method), s = b;
  s.method = CPU_SEPARABLE;
  if (p->method == METHOD_AUTO && p->psnr && p->regions.n == 0 && cpu_separable_exact(&s)) b = s;
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
                                   enum codec_format input, const char *accept) {
  struct codec_encode_opts o = {
      .format = codec_format_from_name(op_choice(ep, params, "format", "input")),
      .quality = op_param(ep, params, "quality", 90),
      .compression = op_param(ep, params, "compression", CODEC_PNG_COMPRESSION_DEFAULT),
      .lossless = op_param(ep, params, "lossless", 0)};
  o.effort = op_param(ep, params, "effort", -1);
  o.effort_set = o.effort >= 0;
  if (o.format == CODEC_NONE) o.format = api_output_format(input, accept);
  return o;
}

/* ---- the cost model: the request, its decode and its answer's encode ---- */

double op_encode_s(const struct codec_encode_opts *o, const struct codec_shape *s) {
  return codec_encode_cost_ns(o, s) * 1e-9; /* the format's own terms */
}

double op_request_s(const uint8_t *image, size_t len, const struct codec_shape *s) {
  double bytes = (double)s->width * s->height * s->channels * (s->depth / 8);
  double ns = COST_REQUEST_NS +
              bytes * (COST_IO_NS_BYTE +
                       COST_IO_MEM_NS_BYTE * ramp(bytes, COST_L3_BYTES / 8.0, COST_L3_BYTES));
  ns += codec_decode_cost_ns(image, len, s); /* the format's own terms */
  return ns * 1e-9;
}

/* ERR_IMAGE_TOO_LARGE, with a sentence in msg (the decoder's words, and the flag), when the image
 * of shape s passes ctx's limits on its width, height or pixels, before any cost is counted. */
static enum err image_limits(const struct api_ctx *ctx, const struct codec_shape *s, char *msg,
                             size_t msglen) {
  const struct api_config *c = &ctx->cfg;
  uint64_t px = (uint64_t)s->width * (uint64_t)s->height;
  if (c->max_width && (uint32_t)s->width > c->max_width)
    snprintf(msg, msglen, "The image's width %d exceeds the limit of %u (--max-width).", s->width,
             c->max_width);
  else if (c->max_height && (uint32_t)s->height > c->max_height)
    snprintf(msg, msglen, "The image's height %d exceeds the limit of %u (--max-height).",
             s->height, c->max_height);
  else if (c->max_pixels && px > c->max_pixels)
    snprintf(msg, msglen,
             "The image's pixel count %llu (%dx%d) exceeds the limit of %llu (--max-pixels).",
             (unsigned long long)px, s->width, s->height, (unsigned long long)c->max_pixels);
  else
    return ERR_OK;
  return ERR_IMAGE_TOO_LARGE;
}

enum err op_budget(const struct api_ctx *ctx, const struct endpoint *ep, const void *params,
                   const uint8_t *image, size_t len, const char *accept, double *estimate_s,
                   char *msg, size_t msglen) {
  struct codec_shape shape;
  double limit = ctx->cfg.max_cost;
  *estimate_s = 0;
  if (codec_probe(image, len, &shape) != 0) return ERR_OK;
  enum err e = image_limits(ctx, &shape, msg, msglen);
  if (e != ERR_OK || limit <= 0) return e;
  struct codec_encode_opts out = op_output(ep, params, codec_sniff(image, len), accept);
  *estimate_s = op_request_s(image, len, &shape) + (ep->cost ? ep->cost(params, &shape) : 0) +
                op_encode_s(&out, &shape);
  if (*estimate_s <= limit) return ERR_OK;
  snprintf(msg, msglen,
           "This request would take about %.1f s of one CPU core (%s on a %dx%d image of %d "
           "channel%s); the limit (--max-cost) is %g s. Use a faster method, a smaller radius, "
           "sigma, kernel or region, psnr=false, a lower effort or compression, or a smaller "
           "image.",
           *estimate_s, ep->path, shape.width, shape.height, shape.channels,
           shape.channels == 1 ? "" : "s", limit);
  return ERR_TOO_EXPENSIVE;
}

struct api_response *op_admit(struct api_ctx *ctx, const struct endpoint *ep, const void *params,
                              const uint8_t *image, size_t len, const char *accept) {
  char msg[512], types[512];
  double estimate;
  if (!image || len == 0) {
    snprintf(msg, sizeof(msg),
             "The request carries no image: send it in the form field 'image', or as the raw "
             "body with Content-Type %s.",
             codec_inputs_text(types, sizeof(types), 1));
    return api_error_response(ERR_MISSING_IMAGE, msg);
  }
  if (codec_sniff(image, len) == CODEC_NONE) {
    snprintf(msg, sizeof(msg), "The upload is in no format this service reads: %s.",
             codec_inputs_text(types, sizeof(types), 0));
    return api_error_response(ERR_UNSUPPORTED_MEDIA, msg);
  }
  enum err e = op_budget(ctx, ep, params, image, len, accept, &estimate, msg, sizeof(msg));
  if (e == ERR_OK) return NULL;
  if (e != ERR_TOO_EXPENSIVE) return api_error_response(e, msg); /* past the image limits */
  /* one decimal, as in the sentence */
  return response_error(e, msg,
                        json_pack("{s:f, s:f}", "estimate_s", round(estimate * 10) / 10,
                                  "max_cost_s", ctx->cfg.max_cost));
}

int op_given(const struct endpoint *ep, unsigned given, const char *name) {
  const struct param_spec *s = params_spec(ep, name);
  return s ? given >> (s - ep->params) & 1 : 0;
}

enum err op_region_rect(const struct api_regions *rg, int i, int width, int height, int rect[4],
                        char *msg, size_t msglen) {
  const int *r = rg->r[i];
  long x0 = r[0], y0 = r[1], x1 = (long)r[0] + r[2], y1 = (long)r[1] + r[3];
  rect[0] = (int)(x0 < 0 ? 0 : x0), rect[1] = (int)(y0 < 0 ? 0 : y0);
  rect[2] = (int)(x1 > width ? width : x1), rect[3] = (int)(y1 > height ? height : y1);
  if (rect[0] < rect[2] && rect[1] < rect[3]) return ERR_OK;
  snprintf(msg, msglen,
           "regions: rectangle %d [%d, %d, %d, %d] lies wholly outside the %dx%d image.", i + 1,
           r[0], r[1], r[2], r[3], width, height);
  return ERR_BAD_PARAMETER;
}

/* The backends this build has, as a JSON array of their kinds. */
static json_t *backends(void) {
  json_t *a = json_array();
  char kinds[64];
  snprintf(kinds, sizeof(kinds), "%s", engine_built());
  for (char *save, *k = strtok_r(kinds, ",", &save); k; k = strtok_r(NULL, ",", &save))
    json_array_append_new(a, json_string(k));
  return a;
}

json_t *op_method_entry(const char *name, const struct endpoint *ep, const char *desc,
                        const char *accuracy, int m) {
  return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o}", "name", name, "endpoint", ep->path,
                   "description", desc, "accuracy", accuracy, "backends", backends(), "params",
                   params_describe(ep, m));
}

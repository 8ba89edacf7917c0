/* Request parameters: one table per endpoint says each parameter's type, range, default and
 * meaning; the same table validates requests and describes them in /methods. Parameters come
 * from the query string and from a JSON object: the multipart field `params`, or a JSON body
 * (whose `image` key handler.c takes out first); a key given in both must have the same value
 * there, else the request is a 400 — never a silent precedence. Unknown keys are a 400 too, so a
 * typo never passes unnoticed. */
#include "api_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const method_choices[] = {
#define X(e, name, desc, acc) name,
    CPU_METHODS(X)
#undef X
        "auto",
    NULL,
};
static const char *const coeff_choices[] = {
#define X(e, name) name,
    CPU_YVV_SETS(X)
#undef X
        NULL,
};
static const char *const format_choices[] = {"input", "png", "jpeg", "webp", NULL};
static const char *const bool_choices[] = {"false", "true", NULL};

#define OFF(field) offsetof(struct blur_params, field)

#define FIR_FAMILY (1u << CPU_FIR | 1u << CPU_FIR_SHARED | 1u << CPU_FIR_MWPT | 1u << CPU_SEPARABLE)
#define YVV_FAMILY (1u << CPU_YVV | 1u << CPU_YVV_BLOCKED | 1u << CPU_YVV2WAY)

/* The output parameters of the endpoints that return an image like their input's, for their
 * parameter struct T (which names these fields format, quality, lossless and compression). */
#define COMPRESSION_PARAM(T, def)                                                                  \
  {                                                                                                \
    "compression", PT_INT, 0, 9, NULL, def, offsetof(T, compression),                              \
        "PNG zlib compression level; ignored for JPEG and WebP.", 0                                \
  }
#define OUTPUT_PARAMS(T)                                                                           \
  {"format",                                                                                       \
   PT_ENUM,                                                                                        \
   0,                                                                                              \
   0,                                                                                              \
   format_choices,                                                                                 \
   "input",                                                                                        \
   offsetof(T, format),                                                                            \
   "Output format; 'input' keeps the format of the upload.",                                       \
   0},                                                                                             \
      {"quality",                                                                                  \
       PT_INT,                                                                                     \
       1,                                                                                          \
       100,                                                                                        \
       NULL,                                                                                       \
       "90",                                                                                       \
       offsetof(T, quality),                                                                       \
       "JPEG and lossy WebP quality; ignored for PNG and lossless WebP.",                          \
       0},                                                                                         \
      {"lossless",                                                                                 \
       PT_BOOL,                                                                                    \
       0,                                                                                          \
       1,                                                                                          \
       bool_choices,                                                                               \
       "false",                                                                                    \
       offsetof(T, lossless),                                                                      \
       "WebP only: lossless, every sample exact (quality is not used); false is lossy at "         \
       "quality. Ignored for PNG and JPEG.",                                                       \
       0},                                                                                         \
      COMPRESSION_PARAM(T, "6")

#define SIGMA_DOC "Standard deviation of the Gaussian in pixels"

static const struct param_spec blur_params[] = {
    {"method", PT_ENUM, 0, 0, method_choices, "auto", OFF(method),
     "Blur algorithm; auto picks the fastest one that reaches 48 dB for this sigma and size.", 0},
    {"sigma", PT_NUMBER, CPU_SIGMA_MIN, CPU_SIGMA_MAX, NULL, "", OFF(sigma),
     SIGMA_DOC ", the same on both axes. Give sigma, or sigma_x and sigma_y.", 0},
    {"sigma_x", PT_NUMBER, CPU_SIGMA_MIN, CPU_SIGMA_MAX, NULL, "", OFF(sigma_x),
     SIGMA_DOC " along x (within a row); with sigma_y, in place of sigma.", 0},
    {"sigma_y", PT_NUMBER, CPU_SIGMA_MIN, CPU_SIGMA_MAX, NULL, "", OFF(sigma_y),
     SIGMA_DOC " along y (within a column); with sigma_x, in place of sigma.", 0},
    {"truncate", PT_NUMBER, 1, 8, NULL, "4", OFF(truncate),
     "Kernel radius in sigmas: the taps run to ceil(truncate * sigma) (pyramid: of its reduced "
     "Gaussian).",
     FIR_FAMILY | 1u << CPU_PYRAMID},
    {"coeffs", PT_ENUM, 0, 0, coeff_choices, "calibrated", OFF(coeffs),
     "Young-van Vliet coefficient set; 1995 is the seed paper's.", YVV_FAMILY},
    {"regions", PT_REGIONS, 1, API_REGIONS_MAX, NULL, "", OFF(regions),
     "Blur only these rectangles, each [x, y, w, h] in pixels (a JSON array of them, or "
     "x,y,w,h;x,y,w,h in the query); clipped to the image. Inside them the result equals the "
     "whole-image blur; the rest is the input.",
     0},
    {"feather", PT_INT, 0, 1024, NULL, "0", OFF(feather),
     "With regions: pixels outside each region over which the blur fades out (smoothstep).", 0},
    OUTPUT_PARAMS(struct blur_params),
    {"psnr", PT_BOOL, 0, 1, bool_choices, "true", OFF(psnr),
     "Measure the PSNR against the exact Gaussian (costs about one FIR pass).", 0},
};

static const struct param_spec convert_params[] = {OUTPUT_PARAMS(struct blur_params)};

#define NPARAMS(t) ((int)(sizeof(t) / sizeof(t[0])))

/* ---- the cost model ----
 * Each endpoint's estimate of its work, in seconds of one CPU core, from nanoseconds per sample
 * (a pixel's channel) or per pixel measured with scripts/cost-calibration.sh on the 2-core build
 * machine (docs/engineering-notes.md, "Cost model"): the filter stage and the PSNR reference.
 * The constants are the slowest of the repeats' minima, rounded up. */
#define NS_FIR_BASE    9.0   /* fir family: per sample, plus NS_FIR_TAP per tap of an axis */
#define NS_FIR_TAP     0.40  /* the taps of an axis: 2 ceil(truncate sigma) + 1, at most its size */
#define NS_SEP_BASE    1.0   /* separable, in doubles: per sample */
#define NS_SEP_TAP     0.044 /* separable: per tap of an axis */
#define NS_REF_BASE    3.0   /* the PSNR reference (separable at CPU_TRUNCATE), and the SSE */
#define NS_REF_TAP     0.071 /* the reference: per tap of an axis */
#define NS_YVV         2.5   /* yvv, yvv_blocked */
#define NS_DERICHE     3.5
#define NS_YVV2WAY     4.0
#define NS_PYRAMID     12.0
#define NS_UNSHARP     5.0  /* /sharpen's in + amount (in - blurred), per sample */
#define NS_REGION_COPY 2.0  /* /blur with regions: copying each box out and blending it back */
#define NS_VAR_LUMA    3.0  /* per pixel: luma of a colour image */
#define NS_VAR_O1      10.0 /* naive and koenig: per pixel, plus NS_VAR_TAP per window pixel */
#define NS_VAR_TAP     1.05
#define NS_WELFORD_TAP 4.3  /* welford: per window pixel */
#define NS_VAR_MERGE   40.0 /* pairwise, threewise: per pixel at any radius (log r merges) */
#define NS_VAR_EXACT   22.0 /* exact: per pixel at any radius; also the PSNR reference */
#define NS_CONTRAST    36.0 /* /contrast: per pixel at any radius (running sums) */
#define NS_CONV_BASE   5.0  /* /convolve: per sample, plus NS_CONV_TAP per kernel weight */
#define NS_CONV_TAP    0.73

/* Taps of the Gaussian of sigma cut at truncate sigmas along an axis of n pixels: past the
 * image's size the edge is replicated and the sums cost no more. */
static double axis_taps(double sigma, double truncate, int n) {
  double t = 2 * ceil(truncate * sigma) + 1;
  return t < n ? t : n;
}

/* ns per sample of blur b on a width x height image, the PSNR reference included when psnr. */
static double blur_ns(const struct cpu_blur *b, int psnr, int width, int height) {
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

/* The blur p asks for on an image of shape s: auto resolved as the CPU backend would. */
static struct cpu_blur blur_resolved(const struct blur_params *p, const struct codec_shape *s) {
  struct cpu_blur b = {p->method, p->sigma_x, p->sigma_y, p->truncate, p->coeffs};
  double sigma = p->sigma_x > p->sigma_y ? p->sigma_x : p->sigma_y;
  if (p->method == METHOD_AUTO) b.method = cpu_auto_method(sigma, s->width, s->height);
  return b;
}

/* Pixels /blur filters: the whole image, or the sum of the regions' boxes (each region clipped,
 * grown by the filter's reach and the feather, clipped again), as job.c cuts them. */
static double blur_area(const struct blur_params *p, const struct cpu_blur *b,
                        const struct codec_shape *s) {
  if (p->regions.n == 0) return (double)s->width * s->height;
  int rx = cpu_blur_reach(b, p->sigma_x) + p->feather,
      ry = cpu_blur_reach(b, p->sigma_y) + p->feather;
  double area = 0;
  for (int i = 0; i < p->regions.n; i++) {
    const int *r = p->regions.r[i];
    long x1 = (long)r[0] + r[2], y1 = (long)r[1] + r[3];
    int rect[4] = {r[0] < 0 ? 0 : r[0], r[1] < 0 ? 0 : r[1], (int)(x1 > s->width ? s->width : x1),
                   (int)(y1 > s->height ? s->height : y1)},
        box[4];
    if (rect[0] >= rect[2] || rect[1] >= rect[3]) continue; /* outside: a 400 later */
    cpu_region_box(s->width, s->height, rx, ry, rect, box);
    area += (double)box[2] * box[3];
  }
  return area;
}

static double blur_cost(const void *params, const struct codec_shape *s) {
  const struct blur_params *p = params;
  struct cpu_blur b = blur_resolved(p, s);
  double ns = blur_ns(&b, p->psnr, s->width, s->height) + (p->regions.n ? NS_REGION_COPY : 0);
  return blur_area(p, &b, s) * s->channels * ns * 1e-9;
}

static double sharpen_cost(const void *params, const struct codec_shape *s) {
  const struct blur_params *p = params;
  struct cpu_blur b = blur_resolved(p, s);
  double ns = blur_ns(&b, p->psnr, s->width, s->height) + NS_UNSHARP;
  return (double)s->width * s->height * s->channels * ns * 1e-9;
}

double params_var_ns(int m, int r) {
  double w = (2.0 * r + 1) * (2.0 * r + 1); /* pixels of the window */
  switch (m) {
  case CPU_VAR_NAIVE:
  case CPU_VAR_KOENIG:
    return NS_VAR_O1 + NS_VAR_TAP * w;
  case CPU_VAR_WELFORD:
    return NS_WELFORD_TAP * w;
  case CPU_VAR_PAIRWISE:
  case CPU_VAR_THREEWISE:
    return NS_VAR_MERGE;
  default:
    return NS_VAR_EXACT;
  }
}

static double var_cost(const void *params, const struct codec_shape *s) {
  const struct var_params *p = params;
  int m = p->method == VAR_AUTO ? CPU_VAR_EXACT : p->method;
  double ns = params_var_ns(m, p->radius) + (s->channels > 1 ? NS_VAR_LUMA : 0) +
              (p->psnr && m != CPU_VAR_EXACT ? NS_VAR_EXACT : 0);
  return (double)s->width * s->height * ns * 1e-9;
}

static double contrast_cost(const void *params, const struct codec_shape *s) {
  (void)params;
  return (double)s->width * s->height * NS_CONTRAST * 1e-9;
}

static double conv_cost(const void *params, const struct codec_shape *s) {
  const struct conv_params *p = params;
  double k = p->conv.size;
  return (double)s->width * s->height * s->channels * (NS_CONV_BASE + NS_CONV_TAP * k * k) * 1e-9;
}

const struct endpoint api_convert_endpoint = {
    "/convert", convert_params, NPARAMS(convert_params), -1, 0, -1, NULL, NULL};

static int was_given(const struct endpoint *ep, unsigned given, const char *name);

/* sigma, or sigma_x and sigma_y; feather only with regions. */
static enum api_error blur_check(void *params, char *msg, size_t msglen) {
  struct blur_params *p = params;
  const struct endpoint *ep = &api_blur_endpoint;
  int s = was_given(ep, p->given, "sigma"), sx = was_given(ep, p->given, "sigma_x"),
      sy = was_given(ep, p->given, "sigma_y");
  if (s && (sx || sy)) {
    snprintf(msg, msglen,
             "Give sigma (both axes) or sigma_x and sigma_y, not both; got sigma and %s.",
             sx ? "sigma_x" : "sigma_y");
    return API_CONFLICTING_PARAMETER;
  }
  if (!s && !(sx && sy)) {
    snprintf(msg, msglen,
             "%s is required: the Gaussian's standard deviation in pixels (or "
             "sigma_x and sigma_y, one per axis).",
             sx   ? "sigma_y"
             : sy ? "sigma_x"
                  : "sigma");
    return API_MISSING_PARAMETER;
  }
  if (s) p->sigma_x = p->sigma_y = p->sigma;
  if (p->feather > 0 && p->regions.n == 0) {
    snprintf(msg, msglen, "feather applies only with regions; got feather=%d and none.",
             p->feather);
    return API_BAD_PARAMETER;
  }
  return API_OK;
}

const struct endpoint api_blur_endpoint = {"/blur",    blur_params,  NPARAMS(blur_params),
                                           0,          CPU_NMETHODS, (int)OFF(given),
                                           blur_check, blur_cost};

/* ---- /sharpen ---- */

static const struct param_spec sharpen_params[] = {
    {"method", PT_ENUM, 0, 0, method_choices, "auto", OFF(method),
     "Blur algorithm of the mask; auto picks the fastest one that reaches 48 dB.", 0},
    {"sigma", PT_NUMBER, CPU_SIGMA_MIN, 50, NULL, "1", OFF(sigma),
     SIGMA_DOC ": the size of the detail that is sharpened.", 0},
    {"amount", PT_NUMBER, 0, 10, NULL, "1", OFF(amount),
     "out = in + amount * (in - blurred): 0 leaves the image as it is.", 0},
    {"threshold", PT_NUMBER, 0, 65535, NULL, "0", OFF(threshold),
     "Differences in - blurred smaller than this many levels (of the image's depth) are left "
     "alone, so flat noise is not sharpened.",
     0},
    {"luma", PT_BOOL, 0, 1, bool_choices, "false", OFF(luma),
     "Sharpen luma only (BT.601) and add its change to R, G and B: no colour fringes.", 0},
    {"truncate", PT_NUMBER, 1, 8, NULL, "4", OFF(truncate),
     "Kernel radius in sigmas, as for /blur.", FIR_FAMILY | 1u << CPU_PYRAMID},
    {"coeffs", PT_ENUM, 0, 0, coeff_choices, "calibrated", OFF(coeffs),
     "Young-van Vliet coefficient set, as for /blur.", YVV_FAMILY},
    OUTPUT_PARAMS(struct blur_params),
    {"psnr", PT_BOOL, 0, 1, bool_choices, "true", OFF(psnr),
     "Measure the mask's blur against the exact Gaussian (X-PSNR).", 0},
};

static enum api_error sharpen_check(void *params, char *msg, size_t msglen) {
  struct blur_params *p = params;
  (void)msg, (void)msglen;
  p->sigma_x = p->sigma_y = p->sigma;
  return API_OK;
}

const struct endpoint api_sharpen_endpoint = {
    "/sharpen",   sharpen_params,  NPARAMS(sharpen_params), 0,
    CPU_NMETHODS, (int)OFF(given), sharpen_check,           sharpen_cost};

/* ---- /variance ---- */

static const char *const var_method_choices[] = {
#define X(e, name, desc) name,
    CPU_VAR_METHODS(X)
#undef X
        "auto",
    NULL,
};
static const char *const window_choices[] = {"triangle", "box", NULL};    /* enum cpu_window */
static const char *const output_choices[] = {"stddev", "variance", NULL}; /* enum var_output */
static const char *const png_choices[] = {"png", NULL};

#define VOFF(field) offsetof(struct var_params, field)

static const struct param_spec var_params[] = {
    {"method", PT_ENUM, 0, 0, var_method_choices, "auto", VOFF(method),
     "Local variance algorithm; auto is exact (exact integer sums, O(1) per pixel).", 0},
    {"radius", PT_INT, 1, CPU_VAR_RADIUS_MAX, NULL, "7", VOFF(radius),
     "Window radius r: 2r + 1 pixels per axis; threewise takes r = 2^k - 1 only.", 0},
    {"window", PT_ENUM, 0, 0, window_choices, "triangle", VOFF(window),
     "Weights per axis: triangle is seed 004's 1 2 ... r+1 ... 2 1, box is all ones.", 0},
    {"output", PT_ENUM, 0, 0, output_choices, "stddev", VOFF(output),
     "The map: local standard deviation or variance of luma, population convention (divided by "
     "the total weight W, not W - 1), times the scale in X-Scale.",
     0},
    {"format", PT_ENUM, 0, 0, png_choices, "png", VOFF(format),
     "Output format: the map is always a 16-bit gray PNG (JPEG and WebP hold 8 bits only).", 0},
    /* 3, not 6: a 16-bit map of fine texture compresses 2% less but 4.7 times faster (185
     * against 869 ms for 1920x1080, where the filter takes 70 ms) */
    COMPRESSION_PARAM(struct var_params, "3"),
    {"psnr", PT_BOOL, 0, 1, bool_choices, "true", VOFF(psnr),
     "Measure the map against the exact method's (X-PSNR); costs one exact run.", 0},
};

/* threewise takes r = 2^k - 1 only: the message lists the radii it takes. */
static enum api_error var_check(void *params, char *msg, size_t msglen) {
  const struct var_params *p = params;
  int m = p->method == VAR_AUTO ? CPU_VAR_EXACT : p->method;
  if (cpu_var_radius_ok(m, p->radius)) return API_OK;
  size_t n =
      (size_t)snprintf(msg, msglen, "Method %s takes these radii only:", cpu_var_method_name(m));
  for (int r = 1; r <= CPU_VAR_RADIUS_MAX && n < msglen; r++)
    if (cpu_var_radius_ok(m, r)) n += (size_t)snprintf(msg + n, msglen - n, " %d", r);
  if (n < msglen) snprintf(msg + n, msglen - n, " (2^k - 1); got %d.", p->radius);
  return API_BAD_PARAMETER;
}

const struct endpoint api_variance_endpoint = {
    "/variance", var_params, NPARAMS(var_params), 0, CPU_VAR_NMETHODS, -1, var_check, var_cost};

/* ---- /contrast ---- */

#define COFF(field) offsetof(struct contrast_params, field)

static const struct param_spec contrast_params[] = {
    {"radius", PT_INT, 1, CPU_VAR_RADIUS_MAX, NULL, "5", COFF(radius),
     "Box window radius of the local mean and standard deviation of luma (5: libvips stdif's "
     "11x11).",
     0},
    {"a", PT_NUMBER, 0, 1, NULL, "0.5", COFF(a),
     "Weight of the target mean m0 against the local mean.", 0},
    {"m0", PT_NUMBER, 0, 255, NULL, "128", COFF(m0),
     "Target mean in 8-bit levels (times 257 for 16-bit images).", 0},
    {"b", PT_NUMBER, 0, 1, NULL, "0.5", COFF(b),
     "Gain weight: how far the local standard deviation is pulled towards s0.", 0},
    {"s0", PT_NUMBER, 1, 255, NULL, "50", COFF(s0),
     "Target standard deviation in 8-bit levels (times 257 for 16-bit images).", 0},
    OUTPUT_PARAMS(struct contrast_params),
};

const struct endpoint api_contrast_endpoint = {
    "/contrast", contrast_params, NPARAMS(contrast_params), -1, 0, -1, NULL, contrast_cost};

/* ---- /convolve ---- */

#define KOFF(field)       offsetof(struct conv_params, field)
#define KERNEL_WEIGHT_MAX 1e6 /* largest |weight|, before and after normalising */

static const struct param_spec conv_params[] = {
    {"kernel", PT_KERNEL, 0, 0, cpu_conv_names, NULL, KOFF(kernel),
     "A named kernel, or an odd square JSON array of numbers up to 31x31: an array of rows, or "
     "size*size numbers row by row.",
     0},
    {"normalize", PT_BOOL, 0, 1, bool_choices, "true", KOFF(normalize),
     "Custom kernels: divide the weights by their sum when it is not 0 (named kernels are "
     "normalised already).",
     0},
    {"bias", PT_NUMBER, -65535, 65535, NULL, "0", KOFF(bias),
     "Added to every sum, in sample levels; when not given, a named kernel's own (emboss: a "
     "mid-gray), else 0.",
     0},
    OUTPUT_PARAMS(struct conv_params),
};

/* Builds the kernel to run from the kernel, normalize and bias parameters. */
static enum api_error conv_check(void *params, char *msg, size_t msglen) {
  struct conv_params *p = params;
  const struct api_kernel *k = &p->kernel;
  struct cpu_conv *c = &p->conv;
  int bias_given = was_given(&api_convolve_endpoint, p->given, "bias");
  if (k->named >= 0) {
    if (cpu_conv_named(cpu_conv_names[k->named], c) != 0) return API_INTERNAL;
    if (bias_given) c->bias = (float)p->bias;
    return API_OK;
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
      return API_BAD_PARAMETER;
    }
    c->k[i] = (float)w;
  }
  c->size = k->size;
  c->bias = (float)p->bias;
  return API_OK;
}

const struct endpoint api_convolve_endpoint = {
    "/convolve", conv_params, NPARAMS(conv_params), -1, 0, (int)KOFF(given), conv_check, conv_cost};

const struct endpoint *const api_endpoints[] = {&api_blur_endpoint,
                                                &api_convert_endpoint,
                                                &api_variance_endpoint,
                                                &api_contrast_endpoint,
                                                &api_convolve_endpoint,
                                                &api_sharpen_endpoint,
                                                NULL};

struct pval {            /* a parsed value */
  double num;            /* PT_NUMBER */
  int i;                 /* PT_INT, PT_BOOL, PT_ENUM */
  struct api_kernel k;   /* PT_KERNEL */
  struct api_regions rg; /* PT_REGIONS */
};

static int hexval(int c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

char *params_unescape(const char *s, size_t len) {
  char *out = malloc(len + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < len; i++) {
    int c = (unsigned char)s[i];
    if (c == '+') {
      c = ' ';
    } else if (c == '%') {
      if (i + 2 >= len) goto bad;
      int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);
      if (h < 0 || l < 0) goto bad;
      c = h * 16 + l;
      i += 2;
    }
    if (c == 0) goto bad;
    *o++ = (char)c;
  }
  *o = 0;
  return out;
bad:
  free(out);
  return NULL;
}

static void list_choices(const char *const *choices, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; choices[i] && n < len; i++)
    n += snprintf(buf + n, len - n, "%s%s", i ? ", " : "", choices[i]);
}

static enum api_error bad_value(const struct param_spec *s, const char *got, char *msg,
                                size_t msglen) {
  char choices[256];
  switch (s->type) {
  case PT_NUMBER:
    snprintf(msg, msglen, "%s must be a number from %g to %g; got '%.64s'.", s->name, s->min,
             s->max, got);
    return API_BAD_PARAMETER;
  case PT_INT:
    snprintf(msg, msglen, "%s must be a whole number from %g to %g; got '%.64s'.", s->name, s->min,
             s->max, got);
    return API_BAD_PARAMETER;
  default:
    list_choices(s->choices, choices, sizeof(choices));
    if (strcmp(s->name, "method") == 0) {
      snprintf(msg, msglen, "Unknown method '%.64s'; valid methods: %s.", got, choices);
      return API_UNKNOWN_METHOD;
    }
    snprintf(msg, msglen, "%s must be one of %s; got '%.64s'.", s->name, choices, got);
    return API_BAD_PARAMETER;
  }
}

/* bad_value's sentence for a JSON value of the wrong type, which names the type given ("got a
 * boolean") in place of a quoted value. */
static enum api_error wrong_type(const struct param_spec *s, const char *type, char *msg,
                                 size_t msglen) {
  enum api_error e = bad_value(s, "", msg, msglen);
  char *q = strstr(msg, "; got ''.");
  if (q) snprintf(q, msglen - (size_t)(q - msg), "; got %s.", type);
  q = strstr(msg, "method ''");
  if (q) snprintf(msg, msglen, "method must be a method's name (a string); got %s.", type);
  return e;
}

/* Fills k from the JSON array a: an array of rows, or size*size numbers row by row. */
static enum api_error kernel_from_json(const json_t *a, struct api_kernel *k, char *msg,
                                       size_t msglen) {
  size_t n = json_array_size(a), side = n;
  int rows = json_is_array(json_array_get(a, 0));
  while (!rows && side * side > n) side = (side + n / side) / 2; /* integer square root */
  if (n == 0 || (!rows && side * side != n)) {
    snprintf(msg, msglen,
             "kernel has %zu numbers, not a square number: send size*size numbers (9 for 3x3) or "
             "an array of rows.",
             n);
    return API_BAD_PARAMETER;
  }
  if (side % 2 == 0 || side > CPU_CONV_MAX) {
    size_t cols = rows ? json_array_size(json_array_get(a, 0)) : side;
    snprintf(msg, msglen, "kernel must be square with an odd side from 1 to %d; got %zux%zu.",
             CPU_CONV_MAX, side, cols);
    return API_BAD_PARAMETER;
  }
  for (size_t i = 0; i < side * side; i++) {
    const json_t *row = json_array_get(a, i / side);
    const json_t *v = rows ? json_array_get(row, i % side) : json_array_get(a, i);
    if (rows && json_array_size(row) != side) {
      snprintf(msg, msglen, "kernel must be square: row %zu has %zu numbers, expected %zu.",
               i / side + 1, json_array_size(row), side);
      return API_BAD_PARAMETER;
    }
    if (!json_is_number(v) || !(fabs(json_number_value(v)) <= KERNEL_WEIGHT_MAX)) {
      snprintf(msg, msglen,
               "kernel weights must be numbers from %g to %g; row %zu, column %zu is not.",
               -KERNEL_WEIGHT_MAX, KERNEL_WEIGHT_MAX, i / side + 1, i % side + 1);
      return API_BAD_PARAMETER;
    }
    k->w[i] = json_number_value(v);
  }
  k->named = -1;
  k->size = (int)side;
  return API_OK;
}

/* Parses text as a kernel: one of s's names, or a JSON array. */
static enum api_error kernel_from_text(const struct param_spec *s, const char *text,
                                       struct api_kernel *k, char *msg, size_t msglen) {
  char names[256];
  if (text[strspn(text, " \t\r\n")] == '[') {
    json_error_t err;
    json_t *a = json_loads(text, 0, &err);
    enum api_error e = API_BAD_PARAMETER;
    if (a)
      e = kernel_from_json(a, k, msg, msglen);
    else
      snprintf(msg, msglen, "kernel is not valid JSON: %s (at character %d).", err.text,
               err.position);
    json_decref(a);
    return e;
  }
  for (int i = 0; s->choices[i]; i++)
    if (strcmp(text, s->choices[i]) == 0) {
      *k = (struct api_kernel){.named = i};
      return API_OK;
    }
  list_choices(s->choices, names, sizeof(names));
  snprintf(msg, msglen,
           "kernel must be one of %s, or a JSON array of numbers (an odd square up to %dx%d); "
           "got '%.64s'.",
           names, CPU_CONV_MAX, CPU_CONV_MAX, text);
  return API_BAD_PARAMETER;
}

/* Stores rectangle i of rg from its four numbers v[], checking them. */
static enum api_error region_set(struct api_regions *rg, int i, const double *v, char *msg,
                                 size_t msglen) {
  for (int k = 0; k < 4; k++)
    if (!(fabs(v[k]) <= API_REGION_COORD) || v[k] != floor(v[k])) {
      snprintf(msg, msglen,
               "regions: rectangle %d must be four whole numbers x, y, w, h from -%d to %d.", i + 1,
               API_REGION_COORD, API_REGION_COORD);
      return API_BAD_PARAMETER;
    }
  if (v[2] < 1 || v[3] < 1) {
    snprintf(msg, msglen,
             "regions: rectangle %d is %gx%g; its width and height must be at least 1 pixel.",
             i + 1, v[2], v[3]);
    return API_BAD_PARAMETER;
  }
  for (int k = 0; k < 4; k++) rg->r[i][k] = (int)v[k];
  return API_OK;
}

static enum api_error region_count(size_t n, char *msg, size_t msglen) {
  if (n >= 1 && n <= API_REGIONS_MAX) return API_OK;
  snprintf(msg, msglen, "regions has %zu rectangles; give 1 to %d.", n, API_REGIONS_MAX);
  return API_BAD_PARAMETER;
}

/* Fills rg from the JSON array a of [x, y, w, h] arrays. */
static enum api_error regions_from_json(const json_t *a, struct api_regions *rg, char *msg,
                                        size_t msglen) {
  enum api_error e = region_count(json_array_size(a), msg, msglen);
  for (size_t i = 0; e == API_OK && i < json_array_size(a); i++) {
    const json_t *r = json_array_get(a, i);
    double v[4];
    if (!json_is_array(r) || json_array_size(r) != 4) {
      snprintf(msg, msglen, "regions: rectangle %zu must be an array [x, y, w, h].", i + 1);
      return API_BAD_PARAMETER;
    }
    for (int k = 0; k < 4; k++)
      v[k] = json_is_number(json_array_get(r, k)) ? json_number_value(json_array_get(r, k)) : NAN;
    e = region_set(rg, (int)i, v, msg, msglen);
  }
  rg->n = e == API_OK ? (int)json_array_size(a) : 0;
  return e;
}

/* Parses text as regions: a JSON array, or x,y,w,h;x,y,w,h. */
static enum api_error regions_from_text(const char *text, struct api_regions *rg, char *msg,
                                        size_t msglen) {
  if (text[strspn(text, " \t\r\n")] == '[') {
    json_error_t err;
    json_t *a = json_loads(text, 0, &err);
    enum api_error e = API_BAD_PARAMETER;
    if (json_is_array(a))
      e = regions_from_json(a, rg, msg, msglen);
    else if (a)
      snprintf(msg, msglen, "regions must be a JSON array of [x, y, w, h] arrays.");
    else
      snprintf(msg, msglen, "regions is not valid JSON: %s (at character %d).", err.text,
               err.position);
    json_decref(a);
    return e;
  }
  size_t n = 0;
  for (const char *t = text; *t;) { /* rectangles separated by ';', numbers by ',' */
    double v[4] = {0};
    enum api_error e = region_count(n + 1, msg, msglen);
    for (int k = 0; e == API_OK && k < 4; k++) {
      char *end = (char *)t;
      errno = 0;
      if (isdigit((unsigned char)*t) || *t == '-') v[k] = strtod(t, &end);
      if (end == t || errno || *end != (k < 3 ? ',' : *end ? ';' : 0)) {
        snprintf(msg, msglen,
                 "regions must be x,y,w,h;x,y,w,h (whole numbers) or a JSON array of [x, y, w, "
                 "h]; rectangle %zu is not.",
                 n + 1);
        return API_BAD_PARAMETER;
      }
      t = *end ? end + 1 : end;
    }
    if (e == API_OK) e = region_set(rg, (int)n++, v, msg, msglen);
    if (e != API_OK) return e;
  }
  rg->n = (int)n;
  return region_count(n, msg, msglen);
}

/* Parses text as a value of s. */
static enum api_error parse_text(const struct param_spec *s, const char *text, struct pval *v,
                                 char *msg, size_t msglen) {
  char *end;
  errno = 0;
  if ((s->type == PT_NUMBER || s->type == PT_INT) &&
      (!(isdigit((unsigned char)text[0]) || text[0] == '-' || text[0] == '.') ||
       text[strspn(text, "0123456789.eE+-")] != 0))
    return bad_value(s, text, msg, msglen); /* decimal only: no blanks, hex, "inf" or "nan" */
  switch (s->type) {
  case PT_NUMBER:
    v->num = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v->num) || v->num < s->min || v->num > s->max)
      return bad_value(s, text, msg, msglen);
    return API_OK;
  case PT_INT: {
    long l = strtol(text, &end, 10);
    if (end == text || *end || errno || l < s->min || l > s->max)
      return bad_value(s, text, msg, msglen);
    v->i = (int)l;
    return API_OK;
  }
  case PT_KERNEL:
    return kernel_from_text(s, text, &v->k, msg, msglen);
  case PT_REGIONS:
    return regions_from_text(text, &v->rg, msg, msglen);
  case PT_BOOL:
    if (strcmp(text, "1") == 0) text = "true";
    if (strcmp(text, "0") == 0) text = "false";
    /* fall through */
  case PT_ENUM:
    for (int i = 0; s->choices[i]; i++)
      if (strcmp(text, s->choices[i]) == 0) {
        v->i = i;
        return API_OK;
      }
    return bad_value(s, text, msg, msglen);
  }
  return API_INTERNAL;
}

/* Parses a JSON value as a value of s: numbers for numbers, booleans for booleans, and strings
 * for anything (as in a query string). */
static enum api_error parse_json(const struct param_spec *s, json_t *j, struct pval *v, char *msg,
                                 size_t msglen) {
  char text[64];
  if (json_is_string(j)) return parse_text(s, json_string_value(j), v, msg, msglen);
  if (s->type == PT_KERNEL && json_is_array(j)) return kernel_from_json(j, &v->k, msg, msglen);
  if (s->type == PT_KERNEL) {
    snprintf(msg, msglen, "kernel must be a kernel's name or a JSON array of numbers.");
    return API_BAD_PARAMETER;
  }
  if (s->type == PT_REGIONS && json_is_array(j)) return regions_from_json(j, &v->rg, msg, msglen);
  if (s->type == PT_REGIONS) {
    snprintf(msg, msglen, "regions must be a JSON array of [x, y, w, h] arrays.");
    return API_BAD_PARAMETER;
  }
  if (json_is_boolean(j) && s->type == PT_BOOL) {
    v->i = json_is_true(j);
    return API_OK;
  }
  if (json_is_integer(j)) {
    snprintf(text, sizeof(text), "%" JSON_INTEGER_FORMAT, json_integer_value(j));
  } else if (json_is_real(j)) {
    snprintf(text, sizeof(text), "%.17g", json_real_value(j));
    if (s->type == PT_INT && json_real_value(j) == floor(json_real_value(j)))
      snprintf(text, sizeof(text), "%.0f", json_real_value(j));
  } else {
    return wrong_type(s,
                      json_is_boolean(j) ? "a boolean"
                      : json_is_null(j)  ? "null"
                      : json_is_array(j) ? "an array"
                                         : "an object",
                      msg, msglen);
  }
  if (s->type == PT_ENUM || s->type == PT_BOOL) return bad_value(s, text, msg, msglen);
  return parse_text(s, text, v, msg, msglen);
}

static void store(const struct param_spec *s, const struct pval *v, void *out) {
  if (s->type == PT_KERNEL)
    memcpy((char *)out + s->offset, &v->k, sizeof(v->k));
  else if (s->type == PT_REGIONS)
    memcpy((char *)out + s->offset, &v->rg, sizeof(v->rg));
  else if (s->type == PT_NUMBER)
    *(double *)((char *)out + s->offset) = v->num;
  else
    *(int *)((char *)out + s->offset) = v->i;
}

static const struct param_spec *find_spec(const struct endpoint *ep, const char *name) {
  for (int i = 0; i < ep->nparams; i++)
    if (strcmp(ep->params[i].name, name) == 0) return &ep->params[i];
  return NULL;
}

static enum api_error unknown(const struct endpoint *ep, const char *name, const char *where,
                              char *msg, size_t msglen) {
  char names[256];
  size_t n = 0;
  names[0] = 0;
  for (int i = 0; i < ep->nparams && n < sizeof(names); i++)
    n += snprintf(names + n, sizeof(names) - n, "%s%s", i ? ", " : "", ep->params[i].name);
  snprintf(msg, msglen, "Unknown parameter '%.64s' in %s; %s accepts: %s.", name, where, ep->path,
           names);
  return API_UNKNOWN_PARAMETER;
}

#define MAX_QUERY_PARAMS 32

struct query { /* a decoded query string */
  char *key[MAX_QUERY_PARAMS];
  char *value[MAX_QUERY_PARAMS];
  int n;
};

static void query_free(struct query *q) {
  for (int i = 0; i < q->n; i++) {
    free(q->key[i]);
    free(q->value[i]);
  }
  q->n = 0;
}

static enum api_error query_parse(const struct endpoint *ep, const char *qs, struct query *q,
                                  char *msg, size_t msglen) {
  q->n = 0;
  while (qs && *qs) {
    size_t len = strcspn(qs, "&");
    const char *eq = memchr(qs, '=', len);
    size_t klen = eq ? (size_t)(eq - qs) : len;
    if (len > 0) {
      if (q->n == MAX_QUERY_PARAMS) {
        snprintf(msg, msglen, "The query string has more than %d parameters.", MAX_QUERY_PARAMS);
        return API_BAD_PARAMETER;
      }
      q->key[q->n] = params_unescape(qs, klen);
      q->value[q->n] = eq ? params_unescape(eq + 1, len - klen - 1) : strdup("");
      q->n++;
      if (!q->key[q->n - 1] || !q->value[q->n - 1]) {
        snprintf(msg, msglen, "The query string has a malformed percent escape.");
        return API_BAD_PARAMETER;
      }
      const char *k = q->key[q->n - 1];
      if (!find_spec(ep, k)) return unknown(ep, k, "the query string", msg, msglen);
      for (int i = 0; i < q->n - 1; i++)
        if (strcmp(q->key[i], k) == 0) {
          snprintf(msg, msglen, "%.64s appears more than once in the query string.", k);
          return API_BAD_PARAMETER;
        }
    }
    qs += len + (qs[len] == '&');
  }
  return API_OK;
}

enum api_error params_load_json(const char *what, const char *text, size_t len, json_t **out,
                                char *msg, size_t msglen) {
  json_error_t err;
  json_t *j = json_loadb(text ? text : "", len, JSON_REJECT_DUPLICATES, &err); /* empty body */
  *out = NULL;
  if (!j)
    snprintf(msg, msglen, "%s must be a JSON object: %s (line %d, column %d).", what, err.text,
             err.line, err.column);
  else if (!json_is_object(j)) /* without JSON_DECODE_ANY, the only other value is an array */
    snprintf(msg, msglen, "%s must be a JSON object: it is an array.", what);
  else
    *out = j;
  if (!*out) json_decref(j);
  return *out ? API_OK : API_BAD_JSON;
}

static int same_value(const struct param_spec *s, const struct pval *a, const struct pval *b) {
  if (s->type == PT_NUMBER) return a->num == b->num;
  if (s->type == PT_REGIONS)
    return a->rg.n == b->rg.n && memcmp(a->rg.r, b->rg.r, sizeof(a->rg.r[0]) * a->rg.n) == 0;
  if (s->type != PT_KERNEL) return a->i == b->i;
  size_t n = a->k.named < 0 ? (size_t)a->k.size * (size_t)a->k.size : 0;
  return a->k.named == b->k.named && a->k.size == b->k.size &&
         memcmp(a->k.w, b->k.w, n * sizeof(a->k.w[0])) == 0;
}

/* Resolves one parameter from its two sources and its default; *given says whether the request
 * had it. */
static enum api_error resolve(const struct param_spec *s, const struct query *q, json_t *json,
                              const char *where, void *out, int *given, char *msg, size_t msglen) {
  static const struct pval zero;
  struct pval qv = zero, jv = zero;
  const char *qtext = NULL;
  json_t *jval = json ? json_object_get(json, s->name) : NULL;
  enum api_error e;
  for (int i = 0; i < q->n; i++)
    if (strcmp(q->key[i], s->name) == 0) qtext = q->value[i];
  *given = qtext || jval;
  if (qtext && (e = parse_text(s, qtext, &qv, msg, msglen)) != API_OK) return e;
  if (jval && (e = parse_json(s, jval, &jv, msg, msglen)) != API_OK) return e;
  if (qtext && jval && !same_value(s, &qv, &jv)) {
    snprintf(msg, msglen,
             "%s is '%.32s' in the query string but has another value in %s; give it once.",
             s->name, qtext, where);
    return API_CONFLICTING_PARAMETER;
  }
  if (!qtext && !jval) {
    if (!s->def) {
      snprintf(msg, msglen, "%s is required: %s", s->name, s->doc);
      return API_MISSING_PARAMETER;
    }
    if (*s->def && (e = parse_text(s, s->def, &qv, msg, msglen)) != API_OK) return API_INTERNAL;
  }
  store(s, jval && !qtext ? &jv : &qv, out);
  return API_OK;
}

/* A parameter given for a method it does not apply to is a mistake worth a 400. */
static enum api_error check_applies(const struct endpoint *ep, const int *given, const void *out,
                                    char *msg, size_t msglen) {
  if (ep->method_param < 0) return API_OK;
  const struct param_spec *mp = &ep->params[ep->method_param];
  int m = *(const int *)((const char *)out + mp->offset);
  for (int i = 0; m < ep->nmethods && i < ep->nparams; i++) {
    const struct param_spec *s = &ep->params[i];
    if (!given[i] || !s->methods || (s->methods >> m & 1)) continue;
    size_t n = (size_t)snprintf(msg, msglen, "%s does not apply to method %s; it applies to",
                                s->name, mp->choices[m]);
    for (int k = 0; k < ep->nmethods && n < msglen; k++)
      if (s->methods >> k & 1) n += (size_t)snprintf(msg + n, msglen - n, " %s", mp->choices[k]);
    if (n < msglen) snprintf(msg + n, msglen - n, ".");
    return API_BAD_PARAMETER;
  }
  return API_OK;
}

enum api_error params_parse_object(const struct endpoint *ep, const char *query, json_t *obj,
                                   const char *where, void *out, char *msg, size_t msglen) {
  struct query q;
  int given[MAX_PARAMS] = {0};
  const char *key;
  json_t *val;
  enum api_error e = query_parse(ep, query, &q, msg, msglen);
  json_object_foreach(obj, key, val) {
    if (e == API_OK && !find_spec(ep, key)) e = unknown(ep, key, where, msg, msglen);
  }
  for (int i = 0; e == API_OK && i < ep->nparams; i++)
    e = resolve(&ep->params[i], &q, obj, where, out, &given[i], msg, msglen);
  if (e == API_OK) e = check_applies(ep, given, out, msg, msglen);
  unsigned mask = 0;
  for (int i = 0; i < ep->nparams; i++) mask |= (unsigned)given[i] << i;
  if (e == API_OK && ep->given_offset >= 0)
    memcpy((char *)out + ep->given_offset, &mask, sizeof(mask));
  if (e == API_OK && ep->check) e = ep->check(out, msg, msglen);
  query_free(&q);
  return e;
}

enum api_error params_parse(const struct endpoint *ep, const char *query, const char *json,
                            size_t json_len, void *out, char *msg, size_t msglen) {
  json_t *j = NULL;
  if (json && json_len > PARAMS_JSON_MAX) {
    snprintf(msg, msglen, "The params field has %zu bytes; the limit is %d.", json_len,
             PARAMS_JSON_MAX);
    return API_BAD_JSON;
  }
  enum api_error e =
      json ? params_load_json("The params field", json, json_len, &j, msg, msglen) : API_OK;
  if (e == API_OK) e = params_parse_object(ep, query, j, "params", out, msg, msglen);
  json_decref(j);
  return e;
}

static const char *const type_names[] = {"number", "integer", "boolean",
                                         "string", "kernel",  "regions"};

static int was_given(const struct endpoint *ep, unsigned given, const char *name) {
  const struct param_spec *s = find_spec(ep, name);
  return s && (given >> (s - ep->params) & 1);
}

json_t *params_describe(const struct endpoint *ep, int m) {
  json_t *arr = json_array();
  for (int i = 0; arr && i < ep->nparams; i++) {
    const struct param_spec *s = &ep->params[i];
    if (m >= 0 && s->methods && !(s->methods >> m & 1)) continue;
    json_t *p = json_pack("{s:s, s:s, s:b, s:s}", "name", s->name, "type", type_names[s->type],
                          "required", s->def == NULL, "description", s->doc);
    if (!p) continue;
    if (s->def && *s->def) json_object_set_new(p, "default", json_string(s->def));
    if (s->type == PT_NUMBER || s->type == PT_INT) {
      json_object_set_new(p, "min", json_real(s->min));
      json_object_set_new(p, "max", json_real(s->max));
    }
    if (s->type == PT_KERNEL) json_object_set_new(p, "max_size", json_integer(CPU_CONV_MAX));
    if (s->type == PT_REGIONS) json_object_set_new(p, "max_items", json_integer(API_REGIONS_MAX));
    if (s->type == PT_ENUM || s->type == PT_KERNEL) {
      json_t *c = json_array();
      for (int k = 0; s->choices[k]; k++) json_array_append_new(c, json_string(s->choices[k]));
      json_object_set_new(p, "choices", c);
    }
    json_array_append_new(arr, p);
  }
  return arr;
}

enum api_error params_budget(const struct api_ctx *ctx, const struct endpoint *ep,
                             const void *params, const uint8_t *image, size_t len,
                             double *estimate_s, char *msg, size_t msglen) {
  struct codec_shape shape;
  double limit = ctx->cfg.max_cost;
  *estimate_s = 0;
  if (limit <= 0 || !ep->cost || codec_probe(image, len, &shape) != 0) return API_OK;
  *estimate_s = ep->cost(params, &shape);
  if (*estimate_s <= limit) return API_OK;
  snprintf(msg, msglen,
           "This request would take about %.1f s of one CPU core (%s on a %dx%d image of %d "
           "channel%s); the limit (--max-cost) is %g s. Use a faster method, a smaller radius, "
           "sigma, kernel or region, psnr=false, or a smaller image.",
           *estimate_s, ep->path, shape.width, shape.height, shape.channels,
           shape.channels == 1 ? "" : "s", limit);
  return API_TOO_EXPENSIVE;
}

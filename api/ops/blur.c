/* POST /blur: the Gaussian blur of the whole image, or of regions of it (each region's box
 * blurred alone and blended in with a feather). Its parameters, their check, its cost, its
 * /methods rows (one per method, with the cost model's figures), its JSON fields, and its compute
 * on each backend: cpu_blur_image on the CPU box by box, gpu_blur_resident and gpu_blur_regions on
 * the device, where the image stays. */
#include "../api_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define OFF(field) offsetof(struct blur_params, field)

#define SIGMA_DOC "Standard deviation of the Gaussian in pixels"

static const struct param_spec blur_params[] = {
    {"method", PT_ENUM, 0, 0, op_method_choices, "auto", OFF(method),
     "Blur algorithm; auto picks the fastest one that reaches 48 dB for this sigma and size, the "
     "PSNR included: with it, separable computed exactly, which measures itself (on the CPU at "
     "the default truncate; on the GPU for 8-bit gray or RGB up to sigma 40).",
     0},
    {"sigma", PT_NUMBER, CPU_SIGMA_MIN, CPU_SIGMA_MAX, NULL, "", OFF(sigma),
     SIGMA_DOC ", the same on both axes. Give sigma, or sigma_x and sigma_y.", 0},
    {"sigma_x", PT_NUMBER, CPU_SIGMA_MIN, CPU_SIGMA_MAX, NULL, "", OFF(sigma_x),
     SIGMA_DOC " along x (within a row); with sigma_y, in place of sigma.", 0},
    {"sigma_y", PT_NUMBER, CPU_SIGMA_MIN, CPU_SIGMA_MAX, NULL, "", OFF(sigma_y),
     SIGMA_DOC " along y (within a column); with sigma_x, in place of sigma.", 0},
    {"truncate", PT_NUMBER, 1, 8, NULL, "4", OFF(truncate),
     "Kernel radius in sigmas: the taps run to ceil(truncate * sigma) (pyramid: of its reduced "
     "Gaussian).",
     OP_FIR_FAMILY | 1u << CPU_PYRAMID},
    {"coeffs", PT_ENUM, 0, 0, op_coeff_choices, "calibrated", OFF(coeffs),
     "Young-van Vliet coefficient set; 1995 is the seed paper's.", OP_YVV_FAMILY},
    {"regions", PT_REGIONS, 1, API_REGIONS_MAX, NULL, "", OFF(regions),
     "Blur only these rectangles, each [x, y, w, h] in pixels (a JSON array of them, or "
     "x,y,w,h;x,y,w,h in the query); clipped to the image. Inside them the result equals the "
     "whole-image blur; the rest is the input.",
     0},
    {"feather", PT_INT, 0, 1024, NULL, "0", OFF(feather),
     "With regions: pixels outside each region over which the blur fades out (smoothstep).", 0},
    OP_OUTPUT_PARAMS(struct blur_params),
    {"psnr", PT_BOOL, 0, 1, params_bool_choices, "true", OFF(psnr),
     "Measure the PSNR against the exact Gaussian (costs about one FIR pass).", 0},
};

/* sigma, or sigma_x and sigma_y; feather only with regions. */
static enum err blur_check(void *params, char *msg, size_t msglen) {
  struct blur_params *p = params;
  const struct endpoint *ep = &api_blur_endpoint;
  int s = op_given(ep, p->given, "sigma"), sx = op_given(ep, p->given, "sigma_x"),
      sy = op_given(ep, p->given, "sigma_y");
  if (s && (sx || sy)) {
    snprintf(msg, msglen,
             "Give sigma (both axes) or sigma_x and sigma_y, not both; got sigma and %s.",
             sx ? "sigma_x" : "sigma_y");
    return ERR_CONFLICTING_PARAMETER;
  }
  if (!s && !(sx && sy)) {
    snprintf(msg, msglen,
             "%s is required: the Gaussian's standard deviation in pixels (or "
             "sigma_x and sigma_y, one per axis).",
             sx   ? "sigma_y"
             : sy ? "sigma_x"
                  : "sigma");
    return ERR_MISSING_PARAMETER;
  }
  if (s) p->sigma_x = p->sigma_y = p->sigma;
  if (p->feather > 0 && p->regions.n == 0) {
    snprintf(msg, msglen, "feather applies only with regions; got feather=%d and none.",
             p->feather);
    return ERR_BAD_PARAMETER;
  }
  return ERR_OK;
}

/* ---- the regions' boxes, and the cost ---- */

struct region { /* a region, clipped: its box (x, y, width, height: the region grown by the
                   filter's reach and the feather, within the image) and itself (x0, y0, x1, y1) */
  int box[4];
  int rect[4];
};

/* The regions of p clipped to a w x h image, with their boxes for blur b; a region outside the
 * image is a 400 (a sentence in msg). */
static enum err blur_regions_of(const struct blur_params *p, const struct cpu_blur *b, int w, int h,
                                struct region *r, char *msg, size_t msglen) {
  int rx = cpu_blur_reach(b, p->sigma_x) + p->feather,
      ry = cpu_blur_reach(b, p->sigma_y) + p->feather;
  for (int i = 0; i < p->regions.n; i++) {
    enum err e = op_region_rect(&p->regions, i, w, h, r[i].rect, msg, msglen);
    if (e != ERR_OK) return e;
    cpu_region_box(w, h, rx, ry, r[i].rect, r[i].box);
  }
  return ERR_OK;
}

/* Whether a later region's box reads pixels that an earlier region's blend changes (its
 * rectangle grown by feather, within its box): only then must the boxes be cut from a copy of
 * the input. */
static int boxes_overlap(const struct region *r, int n, int feather) {
  for (int i = 0; i < n; i++) {
    const int *b = r[i].box, *q = r[i].rect;
    int x0 = q[0] - feather > b[0] ? q[0] - feather : b[0];
    int y0 = q[1] - feather > b[1] ? q[1] - feather : b[1];
    int x1 = q[2] + feather < b[0] + b[2] ? q[2] + feather : b[0] + b[2];
    int y1 = q[3] + feather < b[1] + b[3] ? q[3] + feather : b[1] + b[3];
    for (int k = i + 1; k < n; k++) {
      const int *c = r[k].box;
      if (c[0] < x1 && x0 < c[0] + c[2] && c[1] < y1 && y0 < c[1] + c[3]) return 1;
    }
  }
  return 0;
}

/* Seconds of CPU of /blur's filter on an image of shape s by the cost model: the whole image's
 * blur; or each region's box blurred alone (its taps bounded by the box's size), cut out and
 * blended back, and the input copied first when the boxes overlap, as blur_cpu_regions does. */
static double blur_cost(const void *params, const struct codec_shape *s) {
  const struct blur_params *p = params;
  struct cpu_blur b = op_blur_cpu(p, s->width, s->height);
  struct region r[API_REGIONS_MAX];
  char msg[8];
  if (p->regions.n == 0) return op_blur_s(&b, p->psnr, s->width, s->height, s->channels);
  if (blur_regions_of(p, &b, s->width, s->height, r, msg, 0) != ERR_OK) return 0; /* a 400 */
  double seconds = boxes_overlap(r, p->regions.n, p->feather)
                       ? op_region_copy_s(s->width, s->height, s->channels)
                       : 0;
  for (int i = 0; i < p->regions.n; i++) {
    int w = r[i].box[2], h = r[i].box[3];
    seconds += op_blur_s(&b, p->psnr, w, h, s->channels) + op_region_box_s(w, h, s->channels);
  }
  return seconds;
}

const struct endpoint api_blur_endpoint = {"/blur",    blur_params,  OP_NPARAMS(blur_params),
                                           0,          CPU_NMETHODS, (int)OFF(given),
                                           blur_check, blur_cost};

/* ---- /methods ---- */

/* ns per sample of method name at sigma on a 1920x1080 RGB image, from the endpoint's cost
 * function (the filter, and the PSNR reference when psnr; not the request's upload, decode and
 * encode, which any method pays). */
static double method_ns(const char *name, double sigma, int psnr) {
  static const struct codec_shape hd = {1920, 1080, 3, 8};
  struct blur_params p;
  char query[96], msg[256];
  snprintf(query, sizeof(query), "method=%s&sigma=%g&psnr=%s", name, sigma,
           psnr ? "true" : "false");
  if (params_parse(&api_blur_endpoint, query, NULL, 0, &p, msg, sizeof(msg)) != ERR_OK) return -1;
  return blur_cost(&p, &hd) / (1920.0 * 1080 * 3) * 1e9;
}

/* What method name costs by the budget's model: ns per sample at a few sigmas on 1080p, without
 * and with the PSNR reference. */
static json_t *method_cost(const char *name) {
  static const double sigmas[] = {2, 12, 50, 300};
  json_t *ns = json_object(), *psnr = json_object();
  char key[16];
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof(key), "%g", sigmas[i]);
    json_object_set_new(ns, key, json_real(round(method_ns(name, sigmas[i], 0) * 100) / 100));
    json_object_set_new(psnr, key, json_real(round(method_ns(name, sigmas[i], 1) * 100) / 100));
  }
  return json_pack("{s:o, s:o, s:s}", "ns_per_sample_at_sigma", ns,
                   "ns_per_sample_at_sigma_with_psnr", psnr, "rule",
                   "the filter and the PSNR's reference on 1920x1080 RGB at the default "
                   "truncate; a request's estimate adds its upload, decode and encode, and one "
                   "past limits.max_cost_s gets 422 too_expensive");
}

static void blur_methods(const struct api_ctx *ctx, json_t *list) {
  (void)ctx;
  for (int m = 0; m <= CPU_NMETHODS; m++) {
    int is_auto = m == CPU_NMETHODS;
    const char *name = is_auto ? "auto" : cpu_method_name(m);
    const char *desc = is_auto ? "the fastest method that reaches 48 dB for the request's sigma, "
                                 "image size and psnr, on this backend"
                               : cpu_method_desc(m);
    json_t *e = op_method_entry(name, &api_blur_endpoint, desc,
                                is_auto ? ">= 48 dB" : cpu_method_accuracy(m), is_auto ? -1 : m);
    json_object_set_new(e, "cost", method_cost(name));
    json_array_append_new(list, e);
  }
}

/* ---- the JSON result ---- */

static void blur_result(json_t *o, const void *params, const struct op_result *res) {
  const struct blur_params *p = params;
  (void)res;
  if (p->method == METHOD_AUTO) json_object_set_new(o, "requested_method", json_string("auto"));
  json_object_update_new(o, json_pack("{s:f, s:f}", "sigma_x", p->sigma_x, "sigma_y", p->sigma_y));
  if (p->sigma_x == p->sigma_y) json_object_set_new(o, "sigma", json_real(p->sigma_x));
  if (p->regions.n > 0) json_object_set_new(o, "regions", json_integer(p->regions.n));
}

/* ---- the compute ---- */

/* X-PSNR over the regions' boxes. */
static double regions_psnr(const struct cpu_accuracy *acc, const struct region *r, int n,
                           const struct codec_image *img) {
  double samples[API_REGIONS_MAX];
  for (int i = 0; i < n; i++) samples[i] = (double)r[i].box[2] * r[i].box[3] * img->channels;
  return cpu_accuracy_merge(acc, samples, n, img->depth);
}

/* The bytes of the largest of the n regions' boxes in img's pixel format. */
static size_t largest_box(const struct cpu_image *img, const struct region *r, int n) {
  size_t most = 0;
  for (int i = 0; i < n; i++) {
    struct cpu_image box = {NULL, r[i].box[2], r[i].box[3], img->channels, img->depth};
    most = cpu_image_bytes(&box) > most ? cpu_image_bytes(&box) : most;
  }
  return most;
}

/* The pixels of box r of img, copied to box->data. */
static void copy_box(const struct cpu_image *img, const struct region *r, struct cpu_image *box) {
  size_t px = (size_t)img->channels * (img->depth / 8);
  for (int y = 0; y < box->height; y++)
    memcpy((char *)box->data + (size_t)y * box->width * px,
           (const char *)img->data + ((size_t)(r->box[1] + y) * img->width + r->box[0]) * px,
           (size_t)box->width * px);
}

/* Region r's box cut from src into scratch, blurred into scratch + most, and blended into img;
 * its times added to t. Returns what cpu_blur_image or cpu_blend_box returns. */
static enum err blur_box(struct cpu_pool *pool, const struct cpu_blur *b,
                         const struct cpu_image *src, struct cpu_image *img, const struct region *r,
                         int feather, uint8_t *scratch, size_t most, struct cpu_accuracy *acc,
                         struct stage_times *t) {
  struct cpu_image box = {scratch, r->box[2], r->box[3], img->channels, img->depth}, out = box;
  struct cpu_timing ct;
  copy_box(src, r, &box);
  out.data = scratch + most;
  enum err e = cpu_blur_image(pool, b, &box, &out, acc, &ct);
  if (e != ERR_OK) return e; /* an unfinished blur is not blended */
  double t0 = api_now_ms();
  e = cpu_blend_box(img, &out, r->box[0], r->box[1], r->rect, feather);
  t->filter += ct.filter + api_now_ms() - t0;
  if (acc) t->reference += ct.reference;
  return e;
}

/* The regions on the CPU, in place in the input, box after box. When a box reads pixels that an
 * earlier region's blend changes, the boxes are cut from a copy of the input, so that overlapping
 * regions blur the input. One box and its blur, reused box after box, share one buffer in huge
 * pages (a fresh buffer per box would take a page fault each 4 KB). The memory is thus at most the
 * image twice and the largest box twice, whatever the number and overlap of the regions, where
 * copying every box first would take their sum. */
static enum err blur_cpu_regions(struct op_env *env, const struct blur_params *p,
                                 const struct cpu_blur *b, struct op_io *io) {
  struct region r[API_REGIONS_MAX];
  struct cpu_accuracy acc[API_REGIONS_MAX];
  int n = p->regions.n;
  enum err e = blur_regions_of(p, b, io->in->width, io->in->height, r, io->msg, io->msglen);
  if (e != ERR_OK) return e;
  double t0 = api_now_ms();
  struct cpu_image img = op_image(io->in), src = img;
  size_t most = largest_box(&img, r, n),
         copy = boxes_overlap(r, n, p->feather) ? cpu_image_bytes(&img) : 0;
  uint8_t *m = cpu_pages_new(copy + 2 * most);
  if (!m) return ERR_OUT_OF_MEMORY;
  if (copy) memcpy(src.data = m, img.data, copy);
  *io->t = (struct stage_times){api_now_ms() - t0, p->psnr ? 0 : -1, -1, -1, -1};
  for (int i = 0; e == ERR_OK && i < n; i++)
    e = blur_box(env->worker, b, &src, &img, &r[i], p->feather, m + copy, most,
                 p->psnr ? &acc[i] : NULL, io->t);
  cpu_pages_free(m, copy + 2 * most);
  if (e == ERR_OK && p->psnr) io->res->psnr = regions_psnr(acc, r, n, io->in);
  *io->out = *io->in; /* blended into the input's buffer, which the result now owns */
  io->in->pixels = NULL;
  return e;
}

static enum err blur_cpu(struct op_env *env, const void *params, struct op_io *io) {
  const struct blur_params *p = params;
  struct cpu_blur b = op_blur_resolve(env, p, io);
  if (p->regions.n > 0) return blur_cpu_regions(env, p, &b, io);
  struct cpu_image src = op_image(io->in), dst;
  struct cpu_accuracy acc;
  struct cpu_timing ct;
  if (op_host_output(io) != ERR_OK) return ERR_OUT_OF_MEMORY;
  dst = op_image(io->out);
  enum err e = cpu_blur_image(env->worker, &b, &src, &dst, p->psnr ? &acc : NULL, &ct);
  *io->t = (struct stage_times){ct.filter, p->psnr ? ct.reference : -1, -1, -1, -1};
  if (e == ERR_OK && p->psnr) io->res->psnr = acc.psnr;
  return e;
}

#ifdef BLURD_CUDA
struct regions_arg { /* launch_regions' */
  const struct cpu_blur *b;
  struct gpu_region r[API_REGIONS_MAX];
  int n, feather;
};

static enum gpu_status launch_blur(struct gpu_ctx *ctx, const void *arg,
                                   const struct cpu_image *img, struct cpu_accuracy *acc,
                                   struct gpu_times *g) {
  return gpu_blur_resident(ctx, arg, img, acc, g);
}

static enum gpu_status launch_regions(struct gpu_ctx *ctx, const void *arg,
                                      const struct cpu_image *img, struct cpu_accuracy *acc,
                                      struct gpu_times *g) {
  const struct regions_arg *a = arg;
  return gpu_blur_regions(ctx, a->b, img, a->r, a->n, a->feather, acc, g);
}

/* On the device, the image staying there: the whole image, or each region's box blurred alone
 * and blended in (acc[i]: its accuracy). */
static enum err blur_gpu(struct op_env *env, const void *params, struct op_io *io) {
  const struct blur_params *p = params;
  struct cpu_blur b = op_blur_resolve(env, p, io);
  struct cpu_accuracy acc[API_REGIONS_MAX];
  struct region r[API_REGIONS_MAX];
  if (p->regions.n == 0) {
    enum err e = op_gpu_run(env, io, launch_blur, &b, p->psnr ? acc : NULL);
    if (e == ERR_OK && p->psnr) io->res->psnr = acc[0].psnr;
    return e;
  }
  struct regions_arg a = {.b = &b, .n = p->regions.n, .feather = p->feather};
  enum err e = blur_regions_of(p, &b, io->in->width, io->in->height, r, io->msg, io->msglen);
  for (int i = 0; e == ERR_OK && i < a.n; i++) {
    memcpy(a.r[i].box, r[i].box, sizeof(a.r[i].box));
    memcpy(a.r[i].rect, r[i].rect, sizeof(a.r[i].rect));
  }
  if (e == ERR_OK) e = op_gpu_run(env, io, launch_regions, &a, p->psnr ? acc : NULL);
  if (e == ERR_OK && p->psnr) io->res->psnr = regions_psnr(acc, r, a.n, io->in);
  return e;
}
#else
#define blur_gpu NULL
#endif

const struct api_op op_blur = {
    "blur",
    "Blurs the uploaded image with a Gaussian of standard deviation sigma (or sigma_x and "
    "sigma_y), whole or in regions; answers the image, with stage times and PSNR.",
    "The method that ran, auto resolved to the one it chose.",
    &api_blur_endpoint,
    sizeof(struct blur_params),
    blur_methods,
    {{"sigma_x", "number", "sigma along x."},
     {"sigma_y", "number", "sigma along y."},
     {"regions", "integer", "the number of regions filtered (absent without regions)."}},
    blur_result,
    {[ENGINE_CPU] = blur_cpu, [ENGINE_GPU] = blur_gpu},
};

/* The image job: runs on a backend worker, off the HTTP threads. It decodes the upload, runs the
 * job's operation on the worker's backend (a blur, a local variance map, local contrast or a
 * convolution; /convert has none), encodes the result and builds the response with its stage
 * times, PSNR and the operation's own metadata, then hands the response to the server's
 * callback. Every kind shares the decode, encode, timing and response code; only the filter stage
 * differs (filters[] below). The backend decodes and encodes (its ops say with which codec), and
 * may keep the pixels on its device between stages: an image whose pixels are NULL is the
 * worker's. Each stage is timed here, so every backend reports the same names.
 * A JSON body comes to the job unparsed: its parameters and base64 image are read here first, on
 * the worker, so that no HTTP thread spends time or memory on a large body.
 * Between stages the job gives up early when the request's deadline has passed (503
 * deadline_exceeded) or the client has hung up (nobody would read the answer). Within the filter
 * stage the same two questions go to the filters themselves, through the cancel token the job
 * sets for its thread (struct cpu_cancel): their loops stop within milliseconds, and the job
 * answers as it would between stages; an unfinished result is never encoded. */
#include "api_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct image_job {
  struct job base; /* first: the backend sees a struct job */
  struct api_ctx *ctx;
  const uint8_t *image; /* the upload: in the server's request, or in owned */
  size_t len;
  uint8_t *owned; /* the image decoded from a JSON body's base64, freed with the job; or NULL */
  const struct endpoint *json; /* image is a JSON body to parse first, with these parameters */
  const char *query;           /* the request's query string (without '?'), for json */
  struct job_params p;
  const char *accept; /* the Accept header, or NULL: weighed once the result's type is known */
  int want_json;      /* answer with JSON (api_negotiate) */
  double t_received;  /* when the server had the whole body */
  double deadline;    /* api_now_ms() past which the job gives up; 0: none */
  int (*client_gone)(void *udata);
  struct api_trace *trace; /* the server's notes on the request, or NULL */
  api_done_fn done;
  void *udata;
  char msg[256]; /* a filter's sentence for the error it returns, or "" */
};

struct timing { /* stage times of one job, ms; negative when not applicable */
  double queue, decode, encode, total;
  struct stage_times st;
  const char *decoder, *encoder; /* the codecs that ran, or NULL */
};

struct result {            /* what the filter stage tells the client besides the pixels */
  const char *method;      /* X-Method (the method that ran, auto resolved), or NULL */
  double sigma_x, sigma_y; /* X-Sigma (x,y) of a blur; 0 for other kinds */
  double psnr;             /* dB, INFINITY when identical; NAN when not measured */
  double scale;            /* /variance: X-Scale; 0 otherwise */
  double min, mean, max;   /* /variance: the map's statistics, unscaled */
};

/* Whether the job should stop before its next stage. */
static enum api_error still_wanted(const struct image_job *j) {
  if (j->deadline > 0 && api_now_ms() > j->deadline) return API_DEADLINE_EXCEEDED;
  if (j->client_gone && j->client_gone(j->udata)) return API_CLIENT_GONE;
  return API_OK;
}

static int job_client_gone(void *arg) {
  const struct image_job *j = arg;
  return j->client_gone(j->udata);
}

enum api_error job_cancelled(void) {
  switch (cpu_cancelled()) {
  case CPU_STOP_DEADLINE:
    return API_DEADLINE_EXCEEDED;
  case CPU_STOP_GONE:
    return API_CLIENT_GONE;
  default:
    return API_OK;
  }
}

/* The stages of t as name/value pairs, in the order clients see them, with the codec of the
 * decode and encode stages (desc[i], or NULL). */
static int stages(const struct timing *t, const char **names, double *ms, const char **desc) {
  const char *n[] = {"queue",  "decode",    "upload", "kernel", "download",
                     "filter", "reference", "encode", "total"};
  double v[] = {t->queue,     t->decode,       t->st.upload, t->st.kernel, t->st.download,
                t->st.filter, t->st.reference, t->encode,    t->total};
  const char *d[] = {NULL, t->decoder, NULL, NULL, NULL, NULL, NULL, t->encoder, NULL};
  int k = 0;
  for (int i = 0; i < 9; i++)
    if (v[i] >= 0) names[k] = n[i], desc[k] = d[i], ms[k++] = v[i];
  return k;
}

static void add_headers(struct api_response *r, const char *backend, const struct result *res,
                        const struct timing *t) {
  const char *names[9], *desc[9];
  double ms[9];
  char st[384];
  size_t len = 0;
  int n = stages(t, names, ms, desc);
  for (int i = 0; i < n && len < sizeof(st); i++)
    len += snprintf(st + len, sizeof(st) - len, "%s%s%s%s%s;dur=%.3f", i ? ", " : "", names[i],
                    desc[i] ? ";desc=\"" : "", desc[i] ? desc[i] : "", desc[i] ? "\"" : "", ms[i]);
  api_response_header(r, "Server-Timing", "%s", st);
  api_response_header(r, "X-Backend", "%s", backend);
  if (isinf(res->psnr)) api_response_header(r, "X-PSNR", "inf");
  if (isfinite(res->psnr)) api_response_header(r, "X-PSNR", "%.2f", res->psnr);
  if (res->method) api_response_header(r, "X-Method", "%s", res->method);
  if (res->sigma_x > 0) api_response_header(r, "X-Sigma", "%g,%g", res->sigma_x, res->sigma_y);
  if (res->scale > 0) api_response_header(r, "X-Scale", "%.17g", res->scale);
}

/* The JSON fields of the job's kind: the parameters that shaped the result. */
static void kind_fields(json_t *o, const struct job_params *p, const struct result *res) {
  const struct var_params *v = &p->u.var;
  const struct contrast_params *c = &p->u.contrast;
  int is_auto =
      ((p->kind == JOB_BLUR || p->kind == JOB_SHARPEN) && p->u.blur.method == METHOD_AUTO) ||
      (p->kind == JOB_VARIANCE && v->method == VAR_AUTO);
  if (is_auto) json_object_set_new(o, "requested_method", json_string("auto"));
  const struct blur_params *bp = &p->u.blur;
  if (p->kind == JOB_BLUR || p->kind == JOB_SHARPEN)
    json_object_update_new(o,
                           json_pack("{s:f, s:f}", "sigma_x", bp->sigma_x, "sigma_y", bp->sigma_y));
  if ((p->kind == JOB_BLUR || p->kind == JOB_SHARPEN) && bp->sigma_x == bp->sigma_y)
    json_object_set_new(o, "sigma", json_real(bp->sigma_x));
  if (p->kind == JOB_BLUR && bp->regions.n > 0)
    json_object_set_new(o, "regions", json_integer(bp->regions.n));
  if (p->kind == JOB_SHARPEN)
    json_object_update_new(
        o, json_pack("{s:f, s:f}", "amount", bp->amount, "threshold", bp->threshold));
  if (p->kind == JOB_VARIANCE)
    json_object_update_new(o, json_pack("{s:i, s:s, s:s, s:f, s:f, s:f, s:f}", "radius", v->radius,
                                        "window", v->window == CPU_WINDOW_BOX ? "box" : "triangle",
                                        "output", v->output == VAR_STDDEV ? "stddev" : "variance",
                                        "scale", res->scale, "min", res->min, "mean", res->mean,
                                        "max", res->max));
  if (p->kind == JOB_CONTRAST)
    json_object_update_new(o, json_pack("{s:i, s:f, s:f, s:f, s:f}", "radius", c->radius, "a", c->a,
                                        "m0", c->m0, "b", c->b, "s0", c->s0));
  if (p->kind == JOB_CONVOLVE)
    json_object_update_new(o, json_pack("{s:i, s:f}", "kernel_size", p->u.conv.conv.size, "bias",
                                        (double)p->u.conv.conv.bias));
}

static json_t *json_body(const struct image_job *j, const struct codec_image *img,
                         const char *backend, const struct result *res, const struct timing *t,
                         const uint8_t *data, size_t len) {
  const char *names[9], *desc[9];
  double ms[9];
  int n = stages(t, names, ms, desc);
  char *b64 = base64_encode(data, len);
  json_t *timing = json_object(), *codecs = json_object();
  for (int i = 0; timing && i < n; i++) json_object_set_new(timing, names[i], json_real(ms[i]));
  for (int i = 0; codecs && i < n; i++)
    if (desc[i]) json_object_set_new(codecs, names[i], json_string(desc[i]));
  json_t *o = b64 ? json_pack("{s:i, s:i, s:i, s:i, s:s, s:o, s:s, s:s}", "width", img->width,
                              "height", img->height, "channels", img->channels, "bit_depth",
                              img->depth, "backend", backend, "timing_ms", timing, "format",
                              codec_format_name(img->format), "image", b64)
                  : NULL;
  if (o)
    json_object_set_new(o, "codecs", codecs); /* {"decode": "nvjpeg-hw", "encode": ...} */
  else
    json_decref(codecs);
  if (o && res->method) json_object_set_new(o, "method", json_string(res->method));
  if (o && !isnan(res->psnr))
    json_object_set_new(o, "psnr_db", isinf(res->psnr) ? json_null() : json_real(res->psnr));
  if (o) kind_fields(o, &j->p, res);
  free(b64);
  return o;
}

/* The buffer a filter writes into: the caller's (dst->data, out->pixels), or none when the
 * backend keeps the result on its device. */
static enum api_error output_buffer(struct worker *w, const struct cpu_image *src,
                                    struct cpu_image *dst, struct codec_image *out) {
  out->pixels = dst->data = w->ops->keeps_images ? NULL : codec_alloc_pixels(cpu_image_bytes(src));
  return w->ops->keeps_images || out->pixels ? API_OK : API_OUT_OF_MEMORY;
}

/* The filter stage of each kind: in into out (out is zeroed; whatever pixels it holds afterwards
 * are freed by the caller; NULL ones are the worker's), what the client is told in res. */
typedef enum api_error (*filter_fn)(struct image_job *j, struct worker *w, struct codec_image *in,
                                    struct codec_image *out, struct result *res, struct timing *t);

/* The blur of p for an image of width x height: auto resolved on the larger sigma. */
static struct cpu_blur blur_of(const struct blur_params *p, struct worker *w, int width, int height,
                               struct result *res) {
  struct cpu_blur b = {p->method, p->sigma_x, p->sigma_y, p->truncate, p->coeffs};
  double s = p->sigma_x > p->sigma_y ? p->sigma_x : p->sigma_y;
  if (p->method == METHOD_AUTO) b.method = w->ops->auto_method(s, width, height);
  res->method = cpu_method_name(b.method);
  res->sigma_x = p->sigma_x, res->sigma_y = p->sigma_y;
  return b;
}

static enum api_error blur_regions(struct image_job *j, struct worker *w, struct codec_image *in,
                                   struct codec_image *out, struct result *res, struct timing *t);

static enum api_error blur_filter(struct image_job *j, struct worker *w, struct codec_image *in,
                                  struct codec_image *out, struct result *res, struct timing *t) {
  const struct blur_params *p = &j->p.u.blur;
  if (p->regions.n > 0) return blur_regions(j, w, in, out, res, t);
  struct cpu_image src = {in->pixels, in->width, in->height, in->channels, in->depth};
  struct cpu_image dst = src;
  *out = *in;
  if (output_buffer(w, &src, &dst, out) != API_OK) return API_OUT_OF_MEMORY;
  struct cpu_blur b = blur_of(p, w, in->width, in->height, res);
  struct cpu_accuracy acc;
  enum api_error e = w->ops->blur(w->state, &b, &src, &dst, p->psnr ? &acc : NULL, &t->st);
  if (p->psnr && e == API_OK) res->psnr = acc.psnr;
  out->pixels = dst.data;
  return e;
}

/* ---- /blur with regions ---- */

/* Adds the stage times of one box to the job's. */
static void add_times(struct stage_times *sum, const struct stage_times *st) {
  double *a = &sum->filter, *b = (double *)&st->filter;
  for (size_t i = 0; i < sizeof(*st) / sizeof(double); i++)
    if (b[i] >= 0) a[i] = (a[i] < 0 ? 0 : a[i]) + b[i];
}

/* Region i of p clipped to the image into rect (x0, y0, x1, y1); 400 when nothing is left. */
static enum api_error region_rect(const struct blur_params *p, int i, const struct codec_image *in,
                                  int rect[4], char *msg, size_t msglen) {
  const int *r = p->regions.r[i];
  long x0 = r[0], y0 = r[1], x1 = (long)r[0] + r[2], y1 = (long)r[1] + r[3];
  rect[0] = (int)(x0 < 0 ? 0 : x0), rect[1] = (int)(y0 < 0 ? 0 : y0);
  rect[2] = (int)(x1 > in->width ? in->width : x1),
  rect[3] = (int)(y1 > in->height ? in->height : y1);
  if (rect[0] < rect[2] && rect[1] < rect[3]) return API_OK;
  snprintf(msg, msglen,
           "regions: rectangle %d [%d, %d, %d, %d] lies wholly outside the %dx%d image.", i + 1,
           r[0], r[1], r[2], r[3], in->width, in->height);
  return API_BAD_PARAMETER;
}

/* The bytes of the largest of the n regions' boxes in in's pixel format. */
static size_t largest_box(const struct codec_image *in, const struct api_region *r, int n) {
  size_t most = 0;
  for (int i = 0; i < n; i++) {
    struct cpu_image box = {NULL, r[i].box[2], r[i].box[3], in->channels, in->depth};
    most = cpu_image_bytes(&box) > most ? cpu_image_bytes(&box) : most;
  }
  return most;
}

/* Whether a later region's box reads pixels that an earlier region's blend changes (its
 * rectangle grown by feather, within its box): only then must the boxes be cut from a copy of
 * the input. */
static int boxes_overlap(const struct api_region *r, int n, int feather) {
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

/* The pixels of box r of img, copied to box->data. */
static void copy_box(const struct cpu_image *img, const struct api_region *r,
                     struct cpu_image *box) {
  size_t px = (size_t)img->channels * (img->depth / 8);
  for (int y = 0; y < box->height; y++)
    memcpy((char *)box->data + (size_t)y * box->width * px,
           (const char *)img->data + ((size_t)(r->box[1] + y) * img->width + r->box[0]) * px,
           (size_t)box->width * px);
}

/* Region r's box cut from src into scratch, blurred on w's backend into scratch + most (or on
 * its device), and blended into img; its stage times added to t. */
static enum api_error blur_box(struct worker *w, const struct cpu_blur *b,
                               const struct cpu_image *src, struct cpu_image *img,
                               enum codec_format format, const struct api_region *r, int feather,
                               uint8_t *scratch, size_t most, struct cpu_accuracy *acc,
                               struct stage_times *t) {
  struct cpu_image box = {scratch, r->box[2], r->box[3], img->channels, img->depth};
  struct cpu_image blurred = box;
  struct codec_image got = {NULL, box.width, box.height, img->channels, img->depth, format, 1};
  struct stage_times st;
  copy_box(src, r, &box);
  blurred.data = w->ops->keeps_images ? NULL : scratch + most;
  enum api_error e = w->ops->blur(w->state, b, &box, &blurred, acc, &st);
  got.pixels = blurred.data;
  if (e == API_OK) e = job_cancelled();                 /* an unfinished blur is not blended */
  if (e == API_OK) e = w->ops->to_host(w->state, &got); /* from the device, when it is there */
  if (e == API_OK) {
    double t1 = api_now_ms();
    struct cpu_image g = box;
    g.data = got.pixels;
    cpu_blend_box(img, &g, r->box[0], r->box[1], r->rect, feather);
    add_times(t, &st);
    t->filter += api_now_ms() - t1;
  }
  if (w->ops->keeps_images) codec_image_free(&got); /* to_host's copy */
  return e;
}

/* Blurs each region's box (the region, its feather and the filter's reach) on the host's
 * backend and blends it into the image, in place, box after box. When a box reads pixels that an
 * earlier region's blend changes, the boxes are cut from a copy of the input, so that
 * overlapping regions blur the input. One box and its blur, reused box after box, share one
 * buffer in huge pages (a fresh buffer per box took a page fault each 4 KB). The memory is thus
 * at most the image twice and the largest box twice, whatever the number and overlap of the
 * regions (copying every box first took their sum: 64 boxes over a 3000x3000 RGBA image,
 * 2.47 GB at the peak). The job's cancel token is checked between boxes, and within each by the
 * filters. */
static enum api_error blur_boxes(struct worker *w, const struct cpu_blur *b, struct codec_image *in,
                                 const struct api_region *r, int n, int feather,
                                 struct cpu_accuracy *acc, struct stage_times *t) {
  double t0 = api_now_ms();
  enum api_error e = w->ops->to_host(w->state, in);
  struct cpu_image img = {in->pixels, in->width, in->height, in->channels, in->depth}, src = img;
  size_t most = largest_box(in, r, n),
         copy = boxes_overlap(r, n, feather) ? cpu_image_bytes(&img) : 0;
  uint8_t *m = e == API_OK ? cpu_pages_new(copy + 2 * most) : NULL;
  if (e == API_OK && !m) e = API_OUT_OF_MEMORY;
  if (e == API_OK && copy) memcpy(src.data = m, img.data, copy);
  *t = (struct stage_times){api_now_ms() - t0, acc ? 0 : -1, -1, -1, -1};
  for (int i = 0; e == API_OK && i < n; i++)
    if ((e = job_cancelled()) == API_OK)
      e = blur_box(w, b, &src, &img, in->format, &r[i], feather, m + copy, most,
                   acc ? &acc[i] : NULL, t);
  cpu_pages_free(m, copy + 2 * most);
  return e;
}

/* /blur with regions: the cost follows the regions' area. On a backend that keeps images on its
 * device the boxes are cut, blurred and blended there; otherwise on the host. X-PSNR is over the
 * boxes. */
static enum api_error blur_regions(struct image_job *j, struct worker *w, struct codec_image *in,
                                   struct codec_image *out, struct result *res, struct timing *t) {
  const struct blur_params *p = &j->p.u.blur;
  struct cpu_blur b = blur_of(p, w, in->width, in->height, res);
  struct api_region r[API_REGIONS_MAX];
  struct cpu_accuracy acc[API_REGIONS_MAX], *a = p->psnr ? acc : NULL;
  int n = p->regions.n;
  int rx = cpu_blur_reach(&b, p->sigma_x) + p->feather,
      ry = cpu_blur_reach(&b, p->sigma_y) + p->feather;
  enum api_error e = API_OK;
  for (int i = 0; e == API_OK && i < n; i++)
    if ((e = region_rect(p, i, in, r[i].rect, j->msg, sizeof(j->msg))) == API_OK)
      cpu_region_box(in->width, in->height, rx, ry, r[i].rect, r[i].box);
  *out = *in;
  out->pixels = NULL; /* the device's image, or the input's buffer once blended into */
  if (e == API_OK && w->ops->blur_regions) {
    e = w->ops->blur_regions(w->state, &b, in, r, n, p->feather, a, &t->st);
  } else if (e == API_OK) {
    e = blur_boxes(w, &b, in, r, n, p->feather, a, &t->st);
    out->pixels = in->pixels;
    in->pixels = NULL;
  }
  double sse = 0, count = 0, peak = (1 << in->depth) - 1;
  for (int i = 0; e == API_OK && a && i < n; i++) {
    double samples = (double)r[i].box[2] * r[i].box[3] * in->channels;
    if (!isinf(acc[i].psnr)) sse += samples * peak * peak / pow(10, acc[i].psnr / 10);
    count += samples;
  }
  if (e == API_OK && a) res->psnr = sse > 0 ? 10 * log10(peak * peak * count / sse) : INFINITY;
  return e;
}

/* ---- /sharpen ---- */

/* The unsharp mask: the blur on the worker's backend, then in + amount (in - blurred) on the
 * host. */
static enum api_error sharpen_filter(struct image_job *j, struct worker *w, struct codec_image *in,
                                     struct codec_image *out, struct result *res,
                                     struct timing *t) {
  const struct blur_params *p = &j->p.u.blur;
  struct cpu_blur b = blur_of(p, w, in->width, in->height, res);
  enum api_error e = w->ops->to_host(w->state, in);
  struct cpu_image src = {in->pixels, in->width, in->height, in->channels, in->depth},
                   blurred = src;
  struct codec_image got = *in;
  struct cpu_accuracy acc;
  got.pixels = blurred.data = NULL;
  if (e == API_OK && !w->ops->keeps_images &&
      !(blurred.data = codec_alloc_pixels(cpu_image_bytes(&src))))
    e = API_OUT_OF_MEMORY;
  if (e == API_OK) e = w->ops->blur(w->state, &b, &src, &blurred, p->psnr ? &acc : NULL, &t->st);
  got.pixels = blurred.data;
  if (e == API_OK) e = job_cancelled(); /* an unfinished blur is not sharpened */
  if (e == API_OK) e = w->ops->to_host(w->state, &got);
  *out = *in;
  out->pixels = e == API_OK ? codec_alloc_pixels(cpu_image_bytes(&src)) : NULL;
  if (e == API_OK && !out->pixels) e = API_OUT_OF_MEMORY;
  if (e == API_OK) {
    double t0 = api_now_ms();
    struct cpu_unsharp u = {p->amount, p->threshold, p->luma};
    struct cpu_image g = src, dst = src;
    g.data = got.pixels, dst.data = out->pixels;
    cpu_unsharp_image(NULL, &u, &src, &g, &dst);
    t->st.filter += api_now_ms() - t0;
    if (p->psnr) res->psnr = acc.psnr;
  }
  codec_image_free(&got);
  return e;
}

/* /contrast and /convolve: the same shape out as in, on the worker's backend. */
static enum api_error pixel_filter(struct image_job *j, struct worker *w, struct codec_image *in,
                                   struct codec_image *out, struct result *res, struct timing *t) {
  struct cpu_image src = {in->pixels, in->width, in->height, in->channels, in->depth};
  struct cpu_image dst = src;
  *out = *in;
  if (output_buffer(w, &src, &dst, out) != API_OK) return API_OUT_OF_MEMORY;
  enum api_error e;
  if (j->p.kind == JOB_CONTRAST) {
    const struct contrast_params *p = &j->p.u.contrast;
    struct cpu_contrast c = {p->radius, p->a, p->m0, p->b, p->s0};
    res->method = "wallis";
    e = w->ops->contrast(w->state, &c, &src, &dst, &t->st);
  } else {
    const struct conv_params *p = &j->p.u.conv;
    res->method = p->kernel.named >= 0 ? cpu_conv_names[p->kernel.named] : "custom";
    e = w->ops->convolve(w->state, &p->conv, &src, &dst, &t->st);
  }
  out->pixels = dst.data;
  return e;
}

/* ---- /variance ---- */

/* The gray plane the statistics run on: in itself when it is gray, else its luma in a buffer
 * that *owned points to (the caller frees it). */
static enum api_error luma_plane(const struct codec_image *in, struct cpu_image *plane,
                                 void **owned) {
  struct cpu_image src = {in->pixels, in->width, in->height, in->channels, in->depth};
  *plane = src;
  *owned = NULL;
  if (in->channels == 1) return API_OK;
  plane->channels = 1;
  plane->data = *owned = malloc(cpu_image_bytes(plane));
  if (!plane->data) return API_OUT_OF_MEMORY;
  cpu_luma(&src, plane);
  return API_OK;
}

/* Output sample = round(value * scale): the map's largest possible value (half the sample
 * range, or its square) lands at or just under 65535. */
static double var_scale(int depth, int output) {
  if (depth == 8) return output == VAR_STDDEV ? 256 : 4;
  return output == VAR_STDDEV ? 2 : 1.0 / 16384;
}

/* Turns a variance map into the requested values, in place: a variance below 0 (float
 * cancellation) counts as 0, and stddev is its square root. */
static void var_values(double *map, size_t n, int output) {
  for (size_t i = 0; i < n; i++) {
    double v = map[i] > 0 ? map[i] : 0;
    map[i] = output == VAR_STDDEV ? sqrt(v) : v;
  }
}

/* PSNR of map against ref, peak the largest possible value. */
static double map_psnr(const double *map, const double *ref, size_t n, double peak) {
  double se = 0;
  for (size_t i = 0; i < n; i++) se += (map[i] - ref[i]) * (map[i] - ref[i]);
  return se == 0 ? INFINITY : 10 * log10(peak * peak * (double)n / se);
}

/* The map's statistics into res, and the map scaled into a 16-bit gray image. */
static enum api_error var_image(const double *map, int width, int height, struct result *res,
                                struct codec_image *out) {
  size_t n = (size_t)width * height;
  uint16_t *px = malloc(n * sizeof(*px));
  if (!px) return API_OUT_OF_MEMORY;
  double sum = 0;
  res->min = res->max = map[0];
  for (size_t i = 0; i < n; i++) {
    double s = floor(map[i] * res->scale + 0.5);
    px[i] = s >= 65535 ? 65535 : s >= 0 ? (uint16_t)s : 0;
    sum += map[i];
    res->min = fmin(res->min, map[i]);
    res->max = fmax(res->max, map[i]);
  }
  res->mean = sum / (double)n;
  *out = (struct codec_image){(uint8_t *)px, width, height, 1, 16, CODEC_PNG, 1};
  return API_OK;
}

/* The exact map of plane into ref and the PSNR of map against it (timed as `reference`). */
static enum api_error var_reference(struct worker *w, struct cpu_var v,
                                    const struct cpu_image *plane, const double *map, double *ref,
                                    int output, struct result *res, struct timing *t) {
  double t0 = api_now_ms(), half = plane->depth == 8 ? 127.5 : 32767.5;
  struct stage_times st;
  size_t n = (size_t)plane->width * plane->height;
  v.method = CPU_VAR_EXACT;
  enum api_error e = w->ops->variance(w->state, &v, plane, ref, &st);
  if (e != API_OK) return e;
  var_values(ref, n, output);
  res->psnr = map_psnr(map, ref, n, output == VAR_STDDEV ? half : half * half);
  t->st.reference = api_now_ms() - t0;
  return API_OK;
}

static enum api_error var_filter(struct image_job *j, struct worker *w, struct codec_image *in,
                                 struct codec_image *out, struct result *res, struct timing *t) {
  const struct var_params *p = &j->p.u.var;
  struct cpu_var v = {p->method == VAR_AUTO ? CPU_VAR_EXACT : (enum cpu_var_method)p->method,
                      (enum cpu_window)p->window, p->radius};
  size_t n = (size_t)in->width * in->height;
  enum api_error e0 = w->ops->to_host(w->state, in); /* the luma is taken on the host */
  if (e0 != API_OK) return e0;
  int measure = p->psnr && v.method != CPU_VAR_EXACT;
  double *map = malloc(n * sizeof(*map)), *ref = measure ? malloc(n * sizeof(*ref)) : NULL;
  struct cpu_image plane;
  void *owned = NULL;
  double t0 = api_now_ms();
  enum api_error e = !map || (measure && !ref) ? API_OUT_OF_MEMORY : luma_plane(in, &plane, &owned);
  double luma_ms = api_now_ms() - t0;
  if (e == API_OK) e = job_cancelled(); /* an unfinished luma plane */
  if (e == API_OK) e = w->ops->variance(w->state, &v, &plane, map, &t->st);
  if (e == API_OK) e = job_cancelled(); /* an unfinished map is not measured or scaled */
  t->st.filter += luma_ms;
  res->method = cpu_var_method_name(v.method);
  res->scale = var_scale(in->depth, p->output);
  if (e == API_OK) var_values(map, n, p->output);
  if (e == API_OK && measure) e = var_reference(w, v, &plane, map, ref, p->output, res, t);
  if (e == API_OK && p->psnr && !measure) res->psnr = INFINITY; /* exact is the reference */
  if (e == API_OK) e = var_image(map, in->width, in->height, res, out);
  free(owned);
  free(ref);
  free(map);
  return e;
}

static const filter_fn filters[] = {
    [JOB_BLUR] = blur_filter,      [JOB_CONVERT] = NULL,          [JOB_VARIANCE] = var_filter,
    [JOB_CONTRAST] = pixel_filter, [JOB_CONVOLVE] = pixel_filter, [JOB_SHARPEN] = sharpen_filter};

/* How the result is encoded: the kind's format, quality, compression and lossless flag. */
static struct codec_encode_opts encode_opts(const struct job_params *p, enum codec_format input) {
  static const enum codec_format formats[] = {CODEC_NONE, CODEC_PNG, CODEC_JPEG, CODEC_WEBP};
  const struct blur_params *b = &p->u.blur;
  const struct contrast_params *c = &p->u.contrast;
  const struct conv_params *k = &p->u.conv;
  struct codec_encode_opts o = {CODEC_PNG, 90, p->u.var.compression, 0}; /* JOB_VARIANCE */
  if (p->kind == JOB_BLUR || p->kind == JOB_CONVERT || p->kind == JOB_SHARPEN)
    o = (struct codec_encode_opts){formats[b->format], b->quality, b->compression, b->lossless};
  if (p->kind == JOB_CONTRAST)
    o = (struct codec_encode_opts){formats[c->format], c->quality, c->compression, c->lossless};
  if (p->kind == JOB_CONVOLVE)
    o = (struct codec_encode_opts){formats[k->format], k->quality, k->compression, k->lossless};
  if (o.format == CODEC_NONE) o.format = input;
  return o;
}

/* The filter stage under the job's cancel token: the filters' loops stop once the deadline has
 * passed or the client has gone, and the job then answers as still_wanted() would, whatever the
 * filter made of its unfinished work (a lost GPU still stops the process). */
static enum api_error run_filter(filter_fn filter, struct image_job *j, struct worker *w,
                                 struct codec_image *in, struct codec_image *out,
                                 struct result *res, struct timing *t) {
  struct cpu_cancel cancel = {j->deadline, j->client_gone ? job_client_gone : NULL, j, 0, 0, 0};
  cpu_cancel_set(&cancel);
  enum api_error e = filter(j, w, in, out, res, t), c = job_cancelled();
  cpu_cancel_set(NULL);
  return e == API_GPU_LOST || c == API_OK ? e : c;
}

/* Decodes, filters and encodes; on success *enc holds the encoded image and *img the pixels it
 * came from (out, or in for /convert). */
static enum api_error process(struct image_job *j, struct worker *w, struct codec_image *in,
                              struct codec_image *out, const struct codec_image **img,
                              uint8_t **enc, size_t *enclen, struct result *res, struct timing *t,
                              char *msg, size_t msglen) {
  const struct api_config *cfg = &j->ctx->cfg;
  struct codec_limits lim = {cfg->max_width, cfg->max_height, cfg->max_pixels};
  filter_fn filter = filters[j->p.kind];
  enum api_error e = still_wanted(j);
  if (e != API_OK) return e;
  double t0 = api_now_ms();
  e = w->ops->decode(w->state, j->image, j->len, &lim, in, &t->decoder, msg, msglen);
  t->decode = api_now_ms() - t0;
  if (e == API_OK) e = still_wanted(j);
  if (e == API_OK) /* before the filter: a 406 costs no filtering */
    e = api_negotiate(j->accept, codec_mime(encode_opts(&j->p, in->format).format), &j->want_json,
                      msg, msglen);
  if (e == API_OK && filter) e = run_filter(filter, j, w, in, out, res, t);
  if (e == API_OK) e = still_wanted(j);
  if (e != API_OK) return e;
  struct codec_encode_opts o = encode_opts(&j->p, in->format);
  struct codec_image *r = filter ? out : in;
  r->format = o.format;
  *img = r;
  t0 = api_now_ms();
  e = w->ops->encode(w->state, r, &o, enc, enclen, &t->encoder, &t->st.download, msg, msglen);
  t->encode = api_now_ms() - t0; /* download included, when there is one */
  return e;
}

static struct api_response *respond(struct image_job *j, const struct codec_image *img,
                                    uint8_t **enc, size_t len, const struct result *res,
                                    struct timing *t, const char *backend) {
  t->total = api_now_ms() - j->t_received;
  struct api_response *r;
  if (j->want_json) {
    r = response_json(200, json_body(j, img, backend, res, t, *enc, len));
  } else if ((r = calloc(1, sizeof(*r))) != NULL) {
    r->status = 200;
    r->content_type = codec_mime(img->format);
    r->body = *enc;
    r->len = len;
    *enc = NULL;
  }
  if (r) add_headers(r, backend, res, t);
  return r;
}

/* Copies the stage times into the request's trace, for the metrics and the access log; a job that
 * failed gets its total here. */
static void note_stages(struct image_job *j, struct timing *t) {
  const char *names[9], *desc[9];
  double ms[9];
  if (!j->trace) return;
  if (t->total < 0) t->total = api_now_ms() - j->t_received;
  int n = stages(t, names, ms, desc);
  for (int i = 0; i < n && i < API_TRACE_STAGES; i++)
    j->trace->stage[i] = names[i], j->trace->stage_ms[i] = ms[i];
  j->trace->nstages = n < API_TRACE_STAGES ? n : API_TRACE_STAGES;
}

/* A JSON body's parameters and image (upload_json), parsed here on the worker. Returns NULL, or
 * the error response. */
static struct api_response *parse_body(struct image_job *j) {
  uint8_t *owned = NULL;
  size_t len = 0;
  if (!j->json) return NULL;
  struct api_response *r =
      upload_json(j->ctx, j->json, j->query, j->image, j->len, &j->p, &owned, &len);
  if (!r) j->image = j->owned = owned, j->len = len;
  return r;
}

static void job_run(struct job *job, struct worker *w) {
  struct image_job *j = (struct image_job *)job;
  struct timing t = {api_now_ms() - job->t_queued, -1, -1, -1, {-1, -1, -1, -1, -1}, NULL, NULL};
  struct codec_image in = {0}, out = {0};
  const struct codec_image *img = NULL;
  uint8_t *enc = NULL;
  size_t enclen = 0;
  struct result res = {NULL, 0, 0, NAN, 0, 0, 0, 0};
  char msg[256] = "";
  enum api_error e = still_wanted(j);
  struct api_response *r = e == API_OK ? parse_body(j) : NULL;
  if (e == API_OK && !r)
    e = process(j, w, &in, &out, &img, &enc, &enclen, &res, &t, msg, sizeof(msg));
  if (e == API_GPU_LOST) api_fail(j->ctx); /* the process will stop and be restarted */
  if (!r)
    r = e == API_OK ? respond(j, img, &enc, enclen, &res, &t, w->ops->worker_name(w->state))
                    : api_error_response(e, msg[0] ? msg : j->msg);
  if (!r) r = api_error_response(API_OUT_OF_MEMORY, NULL);
  if (j->trace && res.method) j->trace->algorithm = res.method;
  note_stages(j, &t);
  free(enc);
  codec_image_free(&out);
  codec_image_free(&in);
  free(j->owned);
  j->done(j->udata, r);
  free(j);
}

enum api_error job_submit(struct api_ctx *ctx, const struct api_request *req, const uint8_t *image,
                          size_t len, uint8_t *owned, const struct endpoint *json,
                          const struct job_params *p, api_done_fn done, void *udata) {
  const char *q = strchr(req->uri, '?');
  struct image_job *j = calloc(1, sizeof(*j));
  if (!j) return API_OUT_OF_MEMORY;
  *j = (struct image_job){.base = {job_run, 0},
                          .ctx = ctx,
                          .image = image,
                          .len = len,
                          .owned = owned,
                          .json = json,
                          .query = q ? q + 1 : "",
                          .p = *p,
                          .accept = req->accept,
                          .t_received = req->t_received,
                          .deadline = req->deadline,
                          .client_gone = req->client_gone,
                          .trace = req->trace,
                          .done = done,
                          .udata = udata};
  if (backend_submit(ctx->backend, &j->base) != 0) {
    free(j);
    return ctx->draining ? API_SHUTTING_DOWN : API_QUEUE_FULL;
  }
  return API_OK;
}

/* Routing and the endpoints that answer at once: /healthz, /readyz, /methods, /metrics,
 * /openapi.json, and the parsing and validation half of the image endpoints (POST /blur, /convert,
 * /variance, /contrast, /convolve), whose image work is queued as a job (job.c): the upload's
 * parameters, its image and its estimated cost against the budget (--max-cost), checked before
 * anything is decoded. A JSON body is checked as it streams in (api_body_chunk, bodyscan.c) and
 * parsed by its job on a worker (upload_json), never on an HTTP thread. The route table at the
 * end is the one list of endpoints: it dispatches requests, metrics and the access log name
 * them, and openapi.c describes them. */
#include "api_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* A copy of s, or NULL when s is NULL or empty; *oom is set when the copy failed. */
static char *copy_option(const char *s, int *oom) {
  char *c = s && *s ? strdup(s) : NULL;
  if (s && *s && !c) *oom = 1;
  return c;
}

/* What the api keeps besides the backend: metrics, the access log, the id seed, key and CORS. */
static int setup(struct api_ctx *ctx, const struct api_config *cfg, char *err, size_t errlen) {
  int oom = 0;
  ctx->log_fd = access_log_open(cfg->access_log, err, errlen);
  if (ctx->log_fd == -2) return -1;
  if (getrandom(&ctx->id_seed, sizeof(ctx->id_seed), GRND_NONBLOCK) != sizeof(ctx->id_seed))
    ctx->id_seed = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid(); /* entropy not ready yet */
  ctx->metrics = metrics_new();
  ctx->api_key = copy_option(cfg->api_key, &oom);
  ctx->cors = copy_option(cfg->cors_origins, &oom);
  if (!ctx->metrics || oom) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  return 0;
}

struct api_ctx *api_new(const struct api_config *cfg, char *err, size_t errlen) {
  struct api_ctx *ctx = calloc(1, sizeof(*ctx));
  if (!ctx) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  ctx->cfg = *cfg;
  ctx->log_fd = -1;
  if (setup(ctx, cfg, err, errlen) != 0 || !(ctx->backend = backend_new(cfg, err, errlen))) {
    api_free(ctx);
    return NULL;
  }
  return ctx;
}

void api_free(struct api_ctx *ctx) {
  if (!ctx) return;
  backend_free(ctx->backend);
  metrics_free(ctx->metrics);
  access_log_close(ctx->log_fd);
  free(ctx->api_key);
  free(ctx->cors);
  free(ctx);
}

const char *api_backend_name(const struct api_ctx *ctx) {
  return backend_name(ctx->backend);
}

void api_fail(struct api_ctx *ctx) {
  if (__atomic_exchange_n(&ctx->failed, 1, __ATOMIC_SEQ_CST)) return; /* told once */
  if (ctx->cfg.on_fatal) ctx->cfg.on_fatal(ctx->cfg.on_fatal_arg);
}

int api_failed(struct api_ctx *ctx) {
  return __atomic_load_n(&ctx->failed, __ATOMIC_SEQ_CST);
}

int api_warming(struct api_ctx *ctx) {
  return backend_warming(ctx->backend);
}

void api_set_draining(struct api_ctx *ctx) {
  __atomic_store_n(&ctx->draining, 1, __ATOMIC_SEQ_CST);
}

/* The parameters every route_fn takes, for the routes that need few of them. */
#define ROUTE_ARGS                                                                                 \
  struct api_ctx *ctx, const struct route *r, const struct api_request *req, const char *query,    \
      api_done_fn done, void *udata
#define ROUTE_UNUSED (void)ctx, (void)r, (void)req, (void)query, (void)done, (void)udata

static struct api_response *healthz(ROUTE_ARGS) {
  ROUTE_UNUSED;
  return response_json(200, json_pack("{s:s}", "status", "ok"));
}

static struct api_response *openapi(ROUTE_ARGS) {
  ROUTE_UNUSED;
  return response_json(200, openapi_document());
}

static struct api_response *readyz(ROUTE_ARGS) {
  ROUTE_UNUSED;
  int queued, running, cap, workers;
  backend_stats(ctx->backend, &queued, &running, &cap, &workers);
  int failed = api_failed(ctx), draining = __atomic_load_n(&ctx->draining, __ATOMIC_SEQ_CST);
  int warming = backend_warming(ctx->backend);
  int ready = !failed && !draining && !warming && workers > 0;
  const char *status = failed ? "gpu_lost" : draining ? "draining" : warming ? "warming" : "ready";
  return response_json(ready ? 200 : 503,
                       json_pack("{s:b, s:s, s:s, s:o, s:o, s:i, s:{s:i, s:i}, s:i}", "ready",
                                 ready, "status", status, "backend", backend_name(ctx->backend),
                                 "devices", backend_devices(ctx->backend), "codecs",
                                 backend_codecs(ctx->backend), "workers", workers, "queue", "depth",
                                 queued, "capacity", cap, "running", running));
}

/* One entry of /methods (new reference). */
static json_t *method_entry(const char *name, const struct endpoint *ep, const char *desc,
                            const char *accuracy, int m) {
  return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o}", "name", name, "endpoint", ep->path,
                   "description", desc, "accuracy", accuracy, "backends", backend_kinds(), "params",
                   params_describe(ep, m));
}

/* ns per sample of /blur method name at sigma on a 1920x1080 RGB image, from the endpoint's cost
 * function (the filter, and the PSNR reference when psnr). */
static double blur_ns(const char *name, double sigma, int psnr) {
  static const struct codec_shape hd = {1920, 1080, 3};
  struct blur_params p;
  char query[96], msg[256];
  snprintf(query, sizeof(query), "method=%s&sigma=%g&psnr=%s", name, sigma,
           psnr ? "true" : "false");
  if (params_parse(&api_blur_endpoint, query, NULL, 0, &p, msg, sizeof(msg)) != API_OK) return -1;
  return api_blur_endpoint.cost(&p, &hd) / (1920.0 * 1080 * 3) * 1e9;
}

/* What blur method name costs by the budget's model: ns per sample at a few sigmas on 1080p,
 * without and with the PSNR reference. */
static json_t *blur_cost_entry(const char *name) {
  static const double sigmas[] = {2, 12, 50, 300};
  json_t *ns = json_object(), *psnr = json_object();
  char key[16];
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof(key), "%g", sigmas[i]);
    json_object_set_new(ns, key, json_real(round(blur_ns(name, sigmas[i], 0) * 100) / 100));
    json_object_set_new(psnr, key, json_real(round(blur_ns(name, sigmas[i], 1) * 100) / 100));
  }
  return json_pack("{s:o, s:o, s:s}", "ns_per_sample_at_sigma", ns,
                   "ns_per_sample_at_sigma_with_psnr", psnr, "rule",
                   "on 1920x1080 RGB at the default truncate; a request whose estimate passes "
                   "limits.max_cost_s gets 422 too_expensive");
}

static void blur_methods(json_t *list) {
  for (int m = 0; m <= CPU_NMETHODS; m++) {
    int is_auto = m == CPU_NMETHODS;
    const char *name = is_auto ? "auto" : cpu_method_name(m);
    const char *desc = is_auto ? "the fastest method that reaches 48 dB for the request's sigma "
                                 "and image size, on this backend"
                               : cpu_method_desc(m);
    json_t *e = method_entry(name, &api_blur_endpoint, desc,
                             is_auto ? ">= 48 dB" : cpu_method_accuracy(m), is_auto ? -1 : m);
    json_object_set_new(e, "cost", blur_cost_entry(name));
    json_array_append_new(list, e);
  }
}

/* The largest radius of variance method m whose estimate (psnr on, the default) for an image of
 * pixels is within the budget: 0 when none is, CPU_VAR_RADIUS_MAX when all are. */
static int var_max_radius(const struct api_ctx *ctx, int m, double pixels) {
  double extra = m == CPU_VAR_EXACT ? 0 : params_var_ns(CPU_VAR_EXACT, 1),
         limit = ctx->cfg.max_cost;
  int r = 0;
  while (r < CPU_VAR_RADIUS_MAX &&
         (limit <= 0 || (params_var_ns(m, r + 1) + extra) * pixels * 1e-9 <= limit))
    r++;
  return r;
}

/* What variance method m costs: ns per pixel at a few radii, and the largest radius the budget
 * (--max-cost) admits at a few image sizes (an O(r^2) method's radius limit depends on it). */
static json_t *var_cost_entry(const struct api_ctx *ctx, int m) {
  static const double mp[] = {1, 12, 40};
  json_t *ns = json_object(), *maxr = json_object();
  static const int radii[] = {1, 7, 31, 127};
  char key[32];
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof(key), "%d", radii[i]);
    json_object_set_new(ns, key, json_real(params_var_ns(m, radii[i])));
  }
  for (int i = 0; i < 3; i++) {
    snprintf(key, sizeof(key), "%gMP", mp[i]);
    json_object_set_new(maxr, key, json_integer(var_max_radius(ctx, m, mp[i] * 1e6)));
  }
  return json_pack("{s:o, s:o, s:s}", "ns_per_pixel_at_radius", ns, "max_radius", maxr, "rule",
                   "requests whose estimate (the ns per pixel times the pixels, plus the PSNR "
                   "reference) passes limits.max_cost_s get 422 too_expensive");
}

/* The variance methods, with the map's normalisation and scaling. */
static void variance_methods(const struct api_ctx *ctx, json_t *list) {
  for (int m = 0; m <= CPU_VAR_NMETHODS; m++) {
    int is_auto = m == CPU_VAR_NMETHODS, exact = m == CPU_VAR_EXACT || is_auto;
    json_t *e = method_entry(is_auto ? "auto" : cpu_var_method_name(m), &api_variance_endpoint,
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

static void image_methods(json_t *list) {
  json_array_append_new(
      list, method_entry("wallis", &api_contrast_endpoint,
                         "Wallis statistical differencing on luma, colour kept: Y' = a m0 + (1 - "
                         "a) m + (Y - m) b s0 / (s0 + b s), m and s the box mean and stddev",
                         "double on the CPU; the GPU within 1 level", -1));
  json_t *e = method_entry("convolve", &api_convolve_endpoint,
                           "2-D convolution with a named or custom odd square kernel, replicate "
                           "border, per channel, alpha copied",
                           "float32 in a fixed order: the same bytes on every backend", -1);
  json_t *names = json_array();
  for (int i = 0; cpu_conv_names[i]; i++)
    json_array_append_new(names, json_string(cpu_conv_names[i]));
  json_object_set_new(e, "kernels", names);
  json_array_append_new(list, e);
  json_array_append_new(
      list, method_entry("unsharp", &api_sharpen_endpoint,
                         "unsharp mask: out = in + amount (in - G_sigma(in)) where |in - G| >= "
                         "threshold; the Gaussian by any /blur method (parameter method)",
                         "the mask's blur as the /blur method's; X-PSNR measures it", -1));
}

static struct api_response *metrics(ROUTE_ARGS) {
  ROUTE_UNUSED;
  return metrics_response(ctx);
}

static struct api_response *methods(ROUTE_ARGS) {
  ROUTE_UNUSED;
  json_t *list = json_array();
  if (list) blur_methods(list), variance_methods(ctx, list), image_methods(list);
  const struct api_config *c = &ctx->cfg;
  return response_json(
      200, json_pack("{s:s, s:o, s:o, s:o, s:{s:I, s:I, s:I, s:I, s:f, s:s}}", "backend",
                     backend_name(ctx->backend), "devices", backend_devices(ctx->backend), "codecs",
                     backend_codecs(ctx->backend), "methods", list, "limits", "max_body_bytes",
                     (json_int_t)c->max_body, "max_pixels", (json_int_t)c->max_pixels, "max_width",
                     (json_int_t)c->max_width, "max_height", (json_int_t)c->max_height,
                     "max_cost_s", c->max_cost, "cost",
                     "each request's work is estimated from its image's header before decoding, "
                     "in seconds of one CPU core (the filter and the PSNR reference); past "
                     "max_cost_s (0: no limit) the answer is 422 too_expensive"));
}

/* Does the media type of content_type (before any ';') equal type? */
static int media_is(const char *content_type, const char *type) {
  size_t n = strlen(type);
  if (!content_type || strncasecmp(content_type, type, n) != 0) return 0;
  return content_type[n] == 0 || content_type[n] == ';' || content_type[n] == ' ';
}

struct upload { /* where the image and the params are in the body */
  const uint8_t *image;
  size_t len;
  const char *json; /* the params field, or NULL */
  size_t json_len;
  json_t *object; /* a JSON body, its image taken out: the parameters (owned), or NULL */
  json_t *base64; /* a JSON body's image value (owned), or NULL when it has none */
  uint8_t *owned; /* the image decoded from base64 (owned until handed to the job), or NULL */
};

/* A JSON body: its image is taken out of the object, and the rest are parameters. */
static enum api_error read_json(const uint8_t *body, size_t len, struct upload *u, char *msg,
                                size_t msglen) {
  enum api_error e =
      params_load_json("The JSON body", (const char *)body, len, &u->object, msg, msglen);
  if (e != API_OK) return e;
  u->base64 = json_incref(json_object_get(u->object, "image"));
  json_object_del(u->object, "image");
  return API_OK;
}

/* The image of a JSON body, decoded from its base64 string into u->owned (the one copy of it). */
static enum api_error json_image(struct upload *u, char *msg, size_t msglen) {
  static const char *const types[] = {"an object", "an array", "a string", "a number",
                                      "a number",  "true",     "false",    "null"};
  if (!u->base64) {
    snprintf(msg, msglen,
             "The JSON body has no 'image': send the image as a base64 string in it, "
             "{\"image\": \"iVBORw0KGgo...\", ...}.");
    return API_MISSING_IMAGE;
  }
  if (!json_is_string(u->base64)) {
    snprintf(msg, msglen, "The JSON body's 'image' is %s: send the image as a base64 string.",
             types[json_typeof(u->base64)]);
    return API_MISSING_IMAGE;
  }
  enum api_error e = base64_decode(json_string_value(u->base64), json_string_length(u->base64),
                                   &u->owned, &u->len, msg, msglen);
  json_decref(u->base64);
  u->base64 = NULL;
  u->image = u->owned;
  if (e == API_OK && u->len == 0) {
    snprintf(msg, msglen, "The JSON body's 'image' is empty: send the image as a base64 string.");
    e = API_MISSING_IMAGE;
  }
  return e;
}

static void upload_free(struct upload *u) {
  json_decref(u->object);
  json_decref(u->base64);
  free(u->owned);
  u->object = u->base64 = NULL;
  u->owned = NULL;
}

static enum api_error find_fields(const struct mp_part *parts, int n, struct upload *u, char *msg,
                                  size_t msglen) {
  for (int i = 0; i < n; i++) {
    const char *name = parts[i].name;
    if (strcmp(name, "image") == 0 || strcmp(name, "file") == 0) {
      if (u->image) {
        snprintf(msg, msglen, "The form has more than one image field; send one 'image'.");
        return API_BAD_MULTIPART;
      }
      u->image = parts[i].data;
      u->len = parts[i].len;
    } else if (strcmp(name, "params") == 0 && !u->json) {
      u->json = (const char *)parts[i].data;
      u->json_len = parts[i].len;
    } else {
      snprintf(msg, msglen,
               "Unexpected form field '%.64s'; the form takes 'image' (or 'file') and "
               "optionally 'params'.",
               name);
      return API_BAD_MULTIPART;
    }
  }
  return API_OK;
}

/* Finds the image and the params in req's body, by its Content-Type. */
static enum api_error read_upload(const struct api_request *req, struct upload *u, char *msg,
                                  size_t msglen) {
  const char *ct = req->content_type;
  memset(u, 0, sizeof(*u));
  if (media_is(ct, "multipart/form-data")) {
    struct mp_part parts[MP_MAX_PARTS];
    int n = 0;
    enum api_error e = multipart_parse(ct, req->body, req->body_len, parts, &n, msg, msglen);
    if (e == API_OK) e = find_fields(parts, n, u, msg, msglen);
    multipart_free(parts, n);
    return e;
  }
  if (media_is(ct, "image/png") || media_is(ct, "image/jpeg") || media_is(ct, "image/jpg") ||
      media_is(ct, "image/webp") || media_is(ct, "application/octet-stream")) {
    u->image = req->body;
    u->len = req->body_len;
    return API_OK;
  }
  if (!ct && req->body_len == 0) return API_OK; /* no image: reported by the caller */
  snprintf(msg, msglen,
           "Content-Type '%.64s' is not accepted: send multipart/form-data with an 'image' "
           "field, the raw image as image/png, image/jpeg or image/webp, or application/json "
           "with the image in base64.",
           ct ? ct : "(none)");
  return API_UNSUPPORTED_MEDIA;
}

struct api_response *upload_check(struct api_ctx *ctx, const struct endpoint *ep,
                                  const void *params, const uint8_t *image, size_t len) {
  char msg[512];
  double estimate;
  if (!image || len == 0)
    return api_error_response(
        API_MISSING_IMAGE,
        "The request carries no image: send it in the form field 'image', or as the raw body "
        "with Content-Type image/png, image/jpeg or image/webp.");
  if (codec_sniff(image, len) == CODEC_NONE)
    return api_error_response(API_UNSUPPORTED_MEDIA,
                              "The upload is neither a PNG, a JPEG nor a WebP file.");
  enum api_error e = params_budget(ctx, ep, params, image, len, &estimate, msg, sizeof(msg));
  if (e == API_OK) return NULL;
  /* one decimal, as in the sentence */
  return response_error(e, msg,
                        json_pack("{s:f, s:f}", "estimate_s", round(estimate * 10) / 10,
                                  "max_cost_s", ctx->cfg.max_cost));
}

struct api_response *upload_json(struct api_ctx *ctx, const struct endpoint *ep, const char *query,
                                 const uint8_t *body, size_t body_len, struct job_params *p,
                                 uint8_t **owned, size_t *len) {
  char msg[512] = "";
  struct upload u;
  struct bodyscan scan = {0};
  memset(&u, 0, sizeof(u));
  /* The server checks the body as it streams in (api_body_chunk); checked again here, at memory
   * speed, so that jansson never sees a body past the limits whatever called api_handle. */
  enum api_error e = bodyscan_feed(&scan, body, body_len, msg, sizeof(msg));
  if (e == API_OK) e = read_json(body, body_len, &u, msg, sizeof(msg));
  if (e == API_OK)
    e = params_parse_object(ep, query, u.object, "the JSON body", &p->u, msg, sizeof(msg));
  if (e == API_OK) e = json_image(&u, msg, sizeof(msg));
  struct api_response *r =
      e != API_OK ? api_error_response(e, msg) : upload_check(ctx, ep, &p->u, u.image, u.len);
  if (!r) *owned = u.owned, *len = u.len, u.owned = NULL;
  upload_free(&u);
  return r;
}

/* An image endpoint: read the upload and the parameters, then queue the job. A JSON body is
 * queued as it is, and parsed by its job on a worker: a large one costs an HTTP thread nothing. */
static struct api_response *image_job(ROUTE_ARGS) {
  char msg[512] = "";
  if (api_failed(ctx)) return api_error_response(API_GPU_LOST, NULL);
  struct upload u;
  struct job_params *p = calloc(1, sizeof(*p)); /* large (a custom kernel): not on the stack */
  if (!p) return api_error_response(API_OUT_OF_MEMORY, NULL);
  p->kind = r->kind;
  struct api_response *resp = NULL;
  enum api_error e;
  if (media_is(req->content_type, "application/json")) {
    e = job_submit(ctx, req, req->body, req->body_len, NULL, r->ep, p, done, udata);
    free(p);
    return e == API_OK ? NULL : api_error_response(e, NULL);
  }
  e = read_upload(req, &u, msg, sizeof(msg));
  if (e == API_OK) e = params_parse(r->ep, query, u.json, u.json_len, &p->u, msg, sizeof(msg));
  if (e == API_OK) resp = upload_check(ctx, r->ep, &p->u, u.image, u.len);
  if (e == API_OK && !resp) e = job_submit(ctx, req, u.image, u.len, NULL, NULL, p, done, udata);
  upload_free(&u);
  free(p);
  return resp ? resp : e == API_OK ? NULL : api_error_response(e, msg);
}

/* clang-format off */
const struct route api_routes[] = {
    {"/", "GET", "The demo page: upload an image, try the methods and compare them.", NULL,
     "text/html; charset=utf-8", 0, web_answer, JOB_NONE},
    {"/demo.js", "GET", "The demo page's script.", NULL, "text/javascript; charset=utf-8", 0,
     web_answer, JOB_NONE},
    {"/demo.css", "GET", "The demo page's style sheet.", NULL, "text/css; charset=utf-8", 0,
     web_answer, JOB_NONE},
    {"/healthz", "GET", "Liveness: 200 while the process serves.", NULL, "application/json", 0,
     healthz, JOB_NONE},
    {"/readyz", "GET", "Readiness: 200 when the workers take jobs, 503 while draining or after a "
     "GPU failure; the backend, workers and queue.", NULL, "application/json", ROUTE_UNREADY,
     readyz, JOB_NONE},
    {"/methods", "GET", "Every method with its description, accuracy, parameters and backends, "
     "and the configured limits.", NULL, "application/json", 0, methods, JOB_NONE},
    {"/metrics", "GET", "Prometheus metrics: requests by endpoint, method and status, stage "
     "latency histograms, queue, in-flight and GPU memory gauges, backend info.", NULL,
     "text/plain; version=0.0.4; charset=utf-8", 0, metrics, JOB_NONE},
    {"/openapi.json", "GET", "This OpenAPI 3.1 description, generated from the route and "
     "parameter tables.", NULL, "application/json", 0, openapi, JOB_NONE},
    {"/blur", "POST", "Blurs the uploaded image with a Gaussian of standard deviation sigma (or "
     "sigma_x and sigma_y), whole or in regions; answers the image, with stage times and PSNR.", &api_blur_endpoint, NULL, 0,
     image_job, JOB_BLUR},
    {"/convert", "POST", "Decodes the upload and encodes it again (format conversion), with no "
     "filter.", &api_convert_endpoint, NULL, 0, image_job, JOB_CONVERT},
    {"/variance", "POST", "Local variance or standard deviation map of the upload's luma (seed "
     "004's methods and an exact one), as a 16-bit gray PNG.", &api_variance_endpoint, NULL, 0,
     image_job, JOB_VARIANCE},
    {"/contrast", "POST", "Local contrast enhancement (Wallis statistical differencing) on luma, "
     "colour kept.", &api_contrast_endpoint, NULL, 0, image_job, JOB_CONTRAST},
    {"/convolve", "POST", "2-D convolution with a named (seed 003) or custom odd square kernel.",
     &api_convolve_endpoint, NULL, 0, image_job, JOB_CONVOLVE},
    {"/sharpen", "POST", "Unsharp mask: out = in + amount (in - G_sigma(in)), with a threshold, "
     "on colour (premultiplied) or on luma only.", &api_sharpen_endpoint, NULL, 0, image_job,
     JOB_SHARPEN},
};
/* clang-format on */
const int api_nroutes = sizeof(api_routes) / sizeof(api_routes[0]);

const char *api_route(int i, const char **method) {
  if (i < 0 || i >= api_nroutes) return NULL;
  *method = api_routes[i].method;
  return api_routes[i].path;
}

size_t route_path_len(const char *uri) {
  const char *q = strchr(uri, '?');
  return q ? (size_t)(q - uri) : strlen(uri);
}

const struct route *route_find(const char *uri) {
  size_t plen = route_path_len(uri);
  for (int i = 0; i < api_nroutes; i++)
    if (strlen(api_routes[i].path) == plen && memcmp(api_routes[i].path, uri, plen) == 0)
      return &api_routes[i];
  return NULL;
}

enum api_error api_body_chunk(struct api_ctx *ctx, struct api_request *req, const uint8_t *data,
                              size_t n, char *msg, size_t msglen) {
  struct bodyscan *s = (struct bodyscan *)req->body_scan;
  (void)ctx;
  if (s->mode == 0) s->mode = media_is(req->content_type, "application/json") ? 1 : 2;
  return s->mode == 1 ? bodyscan_feed(s, data, n, msg, msglen) : API_OK;
}

struct api_response *api_handle(struct api_ctx *ctx, const struct api_request *req,
                                api_done_fn done, void *udata) {
  const char *q = strchr(req->uri, '?');
  const struct route *r = route_find(req->uri);
  if (req->trace) req->trace->endpoint = r ? r->path : NULL;
  if (!r) return api_error_response(API_NOT_FOUND, NULL);
  int get = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
  if (strcmp(req->method, r->method) != 0 && !(get && strcmp(r->method, "GET") == 0)) {
    char msg[128];
    snprintf(msg, sizeof(msg), "%s takes %s, not %.16s.", r->path, r->method, req->method);
    struct api_response *resp = api_error_response(API_METHOD_NOT_ALLOWED, msg);
    if (resp)
      api_response_header(resp, "Allow", "%s", strcmp(r->method, "GET") ? r->method : "GET, HEAD");
    return resp;
  }
  return r->answer(ctx, r, req, q ? q + 1 : "", done, udata);
}

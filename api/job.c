/* The image job of a request: queued on the engine, it runs on a worker thread, off the HTTP
 * threads. A JSON body comes to it unparsed: its parameters and base64 image are read here first,
 * on the worker, so that no HTTP thread spends time or memory on a large body. Then the engine's
 * pipeline (engine_image_run) decodes, runs the operation's compute and encodes, asking this file
 * only how to encode once the upload's format is known (the output parameters, and the Accept
 * header, which may ask for the JSON object instead: a 406 costs no filtering); and this file
 * answers with the stage times, the PSNR and the operation's own fields. */
#include "api_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct image_job {
  struct job base; /* first: the engine sees a struct job */
  struct api_ctx *ctx;
  const uint8_t *image; /* the upload: in the server's request, or in owned */
  size_t len;
  uint8_t *owned; /* the image decoded from a JSON body's base64, freed with the job; or NULL */
  const struct api_op *op;
  int json;           /* image is a JSON body to parse first, with op's parameters */
  const char *query;  /* the request's query string (without '?'), for json */
  const char *accept; /* the Accept header, or NULL: weighed once the result's type is known */
  int want_json;      /* answer with JSON (http_negotiate) */
  double t_received;  /* when the server had the whole body */
  double deadline;    /* api_now_ms() past which the job gives up; 0: none */
  int (*client_gone)(void *udata);
  struct api_trace *trace; /* the server's notes on the request, or NULL */
  api_done_fn done;
  void *udata;
  union { /* op's parameter struct */
    max_align_t align;
    unsigned char bytes[OP_PARAMS_MAX];
  } params;
};

struct timing { /* stage times of one job as clients see them, ms; negative when not applicable */
  double queue, total;
  struct engine_timing e; /* the pipeline's */
};

/* Whether the job should stop before it starts. */
static enum err still_wanted(const struct image_job *j) {
  if (j->deadline > 0 && api_now_ms() > j->deadline) return ERR_DEADLINE_EXCEEDED;
  if (j->client_gone && j->client_gone(j->udata)) return ERR_CLIENT_GONE;
  return ERR_OK;
}

/* The stages of t as name/value pairs, in the order clients see them, with the codec of the
 * decode and encode stages (desc[i], or NULL). */
static int stages(const struct timing *t, const char **names, double *ms, const char **desc) {
  const char *n[] = {"queue",  "decode",    "upload", "kernel", "download",
                     "filter", "reference", "encode", "total"};
  const struct stage_times *st = &t->e.st;
  double v[] = {t->queue,   t->e.decode,   st->upload,  st->kernel, st->download,
                st->filter, st->reference, t->e.encode, t->total};
  const char *d[] = {NULL, t->e.decoder, NULL, NULL, NULL, NULL, NULL, t->e.encoder, NULL};
  int k = 0;
  for (int i = 0; i < 9; i++)
    if (v[i] >= 0) names[k] = n[i], desc[k] = d[i], ms[k++] = v[i];
  return k;
}

static void add_headers(struct api_response *r, const char *backend, const struct op_result *res,
                        const struct timing *t) {
  const char *names[9], *desc[9];
  double ms[9];
  char st[512];
  size_t len = 0;
  int n = stages(t, names, ms, desc);
  for (int i = 0; i < n && len < sizeof(st); i++)
    len += snprintf(st + len, sizeof(st) - len, "%s%s%s%s%s;dur=%.3f", i ? ", " : "", names[i],
                    desc[i] ? ";desc=\"" : "", desc[i] ? desc[i] : "", desc[i] ? "\"" : "", ms[i]);
  api_response_header(r, "Server-Timing", "%s", st);
  api_response_header(r, "X-Backend", "%s", backend);
  api_response_header(r, "Vary", "Accept"); /* JSON or which image format follows Accept */
  if (isinf(res->psnr)) api_response_header(r, "X-PSNR", "inf");
  if (isfinite(res->psnr)) api_response_header(r, "X-PSNR", "%.2f", res->psnr);
  if (res->method) api_response_header(r, "X-Method", "%s", res->method);
  if (res->sigma_x > 0) api_response_header(r, "X-Sigma", "%g,%g", res->sigma_x, res->sigma_y);
  if (res->scale > 0) api_response_header(r, "X-Scale", "%.17g", res->scale);
}

static json_t *json_body(const struct image_job *j, const struct codec_image *img,
                         const char *backend, const struct op_result *res, const struct timing *t,
                         const uint8_t *data, size_t len) {
  const char *names[9], *desc[9];
  double ms[9];
  int n = stages(t, names, ms, desc);
  char *b64 = base64_encode(data, len);
  json_t *timing = json_object(), *codecs = json_object();
  for (int i = 0; timing && i < n; i++) /* to the microsecond, as in Server-Timing */
    json_object_set_new(timing, names[i], json_real(round(ms[i] * 1e3) / 1e3));
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
  if (o && j->op->result) j->op->result(o, j->params.bytes, res);
  free(b64);
  return o;
}

/* engine_image_job.output: how the answer is encoded (op_output), and whether it is the image or
 * the JSON object (http_negotiate: a 406 when neither is acceptable). */
static enum err job_output(void *arg, enum codec_format in, struct codec_encode_opts *o, char *msg,
                           size_t msglen) {
  struct image_job *j = arg;
  *o = op_output(j->op->ep, j->params.bytes, in, j->accept);
  return http_negotiate(j->accept, codec_mime(o->format), &j->want_json, msg, msglen);
}

static int job_client_gone(void *arg) {
  const struct image_job *j = arg;
  return j->client_gone(j->udata);
}

static struct api_response *respond(struct image_job *j, const struct codec_image *img,
                                    uint8_t **enc, size_t len, const struct op_result *res,
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
  if (r && !j->want_json && (img->format == CODEC_RAW || img->format == CODEC_NPY)) {
    api_response_header(r, "X-Width", "%d", img->width);
    api_response_header(r, "X-Height", "%d", img->height);
    api_response_header(r, "X-Sample-Type", "%s", img->depth == 16 ? "uint16le" : "uint8");
  }
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
      upload_json(j->op->ep, j->query, j->image, j->len, j->params.bytes, &owned, &len);
  if (!r) j->image = j->owned = owned, j->len = len;
  return r ? r : op_admit(j->ctx, j->op->ep, j->params.bytes, j->image, j->len, j->accept);
}

static void job_run(struct job *job, struct worker *w) {
  struct image_job *j = (struct image_job *)job;
  const struct api_config *cfg = &j->ctx->cfg;
  struct timing t = {api_now_ms() - job->t_queued, -1, {-1, -1, {-1, -1, -1, -1, -1}, NULL, NULL}};
  struct engine_image img = {0};
  int compute = 0;
  for (int b = 0; b < ENGINE_NBACKENDS; b++) compute |= j->op->compute[b] != NULL;
  struct engine_image_job spec = {
      j->image,
      j->len,
      {cfg->max_width, cfg->max_height, cfg->max_pixels},
      compute ? j->op->compute : NULL,
      j->params.bytes,
      strcmp(op_choice(j->op->ep, j->params.bytes, "colorspace", "keep"), "srgb") == 0,
      j->deadline,
      j->client_gone ? job_client_gone : NULL,
      j,
      job_output};
  enum err e = still_wanted(j);
  struct api_response *r = e == ERR_OK ? parse_body(j) : NULL;
  if (e == ERR_OK && !r) {
    spec.image = j->image, spec.len = j->len; /* a JSON body's image, decoded from base64 */
    e = engine_image_run(w, &spec, &img);
  }
  t.e = img.t;
  if (!r)
    r = e == ERR_OK ? respond(j, img.img, &img.enc, img.len, &img.res, &t, engine_worker_name(w))
                    : api_error_response(e, img.msg[0] ? img.msg : NULL);
  if (!r) r = api_error_response(ERR_OUT_OF_MEMORY, NULL);
  if (r && e == ERR_NOT_ACCEPTABLE) api_response_header(r, "Vary", "Accept"); /* as a 200 would */
  if (j->trace && img.res.method) j->trace->algorithm = img.res.method;
  note_stages(j, &t);
  engine_image_free(&img);
  free(j->owned);
  j->done(j->udata, r);
  free(j);
}

enum err job_submit(struct api_ctx *ctx, const struct api_request *req, const uint8_t *image,
                    size_t len, uint8_t *owned, const struct api_op *op, const void *params,
                    api_done_fn done, void *udata) {
  const char *q = strchr(req->uri, '?');
  struct image_job *j = calloc(1, sizeof(*j));
  if (!j) return ERR_OUT_OF_MEMORY;
  *j = (struct image_job){.base = {job_run, 0},
                          .ctx = ctx,
                          .image = image,
                          .len = len,
                          .owned = owned,
                          .op = op,
                          .json = params == NULL,
                          .query = q ? q + 1 : "",
                          .accept = req->accept,
                          .t_received = req->t_received,
                          .deadline = req->deadline,
                          .client_gone = req->client_gone,
                          .trace = req->trace,
                          .done = done,
                          .udata = udata};
  if (params) memcpy(j->params.bytes, params, op->params_size);
  if (engine_submit(ctx->engine, &j->base) != 0) {
    free(j);
    return ctx->draining ? ERR_SHUTTING_DOWN : ERR_QUEUE_FULL;
  }
  return ERR_OK;
}

/* An image endpoint: read the upload and the parameters, then queue the job of r's operation. A
 * JSON body is queued as it is, and parsed by its job on a worker: a large one costs an HTTP
 * thread nothing. */
struct api_response *handler_image(ROUTE_ARGS) {
  char msg[512] = "";
  if (api_failed(ctx)) return api_error_response(ERR_GPU_LOST, NULL);
  if (http_media_is(req->content_type, "application/json")) {
    enum err e = job_submit(ctx, req, req->body, req->body_len, NULL, r->op, NULL, done, udata);
    return e == ERR_OK ? NULL : api_error_response(e, NULL);
  }
  struct upload u;
  void *p = calloc(1, r->op->params_size); /* large (a custom kernel): not on the stack */
  if (!p) return api_error_response(ERR_OUT_OF_MEMORY, NULL);
  struct api_response *resp = NULL;
  enum err e = upload_read(req, &u, msg, sizeof(msg));
  if (e == ERR_OK) e = params_parse(r->ep, query, u.json, u.json_len, p, msg, sizeof(msg));
  if (e == ERR_OK) resp = op_admit(ctx, r->ep, p, u.image, u.len, req->accept);
  if (e == ERR_OK && !resp) e = job_submit(ctx, req, u.image, u.len, NULL, r->op, p, done, udata);
  upload_free(&u);
  free(p);
  return resp ? resp : e == ERR_OK ? NULL : api_error_response(e, msg);
}

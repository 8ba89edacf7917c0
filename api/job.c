/* The image job: runs on a backend worker, off the HTTP threads, and only orchestrates: it decodes
 * the upload, runs the job's operation (its descriptor's compute for the worker's backend, op.h)
 * and encodes the result, checking the request's deadline between the steps, then builds the
 * response with the stage times, the PSNR and the operation's own fields and hands it to the
 * server's callback. No pixel is computed here: the computes live in cpu/ and gpu/. The backend
 * decodes and encodes (its verbs say with which codec), and may keep the pixels on its device
 * between steps: an image whose pixels are NULL is the worker's. Each step is timed here, so every
 * backend reports the same names.
 * A JSON body comes to the job unparsed: its parameters and base64 image are read here first, on
 * the worker, so that no HTTP thread spends time or memory on a large body.
 * Between steps the job gives up early when the request's deadline has passed (503
 * deadline_exceeded) or the client has hung up (nobody would read the answer). Within every step
 * the same two questions go to the work itself, through the cancel token the job sets for its
 * thread around the whole of process() (struct cpu_cancel): the filters and the reference ask it
 * (cpu_cancelled), and so do the decoders and encoders, through the codecs' hook
 * (codec_cancel_set), which asks the same token. Their loops stop within milliseconds, and the
 * job answers as it would between steps; an unfinished result is never encoded nor sent. */
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
  uint8_t *icc;   /* the upload's ICC profile, to go out with the result; or NULL */
  size_t icc_len;
  const struct api_op *op;
  int json;           /* image is a JSON body to parse first, with op's parameters */
  const char *query;  /* the request's query string (without '?'), for json */
  const char *accept; /* the Accept header, or NULL: weighed once the result's type is known */
  int want_json;      /* answer with JSON (api_negotiate) */
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

struct timing { /* stage times of one job, ms; negative when not applicable */
  double queue, decode, encode, total;
  struct stage_times st;
  const char *decoder, *encoder; /* the codecs that ran, or NULL */
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

/* The codecs' hook (codec_cancel_set): the job's token, from any thread the codec uses. */
static int codec_stop(void *token) {
  return cpu_cancel_check(token) != CPU_RUNNING;
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

static void add_headers(struct api_response *r, const char *backend, const struct op_result *res,
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

static json_t *json_body(const struct image_job *j, const struct codec_image *img,
                         const char *backend, const struct op_result *res, const struct timing *t,
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
  if (o && j->op->result) j->op->result(o, j->params.bytes, res);
  free(b64);
  return o;
}

/* How the result is encoded (op_output), with the upload's ICC profile when it is kept. */
static struct codec_encode_opts encode_opts(const struct image_job *j, enum codec_format input) {
  struct codec_encode_opts o = op_output(j->op->ep, j->params.bytes, input);
  o.icc = j->icc, o.icc_len = j->icc_len;
  return o;
}

/* The upload's ICC profile into the job (read from the file's bytes, whichever decoder ran); with
 * colorspace=srgb, in's pixels converted to sRGB on the host and the profile dropped. */
static enum api_error colour(struct image_job *j, struct worker *w, struct codec_image *in) {
  if (codec_icc_read(j->image, j->len, &j->icc, &j->icc_len) != CODEC_OK) return API_OUT_OF_MEMORY;
  if (!j->icc || strcmp(op_choice(j->op->ep, j->params.bytes, "colorspace", "keep"), "srgb") != 0)
    return API_OK;
  enum api_error e = w->ops->to_host(w->state, in);
  if (e == API_OK && codec_to_srgb(in, j->icc, j->icc_len) < 0) e = op_cancelled();
  free(j->icc);
  j->icc = NULL, j->icc_len = 0;
  return e;
}

/* The operation on w's backend, under the job's cancel token (process_stoppable): the filters'
 * loops stop once the deadline has passed or the client has gone, and the job then answers as
 * still_wanted() would, whatever the compute made of its unfinished work (a lost GPU still stops
 * the process). */
static enum api_error run_op(struct image_job *j, struct worker *w, struct op_io *io) {
  enum api_error e = w->ops->run(w->state, j->op, j->params.bytes, io), c = op_cancelled();
  return e == API_GPU_LOST || c == API_OK ? e : c;
}

/* Decodes, runs the operation and encodes; on success *enc holds the encoded image and *img the
 * pixels it came from (out, or in for an operation with no compute). */
static enum api_error process(struct image_job *j, struct worker *w, struct codec_image *in,
                              struct codec_image *out, const struct codec_image **img,
                              uint8_t **enc, size_t *enclen, struct op_result *res,
                              struct timing *t, char *msg, size_t msglen) {
  const struct api_config *cfg = &j->ctx->cfg;
  struct codec_limits lim = {cfg->max_width, cfg->max_height, cfg->max_pixels};
  int compute = j->op->cpu || j->op->gpu;
  struct op_io io = {in, out, res, &t->st, msg, msglen};
  enum api_error e = still_wanted(j);
  if (e != API_OK) return e;
  double t0 = api_now_ms();
  e = w->ops->decode(w->state, j->image, j->len, &lim, in, &t->decoder, msg, msglen);
  if (e == API_OK) e = colour(j, w, in);
  t->decode = api_now_ms() - t0; /* the profile read and colour conversion included */
  if (e == API_OK) e = still_wanted(j);
  if (e == API_OK) /* before the compute: a 406 costs no filtering */
    e = api_negotiate(j->accept, codec_mime(encode_opts(j, in->format).format), &j->want_json, msg,
                      msglen);
  if (e == API_OK && compute) e = run_op(j, w, &io);
  if (e == API_OK) e = still_wanted(j);
  if (e != API_OK) return e;
  struct codec_encode_opts o = encode_opts(j, in->format);
  struct codec_image *r = compute ? out : in;
  r->format = o.format;
  *img = r;
  t0 = api_now_ms();
  e = w->ops->encode(w->state, r, &o, enc, enclen, &t->encoder, &t->st.download, msg, msglen);
  t->encode = api_now_ms() - t0; /* download included, when there is one */
  return e;
}

/* process() under the job's cancel token, for the filters (cpu_cancel_set) and the codecs
 * (codec_cancel_set) alike. A step that stopped for it answers with its reason, in the API's own
 * words. */
static enum api_error process_stoppable(struct image_job *j, struct worker *w,
                                        struct codec_image *in, struct codec_image *out,
                                        const struct codec_image **img, uint8_t **enc,
                                        size_t *enclen, struct op_result *res, struct timing *t,
                                        char *msg, size_t msglen) {
  struct cpu_cancel token = {j->deadline, j->client_gone ? job_client_gone : NULL, j, 0, 0, 0};
  struct codec_cancel hook = {codec_stop, &token};
  cpu_cancel_set(&token);
  codec_cancel_set(&hook);
  enum api_error e = process(j, w, in, out, img, enc, enclen, res, t, msg, msglen);
  if (e != API_OK && e != API_GPU_LOST && op_cancelled() != API_OK) e = op_cancelled();
  codec_cancel_set(NULL);
  cpu_cancel_set(NULL);
  if (e == API_DEADLINE_EXCEEDED || e == API_CLIENT_GONE) msg[0] = 0;
  return e;
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
      upload_json(j->ctx, j->op->ep, j->query, j->image, j->len, j->params.bytes, &owned, &len);
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
  struct op_result res = {NULL, 0, 0, NAN, 0, 0, 0, 0};
  char msg[256] = "";
  enum api_error e = still_wanted(j);
  struct api_response *r = e == API_OK ? parse_body(j) : NULL;
  if (e == API_OK && !r)
    e = process_stoppable(j, w, &in, &out, &img, &enc, &enclen, &res, &t, msg, sizeof(msg));
  if (e == API_GPU_LOST) api_fail(j->ctx); /* the process will stop and be restarted */
  if (!r)
    r = e == API_OK ? respond(j, img, &enc, enclen, &res, &t, w->ops->worker_name(w->state))
                    : api_error_response(e, msg[0] ? msg : NULL);
  if (!r) r = api_error_response(API_OUT_OF_MEMORY, NULL);
  if (j->trace && res.method) j->trace->algorithm = res.method;
  note_stages(j, &t);
  free(enc);
  codec_image_free(&out);
  codec_image_free(&in);
  free(j->owned);
  free(j->icc);
  j->done(j->udata, r);
  free(j);
}

enum api_error job_submit(struct api_ctx *ctx, const struct api_request *req, const uint8_t *image,
                          size_t len, uint8_t *owned, const struct api_op *op, const void *params,
                          api_done_fn done, void *udata) {
  const char *q = strchr(req->uri, '?');
  struct image_job *j = calloc(1, sizeof(*j));
  if (!j) return API_OUT_OF_MEMORY;
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
  if (backend_submit(ctx->backend, &j->base) != 0) {
    free(j);
    return ctx->draining ? API_SHUTTING_DOWN : API_QUEUE_FULL;
  }
  return API_OK;
}

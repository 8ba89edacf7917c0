/* The image job: runs on a backend worker, off the HTTP threads. It decodes the upload, filters
 * it on the worker's backend (/blur; /convert skips this), encodes the result and builds the
 * response with its stage times and PSNR, then hands the response to the server's callback. Each
 * stage is timed here, so every backend reports the same names. Between stages the job gives up
 * early when the request's deadline has passed (503 deadline_exceeded) or the client has hung
 * up (nobody would read the answer). */
#include "api_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct image_job {
  struct job base; /* first: the backend sees a struct job */
  struct api_ctx *ctx;
  const uint8_t *image; /* the upload, owned by the server's request */
  size_t len;
  struct blur_params p;
  int convert;            /* /convert: decode and encode only */
  int want_json;          /* answer with JSON (Accept: application/json) */
  enum cpu_method method; /* the method that ran (auto resolved) */
  int out_lent;           /* the filtered pixels are the worker's buffer, not ours to free */
  double t_received;      /* when the server had the whole body */
  double deadline;        /* api_now_ms() past which the job gives up; 0: none */
  int (*client_gone)(void *udata);
  struct api_trace *trace; /* the server's notes on the request, or NULL */
  api_done_fn done;
  void *udata;
};

struct timing { /* stage times of one job, ms; negative when not applicable */
  double queue, decode, encode, total;
  struct stage_times st;
};

static enum api_error codec_error(enum codec_status s) {
  switch (s) {
  case CODEC_OK:
    return API_OK;
  case CODEC_UNKNOWN:
    return API_UNSUPPORTED_MEDIA;
  case CODEC_CORRUPT:
    return API_UNDECODABLE;
  case CODEC_TOO_LARGE:
    return API_IMAGE_TOO_LARGE;
  case CODEC_UNSUPPORTED:
    return API_UNSUPPORTED_IMAGE;
  case CODEC_NOMEM:
    return API_OUT_OF_MEMORY;
  }
  return API_INTERNAL;
}

/* Whether the job should stop before its next stage. */
static enum api_error still_wanted(const struct image_job *j) {
  if (j->deadline > 0 && api_now_ms() > j->deadline) return API_DEADLINE_EXCEEDED;
  if (j->client_gone && j->client_gone(j->udata)) return API_CLIENT_GONE;
  return API_OK;
}

/* The stages of t as name/value pairs, in the order clients see them. */
static int stages(const struct timing *t, const char **names, double *ms) {
  const char *n[] = {"queue",  "decode",    "upload", "kernel", "download",
                     "filter", "reference", "encode", "total"};
  double v[] = {t->queue,     t->decode,       t->st.upload, t->st.kernel, t->st.download,
                t->st.filter, t->st.reference, t->encode,    t->total};
  int k = 0;
  for (int i = 0; i < 9; i++)
    if (v[i] >= 0) names[k] = n[i], ms[k++] = v[i];
  return k;
}

static void add_headers(struct api_response *r, const struct image_job *j, const char *backend,
                        double psnr, const struct timing *t) {
  const char *names[9];
  double ms[9];
  char st[384];
  size_t len = 0;
  int n = stages(t, names, ms);
  for (int i = 0; i < n && len < sizeof(st); i++)
    len += snprintf(st + len, sizeof(st) - len, "%s%s;dur=%.3f", i ? ", " : "", names[i], ms[i]);
  api_response_header(r, "Server-Timing", "%s", st);
  api_response_header(r, "X-Backend", "%s", backend);
  if (j->convert) return;
  if (j->p.psnr && isinf(psnr)) api_response_header(r, "X-PSNR", "inf");
  if (j->p.psnr && !isinf(psnr)) api_response_header(r, "X-PSNR", "%.2f", psnr);
  api_response_header(r, "X-Method", "%s", cpu_method_name(j->method));
}

static json_t *json_body(const struct image_job *j, const struct codec_image *img,
                         const char *backend, double psnr, const struct timing *t,
                         const uint8_t *data, size_t len) {
  const char *names[9];
  double ms[9];
  int n = stages(t, names, ms);
  char *b64 = base64_encode(data, len);
  json_t *timing = json_object();
  for (int i = 0; timing && i < n; i++) json_object_set_new(timing, names[i], json_real(ms[i]));
  json_t *o = b64 ? json_pack("{s:i, s:i, s:i, s:i, s:s, s:o, s:s, s:s}", "width", img->width,
                              "height", img->height, "channels", img->channels, "bit_depth",
                              img->depth, "backend", backend, "timing_ms", timing, "format",
                              codec_format_name(img->format), "image", b64)
                  : NULL;
  if (o && !j->convert) {
    json_object_set_new(o, "method", json_string(cpu_method_name(j->method)));
    json_object_set_new(o, "sigma", json_real(j->p.sigma));
    if (j->p.psnr) json_object_set_new(o, "psnr_db", isinf(psnr) ? json_null() : json_real(psnr));
    if (j->p.method == METHOD_AUTO) json_object_set_new(o, "requested_method", json_string("auto"));
  }
  free(b64);
  return o;
}

/* The filter stage: src into dst on the worker's backend. */
static enum api_error filter(struct image_job *j, struct worker *w, const struct codec_image *in,
                             struct codec_image *out, double *psnr, struct timing *t) {
  struct cpu_image src = {in->pixels, in->width, in->height, in->channels, in->depth};
  struct cpu_image dst = src;
  *out = *in;
  out->pixels = dst.data = w->ops->lends_output ? NULL : malloc(cpu_image_bytes(&src));
  if (!w->ops->lends_output && !out->pixels) return API_OUT_OF_MEMORY;
  struct cpu_blur b = {j->p.method, j->p.sigma, j->p.truncate, j->p.coeffs};
  if (j->p.method == METHOD_AUTO) b.method = w->ops->auto_method(j->p.sigma, in->width, in->height);
  j->method = b.method;
  if (j->trace) j->trace->algorithm = cpu_method_name(b.method);
  struct cpu_accuracy acc;
  enum api_error e = w->ops->blur(w->state, &b, &src, &dst, j->p.psnr ? &acc : NULL, &t->st);
  *psnr = j->p.psnr ? acc.psnr : NAN;
  j->out_lent = w->ops->lends_output;
  out->pixels = dst.data;
  return e;
}

/* Decodes, filters and encodes; on success *enc holds the encoded image and *res the pixels it
 * came from (out, or in for /convert). */
static enum api_error process(struct image_job *j, struct worker *w, struct codec_image *in,
                              struct codec_image *out, const struct codec_image **res,
                              uint8_t **enc, size_t *enclen, double *psnr, struct timing *t,
                              char *msg, size_t msglen) {
  const struct api_config *cfg = &j->ctx->cfg;
  struct codec_limits lim = {cfg->max_width, cfg->max_height, cfg->max_pixels};
  enum api_error e = still_wanted(j);
  if (e != API_OK) return e;
  double t0 = api_now_ms();
  e = codec_error(codec_decode(j->image, j->len, &lim, in, msg, msglen));
  t->decode = api_now_ms() - t0;
  if (e == API_OK) e = still_wanted(j);
  if (e == API_OK && !j->convert) e = filter(j, w, in, out, psnr, t);
  if (e == API_OK) e = still_wanted(j);
  if (e != API_OK) return e;
  static const enum codec_format formats[] = {CODEC_NONE, CODEC_PNG, CODEC_JPEG};
  struct codec_encode_opts o = {j->p.format ? formats[j->p.format] : in->format, j->p.quality,
                                j->p.compression};
  struct codec_image *r = j->convert ? in : out;
  r->format = o.format;
  *res = r;
  t0 = api_now_ms();
  e = codec_error(codec_encode(r, &o, enc, enclen, msg, msglen));
  t->encode = api_now_ms() - t0;
  return e;
}

static struct api_response *respond(struct image_job *j, const struct codec_image *img,
                                    uint8_t **enc, size_t len, double psnr, struct timing *t,
                                    const char *backend) {
  t->total = api_now_ms() - j->t_received;
  struct api_response *r;
  if (j->want_json) {
    r = response_json(200, json_body(j, img, backend, psnr, t, *enc, len));
  } else if ((r = calloc(1, sizeof(*r))) != NULL) {
    r->status = 200;
    r->content_type = codec_mime(img->format);
    r->body = *enc;
    r->len = len;
    *enc = NULL;
  }
  if (r) add_headers(r, j, backend, psnr, t);
  return r;
}

/* Copies the stage times into the request's trace, for the metrics and the access log; a job that
 * failed gets its total here. */
static void note_stages(struct image_job *j, struct timing *t) {
  const char *names[9];
  double ms[9];
  if (!j->trace) return;
  if (t->total < 0) t->total = api_now_ms() - j->t_received;
  int n = stages(t, names, ms);
  for (int i = 0; i < n && i < API_TRACE_STAGES; i++)
    j->trace->stage[i] = names[i], j->trace->stage_ms[i] = ms[i];
  j->trace->nstages = n < API_TRACE_STAGES ? n : API_TRACE_STAGES;
}

static void job_run(struct job *job, struct worker *w) {
  struct image_job *j = (struct image_job *)job;
  struct timing t = {api_now_ms() - job->t_queued, -1, -1, -1, {-1, -1, -1, -1, -1}};
  struct codec_image in = {0}, out = {0};
  const struct codec_image *res = NULL;
  uint8_t *enc = NULL;
  size_t enclen = 0;
  double psnr = NAN;
  char msg[256] = "";
  enum api_error e = process(j, w, &in, &out, &res, &enc, &enclen, &psnr, &t, msg, sizeof(msg));
  if (e == API_GPU_LOST) api_fail(j->ctx); /* the process will stop and be restarted */
  struct api_response *r =
      e == API_OK ? respond(j, res, &enc, enclen, psnr, &t, w->ops->worker_name(w->state))
                  : api_error_response(e, msg);
  if (!r) r = api_error_response(API_OUT_OF_MEMORY, NULL);
  note_stages(j, &t);
  free(enc);
  if (j->out_lent) out.pixels = NULL;
  codec_image_free(&out);
  codec_image_free(&in);
  j->done(j->udata, r);
  free(j);
}

enum api_error job_submit(struct api_ctx *ctx, const struct api_request *req, const uint8_t *image,
                          size_t len, const struct blur_params *p, int convert, api_done_fn done,
                          void *udata) {
  struct image_job *j = calloc(1, sizeof(*j));
  if (!j) return API_OUT_OF_MEMORY;
  *j = (struct image_job){.base = {job_run, 0},
                          .ctx = ctx,
                          .image = image,
                          .len = len,
                          .p = *p,
                          .convert = convert,
                          .want_json = req->accept && strstr(req->accept, "application/json"),
                          .method = CPU_YVV,
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

/* The blur job: runs on a backend worker, off the HTTP threads. It decodes the upload, filters it
 * on the worker's backend, encodes the result and builds the response with its stage times and
 * PSNR, then hands the response to the server's callback. Each stage is timed here, so every
 * backend reports the same names. */
#include "api_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct blur_job {
  struct job base; /* first: the backend sees a struct job */
  struct api_ctx *ctx;
  const uint8_t *image; /* the upload, owned by the server's request */
  size_t len;
  struct blur_params p;
  int want_json;          /* answer with JSON (Accept: application/json) */
  enum cpu_method method; /* the method that ran (auto resolved) */
  double t_received;      /* when the server had the whole body */
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

static void add_headers(struct api_response *r, const struct blur_job *j, const char *backend,
                        double psnr, const struct timing *t) {
  const char *names[9];
  double ms[9];
  char st[384];
  size_t len = 0;
  int n = stages(t, names, ms);
  for (int i = 0; i < n && len < sizeof(st); i++)
    len += snprintf(st + len, sizeof(st) - len, "%s%s;dur=%.3f", i ? ", " : "", names[i], ms[i]);
  api_response_header(r, "Server-Timing", "%s", st);
  if (j->p.psnr && isinf(psnr)) api_response_header(r, "X-PSNR", "inf");
  if (j->p.psnr && !isinf(psnr)) api_response_header(r, "X-PSNR", "%.2f", psnr);
  api_response_header(r, "X-Method", "%s", cpu_method_name(j->method));
  api_response_header(r, "X-Backend", "%s", backend);
}

static json_t *json_body(const struct blur_job *j, const struct codec_image *img,
                         const char *backend, double psnr, const struct timing *t,
                         enum codec_format fmt, const uint8_t *data, size_t len) {
  const char *names[9];
  double ms[9];
  int n = stages(t, names, ms);
  char *b64 = base64_encode(data, len);
  json_t *timing = json_object();
  for (int i = 0; timing && i < n; i++) json_object_set_new(timing, names[i], json_real(ms[i]));
  json_t *o = b64 ? json_pack("{s:s, s:f, s:i, s:i, s:i, s:i, s:s, s:o, s:s, s:s}", "method",
                              cpu_method_name(j->method), "sigma", j->p.sigma, "width", img->width,
                              "height", img->height, "channels", img->channels, "bit_depth",
                              img->depth, "backend", backend, "timing_ms", timing, "format",
                              codec_format_name(fmt), "image", b64)
                  : NULL;
  if (o && j->p.psnr)
    json_object_set_new(o, "psnr_db", isinf(psnr) ? json_null() : json_real(psnr));
  free(b64);
  return o;
}

/* Decodes, filters and encodes; on success *enc holds the encoded image. */
static enum api_error process(struct blur_job *j, struct worker *w, struct codec_image *in,
                              struct codec_image *out, uint8_t **enc, size_t *enclen, double *psnr,
                              struct timing *t, char *msg, size_t msglen) {
  const struct api_config *cfg = &j->ctx->cfg;
  struct codec_limits lim = {cfg->max_width, cfg->max_height, cfg->max_pixels};
  double t0 = api_now_ms();
  enum api_error e = codec_error(codec_decode(j->image, j->len, &lim, in, msg, msglen));
  t->decode = api_now_ms() - t0;
  if (e != API_OK) return e;
  *out = *in;
  out->pixels = malloc(
      cpu_image_bytes(&(struct cpu_image){NULL, in->width, in->height, in->channels, in->depth}));
  if (!out->pixels) return API_OUT_OF_MEMORY;
  struct cpu_image src = {in->pixels, in->width, in->height, in->channels, in->depth};
  struct cpu_image dst = {out->pixels, in->width, in->height, in->channels, in->depth};
  struct cpu_blur b = {j->p.method, j->p.sigma, j->p.truncate, j->p.coeffs};
  if (j->p.method == METHOD_AUTO) b.method = w->ops->auto_method(j->p.sigma, in->width, in->height);
  j->method = b.method;
  struct cpu_accuracy acc;
  e = w->ops->blur(w->state, &b, &src, &dst, j->p.psnr ? &acc : NULL, &t->st);
  *psnr = j->p.psnr ? acc.psnr : NAN;
  if (e != API_OK) return e;
  static const enum codec_format formats[] = {CODEC_NONE, CODEC_PNG, CODEC_JPEG};
  struct codec_encode_opts o = {j->p.format ? formats[j->p.format] : in->format, j->p.quality,
                                j->p.compression};
  out->format = o.format;
  t0 = api_now_ms();
  e = codec_error(codec_encode(out, &o, enc, enclen, msg, msglen));
  t->encode = api_now_ms() - t0;
  return e;
}

static struct api_response *respond(struct blur_job *j, const struct codec_image *out,
                                    uint8_t **enc, size_t len, double psnr, struct timing *t,
                                    const char *backend) {
  t->total = api_now_ms() - j->t_received;
  struct api_response *r;
  if (j->want_json) {
    r = response_json(200, json_body(j, out, backend, psnr, t, out->format, *enc, len));
  } else if ((r = calloc(1, sizeof(*r))) != NULL) {
    r->status = 200;
    r->content_type = codec_mime(out->format);
    r->body = *enc;
    r->len = len;
    *enc = NULL;
  }
  if (r) add_headers(r, j, backend, psnr, t);
  return r;
}

static void blur_run(struct job *job, struct worker *w) {
  struct blur_job *j = (struct blur_job *)job;
  struct timing t = {api_now_ms() - job->t_queued, -1, -1, -1, {-1, -1, -1, -1, -1}};
  struct codec_image in = {0}, out = {0};
  uint8_t *enc = NULL;
  size_t enclen = 0;
  double psnr = NAN;
  char msg[256] = "";
  enum api_error e = process(j, w, &in, &out, &enc, &enclen, &psnr, &t, msg, sizeof(msg));
  if (e == API_GPU_LOST) api_fail(j->ctx); /* the process will stop and be restarted */
  struct api_response *r =
      e == API_OK ? respond(j, &out, &enc, enclen, psnr, &t, w->ops->worker_name(w->state))
                  : api_error_response(e, msg);
  if (!r) r = api_error_response(API_OUT_OF_MEMORY, NULL);
  free(enc);
  codec_image_free(&out);
  codec_image_free(&in);
  j->done(j->udata, r);
  free(j);
}

enum api_error job_submit_blur(struct api_ctx *ctx, const uint8_t *image, size_t len,
                               const struct blur_params *p, int want_json, double t_received,
                               api_done_fn done, void *udata) {
  struct blur_job *j = malloc(sizeof(*j));
  if (!j) return API_OUT_OF_MEMORY;
  *j = (struct blur_job){{blur_run, 0}, ctx,     image,      len,  *p,
                         want_json,     CPU_YVV, t_received, done, udata};
  if (backend_submit(ctx->backend, &j->base) != 0) {
    free(j);
    return ctx->draining ? API_SHUTTING_DOWN : API_QUEUE_FULL;
  }
  return API_OK;
}

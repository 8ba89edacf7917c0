/* fuzz/handler.c: libFuzzer target for the whole request handler (api_handle): routing, the
 * Content-Type, multipart, JSON bodies (the image in base64; CONTENT-TYPE application/json) and
 * parameter parsing, and for requests that get that far a real job on a CPU backend: decoding,
 * every blur method, the PSNR reference and encoding. The input is
 *
 *   METHOD \n URI \n CONTENT-TYPE \n ACCEPT \n body
 *
 * (an empty Content-Type or Accept line means no such header; the Accept line is also the
 * request's Accept-Encoding and If-None-Match), as the server would hand it over:
 * the body piece by piece to api_body_chunk, then, unless refused, whole to api_handle. The context
 * is created once, with the service's limits scaled down so that a job stays fast. When api_handle
 * queues a job, the target waits for the done callback before it returns (and fails if api_handle
 * returned NULL without queuing one). Every request must get a response with a status in 200..599
 * and a body: a JSON error whose status matches, an image that decodes within the limits, or (200
 * only) a text file of the demo page. */
#include "fuzz.h"

#include "../api/api_int.h"

#include <errno.h>
#include <libdeflate.h>
#include <pthread.h>
#include <strings.h>
#include <time.h>

#define MAX_BODY   (1u << 20)
#define MAX_PIXELS 65536
#define MAX_SIDE   1024

static struct api_ctx *handler_ctx; /* created on first use, freed by fuzz_handler_free */

struct handler_wait { /* where the done callback leaves the response */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct api_response *resp;
  int done;
};

static void handler_done(void *udata, struct api_response *resp) {
  struct handler_wait *w = udata;
  pthread_mutex_lock(&w->mu);
  w->resp = resp;
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static struct api_ctx *handler_get_ctx(void) {
  if (!handler_ctx) {
    struct api_config cfg = {.backend = API_BACKEND_CPU,
                             .workers = 1,
                             .queue = 4,
                             .max_body = MAX_BODY,
                             .max_pixels = MAX_PIXELS,
                             .max_width = MAX_SIDE,
                             .max_height = MAX_SIDE};
    char err[256] = "";
    handler_ctx = api_new(&cfg, err, sizeof(err));
    if (!handler_ctx) fprintf(stderr, "fuzz_handler: api_new: %s\n", err);
    FUZZ_CHECK(handler_ctx != NULL);
  }
  return handler_ctx;
}

void fuzz_handler_free(void) {
  api_free(handler_ctx);
  handler_ctx = NULL;
}

/* Waits for the done callback of the job api_handle queued. Every half second it checks that a
 * job is still queued or running: while w->mu is held, done cannot run, so a pending job must be
 * in the backend's counts. When there is none, api_handle returned NULL without queuing anything,
 * and a server would wait for this answer forever. */
static struct api_response *wait_done(struct handler_wait *w) {
  pthread_mutex_lock(&w->mu);
  while (!w->done) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 500 * 1000 * 1000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) != ETIMEDOUT || w->done) continue;
    int queued, running, capacity, workers;
    engine_stats(handler_ctx->engine, &queued, &running, &capacity, &workers);
    if (queued + running == 0)
      fprintf(stderr, "fuzz_handler: api_handle returned NULL, but no job is queued or running: "
                      "the done callback will never come\n");
    FUZZ_CHECK(queued + running > 0);
  }
  struct api_response *resp = w->resp;
  pthread_mutex_unlock(&w->mu);
  return resp;
}

/* The next line of [*p, end) as a new string; *p moves past its '\n'. */
static char *next_line(const uint8_t **p, const uint8_t *end) {
  const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
  char *s = strndup((const char *)*p, (size_t)((nl ? nl : end) - *p));
  *p = nl ? nl + 1 : end;
  return s;
}

/* resp's header name, or NULL. */
static const char *header_of(const struct api_response *resp, const char *name) {
  for (int i = 0; i < resp->nheaders; i++)
    if (strcasecmp(resp->headers[i].name, name) == 0) return resp->headers[i].value;
  return NULL;
}

/* A gzip body inflated (its size from the gzip trailer, at most 16 MiB), malloc'd. */
static uint8_t *gunzip(const uint8_t *gz, size_t len, size_t *out_len) {
  FUZZ_CHECK(len >= 18);
  size_t n = (size_t)gz[len - 4] | (size_t)gz[len - 3] << 8 | (size_t)gz[len - 2] << 16 |
             (size_t)gz[len - 1] << 24;
  FUZZ_CHECK(n > 0 && n <= 16u << 20);
  uint8_t *out = malloc(n);
  struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
  FUZZ_CHECK(out && d &&
             libdeflate_gzip_decompress(d, gz, len, out, n, out_len) == LIBDEFLATE_SUCCESS);
  libdeflate_free_decompressor(d);
  return out;
}

/* Checks resp against what api.h promises; returns its status. The Accept line stands for
 * Accept-Encoding and If-None-Match too, so a 304 (no body) or a gzip body may come back. */
static int check_response(const struct api_response *resp) {
  FUZZ_CHECK(resp != NULL);
  FUZZ_CHECK(resp->status >= 200 && resp->status <= 599);
  FUZZ_CHECK(resp->nheaders >= 0 && resp->nheaders <= API_MAX_HEADERS);
  if (resp->status == 204 || resp->status == 304) { /* OPTIONS' Allow; an ETag that matched */
    FUZZ_CHECK(resp->content_type == NULL && resp->len == 0);
    FUZZ_CHECK(header_of(resp, resp->status == 204 ? "Allow" : "ETag") != NULL);
    return resp->status;
  }
  FUZZ_CHECK(resp->content_type != NULL && resp->body != NULL && resp->len > 0);
  const char *coding = header_of(resp, "Content-Encoding");
  if (coding) {
    FUZZ_CHECK(strcmp(coding, "gzip") == 0 && header_of(resp, "ETag") != NULL);
    struct api_response plain = *resp;
    plain.body = gunzip(resp->body, resp->len, &plain.len);
    plain.nheaders = 0; /* checked as it was before gzip */
    int st = check_response(&plain);
    free(plain.body);
    return st;
  }
  if (strcmp(resp->content_type, "application/json") == 0) {
    json_t *j = json_loadb((const char *)resp->body, resp->len, 0, NULL);
    FUZZ_CHECK(json_is_object(j));
    json_t *err = json_object_get(j, "error");
    FUZZ_CHECK(resp->status == 200 || resp->status == 503 || err != NULL); /* readyz: 503 */
    if (err)
      FUZZ_CHECK(json_integer_value(json_object_get(err, "status")) == resp->status &&
                 json_is_string(json_object_get(err, "code")) &&
                 json_is_string(json_object_get(err, "message")));
    json_decref(j);
  } else if (strncmp(resp->content_type, "text/", 5) == 0) { /* the demo page, /metrics */
    FUZZ_CHECK(resp->status == 200 && memchr(resp->body, 0, resp->len) == NULL);
  } else {
    static const struct codec_limits lim = {MAX_SIDE, MAX_SIDE, MAX_PIXELS};
    struct codec_image img;
    enum codec_format f = codec_sniff(resp->body, resp->len);
    FUZZ_CHECK(resp->status == 200 && f != CODEC_NONE &&
               strcmp(resp->content_type, codec_mime(f)) == 0);
    FUZZ_CHECK(codec_decode(resp->body, resp->len, &lim, &img, NULL, 0) == CODEC_OK);
    codec_image_free(&img);
  }
  return resp->status;
}

/* The body handed to api_body_chunk as the server does, in pieces (of 1 to 64 bytes, by the
 * body's first byte): the error response when a piece is refused, else NULL. */
static struct api_response *body_chunks(struct api_request *req) {
  char msg[256] = "";
  size_t step = req->body_len ? req->body[0] % 64 + 1 : 1;
  for (size_t i = 0; i < req->body_len; i += step) {
    size_t n = req->body_len - i < step ? req->body_len - i : step;
    enum err e = api_body_chunk(handler_get_ctx(), req, req->body + i, n, msg, sizeof(msg));
    if (e != ERR_OK) {
      FUZZ_CHECK(msg[0] != 0);
      return api_error_response(e, msg);
    }
  }
  return NULL;
}

int fuzz_handler(const uint8_t *data, size_t size) {
  const uint8_t *p = data, *end = data + size;
  char *line[4];
  for (int i = 0; i < 4; i++) line[i] = next_line(&p, end);
  struct handler_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0};
  struct api_request req = {.method = line[0],
                            .uri = line[1],
                            .content_type = line[2] && line[2][0] ? line[2] : NULL,
                            .accept = line[3] && line[3][0] ? line[3] : NULL,
                            .accept_encoding = line[3] && line[3][0] ? line[3] : NULL,
                            .if_none_match = line[3] && line[3][0] ? line[3] : NULL,
                            .body = p,
                            .body_len = (size_t)(end - p),
                            .t_received = api_now_ms()};
  struct api_response *resp;
  if (!line[0] || !line[1] || !line[2] || !line[3])
    resp = api_error_response(ERR_OUT_OF_MEMORY, NULL);
  else if (req.body_len > MAX_BODY) /* the server refuses it before the api sees it */
    resp = api_error_response(ERR_BODY_TOO_LARGE, NULL);
  else if ((resp = body_chunks(&req)) != NULL)
    ; /* refused while it streamed in */
  else if ((resp = api_handle(handler_get_ctx(), &req, handler_done, &w)) == NULL)
    resp = wait_done(&w); /* a job was queued */
  int status = check_response(resp);
  api_response_free(resp);
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
  for (int i = 0; i < 4; i++) free(line[i]);
  return status;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  handler_get_ctx();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_handler(data, size);
  return 0;
}
#endif

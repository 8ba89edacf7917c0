/* api: everything between HTTP and pixels. The server hands over a request that it has read
 * completely (method, raw URI, a few headers, the body); the api validates it, answers at once
 * when it can (health, methods, errors) and otherwise queues a job on the backend's workers,
 * which decode, filter and encode, then call the server back with the response.
 *
 * The api knows nothing about sockets or libmicrohttpd; server/ knows nothing about codecs,
 * filters or CUDA. Errors are defined once, in API_ERRORS below. */
#ifndef BLURD_API_H
#define BLURD_API_H

#include <stddef.h>
#include <stdint.h>

#include "../base/errors.h"

enum api_backend_kind { API_BACKEND_AUTO, API_BACKEND_CPU, API_BACKEND_GPU };

/* JPEG on the GPU (nvJPEG): when it loads (auto), required (on: no GPU or no nvJPEG is an error
 * at start), or never (off). */
enum api_gpu_codecs { API_GPU_CODECS_AUTO, API_GPU_CODECS_ON, API_GPU_CODECS_OFF };

/* The default warm-up images. A CPU warm-up is a whole job (its buffers are allocated per job, so
 * what it sets up is the allocator's memory and the code paths), and its time grows with the
 * image, so a 1080p frame keeps the start short. A GPU worker warms what a first request needs
 * (its context, nvJPEG states, kernels and buffers for a 1080p frame); a larger image grows its
 * buffers at its first use, and many workers warming a large image one after the other would
 * take long to be ready (engineering-notes.md, "Notes moved from the code's comments"). */
#define API_WARM_GPU                                                                               \
  { 1920, 1080, 3 }
#define API_WARM_CPU                                                                               \
  { 1920, 1080, 3 }

struct api_config {
  enum api_backend_kind backend;
  int workers; /* job workers (per GPU with the CUDA backend); 0: one per core */
  int queue;   /* jobs that may wait for a worker; more get 503 */
  enum api_gpu_codecs gpu_codecs;
  int jpeg_batch_wait_us; /* the longest a JPEG decode waits for others to batch with */
  int jpeg_decoders;      /* batch threads per GPU, each with a batch of its own (0: 1) */
  int heic_decoders;      /* video decoder sessions per GPU for HEIC; 0: HEIC on the CPU */
  /* Each worker's warm-up image at start: width, height, channels; 0 x 0: none; -1 x -1: the
   * backend's default (API_WARM_GPU or API_WARM_CPU). */
  int warm[3];
  size_t max_body;     /* bytes */
  uint64_t max_pixels; /* width*height */
  uint32_t max_width;  /* pixels */
  uint32_t max_height; /* pixels */
  double max_cost; /* largest estimated work of one request, in seconds of one CPU core; 0: none */
  const char *access_log; /* path of the JSON-lines access log; "-": stderr; NULL or "off": none */
  const char *api_key;    /* requests outside the open routes must carry it; NULL or "": none */
  const char *cors_origins; /* comma-separated origins allowed by CORS, or "*"; NULL or "": none */
  /* Called once, from any thread, when the process must stop and be restarted: status 70 when the
   * GPU failed for good (a sticky CUDA error), 1 when the backend chosen after the start could not
   * start. May be NULL. */
  void (*on_fatal)(void *arg, int status);
  void *on_fatal_arg;
};

#define API_MAX_HEADERS 16

struct api_header {
  char name[32];
  char value[384];
};

struct api_response {
  int status;
  const char *content_type; /* static string; NULL for a response without a body (204) */
  uint8_t *body;            /* owned, malloc'd; may be NULL when len is 0 */
  size_t len;
  int nheaders;
  struct api_header headers[API_MAX_HEADERS];
};

#define API_REQUEST_ID_MAX 128 /* characters of a request id */
#define API_TRACE_STAGES   16  /* stage times one request can carry */

/* The api's notes on one request, read back by api_observe for the metrics and the access log.
 * The server keeps one per request, zeroed, and never looks inside. */
struct api_trace {
  const char *endpoint;  /* static route path, NULL for an unknown path ("other") */
  const char *algorithm; /* static name of the method that ran, NULL when none did */
  int admitted;          /* api_admit counted the request as in flight */
  int nstages;
  const char *stage[API_TRACE_STAGES]; /* static stage names ("decode") */
  double stage_ms[API_TRACE_STAGES];
};

struct api_request {
  const char *method;          /* "GET", "POST", ... */
  const char *uri;             /* raw request target: path, then ?query (percent-encoded) */
  const char *content_type;    /* Content-Type header, or NULL */
  const char *accept;          /* Accept header, or NULL */
  const char *accept_encoding; /* Accept-Encoding header, or NULL */
  const char *if_none_match;   /* If-None-Match header, or NULL */
  const uint8_t *body;         /* the whole body (already limited by the server) */
  size_t body_len;
  double t_received; /* api_now_ms() when the body was complete */
  double deadline;   /* api_now_ms() past which the answer is 503 deadline_exceeded; 0: none */
  int (*client_gone)(void *udata); /* has the client hung up? (skips the work); may be NULL */
  const char *authorization;       /* Authorization header, or NULL */
  const char *api_key;             /* X-API-Key header, or NULL */
  const char *origin;              /* Origin header, or NULL */
  const char *cors_method;         /* Access-Control-Request-Method header (preflights), or NULL */
  const char *id;                  /* the request id (api_request_id), or NULL */
  const char *remote;              /* the client's address as text, or NULL */
  double t_start;                  /* api_now_ms() at the request line */
  struct api_trace *trace;         /* where the api takes notes for api_observe; may be NULL */
  uint64_t body_scan[8];           /* api_body_chunk's state for this body; the server zeroes it */
};

/* What the server knows once it has answered (or given up on) a request. */
struct api_outcome {
  int status;            /* of the response sent; 499 when the client left before one */
  size_t request_bytes;  /* body bytes received */
  size_t response_bytes; /* body bytes of the response */
};

struct api_ctx;

/* Starts the backend and its workers. Returns NULL and writes a sentence to err on failure
 * (e.g. "--backend gpu: no CUDA device is visible"). */
struct api_ctx *api_new(const struct api_config *cfg, char *err, size_t errlen);
/* Finishes queued jobs, joins the workers and frees ctx; ctx may be NULL. */
void api_free(struct api_ctx *ctx);
/* "cpu", or e.g. "cuda:0 " and the device's name. */
const char *api_backend_name(const struct api_ctx *ctx);
/* Whether the GPU failed for good (see on_fatal). */
int api_failed(struct api_ctx *ctx);
/* The cores this process may use: its affinity within its cgroup's CPU quota (cpu_cores). */
int api_cores(void);
/* Whether the process's exit frees the backend's resources faster than api_free would (a GPU's
 * contexts, device memory and codec states, freed one by one in seconds): the caller may then exit
 * without api_free once nothing is in flight. */
int api_leave_to_exit(const struct api_ctx *ctx);
/* The workers still warming up (0 once /readyz may say ready). */
int api_warming(struct api_ctx *ctx);
/* Counts a connection refused before its request was read (over a connection limit, or while
 * draining), answered with e, for /metrics. */
void api_refused(struct api_ctx *ctx, enum err e);
/* Writes one JSON line {"time", "level", "source", "message"} to the access log (nothing when it
 * is off), e.g. level "warn", source "libmicrohttpd": messages of the libraries the server runs
 * on. message may hold any bytes (they are escaped); it is cut at 600 bytes. Any thread. */
void api_log(struct api_ctx *ctx, const char *level, const char *source, const char *message);
/* From now on /readyz answers 503 and new jobs get 503 shutting_down. */
void api_set_draining(struct api_ctx *ctx);

/* The request id for a request whose X-Request-Id header is given (may be NULL): given itself when
 * it is 1 to API_REQUEST_ID_MAX printable ASCII characters, else 16 new hex digits, unique in
 * this process. Writes it to out (API_REQUEST_ID_MAX + 1 bytes). */
void api_request_id(struct api_ctx *ctx, const char *given, char *out);
/* Called once the headers are in (req has no body yet; its trace is zeroed): counts the request
 * as in flight, and returns a response to send at once (401 without the API key, 204 to a CORS
 * preflight, 404 for a preflight of an unknown path), or NULL to read the body and go on with
 * api_handle. The caller owns the response. */
struct api_response *api_admit(struct api_ctx *ctx, const struct api_request *req);
/* Adds the CORS headers req's Origin earns to resp (every response, from the api or not). */
void api_finish(struct api_ctx *ctx, const struct api_request *req, struct api_response *resp);
/* Called once per admitted request when it is answered: counts it in the metrics, records its
 * stage times and writes its access-log line. */
void api_observe(struct api_ctx *ctx, const struct api_request *req, const struct api_outcome *o);

/* Called by the server with each piece of an admitted request's body as it arrives, in order,
 * before api_handle: checks what can be checked while the body streams in (a JSON body's size,
 * element count and depth outside its image). Returns ERR_OK to go on, or an error with a
 * sentence in msg: the server then stores no more of the body, reads it to its end, and answers
 * api_error_response(e, msg) instead of calling api_handle. */
enum err api_body_chunk(struct api_ctx *ctx, struct api_request *req, const uint8_t *data, size_t n,
                        char *msg, size_t msglen);

/* Whether a request for uri with this method is a probe (GET or HEAD of /healthz, /readyz or
 * /metrics): the server answers probes even on a connection over its limits, so that a liveness
 * check never fails because clients hold every connection. */
int api_is_probe(const char *method, const char *uri);

typedef void (*api_done_fn)(void *udata, struct api_response *resp);

/* Handles req. Returns the response when it is ready at once (the caller owns it), or NULL when
 * a job was queued: done(udata, resp) is then called exactly once, from a worker thread, and
 * the callee owns resp. req and everything it points to must stay valid until then. */
struct api_response *api_handle(struct api_ctx *ctx, const struct api_request *req,
                                api_done_fn done, void *udata);

/* A JSON error response for e; msg may be NULL for e's default sentence. */
struct api_response *api_error_response(enum err e, const char *msg);
/* Frees resp and its body; resp may be NULL. */
void api_response_free(struct api_response *resp);
/* Adds a header; returns -1 when there is no room. */
int api_response_header(struct api_response *resp, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The path of route i (0, 1, ...) with the HTTP method it takes in *method, or NULL past the
 * last route: the routes api_handle serves, for tests and tools. */
const char *api_route(int i, const char **method);
/* The HTTP API reference in Markdown (docs/api.md), built from the tables /openapi.json is built
 * from: the routes, each endpoint's parameters and API_ERRORS. Returns a malloc'd string (the
 * caller frees it), or NULL when out of memory. */
char *api_reference_markdown(void);

/* ---- file names and media types, from the codecs' format table (formats.c) ---- */

/* The output format a file name's extension names ("jpeg" for out.JPG), or NULL. */
const char *api_format_of_path(const char *path);
/* The media type of the image file body, as a client would send it ("image/png"), or
 * application/octet-stream when no format reads it. */
const char *api_media_type(const uint8_t *body, size_t len);
/* The extension for a file of media type media ("jpg"); raw bytes' for one of no format. */
const char *api_extension_of(const char *media);
/* The extensions of the files the command line writes, as ".png, .jpg or .npy", into buf. */
char *api_output_extensions(char *buf, size_t n);

/* The backends compiled in, as "cpu" or "cpu,cuda". */
const char *api_backends_built(void);

/* Monotonic clock in milliseconds. */
double api_now_ms(void);

#endif

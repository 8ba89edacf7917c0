/* Internals shared by the files of api/: parameter specs and parsing (params.c), the operations'
 * descriptors and their table (op.h, ops/), the multipart/form-data parser (multipart.c), the
 * streaming check of JSON bodies (bodyscan.c), uploads (upload.c), the backend's queue and
 * workers (queue.c) and its verbs (backend_cpu.c, backend_gpu.c), jobs (job.c), response helpers
 * (response.c), the route table (routes.c) and the answers (handler.c), the OpenAPI description
 * built from them (openapi.c), the demo page's files (web.c), metrics (metrics.c), request ids
 * and the access log (accesslog.c), the API key and CORS (guard.c), the context's life cycle
 * (lifecycle.c) and state (ctx.c). Nothing outside api/ includes this header. */
#ifndef BLURD_API_INT_H
#define BLURD_API_INT_H

#include "api.h"

#include "../codecs/codecs.h"
#include "../cpu/cpu.h"

#include <jansson.h>

/* ---- parameters ---- */

enum param_type { PT_NUMBER, PT_INT, PT_BOOL, PT_ENUM, PT_KERNEL, PT_REGIONS };

struct param_spec {
  const char *name;
  enum param_type type;
  double min, max;            /* PT_NUMBER and PT_INT: the accepted range, inclusive */
  const char *const *choices; /* PT_ENUM: the accepted words; PT_KERNEL: the kernel names */
  const char *def;  /* the default, as a client would write it; NULL: required; "": optional,
                       with no default (the value stays zero; the endpoint's check decides) */
  size_t offset;    /* where the value goes: a double for PT_NUMBER, a struct api_kernel for
                       PT_KERNEL, a struct api_regions for PT_REGIONS, else an int */
  const char *doc;  /* one sentence for /methods */
  unsigned methods; /* bit m set: applies to method m; 0: to every method */
};

struct endpoint {
  const char *path; /* "/blur" */
  const struct param_spec *params;
  int nparams;      /* at most MAX_PARAMS */
  int method_param; /* index of the parameter that picks the method, or -1 */
  int nmethods;     /* values of that parameter that name one method (the rest: auto) */
  int given_offset; /* where params_parse stores an unsigned mask of the parameters the request
                       gave (bit i: params[i]), or -1 */
  /* Checks that need several parameters (threewise's radius) and derives values from them,
   * after every parameter is parsed. Returns API_OK, or an error with a sentence in msg. NULL:
   * nothing to check. */
  enum api_error (*check)(void *params, char *msg, size_t msglen);
  /* The request's estimated work in seconds of one CPU core for an image of shape s (from its
   * header): the filter stage and the PSNR reference, not the decode or encode, from the
   * per-sample times measured in docs/engineering-notes.md. NULL: no filter (/convert). */
  double (*cost)(const void *params, const struct codec_shape *s);
};

#define MAX_PARAMS 32

/* The endpoints of the operations (one file each in api/ops/), for the tests and fuzzers that parse
 * their parameters; everything else reaches them through api_ops (op.h). */
extern const struct endpoint api_blur_endpoint;
extern const struct endpoint api_convert_endpoint; /* format, quality, lossless, compression */
extern const struct endpoint api_variance_endpoint;
extern const struct endpoint api_contrast_endpoint;
extern const struct endpoint api_convolve_endpoint;
extern const struct endpoint api_sharpen_endpoint;

/* The words of the output parameters format and of the booleans (params.c). */
extern const char *const params_format_choices[];
extern const char *const params_bool_choices[];
extern const char *const params_colorspace_choices[]; /* colorspace: keep, srgb */

struct stage_times { /* milliseconds; negative when the backend has no such stage */
  double filter;     /* the method itself (on a GPU: upload and kernels) */
  double reference;  /* exact reference and PSNR */
  double upload;     /* host to device, when the image was decoded on the host */
  double kernel;     /* device compute, CUDA events */
  double download;   /* device to host, when a host encoder needs the pixels */
};

#define PARAMS_JSON_MAX 16384 /* bytes of the params field */

/* Parses the query string (percent-encoded, without '?') and the optional JSON object text of
 * the params field into out, the endpoint's parameter struct, filling defaults. Returns API_OK,
 * or an error with a sentence in msg. */
/* ep's parameter called name, or NULL. */
const struct param_spec *params_spec(const struct endpoint *ep, const char *name);
enum api_error params_parse(const struct endpoint *ep, const char *query, const char *json,
                            size_t json_len, void *out, char *msg, size_t msglen);
/* params_parse with the JSON object already parsed: obj (borrowed; NULL: none), whose every key
 * must be a parameter; where names it in messages ("params", "the JSON body"). */
enum api_error params_parse_object(const struct endpoint *ep, const char *query, json_t *obj,
                                   const char *where, void *out, char *msg, size_t msglen);
/* Parses text as a JSON object (duplicate keys refused) into *out (new reference). Returns API_OK,
 * or API_BAD_JSON with a sentence in msg that begins with what ("The JSON body") and gives
 * jansson's line and column. */
enum api_error params_load_json(const char *what, const char *text, size_t len, json_t **out,
                                char *msg, size_t msglen);
/* The endpoint's parameters that apply to method m (all of them when m < 0) as a JSON array
 * for /methods (new reference). */
json_t *params_describe(const struct endpoint *ep, int m);
/* Percent-decodes s[0..len) into a new string ('+' is a space). Returns NULL on a bad escape
 * or a NUL byte, or when out of memory. */
char *params_unescape(const char *s, size_t len);

/* ---- operations: descriptors and their table ---- */

struct api_ctx;
#include "op.h"

/* ---- the streaming check of a JSON body (bodyscan.c) ---- */

/* Limits of a JSON body outside the value of its top-level "image" string. A 31x31 custom kernel
 * written with 17 significant digits a weight, as an array of indented rows, takes about 30 KB,
 * and 994 values; regions take 321. */
#define BODYSCAN_BYTES_MAX  65536
#define BODYSCAN_VALUES_MAX 4096
#define BODYSCAN_DEPTH_MAX  8 /* the parameters need 3: {"kernel": [[...]]} */

struct bodyscan {     /* zeroed at the start of a body */
  uint64_t bytes;     /* bytes counted (all but the image string's) */
  uint32_t values;    /* values started */
  uint32_t objects;   /* bit d: the container at depth d is an object */
  uint8_t mode;       /* api_body_chunk: 0 undecided, 1 a JSON body, 2 not JSON */
  uint8_t state;      /* bodyscan.c's BS_* */
  uint8_t depth;      /* containers open */
  uint8_t key;        /* a string here would be an object's key */
  uint8_t in_key;     /* in a key string */
  uint8_t escape;     /* after a backslash in a string */
  uint8_t image;      /* in the value string of the top-level "image" */
  uint8_t image_next; /* the key just read is the top-level "image" */
  int8_t match;       /* bytes of "image" the key matches so far; -1: not it */
};

/* Feeds the next n bytes of a JSON body to s. Returns API_OK, or API_BODY_TOO_LARGE (bytes) or
 * API_BAD_JSON (values, depth) with a sentence in msg. */
enum api_error bodyscan_feed(struct bodyscan *s, const uint8_t *data, size_t n, char *msg,
                             size_t msglen);

/* ---- multipart/form-data ---- */

struct mp_part {
  const char *name; /* the form field name, NUL-terminated copy (owned by the part list) */
  const uint8_t *data;
  size_t len;
};

#define MP_MAX_PARTS 8

/* Splits body into parts using the boundary in content_type. Part data point into body; names
 * are malloc'd: release them with multipart_free(). Returns API_OK or API_BAD_MULTIPART with a
 * sentence in msg. */
enum api_error multipart_parse(const char *content_type, const uint8_t *body, size_t len,
                               struct mp_part *parts, int *nparts, char *msg, size_t msglen);
void multipart_free(struct mp_part *parts, int nparts);

/* ---- backend: a job queue and workers ---- */

/* The API error for a codec status. */
enum api_error backend_codec_error(enum codec_status s);

/* A backend runs a job's steps on its workers: decode, an operation, encode. Each backend fills
 * these few verbs (backend_cpu.c, backend_gpu.c); the queue and its workers (queue.c) know no
 * more of it. The CPU backend works on host buffers. A backend with keeps_images (CUDA) keeps a
 * job's image on its device from one step to the next: a codec_image whose pixel pointer is NULL
 * is then the worker's image, valid until its next job. */
struct backend_ops {
  const char *kind; /* "cpu" or "cuda" */
  /* Sets up worker index's state (a stream, buffers). Returns 0, or -1 with err filled. */
  int (*worker_new)(void *shared, int index, void **state, char *err, size_t errlen);
  void (*worker_free)(void *state);
  /* Called on the worker's thread around each job; may be NULL. */
  void (*job_begin)(void *state);
  void (*job_end)(void *state);
  /* Decodes buf into img with codec_decode's checks, limits and sentences; the pixels may stay
   * on the device (img->pixels NULL). *codec: the decoder that ran ("nvjpeg-hw", "libpng"). */
  enum api_error (*decode)(void *state, const uint8_t *buf, size_t len,
                           const struct codec_limits *lim, struct codec_image *img,
                           const char **codec, char *msg, size_t msglen);
  /* Runs op's compute for this backend (op->cpu or op->gpu) with params on io. Errors as
   * op_compute_fn's. */
  enum api_error (*run)(void *state, const struct api_op *op, const void *params, struct op_io *io);
  /* Encodes img, wherever its pixels are, into *out (malloc'd; the caller frees) of *len bytes;
   * *codec: the encoder that ran; *download: ms to bring a device image to a host encoder, or -1.
   */
  enum api_error (*encode)(void *state, const struct codec_image *img,
                           const struct codec_encode_opts *o, uint8_t **out, size_t *len,
                           const char **codec, double *download, char *msg, size_t msglen);
  /* Gives img host pixels: when they are on the device, a copy in a new malloc'd buffer (the
   * caller frees it). */
  enum api_error (*to_host)(void *state, struct codec_image *img);
  /* The method `auto` stands for on this backend, for this sigma and image size. */
  enum cpu_method (*auto_method)(double sigma, int width, int height);
  /* The name clients see in X-Backend for work done by this worker. */
  const char *(*worker_name)(void *state);
  int keeps_images;  /* images stay on the device between steps (see above) */
  int leave_to_exit; /* the process's exit frees its workers faster than worker_free would */
};

extern const struct backend_ops backend_cpu_ops; /* backend_cpu.c */
/* The CPU backend's shared state: a pool of n threads (NULL when it cannot start). */
void *backend_cpu_shared(int n);
void backend_cpu_shared_free(void *shared);

/* The host codecs every backend uses for what stays on the host (backend_cpu.c): the codec's
 * name for format f ("libpng"), and codec_decode and codec_encode with the api's errors. */
const char *backend_host_codec(enum codec_format f);
enum api_error backend_host_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                   struct codec_image *img, const char **codec, char *msg,
                                   size_t msglen);
enum api_error backend_host_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                                   uint8_t **out, size_t *len, const char **codec, char *msg,
                                   size_t msglen);

#ifdef BLURD_CUDA
/* The GPU backend (backend_gpu.c) as the queue starts it: what every GPU worker shares. */
struct backend_gpu_shared {
  int ndev;               /* visible devices; worker i uses device i % ndev */
  long fault_at;          /* tests only (BLURD_TEST_GPU_FAULT=N): GPU job N faults; 0: never */
  long jobs;              /* GPU jobs started (atomic) */
  struct gpu_jpeg **jpeg; /* ndev JPEG decoders when JPEG runs on the GPU, else NULL */
};
extern const struct backend_ops backend_gpu_ops;
/* Device bytes GPU worker state holds, as of its last job (for /metrics). */
size_t backend_gpu_worker_bytes(void *state);
#endif

struct worker {
  const struct backend_ops *ops;
  void *state; /* ops' per-worker state */
  int index;
};

struct job;
typedef void (*job_fn)(struct job *job, struct worker *w);

struct job {
  job_fn run;      /* called once on a worker thread; owns the job from then on */
  double t_queued; /* api_now_ms() at submission */
};

struct backend;

struct backend *backend_new(const struct api_config *cfg, char *err, size_t errlen);
/* Queues job. Returns 0, or -1 when the queue is full (the job is not taken). */
int backend_submit(struct backend *b, struct job *job);
/* Runs the jobs still queued, joins the workers and frees b; b may be NULL. */
void backend_free(struct backend *b);
const char *backend_name(const struct backend *b);
/* Whether the exit frees b's workers faster than backend_free (backend_ops.leave_to_exit). */
int backend_leave_to_exit(const struct backend *b);
/* Workers still warming up (they take jobs once warm). */
int backend_warming(struct backend *b);
/* Workers made and warm, which take jobs: at first fewer than backend_stats' workers, the later
 * ones being made after the backend is ready (queue.c). */
int backend_workers_ready(struct backend *b);
/* Jobs waiting, jobs running, queue capacity, workers. */
void backend_stats(struct backend *b, int *queued, int *running, int *capacity, int *workers);
/* GPU memory of device index dev (0 .. devices-1): bytes the workers' contexts hold, and the
 * device's used and total bytes (all processes). Returns 0, or -1 when there is no such device
 * (always for the CPU backend). */
int backend_gpu_memory(struct backend *b, int dev, size_t *held, size_t *used, size_t *total);
/* The devices the backend uses, as a JSON array (new reference); empty for the CPU. */
json_t *backend_devices(struct backend *b);
/* The codecs the backend runs, for /readyz and /methods (new reference): the JPEG decoder and
 * encoder, PNG's, whether JPEG runs on the GPU, and if not, why. */
json_t *backend_codecs(struct backend *b);
/* Whether JPEG is decoded and encoded on the GPU; *decoder: the JPEG decoder's name. */
int backend_gpu_codecs(struct backend *b, const char **decoder);

#define BATCH_BUCKETS 8 /* GPU_JPEG_BATCH_BUCKETS (queue.c checks that they agree) */

struct batch_stats { /* JPEG decode batches of one device (gpu_jpeg_stats) */
  unsigned long long batches, images, single;
  unsigned long long hist[BATCH_BUCKETS]; /* batches of size <= 1, 2, 4, ... 64, then more */
};

/* The decode batches of device dev. Returns 0, or -1 when the device decodes no JPEG. */
int backend_batch_stats(struct backend *b, int dev, struct batch_stats *s);

/* ---- jobs ---- */

/* Queues the image job of req on ctx's backend: decode, op's compute, encode. The response goes
 * to done(udata). owned: NULL when image lies in req's body, else image's malloc'd buffer, which
 * the job frees (on API_OK only: otherwise it stays the caller's). params: op's parameters,
 * copied (op->params_size bytes); NULL when image is a JSON body not yet parsed: the job parses
 * it first, on its worker (upload_json). Returns API_OK, or API_QUEUE_FULL / API_SHUTTING_DOWN /
 * API_OUT_OF_MEMORY (nothing was queued). */
enum api_error job_submit(struct api_ctx *ctx, const struct api_request *req, const uint8_t *image,
                          size_t len, uint8_t *owned, const struct api_op *op, const void *params,
                          api_done_fn done, void *udata);

/* ---- uploads (upload.c) ---- */

struct upload { /* where the image and the params are in the body */
  const uint8_t *image;
  size_t len;
  const char *json; /* the params field, or NULL */
  size_t json_len;
  json_t *object; /* a JSON body, its image taken out: the parameters (owned), or NULL */
  json_t *base64; /* a JSON body's image value (owned), or NULL when it has none */
  uint8_t *owned; /* the image decoded from base64 (owned until handed to the job), or NULL */
};

/* Does the media type of content_type (before any ';') equal type? */
int upload_media_is(const char *content_type, const char *type);
/* Finds the image and the params in req's body, by its Content-Type, into u (zeroed first; free
 * it with upload_free). Returns API_OK, or an error with a sentence in msg. */
enum api_error upload_read(const struct api_request *req, struct upload *u, char *msg,
                           size_t msglen);
void upload_free(struct upload *u);
/* The checks of an upload once its parameters are in params (ep's struct): it carries an image,
 * PNG, JPEG or WebP, whose estimated cost is within the budget (op_budget). Returns NULL to
 * go on, or the error response (the caller owns it). */
struct api_response *upload_check(struct api_ctx *ctx, const struct endpoint *ep,
                                  const void *params, const uint8_t *image, size_t len);
/* A JSON body's parse, run by its job on the worker: its parameters (and the query string's, query
 * without '?') into params (ep's struct), its base64 image decoded into *owned (malloc'd, the
 * caller frees it) of *len bytes, then upload_check. Returns NULL, or the error response with the
 * statuses and sentences a multipart upload gets. */
struct api_response *upload_json(struct api_ctx *ctx, const struct endpoint *ep, const char *query,
                                 const uint8_t *body, size_t body_len, void *params,
                                 uint8_t **owned, size_t *len);

/* ---- content negotiation (negotiate.c) ---- */

/* The q-value, in thousandths (0..1000), that the Accept header accept (NULL: none) gives to the
 * media type type ("image/png"): that of the most specific range that matches it. */
int api_accept_q(const char *accept, const char *type);
/* Which answer an image endpoint whose result is of image_type gives under accept: API_OK with
 * *json 0 for the image (also on a tie) or 1 for the JSON object; API_NOT_ACCEPTABLE, with a
 * sentence in msg, when neither is acceptable. */
enum api_error api_negotiate(const char *accept, const char *image_type, int *json, char *msg,
                             size_t msglen);

/* ---- metrics ---- */

struct metrics;

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);
/* Counts one answered request; endpoint and algorithm are static strings or NULL. */
void metrics_count(struct metrics *m, const char *endpoint, const char *algorithm, int status);
/* Records one stage time (ms) of a job; stage is a static string. */
void metrics_stage(struct metrics *m, const char *stage, double ms);
/* Requests admitted and not yet answered: delta +1 or -1. */
void metrics_in_flight(struct metrics *m, int delta);
/* A connection refused unread, answered with e. */
void metrics_refused(struct metrics *m, enum api_error e);
/* GET /metrics: the Prometheus text exposition of ctx. */
struct api_response *metrics_response(struct api_ctx *ctx);

/* ---- the access log ---- */

/* Opens the log that path names (see api_config.access_log). Returns its descriptor, -1 for no
 * log, or -2 with a sentence in err. */
int access_log_open(const char *path, char *err, size_t errlen);
/* Closes fd unless it is stderr or none. */
void access_log_close(int fd);

/* ---- the context ---- */

struct api_ctx {
  struct api_config cfg;
  struct backend *backend;
  struct metrics *metrics;
  int log_fd;        /* the access log, or -1 */
  uint64_t id_seed;  /* random, per process: generated request ids differ between runs */
  uint64_t id_count; /* request ids generated (atomic) */
  char *api_key;     /* owned copy, or NULL */
  char *cors;        /* owned copy of the allowed origins, or NULL */
  int draining;      /* atomic */
  int failed;        /* atomic: the GPU is lost */
};

/* Marks the GPU as lost and tells the server (once). */
void api_fail(struct api_ctx *ctx);

/* ---- routes ---- */

struct route;

/* The parameters every route_fn takes. */
#define ROUTE_ARGS                                                                                 \
  struct api_ctx *ctx, const struct route *r, const struct api_request *req, const char *query,    \
      api_done_fn done, void *udata

/* Answers one request on route r: the response, or NULL when a job was queued (see api_handle).
 * query is the raw query string without '?' ("" when none). */
typedef struct api_response *(*route_fn)(struct api_ctx *ctx, const struct route *r,
                                         const struct api_request *req, const char *query,
                                         api_done_fn done, void *udata);

/* A row of the route table: it dispatches requests and is all that /openapi.json knows, so a new
 * row is described with no other change. */
struct route {
  const char *path;          /* "/blur" */
  const char *method;        /* the HTTP method it takes (GET routes take HEAD too) */
  const char *summary;       /* one sentence for /openapi.json */
  const struct endpoint *ep; /* its parameters (query string, and params for uploads), or NULL */
  const char *produces;      /* media type of its 200; NULL: an image upload answered with the
                                image, or with JSON for Accept: application/json (job.c) */
  unsigned flags;            /* ROUTE_* */
  route_fn answer;
  const struct api_op *op; /* image endpoints: the operation; NULL for the others */
};

#define ROUTE_UNREADY 1u /* also answers 503 with the same document (/readyz) */
#define ROUTE_OPEN    2u /* answers without the API key: probes, the demo page, the description */
#define ROUTE_PROBE   4u /* health and metrics: served even on a connection over the limits */

/* Every route: the fixed ones (handler.c), then one per operation of api_ops; *n gets their
 * number. Built once, on first use. */
const struct route *route_table(int *n);

/* The answers of handler.c: /healthz, /readyz, /metrics, /methods, and every image endpoint
 * (r->op's upload, queued as a job). */
struct api_response *handler_healthz(ROUTE_ARGS);
struct api_response *handler_readyz(ROUTE_ARGS);
struct api_response *handler_metrics(ROUTE_ARGS);
struct api_response *handler_methods(ROUTE_ARGS);
struct api_response *handler_image(ROUTE_ARGS);

/* The route whose path is the path of uri (before any '?'), or NULL. */
const struct route *route_find(const char *uri);
/* Length of the path of uri (before any '?'). */
size_t route_path_len(const char *uri);

/* ---- /openapi.json and the demo page ---- */

/* The OpenAPI 3.1 description of the n routes r (route_table's) as a JSON object (new
 * reference), or NULL when out of memory. */
json_t *openapi_document(const struct route *r, int n);
/* docs/api.md from the same routes: a malloc'd string, or NULL (api_reference_markdown). */
char *openapi_markdown(const struct route *r, int n);

struct web_asset {           /* a file of web/, embedded at build time */
  const char *name;          /* "index.html" */
  const unsigned char *data; /* its bytes */
  size_t len;
};

/* Generated from web/ by scripts/embed-web.sh; the last entry has a NULL name. */
extern const struct web_asset api_web_assets[];

/* The route that serves r's file of web/ ("/" is index.html): 200 with the file, its media type
 * and a Content-Security-Policy that allows only this origin. */
struct api_response *web_answer(struct api_ctx *ctx, const struct route *r,
                                const struct api_request *req, const char *query, api_done_fn done,
                                void *udata);

/* ---- responses ---- */

/* A response with no body (204); NULL when out of memory. */
struct api_response *response_empty(int status);
/* api_error_response with the members of the object fields (stolen; may be NULL) added to the
 * error object ("estimate_s": 212.4). */
struct api_response *response_error(enum api_error e, const char *msg, json_t *fields);
/* A response with a JSON body (takes a reference to body's ownership: body is decref'd). */
struct api_response *response_json(int status, json_t *body);
/* Base64 (RFC 4648, padded) of data as a new NUL-terminated string, or NULL. */
char *base64_encode(const uint8_t *data, size_t len);
/* Decodes the image string of a JSON body, s[0..len): standard base64 (RFC 4648: A-Z, a-z, 0-9,
 * '+', '/'), after an optional data: URL prefix ("data:image/png;base64,"). The '=' padding may
 * be left out, but when present it must be complete and end the string; line breaks (CR, LF, as
 * in MIME's 76-column lines) are skipped; any other character is an error. Returns API_OK with
 * the bytes in *out (malloc'd, of 3/4 of the base64's length; the caller frees it; NULL when
 * there are none) and their count in *outlen; API_BAD_IMAGE_ENCODING with a sentence in msg that
 * gives the byte offset in s and the character where it broke; or API_OUT_OF_MEMORY. */
enum api_error base64_decode(const char *s, size_t len, uint8_t **out, size_t *outlen, char *msg,
                             size_t msglen);

#endif

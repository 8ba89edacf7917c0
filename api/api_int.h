/* Internals shared by the files of api/: parameter tables and parsing (params.c), the
 * multipart/form-data parser (multipart.c), the backend with its job queue and workers
 * (backend.c), jobs (job.c), response helpers (response.c), routes (handler.c), metrics
 * (metrics.c), request ids and the access log (accesslog.c), the API key and CORS (guard.c).
 * Nothing outside api/ includes this header. */
#ifndef BLURD_API_INT_H
#define BLURD_API_INT_H

#include "api.h"

#include "../codecs/codecs.h"
#include "../cpu/cpu.h"

#include <jansson.h>

/* ---- parameters ---- */

enum param_type { PT_NUMBER, PT_INT, PT_BOOL, PT_ENUM };

struct param_spec {
  const char *name;
  enum param_type type;
  double min, max;            /* PT_NUMBER and PT_INT: the accepted range, inclusive */
  const char *const *choices; /* PT_ENUM: the accepted words, NULL-terminated */
  const char *def;            /* the default, as a client would write it; NULL: required */
  size_t offset;              /* where the value goes: a double for PT_NUMBER, else an int */
  const char *doc;            /* one sentence for /methods */
  unsigned methods;           /* bit m set: applies to method m; 0: to every method */
};

struct endpoint {
  const char *path; /* "/blur" */
  const struct param_spec *params;
  int nparams;      /* at most MAX_PARAMS */
  int method_param; /* index of the parameter that picks the method, or -1 */
  int nmethods;     /* values of that parameter that name one method (the rest: auto) */
};

#define MAX_PARAMS 32

#define METHOD_AUTO CPU_NMETHODS /* the value of blur_params.method for method=auto */

struct blur_params {
  int method;      /* enum cpu_method, or METHOD_AUTO */
  double sigma;    /* pixels */
  double truncate; /* fir family and separable: kernel radius in sigmas */
  int coeffs;      /* enum cpu_yvv_set */
  int format;      /* index in format_choices: 0 the input's, 1 png, 2 jpeg */
  int quality;     /* JPEG quality */
  int compression; /* PNG zlib level */
  int psnr;        /* compute the PSNR against the exact reference */
};

extern const struct endpoint api_blur_endpoint;
extern const struct endpoint api_convert_endpoint; /* format, quality, compression */

#define PARAMS_JSON_MAX 16384 /* bytes of the params field */

/* Parses the query string (percent-encoded, without '?') and the optional JSON object text of
 * the params field into out, the endpoint's parameter struct, filling defaults. Returns API_OK,
 * or an error with a sentence in msg. */
enum api_error params_parse(const struct endpoint *ep, const char *query, const char *json,
                            size_t json_len, void *out, char *msg, size_t msglen);
/* The endpoint's parameters that apply to method m (all of them when m < 0) as a JSON array
 * for /methods (new reference). */
json_t *params_describe(const struct endpoint *ep, int m);
/* Percent-decodes s[0..len) into a new string ('+' is a space). Returns NULL on a bad escape
 * or a NUL byte, or when out of memory. */
char *params_unescape(const char *s, size_t len);

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

struct stage_times { /* milliseconds; negative when the backend has no such stage */
  double filter;     /* the method itself (on a GPU: all of its kernels) */
  double reference;  /* exact reference and PSNR */
  double upload;     /* host to device */
  double kernel;     /* device compute, CUDA events */
  double download;   /* device to host */
};

struct backend_ops {
  const char *kind; /* "cpu" or "cuda" */
  /* Sets up worker index's state (a stream, buffers). Returns 0, or -1 with err filled. */
  int (*worker_new)(void *shared, int index, void **state, char *err, size_t errlen);
  void (*worker_free)(void *state);
  /* Blurs src into dst (same shape; with lends_output dst->data is NULL and comes back set to a
   * buffer of the worker's, valid until its next call); acc may be NULL (no reference). Returns
   * API_OK; API_OUT_OF_MEMORY or API_GPU_ERROR (this job failed, the service carries on); or
   * API_GPU_LOST (the device is lost: the process must restart). */
  enum api_error (*blur)(void *state, const struct cpu_blur *b, const struct cpu_image *src,
                         struct cpu_image *dst, struct cpu_accuracy *acc, struct stage_times *t);
  /* The method `auto` stands for on this backend, for this sigma and image size. */
  enum cpu_method (*auto_method)(double sigma, int width, int height);
  /* The name clients see in X-Backend for work done by this worker. */
  const char *(*worker_name)(void *state);
  int lends_output; /* blur hands out its own buffer (the GPU's pinned staging): no copy */
};

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
/* Jobs waiting, jobs running, queue capacity, workers. */
void backend_stats(struct backend *b, int *queued, int *running, int *capacity, int *workers);
/* GPU memory of device index dev (0 .. devices-1): bytes the workers' contexts hold, and the
 * device's used and total bytes (all processes). Returns 0, or -1 when there is no such device
 * (always for the CPU backend). */
int backend_gpu_memory(struct backend *b, int dev, size_t *held, size_t *used, size_t *total);
/* The devices the backend uses, as a JSON array (new reference); empty for the CPU. */
json_t *backend_devices(struct backend *b);
/* The backends this build has: "cpu", and "cuda" when compiled with nvcc. */
json_t *backend_kinds(void);

/* ---- jobs ---- */

/* Queues the image job of req on ctx's backend: a blur with p, or with convert set a decode
 * and encode only (p's format, quality and compression). The response goes to done(udata).
 * Returns API_OK, or API_QUEUE_FULL / API_SHUTTING_DOWN / API_OUT_OF_MEMORY (nothing was
 * queued). */
enum api_error job_submit(struct api_ctx *ctx, const struct api_request *req, const uint8_t *image,
                          size_t len, const struct blur_params *p, int convert, api_done_fn done,
                          void *udata);

/* ---- routes ---- */

struct route {
  const char *path;   /* "/blur" */
  const char *method; /* the HTTP method it takes (GET routes take HEAD too) */
};

/* The route whose path is the path of uri (before any '?'), or NULL. */
const struct route *route_find(const char *uri);
/* Length of the path of uri (before any '?'). */
size_t route_path_len(const char *uri);

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

/* ---- responses ---- */

/* A response with no body (204); NULL when out of memory. */
struct api_response *response_empty(int status);
/* A response with a JSON body (takes a reference to body's ownership: body is decref'd). */
struct api_response *response_json(int status, json_t *body);
/* Base64 (RFC 4648, padded) of data as a new NUL-terminated string, or NULL. */
char *base64_encode(const uint8_t *data, size_t len);

#endif

/* Internals shared by the files of api/: the context, parameter specs and parsing, uploads, jobs,
 * responses, routes, metrics and the access log. The operations' descriptors are in op.h.
 * Nothing outside api/ includes this header. */
#ifndef BLURD_API_INT_H
#define BLURD_API_INT_H

#include "api.h"

#include "../codecs/codecs.h"
#include "../cpu/cpu.h"
#include "../engine/engine.h"
#include "../http/http.h"

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
   * after every parameter is parsed. Returns ERR_OK, or an error with a sentence in msg. NULL:
   * nothing to check. */
  enum err (*check)(void *params, char *msg, size_t msglen);
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
/* ---- what the api reads from the format table (formats.c, made before main) ---- */
extern const char *params_format_choices[]; /* format=: "input", then the pictures written */
extern const char *params_map_formats[];    /* a map's format=: the outputs exact for 16 bits */
extern char params_map_default[];           /* its default: the first of them (a picture) */
extern char params_format_doc[], params_quality_doc[], params_lossless_doc[];
/* Whether a raw upload may say it is content_type: a format's media type, or octet-stream. */
int api_upload_type_ok(const char *content_type);
/* The format format=input answers an upload in input with under the Accept header accept (NULL:
 * none): the input's own (or the one its format answers as), unless Accept gives another output
 * a higher q. */
enum codec_format api_output_format(enum codec_format input, const char *accept);
extern const char *const params_bool_choices[];
extern const char *const params_colorspace_choices[]; /* colorspace: keep, srgb */

#define PARAMS_JSON_MAX 16384 /* bytes of the params field */

/* Parses the query string (percent-encoded, without '?') and the optional JSON object text of
 * the params field into out, the endpoint's parameter struct, filling defaults. Returns ERR_OK,
 * or an error with a sentence in msg. */
/* ep's parameter called name, or NULL. */
const struct param_spec *params_spec(const struct endpoint *ep, const char *name);
enum err params_parse(const struct endpoint *ep, const char *query, const char *json,
                      size_t json_len, void *out, char *msg, size_t msglen);
/* params_parse with the JSON object already parsed: obj (borrowed; NULL: none), whose every key
 * must be a parameter; where names it in messages ("params", "the JSON body"). */
enum err params_parse_object(const struct endpoint *ep, const char *query, json_t *obj,
                             const char *where, void *out, char *msg, size_t msglen);
/* Parses text as a JSON object (duplicate keys refused) into *out (new reference). Returns ERR_OK,
 * or ERR_BAD_JSON with a sentence in msg that begins with what ("The JSON body") and gives
 * jansson's line and column. */
enum err params_load_json(const char *what, const char *text, size_t len, json_t **out, char *msg,
                          size_t msglen);
/* The endpoint's parameters that apply to method m (all of them when m < 0) as a JSON array
 * for /methods (new reference). */
json_t *params_describe(const struct endpoint *ep, int m);
/* Percent-decodes s[0..len) into a new string ('+' is a space). Returns NULL on a bad escape
 * or a NUL byte, or when out of memory. */
char *params_unescape(const char *s, size_t len);

/* ---- operations: descriptors and their table ---- */

struct api_ctx;
#include "op.h"

/* ---- jobs ---- */

/* Queues the image job of req on ctx's backend: decode, op's compute, encode. The response goes
 * to done(udata). owned: NULL when image lies in req's body, else image's malloc'd buffer, which
 * the job frees (on ERR_OK only: otherwise it stays the caller's). params: op's parameters,
 * copied (op->params_size bytes); NULL when image is a JSON body not yet parsed: the job parses
 * it first, on its worker (upload_json). Returns ERR_OK, or ERR_QUEUE_FULL / ERR_SHUTTING_DOWN /
 * ERR_OUT_OF_MEMORY (nothing was queued). */
enum err job_submit(struct api_ctx *ctx, const struct api_request *req, const uint8_t *image,
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

/* Finds the image and the params in req's body, by its Content-Type, into u (zeroed first; free
 * it with upload_free). Returns ERR_OK, or an error with a sentence in msg. */
enum err upload_read(const struct api_request *req, struct upload *u, char *msg, size_t msglen);
void upload_free(struct upload *u);
/* A JSON body's parse, run by its job on the worker: its parameters (and the query string's, query
 * without '?') into params (ep's struct), its base64 image decoded into *owned (malloc'd, the
 * caller frees it) of *len bytes. Returns NULL, or the error response with the statuses and
 * sentences a multipart upload gets. */
struct api_response *upload_json(const struct endpoint *ep, const char *query, const uint8_t *body,
                                 size_t body_len, void *params, uint8_t **owned, size_t *len);

/* ---- metrics ---- */

struct metrics;

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);
/* Counts one answered request; endpoint and algorithm are static strings or NULL. */
void metrics_count(struct metrics *m, const char *endpoint, const char *algorithm, int status);
/* Records the time (ms) one request took to be answered; route is a static string or NULL
 * ("other"), method the request's (any other than GET, HEAD, POST, OPTIONS counts as "other"). */
void metrics_duration(struct metrics *m, const char *route, const char *method, int status,
                      double ms);
/* Records one stage time (ms) of a job; stage is a static string. */
void metrics_stage(struct metrics *m, const char *stage, double ms);
/* Requests admitted and not yet answered: delta +1 or -1. */
void metrics_in_flight(struct metrics *m, int delta);
/* A connection refused unread, answered with e. */
void metrics_refused(struct metrics *m, enum err e);
/* GET /metrics: the Prometheus text exposition of ctx. */
struct api_response *metrics_response(struct api_ctx *ctx);

/* ---- the access log ---- */

/* ---- the context ---- */

struct api_ctx {
  struct api_config cfg;
  struct engine *engine;
  struct metrics *metrics;
  int log_fd;        /* the access log, or -1 */
  uint64_t id_seed;  /* random, per process: generated request ids differ between runs */
  uint64_t id_count; /* request ids generated (atomic) */
  char *api_key;     /* owned copy, or NULL */
  char *cors;        /* owned copy of the allowed origins, or NULL */
  char *openapi;     /* /openapi.json's text, made once: it changes only with the process */
  size_t openapi_len;
  int draining;                             /* atomic */
  int failed;                               /* atomic: the GPU is lost */
  struct blur_params warm[ENGINE_WARM_MAX]; /* the warm-up's blurs (engine_config.warm_ops) */
};

/* The engine's on_fatal: the process must stop with status (70: the GPU is lost, after which
 * /readyz answers 503); tells the server, once. */
void api_fail(void *ctx, int status);

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
#define ROUTE_CACHE   8u /* the same answer until a restart: ETag, 304 and gzip (cache.c) */

/* Every route: the fixed ones (handler.c), then one per operation of api_ops; *n gets their
 * number. Built once, on first use. */
const struct route *route_table(int *n);

/* The answers of handler.c: /healthz, /readyz, /metrics, /methods; and of job.c: every image
 * endpoint (r->op's upload, queued as a job). */
struct api_response *handler_healthz(ROUTE_ARGS);
struct api_response *handler_readyz(ROUTE_ARGS);
struct api_response *handler_metrics(ROUTE_ARGS);
struct api_response *handler_methods(ROUTE_ARGS);
struct api_response *handler_image(ROUTE_ARGS);

/* resp (taken over) with its ETag and Vary: Accept-Encoding, gzipped when req accepts it, or
 * turned into 304 Not Modified when req's If-None-Match names its ETag; a response that is no 200
 * is returned as it is. */
struct api_response *cache_answer(const struct api_request *req, struct api_response *resp);

/* /openapi.json's text for ctx (its API key decides the security it lists), malloc'd, or NULL. */
char *api_openapi_text(const struct api_ctx *ctx);

/* The route whose path is the path of uri (before any '?'), or NULL. */
const struct route *route_find(const char *uri);
/* Length of the path of uri (before any '?'). */
size_t route_path_len(const char *uri);

/* ---- /openapi.json and the demo page ---- */

/* The OpenAPI 3.1 description of the n routes r (route_table's) as a JSON object (new
 * reference), or NULL when out of memory; keyed: the server has --api-key, so the operations
 * that are not open list its security schemes (without one, none). */
json_t *openapi_document(const struct route *r, int n, int keyed);
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
struct api_response *response_error(enum err e, const char *msg, json_t *fields);
/* A response with a JSON body (takes a reference to body's ownership: body is decref'd). */
struct api_response *response_json(int status, json_t *body);
/* body as the JSON text every answer prints (compact, 15 significant digits), malloc'd, or NULL;
 * body is decref'd. */
char *json_text(json_t *body);
/* A 200 of media type type with a copy of text[0..len); NULL when out of memory. */
struct api_response *response_text(const char *type, const char *text, size_t len);
/* Base64 (RFC 4648, padded) of data as a new NUL-terminated string, or NULL. */
char *base64_encode(const uint8_t *data, size_t len);
/* Decodes the image string of a JSON body, s[0..len): standard base64 (RFC 4648: A-Z, a-z, 0-9,
 * '+', '/'), after an optional data: URL prefix ("data:image/png;base64,"). The '=' padding may
 * be left out, but when present it must be complete and end the string; line breaks (CR, LF, as
 * in MIME's 76-column lines) are skipped; any other character is an error. Returns ERR_OK with
 * the bytes in *out (malloc'd, of 3/4 of the base64's length; the caller frees it; NULL when
 * there are none) and their count in *outlen; ERR_BAD_IMAGE_ENCODING with a sentence in msg that
 * gives the byte offset in s and the character where it broke; or ERR_OUT_OF_MEMORY. */
enum err base64_decode(const char *s, size_t len, uint8_t **out, size_t *outlen, char *msg,
                       size_t msglen);

#endif

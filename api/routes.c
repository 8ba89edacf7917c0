/* The route table, the one list of endpoints: it dispatches requests (api_handle), metrics and
 * the access log name them, the CLI takes its verbs from it, and openapi.c describes it. The
 * fixed routes are listed here; an image endpoint's route is made from its operation's
 * descriptor (api_ops, op.h), so a new operation needs no row here. */
#include "api_int.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct api_response *openapi_answer(ROUTE_ARGS) {
  (void)r, (void)req, (void)query, (void)done, (void)udata;
  return response_text("application/json", ctx->openapi, ctx->openapi_len);
}

char *api_openapi_text(const struct api_ctx *ctx) {
  int n;
  const struct route *t = route_table(&n);
  return json_text(openapi_document(t, n, ctx->api_key != NULL));
}

/* clang-format off */
static const struct route fixed[] = {
    {"/", "GET", "The demo page: upload an image, try the methods and compare them.", NULL,
     "text/html; charset=utf-8", ROUTE_OPEN | ROUTE_CACHE, web_answer, NULL},
    {"/demo.js", "GET", "The demo page's script.", NULL, "text/javascript; charset=utf-8",
     ROUTE_OPEN | ROUTE_CACHE, web_answer, NULL},
    {"/demo.css", "GET", "The demo page's style sheet.", NULL, "text/css; charset=utf-8",
     ROUTE_OPEN | ROUTE_CACHE, web_answer, NULL},
    {"/healthz", "GET", "Liveness: 200 while the process serves, also while it drains.", NULL, "application/json",
     ROUTE_OPEN | ROUTE_PROBE, handler_healthz, NULL},
    {"/readyz", "GET", "Readiness: 200 when the workers take jobs, 503 while draining or after a "
     "GPU failure; the backend, workers and queue.", NULL, "application/json",
     ROUTE_UNREADY | ROUTE_OPEN | ROUTE_PROBE, handler_readyz, NULL},
    {"/methods", "GET", "Every method with its description, accuracy, parameters and backends, "
     "and the configured limits.", NULL, "application/json", ROUTE_OPEN | ROUTE_CACHE,
     handler_methods, NULL},
    {"/metrics", "GET", "Prometheus metrics: requests by route, algorithm and status, their "
     "durations by route, HTTP method and status, stage latency histograms, queue, in-flight and "
     "GPU memory gauges, backend info.", NULL,
     "text/plain; version=0.0.4; charset=utf-8", ROUTE_OPEN | ROUTE_PROBE, handler_metrics, NULL},
    {"/openapi.json", "GET", "This OpenAPI 3.1 description, generated from the route and "
     "parameter tables.", NULL, "application/json", ROUTE_OPEN | ROUTE_CACHE, openapi_answer, NULL},
};
/* clang-format on */

#define NFIXED    (int)(sizeof(fixed) / sizeof(fixed[0]))
#define ROUTE_MAX (NFIXED + 32) /* the fixed routes and room for the operations */

static struct route table[ROUTE_MAX];
static int ntable;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The fixed routes, then a POST route per operation (handler_image answers it). */
static void table_make(void) {
  memcpy(table, fixed, sizeof(fixed));
  ntable = NFIXED;
  for (int i = 0; api_ops[i] && ntable < ROUTE_MAX; i++)
    table[ntable++] = (struct route){api_ops[i]->ep->path, "POST",    api_ops[i]->summary,
                                     api_ops[i]->ep,       NULL,      0,
                                     handler_image,        api_ops[i]};
}

const struct route *route_table(int *n) {
  pthread_once(&once, table_make);
  *n = ntable;
  return table;
}

char *api_reference_markdown(void) {
  int n;
  const struct route *t = route_table(&n);
  return openapi_markdown(t, n);
}

const char *api_route(int i, const char **method) {
  int n;
  const struct route *t = route_table(&n);
  if (i < 0 || i >= n) return NULL;
  *method = t[i].method;
  return t[i].path;
}

size_t route_path_len(const char *uri) {
  const char *q = strchr(uri, '?');
  return q ? (size_t)(q - uri) : strlen(uri);
}

const struct route *route_find(const char *uri) {
  size_t plen = route_path_len(uri);
  int n;
  const struct route *t = route_table(&n);
  for (int i = 0; i < n; i++)
    if (strlen(t[i].path) == plen && memcmp(t[i].path, uri, plen) == 0) return &t[i];
  return NULL;
}

int api_is_probe(const char *method, const char *uri) {
  const struct route *r = route_find(uri);
  return r && r->flags & ROUTE_PROBE && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
}

_Static_assert(sizeof(struct http_bodyscan) <= sizeof(((struct api_request *)0)->body_scan),
               "struct http_bodyscan must fit in api_request.body_scan");

enum err api_body_chunk(struct api_ctx *ctx, struct api_request *req, const uint8_t *data, size_t n,
                        char *msg, size_t msglen) {
  struct http_bodyscan *s = (struct http_bodyscan *)req->body_scan;
  (void)ctx;
  if (s->mode == 0) s->mode = http_media_is(req->content_type, "application/json") ? 1 : 2;
  return s->mode == 1 ? http_bodyscan_feed(s, data, n, msg, msglen) : ERR_OK;
}

struct api_response *api_handle(struct api_ctx *ctx, const struct api_request *req,
                                api_done_fn done, void *udata) {
  const char *q = strchr(req->uri, '?');
  const struct route *r = route_find(req->uri);
  if (req->trace) req->trace->endpoint = r ? r->path : NULL;
  if (!r) return api_error_response(ERR_NOT_FOUND, NULL);
  int get = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
  const char *allow = strcmp(r->method, "GET") ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
  if (strcmp(req->method, "OPTIONS") == 0) { /* not a CORS preflight (guard.c): what it takes */
    struct api_response *resp = response_empty(204);
    if (resp) api_response_header(resp, "Allow", "%s", allow);
    return resp;
  }
  if (strcmp(req->method, r->method) != 0 && !(get && strcmp(r->method, "GET") == 0)) {
    char msg[128];
    snprintf(msg, sizeof(msg), "%s takes %s, not %.16s.", r->path, r->method, req->method);
    struct api_response *resp = api_error_response(ERR_METHOD_NOT_ALLOWED, msg);
    if (resp) api_response_header(resp, "Allow", "%s", allow);
    return resp;
  }
  struct api_response *resp = r->answer(ctx, r, req, q ? q + 1 : "", done, udata);
  return r->flags & ROUTE_CACHE ? cache_answer(req, resp) : resp;
}

/* Access control: the optional API key and CORS. api_admit runs as soon as a request's headers
 * are in, before its body is read: it counts the request as in flight, notes its endpoint,
 * answers CORS preflights, and refuses a request without the key with a 401 before its upload
 * is read. api_finish adds the CORS headers to every response. Both work on the text of the
 * flags kept in the context, so a request costs no allocation. */
#include "api_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Paths open without the API key: probes, scrapers, and what a browser needs before it has a
 * key (the demo page, the API description, the method list). Paths, whatever the method. */
#define CORS_ALLOW_HEADERS "Authorization, X-API-Key, Content-Type, Accept, X-Request-Id"
#define CORS_EXPOSE_HEADERS                                                                        \
  "Server-Timing, X-PSNR, X-Method, X-Backend, X-Request-Id, X-Scale, X-Sigma, X-Width, "          \
  "X-Height, X-Sample-Type, Retry-After"
#define CORS_MAX_AGE 600 /* seconds a browser may cache a preflight */

/* given[0..glen) == key[0..klen), in a time that depends on klen only (not on where they
 * differ), so that timing does not reveal the key byte by byte. */
static int same_key(const char *given, size_t glen, const char *key, size_t klen) {
  unsigned char d = glen != klen;
  for (size_t i = 0; i < klen; i++) d |= (unsigned char)(key[i] ^ (i < glen ? given[i] : 0));
  return d == 0;
}

/* Whether req carries ctx's key as "Authorization: Bearer KEY" or "X-API-Key: KEY". */
static int has_key(const struct api_ctx *ctx, const struct api_request *req) {
  size_t klen = strlen(ctx->api_key);
  int ok = 0;
  const char *a = req->authorization;
  if (a && strncasecmp(a, "Bearer ", 7) == 0) {
    for (a += 7; *a == ' ';) a++;
    ok |= same_key(a, strlen(a), ctx->api_key, klen);
  }
  if (req->api_key) ok |= same_key(req->api_key, strlen(req->api_key), ctx->api_key, klen);
  return ok;
}

/* Whether origin is in ctx's comma-separated list (or the list is "*"). */
static int origin_allowed(const struct api_ctx *ctx, const char *origin) {
  if (!ctx->cors || !origin || !*origin) return 0;
  size_t n = strlen(origin);
  for (const char *p = ctx->cors; *p;) {
    while (*p == ' ' || *p == ',') p++;
    const char *next = p;
    while (*next && *next != ',') next++;
    const char *end = next;
    while (end > p && (end[-1] == ' ' || end[-1] == '/')) end--; /* "https://a.example/" */
    size_t len = (size_t)(end - p);
    if ((len == 1 && *p == '*') || (len == n && len && strncasecmp(p, origin, n) == 0)) return 1;
    p = next;
  }
  return 0;
}

/* The answer to a CORS preflight (OPTIONS with Access-Control-Request-Method). */
static struct api_response *preflight(struct api_ctx *ctx, const struct api_request *req,
                                      const struct route *r) {
  if (!r) return api_error_response(ERR_NOT_FOUND, NULL);
  struct api_response *resp = response_empty(204);
  if (!resp || !origin_allowed(ctx, req->origin)) return resp; /* the browser will refuse */
  api_response_header(resp, "Access-Control-Allow-Methods", "%s",
                      strcmp(r->method, "GET") ? r->method : "GET, HEAD");
  api_response_header(resp, "Access-Control-Allow-Headers", CORS_ALLOW_HEADERS);
  api_response_header(resp, "Access-Control-Max-Age", "%d", CORS_MAX_AGE);
  return resp;
}

struct api_response *api_admit(struct api_ctx *ctx, const struct api_request *req) {
  const struct route *r = route_find(req->uri);
  if (req->trace) {
    req->trace->endpoint = r ? r->path : NULL;
    if (!req->trace->admitted) metrics_in_flight(ctx->metrics, +1);
    req->trace->admitted = 1;
  }
  if (ctx->cors && strcmp(req->method, "OPTIONS") == 0 && req->origin && req->cors_method)
    return preflight(ctx, req, r); /* browsers send preflights without credentials */
  if (!ctx->api_key || (r && r->flags & ROUTE_OPEN) || has_key(ctx, req)) return NULL;
  struct api_response *resp = api_error_response(ERR_UNAUTHORIZED, NULL);
  if (resp) api_response_header(resp, "WWW-Authenticate", "Bearer realm=\"blurd\"");
  return resp;
}

void api_finish(struct api_ctx *ctx, const struct api_request *req, struct api_response *resp) {
  if (!ctx->cors || !resp) return;
  api_response_header(resp, "Vary", "Origin"); /* caches must keep answers apart by origin */
  if (!origin_allowed(ctx, req->origin)) return;
  api_response_header(resp, "Access-Control-Allow-Origin", "%s", req->origin);
  api_response_header(resp, "Access-Control-Expose-Headers", CORS_EXPOSE_HEADERS);
  /* without it a page on that origin sees an empty serverTiming in its Resource Timing entry */
  api_response_header(resp, "Timing-Allow-Origin", "%s",
                      strcmp(ctx->cors, "*") == 0 ? "*" : req->origin);
}

/* The demo page's files: web/index.html, web/demo.js and web/demo.css are embedded into the
 * binary at build time (scripts/embed-web.sh turns them into api_web_assets), so blurd serves
 * its page with nothing beside the binary and no other origin. The route's path names the file
 * ("/" is index.html); the media type comes from the route table. The Content-Security-Policy
 * lets the page load scripts, styles and connections from this origin only, and images from
 * this origin, blob: (the upload and the results) and data:. */
#include "api_int.h"

#include <stdlib.h>
#include <string.h>

#define WEB_CSP                                                                                    \
  "default-src 'self'; img-src 'self' blob: data:; object-src 'none'; base-uri 'none'; "           \
  "form-action 'self'; frame-ancestors 'none'"

static const struct web_asset *find_asset(const char *path) {
  const char *name = strcmp(path, "/") == 0 ? "index.html" : path + (path[0] == '/');
  for (const struct web_asset *a = api_web_assets; a->name; a++)
    if (strcmp(a->name, name) == 0) return a;
  return NULL;
}

struct api_response *web_answer(struct api_ctx *ctx, const struct route *r,
                                const struct api_request *req, const char *query, api_done_fn done,
                                void *udata) {
  (void)ctx, (void)req, (void)query, (void)done, (void)udata;
  const struct web_asset *a = find_asset(r->path);
  if (!a) return api_error_response(ERR_NOT_FOUND, "This build has no such page file.");
  struct api_response *resp = calloc(1, sizeof(*resp));
  if (!resp || !(resp->body = malloc(a->len ? a->len : 1))) {
    free(resp);
    return api_error_response(ERR_OUT_OF_MEMORY, NULL);
  }
  memcpy(resp->body, a->data, a->len);
  resp->len = a->len;
  resp->status = 200;
  resp->content_type = r->produces;
  api_response_header(resp, "Content-Security-Policy", "%s", WEB_CSP);
  api_response_header(resp, "X-Content-Type-Options", "nosniff");
  return resp;
}

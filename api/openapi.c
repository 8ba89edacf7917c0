/* GET /openapi.json: the OpenAPI 3.1 description of the service, built at run time from the
 * tables the service itself runs on, so it cannot drift from them. Paths and operations come
 * from the route table (route_table: path, HTTP method, summary, media type); each route's
 * parameters from its endpoint's param_spec table (type, range, choices, default, the methods
 * it applies to), described as query parameters and, for image uploads, as the JSON object of
 * the multipart field `params` and of a JSON body (beside its base64 image); error responses
 * from API_ERRORS. A new route or parameter needs no change here: a parameter type this file
 * does not know becomes a string in the query and any JSON value in params. tests/integ_openapi.c
 * checks the document against the server. */
#include "api_int.h"

#include "../base/version.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_DOC_VERSION "1.0.0" /* of the HTTP API described here */

static const struct {
  int status;
  const char *code;
  const char *msg;
} errors[] = {
#define X(e, status, code, msg) {status, code, msg},
    ERRORS(X)
#undef X
};
#define NERRORS (int)(sizeof(errors) / sizeof(errors[0]))

static int is_upload(const struct route *r) {
  return r->produces == NULL;
}

/* The default of s as a JSON value of its type. */
static json_t *default_value(const struct param_spec *s) {
  switch (s->type) {
  case PT_NUMBER:
    return json_real(strtod(s->def, NULL));
  case PT_INT:
    return json_integer(strtol(s->def, NULL, 10));
  case PT_BOOL:
    return json_boolean(strcmp(s->def, "true") == 0 || strcmp(s->def, "1") == 0);
  default:
    return json_string(s->def);
  }
}

/* A PT_KERNEL value: one of the names, or rows of numbers (or size*size numbers, row-major).
 * In a query string the matrix is its JSON text. */
static json_t *kernel_schema(const struct param_spec *s, int in_query) {
  if (in_query)
    return json_pack("{s:s, s:s, s:[s, s]}", "type", "string", "description",
                     "a kernel name, or the JSON text of an odd square matrix up to 31x31",
                     "examples", s->choices[0], "[[0,-1,0],[-1,5,-1],[0,-1,0]]");
  json_t *names = json_array();
  for (int k = 0; s->choices[k]; k++) json_array_append_new(names, json_string(s->choices[k]));
  return json_pack("{s:[{s:s, s:o}, {s:s, s:{s:s, s:{s:s}}}, {s:s, s:{s:s}}]}", "oneOf", "type",
                   "string", "enum", names, "type", "array", "items", "type", "array", "items",
                   "type", "number", "type", "array", "items", "type", "number");
}

/* The JSON Schema of s's values: in a query string (in_query) or in the params object. */
static json_t *param_schema(const struct param_spec *s, int in_query) {
  json_t *o = json_object();
  switch (s->type) {
  case PT_NUMBER:
  case PT_INT:
    json_object_set_new(o, "type", json_string(s->type == PT_INT ? "integer" : "number"));
    json_object_set_new(o, "minimum",
                        s->type == PT_INT ? json_integer((json_int_t)s->min) : json_real(s->min));
    json_object_set_new(o, "maximum",
                        s->type == PT_INT ? json_integer((json_int_t)s->max) : json_real(s->max));
    break;
  case PT_BOOL:
    json_object_set_new(o, "type", json_string("boolean"));
    break;
  case PT_ENUM: {
    json_t *c = json_array();
    for (int k = 0; s->choices[k]; k++) json_array_append_new(c, json_string(s->choices[k]));
    json_object_set_new(o, "type", json_string("string"));
    json_object_set_new(o, "enum", c);
    break;
  }
  case PT_KERNEL: /* a name, or an odd square matrix: JSON text in a query string */
    json_decref(o);
    o = kernel_schema(s, in_query);
    break;
  case PT_REGIONS: /* [[x, y, w, h], ...]; x,y,w,h;x,y,w,h (or the JSON text) in a query string */
    json_decref(o);
    o = in_query
            ? json_pack("{s:s, s:s, s:[s]}", "type", "string", "pattern",
                        "^-?[0-9]+,-?[0-9]+,[0-9]+,[0-9]+(;-?[0-9]+,-?[0-9]+,[0-9]+,[0-9]+)*;?$",
                        "examples", "0,0,16,16;2,2,8,8")
            : json_pack("{s:s, s:i, s:i, s:{s:s, s:i, s:i, s:{s:s}}}", "type", "array", "minItems",
                        1, "maxItems", API_REGIONS_MAX, "items", "type", "array", "minItems", 4,
                        "maxItems", 4, "items", "type", "integer");
    break;
  default: /* a type added after this file: its text in a query string, any JSON in params */
    if (in_query) json_object_set_new(o, "type", json_string("string"));
  }
  if (s->def && *s->def) json_object_set_new(o, "default", default_value(s));
  return o;
}

/* s's sentence, whether it is required, and the methods it applies to when not all of them. */
static json_t *param_doc(const struct endpoint *ep, const struct param_spec *s) {
  char text[512];
  size_t n = (size_t)snprintf(text, sizeof(text), "%s%s", s->def ? "" : "Required. ", s->doc);
  if (ep->method_param >= 0 && s->methods) {
    const struct param_spec *mp = &ep->params[ep->method_param];
    const char *sep = " Only for ";
    for (int m = 0; mp->choices[m] && n < sizeof(text); m++) /* past nmethods: auto and such */
      if (m >= ep->nmethods || s->methods >> m & 1) {
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%s=%s", sep, mp->name, mp->choices[m]);
        sep = ", ";
      }
    if (n < sizeof(text)) snprintf(text + n, sizeof(text) - n, ".");
  }
  return json_string(text);
}

/* The query parameters of route r. For an upload a parameter may come in params instead, so
 * none is required in the query. */
static json_t *query_params(const struct route *r) {
  json_t *arr = json_array();
  for (int i = 0; r->ep && i < r->ep->nparams; i++) {
    const struct param_spec *s = &r->ep->params[i];
    json_t *p = json_pack("{s:s, s:s, s:b, s:o, s:o}", "name", s->name, "in", "query", "required",
                          !s->def && !is_upload(r), "description", param_doc(r->ep, s), "schema",
                          param_schema(s, 1));
    if (!s->def && is_upload(r)) json_object_set_new(p, "x-required", json_true());
    if (strcmp(s->name, "sigma") == 0 && s->def && !*s->def) /* /blur: or sigma_x and sigma_y */
      json_object_set_new(p, "x-required-unless", json_pack("[ss]", "sigma_x", "sigma_y"));
    json_array_append_new(arr, p);
  }
  return arr;
}

/* The JSON object of the multipart field params: the same parameters, typed. */
static json_t *params_object(const struct endpoint *ep) {
  json_t *props = json_object();
  for (int i = 0; ep && i < ep->nparams; i++) {
    json_t *sc = param_schema(&ep->params[i], 0);
    json_object_set_new(sc, "description", param_doc(ep, &ep->params[i]));
    json_object_set_new(props, ep->params[i].name, sc);
  }
  return json_pack("{s:s, s:o, s:b}", "type", "object", "properties", props, "additionalProperties",
                   0);
}

static json_t *binary(const char *media) {
  return json_pack("{s:s, s:s}", "type", "string", "contentMediaType", media);
}

/* A JSON request body: the image in base64, and the parameters as in params. */
static json_t *json_body(const struct endpoint *ep) {
  json_t *o = params_object(ep);
  json_t *props =
      json_pack("{s:{s:s, s:s, s:s}}", "image", "type", "string", /* no format: byte, which */
                "contentEncoding", "base64", "description", /* would refuse data: and no '=' */
                "The image file in standard base64 (RFC 4648), alone or after a data: URL prefix "
                "(data:, a media type, ;base64,). The '=' padding may be left out; line breaks are "
                "skipped; any "
                "other character that is not base64 is a 400 invalid_image_encoding.");
  json_object_update(props, json_object_get(o, "properties")); /* image first, then params */
  json_object_set_new(o, "properties", props);
  json_object_set_new(o, "required", json_pack("[s]", "image"));
  json_object_set_new(o, "description",
                      json_string("The image in base64 as 'image', and the parameters as in "
                                  "params; a key also in the query string must have the same "
                                  "value there."));
  return o;
}

/* The request body of an upload route: a form with image and params, the raw image, or JSON. */
static json_t *upload_body(const struct route *r) {
  json_t *form = json_pack(
      "{s:s, s:[{s:[s]}, {s:[s]}], s:{s:o, s:o, s:{s:s, s:s, s:o, s:s}}, s:b}", "type", "object",
      "oneOf", "required", "image", "required", "file", "properties", "image",
      binary("application/octet-stream"), "file", binary("application/octet-stream"), "params",
      "type", "string", "contentMediaType", "application/json", "contentSchema",
      params_object(r->ep), "description",
      "The parameters as a JSON object; a key also in the query string must have the same "
      "value there.",
      "additionalProperties", 0);
  json_object_set_new(json_object_get(json_object_get(form, "properties"), "file"), "description",
                      json_string("Another name for image; send one of the two."));
  char titles[256], text[400];
  snprintf(text, sizeof(text),
           "The image (%s): in a multipart form, as the raw body, or in base64 in a JSON object.",
           codec_inputs_text(titles, sizeof(titles), 0));
  json_t *body = json_pack("{s:b, s:s, s:{s:{s:o}}}", "required", 1, "description", text, "content",
                           "multipart/form-data", "schema", form);
  json_t *content = json_object_get(body, "content");
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++) /* the format table's inputs */
    if (codec_format(f)->decode)
      json_object_set_new(content, codec_mime(f),
                          json_pack("{s:o}", "schema", binary(codec_mime(f))));
  json_object_set_new(content, "application/octet-stream",
                      json_pack("{s:o}", "schema", binary("application/octet-stream")));
  json_object_set_new(json_object_get(body, "content"), "application/json",
                      json_pack("{s:o}", "schema", json_body(r->ep)));
  return body;
}

static json_t *header(const char *doc) {
  return json_pack("{s:s, s:{s:s}}", "description", doc, "schema", "type", "string");
}

/* The headers of every answer: the request id, and with --cors those of an allowed origin. */
static json_t *common_headers(void) {
  return json_pack(
      "{s:o, s:o, s:o, s:o, s:o}", "X-Request-Id",
      header("The request's id: the client's X-Request-Id when it is sane, else a new one; also "
             "in the access log."),
      "Vary",
      header("Accept on an operation's answer (its type, JSON or an image format, follows "
             "Accept); with --cors-origins also Origin (answers differ by origin)."),
      "Access-Control-Allow-Origin",
      header("With --cors-origins and an allowed Origin: that origin."),
      "Access-Control-Expose-Headers",
      header("With --cors-origins and an allowed Origin: Server-Timing, Retry-After and every X- "
             "header "
             "blurd sends, so that a page on that origin can read them."),
      "Timing-Allow-Origin",
      header("With --cors-origins and an allowed Origin: that origin, or * when --cors-origins is "
             "*, so that "
             "the page's Resource Timing entry carries serverTiming."));
}

static int has_param(const struct endpoint *ep, const char *name) {
  for (int i = 0; ep && i < ep->nparams; i++)
    if (strcmp(ep->params[i].name, name) == 0) return 1;
  return 0;
}

/* Whether ep can answer an image in format f: its format parameter offers it, or offers the
 * upload's format (input) and f is one an upload can be in. */
static int answers_format(const struct endpoint *ep, enum codec_format f) {
  const char *name = codec_format_name(f);
  for (int i = 0; ep && i < ep->nparams; i++)
    if (strcmp(ep->params[i].name, "format") == 0) {
      for (const char *const *c = ep->params[i].choices; *c; c++)
        if (strcmp(*c, name) == 0 ||
            (strcmp(*c, "input") == 0 && codec_format(f)->encode && !codec_format(f)->data))
          return 1;
      return 0;
    }
  return 1;
}

/* Whether operation op (NULL: none) has the JSON result field name. */
static int has_field(const struct api_op *op, const char *name) {
  for (int i = 0; op && i < OP_FIELDS_MAX && op->fields[i].name; i++)
    if (strcmp(op->fields[i].name, name) == 0) return 1;
  return 0;
}

/* The 200 of an upload route: the image in each format it can answer, or the JSON mode's object;
 * the timing headers. */
static json_t *image_ok(const struct route *r) {
  json_t *h = common_headers();
  json_object_update_new(
      h,
      json_pack(
          "{s:o, s:o}", "Server-Timing",
          header(
              "Stage times, e.g. queue;dur=0.02, decode;dur=8.8, filter;dur=41.1, encode;dur=7.0, "
              "total;dur=57.9 (ms); the CUDA backend adds upload, kernel and download."),
          "X-Backend", header("Where it ran: cpu, or e.g. cuda:0 NVIDIA H200.")));
  if (r->op && r->op->x_method) json_object_set_new(h, "X-Method", header(r->op->x_method));
  if (has_param(r->ep, "sigma"))
    json_object_set_new(h, "X-Sigma", header("The sigmas along x and y, e.g. 3,3."));
  if (has_field(r->op, "scale"))
    json_object_set_new(h, "X-Scale",
                        header("PNG sample = min(65535, round(value * scale)), e.g. 256."));
  if (has_param(r->ep, "psnr"))
    json_object_set_new(h, "X-PSNR",
                        header("PSNR against the exact result in dB, or inf; "
                               "absent with psnr=false."));
  if (answers_format(r->ep, CODEC_RAW)) {
    json_object_set_new(h, "X-Width",
                        header("With format=raw or npy: the map's width in samples."));
    json_object_set_new(h, "X-Height", header("With format=raw or npy: the map's height in rows."));
    json_object_set_new(h, "X-Sample-Type",
                        header("With format=raw or npy: uint16le (or uint8 for an 8-bit image)."));
  }
  json_t *content = json_object();
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++)
    if (codec_format(f)->encode && answers_format(r->ep, f))
      json_object_set_new(content, codec_mime(f),
                          json_pack("{s:o}", "schema", binary(codec_mime(f))));
  json_object_set_new(content, "application/json",
                      json_pack("{s:{s:s}}", "schema", "$ref", "#/components/schemas/ImageResult"));
  return json_pack("{s:s, s:o, s:o}", "description",
                   "The image (in the upload's format unless format says otherwise), or a JSON "
                   "object with the image in base64 when Accept weighs application/json above "
                   "that image type (406 when it accepts neither).",
                   "headers", h, "content", content);
}

/* The validators of a route whose answer stays the same until a restart (cache.c). */
static json_t *cache_headers(void) {
  return json_pack(
      "{s:o, s:o, s:o}", "ETag",
      header("A strong validator of the bytes sent; If-None-Match with it gets 304 Not Modified."),
      "Cache-Control", header("no-cache: revalidate, so a new build's answer is seen at once."),
      "Content-Encoding",
      header("gzip when Accept-Encoding allows it (and Vary names Accept-Encoding)."));
}

/* The 200 of a route that answers a document of type r->produces. */
static json_t *document_ok(const struct route *r, const char *description) {
  int is_json = strncmp(r->produces, "application/json", 16) == 0;
  json_t *h = common_headers();
  if (r->answer == web_answer)
    json_object_update_new(h,
                           json_pack("{s:o, s:o}", "Content-Security-Policy",
                                     header("What the page may load and run: only its own files."),
                                     "X-Content-Type-Options", header("nosniff")));
  if (r->flags & ROUTE_CACHE) json_object_update_new(h, cache_headers());
  return json_pack("{s:s, s:o, s:{s:{s:{s:s}}}}", "description", description, "headers", h,
                   "content", r->produces, "schema", "type", is_json ? "object" : "string");
}

/* Can route r answer error e? Every route: a wrong HTTP method, a body over the limit (refused
 * before routing), a bug, and a connection over a limit (429 and 503, answered before the request
 * is read). Upload routes: everything else. Nobody gets 404 (it is for paths
 * not listed here) or 499 (the client has left). */
static int error_applies(const struct route *r, int e) {
  int st = errors[e].status;
  if (st == 404 || st == 499) return 0;
  return st == 405 || st == 413 || st == 500 || st == 429 || st == 503 || is_upload(r);
}

/* The error response for errors[e]'s status, naming every code it may carry. */
static json_t *error_response(int e) {
  char desc[1024] = "";
  size_t n = 0;
  for (int k = e; k < NERRORS; k++)
    if (errors[k].status == errors[e].status && n < sizeof(desc))
      n += (size_t)snprintf(desc + n, sizeof(desc) - n, "%s%s: %s", n ? " " : "", errors[k].code,
                            errors[k].msg);
  json_t *h = common_headers();
  if (errors[e].status == 503 || errors[e].status == 429)
    json_object_set_new(h, "Retry-After", header("1"));
  if (errors[e].status == 405)
    json_object_set_new(h, "Allow", header("The methods the path takes."));
  if (errors[e].status == 401)
    json_object_set_new(h, "WWW-Authenticate", header("Bearer realm=\"blurd\""));
  return json_pack("{s:s, s:o, s:{s:{s:{s:s}}}}", "description", desc, "headers", h, "content",
                   "application/json", "schema", "$ref", "#/components/schemas/Error");
}

/* components/responses: Error400, Error401, ... for the statuses an operation may answer (404
 * answers only paths not listed, and 499 is only logged: nobody reads it). */
static json_t *error_responses(void) {
  json_t *o = json_object();
  for (int e = 0; e < NERRORS; e++) {
    char name[16];
    snprintf(name, sizeof(name), "Error%d", errors[e].status);
    if (errors[e].status != 499 && errors[e].status != 404 && !json_object_get(o, name))
      json_object_set_new(o, name, error_response(e));
  }
  return o;
}

/* Route r's error responses, as references to components/responses. */
static void add_errors(json_t *responses, const struct route *r) {
  for (int e = 0; e < NERRORS; e++) {
    char status[8], ref[64];
    snprintf(status, sizeof(status), "%d", errors[e].status);
    snprintf(ref, sizeof(ref), "#/components/responses/Error%d", errors[e].status);
    if (error_applies(r, e) && !json_object_get(responses, status))
      json_object_set_new(responses, status, json_pack("{s:s}", "$ref", ref));
  }
}

static json_t *responses(const struct route *r) {
  json_t *o = json_object();
  json_object_set_new(o, "200", is_upload(r) ? image_ok(r) : document_ok(r, r->summary));
  if (r->flags & ROUTE_UNREADY)
    json_object_set_new(o, "503", document_ok(r, "Not ready: the same document."));
  if (r->flags & ROUTE_CACHE)
    json_object_set_new(o, "304",
                        json_pack("{s:s, s:o}", "description",
                                  "Not Modified: If-None-Match named the answer's ETag.", "headers",
                                  cache_headers()));
  add_errors(o, r);
  return o;
}

/* "post_blur", "get_openapi_json", "get_root" for "/". */
static json_t *operation_id(const char *method, const char *path) {
  char id[128];
  size_t n = (size_t)snprintf(id, sizeof(id), "%s_%s", method, path[1] ? path + 1 : "root");
  for (size_t i = 0; i < n && i < sizeof(id); i++)
    id[i] = isalnum((unsigned char)id[i]) ? (char)tolower((unsigned char)id[i]) : '_';
  return json_string(id);
}

static json_t *operation(const struct route *r, const char *method, int keyed) {
  json_t *op = json_pack("{s:s, s:o, s:o}", "summary", r->summary, "operationId",
                         operation_id(method, r->path), "responses", responses(r));
  /* open paths need no key even with --api-key; the others need it only with --api-key */
  json_object_set_new(op, "security",
                      r->flags & ROUTE_OPEN || !keyed
                          ? json_array()
                          : json_pack("[{s:[]}, {s:[]}]", "ApiKey", "Bearer"));
  if (r->ep) json_object_set_new(op, "parameters", query_params(r));
  if (is_upload(r)) json_object_set_new(op, "requestBody", upload_body(r));
  return op;
}

/* Adds route r's operations to paths: its method, and HEAD beside GET; keyed: a key is needed. */
static void add_route(json_t *paths, const struct route *r, int keyed) {
  char method[16];
  json_t *item = json_object_get(paths, r->path);
  if (!item) json_object_set_new(paths, r->path, item = json_object());
  size_t i = 0;
  for (; r->method[i] && i < sizeof(method) - 1; i++)
    method[i] = (char)tolower((unsigned char)r->method[i]);
  method[i] = 0;
  json_object_set_new(item, method, operation(r, method, keyed));
  if (strcmp(method, "get") == 0) json_object_set_new(item, "head", operation(r, "head", keyed));
}

static json_t *error_schema(void) {
  json_t *codes = json_array();
  for (int e = 0; e < NERRORS; e++) json_array_append_new(codes, json_string(errors[e].code));
  return json_pack("{s:s, s:[s], s:{s:{s:s, s:[sss], s:{s:{s:s}, s:{s:s, s:o}, s:{s:s}}}}}", "type",
                   "object", "required", "error", "properties", "error", "type", "object",
                   "required", "status", "code", "message", "properties", "status", "type",
                   "integer", "code", "type", "string", "enum", codes, "message", "type", "string");
}

/* The JSON mode's object (job.c's json_body). */
static json_t *image_result_common(void);

/* The JSON mode's fields of the operations (their descriptors' fields), each once: a field
 * several operations give says which ("/variance, /contrast: the window radius."). */
static json_t *image_result_schema(void) {
  json_t *o = image_result_common();
  json_t *props = json_object_get(o, "properties");
  for (int i = 0; props && api_ops[i]; i++)
    for (const struct op_field *f = api_ops[i]->fields;
         f < api_ops[i]->fields + OP_FIELDS_MAX && f->name; f++) {
      char doc[256];
      int k = i;
      size_t n = 0;
      if (json_object_get(props, f->name)) continue; /* described with the first that gives it */
      for (; api_ops[k]; k++)
        for (const struct op_field *g = api_ops[k]->fields;
             g < api_ops[k]->fields + OP_FIELDS_MAX && g->name; g++)
          if (strcmp(g->name, f->name) == 0 && n < sizeof(doc))
            n += (size_t)snprintf(doc + n, sizeof(doc) - n, "%s%s", n ? ", " : "",
                                  api_ops[k]->ep->path);
      if (n < sizeof(doc)) snprintf(doc + n, sizeof(doc) - n, ": %s", f->doc);
      json_object_set_new(props, f->name,
                          json_pack("{s:s, s:s}", "type", f->type, "description", doc));
    }
  return o;
}

static json_t *image_result_common(void) {
  json_t *o = json_pack(
      "{s:s, s:[ssssssss], s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s, s:{s:s}, s:s},"
      " s:{s:s}, s:{s:s, s:s}, s:{s:s}, s:{s:s}, s:{s:[ss], s:s}, s:{s:s}}}",
      "type", "object", "required", "width", "height", "channels", "bit_depth", "backend",
      "timing_ms", "format", "image", "properties", "width", "type", "integer", "height", "type",
      "integer", "channels", "type", "integer", "bit_depth", "type", "integer", "backend", "type",
      "string", "timing_ms", "type", "object", "additionalProperties", "type", "number",
      "description", "Stage times in ms, as in Server-Timing.", "format", "type", "string", "image",
      "type", "string", "contentEncoding", "base64", "method", "type", "string", "sigma", "type",
      "number", "psnr_db", "type", "number", "null", "description",
      "PSNR in dB; null when the output is exact; absent with psnr=false.", "requested_method",
      "type", "string");
  json_t *props = json_object_get(o, "properties");
  if (props)
    json_object_set_new(
        props, "codecs",
        json_pack("{s:s, s:{s:{s:s}, s:{s:s}}, s:s}", "type", "object", "properties", "decode",
                  "type", "string", "encode", "type", "string", "description",
                  "The codecs that ran, as the desc of Server-Timing's decode and encode: "
                  "nvjpeg-hw, nvjpeg-gpu, nvjpeg-hybrid, nvjpeg, libjpeg-turbo, libdeflate, "
                  "libpng, deflate-rle, libwebp; for HEIC nvdec (the GPU's video decoders), or "
                  "libheif with the reason they did not take the file: libheif (video decoders: "
                  "an alpha plane)."));
  return o;
}

json_t *openapi_document(const struct route *routes, int nroutes, int keyed) {
  json_t *paths = json_object();
  for (int i = 0; paths && i < nroutes; i++) add_route(paths, &routes[i], keyed);
  json_t *schemes = json_pack("{s:{s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:s}}", "ApiKey", "type",
                              "apiKey", "in", "header", "name", "X-API-Key", "description",
                              "The key given to --api-key; without --api-key no request needs one.",
                              "Bearer", "type", "http", "scheme", "bearer", "description",
                              "The same key, as Authorization: Bearer KEY.");
  return json_pack(
      "{s:s, s:{s:s, s:s, s:{s:s, s:s}, s:s}, s:[{s:s, s:s}], s:o, s:{s:{s:o, s:o}, s:o, s:o}}",
      "openapi", "3.1.0", "info", "title", "blurd", "version", API_DOC_VERSION, "license", "name",
      BLURD_LICENSE_NAME, "identifier", BLURD_LICENSE_SPDX, "description",
      "Gaussian blur (and more) over HTTP, on the GPU or the CPU. Parameters come in the query "
      "string or, in multipart uploads, in the JSON field params, or in a JSON body beside the "
      "image in base64. A path not listed here answers 404 not_found, and a listed path asked "
      "with another HTTP method 405 method_not_allowed with Allow, both with the Error body; "
      "OPTIONS answers 204 with Allow (with --cors-origins, a CORS preflight its own headers). An "
      "image endpoint answers 406 not_acceptable when the Accept header accepts neither the "
      "result's image type nor application/json.",
      "servers", "url", "/", "description", "The server that answers this document.", "paths",
      paths, "components", "schemas", "Error", error_schema(), "ImageResult", image_result_schema(),
      "responses", error_responses(), "securitySchemes", schemes);
}

/* ---- docs/api.md: the same tables in Markdown (api_reference_markdown, `make docs`) ---- */

/* s in a table cell: '|' and '*' escaped, line breaks as blanks. */
static void md_cell(FILE *f, const char *s) {
  for (; s && *s; s++)
    if (*s == '|' || *s == '*')
      fprintf(f, "\\%c", *s);
    else
      fputc(*s == '\n' ? ' ' : *s, f);
}

/* The keys of object o, as "`a`, `b`". */
static void md_keys(FILE *f, json_t *o) {
  const char *k, *sep = "";
  json_t *v;
  json_object_foreach(o, k, v) {
    fprintf(f, "%s`%s`", sep, k);
    sep = ", ";
  }
}

/* Each key of object o with its description, as list items; those in the array req are
 * required. */
static void md_described(FILE *f, json_t *o, json_t *req, const char *what) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    const char *d = json_string_value(json_object_get(v, "description"));
    int required = 0;
    for (size_t i = 0; i < json_array_size(req); i++)
      required |= strcmp(json_string_value(json_array_get(req, i)), k) == 0;
    fprintf(f, "- %s `%s`%s%s%s\n", what, k, required ? " (required)" : "", d ? ": " : "",
            d ? d : "");
  }
}

/* GitHub's anchor of the heading "`METHOD PATH`": lower case, blanks to '-', '/' and '.' gone. */
static void md_anchor(FILE *f, const struct route *r) {
  char text[160];
  snprintf(text, sizeof(text), "%s %s", r->method, r->path);
  for (const char *c = text; *c; c++)
    if (isalnum((unsigned char)*c) || *c == '-' || *c == '_')
      fputc(tolower((unsigned char)*c), f);
    else if (*c == ' ')
      fputc('-', f);
}

static const char *md_type(const struct param_spec *s) {
  switch (s->type) {
  case PT_NUMBER:
    return "number";
  case PT_INT:
    return "integer";
  case PT_BOOL:
    return "boolean";
  case PT_ENUM:
    return "string";
  case PT_KERNEL:
    return "name or array";
  case PT_REGIONS:
    return "rectangles";
  }
  return "string"; /* a type added after this file: its text (any JSON value in params) */
}

static void md_values(FILE *f, const struct param_spec *s) {
  if (s->type == PT_NUMBER || s->type == PT_INT) fprintf(f, "%g to %g", s->min, s->max);
  for (int k = 0; s->choices && s->choices[k]; k++)
    fprintf(f, "%s`%s`", k ? ", " : "", s->choices[k]);
  if (s->type == PT_KERNEL)
    fprintf(f, ", or an odd square array of numbers up to %dx%d", CPU_CONV_MAX, CPU_CONV_MAX);
  if (s->type == PT_REGIONS)
    fprintf(f, "1 to %d of `[x, y, w, h]`, or `x,y,w,h;...` in the query", API_REGIONS_MAX);
}

static void md_params(FILE *f, const struct endpoint *ep) {
  fprintf(f, "\n| parameter | type | values | default | meaning |\n|---|---|---|---|---|\n");
  for (int i = 0; i < ep->nparams; i++) {
    const struct param_spec *s = &ep->params[i];
    json_t *doc = param_doc(ep, s);
    fprintf(f, "| `%s` | %s | ", s->name, md_type(s));
    md_values(f, s);
    if (s->def && *s->def)
      fprintf(f, " | `%s` | ", s->def);
    else
      fprintf(f, " | %s | ", s->def ? "none" : "required");
    md_cell(f, json_string_value(doc));
    fprintf(f, " |\n");
    json_decref(doc);
  }
}

/* The statuses route r can answer besides 200, lowest first. */
static void md_statuses(FILE *f, const struct route *r) {
  const char *sep = "";
  for (int st = 100; st < 600; st++) {
    int any = 0;
    for (int e = 0; e < NERRORS; e++) any |= errors[e].status == st && error_applies(r, e);
    if (any) fprintf(f, "%s%d", sep, st), sep = ", ";
  }
}

static void md_route(FILE *f, const struct route *r) {
  fprintf(f, "\n### `%s %s`\n\n%s\n\n", r->method, r->path, r->summary);
  if (is_upload(r)) {
    json_t *body = upload_body(r), *ok = image_ok(r);
    json_t *form = json_object_get(
        json_object_get(json_object_get(body, "content"), "multipart/form-data"), "schema");
    fprintf(f, "- Request: ");
    md_keys(f, json_object_get(body, "content"));
    fprintf(f, ". %s\n", json_string_value(json_object_get(body, "description")));
    md_described(f, json_object_get(form, "properties"), json_object_get(form, "required"),
                 "Form field");
    json_t *js = json_object_get(
        json_object_get(json_object_get(body, "content"), "application/json"), "schema");
    json_t *image =
        json_pack("{s:O}", "image", json_object_get(json_object_get(js, "properties"), "image"));
    md_described(f, image, json_object_get(js, "required"), "JSON body field");
    json_decref(image);
    fprintf(f, "- 200: ");
    md_keys(f, json_object_get(ok, "content"));
    fprintf(f, ". %s\n", json_string_value(json_object_get(ok, "description")));
    md_described(f, json_object_get(ok, "headers"), NULL, "Header");
    json_decref(body);
    json_decref(ok);
  } else {
    fprintf(f, "- 200: `%s`.\n", r->produces);
    if (r->flags & ROUTE_UNREADY) fprintf(f, "- 503: `%s`, when not ready.\n", r->produces);
    if (r->flags & ROUTE_CACHE)
      fprintf(f, "- 304: no body, when `If-None-Match` names the answer's `ETag`. The 200 has a "
                 "strong `ETag`, `Cache-Control: no-cache` and `Vary: Accept-Encoding`, and is "
                 "gzipped when `Accept-Encoding` allows it.\n");
  }
  fprintf(f, "- [Errors](#errors): ");
  md_statuses(f, r);
  fprintf(f, ".\n");
  if (r->ep) md_params(f, r->ep);
}

/* The JSON mode's object, field by field. */
static void md_result(FILE *f) {
  json_t *o = image_result_schema(), *req = json_object_get(o, "required"), *v;
  const char *k;
  fprintf(
      f,
      "\n## The JSON result\n\nAn image endpoint answers either the image or "
      "`application/json`: an object with the image in base64 and what the headers say. "
      "The Accept header chooses, by its q-values (RFC 9110 section 12.5.1; `*/*` and "
      "`image/*` count, the most specific range that matches wins): JSON when it weighs "
      "`application/json` above the result's image type, the image otherwise (on a tie "
      "too, and without Accept). The image type is the `format` parameter's; with "
      "`format=input` (the default) it is the upload's (or the one its format answers as: "
      "[Formats](#formats)), unless Accept gives another output format a higher q: "
      "`Accept: %s` on a %s upload answers %s, while `image/*` or `*/*` keep "
      "the upload's. So HTTPie's `application/json, */*;q=0.5` and `Accept: "
      "application/json` get JSON; an image type with `application/json;q=0.5` and `*/*` "
      "the image; and `application/json;q=0` alone, or an image type with an explicit "
      "`format` of another type, a 406 `not_acceptable` before any filtering. An Accept with no "
      "media range in it (`;;;,,`) is ignored, as a missing one is. "
      "Fields marked always are in every result; the others where they apply.\n\n"
      "| field | type | meaning |\n|---|---|---|\n",
      codec_mime(CODEC_AVIF), codec_format(CODEC_JPEG)->title, codec_format(CODEC_AVIF)->title);
  json_object_foreach(json_object_get(o, "properties"), k, v) {
    json_t *t = json_object_get(v, "type");
    int always = 0;
    for (size_t i = 0; i < json_array_size(req); i++)
      always |= strcmp(json_string_value(json_array_get(req, i)), k) == 0;
    fprintf(f, "| `%s` | ", k);
    for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1); i++)
      fprintf(f, "%s%s", i ? " or " : "",
              json_string_value(json_is_array(t) ? json_array_get(t, i) : t));
    const char *d = json_string_value(json_object_get(v, "description"));
    fprintf(f, " | %s%s", always ? "Always." : "", always && d ? " " : "");
    md_cell(f, d);
    fprintf(f, " |\n");
  }
  json_decref(o);
}

/* The format table (codecs/): what each format's media type and extensions are, what reads
 * and writes it, and what format=input answers it in. */
static void md_formats(FILE *f) {
  fprintf(f, "\n## Formats\n\nWhat blurd reads and writes, from the codecs' format table. An "
             "upload's bytes decide its format, whatever its Content-Type says; `format=` takes "
             "a format's name or one of its extensions. Only the first frame, page or primary "
             "image of a file is read (a GIF's animation, a TIFF's later pages, a HEIF's other "
             "images are not).\n\n"
             "| format | media type | extensions | read by | written by | format=input answers "
             "|\n|---|---|---|---|---|---|\n");
  for (int k = CODEC_NONE + 1; k < CODEC_NFORMATS; k++) {
    const struct codec_format_desc *d = codec_format(k);
    const char *as = d->as != CODEC_NONE ? codec_format(d->as)->name : d->name;
    fprintf(f, "| `%s` (%s) | `%s` | %s | %s | %s | %s |\n", d->name, d->title, d->mime, d->exts,
            d->reader ? d->reader : "-", d->writer ? d->writer : "-", !d->decode ? "-" : as);
  }
}

static void md_errors(FILE *f) {
  fprintf(f, "\n## Errors\n\nEvery error is `application/json`: `{\"error\": {\"status\": N, "
             "\"code\": \"...\", \"message\": \"...\"}}`. The message says what is wrong and "
             "what is accepted; the table gives each code's message when there is nothing more "
             "to say. 404 is for paths not listed above; 499 is never sent: the access log and "
             "the metrics count a request whose client left before its answer as 499.\n\n"
             "| status | code | message | headers |\n|---|---|---|---|\n");
  for (int st = 100; st < 600; st++)
    for (int e = 0; e < NERRORS; e++) {
      if (errors[e].status != st) continue;
      json_t *resp = error_response(e);
      fprintf(f, "| %d | `%s` | ", st, errors[e].code);
      md_cell(f, errors[e].msg);
      fprintf(f, " | ");
      md_keys(f, json_object_get(resp, "headers"));
      fprintf(f, " |\n");
      json_decref(resp);
    }
}

char *openapi_markdown(const struct route *routes, int nroutes) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  fprintf(f, "# HTTP API\n\n<!-- Generated by `make docs` from api/openapi.c: do not edit. -->\n\n"
             "Generated by `make docs` from the tables that blurd runs on and that `GET "
             "/openapi.json` is built from: the operations in `api/ops/` (their parameters and "
             "result fields), the other routes in `api/routes.c` and the errors in `api/api.h`. "
             "`make check-docs` and `make test` fail "
             "when this file differs from them. What the methods compute is in "
             "[methods.md](methods.md); limits, stage times, authentication and CORS are in "
             "[operations.md](operations.md).\n\n## Endpoints\n\n| endpoint | answers | what it "
             "does |\n|---|---|---|\n");
  for (int i = 0; i < nroutes; i++) {
    const struct route *r = &routes[i];
    fprintf(f, "| [`%s %s`](#", r->method, r->path);
    md_anchor(f, r);
    fprintf(f, ") | %s%s%s | ", is_upload(r) ? "the image, or JSON" : "`",
            is_upload(r) ? "" : r->produces, is_upload(r) ? "" : "`");
    md_cell(f, r->summary);
    fprintf(f, " |\n");
  }
  fprintf(f,
          "\nGET endpoints also answer HEAD.\n\n## Requests\n\n"
          "- An image endpoint takes the image as the form field `image` (or `file`) of a "
          "`multipart/form-data` body, or as the whole body with `Content-Type` one of the "
          "media types of [Formats](#formats) or `application/octet-stream`. The bytes decide "
          "the format.\n"
          "- Or the body is `application/json`: an object with the image file in standard "
          "base64 as `image` and the parameters as its other keys, as in `params`. A "
          "`data:` URL prefix (`data:` and a media type, then `;base64,`) is allowed and the `=` "
          "padding may be left out; line "
          "breaks are skipped, and any other character that is not base64 is a 400 "
          "`invalid_image_encoding` that gives its byte offset in the string. `--max-body` "
          "counts the whole JSON body; outside its `image` string it may have at most %d bytes "
          "(413 `body_too_large` beyond), %d values and %d levels of nesting (400 "
          "`invalid_json`).\n"
          "- Parameters come from the query string, and in a multipart upload also from the "
          "form field `params`: a JSON object of at most %d bytes (in a JSON body, from its "
          "other keys). A key given in both places "
          "must have the same value in both (`sigma=3` and `{\"sigma\": 3.0}` agree), else the "
          "answer is a 400 `conflicting_parameter`.\n"
          "- An unknown parameter or form field is a 400, so a typo never passes unnoticed.\n"
          "- Numbers are plain decimals (`2`, `2.5`, `1e1`): no blanks, `+`, hexadecimal (`0x10`), "
          "`inf` or `nan`. "
          "Booleans are `true` or `false`, or `1` or `0` in the query string. In `params` a "
          "number or a boolean may also be given as a string.\n"
          "- A parameter given for a method it does not apply to (`method=yvv&truncate=3`) is a "
          "400 that names the methods it applies to. With `method=auto` every parameter is "
          "accepted, and used when the chosen method takes it.\n"
          "- Each request's work is estimated from its parameters and its image's header, "
          "before the image is decoded; past the server's budget (`--max-cost`, seconds of one "
          "CPU core) the answer is a 422 `too_expensive` whose error object also gives "
          "`estimate_s` and `max_cost_s` ([operations.md](operations.md#limits-and-costs)).\n"
          "\n## Endpoints in detail\n",
          BODYSCAN_BYTES_MAX, BODYSCAN_VALUES_MAX, BODYSCAN_DEPTH_MAX, PARAMS_JSON_MAX);
  for (int i = 0; i < nroutes; i++) md_route(f, &routes[i]);
  md_result(f);
  md_formats(f);
  md_errors(f);
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

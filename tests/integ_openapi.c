/* Keeps GET /openapi.json true, against the real binary. The document must be OpenAPI 3.1
 * shaped; every route of the code (api_route) must be in it and every path in it must exist,
 * taking exactly the HTTP methods it lists (the others get 405); every parameter it lists must be
 * accepted with its default (or its minimum when required), in the query string, in params and
 * in a JSON body, and every choice of every enum too; every parameter the server accepts (its
 * unknown_parameter message, and /methods) must be in it; the statuses the server answers must be
 * listed for the route, and the JSON mode and the image headers must have what the document
 * promises; the request media types it lists (the form, the raw image, a JSON body) must be taken,
 * and others refused with 415; the image types of the 200 are exactly those the format parameter
 * answers (image/webp among them). Also checks the demo page's files: media types, the
 * Content-Security-Policy, no other origin. The answers that stay the same until a restart (the
 * page's files, /methods, this document) carry an ETag, answer 304 to If-None-Match, and are
 * gzipped when Accept-Encoding allows. */
#include "harness.h"
#include "test.h"

#include "../api/api.h"

#include <ctype.h>
#include <jansson.h>
#include <libdeflate.h>
#include <signal.h>
#include <strings.h>

static struct server srv;
static uint8_t *img; /* a small PNG for uploads */
static size_t img_len;

static json_t *get_json(const char *path, long want_status) {
  struct http_resp r;
  ASSERT(http_request(&srv, "GET", path, NULL, NULL, NULL, 0, &r) == 0);
  if (r.status != want_status) TEST_FAIL("GET %s: %ld: %.200s", path, r.status, r.body);
  json_t *j = json_loads(r.body, 0, NULL);
  if (!j) TEST_FAIL("GET %s: not JSON: %.200s", path, r.body);
  http_resp_free(&r);
  return j;
}

static json_t *doc; /* the document, fetched once */

static json_t *op(const char *path, const char *method) {
  return json_object_get(json_object_get(json_object_get(doc, "paths"), path), method);
}

static void test_shape(void) {
  const char *v = json_string_value(json_object_get(doc, "openapi"));
  ASSERT(v && strncmp(v, "3.1.", 4) == 0);
  json_t *info = json_object_get(doc, "info");
  ASSERT(json_is_string(json_object_get(info, "title")));
  ASSERT(json_is_string(json_object_get(info, "version")));
  ASSERT_INT(json_object_size(json_object_get(doc, "paths")), >, 5);
  /* the error codes are API_ERRORS's, in order */
  static const char *const codes[] = {
#define X(e, status, code, msg) code,
      ERRORS(X)
#undef X
  };
  json_t *e =
      json_object_get(json_object_get(json_object_get(doc, "components"), "schemas"), "Error");
  json_t *en = json_object_get(
      json_object_get(
          json_object_get(json_object_get(json_object_get(e, "properties"), "error"), "properties"),
          "code"),
      "enum");
  ASSERT_INT(json_array_size(en), ==, sizeof(codes) / sizeof(codes[0]));
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
    ASSERT_STR(json_string_value(json_array_get(en, i)), codes[i]);
}

static void lower(const char *s, char *out, size_t n) {
  size_t i = 0;
  for (; s[i] && i < n - 1; i++) out[i] = (char)tolower((unsigned char)s[i]);
  out[i] = 0;
}

/* Every route of the code is in the document, and nothing else is. */
static void test_routes_in_doc(void) {
  const char *method, *path;
  int n = 0, ops = 0;
  for (int i = 0; (path = api_route(i, &method)) != NULL; i++, n++) {
    char m[16];
    lower(method, m, sizeof(m));
    if (!op(path, m)) TEST_FAIL("route %s %s is not in /openapi.json", method, path);
    if (strcmp(m, "get") == 0) ASSERT(op(path, "head"));
  }
  const char *p, *k;
  json_t *item, *o;
  json_object_foreach(json_object_get(doc, "paths"), p, item) {
    json_object_foreach(item, k, o) ops += strcmp(k, "head") != 0;
  }
  ASSERT_INT(ops, ==, n);
  fprintf(stderr, "    %d routes, all in the document\n", n);
}

/* Asserts that status is one of the responses the document lists for path and method. */
static void expect_listed(const char *path, const char *m, long status) {
  char st[8];
  snprintf(st, sizeof(st), "%ld", status);
  if (!json_object_get(json_object_get(op(path, m), "responses"), st))
    TEST_FAIL("%s %s answered %ld, which /openapi.json does not list", m, path, status);
}

/* Every path in the document exists and takes exactly the methods it lists: the others get 405
 * with an Allow header naming the listed ones. OPTIONS is left out: a CORS preflight may answer
 * it on any path. */
static void test_doc_paths_exist(void) {
  static const char *const methods[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"};
  const char *p;
  json_t *item;
  struct http_resp r;
  int checked = 0;
  json_object_foreach(json_object_get(doc, "paths"), p, item) {
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++, checked++) {
      char m[16], allow[64];
      lower(methods[i], m, sizeof(m));
      ASSERT(http_request(&srv, methods[i], p, NULL, NULL, NULL, 0, &r) == 0);
      if (json_object_get(item, m)) {
        if (r.status == 404 || r.status == 405) TEST_FAIL("%s %s: %ld", methods[i], p, r.status);
        expect_listed(p, m, r.status);
      } else {
        if (r.status != 405) TEST_FAIL("%s %s: %ld, expected 405", methods[i], p, r.status);
        ASSERT(http_header(&r, "Allow", allow, sizeof(allow)));
        for (size_t k = 0; k < sizeof(methods) / sizeof(methods[0]); k++) {
          char mk[16];
          lower(methods[k], mk, sizeof(mk));
          ASSERT_INT(strstr(allow, methods[k]) != NULL, ==, json_object_get(item, mk) != NULL);
        }
      }
      http_resp_free(&r);
    }
  }
  ASSERT(http_request(&srv, "GET", "/no-such-path", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 404);
  http_resp_free(&r);
  fprintf(stderr, "    %d path x method requests as the document says\n", checked);
}

/* The text a client would send for schema's value v (a default or a choice). */
static void value_text(json_t *v, char *buf, size_t n) {
  if (json_is_integer(v))
    snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
  else if (json_is_real(v))
    snprintf(buf, n, "%.17g", json_real_value(v));
  else if (json_is_boolean(v))
    snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
  else
    snprintf(buf, n, "%s", json_string_value(v) ? json_string_value(v) : "");
}

/* A value for parameter p: its default, else its minimum, first choice or first example.
 * Returns 0 when the document gives none of them. */
static int param_value(json_t *p, char *buf, size_t n) {
  json_t *s = json_object_get(p, "schema"), *v = json_object_get(s, "default");
  if (!v) v = json_object_get(s, "minimum");
  if (!v) v = json_array_get(json_object_get(s, "enum"), 0);
  if (!v) v = json_array_get(json_object_get(s, "examples"), 0);
  if (!v) return 0;
  value_text(v, buf, n);
  return 1;
}

/* Required, or required unless others are given (x-required-unless: /blur's sigma). */
static int is_required(json_t *p) {
  return json_is_true(json_object_get(p, "required")) ||
         json_is_true(json_object_get(p, "x-required")) ||
         json_is_array(json_object_get(p, "x-required-unless"));
}

/* The query string of the required parameters of params other than skip, with their values;
 * -1 when one has no value. */
static int required_query(json_t *params, const char *skip, char *q, size_t n) {
  json_t *p;
  size_t i, len = 0;
  q[0] = 0;
  json_array_foreach(params, i, p) {
    const char *name = json_string_value(json_object_get(p, "name"));
    char v[64];
    if (!is_required(p) || strcmp(name, skip) == 0) continue;
    if (!param_value(p, v, sizeof(v))) return -1;
    len += (size_t)snprintf(q + len, n - len, "%s%s=%s", len ? "&" : "", name, v);
  }
  return 0;
}

/* POSTs the small image to path?query (params JSON or NULL); returns the status. */
static long post(const char *path, const char *query, const char *params, const char *accept,
                 struct http_resp *r) {
  char url[1024];
  snprintf(url, sizeof(url), "%s?%s", path, query);
  ASSERT(http_post_form(&srv, url, "image", img, img_len, params, accept, r) == 0);
  return r->status;
}

static void expect_200(const char *path, const char *query, const char *params) {
  struct http_resp r;
  if (post(path, query, params, NULL, &r) != 200)
    TEST_FAIL("POST %s?%s params %s: %ld %.300s", path, query, params ? params : "-", r.status,
              r.body);
  http_resp_free(&r);
}

/* The same with the parameters of params in a JSON body beside the image. */
static void expect_200_json(const char *path, const char *query, const char *params) {
  struct http_resp r;
  char url[1024], *body = json_body(img, img_len, "", params);
  snprintf(url, sizeof(url), "%s?%s", path, query);
  ASSERT(http_post_json(&srv, url, body, NULL, &r) == 0);
  if (r.status != 200) TEST_FAIL("POST %s JSON body %s: %ld %.300s", url, params, r.status, r.body);
  http_resp_free(&r);
  free(body);
}

/* Is name one of those that may replace a required parameter (x-required-unless)? */
static int is_alternative(json_t *params, const char *name) {
  json_t *p, *alt;
  size_t i, k;
  json_array_foreach(params, i, p) {
    json_array_foreach(json_object_get(p, "x-required-unless"), k, alt) {
      if (strcmp(json_string_value(alt), name) == 0) return 1;
    }
  }
  return 0;
}

/* Each parameter with its default (or minimum), in the query string, in params and in a JSON
 * body; each choice of each enum in the query string. */
static int accept_params(const char *path, json_t *params) {
  json_t *p, *c;
  size_t i, k;
  int n = 0;
  json_array_foreach(params, i, p) {
    const char *name = json_string_value(json_object_get(p, "name"));
    char q[512], v[64], full[640], js[256];
    if (is_alternative(params, name)) {
      fprintf(stderr, "    %s %s: an alternative to a required one (tests/integ_regions.c)\n", path,
              name);
      continue;
    }
    if (required_query(params, name, q, sizeof(q)) < 0 || !param_value(p, v, sizeof(v))) {
      fprintf(stderr, "    %s %s: no value to send, not tried\n", path, name);
      continue;
    }
    snprintf(full, sizeof(full), "%s%s%s=%s", q, q[0] ? "&" : "", name, v);
    expect_200(path, full, NULL);
    json_t *j = json_object(), *def = json_object_get(json_object_get(p, "schema"), "default");
    json_object_set_new(j, name, def ? json_incref(def) : json_string(v));
    char *text = json_dumps(j, JSON_COMPACT);
    snprintf(js, sizeof(js), "%s", text);
    free(text);
    json_decref(j);
    expect_200(path, q, js);
    expect_200_json(path, q, js);
    n += 3;
    json_array_foreach(json_object_get(json_object_get(p, "schema"), "enum"), k, c) {
      snprintf(full, sizeof(full), "%s%s%s=%s", q, q[0] ? "&" : "", name, json_string_value(c));
      expect_200(path, full, NULL);
      n++;
    }
  }
  return n;
}

/* Does the comma-separated list have name? */
static int in_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *s = strstr(list, name); s; s = strstr(s + 1, name))
    if ((s == list || s[-1] == ' ') && (s[n] == ',' || s[n] == 0)) return 1;
  return 0;
}

/* The names of what path accepts, from its unknown_parameter message ("...; /blur accepts: a,
 * b, c."), in list. Returns how many. */
static int server_names(const char *path, char *list, size_t n) {
  struct http_resp r;
  ASSERT_INT(post(path, "zz_no_such_param=1", NULL, NULL, &r), ==, 400);
  expect_listed(path, "post", r.status);
  json_t *j = json_loads(r.body, 0, NULL), *err = json_object_get(j, "error");
  ASSERT_STR(json_string_value(json_object_get(err, "code")), "unknown_parameter");
  const char *acc = strstr(json_string_value(json_object_get(err, "message")), "accepts: ");
  ASSERT(acc);
  snprintf(list, n, "%s", acc + 9);
  list[strcspn(list, ".")] = 0; /* the full stop */
  json_decref(j);
  http_resp_free(&r);
  int count = 1;
  for (const char *c = list; *c; c++) count += *c == ',';
  return count;
}

/* The document's parameters of path are exactly those the server accepts (its own list), those
 * of the params field's schema, and those /methods gives path's methods. */
static void same_names(const char *path, json_t *params, json_t *methods) {
  char list[512];
  json_t *p, *m, *mp;
  size_t i, k;
  int nlist = server_names(path, list, sizeof(list)), nmethods = 0;
  json_t *form = json_object_get(
      json_object_get(json_object_get(json_object_get(op(path, "post"), "requestBody"), "content"),
                      "multipart/form-data"),
      "schema");
  json_t *props = json_object_get(
      json_object_get(json_object_get(json_object_get(form, "properties"), "params"),
                      "contentSchema"),
      "properties");
  json_t *body = json_object_get(
      json_object_get(
          json_object_get(
              json_object_get(json_object_get(op(path, "post"), "requestBody"), "content"),
              "application/json"),
          "schema"),
      "properties");
  json_t *from_methods = json_object();
  json_array_foreach(methods, i, m) {
    if (strcmp(json_string_value(json_object_get(m, "endpoint")), path) != 0) continue;
    nmethods++;
    json_array_foreach(json_object_get(m, "params"), k, mp) json_object_set_new(
        from_methods, json_string_value(json_object_get(mp, "name")), json_true());
  }
  json_array_foreach(params, i, p) {
    const char *name = json_string_value(json_object_get(p, "name"));
    if (!in_list(list, name)) TEST_FAIL("%s: the server does not accept '%s'", path, name);
    ASSERT(json_object_get(props, name));
    ASSERT(json_object_get(body, name));
    if (nmethods) ASSERT(json_object_get(from_methods, name));
  }
  ASSERT_INT(json_array_size(params), ==, nlist);
  ASSERT_INT(json_object_size(props), ==, nlist);
  ASSERT_INT(json_object_size(body), ==, nlist + 1); /* and the image */
  ASSERT_STR(json_string_value(json_object_get(json_object_get(body, "image"), "contentEncoding")),
             "base64");
  if (nmethods) ASSERT_INT(json_object_size(from_methods), ==, nlist);
  json_decref(from_methods);
  fprintf(stderr, "    %s: %d parameters (%d methods in /methods)\n", path, nlist, nmethods);
}

/* What the 200 promises: the JSON mode's required fields (and no field it does not name), the
 * headers; and the statuses of a wrong media type and a corrupt image are listed. */
/* Fails unless every header of r besides HTTP's own is in the document's headers. */
static void expect_documented(const char *path, const struct http_resp *r, json_t *headers) {
  static const char *const http_own[] = {"Content-Type", "Content-Length",    "Date",
                                         "Connection",   "Transfer-Encoding", "Keep-Alive"};
  char name[128];
  for (const char *l = strchr(r->headers, '\n'); l && l[1]; l = strchr(l + 1, '\n')) {
    size_t n = strcspn(l + 1, ":\r\n");
    if (l[1 + n] != ':' || n >= sizeof(name)) continue; /* the status line, the blank line */
    snprintf(name, sizeof(name), "%.*s", (int)n, l + 1);
    int own = 0;
    for (size_t i = 0; i < sizeof(http_own) / sizeof(http_own[0]); i++)
      own |= strcasecmp(name, http_own[i]) == 0;
    const char *key;
    json_t *v;
    json_object_foreach(headers, key, v) own |= strcasecmp(name, key) == 0;
    if (!own) TEST_FAIL("%s: the server sends %s, which the document does not list", path, name);
  }
}

static void check_responses(const char *path, json_t *params) {
  struct http_resp r;
  char q[512], buf[384];
  const char *key;
  json_t *v;
  ASSERT(required_query(params, "", q, sizeof(q)) == 0);
  json_t *res = json_object_get(json_object_get(json_object_get(doc, "components"), "schemas"),
                                "ImageResult");
  ASSERT_INT(post(path, q, NULL, "application/json", &r), ==, 200);
  json_t *j = json_loads(r.body, 0, NULL), *f;
  size_t i;
  ASSERT(j);
  json_array_foreach(json_object_get(res, "required"), i, f)
      ASSERT(json_object_get(j, json_string_value(f)));
  json_object_foreach(j, key, v) {
    if (!json_object_get(json_object_get(res, "properties"), key))
      TEST_FAIL("%s: JSON field '%s' is not in ImageResult", path, key);
  }
  json_decref(j);
  http_resp_free(&r);
  ASSERT_INT(post(path, q, NULL, NULL, &r), ==, 200);
  json_t *headers = json_object_get(
      json_object_get(json_object_get(op(path, "post"), "responses"), "200"), "headers");
  json_object_foreach(headers, key, v) {
    const char *d = json_string_value(json_object_get(v, "description"));
    if (d && strncmp(d, "With --cors", 11) == 0) continue;  /* this server has no --cors */
    if (d && strncmp(d, "With format=", 12) == 0) continue; /* integ_colour asks for those */
    if (!http_header(&r, key, buf, sizeof(buf))) TEST_FAIL("%s: no %s header", path, key);
  }
  expect_documented(path, &r, headers);
  http_resp_free(&r);
  ASSERT(http_request(&srv, "POST", path, "text/plain", NULL, "hello", 5, &r) == 0);
  ASSERT_INT(r.status, ==, 415);
  expect_listed(path, "post", r.status);
  http_resp_free(&r);
  size_t len;
  uint8_t *bad = fixture("truncated.png", &len);
  char url[600];
  snprintf(url, sizeof(url), "%s?%s", path, q);
  ASSERT(http_post_form(&srv, url, "image", bad, len, NULL, NULL, &r) == 0);
  ASSERT_INT(r.status, ==, 422);
  expect_listed(path, "post", r.status);
  http_resp_free(&r);
  free(bad);
}

/* POSTs the small image to url in media type type, as the document describes it: a form, a JSON
 * body with the image in base64, or the raw image. Returns the status. */
static long post_as(const char *url, const char *type, struct http_resp *r) {
  if (strcmp(type, "multipart/form-data") == 0) {
    ASSERT(http_post_form(&srv, url, "image", img, img_len, NULL, NULL, r) == 0);
  } else if (strcmp(type, "application/json") == 0) {
    char *body = json_body(img, img_len, "", NULL);
    ASSERT(http_post_json(&srv, url, body, NULL, r) == 0);
    free(body);
  } else {
    ASSERT(http_request(&srv, "POST", url, type, NULL, img, img_len, r) == 0);
  }
  return r->status;
}

/* The request media types both ways: the server takes every one the document lists for path,
 * and answers 415 to each of these that it does not list. */
static void media_types(const char *path, json_t *params) {
  static const char *const others[] = {"multipart/form-data",
                                       "application/json",
                                       "image/png",
                                       "image/jpeg",
                                       "image/webp",
                                       "image/gif",
                                       "application/octet-stream",
                                       "application/xml",
                                       "text/json",
                                       "application/x-www-form-urlencoded"};
  json_t *content = json_object_get(json_object_get(op(path, "post"), "requestBody"), "content"),
         *v;
  const char *type;
  char q[512], url[640];
  struct http_resp r;
  ASSERT(required_query(params, "", q, sizeof(q)) == 0);
  snprintf(url, sizeof(url), "%s?%s", path, q);
  json_object_foreach(content, type, v) {
    if (post_as(url, type, &r) != 200)
      TEST_FAIL("POST %s as %s, which the document lists: %ld %.200s", url, type, r.status, r.body);
    http_resp_free(&r);
  }
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
    if (json_object_get(content, others[i])) continue;
    if (post_as(url, others[i], &r) != 415)
      TEST_FAIL("POST %s as %s, which the document does not list: %ld, expected 415", url,
                others[i], r.status);
    expect_listed(path, "post", r.status);
    http_resp_free(&r);
  }
  ASSERT(json_object_get(content, "application/json"));
}

/* The image media types of the 200 both ways: every choice of format but input is answered with
 * an image type the document lists, and every image type it lists is answered for some choice.
 * A WebP sent as image/webp comes back as image/webp where format keeps the input's. */
static void response_types(const char *path, json_t *params) {
  json_t *ok = json_object_get(json_object_get(op(path, "post"), "responses"), "200");
  json_t *content = json_object_get(ok, "content"), *p, *c, *v, *answered = json_object();
  size_t i, k;
  const char *type;
  char q[512], url[640], ct[128];
  struct http_resp r;
  ASSERT(required_query(params, "format", q, sizeof(q)) == 0);
  json_array_foreach(params, i, p) {
    if (strcmp(json_string_value(json_object_get(p, "name")), "format") != 0) continue;
    json_array_foreach(json_object_get(json_object_get(p, "schema"), "enum"), k, c) {
      int input = strcmp(json_string_value(c), "input") == 0;
      size_t len;
      uint8_t *webp = input ? fixture("lossless.webp", &len) : NULL;
      snprintf(url, sizeof(url), "%s?%s%sformat=%s", path, q, q[0] ? "&" : "",
               json_string_value(c));
      if (input)
        ASSERT(http_request(&srv, "POST", url, "image/webp", NULL, webp, len, &r) == 0);
      else
        ASSERT(http_post_form(&srv, url, "image", img, img_len, NULL, NULL, &r) == 0);
      ASSERT_INT(r.status, ==, 200);
      ASSERT(http_header(&r, "Content-Type", ct, sizeof(ct)));
      if (!json_object_get(content, ct)) TEST_FAIL("%s answered %s, which is not listed", url, ct);
      if (input) ASSERT_STR(ct, "image/webp");
      json_object_set_new(answered, ct, json_true());
      http_resp_free(&r);
      free(webp);
    }
  }
  json_object_foreach(content, type, v) {
    if (strncmp(type, "image/", 6) == 0 && !json_object_get(answered, type))
      TEST_FAIL("%s lists %s, but no format answers it", path, type);
  }
  ASSERT_INT(json_object_size(answered), >=, 1);
  ASSERT(json_object_get(content, "application/json"));
  json_decref(answered);
}

/* Every upload route (one with a requestBody): its parameters and responses. */
static void test_params(void) {
  json_t *methods = get_json("/methods", 200), *item;
  const char *p;
  int routes = 0, requests = 0;
  json_object_foreach(json_object_get(doc, "paths"), p, item) {
    json_t *post_op = json_object_get(item, "post");
    if (!json_object_get(post_op, "requestBody")) continue;
    json_t *params = json_object_get(post_op, "parameters");
    ASSERT(json_is_array(params));
    same_names(p, params, json_object_get(methods, "methods"));
    requests += accept_params(p, params);
    check_responses(p, params);
    media_types(p, params);
    response_types(p, params);
    routes++;
  }
  ASSERT_INT(routes, >=, 2); /* /blur and /convert at least */
  ASSERT(json_object_get(
      json_object_get(json_object_get(op("/blur", "post"), "requestBody"), "content"),
      "image/webp"));
  ASSERT(json_object_get(
      json_object_get(json_object_get(json_object_get(op("/blur", "post"), "responses"), "200"),
                      "content"),
      "image/webp"));
  fprintf(stderr, "    %d upload routes, %d requests with documented values: all 200\n", routes,
          requests);
  json_decref(methods);
}

/* Each GET route answers 200 (or a status it lists) with a media type the document gives; the
 * demo page's files carry the Content-Security-Policy and name no other origin. */
static void test_get_routes_and_page(void) {
  json_t *item;
  const char *p;
  struct http_resp r;
  char ct[128], csp[384];
  json_object_foreach(json_object_get(doc, "paths"), p, item) {
    json_t *get = json_object_get(item, "get");
    if (!get) continue;
    ASSERT(http_request(&srv, "GET", p, NULL, NULL, NULL, 0, &r) == 0);
    expect_listed(p, "get", r.status);
    ASSERT(http_header(&r, "Content-Type", ct, sizeof(ct)));
    json_t *content = json_object_get(
        json_object_get(json_object_get(json_object_get(get, "responses"), "200"), "content"), ct);
    if (!content) TEST_FAIL("GET %s: Content-Type %s is not in the document", p, ct);
    if (strncmp(ct, "text/", 5) == 0 && strncmp(ct, "text/plain", 10) != 0) { /* web/'s files */
      ASSERT(http_header(&r, "Content-Security-Policy", csp, sizeof(csp)));
      ASSERT(strstr(csp, "default-src 'self'"));
      ASSERT(!strstr(r.body, "http://") && !strstr(r.body, "https://"));
      ASSERT_INT(r.len, >, 100);
    }
    http_resp_free(&r);
  }
  ASSERT(http_request(&srv, "GET", "/", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_STR(http_header(&r, "Content-Type", ct, sizeof(ct)), "text/html; charset=utf-8");
  ASSERT(strstr(r.body, "src=\"/demo.js\"") && strstr(r.body, "href=\"/demo.css\""));
  http_resp_free(&r);
}

/* The security an operation lists follows the server: none without --api-key (Prism and other
 * validators then accept keyless requests); the key's two schemes with it, open paths none. */
static void test_security_follows_key(void) {
  ASSERT_INT(json_array_size(json_object_get(op("/blur", "post"), "security")), ==, 0);
  struct server keyed;
  const char *args[] = {"--api-key", "k", NULL}, *key[] = {"X-API-Key: k", NULL};
  server_start(&keyed, args);
  struct http_resp r;
  ASSERT(http_request_h(&keyed, "GET", "/openapi.json", key, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  json_t *d = json_loads(r.body, 0, NULL);
  ASSERT(d != NULL);
  json_t *paths = json_object_get(d, "paths");
  json_t *sec =
      json_object_get(json_object_get(json_object_get(paths, "/blur"), "post"), "security");
  ASSERT_INT(json_array_size(sec), ==, 2);
  ASSERT(json_object_get(json_array_get(sec, 0), "ApiKey") != NULL);
  json_t *open =
      json_object_get(json_object_get(json_object_get(paths, "/healthz"), "get"), "security");
  ASSERT_INT(json_array_size(open), ==, 0);
  json_decref(d);
  http_resp_free(&r);
  ASSERT_INT(server_stop(&keyed, SIGTERM), ==, 0);
}

/* GET path with the request headers h (NULL-terminated), expecting status. */
static void get_h(const char *path, const char *const *h, long status, struct http_resp *r) {
  ASSERT(http_request_h(&srv, "GET", path, h, NULL, 0, r) == 0);
  if (r->status != status) TEST_FAIL("GET %s: %ld, not %ld", path, r->status, status);
}

/* Each answer that stays the same has a strong ETag, Vary: Accept-Encoding and no-cache; gzip,
 * when asked, inflates to the same bytes under an ETag of its own; If-None-Match with either ETag
 * (weak or strong, alone or in a list, or "*") gets 304 with no body; another ETag gets 200. */
static void test_etag_and_gzip(void) {
  static const char *const paths[] = {"/openapi.json", "/methods", "/", "/demo.js", "/demo.css"};
  for (int i = 0; i < 5; i++) {
    const char *p = paths[i];
    struct http_resp plain, gz, r;
    char tag[64], gztag[64], buf[256], inm[200];
    get_h(p, NULL, 200, &plain);
    ASSERT(http_header(&plain, "ETag", tag, sizeof(tag)) && tag[0] == '"');
    ASSERT_STR(http_header(&plain, "Vary", buf, sizeof(buf)), "Accept-Encoding");
    ASSERT_STR(http_header(&plain, "Cache-Control", buf, sizeof(buf)), "no-cache");
    ASSERT(!http_header(&plain, "Content-Encoding", buf, sizeof(buf)));
    const char *ae[] = {"Accept-Encoding: br;q=1, gzip;q=0.5", NULL};
    get_h(p, ae, 200, &gz);
    ASSERT_STR(http_header(&gz, "Content-Encoding", buf, sizeof(buf)), "gzip");
    ASSERT(http_header(&gz, "ETag", gztag, sizeof(gztag)) && strcmp(gztag, tag) != 0);
    ASSERT_INT(gz.len, <, plain.len);
    uint8_t *out = malloc(plain.len);
    size_t n = 0;
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    ASSERT_INT(libdeflate_gzip_decompress(d, gz.body, gz.len, out, plain.len, &n), ==,
               LIBDEFLATE_SUCCESS);
    libdeflate_free_decompressor(d);
    ASSERT_INT(n, ==, plain.len);
    ASSERT(memcmp(out, plain.body, n) == 0);
    free(out);
    const char *no_gzip[] = {"Accept-Encoding: gzip;q=0, *", NULL};
    get_h(p, no_gzip, 200, &r);
    ASSERT(!http_header(&r, "Content-Encoding", buf, sizeof(buf)));
    ASSERT_INT(r.len, ==, plain.len);
    http_resp_free(&r);
    snprintf(inm, sizeof(inm), "If-None-Match: %s", tag);
    const char *same[] = {inm, NULL};
    get_h(p, same, 304, &r);
    ASSERT_INT(r.len, ==, 0);
    ASSERT(!http_header(&r, "Content-Length", buf, sizeof(buf)));
    ASSERT(!http_header(&r, "Content-Type", buf, sizeof(buf)));
    ASSERT_STR(http_header(&r, "ETag", buf, sizeof(buf)), tag);
    http_resp_free(&r);
    snprintf(inm, sizeof(inm), "If-None-Match: \"x\", W/%s", gztag);
    const char *weak_gz[] = {inm, "Accept-Encoding: gzip", NULL};
    get_h(p, weak_gz, 304, &r);
    http_resp_free(&r);
    const char *star[] = {"If-None-Match: *", NULL}, *other[] = {"If-None-Match: \"x\"", NULL};
    get_h(p, star, 304, &r);
    http_resp_free(&r);
    get_h(p, other, 200, &r);
    ASSERT_INT(r.len, ==, plain.len);
    http_resp_free(&r);
    snprintf(inm, sizeof(inm), "If-None-Match: %s", gztag); /* the gzip tag, identity asked */
    const char *mismatch[] = {inm, NULL};
    get_h(p, mismatch, 200, &r);
    http_resp_free(&r);
    http_resp_free(&gz);
    http_resp_free(&plain);
  }
}

int main(void) {
  img = fixture("red_square.png", &img_len);
  server_start(&srv, NULL);
  doc = get_json("/openapi.json", 200);
  RUN(test_shape);
  RUN(test_routes_in_doc);
  RUN(test_doc_paths_exist);
  RUN(test_params);
  RUN(test_get_routes_and_page);
  RUN(test_security_follows_key);
  RUN(test_etag_and_gzip);
  json_decref(doc);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  free(img);
  fprintf(stderr, "integ_openapi: ok\n");
  return 0;
}

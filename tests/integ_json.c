/* Integration tests of JSON request bodies against the real binary: {"image": "<base64>", ...}
 * with Content-Type application/json gives the same bytes as the multipart upload with the same
 * parameters on every image route (PNG and JPEG inputs, with and without a data: URL prefix,
 * wrapped at 76 columns), works with Accept: application/json, agrees and conflicts with the
 * query string as the params field does, and answers every malformed body with its 4xx and
 * code: bad base64 (with the byte offset and character), a missing or non-string image, JSON
 * that is no object, parameter errors, and the body and image limits. */
#include "harness.h"
#include "test.h"

#include "../api/api.h"

#include <jansson.h>
#include <signal.h>

static struct server srv;

/* The standard base64 of fixture name (json_body's), as a new string. */
static char *fixture_base64(const char *name) {
  size_t len;
  uint8_t *img = fixture(name, &len);
  char *body = json_body(img, len, "", NULL);
  json_t *j = json_loads(body, 0, NULL);
  ASSERT(j);
  char *b64 = strdup(json_string_value(json_object_get(j, "image")));
  json_decref(j);
  free(body);
  free(img);
  return b64;
}

/* b64 with a line break after every 76 characters, as MIME and base64(1) write it. */
static char *wrap76(const char *b64) {
  size_t n = strlen(b64), w = 0;
  char *out = malloc(n + n / 76 + 1);
  ASSERT(out);
  for (size_t i = 0; i < n; i++) {
    out[w++] = b64[i];
    if (i % 76 == 75) out[w++] = '\n';
  }
  out[w] = 0;
  return out;
}

/* {"image": image} with the keys of the JSON object params (or NULL) besides, as text. */
static char *body_with(const char *image, const char *params) {
  json_t *j = params ? json_loads(params, 0, NULL) : json_object();
  ASSERT(j);
  json_object_set_new(j, "image", json_string(image));
  char *text = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  return text;
}

static void expect_same(const struct http_resp *a, const struct http_resp *b, const char *what) {
  char ta[128], tb[128];
  if (a->status != 200 || b->status != 200)
    TEST_FAIL("%s: %ld and %ld: %.200s %.200s", what, a->status, b->status, a->body, b->body);
  ASSERT_STR(http_header(a, "Content-Type", ta, sizeof(ta)),
             http_header(b, "Content-Type", tb, sizeof(tb)));
  if (a->len != b->len || memcmp(a->body, b->body, a->len) != 0)
    TEST_FAIL("%s: %zu bytes from multipart, %zu from JSON, not the same", what, a->len, b->len);
}

static const struct {
  const char *path, *query, *params, *fixture;
} same_cases[] = {
    {"/blur", "", "{\"sigma\":3,\"method\":\"separable\"}", "gray_alpha.png"},
    {"/blur", "sigma=2", "{\"method\":\"yvv\",\"format\":\"jpeg\",\"quality\":80}",
     "progressive.jpg"},
    {"/blur", "", "{\"sigma\":\"1.5\",\"method\":\"fir\",\"truncate\":3,\"psnr\":false}",
     "rgba16.png"},
    {"/convert", "", "{\"format\":\"png\",\"compression\":1}", "orient6.jpg"},
    {"/convert", "", NULL, "rgba16.png"},
    {"/variance", "", "{\"radius\":3,\"output\":\"variance\",\"window\":\"box\"}", "gray.jpg"},
    {"/contrast", "", "{\"radius\":4,\"a\":0.7,\"format\":\"jpeg\"}", "interlaced.png"},
    {"/convolve", "", "{\"kernel\":[[0,-1,0],[-1,5,-1],[0,-1,0]],\"format\":\"png\"}",
     "progressive.jpg"},
    {"/convolve", "kernel=emboss", "{\"bias\":100}", "gray_alpha.png"},
    {"/sharpen", "", "{\"sigma\":2,\"amount\":1.5,\"luma\":true}", "interlaced.png"},
    {"/blur", "", "{\"sigma_x\":1,\"sigma_y\":6,\"regions\":[[5,5,30,20]],\"feather\":3}",
     "rgba16.png"},
    {"/pixelate", "block=5", "{\"regions\":[[5,5,30,20]],\"feather\":2}", "rgba16.png"},
};
#define NSAME (sizeof(same_cases) / sizeof(same_cases[0]))

/* Every image route's answer to a JSON body is the multipart answer, byte for byte: the base64
 * alone, after a data: prefix, and wrapped at 76 columns. */
static void test_same_bytes(void) {
  const char *method, *path;
  for (int i = 0; (path = api_route(i, &method)) != NULL; i++) { /* every image route is here */
    int found = 0;
    for (size_t k = 0; k < NSAME; k++) found |= strcmp(same_cases[k].path, path) == 0;
    if (strcmp(method, "POST") == 0 && !found) TEST_FAIL("no JSON body case for POST %s", path);
  }
  int requests = 0;
  for (size_t k = 0; k < NSAME; k++) {
    size_t len;
    uint8_t *img = fixture(same_cases[k].fixture, &len);
    char url[256];
    struct http_resp form, r;
    snprintf(url, sizeof(url), "%s?%s", same_cases[k].path, same_cases[k].query);
    ASSERT(http_post_form(&srv, url, "image", img, len, same_cases[k].params, NULL, &form) == 0);
    const char *prefix = strstr(same_cases[k].fixture, ".png") ? "data:image/png;base64,"
                                                               : "data:image/jpeg;base64,";
    char *b64 = fixture_base64(same_cases[k].fixture), *wrapped = wrap76(b64);
    char *bodies[] = {json_body(img, len, "", same_cases[k].params),
                      json_body(img, len, prefix, same_cases[k].params),
                      body_with(wrapped, same_cases[k].params)};
    for (int b = 0; b < 3; b++) {
      char what[300];
      snprintf(what, sizeof(what), "%s %s, body %d", url, same_cases[k].fixture, b);
      ASSERT(http_post_json(&srv, url, bodies[b], NULL, &r) == 0);
      expect_same(&form, &r, what);
      http_resp_free(&r);
      free(bodies[b]);
      requests++;
    }
    http_resp_free(&form);
    free(wrapped);
    free(b64);
    free(img);
  }
  fprintf(stderr, "    %d JSON bodies on %zu cases: the multipart bytes\n", requests, NSAME);
}

/* A JSON body with Accept: application/json answers what the multipart upload does. */
static void test_json_answer(void) {
  static const char *const fields[] = {"image",     "width",   "height",          "channels",
                                       "bit_depth", "format",  "method",          "sigma",
                                       "psnr_db",   "backend", "requested_method"};
  size_t len;
  uint8_t *img = fixture("camera.png", &len);
  struct http_resp form, r;
  const char *params = "{\"sigma\":4,\"format\":\"jpeg\"}";
  ASSERT(http_post_form(&srv, "/blur", "image", img, len, params, "application/json", &form) == 0);
  char *body = json_body(img, len, "data:image/png;base64,", params);
  ASSERT(http_post_json(&srv, "/blur", body, "application/json", &r) == 0);
  ASSERT_INT(form.status, ==, 200);
  ASSERT_INT(r.status, ==, 200);
  json_t *a = json_loads(form.body, 0, NULL), *b = json_loads(r.body, 0, NULL);
  ASSERT(a && b);
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    json_t *va = json_object_get(a, fields[i]), *vb = json_object_get(b, fields[i]);
    if (!va || !json_equal(va, vb)) TEST_FAIL("field %s differs", fields[i]);
  }
  ASSERT_INT(json_integer_value(json_object_get(b, "width")), ==, 512);
  ASSERT_STR(json_string_value(json_object_get(b, "format")), "jpeg");
  json_decref(a);
  json_decref(b);
  http_resp_free(&r);
  http_resp_free(&form);
  free(body);
  free(img);
}

/* Query and body: the same value in both is fine (3 and 3.0), another is a 400; the
 * Content-Type's parameters and case do not matter. */
static void test_query_and_body(void) {
  size_t len;
  uint8_t *img = fixture("gray_alpha.png", &len);
  struct http_resp form, r;
  ASSERT(http_post_form(&srv, "/blur?sigma=3&method=separable", "image", img, len, NULL, NULL,
                        &form) == 0);
  char *body = json_body(img, len, "", "{\"sigma\":3.0,\"method\":\"separable\"}");
  ASSERT(http_post_json(&srv, "/blur?sigma=3", body, NULL, &r) == 0);
  expect_same(&form, &r, "query and body agree");
  http_resp_free(&r);
  const char *types[] = {"application/json; charset=utf-8", "Application/JSON"};
  for (int i = 0; i < 2; i++) {
    ASSERT(http_request(&srv, "POST", "/blur?sigma=3", types[i], NULL, body, strlen(body), &r) ==
           0);
    expect_same(&form, &r, types[i]);
    http_resp_free(&r);
  }
  ASSERT(http_post_json(&srv, "/blur?sigma=4", body, NULL, &r) == 0);
  http_expect_error(&r, 400, "conflicting_parameter");
  ASSERT(strstr(r.body, "sigma is '4' in the query string but has another value in the JSON body"));
  http_resp_free(&r);
  free(body);
  body = json_body(img, len, "", "{\"kernel\":\"box\"}");
  ASSERT(http_post_json(&srv, "/convolve?kernel=edge", body, NULL, &r) == 0);
  http_expect_error(&r, 400, "conflicting_parameter");
  http_resp_free(&r);
  free(body);
  http_resp_free(&form);
  free(img);
}

struct error_case {
  const char *path;
  const char *body; /* "%s" stands for the base64 of red_square.png */
  long status;
  const char *code;
  const char *says; /* in the message */
};

static const struct error_case error_cases[] = {
    /* bad base64: the byte offset in the image string and the character */
    {"/blur", "{\"image\":\"iVBORw0K*GgoAAAANSUhEUg==\",\"sigma\":3}", 400,
     "invalid_image_encoding", "'*' at byte 8 is not a base64 character"},
    {"/blur", "{\"image\":\"data:image/png;base64,iVBO Rw0K\",\"sigma\":3}", 400,
     "invalid_image_encoding", "a space, 0x20 at byte 26"},
    {"/blur", "{\"image\":\"iVBORw0K-_\",\"sigma\":3}", 400, "invalid_image_encoding",
     "'-' at byte 8"},
    {"/blur", "{\"image\":\"iVBOR\\u00e9w0K\",\"sigma\":3}", 400, "invalid_image_encoding",
     "byte 0xc3 at byte 5"},
    {"/convert", "{\"image\":\"iVBORw0KGg=\"}", 400, "invalid_image_encoding",
     "the padding at byte 10 has 1 '='; a last group of 2 characters takes 2"},
    {"/convert", "{\"image\":\"iVBORw0KGgo==\"}", 400, "invalid_image_encoding",
     "the padding at byte 11 has 2 '='; a last group of 3 characters takes 1"},
    {"/convert", "{\"image\":\"iVBO=Rw0K\"}", 400, "invalid_image_encoding",
     "'R' at byte 5 follows the padding '=' at byte 4"},
    {"/convert", "{\"image\":\"iVBORw0KG\"}", 400, "invalid_image_encoding",
     "its last group, at byte 8, has 1 character"},
    {"/convert", "{\"image\":\"data:image/png,iVBORw0K\"}", 400, "invalid_image_encoding",
     "without ';base64,'"},
    /* no image */
    {"/blur", "{\"sigma\":3}", 400, "missing_image", "The JSON body has no 'image'"},
    {"/blur", "{\"image\":42,\"sigma\":3}", 400, "missing_image", "'image' is a number"},
    {"/blur", "{\"image\":null,\"sigma\":3}", 400, "missing_image", "'image' is null"},
    {"/blur", "{\"image\":[\"%s\"],\"sigma\":3}", 400, "missing_image", "'image' is an array"},
    {"/blur", "{\"image\":\"\",\"sigma\":3}", 400, "missing_image", "'image' is empty"},
    {"/blur", "{\"image\":\"data:image/png;base64,\",\"sigma\":3}", 400, "missing_image",
     "'image' is empty"},
    /* not a JSON object: the params field's error, with jansson's line and column */
    {"/blur", "{\"image\": \"%s\", \"sigma\": 3", 400, "invalid_json",
     "The JSON body must be a JSON object: "},
    {"/blur", "{\n\"sigma\": 3,\n\"image\" \"%s\"}", 400, "invalid_json", "(line 3, column"},
    {"/blur", "", 400, "invalid_json", "(line 1, column"},
    {"/blur", "[\"%s\"]", 400, "invalid_json", "it is an array"},
    {"/blur", "\"%s\"", 400, "invalid_json", "'[' or '{' expected"},
    {"/blur", "{\"image\":\"%s\",\"image\":\"%s\",\"sigma\":3}", 400, "invalid_json",
     "duplicate object key"},
    /* the parameters, as in params */
    {"/blur", "{\"image\":\"%s\",\"sigma\":3,\"sigmaa\":1}", 400, "unknown_parameter",
     "Unknown parameter 'sigmaa' in the JSON body"},
    {"/blur", "{\"image\":\"%s\",\"sigma\":1000}", 400, "invalid_parameter",
     "sigma must be a number from 0.5 to 300; got '1000'"},
    {"/blur", "{\"image\":\"%s\",\"sigma\":true}", 400, "invalid_parameter", "sigma must be"},
    {"/blur", "{\"image\":\"%s\",\"sigma\":3,\"psnr\":\"maybe\"}", 400, "invalid_parameter",
     "psnr must be one of false, true"},
    {"/blur", "{\"image\":\"%s\",\"sigma\":3,\"quality\":9.5}", 400, "invalid_parameter",
     "quality must be a whole number"},
    {"/blur", "{\"image\":\"%s\",\"sigma\":3,\"method\":\"box\"}", 400, "unknown_method",
     "Unknown method 'box'"},
    {"/blur", "{\"image\":\"%s\",\"sigma\":3,\"method\":\"yvv\",\"truncate\":3}", 400,
     "invalid_parameter", "truncate does not apply to method yvv"},
    {"/blur", "{\"image\":\"%s\"}", 400, "missing_parameter", "sigma is required"},
    {"/convolve", "{\"image\":\"%s\",\"kernel\":[1,2]}", 400, "invalid_parameter",
     "kernel has 2 numbers"},
    {"/blur", "{\"image\":\"***\",\"sigma\":1000}", 400, "invalid_parameter", "sigma must be"},
    /* base64 that decodes to no image, or to a damaged one: as an upload */
    {"/blur", "{\"image\":\"aGVsbG8gd29ybGQ=\",\"sigma\":3}", 415, "unsupported_media_type", ""},
    {"/blur", "{\"image\":\"iVBORw0KGgoAAAANSUhEUgAAAEAAAABA\",\"sigma\":3}", 422,
     "undecodable_image", ""},
};

/* Every malformed JSON body: its status, code and what the message says. */
static void test_errors(void) {
  char *b64 = fixture_base64("red_square.png");
  for (size_t i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++) {
    const struct error_case *c = &error_cases[i];
    char body[1024], url[64];
    struct http_resp r;
    snprintf(body, sizeof(body), c->body, b64, b64);
    snprintf(url, sizeof(url), "%s", c->path);
    ASSERT(http_post_json(&srv, url, body, NULL, &r) == 0);
    if (r.status != c->status || !strstr(r.body, c->code) || !strstr(r.body, c->says))
      TEST_FAIL("case %zu (%s): %ld %s, expected %ld %s saying \"%s\"", i, c->body, r.status,
                r.body, c->status, c->code, c->says);
    http_expect_error(&r, c->status, c->code);
    http_resp_free(&r);
  }
  fprintf(stderr, "    %zu malformed JSON bodies: each its 4xx and code\n",
          sizeof(error_cases) / sizeof(error_cases[0]));
  free(b64);
}

/* The base64 cut short: in the middle of a group it is bad base64; on a group boundary it
 * decodes to a truncated PNG, which is what an upload of those bytes gets. */
static void test_truncated(void) {
  char *b64 = fixture_base64("coffee.png");
  size_t n = strlen(b64) / 2 / 4 * 4;
  struct http_resp r;
  char at[64];
  b64[n + 1] = 0;
  char *body = body_with(b64, "{\"sigma\":3}");
  ASSERT(http_post_json(&srv, "/blur", body, NULL, &r) == 0);
  http_expect_error(&r, 400, "invalid_image_encoding");
  snprintf(at, sizeof(at), "its last group, at byte %zu, has 1 character", n);
  ASSERT(strstr(r.body, at));
  http_resp_free(&r);
  free(body);
  b64[n] = 0;
  body = body_with(b64, "{\"sigma\":3}");
  ASSERT(http_post_json(&srv, "/blur", body, NULL, &r) == 0);
  http_expect_error(&r, 422, "undecodable_image");
  http_resp_free(&r);
  free(body);
  free(b64);
}

/* --max-body counts the JSON body (a third larger than its image); the decoded image meets the
 * same pixel and side limits as an upload, with the same answer. */
static void test_limits(void) {
  struct server s;
  struct http_resp r, up;
  size_t len;
  uint8_t *img = fixture("camera.png", &len); /* 139512 bytes, 512x512 gray */
  char *body = json_body(img, len, "", "{\"sigma\":2}");
  ASSERT_INT(strlen(body), >, 180000);
  const char *args[] = {"--max-body", "160000", NULL};
  server_start(&s, args);
  ASSERT(http_request(&s, "POST", "/blur?sigma=2", "image/png", NULL, img, len, &r) == 0);
  ASSERT_INT(r.status, ==, 200); /* the raw image fits */
  http_resp_free(&r);
  ASSERT(http_post_json(&s, "/blur", body, NULL, &r) == 0);
  http_expect_error(&r, 413, "body_too_large");
  ASSERT(strstr(r.body, "limit of 160000 bytes") != NULL);
  http_resp_free(&r);
  /* the file itself sent as application/json (HTTPie's default for stdin): said so, at once */
  ASSERT(http_request(&s, "POST", "/blur?sigma=2", "application/json", NULL, img, len, &r) == 0);
  http_expect_error(&r, 400, "invalid_json");
  ASSERT(strstr(r.body, "is not JSON (its first byte is 0x89)") != NULL);
  http_resp_free(&r);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  const char *const limits[][2] = {
      {"--max-pixels", "262143"}, {"--max-width", "511"}, {"--max-height", "500"}};
  for (int i = 0; i < 3; i++) {
    const char *a[] = {limits[i][0], limits[i][1], NULL};
    server_start(&s, a);
    ASSERT(http_post_json(&s, "/blur", body, NULL, &r) == 0);
    http_expect_error(&r, 422, "image_too_large");
    ASSERT(http_post_form(&s, "/blur?sigma=2", "image", img, len, NULL, NULL, &up) == 0);
    http_expect_error(&up, 422, "image_too_large");
    ASSERT_STR(r.body, up.body); /* the same message */
    http_resp_free(&up);
    http_resp_free(&r);
    ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  }
  free(body);
  free(img);
}

int main(void) {
  server_start(&srv, NULL);
  RUN(test_same_bytes);
  RUN(test_json_answer);
  RUN(test_query_and_body);
  RUN(test_errors);
  RUN(test_truncated);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  RUN(test_limits);
  fprintf(stderr, "integ_json: all passed\n");
  return 0;
}

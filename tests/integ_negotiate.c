/* Integration tests of content negotiation against the real binary (http/negotiate.c): the
 * Accept headers of common clients on a PNG upload give the answer docs/api.md describes.
 * HTTPie's `application/json` then everything at q=0.5 gets JSON; `image/png,
 * application/json;q=0.5` the PNG; `application/json;q=0`, a type blurd does not write, or
 * `image/webp` with format=png a 406 JSON error, before any filtering; with no format, Accept
 * picks the output format. */
#include "harness.h"
#include "test.h"

#include <jansson.h>
#include <signal.h>

static struct server srv;

/* POSTs camera.png raw to path with this Accept; the answer in r. */
static void post(const char *path, const char *accept, struct http_resp *r) {
  size_t len;
  uint8_t *img = fixture("camera.png", &len);
  ASSERT_INT(http_request(&srv, "POST", path, "image/png", accept, img, len, r), ==, 0);
  free(img);
}

static void expect_type(const struct http_resp *r, long status, const char *type) {
  char ct[128];
  if (r->status != status) TEST_FAIL("status %ld, want %ld: %.300s", r->status, status, r->body);
  ASSERT_STR(http_header(r, "Content-Type", ct, sizeof(ct)), type);
}

static void test_httpie(void) {
  struct http_resp r;
  char v[64];
  post("/blur?sigma=2", "application/json, */*;q=0.5", &r);
  expect_type(&r, 200, "application/json");
  ASSERT_STR(http_header(&r, "Vary", v, sizeof(v)), "Accept"); /* the JSON answer varies too */
  json_t *j = json_loads(r.body, 0, NULL);
  ASSERT(j != NULL);
  ASSERT_STR(json_string_value(json_object_get(j, "format")), "png");
  ASSERT_INT(strlen(json_string_value(json_object_get(j, "image"))), >, 1000);
  json_decref(j);
  http_resp_free(&r);
}

static void test_image_preferred(void) {
  struct http_resp r;
  post("/blur?sigma=2", "image/png, application/json;q=0.5", &r);
  expect_type(&r, 200, "image/png");
  ASSERT(r.len > 8 && memcmp(r.body, "\x89PNG", 4) == 0);
  http_resp_free(&r);
  post("/blur?sigma=2", "image/*, application/json", &r); /* a tie: the image */
  expect_type(&r, 200, "image/png");
  http_resp_free(&r);
  post("/blur?sigma=2", ";;;,,", &r); /* no media range: ignored, as a missing Accept */
  expect_type(&r, 200, "image/png");
  http_resp_free(&r);
}

static void test_not_acceptable(void) {
  struct http_resp r;
  post("/blur?sigma=2", "application/json;q=0", &r);
  http_expect_error(&r, 406, "not_acceptable");
  ASSERT(strstr(r.body, "image/png") != NULL);
  ASSERT(http_stage(&r, "filter", NULL, 0) < 0); /* refused before filtering */
  http_resp_free(&r);
  post("/blur?sigma=2", "image/bmp", &r); /* a type blurd does not write */
  http_expect_error(&r, 406, "not_acceptable");
  char v[64];
  ASSERT_STR(http_header(&r, "Vary", v, sizeof(v)), "Accept"); /* and so does the 406 */
  http_resp_free(&r);
  post("/blur?sigma=2&format=png", "image/webp", &r); /* format= wins over Accept */
  http_expect_error(&r, 406, "not_acceptable");
  http_resp_free(&r);
}

/* With no format=, Accept picks the output among the formats blurd writes: the one it ranks
 * highest, the upload's own on a tie. Every answer says it varies by Accept. */
static void test_accept_picks_format(void) {
  struct http_resp r;
  char v[64];
  post("/blur?sigma=2", "image/webp", &r);
  expect_type(&r, 200, "image/webp");
  ASSERT(r.len > 12 && memcmp(r.body + 8, "WEBP", 4) == 0);
  ASSERT_STR(http_header(&r, "Vary", v, sizeof(v)), "Accept");
  http_resp_free(&r);
  post("/blur?sigma=2", "image/avif,image/webp;q=0.9,image/png;q=0.8,*/*;q=0.5", &r);
  expect_type(&r, 200, "image/avif");
  ASSERT(r.len > 12 && memcmp(r.body + 4, "ftypavif", 8) == 0);
  http_resp_free(&r);
  post("/blur?sigma=2", "image/png,image/webp", &r); /* a tie keeps the upload's PNG */
  expect_type(&r, 200, "image/png");
  http_resp_free(&r);
  post("/blur?sigma=2", "image/heic", &r); /* HEIC is read, not written */
  http_expect_error(&r, 406, "not_acceptable");
  http_resp_free(&r);
}

int main(void) {
  server_start(&srv, NULL);
  RUN(test_httpie);
  RUN(test_image_preferred);
  RUN(test_not_acceptable);
  RUN(test_accept_picks_format);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  fprintf(stderr, "integ_negotiate: all passed\n");
  return 0;
}

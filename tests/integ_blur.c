/* Integration tests of the HTTP API against the real binary: every input mode, every parameter
 * error, every error status, 16-bit and alpha PNGs, grayscale and progressive JPEGs, the PSNR
 * and timing headers, the JSON mode, a full queue, and a SIGTERM drain. */
#include "harness.h"
#include "test.h"

#include "../codecs/codecs.h"

#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct server srv; /* the default server, shared by most tests */

/* The backend the server must report: "cpu" unless BLURD_EXPECT_BACKEND says otherwise (the
 * GPU run sets "cuda:"); compared as a prefix. */
static const char *expected_backend(void) {
  return getenv("BLURD_EXPECT_BACKEND") ? getenv("BLURD_EXPECT_BACKEND") : "cpu";
}

static void expect_backend(const char *got) {
  const char *want = expected_backend();
  if (!got || strncmp(got, want, strlen(want)) != 0)
    TEST_FAIL("backend '%s', expected '%s'", got ? got : "(none)", want);
}

/* Decodes a response body as an image; aborts when it is not one. */
static void decode_body(const struct http_resp *r, struct codec_image *img) {
  char msg[256];
  enum codec_status st = codec_decode((const uint8_t *)r->body, r->len,
                                      &(struct codec_limits){0, 0, 0}, img, msg, sizeof(msg));
  if (st != CODEC_OK) TEST_FAIL("response body is not an image: %s", msg);
}

static void post_fixture(const char *name, const char *query, struct http_resp *r) {
  size_t len;
  uint8_t *img = fixture(name, &len);
  char path[512];
  snprintf(path, sizeof(path), "/blur?%s", query);
  ASSERT(http_post_form(&srv, path, "image", img, len, NULL, NULL, r) == 0);
  free(img);
}

static void test_health(void) {
  struct http_resp r;
  char buf[64];
  ASSERT(http_request(&srv, "GET", "/healthz", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
  ASSERT(http_request(&srv, "GET", "/readyz", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  json_t *j = json_loads(r.body, 0, NULL);
  expect_backend(json_string_value(json_object_get(j, "backend")));
  ASSERT(json_is_true(json_object_get(j, "ready")));
  json_decref(j);
  http_resp_free(&r);
  ASSERT(http_request(&srv, "GET", "/nope", NULL, NULL, NULL, 0, &r) == 0);
  http_expect_error(&r, 404, "not_found");
  http_resp_free(&r);
  ASSERT(http_request(&srv, "GET", "/blur?sigma=2", NULL, NULL, NULL, 0, &r) == 0);
  http_expect_error(&r, 405, "method_not_allowed");
  ASSERT_STR(http_header(&r, "Allow", buf, sizeof(buf)), "POST, OPTIONS");
  http_resp_free(&r);
  /* OPTIONS without Origin (not a CORS preflight): what the path takes */
  ASSERT(http_request(&srv, "OPTIONS", "/blur", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 204);
  ASSERT_STR(http_header(&r, "Allow", buf, sizeof(buf)), "POST, OPTIONS");
  http_resp_free(&r);
  ASSERT(http_request(&srv, "OPTIONS", "/healthz", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 204);
  ASSERT_STR(http_header(&r, "Allow", buf, sizeof(buf)), "GET, HEAD, OPTIONS");
  http_resp_free(&r);
}

static void test_methods(void) {
  struct http_resp r;
  ASSERT(http_request(&srv, "GET", "/methods", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  json_t *j = json_loads(r.body, 0, NULL), *m;
  size_t i;
  int found = 0;
  ASSERT(j);
  json_array_foreach(json_object_get(j, "methods"), i, m) {
    const char *name = json_string_value(json_object_get(m, "name"));
    if (strcmp(name, "yvv") && strcmp(name, "separable")) continue;
    found++;
    json_t *p, *backends = json_object_get(m, "backends");
    size_t k;
    ASSERT_STR(json_string_value(json_array_get(backends, 0)), "cpu");
    json_array_foreach(json_object_get(m, "params"), k, p) {
      if (strcmp(json_string_value(json_object_get(p, "name")), "sigma") != 0) continue;
      ASSERT_DBL(json_number_value(json_object_get(p, "min")), ==, 0.5);
      ASSERT_DBL(json_number_value(json_object_get(p, "max")), ==, 300);
      ASSERT(json_is_false(json_object_get(p, "required"))); /* or sigma_x and sigma_y */
      ASSERT(!json_object_get(p, "default"));
    }
  }
  ASSERT_INT(found, ==, 2);
  /* every method, auto included, with its accuracy and only the parameters it takes (the other
   * endpoints' entries are tested in integ_local.c) */
  int blur = 0;
  json_array_foreach(json_object_get(j, "methods"), i, m) {
    const char *name = json_string_value(json_object_get(m, "name"));
    if (strcmp(json_string_value(json_object_get(m, "endpoint")), "/blur") != 0) continue;
    blur++;
    ASSERT(strlen(json_string_value(json_object_get(m, "accuracy"))) > 5);
    int coeffs = 0, truncate = 0;
    json_t *p;
    size_t k;
    json_array_foreach(json_object_get(m, "params"), k, p) {
      coeffs += strcmp(json_string_value(json_object_get(p, "name")), "coeffs") == 0;
      truncate += strcmp(json_string_value(json_object_get(p, "name")), "truncate") == 0;
    }
    ASSERT_INT(coeffs, ==, !strncmp(name, "yvv", 3) || !strcmp(name, "auto"));
    ASSERT_INT(truncate, ==,
               !strncmp(name, "fir", 3) || !strcmp(name, "separable") || !strcmp(name, "pyramid") ||
                   !strcmp(name, "auto"));
  }
  ASSERT_INT(blur, ==, 10);
  json_decref(j);
  http_resp_free(&r);
}

/* Asserts a successful blur: status, type, same shape as the input, PSNR floor, headers. */
static void expect_blur(const struct http_resp *r, const char *mime, const char *input,
                        const char *method, double min_psnr) {
  char buf[384];
  struct codec_image in, out;
  size_t len;
  uint8_t *data = fixture(input, &len);
  if (r->status != 200) TEST_FAIL("status %ld: %.300s", r->status, r->body);
  ASSERT_STR(http_header(r, "Content-Type", buf, sizeof(buf)), mime);
  ASSERT(codec_decode(data, len, &(struct codec_limits){0, 0, 0}, &in, NULL, 0) == CODEC_OK);
  decode_body(r, &out);
  ASSERT_INT(out.width, ==, in.width);
  ASSERT_INT(out.height, ==, in.height);
  if (strcmp(mime, "image/png") == 0) {
    ASSERT_INT(out.channels, ==, in.channels);
    ASSERT_INT(out.depth, ==, in.depth);
  }
  ASSERT_DBL(http_header_num(r, "X-PSNR"), >=, min_psnr);
  if (method) { /* NULL: any concrete method (what auto chose depends on the backend) */
    ASSERT_STR(http_header(r, "X-Method", buf, sizeof(buf)), method);
  } else {
    ASSERT(http_header(r, "X-Method", buf, sizeof(buf)) && strcmp(buf, "auto") != 0);
  }
  expect_backend(http_header(r, "X-Backend", buf, sizeof(buf)));
  int jpeg_in = strstr(input, ".jpg") != NULL, png_out = strcmp(mime, "image/png") == 0;
  const char *png_dec = codec_png_direct(data, len) ? "libdeflate" : "libpng";
  http_expect_stages(r, 1, jpeg_in ? expected_codec("jpeg") : png_dec,
                     png_out   ? "deflate-rle"
                     : jpeg_in ? expected_codec("jpeg")
                               : NULL);
  codec_image_free(&in);
  codec_image_free(&out);
  free(data);
}

/* What auto takes, and that with the PSNR it costs no accuracy: with it, separable where the
 * backend computes it exactly and measures it in the same pass (the rounding's 58.9 dB): on the
 * CPU at the default truncate (in double precision), else yvv at sigma 12 (cpu_auto_method); on
 * the GPU 8-bit gray or RGB up to sigma 40 (in integers), else pyramid: with alpha, at sigma 41
 * (radius 164, past the integer passes'). Without the PSNR, the size and sigma rule: yvv on the
 * CPU, pyramid on the GPU. */
static void test_auto_psnr(void) {
  int gpu = strncmp(expected_backend(), "cuda", 4) == 0;
  static const struct {
    const char *file, *query, *gpu, *cpu;
  } cases[] = {{"coffee.png", "sigma=12", "separable", "separable"},
               {"camera.png", "sigma=40", "separable", "separable"},
               {"coffee.png", "sigma=12&psnr=false", "pyramid", "yvv"},
               {"coffee.png", "sigma=12&truncate=3", "pyramid", "yvv"},
               {"logo.png", "sigma=12", "pyramid", "separable"},
               {"coffee.png", "sigma=41", "pyramid", "separable"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct http_resp r;
    char buf[64];
    post_fixture(cases[i].file, cases[i].query, &r);
    ASSERT_INT(r.status, ==, 200);
    const char *want = gpu ? cases[i].gpu : cases[i].cpu;
    if (!http_header(&r, "X-Method", buf, sizeof(buf)) || strcmp(buf, want) != 0)
      TEST_FAIL("%s %s: method %s, expected %s", cases[i].file, cases[i].query, buf, want);
    if (strstr(cases[i].query, "psnr=false"))
      ASSERT(!http_header(&r, "X-PSNR", buf, sizeof(buf)));
    else /* separable: the rounding alone (with alpha, premultiplied colour: lower) */
      ASSERT_DBL(http_header_num(&r, "X-PSNR"), >=,
                 strcmp(want, "separable") || strcmp(cases[i].file, "logo.png") == 0 ? 48 : 58.8);
    http_resp_free(&r);
  }
}

/* Every method over HTTP: PSNR floors, the fir family byte-identical, auto resolved. */
static void test_every_method(void) {
  static const struct {
    const char *method, *ran;
    double min_db;
  } cases[] = {{"fir", "fir", 58},
               {"fir_shared", "fir_shared", 58},
               {"fir_mwpt", "fir_mwpt", 58},
               {"separable", "separable", 58},
               {"yvv", "yvv", 48},
               {"yvv2way", "yvv2way", 30},
               {"deriche", "deriche", 52},
               {"yvv_blocked", "yvv_blocked", 48},
               {"pyramid", "pyramid", 58}, /* sigma 5: separable */
               {"auto", NULL, 48}};
  struct codec_image fir = {0};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct http_resp r;
    struct codec_image out;
    char q[96];
    snprintf(q, sizeof(q), "sigma=5&method=%s", cases[i].method);
    post_fixture("coffee.png", q, &r);
    expect_blur(&r, "image/png", "coffee.png", cases[i].ran, cases[i].min_db);
    decode_body(&r, &out);
    if (i == 0) {
      fir = out; /* fir_shared and fir_mwpt must match it byte for byte */
    } else {
      if (i < 3) ASSERT(memcmp(out.pixels, fir.pixels, (size_t)out.width * out.height * 3) == 0);
      codec_image_free(&out);
    }
    http_resp_free(&r);
  }
  codec_image_free(&fir);
  struct http_resp r;
  post_fixture("coffee.png", "sigma=12&method=pyramid", &r); /* reduced 4 times: 58.90 dB */
  expect_blur(&r, "image/png", "coffee.png", "pyramid", 58);
  http_resp_free(&r);
  post_fixture("camera.png", "sigma=5&method=yvv&coeffs=1995", &r);
  expect_blur(&r, "image/png", "camera.png", "yvv", 45);
  http_resp_free(&r);
  post_fixture("camera.png", "sigma=5&method=fir&truncate=2.5", &r);
  expect_blur(&r, "image/png", "camera.png", "fir", 40);
  http_resp_free(&r);
  post_fixture("camera.png", "sigma=5&method=yvv&truncate=3", &r);
  http_expect_error(&r, 400, "invalid_parameter");
  ASSERT(strstr(r.body, "truncate does not apply to method yvv"));
  http_resp_free(&r);
}

static void test_multipart(void) {
  struct http_resp r;
  post_fixture("chelsea.png", "method=separable&sigma=3", &r);
  expect_blur(&r, "image/png", "chelsea.png", "separable", 55);
  http_resp_free(&r);
  size_t len;
  uint8_t *img = fixture("coffee.png", &len);
  ASSERT(http_post_form(&srv, "/blur?sigma=12", "file", img, len, NULL, NULL, &r) == 0);
  expect_blur(&r, "image/png", "coffee.png", NULL, 45); /* auto */
  http_resp_free(&r);
  free(img);
}

static void test_raw_body(void) {
  struct http_resp r;
  size_t len;
  uint8_t *img = fixture("rocket.jpg", &len);
  ASSERT(http_request(&srv, "POST", "/blur?method=yvv&sigma=12", "image/jpeg", NULL, img, len,
                      &r) == 0);
  expect_blur(&r, "image/jpeg", "rocket.jpg", "yvv", 45);
  http_resp_free(&r);
  ASSERT(http_request(&srv, "POST", "/blur?sigma=2&format=png", "image/jpeg", NULL, img, len, &r) ==
         0);
  expect_blur(&r, "image/png", "rocket.jpg", NULL, 45);
  http_resp_free(&r);
  free(img);
  img = fixture("camera.png", &len);
  ASSERT(http_request(&srv, "POST", "/blur?sigma=2&format=jpeg&quality=50", "image/png", NULL, img,
                      len, &r) == 0);
  expect_blur(&r, "image/jpeg", "camera.png", NULL, 45);
  http_resp_free(&r);
  free(img);
}

static void test_params_json(void) {
  struct http_resp r;
  size_t len;
  uint8_t *img = fixture("camera.png", &len);
  ASSERT(http_post_form(&srv, "/blur", "image", img, len,
                        "{\"sigma\": 3, \"method\": \"separable\", \"psnr\": true}", NULL,
                        &r) == 0);
  expect_blur(&r, "image/png", "camera.png", "separable", 55);
  http_resp_free(&r);
  /* the same value in both places is fine; different values are a 400 */
  ASSERT(http_post_form(&srv, "/blur?sigma=3.0", "image", img, len, "{\"sigma\": 3}", NULL, &r) ==
         0);
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
  ASSERT(http_post_form(&srv, "/blur?sigma=3", "image", img, len, "{\"sigma\": 5}", NULL, &r) == 0);
  http_expect_error(&r, 400, "conflicting_parameter");
  http_resp_free(&r);
  ASSERT(http_post_form(&srv, "/blur", "image", img, len, "{\"sigma\": ", NULL, &r) == 0);
  http_expect_error(&r, 400, "invalid_json");
  http_resp_free(&r);
  ASSERT(http_post_form(&srv, "/blur", "image", img, len, "[3]", NULL, &r) == 0);
  http_expect_error(&r, 400, "invalid_json");
  http_resp_free(&r);
  ASSERT(http_post_form(&srv, "/blur", "image", img, len, "{\"sigma\": 3, \"radius\": 2}", NULL,
                        &r) == 0);
  http_expect_error(&r, 400, "unknown_parameter");
  http_resp_free(&r);
  ASSERT(http_post_form(&srv, "/blur", "image", img, len, "{\"sigma\": \"3\", \"psnr\": false}",
                        NULL, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  char buf[64];
  ASSERT(!http_header(&r, "X-PSNR", buf, sizeof(buf))); /* not measured */
  http_resp_free(&r);
  free(img);
}

static void test_param_errors(void) {
  static const struct {
    const char *query;
    long status;
    const char *code;
  } cases[] = {
      {"method=box&sigma=2", 400, "unknown_method"},
      {"method=yvv", 400, "missing_parameter"},
      {"sigma=abc", 400, "invalid_parameter"},
      {"sigma=0.4", 400, "invalid_parameter"},
      {"sigma=300.5", 400, "invalid_parameter"},
      {"sigma=nan", 400, "invalid_parameter"},
      {"sigma=2&quality=0", 400, "invalid_parameter"},
      {"sigma=2&quality=101", 400, "invalid_parameter"},
      {"sigma=2&quality=9.5", 400, "invalid_parameter"},
      {"sigma=2&format=gif", 400, "invalid_parameter"},
      {"sigma=2&psnr=maybe", 400, "invalid_parameter"},
      {"sigma=2&compression=10", 400, "invalid_parameter"},
      {"sigma=2&sigm=3", 400, "unknown_parameter"},
      {"sigma=2&sigma=3", 400, "invalid_parameter"},
      {"sigma=%zz", 400, "invalid_parameter"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct http_resp r;
    post_fixture("camera.png", cases[i].query, &r);
    http_expect_error(&r, cases[i].status, cases[i].code);
    if (strcmp(cases[i].code, "unknown_method") == 0) {
      ASSERT(strstr(r.body, "separable"));
      ASSERT(strstr(r.body, "yvv"));
    }
    http_resp_free(&r);
  }
}

static void test_bad_uploads(void) {
  struct http_resp r;
  const char bmp[] = "BM\x3a\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00";
  ASSERT(http_request(&srv, "POST", "/blur?sigma=2", "image/png", NULL, bmp, sizeof(bmp), &r) == 0);
  http_expect_error(&r, 415, "unsupported_media_type");
  http_resp_free(&r);
  const char gif[] = "GIF89a\x01\x00\x01\x00\x00\x00\x00;"; /* a GIF with no image */
  ASSERT(http_request(&srv, "POST", "/blur?sigma=2", "image/gif", NULL, gif, sizeof(gif), &r) == 0);
  http_expect_error(&r, 422, "undecodable_image");
  http_resp_free(&r);
  ASSERT(http_request(&srv, "POST", "/blur?sigma=2", "text/plain", NULL, "hello", 5, &r) == 0);
  http_expect_error(&r, 415, "unsupported_media_type");
  http_resp_free(&r);
  ASSERT(http_request(&srv, "POST", "/blur?sigma=2", NULL, NULL, "", 0, &r) == 0);
  http_expect_error(&r, 400, "missing_image");
  http_resp_free(&r);
  ASSERT(http_request(&srv, "POST", "/blur?sigma=2", "multipart/form-data; boundary=xyz", NULL,
                      "--xyz\r\nno headers", 18, &r) == 0);
  http_expect_error(&r, 400, "invalid_multipart");
  http_resp_free(&r);
  const char *bad[][2] = {{"truncated.png", "undecodable_image"},
                          {"truncated.jpg", "undecodable_image"}};
  for (int i = 0; i < 2; i++) {
    post_fixture(bad[i][0], "sigma=2", &r);
    http_expect_error(&r, 422, bad[i][1]);
    http_resp_free(&r);
  }
  post_fixture("cmyk.jpg", "sigma=2", &r); /* CMYK is converted to RGB, not refused */
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
}

static void test_png_kinds(void) {
  const char *kinds[] = {"gray16.png",     "rgb16.png",        "rgba16.png",
                         "gray_alpha.png", "gray_alpha16.png", "interlaced.png"};
  for (int i = 0; i < 6; i++) {
    struct http_resp r;
    post_fixture(kinds[i], "sigma=2&method=separable", &r);
    expect_blur(&r, "image/png", kinds[i], "separable", 55);
    http_resp_free(&r);
  }
}

static void test_jpeg_kinds(void) {
  const char *kinds[] = {"gray.jpg", "progressive.jpg"};
  for (int i = 0; i < 2; i++) {
    struct http_resp r;
    struct codec_image out;
    post_fixture(kinds[i], "sigma=3&format=png", &r);
    expect_blur(&r, "image/png", kinds[i], NULL, 45);
    decode_body(&r, &out);
    ASSERT_INT(out.channels, ==, i == 0 ? 1 : 3);
    codec_image_free(&out);
    http_resp_free(&r);
  }
}

/* An opaque red square on a transparent background blurs to pure red with fading alpha: no
 * dark fringe. */
static void test_alpha(void) {
  const char *methods[] = {"separable", "yvv"};
  for (int m = 0; m < 2; m++) {
    struct http_resp r;
    struct codec_image out;
    char q[64];
    snprintf(q, sizeof(q), "sigma=3&method=%s", methods[m]);
    post_fixture("red_square.png", q, &r);
    expect_blur(&r, "image/png", "red_square.png", methods[m], 45);
    decode_body(&r, &out);
    int partial = 0;
    for (int i = 0; i < out.width * out.height; i++) {
      const uint8_t *p = out.pixels + 4 * i;
      if (p[3] == 0) continue;
      if (p[0] != 255 || p[1] != 0 || p[2] != 0)
        TEST_FAIL("%s: pixel %d is %d,%d,%d,%d", methods[m], i, p[0], p[1], p[2], p[3]);
      partial += p[3] < 255;
    }
    ASSERT_INT(partial, >, 200);                             /* the edge fades */
    ASSERT_INT(out.pixels[4 * (32 * 64 + 32) + 3], >=, 254); /* the centre stays opaque */
    ASSERT_INT(out.pixels[3], ==, 0);                        /* the corner stays clear */
    codec_image_free(&out);
    http_resp_free(&r);
  }
}

static uint8_t *base64_decode(const char *s, size_t *len) {
  size_t n = strlen(s);
  uint8_t *out = malloc(n / 4 * 3 + 1);
  uint32_t v = 0;
  int bits = 0;
  *len = 0;
  for (size_t i = 0; i < n && s[i] != '='; i++) {
    const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = strchr(tab, s[i]);
    ASSERT(p);
    v = v << 6 | (uint32_t)(p - tab);
    if ((bits += 6) >= 8) out[(*len)++] = (uint8_t)(v >> (bits -= 8));
  }
  return out;
}

static void test_json_mode(void) {
  struct http_resp r;
  size_t len;
  uint8_t *img = fixture("astronaut.png", &len);
  ASSERT(http_post_form(&srv, "/blur?sigma=5&method=separable", "image", img, len, NULL,
                        "application/json", &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  json_t *j = json_loads(r.body, 0, NULL);
  ASSERT(j);
  ASSERT_STR(json_string_value(json_object_get(j, "method")), "separable");
  ASSERT_DBL(json_number_value(json_object_get(j, "sigma")), ==, 5);
  ASSERT_INT(json_integer_value(json_object_get(j, "width")), ==, 512);
  ASSERT_INT(json_integer_value(json_object_get(j, "height")), ==, 512);
  ASSERT_INT(json_integer_value(json_object_get(j, "channels")), ==, 3);
  ASSERT_INT(json_integer_value(json_object_get(j, "bit_depth")), ==, 8);
  expect_backend(json_string_value(json_object_get(j, "backend")));
  ASSERT_STR(json_string_value(json_object_get(j, "format")), "png");
  double psnr = json_number_value(json_object_get(j, "psnr_db"));
  ASSERT_NEAR(psnr, http_header_num(&r, "X-PSNR"), 0.005);
  ASSERT_DBL(psnr, >=, 55);
  json_t *t = json_object_get(j, "timing_ms");
  const char *stages[] = {"queue", "decode", "filter", "reference", "encode", "total"};
  for (int i = 0; i < 6; i++) ASSERT_DBL(json_number_value(json_object_get(t, stages[i])), >=, 0);
  ASSERT_DBL(json_number_value(json_object_get(t, "total")), >=,
             json_number_value(json_object_get(t, "filter")));
  size_t n;
  uint8_t *png = base64_decode(json_string_value(json_object_get(j, "image")), &n);
  struct codec_image out;
  ASSERT(codec_decode(png, n, &(struct codec_limits){0, 0, 0}, &out, NULL, 0) == CODEC_OK);
  ASSERT_INT(out.width, ==, 512);
  codec_image_free(&out);
  free(png);
  json_decref(j);
  http_resp_free(&r);
  free(img);
}

static void test_limits(void) {
  struct server s;
  struct http_resp r;
  size_t len;
  const char *args[] = {"--max-body", "300000", "--max-pixels", "262143", NULL};
  server_start(&s, args);
  uint8_t *img = fixture("astronaut.png", &len); /* 791 kB, 512x512 = 262144 pixels */
  ASSERT(http_request(&s, "POST", "/blur?sigma=2", "image/png", NULL, img, len, &r) == 0);
  http_expect_error(&r, 413, "body_too_large");
  http_resp_free(&r);
  free(img);
  img = fixture("camera.png", &len); /* 139 kB, 512x512 */
  ASSERT(http_request(&s, "POST", "/blur?sigma=2", "image/png", NULL, img, len, &r) == 0);
  http_expect_error(&r, 422, "image_too_large");
  http_resp_free(&r);
  free(img);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sends n copies of one raw PNG POST at once; fills resp[] (status and body; the headers field
 * holds Retry-After's value, when there is one). When signal_pid is not 0 it gets SIGTERM after
 * signal_after seconds; returns how many requests were unanswered then. */
static int parallel_posts(const struct server *s, int n, const char *path, const uint8_t *img,
                          size_t len, struct http_resp *resp, pid_t signal_pid,
                          double signal_after) {
  CURLM *m = curl_multi_init();
  CURL *easy[16];
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: image/png");
  char url[256];
  struct http_buf bodies[16] = {{0}};
  int running = 1, unanswered = -1;
  ASSERT(n <= 16);
  snprintf(url, sizeof(url), "%s%s", s->base, path);
  for (int i = 0; i < n; i++) {
    memset(&resp[i], 0, sizeof(resp[i]));
    easy[i] = curl_easy_init();
    curl_easy_setopt(easy[i], CURLOPT_URL, url);
    curl_easy_setopt(easy[i], CURLOPT_POSTFIELDS, img);
    curl_easy_setopt(easy[i], CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(easy[i], CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, http_collect);
    curl_easy_setopt(easy[i], CURLOPT_WRITEDATA, &bodies[i]);
    curl_easy_setopt(easy[i], CURLOPT_TIMEOUT, 300L);
    curl_multi_add_handle(m, easy[i]);
  }
  double start = now_s();
  while (running) {
    curl_multi_perform(m, &running);
    curl_multi_poll(m, NULL, 0, 20, NULL);
    if (signal_pid && now_s() - start > signal_after) {
      kill(signal_pid, SIGTERM);
      signal_pid = 0;
      unanswered = running;
    }
  }
  for (int i = 0; i < n; i++) {
    struct curl_header *h;
    curl_easy_getinfo(easy[i], CURLINFO_RESPONSE_CODE, &resp[i].status);
    resp[i].body = bodies[i].p;
    resp[i].len = bodies[i].len;
    if (curl_easy_header(easy[i], "Retry-After", 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
      resp[i].headers = strdup(h->value);
    curl_multi_remove_handle(m, easy[i]);
    curl_easy_cleanup(easy[i]);
  }
  curl_slist_free_all(hl);
  curl_multi_cleanup(m);
  return unanswered;
}

/* A request that keeps one worker busy for half a second or more on 512x512: on the CPU the
 * naive local variance (63x63 samples per pixel: 0.85 s on the 2-core build machine, 2026-11-25,
 * where a wide separable blur had become too fast to stay in the queue), on a GPU the direct 2-D
 * fir (321x321 taps per pixel). */
static const char *heavy_query(void) {
  return strncmp(expected_backend(), "cuda", 4) == 0 ? "/blur?sigma=40&method=fir&psnr=false"
                                                     : "/variance?method=naive&radius=31";
}

/* One worker and a queue of one: of eight requests at once, one runs, one waits, and the rest
 * are told at once to come back later. */
static void test_queue_full(void) {
  struct server s;
  struct http_resp resp[8], r;
  size_t len;
  int ok = 0, busy = 0;
  const char *args[] = {"--workers", "1", "--queue", "1", NULL};
  server_start(&s, args);
  uint8_t *img = fixture("astronaut.png", &len);
  parallel_posts(&s, 8, heavy_query(), img, len, resp, 0, 0);
  for (int i = 0; i < 8; i++) {
    ok += resp[i].status == 200;
    if (resp[i].status == 503) {
      busy++;
      http_expect_error(&resp[i], 503, "queue_full");
      ASSERT_STR(resp[i].headers, "1");
    }
    http_resp_free(&resp[i]);
  }
  ASSERT_INT(ok + busy, ==, 8);
  ASSERT_INT(ok, >=, 1); /* 2 when the worker takes the first job before the second arrives */
  ASSERT_INT(busy, >=, 1);
  ASSERT(http_request(&s, "GET", "/readyz", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
  free(img);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* SIGTERM while requests are queued and running: all of them are answered, then the process
 * exits 0 and no longer listens. */
static void test_drain(void) {
  struct server s;
  size_t len;
  struct http_resp resp[3];
  const char *args[] = {"--workers", "1", "--queue", "8", NULL};
  server_start(&s, args);
  uint8_t *img = fixture("astronaut.png", &len);
  /* each takes about 0.4 s or more on one worker: at 0.3 s one runs and two wait */
  int unanswered = parallel_posts(&s, 3, heavy_query(), img, len, resp, s.pid, 0.3);
  ASSERT_INT(unanswered, >=, 2);
  for (int i = 0; i < 3; i++) {
    ASSERT_INT(resp[i].status, ==, 200);
    ASSERT_INT(resp[i].len, >, 10000);
    http_resp_free(&resp[i]);
  }
  int st = 0;
  ASSERT(waitpid(s.pid, &st, 0) == s.pid);
  ASSERT(WIFEXITED(st));
  ASSERT_INT(WEXITSTATUS(st), ==, 0);
  struct http_resp r;
  ASSERT(http_request(&s, "GET", "/healthz", NULL, NULL, NULL, 0, &r) != 0);
  http_resp_free(&r);
  free(img);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  server_start(&srv, NULL);
  RUN(test_health);
  RUN(test_methods);
  RUN(test_multipart);
  RUN(test_every_method);
  RUN(test_auto_psnr);
  RUN(test_raw_body);
  RUN(test_params_json);
  RUN(test_param_errors);
  RUN(test_bad_uploads);
  RUN(test_png_kinds);
  RUN(test_jpeg_kinds);
  RUN(test_alpha);
  RUN(test_json_mode);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  RUN(test_limits);
  RUN(test_queue_full);
  RUN(test_drain);
  curl_global_cleanup();
  fprintf(stderr, "integ_blur: all passed\n");
  return 0;
}

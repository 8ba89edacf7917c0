/* Unit tests of the api's parsers over byte buffers: query strings and percent escapes, the
 * params JSON and its conflicts with the query, every parameter's range, multipart bodies
 * (well formed and malformed), base64, and the error table. */
#include "test.h"

#include "../api/api_int.h"

static enum api_error parse(const char *query, const char *json, struct blur_params *p, char *msg) {
  memset(p, 0x5a, sizeof(*p));
  return params_parse(&api_blur_endpoint, query, json, json ? strlen(json) : 0, p, msg, 512);
}

static void test_defaults(void) {
  struct blur_params p;
  char msg[512];
  ASSERT_INT(parse("sigma=2.5", NULL, &p, msg), ==, API_OK);
  ASSERT_DBL(p.sigma, ==, 2.5);
  ASSERT_INT(p.method, ==, METHOD_AUTO);
  ASSERT_DBL(p.truncate, ==, 4);
  ASSERT_INT(p.coeffs, ==, CPU_YVV_CALIBRATED);
  ASSERT_INT(p.format, ==, 0);
  ASSERT_INT(p.quality, ==, 90);
  ASSERT_INT(p.compression, ==, 6);
  ASSERT_INT(p.psnr, ==, 1);
  ASSERT_INT(
      parse("sigma=1&method=separable&format=jpeg&quality=1&psnr=0&compression=0", NULL, &p, msg),
      ==, API_OK);
  ASSERT_INT(p.method, ==, CPU_SEPARABLE);
  ASSERT_INT(p.format, ==, 2);
  ASSERT_INT(p.quality, ==, 1);
  ASSERT_INT(p.psnr, ==, 0);
  ASSERT_INT(p.compression, ==, 0);
}

static void test_ranges(void) {
  static const struct {
    const char *q;
    enum api_error e;
  } cases[] = {
      {"sigma=0.5", API_OK},
      {"sigma=300", API_OK},
      {"sigma=0.49", API_BAD_PARAMETER},
      {"sigma=300.01", API_BAD_PARAMETER},
      {"sigma=inf", API_BAD_PARAMETER},
      {"sigma=1e400", API_BAD_PARAMETER},
      {"sigma=", API_BAD_PARAMETER},
      {"sigma=2x", API_BAD_PARAMETER},
      {"sigma=%202", API_BAD_PARAMETER},
      {"sigma=2&quality=100", API_OK},
      {"sigma=2&quality=1", API_OK},
      {"sigma=2&quality=0", API_BAD_PARAMETER},
      {"sigma=2&quality=101", API_BAD_PARAMETER},
      {"sigma=2&quality=99999999999999999999", API_BAD_PARAMETER},
      {"sigma=2&compression=9", API_OK},
      {"sigma=2&compression=-1", API_BAD_PARAMETER},
      {"sigma=2&psnr=true", API_OK},
      {"sigma=2&psnr=yes", API_BAD_PARAMETER},
      {"sigma=2&format=input", API_OK},
      {"sigma=2&format=PNG", API_BAD_PARAMETER},
      {"sigma=2&method=fft", API_UNKNOWN_METHOD},
      {"sigma=2&method=fir&truncate=3", API_OK},
      {"sigma=2&method=separable&truncate=8", API_OK},
      {"sigma=2&method=fir&truncate=0.5", API_BAD_PARAMETER},
      {"sigma=2&method=yvv&truncate=3", API_BAD_PARAMETER},
      {"sigma=2&method=yvv&coeffs=1995", API_OK},
      {"sigma=2&method=yvv2way&coeffs=2002", API_OK},
      {"sigma=2&method=deriche&coeffs=1995", API_BAD_PARAMETER},
      {"sigma=12&method=pyramid&truncate=3", API_OK},
      {"sigma=12&method=pyramid&coeffs=2002", API_BAD_PARAMETER},
      {"sigma=2&method=yvv&coeffs=1996", API_BAD_PARAMETER},
      {"sigma=2&coeffs=1995&truncate=3", API_OK},
      {"sigma=2&method=auto", API_OK},
      {"", API_MISSING_PARAMETER},
      {"method=yvv", API_MISSING_PARAMETER},
      {"sigma=2&foo=1", API_UNKNOWN_PARAMETER},
      {"sigma=2&sigma=2", API_BAD_PARAMETER},
      {"sigma=2&%zz=1", API_BAD_PARAMETER},
      {"sigma=2&&&", API_OK},
      {"sigma=%32", API_OK},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct blur_params p;
    char msg[512] = "";
    enum api_error e = parse(cases[i].q, NULL, &p, msg);
    if (e != cases[i].e)
      TEST_FAIL("'%s': error %d, expected %d (%s)", cases[i].q, e, cases[i].e, msg);
    if (e != API_OK) ASSERT(strlen(msg) > 20);
  }
}

static void test_json(void) {
  struct blur_params p;
  char msg[512];
  ASSERT_INT(parse("", "{\"sigma\": 4, \"method\": \"separable\", \"psnr\": false}", &p, msg), ==,
             API_OK);
  ASSERT_DBL(p.sigma, ==, 4);
  ASSERT_INT(p.psnr, ==, 0);
  ASSERT_INT(parse("", "{\"sigma\": \"4\", \"quality\": 50.0}", &p, msg), ==, API_OK);
  ASSERT_INT(p.quality, ==, 50);
  ASSERT_INT(parse("", "{\"sigma\": 4, \"quality\": 50.5}", &p, msg), ==, API_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": true}", &p, msg), ==, API_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": null}", &p, msg), ==, API_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": [1]}", &p, msg), ==, API_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": 4, \"method\": 1}", &p, msg), ==, API_UNKNOWN_METHOD);
  ASSERT_INT(parse("", "{\"sigma\": 4, \"psnr\": 1}", &p, msg), ==, API_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": 4, \"sigma\": 5}", &p, msg), ==, API_BAD_JSON);
  ASSERT_INT(parse("", "{\"sigma\": 4", &p, msg), ==, API_BAD_JSON);
  ASSERT_INT(parse("", "4", &p, msg), ==, API_BAD_JSON);
  ASSERT_INT(parse("", "{\"sigmaa\": 4}", &p, msg), ==, API_UNKNOWN_PARAMETER);
  /* the same key in both places: equal values are fine, different ones a 400 */
  ASSERT_INT(parse("sigma=4.0", "{\"sigma\": 4}", &p, msg), ==, API_OK);
  ASSERT_INT(parse("psnr=1", "{\"sigma\": 4, \"psnr\": true}", &p, msg), ==, API_OK);
  ASSERT_INT(parse("sigma=4", "{\"sigma\": 4.5}", &p, msg), ==, API_CONFLICTING_PARAMETER);
  ASSERT(strstr(msg, "sigma"));
  ASSERT_INT(parse("sigma=4&method=yvv", "{\"method\": \"separable\"}", &p, msg), ==,
             API_CONFLICTING_PARAMETER);
  char big[PARAMS_JSON_MAX + 100];
  memset(big, ' ', sizeof(big));
  memcpy(big, "{\"sigma\": 4}", 12);
  big[sizeof(big) - 1] = 0;
  ASSERT_INT(parse("", big, &p, msg), ==, API_BAD_JSON);
}

static void test_unescape(void) {
  char *s = params_unescape("a+b%2Fc%41", 10);
  ASSERT_STR(s, "a b/cA");
  free(s);
  ASSERT(params_unescape("%4", 2) == NULL);
  ASSERT(params_unescape("%00", 3) == NULL);
  ASSERT(params_unescape("%g1", 3) == NULL);
  s = params_unescape("", 0);
  ASSERT_STR(s, "");
  free(s);
}

static enum api_error mp(const char *ct, const char *body, struct mp_part *parts, int *n) {
  char msg[256];
  return multipart_parse(ct, (const uint8_t *)body, strlen(body), parts, n, msg, sizeof(msg));
}

static void test_multipart(void) {
  struct mp_part parts[MP_MAX_PARTS];
  int n;
  const char *body = "preamble\r\n--XyZ\r\n"
                     "Content-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n"
                     "Content-Type: image/png\r\n\r\n"
                     "PNGDATA\r\n--XyZ\r\n"
                     "content-disposition: form-data; name=params\r\n\r\n"
                     "{\"sigma\":2}\r\n--XyZ--\r\n";
  ASSERT_INT(mp("multipart/form-data; boundary=XyZ", body, parts, &n), ==, API_OK);
  ASSERT_INT(n, ==, 2);
  ASSERT_STR(parts[0].name, "image");
  ASSERT_INT(parts[0].len, ==, 7);
  ASSERT(memcmp(parts[0].data, "PNGDATA", 7) == 0);
  ASSERT_STR(parts[1].name, "params");
  ASSERT_INT(parts[1].len, ==, 11);
  multipart_free(parts, n);
  /* quoted boundary, body starting with the delimiter, binary data with CR LF inside */
  const char bin[] = "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n"
                     "\r\n--bx\r\n\0\r\n--b--";
  char msg[256];
  ASSERT_INT(multipart_parse("multipart/form-data; boundary=\"b\"", (const uint8_t *)bin,
                             sizeof(bin) - 1, parts, &n, msg, sizeof(msg)),
             ==, API_OK);
  ASSERT_INT(n, ==, 1);
  ASSERT_INT(parts[0].len, ==, 9); /* "\r\n--bx\r\n\0" is data: "--bx" is not the boundary */
  multipart_free(parts, n);
  static const char *bad[][2] = {
      {"multipart/form-data", "--a\r\n\r\n\r\n--a--"},
      {"multipart/form-data; boundary=", "--\r\n\r\n"},
      {"multipart/form-data; boundary=a", "no delimiter here"},
      {"multipart/form-data; boundary=a", "--a\r\nContent-Disposition: form-data; "
                                          "name=\"x\"\r\n\r\ndata without an end"},
      {"multipart/form-data; boundary=a", "--a\r\n\r\nno headers\r\n--a--"},
      {"multipart/form-data; boundary=a", "--a\r\nContent-Type: x\r\n\r\nno name\r\n--a--"},
      {"multipart/form-data; boundary=a", "--aXX"},
      {"multipart/form-data; boundary=a", "--a\r\nContent-Disposition: form-data; "
                                          "name=\"unterminated\r\n\r\nd\r\n--a--"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    enum api_error e = mp(bad[i][0], bad[i][1], parts, &n);
    if (e != API_BAD_MULTIPART) TEST_FAIL("case %zu parsed (%d)", i, e);
    multipart_free(parts, n);
  }
  /* more parts than the limit */
  char many[2048] = "";
  for (int i = 0; i < MP_MAX_PARTS + 1; i++)
    strcat(many, "--a\r\nContent-Disposition: form-data; name=\"p\"\r\n\r\nx\r\n");
  strcat(many, "--a--");
  ASSERT_INT(mp("multipart/form-data; boundary=a", many, parts, &n), ==, API_BAD_MULTIPART);
  multipart_free(parts, n);
}

static void test_base64(void) {
  const char *cases[][2] = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foobar", "Zm9vYmFy"}};
  for (int i = 0; i < 5; i++) {
    char *s = base64_encode((const uint8_t *)cases[i][0], strlen(cases[i][0]));
    ASSERT_STR(s, cases[i][1]);
    free(s);
  }
}

static void test_errors(void) {
  ASSERT_INT(api_error_status(API_OK), ==, 200);
  ASSERT_INT(api_error_status(API_BODY_TOO_LARGE), ==, 413);
  ASSERT_INT(api_error_status(API_UNSUPPORTED_MEDIA), ==, 415);
  ASSERT_INT(api_error_status(API_IMAGE_TOO_LARGE), ==, 422);
  ASSERT_INT(api_error_status(API_QUEUE_FULL), ==, 503);
  ASSERT_STR(api_error_code(API_QUEUE_FULL), "queue_full");
  struct api_response *r = api_error_response(API_QUEUE_FULL, NULL);
  ASSERT(r && r->status == 503 && r->nheaders == 1);
  ASSERT_STR(r->headers[0].name, "Retry-After");
  ASSERT(strstr((const char *)r->body, "\"code\":\"queue_full\""));
  api_response_free(r);
}

/* /variance: defaults, and threewise's radii. */
static void test_variance_params(void) {
  struct var_params v;
  char msg[512] = "";
  const struct endpoint *ep = &api_variance_endpoint;
  ASSERT_INT(params_parse(ep, "", NULL, 0, &v, msg, sizeof(msg)), ==, API_OK);
  ASSERT_INT(v.method, ==, VAR_AUTO);
  ASSERT_INT(v.radius, ==, 7);
  ASSERT_INT(v.window, ==, CPU_WINDOW_TRIANGLE);
  ASSERT_INT(v.output, ==, VAR_STDDEV);
  ASSERT_INT(v.compression, ==, 3);
  ASSERT_INT(v.psnr, ==, 1);
  ASSERT_INT(params_parse(ep, "method=threewise&radius=15&window=box&output=variance", NULL, 0, &v,
                          msg, sizeof(msg)),
             ==, API_OK);
  ASSERT_INT(v.method, ==, CPU_VAR_THREEWISE);
  ASSERT_INT(v.window, ==, CPU_WINDOW_BOX);
  ASSERT_INT(v.output, ==, VAR_VARIANCE);
  ASSERT_INT(params_parse(ep, "method=threewise&radius=5", NULL, 0, &v, msg, sizeof(msg)), ==,
             API_BAD_PARAMETER);
  ASSERT(strstr(msg, "1 3 7 15 31 63 127") && strstr(msg, "got 5"));
  ASSERT_INT(params_parse(ep, "radius=5", NULL, 0, &v, msg, sizeof(msg)), ==, API_OK);
  ASSERT_INT(params_parse(ep, "method=box", NULL, 0, &v, msg, sizeof(msg)), ==, API_UNKNOWN_METHOD);
  ASSERT_INT(params_parse(ep, "format=jpeg", NULL, 0, &v, msg, sizeof(msg)), ==, API_BAD_PARAMETER);
}

static enum api_error parse_conv(const char *query, const char *json, struct conv_params *p,
                                 char *msg) {
  memset(p, 0x5a, sizeof(*p));
  return params_parse(&api_convolve_endpoint, query, json, json ? strlen(json) : 0, p, msg, 512);
}

/* /convolve: the kernel parameter type, normalising, and the named kernels' bias. */
static void test_kernel_params(void) {
  static struct conv_params p, q; /* large */
  char msg[512] = "";
  ASSERT_INT(parse_conv("kernel=emboss", NULL, &p, msg), ==, API_OK);
  ASSERT_INT(p.kernel.named, ==, 2);
  ASSERT_DBL(p.conv.bias, ==, 128); /* the kernel's own */
  ASSERT_INT(parse_conv("kernel=emboss&bias=0", NULL, &p, msg), ==, API_OK);
  ASSERT_DBL(p.conv.bias, ==, 0); /* a given bias overrides it */
  ASSERT_INT(parse_conv("kernel=%5B1,2,1,2,4,2,1,2,1%5D", NULL, &p, msg), ==, API_OK);
  ASSERT_INT(parse_conv("", "{\"kernel\": [[1,2,1],[2,4,2],[1,2,1]]}", &q, msg), ==, API_OK);
  ASSERT_INT(p.conv.size, ==, 3);
  ASSERT(memcmp(p.conv.k, q.conv.k, 9 * sizeof(float)) == 0);
  ASSERT_DBL(p.conv.k[4], ==, 0.25f);
  ASSERT_INT(parse_conv("normalize=false", "{\"kernel\": \"[1,2,1,2,4,2,1,2,1]\"}", &p, msg), ==,
             API_OK);
  ASSERT_DBL(p.conv.k[4], ==, 4);
  ASSERT_INT(parse_conv("kernel=[-1,-1,-1,-1,8,-1,-1,-1,-1]", NULL, &p, msg), ==, API_OK);
  ASSERT_DBL(p.conv.k[4], ==, 8); /* sum 0: left as it is */
  ASSERT_INT(parse_conv("kernel=[5]", NULL, &p, msg), ==, API_OK);
  ASSERT_DBL(p.conv.k[0], ==, 1);
  ASSERT_INT(parse_conv("kernel=edge", "{\"kernel\": \"edge\"}", &p, msg), ==, API_OK);
  ASSERT_INT(
      parse_conv("kernel=[1,1,1,1,1,1,1,1,1]", "{\"kernel\": [[1,1,1],[1,1,1],[1,1,1]]}", &p, msg),
      ==, API_OK);
  static const char *const bad[] = {"kernel=[1,2,3,4]", "kernel=[]",         "kernel=[[1],[2]]",
                                    "kernel=[1,2,3",    "kernel=[1,true,3]", "kernel=Edge",
                                    "kernel=1",         "kernel=[[1,2,3]]",  "kernel=[1e400]"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    enum api_error e = parse_conv(bad[i], NULL, &p, msg);
    if (e != API_BAD_PARAMETER) TEST_FAIL("'%s': error %d (%s)", bad[i], e, msg);
    ASSERT(strstr(msg, "kernel"));
  }
  ASSERT_INT(parse_conv("", NULL, &p, msg), ==, API_MISSING_PARAMETER);
  ASSERT_INT(parse_conv("kernel=edge", "{\"kernel\": \"box\"}", &p, msg), ==,
             API_CONFLICTING_PARAMETER);
  json_t *d = params_describe(&api_convolve_endpoint, -1);
  ASSERT_STR(json_string_value(json_object_get(json_array_get(d, 0), "type")), "kernel");
  json_decref(d);
  for (int i = 0; api_endpoints[i]; i++) ASSERT(api_endpoints[i]->nparams <= MAX_PARAMS);
}

int main(void) {
  RUN(test_defaults);
  RUN(test_ranges);
  RUN(test_json);
  RUN(test_unescape);
  RUN(test_multipart);
  RUN(test_base64);
  RUN(test_errors);
  RUN(test_variance_params);
  RUN(test_kernel_params);
  fprintf(stderr, "unit_api: all passed\n");
  return 0;
}

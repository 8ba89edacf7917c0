/* Unit tests of the api's parsers over byte buffers: query strings and percent escapes, the
 * params JSON and its conflicts with the query, every parameter's range, multipart bodies
 * (well formed and malformed), base64 both ways, and the error table. */
#include "test.h"

#include "../api/api_int.h"

static enum err parse(const char *query, const char *json, struct blur_params *p, char *msg) {
  memset(p, 0x5a, sizeof(*p));
  return params_parse(&api_blur_endpoint, query, json, json ? strlen(json) : 0, p, msg, 512);
}

static void test_defaults(void) {
  struct blur_params p;
  char msg[512];
  ASSERT_INT(parse("sigma=2.5", NULL, &p, msg), ==, ERR_OK);
  ASSERT_DBL(p.sigma, ==, 2.5);
  ASSERT_INT(p.method, ==, METHOD_AUTO);
  ASSERT_DBL(p.truncate, ==, 4);
  ASSERT_INT(p.coeffs, ==, CPU_YVV_CALIBRATED);
  ASSERT_INT(p.format, ==, 0);
  ASSERT_INT(p.quality, ==, 90);
  ASSERT_INT(p.compression, ==, 2);
  ASSERT_INT(p.lossless, ==, 0);
  ASSERT_INT(p.psnr, ==, 1);
  ASSERT_INT(
      parse("sigma=1&method=separable&format=jpeg&quality=1&psnr=0&compression=0", NULL, &p, msg),
      ==, ERR_OK);
  ASSERT_INT(p.method, ==, CPU_SEPARABLE);
  ASSERT_INT(p.format, ==, 2);
  ASSERT_INT(p.quality, ==, 1);
  ASSERT_INT(p.psnr, ==, 0);
  ASSERT_INT(p.compression, ==, 0);
  ASSERT_INT(parse("sigma=1&format=webp&lossless=true", NULL, &p, msg), ==, ERR_OK);
  ASSERT_INT(p.format, ==, 3);
  ASSERT_INT(p.lossless, ==, 1);
  ASSERT_INT(parse("sigma=1", "{\"format\": \"webp\", \"lossless\": false}", &p, msg), ==, ERR_OK);
  ASSERT_INT(p.format, ==, 3);
  ASSERT_INT(p.lossless, ==, 0);
  ASSERT_INT(parse("sigma=1&lossless=maybe", NULL, &p, msg), ==, ERR_BAD_PARAMETER);
}

static void test_ranges(void) {
  static const struct {
    const char *q;
    enum err e;
  } cases[] = {
      {"sigma=0.5", ERR_OK},
      {"sigma=300", ERR_OK},
      {"sigma=0.49", ERR_BAD_PARAMETER},
      {"sigma=300.01", ERR_BAD_PARAMETER},
      {"sigma=inf", ERR_BAD_PARAMETER},
      {"sigma=1e400", ERR_BAD_PARAMETER},
      {"sigma=", ERR_BAD_PARAMETER},
      {"sigma=2x", ERR_BAD_PARAMETER},
      {"sigma=%202", ERR_BAD_PARAMETER},
      {"sigma=2&quality=100", ERR_OK},
      {"sigma=2&quality=1", ERR_OK},
      {"sigma=2&quality=0", ERR_BAD_PARAMETER},
      {"sigma=2&quality=101", ERR_BAD_PARAMETER},
      {"sigma=2&quality=99999999999999999999", ERR_BAD_PARAMETER},
      {"sigma=2&compression=9", ERR_OK},
      {"sigma=2&compression=-1", ERR_BAD_PARAMETER},
      {"sigma=2&psnr=true", ERR_OK},
      {"sigma=2&psnr=yes", ERR_BAD_PARAMETER},
      {"sigma=2&format=input", ERR_OK},
      {"sigma=2&format=PNG", ERR_BAD_PARAMETER},
      {"sigma=2&method=fft", ERR_UNKNOWN_METHOD},
      {"sigma=2&method=fir&truncate=3", ERR_OK},
      {"sigma=2&method=separable&truncate=8", ERR_OK},
      {"sigma=2&method=fir&truncate=0.5", ERR_BAD_PARAMETER},
      {"sigma=2&method=yvv&truncate=3", ERR_BAD_PARAMETER},
      {"sigma=2&method=yvv&coeffs=1995", ERR_OK},
      {"sigma=2&method=yvv2way&coeffs=2002", ERR_OK},
      {"sigma=2&method=deriche&coeffs=1995", ERR_BAD_PARAMETER},
      {"sigma=12&method=pyramid&truncate=3", ERR_OK},
      {"sigma=12&method=pyramid&coeffs=2002", ERR_BAD_PARAMETER},
      {"sigma=2&method=yvv&coeffs=1996", ERR_BAD_PARAMETER},
      {"sigma=2&coeffs=1995&truncate=3", ERR_OK},
      {"sigma=2&method=auto", ERR_OK},
      {"", ERR_MISSING_PARAMETER},
      {"method=yvv", ERR_MISSING_PARAMETER},
      {"sigma=2&foo=1", ERR_UNKNOWN_PARAMETER},
      {"sigma=2&sigma=2", ERR_BAD_PARAMETER},
      {"sigma=2&%zz=1", ERR_BAD_PARAMETER},
      {"sigma=2&&&", ERR_OK},
      {"sigma=%32", ERR_OK},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct blur_params p;
    char msg[512] = "";
    enum err e = parse(cases[i].q, NULL, &p, msg);
    if (e != cases[i].e)
      TEST_FAIL("'%s': error %d, expected %d (%s)", cases[i].q, e, cases[i].e, msg);
    if (e != ERR_OK) ASSERT(strlen(msg) > 20);
  }
}

static void test_json(void) {
  struct blur_params p;
  char msg[512];
  ASSERT_INT(parse("", "{\"sigma\": 4, \"method\": \"separable\", \"psnr\": false}", &p, msg), ==,
             ERR_OK);
  ASSERT_DBL(p.sigma, ==, 4);
  ASSERT_INT(p.psnr, ==, 0);
  ASSERT_INT(parse("", "{\"sigma\": \"4\", \"quality\": 50.0}", &p, msg), ==, ERR_OK);
  ASSERT_INT(p.quality, ==, 50);
  ASSERT_INT(parse("", "{\"sigma\": 4, \"quality\": 50.5}", &p, msg), ==, ERR_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": true}", &p, msg), ==, ERR_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": null}", &p, msg), ==, ERR_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": [1]}", &p, msg), ==, ERR_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": 4, \"method\": 1}", &p, msg), ==, ERR_UNKNOWN_METHOD);
  ASSERT_INT(parse("", "{\"sigma\": 4, \"psnr\": 1}", &p, msg), ==, ERR_BAD_PARAMETER);
  ASSERT_INT(parse("", "{\"sigma\": 4, \"sigma\": 5}", &p, msg), ==, ERR_BAD_JSON);
  ASSERT_INT(parse("", "{\"sigma\": 4", &p, msg), ==, ERR_BAD_JSON);
  ASSERT(strstr(msg, "The params field must be a JSON object: ") && strstr(msg, "(line 1, column"));
  ASSERT_INT(parse("", "4", &p, msg), ==, ERR_BAD_JSON);
  ASSERT_INT(parse("", "{\"sigmaa\": 4}", &p, msg), ==, ERR_UNKNOWN_PARAMETER);
  /* the same key in both places: equal values are fine, different ones a 400 */
  ASSERT_INT(parse("sigma=4.0", "{\"sigma\": 4}", &p, msg), ==, ERR_OK);
  ASSERT_INT(parse("psnr=1", "{\"sigma\": 4, \"psnr\": true}", &p, msg), ==, ERR_OK);
  ASSERT_INT(parse("sigma=4", "{\"sigma\": 4.5}", &p, msg), ==, ERR_CONFLICTING_PARAMETER);
  ASSERT(strstr(msg, "sigma"));
  ASSERT_INT(parse("sigma=4&method=yvv", "{\"method\": \"separable\"}", &p, msg), ==,
             ERR_CONFLICTING_PARAMETER);
  char big[PARAMS_JSON_MAX + 100];
  memset(big, ' ', sizeof(big));
  memcpy(big, "{\"sigma\": 4}", 12);
  big[sizeof(big) - 1] = 0;
  ASSERT_INT(parse("", big, &p, msg), ==, ERR_BAD_JSON);
}

static enum err load_body(const char *text, json_t **j, char *msg) {
  return params_load_json("The JSON body", text, strlen(text), j, msg, 512);
}

/* A JSON body's object, already parsed: the same rules, its own name in the messages. */
static void test_json_object(void) {
  struct blur_params p;
  char msg[512];
  json_t *j = NULL;
  ASSERT_INT(load_body("{\"sigma\": 4,\n \"x\"}", &j, msg), ==, ERR_BAD_JSON);
  ASSERT(j == NULL);
  ASSERT(strstr(msg, "The JSON body must be a JSON object: ") && strstr(msg, "(line 2, column"));
  ASSERT_INT(load_body("[1]", &j, msg), ==, ERR_BAD_JSON);
  ASSERT_STR(msg, "The JSON body must be a JSON object: it is an array.");
  ASSERT_INT(load_body("{\"sigma\": 4, \"psnr\": false}", &j, msg), ==, ERR_OK);
  const struct endpoint *ep = &api_blur_endpoint;
  ASSERT_INT(params_parse_object(ep, "sigma=4.0", j, "the JSON body", &p, msg, 512), ==, ERR_OK);
  ASSERT_DBL(p.sigma, ==, 4);
  ASSERT_INT(p.psnr, ==, 0);
  ASSERT_INT(params_parse_object(ep, "sigma=5", j, "the JSON body", &p, msg, 512), ==,
             ERR_CONFLICTING_PARAMETER);
  ASSERT(strstr(msg, "another value in the JSON body"));
  json_object_set_new(j, "sigmaa", json_integer(1));
  ASSERT_INT(params_parse_object(ep, "", j, "the JSON body", &p, msg, 512), ==,
             ERR_UNKNOWN_PARAMETER);
  ASSERT(strstr(msg, "'sigmaa' in the JSON body"));
  json_decref(j);
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

static enum err mp(const char *ct, const char *body, struct http_part *parts, int *n) {
  char msg[256];
  return http_multipart_parse(ct, (const uint8_t *)body, strlen(body), parts, n, msg, sizeof(msg));
}

static void test_multipart(void) {
  struct http_part parts[HTTP_PARTS_MAX];
  int n;
  const char *body = "preamble\r\n--XyZ\r\n"
                     "Content-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n"
                     "Content-Type: image/png\r\n\r\n"
                     "PNGDATA\r\n--XyZ\r\n"
                     "content-disposition: form-data; name=params\r\n\r\n"
                     "{\"sigma\":2}\r\n--XyZ--\r\n";
  ASSERT_INT(mp("multipart/form-data; boundary=XyZ", body, parts, &n), ==, ERR_OK);
  ASSERT_INT(n, ==, 2);
  ASSERT_STR(parts[0].name, "image");
  ASSERT_INT(parts[0].len, ==, 7);
  ASSERT(memcmp(parts[0].data, "PNGDATA", 7) == 0);
  ASSERT_STR(parts[1].name, "params");
  ASSERT_INT(parts[1].len, ==, 11);
  http_multipart_free(parts, n);
  /* quoted boundary, body starting with the delimiter, binary data with CR LF inside */
  const char bin[] = "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n"
                     "\r\n--bx\r\n\0\r\n--b--";
  char msg[256];
  ASSERT_INT(http_multipart_parse("multipart/form-data; boundary=\"b\"", (const uint8_t *)bin,
                                  sizeof(bin) - 1, parts, &n, msg, sizeof(msg)),
             ==, ERR_OK);
  ASSERT_INT(n, ==, 1);
  ASSERT_INT(parts[0].len, ==, 9); /* "\r\n--bx\r\n\0" is data: "--bx" is not the boundary */
  http_multipart_free(parts, n);
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
    enum err e = mp(bad[i][0], bad[i][1], parts, &n);
    if (e != ERR_BAD_MULTIPART) TEST_FAIL("case %zu parsed (%d)", i, e);
    http_multipart_free(parts, n);
  }
  /* more parts than the limit */
  char many[2048] = "";
  for (int i = 0; i < HTTP_PARTS_MAX + 1; i++)
    strcat(many, "--a\r\nContent-Disposition: form-data; name=\"p\"\r\n\r\nx\r\n");
  strcat(many, "--a--");
  ASSERT_INT(mp("multipart/form-data; boundary=a", many, parts, &n), ==, ERR_BAD_MULTIPART);
  http_multipart_free(parts, n);
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

/* Decodes s; on ERR_OK checks that the bytes are want (NULL: none), else that msg has want. */
static void b64_case(const char *s, enum err e, const char *want) {
  uint8_t *out = (uint8_t *)"not set";
  size_t n = 99;
  char msg[512] = "";
  enum err got = base64_decode(s, strlen(s), &out, &n, msg, sizeof(msg));
  if (got != e) TEST_FAIL("'%s': error %d, expected %d (%s)", s, got, e, msg);
  if (e == ERR_OK) {
    ASSERT_INT(n, ==, strlen(want));
    ASSERT(n ? memcmp(out, want, n) == 0 : out == NULL);
  } else {
    ASSERT(out == NULL && n == 0);
    if (!strstr(msg, want)) TEST_FAIL("'%s': message '%s' lacks '%s'", s, msg, want);
  }
  free(out);
}

/* base64_decode: padding, unpadded tails, line breaks, data: prefixes, and every error with the
 * byte offset and character it names. */
static void test_base64_decode(void) {
  static const char *const ok[][2] = {
      {"Zm9vYmFy", "foobar"},
      {"Zg==", "f"},
      {"Zm8=", "fo"},
      {"Zm9v", "foo"},
      {"Zg", "f"},
      {"Zm8", "fo"},
      {"Zm9vYg", "foob"}, /* the padding may be left out */
      {"Zm9v\nYmFy", "foobar"},
      {"Zm9v\r\nYmFy\r\n", "foobar"},
      {"\nZ\nm\r8\n=\n", "fo"},
      {"Zg=\n=", "f"},
      {"Zh==", "f"}, /* pad bits that are not 0 are ignored */
      {"data:image/png;base64,Zm9v", "foo"},
      {"DATA:image/jpeg;BASE64,Zm8=", "fo"},
      {"data:;base64,Zg", "f"},
      {"data:image/png;charset=x;base64,Zm9v", "foo"},
      {"", ""},
      {"\r\n", ""},
      {"data:image/png;base64,", ""},
      {"+/+/", "\xfb\xff\xbf"},
  };
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) b64_case(ok[i][0], ERR_OK, ok[i][1]);
  static const char *const bad[][2] = {
      {"Zm9v YmFy", "a space, 0x20 at byte 4"},
      {"Zm9v YmFy", "a '+' that URL decoding turned into a space?"},
      {"Zm9v-_", "'-' at byte 4"},
      {"Zm9v-_", "base64url"},
      {"Zm9vYm\tFy", "byte 0x09 at byte 6"},
      {"Zm9v\xc3\xa9", "byte 0xc3 at byte 4"},
      {"Zm9v\x01", "byte 0x01 at byte 4"},
      {"data:image/png;base64,Zm9v*", "'*' at byte 26"},
      {"Zg=", "the padding at byte 2 has 1 '='; a last group of 2 characters takes 2"},
      {"Zg===", "the padding at byte 2 has 3 '='"},
      {"Zm8==", "the padding at byte 3 has 2 '='; a last group of 3 characters takes 1"},
      {"Zm9v=", "'=' at byte 4 follows a complete group of 4"},
      {"=", "'=' at byte 0 follows a complete group"},
      {"Zg==Zg==", "'Z' at byte 4 follows the padding '=' at byte 2"},
      {"Zm9=v", "'v' at byte 4 follows the padding '=' at byte 3"},
      {"Zm9vY", "its last group, at byte 4, has 1 character"},
      {"Zm9v\nY\n", "its last group, at byte 5, has 1 character"},
      {"Z===", "its last group, at byte 0, has 1 character"},
      {"data:image/png,Zm9v", "without ';base64,'"},
      {"data:image/png;base64Zm9v", "without ';base64,'"},
      {"data:", "without ';base64,'"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    b64_case(bad[i][0], ERR_BAD_IMAGE_ENCODING, bad[i][1]);
  /* round trips of every byte value at every length mod 3, padded, unpadded and wrapped at 76
   * columns as MIME does */
  uint8_t data[256];
  for (int i = 0; i < 256; i++) data[i] = (uint8_t)(255 - i);
  for (size_t len = 0; len <= 256; len += len < 8 ? 1 : 61) {
    char *enc = base64_encode(data, len), wrapped[512], msg[256];
    size_t n = strlen(enc), w = 0, dlen;
    for (size_t i = 0; i < n; i++) {
      wrapped[w++] = enc[i];
      if (i % 76 == 75) wrapped[w++] = '\n';
    }
    const char *forms[] = {enc, wrapped};
    size_t lens[] = {strcspn(enc, "="), w};
    for (int f = 0; f < 2; f++) {
      uint8_t *out;
      ASSERT_INT(base64_decode(forms[f], lens[f], &out, &dlen, msg, sizeof(msg)), ==, ERR_OK);
      ASSERT_INT(dlen, ==, len);
      ASSERT(len == 0 || memcmp(out, data, len) == 0);
      free(out);
    }
    free(enc);
  }
}

static void test_errors(void) {
  ASSERT_INT(err_status(ERR_OK), ==, 200);
  ASSERT_INT(err_status(ERR_BODY_TOO_LARGE), ==, 413);
  ASSERT_INT(err_status(ERR_UNSUPPORTED_MEDIA), ==, 415);
  ASSERT_INT(err_status(ERR_IMAGE_TOO_LARGE), ==, 422);
  ASSERT_INT(err_status(ERR_QUEUE_FULL), ==, 503);
  ASSERT_STR(err_code(ERR_QUEUE_FULL), "queue_full");
  struct api_response *r = api_error_response(ERR_QUEUE_FULL, NULL);
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
  ASSERT_INT(params_parse(ep, "", NULL, 0, &v, msg, sizeof(msg)), ==, ERR_OK);
  ASSERT_INT(v.method, ==, VAR_AUTO);
  ASSERT_INT(v.radius, ==, 7);
  ASSERT_INT(v.window, ==, CPU_WINDOW_TRIANGLE);
  ASSERT_INT(v.output, ==, VAR_STDDEV);
  ASSERT_INT(v.compression, ==, 2);
  ASSERT_INT(v.psnr, ==, 1);
  ASSERT_INT(params_parse(ep, "method=threewise&radius=15&window=box&output=variance", NULL, 0, &v,
                          msg, sizeof(msg)),
             ==, ERR_OK);
  ASSERT_INT(v.method, ==, CPU_VAR_THREEWISE);
  ASSERT_INT(v.window, ==, CPU_WINDOW_BOX);
  ASSERT_INT(v.output, ==, VAR_VARIANCE);
  ASSERT_INT(params_parse(ep, "method=threewise&radius=5", NULL, 0, &v, msg, sizeof(msg)), ==,
             ERR_BAD_PARAMETER);
  ASSERT(strstr(msg, "1 3 7 15 31 63 127") && strstr(msg, "got 5"));
  ASSERT_INT(params_parse(ep, "radius=5", NULL, 0, &v, msg, sizeof(msg)), ==, ERR_OK);
  ASSERT_INT(params_parse(ep, "method=box", NULL, 0, &v, msg, sizeof(msg)), ==, ERR_UNKNOWN_METHOD);
  ASSERT_INT(params_parse(ep, "format=jpeg", NULL, 0, &v, msg, sizeof(msg)), ==, ERR_BAD_PARAMETER);
}

static enum err parse_conv(const char *query, const char *json, struct conv_params *p, char *msg) {
  memset(p, 0x5a, sizeof(*p));
  return params_parse(&api_convolve_endpoint, query, json, json ? strlen(json) : 0, p, msg, 512);
}

/* /convolve: the kernel parameter type, normalising, and the named kernels' bias. */
static void test_kernel_params(void) {
  static struct conv_params p, q; /* large */
  char msg[512] = "";
  ASSERT_INT(parse_conv("kernel=emboss", NULL, &p, msg), ==, ERR_OK);
  ASSERT_INT(p.kernel.named, ==, 2);
  ASSERT_DBL(p.conv.bias, ==, 128); /* the kernel's own */
  ASSERT_INT(parse_conv("kernel=emboss&bias=0", NULL, &p, msg), ==, ERR_OK);
  ASSERT_DBL(p.conv.bias, ==, 0); /* a given bias overrides it */
  ASSERT_INT(parse_conv("kernel=%5B1,2,1,2,4,2,1,2,1%5D", NULL, &p, msg), ==, ERR_OK);
  ASSERT_INT(parse_conv("", "{\"kernel\": [[1,2,1],[2,4,2],[1,2,1]]}", &q, msg), ==, ERR_OK);
  ASSERT_INT(p.conv.size, ==, 3);
  ASSERT(memcmp(p.conv.k, q.conv.k, 9 * sizeof(float)) == 0);
  ASSERT_DBL(p.conv.k[4], ==, 0.25f);
  ASSERT_INT(parse_conv("normalize=false", "{\"kernel\": \"[1,2,1,2,4,2,1,2,1]\"}", &p, msg), ==,
             ERR_OK);
  ASSERT_DBL(p.conv.k[4], ==, 4);
  ASSERT_INT(parse_conv("kernel=[-1,-1,-1,-1,8,-1,-1,-1,-1]", NULL, &p, msg), ==, ERR_OK);
  ASSERT_DBL(p.conv.k[4], ==, 8); /* sum 0: left as it is */
  ASSERT_INT(parse_conv("kernel=[5]", NULL, &p, msg), ==, ERR_OK);
  ASSERT_DBL(p.conv.k[0], ==, 1);
  ASSERT_INT(parse_conv("kernel=edge", "{\"kernel\": \"edge\"}", &p, msg), ==, ERR_OK);
  ASSERT_INT(
      parse_conv("kernel=[1,1,1,1,1,1,1,1,1]", "{\"kernel\": [[1,1,1],[1,1,1],[1,1,1]]}", &p, msg),
      ==, ERR_OK);
  static const char *const bad[] = {"kernel=[1,2,3,4]", "kernel=[]",         "kernel=[[1],[2]]",
                                    "kernel=[1,2,3",    "kernel=[1,true,3]", "kernel=Edge",
                                    "kernel=1",         "kernel=[[1,2,3]]",  "kernel=[1e400]"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    enum err e = parse_conv(bad[i], NULL, &p, msg);
    if (e != ERR_BAD_PARAMETER) TEST_FAIL("'%s': error %d (%s)", bad[i], e, msg);
    ASSERT(strstr(msg, "kernel"));
  }
  ASSERT_INT(parse_conv("", NULL, &p, msg), ==, ERR_MISSING_PARAMETER);
  ASSERT_INT(parse_conv("kernel=edge", "{\"kernel\": \"box\"}", &p, msg), ==,
             ERR_CONFLICTING_PARAMETER);
  json_t *d = params_describe(&api_convolve_endpoint, -1);
  ASSERT_STR(json_string_value(json_object_get(json_array_get(d, 0), "type")), "kernel");
  json_decref(d);
  for (int i = 0; api_ops[i]; i++) ASSERT(api_ops[i]->ep->nparams <= MAX_PARAMS);
  for (int i = 0; api_ops[i]; i++) ASSERT(api_ops[i]->params_size <= OP_PARAMS_MAX);
}

/* sigma_x and sigma_y, regions and feather on /blur; /sharpen's parameters. */
static void test_blur_axes_regions(void) {
  static const struct {
    const char *q, *json;
    enum err e;
  } cases[] = {
      {"sigma_x=1&sigma_y=20", NULL, ERR_OK},
      {"sigma_x=0.49&sigma_y=2", NULL, ERR_BAD_PARAMETER},
      {"sigma_x=1&sigma_y=300.5", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&sigma_x=1&sigma_y=2", NULL, ERR_CONFLICTING_PARAMETER},
      {"sigma=2&sigma_y=2", NULL, ERR_CONFLICTING_PARAMETER},
      {"sigma=2", "{\"sigma_x\": 3, \"sigma_y\": 4}", ERR_CONFLICTING_PARAMETER},
      {"sigma_x=2", NULL, ERR_MISSING_PARAMETER},
      {"sigma_y=2", NULL, ERR_MISSING_PARAMETER},
      {"", NULL, ERR_MISSING_PARAMETER},
      {"sigma_x=2", "{\"sigma_y\": 4}", ERR_OK},
      {"sigma=2&regions=0,0,10,10", NULL, ERR_OK},
      {"sigma=2&regions=-5,-5,10,10;20,30,1,1;", NULL, ERR_OK},
      {"sigma=2&regions=0,0,0,10", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&regions=0,0,10,-1", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&regions=0,0,10", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&regions=0,0,10,10,5", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&regions=0,0,1.5,10", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&regions=a,0,1,1", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&regions=0,0,2000000,1", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&regions=", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&regions=;", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&regions=[[1,2,3,4]]", NULL, ERR_OK},
      {"sigma=2", "{\"regions\": [[1, 2, 3, 4], [5, 6, 7, 8]]}", ERR_OK},
      {"sigma=2", "{\"regions\": [[1, 2, 3]]}", ERR_BAD_PARAMETER},
      {"sigma=2", "{\"regions\": [[1, 2, 3, \"4\"]]}", ERR_BAD_PARAMETER},
      {"sigma=2", "{\"regions\": []}", ERR_BAD_PARAMETER},
      {"sigma=2", "{\"regions\": [1, 2, 3, 4]}", ERR_BAD_PARAMETER},
      {"sigma=2", "{\"regions\": \"1,2,3,4\"}", ERR_OK},
      {"sigma=2", "{\"regions\": {\"x\": 1}}", ERR_BAD_PARAMETER},
      {"sigma=2&regions=1,2,3,4", "{\"regions\": [[1, 2, 3, 4]]}", ERR_OK},
      {"sigma=2&regions=1,2,3,4", "{\"regions\": [[1, 2, 3, 5]]}", ERR_CONFLICTING_PARAMETER},
      {"sigma=2&regions=0,0,8,8&feather=4", NULL, ERR_OK},
      {"sigma=2&regions=0,0,8,8&feather=1025", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&feather=4", NULL, ERR_BAD_PARAMETER},
      {"sigma=2&feather=0", NULL, ERR_OK},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct blur_params p;
    char msg[512] = "";
    enum err e = parse(cases[i].q, cases[i].json, &p, msg);
    if (e != cases[i].e)
      TEST_FAIL("'%s' %s: error %d, expected %d (%s)", cases[i].q,
                cases[i].json ? cases[i].json : "", e, cases[i].e, msg);
    if (e != ERR_OK) ASSERT(strlen(msg) > 20);
  }
  struct blur_params p;
  char msg[512];
  ASSERT_INT(parse("sigma_x=1.5&sigma_y=20", NULL, &p, msg), ==, ERR_OK);
  ASSERT_DBL(p.sigma_x, ==, 1.5);
  ASSERT_DBL(p.sigma_y, ==, 20);
  ASSERT_INT(p.regions.n, ==, 0);
  ASSERT_INT(parse("sigma=3&regions=-5,-6,10,11;20,30,1,2", NULL, &p, msg), ==, ERR_OK);
  ASSERT_DBL(p.sigma_x, ==, 3);
  ASSERT_DBL(p.sigma_y, ==, 3);
  ASSERT_INT(p.regions.n, ==, 2);
  ASSERT_INT(p.regions.r[0][0], ==, -5);
  ASSERT_INT(p.regions.r[0][3], ==, 11);
  ASSERT_INT(p.regions.r[1][1], ==, 30);
  ASSERT_INT(p.feather, ==, 0);
  char q[1024] = "sigma=2&regions=";
  for (int i = 0; i < 65; i++) strcat(q, "1,1,1,1;");
  ASSERT_INT(parse(q, NULL, &p, msg), ==, ERR_BAD_PARAMETER);
  ASSERT(strstr(msg, "65 rectangles"));
  q[strlen(q) - 8] = 0;
  ASSERT_INT(parse(q, NULL, &p, msg), ==, ERR_OK);
  ASSERT_INT(p.regions.n, ==, 64);
  ASSERT_INT(parse("sigma=2&sigma_x=1&sigma_y=2", NULL, &p, msg), ==, ERR_CONFLICTING_PARAMETER);
  ASSERT(strstr(msg, "sigma_x"));

  const struct endpoint *ep = &api_sharpen_endpoint;
  memset(&p, 0x5a, sizeof(p));
  ASSERT_INT(params_parse(ep, "", NULL, 0, &p, msg, 512), ==, ERR_OK);
  ASSERT_DBL(p.sigma_x, ==, 1);
  ASSERT_DBL(p.sigma_y, ==, 1);
  ASSERT_DBL(p.amount, ==, 1);
  ASSERT_DBL(p.threshold, ==, 0);
  ASSERT_INT(p.luma, ==, 0);
  ASSERT_INT(p.method, ==, METHOD_AUTO);
  ASSERT_INT(params_parse(ep, "sigma=2.5&amount=3&threshold=4&luma=true", NULL, 0, &p, msg, 512),
             ==, ERR_OK);
  ASSERT_DBL(p.sigma_y, ==, 2.5);
  ASSERT_DBL(p.amount, ==, 3);
  ASSERT_DBL(p.threshold, ==, 4);
  ASSERT_INT(p.luma, ==, 1);
  static const char *const bad[] = {
      "sigma=50.5", "sigma=0.4", "amount=-0.1",     "amount=10.5", "threshold=-1",
      "luma=maybe", "sigma_x=2", "regions=0,0,1,1", "method=fft",  "method=yvv&truncate=3"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    enum err e = params_parse(ep, bad[i], NULL, 0, &p, msg, 512);
    if (e == ERR_OK) TEST_FAIL("/sharpen '%s' accepted", bad[i]);
    ASSERT(err_status(e) == 400 && strlen(msg) > 20);
  }
}

/* The table of operations: each one's name is its path without '/', its route leads to it, it
 * has a summary and its parameters fit; a compute on the CPU wherever there is one on the GPU. */
static void test_op_table(void) {
  int n, routes = 0;
  const struct route *t = route_table(&n);
  for (int i = 0; api_ops[i]; i++) {
    const struct api_op *op = api_ops[i];
    char path[64];
    snprintf(path, sizeof(path), "/%s", op->name);
    ASSERT_STR(op->ep->path, path);
    const struct route *r = route_find(path);
    ASSERT(r != NULL && r->op == op && r->ep == op->ep && strcmp(r->method, "POST") == 0);
    ASSERT(op->summary && strlen(op->summary) > 20);
    ASSERT(op->params_size <= OP_PARAMS_MAX);
    for (int b = 0; b < ENGINE_NBACKENDS; b++) /* the CPU's compute is every other's fallback */
      ASSERT(op->compute[ENGINE_CPU] || !op->compute[b]);
  }
  for (int i = 0; i < n; i++) routes += t[i].op != NULL;
  int nops = 0;
  while (api_ops[nops]) nops++;
  ASSERT_INT(routes, ==, nops); /* one route per operation, no other image route */
}

int main(void) {
  RUN(test_defaults);
  RUN(test_ranges);
  RUN(test_json);
  RUN(test_json_object);
  RUN(test_unescape);
  RUN(test_multipart);
  RUN(test_base64);
  RUN(test_base64_decode);
  RUN(test_errors);
  RUN(test_variance_params);
  RUN(test_kernel_params);
  RUN(test_blur_axes_regions);
  RUN(test_op_table);
  fprintf(stderr, "unit_api: all passed\n");
  return 0;
}

/* unit_limits: the request limits that need no server: the streaming check of a JSON body
 * (bodyscan.c) fed whole and byte by byte, the cost model and budget of each endpoint
 * (params.c), multipart's quoted Content-Disposition parameters and its empty body, and the
 * messages of parameters of the wrong JSON type or not decimal. */
#include "../api/api_int.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Feeds text to a fresh scanner, in pieces of step bytes (0: whole). */
static enum err scan(const char *text, size_t len, size_t step, char *msg, size_t msglen) {
  struct http_bodyscan s;
  memset(&s, 0, sizeof(s));
  enum err e = ERR_OK;
  if (step == 0) step = len ? len : 1;
  for (size_t i = 0; e == ERR_OK && i < len; i += step)
    e = http_bodyscan_feed(&s, (const uint8_t *)text + i, len - i < step ? len - i : step, msg,
                           msglen);
  return e;
}

/* A body of n repetitions of unit between head and tail (caller frees). */
static char *repeat(const char *head, const char *unit, size_t n, const char *tail, size_t *len) {
  size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
  char *b = malloc(hl + ul * n + tl + 1);
  ASSERT(b != NULL);
  memcpy(b, head, hl);
  for (size_t i = 0; i < n; i++) memcpy(b + hl + i * ul, unit, ul);
  memcpy(b + hl + ul * n, tail, tl + 1);
  *len = hl + ul * n + tl;
  return b;
}

static void test_bodyscan_limits(void) {
  char msg[256];
  size_t len;
  static const size_t steps[] = {0, 1, 7};
  for (int k = 0; k < 3; k++) {
    /* {"x":[{},{},...]}: refused for its values, in its first kilobytes */
    char *b = repeat("{\"x\":[", "{},", 100000, "{}]}", &len);
    ASSERT_INT(scan(b, len, steps[k], msg, sizeof(msg)), ==, ERR_BAD_JSON);
    ASSERT(strstr(msg, "4096 values") != NULL);
    free(b);
    /* depth: 8 levels pass, 9 do not */
    const char *deep8 = "{\"a\":[[[[[[[1]]]]]]]}", *deep9 = "{\"a\":[[[[[[[[1]]]]]]]]}";
    ASSERT_INT(scan(deep8, strlen(deep8), steps[k], msg, sizeof(msg)), ==, ERR_OK);
    ASSERT_INT(scan(deep9, strlen(deep9), steps[k], msg, sizeof(msg)), ==, ERR_BAD_JSON);
    ASSERT(strstr(msg, "more than 8 deep") != NULL);
    /* a body that starts no JSON value (a file sent as JSON) is refused at its first byte */
    ASSERT_INT(scan("\x89PNG\r\n", 6, steps[k], msg, sizeof(msg)), ==, ERR_BAD_JSON);
    ASSERT(strstr(msg, "first byte is 0x89") != NULL);
    ASSERT_INT(scan(" [1, 2]", 7, steps[k], msg, sizeof(msg)), ==, ERR_OK); /* JSON: the job's */
    ASSERT_INT(scan(" {\"image\": \"\"}", 15, steps[k], msg, sizeof(msg)), ==, ERR_OK);
    /* bytes outside the image: a long string of another key counts */
    b = repeat("{\"sigma\":\"", "a", BODYSCAN_BYTES_MAX, "\"}", &len);
    ASSERT_INT(scan(b, len, steps[k], msg, sizeof(msg)), ==, ERR_BODY_TOO_LARGE);
    ASSERT(strstr(msg, "65536 bytes") != NULL);
    free(b);
  }
}

static void test_bodyscan_image(void) {
  char msg[256];
  size_t len;
  static const size_t steps[] = {0, 1, 3};
  for (int k = 0; k < 3; k++) {
    /* the top-level image string does not count, however long, escapes included */
    char *b =
        repeat("{\"sigma\": 2, \"image\" : \"", "QUJD\\/", 200000, "\", \"psnr\": false}", &len);
    ASSERT_INT(scan(b, len, steps[k], msg, sizeof(msg)), ==, ERR_OK);
    free(b);
    /* a nested "image", or a key that only starts like it, counts */
    b = repeat("{\"p\":{\"image\":\"", "a", BODYSCAN_BYTES_MAX, "\"}}", &len);
    ASSERT_INT(scan(b, len, steps[k], msg, sizeof(msg)), ==, ERR_BODY_TOO_LARGE);
    free(b);
    b = repeat("{\"images\":\"", "a", BODYSCAN_BYTES_MAX, "\"}", &len);
    ASSERT_INT(scan(b, len, steps[k], msg, sizeof(msg)), ==, ERR_BODY_TOO_LARGE);
    free(b);
    /* an image that is not a string counts too */
    b = repeat("{\"image\":[", "1,", 5000, "1]}", &len);
    ASSERT_INT(scan(b, len, steps[k], msg, sizeof(msg)), ==, ERR_BAD_JSON);
    free(b);
  }
  /* the largest legitimate body: a 31x31 kernel, 17 digits a weight, indented rows */
  char *k = malloc(64 * 1024);
  size_t n =
      (size_t)sprintf(k, "{\"image\": \"iVBORw0KGgo=\", \"normalize\": false,\n \"kernel\": [");
  for (int r = 0; r < CPU_CONV_MAX; r++) {
    n += (size_t)sprintf(k + n, "%s\n    [", r ? "," : "");
    for (int c = 0; c < CPU_CONV_MAX; c++)
      n += (size_t)sprintf(k + n, "%s%.17g", c ? ", " : "", -0.0010405828157247687 * (r + 1));
    n += (size_t)sprintf(k + n, "]");
  }
  n += (size_t)sprintf(k + n, "]}");
  fprintf(stderr, "    a 31x31 kernel at 17 digits: %zu bytes\n", n);
  ASSERT_INT(n, <, BODYSCAN_BYTES_MAX);
  ASSERT_INT(scan(k, n, 0, msg, sizeof(msg)), ==, ERR_OK);
  free(k);
}

/* api_body_chunk scans JSON bodies only, decided by the Content-Type of the first piece. */
static void test_body_chunk(void) {
  char msg[256];
  size_t len;
  char *b = repeat("{\"x\":[", "1,", 5000, "1]}", &len);
  struct api_request json = {.content_type = "application/json; charset=utf-8"};
  struct api_request form = {.content_type = "multipart/form-data; boundary=x"};
  enum err e = ERR_OK;
  for (size_t i = 0; e == ERR_OK && i < len; i += 1000)
    e = api_body_chunk(NULL, &json, (const uint8_t *)b + i, len - i < 1000 ? len - i : 1000, msg,
                       sizeof(msg));
  ASSERT_INT(e, ==, ERR_BAD_JSON);
  ASSERT_INT(err_status(e), ==, 400);
  for (size_t i = 0; i < len; i += 1000)
    ASSERT_INT(api_body_chunk(NULL, &form, (const uint8_t *)b + i, len - i < 1000 ? len - i : 1000,
                              msg, sizeof(msg)),
               ==, ERR_OK);
  free(b);
}

static double cost(const struct endpoint *ep, const char *query, int w, int h, int c) {
  static union { /* large: a kernel */
    max_align_t align;
    unsigned char bytes[OP_PARAMS_MAX];
  } p;
  char msg[256];
  memset(&p, 0, sizeof(p));
  enum err e = params_parse(ep, query, NULL, 0, p.bytes, msg, sizeof(msg));
  if (e != ERR_OK) TEST_FAIL("%s?%s: %s", ep->path, query, msg);
  struct codec_shape s = {w, h, c, 8};
  return ep->cost ? ep->cost(p.bytes, &s) : 0;
}

static void test_cost_model(void) {
  const struct endpoint *b = &api_blur_endpoint, *v = &api_variance_endpoint;
  /* the costly cases (seconds of one core; the default budget is 30) */
  double welford = cost(v, "radius=127&method=welford", 500, 500, 3);
  ASSERT_DBL(welford, >, 30);
  ASSERT_DBL(cost(b, "sigma=300&truncate=8&method=fir", 6000, 4000, 3), >, 100);
  ASSERT_DBL(cost(b, "sigma=300&truncate=8&method=fir", 1920, 1080, 3), <, 10);
  char q[2048] = "sigma=20&regions=";
  for (int i = 0; i < 64; i++) strcat(q, i ? ";0,0,3000,3000" : "0,0,3000,3000");
  ASSERT_DBL(cost(b, q, 3000, 3000, 4), >, 30);
  ASSERT_DBL(cost(b, "sigma=20", 3000, 3000, 4), <, 2); /* one region's worth: the whole image */
  /* documented uses at the 40 MP limit stay within 30 s */
  ASSERT_DBL(cost(b, "sigma=300", 8000, 5000, 4), <, 30);
  ASSERT_DBL(cost(b, "sigma=300&psnr=false", 8000, 5000, 4), <, 2);
  ASSERT_DBL(cost(v, "radius=127", 8000, 5000, 3), <, 2);
  ASSERT_DBL(cost(v, "radius=127&method=pairwise", 8000, 5000, 3), <, 3);
  ASSERT_DBL(cost(&api_contrast_endpoint, "radius=127", 8000, 5000, 4), <, 2);
  ASSERT_DBL(cost(&api_sharpen_endpoint, "sigma=50", 8000, 5000, 4), <, 30);
  ASSERT_DBL(cost(&api_convert_endpoint, "", 8000, 5000, 4), ==, 0);
  /* a 31x31 kernel on 0.25 MP: about half a second */
  char k[4096] = "kernel=[";
  for (int i = 0; i < 961; i++) strcat(k, i ? ",1" : "1");
  strcat(k, "]");
  double conv = cost(&api_convolve_endpoint, k, 500, 500, 3);
  ASSERT_DBL(conv, >, 0.2);
  ASSERT_DBL(conv, <, 2);
  /* costs grow with the work: radius, taps, channels */
  ASSERT_DBL(cost(v, "radius=15&method=naive", 1000, 1000, 1), >,
             3 * cost(v, "radius=7&method=naive", 1000, 1000, 1));
  ASSERT_DBL(cost(b, "sigma=32&method=fir", 1000, 1000, 4), >,
             cost(b, "sigma=32&method=fir", 1000, 1000, 3));
}

static void test_budget(void) {
  static struct api_ctx ctx; /* only cfg's max_cost and max_pixels are read */
  static struct var_params vp;
  char msg[512];
  double est;
  /* an 8x8 RGB PNG's signature and IHDR (the budget reads no further) */
  static const uint8_t png[] = {0x89, 'P',  'N', 'G', '\r', '\n', 0x1a, '\n', 0,    0, 0,
                                13,   'I',  'H', 'D', 'R',  0,    0,    0x1f, 0x40, 0, 0,
                                0x17, 0x70, 8,   2,   0,    0,    0,    0,    0,    0, 0};
  ASSERT_INT(params_parse(&api_variance_endpoint, "radius=127&method=welford", NULL, 0, &vp, msg,
                          sizeof(msg)),
             ==, ERR_OK);
  ctx.cfg.max_cost = 30; /* 8000x6000: far past it */
  ASSERT_INT(
      op_budget(&ctx, &api_variance_endpoint, &vp, png, sizeof(png), NULL, &est, msg, sizeof(msg)),
      ==, ERR_TOO_EXPENSIVE);
  ASSERT_DBL(est, >, 30);
  ASSERT(strstr(msg, "8000x6000") && strstr(msg, "limit (--max-cost) is 30 s"));
  ctx.cfg.max_cost = 0; /* no budget */
  ASSERT_INT(
      op_budget(&ctx, &api_variance_endpoint, &vp, png, sizeof(png), NULL, &est, msg, sizeof(msg)),
      ==, ERR_OK);
  ctx.cfg.max_cost = 30; /* a header that cannot be read: the decoder will say why */
  ASSERT_INT(op_budget(&ctx, &api_variance_endpoint, &vp, png, 20, NULL, &est, msg, sizeof(msg)),
             ==, ERR_OK);
  /* the estimate is the request's (upload, decode, a stored PNG's answer), the operation's and
   * what the answer's format adds; /convert has no operation of its own */
  static union {
    max_align_t align;
    unsigned char bytes[OP_PARAMS_MAX];
  } cp;
  ASSERT_INT(params_parse(&api_convert_endpoint, "format=webp&effort=6", NULL, 0, cp.bytes, msg,
                          sizeof(msg)),
             ==, ERR_OK);
  struct codec_shape shape = {8000, 6000, 3, 8};
  struct codec_encode_opts webp = op_output(&api_convert_endpoint, cp.bytes, CODEC_PNG, NULL);
  ctx.cfg.max_cost = 1;
  ASSERT_INT(op_budget(&ctx, &api_convert_endpoint, cp.bytes, png, sizeof(png), NULL, &est, msg,
                       sizeof(msg)),
             ==, ERR_TOO_EXPENSIVE);
  ASSERT_NEAR(est, op_request_s(png, sizeof(png), &shape) + op_encode_s(&webp, &shape), 1e-9);
  ASSERT_DBL(op_encode_s(&webp, &shape), >, 10 * op_request_s(png, sizeof(png), &shape));
  /* an image past the pixel or side limits is refused for that, whatever its cost */
  ctx.cfg.max_pixels = 40000000; /* 48 MP */
  ASSERT_INT(op_budget(&ctx, &api_convert_endpoint, cp.bytes, png, sizeof(png), NULL, &est, msg,
                       sizeof(msg)),
             ==, ERR_IMAGE_TOO_LARGE);
  ASSERT(strstr(msg, "pixel count 48000000 (8000x6000) exceeds") && strstr(msg, "--max-pixels"));
  ASSERT_DBL(est, ==, 0);
  ctx.cfg.max_cost = 0; /* without a budget too */
  ASSERT_INT(op_budget(&ctx, &api_convert_endpoint, cp.bytes, png, sizeof(png), NULL, &est, msg,
                       sizeof(msg)),
             ==, ERR_IMAGE_TOO_LARGE);
  ctx.cfg.max_pixels = 0, ctx.cfg.max_width = 7999;
  ASSERT_INT(op_budget(&ctx, &api_convert_endpoint, cp.bytes, png, sizeof(png), NULL, &est, msg,
                       sizeof(msg)),
             ==, ERR_IMAGE_TOO_LARGE);
  ASSERT(strstr(msg, "width 8000 exceeds the limit of 7999 (--max-width)"));
  ctx.cfg.max_width = 0, ctx.cfg.max_height = 5999;
  ASSERT_INT(op_budget(&ctx, &api_convert_endpoint, cp.bytes, png, sizeof(png), NULL, &est, msg,
                       sizeof(msg)),
             ==, ERR_IMAGE_TOO_LARGE);
  ASSERT(strstr(msg, "height 6000 exceeds the limit of 5999 (--max-height)"));
  ctx.cfg.max_height = 0;
  struct codec_shape s;
  ASSERT_INT(codec_probe(png, sizeof(png), &s), ==, 0);
  ASSERT_INT(s.width, ==, 8000);
  ASSERT_INT(s.height, ==, 6000);
  ASSERT_INT(s.channels, ==, 3);
  ASSERT_INT(s.depth, ==, 8);
}

/* The encode's part of the budget (op_encode_s), at the 40 MP limit. */
static double enc(enum codec_format f, int level, int effort, int lossless, int c, int depth) {
  struct codec_encode_opts o = {.format = f, .compression = level, .lossless = lossless};
  o.effort = effort, o.effort_set = effort >= 0;
  struct codec_shape s = {8000, 5000, c, depth};
  return op_encode_s(&o, &s);
}

static void test_encode_cost(void) {
  ASSERT_DBL(enc(CODEC_WEBP, 6, 6, 0, 4, 8), >, 30); /* lossy WebP's alpha at effort 6 */
  ASSERT_DBL(enc(CODEC_WEBP, 6, 6, 0, 3, 8), <, 30);
  ASSERT_DBL(enc(CODEC_WEBP, 6, -1, 0, 4, 8), <, 10); /* the default effort */
  ASSERT_DBL(enc(CODEC_PNG, 9, -1, 0, 4, 16), >, 30); /* libdeflate's search on smooth images */
  ASSERT_DBL(enc(CODEC_PNG, 9, -1, 0, 4, 8), >, 2 * enc(CODEC_PNG, 9, -1, 0, 2, 8) - 1e-9);
  ASSERT_DBL(enc(CODEC_PNG, 2, -1, 0, 4, 16), <, 2);
  ASSERT_DBL(enc(CODEC_JPEG, 6, -1, 0, 3, 8), <, 2);
  ASSERT_DBL(enc(CODEC_RAW, 6, -1, 0, 1, 16), ==, 0);
}

static enum err mp(const char *ct, const char *body, struct http_part *parts, int *n) {
  char msg[256];
  return http_multipart_parse(ct, (const uint8_t *)body, strlen(body), parts, n, msg, sizeof(msg));
}

static void test_multipart_quoted(void) {
  struct http_part parts[HTTP_PARTS_MAX];
  int n;
  const char *ct = "multipart/form-data; boundary=b";
  /* RFC 2183: a quoted-string is one value, whatever ';' or "name=" it holds */
  ASSERT_INT(mp(ct,
                "--b\r\nContent-Disposition: form-data; filename=\"a;name=image;\"; "
                "name=\"params\"\r\n\r\n{}\r\n--b--",
                parts, &n),
             ==, ERR_OK);
  ASSERT_INT(n, ==, 1);
  ASSERT_STR(parts[0].name, "params");
  http_multipart_free(parts, n);
  /* backslash escapes inside quotes */
  ASSERT_INT(mp(ct,
                "--b\r\nContent-Disposition: form-data; name=\"a\\\"b\\\\c\"; "
                "filename=\"x\"\r\n\r\nd\r\n--b--",
                parts, &n),
             ==, ERR_OK);
  ASSERT_STR(parts[0].name, "a\"b\\c");
  http_multipart_free(parts, n);
  ASSERT_INT(
      mp(ct, "--b\r\nContent-Disposition: form-data; NAME = image\r\n\r\nd\r\n--b--", parts, &n),
      ==, ERR_OK);
  ASSERT_STR(parts[0].name, "image");
  http_multipart_free(parts, n);
  /* an unterminated quoted filename hides no name */
  ASSERT_INT(mp(ct,
                "--b\r\nContent-Disposition: form-data; filename=\"x; name=image\r\n\r\nd\r\n--b--",
                parts, &n),
             ==, ERR_BAD_MULTIPART);
  http_multipart_free(parts, n);
  /* the empty body, with no buffer at all (memmem must not see NULL) */
  char msg[256];
  ASSERT_INT(http_multipart_parse(ct, NULL, 0, parts, &n, msg, sizeof(msg)), ==, ERR_BAD_MULTIPART);
  ASSERT(strstr(msg, "empty") != NULL);
}

static void test_messages(void) {
  struct blur_params p;
  char msg[256];
  json_t *o = json_pack("{s:b}", "sigma", 1);
  ASSERT_INT(params_parse_object(&api_blur_endpoint, "", o, "the JSON body", &p, msg, sizeof(msg)),
             ==, ERR_BAD_PARAMETER);
  ASSERT_STR(msg, "sigma must be a number from 0.5 to 300; got a boolean.");
  json_decref(o);
  o = json_pack("{s:[i]}", "sigma", 1);
  ASSERT_INT(params_parse_object(&api_blur_endpoint, "", o, "the JSON body", &p, msg, sizeof(msg)),
             ==, ERR_BAD_PARAMETER);
  ASSERT(strstr(msg, "got an array.") != NULL);
  json_decref(o);
  static const char *const refused[] = {"sigma=0x10", "sigma=1e400", "sigma=inf",  "sigma=nan",
                                        "sigma=-inf", "sigma=0x1p3", "sigma=2%20", "sigma=+2"};
  for (int i = 0; i < 8; i++) {
    ASSERT_INT(params_parse(&api_blur_endpoint, refused[i], NULL, 0, &p, msg, sizeof(msg)), ==,
               ERR_BAD_PARAMETER);
    ASSERT(strstr(msg, "sigma must be a number") != NULL);
  }
  static const char *const accepted[] = {"sigma=16", "sigma=1e1", "sigma=2.5E0", "sigma=.5"};
  for (int i = 0; i < 4; i++)
    ASSERT_INT(params_parse(&api_blur_endpoint, accepted[i], NULL, 0, &p, msg, sizeof(msg)), ==,
               ERR_OK);
}

int main(void) {
  RUN(test_bodyscan_limits);
  RUN(test_bodyscan_image);
  RUN(test_body_chunk);
  RUN(test_cost_model);
  RUN(test_budget);
  RUN(test_encode_cost);
  RUN(test_multipart_quoted);
  RUN(test_messages);
  fprintf(stderr, "unit_limits: all passed\n");
  return 0;
}

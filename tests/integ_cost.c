/* Integration test of the cost model behind --max-cost against the real binary: a few requests
 * across the operations and the terms of the model (the fir family's column pass in and out of
 * the cache, the exact reference, regions, an O(r^2) variance, a large kernel, WebP and PNG at
 * their slowest settings on the content they are slowest on), each estimated by the model
 * (op_budget, the code the server runs on the request's header) and measured as the server's CPU
 * time: utime + stime of all its threads and of the children it waited for (/proc/PID/stat)
 * across the request. Each must agree
 * within 2x either way. CPU time, not wall time: other processes on the machine delay the answer,
 * not its work. The model's constants are measured by scripts/cost-calibration.sh
 * (api/ops/cost_table.h) on one machine; on a much faster or slower one this test fails and says by
 * how much, and the script rewrites them. Under the sanitizers (BLURD_SAN) the work is not the
 * optimised build's: the requests run and the ratios are printed, not asserted.
 *
 * `integ_cost --estimate ENDPOINT QUERY FILE [PARAMS]` prints the model's estimate in seconds for
 * that request (the query string, the image file, the params JSON) instead: bench/cost_model.sh
 * reads it. */
#include "../api/api_int.h"
#include "harness.h"
#include "test.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct server srv;

/* The model's estimate in seconds of the request of op name with query, params (JSON or NULL) and
 * the image file img: op_budget under a budget every request passes. */
static double estimate(const char *name, const char *query, const char *params, const uint8_t *img,
                       size_t len) {
  static struct api_ctx ctx; /* only cfg's limits are read */
  static union {
    max_align_t align;
    unsigned char bytes[OP_PARAMS_MAX];
  } p;
  const struct api_op *op = NULL;
  char msg[512];
  double est;
  for (int i = 0; api_ops[i]; i++)
    if (strcmp(api_ops[i]->name, name) == 0) op = api_ops[i];
  if (!op) TEST_FAIL("no operation %s", name);
  if (params_parse(op->ep, query, params, params ? strlen(params) : 0, p.bytes, msg, sizeof(msg)) !=
      ERR_OK)
    TEST_FAIL("%s?%s: %s", op->ep->path, query, msg);
  ctx.cfg.max_cost = 1e-12;
  ASSERT_INT(op_budget(&ctx, op->ep, p.bytes, img, len, NULL, &est, msg, sizeof(msg)), ==,
             ERR_TOO_EXPENSIVE);
  return est;
}

/* The server's CPU time so far in seconds: user and system, all its threads, and the children
 * it has waited for (a codec may run in one). */
static double server_cpu(void) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)srv.pid);
  FILE *f = fopen(path, "r");
  ASSERT(f != NULL);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the name may hold spaces; the fields follow it */
  unsigned long long utime = 0, stime = 0;
  long long cutime = 0, cstime = 0;
  ASSERT(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld",
                     &utime, &stime, &cutime, &cstime) == 4);
  return (double)(utime + stime + cutime + cstime) / sysconf(_SC_CLK_TCK);
}

/* The server's CPU seconds for one request of path (query included) with img and params (JSON
 * or NULL). The first request is taken alone when it takes a second or more; else it is left out
 * (it grows the allocator's heap: page faults that the next ones do not take), and the request
 * is repeated until 0.3 s have gone by (a clock tick is 10 ms) and averaged. */
static double measured(const char *path, const uint8_t *img, size_t len, const char *params) {
  size_t blen = len;
  char *body = params ? form_body(img, len, params, &blen) : NULL;
  double first = -1, t0 = server_cpu(), t;
  int n = 0;
  do {
    struct http_resp r;
    ASSERT_INT(http_request(&srv, "POST", path, params ? FORM_TYPE : "application/octet-stream",
                            NULL, body ? (const void *)body : img, blen, &r),
               ==, 0);
    if (r.status != 200) TEST_FAIL("%s: %ld %s", path, r.status, r.body);
    http_resp_free(&r);
    t = server_cpu() - t0;
    if (first < 0) {
      first = t;
      if (first >= 1) break;
      t0 = server_cpu(), t = 0;
      continue;
    }
    n++;
  } while (t < 0.3);
  free(body);
  return n ? t / n : first;
}

/* Noise of width x height x channels 8-bit samples as a stored PNG (caller frees). */
static uint8_t *noise_png(int width, int height, int channels, size_t *len) {
  size_t n = (size_t)width * height * channels;
  uint8_t *px = malloc(n), *out = NULL;
  uint64_t x = 0x9e3779b97f4a7c15u;
  ASSERT(px != NULL);
  for (size_t i = 0; i < n; i++) { /* xorshift64 */
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    px[i] = (uint8_t)(x >> 56);
  }
  struct codec_image img = {px, width, height, channels, 8, CODEC_PNG, 1};
  struct codec_encode_opts o = {.format = CODEC_PNG, .quality = 90, .compression = 0};
  char msg[128];
  ASSERT_INT(codec_encode(&img, &o, &out, len, msg, sizeof(msg)), ==, CODEC_OK);
  free(px);
  return out;
}

struct image {
  uint8_t *data;
  size_t len;
};

/* Noise blurred at sigma 3 (by the server), as a stored PNG: the content on which the PNG and
 * lossless WebP encoders are slowest, as scripts/cost-calibration.sh measures them. */
static struct image smooth(const struct image *noise) {
  struct http_resp r;
  ASSERT_INT(http_request(&srv, "POST",
                          "/blur?method=yvv&sigma=3&psnr=false&format=png&compression=0",
                          "image/png", NULL, noise->data, noise->len, &r),
             ==, 0);
  ASSERT_INT(r.status, ==, 200);
  struct image out = {malloc(r.len), r.len};
  ASSERT(out.data != NULL);
  memcpy(out.data, r.body, r.len);
  http_resp_free(&r);
  return out;
}

struct cost_case {
  const char *op, *query, *params; /* params: a JSON object, or NULL */
  int image;                       /* index in the images */
};

static const char *const image_names[] = {
    "1000x1000 RGB noise", "8000x500 gray noise", "2000x2000 RGB noise", "2000x2000 RGBA noise",
    "500x500 RGB noise",   "512x512 RGBA noise",  "1000x1000 RGB smooth"};

static void test_model_holds(void) {
  struct image im[7];
  const int shapes[6][3] = {{1000, 1000, 3}, {8000, 500, 1}, {2000, 2000, 3},
                            {2000, 2000, 4}, {500, 500, 3},  {512, 512, 4}};
  for (int i = 0; i < 6; i++)
    im[i].data = noise_png(shapes[i][0], shapes[i][1], shapes[i][2], &im[i].len);
  im[6] = smooth(&im[0]);
  /* as in scripts/cost-calibration.sh: after one request with 27 MB buffers, glibc's malloc
   * keeps buffers up to that size in its heap, as in a server that has served such an image */
  size_t wlen;
  uint8_t *warm = noise_png(3000, 3000, 3, &wlen);
  measured("/convert?format=png&compression=0", warm, wlen, NULL);
  free(warm);
  char regions[1024] = "{\"regions\": [";
  for (int i = 0; i < 16; i++)
    sprintf(regions + strlen(regions), "%s[%d, %d, 128, 128]", i ? ", " : "", i * 113 % 1872,
            i * 347 % 1872);
  strcat(regions, "]}");
  char kernel[2048] = "{\"kernel\": [";
  for (int i = 0; i < 15 * 15; i++) strcat(kernel, i ? ",1" : "1");
  strcat(kernel, "]}");
  const struct cost_case cases[] = {
      {"blur", "method=fir&sigma=60&psnr=false", NULL, 0},
      {"blur", "method=fir&sigma_x=0.5&sigma_y=100&truncate=8&psnr=false", NULL, 1},
      {"blur", "sigma=20", NULL, 2},
      {"blur", "method=yvv&sigma=8", NULL, 3},
      {"blur", "method=yvv&sigma=8&psnr=false", regions, 2},
      {"sharpen", "sigma=3&psnr=false", NULL, 2},
      {"variance", "method=naive&radius=31&psnr=false", NULL, 4},
      {"variance", "method=pairwise&radius=63", NULL, 2},
      {"contrast", "radius=20", NULL, 2},
      {"convolve", "", kernel, 0},
      {"convert", "format=webp&effort=6&quality=100", NULL, 5},
      {"convert", "format=png&compression=9", NULL, 6},
      {"convert", "format=webp&lossless=true", NULL, 6},
      {"convert", "format=jpeg&quality=100", NULL, 2},
  };
  int n = (int)(sizeof(cases) / sizeof(cases[0])), bad = 0;
  double total = 0;
  fprintf(stderr, "    %-62s %-20s %9s %9s %6s\n", "request", "image", "estimate", "measured",
          "ratio");
  for (int i = 0; i < n; i++) {
    const struct cost_case *c = &cases[i];
    const struct image *m = &im[c->image];
    char path[256];
    snprintf(path, sizeof(path), "/%s%s%s", c->op, *c->query ? "?" : "", c->query);
    double est = estimate(c->op, c->query, c->params, m->data, m->len);
    double cpu = measured(path, m->data, m->len, c->params);
    double ratio = est / cpu;
    total += cpu;
    int ok = ratio >= 0.5 && ratio <= 2;
    fprintf(stderr, "    %-62.62s %-20s %8.3fs %8.3fs %6.2f%s%s\n", path, image_names[c->image],
            est, cpu, ratio, c->params ? " (+params)" : "", ok ? "" : "  <- not within 2x");
    bad += !ok;
  }
  fprintf(stderr, "    %d requests, %.1f s of the server's CPU\n", n, total);
  for (int i = 0; i < 7; i++) free(im[i].data);
  if (getenv("BLURD_SAN")) return; /* the sanitizers' build does other work */
  if (bad)
    TEST_FAIL("%d of %d requests' estimates are not within 2x of the server's CPU time: "
              "scripts/cost-calibration.sh measures the model again",
              bad, n);
}

/* The server's own estimate, from a 422's error object under --max-cost 1, is the model's
 * (rounded to a tenth of a second). */
static void test_server_estimate(void) {
  struct server limited;
  static const char *const args[] = {"--backend", "cpu", "--max-cost", "1", NULL};
  size_t len;
  uint8_t *img = noise_png(500, 500, 3, &len);
  const char *query = "method=welford&radius=40&psnr=false";
  double est = estimate("variance", query, NULL, img, len);
  ASSERT_DBL(est, >, 1.5);
  server_start(&limited, args);
  struct http_resp r;
  ASSERT_INT(http_request(&limited, "POST", "/variance?method=welford&radius=40&psnr=false",
                          "image/png", NULL, img, len, &r),
             ==, 0);
  http_expect_error(&r, 422, "too_expensive");
  ASSERT(strstr(r.body, "\"estimate_s\""));
  const char *num = strstr(r.body, "\"estimate_s\"") + strlen("\"estimate_s\":");
  double got = strtod(num, NULL);
  ASSERT_NEAR(got, est, 0.051);
  /* printed with the digits it means, not 17 (73.3, not 73.299999999999997) */
  ASSERT_INT(strspn(num, "0123456789."), <=, 16);
  http_resp_free(&r);
  ASSERT_INT(server_stop(&limited, SIGTERM), ==, 0);
  free(img);
}

/* --estimate ENDPOINT QUERY FILE [PARAMS]: the model's estimate, in seconds. */
static int print_estimate(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: integ_cost --estimate ENDPOINT QUERY FILE [PARAMS]\n");
    return 2;
  }
  FILE *f = fopen(argv[4], "rb");
  long size = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  uint8_t *buf = size > 0 ? malloc((size_t)size) : NULL;
  if (!buf || fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)size, f) != (size_t)size) {
    fprintf(stderr, "integ_cost: cannot read %s\n", argv[4]);
    return 1;
  }
  fclose(f);
  printf("%.4f\n", estimate(argv[2], argv[3], argc > 5 ? argv[5] : NULL, buf, (size_t)size));
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--estimate") == 0) return print_estimate(argc, argv);
  curl_global_init(CURL_GLOBAL_ALL);
  static const char *const args[] = {"--backend", "cpu", "--max-cost", "0", NULL};
  server_start(&srv, args);
  RUN(test_model_holds);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  RUN(test_server_estimate);
  fprintf(stderr, "integ_cost: all passed\n");
  return 0;
}

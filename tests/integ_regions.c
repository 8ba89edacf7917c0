/* Integration tests, against the real binary, of what /blur and /sharpen build on the Gaussian:
 * a sigma per axis, region blur (the whole-image blur inside each region, the input outside,
 * a feathered edge, the errors of bad rectangles) and the unsharp mask (the formula, its
 * threshold, luma mode). References are computed here in double precision. */
#include "harness.h"
#include "test.h"

#include "../codecs/codecs.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>

static struct server srv;

static void decode(const struct http_resp *r, struct codec_image *img) {
  char msg[256] = "";
  struct codec_limits lim = {100000, 100000, 1000000000};
  if (codec_decode((const uint8_t *)r->body, r->len, &lim, img, msg, sizeof(msg)) != CODEC_OK)
    TEST_FAIL("answer does not decode: %s", msg);
}

/* Decodes fixture name (a PNG) into img. */
static void load(const char *name, struct codec_image *img) {
  size_t len;
  char msg[128];
  uint8_t *data = fixture(name, &len);
  struct codec_limits lim = {9999, 9999, 99999999};
  ASSERT_INT(codec_decode(data, len, &lim, img, msg, sizeof(msg)), ==, CODEC_OK);
  free(data);
}

/* POSTs fixture name (a PNG) to path, expects 200 and decodes the PNG answer into img. */
static void post(const char *path, const char *name, struct codec_image *img, struct http_resp *r) {
  size_t len;
  uint8_t *data = fixture(name, &len);
  ASSERT_INT(http_post_form(&srv, path, "image", data, len, NULL, NULL, r), ==, 0);
  if (r->status != 200) TEST_FAIL("%s: %ld %s", path, r->status, r->body);
  decode(r, img);
  free(data);
}

/* The exact Gaussian of img (sigma_x along x, sigma_y along y; radius ceil(4 sigma), replicate
 * border) in doubles, channel-interleaved. */
static double *exact(const struct codec_image *img, double sx, double sy) {
  int w = img->width, h = img->height, c = img->channels;
  double *t = malloc(sizeof(double) * w * h * c), *o = malloc(sizeof(double) * w * h * c);
  ASSERT(t && o);
  for (int pass = 0; pass < 2; pass++) {
    double s = pass ? sy : sx;
    int r = (int)ceil(4 * s), n = pass ? h : w;
    double *k = malloc(sizeof(double) * (r + 1)), sum = 0;
    for (int i = 0; i <= r; i++) sum += (i ? 2 : 1) * (k[i] = exp(-0.5 * i * i / (s * s)));
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++)
        for (int ch = 0; ch < c; ch++) {
          double acc = 0;
          for (int i = -r; i <= r; i++) {
            int p = (pass ? y : x) + i;
            p = p < 0 ? 0 : p >= n ? n - 1 : p;
            size_t at = pass ? ((size_t)p * w + x) * c + ch : ((size_t)y * w + p) * c + ch;
            acc += k[abs(i)] / sum * (pass ? t[at] : img->pixels[at]);
          }
          (pass ? o : t)[((size_t)y * w + x) * c + ch] = acc;
        }
    free(k);
  }
  free(t);
  return o;
}

static double psnr_of(const struct codec_image *img, const double *ref) {
  size_t n = (size_t)img->width * img->height * img->channels;
  double se = 0;
  for (size_t i = 0; i < n; i++) se += (img->pixels[i] - ref[i]) * (img->pixels[i] - ref[i]);
  return 10 * log10(255.0 * 255 * n / se);
}

static void test_axes(void) {
  static const struct {
    const char *method;
    double floor; /* dB: the method's floor on photographs (docs/accuracy.md) */
  } m[] = {{"separable", 58}, {"yvv", 50}, {"deriche", 48}, {"pyramid", 55}, {"fir", 58}};
  static const double axes[][2] = {{1, 20}, {40, 3}, {0.5, 100}};
  struct codec_image in, out;
  struct http_resp r;
  size_t len;
  uint8_t *data = fixture("camera.png", &len);
  char msg[128];
  ASSERT_INT(codec_decode(data, len, &(struct codec_limits){9999, 9999, 99999999}, &in, msg, 128),
             ==, CODEC_OK);
  free(data);
  for (size_t a = 0; a < 3; a++) {
    double *ref = exact(&in, axes[a][0], axes[a][1]);
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
      char path[160], buf[64];
      snprintf(path, sizeof(path), "/blur?sigma_x=%g&sigma_y=%g&method=%s", axes[a][0], axes[a][1],
               m[i].method);
      post(path, "camera.png", &out, &r);
      double p = psnr_of(&out, ref), x = http_header_num(&r, "X-PSNR");
      printf("  %-40s %.2f dB here, X-PSNR %.2f\n", path, p, x);
      if (p < m[i].floor) TEST_FAIL("%s: %.2f dB, below %.0f", path, p, m[i].floor);
      ASSERT(fabs(p - x) < 0.05);
      snprintf(msg, sizeof(msg), "%g,%g", axes[a][0], axes[a][1]);
      ASSERT_STR(http_header(&r, "X-Sigma", buf, sizeof(buf)), msg);
      codec_image_free(&out);
      http_resp_free(&r);
    }
    free(ref);
  }
  /* the axes are not swapped: a per-axis blur differs from its transpose */
  struct codec_image a1, a2;
  post("/blur?sigma_x=1&sigma_y=20&method=separable", "camera.png", &a1, &r);
  http_resp_free(&r);
  post("/blur?sigma_x=20&sigma_y=1&method=separable", "camera.png", &a2, &r);
  http_resp_free(&r);
  double *ref = exact(&in, 20, 1);
  ASSERT(psnr_of(&a2, ref) > 58 && psnr_of(&a1, ref) < 30);
  free(ref);
  codec_image_free(&a1);
  codec_image_free(&a2);
  /* the JSON answer reports both */
  data = fixture("camera.png", &len);
  ASSERT_INT(http_post_form(&srv, "/blur?sigma_x=2&sigma_y=7", "image", data, len, NULL,
                            "application/json", &r),
             ==, 0);
  ASSERT_INT(r.status, ==, 200);
  json_t *j = json_loads(r.body, 0, NULL);
  ASSERT(j && json_real_value(json_object_get(j, "sigma_x")) == 2 &&
         json_real_value(json_object_get(j, "sigma_y")) == 7 && !json_object_get(j, "sigma"));
  json_decref(j);
  http_resp_free(&r);
  free(data);
  codec_image_free(&in);
}

/* Region [x, y, w, h] of a blur equals the whole-image blur of the same method inside it (the
 * same bytes for separable and fir, within 1 level for the recursive methods) and the input
 * outside. */
static void test_regions(void) {
  static const struct {
    const char *method;
    int tol;
  } m[] = {{"separable", 0}, {"fir", 0}, {"yvv", 1}, {"deriche", 1}, {"pyramid", 1}};
  const int rx = 150, ry = 170, rw = 96, rh = 64;
  struct codec_image in, whole, reg;
  struct http_resp r;
  size_t len;
  load("astronaut.png", &in);
  uint8_t *data;
  for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
    char path[200];
    snprintf(path, sizeof(path), "/blur?sigma=12&method=%s", m[i].method);
    post(path, "astronaut.png", &whole, &r);
    http_resp_free(&r);
    snprintf(path, sizeof(path), "/blur?sigma=12&method=%s&regions=%d,%d,%d,%d;-40,500,100,100",
             m[i].method, rx, ry, rw, rh);
    post(path, "astronaut.png", &reg, &r);
    ASSERT(http_header_num(&r, "X-PSNR") > 48);
    http_resp_free(&r);
    int inside = 0, outside = 0, changed = 0;
    for (int y = 0; y < in.height; y++)
      for (int x = 0; x < in.width; x++)
        for (int c = 0; c < 3; c++) {
          size_t k = ((size_t)y * in.width + x) * 3 + c;
          int in_a = x >= rx && x < rx + rw && y >= ry && y < ry + rh;
          int in_b = x < 60 && y >= 500; /* the second region, clipped */
          if (in_a || in_b) {
            inside = abs(reg.pixels[k] - whole.pixels[k]) > inside
                         ? abs(reg.pixels[k] - whole.pixels[k])
                         : inside;
            changed += reg.pixels[k] != in.pixels[k];
          } else {
            outside += reg.pixels[k] != in.pixels[k];
          }
        }
    printf("  %-10s inside: largest difference from the whole blur %d; outside: %d changed; "
           "inside: %d of %d changed\n",
           m[i].method, inside, outside, changed, (rw * rh + 60 * 12) * 3);
    ASSERT_INT(inside, <=, m[i].tol);
    ASSERT_INT(outside, ==, 0);
    ASSERT(changed > (rw * rh + 60 * 12) * 3 / 2);
    codec_image_free(&whole);
    codec_image_free(&reg);
  }
  /* feather: the input beyond feather + 1, blurred inside, in between on both sides */
  post("/blur?sigma=8&method=separable&regions=200,200,50,50&feather=10", "astronaut.png", &reg,
       &r);
  http_resp_free(&r);
  post("/blur?sigma=8&method=separable", "astronaut.png", &whole, &r);
  http_resp_free(&r);
  for (int y = 180; y < 270; y++)
    for (int x = 180; x < 270; x++) {
      size_t k = ((size_t)y * in.width + x) * 3;
      int dx = x < 200   ? 200 - x
               : x > 249 ? x - 249
                         : 0,
          dy = y < 200   ? 200 - y
               : y > 249 ? y - 249
                         : 0;
      if (dx == 0 && dy == 0) ASSERT_INT(reg.pixels[k], ==, whole.pixels[k]);
      if (dx > 10 || dy > 10) ASSERT_INT(reg.pixels[k], ==, in.pixels[k]);
      int lo = in.pixels[k] < whole.pixels[k] ? in.pixels[k] : whole.pixels[k];
      int hi = in.pixels[k] > whole.pixels[k] ? in.pixels[k] : whole.pixels[k];
      ASSERT(reg.pixels[k] >= lo && reg.pixels[k] <= hi);
    }
  codec_image_free(&whole);
  codec_image_free(&reg);
  codec_image_free(&in);
  /* errors */
  static const char *const bad[] = {"/blur?sigma=3&regions=600,0,10,10",
                                    "/blur?sigma=3&regions=0,0,10,10;-20,-20,20,20",
                                    "/blur?sigma=3&regions=0,0,0,10", "/blur?sigma=3&feather=3"};
  data = fixture("astronaut.png", &len);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ASSERT_INT(http_post_form(&srv, bad[i], "image", data, len, NULL, NULL, &r), ==, 0);
    http_expect_error(&r, 400, "invalid_parameter");
    printf("  %s: %s\n", bad[i], r.body);
    http_resp_free(&r);
  }
  free(data);
}

/* /sharpen against in + amount (in - G) with the exact G, within 1 level; threshold leaves
 * pixels whose difference is below it alone; luma mode adds one change to every colour. */
static void test_sharpen(void) {
  struct codec_image in, out;
  struct http_resp r;
  size_t len;
  load("astronaut.png", &in);
  uint8_t *data;
  double *g = exact(&in, 2, 2);
  size_t n = (size_t)in.width * in.height * 3;
  post("/sharpen?sigma=2&amount=1&method=separable", "astronaut.png", &out, &r);
  http_resp_free(&r);
  int worst = 0;
  for (size_t i = 0; i < n; i++) {
    double v = in.pixels[i] + (in.pixels[i] - g[i]);
    int want = (int)fmin(255, fmax(0, floor(v + 0.5)));
    worst = abs(out.pixels[i] - want) > worst ? abs(out.pixels[i] - want) : worst;
  }
  printf("  /sharpen?sigma=2&amount=1: largest difference from the formula %d\n", worst);
  ASSERT_INT(worst, <=, 1);
  codec_image_free(&out);
  post("/sharpen?sigma=2&amount=2&threshold=12&method=separable", "astronaut.png", &out, &r);
  http_resp_free(&r);
  size_t kept = 0, low = 0;
  for (size_t i = 0; i < n; i++)
    if (fabs(in.pixels[i] - g[i]) < 11.4) { /* below the threshold, rounding of the blur aside */
      low++;
      kept += out.pixels[i] == in.pixels[i];
    }
  printf("  threshold=12: %zu of %zu low-contrast samples unchanged\n", kept, low);
  ASSERT(low > n / 4);
  ASSERT_INT(kept, ==, low);
  codec_image_free(&out);
  post("/sharpen?sigma=2&amount=1&method=separable&luma=true", "astronaut.png", &out, &r);
  http_resp_free(&r);
  worst = 0;
  for (size_t p = 0; p < n / 3; p++) {
    const uint8_t *s = in.pixels + 3 * p;
    const double *b = g + 3 * p;
    double d = 0.299 * (s[0] - b[0]) + 0.587 * (s[1] - b[1]) + 0.114 * (s[2] - b[2]);
    for (int c = 0; c < 3; c++) {
      int want = (int)fmin(255, fmax(0, floor(s[c] + d + 0.5)));
      worst = abs(out.pixels[3 * p + c] - want) > worst ? abs(out.pixels[3 * p + c] - want) : worst;
    }
  }
  printf("  luma=true: largest difference from the formula %d\n", worst);
  ASSERT_INT(worst, <=, 1);
  codec_image_free(&out);
  free(g);
  codec_image_free(&in);
  data = fixture("astronaut.png", &len);
  ASSERT_INT(http_post_form(&srv, "/sharpen?sigma=60", "image", data, len, NULL, NULL, &r), ==, 0);
  http_expect_error(&r, 400, "invalid_parameter");
  http_resp_free(&r);
  free(data);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  server_start(&srv, NULL);
  RUN(test_axes);
  RUN(test_regions);
  RUN(test_sharpen);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  curl_global_cleanup();
  fprintf(stderr, "integ_regions: all passed\n");
  return 0;
}

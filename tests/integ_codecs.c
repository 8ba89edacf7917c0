/* Integration tests of where the codecs run, against the real binary. Two servers run side by
 * side: one with its default codecs (--gpu-codecs auto: nvJPEG on a GPU machine, libjpeg-turbo
 * elsewhere) and one with --gpu-codecs off. The tests check that
 *   - /readyz and /methods name the JPEG, PNG and WebP codecs and, when JPEG is not on the GPU,
 *     why; on the CUDA backend, /readyz counts the default workers for the codecs that run;
 *   - every JPEG kind among the fixtures (baseline 4:4:4 and 4:2:0, progressive, gray, the eight
 *     EXIF orientations) decodes as libjpeg-turbo decodes it: exactly on the CPU, within 40 dB
 *     with nvJPEG (the worst case is printed);
 *   - a blur from the default server differs from the CPU-codec server's by no more than their
 *     decoders differ, and JPEG answers of both agree in size (15%) and in PSNR, the GPU's at most
 *     0.5 dB worse;
 *   - damaged files get the same status and error from both servers, and the server stays ready;
 *   - concurrent requests are all answered, and with GPU codecs /metrics counts their decodes in
 *     batches.
 * On CI (no GPU) both servers run the CPU codecs, so the comparisons hold exactly; on the GPU
 * machine, BLURD_EXPECT_GPU_CODECS=1 makes the tests expect nvJPEG. */
#include "harness.h"
#include "test.h"
#include "fixtures.h"

#include "../codecs/codecs.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

static struct server srv, cpu_srv; /* default codecs; --gpu-codecs off */

static int expect_gpu(void) {
  return strcmp(expected_codec("jpeg"), "nvjpeg") == 0;
}

static void decode_body(const struct http_resp *r, struct codec_image *img) {
  char msg[256];
  if (r->status != 200) TEST_FAIL("status %ld: %.300s", r->status, r->body);
  if (codec_decode((const uint8_t *)r->body, r->len, &(struct codec_limits){0, 0, 0}, img, msg,
                   sizeof(msg)) != CODEC_OK)
    TEST_FAIL("the answer is not an image: %s", msg);
}

static json_t *get_json(struct server *s, const char *path) {
  struct http_resp r;
  ASSERT(http_request(s, "GET", path, NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  json_t *j = json_loads(r.body, 0, NULL);
  ASSERT(j);
  http_resp_free(&r);
  return j;
}

/* The codecs object of /readyz and /methods. */
static void expect_codecs(json_t *c, int gpu, const char *reason) {
  ASSERT(json_is_object(c));
  ASSERT_INT(json_is_true(json_object_get(c, "gpu")), ==, gpu);
  const char *dec = json_string_value(json_object_get(c, "jpeg_decode"));
  const char *enc = json_string_value(json_object_get(c, "jpeg_encode"));
  ASSERT(dec && enc);
  ASSERT_STR(json_string_value(json_object_get(c, "png")), "libpng");
  ASSERT_STR(json_string_value(json_object_get(c, "png_encode")),
             "deflate-rle (levels 1 and 2), libdeflate");
  ASSERT_STR(json_string_value(json_object_get(c, "png_decode")),
             "libdeflate (8- and 16-bit, not interlaced, no tRNS), libpng");
  ASSERT_STR(json_string_value(json_object_get(c, "webp")), "libwebp");
  ASSERT_STR(json_string_value(json_object_get(c, "webp_encode")),
             "blurd-vp8 (smooth RGB images at effort 2), libwebp");
  if (gpu) {
    ASSERT(strcmp(dec, "nvjpeg-hw") == 0 || strcmp(dec, "nvjpeg-gpu") == 0);
    ASSERT_STR(enc, "nvjpeg");
    ASSERT(strncmp(json_string_value(json_object_get(c, "library")), "libnvjpeg.so.", 13) == 0);
    ASSERT_INT(json_integer_value(json_object_get(c, "batch_wait_us")), ==, 1000);
    ASSERT_INT(json_integer_value(json_object_get(c, "decoders")), ==, 2);
    return;
  }
  ASSERT_STR(dec, "libjpeg-turbo");
  ASSERT_STR(enc, "libjpeg-turbo");
  const char *why = json_string_value(json_object_get(c, "reason"));
  ASSERT(why && strlen(why) > 5);
  if (reason) ASSERT_STR(why, reason);
}

/* The default workers of a server on the CUDA backend (api/backend.c): per GPU the cores shared
 * out among the GPUs, at least 2, and with the GPU codecs twice that as far as each GPU has 2.4
 * GB for every worker. Assumes no CPU quota (the GPU machine's). */
static void expect_workers(json_t *ready, int gpu_codecs) {
  json_t *devs = json_object_get(ready, "devices");
  long n = (long)json_array_size(devs), cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (n == 0) return; /* the CPU backend */
  long per = (cores + n - 1) / n, most = 2 * per;
  for (long d = 0; gpu_codecs && d < n; d++) {
    long fit = (long)(json_number_value(
                          json_object_get(json_array_get(devs, (size_t)d), "memory_total_bytes")) /
                      2.4e9);
    most = fit < most ? fit : most;
  }
  per = gpu_codecs && most > per ? most : per;
  ASSERT_INT(json_integer_value(json_object_get(ready, "workers")), ==, (per < 2 ? 2 : per) * n);
}

/* Once the server is ready every device's context is made, so /readyz gives its free memory (null
 * only before: asking for it would make the context). */
static void expect_free_memory(json_t *ready) {
  json_t *devs = json_object_get(ready, "devices");
  for (size_t d = 0; d < json_array_size(devs); d++) {
    json_t *dev = json_array_get(devs, d);
    json_t *free_bytes = json_object_get(dev, "memory_free_bytes");
    ASSERT(json_is_integer(free_bytes));
    ASSERT(json_integer_value(free_bytes) > 0);
    ASSERT(json_integer_value(free_bytes) <=
           (json_int_t)json_number_value(json_object_get(dev, "memory_total_bytes")));
  }
}

static void test_reports(void) {
  json_t *ready = get_json(&srv, "/readyz"), *methods = get_json(&srv, "/methods");
  expect_free_memory(ready);
  expect_codecs(json_object_get(ready, "codecs"), expect_gpu(), NULL);
  expect_codecs(json_object_get(methods, "codecs"), expect_gpu(), NULL);
  expect_workers(ready, expect_gpu());
  json_decref(ready);
  json_decref(methods);
  ready = get_json(&cpu_srv, "/readyz");
  expect_codecs(json_object_get(ready, "codecs"), 0, "--gpu-codecs off");
  expect_workers(ready, 0);
  json_decref(ready);
}

static void post(struct server *s, const char *path, const uint8_t *img, size_t len,
                 struct http_resp *r) {
  ASSERT(http_request(s, "POST", path, "image/jpeg", NULL, img, len, r) == 0);
}

/* Each JPEG fixture through /convert to PNG on both servers, against libjpeg-turbo here. */
static void test_decoders(void) {
  static const char *const files[] = {
      "photo_1080p.jpg", "rocket.jpg",  "hubble_deep_field.jpg", "progressive.jpg", "gray.jpg",
      "gray_720p.jpg",   "orient1.jpg", "orient2.jpg",           "orient3.jpg",     "orient4.jpg",
      "orient5.jpg",     "orient6.jpg", "orient7.jpg",           "orient8.jpg"};
  double worst = INFINITY;
  const char *worst_file = "";
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    size_t len;
    uint8_t *data = fixture(files[i], &len);
    struct codec_image ref, got, cpu;
    struct http_resp r, rc;
    char desc[64];
    int maxdiff;
    ASSERT(codec_decode(data, len, &(struct codec_limits){0, 0, 0}, &ref, NULL, 0) == CODEC_OK);
    post(&srv, "/convert?format=png", data, len, &r);
    post(&cpu_srv, "/convert?format=png", data, len, &rc);
    decode_body(&r, &got);
    decode_body(&rc, &cpu);
    char cpu_desc[64];
    ASSERT(http_stage(&rc, "decode", cpu_desc, sizeof(cpu_desc)) >= 0);
    ASSERT_STR(cpu_desc, "libjpeg-turbo");
    ASSERT(http_stage(&r, "decode", desc, sizeof(desc)) >= 0);
    if (expect_gpu() ? strncmp(desc, "nvjpeg", 6) != 0 : strcmp(desc, "libjpeg-turbo") != 0)
      TEST_FAIL("%s was decoded by %s", files[i], desc);
    ASSERT(image_psnr8(&ref, &cpu, &maxdiff) ==
           INFINITY); /* the CPU path is libjpeg-turbo itself */
    double db = image_psnr8(&ref, &got, &maxdiff);
    fprintf(stderr, "  %-22s %dx%d decoded by %-14s %6.2f dB, max diff %d\n", files[i], got.width,
            got.height, desc, db, maxdiff);
    ASSERT_DBL(db, >=, 40);
    if (db < worst) worst = db, worst_file = files[i];
    codec_image_free(&ref), codec_image_free(&got), codec_image_free(&cpu);
    http_resp_free(&r), http_resp_free(&rc);
    free(data);
  }
  fprintf(stderr, "  worst decode against libjpeg-turbo: %.2f dB (%s)\n", worst, worst_file);
}

/* Server-Timing names what decoded a PNG on both servers: libdeflate and blurd's unfilter for
 * the common files, libpng for palettes, tRNS and interlacing (formats/png.c). */
static void test_png_decoders(void) {
  static const struct {
    const char *file, *decoder;
  } cases[] = {{"coffee.png", "libdeflate"},     {"rgb16.png", "libdeflate"},
               {"gray_alpha.png", "libdeflate"}, {"palette.png", "libpng"},
               {"gray_trns.png", "libpng"},      {"interlaced.png", "libpng"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t len;
    uint8_t *data = fixture(cases[i].file, &len);
    struct server *both[] = {&srv, &cpu_srv};
    for (int k = 0; k < 2; k++) {
      struct http_resp r;
      char desc[64];
      post(both[k], "/convert?format=png", data, len, &r);
      ASSERT_INT(r.status, ==, 200);
      ASSERT(http_stage(&r, "decode", desc, sizeof(desc)) >= 0);
      if (strcmp(desc, cases[i].decoder) != 0)
        TEST_FAIL("%s was decoded by %s, not %s", cases[i].file, desc, cases[i].decoder);
      http_resp_free(&r);
    }
    free(data);
  }
}

/* A blur from both servers: as PNG, they differ no more than their decoders; as JPEG (the GPU
 * encoder on one side), their PSNR against the PNG answer and their sizes agree. */
static void test_blur_agrees(void) {
  size_t len;
  uint8_t *data = fixture("photo_1080p.jpg", &len);
  struct codec_image ref, dec, a, b, ja, jb;
  struct http_resp r[6];
  int maxdiff;
  ASSERT(codec_decode(data, len, &(struct codec_limits){0, 0, 0}, &ref, NULL, 0) == CODEC_OK);
  post(&srv, "/convert?format=png", data, len, &r[0]);
  post(&srv, "/blur?sigma=3&format=png", data, len, &r[1]);
  post(&cpu_srv, "/blur?sigma=3&format=png", data, len, &r[2]);
  post(&srv, "/blur?sigma=3&format=jpeg&quality=90", data, len, &r[3]);
  post(&cpu_srv, "/blur?sigma=3&format=jpeg&quality=90", data, len, &r[4]);
  post(&srv, "/blur?sigma=3&format=jpeg&quality=75", data, len, &r[5]);
  decode_body(&r[0], &dec);
  decode_body(&r[1], &a);
  decode_body(&r[2], &b);
  double dec_db = image_psnr8(&ref, &dec, &maxdiff), blur_db = image_psnr8(&b, &a, &maxdiff);
  fprintf(stderr, "  decoders differ by %.2f dB, blurs by %.2f dB (max diff %d)\n", dec_db, blur_db,
          maxdiff);
  ASSERT_DBL(blur_db, >=, dec_db == INFINITY ? INFINITY : fmin(dec_db, 60));
  ASSERT_NEAR(http_header_num(&r[1], "X-PSNR"), http_header_num(&r[2], "X-PSNR"), 0.5);
  http_expect_stages(&r[3], 1, expected_codec("jpeg"), expected_codec("jpeg"));
  http_expect_stages(&r[4], 1, "libjpeg-turbo", "libjpeg-turbo");
  http_expect_stages(&r[5], 1, expected_codec("jpeg"), expected_codec("jpeg"));
  decode_body(&r[3], &ja);
  decode_body(&r[4], &jb);
  double db_a = image_psnr8(&a, &ja, &maxdiff), db_b = image_psnr8(&b, &jb, &maxdiff);
  double ratio = (double)r[3].len / (double)r[4].len;
  fprintf(stderr,
          "  JPEG q90 4:4:4: %zu bytes %.2f dB here, %zu bytes %.2f dB with libjpeg-turbo\n",
          r[3].len, db_a, r[4].len, db_b);
  ASSERT_DBL(db_a, >=, db_b - 0.5); /* nvJPEG's DCT is the accurate one: it may do better */
  ASSERT(ratio >= 0.85 && ratio <= 1.15);
  ASSERT_INT(r[5].len, <, r[3].len); /* quality 75 is 4:2:0 and coarser */
  codec_image_free(&ref), codec_image_free(&dec), codec_image_free(&a), codec_image_free(&b);
  codec_image_free(&ja), codec_image_free(&jb);
  for (int i = 0; i < 6; i++) http_resp_free(&r[i]);
  free(data);
}

/* The same status and error code from both servers. */
static void expect_same_error(const uint8_t *img, size_t len, long status, const char *code) {
  struct http_resp r, rc;
  post(&srv, "/blur?sigma=2", img, len, &r);
  post(&cpu_srv, "/blur?sigma=2", img, len, &rc);
  http_expect_error(&rc, status, code);
  http_expect_error(&r, status, code);
  json_t *a = json_loads(r.body, 0, NULL), *b = json_loads(rc.body, 0, NULL);
  ASSERT_STR(json_string_value(json_object_get(json_object_get(a, "error"), "message")),
             json_string_value(json_object_get(json_object_get(b, "error"), "message")));
  json_decref(a), json_decref(b);
  http_resp_free(&r), http_resp_free(&rc);
}

static void test_damaged(void) {
  size_t len, n;
  uint8_t *photo = fixture("photo_1080p.jpg", &len), *trunc = fixture("truncated.jpg", &n);
  uint8_t *cmyk;
  expect_same_error(trunc, n, 422, "undecodable_image");
  expect_same_error(photo, len / 2, 422, "undecodable_image"); /* cut in the scan */
  expect_same_error(photo, 400, 422, "undecodable_image");     /* cut in the headers */
  free(trunc);
  cmyk = fixture("cmyk.jpg", &n); /* converted to RGB, on libjpeg, by both servers */
  struct http_resp rk;
  post(&srv, "/blur?sigma=2", cmyk, n, &rk);
  ASSERT_INT(rk.status, ==, 200);
  http_resp_free(&rk);
  post(&cpu_srv, "/blur?sigma=2", cmyk, n, &rk);
  ASSERT_INT(rk.status, ==, 200);
  http_resp_free(&rk);
  free(cmyk);
  memset(photo + len / 3, 0xff, 64); /* a run of 0xFF bytes inside the entropy-coded data */
  expect_same_error(photo, len, 422, "undecodable_image");
  free(photo);
  photo = fixture("photo_1080p.jpg", &len);
  struct http_resp r;
  post(&srv, "/blur?sigma=2", photo, len, &r); /* the server still works */
  ASSERT_INT(r.status, ==, 200);
  http_resp_free(&r);
  json_t *ready = get_json(&srv, "/readyz");
  ASSERT(json_is_true(json_object_get(ready, "ready")));
  json_decref(ready);
  free(photo);
}

#define THREADS    8
#define PER_THREAD 4

struct load {
  const uint8_t *img;
  size_t len;
  int ok;
};

static void *load_main(void *arg) {
  struct load *l = arg;
  for (int i = 0; i < PER_THREAD; i++) {
    struct http_resp r;
    if (http_request(&srv, "POST", "/blur?sigma=12", "image/jpeg", NULL, l->img, l->len, &r) == 0 &&
        r.status == 200)
      l->ok++;
    http_resp_free(&r);
  }
  return NULL;
}

/* The sum of the samples whose lines start with prefix in the /metrics text (every device's
 * when prefix ends before the labels), or 0. */
static double metric_value(const char *text, const char *prefix) {
  double sum = 0;
  for (const char *p = text; (p = strstr(p, prefix)) != NULL; p++)
    if (p == text || p[-1] == '\n') sum += atof(strchr(p, ' ') + 1);
  return sum;
}

static void batches(double *images, double *count) {
  struct http_resp r;
  ASSERT(http_request(&srv, "GET", "/metrics", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_DBL(metric_value(r.body, "blurd_gpu_codecs "), ==, expect_gpu());
  *images = metric_value(r.body, "blurd_jpeg_decode_batch_size_sum{");
  *count = metric_value(r.body, "blurd_jpeg_decode_batch_size_count{");
  http_resp_free(&r);
}

static void test_concurrent(void) {
  size_t len;
  uint8_t *img = fixture("photo_1080p.jpg", &len);
  struct load l[THREADS];
  pthread_t t[THREADS];
  double images0, count0, images1, count1;
  batches(&images0, &count0);
  for (int i = 0; i < THREADS; i++) {
    l[i] = (struct load){img, len, 0};
    ASSERT(pthread_create(&t[i], NULL, load_main, &l[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    ASSERT_INT(l[i].ok, ==, PER_THREAD);
  }
  batches(&images1, &count1);
  fprintf(stderr, "  %d requests from %d clients: %.0f decoded in %.0f batches\n",
          THREADS * PER_THREAD, THREADS, images1 - images0, count1 - count0);
  if (expect_gpu()) {
    ASSERT_DBL(images1 - images0, ==, THREADS * PER_THREAD);
    ASSERT_DBL(count1 - count0, <, images1 - images0); /* some were decoded together */
  }
  free(img);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  const char *off[] = {"--gpu-codecs", "off", NULL};
  server_start(&srv, NULL);
  server_start(&cpu_srv, off);
  RUN(test_reports);
  RUN(test_decoders);
  RUN(test_png_decoders);
  RUN(test_blur_agrees);
  RUN(test_damaged);
  RUN(test_concurrent);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
  ASSERT_INT(server_stop(&cpu_srv, SIGTERM), ==, 0);
  curl_global_cleanup();
  fprintf(stderr, "integ_codecs: all passed\n");
  return 0;
}

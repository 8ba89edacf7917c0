/* The GPU test suite (`make test-gpu`, on a machine with an NVIDIA GPU): every method on the GPU
 * against its CPU twin on real photographs and odd sizes (1x1, 1xN, Nx1, 1023x777, 8192x8192):
 * the fir family byte for byte, the other methods within 1 level; the GPU's PSNR against the
 * CPU's measurement of the same output; single against double precision across sigma (the data
 * behind GPU_FLOAT_SIGMA_MAX); an out-of-memory job that fails alone; and, with --fault, a sticky
 * error that is reported as fatal. --quick runs the small cases only, --sanitize fewer still
 * (for compute-sanitizer, which slows every kernel down). */
#include "test.h"

#include "../codecs/codecs.h"
#include "../cpu/cpu.h"
#include "../gpu/gpu.h"

#include <cuda_runtime_api.h>

static struct cpu_pool *pool;
static struct gpu_ctx *ctx;
static int quick;

static struct codec_image photo(const char *name) {
  char path[512];
  struct codec_image img;
  snprintf(path, sizeof(path), "%s/%s", getenv("BLURD_DATA") ? getenv("BLURD_DATA") : "tests/data",
           name);
  if (codec_decode_file(path, &img) != CODEC_OK) TEST_FAIL("cannot decode %s", path);
  return img;
}

/* A w x h image with c channels cut from a photograph, mirrored where it runs out; with 4
 * channels from an RGB photograph, alpha is a diagonal ramp. */
static struct cpu_image tile(const struct codec_image *p, int w, int h, int c) {
  struct cpu_image img = {NULL, w, h, c, p->depth};
  img.data = malloc(cpu_image_bytes(&img));
  ASSERT(img.data);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int px = (x / p->width) % 2 ? p->width - 1 - x % p->width : x % p->width;
      int py = (y / p->height) % 2 ? p->height - 1 - y % p->height : y % p->height;
      for (int k = 0; k < c; k++) {
        size_t i = ((size_t)y * w + x) * c + k;
        unsigned v =
            k < p->channels
                ? (p->depth == 16
                       ? ((uint16_t *)p->pixels)[((size_t)py * p->width + px) * p->channels + k]
                       : p->pixels[((size_t)py * p->width + px) * p->channels + k])
                : (unsigned)((x + y) * ((1 << p->depth) - 1) / (w + h));
        if (p->depth == 16)
          ((uint16_t *)img.data)[i] = (uint16_t)v;
        else
          ((uint8_t *)img.data)[i] = (uint8_t)v;
      }
    }
  return img;
}

static unsigned sample(const struct cpu_image *img, size_t i) {
  return img->depth == 16 ? ((uint16_t *)img->data)[i] : ((uint8_t *)img->data)[i];
}

static int failures;

/* Difference of sample i between two outputs in levels. With alpha and premultiplied set, colour
 * is compared premultiplied (colour x alpha / max), as the PSNR compares it: the colour of a
 * nearly transparent pixel is invisible, and any difference in it is magnified by 1/alpha. */
static double pixel_diff(const struct cpu_image *x, const struct cpu_image *y, size_t i,
                         int premultiplied) {
  int c = x->channels, k = (int)(i % (size_t)c);
  double a = sample(x, i), b = sample(y, i);
  if (premultiplied && (c == 2 || c == 4) && k < c - 1) {
    double max = (1 << x->depth) - 1;
    a *= sample(x, i - (size_t)k + (size_t)c - 1) / max;
    b *= sample(y, i - (size_t)k + (size_t)c - 1) / max;
  }
  return fabs(a - b);
}

/* One method on one image at one sigma, GPU against CPU. */
static void compare(struct gpu_ctx *g, enum cpu_method m, double sigma, const struct cpu_image *src,
                    const char *label) {
  struct cpu_image c = *src, d = *src;
  size_t n = cpu_image_bytes(src) / (size_t)(src->depth / 8);
  c.data = malloc(cpu_image_bytes(src));
  d.data = malloc(cpu_image_bytes(src));
  ASSERT(c.data && d.data);
  struct cpu_blur b = {m, sigma, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
  struct cpu_accuracy ca, ga, gm;
  struct gpu_times t;
  ASSERT(cpu_blur_image(pool, &b, src, &c, &ca, NULL) == 0);
  enum gpu_status st = gpu_blur(g, &b, src, &d, &ga, &t);
  if (st != GPU_OK)
    TEST_FAIL("%s %s sigma %g: %s", label, cpu_method_name(m), sigma, gpu_ctx_error(g));
  ASSERT(cpu_measure(pool, sigma, src, &d, &gm) == 0);
  double maxd = 0;
  size_t diffs = 0;
  for (size_t i = 0; i < n; i++) {
    double dd = pixel_diff(&c, &d, i, !cpu_method_is_fir(m));
    maxd = dd > maxd ? dd : maxd;
    diffs += dd != 0;
  }
  /* premultiplied colour may be a level off in colour and a level off in alpha: 2 */
  int alpha = src->channels == 2 || src->channels == 4;
  double allowed = cpu_method_is_fir(m) ? 0 : alpha ? 2 : 1;
  double dpsnr = isinf(ga.psnr) && isinf(gm.psnr) ? 0 : fabs(ga.psnr - gm.psnr);
  int ok = maxd <= allowed && dpsnr < 1e-6 * (1 + fabs(gm.psnr)) + 1e-9 &&
           fabs(ga.max_abs - gm.max_abs) < 1e-6;
  printf("%-4s %-14s %-11s sigma %6g  max diff %.3f (%zu samples)  psnr gpu %.4f cpu-measured %.4f "
         "cpu-method %.4f  kernel %.3f ms\n",
         ok ? "ok" : "FAIL", label, cpu_method_name(m), sigma, maxd, diffs, ga.psnr, gm.psnr,
         ca.psnr, t.kernel);
  failures += !ok;
  free(c.data);
  free(d.data);
}

static void sweep(const struct cpu_image *img, const char *label, const double *sigmas, int ns,
                  double fir_max_sigma) {
  for (int m = 0; m < CPU_NMETHODS; m++)
    for (int s = 0; s < ns; s++) {
      if (cpu_method_is_fir(m) && sigmas[s] > fir_max_sigma) continue; /* O(r^2) per pixel */
      compare(ctx, m, sigmas[s], img, label);
    }
}

static void test_odd_sizes(void) {
  struct codec_image astro = photo("astronaut.png"), g16 = photo("gray_alpha16.png");
  const double all[] = {0.5, 1, 3, 12, 40, 100, 300}, few[] = {1, 12};
  const double *sigmas = quick > 1 ? few : all; /* --sanitize: few, the tools are slow */
  int ns = quick > 1 ? 2 : 7;
  const int sizes[][3] = {{1, 1, 4}, {1, 37, 3}, {37, 1, 4}, {2, 2, 1}, {33, 17, 2}};
  for (int i = 0; i < 5; i++) {
    char label[32];
    snprintf(label, sizeof(label), "%dx%dx%d", sizes[i][0], sizes[i][1], sizes[i][2]);
    struct cpu_image img = tile(&astro, sizes[i][0], sizes[i][1], sizes[i][2]);
    sweep(&img, label, sigmas, ns, 100);
    free(img.data);
  }
  struct cpu_image img = tile(&g16, 45, 31, 2);
  sweep(&img, "45x31 GA16", sigmas, ns, 40);
  free(img.data);
  codec_image_free(&astro);
  codec_image_free(&g16);
}

static void test_photographs(void) {
  const char *names[] = {"camera.png", "astronaut.png", "red_square.png", "rgba16.png"};
  const double sigmas[] = {0.5, 1, 3, 12, 40, 100, 300};
  for (int i = 0; i < 4; i++) {
    struct codec_image p = photo(names[i]);
    struct cpu_image img = {p.pixels, p.width, p.height, p.channels, p.depth};
    sweep(&img, names[i], sigmas, 7, 12);
    codec_image_free(&p);
  }
  struct codec_image astro = photo("astronaut.png");
  struct cpu_image img = tile(&astro, 1023, 777, 4);
  sweep(&img, "1023x777x4", sigmas, 7, 3);
  free(img.data);
  codec_image_free(&astro);
}

static void test_8k(void) {
  struct codec_image p = photo("photo_1080p.jpg");
  struct cpu_image img = tile(&p, 8192, 8192, 4);
  const double few[] = {1}, more[] = {3, 12, 100};
  for (int m = 0; m < CPU_NMETHODS; m++) {
    const double *s = cpu_method_is_fir(m) ? few : more;
    for (int k = 0; k < (cpu_method_is_fir(m) ? 1 : 3); k++)
      compare(ctx, m, s[k], &img, "8192x8192x4");
  }
  free(img.data);
  codec_image_free(&p);
}

/* Single against double precision for the recursive methods: the largest difference from the
 * double-precision CPU twin, per sigma. */
static void test_precision(void) {
  struct codec_image p = photo("astronaut.png");
  struct cpu_image img = tile(&p, 512, 512, 3), c = img, d = img; /* RGB: raw comparison */
  c.data = malloc(cpu_image_bytes(&img));
  d.data = malloc(cpu_image_bytes(&img));
  const double sigmas[] = {5, 12, 20, 30, 40, 50, 60, 80, 100, 200, 300};
  const enum cpu_method ms[] = {CPU_YVV, CPU_YVV_BLOCKED, CPU_DERICHE, CPU_YVV2WAY};
  for (int prec = 0; prec < 2; prec++) {
    setenv("BLURD_GPU_PRECISION", prec ? "double" : "float", 1);
    struct gpu_ctx *g = gpu_ctx_new(0, NULL, 0);
    ASSERT(g);
    for (int k = 0; k < 4; k++)
      for (int s = 0; s < 11; s++) {
        struct cpu_blur b = {ms[k], sigmas[s], CPU_TRUNCATE, CPU_YVV_CALIBRATED};
        struct cpu_accuracy ca, ga;
        ASSERT(cpu_blur_image(pool, &b, &img, &c, &ca, NULL) == 0);
        ASSERT(gpu_blur(g, &b, &img, &d, &ga, NULL) == GPU_OK);
        unsigned maxd = 0;
        for (size_t i = 0; i < cpu_image_bytes(&img); i++) {
          int dd = abs((int)((uint8_t *)c.data)[i] - ((uint8_t *)d.data)[i]);
          maxd = (unsigned)dd > maxd ? (unsigned)dd : maxd;
        }
        printf(
            "precision %-6s %-11s sigma %5g  max diff vs CPU double %u  psnr gpu %.2f cpu %.2f\n",
            prec ? "double" : "float", cpu_method_name(ms[k]), sigmas[s], maxd, ga.psnr, ca.psnr);
      }
    gpu_ctx_free(g);
  }
  unsetenv("BLURD_GPU_PRECISION");
  free(c.data);
  free(d.data);
  free(img.data);
  codec_image_free(&p);
}

/* A job that cannot get device memory fails alone: the next one on the same context works. */
static void test_out_of_memory(void) {
  struct gpu_ctx *g = gpu_ctx_new(0, NULL, 0);
  struct codec_image p = photo("astronaut.png");
  struct cpu_image img = tile(&p, 4096, 4096, 4), out = img;
  out.data = malloc(cpu_image_bytes(&img));
  size_t fr = 0, tot = 0;
  void *hold = NULL;
  ASSERT(g && cudaMemGetInfo(&fr, &tot) == cudaSuccess);
  ASSERT(cudaMalloc(&hold, fr - (64u << 20)) == cudaSuccess); /* leave 64 MB */
  struct cpu_blur b = {CPU_YVV_BLOCKED, 12, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
  enum gpu_status st = gpu_blur(g, &b, &img, &out, NULL, NULL);
  printf("out of memory: status %d (%s)\n", st, gpu_ctx_error(g));
  ASSERT_INT(st, ==, GPU_NO_MEMORY);
  cudaFree(hold);
  ASSERT_INT(gpu_blur(g, &b, &img, &out, NULL, NULL), ==, GPU_OK);
  printf("out of memory: the next job on the same context: ok\n");
  gpu_ctx_free(g);
  free(out.data);
  free(img.data);
  codec_image_free(&p);
}

/* In a process of its own: a sticky error is reported as fatal, and stays. */
static int fault(void) {
  struct gpu_ctx *g = gpu_ctx_new(0, NULL, 0);
  ASSERT(g);
  enum gpu_status st = gpu_inject_fault(g);
  printf("fault: injected, status %d (%s)\n", st, gpu_ctx_error(g));
  ASSERT_INT(st, ==, GPU_FATAL);
  struct cpu_image img = {calloc(16, 1), 2, 2, 4, 8}, out = {calloc(16, 1), 2, 2, 4, 8};
  struct cpu_blur b = {CPU_YVV, 2, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
  st = gpu_blur(g, &b, &img, &out, NULL, NULL);
  printf("fault: the next job: status %d (%s)\n", st, gpu_ctx_error(g));
  ASSERT_INT(st, ==, GPU_FATAL);
  printf("gpu_check --fault: passed\n");
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && strcmp(argv[1], "--fault") == 0) return fault();
  quick = argc < 2                             ? 0
          : strcmp(argv[1], "--quick") == 0    ? 1
          : strcmp(argv[1], "--sanitize") == 0 ? 2
                                               : 0;
  ASSERT(gpu_device_count() > 0);
  pool = cpu_pool_new(16);
  char err[256];
  ctx = gpu_ctx_new(0, err, sizeof(err));
  if (!ctx) TEST_FAIL("%s", err);
  printf("device: %s\n", gpu_ctx_name(ctx));
  test_odd_sizes();
  if (!quick) {
    test_photographs();
    test_8k();
    test_precision();
    test_out_of_memory();
  }
  gpu_ctx_free(ctx);
  cpu_pool_free(pool);
  printf("gpu_check: %d failures\n", failures);
  return failures ? 1 : 0;
}

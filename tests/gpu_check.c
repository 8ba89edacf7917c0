/* The GPU test suite (`make test-gpu`, on a machine with an NVIDIA GPU): every method on the GPU
 * against its CPU twin on real photographs and odd sizes (1x1, 1xN, Nx1, 1023x777, 8192x8192),
 * with one sigma on both axes and with a sigma of its own on each: the fir family byte for byte,
 * the other methods within 1 level; the GPU's PSNR against the CPU's measurement of the same
 * output (the same, or within 0.01 dB when the integer or the single-precision reference decided
 * it, on photographs and adversarial images too: test_psnr_reference, once with each); single
 * against double precision
 * across sigma (the data behind GPU_FLOAT_SIGMA_MAX, and yvv_blocked and deriche within a level in
 * single precision at every sigma); an out-of-memory job that fails alone; region blur on the
 * device against its parts (each box blurred by gpu_blur and blended by cpu_blend_box); and, with
 * --fault, a sticky error that is reported as fatal; images whose exact reference runs in strips of
 * rows. --quick runs the small cases only (odd sizes, the per-axis cases, regions) and the strips,
 * --sanitize fewer still (for compute-sanitizer, which slows every kernel down; `--sanitize
 * regions` only the regions, `--sanitize strips` only the strips).
 *
 * Local statistics, contrast and convolution (issue 5) against cpu_variance, cpu_contrast_image
 * and cpu_convolve_image: exact variance and convolution bit for bit; the float32 variance
 * methods bit for bit too, and within var_tol of exact; contrast within 1 level (it has matched
 * bit for bit). `--local` runs only that section; `--sanitize local` only its odd
 * sizes, `--sanitize METHOD` (a method's name) only that method's.
 *
 * /sharpen, /pixelate and /variance on the device (issue 35) against cpu_unsharp_image,
 * cpu_pixelate and cpu_variance_image, on odd sizes, 1 to 4 channels, 8 and 16 bits, and 1080p:
 * pixelate and exact variance bit for bit (samples and statistics), sharpen bit for bit over the
 * GPU's own blur and within the blur's tolerance of the CPU's, the float variance methods within
 * var_tol. `--ops` runs only that section, `--sanitize ops` a third of its small cases, and
 * `--bench-ops` times each new operation's kernels against the blur at sigma 12 on 1080p. */
#include "test.h"
#include "fixtures.h"

#include "../codecs/codecs.h"
#include "../cpu/cpu.h"
#include "../gpu/gpu.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

static struct cpu_pool *pool;
static struct gpu_ctx *ctx;
static int quick;

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

static int failures;
#define PSNR_DB 0.01   /* the float reference's PSNR: within this of the double one's */
static int last_exact; /* compare's last GPU PSNR came from the double reference */
static int last_int;   /* compare's last blur was separable in integers (gpu_separable_exact) */
static double last_dpsnr;
static int local_only; /* --local, or --sanitize local: only the issue 5 section */
static int only = -1;  /* --sanitize METHOD: only that method's odd sizes */

/* Difference of sample i between two outputs in levels. With alpha and premultiplied set, colour
 * is compared premultiplied (colour x alpha / max), as the PSNR compares it: the colour of a
 * nearly transparent pixel is invisible, and any difference in it is magnified by 1/alpha. */
static double pixel_diff(const struct cpu_image *x, const struct cpu_image *y, size_t i,
                         int premultiplied) {
  int c = x->channels, k = (int)(i % (size_t)c);
  double a = image_sample(x, i), b = image_sample(y, i);
  if (premultiplied && (c == 2 || c == 4) && k < c - 1) {
    double max = (1 << x->depth) - 1;
    a *= image_sample(x, i - (size_t)k + (size_t)c - 1) / max;
    b *= image_sample(y, i - (size_t)k + (size_t)c - 1) / max;
  }
  return fabs(a - b);
}

/* One method on one image at sigma_x along x and sigma_y along y, GPU against CPU. */
static void compare(struct gpu_ctx *g, enum cpu_method m, double sigma_x, double sigma_y,
                    const struct cpu_image *src, const char *label) {
  struct cpu_image c = *src, d = *src;
  size_t n = cpu_image_bytes(src) / (size_t)(src->depth / 8);
  c.data = malloc(cpu_image_bytes(src));
  d.data = malloc(cpu_image_bytes(src));
  ASSERT(c.data && d.data);
  struct cpu_blur b = {m, sigma_x, sigma_y, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
  struct cpu_accuracy ca, ga, gm;
  struct gpu_times t;
  char sigma[32]; /* "12", or "1,20" (x, y) */
  if (sigma_x == sigma_y)
    snprintf(sigma, sizeof(sigma), "%g", sigma_x);
  else
    snprintf(sigma, sizeof(sigma), "%g,%g", sigma_x, sigma_y);
  ASSERT(cpu_blur_image(pool, &b, src, &c, &ca, NULL) == ERR_OK);
  enum gpu_status st = gpu_blur(g, &b, src, &d, &ga, &t);
  if (st != GPU_OK)
    TEST_FAIL("%s %s sigma %s: %s", label, cpu_method_name(m), sigma, gpu_ctx_error(g));
  ASSERT(cpu_measure(pool, sigma_x, sigma_y, src, &d, &gm) == ERR_OK);
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
  /* the PSNR within 0.01 dB of the CPU's double measurement (the float reference's bound: its
   * largest error then within 2e-5 of the peak) or the same (the double reference ran) */
  double dpsnr = isinf(ga.psnr) && isinf(gm.psnr) ? 0 : fabs(ga.psnr - gm.psnr);
  int exact = gpu_reference_exact(g), peak = (1 << src->depth) - 1;
  /* separable in integers (8-bit gray or RGB up to sigma 40): each output is the exact Gaussian
   * rounded, except within the integer reference's bound (under 2e-4 levels) of a half level */
  int exact_sep = m == CPU_SEPARABLE && gpu_separable_exact(g, &b, src);
  int ok = maxd <= allowed &&
           (exact ? dpsnr < 1e-6 * (1 + fabs(gm.psnr)) + 1e-9 : dpsnr <= PSNR_DB) &&
           fabs(ga.max_abs - gm.max_abs) < (exact ? 1e-6 : 2e-5 * peak + 1e-6) &&
           (!exact_sep || gm.max_abs <= 0.5 + 2e-4);
  last_exact = exact, last_dpsnr = dpsnr, last_int = exact_sep;
  printf("%-4s %-14s %-11s sigma %6s  max diff %.3f (%zu samples)  psnr gpu %.4f cpu-measured %.4f "
         "cpu-method %.4f (%s reference)  largest error %.6f%s  kernel %.3f ms\n",
         ok ? "ok" : "FAIL", label, cpu_method_name(m), sigma, maxd, diffs, ga.psnr, gm.psnr,
         ca.psnr, exact ? "double" : "float", gm.max_abs, exact_sep ? " (integers)" : "", t.kernel);
  failures += !ok;
  free(c.data);
  free(d.data);
}

static void sweep(const struct cpu_image *img, const char *label, const double *sigmas, int ns,
                  double fir_max_sigma) {
  for (int m = 0; m < CPU_NMETHODS; m++)
    for (int s = 0; s < ns && (only < 0 || m == only); s++) {
      if (cpu_method_is_fir(m) && sigmas[s] > fir_max_sigma) continue; /* O(r^2) per pixel */
      compare(ctx, m, sigmas[s], sigmas[s], img, label);
    }
}

static void test_odd_sizes(void) {
  struct codec_image astro = fixture_photo("astronaut.png"),
                     g16 = fixture_photo("gray_alpha16.png");
  const double all[] = {0.5, 1, 3, 12, 40, 100, 300}, few[] = {1, 12, 40};
  const double *sigmas = quick > 1 ? few : all; /* --sanitize: few, the tools are slow */
  int ns = quick > 1 ? 3 : 7;
  /* the last two: several of yvv_blocked's blocks along both axes, the last one partial (8-bit
   * RGBA is loaded raw, RGB through the general path) */
  const int sizes[][3] = {{1, 1, 4},   {1, 37, 3},    {37, 1, 4},  {2, 2, 1},
                          {33, 17, 2}, {300, 130, 4}, {130, 70, 3}};
  for (int i = 0; i < 7; i++) {
    char label[32];
    snprintf(label, sizeof(label), "%dx%dx%d", sizes[i][0], sizes[i][1], sizes[i][2]);
    struct cpu_image img = tile(&astro, sizes[i][0], sizes[i][1], sizes[i][2]);
    sweep(&img, label, sigmas, ns, i < 5 ? 100 : 12);
    free(img.data);
  }
  struct cpu_image img = tile(&g16, 45, 31, 2);
  sweep(&img, "45x31 GA16", sigmas, ns, 40);
  free(img.data);
  codec_image_free(&astro);
  codec_image_free(&g16);
}

/* A sigma of its own on each axis: every method at five (sigma_x, sigma_y) pairs on 8-bit RGB,
 * 8-bit RGBA (a width that takes pyramid's 16-byte stores), 16-bit RGBA, 1xN and Nx1. pyramid
 * reduces (kx, ky) = (1, 4) times at (1, 20) and (3, 12), (8, 1) at (40, 3), (1, 16) at
 * (0.5, 100) and (16, 2) at (100, 6); yvv and yvv2way run in double on 8-bit images where one
 * sigma is above GPU_FLOAT_SIGMA_MAX. */
static void test_per_axis(void) {
  struct codec_image astro = fixture_photo("astronaut.png"), c16 = fixture_photo("rgba16.png");
  const double pairs[][2] = {{1, 20}, {40, 3}, {0.5, 100}, {3, 12}, {100, 6}};
  struct {
    const struct codec_image *p;
    int w, h, c;
  } imgs[] = {{&astro, 203, 157, 3},
              {&astro, 172, 230, 4},
              {&c16, 140, 100, 4},
              {&astro, 1, 37, 3},
              {&astro, 37, 1, 4}};
  for (int i = 0; i < 5; i++) {
    char label[32];
    snprintf(label, sizeof(label), "%dx%dx%d%s", imgs[i].w, imgs[i].h, imgs[i].c,
             imgs[i].p->depth == 16 ? "/16" : "");
    struct cpu_image img = tile(imgs[i].p, imgs[i].w, imgs[i].h, imgs[i].c);
    for (int m = 0; m < CPU_NMETHODS; m++)
      for (int k = 0; k < 5 && (only < 0 || m == only); k++)
        compare(ctx, m, pairs[k][0], pairs[k][1], &img, label);
    free(img.data);
  }
  codec_image_free(&astro);
  codec_image_free(&c16);
}

/* The PSNR from the single-precision reference (issue 34) against the CPU's double measurement,
 * within PSNR_DB, on 1920x1080 photographs (where the float reference must decide: its bound is
 * far below the error it measures) and on adversarial images, where the double one may have to:
 * noise, 1-pixel checkers, lines, steps, a flat image (infinite PSNR), 1xN and Nx1, 16-bit and
 * RGBA; pyramid at sigma 12 (the service's auto without the PSNR), separable at 3 and 12 (with
 * it: on 8-bit gray or RGB in integers, measuring itself), yvv_blocked at 40. */
enum adv { ADV_PHOTO, ADV_NOISE, ADV_CHECKER, ADV_LINES, ADV_STEPS, ADV_FLAT, ADV_N };
static const char *const adv_names[ADV_N] = {"photo", "noise", "checker", "lines", "steps", "flat"};

static struct cpu_image adversarial(enum adv a, const struct codec_image *photo, int w, int h,
                                    int c, int depth) {
  struct cpu_image base = tile(photo, w, h, c), img = {NULL, w, h, c, depth};
  unsigned peak = (1u << depth) - 1, rng = 12345;
  img.data = malloc(cpu_image_bytes(&img));
  ASSERT(img.data);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int k = 0; k < c; k++) {
        size_t i = ((size_t)y * w + x) * c + k;
        unsigned v = image_sample(&base, i) * (depth == base.depth ? 1 : 257);
        rng = rng * 1664525u + 1013904223u;
        if (a == ADV_NOISE) v = (unsigned)(((unsigned long long)(rng >> 8) * (peak + 1)) >> 24);
        if (a == ADV_CHECKER) v = (x + y) % 2 ? peak : 0;
        if (a == ADV_LINES) v = x % 17 == 0 || y % 23 == 0 ? peak : 0;
        if (a == ADV_STEPS) v = (x * 4 / w + y * 3 / h) * peak / 5;
        if (a == ADV_FLAT) v = peak * 137 / 255;
        if (k == c - 1 && (c == 2 || c == 4) && a != ADV_PHOTO) v = peak - (x % 5) * peak / 8;
        if (depth == 16)
          ((uint16_t *)img.data)[i] = (uint16_t)v;
        else
          ((uint8_t *)img.data)[i] = (uint8_t)v;
      }
  free(base.data);
  return img;
}

static void test_psnr_reference(const char *which, int integers) {
  struct codec_image photo = fixture_photo("photo_1080p.jpg");
  struct {
    int w, h, c, depth;
  } shapes[] = {
      {1920, 1080, 3, 8}, {1, 3000, 3, 8}, {3000, 1, 1, 8}, {640, 360, 4, 8}, {640, 360, 3, 16}};
  const struct {
    enum cpu_method m;
    double sigma;
  } runs[] = {{CPU_PYRAMID, 12}, {CPU_SEPARABLE, 3}, {CPU_YVV_BLOCKED, 40}, {CPU_SEPARABLE, 12}};
  double worst = 0;
  int fast_photos = 0, int_runs = 0;
  for (int s = 0; s < 5; s++)
    for (int a = 0; a < ADV_N; a++) {
      char label[48];
      snprintf(label, sizeof(label), "%s %dx%dx%d/%d", adv_names[a], shapes[s].w, shapes[s].h,
               shapes[s].c, shapes[s].depth);
      struct cpu_image img =
          adversarial((enum adv)a, &photo, shapes[s].w, shapes[s].h, shapes[s].c, shapes[s].depth);
      for (int r = 0; r < 4 && (s == 0 || r == 0); r++) {
        compare(ctx, runs[r].m, runs[r].sigma, runs[r].sigma, &img, label);
        worst = last_dpsnr > worst && !isinf(last_dpsnr) ? last_dpsnr : worst;
        if (a == ADV_PHOTO && s == 0) fast_photos += !last_exact;
        if (s == 0) int_runs += last_int; /* separable at 3 and 12 on 1080p RGB */
      }
      free(img.data);
    }
  /* the point: the photographs' PSNR comes from the float reference, at every method */
  int ok = fast_photos == 4 && int_runs == (integers ? 2 * ADV_N : 0);
  printf("%-4s psnr reference (%s): 1920x1080 photo from the fast reference at %d of 4 runs; "
         "separable in integers %d times; largest |gpu - cpu| %.5f dB (at most %.2f)\n",
         ok ? "ok" : "FAIL", which, fast_photos, int_runs, worst, PSNR_DB);
  failures += !ok;
  codec_image_free(&photo);
}

/* Images whose reference plane of doubles passes 128 MB: the reference goes through it in
 * strips of rows (gpu/kernels_sep.cu, ref_strip), and must measure what the CPU measures. Three
 * strips for the gray image at sigma 3 and 40 (radius 12 and 160), two for the RGB one, at
 * different sigmas across and down. */
static void test_strips(void) {
  struct codec_image astro = fixture_photo("astronaut.png");
  struct cpu_image gray = tile(&astro, 4096, 9000, 1), rgb = tile(&astro, 2048, 2800, 3);
  const double sigmas[] = {3, 40};
  for (int k = 0; k < 2; k++) {
    compare(ctx, CPU_PYRAMID, sigmas[k], sigmas[k], &gray, "4096x9000x1");
    compare(ctx, CPU_SEPARABLE, sigmas[k], sigmas[k], &gray, "4096x9000x1");
  }
  compare(ctx, CPU_PYRAMID, 12, 30, &rgb, "2048x2800x3");
  free(gray.data);
  free(rgb.data);
  codec_image_free(&astro);
}

/* Region blur on the device against its parts: each box cut from the image, blurred by gpu_blur
 * and blended on the host by cpu_blend_box (the blend's CPU twin), in order. The same samples
 * and the same accuracy per box, with overlapping regions, one at a corner, and a feather; yvv
 * takes the boxes one by one, pyramid in batches (20 regions: two launches, and blends grouped
 * where their windows do not overlap; 16 without the PSNR: only the windows, each expanded and
 * blended in one launch per run of windows that do not overlap). */
static void test_regions(void) {
  struct codec_image astro = fixture_photo("astronaut.png"), c16 = fixture_photo("rgba16.png");
  struct cpu_image imgs[] = {tile(&astro, 203, 157, 3), tile(&c16, 140, 100, 4)};
  const int rects[][4] = {{20, 30, 60, 70}, {50, 60, 90, 95}, {0, 0, 12, 9}, {100, 80, 140, 100}};
  const struct cpu_blur blurs[] = {{CPU_YVV, 3, 3, CPU_TRUNCATE, CPU_YVV_CALIBRATED},
                                   {CPU_PYRAMID, 12, 9, CPU_TRUNCATE, 0},
                                   {CPU_PYRAMID, 12, 12, CPU_TRUNCATE, 0}};
  struct gpu_region r[20];
  /* a blur of blurs, regions, the first of rects: pyramid's windows in five launches (16
   * regions, windows overlapping) and in one (two far apart, the same k on both axes) */
  const int cases[][3] = {{0, 4, 0}, {1, 20, 0}, {1, 16, 0}, {2, 2, 2}};
  for (int i = 0; i < 2; i++)
    for (int c = 0; c < 4; c++)
      for (int feather = 0; feather <= 5; feather += 5) {
        struct cpu_image *img = &imgs[i], want = *img, got = *img;
        int m = cases[c][0], n = cases[c][1], first = cases[c][2];
        const struct cpu_blur b = blurs[m];
        struct cpu_accuracy acc[20], one[20];
        int one_exact[20];
        struct gpu_times t;
        size_t px = (size_t)img->channels * (img->depth / 8);
        want.data = malloc(cpu_image_bytes(img));
        ASSERT(want.data);
        memcpy(want.data, img->data, cpu_image_bytes(img));
        for (int k = 0; k < n; k++) {
          if (first + k < 4)
            memcpy(r[k].rect, rects[first + k], sizeof(r[k].rect));
          else /* small ones across the image, some overlapping */
            r[k].rect[0] = k * 37 % 120, r[k].rect[1] = k * 23 % 90,
            r[k].rect[2] = r[k].rect[0] + 8 + k % 7, r[k].rect[3] = r[k].rect[1] + 6 + k % 5;
          r[k].rect[2] = r[k].rect[2] < img->width ? r[k].rect[2] : img->width;
          r[k].rect[3] = r[k].rect[3] < img->height ? r[k].rect[3] : img->height;
          int x0 = r[k].rect[0] - 20 - feather, y0 = r[k].rect[1] - 20 - feather;
          r[k].box[0] = (x0 < 0 ? 0 : x0) / 16 * 16, r[k].box[1] = (y0 < 0 ? 0 : y0) / 16 * 16;
          int x1 = r[k].rect[2] + 20 + feather, y1 = r[k].rect[3] + 20 + feather;
          r[k].box[2] = (x1 > img->width ? img->width : x1) - r[k].box[0];
          r[k].box[3] = (y1 > img->height ? img->height : y1) - r[k].box[1];
          struct cpu_image box = {NULL, r[k].box[2], r[k].box[3], img->channels, img->depth};
          box.data = malloc(cpu_image_bytes(&box));
          ASSERT(box.data);
          for (int y = 0; y < box.height; y++)
            memcpy((char *)box.data + (size_t)y * box.width * px,
                   (char *)img->data + ((size_t)(r[k].box[1] + y) * img->width + r[k].box[0]) * px,
                   (size_t)box.width * px);
          ASSERT(gpu_blur(ctx, &b, &box, &box, &one[k], NULL) == GPU_OK);
          one_exact[k] = gpu_reference_exact(ctx); /* else the float reference's: 0.01 dB */
          ASSERT_INT(cpu_blend_box(&want, &box, r[k].box[0], r[k].box[1], r[k].rect, feather), ==,
                     ERR_OK);
          free(box.data);
        }
        void *pixels = NULL;
        enum gpu_status st = gpu_upload(ctx, img, NULL);
        if (st == GPU_OK) st = gpu_blur_regions(ctx, &b, img, r, n, feather, acc, &t);
        if (st == GPU_OK) st = gpu_download(ctx, GPU_OUTPUT, img, &pixels, NULL);
        if (st != GPU_OK) TEST_FAIL("regions: %s", gpu_ctx_error(ctx));
        got.data = pixels;
        size_t diffs = 0, ns = cpu_image_bytes(img) / (size_t)(img->depth / 8);
        for (size_t k = 0; k < ns; k++) diffs += image_sample(&want, k) != image_sample(&got, k);
        int same_acc = 1;
        double peak = (1 << img->depth) - 1;
        for (int k = 0; k < n; k++)
          same_acc &= one_exact[k]
                          ? acc[k].psnr == one[k].psnr && acc[k].max_abs == one[k].max_abs
                          : fabs(acc[k].psnr - one[k].psnr) <= PSNR_DB &&
                                fabs(acc[k].max_abs - one[k].max_abs) <= 2e-5 * peak + 1e-6;
        /* and without the PSNR (pyramid then reads the boxes in place): the same samples */
        st = gpu_upload(ctx, img, NULL);
        if (st == GPU_OK) st = gpu_blur_regions(ctx, &b, img, r, n, feather, NULL, &t);
        if (st == GPU_OK) st = gpu_download(ctx, GPU_OUTPUT, img, &pixels, NULL);
        if (st != GPU_OK) TEST_FAIL("regions: %s", gpu_ctx_error(ctx));
        got.data = pixels;
        size_t diffs_nopsnr = 0;
        for (size_t k = 0; k < ns; k++)
          diffs_nopsnr += image_sample(&want, k) != image_sample(&got, k);
        int ok = diffs == 0 && diffs_nopsnr == 0 && same_acc;
        printf(
            "%-4s regions %s %g,%g %dx%dx%d%s %d regions feather %d: %zu samples differ from the "
            "parts blended on the host (%zu without the PSNR); box PSNR %s (%.4f)  %.3f ms\n",
            ok ? "ok" : "FAIL", m ? "pyramid" : "yvv", b.sigma_x, b.sigma_y, img->width,
            img->height, img->channels, img->depth == 16 ? "/16" : "", n, feather, diffs,
            diffs_nopsnr, same_acc ? "the same" : "DIFFERS", acc[0].psnr, t.kernel + t.reference);
        failures += !ok;
        free(want.data);
      }
  free(imgs[0].data);
  free(imgs[1].data);
  codec_image_free(&astro);
  codec_image_free(&c16);
}

static void test_photographs(void) {
  const char *names[] = {"camera.png", "astronaut.png", "red_square.png", "rgba16.png"};
  const double sigmas[] = {0.5, 1, 3, 12, 40, 100, 300};
  for (int i = 0; i < 4; i++) {
    struct codec_image p = fixture_photo(names[i]);
    struct cpu_image img = {p.pixels, p.width, p.height, p.channels, p.depth};
    sweep(&img, names[i], sigmas, 7, 12);
    codec_image_free(&p);
  }
  struct codec_image astro = fixture_photo("astronaut.png");
  struct cpu_image img = tile(&astro, 1023, 777, 4);
  sweep(&img, "1023x777x4", sigmas, 7, 3);
  free(img.data);
  codec_image_free(&astro);
}

static void test_8k(void) {
  struct codec_image p = fixture_photo("photo_1080p.jpg");
  struct cpu_image img = tile(&p, 8192, 8192, 4);
  const double few[] = {1}, more[] = {3, 12, 100};
  for (int m = 0; m < CPU_NMETHODS; m++) {
    const double *s = cpu_method_is_fir(m) ? few : more;
    for (int k = 0; k < (cpu_method_is_fir(m) ? 1 : 3); k++)
      compare(ctx, m, s[k], s[k], &img, "8192x8192x4");
  }
  free(img.data);
  codec_image_free(&p);
}

/* Single against double precision for the recursive methods: the largest difference from the
 * double-precision CPU twin, per sigma; at most one level where the service uses it. */
static void test_precision(void) {
  struct codec_image p = fixture_photo("astronaut.png");
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
        struct cpu_blur b = {ms[k], sigmas[s], sigmas[s], CPU_TRUNCATE, CPU_YVV_CALIBRATED};
        struct cpu_accuracy ca, ga;
        ASSERT(cpu_blur_image(pool, &b, &img, &c, &ca, NULL) == ERR_OK);
        ASSERT(gpu_blur(g, &b, &img, &d, &ga, NULL) == GPU_OK);
        unsigned maxd = 0;
        for (size_t i = 0; i < cpu_image_bytes(&img); i++) {
          int dd = abs((int)((uint8_t *)c.data)[i] - ((uint8_t *)d.data)[i]);
          maxd = (unsigned)dd > maxd ? (unsigned)dd : maxd;
        }
        /* what the service relies on (use_double): double everywhere, single precision for
         * yvv_blocked and deriche at every sigma and for the others up to GPU_FLOAT_SIGMA_MAX */
        int held = prec || ms[k] == CPU_YVV_BLOCKED || ms[k] == CPU_DERICHE ||
                   sigmas[s] <= GPU_FLOAT_SIGMA_MAX;
        int ok = !held || maxd <= 1;
        printf("%-4s precision %-6s %-11s sigma %5g  max diff vs CPU double %u  psnr gpu %.2f cpu "
               "%.2f\n",
               ok ? "ok" : "FAIL", prec ? "double" : "float", cpu_method_name(ms[k]), sigmas[s],
               maxd, ga.psnr, ca.psnr);
        failures += !ok;
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
  struct codec_image p = fixture_photo("astronaut.png");
  struct cpu_image img = tile(&p, 4096, 4096, 4), out = img;
  out.data = malloc(cpu_image_bytes(&img));
  size_t fr = 0, tot = 0;
  void *hold = NULL;
  ASSERT(g && cudaMemGetInfo(&fr, &tot) == cudaSuccess);
  ASSERT(cudaMalloc(&hold, fr - (64u << 20)) == cudaSuccess); /* leave 64 MB */
  struct cpu_blur b = {CPU_YVV_BLOCKED, 12, 12, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
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

/* ---- local statistics, contrast and convolution (issue 5) ---- */

/* The most a float32 method's variance may differ from exact, relative to exact (or to one
 * level squared where exact is smaller): |v - exact| / max(exact, 1 level^2). Measured on an H200
 * over the cases of this file (largest: naive 4.8e-4, koenig 5.07, welford 4.1e-3, pairwise
 * 2.6e-5, threewise 2.2e-5) and rounded up. koenig's E[x^2] - E[x]^2 loses its digits where the
 * mean is large against the spread, hence its bound. The float methods must also give the CPU
 * twin's bits: both spell the same float32 operations in the same order. */
static const double var_tol[CPU_VAR_NMETHODS] = {
    [CPU_VAR_NAIVE] = 1e-3,    [CPU_VAR_KOENIG] = 10,      [CPU_VAR_WELFORD] = 1e-2,
    [CPU_VAR_PAIRWISE] = 1e-4, [CPU_VAR_THREEWISE] = 1e-4, [CPU_VAR_EXACT] = 0,
};

/* Values whose bits differ between a and b (n doubles each). */
static size_t count_diff(const double *a, const double *b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(double)) != 0;
  return d;
}

/* One variance method on one image, GPU against the CPU twin, and against exact (ev). */
static void compare_var(const struct cpu_image *img, const char *label, const struct cpu_var *v,
                        const double *ev) {
  size_t n = (size_t)img->width * img->height;
  double *cv = malloc(n * sizeof(double)), *cm = malloc(n * sizeof(double));
  double *gv = malloc(n * sizeof(double)), *gm = malloc(n * sizeof(double));
  ASSERT(cv && cm && gv && gm);
  struct gpu_times t;
  ASSERT(cpu_variance(pool, v, img, cm, cv) == ERR_OK);
  if (gpu_variance(ctx, v, img, gm, gv, &t) != GPU_OK)
    TEST_FAIL("%s %s: %s", label, cpu_var_method_name(v->method), gpu_ctx_error(ctx));
  size_t dv = count_diff(gv, cv, n), dm = count_diff(gm, cm, n);
  double level2 = img->depth == 16 ? 257.0 * 257.0 : 1.0, rel = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs(gv[i] - ev[i]) / (ev[i] > level2 ? ev[i] : level2);
    rel = e > rel || isnan(e) ? e : rel;
  }
  int ok = dv == 0 && dm == 0 && rel <= var_tol[v->method];
  printf("%-4s var %-14s %-9s %-8s r %3d  differ from CPU: var %zu mean %zu of %zu  max rel err vs "
         "exact %.3g (tol %.3g)  kernel %.3f ms\n",
         ok ? "ok" : "FAIL", label, cpu_var_method_name(v->method),
         v->window == CPU_WINDOW_BOX ? "box" : "triangle", v->radius, dv, dm, n, rel,
         var_tol[v->method], t.kernel);
  failures += !ok;
  free(cv), free(cm), free(gv), free(gm);
}

/* Every method, both windows, the given radii; the O(r^2) methods up to direct_max. */
static void sweep_var(const struct cpu_image *img, const char *label, const int *radii, int nr,
                      int direct_max) {
  size_t n = (size_t)img->width * img->height;
  double *ev = malloc(n * sizeof(double));
  ASSERT(ev);
  for (int win = 0; win < 2; win++)
    for (int k = 0; k < nr; k++) {
      struct cpu_var ex = {CPU_VAR_EXACT, win ? CPU_WINDOW_BOX : CPU_WINDOW_TRIANGLE, radii[k]};
      ASSERT(cpu_variance(pool, &ex, img, NULL, ev) == ERR_OK);
      for (int m = 0; m < CPU_VAR_NMETHODS; m++) {
        struct cpu_var v = ex;
        v.method = (enum cpu_var_method)m;
        int direct = m == CPU_VAR_NAIVE || m == CPU_VAR_KOENIG || m == CPU_VAR_WELFORD;
        if (!cpu_var_radius_ok(v.method, v.radius) || (direct && v.radius > direct_max)) continue;
        compare_var(img, label, &v, ev);
      }
    }
  free(ev);
}

/* The Wallis defaults of libvips' stdif at radius r, GPU against CPU: within 1 level. */
static void compare_contrast(const struct cpu_image *img, const char *label, int r) {
  struct cpu_contrast c = {r, 0.5, 128, 0.5, 50};
  struct cpu_image a = *img, b = *img;
  size_t bytes = cpu_image_bytes(img), n = bytes / (size_t)(img->depth / 8);
  a.data = malloc(bytes), b.data = malloc(bytes);
  ASSERT(a.data && b.data);
  struct gpu_times t;
  ASSERT(cpu_contrast_image(pool, &c, img, &a) == ERR_OK);
  if (gpu_contrast(ctx, &c, img, &b, &t) != GPU_OK)
    TEST_FAIL("%s contrast: %s", label, gpu_ctx_error(ctx));
  unsigned maxd = 0;
  size_t diffs = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned d = (unsigned)abs((int)image_sample(&a, i) - (int)image_sample(&b, i));
    maxd = d > maxd ? d : maxd;
    diffs += d != 0;
  }
  int ok = maxd <= 1;
  printf("%-4s contrast %-14s r %2d  max diff %u (%zu of %zu samples)  kernel %.3f ms\n",
         ok ? "ok" : "FAIL", label, r, maxd, diffs, n, t.kernel);
  failures += !ok;
  free(a.data), free(b.data);
}

/* One kernel on one image, GPU against CPU: the same bytes. */
static void compare_conv(const struct cpu_image *img, const char *label, const struct cpu_conv *c,
                         const char *kname) {
  struct cpu_image a = *img, b = *img;
  size_t bytes = cpu_image_bytes(img);
  a.data = malloc(bytes), b.data = malloc(bytes);
  ASSERT(a.data && b.data);
  struct gpu_times t;
  ASSERT_INT(cpu_convolve_image(pool, c, img, &a), ==, ERR_OK);
  if (gpu_convolve(ctx, c, img, &b, &t) != GPU_OK)
    TEST_FAIL("%s convolve %s: %s", label, kname, gpu_ctx_error(ctx));
  size_t diffs = 0;
  for (size_t i = 0; i < bytes; i++) diffs += ((uint8_t *)a.data)[i] != ((uint8_t *)b.data)[i];
  printf("%-4s convolve %-14s %-8s %2dx%-2d  %zu of %zu bytes differ  kernel %.3f ms\n",
         diffs ? "FAIL" : "ok", label, kname, c->size, c->size, diffs, bytes, t.kernel);
  failures += diffs != 0;
  free(a.data), free(b.data);
}

/* A size x size kernel of pseudo-random weights summing to about 1, with a bias. */
static struct cpu_conv random_kernel(int size, float bias) {
  struct cpu_conv c;
  memset(&c, 0, sizeof(c));
  c.size = size, c.bias = bias;
  unsigned s = 12345u + (unsigned)size;
  double sum = 0;
  for (int i = 0; i < size * size; i++) {
    s = s * 1103515245u + 12345u;
    c.k[i] = (float)((s >> 8) % 2001) / 1000.0f - 0.7f;
    sum += c.k[i];
  }
  for (int i = 0; i < size * size; i++) c.k[i] = (float)(c.k[i] / sum);
  return c;
}

/* Every named kernel and three custom ones (1x1, 5x5, 31x31); under the sanitizers, edge and
 * 31x31 only (the smallest and the widest halo). */
static void sweep_conv(const struct cpu_image *img, const char *label) {
  for (int i = 0; cpu_conv_names[i] && (quick < 2 || i == 0); i++) {
    struct cpu_conv c;
    ASSERT(cpu_conv_named(cpu_conv_names[i], &c) == ERR_OK);
    compare_conv(img, label, &c, cpu_conv_names[i]);
  }
  const int sizes[] = {1, 5, 31};
  for (int i = quick > 1 ? 2 : 0; i < 3; i++) {
    struct cpu_conv c = random_kernel(sizes[i], i == 0 ? -7.5f : 0);
    compare_conv(img, label, &c, "custom");
  }
}

/* A 16-bit photograph: camera's samples in the high byte, astronaut's red in the low byte. */
static struct cpu_image photo16(const struct codec_image *hi, const struct codec_image *lo) {
  struct cpu_image img = {NULL, hi->width, hi->height, 1, 16};
  img.data = malloc(cpu_image_bytes(&img));
  ASSERT(img.data && lo->width == hi->width && lo->height == hi->height);
  for (size_t i = 0; i < (size_t)hi->width * hi->height; i++)
    ((uint16_t *)img.data)[i] =
        (uint16_t)(hi->pixels[i * hi->channels] << 8 | lo->pixels[i * lo->channels]);
  return img;
}

/* Odd sizes (1x1, 1xN, Nx1, widths that are no multiple of any block), 8 and 16 bits. */
static void local_odd_sizes(void) {
  struct codec_image cam = fixture_photo("camera.png"), g16 = fixture_photo("gray16.png");
  struct codec_image astro = fixture_photo("astronaut.png"),
                     ga16 = fixture_photo("gray_alpha16.png");
  const int sizes[][2] = {{1, 1}, {1, 37}, {37, 1}, {65, 3}, {33, 17}, {2001, 3}};
  const int all[] = {1, 3, 7, 15, 63}, few[] = {1, 3};
  int nr = quick > 1 ? 2 : 5;
  for (int i = 0; i < 6; i++)
    for (int d = 0; d < 2; d++) {
      char label[32];
      snprintf(label, sizeof(label), "%dx%d/%d", sizes[i][0], sizes[i][1], d ? 16 : 8);
      struct cpu_image img = tile(d ? &g16 : &cam, sizes[i][0], sizes[i][1], 1);
      sweep_var(&img, label, quick > 1 ? few : all, nr, 63);
      free(img.data);
      for (int c = 1; c <= 4; c++) {           /* gray, gray+alpha, RGB, RGBA */
        if (i % 2 != c % 2 && i > 1) continue; /* every size meets two channel counts */
        img = tile(d ? &ga16 : &astro, sizes[i][0], sizes[i][1], c);
        snprintf(label, sizeof(label), "%dx%dx%d/%d", sizes[i][0], sizes[i][1], c, d ? 16 : 8);
        if (quick < 2) compare_contrast(&img, label, 1);
        compare_contrast(&img, label, 5);
        sweep_conv(&img, label);
        free(img.data);
      }
    }
  codec_image_free(&cam), codec_image_free(&g16), codec_image_free(&astro);
  codec_image_free(&ga16);
}

static void local_photographs(void) {
  struct codec_image cam = fixture_photo("camera.png"), astro = fixture_photo("astronaut.png");
  struct codec_image hd = fixture_photo("gray_1080p.jpg");
  struct cpu_image img = {cam.pixels, cam.width, cam.height, 1, 8};
  const int radii[] = {1, 3, 7, 15, 63}, hd_radii[] = {7, 63, 127};
  sweep_var(&img, "camera.png", radii, 5, 63);
  struct cpu_image c16 = photo16(&cam, &astro);
  sweep_var(&c16, "camera16", radii, 5, 15);
  struct cpu_image hdi = {hd.pixels, hd.width, hd.height, 1, 8};
  sweep_var(&hdi, "gray_1080p.jpg", hd_radii, 3, 0);
  const char *names[] = {"astronaut.png", "camera.png",       "coffee.png",
                         "rgba16.png",    "gray_alpha16.png", "gray16.png"};
  for (int i = 0; i < 6; i++) {
    struct codec_image p = fixture_photo(names[i]);
    struct cpu_image pi = {p.pixels, p.width, p.height, p.channels, p.depth};
    const int cr[] = {1, 5, 15};
    for (int k = 0; k < 3; k++) compare_contrast(&pi, names[i], cr[k]);
    sweep_conv(&pi, names[i]);
    codec_image_free(&p);
  }
  compare_contrast(&c16, "camera16", 5);
  sweep_conv(&c16, "camera16");
  free(c16.data);
  codec_image_free(&cam), codec_image_free(&astro), codec_image_free(&hd);
}

/* 8192x8192: exact at the largest radius (the 128-bit numerator for 8-bit input) and a box. */
static void local_8k(void) {
  struct codec_image hd = fixture_photo("gray_1080p.jpg");
  struct cpu_image img = tile(&hd, 8192, 8192, 1);
  size_t n = (size_t)8192 * 8192;
  double *ev = malloc(n * sizeof(double));
  ASSERT(ev);
  const struct cpu_var vs[] = {{CPU_VAR_EXACT, CPU_WINDOW_TRIANGLE, 127},
                               {CPU_VAR_EXACT, CPU_WINDOW_BOX, 7},
                               {CPU_VAR_THREEWISE, CPU_WINDOW_TRIANGLE, 63}};
  for (int i = 0; i < 3; i++) {
    struct cpu_var ex = vs[i];
    ex.method = CPU_VAR_EXACT;
    ASSERT(cpu_variance(pool, &ex, &img, NULL, ev) == ERR_OK);
    compare_var(&img, "8192x8192", &vs[i], ev);
  }
  free(ev);
  free(img.data);
  codec_image_free(&hd);
}

static void test_local(void) {
  local_odd_sizes();
  if (quick) return;
  local_photographs();
  local_8k();
}

/* ---- issue 35: /sharpen, /pixelate and /variance on the device, against their CPU twins ---- */

/* The output image of shape img, downloaded into a buffer of its own (the caller frees it). */
static struct cpu_image output(const struct cpu_image *img, const char *what) {
  struct cpu_image o = *img;
  void *pixels = NULL;
  if (gpu_download(ctx, GPU_OUTPUT, img, &pixels, NULL) != GPU_OK)
    TEST_FAIL("%s: download: %s", what, gpu_ctx_error(ctx));
  o.data = malloc(cpu_image_bytes(img));
  ASSERT(o.data);
  memcpy(o.data, pixels, cpu_image_bytes(img));
  return o;
}

static void upload(const struct cpu_image *img, const char *what) {
  if (gpu_upload(ctx, img, NULL) != GPU_OK) TEST_FAIL("%s: upload: %s", what, gpu_ctx_error(ctx));
}

/* Samples that differ between a and b, and the largest difference (premultiplied: pixel_diff). */
static size_t diff_samples(const struct cpu_image *a, const struct cpu_image *b, int premultiplied,
                           double *maxd) {
  size_t n = cpu_image_bytes(a) / (size_t)(a->depth / 8), d = 0;
  *maxd = 0;
  for (size_t i = 0; i < n; i++) {
    double dd = pixel_diff(a, b, i, premultiplied);
    *maxd = dd > *maxd ? dd : *maxd;
    d += image_sample(a, i) != image_sample(b, i);
  }
  return d;
}

/* gpu_pixelate_resident against cpu_pixelate: the same bytes. */
static void compare_pixelate(const struct cpu_image *img, const char *label, int block,
                             const int (*rect)[4], int n, int feather) {
  struct cpu_image want = *img;
  struct cpu_pixelate p = {block};
  struct gpu_times t = {0, 0, 0, 0};
  want.data = malloc(cpu_image_bytes(img));
  ASSERT(want.data);
  ASSERT_INT(cpu_pixelate(pool, &p, img, rect, n, feather, &want), ==, ERR_OK);
  upload(img, label);
  if (gpu_pixelate_resident(ctx, &p, img, rect, n, feather, &t) != GPU_OK)
    TEST_FAIL("%s pixelate: %s", label, gpu_ctx_error(ctx));
  struct cpu_image got = output(img, label);
  double maxd;
  size_t d = diff_samples(&want, &got, 0, &maxd);
  printf("%-4s pixelate %-16s block %3d regions %2d feather %d  differ %zu samples (max %.0f)  "
         "kernel %.3f ms\n",
         d == 0 ? "ok" : "FAIL", label, block, n, feather, d, maxd, t.kernel);
  failures += d != 0;
  free(want.data), free(got.data);
}

/* gpu_sharpen_resident against the CPU: the same bytes as cpu_unsharp_image over the GPU's own
 * blur (gpu_blur), whatever the method; against the CPU's blur, the same bytes for the fir
 * family and, with threshold 0 (and without luma where there is alpha), within amount times the
 * blur's tolerance (a level, two premultiplied with alpha) plus one of rounding, premultiplied;
 * its accuracy is gpu_blur's. */
static void compare_sharpen(const struct cpu_image *img, const char *label, enum cpu_method m,
                            double sigma, const struct cpu_unsharp *u) {
  struct cpu_blur b = {m, sigma, sigma, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
  size_t bytes = cpu_image_bytes(img);
  struct cpu_image cb = *img, gb = *img, want = *img, same = *img;
  cb.data = malloc(bytes), gb.data = malloc(bytes), want.data = malloc(bytes);
  same.data = malloc(bytes);
  ASSERT(cb.data && gb.data && want.data && same.data);
  struct cpu_accuracy ga, sa;
  struct gpu_times t = {0, 0, 0, 0};
  ASSERT_INT(cpu_blur_image(pool, &b, img, &cb, NULL, NULL), ==, ERR_OK);
  ASSERT_INT(cpu_unsharp_image(pool, u, img, &cb, &want), ==, ERR_OK);
  if (gpu_blur(ctx, &b, img, &gb, &ga, NULL) != GPU_OK)
    TEST_FAIL("%s blur: %s", label, gpu_ctx_error(ctx));
  ASSERT_INT(cpu_unsharp_image(pool, u, img, &gb, &same), ==, ERR_OK);
  upload(img, label);
  if (gpu_sharpen_resident(ctx, &b, u, img, &sa, &t) != GPU_OK)
    TEST_FAIL("%s sharpen: %s", label, gpu_ctx_error(ctx));
  struct cpu_image got = output(img, label);
  double md_same, md_cpu;
  int alpha = img->channels == 2 || img->channels == 4;
  size_t d_same = diff_samples(&same, &got, 0, &md_same);
  size_t d_cpu = diff_samples(&want, &got, !cpu_method_is_fir(m), &md_cpu);
  /* luma with alpha: the blur's colour, unpremultiplied, may be far off where it is nearly
   * transparent, and luma takes it as it is: no bound but the one over the GPU's own blur */
  double allowed = cpu_method_is_fir(m)                     ? 0
                   : u->threshold > 0 || (alpha && u->luma) ? INFINITY
                                                            : ceil(u->amount * (alpha ? 2 : 1)) + 1;
  int acc_same = (isinf(ga.psnr) && isinf(sa.psnr)) || ga.psnr == sa.psnr;
  int ok = d_same == 0 && md_cpu <= allowed && acc_same;
  printf("%-4s sharpen %-16s %-11s sigma %4g amount %g thr %g luma %d  vs cpu_unsharp(gpu blur) "
         "%zu differ; vs CPU %zu differ, max %.3f (allowed %.0f)  psnr %.3f  kernel %.3f ms\n",
         ok ? "ok" : "FAIL", label, cpu_method_name(m), sigma, u->amount, u->threshold, u->luma,
         d_same, d_cpu, md_cpu, allowed, sa.psnr, t.kernel);
  failures += !ok;
  free(cb.data), free(gb.data), free(want.data), free(same.data), free(got.data);
}

/* Relative difference of two statistics, 0 when both are the same (both infinite included). */
static double rel_diff(double a, double b) {
  if (a == b || (isnan(a) && isnan(b))) return 0;
  return fabs(a - b) / (fabs(b) > 1 ? fabs(b) : 1);
}

/* gpu_variance_resident against cpu_variance_image: exact gives the same samples and the same
 * bits in every statistic; the float methods (also bit for bit today, see var_tol) are held to
 * var_tol relative to the CPU's samples and statistics, and their PSNR within 0.01 dB. */
static void compare_varimage(const struct cpu_image *img, const char *label,
                             const struct cpu_var *v, const struct cpu_var_out *o) {
  size_t n = (size_t)img->width * img->height;
  struct cpu_image shape = {NULL, img->width, img->height, 1, 16}, want = shape;
  struct cpu_var_stats cs, gs;
  struct gpu_times t = {0, 0, 0, 0};
  want.data = malloc(n * sizeof(uint16_t));
  ASSERT(want.data);
  ASSERT_INT(cpu_variance_image(pool, v, o, img, want.data, &cs), ==, ERR_OK);
  upload(img, label);
  if (gpu_variance_resident(ctx, v, o, img, &gs, &t) != GPU_OK)
    TEST_FAIL("%s variance: %s", label, gpu_ctx_error(ctx));
  struct cpu_image got = output(&shape, label);
  double tol = var_tol[v->method], worst = 0;
  size_t d = 0;
  for (size_t i = 0; i < n; i++) {
    double a = ((uint16_t *)got.data)[i], b = ((uint16_t *)want.data)[i];
    d += a != b;
    double e = fabs(a - b) <= 1 ? 0 : fabs(a - b) / (b > 1 ? b : 1);
    worst = e > worst ? e : worst;
  }
  cs.reference_ms = gs.reference_ms; /* a time, not a statistic */
  int same_stats = memcmp(&cs, &gs, sizeof(cs)) == 0;
  double ds =
      fmax(fmax(rel_diff(gs.min, cs.min), rel_diff(gs.max, cs.max)), rel_diff(gs.mean, cs.mean));
  int psnr_ok = (isinf(cs.psnr) && isinf(gs.psnr)) || (isnan(cs.psnr) && isnan(gs.psnr)) ||
                fabs(cs.psnr - gs.psnr) < 0.01;
  int ok = v->method == CPU_VAR_EXACT
               ? d == 0 && same_stats
               : worst <= tol && ds <= tol && psnr_ok && gs.scale == cs.scale;
  printf("%-4s varimage %-16s %-9s %-8s r %3d %-8s measure %d  differ %zu samples (rel %.3g)  "
         "stats %s (rel %.3g)  mean %.6f psnr %.3f/%.3f  kernel %.3f ref %.3f ms\n",
         ok ? "ok" : "FAIL", label, cpu_var_method_name(v->method),
         v->window == CPU_WINDOW_BOX ? "box" : "triangle", v->radius,
         o->stddev ? "stddev" : "variance", o->measure, d, worst,
         same_stats ? "same bits" : "differ", ds, gs.mean, gs.psnr, cs.psnr, t.kernel, t.reference);
  failures += !ok;
  free(want.data), free(got.data);
}

/* Regions over a w x h image for the cases below: n of them, some overlapping, within it. */
static int ops_regions(int w, int h, int n, int (*rect)[4]) {
  for (int k = 0; k < n; k++) {
    rect[k][0] = k * 37 % w, rect[k][1] = k * 23 % h;
    rect[k][2] = rect[k][0] + 1 + (w / 3 + k * 7) % (w - rect[k][0]);
    rect[k][3] = rect[k][1] + 1 + (h / 4 + k * 5) % (h - rect[k][1]);
  }
  return n;
}

/* Each operation on one image: blocks of 1, 3, 8 (summed directly), 9 and 16 (by rows), the
 * image's own size, with 0, 3 and 64 regions; sharpen's methods, luma and threshold; every
 * variance method (both windows, variance and stddev, measured and not). */
static void ops_image(const struct cpu_image *img, const char *label, int small) {
  int rect[GPU_REGIONS_MAX][4];
  const int blocks[] = {1, 3, 8, 9, 16, img->width > img->height ? img->width : img->height};
  for (int i = 0; i < 6; i++) compare_pixelate(img, label, blocks[i], NULL, 0, 0);
  for (int f = 0; f <= 6; f += 3) {
    compare_pixelate(img, label, 9, (const int(*)[4])rect,
                     ops_regions(img->width, img->height, 3, rect), f);
    if (!small)
      compare_pixelate(img, label, 4, (const int(*)[4])rect,
                       ops_regions(img->width, img->height, GPU_REGIONS_MAX, rect), f);
  }
  const struct cpu_unsharp us[] = {{1, 0, 0}, {2.5, 0, 1}, {1.5, 3, 0}, {0.8, 4, 1}};
  const enum cpu_method ms[] = {CPU_FIR, CPU_SEPARABLE, CPU_YVV, CPU_DERICHE, CPU_PYRAMID};
  const double sigmas[] = {2, 2, 3, 5, 12};
  for (int m = 0; m < 5; m++)
    for (int k = 0; k < 4; k++)
      if (!small || k == m % 4) compare_sharpen(img, label, ms[m], sigmas[m], &us[k]);
  for (int m = 0; m < CPU_VAR_NMETHODS; m++)
    for (int k = 0; k < (small ? 2 : 8); k++) {
      struct cpu_var v = {(enum cpu_var_method)m, k % 2 ? CPU_WINDOW_BOX : CPU_WINDOW_TRIANGLE, 3};
      struct cpu_var_out o = {(k / 2) % 2, k / 4 || small};
      compare_varimage(img, label, &v, &o);
    }
}

static void test_ops(int small) {
  struct codec_image astro = fixture_photo("astronaut.png"), rgba16 = fixture_photo("rgba16.png");
  struct codec_image ga16 = fixture_photo("gray_alpha16.png"), cam = fixture_photo("camera.png");
  const int sizes[][2] = {{1, 1}, {1, 37}, {37, 1}, {65, 3}, {33, 17}, {203, 157}};
  for (int i = 0; i < (small ? 5 : 6); i++)
    for (int c = 1; c <= 4; c++)
      for (int d = 0; d < 2; d++) {
        if (small && (i + c + d) % 3) continue; /* a third of the cases under the sanitizer */
        const struct codec_image *src = d ? (c == 2 ? &ga16 : &rgba16) : (c == 1 ? &cam : &astro);
        struct cpu_image img = tile(src, sizes[i][0], sizes[i][1], c);
        char label[32];
        snprintf(label, sizeof(label), "%dx%dx%d/%d", sizes[i][0], sizes[i][1], c, d ? 16 : 8);
        ops_image(&img, label, small);
        free(img.data);
      }
  if (!small) {
    struct cpu_image hd = tile(&astro, 1920, 1080, 3);
    ops_image(&hd, "1920x1080x3/8", 1);
    free(hd.data);
  }
  codec_image_free(&astro), codec_image_free(&rgba16), codec_image_free(&ga16);
  codec_image_free(&cam);
}

static int cmp_ms(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of reps kernel times (CUDA events, as each *_resident reports them). */
static double median_ms(double *ms, int reps) {
  qsort(ms, (size_t)reps, sizeof(double), cmp_ms);
  return ms[reps / 2];
}

/* 1080p RGB, 8 bits: the kernel time of each new operation against the blur at sigma 12. */
static void bench_ops(void) {
  struct codec_image astro = fixture_photo("astronaut.png");
  struct cpu_image img = tile(&astro, 1920, 1080, 3);
  enum { REPS = 50, NCASE = 7 };
  const char *names[NCASE] = {"blur sigma 12 (auto)",
                              "sharpen sigma 2 amount 1 (auto)",
                              "sharpen sigma 2 luma threshold 2",
                              "pixelate block 16",
                              "pixelate block 16, 4 regions feather 8",
                              "variance exact r 7 (luma)",
                              "variance naive r 7 measured"};
  double ms[NCASE][REPS];
  int rect[4][4] = {
      {100, 100, 500, 400}, {900, 200, 1300, 700}, {300, 600, 800, 1000}, {1400, 50, 1900, 500}};
  struct cpu_blur b12 = {gpu_auto_method(12, 1920, 1080), 12, 12, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
  struct cpu_blur b2 = {gpu_auto_method(2, 1920, 1080), 2, 2, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
  struct cpu_unsharp u1 = {1, 0, 0}, u2 = {1, 2, 1};
  struct cpu_pixelate p = {16};
  struct cpu_var ve = {CPU_VAR_EXACT, CPU_WINDOW_TRIANGLE, 7},
                 vn = {CPU_VAR_NAIVE, CPU_WINDOW_TRIANGLE, 7};
  struct cpu_var_out o0 = {0, 0}, o1 = {1, 1};
  struct cpu_var_stats s;
  upload(&img, "bench");
  for (int r = -3; r < REPS; r++)
    for (int k = 0; k < NCASE; k++) {
      struct gpu_times t = {0, 0, 0, 0};
      enum gpu_status st =
          k == 0   ? gpu_blur_resident(ctx, &b12, &img, NULL, &t)
          : k == 1 ? gpu_sharpen_resident(ctx, &b2, &u1, &img, NULL, &t)
          : k == 2 ? gpu_sharpen_resident(ctx, &b2, &u2, &img, NULL, &t)
          : k == 3 ? gpu_pixelate_resident(ctx, &p, &img, NULL, 0, 0, &t)
          : k == 4 ? gpu_pixelate_resident(ctx, &p, &img, (const int(*)[4])rect, 4, 8, &t)
          : k == 5 ? gpu_variance_resident(ctx, &ve, &o0, &img, &s, &t)
                   : gpu_variance_resident(ctx, &vn, &o1, &img, &s, &t);
      if (st != GPU_OK) TEST_FAIL("bench %s: %s", names[k], gpu_ctx_error(ctx));
      if (r >= 0) ms[k][r] = t.kernel + t.reference;
    }
  printf("bench: %s, 1920x1080 RGB 8-bit, median of %d, kernel (+ reference) time by CUDA events\n",
         gpu_ctx_name(ctx), REPS);
  double blur = median_ms(ms[0], REPS);
  for (int k = 0; k < NCASE; k++) {
    double m = median_ms(ms[k], REPS);
    printf("bench %-42s %8.3f ms  (%.2fx the blur's)\n", names[k], m, m / blur);
  }
  free(img.data);
  codec_image_free(&astro);
}

/* In a process of its own: a sticky error is reported as fatal, and stays. */
static int fault(void) {
  struct gpu_ctx *g = gpu_ctx_new(0, NULL, 0);
  ASSERT(g);
  /* what the fault writes to stderr, through a temporary file */
  char logged[1024] = "";
  FILE *tmp = tmpfile();
  int saved = dup(2);
  ASSERT(tmp && saved >= 0);
  fflush(stderr);
  dup2(fileno(tmp), 2);
  enum gpu_status st = gpu_inject_fault(g);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  logged[fread(logged, 1, sizeof(logged) - 1, tmp)] = 0;
  fclose(tmp);
  printf("fault: injected, status %d (%s); logged: %s", st, gpu_ctx_error(g), logged);
  ASSERT(strstr(logged, ".cu:") != NULL);                    /* CUDA_TRY's file:line */
  ASSERT(strstr(logged, "cudaErrorIllegalAddress") != NULL); /* and the error */
  ASSERT_INT(st, ==, GPU_FATAL);
  ASSERT_STR(gpu_status_name(st), "FATAL");
  ASSERT(strstr(gpu_status_meaning(st), "sticky") != NULL);
  ASSERT(gpu_status_name((enum gpu_status)(GPU_FATAL + 1)) == NULL);
  struct cpu_image img = {calloc(16, 1), 2, 2, 4, 8}, out = {calloc(16, 1), 2, 2, 4, 8};
  struct cpu_blur b = {CPU_YVV, 2, 2, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
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
  local_only =
      argc > 1 && (strcmp(argv[1], "--local") == 0 || (argc > 2 && strcmp(argv[2], "local") == 0));
  int ops = argc > 1 && (strcmp(argv[1], "--ops") == 0 || strcmp(argv[1], "--bench-ops") == 0 ||
                         (argc > 2 && strcmp(argv[2], "ops") == 0));
  if (ops) { /* --ops, --bench-ops, --sanitize ops: only issue 35's operations */
    char err[256];
    ASSERT(gpu_device_count() > 0);
    if (!(ctx = gpu_ctx_new(0, err, sizeof(err)))) TEST_FAIL("%s", err);
    pool = cpu_pool_new(16);
    printf("device: %s\n", gpu_ctx_name(ctx));
    strcmp(argv[1], "--bench-ops") == 0 ? bench_ops() : test_ops(quick > 1);
    gpu_ctx_free(ctx);
    cpu_pool_free(pool);
    printf("gpu_check: %d failures\n", failures);
    return failures ? 1 : 0;
  }
  int strips = quick > 1 && argc > 2 && strcmp(argv[2], "strips") == 0;
  if (quick > 1 && argc > 2 && (strips || strcmp(argv[2], "regions") == 0)) { /* --sanitize */
    ASSERT(gpu_device_count() > 0 && (ctx = gpu_ctx_new(0, NULL, 0)));
    pool = strips ? cpu_pool_new(16) : NULL;
    strips ? test_strips() : test_regions();
    gpu_ctx_free(ctx);
    cpu_pool_free(pool);
    return failures ? 1 : 0;
  }
  enum cpu_method named = CPU_FIR;
  if (quick > 1 && argc > 2 && !local_only) {
    if (cpu_method_from_name(argv[2], &named) != ERR_OK) TEST_FAIL("unknown method %s", argv[2]);
    only = (int)named;
  }
  ASSERT(gpu_device_count() > 0);
  pool = cpu_pool_new(16);
  char err[256];
  ctx = gpu_ctx_new(0, err, sizeof(err));
  if (!ctx) TEST_FAIL("%s", err);
  printf("device: %s\n", gpu_ctx_name(ctx));
  if (!local_only) {
    test_odd_sizes();
    test_per_axis();
    if (only < 0) test_regions();
    if (only < 0 && quick < 2) test_strips();
    if (only < 0 &&
        quick < 2) { /* the integer reference (8-bit, 1 or 3 channels), then the float */
      test_psnr_reference("integer where it applies", 1);
      struct gpu_ctx *held = ctx;
      setenv("BLURD_PSNR_REFERENCE", "float", 1);
      if (!(ctx = gpu_ctx_new(0, err, sizeof(err)))) TEST_FAIL("%s", err);
      unsetenv("BLURD_PSNR_REFERENCE");
      test_psnr_reference("single precision", 0);
      gpu_ctx_free(ctx);
      ctx = held;
    }
  }
  if (only < 0) test_local();
  if (only < 0 && !local_only) test_ops(quick > 0);
  if (!quick && !local_only) {
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

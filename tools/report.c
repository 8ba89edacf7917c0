/* The accuracy report (`make report`): every method against the exact Gaussian on real
 * photographs, the Young-van Vliet coefficient sets side by side, CPU timings (the data behind
 * the CPU rule for `auto`), and seed 000's Table 2 reproduced. Writes CSV and markdown into the
 * folder given as the only argument (docs/), plus accuracy.dat for the gnuplot plot.
 *
 * Usage: build/report DIR [DATA]    (DATA: the fixtures folder, default tests/data) */
#include "../codecs/codecs.h"
#include "../cpu/cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *data_dir = "tests/data";
static struct cpu_pool *pool;

static const double sigmas[] = {0.5, 1, 2, 3, 5, 12, 40, 100, 300};
enum { NSIGMAS = sizeof(sigmas) / sizeof(sigmas[0]) };
static const char *const photos[] = {"camera.png", "astronaut.png", "coffee.png"};
enum { NPHOTOS = 3 };

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct codec_image load(const char *name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", data_dir, name);
  struct codec_image img;
  if (codec_decode_file(path, &img) != CODEC_OK) {
    fprintf(stderr, "%s: cannot decode %s\n", "report", path);
    exit(1);
  }
  return img;
}

static struct cpu_image view(const struct codec_image *c) {
  return (struct cpu_image){c->pixels, c->width, c->height, c->channels, c->depth};
}

static struct cpu_image blank_like(const struct cpu_image *src) {
  struct cpu_image out = *src;
  out.data = malloc(cpu_image_bytes(src));
  if (!out.data) exit(1);
  return out;
}

static FILE *open_out(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "report: cannot write %s\n", path);
    exit(1);
  }
  return f;
}

static void run(const struct cpu_blur *b, const struct cpu_image *src, struct cpu_image *dst,
                struct cpu_accuracy *acc) {
  enum err e = cpu_blur_image(pool, b, src, dst, acc, NULL);
  if (e != ERR_OK) {
    fprintf(stderr, "report: %s: %s\n", err_code(e), err_message(e));
    exit(1);
  }
}

/* Every method x sigma x photograph: PSNR and largest error against the exact Gaussian. */
static void accuracy(const char *dir) {
  FILE *csv = open_out(dir, "accuracy.csv"), *md = open_out(dir, "accuracy.md");
  FILE *dat = open_out(dir, "accuracy.dat");
  double worst[CPU_NMETHODS][NSIGMAS];
  fprintf(csv, "photo,method,sigma,psnr_db,max_abs_levels\n");
  fprintf(md, "# Accuracy against the exact Gaussian\n\nPSNR in dB / largest absolute error in "
              "8-bit levels, every method at its defaults (yvv and yvv2way: calibrated "
              "coefficients). Made by `make report` (tools/report.c).\n\n");
  for (int m = 0; m < CPU_NMETHODS; m++)
    for (int s = 0; s < NSIGMAS; s++) worst[m][s] = INFINITY;
  for (int p = 0; p < NPHOTOS; p++) {
    struct codec_image img = load(photos[p]);
    struct cpu_image src = view(&img), dst = blank_like(&src);
    fprintf(md, "## %s (%dx%d, %d channel%s)\n\n| method |", photos[p], src.width, src.height,
            src.channels, src.channels > 1 ? "s" : "");
    for (int s = 0; s < NSIGMAS; s++) fprintf(md, " sigma %g |", sigmas[s]);
    fprintf(md, "\n|---|");
    for (int s = 0; s < NSIGMAS; s++) fprintf(md, "---|");
    fprintf(md, "\n");
    for (int m = 0; m < CPU_NMETHODS; m++) {
      fprintf(md, "| %s |", cpu_method_name(m));
      for (int s = 0; s < NSIGMAS; s++) {
        struct cpu_blur b = {m, sigmas[s], sigmas[s], CPU_TRUNCATE, CPU_YVV_CALIBRATED};
        struct cpu_accuracy acc;
        run(&b, &src, &dst, &acc);
        fprintf(csv, "%s,%s,%g,%.3f,%.3f\n", photos[p], cpu_method_name(m), sigmas[s], acc.psnr,
                acc.max_abs);
        fprintf(md, " %.2f / %.2f |", acc.psnr, acc.max_abs);
        worst[m][s] = acc.psnr < worst[m][s] ? acc.psnr : worst[m][s];
      }
      fprintf(md, "\n");
      fflush(md);
    }
    fprintf(md, "\n");
    free(dst.data);
    codec_image_free(&img);
  }
  fprintf(md, "## Lowest PSNR over the three photographs\n\n| method |");
  for (int s = 0; s < NSIGMAS; s++) fprintf(md, " sigma %g |", sigmas[s]);
  fprintf(md, "\n|---|");
  for (int s = 0; s < NSIGMAS; s++) fprintf(md, "---|");
  fprintf(dat, "sigma");
  for (int m = 0; m < CPU_NMETHODS; m++) fprintf(dat, " %s", cpu_method_name(m));
  fprintf(dat, "\n");
  for (int m = 0; m < CPU_NMETHODS; m++) {
    fprintf(md, "\n| %s |", cpu_method_name(m));
    for (int s = 0; s < NSIGMAS; s++) fprintf(md, " %.2f |", worst[m][s]);
  }
  for (int s = 0; s < NSIGMAS; s++) {
    fprintf(dat, "%g", sigmas[s]);
    for (int m = 0; m < CPU_NMETHODS; m++) fprintf(dat, " %.3f", worst[m][s]);
    fprintf(dat, "\n");
  }
  fprintf(md, "\n");
  fclose(csv);
  fclose(md);
  fclose(dat);
}

/* The Young-van Vliet coefficient sets, the data behind the choice of the calibrated one. */
static void coefficients(const char *dir) {
  static const char *const names[] = {
#define X(e, name) name,
      CPU_YVV_SETS(X)
#undef X
  };
  enum { NSETS = sizeof(names) / sizeof(names[0]) };
  FILE *csv = open_out(dir, "yvv_coeffs.csv"), *md = open_out(dir, "yvv_coeffs.md");
  fprintf(csv, "photo,coeffs,sigma,psnr_db,max_abs_levels\n");
  fprintf(md, "# Young-van Vliet coefficient sets\n\nPSNR in dB / largest error in levels of "
              "`method=yvv` with each `coeffs` set, against the exact Gaussian.\n\n");
  for (int p = 0; p < NPHOTOS; p++) {
    struct codec_image img = load(photos[p]);
    struct cpu_image src = view(&img), dst = blank_like(&src);
    fprintf(md, "## %s\n\n| sigma |", photos[p]);
    for (int c = 0; c < NSETS; c++) fprintf(md, " %s |", names[c]);
    fprintf(md, "\n|---|");
    for (int c = 0; c < NSETS; c++) fprintf(md, "---|");
    fprintf(md, "\n");
    for (int s = 0; s < NSIGMAS; s++) {
      fprintf(md, "| %g |", sigmas[s]);
      for (int c = 0; c < NSETS; c++) {
        struct cpu_blur b = {CPU_YVV, sigmas[s], sigmas[s], CPU_TRUNCATE, c};
        struct cpu_accuracy acc;
        run(&b, &src, &dst, &acc);
        fprintf(csv, "%s,%s,%g,%.3f,%.3f\n", photos[p], names[c], sigmas[s], acc.psnr, acc.max_abs);
        fprintf(md, " %.2f / %.1f |", acc.psnr, acc.max_abs);
      }
      fprintf(md, "\n");
    }
    fprintf(md, "\n");
    free(dst.data);
    codec_image_free(&img);
  }
  fclose(csv);
  fclose(md);
}

/* Median of three runs of the filter alone (no reference) on a 1080p RGB photograph. */
static void timing(const char *dir) {
  FILE *csv = open_out(dir, "cpu_timing.csv"), *md = open_out(dir, "cpu_timing.md");
  struct codec_image img = load("photo_1080p.jpg");
  struct cpu_image src = view(&img), dst = blank_like(&src);
  fprintf(csv, "method,sigma,ms\n");
  fprintf(md, "# CPU filter time\n\nMilliseconds for the filter alone (median of 3) on "
              "photo_1080p.jpg (1920x1080 RGB) with the CPU backend's pool on this machine.\n\n"
              "| method |");
  for (int s = 0; s < NSIGMAS; s++) fprintf(md, " sigma %g |", sigmas[s]);
  fprintf(md, "\n|---|");
  for (int s = 0; s < NSIGMAS; s++) fprintf(md, "---|");
  fprintf(md, "\n");
  for (int m = 0; m < CPU_NMETHODS; m++) {
    if (m == CPU_FIR_SHARED || m == CPU_FIR_MWPT) continue; /* the same code as fir */
    fprintf(md, "| %s |", cpu_method_name(m));
    for (int s = 0; s < NSIGMAS; s++) {
      struct cpu_blur b = {m, sigmas[s], sigmas[s], CPU_TRUNCATE, CPU_YVV_CALIBRATED};
      double t[3];
      for (int k = 0; k < 3; k++) {
        double t0 = now_ms();
        run(&b, &src, &dst, NULL);
        t[k] = now_ms() - t0;
      }
      double lo = fmin(t[0], fmin(t[1], t[2])), hi = fmax(t[0], fmax(t[1], t[2]));
      double med = t[0] + t[1] + t[2] - lo - hi;
      fprintf(csv, "%s,%g,%.1f\n", cpu_method_name(m), sigmas[s], med);
      fprintf(md, " %.1f |", med);
      fflush(md);
    }
    fprintf(md, "\n");
  }
  fclose(csv);
  fclose(md);
  free(dst.data);
  codec_image_free(&img);
}

/* PSNR between two 8-bit images of the same shape (the paper compares images with images). */
static double psnr_between(const struct cpu_image *a, const struct cpu_image *b) {
  size_t n = cpu_image_bytes(a);
  double sse = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)((uint8_t *)a->data)[i] - ((uint8_t *)b->data)[i];
    sse += d * d;
  }
  return sse > 0 ? 10 * log10(255.0 * 255.0 * (double)n / sse) : INFINITY;
}

/* Seed 000's Table 2: one-way (yvv) vs two-way (yvv2way), both with the seed's 1995
 * coefficients, and the paper's FIR, whose window is N = 2 sigma taps; then each against the
 * exact Gaussian. */
static void table2(const char *dir) {
  static const char *const files[] = {"camera.png", "gray_720p.jpg", "gray_1080p.jpg"};
  static const char *const sizes[] = {"SD", "HD", "Full HD"};
  static const int windows[] = {3, 30, 90};
  static const double paper[3][3][3] = {
      {{29.4, 26.2, 29.7}, {31.1, 32.8, 31.4}, {29.5, 33.4, 29.4}},
      {{33.0, 30.9, 33.6}, {30.6, 39.7, 30.8}, {24.7, 33.0, 26.3}},
      {{30.5, 26.6, 29.2}, {32.9, 36.7, 33.2}, {30.1, 34.8, 31.4}}};
  FILE *csv = open_out(dir, "table2.csv"), *md = open_out(dir, "table2.md");
  fprintf(csv, "image,width,height,window,sigma,oneway_vs_twoway,fir_vs_oneway,fir_vs_twoway,"
               "exact_vs_oneway,exact_vs_twoway,exact_vs_fir,paper_oneway_vs_twoway,"
               "paper_fir_vs_oneway,paper_fir_vs_twoway\n");
  fprintf(md, "# Seed 000, Table 2, reproduced\n\nPSNR in dB between 8-bit outputs. One-way: "
              "`yvv`; two-way: `yvv2way`; both with `coeffs=1995` as in the paper. FIR: the "
              "paper's basic Gaussian filter, window N = 2 sigma taps. Exact: the sampled "
              "Gaussian cut at ceil(4 sigma), unrounded. Paper values in brackets.\n\n"
              "| image | N | 1-way vs 2-way | FIR vs 1-way | FIR vs 2-way | exact vs 1-way | "
              "exact vs 2-way | exact vs FIR |\n|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < 3; i++) {
    struct codec_image img = load(files[i]);
    struct cpu_image src = view(&img), one = blank_like(&src), two = blank_like(&src);
    struct cpu_image fir = blank_like(&src);
    for (int k = 0; k < 3; k++) {
      double sigma = windows[k] / 2.0;
      /* truncate chosen so that ceil(truncate * sigma) is the paper's radius N/2 */
      double t = (cpu_paper_radius(sigma) - 0.25) / sigma;
      struct cpu_blur b1 = {CPU_YVV, sigma, sigma, CPU_TRUNCATE, CPU_YVV_1995};
      struct cpu_blur b2 = {CPU_YVV2WAY, sigma, sigma, CPU_TRUNCATE, CPU_YVV_1995};
      struct cpu_blur bf = {CPU_SEPARABLE, sigma, sigma, t, 0};
      struct cpu_accuracy a1, a2, af;
      run(&b1, &src, &one, &a1);
      run(&b2, &src, &two, &a2);
      run(&bf, &src, &fir, &af);
      double ow = psnr_between(&one, &two), fo = psnr_between(&fir, &one);
      double ft = psnr_between(&fir, &two);
      const double *pp = paper[i][k];
      fprintf(csv, "%s,%d,%d,%d,%g,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%.1f\n", sizes[i],
              src.width, src.height, windows[k], sigma, ow, fo, ft, a1.psnr, a2.psnr, af.psnr,
              pp[0], pp[1], pp[2]);
      fprintf(md,
              "| %s %dx%d | %d | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) | %.1f | %.1f | %.1f |\n",
              sizes[i], src.width, src.height, windows[k], ow, pp[0], fo, pp[1], ft, pp[2], a1.psnr,
              a2.psnr, af.psnr);
    }
    free(one.data);
    free(two.data);
    free(fir.data);
    codec_image_free(&img);
  }
  fclose(csv);
  fclose(md);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: report DIR [DATA]\n");
    return 2;
  }
  if (argc > 2) data_dir = argv[2];
  pool = cpu_pool_new(4);
  const char *only = getenv("REPORT_ONLY"); /* e.g. REPORT_ONLY=table2 */
  if (!only || strstr(only, "accuracy")) accuracy(argv[1]);
  if (!only || strstr(only, "coeffs")) coefficients(argv[1]);
  if (!only || strstr(only, "table2")) table2(argv[1]);
  if (!only || strstr(only, "timing")) timing(argv[1]);
  cpu_pool_free(pool);
  return 0;
}

/* The GPU benchmark (`make bench`; bench/run.sh runs it on the GPU machine beside the peers):
 * kernel time of every method x sigma x size on RGBA8 images made from a photograph, measured
 * with CUDA events on data already on the device (median of the repetitions after two warm-up
 * runs), as CSV on stdout: size,method,sigma,ms,gpix_s. The fir family's direct 2-D kernels
 * cost (2r+1)^2 per pixel, so cases past a work budget are reported as skipped. It also times
 * the CPU twin of yvv (all cores) on 1920x1080, for the GPU/CPU ratio that seed 002 claims.
 *
 * Usage: bench [sizes (1920x1080,3840x2160,8192x8192)] [sigmas (0.5,1,2,3,12,40,100)]
 *              [reps (10)] [methods (all)]
 *
 * `bench variance` times the local-variance methods instead (seed 004): every method side by
 * side on gray 8-bit images tiled from the photograph, triangle window, median kernel time of
 * the repetitions (CUDA events, variance only, no mean), as CSV on stdout:
 * size,method,radius,ms,gpix_s,reps. The O(r^2) methods are skipped where one run would pass
 * VAR_CASE_MS (the time is estimated from the method's previous case) and run once (after one
 * warm-up) where it would pass VAR_ONCE_MS. The speed-ups the seed claims, and exact's
 * against naive and threewise, follow on stderr.
 *
 * Usage: bench variance [sizes (1920x1080,8192x8192)] [radii (7,15,31,63,127)] [reps (10)]
 *
 * `bench regions` times issue 20's region blur on the GPU: four 256x256 regions
 * (bench/regions.sh's) of a 3840x2160 RGB image tiled from the photograph, sigma 30, `auto`, no
 * PSNR, against the whole image; each call alone as the server's kernel stage times it, and queued
 * (back to back: the GPU time each takes), as CSV on stdout: timing,regions_ms,whole_ms,ratio.
 *
 * Usage: bench regions [reps (31)] */
#include "../codecs/codecs.h"
#include "../cpu/cpu.h"
#include "../gpu/gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIR_BUDGET  2e12   /* taps x pixels beyond which a fir-family case is skipped */
#define VAR_CASE_MS 9000.0 /* an O(r^2) variance case whose one run would take longer: skipped */
#define VAR_ONCE_MS 200.0  /* one that would take longer than this runs once */
#define VAR_MAX_R   8

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A w x h image of c channels (3: RGB, 4: RGBA, alpha a diagonal ramp) tiled (mirrored) from
 * the photograph. */
static struct cpu_image tiled(const struct codec_image *p, int w, int h, int c) {
  struct cpu_image img = {malloc((size_t)w * h * c), w, h, c, 8};
  if (!img.data) exit(1);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int px = (x / p->width) % 2 ? p->width - 1 - x % p->width : x % p->width;
      int py = (y / p->height) % 2 ? p->height - 1 - y % p->height : y % p->height;
      uint8_t *o = (uint8_t *)img.data + ((size_t)y * w + x) * c;
      const uint8_t *i = p->pixels + ((size_t)py * p->width + px) * p->channels;
      for (int k = 0; k < 3; k++) o[k] = i[p->channels >= 3 ? k : 0];
      if (c == 4) o[3] = (uint8_t)(128 + 127 * (x + y) / (w + h));
    }
  return img;
}

static struct codec_image load(const char *path) {
  struct codec_image img;
  if (codec_decode_file(path, &img) != CODEC_OK) {
    fprintf(stderr, "%s: cannot decode %s\n", "bench", path);
    exit(1);
  }
  return img;
}

static int parse_list(const char *s, double *out, int max) {
  int n = 0;
  for (char *end; *s && n < max; s = *end ? end + 1 : end) out[n++] = strtod(s, &end);
  return n;
}

/* A w x h gray 8-bit image tiled (mirrored) from the photograph's first channel. */
static struct cpu_image gray(const struct codec_image *p, int w, int h) {
  struct cpu_image img = {malloc((size_t)w * h), w, h, 1, 8};
  if (!img.data) exit(1);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int px = (x / p->width) % 2 ? p->width - 1 - x % p->width : x % p->width;
      int py = (y / p->height) % 2 ? p->height - 1 - y % p->height : y % p->height;
      ((uint8_t *)img.data)[(size_t)y * w + x] =
          p->pixels[((size_t)py * p->width + px) * p->channels];
    }
  return img;
}

/* Taps a pixel of an O(r^2) method reads (naive reads the window twice), or 0 for the others. */
static double direct_taps(int m, int r) {
  double t = (2.0 * r + 1) * (2.0 * r + 1);
  return m == CPU_VAR_NAIVE ? 2 * t : m == CPU_VAR_KOENIG || m == CPU_VAR_WELFORD ? t : 0;
}

/* Prints how many times faster method a is than method b at each radius (from ms[method][k]). */
static void var_ratio(const char *size, const char *what, double ms[][VAR_MAX_R], int a, int b,
                      const double *radii, int nr) {
  fprintf(stderr, "%s %-20s", size, what);
  for (int k = 0; k < nr; k++)
    if (ms[a][k] > 0 && ms[b][k] > 0)
      fprintf(stderr, "  r%g %.3gx", radii[k], ms[b][k] / ms[a][k]);
    else
      fprintf(stderr, "  r%g -", radii[k]);
  fprintf(stderr, "\n");
}

/* One size: every method at every radius, then the ratios. rate[m] carries the taps per ms each
 * O(r^2) method reached last, to estimate the next case. */
static int var_size(struct gpu_ctx *ctx, const struct cpu_image *img, const double *radii, int nr,
                    int reps, double *rate) {
  char size[32];
  double ms[CPU_VAR_NMETHODS][VAR_MAX_R] = {{0}};
  double px = (double)img->width * img->height;
  snprintf(size, sizeof(size), "%dx%d", img->width, img->height);
  for (int k = 0; k < nr; k++)
    for (int m = 0; m < CPU_VAR_NMETHODS; m++) {
      struct cpu_var v = {m, CPU_WINDOW_TRIANGLE, (int)radii[k]};
      if (!cpu_var_radius_ok(m, v.radius)) continue;
      double work = direct_taps(m, v.radius) * px, est = rate[m] > 0 ? work / rate[m] : 0;
      if (est > VAR_CASE_MS) {
        printf("%s,%s,%d,skipped,skipped,0\n", size, cpu_var_method_name(m), v.radius);
        fprintf(stderr, "bench: %s %s r %d skipped: one run would take about %.0f ms\n", size,
                cpu_var_method_name(m), v.radius, est);
        continue;
      }
      int n = est > VAR_ONCE_MS ? 1 : reps;
      if (gpu_variance_bench(ctx, &v, img, n, &ms[m][k]) != GPU_OK) {
        fprintf(stderr, "bench: %s r %d: %s\n", cpu_var_method_name(m), v.radius,
                gpu_ctx_error(ctx));
        return 1;
      }
      if (work > 0) rate[m] = work / ms[m][k];
      printf("%s,%s,%d,%.4f,%.3f,%d\n", size, cpu_var_method_name(m), v.radius, ms[m][k],
             px / (ms[m][k] * 1e6), n);
      fflush(stdout);
    }
  var_ratio(size, "threewise/naive", ms, CPU_VAR_THREEWISE, CPU_VAR_NAIVE, radii, nr);
  var_ratio(size, "threewise/pairwise", ms, CPU_VAR_THREEWISE, CPU_VAR_PAIRWISE, radii, nr);
  var_ratio(size, "exact/naive", ms, CPU_VAR_EXACT, CPU_VAR_NAIVE, radii, nr);
  var_ratio(size, "exact/threewise", ms, CPU_VAR_EXACT, CPU_VAR_THREEWISE, radii, nr);
  var_ratio(size, "exact/pairwise", ms, CPU_VAR_EXACT, CPU_VAR_PAIRWISE, radii, nr);
  return 0;
}

static int var_main(int argc, char **argv, const struct codec_image *photo, struct gpu_ctx *ctx) {
  const char *sizes = argc > 2 ? argv[2] : "1920x1080,8192x8192";
  double radii[VAR_MAX_R], rate[CPU_VAR_NMETHODS] = {0};
  int nr = parse_list(argc > 3 ? argv[3] : "7,15,31,63,127", radii, VAR_MAX_R);
  int reps = argc > 4 ? atoi(argv[4]) : 10;
  fprintf(stderr, "bench: speed-ups are (time of the second) / (time of the first)\n");
  printf("size,method,radius,ms,gpix_s,reps\n");
  for (const char *s = sizes; *s;) {
    int w, h, used = 0;
    if (sscanf(s, "%dx%d%n", &w, &h, &used) != 2) break;
    s += used + (s[used] == ',');
    struct cpu_image img = gray(photo, w, h);
    int rc = var_size(ctx, &img, radii, nr, reps, rate);
    free(img.data);
    if (rc) return rc;
  }
  gpu_ctx_free(ctx);
  return 0;
}

static int regions_main(int argc, char **argv, const struct codec_image *photo,
                        struct gpu_ctx *ctx) {
  const int at[4][2] = {{400, 300}, {1600, 900}, {2800, 400}, {3300, 1700}};
  struct cpu_image img = tiled(photo, 3840, 2160, 3);
  struct cpu_blur b = {gpu_auto_method(30, img.width, img.height), 30, 30, CPU_TRUNCATE,
                       CPU_YVV_CALIBRATED};
  struct gpu_region r[4];
  int reach = cpu_blur_reach(&b, 30), reps = argc > 2 ? atoi(argv[2]) : 31;
  for (int i = 0; i < 4; i++) {
    int rect[4] = {at[i][0], at[i][1], at[i][0] + 256, at[i][1] + 256};
    memcpy(r[i].rect, rect, sizeof(rect));
    cpu_region_box(img.width, img.height, reach, reach, rect, r[i].box);
  }
  double ms[4];
  if (reps < 1 || gpu_bench_regions(ctx, &b, &img, r, 4, 0, reps, ms) != GPU_OK) {
    fprintf(stderr, "bench: regions: %s\n", reps < 1 ? "reps < 1" : gpu_ctx_error(ctx));
    return 1;
  }
  fprintf(stderr, "bench: 3840x2160 RGB, %s sigma 30, four 256x256 regions, median of %d\n",
          cpu_method_name(b.method), reps);
  printf("timing,regions_ms,whole_ms,ratio\n");
  printf("each call,%.4f,%.4f,%.3f\n", ms[0], ms[1], ms[0] / ms[1]);
  if (ms[2] >= 0) printf("queued,%.4f,%.4f,%.3f\n", ms[2], ms[3], ms[2] / ms[3]);
  free(img.data);
  gpu_ctx_free(ctx);
  return 0;
}

int main(int argc, char **argv) {
  int var_mode = argc > 1 && strcmp(argv[1], "variance") == 0, var_argc = argc;
  int regions_mode = argc > 1 && strcmp(argv[1], "regions") == 0;
  if (var_mode || regions_mode) argc = 1; /* the blur benchmark's arguments do not apply */
  const char *sizes = argc > 1 ? argv[1] : "1920x1080,3840x2160,8192x8192";
  double sigmas[16];
  int ns = parse_list(argc > 2 ? argv[2] : "0.5,1,2,3,12,40,100", sigmas, 16);
  int reps = argc > 3 ? atoi(argv[3]) : 10;
  const char *only = argc > 4 ? argv[4] : NULL; /* a comma-separated list of methods */
  const char *data = getenv("BLURD_DATA") ? getenv("BLURD_DATA") : "tests/data";
  char path[1024], err[256];
  snprintf(path, sizeof(path), "%s/photo_1080p.jpg", data);
  struct codec_image photo = load(path);
  struct gpu_ctx *ctx = gpu_ctx_new(0, err, sizeof(err));
  if (!ctx) {
    fprintf(stderr, "bench: %s\n", err);
    return 1;
  }
  fprintf(stderr, "bench: %s\n", gpu_ctx_name(ctx));
  if (var_mode) return var_main(var_argc, argv, &photo, ctx);
  if (regions_mode) return regions_main(var_argc, argv, &photo, ctx);
  printf("size,method,sigma,ms,gpix_s\n");
  for (const char *s = sizes; *s;) {
    int w, h, used = 0;
    if (sscanf(s, "%dx%d%n", &w, &h, &used) != 2) break;
    s += used + (s[used] == ',');
    struct cpu_image img = tiled(&photo, w, h, 4);
    for (int m = 0; m < CPU_NMETHODS; m++)
      for (int k = 0; k < ns; k++) {
        if (only && !strstr(only, cpu_method_name(m))) continue;
        struct cpu_blur b = {m, sigmas[k], sigmas[k], CPU_TRUNCATE, CPU_YVV_CALIBRATED};
        double taps = 2.0 * cpu_gauss_radius(sigmas[k], CPU_TRUNCATE) + 1, ms = -1;
        if (cpu_method_is_fir(m) && taps * taps * w * h > FIR_BUDGET) {
          printf("%dx%d,%s,%g,skipped,skipped\n", w, h, cpu_method_name(m), sigmas[k]);
          continue;
        }
        int r = cpu_method_is_fir(m) && taps * taps * w * h > FIR_BUDGET / 20 ? 3 : reps;
        if (gpu_bench(ctx, &b, &img, r, &ms) != GPU_OK) {
          fprintf(stderr, "bench: %s sigma %g: %s\n", cpu_method_name(m), sigmas[k],
                  gpu_ctx_error(ctx));
          return 1;
        }
        printf("%dx%d,%s,%g,%.4f,%.2f\n", w, h, cpu_method_name(m), sigmas[k], ms,
               (double)w * h / (ms * 1e6));
        fflush(stdout);
      }
    free(img.data);
  }
  if (only) return 0;
  /* the CPU twin of yvv on 1920x1080 RGBA8, every core, median of 5 */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  struct cpu_pool *pool = cpu_pool_new(cores > 0 ? (int)cores : 1);
  struct cpu_image img = tiled(&photo, 1920, 1080, 4), out = img;
  out.data = malloc(cpu_image_bytes(&img));
  double t[5];
  for (int i = 0; i < 5; i++) {
    struct cpu_blur b = {CPU_YVV, 12, 12, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
    double t0 = now_ms();
    if (cpu_blur_image(pool, &b, &img, &out, NULL, NULL) != ERR_OK) exit(1);
    t[i] = now_ms() - t0;
  }
  for (int i = 0; i < 5; i++) /* sort five values */
    for (int j = i + 1; j < 5; j++)
      if (t[j] < t[i]) {
        double x = t[i];
        t[i] = t[j], t[j] = x;
      }
  printf("1920x1080,cpu_yvv_%ldthreads,12,%.4f,%.2f\n", cores, t[2], 1920.0 * 1080 / (t[2] * 1e6));
  cpu_pool_free(pool);
  free(out.data);
  free(img.data);
  codec_image_free(&photo);
  gpu_ctx_free(ctx);
  return 0;
}

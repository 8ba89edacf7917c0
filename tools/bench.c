/* The GPU benchmark (`make bench`; bench/run.sh runs it on the GPU machine beside the peers):
 * kernel time of every method x sigma x size on RGBA8 images made from a photograph, measured
 * with CUDA events on data already on the device (median of the repetitions after two warm-up
 * runs), as CSV on stdout: size,method,sigma,ms,gpix_s. The fir family's direct 2-D kernels
 * cost (2r+1)^2 per pixel, so cases past a work budget are reported as skipped. It also times
 * the CPU twin of yvv (all cores) on 1920x1080, for the GPU/CPU ratio that seed 002 claims.
 *
 * Usage: bench [sizes (1920x1080,3840x2160,8192x8192)] [sigmas (0.5,1,2,3,12,40,100)]
 *              [reps (10)] [methods (all)] */
#include "../codecs/codecs.h"
#include "../cpu/cpu.h"
#include "../gpu/gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIR_BUDGET 2e12 /* taps x pixels beyond which a fir-family case is skipped */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A w x h RGBA8 image tiled (mirrored) from the photograph, alpha a diagonal ramp. */
static struct cpu_image rgba(const struct codec_image *p, int w, int h) {
  struct cpu_image img = {malloc((size_t)w * h * 4), w, h, 4, 8};
  if (!img.data) exit(1);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int px = (x / p->width) % 2 ? p->width - 1 - x % p->width : x % p->width;
      int py = (y / p->height) % 2 ? p->height - 1 - y % p->height : y % p->height;
      uint8_t *o = (uint8_t *)img.data + ((size_t)y * w + x) * 4;
      const uint8_t *i = p->pixels + ((size_t)py * p->width + px) * p->channels;
      for (int c = 0; c < 3; c++) o[c] = i[p->channels >= 3 ? c : 0];
      o[3] = (uint8_t)(128 + 127 * (x + y) / (w + h));
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

int main(int argc, char **argv) {
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
  printf("size,method,sigma,ms,gpix_s\n");
  for (const char *s = sizes; *s;) {
    int w, h, used = 0;
    if (sscanf(s, "%dx%d%n", &w, &h, &used) != 2) break;
    s += used + (s[used] == ',');
    struct cpu_image img = rgba(&photo, w, h);
    for (int m = 0; m < CPU_NMETHODS; m++)
      for (int k = 0; k < ns; k++) {
        if (only && !strstr(only, cpu_method_name(m))) continue;
        struct cpu_blur b = {m, sigmas[k], CPU_TRUNCATE, CPU_YVV_CALIBRATED};
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
  struct cpu_image img = rgba(&photo, 1920, 1080), out = img;
  out.data = malloc(cpu_image_bytes(&img));
  double t[5];
  for (int i = 0; i < 5; i++) {
    struct cpu_blur b = {CPU_YVV, 12, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
    double t0 = now_ms();
    cpu_blur_image(pool, &b, &img, &out, NULL, NULL);
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

/* Unit tests of the CPU twins of /pixelate and /variance's whole compute, and of the region PSNR
 * merge: every figure here is worked out by hand (block means, premultiplied colour, the feather's
 * smoothstep, a variance map over three pixels), so the twins that the GPU tests take as oracles
 * are themselves checked against arithmetic rather than against another implementation. */
#include "test.h"

#include "../cpu/cpu.h"

#include <stdint.h>
#include <time.h>

static struct cpu_pool *pool;

static struct cpu_image new_image(int w, int h, int c, int depth) {
  struct cpu_image img = {NULL, w, h, c, depth};
  img.data = calloc(cpu_image_bytes(&img), 1);
  ASSERT(img.data);
  return img;
}

static unsigned get(const struct cpu_image *img, int x, int y, int k) {
  size_t i = ((size_t)y * img->width + x) * img->channels + k;
  return img->depth == 16 ? ((uint16_t *)img->data)[i] : ((uint8_t *)img->data)[i];
}

static void set(struct cpu_image *img, int x, int y, int k, unsigned v) {
  size_t i = ((size_t)y * img->width + x) * img->channels + k;
  if (img->depth == 16)
    ((uint16_t *)img->data)[i] = (uint16_t)v;
  else
    ((uint8_t *)img->data)[i] = (uint8_t)v;
}

static struct cpu_image pixelate(const struct cpu_image *src, int block, const int (*rect)[4],
                                 int n, int feather) {
  struct cpu_image dst = new_image(src->width, src->height, src->channels, src->depth);
  struct cpu_pixelate p = {block};
  ASSERT_INT(cpu_pixelate(pool, &p, src, rect, n, feather, &dst), ==, ERR_OK);
  return dst;
}

/* Every sample of an alpha-less image is its block's mean rounded half up (computed here in
 * double over the block), blocks cut short at the right and bottom edges; a 1xN image too. */
static void test_pixelate_means(void) {
  const int shapes[][4] = {{7, 5, 3, 2}, {5, 3, 1, 2}, {1, 7, 1, 3}, {9, 1, 3, 4}, {4, 4, 1, 8}};
  for (int s = 0; s < 5; s++) {
    int w = shapes[s][0], h = shapes[s][1], c = shapes[s][2], b = shapes[s][3];
    for (int depth = 8; depth <= 16; depth += 8) {
      struct cpu_image src = new_image(w, h, c, depth);
      for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
          for (int k = 0; k < c; k++)
            set(&src, x, y, k,
                (unsigned)((x * 37 + y * 91 + k * 53) * (depth == 8 ? 1 : 257)) %
                    (depth == 8 ? 256 : 65536));
      struct cpu_image dst = pixelate(&src, b, NULL, 0, 0);
      for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
          for (int k = 0; k < c; k++) {
            int x0 = x / b * b, y0 = y / b * b, x1 = x0 + b < w ? x0 + b : w,
                y1 = y0 + b < h ? y0 + b : h;
            double sum = 0;
            for (int yy = y0; yy < y1; yy++)
              for (int xx = x0; xx < x1; xx++) sum += get(&src, xx, yy, k);
            ASSERT_INT(get(&dst, x, y, k), ==, floor(sum / ((x1 - x0) * (y1 - y0)) + 0.5));
          }
      free(src.data), free(dst.data);
    }
  }
}

/* Half up, below half down; a block of 1 is the image itself. */
static void test_pixelate_rounding(void) {
  const unsigned v[3][4] = {{1, 1, 2, 2}, {1, 1, 1, 2}, {1, 2, 2, 2}}, want[3] = {2, 1, 2};
  for (int i = 0; i < 3; i++) {
    struct cpu_image src = new_image(2, 2, 1, 8);
    for (int k = 0; k < 4; k++) set(&src, k % 2, k / 2, 0, v[i][k]);
    struct cpu_image dst = pixelate(&src, 2, NULL, 0, 0), one = pixelate(&src, 1, NULL, 0, 0);
    for (int k = 0; k < 4; k++) {
      ASSERT_INT(get(&dst, k % 2, k / 2, 0), ==, want[i]);
      ASSERT_INT(get(&one, k % 2, k / 2, 0), ==, v[i][k]);
    }
    free(src.data), free(dst.data), free(one.data);
  }
}

/* Colour averaged premultiplied by alpha: a transparent pixel's colour does not count. */
static void test_pixelate_alpha(void) {
  struct cpu_image src = new_image(6, 1, 4, 8);
  const unsigned px[6][4] = {{200, 0, 0, 255}, {0, 0, 200, 0},    /* block 1 */
                             {100, 0, 0, 255}, {200, 0, 0, 85},   /* block 2 */
                             {50, 60, 70, 0},  {80, 90, 100, 0}}; /* block 3: transparent */
  for (int x = 0; x < 6; x++)
    for (int k = 0; k < 4; k++) set(&src, x, 0, k, px[x][k]);
  struct cpu_image dst = pixelate(&src, 2, NULL, 0, 0);
  /* (200 255) / 255 = 200, alpha 127.5 -> 128; (100 255 + 200 85) / 340 = 125, alpha 170 */
  const unsigned want[3][4] = {{200, 0, 0, 128}, {125, 0, 0, 170}, {0, 0, 0, 0}};
  for (int x = 0; x < 6; x++)
    for (int k = 0; k < 4; k++) ASSERT_INT(get(&dst, x, 0, k), ==, want[x / 2][k]);
  free(src.data), free(dst.data);
  /* 16-bit gray + alpha: 65535 65535 / 65536 = 65534.00002 -> 65534; alpha 32768 */
  struct cpu_image g = new_image(2, 1, 2, 16);
  set(&g, 0, 0, 0, 65535), set(&g, 0, 0, 1, 65535), set(&g, 1, 0, 0, 0), set(&g, 1, 0, 1, 1);
  dst = pixelate(&g, 2, NULL, 0, 0);
  for (int x = 0; x < 2; x++) {
    ASSERT_INT(get(&dst, x, 0, 0), ==, 65534);
    ASSERT_INT(get(&dst, x, 0, 1), ==, 32768);
  }
  /* 16-bit gray: 65535 and 0 -> 32767.5 -> 32768 */
  struct cpu_image h = new_image(2, 1, 1, 16);
  set(&h, 0, 0, 0, 65535);
  struct cpu_image hd = pixelate(&h, 2, NULL, 0, 0);
  ASSERT_INT(get(&hd, 0, 0, 0), ==, 32768);
  ASSERT_INT(get(&hd, 1, 0, 0), ==, 32768);
  free(g.data), free(dst.data), free(h.data), free(hd.data);
}

/* Regions: the mosaic inside, the source outside, the feather's smoothstep between (1 pixel
 * out with a feather of 1: t = 1/2, weight t^2 (3 - 2t) = 1/2), and overlapping regions blended
 * in order: twice half way from 10 towards 25 is 17.5 -> 18, then 21.5 -> 22 (once: 18). */
static void test_pixelate_regions(void) {
  struct cpu_image src = new_image(8, 4, 1, 8);
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 8; x++) set(&src, x, y, 0, x < 4 ? 10 : 50);
  set(&src, 0, 0, 0, 90); /* block (0, 0) of 4: (90 + 15 x 10) / 16 = 15 */
  const int one[1][4] = {{0, 0, 2, 4}};
  struct cpu_image d = pixelate(&src, 4, one, 1, 0);
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 8; x++) ASSERT_INT(get(&d, x, y, 0), ==, x < 2 ? 15 : get(&src, x, y, 0));
  free(d.data);
  d = pixelate(&src, 4, one, 1, 1);
  for (int y = 0; y < 4; y++) {
    ASSERT_INT(get(&d, 1, y, 0), ==, 15);
    ASSERT_INT(get(&d, 2, y, 0), ==, 13); /* 10 + (15 - 10) / 2 = 12.5 -> 13 */
    ASSERT_INT(get(&d, 3, y, 0), ==, 10);
  }
  free(d.data), free(src.data);
  struct cpu_image row = new_image(8, 1, 1, 8);
  const unsigned v[8] = {50, 10, 30, 10, 7, 7, 7, 7}; /* block 0: 100 / 4 = 25 */
  for (int x = 0; x < 8; x++) set(&row, x, 0, 0, v[x]);
  const int twice[2][4] = {{0, 0, 3, 1}, {0, 0, 3, 1}};
  d = pixelate(&row, 4, twice, 2, 1);
  const unsigned want[8] = {25, 25, 25, 22, 7, 7, 7, 7};
  for (int x = 0; x < 8; x++) ASSERT_INT(get(&d, x, 0, 0), ==, want[x]);
  free(d.data), free(row.data);
}

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int client_left(void *arg) {
  (void)arg;
  return 1;
}

/* Past its deadline, each twin stops and says so; for a client that has left, it says that. */
static void test_cancelled(void) {
  struct cpu_image src = new_image(64, 64, 3, 8), dst = new_image(64, 64, 3, 8);
  uint16_t *out = malloc(64 * 64 * sizeof(*out));
  struct cpu_cancel c = {mono_ms() - 1, NULL, NULL, 0, 0, 0};
  struct cpu_pixelate p = {4};
  struct cpu_var v = {CPU_VAR_EXACT, CPU_WINDOW_BOX, 2};
  struct cpu_var_out o = {0, 0};
  struct cpu_var_stats s;
  const int rect[1][4] = {{0, 0, 8, 8}};
  cpu_cancel_set(&c);
  ASSERT_INT(cpu_pixelate(pool, &p, &src, NULL, 0, 0, &dst), ==, ERR_DEADLINE_EXCEEDED);
  ASSERT_INT(cpu_pixelate(pool, &p, &src, rect, 1, 2, &dst), ==, ERR_DEADLINE_EXCEEDED);
  ASSERT_INT(cpu_variance_image(pool, &v, &o, &src, out, &s), ==, ERR_DEADLINE_EXCEEDED);
  cpu_cancel_set(NULL);
  struct cpu_cancel g = {0, client_left, NULL, 0, 0, 0};
  struct cpu_blur b = {CPU_YVV, 3, 3, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
  cpu_cancel_set(&g);
  ASSERT_INT(cpu_pixelate(pool, &p, &src, NULL, 0, 0, &dst), ==, ERR_CLIENT_GONE);
  ASSERT_INT(cpu_blur_image(pool, &b, &src, &dst, NULL, NULL), ==, ERR_CLIENT_GONE);
  cpu_cancel_set(NULL);
  ASSERT_INT(cpu_pixelate(pool, &p, &src, NULL, 0, 0, &dst), ==, ERR_OK);
  ASSERT_INT(cpu_variance_image(pool, &v, &o, &src, out, &s), ==, ERR_OK);
  p.block = 0;
  ASSERT_INT(cpu_pixelate(pool, &p, &src, NULL, 0, 0, &dst), ==, ERR_BAD_PARAMETER);
  free(src.data), free(dst.data), free(out);
}

/* Three pixels 0 0 255, box radius 1, replicate border: the windows hold 0 0 0, 0 0 255 and
 * 0 255 255, whose variances are 0, 14450 and 14450 (mean 85: (85^2 + 85^2 + 170^2) / 3). */
static void test_variance_image(void) {
  struct cpu_image gray = new_image(3, 1, 1, 8), rgb = new_image(3, 1, 3, 8);
  set(&gray, 2, 0, 0, 255);
  for (int k = 0; k < 3; k++) set(&rgb, 2, 0, k, 255); /* luma 255 */
  uint16_t out[3];
  struct cpu_var v = {CPU_VAR_EXACT, CPU_WINDOW_BOX, 1};
  struct cpu_var_stats s;
  for (int colour = 0; colour < 2; colour++) {
    struct cpu_var_out o = {0, 1};
    ASSERT_INT(cpu_variance_image(pool, &v, &o, colour ? &rgb : &gray, out, &s), ==, ERR_OK);
    ASSERT_DBL(s.scale, ==, 4);
    ASSERT_DBL(s.min, ==, 0);
    ASSERT_DBL(s.max, ==, 14450);
    ASSERT_DBL(s.mean, ==, 28900.0 / 3);
    ASSERT(isinf(s.psnr));
    ASSERT_INT(out[0], ==, 0);
    ASSERT_INT(out[1], ==, 57800);
    ASSERT_INT(out[2], ==, 57800);
    o.stddev = 1; /* sqrt(14450) = 120.2081 -> 256 x: 30773.3 -> 30773 */
    ASSERT_INT(cpu_variance_image(pool, &v, &o, colour ? &rgb : &gray, out, &s), ==, ERR_OK);
    ASSERT_DBL(s.scale, ==, 256);
    ASSERT_DBL(s.max, ==, sqrt(14450));
    ASSERT_INT(out[1], ==, 30773);
  }
  /* naive (float32) measured against exact: a PSNR, here all but identical; unmeasured: NAN */
  struct cpu_var naive = {CPU_VAR_NAIVE, CPU_WINDOW_BOX, 1};
  struct cpu_var_out o = {0, 1};
  ASSERT_INT(cpu_variance_image(pool, &naive, &o, &gray, out, &s), ==, ERR_OK);
  ASSERT(s.psnr > 100);
  ASSERT_NEAR(s.max, 14450, 0.01);
  o.measure = 0;
  ASSERT_INT(cpu_variance_image(pool, &naive, &o, &gray, out, &s), ==, ERR_OK);
  ASSERT(isnan(s.psnr));
  ASSERT_DBL(cpu_var_scale(16, 0), ==, 1.0 / 16384);
  ASSERT_DBL(cpu_var_scale(16, 1), ==, 2);
  /* 16-bit: 0 0 65535, variance 65535^2 2 / 9 = 954408050 -> / 16384: 58252.44 -> 58252 */
  struct cpu_image g16 = new_image(3, 1, 1, 16);
  set(&g16, 2, 0, 0, 65535);
  ASSERT_INT(cpu_variance_image(pool, &v, &o, &g16, out, &s), ==, ERR_OK);
  ASSERT_DBL(s.max, ==, 65535.0 * 65535 * 2 / 9);
  ASSERT_INT(out[2], ==, 58252);
  free(gray.data), free(rgb.data), free(g16.data);
}

/* Two regions of 100 samples, one at 40 dB and one identical: the squared errors of the first
 * over both, 10 log10(2 10^4) = 43.01 dB; all identical: INFINITY. */
static void test_accuracy_merge(void) {
  struct cpu_accuracy acc[2] = {{40, 3}, {INFINITY, 0}};
  double samples[2] = {100, 100};
  ASSERT_NEAR(cpu_accuracy_merge(acc, samples, 2, 8), 10 * log10(2e4), 1e-9);
  ASSERT_NEAR(cpu_accuracy_merge(acc, samples, 1, 16), 40, 1e-9);
  ASSERT(isinf(cpu_accuracy_merge(acc + 1, samples, 1, 8)));
}

int main(void) {
  pool = cpu_pool_new(2);
  ASSERT(pool);
  RUN(test_pixelate_means);
  RUN(test_pixelate_rounding);
  RUN(test_pixelate_alpha);
  RUN(test_pixelate_regions);
  RUN(test_cancelled);
  RUN(test_variance_image);
  RUN(test_accuracy_merge);
  cpu_pool_free(pool);
  fprintf(stderr, "unit_cpu_ops: ok\n");
  return 0;
}

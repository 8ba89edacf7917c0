/* Unit tests of local variance, local contrast and convolution on the CPU (cpu/variance.c,
 * cpu/var_merge.c, cpu/convolve.c): the exact method against a brute-force 128-bit and long
 * double evaluation, the float32 methods within their measured error of exact on a photograph,
 * Koenig's breakdown on a flat bright region, threewise's radii, the named kernels on flat
 * images, replicate borders and rounding on hand-computed images, contrast on flat images, and
 * odd sizes. */
#include "test.h"
#include "fixtures.h"

#include "../codecs/codecs.h"
#include "../cpu/cpu.h"

#include <stdint.h>

/* Relative errors are |v - exact| / max(exact, REL_FLOOR): a variance under one squared level
 * is flat for the eye, and measuring it relative to itself would only amplify rounding. */
#define REL_FLOOR 1.0

static struct cpu_pool *pool;

static uint64_t rng = 88172645463325252ull;

static unsigned next_rand(unsigned mod) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; /* xorshift64 */
  return (unsigned)(rng % mod);
}

/* A gray image of w x h samples drawn from [lo, lo + span); owned by the caller. */
static struct cpu_image random_gray(int w, int h, int depth, unsigned lo, unsigned span) {
  struct cpu_image img = {malloc((size_t)w * h * (depth / 8)), w, h, 1, depth};
  for (size_t i = 0; i < (size_t)w * h; i++) {
    unsigned v = lo + next_rand(span);
    if (depth == 16)
      ((uint16_t *)img.data)[i] = (uint16_t)v;
    else
      ((uint8_t *)img.data)[i] = (uint8_t)v;
  }
  return img;
}

static unsigned at(const struct cpu_image *img, int x, int y) {
  x = x < 0 ? 0 : x >= img->width ? img->width - 1 : x;
  y = y < 0 ? 0 : y >= img->height ? img->height - 1 : y;
  size_t i = (size_t)y * img->width + x;
  return img->depth == 16 ? ((uint16_t *)img->data)[i] : ((uint8_t *)img->data)[i];
}

static long tap(enum cpu_window w, int r, int k) {
  return w == CPU_WINDOW_BOX ? 1 : r + 1 - labs(k);
}

/* The exact variance at (x, y) by brute force: the 2-D sums in 128 bits, the same final
 * division; and the two-pass variance in long double into *ld. */
static double brute_var(const struct cpu_image *img, enum cpu_window win, int r, int x, int y,
                        long double *ld, double *mean) {
  unsigned __int128 s1 = 0, s2 = 0, total = 0;
  for (int dy = -r; dy <= r; dy++)
    for (int dx = -r; dx <= r; dx++) {
      unsigned __int128 w = (unsigned __int128)(tap(win, r, dy) * tap(win, r, dx));
      unsigned __int128 v = at(img, x + dx, y + dy);
      s1 += w * v, s2 += w * v * v, total += w;
    }
  long double m = (long double)s1 / (long double)total, q = 0;
  for (int dy = -r; dy <= r; dy++)
    for (int dx = -r; dx <= r; dx++) {
      long double d = at(img, x + dx, y + dy) - m;
      q += (long double)(tap(win, r, dy) * tap(win, r, dx)) * d * d;
    }
  *ld = q / (long double)total;
  *mean = (double)s1 / (double)(uint64_t)total;
  return (double)(total * s2 - s1 * s1) / (double)(uint64_t)(total * total);
}

static void check_exact(int w, int h, int depth, unsigned lo, unsigned span, int r) {
  struct cpu_image img = random_gray(w, h, depth, lo, span);
  double *mean = malloc((size_t)w * h * sizeof(double)), *var = malloc((size_t)w * h * 8);
  for (int win = 0; win < 2; win++) {
    struct cpu_var v = {CPU_VAR_EXACT, (enum cpu_window)win, r};
    ASSERT_INT(cpu_variance(pool, &v, &img, mean, var), ==, ERR_OK);
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        long double ld;
        double m, e = brute_var(&img, (enum cpu_window)win, r, x, y, &ld, &m);
        size_t i = (size_t)y * w + x;
        if (var[i] != e || mean[i] != m)
          TEST_FAIL("exact %dx%d/%d r=%d win=%d at (%d,%d): %.17g vs %.17g", w, h, depth, r, win, x,
                    y, var[i], e);
        /* long double's own summation error reaches ~1e-15 over the 64009 taps of r = 126 */
        if (fabsl(var[i] - ld) > 1e-14L * ld)
          TEST_FAIL("ld %dx%d/%d r=%d win=%d (%d,%d): %.17g vs %.20Lg", w, h, depth, r, win, x, y,
                    var[i], ld);
      }
  }
  free(img.data), free(mean), free(var);
}

/* exact == brute force, bit for bit, at 8 and 16 bits, small and huge radii (the numerator
 * passes 2^64 at 16 bits), windows wider than the image, and odd sizes. */
static void test_exact(void) {
  const int radii[] = {1, 2, 3, 5, 8, 20};
  for (int i = 0; i < 6; i++) {
    check_exact(23, 17, 8, 0, 256, radii[i]);
    check_exact(19, 11, 16, 0, 65536, radii[i]);
  }
  check_exact(9, 7, 16, 0, 65536, 127);
  check_exact(9, 7, 16, 65000, 536, 127); /* bright and nearly flat */
  check_exact(9, 7, 8, 0, 256, 126);
  check_exact(1, 1, 8, 0, 256, 3);
  check_exact(1, 13, 16, 0, 65536, 4);
  check_exact(13, 1, 8, 0, 256, 4);
  check_exact(17, 13, 8, 0, 256, 7);
}

static void test_names(void) {
  enum cpu_var_method found = CPU_VAR_NMETHODS;
  for (int m = 0; m < CPU_VAR_NMETHODS; m++) {
    ASSERT_INT(cpu_var_method_from_name(cpu_var_method_name(m), &found), ==, ERR_OK);
    ASSERT_INT(found, ==, m);
    ASSERT(cpu_var_method_desc(m) != NULL);
  }
  ASSERT_INT(cpu_var_method_from_name("auto", &found), ==, ERR_BAD_PARAMETER);
  ASSERT(cpu_var_method_name(CPU_VAR_NMETHODS) == NULL);
  for (int r = 1; r <= CPU_VAR_RADIUS_MAX; r++) {
    int pow2 = r == 1 || r == 3 || r == 7 || r == 15 || r == 31 || r == 63 || r == 127;
    ASSERT_INT(cpu_var_radius_ok(CPU_VAR_THREEWISE, r), ==, pow2);
    ASSERT_INT(cpu_var_radius_ok(CPU_VAR_PAIRWISE, r), ==, 1);
  }
  ASSERT_INT(cpu_var_radius_ok(CPU_VAR_EXACT, 0), ==, 0);
  ASSERT_INT(cpu_var_radius_ok(CPU_VAR_NAIVE, CPU_VAR_RADIUS_MAX + 1), ==, 0);
  /* threewise refuses such a radius rather than computing another window */
  struct cpu_image img = random_gray(8, 8, 8, 0, 256);
  double var[64];
  struct cpu_var v = {CPU_VAR_THREEWISE, CPU_WINDOW_TRIANGLE, 4};
  ASSERT_INT(cpu_variance(pool, &v, &img, NULL, var), ==, ERR_BAD_PARAMETER);
  free(img.data);
}

/* Max relative error (floor REL_FLOOR) of method m against exact over img, and the count of
 * negative variances. */
static double max_rel(const struct cpu_image *img, enum cpu_var_method m, enum cpu_window win,
                      int r, int *negatives) {
  size_t n = (size_t)img->width * img->height;
  double *e = malloc(n * sizeof(double)), *v = malloc(n * sizeof(double)), worst = 0;
  struct cpu_var ve = {CPU_VAR_EXACT, win, r}, vm = {m, win, r};
  ASSERT_INT(cpu_variance(pool, &ve, img, NULL, e), ==, ERR_OK);
  ASSERT_INT(cpu_variance(pool, &vm, img, NULL, v), ==, ERR_OK);
  *negatives = 0;
  for (size_t i = 0; i < n; i++) {
    double rel = fabs(v[i] - e[i]) / fmax(e[i], REL_FLOOR);
    worst = fmax(worst, rel);
    *negatives += v[i] < 0;
  }
  free(e), free(v);
  return worst;
}

/* The float32 methods against exact on a photograph, within the bounds docs/variance_accuracy.md
 * measures (with a margin), at radii 1, 3 and 7 and both windows. */
static void test_float_accuracy(void) {
  /* about twice the worst measured on camera.png at r <= 7 (8.1e-6, 0.066, 1.4e-4, 2.6e-5,
   * 2.1e-5): a regression shows, rounding-order noise does not */
  static const double bound[CPU_VAR_NMETHODS] = {
      [CPU_VAR_NAIVE] = 2e-5,    [CPU_VAR_KOENIG] = 0.15,    [CPU_VAR_WELFORD] = 3e-4,
      [CPU_VAR_PAIRWISE] = 5e-5, [CPU_VAR_THREEWISE] = 5e-5,
  };

  struct cpu_image img = fixture_luma("camera.png");
  const int radii[] = {1, 3, 7};
  for (int m = 0; m < CPU_VAR_EXACT; m++)
    for (int win = 0; win < 2; win++)
      for (int k = 0; k < 3; k++) {
        int neg;
        double rel = max_rel(&img, m, win, radii[k], &neg);
        fprintf(stderr, "    %-9s win=%d r=%d: max rel %.3g, %d negative\n", cpu_var_method_name(m),
                win, radii[k], rel, neg);
        ASSERT_DBL(rel, <=, bound[m]);
        if (m != CPU_VAR_KOENIG) ASSERT_INT(neg, ==, 0);
      }
  free(img.data);
}

/* A flat bright region, 200 +- 2: E[x^2] and E[x]^2 agree to about 4 of float32's 7 digits, so
 * at r = 31 Koenig's variance is mostly rounding error; the other methods hold. */
static void test_koenig_breakdown(void) {
  struct cpu_image img = random_gray(96, 96, 8, 198, 5);
  int neg;
  for (int win = 0; win < 2; win++) {
    double koenig = max_rel(&img, CPU_VAR_KOENIG, win, 31, &neg);
    fprintf(stderr, "    koenig on 200+-2, win=%d r=31: max rel %.3g\n", win, koenig);
    ASSERT_DBL(koenig, >, 0.1);
    for (int m = 0; m < CPU_VAR_EXACT; m++) {
      if (m == CPU_VAR_KOENIG) continue;
      ASSERT_DBL(max_rel(&img, m, win, 31, &neg), <=, 3e-4);
      ASSERT_INT(neg, ==, 0);
    }
  }
  free(img.data);
}

/* Every method on 1x1, 1xN, Nx1 and 17x13 images, against exact; the mean too. */
static void test_odd_sizes(void) {
  const int sizes[][2] = {{1, 1}, {1, 9}, {9, 1}, {17, 13}, {2, 3}};
  for (int s = 0; s < 5; s++) {
    int w = sizes[s][0], h = sizes[s][1];
    struct cpu_image img = random_gray(w, h, 16, 0, 65536);
    double e[17 * 13], em[17 * 13], v[17 * 13], vm[17 * 13];
    for (int m = 0; m < CPU_VAR_EXACT; m++)
      for (int win = 0; win < 2; win++) {
        struct cpu_var ve = {CPU_VAR_EXACT, win, 3}, vv = {m, win, 3};
        ASSERT_INT(cpu_variance(pool, &ve, &img, em, e), ==, ERR_OK);
        ASSERT_INT(cpu_variance(pool, &vv, &img, vm, v), ==, ERR_OK);
        for (int i = 0; i < w * h; i++) {
          /* koenig's error is a few float32 ulps of E[x^2] = m^2 + var, not of var */
          double scale = m == CPU_VAR_KOENIG ? 1e-6 * (em[i] * em[i] + e[i]) : 1e-5 * e[i];
          ASSERT_NEAR(v[i], e[i], scale + 1e-5);
          ASSERT_NEAR(vm[i], em[i], 1e-6 * em[i] + 1e-6);
        }
      }
    free(img.data);
  }
  /* a 1x1 image is flat: variance 0, mean the sample */
  uint8_t one = 77;
  struct cpu_image px = {&one, 1, 1, 1, 8};
  double m, v;
  struct cpu_var ve = {CPU_VAR_EXACT, CPU_WINDOW_TRIANGLE, 127};
  ASSERT_INT(cpu_variance(pool, &ve, &px, &m, &v), ==, ERR_OK);
  ASSERT_DBL(v, ==, 0);
  ASSERT_DBL(m, ==, 77);
}

/* ---- convolution ---- */

static struct cpu_image flat(int w, int h, int channels, int depth, const unsigned *value) {
  struct cpu_image img = {malloc((size_t)w * h * channels * (depth / 8)), w, h, channels, depth};
  for (size_t i = 0; i < (size_t)w * h * channels; i++) {
    unsigned v = value[i % channels];
    if (depth == 16)
      ((uint16_t *)img.data)[i] = (uint16_t)v;
    else
      ((uint8_t *)img.data)[i] = (uint8_t)v;
  }
  return img;
}

/* Named kernels on flat images: box and gauss3 keep the value, sharpen keeps it, edge gives 0,
 * emboss gives its bias; alpha is copied. */
static void test_named_flat(void) {
  const unsigned rgba[4] = {200, 17, 255, 90};
  ASSERT(cpu_conv_names[5] == NULL);
  for (int depth = 8; depth <= 16; depth += 8) {
    struct cpu_image img = flat(7, 5, 4, depth, rgba), out = img;
    out.data = malloc(cpu_image_bytes(&img));
    for (int k = 0; cpu_conv_names[k]; k++) {
      struct cpu_conv c;
      ASSERT_INT(cpu_conv_named(cpu_conv_names[k], &c), ==, ERR_OK);
      ASSERT_INT(cpu_convolve_image(pool, &c, &img, &out), ==, ERR_OK);
      for (size_t i = 0; i < 7 * 5 * 4; i++) {
        unsigned want = rgba[i % 4];
        if (i % 4 != 3 && !strcmp(cpu_conv_names[k], "edge")) want = 0;
        if (i % 4 != 3 && !strcmp(cpu_conv_names[k], "emboss")) want = 128;
        ASSERT_INT(image_sample(&out, i), ==, want);
      }
    }
    free(img.data), free(out.data);
  }
  struct cpu_conv c;
  ASSERT_INT(cpu_conv_named("blur", &c), ==, ERR_BAD_PARAMETER);
}

/* A 1x1 kernel [1] gives identical bytes, at both depths and every channel count. */
static void test_identity(void) {
  struct cpu_conv id = {.size = 1, .k = {1}, .bias = 0};
  for (int depth = 8; depth <= 16; depth += 8)
    for (int ch = 1; ch <= 4; ch++) {
      struct cpu_image img = random_gray(17 * ch, 13, depth, 0, depth == 8 ? 256 : 65536);
      img.width = 17, img.channels = ch;
      struct cpu_image out = img;
      out.data = malloc(cpu_image_bytes(&img));
      ASSERT_INT(cpu_convolve_image(pool, &id, &img, &out), ==, ERR_OK);
      ASSERT(memcmp(img.data, out.data, cpu_image_bytes(&img)) == 0);
      free(img.data), free(out.data);
    }
}

/* Replicate border and rounding on a 3x2 image, by hand. */
static void test_border(void) {
  uint8_t px[6] = {1, 2, 3, 4, 5, 6}, o[6];
  struct cpu_image img = {px, 3, 2, 1, 8}, out = {o, 3, 2, 1, 8};
  struct cpu_conv c = {.size = 3};
  c.k[0] = 1; /* top-left tap: out(x, y) = in(x - 1, y - 1) */
  ASSERT_INT(cpu_convolve_image(pool, &c, &img, &out), ==, ERR_OK);
  const uint8_t tl[6] = {1, 1, 2, 1, 1, 2};
  ASSERT(memcmp(o, tl, 6) == 0);
  c.k[0] = 0, c.k[8] = 1; /* bottom-right tap: out(x, y) = in(x + 1, y + 1) */
  ASSERT_INT(cpu_convolve_image(pool, &c, &img, &out), ==, ERR_OK);
  const uint8_t br[6] = {5, 6, 6, 5, 6, 6};
  ASSERT(memcmp(o, br, 6) == 0);
  ASSERT_INT(cpu_conv_named("box", &c), ==, ERR_OK);
  ASSERT_INT(cpu_convolve_image(pool, &c, &img, &out), ==, ERR_OK);
  /* (0,0): rows 0,0,1 and columns 0,0,1: 1+1+2 + 1+1+2 + 4+4+5 = 21, / 9 = 2.33 */
  ASSERT_INT(o[0], ==, 2);
  /* (2,1): rows 0,1,1 and columns 1,2,2: 2+3+3 + 5+6+6 + 5+6+6 = 42, / 9 = 4.67 */
  ASSERT_INT(o[5], ==, 5);
  struct cpu_conv half = {.size = 1, .k = {0.5f}, .bias = 0}; /* half up: 1.5 -> 2, 2.5 -> 3 */
  ASSERT_INT(cpu_convolve_image(pool, &half, &img, &out), ==, ERR_OK);
  const uint8_t h[6] = {1, 1, 2, 2, 3, 3};
  ASSERT(memcmp(o, h, 6) == 0);
  struct cpu_conv big = {.size = 1, .k = {3e38f}, .bias = 0}; /* overflows to inf: clamps */
  ASSERT_INT(cpu_convolve_image(pool, &big, &img, &out), ==, ERR_OK);
  ASSERT_INT(o[5], ==, 255);
  struct cpu_conv nan = {.size = 1, .k = {INFINITY}, .bias = -INFINITY}; /* NaN gives 0 */
  ASSERT_INT(cpu_convolve_image(pool, &nan, &img, &out), ==, ERR_OK);
  ASSERT_INT(o[5], ==, 0);
  big.k[0] = -3e38f; /* and -inf gives 0 */
  ASSERT_INT(cpu_convolve_image(pool, &big, &img, &out), ==, ERR_OK);
  ASSERT_INT(o[5], ==, 0);
}

/* ---- luma and contrast ---- */

static void test_luma(void) {
  uint8_t rgb[6] = {255, 0, 0, 10, 200, 30}, y[2];
  struct cpu_image src = {rgb, 2, 1, 3, 8}, dst = {y, 2, 1, 1, 8};
  ASSERT_INT(cpu_luma(&src, &dst), ==, ERR_OK);
  ASSERT_INT(y[0], ==, (77 * 255 + 128) >> 8);
  ASSERT_INT(y[1], ==, (77 * 10 + 150 * 200 + 29 * 30 + 128) >> 8);
  uint16_t w16[4] = {65535, 65535, 65535, 1234}, y16[1];
  struct cpu_image s16 = {w16, 1, 1, 4, 16}, d16 = {y16, 1, 1, 1, 16};
  ASSERT_INT(cpu_luma(&s16, &d16), ==, ERR_OK);
  ASSERT_INT(y16[0], ==, 65535);
}

/* On a flat image s = 0 and Y = m, so Y' = a m0 + (1 - a) m; colour moves with luma. */
static void test_contrast_flat(void) {
  struct cpu_contrast c = {5, 0.5, 128, 0.5, 50};
  const unsigned g[2] = {100, 33}, rgb[3] = {100, 150, 50}, g16[1] = {100 * 257};
  struct cpu_image a = flat(9, 4, 2, 8, g), b = flat(3, 7, 3, 8, rgb), d = flat(5, 5, 1, 16, g16);
  struct cpu_image oa = a, ob = b, od = d;
  oa.data = malloc(cpu_image_bytes(&a)), ob.data = malloc(cpu_image_bytes(&b));
  od.data = malloc(cpu_image_bytes(&d));
  ASSERT_INT(cpu_contrast_image(pool, &c, &a, &oa), ==, ERR_OK);
  ASSERT_INT(cpu_contrast_image(pool, &c, &b, &ob), ==, ERR_OK);
  ASSERT_INT(cpu_contrast_image(pool, &c, &d, &od), ==, ERR_OK);
  ASSERT_INT(image_sample(&oa, 0), ==, 114); /* 0.5 128 + 0.5 100 */
  ASSERT_INT(image_sample(&oa, 1), ==, 33);  /* alpha */
  /* Y = (77 100 + 150 150 + 29 50 + 128) >> 8 = 124, Y' = 64 + 62 = 126: every channel + 2 */
  ASSERT_INT(image_sample(&ob, 0), ==, 102);
  ASSERT_INT(image_sample(&ob, 1), ==, 152);
  ASSERT_INT(image_sample(&ob, 2), ==, 52);
  ASSERT_INT(image_sample(&od, 12), ==, 114 * 257); /* m0 and s0 scale by 257 at 16 bits */
  free(a.data), free(b.data), free(d.data), free(oa.data), free(ob.data), free(od.data);
}

/* Near a step edge, by hand: at x = 7 the 5x5 box sees columns 5..9 = 100 100 100 140 140, so
 * m = 116 and s^2 = (3 16^2 + 2 24^2) / 5 = 384. */
static void test_contrast_edge(void) {
  uint8_t px[16 * 4], o[16 * 4];
  for (int i = 0; i < 64; i++) px[i] = i % 16 < 8 ? 100 : 140;
  struct cpu_image img = {px, 16, 4, 1, 8}, out = {o, 16, 4, 1, 8};
  struct cpu_contrast c = {2, 0.5, 128, 0.5, 50};
  ASSERT_INT(cpu_contrast_image(pool, &c, &img, &out), ==, ERR_OK);
  double want = 0.5 * 128 + 0.5 * 116 + (100 - 116) * 0.5 * 50 / (50 + 0.5 * sqrt(384.0));
  ASSERT_INT(o[7], ==, (int)floor(want + 0.5));
  ASSERT_INT(o[0], ==, 114); /* far from the edge: flat */
}

int main(void) {
  pool = cpu_pool_new(2);
  RUN(test_names);
  RUN(test_exact);
  RUN(test_odd_sizes);
  RUN(test_float_accuracy);
  RUN(test_koenig_breakdown);
  RUN(test_named_flat);
  RUN(test_identity);
  RUN(test_border);
  RUN(test_luma);
  RUN(test_contrast_flat);
  RUN(test_contrast_edge);
  cpu_pool_free(pool);
  fprintf(stderr, "unit_local: all passed\n");
  return 0;
}

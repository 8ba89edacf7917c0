/* Unit tests of cpu/compose.c: the feathered blend of a blurred box (the ramp is 1 inside the
 * region, falls monotonically outside it and is 0 past the feather) and the unsharp mask (its
 * formula on colour, premultiplied colour and luma, and its threshold). */
#include "test.h"

#include "../cpu/cpu.h"

#include <math.h>

static void test_blend_ramp(void) {
  enum { W = 48, H = 40, F = 6 };
  static uint8_t dst_px[W * H], box_px[W * H];
  memset(box_px, 255, sizeof(box_px));
  struct cpu_image dst = {dst_px, W, H, 1, 8}, box = {box_px, W, H, 1, 8};
  const int rect[4] = {10, 12, 20, 22}; /* x0, y0, x1, y1 */
  ASSERT_INT(cpu_blend_box(&dst, &box, 0, 0, rect, F), ==, ERR_OK);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      int dx = x < 10 ? 10 - x : x > 19 ? x - 19 : 0, dy = y < 12 ? 12 - y : y > 21 ? y - 21 : 0;
      int v = dst_px[y * W + x];
      if (dx == 0 && dy == 0) ASSERT_INT(v, ==, 255);
      if (dx > F || dy > F) ASSERT_INT(v, ==, 0);
      if (dx >= 1 && dx <= F - 1 && dy == 0) ASSERT(v > 0 && v < 255);
      /* moving away from the region along either axis never raises the weight */
      if (x > 19 && x + 1 < W) ASSERT(dst_px[y * W + x + 1] <= v);
      if (x < 10 && x > 0) ASSERT(dst_px[y * W + x - 1] <= v);
      if (y > 21 && y + 1 < H) ASSERT(dst_px[(y + 1) * W + x] <= v);
    }
  /* the ramp is strictly falling where it is not flat */
  for (int x = 20; x < 20 + F - 1; x++) ASSERT(dst_px[16 * W + x + 1] < dst_px[16 * W + x]);
  /* a box smaller than the feathered region changes only the pixels it covers */
  memset(dst_px, 0, sizeof(dst_px));
  struct cpu_image small = {box_px, 8, 8, 1, 8};
  ASSERT_INT(cpu_blend_box(&dst, &small, 12, 14, rect, F), ==, ERR_OK);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      if (x < 12 || x >= 20 || y < 14 || y >= 22) ASSERT_INT(dst_px[y * W + x], ==, 0);
}

static void test_unsharp(void) {
  uint8_t in[4 * 3] = {100, 150, 200, 10, 20, 30, 250, 250, 250, 0, 0, 0};
  uint8_t bl[4 * 3] = {90, 160, 200, 20, 20, 25, 200, 240, 255, 3, 1, 2};
  uint8_t out[4 * 3];
  struct cpu_image s = {in, 4, 1, 3, 8}, b = {bl, 4, 1, 3, 8}, d = {out, 4, 1, 3, 8};
  struct cpu_unsharp u = {1.5, 0, 0};
  ASSERT_INT(cpu_unsharp_image(NULL, &u, &s, &b, &d), ==, ERR_OK);
  for (int i = 0; i < 12; i++) {
    double want = fmin(255, fmax(0, floor(in[i] + 1.5 * (in[i] - bl[i]) + 0.5)));
    ASSERT_INT(out[i], ==, (int)want);
  }
  u.threshold = 6; /* |in - blurred| < 6 is left alone */
  ASSERT_INT(cpu_unsharp_image(NULL, &u, &s, &b, &d), ==, ERR_OK);
  ASSERT_INT(out[2], ==, 200);       /* difference 0 */
  ASSERT_INT(out[5], ==, 30);        /* difference 5 */
  ASSERT_INT(out[0], ==, 115);       /* difference 10: 100 + 15 */
  u = (struct cpu_unsharp){1, 0, 1}; /* luma: one change for all three colours */
  ASSERT_INT(cpu_unsharp_image(NULL, &u, &s, &b, &d), ==, ERR_OK);
  double dy = 0.299 * 10 + 0.587 * -10 + 0.114 * 0;
  for (int c = 0; c < 3; c++) ASSERT_INT(out[c], ==, (int)floor(in[c] + dy + 0.5));
  /* RGBA: colour premultiplied, alpha copied; a transparent pixel keeps its colour */
  uint8_t ia[8] = {200, 100, 50, 128, 9, 9, 9, 0}, ba[8] = {100, 100, 50, 255, 0, 0, 0, 0};
  uint8_t oa[8];
  struct cpu_image sa = {ia, 2, 1, 4, 8}, bb = {ba, 2, 1, 4, 8}, da = {oa, 2, 1, 4, 8};
  u = (struct cpu_unsharp){1, 0, 0};
  ASSERT_INT(cpu_unsharp_image(NULL, &u, &sa, &bb, &da), ==, ERR_OK);
  double a = 128 / 255.0, p = 200 * a, pb = 100 * 1.0;
  ASSERT_INT(oa[0], ==, (int)fmin(255, floor((p + (p - pb)) / a + 0.5)));
  ASSERT_INT(oa[3], ==, 128);
  ASSERT_INT(oa[4], ==, 9);
  ASSERT_INT(oa[7], ==, 0);
}

int main(void) {
  RUN(test_blend_ramp);
  RUN(test_unsharp);
  fprintf(stderr, "unit_compose: all passed\n");
  return 0;
}

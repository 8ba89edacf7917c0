/* The GPU codecs' test (on a machine with an NVIDIA GPU and nvJPEG), beside gpu_check:
 *
 *   gpu_codecs [FILE...]         quality: every JPEG given (default: every .jpg of tests/data)
 *                                decoded by nvJPEG, as the service decides (codec_jpeg_probe,
 *                                then nvJPEG when the file qualifies), against libjpeg-turbo: at
 *                                least 40 dB; then the libjpeg-turbo pixels encoded by nvJPEG and
 *                                by libjpeg-turbo at quality 90 (4:4:4) and 75 (4:2:0): sizes
 *                                within 15%, and PSNR against the pixels no more than 0.5 dB
 *                                below libjpeg-turbo's (nvJPEG uses an accurate DCT, TurboJPEG
 *                                its fast one, so nvJPEG is often better). Prints a
 *                                markdown table and the worst decode, with where it comes from.
 *   gpu_codecs --webp            lossy WebP's first pass alone (below)
 *   gpu_codecs --replay FILE...  each file (the fuzz corpora) and 400 damaged copies of
 *                                rocket.jpg (bytes changed in the scan, cut short) through the
 *                                same decision and through codec_decode: no fatal (sticky) CUDA
 *                                error; files the GPU decodes while libjpeg refuses them are
 *                                counted and listed.
 *
 * The default run then checks lossy WebP's first pass on the GPU (gpu/vp8.cu) against the CPU's
 * (codec_vp8_analyse): photo_1080p.jpg blurred on the GPU (sigma 12), whole and cropped to odd
 * sizes (a partial macroblock at each edge, narrower and shorter than one, 1x1), at qualities
 * 0, 50, 89 and 100, and a smooth 7680x4608 image (288 macroblock rows): the same modes,
 * levels, ends and token counts, byte for byte, and the same file; the
 * photograph itself is not smooth on either.
 *
 * Exits 0 when every check held. Run it under compute-sanitizer too. */
#include "test.h"
#include "fixtures.h"

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"
#include "../gpu/gpu.h"

#include <math.h>
#include <stdint.h>

static struct gpu_ctx *ctx;
static int failures;

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  long n = -1;
  uint8_t *buf = NULL;
  if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
    buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) TEST_FAIL("cannot read %s", path);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* The service's GPU decode of buf (api/backend.c's gpu_decode): GPU_OK with the pixels in *out
 * (malloc'd), or the GPU's failure; GPU_ERROR too when the probe keeps the file on the CPU
 * (*codec is then NULL). */
static enum gpu_status gpu_decode_file(const uint8_t *buf, size_t len, struct codec_image *out,
                                       const char **codec) {
  struct codec_jpeg_info info;
  struct cpu_image shape;
  void *pixels;
  *codec = NULL;
  if (codec_jpeg_probe(buf, len, NULL, &info, NULL, 0) != CODEC_OK || !info.plain || !info.complete)
    return GPU_ERROR;
  struct gpu_jpeg_src src = {
      buf, len, info.width, info.height, info.channels, info.orientation, info.progressive};
  gpu_jpeg_expect(ctx, 1);
  enum gpu_status st = gpu_jpeg_decode(ctx, &src, &shape, codec);
  if (st == GPU_OK) st = gpu_download(ctx, GPU_INPUT, &shape, &pixels, NULL);
  if (st != GPU_OK) return st;
  *out = (struct codec_image){malloc(cpu_image_bytes(&shape)),
                              shape.width,
                              shape.height,
                              shape.channels,
                              8,
                              CODEC_JPEG,
                              info.orientation};
  ASSERT(out->pixels);
  memcpy(out->pixels, pixels, cpu_image_bytes(&shape));
  return GPU_OK;
}

static void check(int ok, const char *file, const char *what) {
  if (ok) return;
  fprintf(stderr, "FAIL %s: %s\n", file, what);
  failures++;
}

struct encoded { /* one encoder's JPEG of the reference pixels */
  size_t bytes;
  double psnr; /* its decode against the reference */
};

/* ref encoded at quality q by nvJPEG (from the device) and by libjpeg-turbo. Returns 0, or -1
 * when nvJPEG refuses the image (the service then encodes it with libjpeg-turbo). */
static int encode_both(const struct codec_image *ref, int q, struct encoded *gpu,
                       struct encoded *cpu) {
  struct cpu_image shape = {ref->pixels, ref->width, ref->height, ref->channels, 8};
  struct codec_encode_opts o = {
      .format = CODEC_JPEG, .quality = q, .compression = 0, .lossless = 0};
  uint8_t *g = NULL, *c = NULL;
  struct codec_image dg, dc;
  int maxdiff;
  ASSERT(gpu_upload(ctx, &shape, NULL) == GPU_OK);
  enum gpu_status st =
      gpu_jpeg_encode(ctx, GPU_INPUT, &shape, q, q >= CODEC_JPEG_FULL_CHROMA, &g, &gpu->bytes);
  if (st == GPU_FATAL) TEST_FAIL("a fatal CUDA error: %s", gpu_ctx_error(ctx));
  if (st != GPU_OK) return -1;
  ASSERT(codec_encode(ref, &o, &c, &cpu->bytes, NULL, 0) == CODEC_OK);
  ASSERT(codec_decode(g, gpu->bytes, NULL, &dg, NULL, 0) == CODEC_OK);
  ASSERT(codec_decode(c, cpu->bytes, NULL, &dc, NULL, 0) == CODEC_OK);
  gpu->psnr = image_psnr8(ref, &dg, &maxdiff);
  cpu->psnr = image_psnr8(ref, &dc, &maxdiff);
  codec_image_free(&dg), codec_image_free(&dc);
  free(g), free(c);
  return 0;
}

struct worst {
  double db;
  const char *file, *chroma;
};

/* One row of the quality table for the JPEG at path. */
static void quality_row(const char *path, struct worst *w) {
  size_t len;
  uint8_t *buf = read_file(path, &len);
  struct codec_image ref, got;
  struct codec_jpeg_info info;
  const char *codec, *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  int maxdiff = 0;
  if (codec_decode(buf, len, NULL, &ref, NULL, 0) != CODEC_OK ||
      codec_jpeg_probe(buf, len, NULL, &info, NULL, 0) != CODEC_OK) {
    printf("| %s | libjpeg-turbo refuses it | | | | | |\n", name); /* truncated.jpg */
    free(buf);
    return;
  }
  if (!info.plain) { /* cmyk.jpg: the server never gives nvJPEG what is not plain YCbCr or gray */
    printf("| %s | the CPU decodes it (not plain YCbCr or gray) | | | | | |\n", name);
    codec_image_free(&ref);
    free(buf);
    return;
  }
  enum gpu_status st = gpu_decode_file(buf, len, &got, &codec);
  check(st != GPU_FATAL, name, "a fatal CUDA error");
  double db = st == GPU_OK ? image_psnr8(&ref, &got, &maxdiff) : NAN;
  if (st == GPU_OK) {
    check(db >= 40, name, "decoded below 40 dB");
    if (db < w->db) *w = (struct worst){db, name, info.chroma};
    codec_image_free(&got);
  }
  struct encoded g90, c90, g75, c75;
  if (encode_both(&ref, 90, &g90, &c90) != 0 || encode_both(&ref, 75, &g75, &c75) != 0) {
    printf("| %s | %dx%d %s | %s | %.2f (max %d) | nvJPEG refuses to encode it: %s | | | |\n", name,
           ref.width, ref.height, info.chroma, st == GPU_OK ? codec : "libjpeg-turbo", db, maxdiff,
           gpu_ctx_error(ctx));
    codec_image_free(&ref);
    free(buf);
    return;
  }
  double r90 = (double)g90.bytes / c90.bytes, r75 = (double)g75.bytes / c75.bytes;
  int small = ref.width < 64 || ref.height < 64; /* a few blocks: not compared */
  check(small || (fabs(r90 - 1) <= 0.15 && fabs(r75 - 1) <= 0.15), name, "size beyond 15%");
  check(small || (g90.psnr >= c90.psnr - 0.5 && g75.psnr >= c75.psnr - 0.5), name,
        "encoded more than 0.5 dB worse than libjpeg-turbo");
  printf("| %s | %dx%d %s%s | %s | %.2f (max %d) | %.3f | %.2f / %.2f | %.3f | %.2f / %.2f |\n",
         name, ref.width, ref.height, info.chroma, info.progressive ? " progressive" : "",
         st == GPU_OK ? codec : "libjpeg-turbo (not taken)", db, st == GPU_OK ? maxdiff : 0, r90,
         g90.psnr, c90.psnr, r75, g75.psnr, c75.psnr);
  codec_image_free(&ref);
  free(buf);
}

/* One file through both decoders: counts divergences; a fatal error fails. */
static void replay(const char *name, const uint8_t *buf, size_t len, int *gpu_only) {
  struct codec_image a, b;
  const char *codec;
  enum codec_status cs = codec_decode(buf, len, NULL, &a, NULL, 0);
  enum gpu_status gs = gpu_decode_file(buf, len, &b, &codec);
  if (gs == GPU_FATAL) TEST_FAIL("%s: a fatal CUDA error: %s", name, gpu_ctx_error(ctx));
  if (gs == GPU_OK && cs != CODEC_OK) {
    ++*gpu_only;
    fprintf(stderr, "  %s: nvJPEG decoded it, libjpeg-turbo refuses it\n", name);
  }
  if (cs == CODEC_OK) codec_image_free(&a);
  if (gs == GPU_OK) codec_image_free(&b);
}

static void replay_all(int argc, char **argv) {
  int gpu_only = 0, n = 0;
  for (int i = 0; i < argc; i++, n++) {
    size_t len;
    uint8_t *buf = read_file(argv[i], &len);
    replay(argv[i], buf, len, &gpu_only);
    free(buf);
  }
  size_t len;
  uint8_t *rocket = read_file("tests/data/rocket.jpg", &len);
  uint8_t *copy = malloc(len);
  ASSERT(copy);
  srand(16);
  for (int k = 0; k < 400; k++, n++) { /* bytes changed past the headers (~600), or cut short */
    char name[64];
    memcpy(copy, rocket, len);
    size_t cut = k % 4 == 3 ? 600 + (size_t)rand() % (len - 600) : len;
    for (int m = 0; k % 4 != 3 && m < 1 + k % 8; m++)
      copy[600 + (size_t)rand() % (len - 600)] = (uint8_t)rand();
    snprintf(name, sizeof(name), "rocket.jpg mutant %d", k);
    replay(name, copy, cut, &gpu_only);
  }
  ASSERT(gpu_upload(ctx, &(struct cpu_image){rocket, 16, 16, 1, 8}, NULL) == GPU_OK);
  printf("replayed %d files: no fatal error; %d decoded by nvJPEG that libjpeg-turbo refuses; "
         "the device still works\n",
         n, gpu_only);
  free(copy);
  free(rocket);
}

/* The w x h pixels at (x0, y0) of the RGB image img (rows stride pixels apart) through both
 * first passes at quality, the GPU's from the device image `which` (holding exactly those pixels):
 * smooth on both or neither, and then the same arrays. Returns 1 when smooth. */
static int vp8_twins(const uint8_t *img, int stride, int x0, int y0, int w, int h,
                     enum gpu_image which, int quality) {
  char what[96];
  snprintf(what, sizeof what, "WebP first pass %dx%d at (%d, %d), quality %d", w, h, x0, y0,
           quality);
  int cw = (w + 1) / 2, n = (w + 15) / 16 * ((h + 15) / 16), q[3][3][2];
  uint8_t *y = malloc((size_t)w * h), *u = malloc((size_t)cw * ((h + 1) / 2)),
          *v = malloc((size_t)cw * ((h + 1) / 2)), *modes = malloc((size_t)n);
  int16_t *levels = malloc((size_t)n * 800);
  int8_t *last = malloc((size_t)n * 25);
  ASSERT(y && u && v && modes && levels && last);
  int smooth = codec_webp_yuv(img + ((size_t)y0 * stride + x0) * 3, (size_t)stride * 3, w, h, y, w,
                              u, v, cw);
  codec_vp8_quant(quality, q);
  struct gpu_vp8 g;
  ASSERT(gpu_vp8_analyse(ctx, which, &(struct cpu_image){NULL, w, h, 3, 8}, (const int(*)[3][2])q,
                         CODEC_WEBP_SMOOTH_STEP, CODEC_WEBP_SMOOTH_PER, &g) == GPU_OK);
  check(g.smooth == smooth, what, "smooth on the GPU as on the CPU");
  if (smooth && g.smooth) {
    uint32_t stats[1056 * 2];
    ASSERT(codec_vp8_analyse(y, w, u, v, cw, w, h, quality, modes, levels, last, stats) ==
           CODEC_OK);
    check(memcmp(modes, g.modes, (size_t)n) == 0, what, "the same modes");
    check(memcmp(stats, g.stats, sizeof stats) == 0, what, "the same token counts");
    check(memcmp(last, g.last, (size_t)n * 25) == 0, what, "the same block ends");
    check(memcmp(levels, g.levels, (size_t)n * 800) == 0, what, "the same levels");
    struct codec_vp8_mbs a = {w, h, quality, g.modes, g.levels, g.last, g.stats};
    struct codec_encode_opts o = {.format = CODEC_WEBP, .quality = quality + 1};
    struct codec_buf cpu = {NULL, 0, 0};
    uint8_t *file;
    size_t len;
    ASSERT(codec_webp_from_vp8(&a, &o, &file, &len, NULL, 0) == CODEC_OK);
    ASSERT(codec_vp8_encode(y, w, u, v, cw, w, h, quality, &cpu, NULL) == CODEC_OK);
    check(len == cpu.len && memcmp(file, cpu.data, len) == 0, what, "the same file");
    free(file), free(cpu.data);
  }
  free(y), free(u), free(v), free(modes), free(levels), free(last);
  return smooth;
}

static void webp_twins(void) {
  size_t len;
  uint8_t *jpeg = read_file("tests/data/photo_1080p.jpg", &len);
  struct codec_image photo;
  ASSERT(codec_decode(jpeg, len, NULL, &photo, NULL, 0) == CODEC_OK);
  struct cpu_image src = {photo.pixels, photo.width, photo.height, 3, 8};
  ASSERT(gpu_upload(ctx, &src, NULL) == GPU_OK);
  check(!vp8_twins(photo.pixels, photo.width, 0, 0, photo.width, photo.height, GPU_INPUT, 89),
        "photo_1080p.jpg", "the photograph is not smooth");
  const struct cpu_blur b = {CPU_YVV_BLOCKED, 12, 12, CPU_TRUNCATE, CPU_YVV_CALIBRATED};
  ASSERT(gpu_blur_resident(ctx, &b, &src, NULL, NULL) == GPU_OK);
  void *pixels;
  ASSERT(gpu_download(ctx, GPU_OUTPUT, &src, &pixels, NULL) == GPU_OK);
  uint8_t *blur = malloc(cpu_image_bytes(&src));
  ASSERT(blur != NULL);
  memcpy(blur, pixels, cpu_image_bytes(&src));
  static const int qualities[] = {0, 50, 89, 100}, crops[][4] = {{1, 3, 1917, 1077},
                                                                 {100, 100, 47, 33},
                                                                 {7, 9, 15, 3},
                                                                 {200, 200, 1, 1},
                                                                 {5, 5, 17, 16}};
  int n = 0;
  for (size_t k = 0; k < 4; k++)
    n += vp8_twins(blur, photo.width, 0, 0, photo.width, photo.height, GPU_OUTPUT, qualities[k]);
  for (size_t c = 0; c < sizeof crops / sizeof *crops; c++) {
    const int *z = crops[c];
    uint8_t *crop = malloc((size_t)z[2] * z[3] * 3);
    ASSERT(crop != NULL);
    for (int r = 0; r < z[3]; r++)
      memcpy(crop + (size_t)r * z[2] * 3, blur + ((size_t)(z[1] + r) * photo.width + z[0]) * 3,
             (size_t)z[2] * 3);
    ASSERT(gpu_upload(ctx, &(struct cpu_image){crop, z[2], z[3], 3, 8}, NULL) == GPU_OK);
    for (size_t k = 0; k < 4; k++)
      n += vp8_twins(crop, z[2], 0, 0, z[2], z[3], GPU_INPUT, qualities[k]);
    free(crop);
  }
  check(n == 24, "the blur", "smooth at every size and quality");
  /* a larger frame, 288 macroblock rows: a smooth synthetic image (two slow waves) */
  int bw = 7680, bh = 4608;
  uint8_t *big = malloc((size_t)bw * bh * 3);
  ASSERT(big != NULL);
  for (int r = 0; r < bh; r++)
    for (int c = 0; c < bw; c++)
      for (int k = 0; k < 3; k++)
        big[((size_t)r * bw + c) * 3 + k] =
            (uint8_t)(128 + 60 * sin(c / (300.0 + 50 * k)) + 50 * cos(r / (200.0 + 70 * k)));
  ASSERT(gpu_upload(ctx, &(struct cpu_image){big, bw, bh, 3, 8}, NULL) == GPU_OK);
  n += vp8_twins(big, bw, 0, 0, bw, bh, GPU_INPUT, 89);
  free(big);
  check(n == 25, "7680x4608 waves", "smooth");
  printf("WebP's first pass: %d images and qualities compared with the CPU's\n", n);
  free(blur), free(jpeg);
  codec_image_free(&photo);
}

int main(int argc, char **argv) {
  char err[512];
  const char *lib;
  if (gpu_jpeg_load(&lib, err, sizeof(err)) != 0) TEST_FAIL("%s", err);
  struct gpu_jpeg *j = gpu_jpeg_new(0, 1000, 1, 1, err, sizeof(err));
  if (!j || !(ctx = gpu_ctx_new(0, err, sizeof(err)))) TEST_FAIL("%s", err);
  if (gpu_ctx_jpeg(ctx, j) != GPU_OK) TEST_FAIL("%s", gpu_ctx_error(ctx));
  if (argc > 1 && strcmp(argv[1], "--replay") == 0) {
    replay_all(argc - 2, argv + 2);
  } else if (argc > 1 && strcmp(argv[1], "--webp") == 0) {
    webp_twins();
  } else {
    static const char *const fixtures[] = {
        "photo_1080p.jpg",       "gray_1080p.jpg",  "gray_720p.jpg", "rocket.jpg",
        "hubble_deep_field.jpg", "progressive.jpg", "gray.jpg",      "orient1.jpg",
        "orient6.jpg",           "truncated.jpg",   "cmyk.jpg"};
    struct worst w = {INFINITY, "", ""};
    printf("%s, decoder %s\n\n", lib, gpu_jpeg_decoder(j));
    printf("| file | image | GPU decoder | decode vs libjpeg-turbo, dB | q90 size ratio | q90 dB "
           "nvJPEG / libjpeg-turbo | q75 size ratio | q75 dB nvJPEG / libjpeg-turbo |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int i = 1; i < argc; i++) quality_row(argv[i], &w);
    for (size_t i = 0; argc == 1 && i < sizeof(fixtures) / sizeof(fixtures[0]); i++) {
      char path[256];
      snprintf(path, sizeof(path), "tests/data/%s", fixtures[i]);
      quality_row(path, &w);
    }
    printf("\nworst decode: %.2f dB on %s (%s): %s\n", w.db, w.file, w.chroma,
           w.db == INFINITY ? "every file decoded exactly"
           : strcmp(w.chroma, "4:4:4") == 0 || strcmp(w.chroma, "gray") == 0
               ? "no chroma upsampling there, so the IDCT (or colour conversion) differs"
               : "chroma upsampling differs (4:4:4 and gray files show the IDCT's share)");
    webp_twins();
  }
  gpu_ctx_free(ctx);
  gpu_jpeg_free(j);
  printf("%s\n", failures ? "FAILED" : "all checks held");
  return failures ? 1 : 0;
}

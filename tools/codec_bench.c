/* codec_bench: the PNG encoders side by side on one image, for bench/cpu_codecs.sh.
 *
 *   build/codec_bench png IMAGE [REPS] [LEVELS (FIRST-LAST, default 0-9)]
 *   build/codec_bench pngdec PNG...
 *   build/codec_bench webp IMAGE [QUALITY (default 90)] [REPS]
 *   build/codec_bench deflate IMAGE [REPS]
 *
 * For each compression level 0..9 (or those of LEVELS) it prints, as Markdown, the best of REPS
 * (default 3) times and the size of: libpng with zlib (libpng's adaptive filters, as blurd encoded
 * before); libpng's filtering with libdeflate's compression (libpng at level 0, whose stored stream
 * is then compressed by libdeflate at the same level: the two times added); and blurd's encoder
 * (codecs/png_write.c) with the level's own filter and with each of none, up, paeth and
 * adaptive. IMAGE is any file codec_decode reads; its channels and depth are kept, so a 16-bit
 * gray PNG measures the variance maps. pngdec times, for each PNG, the median of 11 decodes with
 * codec_decode (formats/png.c) and with libspng (its own format, palettes to RGBA8). Times are
 * milliseconds of one thread. webp times lossy WebP at each effort (libwebp's method 0..6) at
 * one quality, with the file's size and its PSNR against the image (effort 2 on a smooth image
 * is blurd's own encoder, vp8_enc.c), then libwebp alone at method 2: its RGB import and four
 * segments, and one segment at one quality step lower (blurd's file for a smooth image before
 * vp8_enc.c). deflate compresses the
 * image's filtered rows (blurd's up and paeth filters, as PNG's IDAT holds them) with each
 * candidate deflater alone: libdeflate's levels (1..8 and 12), zlib's Z_RLE and Z_HUFFMAN_ONLY
 * strategies (level 1) and blurd's run-length coder (codecs/deflate_rle.c); ms (best of REPS) and
 * bytes. */
#include <libdeflate.h>
#include <math.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <webp/decode.h>
#include <webp/encode.h>
#include <zlib.h>

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Encodes img with o reps times; returns the best time and the size in *size. */
static double time_encode(const struct codec_image *img, struct codec_encode_opts o, int reps,
                          size_t *size) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    uint8_t *out;
    double t0 = now_ms();
    if (codec_encode(img, &o, &out, size, NULL, 0) != CODEC_OK) {
      fprintf(stderr, "codec_bench: encode failed\n");
      exit(1);
    }
    double t = now_ms() - t0;
    free(out);
    if (t < best) best = t;
  }
  return best;
}

/* The concatenated IDAT data of png; a malloc'd buffer of *n bytes. */
static uint8_t *idat_of(const uint8_t *png, size_t len, size_t *n) {
  uint8_t *z = malloc(len);
  *n = 0;
  for (size_t p = 8; z && p + 12 <= len;) {
    size_t clen = (size_t)png[p] << 24 | png[p + 1] << 16 | png[p + 2] << 8 | png[p + 3];
    if (memcmp(png + p + 4, "IDAT", 4) == 0) memcpy(z + *n, png + p + 8, clen), *n += clen;
    p += clen + 12;
  }
  return z;
}

/* libpng's filtering at level 0, then libdeflate at level: the time of both, the zlib size. */
static double libpng_libdeflate(const struct codec_image *img, int level, int reps, size_t *size) {
  size_t raw_cap = (size_t)img->height * ((size_t)img->width * img->channels * img->depth / 8 + 1);
  struct codec_encode_opts o = {
      .format = CODEC_PNG, .quality = 90, .compression = 0, .lossless = 0, .png_libpng = 1};
  size_t len, zn;
  double t_png = time_encode(img, o, reps, &len), best = 1e30;
  uint8_t *png, *raw = malloc(raw_cap);
  codec_encode(img, &o, &png, &len, NULL, 0);
  uint8_t *z = idat_of(png, len, &zn);
  struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
  size_t raw_len = 0;
  libdeflate_zlib_decompress(d, z, zn, raw, raw_cap, &raw_len);
  libdeflate_free_decompressor(d);
  for (int r = 0; r < reps; r++) {
    double t0 = now_ms();
    struct libdeflate_compressor *c = libdeflate_alloc_compressor(level);
    size_t bound = libdeflate_zlib_compress_bound(c, raw_len);
    uint8_t *out = malloc(bound);
    *size = libdeflate_zlib_compress(c, raw, raw_len, out, bound) + (len - zn);
    libdeflate_free_compressor(c);
    free(out);
    double t = now_ms() - t0;
    if (t < best) best = t;
  }
  free(png);
  free(z);
  free(raw);
  return t_png + best;
}

/* One libspng decode of png; exits when it fails. */
static void spng_decode_once(const uint8_t *png, size_t len) {
  spng_ctx *c = spng_ctx_new(0);
  struct spng_ihdr h;
  size_t n;
  int e = c ? spng_set_png_buffer(c, png, len) : 1;
  if (!e) e = spng_get_ihdr(c, &h);
  int fmt = !e && h.color_type == SPNG_COLOR_TYPE_INDEXED ? SPNG_FMT_RGBA8 : SPNG_FMT_PNG;
  if (!e) e = spng_decoded_image_size(c, fmt, &n);
  uint8_t *px = e ? NULL : malloc(n);
  if (px) e = spng_decode_image(c, px, n, fmt, SPNG_DECODE_TRNS);
  spng_ctx_free(c);
  free(px);
  if (e || !px) {
    fprintf(stderr, "codec_bench: libspng cannot decode the file\n");
    exit(1);
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define DECODE_REPS 11

static int decode_bench(int n, char **paths) {
  for (int i = 0; i < n; i++) {
    FILE *f = fopen(paths[i], "rb");
    long len = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    uint8_t *buf = len > 0 ? malloc((size_t)len) : NULL;
    if (!buf || fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)len, f) != (size_t)len) {
      fprintf(stderr, "codec_bench: cannot read %s\n", paths[i]);
      return 1;
    }
    fclose(f);
    double t_png[DECODE_REPS], t_spng[DECODE_REPS];
    for (int r = 0; r < DECODE_REPS; r++) {
      struct codec_image img;
      double t0 = now_ms();
      if (codec_decode(buf, (size_t)len, NULL, &img, NULL, 0) != CODEC_OK) return 1;
      double t1 = now_ms();
      codec_image_free(&img);
      double t2 = now_ms();
      spng_decode_once(buf, (size_t)len);
      t_png[r] = t1 - t0;
      t_spng[r] = now_ms() - t2;
    }
    qsort(t_png, DECODE_REPS, sizeof(double), cmp_double);
    qsort(t_spng, DECODE_REPS, sizeof(double), cmp_double);
    const char *name = strrchr(paths[i], '/');
    printf("| %s | %.1f | %.1f |\n", name ? name + 1 : paths[i], t_png[DECODE_REPS / 2],
           t_spng[DECODE_REPS / 2]);
    free(buf);
  }
  return 0;
}

static double psnr8(const struct codec_image *a, const struct codec_image *b) {
  size_t n = (size_t)a->width * a->height * a->channels;
  double se = 0;
  for (size_t i = 0; i < n; i++)
    se += (a->pixels[i] - b->pixels[i]) * (double)(a->pixels[i] - b->pixels[i]);
  return se == 0 ? 99 : 10 * log10(255.0 * 255.0 * n / se);
}

/* libwebp alone at method 2 and quality: its default preset, its RGB import and `segments`
 * segments: four as formats/webp.c encodes a detailed image (and encoded every one before its
 * one-segment rule), one at quality - 1 as it encoded a smooth one before vp8_enc.c. The best of
 * reps times in ms; *size and *db: the file's bytes and PSNR. */
static double webp_plain(const struct codec_image *img, int quality, int segments, int reps,
                         size_t *size, double *db) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    uint8_t *out;
    WebPConfig c;
    WebPPicture pic;
    WebPMemoryWriter w;
    double t0 = now_ms();
    if (!WebPConfigPreset(&c, WEBP_PRESET_DEFAULT, (float)quality) || !WebPPictureInit(&pic))
      exit(1);
    c.method = 2;
    c.segments = segments;
    pic.width = img->width;
    pic.height = img->height;
    WebPMemoryWriterInit(&w);
    pic.writer = WebPMemoryWrite;
    pic.custom_ptr = &w;
    if (!WebPPictureImportRGB(&pic, img->pixels, img->width * 3) || !WebPEncode(&c, &pic)) exit(1);
    double t = now_ms() - t0;
    WebPPictureFree(&pic);
    if (t < best) best = t;
    struct codec_image back = {NULL, 0, 0, 3, 8, CODEC_WEBP, 1};
    back.pixels = out = WebPDecodeRGB(w.mem, w.size, &back.width, &back.height);
    if (out == NULL) exit(1);
    *size = w.size;
    *db = psnr8(img, &back);
    WebPFree(out);
    WebPMemoryWriterClear(&w);
  }
  return best;
}

static int webp_bench(const char *path, int quality, int reps) {
  struct codec_image img;
  if (codec_decode_file(path, &img) != CODEC_OK || img.depth != 8 || img.channels != 3) {
    fprintf(stderr, "codec_bench: webp needs an 8-bit RGB image\n");
    return 1;
  }
  printf("| effort | ms | bytes | PSNR dB |\n|---|---|---|---|\n");
  for (int effort = 0; effort <= 6; effort++) {
    struct codec_encode_opts o = {.format = CODEC_WEBP,
                                  .quality = quality,
                                  .compression = 0,
                                  .lossless = 0,
                                  .effort = effort,
                                  .effort_set = 1};
    size_t size;
    double t = time_encode(&img, o, reps, &size);
    uint8_t *out;
    struct codec_image back;
    codec_encode(&img, &o, &out, &size, NULL, 0);
    if (codec_decode(out, size, NULL, &back, NULL, 0) != CODEC_OK) return 1;
    printf("| %d | %.1f | %zu | %.2f |\n", effort, t, size, psnr8(&img, &back));
    codec_image_free(&back);
    free(out);
  }
  size_t size = 0;
  double db = 0, t = webp_plain(&img, quality, 4, reps, &size, &db);
  printf("| 2, libwebp alone (four segments) | %.1f | %zu | %.2f |\n", t, size, db);
  t = webp_plain(&img, quality - 1, 1, reps, &size, &db);
  printf("| 2, libwebp alone, one segment at %d | %.1f | %zu | %.2f |\n", quality - 1, t, size, db);
  codec_image_free(&img);
  return 0;
}

/* The filtered rows of img (filter f for every row): blurd's stored PNG, its IDAT inflated. */
static uint8_t *filtered_rows(const struct codec_image *img, enum codec_png_filter f, size_t *n) {
  struct codec_encode_opts o = {.format = CODEC_PNG, .compression = 0, .png_filter = f};
  uint8_t *png, *z;
  size_t len, zn;
  *n = (size_t)img->height * ((size_t)img->width * img->channels * img->depth / 8 + 1);
  uint8_t *raw = malloc(*n);
  codec_encode(img, &o, &png, &len, NULL, 0);
  z = idat_of(png, len, &zn);
  uLongf got = *n;
  if (!raw || uncompress(raw, &got, z, zn) != Z_OK || got != *n) exit(1);
  free(png);
  free(z);
  return raw;
}

/* zlib at level 1 with strategy; the best time of reps, the size in *size. */
static double time_zlib(const uint8_t *raw, size_t n, int strategy, int reps, size_t *size) {
  double best = 1e30;
  uLong cap = compressBound(n);
  uint8_t *out = malloc(cap);
  for (int r = 0; r < reps; r++) {
    z_stream z = {0};
    double t0 = now_ms();
    deflateInit2(&z, 1, Z_DEFLATED, 15, 8, strategy);
    z.next_in = (Bytef *)raw, z.avail_in = (uInt)n, z.next_out = out, z.avail_out = (uInt)cap;
    deflate(&z, Z_FINISH);
    *size = z.total_out;
    deflateEnd(&z);
    double t = now_ms() - t0;
    if (t < best) best = t;
  }
  free(out);
  return best;
}

static int deflate_bench(const char *path, int reps) {
  struct codec_image img;
  if (codec_decode_file(path, &img) != CODEC_OK) return 1;
  static const enum codec_png_filter filters[] = {CODEC_PNG_FILTER_UP, CODEC_PNG_FILTER_PAETH};
  printf("| deflater | after up: ms, bytes | after paeth: ms, bytes |\n|---|---|---|\n");
  uint8_t *raw[2];
  size_t n = 0, size = 0;
  for (int f = 0; f < 2; f++) raw[f] = filtered_rows(&img, filters[f], &n);
  uint8_t *out = malloc(codec_deflate_rle_bound(n) + n);
  for (int f = 0, level = 1; level <= 12; level++, f = 0) {
    if (level > 8 && level < 12) continue; /* 9..11: slower than 8, larger than 12 */
    printf("| libdeflate %d |", level);
    for (; f < 2; f++) {
      double best = 1e30;
      for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        struct libdeflate_compressor *c = libdeflate_alloc_compressor(level);
        size = libdeflate_zlib_compress(c, raw[f], n, out, codec_deflate_rle_bound(n) + n);
        libdeflate_free_compressor(c);
        best = fmin(best, now_ms() - t0);
      }
      printf(" %.1f, %zu |", best, size);
    }
    printf("\n");
  }
  static const int strategies[] = {Z_RLE, Z_HUFFMAN_ONLY};
  static const char *names[] = {"zlib 1 Z_RLE", "zlib 1 Z_HUFFMAN_ONLY"};
  for (int s = 0; s < 2; s++) {
    printf("| %s |", names[s]);
    for (int f = 0; f < 2; f++) {
      double t = time_zlib(raw[f], n, strategies[s], reps, &size);
      printf(" %.1f, %zu |", t, size);
    }
    printf("\n");
  }
  printf("| blurd run-length coder |");
  for (int f = 0; f < 2; f++) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
      double t0 = now_ms();
      size = codec_deflate_rle(raw[f], n, out);
      best = fmin(best, now_ms() - t0);
    }
    printf(" %.1f, %zu |", best, size);
  }
  printf("\n");
  free(out);
  free(raw[0]);
  free(raw[1]);
  codec_image_free(&img);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "deflate") == 0)
    return deflate_bench(argv[2], argc > 3 ? atoi(argv[3]) : 3);
  if (argc >= 3 && strcmp(argv[1], "webp") == 0)
    return webp_bench(argv[2], argc > 3 ? atoi(argv[3]) : 90, argc > 4 ? atoi(argv[4]) : 3);
  if (argc >= 3 && strcmp(argv[1], "pngdec") == 0) {
    printf("| PNG | blurd ms | libspng ms |\n|---|---|---|\n");
    return decode_bench(argc - 2, argv + 2);
  }
  if (argc < 3 || strcmp(argv[1], "png") != 0) {
    fprintf(stderr,
            "usage: codec_bench png IMAGE [REPS] [FIRST-LAST] | codec_bench deflate IMAGE "
            "[REPS] | codec_bench pngdec PNG... | codec_bench webp IMAGE [QUALITY] [REPS]\n");
    return 2;
  }
  int reps = argc > 3 ? atoi(argv[3]) : 3, first = 0, last = 9;
  if (argc > 4 && (sscanf(argv[4], "%d-%d", &first, &last) != 2 || first < 0 || last > 9)) {
    fprintf(stderr, "codec_bench: levels are FIRST-LAST within 0-9, not %s\n", argv[4]);
    return 2;
  }
  struct codec_image img;
  if (codec_decode_file(argv[2], &img) != CODEC_OK) {
    fprintf(stderr, "codec_bench: cannot decode %s\n", argv[2]);
    return 1;
  }
  static const char *names[] = {"level's", "none", "sub", "up", "paeth", "adaptive"};
  printf("%dx%d, %d channels of %d bits; ms and bytes, best of %d\n\n", img.width, img.height,
         img.channels, img.depth, reps);
  printf("| level | libpng+zlib | libpng+libdeflate |");
  for (int f = 0; f <= CODEC_PNG_FILTER_ADAPTIVE; f++)
    if (f != CODEC_PNG_FILTER_SUB) printf(" blurd %s |", names[f]);
  printf("\n|---|---|---|---|---|---|---|---|\n");
  for (int level = first; level <= last; level++) {
    size_t size;
    struct codec_encode_opts o = {
        .format = CODEC_PNG, .quality = 90, .compression = level, .lossless = 0, .png_libpng = 1};
    double t = time_encode(&img, o, reps, &size);
    printf("| %d | %.1f %zu |", level, t, size);
    t = libpng_libdeflate(&img, level, reps, &size);
    printf(" %.1f %zu |", t, size);
    o.png_libpng = 0;
    for (int f = 0; f <= CODEC_PNG_FILTER_ADAPTIVE; f++) {
      if (f == CODEC_PNG_FILTER_SUB) continue;
      o.png_filter = (enum codec_png_filter)f;
      t = time_encode(&img, o, reps, &size);
      printf(" %.1f %zu |", t, size);
    }
    printf("\n");
    fflush(stdout);
  }
  codec_image_free(&img);
  return 0;
}

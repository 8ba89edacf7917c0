/* format_encode: writes an image as AVIF or JPEG XL with the new formats' encoders
 * (codecs/heif.c, codecs/jxl.c, called directly) and measures the result, for
 * docs/engineering-notes.md's quality tables.
 *
 *   build/format_encode avif|jxl IN OUT [QUALITY (default 75)] [EFFORT (0..6, default 2)]
 *                       [lossless]
 *
 * IN is any file codec_decode reads. Prints the encode's milliseconds (wall clock; the best of
 * three encodes), the file's bytes, bits a pixel, and the PSNR of the file decoded again by
 * blurd's decoder (codec_heif_decode, codec_jxl_decode) against IN's 8-bit samples (16-bit
 * samples scaled to 8 bits, alpha ignored); "inf" when they are equal. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../codecs/codecs.h"
#include "../codecs/codecs_int.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static unsigned sample8(const struct codec_image *img, size_t px, int c) {
  size_t i = px * (size_t)img->channels + (size_t)c;
  if (img->depth == 8) return img->pixels[i];
  uint16_t v;
  memcpy(&v, img->pixels + 2 * i, 2);
  return (v * 255u + 32767u) / 65535u;
}

/* PSNR of b against a over their colour samples, in 8 bits. */
static double psnr(const struct codec_image *a, const struct codec_image *b) {
  int colours = a->channels <= 2 ? 1 : 3;
  double se = 0;
  size_t n = (size_t)a->width * (size_t)a->height;
  for (size_t i = 0; i < n; i++)
    for (int c = 0; c < colours; c++) {
      double d = (double)sample8(a, i, c) - (double)sample8(b, i, b->channels <= 2 ? 0 : c);
      se += d * d;
    }
  return se == 0 ? INFINITY : 10 * log10(255.0 * 255.0 * (double)(n * colours) / se);
}

int main(int argc, char **argv) {
  if (argc < 4 || (strcmp(argv[1], "avif") != 0 && strcmp(argv[1], "jxl") != 0)) {
    fprintf(stderr, "usage: format_encode avif|jxl IN OUT [QUALITY] [EFFORT] [lossless]\n");
    return 2;
  }
  int avif = strcmp(argv[1], "avif") == 0;
  struct codec_image img, back;
  if (codec_decode_file(argv[2], &img) != CODEC_OK) {
    fprintf(stderr, "format_encode: cannot decode %s\n", argv[2]);
    return 1;
  }
  struct codec_encode_opts o = {.format = CODEC_NONE,
                                .quality = argc > 4 ? atoi(argv[4]) : 75,
                                .effort = argc > 5 ? atoi(argv[5]) : 2,
                                .effort_set = 1,
                                .lossless = argc > 6 && strcmp(argv[6], "lossless") == 0};
  uint8_t *file = NULL;
  size_t len = 0;
  char msg[256] = "";
  double best = INFINITY;
  for (int rep = 0; rep < 3; rep++) {
    free(file);
    double t0 = now_ms();
    enum codec_status st = avif ? codec_avif_encode(&img, &o, &file, &len, msg, sizeof msg)
                                : codec_jxl_encode(&img, &o, &file, &len, msg, sizeof msg);
    double t = now_ms() - t0;
    if (st != CODEC_OK) {
      fprintf(stderr, "format_encode: %s (%s)\n", codec_status_msg(st), msg);
      return 1;
    }
    best = t < best ? t : best;
  }
  FILE *f = fopen(argv[3], "wb");
  if (f == NULL || fwrite(file, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "format_encode: cannot write %s\n", argv[3]);
    return 1;
  }
  enum codec_status st = avif ? codec_heif_decode(file, len, NULL, &back, msg, sizeof msg)
                              : codec_jxl_decode(file, len, NULL, &back, msg, sizeof msg);
  if (st != CODEC_OK || back.width != img.width || back.height != img.height) {
    fprintf(stderr, "format_encode: the file does not decode back (%s)\n", msg);
    return 1;
  }
  printf("%s quality %d effort %d%s: %.1f ms, %zu bytes, %.3f bits/px, PSNR %.2f dB\n", argv[1],
         o.quality, o.effort, o.lossless ? " lossless" : "", best, len,
         8.0 * (double)len / ((double)img.width * img.height), psnr(&img, &back));
  codec_image_free(&back);
  codec_image_free(&img);
  free(file);
  return 0;
}

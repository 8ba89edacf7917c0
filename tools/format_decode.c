/* format_decode: reads an image file of any format the table reads (codecs/formats.c) with its
 * decoder, for bench/cpu_codecs.sh, the cost calibration and looking at what they give.
 *
 *   build/format_decode IN [OUT]
 *
 * Picks the decoder by IN's magic bytes, decodes it without limits and prints its size,
 * channels, depth, orientation, ICC profile bytes and the decode's milliseconds (wall clock and
 * the process's CPU). With OUT it also writes the pixels: as PNG when OUT ends in .png, else as
 * raw samples in host order (what `vips copy IN OUT.v` writes, less its header). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../codecs/codecs.h"

static double now_ms(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static uint8_t *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  long n = -1;
  if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc(n > 0 ? (size_t)n : 1)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n) {
    fclose(f);
    *len = (size_t)n;
    return buf;
  }
  if (f) fclose(f);
  free(buf);
  return NULL;
}

static int write_out(const char *path, const struct codec_image *img) {
  size_t n = (size_t)img->width * img->height * img->channels * (img->depth / 8);
  uint8_t *png = NULL;
  const uint8_t *data = img->pixels;
  size_t len = strlen(path);
  if (len > 4 && strcmp(path + len - 4, ".png") == 0) {
    struct codec_encode_opts o = {.format = CODEC_PNG, .quality = 90, .compression = 2};
    char msg[256] = "";
    if (codec_encode(img, &o, &png, &n, msg, sizeof msg) != CODEC_OK) {
      fprintf(stderr, "format_decode: PNG encode: %s\n", msg);
      return 1;
    }
    data = png;
  }
  FILE *f = fopen(path, "wb");
  int bad = f == NULL || fwrite(data, 1, n, f) != n;
  if (f && fclose(f) != 0) bad = 1;
  free(png);
  if (bad) fprintf(stderr, "format_decode: cannot write %s\n", path);
  return bad;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: format_decode IN [OUT.png | OUT]\n");
    return 2;
  }
  size_t len;
  uint8_t *buf = read_all(argv[1], &len);
  if (buf == NULL) {
    fprintf(stderr, "format_decode: cannot read %s\n", argv[1]);
    return 1;
  }
  const struct codec_format_desc *d = codec_format(codec_sniff(buf, len));
  if (d == NULL || d->decode == NULL) {
    fprintf(stderr, "format_decode: %s is in no format blurd reads\n", argv[1]);
    return 1;
  }
  struct codec_image img;
  char msg[256] = "";
  double t0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
  enum codec_status st = d->decode(buf, len, NULL, &img, msg, sizeof msg);
  double t1 = now_ms(CLOCK_MONOTONIC), c1 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
  if (st != CODEC_OK) {
    fprintf(stderr, "format_decode: %s: %s (%s)\n", argv[1], codec_status_msg(st), msg);
    return 1;
  }
  uint8_t *icc = NULL;
  size_t icc_len = 0;
  codec_icc_read(buf, len, &icc, &icc_len);
  printf("%s %dx%d, %d channels of %d bits, orientation %d, ICC %zu bytes: %.1f ms, CPU %.1f ms\n",
         d->name, img.width, img.height, img.channels, img.depth, img.orientation, icc_len, t1 - t0,
         c1 - c0);
  int rc = argc == 3 ? write_out(argv[2], &img) : 0;
  free(icc);
  codec_image_free(&img);
  free(buf);
  return rc;
}

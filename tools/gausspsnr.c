/* The PSNR of a blurred image against the exact Gaussian of its source, as blurd's X-PSNR measures
 * it (cpu_measure: double precision, colour premultiplied), for outputs made elsewhere, such as
 * libvips' (bench/cpu_vips.sh). Both files are decoded with blurd's codecs and must have the same
 * shape.
 *   gausspsnr SOURCE BLURRED SIGMA     prints "psnr_db=… max_abs=…" */
#include "../codecs/codecs.h"
#include "../cpu/cpu.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  struct codec_image src = {0}, out = {0};
  if (argc != 4) {
    fprintf(stderr, "usage: gausspsnr SOURCE BLURRED SIGMA\n");
    return 2;
  }
  if (codec_decode_file(argv[1], &src) != CODEC_OK ||
      codec_decode_file(argv[2], &out) != CODEC_OK) {
    fprintf(stderr, "gausspsnr: cannot decode %s or %s\n", argv[1], argv[2]);
    return 1;
  }
  if (src.width != out.width || src.height != out.height || src.channels != out.channels ||
      src.depth != out.depth) {
    fprintf(stderr, "gausspsnr: %s is %dx%dx%d, %s is %dx%dx%d\n", argv[1], src.width, src.height,
            src.channels, argv[2], out.width, out.height, out.channels);
    return 1;
  }
  struct cpu_image a = {src.pixels, src.width, src.height, src.channels, src.depth};
  struct cpu_image b = {out.pixels, out.width, out.height, out.channels, out.depth};
  struct cpu_pool *pool = cpu_pool_new(cpu_cores("", (char[256]){0}, 256));
  struct cpu_accuracy acc;
  double sigma = atof(argv[3]); /* the same on both axes */
  enum err e = cpu_measure(pool, sigma, sigma, &a, &b, &acc);
  if (e == ERR_OK)
    printf("psnr_db=%.2f max_abs=%.3f\n", acc.psnr, acc.max_abs);
  else
    fprintf(stderr, "gausspsnr: %s: %s\n", err_code(e), err_message(e));
  cpu_pool_free(pool);
  codec_image_free(&src);
  codec_image_free(&out);
  return e == ERR_OK ? 0 : 1;
}

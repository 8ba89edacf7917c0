/* fuzz/png.c: libFuzzer target for the PNG decoder (formats/png.c through codec_decode) and the
 * encoders. Every input's bytes, as they are, first go through the PNG encoder's run-length coder
 * (codecs/deflate_rle.c) whole and in two parts, which libdeflate must inflate back exactly.
 * Inputs that do not start with the PNG signature are then skipped, so the fuzzer spends its
 * time inside libpng and png.c; whatever decodes is encoded back as PNG (which must give the same
 * pixels) and as JPEG. See fuzz.h and fuzz/README.md. */
#include <libdeflate.h>

#include "../codecs/codecs_int.h"
#include "fuzz.h"

/* z[0..zn), inflated by libdeflate, is data[0..size). */
static void fuzz_inflates_to(const uint8_t *z, size_t zn, const uint8_t *data, size_t size) {
  struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
  uint8_t *back = malloc(size + 1);
  size_t got = 0;
  FUZZ_CHECK(d != NULL && back != NULL);
  FUZZ_CHECK(libdeflate_zlib_decompress(d, z, zn, back, size + 1, &got) == LIBDEFLATE_SUCCESS);
  FUZZ_CHECK(got == size && (size == 0 || memcmp(back, data, size) == 0));
  libdeflate_free_decompressor(d);
  free(back);
}

/* The run-length coder's stream of data within codec_deflate_rle_bound, and its two parts cut
 * where the first byte says (as png_write.c joins its parts), each within its bound. */
static void fuzz_deflate_rle(const uint8_t *data, size_t size) {
  size_t cut = size ? data[0] * size / 256 : 0;
  size_t cap = codec_deflate_rle_bound(size) + codec_deflate_rle_part_bound(cut) +
               codec_deflate_rle_part_bound(size - cut);
  uint8_t *z = malloc(cap);
  FUZZ_CHECK(z != NULL);
  size_t zn = codec_deflate_rle(data, size, z);
  FUZZ_CHECK(zn > 0 && zn <= codec_deflate_rle_bound(size));
  fuzz_inflates_to(z, zn, data, size);
  size_t a = codec_deflate_rle_part(data, 0, cut, 0, z + 2);
  FUZZ_CHECK(a > 0 && a <= codec_deflate_rle_part_bound(cut));
  size_t b = codec_deflate_rle_part(data, cut, size, 1, z + 2 + a);
  FUZZ_CHECK(b > 0 && b <= codec_deflate_rle_part_bound(size - cut));
  z[0] = 0x78, z[1] = 0x01;
  codec_put_be32(z + 2 + a + b, libdeflate_adler32(1, data, size));
  fuzz_inflates_to(z, 2 + a + b + 4, data, size);
  free(z);
}

int fuzz_png(const uint8_t *data, size_t size) {
  fuzz_deflate_rle(data, size);
  return fuzz_codec(data, size, CODEC_PNG);
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_png(data, size);
  return 0;
}
#endif

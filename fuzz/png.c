/* fuzz/png.c: libFuzzer target for the PNG decoder (codecs/png.c through codec_decode) and the
 * encoders. Inputs that do not start with the PNG signature are skipped, so the fuzzer spends its
 * time inside libpng and png.c; whatever decodes is encoded back as PNG (which must give the same
 * pixels) and as JPEG. See fuzz.h and fuzz/README.md. */
#include "fuzz.h"

int fuzz_png(const uint8_t *data, size_t size) {
  return fuzz_codec(data, size, CODEC_PNG);
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_png(data, size);
  return 0;
}
#endif

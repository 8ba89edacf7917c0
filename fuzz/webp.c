/* fuzz/webp.c: libFuzzer target for the WebP decoder (formats/webp.c through codec_decode) and the
 * encoders. Inputs that do not start with "RIFF....WEBP" are skipped, so the fuzzer spends its
 * time inside libwebp and webp.c; whatever decodes is encoded back as PNG (which must give the
 * same pixels), as JPEG and as lossless WebP (the same pixels again). See fuzz.h and
 * fuzz/README.md. */
#include "fuzz.h"

int fuzz_webp(const uint8_t *data, size_t size) {
  return fuzz_codec(data, size, CODEC_WEBP);
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_webp(data, size);
  return 0;
}
#endif

/* fuzz/jpeg.c: libFuzzer target for the JPEG decoder (formats/jpeg.c and the EXIF orientation in
 * codecs/exif.c, through codec_decode) and the encoders. Inputs that do not start with the JPEG
 * SOI marker are skipped, so the fuzzer spends its time inside libjpeg and jpeg.c; whatever
 * decodes is encoded back as PNG (which must give the same pixels) and as JPEG. See fuzz.h and
 * fuzz/README.md. */
#include "fuzz.h"

int fuzz_jpeg(const uint8_t *data, size_t size) {
  return fuzz_codec(data, size, CODEC_JPEG);
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_jpeg(data, size);
  return 0;
}
#endif

/* fuzz/jxl.c: libFuzzer target for the JPEG XL decoder (codecs/jxl.c: libjxl fed in pieces, the
 * limits at the basic info, the orientation read apart) and its ICC reader. Inputs that are
 * neither a bare codestream (FF 0A) nor the container are skipped; whatever decodes is encoded
 * back as PNG, which must give the same pixels. See formats.h and fuzz/README.md. */
#include "formats.h"

int fuzz_jxl(const uint8_t *data, size_t size) {
  return fuzz_format(data, size, CODEC_JXL, CODEC_NONE);
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_jxl(data, size);
  return 0;
}
#endif

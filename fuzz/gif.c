/* fuzz/gif.c: libFuzzer target for the GIF decoder (codecs/gif.c: giflib over the buffer, the
 * records before the first frame, the frame composed onto the screen, interlaced rows) and its
 * ICC reader. Inputs that do not start GIF87a or GIF89a are skipped; whatever decodes is encoded
 * back as PNG, which must give the same pixels. See formats.h and fuzz/README.md. */
#include "formats.h"

int fuzz_gif(const uint8_t *data, size_t size) {
  return fuzz_format(data, size, CODEC_GIF, CODEC_NONE);
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_gif(data, size);
  return 0;
}
#endif

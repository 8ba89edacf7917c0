/* fuzz/tiff.c: libFuzzer target for the TIFF decoder (codecs/tiff.c: libtiff over the buffer,
 * the tags, strips and tiles unpacked at every bit depth and planar layout, palettes, CMYK,
 * alpha, libtiff's RGBA interface, the orientation) and its ICC reader. Inputs that do not start
 * II* / MM* (or BigTIFF's II+ / MM+) are skipped; whatever decodes is encoded back as PNG, which
 * must give the same pixels. See formats.h and fuzz/README.md. */
#include "formats.h"

int fuzz_tiff(const uint8_t *data, size_t size) {
  return fuzz_format(data, size, CODEC_TIFF, CODEC_NONE);
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_tiff(data, size);
  return 0;
}
#endif

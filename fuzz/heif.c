/* fuzz/heif.c: libFuzzer target for the HEIC and AVIF decoder (codecs/heif.c: libheif's reading,
 * the box reader, the tiles decoded by libde265 and dav1d, the YCbCr conversion, libheif's own
 * decode for what the tile path leaves) and its ICC reader (colr profiles, nclx made into ICC).
 * Inputs whose ftyp box is neither HEIC nor AVIF are skipped; whatever decodes is encoded back as
 * PNG, which must give the same pixels. See formats.h and fuzz/README.md. */
#include "formats.h"

int fuzz_heif(const uint8_t *data, size_t size) {
  return fuzz_format(data, size, CODEC_HEIC, CODEC_AVIF);
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_heif(data, size);
  return 0;
}
#endif

/* fuzz/multipart.c: libFuzzer target for the multipart/form-data parser (http/multipart.c). The
 * first line of the input (up to '\n') is the Content-Type header, the rest is the body. Every
 * part must have a name and lie inside the body; every failure must say why. */
#include "fuzz.h"

#include "../api/api_int.h"

int fuzz_multipart(const uint8_t *data, size_t size) {
  const uint8_t *nl = memchr(data, '\n', size);
  const uint8_t *body = nl ? nl + 1 : data + size;
  size_t len = size - (size_t)(body - data);
  char *content_type = strndup((const char *)data, nl ? (size_t)(nl - data) : size);
  struct http_part parts[HTTP_PARTS_MAX];
  int n = -1;
  char msg[256] = "";
  if (!content_type) return -1;
  enum err e = http_multipart_parse(content_type, body, len, parts, &n, msg, sizeof(msg));
  FUZZ_CHECK(n >= 0 && n <= HTTP_PARTS_MAX);
  FUZZ_CHECK(e == ERR_OK || (e == ERR_BAD_MULTIPART && msg[0] != 0));
  for (int i = 0; i < n; i++) {
    FUZZ_CHECK(parts[i].name != NULL);
    FUZZ_CHECK(parts[i].data >= body && parts[i].len <= len);
    FUZZ_CHECK((size_t)(parts[i].data - body) <= len - parts[i].len);
  }
  http_multipart_free(parts, n);
  free(content_type);
  return (int)e;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_multipart(data, size);
  return 0;
}
#endif

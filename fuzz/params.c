/* fuzz/params.c: libFuzzer target for the /blur parameters (api/params.c): the query string,
 * percent escapes, the JSON text of the params field, and the checks between them. The input is
 * split at its first NUL or newline: before it the query string, after it the JSON text (no
 * separator: no params field). Accepted values must be in range; every error is a 400 with a
 * sentence. */
#include "fuzz.h"

#include "../api/api_int.h"

#include <math.h>

static void check_blur_params(const struct blur_params *p) {
  FUZZ_CHECK(p->method >= 0 && p->method <= METHOD_AUTO);
  FUZZ_CHECK(isfinite(p->sigma) && p->sigma >= CPU_SIGMA_MIN && p->sigma <= CPU_SIGMA_MAX);
  FUZZ_CHECK(isfinite(p->truncate) && p->truncate >= 1 && p->truncate <= 8);
  FUZZ_CHECK(p->coeffs >= 0 && p->coeffs <= CPU_YVV_CALIBRATED);
  FUZZ_CHECK(p->format >= 0 && p->format <= 2);
  FUZZ_CHECK(p->quality >= 1 && p->quality <= 100);
  FUZZ_CHECK(p->compression >= 0 && p->compression <= 9);
  FUZZ_CHECK(p->psnr == 0 || p->psnr == 1);
}

int fuzz_params(const uint8_t *data, size_t size) {
  size_t qlen = 0;
  while (qlen < size && data[qlen] != 0 && data[qlen] != '\n') qlen++;
  char *query = strndup((const char *)data, qlen);
  const char *json = qlen < size ? (const char *)data + qlen + 1 : NULL;
  size_t json_len = json ? size - qlen - 1 : 0;
  struct blur_params p;
  char msg[512] = "";
  if (!query) return -1;
  memset(&p, 0x5a, sizeof(p));
  enum api_error e = params_parse(&api_blur_endpoint, query, json, json_len, &p, msg, sizeof(msg));
  if (e == API_OK)
    check_blur_params(&p);
  else
    FUZZ_CHECK(api_error_status(e) == 400 && msg[0] != 0);
  free(query);
  return (int)e;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_params(data, size);
  return 0;
}
#endif

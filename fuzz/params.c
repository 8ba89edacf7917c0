/* fuzz/params.c: libFuzzer target for the parameters of every image endpoint (api/params.c):
 * the query string, percent escapes, the JSON text of the params field (with /convolve's kernel
 * matrices), and the checks between them. The input is split at its first NUL or newline: before
 * it the query string, after it the JSON text (no separator: no params field); each endpoint
 * parses it. Accepted values must be in range; every error is a 400 with a sentence. */
#include "fuzz.h"

#include "../api/api_int.h"

#include <math.h>

static void check_blur_params(const struct blur_params *p, int sharpen) {
  FUZZ_CHECK(p->method >= 0 && p->method <= METHOD_AUTO);
  FUZZ_CHECK(isfinite(p->sigma_x) && p->sigma_x >= CPU_SIGMA_MIN && p->sigma_x <= CPU_SIGMA_MAX);
  FUZZ_CHECK(isfinite(p->sigma_y) && p->sigma_y >= CPU_SIGMA_MIN && p->sigma_y <= CPU_SIGMA_MAX);
  if (sharpen) {
    FUZZ_CHECK(isfinite(p->amount) && p->amount >= 0 && p->amount <= 10);
    FUZZ_CHECK(isfinite(p->threshold) && p->threshold >= 0 && p->luma >= 0 && p->luma <= 1);
  } else { /* /sharpen has no regions */
    FUZZ_CHECK(p->regions.n >= 0 && p->regions.n <= API_REGIONS_MAX);
    for (int i = 0; i < p->regions.n; i++)
      FUZZ_CHECK(p->regions.r[i][2] >= 1 && p->regions.r[i][3] >= 1 &&
                 abs(p->regions.r[i][0]) <= API_REGION_COORD &&
                 p->regions.r[i][2] <= API_REGION_COORD);
    FUZZ_CHECK(p->feather >= 0 && p->feather <= 1024 && (p->feather == 0 || p->regions.n > 0));
  }
  FUZZ_CHECK(isfinite(p->truncate) && p->truncate >= 1 && p->truncate <= 8);
  FUZZ_CHECK(p->coeffs >= 0 && p->coeffs <= CPU_YVV_CALIBRATED);
  FUZZ_CHECK(p->format >= 0 && p->format <= 3);
  FUZZ_CHECK(p->quality >= 1 && p->quality <= 100);
  FUZZ_CHECK(p->compression >= 0 && p->compression <= 9);
  FUZZ_CHECK(p->psnr == 0 || p->psnr == 1);
}

static void check_var_params(const struct var_params *p) {
  FUZZ_CHECK(p->method >= 0 && p->method <= VAR_AUTO);
  FUZZ_CHECK(p->radius >= 1 && p->radius <= CPU_VAR_RADIUS_MAX);
  FUZZ_CHECK(p->method == VAR_AUTO || cpu_var_radius_ok(p->method, p->radius));
  FUZZ_CHECK(p->window == CPU_WINDOW_TRIANGLE || p->window == CPU_WINDOW_BOX);
  FUZZ_CHECK(p->output == VAR_STDDEV || p->output == VAR_VARIANCE);
}

static void check_conv_params(const struct conv_params *p) {
  const struct cpu_conv *c = &p->conv;
  FUZZ_CHECK(c->size >= 1 && c->size <= CPU_CONV_MAX && c->size % 2 == 1);
  for (int i = 0; i < c->size * c->size; i++) FUZZ_CHECK(isfinite(c->k[i]));
  FUZZ_CHECK(isfinite(c->bias));
}

/* Parses the input as ep's parameters into out and checks the result. */
static enum err parse_as(const struct endpoint *ep, const char *query, const char *json,
                         size_t json_len, void *out) {
  char msg[512] = "";
  memset(out, 0x5a, OP_PARAMS_MAX);
  enum err e = params_parse(ep, query, json, json_len, out, msg, sizeof(msg));
  if (e != ERR_OK) {
    FUZZ_CHECK(err_status(e) == 400 && msg[0] != 0);
  } else if (ep == &api_blur_endpoint || ep == &api_sharpen_endpoint) {
    check_blur_params(out, ep == &api_sharpen_endpoint);
  } else if (ep == &api_variance_endpoint) {
    check_var_params(out);
  } else if (ep == &api_convolve_endpoint) {
    check_conv_params(out);
  }
  return e;
}

int fuzz_params(const uint8_t *data, size_t size) {
  size_t qlen = 0;
  while (qlen < size && data[qlen] != 0 && data[qlen] != '\n') qlen++;
  char *query = strndup((const char *)data, qlen);
  const char *json = qlen < size ? (const char *)data + qlen + 1 : NULL;
  size_t json_len = json ? size - qlen - 1 : 0;
  void *p = malloc(OP_PARAMS_MAX); /* large (a custom kernel): not on the stack */
  enum err blur = ERR_INTERNAL;
  if (!query || !p) goto done;
  for (int i = 0; api_ops[i]; i++) { /* every operation's parameters, from the table */
    enum err e = parse_as(api_ops[i]->ep, query, json, json_len, p);
    if (api_ops[i]->ep == &api_blur_endpoint) blur = e;
  }
done:
  free(p);
  free(query);
  return (int)blur;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_params(data, size);
  return 0;
}
#endif

/* fuzz/framing.c: libFuzzer target for the request-framing check (api/framing.c). The input is a
 * request's header lines ("Name: value", one a line, LF or CRLF); each goes to api_framing_add
 * as the server hands them over, then api_framing_check decides. Checks: the target's own count
 * of the three headers agrees with the notes; a request is accepted only with at most one
 * decimal Content-Length, or one chunked Transfer-Encoding, never both, and no Expect but
 * 100-continue; every refusal is 400, 501 or 417 with a sentence. */
#include "fuzz.h"

#include "../api/api.h"

#include <strings.h>

int fuzz_framing(const uint8_t *data, size_t size) {
  char *text = strndup((const char *)data, size), *save = NULL, msg[256] = "";
  struct api_framing f = {0};
  int lengths = 0, codings = 0, expects = 0;
  if (!text) return -1;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    line[strcspn(line, "\r")] = 0;
    char *colon = strchr(line, ':');
    if (!colon) continue;
    *colon = 0;
    const char *value = colon + 1 + strspn(colon + 1, " \t");
    lengths += strcasecmp(line, "Content-Length") == 0;
    codings += strcasecmp(line, "Transfer-Encoding") == 0;
    expects += strcasecmp(line, "Expect") == 0;
    api_framing_add(&f, line, value);
  }
  FUZZ_CHECK(f.lengths == lengths && f.codings == codings && f.expects == expects);
  enum api_error e = api_framing_check(&f, msg, sizeof(msg));
  if (e == API_OK) {
    FUZZ_CHECK(lengths <= 1 && !f.bad_length && !(lengths && codings));
    FUZZ_CHECK(codings == 0 || (codings == 1 && f.chunked));
    FUZZ_CHECK(expects == 0 || (expects == 1 && f.continue_));
  } else {
    int status = api_error_status(e);
    FUZZ_CHECK((status == 400 || status == 501 || status == 417) && msg[0] != 0);
  }
  free(text);
  return (int)e;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_framing(data, size);
  return 0;
}
#endif

/* fuzz/framing.c: libFuzzer target for the HTTP/1.1 request syntax (http/http1.c). The input is
 * the bytes a client sends: a request head, then its body. Checks: the end of the head is found
 * at the same place whether the bytes arrive at once or a few at a time; a head that parses has a
 * token method, a target starting with '/', header names that are tokens and values without
 * control characters or surrounding white space, Host once on HTTP/1.1, and at most one of a
 * Content-Length and chunked; every refusal is one of the statuses the server answers, with a
 * sentence; and a chunked body decodes to the same bytes, end and error whether it is fed at once
 * or in pieces of 1 to 7 bytes. Returns the parser's api_error (ERR_OK: accepted). */
#include "fuzz.h"

#include "../http/http.h"

#include <ctype.h>
#include <strings.h>

/* Decodes a chunked body from in[0..n) in pieces of at most step bytes (0: at once) into out
 * (cap bytes); returns the error, with the body's length in *len and whether it ended in *done. */
static enum err dechunk(const uint8_t *in, size_t n, size_t step, uint8_t *out, size_t cap,
                        size_t *len, int *done) {
  struct http1_chunked c = {0};
  char msg[200];
  size_t at = 0;
  *len = 0, *done = 0;
  while (at < n && !*done) {
    size_t avail = step && n - at > step ? step : n - at, used = 0, k = 0;
    const uint8_t *data;
    enum err e = http1_chunk(&c, in + at, avail, &used, &data, &k, done, msg, sizeof(msg));
    if (e != ERR_OK) {
      FUZZ_CHECK(msg[0] != 0);
      return e;
    }
    FUZZ_CHECK(used <= avail && (used > 0 || *done));
    FUZZ_CHECK(k == 0 || (data >= in + at && data + k <= in + at + used));
    if (k && *len + k <= cap) memcpy(out + *len, data, k);
    *len += k;
    at += used;
  }
  return ERR_OK;
}

static int is_token(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s))) return 0;
  return 1;
}

int fuzz_framing(const uint8_t *data, size_t size) {
  size_t scanned = 0, piecewise = 0, end = http1_head_end((const char *)data, size, &scanned);
  for (size_t at = 0, s2 = 0; at < size && !piecewise;) { /* prefixes growing by 1 to 5 bytes */
    at = at + 1 + at % 5 < size ? at + 1 + at % 5 : size;
    piecewise = http1_head_end((const char *)data, at, &s2);
  }
  FUZZ_CHECK(piecewise == 0 ? end == 0 : end == piecewise);
  if (!end) return (int)http1_head_overlong((const char *)data, size);
  char *head = malloc(end + 1), msg[256] = "";
  struct http1_request rq;
  FUZZ_CHECK(head != NULL);
  memcpy(head, data, end);
  head[end] = 0;
  enum err e = http1_parse_head(head, end, &rq, msg, sizeof(msg));
  if (e != ERR_OK) {
    int status = err_status(e);
    FUZZ_CHECK(status == 400 || status == 414 || status == 431 || status == 501 || status == 417 ||
               status == 505);
    FUZZ_CHECK(msg[0] != 0);
    free(head);
    return (int)e;
  }
  FUZZ_CHECK(is_token(rq.method) && (rq.target[0] == '/' || strcmp(rq.target, "*") == 0));
  FUZZ_CHECK(rq.minor == 0 || rq.minor == 1);
  int hosts = 0;
  for (int i = 0; i < rq.nfields; i++) {
    const char *v = rq.fields[i].value;
    size_t n = strlen(v);
    FUZZ_CHECK(is_token(rq.fields[i].name));
    FUZZ_CHECK(!strpbrk(v, "\r\n") &&
               (n == 0 || (!strchr(" \t", v[0]) && !strchr(" \t", v[n - 1]))));
    hosts += strcasecmp(rq.fields[i].name, "Host") == 0;
  }
  FUZZ_CHECK(rq.minor == 0 || hosts == 1);
  FUZZ_CHECK(!(rq.chunked && rq.has_length));
  if (rq.chunked) {
    size_t n = size - end, la, lb;
    uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
    int da, db;
    FUZZ_CHECK(a != NULL && b != NULL);
    enum err ea = dechunk(data + end, n, 0, a, n, &la, &da);
    enum err eb = dechunk(data + end, n, 1 + n % 7, b, n, &lb, &db);
    FUZZ_CHECK(ea == eb && la == lb && da == db && la <= n);
    FUZZ_CHECK(ea != ERR_OK || memcmp(a, b, la) == 0);
    free(a);
    free(b);
  }
  free(head);
  return (int)e;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_framing(data, size);
  return 0;
}
#endif

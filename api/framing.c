/* The request's framing (RFC 9112 6.3): whether its headers say unambiguously where its body
 * ends. The server notes each header of a request with api_framing_add once the headers are in,
 * then asks api_framing_check before it reads a byte of the body. Kept apart from the server's
 * libmicrohttpd code so that it is a function over strings, fuzzed by fuzz/framing.c. */
#include "api.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

void api_framing_add(struct api_framing *f, const char *name, const char *value) {
  if (!name) return;
  if (!value) value = "";
  if (strcasecmp(name, "Content-Length") == 0) {
    f->lengths++;
    f->bad_length |= !*value || strspn(value, "0123456789") != strlen(value);
  } else if (strcasecmp(name, "Transfer-Encoding") == 0) {
    f->codings++;
    f->chunked = strcasecmp(value, "chunked") == 0;
  } else if (strcasecmp(name, "Expect") == 0) {
    f->expects++;
    f->continue_ = strcasecmp(value, "100-continue") == 0;
  }
}

enum api_error api_framing_check(const struct api_framing *f, char *msg, size_t msglen) {
  if (f->lengths > 1 || f->bad_length) {
    snprintf(msg, msglen,
             "The request must have at most one Content-Length header, a decimal number.");
    return API_INVALID_REQUEST;
  }
  if (f->lengths && f->codings) {
    snprintf(msg, msglen, "The request has both Content-Length and Transfer-Encoding.");
    return API_INVALID_REQUEST;
  }
  if (f->codings && (f->codings > 1 || !f->chunked)) {
    snprintf(msg, msglen, "The only Transfer-Encoding this service takes is chunked, once.");
    return API_NOT_IMPLEMENTED;
  }
  if (f->expects && (f->expects > 1 || !f->continue_)) {
    snprintf(msg, msglen, "The only expectation this service meets is Expect: 100-continue.");
    return API_EXPECTATION_FAILED;
  }
  return API_OK;
}

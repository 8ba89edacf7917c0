/* Responses: the error table's statuses and codes, JSON error and JSON success bodies, extra
 * headers, base64 for the JSON mode, and the clock every stage time is read from. */
#include "api_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
  int status;
  const char *code;
  const char *msg;
} errors[] = {{200, "ok", "OK."},
#define X(e, status, code, msg) {status, code, msg},
              API_ERRORS(X)
#undef X
};

int api_error_status(enum api_error e) {
  return (unsigned)e < sizeof(errors) / sizeof(errors[0]) ? errors[e].status : 500;
}

const char *api_error_code(enum api_error e) {
  return (unsigned)e < sizeof(errors) / sizeof(errors[0]) ? errors[e].code : "internal_error";
}

static const char *error_msg(enum api_error e) {
  return (unsigned)e < sizeof(errors) / sizeof(errors[0]) ? errors[e].msg
                                                          : errors[API_INTERNAL].msg;
}

double api_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct api_response *response_empty(int status) {
  struct api_response *r = calloc(1, sizeof(*r));
  if (r) r->status = status; /* no content type, no body */
  return r;
}

struct api_response *response_json(int status, json_t *body) {
  struct api_response *r = calloc(1, sizeof(*r));
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (!r || !text) {
    free(r);
    free(text);
    return NULL;
  }
  r->status = status;
  r->content_type = "application/json";
  r->len = strlen(text);
  r->body = (uint8_t *)text;
  return r;
}

struct api_response *api_error_response(enum api_error e, const char *msg) {
  if (e == API_OK) e = API_INTERNAL;
  int status = api_error_status(e);
  /* A message may quote the request (a key, a value cut at 64 bytes), which need not be valid
   * UTF-8, and json_pack refuses what is not: keep it ASCII, '?' for anything else. */
  char text[512];
  snprintf(text, sizeof(text), "%s", msg && *msg ? msg : error_msg(e));
  for (char *c = text; *c; c++)
    if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) *c = '?';
  json_t *body = json_pack("{s:{s:i, s:s, s:s}}", "error", "status", status, "code",
                           api_error_code(e), "message", text);
  struct api_response *r = response_json(status, body);
  if (r && (status == 503 || status == 429)) api_response_header(r, "Retry-After", "1");
  return r;
}

void api_response_free(struct api_response *resp) {
  if (!resp) return;
  free(resp->body);
  free(resp);
}

int api_response_header(struct api_response *resp, const char *name, const char *fmt, ...) {
  if (resp->nheaders == API_MAX_HEADERS) return -1;
  struct api_header *h = &resp->headers[resp->nheaders++];
  snprintf(h->name, sizeof(h->name), "%s", name);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->value, sizeof(h->value), fmt, ap);
  va_end(ap);
  return 0;
}

char *base64_encode(const uint8_t *data, size_t len) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < len; i += 3) {
    uint32_t v = (uint32_t)data[i] << 16;
    if (i + 1 < len) v |= (uint32_t)data[i + 1] << 8;
    if (i + 2 < len) v |= data[i + 2];
    *o++ = tab[v >> 18];
    *o++ = tab[(v >> 12) & 63];
    *o++ = i + 1 < len ? tab[(v >> 6) & 63] : '=';
    *o++ = i + 2 < len ? tab[v & 63] : '=';
  }
  *o = 0;
  return out;
}

/* Responses: the error table's statuses and codes, JSON error and JSON success bodies, extra
 * headers, base64 both ways (the JSON mode's answers, JSON request bodies' images), and the clock
 * every stage time is read from. */
#include "api_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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

char *json_text(json_t *body) {
  /* 15 significant digits: every double prints as the decimal it was made from (73.3, not
   * 17 digits' 73.299999999999997), and the scales, powers of two, exactly */
  char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
  json_decref(body);
  return text;
}

struct api_response *response_text(const char *type, const char *text, size_t len) {
  struct api_response *r = calloc(1, sizeof(*r));
  uint8_t *body = r ? malloc(len ? len : 1) : NULL;
  if (!body) {
    free(r);
    return NULL;
  }
  memcpy(body, text, len);
  *r = (struct api_response){.status = 200, .content_type = type, .body = body, .len = len};
  return r;
}

struct api_response *response_json(int status, json_t *body) {
  struct api_response *r = calloc(1, sizeof(*r));
  char *text = json_text(body);
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

struct api_response *api_error_response(enum err e, const char *msg) {
  return response_error(e, msg, NULL);
}

struct api_response *response_error(enum err e, const char *msg, json_t *fields) {
  if (e == ERR_OK) e = ERR_INTERNAL;
  int status = err_status(e);
  /* A message may quote the request (a key, a value cut at 64 bytes), which need not be valid
   * UTF-8, and json_pack refuses what is not: keep it ASCII, '?' for anything else. */
  char text[512];
  snprintf(text, sizeof(text), "%s", msg && *msg ? msg : err_message(e));
  for (char *c = text; *c; c++)
    if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) *c = '?';
  json_t *body = json_pack("{s:{s:i, s:s, s:s}}", "error", "status", status, "code", err_code(e),
                           "message", text);
  if (body && fields) json_object_update(json_object_get(body, "error"), fields);
  json_decref(fields);
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

static const char base64_digits[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const uint8_t *data, size_t len) {
  const char *tab = base64_digits;
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

/* What base64_decode's table says of a byte besides a digit's value (0..63). */
enum { B64_BAD = -1, B64_SKIP = -2, B64_PAD = -3 };

/* The length of s's data: URL prefix ("data:image/png;base64,"), 0 when s has none. The media
 * type there is not read: the bytes decide the format, as for every upload. */
static enum err data_prefix(const char *s, size_t len, size_t *skip, char *msg, size_t msglen) {
  *skip = 0;
  if (len < 5 || strncasecmp(s, "data:", 5) != 0) return ERR_OK;
  const char *comma = memchr(s, ',', len);
  if (!comma || comma - s < 12 || strncasecmp(comma - 7, ";base64", 7) != 0) {
    snprintf(msg, msglen,
             "The image is a data: URL without ';base64,' before its data: send "
             "'data:' with the media type and ';base64,' then the data, or the base64 alone.");
    return ERR_BAD_IMAGE_ENCODING;
  }
  *skip = (size_t)(comma - s) + 1;
  return ERR_OK;
}

/* The error for byte c at offset at, which is no base64 character. */
static enum err bad_char(unsigned char c, size_t at, char *msg, size_t msglen) {
  char what[16];
  if (c > ' ' && c < 0x7f)
    snprintf(what, sizeof(what), "'%c'", c);
  else
    snprintf(what, sizeof(what), "%s 0x%02x", c == ' ' ? "a space," : "byte", c);
  snprintf(msg, msglen,
           "The image is not valid base64: %s at byte %zu is not a base64 character (A-Z, a-z, "
           "0-9, '+', '/', '=' at the end, line breaks)%s",
           what, at,
           c == ' '               ? "; was it a '+' that URL decoding turned into a space?"
           : c == '-' || c == '_' ? "; that is base64url's alphabet: send standard base64."
                                  : ".");
  return ERR_BAD_IMAGE_ENCODING;
}

/* The end of the base64: k characters (0..3) of a last group, that began at byte group, then
 * pads '=' from byte pad_at. */
static enum err base64_end(int k, size_t group, size_t pads, size_t pad_at, char *msg,
                           size_t msglen) {
  if (k == 1)
    snprintf(msg, msglen,
             "The image is not valid base64: its last group, at byte %zu, has 1 character; a group "
             "carries a byte from 2 on. Is the string cut short?",
             group);
  else if (pads && k == 0)
    snprintf(msg, msglen,
             "The image is not valid base64: '=' at byte %zu follows a complete group of 4; "
             "padding only completes a last group of 2 or 3.",
             pad_at);
  else if (pads && (size_t)k + pads != 4)
    snprintf(
        msg, msglen,
        "The image is not valid base64: the padding at byte %zu has %zu '='; a last group of %d "
        "characters takes %d, or none.",
        pad_at, pads, k, 4 - k);
  else
    return ERR_OK;
  return ERR_BAD_IMAGE_ENCODING;
}

/* Decodes s[from, len) into out (room for 3/4 of that); *n: the bytes written. */
static enum err base64_run(const char *s, size_t from, size_t len, uint8_t *out, size_t *n,
                           char *msg, size_t msglen) {
  signed char t[256];
  memset(t, B64_BAD, sizeof(t));
  for (int i = 0; i < 64; i++) t[(unsigned char)base64_digits[i]] = (signed char)i;
  t['\r'] = t['\n'] = B64_SKIP;
  t['='] = B64_PAD;
  uint32_t acc = 0;
  int k = 0;
  size_t o = 0, group = 0, pads = 0, pad_at = 0;
  for (size_t i = from; i < len; i++) {
    int v = t[(unsigned char)s[i]];
    if (v == B64_SKIP) continue;
    if (v == B64_PAD && !pads++) pad_at = i;
    if (v == B64_PAD) continue;
    if (v == B64_BAD) return bad_char((unsigned char)s[i], i, msg, msglen);
    if (pads) {
      snprintf(msg, msglen,
               "The image is not valid base64: '%c' at byte %zu follows the padding '=' at byte "
               "%zu; '=' may only end it.",
               s[i], i, pad_at);
      return ERR_BAD_IMAGE_ENCODING;
    }
    if (k == 0) group = i;
    acc = acc << 6 | (uint32_t)v;
    if (++k < 4) continue;
    out[o++] = (uint8_t)(acc >> 16), out[o++] = (uint8_t)(acc >> 8), out[o++] = (uint8_t)acc;
    k = 0, acc = 0;
  }
  enum err e = base64_end(k, group, pads, pad_at, msg, msglen);
  if (k == 2) out[o++] = (uint8_t)(acc >> 4);
  if (k == 3) out[o++] = (uint8_t)(acc >> 10), out[o++] = (uint8_t)(acc >> 2);
  *n = o;
  return e;
}

enum err base64_decode(const char *s, size_t len, uint8_t **out, size_t *outlen, char *msg,
                       size_t msglen) {
  size_t from, n = 0;
  *out = NULL;
  *outlen = 0;
  enum err e = data_prefix(s, len, &from, msg, msglen);
  if (e != ERR_OK) return e;
  size_t chars = len - from, cap = chars / 4 * 3 + chars % 4 * 3 / 4; /* 3/4, no overflow */
  uint8_t *buf = cap ? malloc(cap) : NULL;
  if (cap && !buf) return ERR_OUT_OF_MEMORY;
  e = base64_run(s, from, len, buf, &n, msg, msglen);
  if (e != ERR_OK || n == 0) {
    free(buf);
    return e;
  }
  *out = buf;
  *outlen = n;
  return ERR_OK;
}

/* The streaming check of a JSON body, fed piece by piece as the body arrives (api_body_chunk), so
 * that a body that would cost the parser seconds and gigabytes is refused within milliseconds of
 * the bytes that break a limit, before it is stored: at most BODYSCAN_BYTES_MAX bytes outside the
 * value of the top-level "image" string, BODYSCAN_VALUES_MAX values and BODYSCAN_DEPTH_MAX levels
 * of nesting. It tracks only what the limits need (strings, the containers, where a value
 * starts, whether a top-level key is "image"); it does not validate the JSON: the job's parser
 * does, with jansson's sentences. Its state is a few words, kept in the request. */
#include "http.h"

#include <stdio.h>
#include <string.h>

enum {            /* where the scanner is */
       BS_VALUE,  /* before a value (or a closing bracket) */
       BS_AFTER,  /* after a value or a key: ',', ':' or a closing bracket */
       BS_STRING, /* in a string */
       BS_SCALAR  /* in a number, true, false or null */
};

static enum err too_deep(char *msg, size_t msglen) {
  snprintf(msg, msglen,
           "The JSON body nests arrays and objects more than %d deep; the parameters need 3.",
           BODYSCAN_DEPTH_MAX);
  return ERR_BAD_JSON;
}

static enum err too_many(char *msg, size_t msglen) {
  snprintf(msg, msglen,
           "The JSON body has more than %d values outside its image; the largest set of "
           "parameters (a 31x31 kernel) has under a thousand.",
           BODYSCAN_VALUES_MAX);
  return ERR_BAD_JSON;
}

static enum err too_large(char *msg, size_t msglen) {
  snprintf(msg, msglen,
           "The JSON body has more than %d bytes outside its 'image' string; send the image in "
           "'image' and only parameters besides.",
           BODYSCAN_BYTES_MAX);
  return ERR_BODY_TOO_LARGE;
}

/* The body's first byte starts no JSON value: a file sent as application/json, most likely (a
 * value of another kind is refused by the job's parser, which names it). */
static enum err not_json(int c, char *msg, size_t msglen) {
  snprintf(msg, msglen,
           "The body is sent as application/json but is not JSON (its first byte is 0x%02x): send "
           "{\"image\": \"<base64>\", ...}, or the image file itself with its own Content-Type or "
           "in a multipart form.",
           c & 0xff);
  return ERR_BAD_JSON;
}

/* A value starts with c (not a blank, ',', ':' or a closing bracket). */
static enum err value_start(struct http_bodyscan *s, int c, char *msg, size_t msglen) {
  if (s->values == 0 && !strchr("{[\"-0123456789tfn", c)) return not_json(c, msg, msglen);
  if (++s->values > BODYSCAN_VALUES_MAX) return too_many(msg, msglen);
  s->key = 0;
  if (c == '"') {
    s->image = s->image_next; /* the string of "image": its bytes are not counted */
    s->state = BS_STRING;
  } else if (c == '{' || c == '[') {
    if (s->depth == BODYSCAN_DEPTH_MAX) return too_deep(msg, msglen);
    s->objects = (s->objects & ~(1u << s->depth)) | (unsigned)(c == '{') << s->depth;
    s->depth++;
    s->key = c == '{'; /* an object starts with a key (or ends) */
    s->state = BS_VALUE;
  } else {
    s->state = BS_SCALAR;
  }
  s->image_next = 0;
  return ERR_OK;
}

/* A key string ends: whether it is the top-level "image" is known from its bytes. */
static void key_end(struct http_bodyscan *s) {
  s->image_next = s->depth == 1 && s->match == 5;
  s->state = BS_AFTER;
}

/* One byte outside a string. */
static enum err structural(struct http_bodyscan *s, int c, char *msg, size_t msglen) {
  if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
    if (s->state == BS_SCALAR) s->state = BS_AFTER;
    return ERR_OK;
  }
  if (c == ',' || c == ':' || c == ']' || c == '}') {
    if (c == ']' || c == '}') s->depth -= s->depth > 0;
    s->key = c == ',' && s->depth > 0 && (s->objects >> (s->depth - 1) & 1);
    s->state = c == ',' || c == ':' ? BS_VALUE : BS_AFTER;
    return ERR_OK;
  }
  if (s->state == BS_SCALAR) return ERR_OK;
  if (s->key && c == '"') { /* a key: not a value */
    s->state = BS_STRING, s->in_key = 1, s->match = 0;
    return ERR_OK;
  }
  return value_start(s, c, msg, msglen);
}

/* Skips the bytes of a string up to its closing quote; returns how many it consumed. */
static size_t string_bytes(struct http_bodyscan *s, const uint8_t *p, size_t n) {
  size_t i = 0;
  if (!s->in_key && !s->escape) { /* a value, the image mostly: memchr runs at memory speed */
    const uint8_t *q = memchr(p, '"', n), *b = memchr(p, '\\', q ? (size_t)(q - p) : n);
    if (!q && !b) return n;
    if (!b) {
      s->image = 0;
      s->state = BS_AFTER;
      return (size_t)(q - p) + 1;
    }
    i = (size_t)(b - p);
  }
  for (; i < n; i++) {
    int c = p[i];
    if (s->escape) {
      s->escape = 0, s->match = -1;
    } else if (c == '\\') {
      s->escape = 1;
    } else if (c == '"') {
      if (s->in_key) {
        s->in_key = 0;
        key_end(s);
      } else {
        s->image = 0;
        s->state = BS_AFTER;
      }
      return i + 1;
    } else if (s->in_key && s->match >= 0) {
      s->match = s->match < 5 && c == "image"[s->match] ? s->match + 1 : -1;
    }
  }
  return i;
}

enum err http_bodyscan_feed(struct http_bodyscan *s, const uint8_t *data, size_t n, char *msg,
                            size_t msglen) {
  size_t i = 0;
  while (i < n) {
    if (s->state == BS_STRING) {
      int image = s->image;
      size_t k = string_bytes(s, data + i, n - i);
      if (!image && (s->bytes += k) > BODYSCAN_BYTES_MAX) return too_large(msg, msglen);
      i += k;
      continue;
    }
    if (++s->bytes > BODYSCAN_BYTES_MAX) return too_large(msg, msglen);
    enum err e = structural(s, data[i++], msg, msglen);
    if (e != ERR_OK) return e;
  }
  return ERR_OK;
}

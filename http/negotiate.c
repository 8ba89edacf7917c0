/* Proactive content negotiation (RFC 9110 section 12.5.1): which of the two answers an image
 * endpoint can give, the image itself or the JSON object with the image in base64, the request's
 * Accept header prefers. The job asks once it knows the result's format (the `format`
 * parameter's, or the upload's), and answers 406 when neither is acceptable. Also the coding
 * that Accept-Encoding allows, and If-None-Match's entity tags, for the answers that are the same
 * for every request (api/cache.c). Functions over strings, with no allocation, so the unit test
 * needs no server. */
#include "http.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The q-value at s ("0.5", "1", "0.125"), in thousandths; -1 when it is not one. */
static int qvalue(const char *s, size_t n) {
  if (n == 0 || (s[0] != '0' && s[0] != '1')) return -1;
  int q = (s[0] - '0') * 1000, scale = 100;
  if (n > 1 && s[1] != '.') return -1;
  for (size_t i = 2; i < n && i < 5; i++, scale /= 10) {
    if (!isdigit((unsigned char)s[i])) return -1;
    q += (s[i] - '0') * scale;
  }
  return n > 5 || q > 1000 ? -1 : q;
}

/* s[0..n) with spaces and tabs trimmed at both ends; returns the new start, *n the new length. */
static const char *trim(const char *s, size_t *n) {
  while (*n && (*s == ' ' || *s == '\t')) s++, (*n)--;
  while (*n && (s[*n - 1] == ' ' || s[*n - 1] == '\t')) (*n)--;
  return s;
}

/* How specifically the media range r[0..n) ("image/png", all images, everything) matches
 * type: 3, 2, 1, or 0 when it does not match. */
static int match(const char *r, size_t n, const char *type) {
  const char *slash = memchr(r, '/', n);
  size_t tl = strlen(type), main_len = (size_t)(strchr(type, '/') - type);
  if (!slash) return 0;
  size_t rl = (size_t)(slash - r);
  if (n == 3 && memcmp(r, "*/*", 3) == 0) return 1;
  if (rl != main_len || strncasecmp(r, type, rl) != 0) return 0;
  if (n == rl + 2 && slash[1] == '*') return 2;
  return n == tl && strncasecmp(r, type, n) == 0 ? 3 : 0;
}

/* The q of one element ("image/png;q=0.5"), from its parameters; 1000 when it has none. */
static int element_q(const char *params, size_t n) {
  while (n) {
    const char *semi = memchr(params, ';', n);
    size_t len = semi ? (size_t)(semi - params) : n, pl = len;
    const char *p = trim(params, &pl);
    if (pl >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
      size_t vl = pl - 2;
      const char *v = trim(p + 2, &vl);
      return qvalue(v, vl);
    }
    params += semi ? len + 1 : len, n -= semi ? len + 1 : len;
  }
  return 1000;
}

/* Each media range weighs by its q-value; of the ranges that match a type, the most specific one
 * counts (image/png, then the range of all images, then the range of everything); a type no range
 * matches, or that the counting range gives q=0, is not acceptable. A header with no media range
 * in it (";;;,,") is ignored, as a missing one is (RFC 9110 section 12.5.1 lets a server). */
int http_accept_q(const char *accept, const char *type) {
  size_t total = accept ? strlen(accept) : 0;
  trim(accept, &total);
  if (total == 0) return 1000; /* no Accept, or an empty one: anything */
  int best = 0, q = 0, ranges = 0;
  for (const char *s = accept; *s;) {
    size_t len = strcspn(s, ","), rl = strcspn(s, ";");
    if (rl > len) rl = len;
    size_t n = rl;
    const char *r = trim(s, &n);
    const char *slash = memchr(r, '/', n);
    ranges += slash && slash > r && slash < r + n - 1;
    int m = match(r, n, type), eq = m ? element_q(s + rl, len - rl) : -1;
    if (m > best && eq >= 0) best = m, q = eq;
    s += len + (s[len] == ',');
  }
  return ranges ? q : 1000;
}

/* On a tie the image wins, so `Accept: image/png, application/json` and a lone range of everything
 * get the image. */
enum err http_negotiate(const char *accept, const char *image_type, int *json, char *msg,
                        size_t msglen) {
  int qi = http_accept_q(accept, image_type), qj = http_accept_q(accept, "application/json");
  *json = qj > qi;
  if (qi > 0 || qj > 0) return ERR_OK;
  snprintf(msg, msglen,
           "Accept '%.80s' accepts neither %s (the result's type: the upload's, or the format "
           "parameter's) nor application/json.",
           accept, image_type);
  return ERR_NOT_ACCEPTABLE;
}

int http_media_is(const char *content_type, const char *type) {
  size_t n = strlen(type);
  if (!content_type || strncasecmp(content_type, type, n) != 0) return 0;
  return content_type[n] == 0 || content_type[n] == ';' || content_type[n] == ' ';
}

/* Accept-Encoding (RFC 9110 section 12.5.3): the coding by name ("gzip") weighs by its q-value,
 * else "*" does; a coding neither names is not acceptable. A missing header asks for nothing. */
int http_coding_q(const char *accept_encoding, const char *coding) {
  int q = 0, any = 0, named = 0;
  for (const char *s = accept_encoding ? accept_encoding : ""; *s;) {
    size_t len = strcspn(s, ","), cl = strcspn(s, ";");
    if (cl > len) cl = len;
    size_t n = cl;
    const char *c = trim(s, &n);
    int eq = element_q(s + cl, len - cl);
    if (eq >= 0 && n == strlen(coding) && strncasecmp(c, coding, n) == 0)
      named = 1, q = eq;
    else if (eq >= 0 && n == 1 && *c == '*' && !named)
      any = 1, q = eq;
    s += len + (s[len] == ',');
  }
  return named || any ? q : 0;
}

/* If-None-Match (RFC 9110 section 13.1.2): "*", or a list of entity tags compared weakly (W/
 * ignored on both sides). */
int http_etag_match(const char *if_none_match, const char *etag) {
  if (!if_none_match) return 0;
  if (etag[0] == 'W' && etag[1] == '/') etag += 2;
  size_t el = strlen(etag);
  for (const char *s = if_none_match; *s;) {
    size_t len = strcspn(s, ","), n = len;
    const char *t = trim(s, &n);
    if (n == 1 && *t == '*') return 1;
    if (n >= 2 && t[0] == 'W' && t[1] == '/') t += 2, n -= 2;
    if (n == el && memcmp(t, etag, n) == 0) return 1;
    s += len + (s[len] == ',');
  }
  return 0;
}

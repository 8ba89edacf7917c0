/* A multipart/form-data parser (RFC 7578) over a byte buffer that is already complete. It only
 * splits the body into named parts: part data point into the body, nothing is copied. Every
 * read is bounds-checked, so it can be fed arbitrary bytes (tests/fuzz). */
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_BOUNDARY 70   /* RFC 2046 */
#define MAX_HEADERS  8192 /* bytes of one part's header block */

/* Copies the boundary parameter of a multipart Content-Type into out. Returns 0, or -1. */
static int boundary_of(const char *ct, char *out) {
  const char *p = ct ? strchr(ct, ';') : NULL;
  while (p) {
    p++;
    while (*p == ' ' || *p == '\t') p++;
    if (strncasecmp(p, "boundary=", 9) == 0) {
      p += 9;
      int quoted = *p == '"';
      size_t n = quoted ? strcspn(p + 1, "\"") : strcspn(p, "; \t");
      if (n == 0 || n > MAX_BOUNDARY || (quoted && p[1 + n] != '"')) return -1;
      memcpy(out, p + quoted, n);
      out[n] = 0;
      return 0;
    }
    p = strchr(p, ';');
  }
  return -1;
}

/* The end of the token at p (RFC 2045's token: no blanks, controls or tspecials), before end. */
static const char *token_end(const char *p, const char *end) {
  while (p < end && (unsigned char)*p > ' ' && *p != 0x7f && !strchr("()<>@,;:\\\"/[]?=", *p)) p++;
  return p;
}

/* Reads the parameter value at *p, a token or a quoted-string (RFC 822: backslash quotes the next
 * character), into a new string when out is not NULL; moves *p past it. Returns 0, or -1 for an
 * unterminated quoted-string or an empty value. */
static int param_value(const char **p, const char *end, char **out) {
  const char *v = *p;
  if (v < end && *v == '"') {
    char *s = out ? malloc((size_t)(end - v)) : NULL, *o = s;
    if (out && !s) return -1;
    for (v++; v < end && *v != '"'; v++) {
      if (*v == '\\' && v + 1 < end) v++;
      if (o) *o++ = *v;
    }
    if (v == end) {
      free(s);
      return -1;
    }
    if (o) *o = 0;
    if (out) *out = s;
    *p = v + 1;
    return 0;
  }
  const char *e = token_end(v, end);
  if (e == v) return -1;
  if (out && !(*out = strndup(v, (size_t)(e - v)))) return -1;
  *p = e;
  return 0;
}

/* The value of the name parameter of a Content-Disposition header value h[0..len) (RFC 2183:
 * disposition-type *(";" parameter), each parameter a token or a quoted-string, so a ';' or
 * "name=" inside another parameter's quotes is that parameter's text), as a new string, or NULL. */
static char *disposition_name(const char *h, size_t len) {
  const char *end = h + len, *p = memchr(h, ';', len);
  while (p && p < end && *p == ';') {
    for (p++; p < end && (*p == ' ' || *p == '\t');) p++;
    const char *a = p, *ae = token_end(p, end);
    for (p = ae; p < end && (*p == ' ' || *p == '\t');) p++;
    if (ae == a || p == end || *p != '=') return NULL;
    for (p++; p < end && (*p == ' ' || *p == '\t');) p++;
    int is_name = ae - a == 4 && strncasecmp(a, "name", 4) == 0;
    char *v = NULL;
    if (param_value(&p, end, is_name ? &v : NULL) != 0) return NULL;
    if (is_name) return v;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
  }
  return NULL;
}

/* Finds the form field name in a part's header block h[0..len). */
static char *part_name(const char *h, size_t len) {
  const char *end = h + len;
  while (h < end) {
    const char *eol = memmem(h, (size_t)(end - h), "\r\n", 2);
    size_t n = eol ? (size_t)(eol - h) : (size_t)(end - h);
    if (n > 20 && strncasecmp(h, "content-disposition:", 20) == 0) return disposition_name(h, n);
    h += n + 2;
  }
  return NULL;
}

/* The next delimiter at or after p: CRLF "--" boundary, then "--", or blanks and CRLF. A match
 * followed by anything else is data that happens to start like the boundary. Returns a pointer
 * to its CRLF, or NULL. */
static const uint8_t *next_delim(const uint8_t *p, const uint8_t *end, const char *delim,
                                 size_t dl) {
  while ((p = memmem(p, (size_t)(end - p), delim, dl)) != NULL) {
    const uint8_t *q = p + dl;
    if (end - q >= 2 && q[0] == '-' && q[1] == '-') return p;
    while (q < end && (*q == ' ' || *q == '\t')) q++;
    if (end - q >= 2 && q[0] == '\r' && q[1] == '\n') return p;
    p++;
  }
  return NULL;
}

static enum err fail(char *msg, size_t msglen, const char *why) {
  snprintf(msg, msglen, "The multipart/form-data body is malformed: %s.", why);
  return ERR_BAD_MULTIPART;
}

void http_multipart_free(struct http_part *parts, int nparts) {
  for (int i = 0; i < nparts; i++) {
    free((char *)parts[i].name);
    parts[i].name = NULL;
  }
}

enum err http_multipart_parse(const char *content_type, const uint8_t *body, size_t len,
                              struct http_part *parts, int *nparts, char *msg, size_t msglen) {
  char b[MAX_BOUNDARY + 1], delim[MAX_BOUNDARY + 5];
  *nparts = 0;
  if (boundary_of(content_type, b) != 0) return fail(msg, msglen, "no usable boundary parameter");
  if (len == 0) return fail(msg, msglen, "the body is empty"); /* and body may be NULL */
  int dl = snprintf(delim, sizeof(delim), "\r\n--%s", b);
  /* The first delimiter may start the body, without the CRLF before it. */
  const uint8_t *end = body + len, *p;
  if (len >= (size_t)dl - 2 && memcmp(body, delim + 2, (size_t)dl - 2) == 0)
    p = body + dl - 2;
  else if ((p = next_delim(body, end, delim, (size_t)dl)) != NULL)
    p += dl;
  else
    return fail(msg, msglen, "the boundary never appears");
  for (;;) {
    if (end - p >= 2 && p[0] == '-' && p[1] == '-') return ERR_OK; /* closing delimiter */
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
      return fail(msg, msglen, "a boundary is not followed by a line break");
    p += 2;
    /* The header block ends at an empty line; searching from the CRLF before it finds an empty
     * block too (which then has no name). */
    const uint8_t *hend = memmem(p - 2, (size_t)(end - p) + 2, "\r\n\r\n", 4);
    if (!hend || hend - p > MAX_HEADERS) return fail(msg, msglen, "a part has no header end");
    const uint8_t *data = hend + 4, *next = next_delim(data, end, delim, (size_t)dl);
    if (!next) return fail(msg, msglen, "the body ends before its closing boundary");
    if (*nparts == HTTP_PARTS_MAX) return fail(msg, msglen, "too many parts");
    char *name = hend > p ? part_name((const char *)p, (size_t)(hend - p)) : NULL;
    if (!name) return fail(msg, msglen, "a part has no Content-Disposition name");
    parts[*nparts] = (struct http_part){name, data, (size_t)(next - data)};
    (*nparts)++;
    p = next + dl;
  }
}

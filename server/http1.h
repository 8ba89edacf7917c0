/* http1: the HTTP/1.1 request syntax (RFC 9112) as functions over bytes, for server/http.c and
 * the framing fuzz target. A request head is parsed in place, strictly: a request line of a
 * token method, an origin-form (or absolute-form) target and HTTP/1.0 or HTTP/1.1; header lines
 * of a token name, a colon right after it and a value of visible characters, spaces and tabs,
 * every line ended by CRLF; no obs-fold, no whitespace before a colon, no NUL or bare CR or LF;
 * Host once on HTTP/1.1; at most one decimal Content-Length, or Transfer-Encoding chunked, never
 * both; no Expect but 100-continue. Anything else is refused with the error the server answers,
 * and the connection is closed after it, so that no byte after a head the server could misread is
 * ever taken for a request of its own (request smuggling). Chunked bodies are decoded by a state
 * machine fed any split of the bytes. */
#ifndef BLURD_HTTP1_H
#define BLURD_HTTP1_H

#include "../api/api.h"

#include <stddef.h>
#include <stdint.h>

#define HTTP1_LINE_MAX   8192  /* bytes of the request line; past it 414 uri_too_long */
#define HTTP1_HEAD_MAX   32768 /* bytes of the request line and header section; past it 431 */
#define HTTP1_FIELDS_MAX 100   /* header lines; past it 431 headers_too_large */

struct http1_field {
  const char *name;  /* as sent (compare case-insensitively) */
  const char *value; /* without leading and trailing spaces and tabs */
};

struct http1_request {
  const char *method; /* "POST" */
  const char *target; /* origin-form: "/blur?sigma=2" (an absolute-form's path and query) */
  int minor;          /* HTTP/1.minor: 0 or 1 */
  int nfields;        /* header lines */
  struct http1_field fields[HTTP1_FIELDS_MAX];
  int has_length;          /* Content-Length was given */
  uint64_t content_length; /* its value */
  int chunked;             /* Transfer-Encoding: chunked */
  int expect_continue;     /* Expect: 100-continue */
  int keep_alive;          /* the connection may serve another request after this one */
};

/* The length of the head at the start of buf[0..len) up to and including the empty line that ends
 * it, or 0 while it is incomplete. *scanned (0 at first) keeps the offset already searched, so that
 * a head arriving a byte at a time is scanned once. */
size_t http1_head_end(const char *buf, size_t len, size_t *scanned);
/* Whether buf[0..len), the start of a head that is still incomplete, is already refused: returns
 * ERR_URI_TOO_LONG when the request line passes HTTP1_LINE_MAX, ERR_HEADERS_TOO_LARGE when the head
 * passes HTTP1_HEAD_MAX, else ERR_OK. */
enum err http1_head_overlong(const char *buf, size_t len);
/* Parses the head buf[0..len) (as measured by http1_head_end, ending in CRLF CRLF), writing NULs
 * into buf so that rq's strings point into it: buf must outlive rq. Returns ERR_OK, or the error
 * to answer (400 invalid_request, 414, 431, 501 not_implemented, 417, 505) with a sentence in msg;
 * rq's method and target are then filled as far as they could be read (or NULL). */
enum err http1_parse_head(char *buf, size_t len, struct http1_request *rq, char *msg,
                                size_t msglen);
/* The value of the first header field called name, or NULL. */
const char *http1_field(const struct http1_request *rq, const char *name);

/* A chunked body's decoder state; zero it before the first byte. */
struct http1_chunked {
  int state;
  uint64_t left;   /* data bytes left in the current chunk */
  unsigned digits; /* hex digits of the current size */
  size_t line;     /* bytes of the current size line's extension, or of the trailer section */
};

/* Decodes from in[0..n): consumes *used bytes, of which [*data, *data + *len) is body data (len may
 * be 0), and sets *done once the last chunk and its trailer section have been read (the bytes
 * after them are not consumed: they start the next request). Call it again with the rest. Returns
 * ERR_OK, or ERR_INVALID_REQUEST with a sentence in msg for a malformed chunk. */
enum err http1_chunk(struct http1_chunked *c, const uint8_t *in, size_t n, size_t *used,
                           const uint8_t **data, size_t *len, int *done, char *msg, size_t msglen);

#endif

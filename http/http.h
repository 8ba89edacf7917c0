/* http: the HTTP protocol as functions over bytes and strings, for the server (server/) and the
 * api (api/): the HTTP/1.1 request syntax (RFC 9112, strict: http1.c) and the chunked decoder;
 * multipart/form-data bodies (RFC 7578: multipart.c); the streaming check of a JSON body as it
 * arrives (bodyscan.c); media types and the Accept header's negotiation (RFC 9110: negotiate.c).
 * None of it allocates more than its answers, holds state between calls but what the caller keeps,
 * or knows what the service does with a request. */
#ifndef BLURD_HTTP_H
#define BLURD_HTTP_H

#include "../base/errors.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the HTTP/1.1 request syntax (http1.c) ----
 * A request head is parsed in place, strictly: a request line of a token method, an origin-form
 * (or absolute-form) target and HTTP/1.0 or HTTP/1.1; header lines of a token name, a colon right
 * after it and a value of visible characters, spaces and tabs, every line ended by CRLF; no
 * obs-fold, no whitespace before a colon, no NUL or bare CR or LF; Host once on HTTP/1.1; at most
 * one decimal Content-Length, or Transfer-Encoding chunked, never both; no Expect but
 * 100-continue. Anything else is refused with the error the server answers, and the connection is
 * closed after it, so that no byte after a head the server could misread is ever taken for a
 * request of its own (request smuggling). Chunked bodies are decoded by a state machine fed any
 * split of the bytes. */

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

/* The reason phrase of an HTTP status ("Not Found"). */
const char *http_reason(int status);
/* The Date header's value now (RFC 9110's IMF-fixdate), made once a second per thread. */
const char *http_date(void);

/* ---- the streaming check of a JSON body (bodyscan.c) ---- */

/* Limits of a JSON body outside the value of its top-level "image" string. A 31x31 custom kernel
 * written with 17 significant digits a weight, as an array of indented rows, takes about 30 KB,
 * and 994 values; regions take 321. */
#define BODYSCAN_BYTES_MAX  65536
#define BODYSCAN_VALUES_MAX 4096
#define BODYSCAN_DEPTH_MAX  8 /* the parameters need 3: {"kernel": [[...]]} */

struct http_bodyscan { /* zeroed at the start of a body */
  uint64_t bytes;      /* bytes counted (all but the image string's) */
  uint32_t values;     /* values started */
  uint32_t objects;    /* bit d: the container at depth d is an object */
  uint8_t mode;        /* api_body_chunk: 0 undecided, 1 a JSON body, 2 not JSON */
  uint8_t state;       /* bodyscan.c's BS_* */
  uint8_t depth;       /* containers open */
  uint8_t key;         /* a string here would be an object's key */
  uint8_t in_key;      /* in a key string */
  uint8_t escape;      /* after a backslash in a string */
  uint8_t image;       /* in the value string of the top-level "image" */
  uint8_t image_next;  /* the key just read is the top-level "image" */
  int8_t match;        /* bytes of "image" the key matches so far; -1: not it */
};

/* Feeds the next n bytes of a JSON body to s. Returns ERR_OK, or ERR_BODY_TOO_LARGE (bytes) or
 * ERR_BAD_JSON (values, depth) with a sentence in msg. */
enum err http_bodyscan_feed(struct http_bodyscan *s, const uint8_t *data, size_t n, char *msg,
                            size_t msglen);

/* ---- multipart/form-data ---- */

struct http_part {
  const char *name; /* the form field name, NUL-terminated copy (owned by the part list) */
  const uint8_t *data;
  size_t len;
};

#define HTTP_PARTS_MAX 8

/* Splits body into parts using the boundary in content_type. Part data point into body; names
 * are malloc'd: release them with http_multipart_free(). Returns ERR_OK or ERR_BAD_MULTIPART with a
 * sentence in msg. */
enum err http_multipart_parse(const char *content_type, const uint8_t *body, size_t len,
                              struct http_part *parts, int *nparts, char *msg, size_t msglen);
void http_multipart_free(struct http_part *parts, int nparts);

/* ---- content negotiation (negotiate.c) ---- */

/* The q-value, in thousandths (0..1000), that the Accept header accept (NULL: none) gives to the
 * media type type ("image/png"): that of the most specific range that matches it. */
int http_accept_q(const char *accept, const char *type);
/* Which answer an image endpoint whose result is of image_type gives under accept: ERR_OK with
 * *json 0 for the image (also on a tie) or 1 for the JSON object; ERR_NOT_ACCEPTABLE, with a
 * sentence in msg, when neither is acceptable. */
enum err http_negotiate(const char *accept, const char *image_type, int *json, char *msg,
                        size_t msglen);
/* The q-value, in thousandths, that Accept-Encoding (NULL: none) gives to coding ("gzip"); 0 when
 * it does not accept it. */
int http_coding_q(const char *accept_encoding, const char *coding);
/* Whether If-None-Match (NULL: none) names etag ("\"3f-1a2b\""), or is "*". */
int http_etag_match(const char *if_none_match, const char *etag);

/* Whether the media type of content_type (before any ';') is type, case-insensitively. */
int http_media_is(const char *content_type, const char *type);

#endif

/* The HTTP/1.1 request syntax (http.h): the head parsed in place, and the chunked decoder. */
#include "http.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CHUNK_EXT_MAX 4096 /* bytes of a chunk size line's extensions */
#define TRAILER_MAX   8192 /* bytes of a chunked body's trailer section */

/* tchar (RFC 9110 5.6.2): the characters of a token. */
static int is_tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A field value's characters besides the line's end: VCHAR, obs-text, space and tab. */
static int is_value_char(unsigned char c) {
  return c == ' ' || c == '\t' || (c >= 0x21 && c != 0x7f);
}

static int hex_value(unsigned char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

size_t http1_head_end(const char *buf, size_t len, size_t *scanned) {
  size_t i = *scanned > 3 ? *scanned - 3 : 0;
  for (; i < len; i++) {
    if (buf[i] != '\n') continue;
    /* an empty line: "\r\n\r\n", or a bare LF that the parser will refuse */
    if (i >= 1 && buf[i - 1] == '\n') return i + 1;
    if (i >= 3 && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r') return i + 1;
  }
  *scanned = len;
  return 0;
}

enum err http1_head_overlong(const char *buf, size_t len) {
  if (len > HTTP1_LINE_MAX && !memchr(buf, '\n', HTTP1_LINE_MAX)) return ERR_URI_TOO_LONG;
  return len > HTTP1_HEAD_MAX ? ERR_HEADERS_TOO_LARGE : ERR_OK;
}

static enum err refuse(enum err e, char *msg, size_t msglen, const char *text) {
  snprintf(msg, msglen, "%s", text);
  return e;
}

/* The line at *p (up to end) with its CRLF replaced by NULs; *p moves past it. Returns the line,
 * or NULL when it does not end in CRLF, or holds a NUL or a bare CR. */
static char *take_line(char **p, char *end) {
  char *line = *p, *lf = memchr(line, '\n', (size_t)(end - line));
  if (!lf || lf == line || lf[-1] != '\r') return NULL;
  lf[-1] = lf[0] = 0;
  if (strlen(line) != (size_t)(lf - 1 - line) || memchr(line, '\r', (size_t)(lf - 1 - line)))
    return NULL;
  *p = lf + 1;
  return line;
}

/* The request line: method SP request-target SP HTTP-version. */
static enum err request_line(char *line, struct http1_request *rq, char *msg, size_t n) {
  char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
  if (!sp1 || !sp2 || sp1 == line || sp2 == sp1 + 1)
    return refuse(ERR_INVALID_REQUEST, msg, n,
                  "The request line must be a method, a target and the HTTP version, each "
                  "separated by one space.");
  *sp1 = *sp2 = 0;
  for (const char *c = line; *c; c++)
    if (!is_tchar((unsigned char)*c))
      return refuse(ERR_INVALID_REQUEST, msg, n, "The request's method is not a token.");
  rq->method = line;
  char *target = sp1 + 1, *version = sp2 + 1;
  for (const char *c = target; *c; c++)
    if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
      return refuse(ERR_INVALID_REQUEST, msg, n,
                    "The request target holds a character that must be percent-encoded.");
  if (strncasecmp(target, "http://", 7) == 0 || strncasecmp(target, "https://", 8) == 0) {
    char *path = strchr(strstr(target, "//") + 2, '/');
    target = path ? path : (char *)"/";
  }
  if (target[0] != '/' && !(strcmp(target, "*") == 0 && strcmp(rq->method, "OPTIONS") == 0))
    return refuse(ERR_INVALID_REQUEST, msg, n,
                  "The request target must be a path starting with '/', or an absolute URI.");
  rq->target = target;
  if (strlen(version) != 8 || strncmp(version, "HTTP/", 5) != 0 || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9')
    return refuse(ERR_INVALID_REQUEST, msg, n, "The request line does not end in HTTP/1.1.");
  if (version[5] != '1')
    return refuse(ERR_HTTP_VERSION, msg, n, "This service speaks HTTP/1.1 and HTTP/1.0.");
  rq->minor = version[7] == '0' ? 0 : 1;
  return ERR_OK;
}

/* One header line: name ":" OWS value OWS. */
static enum err field_line(char *line, struct http1_request *rq, char *msg, size_t n) {
  if (line[0] == ' ' || line[0] == '\t')
    return refuse(ERR_INVALID_REQUEST, msg, n,
                  "A header line starts with white space (obs-fold), which this service refuses.");
  char *c = line;
  while (is_tchar((unsigned char)*c)) c++;
  if (c == line || *c != ':')
    return refuse(ERR_INVALID_REQUEST, msg, n,
                  "A header line is not a token name followed at once by a colon.");
  *c++ = 0;
  while (*c == ' ' || *c == '\t') c++;
  char *value = c, *end = c + strlen(c);
  for (const char *v = value; v < end; v++)
    if (!is_value_char((unsigned char)*v))
      return refuse(ERR_INVALID_REQUEST, msg, n, "A header value holds a control character.");
  while (end > value && (end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
  if (rq->nfields == HTTP1_FIELDS_MAX)
    return refuse(ERR_HEADERS_TOO_LARGE, msg, n, "The request has too many header lines.");
  rq->fields[rq->nfields++] = (struct http1_field){line, value};
  return ERR_OK;
}

const char *http1_field(const struct http1_request *rq, const char *name) {
  for (int i = 0; i < rq->nfields; i++)
    if (strcasecmp(rq->fields[i].name, name) == 0) return rq->fields[i].value;
  return NULL;
}

/* How many header fields are called name. */
static int count_fields(const struct http1_request *rq, const char *name) {
  int k = 0;
  for (int i = 0; i < rq->nfields; i++) k += strcasecmp(rq->fields[i].name, name) == 0;
  return k;
}

/* Whether the comma-separated list of tokens list holds token (case-insensitively). */
static int has_token(const char *list, const char *token) {
  size_t n = strlen(token);
  for (const char *p = list; p && *p;) {
    p += strspn(p, " \t,");
    size_t len = strcspn(p, ",");
    size_t k = len;
    while (k > 0 && (p[k - 1] == ' ' || p[k - 1] == '\t')) k--;
    if (k == n && strncasecmp(p, token, n) == 0) return 1;
    p += len;
  }
  return 0;
}

/* Where the body ends (RFC 9112 6.3), the expectation, Host and the connection's persistence. */
static enum err framing(struct http1_request *rq, char *msg, size_t n) {
  int lengths = count_fields(rq, "Content-Length"), codings = count_fields(rq, "Transfer-Encoding");
  const char *cl = http1_field(rq, "Content-Length"), *te = http1_field(rq, "Transfer-Encoding");
  if (lengths > 1 || (cl && (!*cl || strspn(cl, "0123456789") != strlen(cl) || strlen(cl) > 18)))
    return refuse(ERR_INVALID_REQUEST, msg, n,
                  "The request must have at most one Content-Length header, a decimal number.");
  if (lengths && codings)
    return refuse(ERR_INVALID_REQUEST, msg, n,
                  "The request has both Content-Length and Transfer-Encoding.");
  if (codings && (codings > 1 || strcasecmp(te, "chunked") != 0))
    return refuse(ERR_NOT_IMPLEMENTED, msg, n,
                  "The only Transfer-Encoding this service takes is chunked, once.");
  const char *expect = http1_field(rq, "Expect");
  if (expect && (count_fields(rq, "Expect") > 1 || strcasecmp(expect, "100-continue") != 0))
    return refuse(ERR_EXPECTATION_FAILED, msg, n,
                  "The only expectation this service meets is Expect: 100-continue.");
  if (rq->minor == 1 && count_fields(rq, "Host") != 1)
    return refuse(ERR_INVALID_REQUEST, msg, n, "An HTTP/1.1 request must have one Host header.");
  rq->has_length = cl != NULL;
  rq->content_length = 0;
  for (const char *d = cl; d && *d; d++) rq->content_length = rq->content_length * 10 + (*d - '0');
  rq->chunked = codings == 1;
  rq->expect_continue = expect != NULL;
  const char *conn = http1_field(rq, "Connection");
  rq->keep_alive = rq->minor == 1 ? !has_token(conn, "close") : has_token(conn, "keep-alive");
  return ERR_OK;
}

enum err http1_parse_head(char *buf, size_t len, struct http1_request *rq, char *msg,
                          size_t msglen) {
  char *p = buf, *end = buf + len, *line;
  memset(rq, 0, sizeof(*rq));
  if (len > HTTP1_HEAD_MAX)
    return refuse(ERR_HEADERS_TOO_LARGE, msg, msglen,
                  "The request line and headers are larger than this service takes.");
  if (!(line = take_line(&p, end)))
    return refuse(ERR_INVALID_REQUEST, msg, msglen,
                  "The request line must end in CRLF and hold no NUL or CR.");
  if (strlen(line) > HTTP1_LINE_MAX)
    return refuse(ERR_URI_TOO_LONG, msg, msglen, "The request line is longer than 8192 bytes.");
  enum err e = request_line(line, rq, msg, msglen);
  while (e == ERR_OK) {
    if (!(line = take_line(&p, end)))
      return refuse(ERR_INVALID_REQUEST, msg, msglen,
                    "Every header line must end in CRLF and hold no NUL or bare CR.");
    if (!*line) break; /* the empty line that ends the head */
    e = field_line(line, rq, msg, msglen);
  }
  if (e == ERR_OK && p != end)
    e = refuse(ERR_INVALID_REQUEST, msg, msglen, "The request head does not end where expected.");
  return e == ERR_OK ? framing(rq, msg, msglen) : e;
}

enum chunk_state {
  CH_SIZE,       /* the size's hex digits */
  CH_SIZE_WS,    /* white space after them */
  CH_EXT,        /* an extension, up to CR */
  CH_SIZE_LF,    /* the size line's LF */
  CH_DATA,       /* the chunk's data */
  CH_DATA_CR,    /* the CRLF after it */
  CH_DATA_LF,    /* its LF */
  CH_TRAILER,    /* the start of a trailer line, or of the final CRLF */
  CH_TRAILER_IN, /* within a trailer line */
  CH_TRAILER_LF, /* its LF */
  CH_END_LF,     /* the final LF */
  CH_DONE,       /* the body has ended */
};

/* One byte of a chunk's size line, in the states CH_SIZE to CH_SIZE_LF. Returns 0, or -1 when the
 * line is malformed. */
static int size_byte(struct http1_chunked *c, unsigned char b) {
  int h = hex_value(b);
  switch (c->state) {
  case CH_SIZE:
    if (h >= 0 && ++c->digits <= 15) {
      c->left = c->left << 4 | (uint64_t)h;
      return 0;
    }
    if (h >= 0 || c->digits == 0) return -1;
    c->state = b == ' ' || b == '\t' ? CH_SIZE_WS : b == ';' ? CH_EXT : b == '\r' ? CH_SIZE_LF : -1;
    c->line = 0;
    return c->state < 0 ? -1 : 0;
  case CH_SIZE_WS:
    if (b == ' ' || b == '\t') return 0;
    c->state = b == ';' ? CH_EXT : b == '\r' ? CH_SIZE_LF : -1;
    return c->state < 0 ? -1 : 0;
  case CH_EXT:
    if (b == '\r') c->state = CH_SIZE_LF;
    return b == '\r' || (is_value_char(b) && ++c->line <= CHUNK_EXT_MAX) ? 0 : -1;
  default: /* CH_SIZE_LF */
    if (b != '\n') return -1;
    c->state = c->left ? CH_DATA : CH_TRAILER;
    c->line = 0;
    return 0;
  }
}

/* One byte of the CRLF after a chunk's data, or of the trailer section (CH_DATA_CR and after);
 * the state becomes CH_DONE at the section's end. Returns 0, or -1 when it is malformed. */
static int after_data_byte(struct http1_chunked *c, unsigned char b) {
  switch (c->state) {
  case CH_DATA_CR:
    c->state = CH_DATA_LF;
    return b == '\r' ? 0 : -1;
  case CH_DATA_LF:
    c->state = CH_SIZE, c->digits = 0, c->left = 0;
    return b == '\n' ? 0 : -1;
  case CH_TRAILER: /* an empty line ends the section; any other starts a trailer line */
  case CH_TRAILER_IN:
    if (b == '\r') {
      c->state = c->state == CH_TRAILER ? CH_END_LF : CH_TRAILER_LF;
      return 0;
    }
    c->state = CH_TRAILER_IN;
    return is_value_char(b) && ++c->line <= TRAILER_MAX ? 0 : -1;
  case CH_TRAILER_LF:
    c->state = CH_TRAILER;
    return b == '\n' ? 0 : -1;
  default: /* CH_END_LF */
    c->state = CH_DONE;
    return b == '\n' ? 0 : -1;
  }
}

enum err http1_chunk(struct http1_chunked *c, const uint8_t *in, size_t n, size_t *used,
                     const uint8_t **data, size_t *len, int *done, char *msg, size_t msglen) {
  size_t i = 0;
  *data = NULL, *len = 0;
  for (; i < n && c->state != CH_DONE; i++) {
    if (c->state == CH_DATA) { /* a piece of the chunk's data, returned as it lies in in */
      size_t k = n - i < c->left ? n - i : (size_t)c->left;
      *data = in + i, *len = k;
      c->left -= k;
      if (c->left == 0) c->state = CH_DATA_CR;
      *used = i + k;
      *done = 0;
      return ERR_OK;
    }
    int st = c->state;
    if ((st < CH_DATA ? size_byte(c, in[i]) : after_data_byte(c, in[i])) != 0)
      return refuse(ERR_INVALID_REQUEST, msg, msglen,
                    st < CH_DATA ? "A chunk's size line is not 1 to 15 hex digits, optional "
                                   "extensions and CRLF."
                    : st <= CH_DATA_LF
                        ? "A chunk's data is not followed by CRLF."
                        : "The chunked body's trailer section is malformed or too large.");
  }
  *used = i;
  *done = c->state == CH_DONE;
  return ERR_OK;
}

static const struct {
  int status;
  const char *reason;
} reasons[] = {
    {100, "Continue"},
    {200, "OK"},
    {204, "No Content"},
    {304, "Not Modified"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {406, "Not Acceptable"},
    {408, "Request Timeout"},
    {413, "Content Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {417, "Expectation Failed"},
    {422, "Unprocessable Content"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {503, "Service Unavailable"},
    {505, "HTTP Version Not Supported"},
};

const char *http_reason(int status) {
  for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
    if (reasons[i].status == status) return reasons[i].reason;
  return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
}

/* Formatted once a second per thread. */
const char *http_date(void) {
  static _Thread_local char text[40];
  static _Thread_local time_t last = -1;
  time_t t = time(NULL);
  if (t != last) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    last = t;
  }
  return text;
}

/* HTTP caching for the answers that stay the same until the process restarts (the routes flagged
 * ROUTE_CACHE: the demo page's files, /methods, /openapi.json): a strong ETag made from the bytes
 * (their length and CRC-32) with Cache-Control: no-cache, so that a cache asks again each time and
 * a new build is seen at once, 304 Not Modified when If-None-Match names it, and gzip (libdeflate)
 * when Accept-Encoding allows it and it makes the body smaller. The gzip body has an ETag of its
 * own
 * ("-gzip" appended), as a strong validator must differ between encodings. */
#include "api_int.h"

#include <libdeflate.h>
#include <stdlib.h>

#define GZIP_MIN   1024 /* bytes: a smaller body is sent as it is */
#define GZIP_LEVEL 6

/* resp's body gzipped in place when that is shorter; returns whether it was. */
static int gzip_body(struct api_response *resp) {
  struct libdeflate_compressor *c = libdeflate_alloc_compressor(GZIP_LEVEL);
  size_t cap = c ? libdeflate_gzip_compress_bound(c, resp->len) : 0;
  uint8_t *out = cap ? malloc(cap) : NULL;
  size_t n = out ? libdeflate_gzip_compress(c, resp->body, resp->len, out, cap) : 0;
  libdeflate_free_compressor(c);
  if (n == 0 || n >= resp->len) {
    free(out);
    return 0;
  }
  free(resp->body);
  resp->body = out;
  resp->len = n;
  return 1;
}

struct api_response *cache_answer(const struct api_request *req, struct api_response *resp) {
  if (!resp || resp->status != 200) return resp;
  char etag[48];
  size_t len = resp->len;
  unsigned crc = (unsigned)libdeflate_crc32(0, resp->body, len);
  int gz = len >= GZIP_MIN && http_coding_q(req->accept_encoding, "gzip") > 0 && gzip_body(resp);
  snprintf(etag, sizeof(etag), "\"%zx-%08x%s\"", len, crc, gz ? "-gzip" : "");
  api_response_header(resp, "ETag", "%s", etag);
  api_response_header(resp, "Vary", "Accept-Encoding");
  api_response_header(resp, "Cache-Control", "no-cache"); /* revalidate: a new build is seen */
  if (!http_etag_match(req->if_none_match, etag)) {
    if (gz) api_response_header(resp, "Content-Encoding", "gzip");
  } else {
    free(resp->body);
    resp->body = NULL;
    resp->len = 0;
    resp->status = 304;
    resp->content_type = NULL; /* a 304 carries the validators, no representation */
  }
  return resp;
}

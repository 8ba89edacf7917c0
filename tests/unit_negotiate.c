/* unit_negotiate: the Accept header's q-values (http/negotiate.c, RFC 9110 section 12.5.1): the
 * most specific matching range counts, q=0 refuses, an absent or empty header, or one with no
 * media range in it, accepts anything, a malformed q drops its range, and http_negotiate's choice
 * between the image and JSON (the image on a tie, 406 when neither is acceptable). */
#include "../api/api_int.h"
#include "test.h"

static void q_values(void) {
  ASSERT_INT(http_accept_q(NULL, "image/png"), ==, 1000);
  ASSERT_INT(http_accept_q("", "image/png"), ==, 1000);
  ASSERT_INT(http_accept_q("  ", "image/png"), ==, 1000);
  ASSERT_INT(http_accept_q("image/png", "image/png"), ==, 1000);
  ASSERT_INT(http_accept_q("IMAGE/PNG", "image/png"), ==, 1000);
  ASSERT_INT(http_accept_q("image/png", "image/jpeg"), ==, 0);
  ASSERT_INT(http_accept_q("image/pngx", "image/png"), ==, 0);
  ASSERT_INT(http_accept_q("image/*;q=0.3", "image/webp"), ==, 300);
  ASSERT_INT(http_accept_q("*/*;q=0.5", "application/json"), ==, 500);
  ASSERT_INT(http_accept_q("application/*", "image/png"), ==, 0);
  /* the most specific range counts, whatever the order and the q-values */
  ASSERT_INT(http_accept_q("*/*, image/png;q=0", "image/png"), ==, 0);
  ASSERT_INT(http_accept_q("image/png;q=0.2, image/*;q=0.9, */*", "image/png"), ==, 200);
  ASSERT_INT(http_accept_q("image/png;q=0.2, image/*;q=0.9, */*", "image/jpeg"), ==, 900);
  ASSERT_INT(http_accept_q("image/png;q=0.2, image/*;q=0.9, */*", "text/plain"), ==, 1000);
  /* spaces, other parameters, three decimals, and malformed q-values (the range is dropped) */
  ASSERT_INT(http_accept_q(" image/png ; level=1 ; q=0.125 ", "image/png"), ==, 125);
  ASSERT_INT(http_accept_q("image/png;Q=1.000", "image/png"), ==, 1000);
  ASSERT_INT(http_accept_q("image/png;q=2", "image/png"), ==, 0);
  ASSERT_INT(http_accept_q("image/png;q=1.5", "image/png"), ==, 0);
  ASSERT_INT(http_accept_q("image/png;q=0.12345", "image/png"), ==, 0);
  ASSERT_INT(http_accept_q("image/png;q=abc, */*;q=0.1", "image/png"), ==, 100);
  ASSERT_INT(http_accept_q(",,image/png;q=0.7,", "image/png"), ==, 700);
  /* a header with no media range in it is ignored, as a missing one */
  ASSERT_INT(http_accept_q(";;;,,", "image/png"), ==, 1000);
  ASSERT_INT(http_accept_q("png, jpeg;q=0.5", "application/json"), ==, 1000);
  ASSERT_INT(http_accept_q("image/, /png", "image/png"), ==, 1000);
  ASSERT_INT(http_accept_q("garbage, image/png;q=0", "image/png"), ==, 0);
}

/* http_negotiate's answer for accept on a result of type image: 0 image, 1 JSON, -1 406. */
static int answer(const char *accept, const char *image) {
  char msg[256] = "";
  int json = -7;
  enum err e = http_negotiate(accept, image, &json, msg, sizeof(msg));
  if (e == ERR_NOT_ACCEPTABLE) {
    ASSERT(strstr(msg, image) != NULL);
    return -1;
  }
  ASSERT_INT(e, ==, ERR_OK);
  return json;
}

static void choices(void) {
  ASSERT_INT(answer(NULL, "image/png"), ==, 0);
  ASSERT_INT(answer("*/*", "image/png"), ==, 0);
  ASSERT_INT(answer("application/json, */*;q=0.5", "image/png"), ==, 1); /* HTTPie */
  ASSERT_INT(answer("image/png, application/json;q=0.5", "image/png"), ==, 0);
  ASSERT_INT(answer("application/json;q=0", "image/png"), ==, -1);
  ASSERT_INT(answer("application/json;q=0, */*", "image/png"), ==, 0);
  ASSERT_INT(answer("image/webp", "image/png"), ==, -1);
  ASSERT_INT(answer("image/webp, application/json;q=0.1", "image/png"), ==, 1);
  ASSERT_INT(answer("image/*, application/json", "image/jpeg"), ==, 0); /* a tie: the image */
  ASSERT_INT(answer("application/json", "image/jpeg"), ==, 1);
  ASSERT_INT(answer("text/html, application/xhtml+xml", "image/png"), ==, -1);
  /* a browser's <img> header */
  ASSERT_INT(
      answer("image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8", "image/png"), ==,
      0);
}

/* Accept-Encoding: the coding by name, else "*", weighs; q=0 refuses; none asks for nothing. */
static void codings(void) {
  ASSERT_INT(http_coding_q(NULL, "gzip"), ==, 0);
  ASSERT_INT(http_coding_q("", "gzip"), ==, 0);
  ASSERT_INT(http_coding_q("gzip, deflate, br", "gzip"), ==, 1000);
  ASSERT_INT(http_coding_q("br;q=1.0, GZIP ; q=0.5", "gzip"), ==, 500);
  ASSERT_INT(http_coding_q("deflate, br", "gzip"), ==, 0);
  ASSERT_INT(http_coding_q("*", "gzip"), ==, 1000);
  ASSERT_INT(http_coding_q("gzip;q=0, *", "gzip"), ==, 0); /* the name wins over "*" */
  ASSERT_INT(http_coding_q("*, gzip;q=0", "gzip"), ==, 0);
  ASSERT_INT(http_coding_q("x-gzip", "gzip"), ==, 0);
  ASSERT_INT(http_coding_q("gzip;q=2", "gzip"), ==, 0); /* no q-value: ignored */
}

/* If-None-Match: "*", or a list of tags compared weakly. */
static void entity_tags(void) {
  ASSERT_INT(http_etag_match(NULL, "\"a\""), ==, 0);
  ASSERT_INT(http_etag_match("\"a\"", "\"a\""), ==, 1);
  ASSERT_INT(http_etag_match("W/\"a\"", "\"a\""), ==, 1);
  ASSERT_INT(http_etag_match(" \"b\" ,\"a\" ", "\"a\""), ==, 1);
  ASSERT_INT(http_etag_match("*", "\"a\""), ==, 1);
  ASSERT_INT(http_etag_match("\"a-gzip\"", "\"a\""), ==, 0);
  ASSERT_INT(http_etag_match("\"a", "\"a\""), ==, 0);
  ASSERT_INT(http_etag_match("", "\"a\""), ==, 0);
}

int main(void) {
  RUN(q_values);
  RUN(choices);
  RUN(codings);
  RUN(entity_tags);
  fprintf(stderr, "unit_negotiate: ok\n");
  return 0;
}

/* errors: blurd's one error type, from the filters and codecs up to the HTTP answer: each error's
 * name, the HTTP status it is answered with, the code clients read and its default sentence, once
 * in ERRORS below (the enum, the statuses and the messages are all made from it). Every room
 * includes this header; it includes nothing of blurd's. */
#ifndef BLURD_ERRORS_H
#define BLURD_ERRORS_H

/* clang-format off */
#define ERRORS(X)                                                                             \
  X(BAD_PARAMETER,       400, "invalid_parameter",     "A parameter has an invalid value.")        \
  X(MISSING_PARAMETER,   400, "missing_parameter",     "A required parameter is missing.")         \
  X(UNKNOWN_PARAMETER,   400, "unknown_parameter",     "The request has a parameter this endpoint does not know.") \
  X(CONFLICTING_PARAMETER, 400, "conflicting_parameter", "A parameter has different values in the query string and in params or the JSON body.") \
  X(UNKNOWN_METHOD,      400, "unknown_method",        "The method is not one this service offers.") \
  X(BAD_JSON,            400, "invalid_json",          "The params field or the JSON body is not a valid JSON object.") \
  X(BAD_MULTIPART,       400, "invalid_multipart",     "The multipart/form-data body is malformed.") \
  X(MISSING_IMAGE,       400, "missing_image",         "The request carries no image.")             \
  X(BAD_IMAGE_ENCODING,  400, "invalid_image_encoding", "The image in the JSON body is not valid base64.") \
  X(INVALID_REQUEST,     400, "invalid_request",       "The request is not valid HTTP/1.1, or its headers do not say unambiguously where its body ends.") \
  X(UNAUTHORIZED,        401, "unauthorized",          "This endpoint needs the API key, as 'Authorization: Bearer KEY' or 'X-API-Key: KEY'.") \
  X(NOT_FOUND,           404, "not_found",             "There is no such endpoint.")                \
  X(METHOD_NOT_ALLOWED,  405, "method_not_allowed",    "This endpoint does not accept that HTTP method.") \
  X(NOT_ACCEPTABLE,      406, "not_acceptable",        "The Accept header accepts neither the result's image type nor application/json.") \
  X(REQUEST_TIMEOUT,     408, "request_timeout",       "The request did not arrive in time; the connection is closed.") \
  X(BODY_TOO_LARGE,      413, "body_too_large",        "The request body is larger than the configured limit.") \
  X(URI_TOO_LONG,        414, "uri_too_long",          "The request line is longer than this service takes.") \
  X(UNSUPPORTED_MEDIA,   415, "unsupported_media_type", "The upload is in no format this service reads.") \
  X(EXPECTATION_FAILED,  417, "expectation_failed",    "The only expectation this service meets is Expect: 100-continue.") \
  X(UNDECODABLE,         422, "undecodable_image",     "The image is corrupt or truncated.")        \
  X(IMAGE_TOO_LARGE,     422, "image_too_large",       "The image is larger than the configured limits.") \
  X(UNSUPPORTED_IMAGE,   422, "unsupported_image",     "The image uses a feature this service does not support.") \
  X(TOO_EXPENSIVE,       422, "too_expensive",         "The request would take more work than the service allows (--max-cost); use a faster method, smaller parameters or a smaller image.") \
  X(TOO_MANY_CONNECTIONS_FROM_ADDRESS, 429, "too_many_connections_from_address", "This address has as many connections open as the service allows; retry shortly.") \
  X(HEADERS_TOO_LARGE,   431, "headers_too_large",     "The request's headers are larger than this service takes.") \
  X(INTERNAL,            500, "internal_error",        "Something went wrong inside the service.")  \
  X(NOT_IMPLEMENTED,     501, "not_implemented",       "The only Transfer-Encoding this service takes is chunked.") \
  X(QUEUE_FULL,          503, "queue_full",            "The job queue is full; retry shortly.")     \
  X(BUFFER_FULL,         503, "buffer_full",           "The service holds as many request and response bytes as it allows; retry shortly.") \
  X(TOO_MANY_CONNECTIONS, 503, "too_many_connections", "The service has as many connections open as it allows; retry shortly.") \
  X(OUT_OF_MEMORY,       503, "out_of_memory",         "The service ran out of memory for this request; retry shortly.") \
  X(SHUTTING_DOWN,       503, "shutting_down",         "The service is shutting down.")   \
  X(DEADLINE_EXCEEDED,   503, "deadline_exceeded",     "The request took longer than the service allows; retry later.") \
  X(HTTP_VERSION,        505, "http_version_not_supported", "This service speaks HTTP/1.1 and HTTP/1.0.") \
  X(CLIENT_GONE,         499, "client_closed_request", "The client closed the connection before the answer.") \
  X(GPU_ERROR,           503, "gpu_error",             "The GPU could not run this request; retry shortly.") \
  X(GPU_LOST,            503, "gpu_lost",              "The GPU failed; the service is restarting.")
/* clang-format on */

enum err {
  ERR_OK = 0,
#define X(e, status, code, msg) ERR_##e,
  ERRORS(X)
#undef X
      ERR_COUNT
};

/* HTTP status of e (200 for ERR_OK). */
int err_status(enum err e);
/* snake_case code of e ("queue_full"). */
const char *err_code(enum err e);
/* The default sentence of e. */
const char *err_message(enum err e);

#endif

/* Integration-test harness: starts the real blurd binary (BLURD_BIN) on a free port, waits for
 * /healthz, sends real requests with libcurl and stops it with a signal (after lwan's
 * testsuite.py). Fixtures come from BLURD_DATA, else tests/data. */
#ifndef BLURD_HARNESS_H
#define BLURD_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct server {
  pid_t pid;
  int port;
  char base[64]; /* "http://127.0.0.1:PORT" */
};

struct http_resp {
  long status;
  char *body; /* NUL-terminated, owned */
  size_t len;
  char *headers;  /* raw response headers, owned */
  double seconds; /* wall time of the request */
};

/* Starts blurd with --bind 127.0.0.1 --port 0 --access-log off and the extra args
 * (NULL-terminated; they may override those), waits until /healthz answers. Aborts the test on
 * failure. */
void server_start(struct server *s, const char *const *args);
/* server_start with extra environment variables ("NAME=value", NULL-terminated). */
void server_start_env(struct server *s, const char *const *args, const char *const *env);
/* Resident memory of the server in kB (VmRSS), or -1. */
long server_rss_kb(const struct server *s);
/* Peak resident memory of the server in kB (VmHWM), or -1. */
long server_hwm_kb(const struct server *s);
/* The server's CPU seconds: its threads', its waited-for children's, and those of the children it
 * still has (blurd runs libwebp's long encodes in child processes); *sys (may be NULL) gets the
 * system part added. */
double server_cpu_s(const struct server *s, double *sys);
/* How many of the server port's sockets are in CLOSE_WAIT (/proc/net/tcp). */
int server_close_wait(const struct server *s);
/* The value of series ("name" or "name{labels}") in the server's /metrics, or -1. */
double server_metric(const struct server *s, const char *series);
/* A TCP connection to the server from the loopback address src (e.g. "127.0.0.2"), so that
 * tests can play several clients; -1 on failure. */
int connect_from(const struct server *s, const char *src);
/* Waits up to timeout_s for the server to close fd (reading and dropping what it sends); returns
 * the seconds it took, or -1 when it stayed open. */
double wait_closed(int fd, double timeout_s);
/* Sends sig and waits; returns the exit status, or 128+signal when killed. */
int server_stop(struct server *s, int sig);
/* Runs blurd (BLURD_BIN) with --bind 127.0.0.1 --port 0 --warm-image 0 and args (NULL-terminated),
 * the environment variables env ("NAME=value", NULL-terminated; may be NULL) added, until it
 * exits: for starts that must be refused (one that starts after all is killed after 10 s). Its
 * stderr goes into err (errlen bytes, NUL-terminated), or nowhere when err is NULL. Returns its
 * exit status, or 128+signal when killed. */
int refused_start(const char *const *args, const char *const *env, char *err, size_t errlen);

/* One request. ctype and accept may be NULL; body may be NULL for GET. Returns 0, or -1 when no
 * HTTP response came (connection refused, reset). */
int http_request(const struct server *s, const char *method, const char *path, const char *ctype,
                 const char *accept, const void *body, size_t len, struct http_resp *r);
/* http_request with extra request headers ("Name: value", NULL-terminated; may be NULL). */
int http_request_h(const struct server *s, const char *method, const char *path,
                   const char *const *headers, const void *body, size_t len, struct http_resp *r);
/* A multipart body of FORM_TYPE's boundary: the image in the field "image", then the params
 * JSON text in "params"; its length in *blen. Caller frees. */
#define FORM_TYPE "multipart/form-data; boundary=XX"
char *form_body(const uint8_t *img, size_t len, const char *params, size_t *blen);
/* POST of a multipart form: the image in field (e.g. "image"), params JSON or NULL. */
int http_post_form(const struct server *s, const char *path, const char *field, const void *img,
                   size_t len, const char *params, const char *accept, struct http_resp *r);
/* A JSON request body: {"image": "<prefix><img in standard base64, padded>"} with the keys of
 * the JSON object params (or NULL) besides. prefix may be "" or "data:image/png;base64,".
 * Caller frees. */
char *json_body(const void *img, size_t len, const char *prefix, const char *params);
/* POST of body with Content-Type application/json. */
int http_post_json(const struct server *s, const char *path, const char *body, const char *accept,
                   struct http_resp *r);
/* Value of header name (case-insensitive) copied to buf, or NULL. */
const char *http_header(const struct http_resp *r, const char *name, char *buf, size_t n);
/* Header name of r as a number ("inf" is INFINITY); fails the test when it is missing. */
double http_header_num(const struct http_resp *r, const char *name);
/* The Server-Timing entry of stage ("decode") in r: its duration in ms, or -1 when r has none;
 * its desc (the codec) is copied into desc ("" when it has none). */
double http_stage(const struct http_resp *r, const char *stage, char *desc, size_t n);
/* Fails the test unless r's Server-Timing times the stages queue, decode, filter, encode, total
 * (filter only when filtered is set), and names the codec of decode and encode: decoder and
 * encoder, or any nvJPEG one for "nvjpeg" (see expected_codec). */
void http_expect_stages(const struct http_resp *r, int filtered, const char *decoder,
                        const char *encoder);
/* The codec the server should report for a file of this format ("jpeg", "png", "webp") on the
 * decode or encode side: libpng for PNG (libdeflate for the files formats/png.c reads itself:
 * codec_png_direct), libwebp for WebP; for JPEG "nvjpeg" (any nvJPEG decoder)
 * when the environment sets BLURD_EXPECT_GPU_CODECS=1, else libjpeg-turbo. */
const char *expected_codec(const char *format);
/* Asserts that r is the JSON error body of this status and code, with a message. */
void http_expect_error(const struct http_resp *r, long status, const char *code);
void http_resp_free(struct http_resp *r);

struct http_buf { /* a growing NUL-terminated buffer */
  char *p;
  size_t len;
};

/* A libcurl write callback appending to the struct http_buf in ud. */
size_t http_collect(char *data, size_t size, size_t n, void *ud);

/* The bytes of fixture name (in BLURD_DATA or tests/data); aborts when missing. Caller frees. */
uint8_t *fixture(const char *name, size_t *len);

#endif

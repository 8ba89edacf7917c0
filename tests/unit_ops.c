/* Unit tests of the api's operations side without a server: request ids (echoed, replaced,
 * generated and unique), api_admit's API key check in both header forms and its open paths,
 * CORS preflights and headers, and what api_observe leaves in the metrics text (exact counter
 * lines, the bucket a stage time lands in, label escaping, the in-flight gauge) and in the
 * access log (a JSON line, with bytes a client sent escaped). */
#include "test.h"

#include "../api/api_int.h"

#include <jansson.h>
#include <unistd.h>

static struct api_ctx *ctx_new(const char *key, const char *cors, const char *log) {
  struct api_config cfg = {.backend = API_BACKEND_CPU,
                           .workers = 1,
                           .queue = 1,
                           .max_body = 1 << 20,
                           .max_pixels = 1 << 20,
                           .max_width = 1024,
                           .max_height = 1024,
                           .access_log = log,
                           .api_key = key,
                           .cors_origins = cors};
  char err[256] = "";
  struct api_ctx *ctx = api_new(&cfg, err, sizeof(err));
  if (!ctx) TEST_FAIL("api_new: %s", err);
  return ctx;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(a, b);
}

static void test_request_ids(void) {
  struct api_ctx *ctx = ctx_new(NULL, NULL, NULL);
  char id[API_REQUEST_ID_MAX + 1], long_id[API_REQUEST_ID_MAX + 2];
  static char ids[10000][17];
  api_request_id(ctx, "abc 123/x", id);
  ASSERT_STR(id, "abc 123/x");
  memset(long_id, 'z', sizeof(long_id) - 1);
  long_id[API_REQUEST_ID_MAX] = 0;
  api_request_id(ctx, long_id, id);
  ASSERT_STR(id, long_id); /* 128 characters: echoed */
  long_id[API_REQUEST_ID_MAX] = 'z', long_id[API_REQUEST_ID_MAX + 1] = 0;
  static const char *const replaced[] = {"", "tab\there", "caf\xc3\xa9", "del\x7f", NULL};
  for (int i = 0; i < 5; i++) {
    api_request_id(ctx, i < 4 ? replaced[i] : long_id, id);
    ASSERT_INT(strlen(id), ==, 16);
    ASSERT_INT(strspn(id, "0123456789abcdef"), ==, 16);
  }
  for (int i = 0; i < 10000; i++) api_request_id(ctx, NULL, ids[i]);
  qsort(ids, 10000, sizeof(ids[0]), cmp_str);
  for (int i = 1; i < 10000; i++) ASSERT(strcmp(ids[i - 1], ids[i]) != 0);
  api_free(ctx);
}

/* api_admit's status for a request (0: admitted), freeing any response. */
static int admit(struct api_ctx *ctx, const char *method, const char *uri, const char *auth,
                 const char *key, const char *origin) {
  struct api_trace trace = {0};
  struct api_request req = {.method = method,
                            .uri = uri,
                            .authorization = auth,
                            .api_key = key,
                            .origin = origin,
                            .cors_method = origin ? "POST" : NULL,
                            .trace = &trace};
  struct api_response *r = api_admit(ctx, &req);
  ASSERT(trace.admitted);
  api_observe(ctx, &req, &(struct api_outcome){r ? r->status : 200, 0, 0});
  int status = r ? r->status : 0;
  if (r && r->status == 401) {
    ASSERT_STR(r->headers[0].name, "WWW-Authenticate");
    ASSERT(strncmp(r->headers[0].value, "Bearer", 6) == 0);
    ASSERT(strstr((const char *)r->body, "\"code\":\"unauthorized\""));
  }
  api_response_free(r);
  return status;
}

static void test_api_key(void) {
  struct api_ctx *ctx = ctx_new("k3y", NULL, NULL);
  ASSERT_INT(admit(ctx, "POST", "/blur?sigma=2", NULL, NULL, NULL), ==, 401);
  ASSERT_INT(admit(ctx, "POST", "/blur", "Bearer k3y", NULL, NULL), ==, 0);
  ASSERT_INT(admit(ctx, "POST", "/blur", "BEARER   k3y", NULL, NULL), ==, 0);
  ASSERT_INT(admit(ctx, "POST", "/blur", NULL, "k3y", NULL), ==, 0);
  ASSERT_INT(admit(ctx, "POST", "/blur", "Bearer wrong", "k3y", NULL), ==, 0); /* either one */
  static const char *const bad[] = {"Bearer k3", "Bearer k3yy", "Bearer K3Y", "Bearer ",
                                    "Basic k3y", "k3y",         "Bearerk3y"};
  for (int i = 0; i < 7; i++) ASSERT_INT(admit(ctx, "POST", "/blur", bad[i], NULL, NULL), ==, 401);
  ASSERT_INT(admit(ctx, "POST", "/blur", NULL, "", NULL), ==, 401);
  ASSERT_INT(admit(ctx, "POST", "/blur", NULL, "k3y ", NULL), ==, 401);
  static const char *const open[] = {"/healthz", "/readyz?verbose=1", "/metrics", "/methods",
                                     "/",        "/openapi.json"};
  for (int i = 0; i < 6; i++) ASSERT_INT(admit(ctx, "GET", open[i], NULL, NULL, NULL), ==, 0);
  static const char *const closed[] = {"/healthzz", "/healthz/x", "/nope", "//", "/Metrics"};
  for (int i = 0; i < 5; i++) ASSERT_INT(admit(ctx, "GET", closed[i], NULL, NULL, NULL), ==, 401);
  /* without CORS an OPTIONS is no preflight: it needs the key like any request */
  ASSERT_INT(admit(ctx, "OPTIONS", "/blur", NULL, NULL, "https://a.example"), ==, 401);
  api_free(ctx);
}

/* The value of header name in r, or NULL. */
static const char *header(const struct api_response *r, const char *name) {
  for (int i = 0; i < r->nheaders; i++)
    if (strcmp(r->headers[i].name, name) == 0) return r->headers[i].value;
  return NULL;
}

static void test_cors(void) {
  struct api_ctx *ctx = ctx_new("k", " https://a.example ,HTTPS://B.example/", NULL);
  struct api_request req = {.method = "OPTIONS", .uri = "/convert?x", .cors_method = "POST"};
  static const char *const allowed[] = {"https://a.example", "https://b.example"};
  static const char *const refused[] = {"https://a.example.evil", "http://a.example", "null", ""};
  for (int i = 0; i < 2; i++) {
    req.origin = allowed[i];
    struct api_response *r = api_admit(ctx, &req);
    ASSERT(r && r->status == 204 && r->len == 0 && !r->content_type);
    api_finish(ctx, &req, r);
    ASSERT_STR(header(r, "Access-Control-Allow-Origin"), allowed[i]);
    ASSERT_STR(header(r, "Access-Control-Allow-Methods"), "POST");
    ASSERT_STR(header(r, "Vary"), "Origin");
    ASSERT(strstr(header(r, "Access-Control-Allow-Headers"), "X-API-Key"));
    ASSERT(strstr(header(r, "Access-Control-Expose-Headers"), "Server-Timing"));
    api_response_free(r);
  }
  for (int i = 0; i < 4; i++) {
    req.origin = refused[i];
    struct api_response *r = api_admit(ctx, &req);
    ASSERT(r && (r->status == 204 || (i == 3 && r->status == 401))); /* "": no preflight */
    api_finish(ctx, &req, r);
    ASSERT(!header(r, "Access-Control-Allow-Origin"));
    ASSERT_STR(header(r, "Vary"), "Origin");
    api_response_free(r);
  }
  req.uri = "/nope";
  req.origin = allowed[0];
  struct api_response *r = api_admit(ctx, &req);
  ASSERT(r && r->status == 404);
  api_response_free(r);
  api_free(ctx);
}

/* Whether the /metrics text of ctx has this exact line. */
static int has_line(struct api_ctx *ctx, const char *line) {
  struct api_response *r = metrics_response(ctx);
  ASSERT(r && r->status == 200);
  char *text = strndup((const char *)r->body, r->len), *p = text;
  size_t n = strlen(line);
  int found = 0;
  for (; p && *p && !found; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    found = strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == 0);
  free(text);
  api_response_free(r);
  return found;
}

/* One answered request through api_admit and api_observe. */
static void request(struct api_ctx *ctx, const char *uri, const char *algorithm, int status,
                    double decode_ms) {
  struct api_trace t = {0};
  struct api_request req = {.method = "POST", .uri = uri, .id = "id-1", .trace = &t};
  struct api_response *r = api_admit(ctx, &req);
  api_response_free(r);
  t.algorithm = algorithm;
  if (decode_ms >= 0) t.stage[0] = "decode", t.stage_ms[0] = decode_ms, t.nstages = 1;
  ASSERT(has_line(ctx, "blurd_in_flight 1"));
  api_observe(ctx, &req, &(struct api_outcome){status, 10, 20});
  api_observe(ctx, &req, &(struct api_outcome){status, 10, 20}); /* in flight only once */
}

static void test_metrics(void) {
  struct api_ctx *ctx = ctx_new(NULL, NULL, NULL);
  request(ctx, "/blur?sigma=1", "yvv", 200, 3.0);
  request(ctx, "/blur", "yvv", 200, -1);
  request(ctx, "/nope", NULL, 404, -1);
  ASSERT(has_line(ctx, "blurd_requests_total{route=\"/blur\",algorithm=\"yvv\",code=\"200\"} 4"));
  ASSERT(has_line(ctx, "blurd_requests_total{route=\"other\",algorithm=\"none\",code=\"404\"} 2"));
  ASSERT(has_line(ctx, "blurd_stage_seconds_bucket{stage=\"decode\",le=\"0.0025\"} 0"));
  ASSERT(has_line(ctx, "blurd_stage_seconds_bucket{stage=\"decode\",le=\"0.005\"} 2"));
  ASSERT(has_line(ctx, "blurd_stage_seconds_bucket{stage=\"decode\",le=\"+Inf\"} 2"));
  ASSERT(has_line(ctx, "blurd_stage_seconds_sum{stage=\"decode\"} 0.006000000"));
  ASSERT(has_line(ctx, "blurd_stage_seconds_count{stage=\"decode\"} 2"));
  ASSERT(has_line(ctx, "blurd_in_flight 0"));
  ASSERT(has_line(ctx, "blurd_queue_capacity 1"));
  ASSERT(has_line(ctx, "blurd_backend_info{backend=\"cpu\"} 1"));
  /* durations by route, HTTP method and code; an answer before routing counts under its path */
  struct api_trace t = {0};
  struct api_request brew = {
      .method = "BREW", .uri = "/blur?x", .t_start = api_now_ms() - 3.0, .trace = &t};
  api_observe(ctx, &brew, &(struct api_outcome){417, 0, 0});
  ASSERT(has_line(ctx, "blurd_requests_total{route=\"/blur\",algorithm=\"none\",code=\"417\"} 1"));
  ASSERT(has_line(ctx, "blurd_request_duration_seconds_bucket{route=\"/blur\",method=\"other\","
                       "code=\"417\",le=\"0.0025\"} 0"));
  ASSERT(has_line(ctx, "blurd_request_duration_seconds_count{route=\"/blur\",method=\"other\","
                       "code=\"417\"} 1"));
  metrics_duration(ctx->metrics, "/blur", "POST", 200, 0.7);
  metrics_duration(ctx->metrics, "/blur", "POST", 200, 30e3);
  ASSERT(has_line(ctx, "blurd_request_duration_seconds_bucket{route=\"/blur\",method=\"POST\","
                       "code=\"200\",le=\"0.001\"} 1"));
  ASSERT(has_line(ctx, "blurd_request_duration_seconds_bucket{route=\"/blur\",method=\"POST\","
                       "code=\"200\",le=\"60\"} 2"));
  ASSERT(has_line(ctx, "blurd_request_duration_seconds_sum{route=\"/blur\",method=\"POST\","
                       "code=\"200\"} 30.000700000"));
  metrics_count(ctx->metrics, "/a\"b\\c", "x\ny", 200); /* escaped as the format wants */
  ASSERT(has_line(ctx, "blurd_requests_total{route=\"/a\\\"b\\\\c\",algorithm=\"x\\ny\","
                       "code=\"200\"} 1"));
  api_free(ctx);
}

static void test_access_log(void) {
  char path[64], line[4200], more[8];
  snprintf(path, sizeof(path), "/tmp/blurd-unit-ops.%d", (int)getpid());
  unlink(path);
  struct api_ctx *ctx = ctx_new(NULL, NULL, path);
  struct api_trace t = {
      .endpoint = NULL, .nstages = 2, .stage = {"queue", "total"}, .stage_ms = {0.5, 12.25}};
  struct api_request req = {.method = "GET",
                            .uri = "/caf\xc3\xa9\"\\?q=secret",
                            .id = "a\"b",
                            .remote = "10.0.0.1",
                            .t_start = api_now_ms(),
                            .trace = &t};
  api_observe(ctx, &req, &(struct api_outcome){404, 7, 82});
  api_free(ctx);
  FILE *f = fopen(path, "r");
  ASSERT(f && fgets(line, sizeof(line), f) && !fgets(more, sizeof(more), f));
  fclose(f);
  unlink(path);
  json_error_t err;
  json_t *j = json_loads(line, 0, &err);
  if (!j) TEST_FAIL("not JSON (%s): %s", err.text, line);
  ASSERT_STR(json_string_value(json_object_get(j, "path")), "/caf\xc3\x83\xc2\xa9\"\\");
  ASSERT_STR(json_string_value(json_object_get(j, "request_id")), "a\"b");
  ASSERT_STR(json_string_value(json_object_get(j, "remote")), "10.0.0.1");
  ASSERT(json_is_null(json_object_get(j, "endpoint")) &&
         json_is_null(json_object_get(j, "method")));
  ASSERT_INT(json_integer_value(json_object_get(j, "status")), ==, 404);
  ASSERT_INT(json_integer_value(json_object_get(j, "request_bytes")), ==, 7);
  ASSERT_INT(json_integer_value(json_object_get(j, "response_bytes")), ==, 82);
  json_t *st = json_object_get(j, "stages_ms");
  ASSERT_DBL(json_number_value(json_object_get(st, "queue")), ==, 0.5);
  ASSERT_DBL(json_number_value(json_object_get(st, "total")), ==, 12.25);
  ASSERT(!strstr(line, "secret")); /* no query string */
  json_decref(j);
}

int main(void) {
  RUN(test_request_ids);
  RUN(test_api_key);
  RUN(test_cors);
  RUN(test_metrics);
  RUN(test_access_log);
  fprintf(stderr, "unit_ops: all passed\n");
  return 0;
}

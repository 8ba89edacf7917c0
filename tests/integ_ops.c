/* Integration tests of the operations side against the real binary: GET /metrics parsed line by
 * line (every sample is name{labels} value, every family has # HELP and # TYPE, histogram buckets
 * are cumulative and end with +Inf equal to _count) and its counters moved by exact amounts; the
 * JSON access log, line by line against the responses; X-Request-Id echoed, replaced and
 * generated; the API key in both header forms; CORS with and without the flag, and preflights;
 * and the flags' start-up errors. */
#include "harness.h"
#include "../base/version.h"
#include "test.h"

#include <ctype.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define API_ID_MAX 128 /* the longest X-Request-Id that is echoed */

/* ---- a parser for the Prometheus text format ---- */

#define MAX_SAMPLES  4096
#define MAX_FAMILIES 64

struct sample {
  char name[96];
  char labels[320]; /* between the braces, as sent */
  double value;
};

struct family {
  char name[96];
  char type[16]; /* counter, gauge, histogram */
  int help, samples;
};

struct scrape {
  struct sample s[MAX_SAMPLES];
  int n;
  struct family f[MAX_FAMILIES];
  int nf;
};

static struct family *family(struct scrape *m, const char *name, int create) {
  for (int i = 0; i < m->nf; i++)
    if (strcmp(m->f[i].name, name) == 0) return &m->f[i];
  if (!create) return NULL;
  ASSERT(m->nf < MAX_FAMILIES);
  struct family *f = &m->f[m->nf++];
  memset(f, 0, sizeof(*f));
  snprintf(f->name, sizeof(f->name), "%s", name);
  return f;
}

static void parse_comment(struct scrape *m, const char *line) {
  char kind[8], name[96], rest[256] = "";
  if (sscanf(line, "# %7s %95s %255[^\n]", kind, name, rest) < 2) return; /* a plain comment */
  if (strcmp(kind, "HELP") == 0) {
    struct family *f = family(m, name, 1);
    ASSERT(!f->help && strlen(rest) > 5);
    f->help = 1;
  } else if (strcmp(kind, "TYPE") == 0) {
    struct family *f = family(m, name, 1);
    ASSERT(f->help && !f->type[0] && f->samples == 0); /* HELP, then TYPE, then samples */
    ASSERT(strcmp(rest, "counter") == 0 || strcmp(rest, "gauge") == 0 ||
           strcmp(rest, "histogram") == 0);
    snprintf(f->type, sizeof(f->type), "%s", rest);
  }
}

/* Checks the label list in text (up to the closing brace) and returns the brace. */
static const char *parse_labels(const char *p) {
  for (;;) {
    if (!(isalpha((unsigned char)*p) || *p == '_')) TEST_FAIL("bad label name at '%.40s'", p);
    while (isalnum((unsigned char)*p) || *p == '_') p++;
    if (p[0] != '=' || p[1] != '"') TEST_FAIL("bad label at '%.40s'", p);
    for (p += 2; *p != '"'; p++) {
      ASSERT(*p && *p != '\n');
      if (*p != '\\') continue;
      ASSERT(p[1] == '\\' || p[1] == '"' || p[1] == 'n');
      p++;
    }
    p++;
    if (*p == '}') return p;
    if (*p != ',') TEST_FAIL("expected , or } at '%.40s'", p);
    p++;
  }
}

/* The family a sample belongs to: its name, or a histogram's name for _bucket, _sum, _count. */
static struct family *family_of_sample(struct scrape *m, const char *name) {
  static const char *const suffix[] = {"_bucket", "_sum", "_count"};
  struct family *f = family(m, name, 0);
  for (int i = 0; !f && i < 3; i++) {
    size_t n = strlen(name), k = strlen(suffix[i]);
    char base[96];
    if (n <= k || strcmp(name + n - k, suffix[i]) != 0) continue;
    snprintf(base, sizeof(base), "%.*s", (int)(n - k), name);
    f = family(m, base, 0);
    if (f && strcmp(f->type, "histogram") != 0) f = NULL;
  }
  return f;
}

static void parse_sample(struct scrape *m, const char *line) {
  ASSERT(m->n < MAX_SAMPLES);
  struct sample *s = &m->s[m->n++];
  size_t n = strspn(line, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:0123456789");
  if (n == 0 || n >= sizeof(s->name) || isdigit((unsigned char)line[0]))
    TEST_FAIL("bad metric name in '%s'", line);
  snprintf(s->name, sizeof(s->name), "%.*s", (int)n, line);
  const char *p = line + n, *end;
  s->labels[0] = 0;
  if (*p == '{') {
    end = parse_labels(p + 1);
    ASSERT((size_t)(end - p - 1) < sizeof(s->labels));
    snprintf(s->labels, sizeof(s->labels), "%.*s", (int)(end - p - 1), p + 1);
    p = end + 1;
  }
  if (*p != ' ') TEST_FAIL("no blank before the value in '%s'", line);
  s->value = strtod(p + 1, (char **)&end);
  if (end == p + 1 || *end) TEST_FAIL("bad value in '%s'", line);
  struct family *f = family_of_sample(m, s->name);
  if (!f || !f->help || !f->type[0]) TEST_FAIL("%s has no # HELP and # TYPE", s->name);
  f->samples++;
}

static int has_label(const char *labels, const char *pair) {
  size_t n = strlen(pair);
  for (const char *p = labels; (p = strstr(p, pair)) != NULL; p++)
    if ((p == labels || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

/* labels without its le="..." pair, into out. */
static void strip_le(const char *labels, char *out, size_t n) {
  const char *le = strstr(labels, "le=\"");
  while (le && le != labels && le[-1] != ',') le = strstr(le + 1, "le=\"");
  if (!le) {
    snprintf(out, n, "%s", labels);
    return;
  }
  const char *after = strchr(le + 4, '"') + 1;
  if (*after == ',') after++;
  snprintf(out, n, "%.*s%s", (int)(le - labels), labels, after);
  size_t k = strlen(out);
  if (k && out[k - 1] == ',') out[k - 1] = 0;
}

/* Every histogram: buckets cumulative in le, the last +Inf, equal to _count, and a _sum. */
static void check_histograms(const struct scrape *m) {
  for (int i = 0; i < m->n; i++) {
    const struct sample *c = &m->s[i];
    size_t n = strlen(c->name);
    if (n < 6 || strcmp(c->name + n - 6, "_count") != 0) continue;
    char base[96], key[320];
    double prev_le = -INFINITY, prev = 0, last_le = 0;
    int buckets = 0, sums = 0;
    snprintf(base, sizeof(base), "%.*s", (int)(n - 6), c->name);
    for (int j = 0; j < m->n; j++) {
      const struct sample *b = &m->s[j];
      strip_le(b->labels, key, sizeof(key));
      if (strcmp(key, c->labels) != 0 || strncmp(b->name, base, n - 6) != 0) continue;
      if (strcmp(b->name + n - 6, "_sum") == 0) sums++;
      if (strcmp(b->name + n - 6, "_bucket") != 0) continue;
      const char *le = strstr(b->labels, "le=\"") + 4;
      last_le = strncmp(le, "+Inf", 4) == 0 ? INFINITY : atof(le);
      ASSERT_DBL(last_le, >, prev_le); /* in order */
      ASSERT_DBL(b->value, >=, prev);  /* cumulative */
      prev_le = last_le, prev = b->value, buckets++;
    }
    ASSERT_INT(sums, ==, 1);
    ASSERT(buckets >= 2 && isinf(last_le));
    ASSERT_DBL(prev, ==, c->value);
  }
}

/* GET /metrics from s (with headers, e.g. a key), parsed and checked; the caller frees it. */
static struct scrape *scrape(const struct server *s) {
  struct http_resp r;
  char ct[128];
  ASSERT(http_request(s, "GET", "/metrics", NULL, NULL, NULL, 0, &r) == 0);
  ASSERT_INT(r.status, ==, 200);
  ASSERT(http_header(&r, "Content-Type", ct, sizeof(ct)));
  ASSERT(strncmp(ct, "text/plain; version=0.0.4", 25) == 0);
  struct scrape *m = calloc(1, sizeof(*m));
  ASSERT(m);
  for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n"))
    line[0] == '#' ? parse_comment(m, line) : parse_sample(m, line);
  check_histograms(m);
  http_resp_free(&r);
  return m;
}

/* Sum of the samples of name that carry every label pair in want (NULL-terminated). */
static double metric(const struct scrape *m, const char *name, const char *const *want) {
  double sum = 0;
  for (int i = 0; i < m->n; i++) {
    int ok = strcmp(m->s[i].name, name) == 0;
    for (int k = 0; ok && want && want[k]; k++) ok = has_label(m->s[i].labels, want[k]);
    if (ok) sum += m->s[i].value;
  }
  return sum;
}

static int has_metric(const struct scrape *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->s[i].name, name) == 0) return 1;
  return 0;
}

/* The user and system CPU seconds of process pid, from its /proc/PID/stat. */
static double cpu_seconds(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  ASSERT(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  unsigned long long ut = 0, st = 0;
  const char *p = strrchr(buf, ')');
  ASSERT(p &&
         sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2);
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ---- requests ---- */

static uint8_t *image;
static size_t image_len;

/* POST /blur?query with the JPEG fixture as the raw body and extra headers. */
static void blur(const struct server *s, const char *query, const char *const *headers,
                 struct http_resp *r) {
  char path[256];
  const char *h[8] = {"Content-Type: image/jpeg"};
  for (int i = 0; headers && headers[i] && i < 6; i++) h[i + 1] = headers[i];
  snprintf(path, sizeof(path), "/blur?%s", query);
  ASSERT(http_request_h(s, "POST", path, h, image, image_len, r) == 0);
}

/* The request id of r (asserting there is one). */
static const char *id_of(const struct http_resp *r, char *buf, size_t n) {
  if (!http_header(r, "X-Request-Id", buf, n)) TEST_FAIL("no X-Request-Id (status %ld)", r->status);
  return buf;
}

static int is_generated_id(const char *id) {
  return strlen(id) == 16 && strspn(id, "0123456789abcdef") == 16;
}

/* ---- tests ---- */

static void test_metrics(void) {
  struct server s;
  const char *args[] = {"--workers", "2", "--queue", "7", NULL};
  struct http_resp r;
  char method[64];
  server_start(&s, args);
  /* blurd_ready below is 1 once the warm-up is over, which on a loaded machine can be after the
   * port answers */
  for (int k = 0; k < 300 && server_metric(&s, "blurd_ready") != 1; k++) usleep(100 * 1000);
  struct scrape *m0 = scrape(&s);
  const int n = 3;
  for (int i = 0; i < n; i++) {
    blur(&s, "sigma=2&method=yvv", NULL, &r);
    ASSERT_INT(r.status, ==, 200);
    http_resp_free(&r);
  }
  blur(&s, "method=yvv", NULL, &r); /* no sigma: 400 */
  http_expect_error(&r, 400, "missing_parameter");
  http_resp_free(&r);
  blur(&s, "sigma=3&method=auto", NULL, &r);
  ASSERT_INT(r.status, ==, 200);
  ASSERT(http_header(&r, "X-Method", method, sizeof(method)) && strcmp(method, "auto") != 0);
  http_resp_free(&r);
  ASSERT(http_request(&s, "GET", "/no/such/path?x=1", NULL, NULL, NULL, 0, &r) == 0);
  http_expect_error(&r, 404, "not_found");
  http_resp_free(&r);
  struct scrape *m1 = scrape(&s);
  const char *ok_yvv[] = {"route=\"/blur\"", "algorithm=\"yvv\"", "code=\"200\"", NULL};
  const char *bad[] = {"route=\"/blur\"", "algorithm=\"none\"", "code=\"400\"", NULL};
  const char *other[] = {"route=\"other\"", "algorithm=\"none\"", "code=\"404\"", NULL};
  const char *scr[] = {"route=\"/metrics\"", "algorithm=\"none\"", "code=\"200\"", NULL};
  const char *is_auto[] = {"algorithm=\"auto\"", NULL};
  char resolved[96];
  snprintf(resolved, sizeof(resolved), "algorithm=\"%s\"", method);
  const char *ok_auto[] = {"route=\"/blur\"", resolved, "code=\"200\"", NULL};
  const char *total = "blurd_requests_total";
  ASSERT_DBL(metric(m1, total, ok_yvv) - metric(m0, total, ok_yvv), ==,
             n + (strcmp(method, "yvv") == 0));
  if (strcmp(method, "yvv") != 0) ASSERT_DBL(metric(m1, total, ok_auto), ==, 1);
  ASSERT_DBL(metric(m1, total, bad) - metric(m0, total, bad), ==, 1);
  ASSERT_DBL(metric(m1, total, other) - metric(m0, total, other), ==, 1);
  ASSERT_DBL(metric(m1, total, scr) - metric(m0, total, scr), ==, 1); /* m0's own */
  ASSERT_DBL(metric(m1, total, is_auto), ==, 0); /* auto is counted as what it ran */
  ASSERT_DBL(metric(m1, total, NULL) - metric(m0, total, NULL), ==, n + 4);
  /* one observation per job and stage (the 400 ran no job) */
  static const char *const stages[] = {"queue", "decode", "filter", "encode", "total"};
  for (int i = 0; i < 5; i++) {
    char label[64];
    snprintf(label, sizeof(label), "stage=\"%s\"", stages[i]);
    const char *want[] = {label, NULL};
    ASSERT_DBL(metric(m1, "blurd_stage_seconds_count", want) -
                   metric(m0, "blurd_stage_seconds_count", want),
               ==, n + 1);
    ASSERT_DBL(metric(m1, "blurd_stage_seconds_sum", want), >, 0);
  }
  ASSERT_DBL(metric(m1, "blurd_queue_capacity", NULL), ==, 7);
  ASSERT_DBL(metric(m1, "blurd_workers", NULL), ==, 2);
  ASSERT_DBL(metric(m1, "blurd_queue_depth", NULL), ==, 0);
  ASSERT_DBL(metric(m1, "blurd_in_flight", NULL), ==, 1); /* the scrape itself */
  ASSERT_DBL(metric(m1, "blurd_ready", NULL), ==, 1);
  const char *be = getenv("BLURD_EXPECT_BACKEND") ? getenv("BLURD_EXPECT_BACKEND") : "cpu";
  int on_gpu = strncmp(be, "cuda", 4) == 0;
  ASSERT_DBL(metric(m1, "blurd_backend_info", NULL), ==, 1);
  const char *cpu[] = {"backend=\"cpu\"", NULL};
  ASSERT_DBL(metric(m1, "blurd_backend_info", cpu), ==, on_gpu ? 0 : 1);
  ASSERT_INT(has_metric(m1, "blurd_gpu_memory_used_bytes"), ==, on_gpu);
  ASSERT_DBL(metric(m1, "blurd_build_info", NULL), ==, 1);
  const char *version[] = {"version=\"" BLURD_VERSION "\"", NULL};
  ASSERT_DBL(metric(m1, "blurd_build_info", version), ==, 1);
  ASSERT_DBL(metric(m1, "blurd_metrics_dropped_total", NULL), ==, 0);
  /* the process: its own numbers, within what /proc says from outside */
  long rss = server_rss_kb(&s);
  ASSERT_DBL(metric(m1, "process_resident_memory_bytes", NULL), >, rss * 1024.0 * 0.5);
  ASSERT_DBL(metric(m1, "process_resident_memory_bytes", NULL), <, rss * 1024.0 * 2);
  ASSERT_DBL(metric(m1, "process_virtual_memory_bytes", NULL), >=,
             metric(m1, "process_resident_memory_bytes", NULL));
  ASSERT(has_metric(m1, "process_cpu_seconds_total"));
  ASSERT_DBL(metric(m1, "process_cpu_seconds_total", NULL), <=, cpu_seconds(s.pid));
  ASSERT_DBL(fabs(metric(m1, "process_start_time_seconds", NULL) - (double)time(NULL)), <, 120);
  ASSERT_DBL(metric(m1, "process_open_fds", NULL), >=, 4); /* stdio, the listener, the scrape */
  ASSERT_DBL(metric(m1, "process_open_fds", NULL), <, metric(m1, "process_max_fds", NULL));
  int gpu_codecs = strcmp(expected_codec("jpeg"), "nvjpeg") == 0;
  const char *cpu_codecs[] = {"jpeg_decode=\"libjpeg-turbo\"", "jpeg_encode=\"libjpeg-turbo\"",
                              "png=\"libpng\"", NULL};
  ASSERT_DBL(metric(m1, "blurd_gpu_codecs", NULL), ==, gpu_codecs);
  ASSERT_DBL(metric(m1, "blurd_codecs_info", NULL), ==, 1);
  ASSERT_DBL(metric(m1, "blurd_codecs_info", cpu_codecs), ==, !gpu_codecs);
  const char *webp_codec[] = {"webp=\"libwebp\"", NULL}; /* on every backend */
  ASSERT_DBL(metric(m1, "blurd_codecs_info", webp_codec), ==, 1);
  ASSERT_INT(has_metric(m1, "blurd_jpeg_decode_batch_size_count"), ==, gpu_codecs);
  if (gpu_codecs) /* every job's JPEG went through a batch (the 400 ran none) */
    ASSERT_DBL(metric(m1, "blurd_jpeg_decode_batch_size_sum", NULL) -
                   metric(m0, "blurd_jpeg_decode_batch_size_sum", NULL),
               ==, n + 1);
  free(m0);
  free(m1);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* Reads the log file at path as JSON lines; returns the number of lines (at most max). */
static int read_log(const char *path, json_t **lines, int max) {
  FILE *f = fopen(path, "r");
  char buf[8192];
  int n = 0;
  ASSERT(f);
  while (n < max && fgets(buf, sizeof(buf), f)) {
    ASSERT(buf[strlen(buf) - 1] == '\n');
    json_error_t err;
    lines[n] = json_loads(buf, 0, &err);
    if (!lines[n]) TEST_FAIL("log line %d is not JSON (%s): %s", n + 1, err.text, buf);
    n++;
  }
  fclose(f);
  return n;
}

static void expect_log_line(json_t *l, const struct http_resp *r, const char *http_method,
                            const char *path, const char *endpoint, const char *method) {
  char id[160];
  const char *t = json_string_value(json_object_get(l, "time"));
  ASSERT(t && strlen(t) == 24 && t[4] == '-' && t[10] == 'T' && t[19] == '.' && t[23] == 'Z');
  ASSERT_STR(json_string_value(json_object_get(l, "request_id")), id_of(r, id, sizeof(id)));
  ASSERT_STR(json_string_value(json_object_get(l, "remote")), "127.0.0.1");
  ASSERT_STR(json_string_value(json_object_get(l, "http_method")), http_method);
  ASSERT_STR(json_string_value(json_object_get(l, "path")), path);
  json_t *e = json_object_get(l, "endpoint"), *m = json_object_get(l, "method");
  if (endpoint) ASSERT_STR(json_string_value(e), endpoint);
  if (!endpoint) ASSERT(json_is_null(e));
  if (method) ASSERT_STR(json_string_value(m), method);
  if (!method) ASSERT(json_is_null(m));
  ASSERT_INT(json_integer_value(json_object_get(l, "status")), ==, r->status);
  ASSERT_INT(json_integer_value(json_object_get(l, "response_bytes")), ==, r->len);
  ASSERT(json_is_object(json_object_get(l, "stages_ms")));
  ASSERT(json_number_value(json_object_get(l, "total_ms")) >= 0);
}

static void test_access_log(void) {
  struct server s;
  char path[64];
  snprintf(path, sizeof(path), "/tmp/blurd-ops-log.%d", (int)getpid());
  unlink(path);
  const char *args[] = {"--access-log", path, NULL};
  struct http_resp r[4];
  const char *given[] = {"X-Request-Id: trace-42", NULL};
  server_start(&s, args);
  blur(&s, "sigma=2&method=separable", given, &r[0]);
  ASSERT_INT(r[0].status, ==, 200);
  blur(&s, "method=deriche", NULL, &r[1]);
  http_expect_error(&r[1], 400, "missing_parameter");
  ASSERT(http_request(&s, "GET", "/nope?q=1", NULL, NULL, NULL, 0, &r[2]) == 0);
  ASSERT(http_request(&s, "GET", "/readyz", NULL, NULL, NULL, 0, &r[3]) == 0);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  json_t *lines[1024]; /* under BLURD_WAIT_READY, a GPU server's start takes ~150 probes */
  int n = read_log(path, lines, 1024), k = 0;
  const char *probe = getenv("BLURD_WAIT_READY") ? "/readyz" : "/healthz";
  while (k < n && strcmp(json_string_value(json_object_get(lines[k], "path")), probe) == 0)
    k++; /* the harness's start-up probes */
  ASSERT_INT(k, >=, 1);
  ASSERT_INT(n - k, ==, 4);
  expect_log_line(lines[k], &r[0], "POST", "/blur", "/blur", "separable");
  expect_log_line(lines[k + 1], &r[1], "POST", "/blur", "/blur", NULL);
  expect_log_line(lines[k + 2], &r[2], "GET", "/nope", NULL, NULL);
  expect_log_line(lines[k + 3], &r[3], "GET", "/readyz", "/readyz", NULL);
  ASSERT_STR(json_string_value(json_object_get(lines[k], "request_id")), "trace-42");
  ASSERT_INT(json_integer_value(json_object_get(lines[k], "request_bytes")), ==, image_len);
  json_t *st = json_object_get(lines[k], "stages_ms");
  static const char *const stages[] = {"queue", "decode", "filter", "reference", "encode", "total"};
  for (int i = 0; i < 6; i++) ASSERT(json_number_value(json_object_get(st, stages[i])) >= 0);
  const char *be = getenv("BLURD_EXPECT_BACKEND");
  int on_gpu = be && strncmp(be, "cuda", 4) == 0; /* and kernel; upload, download with CPU codecs */
  int gpu_codecs = strcmp(expected_codec("jpeg"), "nvjpeg") == 0;
  ASSERT_INT(json_object_size(st), ==, on_gpu ? (gpu_codecs ? 7 : 9) : 6);
  if (on_gpu) ASSERT(json_number_value(json_object_get(st, "kernel")) >= 0);
  /* the request's total covers the job's, which starts once the body is in */
  ASSERT_DBL(json_number_value(json_object_get(lines[k], "total_ms")), >=,
             json_number_value(json_object_get(st, "total")) - 0.002);
  ASSERT_INT(json_object_size(json_object_get(lines[k + 1], "stages_ms")), ==, 0);
  for (int i = 0; i < n; i++) json_decref(lines[i]);
  for (int i = 0; i < 4; i++) http_resp_free(&r[i]);
  unlink(path);
}

static void test_request_ids(void) {
  struct server s;
  struct http_resp r;
  char id[256], ids[40][20], max_id[API_ID_MAX + 2], hdr[API_ID_MAX + 32];
  server_start(&s, NULL);
  for (int i = 0; i < 40; i++) { /* generated: 16 hex digits, all different */
    ASSERT(http_request(&s, "GET", i % 2 ? "/healthz" : "/nope", NULL, NULL, NULL, 0, &r) == 0);
    ASSERT(is_generated_id(id_of(&r, id, sizeof(id))));
    snprintf(ids[i], sizeof(ids[i]), "%s", id);
    for (int k = 0; k < i; k++) ASSERT(strcmp(ids[k], ids[i]) != 0);
    http_resp_free(&r);
  }
  memset(max_id, 'a', API_ID_MAX);
  max_id[API_ID_MAX] = 0;
  struct {
    const char *value;
    int echoed;
  } cases[] = {{"abc-123_XYZ", 1}, {"with space:and/slash", 1},
               {max_id, 1},        {NULL, 0} /* 129 characters */,
               {"caf\xc3\xa9", 0}, {"tab\there", 0}};
  for (int i = 0; i < 6; i++) {
    if (!cases[i].value)
      snprintf(hdr, sizeof(hdr), "X-Request-Id: %sb", max_id);
    else
      snprintf(hdr, sizeof(hdr), "X-Request-Id: %s", cases[i].value);
    const char *h[] = {hdr, NULL};
    ASSERT(http_request_h(&s, "GET", "/healthz", h, NULL, 0, &r) == 0);
    ASSERT_INT(r.status, ==, 200);
    id_of(&r, id, sizeof(id));
    if (cases[i].echoed) ASSERT_STR(id, cases[i].value);
    if (!cases[i].echoed) ASSERT(is_generated_id(id));
    http_resp_free(&r);
  }
  /* errors carry it too: the api's (405) and the server's own (413 before the body) */
  const char *h[] = {"X-Request-Id: err-1", NULL};
  ASSERT(http_request_h(&s, "GET", "/blur", h, NULL, 0, &r) == 0);
  http_expect_error(&r, 405, "method_not_allowed");
  ASSERT_STR(id_of(&r, id, sizeof(id)), "err-1");
  http_resp_free(&r);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  const char *args[] = {"--max-body", "1K", NULL};
  server_start(&s, args);
  blur(&s, "sigma=2", h, &r);
  http_expect_error(&r, 413, "body_too_large");
  ASSERT_STR(id_of(&r, id, sizeof(id)), "err-1");
  http_resp_free(&r);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

/* The status of a request with one extra header line (or none). */
static long status_with(const struct server *s, const char *method, const char *path,
                        const char *header, struct http_resp *r) {
  const char *h[] = {"Content-Type: image/jpeg", header, NULL};
  int post = strcmp(method, "POST") == 0;
  ASSERT(http_request_h(s, method, path, h, post ? image : NULL, post ? image_len : 0, r) == 0);
  return r->status;
}

static void test_api_key(void) {
  struct server s;
  struct http_resp r;
  char buf[128];
  const char *args[] = {"--api-key", "s3cret-Key", NULL};
  server_start(&s, args);
  static const char *const refused[] = {NULL,
                                        "Authorization: Bearer wrong",
                                        "Authorization: Bearer s3cret",
                                        "Authorization: Bearer s3cret-Key2",
                                        "Authorization: Basic s3cret-Key",
                                        "Authorization: s3cret-Key",
                                        "X-API-Key: wrong",
                                        "X-API-Key: s3cret-ke",
                                        "X-API-Key: S3CRET-KEY"};
  for (int i = 0; i < 9; i++) {
    status_with(&s, "POST", "/blur?sigma=2", refused[i], &r);
    http_expect_error(&r, 401, "unauthorized");
    ASSERT(http_header(&r, "WWW-Authenticate", buf, sizeof(buf)));
    ASSERT(strncmp(buf, "Bearer", 6) == 0);
    id_of(&r, buf, sizeof(buf));
    http_resp_free(&r);
  }
  static const char *const accepted[] = {"Authorization: Bearer s3cret-Key",
                                         "Authorization: bearer s3cret-Key",
                                         "X-API-Key: s3cret-Key"};
  for (int i = 0; i < 3; i++) {
    ASSERT_INT(status_with(&s, "POST", "/blur?sigma=2", accepted[i], &r), ==, 200);
    http_resp_free(&r);
  }
  /* open without the key: probes, scrapers and the method list */
  static const char *const open[] = {"/healthz", "/readyz", "/methods", "/metrics"};
  for (int i = 0; i < 4; i++) {
    long st = status_with(&s, "GET", open[i], NULL, &r);
    for (int k = 0; st == 503 && i == 1 && k < 300; k++) { /* /readyz: a worker still warming */
      http_resp_free(&r);
      usleep(100 * 1000);
      st = status_with(&s, "GET", open[i], NULL, &r);
    }
    ASSERT_INT(st, ==, 200);
    http_resp_free(&r);
  }
  ASSERT_INT(status_with(&s, "GET", "/nope", NULL, &r), ==, 401); /* paths stay private */
  http_resp_free(&r);
  ASSERT_INT(status_with(&s, "GET", "/nope", accepted[2], &r), ==, 404);
  http_resp_free(&r);
  struct scrape *m = scrape(&s);
  const char *no[] = {"route=\"/blur\"", "code=\"401\"", NULL};
  const char *yes[] = {"route=\"/blur\"", "code=\"200\"", NULL};
  ASSERT_DBL(metric(m, "blurd_requests_total", no), ==, 9);
  ASSERT_DBL(metric(m, "blurd_requests_total", yes), ==, 3);
  free(m);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  /* the key from a file (trailing newline dropped) */
  char path[64];
  snprintf(path, sizeof(path), "/tmp/blurd-ops-key.%d", (int)getpid());
  FILE *f = fopen(path, "w");
  ASSERT(f && fputs("from-a-file\n", f) >= 0 && fclose(f) == 0);
  const char *args2[] = {"--api-key-file", path, NULL};
  server_start(&s, args2);
  ASSERT_INT(status_with(&s, "POST", "/blur?sigma=2", "X-API-Key: from-a-file", &r), ==, 200);
  http_resp_free(&r);
  ASSERT_INT(status_with(&s, "POST", "/blur?sigma=2", "X-API-Key: s3cret-Key", &r), ==, 401);
  http_resp_free(&r);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
  unlink(path);
}

/* An OPTIONS preflight from origin for path. */
static void preflight(const struct server *s, const char *path, const char *origin,
                      struct http_resp *r) {
  char o[128];
  snprintf(o, sizeof(o), "Origin: %s", origin);
  const char *h[] = {o, "Access-Control-Request-Method: POST",
                     "Access-Control-Request-Headers: authorization, content-type", NULL};
  ASSERT(http_request_h(s, "OPTIONS", path, h, NULL, 0, r) == 0);
}

static void test_cors(void) {
  struct server s;
  struct http_resp r;
  char buf[256];
  const char *from_a[] = {"Origin: https://a.example", NULL};
  server_start(&s, NULL); /* no flag: no CORS headers at all, OPTIONS a 204 with Allow only */
  ASSERT(http_request_h(&s, "GET", "/healthz", from_a, NULL, 0, &r) == 0);
  ASSERT(!http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)));
  ASSERT(!http_header(&r, "Vary", buf, sizeof(buf)));
  http_resp_free(&r);
  preflight(&s, "/blur", "https://a.example", &r);
  ASSERT_INT(r.status, ==, 204);
  ASSERT_STR(http_header(&r, "Allow", buf, sizeof(buf)), "POST, OPTIONS");
  ASSERT(!http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)));
  ASSERT(!http_header(&r, "Access-Control-Allow-Methods", buf, sizeof(buf)));
  http_resp_free(&r);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);

  const char *args[] = {"--cors-origins", "https://a.example, https://b.example/", "--api-key", "k",
                        NULL};
  server_start(&s, args);
  ASSERT(http_request_h(&s, "GET", "/healthz", from_a, NULL, 0, &r) == 0);
  ASSERT_STR(http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)), "https://a.example");
  ASSERT_STR(http_header(&r, "Vary", buf, sizeof(buf)), "Origin");
  ASSERT(http_header(&r, "Access-Control-Expose-Headers", buf, sizeof(buf)));
  static const char *const exposed[] = {"Server-Timing", "X-PSNR",  "X-Method", "X-Backend",
                                        "X-Request-Id",  "X-Scale", "X-Sigma"};
  for (int i = 0; i < 7; i++) ASSERT(strstr(buf, exposed[i]));
  ASSERT_STR(http_header(&r, "Timing-Allow-Origin", buf, sizeof(buf)), "https://a.example");
  http_resp_free(&r);
  const char *from_b[] = {"Origin: https://b.example", "X-API-Key: k", NULL};
  blur(&s, "sigma=2", from_b, &r);
  ASSERT_INT(r.status, ==, 200);
  ASSERT_STR(http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)), "https://b.example");
  ASSERT_STR(http_header(&r, "Timing-Allow-Origin", buf, sizeof(buf)), "https://b.example");
  http_resp_free(&r);
  const char *from_evil[] = {"Origin: https://evil.example", NULL};
  ASSERT(http_request_h(&s, "GET", "/healthz", from_evil, NULL, 0, &r) == 0);
  ASSERT(!http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)));
  ASSERT(!http_header(&r, "Timing-Allow-Origin", buf, sizeof(buf)));
  ASSERT_STR(http_header(&r, "Vary", buf, sizeof(buf)), "Origin");
  http_resp_free(&r);
  ASSERT(http_request_h(&s, "GET", "/healthz", NULL, NULL, 0, &r) == 0); /* no Origin */
  ASSERT(!http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)));
  http_resp_free(&r);
  /* a 401 to an allowed origin carries the header, so the page can read the error */
  const char *a_no_key[] = {"Origin: https://a.example", NULL};
  blur(&s, "sigma=2", a_no_key, &r);
  http_expect_error(&r, 401, "unauthorized");
  ASSERT_STR(http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)), "https://a.example");
  http_resp_free(&r);
  /* preflights: no key needed (browsers send none), 204 with the methods and headers */
  preflight(&s, "/blur", "https://a.example", &r);
  ASSERT_INT(r.status, ==, 204);
  ASSERT_STR(http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)), "https://a.example");
  ASSERT_STR(http_header(&r, "Access-Control-Allow-Methods", buf, sizeof(buf)), "POST");
  ASSERT(http_header(&r, "Access-Control-Allow-Headers", buf, sizeof(buf)));
  static const char *const allowed[] = {"Authorization", "X-API-Key", "Content-Type",
                                        "X-Request-Id"};
  for (int i = 0; i < 4; i++) ASSERT(strstr(buf, allowed[i]));
  ASSERT_STR(http_header(&r, "Access-Control-Max-Age", buf, sizeof(buf)), "600");
  id_of(&r, buf, sizeof(buf));
  http_resp_free(&r);
  preflight(&s, "/methods", "https://b.example", &r);
  ASSERT_INT(r.status, ==, 204);
  ASSERT_STR(http_header(&r, "Access-Control-Allow-Methods", buf, sizeof(buf)), "GET, HEAD");
  http_resp_free(&r);
  preflight(&s, "/blur", "https://evil.example", &r);
  ASSERT_INT(r.status, ==, 204);
  ASSERT(!http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)));
  ASSERT(!http_header(&r, "Access-Control-Allow-Methods", buf, sizeof(buf)));
  http_resp_free(&r);
  preflight(&s, "/nope", "https://a.example", &r);
  http_expect_error(&r, 404, "not_found");
  http_resp_free(&r);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);

  const char *any[] = {"--cors-origins", "*", NULL};
  server_start(&s, any);
  ASSERT(http_request_h(&s, "GET", "/healthz", from_evil, NULL, 0, &r) == 0);
  ASSERT_STR(http_header(&r, "Access-Control-Allow-Origin", buf, sizeof(buf)),
             "https://evil.example"); /* the origin itself, never "*" */
  http_resp_free(&r);
  ASSERT_INT(server_stop(&s, SIGTERM), ==, 0);
}

static void test_flag_errors(void) {
  char path[64];
  snprintf(path, sizeof(path), "/tmp/blurd-ops-empty.%d", (int)getpid());
  FILE *f = fopen(path, "w");
  ASSERT(f && fputs("\n", f) >= 0 && fclose(f) == 0);
  const char *log[] = {"--access-log", "/nonexistent-dir/access.log", NULL};
  const char *both[] = {"--api-key", "a", "--api-key-file", path, NULL};
  const char *empty[] = {"--api-key-file", path, NULL};
  const char *missing[] = {"--api-key-file", "/nonexistent-dir/key", NULL};
  ASSERT_INT(refused_start(log, NULL, NULL, 0), ==, 1);
  ASSERT_INT(refused_start(both, NULL, NULL, 0), ==, 2);
  ASSERT_INT(refused_start(empty, NULL, NULL, 0), ==, 2);
  ASSERT_INT(refused_start(missing, NULL, NULL, 0), ==, 2);
  const char *codecs_bad[] = {"--gpu-codecs", "yes", NULL};
  const char *wait_bad[] = {"--jpeg-batch-wait-us", "100001", NULL};
  const char *decoders_bad[] = {"--jpeg-decoders", "0", NULL};
  const char *codecs_on[] = {"--gpu-codecs", "on", NULL};
  const char *cpu_on[] = {"--backend", "cpu", "--gpu-codecs", "on", NULL};
  ASSERT_INT(refused_start(codecs_bad, NULL, NULL, 0), ==, 2);
  ASSERT_INT(refused_start(wait_bad, NULL, NULL, 0), ==, 2);
  ASSERT_INT(refused_start(decoders_bad, NULL, NULL, 0), ==, 2);
  ASSERT_INT(refused_start(cpu_on, NULL, NULL, 0), ==,
             1); /* JPEG on the GPU needs the GPU backend */
  if (strcmp(expected_codec("jpeg"), "nvjpeg") != 0)
    ASSERT_INT(refused_start(codecs_on, NULL, NULL, 0), ==,
               1); /* no GPU or no nvJPEG here: a clear error */
  unlink(path);
}

int main(void) {
  image = fixture("orient1.jpg", &image_len);
  RUN(test_metrics);
  RUN(test_access_log);
  RUN(test_request_ids);
  RUN(test_api_key);
  RUN(test_cors);
  RUN(test_flag_errors);
  free(image);
  fprintf(stderr, "integ_ops: all passed\n");
  return 0;
}

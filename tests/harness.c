/* The integration-test harness: see harness.h. */
#include "harness.h"

#include "test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <signal.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static int read_port(int fd) {
  char buf[512];
  size_t n = 0;
  while (n < sizeof(buf) - 1) { /* the first line: "blurd listening on http://ADDR:PORT ..." */
    ssize_t k = read(fd, buf + n, 1);
    if (k <= 0) break;
    if (buf[n++] == '\n') break;
  }
  buf[n] = 0;
  const char *p = strstr(buf, "127.0.0.1:");
  return p ? atoi(p + 10) : -1;
}

int refused_start(const char *const *args, const char *const *env, char *err, size_t errlen) {
  const char *bin = getenv("BLURD_BIN") ? getenv("BLURD_BIN") : "build/blurd";
  const char *argv[64] = {bin, "--bind", "127.0.0.1", "--port", "0", "--warm-image", "0"};
  int argc = 7, status, fds[2];
  for (int i = 0; args[i] && argc < 63; i++) argv[argc++] = args[i];
  argv[argc] = NULL;
  ASSERT(pipe(fds) == 0);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
    dup2(null, 1), dup2(err ? fds[1] : null, 2);
    close(fds[0]);
    close(fds[1]);
    alarm(10); /* a server that started after all is killed, and the test fails */
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  char sink[256]; /* what does not fit in err */
  size_t n = 0;
  for (;;) {
    int room = err && n + 1 < errlen;
    ssize_t k = read(fds[0], room ? err + n : sink, room ? errlen - 1 - n : sizeof(sink));
    if (k <= 0) break;
    if (room) n += (size_t)k;
  }
  if (err) err[n] = 0;
  close(fds[0]);
  ASSERT(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void server_start(struct server *s, const char *const *args) {
  server_start_env(s, args, NULL);
}

void server_start_env(struct server *s, const char *const *args, const char *const *env) {
  const char *bin = getenv("BLURD_BIN") ? getenv("BLURD_BIN") : "build/blurd";
  /* no access log unless a test asks for one (a later flag wins), to keep test output short; no
   * warm-up unless a test asks for one, so that servers start at once and no warm-up competes
   * with a test's timings */
  const char *argv[64] = {bin,   "--bind",       "127.0.0.1", "--port", "0", "--access-log",
                          "off", "--warm-image", "0"};
  int argc = 9, fds[2];
  for (int i = 0; args && args[i] && argc < 63; i++) argv[argc++] = args[i];
  argv[argc] = NULL;
  ASSERT(pipe(fds) == 0);
  s->pid = fork();
  ASSERT(s->pid >= 0);
  if (s->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failing test aborts: take the server with it */
    for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  s->port = read_port(fds[0]);
  close(fds[0]);
  if (s->port <= 0) TEST_FAIL("%s did not report its port", bin);
  snprintf(s->base, sizeof(s->base), "http://127.0.0.1:%d", s->port);
  /* /healthz, or with BLURD_WAIT_READY set (make test-gpu: the GPU workers make their contexts
   * after the port opens) /readyz, must answer 200, and then with every worker made: the later
   * ones warm up after ready, and their warm-up jobs would show in the tests' metrics */
  const char *probe = getenv("BLURD_WAIT_READY") ? "/readyz" : "/healthz";
  struct http_resp r;
  for (int i = 0; i < (getenv("BLURD_WAIT_READY") ? 3000 : 200); i++) {
    int got = http_request(s, "GET", probe, NULL, NULL, NULL, 0, &r) == 0;
    json_t *j = got && r.body ? json_loads(r.body, 0, NULL) : NULL; /* /healthz: not JSON */
    json_t *all = json_object_get(j, "workers"), *ready = json_object_get(j, "workers_ready");
    int made = !all || !ready || json_integer_value(all) == json_integer_value(ready);
    json_decref(j);
    if (got && r.status == 200 && made) {
      http_resp_free(&r);
      return;
    }
    if (got) http_resp_free(&r);
    usleep(20000);
  }
  TEST_FAIL("blurd on port %d never answered %s with 200", s->port, probe);
}

int server_stop(struct server *s, int sig) {
  int status = 0;
  kill(s->pid, sig);
  if (waitpid(s->pid, &status, 0) != s->pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

size_t http_collect(char *data, size_t size, size_t n, void *ud) {
  struct http_buf *b = ud;
  char *p = realloc(b->p, b->len + size * n + 1);
  if (!p) return 0;
  memcpy(p + b->len, data, size * n);
  b->p = p;
  b->len += size * n;
  p[b->len] = 0;
  return size * n;
}

static int perform(CURL *c, struct http_resp *r) {
  struct http_buf body = {calloc(1, 1), 0}, hdr = {calloc(1, 1), 0};
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, http_collect);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &hdr);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
  CURLcode rc = curl_easy_perform(c);
  memset(r, 0, sizeof(*r));
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
  curl_easy_getinfo(c, CURLINFO_TOTAL_TIME, &r->seconds);
  r->body = body.p;
  r->len = body.len;
  r->headers = hdr.p;
  return rc == CURLE_OK ? 0 : -1;
}

int http_request(const struct server *s, const char *method, const char *path, const char *ctype,
                 const char *accept, const void *body, size_t len, struct http_resp *r) {
  char h1[256], h2[256];
  const char *headers[3] = {"Content-Type:", NULL, NULL};
  if (ctype) snprintf(h1, sizeof(h1), "Content-Type: %s", ctype), headers[0] = h1;
  if (accept) snprintf(h2, sizeof(h2), "Accept: %s", accept), headers[1] = h2;
  return http_request_h(s, method, path, headers, body, len, r);
}

int http_request_h(const struct server *s, const char *method, const char *path,
                   const char *const *headers, const void *body, size_t len, struct http_resp *r) {
  char url[1024];
  struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
  CURL *c = curl_easy_init();
  ASSERT(c);
  snprintf(url, sizeof(url), "%s%s", s->base, path);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  }
  for (int i = 0; headers && headers[i]; i++) hl = curl_slist_append(hl, headers[i]);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  if (strcmp(method, "HEAD") == 0) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  int rc = perform(c, r);
  curl_slist_free_all(hl);
  curl_easy_cleanup(c);
  return rc;
}

char *form_body(const uint8_t *img, size_t len, const char *params, size_t *blen) {
  const char *head = "--XX\r\nContent-Disposition: form-data; name=\"image\"\r\n\r\n";
  char *body = malloc(len + strlen(params) + 256);
  ASSERT(body != NULL);
  size_t n = (size_t)sprintf(body, "%s", head);
  memcpy(body + n, img, len);
  n += len;
  n += (size_t)sprintf(body + n,
                       "\r\n--XX\r\nContent-Disposition: form-data; name=\"params\"\r\n\r\n%s"
                       "\r\n--XX--\r\n",
                       params);
  *blen = n;
  return body;
}

int http_post_form(const struct server *s, const char *path, const char *field, const void *img,
                   size_t len, const char *params, const char *accept, struct http_resp *r) {
  char url[1024], h[256];
  struct curl_slist *hl = NULL;
  CURL *c = curl_easy_init();
  ASSERT(c);
  curl_mime *m = curl_mime_init(c);
  curl_mimepart *part = curl_mime_addpart(m);
  curl_mime_name(part, field);
  curl_mime_filename(part, "upload");
  curl_mime_data(part, img, len);
  if (params) {
    part = curl_mime_addpart(m);
    curl_mime_name(part, "params");
    curl_mime_data(part, params, CURL_ZERO_TERMINATED);
  }
  snprintf(url, sizeof(url), "%s%s", s->base, path);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_MIMEPOST, m);
  if (accept) snprintf(h, sizeof(h), "Accept: %s", accept), hl = curl_slist_append(hl, h);
  hl = curl_slist_append(hl, "Expect:");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  int rc = perform(c, r);
  curl_slist_free_all(hl);
  curl_mime_free(m);
  curl_easy_cleanup(c);
  return rc;
}

/* The client's own base64 (six bits at a time off an accumulator), apart from the server's. */
char *json_body(const void *img, size_t len, const char *prefix, const char *params) {
  static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t plen = strlen(prefix), n = 0;
  char *b64 = malloc(plen + (len + 2) / 3 * 4 + 1);
  ASSERT(b64);
  memcpy(b64, prefix, plen);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < len; i++) {
    acc = acc << 8 | ((const uint8_t *)img)[i];
    for (bits += 8; bits >= 6; bits -= 6) b64[plen + n++] = digits[acc >> (bits - 6) & 63];
  }
  if (bits) b64[plen + n++] = digits[acc << (6 - bits) & 63];
  while (n % 4) b64[plen + n++] = '=';
  b64[plen + n] = 0;
  json_t *j = params ? json_loads(params, 0, NULL) : json_object();
  ASSERT(j);
  json_object_set_new(j, "image", json_string(b64));
  char *text = json_dumps(j, JSON_COMPACT);
  ASSERT(text);
  json_decref(j);
  free(b64);
  return text;
}

int http_post_json(const struct server *s, const char *path, const char *body, const char *accept,
                   struct http_resp *r) {
  return http_request(s, "POST", path, "application/json", accept, body, strlen(body), r);
}

const char *http_header(const struct http_resp *r, const char *name, char *buf, size_t n) {
  size_t nl = strlen(name);
  for (const char *p = r->headers; p && *p;) {
    const char *eol = strstr(p, "\r\n");
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    if (len > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
      const char *v = p + nl + 1;
      while (*v == ' ') v++;
      snprintf(buf, n, "%.*s", (int)(p + len - v), v);
      return buf;
    }
    p += len + (eol ? 2 : 0);
  }
  return NULL;
}

void http_resp_free(struct http_resp *r) {
  free(r->body);
  free(r->headers);
  r->body = r->headers = NULL;
}

uint8_t *fixture(const char *name, size_t *len) {
  char path[1024];
  const char *dir = getenv("BLURD_DATA") ? getenv("BLURD_DATA") : "tests/data";
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) TEST_FAIL("cannot open fixture %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc((size_t)n + 1);
  ASSERT(data && fread(data, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return data;
}

/* Field ("VmRSS:") of the server's /proc/PID/status in kB, or -1. */
static long status_kb(const struct server *s, const char *field) {
  char path[64], line[256];
  long kb = -1;
  snprintf(path, sizeof(path), "/proc/%d/status", (int)s->pid);
  FILE *f = fopen(path, "r");
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, field, strlen(field)) == 0) kb = atol(line + strlen(field));
  if (f) fclose(f);
  return kb;
}

long server_rss_kb(const struct server *s) {
  return status_kb(s, "VmRSS:");
}

long server_hwm_kb(const struct server *s) {
  return status_kb(s, "VmHWM:");
}

/* The CPU seconds of process pid from /proc/PID/stat (fields 14 to 17: its threads' user and
 * system time, then its waited-for children's, in clock ticks), *sys the system part, and *ppid
 * its parent's pid. -1 when it is gone. */
static double stat_cpu_s(pid_t pid, int children, pid_t *ppid, double *sys) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  int parent = 0;
  unsigned long long t[4] = {0, 0, 0, 0};
  if (!p || sscanf(p + 1, " %*c %d %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu %llu %llu",
                   &parent, &t[0], &t[1], &t[2], &t[3]) != 5)
    return -1;
  double tick = (double)sysconf(_SC_CLK_TCK);
  if (ppid) *ppid = parent;
  *sys += (double)(t[1] + (children ? t[3] : 0)) / tick;
  return (double)(t[0] + t[1] + (children ? t[2] + t[3] : 0)) / tick;
}

double server_cpu_s(const struct server *s, double *sys) {
  double mine = 0, other = 0, child_sys = 0, total = stat_cpu_s(s->pid, 1, NULL, sys ? sys : &mine);
  DIR *d = opendir("/proc");
  ASSERT(d && total >= 0);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    pid_t pid = (pid_t)atoi(e->d_name), ppid = 0;
    double t = pid > 0 && pid != s->pid ? stat_cpu_s(pid, 0, &ppid, &other) : -1;
    if (t >= 0 && ppid == s->pid) total += t, child_sys += other;
    other = 0;
  }
  closedir(d);
  if (sys) *sys += child_sys;
  return total;
}

int server_close_wait(const struct server *s) {
  char line[512];
  unsigned port, state;
  int n = 0;
  FILE *f = fopen("/proc/net/tcp", "r");
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, " %*d: %*x:%x %*x:%*x %x", &port, &state) == 2 && port == (unsigned)s->port &&
        state == 8)
      n++;
  if (f) fclose(f);
  return n;
}

double server_metric(const struct server *s, const char *series) {
  struct http_resp r;
  char line[256];
  double v = -1;
  snprintf(line, sizeof(line), "\n%s ", series);
  if (http_request(s, "GET", "/metrics", NULL, NULL, NULL, 0, &r) != 0) return -1;
  const char *p = r.body ? strstr(r.body, line) : NULL;
  if (p) v = atof(p + strlen(line));
  http_resp_free(&r);
  return v;
}

int connect_from(const struct server *s, const char *src) {
  struct sockaddr_in from = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  inet_pton(AF_INET, src, &from.sin_addr);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  to.sin_port = htons((uint16_t)s->port);
  if (fd < 0 || bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0 ||
      connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

double wait_closed(int fd, double timeout_s) {
  struct timespec t0, t1;
  char buf[65536];
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double el = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (el > timeout_s) return -1;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 50) > 0) {
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return el; /* EOF or reset: closed */
    }
  }
}

double http_header_num(const struct http_resp *r, const char *name) {
  char buf[384];
  if (!http_header(r, name, buf, sizeof(buf))) TEST_FAIL("no %s header", name);
  return strcmp(buf, "inf") == 0 ? INFINITY : atof(buf);
}

double http_stage(const struct http_resp *r, const char *stage, char *desc, size_t n) {
  char st[512];
  size_t len = strlen(stage);
  if (n) desc[0] = 0;
  if (!http_header(r, "Server-Timing", st, sizeof(st))) return -1;
  for (char *save = NULL, *e = strtok_r(st, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
    while (*e == ' ') e++;
    if (strncmp(e, stage, len) != 0 || (e[len] != ';' && e[len] != 0)) continue;
    const char *d = strstr(e, ";desc=\""), *dur = strstr(e, ";dur=");
    if (d && n) snprintf(desc, n, "%.*s", (int)strcspn(d + 7, "\""), d + 7);
    return dur ? atof(dur + 5) : -1;
  }
  return -1;
}

const char *expected_codec(const char *format) {
  const char *gpu = getenv("BLURD_EXPECT_GPU_CODECS");
  if (strcmp(format, "png") == 0) return "libpng";
  if (strcmp(format, "webp") == 0) return "libwebp";
  return gpu && strcmp(gpu, "1") == 0 ? "nvjpeg" : "libjpeg-turbo";
}

/* Whether a stage's codec desc is what want says ("nvjpeg": any nvJPEG codec). */
static int codec_is(const char *desc, const char *want) {
  return strcmp(want, "nvjpeg") == 0 ? strncmp(desc, "nvjpeg", 6) == 0 : strcmp(desc, want) == 0;
}

void http_expect_stages(const struct http_resp *r, int filtered, const char *decoder,
                        const char *encoder) {
  const char *names[] = {"queue", "decode", "filter", "encode", "total"};
  char desc[64], st[512];
  http_header(r, "Server-Timing", st, sizeof(st));
  for (int i = 0; i < 5; i++)
    if ((filtered || i != 2) && http_stage(r, names[i], desc, sizeof(desc)) < 0)
      TEST_FAIL("Server-Timing '%s' lacks %s", st, names[i]);
  http_stage(r, "decode", desc, sizeof(desc));
  if (decoder && !codec_is(desc, decoder))
    TEST_FAIL("decode ran %s, expected %s: '%s'", desc, decoder, st);
  http_stage(r, "encode", desc, sizeof(desc));
  if (encoder && !codec_is(desc, encoder))
    TEST_FAIL("encode ran %s, expected %s: '%s'", desc, encoder, st);
}

void http_expect_error(const struct http_resp *r, long status, const char *code) {
  if (r->status != status)
    TEST_FAIL("status %ld, expected %ld; body %.300s", r->status, status, r->body);
  json_t *j = json_loads(r->body, 0, NULL);
  ASSERT(j);
  json_t *e = json_object_get(j, "error");
  ASSERT_INT(json_integer_value(json_object_get(e, "status")), ==, status);
  ASSERT_STR(json_string_value(json_object_get(e, "code")), code);
  ASSERT(strlen(json_string_value(json_object_get(e, "message"))) > 10);
  json_decref(j);
}

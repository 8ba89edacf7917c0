/* Metrics: the counters, histograms and gauges behind GET /metrics, in the Prometheus text
 * exposition format 0.0.4, with Prometheus's own label names (`code` for the HTTP status, `route`
 * for the path pattern) and the standard process_* metrics. Answered requests are counted by
 * (route, algorithm, code), their durations in one histogram per (route, HTTP method, code), and
 * job stage times in one histogram per stage name; the names
 * come from the route table and the jobs (api_trace), so a new endpoint, algorithm or stage gets
 * its series without a line of code here. Gauges and the process_* metrics are read when /metrics
 * is rendered. */
#include "api_int.h"

#include "../base/version.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define LABELS      64   /* distinct route and algorithm names */
#define SERIES      1024 /* distinct (route, algorithm, code) */
#define STAGES      24   /* distinct stage names */
#define MAX_DEVICES 16   /* GPUs listed */
#define DURATIONS   256  /* distinct (route, HTTP method, code) with a duration histogram */

/* Upper bounds of the stage histograms' buckets, in seconds (+Inf follows). */
static const double bucket_le[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                   0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
#define NBUCKETS (sizeof(bucket_le) / sizeof(bucket_le[0]) + 1)

struct histogram {
  uint64_t bucket[NBUCKETS]; /* observations per bucket, not cumulative (atomic) */
  uint64_t sum_ns;           /* sum of the observations (atomic) */
};

/* Both tables are fixed arrays whose slots are claimed with compare-and-swap on first use, so
 * recording takes no lock and allocates nothing. */
struct metrics {
  const char *label[LABELS]; /* interned route and algorithm names (atomic) */
  uint32_t key[SERIES];      /* (route+1) << 24 | (algorithm+1) << 16 | code; 0: free (atomic) */
  uint64_t count[SERIES];    /* requests of the series in key (atomic) */
  const char *stage[STAGES]; /* stage names, interned (atomic) */
  struct histogram hist[STAGES];
  uint32_t dur_key[DURATIONS]; /* (route+1) << 16 | method << 10 | code; 0: free (atomic) */
  struct histogram dur[DURATIONS];
  uint64_t dropped;            /* observations that found no free slot (atomic) */
  uint64_t refused[ERR_COUNT]; /* connections refused unread, by answer (atomic) */
  int in_flight;               /* admitted requests not yet answered (atomic) */
};

struct metrics *metrics_new(void) {
  return calloc(1, sizeof(struct metrics));
}

void metrics_free(struct metrics *m) {
  free(m);
}

/* The index of name in slot[0..n), claiming a free slot for it; -1 when all are taken. */
static int intern(const char **slot, int n, const char *name) {
  for (int i = 0; i < n; i++) {
    const char *p = __atomic_load_n(&slot[i], __ATOMIC_ACQUIRE);
    if (!p &&
        __atomic_compare_exchange_n(&slot[i], &p, name, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return i;
    if (p == name || strcmp(p, name) == 0) return i; /* p: the name another thread stored */
  }
  return -1;
}

/* The slot of key in keys[0..n), claiming a free one for it (open addressing); -1 when full. */
static int slot(uint32_t *keys, uint32_t n, uint32_t key) {
  uint32_t h = (key * 2654435761u) % n;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t s = (h + i) % n, cur = __atomic_load_n(&keys[s], __ATOMIC_ACQUIRE);
    if (cur == 0 &&
        __atomic_compare_exchange_n(&keys[s], &cur, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return (int)s;
    if (cur == key) return (int)s;
  }
  return -1;
}

/* The counter of series key; NULL when the table is full. */
static uint64_t *series(struct metrics *m, uint32_t key) {
  int s = slot(m->key, SERIES, key);
  return s < 0 ? NULL : &m->count[s];
}

void metrics_count(struct metrics *m, const char *endpoint, const char *algorithm, int status) {
  int e = intern(m->label, LABELS, endpoint ? endpoint : "other");
  int a = intern(m->label, LABELS, algorithm ? algorithm : "none");
  uint64_t *c =
      e < 0 || a < 0 || status < 0 || status > 999
          ? NULL
          : series(m, (uint32_t)(e + 1) << 24 | (uint32_t)(a + 1) << 16 | (uint32_t)status);
  __atomic_add_fetch(c ? c : &m->dropped, 1, __ATOMIC_RELAXED);
}

/* Adds ms to h; h NULL (no slot) or a time that is no number counts as dropped. */
static void observe(struct metrics *m, struct histogram *h, double ms) {
  if (!h || !(ms >= 0)) {
    __atomic_add_fetch(&m->dropped, 1, __ATOMIC_RELAXED);
    return;
  }
  size_t b = 0;
  while (b < NBUCKETS - 1 && ms / 1e3 > bucket_le[b]) b++;
  __atomic_add_fetch(&h->bucket[b], 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&h->sum_ns, (uint64_t)(ms * 1e6 + 0.5), __ATOMIC_RELAXED);
}

void metrics_stage(struct metrics *m, const char *stage, double ms) {
  int s = intern(m->stage, STAGES, stage);
  observe(m, s < 0 ? NULL : &m->hist[s], ms);
}

/* The HTTP methods a duration is labelled with; any other is "other". */
static const char *const http_methods[] = {"other", "GET", "HEAD", "POST", "OPTIONS"};
#define NMETHODS (int)(sizeof(http_methods) / sizeof(http_methods[0]))

void metrics_duration(struct metrics *m, const char *route, const char *method, int status,
                      double ms) {
  int r = intern(m->label, LABELS, route ? route : "other"), k = NMETHODS - 1;
  while (k > 0 && strcmp(method, http_methods[k]) != 0) k--;
  int s = r < 0 || status < 0 || status > 999
              ? -1
              : slot(m->dur_key, DURATIONS,
                     (uint32_t)(r + 1) << 16 | (uint32_t)k << 10 | (uint32_t)status);
  observe(m, s < 0 ? NULL : &m->dur[s], ms);
}

void metrics_refused(struct metrics *m, enum err e) {
  if (e > ERR_OK && e < ERR_COUNT) __atomic_add_fetch(&m->refused[e], 1, __ATOMIC_RELAXED);
}

void metrics_in_flight(struct metrics *m, int delta) {
  __atomic_add_fetch(&m->in_flight, delta, __ATOMIC_RELAXED);
}

/* ---- rendering ---- */

struct text { /* a growing string */
  char *p;
  size_t len, cap;
  int oom;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct text *t, const char *fmt, ...) {
  va_list ap;
  for (int pass = 0; pass < 2 && !t->oom; pass++) {
    va_start(ap, fmt);
    int n = vsnprintf(t->p ? t->p + t->len : NULL, t->cap - t->len, fmt, ap); /* p: none yet */
    va_end(ap);
    if (n < 0) t->oom = 1;
    if (n < 0 || (size_t)n < t->cap - t->len) {
      t->len += n > 0 ? (size_t)n : 0;
      return;
    }
    size_t cap = (t->cap + (size_t)n + 1) * 2;
    char *p = realloc(t->p, cap);
    if (!p) t->oom = 1;
    if (p) t->p = p, t->cap = cap;
  }
}

/* A label value with '\\', '"' and newlines escaped, as the format wants. */
static void put_label(struct text *t, const char *v) {
  for (; *v; v++) {
    if (*v == '\\' || *v == '"')
      put(t, "\\%c", *v);
    else if (*v == '\n')
      put(t, "\\n");
    else
      put(t, "%c", *v);
  }
}

static void put_family(struct text *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_requests(struct text *t, struct metrics *m) {
  put_family(t, "blurd_requests_total", "counter",
             "Requests answered, by route (the path, or other), algorithm (the one that ran, or "
             "none) and code (the HTTP status).");
  for (int s = 0; s < SERIES; s++) {
    uint32_t key = __atomic_load_n(&m->key[s], __ATOMIC_ACQUIRE);
    if (!key) continue;
    put(t, "blurd_requests_total{route=\"");
    put_label(t, __atomic_load_n(&m->label[(key >> 24) - 1], __ATOMIC_ACQUIRE));
    put(t, "\",algorithm=\"");
    put_label(t, __atomic_load_n(&m->label[((key >> 16) & 0xff) - 1], __ATOMIC_ACQUIRE));
    put(t, "\",code=\"%u\"} %llu\n", key & 0xffff,
        (unsigned long long)__atomic_load_n(&m->count[s], __ATOMIC_RELAXED));
  }
}

/* One histogram of family name, its series labelled labels (`stage="decode"`, escaped); the
 * count is the sum of the buckets, so +Inf always equals _count. */
static void render_histogram(struct text *t, const char *name, const char *labels,
                             const struct histogram *h) {
  uint64_t cum = 0;
  for (size_t b = 0; b < NBUCKETS; b++) {
    cum += __atomic_load_n(&h->bucket[b], __ATOMIC_RELAXED);
    if (b < NBUCKETS - 1)
      put(t, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, bucket_le[b], (unsigned long long)cum);
    else
      put(t, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
  }
  put(t, "%s_sum{%s} %.9f\n", name, labels, __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED) / 1e9);
  put(t, "%s_count{%s} %llu\n", name, labels, (unsigned long long)cum);
}

static void render_stages(struct text *t, struct metrics *m) {
  put_family(t, "blurd_stage_seconds", "histogram",
             "Time image jobs spent in each stage (the names of Server-Timing).");
  for (int s = 0; s < STAGES; s++) {
    const char *name = __atomic_load_n(&m->stage[s], __ATOMIC_ACQUIRE);
    struct text l = {0};
    put(&l, "stage=\"");
    if (name) put_label(&l, name);
    put(&l, "\"");
    if (name && !l.oom) render_histogram(t, "blurd_stage_seconds", l.p, &m->hist[s]);
    free(l.p);
  }
}

static void render_durations(struct text *t, struct metrics *m) {
  put_family(t, "blurd_request_duration_seconds", "histogram",
             "Time from a request's first byte to its answer, by route (the path, or other), "
             "method (the HTTP method: GET, HEAD, POST, OPTIONS or other) and code (the HTTP "
             "status).");
  for (int s = 0; s < DURATIONS; s++) {
    uint32_t key = __atomic_load_n(&m->dur_key[s], __ATOMIC_ACQUIRE);
    if (!key) continue;
    struct text l = {0};
    put(&l, "route=\"");
    put_label(&l, __atomic_load_n(&m->label[(key >> 16) - 1], __ATOMIC_ACQUIRE));
    put(&l, "\",method=\"%s\",code=\"%u\"", http_methods[(key >> 10) & 63], key & 1023);
    if (!l.oom) render_histogram(t, "blurd_request_duration_seconds", l.p, &m->dur[s]);
    free(l.p);
  }
}

static void put_gauge(struct text *t, const char *name, const char *help, double v) {
  put_family(t, name, "gauge", help);
  put(t, "%s %.17g\n", name, v);
}

static void render_gauges(struct text *t, struct api_ctx *ctx) {
  int queued, running, cap, workers;
  engine_stats(ctx->engine, &queued, &running, &cap, &workers);
  int ready = !api_failed(ctx) && !__atomic_load_n(&ctx->draining, __ATOMIC_SEQ_CST) &&
              !engine_warming(ctx->engine);
  put_gauge(t, "blurd_queue_depth", "Jobs waiting for a worker.", queued);
  put_gauge(t, "blurd_queue_capacity", "Jobs that may wait for a worker.", cap);
  put_gauge(t, "blurd_jobs_running", "Jobs on a worker now.", running);
  put_gauge(t, "blurd_workers", "Job workers.", workers);
  put_gauge(t, "blurd_in_flight", "Requests being handled (headers read, not yet answered).",
            __atomic_load_n(&ctx->metrics->in_flight, __ATOMIC_RELAXED));
  put_gauge(t, "blurd_ready", "1 while /readyz answers 200.", ready && workers > 0);
  put_family(t, "blurd_connections_refused_total", "counter",
             "Connections answered before their request was read: over --max-conns, over "
             "--max-conns-per-ip, or while draining.");
  static const enum err refusals[] = {ERR_TOO_MANY_CONNECTIONS,
                                      ERR_TOO_MANY_CONNECTIONS_FROM_ADDRESS, ERR_SHUTTING_DOWN};
  for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++)
    put(t, "blurd_connections_refused_total{reason=\"%s\"} %llu\n", err_code(refusals[i]),
        (unsigned long long)__atomic_load_n(&ctx->metrics->refused[refusals[i]], __ATOMIC_RELAXED));
  put_family(t, "blurd_metrics_dropped_total", "counter",
             "Observations not recorded because a metrics table was full.");
  put(t, "blurd_metrics_dropped_total %llu\n",
      (unsigned long long)__atomic_load_n(&ctx->metrics->dropped, __ATOMIC_RELAXED));
}

/* GPU memory by device, only with the CUDA backend. */
static void render_gpu(struct text *t, struct api_ctx *ctx) {
  size_t held[MAX_DEVICES], used[MAX_DEVICES], total[MAX_DEVICES];
  int n = 0;
  while (n < MAX_DEVICES &&
         engine_device_memory(ctx->engine, n, &held[n], &used[n], &total[n]) == 0)
    n++;
  if (n == 0) return;
  static const char *const names[] = {"blurd_gpu_memory_used_bytes",
                                      "blurd_gpu_device_memory_used_bytes",
                                      "blurd_gpu_device_memory_total_bytes"};
  static const char *const help[] = {
      "Device memory the workers' CUDA contexts hold (buffers grow to the largest image).",
      "Device memory in use on the GPU, by every process (total minus free).",
      "Device memory of the GPU."};
  const size_t *v[] = {held, used, total};
  for (int k = 0; k < 3; k++) {
    put_family(t, names[k], "gauge", help[k]);
    for (int d = 0; d < n; d++) put(t, "%s{device=\"%d\"} %zu\n", names[k], d, v[k][d]);
  }
}

/* Where JPEG runs, and the sizes of the GPU's decode batches by device. */
static void render_codecs(struct text *t, struct api_ctx *ctx) {
  const char *decoder;
  int gpu = engine_device_codecs(ctx->engine, &decoder);
  put_gauge(t, "blurd_gpu_codecs", "1 when JPEG is decoded and encoded on the GPU (nvJPEG).", gpu);
  put_family(t, "blurd_codecs_info", "gauge", "The codecs that run (always 1).");
  put(t, "blurd_codecs_info{jpeg_decode=\"");
  put_label(t, decoder);
  put(t, "\",jpeg_encode=\"%s\",png=\"libpng\",webp=\"libwebp\"} 1\n",
      gpu ? "nvjpeg" : "libjpeg-turbo");
  struct engine_batch_stats b;
  if (engine_batch_stats(ctx->engine, 0, &b) != 0) return;
  put_family(t, "blurd_jpeg_decode_batch_size", "histogram",
             "JPEG files per batched GPU decode, by device (sum: files, count: batches).");
  for (int d = 0; d < MAX_DEVICES && engine_batch_stats(ctx->engine, d, &b) == 0; d++) {
    unsigned long long cum = 0;
    for (int i = 0; i < ENGINE_BATCH_BUCKETS; i++) {
      cum += b.hist[i];
      if (i < ENGINE_BATCH_BUCKETS - 1)
        put(t, "blurd_jpeg_decode_batch_size_bucket{device=\"%d\",le=\"%d\"} %llu\n", d, 1 << i,
            cum);
      else
        put(t, "blurd_jpeg_decode_batch_size_bucket{device=\"%d\",le=\"+Inf\"} %llu\n", d, cum);
    }
    put(t, "blurd_jpeg_decode_batch_size_sum{device=\"%d\"} %llu\n", d, b.images);
    put(t, "blurd_jpeg_decode_batch_size_count{device=\"%d\"} %llu\n", d, cum);
  }
  put_family(t, "blurd_jpeg_decode_single_total", "counter",
             "JPEG files the GPU decoded alone, outside a batch (progressive files on a hardware "
             "decoder), by device.");
  for (int d = 0; d < MAX_DEVICES && engine_batch_stats(ctx->engine, d, &b) == 0; d++)
    put(t, "blurd_jpeg_decode_single_total{device=\"%d\"} %llu\n", d, b.single);
}

/* Where HEIC was decoded: on the GPU's video decoders, or on the CPU and why. */
static void render_video(struct text *t, struct api_ctx *ctx) {
  struct engine_video_stats v;
  if (engine_video_stats(ctx->engine, &v) != 0) return;
  put_family(t, "blurd_heic_decodes_total", "counter",
             "HEIC images decoded on a GPU's video decoders (decoder nvdec), and on the CPU "
             "(decoder cpu) with the reason the video decoders did not take them.");
  put(t, "blurd_heic_decodes_total{decoder=\"nvdec\",reason=\"\"} %llu\n", v.on_gpu);
  for (int i = 0; i < v.nreasons; i++) {
    put(t, "blurd_heic_decodes_total{decoder=\"cpu\",reason=\"");
    put_label(t, v.reason[i]);
    put(t, "\"} %llu\n", v.count[i]);
  }
}

static void render_info(struct text *t, struct api_ctx *ctx) {
  put_family(t, "blurd_backend_info", "gauge", "The backend that runs the jobs (always 1).");
  put(t, "blurd_backend_info{backend=\"");
  put_label(t, engine_name(ctx->engine));
  put(t, "\"} 1\n");
  put_family(t, "blurd_build_info", "gauge",
             "The version, the backends compiled in and the compiler (always 1).");
  put(t, "blurd_build_info{version=\"" BLURD_VERSION "\",backends=\"");
  put_label(t, engine_built());
  put(t, "\",compiler=\"");
  put_label(t, __VERSION__);
  put(t, "\"} 1\n");
}

/* ---- the process: the names and meanings of Prometheus's client libraries ---- */

/* The fields of /proc/self/stat after the command (field 3, the state, is f[0]); 0 or -1. */
static int proc_stat(unsigned long long f[], int n) {
  char buf[1024];
  FILE *fp = fopen("/proc/self/stat", "r");
  size_t len = fp ? fread(buf, 1, sizeof(buf) - 1, fp) : 0;
  if (fp) fclose(fp);
  buf[len] = 0;
  char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
  if (!p || p[1] != ' ') return -1;
  p += 3; /* past ") " and the state letter */
  f[0] = 0;
  for (int i = 1; i < n; i++) f[i] = strtoull(p, &p, 10);
  return 0;
}

/* The boot time, Unix seconds (btime in /proc/stat); 0 when unknown. */
static double boot_time(void) {
  char line[256];
  unsigned long long bt = 0;
  FILE *fp = fopen("/proc/stat", "r");
  while (fp && fgets(line, sizeof(line), fp))
    if (sscanf(line, "btime %llu", &bt) == 1) break;
  if (fp) fclose(fp);
  return (double)bt;
}

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return d ? n - 1 : -1; /* not the directory's own descriptor */
}

static void render_process(struct text *t) {
  unsigned long long f[22]; /* f[k]: field k + 3 of proc(5)'s /proc/pid/stat */
  double tick = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
  struct rlimit rl;
  if (proc_stat(f, 22) == 0) {
    put_family(t, "process_cpu_seconds_total", "counter", "User and system CPU time, seconds.");
    put(t, "process_cpu_seconds_total %.17g\n", (double)(f[11] + f[12]) / tick);
    put_gauge(t, "process_start_time_seconds", "Start time of the process, Unix seconds.",
              boot_time() + (double)f[19] / tick);
    put_gauge(t, "process_virtual_memory_bytes", "Virtual memory size, bytes.", (double)f[20]);
    put_gauge(t, "process_resident_memory_bytes", "Resident memory size, bytes.",
              (double)f[21] * page);
  }
  int fds = open_fds();
  if (fds >= 0) put_gauge(t, "process_open_fds", "Open file descriptors.", fds);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    put_gauge(t, "process_max_fds", "The limit on open file descriptors.", (double)rl.rlim_cur);
}

struct api_response *metrics_response(struct api_ctx *ctx) {
  struct text t = {malloc(16384), 0, 16384, 0};
  t.oom = !t.p;
  render_requests(&t, ctx->metrics);
  render_stages(&t, ctx->metrics);
  render_durations(&t, ctx->metrics);
  render_gauges(&t, ctx);
  render_gpu(&t, ctx);
  render_codecs(&t, ctx);
  render_video(&t, ctx);
  render_info(&t, ctx);
  render_process(&t);
  struct api_response *r = t.oom ? NULL : calloc(1, sizeof(*r));
  if (!r) {
    free(t.p);
    return api_error_response(ERR_OUT_OF_MEMORY, NULL);
  }
  r->status = 200;
  r->content_type = "text/plain; version=0.0.4; charset=utf-8";
  r->body = (uint8_t *)t.p;
  r->len = t.len;
  return r;
}

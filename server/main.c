/* blurd's entry point: reads the configuration (flags, each with an environment variable),
 * fits --max-conns to the file-descriptor limit and sizes --max-buffered from the memory limit,
 * starts the api (backend and workers) and the HTTP server, and on SIGTERM or SIGINT drains:
 * it stops accepting connections, lets every request in flight get its response, and exits 0.
 * When the first argument names an image endpoint ("blur", ...), it runs the command-line mode
 * (cli.c) instead, with the same options for the api. */
#include "server.h"

#include "../api/api.h"
#include "../base/version.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define EXIT_GPU_LOST 70 /* EX_SOFTWARE: the GPU failed for good */
#define FATAL_GRACE_S 2  /* seconds to answer 503 (and /readyz 503) before exiting */

enum opt_kind { OPT_INT, OPT_SIZE, OPT_BYTES, OPT_STR }; /* sizes: K, M, G of 1000; bytes: 1024 */

struct opt {
  const char *name; /* long flag */
  const char *env;  /* environment variable */
  enum opt_kind kind;
  const char *def; /* default, as text */
  long long min, max;
  const char *help;
};

/* clang-format off */
static const struct opt opts[] = {
  {"port",             "BLURD_PORT",             OPT_INT,  "8080",    0, 65535,  "TCP port; 0 picks a free one"},
  {"bind",             "BLURD_BIND",             OPT_STR,  "0.0.0.0", 0, 0,      "IPv4 address to listen on"},
  {"backend",          "BLURD_BACKEND",          OPT_STR,  "auto",    0, 0,      "cpu, gpu, or auto (the GPU when there is one)"},
  {"workers",          "BLURD_WORKERS",          OPT_INT,  "0",       0, 1024,   "job workers (per GPU for the GPU backend); 0: one per core, two with the GPU codecs"},
  {"gpu-codecs",       "BLURD_GPU_CODECS",       OPT_STR,  "auto",    0, 0,      "JPEG on the GPU (nvJPEG): auto (when it loads), on (required), off"},
  {"jpeg-batch-wait-us", "BLURD_JPEG_BATCH_WAIT_US", OPT_INT, "1000", 0, 100000, "microseconds a GPU JPEG decode waits for others to batch with"},
  {"jpeg-decoders",    "BLURD_JPEG_DECODERS",    OPT_INT,  "2",       1, 4,      "GPU JPEG batch decoder threads per GPU"},
  {"heic-decoders",    "BLURD_HEIC_DECODERS",    OPT_INT,  "14",      0, 64,     "HEIC video decoder sessions per GPU (NVDEC); 0: HEIC on the CPU"},
  {"warm-image",       "BLURD_WARM_IMAGE",       OPT_STR,  "auto",    0, 0,      "each worker's warm-up image, WxHxC (C: 1 to 4); 0: none; auto: 1920x1080x3"},
  {"queue",            "BLURD_QUEUE",            OPT_INT,  "64",      1, 100000, "jobs that may wait for a worker; more get 503"},
  {"max-body",         "BLURD_MAX_BODY",         OPT_BYTES, "32M",    1, 1LL << 32, "largest request body in bytes (K, M, G suffixes)"},
  {"max-buffered",     "BLURD_MAX_BUFFERED",     OPT_BYTES, "0",      0, 1LL << 50, "request bodies and responses held at once, in bytes (K, M, G); more get 503; 0: 1G, or 2 x cores x --max-body when more, at most a quarter of the memory limit"},
  {"max-pixels",       "BLURD_MAX_PIXELS",       OPT_SIZE, "40M",     1, 1LL << 32, "largest image, width*height (K, M suffixes are powers of 1000)"},
  {"max-width",        "BLURD_MAX_WIDTH",        OPT_INT,  "16384",   1, 1 << 20, "largest image width in pixels"},
  {"max-height",       "BLURD_MAX_HEIGHT",       OPT_INT,  "16384",   1, 1 << 20, "largest image height in pixels"},
  {"max-cost",         "BLURD_MAX_COST",         OPT_INT,  "30",      0, 1000000, "largest estimated work of one request, in seconds of one CPU core (422 too_expensive); 0: no limit"},
  {"http-threads",     "BLURD_HTTP_THREADS",     OPT_INT,  "0",       0, 64,     "threads that read and write sockets; 0: a quarter of the cores, 2 to 16"},
  {"timeout",          "BLURD_TIMEOUT",          OPT_INT,  "30",      1, 3600,   "seconds a connection may stay idle"},
  {"max-conns",        "BLURD_MAX_CONNS",        OPT_INT,  "1024",    1, 100000, "open connections in total; more get 503"},
  {"max-conns-per-ip", "BLURD_MAX_CONNS_PER_IP", OPT_INT,  "256",     0, 100000, "open connections from one IP address, more get 429; 0: no limit (behind a proxy)"},
  {"drain-timeout",    "BLURD_DRAIN_TIMEOUT",    OPT_INT,  "30",      0, 3600,   "seconds to let requests finish after SIGTERM"},
  {"request-timeout",  "BLURD_REQUEST_TIMEOUT",  OPT_INT,  "60",      1, 3600,   "seconds a request may take from its first line to its response"},
  {"access-log",       "BLURD_ACCESS_LOG",       OPT_STR,  "-",       0, 0,      "JSON-lines access log: a file, - for stderr, or off"},
  {"api-key",          "BLURD_API_KEY",          OPT_STR,  "",        0, 0,      "requests (but health, metrics, methods) need this key"},
  {"api-key-file",     "BLURD_API_KEY_FILE",     OPT_STR,  "",        0, 0,      "read the API key from this file (keeps it out of ps)"},
  {"cors-origins",     "BLURD_CORS_ORIGINS",     OPT_STR,  "",        0, 0,      "origins allowed by CORS, comma-separated, or *"},
};
/* clang-format on */

enum { NOPTS = sizeof(opts) / sizeof(opts[0]) };

static void usage(FILE *f) {
  fprintf(f, "usage: blurd [options]\n       blurd ENDPOINT [options] [--PARAM VALUE ...] IN OUT"
             "\n       blurd ENDPOINT [options] [--PARAM VALUE ...] -o DIR IN...\n\nA GPU "
             "image-blurring service (CPU when no GPU is present), or with an endpoint first, "
             "the same\nprocessing of files on the command line (blurd blur --help).\n\noptions "
             "(each also read from its environment variable):\n");
  for (int i = 0; i < NOPTS; i++)
    fprintf(f, "  --%-17s %-23s %s (default %s)\n", opts[i].name, opts[i].env, opts[i].help,
            *opts[i].def ? opts[i].def : "none");
  fprintf(f, "  --help                                    print this and exit\n");
  fprintf(f, "  --version                                 print the version and exit\n");
}

/* Parses "32M" style sizes: binary multiples for bytes, decimal ones for pixels. */
static int parse_value(const struct opt *o, const char *text, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || errno) return -1;
  if ((o->kind == OPT_SIZE || o->kind == OPT_BYTES) && *end) {
    long long unit = o->kind == OPT_BYTES ? 1024 : 1000;
    const char *p = strchr("KMG", *end);
    if (!p || end[1]) return -1;
    for (long i = 0; i <= p - "KMG"; i++) {
      if (v > LLONG_MAX / unit || v < LLONG_MIN / unit) return -1;
      v *= unit;
    }
    end++;
  }
  if (*end || v < o->min || v > o->max) return -1;
  *out = v;
  return 0;
}

struct config {
  const char *text[NOPTS]; /* the chosen text of each option */
  long long num[NOPTS];    /* its value, for numbers */
  int flag[NOPTS];         /* given as a flag */
  int given[NOPTS];        /* given as a flag or in the environment, even empty */
};

static int set_opt(struct config *c, int i, const char *text, const char *from) {
  c->text[i] = text;
  c->flag[i] = strcmp(from, "flag") == 0;
  c->given[i] = strcmp(from, "default") != 0;
  if (opts[i].kind == OPT_STR) return 0;
  if (parse_value(&opts[i], text, &c->num[i]) == 0) return 0;
  fprintf(stderr, "blurd: %s: '%s' is not valid for --%s (%s, from %lld to %lld)\n", from, text,
          opts[i].name, opts[i].help, opts[i].min, opts[i].max);
  return -1;
}

static int load_config(struct config *c, int argc, char **argv) {
  struct option lo[NOPTS + 3];
  for (int i = 0; i < NOPTS; i++) {
    lo[i] = (struct option){opts[i].name, required_argument, NULL, 1000 + i};
    const char *env = getenv(opts[i].env);
    if (set_opt(c, i, env ? env : opts[i].def, env ? opts[i].env : "default") != 0) return 2;
  }
  lo[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
  lo[NOPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
  lo[NOPTS + 2] = (struct option){0, 0, 0, 0};
  int ch;
  while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    if (ch == 'h') {
      usage(stdout);
      return 1;
    }
    if (ch == 'V') {
      printf("blurd %s (backends %s, %s)\n", BLURD_VERSION, api_backends_built(), __VERSION__);
      return 1;
    }
    if (ch < 1000 || set_opt(c, ch - 1000, optarg, "flag") != 0) {
      fprintf(stderr, "blurd: see blurd --help for the options\n");
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "blurd: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  return 0;
}

static int opt_index(const char *name) {
  for (int i = 0; i < NOPTS; i++)
    if (strcmp(opts[i].name, name) == 0) return i;
  abort(); /* a name below is misspelt: a bug, caught by any test run */
}

#define NUM(c, name)  ((c)->num[opt_index(name)])
#define TEXT(c, name) ((c)->text[opt_index(name)])

static int gpu_codecs_mode(const char *s, enum api_gpu_codecs *m) {
  *m = strcmp(s, "on") == 0    ? API_GPU_CODECS_ON
       : strcmp(s, "off") == 0 ? API_GPU_CODECS_OFF
                               : API_GPU_CODECS_AUTO;
  return *m != API_GPU_CODECS_AUTO || strcmp(s, "auto") == 0 ? 0 : -1;
}

/* "WxHxC" (or "WxH": RGBA) into warm; "0" for none, "auto" for the backend's default. */
static int warm_image(const char *s, int warm[3]) {
  char end;
  warm[2] = 4;
  if (strcmp(s, "0") == 0) return warm[0] = warm[1] = 0;
  if (strcmp(s, "auto") == 0) return warm[0] = warm[1] = -1, 0;
  int n = sscanf(s, "%dx%dx%d%c", &warm[0], &warm[1], &warm[2], &end);
  return (n == 2 || n == 3) && warm[0] > 0 && warm[0] <= 65535 && warm[1] > 0 && warm[1] <= 65535 &&
                 warm[2] >= 1 && warm[2] <= 4
             ? 0
             : -1;
}

static int backend_kind(const char *s, enum api_backend_kind *k) {
  *k = strcmp(s, "cpu") == 0   ? API_BACKEND_CPU
       : strcmp(s, "gpu") == 0 ? API_BACKEND_GPU
                               : API_BACKEND_AUTO;
  return *k != API_BACKEND_AUTO || strcmp(s, "auto") == 0 ? 0 : -1;
}

#define KEY_MAX 4096 /* bytes of an API key */

/* Where option i was given, for messages: "--name" or its environment variable. */
static const char *given_as(const struct config *c, int i, char *buf, size_t n) {
  snprintf(buf, n, c->flag[i] ? "--%s" : "%s", c->flag[i] ? opts[i].name : opts[i].env);
  return buf;
}

/* The key file's contents into key (at most cap - 1 bytes); returns their length, or -1 after
 * saying what is wrong. */
static long read_key_file(const char *path, char *key, size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(key, 1, cap - 1, f) : 0;
  if (!f || ferror(f) || !feof(f)) {
    fprintf(stderr, "blurd: --api-key-file %s: %s\n", path,
            f ? "not readable, or too long" : strerror(errno));
    if (f) fclose(f);
    return -1;
  }
  fclose(f);
  return (long)n;
}

/* The API key from --api-key or --api-key-file (trailing white space dropped) into key; "" when
 * neither is given. A key given empty (--api-key '', BLURD_API_KEY set to nothing, an empty or
 * blank file) is refused rather than read as "no key", which would turn authentication off
 * unnoticed. Returns 0, or -1 after saying what is wrong. */
static int read_api_key(const struct config *c, char *key, size_t cap) {
  int ik = opt_index("api-key"), ifile = opt_index("api-key-file");
  const char *text = c->text[ik], *path = c->text[ifile];
  char from[64];
  long n = 0;
  if (c->given[ik] && c->given[ifile]) {
    fprintf(stderr, "blurd: give --api-key or --api-key-file, not both\n");
    return -1;
  }
  if (c->given[ifile] && !*path) {
    fprintf(stderr, "blurd: %s is empty: name the file that holds the API key\n",
            given_as(c, ifile, from, sizeof(from)));
    return -1;
  }
  if (c->given[ifile]) {
    if ((n = read_key_file(path, key, cap)) < 0) return -1;
    snprintf(from, sizeof(from), "the file %.40s", path);
  } else {
    n = strlen(text) < cap ? (long)strlen(text) : 0;
    memcpy(key, text, (size_t)n);
    given_as(c, ik, from, sizeof(from));
  }
  while (n > 0 && isspace((unsigned char)key[n - 1])) n--;
  key[n] = 0;
  if ((c->given[ik] || c->given[ifile]) && (n == 0 || strlen(key) != (size_t)n)) {
    fprintf(stderr,
            "blurd: the API key from %s is empty, blank, too long or holds a NUL byte; give a "
            "key, or set neither --api-key nor --api-key-file to serve without one\n",
            from);
    return -1;
  }
  return 0;
}

/* Descriptors besides connections and threads: the listening socket, the log, files. */
#define FD_RESERVE 64
#define NO_LIMIT   (1ULL << 60) /* a cgroup memory limit this large is none */

/* Makes room for --max-conns connections in RLIMIT_NOFILE: raises the soft limit to the hard one,
 * and when that is still short, lowers max_conns so that clients past it get the gate's 503
 * instead of waiting in the backlog for a descriptor, and says so. Each worker and HTTP thread
 * is allowed two descriptors (its files, pipes, the GPU driver's). */
static void fit_descriptors(struct srv_config *sc, int workers) {
  struct rlimit lim;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) getrlimit(RLIMIT_NOFILE, &lim);
  }
  unsigned long long reserve = FD_RESERVE +
                               2ULL * (unsigned long long)(workers > 0 ? workers
                                                           : cores > 0 ? cores
                                                                       : 1) +
                               2ULL * (unsigned long long)sc->threads;
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= sc->max_conns + reserve) return;
  unsigned old = sc->max_conns;
  sc->max_conns = lim.rlim_cur > reserve ? (unsigned)(lim.rlim_cur - reserve) : 1;
  fprintf(stderr,
          "blurd: --max-conns %u needs %llu file descriptors, but RLIMIT_NOFILE allows %llu: "
          "--max-conns is %u (more connections get 503); raise the limit (ulimit -n) for more\n",
          old, old + reserve, (unsigned long long)lim.rlim_cur, sc->max_conns);
}

/* The first number in file, or NO_LIMIT when it cannot be read or says "max". */
static unsigned long long read_limit(const char *file) {
  unsigned long long v = NO_LIMIT;
  FILE *f = fopen(file, "r");
  if (f && fscanf(f, "%llu", &v) != 1) v = NO_LIMIT;
  if (f) fclose(f);
  return v;
}

/* The memory this process may use in bytes: the smallest cgroup limit along its cgroup and the
 * cgroup's parents (v2 memory.max, v1 memory.limit_in_bytes; a container sees its own cgroup as
 * the root), else physical memory. */
static unsigned long long memory_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  unsigned long long best = pages > 0 && page > 0 ? (unsigned long long)pages * page : NO_LIMIT;
  char line[512], dir[700];
  FILE *f = fopen("/proc/self/cgroup", "r");
  while (f && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = 0;
    const char *path = strchr(line, ':') ? strchr(strchr(line, ':') + 1, ':') : NULL;
    int v2 = strncmp(line, "0::", 3) == 0, v1 = strstr(line, ":memory:") != NULL;
    if (!path || !(v1 || v2)) continue;
    for (char *end = (char *)path + strlen(path);; *end = 0) {
      snprintf(dir, sizeof(dir), "%s/%s/%s", v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory",
               path + 1, v2 ? "memory.max" : "memory.limit_in_bytes");
      unsigned long long v = read_limit(dir);
      if (v < best) best = v;
      if (!(end = strrchr(path + 1, '/'))) break; /* then the parent, up to the root */
    }
  }
  if (f) fclose(f);
  return best;
}

#define BUFFERED_BASE (1ULL << 30) /* the default --max-buffered, before the cores and memory */

/* The default of --max-buffered: 1 GiB, or room for two bodies of --max-body per core when that is
 * more, and never more than a quarter of the memory the process may use. */
static size_t default_buffered(size_t max_body) {
  unsigned long long want = 2ULL * (unsigned long long)api_cores() * max_body,
                     quarter = memory_limit() / 4;
  if (want < BUFFERED_BASE) want = BUFFERED_BASE;
  return (size_t)(want < quarter ? want : quarter);
}

static int sigpipe[2] = {-1, -1};

static void on_signal(int sig) {
  char c = (char)sig;
  if (write(sigpipe[1], &c, 1) < 0) { /* nothing to do: the pipe is never full */
  }
}

/* The "signals" main waits for besides SIGTERM and SIGINT: the api's on_fatal. */
#define SIG_GPU_LOST    0   /* the GPU failed for good: exit 70 after a grace */
#define SIG_NOT_STARTED 255 /* the backend chosen after the start could not start: exit 1 */

/* The api's on_fatal: wakes main, which stops the process. */
static void on_fatal(void *arg, int status) {
  (void)arg;
  on_signal(status == EXIT_GPU_LOST ? SIG_GPU_LOST : SIG_NOT_STARTED);
}

/* SIGTERM and SIGINT from the start on: one that comes while the backend warms up is answered as
 * soon as main waits for it, instead of killing the process. */
static void catch_signals(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

static int wait_for_signal(void) {
  unsigned char c = 0;
  while (read(sigpipe[0], &c, 1) < 0 && errno == EINTR) {
  }
  return c;
}

/* The api's settings from the configuration into ac (key holds the API key). Returns 0, or 2
 * after saying what is wrong. */
static int api_settings(const struct config *c, struct api_config *ac, char *key, size_t cap) {
  if (backend_kind(TEXT(c, "backend"), &ac->backend) != 0) {
    fprintf(stderr, "blurd: --backend must be cpu, gpu or auto, not '%s'\n", TEXT(c, "backend"));
    return 2;
  }
  if (gpu_codecs_mode(TEXT(c, "gpu-codecs"), &ac->gpu_codecs) != 0) {
    fprintf(stderr, "blurd: --gpu-codecs must be auto, on or off, not '%s'\n",
            TEXT(c, "gpu-codecs"));
    return 2;
  }
  ac->jpeg_batch_wait_us = (int)NUM(c, "jpeg-batch-wait-us");
  ac->jpeg_decoders = (int)NUM(c, "jpeg-decoders");
  ac->heic_decoders = (int)NUM(c, "heic-decoders");
  if (warm_image(TEXT(c, "warm-image"), ac->warm) != 0) {
    fprintf(stderr, "blurd: --warm-image must be WIDTHxHEIGHT[xCHANNELS], auto or 0, not '%s'\n",
            TEXT(c, "warm-image"));
    return 2;
  }
  ac->workers = (int)NUM(c, "workers");
  ac->queue = (int)NUM(c, "queue");
  ac->max_body = (size_t)NUM(c, "max-body");
  ac->max_pixels = (uint64_t)NUM(c, "max-pixels");
  ac->max_width = (uint32_t)NUM(c, "max-width");
  ac->max_height = (uint32_t)NUM(c, "max-height");
  ac->max_cost = (double)NUM(c, "max-cost");
  ac->on_fatal = on_fatal;
  if (read_api_key(c, key, cap) != 0) return 2;
  ac->api_key = key;
  ac->access_log = TEXT(c, "access-log");
  ac->cors_origins = TEXT(c, "cors-origins");
  return 0;
}

/* The command-line mode (argv[1] is an endpoint; cli_main says so when it is not): the flags of the
 * options above (--name value or --name=value) configure the api as for the server; every other
 * argument goes to cli_main. A CLI run warms nothing unless --warm-image says so, has no cost
 * budget unless --max-cost or BLURD_MAX_COST sets one (its files are the caller's own), and has no
 * GPU-lost exit: its files fail one by one. */
static enum cli_status run_cli(int argc, char **argv) {
  char **srv_argv = calloc((size_t)argc + 1, sizeof(char *));
  char **cli_argv = calloc((size_t)argc + 1, sizeof(char *));
  int sn = 1, cn = 1;
  enum cli_status rc = CLI_USAGE; /* the server's flags refused: load_config said why */
  if (!srv_argv || !cli_argv) return free(srv_argv), free(cli_argv), CLI_FAILED;
  srv_argv[0] = argv[0], cli_argv[0] = argv[1];
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    size_t n = strncmp(a, "--", 2) == 0 ? strcspn(a + 2, "=") : 0;
    int known = -1;
    for (int k = 0; n > 0 && k < NOPTS; k++)
      if (strlen(opts[k].name) == n && strncmp(opts[k].name, a + 2, n) == 0) known = k;
    if (strcmp(a, "--") == 0) { /* the rest are files */
      while (i < argc) cli_argv[cn++] = argv[i++];
    } else if (known < 0) {
      cli_argv[cn++] = argv[i];
    } else {
      srv_argv[sn++] = argv[i];
      if (!a[2 + n] && i + 1 < argc) srv_argv[sn++] = argv[++i];
    }
  }
  struct config c = {0};
  struct api_config ac = {0};
  static char key[KEY_MAX];
  if (load_config(&c, sn, srv_argv) == 0 && api_settings(&c, &ac, key, sizeof(key)) == 0) {
    if (!c.flag[opt_index("warm-image")]) ac.warm[0] = ac.warm[1] = 0;
    if (!c.flag[opt_index("max-cost")] && !getenv("BLURD_MAX_COST")) ac.max_cost = 0;
    ac.on_fatal = NULL;
    rc = cli_main(&ac, cn, cli_argv);
  }
  free(srv_argv);
  free(cli_argv);
  return rc;
}

/* --http-threads, or a quarter of the cores (2 to 16): a host with several GPUs needs about 16
 * (docs/performance.md). */
static int http_threads(int n) {
  int quarter = api_cores() / 4;
  return n > 0 ? n : quarter < 2 ? 2 : quarter > 16 ? 16 : quarter;
}

/* The server's settings from the configuration c and the api's ac. */
static struct srv_config server_settings(const struct config *c, const struct api_config *ac) {
  struct srv_config sc = {-1,
                          http_threads((int)NUM(c, "http-threads")),
                          (unsigned)NUM(c, "timeout"),
                          (unsigned)NUM(c, "max-conns"),
                          (unsigned)NUM(c, "max-conns-per-ip"),
                          ac->max_body,
                          (size_t)NUM(c, "max-buffered"),
                          (unsigned)NUM(c, "request-timeout")};
  if (sc.max_buffered == 0) sc.max_buffered = default_buffered(ac->max_body);
  fit_descriptors(&sc, ac->workers);
  return sc;
}

/* What main does once signal sig came (0: the GPU failed): drains, then exits. */
static int stop(struct srv *srv, struct api_ctx *api, int sig, double drain_s) {
  if (sig == SIG_NOT_STARTED) /* said on stderr by the api; nothing else runs yet */
    _exit(1);
  if (sig ==
      SIG_GPU_LOST) { /* the GPU is lost: let requests in flight get their 503, then exit non-zero
              so that the supervisor restarts the process; no in-process device reset */
    fprintf(stderr, "blurd: the GPU failed with a sticky error: exiting for a restart\n");
    nanosleep(&(struct timespec){FATAL_GRACE_S, 0}, NULL);
    _exit(EXIT_GPU_LOST);
  }
  fprintf(stderr, "blurd: signal %d: draining\n", sig);
  api_set_draining(api);
  int left = srv_drain(srv, drain_s);
  if (left > 0) { /* connections still wait on jobs: don't free what they use */
    fprintf(stderr, "blurd: drain timeout with %d requests in flight\n", left);
    _exit(1);
  }
  /* Nothing is in flight, but workers may still warm up: their work is of no use now. */
  if (api_warming(api) > 0) {
    fprintf(stderr, "blurd: stopped during the warm-up\n");
    _exit(0);
  }
  srv_free(srv);
  /* A backend whose resources the exit frees faster than freeing them one by one (a GPU's
   * contexts, device memory and codec states) is left to it; the access log is written
   * unbuffered. Otherwise the api is freed, as leak checkers expect. */
  fprintf(stderr, "blurd: stopped\n");
  if (api_leave_to_exit(api)) _exit(0);
  api_free(api);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && argv[1][0] != '-') return run_cli(argc, argv); /* an endpoint, or bad usage */
  struct config c = {0};
  char err[256];
  int rc = load_config(&c, argc, argv);
  if (rc != 0) return rc == 1 ? 0 : 2;
  struct api_config ac = {0};
  static char key[KEY_MAX];
  if (api_settings(&c, &ac, key, sizeof(key)) != 0) return 2;
  struct srv_config sc = server_settings(&c, &ac);
  signal(SIGPIPE, SIG_IGN);
  /* One malloc arena, so that malloc_trim can give every freed image back: each of glibc's
   * default arenas keeps memory that malloc_trim cannot return (docs/operations.md, Memory).
   * MALLOC_ARENA_MAX overrides it. */
  if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 1);
  if (pipe(sigpipe) != 0) return 1;
  catch_signals();
  /* listening first: clients of a restarting server wait while the backend starts */
  if ((sc.listen_fd = srv_listen(TEXT(&c, "bind"), (int)NUM(&c, "port"), err, sizeof(err))) < 0) {
    fprintf(stderr, "blurd: %s\n", err);
    return 1;
  }
  struct api_ctx *api = api_new(&ac, err, sizeof(err));
  if (!api) {
    fprintf(stderr, "blurd: %s\n", err);
    close(sc.listen_fd);
    return 1;
  }
  struct srv *srv = srv_new(&sc, api, err, sizeof(err));
  if (!srv) {
    fprintf(stderr, "blurd: %s\n", err);
    api_free(api);
    return 1;
  }
  printf("blurd listening on http://%s:%d backend=%s\n", TEXT(&c, "bind"), srv_port(srv),
         api_backend_name(api));
  fflush(stdout);
  return stop(srv, api, wait_for_signal(), (double)NUM(&c, "drain-timeout"));
}

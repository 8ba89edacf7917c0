/* The command-line mode: `blurd blur --sigma 12 in.jpg out.png`, or a batch with -o DIR. Each
 * file becomes the request the HTTP front would build for it (POST /ENDPOINT?name=value..., the
 * file's media type, the whole file as the body) and goes to api_handle, so that files get the
 * HTTP API's pipeline, backends, parameters, defaults and errors. One file at a time: the
 * response's body is written when its status is 200, else its error message is printed; the exit
 * status (enum cli_status) says whether every file was written. */
#include "server.h"

#include "../api/api.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether name is an image endpoint's path without its '/' ("blur", "convert", ...). */
static int cli_is_endpoint(const char *name) {
  const char *path, *method;
  for (int i = 0; (path = api_route(i, &method)); i++)
    if (strcmp(method, "POST") == 0 && strcmp(path + 1, name) == 0) return 1;
  return 0;
}

static void usage(FILE *f) {
  const char *path, *method;
  char exts[256];
  fprintf(f, "usage: blurd ENDPOINT [options] [--PARAM VALUE ...] IN OUT\n"
             "       blurd ENDPOINT [options] [--PARAM VALUE ...] -o DIR IN...\n\n"
             "Runs each file through POST /ENDPOINT as the HTTP API would, with the --PARAM VALUE "
             "pairs as its\nquery string (docs/api.md lists them), and writes the image. "
             "ENDPOINT is one of:");
  for (int i = 0; (path = api_route(i, &method)); i++)
    if (strcmp(method, "POST") == 0) fprintf(f, " %s", path + 1);
  fprintf(f,
          ".\nIN may be a directory (its files); OUT is a file, or a directory. Outputs in a "
          "directory take\nthe input's name with the extension of the output format. Without "
          "--format, OUT's extension\n(%s) picks the format; otherwise the API's "
          "default applies (the input's format).\n\n"
          "  -o DIR     write the outputs into DIR (created when missing)\n"
          "  --json     one JSON object per file on stdout: file, output, status, timing_ms, "
          "psnr_db,\n             method, backend, error\n"
          "  --help     print this and exit\n"
          "The server's options (blurd --help) apply as well, e.g. --backend cpu, --workers, "
          "--gpu-codecs;\nno warm-up unless --warm-image is given.\n\n"
          "Exit status: 0 when every file was written, 1 when any failed (each named on "
          "stderr), 2 for bad usage.\n"
          "example: blurd blur --sigma 12 --method auto photo.jpg photo_blurred.png\n",
          api_output_extensions(exts, sizeof(exts)));
}

/* Says what is wrong with the command line. Returns CLI_USAGE. */
static enum cli_status bad_usage(const char *what, const char *arg) {
  fprintf(stderr, "blurd: %s%s\n", what, arg ? arg : "");
  fprintf(stderr, "blurd: see blurd ENDPOINT --help, e.g. blurd blur --help\n");
  return CLI_USAGE;
}

struct cli {
  struct api_ctx *api;
  char *uri;          /* "/blur?sigma=12&method=auto", percent-encoded */
  const char *outdir; /* the outputs' directory, or NULL for one IN OUT */
  size_t max_body;    /* bytes, as the server limits request bodies */
  int json;           /* --json */
  int help;           /* --help: the usage is printed, and nothing runs */
  int progress;       /* a progress line on stderr (a terminal, several files) */
  int nfiles;
  char **files;
};

/* Appends s percent-encoded (all but RFC 3986's unreserved characters) at o; returns the end. */
static char *escape(char *o, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
        strchr("-._~", ch))
      *o++ = (char)ch;
    else
      o += sprintf(o, "%%%02X", ch);
  }
  *o = 0;
  return o;
}

/* Appends name=value to the query at *end ('?' first, then '&'). */
static void add_param(struct cli *c, char **end, const char *name, size_t nlen, const char *value) {
  *(*end)++ = strchr(c->uri, '?') ? '&' : '?';
  *end = escape(*end, name, nlen);
  *(*end)++ = '=';
  *end = escape(*end, value, strlen(value));
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Adds path (owned by c from here on; NULL: out of memory) to the files. Returns CLI_OK, or
 * CLI_FAILED when out of memory. */
static enum cli_status add_file(struct cli *c, char *path) {
  char **f = realloc(c->files, (size_t)(c->nfiles + 1) * sizeof(*f));
  if (!f || !path) {
    free(path);
    return CLI_FAILED;
  }
  c->files = f;
  c->files[c->nfiles++] = path;
  return CLI_OK;
}

/* Adds path, or the files of a directory (sorted by name, hidden ones left out). Returns what
 * add_file returns. */
static enum cli_status add_input(struct cli *c, const char *path) {
  struct dirent **ents;
  int n = is_dir(path) ? scandir(path, &ents, NULL, alphasort) : -1;
  if (n < 0) return add_file(c, strdup(path)); /* a file, or a directory read will fail on */
  enum cli_status rc = CLI_OK;
  for (int i = 0; i < n; i++) {
    char *p = NULL;
    if (ents[i]->d_name[0] != '.' && rc == CLI_OK &&
        asprintf(&p, "%s/%s", path, ents[i]->d_name) >= 0) {
      if (is_dir(p))
        free(p);
      else
        rc = add_file(c, p);
    }
    free(ents[i]);
  }
  free(ents);
  return rc;
}

/* Reads the command line into c; the output of one IN OUT into *out. Returns CLI_OK (c->help set
 * after --help), CLI_FAILED when out of memory, or CLI_USAGE after saying what is wrong. */
static enum cli_status parse(struct cli *c, int argc, char **argv, const char **out) {
  size_t cap = strlen(argv[0]) + 2 + sizeof("&format=jpeg"); /* and a format from OUT's name */
  for (int i = 1; i < argc; i++) cap += 3 * strlen(argv[i]) + 2;
  char *end = c->uri = malloc(cap), **pos = calloc((size_t)argc, sizeof(char *));
  int npos = 0, format = 0, files = 0;
  if (!c->uri || !pos) return free(pos), CLI_FAILED;
  end += sprintf(c->uri, "/%s", argv[0]);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (files || strcmp(a, "-") == 0 || a[0] != '-') {
      pos[npos++] = argv[i];
    } else if (strcmp(a, "--") == 0) {
      files = 1;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      free(pos);
      c->help = 1;
      return CLI_OK;
    } else if (strcmp(a, "--json") == 0) {
      c->json = 1;
    } else if (strcmp(a, "-o") == 0) {
      if (i + 1 == argc) return free(pos), bad_usage("a directory is missing after ", a);
      c->outdir = argv[++i];
    } else if (strncmp(a, "--", 2) == 0 && a[2] && a[2] != '=') {
      size_t n = strcspn(a + 2, "=");
      const char *value = a[2 + n] ? a + 3 + n : i + 1 < argc ? argv[++i] : NULL;
      if (!value) return free(pos), bad_usage("a value is missing after ", a);
      format |= n == 6 && strncmp(a + 2, "format", 6) == 0;
      add_param(c, &end, a + 2, n, value);
    } else {
      return free(pos), bad_usage("unknown flag ", a);
    }
  }
  enum cli_status rc = CLI_OK;
  if (!c->outdir && npos == 2 && (is_dir(pos[0]) || is_dir(pos[1]))) c->outdir = pos[--npos];
  if (!c->outdir && npos == 2) {
    *out = pos[1];
    if (!format && api_format_of_path(*out))
      add_param(c, &end, "format", 6, api_format_of_path(*out));
    rc = add_file(c, strdup(pos[0]));
  } else if (c->outdir && npos > 0) {
    for (int i = 0; i < npos && rc == CLI_OK; i++) rc = add_input(c, pos[i]);
  } else {
    free(pos);
    return bad_usage(c->outdir ? "no input files" : "give IN OUT, or -o DIR and the inputs", NULL);
  }
  free(pos);
  return rc;
}

struct wait { /* a response from a worker */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  struct api_response *resp;
};

static void on_done(void *udata, struct api_response *resp) {
  struct wait *w = udata;
  pthread_mutex_lock(&w->mu);
  w->resp = resp;
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* The api's answer to a POST of body (NULL: none), once it is ready. */
static struct api_response *handle(struct cli *c, const uint8_t *body, size_t len) {
  struct api_trace trace = {0};
  struct wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL};
  double now = api_now_ms();
  struct api_request req = {.method = "POST",
                            .uri = c->uri,
                            .content_type = body ? api_media_type(body, len) : NULL,
                            .body = body,
                            .body_len = len,
                            .t_start = now,
                            .t_received = now,
                            .trace = &trace};
  struct api_response *resp = api_handle(c->api, &req, on_done, &w);
  if (resp) return resp;
  pthread_mutex_lock(&w.mu);
  while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
  pthread_mutex_unlock(&w.mu);
  return w.resp;
}

/* The api's answer to a POST of the file at path: an error response for a file over the body
 * limit, as the server answers; NULL with a sentence in msg when the file cannot be read. */
static struct api_response *request(struct cli *c, const char *path, char *msg, size_t msglen) {
  struct stat st;
  FILE *f = fopen(path, "rb");
  if (!f || fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
    snprintf(msg, msglen, "%s", f ? "a directory, not a file" : strerror(errno));
    if (f) fclose(f);
    return NULL;
  }
  if ((size_t)st.st_size > c->max_body) {
    fclose(f);
    snprintf(msg, msglen, "The request body is larger than the limit of %zu bytes.", c->max_body);
    return api_error_response(ERR_BODY_TOO_LARGE, msg);
  }
  uint8_t *body = malloc((size_t)st.st_size + 1);
  size_t len = body ? fread(body, 1, (size_t)st.st_size, f) : 0;
  int bad = !body || ferror(f) || len != (size_t)st.st_size;
  fclose(f);
  if (bad) {
    snprintf(msg, msglen, "%s", body ? "read error" : "out of memory");
    free(body);
    return NULL;
  }
  struct api_response *resp = handle(c, body, len);
  free(body);
  if (!resp) snprintf(msg, msglen, "out of memory");
  return resp;
}

static const char *header(const struct api_response *r, const char *name) {
  for (int i = 0; r && i < r->nheaders; i++)
    if (strcasecmp(r->headers[i].name, name) == 0) return r->headers[i].value;
  return NULL;
}

/* Server-Timing ("queue;dur=0.010, decode;desc=\"libpng\";dur=3.1, ...") as {"queue": 0.01, ...}.
 */
static json_t *timing(const char *st) {
  json_t *o = json_object();
  while (st && *st) {
    size_t n = strcspn(st, ";,"), len = strcspn(st, ",");
    const char *dur = strstr(st, "dur=");
    char key[32];
    snprintf(key, sizeof(key), "%.*s", (int)(n < sizeof(key) ? n : sizeof(key) - 1), st);
    if (dur && dur < st + len) json_object_set_new(o, key, json_real(strtod(dur + 4, NULL)));
    st += len;
    st += strspn(st, ", ");
  }
  return o;
}

/* The output path in the directory: the input's name with the format's extension. */
static char *output_path(const char *dir, const char *in, const char *media) {
  const char *base = strrchr(in, '/') ? strrchr(in, '/') + 1 : in, *dot = strrchr(base, '.');
  int n = dot && dot > base ? (int)(dot - base) : (int)strlen(base);
  const char *ext = api_extension_of(media);
  char *p = NULL;
  return asprintf(&p, "%s/%.*s.%s", dir, n, base, ext) >= 0 ? p : NULL;
}

/* Writes resp's body to out (not over in). Returns CLI_OK, or CLI_FAILED with a sentence in
 * msg. */
static enum cli_status write_output(const char *in, const char *out,
                                    const struct api_response *resp, char *msg, size_t msglen) {
  struct stat a, b;
  if (stat(in, &a) == 0 && stat(out, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    snprintf(msg, msglen, "%s is the input: not written over", out);
    return CLI_FAILED;
  }
  FILE *f = fopen(out, "wb");
  int ok = f && fwrite(resp->body, 1, resp->len, f) == resp->len;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) snprintf(msg, msglen, "%s: %s", out, strerror(errno));
  return ok ? CLI_OK : CLI_FAILED;
}

/* The parameters alone, as the api checks them before it looks for an image: an error there is
 * the same for every file, so it is bad usage. Returns CLI_OK, or CLI_USAGE after saying what is
 * wrong. */
static enum cli_status check_params(struct cli *c) {
  static const enum err usage_errors[] = {ERR_BAD_PARAMETER, ERR_MISSING_PARAMETER,
                                          ERR_UNKNOWN_PARAMETER, ERR_UNKNOWN_METHOD};
  struct api_response *resp = handle(c, NULL, 0);
  json_t *body = resp ? json_loadb((const char *)resp->body, resp->len, 0, NULL) : NULL;
  json_t *err = json_object_get(body, "error");
  const char *code = json_string_value(json_object_get(err, "code"));
  enum cli_status rc = CLI_OK;
  for (size_t i = 0; code && i < sizeof(usage_errors) / sizeof(usage_errors[0]); i++)
    if (strcmp(code, err_code(usage_errors[i])) == 0)
      rc = bad_usage(json_string_value(json_object_get(err, "message")), NULL);
  json_decref(body);
  api_response_free(resp);
  return rc;
}

/* Processes file i. Returns CLI_OK when its output is written, CLI_FAILED when it failed (named
 * on stderr). */
static enum cli_status run_file(struct cli *c, int i, const char *fixed_out) {
  const char *in = c->files[i];
  char msg[512] = "", *out = NULL;
  double t0 = api_now_ms();
  struct api_response *resp = request(c, in, msg, sizeof(msg));
  int status = resp ? resp->status : 0;
  enum cli_status rc = status == 200 ? CLI_OK : CLI_FAILED;
  json_t *err = NULL, *body = NULL;
  if (status == 200) {
    out = fixed_out ? strdup(fixed_out) : output_path(c->outdir, in, resp->content_type);
    rc = out ? write_output(in, out, resp, msg, sizeof(msg)) : CLI_FAILED;
  } else if (resp) {
    body = json_loadb((const char *)resp->body, resp->len, 0, NULL);
    err = json_object_get(body, "error");
    snprintf(msg, sizeof(msg), "%s", json_string_value(json_object_get(err, "message")));
  }
  if (rc != CLI_OK) fprintf(stderr, "%sblurd: %s: %s\n", c->progress ? "\r\033[K" : "", in, msg);
  if (c->progress)
    fprintf(stderr, "\r\033[K[%d/%d] %s %.0f ms", i + 1, c->nfiles,
            strrchr(in, '/') ? strrchr(in, '/') + 1 : in, api_now_ms() - t0);
  if (c->json) {
    json_t *o = json_pack("{s:s, s:s?, s:o}", "file", in, "output", rc != CLI_OK ? NULL : out,
                          "status", resp ? json_integer(status) : json_null());
    const char *psnr = header(resp, "X-PSNR");
    json_object_set_new(o, "timing_ms", timing(header(resp, "Server-Timing")));
    if (psnr)
      json_object_set_new(o, "psnr_db",
                          strcmp(psnr, "inf") ? json_real(strtod(psnr, NULL)) : json_null());
    if (header(resp, "X-Method"))
      json_object_set_new(o, "method", json_string(header(resp, "X-Method")));
    if (header(resp, "X-Backend"))
      json_object_set_new(o, "backend", json_string(header(resp, "X-Backend")));
    if (rc != CLI_OK)
      json_object_set_new(o, "error",
                          err && status != 200 ? json_deep_copy(err)
                                               : json_pack("{s:s}", "message", msg));
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    if (text) printf("%s\n", text);
    fflush(stdout);
    free(text);
    json_decref(o);
  }
  json_decref(body);
  api_response_free(resp);
  free(out);
  return rc;
}

enum cli_status cli_main(const struct api_config *cfg, int argc, char **argv) {
  struct cli c = {0};
  const char *out = NULL;
  char err[256];
  enum cli_status rc = cli_is_endpoint(argv[0])
                           ? parse(&c, argc, argv, &out)
                           : bad_usage("unknown endpoint or argument ", argv[0]);
  int run = rc == CLI_OK && !c.help;
  if (run && c.outdir && mkdir(c.outdir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "blurd: -o %s: %s\n", c.outdir, strerror(errno));
    rc = CLI_FAILED;
  }
  if (run && rc == CLI_OK && !(c.api = api_new(cfg, err, sizeof(err)))) {
    fprintf(stderr, "blurd: %s\n", err);
    rc = CLI_FAILED;
  }
  if (run && rc == CLI_OK) rc = check_params(&c);
  c.max_body = cfg->max_body;
  c.progress = c.nfiles > 1 && isatty(2);
  enum cli_status files = CLI_OK; /* a failed file does not stop the others */
  for (int i = 0; run && rc == CLI_OK && i < c.nfiles; i++)
    if (run_file(&c, i, out) != CLI_OK) files = CLI_FAILED;
  if (c.progress) fprintf(stderr, "\n");
  api_free(c.api);
  for (int i = 0; i < c.nfiles; i++) free(c.files[i]);
  free(c.files);
  free(c.uri);
  return rc != CLI_OK ? rc : files;
}

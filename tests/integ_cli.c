/* Integration tests of the command-line mode against the real binary: a batch with a corrupt
 * file (exit 1, the others written, the bad one named with its reason, one JSON object per
 * file), an input directory, the outputs byte for byte against the HTTP API's for the same
 * parameters, and bad usage (exit 2). */
#include "harness.h"
#include "../base/version.h"
#include "test.h"

#include "../codecs/codecs.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/blurd-cli-XXXXXX"; /* the inputs in dir/in, outputs beside */

struct run {
  int status;      /* exit status */
  char *out, *err; /* stdout and stderr, NUL-terminated, owned */
};

/* The bytes of path (NUL-terminated), or NULL when it cannot be read. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *p = NULL;
  size_t n = 0, cap = 0;
  while (f && !feof(f)) {
    if (n + 65536 + 1 > cap) p = realloc(p, cap = 2 * cap + 65536 + 1);
    ASSERT(p);
    n += fread(p + n, 1, 65536, f);
  }
  if (!f) return NULL;
  fclose(f);
  if (!p) p = calloc(1, 1);
  p[n] = 0;
  if (len) *len = n;
  return p;
}

static void spill(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  ASSERT(f && fwrite(data, 1, len, f) == len);
  ASSERT(fclose(f) == 0);
}

/* Runs blurd with args (NULL-terminated) and no terminal: its exit status, stdout and stderr. */
static struct run cli(const char *const *args) {
  const char *bin = getenv("BLURD_BIN") ? getenv("BLURD_BIN") : "build/blurd";
  const char *argv[64] = {bin};
  char out[64], err[64];
  int argc = 1, status = 0;
  for (int i = 0; args[i] && argc < 63; i++) argv[argc++] = args[i];
  argv[argc] = NULL;
  snprintf(out, sizeof(out), "%s/stdout", dir);
  snprintf(err, sizeof(err), "%s/stderr", dir);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  ASSERT(waitpid(pid, &status, 0) == pid);
  ASSERT(WIFEXITED(status));
  struct run r = {WEXITSTATUS(status), slurp(out, NULL), slurp(err, NULL)};
  ASSERT(r.out && r.err);
  return r;
}

static void run_free(struct run *r) {
  free(r->out);
  free(r->err);
}

static const char *path_in(const char *sub, const char *name) {
  static char p[16][256]; /* a ring: several in one call */
  static int k;
  char *s = p[k++ % 16];
  snprintf(s, sizeof(p[0]), "%s/%s%s%s", dir, sub, *name ? "/" : "", name);
  return s;
}

/* Fails unless path holds an image of this format. */
static void expect_image(const char *path, enum codec_format format) {
  size_t len;
  char *data = slurp(path, &len), msg[256];
  struct codec_image img;
  if (!data) TEST_FAIL("%s was not written", path);
  if (codec_decode((const uint8_t *)data, len, &(struct codec_limits){0, 0, 0}, &img, msg,
                   sizeof(msg)) != CODEC_OK)
    TEST_FAIL("%s is not an image: %s", path, msg);
  ASSERT_INT(img.format, ==, format);
  codec_image_free(&img);
  free(data);
}

static void expect_backend(const char *got) {
  const char *want = getenv("BLURD_EXPECT_BACKEND") ? getenv("BLURD_EXPECT_BACKEND") : "cpu";
  if (!got || strncmp(got, want, strlen(want)) != 0)
    TEST_FAIL("backend '%s', expected '%s'", got ? got : "(none)", want);
}

/* Three files, one of them corrupt, with --json: exit 1, the two good ones written, the bad one
 * named on stderr with the API's message, one JSON object per file on stdout. */
static void test_batch(void) {
  const char *out = path_in("out", "");
  struct run r = cli((const char *[]){"blur", "--sigma", "3", "--json", "-o", out,
                                      path_in("in", "photo_1080p.jpg"), path_in("in", "camera.png"),
                                      path_in("in", "truncated.jpg"), NULL});
  ASSERT_INT(r.status, ==, 1);
  expect_image(path_in("out", "photo_1080p.jpg"), CODEC_JPEG); /* format: the input's */
  expect_image(path_in("out", "camera.png"), CODEC_PNG);
  ASSERT(access(path_in("out", "truncated.jpg"), F_OK) != 0);
  json_t *j[3];
  char *line = r.out;
  for (int i = 0; i < 3; i++) {
    char *nl = strchr(line, '\n');
    ASSERT(nl);
    *nl = 0;
    j[i] = json_loads(line, 0, NULL);
    if (!j[i]) TEST_FAIL("not a JSON object: %s", line);
    line = nl + 1;
  }
  ASSERT_STR(line, "");
  for (int i = 0; i < 2; i++) {
    ASSERT_INT(json_integer_value(json_object_get(j[i], "status")), ==, 200);
    ASSERT_STR(json_string_value(json_object_get(j[i], "output")),
               path_in("out", i ? "camera.png" : "photo_1080p.jpg"));
    json_t *t = json_object_get(j[i], "timing_ms");
    ASSERT(json_number_value(json_object_get(t, "decode")) > 0);
    ASSERT(json_number_value(json_object_get(t, "total")) > 0);
    ASSERT(json_number_value(json_object_get(j[i], "psnr_db")) > 40);
    ASSERT(json_string_value(json_object_get(j[i], "method")));
    expect_backend(json_string_value(json_object_get(j[i], "backend")));
  }
  ASSERT_STR(json_string_value(json_object_get(j[2], "file")), path_in("in", "truncated.jpg"));
  ASSERT(json_is_null(json_object_get(j[2], "output")));
  ASSERT_INT(json_integer_value(json_object_get(j[2], "status")), ==, 422);
  json_t *err = json_object_get(j[2], "error");
  ASSERT_STR(json_string_value(json_object_get(err, "code")), "undecodable_image");
  char want[700];
  snprintf(want, sizeof(want), "blurd: %s: %s\n", path_in("in", "truncated.jpg"),
           json_string_value(json_object_get(err, "message")));
  if (!strstr(r.err, want)) TEST_FAIL("stderr lacks '%s':\n%s", want, r.err);
  ASSERT(!strstr(r.err, "camera.png") && !strstr(r.err, "photo_1080p"));
  for (int i = 0; i < 3; i++) json_decref(j[i]);
  run_free(&r);

  /* an input directory: its files, named after the inputs with the output format's extension */
  r = cli(
      (const char *[]){"convert", "--format", "png", path_in("in", ""), path_in("dir", ""), NULL});
  ASSERT_INT(r.status, ==, 1);
  expect_image(path_in("dir", "photo_1080p.png"), CODEC_PNG);
  expect_image(path_in("dir", "camera.png"), CODEC_PNG);
  expect_image(path_in("dir", "lossy.png"), CODEC_PNG);
  ASSERT(strstr(r.err, "truncated.jpg: "));
  ASSERT_STR(r.out, "");
  run_free(&r);
}

/* The CLI's output, byte for byte, against the HTTP API's answer to the same query. */
static void expect_same(struct server *srv, const char *name, const char *ctype, const char *query,
                        const char *const *args, const char *output) {
  size_t len, clen;
  uint8_t *img = fixture(name, &len);
  char path[256];
  struct http_resp h;
  snprintf(path, sizeof(path), "/blur?%s", query);
  ASSERT(http_request(srv, "POST", path, ctype, NULL, img, len, &h) == 0);
  ASSERT_INT(h.status, ==, 200);
  struct run r = cli(args);
  if (r.status != 0) TEST_FAIL("blurd %s %s: exit %d: %s", args[0], name, r.status, r.err);
  char *mine = slurp(output, &clen);
  ASSERT(mine);
  ASSERT_INT(clen, ==, h.len);
  if (memcmp(mine, h.body, clen) != 0) TEST_FAIL("%s: the CLI's bytes differ from the API's", name);
  free(mine);
  run_free(&r);
  http_resp_free(&h);
  free(img);
}

static void test_same_bytes(void) {
  struct server srv;
  server_start(&srv, NULL);
  const char *same = path_in("same", "");
  expect_same(
      &srv, "camera.png", "image/png", "sigma=3",
      (const char *[]){"blur", "--sigma", "3", "-o", same, path_in("in", "camera.png"), NULL},
      path_in("same", "camera.png"));
  expect_same(&srv, "photo_1080p.jpg", "image/jpeg", "sigma=3&format=png",
              (const char *[]){"blur", "--sigma=3", "--format", "png", "-o", same,
                               path_in("in", "photo_1080p.jpg"), NULL},
              path_in("same", "photo_1080p.png"));
  /* IN OUT: OUT's extension picks the format */
  expect_same(&srv, "photo_1080p.jpg", "image/jpeg", "sigma=3&format=png",
              (const char *[]){"blur", "--sigma", "3", path_in("in", "photo_1080p.jpg"),
                               path_in("same", "one.png"), NULL},
              path_in("same", "one.png"));
  /* WebP: a WebP input keeps its format and extension in a directory; .webp picks WebP */
  expect_same(
      &srv, "lossy.webp", "image/webp", "sigma=3",
      (const char *[]){"blur", "--sigma", "3", "-o", same, path_in("in", "lossy.webp"), NULL},
      path_in("same", "lossy.webp"));
  expect_same(&srv, "camera.png", "image/png", "sigma=3&format=webp",
              (const char *[]){"blur", "--sigma", "3", path_in("in", "camera.png"),
                               path_in("same", "camera.webp"), NULL},
              path_in("same", "camera.webp"));
  expect_image(path_in("same", "camera.webp"), CODEC_WEBP);
  ASSERT_INT(server_stop(&srv, SIGTERM), ==, 0);
}

static void expect_usage(const char *const *args) {
  struct run r = cli(args);
  if (r.status != 2) TEST_FAIL("blurd %s ...: exit %d, expected 2: %s", args[0], r.status, r.err);
  ASSERT(strstr(r.err, "blurd: "));
  ASSERT(strstr(r.err, "--help"));
  run_free(&r);
}

static void test_usage(void) {
  const char *in = path_in("in", "camera.png"), *out = path_in("bad", "x.png");
  expect_usage((const char *[]){"blurx", "--sigma", "3", in, out, NULL});
  expect_usage((const char *[]){"blur", "--sigma", "3", "-x", in, out, NULL});
  expect_usage((const char *[]){"blur", "--sigma", "abc", in, out, NULL});
  expect_usage((const char *[]){"blur", "--sigma", "3", "--bogus", "1", in, out, NULL});
  expect_usage((const char *[]){"blur", in, out, NULL}); /* sigma is required */
  expect_usage((const char *[]){"blur", "--sigma", "3", in, NULL});
  expect_usage((const char *[]){"blur", "--sigma", "3", "--workers", "x", in, out, NULL});
  expect_usage((const char *[]){"blur", "--sigma", NULL});
  ASSERT(access(out, F_OK) != 0);
  struct run r = cli((const char *[]){"blur", "--help", NULL});
  ASSERT_INT(r.status, ==, 0);
  ASSERT(strstr(r.out, "usage: blurd ENDPOINT"));
  run_free(&r);
  r = cli((const char *[]){"--help", NULL});
  ASSERT_INT(r.status, ==, 0);
  ASSERT(strstr(r.out, "blurd ENDPOINT"));
  ASSERT(strstr(r.out, "--version"));
  run_free(&r);
  r = cli((const char *[]){"--version", NULL});
  ASSERT_INT(r.status, ==, 0);
  ASSERT(strncmp(r.out, "blurd " BLURD_VERSION " (backends cpu", 16 + strlen(BLURD_VERSION)) == 0);
  run_free(&r);
}

/* The command line has no cost budget unless --max-cost (or BLURD_MAX_COST) sets one: welford at
 * radius 16 on camera.png is estimated at about 1.2 s of one core, refused under --max-cost 1
 * (exit 1, the API's 422 too_expensive in --json) and run without it. */
static void test_budget(void) {
  const char *in = path_in("in", "camera.png"), *out = path_in("budget", "v.png");
  ASSERT(mkdir(path_in("budget", ""), 0755) == 0);
  struct run r = cli((const char *[]){"variance", "--method", "welford", "--radius", "16",
                                      "--max-cost", "1", "--json", in, out, NULL});
  ASSERT_INT(r.status, ==, 1);
  ASSERT(strstr(r.out, "\"status\":422") && strstr(r.out, "\"code\":\"too_expensive\""));
  ASSERT(access(out, F_OK) != 0);
  run_free(&r);
  r = cli((const char *[]){"variance", "--method", "welford", "--radius", "16", in, out, NULL});
  if (r.status != 0) TEST_FAIL("without --max-cost: exit %d: %s", r.status, r.err);
  expect_image(out, CODEC_PNG);
  run_free(&r);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  ASSERT(mkdtemp(dir));
  ASSERT(mkdir(path_in("in", ""), 0755) == 0);
  const char *names[] = {"photo_1080p.jpg", "camera.png", "truncated.jpg", "lossy.webp"};
  for (int i = 0; i < 4; i++) {
    size_t len;
    uint8_t *data = fixture(names[i], &len);
    spill(path_in("in", names[i]), data, len);
    free(data);
  }
  RUN(test_batch);
  RUN(test_same_bytes);
  RUN(test_usage);
  RUN(test_budget);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  ASSERT(system(cmd) == 0);
  curl_global_cleanup();
  fprintf(stderr, "integ_cli: all passed\n");
  return 0;
}

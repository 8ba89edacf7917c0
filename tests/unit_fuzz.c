/* unit_fuzz: replays every file of the fuzz corpora (fuzz/corpus/<target>/) and of the crashes
 * found by fuzzing (fuzz/regressions/<target>/) through the fuzz targets' own code, so a crash
 * that was fixed stays fixed and the seeds keep reaching what they were made for. The targets'
 * files are included here with FUZZ_NO_MAIN: each defines fuzz_<target>() without the libFuzzer
 * entry, and checks its own contracts (it aborts on a broken one). On top of that, each target's
 * files must include inputs it accepts and inputs it rejects, and the handler must answer every
 * request with a status in 200..599; and the process must stay under 1 GiB of memory (peak RSS;
 * $BLURD_FUZZ_MAX_RSS_MB), since an upload that makes a decoder allocate gigabytes is a
 * denial of service even when it ends in a clean error. Files come from $BLURD_FUZZ_DIR, or
 * fuzz/ when run from the repository root. See fuzz/README.md. */
#define FUZZ_NO_MAIN
#include "../fuzz/framing.c"
#include "../fuzz/gif.c"
#include "../fuzz/handler.c"
#include "../fuzz/heif.c"
#include "../fuzz/jpeg.c"
#include "../fuzz/jxl.c"
#include "../fuzz/multipart.c"
#include "../fuzz/params.c"
#include "../fuzz/png.c"
#include "../fuzz/tiff.c"
#include "../fuzz/webp.c"

#include "test.h"

#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

struct target {
  const char *name;
  int (*run)(const uint8_t *data, size_t size);
  int accepted;        /* what run returns for an input that went all the way through */
  const char *formats; /* the formats of the table (codecs/formats.c) whose decoder it covers */
};

static const struct target targets[] = {
    {"png", fuzz_png, CODEC_OK, "png"},    {"jpeg", fuzz_jpeg, CODEC_OK, "jpeg"},
    {"webp", fuzz_webp, CODEC_OK, "webp"}, {"heif", fuzz_heif, CODEC_OK, "heic avif"},
    {"jxl", fuzz_jxl, CODEC_OK, "jxl"},    {"tiff", fuzz_tiff, CODEC_OK, "tiff"},
    {"gif", fuzz_gif, CODEC_OK, "gif"},    {"multipart", fuzz_multipart, ERR_OK, ""},
    {"params", fuzz_params, ERR_OK, ""},   {"handler", fuzz_handler, 200, ""},
    {"framing", fuzz_framing, ERR_OK, ""},
};

struct tally {
  int files, accepted, rejected, skipped;
};

static const char *replaying; /* the file being replayed, named when a check aborts */

static void on_abort(int sig) {
  if (replaying) fprintf(stderr, "unit_fuzz: aborted while replaying %s\n", replaying);
  signal(sig, SIG_DFL);
  raise(sig);
}

static const char *fuzz_dir(void) {
  const char *dir = getenv("BLURD_FUZZ_DIR");
  return dir && *dir ? dir : "fuzz";
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) TEST_FAIL("cannot open %s", path);
  ASSERT(fseek(f, 0, SEEK_END) == 0);
  long n = ftell(f);
  ASSERT(n >= 0 && fseek(f, 0, SEEK_SET) == 0);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1); /* exactly n bytes: ASan sees any overread */
  ASSERT(buf != NULL);
  ASSERT_INT(fread(buf, 1, (size_t)n, f), ==, n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static int visible(const struct dirent *e) {
  return e->d_name[0] != '.'; /* skips ., .. and .gitkeep */
}

/* Runs every regular file of dir through t, in name order. Returns the number of files, or -1
 * when dir does not exist. */
static int replay_dir(const struct target *t, const char *dir, struct tally *n) {
  struct dirent **names;
  int count = scandir(dir, &names, visible, alphasort);
  if (count < 0) return -1;
  int files = 0;
  for (int i = 0; i < count; i++) {
    char path[1024];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
    free(names[i]);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    size_t len;
    uint8_t *data = read_file(path, &len);
    replaying = path;
    int r = t->run(data, len);
    replaying = NULL;
    free(data);
    if (strcmp(t->name, "handler") == 0 && (r < 200 || r > 599))
      TEST_FAIL("%s: status %d is not an HTTP status", path, r);
    files++;
    if (r < 0)
      n->skipped++;
    else if (r == t->accepted)
      n->accepted++;
    else
      n->rejected++;
  }
  free(names);
  n->files += files;
  return files;
}

static void replay(const struct target *t) {
  char corpus[512], regressions[512];
  struct tally n = {0, 0, 0, 0};
  snprintf(corpus, sizeof(corpus), "%s/corpus/%s", fuzz_dir(), t->name);
  snprintf(regressions, sizeof(regressions), "%s/regressions/%s", fuzz_dir(), t->name);
  int seeds = replay_dir(t, corpus, &n);
  if (seeds < 0) TEST_FAIL("no %s (run from the repository root or set BLURD_FUZZ_DIR)", corpus);
  int crashes = replay_dir(t, regressions, &n);
  if (crashes < 0) crashes = 0; /* no regressions folder */
  fprintf(stderr, "    %-9s %3d seeds, %2d regressions: %3d accepted, %3d rejected, %d skipped\n",
          t->name, seeds, crashes, n.accepted, n.rejected, n.skipped);
  ASSERT_INT(seeds, >=, 3);
  ASSERT_INT(n.accepted, >=, 1);      /* the seeds reach the end of the target's path... */
  ASSERT_INT(n.rejected, >=, 1);      /* ...and its error paths */
  ASSERT_INT(n.skipped, <=, crashes); /* every seed has the right magic */
  struct rusage ru;
  const char *max = getenv("BLURD_FUZZ_MAX_RSS_MB");
  long peak_rss_mb, max_rss_mb = max && *max ? atol(max) : 1024;
  ASSERT(getrusage(RUSAGE_SELF, &ru) == 0);
  peak_rss_mb = ru.ru_maxrss / 1024; /* ru_maxrss is in KiB */
  ASSERT_INT(peak_rss_mb, <=, max_rss_mb);
}

static void test_replay(void) {
  signal(SIGABRT, on_abort);
  for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) replay(&targets[i]);
  fuzz_handler_free();
}

/* Whether word is in list, between characters that are not letters or digits. */
static int has_word(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
    if ((p == list || !isalnum((unsigned char)p[-1])) && !isalnum((unsigned char)p[n])) return 1;
  return 0;
}

/* Every format the table reads from uploads (it has a sniff and a decoder) has a fuzz target,
 * and fuzz/run.sh runs every target: adding a format without a target fails here. */
static void test_every_format_fuzzed(void) {
  char path[512], line[1024] = "";
  for (int f = CODEC_NONE + 1; f < CODEC_NFORMATS; f++) {
    const struct codec_format_desc *d = codec_format((enum codec_format)f);
    if (!d->sniff || !d->decode) continue;
    int covered = 0;
    for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++)
      covered |= has_word(targets[i].formats, d->name);
    if (!covered) TEST_FAIL("format %s has no fuzz target in fuzz/ (tests/unit_fuzz.c)", d->name);
  }
  snprintf(path, sizeof(path), "%s/run.sh", fuzz_dir());
  FILE *run = fopen(path, "r");
  if (!run) TEST_FAIL("cannot open %s", path);
  while (fgets(line, sizeof(line), run) && strncmp(line, "TARGETS=", 8) != 0) continue;
  fclose(run);
  ASSERT(strncmp(line, "TARGETS=", 8) == 0);
  for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++)
    if (!has_word(strchr(line, '-') + 1, targets[i].name))
      TEST_FAIL("fuzz/run.sh's TARGETS lacks %s: %s", targets[i].name, line);
}

int main(void) {
  RUN(test_every_format_fuzzed);
  RUN(test_replay);
  fprintf(stderr, "unit_fuzz: all passed\n");
  return 0;
}

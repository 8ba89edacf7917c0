/* unit_format_names: the codecs' format table (codecs/formats.c) is the one place that names a
 * format. Reads the C sources of the folders above codecs/ (api/, http/, server/, engine/, base/,
 * cpu/) and fails on a string literal, outside comments, that holds a format's media type, is a
 * format's file extension ("jpg", ".jpg"), or is a format's name or starts a key with it ("jpeg",
 * "jpeg_decode"), application/octet-stream aside. gpu/ is left out: it holds the GPU's JPEG and
 * WebP codecs. Prose that names a format by its title ("a JPEG upload") is not a list and is
 * allowed. Run from the repository root, as make test does. */
#include "../codecs/codecs.h"
#include "test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *const folders[] = {"api", "api/ops", "http", "server", "engine", "base", "cpu"};

/* Whether lit (a string literal's text, without quotes) names format d as a list would. */
static const char *names_format(const char *lit, const struct codec_format_desc *d) {
  size_t n = strlen(d->name);
  /* application/octet-stream is RFC 2046's type of any bytes, which raw samples borrow */
  if (strcasestr(lit, d->mime) && strcmp(d->mime, "application/octet-stream") != 0) return d->mime;
  if (strcmp(lit, d->name) == 0 || (strncmp(lit, d->name, n) == 0 && lit[n] == '_')) return d->name;
  const char *lists[] = {d->exts, d->mimes};
  for (int l = 0; l < 2; l++) {
    for (const char *w = lists[l]; w && *w; w += strspn(w, " ")) {
      size_t k = strcspn(w, " ");
      if (l == 1 && strncasecmp(lit, w, k) == 0) return d->mimes; /* "image/jpg..." */
      const char *e = lit[0] == '.' ? lit + 1 : lit;
      if (l == 0 && strlen(e) == k && strncasecmp(e, w, k) == 0) return d->exts;
      w += k;
    }
  }
  return NULL;
}

/* Checks every string literal of the C file path; returns the number of offending ones. */
static int scan(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) TEST_FAIL("cannot open %s", path);
  static char src[1 << 20];
  size_t len = fread(src, 1, sizeof(src) - 1, f);
  fclose(f);
  src[len] = 0;
  int bad = 0, line = 1;
  for (size_t i = 0; i < len; i++) {
    if (src[i] == '\n') line++;
    if (src[i] == '/' && src[i + 1] == '*') {
      for (i += 2; i + 1 < len && !(src[i] == '*' && src[i + 1] == '/'); i++)
        line += src[i] == '\n';
      i++;
    } else if (src[i] == '/' && src[i + 1] == '/') {
      while (i + 1 < len && src[i + 1] != '\n') i++;
    } else if (src[i] == '\'') {
      for (i++; i < len && src[i] != '\''; i++) i += src[i] == '\\';
    } else if (src[i] == '"') {
      char lit[512];
      size_t k = 0;
      for (i++; i < len && src[i] != '"'; i++) {
        if (src[i] == '\\') i++;
        if (k + 1 < sizeof(lit)) lit[k++] = src[i];
      }
      lit[k] = 0;
      for (int fmt = CODEC_NONE + 1; fmt < CODEC_NFORMATS; fmt++) {
        const char *hit = names_format(lit, codec_format((enum codec_format)fmt));
        if (hit) {
          fprintf(stderr, "%s:%d: \"%s\" names a format (%s): read it from the format table\n",
                  path, line, lit, hit);
          bad++;
        }
      }
    }
  }
  return bad;
}

static int c_source(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 2 && e->d_name[n - 2] == '.' && (e->d_name[n - 1] == 'c' || e->d_name[n - 1] == 'h');
}

static void test_no_format_outside_codecs(void) {
  int files = 0, bad = 0;
  for (size_t i = 0; i < sizeof(folders) / sizeof(folders[0]); i++) {
    struct dirent **names;
    int count = scandir(folders[i], &names, c_source, alphasort);
    if (count < 0) TEST_FAIL("no %s/ (run from the repository root)", folders[i]);
    for (int j = 0; j < count; j++) {
      char path[512];
      snprintf(path, sizeof(path), "%s/%s", folders[i], names[j]->d_name);
      bad += scan(path);
      files++;
      free(names[j]);
    }
    free(names);
  }
  fprintf(stderr, "    %d files read, %d literals name a format\n", files, bad);
  ASSERT_INT(files, >=, 40);
  ASSERT_INT(bad, ==, 0);
}

/* The scanner finds each kind of literal it looks for, and none in comments. */
static void test_scanner_finds(void) {
  const struct codec_format_desc *jpeg = codec_format(CODEC_JPEG), *png = codec_format(CODEC_PNG);
  ASSERT(names_format("image/jpeg", jpeg) != NULL);
  ASSERT(names_format("send image/png or", png) != NULL);
  ASSERT(names_format("image/jpg", jpeg) != NULL);
  ASSERT(names_format("jpg", jpeg) != NULL);
  ASSERT(names_format(".JPG", jpeg) != NULL);
  ASSERT(names_format("jpeg_decode", jpeg) != NULL);
  ASSERT(names_format("png", png) != NULL);
  ASSERT(names_format("a JPEG upload", jpeg) == NULL);
  ASSERT(names_format("pngs", png) == NULL);
  ASSERT(names_format("input", png) == NULL);
  char tmp[] = "/tmp/unit_format_names_XXXXXX.c";
  int fd = mkstemps(tmp, 2);
  ASSERT(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("/* \"image/png\" */ // \"jpg\"\nconst char *a = \"image/webp\", b = '\"';\n"
        "const char *c = \"gif\";\n",
        f);
  fclose(f);
  ASSERT_INT(scan(tmp), ==, 2);
  unlink(tmp);
}

int main(void) {
  RUN(test_scanner_finds);
  RUN(test_no_format_outside_codecs);
  fprintf(stderr, "unit_format_names: all passed\n");
  return 0;
}

/* Keeps docs/api.md true, as integ_openapi keeps /openapi.json true: the committed file must be
 * exactly what api_reference_markdown() builds from the route, parameter and error tables, so a
 * new route, parameter or error code fails `make test` until `make docs` is run. Also checks that
 * the generated text names every route, every parameter of every endpoint and every error code.
 * Run from the project root; BLURD_API_MD names another file to check (default docs/api.md). */
#include "test.h"

#include "../api/api_int.h"

static char *generated; /* api_reference_markdown(), built once */

/* The whole file at path as a string, or NULL. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  char *text = NULL;
  size_t len = 0, cap = 0, n;
  char buf[65536];
  if (!f) return NULL;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
    if (len + n + 1 > cap) {
      cap = 2 * (len + n + 1);
      char *t = realloc(text, cap);
      if (!t) break;
      text = t;
    }
    memcpy(text + len, buf, n);
    len += n;
  }
  if (text) text[len] = 0;
  if (!text && !ferror(f)) text = calloc(1, 1); /* an empty file */
  fclose(f);
  return text;
}

/* The line of text that starts at line number line (1, 2, ...), up to 160 characters. */
static void line_of(const char *text, int line, char *out, size_t cap) {
  for (int l = 1; l < line && text; l++) text = (text = strchr(text, '\n')) ? text + 1 : NULL;
  size_t n = text ? strcspn(text, "\n") : 0;
  snprintf(out, cap, "%.*s", (int)(n < 160 ? n : 160), text ? text : "(end of file)");
}

static void test_current(void) {
  const char *path = getenv("BLURD_API_MD") ? getenv("BLURD_API_MD") : "docs/api.md";
  char *have = read_text(path);
  if (!have) TEST_FAIL("cannot read %s (run from the project root, or run `make docs`)", path);
  if (strcmp(have, generated) != 0) {
    int line = 1;
    for (size_t i = 0; have[i] && have[i] == generated[i]; i++) line += have[i] == '\n';
    char a[200], b[200];
    line_of(have, line, a, sizeof(a));
    line_of(generated, line, b, sizeof(b));
    TEST_FAIL("%s is not what the tables generate; run `make docs`. First difference, line "
              "%d:\n  %s: %s\n  generated: %s",
              path, line, path, a, b);
  }
  free(have);
}

static void test_complete(void) {
  char want[256];
  const char *method;
  for (int i = 0; api_route(i, &method); i++) {
    const char *path = api_route(i, &method);
    snprintf(want, sizeof(want), "\n### `%s %s`\n", method, path);
    if (!strstr(generated, want)) TEST_FAIL("no heading for route %s %s", method, path);
  }
  for (int i = 0; api_ops[i]; i++) {
    const struct endpoint *ep = api_ops[i]->ep;
    for (int k = 0; k < ep->nparams; k++) {
      snprintf(want, sizeof(want), "\n| `%s` | ", ep->params[k].name);
      if (!strstr(generated, want)) TEST_FAIL("%s: no row for %s", ep->path, ep->params[k].name);
    }
  }
  static const struct {
    int status;
    const char *code;
  } errors[] = {
#define X(e, status, code, msg) {status, code},
      ERRORS(X)
#undef X
  };
  for (size_t e = 0; e < sizeof(errors) / sizeof(errors[0]); e++) {
    snprintf(want, sizeof(want), "\n| %d | `%s` | ", errors[e].status, errors[e].code);
    if (!strstr(generated, want)) TEST_FAIL("no row for error %s", errors[e].code);
  }
}

int main(void) {
  generated = api_reference_markdown();
  ASSERT(generated != NULL);
  RUN(test_complete);
  RUN(test_current);
  free(generated);
  fprintf(stderr, "unit_docs: all passed\n");
  return 0;
}

/* Rewrites a libFuzzer dictionary of fuzz/dict/ (params.dict, handler.dict) with the words of the
 * table of operations (api_ops): each image endpoint's path (handler.dict only), and each
 * parameter's name as a query key ("sigma=") and a JSON key ("\"sigma\":") with its enum choices.
 * The hand-written words above the marker line stay, less those the table gives; below it the
 * table's words are written anew. `make fuzz-dict` runs it on both files; tests/unit_fuzz.c
 * checks that the committed files are what it writes. */
#include "../api/api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARKER    "# ---- from the table of operations (make fuzz-dict); do not edit below ----\n"
#define WORDS_MAX 1024

struct words {
  char *w[WORDS_MAX];
  int n;
};

/* Adds the dictionary line of word ("word" with '"' and '\' escaped), once. */
static void add(struct words *ws, const char *fmt, const char *word) {
  char raw[160], line[340];
  size_t k = 0;
  snprintf(raw, sizeof(raw), fmt, word);
  line[k++] = '"';
  for (const char *c = raw; *c && k < sizeof(line) - 4; c++) {
    if (*c == '"' || *c == '\\') line[k++] = '\\';
    line[k++] = *c;
  }
  line[k++] = '"', line[k++] = '\n', line[k] = 0;
  for (int i = 0; i < ws->n; i++)
    if (strcmp(ws->w[i], line) == 0) return;
  if (ws->n < WORDS_MAX) ws->w[ws->n++] = strdup(line);
}

/* The table's words: paths when with_paths, then every parameter's keys and choices. */
static void table_words(struct words *ws, int with_paths) {
  for (int i = 0; api_ops[i]; i++) {
    const struct endpoint *ep = api_ops[i]->ep;
    if (with_paths) add(ws, "%s", ep->path), add(ws, "%s?", ep->path);
    for (int k = 0; k < ep->nparams; k++) {
      const struct param_spec *s = &ep->params[k];
      add(ws, "%s=", s->name);
      add(ws, "\"%s\":", s->name);
      for (int c = 0; s->choices && s->choices[c]; c++) add(ws, "%s", s->choices[c]);
    }
  }
}

static int is_word(const struct words *ws, const char *line) {
  for (int i = 0; i < ws->n; i++)
    if (strcmp(ws->w[i], line) == 0) return 1;
  return 0;
}

int main(int argc, char **argv) {
  struct words ws = {{0}, 0};
  char line[1024];
  if (argc != 2) {
    fprintf(stderr, "usage: fuzzdict fuzz/dict/NAME.dict (prints it with the table's words)\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "r");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  table_words(&ws, strstr(argv[1], "handler") != NULL);
  while (fgets(line, sizeof(line), f) && strcmp(line, MARKER) != 0)
    if (!is_word(&ws, line)) fputs(line, stdout); /* hand-written: kept unless the table has it */
  fclose(f);
  fputs(MARKER, stdout);
  for (int i = 0; i < ws.n; i++) fputs(ws.w[i], stdout), free(ws.w[i]);
  return fflush(stdout) == 0 ? 0 : 1;
}

/* Prints the HTTP API reference in Markdown to stdout: `make docs` writes it to docs/api.md, and
 * tests/unit_docs.c checks that the committed file is what it prints. */
#include "../api/api.h"

#include <stdio.h>
#include <stdlib.h>

int main(void) {
  char *md = api_reference_markdown();
  int ok = md && fputs(md, stdout) != EOF && fflush(stdout) == 0;
  free(md);
  if (!ok) fprintf(stderr, "apidoc: cannot write the reference\n");
  return ok ? 0 : 1;
}

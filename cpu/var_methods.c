/* The local-variance method table (CPU_VAR_METHODS in cpu.h): names, descriptions, and which
 * radii each method takes. It sits apart from the methods themselves so that variance.c (which
 * dispatches to var_merge.c) and var_merge.c (which checks its radius here) do not import each
 * other. */
#include "cpu.h"

#include <string.h>

static const char *const var_names[] = {
#define X(e, name, desc) name,
    CPU_VAR_METHODS(X)
#undef X
};

static const char *const var_descs[] = {
#define X(e, name, desc) desc,
    CPU_VAR_METHODS(X)
#undef X
};

const char *cpu_var_method_name(enum cpu_var_method m) {
  return (unsigned)m < CPU_VAR_NMETHODS ? var_names[m] : NULL;
}

const char *cpu_var_method_desc(enum cpu_var_method m) {
  return (unsigned)m < CPU_VAR_NMETHODS ? var_descs[m] : NULL;
}

enum err cpu_var_method_from_name(const char *name, enum cpu_var_method *m) {
  for (int k = 0; k < CPU_VAR_NMETHODS; k++)
    if (strcmp(name, var_names[k]) == 0) {
      *m = (enum cpu_var_method)k;
      return ERR_OK;
    }
  return ERR_BAD_PARAMETER;
}

int cpu_var_radius_ok(enum cpu_var_method m, int r) {
  if ((unsigned)m >= CPU_VAR_NMETHODS || r < 1 || r > CPU_VAR_RADIUS_MAX) return 0;
  return m != CPU_VAR_THREEWISE || ((r + 1) & r) == 0; /* r + 1 a power of two */
}

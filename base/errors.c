/* The table of base/errors.h as data: each error's HTTP status, code and sentence. */
#include "errors.h"

static const struct {
  int status;
  const char *code;
  const char *msg;
} errors[] = {{200, "ok", "OK."},
#define X(e, status, code, msg) {status, code, msg},
              ERRORS(X)
#undef X
};

#define NERRORS (sizeof(errors) / sizeof(errors[0]))

int err_status(enum err e) {
  return (unsigned)e < NERRORS ? errors[e].status : 500;
}

const char *err_code(enum err e) {
  return (unsigned)e < NERRORS ? errors[e].code : "internal_error";
}

const char *err_message(enum err e) {
  return (unsigned)e < NERRORS ? errors[e].msg : errors[ERR_INTERNAL].msg;
}

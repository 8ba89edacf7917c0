/* An LD_PRELOAD shim for tests/stress/stress.py: MHD_resume_connection returns only after
 * BLURD_RESUME_DELAY_US microseconds (default 20000). It widens the window in which the thread
 * that resumed a connection may still touch the request while libmicrohttpd's thread, seeing that
 * the client has gone, frees it (issue 34's crash): under valgrind a use of the freed request is
 * then reported at once instead of once in a long load. Build:
 *   cc -shared -fPIC -O2 -o resume_delay.so tests/stress/resume_delay.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

struct MHD_Connection;

void MHD_resume_connection(struct MHD_Connection *c) {
  static void (*real)(struct MHD_Connection *);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "MHD_resume_connection");
  real(c);
  const char *us = getenv("BLURD_RESUME_DELAY_US");
  long n = us ? atol(us) : 20000;
  nanosleep(&(struct timespec){n / 1000000, n % 1000000 * 1000}, NULL);
}

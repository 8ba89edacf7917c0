/* A tiny assertion header for the unit and integration tests (after libuv's test/task.h).
 * Every failing assertion prints the expression, the values and file:line, then aborts the
 * test program with a non-zero status, so `make test` stops at the first failure. */
#ifndef BLURD_TEST_H
#define BLURD_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_FAIL(...)                                                                             \
  do {                                                                                             \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                           \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    abort();                                                                                       \
  } while (0)

#define ASSERT(e)                                                                                  \
  do {                                                                                             \
    if (!(e)) TEST_FAIL("assertion failed: %s", #e);                                               \
  } while (0)

#define ASSERT_INT(a, op, b)                                                                       \
  do {                                                                                             \
    long long a_ = (long long)(a), b_ = (long long)(b);                                            \
    if (!(a_ op b_)) TEST_FAIL("%s %s %s (%lld %s %lld)", #a, #op, #b, a_, #op, b_);               \
  } while (0)

#define ASSERT_DBL(a, op, b)                                                                       \
  do {                                                                                             \
    double a_ = (double)(a), b_ = (double)(b);                                                     \
    if (!(a_ op b_)) TEST_FAIL("%s %s %s (%.9g %s %.9g)", #a, #op, #b, a_, #op, b_);               \
  } while (0)

#define ASSERT_NEAR(a, b, tol)                                                                     \
  do {                                                                                             \
    double a_ = (double)(a), b_ = (double)(b);                                                     \
    if (!(fabs(a_ - b_) <= (tol)))                                                                 \
      TEST_FAIL("|%s - %s| <= %s (%.9g vs %.9g)", #a, #b, #tol, a_, b_);                           \
  } while (0)

#define ASSERT_STR(a, b)                                                                           \
  do {                                                                                             \
    const char *a_ = (a), *b_ = (b);                                                               \
    if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                         \
      TEST_FAIL("%s == %s (\"%s\" vs \"%s\")", #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");    \
  } while (0)

#define RUN(test)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "  %s\n", #test);                                                              \
    test();                                                                                        \
  } while (0)

#endif

/* clock: the one clock of blurd's deadlines and stage times, CLOCK_MONOTONIC in milliseconds. */
#ifndef BLURD_CLOCK_H
#define BLURD_CLOCK_H

#include <time.h>

static inline double clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#endif

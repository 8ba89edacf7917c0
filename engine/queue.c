/* The engine's queue: a bounded ring of jobs that the workers (workers.c) take in order.
 * Submitting never blocks: a full queue says so at once. */
#include "engine_int.h"

int engine_stopping(struct engine *e) {
  pthread_mutex_lock(&e->mu);
  int stop = e->stop;
  pthread_mutex_unlock(&e->mu);
  return stop;
}

int engine_submit(struct engine *e, struct job *job) {
  pthread_mutex_lock(&e->mu);
  int ok = e->count < e->cap && !e->stop;
  if (ok) {
    job->t_queued = e->last_busy = clock_ms();
    e->ring[(e->head + e->count) % e->cap] = job;
    e->count++;
    pthread_cond_signal(&e->cv);
  }
  pthread_mutex_unlock(&e->mu);
  return ok ? 0 : -1;
}

int engine_workers_ready(struct engine *e) {
  pthread_mutex_lock(&e->mu);
  int n = e->made;
  pthread_mutex_unlock(&e->mu);
  return n;
}

int engine_warming(struct engine *e) {
  pthread_mutex_lock(&e->mu);
  int n = e->warming;
  pthread_mutex_unlock(&e->mu);
  return n;
}

void engine_stats(struct engine *e, int *queued, int *running, int *capacity, int *workers) {
  pthread_mutex_lock(&e->mu);
  *queued = e->count;
  *running = e->running;
  *capacity = e->cap;
  *workers = e->nworkers - e->failed;
  pthread_mutex_unlock(&e->mu);
}

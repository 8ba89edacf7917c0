/* The engine's workers: threads that each make their own state from the backend's verbs, warm
 * up (warm.c), then run the queue's jobs. The first FIRST_WORKERS workers of the first device
 * (every worker of the host backend) start at once, and until they have, the engine is warming
 * (/readyz says so); the others then start one at a time on each device while the first ones
 * serve, each when the server is idle or wants more workers (later_moment). */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The workers of the first device that warm before the engine is ready: the others follow, one
 * at a time a device. */
#define FIRST_WORKERS 4

int engine_first_worker(const struct engine *e, int i) {
  return e->ndev == 0 || (i % e->ndev == 0 && i / e->ndev < FIRST_WORKERS);
}

/* Makes device dev ready for its workers (ops->device_start), once; under dev_mu[dev]. Returns 0,
 * or -1 when it cannot start (said once on stderr). */
static int device_start(struct engine *e, int dev) {
  char why[256];
  if (e->dev_failed[dev]) return -1;
  int rc = e->ops->device_start ? e->ops->device_start(e->shared, dev, why, sizeof(why)) : 0;
  if (rc > 0) __atomic_store_n(&e->dev_open[dev], 1, __ATOMIC_RELEASE);
  if (rc >= 0) return 0;
  e->dev_failed[dev] = 1;
  fprintf(stderr, "blurd: %s:%d takes no jobs: %s\n", e->ops->kind, dev, why);
  return -1;
}

/* Makes the worker's state (a GPU context and codec states: the slow part of the start), then
 * warms it up. Every worker does this on its own thread, all at once, so that the start takes
 * about one worker's time rather than the sum of them. Returns 0, or -1 when the state could not
 * be made (said on stderr) or the engine is stopping. */
static int worker_start(struct engine *e, struct worker *w) {
  char err[256] = "";
  void *state = NULL;
  double t0 = clock_ms();
  if (engine_stopping(e)) return -1;
  if (e->ops->worker_new(e->shared, w->index, &state, err, sizeof(err)) != 0) {
    fprintf(stderr, "blurd: worker %d does not start: %s\n", w->index, err[0] ? err : "no memory");
    return -1;
  }
  __atomic_store_n(&w->state, state, __ATOMIC_RELEASE); /* /metrics reads it */
  if (e->ndev) __atomic_store_n(&e->dev_open[w->index % e->ndev], 1, __ATOMIC_RELEASE);
  double t1 = clock_ms();
  engine_warm_up(e, w);
  double t2 = clock_ms();
  pthread_mutex_lock(&e->mu);
  e->slowest[0] = t1 - t0 > e->slowest[0] ? t1 - t0 : e->slowest[0];
  e->slowest[1] = t2 - t1 > e->slowest[1] ? t2 - t1 : e->slowest[1];
  pthread_mutex_unlock(&e->mu);
  return 0;
}

/* A later worker's start stalls its device's requests in flight for a while (its codec states and
 * first allocations: docs/engineering-notes.md), so it waits for a moment when that
 * stalls none (the server idle for LATER_IDLE_MS) or when more workers are wanted anyway (a job
 * waited LATER_WAIT_MS in the queue). An idle server makes them all one after another at once; a
 * server with a few clients keeps its first workers and its first requests' times. Under mu;
 * returns with it held. */
#define LATER_IDLE_MS 100
#define LATER_WAIT_MS 10
static void later_moment(struct engine *e) {
  for (;;) {
    double idle = clock_ms() - e->last_busy;
    int quiet = e->count == 0 && e->running == 0;
    if (e->stop || e->demand > 0 || (quiet && idle >= LATER_IDLE_MS)) break;
    double wait_ms = quiet && idle > 0 ? LATER_IDLE_MS - idle : LATER_IDLE_MS;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* the condition's clock */
    long long ns = ts.tv_nsec + (long long)(wait_ms * 1e6) + 1000000;
    ts.tv_sec += (time_t)(ns / 1000000000), ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&e->ready_cv, &e->mu, &ts);
  }
  if (!e->stop && e->demand > 0) e->demand--;
}

/* A later worker waits for the first ones to be warm, then for its device's turn (a device's
 * codec states made all at once take seconds inside the library: docs/engineering-notes.md), then
 * for its moment (later_moment). Returns 0 with dev_mu[dev] held, or -1 when the engine is
 * stopping or the device could not start. */
static int later_turn(struct engine *e, int dev) {
  pthread_mutex_lock(&e->mu);
  while (e->warming > 0 && !e->stop) pthread_cond_wait(&e->ready_cv, &e->mu);
  int stop = e->stop;
  pthread_mutex_unlock(&e->mu);
  if (stop) return -1;
  pthread_mutex_lock(&e->dev_mu[dev]); /* the stop may have come while another held it */
  pthread_mutex_lock(&e->mu);
  later_moment(e);
  stop = e->stop;
  pthread_mutex_unlock(&e->mu);
  if (!stop && device_start(e, dev) == 0) return 0;
  pthread_mutex_unlock(&e->dev_mu[dev]);
  return -1;
}

/* Counts worker w made (ok) or not, and says when the first ones or all of them are. Under mu. */
static void worker_counted(struct engine *e, const struct worker *w, int ok) {
  e->failed += !ok;
  e->made += ok;
  if (!engine_first_worker(e, w->index)) {
    if (--e->later == 0 && !e->stop)
      fprintf(stderr, "blurd: all %d workers made %.2f s after the start\n",
              e->nworkers - e->failed, (clock_ms() - e->t_start) / 1e3);
    return;
  }
  if (--e->warming > 0 || e->stop) return;
  e->last_busy = clock_ms(); /* the first requests may come now: later workers wait for them */
  pthread_cond_broadcast(&e->ready_cv);
  fprintf(stderr,
          "blurd: %d workers ready %.2f s after the start (slowest worker: %.2f s for its "
          "state, %.2f s for its warm-up)\n",
          e->made, (clock_ms() - e->t_start) / 1e3, e->slowest[0] / 1e3, e->slowest[1] / 1e3);
}

/* Takes the next job, or NULL when the engine stops and the queue is empty. Under mu. */
static struct job *next_job(struct engine *e) {
  while (e->count == 0 && !e->stop) pthread_cond_wait(&e->cv, &e->mu);
  if (e->count == 0) return NULL;
  struct job *job = e->ring[e->head];
  e->head = (e->head + 1) % e->cap;
  e->count--;
  e->running++;
  e->last_busy = clock_ms();
  if (e->later > e->demand && e->last_busy - job->t_queued >= LATER_WAIT_MS) {
    e->demand++; /* a later worker starts now (later_moment) */
    pthread_cond_broadcast(&e->ready_cv);
  }
  return job;
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  struct engine *e = w->engine;
  char name[16];
  snprintf(name, sizeof(name), "blurd-w%d", w->index);
  pthread_setname_np(pthread_self(), name); /* top -H and perf tell the threads apart */
  int dev = e->ndev ? w->index % e->ndev : 0, later = !engine_first_worker(e, w->index);
  int turn = later ? later_turn(e, dev) : 0, ok = turn == 0 && worker_start(e, w) == 0;
  if (later && turn == 0) pthread_mutex_unlock(&e->dev_mu[dev]);
  pthread_mutex_lock(&e->mu);
  worker_counted(e, w, ok);
  for (struct job *job; ok && (job = next_job(e)) != NULL;) {
    pthread_mutex_unlock(&e->mu);
    if (e->ops->job_begin) e->ops->job_begin(w->state);
    job->run(job, w);
    cpu_cancel_set(NULL); /* the job's token lived on its stack: none may outlive it */
    if (e->ops->job_end) e->ops->job_end(w->state);
    pthread_mutex_lock(&e->mu);
    e->running--;
    e->last_busy = clock_ms();
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

int engine_start_worker(struct engine *e, int i, char *err, size_t errlen) {
  struct worker *w = &e->workers[i];
  *w = (struct worker){e->ops, NULL, i, e};
  pthread_mutex_lock(&e->mu); /* the thread reads nworkers */
  int rc = pthread_create(&e->threads[i], NULL, worker_main, w) == 0 ? 0 : -1;
  if (rc == 0) e->nworkers++;
  pthread_mutex_unlock(&e->mu);
  if (rc != 0) snprintf(err, errlen, "cannot start worker thread %d", i);
  return rc;
}

/* The engine's queue: a bounded job queue and the worker threads that run its jobs, each worker
 * with its own state from the backend's verbs. Each worker thread makes its own state and warms up
 * before it takes jobs. The first FIRST_WORKERS workers of the first device (every worker of the
 * host backend) do so at once, and until they have, the engine is warming (/readyz says so); the
 * others then make theirs one at a time on each device, while the first ones serve, each when the
 * server is idle or wants more workers (later_moment). Submitting never blocks: a full queue says
 * so at once. Freeing the engine runs what is queued, then joins the workers. The backend's choice
 * and start are in start.c, the warm-up in warm.c. */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The workers of the first device that warm before the engine is ready: the others follow, one
 * at a time a device. */
#define FIRST_WORKERS 4

int engine_stopping(struct engine *e) {
  pthread_mutex_lock(&e->mu);
  int stop = e->stop;
  pthread_mutex_unlock(&e->mu);
  return stop;
}

int engine_first_worker(const struct engine *e, int i) {
  return e->ndev == 0 || (i % e->ndev == 0 && i / e->ndev < FIRST_WORKERS);
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
  if (!stop && engine_device_start(e, dev) == 0) return 0;
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

void engine_free(struct engine *e) {
  if (!e) return;
  pthread_mutex_lock(&e->mu);
  e->stop = 1;
  pthread_cond_broadcast(&e->cv);
  pthread_cond_broadcast(&e->ready_cv); /* later workers waiting for their turn give up */
  pthread_mutex_unlock(&e->mu);
  if (e->has_starter) pthread_join(e->starter, NULL); /* it makes no worker once stop is set */
  pthread_mutex_lock(&e->warm_mu);                    /* a worker waiting to warm up gives up */
  pthread_cond_broadcast(&e->warm_cv);
  pthread_mutex_unlock(&e->warm_mu);
  for (int i = 0; i < e->nworkers; i++) pthread_join(e->threads[i], NULL);
  for (int i = 0; i < e->nworkers; i++)
    if (e->workers[i].state) e->ops->worker_free(e->workers[i].state);
  if (e->ops && e->shared) e->ops->shared_free(e->shared); /* after the workers: they use it */
  for (int d = 0; e->dev_mu && d < (e->ndev ? e->ndev : 1); d++)
    pthread_mutex_destroy(&e->dev_mu[d]);
  free(e->dev_mu);
  free(e->dev_failed);
  free(e->dev_open);
  pthread_cond_destroy(&e->cv);
  pthread_cond_destroy(&e->ready_cv);
  pthread_mutex_destroy(&e->mu);
  pthread_mutex_destroy(&e->warm_mu);
  pthread_cond_destroy(&e->warm_cv);
  free(e->threads);
  free(e->workers);
  free(e->ring);
  free(e);
}

/* ---- what the api reads ---- */

int engine_leave_to_exit(const struct engine *e) {
  return __atomic_load_n(&e->chosen, __ATOMIC_ACQUIRE) && e->ops->leave_to_exit;
}

const char *engine_name(const struct engine *e) {
  return __atomic_load_n(&e->chosen, __ATOMIC_ACQUIRE) ? e->name : "starting";
}

const char *engine_worker_name(struct worker *w) {
  return w->ops->worker_name(w->state);
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

/* The devices in use, as far as the HTTP threads may know: 0 until the backend is chosen. */
static int devices(const struct engine *e) {
  return __atomic_load_n(&e->chosen, __ATOMIC_ACQUIRE) ? e->ndev : 0;
}

/* Whether device dev's context is made: reading its free memory before then would make it (in the
 * thread that asks, /readyz's during the start). */
static int dev_open(struct engine *e, int dev) {
  return __atomic_load_n(&e->dev_open[dev], __ATOMIC_ACQUIRE);
}

int engine_device_memory(struct engine *e, int dev, size_t *held, size_t *used, size_t *total) {
  if (dev < 0 || dev >= devices(e) || !e->ops->device_memory ||
      e->ops->device_memory(dev, dev_open(e, dev), used, total) != 0)
    return -1;
  *held = 0;
  pthread_mutex_lock(&e->mu); /* the start thread may still add workers */
  int n = e->nworkers;
  pthread_mutex_unlock(&e->mu);
  for (int i = dev; i < n && e->ops->worker_bytes; i += e->ndev) {     /* i uses device i % ndev */
    void *w = __atomic_load_n(&e->workers[i].state, __ATOMIC_ACQUIRE); /* NULL: not made yet */
    if (w) *held += e->ops->worker_bytes(w);
  }
  return 0;
}

json_t *engine_devices(struct engine *e) {
  json_t *arr = json_array();
  for (int d = 0; arr && d < devices(e) && e->ops->device_json; d++) {
    json_t *o = e->ops->device_json(d, dev_open(e, d), e->nworkers / e->ndev);
    if (o) json_array_append_new(arr, o);
  }
  return arr;
}

json_t *engine_codecs(struct engine *e) {
  if (!__atomic_load_n(&e->started, __ATOMIC_ACQUIRE))
    return json_pack("{s:b, s:s}", "gpu", 0, "reason",
                     "starting: JPEG's codecs are not chosen yet");
  json_t *o = json_pack("{s:b, s:s, s:s, s:s, s:s}", "gpu", 0, "jpeg_decode", "libjpeg-turbo",
                        "jpeg_encode", "libjpeg-turbo", "png", "libpng", "webp", "libwebp");
  if (o) { /* by level: codec_png_deflater; by file: codecs/png.c */
    json_object_set_new(o, "png_encode", json_string("deflate-rle (levels 1 and 2), libdeflate"));
    json_object_set_new(o, "webp_encode",
                        json_string("blurd-vp8 (smooth RGB images at effort 2), libwebp"));
    json_object_set_new(o, "png_decode",
                        json_string("libdeflate (8- and 16-bit, not interlaced, "
                                    "no tRNS), libpng"));
  }
  const char *decoder = NULL;
  if (o && e->fast_codecs) e->ops->codecs_json(e->shared, o, &decoder);
  if (o && !e->fast_codecs) json_object_set_new(o, "reason", json_string(e->codecs_why));
  return o;
}

int engine_device_codecs(struct engine *e, const char **jpeg_decoder) {
  int fast = __atomic_load_n(&e->started, __ATOMIC_ACQUIRE) && e->fast_codecs;
  *jpeg_decoder = fast ? e->jpeg_decoder : "libjpeg-turbo";
  return fast;
}

int engine_batch_stats(struct engine *e, int dev, struct engine_batch_stats *s) {
  if (dev < 0 || dev >= devices(e) || !e->ops->batch_stats) return -1;
  return e->ops->batch_stats(e->shared, dev, s);
}

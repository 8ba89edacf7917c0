/* The backend: a bounded job queue and the worker threads that run jobs, each worker with its
 * own state from the backend's ops (the CPU ops share one fork-join pool; the CUDA ops give each
 * worker a stream and buffers). Submitting never blocks: a full queue says so at once and the
 * caller answers 503. Freeing the backend runs what is queued, then joins the workers. */
#include "api_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct backend {
  const struct backend_ops *ops;
  void *shared;   /* the ops' shared state (the CPU pool) */
  char name[128]; /* "cpu", "cuda:0 NVIDIA H200" */
  pthread_mutex_t mu;
  pthread_cond_t cv;    /* a job was queued, or stop */
  struct job **ring;    /* queued jobs, FIFO */
  int cap, head, count; /* ring capacity, first job, jobs queued */
  int running;          /* jobs on a worker now */
  int stop;             /* set by backend_free: run what is queued, then exit */
  int nworkers;         /* workers started */
  struct worker *workers;
  pthread_t *threads;
};

/* ---- the CPU backend ---- */

static int cpu_worker_new(void *shared, int index, void **state, char *err, size_t errlen) {
  (void)index, (void)err, (void)errlen;
  *state = shared; /* every worker feeds the one pool */
  return 0;
}

static void cpu_worker_free(void *state) {
  (void)state;
}

static enum api_error cpu_blur(void *state, const struct cpu_blur *b, const struct cpu_image *src,
                               struct cpu_image *dst, struct cpu_accuracy *acc,
                               struct stage_times *t) {
  struct cpu_timing ct;
  if (cpu_blur_image(state, b, src, dst, acc, &ct) != 0) return API_OUT_OF_MEMORY;
  *t = (struct stage_times){ct.filter, acc ? ct.reference : -1, -1, -1, -1};
  return API_OK;
}

static const struct backend_ops cpu_ops = {"cpu", cpu_worker_new, cpu_worker_free, cpu_blur,
                                           cpu_auto_method};

/* ---- queue and workers ---- */

struct worker_thread { /* what a worker thread needs */
  struct backend *b;
  struct worker *w;
};

static void *worker_main(void *arg) {
  struct worker_thread wt = *(struct worker_thread *)arg;
  struct backend *b = wt.b;
  free(arg);
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (b->count == 0 && !b->stop) pthread_cond_wait(&b->cv, &b->mu);
    if (b->count == 0) break; /* stopping, and the queue is empty */
    struct job *job = b->ring[b->head];
    b->head = (b->head + 1) % b->cap;
    b->count--;
    b->running++;
    pthread_mutex_unlock(&b->mu);
    job->run(job, wt.w);
    pthread_mutex_lock(&b->mu);
    b->running--;
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

static int start_worker(struct backend *b, int i, char *err, size_t errlen) {
  struct worker *w = &b->workers[i];
  *w = (struct worker){b->ops, NULL, i};
  if (b->ops->worker_new(b->shared, i, &w->state, err, errlen) != 0) return -1;
  struct worker_thread *wt = malloc(sizeof(*wt));
  if (wt) *wt = (struct worker_thread){b, w};
  if (!wt || pthread_create(&b->threads[i], NULL, worker_main, wt) != 0) {
    free(wt);
    b->ops->worker_free(w->state);
    snprintf(err, errlen, "cannot start worker thread %d", i);
    return -1;
  }
  b->nworkers++;
  return 0;
}

static int cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int choose_ops(struct backend *b, const struct api_config *cfg, char *err, size_t errlen) {
  if (cfg->backend == API_BACKEND_GPU) {
    snprintf(err, errlen, "--backend gpu: this build has no CUDA backend");
    return -1;
  }
  b->ops = &cpu_ops;
  b->shared = cpu_pool_new(cores());
  snprintf(b->name, sizeof(b->name), "cpu");
  if (!b->shared) snprintf(err, errlen, "cannot start the CPU thread pool");
  return b->shared ? 0 : -1;
}

struct backend *backend_new(const struct api_config *cfg, char *err, size_t errlen) {
  struct backend *b = calloc(1, sizeof(*b));
  if (!b) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  b->cap = cfg->queue > 0 ? cfg->queue : 1;
  int n = cfg->workers > 0 ? cfg->workers : cores();
  b->ring = calloc((size_t)b->cap, sizeof(*b->ring));
  b->workers = calloc((size_t)n, sizeof(*b->workers));
  b->threads = calloc((size_t)n, sizeof(*b->threads));
  int rc = b->ring && b->workers && b->threads ? 0 : -1;
  if (rc != 0) snprintf(err, errlen, "out of memory");
  if (rc == 0) rc = choose_ops(b, cfg, err, errlen);
  for (int i = 0; rc == 0 && i < n; i++) rc = start_worker(b, i, err, errlen);
  if (rc != 0) {
    backend_free(b);
    return NULL;
  }
  return b;
}

int backend_submit(struct backend *b, struct job *job) {
  pthread_mutex_lock(&b->mu);
  int ok = b->count < b->cap && !b->stop;
  if (ok) {
    job->t_queued = api_now_ms();
    b->ring[(b->head + b->count) % b->cap] = job;
    b->count++;
    pthread_cond_signal(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return ok ? 0 : -1;
}

void backend_free(struct backend *b) {
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  b->stop = 1;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
  for (int i = 0; i < b->nworkers; i++) pthread_join(b->threads[i], NULL);
  for (int i = 0; i < b->nworkers; i++) b->ops->worker_free(b->workers[i].state);
  if (b->ops == &cpu_ops) cpu_pool_free(b->shared);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  free(b->threads);
  free(b->workers);
  free(b->ring);
  free(b);
}

const char *backend_name(const struct backend *b) {
  return b->name;
}

void backend_stats(struct backend *b, int *queued, int *running, int *capacity, int *workers) {
  pthread_mutex_lock(&b->mu);
  *queued = b->count;
  *running = b->running;
  *capacity = b->cap;
  *workers = b->nworkers;
  pthread_mutex_unlock(&b->mu);
}

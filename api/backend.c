/* The backend: a bounded job queue and the worker threads that run jobs, each worker with its
 * own state from the backend's ops (the CPU ops share one fork-join pool; the CUDA ops give each
 * worker a stream and buffers). Submitting never blocks: a full queue says so at once and the
 * caller answers 503. Freeing the backend runs what is queued, then joins the workers. */
#include "api_int.h"

#include <malloc.h>
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
  int ndev;             /* GPUs in use; 0 for the CPU backend */
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

/* The stage times of a CPU filter that started at t0. */
static struct stage_times cpu_times(double t0) {
  return (struct stage_times){api_now_ms() - t0, -1, -1, -1, -1};
}

static enum api_error cpu_variance_op(void *state, const struct cpu_var *v,
                                      const struct cpu_image *src, double *var,
                                      struct stage_times *t) {
  double t0 = api_now_ms();
  if (cpu_variance(state, v, src, NULL, var) != 0) return API_OUT_OF_MEMORY;
  *t = cpu_times(t0);
  return API_OK;
}

static enum api_error cpu_contrast_op(void *state, const struct cpu_contrast *c,
                                      const struct cpu_image *src, struct cpu_image *dst,
                                      struct stage_times *t) {
  double t0 = api_now_ms();
  if (cpu_contrast_image(state, c, src, dst) != 0) return API_OUT_OF_MEMORY;
  *t = cpu_times(t0);
  return API_OK;
}

static enum api_error cpu_convolve_op(void *state, const struct cpu_conv *c,
                                      const struct cpu_image *src, struct cpu_image *dst,
                                      struct stage_times *t) {
  double t0 = api_now_ms();
  cpu_convolve_image(state, c, src, dst);
  *t = cpu_times(t0);
  return API_OK;
}

static const char *cpu_worker_name(void *state) {
  (void)state;
  return "cpu";
}

static const struct backend_ops cpu_ops = {.kind = "cpu",
                                           .worker_new = cpu_worker_new,
                                           .worker_free = cpu_worker_free,
                                           .blur = cpu_blur,
                                           .variance = cpu_variance_op,
                                           .contrast = cpu_contrast_op,
                                           .convolve = cpu_convolve_op,
                                           .auto_method = cpu_auto_method,
                                           .worker_name = cpu_worker_name,
                                           .lends_output = 0};

/* ---- the CUDA backend ---- */

#ifdef BLURD_CUDA
#include "../gpu/gpu.h"

struct gpu_shared { /* what every GPU worker shares */
  int ndev;         /* visible devices; worker i uses device i % ndev */
  long fault_at;    /* tests only (BLURD_TEST_GPU_FAULT=N): GPU job N faults; 0: never */
  long jobs;        /* GPU jobs started (atomic) */
};

struct gpu_worker {
  struct gpu_ctx *ctx;
  struct gpu_shared *shared;
  size_t bytes; /* gpu_ctx_bytes after the last job, for /metrics (atomic) */
};

static int gpu_worker_new(void *shared, int index, void **state, char *err, size_t errlen) {
  struct gpu_shared *g = shared;
  struct gpu_worker *w = calloc(1, sizeof(*w));
  if (!w) return -1;
  w->shared = g;
  w->ctx = gpu_ctx_new(index % g->ndev, err, errlen);
  if (!w->ctx) {
    free(w);
    return -1;
  }
  *state = w;
  return 0;
}

static void gpu_worker_free(void *state) {
  struct gpu_worker *w = state;
  gpu_ctx_free(w->ctx);
  free(w);
}

/* Counts a GPU call; the one BLURD_TEST_GPU_FAULT names gets a sticky error first. */
static struct gpu_ctx *gpu_job_ctx(struct gpu_worker *w) {
  if (w->shared->fault_at &&
      __atomic_add_fetch(&w->shared->jobs, 1, __ATOMIC_SEQ_CST) == w->shared->fault_at)
    gpu_inject_fault(w->ctx); /* a sticky error: the job's call fails with it */
  return w->ctx;
}

/* The api's error for the status s of a GPU call on worker w, and on success its stage times
 * into t. Notes the device memory w holds, for /metrics. */
static enum api_error gpu_result(struct gpu_worker *w, enum gpu_status s, const struct gpu_times *g,
                                 int reference, struct stage_times *t) {
  __atomic_store_n(&w->bytes, gpu_ctx_bytes(w->ctx), __ATOMIC_RELAXED);
  switch (s) {
  case GPU_OK:
    break;
  case GPU_NO_MEMORY:
    return API_OUT_OF_MEMORY;
  case GPU_ERROR:
    return API_GPU_ERROR;
  case GPU_FATAL:
    return API_GPU_LOST;
  }
  *t = (struct stage_times){g->upload + g->kernel + g->download, reference ? g->reference : -1,
                            g->upload, g->kernel, g->download};
  return API_OK;
}

static enum api_error gpu_blur_op(void *state, const struct cpu_blur *b,
                                  const struct cpu_image *src, struct cpu_image *dst,
                                  struct cpu_accuracy *acc, struct stage_times *t) {
  struct gpu_times g;
  enum gpu_status s = gpu_blur(gpu_job_ctx(state), b, src, dst, acc, &g);
  return gpu_result(state, s, &g, acc != NULL, t);
}

static enum api_error gpu_variance_op(void *state, const struct cpu_var *v,
                                      const struct cpu_image *src, double *var,
                                      struct stage_times *t) {
  struct gpu_times g;
  return gpu_result(state, gpu_variance(gpu_job_ctx(state), v, src, NULL, var, &g), &g, 0, t);
}

static enum api_error gpu_contrast_op(void *state, const struct cpu_contrast *c,
                                      const struct cpu_image *src, struct cpu_image *dst,
                                      struct stage_times *t) {
  struct gpu_times g;
  return gpu_result(state, gpu_contrast(gpu_job_ctx(state), c, src, dst, &g), &g, 0, t);
}

static enum api_error gpu_convolve_op(void *state, const struct cpu_conv *c,
                                      const struct cpu_image *src, struct cpu_image *dst,
                                      struct stage_times *t) {
  struct gpu_times g;
  return gpu_result(state, gpu_convolve(gpu_job_ctx(state), c, src, dst, &g), &g, 0, t);
}

static const char *gpu_worker_name(void *state) {
  return gpu_ctx_name(((struct gpu_worker *)state)->ctx);
}

static const struct backend_ops gpu_ops = {.kind = "cuda",
                                           .worker_new = gpu_worker_new,
                                           .worker_free = gpu_worker_free,
                                           .blur = gpu_blur_op,
                                           .variance = gpu_variance_op,
                                           .contrast = gpu_contrast_op,
                                           .convolve = gpu_convolve_op,
                                           .auto_method = gpu_auto_method,
                                           .worker_name = gpu_worker_name,
                                           .lends_output = 1};
#endif

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
    if (b->running == 0 && b->count == 0) malloc_trim(0); /* idle: give freed memory back */
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

/* Picks the CUDA backend when asked for, or for auto when a device is visible, else the CPU.
 * Returns the number of GPUs it will use (0 for the CPU), or -1 with err filled. */
static int choose_ops(struct backend *b, const struct api_config *cfg, char *err, size_t errlen) {
#ifdef BLURD_CUDA
  int ndev = cfg->backend == API_BACKEND_CPU ? 0 : gpu_device_count();
  if (ndev > 0) {
    struct gpu_shared *g = calloc(1, sizeof(*g));
    if (!g) return -1;
    g->ndev = ndev;
    g->fault_at = getenv("BLURD_TEST_GPU_FAULT") ? atol(getenv("BLURD_TEST_GPU_FAULT")) : 0;
    b->ops = &gpu_ops;
    b->shared = g;
    return ndev;
  }
  if (cfg->backend == API_BACKEND_GPU) {
    snprintf(err, errlen,
             "--backend gpu: no CUDA device is visible (no driver, no GPU, or "
             "CUDA_VISIBLE_DEVICES hides them)");
    return -1;
  }
#else
  if (cfg->backend == API_BACKEND_GPU) {
    snprintf(err, errlen, "--backend gpu: this build has no CUDA backend (nvcc was not found)");
    return -1;
  }
#endif
  b->ops = &cpu_ops;
  b->shared = cpu_pool_new(cores());
  if (!b->shared) snprintf(err, errlen, "cannot start the CPU thread pool");
  return b->shared ? 0 : -1;
}

/* Workers: the flag, or one per core for the CPU; per GPU the flag, or the cores shared out
 * among the GPUs (at least 2 each): a GPU worker spends most of its time in the codecs, and
 * sleeps while it waits for the GPU. */
static int worker_count(const struct api_config *cfg, int ndev) {
  if (ndev == 0) return cfg->workers > 0 ? cfg->workers : cores();
  int per_gpu = (cores() + ndev - 1) / ndev;
  return (cfg->workers > 0 ? cfg->workers : per_gpu < 2 ? 2 : per_gpu) * ndev;
}

struct backend *backend_new(const struct api_config *cfg, char *err, size_t errlen) {
  struct backend *b = calloc(1, sizeof(*b));
  if (errlen) err[0] = 0;
  if (!b) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  b->cap = cfg->queue > 0 ? cfg->queue : 1;
  b->ring = calloc((size_t)b->cap, sizeof(*b->ring));
  int rc = b->ring ? 0 : -1, n = 0;
  if (rc == 0 && (b->ndev = choose_ops(b, cfg, err, errlen)) < 0) rc = -1;
  if (rc == 0) {
    n = worker_count(cfg, b->ndev);
    b->workers = calloc((size_t)n, sizeof(*b->workers));
    b->threads = calloc((size_t)n, sizeof(*b->threads));
    if (!b->workers || !b->threads) rc = -1;
  }
  if (rc != 0 && !*err) snprintf(err, errlen, "out of memory");
  for (int i = 0; rc == 0 && i < n; i++) rc = start_worker(b, i, err, errlen);
  if (rc != 0) {
    backend_free(b);
    return NULL;
  }
  if (b->ndev > 1)
    snprintf(b->name, sizeof(b->name), "cuda (%d devices)", b->ndev);
  else
    snprintf(b->name, sizeof(b->name), "%s", b->ops->worker_name(b->workers[0].state));
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
  if (b->ops == &cpu_ops)
    cpu_pool_free(b->shared);
  else
    free(b->shared);
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

int backend_gpu_memory(struct backend *b, int dev, size_t *held, size_t *used, size_t *total) {
#ifdef BLURD_CUDA
  struct gpu_device_info info;
  if (dev < 0 || dev >= b->ndev || gpu_device_info(dev, &info) != 0) return -1;
  *held = 0;
  for (int i = dev; i < b->nworkers; i += b->ndev) /* worker i uses device i % ndev */
    *held += __atomic_load_n(&((struct gpu_worker *)b->workers[i].state)->bytes, __ATOMIC_RELAXED);
  *used = info.mem_free ? info.mem_total - info.mem_free : 0;
  *total = info.mem_total;
  return 0;
#else
  (void)b, (void)dev, (void)held, (void)used, (void)total;
  return -1;
#endif
}

json_t *backend_devices(struct backend *b) {
  json_t *arr = json_array();
#ifdef BLURD_CUDA
  for (int d = 0; arr && d < b->ndev; d++) {
    struct gpu_device_info info;
    char cc[16];
    if (gpu_device_info(d, &info) != 0) continue;
    snprintf(cc, sizeof(cc), "%d.%d", info.major, info.minor);
    json_array_append_new(arr, json_pack("{s:i, s:s, s:s, s:I, s:I, s:i, s:i}", "index", d, "name",
                                         info.name, "compute_capability", cc, "memory_total_bytes",
                                         (json_int_t)info.mem_total, "memory_free_bytes",
                                         (json_int_t)info.mem_free, "multiprocessors",
                                         info.sm_count, "workers", b->nworkers / b->ndev));
  }
#else
  (void)b;
#endif
  return arr;
}

json_t *backend_kinds(void) {
#ifdef BLURD_CUDA
  return json_pack("[s, s]", "cpu", "cuda");
#else
  return json_pack("[s]", "cpu");
#endif
}

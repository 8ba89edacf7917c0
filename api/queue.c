/* The backend's queue: a bounded job queue and the worker threads that run jobs, each worker with
 * its own state from the backend's verbs (backend_cpu.c: the workers share one fork-join pool;
 * backend_gpu.c: each worker has a stream and buffers). Each worker thread makes its own state
 * and warms up before it takes jobs. The first FIRST_WORKERS workers of the first GPU (every CPU
 * worker) do so at once, and until they have, the backend is warming (/readyz says so); the
 * others then make theirs one at a time on each GPU (the other GPUs start then), while the first
 * ones serve, each when the server is idle or wants more workers (later_moment). Submitting never
 * blocks: a full queue says so at once and the caller answers 503. Freeing the backend runs what is
 * queued, then joins the workers. Here too: which backend runs (the CUDA one when a device is
 * visible, unless --backend cpu; chosen after the HTTP front answers where the driver's device
 * node exists: defer_choice), how many workers, and where JPEG is decoded and encoded (the
 * GPU's nvJPEG decoders are started here, one per device). */
#include "api_int.h"

#ifdef BLURD_CUDA
#include "../gpu/gpu.h"
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct backend {
  const struct backend_ops *ops;
  void *shared;   /* the ops' shared state (the CPU pool) */
  char name[128]; /* "cpu", "cuda:0 NVIDIA H200" */
  pthread_mutex_t mu;
  pthread_cond_t cv;        /* a job was queued, or stop */
  struct job **ring;        /* queued jobs, FIFO */
  int cap, head, count;     /* ring capacity, first job, jobs queued */
  int running;              /* jobs on a worker now */
  int stop;                 /* set by backend_free: run what is queued, then exit */
  int nworkers;             /* worker threads started */
  int failed;               /* workers whose state could not be made: they take no jobs */
  int ndev;                 /* GPUs in use; 0 for the CPU backend */
  int gpu_codecs;           /* JPEG is decoded and encoded on the GPU */
  const char *jpeg_decoder; /* the GPU's JPEG decoder ("nvjpeg-hw"), when gpu_codecs */
  const char *jpeg_lib;     /* the nvJPEG library, when gpu_codecs */
  int per_gpu;              /* a GPU's workers with the GPU codecs: its decoders' largest batch */
  int batch_wait_us;        /* cfg->jpeg_batch_wait_us */
  int decoders;             /* cfg->jpeg_decoders */
  int warm[3];              /* the warm-up image: width, height, channels (0: none) */
  int warming;              /* first workers not yet warm */
  int later;                /* the others not yet made */
  int made;                 /* workers made and warm: they take jobs */
  int demand;               /* jobs that waited LATER_WAIT_MS for a worker: later ones wanted */
  double last_busy;         /* api_now_ms() when a job was last queued, taken or done */
  pthread_cond_t ready_cv;  /* warming reached 0, or stop */
  pthread_mutex_t *dev_mu;  /* held while a later worker of that device makes its state */
  int *dev_failed;          /* the device's JPEG decoders could not start: it has no workers */
  int *dev_open;            /* the device's context is made (atomic): its free memory may be read */
  double t_start;           /* api_now_ms() when backend_new began */
  double slowest[2];        /* the slowest worker's state and warm-up, ms (under mu) */
  pthread_mutex_t warm_mu;  /* guards warm_bytes */
  pthread_cond_t warm_cv;   /* a warm-up finished */
  size_t warm_bytes;        /* the host images of the warm-ups running now */
  char codecs_why[384];     /* why JPEG runs on the CPU, when it does */
  struct worker *workers;
  pthread_t *threads;
  struct api_config cfg; /* backend_new's, for the start thread */
  pthread_t starter;     /* the start thread (backend_start), when there is one */
  int has_starter;
  int chosen;  /* ops, ndev, the device arrays and the name are set (atomic: choose_backend) */
  int started; /* the codecs are chosen and the workers made (atomic: the start thread sets it) */
};

struct worker_thread { /* what a worker thread needs */
  struct backend *b;
  struct worker *w;
};

/* Warm start: a worker runs the stages of a typical job once, on a synthetic image of the
 * configured size, before it takes jobs: its pinned and device buffers grow to that size, the
 * allocator maps what such a job uses, the GPU kernels load and the JPEG encoder and decoder
 * (nvJPEG, when they are on the GPU) size their state. The first request is then as fast as the
 * ones after it. */
/* A JPEG round trip of img through w's encoder and decoder. */
static void warm_jpeg(struct worker *w, const struct codec_image *img) {
  struct codec_encode_opts jpeg = {
      .format = CODEC_JPEG, .quality = 90, .compression = 6, .lossless = 0};
  struct codec_limits lim = {(uint32_t)img->width, (uint32_t)img->height,
                             (uint64_t)img->width * img->height};
  struct codec_image back = {0};
  uint8_t *enc = NULL;
  size_t len;
  const char *codec;
  double download;
  char msg[256];
  if (w->ops->encode(w->state, img, &jpeg, &enc, &len, &codec, &download, msg, sizeof(msg)) ==
          API_OK &&
      w->ops->decode(w->state, enc, len, &lim, &back, &codec, msg, sizeof(msg)) == API_OK)
    w->ops->to_host(w->state, &back);
  codec_image_free(&back);
  free(enc);
}

/* Whether backend_free has begun: a worker still warming stops at its next step. */
static int stopping(struct backend *b) {
  pthread_mutex_lock(&b->mu);
  int stop = b->stop;
  pthread_mutex_unlock(&b->mu);
  return stop;
}

/* The workers warm up in parallel, as far as their warm-up images (the input and the output, on
 * the host) take at most WARM_HOST_BYTES together; one always may. Returns 0 when this one may
 * start, -1 when the backend is stopping. */
#define WARM_HOST_BYTES ((size_t)1 << 30)
static int warm_enter(struct backend *b, size_t bytes) {
  pthread_mutex_lock(&b->warm_mu);
  while (b->warm_bytes > 0 && b->warm_bytes + bytes > WARM_HOST_BYTES && !stopping(b))
    pthread_cond_wait(&b->warm_cv, &b->warm_mu);
  int stop = stopping(b);
  if (!stop) b->warm_bytes += bytes;
  pthread_mutex_unlock(&b->warm_mu);
  return stop ? -1 : 0;
}

static void warm_leave(struct backend *b, size_t bytes) {
  pthread_mutex_lock(&b->warm_mu);
  b->warm_bytes -= bytes;
  pthread_cond_broadcast(&b->warm_cv);
  pthread_mutex_unlock(&b->warm_mu);
}

static void warm_up(struct backend *b, struct worker *w) {
  int width = b->warm[0], height = b->warm[1], ch = b->warm[2];
  struct codec_image in = {NULL, width, height, ch, 8, CODEC_PNG, 1}, out;
  struct cpu_image src = {NULL, width, height, ch, 8};
  if (width <= 0 || height <= 0 || warm_enter(b, 2 * cpu_image_bytes(&src)) != 0) return;
  if (!(in.pixels = malloc(cpu_image_bytes(&src)))) {
    warm_leave(b, 2 * cpu_image_bytes(&src));
    return;
  }
  for (size_t i = 0; i < cpu_image_bytes(&src); i++) /* a texture, so the codecs have work */
    in.pixels[i] = (uint8_t)((i * 2654435761u) >> 24 & 0x3f) + (uint8_t)(i / (size_t)(width * ch));
  struct stage_times st;
  struct op_result res;
  char msg[256];
  struct op_io io = {&in, &out, &res, &st, msg, sizeof(msg)};
  struct blur_params blur; /* /blur's defaults at sigma 12: auto, with the PSNR */
  out = (struct codec_image){0};
  if (w->ops->job_begin) w->ops->job_begin(w->state);
  /* on a device, auto without the PSNR takes another method (pyramid): its kernels load too */
  if (w->ops->keeps_images && params_parse(&api_blur_endpoint, "sigma=12&psnr=false", NULL, 0,
                                           &blur, msg, sizeof(msg)) == API_OK)
    w->ops->run(w->state, &op_blur, &blur, &io);
  if (params_parse(&api_blur_endpoint, "sigma=12", NULL, 0, &blur, msg, sizeof(msg)) == API_OK &&
      w->ops->run(w->state, &op_blur, &blur, &io) == API_OK) {
    /* through the JPEG encoder and back through the decoder: the output itself when JPEG can
     * hold it, else the input's first samples read as RGB or gray (after the download a PNG
     * answer takes) */
    struct codec_image color = in;
    color.channels = ch < 3 ? 1 : 3;
    if (ch == 2 || ch == 4) w->ops->to_host(w->state, &out);
    warm_jpeg(w, ch == 2 || ch == 4 ? &color : &out);
  }
  if (w->ops->job_end) w->ops->job_end(w->state);
  codec_image_free(&out);
  codec_image_free(&in);
  warm_leave(b, 2 * cpu_image_bytes(&src));
}

/* Makes the worker's state (its GPU context and nvJPEG states: the slow part of the start), then
 * warms it up. Every worker does this on its own thread, all at once, so that the start takes
 * about one worker's time rather than the sum of them. Returns 0, or -1 when the state could not
 * be made (said on stderr) or the backend is stopping. */
static int worker_start(struct backend *b, struct worker *w) {
  char err[256] = "";
  void *state = NULL;
  double t0 = api_now_ms();
  if (stopping(b)) return -1;
  if (b->ops->worker_new(b->shared, w->index, &state, err, sizeof(err)) != 0) {
    fprintf(stderr, "blurd: worker %d does not start: %s\n", w->index, err[0] ? err : "no memory");
    return -1;
  }
  __atomic_store_n(&w->state, state, __ATOMIC_RELEASE); /* /metrics reads it */
  if (b->ndev) __atomic_store_n(&b->dev_open[w->index % b->ndev], 1, __ATOMIC_RELEASE);
  double t1 = api_now_ms();
  warm_up(b, w);
  double t2 = api_now_ms();
  pthread_mutex_lock(&b->mu);
  b->slowest[0] = t1 - t0 > b->slowest[0] ? t1 - t0 : b->slowest[0];
  b->slowest[1] = t2 - t1 > b->slowest[1] ? t2 - t1 : b->slowest[1];
  pthread_mutex_unlock(&b->mu);
  return 0;
}

/* The workers of the first GPU that warm before the backend is ready: the others follow, about
 * 0.1 s each, one at a time a GPU. */
#define FIRST_WORKERS 4

#ifdef BLURD_CUDA
static int start_jpeg_dev(struct backend *b, int dev, char *why, size_t whylen);
#endif

/* Makes device dev ready for its workers' states, under dev_mu[dev]: its JPEG decoders, when the
 * GPU codecs are on and it is not the first device (started before the workers). Returns 0, or
 * -1 when the device cannot start (said once on stderr). */
static int device_start(struct backend *b, int dev) {
#ifdef BLURD_CUDA
  struct backend_gpu_shared *g = b->ndev && b->gpu_codecs ? b->shared : NULL;
  char why[256];
  if (!g || g->jpeg[dev] || b->dev_failed[dev]) return g && b->dev_failed[dev] ? -1 : 0;
  if (start_jpeg_dev(b, dev, why, sizeof(why)) == 0) return 0;
  b->dev_failed[dev] = 1;
  fprintf(stderr, "blurd: cuda:%d takes no jobs: %s\n", dev, why);
  return -1;
#else
  (void)b, (void)dev;
  return 0;
#endif
}

/* A later worker's start stalls its device's requests in flight for about 10 ms (its nvJPEG states
 * and first allocations: docs/engineering-notes.md), so it waits for a moment when that stalls
 * none (the server idle for LATER_IDLE_MS) or when more workers are wanted anyway (a job waited
 * LATER_WAIT_MS in the queue). An idle server makes them all one after another at once; a server
 * with a few clients keeps its first workers and its first requests' times. Under mu; returns
 * with it held. */
#define LATER_IDLE_MS 100
#define LATER_WAIT_MS 10
static void later_moment(struct backend *b) {
  for (;;) {
    double idle = api_now_ms() - b->last_busy;
    int quiet = b->count == 0 && b->running == 0;
    if (b->stop || b->demand > 0 || (quiet && idle >= LATER_IDLE_MS)) break;
    double wait_ms = quiet && idle > 0 ? LATER_IDLE_MS - idle : LATER_IDLE_MS;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* the condition's clock */
    long long ns = ts.tv_nsec + (long long)(wait_ms * 1e6) + 1000000;
    ts.tv_sec += (time_t)(ns / 1000000000), ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&b->ready_cv, &b->mu, &ts);
  }
  if (!b->stop && b->demand > 0) b->demand--;
}

/* A later worker waits for the first ones to be warm, then for its device's turn: made all at
 * once, the 32 to 64 nvJPEG states of a GPU took 5 to 12 s inside the library (4 H200s, 2026-11-26)
 * before the first request could be served; then for its moment (later_moment). Returns 0 with
 * dev_mu[dev] held, or -1 when the backend is stopping. */
static int later_turn(struct backend *b, int dev) {
  pthread_mutex_lock(&b->mu);
  while (b->warming > 0 && !b->stop) pthread_cond_wait(&b->ready_cv, &b->mu);
  int stop = b->stop;
  pthread_mutex_unlock(&b->mu);
  if (stop) return -1;
  pthread_mutex_lock(&b->dev_mu[dev]); /* the stop may have come while another held it */
  pthread_mutex_lock(&b->mu);
  later_moment(b);
  stop = b->stop;
  pthread_mutex_unlock(&b->mu);
  if (!stop && device_start(b, dev) == 0) return 0;
  pthread_mutex_unlock(&b->dev_mu[dev]);
  return -1;
}

/* Whether worker i is one of the first, which warm before the backend is ready. */
static int first_worker(const struct backend *b, int i) {
  return b->ndev == 0 || (i % b->ndev == 0 && i / b->ndev < FIRST_WORKERS);
}

/* Counts worker w made (ok) or not, and says when the first ones or all of them are. Under mu. */
static void worker_counted(struct backend *b, const struct worker *w, int ok) {
  b->failed += !ok;
  b->made += ok;
  if (!first_worker(b, w->index)) {
    if (--b->later == 0 && !b->stop)
      fprintf(stderr, "blurd: all %d workers made %.2f s after the start\n",
              b->nworkers - b->failed, (api_now_ms() - b->t_start) / 1e3);
    return;
  }
  if (--b->warming > 0 || b->stop) return;
  b->last_busy = api_now_ms(); /* the first requests may come now: later workers wait for them */
  pthread_cond_broadcast(&b->ready_cv);
  fprintf(stderr,
          "blurd: %d workers ready %.2f s after the start (slowest worker: %.2f s for its "
          "state, %.2f s for its warm-up)\n",
          b->made, (api_now_ms() - b->t_start) / 1e3, b->slowest[0] / 1e3, b->slowest[1] / 1e3);
}

static void *worker_main(void *arg) {
  struct worker_thread wt = *(struct worker_thread *)arg;
  struct backend *b = wt.b;
  free(arg);
  char name[16];
  snprintf(name, sizeof(name), "blurd-w%d", wt.w->index);
  pthread_setname_np(pthread_self(), name); /* top -H and perf tell the threads apart */
  int dev = b->ndev ? wt.w->index % b->ndev : 0, later = !first_worker(b, wt.w->index);
  int turn = later ? later_turn(b, dev) : 0, ok = turn == 0 && worker_start(b, wt.w) == 0;
  if (later && turn == 0) pthread_mutex_unlock(&b->dev_mu[dev]);
  pthread_mutex_lock(&b->mu);
  worker_counted(b, wt.w, ok);
  while (ok) {
    while (b->count == 0 && !b->stop) pthread_cond_wait(&b->cv, &b->mu);
    if (b->count == 0) break; /* stopping, and the queue is empty */
    struct job *job = b->ring[b->head];
    b->head = (b->head + 1) % b->cap;
    b->count--;
    b->running++;
    b->last_busy = api_now_ms();
    if (b->later > b->demand && b->last_busy - job->t_queued >= LATER_WAIT_MS) {
      b->demand++; /* a later worker starts now (later_moment) */
      pthread_cond_broadcast(&b->ready_cv);
    }
    pthread_mutex_unlock(&b->mu);
    if (b->ops->job_begin) b->ops->job_begin(wt.w->state);
    job->run(job, wt.w);
    cpu_cancel_set(NULL); /* the job's token lived on its stack: none may outlive it */
    if (b->ops->job_end) b->ops->job_end(wt.w->state);
    pthread_mutex_lock(&b->mu);
    b->running--;
    b->last_busy = api_now_ms();
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

/* Starts worker i's thread, which makes the worker's state itself (worker_start). */
static int start_worker(struct backend *b, int i, char *err, size_t errlen) {
  struct worker *w = &b->workers[i];
  *w = (struct worker){b->ops, NULL, i};
  struct worker_thread *wt = malloc(sizeof(*wt));
  if (wt) *wt = (struct worker_thread){b, w};
  pthread_mutex_lock(&b->mu); /* the thread reads nworkers */
  int rc = wt && pthread_create(&b->threads[i], NULL, worker_main, wt) == 0 ? 0 : -1;
  if (rc == 0) b->nworkers++;
  pthread_mutex_unlock(&b->mu);
  if (rc != 0) {
    free(wt);
    snprintf(err, errlen, "cannot start worker thread %d", i);
  }
  return rc;
}

/* The cores this process may use (its affinity within its cgroup's CPU quota), said once on
 * stderr: the default worker and thread counts follow from it. */
static int cores(void) {
  static int n; /* set by backend_new, or its start thread, before any worker runs */
  char why[700];
  if (!n && (n = cpu_cores("", why, sizeof(why))) > 0) fprintf(stderr, "blurd: %s\n", why);
  return n;
}

int api_cores(void) {
  char why[700]; /* said on stderr by cores(), once the backend starts */
  int n = cpu_cores("", why, sizeof(why));
  return n > 0 ? n : 1;
}

/* Picks the CUDA backend when asked for, or for auto when a device is visible, else the CPU.
 * Returns the number of GPUs it will use (0 for the CPU), or -1 with err filled. */
static int choose_ops(struct backend *b, const struct api_config *cfg, char *err, size_t errlen) {
#ifdef BLURD_CUDA
  int ndev = cfg->backend == API_BACKEND_CPU ? 0 : gpu_device_count();
  if (ndev > 0) {
    struct backend_gpu_shared *g = calloc(1, sizeof(*g));
    if (!g) return -1;
    g->ndev = ndev;
    g->fault_at = getenv("BLURD_TEST_GPU_FAULT") ? atol(getenv("BLURD_TEST_GPU_FAULT")) : 0;
    b->ops = &backend_gpu_ops;
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
  b->ops = &backend_cpu_ops;
  b->shared = backend_cpu_shared(cores());
  if (!b->shared) snprintf(err, errlen, "cannot start the CPU thread pool");
  return b->shared ? 0 : -1;
}

/* Workers: the flag, or one per core for the CPU. Per GPU the flag, or the cores shared out
 * among the GPUs (at least 2 each): a worker with the CPU codecs spends most of its time in
 * them. With the GPU codecs twice as many, as far as each GPU has 2.4 GB for every one: such
 * a worker sleeps most of a request, waiting for its batch decode and its kernels, so more of
 * them keep the decoder's batches and the GPU fuller (1080p /blur with the PSNR on a 16-core
 * H100 machine: 2,120 and 2,079 req/s with 32 workers and two decoder threads against 1,833 and
 * 1,872 with 16 and one, docs/engineering-notes.md). 32 workers held 77.1 GB of an H100's 85
 * after 12 s of 70-megapixel JPEGs: 2.4 GB each, with their share of the decoders and of CUDA. */
#define GPU_WORKER_BYTES ((size_t)2400 * 1000 * 1000)
static int worker_count(const struct api_config *cfg, int ndev, int gpu_codecs) {
  if (ndev == 0) return cfg->workers > 0 ? cfg->workers : cores();
  if (cfg->workers > 0) return cfg->workers * ndev;
  int per_gpu = (cores() + ndev - 1) / ndev, most = 2 * per_gpu;
#ifdef BLURD_CUDA
  for (int d = 0; gpu_codecs && d < ndev; d++) {
    struct gpu_device_info info;
    if (gpu_device_info(d, 0, &info) == 0 && (int)(info.mem_total / GPU_WORKER_BYTES) < most)
      most = (int)(info.mem_total / GPU_WORKER_BYTES);
  }
#endif
  if (gpu_codecs && most > per_gpu) per_gpu = most;
  return (per_gpu < 2 ? 2 : per_gpu) * ndev;
}

#ifdef BLURD_CUDA
/* Starts device dev's JPEG decoder, batching at most b->per_gpu decodes (its workers'), and tries
 * nvJPEG there with a context of its own. Returns 0, or -1 with the reason in why. */
static int start_jpeg_dev(struct backend *b, int dev, char *why, size_t whylen) {
  struct backend_gpu_shared *g = b->shared;
  double t = api_now_ms();
  struct gpu_jpeg *j =
      gpu_jpeg_new(dev, b->cfg.jpeg_batch_wait_us, b->per_gpu, b->cfg.jpeg_decoders, why, whylen);
  if (!j) return -1;
  struct gpu_ctx *trial = gpu_ctx_new(dev, why, whylen);
  int ok = trial && gpu_ctx_jpeg(trial, j) == GPU_OK;
  if (trial && !ok) snprintf(why, whylen, "nvJPEG fails on cuda:%d: %s", dev, gpu_ctx_error(trial));
  gpu_ctx_free(trial);
  if (!ok) {
    gpu_jpeg_free(j);
    return -1;
  }
  __atomic_store_n(&g->jpeg[dev], j, __ATOMIC_RELEASE); /* /metrics reads it */
  __atomic_store_n(&b->dev_open[dev], 1, __ATOMIC_RELEASE);
  fprintf(stderr, "blurd: cuda:%d: JPEG decoders ready %.2f s after the start (%.2f s)\n", dev,
          (api_now_ms() - b->t_start) / 1e3, (api_now_ms() - t) / 1e3);
  return 0;
}

/* Makes device 0's context and loads nvJPEG's library (milliseconds), then starts device 0's
 * decoder; the other devices' contexts and decoders are made by their first later worker
 * (device_start), at a moment that stalls no request (later_moment): made before ready, they
 * delayed it by 0.4 s with four GPUs; made after it at once, they stalled the first requests (27
 * to 32 times the rest), since making a context stalls every GPU's work for about 0.1 s. Returns
 * 0, or -1 with the reason in why. */
static int start_gpu_jpeg(struct backend *b, char *why, size_t whylen) {
  struct backend_gpu_shared *g = b->shared;
  double opened = gpu_device_open(0) == 0 ? api_now_ms() : -1;
  int rc = gpu_jpeg_load(&b->jpeg_lib, why, whylen);
  fprintf(stderr,
          "blurd: cuda:0's context made %.2f s after the start, nvJPEG loaded %.2f s after\n",
          (opened - b->t_start) / 1e3, (api_now_ms() - b->t_start) / 1e3);
  if (rc != 0) return -1;
  if (!(g->jpeg = calloc((size_t)b->ndev, sizeof(*g->jpeg)))) {
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  if (start_jpeg_dev(b, 0, why, whylen) != 0) return -1;
  b->jpeg_decoder = gpu_jpeg_decoder(g->jpeg[0]);
  return 0;
}

static void stop_gpu_jpeg(struct backend *b) {
  struct backend_gpu_shared *g = b->shared;
  for (int d = 0; g->jpeg && d < b->ndev; d++) gpu_jpeg_free(g->jpeg[d]);
  free(g->jpeg);
  g->jpeg = NULL;
}
#endif

/* Decides where JPEG runs, and starts the GPU's decoders when it is there. Returns 0, or -1 with
 * err filled when --gpu-codecs on cannot be had. */
static int start_codecs(struct backend *b, const struct api_config *cfg, int per_gpu, char *err,
                        size_t errlen) {
  char *why = b->codecs_why;
  size_t n = sizeof(b->codecs_why);
  int ok = 0;
  b->per_gpu = per_gpu;
  if (cfg->gpu_codecs == API_GPU_CODECS_OFF)
    snprintf(why, n, "--gpu-codecs off");
  else if (b->ndev == 0)
#ifdef BLURD_CUDA
    snprintf(why, n, "%s",
             cfg->backend == API_BACKEND_CPU ? "the CPU backend (--backend cpu)"
                                             : "no CUDA device is visible");
  else if (start_gpu_jpeg(b, why, n) != 0)
    stop_gpu_jpeg(b);
#else
    snprintf(why, n, "this build has no CUDA backend (nvcc was not found)");
#endif
  else
    ok = 1;
  if (!ok && cfg->gpu_codecs == API_GPU_CODECS_ON) {
    snprintf(err, errlen, "--gpu-codecs on: %s", why);
    return -1;
  }
  b->gpu_codecs = ok;
  b->batch_wait_us = cfg->jpeg_batch_wait_us;
  b->decoders = cfg->jpeg_decoders;
  if (ok) why[0] = 0;
  if (!ok && b->ndev > 0) fprintf(stderr, "blurd: JPEG runs on the CPU (libjpeg-turbo): %s\n", why);
  return 0;
}

/* "cpu", "cuda:0 NVIDIA H100 80GB HBM3" (what worker 0's context will be called; the workers
 * make their contexts later, on their own threads) or "cuda (2 devices)". */
static void backend_set_name(struct backend *b) {
  snprintf(b->name, sizeof(b->name), "%s", b->ndev ? "cuda:0" : "cpu");
#ifdef BLURD_CUDA
  struct gpu_device_info info;
  if (b->ndev > 1)
    snprintf(b->name, sizeof(b->name), "cuda (%d devices)", b->ndev);
  else if (b->ndev == 1 && gpu_device_info(0, 0, &info) == 0)
    snprintf(b->name, sizeof(b->name), "cuda:0 %.96s", info.name);
#endif
}

/* Chooses where JPEG runs (starting the GPU's decoders when it is there), then makes and starts
 * the workers. Returns 0, or -1 with err filled. */
static int start_workers(struct backend *b, char *err, size_t errlen) {
  const struct api_config *cfg = &b->cfg;
  /* the decoders batch at most the workers a GPU would have with the GPU codecs */
  int n = worker_count(cfg, b->ndev, 1), rc = 0;
  if (start_codecs(b, cfg, b->ndev ? n / b->ndev : 0, err, errlen) != 0) return -1;
  n = worker_count(cfg, b->ndev, b->gpu_codecs);
  b->workers = calloc((size_t)n, sizeof(*b->workers));
  b->threads = calloc((size_t)n, sizeof(*b->threads));
  if (!b->workers || !b->threads) return -1;
  int first = 0;
  for (int i = 0; i < n; i++) first += first_worker(b, i);
  pthread_mutex_lock(&b->mu);
  b->warming = first;
  b->later = n - first;
  pthread_mutex_unlock(&b->mu);
  __atomic_store_n(&b->started, 1, __ATOMIC_RELEASE);
  for (int i = 0; rc == 0 && i < n && !stopping(b); i++) rc = start_worker(b, i, err, errlen);
  if (rc == 0 && stopping(b)) { /* backend_free has begun: the workers not made never warm */
    pthread_mutex_lock(&b->mu);
    for (int i = b->nworkers; i < n; i++) b->warming -= first_worker(b, i);
    pthread_mutex_unlock(&b->mu);
  }
  return rc;
}

/* Chooses the backend (choose_ops) and makes what goes with its devices, then says so (chosen:
 * the HTTP threads read the name and the devices from then on). Returns 0, or -1 with err filled
 * (empty when out of memory). */
static int choose_backend(struct backend *b, char *err, size_t errlen) {
  int ndev = choose_ops(b, &b->cfg, err, errlen), nmu = ndev > 0 ? ndev : 1;
  if (ndev < 0) return -1;
  b->ndev = ndev;
  b->dev_failed = calloc((size_t)nmu, sizeof(*b->dev_failed));
  b->dev_open = calloc((size_t)nmu, sizeof(*b->dev_open));
  b->dev_mu = calloc((size_t)nmu, sizeof(*b->dev_mu));
  for (int d = 0; b->dev_mu && d < nmu; d++) pthread_mutex_init(&b->dev_mu[d], NULL);
  if (!b->dev_failed || !b->dev_open || !b->dev_mu) return -1;
  static const int warm_gpu[3] = API_WARM_GPU, warm_cpu[3] = API_WARM_CPU;
  memcpy(b->warm, b->cfg.warm[0] >= 0 ? b->cfg.warm : ndev ? warm_gpu : warm_cpu, sizeof(b->warm));
  backend_set_name(b);
  __atomic_store_n(&b->chosen, 1, __ATOMIC_RELEASE);
  return 0;
}

/* Whether CUDA starts on the start thread, after the HTTP front answers: asking CUDA for its
 * devices starts every visible GPU, 0.11 s with one H200, 0.33 s with two and up to 1 s with four
 * (2026-11-27). Where the driver's device node is missing it is asked at once, since it answers
 * at once; BLURD_TEST_GPU_NODE names another file to stand for the node (tests). */
static int defer_choice(const struct api_config *cfg) {
#ifdef BLURD_CUDA
  const char *node = getenv("BLURD_TEST_GPU_NODE");
  return cfg->backend != API_BACKEND_CPU && access(node ? node : "/dev/nvidiactl", F_OK) == 0;
#else
  (void)cfg;
  return 0;
#endif
}

/* The start thread (backend_new): chooses the backend when that was left to it, then starts the
 * codecs and the workers. A failure here (no GPU for --backend gpu, out of memory, no thread)
 * leaves a server that would never be ready: it exits, for its supervisor to restart it. */
static void *backend_start(void *arg) {
  struct backend *b = arg;
  char err[256] = "";
  pthread_setname_np(pthread_self(), "blurd-start");
  int rc = 0;
  if (!__atomic_load_n(&b->chosen, __ATOMIC_ACQUIRE)) {
    rc = choose_backend(b, err, sizeof(err));
    if (rc == 0)
      fprintf(stderr, "blurd: backend %s, chosen %.2f s after the start\n", b->name,
              (api_now_ms() - b->t_start) / 1e3);
  }
  if (rc == 0) rc = start_workers(b, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, "blurd: the backend does not start: %s\n", err[0] ? err : "out of memory");
    _exit(1);
  }
  return NULL;
}

struct backend *backend_new(const struct api_config *cfg, char *err, size_t errlen) {
  struct backend *b = calloc(1, sizeof(*b));
  if (errlen) err[0] = 0;
  if (!b) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_mutex_init(&b->mu, NULL);
  pthread_mutex_init(&b->warm_mu, NULL);
  pthread_cond_init(&b->warm_cv, NULL);
  pthread_cond_init(&b->cv, NULL);
  pthread_cond_init(&b->ready_cv, NULL);
  b->t_start = api_now_ms();
  b->cfg = *cfg;
  b->cap = cfg->queue > 0 ? cfg->queue : 1;
  b->ring = calloc((size_t)b->cap, sizeof(*b->ring));
  b->warming = 1; /* not ready until the workers are made and warm */
  int rc = b->ring ? 0 : -1, defer = defer_choice(cfg);
  if (rc == 0 && !defer) rc = choose_backend(b, err, errlen);
  /* CUDA's start and nvJPEG's decoders (about a second) go on a thread of its own, so that the
   * server answers (/readyz says it warms up) while they do, where CUDA's start was left to it or
   * with --gpu-codecs auto; otherwise (no device node) a failure of --gpu-codecs on stops the
   * start before the port answers, and the CPU backend starts in no time */
  if (rc == 0 && (defer || (b->ndev > 0 && cfg->gpu_codecs == API_GPU_CODECS_AUTO)))
    rc = (b->has_starter = pthread_create(&b->starter, NULL, backend_start, b) == 0) ? 0 : -1;
  else if (rc == 0)
    rc = start_workers(b, err, errlen);
  if (rc != 0 && !*err) snprintf(err, errlen, "out of memory");
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
    job->t_queued = b->last_busy = api_now_ms();
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
  pthread_cond_broadcast(&b->ready_cv); /* later workers waiting for their turn give up */
  pthread_mutex_unlock(&b->mu);
  if (b->has_starter) pthread_join(b->starter, NULL); /* it makes no worker once stop is set */
  pthread_mutex_lock(&b->warm_mu);                    /* a worker waiting to warm up gives up */
  pthread_cond_broadcast(&b->warm_cv);
  pthread_mutex_unlock(&b->warm_mu);
  for (int i = 0; i < b->nworkers; i++) pthread_join(b->threads[i], NULL);
  for (int i = 0; i < b->nworkers; i++)
    if (b->workers[i].state) b->ops->worker_free(b->workers[i].state);
  if (b->ops == &backend_cpu_ops) {
    backend_cpu_shared_free(b->shared);
  } else if (b->shared) {
#ifdef BLURD_CUDA
    stop_gpu_jpeg(b); /* after the workers: their contexts use the decoders */
#endif
    free(b->shared);
  }
  for (int d = 0; b->dev_mu && d < (b->ndev ? b->ndev : 1); d++)
    pthread_mutex_destroy(&b->dev_mu[d]);
  free(b->dev_mu);
  free(b->dev_failed);
  free(b->dev_open);
  pthread_cond_destroy(&b->cv);
  pthread_cond_destroy(&b->ready_cv);
  pthread_mutex_destroy(&b->mu);
  pthread_mutex_destroy(&b->warm_mu);
  pthread_cond_destroy(&b->warm_cv);
  free(b->threads);
  free(b->workers);
  free(b->ring);
  free(b);
}

int backend_leave_to_exit(const struct backend *b) {
  return __atomic_load_n(&b->chosen, __ATOMIC_ACQUIRE) && b->ops->leave_to_exit;
}

const char *backend_name(const struct backend *b) {
  return __atomic_load_n(&b->chosen, __ATOMIC_ACQUIRE) ? b->name : "starting";
}

int backend_workers_ready(struct backend *b) {
  pthread_mutex_lock(&b->mu);
  int n = b->made;
  pthread_mutex_unlock(&b->mu);
  return n;
}

int backend_warming(struct backend *b) {
  pthread_mutex_lock(&b->mu);
  int n = b->warming;
  pthread_mutex_unlock(&b->mu);
  return n;
}

void backend_stats(struct backend *b, int *queued, int *running, int *capacity, int *workers) {
  pthread_mutex_lock(&b->mu);
  *queued = b->count;
  *running = b->running;
  *capacity = b->cap;
  *workers = b->nworkers - b->failed;
  pthread_mutex_unlock(&b->mu);
}

#ifdef BLURD_CUDA
/* The GPUs in use, as far as the HTTP threads may know: 0 until the backend is chosen. */
static int devices(const struct backend *b) {
  return __atomic_load_n(&b->chosen, __ATOMIC_ACQUIRE) ? b->ndev : 0;
}

/* Whether device dev's context is made: reading its free memory before then would make it (in the
 * thread that asks, /readyz's during the start). */
static int dev_open(struct backend *b, int dev) {
  return __atomic_load_n(&b->dev_open[dev], __ATOMIC_ACQUIRE);
}
#endif

int backend_gpu_memory(struct backend *b, int dev, size_t *held, size_t *used, size_t *total) {
#ifdef BLURD_CUDA
  struct gpu_device_info info;
  if (dev < 0 || dev >= devices(b) || gpu_device_info(dev, dev_open(b, dev), &info) != 0) return -1;
  *held = 0;
  pthread_mutex_lock(&b->mu); /* the start thread may still add workers */
  int n = b->nworkers;
  pthread_mutex_unlock(&b->mu);
  for (int i = dev; i < n; i += b->ndev) { /* worker i uses device i % ndev */
    void *w = __atomic_load_n(&b->workers[i].state, __ATOMIC_ACQUIRE); /* NULL: not made yet */
    *held += backend_gpu_worker_bytes(w);
  }
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
  for (int d = 0; arr && d < devices(b); d++) {
    struct gpu_device_info info;
    char cc[16];
    if (gpu_device_info(d, dev_open(b, d), &info) != 0) continue;
    snprintf(cc, sizeof(cc), "%d.%d", info.major, info.minor);
    json_t *free_bytes = /* null until the device's context is made */
        info.mem_free ? json_integer((json_int_t)info.mem_free) : json_null();
    json_array_append_new(arr, json_pack("{s:i, s:s, s:s, s:I, s:o, s:i, s:i}", "index", d, "name",
                                         info.name, "compute_capability", cc, "memory_total_bytes",
                                         (json_int_t)info.mem_total, "memory_free_bytes",
                                         free_bytes, "multiprocessors", info.sm_count, "workers",
                                         b->nworkers / b->ndev));
  }
#else
  (void)b;
#endif
  return arr;
}

json_t *backend_codecs(struct backend *b) {
  if (!__atomic_load_n(&b->started, __ATOMIC_ACQUIRE))
    return json_pack("{s:b, s:s}", "gpu", 0, "reason",
                     "starting: JPEG's codecs are not chosen yet");
  int gpu = b->gpu_codecs;
  json_t *o = json_pack("{s:b, s:s, s:s, s:s, s:s}", "gpu", gpu, "jpeg_decode",
                        gpu ? b->jpeg_decoder : "libjpeg-turbo", "jpeg_encode",
                        gpu ? "nvjpeg" : "libjpeg-turbo", "png", "libpng", "webp", "libwebp");
  if (o) { /* by level: codec_png_deflater; by file: codecs/png.c */
    json_object_set_new(o, "png_encode", json_string("deflate-rle (levels 1 and 2), libdeflate"));
    json_object_set_new(o, "webp_encode",
                        json_string("blurd-vp8 (smooth RGB images at effort 2), libwebp"));
    json_object_set_new(o, "png_decode",
                        json_string("libdeflate (8- and 16-bit, not interlaced, "
                                    "no tRNS), libpng"));
  }
  if (o && gpu)
    json_object_update_new(o, json_pack("{s:s, s:i, s:i}", "library", b->jpeg_lib, "batch_wait_us",
                                        b->batch_wait_us, "decoders", b->decoders));
  if (o && !gpu) json_object_set_new(o, "reason", json_string(b->codecs_why));
  return o;
}

int backend_gpu_codecs(struct backend *b, const char **decoder) {
  int gpu = __atomic_load_n(&b->started, __ATOMIC_ACQUIRE) && b->gpu_codecs;
  *decoder = gpu ? b->jpeg_decoder : "libjpeg-turbo";
  return gpu;
}

int backend_batch_stats(struct backend *b, int dev, struct batch_stats *s) {
#ifdef BLURD_CUDA
  struct backend_gpu_shared *g = devices(b) ? b->shared : NULL;
  struct gpu_jpeg_stats j;
  struct gpu_jpeg *jd = g && g->jpeg && dev >= 0 && dev < b->ndev
                            ? __atomic_load_n(&g->jpeg[dev], __ATOMIC_ACQUIRE) /* NULL: not yet */
                            : NULL;
  if (!jd) return -1;
  gpu_jpeg_stats(jd, &j);
  *s = (struct batch_stats){j.batches, j.images, j.single, {0}};
  _Static_assert(GPU_JPEG_BATCH_BUCKETS == BATCH_BUCKETS, "batch histogram buckets");
  for (int i = 0; i < BATCH_BUCKETS; i++) s->hist[i] = j.hist[i];
  return 0;
#else
  (void)b, (void)dev, (void)s;
  return -1;
#endif
}

/* The engine's internals, shared by its files: a backend's verbs (struct backend_ops, one file
 * each: backend_cpu.c, backend_gpu.c) and the table of them (start.c), the engine's state (start.c
 * chooses and starts the backend, workers.c runs the workers, queue.c holds the jobs, warm.c warms
 * the workers, status.c reports), and the host's codecs every backend uses. Nothing outside
 * engine/ includes it. */
#ifndef BLURD_ENGINE_INT_H
#define BLURD_ENGINE_INT_H

#include "engine.h"

#include <pthread.h>

/* A backend's verbs. The engine knows no more of a backend than these: the queue, the start and
 * the pipeline call them, and a new backend is a file that fills them and a line of start.c's
 * table. A backend with keeps_images keeps a job's image on its device from one step to the
 * next: a codec_image whose pixel pointer is NULL is then the worker's image, valid until its next
 * job. A backend with devices (ndev > 0) runs workers on device index % ndev. */
struct backend_ops {
  const char *kind;           /* "cpu", "cuda": the X-Backend prefix and the start log's */
  enum engine_backend column; /* the column of the operations' computes it runs */
  int keeps_images;           /* images stay on the device between steps (see above) */
  int leave_to_exit;          /* the process's exit frees its workers faster than worker_free */
  int absent;                 /* this build lacks it: probe only says why */
  /* ---- the start (start.c) ---- */
  /* Whether asking it for its devices may take long (CUDA starts every GPU): the engine then asks
   * on a thread of its own, after the server answers. NULL: never. */
  int (*probe_is_slow)(const struct engine_config *cfg);
  /* The devices it can use here (0 for the host), or -1 when it cannot run (why says so). */
  int (*probe)(const struct engine_config *cfg, char *why, size_t n);
  /* What its workers share for ndev devices and the process's cores; NULL when out of memory or
   * it cannot start (err says so). */
  void *(*shared_new)(const struct engine_config *cfg, int ndev, int cores, char *err, size_t n);
  void (*shared_free)(void *shared); /* after every worker is freed */
  /* Workers a device runs (ndev 0: in all), by cfg->workers or cores; fast_codecs: its own codecs
   * run (the GPU's workers then sleep through their decodes, and more of them keep it busy). */
  int (*workers_per_device)(const struct engine_config *cfg, int ndev, int cores, int fast_codecs);
  /* Starts the backend's own codecs for per_device workers a device (device 0's now, making its
   * context): returns 1 when they run, 0 when the host's codecs serve (why says why), -1 when they
   * cannot start and cfg requires them (why says why). NULL: the host's codecs always. */
  int (*codecs_start)(void *shared, const struct engine_config *cfg, int per_device, char *why,
                      size_t n);
  /* Makes device dev ready for its workers before the first one starts (its codecs, on the devices
   * after the first). Returns 1 when that made its context, 0 when there was nothing to do, or -1
   * with why: the device takes no jobs. NULL: nothing to do. */
  int (*device_start)(void *shared, int dev, char *why, size_t n);
  /* Its name for ndev devices ("cpu", or "cuda:0 " and the device's name), into buf. */
  void (*name)(int ndev, char *buf, size_t n);
  /* ---- a worker ---- */
  /* Sets up worker index's state (a stream, buffers). Returns 0, or -1 with err filled. */
  int (*worker_new)(void *shared, int index, void **state, char *err, size_t errlen);
  void (*worker_free)(void *state);
  /* Called on the worker's thread around each job; may be NULL. */
  void (*job_begin)(void *state);
  void (*job_end)(void *state);
  /* Decodes buf into img with codec_decode's checks, limits and sentences; the pixels may stay on
   * the device (img->pixels NULL). *codec: the decoder that ran ("nvjpeg-hw", "libpng"). */
  enum err (*decode)(void *state, const uint8_t *buf, size_t len, const struct codec_limits *lim,
                     struct codec_image *img, const char **codec, char *msg, size_t msglen);
  /* Encodes img, wherever its pixels are, into *out (malloc'd) of *len bytes; *codec: the encoder
   * that ran; *download: ms to bring a device image to a host encoder, or -1. */
  enum err (*encode)(void *state, const struct codec_image *img, const struct codec_encode_opts *o,
                     uint8_t **out, size_t *len, const char **codec, double *download, char *msg,
                     size_t msglen);
  /* Gives img host pixels: when they are on the device, a copy in a new malloc'd buffer. */
  enum err (*to_host)(void *state, struct codec_image *img);
  /* The op_env its computes get (its worker, auto, whether it measures itself). */
  struct op_env (*env)(void *state);
  /* The method `auto` stands for on this backend, for this sigma and image size. */
  enum cpu_method (*auto_method)(double sigma, int width, int height);
  /* The name clients see in X-Backend for work done by this worker. */
  const char *(*worker_name)(void *state);
  /* Device bytes the worker holds, as of its last job; NULL: none. */
  size_t (*worker_bytes)(void *state);
  /* ---- what /readyz, /methods and /metrics show ---- */
  /* Device dev: its JSON description for /readyz (new reference) with workers workers, and its used
   * and total memory; opened: its context is made (reading its free memory otherwise makes one).
   * NULL for a backend without devices. */
  json_t *(*device_json)(int dev, int opened, int workers);
  int (*device_memory)(int dev, int opened, size_t *used, size_t *total);
  /* The backend's own codecs, when they run: adds their names to o (/readyz's codecs) and says
   * which JPEG decoder runs in *jpeg_decoder. NULL: none. */
  void (*codecs_json)(void *shared, json_t *o, const char **jpeg_decoder);
  /* The JPEG decode batches of device dev: 0, or -1 when it decodes none. NULL: none. */
  int (*batch_stats)(void *shared, int dev, struct engine_batch_stats *s);
  /* Its video decoders' counts: 0, or -1 when none run. NULL: none. */
  int (*video_stats)(void *shared, struct engine_video_stats *s);
};

extern const struct backend_ops backend_cpu_ops, backend_gpu_ops;

struct worker {
  const struct backend_ops *ops;
  void *state; /* ops' per-worker state (atomic: /metrics reads it) */
  int index;
  struct engine *engine;
};

struct engine {
  struct engine_config cfg;
  const struct backend_ops *ops;
  void *shared;   /* the ops' shared state */
  char name[128]; /* "cpu", or "cuda:0 " and the device's name */
  pthread_mutex_t mu;
  pthread_cond_t cv;        /* a job was queued, or stop */
  struct job **ring;        /* queued jobs, FIFO */
  int cap, head, count;     /* ring capacity, first job, jobs queued */
  int running;              /* jobs on a worker now */
  int stop;                 /* set by engine_free: run what is queued, then exit */
  int nworkers;             /* worker threads started */
  int failed;               /* workers whose state could not be made: they take no jobs */
  int ndev;                 /* devices in use; 0 for the host */
  int fast_codecs;          /* the backend's own codecs run */
  const char *jpeg_decoder; /* the JPEG decoder's name, when they do */
  int warm[3];              /* the warm-up image: width, height, channels (0: none) */
  int warming;              /* first workers not yet warm */
  int later;                /* the others not yet made */
  int made;                 /* workers made and warm: they take jobs */
  int demand;               /* jobs that waited LATER_WAIT_MS for a worker: later ones wanted */
  double last_busy;         /* clock_ms() when a job was last queued, taken or done */
  pthread_cond_t ready_cv;  /* warming reached 0, or stop */
  pthread_mutex_t *dev_mu;  /* held while a later worker of that device makes its state */
  int *dev_failed;          /* the device could not start: it has no workers */
  int *dev_open;            /* the device's context is made (atomic): its free memory may be read */
  double t_start;           /* clock_ms() when engine_new began */
  double slowest[2];        /* the slowest worker's state and warm-up, ms (under mu) */
  pthread_mutex_t warm_mu;  /* guards warm_bytes */
  pthread_cond_t warm_cv;   /* a warm-up finished */
  size_t warm_bytes;        /* the host images of the warm-ups running now */
  char codecs_why[384];     /* why the host's codecs serve, when they do */
  char unavailable[256];    /* why a preferred backend was not chosen, or "" */
  struct worker *workers;
  pthread_t *threads;
  pthread_t starter; /* the start thread (start.c), when there is one */
  int has_starter;
  int chosen;  /* ops, ndev, the device arrays and the name are set (atomic) */
  int started; /* the codecs are chosen and the workers made (atomic) */
};

/* ---- queue.c ---- */

/* Whether engine_free has begun: a worker still warming stops at its next step. */
int engine_stopping(struct engine *e);

/* ---- workers.c ---- */

/* Starts worker i's thread, which makes the worker's state and warms it (worker_start). Returns
 * 0, or -1 with err filled. */
int engine_start_worker(struct engine *e, int i, char *err, size_t errlen);
/* Whether worker i is one of the first, which warm before the engine is ready. */
int engine_first_worker(const struct engine *e, int i);

/* ---- start.c ---- */

/* The cores this process may use (its affinity within its cgroup's CPU quota), said once on
 * stderr. */
int engine_cores(void);

/* ---- warm.c ---- */

/* Runs worker w's warm-up: the configured computes on a synthetic image of the warm-up size, then
 * a JPEG round trip of the result, so that its buffers, kernels and codec states are made before
 * its first job. */
void engine_warm_up(struct engine *e, struct worker *w);

/* ---- the host's codecs (backend_cpu.c), which every backend uses for what stays there ---- */

/* The error of a codec status (CODEC_CANCELLED: the job's token says why). */
enum err backend_codec_error(enum codec_status s);
/* The codec's name for format f ("libpng"). */
const char *backend_host_codec(enum codec_format f);
/* codec_decode and codec_encode with the engine's errors and the codec's name in *codec. */
enum err backend_host_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                             struct codec_image *img, const char **codec, char *msg, size_t msglen);
enum err backend_host_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                             uint8_t **out, size_t *len, const char **codec, char *msg,
                             size_t msglen);

#endif

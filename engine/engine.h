/* engine: what runs the operations. A bounded job queue and the workers that take its jobs, each
 * on one backend (the CPU's fork-join pool, or a GPU's stream and buffers: engine/backend_*.c,
 * chosen at start from a table of them); the start of the backend and its warm-up; and the
 * pipeline of an image job on a worker (decode, the operation's compute for that backend, encode),
 * checking the job's deadline and its client between the steps and, through the cancel token,
 * within them. The api above describes the operations and answers HTTP; below are the codecs, the
 * CPU's filters and the GPU's kernels. Nothing here knows HTTP or an operation's parameters. */
#ifndef BLURD_ENGINE_H
#define BLURD_ENGINE_H

#include "../base/clock.h"
#include "../base/errors.h"
#include "../codecs/codecs.h"
#include "../cpu/cpu.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The backends, as the columns of an operation's computes (op_compute_fn compute[]): the CPU,
 * every build's and the fallback for a compute another backend lacks, and the GPU's, in builds
 * with CUDA. */
enum engine_backend { ENGINE_CPU, ENGINE_GPU, ENGINE_NBACKENDS };

/* ---- the compute interface: what an operation's compute gets and gives ---- */

struct stage_times { /* milliseconds; negative when the backend has no such stage */
  double filter;     /* the method itself (on a GPU: upload and kernels) */
  double reference;  /* exact reference and PSNR */
  double upload;     /* host to device, when the image was decoded on the host */
  double kernel;     /* device compute, CUDA events */
  double download;   /* device to host, when a host encoder needs the pixels */
};

struct op_result {         /* what the compute tells the client besides the pixels */
  const char *method;      /* X-Method (the method that ran, auto resolved), or NULL */
  double sigma_x, sigma_y; /* X-Sigma (x,y) of a blur; 0 for other operations */
  double psnr;             /* dB, INFINITY when identical; NAN when not measured */
  double scale;            /* /variance: X-Scale; 0 otherwise */
  double min, mean, max;   /* /variance: the map's statistics, unscaled */
};

struct op_io {             /* one compute's images and reports */
  struct codec_image *in;  /* decoded; pixels NULL: on the worker's device */
  struct codec_image *out; /* zeroed on entry; the compute's result, pixels NULL when on the
                              device (the caller frees host pixels) */
  struct op_result *res;
  struct stage_times *t; /* filled by the compute; -1 for stages it has not */
  char *msg;             /* a sentence for an error the compute returns, or left "" */
  size_t msglen;
};

/* A worker's backend as a compute sees it (one made per job from the worker). */
struct op_env {
  void *worker; /* the backend's own: the CPU's fork-join pool (struct cpu_pool), the GPU's
                   worker (for op_gpu_run); NULL for a compute run on the host without a pool */
  enum cpu_method (*auto_method)(double sigma, int width, int height); /* the backend's auto */
  /* Whether the backend computes blur b of img exactly and measures its PSNR in the same pass;
   * NULL: never. */
  int (*measures_itself)(struct op_env *env, const struct cpu_blur *b,
                         const struct codec_image *img);
};

/* An operation's compute on one backend: io->in to io->out, accuracy and metadata in io->res.
 * Returns ERR_OK; ERR_BAD_PARAMETER with a sentence (what only the image decides, such as a region
 * outside it); ERR_OUT_OF_MEMORY or ERR_GPU_ERROR (this job failed, the service carries on);
 * ERR_DEADLINE_EXCEEDED or ERR_CLIENT_GONE when the job's cancel token stopped it (cpu_stop_error:
 * the CPU's filters return it, the GPU's run asks it between its upload and its launch); or
 * ERR_GPU_LOST (the process must restart). */
typedef enum err (*op_compute_fn)(struct op_env *env, const void *params, struct op_io *io);

/* The shape of img as a cpu_image (its pixels, NULL when on the device). */
struct cpu_image op_image(const struct codec_image *img);
/* A host buffer for io->out of in's shape (the CPU computes write there). */
enum err op_host_output(struct op_io *io);

#ifdef BLURD_CUDA
#include "../gpu/gpu.h"

/* A launch on the worker's device, from its input image (shape img) to its output image. */
typedef enum gpu_status (*op_gpu_launch)(struct gpu_ctx *ctx, const void *arg,
                                         const struct cpu_image *img, struct cpu_accuracy *acc,
                                         struct gpu_times *t);
/* Runs launch with arg on env's device: uploads io->in first when its pixels are on the host,
 * checks the job's deadline between the upload and the launch, and leaves the result on the
 * device as io->out (io->in's shape; the launch's caller adjusts it when it differs). Fills
 * io->t (filter = upload + kernels). acc: the launch's accuracy, or NULL. */
enum err op_gpu_run(struct op_env *env, struct op_io *io, op_gpu_launch launch, const void *arg,
                    struct cpu_accuracy *acc);
#endif

/* ---- the engine ---- */

enum engine_choice { ENGINE_AUTO, ENGINE_ONLY_CPU, ENGINE_ONLY_GPU };

/* JPEG on the GPU: when it loads (auto), required (on: an error at start without it), never. */
enum engine_gpu_codecs { ENGINE_GPU_CODECS_AUTO, ENGINE_GPU_CODECS_ON, ENGINE_GPU_CODECS_OFF };

/* A compute each worker runs once on its warm-up image before it takes jobs. */
struct engine_warm {
  const op_compute_fn *compute; /* the operation's, by backend */
  const void *params;           /* its parameters (outlive the start) */
  int device_only;              /* only on a backend with devices (their kernels load) */
};

#define ENGINE_WARM_MAX 2

struct engine_config {
  enum engine_choice backend;
  int workers; /* job workers (per GPU with the CUDA backend); 0: one per core */
  int queue;   /* jobs that may wait for a worker; more are refused */
  enum engine_gpu_codecs gpu_codecs;
  int jpeg_batch_wait_us; /* the longest a GPU JPEG decode waits for others to batch with */
  int jpeg_decoders;      /* batch threads per GPU (0: 1) */
  int heic_decoders;      /* video decoder sessions per GPU for HEIC; 0: HEIC on the CPU */
  /* Each worker's warm-up image: width, height, channels; 0 x 0: none; -1 x -1: the backend's
   * default. The computes it runs on it, in order, then a JPEG round trip of the result. */
  int warm[3];
  struct engine_warm warm_ops[ENGINE_WARM_MAX];
  int nwarm_ops;
  /* Called once, from any thread, when the process must stop: status 70 when the GPU failed for
   * good (a sticky CUDA error), 1 when the backend chosen after the start could not start. */
  void (*on_fatal)(void *arg, int status);
  void *on_fatal_arg;
};

struct engine;
struct worker; /* a worker thread of the engine, as a job sees it */

struct job;
typedef void (*job_fn)(struct job *job, struct worker *w);

struct job {
  job_fn run;      /* called once on a worker thread; owns the job from then on */
  double t_queued; /* clock_ms() at submission */
};

/* Starts the backend and its workers (the choice of the backend and CUDA's start may go on in the
 * background: engine_name says "starting" until then). Returns NULL with a sentence in err. */
struct engine *engine_new(const struct engine_config *cfg, char *err, size_t errlen);
/* Runs the jobs still queued, joins the workers and frees e; e may be NULL. */
void engine_free(struct engine *e);
/* Queues job. Returns 0, or -1 when the queue is full or the engine stops (not taken). */
int engine_submit(struct engine *e, struct job *job);
/* "cpu", or e.g. "cuda:0 " and the device's name; "starting" until the backend is chosen. */
const char *engine_name(const struct engine *e);
/* The kinds of the backends this build has ("cpu,cuda"), in the order of their columns. */
const char *engine_built(void);
/* Whether the process's exit frees the workers faster than engine_free would. */
int engine_leave_to_exit(const struct engine *e);
/* Workers still warming up (they take jobs once warm). */
int engine_warming(struct engine *e);
/* Workers made and warm, which take jobs. */
int engine_workers_ready(struct engine *e);
/* Jobs waiting, jobs running, queue capacity, workers. */
void engine_stats(struct engine *e, int *queued, int *running, int *capacity, int *workers);
/* Device memory of device dev: bytes the workers hold, and the device's used and total bytes.
 * Returns 0, or -1 when the backend has no such device. */
int engine_device_memory(struct engine *e, int dev, size_t *held, size_t *used, size_t *total);
/* The backend's devices as a JSON array (new reference); empty for the CPU. */
json_t *engine_devices(struct engine *e);
/* The codecs the backend runs, for /readyz and /methods (new reference). */
json_t *engine_codecs(struct engine *e);

/* Whether the backend's own JPEG codecs run (the GPU's); *jpeg_decoder: the JPEG decoder's name. */
int engine_device_codecs(struct engine *e, const char **jpeg_decoder);

#define ENGINE_BATCH_BUCKETS 8 /* JPEG decode batches of size <= 1, 2, 4, ... 64, then more */

struct engine_batch_stats { /* JPEG decode batches of one device */
  unsigned long long batches, images, single;
  unsigned long long hist[ENGINE_BATCH_BUCKETS];
};

/* The JPEG decode batches of device dev. Returns 0, or -1 when it decodes no JPEG. */
int engine_batch_stats(struct engine *e, int dev, struct engine_batch_stats *s);

#define ENGINE_VIDEO_REASONS 24 /* the distinct reasons a video decode is left to the CPU */

struct engine_video_stats {                 /* images of coded pictures (HEIC), every device's */
  unsigned long long on_gpu;                /* decoded on the video decoders */
  int nreasons;                             /* why the others were decoded on the CPU: */
  const char *reason[ENGINE_VIDEO_REASONS]; /* static phrases */
  unsigned long long count[ENGINE_VIDEO_REASONS];
};

/* The video decoders' counts. Returns 0, or -1 when the backend has none running. */
int engine_video_stats(struct engine *e, struct engine_video_stats *s);
/* The name clients see in X-Backend for work done by worker w. */
const char *engine_worker_name(struct worker *w);

/* ---- the pipeline of an image job (pipeline.c) ---- */

struct engine_timing { /* an image job's stage times, ms; negative when not applicable */
  double decode, encode;
  struct stage_times st;
  const char *decoder, *encoder; /* the codecs that ran, or NULL */
};

/* What an image job asks of its worker. */
struct engine_image_job {
  const uint8_t *image; /* the upload */
  size_t len;
  struct codec_limits lim;
  const op_compute_fn *compute;  /* the operation's computes by backend; NULL: none (a convert) */
  const void *params;            /* its parameters */
  int to_srgb;                   /* colorspace=srgb: the pixels into sRGB, the profile dropped */
  double deadline;               /* clock_ms() past which the job stops; 0: none */
  int (*client_gone)(void *arg); /* has the client left? may be NULL */
  void *arg;
  /* Once the image is decoded, before the compute: the answer's encoding for an input of format
   * in (o zeroed; the engine adds the profile), or an error with a sentence in msg (a 406). */
  enum err (*output)(void *arg, enum codec_format in, struct codec_encode_opts *o, char *msg,
                     size_t msglen);
};

/* What it gives back; zero it before, free it with engine_image_free after. */
struct engine_image {
  struct codec_image in, out;
  const struct codec_image *img; /* the pixels encoded: out, or in without a compute */
  uint8_t *enc;                  /* the encoded answer (malloc'd) */
  size_t len;
  uint8_t *icc; /* the upload's ICC profile, kept on the answer; or NULL */
  size_t icc_len;
  struct op_result res;
  struct engine_timing t;
  char msg[256]; /* a sentence for the error returned, or "" */
};

/* Decodes job's image on worker w's backend, runs the compute for that backend (the CPU's where
 * it has none) and encodes the result, under the job's cancel token: every step stops when the
 * deadline passes or the client leaves, and the answer is then ERR_DEADLINE_EXCEEDED or
 * ERR_CLIENT_GONE, never a result made from unfinished work. Returns ERR_OK with r filled, or the
 * error (ERR_GPU_LOST: the engine's on_fatal was called). */
enum err engine_image_run(struct worker *w, const struct engine_image_job *job,
                          struct engine_image *r);
/* Frees what r holds. */
void engine_image_free(struct engine_image *r);

#endif

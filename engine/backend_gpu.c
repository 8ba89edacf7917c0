/* The CUDA backend: its verbs (backend_ops), each worker with its own context (a stream, device
 * buffers) on device index % ndev. With the GPU codecs, JPEG is decoded into device memory by
 * nvJPEG (batched across the workers by gpu/jpeg.cu) and encoded there; PNG, WebP, and what
 * nvJPEG refuses, go through the CPU codecs with an upload or a download, but for a file that a
 * codec makes from work done on the device (codec_encode_held with gpu_vp8_pass: lossy WebP's
 * first pass, no download). A format that hands over its coded pictures (HEIC) is decoded by the
 * device's video decoders (gpu/nvdec.cu) into device memory too, when they take it; else on the
 * CPU, with the reason in the decode's desc and counted. An operation runs as its descriptor's GPU
 * compute (op->gpu), which launches through op_gpu_run: the image stays on the device from the
 * decode to the encode. The kernels are not interrupted: the job's cancel token (cpu_stop_error) is
 * asked between the host-side steps, and the CPU codecs ask it themselves (codec_cancel_set). A
 * build without CUDA has none of this. */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef BLURD_CUDA
/* What every GPU worker shares. */
struct backend_gpu_shared {
  int ndev;               /* visible devices; worker i uses device i % ndev */
  long fault_at;          /* tests only (BLURD_TEST_GPU_FAULT=N): GPU job N faults; 0: never */
  long jobs;              /* GPU jobs started (atomic) */
  struct gpu_jpeg **jpeg; /* ndev JPEG decoders when JPEG runs on the GPU, else NULL */
  const char *jpeg_lib;   /* the nvJPEG library, when it does */
  int per_gpu;            /* a device's workers with the GPU codecs: its decoders' largest batch */
  int batch_wait_us, decoders; /* the configuration's */
  double t_start;              /* clock_ms() when it was made */
  struct gpu_nvdec **nvdec;    /* ndev HEIC video decoder pools when HEIC runs there, else NULL */
  int heic_sessions;           /* the configuration's sessions a device */
  char video_why[192];         /* why HEIC is decoded on the CPU, when it is */
  pthread_mutex_t video_mu;    /* guards video and video_desc */
  struct engine_video_stats video;
  char video_desc[ENGINE_VIDEO_REASONS][160]; /* the decode's desc for each reason */
};

struct gpu_worker {
  struct gpu_ctx *ctx;
  struct backend_gpu_shared *shared;
  int dev;            /* its device */
  int jpeg;           /* JPEG is decoded and encoded on the GPU */
  enum gpu_image img; /* which device image holds the job's image when its pixels are NULL */
  size_t bytes;       /* gpu_ctx_bytes after the last job, for /metrics (atomic) */
};

static int gpu_worker_new(void *shared, int index, void **state, char *err, size_t errlen) {
  struct backend_gpu_shared *g = shared;
  struct gpu_worker *w = calloc(1, sizeof(*w));
  if (!w) return -1;
  w->shared = g;
  w->dev = index % g->ndev;
  w->ctx = gpu_ctx_new(w->dev, err, errlen);
  if (w->ctx && g->jpeg && gpu_ctx_jpeg(w->ctx, g->jpeg[index % g->ndev]) != GPU_OK) {
    snprintf(err, errlen, "%s", gpu_ctx_error(w->ctx));
    gpu_ctx_free(w->ctx);
    w->ctx = NULL;
  }
  if (!w->ctx) {
    free(w);
    return -1;
  }
  w->jpeg = g->jpeg != NULL;
  *state = w;
  return 0;
}

static void gpu_worker_free(void *state) {
  struct gpu_worker *w = state;
  gpu_ctx_free(w->ctx);
  free(w);
}

static void gpu_job_begin(void *state) {
  struct gpu_worker *w = state;
  w->img = GPU_INPUT;
  gpu_jpeg_expect(w->ctx, 1); /* until its decode: a batch may wait for this worker */
}

static void gpu_job_end(void *state) {
  gpu_jpeg_expect(((struct gpu_worker *)state)->ctx, 0);
}

/* Counts a GPU call; the one BLURD_TEST_GPU_FAULT names gets a sticky error first. */
static struct gpu_ctx *gpu_job_ctx(struct gpu_worker *w) {
  if (w->shared->fault_at &&
      __atomic_add_fetch(&w->shared->jobs, 1, __ATOMIC_SEQ_CST) == w->shared->fault_at)
    gpu_inject_fault(w->ctx); /* a sticky error: the job's call fails with it */
  return w->ctx;
}

/* The api's error for the status s of a GPU call on worker w. Notes the device memory w holds,
 * for /metrics. */
static enum err gpu_error(struct gpu_worker *w, enum gpu_status s) {
  __atomic_store_n(&w->bytes, gpu_ctx_bytes(w->ctx), __ATOMIC_RELAXED);
  switch (s) {
  case GPU_OK:
    return ERR_OK;
  case GPU_NO_MEMORY:
    return ERR_OUT_OF_MEMORY;
  case GPU_ERROR:
    return ERR_GPU_ERROR;
  case GPU_FATAL:
    return ERR_GPU_LOST;
  }
  return ERR_GPU_ERROR;
}

/* Counts an image the video decoders did not take, for why (a static phrase), and returns the
 * CPU decode's desc for Server-Timing: "libheif (video decoders: why)". */
static const char *video_refused(struct backend_gpu_shared *g, const char *why) {
  const char *desc = backend_host_codec(CODEC_HEIC);
  struct engine_video_stats *v = &g->video;
  pthread_mutex_lock(&g->video_mu);
  int i = 0;
  while (i < v->nreasons && strcmp(v->reason[i], why) != 0) i++;
  if (i == v->nreasons && i < ENGINE_VIDEO_REASONS) {
    v->reason[i] = why;
    snprintf(g->video_desc[i], sizeof(g->video_desc[i]), "%s (video decoders: %s)", desc, why);
    v->nreasons++;
  }
  if (i < v->nreasons) v->count[i]++, desc = g->video_desc[i];
  pthread_mutex_unlock(&g->video_mu);
  return desc;
}

/* A picture's own matrix (gpu_hevc_src's coeffs) through the format's conversion. */
static int video_coeffs(void *arg, int matrix, int full, struct gpu_yuv *k) {
  const struct codec_pictures *p = arg;
  struct codec_yuv c;
  if (!p->coeffs(matrix, full, &c)) return 0;
  *k = (struct gpu_yuv){c.r_cr, c.g_cb, c.g_cr, c.b_cb, c.full, c.identity};
  return 1;
}

/* A file whose format hands over its coded pictures (HEIC) goes to the device's video decoders,
 * which write it into the input image. Returns 1 with *e when that decided the job (decoded, or
 * the device failed), or 0 when the CPU decodes the file: *codec is then the desc that says why
 * the video decoders did not take it, or NULL when the file is the CPU decoder's to judge. */
static int video_decode(struct gpu_worker *w, struct gpu_nvdec *nv,
                        const struct codec_format_desc *fd, const uint8_t *buf, size_t len,
                        const struct codec_limits *lim, struct codec_image *img, const char **codec,
                        enum err *e) {
  struct codec_pictures p;
  const char *why = NULL;
  *codec = NULL;
  gpu_jpeg_expect(w->ctx, 0);
  enum codec_status cs = fd->pictures(buf, len, lim, &p, &why);
  if (cs != CODEC_OK) {
    if (cs == CODEC_UNSUPPORTED && why) *codec = video_refused(w->shared, why);
    return 0;
  }
  struct gpu_picture *pic = malloc((size_t)p.n * sizeof(*pic));
  enum gpu_status s = GPU_NO_MEMORY;
  struct cpu_image shape;
  if (pic) {
    for (int i = 0; i < p.n; i++)
      pic[i] = (struct gpu_picture){p.pic[i].off, p.pic[i].len, p.pic[i].x, p.pic[i].y};
    struct gpu_hevc_src src = {
        .data = p.stream,
        .pic = pic,
        .n = p.n,
        .width = p.width,
        .height = p.height,
        .tile_w = p.tile_w,
        .tile_h = p.tile_h,
        .bits = p.bits,
        .orientation = p.orientation,
        .has_k = p.has_k,
        .k = {p.k.r_cr, p.k.g_cb, p.k.g_cr, p.k.b_cb, p.k.full, p.k.identity},
        .coeffs = video_coeffs,
        .arg = &p};
    *e = cpu_stop_error();
    s = *e == ERR_OK ? gpu_hevc_decode(gpu_job_ctx(w), nv, &src, &shape, &why) : GPU_OK;
  }
  free(pic);
  codec_pictures_free(&p);
  if (*e != ERR_OK && s == GPU_OK) return 1; /* stopped */
  if (s == GPU_ERROR) {
    *codec = video_refused(w->shared, why ? why : "a CUDA error");
    return 0;
  }
  *e = gpu_error(w, s);
  if (s != GPU_OK) return 1;
  *img = (struct codec_image){NULL,        shape.width, shape.height, 3,
                              shape.depth, CODEC_HEIC,  p.orientation};
  w->img = GPU_INPUT;
  *codec = "nvdec";
  __atomic_add_fetch(&w->shared->video.on_gpu, 1, __ATOMIC_RELAXED);
  return 1;
}

/* A JPEG goes to nvJPEG once libjpeg has read its headers (refusing what the CPU decoder refuses,
 * in its words), when it is one nvJPEG decodes as libjpeg does and is not cut short. A file nvJPEG
 * fails on is decoded again by libjpeg, whose verdict stands; the job's cancel token is asked
 * first. */
static enum err gpu_decode(void *state, const uint8_t *buf, size_t len,
                           const struct codec_limits *lim, struct codec_image *img,
                           const char **codec, char *msg, size_t msglen) {
  struct gpu_worker *w = state;
  struct codec_jpeg_info info;
  enum codec_format f = codec_sniff(buf, len);
  struct backend_gpu_shared *g = w->shared;
  struct gpu_nvdec *nv = g->nvdec ? __atomic_load_n(&g->nvdec[w->dev], __ATOMIC_ACQUIRE) : NULL;
  const struct codec_format_desc *fd = codec_format(f); /* NULL: not a format of the table */
  const char *refused = NULL;
  if (nv && fd && fd->pictures) {
    enum err e = ERR_OK;
    if (video_decode(w, nv, fd, buf, len, lim, img, codec, &e)) return e;
    refused = *codec;
  }
  if (w->jpeg && f == CODEC_JPEG) {
    enum codec_status cs = codec_jpeg_probe(buf, len, lim, &info, msg, msglen);
    if (cs != CODEC_OK) {
      *codec = backend_host_codec(CODEC_JPEG);
      gpu_jpeg_expect(w->ctx, 0);
      return backend_codec_error(cs);
    }
    struct gpu_jpeg_src src = {
        buf, len, info.width, info.height, info.channels, info.orientation, info.progressive};
    struct cpu_image shape;
    enum gpu_status s =
        info.plain && info.complete ? gpu_jpeg_decode(w->ctx, &src, &shape, codec) : GPU_ERROR;
    if (s == GPU_OK) {
      *img = (struct codec_image){NULL, shape.width, shape.height,    shape.channels,
                                  8,    CODEC_JPEG,  info.orientation};
      w->img = GPU_INPUT;
      return ERR_OK;
    }
    if (s == GPU_FATAL || s == GPU_NO_MEMORY) return gpu_error(w, s);
  }
  gpu_jpeg_expect(w->ctx, 0); /* the CPU decodes this one, and decides what it is */
  enum err stop = cpu_stop_error();
  if (stop != ERR_OK) return stop;
  enum err e = backend_host_decode(buf, len, lim, img, codec, msg, msglen);
  if (refused) *codec = refused;
  return e;
}

/* nvJPEG writes no ICC profile: the one o carries goes into *out (of *len bytes, replaced) as
 * the CPU encoder would put it there, when it describes channels colours. */
static enum err gpu_add_icc(const struct codec_encode_opts *o, int channels, uint8_t **out,
                            size_t *len) {
  uint8_t *with = NULL;
  size_t with_len = 0;
  if (!o->icc || codec_icc_colours(o->icc, o->icc_len) != channels) return ERR_OK;
  enum codec_status c = codec_jpeg_insert_icc(*out, *len, o->icc, o->icc_len, &with, &with_len);
  if (c == CODEC_UNSUPPORTED) return ERR_OK; /* a profile over 255 segments goes without */
  if (c != CODEC_OK) return ERR_OUT_OF_MEMORY;
  free(*out);
  *out = with, *len = with_len;
  return ERR_OK;
}

/* codec_encode_held's analyser on a worker: its device image and the status of its pass. */
struct gpu_held {
  struct gpu_worker *w;
  enum gpu_status status; /* gpu_vp8_analyse's */
};

/* The analyser's pass (struct codec_vp8_analyser): lossy WebP's first pass over the worker's
 * device image, gpu_vp8_analyse. 0 when the image is not smooth, or the device failed or is out
 * of memory for the pass (h->status says which). */
static int gpu_vp8_pass(void *arg, const struct codec_vp8_pass *p, struct codec_vp8_mbs *out) {
  struct gpu_held *h = arg;
  struct cpu_image shape = {NULL, p->width, p->height, 3, 8};
  struct gpu_vp8 a;
  h->status =
      gpu_vp8_analyse(h->w->ctx, h->w->img, &shape, p->q, p->smooth_step, p->smooth_per, &a);
  if (h->status != GPU_OK || !a.smooth) return 0;
  out->modes = a.modes, out->levels = a.levels, out->last = a.last, out->stats = a.stats;
  return 1;
}

/* The device image encoded by a codec from what the device computes of it, where one can
 * (codec_encode_held, with gpu_vp8_pass). Returns 0 when none does (the host then encodes the
 * image from its pixels), else 1 and the outcome in *e. */
static int gpu_held_encode(struct gpu_worker *w, const struct codec_image *img,
                           const struct codec_encode_opts *o, uint8_t **out, size_t *len,
                           const char **codec, enum err *e, char *msg, size_t msglen) {
  struct gpu_held h = {w, GPU_OK};
  struct codec_vp8_analyser an = {gpu_vp8_pass, &h, "blurd-vp8-cuda"};
  struct codec_encode_opts named = *o;
  named.encoder = codec;
  enum codec_status c = codec_encode_held(img, &named, &an, out, len, msg, msglen);
  if (h.status == GPU_FATAL) return *e = gpu_error(w, h.status), 1;
  if (c == CODEC_UNSUPPORTED) return 0;
  *e = backend_codec_error(c);
  return 1;
}

/* JPEG of 8-bit gray or RGB on the device is encoded there; the rest comes to the host. The job's
 * cancel token is asked before the host writes the file of the device's VP8 first pass, and after
 * a download. */
static enum err gpu_encode(void *state, const struct codec_image *img,
                           const struct codec_encode_opts *o, uint8_t **out, size_t *len,
                           const char **codec, double *download, char *msg, size_t msglen) {
  struct gpu_worker *w = state;
  struct cpu_image shape = {NULL, img->width, img->height, img->channels, img->depth};
  *download = -1;
  if (img->pixels) return backend_host_encode(img, o, out, len, codec, msg, msglen);
  if (w->jpeg && o->format == CODEC_JPEG && img->depth == 8 &&
      (img->channels == 1 || img->channels == 3) && o->quality >= 1 && o->quality <= 100) {
    enum gpu_status s = gpu_jpeg_encode(w->ctx, w->img, &shape, o->quality,
                                        o->quality >= CODEC_JPEG_FULL_CHROMA, out, len);
    *codec = "nvjpeg";
    if (s == GPU_OK) return gpu_add_icc(o, img->channels, out, len);
    if (s != GPU_ERROR) return gpu_error(w, s); /* GPU_ERROR: libjpeg-turbo encodes it */
  }
  enum err e;
  if (gpu_held_encode(w, img, o, out, len, codec, &e, msg, msglen)) return e;
  void *pixels = NULL;
  struct gpu_times g = {0, 0, 0, 0};
  e = gpu_error(w, gpu_download(w->ctx, w->img, &shape, &pixels, &g));
  if (e == ERR_OK) e = cpu_stop_error();
  if (e != ERR_OK) return e;
  struct codec_image host = *img;
  host.pixels = pixels;
  *download = g.download;
  return backend_host_encode(&host, o, out, len, codec, msg, msglen);
}

static enum err gpu_to_host(void *state, struct codec_image *img) {
  struct gpu_worker *w = state;
  struct cpu_image shape = {NULL, img->width, img->height, img->channels, img->depth};
  void *pixels = NULL;
  if (img->pixels) return ERR_OK;
  enum err e = gpu_error(w, gpu_download(w->ctx, w->img, &shape, &pixels, NULL));
  if (e == ERR_OK && !(img->pixels = malloc(cpu_image_bytes(&shape)))) e = ERR_OUT_OF_MEMORY;
  if (e == ERR_OK) memcpy(img->pixels, pixels, cpu_image_bytes(&shape));
  return e;
}

/* Uploads io->in when it is on the host (decoded by a CPU codec), then launches on the device;
 * the result stays there. Fills io->t from the launch's times (filter = upload + kernels). The
 * job's cancel token is checked between the upload and the launch (its kernels take
 * milliseconds, and are not interrupted). */
enum err op_gpu_run(struct op_env *env, struct op_io *io, op_gpu_launch launch, const void *arg,
                    struct cpu_accuracy *acc) {
  struct gpu_worker *w = env->worker;
  struct gpu_ctx *ctx = gpu_job_ctx(w);
  struct gpu_times g = {0, 0, 0, 0};
  struct cpu_image src = op_image(io->in);
  enum gpu_status s = src.data ? gpu_upload(ctx, &src, &g) : GPU_OK;
  enum err stop = s == GPU_OK ? cpu_stop_error() : ERR_OK; /* a failed upload says why */
  if (stop != ERR_OK) return stop;
  if (s == GPU_OK) s = launch(ctx, arg, &src, acc, &g);
  w->img = GPU_OUTPUT;
  *io->out = *io->in;
  io->out->pixels = NULL; /* the device's output image */
  enum err e = gpu_error(w, s);
  if (e == ERR_OK)
    *io->t = (struct stage_times){g.upload + g.kernel, acc || g.reference > 0 ? g.reference : -1,
                                  src.data ? g.upload : -1, g.kernel, -1};
  return e;
}

static int gpu_measures_itself(struct op_env *env, const struct cpu_blur *b,
                               const struct codec_image *img) {
  struct gpu_worker *w = env->worker;
  struct cpu_image shape = {NULL, img->width, img->height, img->channels, img->depth};
  return gpu_separable_exact(w->ctx, b, &shape);
}

static struct op_env gpu_env(void *state) {
  return (struct op_env){state, gpu_auto_method, gpu_measures_itself};
}

static size_t gpu_worker_bytes(void *state) {
  struct gpu_worker *w = state;
  return w ? __atomic_load_n(&w->bytes, __ATOMIC_RELAXED) : 0;
}

static const char *gpu_worker_name(void *state) {
  return gpu_ctx_name(((struct gpu_worker *)state)->ctx);
}

/* ---- the start: devices, the GPU codecs ---- */

/* Whether the driver's device node exists (BLURD_TEST_GPU_NODE names a file that stands for it,
 * in tests): CUDA then starts every visible GPU when asked for them (docs/engineering-notes.md),
 * so the engine asks after the server answers; without it CUDA answers at once. */
static int gpu_probe_is_slow(const struct engine_config *cfg) {
  const char *node = getenv("BLURD_TEST_GPU_NODE");
  return cfg->backend != ENGINE_ONLY_CPU && access(node ? node : "/dev/nvidiactl", F_OK) == 0;
}

static int gpu_probe(const struct engine_config *cfg, char *why, size_t n) {
  int ndev = gpu_device_count();
  if (ndev > 0) return ndev;
  snprintf(why, n, "%s",
           cfg->backend == ENGINE_ONLY_GPU
               ? "--backend gpu: no CUDA device is visible (no driver, no GPU, or "
                 "CUDA_VISIBLE_DEVICES hides them)"
               : "no CUDA device is visible");
  return -1;
}

static void *gpu_shared_new(const struct engine_config *cfg, int ndev, int cores, char *err,
                            size_t n) {
  struct backend_gpu_shared *g = calloc(1, sizeof(*g));
  (void)cores;
  if (!g) {
    snprintf(err, n, "out of memory");
    return NULL;
  }
  g->ndev = ndev;
  g->fault_at = getenv("BLURD_TEST_GPU_FAULT") ? atol(getenv("BLURD_TEST_GPU_FAULT")) : 0;
  g->batch_wait_us = cfg->jpeg_batch_wait_us;
  g->decoders = cfg->jpeg_decoders;
  g->heic_sessions = cfg->heic_decoders;
  g->t_start = clock_ms();
  pthread_mutex_init(&g->video_mu, NULL);
  return g;
}

static void gpu_shared_free(void *shared) {
  struct backend_gpu_shared *g = shared;
  for (int d = 0; g->jpeg && d < g->ndev; d++) gpu_jpeg_free(g->jpeg[d]);
  for (int d = 0; g->nvdec && d < g->ndev; d++) gpu_nvdec_free(g->nvdec[d]);
  free(g->jpeg), free(g->nvdec);
  pthread_mutex_destroy(&g->video_mu);
  free(g);
}

/* Workers: the flag, or the cores shared out among the GPUs (at least 2 each): a worker with the
 * CPU codecs spends most of its time in them. With the GPU codecs twice as many, as far as each
 * GPU has GPU_WORKER_BYTES for every one: such a worker sleeps most of a request, waiting for its
 * batch decode and its kernels, so more of them keep the decoder's batches and the GPU fuller
 * (docs/engineering-notes.md). */
#define GPU_WORKER_BYTES ((size_t)2400 * 1000 * 1000)
static int gpu_workers_per_device(const struct engine_config *cfg, int ndev, int cores,
                                  int fast_codecs) {
  if (cfg->workers > 0) return cfg->workers;
  int per_gpu = (cores + ndev - 1) / ndev, most = 2 * per_gpu;
  for (int d = 0; fast_codecs && d < ndev; d++) {
    struct gpu_device_info info;
    if (gpu_device_info(d, 0, &info) == 0 && (int)(info.mem_total / GPU_WORKER_BYTES) < most)
      most = (int)(info.mem_total / GPU_WORKER_BYTES);
  }
  if (fast_codecs && most > per_gpu) per_gpu = most;
  return per_gpu < 2 ? 2 : per_gpu;
}

/* Starts device dev's JPEG decoder, batching at most g->per_gpu decodes (its workers'), and tries
 * nvJPEG there with a context of its own. Returns 0, or -1 with the reason in why. */
static int start_jpeg_dev(struct backend_gpu_shared *g, int dev, char *why, size_t whylen) {
  double t = clock_ms();
  struct gpu_jpeg *j = gpu_jpeg_new(dev, g->batch_wait_us, g->per_gpu, g->decoders, why, whylen);
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
  fprintf(stderr, "blurd: cuda:%d: JPEG decoders ready %.2f s after the start (%.2f s)\n", dev,
          (clock_ms() - g->t_start) / 1e3, (clock_ms() - t) / 1e3);
  return 0;
}

/* Starts device dev's HEIC video decoders (g->heic_sessions sessions), when HEIC runs there; where
 * they do not start, that device's HEIC is decoded on the CPU, and device 0 says why. */
static void start_video_dev(struct backend_gpu_shared *g, int dev) {
  char why[160];
  double t = clock_ms();
  if (!g->nvdec) return;
  struct gpu_nvdec *v = gpu_nvdec_new(dev, g->heic_sessions, why, sizeof(why));
  if (!v) {
    if (dev == 0) snprintf(g->video_why, sizeof(g->video_why), "%s", why);
    fprintf(stderr, "blurd: cuda:%d: HEIC is decoded on the CPU: %s\n", dev, why);
    return;
  }
  __atomic_store_n(&g->nvdec[dev], v, __ATOMIC_RELEASE);
  fprintf(stderr, "blurd: cuda:%d: HEIC video decoders ready: %d sessions, %d engines (%.2f s)\n",
          dev, gpu_nvdec_sessions(v), gpu_nvdec_engines(v), (clock_ms() - t) / 1e3);
}

/* Makes device 0's context and loads nvJPEG's library (milliseconds), then starts device 0's
 * decoder; the other devices' decoders are made by their first later worker (gpu_device_start),
 * at a moment that stalls no request, since making a context stalls every GPU's work for a while
 * (docs/engineering-notes.md). Returns 1, or 0 with the reason in why when the host's codecs
 * serve. */
static int gpu_codecs_start(void *shared, const struct engine_config *cfg, int per_device,
                            char *why, size_t n) {
  struct backend_gpu_shared *g = shared;
  (void)cfg;
  g->per_gpu = per_device;
  double opened = gpu_device_open(0) == 0 ? clock_ms() : -1;
  int rc = gpu_jpeg_load(&g->jpeg_lib, why, n);
  fprintf(stderr,
          "blurd: cuda:0's context made %.2f s after the start, nvJPEG loaded %.2f s after\n",
          (opened - g->t_start) / 1e3, (clock_ms() - g->t_start) / 1e3);
  if (rc == 0 && !(g->jpeg = calloc((size_t)g->ndev, sizeof(*g->jpeg))))
    snprintf(why, n, "out of memory"), rc = -1;
  if (rc == 0 && start_jpeg_dev(g, 0, why, n) == 0) {
    if (g->heic_sessions == 0)
      snprintf(g->video_why, sizeof(g->video_why), "--heic-decoders is 0");
    else if (!(g->nvdec = calloc((size_t)g->ndev, sizeof(*g->nvdec))))
      snprintf(g->video_why, sizeof(g->video_why), "out of memory");
    start_video_dev(g, 0);
    return 1;
  }
  free(g->jpeg);
  g->jpeg = NULL;
  return 0;
}

static int gpu_device_start(void *shared, int dev, char *why, size_t n) {
  struct backend_gpu_shared *g = shared;
  if (!g->jpeg || g->jpeg[dev]) return 0;
  if (start_jpeg_dev(g, dev, why, n) != 0) return -1;
  start_video_dev(g, dev);
  return 1;
}

/* "cuda:0 " and device 0's name (what worker 0's context will be called; the workers make their
 * contexts later, on their own threads), or "cuda (2 devices)". */
static void gpu_name(int ndev, char *buf, size_t n) {
  struct gpu_device_info info;
  if (ndev > 1)
    snprintf(buf, n, "cuda (%d devices)", ndev);
  else if (gpu_device_info(0, 0, &info) == 0)
    snprintf(buf, n, "cuda:0 %.96s", info.name);
  else
    snprintf(buf, n, "cuda:0");
}

/* ---- what /readyz, /methods and /metrics show ---- */

static json_t *gpu_device_json(int dev, int opened, int workers) {
  struct gpu_device_info info;
  char cc[16];
  if (gpu_device_info(dev, opened, &info) != 0) return NULL;
  snprintf(cc, sizeof(cc), "%d.%d", info.major, info.minor);
  json_t *free_bytes = /* null until the device's context is made */
      info.mem_free ? json_integer((json_int_t)info.mem_free) : json_null();
  return json_pack("{s:i, s:s, s:s, s:I, s:o, s:i, s:i}", "index", dev, "name", info.name,
                   "compute_capability", cc, "memory_total_bytes", (json_int_t)info.mem_total,
                   "memory_free_bytes", free_bytes, "multiprocessors", info.sm_count, "workers",
                   workers);
}

static int gpu_device_memory(int dev, int opened, size_t *used, size_t *total) {
  struct gpu_device_info info;
  if (gpu_device_info(dev, opened, &info) != 0) return -1;
  *used = info.mem_free ? info.mem_total - info.mem_free : 0;
  *total = info.mem_total;
  return 0;
}

static void gpu_codecs_json(void *shared, json_t *o, const char **jpeg_decoder) {
  struct backend_gpu_shared *g = shared;
  *jpeg_decoder = gpu_jpeg_decoder(g->jpeg[0]);
  char dec[32], enc[32];
  snprintf(dec, sizeof(dec), "%s_decode", codec_format_name(CODEC_JPEG));
  snprintf(enc, sizeof(enc), "%s_encode", codec_format_name(CODEC_JPEG));
  json_object_update_new(o, json_pack("{s:b, s:s, s:s, s:s, s:i, s:i}", "gpu", 1, dec,
                                      *jpeg_decoder, enc, "nvjpeg", "library", g->jpeg_lib,
                                      "batch_wait_us", g->batch_wait_us, "decoders", g->decoders));
  struct gpu_nvdec *v = g->nvdec ? __atomic_load_n(&g->nvdec[0], __ATOMIC_ACQUIRE) : NULL;
  snprintf(dec, sizeof(dec), "%s_decode", codec_format_name(CODEC_HEIC));
  if (v)
    json_object_update_new(o, json_pack("{s:s, s:{s:i, s:i}}", dec, "nvdec", "video_decoders",
                                        "engines", gpu_nvdec_engines(v), "sessions",
                                        gpu_nvdec_sessions(v)));
  else
    json_object_set_new(o, "video_decoders",
                        json_pack("{s:s}", "reason", g->video_why[0] ? g->video_why : "starting"));
}

static int gpu_video_stats(void *shared, struct engine_video_stats *s) {
  struct backend_gpu_shared *g = shared;
  if (!g->nvdec) return -1;
  pthread_mutex_lock(&g->video_mu);
  *s = g->video;
  s->on_gpu = __atomic_load_n(&g->video.on_gpu, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&g->video_mu);
  return 0;
}

static int gpu_batch_stats(void *shared, int dev, struct engine_batch_stats *s) {
  struct backend_gpu_shared *g = shared;
  struct gpu_jpeg_stats j;
  struct gpu_jpeg *jd = g->jpeg && dev >= 0 && dev < g->ndev
                            ? __atomic_load_n(&g->jpeg[dev], __ATOMIC_ACQUIRE) /* NULL: not yet */
                            : NULL;
  if (!jd) return -1;
  gpu_jpeg_stats(jd, &j);
  *s = (struct engine_batch_stats){j.batches, j.images, j.single, {0}};
  _Static_assert(GPU_JPEG_BATCH_BUCKETS == ENGINE_BATCH_BUCKETS, "batch histogram buckets");
  for (int i = 0; i < ENGINE_BATCH_BUCKETS; i++) s->hist[i] = j.hist[i];
  return 0;
}

const struct backend_ops backend_gpu_ops = {.kind = "cuda",
                                            .column = ENGINE_GPU,
                                            .keeps_images = 1,
                                            .leave_to_exit = 1,
                                            .probe_is_slow = gpu_probe_is_slow,
                                            .probe = gpu_probe,
                                            .shared_new = gpu_shared_new,
                                            .shared_free = gpu_shared_free,
                                            .workers_per_device = gpu_workers_per_device,
                                            .codecs_start = gpu_codecs_start,
                                            .device_start = gpu_device_start,
                                            .name = gpu_name,
                                            .worker_new = gpu_worker_new,
                                            .worker_free = gpu_worker_free,
                                            .job_begin = gpu_job_begin,
                                            .job_end = gpu_job_end,
                                            .decode = gpu_decode,
                                            .encode = gpu_encode,
                                            .to_host = gpu_to_host,
                                            .env = gpu_env,
                                            .auto_method = gpu_auto_method,
                                            .worker_name = gpu_worker_name,
                                            .worker_bytes = gpu_worker_bytes,
                                            .device_json = gpu_device_json,
                                            .device_memory = gpu_device_memory,
                                            .codecs_json = gpu_codecs_json,
                                            .batch_stats = gpu_batch_stats,
                                            .video_stats = gpu_video_stats};

#else /* a build without CUDA: the backend is there, and says why it cannot run */

static int gpu_probe(const struct engine_config *cfg, char *why, size_t n) {
  snprintf(why, n, "%s",
           cfg->backend == ENGINE_ONLY_GPU
               ? "--backend gpu: this build has no CUDA backend (nvcc was not found)"
               : "this build has no CUDA backend (nvcc was not found)");
  return -1;
}

const struct backend_ops backend_gpu_ops = {
    .kind = "cuda", .column = ENGINE_GPU, .absent = 1, .probe = gpu_probe};
#endif

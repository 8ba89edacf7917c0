/* The backend: a bounded job queue and the worker threads that run jobs, each worker with its
 * own state from the backend's ops (the CPU ops share one fork-join pool; the CUDA ops give each
 * worker a stream and buffers). Each worker thread makes its own state and warms up, all at once,
 * before it takes jobs; until every worker has, the backend is warming (/readyz says so).
 * Submitting never blocks: a full queue says so at once and the caller answers 503. Freeing the
 * backend runs what is queued, then joins the workers.
 *
 * The ops hold a job's codecs too. The CPU backend decodes and encodes with libjpeg-turbo and
 * libpng. The CUDA backend with GPU codecs decodes JPEG into device memory with nvJPEG (batched
 * across its workers by gpu/jpeg.cu), filters there and encodes JPEG there; PNG, WebP, and what
 * nvJPEG refuses, go through the CPU codecs with an upload or a download. A file goes to the GPU
 * decoder only after codec_jpeg_probe has read its headers with libjpeg, so what the CPU decoder
 * would refuse at the headers is refused in the same words; a file nvJPEG fails on is decoded again
 * by libjpeg, whose verdict stands. */
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
  int batch_wait_us;        /* cfg->jpeg_batch_wait_us */
  int decoders;             /* cfg->jpeg_decoders */
  int warm[3];              /* the warm-up image: width, height, channels (0: none) */
  int warming;              /* workers not yet warm */
  double t_start;           /* api_now_ms() when backend_new began */
  double slowest[2];        /* the slowest worker's state and warm-up, ms (under mu) */
  pthread_mutex_t warm_mu;  /* guards warm_bytes */
  pthread_cond_t warm_cv;   /* a warm-up finished */
  size_t warm_bytes;        /* the host images of the warm-ups running now */
  char codecs_why[384];     /* why JPEG runs on the CPU, when it does */
  struct worker *workers;
  pthread_t *threads;
};

enum api_error codec_error(enum codec_status s) {
  switch (s) {
  case CODEC_OK:
    return API_OK;
  case CODEC_UNKNOWN:
    return API_UNSUPPORTED_MEDIA;
  case CODEC_CORRUPT:
    return API_UNDECODABLE;
  case CODEC_TOO_LARGE:
    return API_IMAGE_TOO_LARGE;
  case CODEC_UNSUPPORTED:
    return API_UNSUPPORTED_IMAGE;
  case CODEC_NOMEM:
    return API_OUT_OF_MEMORY;
  }
  return API_INTERNAL;
}

/* ---- the CPU codecs (every backend's, for what stays on the host) ---- */

static const char *host_codec(enum codec_format f) {
  return f == CODEC_PNG    ? "libpng"
         : f == CODEC_JPEG ? "libjpeg-turbo"
         : f == CODEC_WEBP ? "libwebp"
                           : NULL;
}

static enum api_error host_decode(const uint8_t *buf, size_t len, const struct codec_limits *lim,
                                  struct codec_image *img, const char **codec, char *msg,
                                  size_t msglen) {
  enum codec_status s = codec_decode(buf, len, lim, img, msg, msglen);
  *codec = host_codec(s == CODEC_OK ? img->format : codec_sniff(buf, len));
  return codec_error(s);
}

static enum api_error host_encode(const struct codec_image *img, const struct codec_encode_opts *o,
                                  uint8_t **out, size_t *len, const char **codec, char *msg,
                                  size_t msglen) {
  *codec = host_codec(o->format);
  return codec_error(codec_encode(img, o, out, len, msg, msglen));
}

/* ---- the CPU backend ---- */

static enum api_error cpu_decode(void *state, const uint8_t *buf, size_t len,
                                 const struct codec_limits *lim, struct codec_image *img,
                                 const char **codec, char *msg, size_t msglen) {
  (void)state;
  return host_decode(buf, len, lim, img, codec, msg, msglen);
}

static enum api_error cpu_encode(void *state, const struct codec_image *img,
                                 const struct codec_encode_opts *o, uint8_t **out, size_t *len,
                                 const char **codec, double *download, char *msg, size_t msglen) {
  (void)state;
  *download = -1;
  return host_encode(img, o, out, len, codec, msg, msglen);
}

static enum api_error cpu_to_host(void *state, struct codec_image *img) {
  (void)state, (void)img; /* always there */
  return API_OK;
}

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
                                           .decode = cpu_decode,
                                           .encode = cpu_encode,
                                           .to_host = cpu_to_host,
                                           .blur = cpu_blur,
                                           .variance = cpu_variance_op,
                                           .contrast = cpu_contrast_op,
                                           .convolve = cpu_convolve_op,
                                           .auto_method = cpu_auto_method,
                                           .worker_name = cpu_worker_name,
                                           .keeps_images = 0};

/* ---- the CUDA backend ---- */

#ifdef BLURD_CUDA
#include "../gpu/gpu.h"

struct gpu_shared {       /* what every GPU worker shares */
  int ndev;               /* visible devices; worker i uses device i % ndev */
  long fault_at;          /* tests only (BLURD_TEST_GPU_FAULT=N): GPU job N faults; 0: never */
  long jobs;              /* GPU jobs started (atomic) */
  struct gpu_jpeg **jpeg; /* ndev JPEG decoders when JPEG runs on the GPU, else NULL */
};

struct gpu_worker {
  struct gpu_ctx *ctx;
  struct gpu_shared *shared;
  int jpeg;           /* JPEG is decoded and encoded on the GPU */
  enum gpu_image img; /* which device image holds the job's image when its pixels are NULL */
  size_t bytes;       /* gpu_ctx_bytes after the last job, for /metrics (atomic) */
};

static int gpu_worker_new(void *shared, int index, void **state, char *err, size_t errlen) {
  struct gpu_shared *g = shared;
  struct gpu_worker *w = calloc(1, sizeof(*w));
  if (!w) return -1;
  w->shared = g;
  w->ctx = gpu_ctx_new(index % g->ndev, err, errlen);
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
static enum api_error gpu_error(struct gpu_worker *w, enum gpu_status s) {
  __atomic_store_n(&w->bytes, gpu_ctx_bytes(w->ctx), __ATOMIC_RELAXED);
  switch (s) {
  case GPU_OK:
    return API_OK;
  case GPU_NO_MEMORY:
    return API_OUT_OF_MEMORY;
  case GPU_ERROR:
    return API_GPU_ERROR;
  case GPU_FATAL:
    return API_GPU_LOST;
  }
  return API_GPU_ERROR;
}

/* A JPEG goes to nvJPEG once libjpeg has read its headers (refusing what the CPU decoder refuses,
 * in its words), when it is one nvJPEG decodes as libjpeg does and is not cut short. */
static enum api_error gpu_decode(void *state, const uint8_t *buf, size_t len,
                                 const struct codec_limits *lim, struct codec_image *img,
                                 const char **codec, char *msg, size_t msglen) {
  struct gpu_worker *w = state;
  struct codec_jpeg_info info;
  if (w->jpeg && codec_sniff(buf, len) == CODEC_JPEG) {
    enum codec_status cs = codec_jpeg_probe(buf, len, lim, &info, msg, msglen);
    if (cs != CODEC_OK) {
      *codec = host_codec(CODEC_JPEG);
      gpu_jpeg_expect(w->ctx, 0);
      return codec_error(cs);
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
      return API_OK;
    }
    if (s == GPU_FATAL || s == GPU_NO_MEMORY) return gpu_error(w, s);
  }
  gpu_jpeg_expect(w->ctx, 0); /* the CPU decodes this one, and decides what it is */
  return host_decode(buf, len, lim, img, codec, msg, msglen);
}

/* JPEG of 8-bit gray or RGB on the device is encoded there; the rest comes to the host. */
static enum api_error gpu_encode(void *state, const struct codec_image *img,
                                 const struct codec_encode_opts *o, uint8_t **out, size_t *len,
                                 const char **codec, double *download, char *msg, size_t msglen) {
  struct gpu_worker *w = state;
  struct cpu_image shape = {NULL, img->width, img->height, img->channels, img->depth};
  *download = -1;
  if (img->pixels) return host_encode(img, o, out, len, codec, msg, msglen);
  if (w->jpeg && o->format == CODEC_JPEG && img->depth == 8 &&
      (img->channels == 1 || img->channels == 3) && o->quality >= 1 && o->quality <= 100) {
    enum gpu_status s = gpu_jpeg_encode(w->ctx, w->img, &shape, o->quality,
                                        o->quality >= CODEC_JPEG_FULL_CHROMA, out, len);
    *codec = "nvjpeg";
    if (s != GPU_ERROR) return gpu_error(w, s); /* GPU_ERROR: libjpeg-turbo encodes it */
  }
  void *pixels = NULL;
  struct gpu_times g = {0, 0, 0, 0};
  enum api_error e = gpu_error(w, gpu_download(w->ctx, w->img, &shape, &pixels, &g));
  if (e != API_OK) return e;
  struct codec_image host = *img;
  host.pixels = pixels;
  *download = g.download;
  return host_encode(&host, o, out, len, codec, msg, msglen);
}

static enum api_error gpu_to_host(void *state, struct codec_image *img) {
  struct gpu_worker *w = state;
  struct cpu_image shape = {NULL, img->width, img->height, img->channels, img->depth};
  void *pixels = NULL;
  if (img->pixels) return API_OK;
  enum api_error e = gpu_error(w, gpu_download(w->ctx, w->img, &shape, &pixels, NULL));
  if (e == API_OK && !(img->pixels = malloc(cpu_image_bytes(&shape)))) e = API_OUT_OF_MEMORY;
  if (e == API_OK) memcpy(img->pixels, pixels, cpu_image_bytes(&shape));
  return e;
}

/* Uploads src when it is on the host (decoded by a CPU codec), then runs the filter on the
 * device; the result stays there. Fills t from g (filter = upload + kernels). The job's cancel
 * token is checked between the upload and the kernels (the kernels take milliseconds, and are
 * not interrupted). */
static enum api_error gpu_filter(struct gpu_worker *w, const struct cpu_image *src,
                                 enum gpu_status (*run)(struct gpu_ctx *, const void *,
                                                        const struct cpu_image *,
                                                        struct cpu_accuracy *, struct gpu_times *),
                                 const void *arg, struct cpu_accuracy *acc, struct stage_times *t) {
  struct gpu_ctx *ctx = gpu_job_ctx(w);
  struct gpu_times g = {0, 0, 0, 0};
  enum gpu_status s = src->data ? gpu_upload(ctx, src, &g) : GPU_OK;
  enum api_error stop = s == GPU_OK ? job_cancelled() : API_OK; /* a failed upload says why */
  if (stop != API_OK) return stop;
  if (s == GPU_OK) s = run(ctx, arg, src, acc, &g);
  w->img = GPU_OUTPUT;
  enum api_error e = gpu_error(w, s);
  if (e == API_OK)
    *t = (struct stage_times){g.upload + g.kernel, acc ? g.reference : -1,
                              src->data ? g.upload : -1, g.kernel, -1};
  return e;
}

static enum gpu_status run_blur(struct gpu_ctx *ctx, const void *arg, const struct cpu_image *img,
                                struct cpu_accuracy *acc, struct gpu_times *g) {
  return gpu_blur_resident(ctx, arg, img, acc, g);
}

struct regions_arg { /* run_regions' */
  const struct cpu_blur *b;
  struct gpu_region r[API_REGIONS_MAX];
  int n, feather;
};

static enum gpu_status run_regions(struct gpu_ctx *ctx, const void *arg,
                                   const struct cpu_image *img, struct cpu_accuracy *acc,
                                   struct gpu_times *g) {
  const struct regions_arg *a = arg;
  return gpu_blur_regions(ctx, a->b, img, a->r, a->n, a->feather, acc, g);
}

static enum gpu_status run_contrast(struct gpu_ctx *ctx, const void *arg,
                                    const struct cpu_image *img, struct cpu_accuracy *acc,
                                    struct gpu_times *g) {
  (void)acc;
  return gpu_contrast_resident(ctx, arg, img, g);
}

static enum gpu_status run_convolve(struct gpu_ctx *ctx, const void *arg,
                                    const struct cpu_image *img, struct cpu_accuracy *acc,
                                    struct gpu_times *g) {
  (void)acc;
  return gpu_convolve_resident(ctx, arg, img, g);
}

static enum api_error gpu_blur_op(void *state, const struct cpu_blur *b,
                                  const struct cpu_image *src, struct cpu_image *dst,
                                  struct cpu_accuracy *acc, struct stage_times *t) {
  dst->data = NULL;
  return gpu_filter(state, src, run_blur, b, acc, t);
}

static enum api_error gpu_regions_op(void *state, const struct cpu_blur *b,
                                     const struct codec_image *img, const struct api_region *r,
                                     int n, int feather, struct cpu_accuracy *acc,
                                     struct stage_times *t) {
  struct cpu_image src = {img->pixels, img->width, img->height, img->channels, img->depth};
  struct regions_arg a = {.b = b, .n = n, .feather = feather};
  for (int i = 0; i < n; i++) {
    memcpy(a.r[i].box, r[i].box, sizeof(a.r[i].box));
    memcpy(a.r[i].rect, r[i].rect, sizeof(a.r[i].rect));
  }
  return gpu_filter(state, &src, run_regions, &a, acc, t);
}

static enum api_error gpu_contrast_op(void *state, const struct cpu_contrast *c,
                                      const struct cpu_image *src, struct cpu_image *dst,
                                      struct stage_times *t) {
  dst->data = NULL;
  return gpu_filter(state, src, run_contrast, c, NULL, t);
}

static enum api_error gpu_convolve_op(void *state, const struct cpu_conv *c,
                                      const struct cpu_image *src, struct cpu_image *dst,
                                      struct stage_times *t) {
  dst->data = NULL;
  return gpu_filter(state, src, run_convolve, c, NULL, t);
}

static enum api_error gpu_variance_op(void *state, const struct cpu_var *v,
                                      const struct cpu_image *src, double *var,
                                      struct stage_times *t) {
  struct gpu_times g;
  enum api_error e = gpu_error(state, gpu_variance(gpu_job_ctx(state), v, src, NULL, var, &g));
  if (e == API_OK)
    *t = (struct stage_times){g.upload + g.kernel + g.download, -1, g.upload, g.kernel, g.download};
  return e;
}

static const char *gpu_worker_name(void *state) {
  return gpu_ctx_name(((struct gpu_worker *)state)->ctx);
}

static const struct backend_ops gpu_ops = {.kind = "cuda",
                                           .worker_new = gpu_worker_new,
                                           .worker_free = gpu_worker_free,
                                           .job_begin = gpu_job_begin,
                                           .job_end = gpu_job_end,
                                           .decode = gpu_decode,
                                           .encode = gpu_encode,
                                           .to_host = gpu_to_host,
                                           .blur = gpu_blur_op,
                                           .blur_regions = gpu_regions_op,
                                           .variance = gpu_variance_op,
                                           .contrast = gpu_contrast_op,
                                           .convolve = gpu_convolve_op,
                                           .auto_method = gpu_auto_method,
                                           .worker_name = gpu_worker_name,
                                           .keeps_images = 1};
#endif

/* ---- queue and workers ---- */

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
  struct codec_encode_opts jpeg = {CODEC_JPEG, 90, 6, 0};
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
  struct codec_image in = {NULL, width, height, ch, 8, CODEC_PNG, 1}, out = in;
  struct cpu_image src = {NULL, width, height, ch, 8}, dst = src;
  if (width <= 0 || height <= 0 || warm_enter(b, 2 * cpu_image_bytes(&src)) != 0) return;
  if (!(in.pixels = src.data = malloc(cpu_image_bytes(&src)))) {
    warm_leave(b, 2 * cpu_image_bytes(&src));
    return;
  }
  for (size_t i = 0; i < cpu_image_bytes(&src); i++) /* a texture, so the codecs have work */
    in.pixels[i] = (uint8_t)((i * 2654435761u) >> 24 & 0x3f) + (uint8_t)(i / (size_t)(width * ch));
  struct stage_times st;
  struct cpu_accuracy acc;
  struct cpu_blur blur = {w->ops->auto_method(12, width, height), 12, 12, 4, CPU_YVV_CALIBRATED};
  dst.data = out.pixels = w->ops->keeps_images ? NULL : malloc(cpu_image_bytes(&src));
  if (w->ops->job_begin) w->ops->job_begin(w->state);
  if ((w->ops->keeps_images || dst.data) &&
      w->ops->blur(w->state, &blur, &src, &dst, &acc, &st) == API_OK) {
    out.pixels = dst.data;
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
  double t1 = api_now_ms();
  warm_up(b, w);
  double t2 = api_now_ms();
  pthread_mutex_lock(&b->mu);
  b->slowest[0] = t1 - t0 > b->slowest[0] ? t1 - t0 : b->slowest[0];
  b->slowest[1] = t2 - t1 > b->slowest[1] ? t2 - t1 : b->slowest[1];
  pthread_mutex_unlock(&b->mu);
  return 0;
}

static void *worker_main(void *arg) {
  struct worker_thread wt = *(struct worker_thread *)arg;
  struct backend *b = wt.b;
  free(arg);
  int ok = worker_start(b, wt.w) == 0;
  pthread_mutex_lock(&b->mu);
  b->failed += !ok;
  if (--b->warming == 0 && !b->stop)
    fprintf(stderr,
            "blurd: %d workers ready %.2f s after the start (slowest worker: %.2f s for "
            "its state, %.2f s for its warm-up)\n",
            b->nworkers - b->failed, (api_now_ms() - b->t_start) / 1e3, b->slowest[0] / 1e3,
            b->slowest[1] / 1e3);
  while (ok) {
    while (b->count == 0 && !b->stop) pthread_cond_wait(&b->cv, &b->mu);
    if (b->count == 0) break; /* stopping, and the queue is empty */
    struct job *job = b->ring[b->head];
    b->head = (b->head + 1) % b->cap;
    b->count--;
    b->running++;
    pthread_mutex_unlock(&b->mu);
    if (b->ops->job_begin) b->ops->job_begin(wt.w->state);
    job->run(job, wt.w);
    cpu_cancel_set(NULL); /* the job's token lived on its stack: none may outlive it */
    if (b->ops->job_end) b->ops->job_end(wt.w->state);
    pthread_mutex_lock(&b->mu);
    b->running--;
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
  static int n; /* backend_new runs on the main thread, before any other */
  char why[700];
  if (!n && (n = cpu_cores("", why, sizeof(why))) > 0) fprintf(stderr, "blurd: %s\n", why);
  return n;
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
    if (gpu_device_info(d, &info) == 0 && (int)(info.mem_total / GPU_WORKER_BYTES) < most)
      most = (int)(info.mem_total / GPU_WORKER_BYTES);
  }
#endif
  if (gpu_codecs && most > per_gpu) per_gpu = most;
  return (per_gpu < 2 ? 2 : per_gpu) * ndev;
}

#ifdef BLURD_CUDA
/* Starts a JPEG decoder per device, each batching at most per_gpu decodes (its workers'). Returns
 * 0, or -1 with the reason in why. */
static int start_gpu_jpeg(struct backend *b, const struct api_config *cfg, int per_gpu, char *why,
                          size_t whylen) {
  struct gpu_shared *g = b->shared;
  if (gpu_jpeg_load(&b->jpeg_lib, why, whylen) != 0) return -1;
  g->jpeg = calloc((size_t)b->ndev, sizeof(*g->jpeg));
  if (!g->jpeg) {
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  for (int d = 0; d < b->ndev; d++) {
    if (!(g->jpeg[d] =
              gpu_jpeg_new(d, cfg->jpeg_batch_wait_us, per_gpu, cfg->jpeg_decoders, why, whylen)))
      return -1;
    struct gpu_ctx *trial = gpu_ctx_new(d, why, whylen); /* nvJPEG must work here, or auto */
    int ok = trial && gpu_ctx_jpeg(trial, g->jpeg[d]) == GPU_OK; /* falls back to the CPU */
    if (trial && !ok) snprintf(why, whylen, "nvJPEG fails on cuda:%d: %s", d, gpu_ctx_error(trial));
    gpu_ctx_free(trial);
    if (!ok) return -1;
  }
  b->jpeg_decoder = gpu_jpeg_decoder(g->jpeg[0]);
  return 0;
}

static void stop_gpu_jpeg(struct backend *b) {
  struct gpu_shared *g = b->shared;
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
  if (cfg->gpu_codecs == API_GPU_CODECS_OFF)
    snprintf(why, n, "--gpu-codecs off");
  else if (b->ndev == 0)
#ifdef BLURD_CUDA
    snprintf(why, n, "%s",
             cfg->backend == API_BACKEND_CPU ? "the CPU backend (--backend cpu)"
                                             : "no CUDA device is visible");
  else if (start_gpu_jpeg(b, cfg, per_gpu, why, n) != 0)
    stop_gpu_jpeg(b);
#else
    snprintf(why, n, "this build has no CUDA backend (nvcc was not found)"), (void)per_gpu;
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
  else if (b->ndev == 1 && gpu_device_info(0, &info) == 0)
    snprintf(b->name, sizeof(b->name), "cuda:0 %.96s", info.name);
#endif
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
  b->t_start = api_now_ms();
  b->cap = cfg->queue > 0 ? cfg->queue : 1;
  b->ring = calloc((size_t)b->cap, sizeof(*b->ring));
  int rc = b->ring ? 0 : -1, n = 0;
  if (rc == 0 && (b->ndev = choose_ops(b, cfg, err, errlen)) < 0) rc = -1;
  static const int warm_gpu[3] = API_WARM_GPU, warm_cpu[3] = API_WARM_CPU;
  memcpy(b->warm, cfg->warm[0] >= 0 ? cfg->warm : b->ndev ? warm_gpu : warm_cpu, sizeof(b->warm));
  /* the decoders batch at most the workers a GPU would have with the GPU codecs */
  n = rc == 0 ? worker_count(cfg, b->ndev, 1) : 0;
  if (rc == 0 && start_codecs(b, cfg, b->ndev ? n / b->ndev : 0, err, errlen) != 0) rc = -1;
  if (rc == 0) {
    n = worker_count(cfg, b->ndev, b->gpu_codecs);
    b->workers = calloc((size_t)n, sizeof(*b->workers));
    b->threads = calloc((size_t)n, sizeof(*b->threads));
    if (!b->workers || !b->threads) rc = -1;
  }
  if (rc != 0 && !*err) snprintf(err, errlen, "out of memory");
  b->warming = n;
  for (int i = 0; rc == 0 && i < n; i++) rc = start_worker(b, i, err, errlen);
  if (rc != 0) {
    backend_free(b);
    return NULL;
  }
  backend_set_name(b);
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
  pthread_mutex_lock(&b->warm_mu); /* a worker waiting to warm up gives up */
  pthread_cond_broadcast(&b->warm_cv);
  pthread_mutex_unlock(&b->warm_mu);
  for (int i = 0; i < b->nworkers; i++) pthread_join(b->threads[i], NULL);
  for (int i = 0; i < b->nworkers; i++)
    if (b->workers[i].state) b->ops->worker_free(b->workers[i].state);
  if (b->ops == &cpu_ops) {
    cpu_pool_free(b->shared);
  } else if (b->shared) {
#ifdef BLURD_CUDA
    stop_gpu_jpeg(b); /* after the workers: their contexts use the decoders */
#endif
    free(b->shared);
  }
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  pthread_mutex_destroy(&b->warm_mu);
  pthread_cond_destroy(&b->warm_cv);
  free(b->threads);
  free(b->workers);
  free(b->ring);
  free(b);
}

const char *backend_name(const struct backend *b) {
  return b->name;
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

int backend_gpu_memory(struct backend *b, int dev, size_t *held, size_t *used, size_t *total) {
#ifdef BLURD_CUDA
  struct gpu_device_info info;
  if (dev < 0 || dev >= b->ndev || gpu_device_info(dev, &info) != 0) return -1;
  *held = 0;
  for (int i = dev; i < b->nworkers; i += b->ndev) { /* worker i uses device i % ndev */
    struct gpu_worker *w = __atomic_load_n(&b->workers[i].state, __ATOMIC_ACQUIRE);
    if (w) *held += __atomic_load_n(&w->bytes, __ATOMIC_RELAXED); /* NULL: not made yet */
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

json_t *backend_codecs(struct backend *b) {
  int gpu = b->gpu_codecs;
  json_t *o = json_pack("{s:b, s:s, s:s, s:s, s:s}", "gpu", gpu, "jpeg_decode",
                        gpu ? b->jpeg_decoder : "libjpeg-turbo", "jpeg_encode",
                        gpu ? "nvjpeg" : "libjpeg-turbo", "png", "libpng", "webp", "libwebp");
  if (o && gpu)
    json_object_update_new(o, json_pack("{s:s, s:i, s:i}", "library", b->jpeg_lib, "batch_wait_us",
                                        b->batch_wait_us, "decoders", b->decoders));
  if (o && !gpu) json_object_set_new(o, "reason", json_string(b->codecs_why));
  return o;
}

int backend_gpu_codecs(struct backend *b, const char **decoder) {
  *decoder = b->gpu_codecs ? b->jpeg_decoder : "libjpeg-turbo";
  return b->gpu_codecs;
}

int backend_batch_stats(struct backend *b, int dev, struct batch_stats *s) {
#ifdef BLURD_CUDA
  struct gpu_shared *g = b->ops == &gpu_ops ? b->shared : NULL;
  struct gpu_jpeg_stats j;
  if (!g || !g->jpeg || dev < 0 || dev >= b->ndev) return -1;
  gpu_jpeg_stats(g->jpeg[dev], &j);
  *s = (struct batch_stats){j.batches, j.images, j.single, {0}};
  _Static_assert(GPU_JPEG_BATCH_BUCKETS == BATCH_BUCKETS, "batch histogram buckets");
  for (int i = 0; i < BATCH_BUCKETS; i++) s->hist[i] = j.hist[i];
  return 0;
#else
  (void)b, (void)dev, (void)s;
  return -1;
#endif
}

json_t *backend_kinds(void) {
#ifdef BLURD_CUDA
  return json_pack("[s, s]", "cpu", "cuda");
#else
  return json_pack("[s]", "cpu");
#endif
}

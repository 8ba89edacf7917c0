/* The CUDA backend: its verbs (backend_ops), each worker with its own context (a stream, device
 * buffers) on device index % ndev. With the GPU codecs, JPEG is decoded into device memory by
 * nvJPEG (batched across the workers by gpu/jpeg.cu) and encoded there; PNG, WebP, and what
 * nvJPEG refuses, go through the CPU codecs with an upload or a download. A file goes to the GPU
 * decoder only after codec_jpeg_probe has read its headers with libjpeg, so what the CPU decoder
 * would refuse at the headers is refused in the same words; a file nvJPEG fails on is decoded
 * again by libjpeg, whose verdict stands. An operation runs as its descriptor's GPU compute
 * (op->gpu), which launches through op_gpu_run: the image stays on the device from the decode to
 * the encode. The job's cancel token (op_cancelled) is asked between the host-side steps: before
 * a CPU decode after nvJPEG, before the host writes the file of the device's VP8 first pass, and
 * after a download; the CPU codecs ask it themselves (codec_cancel_set), the kernels are not
 * interrupted. A build without CUDA has none of this. */
#include "api_int.h"

#ifdef BLURD_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gpu_worker {
  struct gpu_ctx *ctx;
  struct backend_gpu_shared *shared;
  int jpeg;           /* JPEG is decoded and encoded on the GPU */
  enum gpu_image img; /* which device image holds the job's image when its pixels are NULL */
  size_t bytes;       /* gpu_ctx_bytes after the last job, for /metrics (atomic) */
};

static int gpu_worker_new(void *shared, int index, void **state, char *err, size_t errlen) {
  struct backend_gpu_shared *g = shared;
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
      return API_OK;
    }
    if (s == GPU_FATAL || s == GPU_NO_MEMORY) return gpu_error(w, s);
  }
  gpu_jpeg_expect(w->ctx, 0); /* the CPU decodes this one, and decides what it is */
  enum api_error stop = op_cancelled();
  if (stop != API_OK) return stop;
  return backend_host_decode(buf, len, lim, img, codec, msg, msglen);
}

/* nvJPEG writes no ICC profile: the one o carries goes into *out (of *len bytes, replaced) as
 * the CPU encoder would put it there, when it describes channels colours. */
static enum api_error gpu_add_icc(const struct codec_encode_opts *o, int channels, uint8_t **out,
                                  size_t *len) {
  uint8_t *with = NULL;
  size_t with_len = 0;
  if (!o->icc || codec_icc_colours(o->icc, o->icc_len) != channels) return API_OK;
  enum codec_status c = codec_jpeg_insert_icc(*out, *len, o->icc, o->icc_len, &with, &with_len);
  if (c == CODEC_UNSUPPORTED) return API_OK; /* a profile over 255 segments goes without */
  if (c != CODEC_OK) return API_OUT_OF_MEMORY;
  free(*out);
  *out = with, *len = with_len;
  return API_OK;
}

/* Lossy WebP at effort 2 of the 8-bit RGB image on the device: its first pass there
 * (gpu_vp8_analyse, the twin of codecs/vp8_enc.c's), then the file from the host's codecs, the
 * bytes the CPU writes. Returns 0 when the image is not smooth, the frame too large for blurd's
 * encoder or the device out of memory for its buffers (the host then encodes it, as the CPU
 * backend does), else 1 and the outcome in *e. */
static int gpu_webp(struct gpu_worker *w, const struct codec_image *img,
                    const struct codec_encode_opts *o, uint8_t **out, size_t *len,
                    const char **codec, enum api_error *e, char *msg, size_t msglen) {
  struct cpu_image shape = {NULL, img->width, img->height, img->channels, img->depth};
  struct gpu_vp8 a;
  int q[3][3][2], quality = CODEC_WEBP_SMOOTH_QUALITY(o->quality);
  codec_vp8_quant(quality, q);
  enum gpu_status s = gpu_vp8_analyse(w->ctx, w->img, &shape, (const int(*)[3][2])q,
                                      CODEC_WEBP_SMOOTH_STEP, CODEC_WEBP_SMOOTH_PER, &a);
  if (s == GPU_FATAL) return *e = gpu_error(w, s), 1;
  if (s != GPU_OK || !a.smooth) return 0; /* out of device or pinned memory: the host's path */
  if ((*e = op_cancelled()) != API_OK) return 1;
  struct codec_vp8_mbs m = {img->width, img->height, quality, a.modes, a.levels, a.last, a.stats};
  enum codec_status c = codec_webp_from_vp8(&m, o, out, len, msg, msglen);
  if (c == CODEC_TOO_LARGE) return 0;
  *codec = "blurd-vp8-cuda";
  *e = backend_codec_error(c);
  return 1;
}

/* JPEG of 8-bit gray or RGB on the device is encoded there; the rest comes to the host. */
static enum api_error gpu_encode(void *state, const struct codec_image *img,
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
  if (o->format == CODEC_WEBP && !o->lossless && img->depth == 8 && img->channels == 3 &&
      (o->effort_set ? o->effort : CODEC_WEBP_EFFORT_DEFAULT) == 2) {
    enum api_error e;
    if (gpu_webp(w, img, o, out, len, codec, &e, msg, msglen)) return e; /* else libwebp's */
  }
  void *pixels = NULL;
  struct gpu_times g = {0, 0, 0, 0};
  enum api_error e = gpu_error(w, gpu_download(w->ctx, w->img, &shape, &pixels, &g));
  if (e == API_OK) e = op_cancelled();
  if (e != API_OK) return e;
  struct codec_image host = *img;
  host.pixels = pixels;
  *download = g.download;
  return backend_host_encode(&host, o, out, len, codec, msg, msglen);
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

/* Uploads io->in when it is on the host (decoded by a CPU codec), then launches on the device;
 * the result stays there. Fills io->t from the launch's times (filter = upload + kernels). The
 * job's cancel token is checked between the upload and the launch (its kernels take
 * milliseconds, and are not interrupted). */
_Static_assert(API_REGIONS_MAX <= GPU_REGIONS_MAX,
               "every region a request may give fits the device's");

enum api_error op_gpu_run(struct op_env *env, struct op_io *io, op_gpu_launch launch,
                          const void *arg, struct cpu_accuracy *acc) {
  struct gpu_worker *w = env->gpu;
  struct gpu_ctx *ctx = gpu_job_ctx(w);
  struct gpu_times g = {0, 0, 0, 0};
  struct cpu_image src = op_image(io->in);
  enum gpu_status s = src.data ? gpu_upload(ctx, &src, &g) : GPU_OK;
  enum api_error stop = s == GPU_OK ? op_cancelled() : API_OK; /* a failed upload says why */
  if (stop != API_OK) return stop;
  if (s == GPU_OK) s = launch(ctx, arg, &src, acc, &g);
  w->img = GPU_OUTPUT;
  *io->out = *io->in;
  io->out->pixels = NULL; /* the device's output image */
  enum api_error e = gpu_error(w, s);
  if (e == API_OK)
    *io->t = (struct stage_times){g.upload + g.kernel, acc || g.reference > 0 ? g.reference : -1,
                                  src.data ? g.upload : -1, g.kernel, -1};
  return e;
}

static int gpu_measures_itself(struct op_env *env, const struct cpu_blur *b,
                               const struct codec_image *img) {
  struct gpu_worker *w = env->gpu;
  struct cpu_image shape = {NULL, img->width, img->height, img->channels, img->depth};
  return gpu_separable_exact(w->ctx, b, &shape);
}

static enum api_error gpu_run(void *state, const struct api_op *op, const void *params,
                              struct op_io *io) {
  struct op_env env = {NULL, state, gpu_auto_method, gpu_measures_itself};
  return op->gpu(&env, params, io);
}

size_t backend_gpu_worker_bytes(void *state) {
  struct gpu_worker *w = state;
  return w ? __atomic_load_n(&w->bytes, __ATOMIC_RELAXED) : 0;
}

static const char *gpu_worker_name(void *state) {
  return gpu_ctx_name(((struct gpu_worker *)state)->ctx);
}

const struct backend_ops backend_gpu_ops = {.kind = "cuda",
                                            .worker_new = gpu_worker_new,
                                            .worker_free = gpu_worker_free,
                                            .job_begin = gpu_job_begin,
                                            .job_end = gpu_job_end,
                                            .decode = gpu_decode,
                                            .encode = gpu_encode,
                                            .run = gpu_run,
                                            .to_host = gpu_to_host,
                                            .auto_method = gpu_auto_method,
                                            .worker_name = gpu_worker_name,
                                            .keeps_images = 1,
                                            .leave_to_exit = 1};
#endif

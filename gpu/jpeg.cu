/* JPEG on the GPU with nvJPEG, loaded at run time (dlopen) so that one binary runs with or without
 * it; the declarations come from nvjpeg_api.h. Decoding is batched across requests: each device
 * has one struct gpu_jpeg, whose batch threads decode what its contexts submit, on the hardware
 * JPEG decoder when the GPU has one, else with nvJPEG's CUDA decoder. Outputs are interleaved RGB
 * or gray, written straight into the context's input image, or into its output image and turned
 * upright from there when the file has an EXIF orientation. Encoding runs on the context's stream
 * with the context's encoder state; only the compressed bytes come back to the host. */
#include "gpu_int.cuh"
#include "nvjpeg_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the library ---- */

static struct nvj_api nvj;
static const char *nvj_lib; /* the file loaded, or NULL */
static char nvj_err[320];
static pthread_once_t nvj_once = PTHREAD_ONCE_INIT;

static void load_once(void) {
  static const char *const names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12"};
  void *h = NULL;
  const char *name = NULL;
  for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
    if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) != NULL) name = names[i];
  if (!h) {
    snprintf(nvj_err, sizeof(nvj_err),
             "nvJPEG not found: neither libnvjpeg.so.13 nor .so.12 loads (%s)", dlerror());
    return;
  }
  const char *missing = NULL;
#define NVJ_LOOKUP(fn, ret, args)                                                                  \
  if (!missing && !(nvj.fn = reinterpret_cast<decltype(nvj.fn)>(dlsym(h, #fn)))) missing = #fn;
  NVJ_FUNCTIONS(NVJ_LOOKUP)
#undef NVJ_LOOKUP
  if (missing) {
    snprintf(nvj_err, sizeof(nvj_err), "%s has no %s", name, missing);
    memset(&nvj, 0, sizeof(nvj));
    dlclose(h);
    return;
  }
  nvj_lib = name; /* never closed: the contexts use it until the process ends */
}

int gpu_jpeg_load(const char **lib, char *err, size_t errlen) {
  pthread_once(&nvj_once, load_once);
  if (!nvj_lib) {
    snprintf(err, errlen, "%s", nvj_err);
    return -1;
  }
  if (lib) *lib = nvj_lib;
  return 0;
}

static const char *nvj_name(nvj_status s) {
  switch (s) {
#define NVJ_CASE(n, v)                                                                             \
  case NVJ_STATUS_##n:                                                                             \
    return "NVJPEG_STATUS_" #n;
    NVJ_STATUSES(NVJ_CASE)
#undef NVJ_CASE
  }
  return "an unknown nvJPEG status";
}

/* A handle for backend b with the most of our flags the library accepts (into *flags). The flags
 * upsample chroma by interpolation (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION), as libjpeg's
 * fancy upsampling does, and decode strictly (NVJPEG_FLAGS_BITSTREAM_STRICT), so that a damaged
 * file fails and goes to the CPU decoder instead of decoding to garbage; each flag is dropped when
 * the library refuses it. */
static nvj_status create_handle(nvj_backend b, nvj_handle *h, unsigned *flags) {
  static const unsigned tries[] = {NVJ_FLAGS_UPSAMPLING_WITH_INTERPOLATION |
                                       NVJ_FLAGS_BITSTREAM_STRICT,
                                   NVJ_FLAGS_UPSAMPLING_WITH_INTERPOLATION, 0};
  nvj_status e = NVJ_STATUS_NOT_INITIALIZED;
  for (size_t i = 0; e != NVJ_STATUS_SUCCESS && i < sizeof(tries) / sizeof(tries[0]); i++)
    e = nvj.nvjpegCreateEx(b, NULL, NULL, *flags = tries[i], h);
  return e;
}

/* "interpolated chroma, strict" for the flags f, into buf. */
static const char *flag_words(unsigned f, char *buf, size_t n) {
  snprintf(buf, n, "%s chroma, %s",
           f & NVJ_FLAGS_UPSAMPLING_WITH_INTERPOLATION ? "interpolated" : "replicated",
           f & NVJ_FLAGS_BITSTREAM_STRICT ? "strict" : "lenient");
  return buf;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* ---- one device's decoder ----
 * A context that decodes puts a request on the device's list and sleeps; a free batch thread
 * takes the list when it holds max_batch requests, when every context that said it may decode
 * (gpu_jpeg_expect) has submitted, or when the oldest request has waited batch_wait_us, and
 * decodes it with nvjpegDecodeBatched. A batch the decoder fails is decoded again image by image,
 * so that one bad file fails alone. What the batched decoder refuses (progressive files on the
 * hardware decoder) is decoded alone on the context's stream by the default backend. */

struct dec_req { /* one decode waiting for a batch thread */
  const unsigned char *data;
  size_t len;
  nvj_image dst;
  nvj_output fmt;
  double t;          /* when it was submitted */
  nvj_status status; /* set by the thread */
  int done;          /* set by the thread, under mu */
  struct dec_req *next;
};

/* A batch thread with its decode state and stream. With two, while one waits for its batch the
 * other gathers and decodes the next (docs/engineering-notes.md, "two decoder threads"). */
#define JPEG_THREADS_MAX  4
#define SINGLE_STATES_MAX 32 /* single-image decoder states of a device, at most */

struct dec_lane {
  struct gpu_jpeg *j;
  nvj_state bstate;
  cudaStream_t s;
  struct dec_req **reqs; /* max_batch of them: scratch */
  const unsigned char **data;
  size_t *lens;
  nvj_image *dsts;
  pthread_t thread;
  int started;
};

struct gpu_jpeg {
  int dev;
  nvj_handle batch_h; /* the batched decoder: the hardware backend, or GPU_HYBRID */
  nvj_handle h;       /* single images and encoding: the default backend */
  int hardware;       /* batch_h is the hardware decoder */
  double wait_ms;
  int max_batch;
  int threads; /* batch threads, in lane[0 .. threads) */
  struct dec_lane lane[JPEG_THREADS_MAX];
  pthread_mutex_t mu;
  pthread_cond_t work; /* a request came, a context stopped expecting, or stop */
  pthread_cond_t done; /* a batch finished */
  int locks;           /* mu, work and done exist */
  struct dec_req *head, *tail;
  int pending;   /* requests in the list */
  int expecting; /* contexts that may still submit for their current job */
  int stop;
  struct gpu_jpeg_stats stats;
  /* Single-image decodes (images the batched decoder does not take) share a few states, made as
   * they are first needed: each state adds to the process's exit in the driver, so one per
   * context would make the exit of a server with many workers slow (engineering-notes.md, "Notes
   * moved from the code's comments"). */
  nvj_state single[SINGLE_STATES_MAX];
  int nsingle, single_cap;  /* made; the most, half the device's contexts */
  unsigned single_free;     /* bit i: single[i] is made and not in use */
  pthread_cond_t single_cv; /* a state came back */
};

struct jpeg_ctx { /* a context's nvJPEG states */
  struct gpu_jpeg *j;
  nvj_stream js; /* header parse for the batched decoder's support check */
  nvj_encoder enc;
  nvj_encoder_params params;
  int expecting; /* counted in j->expecting */
};

/* Takes a single-image decoder state of j into *k, making one while fewer than single_cap are
 * made, else waiting for one to come back. *k is -1 when none could be made. */
static nvj_status single_take(struct gpu_jpeg *j, int *k) {
  nvj_status e = NVJ_STATUS_SUCCESS;
  pthread_mutex_lock(&j->mu);
  while (!j->single_free && j->nsingle >= j->single_cap) pthread_cond_wait(&j->single_cv, &j->mu);
  if (j->single_free) {
    *k = __builtin_ctz(j->single_free);
    j->single_free &= ~(1u << *k);
  } else if ((e = nvj.nvjpegJpegStateCreate(j->h, &j->single[j->nsingle])) == NVJ_STATUS_SUCCESS) {
    *k = j->nsingle++;
  } else {
    *k = -1;
  }
  pthread_mutex_unlock(&j->mu);
  return e;
}

static void single_give(struct gpu_jpeg *j, int k) {
  pthread_mutex_lock(&j->mu);
  j->single_free |= 1u << k;
  pthread_cond_signal(&j->single_cv);
  pthread_mutex_unlock(&j->mu);
}

/* Decodes n requests of one output format in one call; a failed batch image by image. */
static void decode_group(struct dec_lane *l, struct dec_req **r, int n) {
  for (int i = 0; i < n; i++)
    l->data[i] = r[i]->data, l->lens[i] = r[i]->len, l->dsts[i] = r[i]->dst;
  nvj_handle h = l->j->batch_h;
  nvj_status e = nvj.nvjpegDecodeBatchedInitialize(h, l->bstate, n, 1, r[0]->fmt);
  if (e == NVJ_STATUS_SUCCESS)
    e = nvj.nvjpegDecodeBatched(h, l->bstate, l->data, l->lens, l->dsts, l->s);
  cudaError_t c = cudaStreamSynchronize(l->s);
  if (c != cudaSuccess && e == NVJ_STATUS_SUCCESS) e = NVJ_STATUS_EXECUTION_FAILED;
  if (e == NVJ_STATUS_SUCCESS || n == 1 || c != cudaSuccess) { /* a CUDA error: no retry */
    for (int i = 0; i < n; i++) r[i]->status = e;
    return;
  }
  for (int i = 0; i < n; i++) decode_group(l, &r[i], 1);
}

/* Decodes the n requests of list, grouped by output format. */
static void decode_batch(struct dec_lane *l, struct dec_req *list) {
  static const nvj_output fmts[] = {NVJ_OUTPUT_RGBI, NVJ_OUTPUT_Y};
  for (size_t f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++) {
    int k = 0;
    for (struct dec_req *r = list; r; r = r->next)
      if (r->fmt == fmts[f]) l->reqs[k++] = r;
    if (k) decode_group(l, l->reqs, k);
  }
}

static void count_batch(struct gpu_jpeg_stats *s, int n) {
  int b = 0;
  while (b < GPU_JPEG_BATCH_BUCKETS - 1 && n > (1 << b)) b++;
  s->hist[b]++;
  s->batches++;
  s->images += (unsigned long long)n;
}

/* Waits (mu held) until the pending requests should leave: a full batch, nobody else expected,
 * the oldest one waited wait_ms, or stop. */
static void gather(struct gpu_jpeg *j) {
  while (j->pending && j->pending < j->max_batch && j->expecting > 0 && !j->stop) {
    double until = j->head->t + j->wait_ms, left = until - now_ms();
    if (left <= 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = ts.tv_nsec + (long long)(left * 1e6);
    ts.tv_sec += (time_t)(ns / 1000000000), ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&j->work, &j->mu, &ts);
  }
}

static void *batch_main(void *arg) {
  struct dec_lane *l = (struct dec_lane *)arg;
  struct gpu_jpeg *j = l->j;
  char name[16];
  snprintf(name, sizeof(name), "blurd-jdec%d", j->dev);
  pthread_setname_np(pthread_self(), name); /* top -H and perf tell the threads apart */
  cudaSetDevice(j->dev);
  pthread_mutex_lock(&j->mu);
  for (;;) {
    while (!j->pending && !j->stop) pthread_cond_wait(&j->work, &j->mu);
    if (!j->pending) break; /* stopping, and nothing waits */
    gather(j);
    if (!j->pending) continue; /* another thread took them */
    struct dec_req *list = j->head, *last = list;
    int n = 1;
    while (n < j->max_batch && last->next) last = last->next, n++;
    j->head = last->next;
    if (!j->head) j->tail = NULL;
    last->next = NULL;
    j->pending -= n;
    pthread_mutex_unlock(&j->mu);
    decode_batch(l, list);
    pthread_mutex_lock(&j->mu);
    count_batch(&j->stats, n);
    for (struct dec_req *r = list, *next; r; r = next) next = r->next, r->done = 1;
    pthread_cond_broadcast(&j->done);
  }
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

static int make_locks(struct gpu_jpeg *j) {
  pthread_condattr_t a;
  if (pthread_condattr_init(&a) != 0) return -1;
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* gather's deadlines */
  int rc = pthread_mutex_init(&j->mu, NULL) || pthread_cond_init(&j->work, &a) ||
           pthread_cond_init(&j->done, NULL) || pthread_cond_init(&j->single_cv, NULL);
  pthread_condattr_destroy(&a);
  return rc ? -1 : 0;
}

/* The handles and locks of j. Returns 0, or -1 with a sentence. */
static int open_decoder(struct gpu_jpeg *j, char *err, size_t errlen) {
  unsigned fb = 0, fs = 0;
  char wb[64], ws[64];
  nvj_status e = create_handle(NVJ_BACKEND_DEFAULT, &j->h, &fs);
  if (e == NVJ_STATUS_SUCCESS) {
    j->hardware = create_handle(NVJ_BACKEND_HARDWARE, &j->batch_h, &fb) == NVJ_STATUS_SUCCESS;
    if (!j->hardware) e = create_handle(NVJ_BACKEND_GPU_HYBRID, &j->batch_h, &fb);
  }
  if (e != NVJ_STATUS_SUCCESS) {
    snprintf(err, errlen, "nvJPEG does not start on CUDA device %d: %s", j->dev, nvj_name(e));
    return -1;
  }
  fprintf(stderr, "blurd: cuda:%d: JPEG decoder %s (%s, %s), single images (%s), %s\n", j->dev,
          gpu_jpeg_decoder(j), nvj_lib, flag_words(fb, wb, sizeof(wb)),
          flag_words(fs, ws, sizeof(ws)), "encoder nvjpeg");
  if (make_locks(j) != 0) return -1;
  j->locks = 1;
  return 0;
}

/* Lane l's batch state, stream and scratch, and its thread. Returns 0 or -1. */
static int start_lane(struct gpu_jpeg *j, struct dec_lane *l) {
  size_t n = (size_t)j->max_batch;
  l->j = j;
  l->reqs = (struct dec_req **)calloc(n, sizeof(*l->reqs));
  l->data = (const unsigned char **)calloc(n, sizeof(*l->data));
  l->lens = (size_t *)calloc(n, sizeof(*l->lens));
  l->dsts = (nvj_image *)calloc(n, sizeof(*l->dsts));
  l->started = l->reqs && l->data && l->lens && l->dsts &&
               nvj.nvjpegJpegStateCreate(j->batch_h, &l->bstate) == NVJ_STATUS_SUCCESS &&
               cudaStreamCreateWithFlags(&l->s, cudaStreamNonBlocking) == cudaSuccess &&
               pthread_create(&l->thread, NULL, batch_main, l) == 0;
  return l->started ? 0 : -1;
}

struct gpu_jpeg *gpu_jpeg_new(int dev, int batch_wait_us, int max_batch, int threads, char *err,
                              size_t errlen) {
  if (gpu_jpeg_load(NULL, err, errlen) != 0) return NULL;
  if (errlen) err[0] = 0;
  struct gpu_jpeg *j = (struct gpu_jpeg *)calloc(1, sizeof(*j));
  if (!j) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  j->dev = dev;
  j->wait_ms = batch_wait_us / 1e3;
  j->max_batch = max_batch > 0 ? max_batch : 1;
  j->single_cap =
      (j->max_batch + 1) / 2 < SINGLE_STATES_MAX ? (j->max_batch + 1) / 2 : SINGLE_STATES_MAX;
  j->threads = threads < 1 ? 1 : threads > JPEG_THREADS_MAX ? JPEG_THREADS_MAX : threads;
  int ok = cudaSetDevice(dev) == cudaSuccess && open_decoder(j, err, errlen) == 0;
  for (int i = 0; ok && i < j->threads; i++) ok = start_lane(j, &j->lane[i]) == 0;
  if (!ok) {
    if (!*err) snprintf(err, errlen, "cannot start the JPEG decoder of CUDA device %d", dev);
    gpu_jpeg_free(j);
    return NULL;
  }
  return j;
}

void gpu_jpeg_free(struct gpu_jpeg *j) {
  if (!j) return;
  if (j->locks) {
    pthread_mutex_lock(&j->mu);
    j->stop = 1;
    pthread_cond_broadcast(&j->work);
    pthread_mutex_unlock(&j->mu);
    for (int i = 0; i < j->threads; i++)
      if (j->lane[i].started) pthread_join(j->lane[i].thread, NULL);
    pthread_cond_destroy(&j->work);
    pthread_cond_destroy(&j->done);
    pthread_cond_destroy(&j->single_cv);
    pthread_mutex_destroy(&j->mu);
  }
  cudaSetDevice(j->dev);
  for (int i = 0; i < j->threads; i++) {
    struct dec_lane *l = &j->lane[i];
    if (l->s) cudaStreamDestroy(l->s);
    if (l->bstate) nvj.nvjpegJpegStateDestroy(l->bstate);
    free(l->reqs);
    free(l->data);
    free(l->lens);
    free(l->dsts);
  }
  for (int i = 0; i < j->nsingle; i++) nvj.nvjpegJpegStateDestroy(j->single[i]);
  if (j->batch_h) nvj.nvjpegDestroy(j->batch_h);
  if (j->h) nvj.nvjpegDestroy(j->h);
  free(j);
}

const char *gpu_jpeg_decoder(const struct gpu_jpeg *j) {
  return j->hardware ? "nvjpeg-hw" : "nvjpeg-gpu";
}

void gpu_jpeg_stats(struct gpu_jpeg *j, struct gpu_jpeg_stats *s) {
  pthread_mutex_lock(&j->mu);
  *s = j->stats;
  pthread_mutex_unlock(&j->mu);
}

/* ---- a context's states ---- */

/* Runs one 1920x1080 image through ctx's encoder (both chroma layouts) and the batch decoder,
 * so that nvJPEG's buffers for a common size exist before the first request (nvJPEG sizes them
 * on first use, which the first request would otherwise wait for). */
static enum gpu_status warm_up(struct gpu_ctx *ctx) {
  struct cpu_image img = {NULL, 1920, 1080, 3, 8};
  struct cpu_image shape;
  unsigned char *jpeg[2] = {NULL, NULL};
  size_t len[2] = {0, 0};
  const char *codec;
  enum gpu_status st = grow_images(ctx, cpu_image_bytes(&img));
  if (st == GPU_OK)
    st = status_of(ctx, cudaMemsetAsync(ctx->d_in, 128, cpu_image_bytes(&img), ctx->s), "warm-up");
  for (int i = 0; i < 2 && st == GPU_OK; i++)
    st = gpu_jpeg_encode(ctx, GPU_INPUT, &img, i ? 75 : 90, !i, &jpeg[i], &len[i]);
  struct gpu_jpeg_src src = {jpeg[0], len[0], img.width, img.height, img.channels, 1, 0};
  if (st == GPU_OK) st = gpu_jpeg_decode(ctx, &src, &shape, &codec);
  free(jpeg[0]);
  free(jpeg[1]);
  return st;
}

enum gpu_status gpu_ctx_jpeg(struct gpu_ctx *ctx, struct gpu_jpeg *j) {
  struct jpeg_ctx *jc = (struct jpeg_ctx *)calloc(1, sizeof(*jc));
  if (!jc) return GPU_NO_MEMORY;
  jc->j = j;
  ctx->jpeg = jc;
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  nvj_status e = nvj.nvjpegJpegStreamCreate(j->batch_h, &jc->js);
  if (e == NVJ_STATUS_SUCCESS) e = nvj.nvjpegEncoderStateCreate(j->h, &jc->enc, ctx->s);
  if (e == NVJ_STATUS_SUCCESS) e = nvj.nvjpegEncoderParamsCreate(j->h, &jc->params, ctx->s);
  enum gpu_status st = e == NVJ_STATUS_SUCCESS ? warm_up(ctx) : GPU_ERROR;
  if (st == GPU_OK) return GPU_OK;
  if (e != NVJ_STATUS_SUCCESS)
    snprintf(ctx->err, sizeof(ctx->err), "nvJPEG states: %s", nvj_name(e));
  jpeg_ctx_free(ctx);
  return st;
}

void jpeg_ctx_free(struct gpu_ctx *ctx) {
  struct jpeg_ctx *jc = ctx->jpeg;
  if (!jc) return;
  gpu_jpeg_expect(ctx, 0);
  if (jc->params) nvj.nvjpegEncoderParamsDestroy(jc->params);
  if (jc->enc) nvj.nvjpegEncoderStateDestroy(jc->enc);
  if (jc->js) nvj.nvjpegJpegStreamDestroy(jc->js);
  free(jc);
  ctx->jpeg = NULL;
}

void gpu_jpeg_expect(struct gpu_ctx *ctx, int may_decode) {
  struct jpeg_ctx *jc = ctx->jpeg;
  if (!jc) return;
  struct gpu_jpeg *j = jc->j;
  may_decode = may_decode != 0;
  pthread_mutex_lock(&j->mu);
  if (jc->expecting != may_decode) {
    j->expecting += may_decode ? 1 : -1;
    jc->expecting = may_decode;
    if (!may_decode) pthread_cond_broadcast(&j->work); /* the batch may leave now */
  }
  pthread_mutex_unlock(&j->mu);
}

/* Puts r on the device's list and waits for a batch thread to decode it. */
static nvj_status submit(struct jpeg_ctx *jc, struct dec_req *r) {
  struct gpu_jpeg *j = jc->j;
  pthread_mutex_lock(&j->mu);
  if (jc->expecting) jc->expecting = 0, j->expecting--;
  r->t = now_ms();
  if (j->tail)
    j->tail->next = r;
  else
    j->head = r;
  j->tail = r;
  j->pending++;
  pthread_cond_signal(&j->work);
  while (!r->done) pthread_cond_wait(&j->done, &j->mu);
  pthread_mutex_unlock(&j->mu);
  return r->status;
}

/* After an nvJPEG call for ctx failed with e: GPU_FATAL when the device has a sticky error (it
 * shows on any stream), GPU_NO_MEMORY when nvJPEG could not allocate, else GPU_ERROR. */
static enum gpu_status failed(struct gpu_ctx *ctx, nvj_status e, const char *what) {
  cudaError_t c = cudaStreamSynchronize(ctx->s);
  if (c != cudaSuccess) return status_of(ctx, c, what);
  snprintf(ctx->err, sizeof(ctx->err), "%s: %s", what, nvj_name(e));
  return e == NVJ_STATUS_ALLOCATOR_FAILURE ? GPU_NO_MEMORY : GPU_ERROR;
}

/* Whether the batched decoder takes the file (the hardware decoder: baseline, single scan). */
static int batch_takes(struct jpeg_ctx *jc, const struct gpu_jpeg_src *src) {
  int no = 1;
  if (src->progressive && jc->j->hardware) return 0;
  nvj_status e = nvj.nvjpegJpegStreamParseHeader(jc->j->batch_h, src->data, src->len, jc->js);
  if (e == NVJ_STATUS_SUCCESS) e = nvj.nvjpegDecodeBatchedSupported(jc->j->batch_h, jc->js, &no);
  return e == NVJ_STATUS_SUCCESS && no == 0; /* nvJPEG says 0 for supported */
}

/* The upright pixel (x, y) of an image stored sw x sh with EXIF orientation o comes from (sx, sy):
 * the mapping of codecs/exif.c's codec_orient. */
__global__ void orient_kernel(const uint8_t *src, uint8_t *dst, int sw, int sh, int ch, int o) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  int dw = o >= 5 ? sh : sw, dh = o >= 5 ? sw : sh;
  if (x >= dw || y >= dh) return;
  int sx = x, sy = y;
  switch (o) {
  case 2:
    sx = sw - 1 - x;
    break;
  case 3:
    sx = sw - 1 - x, sy = sh - 1 - y;
    break;
  case 4:
    sy = sh - 1 - y;
    break;
  case 5:
    sx = y, sy = x;
    break;
  case 6:
    sx = y, sy = sh - 1 - x;
    break;
  case 7:
    sx = sw - 1 - y, sy = sh - 1 - x;
    break;
  case 8:
    sx = sw - 1 - y, sy = x;
    break;
  }
  const uint8_t *p = src + ((size_t)sy * sw + sx) * ch;
  uint8_t *q = dst + ((size_t)y * dw + x) * ch;
  for (int c = 0; c < ch; c++) q[c] = p[c];
}

cudaError_t launch_orient(const uint8_t *src, uint8_t *dst, int sw, int sh, int ch, int o,
                          cudaStream_t s) {
  dim3 block(32, 8), grid(div_up(o >= 5 ? sh : sw, 32), div_up(o >= 5 ? sw : sh, 8));
  orient_kernel<<<grid, block, 0, s>>>(src, dst, sw, sh, ch, o);
  return cudaGetLastError();
}

/* Decodes src into ctx's image at dst on a batch thread, or alone. */
static nvj_status decode_into(struct gpu_ctx *ctx, const struct gpu_jpeg_src *src, void *dst,
                              const char **codec) {
  struct jpeg_ctx *jc = ctx->jpeg;
  nvj_output fmt = src->channels == 1 ? NVJ_OUTPUT_Y : NVJ_OUTPUT_RGBI;
  nvj_image img = {{(unsigned char *)dst}, {(size_t)src->width * (size_t)src->channels}};
  if (batch_takes(jc, src)) {
    struct dec_req r = {src->data, src->len, img, fmt, 0, NVJ_STATUS_SUCCESS, 0, NULL};
    *codec = gpu_jpeg_decoder(jc->j);
    return submit(jc, &r);
  }
  gpu_jpeg_expect(ctx, 0);
  pthread_mutex_lock(&jc->j->mu);
  jc->j->stats.single++;
  pthread_mutex_unlock(&jc->j->mu);
  *codec = "nvjpeg-hybrid";
  int k;
  nvj_status e = single_take(jc->j, &k);
  if (e == NVJ_STATUS_SUCCESS)
    e = nvj.nvjpegDecode(jc->j->h, jc->j->single[k], src->data, src->len, fmt, &img, ctx->s);
  if (e == NVJ_STATUS_SUCCESS && cudaStreamSynchronize(ctx->s) != cudaSuccess)
    e = NVJ_STATUS_EXECUTION_FAILED;
  if (k >= 0) single_give(jc->j, k);
  return e;
}

enum gpu_status gpu_jpeg_decode(struct gpu_ctx *ctx, const struct gpu_jpeg_src *src,
                                struct cpu_image *img, const char **codec) {
  int o = src->orientation, w = src->width, h = src->height;
  if (!ctx->jpeg || (src->channels != 1 && src->channels != 3) || w < 1 || h < 1) {
    gpu_jpeg_expect(ctx, 0);
    snprintf(ctx->err, sizeof(ctx->err), "the GPU decoder does not take this JPEG");
    return GPU_ERROR;
  }
  *img = (struct cpu_image){NULL, o >= 5 ? h : w, o >= 5 ? w : h, src->channels, 8};
  enum gpu_status st = status_of(ctx, cudaSetDevice(ctx->dev), "device");
  if (st == GPU_OK) st = grow_images(ctx, cpu_image_bytes(img));
  if (st != GPU_OK) {
    gpu_jpeg_expect(ctx, 0);
    return st;
  }
  void *dst = o > 1 && o <= 8 ? ctx->d_out : ctx->d_in;
  nvj_status e = decode_into(ctx, src, dst, codec);
  if (e != NVJ_STATUS_SUCCESS) return failed(ctx, e, "nvJPEG decode");
  if (dst == ctx->d_out)
    CUDA_TRY(ctx, launch_orient((const uint8_t *)ctx->d_out, (uint8_t *)ctx->d_in, w, h,
                                src->channels, o, ctx->s));
  return GPU_OK;
}

enum gpu_status gpu_jpeg_encode(struct gpu_ctx *ctx, enum gpu_image which,
                                const struct cpu_image *img, int quality, int full_chroma,
                                unsigned char **out, size_t *len) {
  struct jpeg_ctx *jc = ctx->jpeg;
  int ch = img->channels;
  if (!jc || img->depth != 8 || (ch != 1 && ch != 3)) {
    snprintf(ctx->err, sizeof(ctx->err), "the GPU encoder takes 8-bit gray or RGB");
    return GPU_ERROR;
  }
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  nvj_handle h = jc->j->h;
  nvj_subsampling css = ch == 1 ? NVJ_CSS_GRAY : full_chroma ? NVJ_CSS_444 : NVJ_CSS_420;
  nvj_image src = {{(unsigned char *)(which == GPU_INPUT ? ctx->d_in : ctx->d_out)},
                   {(size_t)img->width * (size_t)ch}};
  nvj_status e = nvj.nvjpegEncoderParamsSetQuality(jc->params, quality, ctx->s);
  if (e == NVJ_STATUS_SUCCESS)
    e = nvj.nvjpegEncoderParamsSetSamplingFactors(jc->params, css, ctx->s);
  if (e == NVJ_STATUS_SUCCESS)
    e = ch == 3 ? nvj.nvjpegEncodeImage(h, jc->enc, jc->params, &src, NVJ_INPUT_RGBI, img->width,
                                        img->height, ctx->s)
                : nvj.nvjpegEncodeYUV(h, jc->enc, jc->params, &src, NVJ_CSS_GRAY, img->width,
                                      img->height, ctx->s);
  size_t n = 0;
  if (e == NVJ_STATUS_SUCCESS && cudaStreamSynchronize(ctx->s) != cudaSuccess)
    e = NVJ_STATUS_EXECUTION_FAILED;
  if (e == NVJ_STATUS_SUCCESS) e = nvj.nvjpegEncodeRetrieveBitstream(h, jc->enc, NULL, &n, ctx->s);
  unsigned char *buf = e == NVJ_STATUS_SUCCESS ? (unsigned char *)malloc(n ? n : 1) : NULL;
  if (e == NVJ_STATUS_SUCCESS && !buf) return GPU_NO_MEMORY;
  if (e == NVJ_STATUS_SUCCESS) e = nvj.nvjpegEncodeRetrieveBitstream(h, jc->enc, buf, &n, ctx->s);
  if (e == NVJ_STATUS_SUCCESS && cudaStreamSynchronize(ctx->s) != cudaSuccess)
    e = NVJ_STATUS_EXECUTION_FAILED;
  if (e != NVJ_STATUS_SUCCESS) {
    free(buf);
    return failed(ctx, e, "nvJPEG encode");
  }
  *out = buf;
  *len = n;
  return GPU_OK;
}

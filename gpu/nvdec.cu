/* nvdec.cu: HEVC pictures (a HEIC image's) on the GPU's video decoders, NVDEC, with the driver's
 * libnvcuvid loaded at run time through Debian's ffnvcodec headers (libffmpeg-nvenc-dev), as
 * jpeg.cu loads nvJPEG. Each device has a pool of sessions, each a parser and the decoder its
 * pictures' shape needs (kept while the next image's pictures have that shape). A job takes a
 * session, sends its image's pictures through the parser (which keeps AHEAD pictures decoding
 * ahead of the one shown), and as each is decoded (waited for asleep) maps it and converts its
 * YCbCr into its place in the context's input image with yuv_rgb, whose arithmetic is
 * formats/heif_tiles.c's (libheif's): single-precision products and sums in its order, no fused
 * multiply-adds, so the pixels equal the CPU path's. Up to MAPPED pictures stay mapped, each
 * until an event says its conversion has run. The decoders' caps (chroma format, bit
 * depth, size) are read when the pool is made; a picture they do not take, or one they report
 * as corrupt, ends the job with a reason, and the caller decodes the file on the CPU. A build
 * without the ffnvcodec headers has the API, which says so. */
#include "gpu_int.cuh"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the conversion ---- */

/* Sample i of a surface row: 8 bits, or 16 with the value in the top bits. */
__device__ __forceinline__ int surf_sample(const uint8_t *row, int i, int wide, int bits) {
  return wide ? ((const uint16_t *)row)[i] >> (16 - bits) : row[i];
}

/* libheif's rounding: + 0.5, truncated, clamped to 0..max. */
__device__ __forceinline__ int round_clip(float f, int max) {
  int i = __float2int_rz(__fadd_rn(f, 0.5f));
  return i < 0 ? 0 : i > max ? max : i;
}

struct yuv_view { /* a mapped picture */
  const uint8_t *p;
  unsigned pitch, sh; /* bytes a row; rows a plane */
  int x0, y0;         /* the display area's top-left */
  int f444, wide, bits;
};

/* Pixel (x, y) of picture v (its display area) as RGB into dst (dst_w wide, 3 samples of depth
 * bits a pixel) at (ox + x, oy + y); w x h pixels of it. */
__global__ void yuv_rgb(yuv_view v, int w, int h, gpu_yuv k, uint8_t *dst, int dst_w, int ox,
                        int oy, int depth) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  int lx = v.x0 + x, ly = v.y0 + y, cb, cr;
  int yy = surf_sample(v.p + (size_t)ly * v.pitch, lx, v.wide, v.bits);
  if (v.f444) {
    cb = surf_sample(v.p + (size_t)(v.sh + ly) * v.pitch, lx, v.wide, v.bits);
    cr = surf_sample(v.p + (size_t)(2 * v.sh + ly) * v.pitch, lx, v.wide, v.bits);
  } else { /* 4:2:0: interleaved Cb Cr rows after the luma, nearest chroma */
    int cx = (v.x0 >> 1) + (x >> 1), cy = (v.y0 >> 1) + (y >> 1);
    const uint8_t *row = v.p + (size_t)(v.sh + cy) * v.pitch;
    cb = surf_sample(row, 2 * cx, v.wide, v.bits),
    cr = surf_sample(row, 2 * cx + 1, v.wide, v.bits);
  }
  int max = (1 << v.bits) - 1, half = 1 << (v.bits - 1);
  float fcb = (float)(cb - half), fcr = (float)(cr - half), fy = (float)yy;
  if (!k.full) {
    fcb = __fmul_rn(fcb, 1.1429f), fcr = __fmul_rn(fcr, 1.1429f);
    fy = __fmul_rn(__fsub_rn(fy, (float)(16 << (v.bits - 8))), 1.1689f);
  }
  float tr = __fmul_rn(k.r_cr, fcr), tgb = __fmul_rn(k.g_cb, fcb), tgr = __fmul_rn(k.g_cr, fcr),
        tb = __fmul_rn(k.b_cb, fcb);
  int rgb[3] = {round_clip(__fadd_rn(fy, tr), max),
                round_clip(__fadd_rn(__fadd_rn(fy, tgb), tgr), max),
                round_clip(__fadd_rn(fy, tb), max)};
  size_t at = ((size_t)(oy + y) * dst_w + ox + x) * 3;
  for (int c = 0; c < 3; c++)
    if (depth == 8)
      dst[at + c] = (uint8_t)rgb[c];
    else
      ((uint16_t *)dst)[at + c] =
          (uint16_t)(((unsigned)rgb[c] * 65535u + (unsigned)max / 2) / (unsigned)max);
}

#ifdef BLURD_NVDEC
#include <ffnvcodec/dynlink_loader.h>
#include <time.h>

/* Pictures the parser keeps decoding ahead of the one being converted, and the decode surfaces
 * they need beyond the stream's minimum. */
#define AHEAD    2
/* How a picture's decode is waited for before its map: naps of WAIT_NS, at most WAIT_MAX of
 * them (then the map waits). */
#define WAIT_NS  50000
#define WAIT_MAX 40000
/* Pictures mapped at once: each stays mapped until its conversion has run, so that the host does
 * not wait for one conversion before it maps the next picture. */
#define MAPPED   4

static CudaFunctions *cu;
static CuvidFunctions *cv;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_rc = -1;

static void load(void) {
  if (cuda_load_functions(&cu, NULL) == 0 && cuvid_load_functions(&cv, NULL) == 0) load_rc = 0;
}

int gpu_nvdec_load(char *err, size_t errlen) {
  pthread_once(&load_once, load);
  if (load_rc != 0)
    snprintf(err, errlen, "libnvcuvid.so.1 (the driver's video decoders) does not load");
  return load_rc;
}

struct nv_job { /* the image a session decodes */
  struct gpu_ctx *ctx;
  const struct gpu_hevc_src *src;
  uint8_t *dst; /* the image, as stored: width x height x 3 of depth */
  int depth;
  gpu_yuv k;       /* the conversion, from the image or its pictures' sequence */
  int shown;       /* pictures converted */
  const char *why; /* set: the job failed (the decoders refused or failed) */
  enum gpu_status st;
};

struct mapped {          /* a mapped picture */
  unsigned long long p;  /* its surface */
  cudaEvent_t converted; /* recorded after its conversion */
};

struct session {
  struct gpu_nvdec *v;
  CUvideoparser parser;
  CUvideodecoder dec; /* for fmt's shape, or NULL */
  CUVIDEOFORMAT fmt;
  struct nv_job *job;
  struct mapped ring[MAPPED]; /* mapped pictures, oldest at head */
  int head, count;
};

struct gpu_nvdec {
  int dev, engines, n;
  CUcontext cuctx;            /* the device's primary context, the runtime's */
  CUVIDDECODECAPS caps[2][3]; /* 4:2:0 and 4:4:4, by 8, 10 and 12 bits */
  struct session *s;
  int *idle, nidle; /* sessions free to take */
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static int CUDAAPI on_sequence(void *arg, CUVIDEOFORMAT *f) {
  struct session *s = (struct session *)arg;
  struct nv_job *j = s->job;
  int bits = f->bit_depth_luma_minus8 + 8, c444 = f->chroma_format == cudaVideoChromaFormat_444;
  if (j->why) return 0;
  const CUVIDDECODECAPS *caps = &s->v->caps[c444][bits == 8 ? 0 : bits == 10 ? 1 : 2];
  if (f->codec != cudaVideoCodec_HEVC)
    j->why = "pictures that are not HEVC";
  else if (f->chroma_format != cudaVideoChromaFormat_420 && !c444)
    j->why = f->chroma_format == cudaVideoChromaFormat_Monochrome ? "monochrome pictures"
                                                                  : "4:2:2 pictures";
  else if (bits != j->src->bits || f->bit_depth_chroma_minus8 != f->bit_depth_luma_minus8 ||
           (bits != 8 && bits != 10 && bits != 12))
    j->why = "pictures whose depth is not their configuration's";
  else if (!caps->bIsSupported)
    j->why = "a chroma format and depth the video decoders lack";
  else if (f->coded_width < caps->nMinWidth || f->coded_height < caps->nMinHeight)
    j->why = "pictures under the video decoders' smallest size";
  else if (f->coded_width > caps->nMaxWidth || f->coded_height > caps->nMaxHeight)
    j->why = "pictures over the video decoders' largest size";
  if (j->why) return 0;
  if (j->src->has_k) {
    j->k = j->src->k;
  } else if (!j->src->coeffs(j->src->arg, f->video_signal_description.matrix_coefficients,
                             f->video_signal_description.video_full_range_flag, &j->k)) {
    j->why = "a picture's colour matrix that is not converted here";
    return 0;
  }
  if (j->k.identity) {
    j->why = "the identity colour matrix";
    return 0;
  }
  const CUVIDEOFORMAT *o = &s->fmt;
  if (s->dec && o->chroma_format == f->chroma_format &&
      o->bit_depth_luma_minus8 == f->bit_depth_luma_minus8 && o->coded_width == f->coded_width &&
      o->coded_height == f->coded_height &&
      o->min_num_decode_surfaces >= f->min_num_decode_surfaces + AHEAD + 1) {
    s->fmt.display_area = f->display_area; /* the decoder as it is */
    return o->min_num_decode_surfaces;
  }
  if (s->dec) cv->cuvidDestroyDecoder(s->dec), s->dec = NULL;
  int wide = bits > 8;
  CUVIDDECODECREATEINFO ci;
  memset(&ci, 0, sizeof(ci));
  ci.ulWidth = ci.ulMaxWidth = ci.ulTargetWidth = f->coded_width;
  ci.ulHeight = ci.ulMaxHeight = ci.ulTargetHeight = f->coded_height;
  ci.ulNumDecodeSurfaces = f->min_num_decode_surfaces + AHEAD + 1;
  ci.CodecType = f->codec, ci.ChromaFormat = f->chroma_format;
  ci.ulCreationFlags = cudaVideoCreate_PreferCUVID;
  ci.bitDepthMinus8 = f->bit_depth_luma_minus8;
  ci.ulIntraDecodeOnly = 1;
  ci.OutputFormat =
      c444 ? (wide ? cudaVideoSurfaceFormat_YUV444_16Bit : cudaVideoSurfaceFormat_YUV444)
           : (wide ? cudaVideoSurfaceFormat_P016 : cudaVideoSurfaceFormat_NV12);
  ci.DeinterlaceMode = cudaVideoDeinterlaceMode_Weave;
  ci.ulNumOutputSurfaces = MAPPED;
  ci.display_area.right = (short)f->coded_width, ci.display_area.bottom = (short)f->coded_height;
  if (cv->cuvidCreateDecoder(&s->dec, &ci) != CUDA_SUCCESS) {
    s->dec = NULL;
    j->why = "the video decoder could not be made for these pictures";
    return 0;
  }
  s->fmt = *f;
  s->fmt.min_num_decode_surfaces = (unsigned char)ci.ulNumDecodeSurfaces;
  return (int)ci.ulNumDecodeSurfaces;
}

static int CUDAAPI on_decode(void *arg, CUVIDPICPARAMS *pic) {
  struct session *s = (struct session *)arg;
  if (s->job->why) return 0;
  if (cv->cuvidDecodePicture(s->dec, pic) != CUDA_SUCCESS)
    s->job->why = "the video decoder failed on a picture";
  return !s->job->why;
}

/* Converts the mapped picture at src into its place in the job's image. */
static enum gpu_status convert(struct session *s, CUdeviceptr src, unsigned pitch) {
  struct nv_job *j = s->job;
  const struct gpu_hevc_src *h = j->src;
  const CUVIDEOFORMAT *f = &s->fmt;
  int ox = h->pic[j->shown].x, oy = h->pic[j->shown].y;
  int dw = f->display_area.right - f->display_area.left;
  int dh = f->display_area.bottom - f->display_area.top;
  int w = min(min(h->width - ox, h->tile_w), dw), hh = min(min(h->height - oy, h->tile_h), dh);
  yuv_view v = {(const uint8_t *)src,         pitch,
                (f->coded_height + 1) & ~1u,  f->display_area.left,
                f->display_area.top,          f->chroma_format == cudaVideoChromaFormat_444,
                f->bit_depth_luma_minus8 > 0, f->bit_depth_luma_minus8 + 8};
  if (w <= 0 || hh <= 0) return GPU_OK; /* a tile wholly outside the image */
  dim3 block(32, 8), grid(div_up(w, 32), div_up(hh, 8));
  yuv_rgb<<<grid, block, 0, j->ctx->s>>>(v, w, hh, j->k, j->dst, h->width, ox, oy, j->depth);
  CUDA_TRY(j->ctx, cudaGetLastError());
  return GPU_OK;
}

/* Unmaps s's oldest mapped picture once its conversion has run. */
static enum gpu_status unmap_oldest(struct session *s) {
  struct mapped *m = &s->ring[s->head];
  cudaError_t e = cudaEventSynchronize(m->converted);
  cv->cuvidUnmapVideoFrame(s->dec, m->p);
  s->head = (s->head + 1) % MAPPED, s->count--;
  return s->job ? status_of(s->job->ctx, e, "conversion") : GPU_OK;
}

static int CUDAAPI on_display(void *arg, CUVIDPARSERDISPINFO *info) {
  struct session *s = (struct session *)arg;
  struct nv_job *j = s->job;
  if (j->why) return 0;
  if (j->shown >= j->src->n) {
    j->why = "the video decoder gave more pictures than the image has";
    return 0;
  }
  /* The picture's decode, waited for here asleep: the map would wait for it spinning a core. */
  CUVIDGETDECODESTATUS ds;
  struct timespec nap = {0, WAIT_NS};
  for (int k = 0; k < WAIT_MAX; k++) {
    memset(&ds, 0, sizeof(ds));
    if (cv->cuvidGetDecodeStatus(s->dec, info->picture_index, &ds) != CUDA_SUCCESS ||
        ds.decodeStatus != cuvidDecodeStatus_InProgress)
      break;
    nanosleep(&nap, NULL);
  }
  if (ds.decodeStatus == cuvidDecodeStatus_Error ||
      ds.decodeStatus == cuvidDecodeStatus_Error_Concealed) {
    j->why = "a picture the video decoder reports as corrupt";
    return 0;
  }
  CUVIDPROCPARAMS pp;
  memset(&pp, 0, sizeof(pp));
  pp.progressive_frame = info->progressive_frame;
  pp.output_stream = (CUstream)j->ctx->s;
  unsigned pitch = 0;
  enum gpu_status st = s->count == MAPPED ? unmap_oldest(s) : GPU_OK;
  struct mapped *m = &s->ring[(s->head + s->count) % MAPPED];
  if (st == GPU_OK &&
      cv->cuvidMapVideoFrame(s->dec, info->picture_index, &m->p, &pitch, &pp) != CUDA_SUCCESS) {
    j->why = "the video decoder's picture could not be mapped";
    return 0;
  }
  if (st == GPU_OK) {
    s->count++;
    st = convert(s, (CUdeviceptr)m->p, pitch);
  }
  if (st == GPU_OK) st = status_of(j->ctx, cudaEventRecord(m->converted, j->ctx->s), "event");
  if (st != GPU_OK) j->st = st, j->why = "the conversion failed";
  j->shown++;
  return st == GPU_OK;
}

static int parser_new(struct session *s) {
  CUVIDPARSERPARAMS pp;
  memset(&pp, 0, sizeof(pp));
  pp.CodecType = cudaVideoCodec_HEVC;
  pp.ulMaxNumDecodeSurfaces = 1;
  pp.ulMaxDisplayDelay = AHEAD;
  pp.pUserData = s;
  pp.pfnSequenceCallback = on_sequence;
  pp.pfnDecodePicture = on_decode;
  pp.pfnDisplayPicture = on_display;
  return cv->cuvidCreateVideoParser(&s->parser, &pp) == CUDA_SUCCESS ? 0 : -1;
}

static void session_reset(struct session *s) {
  while (s->count > 0) unmap_oldest(s);
  if (s->parser) cv->cuvidDestroyVideoParser(s->parser), s->parser = NULL;
  if (s->dec) cv->cuvidDestroyDecoder(s->dec), s->dec = NULL;
}

struct gpu_nvdec *gpu_nvdec_new(int dev, int sessions, char *err, size_t errlen) {
  CUdevice d;
  if (gpu_nvdec_load(err, errlen) != 0) return NULL;
  struct gpu_nvdec *v = (struct gpu_nvdec *)calloc(1, sizeof(*v));
  if (!v || sessions < 1) {
    snprintf(err, errlen, "out of memory");
    free(v);
    return NULL;
  }
  v->dev = dev;
  if (cu->cuInit(0) != CUDA_SUCCESS || cu->cuDeviceGet(&d, dev) != CUDA_SUCCESS ||
      cu->cuDevicePrimaryCtxRetain(&v->cuctx, d) != CUDA_SUCCESS) {
    snprintf(err, errlen, "cuda:%d: the driver gives no context for the video decoders", dev);
    free(v);
    return NULL;
  }
  int ok = cu->cuCtxPushCurrent(v->cuctx) == CUDA_SUCCESS;
  for (int c = 0; ok && c < 2; c++)
    for (int b = 0; b < 3; b++) {
      CUVIDDECODECAPS *k = &v->caps[c][b];
      k->eCodecType = cudaVideoCodec_HEVC;
      k->eChromaFormat = c ? cudaVideoChromaFormat_444 : cudaVideoChromaFormat_420;
      k->nBitDepthMinus8 = 2 * b;
      if (cv->cuvidGetDecoderCaps(k) != CUDA_SUCCESS) k->bIsSupported = 0;
      if (k->bIsSupported && (int)k->nNumNVDECs > v->engines) v->engines = k->nNumNVDECs;
    }
  v->s = (struct session *)calloc((size_t)sessions, sizeof(*v->s));
  v->idle = (int *)calloc((size_t)sessions, sizeof(int));
  ok = ok && v->s && v->idle && v->caps[0][0].bIsSupported;
  ok = ok && cudaSetDevice(dev) == cudaSuccess;
  for (int i = 0; ok && i < sessions; i++, v->n++) {
    v->s[i].v = v;
    for (int k = 0; ok && k < MAPPED; k++)
      ok = cudaEventCreateWithFlags(&v->s[i].ring[k].converted,
                                    cudaEventDisableTiming | cudaEventBlockingSync) == cudaSuccess;
    ok = ok && parser_new(&v->s[i]) == 0;
    v->idle[v->nidle++] = i;
  }
  CUcontext popped;
  cu->cuCtxPopCurrent(&popped);
  pthread_mutex_init(&v->mu, NULL);
  pthread_cond_init(&v->cv, NULL);
  if (!ok) {
    snprintf(err, errlen, "cuda:%d: %s", dev,
             v->s && !v->caps[0][0].bIsSupported ? "the GPU has no HEVC video decoder"
                                                 : "the video decoders' parsers could not be made");
    gpu_nvdec_free(v);
    return NULL;
  }
  return v;
}

void gpu_nvdec_free(struct gpu_nvdec *v) {
  if (!v) return;
  if (v->s && cu->cuCtxPushCurrent(v->cuctx) == CUDA_SUCCESS) {
    for (int i = 0; i < v->n; i++) {
      session_reset(&v->s[i]);
      for (int k = 0; k < MAPPED; k++)
        if (v->s[i].ring[k].converted) cudaEventDestroy(v->s[i].ring[k].converted);
    }
    CUcontext popped;
    cu->cuCtxPopCurrent(&popped);
  }
  CUdevice d;
  if (cu->cuDeviceGet(&d, v->dev) == CUDA_SUCCESS) cu->cuDevicePrimaryCtxRelease(d);
  pthread_mutex_destroy(&v->mu);
  pthread_cond_destroy(&v->cv);
  free(v->s), free(v->idle), free(v);
}

int gpu_nvdec_engines(const struct gpu_nvdec *v) {
  return v ? v->engines : 0;
}

int gpu_nvdec_sessions(const struct gpu_nvdec *v) {
  return v ? v->n : 0;
}

/* Sends the job's pictures through session s's parser, then the end of the stream, which puts
 * the parser back to the start for the next image. */
static void run_job(struct session *s, struct nv_job *j) {
  const struct gpu_hevc_src *h = j->src;
  s->job = j;
  for (int i = 0; i < h->n && !j->why; i++) {
    CUVIDSOURCEDATAPACKET pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.flags = CUVID_PKT_ENDOFPICTURE;
    pkt.payload_size = (unsigned long)h->pic[i].len;
    pkt.payload = h->data + h->pic[i].off;
    if (cv->cuvidParseVideoData(s->parser, &pkt) != CUDA_SUCCESS && !j->why)
      j->why = "the video decoder's parser failed on a picture";
  }
  CUVIDSOURCEDATAPACKET end;
  memset(&end, 0, sizeof(end));
  end.flags = CUVID_PKT_ENDOFSTREAM;
  if (cv->cuvidParseVideoData(s->parser, &end) != CUDA_SUCCESS && !j->why)
    j->why = "the video decoder's parser failed at the end of the image";
  while (s->count > 0)
    if (unmap_oldest(s) != GPU_OK) j->st = GPU_FATAL, j->why = "the conversion failed";
  if (!j->why && j->shown != h->n)
    j->why = "the video decoder gave fewer pictures than the image has";
  if (j->why && (session_reset(s), parser_new(s) != 0)) s->parser = NULL;
  s->job = NULL;
}

enum gpu_status gpu_hevc_decode(struct gpu_ctx *ctx, struct gpu_nvdec *v,
                                const struct gpu_hevc_src *src, struct cpu_image *img,
                                const char **why) {
  int o = src->orientation, w = src->width, h = src->height, depth = src->bits > 8 ? 16 : 8;
  *why = NULL;
  *img = (struct cpu_image){NULL, o >= 5 ? h : w, o >= 5 ? w : h, 3, depth};
  CUDA_TRY(ctx, cudaSetDevice(ctx->dev));
  enum gpu_status st = grow_images(ctx, cpu_image_bytes(img));
  if (st != GPU_OK) return st;
  struct nv_job j = {ctx,
                     src,
                     (uint8_t *)(o > 1 && o <= 8 ? ctx->d_out : ctx->d_in),
                     depth,
                     {0, 0, 0, 0, 0, 0},
                     0,
                     NULL,
                     GPU_OK};
  pthread_mutex_lock(&v->mu);
  while (v->nidle == 0) pthread_cond_wait(&v->cv, &v->mu);
  struct session *s = &v->s[v->idle[--v->nidle]];
  pthread_mutex_unlock(&v->mu);
  if (!s->parser && parser_new(s) != 0) j.why = "the video decoder's parser could not be made";
  if (!j.why && cu->cuCtxPushCurrent(v->cuctx) != CUDA_SUCCESS)
    j.why = "the video decoders' context could not be made current";
  else if (!j.why) {
    run_job(s, &j);
    CUcontext popped;
    cu->cuCtxPopCurrent(&popped);
  }
  pthread_mutex_lock(&v->mu);
  v->idle[v->nidle++] = (int)(s - v->s);
  pthread_cond_signal(&v->cv);
  pthread_mutex_unlock(&v->mu);
  if (j.st != GPU_OK) return j.st; /* the device's own failure */
  if (j.why) {
    *why = j.why;
    snprintf(ctx->err, sizeof(ctx->err), "the video decoders did not decode it: %s", j.why);
    return GPU_ERROR;
  }
  if (j.dst == ctx->d_out)
    CUDA_TRY(ctx, launch_orient((const uint8_t *)ctx->d_out, (uint8_t *)ctx->d_in, w, h,
                                3 * depth / 8, o, ctx->s));
  return GPU_OK;
}

#else /* without Debian's ffnvcodec headers: no video decoders */

int gpu_nvdec_load(char *err, size_t errlen) {
  snprintf(err, errlen, "this build has no video decoder support (no ffnvcodec headers)");
  return -1;
}

struct gpu_nvdec *gpu_nvdec_new(int dev, int sessions, char *err, size_t errlen) {
  (void)dev, (void)sessions;
  gpu_nvdec_load(err, errlen);
  return NULL;
}

void gpu_nvdec_free(struct gpu_nvdec *v) {
  (void)v;
}

int gpu_nvdec_engines(const struct gpu_nvdec *v) {
  (void)v;
  return 0;
}

int gpu_nvdec_sessions(const struct gpu_nvdec *v) {
  (void)v;
  return 0;
}

enum gpu_status gpu_hevc_decode(struct gpu_ctx *ctx, struct gpu_nvdec *v,
                                const struct gpu_hevc_src *src, struct cpu_image *img,
                                const char **why) {
  (void)ctx, (void)v, (void)src, (void)img;
  *why = "no video decoders in this build";
  return GPU_ERROR;
}
#endif

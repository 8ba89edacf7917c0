/* HEIC's HEVC pictures on the GPU's video decoders (NVDEC), with the driver's libnvcuvid loaded at
 * run time through Debian's ffnvcodec headers (libffmpeg-nvenc-dev), as blurd loads nvJPEG. The
 * questions it answers before the service decodes HEIC there: what the decoders take
 * (cuvidGetDecoderCaps), whether their YUV planes equal libde265's sample for sample, and how fast
 * they decode a phone photograph's pictures against libde265.
 *   gpu_nvdec FILE.heic...            the caps, then every picture of each file's primary image
 *                                     (and its alpha) on both decoders, compared
 *   gpu_nvdec --rate N K FILE.heic    N passes over the file's colour pictures: on K decoders at
 *                                     once (a thread each), and on libde265 on one thread
 * A picture the caps refuse (under 144x144 on an H200, or monochrome: an alpha plane) is named as
 * the CPU path's. Exits 1 when a sample differs or a decoder fails. */
#include "test.h"

#include "fixtures.h"

#include "../formats/heif_int.h"

#include <ffnvcodec/dynlink_loader.h>
#include <libde265/de265.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static CudaFunctions *cu;
static CuvidFunctions *cv;
static CUcontext ctx;

#define CU_OK(call)                                                                                \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) TEST_FAIL("%s: CUDA error %d", #call, (int)r_);                        \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* ---- the pictures, as Annex B streams ---- */

struct stream { /* one coded picture: its configuration's NAL units, then its own */
  uint8_t *p;
  size_t n;
};

/* Appends count NAL units of r (size-byte lengths) to s, each after a start code. */
static void annexb(struct stream *s, struct rd *r, unsigned size, uint64_t count) {
  for (uint64_t i = 0; i < count && r->n > 0; i++) {
    uint64_t n = rd_uint(r, size);
    ASSERT(!r->bad && n <= r->n);
    s->p = realloc(s->p, s->n + 4 + n);
    ASSERT(s->p != NULL);
    memcpy(s->p + s->n, "\0\0\0\1", 4);
    memcpy(s->p + s->n + 4, r->p, n);
    s->n += 4 + n;
    r->p += n, r->n -= n;
  }
}

/* The pictures of image item id (a grid's tiles, or the item itself) as streams; *n of them. */
static struct stream *pictures(const struct hfile *f, uint32_t id, int *n, struct hlayout *l) {
  struct codec_limits lim = {0, 0, 0};
  char msg[200];
  if (hf_layout(f, id, &lim, l, msg, sizeof(msg)) != CODEC_OK) TEST_FAIL("layout: %s", msg);
  if (l->codec != FOURCC("hvc1")) TEST_FAIL("item %u is not HEVC", id);
  *n = l->rows * l->cols;
  struct stream *s = calloc((size_t)*n, sizeof(*s));
  for (int i = 0; i < *n; i++) {
    struct hitem *it = hf_item(f, l->tiles[i]);
    struct span conf, data;
    uint8_t *owned = NULL;
    ASSERT(it && hf_prop(f, it, FOURCC("hvcC"), &conf) == 0 && conf.n > 23);
    ASSERT(hf_data(f, it, &data, &owned) == CODEC_OK);
    struct rd r = {conf.p + 22, conf.n - 22, 0};
    uint64_t arrays = rd_uint(&r, 1);
    for (uint64_t a = 0; a < arrays; a++) {
      rd_uint(&r, 1);
      annexb(&s[i], &r, 2, rd_uint(&r, 2));
    }
    struct rd d = {data.p, data.n, 0};
    annexb(&s[i], &d, (conf.p[21] & 3) + 1u, UINT64_MAX);
    free(owned);
  }
  return s;
}

/* ---- planes ---- */

struct planes { /* a picture's samples as values (16 bits each), its chroma's shifts */
  int w, h, bits, sx, sy, mono;
  uint16_t *p[3];
};

static void planes_free(struct planes *q) {
  for (int i = 0; i < 3; i++) free(q->p[i]);
  memset(q, 0, sizeof(*q));
}

/* libde265's picture of s, or a failure. */
static void de265_picture(const struct stream *s, struct planes *q) {
  de265_decoder_context *c = de265_new_decoder();
  ASSERT(c != NULL);
  ASSERT(de265_isOK(de265_push_data(c, s->p, (int)s->n, 0, NULL)));
  de265_flush_data(c);
  const struct de265_image *img = NULL;
  int more = 1;
  while (more && !img) {
    more = 0;
    ASSERT(de265_isOK(de265_decode(c, &more)));
    img = de265_peek_next_picture(c);
  }
  ASSERT(img != NULL);
  enum de265_chroma ch = de265_get_chroma_format(img);
  *q = (struct planes){.w = de265_get_image_width(img, 0),
                       .h = de265_get_image_height(img, 0),
                       .bits = de265_get_bits_per_pixel(img, 0)};
  q->mono = ch == de265_chroma_mono;
  q->sx = ch == de265_chroma_420 || ch == de265_chroma_422, q->sy = ch == de265_chroma_420;
  for (int i = 0; i < (q->mono ? 1 : 3); i++) {
    int stride, w = i ? q->w >> q->sx : q->w, h = i ? q->h >> q->sy : q->h;
    const uint8_t *src = de265_get_image_plane(img, i, &stride);
    q->p[i] = malloc((size_t)w * h * 2);
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++)
        q->p[i][(size_t)y * w + x] =
            q->bits > 8 ? ((const uint16_t *)(src + (size_t)y * stride))[x] : src[y * stride + x];
  }
  de265_free_decoder(c);
}

/* ---- NVDEC ---- */

struct nv { /* one decoder, its parser, and where its pictures go */
  CUvideoparser parser;
  CUvideodecoder dec;
  CUVIDEOFORMAT fmt;
  cudaVideoSurfaceFormat out;
  struct planes *dst; /* the next picture's planes; NULL: map it only (the rate) */
  int shown, failed;
  char refused[64]; /* what the caps refused: a picture for the CPU path, not a failure */
};

static int CUDAAPI on_sequence(void *arg, CUVIDEOFORMAT *f) {
  struct nv *d = arg;
  if (d->dec) return f->min_num_decode_surfaces; /* the same sequence again: every picture */
  CUVIDDECODECAPS caps = {.eCodecType = f->codec,
                          .eChromaFormat = f->chroma_format,
                          .nBitDepthMinus8 = f->bit_depth_luma_minus8};
  if (cv->cuvidGetDecoderCaps(&caps) != CUDA_SUCCESS || !caps.bIsSupported ||
      f->coded_width < caps.nMinWidth || f->coded_height < caps.nMinHeight ||
      f->coded_width > caps.nMaxWidth || f->coded_height > caps.nMaxHeight) {
    snprintf(d->refused, sizeof(d->refused), "%ux%u, %s, %d bits", f->coded_width, f->coded_height,
             f->chroma_format == cudaVideoChromaFormat_Monochrome ? "4:0:0" : "chroma",
             f->bit_depth_luma_minus8 + 8);
    d->failed = 1;
    return 0;
  }
  int wide = f->bit_depth_luma_minus8 > 0, full = f->chroma_format == cudaVideoChromaFormat_444;
  d->out = full ? (wide ? cudaVideoSurfaceFormat_YUV444_16Bit : cudaVideoSurfaceFormat_YUV444)
                : (wide ? cudaVideoSurfaceFormat_P016 : cudaVideoSurfaceFormat_NV12);
  d->fmt = *f;
  CUVIDDECODECREATEINFO ci = {.ulWidth = f->coded_width,
                              .ulHeight = f->coded_height,
                              .ulNumDecodeSurfaces = f->min_num_decode_surfaces,
                              .CodecType = f->codec,
                              .ChromaFormat = f->chroma_format,
                              .ulCreationFlags = cudaVideoCreate_PreferCUVID,
                              .bitDepthMinus8 = f->bit_depth_luma_minus8,
                              .ulIntraDecodeOnly = 1,
                              .ulMaxWidth = f->coded_width,
                              .ulMaxHeight = f->coded_height,
                              .OutputFormat = d->out,
                              .DeinterlaceMode = cudaVideoDeinterlaceMode_Weave,
                              .ulTargetWidth = f->coded_width,
                              .ulTargetHeight = f->coded_height,
                              .ulNumOutputSurfaces = 2};
  ci.display_area.right = (short)f->coded_width, ci.display_area.bottom = (short)f->coded_height;
  if (cv->cuvidCreateDecoder(&d->dec, &ci) != CUDA_SUCCESS) d->failed = 1;
  return d->failed ? 0 : f->min_num_decode_surfaces;
}

static int CUDAAPI on_decode(void *arg, CUVIDPICPARAMS *pic) {
  struct nv *d = arg;
  if (cv->cuvidDecodePicture(d->dec, pic) != CUDA_SUCCESS) d->failed = 1;
  return !d->failed;
}

/* Copies the mapped surface's planes (cropped to the display area) into d->dst. */
static void copy_out(struct nv *d, CUdeviceptr src, unsigned pitch) {
  const CUVIDEOFORMAT *f = &d->fmt;
  struct planes *q = d->dst;
  int full =
      d->out == cudaVideoSurfaceFormat_YUV444 || d->out == cudaVideoSurfaceFormat_YUV444_16Bit;
  int bytes =
      d->out == cudaVideoSurfaceFormat_NV12 || d->out == cudaVideoSurfaceFormat_YUV444 ? 1 : 2;
  int x0 = f->display_area.left, y0 = f->display_area.top;
  *q = (struct planes){.w = f->display_area.right - x0,
                       .h = f->display_area.bottom - y0,
                       .bits = f->bit_depth_luma_minus8 + 8};
  q->sx = q->sy = !full;
  q->mono = f->chroma_format == cudaVideoChromaFormat_Monochrome;
  /* the surface: luma rows, then (4:2:0) interleaved chroma rows or (4:4:4) two planes, each
   * coded_height rows (aligned as the decoder chose: the pitch and the surface height) */
  size_t sh = (f->coded_height + 1) & ~1u,
         size = (size_t)pitch * sh * (full ? 3 : 1) + (full ? 0 : (size_t)pitch * sh / 2);
  uint8_t *host = malloc(size);
  CU_OK(cu->cuMemcpyDtoH(host, src, size));
  int shift = bytes == 2 ? 16 - q->bits : 0; /* 16-bit surfaces hold the value in the top bits */
#define SAMPLE(row, x)                                                                             \
  (bytes == 1 ? (row)[x] : (uint16_t)((row)[2 * (x)] | (row)[2 * (x) + 1] << 8) >> shift)
  for (int i = 0; i < (q->mono ? 1 : 3); i++) {
    int w = i ? q->w >> q->sx : q->w, h = i ? q->h >> q->sy : q->h;
    q->p[i] = malloc((size_t)w * h * 2);
    for (int y = 0; y < h; y++) {
      const uint8_t *row;
      int step = 1, first = 0;
      if (i == 0)
        row = host + (size_t)(y0 + y) * pitch;
      else if (full)
        row = host + (size_t)i * pitch * sh + (size_t)(y0 + y) * pitch;
      else
        row = host + pitch * sh + (size_t)((y0 >> 1) + y) * pitch, step = 2, first = i - 1;
      for (int x = 0; x < w; x++)
        q->p[i][(size_t)y * w + x] = SAMPLE(row, ((i ? x0 >> q->sx : x0) + x) * step + first);
    }
  }
#undef SAMPLE
  free(host);
}

static int CUDAAPI on_display(void *arg, CUVIDPARSERDISPINFO *info) {
  struct nv *d = arg;
  CUVIDPROCPARAMS pp = {.progressive_frame = info->progressive_frame};
  unsigned long long src = 0;
  unsigned pitch = 0;
  if (cv->cuvidMapVideoFrame(d->dec, info->picture_index, &src, &pitch, &pp) != CUDA_SUCCESS) {
    d->failed = 1;
    return 0;
  }
  if (d->dst) copy_out(d, (CUdeviceptr)src, pitch), d->dst++;
  cv->cuvidUnmapVideoFrame(d->dec, src);
  d->shown++;
  return 1;
}

static void nv_open(struct nv *d) {
  memset(d, 0, sizeof(*d));
  CUVIDPARSERPARAMS pp = {.CodecType = cudaVideoCodec_HEVC,
                          .ulMaxNumDecodeSurfaces = 1,
                          .ulMaxDisplayDelay = 0,
                          .pUserData = d,
                          .pfnSequenceCallback = on_sequence,
                          .pfnDecodePicture = on_decode,
                          .pfnDisplayPicture = on_display};
  CU_OK(cv->cuvidCreateVideoParser(&d->parser, &pp));
}

/* Decodes the n streams, in order, into out[0..n) (NULL: maps them only); then the end of the
 * stream flushes the last one out. */
static void nv_decode(struct nv *d, const struct stream *s, int n, struct planes *out) {
  d->dst = out;
  for (int i = 0; i < n && !d->failed; i++) {
    CUVIDSOURCEDATAPACKET pkt = {
        .flags = CUVID_PKT_ENDOFPICTURE, .payload_size = (unsigned long)s[i].n, .payload = s[i].p};
    CU_OK(cv->cuvidParseVideoData(d->parser, &pkt));
  }
  CUVIDSOURCEDATAPACKET end = {.flags = CUVID_PKT_ENDOFSTREAM};
  CU_OK(cv->cuvidParseVideoData(d->parser, &end));
}

static void nv_close(struct nv *d) {
  if (d->parser) cv->cuvidDestroyVideoParser(d->parser);
  if (d->dec) cv->cuvidDestroyDecoder(d->dec);
}

/* ---- what the decoders take ---- */

static void print_caps(void) {
  static const char *const chroma[] = {"4:0:0", "4:2:0", "4:2:2", "4:4:4"};
  for (int c = 1; c <= 3; c += 2)
    for (int bits = 8; bits <= 12; bits += 2) {
      CUVIDDECODECAPS k = {.eCodecType = cudaVideoCodec_HEVC,
                           .eChromaFormat = (cudaVideoChromaFormat)c,
                           .nBitDepthMinus8 = (unsigned)bits - 8};
      CU_OK(cv->cuvidGetDecoderCaps(&k));
      printf("caps: HEVC %s %2d bits: %s, %d engines, %ux%u to %ux%u\n", chroma[c], bits,
             k.bIsSupported ? "yes" : "no", k.nNumNVDECs, k.nMinWidth, k.nMinHeight, k.nMaxWidth,
             k.nMaxHeight);
    }
  CUVIDDECODECAPS av1 = {.eCodecType = cudaVideoCodec_AV1,
                         .eChromaFormat = cudaVideoChromaFormat_420};
  CU_OK(cv->cuvidGetDecoderCaps(&av1));
  printf("caps: AV1 4:2:0 8 bits: %s\n", av1.bIsSupported ? "yes" : "no");
}

/* ---- the checks ---- */

/* The differing samples of a and b (the same shape asserted). */
static long compare(const struct planes *a, const struct planes *b, int *worst) {
  ASSERT(a->w == b->w && a->h == b->h && a->bits == b->bits && a->mono == b->mono);
  ASSERT(a->sx == b->sx && a->sy == b->sy);
  long differ = 0;
  for (int i = 0; i < (a->mono ? 1 : 3); i++) {
    size_t n = (size_t)(i ? a->w >> a->sx : a->w) * (i ? a->h >> a->sy : a->h);
    for (size_t k = 0; k < n; k++) {
      int d = abs((int)a->p[i][k] - (int)b->p[i][k]);
      differ += d != 0;
      if (d > *worst) *worst = d;
    }
  }
  return differ;
}

/* Every picture of image id in f on both decoders; returns the differing samples. */
static long check_image(const struct hfile *f, uint32_t id, const char *what) {
  struct hlayout l;
  int n;
  struct stream *s = pictures(f, id, &n, &l);
  struct planes *nvq = calloc((size_t)n, sizeof(*nvq));
  struct nv d;
  nv_open(&d);
  nv_decode(&d, s, n, nvq);
  long differ = 0;
  int worst = 0;
  if (d.refused[0]) { /* the caps' answer, asked as the service will: the CPU path's picture */
    printf("  %s: not for the video decoders (%s): the CPU path's\n", what, d.refused);
    differ = -2;
  } else if (d.failed || d.shown != n) {
    printf("  %s: NVDEC gave %d of %d pictures%s\n", what, d.shown, n, d.failed ? ", failed" : "");
    differ = -1;
  }
  for (int i = 0; differ >= 0 && i < n; i++) {
    struct planes ref;
    de265_picture(&s[i], &ref);
    differ += compare(&ref, &nvq[i], &worst);
    planes_free(&ref);
  }
  if (differ >= 0)
    printf("  %s: %d pictures of %dx%d, %d bits, %s: %ld samples differ (largest %d)\n", what, n,
           nvq[0].w, nvq[0].h, nvq[0].bits,
           nvq[0].mono ? "4:0:0"
           : nvq[0].sy ? "4:2:0"
                       : "4:4:4",
           differ, worst);
  for (int i = 0; i < n; i++) planes_free(&nvq[i]), free(s[i].p);
  free(nvq), free(s), free(l.tiles);
  nv_close(&d);
  return differ == -2 ? 0 : differ;
}

static int check_file(const char *path) {
  size_t len;
  uint8_t *buf = fixture_read(path, &len);
  struct hfile f;
  if (!buf) TEST_FAIL("cannot open %s", path);
  if (hf_parse(&f, buf, len) != 0) TEST_FAIL("%s: not a HEIF file blurd reads", path);
  printf("%s\n", path);
  long bad = check_image(&f, f.primary, "colour");
  uint32_t alpha = hf_alpha(&f, f.primary);
  long bad_alpha = alpha ? check_image(&f, alpha, "alpha") : 0;
  hf_free(&f);
  free(buf);
  return bad != 0 || bad_alpha != 0;
}

/* ---- the rate ---- */

struct rate_job {
  const struct stream *s;
  int n, passes;
  long shown;
};

static void *rate_thread(void *arg) {
  struct rate_job *j = arg;
  CU_OK(cu->cuCtxPushCurrent(ctx));
  struct nv d;
  nv_open(&d);
  for (int p = 0; p < j->passes && !d.failed; p++) nv_decode(&d, j->s, j->n, NULL);
  j->shown = d.failed ? -1 : d.shown;
  nv_close(&d);
  CUcontext popped;
  cu->cuCtxPopCurrent(&popped);
  return NULL;
}

static int rate(int passes, int sessions, const char *path) {
  size_t len;
  uint8_t *buf = fixture_read(path, &len);
  struct hfile f;
  struct hlayout l;
  if (!buf) TEST_FAIL("cannot open %s", path);
  int n;
  ASSERT(hf_parse(&f, buf, len) == 0);
  struct stream *s = pictures(&f, f.primary, &n, &l);
  struct rate_job jobs[64];
  pthread_t th[64];
  ASSERT(sessions >= 1 && sessions <= 64);
  double t0 = now_s();
  for (int k = 0; k < sessions; k++) {
    jobs[k] = (struct rate_job){s, n, passes, 0};
    ASSERT(pthread_create(&th[k], NULL, rate_thread, &jobs[k]) == 0);
  }
  long shown = 0;
  for (int k = 0; k < sessions; k++) {
    pthread_join(th[k], NULL);
    if (jobs[k].shown < 0) TEST_FAIL("NVDEC failed in session %d", k);
    shown += jobs[k].shown;
  }
  double nv_s = now_s() - t0;
  t0 = now_s();
  int cpu_passes = passes < 3 ? passes : 3;
  for (int p = 0; p < cpu_passes; p++)
    for (int i = 0; i < n; i++) {
      struct planes q;
      de265_picture(&s[i], &q);
      planes_free(&q);
    }
  double de_s = now_s() - t0;
  double mp = (double)l.tile_w * l.tile_h / 1e6;
  printf("rate: %s, %d pictures of %dx%d a pass\n", path, n, l.tile_w, l.tile_h);
  printf("rate: NVDEC, %d sessions: %ld pictures in %.3f s: %.0f pictures/s, %.1f Mpix/s, %.1f "
         "images/s\n",
         sessions, shown, nv_s, shown / nv_s, shown * mp / nv_s, shown / nv_s / n);
  printf("rate: libde265, one thread: %d pictures in %.3f s: %.0f pictures/s, %.1f Mpix/s, %.2f "
         "images/s\n",
         cpu_passes * n, de_s, cpu_passes * n / de_s, cpu_passes * n * mp / de_s,
         cpu_passes / de_s);
  for (int i = 0; i < n; i++) free(s[i].p);
  free(s), free(l.tiles);
  hf_free(&f);
  free(buf);
  return shown != (long)sessions * passes * n;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gpu_nvdec FILE.heic... | gpu_nvdec --rate PASSES SESSIONS FILE.heic\n");
    return 2;
  }
  if (cuda_load_functions(&cu, NULL) != 0 || cuvid_load_functions(&cv, NULL) != 0) {
    printf("gpu_nvdec: libcuda.so.1 or libnvcuvid.so.1 does not load: no video decoder here\n");
    return 1;
  }
  CUdevice dev;
  CU_OK(cu->cuInit(0));
  CU_OK(cu->cuDeviceGet(&dev, 0));
  CU_OK(cu->cuCtxCreate(&ctx, 0, dev));
  int bad = 0;
  if (strcmp(argv[1], "--rate") == 0) {
    ASSERT(argc == 5);
    bad = rate(atoi(argv[2]), atoi(argv[3]), argv[4]);
  } else {
    print_caps();
    for (int i = 1; i < argc; i++) bad |= check_file(argv[i]);
  }
  cu->cuCtxDestroy(ctx);
  printf("gpu_nvdec: %s\n", bad ? "FAILED" : "all pictures equal libde265's");
  return bad;
}

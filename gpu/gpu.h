/* gpu: the CUDA backend's compute, as a small plain-C API. CUDA types stay inside the .cu
 * files behind the opaque struct gpu_ctx: one context per worker, each with its own device,
 * stream, CUDA events, pinned host staging buffers and device buffers that grow when an image
 * needs more and are reused across jobs (no cudaMalloc per request in steady state). Every method
 * of cpu/ has a kernel here, and its CPU function is the oracle the GPU test suite compares
 * against: the fir family gives the same bytes (exact integer sums), the others stay within 1
 * level. The coefficients come from cpu/, so both backends filter with the same numbers. */
#ifndef BLURD_GPU_H
#define BLURD_GPU_H

#include "../cpu/cpu.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a gpu_ call returns: enum name, meaning. Every function of this API returns one; the
 * CUDA error behind anything but GPU_OK is logged with its file and line (CUDA_TRY) and kept as a
 * sentence for gpu_ctx_error. */
/* clang-format off */
#define GPU_STATUSES(X)                                                                            \
  X(OK,        "success")                                                                          \
  X(NO_MEMORY, "device or pinned memory ran out: this job fails, the service carries on")          \
  X(ERROR,     "another error that leaves the device usable")                                      \
  X(FATAL,     "a sticky error (illegal address, launch failure): the device is lost")
/* clang-format on */

enum gpu_status {
#define X(e, meaning) GPU_##e,
  GPU_STATUSES(X)
#undef X
};

/* "NO_MEMORY" for GPU_NO_MEMORY, or NULL when s is out of range. */
const char *gpu_status_name(enum gpu_status s);
/* The meaning of s, from GPU_STATUSES. */
const char *gpu_status_meaning(enum gpu_status s);

/* Number of visible CUDA devices (CUDA_VISIBLE_DEVICES applies); 0 without a driver. */
int gpu_device_count(void);

struct gpu_device_info {
  char name[96];    /* the device's name, as CUDA gives it */
  size_t mem_total; /* bytes */
  size_t mem_free;  /* bytes, when asked for (with_free); else 0 */
  int sm_count;
  int major, minor; /* compute capability */
};

/* Makes device dev's CUDA context (blocking sync, as every context of blurd's) and loads its
 * kernels. Returns 0, or -1. */
int gpu_device_open(int dev);

/* Fills info for device dev. Only with_free asks for its free memory, which needs the device's
 * context: the caller passes 1 only for a device whose context is made (gpu_device_open), since
 * making one is slow and, made in turn for every GPU at the start, would delay the first GPU's
 * readiness by that much a GPU. Returns 0, or -1. */
int gpu_device_info(int dev, int with_free, struct gpu_device_info *info);

struct gpu_ctx;

/* A context on device dev: a stream, events, and empty buffers. Returns NULL with a sentence in
 * err on failure. */
struct gpu_ctx *gpu_ctx_new(int dev, char *err, size_t errlen);
/* Frees ctx and its buffers; ctx may be NULL. */
void gpu_ctx_free(struct gpu_ctx *ctx);
/* "cuda:0 " and the device's name. */
const char *gpu_ctx_name(const struct gpu_ctx *ctx);
/* Device bytes this context holds. */
size_t gpu_ctx_bytes(const struct gpu_ctx *ctx);

struct gpu_times {  /* milliseconds, from CUDA events on the context's stream */
  double upload;    /* host to device, from pinned staging */
  double kernel;    /* the method's kernels */
  double reference; /* the exact reference and the PSNR, on the GPU; 0 when not asked for */
  double download;  /* device to host */
};

/* Blurs src into dst (same shape, its own buffer) on ctx's device. When acc is not NULL the exact
 * reference is computed on the GPU too, and dst is measured against it as cpu_blur_image does.
 * When dst->data is NULL it is set to ctx's pinned staging buffer instead of copying the result
 * out of it; that buffer is valid until the next call on ctx. t may be NULL. */
enum gpu_status gpu_blur(struct gpu_ctx *ctx, const struct cpu_blur *b, const struct cpu_image *src,
                         struct cpu_image *dst, struct cpu_accuracy *acc, struct gpu_times *t);

/* Whether the last PSNR of gpu_blur or gpu_blur_resident on ctx came from the double reference:
 * the single-precision one's bound could not fix it to 0.01 dB (docs/methods.md, "PSNR"), the
 * kernel was wider than it takes, or BLURD_PSNR_REFERENCE=double said so. */
int gpu_reference_exact(const struct gpu_ctx *ctx);

/* Whether separable (and pyramid below sigma 6) runs on ctx in integers on the tensor cores for
 * blur b of an image shaped as img: 8-bit gray or RGB, the default truncate, radius at most 160
 * (sigma 40), compute capability 8.0 on, neither BLURD_GPU_PRECISION nor BLURD_PSNR_REFERENCE
 * set to another. Each output is then the integer reference rounded (within its bound of the
 * exact Gaussian: docs/methods.md, "separable in integers on the GPU") and the same pass measures
 * its PSNR, so with the PSNR it costs what the reference alone costs after any other method. */
int gpu_separable_exact(const struct gpu_ctx *ctx, const struct cpu_blur *b,
                        const struct cpu_image *img);

/* For benchmarks: uploads src once, runs the method's kernels reps times and stores the median
 * kernel time (CUDA events) in *ms. Nothing is downloaded. */
enum gpu_status gpu_bench(struct gpu_ctx *ctx, const struct cpu_blur *b,
                          const struct cpu_image *src, int reps, double *ms);

/* The method `auto` stands for on the GPU: the fastest one that reaches 48 dB for this sigma
 * and image size (README, "auto"). */
enum cpu_method gpu_auto_method(double sigma, int width, int height);

/* yvv and yvv2way on 8-bit images run in single precision up to this sigma (the larger of the
 * two axes') and in double above it, where their direct forms in single precision drift more
 * than a level from the CPU twin (measured by tests/gpu_check.c; README). yvv_blocked (a cascade)
 * and deriche (two sections in delta form) stay in single precision at every sigma. 16-bit images
 * always use double. */
#define GPU_FLOAT_SIGMA_MAX 20.0

/* ---- local statistics, contrast and convolution (the twins of cpu_variance,
 * cpu_contrast_image and cpu_convolve_image; same arguments and conventions) ---- */

/* Local mean (when mean is not NULL) and variance of the gray plane src on ctx's device, into
 * host arrays of width*height doubles. exact gives the same bits as cpu_variance; the float32
 * methods stay within the tolerance tests/gpu_check.c states. t may be NULL (upload, kernel,
 * download are filled; reference is 0). */
enum gpu_status gpu_variance(struct gpu_ctx *ctx, const struct cpu_var *v,
                             const struct cpu_image *src, double *mean, double *var,
                             struct gpu_times *t);
/* cpu_contrast_image on the GPU: within one level of the CPU twin. */
enum gpu_status gpu_contrast(struct gpu_ctx *ctx, const struct cpu_contrast *c,
                             const struct cpu_image *src, struct cpu_image *dst,
                             struct gpu_times *t);
/* cpu_convolve_image on the GPU, a shared-memory tile with halo: the same bytes. */
enum gpu_status gpu_convolve(struct gpu_ctx *ctx, const struct cpu_conv *c,
                             const struct cpu_image *src, struct cpu_image *dst,
                             struct gpu_times *t);
/* For benchmarks: uploads src once, runs the variance kernels reps times and stores the median
 * kernel time (CUDA events) in *ms. */
enum gpu_status gpu_variance_bench(struct gpu_ctx *ctx, const struct cpu_var *v,
                                   const struct cpu_image *src, int reps, double *ms);

/* ---- images that stay on the device ----
 * A context holds two device images: its input (what gpu_upload or gpu_jpeg_decode put there)
 * and its output (what the last *_resident filter wrote). A job can decode, filter and encode
 * without its pixels crossing to the host; gpu_download brings one image back when a CPU codec
 * needs it. The shape (width, height, channels, depth) is the caller's to remember; the data
 * pointers of the shapes below are ignored. */

enum gpu_image { GPU_INPUT, GPU_OUTPUT };

/* Copies src (host) into the input image through pinned staging; t->upload is filled. */
enum gpu_status gpu_upload(struct gpu_ctx *ctx, const struct cpu_image *src, struct gpu_times *t);
/* Copies image which of shape img into pinned staging and sets *pixels to it: valid until the
 * next call on ctx. t->download is filled. */
enum gpu_status gpu_download(struct gpu_ctx *ctx, enum gpu_image which, const struct cpu_image *img,
                             void **pixels, struct gpu_times *t);
/* gpu_blur, gpu_contrast and gpu_convolve from the input image to the output image (shape img);
 * t gets kernel (and reference) times, no upload or download. */
enum gpu_status gpu_blur_resident(struct gpu_ctx *ctx, const struct cpu_blur *b,
                                  const struct cpu_image *img, struct cpu_accuracy *acc,
                                  struct gpu_times *t);
/* A region of /blur: the box blurred (x, y, width, height: the region grown by the filter's
 * reach, within the image) and the region itself (x0, y0, x1, y1, exclusive ends). */
struct gpu_region {
  int box[4];
  int rect[4];
};
/* Region blur of the input image (shape img) into the output image: each region's box blurred
 * alone (acc[i], when acc, its accuracy) and blended into the image in order, as cpu_blend_box
 * does (the same samples). t gets the kernel and reference times. At most GPU_REGIONS_MAX. */
#define GPU_REGIONS_MAX 64
enum gpu_status gpu_blur_regions(struct gpu_ctx *ctx, const struct cpu_blur *b,
                                 const struct cpu_image *img, const struct gpu_region *r, int n,
                                 int feather, struct cpu_accuracy *acc, struct gpu_times *t);
/* For benchmarks (tools/bench.c): the kernel time of a region blur of src (uploaded here) and of
 * a whole-image blur, in ms: each call alone as the server times it (ms[0] regions, ms[1] whole:
 * gpu_blur_regions' and gpu_blur_resident's kernel time, median of reps after two warm-ups), and
 * queued (ms[2], ms[3]: three calls back to back between two events, each launched while the one
 * before runs, divided by 3, median of reps: the GPU time each takes; ms[2] -1 where the regions'
 * blur waits between its launches, as it does but for pyramid's windows). */
enum gpu_status gpu_bench_regions(struct gpu_ctx *ctx, const struct cpu_blur *b,
                                  const struct cpu_image *src, const struct gpu_region *r, int n,
                                  int feather, int reps, double ms[4]);
enum gpu_status gpu_contrast_resident(struct gpu_ctx *ctx, const struct cpu_contrast *c,
                                      const struct cpu_image *img, struct gpu_times *t);
enum gpu_status gpu_convolve_resident(struct gpu_ctx *ctx, const struct cpu_conv *c,
                                      const struct cpu_image *img, struct gpu_times *t);
/* /sharpen on the device: blurs the input image (shape img) with b and writes
 * cpu_unsharp_image(input, blurred) into the output image (luma and threshold included), the
 * image never leaving the device. The composition is cpu_unsharp_image's operations in the same
 * order, without fused multiply-adds: the same bytes as the CPU given the same blur (fir: always;
 * the other methods' blurs are within a level of the CPU's, see gpu_blur). acc (may be NULL):
 * the blur's accuracy, as gpu_blur_resident. t gets the kernel (and reference) times. */
enum gpu_status gpu_sharpen_resident(struct gpu_ctx *ctx, const struct cpu_blur *b,
                                     const struct cpu_unsharp *u, const struct cpu_image *img,
                                     struct cpu_accuracy *acc, struct gpu_times *t);
/* cpu_pixelate from the input image (shape img) to the output image, bit for bit: integer block
 * sums, and the regions' blend in cpu_blend_box's operations. At most GPU_REGIONS_MAX regions.
 * t gets the kernel time. */
enum gpu_status gpu_pixelate_resident(struct gpu_ctx *ctx, const struct cpu_pixelate *p,
                                      const struct cpu_image *img, const int (*rect)[4], int n,
                                      int feather, struct gpu_times *t);
/* cpu_variance_image on the device from the input image (shape img, any channels): the 16-bit
 * gray image goes to the output image (shape: img's width and height, 1 channel, depth 16),
 * ready for gpu_download; s gets the statistics (exact method: the same bits as the CPU; the
 * float methods within gpu_variance's tolerance). t gets kernel and reference times. */
enum gpu_status gpu_variance_resident(struct gpu_ctx *ctx, const struct cpu_var *v,
                                      const struct cpu_var_out *o, const struct cpu_image *img,
                                      struct cpu_var_stats *s, struct gpu_times *t);

/* ---- HEVC pictures on the video decoders: NVDEC, loaded at run time (gpu/nvdec.cu) ----
 * A HEIC image's pictures go to a session of its device's pool (a parser and a decoder, kept
 * while the pictures keep their shape); each decoded picture is converted from YCbCr into its
 * place in the context's input image by a kernel, with the format decoder's arithmetic, so the
 * pixels equal the CPU path's. What the decoders' caps refuse is the caller's to decode. */

/* Loads the driver's libnvcuvid.so.1 (and libcuda.so.1). Returns 0, or -1 with a sentence in err
 * (a build without Debian's ffnvcodec headers says so). Loads once. */
int gpu_nvdec_load(char *err, size_t errlen);

struct gpu_nvdec; /* one device's decoder sessions */

/* sessions parsers for device dev, the caps read. NULL with a sentence in err when the device
 * has no HEVC decoder or the library is not loaded. */
struct gpu_nvdec *gpu_nvdec_new(int dev, int sessions, char *err, size_t errlen);
void gpu_nvdec_free(struct gpu_nvdec *v); /* after the contexts that use it; v may be NULL */
/* The decode engines the caps report, and the sessions. */
int gpu_nvdec_engines(const struct gpu_nvdec *v);
int gpu_nvdec_sessions(const struct gpu_nvdec *v);

struct gpu_yuv { /* codec_yuv: R = Y + r_cr Cr; G = Y + g_cb Cb + g_cr Cr; B = Y + b_cb Cb */
  float r_cr, g_cb, g_cr, b_cb;
  int full, identity;
};

struct gpu_picture { /* codec_picture: data[off, off + len) of its image */
  size_t off, len;
  int x, y; /* its top-left pixel */
};

struct gpu_hevc_src {        /* an image of HEVC pictures (codec_pictures) */
  const unsigned char *data; /* the pictures' Annex B bytes */
  const struct gpu_picture *pic;
  int n;
  int width, height, tile_w, tile_h, bits, orientation;
  int has_k;        /* k is the image's; else each picture's own matrix, through coeffs */
  struct gpu_yuv k; /* with has_k */
  int (*coeffs)(void *arg, int matrix, int full, struct gpu_yuv *k);
  void *arg;
};

/* Decodes src's pictures into ctx's input image, upright: RGB, 8-bit or (over 8 bits) 16-bit
 * scaled to 65535; img gets its shape. Returns GPU_OK; GPU_ERROR with a static phrase in *why
 * when the decoders do not take it or fail on it (the device is fine: the caller decodes on the
 * CPU); GPU_NO_MEMORY; GPU_FATAL. */
enum gpu_status gpu_hevc_decode(struct gpu_ctx *ctx, struct gpu_nvdec *v,
                                const struct gpu_hevc_src *src, struct cpu_image *img,
                                const char **why);

/* ---- JPEG on the GPU: nvJPEG, loaded at run time (gpu/jpeg.cu) ----
 * Decoding is batched across requests: each device has one decoder thread that takes the JPEGs
 * its contexts submit, waits at most batch_wait_us for more (less when every context that could
 * join has), and decodes them in one call, on the hardware JPEG decoder where the GPU has one.
 * Encoding runs on each context's own stream. */

/* Loads nvJPEG: libnvjpeg.so.13, then libnvjpeg.so.12. Returns 0 with the file's name in *lib,
 * or -1 with a sentence in err. Loads once; later calls give the first call's answer. */
int gpu_jpeg_load(const char **lib, char *err, size_t errlen);

#define GPU_JPEG_BATCH_BUCKETS 8 /* batch sizes up to 1, 2, 4, ... 64, then more */

struct gpu_jpeg_stats {
  unsigned long long batches;                      /* batched decode calls */
  unsigned long long images;                       /* images they decoded */
  unsigned long long hist[GPU_JPEG_BATCH_BUCKETS]; /* batches of size <= 2^i (last: more) */
  unsigned long long single; /* images decoded alone (progressive, what the batch refuses) */
};

struct gpu_jpeg; /* one device's decoder: nvJPEG handles, its batch threads */

/* The decoder of device dev. max_batch: images per batch at most (the contexts on the device);
 * threads: batch threads, each with its own batch (1 to 4). Returns NULL with a sentence in err
 * when nvJPEG is not loaded or does not start. */
struct gpu_jpeg *gpu_jpeg_new(int dev, int batch_wait_us, int max_batch, int threads, char *err,
                              size_t errlen);
/* Stops the threads and frees j (after the contexts that use it); j may be NULL. */
void gpu_jpeg_free(struct gpu_jpeg *j);
/* The batched decoder: "nvjpeg-hw" (the hardware decoder) or "nvjpeg-gpu" (CUDA kernels). */
const char *gpu_jpeg_decoder(const struct gpu_jpeg *j);
void gpu_jpeg_stats(struct gpu_jpeg *j, struct gpu_jpeg_stats *s);

/* Gives ctx (on j's device) its nvJPEG states, a decoder for single images and an encoder, and
 * warms them and j's batch decoder up with a 1920x1080 image (nvJPEG sizes its buffers on first
 * use). A failure means nvJPEG does not work on this device. */
enum gpu_status gpu_ctx_jpeg(struct gpu_ctx *ctx, struct gpu_jpeg *j);
/* Tells ctx's decoder whether ctx may still submit a decode for its current job (1 when a job
 * starts, 0 once it will not): a batch leaves as soon as no context that could join is left. */
void gpu_jpeg_expect(struct gpu_ctx *ctx, int may_decode);

struct gpu_jpeg_src { /* a JPEG file, as codec_jpeg_probe read its headers */
  const unsigned char *data;
  size_t len;
  int width, height; /* as stored */
  int channels;      /* 1 or 3 */
  int orientation;   /* EXIF 1..8, applied on the device */
  int progressive;   /* decoded alone: the hardware decoder takes single-scan files only */
};

/* Decodes src into ctx's input image, upright; img gets its shape (8-bit, src->channels), *codec
 * the decoder that ran. Returns GPU_OK; GPU_ERROR when nvJPEG refused or failed on the file (the
 * device is fine: the caller decodes it on the CPU); GPU_NO_MEMORY; GPU_FATAL. */
enum gpu_status gpu_jpeg_decode(struct gpu_ctx *ctx, const struct gpu_jpeg_src *src,
                                struct cpu_image *img, const char **codec);
/* Encodes ctx's image which (shape img: 8-bit, 1 or 3 channels) as a JPEG of this quality, chroma
 * 4:4:4 when full_chroma is set and 4:2:0 otherwise (the caller applies codecs' rule, from
 * CODEC_JPEG_FULL_CHROMA up); only the compressed bytes
 * come to the host, into *out (malloc'd, the caller frees) of *len bytes. Errors as for
 * gpu_jpeg_decode (GPU_ERROR: the caller encodes on the CPU). */
enum gpu_status gpu_jpeg_encode(struct gpu_ctx *ctx, enum gpu_image which,
                                const struct cpu_image *img, int quality, int full_chroma,
                                unsigned char **out, size_t *len);

/* Tests only: launches a kernel that writes through an invalid address, which leaves ctx's
 * device with a sticky error (cudaErrorIllegalAddress) for the rest of the process. */
enum gpu_status gpu_inject_fault(struct gpu_ctx *ctx);

/* A sentence for the last error of ctx. */
const char *gpu_ctx_error(const struct gpu_ctx *ctx);

/* ---- lossy WebP of smooth images (vp8.cu) ----
 * The first pass of codecs/vp8_enc.c's encoder on the device, from the 8-bit RGB image `which`
 * (shape img): its YUV 4:2:0 planes as codecs/webp_yuv.c makes them, the count of luma steps over
 * smooth_step levels, and unless that count passes width * height / smooth_per (the image is not
 * smooth: smooth stays 0), every macroblock's modes and levels with the quantisers q (struct
 * codec_vp8_pass's [Y, Y2, UV][step, bias, iq][DC, AC]), and the tokens' counts: the CPU's, bit
 * for bit. The arrays are in ctx's pinned memory, laid out as struct codec_vp8_mbs's, valid until
 * the next call on ctx. GPU_ERROR for an image that is not 8-bit RGB. */
struct gpu_vp8 {
  int smooth;
  const uint8_t *modes;
  const int16_t *levels;
  const int8_t *last;
  const uint32_t *stats; /* the tokens' counts, as struct codec_vp8_mbs's */
};
enum gpu_status gpu_vp8_analyse(struct gpu_ctx *ctx, enum gpu_image which,
                                const struct cpu_image *img, const int q[3][3][2], int smooth_step,
                                int smooth_per, struct gpu_vp8 *out);

#ifdef __cplusplus
}
#endif

#endif

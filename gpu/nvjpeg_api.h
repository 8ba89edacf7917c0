/* The part of nvJPEG's C API that blurd calls, declared here so that blurd builds without the
 * CUDA toolkit's nvjpeg.h (CI has none) and loads libnvjpeg at run time (gpu/jpeg.cu): one binary
 * runs with or without nvJPEG. The names are nvJPEG's own with NVJ_ for NVJPEG_ and nvj_ for the
 * types; the opaque handles are the same struct tags as nvjpeg.h's, so they are the very same
 * types. gpu/nvjpeg_check.cu proves at compile time that the declarations agree with the real
 * nvjpeg.h wherever it exists. Written from NVIDIA's nvJPEG documentation; no code is taken from
 * it. */
#ifndef BLURD_NVJPEG_API_H
#define BLURD_NVJPEG_API_H

#include <cuda_runtime_api.h>
#include <library_types.h>
#include <stddef.h>

/* clang-format off */
#define NVJ_STATUSES(X)                                                                            \
  X(SUCCESS, 0) X(NOT_INITIALIZED, 1) X(INVALID_PARAMETER, 2) X(BAD_JPEG, 3)                       \
  X(JPEG_NOT_SUPPORTED, 4) X(ALLOCATOR_FAILURE, 5) X(EXECUTION_FAILED, 6) X(ARCH_MISMATCH, 7)      \
  X(INTERNAL_ERROR, 8) X(IMPLEMENTATION_NOT_SUPPORTED, 9) X(INCOMPLETE_BITSTREAM, 10)
#define NVJ_BACKENDS(X)     X(DEFAULT, 0) X(HYBRID, 1) X(GPU_HYBRID, 2) X(HARDWARE, 3)
#define NVJ_SUBSAMPLINGS(X) X(444, 0) X(422, 1) X(420, 2) X(440, 3) X(GRAY, 6)
#define NVJ_OUTPUTS(X)      X(Y, 2) X(RGBI, 5)
#define NVJ_INPUTS(X)       X(RGBI, 5)
#define NVJ_FLAGS(X)        X(BITSTREAM_STRICT, 1 << 2) X(UPSAMPLING_WITH_INTERPOLATION, 1 << 5)
/* clang-format on */

#define NVJ_ENUM_STATUS(n, v)  NVJ_STATUS_##n = v,
#define NVJ_ENUM_BACKEND(n, v) NVJ_BACKEND_##n = v,
#define NVJ_ENUM_CSS(n, v)     NVJ_CSS_##n = v,
#define NVJ_ENUM_OUTPUT(n, v)  NVJ_OUTPUT_##n = v,
#define NVJ_ENUM_INPUT(n, v)   NVJ_INPUT_##n = v,
#define NVJ_ENUM_FLAG(n, v)    NVJ_FLAGS_##n = v,
typedef enum nvj_status { NVJ_STATUSES(NVJ_ENUM_STATUS) } nvj_status;
typedef enum nvj_backend { NVJ_BACKENDS(NVJ_ENUM_BACKEND) } nvj_backend;
typedef enum nvj_subsampling {
  NVJ_SUBSAMPLINGS(NVJ_ENUM_CSS) NVJ_CSS_UNKNOWN = -1
} nvj_subsampling;
typedef enum nvj_output { NVJ_OUTPUTS(NVJ_ENUM_OUTPUT) } nvj_output;
typedef enum nvj_input { NVJ_INPUTS(NVJ_ENUM_INPUT) } nvj_input;
enum nvj_flags { NVJ_FLAGS(NVJ_ENUM_FLAG) };

typedef struct nvjpegHandle *nvj_handle;                /* the library */
typedef struct nvjpegJpegState *nvj_state;              /* one decoder's state */
typedef struct nvjpegJpegStream *nvj_stream;            /* a parsed header */
typedef struct nvjpegEncoderState *nvj_encoder;         /* one encoder's state */
typedef struct nvjpegEncoderParams *nvj_encoder_params; /* quality, subsampling */
struct nvj_dev_allocator;    /* nvjpegDevAllocator_t: blurd passes NULL (cudaMalloc) */
struct nvj_pinned_allocator; /* nvjpegPinnedAllocator_t: NULL (cudaHostAlloc) */

typedef struct nvj_image { /* nvjpegImage_t: planes; interleaved output uses channel[0] */
  unsigned char *channel[4];
  size_t pitch[4];
} nvj_image;

/* Every function blurd calls: X(name, return type, parameter list). */
#define NVJ_FUNCTIONS(X)                                                                           \
  X(nvjpegGetProperty, nvj_status, (libraryPropertyType, int *))                                   \
  X(nvjpegCreateEx, nvj_status,                                                                    \
    (nvj_backend, struct nvj_dev_allocator *, struct nvj_pinned_allocator *, unsigned int,         \
     nvj_handle *))                                                                                \
  X(nvjpegDestroy, nvj_status, (nvj_handle))                                                       \
  X(nvjpegJpegStateCreate, nvj_status, (nvj_handle, nvj_state *))                                  \
  X(nvjpegJpegStateDestroy, nvj_status, (nvj_state))                                               \
  X(nvjpegDecode, nvj_status,                                                                      \
    (nvj_handle, nvj_state, const unsigned char *, size_t, nvj_output, nvj_image *, cudaStream_t)) \
  X(nvjpegDecodeBatchedInitialize, nvj_status, (nvj_handle, nvj_state, int, int, nvj_output))      \
  X(nvjpegDecodeBatched, nvj_status,                                                               \
    (nvj_handle, nvj_state, const unsigned char *const *, const size_t *, nvj_image *,             \
     cudaStream_t))                                                                                \
  X(nvjpegJpegStreamCreate, nvj_status, (nvj_handle, nvj_stream *))                                \
  X(nvjpegJpegStreamDestroy, nvj_status, (nvj_stream))                                             \
  X(nvjpegJpegStreamParseHeader, nvj_status,                                                       \
    (nvj_handle, const unsigned char *, size_t, nvj_stream))                                       \
  X(nvjpegDecodeBatchedSupported, nvj_status, (nvj_handle, nvj_stream, int *))                     \
  X(nvjpegEncoderStateCreate, nvj_status, (nvj_handle, nvj_encoder *, cudaStream_t))               \
  X(nvjpegEncoderStateDestroy, nvj_status, (nvj_encoder))                                          \
  X(nvjpegEncoderParamsCreate, nvj_status, (nvj_handle, nvj_encoder_params *, cudaStream_t))       \
  X(nvjpegEncoderParamsDestroy, nvj_status, (nvj_encoder_params))                                  \
  X(nvjpegEncoderParamsSetQuality, nvj_status, (nvj_encoder_params, int, cudaStream_t))            \
  X(nvjpegEncoderParamsSetSamplingFactors, nvj_status,                                             \
    (nvj_encoder_params, nvj_subsampling, cudaStream_t))                                           \
  X(nvjpegEncodeImage, nvj_status,                                                                 \
    (nvj_handle, nvj_encoder, nvj_encoder_params, const nvj_image *, nvj_input, int, int,          \
     cudaStream_t))                                                                                \
  X(nvjpegEncodeYUV, nvj_status,                                                                   \
    (nvj_handle, nvj_encoder, nvj_encoder_params, const nvj_image *, nvj_subsampling, int, int,    \
     cudaStream_t))                                                                                \
  X(nvjpegEncodeRetrieveBitstream, nvj_status,                                                     \
    (nvj_handle, nvj_encoder, unsigned char *, size_t *, cudaStream_t))

/* The functions, looked up with dlsym. */
struct nvj_api {
#define NVJ_POINTER(name, ret, args) ret(*name) args;
  NVJ_FUNCTIONS(NVJ_POINTER)
#undef NVJ_POINTER
};

#endif

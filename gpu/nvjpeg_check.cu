/* A compile-time proof that gpu/nvjpeg_api.h agrees with the CUDA toolkit's nvjpeg.h: every
 * constant has nvJPEG's value, nvj_image has nvjpegImage_t's layout, and every function pointer
 * of struct nvj_api, with blurd's types mapped to nvJPEG's, has the type of nvJPEG's function.
 * Nothing here runs: the Makefile compiles it wherever $(CUDA_HOME)/include/nvjpeg.h exists (the
 * Dockerfile's CUDA devel image); by hand, `nvcc -std=c++17 -c gpu/nvjpeg_check.cu`. */
#include <nvjpeg.h>

#include "nvjpeg_api.h"

#include <cstddef>
#include <type_traits>

#define SAME_VALUE(prefix, real_prefix)                                                            \
  static_assert((int)prefix == (int)real_prefix, #prefix " differs from nvjpeg.h");
#define CHECK_STATUS(n, v)  SAME_VALUE(NVJ_STATUS_##n, NVJPEG_STATUS_##n)
#define CHECK_BACKEND(n, v) SAME_VALUE(NVJ_BACKEND_##n, NVJPEG_BACKEND_##n)
#define CHECK_CSS(n, v)     SAME_VALUE(NVJ_CSS_##n, NVJPEG_CSS_##n)
#define CHECK_OUTPUT(n, v)  SAME_VALUE(NVJ_OUTPUT_##n, NVJPEG_OUTPUT_##n)
#define CHECK_INPUT(n, v)   SAME_VALUE(NVJ_INPUT_##n, NVJPEG_INPUT_##n)
#define CHECK_FLAG(n, v)    SAME_VALUE(NVJ_FLAGS_##n, (NVJPEG_FLAGS_##n))
NVJ_STATUSES(CHECK_STATUS)
NVJ_BACKENDS(CHECK_BACKEND)
NVJ_SUBSAMPLINGS(CHECK_CSS)
NVJ_OUTPUTS(CHECK_OUTPUT)
NVJ_INPUTS(CHECK_INPUT)
NVJ_FLAGS(CHECK_FLAG)
SAME_VALUE(NVJ_CSS_UNKNOWN, NVJPEG_CSS_UNKNOWN)

/* Enums are passed by value: each must have the size of nvJPEG's. */
static_assert(sizeof(nvj_status) == sizeof(nvjpegStatus_t), "nvj_status size");
static_assert(sizeof(nvj_backend) == sizeof(nvjpegBackend_t), "nvj_backend size");
static_assert(sizeof(nvj_subsampling) == sizeof(nvjpegChromaSubsampling_t), "nvj_subsampling");
static_assert(sizeof(nvj_output) == sizeof(nvjpegOutputFormat_t), "nvj_output size");
static_assert(sizeof(nvj_input) == sizeof(nvjpegInputFormat_t), "nvj_input size");

static_assert(sizeof(nvj_image) == sizeof(nvjpegImage_t), "nvj_image size");
static_assert(offsetof(nvj_image, channel) == offsetof(nvjpegImage_t, channel), "channel");
static_assert(offsetof(nvj_image, pitch) == offsetof(nvjpegImage_t, pitch), "pitch");
static_assert(sizeof(((nvj_image *)0)->channel) == sizeof(((nvjpegImage_t *)0)->channel), "ch");
static_assert(sizeof(((nvj_image *)0)->pitch) == sizeof(((nvjpegImage_t *)0)->pitch), "pitch");

/* real<T>::type: T with blurd's types replaced by nvJPEG's, through pointers, const and function
 * types. The handles need no entry: they are nvJPEG's own struct types. */
template <class T> struct real { using type = T; };
template <class T> struct real<T *> { using type = typename real<T>::type *; };
template <class T> struct real<const T> { using type = const typename real<T>::type; };
template <class R, class... A> struct real<R (*)(A...)> {
  using type = typename real<R>::type (*)(typename real<A>::type...);
};
template <> struct real<nvj_status> { using type = nvjpegStatus_t; };
template <> struct real<nvj_backend> { using type = nvjpegBackend_t; };
template <> struct real<nvj_subsampling> { using type = nvjpegChromaSubsampling_t; };
template <> struct real<nvj_output> { using type = nvjpegOutputFormat_t; };
template <> struct real<nvj_input> { using type = nvjpegInputFormat_t; };
template <> struct real<nvj_image> { using type = nvjpegImage_t; };
template <> struct real<struct nvj_dev_allocator> { using type = nvjpegDevAllocator_t; };
template <> struct real<struct nvj_pinned_allocator> { using type = nvjpegPinnedAllocator_t; };

#define CHECK_FUNCTION(name, ret, args)                                                            \
  static_assert(std::is_same<real<decltype(nvj_api::name)>::type, decltype(&::name)>::value,       \
                "nvjpeg_api.h: " #name " has another type in nvjpeg.h");
NVJ_FUNCTIONS(CHECK_FUNCTION)

/* The one error convention of gpu/: the names and meanings of enum gpu_status (GPU_STATUSES in
 * gpu.h) and the classification of a CUDA error into a status, logged with the file and line of
 * the call that returned it (CUDA_TRY, status_of). A sticky error (illegal address, launch
 * failure) is GPU_FATAL: the device is lost for the rest of the process, which the caller makes
 * unready so that a supervisor restarts it; the others are cleared and fail only their job. */
#include "gpu_int.cuh"

#include <stdio.h>

static const char *const status_names[] = {
#define X(e, meaning) #e,
    GPU_STATUSES(X)
#undef X
};

static const char *const status_meanings[] = {
#define X(e, meaning) meaning,
    GPU_STATUSES(X)
#undef X
};

#define NSTATUS ((int)(sizeof(status_names) / sizeof(status_names[0])))

const char *gpu_status_name(enum gpu_status s) {
  return (int)s >= 0 && (int)s < NSTATUS ? status_names[s] : NULL;
}

const char *gpu_status_meaning(enum gpu_status s) {
  return (int)s >= 0 && (int)s < NSTATUS ? status_meanings[s] : NULL;
}

/* Whether e leaves the device unusable for the rest of the process. */
static int sticky(cudaError_t e) {
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchTimeout:
  case cudaErrorECCUncorrectable:
  case cudaErrorUnknown:
    return 1;
  default:
    return 0;
  }
}

enum gpu_status status_at(struct gpu_ctx *ctx, cudaError_t e, const char *what, const char *file,
                          int line) {
  if (e == cudaSuccess) return GPU_OK;
  snprintf(ctx->err, sizeof(ctx->err), "%s: %s (%s)", what, cudaGetErrorString(e),
           cudaGetErrorName(e));
  fprintf(stderr, "blurd: %s: %s:%d: %s\n", ctx->name, file, line, ctx->err);
  if (sticky(e)) return GPU_FATAL;
  cudaGetLastError(); /* clear a non-sticky error */
  return e == cudaErrorMemoryAllocation ? GPU_NO_MEMORY : GPU_ERROR;
}

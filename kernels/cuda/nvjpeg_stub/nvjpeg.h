// nvjpeg_stub/nvjpeg.h - the part of nvJPEG's API that kernels/cuda/nvjpeg_decode.cu uses, declared after nvJPEG's
// documentation, for one purpose: where the CUDA toolkit has no nvJPEG (Debian's, so this project's CI),
// CMake still compiles nvjpeg_decode.cu against this header, so a mistake in the decoder shows in CI instead
// of on the GPU machine. Nothing links against it or runs it. CMakeLists.txt's nvJPEG probe makes the same
// calls against the real header; a call the decoder starts to make goes into both.
#ifndef AMPTRAIN_NVJPEG_STUB_H
#define AMPTRAIN_NVJPEG_STUB_H

#include <cuda_runtime_api.h>
#include <stddef.h>

typedef enum {
    NVJPEG_STATUS_SUCCESS = 0,
    NVJPEG_STATUS_NOT_INITIALIZED = 1,
    NVJPEG_STATUS_INVALID_PARAMETER = 2,
    NVJPEG_STATUS_BAD_JPEG = 3,
    NVJPEG_STATUS_JPEG_NOT_SUPPORTED = 4,
    NVJPEG_STATUS_ALLOCATOR_FAILURE = 5,
    NVJPEG_STATUS_EXECUTION_FAILED = 6,
    NVJPEG_STATUS_ARCH_MISMATCH = 7,
    NVJPEG_STATUS_INTERNAL_ERROR = 8,
    NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED = 9,
} nvjpegStatus_t;

typedef enum {
    NVJPEG_BACKEND_DEFAULT = 0,
    NVJPEG_BACKEND_HYBRID = 1,
    NVJPEG_BACKEND_GPU_HYBRID = 2,
    NVJPEG_BACKEND_HARDWARE = 3,
} nvjpegBackend_t;

typedef enum {
    NVJPEG_OUTPUT_UNCHANGED = 0,
    NVJPEG_OUTPUT_YUV = 1,
    NVJPEG_OUTPUT_Y = 2,
    NVJPEG_OUTPUT_RGB = 3,
    NVJPEG_OUTPUT_BGR = 4,
    NVJPEG_OUTPUT_RGBI = 5,
    NVJPEG_OUTPUT_BGRI = 6,
} nvjpegOutputFormat_t;

#define NVJPEG_MAX_COMPONENT 4
#define NVJPEG_FLAGS_DEFAULT 0
#define NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION (1 << 5)

typedef struct {
    unsigned char *channel[NVJPEG_MAX_COMPONENT];
    size_t pitch[NVJPEG_MAX_COMPONENT];
} nvjpegImage_t;

typedef int (*tDevMalloc)(void **, size_t);
typedef int (*tDevFree)(void *);
typedef int (*tPinnedMalloc)(void **, size_t, unsigned int);
typedef int (*tPinnedFree)(void *);
typedef struct {
    tDevMalloc dev_malloc;
    tDevFree dev_free;
} nvjpegDevAllocator_t;
typedef struct {
    tPinnedMalloc pinned_malloc;
    tPinnedFree pinned_free;
} nvjpegPinnedAllocator_t;

struct nvjpegHandle;
typedef struct nvjpegHandle *nvjpegHandle_t;
struct nvjpegJpegState;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
struct nvjpegJpegStream;
typedef struct nvjpegJpegStream *nvjpegJpegStream_t;

#if defined(__cplusplus)
extern "C" {
#endif

nvjpegStatus_t nvjpegCreateEx(nvjpegBackend_t backend, nvjpegDevAllocator_t *dev_allocator,
                              nvjpegPinnedAllocator_t *pinned_allocator, unsigned int flags,
                              nvjpegHandle_t *handle);
nvjpegStatus_t nvjpegDestroy(nvjpegHandle_t handle);
nvjpegStatus_t nvjpegJpegStateCreate(nvjpegHandle_t handle, nvjpegJpegState_t *jpeg_handle);
nvjpegStatus_t nvjpegJpegStateDestroy(nvjpegJpegState_t jpeg_handle);
nvjpegStatus_t nvjpegJpegStreamCreate(nvjpegHandle_t handle, nvjpegJpegStream_t *jpeg_stream);
nvjpegStatus_t nvjpegJpegStreamDestroy(nvjpegJpegStream_t jpeg_stream);
nvjpegStatus_t nvjpegJpegStreamParseHeader(nvjpegHandle_t handle, const unsigned char *data, size_t length,
                                           nvjpegJpegStream_t jpeg_stream);
nvjpegStatus_t nvjpegDecodeBatchedSupported(nvjpegHandle_t handle, nvjpegJpegStream_t jpeg_stream,
                                            int *is_supported);
nvjpegStatus_t nvjpegDecodeBatchedInitialize(nvjpegHandle_t handle, nvjpegJpegState_t jpeg_handle,
                                             int batch_size, int max_cpu_threads,
                                             nvjpegOutputFormat_t output_format);
nvjpegStatus_t nvjpegDecodeBatched(nvjpegHandle_t handle, nvjpegJpegState_t jpeg_handle,
                                   const unsigned char *const *data, const size_t *lengths,
                                   nvjpegImage_t *destinations, cudaStream_t stream);

#if defined(__cplusplus)
}
#endif

#endif

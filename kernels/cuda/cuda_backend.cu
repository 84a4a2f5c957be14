// cuda_backend.cu - the CUDA Backend: device binding, the compute stream, the cuDNN and cuBLAS handles,
// memory (the caching allocator of cuda_alloc.cu), copies and read-backs, and the table of op pointers
// that the other kernels/*.cu files implement.
//
// Ops are enqueued in order on the compute stream; input batches come up on the copy stream
// (cuda_input.cu); only to_device, to_host, sync, readback_wait and input_upload_wait make the host wait.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "kernels/cuda/cuda_alloc.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_diag.h"
#include "kernels/cuda/cuda_internal.h"

// cuBLAS keeps its own fixed workspace: the shared one can move when cuDNN grows it, and cuBLAS
// remembers the pointer it was given. 32 MiB is what NVIDIA recommends for Hopper.
#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)

// The backend's whole state. `cb` comes first so the CudaBackend* in Backend.impl (which the other files
// reach through cuda_state) is also a pointer to this struct.
typedef struct CudaBackendState {
    CudaBackend cb;
    Backend be;
    CudaAllocator *alloc;
} CudaBackendState;

static CudaBackendState *cuda_backend_state(CudaBackend *cb) { return (CudaBackendState *)cb; }
static CudaAllocator *cuda_allocator(Backend *be) { return cuda_backend_state(cuda_state(be))->alloc; }

// ---- memory ----------------------------------------------------------------------------------------

static void *cuda_be_alloc(Backend *be, size_t bytes) { return cuda_alloc_get(cuda_allocator(be), bytes); }
static void cuda_be_free(Backend *be, void *ptr) { cuda_alloc_put(cuda_allocator(be), ptr); }
static size_t cuda_be_peak_bytes(Backend *be) { return cuda_alloc_peak_bytes(cuda_allocator(be)); }
static size_t cuda_be_current_bytes(Backend *be) { return cuda_alloc_current_bytes(cuda_allocator(be)); }

static void cuda_be_profiler_window(Backend *be, int open) {
    (void)be;
    CUDA_CHECK(open ? cudaProfilerStart() : cudaProfilerStop());
}

static void cuda_be_zero(Backend *be, void *ptr, size_t bytes) {
    CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, cuda_state(be)->stream));
}

static void cuda_be_to_device(Backend *be, void *dst, const void *host_src, size_t bytes) {
    CudaBackend *cb = cuda_state(be);
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
}

static void cuda_be_upload_async(Backend *be, void *dst, const void *host_src, size_t bytes) {
    CudaBackend *cb = cuda_state(be);
    int slot = cb->upload_next;
    cb->upload_next = (slot + 1) % BACKEND_UPLOAD_SLOTS;
    CUDA_CHECK(cudaEventSynchronize(cb->upload_done[slot]));  // its previous copy has left the buffer
    if (cb->upload_bytes[slot] < bytes) {                     // grows once, on the first batches
        if (cb->upload_stage[slot]) CUDA_CHECK(cudaFreeHost(cb->upload_stage[slot]));
        CUDA_CHECK(cudaMallocHost(&cb->upload_stage[slot], bytes));
        cb->upload_bytes[slot] = bytes;
    }
    memcpy(cb->upload_stage[slot], host_src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, cb->upload_stage[slot], bytes, cudaMemcpyHostToDevice, cb->stream));
    CUDA_CHECK(cudaEventRecord(cb->upload_done[slot], cb->stream));
}

static void cuda_be_to_host(Backend *be, void *host_dst, const void *src, size_t bytes) {
    CudaBackend *cb = cuda_state(be);
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
}

static void cuda_be_copy(Backend *be, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_state(be)->stream));
}

static void cuda_be_sync(Backend *be) { CUDA_CHECK(cudaStreamSynchronize(cuda_state(be)->stream)); }

static void *cuda_be_host_alloc(Backend *be, size_t bytes) {
    (void)be;
    void *ptr = NULL;
    CUDA_CHECK(cudaMallocHost(&ptr, bytes == 0 ? 1 : bytes));
    return ptr;
}

static void cuda_be_host_free(Backend *be, void *ptr) {
    (void)be;
    if (ptr) CUDA_CHECK(cudaFreeHost(ptr));
}

// The event is recorded after each copy; waiting on it waits for every copy begun so far.
static void cuda_be_readback_begin(Backend *be, void *host_dst, const void *src, size_t bytes) {
    CudaBackend *cb = cuda_state(be);
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(cudaEventRecord(cb->readback_done, cb->stream));
}

static void cuda_be_readback_wait(Backend *be) {
    CUDA_CHECK(cudaEventSynchronize(cuda_state(be)->readback_done));
}

extern "C" void cuda_backend_set_batch_norm(Backend *be, CudaBnMode mode) { cuda_state(be)->bn_mode = mode; }

static void cuda_be_mark_record(Backend *be, int slot) {
    CudaBackend *cb = cuda_state(be);
    CUDA_CHECK(cudaEventRecord(cb->marks[slot], cb->stream));
}

static float cuda_be_mark_elapsed_ms(Backend *be, int from, int to) {
    CudaBackend *cb = cuda_state(be);
    float ms;
    CUDA_CHECK(cudaEventSynchronize(cb->marks[to]));
    CUDA_CHECK(cudaEventElapsedTime(&ms, cb->marks[from], cb->marks[to]));
    return ms;
}

// Grows by replacing the block: the old one goes back to the allocator, and since all work is on the
// one stream, kernels still queued on it finish before anything reuses it.
void *cuda_workspace(CudaBackend *cb, size_t bytes) {
    if (bytes <= cb->workspace_bytes) return cb->workspace;
    CudaAllocator *a = cuda_backend_state(cb)->alloc;
    cuda_alloc_put(a, cb->workspace);
    cb->workspace = cuda_alloc_get(a, bytes);
    cb->workspace_bytes = bytes;
    return cb->workspace;
}

// A timing runs routes its choice may not take: a workspace it grew is given back, to regrow to what the
// chosen routes ask (else a start that searched would keep the largest timed route's workspace all run).
float cuda_time_ms(CudaBackend *cb, int runs, void (*run)(void *ctx), void *ctx) {
    const size_t held = cb->workspace_bytes;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    run(ctx);
    CUDA_CHECK(cudaEventRecord(start, cb->stream));
    for (int r = 0; r < runs; r++) run(ctx);
    CUDA_CHECK(cudaEventRecord(stop, cb->stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    cuda_workspace_give_back(cb, held);
    return ms / (float)runs;
}

void cuda_workspace_give_back(CudaBackend *cb, size_t held) {
    if (cb->workspace_bytes <= held) return;
    cuda_alloc_put(cuda_backend_state(cb)->alloc, cb->workspace);
    cb->workspace = NULL;
    cb->workspace_bytes = 0;
}

int cuda_pick_log_enabled(void) { return log_env_flag("AMPTRAIN_CONV_LOG"); }

// What a timed choice depends on beyond its op and settings: the GPU (name, compute capability,
// multiprocessor count), the driver, runtime, cuDNN and cuBLAS versions, and amptrain's own (its kernels
// are among those timed: the batch-norm pairs, the GEMM route) with the revision of what it times. A
// record's text is printable ASCII.
// CUDA_CHOICES_REVISION: raised whenever the candidates a choice is made from, or amptrain's own timed
// kernels, change, so that records timed before are not taken for the new set (2: bf16 batch norm offered
// to cuDNN, whose records held only amptrain's own pair; 3: convolutions with few input channels may run
// padded; 4: amptrain's own batch-norm passes stage their coefficients in shared memory, faster).
#define CUDA_CHOICES_REVISION 4
static void cuda_choice_env(CudaBackend *cb) {
    cudaDeviceProp prop;
    int driver = 0, runtime = 0, cublas = 0;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, cb->device));
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    CUBLAS_CHECK(cublasGetVersion(cb->cublas, &cublas));
    snprintf(cb->choice_env, sizeof cb->choice_env,
             "%s sm_%d%d %d SMs driver %d runtime %d cudnn %zu cublas %d amptrain %s choices r%d", prop.name,
             prop.major, prop.minor, prop.multiProcessorCount, driver, runtime, cudnnGetVersion(), cublas,
             AMPTRAIN_VERSION, CUDA_CHOICES_REVISION);
    for (char *c = cb->choice_env; *c; c++)
        if (*c < 0x20 || *c > 0x7e) *c = '?';
}

void cuda_choice_key(const CudaBackend *cb, char *key, size_t cap, const char *fmt, ...) {
    int n = snprintf(key, cap, "%s | ", cb->choice_env);
    va_list args;
    va_start(args, fmt);
    if (n > 0 && (size_t)n < cap) n += vsnprintf(key + n, cap - (size_t)n, fmt, args);
    va_end(args);
    AMP_ASSERT(n > 0 && (size_t)n < cap, "kernel choice key longer than %zu bytes: %s", cap, key);
}

static KernelCache *cuda_be_kernel_choices(Backend *be) { return cuda_state(be)->choices; }

void *cuda_scratch_get(CudaBackend *cb, size_t bytes) {
    return cuda_alloc_get(cuda_backend_state(cb)->alloc, bytes);
}

void cuda_scratch_put(CudaBackend *cb, void *ptr) { cuda_alloc_put(cuda_backend_state(cb)->alloc, ptr); }

// ---- graphs ------------------------------------------------------------------------------------------

// Relaxed capture: cuDNN and cuBLAS may query the device while the step is recorded. Everything the
// step needs was created by the eager step before (algorithm search, workspaces, batch-norm state).
static void cuda_be_graph_begin(Backend *be) {
    cuda_alloc_capture_begin(cuda_allocator(be));
    CUDA_CHECK(cudaStreamBeginCapture(cuda_state(be)->stream, cudaStreamCaptureModeRelaxed));
}

static void *cuda_be_graph_end(Backend *be) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamEndCapture(cuda_state(be)->stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    cuda_alloc_capture_end(cuda_allocator(be));
    return (void *)exec;
}

static void cuda_be_graph_launch(Backend *be, void *graph) {
    CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, cuda_state(be)->stream));
}

static void cuda_be_graph_destroy(Backend *be, void *graph) {
    CUDA_CHECK(cudaStreamSynchronize(cuda_state(be)->stream));
    CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
    cuda_alloc_graph_destroyed(cuda_allocator(be));
}

// ---- lifetime ----------------------------------------------------------------------------------------

static void cuda_be_destroy(Backend *be) {
    CudaBackendState *st = cuda_backend_state(cuda_state(be));
    CudaBackend *cb = &st->cb;
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    cuda_conv_cache_destroy(cb);
    cuda_bn_cache_destroy(cb);
    cuda_conv_bn_cache_destroy(cb);
    kernel_cache_save(cb->choices);  // the choices made lazily since start-up too
    kernel_cache_close(cb->choices);
#ifdef AMPTRAIN_HAVE_NVJPEG
    CUDA_CHECK(cudaStreamSynchronize(cb->copy_stream));
    cuda_jpeg_destroy(cb);
#endif
    CUBLAS_CHECK(cublasDestroy(cb->cublas));
    CUDNN_CHECK(cudnnDestroy(cb->cudnn));
    CUDA_CHECK(cudaEventDestroy(cb->readback_done));
    for (int i = 0; i < BACKEND_MARKS; i++) CUDA_CHECK(cudaEventDestroy(cb->marks[i]));
    CUDA_CHECK(cudaStreamSynchronize(cb->copy_stream));
    for (int i = 0; i < BACKEND_INPUT_SLOTS; i++) {
        CUDA_CHECK(cudaEventDestroy(cb->input_uploaded[i]));
        CUDA_CHECK(cudaEventDestroy(cb->input_consumed[i]));
    }
    CUDA_CHECK(cudaStreamDestroy(cb->copy_stream));
    for (int i = 0; i < BACKEND_UPLOAD_SLOTS; i++) {
        CUDA_CHECK(cudaEventSynchronize(cb->upload_done[i]));
        CUDA_CHECK(cudaEventDestroy(cb->upload_done[i]));
        if (cb->upload_stage[i]) CUDA_CHECK(cudaFreeHost(cb->upload_stage[i]));
    }
    cuda_alloc_destroy(st->alloc);  // also frees the workspaces
    CUDA_CHECK(cudaStreamDestroy(cb->stream));
    free(st);
}

static void cuda_backend_fill_ops(Backend *be) {
    be->name = "cuda";
    // The ops core/backend_ops.def marks LIST or NVJPEG for CUDA (cuda_internal.h).
#define CUDA_FILL_LIST(op) be->op = cuda_##op;
#ifdef AMPTRAIN_HAVE_NVJPEG
#define CUDA_FILL_NVJPEG CUDA_FILL_LIST
#else
#define CUDA_FILL_NVJPEG(op)
#endif
#define CUDA_FILL_OWN(op)
#define CUDA_FILL_NONE(op)
#define BACKEND_OP(ret, op, cpu, cuda, graph, params) CUDA_FILL_##cuda(op)
#include "core/backend_ops.def"
#undef BACKEND_OP

    // The ops core/backend_ops.def marks OWN for CUDA: this file's.
    be->alloc = cuda_be_alloc;
    be->free = cuda_be_free;
    be->zero = cuda_be_zero;
    be->to_device = cuda_be_to_device;
    be->to_host = cuda_be_to_host;
    be->copy = cuda_be_copy;
    be->upload_async = cuda_be_upload_async;
    be->sync = cuda_be_sync;
    be->peak_bytes = cuda_be_peak_bytes;
    be->current_bytes = cuda_be_current_bytes;
    be->host_alloc = cuda_be_host_alloc;
    be->host_free = cuda_be_host_free;
    be->readback_begin = cuda_be_readback_begin;
    be->readback_wait = cuda_be_readback_wait;
    be->mark_record = cuda_be_mark_record;
    be->mark_elapsed_ms = cuda_be_mark_elapsed_ms;
    be->profiler_window = cuda_be_profiler_window;
    be->graph_begin = cuda_be_graph_begin;
    be->graph_end = cuda_be_graph_end;
    be->graph_launch = cuda_be_graph_launch;
    be->graph_destroy = cuda_be_graph_destroy;
    be->kernel_choices = cuda_be_kernel_choices;
    be->destroy = cuda_be_destroy;
}

// CUDA_DEVICE_MAX_CONNECTIONS=connections unless the environment sets it, before this process makes its
// CUDA context (which reads it). Returns 1 when it set it.
static int cuda_widen_queues(int connections) {
    if (connections <= 0 || getenv("CUDA_DEVICE_MAX_CONNECTIONS")) return 0;
    char value[16];
    snprintf(value, sizeof value, "%d", connections);
    return setenv("CUDA_DEVICE_MAX_CONNECTIONS", value, 0) == 0;
}

// Launched never: whether the build holds machine code or PTX this device can run (every kernel is
// compiled for the same architectures as this one).
static __global__ void cuda_arch_probe(void) {}

// 0 when the device can run this build's kernels; otherwise why (a build for other architectures would
// fail at its first kernel launch, after the model and data are set up).
static int cuda_check_architecture(int device, char *why, size_t why_len) {
    cudaFuncAttributes attr;
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, cuda_arch_probe);
    if (err == cudaSuccess) return 0;
    (void)cudaGetLastError();
    int major = 0, minor = 0;
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    snprintf(why, why_len,
             "this amptrain has no kernels for GPU %d's architecture sm_%d%d (built for %s): rebuild with "
             "-DCMAKE_CUDA_ARCHITECTURES=%d%d (cudaFuncGetAttributes: %s)",
             device, major, minor, AMPTRAIN_CUDA_ARCHITECTURES, major, minor, cudaGetErrorString(err));
    return -1;
}

extern "C" Backend *cuda_backend_create(int device, const CudaOptions *opts, char *why, size_t why_len) {
    const CudaOptions o = opts ? *opts : cuda_options_default();
    const int widened = cuda_widen_queues(o.device_max_connections);
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        // No driver at all reads "CUDA driver version is insufficient": say what it means here first.
        int absent = err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver;
        snprintf(why, why_len, "%s (cudaGetDeviceCount: %s)",
                 absent ? "no GPU: no NVIDIA device, or no driver new enough for this CUDA runtime"
                        : "no usable GPU",
                 cudaGetErrorString(err));
        return NULL;
    }
    if (count == 0) {
        snprintf(why, why_len, "no GPU visible (check CUDA_VISIBLE_DEVICES)");
        return NULL;
    }
    if (device < 0 || device >= count) {
        snprintf(why, why_len, "CUDA device %d requested but only %d visible", device, count);
        return NULL;
    }
    if (cuda_check_architecture(device, why, why_len) != 0) return NULL;

    CudaBackendState *st = (CudaBackendState *)xcalloc(1, sizeof(CudaBackendState));
    CudaBackend *cb = &st->cb;
    cb->device = device;
    cb->cudnn_benchmark = o.cudnn_benchmark;
    cb->allow_tf32 = o.conv_tf32;
    cb->matmul_tf32 = o.matmul_tf32;
    cb->conv_workspace_cap = o.conv_workspace_cap;
    cb->bn_mode = o.batch_norm;
    cb->conv_bn = o.batch_norm_unfused ? -1 : 0;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaDeviceGetAttribute(&cb->sm_count, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&cb->cc_major, cudaDevAttrComputeCapabilityMajor, device));
    // Non-blocking: the legacy default stream must not serialise against our work (NCCL, copies).
    CUDA_CHECK(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&cb->readback_done, cudaEventDisableTiming));
    for (int i = 0; i < BACKEND_MARKS; i++) CUDA_CHECK(cudaEventCreate(&cb->marks[i]));
    for (int i = 0; i < BACKEND_UPLOAD_SLOTS; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&cb->upload_done[i], cudaEventDisableTiming));
    CUDA_CHECK(cudaStreamCreateWithFlags(&cb->copy_stream, cudaStreamNonBlocking));
    for (int i = 0; i < BACKEND_INPUT_SLOTS; i++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&cb->input_uploaded[i], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&cb->input_consumed[i], cudaEventDisableTiming));
    }
    st->alloc = cuda_alloc_create();

    CUDNN_CHECK(cudnnCreate(&cb->cudnn));
    CUDNN_CHECK(cudnnSetStream(cb->cudnn, cb->stream));

    CUBLAS_CHECK(cublasCreate(&cb->cublas));
    CUBLAS_CHECK(cublasSetStream(cb->cublas, cb->stream));
    // The allocator frees the block with everything else at destroy.
    CUBLAS_CHECK(cublasSetWorkspace(cb->cublas, cuda_alloc_get(st->alloc, CUBLAS_WORKSPACE_BYTES),
                                    CUBLAS_WORKSPACE_BYTES));
    // fp16 and bf16 GEMMs use tensor cores under either mode; this only decides whether fp32 GEMMs may drop
    // to TF32 (cuda_linear.cu also picks the compute type from matmul_tf32).
    CUBLAS_CHECK(
        cublasSetMathMode(cb->cublas, o.matmul_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    cuda_choice_env(cb);
    cb->choices = kernel_cache_open(o.kernel_cache);

    Backend *be = &st->be;
    cuda_backend_fill_ops(be);
    be->impl = cb;
    if (widened)
        log_info(
            "CUDA_DEVICE_MAX_CONNECTIONS=%d (CUDA's hardware work queues; nvJPEG's engines wait behind the "
            "training step with the default 8)",
            o.device_max_connections);
    return be;
}

extern "C" void *cuda_backend_stream(Backend *be) { return (void *)cuda_state(be)->stream; }

extern "C" int cuda_visible_device_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}

extern "C" int cuda_device_identity(int device, unsigned char uuid[16], char *pci, size_t pci_len) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    memcpy(uuid, prop.uuid.bytes, 16);
    snprintf(pci, pci_len, "%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    return 0;
}

// cuda_internal.h - what the CUDA backend's files share: the backend state, the check macros, the
// caching allocator and the per-op entry points each kernels/cuda/*.cu file exports to cuda_backend.cu.
// Included only by kernels/cuda (CUDA C, compiled by nvcc); the rest of amptrain sees src/core/backend.h
// and kernels/cuda/cuda_backend.h.
#ifndef AMPTRAIN_CUDA_INTERNAL_H
#define AMPTRAIN_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "core/backend.h"
#include "core/clock.h"
#include "core/log.h"
#ifdef __cplusplus
}
#endif
#include "core/kernel_cache.h"
#include "core/check.h"
#include "core/cuda_check.h"

// One check macro per library (CUDA_CHECK: core/cuda_check.h): name the failing expression, file and
// line, then end the job.
#define CUDNN_CHECK(expr)                                                                                    \
    do {                                                                                                     \
        cudnnStatus_t st_ = (expr);                                                                          \
        if (st_ != CUDNN_STATUS_SUCCESS)                                                                     \
            amp_fatal(__FILE__, __LINE__, "%s: %s", #expr, cudnnGetErrorString(st_));                        \
    } while (0)
#define CUBLAS_CHECK(expr)                                                                                   \
    do {                                                                                                     \
        cublasStatus_t st_ = (expr);                                                                         \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                    \
            amp_fatal(__FILE__, __LINE__, "%s: %s", #expr, cublasGetStatusString(st_));                      \
    } while (0)
// After every kernel launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

typedef struct CudaConvCache CudaConvCache;  // cudnn_conv.cu: descriptors + chosen algorithms per shape
typedef struct CudaBnCache CudaBnCache;      // cudnn_batchnorm.cu: per-layer reserve space, per-shape pairs
typedef struct CudaConvBnCache CudaConvBnCache;  // cudnn_conv_bn.cu: per-shape fused plans and choices
typedef struct CudaJpeg CudaJpeg;  // nvjpeg_decode.cu: nvJPEG's handles and the decoder's buffers

typedef struct CudaBackend {
    int device;
    cudaStream_t stream;       // the compute stream: every op, in order
    cudaStream_t copy_stream;  // input uploads (cuda_input.cu), handed over by the events below
    cudaEvent_t input_uploaded[BACKEND_INPUT_SLOTS];  // recorded on copy_stream after a slot's upload
    cudaEvent_t input_consumed[BACKEND_INPUT_SLOTS];  // recorded on stream after a slot was read
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    int cudnn_benchmark;        // cudnn.benchmark: timed algorithm search once per shape
    int allow_tf32;             // fp32 convolutions may use TF32 (cudnn.tf32)
    int matmul_tf32;            // the fp32 classifier matmul may use TF32 (cudnn.matmul_tf32)
    size_t conv_workspace_cap;  // largest convolution workspace an algorithm may use (cudnn.workspace_mb)
    int conv_pad;               // convolutions with few input channels: 0 padded where timed faster, -1
                                // never, 4 or 8 always to that many (cuda_diag.h; cudnn_conv.cu)
    int conv_own;               // stem-like convolutions on amptrain's kernels (cuda_conv_stem.cu): 0 where
                                // timed faster, -1 never, 1 always where eligible (cuda_diag.h)
    int bn_mode;      // CudaBnMode (cuda_backend.h): whose kernels train batch norm (cudnn.batch_norm)
    int sm_count;     // multiprocessors: how finely reductions are cut
    int cc_major;     // compute capability, major (which of our kernels the device can run)
    void *workspace;  // shared cuDNN/cuBLAS workspace, grown on demand (never in steady state)
    size_t workspace_bytes;
    CudaConvCache *conv_cache;
    cudaEvent_t readback_done;
    cudaEvent_t marks[BACKEND_MARKS];  // timing marks (mark_record / mark_elapsed_ms)
    // upload_async: pinned staging buffers used round-robin; a slot is refilled only after the event
    // recorded behind its last copy has passed (long done by then: the copy was issued slots ago)
    void *upload_stage[BACKEND_UPLOAD_SLOTS];
    size_t upload_bytes[BACKEND_UPLOAD_SLOTS];
    cudaEvent_t upload_done[BACKEND_UPLOAD_SLOTS];
    int upload_next;
    CudaBnCache *bn_cache;  // NULL until the first training batch norm; cuda_bn_cache_destroy frees it
    CudaConvBnCache *conv_bn_cache;  // NULL until the first conv_bn_prepare; cuda_conv_bn_cache_destroy
    int conv_bn;                     // conv_bn_forward_train's statistics from the convolution's epilogue: 0
                                     // where timed faster, -1 never, 1 always where an engine takes the
                                     // shape (cuda_diag.h)
    CudaJpeg *jpeg;        // NULL until the first input_decode (builds with nvJPEG); cuda_jpeg_destroy
    KernelCache *choices;  // the timed choices' records (cudnn.cache): looked up before each search
    char choice_env[384];  // what every record's key starts with: GPU, driver and library versions
} CudaBackend;

static inline CudaBackend *cuda_state(Backend *be) { return (CudaBackend *)be->impl; }
static inline cudnnDataType_t cudnn_dtype(DType dt) {
    return dt == DTYPE_F16 ? CUDNN_DATA_HALF : dt == DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

// Workspace of at least `bytes` on the compute stream (cuda_backend.cu).
void *cuda_workspace(CudaBackend *cb, size_t bytes);
// A short-lived buffer from the caching allocator (so it counts in the peak), given back at once.
void *cuda_scratch_get(CudaBackend *cb, size_t bytes);
void cuda_scratch_put(CudaBackend *cb, void *ptr);

// The mean time in ms of `runs` calls of run(ctx) on the compute stream, after one untimed call (start-up
// choices: the convolutions' routes, the batch-norm pairs). A workspace the calls grew is given back.
float cuda_time_ms(CudaBackend *cb, int runs, void (*run)(void *ctx), void *ctx);
// Gives the shared workspace back when it has grown past `held` bytes (to regrow to what the chosen routes
// ask): what cuda_time_ms does after its runs, for work a timing runs outside it.
void cuda_workspace_give_back(CudaBackend *cb, size_t held);
// A record's key for cb->choices (core/kernel_cache.h): cb->choice_env, " | ", then fmt's text naming the op,
// its shape and every setting its choice depends on. Fails the job when cap is too small.
void cuda_choice_key(const CudaBackend *cb, char *key, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define CUDA_CHOICE_KEY_MAX 768

// 1 when AMPTRAIN_CONV_LOG=1 is set: the start-up choices (convolution algorithms and routes, batch-norm
// pairs) are printed to stderr as they are made.
int cuda_pick_log_enabled(void);

// ---- the ops core/backend_ops.def marks LIST (or NVJPEG) for CUDA: cuda_<op> ----------------------------
// cudnn_conv.cu (the convolutions, conv_prepare), cudnn_batchnorm.cu (the batch norms, bn_prepare),
// cuda_pool.cu, cuda_linear.cu (cuBLAS), cuda_loss.cu, cuda_optim.cu (nonfinite_check, grad_norm, sgd_step,
// scaler_update, ema_update, cast), cuda_input.cu (the input slots, input_normalize) and nvjpeg_decode.cu
// (input_decode; built only when CMake finds nvJPEG: AMPTRAIN_HAVE_NVJPEG).
#define CUDA_DECLARE_LIST(ret, op, params) ret cuda_##op(Backend *be BACKEND_PARAMS(params));
#define CUDA_DECLARE_NVJPEG CUDA_DECLARE_LIST
#define CUDA_DECLARE_OWN(ret, op, params)
#define CUDA_DECLARE_NONE(ret, op, params)
#define BACKEND_OP(ret, op, cpu, cuda, graph, params) CUDA_DECLARE_##cuda(ret, op, params)
#include "core/backend_ops.def"
#undef BACKEND_OP

// ---- cudnn_conv.cu ------------------------------------------------------------------------------
void cuda_conv_cache_destroy(CudaBackend *cb);

// ---- cuda_conv_pad.cu: zero input channels for convolutions with few of them --------------------------
// x (rows, c) dt -> xp (rows, pc) dt, channels c..pc-1 zero; dt fp16 or bf16, c < pc, pc 4 or 8, xp aligned
// to 2 * pc bytes.
void conv_pad_channels(CudaBackend *cb, DType dt, const void *x, void *xp, size_t rows, int c, int pc);
// dwp (rows, pc) dt -> dw (rows, c) dt, fp16 or bf16: the first c channels of each row (= or +=, in fp32).
void conv_unpad_channels(CudaBackend *cb, DType dt, const void *dwp, void *dw, size_t rows, int c, int pc,
                         int accumulate);

// ---- cuda_conv_stem.cu: amptrain's own kernels for a stem-like convolution ----------------------------
// 1 when shape s in dt may run on them: fp16 or bf16 on sm_80 or later, ungrouped, 64 output channels, at
// most 4 input channels, kernel at most 7 rows and 8 columns, stride 2.
int conv_stem_eligible(const CudaBackend *cb, const ConvShape *s, DType dt);
// x (n,h,w,c_in) dt, w (64,kh,kw,c_in) dt -> y (n,out_h,out_w,64) dt
void conv_stem_forward(CudaBackend *cb, const ConvShape *s, DType dt, const void *x, const void *w, void *y);
// x (n,h,w,c_in) dt, dy (n,out_h,out_w,64) dt -> dw (64,kh,kw,c_in) dt (= or +=); its per-block sums in the
// shared workspace.
void conv_stem_backward_filter(CudaBackend *cb, const ConvShape *s, DType dt, const void *x, const void *dy,
                               void *dw, int accumulate);

// ---- cudnn_conv_graph.cu: a convolution direction on cuDNN's backend (graph) API ------------------------
typedef struct ConvGraph ConvGraph;
// Direction `direction` (0 forward, 1 backward data, 2 backward filter) of s in dt as a graph with the plans of
// the first max_plans engine configs heuristics mode A offers (of them at most runtime_tries compiled at run
// time); NULL, with cuDNN's reason in why, when there is none.
ConvGraph *conv_graph_make(CudaBackend *cb, const ConvShape *s, DType dt, int direction, int max_plans,
                           int runtime_tries, char *why, size_t why_len);
int conv_graph_plan_count(const ConvGraph *g);
// Plan i's engine and knobs, as cudnn_graph_plans describes them; its workspace in bytes.
const char *conv_graph_engine(const ConvGraph *g, int plan);
size_t conv_graph_workspace(const ConvGraph *g, int plan);
// One call of plan `plan` on the shared workspace, overwriting out: forward a = x, b = w, out = y; backward
// data a = dy, b = w, out = dx; backward filter a = x, b = dy, out = dw.
void conv_graph_run(CudaBackend *cb, const ConvGraph *g, int plan, const void *a, const void *b, void *out);
void conv_graph_free(ConvGraph *g);

// C (m,n) = op(A) op(B) + beta C on the backend's cuBLAS handle and stream, all column-major in dt
// (fp16, bf16 or fp32), alpha 1 and beta in fp32, under the caller's compute type (fp32 accumulation always;
// TF32 or pedantic fp32 as the caller's precision rule says). The classifier (cuda_linear.cu) and the
// 1x1 convolutions (cuda_conv_gemm.cu) run through it.
static inline void cuda_gemm(CudaBackend *cb, DType dt, cublasComputeType_t compute, cublasOperation_t op_a,
                             cublasOperation_t op_b, int m, int n, int k, const void *a, int lda,
                             const void *b, int ldb, float beta, void *c, int ldc) {
    const float alpha = 1.0f;
    const cudaDataType_t t = dt == DTYPE_F16 ? CUDA_R_16F : dt == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    CUBLAS_CHECK(cublasGemmEx(cb->cublas, op_a, op_b, m, n, k, &alpha, a, t, lda, b, t, ldb, &beta, c, t, ldc,
                              compute, CUBLAS_GEMM_DEFAULT));
}

// ---- cuda_conv_gemm.cu: 1x1 stride-1 ungrouped convolutions as one cuBLAS GEMM ----------------------
int conv_gemm_eligible(const ConvShape *s);
void conv_gemm_forward(CudaBackend *cb, const ConvShape *s, DType dt, const void *x, const void *w, void *y);
void conv_gemm_backward_data(CudaBackend *cb, const ConvShape *s, DType dt, const void *dy, const void *w,
                             void *dx, int accumulate);
void conv_gemm_backward_filter(CudaBackend *cb, const ConvShape *s, DType dt, const void *x, const void *dy,
                               void *dw, int accumulate);

// ---- cudnn_batchnorm.cu -----------------------------------------------------------------------------
// bn_forward_train from the per-channel sum and sum of squares of x that the convolution writing x made
// (sums, sqsums (c) fp32, not shifted): our own finalize and apply into y, the layer's entry as after our own
// forward (its backward follows as after bn_forward_train); scale, shift (c) fp32 scratch.
void cuda_bn_forward_train_sums(Backend *be, int rows, int c, DType dt, const void *x, const float *sums,
                                const float *sqsums, const void *residual, int relu, const float *gamma,
                                const float *beta, float *running_mean, float *running_var, float momentum,
                                float eps, float *save_mean, float *save_invstd, float *scale, float *shift,
                                void *y);

// bn_forward_train's statistics alone (ReLU, no residual; the output is never written) with its affine map
// into scale, shift (c) fp32, the layer's entry as after our own forward; scratch:
// bn_own_stats_scratch_bytes.
void cuda_bn_forward_train_stats(Backend *be, int rows, int c, DType dt, const void *x, const float *gamma,
                                 const float *beta, float *running_mean, float *running_var, float momentum,
                                 float eps, float *save_mean, float *save_invstd, void *scratch, float *scale,
                                 float *shift);
// Drops the layer entry of save_mean (a timing's scratch layer, whose buffer goes back to the allocator).
void cuda_bn_layer_forget(Backend *be, const float *save_mean);
// Fills n elements of dt with values spread over [lo, hi) from a hash of the index: timing data (no constant
// channel, about half of a ReLU's inputs positive where lo < 0 < hi).
void cuda_fill_spread(CudaBackend *cb, void *dst, size_t n, DType dt, float lo, float hi);

// ---- their state's end: cudnn_batchnorm.cu, cudnn_conv_bn.cu, nvjpeg_decode.cu ------------------------
void cuda_bn_cache_destroy(CudaBackend *cb);
void cuda_conv_bn_cache_destroy(CudaBackend *cb);
void cuda_jpeg_destroy(CudaBackend *cb);

// ---- cuda_input.cu ------------------------------------------------------------------------------
// The copy stream's side of a slot's hand-over (backend_ops.def): claim waits for the slot's last release,
// filled records "uploaded" after the work that wrote it (input_upload, input_decode).
void cuda_input_slot_claim(CudaBackend *cb, int slot);
void cuda_input_slot_filled(CudaBackend *cb, int slot);

#endif

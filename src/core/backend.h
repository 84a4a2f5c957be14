// backend.h - the one interface between the model/trainer and the hardware.
//
// Two implementations: the CPU reference (kernels/cpu/, plain C loops, always built, tested in CI) and CUDA
// (kernels/, cuDNN + cuBLAS + custom kernels). The model, AMP logic, distributed logic and trainer call
// only through a Backend and never know which one runs.
//
// Conventions for every op:
// - Buffers are backend memory (host memory for the CPU backend, device memory for CUDA), passed as
//   void* with their dtype named by a DType argument.
// - Activations are NHWC (channels-last): (N, H, W, C), C fastest.
// - Convolution weights are (C_out, kh, kw, C_in/groups) ("OHWI"); checkpoints permute to torchvision's
//   (C_out, C_in/groups, kh, kw). Linear weights are (out, in) as in torch.
// - `dt` is the dtype of activations, compute weights and gradients of the op. Under AMP it is fp16 for
//   everything the autocast table (src/amp/autocast.h) puts in fp16; math accumulates in fp32 always.
// - Batch-norm affine parameters (gamma, beta), running and saved statistics are always fp32.
// - Gradient outputs of parameters (`dw`, `dgamma`, ...) honour `accumulate`: 0 overwrites, 1 adds
//   (gradient accumulation across micro-steps; identity-shortcut gradients).
// - Everything is asynchronous on CUDA: ops run in order on the compute stream; input batches come up on
//   a copy stream and gradients are summed on the communicator's stream, each handed over by events.
//   `sync` waits for the compute stream.
#ifndef AMPTRAIN_BACKEND_H
#define AMPTRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/image_job.h"
#include "core/pixels.h"

// A 2-D convolution, NHWC. out_h = (h + 2*pad - kh) / stride + 1 (same for w).
typedef struct ConvShape {
    int n, h, w, c_in;                    // input  (n, h, w, c_in)
    int c_out, kh, kw, stride, pad, groups;
    int out_h, out_w;                     // output (n, out_h, out_w, c_out)
} ConvShape;

// Fills out_h/out_w from the rest.
static inline void conv_shape_finish(ConvShape *s) {
    s->out_h = (s->h + 2 * s->pad - s->kh) / s->stride + 1;
    s->out_w = (s->w + 2 * s->pad - s->kw) / s->stride + 1;
}

// Max pool with a square window, NHWC. out = (in + 2*pad - k) / stride + 1; padding never wins the max.
typedef struct PoolShape {
    int n, h, w, c;
    int k, stride, pad;
    int out_h, out_w;
} PoolShape;

// Device-side loss-scaler state: the scaler's whole state lives here so nothing in the step needs the
// host (PyTorch GradScaler keeps the same two numbers on the device).
typedef struct ScalerState {
    float scale;           // S: the loss scale
    int32_t growth_count;  // clean steps in a row since the last change of S
    float found_inf;       // the agreed verdict of the current step: 0 clean, 1 inf/NaN somewhere
    int32_t skipped_total; // steps skipped since the start of training (for logging)
    int32_t skipped_run;   // steps skipped in a row up to the last one (0 after a clean step)
} ScalerState;

// Hyper-parameters of one SGD step (PyTorch torch.optim.SGD semantics, dampening 0). The learning rate
// is not here: it changes every step, so the step reads it from device memory (see sgd_step).
typedef struct SgdParams {
    float momentum, weight_decay;
    int nesterov;
} SgdParams;

#define BACKEND_MARKS 8  // timing-mark slots
#define BACKEND_UPLOAD_SLOTS 4  // staging buffers of upload_async, reused round-robin
#define BACKEND_INPUT_SLOTS 3   // device input slots of the copy stream (input_upload / input_acquire)

// One batch norm of the two that bn_add_bn_* take: its input and parameters. x (rows, c) dt; gamma, beta,
// running_*, save_* (c) fp32; dgamma, dbeta (c) dt. The forward reads x, gamma, beta and writes the running
// and saved statistics; the backward reads x, gamma and the saved statistics and writes dgamma, dbeta.
typedef struct BnArgs {
    const void *x;
    const float *gamma, *beta;
    float *running_mean, *running_var, *save_mean, *save_invstd;
    void *dgamma, *dbeta;
} BnArgs;

typedef struct Backend Backend;
struct Backend {
    const char *name;  // "cpu" or "cuda"

    // ---- memory ----------------------------------------------------------------------------------
    void *(*alloc)(Backend *be, size_t bytes);  // never NULL; contents undefined
    void (*free)(Backend *be, void *ptr);
    void (*zero)(Backend *be, void *ptr, size_t bytes);
    void (*to_device)(Backend *be, void *dst, const void *host_src, size_t bytes);  // waits
    void (*to_host)(Backend *be, void *host_dst, const void *src, size_t bytes);    // waits
    void (*copy)(Backend *be, void *dst, const void *src, size_t bytes);            // device to device
    // Host to device without waiting for the device: the bytes are staged (pinned memory on CUDA) and the
    // copy is ordered on the compute stream; host_src may be reused as soon as this returns. For small
    // values (the learning rate, a test's poison); never inside a graph capture.
    void (*upload_async)(Backend *be, void *dst, const void *host_src, size_t bytes);
    void (*sync)(Backend *be);
    size_t (*peak_bytes)(Backend *be);     // like torch.cuda.max_memory_allocated
    size_t (*current_bytes)(Backend *be);

    // Asynchronous read-back for logging: enqueue the copy now, `readback_wait` before reading dst.
    // dst must be host memory from `host_alloc` (pinned on CUDA).
    void *(*host_alloc)(Backend *be, size_t bytes);
    void (*host_free)(Backend *be, void *ptr);
    void (*readback_begin)(Backend *be, void *host_dst, const void *src, size_t bytes);
    void (*readback_wait)(Backend *be);

    // Timing marks on the compute stream, for the benchmark's phase split: mark_record(slot) records
    // when the stream reaches this point; mark_elapsed_ms(a, b) waits for mark b and returns b - a.
    void (*mark_record)(Backend *be, int slot);
    float (*mark_elapsed_ms)(Backend *be, int from, int to);
    // Opens (open=1) or closes a window for an external profiler (CUDA: cudaProfilerStart/Stop, what
    // `ncu --profile-from-start off` honours); NULL where there is no such profiler (the CPU).
    void (*profiler_window)(Backend *be, int open);

    // ---- input batches on the copy stream (CUDA: its own stream; CPU: plain copies) -------------------
    // Ownership of input slot `slot` (0..BACKEND_INPUT_SLOTS-1) passes copy stream -> compute stream ->
    // copy stream, each hand-over an event:
    //   input_upload   copy stream: waits for the slot's last input_release, copies host_src (pinned, from
    //                  host_alloc) to dst, records "uploaded"
    //   input_acquire  compute stream waits for "uploaded" (device-side; the host does not wait)
    //   input_release  compute stream records "consumed": the copy stream may overwrite dst again
    //   input_upload_wait  the host waits for "uploaded": host_src may be refilled
    void (*input_upload)(Backend *be, int slot, void *dst, const void *host_src, size_t bytes);
    //   input_decode   like input_upload, but makes dst (count, side, side, 3) u8 raw bytes by decoding count
    //                  ImageJobs (core/image_job.h: host memory) and applying their geometry; bitwise the CPU
    //                  reference (data/image_job_decode.h) on the CPU, within the decoder's rounding elsewhere.
    //                  failed[i] = 1 for a job it could not decode, only where the CPU reference refuses it
    //                  too (a device decoder falls back to it); its rows are then undefined: the caller puts a
    //                  replacement there with input_upload. failed[] is complete on return.
    //                  The jobs' bytes must stay untouched until input_upload_wait(slot). NULL where the
    //                  backend has no decoder (CUDA built without nvJPEG: kernels/cuda/nvjpeg_decode.cu).
    void (*input_decode)(Backend *be, int slot, void *dst, int count, int side, const ImageJob *jobs,
                         uint8_t *failed);
    void (*input_upload_wait)(Backend *be, int slot);
    void (*input_acquire)(Backend *be, int slot);
    void (*input_release)(Backend *be, int slot);

    // ---- graphs: the step captured once, replayed ------------------------------------------------------
    // graph_begin: from here on the compute stream (and every stream it hands work to through events,
    // e.g. NCCL's) is captured, not run; nothing may allocate new device memory or wait on the host.
    // graph_end: the captured work as an executable graph. graph_launch: runs it on the compute stream.
    // Buffers the caching allocator handed out and took back during the capture stay the graph's.
    // A backend without CUDA graphs (the CPU's) records the ops it is called with into an op log instead
    // (core/op_log.h), replayed with a graph's semantics; graph_log then returns the log being captured
    // into, so the communicator's collectives can join it (comm_record_into). NULL on CUDA, whose stream
    // capture takes in NCCL's collectives itself.
    void (*graph_begin)(Backend *be);
    void *(*graph_end)(Backend *be);
    void (*graph_launch)(Backend *be, void *graph);
    void (*graph_destroy)(Backend *be, void *graph);
    struct OpLog *(*graph_log)(Backend *be);

    // ---- input -----------------------------------------------------------------------------------
    // The batch's first op: dst (pixels, 3) dst_dt = src * affine.scale[ch] + affine.shift[ch], with src
    // (pixels, 3) u8 raw bytes or fp32 (pixels.h).
    void (*input_normalize)(Backend *be, size_t pixels, DType src_dt, const void *src, const PixelAffine *affine,
                            DType dst_dt, void *dst);

    // ---- casts -----------------------------------------------------------------------------------
    // dst[i] = (dst_dt) src[i]; fp32 -> fp16 rounds to nearest even, overflows to inf.
    void (*cast)(Backend *be, void *dst, DType dst_dt, const void *src, DType src_dt, size_t n);

    // ---- convolution (NHWC x, OHWI w, no bias) ---------------------------------------------------
    // Chooses the algorithms of all three directions for shape s now (CUDA: cuDNN's timed search when
    // cudnn.benchmark), on buffers of its own that go back afterwards, so that the choice and its scratch
    // come before the step's memory is allocated; NULL where there is nothing to choose (the CPU). Ops on
    // a shape not prepared choose lazily, on their real buffers.
    void (*conv_prepare)(Backend *be, const ConvShape *s, DType dt);
    // x (n,h,w,c_in) dt, w (c_out,kh,kw,c_in/g) dt -> y (n,out_h,out_w,c_out) dt
    void (*conv_forward)(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w, void *y);
    // dy (n,out_h,out_w,c_out), w -> dx (n,h,w,c_in); accumulate: dx += instead of dx =
    void (*conv_backward_data)(Backend *be, const ConvShape *s, DType dt, const void *dy, const void *w,
                               void *dx, int accumulate);
    // x, dy -> dw (c_out,kh,kw,c_in/g) dt; accumulate: dw += instead of dw =
    void (*conv_backward_filter)(Backend *be, const ConvShape *s, DType dt, const void *x, const void *dy,
                                 void *dw, int accumulate);

    // ---- batch norm over NHWC rows (rows = n*h*w), fused with an optional residual add and ReLU ---------
    // Training: y = act(gamma * (x - mean) / sqrt(var + eps) + beta + residual) with batch statistics
    // (biased variance); running = (1 - momentum) * running + momentum * batch stat (unbiased variance for
    // running_var, as torch). Saves mean and 1/sqrt(var + eps) for backward.
    // x, residual (nullable), y: (rows, c) dt; gamma, beta, running_*, save_*: (c) fp32.
    void (*bn_forward_train)(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                             int relu, const float *gamma, const float *beta, float *running_mean,
                             float *running_var, float momentum, float eps, float *save_mean,
                             float *save_invstd, void *y);
    // Lets the backend choose its kernels for a training batch norm of this shape now (residual, relu: as
    // bn_forward_train will be called), on buffers of its own, before the step's memory exists; NULL where
    // there is nothing to choose (the CPU). A shape not prepared runs the backend's default choice.
    void (*bn_prepare)(Backend *be, int rows, int c, DType dt, int residual, int relu);
    // Inference: running statistics, same fusion.
    void (*bn_forward_eval)(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                            int relu, const float *gamma, const float *beta, const float *running_mean,
                            const float *running_var, float eps, void *y);
    // bn_forward_train's output again, from the statistics it saved, for a backward that did not keep it:
    // y = act(gamma * (x - save_mean) * save_invstd + beta), no residual. The CPU gives the forward's y
    // bitwise; CUDA where the forward ran on cuDNN, within the rounding of dt.
    void (*bn_forward_saved)(Backend *be, int rows, int c, DType dt, const void *x, int relu, const float *gamma,
                             const float *beta, const float *save_mean, const float *save_invstd, void *y);
    // Backward of bn_forward_train. y is the forward output, read only for the ReLU mask (NULL when relu=0).
    // Writes dx (rows,c) dt (accumulate: dx +=), dgamma/dbeta (c) in grad dtype dt (accumulate_params:
    // +=), and, when d_residual is not NULL, d_residual = dy masked by the ReLU (always overwritten).
    void (*bn_backward)(Backend *be, int rows, int c, DType dt, const void *x, const void *y, const void *dy,
                        int relu, const float *gamma, const float *save_mean, const float *save_invstd,
                        void *dx, int accumulate, void *dgamma, void *dbeta, int accumulate_params,
                        void *d_residual);

    // The end of a downsampling block, y = act(bn_a(x_a) + bn_b(x_b)), both batch norms in training: what
    // bn_forward_train of b into scratch followed by bn_forward_train of a with residual = scratch computes,
    // except that bn_b's output need not be rounded to dt nor written (scratch (rows, c) dt may be left
    // untouched). y (rows, c) dt. NULL where the backend has no such fused kernels (the CPU): the caller then
    // makes those two calls itself.
    void (*bn_add_bn_forward_train)(Backend *be, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b,
                                    int relu, float momentum, float eps, void *scratch, void *y);
    // Its backward: what bn_backward of a (y, dy; d_residual = scratch) followed by bn_backward of b (dy =
    // scratch) computes. dx_a, dx_b (rows, c) dt are overwritten; dx_b may be dy itself. Both layers'
    // dgamma/dbeta honour accumulate_params. scratch (rows, c) dt may be written or left untouched. NULL
    // where bn_add_bn_forward_train is.
    void (*bn_add_bn_backward)(Backend *be, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b,
                               const void *y, const void *dy, int relu, void *dx_a, void *dx_b,
                               int accumulate_params, void *scratch);

    // ---- pooling ---------------------------------------------------------------------------------
    // x (n,h,w,c) -> y (n,out_h,out_w,c), max over the window (padding excluded).
    void (*maxpool_forward)(Backend *be, const PoolShape *s, DType dt, const void *x, void *y);
    // Routes each dy to the first position in its window (row-major) whose x equals y; dx is overwritten.
    void (*maxpool_backward)(Backend *be, const PoolShape *s, DType dt, const void *x, const void *y,
                             const void *dy, void *dx);
    // x (n,hw,c) -> y (n,c): mean over hw.
    void (*avgpool_forward)(Backend *be, int n, int hw, int c, DType dt, const void *x, void *y);
    // dy (n,c) -> dx (n,hw,c) = dy / hw (overwritten).
    void (*avgpool_backward)(Backend *be, int n, int hw, int c, DType dt, const void *dy, void *dx);

    // ---- classifier ------------------------------------------------------------------------------
    // x (n,in) dt, w (out,in) dt, b (out) dt -> y (n,out) dt;  y = x w^T + b, fp32 accumulation.
    void (*linear_forward)(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                           const void *b, void *y);
    // dy (n,out) -> dx (n,in) (overwritten), dw (out,in), db (out) (accumulate: +=).
    void (*linear_backward)(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                            const void *dy, void *dx, void *dw, void *db, int accumulate);

    // ---- loss (always computed in fp32) ----------------------------------------------------------
    // logits (n,classes) logits_dt, labels (n) int32 in [0,classes).
    // loss_out (1 float) = mean over n of -log softmax(logits)[label]   (the unscaled local loss)
    // dlogits (n,classes) logits_dt = (softmax - onehot) * (*scale) * seed_factor
    //   where scale is the device loss scale (NULL means 1) and seed_factor = 1 / (ranks * n * accum).
    void (*softmax_xent)(Backend *be, int n, int classes, DType logits_dt, const void *logits,
                         const int32_t *labels, float *loss_out, void *dlogits, const float *scale,
                         float seed_factor);

    // ---- AMP and optimizer (fused, device-side; no host sync) ------------------------------------
    // flag (1 float) = 1 if any of grad[0..n) (dt) is inf or NaN; leaves it unchanged otherwise.
    // The caller zeroes the flag once per step, then may call this on several buffers.
    void (*nonfinite_check)(Backend *be, DType dt, const void *grad, size_t n, float *flag);
    // Unless state->found_inf != 0 (then nothing is written):
    //   g = grad[i] (dt) / state->scale + wd * master[i]
    //   mom[i] = momentum * mom[i] + g;  step = nesterov ? g + momentum * mom[i] : mom[i]
    //   master[i] -= lr * step;  copy[i] = (fp16) master[i]  when copy != NULL
    // master, mom (n) fp32; copy (n) fp16 or NULL; lr (1) fp32 in backend memory, read when the step runs
    // (a replayed graph follows the schedule the host writes there).
    void (*sgd_step)(Backend *be, size_t n, DType grad_dt, const void *grad, float *master, float *mom,
                     void *copy, const SgdParams *p, const float *lr, const ScalerState *state);
    // GradScaler's update, one thread: found_inf -> scale *= backoff, count = 0, skipped_total++,
    // skipped_run++; else skipped_run = 0, count++ and, when count == interval, scale *= growth, count = 0. With dynamic == 0 the scale
    // never changes (skips are still counted).
    void (*scaler_update)(Backend *be, ScalerState *state, float growth, float backoff, int interval,
                          int dynamic);

    void (*destroy)(Backend *be);
    void *impl;  // the implementation's private state
};

// The CPU reference backend (kernels/cpu/). Always available.
Backend *cpu_backend_create(void);

// The CUDA backend (kernels/). Returns NULL with a reason in `why` when built without CUDA or when no
// usable GPU exists. device: the CUDA device ordinal to bind. benchmark: cudnn.benchmark; conv_tf32 and
// matmul_tf32: fp32 convolutions / the fp32 matmul may use TF32 (cudnn.tf32, cudnn.matmul_tf32).
Backend *cuda_backend_create(int device, int cudnn_benchmark, int conv_tf32, int matmul_tf32, char *why,
                             size_t why_len);

#endif

// backend.h - the one interface between the model/trainer and the hardware.
//
// Two implementations: the CPU reference (kernels/cpu/, plain C loops, always built, tested in CI) and CUDA
// (kernels/cuda/, cuDNN + cuBLAS + custom kernels). The model, AMP logic, distributed logic and trainer
// call only through a Backend and never know which one runs. Every op, with its contract, is listed once
// in core/backend_ops.def.
//
// Conventions for every op:
// - Buffers are backend memory (host memory for the CPU backend, device memory for CUDA), passed as
//   void* with their dtype named by a DType argument.
// - Activations are NHWC (channels-last): (N, H, W, C), C fastest.
// - Convolution weights are (C_out, kh, kw, C_in/groups) ("OHWI"); checkpoints permute to torchvision's
//   (C_out, C_in/groups, kh, kw). Linear weights are (out, in) as in torch.
// - `dt` is the dtype of activations, compute weights and gradients of the op. Under AMP it is the autocast
//   dtype (fp16 or bf16, amp.dtype) for everything the autocast table (src/amp/autocast.h) lowers; math
//   accumulates in fp32 always.
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
    int n, h, w, c_in;  // input  (n, h, w, c_in)
    int c_out, kh, kw, stride, pad, groups;
    int out_h, out_w;  // output (n, out_h, out_w, c_out)
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
    float scale;            // S: the loss scale
    int32_t growth_count;   // clean steps in a row since the last change of S
    float found_inf;        // the agreed verdict of the current step: 0 clean, 1 inf/NaN somewhere
    int32_t skipped_total;  // steps skipped since the start of training (for logging)
    int32_t skipped_run;    // steps skipped in a row up to the last one (0 after a clean step)
} ScalerState;

// Weight-decay groups of one SGD step (torch.optim.SGD's param groups): every SGD_DECAY_SPAN elements of
// the flat buffers belong to one parameter tensor (model/params.h aligns each tensor to that span), so one
// byte per span names the group whose weight_decay applies there.
#define SGD_DECAY_GROUPS 2
#define SGD_DECAY_SPAN 64

// Hyper-parameters of one SGD step (PyTorch torch.optim.SGD semantics, dampening 0), with gradient
// clipping by the global norm (torch.nn.utils.clip_grad_norm_). The learning rate is not here: it changes
// every step, so the step reads it from device memory (see sgd_step).
typedef struct SgdParams {
    float momentum;
    float weight_decay[SGD_DECAY_GROUPS];  // by decay group
    int nesterov;
    float max_norm;  // clip_grad_norm_'s max_norm, applied when sgd_step is given a norm
} SgdParams;

// One micro-batch's MixUp or CutMix (data.mixup_alpha, data.cutmix_alpha; torchvision.transforms.v2
// semantics) as batch_mix and softmax_xent read it from backend memory: the host draws it and writes it there
// before the step, so a replayed graph follows the draws. Sample i is mixed with sample i-1 of the same
// batch, sample 0 with sample n-1 (torch's batch.roll(1, 0)); its target is lam x onehot(label_i) + rest x
// onehot(label_i-1).
typedef struct BatchMix {
    float lam;   // weight of the sample's own label (and image, MixUp): (float) of the double drawn
    float rest;  // weight of the rolled sample's: (float)(1 - lam) with 1 - lam in double, as torch's scalar
    int32_t blend;  // 1: MixUp, every value x * lam + x_rolled * rest; 0: CutMix, the box from the rolled
                    // image, the rest kept
    int32_t x1, y1, x2, y2;  // CutMix's box: columns [x1, x2), rows [y1, y2) (empty for MixUp)
} BatchMix;

// What ema_update does after this step (torch.optim.swa_utils.AveragedModel.update_parameters), in
// backend memory: the host writes it before each step, as the learning rate, so a replayed graph follows.
typedef enum { EMA_SKIP = 0, EMA_COPY = 1, EMA_AVERAGE = 2 } EmaMode;
typedef struct EmaControl {
    int32_t mode;  // EmaMode
    float decay;   // EMA_AVERAGE: avg = decay * avg + weight * src
    float weight;  // (float)(1 - decay) with 1 - decay taken in double, as torch's Python scalar
} EmaControl;

#define BACKEND_MARKS 8         // timing-mark slots
#define BACKEND_UPLOAD_SLOTS 4  // staging buffers of upload_async, reused round-robin
#define BACKEND_INPUT_SLOTS 3   // device input slots of the copy stream (input_upload / input_acquire)

// One batch norm of a fused op (bn_add_bn_*, conv_bn_*, bn_conv_*): its input and parameters. x (rows, c) dt;
// gamma, beta, running_*, save_* (c) fp32; dgamma, dbeta (c) dt. The forward reads x, gamma, beta and writes
// the running and saved statistics; the backward reads x, gamma (and beta, for a ReLU's mask) and the saved
// statistics and writes dgamma, dbeta.
typedef struct BnArgs {
    const void *x;
    const float *gamma, *beta;
    float *running_mean, *running_var, *save_mean, *save_invstd;
    void *dgamma, *dbeta;
} BnArgs;

// The op of backend_ops.def whose way conv_bn_prepare chooses.
typedef enum ConvBnFusion {
    FUSE_CONV_BN = 0,           // conv_bn_forward_train
    FUSE_BN_CONV_BN = 1,        // bn_conv_bn_forward_train
    FUSE_BN_CONV_BACKWARD = 2,  // bn_conv_backward_data
} ConvBnFusion;

// The parameters of an op of backend_ops.def as the rest of a parameter list after `Backend *be`:
// `, type name` for (V, type, name), `, const type *name` for (S, type, name). The walk alternates two
// macros so that each element's expansion can name the next; BACKEND_SEQ_END drops the one left over.
#define BACKEND_PARAMS(params) BACKEND_SEQ_END(BACKEND_PARAMS_A params)
#define BACKEND_PARAMS_A(kind, type, name) BACKEND_PARAM_##kind(type, name) BACKEND_PARAMS_B
#define BACKEND_PARAMS_B(kind, type, name) BACKEND_PARAM_##kind(type, name) BACKEND_PARAMS_A
#define BACKEND_PARAMS_A_END
#define BACKEND_PARAMS_B_END
#define BACKEND_PARAM_V(type, name) , type name
#define BACKEND_PARAM_S(type, name) , const type *name
#define BACKEND_SEQ_END(...) BACKEND_SEQ_END_(__VA_ARGS__)
#define BACKEND_SEQ_END_(...) __VA_ARGS__##_END

typedef struct Backend Backend;
struct Backend {
    const char *name;  // "cpu" or "cuda"
    // One function pointer per op, ret (*op)(Backend *be, params...): core/backend_ops.def lists them
    // with their contracts.
#define BACKEND_OP(ret, op, cpu, cuda, graph, params) ret (*op)(Backend * be BACKEND_PARAMS(params));
#include "core/backend_ops.def"
#undef BACKEND_OP
    void *impl;  // the implementation's private state
};

// The CPU reference backend (kernels/cpu/). Always available. The CUDA backend's constructor, with its
// options, is kernels/cuda/cuda_backend.h's.
Backend *cpu_backend_create(void);

#endif

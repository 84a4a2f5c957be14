// resnext.h - ResNeXt exactly as torchvision builds it, on any Backend.
//
//   stem:   conv1 7x7/2 (3 -> planes) -> bn1 -> relu -> maxpool 3x3/2 pad 1
//   layerS: blocks of Bottleneck (expansion 4): conv1 1x1 -> bn1 -> relu -> conv2 3x3 stride s,
//           groups = cardinality -> bn2 -> relu -> conv3 1x1 -> bn3 -> (+ identity | downsample) -> relu
//           width = planes_S * base_width / 64 * cardinality; downsample = conv 1x1 stride s -> bn
//   head:   global average pool -> fc
// Parameter names and shapes are torchvision's (`layer2.0.downsample.1.running_mean`, `fc.bias`).
// Activations are NHWC in the autocast dtype (fp16 or bf16 under AMP); every tensor backward needs is kept.
// Batch norm is fused with its ReLU and with the residual add (one pass instead of three); in training a 1x1
// convolution and its batch norm are one backend op (conv_bn_forward_train), which may take the batch norm's
// statistics from the convolution.
#ifndef AMPTRAIN_RESNEXT_H
#define AMPTRAIN_RESNEXT_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "config/config.h"
#include "core/pixels.h"
#include "model/params.h"

typedef struct ConvLayer {
    ConvShape shape;  // n = max batch; the op runs with the actual batch
    int weight;       // parameter index
} ConvLayer;

typedef struct ModelBnLayer {
    int c;
    int gamma, beta;              // parameter indices
    size_t stats_offset;          // running mean at running[stats_offset], running var at +c; same for saved
    char prefix[PARAM_NAME_MAX];  // "layer1.0.bn1" (for running_mean / running_var names)
} ModelBnLayer;

typedef struct ModelBlock {
    ConvLayer conv1, conv2, conv3, down;
    ModelBnLayer bn1, bn2, bn3, down_bn;
    int has_down;
} ModelBlock;

// Called by model_backward each time a parameter's gradient is final (for bucketed allreduce).
typedef void (*GradReadyFn)(void *ctx, const ParamInfo *param);

// The parameters and the layers; per-step buffers live in an Activations (activations.h).
typedef struct Model {
    ModelConfig cfg;
    int amp;       // autocast on
    DType amp_dt;  // the autocast dtype (fp16 or bf16; fp32: autocast off)
    DType act_dt;  // activations, compute weights and gradients: the autocast dtype under AMP, else fp32
    ParamRegistry params;
    size_t stats_numel;           // running (and saved) statistics: 2 * sum of BN channels
    int64_t num_batches_tracked;  // torchvision's BN counter (same for every BN layer)

    ConvLayer stem;  // layer shapes are per image (n = 1); the ops run with the batch's n
    ModelBnLayer stem_bn;
    ModelBlock *blocks;
    int n_blocks;
    int fc_in, fc_weight, fc_bias;
    int final_hw;            // spatial size of the last stage, flattened (h*w)
    ModelBnLayer **bn_list;  // every BN layer in torchvision order (for running-stat names)
    int n_bn;

    // ---- backend memory -----------------------------------------------------------------------
    float *master;   // (padded_numel) fp32 master weights
    void *compute;   // (padded_numel) act_dt weights the ops read: the 16-bit copy, or == master
    void *grads;     // (padded_numel) act_dt gradients, backward order
    float *running;  // (stats_numel) BN running mean/var
} Model;

// One batch, passed to every pass (nothing about it is stored in the model). images: backend memory,
// (n, side, side, 3) u8 raw bytes normalised with `affine`, or fp32 already normalised (affine =
// identity); labels (n) int32 in [0, classes), backend memory.
typedef struct ModelBatch {
    const void *images;
    DType images_dt;  // DTYPE_U8 or DTYPE_F32
    PixelAffine affine;
    const int32_t *labels;
    int n;
    const BatchMix *mix;  // backend memory: MixUp/CutMix of the normalised images and the targets; NULL: none
} ModelBatch;

typedef struct Activations Activations;

// Builds the registry and shapes only (no backend memory): enough for --dry-run's summary.
// cfg must be validated (config_load applies the presets). amp_dt: the autocast dtype
// (autocast_run_dtype: DTYPE_F16 or DTYPE_BF16; DTYPE_F32 without AMP).
void model_init_shapes(Model *m, const ModelConfig *cfg, DType amp_dt);
// Allocates the parameters and initialises them like torchvision (kaiming normal fan_out for convs,
// BN weight 1 bias 0, nn.Linear's default for fc) from `seed`.
void model_alloc(Model *m, Backend *be, uint64_t seed);
// model_alloc and model_prepare_ops(m, be, n) at once: the host draws the weights on a thread of its own while
// the backend chooses its kernels (the same weights as model_alloc's). Returns the seconds the choices took.
double model_alloc_and_prepare(Model *m, Backend *be, uint64_t seed, int n);
void model_free(Model *m, Backend *be);

// A view of m's parameters with the shapes of square inputs of `side` (evaluation at another side than
// training's: convolutions, batch norm and pooling take any spatial size, and the head's global average
// pool reduces it to one). The view shares m's backend memory (weights, gradients, running statistics) and owns
// only its shapes: free it with model_view_free, before m. Passes run on it as on m.
void model_view_at_side(Model *view, const Model *m, int side);
void model_view_free(Model *view);

// Lets the backend choose every convolution's algorithms and every training batch norm's kernels for batch n
// now (backend_ops.def conv_prepare, bn_prepare), before the step's buffers exist; call it before activations_alloc.
// Nothing to do on the CPU.
void model_prepare_ops(const Model *m, Backend *be, int n);

// 1 when block i keeps no bn1/bn2 output between forward and backward (model.recompute_bn_blocks).
int model_block_recomputes_bn(const Model *m, int i);

// Multiply-adds per image of the forward pass (convolutions and the classifier).
double model_macs_per_image(const Model *m);

// Forward of b->n images (n <= act->max_batch); train=1 uses batch statistics and updates the running
// statistics (the caller counts num_batches_tracked: a replayed graph runs this without calling it).
// With b->mix the normalised images are mixed (batch_mix) before the stem, in act->input, which the stem's
// backward reads. Result: act->logits (n, classes).
void model_forward(Model *m, Activations *act, Backend *be, const ModelBatch *b, int train);
// Softmax cross-entropy of act->logits against b->labels (mixed by b->mix, label smoothing `smoothing`):
// act->loss, and act->dlogits seeded with (*scale) * seed_factor (scale: device pointer, NULL = 1).
void model_loss(Model *m, Activations *act, Backend *be, const ModelBatch *b, float smoothing,
                const float *scale, float seed_factor);
// Backward from act->dlogits into m->grads (accumulate=1 adds to what is there). ready() is called for
// every parameter as soon as its gradient is final, in the order of the flat layout.
void model_backward(Model *m, Activations *act, Backend *be, const ModelBatch *b, int accumulate,
                    GradReadyFn ready, void *ctx);

// Refreshes the compute copy from the masters (after load/init; the optimizer does it every step).
void model_refresh_compute(Model *m, Backend *be);

#endif

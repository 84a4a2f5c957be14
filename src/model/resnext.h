// resnext.h - ResNeXt exactly as torchvision builds it, on any Backend.
//
//   stem:   conv1 7x7/2 (3 -> planes) -> bn1 -> relu -> maxpool 3x3/2 pad 1
//   layerS: blocks of Bottleneck (expansion 4): conv1 1x1 -> bn1 -> relu -> conv2 3x3 stride s,
//           groups = cardinality -> bn2 -> relu -> conv3 1x1 -> bn3 -> (+ identity | downsample) -> relu
//           width = planes_S * base_width / 64 * cardinality; downsample = conv 1x1 stride s -> bn
//   head:   global average pool -> fc
// Parameter names and shapes are torchvision's (`layer2.0.downsample.1.running_mean`, `fc.bias`).
// Activations are NHWC in the autocast dtype (fp16 under AMP); every tensor backward needs is kept.
// Batch norm is fused with its ReLU and with the residual add (one pass instead of three).
#ifndef AMPTRAIN_RESNEXT_H
#define AMPTRAIN_RESNEXT_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/config.h"
#include "params.h"

typedef struct ConvLayer {
    ConvShape shape;  // n = max batch; the op runs with the actual batch
    int weight;       // parameter index
} ConvLayer;

typedef struct BnLayer {
    int c;
    int gamma, beta;      // parameter indices
    size_t stats_offset;  // running mean at running[stats_offset], running var at +c; same for saved
    char prefix[PARAM_NAME_MAX];  // "layer1.0.bn1" (for running_mean / running_var names)
} BnLayer;

typedef struct Block {
    ConvLayer conv1, conv2, conv3, down;
    BnLayer bn1, bn2, bn3, down_bn;
    int has_down;
    // activations (max_batch, h, w, c) in act_dt
    void *a1, *b1;        // conv1 output, bn1+relu output   (n, h_in, w_in, width)
    void *a2, *b2;        // conv2 output, bn2+relu output   (n, h_out, w_out, width)
    void *a3, *out;       // conv3 output, bn3+add+relu out  (n, h_out, w_out, 4*planes)
    void *down_a;         // downsample conv output            (n, h_out, w_out, 4*planes)
    void *down_b;         // its bn output: only bn3's forward reads it (in the arena above this block)
    // gradients during this block's backward, in the arena above its activations (dead by then)
    void *d_in;           // (n, h_in, w_in, c_in) gradient of the block's input (the previous block's output)
    void *d_tmp;          // (largest of a1, a2, a3) the gradient inside the block
} Block;

// Called by model_backward each time a parameter's gradient is final (for bucketed allreduce).
typedef void (*GradReadyFn)(void *ctx, const ParamInfo *param);

typedef struct Model {
    ModelConfig cfg;
    int max_batch;
    int amp;               // autocast on
    DType act_dt;          // activations, compute weights and gradients: fp16 under AMP, else fp32
    ParamRegistry params;
    size_t stats_numel;    // running/saved statistics: 2 * sum of BN channels
    int64_t num_batches_tracked;  // torchvision's BN counter (same for every BN layer)

    ConvLayer stem;
    BnLayer stem_bn;
    Block *blocks;
    int n_blocks;
    int fc_in, fc_weight, fc_bias;
    int final_hw;          // spatial size of the last stage, flattened (h*w)
    BnLayer **bn_list;     // every BN layer in torchvision order (for running-stat names)
    int n_bn;

    // ---- backend memory -----------------------------------------------------------------------
    float *master;         // (padded_numel) fp32 master weights
    void *compute;         // (padded_numel) act_dt weights the ops read: the fp16 copy, or == master
    void *grads;           // (padded_numel) act_dt gradients, backward order
    float *running;        // (stats_numel) BN running mean/var
    float *saved;          // (stats_numel) BN batch mean / invstd from the last training forward
    float *input_f32;      // (max_batch, image, image, 3) fp32 staging for the loader's batch (under AMP
                           // only the forward's first cast reads it: it sits above the stem's activations)
    void *input;           // (max_batch, image, image, 3) act_dt (== input_f32 without AMP)
    int32_t *labels;       // (max_batch)
    void *stem_a, *stem_b, *stem_pool;  // stem conv out, bn+relu out, maxpool out
    void *pooled;          // (max_batch, fc_in) act_dt
    void *logits;          // (max_batch, classes) act_dt
    void *dlogits;         // (max_batch, classes) act_dt
    void *dpooled;         // (max_batch, fc_in) act_dt
    float *loss;           // (1) fp32 mean loss of the last forward
    void *d_top;           // (max_batch, final_hw, fc_in) the last block's output gradient
    void *d_stem_b, *d_stem_a;  // stem gradients: maxpool's input, then bn's input
    void *arena;           // one allocation holding every per-batch buffer above (arena.h)
    size_t arena_bytes;    // its size (= model_activation_bytes)
    int arena_no_reuse;    // set before model_alloc: every buffer its own bytes, each as large as the largest
                           // tensor (tests compare the layouts)
} Model;

// Builds the registry and shapes only (no backend memory): enough for --dry-run's summary.
// cfg must be validated (config_load applies the presets).
void model_init_shapes(Model *m, const ModelConfig *cfg, int max_batch, int amp);
// Allocates backend memory and initialises weights like torchvision (kaiming normal fan_out for convs,
// BN weight 1 bias 0, nn.Linear's default for fc) from `seed`.
void model_alloc(Model *m, Backend *be, uint64_t seed);
void model_free(Model *m, Backend *be);

// Bytes of the arena model_alloc makes for every per-batch buffer (activations, gradients, input).
size_t model_activation_bytes(Model *m);
// Multiply-adds per image of the forward pass (convolutions and the classifier).
double model_macs_per_image(const Model *m);

// Forward on the first n images of m->input; train=1 uses batch statistics and updates running stats.
// Result: m->logits (n, classes).
void model_forward(Model *m, Backend *be, int n, int train);
// Softmax cross-entropy of m->logits against m->labels: m->loss, and m->dlogits seeded with
// (*scale) * seed_factor (scale: device pointer, NULL = 1).
void model_loss(Model *m, Backend *be, int n, const float *scale, float seed_factor);
// Backward from m->dlogits into m->grads (accumulate=1 adds to what is there). ready() is called for
// every parameter as soon as its gradient is final, in the order of the flat layout.
void model_backward(Model *m, Backend *be, int n, int accumulate, GradReadyFn ready, void *ctx);

// Refreshes the compute copy from the masters (after load/init; the optimizer does it every step).
void model_refresh_compute(Model *m, Backend *be);


#endif

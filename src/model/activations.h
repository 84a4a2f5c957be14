// activations.h - every per-step buffer of a ResNeXt at one batch size, carved from one arena.
//
// The Model (resnext.h) owns the parameters; an Activations owns everything one step writes besides
// them: the static input batch, every activation backward reads, the gradients flowing down the network,
// the logits, the loss and batch norm's batch statistics. One is made per batch size; training steps,
// evaluation and the captured CUDA graph all use the same one, so the graph's addresses hold for the run.
//
// Ownership by stream (CUDA): only the compute stream touches an Activations' memory, in step order, so
// the arena needs no events. Uploads on the copy stream land in the trainer's input slots (train/trainer.h),
// never here; the compute stream copies a slot into `images` at the start of a step. The communicator's
// stream touches only the Model's gradient buffer.
//
// Layout: forward activations are appended in forward order: the raw images' normalised copy, the head's
// small buffers, the stem, then block by block. Backward runs the blocks last to first, so while block i's
// backward runs nothing at or above block_start[i+1] is read again: block i's gradients (its input's
// gradient d_in and the temporary d_tmp, clear of block i+1's d_in they read) are placed there, and only
// the last block's gradients make the arena larger than the forward's activations. Short-lived buffers
// (the raw images, a downsample's bn output) sit above the layers that are not yet written while they live.
// So do b1 and b2 of the first model.recompute_bn_blocks blocks: backward recomputes them
// (bn_forward_saved) into the same place, above the next block, clear of the gradients in use.
#ifndef AMPTRAIN_ACTIVATIONS_H
#define AMPTRAIN_ACTIVATIONS_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "model/resnext.h"

// Block i's buffers, (n, h, w, c) in act_dt. Shapes as the ModelBlock's layers say.
typedef struct BlockActs {
    void *a1, *b1;   // conv1 output, bn1+relu output        (n, h_in, w_in, width); b1, b2 short-lived
                     // when the block recomputes them (model_block_recomputes_bn)
    void *a2, *b2;   // conv2 output, bn2+relu output        (n, h_out, w_out, width)
    void *a3, *out;  // conv3 output, bn3+add+relu output    (n, h_out, w_out, 4*planes)
    void *down_a;    // downsample conv output                 (n, h_out, w_out, 4*planes)
    void *down_b;    // its bn output: only bn3's forward reads it (short-lived)
    void *d_in;      // (n, h_in, w_in, c_in) gradient of the block's input (the previous block's output)
    void *d_tmp;     // (largest of a1, a2, a3) the gradient inside the block
} BlockActs;

typedef struct Activations {
    int max_batch;
    uint8_t *images;  // (max_batch, side, side, 3) u8: the static raw batch (the graph reads it here)
    int32_t *labels;  // (max_batch) the static labels
    void *input;      // (max_batch, side, side, 3) dt: the normalised batch the stem reads (and its backward)
    void *stem_a, *stem_b, *stem_pool;  // stem conv out, bn+relu out, maxpool out
    BlockActs *blocks;                  // (n_blocks)
    void *pooled;                       // (max_batch, fc_in) dt
    void *logits;                       // (max_batch, classes) dt
    void *dlogits;                      // (max_batch, classes) dt
    void *dpooled;                      // (max_batch, fc_in) dt
    void *d_top;                        // (max_batch, final_hw, fc_in) the last block's output gradient
    void *d_stem_b, *d_stem_a;          // stem gradients: maxpool's input, then bn's input
    float *saved;  // (stats_numel) fp32 BN batch mean / invstd of the last training forward
    float *loss;   // (1) fp32 mean loss of the last forward
    void *arena;   // one allocation holding every buffer above except saved and loss
    size_t arena_bytes;
    int no_reuse;          // set before activations_alloc: every buffer its own bytes, each as large as the
                           // largest tensor (tests compare the layouts)
    size_t reserve_bytes;  // set before activations_alloc: the arena is at least this large (a layout that
                           // shares it, activations_share, may need more)
} Activations;

// Bytes of the arena for this model at max_batch (--dry-run's estimate; activations_alloc agrees).
size_t activations_arena_bytes(const Model *m, int max_batch);
// Lays out and allocates the buffers; a->no_reuse may be set before (the rest of *a is overwritten).
void activations_alloc(Activations *a, const Model *m, Backend *be, int max_batch);
// Lays out a's buffers for m at max_batch inside host's arena (at least activations_arena_bytes(m,
// max_batch), host->reserve_bytes), sharing host's labels, loss and saved statistics: for passes that never
// overlap host's (evaluation of a model view at another side). a owns none of the memory; activations_free
// frees only its list of blocks.
void activations_share(Activations *a, const Model *m, int max_batch, const Activations *host);
void activations_free(Activations *a, Backend *be);

#endif

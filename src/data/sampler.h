// sampler.h - which sample indices each rank reads at each (epoch, step, micro-step).
//
// Like torch's DistributedSampler, every rank computes the same epoch order on its own (no
// communication): a Fisher-Yates shuffle of 0..size-1 driven by the stream keyed (seed,
// DATA_STREAM_SHUFFLE, epoch) (data_rng.h). Then the ORDER RULE:
//
//   The epoch's order is cut into consecutive blocks of b samples (b = per-rank batch). With A = accum
//   steps and W = ranks, optimizer step s, micro-step m (0..A-1), rank r reads block
//       k = (s*A + m)*W + r,   i.e. order[k*b .. min(k*b + b, size)).
//   steps_per_epoch = ceil(size / (b*W*A)). In the final step of an epoch the remaining samples fill
//   the blocks in that order, so the blocks after them are short or empty (count 0). Over an epoch the
//   blocks cover every sample exactly once; no sample is dropped or repeated.
//   With drop_last (data.drop_last), steps_per_epoch = floor(size / (b*W*A)): every step is full and
//   the last size mod (b*W*A) samples of each epoch's order are not read (a different set each epoch).
//
// A step is the consecutive slice order[s*G .. min(s*G + G, size)), G = b*W*A, whatever the split into
// ranks and micro-steps. So W ranks x batch b and 1 rank x batch b x accum W read the same samples in
// the same step. The trainer seeds the loss with 1/sampler_step_total (the step's global count), which
// is b*W*A except in a partial last step.
//
// Validation: rank r evaluates indices r, r+W, r+2W, ... of the validation set, in order, unshuffled;
// every sample once over all ranks.
//
// Repeated augmentation (data.repeated_aug = R > 1, torchvision's RASampler): the epoch reads
// epoch_size = floor(size / 256) * 256 entries (RASampler's num_selected_samples times W, for any W)
// of a longer order: the permutation cut into chunks of b samples, each chunk read R times in a row as
// R consecutive blocks, repetition j of it being block j. So the R blocks of a chunk go to R consecutive
// ranks (then micro-steps) of the same step, each rank its own repetition, as RASampler spreads a
// sample's repetitions over ranks; and a step is still the same slice of one order for any W and A.
// Each entry carries its repetition number (sampler_block_repetitions), which keys its augmentation.
//
// Resume: a checkpoint stores the epoch and the samples of it already consumed (sampler_samples_before).
// sampler_resume maps that onto any (W, b, A): exact when the consumed count is a whole number of the
// new global batch (always so with the same W, b, A), otherwise the run continues at the next epoch.
#ifndef AMPTRAIN_SAMPLER_H
#define AMPTRAIN_SAMPLER_H

#include <stdint.h>

typedef struct Sampler {
    int size;         // samples in the dataset
    int repeats;      // R: readings of a sample in an epoch (1: each once)
    int epoch_size;   // entries an epoch reads: size, or floor(size / 256) * 256 with repeats
    int batch;        // b: samples per rank per micro-step
    int world, rank;  // W, r
    int accum;        // A: micro-steps per optimizer step
    int drop_last;    // 1: no partial last step (its samples are skipped)
    uint64_t seed;
    int32_t *order;   // (size) int32: the permutation of `order_epoch`, made on first use
    int order_epoch;  // -1: none yet
} Sampler;

void sampler_init(Sampler *s, int size, int batch, int world, int rank, int accum, int drop_last, long seed);
void sampler_free(Sampler *s);

// Repeated augmentation with repeats R >= 1 (1: off), set after sampler_init; R at most 255.
void sampler_set_repeats(Sampler *s, int repeats);

// ceil(epoch_size / (batch * world * accum)); floor with drop_last (0 when epoch_size < one global batch).
int sampler_steps_per_epoch(const Sampler *s);

// How many samples rank `rank` reads at (step, micro) of every epoch: batch, less or 0 in a partial
// last step.
int sampler_block_count(const Sampler *s, int step, int micro, int rank);

// Samples in one optimizer step over all ranks: batch*world*accum, less in a partial last step.
int sampler_step_total(const Sampler *s, int epoch, int step);

// This rank's block for (epoch, step, micro): writes up to `batch` indices to indices_out and returns
// how many (0 when the partial last step has nothing left for it).
int sampler_block(Sampler *s, int epoch, int step, int micro, int32_t *indices_out);
// The repetition number of each entry of that block (0 without repeats), the same count.
int sampler_block_repetitions(const Sampler *s, int step, int micro, uint8_t *repetitions_out);

// order_out (size) int32: the epoch's permutation, the same on every rank.
void sampler_epoch_order(const Sampler *s, int epoch, int32_t *order_out);

// Samples of an epoch consumed by steps 0..step-1 (what a checkpoint stores with the epoch).
long sampler_samples_before(const Sampler *s, int step);

// Where to continue after `samples_done` samples of `epoch` were consumed, with this sampler's W, b, A:
// sets (*epoch_out, *step_out) and returns 1 when that continues the same sample order exactly, or 0
// when samples_done is not a multiple of this sampler's global batch and the run skips to the start of
// the next epoch (the rest of the interrupted epoch is not seen).
int sampler_resume(const Sampler *s, int epoch, long samples_done, int *epoch_out, int *step_out);

// Validation sharding over `size` samples: how many rank r evaluates, and its j-th batch of up to
// `batch` indices (r + (j*batch + i)*W); returns the count written.
int sampler_val_count(int size, int world, int rank);
int sampler_val_block(int size, int world, int rank, int batch, int j, int32_t *indices_out);

#endif

// data_rng.h - how the data pipeline keys its random streams (the generator is core/rng.h's).
//
// Every random choice in src/data is a pure function of a few integers (seed, purpose, epoch or split,
// sample index), never of a generator's history: that is what makes a sample identical on every rank,
// on the loader thread and on the caller's thread, and after a resume. data_rng_seed packs the integers
// into core/rng.h's stream id, so distinct keys give independent streams.
#ifndef AMPTRAIN_DATA_RNG_H
#define AMPTRAIN_DATA_RNG_H

#include <stdint.h>

#include "core/rng.h"

// Purposes keep the uses of one seed apart (a shuffle never reuses a crop's numbers).
enum {
    DATA_STREAM_SHUFFLE = 1,   // sampler: the epoch's permutation, key (epoch, 0)
    DATA_STREAM_AUGMENT = 2,   // a training sample's crop, flip and augmentation, key (epoch, index); the
                               // r-th repetition (data.repeated_aug) key (epoch + r * 2^20, index)
    DATA_STREAM_SAMPLE = 3,    // synthetic/learnable: label and pool window, key (split, index)
    DATA_STREAM_POOL = 4,      // synthetic/learnable: the pool of N(0,1) values, key (0, 0)
    DATA_STREAM_TEMPLATE = 5,  // learnable: class c's template parameters, key (0, c)
    DATA_STREAM_MIX = 6,       // MixUp/CutMix of a rank's micro-batch, key (step, rank * 2^10 + micro-batch)
};

// stream = purpose (4 bits) | a (28 bits: epochs and splits stay far below 2^28) | b (32 bits: index).
static inline void data_rng_seed(Rng *r, uint64_t seed, int purpose, uint32_t a, uint32_t b) {
    uint64_t stream = ((uint64_t)purpose << 60) | ((uint64_t)(a & 0x0FFFFFFFu) << 32) | b;
    rng_seed(r, seed, stream);
}

// The stream of repetition `repetition` (0: the sample's first or only reading in the epoch) of sample
// `index` in `epoch`: repetitions of a sample are augmented independently. epoch < 2^20 when repetition > 0.
#define DATA_REPEAT_SHIFT 20
static inline void data_rng_sample(Rng *r, uint64_t seed, int epoch, int repetition, uint32_t index) {
    data_rng_seed(r, seed, DATA_STREAM_AUGMENT, (uint32_t)epoch + ((uint32_t)repetition << DATA_REPEAT_SHIFT),
                  index);
}

#endif

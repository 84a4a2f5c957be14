// data_rng.h - the counter-based random numbers of the data pipeline.
//
// Every random choice in src/data is a pure function of a few integers (seed, epoch, sample index,
// stream), never of a generator's history: that is what makes a sample identical on every rank, on the
// loader thread and on the caller's thread, and after a resume. data_rng_for hashes the integers into a
// starting state; the stream is then splitmix64 (64-bit state, full period, passes BigCrush), which is
// plenty for shuffles, crops and noise.
#ifndef AMPTRAIN_DATA_RNG_H
#define AMPTRAIN_DATA_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct DataRng {
    uint64_t state;
} DataRng;

// Stream ids keep the uses of one seed apart (a shuffle never reuses a crop's numbers).
enum {
    DATA_STREAM_SHUFFLE = 1,    // sampler: the epoch's permutation
    DATA_STREAM_AUGMENT = 2,    // per-sample crop offsets and flip
    DATA_STREAM_LABEL = 3,      // synthetic/learnable: the label of sample i
    DATA_STREAM_WINDOW = 4,     // synthetic/learnable: where sample i's values start in the pool
    DATA_STREAM_POOL = 5,       // synthetic/learnable: the pool of N(0,1) values
    DATA_STREAM_TEMPLATE = 6,   // learnable: the class templates
};

static inline uint64_t data_rng_next(DataRng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A generator whose numbers depend only on (a, b, c): each word is folded in through a splitmix64 step,
// so neighbouring inputs (index i and i+1) give unrelated streams.
static inline DataRng data_rng_for(uint64_t a, uint64_t b, uint64_t c) {
    DataRng r = {a};
    r.state = data_rng_next(&r) ^ b;
    r.state = data_rng_next(&r) ^ c;
    r.state = data_rng_next(&r);
    return r;
}

// Uniform integer in [0, n), n >= 1, without modulo bias (rejects the short top slice of 2^64).
static inline uint64_t data_rng_below(DataRng *r, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = data_rng_next(r);
    } while (x >= limit);
    return x % n;
}

// Uniform double in (0, 1): 53 random bits, never 0 so log() below is finite.
static inline double data_rng_uniform(DataRng *r) {
    return ((double)(data_rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

// Standard normal (Box-Muller, one value per call: simple, and cost does not matter where it is used).
static inline float data_rng_normal(DataRng *r) {
    double u1 = data_rng_uniform(r), u2 = data_rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif

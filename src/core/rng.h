// rng.h - the one random-number generator of the host code: splitmix64-seeded xoshiro256**.
// Deterministic across machines and builds, so every rank draws identical streams from identical seeds,
// and a checkpoint can store the state (4 x u64) and resume bit-exactly.
#ifndef AMPTRAIN_RNG_H
#define AMPTRAIN_RNG_H

#include <stdint.h>

typedef struct Rng {
    uint64_t s[4];
} Rng;

// Seeds from a 64-bit seed and a stream id (e.g. epoch or sample index): independent streams.
void rng_seed(Rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next_u64(Rng *r);
// Uniform in [0, 1) with 24 random bits.
float rng_uniform(Rng *r);
// Uniform integer in [0, bound).
uint32_t rng_below(Rng *r, uint32_t bound);
// Standard normal (Box-Muller, double precision inside).
float rng_normal(Rng *r);

#endif

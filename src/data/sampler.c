// sampler.c - the epoch shuffle and the order rule of sampler.h.
#include "data/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/data_rng.h"

void sampler_init(Sampler *s, int size, int batch, int world, int rank, int accum, int drop_last, long seed) {
    AMP_ASSERT(size > 0 && batch > 0 && accum > 0, "sampler: size %d, batch %d, accum %d must be positive",
               size, batch, accum);
    AMP_ASSERT(world > 0 && rank >= 0 && rank < world, "sampler: rank %d of %d", rank, world);
    memset(s, 0, sizeof *s);
    s->size = size;
    s->batch = batch;
    s->world = world;
    s->rank = rank;
    s->accum = accum;
    s->drop_last = drop_last != 0;
    s->seed = (uint64_t)seed;
    s->order_epoch = -1;
    s->repeats = 1;
    s->epoch_size = size;
}

// RASampler's num_selected_samples over all ranks.
#define RA_MULTIPLE 256

void sampler_set_repeats(Sampler *s, int repeats) {
    AMP_ASSERT(repeats >= 1 && repeats <= 255, "sampler: %d repeats outside 1..255", repeats);
    s->repeats = repeats;
    s->epoch_size = repeats > 1 ? s->size / RA_MULTIPLE * RA_MULTIPLE : s->size;
}

void sampler_free(Sampler *s) {
    free(s->order);
    s->order = NULL;
    s->order_epoch = -1;
}

static long sampler_global_batch(const Sampler *s) { return (long)s->batch * s->world * s->accum; }

int sampler_steps_per_epoch(const Sampler *s) {
    long g = sampler_global_batch(s);
    return (int)(s->drop_last ? s->epoch_size / g : (s->epoch_size + g - 1) / g);
}

int sampler_block_count(const Sampler *s, int step, int micro, int rank) {
    long start = (((long)step * s->accum + micro) * s->world + rank) * s->batch;
    if (start >= s->epoch_size) return 0;
    return s->epoch_size - start < s->batch ? (int)(s->epoch_size - start) : s->batch;
}

long sampler_samples_before(const Sampler *s, int step) {
    long done = (long)step * sampler_global_batch(s);
    return done < s->epoch_size ? done : s->epoch_size;
}

int sampler_step_total(const Sampler *s, int epoch, int step) {
    (void)epoch;  // every epoch has the same size; the argument keeps call sites explicit
    AMP_ASSERT(step >= 0 && step < sampler_steps_per_epoch(s), "sampler: step %d of %d", step,
               sampler_steps_per_epoch(s));
    return (int)(sampler_samples_before(s, step + 1) - sampler_samples_before(s, step));
}

void sampler_epoch_order(const Sampler *s, int epoch, int32_t *order_out) {
    for (int i = 0; i < s->size; i++) order_out[i] = i;
    Rng rng;
    data_rng_seed(&rng, s->seed, DATA_STREAM_SHUFFLE, (uint32_t)epoch, 0);
    for (int i = s->size - 1; i > 0; i--) {
        int j = (int)rng_below(&rng, (uint32_t)i + 1);
        int32_t t = order_out[i];
        order_out[i] = order_out[j];
        order_out[j] = t;
    }
}

// Entry p of a repeated epoch: the position in the permutation it reads, and its repetition. Chunk c holds
// permutation positions [c*b, c*b + q) (q = b, less in the permutation's last chunk) as R blocks of q.
static long repeated_position(const Sampler *s, long p, int *repetition) {
    long chunk_entries = (long)s->repeats * s->batch;
    long c = p / chunk_entries, within = p % chunk_entries, first = c * s->batch;
    long q = s->size - first < s->batch ? s->size - first : s->batch;
    *repetition = (int)(within / q);
    return first + within % q;
}

int sampler_block(Sampler *s, int epoch, int step, int micro, int32_t *indices_out) {
    AMP_ASSERT(epoch >= 0 && step >= 0 && step < sampler_steps_per_epoch(s) && micro >= 0 && micro < s->accum,
               "sampler: no block at epoch %d step %d micro %d (%d steps, %d micro-steps)", epoch, step,
               micro, sampler_steps_per_epoch(s), s->accum);
    if (s->order_epoch != epoch) {
        if (!s->order) s->order = xcalloc((size_t)s->size, sizeof(int32_t));
        sampler_epoch_order(s, epoch, s->order);
        s->order_epoch = epoch;
    }
    long start = (((long)step * s->accum + micro) * s->world + s->rank) * s->batch;
    int count = sampler_block_count(s, step, micro, s->rank);
    if (s->repeats == 1) {
        if (count > 0) memcpy(indices_out, s->order + start, (size_t)count * sizeof(int32_t));
        return count;
    }
    for (int k = 0; k < count; k++) {
        int repetition;
        indices_out[k] = s->order[repeated_position(s, start + k, &repetition)];
    }
    return count;
}

int sampler_block_repetitions(const Sampler *s, int step, int micro, uint8_t *repetitions_out) {
    long start = (((long)step * s->accum + micro) * s->world + s->rank) * s->batch;
    int count = sampler_block_count(s, step, micro, s->rank);
    for (int k = 0; k < count; k++) {
        int repetition = 0;
        if (s->repeats > 1) repeated_position(s, start + k, &repetition);
        repetitions_out[k] = (uint8_t)repetition;
    }
    return count;
}

int sampler_resume(const Sampler *s, int epoch, long samples_done, int *epoch_out, int *step_out) {
    long g = sampler_global_batch(s);
    if (samples_done >= s->epoch_size) {
        *epoch_out = epoch + 1;
        *step_out = 0;
        return 1;
    }
    if (samples_done % g == 0) {
        long step = samples_done / g;
        int next_epoch = step >= sampler_steps_per_epoch(s);  // drop_last: only the skipped tail was left
        *epoch_out = next_epoch ? epoch + 1 : epoch;
        *step_out = next_epoch ? 0 : (int)step;
        return 1;
    }
    *epoch_out = epoch + 1;
    *step_out = 0;
    return 0;
}

int sampler_val_count(int size, int world, int rank) {
    return rank < size ? (size - rank + world - 1) / world : 0;
}

int sampler_val_block(int size, int world, int rank, int batch, int j, int32_t *indices_out) {
    int n = sampler_val_count(size, world, rank);
    int count = 0;
    for (long i = (long)j * batch; i < n && count < batch; i++)
        indices_out[count++] = (int32_t)(rank + i * world);
    return count;
}

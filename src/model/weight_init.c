#include "model/weight_init.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/cpus.h"
#include "core/rng.h"

// More threads than this only add start-up cost for the largest presets (a few hundred chunks).
#define WEIGHT_INIT_MAX_THREADS 16

typedef struct Chunk {
    int param;
    size_t begin, end;  // values [begin, end) of the parameter
    uint64_t index;     // the chunk's number within its parameter
} Chunk;

typedef struct Draw {
    const Model *m;
    float *master;
    uint64_t seed;
    const Chunk *chunks;
    size_t n_chunks;
    atomic_size_t next;
} Draw;

static void draw_chunk(const Draw *d, const Chunk *c) {
    const ParamInfo *p = &d->m->params.items[c->param];
    float *dst = d->master + p->offset;
    Rng rng;
    rng_seed(&rng, d->seed ^ 0x1417, ((uint64_t)c->param << 32) | c->index);
    switch (p->kind) {
    case PARAM_CONV_WEIGHT: {
        // torchvision's shape (c_out, c_in / groups, kh, kw): fan_out = c_out * kh * kw
        const double fan_out = (double)p->shape[0] * p->shape[2] * p->shape[3];
        const float std = (float)sqrt(2.0 / fan_out);
        for (size_t k = c->begin; k < c->end; k++) dst[k] = std * rng_normal(&rng);
        break;
    }
    case PARAM_BN_WEIGHT:
        for (size_t k = c->begin; k < c->end; k++) dst[k] = 1.0f;
        break;
    case PARAM_BN_BIAS: break;
    case PARAM_FC_WEIGHT:
    case PARAM_FC_BIAS: {
        const float bound = 1.0f / sqrtf((float)d->m->fc_in);
        for (size_t k = c->begin; k < c->end; k++) dst[k] = bound * (2.0f * rng_uniform(&rng) - 1.0f);
        break;
    }
    }
}

static void *draw_worker(void *arg) {
    Draw *d = arg;
    for (size_t i; (i = atomic_fetch_add(&d->next, 1)) < d->n_chunks;) draw_chunk(d, &d->chunks[i]);
    return NULL;
}

void weight_init_draw(const Model *m, float *master, uint64_t seed, int threads) {
    size_t n = 0;
    for (int i = 0; i < m->params.count; i++)
        n += (m->params.items[i].numel + WEIGHT_INIT_CHUNK - 1) / WEIGHT_INIT_CHUNK;
    Chunk *chunks = xcalloc(n ? n : 1, sizeof *chunks);
    n = 0;
    for (int i = 0; i < m->params.count; i++)
        for (size_t b = 0, k = 0; b < m->params.items[i].numel; b += WEIGHT_INIT_CHUNK, k++) {
            const size_t e = b + WEIGHT_INIT_CHUNK;
            chunks[n++] = (Chunk){i, b, e < m->params.items[i].numel ? e : m->params.items[i].numel, k};
        }
    Draw d = {.m = m, .master = master, .seed = seed, .chunks = chunks, .n_chunks = n};
    atomic_init(&d.next, 0);
    if (threads <= 0) threads = cpus_usable();
    if (threads > WEIGHT_INIT_MAX_THREADS) threads = WEIGHT_INIT_MAX_THREADS;
    if ((size_t)threads > n) threads = n ? (int)n : 1;
    pthread_t helpers[WEIGHT_INIT_MAX_THREADS];
    int started = 0;
    for (; started < threads - 1; started++)
        if (pthread_create(&helpers[started], NULL, draw_worker, &d) != 0)
            break;  // fewer threads, same weights
    draw_worker(&d);
    for (int i = 0; i < started; i++) pthread_join(helpers[i], NULL);
    free(chunks);
}

#include "model/activations.h"

#include <stdlib.h>
#include <string.h>

#include "model/arena.h"
#include "core/check.h"

// Elements per image at a layer's input and output (the model's shapes are per image: n = 1).
static size_t conv_in_elems(const ConvShape *s) { return (size_t)s->h * s->w * s->c_in; }
static size_t conv_out_elems(const ConvShape *s) { return (size_t)s->out_h * s->out_w * s->c_out; }

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

// Elements per image of the buffer holding block b's output gradient: block_backward reuses it, once
// bn3's backward has read it, for the downsample's and then conv3's and conv2's data gradients.
static size_t block_dout_elems(const ModelBlock *b) {
    return max3(conv_out_elems(&b->conv3.shape), conv_out_elems(&b->conv2.shape),
                conv_out_elems(&b->conv1.shape));
}

typedef struct PlannedBuffer {
    void **slot;
    ArenaSpan span;
} PlannedBuffer;
#define ACTIVATION_PLAN_MAX(m) (24 + 12 * (m)->n_blocks)

static ArenaSpan plan_add(PlannedBuffer *plan, int *count, int cap, void **slot, ArenaSpan span) {
    AMP_ASSERT(*count < cap, "activation plan: more than %d buffers", cap);
    plan[(*count)++] = (PlannedBuffer){slot, span};
    return span;
}

// Every buffer of the arena and its place (see activations.h), so allocation and --dry-run agree by
// construction. Returns the number of buffers in plan.
static int activation_plan(const Model *m, Activations *a, PlannedBuffer *plan, ArenaLayout *arena) {
    int count = 0;
    size_t e = dtype_size(m->act_dt);
    *arena = (ArenaLayout){0};
    const int cap = ACTIVATION_PLAN_MAX(m);
#define KEEP(ptr, bytes) plan_add(plan, &count, cap, (void **)&(ptr), arena_append(arena, (bytes)))
// no_reuse (tests): each short-lived buffer gets bytes of its own, as large as the largest tensor, so
// that layout is right whatever the sizes computed here.
#define ABOVE(ptr, bytes, floor, busy, n_busy)                                                               \
    plan_add(plan, &count, cap, (void **)&(ptr),                                                             \
             a->no_reuse ? arena_append(arena, roomy)                                                        \
                         : arena_place_above(arena, (floor), (bytes), (busy), (n_busy)))
    size_t n = (size_t)a->max_batch;
    int side = m->cfg.image_size, classes = m->cfg.num_classes;
    size_t in_elems = n * side * side * 3;
    KEEP(a->input, in_elems * e);  // the stem's backward reads it
    KEEP(a->pooled, n * m->fc_in * e);
    KEEP(a->dpooled, n * m->fc_in * e);
    KEEP(a->logits, n * classes * e);
    KEEP(a->dlogits, n * classes * e);
    size_t stem_bytes = n * conv_out_elems(&m->stem.shape) * e;
    KEEP(a->stem_a, stem_bytes);
    KEEP(a->stem_b, stem_bytes);
    KEEP(a->stem_pool, n * conv_in_elems(&m->blocks[0].conv1.shape) * e);
    size_t roomy = in_elems > stem_bytes ? in_elems : stem_bytes;
    for (int i = 0; i < m->n_blocks; i++)
        roomy = max3(roomy, n * block_dout_elems(&m->blocks[i]) * e,
                     n * conv_in_elems(&m->blocks[i].conv1.shape) * e);
    size_t *block_start = xcalloc((size_t)m->n_blocks + 1, sizeof *block_start);
    for (int i = 0; i < m->n_blocks; i++) {
        const ModelBlock *b = &m->blocks[i];
        BlockActs *ba = &a->blocks[i];
        size_t b1 = n * conv_out_elems(&b->conv1.shape) * e, b2 = n * conv_out_elems(&b->conv2.shape) * e;
        size_t b3 = n * conv_out_elems(&b->conv3.shape) * e;
        block_start[i] = arena->appended;
        KEEP(ba->a1, b1);
        if (!model_block_recomputes_bn(m, i)) KEEP(ba->b1, b1);
        KEEP(ba->a2, b2);
        if (!model_block_recomputes_bn(m, i)) KEEP(ba->b2, b2);
        KEEP(ba->a3, b3), KEEP(ba->out, b3);
        if (b->has_down) KEEP(ba->down_a, b3);
    }
    block_start[m->n_blocks] = arena->appended;

    // the raw bytes: only the first op of the forward reads them, before block 0 is written
    ABOVE(a->images, in_elems, block_start[0], NULL, 0);
    for (int i = 0; i < m->n_blocks; i++)
        if (m->blocks[i].has_down)
            ABOVE(a->blocks[i].down_b, n * conv_out_elems(&m->blocks[i].conv3.shape) * e, block_start[i + 1],
                  NULL, 0);

    const ModelBlock *last = &m->blocks[m->n_blocks - 1];
    ArenaSpan dout = ABOVE(a->d_top, n * block_dout_elems(last) * e, block_start[m->n_blocks], NULL, 0);
    for (int i = m->n_blocks - 1; i >= 0; i--) {
        const ModelBlock *b = &m->blocks[i];
        size_t t = max3(conv_out_elems(&b->conv1.shape), conv_out_elems(&b->conv2.shape),
                        conv_out_elems(&b->conv3.shape));
        // d_in first holds the residual's gradient (with a downsample, the output's shape), then the
        // input's; then it is block i-1's output gradient buffer (block_dout_elems of that block)
        size_t d_in_elems = max3(conv_in_elems(&b->conv1.shape),
                                 b->has_down ? conv_out_elems(&b->conv3.shape) : 0,
                                 i > 0 ? block_dout_elems(&m->blocks[i - 1]) : 0);
        ArenaSpan d_in = ABOVE(a->blocks[i].d_in, n * d_in_elems * e, block_start[i + 1], &dout, 1);
        ArenaSpan busy[2] = {dout, d_in};
        ArenaSpan d_tmp = ABOVE(a->blocks[i].d_tmp, n * t * e, block_start[i + 1], busy, 2);
        if (model_block_recomputes_bn(m, i)) {
            // b1 and b2 live from their bn's forward to the next conv's forward, and in backward from
            // their recomputation to bn's backward: never both at once, and never with the block's
            // gradients' predecessors, so they may share one place, clear of the gradients in use then
            ArenaSpan grads[3] = {dout, d_in, d_tmp};
            ABOVE(a->blocks[i].b1, n * conv_out_elems(&b->conv1.shape) * e, block_start[i + 1], grads, 3);
            ABOVE(a->blocks[i].b2, n * conv_out_elems(&b->conv2.shape) * e, block_start[i + 1], grads, 3);
        }
        dout = d_in;
    }
    ArenaSpan d_stem_b = ABOVE(a->d_stem_b, stem_bytes, block_start[0], &dout, 1);
    ArenaSpan busy[2] = {dout, d_stem_b};
    ABOVE(a->d_stem_a, stem_bytes, block_start[0], busy, 2);
#undef KEEP
#undef ABOVE
    free(block_start);
    return count;
}

size_t activations_arena_bytes(const Model *m, int max_batch) {
    Activations a = {.max_batch = max_batch};
    a.blocks = xcalloc((size_t)m->n_blocks, sizeof *a.blocks);
    PlannedBuffer *plan = xcalloc((size_t)ACTIVATION_PLAN_MAX(m), sizeof *plan);
    ArenaLayout arena;
    activation_plan(m, &a, plan, &arena);
    free(plan);
    free(a.blocks);
    return arena.size;
}

// Lays a's buffers out for m at a->max_batch in `arena` (NULL: allocated here, at least reserve bytes);
// returns the arena.
static void *activations_place(Activations *a, const Model *m, Backend *be, void *arena, size_t reserve) {
    a->blocks = xcalloc((size_t)m->n_blocks, sizeof *a->blocks);
    PlannedBuffer *plan = xcalloc((size_t)ACTIVATION_PLAN_MAX(m), sizeof *plan);
    ArenaLayout layout;
    int count = activation_plan(m, a, plan, &layout);
    a->arena_bytes = layout.size > reserve ? layout.size : reserve;
    if (!arena) arena = be->alloc(be, a->arena_bytes);
    for (int i = 0; i < count; i++) *plan[i].slot = (char *)arena + plan[i].span.offset;
    free(plan);
    return arena;
}

void activations_share(Activations *a, const Model *m, int max_batch, const Activations *host) {
    memset(a, 0, sizeof *a);
    a->max_batch = max_batch;
    AMP_ASSERT(max_batch <= host->max_batch && activations_arena_bytes(m, max_batch) <= host->arena_bytes,
               "activations: %zu bytes at batch %d do not fit the %zu-byte arena",
               activations_arena_bytes(m, max_batch), max_batch, host->arena_bytes);
    activations_place(a, m, NULL, host->arena, 0);
    a->labels = host->labels;
    a->saved = host->saved;
    a->loss = host->loss;
}

void activations_alloc(Activations *a, const Model *m, Backend *be, int max_batch) {
    int no_reuse = a->no_reuse;
    size_t reserve = a->reserve_bytes;
    memset(a, 0, sizeof *a);
    a->no_reuse = no_reuse;
    a->reserve_bytes = reserve;
    a->max_batch = max_batch;
    a->arena = activations_place(a, m, be, NULL, reserve);
    a->labels = be->alloc(be, (size_t)max_batch * sizeof(int32_t));
    a->saved = be->alloc(be, m->stats_numel * sizeof(float));
    be->zero(be, a->saved, m->stats_numel * sizeof(float));
    a->loss = be->alloc(be, sizeof(float));
}

void activations_free(Activations *a, Backend *be) {
    if (a->arena) {
        void *bufs[] = {a->arena, a->labels, a->saved, a->loss};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) be->free(be, bufs[k]);
    }
    free(a->blocks);
    memset(a, 0, sizeof *a);
}

// test_model.c - the model on its own, CPU backend: the arena layout (no gradient buffer ever overlaps
// a tensor backward still reads) and the gradients it gives, bitwise the same as without any reuse; a view
// at another side evaluating in the training arena, bitwise as a model built at that side.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "config/config.h"
#include "model/activations.h"
#include "model/arena.h"
#include "model/resnext.h"
#include "model/weight_init.h"
#include "tests/test_util.h"

// Several blocks per stage, identity and downsample shortcuts, a downsample whose output is larger than
// its block's input.
#define UNEVEN_MODEL                                                                                         \
    "model.arch=custom", "model.layers=[2,1,3,2]", "model.planes=8", "model.base_width=8",                   \
        "model.cardinality=2", "model.image_size=32"

// One block per stage, groups wider than the block's output (width 4x planes): every conv2/conv1 data
// gradient is larger than the block's output. And the same idea with the widths of ResNeXt's 64x4d
// scaled down.
#define WIDE_MODEL                                                                                           \
    "model.arch=custom", "model.layers=[1,1,1,1]", "model.planes=16", "model.base_width=8",                  \
        "model.cardinality=16", "model.image_size=32"
#define WIDER_MODEL                                                                                          \
    "model.arch=custom", "model.layers=[2,1,1,1]", "model.planes=8", "model.base_width=8",                   \
        "model.cardinality=64", "model.image_size=32"

// ---- arena ------------------------------------------------------------------------------------------

START_TEST(test_arena_places_first_fit_above_the_floor) {
    ArenaLayout a = {0};
    ArenaSpan x = arena_append(&a, 100), y = arena_append(&a, 1000);
    ck_assert_uint_eq(x.offset, 0);
    ck_assert_uint_eq(y.offset, ARENA_ALIGN);  // aligned after x
    ck_assert_uint_eq(a.appended, ARENA_ALIGN + 4 * ARENA_ALIGN);
    // above y's start, clear of y itself: lands at y's aligned end and grows the arena
    ArenaSpan z = arena_place_above(&a, y.offset, 10, &y, 1);
    ck_assert_uint_eq(z.offset, a.appended);
    ck_assert_uint_eq(a.size, a.appended + ARENA_ALIGN);
    // busy spans in any order are all avoided; a gap between them that fits is used
    const size_t A = ARENA_ALIGN;
    ArenaSpan busy[2] = {{4 * A, 10}, {0, 2 * A + 1}};
    size_t size = a.size;
    ArenaSpan gap = arena_place_above(&a, 0, A, busy, 2);
    ck_assert_uint_eq(gap.offset, 3 * A);
    ck_assert_uint_eq(a.size, size);                            // inside what the arena already had
    ArenaSpan past = arena_place_above(&a, 0, 2 * A, busy, 2);  // [3A, 5A) would cover busy[0]
    ck_assert_uint_eq(past.offset, 5 * A);
    ck_assert_uint_eq(a.size, 7 * A);
    ck_assert(arena_spans_overlap((ArenaSpan){0, 10}, (ArenaSpan){9, 1}));
    ck_assert(!arena_spans_overlap((ArenaSpan){0, 10}, (ArenaSpan){10, 1}));
    ck_assert(!arena_spans_overlap((ArenaSpan){0, 10}, (ArenaSpan){5, 0}));
}
END_TEST

// ---- the model's arena ------------------------------------------------------------------------------

// The model, its activations at batch 2, and the backend both live on.
typedef struct Laid {
    Model m;
    Activations a;
    Backend *be;
} Laid;

static ArenaSpan span_of(const Laid *l, const void *p, size_t bytes) {
    return (ArenaSpan){(size_t)((const char *)p - (const char *)l->a.arena), bytes};
}

static size_t out_bytes(const Laid *l, const ConvLayer *c) {
    return (size_t)l->a.max_batch * c->shape.out_h * c->shape.out_w * c->shape.c_out *
           dtype_size(l->m.act_dt);
}

static size_t in_bytes(const Laid *l, const ConvLayer *c) {
    return (size_t)l->a.max_batch * c->shape.h * c->shape.w * c->shape.c_in * dtype_size(l->m.act_dt);
}

// The end of everything backward reads while block `i`'s backward runs: the activations up to and
// including that block's (they are laid out in forward order).
static size_t live_end(const Laid *l, int i) {
    const ModelBlock *b = &l->m.blocks[i];
    const BlockActs *ba = &l->a.blocks[i];
    size_t end = span_of(l, ba->out, 0).offset + out_bytes(l, &b->conv3);
    if (b->has_down) {
        size_t down_end = span_of(l, ba->down_a, 0).offset + out_bytes(l, &b->down);
        if (down_end > end) end = down_end;
    }
    return end;
}

static void assert_clear(ArenaSpan s, size_t live, const char *what, int block) {
    ck_assert_msg(s.offset >= live, "%s of block %d starts at %zu, below the live activations' end %zu", what,
                  block, s.offset, live);
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

// What block_backward writes into its output-gradient buffer after bn3's backward read it: the
// downsample's gradient (output shape), conv3's (b2's shape) and conv2's (b1's shape) data gradients.
static size_t dout_need(const Laid *l, const ModelBlock *b) {
    return max3(out_bytes(l, &b->conv3), out_bytes(l, &b->conv2), out_bytes(l, &b->conv1));
}

// For every block, with each buffer as large as the largest tensor block_backward writes into it: d_in,
// d_tmp and the output gradient they read are disjoint, sit above every activation that block's backward
// (and every later one) still reads, and end inside the arena; the forward temporaries sit above what is
// alive when they are. Checked on ResNeXt-50 (AMP and fp32) and on models with uneven stages and wide
// groups.
static void check_layout(const char *const *overrides, DType amp_dt) {
    Config cfg;
    tu_config(&cfg, overrides);
    Laid l = {.be = cpu_backend_create()};
    model_init_shapes(&l.m, &cfg.model, amp_dt);
    model_alloc(&l.m, l.be, 1);
    activations_alloc(&l.a, &l.m, l.be, 2);
    ck_assert_uint_eq(l.a.arena_bytes, activations_arena_bytes(&l.m, 2));  // --dry-run agrees
    const size_t arena_end = l.a.arena_bytes;
    const ModelBlock *last = &l.m.blocks[l.m.n_blocks - 1];
    ArenaSpan dout = span_of(&l, l.a.d_top, dout_need(&l, last));
    size_t grads_above_activations = 0, activations_end = live_end(&l, l.m.n_blocks - 1);
    for (int i = l.m.n_blocks - 1; i >= 0; i--) {
        const ModelBlock *b = &l.m.blocks[i];
        const BlockActs *ba = &l.a.blocks[i];
        dout.bytes = dout_need(&l, b);
        size_t t = max3(out_bytes(&l, &b->conv1), out_bytes(&l, &b->conv2), out_bytes(&l, &b->conv3));
        size_t d_in_bytes = in_bytes(&l, &b->conv1);  // holds the residual's gradient first
        if (b->has_down && out_bytes(&l, &b->conv3) > d_in_bytes) d_in_bytes = out_bytes(&l, &b->conv3);
        ArenaSpan d_in = span_of(&l, ba->d_in, d_in_bytes), d_tmp = span_of(&l, ba->d_tmp, t);
        assert_clear(dout, live_end(&l, i), "output gradient", i);
        assert_clear(d_in, live_end(&l, i), "d_in", i);
        assert_clear(d_tmp, live_end(&l, i), "d_tmp", i);
        ck_assert_msg(!arena_spans_overlap(d_in, dout) && !arena_spans_overlap(d_tmp, dout) &&
                          !arena_spans_overlap(d_in, d_tmp),
                      "block %d: its gradient buffers overlap", i);
        if (b->has_down)
            assert_clear(span_of(&l, ba->down_b, out_bytes(&l, &b->down)), live_end(&l, i), "down_b", i);
        if (model_block_recomputes_bn(&l.m, i)) {  // b1, b2 recomputed in backward while the gradients live
            ArenaSpan b1 = span_of(&l, ba->b1, out_bytes(&l, &b->conv1)),
                      b2 = span_of(&l, ba->b2, out_bytes(&l, &b->conv2));
            ArenaSpan grads[3] = {dout, d_in, d_tmp}, mine[2] = {b1, b2};
            for (int k = 0; k < 2; k++) {
                assert_clear(mine[k], live_end(&l, i), k ? "b2" : "b1", i);
                ck_assert(mine[k].offset + mine[k].bytes <= arena_end);
                for (int g = 0; g < 3; g++)
                    ck_assert_msg(!arena_spans_overlap(mine[k], grads[g]),
                                  "block %d: recomputed b%d overlaps gradient %d", i, k + 1, g);
            }
        }
        ArenaSpan spans[3] = {dout, d_in, d_tmp};
        for (int k = 0; k < 3; k++) {
            size_t end = spans[k].offset + spans[k].bytes;
            ck_assert_msg(end <= arena_end, "block %d: buffer %d ends at %zu, past the arena (%zu)", i, k,
                          end, arena_end);
            if (end > activations_end && end - activations_end > grads_above_activations)
                grads_above_activations = end - activations_end;
        }
        dout = d_in;
    }
    // the stem: its gradients sit above block 0's start (the stem's activations and the input below)
    size_t stem_live = span_of(&l, l.a.stem_pool, 0).offset + in_bytes(&l, &l.m.blocks[0].conv1);
    size_t stem_bytes = out_bytes(&l, &l.m.stem);
    dout.bytes = in_bytes(&l, &l.m.blocks[0].conv1);  // maxpool's output gradient
    ArenaSpan d_b = span_of(&l, l.a.d_stem_b, stem_bytes), d_a = span_of(&l, l.a.d_stem_a, stem_bytes);
    assert_clear(d_b, stem_live, "d_stem_b", -1);
    assert_clear(d_a, stem_live, "d_stem_a", -1);
    ck_assert(!arena_spans_overlap(d_b, dout) && !arena_spans_overlap(d_a, dout) &&
              !arena_spans_overlap(d_a, d_b));
    ck_assert(d_b.offset + d_b.bytes <= arena_end && d_a.offset + d_a.bytes <= arena_end);
    // the raw bytes sit above the stem (only the first op reads them), the normalised input below it (the
    // stem's backward reads it)
    size_t image_bytes = (size_t)l.a.max_batch * cfg.model.image_size * cfg.model.image_size * 3;
    ArenaSpan raw = span_of(&l, l.a.images, image_bytes),
              input = span_of(&l, l.a.input, image_bytes * dtype_size(l.m.act_dt));
    assert_clear(raw, stem_live, "images", -1);
    ck_assert(raw.offset + raw.bytes <= arena_end);
    ck_assert_uint_lt(input.offset, span_of(&l, l.a.stem_a, 0).offset);
    ck_assert(!arena_spans_overlap(raw, input));
    // what the arena adds to the forward's activations: less than the three gradient buffers of the
    // largest activation that a layout without reuse needs
    size_t largest = stem_bytes;
    for (int i = 0; i < l.m.n_blocks; i++)
        if (dout_need(&l, &l.m.blocks[i]) > largest) largest = dout_need(&l, &l.m.blocks[i]);
    if (getenv("AMPTRAIN_TEST_VERBOSE"))
        printf("arena: activations %zu, gradients above them %zu, largest activation %zu\n", activations_end,
               arena_end - activations_end, largest);
    ck_assert_uint_lt(arena_end - activations_end, 3 * largest);
    activations_free(&l.a, l.be);
    model_free(&l.m, l.be);
    l.be->destroy(l.be);
}

START_TEST(test_gradients_never_overlap_live_activations) {
    const char *r50[] = {"model.arch=resnext50_32x4d", "model.image_size=64", NULL};
    check_layout(r50, DTYPE_F16);
    check_layout(r50, DTYPE_F32);
    const char *r101[] = {"model.arch=resnext101_32x8d", "model.image_size=64", NULL};
    check_layout(r101, DTYPE_F16);
    const char *uneven[] = {UNEVEN_MODEL, NULL};
    check_layout(uneven, DTYPE_F16);
    check_layout(uneven, DTYPE_BF16);
    check_layout(uneven, DTYPE_F32);
    const char *wide[] = {WIDE_MODEL, NULL};
    check_layout(wide, DTYPE_F16);
    const char *wider[] = {WIDER_MODEL, NULL};
    check_layout(wider, DTYPE_F32);
    const char *r50_recompute[] = {"model.arch=resnext50_32x4d", "model.image_size=64",
                                   "model.recompute_bn_blocks=3", NULL};
    check_layout(r50_recompute, DTYPE_F16);
    const char *uneven_all[] = {UNEVEN_MODEL, "model.recompute_bn_blocks=256", NULL};
    check_layout(uneven_all, DTYPE_F32);
}
END_TEST

// ---- reuse changes no value -------------------------------------------------------------------------

// One forward + loss + backward on fixed inputs (raw bytes, normalised by a non-trivial affine), its ops
// prepared first as the trainer does; returns the gradient bytes (malloc'd) and the loss. instrument
// (nullable) may replace the backend's ops before anything runs.
static unsigned char *step_gradients_on(const Config *cfg, DType amp_dt, int no_reuse, int n, float *loss,
                                        void (*instrument)(Backend *be)) {
    Model m;
    Activations act = {.no_reuse = no_reuse};
    model_init_shapes(&m, &cfg->model, amp_dt);
    Backend *be = cpu_backend_create();
    if (instrument) instrument(be);
    model_alloc_and_prepare(&m, be, 11, n);  // as trainer_init
    activations_alloc(&act, &m, be, n);
    size_t image = (size_t)cfg->model.image_size * cfg->model.image_size * 3;
    uint8_t *images = be->alloc(be, (size_t)n * image);
    int32_t *labels = be->alloc(be, (size_t)n * sizeof(int32_t));
    for (size_t i = 0; i < (size_t)n * image; i++) images[i] = (uint8_t)(i * 2654435761u >> 13);
    for (int i = 0; i < n; i++) labels[i] = (3 * i + 1) % cfg->model.num_classes;
    PixelNorm norm = {{0.4f, 0.5f, 0.6f}, {0.2f, 0.25f, 0.3f}};
    ModelBatch b = {.images = images,
                    .images_dt = DTYPE_U8,
                    .affine = pixel_affine_of(&norm),
                    .labels = labels,
                    .n = n};
    model_forward(&m, &act, be, &b, 1);
    model_loss(&m, &act, be, &b, 0.0f, NULL, 1.0f / (float)n);
    model_backward(&m, &act, be, &b, 0, NULL, NULL);
    *loss = *act.loss;  // the CPU backend's memory is host memory
    size_t bytes = m.params.padded_numel * dtype_size(m.act_dt);
    unsigned char *grads = malloc(bytes);
    memcpy(grads, m.grads, bytes);
    be->free(be, images), be->free(be, labels);
    activations_free(&act, be);
    model_free(&m, be);
    be->destroy(be);
    return grads;
}

static unsigned char *step_gradients(const Config *cfg, DType amp_dt, int no_reuse, int n, float *loss) {
    return step_gradients_on(cfg, amp_dt, no_reuse, n, loss, NULL);
}

// One step of two set-ups (config and no_reuse each) from the same weights and batch: the same finite
// loss and bitwise the same gradients.
static void assert_same_step(const Config *cfg_a, int no_reuse_a, const Config *cfg_b, int no_reuse_b,
                             DType amp_dt, const char *what) {
    Model shapes;
    model_init_shapes(&shapes, &cfg_a->model, amp_dt);
    size_t bytes = shapes.params.padded_numel * dtype_size(shapes.act_dt);
    model_free(&shapes, NULL);
    float loss_a, loss_b;
    unsigned char *a = step_gradients(cfg_a, amp_dt, no_reuse_a, 3, &loss_a);
    unsigned char *b = step_gradients(cfg_b, amp_dt, no_reuse_b, 3, &loss_b);
    ck_assert(isfinite(loss_a));
    ck_assert_float_eq(loss_a, loss_b);
    size_t differ = 0;
    for (size_t i = 0; i < bytes; i++) differ += a[i] != b[i];
    ck_assert_msg(differ == 0, "%s: %zu of %zu gradient bytes differ (%s)", what, differ, bytes,
                  dtype_name(amp_dt));
    free(a);
    free(b);
}

// The shared arena against every buffer on its own: no reused byte was still needed (an overlap shows as
// a changed gradient, not as a crash).
static void check_reuse_changes_nothing(const char *const *overrides, DType amp_dt) {
    Config cfg;
    tu_config(&cfg, overrides);
    assert_same_step(&cfg, 0, &cfg, 1, amp_dt, "shared arena vs own buffers");
}

// Recomputing bn1/bn2's outputs in backward against keeping them (the CPU's recomputation is exact).
// Reads of a b1 or b2 that was not recomputed would see the next blocks' activations written over it.
static void check_recompute_changes_nothing(const char *const *overrides, const char *recompute,
                                            DType amp_dt) {
    Config keep, again;
    tu_config(&keep, overrides);
    const char *with[8] = {0};
    int k = 0;
    while (overrides[k]) with[k] = overrides[k], k++;
    with[k] = recompute;
    tu_config(&again, with);
    assert_same_step(&keep, 0, &again, 0, amp_dt, recompute);
}

START_TEST(test_recomputing_bn_outputs_changes_no_gradient) {
    const char *uneven[] = {UNEVEN_MODEL, NULL};
    check_recompute_changes_nothing(uneven, "model.recompute_bn_blocks=256", DTYPE_F32);
    check_recompute_changes_nothing(uneven, "model.recompute_bn_blocks=2", DTYPE_F16);
    check_recompute_changes_nothing(uneven, "model.recompute_bn_blocks=2", DTYPE_BF16);
    const char *r50[] = {"model.arch=resnext50_32x4d", "model.image_size=64", "model.num_classes=10", NULL};
    check_recompute_changes_nothing(r50, "model.recompute_bn_blocks=3", DTYPE_F16);
}
END_TEST

// ---- every op of a step was prepared --------------------------------------------------------------------

// A backend chooses its kernels for the shapes model_prepare_ops names (conv_prepare, bn_prepare) before the
// step's memory exists; a shape the step then runs without having been named falls back to a default
// choice (the CUDA backend: cuDNN's heuristic algorithm, cuDNN's batch-norm pair), silently. The CPU backend
// here records what was prepared and checks every convolution and training batch norm of one step against it.
#define PREPARED_MAX 512
static struct {
    ConvShape conv[PREPARED_MAX];
    int convs;
    int bn[PREPARED_MAX][4];  // rows, c, residual, relu
    int bns;
    int conv_calls, bn_calls;  // ops of the step checked
    Backend inner;             // the CPU backend's own ops
} prepared;

static void record_conv_prepare(Backend *be, const ConvShape *s, DType dt) {
    (void)be, (void)dt;
    ck_assert_int_lt(prepared.convs, PREPARED_MAX);
    prepared.conv[prepared.convs++] = *s;
}

static void record_bn_prepare(Backend *be, int rows, int c, DType dt, int residual, int relu) {
    (void)be, (void)dt;
    ck_assert_int_lt(prepared.bns, PREPARED_MAX);
    int *e = prepared.bn[prepared.bns++];
    e[0] = rows, e[1] = c, e[2] = residual, e[3] = relu;
}

static void expect_conv_prepared(const ConvShape *s) {
    prepared.conv_calls++;
    for (int i = 0; i < prepared.convs; i++)
        if (memcmp(&prepared.conv[i], s, sizeof *s) == 0) return;
    ck_abort_msg("convolution n=%d %dx%d c %d->%d k%d s%d g%d runs without conv_prepare", s->n, s->h, s->w,
                 s->c_in, s->c_out, s->kh, s->stride, s->groups);
}

static void expect_bn_prepared(int rows, int c, int residual, int relu) {
    prepared.bn_calls++;
    for (int i = 0; i < prepared.bns; i++) {
        const int *e = prepared.bn[i];
        if (e[0] == rows && e[1] == c && e[2] == residual && e[3] == relu) return;
    }
    ck_abort_msg("batch norm rows %d c %d residual %d relu %d trains without bn_prepare", rows, c, residual,
                 relu);
}

static void checked_conv_forward(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w,
                                 void *y) {
    expect_conv_prepared(s);
    prepared.inner.conv_forward(be, s, dt, x, w, y);
}

static void checked_conv_backward_data(Backend *be, const ConvShape *s, DType dt, const void *dy,
                                       const void *w, void *dx, int accumulate) {
    expect_conv_prepared(s);
    prepared.inner.conv_backward_data(be, s, dt, dy, w, dx, accumulate);
}

static void checked_conv_backward_filter(Backend *be, const ConvShape *s, DType dt, const void *x,
                                         const void *dy, void *dw, int accumulate) {
    expect_conv_prepared(s);
    prepared.inner.conv_backward_filter(be, s, dt, x, dy, dw, accumulate);
}

static void checked_bn_forward_train(Backend *be, int rows, int c, DType dt, const void *x,
                                     const void *residual, int relu, const float *gamma, const float *beta,
                                     float *running_mean, float *running_var, float momentum, float eps,
                                     float *save_mean, float *save_invstd, void *y) {
    expect_bn_prepared(rows, c, residual != NULL, relu);
    prepared.inner.bn_forward_train(be, rows, c, dt, x, residual, relu, gamma, beta, running_mean,
                                    running_var, momentum, eps, save_mean, save_invstd, y);
}

static void instrument_prepared(Backend *be) {
    memset(&prepared, 0, sizeof prepared);
    prepared.inner = *be;
    be->conv_prepare = record_conv_prepare;
    be->bn_prepare = record_bn_prepare;
    be->conv_forward = checked_conv_forward;
    be->conv_backward_data = checked_conv_backward_data;
    be->conv_backward_filter = checked_conv_backward_filter;
    be->bn_forward_train = checked_bn_forward_train;
}

static void check_step_was_prepared(const char *const *overrides, DType amp_dt) {
    Config cfg;
    tu_config(&cfg, overrides);
    float loss;
    free(step_gradients_on(&cfg, amp_dt, 0, 3, &loss, instrument_prepared));
    ck_assert(isfinite(loss));
    ck_assert_int_gt(prepared.conv_calls, 0);
    ck_assert_int_gt(prepared.bn_calls, 0);
}

// The initial weights depend on the seed only: one thread and seven draw the same bits. And they are
// torchvision's initialisation: each convolution's values have mean ~0 and standard deviation
// sqrt(2 / fan_out) (within 3% on tensors of >= 16,384 values), batch norm 1 and 0, the classifier inside
// +-1/sqrt(in) and spread over it.
START_TEST(test_initial_weights_are_torchvisions_whatever_the_threads) {
    const char *r50[] = {"model.arch=resnext50_32x4d", "model.image_size=64", "model.num_classes=10", NULL};
    Config cfg;
    tu_config(&cfg, r50);
    Model m;
    model_init_shapes(&m, &cfg.model, DTYPE_F16);
    const size_t np = m.params.padded_numel;
    float *one = calloc(np, sizeof(float)), *seven = calloc(np, sizeof(float));
    weight_init_draw(&m, one, 9, 1);
    weight_init_draw(&m, seven, 9, 7);
    ck_assert_mem_eq(one, seven, np * sizeof(float));
    size_t counted = 0;
    int checked_convs = 0;
    for (int i = 0; i < m.params.count; i++) {
        const ParamInfo *p = &m.params.items[i];
        const float *v = one + p->offset;
        counted += p->numel;
        if (p->kind == PARAM_CONV_WEIGHT && p->numel >= 16384) {
            double sum = 0, sq = 0;
            for (size_t k = 0; k < p->numel; k++) sum += v[k], sq += (double)v[k] * v[k];
            const double mean = sum / p->numel, sd = sqrt(sq / p->numel - mean * mean);
            const double want = sqrt(2.0 / ((double)p->shape[0] * p->shape[2] * p->shape[3]));
            ck_assert_msg(fabs(sd / want - 1) < 0.03 && fabs(mean) < 0.05 * want,
                          "%s: mean %g sd %g, want sd %g", p->name, mean, sd, want);
            checked_convs++;
        } else if (p->kind == PARAM_BN_WEIGHT || p->kind == PARAM_BN_BIAS) {
            for (size_t k = 0; k < p->numel; k++)
                ck_assert_float_eq(v[k], p->kind == PARAM_BN_WEIGHT ? 1.0f : 0.0f);
        } else if (p->kind == PARAM_FC_WEIGHT) {
            const float bound = 1.0f / sqrtf((float)m.fc_in);
            float lo = bound, hi = -bound;
            for (size_t k = 0; k < p->numel; k++) lo = fminf(lo, v[k]), hi = fmaxf(hi, v[k]);
            ck_assert_msg(lo >= -bound && hi <= bound && lo < -0.9f * bound && hi > 0.9f * bound,
                          "fc.weight in [%g, %g], bound %g", lo, hi, bound);
        }
    }
    ck_assert_int_gt(checked_convs, 10);
    ck_assert(counted <= np);
    // a different seed draws different weights
    weight_init_draw(&m, seven, 10, 3);
    ck_assert(memcmp(one, seven, np * sizeof(float)) != 0);
    free(one), free(seven);
    model_free(&m, NULL);
}
END_TEST

// model_alloc_and_prepare draws the weights on a thread beside the kernel choices: the same weights and
// running statistics as model_alloc's, bitwise, and the same shapes prepared as model_prepare_ops names.
START_TEST(test_weights_drawn_beside_the_choices_are_model_allocs) {
    const char *r50[] = {"model.arch=resnext50_32x4d", "model.image_size=64", "model.num_classes=10", NULL};
    Config cfg;
    tu_config(&cfg, r50);
    Backend *be = cpu_backend_create();
    instrument_prepared(be);
    Model apart, beside;
    model_init_shapes(&apart, &cfg.model, DTYPE_F16);
    model_init_shapes(&beside, &cfg.model, DTYPE_F16);
    model_alloc(&apart, be, 5);
    model_prepare_ops(&apart, be, 3);
    const int convs = prepared.convs, bns = prepared.bns;
    ck_assert_int_gt(convs, 0);
    prepared.convs = prepared.bns = 0;
    const double choices_s = model_alloc_and_prepare(&beside, be, 5, 3);
    ck_assert(choices_s >= 0);
    ck_assert_int_eq(prepared.convs, convs);
    ck_assert_int_eq(prepared.bns, bns);
    const size_t np = apart.params.padded_numel;
    ck_assert_uint_eq(beside.params.padded_numel, np);
    ck_assert_mem_eq(beside.master, apart.master, np * sizeof(float));
    ck_assert_mem_eq(beside.compute, apart.compute, np * dtype_size(apart.act_dt));
    ck_assert_mem_eq(beside.running, apart.running, apart.stats_numel * sizeof(float));
    // a seed of its own draws other weights (the comparison above can fail)
    Model other;
    model_init_shapes(&other, &cfg.model, DTYPE_F16);
    model_alloc_and_prepare(&other, be, 6, 3);
    ck_assert(memcmp(other.master, apart.master, np * sizeof(float)) != 0);
    model_free(&other, be), model_free(&beside, be), model_free(&apart, be);
    be->destroy(be);
}
END_TEST

START_TEST(test_every_op_of_a_step_was_prepared) {
    const char *uneven[] = {UNEVEN_MODEL, NULL};
    check_step_was_prepared(uneven, DTYPE_F16);
    const char *r50[] = {"model.arch=resnext50_32x4d", "model.image_size=64", "model.num_classes=10", NULL};
    check_step_was_prepared(r50, DTYPE_F32);
    const char *r50_recompute[] = {"model.arch=resnext50_32x4d", "model.image_size=64",
                                   "model.num_classes=10", "model.recompute_bn_blocks=3", NULL};
    check_step_was_prepared(r50_recompute, DTYPE_F16);
}
END_TEST

// ---- a downsampling block's end as one op ----------------------------------------------------------------

// bn_add_bn as a fused backend runs it, made of the CPU's own calls on private buffers: the scratch it is
// given is filled with NaN instead (a fused kernel leaves it untouched, so nothing may read it afterwards),
// and dx_b is written last (it may be dy).
static struct { int forward_calls, backward_calls, dx_b_was_dy; } fused;

static void fill_nan(void *p, DType dt, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (dt == DTYPE_F32)
            ((float *)p)[i] = NAN;
        else
            ((uint16_t *)p)[i] = 0x7e00;  // fp16 NaN
    }
}

static void fused_forward(Backend *be, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b, int relu,
                          float momentum, float eps, void *scratch, void *y) {
    const size_t n = (size_t)rows * c;
    void *out_b = malloc(n * dtype_size(dt));
    be->bn_forward_train(be, rows, c, dt, b->x, NULL, 0, b->gamma, b->beta, b->running_mean, b->running_var,
                         momentum, eps, b->save_mean, b->save_invstd, out_b);
    be->bn_forward_train(be, rows, c, dt, a->x, out_b, relu, a->gamma, a->beta, a->running_mean,
                         a->running_var, momentum, eps, a->save_mean, a->save_invstd, y);
    free(out_b);
    fill_nan(scratch, dt, n);
    fused.forward_calls++;
}

static void fused_backward(Backend *be, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b,
                           const void *y, const void *dy, int relu, void *dx_a, void *dx_b,
                           int accumulate_params, void *scratch) {
    const size_t n = (size_t)rows * c, bytes = n * dtype_size(dt);
    void *g = malloc(bytes), *d_b = malloc(bytes);
    be->bn_backward(be, rows, c, dt, a->x, y, dy, relu, a->gamma, a->save_mean, a->save_invstd, dx_a, 0,
                    a->dgamma, a->dbeta, accumulate_params, g);
    be->bn_backward(be, rows, c, dt, b->x, NULL, g, 0, b->gamma, b->save_mean, b->save_invstd, d_b, 0,
                    b->dgamma, b->dbeta, accumulate_params, NULL);
    memcpy(dx_b, d_b, bytes);
    free(g), free(d_b);
    fill_nan(scratch, dt, n);
    fused.backward_calls++;
    fused.dx_b_was_dy += dx_b == dy;
}

static void instrument_fused(Backend *be) {
    memset(&fused, 0, sizeof fused);
    be->bn_add_bn_forward_train = fused_forward;
    be->bn_add_bn_backward = fused_backward;
}

// The model's step through bn_add_bn against its two calls per direction (the CPU's way): bitwise the same
// gradients, one fused call each way per downsampling block, and no reader of what a fused op leaves alone.
static void check_fused_block_ends(const char *const *overrides, DType amp_dt, int downsampling_blocks) {
    Config cfg;
    tu_config(&cfg, overrides);
    Model shapes;
    model_init_shapes(&shapes, &cfg.model, amp_dt);
    const size_t bytes = shapes.params.padded_numel * dtype_size(shapes.act_dt);
    model_free(&shapes, NULL);
    float loss_two, loss_fused;
    unsigned char *two = step_gradients(&cfg, amp_dt, 0, 3, &loss_two);
    unsigned char *one = step_gradients_on(&cfg, amp_dt, 0, 3, &loss_fused, instrument_fused);
    ck_assert(isfinite(loss_two));
    ck_assert_float_eq(loss_two, loss_fused);
    ck_assert_int_eq(fused.forward_calls, downsampling_blocks);
    ck_assert_int_eq(fused.backward_calls, downsampling_blocks);
    ck_assert_int_eq(fused.dx_b_was_dy, downsampling_blocks);  // the model's layout today: d_down_a over dout
    size_t differ = 0;
    for (size_t i = 0; i < bytes; i++) differ += two[i] != one[i];
    ck_assert_msg(differ == 0, "%zu of %zu gradient bytes differ (%s)", differ, bytes, dtype_name(amp_dt));
    free(two), free(one);
}

START_TEST(test_fused_block_ends_change_no_gradient) {
    const char *uneven[] = {UNEVEN_MODEL, NULL};
    check_fused_block_ends(uneven, DTYPE_F32, 4);
    check_fused_block_ends(uneven, DTYPE_F16, 4);
    check_fused_block_ends(uneven, DTYPE_BF16, 4);
    const char *r50[] = {"model.arch=resnext50_32x4d", "model.image_size=64", "model.num_classes=10",
                         "model.recompute_bn_blocks=3", NULL};
    check_fused_block_ends(r50, DTYPE_F16, 4);
}
END_TEST

START_TEST(test_buffer_reuse_changes_no_gradient) {
    const char *uneven[] = {UNEVEN_MODEL, NULL};
    check_reuse_changes_nothing(uneven, DTYPE_F32);
    check_reuse_changes_nothing(uneven, DTYPE_F16);
    check_reuse_changes_nothing(uneven, DTYPE_BF16);
    const char *r50[] = {"model.arch=resnext50_32x4d", "model.image_size=64", "model.num_classes=10", NULL};
    check_reuse_changes_nothing(r50, DTYPE_F16);
    const char *wide[] = {WIDE_MODEL, NULL};
    check_reuse_changes_nothing(wide, DTYPE_F32);
}
END_TEST

// ---- evaluation at another side ------------------------------------------------------------------------

// Logits (n, classes) fp32 of an evaluation forward of batch b (host memory on the CPU backend).
static float *eval_logits(Model *m, Activations *act, Backend *be, const uint8_t *images,
                          const int32_t *labels, int n) {
    PixelNorm norm = {{0.4f, 0.5f, 0.6f}, {0.2f, 0.25f, 0.3f}};
    size_t image = (size_t)m->cfg.image_size * m->cfg.image_size * 3;
    memcpy(act->images, images, (size_t)n * image);
    memcpy(act->labels, labels, (size_t)n * sizeof(int32_t));
    ModelBatch b = {.images = act->images,
                    .images_dt = DTYPE_U8,
                    .affine = pixel_affine_of(&norm),
                    .labels = act->labels,
                    .n = n};
    model_forward(m, act, be, &b, 0);
    size_t count = (size_t)n * m->cfg.num_classes;
    float *out = malloc(count * sizeof(float));
    be->cast(be, out, DTYPE_F32, act->logits, m->act_dt, count);
    return out;
}

// A model trained at 32 and evaluated by its view at 48, in the training arena made large enough: the same
// logits as a model built at 48 with the same weights and running statistics, before and after a training
// step at 32 has written the arena (so nothing of the training layout leaks into the evaluation).
static void check_view_evaluates_like_a_model_at_its_side(const char *const *overrides, DType amp_dt) {
    enum { N = 3, EVAL_SIDE = 48 };
    Config cfg;
    tu_config(&cfg, overrides);
    Backend *be = cpu_backend_create();
    Model train, view, at_side;
    Activations act = {0}, view_act, side_act = {0};
    model_init_shapes(&train, &cfg.model, amp_dt);
    model_alloc(&train, be, 7);
    model_view_at_side(&view, &train, EVAL_SIDE);
    act.reserve_bytes = activations_arena_bytes(&view, N);
    activations_alloc(&act, &train, be, N);
    ck_assert_uint_ge(act.arena_bytes, activations_arena_bytes(&train, N));
    activations_share(&view_act, &view, N, &act);
    ModelConfig big = cfg.model;
    big.image_size = EVAL_SIDE;
    model_init_shapes(&at_side, &big, amp_dt);
    model_alloc(&at_side, be, 7);  // the same seed: the same weights (they do not depend on the side)
    activations_alloc(&side_act, &at_side, be, N);
    size_t image = (size_t)EVAL_SIDE * EVAL_SIDE * 3;
    uint8_t *images = malloc(N * image);
    int32_t labels[N] = {1, 0, 2};
    for (size_t i = 0; i < N * image; i++) images[i] = (uint8_t)(i * 2654435761u >> 11);
    for (int round = 0; round < 2; round++) {
        if (round == 1) {  // a training step at 32 through the shared arena, its statistics copied across
            size_t small = (size_t)32 * 32 * 3;
            for (size_t i = 0; i < N * small; i++) act.images[i] = (uint8_t)(i * 40503u >> 7);
            memcpy(act.labels, labels, sizeof labels);
            PixelNorm norm = {{0.4f, 0.5f, 0.6f}, {0.2f, 0.25f, 0.3f}};
            ModelBatch b = {.images = act.images,
                            .images_dt = DTYPE_U8,
                            .affine = pixel_affine_of(&norm),
                            .labels = act.labels,
                            .n = N};
            model_forward(&train, &act, be, &b, 1);
            model_loss(&train, &act, be, &b, 0.0f, NULL, 1.0f / N);
            model_backward(&train, &act, be, &b, 0, NULL, NULL);
            memcpy(at_side.running, train.running, train.stats_numel * sizeof(float));
        }
        float *a = eval_logits(&view, &view_act, be, images, labels, N);
        float *b = eval_logits(&at_side, &side_act, be, images, labels, N);
        ck_assert_mem_eq(a, b, (size_t)N * cfg.model.num_classes * sizeof(float));
        for (int i = 0; i < N * cfg.model.num_classes; i++) ck_assert(isfinite(a[i]));
        free(a);
        free(b);
    }
    free(images);
    activations_free(&view_act, be);
    activations_free(&side_act, be);
    activations_free(&act, be);
    model_view_free(&view);
    model_free(&at_side, be);
    model_free(&train, be);
    be->destroy(be);
}

START_TEST(test_view_at_another_side_evaluates_like_a_model_built_there) {
    const char *uneven[] = {UNEVEN_MODEL, NULL};
    check_view_evaluates_like_a_model_at_its_side(uneven, DTYPE_F32);
    check_view_evaluates_like_a_model_at_its_side(uneven, DTYPE_F16);
    check_view_evaluates_like_a_model_at_its_side(uneven, DTYPE_BF16);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_arena_places_first_fit_above_the_floor);
    tcase_add_test(tc, test_gradients_never_overlap_live_activations);
    tcase_add_test(tc, test_buffer_reuse_changes_no_gradient);
    tcase_add_test(tc, test_recomputing_bn_outputs_changes_no_gradient);
    tcase_add_test(tc, test_every_op_of_a_step_was_prepared);
    tcase_add_test(tc, test_weights_drawn_beside_the_choices_are_model_allocs);
    tcase_add_test(tc, test_initial_weights_are_torchvisions_whatever_the_threads);
    tcase_add_test(tc, test_fused_block_ends_change_no_gradient);
    tcase_add_test(tc, test_view_at_another_side_evaluates_like_a_model_built_there);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 1);
}

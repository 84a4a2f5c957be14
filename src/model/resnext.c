#include "model/resnext.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/autocast.h"
#include "model/activations.h"
#include "core/check.h"
#include "core/clock.h"
#include "model/weight_init.h"

// ---- building the shapes and the registry (torchvision order) ----------------------------------------

static ConvLayer conv_make(Model *m, const char *name, int n, int h, int w, int c_in, int c_out, int k,
                           int stride, int pad, int groups) {
    ConvLayer l = {.shape = {.n = n,
                             .h = h,
                             .w = w,
                             .c_in = c_in,
                             .c_out = c_out,
                             .kh = k,
                             .kw = k,
                             .stride = stride,
                             .pad = pad,
                             .groups = groups}};
    conv_shape_finish(&l.shape);
    int64_t shape[4] = {c_out, c_in / groups, k, k};
    l.weight = params_add(&m->params, name, PARAM_CONV_WEIGHT, 4, shape);
    return l;
}

static void bn_make(Model *m, ModelBnLayer *bn, const char *prefix, int c) {
    char name[PARAM_NAME_MAX];
    int64_t shape[1] = {c};
    bn->c = c;
    snprintf(bn->prefix, sizeof bn->prefix, "%s", prefix);
    snprintf(name, sizeof name, "%s.weight", prefix);
    bn->gamma = params_add(&m->params, name, PARAM_BN_WEIGHT, 1, shape);
    snprintf(name, sizeof name, "%s.bias", prefix);
    bn->beta = params_add(&m->params, name, PARAM_BN_BIAS, 1, shape);
    bn->stats_offset = m->stats_numel;
    m->stats_numel += 2 * (size_t)c;
    m->bn_list[m->n_bn++] = bn;
}

// Places parameters in the order model_backward finishes their gradients.
static void place_in_backward_order(Model *m) {
    params_place(&m->params, m->fc_weight);
    params_place(&m->params, m->fc_bias);
    for (int i = m->n_blocks - 1; i >= 0; i--) {
        ModelBlock *b = &m->blocks[i];
        params_place(&m->params, b->bn3.gamma);
        params_place(&m->params, b->bn3.beta);
        if (b->has_down) {
            params_place(&m->params, b->down_bn.gamma);
            params_place(&m->params, b->down_bn.beta);
            params_place(&m->params, b->down.weight);
        }
        params_place(&m->params, b->conv3.weight);
        params_place(&m->params, b->bn2.gamma);
        params_place(&m->params, b->bn2.beta);
        params_place(&m->params, b->conv2.weight);
        params_place(&m->params, b->bn1.gamma);
        params_place(&m->params, b->bn1.beta);
        params_place(&m->params, b->conv1.weight);
    }
    params_place(&m->params, m->stem_bn.gamma);
    params_place(&m->params, m->stem_bn.beta);
    params_place(&m->params, m->stem.weight);
}

void model_init_shapes(Model *m, const ModelConfig *cfg, DType amp_dt) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->amp = amp_dt != DTYPE_F32;
    m->amp_dt = amp_dt;
    m->act_dt = autocast_dtype(OP_CONV, amp_dt);
    for (int s = 0; s < 4; s++) m->n_blocks += cfg->layers[s];
    m->blocks = xcalloc((size_t)m->n_blocks, sizeof *m->blocks);
    m->bn_list = xcalloc((size_t)(1 + 4 * m->n_blocks), sizeof *m->bn_list);

    int n = 1, side = cfg->image_size, planes = cfg->planes;  // shapes per image
    m->stem = conv_make(m, "conv1.weight", n, side, side, 3, planes, 7, 2, 3, 1);
    bn_make(m, &m->stem_bn, "bn1", planes);
    int h = (m->stem.shape.out_h + 2 - 3) / 2 + 1, w = (m->stem.shape.out_w + 2 - 3) / 2 + 1;
    int in_c = planes, bi = 0;
    char name[2 * PARAM_NAME_MAX], prefix[PARAM_NAME_MAX];
    for (int s = 0; s < 4; s++) {
        int stage_planes = planes << s;
        int width = (int)((int64_t)stage_planes * cfg->base_width / 64) * cfg->cardinality;
        int out_c = stage_planes * 4;
        for (int j = 0; j < cfg->layers[s]; j++, bi++) {
            ModelBlock *b = &m->blocks[bi];
            int stride = (j == 0 && s > 0) ? 2 : 1;
            snprintf(prefix, sizeof prefix, "layer%d.%d", s + 1, j);
#define LAYER_NAME(suffix) (snprintf(name, sizeof name, "%s.%s", prefix, suffix), name)
            b->conv1 = conv_make(m, LAYER_NAME("conv1.weight"), n, h, w, in_c, width, 1, 1, 0, 1);
            bn_make(m, &b->bn1, LAYER_NAME("bn1"), width);
            b->conv2 = conv_make(m, LAYER_NAME("conv2.weight"), n, h, w, width, width, 3, stride, 1,
                                 cfg->cardinality);
            bn_make(m, &b->bn2, LAYER_NAME("bn2"), width);
            int oh = b->conv2.shape.out_h, ow = b->conv2.shape.out_w;
            b->conv3 = conv_make(m, LAYER_NAME("conv3.weight"), n, oh, ow, width, out_c, 1, 1, 0, 1);
            bn_make(m, &b->bn3, LAYER_NAME("bn3"), out_c);
            b->has_down = (stride != 1 || in_c != out_c);
            if (b->has_down) {
                b->down =
                    conv_make(m, LAYER_NAME("downsample.0.weight"), n, h, w, in_c, out_c, 1, stride, 0, 1);
                bn_make(m, &b->down_bn, LAYER_NAME("downsample.1"), out_c);
            }
#undef LAYER_NAME
            h = oh, w = ow, in_c = out_c;
        }
    }
    m->final_hw = h * w;
    m->fc_in = in_c;
    int64_t fc_w_shape[2] = {cfg->num_classes, in_c}, fc_b_shape[1] = {cfg->num_classes};
    m->fc_weight = params_add(&m->params, "fc.weight", PARAM_FC_WEIGHT, 2, fc_w_shape);
    m->fc_bias = params_add(&m->params, "fc.bias", PARAM_FC_BIAS, 1, fc_b_shape);
    place_in_backward_order(m);
}

double model_macs_per_image(const Model *m) {
    double macs = 0;
    const ConvLayer *convs[4];
#define CONV_MACS(l)                                                                                         \
    ((double)(l).shape.out_h * (l).shape.out_w * (l).shape.c_out * (l).shape.kh * (l).shape.kw *             \
     ((l).shape.c_in / (l).shape.groups))
    macs += CONV_MACS(m->stem);
    for (int i = 0; i < m->n_blocks; i++) {
        const ModelBlock *b = &m->blocks[i];
        convs[0] = &b->conv1, convs[1] = &b->conv2, convs[2] = &b->conv3, convs[3] = &b->down;
        for (int k = 0; k < (b->has_down ? 4 : 3); k++) macs += CONV_MACS(*convs[k]);
    }
#undef CONV_MACS
    return macs + (double)m->fc_in * m->cfg.num_classes;
}

// ---- memory and initialisation ---------------------------------------------------------------------

// The parameters' backend memory, gradients zeroed; returns a zeroed host buffer for upload_params.
static float *alloc_params(Model *m, Backend *be) {
    size_t np = m->params.padded_numel;
    size_t dts = dtype_size(m->act_dt);
    m->master = be->alloc(be, np * sizeof(float));
    m->compute = m->amp ? be->alloc(be, np * dts) : (void *)m->master;
    m->grads = be->alloc(be, np * dts);
    be->zero(be, m->grads, np * dts);  // the alignment gaps are never written by backward
    m->running = be->alloc(be, m->stats_numel * sizeof(float));
    return xcalloc(np > m->stats_numel ? np : m->stats_numel, sizeof(float));
}

// host (alloc_params' buffer, freed here): the master weights -> the backend; running statistics 0 and 1.
static void upload_params(Model *m, Backend *be, float *host) {
    be->to_device(be, m->master, host, m->params.padded_numel * sizeof(float));
    // running_mean 0, running_var 1
    memset(host, 0, m->stats_numel * sizeof(float));
    for (int i = 0; i < m->n_bn; i++) {
        const ModelBnLayer *bn = m->bn_list[i];
        for (int k = 0; k < bn->c; k++) host[bn->stats_offset + bn->c + k] = 1.0f;
    }
    be->to_device(be, m->running, host, m->stats_numel * sizeof(float));
    free(host);
    model_refresh_compute(m, be);
}

void model_alloc(Model *m, Backend *be, uint64_t seed) {
    float *host = alloc_params(m, be);
    weight_init_draw(m, host, seed, 0);
    upload_params(m, be, host);
}

// weight_init_draw on a thread of its own (which hands chunks to more threads).
typedef struct WeightDraw {
    const Model *m;
    float *host;
    uint64_t seed;
} WeightDraw;

static void *draw_weights(void *arg) {
    const WeightDraw *d = arg;
    weight_init_draw(d->m, d->host, d->seed, 0);
    return NULL;
}

double model_alloc_and_prepare(Model *m, Backend *be, uint64_t seed, int n) {
    WeightDraw draw = {m, alloc_params(m, be), seed};
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, draw_weights, &draw);
    AMP_ASSERT(rc == 0, "model: pthread_create failed: %s", strerror(rc));
    const double start = clock_seconds();
    model_prepare_ops(m, be, n);  // reads the shapes only; the thread reads them too and writes draw.host
    const double choices_s = clock_seconds() - start;
    rc = pthread_join(thread, NULL);
    AMP_ASSERT(rc == 0, "model: pthread_join failed: %s", strerror(rc));
    upload_params(m, be, draw.host);
    return choices_s;
}

void model_view_free(Model *view) {
    free(view->blocks);
    free(view->bn_list);
    params_free(&view->params);
    memset(view, 0, sizeof *view);
}

void model_free(Model *m, Backend *be) {
    if (m->master) {
        void *bufs[] = {m->grads, m->running};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) be->free(be, bufs[k]);
        if (m->amp) be->free(be, m->compute);
        be->free(be, m->master);
    }
    model_view_free(m);
}

void model_view_at_side(Model *view, const Model *m, int side) {
    ModelConfig cfg = m->cfg;
    cfg.image_size = side;
    model_init_shapes(view, &cfg, m->amp_dt);
    AMP_ASSERT(view->params.padded_numel == m->params.padded_numel && view->stats_numel == m->stats_numel,
               "model view: the parameter layout changed with the side");
    view->master = m->master;
    view->compute = m->compute;
    view->grads = m->grads;
    view->running = m->running;
}

void model_refresh_compute(Model *m, Backend *be) {
    if (m->amp) be->cast(be, m->compute, m->act_dt, m->master, DTYPE_F32, m->params.padded_numel);
}

// ---- forward ------------------------------------------------------------------------------------

static const void *weight_of(const Model *m, int param) {
    return (const char *)m->compute + m->params.items[param].offset * dtype_size(m->act_dt);
}
static void *grad_of(const Model *m, int param) {
    return (char *)m->grads + m->params.items[param].offset * dtype_size(m->act_dt);
}
static const float *master_of(const Model *m, int param) { return m->master + m->params.items[param].offset; }

static ConvShape at_batch(const ConvLayer *l, int n) {
    ConvShape s = l->shape;
    s.n = n;
    return s;
}

int model_block_recomputes_bn(const Model *m, int i) { return i < m->cfg.recompute_bn_blocks; }

static int rows_of(const ConvLayer *l, int n) { return n * l->shape.out_h * l->shape.out_w; }

static void prepare_conv(const Model *m, Backend *be, const ConvLayer *l, int n) {
    if (!be->conv_prepare) return;
    ConvShape s = at_batch(l, n);
    be->conv_prepare(be, &s, m->act_dt);
}

// 1: training runs a downsampling block's end (bn3, the shortcut's bn, the add and ReLU) as the backend's one
// op, bn_add_bn (backend_ops.def: its backward is there whenever its forward is); 0: as two batch-norm calls.
static int block_ends_fused(const Backend *be) { return be->bn_add_bn_forward_train != NULL; }

// The batch norm after convolution l (bn_fwd's call in training).
static void prepare_bn(const Model *m, Backend *be, const ConvLayer *l, const ModelBnLayer *bn, int n,
                       int residual, int relu) {
    if (be->bn_prepare) be->bn_prepare(be, rows_of(l, n), bn->c, m->act_dt, residual, relu);
}

// 1: block i trains bn2 + ReLU, conv3 and bn3 in one bn_conv_bn_forward_train, which need not write b2 (the
// block recomputes it in backward; blocks with a downsample end in bn_add_bn instead).
static int block_trains_bn2_into_conv3(const Model *m, int i) {
    return !m->blocks[i].has_down && model_block_recomputes_bn(m, i);
}

// A convolution trained in one op with the batch norm after it (FUSE_CONV_BN: conv_bn_fwd), with the batch
// norms around it (FUSE_BN_CONV_BN: bn_conv_bn_fwd) or, in backward, with the batch norm in front
// (FUSE_BN_CONV_BACKWARD: bn_conv_bwd), after the convolution and the batch norms are prepared.
static void prepare_conv_bn(const Model *m, Backend *be, const ConvLayer *l, int n, int residual, int relu,
                            ConvBnFusion fusion) {
    if (!be->conv_bn_prepare) return;
    ConvShape s = at_batch(l, n);
    be->conv_bn_prepare(be, &s, m->act_dt, residual, relu, fusion);
}

void model_prepare_ops(const Model *m, Backend *be, int n) {
    prepare_conv(m, be, &m->stem, n);
    prepare_bn(m, be, &m->stem, &m->stem_bn, n, 0, 1);
    for (int i = 0; i < m->n_blocks; i++) {
        const ModelBlock *b = &m->blocks[i];
        prepare_conv(m, be, &b->conv1, n), prepare_bn(m, be, &b->conv1, &b->bn1, n, 0, 1);
        prepare_conv_bn(m, be, &b->conv1, n, 0, 1, FUSE_CONV_BN);
        prepare_conv(m, be, &b->conv2, n), prepare_bn(m, be, &b->conv2, &b->bn2, n, 0, 1);
        prepare_conv(m, be, &b->conv3, n), prepare_bn(m, be, &b->conv3, &b->bn3, n, 1, 1);
        if (!b->has_down) prepare_conv_bn(m, be, &b->conv3, n, 1, 1, FUSE_CONV_BN);
        if (block_trains_bn2_into_conv3(m, i)) prepare_conv_bn(m, be, &b->conv3, n, 1, 1, FUSE_BN_CONV_BN);
        prepare_conv_bn(m, be, &b->conv3, n, 0, 1, FUSE_BN_CONV_BACKWARD);
        if (!b->has_down) continue;
        prepare_conv(m, be, &b->down, n);
        // inside bn_add_bn the shortcut's bn has no training call of its own to prepare
        if (!block_ends_fused(be)) prepare_bn(m, be, &b->down, &b->down_bn, n, 0, 0);
    }
}

// What every pass needs besides the model: the step's buffers, the backend and the batch size.
typedef struct Pass {
    Model *m;
    Activations *act;
    Backend *be;
    int n;
} Pass;

static void conv_fwd(const Pass *p, const ConvLayer *l, const void *x, void *y) {
    ConvShape s = at_batch(l, p->n);
    p->be->conv_forward(p->be, &s, p->m->act_dt, x, weight_of(p->m, l->weight), y);
}

// torch.nn.BatchNorm2d's defaults, as torchvision's ResNeXt has them.
#define BN_MOMENTUM 0.1f
#define BN_EPS 1e-5f

// y = relu?(bn(x) + residual?) with batch statistics (train) or running statistics (eval).
static void bn_fwd(const Pass *p, const ModelBnLayer *bn, int rows, int train, const void *x,
                   const void *residual, int relu, void *y) {
    Model *m = p->m;
    float *rm = m->running + bn->stats_offset, *rv = rm + bn->c;
    const float *gamma = master_of(m, bn->gamma), *beta = master_of(m, bn->beta);
    if (train) {
        float *sm = p->act->saved + bn->stats_offset, *si = sm + bn->c;
        p->be->bn_forward_train(p->be, rows, bn->c, m->act_dt, x, residual, relu, gamma, beta, rm, rv,
                                BN_MOMENTUM, BN_EPS, sm, si, y);
    } else {
        p->be->bn_forward_eval(p->be, rows, bn->c, m->act_dt, x, residual, relu, gamma, beta, rm, rv, BN_EPS,
                               y);
    }
}

// The tensors of bn's layer for bn_add_bn_* and conv_bn_forward_train: input x, its parameters, statistics
// and gradients.
static BnArgs bn_args(Model *m, const Activations *act, const ModelBnLayer *bn, const void *x) {
    float *rm = m->running + bn->stats_offset, *sm = act->saved + bn->stats_offset;
    return (BnArgs){.x = x,
                    .gamma = master_of(m, bn->gamma),
                    .beta = master_of(m, bn->beta),
                    .running_mean = rm,
                    .running_var = rm + bn->c,
                    .save_mean = sm,
                    .save_invstd = sm + bn->c,
                    .dgamma = grad_of(m, bn->gamma),
                    .dbeta = grad_of(m, bn->beta)};
}

// Convolution l into y_conv, then y = relu?(bn(y_conv) + residual?): in training one conv_bn_forward_train,
// which may take the batch norm's statistics from the convolution's epilogue.
static void conv_bn_fwd(const Pass *p, const ConvLayer *l, const ModelBnLayer *bn, int train, const void *x,
                        const void *residual, int relu, void *y_conv, void *y) {
    if (!train) {
        conv_fwd(p, l, x, y_conv);
        bn_fwd(p, bn, rows_of(l, p->n), 0, y_conv, residual, relu, y);
        return;
    }
    ConvShape s = at_batch(l, p->n);
    const BnArgs args = bn_args(p->m, p->act, bn, y_conv);
    p->be->conv_bn_forward_train(p->be, &s, p->m->act_dt, x, weight_of(p->m, l->weight), &args, residual,
                                 relu, BN_MOMENTUM, BN_EPS, y_conv, y);
}

// Training: bn_in + ReLU over x into b_out, convolution l of it into y_conv, then y = relu?(bn(y_conv) +
// residual?), in one bn_conv_bn_forward_train, which need not write b_out (its reader, l's backward,
// recomputes it: only for a block that recomputes its bn outputs).
static void bn_conv_bn_fwd(const Pass *p, const ModelBnLayer *bn_in, const void *x, void *b_out,
                           const ConvLayer *l, const ModelBnLayer *bn, const void *residual, int relu,
                           void *y_conv, void *y) {
    ConvShape s = at_batch(l, p->n);
    const BnArgs in_args = bn_args(p->m, p->act, bn_in, x), args = bn_args(p->m, p->act, bn, y_conv);
    p->be->bn_conv_bn_forward_train(p->be, &in_args, b_out, &s, p->m->act_dt, weight_of(p->m, l->weight),
                                    &args, residual, relu, BN_MOMENTUM, BN_EPS, y_conv, y);
}

// A downsampling block's end: y = relu(bn_a(x_a) + bn_b(x_b)), in one op in training where the backend has
// it; else bn_b's output goes to b_out and is bn_a's residual.
static void bn_add_bn_fwd(const Pass *p, const ModelBnLayer *bn_a, const ModelBnLayer *bn_b, int rows,
                          int train, const void *x_a, const void *x_b, void *b_out, void *y) {
    if (!train || !block_ends_fused(p->be)) {
        bn_fwd(p, bn_b, rows, train, x_b, NULL, 0, b_out);
        bn_fwd(p, bn_a, rows, train, x_a, b_out, 1, y);
        return;
    }
    const BnArgs a = bn_args(p->m, p->act, bn_a, x_a), b = bn_args(p->m, p->act, bn_b, x_b);
    p->be->bn_add_bn_forward_train(p->be, rows, bn_a->c, p->m->act_dt, &a, &b, 1, BN_MOMENTUM, BN_EPS, b_out,
                                   y);
}

static PoolShape stem_pool_shape(const Model *m, int n) {
    PoolShape p = {.n = n,
                   .h = m->stem.shape.out_h,
                   .w = m->stem.shape.out_w,
                   .c = m->stem.shape.c_out,
                   .k = 3,
                   .stride = 2,
                   .pad = 1};
    p.out_h = (p.h + 2 * p.pad - p.k) / p.stride + 1;
    p.out_w = (p.w + 2 * p.pad - p.k) / p.stride + 1;
    return p;
}

static const void *block_input(const Activations *act, int i) {
    return i == 0 ? act->stem_pool : act->blocks[i - 1].out;
}

static void check_batch(const Activations *act, const ModelBatch *b) {
    AMP_ASSERT(b->n >= 1 && b->n <= act->max_batch, "batch %d outside 1..%d", b->n, act->max_batch);
    AMP_ASSERT(b->images_dt == DTYPE_U8 || b->images_dt == DTYPE_F32, "batch images must be u8 or fp32");
}

void model_forward(Model *m, Activations *act, Backend *be, const ModelBatch *b, int train) {
    check_batch(act, b);
    Pass p = {m, act, be, b->n};
    int n = b->n;
    size_t pixels = (size_t)n * m->cfg.image_size * m->cfg.image_size;
    be->input_normalize(be, pixels, b->images_dt, b->images, &b->affine, m->act_dt, act->input);
    if (b->mix) be->batch_mix(be, m->act_dt, act->input, n, m->cfg.image_size, m->cfg.image_size, 3, b->mix);
    conv_fwd(&p, &m->stem, act->input, act->stem_a);
    bn_fwd(&p, &m->stem_bn, rows_of(&m->stem, n), train, act->stem_a, NULL, 1, act->stem_b);
    PoolShape ps = stem_pool_shape(m, n);
    be->maxpool_forward(be, &ps, m->act_dt, act->stem_b, act->stem_pool);
    for (int i = 0; i < m->n_blocks; i++) {
        const ModelBlock *bl = &m->blocks[i];
        BlockActs *ba = &act->blocks[i];
        const void *in = block_input(act, i);
        conv_bn_fwd(&p, &bl->conv1, &bl->bn1, train, in, NULL, 1, ba->a1, ba->b1);
        conv_fwd(&p, &bl->conv2, ba->b1, ba->a2);
        if (train && block_trains_bn2_into_conv3(m, i)) {
            bn_conv_bn_fwd(&p, &bl->bn2, ba->a2, ba->b2, &bl->conv3, &bl->bn3, in, 1, ba->a3, ba->out);
            continue;
        }
        bn_fwd(&p, &bl->bn2, rows_of(&bl->conv2, n), train, ba->a2, NULL, 1, ba->b2);
        if (!bl->has_down) {
            conv_bn_fwd(&p, &bl->conv3, &bl->bn3, train, ba->b2, in, 1, ba->a3, ba->out);
            continue;
        }
        conv_fwd(&p, &bl->conv3, ba->b2, ba->a3);
        conv_fwd(&p, &bl->down, in, ba->down_a);
        bn_add_bn_fwd(&p, &bl->bn3, &bl->down_bn, rows_of(&bl->conv3, n), train, ba->a3, ba->down_a,
                      ba->down_b, ba->out);
    }
    be->avgpool_forward(be, n, m->final_hw, m->fc_in, m->act_dt, act->blocks[m->n_blocks - 1].out,
                        act->pooled);
    be->linear_forward(be, n, m->fc_in, m->cfg.num_classes, m->act_dt, act->pooled,
                       weight_of(m, m->fc_weight), weight_of(m, m->fc_bias), act->logits);
}

void model_loss(Model *m, Activations *act, Backend *be, const ModelBatch *b, float smoothing,
                const float *scale, float seed_factor) {
    check_batch(act, b);
    DType logits_dt = autocast_dtype(OP_LINEAR, m->amp_dt);
    be->softmax_xent(be, b->n, m->cfg.num_classes, logits_dt, act->logits, b->labels, b->mix, smoothing,
                     act->loss, act->dlogits, scale, seed_factor);
}

// ---- backward -----------------------------------------------------------------------------------

typedef struct BackwardCtx {
    Pass p;
    int accumulate;
    GradReadyFn ready;
    void *ready_ctx;
} BackwardCtx;

static void notify(BackwardCtx *c, int param) {
    if (c->ready) c->ready(c->ready_ctx, &c->p.m->params.items[param]);
}

// Backward of a conv: filter gradient (ready at once), and, when dx is given, the data gradient.
static void conv_bwd(BackwardCtx *c, const ConvLayer *l, const void *x, const void *dy, void *dx,
                     int dx_accumulate) {
    ConvShape s = at_batch(l, c->p.n);
    Model *m = c->p.m;
    Backend *be = c->p.be;
    be->conv_backward_filter(be, &s, m->act_dt, x, dy, grad_of(m, l->weight), c->accumulate);
    notify(c, l->weight);
    if (dx) be->conv_backward_data(be, &s, m->act_dt, dy, weight_of(m, l->weight), dx, dx_accumulate);
}

static void bn_bwd(BackwardCtx *c, const ModelBnLayer *bn, int rows, const void *x, const void *y,
                   const void *dy, int relu, void *dx, void *d_residual) {
    Model *m = c->p.m;
    const float *sm = c->p.act->saved + bn->stats_offset, *si = sm + bn->c;
    c->p.be->bn_backward(c->p.be, rows, bn->c, m->act_dt, x, y, dy, relu, master_of(m, bn->gamma), sm, si, dx,
                         0, grad_of(m, bn->gamma), grad_of(m, bn->beta), c->accumulate, d_residual);
    notify(c, bn->gamma);
    notify(c, bn->beta);
}

// Backward of bn_add_bn_fwd: d(x_a) -> dx_a, d(x_b) -> dx_b (which may be dy); scratch takes the residual's
// gradient where the backend has no fused op.
static void bn_add_bn_bwd(BackwardCtx *c, const ModelBnLayer *bn_a, const ModelBnLayer *bn_b, int rows,
                          const void *x_a, const void *x_b, const void *y, const void *dy, void *dx_a,
                          void *dx_b, void *scratch) {
    Backend *be = c->p.be;
    if (!block_ends_fused(be)) {
        bn_bwd(c, bn_a, rows, x_a, y, dy, 1, dx_a, scratch);
        bn_bwd(c, bn_b, rows, x_b, NULL, scratch, 0, dx_b, NULL);
        return;
    }
    const BnArgs a = bn_args(c->p.m, c->p.act, bn_a, x_a), b = bn_args(c->p.m, c->p.act, bn_b, x_b);
    be->bn_add_bn_backward(be, rows, bn_a->c, c->p.m->act_dt, &a, &b, y, dy, 1, dx_a, dx_b, c->accumulate,
                           scratch);
    notify(c, bn_a->gamma), notify(c, bn_a->beta);
    notify(c, bn_b->gamma), notify(c, bn_b->beta);
}

// Backward of bn + ReLU (over bn_x into y) and the 1x1 convolution l that reads y: l's filter gradient, then
// the data gradient through l and bn in one backend op: bn_x's gradient -> dx (which may be dy), scratch
// taking y's.
static void bn_conv_bwd(BackwardCtx *c, const ModelBnLayer *bn, const ConvLayer *l, const void *bn_x,
                        const void *y, const void *dy, void *scratch, void *dx) {
    conv_bwd(c, l, y, dy, NULL, 0);
    Model *m = c->p.m;
    Backend *be = c->p.be;
    ConvShape s = at_batch(l, c->p.n);
    const BnArgs a = bn_args(m, c->p.act, bn, bn_x);
    be->bn_conv_backward_data(be, &s, m->act_dt, dy, weight_of(m, l->weight), &a, y, scratch, dx,
                              c->accumulate);
    notify(c, bn->gamma);
    notify(c, bn->beta);
}

// bn's forward output (bn + ReLU, no residual) again into y, from the statistics its forward saved.
static void bn_recompute(BackwardCtx *c, const ModelBnLayer *bn, int rows, const void *x, void *y) {
    Model *m = c->p.m;
    const float *sm = c->p.act->saved + bn->stats_offset, *si = sm + bn->c;
    c->p.be->bn_forward_saved(c->p.be, rows, bn->c, m->act_dt, x, 1, master_of(m, bn->gamma),
                              master_of(m, bn->beta), sm, si, y);
}

// The block's gradients: dout (its output's, the next block's d_in) is read by bn3's backward and then
// holds the downsample's, conv3's and conv2's data gradients in turn (activations.c sizes it); d_tmp
// carries the gradient down the bn layers; d_in receives the residual's gradient and then conv1's
// (accumulated). All three sit above this block's activations. A block that recomputes its bn outputs
// writes b2, then b1, just before their first reader.
static void block_backward(BackwardCtx *c, const ModelBlock *b, const BlockActs *ba, const void *in,
                           void *dout, int recompute) {
    int n = c->p.n;
    int rows_out = rows_of(&b->conv3, n);
    void *d_in = ba->d_in, *t = ba->d_tmp;
    if (b->has_down) {
        // bn3 + downsample bn (+ relu): d_a3 -> t, d_down_a -> dout (d_in: the residual's gradient, if kept)
        bn_add_bn_bwd(c, &b->bn3, &b->down_bn, rows_out, ba->a3, ba->down_a, ba->out, dout, t, dout, d_in);
        conv_bwd(c, &b->down, in, dout, d_in, 0);  // d_in = down's
    } else {
        bn_bwd(c, &b->bn3, rows_out, ba->a3, ba->out, dout, 1, t, d_in);  // d_a3 -> t; the residual's -> d_in
    }
    if (recompute) bn_recompute(c, &b->bn2, rows_of(&b->conv2, n), ba->a2, ba->b2);
    bn_conv_bwd(c, &b->bn2, &b->conv3, ba->a2, ba->b2, t, dout, t);  // d_b2 -> dout, d_a2 -> t
    if (recompute) bn_recompute(c, &b->bn1, rows_of(&b->conv1, n), ba->a1, ba->b1);
    conv_bwd(c, &b->conv2, ba->b1, t, dout, 0);                                   // d_b1 -> dout
    bn_bwd(c, &b->bn1, rows_of(&b->conv1, n), ba->a1, ba->b1, dout, 1, t, NULL);  // d_a1 -> t
    conv_bwd(c, &b->conv1, in, t, d_in, 1);                                       // d_in += conv1's
}

void model_backward(Model *m, Activations *act, Backend *be, const ModelBatch *b, int accumulate,
                    GradReadyFn ready, void *ctx) {
    check_batch(act, b);
    int n = b->n;
    BackwardCtx c = {.p = {m, act, be, n}, .accumulate = accumulate, .ready = ready, .ready_ctx = ctx};
    DType dt = m->act_dt;
    be->linear_backward(be, n, m->fc_in, m->cfg.num_classes, dt, act->pooled, weight_of(m, m->fc_weight),
                        act->dlogits, act->dpooled, grad_of(m, m->fc_weight), grad_of(m, m->fc_bias),
                        accumulate);
    notify(&c, m->fc_weight);
    notify(&c, m->fc_bias);
    be->avgpool_backward(be, n, m->final_hw, m->fc_in, dt, act->dpooled, act->d_top);
    void *dout = act->d_top;
    for (int i = m->n_blocks - 1; i >= 0; i--) {
        block_backward(&c, &m->blocks[i], &act->blocks[i], block_input(act, i), dout,
                       model_block_recomputes_bn(m, i));
        dout = act->blocks[i].d_in;
    }
    // stem: maxpool -> bn+relu -> conv (the image needs no gradient)
    PoolShape ps = stem_pool_shape(m, n);
    be->maxpool_backward(be, &ps, dt, act->stem_b, act->stem_pool, dout, act->d_stem_b);
    bn_bwd(&c, &m->stem_bn, rows_of(&m->stem, n), act->stem_a, act->stem_b, act->d_stem_b, 1, act->d_stem_a,
           NULL);
    conv_bwd(&c, &m->stem, act->input, act->d_stem_a, NULL, 0);
}

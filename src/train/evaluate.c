#include "train/evaluate.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/pixels.h"

void evaluate_average_over_ranks(float *values, size_t n, Backend *be, Comm *comm) {
    if (comm->size == 1) return;
    size_t bytes = n * sizeof(float);
    float *host = xcalloc(n ? n : 1, sizeof(float));
    be->to_host(be, host, values, bytes);
    comm->allreduce_sum(comm, host, n, DTYPE_F32);
    for (size_t i = 0; i < n; i++) host[i] /= (float)comm->size;
    be->to_device(be, values, host, bytes);
    free(host);
}

void evaluate_sync_bn_stats(Model *m, Backend *be, Comm *comm) {
    evaluate_average_over_ranks(m->running, m->stats_numel, be, comm);
}

// Top-1 and top-5 hits of one row of logits.
// A row with a NaN logit ranks nothing (NaN compares false both ways, so it would count as a hit):
// it is a miss.
static void count_hits(const float *row, int classes, int label, double *top1, double *top5) {
    for (int c = 0; c < classes; c++)
        if (isnan(row[c])) return;
    int better = 0;
    for (int c = 0; c < classes; c++)
        if (row[c] > row[label] || (row[c] == row[label] && c < label)) better++;
    *top1 += better == 0;
    *top5 += better < 5;
}

void evaluate_layout(Evaluator *ev, const Model *m, Activations *act, int batch, int train_side) {
    ev->own_side = ev->val_set && ev->val_set->side != train_side;
    if (!ev->own_side) return;
    model_view_at_side(&ev->view, m, ev->val_set->side);
    act->reserve_bytes = activations_arena_bytes(&ev->view, batch);
}

void evaluate_share_buffers(Evaluator *ev, Activations *act, int batch) {
    if (ev->own_side) activations_share(&ev->view_act, &ev->view, batch, act);
}

void evaluate_free(Evaluator *ev, Backend *be) {
    if (!ev->own_side) return;
    activations_free(&ev->view_act, be);
    model_view_free(&ev->view);
    ev->own_side = 0;
}

EvalRecord evaluate_run(Evaluator *ev, Model *m, Activations *act, Backend *be, Comm *comm, int epoch,
                        long step) {
    EvalRecord r = {.epoch = epoch, .step = step};
    const Dataset *val = ev->val_set;
    if (!val) return r;
    evaluate_sync_bn_stats(m, be, comm);
    if (ev->own_side) m = &ev->view, act = &ev->view_act;
    int b = act->max_batch, classes = m->cfg.num_classes, world = comm->size;
    size_t image_bytes = dataset_image_bytes(val);
    uint8_t *images = xcalloc((size_t)b * image_bytes, 1);
    int32_t *labels = xcalloc((size_t)b, sizeof(int32_t)), *indices = xcalloc((size_t)b, sizeof(int32_t));
    float *logits_host = xcalloc((size_t)b * classes, sizeof(float));
    float *logits_f32 = be->alloc(be, (size_t)b * classes * sizeof(float));
    double sums[4] = {0};  // loss*count, top1, top5, count
    const PixelAffine affine = pixel_affine_of(&val->norm);
    for (int first = comm->rank; first < val->size && !(ev->stop && *ev->stop);) {
        int count = 0;
        for (; count < b && first < val->size; first += world) indices[count++] = first;
        dataset_get_batch(val, indices, count, 0, images, labels);
        be->to_device(be, act->images, images, (size_t)count * image_bytes);
        be->to_device(be, act->labels, labels, (size_t)count * sizeof(int32_t));
        ModelBatch batch = {.images = act->images,
                            .images_dt = DTYPE_U8,
                            .affine = affine,
                            .labels = act->labels,
                            .n = count};
        model_forward(m, act, be, &batch, 0);
        model_loss(m, act, be, &batch, 0.0f, NULL, 0.0f);  // plain cross-entropy: no smoothing, no mixing
        float loss;
        be->to_host(be, &loss, act->loss, sizeof loss);
        be->cast(be, logits_f32, DTYPE_F32, act->logits, m->act_dt, (size_t)count * classes);
        be->to_host(be, logits_host, logits_f32, (size_t)count * classes * sizeof(float));
        sums[0] += (double)loss * count;
        for (int i = 0; i < count; i++)
            count_hits(logits_host + (size_t)i * classes, classes, labels[i], &sums[1], &sums[2]);
        sums[3] += count;
    }
    float sums32[4] = {(float)sums[0], (float)sums[1], (float)sums[2], (float)sums[3]};
    comm->allreduce_sum(comm, sums32, 4, DTYPE_F32);
    r.samples = (long)sums32[3];
    if (r.samples > 0)
        r.loss = sums32[0] / sums32[3], r.top1 = sums32[1] / sums32[3], r.top5 = sums32[2] / sums32[3];
    be->free(be, logits_f32);
    free(images), free(labels), free(indices), free(logits_host);
    return r;
}

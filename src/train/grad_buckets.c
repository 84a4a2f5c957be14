#include "train/grad_buckets.h"

#include <stdlib.h>

#include "core/bf16.h"
#include "core/check.h"

void buckets_init(GradBuckets *gb, Model *m, Backend *be, Comm *comm, double first_mb, double bucket_mb) {
    const ParamRegistry *reg = &m->params;
    size_t elem = dtype_size(m->act_dt);
    size_t first_cap = (size_t)(first_mb * 1048576.0 / elem), cap = (size_t)(bucket_mb * 1048576.0 / elem);
    if (first_cap < 1) first_cap = 1;
    if (cap < 1) cap = 1;
    // Parameters sorted by offset = backward order.
    int *order = xcalloc((size_t)reg->count, sizeof *order);
    for (int i = 0; i < reg->count; i++) order[i] = i;
    for (int i = 1; i < reg->count; i++)
        for (int j = i; j > 0 && reg->items[order[j]].offset < reg->items[order[j - 1]].offset; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    gb->items = xcalloc((size_t)reg->count, sizeof *gb->items);
    gb->bucket_of_param = xcalloc((size_t)reg->count, sizeof *gb->bucket_of_param);
    gb->count = 0;
    GradBucket *cur = NULL;
    for (int k = 0; k < reg->count; k++) {
        const ParamInfo *p = &reg->items[order[k]];
        size_t limit = cur == gb->items ? first_cap : cap;
        if (!cur || cur->end - cur->begin >= limit) {
            cur = &gb->items[gb->count++];
            cur->begin = p->offset;
        }
        cur->end = p->offset + p->numel;
        cur->numel += p->numel;
        gb->bucket_of_param[order[k]] = (int)(cur - gb->items);
    }
    gb->items[gb->count - 1].end = reg->padded_numel;
    for (int b = 0; b + 1 < gb->count; b++)
        gb->items[b].end = gb->items[b + 1].begin;  // gaps belong to a bucket
    free(order);
    gb->comm = comm, gb->be = be, gb->model = m;
}

void buckets_begin(GradBuckets *gb, int armed, GradInjection inject) {
    gb->armed = armed;
    gb->inject = inject;
    for (int b = 0; b < gb->count; b++) gb->items[b].pending = gb->items[b].numel, gb->items[b].reduced = 0;
}

// Writes the poison into the first element of bucket 0, converted on the host (_Float16 and bf16_from_float
// round to nearest even and overflow to inf, as the kernels do) and sent without waiting for the device.
static void inject_poison(GradBuckets *gb) {
    Model *m = gb->model;
    void *dst = (char *)m->grads + gb->items[0].begin * dtype_size(m->act_dt);
    const float value = (float)gb->inject.value;
    if (m->act_dt == DTYPE_F16) {
        const _Float16 bits = (_Float16)gb->inject.value;
        gb->be->upload_async(gb->be, dst, &bits, sizeof bits);
    } else if (m->act_dt == DTYPE_BF16) {
        const uint16_t bits = bf16_from_float(value);
        gb->be->upload_async(gb->be, dst, &bits, sizeof bits);
    } else {
        gb->be->upload_async(gb->be, dst, &value, sizeof value);
    }
    gb->inject.active = 0;
}

static void bucket_reduce(GradBuckets *gb, int b) {
    GradBucket *bk = &gb->items[b];
    if (b == 0 && gb->inject.active) inject_poison(gb);
    size_t elem = dtype_size(gb->model->act_dt);
    gb->comm->allreduce_sum(gb->comm, (char *)gb->model->grads + bk->begin * elem, bk->end - bk->begin,
                            gb->model->act_dt);
    bk->reduced = 1;
}

void buckets_on_grad_ready(void *ctx, const ParamInfo *param) {
    GradBuckets *gb = ctx;
    if (!gb->armed) return;
    int index = (int)(param - gb->model->params.items);
    GradBucket *bk = &gb->items[gb->bucket_of_param[index]];
    AMP_ASSERT(bk->pending >= param->numel, "gradient of %s reported twice in one step", param->name);
    bk->pending -= param->numel;
    // Buckets are reduced strictly in order, so every rank issues the same collective sequence.
    for (int b = 0; b < gb->count && gb->items[b].pending == 0; b++)
        if (!gb->items[b].reduced) bucket_reduce(gb, b);
}

void buckets_finish(GradBuckets *gb) {
    for (int b = 0; b < gb->count; b++)
        if (!gb->items[b].reduced) bucket_reduce(gb, b);
}

void buckets_free(GradBuckets *gb) {
    free(gb->items);
    free(gb->bucket_of_param);
    gb->items = NULL;
    gb->bucket_of_param = NULL;
}

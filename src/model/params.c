#include "model/params.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

int params_add(ParamRegistry *reg, const char *name, ParamKind kind, int ndim, const int64_t *shape) {
    if (reg->count == reg->capacity) {
        reg->capacity = reg->capacity ? 2 * reg->capacity : 64;
        reg->items = realloc(reg->items, (size_t)reg->capacity * sizeof *reg->items);
        AMP_ASSERT(reg->items, "out of host memory for the parameter registry");
    }
    AMP_ASSERT(strlen(name) < PARAM_NAME_MAX, "parameter name too long: %s", name);
    ParamInfo *p = &reg->items[reg->count];
    memset(p, 0, sizeof *p);
    strcpy(p->name, name);
    p->kind = kind;
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= (size_t)shape[i];
    }
    p->offset = (size_t)-1;
    reg->numel += p->numel;
    return reg->count++;
}

void params_place(ParamRegistry *reg, int index) {
    ParamInfo *p = &reg->items[index];
    AMP_ASSERT(p->offset == (size_t)-1, "parameter %s placed twice", p->name);
    p->offset = reg->padded_numel;
    reg->padded_numel += (p->numel + PARAM_ALIGN - 1) / PARAM_ALIGN * PARAM_ALIGN;
}

int params_find(const ParamRegistry *reg, const char *name) {
    for (int i = 0; i < reg->count; i++)
        if (strcmp(reg->items[i].name, name) == 0) return i;
    return -1;
}

void params_free(ParamRegistry *reg) {
    free(reg->items);
    memset(reg, 0, sizeof *reg);
}

// Copies a conv weight between our (C_out, kh, kw, C_in/g) order and torch's (C_out, C_in/g, kh, kw);
// to_torch selects the direction. Other tensors have one layout and are copied as they are.
static void permute_layout(const ParamInfo *info, const float *src, float *dst, int to_torch) {
    if (info->kind != PARAM_CONV_WEIGHT) {
        memcpy(dst, src, info->numel * sizeof(float));
        return;
    }
    int64_t co = info->shape[0], ci = info->shape[1], kh = info->shape[2], kw = info->shape[3];
    for (int64_t o = 0; o < co; o++)
        for (int64_t i = 0; i < ci; i++)
            for (int64_t y = 0; y < kh; y++)
                for (int64_t x = 0; x < kw; x++) {
                    int64_t torch_index = ((o * ci + i) * kh + y) * kw + x,
                            our_index = ((o * kh + y) * kw + x) * ci + i;
                    if (to_torch)
                        dst[torch_index] = src[our_index];
                    else
                        dst[our_index] = src[torch_index];
                }
}

void params_to_torch_layout(const ParamInfo *info, const float *ours, float *torch_order) {
    permute_layout(info, ours, torch_order, 1);
}

void params_from_torch_layout(const ParamInfo *info, const float *torch_order, float *ours) {
    permute_layout(info, torch_order, ours, 0);
}

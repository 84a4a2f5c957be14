// params.h - the parameter registry: every learnable tensor with its torchvision name and shape, and its
// place in the flat buffers.
//
// All parameters live in flat buffers of `padded_numel` elements: fp32 masters, the 16-bit compute copy,
// gradients (in the autocast dtype under AMP) and momentum share one layout. Offsets follow BACKWARD order
// (the classifier first, the stem last), so gradients fill the buffer front to back while backward runs and a
// bucket can be reduced as soon as its range is complete. Each tensor starts on a 64-element boundary (128
// bytes in fp16 or bf16) for aligned vector loads and cuDNN; the gaps are zero in every buffer and stay zero.
#ifndef AMPTRAIN_PARAMS_H
#define AMPTRAIN_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#define PARAM_NAME_MAX 64
#define PARAM_ALIGN 64

typedef enum {
    PARAM_CONV_WEIGHT,  // stored (C_out, kh, kw, C_in/g); torchvision (C_out, C_in/g, kh, kw)
    PARAM_BN_WEIGHT,
    PARAM_BN_BIAS,
    PARAM_FC_WEIGHT,  // (out, in) as torchvision
    PARAM_FC_BIAS,
} ParamKind;

typedef struct ParamInfo {
    char name[PARAM_NAME_MAX];  // torchvision state_dict key, e.g. "layer1.0.conv2.weight"
    ParamKind kind;
    int ndim;
    int64_t shape[4];  // torchvision's shape
    size_t numel;
    size_t offset;  // elements into the flat buffers
} ParamInfo;

typedef struct ParamRegistry {
    ParamInfo *items;  // in torchvision state_dict order
    int count, capacity;
    size_t numel;         // true parameter count (25,028,904 for resnext50_32x4d)
    size_t padded_numel;  // length of the flat buffers
} ParamRegistry;

// Adds a tensor (offset unassigned) and returns its index.
int params_add(ParamRegistry *reg, const char *name, ParamKind kind, int ndim, const int64_t *shape);
// Places tensor `index` next in the flat layout; call in backward order, once per tensor.
void params_place(ParamRegistry *reg, int index);
// Index of the tensor with this name, or -1.
int params_find(const ParamRegistry *reg, const char *name);
void params_free(ParamRegistry *reg);

// Torchvision (C_out, C_in/g, kh, kw) <-> our (C_out, kh, kw, C_in/g) for conv weights; plain copy for
// everything else. fp32, n = info->numel.
void params_to_torch_layout(const ParamInfo *info, const float *ours, float *torch_order);
void params_from_torch_layout(const ParamInfo *info, const float *torch_order, float *ours);

#endif

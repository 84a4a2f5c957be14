// conv_choice.h - a convolution direction's timed choice as its kernel-choice record holds it
// (kernels/cuda/cudnn_conv.cu writes and reads these; core/kernel_cache.h keeps them): the route, and the
// input channels the direction runs padded to. Plain C, so the text's rules are tested on the CPU.
//
// The text, exactly:
//     gemm                                       the 1x1 convolution as one cuBLAS GEMM
//     own                                        amptrain's stem kernels (never padded)
//     cudnn algo=A math=M workspace=W            cuDNN's algorithm A under math type M (lowercase letters
//                                                and '-'), needing W bytes of workspace
// each but own optionally followed by " padded=N" (N > 0). A and W are decimal digits only.
#ifndef AMPTRAIN_CONV_CHOICE_H
#define AMPTRAIN_CONV_CHOICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CONV_ROUTE_CUDNN = 0, CONV_ROUTE_GEMM, CONV_ROUTE_OWN } ConvRoute;

#define CONV_CHOICE_MATH_MAX 32   // bytes of a math type's name, its NUL included
#define CONV_CHOICE_TEXT_MAX 128  // bytes of a record's text, its NUL included

typedef struct ConvChoice {
    ConvRoute route;
    int algo;                         // CONV_ROUTE_CUDNN: cuDNN's algorithm
    char math[CONV_CHOICE_MATH_MAX];  // CONV_ROUTE_CUDNN: its math type's name
    size_t workspace;                 // CONV_ROUTE_CUDNN: its workspace in bytes
    int padded;                       // 0, or the input channels the direction runs padded to
} ConvChoice;

// c as its record's text, into out (CONV_CHOICE_TEXT_MAX bytes); returns out.
const char *conv_choice_format(const ConvChoice *c, char out[CONV_CHOICE_TEXT_MAX]);
// 0 when text is exactly a record as the header says (then *c holds it), -1 otherwise (*c undefined).
int conv_choice_parse(const char *text, ConvChoice *c);

#ifdef __cplusplus
}
#endif

#endif

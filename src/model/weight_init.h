// weight_init.h - a fresh model's weights, drawn on the host: torchvision's ResNeXt initialisation
// (kaiming_normal_(mode="fan_out", nonlinearity="relu") for convolutions, batch norm 1 and 0, nn.Linear's
// default U(-1/sqrt(in), 1/sqrt(in)) for the classifier).
//
// A ResNeXt-50 holds 25 M weights; drawn one after the other they take about a second, the largest part of
// a start-up whose kernel choices come from the cache. So each tensor is cut into chunks of
// WEIGHT_INIT_CHUNK values, chunk k of parameter p draws from its own random stream (seed, p, k), and
// threads take chunks in any order: the weights depend on the seed only, not on how many threads drew them.
#ifndef AMPTRAIN_WEIGHT_INIT_H
#define AMPTRAIN_WEIGHT_INIT_H

#include <stdint.h>

#include "model/resnext.h"

#define WEIGHT_INIT_CHUNK (1 << 16)

// master (m->params.padded_numel fp32, zeroed by the caller: biases and alignment gaps stay 0) <- the
// initial weights of seed, drawn by up to `threads` threads (<= 0: the CPUs this process may use).
void weight_init_draw(const Model *m, float *master, uint64_t seed, int threads);

#endif

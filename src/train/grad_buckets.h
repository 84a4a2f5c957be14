// grad_buckets.h - the flat gradient buffer cut into buckets that are summed across ranks as soon as
// backward has produced them (docs/design.md, "Data parallel").
//
// Buckets are ranges of the flat buffer at parameter boundaries, in backward order: the first one small
// (dist.first_bucket_mb, like DDP's 1 MB) so communication starts early, the rest dist.bucket_mb. Each
// bucket counts the gradient elements still to come; when the count reaches zero it is reduced (NCCL on
// its own stream, overlapping the rest of backward; MPI in place). Every rank reduces the buckets in
// the same order, so collectives always match.
#ifndef AMPTRAIN_GRAD_BUCKETS_H
#define AMPTRAIN_GRAD_BUCKETS_H

#include <stddef.h>

#include "dist/comm.h"
#include "model/resnext.h"

typedef struct GradBucket {
    size_t begin, end;  // element range of the flat buffer
    size_t numel;       // gradient elements inside (gaps excluded)
    size_t pending;     // elements not yet final in this step
    int reduced;
} GradBucket;

// Poison for tests (debug.inject_*): written into the first gradient element of bucket 0 on this rank,
// after backward produced it and before it is summed, in the given step.
typedef struct GradInjection {
    int active;
    double value;
} GradInjection;

typedef struct GradBuckets {
    GradBucket *items;
    int count;
    int *bucket_of_param;  // (registry count) bucket index of each parameter
    Comm *comm;
    Backend *be;
    Model *model;
    int armed;  // reduce when complete (last micro-step of a step only)
    GradInjection inject;
} GradBuckets;

void buckets_init(GradBuckets *gb, Model *m, Backend *be, Comm *comm, double first_mb, double bucket_mb);
// Starts a micro-step: armed=1 on the last micro-step of an optimizer step.
void buckets_begin(GradBuckets *gb, int armed, GradInjection inject);
// The GradReadyFn for model_backward (ctx = the GradBuckets).
void buckets_on_grad_ready(void *ctx, const ParamInfo *param);
// Reduces every bucket not reduced yet (a rank whose last micro-batch was empty), in order.
void buckets_finish(GradBuckets *gb);
void buckets_free(GradBuckets *gb);

#endif

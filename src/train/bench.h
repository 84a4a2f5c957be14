// bench.h - `amptrain --bench`: the throughput benchmark, measured the way
// bench/torch_baseline.py measures PyTorch, so the two JSON lines compare directly.
//
// Synthetic data: a few batches made once and kept resident in backend memory (as the baseline keeps
// its tensors on the GPU), warm-up steps, then timed steps each ended by a device sync; the median step
// time gives images/s. Peak memory is the backend's accounting (like torch.cuda.max_memory_allocated).
#ifndef AMPTRAIN_BENCH_H
#define AMPTRAIN_BENCH_H

#include "core/backend.h"
#include "config/config.h"
#include "dist/comm.h"

typedef struct BenchOptions {
    int warmup;    // untimed steps first (cuDNN autotuning, allocator warm-up)
    int steps;     // timed steps
    int nbatches;  // resident batches cycled through
    const char *tag;
    int profile;  // the last timed step inside the backend's profiler window (--bench-profile)
} BenchOptions;

// Prints one JSON line on rank 0; returns the process exit code.
int bench_run(const Config *cfg, Backend *be, Comm *comm, Comm *grad_comm, const BenchOptions *opt);

#endif

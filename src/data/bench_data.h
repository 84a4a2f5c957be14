// bench_data.h - `amptrain CONFIG --bench-data`: the input pipeline alone, without a model.
//
// The loader (data.workers threads; 0: every online core) assembles `batches` training micro-batches of
// data.batch_size for this rank, as the trainer would (decode, crop, resize, flip); the first batch is
// untimed. With data.decode on the device (dataset_decode_on_device) the loader only makes the jobs and
// the backend decodes each batch into one of two device buffers, as the trainer's input slots take them
// (the time includes waiting for each batch to be in device memory). For the JPEG sources it also times libjpeg-turbo's decode alone on one thread over the first
// samples' bytes already in memory: the per-core rate that says how many cores a GPU's appetite needs.
#ifndef AMPTRAIN_BENCH_DATA_H
#define AMPTRAIN_BENCH_DATA_H

#include <stdio.h>

#include "config/config.h"
#include "data/dataset.h"

// Measures over ds (the training split of cfg), as rank `rank` of `world`, and writes one JSON line to
// out (NULL: measure only, for the ranks that do not print). decoder: the backend that decodes (NULL: the
// loader's threads decode on the host).
void bench_data_run(const Config *cfg, const Dataset *ds, Backend *decoder, int world, int rank, int batches,
                    FILE *out);

#endif

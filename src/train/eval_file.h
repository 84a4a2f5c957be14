// eval_file.h - --eval: a weights file (model_file.h) evaluated once on the validation split, nothing
// trained and no checkpoint written.
//
// Every rank reads the file and takes its shard of the split (samples rank, rank + world, ...), as a run's
// evaluation does (evaluate.h); the sums are reduced over ranks and rank 0 prints one line per set of
// weights: the model's, then, when the file holds them, its EMA weights (module.*). The model is built at
// the validation images' side; a classifier for another class count is refused (model.num_classes must
// match the file). `metrics` ("" : none) gets one record per line, appended (metrics.h).
#ifndef AMPTRAIN_EVAL_FILE_H
#define AMPTRAIN_EVAL_FILE_H

#include "config/config.h"
#include "core/backend.h"
#include "dist/comm.h"

// 0, or on every rank the failing rank's code with its message printed: 2 for no validation split, data
// that does not open or differs between ranks, a file refused (model_file.h), a metrics file that cannot
// be written.
int eval_file_run(const Config *cfg, const char *path, const char *metrics, Backend *be, Comm *comm);

#endif

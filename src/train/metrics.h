// metrics.h - what a run reports: the JSON-lines metrics file, the progress bar (terminal) or plain
// periodic lines (pipes, files), and the final summary. Rank 0 only; other ranks get a silent sink.
#ifndef AMPTRAIN_METRICS_H
#define AMPTRAIN_METRICS_H

#include <stdio.h>

#include "core/config.h"

typedef struct StepRecord {
    long step;           // optimizer steps done (1-based after the first step)
    int epoch;           // 1-based: the epoch this step belonged to (trainer_last_epoch)
    double loss;         // rank 0's local mean loss of its last micro-batch (unscaled)
    double lr;
    double scale;        // loss scale after the step's update
    long skipped_total;  // steps skipped so far
    int skipped;         // this step was skipped (inf/NaN verdict)
    double images_per_s; // global, over the last logging interval
    double step_ms;      // wall time per step over the last logging interval
    double memory_mib;   // peak backend memory (MiB)
} StepRecord;

typedef struct EvalRecord {
    int epoch;                // 1-based: the epoch just finished (trainer_last_epoch)
    long step;
    double loss, top1, top5;  // over the whole validation split, all ranks
    long samples;
} EvalRecord;

typedef struct Metrics {
    FILE *jsonl;         // NULL: no metrics file
    int bar;             // 1: redraw a progress bar on stdout
    int active;          // rank 0
    long total_steps;
    double start_time;
    int bar_drawn;       // a bar line is on screen (end it before printing other lines)
} Metrics;

// path "" : no file. Creates the parent folder. Returns 0, or 1 with a message on stderr.
// progress "auto" draws a bar only for a single process on a terminal: mpirun hands its ranks a
// pseudo-terminal even when its own output goes to a file.
int metrics_open(Metrics *mt, const LogConfig *log, int rank, int world_size, long total_steps);
void metrics_step(Metrics *mt, const StepRecord *r);
void metrics_eval(Metrics *mt, const EvalRecord *r);
// A line of text that must not collide with the bar.
void metrics_note(Metrics *mt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void metrics_close(Metrics *mt);

// Seconds on a monotonic clock.
double metrics_now(void);
// mkdir -p of the folder that holds `path`; 0 on success.
int metrics_make_parent_dir(const char *path);

#endif

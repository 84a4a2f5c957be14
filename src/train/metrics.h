// metrics.h - what a run reports: the JSON-lines metrics file, the progress bar (terminal) or plain
// periodic lines (pipes, files), and the final summary. Rank 0 only; other ranks get a silent sink.
#ifndef AMPTRAIN_METRICS_H
#define AMPTRAIN_METRICS_H

#include <stdio.h>

#include "config/config.h"

typedef struct StepRecord {
    long step;    // optimizer steps done (1-based after the first step)
    int epoch;    // 1-based: the epoch this step belonged to (trainer_last_epoch)
    double loss;  // rank 0's local mean loss of its last micro-batch (unscaled)
    double lr;
    double scale;         // loss scale after the step's update
    long skipped_total;   // steps skipped so far
    int skipped;          // this step was skipped (inf/NaN verdict)
    double images_per_s;  // global, over the last logging interval
    double step_ms;       // wall time per step over the last logging interval
    double memory_mib;    // peak backend memory (MiB)
    double data_wait_ms;  // time per step the loop waited for the loader, over the last logging interval
    int has_grad_norm;    // train.clip_grad_norm is on: ...
    double grad_norm;     // ... the step's global norm of the unscaled, summed gradients, before clipping
} StepRecord;

typedef struct EvalRecord {
    int epoch;  // 1-based: the epoch just finished (trainer_last_epoch)
    long step;
    double loss, top1, top5;  // over the whole validation split, all ranks
    long samples;
    const char *file;  // --eval: the weights file evaluated (NULL: the run's own evaluation)
    int ema;           // --eval: the file's EMA weights (model_file.h), not its model's
    int has_ema;       // train.ema_decay is on and the average was evaluated too: ...
    double ema_loss, ema_top1, ema_top5;  // ... its loss, top-1 and top-5 on the same split
} EvalRecord;

// The end of a run, as the summary line on stdout and as the metrics file's last record
// ({"summary":true,...}: what launch/compare-amp reads).
typedef struct SummaryRecord {
    const char *outcome;  // "done", "stopped" (by a signal), "diverged"
    const char *reason;   // why it diverged ("" otherwise)
    long steps;           // optimizer steps done
    int epoch;
    int world;              // ranks
    int amp;                // amp.enabled
    const char *amp_dtype;  // under AMP amp.dtype ("float16", "bfloat16"); unused otherwise
    double seconds;         // wall time of the training loop, evaluation included
    double images_per_s;    // global images trained / seconds
    const char *backend;    // "cpu", "cuda"
    double peak_mib;        // rank 0's peak backend memory
    long skipped_total;
    double scale;            // final loss scale
    double final_loss;       // rank 0's last logged training loss
    const EvalRecord *eval;  // NULL: no evaluation ran
    double startup_s;  // trainer_init's start to the end of start-up (build; on CUDA also cuDNN's search
                       // and the capture), of which:
    double build_s;    //   the model build (data opened, weights made)
    double choices_s;  //   the backend's kernel choices (none on the CPU); the rest: buffers, first steps
    double search_s;   // of the start-up, the seconds spent timing kernels (CUDA; the rest came from
                       // cudnn.cache or rank 0)
    double total_s;    // trainer_init's start to the loop's end (seconds counts from the loop's start)
    double steady_images_per_s;  // after start-up
    double data_wait_ms;         // per step, waiting for the loader
    long graph_steps;            // steps replayed from the CUDA graph
} SummaryRecord;

// The first record of each start ({"header":true,...}): a resumed run appends one where it continues.
typedef struct HeaderRecord {
    const char *version;  // AMPTRAIN_VERSION
    const char *host;     // rank 0's host name
    int world;            // ranks
    const char
        *config_hash;  // the digest of checkpoint.dir/config.yaml's text (core/digest.h), 16 hex digits
    long start_step;   // steps done before this start (0 fresh, the checkpoint's on a resume)
    const char *resumed_from;  // the checkpoint resumed, "" on a fresh start
} HeaderRecord;

typedef struct Metrics {
    FILE *jsonl;       // NULL: no metrics file
    const char *path;  // log.metrics, for messages
    int failed;        // errno of the first failed write to jsonl (0: none); nothing is written after it
    int bar;           // 1: redraw a progress bar on stdout
    int active;        // rank 0
    long total_steps;
    double start_time;
    int bar_drawn;  // a bar line is on screen (end it before printing other lines)
} Metrics;

// path "" : no file. The folder must exist (outputs_prepare made and probed it). The file stays locked
// (flock) while it is open: a second run writing it is refused (2). append: a resumed run continues the
// file of the run it resumes (records after the checkpoint's step, written by the run that died, stay: a
// reader takes the last record of each step); a last line without its newline (a run killed mid-write,
// a full disk) is moved to <path>.partial first, so the next record starts a line of its own. Otherwise
// the file is emptied. Returns 0, or 2 with one line in err.
// progress "auto" draws a bar only for a single process on a terminal: mpirun hands its ranks a
// pseudo-terminal even when its own output goes to a file.
int metrics_open(Metrics *mt, const LogConfig *log, int rank, int world_size, long total_steps, int append,
                 char *err, size_t err_len);
// Every record carries "time": the wall clock (Unix seconds, to the millisecond) when it was written.
void metrics_header(Metrics *mt, const HeaderRecord *r);
// One record each; a number that is not finite is written as JSON null, named with its value in the
// record's "not_finite" object. An evaluation whose loss is not finite claims no accuracy (top1 and
// top5 null, "loss not finite"; the printed line says "not finite"); the same for the EMA's ema_loss,
// ema_top1 and ema_top5. A step record carries grad_norm when clipping is on.
void metrics_step(Metrics *mt, const StepRecord *r);
void metrics_eval(Metrics *mt, const EvalRecord *r);
void metrics_summary(Metrics *mt, const SummaryRecord *r);
// 1 after a write to the metrics file failed (reported on stderr when it happened).
int metrics_failed(const Metrics *mt);
// A line of text that must not collide with the bar.
void metrics_note(Metrics *mt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void metrics_close(Metrics *mt);

#endif

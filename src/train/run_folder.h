// run_folder.h - a run folder belongs to one run: checkpoint.dir with its checkpoints, the config the
// run was started with and (usually) log.metrics.
//
// Lock: rank 0 holds flock(LOCK_EX) on checkpoint.dir/.amptrain.lock for its whole life; the file says
// "pid host" of the holder. A second live run in the folder is refused (exit 2, naming the holder). The
// kernel drops a flock with its process, so the lock of a run that died is free and simply taken.
// Claim: a fresh start refuses a folder that holds an earlier run's checkpoint, and a log.metrics that
// holds records, unless checkpoint.overwrite (then that run's checkpoints are removed once this one has
// started, and the metrics file is emptied) or checkpoint.resume auto.
// auto: the newest valid checkpoint in checkpoint.dir (last.safetensors first, else the other amptrain
// checkpoints newest first by modification time), or a fresh start when there is none: the same command
// starts a job and continues it after a requeue.
// Paths: an output that is the same file as the config file, the resume file, model.init (on a fresh start)
// or another output is refused.
// Record: checkpoint.dir/config.yaml holds the merged config of the latest start (as --print-config
// prints it), unless it is the config file given.
#ifndef AMPTRAIN_RUN_FOLDER_H
#define AMPTRAIN_RUN_FOLDER_H

#include <stddef.h>

#include "config/config.h"

#define RUN_FOLDER_LOCK ".amptrain.lock"
#define RUN_FOLDER_CONFIG "config.yaml"
#define RUN_FOLDER_CHECKPOINT "last.safetensors"  // the checkpoint the trainer writes

// Takes (dry_run: only tries) the lock of folder `dir`. A folder that does not exist yet has no holder:
// 0, and outputs_prepare takes the lock once it has made the folder. Taking it again for the folder
// already held is a no-op. Returns 0, or 2 with one line in err (held by a live run, or no lock file can
// be made).
int run_folder_lock(const char *dir, int dry_run, char *err, size_t err_len);

// checkpoint.resume auto: the path of the checkpoint to resume from in dir into path, or "" when there
// is none to resume (a fresh start). Damaged checkpoints are passed over with a warning each.
void run_folder_find_resume(const char *dir, char *path, size_t cap);

// A fresh start without checkpoint.overwrite: 0 when nothing of an earlier run is in its way, else 2
// with one line in err naming the file and the two ways on (resume, or overwrite).
int run_folder_check_fresh(const Config *cfg, char *err, size_t err_len);

// 0 when no output (log.metrics, and in checkpoint.dir the checkpoint, the lock and config.yaml) is the
// same file as the config file, the resume file (resume, may be ""), model.init (when resume is "") or
// another output; else 2 with one line in err naming both.
int run_folder_check_paths(const Config *cfg, const char *resume, char *err, size_t err_len);

// Once the run has started (rank 0): writes config_text to checkpoint.dir/config.yaml and, with
// checkpoint.overwrite, removes the earlier run's checkpoints. Failures are warnings.
void run_folder_begin(const Config *cfg, const char *config_text);

#endif

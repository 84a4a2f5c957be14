// outputs.h - the run's output paths, proven before the first step, so that a folder that cannot be
// made, a name too long or a read-only disk ends the run at start-up (exit 2), not after it trained.
//
// checkpoint.dir is created (mkdir -p) and a probe is written under the longest name a checkpoint
// takes there (its temp file, last.safetensors.tmp.<pid>), fsynced, renamed, removed, and the folder
// fsynced: every operation of the atomic checkpoint write, once; then the folder's lock is taken
// (run_folder.h). log.metrics gets the same in its folder (unless it is a device such as /dev/null, which
// is opened as it is), and an existing file must not be locked by another run. Temp files that a dead
// run left in checkpoint.dir (*.safetensors.tmp.<pid> whose process is gone) are removed.
// Rank 0 writes every output, so only rank 0 calls this.
#ifndef AMPTRAIN_OUTPUTS_H
#define AMPTRAIN_OUTPUTS_H

#include <stddef.h>

#include "config/config.h"

// mkdir -p of `dir`; 0, or -1 with errno set (ENOTDIR when it exists but is no folder). *created (may be
// NULL): the length of the prefix of `dir` that names the topmost folder this call created, 0 if none.
int outputs_make_dir(const char *dir, size_t *created);

// flock(LOCK_EX | LOCK_NB) on fd, log.metrics open for writing: held until fd is closed. 0, or 2 with one
// line in err when another run holds the file.
int outputs_lock_metrics(int fd, const char *path, char *err, size_t err_len);

// Proves checkpoint.dir and log.metrics writable and clears dead runs' temp files. dry_run: the same
// proof, but folders it created are removed again and leftovers are only reported, so the disk is as it
// was. Returns 0, or 2 with one line in err naming the key, the path and what failed.
int outputs_prepare(const Config *cfg, int dry_run, char *err, size_t err_len);

// Descriptors a run needs after start-up, beyond those it holds once its data is open (webdataset keeps
// every shard open): one per loader thread (an image file each) and OUTPUTS_WRITE_DESCRIPTORS for a
// checkpoint's write (its temp file, the folder's fsync) and the metrics file, with room to spare.
#define OUTPUTS_WRITE_DESCRIPTORS 8
// Called once the data is open: 0 when RLIMIT_NOFILE leaves the descriptors the run will open
// (loader_threads + OUTPUTS_WRITE_DESCRIPTORS more than it holds now), else 2 with one line in err saying
// how many it holds, needs and may have (ulimit -n), so a run cannot train for days and then fail to
// write its checkpoint.
int outputs_check_descriptors(int loader_threads, char *err, size_t err_len);

#endif

// stall_run.h - the stop tests' runs (tests/unit/test_images_stop.c, tests/mpi/test_images_stop_ranks.c):
// an ImageFolder of solid JPEGs, the image a rank's micro-batch reads first, and a command started in the
// background in whose amptrain processes that image's read never comes back (tests/stall_read.c
// preloaded), as on a hung file system.
#ifndef AMPTRAIN_STALL_RUN_H
#define AMPTRAIN_STALL_RUN_H

#include <stddef.h>
#include <sys/types.h>

// The data and the sample order of a stop test's runs.
typedef struct StallData {
    const char *root;  // root/train/{a,b}/NN.jpg
    int per_class;     // images per class
    int world, batch, accum;
    long seed;  // train.seed
} StallData;

// Makes d's folder afresh: solid 40x30 images, each its own colour.
void stall_folder_make(const StallData *d);

// The end of the path ("/root/train/a/07.jpg") of an image in micro-batch `micro` of step `step` of epoch 0
// of `rank` that no earlier batch of the run reads. The folder's order is sorted (class, name): sample i is
// image i % per_class of class i / per_class.
void stall_image(const StallData *d, int rank, int step, int micro, char *out, size_t cap);

// A sample of rank 0's micro-batch `micro` of step `step` of epoch 0 whose successor in the folder's order
// (the sample that replaces it when the decoder refuses it) no batch reads before step `step + ahead`: the
// ends of both paths, as stall_image's. Neither is sample 0 (the data's probe reads it at start-up).
void stall_refused_and_successor(const StallData *d, int step, int micro, int ahead, char *refused,
                                 char *successor, size_t cap);

// The environment that preloads the stall on `image`, as assignments each after `prefix` ("" for env(1),
// "-x " for mpiexec). An ASan build wants its runtime first among the libraries, and the preload comes
// before it: ASAN_OPTIONS gains verify_asan_link_order=0.
void stall_env(const char *image, const char *prefix, char *out, size_t cap);

// Runs `command` through sh in the background, in a process group of its own, stdout and stderr to log;
// returns its pid (the command's own: sh execs it).
pid_t stall_start(const char *command, const char *log);

// The wait status of pid once it has exited, within `seconds`; else its process group is killed and the
// test fails.
int stall_wait_exit(pid_t pid, double seconds);

#endif

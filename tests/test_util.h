// test_util.h - helpers shared by the Check suites: random fills, error norms, running the CLI.
#ifndef AMPTRAIN_TEST_UTIL_H
#define AMPTRAIN_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "train/trainer.h"

// Every test binary links this file, and before main it makes AMPTRAIN_TEST_SCRATCH (its folder under
// build/test-scratch) the working directory: the relative paths the suites write (checkpoints, configs,
// logs) land there however the binary was started, never in the checkout or the caller's folder. A binary
// not started by an MPI launcher empties the folder first, so each run of a suite starts from nothing (a
// run folder an earlier run left would be refused as another run's). XDG_CACHE_HOME names the folder too,
// so the kernel-choice cache (cudnn.cache auto) of every run a suite starts stays in it.

// Deterministic uniform floats in [lo, hi) from a seed (splitmix64).
void tu_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);

// ||a - b|| / ||b|| over n floats; returns +inf if either contains a NaN or inf.
double tu_rel_error(const float *a, const float *b, size_t n);

// Runs `AMPTRAIN_BIN args` through /bin/sh in the current folder; captures stdout+stderr (up to cap
// bytes, NUL-terminated) and returns the exit status (or -1 if it did not exit normally).
int tu_run_cli(const char *args, char *output, size_t cap);

// Runs a shell command line as it is (stderr not redirected); output and result as tu_run_cli.
int tu_run_shell(const char *command, char *output, size_t cap);

// Copies the safetensors file src to dst tensor by tensor, with the metadata keys an amptrain checkpoint
// has (checkpoint/checkpoint_meta.h; the writer adds a data_checksum of the copy). edit (NULL: none) may
// change each tensor's shape and data (dtype: a StDtype) before it is written; meta (NULL: none) is
// NULL-terminated "key", "value" pairs that replace values.
typedef void (*TuTensorEdit)(const char *name, int dtype, int64_t *shape, void *data, void *ctx);
void tu_copy_checkpoint(const char *src, const char *dst, TuTensorEdit edit, void *ctx,
                        const char *const *meta);

// 1 when two safetensors files hold the same tensors (names, dtypes, shapes, bits); the test fails when
// either cannot be read.
int tu_checkpoints_equal(const char *a_path, const char *b_path);

// The `step` metadata of an amptrain checkpoint; the test fails when the file cannot be read.
long tu_checkpoint_step(const char *path);

// Lines of a text file that begin with prefix (0 when the file does not exist).
int tu_count_lines(const char *path, const char *prefix);

// Tensor `name` of safetensors file f read whole, which must be of `dtype` (a StDtype); the test fails when it
// is missing or not. malloc'd (free it); *numel (may be NULL) its element count, shape (may be NULL,
// ST_MAX_DIMS entries) its dims.
struct SafetensorsFile;
void *tu_st_read(struct SafetensorsFile *f, const char *name, int dtype, size_t *numel, int64_t *shape);

// n values of dtype dt (a DType) in a backend's memory, as host fp32: malloc'd (free it).
struct Backend;
float *tu_backend_floats(struct Backend *be, const void *src, int dt, size_t n);

// Writes text to a file (overwrites); returns the path for convenience.
const char *tu_write_file(const char *path, const char *text);
// The whole file, malloc'd with a NUL after it (free it), its size in *len (may be NULL); NULL when it
// cannot be opened.
char *tu_read_file(const char *path, size_t *len);

// Removes the MPI launcher's variables (OMPI_*, PMIX_*, PMI_*, MV2_*) from the environment: a test that
// runs inside a launch of its own and starts a nested mpiexec (or a process that must run single) would
// otherwise make it join the outer launch.
void tu_forget_launcher(void);

// Every suite's main ends in tu_run_suite, after its own set-up (a communicator, backends) and any skip.
// Runs a Check suite and returns the process exit status (EXIT_SUCCESS, or EXIT_FAILURE when a test
// failed). fork = 0 for suites that hold a CUDA context or an MPI communicator (neither survives fork());
// fork = 1 leaves it to Check, which forks each test unless CK_FORK=no is in the environment.
struct Suite;
int tu_run_suite(struct Suite *suite, int fork);

// The exit code of a skipped suite, which ctest reports as "Skipped" (SKIP_RETURN_CODE in
// tests/tests.cmake), never as passed.
#define TU_SKIP_EXIT 77
// A suite that cannot run here: prints one line `suite: skipped: reason` and returns TU_SKIP_EXIT for
// main to return.
int tu_skip(const char *suite, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// For suites that start MPI jobs of their own: a job cannot nest in a launch of several ranks, so there
// the suite skips (returns tu_skip's code); in a launch of one rank or none it calls tu_forget_launcher
// and returns 0.
int tu_leave_launch(const char *suite);

// Agreement across the ranks of a communicator, for verdicts asserted on every rank at once:
// 1 on every rank when ok holds on every rank (MAX of the "bad" flag).
struct Comm;
int tu_on_every_rank(struct Comm *comm, int ok);
// Every rank's `bytes` from mine into all (ranks x bytes), on every rank: one broadcast per root.
void tu_gather_bytes(struct Comm *comm, const void *mine, size_t bytes, void *all);

// FNV-1a 64 over bytes, continuing from h (start with TU_FNV_OFFSET): digests of states and batches.
#define TU_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t tu_fnv1a(uint64_t h, const void *data, size_t bytes);

// One optimizer step as trainer_run takes it, without the loader thread: this rank's blocks of the
// trainer's current (epoch, step) from its own sampler (every micro-step), then the position moves on.
// Returns the digest of what this rank trained on: every micro-batch's images and labels, in order.
struct Trainer;
uint64_t tu_train_step(struct Trainer *t);
void tu_train_steps(struct Trainer *t, int n);

// A config from the defaults plus overrides ("section.key=value"), NULL-terminated (NULL: none); the
// test fails if it does not load.
void tu_config(Config *cfg, const char *const *overrides);

// A trainer on the CPU backend and a single-rank communicator, from tu_config's overrides; the test fails
// if trainer_init does. tu_trainer_stop frees all three.
typedef struct TuTrainer {
    Config cfg;
    Backend *be;
    Comm *comm;
    Trainer t;
} TuTrainer;
void tu_trainer_start(TuTrainer *r, const char *const *overrides);
void tu_trainer_stop(TuTrainer *r);

// A fault scenario of the calling test binary, run as a job of its own (test_comm_faults.c,
// test_nccl_faults.c): the binary is both the suite and, given a scenario name, the program under test.
typedef struct TuRun {
    int status;  // exit status, or -1 if the command did not exit normally
    double seconds;
    char output[16384];  // stdout + stderr, for the assertions (printed only when one fails)
} TuRun;

// `mpiexec -np ranks SELF scenario` (ranks 0: SELF scenario, no launcher), bounded by `timeout 120`;
// mpiexec_args (may be "") go to mpiexec before -np. Prints one line: scenario, status, seconds.
void tu_run_scenario(TuRun *run, int ranks, const char *mpiexec_args, const char *scenario);

// The line rank 0 of a two-rank job on this host prints when collective `what` of step `step` timed out
// after `seconds` (src/dist/watchdog.c): it names both ranks and their host.
void tu_timeout_line(char *buf, size_t n, const char *what, long step, double seconds);

// Kills (SIGKILL) the processes still running `SELF scenario` - ranks the job should have ended - and
// returns how many there were.
int tu_end_scenario_leftovers(const char *scenario);

// 1 if the file exists.
int tu_file_exists(const char *path);

// GPU suites without a usable GPU: tu_skip. With AMPTRAIN_REQUIRE_GPU=1 in the environment (the device
// machine) a missing GPU is a failure instead: prints why and returns 1.
int tu_skip_gpu(const char *suite, const char *why);
// 1 when AMPTRAIN_REQUIRE_GPU=1: a suite that could still run its CPU part must fail without a GPU.
int tu_gpu_required(void);

struct TTest;
// The main of a suite that holds amptrain to a file PyTorch wrote on the device machine: the file's path is
// in environment variable `env` (made by tests/parity/`script`), without it the suite skips; cpu_test runs
// on every machine that has the file, cuda_test where a GPU is usable (a missing one fails under
// AMPTRAIN_REQUIRE_GPU=1). *path receives the file's path. Returns the exit code.
int tu_parity_main(const char *suite, const char *env, const char *script, const char **path,
                   const struct TTest *cpu_test, const struct TTest *cuda_test, int timeout_s);

#endif

// main.c - the amptrain command line: arguments, config, backend and communicator, then train,
// benchmark, or just describe the run.
//
// Exit codes: 0 success (also after SIGTERM/SIGINT/SIGUSR1: the step is finished and a checkpoint written),
//             1 runtime failure (a library call failed, a peer rank died, no GPU when cuda was asked for,
//               the metrics file could not be written),
//             2 usage or configuration error (nothing was written): also data, a resume file or an output
//               folder found unusable at start-up, a run folder another run holds or an earlier run's
//               files a fresh start would replace (run_folder.h), and ranks given different configs.
//             3 a collective waited past dist.timeout_s.
//             4 the run diverged (train/divergence.h): stopped, the reason on stderr and in the metrics
//               summary, last.safetensors the newest finite state.
// Start-up is agreed over ranks (dist/agree.h): every rank parses its command line and loads the config,
// keeping its message, then each stage (same mode, config, same config, backend, data, same data, resume
// or model.init, outputs) ends with every rank knowing whether any failed, so all exit together with the
// failing rank's message.
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amp/autocast.h"
#include "train/checkpoint.h"
#include "checkpoint/model_file.h"
#include "core/backend.h"
#include "core/check.h"
#include "config/config.h"
#include "core/digest.h"
#include "core/kernel_cache.h"
#include "core/log.h"
#include "data/bench_data.h"
#include "data/dataset.h"
#include "dist/agree.h"
#include "dist/comm.h"
#include "dist/dist.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/activations.h"
#include "model/resnext.h"
#include "train/bench.h"
#include "train/eval_file.h"
#include "train/outputs.h"
#include "train/run_folder.h"
#include "train/trainer.h"

static const char usage_text[] =
    "usage: amptrain [options] CONFIG [section.key=value ...]\n"
    "       mpirun -np N amptrain [options] CONFIG [section.key=value ...]\n"
    "\n"
    "Trains a ResNeXt image classifier with automatic mixed precision (fp16 convolutions and matmuls,\n"
    "fp32 master weights, dynamic loss scaling) on one GPU, on N GPUs data-parallel under mpirun (one\n"
    "rank per GPU, gradients summed with NCCL), or on the CPU reference backend when there is no GPU.\n"
    "On CUDA the whole training step is captured once as a CUDA graph and replayed (train.cuda_graph),\n"
    "and batches go up as bytes on a copy stream while the step before runs.\n"
    "\n"
    "CONFIG is a YAML file (configs/ has ready ones; docs/config.md lists every key). Any key can be\n"
    "overridden after it, e.g.  amp.enabled=false  train.lr=0.05  model.layers=[1,1,1,1]\n"
    "\n"
    "options:\n"
    "  -h, --help          this text\n"
    "  --version           print the version and the backends this build has\n"
    "  --print-config      print the merged, validated config as YAML and exit\n"
    "  --dry-run           validate, check the data, the resume file or model.init (loaded as a start would)\n"
    "                      and the output folders (leaving nothing behind), print parameters, multiply-adds\n"
    "                      and memory; no training; exits 2 where a start would\n"
    "  --eval              evaluate only: the weights of checkpoint.resume=FILE (auto: the newest checkpoint\n"
    "                      in checkpoint.dir), else of model.init=FILE, once over the validation split (under\n"
    "                      mpirun each rank its shard): one line of loss, top-1 and top-5, and one more for\n"
    "                      the file's EMA weights (module.*) when it has them. No checkpoint, no run folder;\n"
    "                      a metrics record is appended to log.metrics only when the command line sets it\n"
    "  --bench             benchmark: warm-up, then median step time, images/s and peak memory as one JSON\n"
    "                      line (synthetic data resident on the device, like bench/torch_baseline.py)\n"
    "  --bench-data        the input pipeline alone: the loader's data.workers threads (0: as training would\n"
    "                      get them) make --bench-steps training batches; images/s, threads and\n"
    "                      libjpeg-turbo's decode-only rate per core as one JSON line (no model; a GPU\n"
    "                      only when data.decode puts the JPEG decode on it)\n"
    "  --bench-steps N     timed steps of --bench, batches of --bench-data (default 30)\n"
    "  --bench-warmup N    untimed steps of --bench (default 8)\n"
    "  --bench-tag TEXT    a label copied into the JSON line\n"
    "  --bench-profile     run the last timed step of --bench inside a profiler window (CUDA), for\n"
    "                      ncu --profile-from-start off; dev/kernel_profile.py sums ncu's CSV by kernel\n"
    "\n"
    "examples:\n"
    "  amptrain configs/tiny.yaml                          # CPU demo: a small ResNeXt learns in under 20 s on 2 cores\n"
    "  amptrain configs/seed_resnext50.yaml amp.enabled=false\n"
    "  mpirun -np 2 amptrain configs/resnext50_32x4d_imagenet.yaml --bench\n"
    "  amptrain configs/tiny.yaml checkpoint.resume=runs/tiny/last.safetensors\n"
    "  amptrain configs/tiny.yaml checkpoint.resume=auto   # continue runs/tiny if it holds a checkpoint, else start\n"
    "  amptrain configs/tiny.yaml checkpoint.overwrite=true   # start over in runs/tiny\n"
    "  amptrain configs/tiny.yaml model.init=resnext.safetensors   # fine-tune from a torchvision state_dict\n"
    "  amptrain --eval configs/tiny.yaml checkpoint.resume=runs/tiny/last.safetensors\n"
    "  tools/fashion-mnist data/fashion-mnist && amptrain configs/fashion_mnist.yaml   # a real dataset\n"
    "\n"
    "signals: SIGTERM, SIGINT or SIGUSR1 finish the step, write a checkpoint and exit 0; under Open MPI's\n"
    "mpirun send SIGUSR1 (mpirun forwards it to every rank; SIGTERM makes mpirun itself exit 1). SIGPIPE is\n"
    "ignored: a closed stdout (amptrain ... | head) loses the printed lines, not the run or its checkpoint\n"
    "\n"
    "environment: AMPTRAIN_CONV_LOG=1 prints each convolution's algorithm choice (cuDNN's candidates with\n"
    "their times, or the cuBLAS GEMM route of a 1x1 convolution) and, with cudnn.batch_norm=auto, each batch-norm\n"
    "shape's timed forward/backward pairs and each 1x1 convolution's batch norm timed with and without its\n"
    "statistics from the convolution (conv_bn lines) to stderr; AMPTRAIN_DECODE_LOG=1 (with data.decode=device) prints where\n"
    "each batch's decode spends its time\n"
    "\n"
    "exit codes: 0 done, 1 runtime failure, 2 usage or config error, 3 a collective waited past dist.timeout_s,\n"
    "  4 the run diverged (amp.max_consecutive_skips skipped steps in a row, a loss scale below amp.min_scale,\n"
    "  or weights, momentum or BN statistics not finite): stopped, last.safetensors the newest finite state\n";

typedef struct Cli {
    const char *config_path;
    char **overrides;
    int n_overrides;
    int help, version, print_config, dry_run, bench, bench_data, eval;
    int metrics_given;  // log.metrics set on the command line (--eval writes only there)
    BenchOptions bench_opt;
} Cli;

static int parse_positive(const char *flag, const char *text, int *out) {
    char *end;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || *end || v < 1 || v > 1000000) {
        fprintf(stderr, "amptrain: %s needs a positive integer (got '%s')\n", flag, text ? text : "");
        return 2;
    }
    *out = (int)v;
    return 0;
}

// Returns -1 to continue, or an exit code.
static int parse_args(int argc, char **argv, Cli *cli) {
    memset(cli, 0, sizeof *cli);
    cli->bench_opt = (BenchOptions){.warmup = 8, .steps = 30, .nbatches = 4, .tag = ""};
    cli->overrides = calloc((size_t)argc, sizeof(char *));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli->help = 1;
            return 0;
        } else if (!strcmp(a, "--version")) {
            cli->version = 1;
            return 0;
        } else if (!strcmp(a, "--print-config")) {
            cli->print_config = 1;
        } else if (!strcmp(a, "--dry-run")) {
            cli->dry_run = 1;
        } else if (!strcmp(a, "--eval")) {
            cli->eval = 1;
        } else if (!strcmp(a, "--bench")) {
            cli->bench = 1;
        } else if (!strcmp(a, "--bench-profile")) {
            cli->bench_opt.profile = 1;
        } else if (!strcmp(a, "--bench-data")) {
            cli->bench_data = 1;
        } else if (!strcmp(a, "--bench-steps") || !strcmp(a, "--bench-warmup")) {
            int *dst = !strcmp(a, "--bench-steps") ? &cli->bench_opt.steps : &cli->bench_opt.warmup;
            if (parse_positive(a, i + 1 < argc ? argv[i + 1] : NULL, dst)) return 2;
            i++;
        } else if (!strcmp(a, "--bench-tag")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "amptrain: --bench-tag needs a value\n");
                return 2;
            }
            cli->bench_opt.tag = argv[++i];
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "amptrain: unknown option '%s' (see amptrain --help)\n", a);
            return 2;
        } else if (!cli->config_path && !strchr(a, '=')) {
            cli->config_path = a;
        } else if (cli->config_path && strchr(a, '=')) {
            cli->overrides[cli->n_overrides++] = argv[i];
            if (!strncmp(a, "log.metrics=", strlen("log.metrics="))) cli->metrics_given = 1;
        } else {
            fprintf(stderr,
                    "amptrain: unexpected argument '%s': give CONFIG first, then section.key=value "
                    "overrides (see amptrain --help)\n",
                    a);
            return 2;
        }
    }
    if (!cli->config_path) {
        fprintf(stderr, "amptrain: no CONFIG given\n\n%s", usage_text);
        return 2;
    }
    if (cli->eval && (cli->dry_run || cli->bench || cli->bench_data)) {
        fprintf(stderr, "amptrain: --eval evaluates a file; it does not go with %s\n",
                cli->dry_run ? "--dry-run"
                : cli->bench ? "--bench"
                             : "--bench-data");
        return 2;
    }
    return -1;
}

static void print_version(void) {
    int gpus = cuda_visible_device_count();
    printf(
        "amptrain %s (backends: cpu%s; communicators: single%s%s; JPEG decode: host%s; visible GPUs: %d)\n",
        AMPTRAIN_VERSION,
#ifdef AMPTRAIN_HAVE_CUDA
        ", cuda (architectures " AMPTRAIN_CUDA_ARCHITECTURES ")",
#else
        "",
#endif
#ifdef AMPTRAIN_HAVE_MPI
        ", mpi",
#else
        "",
#endif
#ifdef AMPTRAIN_HAVE_NCCL
        ", nccl",
#else
        "",
#endif
#ifdef AMPTRAIN_HAVE_NVJPEG
        ", device (nvJPEG)",
#else
        "",
#endif
        gpus);
}

// What this rank was asked to do, with everything that changes its collective calls, as one line.
static void mode_text(const Cli *cli, int parse_rc, char *out, size_t cap) {
    if (parse_rc > 0)
        snprintf(out, cap, "a command-line error (exit %d)", parse_rc);
    else if (cli->help)
        snprintf(out, cap, "--help");
    else if (cli->version)
        snprintf(out, cap, "--version");
    else if (cli->print_config)
        snprintf(out, cap, "--print-config");
    else if (cli->bench_data)
        snprintf(out, cap, "--bench-data --bench-steps %d", cli->bench_opt.steps);
    else if (cli->bench)
        snprintf(out, cap, "--bench --bench-steps %d --bench-warmup %d%s", cli->bench_opt.steps,
                 cli->bench_opt.warmup, cli->bench_opt.profile ? " --bench-profile" : "");
    else if (cli->eval)
        snprintf(out, cap, "--eval");
    else if (cli->dry_run)
        snprintf(out, cap, "--dry-run");
    else
        snprintf(out, cap, "training");
}

static void print_dry_run(const Config *cfg) {
    Model m, eval;
    ModelConfig at_train_side = cfg->model;
    at_train_side.image_size = cfg->data.train_crop;
    model_init_shapes(&m, &at_train_side, autocast_run_dtype(&cfg->amp));
    // evaluation at data.val_crop lays its own buffers out in the same arena (trainer.h)
    model_view_at_side(&eval, &m, cfg->data.val_crop);
    size_t train_bytes = activations_arena_bytes(&m, cfg->data.batch_size);
    size_t eval_bytes = activations_arena_bytes(&eval, cfg->data.batch_size);
    model_view_free(&eval);
    double acts = (double)(train_bytes > eval_bytes ? train_bytes : eval_bytes);
    // fp32 master and momentum, gradients in the compute dtype, and under AMP the 16-bit compute copy
    double weights = (double)m.params.padded_numel * (8 + dtype_size(m.act_dt) * (cfg->amp.enabled ? 2 : 1));
    printf("model        %s: layers [%d,%d,%d,%d], cardinality %d, base width %d, planes %d, %d classes, "
           "%dx%d input (evaluation %dx%d)\n",
           cfg->model.arch, cfg->model.layers[0], cfg->model.layers[1], cfg->model.layers[2],
           cfg->model.layers[3], cfg->model.cardinality, cfg->model.base_width, cfg->model.planes,
           cfg->model.num_classes, cfg->data.train_crop, cfg->data.train_crop, cfg->data.val_crop,
           cfg->data.val_crop);
    printf("parameters   %zu (%d tensors)\n", m.params.numel, m.params.count);
    printf("multiply-adds per image  %.3f G\n", model_macs_per_image(&m) / 1e9);
    if (cfg->amp.enabled)
        printf("precision    AMP: %s activations and compute weights, fp32 masters%s\n", dtype_name(m.act_dt),
               m.act_dt == DTYPE_BF16 ? ", no loss scaling" : "");
    else
        printf("precision    fp32\n");
    printf(
        "memory per rank (estimate, batch %d): activations and their gradients %.1f MiB, weights+optimizer "
        "%.1f MiB; on CUDA also up to %d MiB of convolution workspace (cudnn.workspace_mb)\n",
        cfg->data.batch_size, acts / 1048576.0, weights / 1048576.0, cfg->cudnn.workspace_mb);
    model_free(&m, NULL);
}

static volatile sig_atomic_t stop_requested = 0;
static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

// The CUDA backend's options from the config's cudnn section. With data.decode: device, CUDA gets its
// largest number of hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS 32, unless the user set it). Beside a
// running training step, nvJPEG's hardware engines took ~50 ms for a batch of 256 (11-13 alone) with CUDA's
// default of 8 queues, whatever the stream and its priority; with 32 the loop on device-decoded JPEGs ran
// ~12% faster and the loop on synthetic data the same (bench/log/2026-12-02.md). cudnn.batch_norm
// auto times, as the convolutions' search does: without cudnn.benchmark a run repeats bitwise.
static CudaOptions cuda_options_from_config(const Config *cfg) {
    const char *bn = cfg->cudnn.batch_norm;
    CudaOptions o = cuda_options_default();
    o.cudnn_benchmark = cfg->cudnn.benchmark;
    o.conv_tf32 = cfg->cudnn.tf32;
    o.matmul_tf32 = cfg->cudnn.matmul_tf32;
    o.conv_workspace_cap = (size_t)cfg->cudnn.workspace_mb << 20;
    const int timed = (!strcmp(bn, "auto") || !strcmp(bn, "unfused")) && cfg->cudnn.benchmark;
    o.batch_norm = !strcmp(bn, "own") ? CUDA_BN_OWN : timed ? CUDA_BN_AUTO : CUDA_BN_CUDNN;
    o.batch_norm_unfused = !strcmp(bn, "unfused");
    o.device_max_connections = !strcmp(cfg->data.decode, "device") ? 32 : 0;
    return o;
}

// The file of timed kernel choices (cudnn.cache) for this rank's backend: rank 0's with cudnn.benchmark (nothing
// is timed without it); the other ranks take rank 0's choices (trainer_init) and never touch the file.
static const char *kernel_choices_file(const Config *cfg, const Comm *comm, char *buf, size_t cap) {
    if (comm->rank != 0 || !cfg->cudnn.benchmark) return NULL;
    const char *path = kernel_cache_path_of(cfg->cudnn.cache, buf, cap);
    if (!path && !strcmp(cfg->cudnn.cache, "auto"))
        log_warn("cudnn.cache auto: no cache folder (XDG_CACHE_HOME and HOME unset, or too long); the kernel "
                 "choices are timed and not kept");
    return path;
}

// Picks this rank's backend, or returns NULL with why set. Every rank makes the same collective calls
// whatever it sees (hosts may differ in GPUs), so the start-up stays in step.
static Backend *select_backend(const Config *cfg, Comm *comm, char *why, size_t cap) {
    const char *want = cfg->backend.device;
    if (!strcmp(want, "cpu")) return cpu_backend_create();
    int gpus = cuda_visible_device_count();
    float any_gpu = gpus > 0;
    comm->allreduce_max_flag(comm, &any_gpu);
    char reason[512] = "no CUDA device is visible";
    if (any_gpu != 0) {
        int device = -1;
        if (comm_check_local_gpus(comm, gpus, cuda_device_identity, &device, why, cap) != 0) return NULL;
        CudaOptions opts = cuda_options_from_config(cfg);
        char cache[CONFIG_PATH_MAX + 64];
        opts.kernel_cache = kernel_choices_file(cfg, comm, cache, sizeof cache);
        Backend *be = cuda_backend_create(device, &opts, reason, sizeof reason);
        if (be) return be;
    }
    if (!strcmp(want, "cuda")) {
        snprintf(why, cap, "backend.device is cuda but the CUDA backend is unavailable: %s", reason);
        return NULL;
    }
    log_info("no GPU (%s): using the CPU reference backend", reason);
    return cpu_backend_create();
}

// Every rank must run the same config: compared key by key with rank 0's (paths included).
static int agree_config(Comm *comm, const Config *cfg) {
    size_t n = config_value_count();
    char(*names)[96] = xcalloc(n, sizeof *names);
    char(*values)[CONFIG_VALUE_MAX] = xcalloc(n, sizeof *values);
    const char **name_list = xcalloc(n, sizeof *name_list), **value_list = xcalloc(n, sizeof *value_list);
    for (size_t i = 0; i < n; i++) {
        config_value_text(cfg, i, names[i], sizeof names[i], values[i], sizeof values[i]);
        name_list[i] = names[i], value_list[i] = values[i];
    }
    int rc = agree_same(comm, "the configs", n, name_list, value_list);
    free(names), free(values), free(name_list), free(value_list);
    return rc;
}

// checkpoint.resume auto: the checkpoint a resume takes from checkpoint.dir into path ("" when there is none),
// found by every rank in its own folder and agreed. 0, or 2 on every rank with the difference printed.
static int find_resume_agreed(const Config *cfg, Comm *comm, char *path, size_t cap) {
    run_folder_find_resume(cfg->checkpoint.dir, path, cap);
    return agree_same(comm, "the checkpoints checkpoint.resume auto chose", 1, (const char *[]){"checkpoint"},
                      (const char *[]){path[0] ? path : "none (a fresh start)"});
}

// The start-up checks a start and --dry-run share (run_folder.h): the folder's lock (rank 0), checkpoint.resume
// auto resolved (every rank in its own checkpoint.dir, then agreed), the outputs' paths and a fresh start's
// claim on the folder (rank 0). run_cfg: cfg with checkpoint.resume resolved.
static int check_start(const Config *cfg, Comm *comm, int dry_run, Config *run_cfg) {
    char err[AGREE_MESSAGE_MAX] = "";
    *run_cfg = *cfg;
    int rc = comm->rank == 0 ? run_folder_lock(cfg->checkpoint.dir, dry_run, err, sizeof err) : 0;
    if ((rc = agree_startup(comm, rc, err)) != 0) return rc;
    const int automatic = !strcmp(cfg->checkpoint.resume, "auto");
    if (automatic) {
        char *resume = run_cfg->checkpoint.resume;
        if ((rc = find_resume_agreed(cfg, comm, resume, sizeof run_cfg->checkpoint.resume)) != 0) return rc;
        struct stat st;
        const char *metrics = cfg->log.metrics;
        const int emptied = stat(metrics, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
        if (!resume[0])
            log_info("checkpoint.resume auto: no checkpoint to resume in %s, so a fresh start%s%s%s",
                     cfg->checkpoint.dir, emptied ? " (log.metrics " : "", emptied ? metrics : "",
                     emptied ? " is emptied)" : "");
    }
    if (comm->rank == 0) {
        rc = run_folder_check_paths(cfg, run_cfg->checkpoint.resume, err, sizeof err);
        if (rc == 0 && !automatic && !run_cfg->checkpoint.resume[0] && !cfg->checkpoint.overwrite)
            rc = run_folder_check_fresh(cfg, err, sizeof err);
    }
    return agree_startup(comm, rc, err);
}

// --dry-run's model.init on a fresh start: read and checked as trainer_init would (every rank), one line.
static int dry_run_init(const Config *cfg, Comm *comm) {
    char err[AGREE_MESSAGE_MAX] = "", line[CONFIG_PATH_MAX + 320];
    Model m;
    model_init_shapes(&m, &cfg->model, autocast_run_dtype(&cfg->amp));
    ModelFile mf;
    int rc = agree_startup(
        comm, model_file_read("model.init", cfg->model.init, &m, 1, 0, &mf, err, sizeof err), err);
    if (rc == 0) rc = model_file_agree(comm, &mf, &m, "the weights model.init loaded");
    if (rc == 0) {
        model_file_describe(&mf, "model.init", cfg->model.init, &m, line, sizeof line);
        log_info("%s", line);
    }
    model_file_free(&mf);
    model_free(&m, NULL);
    return rc;
}

// --dry-run, after check_start: the data opens and the resume file (or model.init) loads and passes every
// check of a start (every rank), the outputs can be written (rank 0: made, probed, then removed again), then
// the description. Nothing is left on disk (so no file-list cache).
static int dry_run(const Config *cfg, Comm *comm) {
    char err[AGREE_MESSAGE_MAX] = "";
    Dataset *train = NULL, *val = NULL;
    int rc = dataset_open_train(&cfg->data, &cfg->model, cfg->train.seed, NULL, &train, err, sizeof err);
    if (rc == 0) rc = dataset_open_val(&cfg->data, &cfg->model, cfg->train.seed, NULL, &val, err, sizeof err);
    rc = agree_startup(comm, rc, err);
    if (rc == 0) rc = trainer_agree_data(comm, train, val);
    if (rc == 0 && cfg->checkpoint.resume[0]) {
        int refused =
            checkpoint_check(cfg->checkpoint.resume, cfg, train, comm->size, comm->rank, err, sizeof err);
        rc = agree_startup(comm, refused ? 2 : 0, err);
    } else if (rc == 0 && cfg->model.init[0]) {
        rc = dry_run_init(cfg, comm);
    }
    if (train) dataset_close(train);
    if (val) dataset_close(val);
    if (rc != 0) return rc;
    if (rc == 0 && comm->rank == 0) rc = outputs_prepare(cfg, 1, err, sizeof err);
    rc = agree_startup(comm, rc, err);
    if (rc == 0 && comm->rank == 0) print_dry_run(cfg);
    return rc;
}

// --bench-data: the training split opened on every rank, then each measures its own shard; rank 0 prints.
// With data.decode on the device, the backend is chosen as training would and decodes.
static int bench_data(const Config *cfg, Comm *comm, int batches) {
    char err[AGREE_MESSAGE_MAX] = "";
    Dataset *ds = NULL;
    Backend *be = NULL;
    int rc = agree_startup(comm,
                           dataset_open_train(&cfg->data, &cfg->model, cfg->train.seed, cfg->checkpoint.dir,
                                              &ds, err, sizeof err),
                           err);
    if (rc == 0) rc = trainer_agree_data(comm, ds, NULL);
    if (rc == 0 && !strcmp(cfg->data.decode, "device")) {
        be = select_backend(cfg, comm, err, sizeof err);
        rc = agree_startup(comm, be ? 0 : 1, err);
        if (rc == 0)
            rc = agree_startup(comm, dataset_decode_on_device(&cfg->data, be, err, sizeof err) < 0 ? 2 : 0,
                               err);
    }
    if (rc == 0)
        bench_data_run(cfg, ds, be, comm->size, comm->rank, batches, comm->rank == 0 ? stdout : NULL);
    // --bench-data makes no checkpoint.dir: a list walked while it was missing is only said not to be cached.
    if (rc == 0) dataset_save_cache(ds, cfg->checkpoint.dir);
    dataset_close(ds);
    if (be) be->destroy(be);
    return rc;
}

static void print_summary(Trainer *t, const Config *cfg) {
    Backend *be = t->be;
    ScalerState st = scaler_read(&t->scaler, be);
    long run_steps = t->step - t->first_step;
    metrics_summary(
        &t->log.metrics,
        &(SummaryRecord){.outcome = t->outcome,
                         .reason = t->div.reason,
                         .steps = t->step,
                         .epoch = trainer_last_epoch(t),
                         .world = t->comm->size,
                         .amp = cfg->amp.enabled,
                         .amp_dtype = cfg->amp.dtype,
                         .seconds = t->train_seconds,
                         .images_per_s = t->train_seconds > 0 ? t->images_seen / t->train_seconds : 0,
                         .backend = be->name,
                         .peak_mib = be->peak_bytes(be) / 1048576.0,
                         .skipped_total = st.skipped_total,
                         .scale = st.scale,
                         .final_loss = t->log.last_loss,
                         .eval = t->eval.has_last ? &t->eval.last : NULL,
                         .startup_s = t->times.startup_s,
                         .build_s = t->times.build_s,
                         .choices_s = t->times.choices_s,
                         .search_s = t->times.search_s,
                         .total_s = t->total_seconds,
                         .steady_images_per_s = t->steady_images_per_s,
                         .data_wait_ms = run_steps > 0 ? 1e3 * t->log.data_wait_total_s / run_steps : 0,
                         .graph_steps = t->graph.replayed});
}

// The run has started (rank 0): checkpoint.dir keeps the merged config (run_folder.h) and the metrics file
// gets the start's header record, whose config_hash is the digest of that text.
static void begin_run(Trainer *t, const Config *cfg) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    AMP_ASSERT(f, "out of host memory printing the config");
    config_print(cfg, f);
    fclose(f);
    run_folder_begin(cfg, text);
    Digest d;
    digest_init(&d);
    digest_add(&d, text, len);
    char hash[17], host[256] = "?";
    digest_hex(digest_end(&d), hash);
    free(text);
    gethostname(host, sizeof host - 1);
    metrics_header(&t->log.metrics, &(HeaderRecord){.version = AMPTRAIN_VERSION,
                                                    .host = host,
                                                    .world = t->comm->size,
                                                    .config_hash = hash,
                                                    .start_step = t->step,
                                                    .resumed_from = t->cfg->checkpoint.resume});
}

// The training run from a checked start: cfg as given, run_cfg with checkpoint.resume resolved. A resume at
// or past the run's end has nothing to train: it says so and ends (0) without a summary or a checkpoint.
static int train(const Config *cfg, const Config *run_cfg, Backend *be, Comm *comm, Comm *grad_comm) {
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    // Open MPI's mpirun turns SIGTERM into an abort (exit 1 whatever the ranks do) but forwards
    // SIGUSR1 to every rank: the stop signal to send mpirun (launch/amptrain-mpirun does).
    sigaction(SIGUSR1, &sa, NULL);
    Trainer t;
    int rc = trainer_init(&t, run_cfg, be, comm, grad_comm);
    if (rc == 0 && t.step >= t.total_steps) {
        log_info("nothing to do: checkpoint at step %ld, run ends at step %ld", t.step, t.total_steps);
    } else if (rc == 0) {
        if (comm->rank == 0) begin_run(&t, cfg);
        rc = trainer_run(&t, &stop_requested);
        if ((rc == 0 || rc == 4) && comm->rank == 0) print_summary(&t, run_cfg);
    }
    trainer_free(&t);
    return rc;
}

// --eval's weights file: checkpoint.resume (auto: as a resume would find it), else model.init, into path.
// 0, or 2 on every rank with the message printed.
static int eval_source(const Config *cfg, Comm *comm, char *path, size_t cap) {
    const char *resume = cfg->checkpoint.resume, *init = cfg->model.init;
    char err[AGREE_MESSAGE_MAX] =
        "--eval needs the weights to evaluate: checkpoint.resume=FILE or model.init=FILE";
    path[0] = '\0';
    if (!strcmp(resume, "auto")) {
        int rc = find_resume_agreed(cfg, comm, path, cap);
        if (rc != 0) return rc;
        snprintf(err, sizeof err,
                 "--eval needs the weights to evaluate: checkpoint.resume auto found no checkpoint "
                 "in %s, and model.init is not set",
                 cfg->checkpoint.dir);
    } else if (resume[0]) {
        snprintf(path, cap, "%s", resume);
    }
    if (path[0] && init[0])
        log_info("model.init %s not read: --eval evaluates checkpoint.resume %s", init, path);
    if (!path[0]) snprintf(path, cap, "%s", init);
    return agree_startup(comm, path[0] ? 0 : 2, err);
}

// The backend and the gradient communicator (not for --eval, which sums on comm alone), agreed over ranks,
// then the benchmark, the evaluation of eval_path, or the training.
static int run(const Cli *cli, const Config *cfg, const Config *run_cfg, const char *eval_path, Comm *comm) {
    char why[AGREE_MESSAGE_MAX] = "";
    Backend *be = select_backend(cfg, comm, why, sizeof why);
    int rc = agree_startup(comm, be ? 0 : 1, why);
    if (rc == 0)
        rc = agree_same(comm, "the backends", 1, (const char *[]){"backend"}, (const char *[]){be->name});
    Comm *grad_comm = comm;
    if (rc == 0 && !cli->eval && comm->size > 1 && strcmp(be->name, "cpu") != 0) {
        grad_comm = comm_nccl_create(comm, cuda_backend_stream(be));
        snprintf(why, sizeof why, "%d ranks on the CUDA backend need NCCL, and this build has none",
                 comm->size);
        rc = agree_startup(comm, grad_comm ? 0 : 1, why);
    }
    if (rc == 0) {
        const DType amp_dt = autocast_run_dtype(&cfg->amp);
        log_info("amptrain %s: %d rank%s, backend %s, %s over %s, %s", AMPTRAIN_VERSION, comm->size,
                 comm->size > 1 ? "s" : "", be->name, cli->eval ? "evaluation sums" : "gradients",
                 grad_comm->name,
                 amp_dt == DTYPE_BF16  ? "AMP (bf16)"
                 : amp_dt == DTYPE_F16 ? "AMP (fp16)"
                                       : "fp32");
        rc = cli->bench  ? bench_run(cfg, be, comm, grad_comm, &cli->bench_opt)
             : cli->eval ? eval_file_run(cfg, eval_path, cli->metrics_given ? cfg->log.metrics : "", be, comm)
                         : train(cfg, run_cfg, be, comm, grad_comm);
    }
    if (grad_comm && grad_comm != comm) grad_comm->destroy(grad_comm);
    if (be) be->destroy(be);
    return rc;
}

int main(int argc, char **argv) {
    // A closed stdout (amptrain ... | head -1) must not kill a run before its checkpoint: a write there
    // fails with EPIPE instead, and the run goes on without its stdout.
    signal(SIGPIPE, SIG_IGN);
    Cli cli;
    int parse_rc = parse_args(argc, argv, &cli), rc = 0;
    static Config cfg;
    // Every rank loads the config and keeps its message: the ranks agree below on who failed.
    char message[AGREE_MESSAGE_MAX] = "";
    if (parse_rc < 0) {
        FILE *sink = fmemopen(message, sizeof message, "w");
        rc = config_load(&cfg, cli.config_path, cli.n_overrides, cli.overrides, sink);
        if (sink) fclose(sink);
        message[strcspn(message, "\n")] = '\0';
    } else {
        config_defaults(&cfg);
    }
    free(cli.overrides);

    // Under a launcher every rank joins, whatever it was asked to do, and the ranks first agree on the
    // mode in messages of one size: a rank given --version or --dry-run beside training ranks ends the
    // job (exit 2 everywhere, naming the rank) instead of leaving the others waiting or mismatched.
    // An invalid config leaves the defaults in cfg (dist.timeout_s among them) for this start-up.
    Comm *comm = comm_init(&argc, &argv, cfg.dist.timeout_s);
    char mode[160];
    mode_text(&cli, parse_rc, mode, sizeof mode);
    int agreed =
        agree_same(comm, "the command lines", 1, (const char *[]){"the mode"}, (const char *[]){mode});
    if (agreed == 0 && parse_rc > 0) agreed = parse_rc;  // the message is above
    if (agreed == 0 && parse_rc == 0 && comm->rank == 0)
        cli.help ? (void)fputs(usage_text, stdout) : print_version();
    if (agreed != 0 || parse_rc >= 0) {
        comm->destroy(comm);
        comm_finalize();
        return agreed;
    }
    rc = agree_startup(comm, rc ? 2 : 0, message);
    if (rc == 0 && cli.print_config) {
        if (comm->rank == 0) config_print(&cfg, stdout);
        comm->destroy(comm);
        comm_finalize();
        return 0;
    }
    if (rc == 0) rc = agree_config(comm, &cfg);
    // --bench, --bench-data and --eval write nothing into the run's folder: only a training start (or its dry
    // run) is checked against it.
    static Config run_cfg;
    static char eval_path[CONFIG_PATH_MAX];
    run_cfg = cfg;
    if (rc == 0 && cli.eval)
        rc = eval_source(&cfg, comm, eval_path, sizeof eval_path);
    else if (rc == 0 && !cli.bench && !cli.bench_data)
        rc = check_start(&cfg, comm, cli.dry_run, &run_cfg);
    if (rc == 0 && cli.bench_data)
        rc = bench_data(&cfg, comm, cli.bench_opt.steps);
    else if (rc == 0)
        rc = cli.dry_run ? dry_run(&run_cfg, comm) : run(&cli, &cfg, &run_cfg, eval_path, comm);
    comm->destroy(comm);
    comm_finalize();
    return rc;
}

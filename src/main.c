// main.c - the amptrain command line: arguments, config, backend and communicator, then train,
// benchmark, or just describe the run.
//
// Exit codes: 0 success (also after SIGTERM/SIGINT/SIGUSR1: the step is finished and a checkpoint written),
//             1 runtime failure (a library call failed, a peer rank died, no GPU when cuda was asked for),
//             2 usage or configuration error (nothing was written).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/config.h"
#include "core/log.h"
#include "dist/comm.h"
#include "dist/dist.h"
#include "kernels/cuda_backend.h"
#include "model/resnext.h"
#include "train/bench.h"
#include "train/trainer.h"

static const char usage_text[] =
    "usage: amptrain [options] CONFIG [section.key=value ...]\n"
    "       mpirun -np N amptrain [options] CONFIG [section.key=value ...]\n"
    "\n"
    "Trains a ResNeXt image classifier with automatic mixed precision (fp16 convolutions and matmuls,\n"
    "fp32 master weights, dynamic loss scaling) on one GPU, on N GPUs data-parallel under mpirun (one\n"
    "rank per GPU, gradients summed with NCCL), or on the CPU reference backend when there is no GPU.\n"
    "\n"
    "CONFIG is a YAML file (configs/ has ready ones; docs/config.md lists every key). Any key can be\n"
    "overridden after it, e.g.  amp.enabled=false  train.lr=0.05  model.layers=[1,1,1,1]\n"
    "\n"
    "options:\n"
    "  -h, --help          this text\n"
    "  --version           print the version and the backends this build has\n"
    "  --print-config      print the merged, validated config as YAML and exit\n"
    "  --dry-run           validate, build the model, print parameters, multiply-adds and memory; no training\n"
    "  --bench             benchmark: warm-up, then median step time, images/s and peak memory as one JSON\n"
    "                      line (synthetic data resident on the device, like bench/torch_baseline.py)\n"
    "  --bench-steps N     timed steps of --bench (default 30)\n"
    "  --bench-warmup N    untimed steps of --bench (default 8)\n"
    "  --bench-tag TEXT    a label copied into the JSON line\n"
    "\n"
    "examples:\n"
    "  amptrain configs/tiny.yaml                          # CPU demo: a small ResNeXt learns in under 20 s on 2 cores\n"
    "  amptrain configs/seed_resnext50.yaml amp.enabled=false\n"
    "  mpirun -np 2 amptrain configs/resnext50_32x4d_imagenet.yaml --bench\n"
    "  amptrain configs/tiny.yaml checkpoint.resume=runs/tiny/last.safetensors\n"
    "\n"
    "signals: SIGTERM, SIGINT or SIGUSR1 finish the step, write a checkpoint and exit 0; under Open MPI's\n"
    "mpirun send SIGUSR1 (mpirun forwards it to every rank; SIGTERM makes mpirun itself exit 1)\n"
    "\n"
    "exit codes: 0 done, 1 runtime failure, 2 usage or config error, 3 a collective waited past dist.timeout_s\n";

typedef struct Cli {
    const char *config_path;
    char **overrides;
    int n_overrides;
    int print_config, dry_run, bench;
    BenchOptions bench_opt;
} Cli;

// Rank from the launcher's environment, before MPI starts (so only rank 0 reports config errors).
static int launcher_rank(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v) return atoi(v);
    }
    return 0;
}

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
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            int gpus = cuda_visible_device_count();
            printf("amptrain %s (backends: cpu%s; communicators: single%s%s; visible GPUs: %d)\n", AMPTRAIN_VERSION,
#ifdef AMPTRAIN_HAVE_CUDA
                   ", cuda",
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
                   gpus);
            return 0;
        } else if (!strcmp(a, "--print-config")) {
            cli->print_config = 1;
        } else if (!strcmp(a, "--dry-run")) {
            cli->dry_run = 1;
        } else if (!strcmp(a, "--bench")) {
            cli->bench = 1;
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
        } else {
            fprintf(stderr, "amptrain: unexpected argument '%s': give CONFIG first, then section.key=value "
                            "overrides (see amptrain --help)\n", a);
            return 2;
        }
    }
    if (!cli->config_path) {
        fprintf(stderr, "amptrain: no CONFIG given\n\n%s", usage_text);
        return 2;
    }
    return -1;
}

static void print_dry_run(const Config *cfg) {
    Model m;
    model_init_shapes(&m, &cfg->model, cfg->data.batch_size, cfg->amp.enabled);
    double acts = (double)model_activation_bytes(&m);
    // fp32 master and momentum, gradients in the compute dtype, and under AMP the fp16 compute copy
    double weights = (double)m.params.padded_numel * (8 + dtype_size(m.act_dt) * (cfg->amp.enabled ? 2 : 1));
    printf("model        %s: layers [%d,%d,%d,%d], cardinality %d, base width %d, planes %d, %d classes, "
           "%dx%d input\n",
           cfg->model.arch, cfg->model.layers[0], cfg->model.layers[1], cfg->model.layers[2], cfg->model.layers[3],
           cfg->model.cardinality, cfg->model.base_width, cfg->model.planes, cfg->model.num_classes,
           cfg->model.image_size, cfg->model.image_size);
    printf("parameters   %zu (%d tensors)\n", m.params.numel, m.params.count);
    printf("multiply-adds per image  %.3f G\n", model_macs_per_image(&m) / 1e9);
    printf("precision    %s\n", cfg->amp.enabled ? "AMP: fp16 activations and compute weights, fp32 masters"
                                                 : "fp32");
    printf("memory per rank (estimate, batch %d): activations and their gradients %.1f MiB, weights+optimizer "
           "%.1f MiB; on CUDA also up to %d MiB of convolution workspace (cudnn.workspace_mb)\n",
           cfg->data.batch_size, acts / 1048576.0, weights / 1048576.0, cfg->cudnn.workspace_mb);
    model_free(&m, NULL);
}

static volatile sig_atomic_t stop_requested = 0;
static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static Backend *select_backend(const Config *cfg, Comm *comm) {
    const char *want = cfg->backend.device;
    char why[512] = "";
    if (strcmp(want, "cpu") != 0) {
        int gpus = cuda_visible_device_count();
        if (gpus > 0) {
            char refuse[512];
            if (comm_check_local_gpus(comm, gpus, refuse, sizeof refuse) != 0) {
                log_error("%s", refuse);
                return NULL;
            }
            Backend *be = cuda_backend_create(comm->local_rank, cfg->cudnn.benchmark, cfg->cudnn.tf32, why, sizeof why);
            if (be) {
                cuda_backend_set_workspace_cap(be, (size_t)cfg->cudnn.workspace_mb << 20);
                return be;
            }
        } else {
            snprintf(why, sizeof why, "no CUDA device is visible");
        }
        if (!strcmp(want, "cuda")) {
            log_error("backend.device is cuda but the CUDA backend is unavailable: %s", why);
            return NULL;
        }
    }
    if (!strcmp(want, "auto") && why[0]) log_info("no GPU (%s): using the CPU reference backend", why);
    return cpu_backend_create();
}

int main(int argc, char **argv) {
    Cli cli;
    int rc = parse_args(argc, argv, &cli);
    if (rc >= 0) {
        free(cli.overrides);
        return rc;
    }
    static Config cfg;
    FILE *err = launcher_rank() == 0 ? stderr : NULL;
    FILE *sink = err ? err : fopen("/dev/null", "w");
    rc = config_load(&cfg, cli.config_path, cli.n_overrides, cli.overrides, sink);
    if (!err && sink) fclose(sink);
    free(cli.overrides);
    if (rc != 0) return 2;
    if (cli.print_config) {
        if (launcher_rank() == 0) config_print(&cfg, stdout);
        return 0;
    }
    if (cli.dry_run) {
        if (launcher_rank() == 0) print_dry_run(&cfg);
        return 0;
    }

    Comm *comm = comm_init(&argc, &argv, cfg.dist.timeout_s);
    Backend *be = select_backend(&cfg, comm);
    if (!be) {
        comm->destroy(comm);
        comm_finalize();
        return 1;
    }
    Comm *grad_comm = comm;
    if (comm->size > 1 && strcmp(be->name, "cpu") != 0) {
        grad_comm = comm_nccl_create(comm, cuda_backend_stream(be));
        if (!grad_comm) {
            log_error("%d ranks on the CUDA backend need NCCL, and this build has none", comm->size);
            be->destroy(be);
            comm->destroy(comm);
            comm_finalize();
            return 1;
        }
    }
    log_info("amptrain %s: %d rank%s, backend %s, gradients over %s, %s", AMPTRAIN_VERSION, comm->size,
             comm->size > 1 ? "s" : "", be->name, grad_comm->name, cfg.amp.enabled ? "AMP (fp16)" : "fp32");

    if (cli.bench) {
        rc = bench_run(&cfg, be, comm, grad_comm, &cli.bench_opt);
    } else {
        struct sigaction sa = {.sa_handler = on_stop_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        // Open MPI's mpirun turns SIGTERM into an abort (exit 1 whatever the ranks do) but forwards
        // SIGUSR1 to every rank: the stop signal to send mpirun (launch/amptrain-mpirun does).
        sigaction(SIGUSR1, &sa, NULL);
        Trainer t;
        rc = trainer_init(&t, &cfg, be, comm, grad_comm);
        if (rc == 0) rc = trainer_run(&t, &stop_requested);
        if (rc == 0 && comm->rank == 0) {
            double ips = t.train_seconds > 0 ? t.images_seen / t.train_seconds : 0;
            ScalerState st = scaler_read(&t.scaler, be);
            printf("summary: %ld steps, epoch %d, %.1f s, %.1f images/s, peak %s memory %.1f MiB, "
                   "%d steps skipped, loss scale %g, final loss %.4f",
                   t.step, trainer_last_epoch(&t), t.train_seconds, ips, be->name, be->peak_bytes(be) / 1048576.0,
                   st.skipped_total, st.scale, t.last_loss);
            if (t.has_eval)
                printf(", val loss %.4f, top-1 %.2f%%, top-5 %.2f%%", t.last_eval.loss, 100 * t.last_eval.top1,
                       100 * t.last_eval.top5);
            printf("\n");
        }
        trainer_free(&t);
    }
    if (grad_comm != comm) grad_comm->destroy(grad_comm);
    be->destroy(be);
    comm->destroy(comm);
    comm_finalize();
    return rc;
}

#define _GNU_SOURCE  // nftw
#include "tests/test_util.h"

#include <check.h>

#include "core/check.h"
#include "config/config.h"
#include "checkpoint/safetensors.h"
#include "dist/dist.h"
#include "kernels/cuda/cuda_backend.h"
#include "train/trainer.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *at) {
    (void)st, (void)type;
    return at->level == 0 ? 0 : remove(path);
}

// A process that no MPI launcher started owns its scratch folder now: what an earlier run of the suite left
// there (run folders, their checkpoints and locks) goes. Ranks that mpiexec starts leave it alone (they start
// together; ctest empties an MPI suite's folder before its first launch, tests/tests.cmake).
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

// See test_util.h: runs before main in every test binary (and in every rank mpiexec starts).
__attribute__((constructor)) static void tu_enter_scratch(void) {
    if (!launched_by_mpi()) nftw(AMPTRAIN_TEST_SCRATCH, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (mkdir(AMPTRAIN_TEST_SCRATCH, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot create the scratch folder %s: %s\n", AMPTRAIN_TEST_SCRATCH, strerror(errno));
        exit(EXIT_FAILURE);
    }
    if (chdir(AMPTRAIN_TEST_SCRATCH) != 0) {
        fprintf(stderr, "cannot enter the scratch folder %s: %s\n", AMPTRAIN_TEST_SCRATCH, strerror(errno));
        exit(EXIT_FAILURE);
    }
    setenv("XDG_CACHE_HOME", AMPTRAIN_TEST_SCRATCH, 1);  // cudnn.cache auto of the runs it starts
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void tu_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t state = seed;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix64(&state) >> 11) / 9007199254740992.0;
        x[i] = lo + (float)u * (hi - lo);
    }
}

double tu_rel_error(const float *a, const float *b, size_t n) {
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = (double)a[i] - (double)b[i];
        diff += d * d;
        ref += (double)b[i] * (double)b[i];
    }
    if (ref == 0) return sqrt(diff);
    return sqrt(diff / ref);
}

int tu_run_cli(const char *args, char *output, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", AMPTRAIN_BIN, args);
    return tu_run_shell(cmd, output, cap);
}

int tu_run_shell(const char *cmd, char *output, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t len = 0;
    if (cap) output[0] = 0;
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, p)) > 0) {
        if (cap && len + 1 < cap) {
            size_t take = got < cap - 1 - len ? got : cap - 1 - len;
            memcpy(output + len, chunk, take);
            len += take;
            output[len] = 0;
        }
    }
    int status = pclose(p);
    if (status == -1 || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

void *tu_st_read(SafetensorsFile *f, const char *name, int dtype, size_t *numel, int64_t *shape) {
    const StTensor *t = st_find(f, name);
    ck_assert_msg(t != NULL, "%s lacks %s", st_path(f), name);
    void *dst = xcalloc(t->nbytes + 1, 1);
    char err[512];
    ck_assert_msg(st_read(f, name, (StDtype)dtype, t->ndim, t->shape, dst, err, sizeof err) == 0, "%s", err);
    if (numel) *numel = t->numel;
    if (shape) memcpy(shape, t->shape, sizeof t->shape);
    return dst;
}

float *tu_backend_floats(Backend *be, const void *src, int dt, size_t n) {
    float *dev = be->alloc(be, n * sizeof(float)), *host = xcalloc(n + 1, sizeof(float));
    be->cast(be, dev, DTYPE_F32, src, (DType)dt, n);
    be->to_host(be, host, dev, n * sizeof(float));
    be->free(be, dev);
    return host;
}

void tu_copy_checkpoint(const char *src, const char *dst, TuTensorEdit edit, void *ctx,
                        const char *const *meta) {
    static const char *const keys[] = {"format",        "model",         "arch",          "amp",
                                       "amp_dtype",     "dynamic_scale", "scale",         "growth_count",
                                       "skipped_total", "step",          "epoch",         "samples_done",
                                       "seed",          "world_size",    "batch_size",    "accum_steps",
                                       "dataset",       "train_samples", "dataset_digest"};
    char err[1024];
    SafetensorsFile *f = st_open(src, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    SafetensorsWriter *w = st_writer_open(dst);
    for (size_t i = 0; i < st_count(f); i++) {
        const StTensor *t = st_tensor(f, i);
        void *data = xcalloc(t->nbytes ? t->nbytes : 1, 1);
        ck_assert_msg(st_read(f, t->name, t->dtype, t->ndim, t->shape, data, err, sizeof err) == 0, "%s",
                      err);
        int64_t shape[ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (edit) edit(t->name, (int)t->dtype, shape, data, ctx);
        st_writer_add_copy(w, t->name, t->dtype, t->ndim, shape, data);
        free(data);
    }
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *value = st_meta(f, keys[k]);
        for (int m = 0; meta && meta[m]; m += 2)
            if (strcmp(meta[m], keys[k]) == 0) value = meta[m + 1];
        ck_assert_msg(value != NULL, "%s has no metadata '%s'", src, keys[k]);
        st_writer_set_meta(w, keys[k], value);
    }
    ck_assert_msg(st_writer_commit(w, err, sizeof err) == 0, "%s", err);
    st_close(f);
}

int tu_checkpoints_equal(const char *a_path, const char *b_path) {
    char err[512];
    SafetensorsFile *a = st_open(a_path, err, sizeof err), *b = st_open(b_path, err, sizeof err);
    ck_assert_msg(a && b, "%s", err);
    int equal = st_count(a) == st_count(b);
    for (size_t i = 0; equal && i < st_count(a); i++) {
        const StTensor *t = st_tensor(a, i);
        void *x = malloc(t->nbytes + 1), *y = malloc(t->nbytes + 1);
        equal = st_read(a, t->name, t->dtype, t->ndim, t->shape, x, err, sizeof err) == 0 &&
                st_read(b, t->name, t->dtype, t->ndim, t->shape, y, err, sizeof err) == 0 &&
                memcmp(x, y, t->nbytes) == 0;
        free(x), free(y);
    }
    st_close(a), st_close(b);
    return equal;
}

long tu_checkpoint_step(const char *path) {
    char err[512];
    SafetensorsFile *f = st_open(path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    long step = atol(st_meta(f, "step"));
    st_close(f);
    return step;
}

int tu_count_lines(const char *path, const char *prefix) {
    char *text = tu_read_file(path, NULL);
    int n = 0;
    for (char *line = text; line && *line;) {
        if (!strncmp(line, prefix, strlen(prefix))) n++;
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : line + strlen(line);
    }
    free(text);
    return n;
}

const char *tu_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return path;
}

char *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *bytes = xcalloc((size_t)n + 1, 1);
    ck_assert_uint_eq(fread(bytes, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    if (len) *len = (size_t)n;
    return bytes;
}

// This binary's own path, for starting its scenarios.
static const char *tu_self_path(void) {
    static char path[4096];
    if (!path[0]) {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        ck_assert_msg(n > 0, "readlink /proc/self/exe failed");
        path[n] = 0;
    }
    return path;
}

void tu_run_scenario(TuRun *run, int ranks, const char *mpiexec_args, const char *scenario) {
    char command[8192];
    if (ranks > 0)
        snprintf(command, sizeof command,
                 "timeout 120 mpiexec --allow-run-as-root --oversubscribe %s -np %d '%s' %s 2>&1",
                 mpiexec_args, ranks, tu_self_path(), scenario);
    else
        snprintf(command, sizeof command, "timeout 120 '%s' %s 2>&1", tu_self_path(), scenario);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    size_t len = fread(run->output, 1, sizeof run->output - 1, p);
    run->output[len] = 0;
    char drain[4096];
    while (fread(drain, 1, sizeof drain, p) > 0) continue;
    int status = pclose(p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    run->status = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("%s (np %d): exit %d after %.1f s\n", scenario, ranks, run->status, run->seconds);
}

void tu_timeout_line(char *buf, size_t n, const char *what, long step, double seconds) {
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    snprintf(
        buf, n,
        "[rank 0] error: collective %s (step %ld) on rank 0 (host %s) waited %.1f s for rank 1 (host %s) "
        "(dist.timeout_s); a peer rank died or stalled; aborting",
        what, step, host, seconds, host);
}

int tu_end_scenario_leftovers(const char *scenario) {
    const char *self = tu_self_path();
    size_t self_len = strlen(self);
    int found = 0;
    DIR *proc = opendir("/proc");
    ck_assert_ptr_nonnull(proc);
    for (struct dirent *d; (d = readdir(proc)) != NULL;) {
        pid_t pid = (pid_t)atoi(d->d_name);
        char path[64], cmdline[4096 + 256] = "";
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = pid > 0 && pid != getpid() ? fopen(path, "r") : NULL;
        if (!f) continue;
        size_t len = fread(cmdline, 1, sizeof cmdline - 1, f);
        fclose(f);
        // argv[0] NUL argv[1] NUL: this binary, running the scenario
        if (len > self_len + 1 && strcmp(cmdline, self) == 0 &&
            strcmp(cmdline + self_len + 1, scenario) == 0) {
            kill(pid, SIGKILL);
            found++;
        }
    }
    closedir(proc);
    return found;
}

int tu_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int tu_gpu_required(void) {
    const char *require = getenv("AMPTRAIN_REQUIRE_GPU");
    return require && strcmp(require, "1") == 0;
}

int tu_skip(const char *suite, const char *fmt, ...) {
    printf("%s: skipped: ", suite);
    va_list args;
    va_start(args, fmt);
    vprintf(fmt, args);
    va_end(args);
    printf("\n");
    return TU_SKIP_EXIT;
}

int tu_skip_gpu(const char *suite, const char *why) {
    if (tu_gpu_required()) {
        printf("%s: FAILED: AMPTRAIN_REQUIRE_GPU=1 but the CUDA backend is unavailable: %s\n", suite, why);
        return 1;
    }
    return tu_skip(suite, "%s", why);
}

int tu_parity_main(const char *suite, const char *env, const char *script, const char **path,
                   const struct TTest *cpu_test, const struct TTest *cuda_test, int timeout_s) {
    char why[256];
    Backend *probe = cuda_backend_create(0, NULL, why, sizeof why);
    if (!probe && tu_gpu_required()) return tu_skip_gpu(suite, why);
    const int have_gpu = probe != NULL;
    if (probe) probe->destroy(probe);
    *path = getenv(env);
    if (!*path)
        return tu_skip(suite,
                       "%s is not set (dev/device_suite.sh recipe makes it with tests/parity/%s on a machine "
                       "with torch)",
                       env, script);
    Suite *s = suite_create(suite);
    TCase *tc = tcase_create("parity");
    tcase_set_timeout(tc, timeout_s);
    tcase_add_test(tc, cpu_test);
    if (have_gpu)
        tcase_add_test(tc, cuda_test);
    else
        printf("%s: CUDA case skipped: %s\n", suite, why);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 0);
}

int tu_leave_launch(const char *suite) {
    // Open MPI's mpiexec, the launcher tests/tests.cmake starts the MPI suites with.
    const char *launch_size = getenv("OMPI_COMM_WORLD_SIZE");
    if (launch_size && atoi(launch_size) > 1)
        return tu_skip(suite,
                       "it starts MPI jobs of its own, which cannot nest in this launch of %s ranks; "
                       "it runs without mpiexec or from a launch of one rank",
                       launch_size);
    tu_forget_launcher();
    return 0;
}

void tu_forget_launcher(void) {
    static const char *const prefixes[] = {"OMPI_", "PMIX_", "PMI_", "MV2_"};
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; *e && !again; e++)
            for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++)
                if (strncmp(*e, prefixes[p], strlen(prefixes[p])) == 0) {
                    char name[256];
                    size_t len = strcspn(*e, "=");
                    snprintf(name, sizeof name, "%.*s", (int)len, *e);
                    unsetenv(name);  // environ changed under us: scan again from the start
                    again = 1;
                    break;
                }
    }
}

int tu_run_suite(Suite *suite, int fork) {
    SRunner *sr = srunner_create(suite);
    if (!fork) srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int tu_on_every_rank(Comm *comm, int ok) {
    float bad = ok ? 0.0f : 1.0f;
    comm->allreduce_max_flag(comm, &bad);
    return bad == 0.0f;
}

void tu_gather_bytes(Comm *comm, const void *mine, size_t bytes, void *all) {
    for (int r = 0; r < comm->size; r++) {
        char *slot = (char *)all + (size_t)r * bytes;
        if (r == comm->rank) memcpy(slot, mine, bytes);
        comm->broadcast(comm, slot, bytes, r);
    }
}

uint64_t tu_fnv1a(uint64_t h, const void *data, size_t bytes) {
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

uint64_t tu_train_step(Trainer *t) {
    int accum = t->cfg->train.accum_steps, b = t->cfg->data.batch_size;
    size_t bytes = dataset_image_bytes(t->train_set);
    uint8_t *images = xcalloc((size_t)accum * b * bytes, 1);
    int32_t *labels = xcalloc((size_t)accum * b, sizeof(int32_t)),
            *indices = xcalloc((size_t)b, sizeof(int32_t));
    MicroBatch *micro = xcalloc((size_t)accum, sizeof *micro);
    int total = sampler_step_total(&t->sampler, t->epoch, t->step_in_epoch);
    for (int m = 0; m < accum; m++) {
        uint8_t *img = images + (size_t)m * b * bytes;
        int32_t *lab = labels + (size_t)m * b;
        int count = sampler_block(&t->sampler, t->epoch, t->step_in_epoch, m, indices);
        dataset_get_batch(t->train_set, indices, count, t->epoch, img, lab);
        micro[m] = (MicroBatch){.count = count, .step_total = total, .host_images = img, .host_labels = lab};
    }
    trainer_step_array(t, micro, accum);
    if (++t->step_in_epoch == t->steps_per_epoch) t->step_in_epoch = 0, t->epoch++;
    uint64_t digest = TU_FNV_OFFSET;
    for (int m = 0; m < accum; m++) {
        digest = tu_fnv1a(digest, micro[m].host_images, (size_t)micro[m].count * bytes);
        digest = tu_fnv1a(digest, micro[m].host_labels, (size_t)micro[m].count * sizeof(int32_t));
    }
    free(images), free(labels), free(indices), free(micro);
    return digest;
}

void tu_train_steps(Trainer *t, int n) {
    for (int i = 0; i < n; i++) tu_train_step(t);
}

void tu_config(Config *cfg, const char *const *overrides) {
    int n = 0;
    while (overrides && overrides[n]) n++;
    ck_assert_int_eq(config_load(cfg, NULL, n, (char **)overrides, stderr), 0);
}

void tu_trainer_start(TuTrainer *r, const char *const *overrides) {
    tu_config(&r->cfg, overrides);
    r->be = cpu_backend_create();
    r->comm = comm_single_create();
    ck_assert_int_eq(trainer_init(&r->t, &r->cfg, r->be, r->comm, r->comm), 0);
}

void tu_trainer_stop(TuTrainer *r) {
    trainer_free(&r->t);
    r->be->destroy(r->be);
    r->comm->destroy(r->comm);
}

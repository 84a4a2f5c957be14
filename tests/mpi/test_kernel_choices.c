// test_kernel_choices.c - under mpiexec with 1, 2 and 3 ranks: rank 0 makes the start-up kernel choices
// (from cudnn.cache or timed) and the other ranks take its records instead of timing, so that every rank
// runs the same kernels; only rank 0 has the file, and a second start takes every choice from it.
//
// On the CPU (CI) a stand-in for a timing backend: conv_prepare records "timed by rank R" for each shape it
// has no record of (core/kernel_cache.h), in a table kernel_choices returns. AMPTRAIN_TEST_BACKEND=cuda (the
// device machine, mpirun -np 2 on two GPUs) runs the same checks on the CUDA backend with cudnn.benchmark,
// cudnn.batch_norm auto and the file on rank 0, gradients over NCCL.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/check.h"
#include "core/kernel_cache.h"
#include "config/config.h"
#include "dist/comm.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/test_util.h"
#include "train/trainer.h"

enum { MAX_RANKS = 16 };

static Comm *comm;
static int on_cuda;             // AMPTRAIN_TEST_BACKEND=cuda
static KernelCache *cpu_table;  // the stand-in's table (CPU)
static char cache_path[64];     // rank 0's file, one per rank count (the launches share the scratch folder)

// ---- the CPU's stand-in for a backend that times its choices -----------------------------------------

static KernelCache *stand_in_choices(Backend *be) {
    (void)be;
    return cpu_table;
}

static void stand_in_conv_prepare(Backend *be, const ConvShape *s, DType dt) {
    (void)be;
    char key[256], choice[64];
    snprintf(key, sizeof key,
             "stand-in | conv n=%d h=%d w=%d c_in=%d c_out=%d k=%dx%d stride=%d groups=%d %s", s->n, s->h,
             s->w, s->c_in, s->c_out, s->kh, s->kw, s->stride, s->groups, dtype_name(dt));
    if (kernel_cache_find(cpu_table, key)) {
        kernel_cache_use(cpu_table, key);
        return;
    }
    snprintf(choice, sizeof choice, "timed by rank %d", comm->rank);
    kernel_cache_store(cpu_table, key, choice, 0.001);
}

// ---- one start -----------------------------------------------------------------------------------------

typedef struct Start {
    Backend *be;
    Comm *grad_comm;
    Config cfg;
    Trainer t;
} Start;

static void start(Start *s) {
    static const char *const ov[] = {"model.arch=custom",   "model.layers=[1,1,1,1]", "model.planes=8",
                                     "model.base_width=16", "model.cardinality=2",    "model.image_size=32",
                                     "data.train_size=96",  "data.val_size=0",        "data.batch_size=4",
                                     "data.prefetch=0",     "log.metrics=",           "log.progress=never",
                                     "checkpoint.dir=",     "cudnn.benchmark=true",   NULL};
    tu_config(&s->cfg, ov);
    const char *file = comm->rank == 0 ? cache_path : NULL;  // the others never touch it (src/main.c)
    s->grad_comm = comm;
    if (on_cuda) {
        CudaOptions o = cuda_options_default();
        o.cudnn_benchmark = 1;
        o.batch_norm = CUDA_BN_AUTO;
        o.kernel_cache = file;
        char why[256];
        s->be = cuda_backend_create(comm->local_rank, &o, why, sizeof why);
        if (!s->be) amp_fatal(__FILE__, __LINE__, "AMPTRAIN_TEST_BACKEND=cuda but: %s", why);
        if (comm->size > 1) s->grad_comm = comm_nccl_create(comm, cuda_backend_stream(s->be));
    } else {
        cpu_table = kernel_cache_open(file);
        s->be = cpu_backend_create();
        s->be->kernel_choices = stand_in_choices;
        s->be->conv_prepare = stand_in_conv_prepare;
    }
    ck_assert_int_eq(trainer_init(&s->t, &s->cfg, s->be, comm, s->grad_comm), 0);
}

static void stop(Start *s) {
    trainer_free(&s->t);
    if (s->grad_comm != comm) s->grad_comm->destroy(s->grad_comm);
    s->be->destroy(s->be);
    kernel_cache_close(cpu_table);
    cpu_table = NULL;
}

// Every rank's KernelCacheStats, and whether every rank's choices (kernel_cache_export) are rank 0's.
static void gather(Start *s, KernelCacheStats all[MAX_RANKS], int *same_choices, uint64_t *digest) {
    KernelCache *kc = s->be->kernel_choices(s->be);
    KernelCacheStats mine = kernel_cache_stats(kc);
    tu_gather_bytes(comm, &mine, sizeof mine, all);
    size_t len = 0;
    char *text = kernel_cache_export(kc, &len);
    uint64_t hashes[MAX_RANKS], h = tu_fnv1a(TU_FNV_OFFSET, text, len);
    tu_gather_bytes(comm, &h, sizeof h, hashes);
    *same_choices = 1;
    for (int r = 1; r < comm->size; r++) *same_choices &= hashes[r] == hashes[0];
    *digest = hashes[0];
    free(text);
}

START_TEST(rank_0s_choices_are_every_ranks) {
    ck_assert_int_le(comm->size, MAX_RANKS);
    if (comm->rank == 0) unlink(cache_path);
    comm->barrier(comm);
    KernelCacheStats all[MAX_RANKS];
    int same = 0;
    uint64_t first_digest = 0, second_digest = 0;

    Start s;
    start(&s);
    gather(&s, all, &same, &first_digest);
    const int chosen = all[0].from_cache + all[0].searched;  // by rank 0, taken by every other rank
    int ok = all[0].searched > 0 && same;
    for (int r = 1; r < comm->size; r++) ok &= all[r].searched == 0 && all[r].from_cache == chosen;
    if (comm->rank == 0)
        printf("np %d first start: rank 0 %d searched, %d from cache; the others %d from cache\n", comm->size,
               all[0].searched, all[0].from_cache, comm->size > 1 ? all[1].from_cache : 0);
    ck_assert_msg(tu_on_every_rank(comm, ok), "rank 0's choices did not reach every rank unchanged");
    // rank 0 saved them at start-up; no other rank wrote a file
    int saved = 1;
    if (comm->rank == 0) {
        char *file = tu_read_file(cache_path, NULL);
        int lines = 0;
        for (const char *c = file ? file : ""; *c; c++) lines += *c == '\n';
        saved = file && lines == all[0].searched + 2;
        free(file);
    }
    ck_assert_msg(tu_on_every_rank(comm, saved), "rank 0's file does not hold its %d choices",
                  all[0].searched);
    stop(&s);

    // a second start: rank 0 reads every choice from its file, no rank times anything, the same choices
    start(&s);
    gather(&s, all, &same, &second_digest);
    ok = same && second_digest == first_digest;
    for (int r = 0; r < comm->size; r++) ok &= all[r].searched == 0 && all[r].from_cache == chosen;
    ck_assert_msg(tu_on_every_rank(comm, ok), "the second start timed kernels or chose others");
    stop(&s);
}
END_TEST

int main(int argc, char **argv) {
    comm = comm_init(&argc, &argv, 120.0);
    const char *want = getenv("AMPTRAIN_TEST_BACKEND");
    on_cuda = want && !strcmp(want, "cuda");
    snprintf(cache_path, sizeof cache_path, "kernels-np%d.cache", comm->size);
    Suite *s = suite_create("kernel_choices");
    TCase *tc = tcase_create("ranks");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, rank_0s_choices_are_every_ranks);
    suite_add_tcase(s, tc);
    const int rc = tu_run_suite(s, 0);
    comm->destroy(comm);
    comm_finalize();
    return rc;
}

// test_kernel_cache_gpu.c - cudnn.cache on the GPU: a small ResNeXt started twice with cudnn.benchmark and
// batch_norm auto on one cache file in the scratch folder. The first start times every choice and writes
// them; the second times nothing, takes the same choices and gives the same step; records that no longer
// hold (an algorithm that does not exist, a workspace above the cap) are timed again. AMP (fp16, the
// batch-norm pairs) and exact fp32 (the 1x1 convolutions' GEMM route). Reports skipped without a GPU.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/kernel_cache.h"
#include "config/config.h"
#include "dist/dist.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/test_util.h"
#include "train/trainer.h"

#define CACHE "kernels.cache"

typedef struct Start {
    Backend *be;
    Comm *comm;
    Config cfg;
    Trainer t;
    KernelCacheStats stats;  // after trainer_init: the start-up's choices
    char *choices;           // what it chose: kernel_cache_export's records
    float loss;              // the first step's
    float *logits;           // (batch, classes) of the first step's forward, as fp32
    float *weights;          // the masters after it
    size_t numel;            // of weights
} Start;

// A start on CACHE: trainer_init, then one step.
static void start_and_step(Start *s, int amp) {
    const char *ov[] = {"model.planes=16",
                        "model.image_size=32",
                        "data.batch_size=16",
                        "data.train_size=320",
                        "data.val_size=0",
                        "data.prefetch=0",
                        "log.metrics=",
                        "checkpoint.dir=",
                        "train.cuda_graph=off",
                        "cudnn.benchmark=true",
                        "cudnn.batch_norm=auto",
                        amp ? "cudnn.tf32=true" : "cudnn.tf32=false",
                        amp ? "amp.enabled=true" : "amp.enabled=false",
                        NULL};
    tu_config(&s->cfg, ov);
    CudaOptions o = cuda_options_default();
    o.cudnn_benchmark = 1;
    o.conv_tf32 = s->cfg.cudnn.tf32;
    o.conv_workspace_cap = (size_t)s->cfg.cudnn.workspace_mb << 20;
    o.batch_norm = CUDA_BN_AUTO;
    o.kernel_cache = CACHE;
    char why[256];
    s->be = cuda_backend_create(0, &o, why, sizeof why);
    ck_assert_msg(s->be != NULL, "%s", why);
    s->comm = comm_single_create();
    ck_assert_int_eq(trainer_init(&s->t, &s->cfg, s->be, s->comm, s->comm), 0);
    KernelCache *kc = s->be->kernel_choices(s->be);
    ck_assert_ptr_nonnull(kc);
    s->stats = kernel_cache_stats(kc);
    size_t len = 0;
    s->choices = kernel_cache_export(kc, &len);
    tu_train_step(&s->t);
    s->be->to_host(s->be, &s->loss, s->t.act.loss, sizeof s->loss);
    const int n = s->cfg.data.batch_size * s->cfg.model.num_classes;
    s->logits = tu_backend_floats(s->be, s->t.act.logits, s->t.model.act_dt, (size_t)n);
    s->numel = s->t.model.params.padded_numel;
    s->weights = tu_backend_floats(s->be, s->t.model.master, DTYPE_F32, s->numel);
    trainer_free(&s->t);
    s->be->destroy(s->be);  // writes what was chosen since trainer_init (nothing here)
    s->comm->destroy(s->comm);
}

static void start_free(Start *s) { free(s->choices), free(s->logits), free(s->weights); }

static int line_count(const char *text) {
    int n = 0;
    for (; *text; text++) n += *text == '\n';
    return n;
}

// A record of the file with its choice replaced (the checksum stays right: written through the table).
// Returns 1 when a record whose choice starts with `prefix` was found.
static int replace_choice(const char *choices, const char *prefix, const char *with) {
    for (const char *line = choices; *line;) {
        const char *tab = strchr(line, '\t'), *nl = strchr(line, '\n');
        if (tab && nl && tab < nl && !strncmp(tab + 1, prefix, strlen(prefix))) {
            char key[1024];
            snprintf(key, sizeof key, "%.*s", (int)(tab - line), line);
            KernelCache *kc = kernel_cache_open(CACHE);
            ck_assert_ptr_nonnull(kernel_cache_find(kc, key));
            kernel_cache_store(kc, key, with, 0);
            ck_assert_int_eq(kernel_cache_save(kc), 0);
            kernel_cache_close(kc);
            return 1;
        }
        line = nl ? nl + 1 : line + strlen(line);
    }
    return 0;
}

static void twice_on_one_cache(int amp) {
    const char *label = amp ? "amp" : "fp32";
    unlink(CACHE);
    Start first = {0}, second = {0};
    start_and_step(&first, amp);
    printf("%s: first start: %d from cache, %d searched in %.2f s\n", label, first.stats.from_cache,
           first.stats.searched, first.stats.search_s);
    ck_assert_int_eq(first.stats.from_cache, 0);
    ck_assert_int_gt(first.stats.searched, 0);
    ck_assert_int_eq(line_count(first.choices), first.stats.searched);
    // the file holds every choice, between its version and checksum lines
    char *file = tu_read_file(CACHE, NULL);
    ck_assert_ptr_nonnull(file);
    ck_assert_int_eq(line_count(file), first.stats.searched + 2);
    free(file);

    start_and_step(&second, amp);
    printf("%s: second start: %d from cache, %d searched in %.2f s\n", label, second.stats.from_cache,
           second.stats.searched, second.stats.search_s);
    ck_assert_int_eq(second.stats.searched, 0);
    ck_assert(second.stats.search_s == 0);
    ck_assert_int_eq(second.stats.from_cache, first.stats.searched);
    ck_assert_str_eq(second.choices, first.choices);  // the same keys, the same choices
    // the same kernels on the same weights and batch: the forward bitwise; the update within rounding, since
    // the search may pick a backward algorithm that sums with atomics (cuDNN names it non-deterministic)
    ck_assert_msg(first.loss == second.loss, "%s: loss %.9g then %.9g", label, first.loss, second.loss);
    const size_t n = (size_t)first.cfg.data.batch_size * first.cfg.model.num_classes;
    ck_assert_msg(!memcmp(first.logits, second.logits, n * sizeof(float)), "%s: the logits differ", label);
    const double e = tu_rel_error(second.weights, first.weights, first.numel);
    printf("%s: weights after the step: relative difference %.3e\n", label, e);
    ck_assert_msg(e <= 1e-6, "%s: the weights after the step differ by %g", label, e);
    start_free(&second);

    // records that no longer hold are timed again, the rest still taken
    const int broken =
        replace_choice(first.choices, "cudnn", "cudnn algo=99 math=fma workspace=0") +
        replace_choice(first.choices, "gemm", "cudnn algo=0 math=fma workspace=1125899906842624");
    ck_assert_int_ge(broken, 1);
    Start third = {0};
    start_and_step(&third, amp);
    printf("%s: after %d broken records: %d from cache, %d searched\n", label, broken, third.stats.from_cache,
           third.stats.searched);
    ck_assert_int_eq(third.stats.searched, broken);
    ck_assert_int_eq(third.stats.from_cache, first.stats.searched - broken);
    KernelCache *kc = kernel_cache_open(CACHE);  // and the file holds the new choices
    for (const char *line = third.choices; *line;) {
        const char *tab = strchr(line, '\t'), *nl = strchr(line, '\n');
        char key[1024];
        snprintf(key, sizeof key, "%.*s", (int)(tab - line), line);
        const char *got = kernel_cache_find(kc, key);
        ck_assert_ptr_nonnull(got);
        ck_assert(strncmp(got, tab + 1, (size_t)(nl - tab - 1)) == 0 && got[nl - tab - 1] == '\0');
        ck_assert_ptr_null(strstr(got, "algo=99"));
        line = nl + 1;
    }
    kernel_cache_close(kc);
    start_free(&first), start_free(&third);
}

START_TEST(second_start_searches_nothing_amp) { twice_on_one_cache(1); }
END_TEST

START_TEST(second_start_searches_nothing_fp32) { twice_on_one_cache(0); }
END_TEST

int main(void) {
    char why[256];
    Backend *probe = cuda_backend_create(0, NULL, why, sizeof why);
    if (!probe) return tu_skip_gpu("test_kernel_cache_gpu", why);
    probe->destroy(probe);
    Suite *s = suite_create("kernel_cache_gpu");
    TCase *tc = tcase_create("starts");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, second_start_searches_nothing_amp);
    tcase_add_test(tc, second_start_searches_nothing_fp32);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 0);
}

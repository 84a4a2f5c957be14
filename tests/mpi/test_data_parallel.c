// test_data_parallel.c - the distributed invariants of docs/design.md on the CPU backend, under mpiexec with
// 1, 2 and 3 ranks: bitwise-identical master weights, momentum and scaler state on every rank after every
// step, under fp16 and bf16 autocast; a skipped step (inf on one rank, or an overflow that only the 16-bit
// sum makes) is skipped everywhere and halves the fp16 scale (bf16's stays 1); W ranks with batch b equal one
// rank with batch b and W accumulation steps; the sampler's shards cover the dataset once; BN statistics
// averaging and evaluation agree; MixUp, CutMix and label smoothing keep the ranks identical and the graph
// path equal to launches; a run from a file's weights (model.init) starts and stays identical on every rank.
//
// Trainers are built here from config_defaults plus overrides (a ResNeXt small enough that a step takes
// milliseconds) and driven step by step from their own sampler, the way trainer_run's loader does.
// Every rank runs every test in the same order (CK_FORK=no), so the collectives match up. Verdicts that
// one rank could reach alone are agreed across ranks before asserting, so a failure ends the test on
// every rank at the same point instead of leaving ranks in different collectives; the 120 s watchdog
// ends the job should they ever desynchronise anyway.
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/scaler.h"
#include "core/backend.h"
#include "core/check.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "dist/dist.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/test_util.h"
#include "train/trainer.h"

static Comm *comm, *grad_comm;  // host communicator; the one that sums gradients (NCCL on GPUs)
static Backend *be;

enum { MAX_OVERRIDES = 32, MAX_RANKS = 16 };

// ---- set-up -----------------------------------------------------------------------------------------

// Defaults, a tiny model and data set, no files written, the precision (one override), then the test's own
// overrides (later wins). The schedule is constant so that the learning rate does not depend on the total
// step count (test 4's reference would otherwise see another schedule), and FP16's init_scale is small
// enough that no step of this model overflows on its own: a skipped step in these tests is always the one a
// test caused. BF16 trains unscaled (amp.dtype bfloat16 refuses an init_scale).
#define FP16 "amp.init_scale=256"
#define BF16 "amp.dtype=bfloat16"

static void make_config_in(Config *cfg, const char *precision, const char *const *extra) {
    static const char *const base[] = {
        "model.arch=custom",       "model.layers=[1,1,1,1]", "model.planes=8",       "model.base_width=16",
        "model.cardinality=2",     "model.image_size=32",    "model.num_classes=10", "data.source=learnable",
        "data.train_size=96",      "data.val_size=0",        "data.batch_size=4",    "data.prefetch=0",
        "train.schedule=constant", "train.warmup_steps=0",   "train.lr=0.05",        "log.metrics=",
        "log.progress=never",      "checkpoint.dir=",
    };
    char *all[MAX_OVERRIDES];
    int n = 0;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) all[n++] = (char *)base[i];
    all[n++] = (char *)precision;
    for (; extra && *extra; extra++) {
        ck_assert_int_lt(n, MAX_OVERRIDES);
        all[n++] = (char *)*extra;
    }
    ck_assert_int_eq(config_load(cfg, NULL, n, all, stderr), 0);
}

static void make_config(Config *cfg, const char *const *extra) { make_config_in(cfg, FP16, extra); }

static void trainer_start(Trainer *t, const Config *cfg, Comm *c) {
    ck_assert_int_eq(trainer_init(t, cfg, be, c, c == comm ? grad_comm : c), 0);
}

// ---- host views of the state the invariant is about ------------------------------------------------------

typedef struct State {
    size_t n;  // padded_numel
    float *master, *momentum;
    ScalerState scaler;
} State;

static void state_read(Trainer *t, State *s) {
    if (!s->master) {
        s->n = t->model.params.padded_numel;
        s->master = xcalloc(s->n, sizeof(float));
        s->momentum = xcalloc(s->n, sizeof(float));
    }
    be->to_host(be, s->master, t->model.master, s->n * sizeof(float));
    be->to_host(be, s->momentum, t->opt.momentum, s->n * sizeof(float));
    s->scaler = scaler_read(&t->scaler, be);
}

static void state_free(State *s) {
    free(s->master), free(s->momentum);
    memset(s, 0, sizeof *s);
}

// Masters, momentum (the alignment gaps are zero in both, so whole buffers hash alike) and the whole
// scaler state: scale, growth counter, verdict, skip count.
static uint64_t state_hash(const State *s) {
    uint64_t h = tu_fnv1a(TU_FNV_OFFSET, s->master, s->n * sizeof(float));
    h = tu_fnv1a(h, s->momentum, s->n * sizeof(float));
    h = tu_fnv1a(h, &s->scaler.scale, sizeof s->scaler.scale);
    h = tu_fnv1a(h, &s->scaler.growth_count, sizeof s->scaler.growth_count);
    h = tu_fnv1a(h, &s->scaler.found_inf, sizeof s->scaler.found_inf);
    return tu_fnv1a(h, &s->scaler.skipped_total, sizeof s->scaler.skipped_total);
}

// ---- agreement across ranks (tu_on_every_rank, tu_gather_bytes in test_util.h) -----------------------------

// 1 when every rank passed the same value; why lists them all otherwise. The same answer on every rank.
static int same_on_every_rank(uint64_t mine, char *why, size_t cap) {
    uint64_t all[MAX_RANKS];
    ck_assert_int_le(comm->size, MAX_RANKS);
    tu_gather_bytes(comm, &mine, sizeof mine, all);
    int same = 1;
    size_t used = (size_t)snprintf(why, cap, "hashes by rank:");
    for (int r = 0; r < comm->size; r++) {
        same &= all[r] == all[0];
        if (used < cap)
            used += (size_t)snprintf(why + used, cap - used, " %016llx", (unsigned long long)all[r]);
    }
    return same;
}

// One step of each of two trainers run side by side, and their states after it.
static void step_both(Trainer *x, Trainer *y, State *sx, State *sy) {
    tu_train_step(x);
    tu_train_step(y);
    state_read(x, sx);
    state_read(y, sy);
}

static int master_changed(const State *before, const State *after) {
    return memcmp(before->master, after->master, after->n * sizeof(float)) != 0;
}

// ---- 1. bitwise identity after every step ------------------------------------------------------------------

// fp16 (_i 0) with growth_interval 3: the scale grows twice within 8 steps, so a scale update is compared
// too; bf16 (_i 1): the gradients summed in bf16, the scale 1 throughout.
START_TEST(every_rank_holds_identical_state_after_every_step) {
    static Config cfg;
    make_config_in(&cfg, _i ? BF16 : FP16, (const char *const[]){_i ? NULL : "amp.growth_interval=3", NULL});
    Trainer t;
    trainer_start(&t, &cfg, comm);
    ck_assert_int_eq(t.model.act_dt, _i ? DTYPE_BF16 : DTYPE_F16);
    State before = {0}, after = {0};
    state_read(&t, &before);
    char why[512];
    ck_assert_msg(same_on_every_rank(state_hash(&before), why, sizeof why), "at initialisation: %s", why);
    for (int step = 1; step <= 8; step++) {
        tu_train_step(&t);
        state_read(&t, &after);
        ck_assert_msg(same_on_every_rank(state_hash(&after), why, sizeof why), "after step %d: %s", step,
                      why);
        // Identical but frozen weights would pass the line above: every step must also have trained.
        ck_assert_msg(tu_on_every_rank(comm, master_changed(&before, &after)),
                      "step %d left the weights unchanged", step);
        State swap = before;
        before = after, after = swap;
    }
    // `before` now holds the state after step 8: 8 clean steps; fp16 grew after steps 3 and 6.
    ck_assert_int_eq(before.scaler.skipped_total, 0);
    ck_assert_float_eq(before.scaler.scale, _i ? 1.0f : 256.0f * 4.0f);
    ck_assert_int_eq(before.scaler.growth_count, _i ? 0 : 2);
    state_free(&before), state_free(&after);
    trainer_free(&t);
}
END_TEST

// ---- 2. inf on one rank skips the step on every rank ---------------------------------------------------------

// The facts of a skipped step k, on this rank: nothing of the update was written, the scale backed off
// exactly (fp16: halved; bf16: still 1), the counter reset, the skip counted. Returns 1 when all hold; why
// says which did not.
static int step_was_skipped(const State *before, const State *after, int bf16, char *why, size_t cap) {
    const float want_scale = bf16 ? 1.0f : before->scaler.scale * 0.5f;
    const char *fail =
        memcmp(before->master, after->master, after->n * sizeof(float)) != 0       ? "master weights changed"
        : memcmp(before->momentum, after->momentum, after->n * sizeof(float)) != 0 ? "momentum changed"
        : after->scaler.scale != want_scale ? (bf16 ? "scale is not 1" : "scale did not halve")
        : after->scaler.skipped_total != before->scaler.skipped_total + 1 ? "skipped_total did not grow"
        : after->scaler.growth_count != 0                                 ? "growth_count not reset"
        : after->scaler.found_inf != 1.0f                                 ? "verdict not set"
                                                                          : NULL;
    snprintf(why, cap, "rank %d: %s (scale %g -> %g, growth %d -> %d, skipped %d -> %d)", comm->rank,
             fail ? fail : "skipped", before->scaler.scale, after->scaler.scale, before->scaler.growth_count,
             after->scaler.growth_count, before->scaler.skipped_total, after->scaler.skipped_total);
    return fail == NULL;
}

// fp16 (_i 0) and bf16 (_i 1), whose scale stays 1 through the skip.
START_TEST(inf_on_one_rank_skips_the_step_everywhere) {
    enum { K = 3 };
    static Config cfg;
    char rank_override[64];
    // The last rank poisons its local gradient; with one rank that is rank 0 itself.
    snprintf(rank_override, sizeof rank_override, "debug.inject_rank=%d", comm->size - 1);
    make_config_in(
        &cfg, _i ? BF16 : FP16,
        (const char *const[]){"debug.inject_step=3", rank_override, "debug.inject_value=.inf", NULL});
    ck_assert_int_eq(cfg.debug.inject_step, K);
    Trainer t;
    trainer_start(&t, &cfg, comm);
    tu_train_steps(&t, K);
    State before = {0}, after = {0};
    state_read(&t, &before);
    // fp16's counter must have something to reset (default growth_interval 2000, K clean steps); bf16 has
    // no growth to count.
    ck_assert_int_eq(before.scaler.growth_count, _i ? 0 : K);
    tu_train_step(&t);
    state_read(&t, &after);
    char why[512], hashes[512];
    int skipped = step_was_skipped(&before, &after, _i, why, sizeof why);
    ck_assert_msg(tu_on_every_rank(comm, skipped), "step %d: %s", K, why);
    ck_assert_msg(same_on_every_rank(state_hash(&after), hashes, sizeof hashes), "after the skip: %s",
                  hashes);
    // Training goes on: the next steps update again, still in lockstep.
    for (int step = K + 1; step < K + 3; step++) {
        State swap = before;
        before = after, after = swap;
        tu_train_step(&t);
        state_read(&t, &after);
        ck_assert_msg(tu_on_every_rank(comm, master_changed(&before, &after)),
                      "step %d after the skip did not train", step);
        ck_assert_msg(same_on_every_rank(state_hash(&after), hashes, sizeof hashes), "after step %d: %s",
                      step, hashes);
        ck_assert_int_eq(after.scaler.skipped_total, 1);
        ck_assert_float_eq(after.scaler.scale, _i ? 1.0f : before.scaler.scale);
    }
    state_free(&before), state_free(&after);
    trainer_free(&t);
}
END_TEST

// ---- 3. an overflow that only the 16-bit sum produces -----------------------------------------------------

// fp16 (_i 0): 40000 is finite (max 65504) on each rank, the sum over 2 or more ranks is not. bf16 (_i 1):
// 2e38 is finite (max 3.39e38) on each rank, the sum of two is not: the bf16 sum overflows as a bf16 add.
START_TEST(overflow_only_in_the_sum_skips_with_two_or_more_ranks) {
    enum { K = 1 };
    static Config cfg;
    const char *value = _i ? "debug.inject_value=2e38" : "debug.inject_value=40000";
    make_config_in(&cfg, _i ? BF16 : FP16,
                   (const char *const[]){"debug.inject_step=1", "debug.inject_rank=-1", value, NULL});
    Trainer t;
    trainer_start(&t, &cfg, comm);
    tu_train_steps(&t, K);
    State before = {0}, after = {0};
    state_read(&t, &before);
    tu_train_step(&t);
    state_read(&t, &after);
    char why[512], hashes[512];
    if (comm->size >= 2) {
        int skipped = step_was_skipped(&before, &after, _i, why, sizeof why);
        ck_assert_msg(tu_on_every_rank(comm, skipped), "%d ranks x %s must overflow the %s sum: %s",
                      comm->size, value, _i ? "bf16" : "fp16", why);
    } else {
        ck_assert_msg(master_changed(&before, &after), "one rank: %s is finite, the step must train", value);
        ck_assert_float_eq(after.scaler.found_inf, 0.0f);
        ck_assert_float_eq(after.scaler.scale, before.scaler.scale);
        ck_assert_int_eq(after.scaler.skipped_total, before.scaler.skipped_total);
        ck_assert_int_eq(after.scaler.growth_count, _i ? 0 : before.scaler.growth_count + 1);
    }
    ck_assert_msg(same_on_every_rank(state_hash(&after), hashes, sizeof hashes), "%s", hashes);
    state_free(&before), state_free(&after);
    trainer_free(&t);
}
END_TEST

// ---- 4. W ranks x batch b == 1 rank x batch b x accumulation W -------------------------------------------------

START_TEST(ranks_equal_one_rank_with_accumulation) {
    enum { STEPS = 4 };
    static Config cfg, ref_cfg;
    make_config(&cfg, (const char *const[]){"amp.enabled=false", NULL});
    Trainer t;
    trainer_start(&t, &cfg, comm);
    State init = {0}, dist = {0};
    state_read(&t, &init);
    tu_train_steps(&t, STEPS);
    state_read(&t, &dist);

    // Rank 0 alone runs the reference on the single communicator (it makes no MPI call). By the order
    // rule of sampler.h its micro-step m of step s reads the block rank m reads in step s, so both runs
    // see the same samples in the same steps; the gradient sums differ only in summation order.
    double errors[3] = {0};  // weights vs reference, momentum vs reference, weights moved from init
    if (comm->rank == 0) {
        char accum[64];
        snprintf(accum, sizeof accum, "train.accum_steps=%d", comm->size);
        make_config(&ref_cfg, (const char *const[]){"amp.enabled=false", accum, NULL});
        Comm *single = comm_single_create();
        Trainer ref;
        trainer_start(&ref, &ref_cfg, single);
        ck_assert_int_eq(ref.sampler.world, 1);
        ck_assert_int_eq(ref.steps_per_epoch, t.steps_per_epoch);
        tu_train_steps(&ref, STEPS);
        State want = {0};
        state_read(&ref, &want);
        errors[0] = tu_rel_error(dist.master, want.master, want.n);
        errors[1] = tu_rel_error(dist.momentum, want.momentum, want.n);
        errors[2] = tu_rel_error(init.master, want.master, want.n);
        state_free(&want);
        trainer_free(&ref);
        single->destroy(single);
    }
    comm->broadcast(comm, errors, sizeof errors, 0);
    // CPU: the sums happen in the same order, so the runs agree exactly (1e-5 is slack). CUDA: cuDNN's
    // accumulating filter gradient (beta = 1) and NCCL's sum round differently, and four SGD steps on
    // 4-sample batches amplify that (seen on two H200s: weights 9.5e-5, momentum 1.9e-3 apart; momentum
    // is a sum of gradients, whose batch-norm parts nearly cancel at this batch size).
    int on_cpu = strcmp(be->name, "cpu") == 0;
    ck_assert_msg(errors[0] < (on_cpu ? 1e-5 : 1e-3), "%d ranks vs 1 rank x accum %d: weights differ by %g",
                  comm->size, comm->size, errors[0]);
    ck_assert_msg(errors[1] < (on_cpu ? 1e-5 : 1e-2), "momentum differs by %g", errors[1]);
    // Not vacuous: training moved the weights far more than the tolerance.
    ck_assert_msg(errors[2] > 1e-3, "%d steps moved the weights by only %g", STEPS, errors[2]);
    state_free(&init), state_free(&dist);
    trainer_free(&t);
}
END_TEST

// ---- 5. the shards of an epoch are the dataset -----------------------------------------------------------------

START_TEST(shards_cover_the_dataset_once) {
    enum { SIZE = 97, BATCH = 4, ACCUM = 2, EPOCHS = 2 };  // 97 is prime: no global batch divides it
    Sampler s;
    sampler_init(&s, SIZE, BATCH, comm->size, comm->rank, ACCUM, 0, 42);
    int steps = sampler_steps_per_epoch(&s), global = BATCH * comm->size * ACCUM;
    ck_assert_int_ne(SIZE % global, 0);
    ck_assert_int_lt(sampler_step_total(&s, 0, steps - 1), global);  // the partial last step is exercised
    float *seen = xcalloc(SIZE, sizeof(float)), *per_step = xcalloc((size_t)steps, sizeof(float));
    int32_t indices[BATCH];
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        memset(seen, 0, SIZE * sizeof(float));
        memset(per_step, 0, (size_t)steps * sizeof(float));
        for (int step = 0; step < steps; step++)
            for (int m = 0; m < ACCUM; m++) {
                int count = sampler_block(&s, epoch, step, m, indices);
                for (int i = 0; i < count; i++) {
                    ck_assert_int_ge(indices[i], 0);
                    ck_assert_int_lt(indices[i], SIZE);
                    seen[indices[i]] += 1.0f;
                }
                per_step[step] += (float)count;
            }
        // Small integer counts: the fp32 sums over ranks are exact.
        comm->allreduce_sum(comm, seen, SIZE, DTYPE_F32);
        comm->allreduce_sum(comm, per_step, (size_t)steps, DTYPE_F32);
        for (int i = 0; i < SIZE; i++)
            ck_assert_msg(seen[i] == 1.0f, "epoch %d: sample %d read %g times over %d ranks", epoch, i,
                          seen[i], comm->size);
        for (int step = 0; step < steps; step++)
            ck_assert_msg(per_step[step] == (float)sampler_step_total(&s, epoch, step),
                          "epoch %d step %d: ranks read %g samples, the step has %d", epoch, step,
                          per_step[step], sampler_step_total(&s, epoch, step));
    }
    free(seen), free(per_step);
    sampler_free(&s);
}
END_TEST

// ---- 6. BN statistics averaging and evaluation agree -----------------------------------------------------------

START_TEST(bn_sync_and_evaluation_agree_on_every_rank) {
    enum { VAL = 10 };  // not a multiple of 2 or 3: the validation shards are uneven
    static Config cfg;
    make_config(&cfg, (const char *const[]){"data.val_size=10", NULL});
    Trainer t;
    trainer_start(&t, &cfg, comm);
    tu_train_steps(&t, 3);

    size_t n = t.model.stats_numel;
    float *mine = xcalloc(n, sizeof(float)), *all = xcalloc(n * (size_t)comm->size, sizeof(float));
    be->to_host(be, mine, t.model.running, n * sizeof(float));
    char why[512];
    int same_before = same_on_every_rank(tu_fnv1a(TU_FNV_OFFSET, mine, n * sizeof(float)), why, sizeof why);
    // Ranks trained on different samples, so with 2 or more their statistics differ until synced.
    if (comm->size >= 2) ck_assert_msg(!same_before, "BN statistics equal before the sync: %s", why);
    tu_gather_bytes(comm, mine, n * sizeof(float), all);

    evaluate_sync_bn_stats(&t.model, t.be, t.comm);
    float *synced = xcalloc(n, sizeof(float));
    be->to_host(be, synced, t.model.running, n * sizeof(float));
    ck_assert_msg(same_on_every_rank(tu_fnv1a(TU_FNV_OFFSET, synced, n * sizeof(float)), why, sizeof why),
                  "BN statistics after the sync: %s", why);
    // And it is the mean over ranks (reference in double from every rank's own statistics).
    float *mean = xcalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) {
        double sum = 0;
        for (int r = 0; r < comm->size; r++) sum += all[(size_t)r * n + i];
        mean[i] = (float)(sum / comm->size);
    }
    double err = tu_rel_error(synced, mean, n);
    ck_assert_msg(tu_on_every_rank(comm, err < 1e-6),
                  "synced statistics differ from the mean over ranks by %g", err);

    EvalRecord r = trainer_evaluate(&t);
    ck_assert_int_eq(r.samples, VAL);
    double fields[4] = {r.loss, r.top1, r.top5, (double)r.samples};
    ck_assert_msg(same_on_every_rank(tu_fnv1a(TU_FNV_OFFSET, fields, sizeof fields), why, sizeof why),
                  "evaluation (loss %g, top-1 %g, samples %ld) differs: %s", r.loss, r.top1, r.samples, why);

    // The sharded evaluation is the evaluation of the whole split: rank 0 evaluates a single-rank copy
    // of the same weights and statistics. Per-sample logits do not depend on the batching; the mean loss
    // only by fp32 summation order.
    double got[3] = {0};  // samples, top-1, loss of the reference
    if (comm->rank == 0) {
        Comm *single = comm_single_create();
        Trainer ref;
        trainer_start(&ref, &cfg, single);
        be->copy(be, ref.model.master, t.model.master, t.model.params.padded_numel * sizeof(float));
        be->copy(be, ref.model.running, t.model.running, n * sizeof(float));
        model_refresh_compute(&ref.model, be);
        EvalRecord want = trainer_evaluate(&ref);
        got[0] = (double)want.samples, got[1] = want.top1, got[2] = want.loss;
        trainer_free(&ref);
        single->destroy(single);
    }
    comm->broadcast(comm, got, sizeof got, 0);
    ck_assert_int_eq((long)got[0], VAL);
    ck_assert_msg(got[1] == r.top1, "top-1 %g over %d ranks, %g on one", r.top1, comm->size, got[1]);
    ck_assert_msg(fabs(r.loss - got[2]) <= 1e-5 * fabs(got[2]), "loss %.9g over %d ranks, %.9g on one",
                  r.loss, comm->size, got[2]);
    free(mine), free(all), free(synced), free(mean);
    trainer_free(&t);
}
END_TEST

// ---- 7. a model cut into many buckets ------------------------------------------------------------------------

// dist.bucket_mb so small that each step's gradient goes out in dozens of collectives, most of them
// started while backward is still running (NCCL on the device suite's dp2 stage, MPI in CI): every rank
// still holds the same state after every step, and the same state as a run that sends one bucket.
START_TEST(many_buckets_train_like_one) {
    enum { STEPS = 3 };
    static Config many_cfg, one_cfg;
    make_config(&many_cfg,
                (const char *const[]){"dist.bucket_mb=0.0002", "dist.first_bucket_mb=0.0001", NULL});
    make_config(&one_cfg, (const char *const[]){"dist.bucket_mb=64", "dist.first_bucket_mb=64", NULL});
    Trainer many, one;
    trainer_start(&many, &many_cfg, comm);
    trainer_start(&one, &one_cfg, comm);
    ck_assert_int_eq(one.buckets.count, 1);
    ck_assert_msg(many.buckets.count >= 20, "only %d buckets", many.buckets.count);  // not vacuous
    State a = {0}, b = {0};
    char why[512];
    for (int step = 1; step <= STEPS; step++) {
        step_both(&many, &one, &a, &b);
        ck_assert_msg(same_on_every_rank(state_hash(&a), why, sizeof why), "%d buckets, after step %d: %s",
                      many.buckets.count, step, why);
        // With 1 or 2 ranks each element's sum is one addition, so where the buckets end cannot change it.
        // With 3 the library may order the two additions differently for buffers of different sizes; on
        // 4-sample batches that one rounding grows chaotically within steps, so there only the identity
        // across ranks above is exact.
        if (comm->size <= 2)
            ck_assert_msg(
                tu_on_every_rank(comm, memcmp(a.master, b.master, a.n * sizeof(float)) == 0 &&
                                           memcmp(a.momentum, b.momentum, a.n * sizeof(float)) == 0),
                "%d buckets vs one: state differs after step %d", many.buckets.count, step);
    }
    state_free(&a), state_free(&b);
    trainer_free(&many);
    trainer_free(&one);
}
END_TEST

// ---- 7b. the graph path against plain launches ----------------------------------------------------------------

// The step captured once and replayed (train.cuda_graph: on; on the CPU backend an op log with a graph's
// semantics, the communicator's sums recorded in their place) against the same run as launches: bitwise
// the same state after every step, on every rank. The learning rate changes every step (warm-up), an inf
// on the last rank at step 4 and the epoch's partial last step run as launches in the middle of replays.
START_TEST(graph_path_trains_like_launches) {
    enum { STEPS = 13 };
    char rank_override[64];
    snprintf(rank_override, sizeof rank_override, "debug.inject_rank=%d", comm->size - 1);
    static Config graph_cfg, launch_cfg;
    const char *common[] = {"data.train_size=92", "train.warmup_steps=6", "debug.inject_step=4",
                            rank_override};
    make_config(&graph_cfg, (const char *const[]){common[0], common[1], common[2], common[3],
                                                  "train.cuda_graph=on", NULL});
    make_config(&launch_cfg, (const char *const[]){common[0], common[1], common[2], common[3],
                                                   "train.cuda_graph=off", NULL});
    Trainer g, l;
    trainer_start(&g, &graph_cfg, comm);
    trainer_start(&l, &launch_cfg, comm);
    ck_assert(g.graph.enabled && !l.graph.enabled);
    State a = {0}, b = {0};
    char why[512];
    for (int step = 1; step <= STEPS; step++) {
        step_both(&g, &l, &a, &b);
        ck_assert_msg(tu_on_every_rank(comm, state_hash(&a) == state_hash(&b)),
                      "step %d: the graph and launches differ", step);
        ck_assert_msg(same_on_every_rank(state_hash(&a), why, sizeof why), "graph, after step %d: %s", step,
                      why);
    }
    ck_assert_int_eq(a.scaler.skipped_total, 1);
    // replayed: all but the first eligible step, the injection step and the partial step(s)
    ck_assert_msg(g.graph.replayed >= STEPS - 4, "only %ld of %d steps replayed", g.graph.replayed, STEPS);
    ck_assert_int_eq(l.graph.replayed, 0);
    state_free(&a), state_free(&b);
    trainer_free(&g);
    trainer_free(&l);
}
END_TEST

// ---- 7c. MixUp, CutMix and label smoothing -------------------------------------------------------------------

// Each rank mixes its own micro-batch with its own draw (data/batch_mix.h), yet the summed gradient keeps
// every rank's state bitwise the same. The draws reach the device before each step, so the graph path, which
// captured the step once, trains bitwise like launches (a draw baked into the capture would differ from the
// next step on). Not vacuous: the same run without mixing and smoothing ends elsewhere.
START_TEST(mixing_keeps_ranks_identical_and_the_graph_follows_the_draws) {
    enum { STEPS = 10 };
    static Config graph_cfg, launch_cfg, plain_cfg;
    const char *mixing[] = {"data.mixup_alpha=0.2", "data.cutmix_alpha=1.0", "train.label_smoothing=0.1"};
    make_config(&graph_cfg, (const char *const[]){"data.train_size=92", mixing[0], mixing[1], mixing[2],
                                                  "train.cuda_graph=on", NULL});
    make_config(&launch_cfg, (const char *const[]){"data.train_size=92", mixing[0], mixing[1], mixing[2],
                                                   "train.cuda_graph=off", NULL});
    make_config(&plain_cfg, (const char *const[]){"data.train_size=92", "train.cuda_graph=off", NULL});
    Trainer g, l, p;
    trainer_start(&g, &graph_cfg, comm);
    trainer_start(&l, &launch_cfg, comm);
    trainer_start(&p, &plain_cfg, comm);
    State a = {0}, b = {0}, c = {0};
    char why[512];
    for (int step = 1; step <= STEPS; step++) {
        tu_train_step(&g);
        tu_train_step(&l);
        tu_train_step(&p);
        state_read(&g, &a);
        state_read(&l, &b);
        ck_assert_msg(same_on_every_rank(state_hash(&b), why, sizeof why), "mixing, after step %d: %s", step,
                      why);
        ck_assert_msg(tu_on_every_rank(comm, state_hash(&a) == state_hash(&b)),
                      "step %d: the graph and launches differ with mixing on", step);
    }
    state_read(&p, &c);
    ck_assert_msg(tu_on_every_rank(comm, memcmp(b.master, c.master, b.n * sizeof(float)) != 0),
                  "mixing and smoothing left training unchanged");
    ck_assert_msg(g.graph.replayed >= STEPS - 4, "only %ld of %d steps replayed", g.graph.replayed, STEPS);
    state_free(&a), state_free(&b), state_free(&c);
    trainer_free(&g), trainer_free(&l), trainer_free(&p);
}
END_TEST

// ---- 7d. the recipe's optimizer: decay groups, clipping, EMA ----------------------------------------------

// train.norm_weight_decay, train.clip_grad_norm (low enough to clip every step) and the EMA (updated every
// other step, the first three steps warm-up copies), graph and launches: every rank holds the same masters,
// momentum, scaler state, gradient norm and EMA weights after every step, and the graph the same as
// launches. The norm is computed on the reduced buffer every rank holds, so it is the same bits everywhere;
// the EMA's BN statistics are per rank (as the model's) until a sync, which then makes them equal.
START_TEST(recipe_optimizer_keeps_ranks_identical) {
    enum { STEPS = 9 };
    static Config graph_cfg, launch_cfg;
    const char *common[] = {"train.norm_weight_decay=0", "train.clip_grad_norm=0.05", "train.ema_decay=0.9",
                            "train.ema_every=2", "train.warmup_steps=3"};
    make_config(&graph_cfg, (const char *const[]){common[0], common[1], common[2], common[3], common[4],
                                                  "train.cuda_graph=on", NULL});
    make_config(&launch_cfg, (const char *const[]){common[0], common[1], common[2], common[3], common[4],
                                                   "train.cuda_graph=off", NULL});
    Trainer g, l;
    trainer_start(&g, &graph_cfg, comm);
    trainer_start(&l, &launch_cfg, comm);
    size_t np = g.model.params.padded_numel, ns = g.model.stats_numel;
    float *ema = xcalloc(np, sizeof(float)), *ema_l = xcalloc(np, sizeof(float)),
          *stats = xcalloc(ns, sizeof(float));
    State a = {0}, b = {0};
    char why[512];
    for (int step = 1; step <= STEPS; step++) {
        step_both(&g, &l, &a, &b);
        float norm, norm_l;
        be->to_host(be, &norm, g.opt.grad_norm, sizeof norm);
        be->to_host(be, &norm_l, l.opt.grad_norm, sizeof norm_l);
        be->to_host(be, ema, g.ema.params, np * sizeof(float));
        be->to_host(be, ema_l, l.ema.params, np * sizeof(float));
        uint64_t h = tu_fnv1a(tu_fnv1a(state_hash(&a), &norm, sizeof norm), ema, np * sizeof(float));
        uint64_t h_l = tu_fnv1a(tu_fnv1a(state_hash(&b), &norm_l, sizeof norm_l), ema_l, np * sizeof(float));
        ck_assert_msg(same_on_every_rank(h, why, sizeof why), "after step %d: %s", step, why);
        ck_assert_msg(tu_on_every_rank(comm, h == h_l), "step %d: the graph and launches differ", step);
        ck_assert_msg(tu_on_every_rank(comm, norm > 0.05f && isfinite(norm)),
                      "step %d: norm %g does not clip", step, norm);
    }
    ck_assert_int_gt(g.ema.n_averaged, 0);
    ck_assert_msg(g.graph.replayed >= STEPS - 3, "only %ld of %d steps replayed", g.graph.replayed, STEPS);
    ema_sync_stats(&g.ema, &g.model, be, comm);
    be->to_host(be, stats, g.ema.stats, ns * sizeof(float));
    ck_assert_msg(same_on_every_rank(tu_fnv1a(TU_FNV_OFFSET, stats, ns * sizeof(float)), why, sizeof why),
                  "EMA statistics after the sync: %s", why);
    free(ema), free(ema_l), free(stats);
    state_free(&a), state_free(&b);
    trainer_free(&g);
    trainer_free(&l);
}
END_TEST

// ---- 8. resume and the batch-norm running statistics ---------------------------------------------------------

static void run_to(Trainer *t, Config *cfg, const char *const *overrides) {
    make_config(cfg, overrides);
    trainer_start(t, cfg, comm);
    ck_assert_int_eq(trainer_run(t, NULL), 0);
}

static float *running_stats(Trainer *t) {
    float *host = xcalloc(t->model.stats_numel, sizeof(float));
    be->to_host(be, host, t->model.running, t->model.stats_numel * sizeof(float));
    return host;
}

// A checkpoint holds one set of BN running statistics, the mean over ranks, and writing it makes every
// rank of the live run hold that mean too (trainer.c save_checkpoint). So a run resumed from the file
// continues bitwise like the run that wrote it and went on (writer). A run that wrote no checkpoint at
// that step (straight) keeps each rank's own statistics until its next sync; averaging commutes with
// the running-average update in exact arithmetic only, so its statistics differ from the resumed run's
// by rounding - with 2 or more ranks; with one, averaging is the identity. Weights, momentum and the
// scaler never read the running statistics (training normalises with batch statistics): bitwise always.
START_TEST(resume_matches_the_writer_bitwise_and_a_straight_run_but_for_bn_rounding) {
    static Config straight_cfg, writer_cfg, first_cfg, resumed_cfg;
    Trainer straight, writer, first, resumed;
    const char *common[] = {"train.steps=8", "checkpoint.every=4"};
    run_to(&writer, &writer_cfg,
           (const char *const[]){common[0], common[1], "checkpoint.dir=dp_writer", NULL});
    run_to(&first, &first_cfg, (const char *const[]){"train.steps=4", "checkpoint.dir=dp_first", NULL});
    comm->barrier(comm);  // rank 0 wrote the file
    run_to(&resumed, &resumed_cfg,
           (const char *const[]){common[0], "checkpoint.dir=dp_resumed",
                                 "checkpoint.resume=dp_first/last.safetensors", NULL});
    run_to(&straight, &straight_cfg, (const char *const[]){common[0], "checkpoint.dir=dp_straight", NULL});
    ck_assert_int_eq(resumed.step, 8);

    State w = {0}, r = {0}, s = {0};
    state_read(&writer, &w), state_read(&resumed, &r), state_read(&straight, &s);
    char why[512];
    ck_assert_msg(
        tu_on_every_rank(comm, state_hash(&w) == state_hash(&r) && state_hash(&s) == state_hash(&r)),
        "weights, momentum or scaler differ after the resume");
    ck_assert_msg(same_on_every_rank(state_hash(&r), why, sizeof why), "resumed state across ranks: %s", why);

    size_t n = resumed.model.stats_numel;
    float *bn_w = running_stats(&writer), *bn_r = running_stats(&resumed), *bn_s = running_stats(&straight);
    ck_assert_msg(tu_on_every_rank(comm, memcmp(bn_w, bn_r, n * sizeof(float)) == 0),
                  "BN running statistics of the resumed run differ from the writer's");
    double err = tu_rel_error(bn_s, bn_r, n);
    int bitwise = memcmp(bn_s, bn_r, n * sizeof(float)) == 0;
    if (comm->rank == 0)
        printf("BN running statistics, straight vs resumed on %d ranks: %s (relative %.2g)\n", comm->size,
               bitwise ? "bitwise equal" : "rounding apart", err);
    ck_assert_msg(tu_on_every_rank(comm, comm->size > 1 ? err < 1e-6 : bitwise),
                  "BN running statistics of a straight run vs the resumed one: %g apart", err);
    free(bn_w), free(bn_r), free(bn_s);
    state_free(&w), state_free(&r), state_free(&s);
    trainer_free(&straight), trainer_free(&writer), trainer_free(&first), trainer_free(&resumed);
}
END_TEST

// ---- 9. a run from a file's weights (model.init) ----------------------------------------------------------

// Every rank reads the file itself; the classifier of another class count stays each rank's own draw from
// the same seed, so the ranks start identical, differ from a fresh draw, and stay identical step by step.
START_TEST(init_from_a_file_starts_and_stays_identical) {
    static Config file_cfg, init_cfg, fresh_cfg;
    Trainer file_run, init, fresh;
    run_to(&file_run, &file_cfg,
           (const char *const[]){"train.steps=2", "model.num_classes=7", "checkpoint.dir=dp_init", NULL});
    trainer_free(&file_run);
    comm->barrier(comm);  // rank 0 wrote the file
    make_config(&init_cfg, (const char *const[]){"model.init=dp_init/last.safetensors", NULL});
    make_config(&fresh_cfg, NULL);
    trainer_start(&init, &init_cfg, comm);
    trainer_start(&fresh, &fresh_cfg, comm);
    State s = {0}, drawn = {0};
    state_read(&init, &s), state_read(&fresh, &drawn);
    char why[512];
    ck_assert_msg(same_on_every_rank(state_hash(&s), why, sizeof why), "after model.init: %s", why);
    ck_assert_msg(tu_on_every_rank(comm, master_changed(&drawn, &s)), "model.init left the drawn weights");
    for (int step = 1; step <= 4; step++) {
        tu_train_step(&init);
        state_read(&init, &s);
        ck_assert_msg(same_on_every_rank(state_hash(&s), why, sizeof why), "after step %d: %s", step, why);
    }
    state_free(&s), state_free(&drawn);
    trainer_free(&init), trainer_free(&fresh);
}
END_TEST

static Suite *data_parallel_suite(void) {
    Suite *s = suite_create("data_parallel");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, every_rank_holds_identical_state_after_every_step, 0, 2);
    tcase_add_loop_test(tc, inf_on_one_rank_skips_the_step_everywhere, 0, 2);
    tcase_add_loop_test(tc, overflow_only_in_the_sum_skips_with_two_or_more_ranks, 0, 2);
    tcase_add_test(tc, ranks_equal_one_rank_with_accumulation);
    tcase_add_test(tc, shards_cover_the_dataset_once);
    tcase_add_test(tc, bn_sync_and_evaluation_agree_on_every_rank);
    tcase_add_test(tc, many_buckets_train_like_one);
    tcase_add_test(tc, graph_path_trains_like_launches);
    tcase_add_test(tc, mixing_keeps_ranks_identical_and_the_graph_follows_the_draws);
    tcase_add_test(tc, recipe_optimizer_keeps_ranks_identical);
    tcase_add_test(tc, resume_matches_the_writer_bitwise_and_a_straight_run_but_for_bn_rounding);
    tcase_add_test(tc, init_from_a_file_starts_and_stays_identical);
    suite_add_tcase(s, tc);
    return s;
}

// AMPTRAIN_TEST_BACKEND=cuda (the device machine, mpirun -np 2 on two GPUs) runs the same invariants on
// the CUDA backend with gradients summed by NCCL; by default (CI) the CPU backend with MPI.
static void backend_start(void) {
    const char *want = getenv("AMPTRAIN_TEST_BACKEND");
    grad_comm = comm;
    if (!want || strcmp(want, "cuda") != 0) {
        be = cpu_backend_create();
        return;
    }
    char why[256];
    be = cuda_backend_create(comm->local_rank, NULL, why, sizeof why);
    if (!be) amp_fatal(__FILE__, __LINE__, "AMPTRAIN_TEST_BACKEND=cuda but: %s", why);
    if (comm->size > 1) grad_comm = comm_nccl_create(comm, cuda_backend_stream(be));
    if (!grad_comm) amp_fatal(__FILE__, __LINE__, "AMPTRAIN_TEST_BACKEND=cuda needs NCCL with several ranks");
    if (comm->rank == 0) printf("test_data_parallel: CUDA backend, gradients over %s\n", grad_comm->name);
}

int main(int argc, char **argv) {
    comm = comm_init(&argc, &argv, 120.0);
    backend_start();
    int rc = tu_run_suite(data_parallel_suite(), 0);
    if (grad_comm != comm) grad_comm->destroy(grad_comm);
    be->destroy(be);
    comm->destroy(comm);
    comm_finalize();
    return rc;
}

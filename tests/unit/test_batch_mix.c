// test_batch_mix.c - MixUp and CutMix draws (data/batch_mix.h) against torchvision's rules worked by hand
// and the Beta distribution's known moments and CDF; their keying by (seed, step, micro-batch, rank); and
// the training step's use of them: the model's input and loss are the mixed ones of that step's draw.
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/check.h"
#include "data/batch_mix.h"
#include "data/dataset.h"
#include "dist/dist.h"
#include "tests/test_util.h"
#include "train/trainer.h"

// ---- CutMix's box -----------------------------------------------------------------------------------------

// torchvision's CutMix._get_params worked by hand. r = 0.5 sqrt(1 - lam); half-sides int(r W), int(r H).
//   32x32, lam 0.75: r = 0.25, half-sides 8; centre (4, 20): x [0, 12), y [12, 28); lam 1 - 192/1024
//   h 20 x w 40, lam 0.36: r = 0.4, half-sides 16 and 8; centre (30, 3): x [14, 40), y [0, 11); 1 - 286/800
//   h 24 x w 40, lam 0.5: r = 0.3536, half-sides int(14.14) = 14 and int(8.49) = 8; centre (10, 10): x [0, 24),
//   y [2, 18); 1 - 384/960 = 0.6
START_TEST(test_cutmix_box_matches_hand_computed_cases) {
    const struct {
        double lam;
        int r_x, r_y, h, w;
        int x1, y1, x2, y2;
        double corrected;
    } cases[] = {
        {0.75, 4, 20, 32, 32, 0, 12, 12, 28, 0.8125},
        {0.36, 30, 3, 20, 40, 14, 0, 40, 11, 1.0 - 286.0 / 800.0},
        {0.5, 10, 10, 24, 40, 0, 2, 24, 18, 0.6},
        {1.0, 5, 5, 16, 16, 5, 5, 5, 5, 1.0},  // lam 1: an empty box, nothing pasted
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        BatchMix m = batch_mix_cutmix(cases[i].lam, cases[i].r_x, cases[i].r_y, cases[i].h, cases[i].w);
        ck_assert_msg(m.x1 == cases[i].x1 && m.y1 == cases[i].y1 && m.x2 == cases[i].x2 &&
                          m.y2 == cases[i].y2,
                      "case %zu: box x [%d, %d) y [%d, %d)", i, m.x1, m.x2, m.y1, m.y2);
        ck_assert_int_eq(m.blend, 0);
        ck_assert_float_eq(m.lam, (float)cases[i].corrected);
        ck_assert_float_eq(m.rest, (float)(1.0 - cases[i].corrected));
    }
}
END_TEST

// Every lambda and centre on an odd-sized image: the box lies inside the image, its sides are at most
// sqrt(1 - lam) x the image's (2 int(0.5 sqrt(1 - lam) side), less where clipped) and more than that minus 2
// when it is not clipped, and lambda is corrected to the area pasted.
START_TEST(test_cutmix_box_lies_inside_and_lambda_is_its_area) {
    const int h = 11, w = 7;
    for (int li = 0; li <= 100; li++) {
        const double lam = li / 100.0, side = sqrt(1.0 - lam);
        for (int r_y = 0; r_y < h; r_y++)
            for (int r_x = 0; r_x < w; r_x++) {
                BatchMix m = batch_mix_cutmix(lam, r_x, r_y, h, w);
                ck_assert(0 <= m.x1 && m.x1 <= m.x2 && m.x2 <= w && 0 <= m.y1 && m.y1 <= m.y2 && m.y2 <= h);
                ck_assert(m.x1 <= r_x && r_x <= m.x2 && m.y1 <= r_y && r_y <= m.y2);
                ck_assert(m.x2 - m.x1 <= side * w + 1e-9 && m.y2 - m.y1 <= side * h + 1e-9);
                if (m.x1 > 0 && m.x2 < w) ck_assert(m.x2 - m.x1 > side * w - 2);
                if (m.y1 > 0 && m.y2 < h) ck_assert(m.y2 - m.y1 > side * h - 2);
                const double area = (double)(m.x2 - m.x1) * (m.y2 - m.y1) / (h * w);
                ck_assert_float_eq(m.lam, (float)(1.0 - area));
                ck_assert_float_eq(m.rest, (float)(1.0 - (1.0 - area)));
            }
    }
}
END_TEST

START_TEST(test_mixup_blends_with_lambda_and_its_complement) {
    BatchMix m = batch_mix_mixup(0.3);
    ck_assert(m.blend == 1 && m.lam == 0.3f && m.rest == (float)(1.0 - 0.3));
    ck_assert(m.x1 == m.x2 && m.y1 == m.y2);  // no box
}
END_TEST

// ---- Beta(alpha, alpha) ----------------------------------------------------------------------------------

// P(X < x) for X ~ Beta(a, a), by Simpson's rule after t = u^a, which makes the integrand smooth at 0:
// int_0^x u^(a-1) (1-u)^(a-1) du = (1/a) int_0^(x^a) (1 - t^(1/a))^(a-1) dt, over B(a, a) = G(a)^2 / G(2a).
static double beta_cdf(double x, double a) {
    const int steps = 2000;
    const double top = pow(x, a), dt = top / steps;
    double sum = 0;
    for (int i = 0; i <= steps; i++) {
        const double f = pow(1.0 - pow(i * dt, 1.0 / a), a - 1.0);
        sum += f * (i == 0 || i == steps ? 1 : i % 2 ? 4 : 2);
    }
    return sum * dt / 3.0 / a / (tgamma(a) * tgamma(a) / tgamma(2.0 * a));
}

// 40000 draws each: mean 1/2, variance 1 / (4 (2a + 1)), P(X < 0.1) as integrated above, every draw in
// [0, 1]. Standard errors: mean and the probability about 0.0025, the variance about 0.001; the bounds
// are 5 of them. Alpha 0.2 and 1 take the boosted (a < 1) and the plain Marsaglia-Tsang paths.
START_TEST(test_beta_draws_have_the_distributions_moments_and_cdf) {
    const double alphas[] = {0.2, 1.0, 2.5};
    for (size_t i = 0; i < sizeof alphas / sizeof alphas[0]; i++) {
        const double a = alphas[i];
        Rng r;
        rng_seed(&r, 1234, 77 + i);
        const int n = 40000;
        double sum = 0, sq = 0, below = 0;
        for (int k = 0; k < n; k++) {
            const double x = batch_mix_beta(&r, a);
            ck_assert_msg(x >= 0.0 && x <= 1.0, "alpha %g: draw %g outside [0, 1]", a, x);
            sum += x, sq += x * x, below += x < 0.1;
        }
        const double mean = sum / n, var = sq / n - mean * mean, cdf = beta_cdf(0.1, a);
        ck_assert_msg(fabs(mean - 0.5) < 0.0125, "alpha %g: mean %g", a, mean);
        const double want_var = 0.25 / (2 * a + 1);
        ck_assert_msg(fabs(var - want_var) < 0.005, "alpha %g: variance %g, want %g", a, var, want_var);
        ck_assert_msg(fabs(below / n - cdf) < 0.0125, "alpha %g: P(X < 0.1) %g, want %g", a, below / n, cdf);
    }
    // A tiny alpha puts nearly all the mass at 0 and 1: still finite draws in [0, 1].
    Rng r;
    rng_seed(&r, 99, 1);
    for (int k = 0; k < 1000; k++) {
        const double x = batch_mix_beta(&r, 0.01);
        ck_assert(x >= 0.0 && x <= 1.0);
    }
}
END_TEST

// ---- keys and the choice between the two -------------------------------------------------------------------

START_TEST(test_draws_are_keyed_by_seed_step_micro_batch_and_rank) {
    const BatchMix base = batch_mix_draw(0.2, 1.0, 42, 7, 1, 3, 32, 32);
    const BatchMix again = batch_mix_draw(0.2, 1.0, 42, 7, 1, 3, 32, 32);
    ck_assert(memcmp(&base, &again, sizeof base) == 0);
    const BatchMix other[] = {
        // seed, step, micro-batch, rank changed in turn
        batch_mix_draw(0.2, 1.0, 43, 7, 1, 3, 32, 32), batch_mix_draw(0.2, 1.0, 42, 8, 1, 3, 32, 32),
        batch_mix_draw(0.2, 1.0, 42, 7, 0, 3, 32, 32), batch_mix_draw(0.2, 1.0, 42, 7, 1, 2, 32, 32)};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        ck_assert_msg(memcmp(&base, &other[i], sizeof base) != 0, "key change %zu gave the same draw", i);
}
END_TEST

// With both alphas torchvision's RandomChoice picks one of the two with probability 1/2 (2000 steps: 1000
// expected, standard deviation 22); with one, always that one.
START_TEST(test_both_on_choose_mixup_or_cutmix_evenly) {
    int cutmix = 0;
    for (long step = 0; step < 2000; step++) {
        BatchMix both = batch_mix_draw(0.2, 1.0, 42, step, 0, 0, 24, 24);
        cutmix += !both.blend;
        ck_assert(batch_mix_draw(0.2, 0.0, 42, step, 0, 0, 24, 24).blend == 1);
        BatchMix c = batch_mix_draw(0.0, 1.0, 42, step, 0, 0, 24, 24);
        ck_assert(c.blend == 0 && c.x2 <= 24 && c.y2 <= 24);
    }
    ck_assert_msg(cutmix > 900 && cutmix < 1100, "CutMix chosen %d times in 2000", cutmix);
}
END_TEST

// ---- the training step -------------------------------------------------------------------------------------

// A trainer with MixUp and CutMix (one per step) and label smoothing, graphs off, AMP (fp16 input). After each
// step: the backend holds that step's draw; the model's input is the step's images normalised, then mixed by
// batch_mix with it; the loss is softmax_xent's with it and the smoothing, not the plain one.
START_TEST(test_the_step_trains_on_its_draw) {
    Config cfg;
    tu_config(&cfg, (const char *const[]){
                        "model.planes=8", "model.base_width=32", "model.cardinality=2", "data.batch_size=6",
                        "data.train_size=48", "data.val_size=0", "data.prefetch=0",
                        "log.metrics=", "checkpoint.dir=", "train.cuda_graph=off", "data.mixup_alpha=0.2",
                        "data.cutmix_alpha=1.0", "train.label_smoothing=0.1", NULL});
    Backend *be = cpu_backend_create();
    Comm *comm = comm_single_create();
    Trainer t;
    ck_assert_int_eq(trainer_init(&t, &cfg, be, comm, comm), 0);
    const Model *m = &t.model;
    const int n = cfg.data.batch_size, side = m->cfg.image_size, classes = m->cfg.num_classes;
    const size_t image_bytes = dataset_image_bytes(t.train_set), values = (size_t)n * side * side * 3;
    uint8_t *images = xcalloc((size_t)n, image_bytes);
    int32_t labels[6], indices[6];
    void *want_input = be->alloc(be, values * dtype_size(m->act_dt));
    void *dlogits = be->alloc(be, (size_t)n * classes * dtype_size(m->act_dt));
    int kinds[2] = {0};
    for (long step = 0; step < 8; step++) {
        ck_assert_int_eq(sampler_block(&t.sampler, t.epoch, t.step_in_epoch, 0, indices), n);
        dataset_get_batch(t.train_set, indices, n, t.epoch, images, labels);
        MicroBatch mb = {.count = n, .step_total = n, .host_images = images, .host_labels = labels};
        trainer_step_array(&t, &mb, 1);
        t.step_in_epoch++;

        const BatchMix draw = batch_mix_draw(0.2, 1.0, (uint64_t)cfg.train.seed, step, 0, 0, side, side);
        kinds[draw.blend]++;
        ck_assert_msg(memcmp(t.mix, &draw, sizeof draw) == 0, "step %ld: the backend holds another draw",
                      step);
        be->input_normalize(be, values / 3, DTYPE_U8, images, &t.input.affine, m->act_dt, want_input);
        be->batch_mix(be, m->act_dt, want_input, n, side, side, 3, &draw);
        ck_assert_msg(memcmp(t.act.input, want_input, values * dtype_size(m->act_dt)) == 0,
                      "step %ld: the model's input is not the batch mixed by the step's draw", step);
        float mixed, plain;
        const DType logits_dt = m->act_dt;
        be->softmax_xent(be, n, classes, logits_dt, t.act.logits, t.act.labels, &draw, 0.1f, &mixed, dlogits,
                         NULL, 1);
        be->softmax_xent(be, n, classes, logits_dt, t.act.logits, t.act.labels, NULL, 0.0f, &plain, dlogits,
                         NULL, 1);
        ck_assert_msg(*t.act.loss == mixed && mixed != plain,
                      "step %ld: loss %g, mixed and smoothed %g, plain %g", step, *t.act.loss, mixed, plain);
    }
    ck_assert_msg(kinds[0] > 0 && kinds[1] > 0, "the steps drew only %s", kinds[0] ? "CutMix" : "MixUp");
    be->free(be, want_input);
    be->free(be, dlogits);
    free(images);
    trainer_free(&t);
    comm->destroy(comm);
    be->destroy(be);
}
END_TEST

static Suite *batch_mix_suite(void) {
    Suite *s = suite_create("batch_mix");
    TCase *tc = tcase_create("batch_mix");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cutmix_box_matches_hand_computed_cases);
    tcase_add_test(tc, test_cutmix_box_lies_inside_and_lambda_is_its_area);
    tcase_add_test(tc, test_mixup_blends_with_lambda_and_its_complement);
    tcase_add_test(tc, test_beta_draws_have_the_distributions_moments_and_cdf);
    tcase_add_test(tc, test_draws_are_keyed_by_seed_step_micro_batch_and_rank);
    tcase_add_test(tc, test_both_on_choose_mixup_or_cutmix_evenly);
    tcase_add_test(tc, test_the_step_trains_on_its_draw);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(batch_mix_suite(), 1); }

// test_lr_schedule.c - the learning rate at each step: warm-up, constant, step, cosine, linear scaling.
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "tests/test_util.h"
#include "train/lr_schedule.h"

static TrainConfig train_config(const char *schedule, int warmup) {
    Config cfg;
    config_defaults(&cfg);
    TrainConfig t = cfg.train;
    strcpy(t.schedule, schedule);
    t.warmup_steps = warmup;
    t.lr = 0.4;
    t.min_lr = 0.0;
    t.step_every = 2;
    t.step_gamma = 0.1;
    return t;
}

START_TEST(test_linear_warmup_reaches_the_base) {
    TrainConfig t = train_config("constant", 4);
    double want[] = {0.1, 0.2, 0.3, 0.4, 0.4};
    for (int s = 0; s < 5; s++) ck_assert_double_eq_tol(lr_at(&t, 0.4, s, 10, 100), want[s], 1e-12);
}
END_TEST

START_TEST(test_step_schedule_decays_every_n_epochs) {
    TrainConfig t = train_config("step", 0);
    // 10 steps per epoch, x0.1 every 2 epochs
    ck_assert_double_eq_tol(lr_at(&t, 0.4, 0, 10, 100), 0.4, 1e-12);
    ck_assert_double_eq_tol(lr_at(&t, 0.4, 19, 10, 100), 0.4, 1e-12);
    ck_assert_double_eq_tol(lr_at(&t, 0.4, 20, 10, 100), 0.04, 1e-12);
    ck_assert_double_eq_tol(lr_at(&t, 0.4, 45, 10, 100), 0.004, 1e-12);
}
END_TEST

START_TEST(test_cosine_after_warmup) {
    TrainConfig t = train_config("cosine", 10);
    t.min_lr = 0.01;
    ck_assert_double_eq_tol(lr_at(&t, 0.4, 9, 10, 110), 0.4, 1e-12);                 // end of warm-up
    ck_assert_double_eq_tol(lr_at(&t, 0.4, 10, 10, 110), 0.4, 1e-12);                // cosine starts at base
    ck_assert_double_eq_tol(lr_at(&t, 0.4, 60, 10, 110), 0.01 + 0.39 * 0.5, 1e-12);  // halfway
    ck_assert_double_eq_tol(lr_at(&t, 0.4, 110, 10, 110), 0.01, 1e-12);              // the floor
    // Runs counted past INT_MAX steps keep their schedule (no int wrap): halfway through 6e9 steps.
    ck_assert_double_eq_tol(lr_at(&t, 0.4, 3000000005L, 10, 6000000000L), 0.01 + 0.39 * 0.5, 1e-9);
}
END_TEST

START_TEST(test_linear_scaling_rule) {
    TrainConfig t = train_config("constant", 0);
    strcpy(t.lr_scaling, "linear");
    ck_assert_double_eq_tol(lr_base(&t, 512), 0.8, 1e-12);  // lr x global batch / 256
    strcpy(t.lr_scaling, "none");
    ck_assert_double_eq_tol(lr_base(&t, 512), 0.4, 1e-12);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lr_schedule");
    TCase *tc = tcase_create("schedules");
    tcase_add_test(tc, test_linear_warmup_reaches_the_base);
    tcase_add_test(tc, test_step_schedule_decays_every_n_epochs);
    tcase_add_test(tc, test_cosine_after_warmup);
    tcase_add_test(tc, test_linear_scaling_rule);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 1);
}

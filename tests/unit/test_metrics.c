// test_metrics.c - a metrics file every JSON reader takes: NaN and infinities are null with the reason
// beside them, an evaluation with a loss that is not finite claims no accuracy (and a NaN row of logits
// is a miss, never a hit), a resumed run appends to the file, and a write error (/dev/full) stops the
// run at once with a checkpoint and exit 1.
#include <check.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "config/config.h"
#include "dist/dist.h"
#include "tests/test_util.h"
#include "checkpoint/safetensors.h"
#include "train/trainer.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"
#define QUICK TINY " backend.device=cpu data.train_size=256 data.prefetch=0 log.progress=never"

static char out[1 << 16];

// ---- a strict reading of our records -------------------------------------------------------------

// Skips one JSON value at *p (the forms our records use: string, number, null, true, false, object);
// 0 when the text there is no JSON value (nan, inf, -nan, ...).
static int skip_value(const char **p);

static int skip_object(const char **p) {
    if (**p != '{') return 0;
    (*p)++;
    if (**p == '}') return (*p)++, 1;
    for (;;) {
        if (**p != '"' || !skip_value(p) || **p != ':') return 0;
        (*p)++;
        if (!skip_value(p)) return 0;
        if (**p == '}') return (*p)++, 1;
        if (**p != ',') return 0;
        (*p)++;
    }
}

static int skip_value(const char **p) {
    const char *s = *p;
    if (*s == '{') return skip_object(p);
    if (*s == '"') {
        for (s++; *s && *s != '"'; s++)
            if (*s == '\\' && s[1]) s++;
        if (*s != '"') return 0;
        *p = s + 1;
        return 1;
    }
    static const char *const words[] = {"null", "true", "false"};
    for (int i = 0; i < 3; i++)
        if (strncmp(s, words[i], strlen(words[i])) == 0) return *p = s + strlen(words[i]), 1;
    // number: -?digits(.digits)?([eE][+-]?digits)?
    if (*s == '-') s++;
    if (!isdigit((unsigned char)*s)) return 0;
    while (isdigit((unsigned char)*s)) s++;
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s)) return 0;
        while (isdigit((unsigned char)*s)) s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!isdigit((unsigned char)*s)) return 0;
        while (isdigit((unsigned char)*s)) s++;
    }
    *p = s;
    return 1;
}

static int is_json_object_line(const char *line) {
    const char *p = line;
    return skip_object(&p) && (*p == '\n' || *p == '\0');
}

START_TEST(json_reader_is_strict) {
    ck_assert(is_json_object_line("{\"a\":1,\"b\":-2.5e-3,\"c\":null,\"d\":{\"e\":\"nan\"},\"f\":true}\n"));
    ck_assert(!is_json_object_line("{\"loss\":nan}\n"));
    ck_assert(!is_json_object_line("{\"loss\":-nan}\n"));
    ck_assert(!is_json_object_line("{\"loss\":inf}\n"));
    ck_assert(!is_json_object_line("{\"loss\":1,}\n"));
}
END_TEST

// Reads the metrics file into lines; returns how many (at most cap).
static int read_lines(const char *path, char lines[][1024], int cap) {
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no %s", path);
    int n = 0;
    while (n < cap && fgets(lines[n], 1024, f)) n++;
    fclose(f);
    return n;
}

// fp32 at lr 1e30: the first step's update makes the second loss NaN. The run then stops as diverged
// (exit 4) after its epoch of two steps and the evaluation that ends it.
START_TEST(nan_values_are_null_with_the_reason) {
    ck_assert_int_eq(system("rm -rf nan_run"), 0);
    ck_assert_int_eq(tu_run_cli(QUICK
                                " data.train_size=64 data.val_size=64 train.epochs=1 amp.enabled=false "
                                "train.lr=1e30 train.warmup_steps=0 log.every=1 log.metrics=nan_run/m.jsonl "
                                "checkpoint.dir=",
                                out, sizeof out),
                     4);
    ck_assert_msg(strstr(out, "top-1 and top-5 not finite (the loss is not finite)"), "%s", out);
    ck_assert_msg(strstr(out, "val loss -nan, top-1 and top-5 not finite") ||
                      strstr(out, "val loss nan, top-1 and top-5 not finite"),
                  "%s", out);
    static char lines[64][1024];
    int n = read_lines("nan_run/m.jsonl", lines, 64);
    ck_assert_int_eq(n, 5);  // the header, steps 1 and 2, one evaluation, the summary
    ck_assert_msg(strncmp(lines[0], "{\"header\":true,", 15) == 0 && is_json_object_line(lines[0]), "%s",
                  lines[0]);
    ck_assert_msg(strstr(lines[n - 1], "\"summary\":true") &&
                      strstr(lines[n - 1], "\"outcome\":\"diverged\"") &&
                      strstr(lines[n - 1], "\"top1\":null"),
                  "%s", lines[n - 1]);
    n--;
    int nulls = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(is_json_object_line(lines[i]), "not JSON: %s", lines[i]);
        if (strstr(lines[i], "\"loss\":null")) {
            nulls++;
            ck_assert_msg(strstr(lines[i], "\"not_finite\":{\"loss\":\"nan\""), "no reason: %s", lines[i]);
        }
    }
    ck_assert_msg(nulls >= 2, "the run never reached a NaN loss (%d null losses)", nulls);
    ck_assert_msg(strstr(lines[n - 1], "\"eval\":true") && strstr(lines[n - 1], "\"top1\":null") &&
                      strstr(lines[n - 1], "\"top5\":null") &&
                      strstr(lines[n - 1], "\"top1\":\"loss not finite\""),
                  "%s", lines[n - 1]);
}
END_TEST

// NaN compares false both ways, so a naive ranking would put a NaN row's label first: 100% top-1 on a
// model of NaN weights. Every row is a miss.
START_TEST(nan_logits_are_misses) {
    Config cfg;
    const char *ov[] = {"model.planes=8",      "model.base_width=32",
                        "model.cardinality=2", "data.batch_size=8",
                        "data.train_size=64",  "data.val_size=24",
                        "data.prefetch=0",     "log.metrics=",
                        "checkpoint.dir=",     NULL};
    tu_config(&cfg, ov);
    Backend *be = cpu_backend_create();
    Comm *comm = comm_single_create();
    Trainer t;
    ck_assert_int_eq(trainer_init(&t, &cfg, be, comm, comm), 0);
    EvalRecord fine = trainer_evaluate(&t);
    ck_assert(isfinite(fine.loss));
    ck_assert_int_eq(fine.samples, 24);
    Model *m = &t.model;
    for (size_t i = 0; i < m->params.padded_numel; i++) m->master[i] = NAN;  // CPU backend: host memory
    model_refresh_compute(m, be);
    EvalRecord r = trainer_evaluate(&t);
    ck_assert(isnan(r.loss));
    ck_assert_int_eq(r.samples, 24);
    ck_assert_double_eq(r.top1, 0.0);
    ck_assert_double_eq(r.top5, 0.0);
    trainer_free(&t);
    be->destroy(be);
    comm->destroy(comm);
}
END_TEST

// The README's resume: the metrics file keeps the first run's records and gains the second run's, each run
// opening with its header record; every record carries the wall-clock time, never decreasing.
START_TEST(resumed_run_appends) {
    ck_assert_int_eq(system("rm -rf app"), 0);
    ck_assert_int_eq(tu_run_cli(QUICK " data.val_size=0 train.steps=4 log.every=2 log.metrics=app/m.jsonl "
                                      "checkpoint.dir=app",
                                out, sizeof out),
                     0);
    ck_assert_int_eq(tu_run_cli(QUICK " data.val_size=0 train.steps=8 log.every=2 log.metrics=app/m.jsonl "
                                      "checkpoint.dir=app checkpoint.resume=app/last.safetensors",
                                out, sizeof out),
                     0);
    static char lines[16][1024];
    int n = read_lines("app/m.jsonl", lines, 16);
    // each run opens with its header (-1, the step it starts at after it) and ends with its summary (-2)
    const long want[] = {-1, 0, 1, 2, 4, -2, -1, 4, 6, 8, -2};
    ck_assert_int_eq(n, 9);
    double last_time = 0;
    for (int i = 0, w = 0; i < n; i++, w++) {
        long step = -1;
        ck_assert_msg(is_json_object_line(lines[i]), "not JSON: %s", lines[i]);
        const char *time = strstr(lines[i], ",\"time\":");
        ck_assert_msg(time && atof(time + 8) > 1.6e9 && atof(time + 8) >= last_time, "%s", lines[i]);
        last_time = atof(time + 8);
        if (want[w] == -1) {
            static const char head[] = "{\"header\":true,\"version\":\"" AMPTRAIN_VERSION "\",";
            ck_assert_msg(strncmp(lines[i], head, sizeof head - 1) == 0 &&
                              strstr(lines[i], "\"world_size\":1,") && strstr(lines[i], "\"config_hash\":\""),
                          "%s", lines[i]);
            const char *start = strstr(lines[i], "\"start_step\":");
            ck_assert_msg(start && atol(start + 13) == want[++w], "%s", lines[i]);
            continue;
        }
        if (want[w] == -2) {
            ck_assert_msg(strncmp(lines[i], "{\"summary\":true,", 16) == 0, "%s", lines[i]);
            continue;
        }
        ck_assert_int_eq(sscanf(lines[i], "{\"step\":%ld,", &step), 1);
        ck_assert_int_eq(step, want[w]);
    }
    // a fresh run (no resume) is refused the file of another run, unless told to start it again
    ck_assert_int_eq(tu_run_cli(QUICK " data.val_size=0 train.steps=2 log.every=2 log.metrics=app/m.jsonl "
                                      "checkpoint.dir=",
                                out, sizeof out),
                     2);
    ck_assert_msg(strstr(out, "log.metrics: 'app/m.jsonl' holds "), "%s", out);
    ck_assert_int_eq(read_lines("app/m.jsonl", lines, 16), 9);
    ck_assert_int_eq(tu_run_cli(QUICK " data.val_size=0 train.steps=2 log.every=2 log.metrics=app/m.jsonl "
                                      "checkpoint.dir= checkpoint.overwrite=true",
                                out, sizeof out),
                     0);
    ck_assert_int_eq(read_lines("app/m.jsonl", lines, 16), 4);  // the header, steps 1, 2 and the summary
}
END_TEST

// /dev/full takes the open and fails every write: reported at once, the run stops after the step that
// found it, writes its checkpoint and exits 1.
START_TEST(metrics_write_error_stops_the_run) {
    ck_assert_int_eq(system("rm -rf full_ck"), 0);
    int rc = tu_run_cli(
        QUICK " data.val_size=0 train.steps=6 log.every=1 log.metrics=/dev/full checkpoint.dir=full_ck", out,
        sizeof out);
    ck_assert_msg(rc == 1, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "error: log.metrics: cannot write '/dev/full': No space left on device"), "%s",
                  out);
    ck_assert_msg(strstr(out, "summary:") == NULL, "%s", out);
    const char *stopped = strstr(out, "stopped after step ");
    ck_assert_msg(stopped != NULL, "%s", out);
    long step = atol(stopped + strlen("stopped after step "));
    ck_assert_msg(step >= 1 && step < 6, "stopped after step %ld of 6", step);
    char err[512];
    SafetensorsFile *f = st_open("full_ck/last.safetensors", err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_int_eq(atol(st_meta(f, "step")), step);
    st_close(f);
}
END_TEST

static Suite *metrics_suite(void) {
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, json_reader_is_strict);
    tcase_add_test(tc, nan_values_are_null_with_the_reason);
    tcase_add_test(tc, nan_logits_are_misses);
    tcase_add_test(tc, resumed_run_appends);
    tcase_add_test(tc, metrics_write_error_stops_the_run);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(metrics_suite(), 1); }

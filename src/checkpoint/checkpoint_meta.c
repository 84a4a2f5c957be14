#include "checkpoint/checkpoint_meta.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

static void meta_long(SafetensorsWriter *w, const char *key, long value) {
    char text[32];
    snprintf(text, sizeof text, "%ld", value);
    st_writer_set_meta(w, key, text);
}

void checkpoint_meta_write(SafetensorsWriter *w, const CheckpointMeta *m) {
    char scale[48];
    snprintf(scale, sizeof scale, "%.17g", m->scale);
    st_writer_set_meta(w, "scale", scale);
    const struct {
        const char *key;
        long value;
    } longs[] = {{"amp", m->amp},
                 {"dynamic_scale", m->dynamic},
                 {"growth_count", m->growth_count},
                 {"skipped_total", m->skipped_total},
                 {"skipped_run", m->skipped_run},
                 {"step", m->step},
                 {"epoch", m->epoch},
                 {"samples_done", m->samples_done},
                 {"seed", m->seed},
                 {"world_size", m->world},
                 {"batch_size", m->batch},
                 {"accum_steps", m->accum},
                 {"train_samples", m->train_samples}};
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++) meta_long(w, longs[i].key, longs[i].value);
    st_writer_set_meta(w, "amp_dtype", m->amp_dtype);
    st_writer_set_meta(w, "dataset", m->dataset);
    st_writer_set_meta(w, "dataset_digest", m->dataset_digest);
}

static int meta_get_long(const SafetensorsFile *f, const char *key, long *out, char *err, size_t err_len) {
    const char *text = st_meta(f, key);
    char *end;
    if (text) {
        errno = 0;
        *out = strtol(text, &end, 10);
        if (errno == 0 && end != text && *end == 0) return 0;
    }
    snprintf(err, err_len, "%s: checkpoint metadata '%s' is %s", st_path(f), key,
             text ? "not an integer" : "missing");
    return 1;
}

int checkpoint_meta_read(const SafetensorsFile *f, CheckpointMeta *m, char *err, size_t err_len) {
    memset(m, 0, sizeof *m);
    const struct {
        const char *key;
        long *out;
    } longs[] = {{"step", &m->step},
                 {"epoch", &m->epoch},
                 {"samples_done", &m->samples_done},
                 {"amp", &m->amp},
                 {"growth_count", &m->growth_count},
                 {"skipped_total", &m->skipped_total},
                 {"seed", &m->seed},
                 {"world_size", &m->world},
                 {"batch_size", &m->batch},
                 {"accum_steps", &m->accum}};
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++)
        if (meta_get_long(f, longs[i].key, longs[i].out, err, err_len)) return 1;
    const char *scale = st_meta(f, "scale");
    char *end = NULL;
    if (scale) m->scale = strtod(scale, &end);
    if (!scale || end == scale || *end) {
        snprintf(err, err_len, "%s: checkpoint metadata 'scale' is %s", st_path(f),
                 scale ? "not a number" : "missing");
        return 1;
    }
    if (st_meta(f, "skipped_run") && meta_get_long(f, "skipped_run", &m->skipped_run, err, err_len)) return 1;
    const char *amp_dtype = st_meta(f, "amp_dtype");
    snprintf(m->amp_dtype, sizeof m->amp_dtype, "%s", amp_dtype ? amp_dtype : m->amp ? "float16" : "float32");
    m->dynamic = -1;
    if (st_meta(f, "dynamic_scale") && meta_get_long(f, "dynamic_scale", &m->dynamic, err, err_len)) return 1;
    const char *dataset = st_meta(f, "dataset"), *digest = st_meta(f, "dataset_digest");
    if (!dataset) return 0;
    if (!digest || meta_get_long(f, "train_samples", &m->train_samples, err, err_len)) {
        if (!digest)
            snprintf(err, err_len, "%s: checkpoint metadata 'dataset_digest' is missing", st_path(f));
        return 1;
    }
    snprintf(m->dataset, sizeof m->dataset, "%s", dataset);
    snprintf(m->dataset_digest, sizeof m->dataset_digest, "%s", digest);
    return 0;
}

static int fail_meta(const SafetensorsFile *f, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_meta(const SafetensorsFile *f, char *err, size_t err_len, const char *fmt, ...) {
    int used = snprintf(err, err_len, "%s: checkpoint metadata ", st_path(f));
    if (used < 0 || (size_t)used >= err_len) return 1;
    va_list args;
    va_start(args, fmt);
    vsnprintf(err + used, err_len - (size_t)used, fmt, args);
    va_end(args);
    return 1;
}

// The same run goes on only with the same seed (weights' start, data, every epoch's order) and the same
// samples (the position is an index into their order).
static int check_identity(const SafetensorsFile *f, const CheckpointMeta *m, const CheckpointRun *run,
                          char *err, size_t err_len) {
    long seed = run->cfg->train.seed;
    if (m->seed != seed)
        return fail_meta(f, err, err_len,
                         "'seed' is %ld, this run's train.seed is %ld: every epoch's sample order "
                         "follows from it, so the run would not continue (resume with train.seed=%ld)",
                         m->seed, seed, m->seed);
    if (!m->dataset[0]) {
        log_warn("%s records no identity of its data (an older amptrain wrote it): the data is not compared",
                 st_path(f));
        return 0;
    }
    char digest[17];
    dataset_digest(run->train, digest);
    if (strcmp(m->dataset, run->train->name) != 0 || m->train_samples != run->train->size ||
        strcmp(m->dataset_digest, digest) != 0)
        return fail_meta(
            f, err, err_len,
            "'dataset' is %s, %ld training samples (digest %s); this run's data is "
            "%s, %d samples (digest %s): the epoch's order and the position in it would not continue "
            "(resume with the data it trained on)",
            m->dataset, m->train_samples, m->dataset_digest, run->train->name, run->train->size, digest);
    return 0;
}

// A run continues in the autocast dtype it trained in: an fp16 run's loss scale means nothing to a bf16 run,
// which trains unscaled. fp32 and AMP may follow each other (the master weights and momentum are fp32 in
// both; the scaler starts as resume_scaler in train/checkpoint.c says).
static int check_precision(const SafetensorsFile *f, const CheckpointMeta *m, const CheckpointRun *run,
                           char *err, size_t err_len) {
    const AmpConfig *amp = &run->cfg->amp;
    if (!m->amp || !amp->enabled || strcmp(m->amp_dtype, amp->dtype) == 0) return 0;
    return fail_meta(f, err, err_len,
                     "'amp_dtype' is %s, this run's amp.dtype is %s: a run continues in the precision it "
                     "trained in (resume with amp.dtype=%s; model.init=%s starts a %s run from its weights)",
                     m->amp_dtype, amp->dtype, m->amp_dtype, st_path(f), amp->dtype);
}

// Counters that no run writes: negative, beyond their epoch, more skipped or clean steps than steps, more
// steps than samples consumed (a step takes at least one), more than a step count the schedule can take,
// a loss scale that is no positive normal fp32 number. step >= epoch (+1 mid-epoch) is all that holds
// across resumes with other global batches.
static int check_counters(const SafetensorsFile *f, const CheckpointMeta *r, const CheckpointRun *run,
                          char *err, size_t err_len) {
    const struct {
        const char *key;
        long value;
    } counts[] = {{"world_size", r->world}, {"batch_size", r->batch}, {"accum_steps", r->accum}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].value < 1)
            return fail_meta(f, err, err_len, "'%s' is %ld: must be at least 1", counts[i].key,
                             counts[i].value);
    if (r->amp != 0 && r->amp != 1) return fail_meta(f, err, err_len, "'amp' is %ld: must be 0 or 1", r->amp);
    const char *want_dtype = r->amp ? "float16 or bfloat16 (amp is 1)" : "float32 (amp is 0)";
    if (r->amp ? strcmp(r->amp_dtype, "float16") != 0 && strcmp(r->amp_dtype, "bfloat16") != 0
               : strcmp(r->amp_dtype, "float32") != 0)
        return fail_meta(f, err, err_len, "'amp_dtype' is '%s': must be %s", r->amp_dtype, want_dtype);
    if (r->dynamic < -1 || r->dynamic > 1)
        return fail_meta(f, err, err_len, "'dynamic_scale' is %ld: must be 0 or 1", r->dynamic);
    if (r->step < 0 || r->epoch < 0 || r->samples_done < 0 || r->epoch > INT_MAX)
        return fail_meta(f, err, err_len,
                         "step %ld, epoch %ld, samples_done %ld: counters must not be negative", r->step,
                         r->epoch, r->samples_done);
    int size = run->sampler->size;
    if (r->samples_done >= size)
        return fail_meta(f, err, err_len,
                         "'samples_done' is %ld, beyond the epoch of %d samples (did data.train_size "
                         "or the data change?)",
                         r->samples_done, size);
    if (r->step < r->epoch + (r->samples_done > 0))
        return fail_meta(f, err, err_len,
                         "step %ld is too few for epoch %ld and samples_done %ld (every epoch "
                         "begun takes a step)",
                         r->step, r->epoch, r->samples_done);
    // epoch <= INT_MAX and size <= INT_MAX: the product fits in 64 bits.
    long consumed = r->epoch * (long)size + r->samples_done;
    if (r->step > consumed || r->step > INT32_MAX)
        return fail_meta(f, err, err_len,
                         "step %ld is more than a run can have taken: %ld epochs of %d samples and "
                         "%ld more allow at most %ld steps (one sample each), and a run counts at most %d",
                         r->step, r->epoch, size, r->samples_done, consumed, INT32_MAX);
    if (r->growth_count < 0 || r->growth_count > r->step || r->skipped_total < 0 ||
        r->skipped_total > r->step)
        return fail_meta(f, err, err_len,
                         "growth_count %ld, skipped_total %ld: each must be in [0, step %ld]",
                         r->growth_count, r->skipped_total, r->step);
    if (r->skipped_run < 0 || r->skipped_run > r->skipped_total)
        return fail_meta(f, err, err_len, "'skipped_run' is %ld: must be in [0, skipped_total %ld]",
                         r->skipped_run, r->skipped_total);
    float scale = (float)r->scale;
    if (!(r->scale > 0) || !isnormal(scale))
        return fail_meta(f, err, err_len,
                         "'scale' is %g: the loss scale must be a finite, positive, normal fp32 "
                         "number",
                         r->scale);
    return 0;
}

int checkpoint_meta_check(const SafetensorsFile *f, const CheckpointMeta *meta, const CheckpointRun *run,
                          char *err, size_t err_len) {
    return check_identity(f, meta, run, err, err_len) || check_counters(f, meta, run, err, err_len) ||
           check_precision(f, meta, run, err, err_len);
}

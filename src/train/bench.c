#include "train/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "data/dataset.h"
#include "train/trainer.h"

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Writes text as the inside of a JSON string: quotes, backslashes and control characters escaped.
static void json_escape(const char *text, char *out, size_t cap) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && n + 7 < cap; p++) {
        if (*p == '"' || *p == '\\')
            n += (size_t)snprintf(out + n, cap - n, "\\%c", *p);
        else if (*p < 0x20)
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", *p);
        else
            out[n++] = (char)*p;
    }
    out[n] = 0;
}

// Sorts v in place.
static double median_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int bench_run(const Config *cfg_in, Backend *be, Comm *comm, Comm *grad_comm, const BenchOptions *opt) {
    if (opt->profile && !be->profiler_window) {
        log_error("--bench-profile: the %s backend has no profiler window (it is for ncu on CUDA)", be->name);
        return 2;
    }
    Config cfg = *cfg_in;
    snprintf(cfg.data.source, sizeof cfg.data.source, "synthetic");
    cfg.data.val_size = 0;
    cfg.checkpoint.dir[0] = 0;
    cfg.checkpoint.resume[0] = 0;
    cfg.log.metrics[0] = 0;
    cfg.train.accum_steps = 1;
    Trainer t;
    int rc = trainer_init(&t, &cfg, be, comm, grad_comm);
    if (rc != 0) return rc;

    int b = cfg.data.batch_size, nb = opt->nbatches;
    size_t image_bytes = dataset_image_bytes(t.train_set);
    uint8_t *host_images = xcalloc((size_t)b * image_bytes, 1);
    int32_t *host_labels = xcalloc((size_t)b, sizeof(int32_t)),
            *indices = xcalloc((size_t)b, sizeof(int32_t));
    MicroBatch *batches = xcalloc((size_t)nb, sizeof *batches);
    for (int k = 0; k < nb; k++) {
        for (int i = 0; i < b; i++) indices[i] = (k * b + i) % t.train_set->size;
        dataset_get_batch(t.train_set, indices, b, 0, host_images, host_labels);
        void *images = be->alloc(be, (size_t)b * image_bytes);
        int32_t *labels = be->alloc(be, (size_t)b * sizeof(int32_t));
        be->to_device(be, images, host_images, (size_t)b * image_bytes);
        be->to_device(be, labels, host_labels, (size_t)b * sizeof(int32_t));
        batches[k] = (MicroBatch){.count = b,
                                  .step_total = b * comm->size,
                                  .device_images = images,
                                  .device_dt = DTYPE_U8,
                                  .device_labels = labels};
    }
    double *times = xcalloc(4 * (size_t)opt->steps, sizeof(double));
    double *compute = times + opt->steps, *comm_ms = compute + opt->steps, *optim = comm_ms + opt->steps;
    // With graphs the step is one launch, so there are no phases to split: they are reported as null.
    t.timed = !t.graph.enabled;
    for (int i = 0; i < opt->warmup + opt->steps; i++) {
        be->sync(be);
        double t0 = clock_seconds();
        int profiled = opt->profile && i == opt->warmup + opt->steps - 1;
        if (profiled) be->profiler_window(be, 1);
        trainer_step_array(&t, &batches[i % nb], 1);
        be->sync(be);
        if (profiled) be->profiler_window(be, 0);
        if (i < opt->warmup) continue;
        int k = i - opt->warmup;
        times[k] = clock_seconds() - t0;
        StepPhases ph = t.timed ? trainer_step_phases(&t) : (StepPhases){0};
        if (t.timed) compute[k] = ph.compute_ms, comm_ms[k] = ph.exposed_comm_ms, optim[k] = ph.optimizer_ms;
    }
    double median = median_of(times, opt->steps);
    float loss;
    be->to_host(be, &loss, t.act.loss, sizeof loss);
    ScalerState st = scaler_read(&t.scaler, be);
    if (comm->rank == 0) {
        char tag[256], loss_text[32];
        json_escape(opt->tag ? opt->tag : "", tag, sizeof tag);
        // JSON has no NaN or Infinity: a diverged run reports its loss as null.
        if (isfinite(loss))
            snprintf(loss_text, sizeof loss_text, "%.6g", loss);
        else
            snprintf(loss_text, sizeof loss_text, "null");
        char phases[160] = "\"compute_ms\": null, \"comm_exposed_ms\": null, \"optimizer_ms\": null";
        if (t.timed)
            snprintf(phases, sizeof phases,
                     "\"compute_ms\": %.2f, \"comm_exposed_ms\": %.2f, \"optimizer_ms\": %.2f",
                     median_of(compute, opt->steps), median_of(comm_ms, opt->steps),
                     median_of(optim, opt->steps));
        printf(
            "{\"tag\": \"%s\", \"impl\": \"amptrain\", \"backend\": \"%s\", \"world\": %d, \"batch_per_gpu\": %d, "
            "\"amp\": %d, \"channels_last\": 1, \"cuda_graph\": %d, \"step_ms_median\": %.2f, \"img_s_per_gpu\": %.1f, "
            "\"img_s_total\": %.1f, \"peak_mem_MiB\": %.0f, %s, \"loss\": %s, "
            "\"scale\": %g, \"skipped\": %d}\n",
            tag, be->name, comm->size, b, cfg.amp.enabled, t.graph.exec != NULL, median * 1e3, b / median,
            (double)b * comm->size / median, be->peak_bytes(be) / 1048576.0, phases, loss_text, st.scale,
            st.skipped_total);
        fflush(stdout);
    }
    for (int k = 0; k < nb; k++)
        be->free(be, (void *)batches[k].device_images), be->free(be, (void *)batches[k].device_labels);
    free(batches), free(times), free(host_images), free(host_labels), free(indices);
    trainer_free(&t);
    return 0;
}

#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double metrics_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int metrics_make_parent_dir(const char *path) {
    char dir[CONFIG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) return 0;
    *slash = 0;
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (dir[0] && mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

int metrics_open(Metrics *mt, const LogConfig *log, int rank, int world_size, long total_steps) {
    memset(mt, 0, sizeof *mt);
    mt->active = rank == 0;
    mt->total_steps = total_steps;
    mt->start_time = metrics_now();
    if (!mt->active) return 0;
    mt->bar = strcmp(log->progress, "always") == 0 || (strcmp(log->progress, "auto") == 0 && world_size == 1 && isatty(STDOUT_FILENO));
    if (log->metrics[0]) {
        if (metrics_make_parent_dir(log->metrics) != 0 || !(mt->jsonl = fopen(log->metrics, "w"))) {
            fprintf(stderr, "error: cannot write metrics file '%s': %s\n", log->metrics, strerror(errno));
            return 1;
        }
    }
    return 0;
}

static void end_bar(Metrics *mt) {
    if (mt->bar_drawn) fputc('\n', stdout);
    mt->bar_drawn = 0;
}

static void format_eta(double seconds, char *out, size_t n) {
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    snprintf(out, n, "%02ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
}

void metrics_step(Metrics *mt, const StepRecord *r) {
    if (!mt->active) return;
    if (mt->jsonl) {
        fprintf(mt->jsonl,
                "{\"step\":%ld,\"epoch\":%d,\"loss\":%.6g,\"lr\":%.6g,\"scale\":%.6g,\"skipped\":%d,"
                "\"skipped_total\":%ld,\"images_per_s\":%.1f,\"step_ms\":%.3f,\"data_wait_ms\":%.3f,"
                "\"memory_mib\":%.1f}\n",
                r->step, r->epoch, r->loss, r->lr, r->scale, r->skipped, r->skipped_total, r->images_per_s,
                r->step_ms, r->data_wait_ms, r->memory_mib);
        fflush(mt->jsonl);
    }
    double elapsed = metrics_now() - mt->start_time;
    char eta[32];
    format_eta(r->step > 0 ? elapsed / r->step * (mt->total_steps - r->step) : 0, eta, sizeof eta);
    if (mt->bar) {
        const int width = 24;
        int filled = mt->total_steps > 0 ? (int)(width * r->step / mt->total_steps) : 0;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        printf("\r[%s] step %ld/%ld  epoch %d  loss %.4f  %.0f img/s  scale %g  skipped %ld  ETA %s ", bar,
               r->step, mt->total_steps, r->epoch, r->loss, r->images_per_s, r->scale, r->skipped_total, eta);
        fflush(stdout);
        mt->bar_drawn = 1;
    } else {
        printf("step %ld/%ld  epoch %d  loss %.4f  lr %.4g  %.0f img/s  %.1f ms/step  scale %g  skipped %ld  "
               "ETA %s\n",
               r->step, mt->total_steps, r->epoch, r->loss, r->lr, r->images_per_s, r->step_ms, r->scale,
               r->skipped_total, eta);
        fflush(stdout);
    }
}

void metrics_eval(Metrics *mt, const EvalRecord *r) {
    if (!mt->active) return;
    end_bar(mt);
    printf("eval  epoch %d  step %ld  loss %.4f  top-1 %.2f%%  top-5 %.2f%%  (%ld samples)\n", r->epoch, r->step,
           r->loss, 100 * r->top1, 100 * r->top5, r->samples);
    fflush(stdout);
    if (mt->jsonl) {
        fprintf(mt->jsonl, "{\"eval\":true,\"step\":%ld,\"epoch\":%d,\"loss\":%.6g,\"top1\":%.6g,\"top5\":%.6g,"
                           "\"samples\":%ld}\n",
                r->step, r->epoch, r->loss, r->top1, r->top5, r->samples);
        fflush(mt->jsonl);
    }
}

// JSON has no NaN or infinity: a non-finite value is written as null.
static const char *json_number(char *buf, size_t n, double v) {
    if (!isfinite(v)) return "null";
    snprintf(buf, n, "%.6g", v);
    return buf;
}

void metrics_summary(Metrics *mt, const SummaryRecord *r) {
    if (!mt->active) return;
    end_bar(mt);
    printf("summary: %ld steps, epoch %d, %.1f s, %.1f images/s, peak %s memory %.1f MiB, %ld steps skipped, "
           "loss scale %g, final loss %.4f",
           r->steps, r->epoch, r->seconds, r->images_per_s, r->backend, r->peak_mib, r->skipped_total, r->scale,
           r->final_loss);
    if (r->eval)
        printf(", val loss %.4f, top-1 %.2f%%, top-5 %.2f%%", r->eval->loss, 100 * r->eval->top1,
               100 * r->eval->top5);
    printf("; start-up %.2f s (build, first step with cuDNN's search), data wait %.2f ms/step, %ld of %ld steps "
           "replayed from the CUDA graph\n", r->startup_s, r->data_wait_ms, r->graph_steps, r->steps);
    fflush(stdout);
    if (!mt->jsonl) return;
    char loss[32], val[32];
    fprintf(mt->jsonl,
            "{\"summary\":true,\"steps\":%ld,\"epoch\":%d,\"world\":%d,\"amp\":%s,\"backend\":\"%s\","
            "\"seconds\":%.3f,\"images_per_s\":%.1f,\"peak_mib\":%.1f,\"skipped_total\":%ld,\"scale\":%.6g,"
            "\"final_loss\":%s,\"startup_s\":%.3f,\"data_wait_ms\":%.3f,\"graph_steps\":%ld",
            r->steps, r->epoch, r->world, r->amp ? "true" : "false", r->backend, r->seconds, r->images_per_s,
            r->peak_mib, r->skipped_total, r->scale, json_number(loss, sizeof loss, r->final_loss), r->startup_s,
            r->data_wait_ms, r->graph_steps);
    if (r->eval)
        fprintf(mt->jsonl, ",\"val_loss\":%s,\"top1\":%.6g,\"top5\":%.6g",
                json_number(val, sizeof val, r->eval->loss), r->eval->top1, r->eval->top5);
    fprintf(mt->jsonl, "}\n");
    fflush(mt->jsonl);
}

void metrics_note(Metrics *mt, const char *fmt, ...) {
    if (!mt->active) return;
    end_bar(mt);
    va_list args;
    va_start(args, fmt);
    vprintf(fmt, args);
    va_end(args);
    fputc('\n', stdout);
    fflush(stdout);
}

void metrics_close(Metrics *mt) {
    if (!mt->active) return;
    end_bar(mt);
    if (mt->jsonl) fclose(mt->jsonl);
    mt->jsonl = NULL;
}

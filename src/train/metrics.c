#include "train/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "train/outputs.h"

// The offset just past the last newline of the file's first `size` bytes (0: none).
static off_t end_of_last_line(int fd, off_t size) {
    char chunk[4096];
    for (off_t end = size; end > 0;) {
        off_t begin = end > (off_t)sizeof chunk ? end - (off_t)sizeof chunk : 0;
        ssize_t n = pread(fd, chunk, (size_t)(end - begin), begin);
        if (n <= 0) return size;  // unreadable: leave the file as it is
        for (ssize_t i = n - 1; i >= 0; i--)
            if (chunk[i] == '\n') return begin + i + 1;
        end = begin;
    }
    return 0;
}

// A last line without its newline (a run killed mid-write, a full disk) goes to <path>.partial and is cut
// off, so the next record starts a line of its own. 0, or 2 with one line in err.
static int cut_partial_line(int fd, const char *path, char *err, size_t err_len) {
    struct stat st;
    char last;
    if (fstat(fd, &st) != 0 || st.st_size == 0 || pread(fd, &last, 1, st.st_size - 1) != 1 || last == '\n')
        return 0;
    off_t keep = end_of_last_line(fd, st.st_size);
    if (keep == st.st_size) return 0;
    size_t len = (size_t)(st.st_size - keep);
    char *tail = xcalloc(len, 1), partial[PATH_MAX + 16];
    snprintf(partial, sizeof partial, "%s.partial", path);
    FILE *f = pread(fd, tail, len, keep) == (ssize_t)len ? fopen(partial, "w") : NULL;
    int ok = f && fwrite(tail, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    free(tail);
    if (!ok || ftruncate(fd, keep) != 0) {
        snprintf(err, err_len, "log.metrics: cannot move the unfinished last line of '%s' to '%s': %s", path,
                 partial, strerror(errno));
        return 2;
    }
    log_warn(
        "log.metrics: the last line of %s was cut short (%zu bytes without a newline, a run that died while "
        "writing it): moved to %s",
        path, len, partial);
    return 0;
}

// log.metrics opened for appending and locked; a regular file emptied (fresh) or its partial line cut
// (append). Devices (/dev/null) are opened as they are. 0, or 2 with one line in err.
static int open_metrics_file(Metrics *mt, const char *path, int append, char *err, size_t err_len) {
    struct stat st;
    int device = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    int fd = open(path, device ? O_WRONLY | O_CLOEXEC : O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, err_len, "log.metrics: cannot write '%s': %s", path, strerror(errno));
        return 2;
    }
    int rc = device ? 0 : outputs_lock_metrics(fd, path, err, err_len);
    if (rc == 0 && !device && !append && ftruncate(fd, 0) != 0) {
        snprintf(err, err_len, "log.metrics: cannot empty '%s': %s", path, strerror(errno));
        rc = 2;
    }
    if (rc == 0 && !device && append) rc = cut_partial_line(fd, path, err, err_len);
    if (rc == 0 && !(mt->jsonl = fdopen(fd, "a"))) {
        snprintf(err, err_len, "log.metrics: cannot write '%s': %s", path, strerror(errno));
        rc = 2;
    }
    if (rc != 0) close(fd);
    return rc;
}

int metrics_open(Metrics *mt, const LogConfig *log, int rank, int world_size, long total_steps, int append,
                 char *err, size_t err_len) {
    memset(mt, 0, sizeof *mt);
    mt->active = rank == 0;
    mt->total_steps = total_steps;
    mt->start_time = clock_seconds();
    mt->path = log->metrics;
    if (!mt->active) return 0;
    mt->bar = strcmp(log->progress, "always") == 0 ||
              (strcmp(log->progress, "auto") == 0 && world_size == 1 && isatty(STDOUT_FILENO));
    return log->metrics[0] ? open_metrics_file(mt, log->metrics, append, err, err_len) : 0;
}

static void end_bar(Metrics *mt) {
    if (mt->bar_drawn) fputc('\n', stdout);
    mt->bar_drawn = 0;
}

// ---- JSON records -----------------------------------------------------------------------------------

// One JSON-lines record. JSON has no NaN or infinity: such a number is written as null, and the record
// ends with "not_finite":{"key":"nan",...} saying which value it was and why it is missing.
typedef struct Text {
    char s[4096];  // a header's two paths, escaped, fit
    size_t len;
} Text;

typedef struct Record {
    Text body, not_finite;
} Record;

static void text_add(Text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(Text *t, const char *fmt, ...) {
    if (t->len + 1 >= sizeof t->s) return;
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(t->s + t->len, sizeof t->s - t->len, fmt, args);
    va_end(args);
    if (n > 0) t->len += (size_t)n < sizeof t->s - t->len ? (size_t)n : sizeof t->s - t->len - 1;
}

static void record_null(Record *r, const char *key, const char *why) {
    text_add(&r->body, ",\"%s\":null", key);
    text_add(&r->not_finite, "%s\"%s\":\"%s\"", r->not_finite.len ? "," : "", key, why);
}

// A JSON string: quotes, backslashes and control bytes escaped.
static void text_add_string(Text *t, const char *s) {
    text_add(t, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            text_add(t, "\\%c", *c);
        else if (*c < 0x20)
            text_add(t, "\\u%04x", *c);
        else
            text_add(t, "%c", *c);
    }
    text_add(t, "\"");
}

// ,"key":"text" with text a JSON string.
static void record_text(Record *r, const char *key, const char *text) {
    text_add(&r->body, ",\"%s\":", key);
    text_add_string(&r->body, text);
}

static void record_number(Record *r, const char *key, double v) {
    if (isfinite(v))
        text_add(&r->body, ",\"%s\":%.6g", key, v);
    else
        record_null(r, key, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

// Writes the record and flushes it to the file. The first failure (a full disk, /dev/full) is reported
// at once, and nothing more is written: metrics_failed tells the loop to stop.
static void record_write(Metrics *mt, Record *r) {
    if (mt->failed) return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    text_add(&r->body, ",\"time\":%.3f", (double)now.tv_sec + now.tv_nsec * 1e-9);
    if (r->not_finite.len) text_add(&r->body, ",\"not_finite\":{%s}", r->not_finite.s);
    text_add(&r->body, "}\n");
    errno = 0;
    if (fputs(r->body.s, mt->jsonl) < 0 || fflush(mt->jsonl) != 0) {
        mt->failed = errno ? errno : EIO;
        end_bar(mt);
        fprintf(stderr, "error: log.metrics: cannot write '%s': %s; the run stops after this step\n",
                mt->path, strerror(mt->failed));
        fflush(stderr);
    }
}

int metrics_failed(const Metrics *mt) { return mt->failed != 0; }

static void format_eta(double seconds, char *out, size_t n) {
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    snprintf(out, n, "%02ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
}

void metrics_header(Metrics *mt, const HeaderRecord *r) {
    if (!mt->active || !mt->jsonl) return;
    Record rec = {0};
    text_add(&rec.body, "{\"header\":true,\"version\":");
    text_add_string(&rec.body, r->version);
    text_add(&rec.body, ",\"host\":");
    text_add_string(&rec.body, r->host);
    text_add(&rec.body, ",\"world_size\":%d,\"config_hash\":", r->world);
    text_add_string(&rec.body, r->config_hash);
    text_add(&rec.body, ",\"start_step\":%ld,\"resumed_from\":", r->start_step);
    text_add_string(&rec.body, r->resumed_from);
    record_write(mt, &rec);
}

void metrics_step(Metrics *mt, const StepRecord *r) {
    if (!mt->active) return;
    if (mt->jsonl) {
        Record rec = {0};
        text_add(&rec.body, "{\"step\":%ld,\"epoch\":%d", r->step, r->epoch);
        record_number(&rec, "loss", r->loss);
        record_number(&rec, "lr", r->lr);
        record_number(&rec, "scale", r->scale);
        text_add(&rec.body, ",\"skipped\":%d,\"skipped_total\":%ld", r->skipped, r->skipped_total);
        record_number(&rec, "images_per_s", r->images_per_s);
        record_number(&rec, "step_ms", r->step_ms);
        record_number(&rec, "data_wait_ms", r->data_wait_ms);
        record_number(&rec, "memory_mib", r->memory_mib);
        if (r->has_grad_norm) record_number(&rec, "grad_norm", r->grad_norm);
        record_write(mt, &rec);
    }
    double elapsed = clock_seconds() - mt->start_time;
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

// ,"<prefix>loss":...,"<prefix>top1":...,"<prefix>top5":... with no accuracy claimed for a loss that is
// not finite.
static void record_accuracy(Record *rec, const char *prefix, double loss, double top1, double top5) {
    char key[32];
    snprintf(key, sizeof key, "%sloss", prefix);
    record_number(rec, key, loss);
    const int finite = isfinite(loss);
    snprintf(key, sizeof key, "%stop1", prefix);
    if (finite)
        record_number(rec, key, top1);
    else
        record_null(rec, key, "loss not finite");
    snprintf(key, sizeof key, "%stop5", prefix);
    if (finite)
        record_number(rec, key, top5);
    else
        record_null(rec, key, "loss not finite");
}

// " loss L  top-1 A%  top-5 B%" (or why there are none) for the printed line.
static void print_accuracy(double loss, double top1, double top5) {
    if (isfinite(loss))
        printf("loss %.4f  top-1 %.2f%%  top-5 %.2f%%", loss, 100 * top1, 100 * top5);
    else
        printf("loss %.4f  top-1 and top-5 not finite (the loss is not finite)", loss);
}

void metrics_eval(Metrics *mt, const EvalRecord *r) {
    if (!mt->active) return;
    end_bar(mt);
    // A loss that is not finite makes the ranking of the logits meaningless: no accuracy is claimed.
    if (r->file)
        printf("eval  %s%s", r->file, r->ema ? " (EMA weights)" : "");
    else
        printf("eval");
    printf("  epoch %d  step %ld  ", r->epoch, r->step);
    print_accuracy(r->loss, r->top1, r->top5);
    if (r->has_ema) {
        printf("  EMA ");
        print_accuracy(r->ema_loss, r->ema_top1, r->ema_top5);
    }
    printf("  (%ld samples)\n", r->samples);
    fflush(stdout);
    if (mt->jsonl) {
        Record rec = {0};
        text_add(&rec.body, "{\"eval\":true,\"step\":%ld,\"epoch\":%d", r->step, r->epoch);
        if (r->file) {
            record_text(&rec, "file", r->file);
            record_text(&rec, "weights", r->ema ? "ema" : "model");
        }
        record_accuracy(&rec, "", r->loss, r->top1, r->top5);
        if (r->has_ema) record_accuracy(&rec, "ema_", r->ema_loss, r->ema_top1, r->ema_top5);
        text_add(&rec.body, ",\"samples\":%ld", r->samples);
        record_write(mt, &rec);
    }
}

void metrics_summary(Metrics *mt, const SummaryRecord *r) {
    if (!mt->active) return;
    end_bar(mt);
    printf("summary: %ld steps, epoch %d, %.1f s, %.1f images/s, peak %s memory %.1f MiB, %ld steps skipped, "
           "loss scale %g, final loss %.4f",
           r->steps, r->epoch, r->seconds, r->images_per_s, r->backend, r->peak_mib, r->skipped_total,
           r->scale, r->final_loss);
    if (r->eval && isfinite(r->eval->loss))
        printf(", val loss %.4f, top-1 %.2f%%, top-5 %.2f%%", r->eval->loss, 100 * r->eval->top1,
               100 * r->eval->top5);
    else if (r->eval)
        printf(", val loss %.4f, top-1 and top-5 not finite", r->eval->loss);
    // What start-up holds depends on the backend: the CPU has no algorithm search and no graph.
    const int cuda = strcmp(r->backend, "cuda") == 0;
    const double rest_s = r->startup_s - r->build_s - r->choices_s;
    printf("; start-up %.2f s (model build %.2f", r->startup_s, r->build_s);
    if (cuda)
        printf(
            ", kernel choices %.2f, buffers, first steps and graph capture %.2f; searching kernels %.2f of it)",
            r->choices_s, rest_s, r->search_s);
    else
        printf(", buffers and first step %.2f)", rest_s);
    printf(", then %.1f images/s; data wait %.2f ms/step", r->steady_images_per_s, r->data_wait_ms);
    if (cuda) printf(", %ld of %ld steps replayed from the CUDA graph", r->graph_steps, r->steps);
    if (strcmp(r->outcome, "done") != 0) printf("; %s%s%s", r->outcome, r->reason[0] ? ": " : "", r->reason);
    printf("\n");
    fflush(stdout);
    if (!mt->jsonl) return;
    Record rec = {0};
    text_add(&rec.body, "{\"summary\":true,\"outcome\":\"%s\"", r->outcome);
    if (r->reason && r->reason[0]) record_text(&rec, "reason", r->reason);
    text_add(&rec.body, ",\"steps\":%ld,\"epoch\":%d,\"world\":%d,\"amp\":%s,\"backend\":\"%s\"", r->steps,
             r->epoch, r->world, r->amp ? "true" : "false", r->backend);
    if (r->amp) record_text(&rec, "amp_dtype", r->amp_dtype);
    record_number(&rec, "seconds", r->seconds);
    record_number(&rec, "images_per_s", r->images_per_s);
    record_number(&rec, "peak_mib", r->peak_mib);
    text_add(&rec.body, ",\"skipped_total\":%ld", r->skipped_total);
    record_number(&rec, "scale", r->scale);
    record_number(&rec, "final_loss", r->final_loss);
    record_number(&rec, "startup_s", r->startup_s);
    record_number(&rec, "startup_build_s", r->build_s);
    record_number(&rec, "startup_choices_s", r->choices_s);
    record_number(&rec, "startup_search_s", r->search_s);
    record_number(&rec, "total_s", r->total_s);
    record_number(&rec, "steady_images_per_s", r->steady_images_per_s);
    record_number(&rec, "data_wait_ms", r->data_wait_ms);
    text_add(&rec.body, ",\"graph_steps\":%ld", r->graph_steps);
    if (r->eval) {
        record_number(&rec, "val_loss", r->eval->loss);
        if (isfinite(r->eval->loss)) {
            record_number(&rec, "top1", r->eval->top1);
            record_number(&rec, "top5", r->eval->top5);
        } else {
            record_null(&rec, "top1", "loss not finite");
            record_null(&rec, "top5", "loss not finite");
        }
    }
    record_write(mt, &rec);
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

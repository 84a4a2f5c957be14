#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = 0, g_world = 1;

void log_set_rank(int rank, int world_size) {
    g_rank = rank;
    g_world = world_size;
}

int log_rank(void) { return g_rank; }

// One formatted line, written with one call, so lines of several ranks on a shared stream do not
// interleave mid-line.
static void log_line(FILE *stream, const char *level, const char *fmt, va_list args) {
    char line[2048];
    int n = 0;
    if (g_world > 1) n += snprintf(line + n, sizeof line - (size_t)n, "[rank %d] ", g_rank);
    if (level) n += snprintf(line + n, sizeof line - (size_t)n, "%s: ", level);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, args);
    fprintf(stream, "%s\n", line);
    fflush(stream);
}

void log_info(const char *fmt, ...) {
    if (g_rank != 0) return;
    va_list args;
    va_start(args, fmt);
    log_line(stdout, NULL, fmt, args);
    va_end(args);
}

void log_warn(const char *fmt, ...) {
    if (g_rank != 0) return;
    va_list args;
    va_start(args, fmt);
    log_line(stderr, "warning", fmt, args);
    va_end(args);
}

void log_warn_local(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    log_line(stderr, "warning", fmt, args);
    va_end(args);
}

int log_env_flag(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

void log_error(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    log_line(stderr, "error", fmt, args);
    va_end(args);
}

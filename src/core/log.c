#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static int g_rank = 0, g_world = 1;

void log_set_rank(int rank, int world_size) {
    g_rank = rank;
    g_world = world_size;
}

int log_rank(void) { return g_rank; }

static void log_line(FILE *stream, const char *level, const char *fmt, va_list args) {
    if (g_world > 1) fprintf(stream, "[rank %d] ", g_rank);
    if (level) fprintf(stream, "%s: ", level);
    vfprintf(stream, fmt, args);
    fputc('\n', stream);
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

void log_error(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    log_line(stderr, "error", fmt, args);
    va_end(args);
}

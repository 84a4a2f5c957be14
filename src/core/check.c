#include "core/check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

static void (*abort_hook)(int exit_code);

void amp_set_abort_hook(void (*hook)(int exit_code)) { abort_hook = hook; }

void amp_fatal(const char *file, int line, const char *fmt, ...) {
    char message[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    log_error("%s:%d: %s", file, line, message);
    fflush(stdout);
    fflush(stderr);
    if (abort_hook) abort_hook(1);
    exit(1);
}

FILE *amp_fopen_checked(const char *path, const char *mode, const char *file, int line) {
    FILE *f = fopen(path, mode);
    if (!f) amp_fatal(file, line, "cannot open '%s' (mode %s): %s", path, mode, strerror(errno));
    return f;
}

void *amp_calloc_checked(size_t count, size_t size, const char *file, int line) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) amp_fatal(file, line, "out of host memory allocating %zu x %zu bytes", count, size);
    return p;
}

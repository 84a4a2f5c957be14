// check.h - the single fatal-error path and the per-library check macros for host code.
//
// Every library call is checked. A failure prints "FILE:LINE: what failed: why" once (with the rank in
// front under MPI) and ends the whole job: exit(1) in a single process, MPI_Abort when an abort hook
// was installed by src/dist (so no rank is left hanging in a collective).
#ifndef AMPTRAIN_CHECK_H
#define AMPTRAIN_CHECK_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// Ends the job. Never returns. exit code 1 (runtime failure), see src/main.c for the exit-code table.
void amp_fatal(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

// dist installs a hook (MPI_Abort) so one failing rank takes the others down instead of hanging them.
void amp_set_abort_hook(void (*hook)(int exit_code));

#define AMP_ASSERT(cond, ...)                                                                                \
    do {                                                                                                     \
        if (!(cond)) amp_fatal(__FILE__, __LINE__, __VA_ARGS__);                                             \
    } while (0)

// stdio: `FILE *f = fopen_checked(path, "rb");` names the path and errno on failure.
FILE *amp_fopen_checked(const char *path, const char *mode, const char *file, int line);
#define fopen_checked(path, mode) amp_fopen_checked((path), (mode), __FILE__, __LINE__)
#define STDIO_CHECK(expr)                                                                                    \
    do {                                                                                                     \
        if (!(expr)) amp_fatal(__FILE__, __LINE__, "%s failed", #expr);                                      \
    } while (0)

// Allocation that never returns NULL (calloc: zeroed, valgrind-quiet).
void *amp_calloc_checked(size_t count, size_t size, const char *file, int line);
#define xcalloc(count, size) amp_calloc_checked((count), (size), __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif

#endif

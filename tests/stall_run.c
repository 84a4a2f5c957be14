// stall_run.c - see stall_run.h.
#include "tests/stall_run.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "data/sampler.h"
#include "tests/image_fixtures.h"

void stall_folder_make(const StallData *d) {
    char path[512];
    snprintf(path, sizeof path, "rm -rf '%s' && mkdir -p '%s/train/a' '%s/train/b'", d->root, d->root,
             d->root);
    ck_assert_int_eq(system(path), 0);
    for (int i = 0; i < 2 * d->per_class; i++) {
        snprintf(path, sizeof path, "%s/train/%c/%02d.jpg", d->root, 'a' + i / d->per_class,
                 i % d->per_class);
        fx_write_solid(path, 40, 30, (uint8_t)(5 * i), (uint8_t)(250 - 5 * i), (uint8_t)(37 * i % 256));
    }
}

static void stall_path(const StallData *d, int sample, char *out, size_t cap) {
    snprintf(out, cap, "/%s/train/%c/%02d.jpg", d->root, 'a' + sample / d->per_class, sample % d->per_class);
}

void stall_image(const StallData *d, int rank, int step, int micro, char *out, size_t cap) {
    Sampler s;
    int32_t block[64];
    ck_assert_int_le(d->batch, 64);
    sampler_init(&s, 2 * d->per_class, d->batch, d->world, rank, d->accum, 0, d->seed);
    ck_assert_int_eq(sampler_block(&s, 0, step, micro, block), d->batch);
    sampler_free(&s);
    int i = block[0] != 0 ? block[0] : block[1];  // sample 0 is read at start-up (the data's probe)
    stall_path(d, i, out, cap);
}

void stall_refused_and_successor(const StallData *d, int step, int micro, int ahead, char *refused,
                                 char *successor, size_t cap) {
    const int size = 2 * d->per_class, steps = size / (d->batch * d->accum * d->world);
    int first_step[256], block[64];
    ck_assert_int_le(size, 256);
    ck_assert_int_le(d->batch, 64);
    for (int i = 0; i < size; i++) first_step[i] = steps;
    Sampler s;
    sampler_init(&s, size, d->batch, d->world, 0, d->accum, 0, d->seed);
    for (int t = steps - 1; t >= 0; t--)
        for (int m = d->accum - 1; m >= 0; m--) {
            const int n = sampler_block(&s, 0, t, m, block);
            for (int k = 0; k < n; k++) first_step[block[k]] = t;
        }
    ck_assert_int_eq(sampler_block(&s, 0, step, micro, block), d->batch);
    sampler_free(&s);
    for (int k = 0; k < d->batch; k++) {
        const int i = block[k], next = (i + 1) % size;
        if (i != 0 && next != 0 && first_step[next] >= step + ahead) {
            stall_path(d, i, refused, cap);
            stall_path(d, next, successor, cap);
            return;
        }
    }
    ck_abort_msg("no sample of step %d whose successor is first read at step %d or later", step,
                 step + ahead);
}

void stall_env(const char *image, const char *prefix, char *out, size_t cap) {
    const char *asan = getenv("ASAN_OPTIONS");
    snprintf(out, cap, "%sLD_PRELOAD=%s %sAMPTRAIN_TEST_STALL=%s %sASAN_OPTIONS=%s%sverify_asan_link_order=0",
             prefix, AMPTRAIN_STALL_READ, prefix, image, prefix, asan ? asan : "", asan && *asan ? ":" : "");
}

pid_t stall_start(const char *command, const char *log) {
    char line[8192];
    snprintf(line, sizeof line, "exec %s > '%s' 2>&1", command, log);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", line, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    return pid;
}

int stall_wait_exit(pid_t pid, double seconds) {
    int status;
    for (double start = clock_seconds(); clock_seconds() - start < seconds; usleep(20000))
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    ck_abort_msg("pid %d did not exit within %.0f s", (int)pid, seconds);
    return -1;
}

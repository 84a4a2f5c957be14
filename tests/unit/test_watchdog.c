// test_watchdog.c - the collective timeout's clock (dist/watchdog.h), without MPI: a collective that
// outlives a short timeout ends the process with COMM_EXIT_TIMEOUT, and the longest timeouts wait. One
// past int64_t nanoseconds (9.3e9 s) once converted to a negative count and expired at the first poll,
// ending every multi-rank run with exit 3 within a second. Each case runs in a child process, since the
// watchdog's verdict is _exit.
#include <check.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "dist/dist.h"
#include "dist/watchdog.h"
#include "tests/test_util.h"

// Runs a collective of `hold_s` seconds under watchdogs of the given timeouts (each entered and left
// around it) in a child process; its exit status, and the seconds it took in *seconds.
static int run_collective(const double *timeouts, int n, double hold_s, double *seconds) {
    double start = clock_seconds();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        Watchdog *w[4];
        for (int i = 0; i < n; i++) w[i] = watchdog_start(timeouts[i], NULL);
        for (int i = 0; i < n; i++) watchdog_enter(w[i], "test_collective");
        struct timespec hold = {(time_t)hold_s, (long)((hold_s - (time_t)hold_s) * 1e9)};
        nanosleep(&hold, NULL);
        for (int i = 0; i < n; i++) watchdog_leave(w[i]);
        for (int i = 0; i < n; i++) watchdog_stop(w[i]);
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    *seconds = clock_seconds() - start;
    ck_assert_msg(WIFEXITED(status), "the child did not exit (status %d)", status);
    return WEXITSTATUS(status);
}

START_TEST(short_timeout_ends_the_process) {
    const double timeout[] = {0.2};
    double seconds;
    ck_assert_int_eq(run_collective(timeout, 1, 10, &seconds), COMM_EXIT_TIMEOUT);
    ck_assert_msg(seconds >= 0.2 && seconds < 5, "ended after %.2f s", seconds);
}
END_TEST

// A collective of 1.2 s spans at least two polls (every 500 ms for timeouts this long).
START_TEST(longest_timeouts_wait) {
    const double timeouts[] = {WATCHDOG_MAX_TIMEOUT_S, 9.3e9, 1e300};
    double seconds;
    ck_assert_int_eq(run_collective(timeouts, 3, 1.2, &seconds), 0);
    ck_assert_msg(seconds >= 1.2, "ended after %.2f s", seconds);
}
END_TEST

static Suite *watchdog_suite(void) {
    Suite *s = suite_create("watchdog");
    TCase *tc = tcase_create("timeout");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, short_timeout_ends_the_process);
    tcase_add_test(tc, longest_timeouts_wait);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(watchdog_suite(), 1); }

// test_fault_trainer.c - the fault requirement for a real training job: killing one rank of
// `mpiexec -np 2 amptrain configs/tiny.yaml` mid-run ends the job within a bound, with a non-zero status
// and no rank left behind, and the last checkpoint the job wrote loads into a fresh single-process run
// that continues from it.
//
// Like test_comm_faults.c, the job under test cannot run inside another job: ctest starts this suite
// once, without mpiexec (tests/tests.cmake). The job's log (with the errors the kill is meant to cause)
// is printed only when an assertion fails. (The stalled-rank watchdog is covered by test_comm_faults.c.)
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "tests/test_util.h"
#include "checkpoint/safetensors.h"

// Seconds from the kill within which the job must be over: dist.timeout_s (5) plus mpiexec's teardown,
// with room for a loaded machine.
#define KILL_BOUND_S 30.0
#define CHECKPOINT_EVERY 5

// Reads a /proc file of NUL-separated strings (cmdline, environ) into buf; returns its length, 0 if gone.
static size_t read_proc_file(pid_t pid, const char *what, char *buf, size_t cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, what);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    size_t len = 0;
    for (ssize_t n; len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0;) len += (size_t)n;
    close(fd);
    buf[len] = 0;
    return len;
}

// 1 if the NUL-separated list holds an entry that contains `needle`.
static int list_contains(const char *list, size_t len, const char *needle) {
    for (const char *s = list; s < list + len; s += strlen(s) + 1)
        if (strstr(s, needle)) return 1;
    return 0;
}

// The amptrain processes whose command line holds `token` (the job's unique folder name): up to cap
// pids, and each one's rank from its launcher environment (-1 if unknown). Returns how many.
static int find_ranks(const char *token, pid_t *pids, int *ranks, int cap) {
    static char buf[1 << 16];
    int found = 0;
    DIR *proc = opendir("/proc");
    ck_assert_ptr_nonnull(proc);
    for (struct dirent *d; (d = readdir(proc)) != NULL && found < cap;) {
        pid_t pid = (pid_t)atoi(d->d_name);
        if (pid <= 0) continue;
        size_t len = read_proc_file(pid, "cmdline", buf, sizeof buf);
        // argv[0] is the binary mpiexec was given; mpiexec itself also carries the token, but not as argv[0].
        if (len == 0 || strcmp(buf, AMPTRAIN_BIN) != 0 || !list_contains(buf, len, token)) continue;
        pids[found] = pid;
        ranks[found] = -1;
        len = read_proc_file(pid, "environ", buf, sizeof buf);
        for (const char *s = buf; s < buf + len; s += strlen(s) + 1)
            if (strncmp(s, "OMPI_COMM_WORLD_RANK=", 21) == 0) ranks[found] = atoi(s + 21);
        found++;
    }
    closedir(proc);
    return found;
}

// Ends what this test started and did not end by itself: the job's launcher and its ranks, by pid.
static void end_leftovers(pid_t job, const char *token) {
    pid_t pids[8];
    int ranks[8];
    int n = find_ranks(token, pids, ranks, 8);
    for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
    if (job > 0 && kill(job, SIGKILL) == 0) waitpid(job, NULL, 0);
}

static void print_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) fputs(line, stdout);
    fclose(f);
}

// argv (NULL-terminated) in the background, output to log_path; returns its pid.
static pid_t start_job(char *const argv[], const char *log_path) {
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

// The launcher of every job here: two ranks on this machine, whatever its cores and user.
#define MPIEXEC_TWO_RANKS "mpiexec", "--allow-run-as-root", "--oversubscribe", "-np", "2"

// `mpiexec -np 2 amptrain tiny.yaml ...`, checkpointing into dir every CHECKPOINT_EVERY steps.
static pid_t start_training(const char *dir, const char *log_path) {
    char ckpt_dir[PATH_MAX + 32], config[PATH_MAX], every[32];
    snprintf(ckpt_dir, sizeof ckpt_dir, "checkpoint.dir=%s", dir);
    snprintf(config, sizeof config, "%s/configs/tiny.yaml", AMPTRAIN_SOURCE_DIR);
    snprintf(every, sizeof every, "checkpoint.every=%d", CHECKPOINT_EVERY);
    char *const argv[] = {MPIEXEC_TWO_RANKS, AMPTRAIN_BIN,      config, ckpt_dir, every, "dist.timeout_s=5",
                          "log.metrics=",    "data.prefetch=0", NULL};
    return start_job(argv, log_path);
}

START_TEST(killed_rank_ends_the_job_and_the_checkpoint_loads) {
    // A fresh folder with a random name: its name is the token that tells this job's processes apart.
    char dir[PATH_MAX], made[] = "fault_trainer_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(made));
    ck_assert_ptr_nonnull(realpath(made, dir));
    const char *token = made;
    char log_path[PATH_MAX + 16], checkpoint[PATH_MAX + 32];
    snprintf(log_path, sizeof log_path, "%s/job.log", dir);
    snprintf(checkpoint, sizeof checkpoint, "%s/last.safetensors", dir);

    pid_t job = start_training(dir, log_path);
    // Mid-run: once the first periodic checkpoint is on disk (written by rename, so it is complete).
    int status = 0;
    double deadline = clock_seconds() + 60.0;
    while (access(checkpoint, F_OK) != 0) {
        if (waitpid(job, &status, WNOHANG) == job) {
            print_file(log_path);
            ck_abort_msg("the job ended (status %d) before writing %s", status, checkpoint);
        }
        if (clock_seconds() > deadline) {
            end_leftovers(job, token);
            print_file(log_path);
            ck_abort_msg("no checkpoint after 60 s");
        }
        usleep(10 * 1000);
    }
    pid_t pids[8];
    int ranks[8], victim = -1;
    int n = find_ranks(token, pids, ranks, 8);
    for (int i = 0; i < n; i++)
        if (ranks[i] == 1) victim = i;
    if (n != 2 || victim < 0) {
        end_leftovers(job, token);
        ck_abort_msg("found %d ranks of the job, rank 1 %s", n, victim < 0 ? "missing" : "present");
    }
    // Rank 1: then rank 0, which writes the checkpoints, is ended by the job's own fault handling
    // (mpiexec's teardown or its collective watchdog), at whatever point it had reached.
    ck_assert_int_eq(kill(pids[victim], SIGKILL), 0);
    double killed_at = clock_seconds();

    int exited = 0;
    while (!exited && clock_seconds() - killed_at < KILL_BOUND_S) {
        exited = waitpid(job, &status, WNOHANG) == job;
        if (!exited) usleep(20 * 1000);
    }
    double took = clock_seconds() - killed_at;
    printf("the job ended %.1f s after the kill of rank 1\n", took);
    if (!exited) {
        end_leftovers(job, token);
        print_file(log_path);
        ck_abort_msg("the job still ran %.0f s after one rank was killed", KILL_BOUND_S);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 0) {
        print_file(log_path);
        ck_abort_msg("mpiexec ended with status 0x%x, want a non-zero exit", status);
    }
    n = find_ranks(token, pids, ranks, 8);
    if (n > 0) {
        end_leftovers(0, token);
        print_file(log_path);
        ck_abort_msg("%d amptrain process(es) of the job outlived mpiexec (pid %d)", n, (int)pids[0]);
    }

    // The last checkpoint is whole and the run continues from it, two more steps, single-process.
    char err[1024];
    SafetensorsFile *f = st_open(checkpoint, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    const char *step_text = st_meta(f, "step");
    ck_assert_ptr_nonnull(step_text);
    long step = atol(step_text);
    st_close(f);
    ck_assert_msg(step >= CHECKPOINT_EVERY && step % CHECKPOINT_EVERY == 0, "checkpoint at step %ld", step);

    char command[4 * PATH_MAX], output[16384];
    snprintf(
        command, sizeof command,
        "timeout 60 '%s' '%s/configs/tiny.yaml' 'checkpoint.resume=%s' train.steps=%ld 'checkpoint.dir=%s/resumed' "
        "log.metrics= data.prefetch=0 2>&1",
        AMPTRAIN_BIN, AMPTRAIN_SOURCE_DIR, checkpoint, step + 2, dir);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    size_t len = fread(output, 1, sizeof output - 1, p);
    output[len] = 0;
    char drain[4096];
    while (fread(drain, 1, sizeof drain, p) > 0) continue;
    int resumed = pclose(p);
    ck_assert_msg(resumed != -1 && WIFEXITED(resumed) && WEXITSTATUS(resumed) == 0, "resume exited 0x%x:\n%s",
                  resumed, output);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "resumed from %s at epoch ", checkpoint);
    const char *said = strstr(output, want);
    int epoch = -1;
    long resumed_step = -1;
    ck_assert_msg(said && sscanf(said + strlen(want), "%d, step %ld", &epoch, &resumed_step) == 2,
                  "want '%s<epoch>, step %ld' in:\n%s", want, step, output);
    ck_assert_int_eq(resumed_step, step);
    snprintf(want, sizeof want, "summary: %ld steps", step + 2);
    ck_assert_msg(strstr(output, want) != NULL, "want '%s' in:\n%s", want, output);

    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(command), 0);
}
END_TEST

// A stop signal to the job's launcher: every rank finishes the same step, rank 0 writes the checkpoint of
// that step, and the launcher exits 0. launch/amptrain-mpirun gets SIGTERM (what a scheduler or `kill`
// sends) and passes it to mpirun as SIGUSR1; plain mpirun gets SIGUSR1 directly. (SIGTERM to plain
// Open MPI mpirun stops the ranks just as cleanly, but mpirun then exits 1 by its own design.)
static void stop_cleanly(int through_wrapper) {
    char dir[PATH_MAX], made[] = "stop_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(made));
    ck_assert_ptr_nonnull(realpath(made, dir));
    char log_path[PATH_MAX + 16], metrics[PATH_MAX + 32], ckpt_dir[PATH_MAX + 32], config[PATH_MAX],
        wrapper[PATH_MAX], checkpoint[PATH_MAX + 32];
    snprintf(log_path, sizeof log_path, "%s/job.log", dir);
    snprintf(metrics, sizeof metrics, "log.metrics=%s/m.jsonl", dir);
    snprintf(ckpt_dir, sizeof ckpt_dir, "checkpoint.dir=%s", dir);
    snprintf(checkpoint, sizeof checkpoint, "%s/last.safetensors", dir);
    snprintf(config, sizeof config, "%s/configs/tiny.yaml", AMPTRAIN_SOURCE_DIR);
    snprintf(wrapper, sizeof wrapper, "%s/launch/amptrain-mpirun", AMPTRAIN_SOURCE_DIR);
    char *const by_wrapper[] = {
        wrapper, "--cpu",  "--np",  "2",           "--amptrain",      AMPTRAIN_BIN,      "--",
        config,  ckpt_dir, metrics, "log.every=1", "train.epochs=50", "data.prefetch=0", NULL};
    char *const by_mpiexec[] = {MPIEXEC_TWO_RANKS, AMPTRAIN_BIN,      config,
                                ckpt_dir,          metrics,           "log.every=1",
                                "train.epochs=50", "data.prefetch=0", NULL};
    pid_t job = start_job(through_wrapper ? by_wrapper : by_mpiexec, log_path);
    // Once a step is done (the metrics file has a line), ask the job to stop.
    char metrics_path[PATH_MAX + 16];
    snprintf(metrics_path, sizeof metrics_path, "%s/m.jsonl", dir);
    int status = 0;
    double deadline = clock_seconds() + 60.0;
    for (struct stat st; stat(metrics_path, &st) != 0 || st.st_size == 0;) {
        if (waitpid(job, &status, WNOHANG) == job || clock_seconds() > deadline) {
            end_leftovers(job, made);
            print_file(log_path);
            ck_abort_msg("the job ended (status 0x%x) or did not train within 60 s", status);
        }
        usleep(10 * 1000);
    }
    ck_assert_int_eq(kill(job, through_wrapper ? SIGTERM : SIGUSR1), 0);
    int exited = 0;
    for (double stop_at = clock_seconds(); !exited && clock_seconds() - stop_at < KILL_BOUND_S;)
        if (!(exited = waitpid(job, &status, WNOHANG) == job)) usleep(20 * 1000);
    if (!exited || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        end_leftovers(exited ? 0 : job, made);
        print_file(log_path);
        ck_abort_msg("%s ended with status 0x%x (exited: %d), want exit 0", by_wrapper[0], status, exited);
    }
    char err[1024], text[1 << 16];
    SafetensorsFile *f = st_open(checkpoint, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    long step = atol(st_meta(f, "step"));
    st_close(f);
    FILE *log = fopen(log_path, "r");
    ck_assert_ptr_nonnull(log);
    size_t len = fread(text, 1, sizeof text - 1, log);
    text[len] = 0;
    fclose(log);
    char want[64];
    snprintf(want, sizeof want, "stopped by signal after step %ld", step);
    ck_assert_msg(step >= 1 && strstr(text, want), "checkpoint at step %ld, want '%s' in:\n%s", step, want,
                  text);
    ck_assert_int_eq(find_ranks(made, (pid_t[8]){0}, (int[8]){0}, 8), 0);
    char command[PATH_MAX + 16];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(command), 0);
}

START_TEST(sigterm_to_the_launcher_checkpoints_and_exits_0) { stop_cleanly(1); }
END_TEST

START_TEST(sigusr1_to_mpiexec_checkpoints_and_exits_0) { stop_cleanly(0); }
END_TEST

static Suite *fault_trainer_suite(void) {
    Suite *s = suite_create("fault_trainer");
    TCase *tc = tcase_create("kill");
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, killed_rank_ends_the_job_and_the_checkpoint_loads);
    tcase_add_test(tc, sigterm_to_the_launcher_checkpoints_and_exits_0);
    tcase_add_test(tc, sigusr1_to_mpiexec_checkpoints_and_exits_0);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    int skip = tu_leave_launch("test_fault_trainer");
    return skip ? skip : tu_run_suite(fault_trainer_suite(), 1);
}

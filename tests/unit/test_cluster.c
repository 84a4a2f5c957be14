// test_cluster.c - what a cluster launch depends on, on the CPU: the rule that picks a rank's GPU (srun
// --gpus-per-task=1 gives every rank one GPU of its own), the architectures --version names, the refusal of Slurm tasks that are not one MPI
// job (exit 2, nothing written), and the CPUs the loader's threads are sized from (affinity mask and
// cgroup CPU quota, not the host's online count).
#define _GNU_SOURCE  // sched_setaffinity
#include <check.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cpus.h"
#include "data/loader.h"
#include "dist/dist.h"
#include "tests/test_util.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"

static char out[1 << 16];

// ---- the GPU of a rank ---------------------------------------------------------------------------------

START_TEST(local_rank_takes_its_own_gpu) {
    // (local rank, ranks on the host, GPUs it sees) -> device, -1 for none of its own
    static const int cases[][4] = {
        {0, 1, 1, 0},  {3, 8, 8, 3},  {7, 8, 8, 7}, {1, 2, 4, 1},  // one rank per GPU, spare GPUs unused
        {5, 8, 1, 0},  {0, 8, 1, 0},  {7, 8, 1, 0},                // --gpus-per-task=1: its one GPU
        {2, 4, 2, -1}, {1, 4, 3, -1},                              // fewer GPUs than ranks, more than one
        {0, 1, 0, -1}, {0, 2, 0, -1},                              // no GPU at all
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        ck_assert_msg(comm_local_gpu(c[0], c[1], c[2]) == c[3],
                      "local rank %d of %d seeing %d GPUs: got %d, want %d", c[0], c[1], c[2],
                      comm_local_gpu(c[0], c[1], c[2]), c[3]);
    }
}
END_TEST

// A single process sees one GPU or as many as it likes: device 0, no refusal, and nothing to compare.
START_TEST(single_rank_passes_the_gpu_check) {
    Comm *c = comm_single_create();
    char why[256] = "";
    int device = -2;
    ck_assert_int_eq(comm_check_local_gpus(c, 1, NULL, &device, why, sizeof why), 0);
    ck_assert_int_eq(device, 0);
    ck_assert_int_eq(comm_check_local_gpus(c, 4, NULL, &device, why, sizeof why), 0);
    ck_assert_int_eq(device, 0);
    ck_assert_int_ne(comm_check_local_gpus(c, 0, NULL, &device, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "1 ranks on host ") && strstr(why, "only 0 visible GPUs"), "%s", why);
    c->destroy(c);
}
END_TEST

// --version names the CUDA architectures the build holds code for (CMake's list: native's compute
// capabilities, or the default from sm_75 to sm_90 with sm_90's PTX, or -DCMAKE_CUDA_ARCHITECTURES).
START_TEST(version_names_the_cuda_architectures) {
    ck_assert_int_eq(tu_run_cli("--version", out, sizeof out), 0);
#ifdef AMPTRAIN_HAVE_CUDA
    ck_assert_msg(strstr(out, "cuda (architectures " AMPTRAIN_CUDA_ARCHITECTURES ")") != NULL, "%s", out);
    ck_assert_msg(strlen(AMPTRAIN_CUDA_ARCHITECTURES) > 0 && !strchr(AMPTRAIN_CUDA_ARCHITECTURES, ';'), "%s",
                  AMPTRAIN_CUDA_ARCHITECTURES);
#else
    ck_assert_msg(strstr(out, "architectures") == NULL, "%s", out);
#endif
}
END_TEST

// ---- Slurm tasks without MPI wiring ----------------------------------------------------------------------

START_TEST(slurm_task_count_from_the_environment) {
    unsetenv("SLURM_STEP_NUM_TASKS"), unsetenv("SLURM_NTASKS"), unsetenv("SLURM_NPROCS");
    ck_assert_int_eq(comm_slurm_tasks(), 0);
    setenv("SLURM_NPROCS", "3", 1);
    ck_assert_int_eq(comm_slurm_tasks(), 3);
    setenv("SLURM_NTASKS", "8", 1);
    ck_assert_int_eq(comm_slurm_tasks(), 8);
    // srun -n 1 inside an allocation of 8 tasks: the step's own count decides
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    ck_assert_int_eq(comm_slurm_tasks(), 1);
}
END_TEST

// `srun -n 2 amptrain ...` without --mpi=pmix: each task is a world of one rank. Refused with exit 2 and a
// message saying how to launch, before the run's folder exists; one task, or one step task of a larger
// allocation, runs.
START_TEST(unwired_slurm_tasks_are_refused) {
    static const char *const refused[] = {"SLURM_NTASKS=2", "SLURM_NPROCS=3",
                                          "SLURM_STEP_NUM_TASKS=4 SLURM_NTASKS=4"};
    char cmd[2048];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(
            cmd, sizeof cmd,
            "env -u SLURM_STEP_NUM_TASKS -u SLURM_NTASKS -u SLURM_NPROCS %s %s " TINY
            " backend.device=cpu data.train_size=64 data.val_size=0 train.epochs=1 checkpoint.dir=slurm_run "
            "log.metrics=slurm_run/metrics.jsonl 2>&1",
            refused[i], AMPTRAIN_BIN);
        int rc = tu_run_shell(cmd, out, sizeof out);
        ck_assert_msg(rc == 2, "%s: exit %d\n%s", refused[i], rc, out);
        ck_assert_msg(strstr(out, "srun --mpi=pmix") && strstr(out, "mpirun") &&
                          strstr(out, "MPI world of 1 rank"),
                      "%s: %s", refused[i], out);
        ck_assert_msg(!tu_file_exists("slurm_run"), "%s: slurm_run was made", refused[i]);
    }
    static const char *const allowed[] = {"SLURM_NTASKS=1", "SLURM_STEP_NUM_TASKS=1 SLURM_NTASKS=8"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        snprintf(cmd, sizeof cmd,
                 "env -u SLURM_STEP_NUM_TASKS -u SLURM_NTASKS -u SLURM_NPROCS %s %s " TINY
                 " backend.device=cpu checkpoint.dir=slurm_ok --dry-run 2>&1",
                 allowed[i], AMPTRAIN_BIN);
        int rc = tu_run_shell(cmd, out, sizeof out);
        ck_assert_msg(rc == 0, "%s: exit %d\n%s", allowed[i], rc, out);
    }
}
END_TEST

// ---- the CPUs the loader's threads are sized from --------------------------------------------------------

static void set_bits(unsigned char bits[CPUS_MASK_BYTES], const int *cpus, int n) {
    memset(bits, 0, CPUS_MASK_BYTES);
    for (int i = 0; i < n; i++) bits[cpus[i] / 8] |= (unsigned char)(1u << (cpus[i] % 8));
}

START_TEST(cpu_count_of_a_mask_and_its_quota) {
    unsigned char bits[CPUS_MASK_BYTES];
    static const int spread[] = {0, 1, 5, 63, 64, 4095};
    set_bits(bits, spread, 6);
    ck_assert_int_eq(cpus_count(bits, 0), 6);
    ck_assert_int_eq(cpus_count(bits, 2), 2);
    ck_assert_int_eq(cpus_count(bits, 100), 6);
    set_bits(bits, spread, 0);
    ck_assert_int_eq(cpus_count(bits, 0), 1);  // never 0 threads' worth
}
END_TEST

// Pinned to one CPU (taskset -c 0), the process may use one, whatever the host has; its mask reads back
// as that CPU alone.
START_TEST(affinity_of_one_cpu_is_one_cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    ck_assert_int_eq(cpus_usable(), 1);
    unsigned char bits[CPUS_MASK_BYTES], want[CPUS_MASK_BYTES];
    cpus_affinity_bits(bits);
    static const int cpu0[] = {0};
    set_bits(want, cpu0, 1);
    ck_assert(memcmp(bits, want, CPUS_MASK_BYTES) == 0);
    Comm *single = comm_single_create();
    ck_assert_int_eq(single->local_cpus, 1);
    single->destroy(single);
    ck_assert_int_eq(loader_auto_workers(cpus_usable(), 1), 1);
}
END_TEST

// Two CPUs in the mask (where the host has them): 2.
START_TEST(affinity_of_two_cpus_is_two_cpus) {
    cpu_set_t mine;
    ck_assert_int_eq(sched_getaffinity(0, sizeof mine, &mine), 0);
    if (CPU_COUNT(&mine) < 2) return;
    cpu_set_t two;
    CPU_ZERO(&two);
    for (int i = 0, taken = 0; taken < 2; i++)
        if (CPU_ISSET(i, &mine)) CPU_SET(i, &two), taken++;
    ck_assert_int_eq(sched_setaffinity(0, sizeof two, &two), 0);
    int quota = cpus_quota_limit();
    ck_assert_int_eq(cpus_usable(), quota == 1 ? 1 : 2);
}
END_TEST

// The loader's share: the host's CPUs over its ranks, one left to each rank's training thread, 1 at least.
START_TEST(loader_workers_share_the_cpus) {
    ck_assert_int_eq(loader_auto_workers(16, 1), 15);
    ck_assert_int_eq(loader_auto_workers(16, 8), 1);
    ck_assert_int_eq(loader_auto_workers(128, 8), 15);  // srun --cpus-per-task=16: 8 masks of 16, ORed
    ck_assert_int_eq(loader_auto_workers(1, 1), 1);
    ck_assert_int_eq(loader_auto_workers(2, 4), 1);
}
END_TEST

static void write_in(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tu_write_file(path, text);
}

// A cgroup tree in the scratch folder: v2's cpu.max and v1's quota files, at several depths.
START_TEST(cgroup_quota_is_the_tightest_on_the_path) {
    ck_assert_int_eq(system("rm -rf cg && mkdir -p cg/a/b/c cg1/job/step"), 0);
    ck_assert_int_eq(cpus_cgroup_limit("cg", "/a/b/c"), 0);  // no quota files anywhere
    write_in("cg/a/b/c", "cpu.max", "max 100000\n");         // "max": no quota
    ck_assert_int_eq(cpus_cgroup_limit("cg", "/a/b/c"), 0);
    write_in("cg/a", "cpu.max", "250000 100000\n");  // 2.5 CPUs' worth: 3 threads
    ck_assert_int_eq(cpus_cgroup_limit("cg", "/a/b/c"), 3);
    write_in("cg/a/b", "cpu.max", "150000 100000\n");  // tighter below: 2
    ck_assert_int_eq(cpus_cgroup_limit("cg", "/a/b/c"), 2);
    ck_assert_int_eq(cpus_cgroup_limit("cg", "/a"), 3);  // the parent does not see its child's
    write_in("cg", "cpu.max", "50000 100000\n");         // the mount itself (a container's root): 1
    ck_assert_int_eq(cpus_cgroup_limit("cg", "/a/b/c"), 1);
    ck_assert_int_eq(cpus_cgroup_limit("cg", "/"), 1);
    // /proc/self/cgroup names a path the container does not show: its ancestors still count
    ck_assert_int_eq(cpus_cgroup_limit("cg", "/docker/abc"), 1);
    write_in("cg/a/b/c", "cpu.max", "garbage\n");  // unreadable: ignored
    ck_assert_int_eq(cpus_cgroup_limit("cg", "/a/b/c"), 1);

    write_in("cg1/job", "cpu.cfs_quota_us", "400000\n");  // v1: quota and period in two files
    write_in("cg1/job", "cpu.cfs_period_us", "100000\n");
    write_in("cg1/job/step", "cpu.cfs_quota_us", "-1\n");
    write_in("cg1/job/step", "cpu.cfs_period_us", "100000\n");
    ck_assert_int_eq(cpus_cgroup_limit("cg1", "/job/step"), 4);
}
END_TEST

static Suite *cluster_suite(void) {
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, local_rank_takes_its_own_gpu);
    tcase_add_test(tc, single_rank_passes_the_gpu_check);
    tcase_add_test(tc, version_names_the_cuda_architectures);
    tcase_add_test(tc, slurm_task_count_from_the_environment);
    tcase_add_test(tc, unwired_slurm_tasks_are_refused);
    tcase_add_test(tc, cpu_count_of_a_mask_and_its_quota);
    tcase_add_test(tc, affinity_of_one_cpu_is_one_cpu);
    tcase_add_test(tc, affinity_of_two_cpus_is_two_cpus);
    tcase_add_test(tc, loader_workers_share_the_cpus);
    tcase_add_test(tc, cgroup_quota_is_the_tightest_on_the_path);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(cluster_suite(), 1); }

// test_comm.c - the MPI communicator under mpiexec with 1, 2 and 3 ranks: exact fp32, fp16 and bf16 sums
// (16-bit sums overflowing to inf only in the sum, like a 16-bit add), bitwise-identical results on every
// rank, the MAX verdict, broadcast from any root, barrier, the ranks-per-GPU start-up check and the host's
// CPUs.
//
// Every rank runs every test in the same order (CK_FORK=no), so the collectives match up. The comm runs
// with a 120 s watchdog: if a failed assertion ever desynchronised the ranks, the job ends instead of
// hanging until ctest's timeout.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/cpus.h"
#include "dist/comm.h"
#include "dist/dist.h"
#include "kernels/cpu/half.h"
#include "tests/test_util.h"

static Comm *comm;

START_TEST(mpi_path_taken_under_mpiexec) {
    ck_assert_str_eq(comm->name, "mpi");
    ck_assert_int_ge(comm->size, 1);
    ck_assert_int_ge(comm->rank, 0);
    ck_assert_int_lt(comm->rank, comm->size);
    // ctest launches every rank on this one host, so the shared-memory split is the whole world.
    ck_assert_int_eq(comm->local_size, comm->size);
    ck_assert_int_eq(comm->local_rank, comm->rank);
}
END_TEST

START_TEST(fp32_sum_is_exact) {
    enum { N = 1000 };
    float buf[N];
    for (int i = 0; i < N; i++) buf[i] = (float)comm->rank * 1000.0f + (float)i * 0.5f;
    comm->allreduce_sum(comm, buf, N, DTYPE_F32);
    comm->wait(comm);
    // Every partial sum is an integer or half-integer below 2^24: exact in fp32 whatever the order.
    int p = comm->size;
    for (int i = 0; i < N; i++) {
        float want = 1000.0f * (float)(p * (p - 1) / 2) + (float)p * (float)i * 0.5f;
        ck_assert_msg(buf[i] == want, "element %d: %.9g, want %.9g", i, buf[i], want);
    }
}
END_TEST

// The 16-bit sums, one per _i: the dtype, the k range whose sums are exact in it, a value finite on every
// rank whose double is not, and half an ulp at magnitudes in [2, 4).
static const struct {
    DType dt;
    int exact_k;  // (r + 1) * k / 4 with |k| < exact_k: every partial sum a multiple of 1/4 exact in dt
    float big;    // finite in dt, 2 x big is not
    double half_ulp;
} sums16[] = {
    {DTYPE_F16, 64, 40000.0f, 0x1p-10},  // 11 significant bits: multiples of 1/4 below 128 (6 x 63 / 4)
    {DTYPE_BF16, 16, 2e38f, 0x1p-7},     // 8 significant bits: multiples of 1/4 below 32 (6 x 15 / 4)
};

// Element i of a 16-bit buffer of dtype dt, from and to fp32.
static void put16(uint16_t *buf, DType dt, size_t i, float v) {
    if (dt == DTYPE_F16) {
        const half h = half_from_float(v);
        memcpy(&buf[i], &h, sizeof h);
    } else {
        buf[i] = bf16_from_float(v);
    }
}

static float get16(const uint16_t *buf, DType dt, size_t i) {
    if (dt == DTYPE_BF16) return bf16_to_float(buf[i]);
    half h;
    memcpy(&h, &buf[i], sizeof h);
    return half_to_float(h);
}

START_TEST(sum16_is_exact_and_overflows_like_its_add) {
    enum { N = 515, OVERFLOW_AT = N - 3, NAN_AT = N - 2, NEGATIVE_AT = N - 1 };
    const DType dt = sums16[_i].dt;
    const int exact_k = sums16[_i].exact_k;
    const float big = sums16[_i].big;
    uint16_t buf[N];
    for (int i = 0; i < OVERFLOW_AT; i++) {
        int k = (i % exact_k) * (i % 2 ? -1 : 1);
        put16(buf, dt, i, (float)(comm->rank + 1) * (float)k * 0.25f);
    }
    put16(buf, dt, OVERFLOW_AT, big);  // finite on every rank; 2 x big is not
    put16(buf, dt, NAN_AT, comm->rank == comm->size - 1 ? NAN : 1.0f);
    put16(buf, dt, NEGATIVE_AT, -big);
    comm->allreduce_sum(comm, buf, N, dt);
    comm->wait(comm);

    int p = comm->size;
    for (int i = 0; i < OVERFLOW_AT; i++) {
        int k = (i % exact_k) * (i % 2 ? -1 : 1);
        float want = (float)(p * (p + 1) / 2) * (float)k * 0.25f;
        ck_assert_msg(get16(buf, dt, i) == want, "%s element %d: %.9g, want %.9g", dtype_name(dt), i,
                      get16(buf, dt, i), want);
    }
    const float sum = get16(buf, dt, OVERFLOW_AT), negative_sum = get16(buf, dt, NEGATIVE_AT);
    if (p >= 2) {
        ck_assert_msg(isinf(sum) && sum > 0, "%s: %g x %d = %g, want +inf", dtype_name(dt), big, p, sum);
        ck_assert_msg(isinf(negative_sum) && negative_sum < 0, "%s: -%g x %d = %g, want -inf", dtype_name(dt),
                      big, p, negative_sum);
    } else {
        uint16_t alone;  // one rank: its own value, as dt holds it
        put16(&alone, dt, 0, big);
        ck_assert_float_eq(sum, get16(&alone, dt, 0));
        ck_assert_float_eq(negative_sum, -sum);
    }
    ck_assert_msg(isnan(get16(buf, dt, NAN_AT)), "%s: a NaN on one rank must reach all, got %g",
                  dtype_name(dt), get16(buf, dt, NAN_AT));
}
END_TEST

// Sums that round: the order is MPI's, but the bits must be the same on every rank (the invariant that
// keeps master weights identical). 1 Mi elements, so Open MPI's segmented large-message algorithms run.
START_TEST(sum16_is_bitwise_identical_on_every_rank) {
    const DType dt = sums16[_i].dt;
    size_t n = (size_t)1 << 20;
    float *values = malloc(n * sizeof *values);
    uint16_t *mine = malloc(n * sizeof *mine), *root = malloc(n * sizeof *root);
    tu_fill_uniform(values, n, 1234 + (uint64_t)comm->rank, -1.0f, 1.0f);
    for (size_t i = 0; i < n; i++) put16(mine, dt, i, values[i]);
    comm->allreduce_sum(comm, mine, n, dt);
    memcpy(root, mine, n * sizeof *mine);
    comm->broadcast(comm, root, n * sizeof *root, 0);

    ck_assert_msg(memcmp(mine, root, n * sizeof *mine) == 0, "%s: rank %d's sum differs from rank 0's",
                  dtype_name(dt), comm->rank);
    // And it is the sum: operands and partial sums stay below 4 in magnitude, where half an ulp is
    // sums16's half_ulp, and size - 1 combines round.
    double *want = calloc(n, sizeof *want);
    uint16_t rounded;
    for (int r = 0; r < comm->size; r++) {
        tu_fill_uniform(values, n, 1234 + (uint64_t)r, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i++) {
            put16(&rounded, dt, 0, values[i]);
            want[i] += (double)get16(&rounded, dt, 0);
        }
    }
    double bound = (comm->size - 1) * sums16[_i].half_ulp, worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)get16(mine, dt, i) - want[i]));
    ck_assert_msg(worst <= bound, "%s: worst error %g > %g", dtype_name(dt), worst, bound);
    free(want);
    free(values);
    free(mine);
    free(root);
}
END_TEST

START_TEST(max_flag_is_agreed) {
    float flag = comm->rank == comm->size - 1 ? 1.0f : 0.0f;
    comm->allreduce_max_flag(comm, &flag);
    ck_assert_float_eq(flag, 1.0f);
    flag = 0.0f;
    comm->allreduce_max_flag(comm, &flag);
    ck_assert_float_eq(flag, 0.0f);
}
END_TEST

static void check_broadcast_from(int root) {
    enum { BYTES = 1024 };
    unsigned char buf[BYTES];
    for (int i = 0; i < BYTES; i++) buf[i] = comm->rank == root ? (unsigned char)(i * 7 + root) : 0xEE;
    comm->broadcast(comm, buf, BYTES, root);
    for (int i = 0; i < BYTES; i++)
        ck_assert_msg(buf[i] == (unsigned char)(i * 7 + root), "byte %d from root %d: %d", i, root, buf[i]);
}

START_TEST(broadcast_from_first_and_last_rank) {
    check_broadcast_from(0);
    check_broadcast_from(comm->size - 1);
}
END_TEST

// The last rank arrives 600 ms late: nobody may leave the barrier before it arrives. The bound is half
// the delay: ranks leave the first barrier up to a scheduler's hiccup apart on a loaded host, and a
// barrier that did not wait would let them go at once.
START_TEST(barrier_waits_for_the_last_rank) {
    comm->barrier(comm);
    double start = clock_seconds();
    if (comm->rank == comm->size - 1) usleep(600 * 1000);
    comm->barrier(comm);
    double waited = clock_seconds() - start;
    ck_assert_msg(waited >= 0.3, "rank %d left the barrier after %.3f s", comm->rank, waited);
}
END_TEST

// With as many GPUs as ranks (or more) local rank r takes GPU r; a rank that sees exactly one takes it
// (srun --gpus-per-task=1); with none, or between 2 and local_size - 1, the host is refused.
START_TEST(local_gpu_check_refuses_more_ranks_than_gpus) {
    char why[512] = "";
    int device = -2;
    ck_assert_int_eq(comm_check_local_gpus(comm, comm->local_size, NULL, &device, why, sizeof why), 0);
    ck_assert_int_eq(device, comm->local_rank);
    ck_assert_int_eq(comm_check_local_gpus(comm, comm->local_size + 3, NULL, &device, why, sizeof why), 0);
    ck_assert_int_eq(device, comm->local_rank);
    ck_assert_int_eq(comm_check_local_gpus(comm, 1, NULL, &device, why, sizeof why), 0);
    ck_assert_int_eq(device, 0);

    int short_by = comm->local_size >= 3 ? comm->local_size - 1 : 0;
    ck_assert_int_ne(comm_check_local_gpus(comm, short_by, NULL, &device, why, sizeof why), 0);
    ck_assert_int_eq(device, -1);
    char want[128];
    snprintf(want, sizeof want, "%d ranks on host ", comm->local_size);
    ck_assert_msg(strstr(why, want) != NULL, "%s", why);
    snprintf(want, sizeof want, "but only %d visible GPUs (CUDA_VISIBLE_DEVICES", short_by);
    ck_assert_msg(strstr(why, want) != NULL, "%s", why);
}
END_TEST

// Only rank 0 is short of GPUs; every rank must refuse, the others pointing at rank 0's host.
START_TEST(local_gpu_check_is_agreed_on_every_rank) {
    if (comm->size < 2) return;
    char why[512] = "";
    int device = -2;
    int visible = comm->rank == 0 ? 0 : comm->local_size;
    ck_assert_int_ne(comm_check_local_gpus(comm, visible, NULL, &device, why, sizeof why), 0);
    if (comm->rank == 0)
        ck_assert_msg(strstr(why, "visible GPUs (CUDA_VISIBLE_DEVICES") != NULL, "%s", why);
    else
        ck_assert_msg(strstr(why, "another host runs more ranks than it has visible GPUs"), "%s", why);
}
END_TEST

// A stand-in for cuda_device_identity: visible device d of this host is the physical GPU d.
static int fake_identity(int device, unsigned char uuid[16], char *pci, size_t pci_len) {
    memset(uuid, 0, 16);
    uuid[0] = (unsigned char)device;
    snprintf(pci, pci_len, "0000:%02x:00.0", device);
    return 0;
}

// Every rank sees one GPU and it is the same one (all ranks run on this host): refused on every rank,
// naming two ranks and the device; one GPU each (local rank r on GPU r) passes.
START_TEST(local_gpu_check_refuses_ranks_sharing_a_gpu) {
    if (comm->size < 2) return;
    char why[512] = "";
    int device = -2;
    ck_assert_int_eq(comm_check_local_gpus(comm, comm->local_size, fake_identity, &device, why, sizeof why),
                     0);
    ck_assert_int_eq(device, comm->local_rank);
    ck_assert_int_ne(comm_check_local_gpus(comm, 1, fake_identity, &device, why, sizeof why), 0);
    ck_assert_msg(strstr(why, " on host ") && strstr(why, "both use the GPU at 0000:00:00.0"), "%s", why);
    char want[64];
    // each rank names itself and the lowest other rank on its GPU: rank 0 pairs with 1, the others with 0
    snprintf(want, sizeof want, "ranks 0 and %d", comm->rank == 0 ? 1 : comm->rank);
    ck_assert_msg(strstr(why, want) != NULL, "wanted '%s': %s", want, why);
}
END_TEST

// The host's ranks share the CPUs of their masks together: at least this rank's own, at most the host's.
START_TEST(local_cpus_hold_every_rank_mask) {
    ck_assert_int_ge(comm->local_cpus, cpus_usable());
    ck_assert_int_le(comm->local_cpus, (int)sysconf(_SC_NPROCESSORS_ONLN));
}
END_TEST

static Suite *comm_suite(void) {
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("mpi");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, mpi_path_taken_under_mpiexec);
    tcase_add_test(tc, fp32_sum_is_exact);
    tcase_add_loop_test(tc, sum16_is_exact_and_overflows_like_its_add, 0, 2);
    tcase_add_loop_test(tc, sum16_is_bitwise_identical_on_every_rank, 0, 2);
    tcase_add_test(tc, max_flag_is_agreed);
    tcase_add_test(tc, broadcast_from_first_and_last_rank);
    tcase_add_test(tc, barrier_waits_for_the_last_rank);
    tcase_add_test(tc, local_gpu_check_refuses_more_ranks_than_gpus);
    tcase_add_test(tc, local_gpu_check_is_agreed_on_every_rank);
    tcase_add_test(tc, local_gpu_check_refuses_ranks_sharing_a_gpu);
    tcase_add_test(tc, local_cpus_hold_every_rank_mask);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) {
    comm = comm_init(&argc, &argv, 120.0);
    int rc = tu_run_suite(comm_suite(), 0);
    comm->destroy(comm);
    comm_finalize();
    return rc;
}

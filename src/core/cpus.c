// cpus.c - the CPUs this process may use: the affinity mask and the cgroups' CFS quotas (see cpus.h).
// sched_getaffinity and the CPU_*_S macros are GNU extensions of <sched.h>.
#define _GNU_SOURCE
#include "core/cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cpus_affinity_bits(unsigned char bits[CPUS_MASK_BYTES]) {
    memset(bits, 0, CPUS_MASK_BYTES);
    cpu_set_t *set = CPU_ALLOC(CPUS_MASK_MAX);
    size_t bytes = CPU_ALLOC_SIZE(CPUS_MASK_MAX);
    if (set && sched_getaffinity(0, bytes, set) == 0) {
        for (int i = 0; i < CPUS_MASK_MAX; i++)
            if (CPU_ISSET_S(i, bytes, set)) bits[i / 8] |= (unsigned char)(1u << (i % 8));
    } else {
        // No mask to read: every online CPU.
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        for (long i = 0; i < online && i < CPUS_MASK_MAX; i++) bits[i / 8] |= (unsigned char)(1u << (i % 8));
    }
    if (set) CPU_FREE(set);
}

int cpus_count(const unsigned char bits[CPUS_MASK_BYTES], int quota_limit) {
    int n = 0;
    for (int i = 0; i < CPUS_MASK_BYTES; i++) n += __builtin_popcount(bits[i]);
    if (quota_limit > 0 && quota_limit < n) n = quota_limit;
    return n > 0 ? n : 1;
}

static int cpus_read_line(const char *dir, const char *name, char *line, size_t cap) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fgets(line, (int)cap, f) != NULL;
    fclose(f);
    return ok;
}

// ceil(quota / period) of one cgroup folder; 0 when it sets no quota (or its files cannot be read).
static int cpus_folder_limit(const char *dir) {
    char line[128], period_line[128];
    long long quota = 0, period = 0;
    if (cpus_read_line(dir, "cpu.max", line, sizeof line)) {
        if (sscanf(line, "%lld %lld", &quota, &period) != 2) return 0;  // "max 100000": no quota
    } else if (cpus_read_line(dir, "cpu.cfs_quota_us", line, sizeof line) &&
               cpus_read_line(dir, "cpu.cfs_period_us", period_line, sizeof period_line)) {
        quota = atoll(line), period = atoll(period_line);
    }
    if (quota <= 0 || period <= 0) return 0;
    long long n = (quota + period - 1) / period;
    return n > 1 << 20 ? 1 << 20 : (int)n;
}

// The smaller of two limits, 0 meaning none.
static int cpus_tighter(int a, int b) { return a > 0 && (b <= 0 || a < b) ? a : b; }

int cpus_cgroup_limit(const char *mount, const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s%s", mount, path[0] == '/' ? path : "/");
    size_t root = strlen(mount);
    int limit = 0;
    for (;;) {
        size_t len = strlen(dir);
        while (len > root && dir[len - 1] == '/') dir[--len] = '\0';
        limit = cpus_tighter(limit, cpus_folder_limit(dir));
        char *slash = strrchr(dir, '/');
        if (len <= root || !slash || (size_t)(slash - dir) < root) break;
        *slash = '\0';
    }
    return limit;
}

// Every cgroup hierarchy that holds the cpu controller: v2's (the entry "0::PATH", mounted at /sys/fs/cgroup,
// or at /sys/fs/cgroup/unified beside v1) and v1's ("N:cpu,cpuacct:PATH" at /sys/fs/cgroup/cpu,cpuacct or cpu).
int cpus_quota_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[4096];
    int limit = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *controllers = strchr(line, ':');
        char *path = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!path) continue;
        *path++ = '\0';
        controllers++;
        const char *mounts[2] = {NULL, NULL};
        if (controllers[0] == '\0') {
            mounts[0] = "/sys/fs/cgroup", mounts[1] = "/sys/fs/cgroup/unified";
        } else {
            int has_cpu = 0;
            char *save = NULL;
            for (char *tok = strtok_r(controllers, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                has_cpu |= !strcmp(tok, "cpu");
            if (!has_cpu) continue;
            mounts[0] = "/sys/fs/cgroup/cpu", mounts[1] = "/sys/fs/cgroup/cpu,cpuacct";
        }
        for (int i = 0; i < 2; i++) limit = cpus_tighter(limit, cpus_cgroup_limit(mounts[i], path));
    }
    fclose(f);
    return limit;
}

int cpus_usable(void) {
    unsigned char bits[CPUS_MASK_BYTES];
    cpus_affinity_bits(bits);
    return cpus_count(bits, cpus_quota_limit());
}

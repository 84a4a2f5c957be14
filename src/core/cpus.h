// cpus.h - how many CPUs this process, and the ranks of its host together, may run on: what the thread
// counts chosen at run time are sized from.
//
// The host's online count (sysconf(_SC_NPROCESSORS_ONLN)) overstates it wherever a launcher or a container
// restricts the process. Slurm's task/affinity plugin (srun --cpus-per-task), taskset and numactl narrow the
// affinity mask; docker --cpus and Kubernetes CPU limits leave the mask whole but give the process's cgroup a
// CFS quota (cgroup v2: cpu.max "QUOTA PERIOD"; v1: cpu.cfs_quota_us and cpu.cfs_period_us), which throttles
// the threads beyond QUOTA / PERIOD CPUs' worth of time. Threads sized from the online count then contend
// for a few CPUs and each batch waits on the slowest.
#ifndef AMPTRAIN_CPUS_H
#define AMPTRAIN_CPUS_H

// Bits of a CPU mask: the kernel's largest CPU count (4096 on x86-64 builds with MAXSMP).
#define CPUS_MASK_MAX 4096
#define CPUS_MASK_BYTES (CPUS_MASK_MAX / 8)

// This thread's affinity mask, bit i of bits[i / 8] set when CPU i is in it; the ranks of a host OR theirs
// together for the CPUs they share (dist/comm.h: Comm.local_cpus).
void cpus_affinity_bits(unsigned char bits[CPUS_MASK_BYTES]);

// The CPUs set in bits, at most quota_limit when that is positive; at least 1.
int cpus_count(const unsigned char bits[CPUS_MASK_BYTES], int quota_limit);

// The CPU limit this process's cgroups set by CFS quota (rounded up; cpus_cgroup_limit over every hierarchy
// with the cpu controller that /proc/self/cgroup lists); 0 when none does.
int cpus_quota_limit(void);

// cpus_count(this thread's mask, cpus_quota_limit()).
int cpus_usable(void);

// The CPU limit the CFS quotas of a cgroup and its ancestors set: the smallest ceil(QUOTA / PERIOD) over the
// folders mount/path, its parents, up to mount itself (path as /proc/self/cgroup names it, "/a/b"); a folder
// without a quota file, with "max" (v2) or -1 (v1) sets none. 0 when none sets one.
int cpus_cgroup_limit(const char *mount, const char *path);

#endif

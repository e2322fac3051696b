/* node_cpus.c — how many CPUs this process may use (node_base.h,
 * node_usable_cpus): what a node gossips as its cores, what its stages and
 * profiles compute with when no --threads is given.
 *
 * sysconf(_SC_NPROCESSORS_ONLN) counts the machine's CPUs, not this
 * process's: under `taskset -c 0-3`, in a container's cpuset, or in a
 * container given `--cpus 2` (a CFS quota) on a 64-core host, a node that
 * believed it had 64 cores would plan with them and start 64 threads. Here:
 * the affinity mask's CPUs, fewer where a cgroup's CPU quota on the way up
 * from this process's cgroup allows fewer (rounded up). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "node_base.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int node_cpu_quota_cpus(long long quota, long long period)
{
    if (quota <= 0 || period <= 0) return 0;
    long long n = (quota + period - 1) / period;
    return n > 1 << 20 ? 1 << 20 : (int)n;
}

int node_cpu_max_parse(const char *text)
{
    char q[32];
    long long period;
    char tail;
    if (!text || sscanf(text, "%31s %lld %c", q, &period, &tail) != 2 || period <= 0) return -1;
    if (strcmp(q, "max") == 0) return 0;
    char *end;
    long long quota = strtoll(q, &end, 10);
    if (*end || quota <= 0) return -1;
    return node_cpu_quota_cpus(quota, period);
}

/* The first line of a small file, or "" when it cannot be read. */
static void first_line(const char *path, char *out, size_t n)
{
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(out, (int)n, f)) out[0] = 0;
    fclose(f);
}

/* The smallest quota (in CPUs, 0 for none) of the cgroup at rel under root
 * and of every cgroup above it. v2 reads cpu.max, v1 cpu.cfs_quota_us and
 * cpu.cfs_period_us. */
static int quota_up(const char *root, const char *rel, int v2)
{
    char dir[NODE_PATH_MAX], path[NODE_PATH_MAX + 32], line[128];
    if ((size_t)snprintf(dir, sizeof dir, "%s%s", root, rel) >= sizeof dir) return 0;
    size_t rootlen = strlen(root);
    int best = 0;
    for (;;) {
        int n = 0;
        if (v2) {
            snprintf(path, sizeof path, "%s/cpu.max", dir);
            first_line(path, line, sizeof line);
            n = node_cpu_max_parse(line);
        } else {
            snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
            first_line(path, line, sizeof line);
            long long quota = atoll(line);
            snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
            first_line(path, line, sizeof line);
            n = node_cpu_quota_cpus(quota, atoll(line));
        }
        if (n > 0 && (best == 0 || n < best)) best = n;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < rootlen) break;
        *slash = 0; /* up one level, down to the root itself */
    }
    return best;
}

int node_usable_cpus(void)
{
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) {
        long s = sysconf(_SC_NPROCESSORS_ONLN);
        n = s > 0 ? (int)s : 1;
    }
    /* /proc/self/cgroup: "0::PATH" (v2) and "ID:CONTROLLERS:PATH" (v1) */
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return n;
    char line[NODE_PATH_MAX];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        const char *rel = strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1;
        int q = 0;
        *c2 = 0;
        const char *ctl = c1 + 1;
        if (strcmp(line, "0") == 0 && !*ctl) {
            q = quota_up("/sys/fs/cgroup", rel, 1);
        } else {
            /* v1: the "cpu" controller, alone or mounted with others */
            char list[256];
            snprintf(list, sizeof list, ",%s,", ctl);
            if (strstr(list, ",cpu,")) {
                char root[300];
                snprintf(root, sizeof root, "/sys/fs/cgroup/%s", ctl);
                q = quota_up(root, rel, 0);
                /* "cpu,cpuacct" may be mounted as .../cpu only */
                if (!q && strcmp(ctl, "cpu") != 0) q = quota_up("/sys/fs/cgroup/cpu", rel, 0);
            }
        }
        if (q > 0 && q < n) n = q;
    }
    fclose(f);
    return n;
}

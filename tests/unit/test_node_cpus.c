/* test_node_cpus.c — node_usable_cpus (node/base/node_cpus.c): a node counts
 * the CPUs this process may use, not the machine's. Its affinity mask
 * narrowed to one CPU (as `taskset -c N` does), it says 1; the CPU quota
 * lines of cgroup v1 and v2 read as the CPUs they allow, rounded up, and
 * anything else is refused; and where the test may make a cgroup (root), a
 * child in one with half a CPU's quota counts 1. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_* */
#include "check.h"
#include "node_base.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* A cgroup with a quota of half a CPU (v2 cpu.max "50000 100000", v1
 * cpu.cfs_quota_us 50000): a child moved into it counts 1 usable CPU.
 * Where no cgroup can be made here (not root, no cpu controller, a
 * read-only hierarchy) it says so and checks nothing. */
static void quota_cgroup(void)
{
    char dir[256], path[300];
    const char *how = NULL;
    int v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
    if (v2)
        snprintf(dir, sizeof dir, "/sys/fs/cgroup/shardnode-test-%d", (int)getpid());
    else
        snprintf(dir, sizeof dir, "/sys/fs/cgroup/cpu/shardnode-test-%d", (int)getpid());
    if (mkdir(dir, 0755) != 0) {
        printf("quota: skipped, cannot make %s: %s\n", dir, strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "cpu.max" : "cpu.cfs_quota_us");
    if (write_file(path, v2 ? "50000 100000" : "50000") != 0) {
        printf("quota: skipped, cannot write %s (no cpu controller there)\n", path);
        rmdir(dir);
        return;
    }
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    pid_t pid = fork();
    if (pid == 0) {
        char me[32];
        snprintf(me, sizeof me, "%d", (int)getpid());
        _exit(write_file(path, me) == 0 ? node_usable_cpus() : 200);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st), "the quota child failed");
    int got = WEXITSTATUS(st);
    if (got == 200) {
        how = "skipped, cannot move a process into it";
    } else {
        CHECK(got == 1, "in a cgroup with half a CPU's quota (%s), usable CPUs %d, want 1", dir,
              got);
        how = got == 1 ? "1 usable CPU" : "wrong";
    }
    printf("quota: cgroup %s %s: %s\n", v2 ? "v2" : "v1", dir, how);
    /* an exited member may hold a cgroup busy a moment after it was reaped */
    int gone = 0;
    for (int i = 0; i < 100 && !(gone = rmdir(dir) == 0); i++) usleep(20000);
    CHECK(gone, "cannot remove %s: %s", dir, strerror(errno));
}

int main(void)
{
    /* cgroup v2's cpu.max */
    static const struct {
        const char *text;
        int want;
    } lines[] = {
        {"max 100000\n", 0},     {"max 100000", 0},       {"200000 100000\n", 2},
        {"150000 100000", 2},    {"50000 100000", 1},     {"100000 100000", 1},
        {"1600000 100000", 16},  {"", -1},                {"\n", -1},
        {"max", -1},             {"100000", -1},          {"abc 100000", -1},
        {"100000 0", -1},        {"100000 -5", -1},       {"-1 100000", -1},
        {"0 100000", -1},        {"12x 100000", -1},      {"100000 100000 7", -1},
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        int got = node_cpu_max_parse(lines[i].text);
        CHECK(got == lines[i].want, "cpu.max line %zu (\"%.*s\") gives %d, want %d", i,
              (int)strcspn(lines[i].text, "\n"), lines[i].text, got, lines[i].want);
    }
    CHECK(node_cpu_max_parse(NULL) == -1, "a NULL cpu.max line is not refused");
    /* cgroup v1's cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us */
    CHECK(node_cpu_quota_cpus(-1, 100000) == 0, "v1 quota -1 is a limit");
    CHECK(node_cpu_quota_cpus(250000, 100000) == 3, "v1 2.5 CPUs is not 3");
    CHECK(node_cpu_quota_cpus(100000, 0) == 0, "a zero period is a limit");

    /* the process's own: at least one, at most its affinity mask's CPUs */
    cpu_set_t all;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity failed");
    int mask = CPU_COUNT(&all), n = node_usable_cpus();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    printf("affinity %d CPUs, online %ld, usable %d\n", mask, online, n);
    CHECK(n >= 1 && n <= mask, "usable CPUs %d outside 1..%d (the affinity mask)", n, mask);
    /* narrowed to one CPU, as `taskset -c N shardnode up` runs it */
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &all)) first = c;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "sched_setaffinity to CPU %d failed",
          first);
    CHECK(node_usable_cpus() == 1, "pinned to CPU %d, usable CPUs are %d, want 1", first,
          node_usable_cpus());
    CHECK(sched_setaffinity(0, sizeof all, &all) == 0, "restoring the affinity failed");
    CHECK(node_usable_cpus() == n, "the affinity restored, usable CPUs %d, were %d",
          node_usable_cpus(), n);
    quota_cgroup();
    return failures != 0;
}

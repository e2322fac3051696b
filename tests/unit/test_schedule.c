/* test_schedule.c — the pipeline schedules: every micro-batch forwarded and
 * backwarded once, in order, with 1F1B's in-flight bound, and a global
 * order across stages that never deadlocks. */
#include "scheduler.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

/* Runs all stages as a little simulation with unbounded message queues: an
 * op can run when its input exists (forward: the previous stage forwarded
 * that micro-batch; backward: the next stage backwarded it, or this is the
 * last stage and it forwarded it). Returns 1 if every op completes. */
static int runs_to_completion(sched_policy policy, int p, int m)
{
    sched_op ops[8][64];
    int n[8], next[8] = {0};
    int fwd_done[8][32] = {{0}}, bwd_done[8][32] = {{0}};
    for (int s = 0; s < p; s++) n[s] = sched_build(policy, p, s, m, ops[s]);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++) {
            if (next[s] == n[s]) continue;
            sched_op op = ops[s][next[s]];
            int ready = op.kind == SCHED_FORWARD
                            ? (s == 0 || fwd_done[s - 1][op.micro])
                            : (fwd_done[s][op.micro] &&
                               (s == p - 1 || bwd_done[s + 1][op.micro]));
            if (!ready) continue;
            (op.kind == SCHED_FORWARD ? fwd_done : bwd_done)[s][op.micro] = 1;
            next[s]++;
            progress = 1;
        }
    }
    for (int s = 0; s < p; s++)
        if (next[s] != n[s]) return 0;
    return 1;
}

int main(void)
{
    sched_op ops[64];
    for (int policy = 0; policy < 2; policy++)
        for (int p = 1; p <= 6; p++)
            for (int m = 1; m <= 12; m++)
                for (int s = 0; s < p; s++) {
                    int n = sched_build((sched_policy)policy, p, s, m, ops);
                    CHECK(n == 2 * m, "p %d s %d m %d: %d ops", p, s, m, n);
                    int nf = 0, nb = 0, ok = 1;
                    for (int i = 0; i < n; i++) {
                        if (ops[i].kind == SCHED_FORWARD) ok &= ops[i].micro == nf++;
                        else ok &= ops[i].micro == nb++ && ops[i].micro < nf;
                    }
                    CHECK(ok && nf == m && nb == m, "order broken p %d s %d m %d", p, s, m);
                    int want = policy == SCHED_GPIPE ? m : (p - s < m ? p - s : m);
                    CHECK(sched_max_in_flight(ops, n) == want,
                          "%s p %d s %d m %d: %d in flight, want %d",
                          policy ? "gpipe" : "1f1b", p, s, m, sched_max_in_flight(ops, n), want);
                    CHECK(runs_to_completion((sched_policy)policy, p, m),
                          "%s p %d m %d deadlocks", policy ? "gpipe" : "1f1b", p, m);
                }
    /* 1F1B of 4 stages, 8 micro-batches, stage 1: two to fill, then F, B in turn */
    int n = sched_build(SCHED_1F1B, 4, 1, 8, ops);
    char buf[128] = "";
    for (int i = 0; i < 6 && i < n; i++) {
        char op[8];
        snprintf(op, sizeof op, "%c%d ", ops[i].kind == SCHED_FORWARD ? 'F' : 'B', ops[i].micro);
        strcat(buf, op);
    }
    CHECK(strcmp(buf, "F0 F1 F2 B0 F3 B1 ") == 0, "1f1b stage 1 of 4 starts %s", buf);
    CHECK(sched_build(SCHED_1F1B, 2, 2, 4, ops) == -1, "stage outside the pipe accepted");
    printf("%s\n", failures ? "FAILED" : "all schedule checks passed");
    return failures ? 1 : 0;
}

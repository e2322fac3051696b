/* schedule.c — 1F1B and GPipe as data: the op order of one stage. */
#include "scheduler.h"

int sched_build(sched_policy policy, int p, int s, int m, sched_op *ops)
{
    if (p < 1 || s < 0 || s >= p || m < 1) return -1;
    int n = 0, f = 0, b = 0;
    int warm = policy == SCHED_GPIPE ? m : (p - s - 1 < m ? p - s - 1 : m);
    for (; f < warm; f++) ops[n++] = (sched_op){SCHED_FORWARD, f};
    /* steady state: one forward, then the oldest backward */
    while (f < m) {
        ops[n++] = (sched_op){SCHED_FORWARD, f++};
        ops[n++] = (sched_op){SCHED_BACKWARD, b++};
    }
    while (b < m) ops[n++] = (sched_op){SCHED_BACKWARD, b++};
    return n;
}

int sched_max_in_flight(const sched_op *ops, int n)
{
    int cur = 0, best = 0;
    for (int i = 0; i < n; i++) {
        cur += ops[i].kind == SCHED_FORWARD ? 1 : -1;
        if (cur > best) best = cur;
    }
    return best;
}

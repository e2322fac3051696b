/* simulate.c — a discrete-event replay of a plan's 1F1B step, micro-batch
 * by micro-batch, to check the cost model's closed form (m - 1) max t + sum t
 * against the real dependency structure of the schedule.
 *
 * Every stage runs its ops in sched_build's order; an op starts when its
 * stage is free and its input has arrived: a forward needs the previous
 * stage's activations, a backward the next stage's gradient. Both transfers
 * over the link between s and s + 1 occupy stage s (a blocking send of the
 * activations, a blocking receive of the gradient), exactly the per-stage
 * times t_s the cost model uses; only the formula is not shared. */
#include "scheduler.h"
#include "sched_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int sim_run(sim_result *out, const plan *p, char *err, size_t errlen)
{
    int n = p->nstages;
    int64_t m = p->micro_batches;
    if (n < 1 || n > PLAN_MAX_STAGES || m < 1 || m > (1 << 24) || (int64_t)n * m > (1 << 26))
        return sched_errf(err, errlen, "simulator: %d stages x %lld micro-batches is out of range",
                    n, (long long)m);
    size_t nm = (size_t)n * (size_t)m;
    sched_op *ops = malloc(2 * nm * sizeof *ops);
    int64_t *fwd_end = malloc(nm * sizeof *fwd_end), *bwd_end = malloc(nm * sizeof *bwd_end);
    int *cursor = calloc((size_t)n, sizeof *cursor);
    int64_t *free_at = calloc((size_t)n, sizeof *free_at);
    int rc = -1;
    if (!ops || !fwd_end || !bwd_end || !cursor || !free_at) {
        sched_errf(err, errlen, "simulator: out of memory for %zu ops", 2 * nm);
        goto out;
    }
    for (int s = 0; s < n; s++)
        if (sched_build(SCHED_1F1B, n, s, (int)m, ops + (size_t)s * 2 * m) != 2 * m) {
            sched_errf(err, errlen, "simulator: no 1F1B schedule for stage %d of %d", s, n);
            goto out;
        }
    for (size_t i = 0; i < nm; i++) fwd_end[i] = bwd_end[i] = -1;
    /* Events are the ends of ops; a stage's next op is scheduled as soon as
     * its input exists. Sweeping the stages until none can move is the
     * event loop: the order ops are resolved in never changes their times,
     * which depend only on their own inputs. */
    int64_t done = 0, total = 2 * (int64_t)nm, last_end = 0;
    while (done < total) {
        bool moved = false;
        for (int s = 0; s < n; s++) {
            const plan_stage *st = &p->stage[s];
            while (cursor[s] < 2 * m) {
                sched_op op = ops[(size_t)s * 2 * m + cursor[s]];
                size_t at = (size_t)s * m + (size_t)op.micro;
                int64_t ready, dur;
                if (op.kind == SCHED_FORWARD) {
                    ready = s == 0 ? 0 : fwd_end[at - m];
                    dur = st->fwd_ns + st->send_ns;
                } else {
                    ready = s == n - 1 ? fwd_end[at] : bwd_end[at + m];
                    dur = st->recv_ns + st->bwd_ns;
                }
                if (ready < 0) break;
                int64_t start = ready > free_at[s] ? ready : free_at[s];
                int64_t end = start + dur;
                (op.kind == SCHED_FORWARD ? fwd_end : bwd_end)[at] = end;
                free_at[s] = end;
                if (end > last_end) last_end = end;
                cursor[s]++;
                done++;
                moved = true;
            }
        }
        if (!moved) {
            sched_errf(err, errlen, "simulator: the schedule deadlocks after %lld of %lld ops",
                 (long long)done, (long long)total);
            goto out;
        }
    }
    /* the optimizer waits for the global gradient norm, hence for every
     * stage's last backward */
    int64_t opt = 0, busy = 0;
    for (int s = 0; s < n; s++) {
        if (p->stage[s].opt_ns > opt) opt = p->stage[s].opt_ns;
        busy += m * p->stage[s].time_ns;
    }
    out->pipeline_ns = last_end;
    out->step_ns = last_end + opt;
    out->events = total;
    out->bubble_ppm = last_end > 0 ? cost_muldiv((int64_t)n * last_end - busy, 1000000,
                                                 (int64_t)n * last_end)
                                   : 0;
    rc = 0;
out:
    free(ops);
    free(fwd_end);
    free(bwd_end);
    free(cursor);
    free(free_at);
    return rc;
}

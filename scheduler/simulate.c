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
#include <string.h>

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

/* ---- stages that share a machine's cores ----
 *
 * The same replay, but an op's duration is work done at a rate: a stage
 * alone on its machine (or with threads to spare) runs at its profiled
 * speed; when the threads of the ops running at one instant on one machine
 * exceed its cores, the kernel shares the cores evenly among the threads, so
 * every op there runs at cores / threads of its speed (processor sharing).
 * A stage that waits for its input computes nothing and takes no core: that
 * holds when OpenMP's idle threads sleep (node/ runs pool stages with
 * OMP_WAIT_POLICY=PASSIVE; spinning threads would make every waiting stage
 * a full consumer). The optimizer runs on every stage at once after the last
 * backward, shared the same way. Times are kept as doubles inside: the
 * sharing rates are fractions. */

typedef struct {
    int cursor;           /* next op of the stage */
    bool active;          /* an op is running */
    double left;          /* its work left, in ns at full speed */
} shared_stage;

static double host_rate(const shared_stage *st, const sim_placement *place, int n, int host,
                        int cores)
{
    int64_t want = 0;
    for (int s = 0; s < n; s++)
        if (st[s].active && place[s].host == host) want += place[s].threads;
    return want > cores ? (double)cores / (double)want : 1.0;
}

/* Runs every stage's active op at its host's rate until the first ends or
 * until `horizon` (when > now); returns the time reached. */
static double advance(shared_stage *st, const sim_placement *place, const int *host_cores,
                      int n, double now, double horizon)
{
    double rate[PLAN_MAX_STAGES], dt = -1;
    for (int s = 0; s < n; s++) {
        if (!st[s].active) continue;
        rate[s] = host_rate(st, place, n, place[s].host, host_cores[place[s].host]);
        double t = st[s].left / rate[s];
        if (dt < 0 || t < dt) dt = t;
    }
    if (horizon > now && (dt < 0 || horizon - now < dt)) dt = horizon - now;
    if (dt < 0) return now;
    for (int s = 0; s < n; s++)
        if (st[s].active) {
            st[s].left -= dt * rate[s];
            if (st[s].left < 1e-6) st[s].left = 0;
        }
    return now + dt;
}

int sim_run_shared(sim_result *out, const plan *p, const sim_placement *place,
                   const int *host_cores, int nhosts, char *err, size_t errlen)
{
    int n = p->nstages;
    int64_t m = p->micro_batches;
    if (n < 1 || n > PLAN_MAX_STAGES || m < 1 || m > (1 << 20) || (int64_t)n * m > (1 << 22))
        return sched_errf(err, errlen, "simulator: %d stages x %lld micro-batches is out of range",
                          n, (long long)m);
    if (nhosts < 1 || nhosts > PLAN_MAX_STAGES)
        return sched_errf(err, errlen, "simulator: %d machines is out of range (1 to %d)",
                          nhosts, PLAN_MAX_STAGES);
    for (int h = 0; h < nhosts; h++)
        if (host_cores[h] < 1 || host_cores[h] > 4096)
            return sched_errf(err, errlen, "simulator: machine %d has %d cores (1 to 4096)", h,
                              host_cores[h]);
    for (int s = 0; s < n; s++)
        if (place[s].host < 0 || place[s].host >= nhosts || place[s].threads < 1 ||
            place[s].threads > 4096)
            return sched_errf(err, errlen,
                              "simulator: stage %d is on machine %d with %d threads (machines 0 "
                              "to %d, 1 to 4096 threads)", s, place[s].host, place[s].threads,
                              nhosts - 1);
    size_t nm = (size_t)n * (size_t)m;
    sched_op *ops = malloc(2 * nm * sizeof *ops);
    double *fwd_end = malloc(nm * sizeof *fwd_end), *bwd_end = malloc(nm * sizeof *bwd_end);
    shared_stage st[PLAN_MAX_STAGES];
    int rc = -1;
    memset(st, 0, sizeof st);
    if (!ops || !fwd_end || !bwd_end) {
        sched_errf(err, errlen, "simulator: out of memory for %zu ops", 2 * nm);
        goto out;
    }
    for (int s = 0; s < n; s++)
        if (sched_build(SCHED_1F1B, n, s, (int)m, ops + (size_t)s * 2 * m) != 2 * m) {
            sched_errf(err, errlen, "simulator: no 1F1B schedule for stage %d of %d", s, n);
            goto out;
        }
    for (size_t i = 0; i < nm; i++) fwd_end[i] = bwd_end[i] = -1;
    double now = 0, busy = 0;
    int64_t done = 0, total = 2 * (int64_t)nm;
    while (done < total) {
        /* start what can start now; note the earliest input still in flight */
        double next_ready = -1;
        for (int s = 0; s < n; s++) {
            if (st[s].active || st[s].cursor >= 2 * m) continue;
            sched_op op = ops[(size_t)s * 2 * m + st[s].cursor];
            size_t at = (size_t)s * m + (size_t)op.micro;
            double ready = op.kind == SCHED_FORWARD ? (s == 0 ? 0 : fwd_end[at - m])
                                                    : (s == n - 1 ? fwd_end[at] : bwd_end[at + m]);
            if (ready < 0) continue;
            if (ready > now) {
                if (next_ready < 0 || ready < next_ready) next_ready = ready;
                continue;
            }
            const plan_stage *ps = &p->stage[s];
            st[s].active = true;
            st[s].left = (double)(op.kind == SCHED_FORWARD ? ps->fwd_ns + ps->send_ns
                                                            : ps->recv_ns + ps->bwd_ns);
        }
        bool any = false;
        for (int s = 0; s < n; s++) any |= st[s].active;
        if (!any) {
            if (next_ready < 0) {
                sched_errf(err, errlen, "simulator: the schedule deadlocks after %lld of %lld ops",
                           (long long)done, (long long)total);
                goto out;
            }
            now = next_ready;
            continue;
        }
        now = advance(st, place, host_cores, n, now, next_ready);
        for (int s = 0; s < n; s++) {
            if (!st[s].active || st[s].left > 0) continue;
            sched_op op = ops[(size_t)s * 2 * m + st[s].cursor];
            size_t at = (size_t)s * m + (size_t)op.micro;
            (op.kind == SCHED_FORWARD ? fwd_end : bwd_end)[at] = now;
            st[s].active = false;
            st[s].cursor++;
            done++;
        }
    }
    double pipeline = now;
    /* the optimizer: every stage at once, sharing the cores */
    for (int s = 0; s < n; s++) {
        st[s].active = p->stage[s].opt_ns > 0;
        st[s].left = (double)p->stage[s].opt_ns;
        busy += (double)m * (double)p->stage[s].time_ns;
    }
    for (;;) {
        bool any = false;
        for (int s = 0; s < n; s++) any |= st[s].active;
        if (!any) break;
        now = advance(st, place, host_cores, n, now, -1);
        for (int s = 0; s < n; s++)
            if (st[s].active && st[s].left <= 0) st[s].active = false;
    }
    out->pipeline_ns = (int64_t)(pipeline + 0.5);
    out->step_ns = (int64_t)(now + 0.5);
    out->events = total;
    out->bubble_ppm = pipeline > 0 ? (int64_t)(1e6 * ((double)n * pipeline - busy) /
                                               ((double)n * pipeline))
                                   : 0;
    if (out->bubble_ppm < 0) out->bubble_ppm = 0;
    rc = 0;
out:
    free(ops);
    free(fwd_end);
    free(bwd_end);
    return rc;
}

/* test_simulate.c — the 1F1B replay: equal stages give the textbook
 * (m + p - 1) t, one micro-batch the sum of the stages, and any plan lies
 * between the bottleneck's m t and a serial run; the cost model's closed
 * form stays close to it on balanced plans. */
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static int64_t range(int64_t lo, int64_t hi)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

static void set_stage(plan *p, int s, int64_t f, int64_t b, int64_t send, int64_t recv)
{
    plan_stage *st = &p->stage[s];
    st->fwd_ns = f;
    st->bwd_ns = b;
    st->send_ns = s < p->nstages - 1 ? send : 0;
    st->recv_ns = s < p->nstages - 1 ? recv : 0;
    st->time_ns = st->fwd_ns + st->bwd_ns + st->send_ns + st->recv_ns;
    st->opt_ns = 0;
}

static int64_t closed_form(const plan *p)
{
    int64_t max = 0, sum = 0;
    for (int s = 0; s < p->nstages; s++) {
        sum += p->stage[s].time_ns;
        if (p->stage[s].time_ns > max) max = p->stage[s].time_ns;
    }
    return (p->micro_batches - 1) * max + sum;
}

int main(void)
{
    plan *p = calloc(1, sizeof *p);
    sim_result r;
    char err[256];
    /* equal stages: (m + p - 1)(f + b), the 1F1B textbook figure */
    for (int n = 1; n <= 8; n++)
        for (int m = 1; m <= 20; m++) {
            p->nstages = n;
            p->micro_batches = m;
            for (int s = 0; s < n; s++) set_stage(p, s, 100, 200, 0, 0);
            CHECK(sim_run(&r, p, err, sizeof err) == 0, "%s", err);
            CHECK(r.pipeline_ns == (int64_t)(m + n - 1) * 300, "p %d m %d: %lld", n, m,
                  (long long)r.pipeline_ns);
            CHECK(r.pipeline_ns == closed_form(p), "p %d m %d: closed form", n, m);
            CHECK(r.events == 2 * n * m, "events");
        }
    /* any plan: one micro-batch is the sum; more lie between the bottleneck
     * stage's m t and a serial run; the optimizer is added on top */
    double worst = 0;
    for (int t = 0; t < 2000; t++) {
        int n = (int)range(1, 12);
        p->nstages = n;
        p->micro_batches = range(1, 40);
        for (int s = 0; s < n; s++) {
            int64_t f = range(100, 5000);
            set_stage(p, s, f, f * range(10, 30) / 10, range(0, 3000), range(0, 3000));
            p->stage[s].opt_ns = range(0, 500);
        }
        CHECK(sim_run(&r, p, err, sizeof err) == 0, "%s", err);
        int64_t max = 0, sum = 0, opt = 0;
        for (int s = 0; s < n; s++) {
            sum += p->stage[s].time_ns;
            if (p->stage[s].time_ns > max) max = p->stage[s].time_ns;
            if (p->stage[s].opt_ns > opt) opt = p->stage[s].opt_ns;
        }
        int64_t m = p->micro_batches;
        if (m == 1) CHECK(r.pipeline_ns == sum, "one micro-batch: %lld vs %lld",
                          (long long)r.pipeline_ns, (long long)sum);
        CHECK(r.pipeline_ns >= m * max && r.pipeline_ns >= sum && r.pipeline_ns <= m * sum,
              "plan %d: %lld outside [%lld, %lld]", t, (long long)r.pipeline_ns,
              (long long)(m * max), (long long)(m * sum));
        CHECK(r.step_ns == r.pipeline_ns + opt, "optimizer after the last backward");
        /* balanced within 10% and m >= 4p: the closed form is close */
        if (m >= 4 * n && max * 10 <= (sum / n) * 11) {
            double d = (double)(closed_form(p) - r.pipeline_ns) / (double)r.pipeline_ns;
            if (d < 0) d = -d;
            if (d > worst) worst = d;
        }
    }
    CHECK(worst < 0.02, "balanced plans: closed form off by %.2f%%", 100 * worst);
    printf("balanced plans, m >= 4p: closed form within %.3f%% of the replay\n", 100 * worst);
    p->micro_batches = 0;
    CHECK(sim_run(&r, p, err, sizeof err) != 0 && strstr(err, "out of range"), "no micro-batches");
    free(p);
    if (failures) printf("%d failures\n", failures);
    return failures ? 1 : 0;
}

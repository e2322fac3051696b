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

    /* Stages sharing machines. Alone (or with cores to spare) the replay is
     * sim_run's, to rounding. */
    sim_placement place[PLAN_MAX_STAGES];
    int cores[PLAN_MAX_STAGES];
    for (int t = 0; t < 300; t++) {
        int n = (int)range(1, 10);
        p->nstages = n;
        p->micro_batches = range(1, 24);
        for (int s = 0; s < n; s++) {
            int64_t f = range(100, 5000);
            set_stage(p, s, f, f * range(10, 30) / 10, range(0, 3000), range(0, 3000));
            p->stage[s].opt_ns = range(0, 500);
            place[s] = (sim_placement){.host = t % 2 ? s : 0, .threads = (int)range(1, 4)};
            cores[s] = t % 2 ? place[s].threads : 4 * n;
        }
        sim_result a, b;
        CHECK(sim_run(&a, p, err, sizeof err) == 0, "%s", err);
        CHECK(sim_run_shared(&b, p, place, cores, n, err, sizeof err) == 0, "%s", err);
        CHECK(llabs(a.step_ns - b.step_ns) <= 2 * n * p->micro_batches &&
              llabs(a.pipeline_ns - b.pipeline_ns) <= 2 * n * p->micro_batches,
              "plan %d with cores to spare: shared %lld, alone %lld", t, (long long)b.step_ns,
              (long long)a.step_ns);
    }
    /* Two equal 2-thread stages on one 2-core machine: in 1F1B both compute
     * at once for most of the step, each at half speed. One micro-batch
     * never overlaps: the sum, as alone. */
    p->nstages = 2;
    for (int s = 0; s < 2; s++) {
        set_stage(p, s, 1000, 2000, 0, 0);
        p->stage[s].opt_ns = 400;
        place[s] = (sim_placement){.host = 0, .threads = 2};
    }
    cores[0] = 2;
    p->micro_batches = 1;
    CHECK(sim_run_shared(&r, p, place, cores, 1, err, sizeof err) == 0, "%s", err);
    CHECK(r.pipeline_ns == 6000 && r.step_ns == 6800,
          "one micro-batch on a shared machine: pipeline %lld, step %lld (want 6000, 6800: the "
          "optimizers overlap at half speed)", (long long)r.pipeline_ns, (long long)r.step_ns);
    p->micro_batches = 16;
    sim_result alone;
    CHECK(sim_run(&alone, p, err, sizeof err) == 0, "%s", err);
    CHECK(sim_run_shared(&r, p, place, cores, 1, err, sizeof err) == 0, "%s", err);
    /* the machine's work is 2 stages x 16 x 3000 ns of 2 threads on 2 cores:
     * 96000 ns at the very least, whatever the schedule */
    CHECK(r.pipeline_ns >= 96000 && r.pipeline_ns <= 96000 + 2 * 3000 * 2,
          "16 micro-batches, two stages on one machine: %lld ns (alone %lld; the machine's "
          "work alone takes 96000)", (long long)r.pipeline_ns, (long long)alone.pipeline_ns);
    int64_t shared22 = r.pipeline_ns;
    /* a 1-thread stage beside a 2-thread one on 2 cores: 3 threads, 2/3 speed while both run */
    place[1].threads = 1;
    CHECK(sim_run_shared(&r, p, place, cores, 1, err, sizeof err) == 0, "%s", err);
    CHECK(r.pipeline_ns > alone.pipeline_ns && r.pipeline_ns < 96000,
          "2 + 1 threads on 2 cores: %lld ns, between alone %lld and fully serial 96000",
          (long long)r.pipeline_ns, (long long)alone.pipeline_ns);
    printf("two stages of 3000 ns x 16 micro-batches on 2 cores: alone %lld ns, 2+2 threads "
           "shared %lld ns, 2+1 threads %lld ns\n", (long long)alone.pipeline_ns,
           (long long)shared22, (long long)r.pipeline_ns);
    /* refusals name what is wrong */
    place[1].host = 3;
    CHECK(sim_run_shared(&r, p, place, cores, 1, err, sizeof err) != 0 &&
          strstr(err, "stage 1 is on machine 3"), "a stage on an unknown machine: %s", err);
    place[1].host = 0;
    cores[0] = 0;
    CHECK(sim_run_shared(&r, p, place, cores, 1, err, sizeof err) != 0 &&
          strstr(err, "machine 0 has 0 cores"), "a machine without cores: %s", err);

    p->micro_batches = 0;
    CHECK(sim_run(&r, p, err, sizeof err) != 0 && strstr(err, "out of range"), "no micro-batches");
    free(p);
    if (failures) printf("%d failures\n", failures);
    return failures ? 1 : 0;
}

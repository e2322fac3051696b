/* test_pool_switch.c — planned switches of whole simulated pools
 * (pool_sim.h; docs/ARCHITECTURE.md, "Planned switches"): a member joins a
 * running job, and the pool moves to the plan that uses it when the rule
 * says so. Every random choice is seeded; TEST_SEED_OFFSET=N runs every
 * scenario with its seed + N.
 *
 * Five members: m00-m02 compute from the start, m03 computes and joins
 * mid-run, m04 submits and computes nothing. Scenarios: a join the rule
 * takes (a later epoch is a handover naming m03; the old stages stop
 * together after one step and the new ones start after it: no step is done
 * twice, no recovery); a join too close to the job's end to pay for itself
 * (the plan stays; the newcomer's document says why); a join before the
 * running plan has done replan_min_steps (it waits for them, then
 * switches); an old holder lost while it hands over (the pool falls back to
 * a recovery and finishes); a holder that leaves on purpose (it stays up
 * until its layers are handed over, then goes: nothing redone, no
 * recovery); a holder that slows down (its pace re-profiles it, the pool
 * gives it fewer layers); a holder capped to one thread (`shardnode set`);
 * a holder that slows down and leaves while the pool votes for the slowed
 * plan (each switch recorded with its own reason; it stays until its
 * layers are handed over, even to a handover already committed);
 * holders that go after the job's last step (no recovery of a finished
 * job; one leaving before the gathering waits for it); the newcomer
 * restarted during a handover (it learns the step from the others' records:
 * no recovery); a second switch weighed at the first one's measured cost.
 * POOL_SIM_VERBOSE=1 prints every log line. */
#include "pool_sim.h"

#include <math.h>

#define STEPS 400

static bool finished(int i)
{
    const pool_doc *d = pool_core_doc(S.m[i].core);
    if (strcmp(S.m[i].name, S.bundle.submitted_by) == 0) return d->run.gathered == 1;
    const pool_plan *c = plan_of(i);
    return c && (pool_plan_stage_of(c, S.m[i].name) < 0 || d->run.state == POOL_RUN_DONE);
}

/* m03 down before the job: the job's first plan has three stages. */
static void start(uint64_t seed)
{
    world_init(5, seed);
    S.m[4].no_compute = true;
    pool_core_destroy(S.m[4].core);
    new_core(&S.m[4]);
    /* the newcomer is the fastest member: the plan with it is faster */
    S.m[3].speed = 300;
    S.reached = S.first_step = 0;
    crash(3);
    for (int t = 0; t < (DETECT_MS + 2 * TICK) / TICK; t++) step();
    set_bundle("m04", WALL0 + (S.now - T0) / 1000);
    submit(4);
    CHECK(run_until(committed, 60000), "seed %llu: no commit within 60 s",
          (unsigned long long)seed);
    const pool_plan *c = plan_of(4);
    CHECK(c && pool_plan_stage_of(c, "m03") < 0, "seed %llu: the first plan names m03, which "
          "is down", (unsigned long long)seed);
}

static void run_to(int64_t target)
{
    int64_t end = S.now + 300000;
    while (S.now < end && S.reached < target) step();
    CHECK(S.reached >= target, "the run did not reach step %lld (at %lld)", (long long)target,
          (long long)S.reached);
}

static bool no_recovery(void)
{
    for (int i = 0; i < S.n; i++)
        if (S.m[i].up && (pool_core_doc(S.m[i].core)->has & POOL_HAS_REC)) return false;
    return true;
}

/* A join the rule takes: the pool switches to a plan with m03, nothing
 * redone, no recovery. */
static void scenario_join(uint64_t seed)
{
    S.replan_min_steps = 20;
    start(seed);
    int64_t k = 40 + (int64_t)(rnd() % 40);
    run_to(k);
    int64_t joined = S.reached, t0 = S.now;
    restart(3);
    CHECK(run_until(finished, 600000), "join: the run did not finish");
    CHECK(S.reached == STEPS, "join: the run reached step %lld of %d", (long long)S.reached,
          STEPS);
    const pool_plan *c = plan_of(4);
    CHECK(c && c->handover && pool_plan_stage_of(c, "m03") >= 0, "join: the last epoch (%lld) "
          "is %sa handover and %s m03", c ? (long long)c->epoch : 0LL,
          c && c->handover ? "" : "not ", c && pool_plan_stage_of(c, "m03") >= 0 ? "names"
                                                                               : "does not name");
    CHECK(S.handovers == 1, "join: %d pipelines stopped for a switch (want 1)", S.handovers);
    CHECK(S.redone == 0, "join: %lld steps done twice", (long long)S.redone);
    CHECK(no_recovery(), "join: a member recorded a recovery");
    CHECK(S.handed_at > joined, "join: handed over after step %lld, before the join at %lld",
          (long long)S.handed_at, (long long)joined);
    CHECK(S.resumed_ms > S.handed_ms, "join: no step after the handover's");
    const pool_doc *sd = pool_core_doc(S.m[4].core);
    CHECK((sd->has & POOL_HAS_SWR) && sd->swr.why == POOL_SW_JOINED, "join: the submitter's "
          "record of the switch says %s", (sd->has & POOL_HAS_SWR)
                                              ? pool_switch_why_name(sd->swr.why) : "nothing");
    printf("join: m03 up at step %lld; the stages handed over after step %lld, %.1f s later; "
           "step %lld done %.1f s after the stop; epoch %lld runs %d stages with m03; no step "
           "redone\n", (long long)joined, (long long)S.handed_at,
           (double)(S.handed_ms - t0) / 1000, (long long)S.handed_at + 1,
           (double)(S.resumed_ms - S.handed_ms) / 1000, c ? (long long)c->epoch : 0LL,
           c ? c->nstages : 0);
}

/* A join with too few steps left to pay for the switch: the plan stays,
 * and the newcomer's document says why it holds nothing. */
static void scenario_late(uint64_t seed)
{
    S.replan_min_steps = 20;
    start(seed);
    run_to(STEPS - 30);
    restart(3);
    /* what m03 says while the run goes on */
    char why[POOL_DOC_TEXT_MAX] = "";
    int64_t end = S.now + 600000;
    while (S.now < end && !finished(4)) {
        step();
        const char *w = pool_core_doc(S.m[3].core)->why;
        if (w[0] && !why[0]) snprintf(why, sizeof why, "%s", w);
    }
    CHECK(run_until(finished, 600000), "late: the run did not finish");
    const pool_plan *c = plan_of(4);
    CHECK(c && !c->handover && pool_plan_stage_of(c, "m03") < 0 && S.handovers == 0,
          "late: the pool switched (epoch %lld, %d handovers) with 30 steps left",
          c ? (long long)c->epoch : 0LL, S.handovers);
    CHECK(strstr(why, "steps left") != NULL, "late: m03's document says \"%s\", not why it "
          "holds nothing", why);
    printf("late: the plan stays; m03 says: %s\n", why);
}

/* A join of a member so slow that no plan gives it layers: the plan over
 * the view is the running one, and the newcomer's document says so (before,
 * it said nothing). */
static void scenario_useless(uint64_t seed)
{
    S.replan_min_steps = 20;
    start(seed);
    run_to(40);
    S.m[3].speed = 20000;   /* 20 times slower than the base profile */
    restart(3);
    char why[POOL_DOC_TEXT_MAX] = "";
    int64_t end = S.now + 60000;
    while (S.now < end && !why[0]) {
        step();
        snprintf(why, sizeof why, "%s", pool_core_doc(S.m[3].core)->why);
    }
    const pool_plan *c = plan_of(4);
    CHECK(c && !c->handover && pool_plan_stage_of(c, "m03") < 0 && S.handovers == 0,
          "useless: the pool switched to a plan with m03, 20 times slower");
    CHECK(strstr(why, "is the running one") != NULL, "useless: m03's document says \"%s\", not "
          "why it holds nothing", why);
    printf("useless: m03 says: %s\n", why);
    S.m[3].speed = 300;
}

/* replan_min_steps: a join right after the start waits until the running
 * plan has done them. */
static void scenario_min_steps(uint64_t seed)
{
    S.replan_min_steps = 60;
    start(seed);
    run_to(5);
    restart(3);
    CHECK(run_until(finished, 600000), "min steps: the run did not finish");
    CHECK(S.handovers == 1 && S.handed_at >= 60, "min steps: %d handovers, the last after step "
          "%lld (replan_min_steps 60)", S.handovers, (long long)S.handed_at);
    CHECK(S.redone == 0 && no_recovery(), "min steps: %lld steps redone, %s recovery",
          (long long)S.redone, no_recovery() ? "no" : "a");
    printf("min steps: m03 up at step 5; handed over after step %lld (replan_min_steps 60)\n",
           (long long)S.handed_at);
    S.replan_min_steps = 20;
}

/* An old holder lost as the stages are asked to hand over: the switch
 * cannot finish; the pool recovers without it and finishes. */
static void scenario_lost(uint64_t seed)
{
    S.replan_min_steps = 20;
    start(seed);
    run_to(40);
    const pool_plan *c = plan_of(4);
    int victim = c ? member_of(c->stage[c->nstages / 2].holder[0].name) : -1;
    S.crash_on_handover = victim;
    restart(3);
    CHECK(run_until(finished, 600000), "lost: the run did not finish");
    CHECK(S.reached == STEPS, "lost: the run reached step %lld of %d", (long long)S.reached,
          STEPS);
    CHECK(victim >= 0 && !S.m[victim].up, "lost: no member was asked to hand over");
    c = plan_of(4);
    CHECK(c && victim >= 0 && pool_plan_stage_of(c, S.m[victim].name) < 0, "lost: the last "
          "epoch still names the lost member");
    const pool_doc *d = pool_core_doc(S.m[4].core);
    CHECK((d->has & POOL_HAS_REC) && d->rec.n >= 1, "lost: the submitter records no recovery");
    printf("lost: %s lost as it handed over; recovered in epoch %lld after step %lld\n",
           victim >= 0 ? S.m[victim].name : "?", (long long)d->rec.epoch, (long long)d->rec.from);
    S.crash_on_handover = -1;
}

/* Steps until the departing member i may go (pool_core_departed), at most
 * POOL_DEPART_MS; *went_ms: how long that took. True when it may. */
static bool wait_free(int i, int64_t *went_ms)
{
    int64_t t0 = S.now;
    bool gone = false;
    while (S.now - t0 < POOL_DEPART_MS && !gone) {
        step();
        view_of(i);
        gone = pool_core_departed(S.m[i].core, S.view, S.n);
    }
    *went_ms = S.now - t0;
    return gone;
}

/* A holder leaves on purpose (shardnode leave, SIGTERM to up): it stays up
 * until its layers are handed over to a plan without it, and then goes;
 * nothing is redone, no recovery. */
static void scenario_leave(uint64_t seed)
{
    S.replan_min_steps = 20;
    start(seed);
    run_to(30 + (int64_t)(rnd() % 40));
    const pool_plan *c = plan_of(4);
    int victim = c ? member_of(c->stage[c->nstages / 2].holder[0].name) : -1;
    CHECK(victim >= 0, "leave: no holder to leave");
    if (victim < 0) return;
    view_of(4);
    CHECK(!pool_core_depart(S.m[4].core, S.view, S.n), "leave: the submitter, which holds no "
          "stage, is told to wait for a hand-over");
    int64_t left_at = S.reached;
    view_of(victim);
    CHECK(pool_core_depart(S.m[victim].core, S.view, S.n), "leave: %s holds a stage and is "
          "not told to wait for its hand-over", S.m[victim].name);
    int64_t went_ms;
    bool gone = wait_free(victim, &went_ms);
    CHECK(gone, "leave: %s was not free to go within %d s", S.m[victim].name,
          POOL_DEPART_MS / 1000);
    crash(victim);
    CHECK(run_until(finished, 600000), "leave: the run did not finish");
    CHECK(S.reached == STEPS, "leave: the run reached step %lld of %d", (long long)S.reached,
          STEPS);
    c = plan_of(4);
    CHECK(c && c->handover && pool_plan_stage_of(c, S.m[victim].name) < 0, "leave: the last "
          "epoch (%lld) is %sa handover and %s %s", c ? (long long)c->epoch : 0LL,
          c && c->handover ? "" : "not ", c && pool_plan_stage_of(c, S.m[victim].name) >= 0
                                               ? "names" : "does not name", S.m[victim].name);
    CHECK(S.handovers == 1 && S.redone == 0 && no_recovery(), "leave: %d handovers, %lld steps "
          "redone, %s recovery", S.handovers, (long long)S.redone, no_recovery() ? "no" : "a");
    const pool_doc *d = pool_core_doc(S.m[4].core);
    CHECK((d->has & POOL_HAS_SWR) && d->swr.why == POOL_SW_LEFT, "leave: the submitter's record "
          "of the switch says %s", (d->has & POOL_HAS_SWR) ? pool_switch_why_name(d->swr.why)
                                                           : "nothing");
    printf("leave: %s left at step %lld; handed over after step %lld; free to go %.1f s after "
           "it asked; no step redone, no recovery\n", S.m[victim].name, (long long)left_at,
           (long long)S.handed_at, (double)went_ms / 1000);
}

/* A holder slows down (someone starts a game on that box; `shardnode set
 * --threads 1`): its stage computes 2.5 times longer than when it started;
 * after POOL_PACE_STEPS such steps it re-profiles from what it measured,
 * and the pool switches ("slowed") to a plan that gives it fewer layers:
 * nothing redone, no recovery. */
static void scenario_slow(uint64_t seed)
{
    S.replan_min_steps = 20;
    start(seed);
    run_to(30 + (int64_t)(rnd() % 40));
    const pool_plan *c = plan_of(4);
    int victim = c ? member_of(c->stage[c->nstages / 2].holder[0].name) : -1;
    CHECK(victim >= 0, "slow: no holder to slow down");
    if (victim < 0) return;
    const pool_stage *was = &c->stage[c->nstages / 2];
    int before = was->layer_end - was->layer_begin;
    int64_t slowed_at = S.reached;
    S.m[victim].pace = 2500;
    CHECK(run_until(finished, 600000), "slow: the run did not finish");
    CHECK(S.reached == STEPS, "slow: the run reached step %lld of %d", (long long)S.reached,
          STEPS);
    c = plan_of(4);
    int s = c ? pool_plan_stage_of(c, S.m[victim].name) : -1;
    int after = s >= 0 ? c->stage[s].layer_end - c->stage[s].layer_begin : 0;
    CHECK(c && c->handover && after < before, "slow: the last epoch (%lld) is %sa handover and "
          "gives %s %d layers (it held %d)", c ? (long long)c->epoch : 0LL,
          c && c->handover ? "" : "not ", S.m[victim].name, after, before);
    CHECK(S.handovers == 1 && S.redone == 0 && no_recovery(), "slow: %d handovers, %lld steps "
          "redone, %s recovery", S.handovers, (long long)S.redone, no_recovery() ? "no" : "a");
    CHECK(S.handed_at > slowed_at + POOL_PACE_STEPS, "slow: handed over after step %lld, before "
          "%d slow steps after %lld", (long long)S.handed_at, POOL_PACE_STEPS,
          (long long)slowed_at);
    const pool_doc *d = pool_core_doc(S.m[4].core);
    CHECK((d->has & POOL_HAS_SWR) && d->swr.why == POOL_SW_SLOWED, "slow: the submitter's record "
          "of the switch says %s", (d->has & POOL_HAS_SWR) ? pool_switch_why_name(d->swr.why)
                                                           : "nothing");
    printf("slow: %s 2.5x slower after step %lld; handed over after step %lld; it holds %d "
           "layers (was %d); no step redone, no recovery\n", S.m[victim].name,
           (long long)slowed_at, (long long)S.handed_at, after, before);
    S.m[victim].pace = 0;
}

/* The stage of plan c with the most layers (the first of them; 0 when c
 * is NULL). */
static int biggest_stage(const pool_plan *c)
{
    int big = 0;
    for (int k = 1; c && k < c->nstages; k++)
        if (c->stage[k].layer_end - c->stage[k].layer_begin >
            c->stage[big].layer_end - c->stage[big].layer_begin)
            big = k;
    return big;
}

/* `shardnode set --threads 1` on a holder computing with 4 on a machine of
 * its own: its profile takes 4 times as long at once, the pool switches ("slowed") to a plan that gives it
 * fewer layers; its stage then computes 4 times as long, which is what
 * the profile says: no further re-profile, no second switch. */
static void scenario_capped(uint64_t seed)
{
    S.replan_min_steps = 20;
    S.own_hosts = true; /* its freed core goes to nobody else */
    start(seed);
    run_to(30 + (int64_t)(rnd() % 40));
    const pool_plan *c = plan_of(4);
    int big = biggest_stage(c);   /* the holder of the most layers */
    int victim = c ? member_of(c->stage[big].holder[0].name) : -1;
    CHECK(victim >= 0, "capped: no holder to cap");
    if (victim < 0) return;
    int before = c->stage[big].layer_end - c->stage[big].layer_begin;
    int64_t fwd = pool_core_doc(S.m[victim].core)->prof.prof.fwd_ns[COST_LAYER];
    pool_core_set_threads(S.m[victim].core, 1, &S.acts);
    execute(victim);
    const pool_doc *vd = pool_core_doc(S.m[victim].core);
    CHECK(vd->threads == 1 && vd->prof.prof.fwd_ns[COST_LAYER] == 4 * fwd, "capped: %s says %lld "
          "threads and a layer's forward of %lld ns (was 4 and %lld)", S.m[victim].name,
          (long long)vd->threads, (long long)vd->prof.prof.fwd_ns[COST_LAYER], (long long)fwd);
    int64_t capped_at = S.reached;
    S.m[victim].pace = 8000;
    CHECK(run_until(finished, 600000), "capped: the run did not finish");
    c = plan_of(4);
    int s = c ? pool_plan_stage_of(c, S.m[victim].name) : -1;
    int after = s >= 0 ? c->stage[s].layer_end - c->stage[s].layer_begin : 0;
    CHECK(c && c->handover && after < before && S.handovers == 1, "capped: the last epoch "
          "(%lld) is %sa handover, gives %s %d layers (it held %d); %d handovers (want 1)",
          c ? (long long)c->epoch : 0LL, c && c->handover ? "" : "not ", S.m[victim].name,
          after, before, S.handovers);
    CHECK(S.redone == 0 && no_recovery(), "capped: %lld steps redone, %s recovery",
          (long long)S.redone, no_recovery() ? "no" : "a");
    const pool_doc *d = pool_core_doc(S.m[4].core);
    CHECK((d->has & POOL_HAS_SWR) && d->swr.why == POOL_SW_SLOWED, "capped: the submitter's "
          "record of the switch says %s", (d->has & POOL_HAS_SWR)
                                              ? pool_switch_why_name(d->swr.why) : "nothing");
    printf("capped: %s to 1 thread after step %lld; handed over after step %lld; it holds %d "
           "layers (was %d)\n", S.m[victim].name, (long long)capped_at, (long long)S.handed_at,
           after, before);
    S.m[victim].pace = 0;
    S.own_hosts = false;
}

/* Every up member's record of its last switch names the reason of the plan
 * it switched to: "left" only for a plan without `leaver`. *bad: the first
 * member whose record says otherwise (-1: none). The submitter's record of
 * each epoch goes to why[e] and whether that epoch's plan holds the leaver
 * to holds[e] (why[e] NONE: no record of e seen). */
static void left_records(int leaver, int *bad, int64_t *bad_epoch, pool_switch_why *why,
                         bool *holds)
{
    for (int i = 0; i < S.n; i++) {
        const pool_doc *d = S.m[i].up ? pool_core_doc(S.m[i].core) : NULL;
        const pool_plan *c = d ? plan_of(i) : NULL;
        if (!c || !(d->has & POOL_HAS_SWR) || d->swr.epoch != c->epoch) continue;
        bool in = pool_plan_stage_of(c, S.m[leaver].name) >= 0;
        if (*bad < 0 && d->swr.why == POOL_SW_LEFT && in) {
            *bad = i;
            *bad_epoch = c->epoch;
        }
        if (i == 4 && c->epoch > 0 && c->epoch < 64) {
            why[c->epoch] = d->swr.why;
            holds[c->epoch] = in;
        }
    }
}

/* A holder slows down and leaves just as the pool votes for the plan that
 * gives it fewer layers (some member's vote for that switch is out): a
 * switch to a plan that still holds it is never recorded "left" (before, a
 * member whose own watch had moved on to the leave recorded the slowed
 * plan's switch as "left": 2 of these 8 seeds); the switch that drops it
 * is "left", or "slowed" where the votes for it came before the leave; the
 * leaver stays until its layers are handed over, even to a handover
 * committed before it asked (before, it was let go at once: 5 of 10 seed
 * offsets); nothing redone, no recovery. */
static void scenario_slow_leave(uint64_t seed)
{
    S.replan_min_steps = 20;
    /* machines of their own: on one shared machine the slowed plan drops
     * the slowed member (pool_elect.c, prefer_shared), and no switch holds
     * it after the one voted for */
    S.own_hosts = true;
    start(seed);
    run_to(30 + (int64_t)(rnd() % 40));
    const pool_plan *c = plan_of(4);
    int big = biggest_stage(c);
    int victim = c ? member_of(c->stage[big].holder[0].name) : -1;
    CHECK(victim >= 0, "slow-leave: no holder to slow down");
    if (victim < 0) return;
    int64_t e0 = c->epoch;
    S.m[victim].pace = 1850;
    int bad = -1;
    int64_t bad_epoch = 0, end = S.now + 300000, voted = 0;
    pool_switch_why why[64] = {0};
    bool holds[64] = {0};
    while (S.now < end && !voted) {
        step();
        for (int i = 0; i < S.n && !voted; i++) {
            const pool_doc *d = S.m[i].up ? pool_core_doc(S.m[i].core) : NULL;
            if (d && (d->has & POOL_HAS_VOTE) && d->vote.sw == POOL_SW_SLOWED &&
                d->vote.v.epoch > e0)
                voted = d->vote.v.epoch;
        }
    }
    CHECK(voted, "slow-leave: no member voted for a switch after %s slowed down",
          S.m[victim].name);
    for (int64_t k = (int64_t)(rnd() % 3); k > 0; k--) step();
    /* the latest epoch a switch was voted in before the leave */
    for (int i = 0; i < S.n; i++) {
        const pool_doc *d = S.m[i].up ? pool_core_doc(S.m[i].core) : NULL;
        if (d && (d->has & POOL_HAS_VOTE) && d->vote.sw != POOL_SW_NONE && d->vote.v.epoch > voted)
            voted = d->vote.v.epoch;
    }
    view_of(victim);
    CHECK(pool_core_depart(S.m[victim].core, S.view, S.n), "slow-leave: %s holds a stage and "
          "is not told to wait for its hand-over", S.m[victim].name);
    int64_t t0 = S.now;
    bool gone = false;
    while (S.now - t0 < POOL_DEPART_MS && !gone) {
        step();
        left_records(victim, &bad, &bad_epoch, why, holds);
        view_of(victim);
        gone = pool_core_departed(S.m[victim].core, S.view, S.n);
    }
    CHECK(gone, "slow-leave: %s was not free to go within %d s", S.m[victim].name,
          POOL_DEPART_MS / 1000);
    crash(victim);
    end = S.now + 600000;
    bool done = false;
    while (S.now < end && !done) {
        step();
        left_records(victim, &bad, &bad_epoch, why, holds);
        done = true;
        for (int i = 0; i < S.n && done; i++)
            if (S.m[i].up) done = finished(i);
    }
    CHECK(done && S.reached == STEPS, "slow-leave: the run reached step %lld of %d",
          (long long)S.reached, STEPS);
    CHECK(bad < 0, "slow-leave: %s records the switch to epoch %lld, whose plan holds %s, as "
          "\"left\"", bad >= 0 ? S.m[bad].name : "", (long long)bad_epoch, S.m[victim].name);
    /* the first switch whose plan drops the leaver */
    int64_t drop = 0;
    for (int64_t e = e0 + 1; e < 64 && !drop; e++)
        if (why[e] != POOL_SW_NONE && !holds[e]) drop = e;
    c = plan_of(4);
    CHECK(drop && c && pool_plan_stage_of(c, S.m[victim].name) < 0 &&
              (why[drop] == POOL_SW_LEFT || (why[drop] == POOL_SW_SLOWED && drop <= voted)),
          "slow-leave: the switch that drops %s is epoch %lld, recorded %s (switches voted "
          "before the leave: up to epoch %lld); the last epoch %lld %s it",
          S.m[victim].name, (long long)drop,
          drop ? pool_switch_why_name(why[drop]) : "-", (long long)voted,
          c ? (long long)c->epoch : 0LL,
          c && pool_plan_stage_of(c, S.m[victim].name) >= 0 ? "holds" : "does not hold");
    CHECK(S.redone == 0 && no_recovery(), "slow-leave: %lld steps redone, %s recovery",
          (long long)S.redone, no_recovery() ? "no" : "a");
    printf("slow-leave: %s slowed down and left after the votes of epoch %lld; epoch %lld "
           "(%s) dropped it; %d handovers; no step redone, no recovery\n", S.m[victim].name,
           (long long)voted, (long long)drop, drop ? pool_switch_why_name(why[drop]) : "-",
           S.handovers);
    S.m[victim].pace = 0;
    S.own_hosts = false;
}

/* A holder asked to leave after the pool committed a switch that gives its
 * layers away (a slow-down's), before its stage has handed them over: it
 * is told to stay until the new stages have them, and nothing is redone
 * or recovered. Before, pool_core_depart let it go at once (its stage is
 * in no plan after the commit) and the pool recovered without it. */
static void scenario_leave_handing(uint64_t seed)
{
    S.replan_min_steps = 20;
    start(seed);
    run_to(30 + (int64_t)(rnd() % 40));
    const pool_plan *c = plan_of(4);
    int victim = c ? member_of(c->stage[biggest_stage(c)].holder[0].name) : -1;
    CHECK(victim >= 0, "leave handing: no holder to slow down");
    if (victim < 0) return;
    int64_t e0 = c->epoch, end = S.now + 300000;
    S.m[victim].pace = 8000;
    /* the victim's core commits a handover that drops it, the new stages
     * not yet past the step they start after (they take its layers from
     * its snapshots) */
    bool ready = false;
    while (S.now < end && !ready) {
        step();
        const pool_plan *v = plan_of(victim);
        view_of(victim);
        ready = v && v->epoch > e0 && v->handover && pool_plan_stage_of(v, S.m[victim].name) < 0 &&
                !pool_core_departed(S.m[victim].core, S.view, S.n);
    }
    CHECK(ready, "leave handing: no handover dropping %s was committed before the new stages "
          "had its layers", S.m[victim].name);
    if (!ready) return;
    int64_t e1 = plan_of(victim)->epoch;
    view_of(victim);
    CHECK(pool_core_depart(S.m[victim].core, S.view, S.n), "leave handing: %s, whose layers "
          "epoch %lld gives away, is let go before its stage hands them over",
          S.m[victim].name, (long long)e1);
    int64_t went_ms;
    bool gone = wait_free(victim, &went_ms);
    CHECK(gone, "leave handing: %s was not free to go within %d s", S.m[victim].name,
          POOL_DEPART_MS / 1000);
    crash(victim);
    CHECK(run_until(finished, 600000) && S.reached == STEPS, "leave handing: the run reached "
          "step %lld of %d", (long long)S.reached, STEPS);
    CHECK(S.redone == 0 && no_recovery(), "leave handing: %lld steps redone, %s recovery",
          (long long)S.redone, no_recovery() ? "no" : "a");
    printf("leave handing: %s asked to leave after epoch %lld was committed without it; went "
           "%.1f s later; no step redone, no recovery\n", S.m[victim].name, (long long)e1,
           (double)went_ms / 1000);
    S.m[victim].pace = 0;
}

static bool handing(int i) { return plan_of(i) && plan_of(i)->handover; }

/* Member i's state file holds the commit of epoch e. */
static bool saved_commit(int i, int64_t e)
{
    json_t *j = S.m[i].disk ? json_loads(S.m[i].disk, 0, NULL) : NULL;
    pool_saved sv;
    char err[POOL_TEXT_MAX];
    bool ok = j && pool_saved_from_json(j, &sv, err, sizeof err) == 0;
    json_decref(j);
    if (!ok) return false;
    bool has = sv.has_committed && sv.committed.epoch == e;
    pool_saved_free(&sv);
    return has;
}

/* A member restarts while the pool hands over (m03, which the new plan
 * names): its new core knows the handover plan from its saved state, not
 * the plan it replaces, and takes the step from the others' records of
 * the switch. Before, it waited out POOL_HANDOVER_MS and recovered, and
 * the run redid the steps since the handover. */
static void scenario_restart(uint64_t seed)
{
    /* The window (the commit saved, the step not learnt yet) depends on
     * the seeded timing: the first of a few seeds that gives it is run. */
    int64_t epoch = 0;
    bool window = false;
    for (int k = 0; k < 8 && !window; k++) {
        S.replan_min_steps = 20;
        start(seed + 100 * (uint64_t)k);
        run_to(40 + (int64_t)(rnd() % 20));
        restart(3);
        /* every member commits the handover (a member restarted before
         * that hides its vote until it takes the job up again, and the
         * others' commit waits for it) */
        int64_t end = S.now + 300000;
        while (S.now < end && !run_until(handing, TICK)) {}
        CHECK(handing(3), "restart: no handover committed");
        /* its daemon restarts once its state file holds the commit (saved
         * with its next publication) and before it learns the step (then
         * its new stage starts, and a restart loses it) */
        epoch = plan_of(3) ? plan_of(3)->epoch : 0;
        for (int t = 0; t < 4 && !saved_commit(3, epoch); t++) step();
        const pool_doc *d3 = pool_core_doc(S.m[3].core);
        window = saved_commit(3, epoch) && !((d3->has & POOL_HAS_SWR) && d3->swr.epoch == epoch);
    }
    CHECK(window, "restart: no seed of 8 restarts m03 between its commit and the step");
    int64_t at = S.reached;
    crash(3);
    restart(3);
    CHECK(run_until(finished, 600000), "restart: the run did not finish");
    CHECK(S.reached == STEPS, "restart: the run reached step %lld of %d", (long long)S.reached,
          STEPS);
    CHECK(S.handovers == 1 && S.redone == 0 && no_recovery(), "restart: %d handovers, %lld "
          "steps redone, %s recovery", S.handovers, (long long)S.redone,
          no_recovery() ? "no" : "a");
    const pool_plan *c = plan_of(4);
    CHECK(c && c->handover && pool_plan_stage_of(c, "m03") >= 0, "restart: the last plan does "
          "not name m03");
    printf("restart: m03 restarted at step %lld, as the pool handed over (after step %lld); "
           "no step redone, no recovery\n", (long long)at, (long long)S.handed_at);
}

/* The largest time to the first step of the newest switch that any
 * member records (seconds, 0: none yet). */
static double switch_took(void)
{
    int64_t e = 0, ms = 0;
    for (int i = 0; i < S.n; i++) {
        const pool_doc *d = pool_core_doc(S.m[i].core);
        if (!S.m[i].up || !(d->has & POOL_HAS_SWR) || d->swr.ms < 0) continue;
        if (d->swr.epoch > e || (d->swr.epoch == e && d->swr.ms > ms)) {
            e = d->swr.epoch;
            ms = d->swr.ms;
        }
    }
    return (double)ms / 1e3;
}

/* A switch's fixed cost is measured: after a join, a second switch (a
 * holder slows down) is weighed with what the first one took (its swr.ms;
 * the layers move at about 1 GB/s here, so nearly all of it is the fixed
 * part), not with POOL_SWITCH_PAUSE_MS. */
static void scenario_measured(uint64_t seed)
{
    S.replan_min_steps = 20;
    start(seed);
    run_to(40 + (int64_t)(rnd() % 20));
    restart(3);
    int64_t end = S.now + 300000;
    while (S.now < end && !(S.handovers && switch_took() > 0)) step();
    /* past the new stages' base steps (their pace is judged against them) */
    while (S.now < end && S.reached < S.handed_at + POOL_PACE_SKIP + POOL_PACE_BASE + 5) step();
    double took = switch_took();
    CHECK(took > 0, "measured: no switch measured");
    /* the holder of the most layers, 8 times slower */
    const pool_plan *c = plan_of(4);
    int victim = c ? member_of(c->stage[biggest_stage(c)].holder[0].name) : -1;
    CHECK(victim >= 0, "measured: no holder to slow down");
    if (victim < 0) return;
    S.m[victim].pace = 8000;
    char was[POOL_DOC_TEXT_MAX], note[POOL_DOC_TEXT_MAX] = "";
    snprintf(was, sizeof was, "%s", pool_core_doc(S.m[4].core)->why);
    double cost = -1;
    while (cost < 0 && !finished(4) && S.now < end + 600000) {
        step();
        const char *w = pool_core_doc(S.m[4].core)->why, *p;
        if (strcmp(w, was) == 0) continue;
        if ((p = strstr(w, "costs about ")) != NULL) sscanf(p + 12, "%lf", &cost);
        else if ((p = strstr(w, "less than the ")) != NULL) sscanf(p + 14, "%lf", &cost);
        snprintf(note, sizeof note, "%s", w);
        took = switch_took();
    }
    S.m[victim].pace = 0;
    double want = took < POOL_SWITCH_MIN_S ? POOL_SWITCH_MIN_S : took;
    /* the measured figure (at this scenario's seed, 3.5 s: one the guess
     * would not give; other seeds may take about the guess, and then tell
     * nothing apart) */
    if (fabs(want - POOL_SWITCH_PAUSE_MS / 1e3) <= 0.5)
        printf("measured: the first switch took %.2f s, too close to POOL_SWITCH_PAUSE_MS "
               "(%.1f s) to tell them apart at this seed\n", took, POOL_SWITCH_PAUSE_MS / 1e3);
    CHECK(cost >= want - 0.15 && cost <= want + 0.15, "measured: the second "
          "switch was weighed at %.2f s (the first took %.2f s; POOL_SWITCH_PAUSE_MS %.1f s): "
          "\"%s\"", cost, took, POOL_SWITCH_PAUSE_MS / 1e3, note);
    printf("measured: the first switch took %.1f s to its first step; the second was weighed "
           "at %.1f s (the guess before a switch: %.1f s)\n", took, cost,
           POOL_SWITCH_PAUSE_MS / 1e3);
}

/* Every stage of the committed plan says "done". */
static bool stages_done(int i)
{
    (void)i;
    const pool_plan *c = plan_of(4);
    for (int s = 0; c && s < c->nstages; s++) {
        int h = member_of(c->stage[s].holder[0].name);
        if (h < 0 || pool_core_doc(S.m[h].core)->run.state != POOL_RUN_DONE) return false;
    }
    return c != NULL;
}

/* The job's last step done: a holder that leaves before the model is
 * gathered stays until it is (its stage file is fetched), and one that
 * goes after that (or crashes) starts no recovery of the finished job. */
static void scenario_after_end(uint64_t seed)
{
    S.replan_min_steps = 20;
    start(seed);
    CHECK(run_until(stages_done, 600000), "after end: the stages did not finish");
    const pool_plan *c = plan_of(4);
    int leaver = c ? member_of(c->stage[c->nstages / 2].holder[0].name) : -1,
        other = c ? member_of(c->stage[0].holder[0].name) : -1;
    CHECK(leaver >= 0 && other >= 0 && leaver != other, "after end: no two holders");
    if (leaver < 0 || other < 0 || leaver == other) return;
    bool gathered = pool_core_doc(S.m[4].core)->run.gathered == 1;
    view_of(leaver);
    bool waits = pool_core_depart(S.m[leaver].core, S.view, S.n);
    CHECK(waits || gathered, "after end: %s leaves before the model is gathered and is not "
          "told to wait", S.m[leaver].name);
    int64_t went_ms = 0;
    bool gone = !waits || wait_free(leaver, &went_ms);
    CHECK(gone && pool_core_doc(S.m[4].core)->run.gathered == 1, "after end: %s %s; the model "
          "is %sgathered", S.m[leaver].name, gone ? "went" : "never free to go",
          pool_core_doc(S.m[4].core)->run.gathered == 1 ? "" : "not ");
    crash(leaver);
    crash(other);
    for (int t = 0; t < (DETECT_MS + 10000) / TICK; t++) step();
    CHECK(no_recovery(), "after end: a member recovers the finished job after %s and %s went",
          S.m[leaver].name, S.m[other].name);
    printf("after end: %s left %s the model was gathered (%.1f s after it asked), %s crashed "
           "after; no recovery\n", S.m[leaver].name, waits ? "once" : "after",
           (double)went_ms / 1000, S.m[other].name);
}

int main(void)
{
    S.verbose = getenv("POOL_SIM_VERBOSE") != NULL;
    sim_files("test_pool_switch", STEPS);
    S.snapshot_every = 40;
    S.switches = true;
    S.replan_gain = 0.10;
    uint64_t o = getenv("TEST_SEED_OFFSET") ? strtoull(getenv("TEST_SEED_OFFSET"), NULL, 10) : 0;
    scenario_join(31 + o);
    scenario_late(32 + o);
    scenario_useless(43 + o);
    scenario_min_steps(33 + o);
    scenario_lost(34 + o);
    scenario_leave(35 + o);
    scenario_slow(36 + o);
    scenario_capped(37 + o);
    for (uint64_t k = 0; k < 8; k++) scenario_slow_leave(41 + 100 * k + o);
    for (uint64_t k = 0; k < 4; k++) scenario_leave_handing(42 + 100 * k + o);
    scenario_after_end(38 + o);
    scenario_restart(39 + o);
    scenario_measured(40 + o);
    sim_done();
    printf("%s\n", failures ? "FAILED" : "test_pool_switch: ok");
    return failures != 0;
}

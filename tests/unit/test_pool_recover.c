/* test_pool_recover.c — recovery of whole simulated pools (pool_sim.h): a
 * member that holds a stage is lost mid-run and the others go on by
 * themselves (docs/ARCHITECTURE.md, "Recovery"). Every random choice is
 * seeded; TEST_SEED_OFFSET=N runs every scenario with its seed + N, and
 * the victims are picked so that the losses are survivable (or, for the
 * no-copy scenario, not) whatever the seed.
 *
 * Scenarios (5 members, one of them the submitter that computes nothing, a
 * job of 60 steps, snapshot_every 5: snapshots every 3 steps): the holder of the middle stage lost
 * at a random step; the holder of the last stage; a second loss after a
 * recovery; a second loss while the recovery is voted; a loss before the
 * first snapshot (the run starts again from step 0); a partition in the
 * middle of the run (the minority never resumes, the majority does); a
 * member that learns of the job's end late and counts a holder that
 * leaves after it as lost (its recovery is moot once it learns); a
 * stage's holder and the member keeping its copies lost at once (the job
 * fails naming the lost layers); pool checkpoints, one that fails near the
 * job's end (tried again before the model is gathered), and one that fails
 * just before a loss whose recovery resumes before its step (written from
 * the redone steps' snapshots). Each
 * loss scenario checks: the recovery commits a later
 * epoch whose plan names no lost member, every stage of it resumes after
 * one step from pieces that exist (pool_sim.h checks that at each RUN), the
 * run reaches its last step and the submitter gathers the model, the steps
 * redone stay within the bound, and the members' documents say what was
 * lost, at which step, and how long the recovery took. POOL_SIM_VERBOSE=1
 * prints every log line. */
#include "pool_sim.h"

#define STEPS 60
/* snapshot_every: the bound on the steps a loss redoes; odd, so the
 * interval between snapshots, ceil(5 / 2) = 3, meets it exactly (2 * 3 - 1) */
#define EVERY 5

/* The submitter has the model; every other up member's stage of the last
 * epoch is done (or it holds none). */
static bool finished(int i)
{
    const pool_doc *d = pool_core_doc(S.m[i].core);
    if (strcmp(S.m[i].name, S.bundle.submitted_by) == 0) return d->run.gathered == 1;
    const pool_plan *c = plan_of(i);
    return c && (pool_plan_stage_of(c, S.m[i].name) < 0 || d->run.state == POOL_RUN_DONE);
}

static bool failed(int i)
{
    const pool_doc *d = pool_core_doc(S.m[i].core);
    return (d->has & POOL_HAS_RUN) && d->run.state == POOL_RUN_FAILED;
}

/* Five members, m04 the submitter computing nothing; committed. */
static void start(uint64_t seed)
{
    world_init(5, seed);
    S.m[4].no_compute = true;
    pool_core_destroy(S.m[4].core);
    new_core(&S.m[4]);
    S.reached = S.first_step = 0;
    S.nckpt = 0;
    set_bundle("m04", WALL0);
    submit(4);
    CHECK(run_until(committed, 60000), "seed %llu: no commit within 60 s",
          (unsigned long long)seed);
}

static void run_to(int64_t target)
{
    int64_t end = S.now + 120000;
    while (S.now < end && S.reached < target) step();
    CHECK(S.reached >= target, "the run did not reach step %lld (at %lld)", (long long)target,
          (long long)S.reached);
}

static int holder(int i, int stage)
{
    const pool_plan *c = plan_of(i);
    return c ? member_of(c->stage[stage].holder[0].name) : -1;
}

/* Whether, with lost[0..nlost) gone, every stage of the submitter's plan
 * still has a snapshot of its layers on some member that is up: a loss the
 * pool must survive (else it must fail, scenario_no_copy). Which members
 * keep which copies depends on the plan, so a scenario of survivable
 * losses picks its victims with this, whatever the seed. */
static bool copies_survive(const int *lost, int nlost)
{
    const pool_plan *c = plan_of(4);
    for (int s = 0; c && s < c->nstages; s++) {
        bool kept = false;
        for (int j = 0; j < S.n && !kept; j++) {
            bool gone = !S.m[j].up;
            for (int k = 0; k < nlost; k++) gone |= lost[k] == j;
            for (int k = 0; !gone && k < S.m[j].nheld; k++)
                kept |= S.m[j].held[k].layer_begin == c->stage[s].layer_begin &&
                        S.m[j].held[k].layer_end == c->stage[s].layer_end;
        }
        if (!kept) return false;
    }
    return c != NULL;
}

/* After the losses of lost[0..nlost): the run finishes, the last epoch
 * names none of them, each recovery's steps redone are within the bound.
 * Returns the submitter's record of the last recovery. */
static pool_recovery finish(const char *what, const int *lost, int nlost, int64_t at_loss)
{
    CHECK(run_until(finished, 240000), "%s: the run did not finish after the loss", what);
    CHECK(S.reached == STEPS, "%s: the run reached step %lld of %d", what, (long long)S.reached,
          STEPS);
    const pool_plan *c = plan_of(4);
    for (int k = 0; c && k < nlost; k++)
        CHECK(pool_plan_stage_of(c, S.m[lost[k]].name) < 0, "%s: epoch %lld still names the "
              "lost %s", what, (long long)c->epoch, S.m[lost[k]].name);
    const pool_doc *d = pool_core_doc(S.m[4].core);
    CHECK(d->has & POOL_HAS_REC, "%s: the submitter's document records no recovery", what);
    pool_recovery r = d->rec;
    CHECK(r.epoch == (c ? c->epoch : -1) && r.from == (c ? c->resume_step : -1),
          "%s: the record says epoch %lld from step %lld, the plan %lld from %lld", what,
          (long long)r.epoch, (long long)r.from, c ? (long long)c->epoch : 0LL,
          c ? (long long)c->resume_step : 0LL);
    CHECK(r.ms > 0, "%s: the record has no time to the first step after the loss", what);
    CHECK(at_loss - r.from <= EVERY, "%s: %lld steps redone (lost at %lld, resumed after "
          "%lld), more than snapshot_every %d", what, (long long)(at_loss - r.from),
          (long long)at_loss, (long long)r.from, EVERY);
    CHECK(S.copy_timeouts == 0, "%s: %d times a pipeline went on without a buddy's copy",
          what, S.copy_timeouts);
    return r;
}

/* A stage's holder lost at a random step: the run goes on without it. */
static void scenario_lost(const char *what, uint64_t seed, int which)
{
    start(seed);
    const pool_plan *c = plan_of(0);
    int ns = c ? c->nstages : 0;
    CHECK(ns >= 2, "%s: a plan of %d stages", what, ns);
    if (ns < 2) return;
    int stage = which < 0 ? ns - 1 : ns / 2, victim = holder(0, stage);
    int64_t k = 10 + (int64_t)(rnd() % 40);
    run_to(k);
    int64_t at = S.reached;
    crash(victim);
    pool_recovery r = finish(what, &victim, 1, at);
    CHECK(strcmp(r.lost, S.m[victim].name) == 0 || !r.lost[0], "%s: the record names %s lost, "
          "not %s", what, r.lost, S.m[victim].name);
    CHECK(r.from > 0 && r.from % job_snapshot_interval(EVERY) == 0, "%s: resumed after step "
          "%lld (want a snapshot's step > 0)", what, (long long)r.from);
    printf("%s: %s (stage %d of %d) lost at step %lld; epoch %lld resumed after step %lld "
           "(%lld redone), first step %.1f s after the loss; finished at %.1f s\n", what,
           S.m[victim].name, stage + 1, ns, (long long)at, (long long)r.epoch,
           (long long)r.from, (long long)(at - r.from), (double)r.ms / 1000,
           (double)(S.now - T0) / 1000);
}

/* Two losses: one after the first recovery resumed, or (during) while it
 * is voted. */
static void scenario_twice(const char *what, uint64_t seed, bool during)
{
    start(seed);
    int first = holder(0, 0);
    run_to(17);
    crash(first);
    int64_t at = S.reached;
    int second = -1;
    if (during) {
        /* once some member records the loss, before a new epoch commits */
        int64_t end = S.now + 30000;
        bool seen = false;
        while (S.now < end && !seen) {
            step();
            for (int i = 0; i < S.n; i++)
                seen |= S.m[i].up && pool_core_doc(S.m[i].core)->run.state == POOL_RUN_RECOVERING;
        }
        CHECK(seen, "%s: no member began to recover", what);
        /* the holder of the latest stage that is not the first victim
         * and does not keep the first victim's only copies */
        const pool_plan *c = plan_of(4);
        for (int s = c->nstages - 1; s >= 0 && second < 0; s--) {
            int h = holder(4, s), pair[2] = {first, h};
            if (h != first && h != 4 && copies_survive(pair, 2)) second = h;
        }
        CHECK(second >= 0, "%s: every other holder keeps the first victim's only copies",
              what);
        if (second < 0) return;
    } else {
        int64_t end = S.now + 60000;
        while (S.now < end && !(plan_of(4) && plan_of(4)->epoch > 1 && S.reached > at + 8))
            step();
        CHECK(plan_of(4) && plan_of(4)->epoch > 1, "%s: no recovery from the first loss", what);
        at = S.reached;
        const pool_plan *c = plan_of(4);
        second = holder(4, c->nstages - 1);
    }
    crash(second);
    int lost[2] = {first, second};
    pool_recovery r = finish(what, lost, 2, at);
    printf("%s: %s lost, then %s %s; epoch %lld resumed after step %lld; %lld recoveries in "
           "the record; finished at %.1f s\n", what, S.m[first].name, S.m[second].name,
           during ? "while the recovery was voted" : "after the run resumed",
           (long long)r.epoch, (long long)r.from, (long long)r.n, (double)(S.now - T0) / 1000);
}

/* Lost before the first snapshot: every stage starts again from step 0. */
static void scenario_early(uint64_t seed)
{
    start(seed);
    run_to(2);
    int victim = holder(0, 1);
    int64_t at = S.reached;
    crash(victim);
    pool_recovery r = finish("early", &victim, 1, at);
    CHECK(r.from == 0, "early: resumed after step %lld with no snapshot taken", (long long)r.from);
    printf("early: %s lost at step %lld, before any snapshot; epoch %lld started again from "
           "step 0\n", S.m[victim].name, (long long)at, (long long)r.epoch);
}

/* A partition mid-run: the side without a strict majority of the base
 * membership never resumes; the majority does and finishes. */
static void scenario_partition(uint64_t seed)
{
    start(seed);
    run_to(22);
    /* the minority: two computing members whose loss leaves a copy of
     * every stage with the majority (else the majority rightly fails,
     * scenario_no_copy) */
    int mi[2] = {-1, -1};
    for (int a = 0; a < 4 && mi[0] < 0; a++)
        for (int b = a + 1; b < 4 && mi[0] < 0; b++) {
            int pair[2] = {a, b};
            if (copies_survive(pair, 2)) mi[0] = a, mi[1] = b;
        }
    CHECK(mi[0] >= 0, "partition: no two computing members leave the others a copy of every "
          "stage");
    if (mi[0] < 0) return;
    S.m[mi[0]].group = S.m[mi[1]].group = 1;
    int64_t e0 = plan_of(0)->epoch;
    int64_t end = S.now + 90000;
    while (S.now < end && !finished(4)) {
        step();
        for (int q = 0; q < 2; q++) {
            int i = mi[q];
            CHECK(plan_of(i)->epoch == e0, "partition: the minority's m%02d committed epoch %lld",
                  i, (long long)plan_of(i)->epoch);
            CHECK(!S.m[i].running || S.m[i].run_epoch == e0, "partition: the minority's m%02d "
                  "runs a stage of a later epoch", i);
        }
    }
    CHECK(finished(4) && S.reached == STEPS, "partition: the majority did not finish (step %lld)",
          (long long)S.reached);
    const pool_plan *c = plan_of(4);
    CHECK(c && pool_plan_stage_of(c, S.m[mi[0]].name) < 0 &&
              pool_plan_stage_of(c, S.m[mi[1]].name) < 0,
          "partition: the majority's plan names a member it cannot reach");
    printf("partition: {%s, %s} cut off at step 22; they never resumed; the majority "
           "finished in epoch %lld\n", S.m[mi[0]].name, S.m[mi[1]].name,
           c ? (long long)c->epoch : 0LL);
}

/* A stage's holder and every member that keeps a copy of its layers lost
 * at once: the job fails, naming what was lost. */
static void scenario_no_copy(uint64_t seed)
{
    start(seed);
    run_to(26);
    /* a stage whose copies a computing member keeps (the submitter must
     * stay to see the end) */
    int lost[MAXM], nlost = 0, stage = -1;
    const pool_plan *c = plan_of(0);
    for (int s = 0; c && s < c->nstages && stage < 0; s++) {
        int victim = holder(0, s), k2 = 0, buddies[MAXM];
        for (int j = 0; j < S.n; j++)
            for (int k = 0; j != victim && k < S.m[j].nheld; k++)
                if (S.m[j].held[k].layer_begin == c->stage[s].layer_begin &&
                    S.m[j].held[k].layer_end == c->stage[s].layer_end) {
                    buddies[k2++] = j;
                    break;
                }
        if (k2 == 1 && buddies[0] != 4) {
            stage = s;
            lost[nlost++] = victim;
            lost[nlost++] = buddies[0];
        }
    }
    CHECK(stage >= 0, "no copy: no stage has its copies on one computing member alone");
    if (stage < 0) return;
    for (int k = 0; k < nlost; k++) crash(lost[k]);
    CHECK(run_until(failed, 60000), "no copy: the job did not fail");
    const char *e = pool_core_doc(S.m[4].core)->run.error;
    /* the lost stage's first layer, alone or as the start of a range */
    char want[64], want2[64];
    snprintf(want, sizeof want, "layer %d", c->stage[stage].layer_begin);
    snprintf(want2, sizeof want2, "layers %d to", c->stage[stage].layer_begin);
    CHECK(strstr(e, "left no copy") && strstr(e, "pool checkpoint") &&
              (strstr(e, want) || strstr(e, want2)) &&
          strstr(e, S.m[lost[0]].name) && strstr(e, S.m[lost[1]].name),
          "no copy: the error says \"%s\" (want %s and both lost members named)", e, want);
    printf("no copy: %s (stage %d) and %s, its copies' keeper, lost at once: %s\n",
           S.m[lost[0]].name, stage + 1, S.m[lost[1]].name, e);
}

/* Pool checkpoints: the submitter writes one every checkpoint_every steps
 * from the stages' snapshots; a job submitted with a checkpoint's shards in
 * its submitter's folder starts after that step (no earlier step is done
 * again) and finishes. */
static void scenario_checkpoints(uint64_t seed)
{
    S.checkpoint_every = 20;
    start(seed);
    CHECK(run_until(finished, 240000), "checkpoints: the run did not finish");
    CHECK(S.nckpt == 2 && S.ckpt[0] == 20 && S.ckpt[1] == 40, "checkpoints: %d written (want "
          "steps 20 and 40)", S.nckpt);
    /* the same job again, its submitter holding step 40's shards */
    const pool_plan *c = plan_of(4);
    pool_snap shards[8];
    int ns = 0;
    for (int s = 0; c && s < c->nstages && ns < 8; s++)
        shards[ns++] = (pool_snap){c->stage[s].layer_begin, c->stage[s].layer_end, 40};
    world_init(5, seed + 100);
    S.m[4].no_compute = true;
    pool_core_destroy(S.m[4].core);
    new_core(&S.m[4]);
    for (int k = 0; k < ns; k++) sim_hold(4, &shards[k]);
    S.reached = S.first_step = 0;
    S.nckpt = 0;
    set_bundle("m04", WALL0);
    submit(4);
    CHECK(run_until(finished, 240000), "checkpoints: the resumed job did not finish");
    CHECK(plan_of(4) && plan_of(4)->resume_step == 40 && S.first_step == 41,
          "checkpoints: the resumed job's plan starts after step %lld, its first step is %lld "
          "(want 40, 41)", plan_of(4) ? (long long)plan_of(4)->resume_step : -1LL,
          (long long)S.first_step);
    printf("checkpoints: written at steps 20 and 40; the job resubmitted with step 40's %d "
           "shards on its submitter started after step 40 and finished\n", ns);
    S.checkpoint_every = 0;
}

/* A pool checkpoint that fails near the job's end is tried again before
 * the submitter gathers the model: the job does not end without it. */
static void scenario_checkpoint_at_end(uint64_t seed)
{
    S.checkpoint_every = 55;   /* its retry, 6 s later, comes after step 60 */
    S.ckpt_fail = 1;
    S.ckpt_failed_at = S.ckpt_at = 0;
    start(seed);
    CHECK(run_until(finished, 240000), "checkpoint at the end: the run did not finish");
    CHECK(S.ckpt_fail == 0 && S.ckpt_failed_at > 0, "checkpoint at the end: no checkpoint "
          "was tried");
    CHECK(S.nckpt == 1 && S.ckpt[0] == 55, "checkpoint at the end: %d written (want step 55)",
          S.nckpt);
    CHECK(S.ckpt_at > 0 && S.m[4].gather_asked >= S.ckpt_at, "checkpoint at the end: the model "
          "was gathered at %.1f s, before the checkpoint was written (%.1f s)",
          (double)(S.m[4].gather_asked - T0) / 1000, (double)(S.ckpt_at - T0) / 1000);
    printf("checkpoint at the end: step 55's failed at %.1f s; written on its retry at %.1f s; "
           "the model gathered at %.1f s\n", (double)(S.ckpt_failed_at - T0) / 1000,
           (double)(S.ckpt_at - T0) / 1000, (double)(S.m[4].gather_asked - T0) / 1000);
    S.checkpoint_every = 0;
    S.ckpt_fail = 0;
}

/* A pool checkpoint that fails just before a loss whose recovery resumes
 * before its step: the redone steps snapshot that step again and the
 * checkpoint is written from them, not skipped. */
static void scenario_checkpoint_loss(uint64_t seed)
{
    S.checkpoint_every = 20;
    S.ckpt_fail = 1;
    S.ckpt_failed_at = S.ckpt_at = 0;
    start(seed);
    /* at step 20 the submitter's copy of the checkpoint fails; the holder of
     * the latest stage whose loss the copies survive is lost as soon as it
     * did (before the buddies' copies of step 20 arrive) */
    run_to(20);
    int64_t end = S.now + 10000;
    while (S.now < end && !S.ckpt_failed_at) step();
    CHECK(S.ckpt_failed_at > 0, "checkpoint and loss: the checkpoint of step 20 did not fail");
    const pool_plan *c = plan_of(4);
    int victim = -1;
    for (int s = c ? c->nstages - 1 : -1; s >= 0 && victim < 0; s--) {
        int h = holder(4, s);
        if (h != 4 && copies_survive(&h, 1)) victim = h;
    }
    CHECK(victim >= 0, "checkpoint and loss: no stage's loss leaves copies of every layer");
    if (victim < 0) return;
    crash(victim);
    pool_recovery r = finish("checkpoint and loss", &victim, 1, S.reached);
    CHECK(S.nckpt == 2 && S.ckpt[0] == 20 && S.ckpt[1] == 40, "checkpoint and loss: %d written "
          "(want steps 20 and 40; the first %lld), the run resumed after step %lld", S.nckpt,
          S.nckpt ? (long long)S.ckpt[0] : -1LL, (long long)r.from);
    printf("checkpoint and loss: step 20's failed at %.1f s, %s lost at step %lld; resumed "
           "after step %lld; checkpoints of steps 20 and 40 written\n",
           (double)(S.ckpt_failed_at - T0) / 1000, S.m[victim].name, (long long)r.at,
           (long long)r.from);
    S.checkpoint_every = 0;
    S.ckpt_fail = 0;
}

/* A member that learns of the job's end late (as a healed minority did on
 * CI): its copy of the submitter's record stays one from before the model
 * was gathered (a record that big comes only with the periodic sync), so
 * when a holder of the last plan leaves after the end (its record without
 * the job) it counts that holder lost and recovers. Once the submitter's
 * record comes, the recovery is moot: the member stops it, its run state
 * and its record of recoveries as before, and never fails the job. */
static void scenario_late_end(uint64_t seed)
{
    start(seed);
    /* every stage done: m04 gathers the model (GATHER asked, not yet done) */
    int64_t end = S.now + 240000;
    while (S.now < end && !S.m[4].gather_at && !finished(4)) step();
    CHECK(S.m[4].gather_at && !finished(4), "late end: m04 never asked to gather the model");
    /* x: the first stage's holder (the plan may leave some member out);
     * h: another holder */
    const pool_plan *last = plan_of(4);
    int x = last && last->nstages ? member_of(last->stage[0].holder[0].name) : -1, h = -1;
    for (int s = 1; last && s < last->nstages && h < 0; s++)
        h = member_of(last->stage[s].holder[0].name);
    CHECK(x >= 0 && h >= 0 && x != h, "late end: the last plan has no two holders");
    if (x < 0 || h < 0 || x == h) return;
    S.pin[x][4] = version_get(S.known[x][4]);
    CHECK(run_until(finished, 60000), "late end: the run did not finish");
    const pool_doc *xd = pool_core_doc(S.m[x].core);
    int64_t n0 = (xd->has & POOL_HAS_REC) ? xd->rec.n : 0;
    leave(h, 4);   /* its record without the job, gossiped before it goes */
    bool recovering = false;
    end = S.now + 30000;
    while (S.now < end && !recovering) {
        step();
        recovering = (xd->has & POOL_HAS_RUN) && xd->run.state == POOL_RUN_RECOVERING;
    }
    CHECK(recovering, "late end: %s never recovered from %s's leaving (the scenario did not "
          "happen)", S.m[x].name, S.m[h].name);
    version_put(S.pin[x][4]);
    S.pin[x][4] = NULL;
    end = S.now + 10000;
    while (S.now < end && xd->run.state == POOL_RUN_RECOVERING) step();
    CHECK(xd->run.state != POOL_RUN_RECOVERING, "late end: %s still recovers the ended job 10 s "
          "after m04's record said its model was gathered", S.m[x].name);
    for (int k = 0; k < 100; k++) step();   /* and stays so (50 s) */
    CHECK(xd->run.state != POOL_RUN_RECOVERING && xd->run.state != POOL_RUN_FAILED,
          "late end: %s's run is %s after the moot recovery", S.m[x].name,
          pool_run_state_name(xd->run.state));
    int64_t n1 = (xd->has & POOL_HAS_REC) ? xd->rec.n : 0;
    CHECK(n1 == n0, "late end: %s's record counts %lld recoveries, %lld before the moot one",
          S.m[x].name, (long long)n1, (long long)n0);
    if (recovering && xd->run.state != POOL_RUN_RECOVERING)
        printf("late end: %s recovered from %s's leaving after the end until m04's record "
               "came, then stopped (run %s, recoveries %lld)\n", S.m[x].name, S.m[h].name,
               pool_run_state_name(xd->run.state), (long long)n1);
}

int main(void)
{
    S.verbose = getenv("POOL_SIM_VERBOSE") != NULL;
    sim_files("test_pool_recover", STEPS);
    S.snapshot_every = EVERY;
    /* TEST_SEED_OFFSET=N: every scenario with its seed + N (other seeds, same checks) */
    uint64_t o = getenv("TEST_SEED_OFFSET") ? strtoull(getenv("TEST_SEED_OFFSET"), NULL, 10) : 0;
    scenario_lost("middle", 11 + o, 0);
    scenario_lost("last", 12 + o, -1);
    scenario_twice("twice", 13 + o, false);
    scenario_twice("during", 14 + o, true);
    scenario_early(15 + o);
    scenario_partition(16 + o);
    scenario_late_end(21 + o);
    scenario_no_copy(17 + o);
    scenario_checkpoints(18 + o);
    scenario_checkpoint_at_end(19 + o);
    scenario_checkpoint_loss(20 + o);
    sim_done();
    printf("%s\n", failures ? "FAILED" : "test_pool_recover: ok");
    return failures != 0;
}

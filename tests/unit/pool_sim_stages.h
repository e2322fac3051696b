/* pool_sim_stages.h — the stages of pool_sim.h's simulated pools (included
 * by pool_sim.h alone, at the place of this section, after its world and
 * before its driver's execute): the committed plan's stages as one
 * simulated pipeline per epoch, their snapshots and the buddies' copies of
 * them, a stage failing when its peers are gone, the checks a RUN's pieces
 * and a PULL's pace must pass. Uses pool_sim.h's world (S, rnd, hears,
 * crash). */
#ifndef SHARDNODE_POOL_SIM_STAGES_H
#define SHARDNODE_POOL_SIM_STAGES_H

static bool sim_holds(int i, const pool_snap *x)
{
    for (int k = 0; k < S.m[i].nheld; k++)
        if (memcmp(&S.m[i].held[k], x, sizeof *x) == 0) return true;
    return false;
}

/* Into member i's snapshot folder (oldest first); a range's snapshots go
 * as the engine and the daemon remove them (snapshot_superseded, at the
 * interval of i's committed plan). */
static void sim_hold(int i, const pool_snap *x)
{
    sim_member *m = &S.m[i];
    if (sim_holds(i, x)) return;
    if (m->nheld == 32) {
        memmove(&m->held[0], &m->held[1], (size_t)(m->nheld - 1) * sizeof *m->held);
        m->nheld--;
    }
    m->held[m->nheld++] = *x;
    const pool_plan *pl = pool_core_committed(m->core);
    long h = pl ? job_snapshot_interval((long)pl->snapshot_every) : 0, steps[32];
    int same = 0;
    for (int k = 0; k < m->nheld; k++)
        if (m->held[k].layer_begin == x->layer_begin && m->held[k].layer_end == x->layer_end)
            steps[same++] = (long)m->held[k].step;
    for (int k = 0; k < m->nheld; k++)
        if (m->held[k].layer_begin == x->layer_begin && m->held[k].layer_end == x->layer_end &&
            snapshot_superseded(steps, same, (long)m->held[k].step, h,
                                (long)S.checkpoint_every)) {
            memmove(&m->held[k], &m->held[k + 1], (size_t)(m->nheld - k - 1) * sizeof *m->held);
            m->nheld--;
            k--;
        }
    /* keep them in step order: the newest last */
    for (int k = m->nheld - 1; k > 0 && m->held[k - 1].step > m->held[k].step; k--) {
        pool_snap t = m->held[k];
        m->held[k] = m->held[k - 1];
        m->held[k - 1] = t;
    }
}

static void stage_fails(int i, const char *why)
{
    sim_member *m = &S.m[i];
    m->running = false;
    m->run_failed = true;
    snprintf(m->run_error, sizeof m->run_error, "%s", why);
}

/* RUN: the stage of i's committed plan; a plan that resumes takes every
 * piece the action names from its member (i's own folder, or a member i
 * reaches that holds it). */
static void start_stage(int i, const pool_action *a)
{
    sim_member *m = &S.m[i];
    const pool_plan *pl = pool_core_committed(m->core);
    CHECK(pl && pl->epoch == a->epoch, "%s: RUN of epoch %lld, committed %lld", m->name,
          (long long)a->epoch, pl ? (long long)pl->epoch : 0LL);
    if (!pl) return;
    CHECK(pl->handover || a->step == pl->resume_step, "%s: RUN of epoch %lld after step %lld, "
          "its plan resumes after %lld", m->name, (long long)pl->epoch, (long long)a->step,
          (long long)pl->resume_step);
    m->running = true;
    m->run_failed = m->run_ok = m->handover = false;
    m->run_epoch = pl->epoch;
    m->run_from = m->run_step = a->step;
    pool_plan_free(&m->run_plan);
    pool_plan_copy(&m->run_plan, pl);
    m->broken_since = 0;
    int st = pool_plan_stage_of(pl, m->name);
    CHECK(st >= 0, "%s: RUN without a stage in epoch %lld", m->name, (long long)pl->epoch);
    if (a->step == 0 || st < 0) return;
    int b = pl->stage[st].layer_begin, e = pl->stage[st].layer_end;
    for (int l = b; l < e; l++) {
        bool cov = false;
        for (int k = 0; k < a->ntargets; k++)
            cov |= a->snaps[k].layer_begin <= l && l < a->snaps[k].layer_end &&
                   a->snaps[k].step == a->step;
        CHECK(cov, "%s: epoch %lld's stage [%d, %d) has no piece of layer %d after step %lld",
              m->name, (long long)pl->epoch, b, e, l, (long long)a->step);
    }
    for (int k = 0; k < a->ntargets; k++) {
        int j = -1;
        for (int q = 0; q < S.n; q++)
            if (strcmp(S.m[q].name, a->targets[k].name) == 0) j = q;
        if (j == i) {
            CHECK(sim_holds(i, &a->snaps[k]), "%s: resumes from its own L%d-%d-s%lld, which it "
                  "does not hold", m->name, a->snaps[k].layer_begin, a->snaps[k].layer_end,
                  (long long)a->snaps[k].step);
            continue;
        }
        if (j < 0 || !S.m[j].up || !hears(i, j) || !sim_holds(j, &a->snaps[k])) {
            stage_fails(i, "a snapshot's member is gone");
            return;
        }
        sim_hold(i, &a->snaps[k]);   /* the fetched copy stays in the folder */
    }
}

/* One step of every epoch's pipeline whose holders all run it and reach
 * each other; a stage whose peers are gone fails after the timeout. */
static void pipelines(void)
{
    for (int i = 0; i < S.n; i++) {
        sim_member *m = &S.m[i];
        if (!m->up || !m->running) continue;
        const pool_plan *cm = pool_core_committed(m->core), *pl = &m->run_plan;
        /* a recovery's commit comes with a KILL; a handover's lets the stage
         * run until it stops at a boundary */
        if (!cm || (cm->epoch != m->run_epoch && !cm->handover)) {
            stage_fails(i, "the plan moved on");
            continue;
        }
        bool whole = true;
        for (int s = 0; s < pl->nstages; s++) {
            int j = member_of(pl->stage[s].holder[0].name);
            whole &= j >= 0 && S.m[j].up && S.m[j].running && S.m[j].run_epoch == m->run_epoch &&
                     hears(i, j) && hears(j, i) && S.m[j].run_step == m->run_step;
        }
        if (!whole) {
            bool behind = false;   /* a peer that is only a step behind: it catches up */
            for (int s = 0; s < pl->nstages; s++) {
                int j = member_of(pl->stage[s].holder[0].name);
                behind |= j >= 0 && S.m[j].up && S.m[j].running &&
                          S.m[j].run_epoch == m->run_epoch && S.m[j].run_step < m->run_step;
            }
            if (behind) continue;
            if (!m->broken_since) m->broken_since = S.now;
            if (S.now - m->broken_since >= SIM_PIPE_TIMEOUT_MS)
                stage_fails(i, "lost a pipeline peer");
            continue;
        }
        m->broken_since = 0;
    }
    /* the whole pipelines advance together: the first stage's member drives */
    for (int i = 0; i < S.n; i++) {
        sim_member *m = &S.m[i];
        const pool_plan *pl = m->up && m->running ? &m->run_plan : NULL;
        if (!pl || strcmp(pl->stage[0].holder[0].name, m->name) != 0 || m->broken_since) continue;
        bool whole = true;
        for (int s = 0; s < pl->nstages && whole; s++) {
            int j = member_of(pl->stage[s].holder[0].name);
            whole = j >= 0 && S.m[j].up && S.m[j].running && !S.m[j].broken_since &&
                    S.m[j].run_epoch == m->run_epoch && S.m[j].run_step == m->run_step &&
                    hears(i, j) && hears(j, i);
        }
        if (!whole || m->run_step >= S.steps) continue;
        /* a stage asked to hand over: every stage stops here, each keeping
         * a snapshot of the step (engine.c's stop_snapshot) */
        bool stop = false;
        for (int s = 0; s < pl->nstages; s++) stop |= S.m[member_of(pl->stage[s].holder[0].name)].handover;
        if (stop) {
            for (int s = 0; s < pl->nstages; s++) {
                int j = member_of(pl->stage[s].holder[0].name);
                pool_snap x = {pl->stage[s].layer_begin, pl->stage[s].layer_end, S.m[j].run_step};
                if (x.step >= 1) sim_hold(j, &x);
                S.m[j].running = S.m[j].handover = false;
                S.m[j].run_ok = true;
            }
            S.handovers++;
            S.handed_at = m->run_step;
            S.handed_ms = S.now;
            S.resumed_ms = 0;
            continue;
        }
        int64_t done = m->run_step + 1;
        /* the step that completes a multiple n of the snapshot interval h
         * waits until another member holds each stage's snapshot of n - h,
         * when its run wrote it (engine.c's wait_copied: 30 s at most) */
        long h = job_snapshot_interval((long)pl->snapshot_every);
        bool wait = false;
        for (int s = 0; h > 0 && done % h == 0 && s < pl->nstages; s++) {
            int j = member_of(pl->stage[s].holder[0].name);
            pool_snap x;
            wait |= done - h > S.m[j].run_from && pool_core_copied(S.m[j].core, &x) &&
                    x.step != POOL_COPIED_NONE && x.step < done - h;
        }
        if (wait && !m->copy_wait_since) m->copy_wait_since = S.now;
        if (wait && S.now - m->copy_wait_since < ENGINE_COPY_WAIT_MS) continue;
        if (wait) S.copy_timeouts++;
        m->copy_wait_since = 0;
        if (done <= S.reached) S.redone++;
        if (S.handovers && done == S.handed_at + 1 && !S.resumed_ms) S.resumed_ms = S.now;
        if (done > S.reached) S.reached = done;
        if (!S.first_step) S.first_step = done;
        for (int s = 0; s < pl->nstages; s++) {
            int j = member_of(pl->stage[s].holder[0].name);
            S.m[j].run_step = done;
            if (((h > 0 && done % h == 0) ||
                 (S.checkpoint_every > 0 && done % S.checkpoint_every == 0)) && done < S.steps) {
                pool_snap x = {pl->stage[s].layer_begin, pl->stage[s].layer_end, done};
                sim_hold(j, &x);
            }
            if (done == S.steps) {
                S.m[j].running = false;
                S.m[j].run_ok = true;
            }
        }
    }
}

/* The bytes of a snapshot of layers [b, e) of SHAPE: weights and both
 * moments, with the embedding and the head where the range has them. */
static double sim_state_bytes(int b, int e)
{
    cost_bytes cb;
    char err[256];
    if (cost_bytes_compute(&cb, &SHAPE, 1, 4, err, sizeof err) != 0) return -1;
    return 12.0 * ((double)(e - b) * (double)cb.trainable[COST_LAYER] +
                   (b == 0 ? (double)cb.trainable[COST_EMBED] : 0) +
                   (e == SHAPE.layers ? (double)cb.trainable[COST_HEAD] : 0));
}

/* A buddy's copies are paced (pool_core.h, POOL_PULL_SHARE) so that all
 * the stages it keeps copies of fit that share of the planned time between
 * two snapshots, unless the floor POOL_PULL_MIN_RATE rules. Which stages a
 * member keeps copies of changes with its view (who is live, who has the
 * job's document): once that changed within the epoch, only the copy asked
 * for is checked. S.view is member m's (execute follows view_of). */
static void sim_check_pace(sim_member *m, const pool_action *a)
{
    const pool_plan *pl = pool_core_committed(m->core);
    int64_t step_ns = !pl                                         ? 0
                      : pl->has_shared && pl->step_ns_shared > 0 ? pl->step_ns_shared
                                                                  : pl->step_ns;
    long h = pl ? job_snapshot_interval((long)pl->snapshot_every) : 0;
    if (!pl || step_ns <= 0 || h <= 0) return;
    uint64_t view = 1469598103934665603ull;
    for (int q = 0; q < S.n; q++)
        view = (view ^ (uint64_t)(q * 4 + S.view[q].live * 2 + (S.view[q].doc != NULL))) *
               1099511628211ull;
    if (m->pull_epoch != pl->epoch) {
        m->pull_epoch = pl->epoch;
        m->pull_view = view;
        m->pull_churn = false;
        m->npaced = 0;
    }
    m->pull_churn |= view != m->pull_view;
    if (m->pull_churn) m->npaced = 0;
    bool known = false;
    for (int k = 0; k < m->npaced; k++)
        known |= m->paced[k].layer_begin == a->snaps[0].layer_begin &&
                 m->paced[k].layer_end == a->snaps[0].layer_end;
    if (!known && m->npaced < 8) m->paced[m->npaced++] = a->snaps[0];
    double bytes = 0, secs = POOL_PULL_SHARE * (double)h * (double)step_ns * 1e-9;
    for (int k = 0; k < m->npaced; k++)
        bytes += sim_state_bytes(m->paced[k].layer_begin, m->paced[k].layer_end);
    CHECK(a->rate == POOL_PULL_MIN_RATE ||
              (a->rate > 0 && bytes / (double)a->rate <= secs * 1.001),
          "%s: copies of %d stages (%.0f bytes) at %lld bytes/s take over %.2f s, the share "
          "of %ld steps of %.1f ms", m->name, m->npaced, bytes, (long long)a->rate, secs, h,
          (double)step_ns * 1e-6);
}

#endif

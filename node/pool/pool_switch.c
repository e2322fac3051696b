/* pool_switch.c — planned switches inside the pool core (docs/ARCHITECTURE.md,
 * "Planned switches"; docs/PROTOCOL.md, "Planned switches"). While a plan
 * runs, every member computes the plan over its view (pool_elect.c). When
 * that plan differs from the running one and the rule says it is worth it —
 * a holder left, or the plan is predicted replan_gain faster under the same
 * profiles, the running plan has done replan_min_steps, and the time it
 * saves over the steps left pays for moving the layers — the member votes
 * for it in the next epoch, marked as a switch ("sw"). The committed plan is
 * a handover ("ho"): the running stages stop together at the next step
 * boundary, each keeping its state as a snapshot of that step, and the new
 * stages start after that step from those snapshots: nothing is redone. A
 * handover that cannot finish (an old holder lost, or POOL_HANDOVER_MS
 * passed) falls back to a recovery (pool_recover.c). Pure: the core's
 * actions carry every effect. */
#include "pool_core_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every holder of pl is live and runs it (its document commits pl's epoch
 * and says running); *at: the furthest step any of them did. */
static bool plan_running(const pool_core *c, const pool_plan *pl, const pool_member *m, int n,
                         int64_t *at)
{
    *at = 0;
    for (int s = 0; s < pl->nstages; s++)
        for (int k = 0; k < pl->stage[s].nholders; k++) {
            const pool_member *q = core_named(m, n, pl->stage[s].holder[k].name);
            const pool_doc *d = q && q->live ? core_doc_of(c, q) : NULL;
            if (!d || !(d->has & POOL_HAS_COMMITTED) || d->committed.epoch != pl->epoch ||
                !(d->has & POOL_HAS_RUN) || d->run.state != POOL_RUN_RUNNING)
                return false;
            if (d->run.has_step && d->run.step > *at) *at = d->run.step;
        }
    return true;
}

/* The same stages on the same members at the same micro-batch. */
static bool same_layout(const pool_plan *a, const pool_plan *b)
{
    if (a->mb != b->mb || a->nstages != b->nstages) return false;
    for (int s = 0; s < a->nstages; s++) {
        const pool_stage *x = &a->stage[s], *y = &b->stage[s];
        if (x->layer_begin != y->layer_begin || x->layer_end != y->layer_end ||
            x->nholders != y->nholders)
            return false;
        for (int k = 0; k < x->nholders; k++)
            if (strcmp(x->holder[k].name, y->holder[k].name) != 0) return false;
    }
    return true;
}

/* Why the plan over the view differs from the running one: a holder no
 * longer computes with the job (it leaves), or the new plan names a member
 * that was not in the view the running plan was voted in (it joined since;
 * a member that was there and held nothing is taken in because the
 * profiles changed), or else the profiles changed. */
static pool_switch_why why_switch(const pool_core *c, const pool_plan *pl, const pool_member *m,
                                  int n)
{
    for (int s = 0; s < pl->nstages; s++) {
        const pool_member *q = core_named(m, n, pl->stage[s].holder[0].name);
        const pool_doc *d = q && q->live ? core_doc_of(c, q) : NULL;
        if (!d || !d->compute || !d->any || !(d->has & POOL_HAS_PROF)) return POOL_SW_LEFT;
    }
    for (int s = 0; s < c->layout.nstages; s++) {
        const char *h = c->layout.stage[s].holder[0].name;
        /* the running plan's view unknown here (a restart): any new holder */
        if (pool_plan_stage_of(pl, h) < 0 &&
            (pl->members.n == 0 || !pool_names_has(&pl->members, h)))
            return POOL_SW_JOINED;
    }
    return POOL_SW_SLOWED;
}

/* The bytes the new plan's members fetch: of each new stage, the state of
 * the layers its member did not hold in the old plan. */
static int64_t moved_bytes(const pool_core *c, const pool_plan *old, const pool_plan *neu)
{
    int64_t bytes = 0;
    for (int s = 0; s < neu->nstages; s++) {
        int b = neu->stage[s].layer_begin, e = neu->stage[s].layer_end;
        int64_t all = core_state_bytes(c, b, e), kept = 0;
        int o = pool_plan_stage_of(old, neu->stage[s].holder[0].name);
        if (o >= 0) {
            int ob = old->stage[o].layer_begin > b ? old->stage[o].layer_begin : b;
            int oe = old->stage[o].layer_end < e ? old->stage[o].layer_end : e;
            if (ob < oe) kept = core_state_bytes(c, ob, oe);
        }
        if (all > kept) bytes += all - kept;
    }
    return bytes;
}

/* What a switch costs besides moving its layers, in seconds: measured at
 * the pool's last switch that some live member recorded (its seconds from
 * the commit to the first step after it, less its MB over the link's
 * bandwidth bw now; the largest of the records of that switch), at least
 * POOL_SWITCH_MIN_S; else POOL_SWITCH_PAUSE_MS, a guess, before the job's
 * first switch. */
static double switch_fixed_s(const pool_core *c, const pool_member *m, int n, int64_t bw)
{
    const pool_switch_rec *last = NULL;
    for (int i = 0; i < n; i++) {
        const pool_doc *d = m[i].live ? core_doc_of(c, &m[i]) : NULL;
        if (!d || !(d->has & POOL_HAS_SWR) || d->swr.ms < 0) continue;
        if (!last || d->swr.epoch > last->epoch ||
            (d->swr.epoch == last->epoch && d->swr.ms > last->ms))
            last = &d->swr;
    }
    if (!last) return POOL_SWITCH_PAUSE_MS / 1e3;
    double s = (double)last->ms / 1e3 - last->mb * 1e6 / (double)(bw > 0 ? bw : POOL_DEFAULT_BW);
    return s < POOL_SWITCH_MIN_S ? POOL_SWITCH_MIN_S : s;
}

/* The rule for a switch that no loss or leave forces (docs/ARCHITECTURE.md,
 * "Planned switches"); note says why, either way. */
static bool worth_it(pool_core *c, const pool_member *m, int n, const pool_plan *pl, int64_t at,
                     char *note, size_t len)
{
    int64_t done = at - c->epoch_from;
    if (done < c->replan_min_steps) {
        snprintf(note, len, "the running plan has done %lld of the %lld steps replan_min_steps "
                 "asks before a switch", (long long)done, (long long)c->replan_min_steps);
        return false;
    }
    int64_t bw = 0;
    int64_t old_ns = core_plan_step_now(c, m, n, pl, &bw);
    int64_t new_ns = c->layout.has_shared && c->layout.step_ns_shared > 0
                         ? c->layout.step_ns_shared
                         : c->layout.step_ns;
    if (old_ns <= 0 || new_ns <= 0) {
        /* the running plan no longer fits the profiles: any plan that does */
        snprintf(note, len, "the running plan does not fit its members' profiles any more");
        return true;
    }
    double gain = 1.0 - (double)new_ns / (double)old_ns;
    if (gain < c->replan_gain) {
        snprintf(note, len, "the plan over the view is %.0f%% faster (%.1f against %.1f ms a "
                 "step); replan_gain is %.0f%%", 100 * gain, (double)new_ns * 1e-6,
                 (double)old_ns * 1e-6, 100 * c->replan_gain);
        return false;
    }
    int64_t bytes = moved_bytes(c, pl, &c->layout);
    double fixed_s = switch_fixed_s(c, m, n, bw);
    double cost_s = (double)bytes / (double)(bw > 0 ? bw : POOL_DEFAULT_BW) + fixed_s;
    int64_t left = c->steps > at ? c->steps - at : 0;
    double save_s = (double)left * (double)(old_ns - new_ns) * 1e-9;
    if (save_s <= cost_s) {
        snprintf(note, len, "the plan over the view is %.0f%% faster (%.1f against %.1f ms a "
                 "step) but would save %.1f s over the %lld steps left, less than the %.1f s "
                 "a switch costs (%.1f MB to move)", 100 * gain, (double)new_ns * 1e-6,
                 (double)old_ns * 1e-6, save_s, (long long)left, cost_s, (double)bytes / 1e6);
        return false;
    }
    snprintf(note, len, "the plan over the view is %.0f%% faster (%.1f against %.1f ms a step) "
             "and saves %.1f s over the %lld steps left; moving %.1f MB costs about %.1f s",
             100 * gain, (double)new_ns * 1e-6, (double)old_ns * 1e-6, save_s, (long long)left,
             (double)bytes / 1e6, cost_s);
    return true;
}

/* A reason without its figures (digits, dots, signs): the same reason with
 * other figures is not logged again. Before, the key was the reason's first
 * 20 characters, the same for every reason that gives figures. */
static void stay_key(const char *note, char *key, size_t len)
{
    size_t k = 0;
    for (const char *p = note; *p && k + 1 < len; p++)
        if (!(*p >= '0' && *p <= '9') && *p != '.' && *p != '-' && *p != '+') key[k++] = *p;
    key[k] = 0;
}

void core_switch_watch(pool_core *c, const pool_member *m, int n, int64_t now,
                       pool_actions *out)
{
    const pool_plan *pl = pool_core_committed(c);
    int64_t at;
    if (!pl || c->doc.stop || !c->job_loaded || c->vote_pending ||
        (pl->handover && c->handed_epoch != pl->epoch) || !plan_running(c, pl, m, n, &at))
        return;
    if (!core_view(c, m, n, now) || !c->plan) return;
    if (same_layout(&c->layout, pl)) {
        c->switching = POOL_SW_NONE;
        c->stay[0] = 0;
        /* a member that computes and holds nothing says why (before, it
         * said nothing, or an earlier reason that no longer held) */
        char note[POOL_DOC_TEXT_MAX] = "";
        if (c->doc.compute && pool_plan_stage_of(pl, c->name) < 0)
            snprintf(note, sizeof note, "the plan over the view is the running one (%.1f ms a "
                     "step): no plan that gives %s layers is faster",
                     1e-6 * (double)(pl->has_shared && pl->step_ns_shared > 0 ? pl->step_ns_shared
                                                                              : pl->step_ns),
                     c->name);
        if (strcmp(c->doc.why, note) != 0) {
            snprintf(c->doc.why, sizeof c->doc.why, "%s", note);
            c->dirty = true;
        }
        return;
    }
    pool_switch_why why = why_switch(c, pl, m, n);
    /* another member votes for this view's plan as a switch from this
     * epoch: the plan is a function of the view, so this member joins it
     * (its own figures may lag by a dissemination) */
    bool follow = false;
    for (int i = 0; i < n && !follow; i++) {
        const pool_doc *d = m[i].self || !m[i].live ? NULL : core_doc_of(c, &m[i]);
        if (d && (d->has & POOL_HAS_VOTE) && d->vote.sw != POOL_SW_NONE &&
            d->vote.v.base == pl->epoch && d->vote.v.base_plan == pl->hash &&
            d->vote.v.view == c->view && d->vote.v.plan == c->plan) {
            follow = true;
            why = d->vote.sw;
        }
    }
    char note[POOL_DOC_TEXT_MAX];
    snprintf(note, sizeof note, "%s", why == POOL_SW_LEFT ? "a holder leaves" : "");
    bool go = why == POOL_SW_LEFT || worth_it(c, m, n, pl, at, note, sizeof note) || follow;
    /* what status shows beside the plan: why it stays, or why it switches */
    if (strcmp(c->doc.why, note) != 0) {
        snprintf(c->doc.why, sizeof c->doc.why, "%s", note);
        c->dirty = true;
    }
    if (!go) {
        /* logged once per reason (the figures move with every step) */
        char key[sizeof c->stay];
        stay_key(note, key, sizeof key);
        if (strcmp(key, c->stay) != 0) {
            snprintf(c->stay, sizeof c->stay, "%s", key);
            core_log(out, "pool: the plan of epoch %lld stays: %s", (long long)pl->epoch, note);
        }
        c->switching = POOL_SW_NONE;
        return;
    }
    if (c->switching == POOL_SW_NONE)
        core_log(out, "pool: at step %lld, a switch from epoch %lld (%s): %s%s", (long long)at,
                 (long long)pl->epoch, pool_switch_why_name(why), note,
                 follow ? " (another member voted for it)" : "");
    c->switching = why;
    c->stay[0] = 0;
}

/* Whether this member knows the plan that handover plan pl replaces
 * (c->prev): not after a restart during the handover. */
static bool prev_known(const pool_core *c, const pool_plan *pl)
{
    return c->prev.epoch > 0 && c->prev.epoch < pl->epoch;
}

/* Whether the stages of c->prev have all handed over, for the handover
 * plan pl: 0 with the step (every one stopped after it, and its snapshots
 * cover the model among the live members); 1 while waiting; -1 when it
 * cannot finish (lost names the member). */
static int handed(pool_core *c, const pool_member *m, int n, const pool_plan *pl, int64_t *step,
                  char *lost, size_t len)
{
    const pool_plan *pv = &c->prev;
    /* the plan handed over from, when this member knows it */
    int np = prev_known(c, pl) ? pv->nstages : 0;
    int64_t t = -1;
    bool wait = false;
    /* a member that learnt the step says it in its record of the switch:
     * the old holders that start new stages no longer say "handed" */
    for (int i = 0; i < n && t < 0; i++) {
        const pool_doc *d = m[i].live ? core_doc_of(c, &m[i]) : NULL;
        if (d && (d->has & POOL_HAS_SWR) && d->swr.epoch == pl->epoch) t = d->swr.from;
    }
    for (int s = 0; t < 0 && s < np; s++)
        for (int k = 0; k < pv->stage[s].nholders; k++) {
            const char *h = pv->stage[s].holder[k].name;
            const pool_member *q = core_named(m, n, h);
            if (!q || !q->live) {
                snprintf(lost, len, "%s", h);
                return -1;
            }
            const pool_doc *d = core_doc_of(c, q);
            if (!d || !(d->has & POOL_HAS_COMMITTED) || d->committed.epoch != pl->epoch ||
                !(d->has & POOL_HAS_RUN)) {
                wait = true;
                continue;
            }
            if (d->run.state == POOL_RUN_FAILED) {
                snprintf(lost, len, "%s", h);
                return -1;
            }
            if (d->run.state != POOL_RUN_HANDED || !d->run.has_step) {
                wait = true;
                continue;
            }
            if (t >= 0 && d->run.step != t) {
                lost[0] = 0;   /* stopped at different steps: the pipeline broke */
                return -1;
            }
            t = d->run.step;
        }
    if (wait || t < 0) return 1;
    if (t == 0) {   /* stopped before the first step: the new stages start afresh */
        *step = 0;
        return 0;
    }
    int *in = malloc((size_t)(n > 0 ? n : 1) * sizeof *in), k = 0;
    if (!in) return 1;
    for (int i = 0; i < n; i++)
        if (m[i].live && core_doc_of(c, &m[i])) in[k++] = i;
    bool ok = core_covered(c, m, in, k, c->shape.layers, t, NULL, 0);
    free(in);
    if (!ok) return 1;
    *step = t;
    return 0;
}

/* Why the switch to pl was made: this member's vote for it, else another
 * member's record of it or vote for it (a vote for another plan in the
 * same epoch says nothing of this one). */
static pool_switch_why why_of(const pool_core *c, const pool_member *m, int n,
                              const pool_plan *pl)
{
    if (c->switch_why != POOL_SW_NONE) return c->switch_why;
    for (int i = 0; i < n; i++) {
        const pool_doc *d = core_doc_of(c, &m[i]);
        if (d && (d->has & POOL_HAS_SWR) && d->swr.epoch == pl->epoch) return d->swr.why;
        if (d && (d->has & POOL_HAS_VOTE) && d->vote.v.epoch == pl->epoch &&
            d->vote.v.plan == pl->hash && d->vote.sw != POOL_SW_NONE)
            return d->vote.sw;
    }
    return POOL_SW_SLOWED;
}

/* This member's record of the switch to pl, which starts after `step`. */
static void record(pool_core *c, const pool_member *m, int n, const pool_plan *pl, int64_t step)
{
    pool_switch_rec *r = &c->doc.swr;
    int64_t count = (c->doc.has & POOL_HAS_SWR) ? r->n : 0;
    double old = 0;
    for (int s = 0; s < c->prev.nstages; s++) {
        const pool_member *q = core_named(m, n, c->prev.stage[s].holder[0].name);
        const pool_doc *d = q ? core_doc_of(c, q) : NULL;
        if (d && (d->has & POOL_HAS_RUN) && d->run.has_step_ms && d->run.step_ms > old)
            old = d->run.step_ms;
    }
    *r = (pool_switch_rec){.epoch = pl->epoch,
                           .from = step,
                           .ms = -1,
                           .n = count + 1,
                           .why = why_of(c, m, n, pl),
                           .mb = c->prev.nstages ? (double)moved_bytes(c, &c->prev, pl) / 1e6 : 0,
                           .pred_ms = (double)(pl->has_shared && pl->step_ns_shared > 0
                                                   ? pl->step_ns_shared
                                                   : pl->step_ns) * 1e-6,
                           .old_ms = old};
    c->doc.has |= POOL_HAS_SWR;
}

void core_switch_progress(pool_core *c, const pool_member *m, int n, int64_t now)
{
    pool_switch_rec *r = &c->doc.swr;
    const pool_plan *pl = pool_core_committed(c);
    if (!(c->doc.has & POOL_HAS_SWR) || r->ms >= 0 || !pl || r->epoch != pl->epoch) return;
    /* the first step after the handover's, by any stage of the new epoch */
    if (core_stepped_after(c, m, n, r->epoch, r->from)) {
        r->ms = now - c->handover_ms;
        c->dirty = true;
    }
}

void core_handover(pool_core *c, const pool_member *m, int n, int64_t now, pool_actions *out)
{
    const pool_plan *pl = pool_core_committed(c);
    if (!pl || !pl->handover || c->handed_epoch == pl->epoch || c->doc.stop) return;
    if (!c->handover_ms) c->handover_ms = now;
    int64_t step = -1;
    char lost[MESH_NAME_MAX] = "";
    int st = 1;
    if (prev_known(c, pl)) {
        /* this member's stage of the plan handed over stops at the next
         * step boundary, with every other (one stage's wish stops them all) */
        if (c->run_pending && c->run_epoch == c->prev.epoch &&
            (!c->handover_asked || now - c->handover_ask_ms >= POOL_HANDOVER_ASK_MS)) {
            /* asked again until the stage ends: a stage still starting
             * ignores the request */
            pool_action *a = core_act(out, POOL_ACT_HANDOVER);
            if (a) a->epoch = c->prev.epoch;
            if (!c->handover_asked)
                core_log(out, "pool: epoch %lld switches from epoch %lld: this stage stops at "
                         "the next step and hands its layers over", (long long)pl->epoch,
                         (long long)c->prev.epoch);
            c->handover_asked = true;
            c->handover_ask_ms = now;
        }
    }
    /* The plan handed over from may be unknown here (this member restarted
     * during the handover): then only another member's record of the switch
     * says the step (handed() reads those first), which it waits for, or
     * for the bound. Before, such a member waited out the bound whatever
     * the others had recorded, and the pool fell back to a recovery. */
    st = handed(c, m, n, pl, &step, lost, sizeof lost);
    if (st == 0) {
        c->handed_epoch = pl->epoch;
        c->handed_step = c->epoch_from = step;
        record(c, m, n, pl, step);
        c->dirty = c->urgent = true;
        if (prev_known(c, pl))
            core_log(out, "pool: the stages of epoch %lld handed over after step %lld; epoch "
                     "%lld starts there", (long long)c->prev.epoch, (long long)step,
                     (long long)pl->epoch);
        else
            core_log(out, "pool: the stages of the plan epoch %lld replaces handed over after "
                     "step %lld (the others' record of the switch); it starts there",
                     (long long)pl->epoch, (long long)step);
        return;
    }
    if (st > 0 && now - c->handover_ms < POOL_HANDOVER_MS) return;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const pool_doc *d = core_doc_of(c, &m[i]);
        if (d && (d->has & POOL_HAS_RUN) && d->run.has_step && d->run.step > at) at = d->run.step;
    }
    core_log(out, "pool: the handover to epoch %lld %s", (long long)pl->epoch,
             st < 0 ? "cannot finish" : "did not finish in time");
    c->handover_asked = false;
    core_recover(c, pl, lost, at, now, out);
}

/* This member's stage of the committed plan finished the job, and the
 * model is not gathered yet: its stage file is still needed. */
static bool ungathered(const pool_core *c, const pool_plan *pl, const pool_member *m, int n)
{
    return pl && pool_plan_stage_of(pl, c->name) >= 0 && (c->doc.has & POOL_HAS_RUN) &&
           c->doc.run.state == POOL_RUN_DONE && !c->doc.stop && !core_gathered(c, m, n);
}

bool pool_core_depart(pool_core *c, const pool_member *m, int n)
{
    c->no_compute = true;
    if (c->doc.compute) {
        c->doc.compute = false;
        c->dirty = c->urgent = true;
    }
    const pool_plan *pl = pool_core_committed(c);
    if (!pl) return false;
    if (ungathered(c, pl, m, n)) return true;
    /* it holds layers the pool still needs: a stage of the running plan,
     * or one of the plan a committed handover replaces (the new holders
     * take its state from this member's snapshots). Before, a member told
     * to leave after a handover that gives its layers away was committed,
     * and before the new stages had them, was let go at once, and the pool
     * recovered without it. */
    bool held = c->run_pending || pool_plan_stage_of(pl, c->name) >= 0 ||
                (pl->handover && prev_known(c, pl) && pool_plan_stage_of(&c->prev, c->name) >= 0);
    return held && !pool_core_departed(c, m, n);   /* a run no longer active: departed */
}

bool pool_core_departed(const pool_core *c, const pool_member *m, int n)
{
    const pool_plan *pl = pool_core_committed(c);
    if (ungathered(c, pl, m, n)) return false;
    if (!pl || !pool_core_run_active(c, m, n)) return true;
    if (c->run_pending || pool_plan_stage_of(pl, c->name) >= 0 ||
        (pl->handover && c->handed_epoch != pl->epoch))
        return false;
    /* every stage of the plan without it runs past the step it started
     * after: its state no longer comes from this member's snapshots */
    for (int s = 0; s < pl->nstages; s++)
        for (int k = 0; k < pl->stage[s].nholders; k++) {
            const pool_member *q = core_named(m, n, pl->stage[s].holder[k].name);
            const pool_doc *d = q && q->live ? core_doc_of(c, q) : NULL;
            if (!d || !(d->has & POOL_HAS_COMMITTED) || d->committed.epoch != pl->epoch ||
                !(d->has & POOL_HAS_RUN) || !d->run.has_step || d->run.step <= c->epoch_from ||
                (d->run.state != POOL_RUN_RUNNING && d->run.state != POOL_RUN_DONE))
                return false;
        }
    return true;
}

/* ---- a stage's pace ---- */

static double median_of(const double *x, int n)
{
    double v[POOL_PACE_STEPS];
    memcpy(v, x, (size_t)n * sizeof *v);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The base is what the stage computes at when it starts under the profile
 * the plan was made with; its own later steps are judged against it, not
 * against the profile's absolute figures, which a stage sharing a
 * machine's cores with others never meets (docs/ARCHITECTURE.md, "Planned
 * switches"). */
void core_pace_sample(pool_core *c, double compute_ms)
{
    if (!(compute_ms > 0) || c->pace_due > 0) return;
    int k = c->npace++ - POOL_PACE_SKIP;
    if (k < 0) return;
    if (k < POOL_PACE_BASE) {
        c->pace[k] = compute_ms;
        if (k == POOL_PACE_BASE - 1) c->pace_base = median_of(c->pace, POOL_PACE_BASE);
        return;
    }
    k -= POOL_PACE_BASE;
    c->pace[k % POOL_PACE_STEPS] = compute_ms;
    if (k + 1 < POOL_PACE_STEPS || !(c->pace_base > 0)) return;
    int slow = 0, fast = 0;
    for (int i = 0; i < POOL_PACE_STEPS; i++) {
        slow += c->pace[i] >= (1 + POOL_PACE_OFF) * c->pace_base;
        fast += c->pace[i] * (1 + POOL_PACE_OFF) <= c->pace_base;
    }
    if (slow < POOL_PACE_HITS && fast < POOL_PACE_HITS) return;
    c->pace_now = median_of(c->pace, POOL_PACE_STEPS);
    double f = c->pace_now / c->pace_base;
    c->pace_due = f < 0.125 ? 0.125 : f > 8 ? 8 : f;
}

static int64_t scaled(int64_t ns, double f)
{
    double v = (double)ns * f;
    return v < 1 ? 1 : v > 1e15 ? (int64_t)1e15 : (int64_t)(v + 0.5);
}

void core_pace_scale(pool_core *c, double f)
{
    cost_profile *p = &c->doc.prof.prof;
    for (int u = 0; u < COST_UNITS; u++) {
        p->fwd_ns[u] = scaled(p->fwd_ns[u], f);
        p->bwd_ns[u] = scaled(p->bwd_ns[u], f);
        p->opt_ns[u] = scaled(p->opt_ns[u], f);
    }
    c->dirty = true;
    c->pace_due = 0;
    /* the profile now predicts what the stage should measure: the base
     * moves with it (no base yet: the steps so far were at the old pace) */
    if (c->pace_base > 0) {
        c->pace_base *= f;
        c->npace = POOL_PACE_SKIP + POOL_PACE_BASE;
    } else {
        c->npace = 0;
    }
}

void core_pace(pool_core *c, pool_actions *out)
{
    if (!(c->pace_due > 0)) return;
    double f = c->pace_due, was = c->pace_base;
    c->pace_due = 0;
    if (!(c->doc.has & POOL_HAS_PROF)) return;
    core_pace_scale(c, f);
    const cost_profile *p = &c->doc.prof.prof;
    c->paced++;
    core_log(out, "pool: this stage computed %.0f%% %s than its profile said over the last %d "
             "steps (median %.1f against %.1f ms a step): its profile now says so (layer "
             "forward %.2f ms, backward %.2f ms)", 100 * (f > 1 ? f - 1 : 1 - f),
             f > 1 ? "slower" : "faster", POOL_PACE_STEPS, c->pace_now, was,
             (double)p->fwd_ns[COST_LAYER] * 1e-6,
             (double)p->bwd_ns[COST_LAYER] * 1e-6);
}

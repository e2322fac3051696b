/* pool_recover.c — recovery inside the pool core (docs/ARCHITECTURE.md,
 * "Recovery"; docs/PROTOCOL.md, "Recovery"): each stage's snapshots and the
 * buddy that keeps a copy of them, the loss of a stage holder (dead in the
 * member view, or the pipeline broken), the new epoch voted over the
 * survivors (pool_elect.c), the step it resumes after, and where each
 * stage's layers come from. Pure: the core's actions carry every effect. */
#include "pool_core_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const pool_member *core_named(const pool_member *m, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(m[i].name, name) == 0) return &m[i];
    return NULL;
}

/* What member q says about the job: this member's own document for itself. */
const pool_doc *core_doc_of(const pool_core *c, const pool_member *q)
{
    if (q->self) return &c->doc;
    return core_doc_job(q, c->doc.id) ? q->doc : NULL;
}

static bool holds_stage(const pool_plan *pl, const char *name)
{
    return pool_plan_stage_of(pl, name) >= 0;
}

/* ---- the loss ---- */

/* Every holder of the plan says its stage is done. */
static bool all_done(const pool_core *c, const pool_plan *pl, const pool_member *m, int n)
{
    for (int s = 0; s < pl->nstages; s++)
        for (int k = 0; k < pl->stage[s].nholders; k++) {
            const pool_member *q = core_named(m, n, pl->stage[s].holder[k].name);
            const pool_doc *d = q ? core_doc_of(c, q) : NULL;
            if (!d || !(d->has & POOL_HAS_RUN) || d->run.state != POOL_RUN_DONE ||
                !(d->has & POOL_HAS_COMMITTED) || d->committed.epoch != pl->epoch)
                return false;
        }
    return true;
}

bool core_gathered(const pool_core *c, const pool_member *m, int n)
{
    for (int i = 0; i < n; i++) {
        const pool_doc *d = core_doc_of(c, &m[i]);
        if (d && (d->has & POOL_HAS_RUN) && d->run.gathered == 1) return true;
    }
    return false;
}

bool core_behind(const pool_core *c, const pool_member *m, int n)
{
    const pool_plan *pl = pool_core_committed(c);
    for (int i = 0; pl && i < n; i++) {
        const pool_doc *d = m[i].self || !m[i].live ? NULL : core_doc_of(c, &m[i]);
        if (d && (d->has & POOL_HAS_COMMITTED) && d->committed.epoch > pl->epoch) return true;
    }
    return false;
}

/* Why the committed plan can no longer run: a holder that is gone (its
 * name in lost), this member's stage failed (the pipeline broke), or
 * another member recovers from this epoch already. */
static bool lost_stage(pool_core *c, const pool_plan *pl, const pool_member *m, int n,
                       char *lost, size_t len)
{
    lost[0] = 0;
    for (int s = 0; s < pl->nstages; s++)
        for (int k = 0; k < pl->stage[s].nholders; k++) {
            const pool_member *q = core_named(m, n, pl->stage[s].holder[k].name);
            if (!q || !q->live) {
                snprintf(lost, len, "%s", pl->stage[s].holder[k].name);
                return true;
            }
        }
    if (c->run_epoch == pl->epoch && (c->doc.has & POOL_HAS_RUN) &&
        c->doc.run.state == POOL_RUN_FAILED && !c->run_pending)
        return true;
    for (int i = 0; i < n; i++) {
        const pool_doc *d = m[i].self || !m[i].live ? NULL : core_doc_of(c, &m[i]);
        if (!d) continue;
        bool same = (d->has & POOL_HAS_COMMITTED) && d->committed.epoch == pl->epoch;
        if (same && (d->has & POOL_HAS_RUN) && d->run.state == POOL_RUN_RECOVERING) {
            if (d->has & POOL_HAS_REC) snprintf(lost, len, "%s", d->rec.lost);
            return true;
        }
        /* another member votes to recover from this epoch (a vote for a
         * planned switch, "sw", is no loss: pool_switch.c) */
        if ((d->has & POOL_HAS_VOTE) && d->vote.v.epoch > pl->epoch &&
            d->vote.v.base == pl->epoch && d->vote.v.base_plan == pl->hash &&
            d->vote.sw == POOL_SW_NONE)
            return true;
    }
    return false;
}

#define POOL_FUTILE_MAX 3   /* recoveries in a row with no step done: the job fails */

void core_watch(pool_core *c, const pool_member *m, int n, int64_t now, pool_actions *out)
{
    core_fill_base(c, m, n);
    const pool_plan *pl = pool_core_committed(c);
    char lost[MESH_NAME_MAX];
    /* a member that restarted behind the others takes their later commit
     * (core_elect) rather than recovering from the epoch it missed */
    /* nor after the model was gathered: a holder that goes then takes
     * nothing the job still needs */
    if (!pl || c->recovering || c->layers_lost || core_behind(c, m, n) ||
        all_done(c, pl, m, n) || core_gathered(c, m, n) ||
        !lost_stage(c, pl, m, n, lost, sizeof lost))
        return;
    if (c->futile >= POOL_FUTILE_MAX) {
        if (!(c->doc.has & POOL_HAS_RUN) || c->doc.run.state != POOL_RUN_FAILED ||
            !strstr(c->doc.run.error, "recoveries")) {
            char e[POOL_DOC_TEXT_MAX];
            snprintf(e, sizeof e, "%d recoveries in a row did no step; the job fails (%.300s)",
                     c->futile, c->doc.run.error);
            core_kill(c, out);
            core_set_run(c, POOL_RUN_FAILED, e);
            core_log(out, "pool: %s", e);
        }
        return;
    }
    /* the step the run reached: the furthest any stage says */
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const pool_doc *d = core_doc_of(c, &m[i]);
        if (d && (d->has & POOL_HAS_RUN) && d->run.has_step && d->run.step > at &&
            (d->has & POOL_HAS_COMMITTED) && d->committed.epoch == pl->epoch)
            at = d->run.step;
    }
    core_recover(c, pl, lost, at, now, out);
}

void core_recover(pool_core *c, const pool_plan *pl, const char *lost, int64_t at, int64_t now,
                  pool_actions *out)
{
    c->recovering = true;
    c->rec_base = pl->epoch;
    c->loss_ms = now;
    c->futile++;
    core_kill(c, out);
    c->rec_before = c->doc.rec;
    c->rec_before_has = (c->doc.has & POOL_HAS_REC) != 0;
    c->run_before = (c->doc.has & POOL_HAS_RUN) ? c->doc.run.state : POOL_RUN_NONE;
    pool_recovery *r = &c->doc.rec;
    int64_t count = (c->doc.has & POOL_HAS_REC) ? r->n : 0;
    memset(r, 0, sizeof *r);
    snprintf(r->lost, sizeof r->lost, "%s", lost);
    r->at = at;
    r->n = count + 1;
    r->ms = -1;
    c->doc.has |= POOL_HAS_REC;
    if (holds_stage(pl, c->name) || (c->doc.has & POOL_HAS_RUN))
        core_set_run(c, POOL_RUN_RECOVERING, NULL);
    c->dirty = true;
    /* the view and its plan are made anew, over the survivors */
    c->view_fp = 0;
    c->plan_done = false;
    core_log(out, "pool: %s%s at step %lld of epoch %lld: recovering in a new epoch",
             lost[0] ? "lost " : "the pipeline broke", lost, (long long)at,
             (long long)pl->epoch);
}

void core_moot(pool_core *c, const pool_member *m, int n, pool_actions *out)
{
    if (!c->recovering || !core_gathered(c, m, n)) return;
    char lost[MESH_NAME_MAX];
    snprintf(lost, sizeof lost, "%s", c->doc.rec.lost);
    int64_t at = c->doc.rec.at;
    c->recovering = false;
    c->layers_lost = false;
    c->lost_since_ms = 0;
    if (c->futile > 0) c->futile--;
    c->doc.rec = c->rec_before;
    if (!c->rec_before_has) c->doc.has &= ~POOL_HAS_REC;
    if ((c->doc.has & POOL_HAS_RUN) && c->doc.run.state == POOL_RUN_RECOVERING)
        c->doc.run.state = c->run_before;
    c->dirty = true;
    core_log(out, "pool: the job's model was gathered: %s%s at step %lld needs no recovery",
             lost[0] ? "the loss of " : "the broken pipeline", lost, (long long)at);
}

void core_recovered(pool_core *c, int64_t now, pool_actions *out)
{
    const pool_plan *pl = pool_core_committed(c);
    /* lost layers fail the job once the view that says so has held for a
     * while: a member only briefly unseen may come back with its copies */
    if (c->layers_lost && !c->lost_since_ms) c->lost_since_ms = now;
    if (!c->layers_lost) c->lost_since_ms = 0;
    if (c->layers_lost && now - c->lost_since_ms >= 2 * POOL_QUIET_MS) {
        c->recovering = false;
        core_set_run(c, POOL_RUN_FAILED, c->doc.why);
        core_log(out, "pool: the job fails: %s", c->doc.why);
        return;
    }
    if (!pl || pl->epoch <= c->rec_base) return;
    c->recovering = false;
    c->doc.rec.epoch = pl->epoch;
    c->doc.rec.from = pl->resume_step;
    c->dirty = true;
    core_log(out, "pool: recovered in epoch %lld: %d stages resume after step %lld "
             "(%lld steps redone)", (long long)pl->epoch, pl->nstages,
             (long long)pl->resume_step,
             (long long)(c->doc.rec.at > pl->resume_step ? c->doc.rec.at - pl->resume_step : 0));
}

bool core_stepped_after(const pool_core *c, const pool_member *m, int n, int64_t epoch,
                        int64_t from)
{
    for (int i = 0; i < n; i++) {
        const pool_doc *d = core_doc_of(c, &m[i]);
        if (d && (d->has & POOL_HAS_RUN) && (d->has & POOL_HAS_COMMITTED) &&
            d->committed.epoch == epoch && d->run.has_step && d->run.step > from &&
            (d->run.state == POOL_RUN_RUNNING || d->run.state == POOL_RUN_DONE))
            return true;
    }
    return false;
}

void core_rec_progress(pool_core *c, const pool_member *m, int n, int64_t now)
{
    pool_recovery *r = &c->doc.rec;
    if (!(c->doc.has & POOL_HAS_REC) || r->ms >= 0 || !r->epoch) return;
    /* the first step done after the resumed one, by any stage of the new
     * epoch (this member's own, or as another's document says it) */
    if (core_stepped_after(c, m, n, r->epoch, r->from)) {
        r->ms = now - c->loss_ms;
        c->futile = 0;
        c->dirty = true;
    }
}

/* ---- the resume step ---- */

/* Whether the snapshots of step `step` (-1: of any step) among the members
 * in[0..k) cover a model of L layers; what they miss written into miss (the embedding, the
 * layers, the head) when it is not NULL. */
bool core_covered(const pool_core *c, const pool_member *m, const int *in, int k, int L,
                  int64_t step, char *miss, size_t len)
{
    /* have[0]: the embedding, have[1 + l]: layer l, have[L + 1]: the head */
    unsigned char *have = calloc((size_t)L + 2, 1);
    if (!have) return false;
    for (int i = 0; i < k; i++) {
        const pool_doc *d = core_doc_of(c, &m[in[i]]);
        for (int j = 0; d && j < d->snaps.n; j++) {
            const pool_snap *s = &d->snaps.s[j];
            if ((step >= 0 && s->step != step) || s->layer_end > L) continue;
            for (int l = s->layer_begin; l < s->layer_end; l++) have[l + 1] = 1;
            if (s->layer_begin == 0) have[0] = 1;
            if (s->layer_end == L) have[L + 1] = 1;
        }
    }
    bool ok = true;
    size_t used = 0;
    if (miss && len) miss[0] = 0;
    for (int u = 0; u < L + 2; u++) {
        if (have[u]) continue;
        ok = false;
        if (!miss || used >= len) continue;
        if (u == 0 || u == L + 1) {
            used += (size_t)snprintf(miss + used, len - used, "%sthe %s", used ? ", " : "",
                                     u ? "head" : "embedding");
            continue;
        }
        int e = u;
        while (e + 1 <= L && !have[e + 1]) e++;
        if (e == u)
            used += (size_t)snprintf(miss + used, len - used, "%slayer %d", used ? ", " : "",
                                     u - 1);
        else
            used += (size_t)snprintf(miss + used, len - used, "%slayers %d to %d",
                                     used ? ", " : "", u - 1, e - 1);
        u = e;
    }
    free(have);
    return ok;
}

int64_t core_resume_step(pool_core *c, const pool_member *m, const int *in, int k)
{
    int L = c->shape.layers;
    c->layers_lost = false;
    c->doc.why[0] = 0;
    int64_t best = 0, newest = 0;
    for (int i = 0; i < k; i++) {
        const pool_doc *d = core_doc_of(c, &m[in[i]]);
        for (int j = 0; d && j < d->snaps.n; j++) {
            int64_t st = d->snaps.s[j].step;
            if (st > newest) newest = st;
            if (st > best && core_covered(c, m, in, k, L, st, NULL, 0)) best = st;
        }
    }
    /* A job's first epoch starts after the newest step its members'
     * snapshots cover (a pool checkpoint put them there), else at 0. */
    if (!pool_core_committed(c)) return best;
    /* Before any snapshot, the run starts again from its first step (the
     * same data and the same seeded weights). After one, a step that no
     * member's copies cover means layers are lost: the job fails, naming
     * them, rather than silently starting again. */
    if (best > 0 || newest == 0) return best;
    const pool_plan *pl = pool_core_committed(c);
    if (pl && pl->resume_step > 0 && newest <= pl->resume_step) return best;
    /* Little done yet (at most two snapshots' worth of steps, the first
     * copies still on their way): starting again costs less than failing */
    int64_t every = pl && pl->snapshot_every > 0 ? pl->snapshot_every : 1;
    if (pl && pl->resume_step == 0 && c->doc.rec.at <= 2 * every) return 0;
    char miss[200], who[200] = "";
    if (core_covered(c, m, in, k, L, -1, miss, sizeof miss))
        snprintf(miss, sizeof miss, "every layer at one step");
    /* the committed plan's holders that are not in this view, then the
     * other members of its epoch's membership that are not (those that
     * kept copies: before, only holders were named) */
    size_t used = 0;
    int nm = pl ? pl->members.n : 0;
    for (int x = 0; pl && x < pl->nstages + nm; x++) {
        const char *nmx = x < pl->nstages ? pl->stage[x].holder[0].name
                                          : pl->members.name[x - pl->nstages];
        bool here = x >= pl->nstages && pool_plan_stage_of(pl, nmx) >= 0;
        for (int i = 0; i < k && !here; i++) here = strcmp(m[in[i]].name, nmx) == 0;
        if (!here && used < sizeof who)
            used += (size_t)snprintf(who + used, sizeof who - used, "%s%s", used ? ", " : "",
                                     nmx);
    }
    snprintf(c->doc.why, sizeof c->doc.why, "the loss of %s left no copy of %s "
             "(the newest snapshot is of step %lld); restart the job from its last pool "
             "checkpoint", who[0] ? who : "members", miss, (long long)newest);
    c->layers_lost = true;
    return -1;
}

/* The bytes of a snapshot of layers [b, e) of the job's model: what trains
 * (weights) and both AdamW moments, with the embedding when b is 0 and the
 * head when e is the last layer; -1 when the shape cannot be costed. */
int64_t core_state_bytes(const pool_core *c, int b, int e)
{
    cost_bytes cb;
    char err[256];
    if (cost_bytes_compute(&cb, &c->shape, 1, 4, err, sizeof err) != 0) return -1;
    int64_t n = (int64_t)(e - b) * cb.trainable[COST_LAYER];
    if (b == 0) n += cb.trainable[COST_EMBED];
    if (e == c->shape.layers) n += cb.trainable[COST_HEAD];
    return 12 * n;
}

int64_t core_snapshot_every(const pool_core *c, const plan *pl, const cost_link *links, int f)
{
    if (c->snapshot_every > 0) return c->snapshot_every;
    /* the largest stage's state */
    int64_t bytes = 0;
    for (int s = 0; s < pl->nstages; s++) {
        int64_t b = core_state_bytes(c, pl->stage[s].layer_begin, pl->stage[s].layer_end);
        if (b < 0) return 10;
        if (b > bytes) bytes = b;
    }
    int64_t bw = 0;
    for (int i = 0; i < f * f; i++)
        if (i / f != i % f && links[i].bandwidth > 0 && (!bw || links[i].bandwidth < bw))
            bw = links[i].bandwidth;
    if (!bw) bw = POOL_DEFAULT_BW;
    /* a copy streamed over se steps takes at most 10% of the link's time */
    double per_step = 0.1 * (double)bw * ((double)(pl->step_ns > 0 ? pl->step_ns : 1) * 1e-9);
    double se = per_step > 0 ? (double)bytes / per_step : 1e9;
    int64_t every = se < 1 ? 1 : se > 1e9 ? 1000000000 : (int64_t)se + 1;
    /* and no more often than every POOL_SNAP_MIN_MS: writing and copying a
     * snapshot costs CPU too (userspace WireGuard encrypts every byte), which
     * the link's figure does not show */
    int64_t floor_steps = pl->step_ns > 0 ? ((int64_t)POOL_SNAP_MIN_MS * 1000000 + pl->step_ns - 1) /
                                                pl->step_ns
                                          : 1;
    if (every < floor_steps) every = floor_steps;
    /* that is the interval between snapshots; snapshot_every, the bound on
     * the steps a loss redoes, is twice it (job_snapshot_interval) */
    every = every > 500000000 ? 1000000000 : 2 * every;
    if (c->steps > 1 && every > c->steps) every = c->steps;
    return every;
}

/* ---- where a stage's layers come from ---- */

/* The snapshots of `step` that layers [b, e) of a model of L layers start
 * from (with the embedding when b is 0, the head when e is L): each range
 * from this member when it holds it, else from the first live member (by
 * the view's order) that lists it; into a's targets and snaps. -1 when
 * some layer has none (c->doc.why says which). */
static int gather(pool_core *c, const pool_member *m, int n, int b, int e, int64_t step,
                  pool_action *a)
{
    int L = c->shape.layers;
    a->targets = calloc(POOL_SNAPS_MAX * 4, sizeof *a->targets);
    a->snaps = calloc(POOL_SNAPS_MAX * 4, sizeof *a->snaps);
    if (!a->targets || !a->snaps) return -1;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if ((pass == 0) != m[i].self || !m[i].live) continue;
            const pool_doc *d = core_doc_of(c, &m[i]);
            for (int j = 0; d && j < d->snaps.n; j++) {
                const pool_snap *s = &d->snaps.s[j];
                bool need = s->step == step &&
                            ((s->layer_begin < e && s->layer_end > b) ||
                             (b == 0 && s->layer_begin == 0) || (e == L && s->layer_end == L));
                for (int x = 0; need && x < a->ntargets; x++)
                    if (a->snaps[x].layer_begin == s->layer_begin &&
                        a->snaps[x].layer_end == s->layer_end)
                        need = false;
                if (!need || a->ntargets >= POOL_SNAPS_MAX * 4) continue;
                pool_target *t = &a->targets[a->ntargets];
                snprintf(t->name, sizeof t->name, "%s", m[i].name);
                snprintf(t->address, sizeof t->address, "%s", m[i].address ? m[i].address : "");
                t->port = m[i].port;
                a->snaps[a->ntargets++] = *s;
            }
        }
    bool head = e < L, embed = b > 0;
    for (int x = 0; x < a->ntargets; x++) {
        head |= a->snaps[x].layer_end == L;
        embed |= a->snaps[x].layer_begin == 0;
    }
    for (int l = b; l < e; l++) {
        bool ok = false;
        for (int x = 0; x < a->ntargets && !ok; x++)
            ok = a->snaps[x].layer_begin <= l && l < a->snaps[x].layer_end;
        if (!ok) {
            snprintf(c->doc.why, sizeof c->doc.why, "no live member holds layer %d after step "
                     "%lld any more", l, (long long)step);
            return -1;
        }
    }
    if (!head || !embed) {
        snprintf(c->doc.why, sizeof c->doc.why, "no live member holds the %s after step %lld "
                 "any more", head ? "embedding" : "head", (long long)step);
        return -1;
    }
    return 0;
}

int core_pieces_at(pool_core *c, const pool_member *m, int n, const pool_plan *pl, int64_t step,
                   pool_action *a)
{
    int st = pool_plan_stage_of(pl, c->name);
    return gather(c, m, n, pl->stage[st].layer_begin, pl->stage[st].layer_end, step, a);
}

/* ---- pool checkpoints ---- */

void core_checkpoint(pool_core *c, const pool_member *m, int n, int64_t now, pool_actions *out)
{
    const pool_plan *pl = pool_core_committed(c);
    /* after a failure, a pause: a member that just died may still be listed live */
    if (c->ckpt_retry_ms < 0) c->ckpt_retry_ms = now + 2 * POOL_QUIET_MS;
    if (!pl || c->recovering || c->ckpt_pending || c->checkpoint_every <= 0 || !c->doc.bundle ||
        strcmp(c->doc.bundle->submitted_by, c->name) != 0 || now < c->ckpt_retry_ms)
        return;
    /* the newest step of a checkpoint that the live members' snapshots cover */
    int64_t best = 0;
    int *in = malloc((size_t)(n > 0 ? n : 1) * sizeof *in), k = 0;
    for (int q = 0; in && q < n; q++)   /* the live members with the job, once */
        if (m[q].live && core_doc_of(c, &m[q])) in[k++] = q;
    for (int i = 0; in && i < k; i++) {
        const pool_doc *d = core_doc_of(c, &m[in[i]]);
        for (int j = 0; j < d->snaps.n; j++) {
            int64_t st = d->snaps.s[j].step;
            if (st > best && st > c->ckpt_done && st % c->checkpoint_every == 0 &&
                core_covered(c, m, in, k, c->shape.layers, st, NULL, 0))
                best = st;
        }
    }
    free(in);
    if (!best) {
        /* a checkpoint that failed and whose snapshots are gone since (the
         * members remove superseded ones): given up, so that the
         * job's end does not wait for it (gather_model) — unless the running
         * plan resumed before its step: its stages write that step's
         * snapshots again, and the checkpoint is written from them */
        if (c->ckpt_step > c->ckpt_done && pl->resume_step >= c->ckpt_step) {
            core_log(out, "pool: the checkpoint of step %lld is skipped: its snapshots are no "
                     "longer held", (long long)c->ckpt_step);
            c->ckpt_done = c->ckpt_step;
        }
        return;
    }
    pool_action *a = core_act(out, POOL_ACT_CHECKPOINT);
    if (!a) return;
    char why[sizeof c->doc.why];
    memcpy(why, c->doc.why, sizeof why);
    int rc = gather(c, m, n, 0, c->shape.layers, best, a);
    memcpy(c->doc.why, why, sizeof why);
    if (rc != 0) {
        free(a->targets);
        free(a->snaps);
        out->n--;
        return;
    }
    a->step = best;
    c->ckpt_pending = true;
    if (c->ckpt_step != best) c->ckpt_tries = 0;
    c->ckpt_step = best;
}

void pool_core_checkpointed(pool_core *c, int64_t step, bool ok, const char *error,
                            pool_actions *out)
{
    if (!c->ckpt_pending) return;
    c->ckpt_pending = false;
    if (ok) {
        c->ckpt_done = step;
        core_log(out, "pool: checkpoint of step %lld written", (long long)step);
        return;
    }
    /* tried again after a pause (a stopped copy at once: core_kill), three
     * times a step */
    if (++c->ckpt_tries >= 3) c->ckpt_done = step;
    c->ckpt_retry_ms = -1;
    core_log(out, "pool: the checkpoint of step %lld failed%s: %s", (long long)step,
             c->ckpt_tries >= 3 ? " three times; it is skipped" : "", error ? error : "");
}

/* ---- the buddy ---- */

/* The member that keeps stage s's copies: another live member with the
 * job, on another machine when there is one; the stages are spread over
 * the candidates in name order, members without a stage first, so no one
 * member copies every stage while others could share it. -1: none. */
static int buddy_of(const pool_core *c, const pool_plan *pl, int s, const pool_member *m, int n)
{
    const char *holder = pl->stage[s].holder[0].name;
    const pool_member *h = core_named(m, n, holder);
    const pool_doc *hd = h ? core_doc_of(c, h) : NULL;
    int *cand = malloc((size_t)(n > 0 ? n : 1) * sizeof *cand), k = 0;
    if (!cand) return -1;
    bool other_host = false;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const pool_doc *d = m[i].live ? core_doc_of(c, &m[i]) : NULL;
            if (!d || strcmp(m[i].name, holder) == 0) continue;
            bool same = hd && (hd->has & POOL_HAS_HOST) && (d->has & POOL_HAS_HOST) &&
                        strcmp(hd->host, d->host) == 0;
            if (pass == 0) other_host |= !same;
            else if (!same || !other_host) cand[k++] = i;
        }
    /* members without a stage first, each part in name order */
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0; j--) {
            const pool_member *a = &m[cand[j - 1]], *b = &m[cand[j]];
            int ha = holds_stage(pl, a->name), hb = holds_stage(pl, b->name);
            if (ha < hb || (ha == hb && strcmp(a->name, b->name) < 0)) break;
            int t = cand[j];
            cand[j] = cand[j - 1];
            cand[j - 1] = t;
        }
    int r = k ? cand[s % k] : -1;
    free(cand);
    return r;
}

/* The newest step of layers [b, e) this member holds (0: none). */
static int64_t held_step(const pool_core *c, int b, int e)
{
    int64_t st = 0;
    for (int j = 0; j < c->doc.snaps.n; j++)
        if (c->doc.snaps.s[j].layer_begin == b && c->doc.snaps.s[j].layer_end == e &&
            c->doc.snaps.s[j].step > st)
            st = c->doc.snaps.s[j].step;
    return st;
}

void core_copied(pool_core *c, const pool_member *m, int n)
{
    const pool_plan *pl = pool_core_committed(c);
    c->has_copied = false;
    int s = pl ? pool_plan_stage_of(pl, c->name) : -1;
    if (s < 0 || pl->snapshot_every <= 0) return;
    pool_snap x = {pl->stage[s].layer_begin, pl->stage[s].layer_end, 0};
    if (buddy_of(c, pl, s, m, n) < 0) {
        x.step = POOL_COPIED_NONE;
    } else {
        /* any live member's copy will do, not only the buddy's: a snapshot
         * of these layers at a step is the same whoever keeps it */
        for (int i = 0; i < n; i++) {
            const pool_doc *d = m[i].self || !m[i].live ? NULL : core_doc_of(c, &m[i]);
            for (int j = 0; d && j < d->snaps.n; j++)
                if (d->snaps.s[j].layer_begin == x.layer_begin &&
                    d->snaps.s[j].layer_end == x.layer_end && d->snaps.s[j].step > x.step)
                    x.step = d->snaps.s[j].step;
        }
    }
    c->copied = x;
    c->has_copied = true;
}

bool pool_core_copied(const pool_core *c, pool_snap *out)
{
    if (!c->has_copied || !pool_core_committed(c)) return false;
    *out = c->copied;
    return true;
}

/* The pace of this member's copies (POOL_ACT_PULL's rate): the state of
 * every stage it keeps copies of, in POOL_PULL_SHARE of the planned time
 * between two snapshots. At the link's full speed a copy fills the tunnel
 * and the pipeline's own frames queue behind it (bench/copy_pace.py: a
 * small echo's p99 round trip 10-11 ms during an unpaced copy, 2 ms paced
 * at 8 MB/s; the paced copy took 0.67x the CPU). Not slower: a loss before
 * the newest copy is whole goes back one interval more. 0: as fast as the
 * link goes (no planned step time, or no state to copy). */
static int64_t pull_rate(const pool_core *c, const pool_plan *pl, const pool_member *m, int n)
{
    int64_t step_ns = pl->has_shared && pl->step_ns_shared > 0 ? pl->step_ns_shared : pl->step_ns;
    int64_t h = job_snapshot_interval((long)pl->snapshot_every), bytes = 0;
    if (step_ns <= 0 || h <= 0) return 0;
    for (int s = 0; s < pl->nstages; s++) {
        int b = buddy_of(c, pl, s, m, n);
        if (b < 0 || !m[b].self) continue;
        int64_t x = core_state_bytes(c, pl->stage[s].layer_begin, pl->stage[s].layer_end);
        if (x < 0) return 0;
        bytes += x;
    }
    double secs = POOL_PULL_SHARE * (double)h * (double)step_ns * 1e-9;
    if (bytes <= 0 || secs <= 0) return 0;
    double rate = (double)bytes / secs;
    return rate < POOL_PULL_MIN_RATE ? POOL_PULL_MIN_RATE : rate > 1e15 ? 0 : (int64_t)rate;
}

void core_pull(pool_core *c, const pool_member *m, int n, int64_t now, pool_actions *out)
{
    const pool_plan *pl = pool_core_committed(c);
    if (c->pull_retry_ms < 0) c->pull_retry_ms = now + 2 * POOL_TICK_MS * 2;
    if (!pl || c->pull_pending || now < c->pull_retry_ms || pl->snapshot_every <= 0) return;
    /* of the stages this member keeps copies of, the one whose copy is
     * oldest first: no stage starves while others are refreshed */
    const pool_member *h = NULL;
    const pool_snap *want = NULL;
    int64_t oldest = INT64_MAX;
    for (int s = 0; s < pl->nstages; s++) {
        int b = buddy_of(c, pl, s, m, n);
        if (b < 0 || !m[b].self) continue;
        const pool_member *hs = core_named(m, n, pl->stage[s].holder[0].name);
        const pool_doc *hd = hs && hs->live ? core_doc_of(c, hs) : NULL;
        if (!hd) continue;
        const pool_snap *w = NULL;
        for (int j = 0; j < hd->snaps.n; j++) {
            const pool_snap *x = &hd->snaps.s[j];
            if (x->layer_begin == pl->stage[s].layer_begin &&
                x->layer_end == pl->stage[s].layer_end && (!w || x->step > w->step))
                w = x;
        }
        int64_t have = w ? held_step(c, w->layer_begin, w->layer_end) : 0;
        if (!w || have >= w->step || have >= oldest) continue;
        oldest = have;
        want = w;
        h = hs;
    }
    if (want) {
        pool_action *a = core_act(out, POOL_ACT_PULL);
        if (!a) return;
        a->targets = calloc(1, sizeof *a->targets);
        a->snaps = calloc(1, sizeof *a->snaps);
        if (!a->targets || !a->snaps) {
            free(a->targets);
            free(a->snaps);
            out->n--;
            return;
        }
        snprintf(a->targets[0].name, sizeof a->targets[0].name, "%s", h->name);
        snprintf(a->targets[0].address, sizeof a->targets[0].address, "%s",
                 h->address ? h->address : "");
        a->targets[0].port = h->port;
        a->snaps[0] = *want;
        a->ntargets = 1;
        a->rate = pull_rate(c, pl, m, n);
        c->pull_pending = true;
        return;
    }
}

void pool_core_pulled(pool_core *c, bool ok, const char *error, pool_actions *out)
{
    if (!c->pull_pending) return;
    c->pull_pending = false;
    if (!ok) {
        c->pull_retry_ms = -1;   /* the next step sets the time */
        core_log(out, "pool: copying a stage snapshot failed: %s", error ? error : "");
    }
}

void pool_core_snapshots(pool_core *c, const pool_snaps *held)
{
    /* field by field: memcmp would also compare the padding after n */
    bool same = c->doc.snaps.n == held->n;
    for (int i = 0; same && i < held->n; i++)
        same = c->doc.snaps.s[i].layer_begin == held->s[i].layer_begin &&
               c->doc.snaps.s[i].layer_end == held->s[i].layer_end &&
               c->doc.snaps.s[i].step == held->s[i].step;
    if (same) return;
    c->doc.snaps = *held;
    c->dirty = true;
    c->next_doc_ms = 0;   /* said at once: a buddy's copy lags it by no more */
}

/* ---- the base membership ---- */

void core_fill_base(pool_core *c, const pool_member *m, int n)
{
    pool_plan *p = &c->doc.committed;
    if (!(c->doc.has & POOL_HAS_COMMITTED) || p->members.n || !p->members_hash) return;
    if (c->doc.vote.v.epoch == p->epoch && c->doc.vote.members_hash == p->members_hash &&
        pool_names_copy(&p->members, &c->doc.vote.members) == 0)
        return;
    /* every member carrying the job, in name order (a view's members); or
     * every live one; or either without this member (one that joined after
     * the epoch was voted) */
    int *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    for (int pass = 0; idx && pass < 4 && !p->members.n; pass++) {
        bool live = pass & 1, others = pass & 2;
        pool_names all = {0, NULL};
        int k = 0;
        for (int i = 0; i < n; i++)
            if (core_doc_of(c, &m[i]) && (!live || m[i].live) && (!others || !m[i].self))
                idx[k++] = i;
        for (int i = 1; i < k; i++)
            for (int j = i; j > 0 && strcmp(m[idx[j - 1]].name, m[idx[j]].name) > 0; j--) {
                int t = idx[j];
                idx[j] = idx[j - 1];
                idx[j - 1] = t;
            }
        for (int i = 0; i < k; i++) pool_names_add(&all, m[idx[i]].name);
        if (pool_names_hash(&all) == p->members_hash) p->members = all;
        else pool_names_free(&all);
    }
    free(idx);
}

/* pool_elect.c — a member's part in the leaderless plan election, inside
 * the pool core (docs/PROTOCOL.md, "Jobs and the plan election"): the view
 * of the members that have the job, the plan every member computes from
 * it, the vote, and the outcome of each epoch (scheduler/elect.c decides it
 * from the votes). Pure: the core's actions carry every effect. */
#include "pool_core_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the view ---- */

static const pool_member *sort_base;

static int by_name(const void *a, const void *b)
{
    return strcmp(sort_base[*(const int *)a].name, sort_base[*(const int *)b].name);
}

/* What the view and its plan are computed from: who is live, with which
 * document at which address. Equal fingerprints, equal views. */
/* Whether the plan over the view depends on the members' snapshots: a
 * recovery's or a first plan's resumes after the newest step they cover; a
 * planned switch's starts after the step the running stages stop at, so
 * the snapshots written and copied while a plan runs (every few seconds)
 * do not change its view, and do not hold its votes back or split them. */
static bool view_snaps(const pool_core *c)
{
    return c->recovering || !pool_core_committed(c);
}

static uint64_t fingerprint(const pool_core *c, const pool_member *m, int n)
{
    uint64_t h = elect_hash(ELECT_HASH_INIT, c->doc.id, strlen(c->doc.id));
    bool snaps = view_snaps(c);
    h = elect_hash(h, &c->job_loaded, sizeof c->job_loaded);
    h = elect_hash(h, &snaps, sizeof snaps);
    for (int i = 0; i < n; i++) {
        if (!m[i].live) continue;
        uint64_t s = m[i].doc ? m[i].serial : 0;
        h = elect_hash(h, m[i].name, strlen(m[i].name) + 1);
        h = elect_hash(h, &s, sizeof s);
        if (m[i].address) h = elect_hash(h, m[i].address, strlen(m[i].address) + 1);
    }
    return h;
}

/* The step of a plan whose stages share machines' cores (a report beside the
 * plan's own step, which takes every member as alone): stages whose members
 * gossip the same host share its cores, each computing with the threads its
 * profile was measured with, replayed by sim_run_shared. A member without a
 * host or cores counts as alone. 0 when the replay refuses the plan. */
static int64_t shared_step_ns(const plan *pl, const pool_doc *const *docs)
{
    sim_placement *place = calloc(PLAN_MAX_STAGES, sizeof *place);
    int *cores = calloc(PLAN_MAX_STAGES, sizeof *cores), nhosts = 0;
    const char **host = calloc(PLAN_MAX_STAGES, sizeof *host);
    int64_t step = 0;
    if (!place || !cores || !host) goto out;
    for (int s = 0; s < pl->nstages; s++) {
        const pool_doc *d = docs[pl->stage[s].node[0]];
        const char *h = d->has & POOL_HAS_HOST ? d->host : NULL;
        int64_t c = d->has & POOL_HAS_CORES ? d->cores : 0;
        int64_t t = d->has & POOL_HAS_THREADS ? d->threads : 0;
        if (c < 1 || c > 4096) c = 1;
        if (t < 1 || t > 4096) t = c;
        int k = -1;
        for (int j = 0; h && j < nhosts; j++)
            if (host[j] && strcmp(host[j], h) == 0) k = j;
        if (k < 0) {
            k = nhosts++;
            host[k] = h;
            cores[k] = h ? (int)c : (int)t; /* no host: alone with its threads */
        }
        place[s] = (sim_placement){.host = k, .threads = (int)t};
    }
    sim_result r;
    char err[256];
    step = sim_run_shared(&r, pl, place, cores, nhosts, err, sizeof err) == 0 ? r.step_ns : 0;
out:
    free(place);
    free(cores);
    free(host);
    return step;
}

/* The planner's candidates among the view's members in[0..k) (their
 * indices in m): every live member that computes with the job's files and
 * has a profile, as plan nodes (nodes[0..*f), their documents, overlay
 * addresses and positions in in[]). The arrays hold k + 1 entries. */
typedef struct {
    plan_node *nodes;
    const pool_doc **docs;
    const char **addr;
    int *cand;
    cost_link *links;             /* f x f, after cands_links */
    int f;
} cands_t;

static void cands_free(cands_t *fl)
{
    free(fl->nodes);
    free(fl->docs);
    free(fl->addr);
    free(fl->cand);
    free(fl->links);
    memset(fl, 0, sizeof *fl);
}

static int cands_make(cands_t *fl, const pool_member *m, const int *in, int k)
{
    memset(fl, 0, sizeof *fl);
    fl->nodes = calloc((size_t)k + 1, sizeof *fl->nodes);
    fl->docs = calloc((size_t)k + 1, sizeof *fl->docs);
    fl->addr = calloc((size_t)k + 1, sizeof *fl->addr);
    fl->cand = calloc((size_t)k + 1, sizeof *fl->cand);
    if (!fl->nodes || !fl->docs || !fl->addr || !fl->cand) return -1;
    for (int i = 0; i < k; i++) {
        const pool_member *q = &m[in[i]];
        const pool_doc *d = q->doc;
        if (!d->compute || !d->any || !(d->has & POOL_HAS_PROF)) continue;
        plan_node *nd = &fl->nodes[fl->f];
        snprintf(nd->name, sizeof nd->name, "%s", q->name);
        snprintf(nd->device, sizeof nd->device, "%.*s", (int)sizeof nd->device - 1, d->prof.device);
        nd->no_data = !d->first;
        nd->prof = d->prof.prof;
        fl->addr[fl->f] = q->address ? q->address : "";
        fl->docs[fl->f] = d;
        fl->cand[fl->f] = i;
        fl->f++;
    }
    return 0;
}

/* measured, typical or default; a relayed link as its two hops and its
 * share of the relay's upload (pool_links.c) */
static int cands_links(cands_t *fl, const pool_member *m, const int *in, int k)
{
    int f = fl->f > 0 ? fl->f : 1;
    fl->links = calloc((size_t)f * (size_t)f, sizeof *fl->links);
    if (!fl->links) return -1;
    return pool_link_costs(m, in, k, fl->cand, fl->f, fl->links, NULL, 0);
}

static plan_job plan_job_of(const pool_core *c)
{
    return (plan_job){.shape = c->shape,
                      .batch = c->batch,
                      .max_micro_batch = c->micro_batch,
                      .min_micro_batch = c->micro_batch,
                      .wire_bytes = 4,
                      .margin_permille = 50};
}

/* Candidate x gossips the same host as another candidate. */
static bool shares_host(const cands_t *fl, int x)
{
    const pool_doc *a = fl->docs[x];
    if (!(a->has & POOL_HAS_HOST) || !a->host[0]) return false;
    for (int y = 0; y < fl->f; y++)
        if (y != x && (fl->docs[y]->has & POOL_HAS_HOST) && strcmp(fl->docs[y]->host, a->host) == 0)
            return true;
    return false;
}

/* The planner's plan over every candidate but `skip`, its node indices
 * those of fl (0), or -1 when none fits. */
static int plan_without(plan *out, const cands_t *fl, int skip, const plan_job *pj)
{
    int f = fl->f - 1, *map = calloc((size_t)(f > 0 ? f : 1), sizeof *map);
    plan_node *nodes = calloc((size_t)(f > 0 ? f : 1), sizeof *nodes);
    cost_link *links = calloc((size_t)(f > 0 ? f * f : 1), sizeof *links);
    int rc = -1;
    if (!map || !nodes || !links || f < 1) goto out;
    for (int i = 0, k = 0; i < fl->f; i++)
        if (i != skip) map[k++] = i;
    for (int i = 0; i < f; i++) {
        nodes[i] = fl->nodes[map[i]];
        for (int j = 0; j < f; j++) links[i * f + j] = fl->links[map[i] * fl->f + map[j]];
    }
    plan_fleet sub = {.nnodes = f, .nodes = nodes, .links = links};
    if (plan_compute(out, &sub, pj, PLAN_AUTO, NULL, NULL, 0) != 0) goto out;
    for (int s = 0; s < out->nstages; s++)
        for (int d = 0; d < out->stage[s].ndevices; d++)
            out->stage[s].node[d] = map[out->stage[s].node[d]];
    rc = 0;
out:
    free(map);
    free(nodes);
    free(links);
    return rc;
}

/* Where candidates share a machine's cores, the planner's plan (which
 * takes each as alone) may lose to one without some of them under the
 * shared replay: two stages of 1 and 2 threads on 2 cores run slower than
 * the member of 2 threads alone. The plan over every candidate but one
 * that shares its host, for each such one, replaces *pl where the replay
 * says its step is shorter (*shared: the step of the plan kept). At most
 * POOL_SHARED_TRY candidates; deterministic (the same view gives the same
 * plan on every member). */
#define POOL_SHARED_TRY 16
static void prefer_shared(plan *pl, int64_t *shared, const cands_t *fl, const plan_job *pj)
{
    if (fl->f < 2 || fl->f > POOL_SHARED_TRY) return;
    plan *alt = calloc(1, sizeof *alt);
    for (int x = 0; alt && x < fl->f; x++) {
        if (!shares_host(fl, x) || plan_without(alt, fl, x, pj) != 0) continue;
        int64_t sh = shared_step_ns(alt, fl->docs);
        if (sh > 0 && (*shared <= 0 || sh < *shared)) {
            *pl = *alt;
            *shared = sh;
        }
    }
    free(alt);
}

/* The plan of the view's members (in[0..k): their indices in m), or why
 * none fits (c->doc.why). */
static void compute_plan(pool_core *c, const pool_member *m, int n, const int *in, int k)
{
    cands_t fl;
    plan *pl = calloc(1, sizeof *pl);
    if (cands_make(&fl, m, in, k) != 0 || !pl) goto out;
    plan_node *nodes = fl.nodes;
    const pool_doc **docs = fl.docs;
    const char **addr = fl.addr;
    int f = fl.f;
    cost_link *links = NULL;
    if (core_too_small(c, m, n)) goto out;
    if (f == 0) {
        snprintf(c->doc.why, sizeof c->doc.why, "no member can hold a stage (none computes with "
                 "the job's files)");
        goto out;
    }
    if (cands_links(&fl, m, in, k) != 0) goto out;
    links = fl.links;
    plan_fleet fleet = {.nnodes = f, .nodes = nodes, .links = links};
    plan_job pj = plan_job_of(c);
    char err[700];
    if (plan_fleet_check(&fleet, err, sizeof err) != 0 ||
        plan_compute(pl, &fleet, &pj, PLAN_AUTO, NULL, err, sizeof err) != 0) {
        snprintf(c->doc.why, sizeof c->doc.why, "%.500s", err);
        goto out;
    }
    if (pl->nstages > POOL_MAX_STAGES) {
        /* a vote names every stage's member: say so rather than cut it */
        snprintf(c->doc.why, sizeof c->doc.why, "the plan has %d stages, more than the %d a "
                 "vote can name", pl->nstages, POOL_MAX_STAGES);
        goto out;
    }
    int64_t shared = shared_step_ns(pl, docs);
    prefer_shared(pl, &shared, &fl, &pj);
    pool_plan *lay = &c->layout;
    pool_plan_free(lay);
    lay->mb = pl->micro_batch;
    lay->step_ns = pl->step_ns;
    lay->has_shared = true;
    lay->step_ns_shared = shared > 0 ? shared : pl->step_ns;
    lay->snapshot_every = core_snapshot_every(c, pl, links, f);
    if (c->recovering || !pool_core_committed(c)) {
        /* the stages resume after the newest step whose snapshots cover
         * every layer among the members of this view (a recovery; or a
         * job resumed from a pool checkpoint, whose shards its submitter
         * holds) */
        int64_t rs = core_resume_step(c, m, in, k);
        if (rs < 0) {
            pool_plan_free(lay);
            goto out;
        }
        lay->resume_step = rs;
    } else {
        /* a plan over the view while another runs: a planned switch, which
         * starts after the step the running stages stop at */
        lay->handover = true;
    }
    for (int s = 0; s < pl->nstages; s++) {
        int nd = pl->stage[s].node[0];
        pool_stage *st = &lay->stage[lay->nstages++];
        st->layer_begin = pl->stage[s].layer_begin;
        st->layer_end = pl->stage[s].layer_end;
        st->time_ns = pl->stage[s].time_ns;
        st->nholders = 1;
        snprintf(st->holder[0].name, sizeof st->holder[0].name, "%s", nodes[nd].name);
        snprintf(st->holder[0].address, sizeof st->holder[0].address, "%s", addr[nd]);
    }
    /* what a record must carry of it: its committed section and a vote's names */
    json_t *cj = pool_plan_to_json(lay);
    char *ct = cj ? json_dumps(cj, JSON_COMPACT) : NULL;
    size_t need = ct ? strlen(ct) + 40 : SIZE_MAX;
    for (int s2 = 0; s2 < lay->nstages; s2++) need += strlen(lay->stage[s2].holder[0].name) + 3;
    free(ct);
    json_decref(cj);
    if (need > POOL_PLAN_TEXT_MAX) {
        snprintf(c->doc.why, sizeof c->doc.why, "the plan of %d stages takes %zu bytes of a "
                 "record, more than the %d it keeps for a plan", lay->nstages, need,
                 POOL_PLAN_TEXT_MAX);
        pool_plan_free(lay);
        goto out;
    }
    c->plan = pool_plan_hash(lay);
out:
    cands_free(&fl);
    free(pl);
}

int64_t core_plan_step_now(pool_core *c, const pool_member *m, int n, const pool_plan *old,
                           int64_t *bw)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (m[i].live && core_doc_job(&m[i], c->doc.id)) c->order[k++] = i;
    cands_t fl;
    plan *pl = calloc(1, sizeof *pl);
    int64_t step = -1;
    *bw = 0;
    if (cands_make(&fl, m, c->order, k) != 0 || !pl || cands_links(&fl, m, c->order, k) != 0 ||
        old->nstages > PLAN_MAX_STAGES)
        goto out;
    for (int i = 0; i < fl.f * fl.f; i++)
        if (i / fl.f != i % fl.f && fl.links[i].bandwidth > 0 &&
            (!*bw || fl.links[i].bandwidth < *bw))
            *bw = fl.links[i].bandwidth;
    if (!*bw) *bw = POOL_DEFAULT_BW;
    pl->nstages = old->nstages;
    pl->micro_batch = old->mb;
    pl->micro_batches = old->mb > 0 ? c->batch / old->mb : 0;
    for (int s = 0; s < old->nstages; s++) {
        int nd = -1;
        for (int x = 0; x < fl.f && nd < 0; x++)
            if (strcmp(fl.nodes[x].name, old->stage[s].holder[0].name) == 0) nd = x;
        if (nd < 0) goto out;   /* gone, or no longer a candidate */
        plan_stage *st = &pl->stage[s];
        st->ndevices = 1;
        st->node[0] = nd;
        st->layer_begin = old->stage[s].layer_begin;
        st->layer_end = old->stage[s].layer_end;
        st->embed = s == 0;
        st->head = s == old->nstages - 1;
    }
    plan_fleet fleet = {.nnodes = fl.f, .nodes = fl.nodes, .links = fl.links};
    plan_job pj = plan_job_of(c);
    if (cost_evaluate(pl, &fleet, &pj, NULL, 0) != 0) goto out;
    int64_t shared = shared_step_ns(pl, fl.docs);
    step = shared > 0 ? shared : pl->step_ns;
out:
    cands_free(&fl);
    free(pl);
    return step;
}

bool core_view(pool_core *c, const pool_member *m, int n, int64_t now)
{
    uint64_t fp = fingerprint(c, m, n);
    if (fp == c->view_fp && c->view_fp) {
        if (!c->view_ready || !c->job_loaded) return false;
        if (!c->plan_done) goto plan;
        return true;
    }
    c->view_fp = fp;
    int k = 0;
    bool ready = true;
    for (int i = 0; i < n; i++) {
        if (!m[i].live) continue;
        /* a live member that has not taken the job up yet: wait for it */
        if (!core_doc_job(&m[i], c->doc.id)) {
            ready = false;
            continue;
        }
        const pool_doc *d = m[i].doc;
        if (d->compute && d->any && !d->ready && !d->prof_error[0]) ready = false;
        c->order[k++] = i;
    }
    sort_base = m;
    qsort(c->order, (size_t)k, sizeof *c->order, by_name);
    /* the canonical inputs, what each says that the plan depends on: the
     * compact JSON list of pool_doc_view_text, in name order */
    uint64_t view = elect_hash(ELECT_HASH_INIT, c->doc.id, strlen(c->doc.id));
    bool snaps = view_snaps(c);
    view = elect_hash(view, "[", 1);
    for (int i = 0; i < k; i++) {
        const pool_member *q = &m[c->order[i]];
        char *own = q->view_text ? NULL : pool_doc_view_text(q->name, q->doc);
        const char *t = q->view_text ? q->view_text : own;
        if (i) view = elect_hash(view, ",", 1);
        if (t) view = elect_hash(view, t, strlen(t));
        free(own);
        if (snaps) {   /* then ",sn:" and the member's snapshots as compact JSON */
            json_t *sj = pool_snaps_to_json(&q->doc->snaps);
            char *st = sj ? json_dumps(sj, JSON_COMPACT) : NULL;
            view = elect_hash(view, ",sn:", 4);
            if (st) view = elect_hash(view, st, strlen(st));
            free(st);
            json_decref(sj);
        }
    }
    view = elect_hash(view, "]", 1);
    c->view_ready = ready;
    if (view != c->view) {
        c->view = view;
        c->view_since_ms = now;
        pool_names_free(&c->view_members);
        for (int i = 0; i < k; i++) pool_names_add(&c->view_members, m[c->order[i]].name);
        /* another view, another plan (a plan is computed for one view) */
        c->plan_done = false;
    }
    if (!ready || !c->job_loaded) return false;
    if (c->plan_done) return true;   /* same view: same plan */
plan:
    pool_plan_free(&c->layout);
    c->plan = 0;
    c->doc.why[0] = 0;
    c->dirty = true;
    k = 0;
    for (int i = 0; i < n; i++)
        if (m[i].live && core_doc_job(&m[i], c->doc.id)) c->order[k++] = i;
    sort_base = m;
    qsort(c->order, (size_t)k, sizeof *c->order, by_name);
    compute_plan(c, m, n, c->order, k);
    c->plan_done = true;
    return true;
}

/* ---- the election ---- */

/* Whether the view may be voted on: it has held for the quiet period. A
 * recovery whose view no longer lists some holder of the plan it recovers
 * from votes sooner: the failure detector's verdict is pushed to every
 * member at once, so the views agree within a dissemination, not a quiet
 * period. A recovery whose view still lists every holder (the pipeline
 * broke; gossip has not decided yet) waits the full period from the loss,
 * however long that view held before it: a vote over it would name the
 * member about to be declared dead, and a vote stays for its epoch. */
static bool quiet_enough(const pool_core *c, int64_t now)
{
    const pool_plan *pl = pool_core_committed(c);
    if (!c->recovering || !pl) return now - c->view_since_ms >= POOL_QUIET_MS;
    for (int s = 0; s < pl->nstages; s++)
        for (int h = 0; h < pl->stage[s].nholders; h++)
            if (!pool_names_has(&c->view_members, pl->stage[s].holder[h].name))
                return now - c->view_since_ms >= POOL_QUIET_LOSS_MS;
    int64_t since = c->loss_ms > c->view_since_ms ? c->loss_ms : c->view_since_ms;
    return now - since >= POOL_QUIET_MS;
}

static const pool_names *base_members(const pool_core *c)
{
    return c->doc.has & POOL_HAS_COMMITTED ? &c->doc.committed.members : &c->doc.pool;
}

static int64_t base_epoch(const pool_core *c)
{
    return c->doc.has & POOL_HAS_COMMITTED ? c->doc.committed.epoch : 0;
}

static uint64_t base_plan(const pool_core *c)
{
    return c->doc.has & POOL_HAS_COMMITTED ? c->doc.committed.hash : 0;
}

static void cast(pool_core *c, int64_t epoch, pool_actions *out)
{
    pool_vote *v = &c->pending;
    pool_vote_free(v);
    v->v.epoch = epoch;
    v->v.base = base_epoch(c);
    v->v.base_plan = base_plan(c);
    v->v.view = c->view;
    v->v.plan = c->plan;
    v->sw = c->recovering || !pool_core_committed(c) ? POOL_SW_NONE : c->switching;
    for (int s = 0; c->plan && s < c->layout.nstages; s++)
        for (int k = 0; k < c->layout.stage[s].nholders && v->v.nnamed < ELECT_MAX_NAMED; k++)
            snprintf(v->v.named[v->v.nnamed++], PLAN_NAME_MAX, "%s",
                     c->layout.stage[s].holder[k].name);
    pool_plan_free(&c->pending_layout);
    v->members_hash = pool_names_hash(&c->view_members);
    if (pool_names_copy(&v->members, &c->view_members) != 0 ||
        (c->plan && pool_plan_copy(&c->pending_layout, &c->layout) != 0)) {
        pool_vote_free(v);
        pool_plan_free(&c->pending_layout);
        return;
    }
    /* the vote counts once it is saved: one vote per epoch, across restarts */
    c->vote_pending = true;
    pool_action *a = core_act(out, POOL_ACT_SAVE_VOTE);
    if (a) a->epoch = epoch;
}

void core_vote_saved(pool_core *c, int64_t epoch, bool ok, const char *error, pool_actions *out)
{
    if (!c->vote_pending || c->pending.v.epoch != epoch) return;
    c->vote_pending = false;
    if (!ok) {
        if (c->unsaved_epoch != epoch)
            core_log(out, "pool: epoch %lld: the vote cannot be saved, so it is not cast: %s",
                     (long long)epoch, error ? error : "");
        c->unsaved_epoch = epoch;
        pool_vote_free(&c->pending);
        pool_plan_free(&c->pending_layout);
        return;
    }
    pool_vote_free(&c->doc.vote);
    c->doc.vote = c->pending;
    memset(&c->pending, 0, sizeof c->pending);
    pool_plan_free(&c->vote_layout);
    c->vote_layout = c->pending_layout;
    memset(&c->pending_layout, 0, sizeof c->pending_layout);
    c->doc.has |= POOL_HAS_VOTE;
    c->dirty = true;
    char vh[17], ph[17];
    pool_hex64(c->doc.vote.v.view, vh);
    pool_hex64(c->doc.vote.v.plan, ph);
    /* the layout voted for, so that two members' different plans for one
     * view show in their logs */
    char lay[200] = "";
    size_t used = 0;
    const pool_plan *vl = &c->vote_layout;
    for (int st = 0; c->doc.vote.v.plan && st < vl->nstages && used < sizeof lay; st++)
        used += (size_t)snprintf(lay + used, sizeof lay - used, "%s%s %d-%d", st ? ", " : ": ",
                                 vl->stage[st].holder[0].name, vl->stage[st].layer_begin,
                                 vl->stage[st].layer_end - 1);
    if (c->doc.vote.v.plan && used < sizeof lay)
        snprintf(lay + used, sizeof lay - used, "; mb %lld, step %.1f ms%s", (long long)vl->mb,
                 1e-6 * (double)vl->step_ns, vl->handover ? ", a switch" : "");
    core_log(out, "pool: vote epoch %lld: view %s plan %s (%d stages%s)%s%s", (long long)epoch,
             vh, ph, c->doc.vote.v.nnamed, lay, c->doc.vote.v.plan ? "" : ": ",
             c->doc.vote.v.plan ? "" : c->doc.why);
}

/* Commits (epoch, plan) with layout; members: the list of the base
 * membership of the next epoch when this member knows it (its own vote
 * won), else NULL (its hash is known). */
static void commit(pool_core *c, int64_t epoch, uint64_t plan, const pool_names *members,
                   uint64_t members_hash, const pool_plan *layout, pool_actions *out)
{
    pool_plan *p = &c->doc.committed;
    if (layout->handover && (c->doc.has & POOL_HAS_COMMITTED) && p->epoch < epoch) {
        /* a planned switch: the stages of the plan it replaces hand over */
        pool_plan_free(&c->prev);
        if (pool_plan_copy(&c->prev, p) != 0) pool_plan_free(&c->prev);
    }
    /* why the switch to this plan was made: this member's vote for it (its
     * watch may have moved on since, to a reason of a later plan: a holder
     * that leaves after the votes for a slowed plan that still holds it),
     * else the others' (pool_switch.c, why_of) */
    c->switch_why = POOL_SW_NONE;
    if (layout->handover && c->doc.vote.v.epoch == epoch && c->doc.vote.v.plan == plan)
        c->switch_why = c->doc.vote.sw;
    else if (layout->handover && c->vote_pending && c->pending.v.epoch == epoch &&
             c->pending.v.plan == plan)
        c->switch_why = c->pending.sw;
    c->switching = POOL_SW_NONE;
    c->handover_asked = false;
    c->handover_ms = 0;
    c->epoch_from = layout->resume_step;   /* a handover's: once its step is known */
    pool_plan_free(p);
    *p = *layout;
    memset(&p->members, 0, sizeof p->members);
    p->epoch = epoch;
    p->hash = plan;
    p->members_hash = members_hash;
    if (members) pool_names_copy(&p->members, members);
    c->doc.has |= POOL_HAS_COMMITTED;
    c->dirty = true;
    char h[17];
    pool_hex64(plan, h);
    core_log(out, "pool: epoch %lld committed plan %s", (long long)epoch, h);
}

/* A committed section for (epoch, plan) that a member gossips and that the
 * members' own votes prove (pool_plan_verify). */
static const pool_plan *committed_from(const pool_core *c, const pool_member *m, int n,
                                       int64_t epoch, uint64_t plan)
{
    for (int i = 0; i < n; i++) {
        if (!core_doc_job(&m[i], c->doc.id) || !(m[i].doc->has & POOL_HAS_COMMITTED)) continue;
        const pool_plan *p = &m[i].doc->committed;
        char why[300];
        if (p->epoch == epoch && p->hash == plan &&
            pool_plan_verify(p, c->doc.id, base_members(c), base_epoch(c), base_plan(c), m, n,
                             why, sizeof why) == 0)
            return p;
    }
    return NULL;
}

/* Logs a gossiped commit this member does not take, once per member and plan. */
static void refuse(pool_core *c, const char *who, uint64_t plan, const char *why,
                   pool_actions *out)
{
    char key[sizeof c->refused], h[17];
    pool_hex64(plan, h);
    snprintf(key, sizeof key, "%.64s/%.17s", who, h);
    if (strcmp(key, c->refused) == 0) return;
    snprintf(c->refused, sizeof c->refused, "%s", key);
    core_log(out, "pool: %s gossips a commit this node does not take: %s", who, why);
}

/* Whether gossip suspects a member that carries the job (it is neither
 * alive nor declared dead yet), for less than POOL_SUSPECT_WAIT_MS so far.
 * A vote cast now would be over a view that lists it; the members that
 * vote after the verdict vote over a view without it, and the epoch splits
 * between the two (docs/PROTOCOL.md, "Votes"). */
static bool suspecting(pool_core *c, const pool_member *m, int n, int64_t now)
{
    /* the wait is bounded per view, from its first suspicion: a member that
     * keeps raising SUSPECT claims (each refuted) cannot hold votes off
     * longer than that; a verdict changes the view */
    if (c->suspect_view != c->view) {
        c->suspect_view = c->view;
        c->suspect_since_ms = 0;
    }
    bool any = false;
    for (int i = 0; i < n && !any; i++)
        any = !m[i].self && m[i].live && m[i].suspect && core_doc_job(&m[i], c->doc.id);
    if (!any) return false;
    if (!c->suspect_since_ms) c->suspect_since_ms = now;
    return now - c->suspect_since_ms < POOL_SUSPECT_WAIT_MS;
}

void core_elect(pool_core *c, const pool_member *m, int n, int64_t now, pool_actions *out)
{
    if (c->vote_pending) return;
    int64_t ce = base_epoch(c);
    /* what the others voted (live or not: a gone member's last vote stands) */
    elect_voter *voters = c->voters;
    int64_t later = 0;
    for (int i = 0; i < n; i++) {
        voters[i] = (elect_voter){.name = m[i].name, .gone = !m[i].live, .vote = NULL};
        if (m[i].self) {
            if (c->doc.vote.v.epoch) voters[i].vote = &c->doc.vote.v;
        } else if (core_doc_job(&m[i], c->doc.id) && (m[i].doc->has & POOL_HAS_VOTE)) {
            voters[i].vote = &m[i].doc->vote.v;
            if (voters[i].vote->epoch > later) later = voters[i].vote->epoch;
        }
    }
    const pool_names *base = base_members(c);
    if (core_scratch(c, base->n > n ? base->n : n) != 0) return;
    voters = c->voters;
    const char **names = c->names;
    for (int i = 0; i < base->n; i++) names[i] = base->name[i];
    int nm = base->n;
    /* My vote stays in my record once its epoch is decided, failed too:
     * then the next vote goes to the epoch after it (never the same one
     * again, across restarts: the failed vote is what state.json holds). */
    /* A vote at or before the committed epoch is done with: a recovery
     * votes in the epoch after it. */
    int64_t ve = c->doc.vote.v.epoch;
    bool open = ve > ce && ve != c->failed_epoch;
    int64_t epoch = open ? ve : ve > ce ? c->next_epoch : ce + 1;
    /* A commit another member gossips for this epoch or a later one: the
     * votes that made it may already be gone from their records. */
    for (int k = 0; k < n; k++) {
        if (!core_doc_job(&m[k], c->doc.id) || !(m[k].doc->has & POOL_HAS_COMMITTED)) continue;
        const pool_plan *p = &m[k].doc->committed;
        if (p->epoch < epoch) continue;
        char why[300];
        /* only what the members' own signed votes made */
        if (pool_plan_verify(p, c->doc.id, base, ce, base_plan(c), m, n, why, sizeof why) != 0) {
            refuse(c, m[k].name, p->hash, why, out);
            continue;
        }
        commit(c, p->epoch, p->hash, NULL, p->members_hash, p, out);
        return;
    }
    if (open) {
        /* the base membership unknown here (only its hash): the epoch is
         * not decided here; its commit comes by gossip (core_fill_base may
         * learn the list meanwhile) */
        if (nm == 0) return;
        elect_result r;
        elect_decide(epoch, names, nm, voters, n, &r);
        if (r.outcome == ELECT_COMMITTED) {
            uint64_t plan = r.winner ? r.winner->plan : r.base_plan;
            int64_t ep = r.winner ? epoch : r.base;
            if (r.winner && plan == c->doc.vote.v.plan && c->vote_layout.nstages &&
                pool_plan_hash(&c->vote_layout) == plan) {
                /* my vote won: its plan is the layout I voted for */
                commit(c, ep, plan, &c->doc.vote.members, c->doc.vote.members_hash,
                       &c->vote_layout, out);
            } else {
                const pool_plan *p = committed_from(c, m, n, ep, plan);
                if (!p) return; /* wait until a member that ran the numbers says it */
                commit(c, ep, plan, NULL, p->members_hash, p, out);
            }
            /* The vote stays in the record: members that decide later
             * still need to see it. */
            return;
        }
        if (r.outcome == ELECT_FAILED) {
            if (r.from_later) {
                /* who voted in a later epoch (the verdict is theirs) */
                const char *who = "?";
                int64_t we = 0;
                for (int i = 0; i < n; i++)
                    if (voters[i].vote && voters[i].vote->epoch > epoch &&
                        voters[i].vote->epoch > we) {
                        we = voters[i].vote->epoch;
                        who = voters[i].name;
                    }
                core_log(out, "pool: epoch %lld failed (%s voted in epoch %lld on base epoch "
                         "%lld)", (long long)epoch, who, (long long)we, (long long)r.base);
            } else {
                core_log(out, "pool: epoch %lld failed (%d of %d base members voted)",
                         (long long)epoch, r.votes, nm);
            }
            c->failed_view = r.from_later ? 0 : c->doc.vote.v.view;
            if (r.from_later && r.base > ce) return; /* learn the commit first */
            c->failed_epoch = epoch;
            c->next_epoch = r.from_later && later > epoch ? later : epoch + 1;
            epoch = c->next_epoch;
        } else {
            return; /* open: wait */
        }
    } else if (later > epoch) {
        /* the others are ahead: the epochs between are decided */
        elect_result r;
        elect_decide(epoch, names, nm, voters, n, &r);
        if (r.outcome == ELECT_COMMITTED && r.from_later && r.base > ce) {
            const pool_plan *p = committed_from(c, m, n, r.base, r.base_plan);
            if (!p) return;
            commit(c, r.base, r.base_plan, NULL, p->members_hash, p, out);
            return;
        }
        epoch = later;
    }
    /* vote when the view has been quiet, unless it is the one that just failed */
    bool suspected = suspecting(c, m, n, now);
    if (!quiet_enough(c, now) || suspected) return;
    if (c->failed_view && c->failed_view == c->view && !c->plan) return;
    cast(c, epoch, out);
}

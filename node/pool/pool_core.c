/* pool_core.c — a member's share of a job as a pure state machine
 * (pool_core.h; docs/PROTOCOL.md, "Jobs and the plan election"): it takes a
 * job up, has itself profiled and its links measured, votes (pool_elect.c),
 * starts its stage of the committed plan, gathers the model when it
 * submitted the job, and says all of it in its job document. Every effect
 * is an action for the driver; nothing here touches a process, a socket, a
 * file or a clock. */
#include "pool_core_internal.h"

#include "node_base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- actions ---- */

pool_action *core_act(pool_actions *out, pool_act_type type)
{
    if (out->n == out->cap) {
        int cap = out->cap ? 2 * out->cap : 16;
        pool_action *a = realloc(out->a, (size_t)cap * sizeof *a);
        if (!a) return NULL;
        out->a = a;
        out->cap = cap;
    }
    pool_action *a = &out->a[out->n++];
    memset(a, 0, sizeof *a);
    a->type = type;
    return a;
}

void core_log(pool_actions *out, const char *fmt, ...)
{
    pool_action *a = core_act(out, POOL_ACT_LOG);
    if (!a) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->text, sizeof a->text, fmt, ap);
    va_end(ap);
}

void pool_actions_clear(pool_actions *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->a[i].targets);
        free(l->a[i].snaps);
    }
    l->n = 0;
}

void pool_actions_free(pool_actions *l)
{
    pool_actions_clear(l);
    free(l->a);
    memset(l, 0, sizeof *l);
}

/* ---- the core ---- */

pool_core *pool_core_create(const pool_core_config *cfg)
{
    pool_core *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    snprintf(c->name, sizeof c->name, "%s", cfg->name ? cfg->name : "");
    snprintf(c->host, sizeof c->host, "%s", cfg->host ? cfg->host : "0000000000000000");
    c->no_compute = cfg->no_compute;
    c->cores = cfg->cores > 0 ? cfg->cores : 1;
    c->threads = cfg->threads;
    c->switches = cfg->switches;
    pool_doc_init(&c->doc);
    return c;
}

/* Forgets the job (the scratch and the configuration stay). */
static void core_clear(pool_core *c)
{
    pool_doc_free(&c->doc);
    pool_names_free(&c->view_members);
    pool_plan_free(&c->layout);
    pool_vote_free(&c->pending);
    pool_plan_free(&c->pending_layout);
    pool_plan_free(&c->vote_layout);
    pool_plan_free(&c->prev);
    if (c->has_fetched) pool_job_blob_free(&c->fetched);
    char name[MESH_NAME_MAX], host[17];
    memcpy(name, c->name, sizeof name);
    memcpy(host, c->host, sizeof host);
    bool nc = c->no_compute, sw = c->switches;
    int cores = c->cores, threads = c->threads, cap = c->cap;
    elect_voter *voters = c->voters;
    const char **names = c->names;
    int *order = c->order;
    memset(c, 0, sizeof *c);
    memcpy(c->name, name, sizeof name);
    memcpy(c->host, host, sizeof host);
    c->no_compute = nc;
    c->switches = sw;
    c->cores = cores;
    c->threads = threads;
    c->cap = cap;
    c->voters = voters;
    c->names = names;
    c->order = order;
    pool_doc_init(&c->doc);
}

void pool_core_destroy(pool_core *c)
{
    if (!c) return;
    core_clear(c);
    free(c->voters);
    free(c->names);
    free(c->order);
    free(c);
}

int core_scratch(pool_core *c, int n)
{
    if (n <= c->cap) return 0;
    elect_voter *v = realloc(c->voters, (size_t)n * sizeof *v);
    if (v) c->voters = v;
    const char **nm = realloc(c->names, (size_t)n * sizeof *nm);
    if (nm) c->names = nm;
    int *o = realloc(c->order, (size_t)n * sizeof *o);
    if (o) c->order = o;
    if (!v || !nm || !o) return -1;
    c->cap = n;
    return 0;
}

const pool_doc *pool_core_doc(const pool_core *c) { return &c->doc; }

char *pool_core_blob_text(const pool_core *c, char hash[65])
{
    if (!c->doc.bundle) return NULL;
    pool_job_blob b = {.bundle = *c->doc.bundle, .pool = c->doc.pool};   /* borrowed */
    return pool_job_blob_text(&b, hash);
}
const pool_bundle *pool_core_bundle(const pool_core *c) { return c->doc.bundle; }
bool pool_core_stopped(const pool_core *c) { return c->doc.stop; }
bool pool_core_due(const pool_core *c) { return c->has_fetched; }

const pool_plan *pool_core_committed(const pool_core *c)
{
    return c->doc.has & POOL_HAS_COMMITTED ? &c->doc.committed : NULL;
}

void pool_core_saved(const pool_core *c, pool_saved *out)
{
    memset(out, 0, sizeof *out);
    out->has_committed = (c->doc.has & POOL_HAS_COMMITTED) != 0;
    out->committed = c->doc.committed;
    out->has_run = (c->doc.has & POOL_HAS_RUN) != 0;
    out->run = c->doc.run;
    out->stop = c->doc.stop;
    out->has_vote = c->vote_pending || c->doc.vote.v.epoch > 0;
    out->vote = c->vote_pending ? c->pending : c->doc.vote;
}

bool core_doc_job(const pool_member *m, const char *id)
{
    return m->doc && id && id[0] && strcmp(m->doc->id, id) == 0;
}

static void set_ready(pool_core *c)
{
    bool r = (c->doc.has & POOL_HAS_PROF) && c->links_done;
    if (r != c->doc.ready) c->dirty = true;
    c->doc.ready = r;
}

/* Sets this member's run state (an error when given; the former one stays
 * otherwise). */
void core_set_run(pool_core *c, pool_run_state state, const char *error)
{
    if (!(c->doc.has & POOL_HAS_RUN)) pool_run_init(&c->doc.run);
    c->doc.has |= POOL_HAS_RUN;
    c->doc.run.state = state;
    if (error) snprintf(c->doc.run.error, sizeof c->doc.run.error, "%s", error);
    c->dirty = true;
}

void core_kill(pool_core *c, pool_actions *out)
{
    c->prof_pending = c->probe_pending = c->run_pending = c->export_pending = false;
    c->pull_pending = c->ckpt_pending = false;
    /* the driver stops a job blob's fetch too, unanswered: fetched again
     * (follow) after the usual pause, or the newer job it was for would
     * never be taken up */
    if (c->fetch_pending) {
        c->fetch_pending = false;
        c->fetch_retry_ms = -1;
    }
    core_act(out, POOL_ACT_KILL);
}

static void publish_now(pool_core *c, int64_t now, pool_actions *out)
{
    core_act(out, POOL_ACT_PUBLISH);
    c->dirty = false;
    c->next_doc_ms = now + POOL_DOC_MS;
}

/* Takes up a job (its blob: the bundle and the first epoch's members): the
 * driver checks its files (SETUP). */
static void adopt(pool_core *c, const pool_job_blob *b, const pool_job_ref *ref,
                  pool_actions *out)
{
    core_kill(c, out);
    core_clear(c);
    pool_doc *d = &c->doc;
    d->bundle = calloc(1, sizeof *d->bundle);
    if (!d->bundle || pool_bundle_copy(d->bundle, &b->bundle) != 0 ||
        pool_names_copy(&d->pool, &b->pool) != 0) {
        free(d->bundle);
        d->bundle = NULL;
        pool_names_free(&d->pool);
        core_log(out, "pool: out of memory taking job %s up", b->bundle.id);
        return;
    }
    d->job = *ref;
    snprintf(d->id, sizeof d->id, "%s", ref->id);
    d->has |= POOL_HAS_POOL | POOL_HAS_COMPUTE | POOL_HAS_HOST | POOL_HAS_CORES |
              POOL_HAS_THREADS | POOL_HAS_FIRST | POOL_HAS_ANY | POOL_HAS_READY;
    d->compute = !c->no_compute;
    snprintf(d->host, sizeof d->host, "%s", c->host);
    d->cores = c->cores;
    d->threads = c->threads ? c->threads : c->cores;
    c->dirty = true;
    c->setup_pending = true;
    core_act(out, POOL_ACT_SETUP);
}

void pool_core_setup_done(pool_core *c, const pool_setup *s, pool_actions *out)
{
    pool_doc *d = &c->doc;
    if (!c->setup_pending || !d->bundle) return;
    c->setup_pending = false;
    c->dirty = true;
    if (!s->ok) {
        snprintf(d->error, sizeof d->error, "%.500s", s->error);
        core_log(out, "pool: job %s cannot be set up here: %s", d->id, s->error);
        return;
    }
    pool_lacks_free(&d->lacks);
    pool_lacks_copy(&d->lacks, &s->lacks);
    pool_lacks_roles(&d->lacks, &d->first, &d->any);
    c->shape = s->shape;
    c->batch = s->batch;
    c->micro_batch = s->micro_batch;
    c->steps = s->steps;
    c->snapshot_every = s->snapshot_every;
    c->checkpoint_every = s->checkpoint_every;
    c->replan_gain = s->replan_gain;
    c->replan_min_steps = s->replan_min_steps;
    c->job_loaded = true;
    core_log(out, "pool: took up job %s (submitted by %s); %d file(s) lacking here", d->id,
             d->bundle->submitted_by, d->lacks.n);
    const pool_saved *sv = s->saved;
    if (!sv) return;
    /* what must survive a restart: the committed plan and this member's
     * run, so that it neither votes again nor re-runs a finished stage */
    if (sv->has_committed && pool_plan_copy(&d->committed, &sv->committed) == 0)
        d->has |= POOL_HAS_COMMITTED;
    if (sv->stop) {
        d->stop = true;
        d->has |= POOL_HAS_STOP;
    }
    /* a vote once cast stands, across restarts too (one vote per epoch) */
    if (sv->has_vote && sv->vote.v.epoch > 0 && pool_vote_copy(&d->vote, &sv->vote) == 0)
        d->has |= POOL_HAS_VOTE;
    if (sv->has_run) {
        d->run = sv->run;
        d->has |= POOL_HAS_RUN;
        if (d->has & POOL_HAS_COMMITTED) c->run_epoch = d->committed.epoch;
        if (d->run.state == POOL_RUN_RUNNING)
            core_set_run(c, POOL_RUN_FAILED, "this node restarted during the run");
    }
}

/* ---- profile and links ---- */

bool core_too_small(pool_core *c, const pool_member *m, int n)
{
    cost_bytes cb;
    char err[256];
    if (cost_bytes_compute(&cb, &c->shape, 1, 4, err, sizeof err) != 0) return false;
    int64_t need = cost_stage_memory(&cb, c->shape.tied, 1, true, c->shape.layers, true, 1);
    int64_t have = 0;
    int members = 0;
    for (int i = 0; i < n; i++) {
        const pool_doc *d = m[i].doc;
        bool compute = m[i].self ? !c->no_compute && c->doc.any
                                 : d && d->compute && d->any;
        if (!m[i].live || !compute || (!m[i].self && !core_doc_job(&m[i], c->doc.id))) continue;
        have += (int64_t)(m[i].mem_free / 1000 * 950);
        members++;
    }
    if (members == 0 || need <= have) return false;
    char a[32], b[32], d[32];
    cost_format_bytes(a, sizeof a, need);
    cost_format_bytes(b, sizeof b, have);
    cost_format_bytes(d, sizeof d, need - have);
    snprintf(c->doc.why, sizeof c->doc.why, "the model needs at least %s (%s of %d layers) and "
             "the %d member(s) that compute have %s free: %s missing", a,
             c->shape.lora_r > 0 ? (c->shape.nf4 ? "the NF4 base and the LoRA adapters"
                                                 : "the frozen base and the LoRA adapters")
                                 : "weights, gradients and AdamW moments",
             c->shape.layers, members, b, d);
    return true;
}

static void measure(pool_core *c, const pool_member *m, int n, pool_actions *out)
{
    pool_doc *d = &c->doc;
    if (!c->job_loaded || c->no_compute || !d->any) return;
    bool prof = (d->has & POOL_HAS_PROF) != 0;
    if (!prof && !c->prof_pending && core_too_small(c, m, n)) {
        c->dirty = true;
        return;
    }
    if (!prof && !d->prof_error[0] && !c->prof_pending) {
        pool_action *a = core_act(out, POOL_ACT_PROFILE);
        if (!a) return;
        a->micro_batch = c->micro_batch;
        a->seq_len = c->shape.seq;
        c->prof_pending = true;
    }
    /* links: once the profile is in, to every live member with the job
     * (all of them: no cap; docs/ARCHITECTURE.md, "The pool core") */
    if (prof && !c->links_done && !c->probe_pending) {
        pool_action *a = core_act(out, POOL_ACT_PROBE);
        if (!a) return;
        a->targets = calloc((size_t)(n > 0 ? n : 1), sizeof *a->targets);
        if (!a->targets) {
            out->n--;
            return;
        }
        for (int i = 0; i < n; i++) {
            if (m[i].self || !m[i].live || !core_doc_job(&m[i], d->id)) continue;
            pool_target *t = &a->targets[a->ntargets++];
            snprintf(t->name, sizeof t->name, "%s", m[i].name);
            snprintf(t->address, sizeof t->address, "%s", m[i].address ? m[i].address : "");
            t->port = m[i].port;
        }
        c->probe_pending = true;
    }
}

void pool_core_profiled(pool_core *c, const pool_profile *prof, const char *error,
                        pool_actions *out)
{
    if (!c->prof_pending) return;
    c->prof_pending = false;
    c->dirty = true;
    if (prof) {
        c->doc.prof = *prof;
        c->doc.has |= POOL_HAS_PROF;
        core_log(out, "pool: profiled: layer forward %.2f ms, backward %.2f ms",
                 (double)prof->prof.fwd_ns[COST_LAYER] * 1e-6,
                 (double)prof->prof.bwd_ns[COST_LAYER] * 1e-6);
    } else {
        snprintf(c->doc.prof_error, sizeof c->doc.prof_error, "profiling failed: %.480s",
                 error ? error : "");
        core_log(out, "pool: %s", c->doc.prof_error);
    }
    set_ready(c);
}

void pool_core_set_threads(pool_core *c, int n, pool_actions *out)
{
    if (n < 0) n = 0;
    if (n == c->threads) return;
    c->threads = n;
    pool_doc *d = &c->doc;
    if (!d->bundle) return;
    int64_t t = n ? n : c->cores, was = d->threads;
    if (was == t) return;
    d->threads = t;
    c->dirty = true;
    /* a stage of the committed plan keeps computing: its profile scales
     * with the threads at once (as if they scaled perfectly), and its pace
     * corrects that from what it measures (pool_switch.c); any other member
     * measures itself again */
    const pool_plan *pl = pool_core_committed(c);
    bool holder = pl && pool_plan_stage_of(pl, c->name) >= 0;
    if (!(d->has & POOL_HAS_PROF) || c->prof_pending || !c->job_loaded) {
        core_log(out, "pool: computes with %lld thread%s now", (long long)t, t == 1 ? "" : "s");
    } else if (holder && was > 0) {
        double f = (double)was / (double)t;
        core_pace_scale(c, f);
        core_log(out, "pool: computes with %lld thread%s now (was %lld): its profile scaled by "
                 "%.2f until its stage's pace says otherwise", (long long)t, t == 1 ? "" : "s",
                 (long long)was, f);
    } else {
        d->has &= ~POOL_HAS_PROF;
        core_log(out, "pool: computes with %lld thread%s now: profiled again", (long long)t,
                 t == 1 ? "" : "s");
    }
}

void pool_core_links_measured(pool_core *c, const pool_links *links, pool_actions *out)
{
    (void)out;
    if (!c->probe_pending) return;
    c->probe_pending = false;
    pool_links_free(&c->doc.links);
    pool_links none = {0, NULL};
    /* the record carries a summary: every link of a small pool, the
     * unusual ones and the typical link of a large one */
    if (pool_links_summary(links ? links : &none, &c->doc.links, &c->doc.typical) != 0)
        memset(&c->doc.typical, 0, sizeof c->doc.typical);
    c->doc.has |= POOL_HAS_LINKS;
    c->links_done = true;
    c->dirty = true;
    set_ready(c);
}

void pool_core_vote_saved(pool_core *c, int64_t epoch, bool ok, const char *error,
                          pool_actions *out)
{
    core_vote_saved(c, epoch, ok, error, out);
}

/* ---- this member's stage ---- */

static void run_stage(pool_core *c, const pool_member *m, int n, pool_actions *out)
{
    const pool_plan *pl = pool_core_committed(c);
    if (c->run_pending || c->recovering || !pl || pl->epoch == c->run_epoch) return;
    if (pool_plan_stage_of(pl, c->name) < 0) {
        /* no stage in this epoch (a spare, or moved out by a recovery) */
        if ((c->doc.has & POOL_HAS_RUN) && c->doc.run.state == POOL_RUN_RECOVERING) {
            c->doc.run.state = POOL_RUN_NONE;
            c->dirty = true;
        }
        c->run_epoch = pl->epoch;
        return;
    }
    /* a planned switch starts after the step the old stages handed over at,
     * once every one of them has (pool_switch.c) */
    if (pl->handover && c->handed_epoch != pl->epoch) return;
    int64_t from = pl->handover ? c->handed_step : pl->resume_step;
    pool_action *a = core_act(out, POOL_ACT_RUN);
    if (!a) return;
    a->epoch = pl->epoch;
    a->step = from;
    if (from > 0 && core_pieces_at(c, m, n, pl, from, a) != 0) {
        /* the layers' copies went away between the vote and now */
        free(a->targets);
        free(a->snaps);
        out->n--;
        core_set_run(c, POOL_RUN_FAILED, c->doc.why);
        core_log(out, "pool: stage of epoch %lld cannot start: %s", (long long)pl->epoch,
                 c->doc.why);
        c->run_epoch = pl->epoch;
        return;
    }
    core_set_run(c, POOL_RUN_RUNNING, NULL);
    c->doc.run.error[0] = 0;
    c->doc.run.has_steps = true;
    c->doc.run.steps = c->steps;
    c->run_pending = true;
    c->run_epoch = pl->epoch;
    c->nrecent = 0;
    c->npace = 0;
    c->pace_base = c->pace_due = 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void pool_core_run_progress(pool_core *c, const pool_progress *pr)
{
    pool_run *r = &c->doc.run;
    if (!(c->doc.has & POOL_HAS_RUN) || (r->has_step && r->step == pr->step)) return;
    r->has_step = r->has_loss = r->has_tps = r->has_step_ms = true;
    r->step = pr->step;
    r->loss = pr->loss;
    r->tps = pr->tps;
    double step_ms = pr->step_ms;
    if (pr->compute_ms >= 0) core_pace_sample(c, pr->compute_ms);
    /* the median of the last steps: one step slowed by a snapshot, a
     * neighbour's start or a wait is not what the stage runs at */
    c->recent_ms[c->nrecent++ % POOL_RECENT_STEPS] = step_ms;
    int k = c->nrecent < POOL_RECENT_STEPS ? c->nrecent : POOL_RECENT_STEPS;
    double v[POOL_RECENT_STEPS];
    memcpy(v, c->recent_ms, (size_t)k * sizeof *v);
    qsort(v, (size_t)k, sizeof *v, cmp_double);
    r->step_ms = v[k / 2];
    c->dirty = true;
}

void pool_core_run_ended(pool_core *c, bool ok, const char *error, pool_actions *out)
{
    if (!c->run_pending) return;
    c->run_pending = false;
    if (c->recovering) return;  /* stopped for the recovery: its state says so */
    if (ok && c->doc.run.has_step && c->doc.run.step < c->steps) {
        /* stopped at a step boundary before the job's end: some stage was
         * asked to hand over (a planned switch; this member's may not know
         * of it yet), and its state is a snapshot of the step */
        c->handover_asked = false;
        core_set_run(c, POOL_RUN_HANDED, NULL);
        c->urgent = true;   /* the new stages wait for it */
        core_log(out, "pool: stage handed over after step %lld", (long long)c->doc.run.step);
        return;
    }
    if (ok) {
        core_set_run(c, POOL_RUN_DONE, NULL);
        core_log(out, "pool: stage finished");
    } else {
        const char *e = error && error[0] ? error : "the training process failed";
        core_set_run(c, POOL_RUN_FAILED, e);
        core_log(out, "pool: stage failed: %s", error ? error : "");
    }
}

/* The submitter gathers the model when every stage is done, and once the
 * pool checkpoint it writes or will try again is through (the job's end
 * does not cut it short). */
static void gather_model(pool_core *c, const pool_member *m, int n, pool_actions *out)
{
    const pool_plan *pl = pool_core_committed(c);
    if (c->exported || c->export_pending || !pl || !c->doc.bundle ||
        strcmp(c->doc.bundle->submitted_by, c->name) != 0 || c->ckpt_pending ||
        c->ckpt_step > c->ckpt_done)
        return;
    for (int s = 0; s < pl->nstages; s++)
        for (int k = 0; k < pl->stage[s].nholders; k++) {
            bool done = false;
            for (int i = 0; i < n; i++)
                if (strcmp(m[i].name, pl->stage[s].holder[k].name) == 0 &&
                    core_doc_job(&m[i], c->doc.id))
                    done = (m[i].doc->has & POOL_HAS_RUN) && m[i].doc->run.state == POOL_RUN_DONE;
            if (!done) return;
        }
    c->export_pending = true;
    core_act(out, POOL_ACT_GATHER);
}

void pool_core_gathered(pool_core *c, bool ok, pool_actions *out)
{
    if (!c->export_pending) return;
    c->export_pending = false;
    c->exported = true;
    if (!(c->doc.has & POOL_HAS_RUN)) {
        pool_run_init(&c->doc.run);
        c->doc.has |= POOL_HAS_RUN;
    }
    c->doc.run.gathered = ok;
    c->dirty = true;
    core_log(out, "pool: gathering the model %s", ok ? "done" : "failed (see export.log)");
}

bool pool_core_run_active(const pool_core *c, const pool_member *m, int n)
{
    const pool_plan *pl = pool_core_committed(c);
    if (!c->doc.bundle || c->doc.stop || !pl) return false;
    /* The submitter that gathered the model knows its job ended, whatever
     * the stage holders' documents say by now (one that left, or moved on,
     * no longer says "done"): `train --wait` said done, and a new job is
     * not refused as "running". */
    if (c->exported && (c->doc.has & POOL_HAS_RUN) && c->doc.run.gathered == 1) return false;
    bool active = false;
    for (int s = 0; s < pl->nstages; s++)
        for (int k = 0; k < pl->stage[s].nholders; k++) {
            const pool_run *r = NULL;
            for (int i = 0; i < n; i++)
                if (strcmp(m[i].name, pl->stage[s].holder[k].name) == 0 &&
                    core_doc_job(&m[i], c->doc.id) && (m[i].doc->has & POOL_HAS_RUN))
                    r = &m[i].doc->run;
            if (r && (r->state == POOL_RUN_FAILED || r->state == POOL_RUN_STOPPED)) return false;
            if (!r || r->state != POOL_RUN_DONE) active = true;
        }
    return active;
}

/* ---- the step ---- */

/* Logs a gossiped job this member does not take up, once per member and job. */
static void refuse_job(pool_core *c, const char *who, const char *id, const char *why,
                       pool_actions *out)
{
    char key[sizeof c->job_refused];
    snprintf(key, sizeof key, "%.64s/%.20s", who, id);
    if (strcmp(key, c->job_refused) == 0) return;
    snprintf(c->job_refused, sizeof c->job_refused, "%s", key);
    core_log(out, "pool: %s gossips a job this node refuses: %s", who, why);
}

static void stop_job(pool_core *c, pool_actions *out)
{
    c->doc.stop = true;
    c->doc.has |= POOL_HAS_STOP;
    core_kill(c, out);
    core_set_run(c, POOL_RUN_STOPPED, NULL);
}

void pool_core_fetched(pool_core *c, const pool_job_ref *ref, const pool_job_blob *blob,
                       pool_actions *out)
{
    if (!c->fetch_pending || strcmp(ref->blob, c->fetching.blob) != 0) return;
    c->fetch_pending = false;
    const pool_bundle *b = blob ? &blob->bundle : NULL;
    /* the blob is the one its hash names (the driver checked it); it must
     * also be the job the record names */
    if (!b || strcmp(b->id, ref->id) != 0 || strcmp(b->submitted_by, ref->by) != 0 ||
        b->submitted_at != ref->at) {
        core_log(out, "pool: job %s could not be fetched from the members that carry it; "
                 "trying again", ref->id);
        c->fetch_retry_ms = -1;   /* the next step sets the time */
        return;
    }
    if (c->has_fetched) pool_job_blob_free(&c->fetched);
    c->has_fetched = pool_bundle_copy(&c->fetched.bundle, b) == 0 &&
                     pool_names_copy(&c->fetched.pool, &blob->pool) == 0;
    if (!c->has_fetched) pool_job_blob_free(&c->fetched);
}

/* Asks for the blob of job r from the live members that carry it, its
 * submitter first. */
static void fetch(pool_core *c, const pool_job_ref *r, const pool_member *m, int n,
                  pool_actions *out)
{
    pool_action *a = core_act(out, POOL_ACT_FETCH);
    if (!a) return;
    a->targets = calloc((size_t)(n > 0 ? n : 1), sizeof *a->targets);
    if (!a->targets) {
        out->n--;
        return;
    }
    a->job = *r;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const pool_doc *d = m[i].doc;
            bool by = strcmp(m[i].name, r->by) == 0;
            if (m[i].self || !m[i].live || !d || (pass == 0) != by ||
                strcmp(d->job.id, r->id) != 0 || strcmp(d->job.blob, r->blob) != 0)
                continue;
            pool_target *t = &a->targets[a->ntargets++];
            snprintf(t->name, sizeof t->name, "%s", m[i].name);
            snprintf(t->address, sizeof t->address, "%s", m[i].address ? m[i].address : "");
            t->port = m[i].port;
        }
    c->fetch_pending = true;
    c->fetching = *r;
}

/* A job someone else submitted or stopped. */
static void follow(pool_core *c, const pool_member *m, int n, int64_t now, int64_t wall_s,
                   pool_actions *out)
{
    if (c->fetch_retry_ms < 0) c->fetch_retry_ms = now + 2 * POOL_TICK_MS;
    for (int i = 0; i < n; i++) {
        const pool_doc *d = m[i].doc;
        if (m[i].self || !d || !d->id[0]) continue;
        if (c->doc.bundle && strcmp(d->id, c->doc.id) == 0) {
            if (d->stop && !c->doc.stop) {
                stop_job(c, out);
                core_log(out, "pool: job %s stopped by %s", c->doc.id, m[i].name);
            }
            continue;
        }
        if (!m[i].live) continue;
        /* the job as its submitter's own record names it, when it carries it */
        const pool_job_ref *r = &d->job;
        for (int k = 0; k < n; k++)
            if (strcmp(m[k].name, r->by) == 0 && core_doc_job(&m[k], r->id)) r = &m[k].doc->job;
        /* later jobs replace earlier ones, in an order every member sees
         * the same, with no job from the far future */
        if (!pool_job_ref_later(r, c->doc.bundle ? &c->doc.job : NULL, wall_s)) continue;
        if (!pool_job_from_carrier(r, m[i].name, m, n)) {
            char why[256];
            snprintf(why, sizeof why, "it says %.64s submitted it, and %.64s's own record does "
                     "not carry it", r->by, r->by);
            refuse_job(c, m[i].name, d->id, why, out);
            continue;
        }
        if (c->has_fetched && strcmp(c->fetched.bundle.id, r->id) == 0 &&
            strcmp(c->fetching.blob, r->blob) == 0) {
            pool_job_blob b = c->fetched;   /* adopt clears the core: keep it */
            pool_job_ref ref = *r;
            bool stopped = d->stop;
            c->has_fetched = false;
            memset(&c->fetched, 0, sizeof c->fetched);
            /* a stopped job is taken up too, as stopped: status then shows it */
            adopt(c, &b, &ref, out);
            pool_job_blob_free(&b);
            if (stopped && !c->doc.stop) {
                c->doc.stop = true;
                c->doc.has |= POOL_HAS_STOP;
                core_set_run(c, POOL_RUN_STOPPED, NULL);
            }
            continue;
        }
        if (c->fetch_pending || now < c->fetch_retry_ms) continue;
        fetch(c, r, m, n, out);
    }
}

void pool_core_step(pool_core *c, const pool_member *m, int n, int64_t now_ms, int64_t wall_s,
                    pool_actions *out)
{
    if (n > POOL_MAX_MEMBERS) n = POOL_MAX_MEMBERS;
    if (core_scratch(c, n + 1) != 0) {
        core_log(out, "pool: out of memory for a view of %d members", n);
        return;
    }
    follow(c, m, n, now_ms, wall_s, out);
    if (c->doc.bundle && !c->doc.stop) {
        measure(c, m, n, out);
        core_pace(c, out);
        core_watch(c, m, n, now_ms, out);
        core_moot(c, m, n, out);
        bool committed = pool_core_committed(c) != NULL;
        bool behind = committed && !c->recovering && core_behind(c, m, n);
        if (committed && !c->recovering && !behind && c->switches)
            core_switch_watch(c, m, n, now_ms, out);
        bool sw = c->switching != POOL_SW_NONE;
        if (!committed || c->recovering || behind || sw || !(c->doc.has & POOL_HAS_RUN)) {
            if (core_view(c, m, n, now_ms) && (!committed || c->recovering || behind || sw))
                core_elect(c, m, n, now_ms, out);
        }
        if (c->recovering) core_recovered(c, now_ms, out);
        if (!c->recovering) core_handover(c, m, n, now_ms, out);
        if (!c->recovering) {
            core_fill_base(c, m, n);
            run_stage(c, m, n, out);
            core_rec_progress(c, m, n, now_ms);
            core_switch_progress(c, m, n, now_ms);
            core_copied(c, m, n);
            core_pull(c, m, n, now_ms, out);
            core_checkpoint(c, m, n, now_ms, out);
            gather_model(c, m, n, out);
        }
    }
    if (c->dirty && (now_ms >= c->next_doc_ms || c->urgent)) publish_now(c, now_ms, out);
    c->urgent = false;
}

int pool_core_submit(pool_core *c, const pool_bundle *b, const pool_member *m, int n,
                     int64_t now_ms, int64_t wall_s, pool_actions *out, char *err,
                     size_t errlen)
{
    /* a job is its submitter's: this member submits its own only */
    if (strcmp(b->submitted_by, c->name) != 0)
        return node_errf(err, errlen, "the job names another submitter than this node");
    if (!pool_bundle_later(b, NULL, wall_s))
        return node_errf(err, errlen, "the job's submitted_at is ahead of this node's clock");
    if (pool_core_run_active(c, m, n))
        return node_errf(err, errlen, "a job is running in this mesh; stop it first with "
                         "shardnode train --state DIR --stop");
    /* the members it goes to: the base membership of its first epoch; with
     * the bundle, the job blob the others fetch */
    pool_job_blob blob;
    memset(&blob, 0, sizeof blob);
    for (int i = 0; i < n; i++)
        if (m[i].live && pool_names_add(&blob.pool, m[i].name) != 0) {
            pool_names_free(&blob.pool);
            return node_errf(err, errlen, "out of memory");
        }
    blob.bundle = *b;   /* borrowed */
    char hash[65];
    char *text = pool_job_blob_text(&blob, hash);
    if (!text) {
        pool_names_free(&blob.pool);
        return node_errf(err, errlen, "out of memory");
    }
    free(text);
    pool_job_ref ref;
    pool_job_blob_ref(&blob, hash, &ref);
    adopt(c, &blob, &ref, out);
    pool_names_free(&blob.pool);
    publish_now(c, now_ms, out);
    return 0;
}

int pool_core_stop(pool_core *c, int64_t now_ms, pool_actions *out)
{
    if (!c->doc.bundle) return -1;
    stop_job(c, out);
    publish_now(c, now_ms, out);
    return 0;
}

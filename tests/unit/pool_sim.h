/* pool_sim.h — whole pools of pool cores in one process, on a simulated
 * clock (shared by test_pool_sim.c and test_pool_recover.c, as
 * gossip_sim.h is by the gossip tests). Each member is a pool core
 * (node/pool/); the simulation stands in for the daemon and for gossip: a
 * member's PUBLISH becomes the next version of its record's job text, which
 * must fit a record (GOSSIP_JOB_MAX) and read back through
 * pool_doc_from_text to the same text; each other member sees it after a
 * seeded delay of 0 to 2 ticks, unless a partition lies between them or
 * the publisher is down, and then through any member it hears that has a
 * newer version (gossip relays signed records); a job's blob is fetched from the first member
 * that is reachable and holds it. Liveness is what a failure detector says:
 * a member crashed or cut off is live for DETECT_MS more (suspect from
 * SUSPECT_MS), then dead; no member votes while it suspects one that
 * carries the job.
 * Profiles and link probes finish after seeded times with synthetic
 * figures. The stages of a committed plan run as one simulated pipeline:
 * a step every SIM_STEP_MS while every holder of that epoch runs it and
 * reaches the others; a holder gone or cut off for SIM_PIPE_TIMEOUT_MS
 * fails the others' stages (the engine's lost peer); every
 * job_snapshot_interval(se) steps each stage's member holds a snapshot of
 * its layers (superseded ones removed as the engine does), a buddy's PULL copies one
 * from a reachable holder, a pipeline waits (as the engine's stages do) for
 * the copy of a stage's snapshot before the step of its next but one, and
 * a RUN that resumes checks that every piece it
 * names is held by its member and reachable. A member's "disk" holds what
 * its SAVE_VOTE and PUBLISH saved (state.json's JSON), and a restarted
 * member gets a new core that reads it back.
 *
 * Invariants checked at every step: no two members commit different plans
 * in one epoch; no member gossips two different votes in one epoch, across
 * restarts; every document written reads back to the same text and fits a
 * record; a stage resumes only from snapshots that exist. */
#ifndef SHARDNODE_POOL_SIM_H
#define SHARDNODE_POOL_SIM_H

#include "pool_core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define MAXM 256
#define TICK POOL_TICK_MS
#define SUSPECT_MS 1000   /* a member cut off is suspect from then ... */
#define DETECT_MS 4000    /* ... and dead from then */
#define T0 ((int64_t)1000000)
#define WALL0 ((int64_t)1760000000)

/* ---- documents as gossip carries them: refcounted versions ---- */

typedef struct version {
    int refs;
    char *text;
    pool_doc doc;
    bool ok;
    char *view_text;
    uint64_t serial;
    int64_t at;          /* when it was published */
} version;

static void version_put(version *v)
{
    if (!v || --v->refs > 0) return;
    free(v->text);
    free(v->view_text);
    pool_doc_free(&v->doc);
    free(v);
}

static version *version_get(version *v)
{
    if (v) v->refs++;
    return v;
}

/* ---- the world ---- */

typedef struct {
    int64_t epoch;
    uint64_t view, plan;
} seen_vote;

typedef struct {
    char name[16];
    char addr[GOSSIP_ADDR_MAX];
    pool_core *core;
    bool up;
    int group;                   /* partition: members see only their own group */
    int64_t down_ms;             /* when it crashed (up false) */
    bool no_compute, lacks_data, disk_full;
    bool crash_after_save;       /* crashes once its vote is saved, before it is gossiped */
    int speed;                   /* per mille of the base profile's times */
    int pace;                    /* per mille: its stage's compute time now (0: 1000) */
    version *cur;                /* its record's job text now */
    char *disk;                  /* state.json as saved, or NULL */
    int64_t prof_at, probe_at, gather_at;   /* children: when they end (0: none) */
    int64_t gather_asked;        /* when the core last asked for the gathering */
    /* its stage: running run_epoch's plan, run_step steps done */
    bool running, run_failed, run_ok;
    bool handover;               /* its stage was asked to stop at the next boundary */
    pool_plan run_plan;          /* the plan its stage runs (the committed one may move on to
                                    a handover while it runs) */
    int64_t run_epoch, run_step, run_from, broken_since;
    int64_t copy_wait_since;     /* its pipeline waits for a buddy's copy (0: does not) */
    char run_error[160];
    pool_snap held[32];          /* its snapshot folder */
    int nheld;
    pool_snap pulling;
    int64_t pull_at;             /* a PULL ends (0: none) */
    int64_t pull_epoch;          /* the epoch of paced[] */
    uint64_t pull_view;          /* its view (who is live, with a document) then */
    bool pull_churn;             /* the view changed since: paced[] holds one */
    pool_snap paced[8];          /* the layer ranges it was asked to copy in that epoch */
    int npaced;
    int pull_from;
    pool_target *probe;
    int nprobe;
    seen_vote votes[32];         /* every vote it gossiped, one per epoch */
    int nvotes;
    int published, too_big, fetches;
    /* a FETCH under way, as the driver's child: it ends at fetch_at (0:
     * none), and a KILL or a crash ends it unanswered, as the driver's
     * does */
    pool_job_ref fetch_job;
    pool_target *fetch_to;
    int nfetch_to;
    int64_t fetch_at;
} sim_member;

static struct {
    sim_member m[MAXM];
    int n;
    int64_t now;
    uint64_t rng;
    version *known[MAXM][MAXM];  /* [observer][member]: what the observer has */
    int64_t cut_ms[MAXM][MAXM];  /* when the observer stopped hearing the member (0: hears) */
    version *pin[MAXM][MAXM];    /* the observer's copy of the member's record stays this one
                                    (NULL: none pinned): a newer record that has not reached
                                    it yet (one only the periodic sync brings) */
    uint8_t delay[MAXM][MAXM];   /* ticks before the observer sees a new version */
    pool_member view[MAXM];
    pool_actions acts;
    uint64_t serial;
    int64_t commit_hash[64];     /* epoch -> the plan committed in it (0: none yet) */
    bool verbose;
    pool_bundle bundle;
    int64_t steps;               /* the job's */
    int64_t snapshot_every;      /* the job's (0: the plan chooses) */
    int64_t reached;             /* the furthest step any stage did */
    int copy_timeouts;           /* pipelines that went on without a buddy's copy */
    int64_t first_step;          /* the first step any stage did in the run (0: none yet) */
    int64_t checkpoint_every;    /* the job's pool checkpoints (0: none) */
    int64_t ckpt[16];            /* the pool checkpoints written, by step */
    int nckpt;
    int ckpt_fail;               /* the next this many checkpoints fail (a piece's copy broke) */
    int64_t ckpt_failed_at;      /* when the last of them failed */
    int64_t ckpt_at;             /* when the last checkpoint was written */
    int handovers;               /* pipelines stopped for a planned switch */
    int64_t handed_at;           /* ... the step the last one stopped after */
    int64_t handed_ms, resumed_ms; /* ... when, and when the step after it was done */
    int64_t redone;              /* steps a pipeline did that some earlier one had done */
    bool switches;               /* the cores vote planned switches (pool_core_config) */
    bool own_hosts;              /* each member a machine of 4 cores of its own (false: all
                                    on one of 2) */
    double replan_gain;          /* the job's */
    int64_t replan_min_steps;
    int crash_on_handover;       /* this member crashes when the first HANDOVER comes (-1:
                                    none) */
    int flapper;                 /* this member is suspect (SUSPECT claims, each refuted)
                                    to every other from flap_from on, but never declared
                                    dead and always reachable (-1: none) */
    int64_t flap_from, flap_gap_ms; /* ... not suspect one tick in every flap_gap_ms (0:
                                    suspect at every tick) */
    int64_t first_suspect_vote;  /* when a vote was first saved while its member suspected
                                    one that carries the job (0: never) */
} S;

#define SIM_STEP_MS TICK            /* a pipeline step */
#define SIM_PIPE_TIMEOUT_MS 3000    /* a stage without its peers this long fails */

static char root[512];

static uint64_t rnd(void)
{
    S.rng ^= S.rng >> 12;
    S.rng ^= S.rng << 25;
    S.rng ^= S.rng >> 27;
    return S.rng * 0x2545F4914F6CDD1Dull;
}

static const cost_shape SHAPE = {.layers = 4, .hidden = 64, .intermediate = 128, .heads = 4,
                                  .kv_heads = 2, .vocab = 300, .seq = 32};

static void world_free(void)
{
    for (int o = 0; o < S.n; o++)
        for (int i = 0; i < S.n; i++) {
            version_put(S.known[o][i]);
            version_put(S.pin[o][i]);
        }
    for (int i = 0; i < S.n; i++) {
        pool_core_destroy(S.m[i].core);
        pool_plan_free(&S.m[i].run_plan);
        version_put(S.m[i].cur);
        free(S.m[i].disk);
        free(S.m[i].probe);
        free(S.m[i].fetch_to);
    }
    pool_actions_free(&S.acts);
    memset(S.known, 0, sizeof S.known);
    memset(S.pin, 0, sizeof S.pin);
    memset(S.m, 0, sizeof S.m);
    S.n = 0;
}

static void new_core(sim_member *m)
{
    char host[17];
    snprintf(host, sizeof host, "%016x", S.own_hosts ? (unsigned)(m - S.m) + 1 : 0xaau);
    pool_core_config cfg = {.name = m->name, .no_compute = m->no_compute,
                            .host = host, .cores = S.own_hosts ? 4 : 2,
                            .threads = S.own_hosts ? 4 : 2,
                            .switches = S.switches};
    m->core = pool_core_create(&cfg);
    m->prof_at = m->probe_at = m->gather_at = m->pull_at = m->fetch_at = 0;
    m->running = m->run_failed = m->run_ok = m->handover = false;
    m->run_epoch = 0;
}

/* A world of n members m00, m01, ... (all compute unless told), seeded. */
static void world_init(int n, uint64_t seed)
{
    world_free();
    S.n = n;
    S.now = T0;
    S.rng = seed * 2654435761u + 1;
    S.copy_timeouts = 0;
    S.handovers = 0;
    S.handed_at = 0;
    S.crash_on_handover = -1;
    S.flapper = -1;
    S.flap_from = S.flap_gap_ms = S.first_suspect_vote = 0;
    S.redone = 0;
    memset(S.commit_hash, 0, sizeof S.commit_hash);
    memset(S.cut_ms, 0, sizeof S.cut_ms);
    for (int i = 0; i < n; i++) {
        sim_member *m = &S.m[i];
        snprintf(m->name, sizeof m->name, "m%02d", i);
        snprintf(m->addr, sizeof m->addr, "10.77.%d.%d", i / 200, 1 + i % 200);
        m->up = true;
        m->speed = 800 + (int)(rnd() % 400);
        new_core(m);
    }
    for (int o = 0; o < n; o++)
        for (int i = 0; i < n; i++) S.delay[o][i] = o == i ? 0 : (uint8_t)(rnd() % 3);
}

static int member_of(const char *name)
{
    for (int i = 0; i < S.n; i++)
        if (strcmp(S.m[i].name, name) == 0) return i;
    return -1;
}

/* ---- the checks every step makes ---- */

static void check_vote(sim_member *m, const pool_doc *d)
{
    if (!(d->has & POOL_HAS_VOTE)) return;
    const elect_vote *v = &d->vote.v;
    for (int k = 0; k < m->nvotes; k++)
        if (m->votes[k].epoch == v->epoch) {
            CHECK(m->votes[k].view == v->view && m->votes[k].plan == v->plan,
                  "%s voted twice in epoch %lld (plan %llx, then %llx)", m->name,
                  (long long)v->epoch, (unsigned long long)m->votes[k].plan,
                  (unsigned long long)v->plan);
            return;
        }
    if (m->nvotes < 32) m->votes[m->nvotes++] = (seen_vote){v->epoch, v->view, v->plan};
}

static void check_commit(const sim_member *m)
{
    const pool_plan *c = pool_core_committed(m->core);
    if (!c || c->epoch < 1 || c->epoch >= 64) return;
    if (!S.commit_hash[c->epoch]) S.commit_hash[c->epoch] = (int64_t)c->hash;
    CHECK(S.commit_hash[c->epoch] == (int64_t)c->hash,
          "two plans committed in epoch %lld (%s has %llx)", (long long)c->epoch, m->name,
          (unsigned long long)c->hash);
}

/* ---- what the driver does ---- */

static void publish(sim_member *m)
{
    pool_saved s;
    pool_core_saved(m->core, &s);
    if (pool_core_bundle(m->core)) {   /* as the driver: saved in the job's folder */
        json_t *j = pool_saved_to_json(&s);
        free(m->disk);
        m->disk = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
    }
    char *text = pool_doc_to_text(pool_core_doc(m->core));
    if (!text) {
        CHECK(0, "%s: no document text", m->name);
        return;
    }
    m->published++;
    if (strlen(text) > GOSSIP_JOB_MAX - 1) {   /* gossip_set_job refuses it */
        m->too_big++;
        free(text);
        return;
    }
    version *v = calloc(1, sizeof *v);
    char err[POOL_TEXT_MAX];
    v->refs = 1;
    v->text = text;
    v->at = S.now;
    v->serial = ++S.serial;
    v->ok = text[0] && pool_doc_from_text(text, &v->doc, err, sizeof err) == 0;
    CHECK(!text[0] || v->ok, "%s's document does not read back: %s", m->name, err);
    if (v->ok) {
        char *again = pool_doc_to_text(&v->doc);
        CHECK(again && strcmp(again, text) == 0, "%s's document reads back to another text",
              m->name);
        free(again);
        v->view_text = pool_doc_view_text(m->name, &v->doc);
        check_vote(m, &v->doc);
    }
    version_put(m->cur);
    m->cur = v;
}

static pool_profile profile_of(const sim_member *m)
{
    pool_profile p;
    memset(&p, 0, sizeof p);
    p.prof.micro_batch = 2;
    for (int u = 0; u < COST_UNITS; u++) {
        p.prof.fwd_ns[u] = (int64_t)(u == COST_LAYER ? 1500000 : 400000) * m->speed / 1000;
        p.prof.bwd_ns[u] = 2 * p.prof.fwd_ns[u];
        p.prof.opt_ns[u] = 50000;
    }
    p.prof.memory_bytes = (int64_t)8 << 30;
    p.prof.scratch_slots = 2;
    snprintf(p.device, sizeof p.device, "sim cpu");
    return p;
}

static void crash(int i);
static bool hears(int o, int i);

/* A FETCH of a job blob starts: it ends a little later (children). */
static void fetch_start(int i, const pool_action *a)
{
    sim_member *m = &S.m[i];
    free(m->fetch_to);
    m->fetch_to = calloc((size_t)a->ntargets + 1, sizeof *m->fetch_to);
    CHECK(m->fetch_to != NULL, "out of memory");
    if (m->fetch_to) memcpy(m->fetch_to, a->targets, (size_t)a->ntargets * sizeof *a->targets);
    m->nfetch_to = m->fetch_to ? a->ntargets : 0;
    m->fetch_job = a->job;
    m->fetch_at = S.now + 200 + (int64_t)(rnd() % 800);
}

/* The FETCH ends: the blob from the first target this member reaches that
 * holds it, read back through the codec as the driver reads it. */
static void fetch_blob(int i)
{
    sim_member *m = &S.m[i];
    const pool_job_ref *job = &m->fetch_job;
    pool_job_blob blob;
    bool ok = false;
    m->fetch_at = 0;
    for (int k = 0; k < m->nfetch_to && !ok; k++) {
        int j = -1;
        for (int q = 0; q < S.n; q++)
            if (strcmp(S.m[q].name, m->fetch_to[k].name) == 0) j = q;
        if (j < 0 || !S.m[j].up || !hears(i, j)) continue;
        char hash[65], err[512];
        char *text = pool_core_blob_text(S.m[j].core, hash);
        json_t *js = text ? json_loads(text, 0, NULL) : NULL;
        ok = text && strcmp(hash, job->blob) == 0 && js &&
             pool_job_blob_from_json(js, &blob, err, sizeof err) == 0;
        json_decref(js);
        free(text);
    }
    S.m[i].fetches++;
    pool_core_fetched(S.m[i].core, job, ok ? &blob : NULL, &S.acts);
    if (ok) pool_job_blob_free(&blob);
}

/* ---- the stages, as one simulated pipeline per epoch: pool_sim_stages.h ---- */

#include "pool_sim_stages.h"

static void execute(int i)
{
    sim_member *m = &S.m[i];
    for (int k = 0; k < S.acts.n; k++) {
        pool_action a = S.acts.a[k];
        switch (a.type) {
        case POOL_ACT_LOG:
            if (S.verbose) printf("  %8.1f s %s: %s\n", (double)(S.now - T0) / 1000, m->name, a.text);
            break;
        case POOL_ACT_PUBLISH: publish(m); break;
        case POOL_ACT_SETUP: {
            pool_setup s;
            pool_saved saved;
            memset(&s, 0, sizeof s);
            s.ok = true;
            s.shape = SHAPE;
            s.batch = 8;
            s.micro_batch = 2;
            s.steps = S.steps;
            s.snapshot_every = S.snapshot_every;
            s.checkpoint_every = S.checkpoint_every;
            s.replan_gain = S.replan_gain;
            s.replan_min_steps = S.replan_min_steps;
            if (m->lacks_data)
                pool_lacks_add(&s.lacks, "data", S.bundle.data[0], S.bundle.data[0], "missing");
            json_t *j = m->disk ? json_loads(m->disk, 0, NULL) : NULL;
            char err[POOL_TEXT_MAX];
            if (j && pool_saved_from_json(j, &saved, err, sizeof err) == 0) s.saved = &saved;
            else CHECK(!j, "%s's saved state does not read back: %s", m->name, err);
            json_decref(j);
            pool_core_setup_done(m->core, &s, &S.acts);
            if (s.saved) pool_saved_free(&saved);
            pool_lacks_free(&s.lacks);
            break;
        }
        case POOL_ACT_KILL:
            m->prof_at = m->probe_at = m->gather_at = m->pull_at = m->fetch_at = 0;
            m->running = m->run_failed = m->run_ok = false;
            break;
        case POOL_ACT_PROFILE: m->prof_at = S.now + 1000 + (int64_t)(rnd() % 2000); break;
        case POOL_ACT_PROBE:
            free(m->probe);
            m->probe = calloc((size_t)a.ntargets + 1, sizeof *m->probe);
            memcpy(m->probe, a.targets, (size_t)a.ntargets * sizeof *m->probe);
            m->nprobe = a.ntargets;
            m->probe_at = S.now + 500 + (int64_t)(rnd() % 1000);
            break;
        case POOL_ACT_SAVE_VOTE:
            if (m->disk_full) {
                pool_core_vote_saved(m->core, a.epoch, false, "No space left on device", &S.acts);
            } else {
                pool_saved s;
                pool_core_saved(m->core, &s);
                json_t *j = pool_saved_to_json(&s);
                free(m->disk);
                m->disk = json_dumps(j, JSON_COMPACT);
                json_decref(j);
                /* no vote while this member suspects one that carries the job
                 * (S.view is its view: execute follows its step), but after
                 * POOL_SUSPECT_WAIT_MS of a flapper's suspicion */
                for (int q = 0; q < S.n; q++) {
                    bool susp = S.view[q].suspect && S.view[q].doc &&
                                strcmp(S.view[q].doc->id, pool_core_doc(m->core)->id) == 0;
                    if (susp && !S.first_suspect_vote) S.first_suspect_vote = S.now;
                    CHECK(!susp || (q == S.flapper &&
                                    S.now - S.flap_from >= POOL_SUSPECT_WAIT_MS),
                          "%s votes in epoch %lld while it suspects %s", m->name,
                          (long long)a.epoch, S.view[q].name);
                }
                /* a saved vote is cast: the member may gossip no other in its epoch */
                pool_doc saved;
                pool_doc_init(&saved);
                saved.has = POOL_HAS_VOTE;
                saved.vote = s.vote;
                check_vote(m, &saved);
                if (m->crash_after_save) {
                    m->crash_after_save = false;
                    crash(i);
                    pool_actions_clear(&S.acts);
                    return;
                }
                pool_core_vote_saved(m->core, a.epoch, true, NULL, &S.acts);
            }
            break;
        case POOL_ACT_RUN: start_stage(i, &a); break;
        case POOL_ACT_HANDOVER:
            CHECK(!m->running || m->run_epoch == a.epoch, "%s: HANDOVER of epoch %lld, its "
                  "stage runs %lld", m->name, (long long)a.epoch, (long long)m->run_epoch);
            if (S.crash_on_handover >= 0) {   /* at the first HANDOVER anyone gets */
                int v = S.crash_on_handover;
                S.crash_on_handover = -1;
                crash(v);
                if (v == i) {
                    pool_actions_clear(&S.acts);
                    return;
                }
            }
            if (m->running) m->handover = true;
            break;
        case POOL_ACT_FETCH: fetch_start(i, &a); break;
        case POOL_ACT_GATHER:
            m->gather_at = S.now + 1000;
            m->gather_asked = S.now;
            break;
        case POOL_ACT_CHECKPOINT: {
            /* every piece held by a member this one reaches, every layer covered */
            bool ok = true;
            int cover[64] = {0};
            for (int k = 0; k < a.ntargets; k++) {
                int j = member_of(a.targets[k].name);
                ok &= j >= 0 && S.m[j].up && hears(i, j) && sim_holds(j, &a.snaps[k]) &&
                      a.snaps[k].step == a.step;
                for (int l = a.snaps[k].layer_begin; l < a.snaps[k].layer_end && l < 64; l++)
                    cover[l] = 1;
            }
            for (int l = 0; l < SHAPE.layers; l++) ok &= cover[l] == 1;
            CHECK(ok, "%s: a checkpoint of step %lld from pieces that are not all there",
                  m->name, (long long)a.step);
            if (ok && S.ckpt_fail > 0) {
                S.ckpt_fail--;
                S.ckpt_failed_at = S.now;
                pool_core_checkpointed(m->core, a.step, false, "a piece's copy broke", &S.acts);
                break;
            }
            if (ok && S.nckpt < 16) S.ckpt[S.nckpt++] = a.step;
            if (ok) S.ckpt_at = S.now;
            pool_core_checkpointed(m->core, a.step, ok, ok ? NULL : "a piece is gone", &S.acts);
            break;
        }
        case POOL_ACT_PULL:
            sim_check_pace(m, &a);
            m->pulling = a.snaps[0];
            m->pull_from = -1;
            for (int q = 0; q < S.n; q++)
                if (strcmp(S.m[q].name, a.targets[0].name) == 0) m->pull_from = q;
            m->pull_at = S.now + 1000;
            break;
        }
    }
    pool_actions_clear(&S.acts);
}

/* The children of member i that ended by now. */
static void children(int i)
{
    sim_member *m = &S.m[i];
    if (m->prof_at && S.now >= m->prof_at) {
        m->prof_at = 0;
        pool_profile p = profile_of(m);
        pool_core_profiled(m->core, &p, NULL, &S.acts);
    }
    if (m->probe_at && S.now >= m->probe_at) {
        m->probe_at = 0;
        pool_links l = {0, NULL};
        for (int k = 0; k < m->nprobe; k++)
            pool_links_add(&l, m->probe[k].name, 200000 + (int64_t)(rnd() % 100000),
                           1000000000 + (int64_t)(rnd() % 100000000));
        pool_core_links_measured(m->core, &l, &S.acts);
        pool_links_free(&l);
    }
    if (m->fetch_at && S.now >= m->fetch_at) fetch_blob(i);
    if (m->pull_at && S.now >= m->pull_at) {
        int j = m->pull_from;
        bool ok = j >= 0 && S.m[j].up && hears(i, j) && sim_holds(j, &m->pulling);
        m->pull_at = 0;
        if (ok) sim_hold(i, &m->pulling);
        pool_core_pulled(m->core, ok, ok ? NULL : "the holder is gone", &S.acts);
    }
    if (m->running || m->run_failed || m->run_ok) {
        if (m->run_step > 0) {
            pool_progress pr = {.step = m->run_step, .loss = 5.0, .tps = 1000.0,
                                .step_ms = 250.0, .compute_ms = 0.1 * (m->pace ? m->pace : 1000),
                                .threads = 1};
            pool_core_run_progress(m->core, &pr);
        }
        if (m->run_failed || m->run_ok) {
            bool ok = m->run_ok;
            m->running = m->run_failed = m->run_ok = false;
            pool_core_run_ended(m->core, ok, ok ? NULL : m->run_error, &S.acts);
        }
    }
    pool_snaps held = {0};
    for (int k = m->nheld - 1; k >= 0 && held.n < POOL_SNAPS_MAX; k--)
        held.s[held.n++] = m->held[k];
    pool_core_snapshots(m->core, &held);
    if (m->gather_at && S.now >= m->gather_at) {
        m->gather_at = 0;
        pool_core_gathered(m->core, true, &S.acts);
    }
}

/* ---- gossip and failure detection, simulated ---- */

static bool hears(int o, int i)
{
    return o == i || (S.m[i].up && S.m[o].group == S.m[i].group);
}

static void disseminate(void)
{
    for (int o = 0; o < S.n; o++) {
        if (!S.m[o].up) continue;
        for (int i = 0; i < S.n; i++) {
            if (!hears(o, i)) {
                if (!S.cut_ms[o][i]) S.cut_ms[o][i] = S.now;
                continue;
            }
            S.cut_ms[o][i] = 0;
            if (S.pin[o][i]) continue;
            version *v = S.m[i].cur;
            if (v != S.known[o][i] && v && v->at + S.delay[o][i] * TICK <= S.now) {
                version_put(S.known[o][i]);
                S.known[o][i] = version_get(v);
            }
        }
    }
    /* a member's last record also travels through the others (gossip
     * relays signed records): one that went down or is cut off reaches o
     * through any member o hears that has a newer version of it */
    for (int o = 0; o < S.n; o++) {
        if (!S.m[o].up) continue;
        for (int i = 0; i < S.n; i++) {
            if (hears(o, i) || S.pin[o][i]) continue;
            for (int r = 0; r < S.n; r++) {
                version *v = S.known[r][i];
                if (r == o || r == i || !hears(o, r) || !v ||
                    (S.known[o][i] && S.known[o][i]->serial >= v->serial))
                    continue;
                version_put(S.known[o][i]);
                S.known[o][i] = version_get(v);
            }
        }
    }
}

/* Member o's view: every member, live unless cut off for DETECT_MS,
 * suspect from SUSPECT_MS. */
static int view_of(int o)
{
    for (int i = 0; i < S.n; i++) {
        version *v = S.known[o][i];
        S.view[i] = (pool_member){.name = S.m[i].name,
                                  .address = S.m[i].addr,
                                  .port = 7946,
                                  .mem_free = (uint64_t)8 << 30,
                                  .live = i == o || !S.cut_ms[o][i] ||
                                          S.now - S.cut_ms[o][i] < DETECT_MS,
                                  .suspect = (i != o && S.cut_ms[o][i] &&
                                              S.now - S.cut_ms[o][i] >= SUSPECT_MS &&
                                              S.now - S.cut_ms[o][i] < DETECT_MS) ||
                                             (i == S.flapper && i != o &&
                                              S.now >= S.flap_from &&
                                              !(S.flap_gap_ms &&
                                                (S.now - S.flap_from) % S.flap_gap_ms <
                                                    TICK)),
                                  .self = i == o,
                                  .doc = v && v->ok ? &v->doc : NULL,
                                  .serial = v ? v->serial : 0,
                                  .view_text = v ? v->view_text : NULL};
    }
    return S.n;
}

static void step(void)
{
    disseminate();
    pipelines();
    for (int i = 0; i < S.n; i++) {
        sim_member *m = &S.m[i];
        if (!m->up) continue;
        children(i);
        int n = view_of(i);
        pool_core_step(m->core, S.view, n, S.now, WALL0 + (S.now - T0) / 1000, &S.acts);
        execute(i);
        if (pool_core_due(m->core)) {   /* as the driver: a blob came, step again */
            pool_core_step(m->core, S.view, n, S.now, WALL0 + (S.now - T0) / 1000, &S.acts);
            execute(i);
        }
        check_commit(m);
    }
    S.now += TICK;
}

static void crash(int i)
{
    S.m[i].up = false;
    S.m[i].down_ms = S.now;
}

/* Member i leaves as `shardnode leave` does: its record without a job (a
 * LEFT record) is gossiped for `ticks`, then it goes. */
__attribute__((unused)) static void leave(int i, int ticks)
{
    version *v = calloc(1, sizeof *v);
    char *text = strdup("");
    CHECK(v && text, "out of memory");
    if (!v || !text) {
        free(v);
        free(text);
        return;
    }
    v->refs = 1;
    v->text = text;
    v->at = S.now;
    v->serial = ++S.serial;
    version_put(S.m[i].cur);
    S.m[i].cur = v;
    for (int k = 0; k < ticks; k++) step();
    crash(i);
}

/* A crashed member started again: a new core, its record without a job
 * until it takes the job up again; its disk kept. */
__attribute__((unused)) static void restart(int i)
{
    sim_member *m = &S.m[i];
    pool_core_destroy(m->core);
    new_core(m);
    m->up = true;
    publish(m);
}

static void submit(int i)
{
    view_of(i);
    char err[512];
    int rc = pool_core_submit(S.m[i].core, &S.bundle, S.view, S.n, S.now,
                              WALL0 + (S.now - T0) / 1000, &S.acts, err, sizeof err);
    CHECK(rc == 0, "submit from %s: %s", S.m[i].name, err);
    execute(i);
}

/* Steps until every up member satisfies pred (or limit ms pass). */
static bool run_until(bool (*pred)(int), int64_t limit_ms)
{
    int64_t end = S.now + limit_ms;
    while (S.now < end) {
        step();
        bool all = true;
        for (int i = 0; i < S.n && all; i++)
            if (S.m[i].up) all = pred(i);
        if (all) return true;
    }
    return false;
}

__attribute__((unused)) static bool committed(int i) { return pool_core_committed(S.m[i].core) != NULL; }

__attribute__((unused)) static bool gathered_or_done(int i)
{
    const pool_doc *d = pool_core_doc(S.m[i].core);
    if (strcmp(S.m[i].name, S.bundle.submitted_by) == 0) return d->run.gathered == 1;
    const pool_plan *c = pool_core_committed(S.m[i].core);
    return c && (pool_plan_stage_of(c, S.m[i].name) < 0 || d->run.state == POOL_RUN_DONE);
}

__attribute__((unused)) static const pool_plan *plan_of(int i) { return pool_core_committed(S.m[i].core); }

static void set_bundle(const char *submitter, int64_t at)
{
    char p[1024], err[1024];
    snprintf(p, sizeof p, "%s/job.json", root);
    json_t *b = pool_bundle_make(p, submitter, at, err, sizeof err);
    CHECK(b != NULL, "bundle: %s", err);
    pool_bundle_free(&S.bundle);
    CHECK(b && pool_bundle_from_json(b, &S.bundle, err, sizeof err) == 0, "bundle: %s", err);
    json_decref(b);
}

/* ---- the job's files ---- */

static void write_file(const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, name);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) {
        printf("cannot write %s\n", p);
        exit(2);
    }
}

/* The job's files under root: a 4-layer model, steps steps. */
static void sim_files(const char *name, int64_t steps)
{
    snprintf(root, sizeof root, "%s/%s_%d", SHARDNODE_TEST_TMP, name, (int)getpid());
    mkdir(root, 0755);
    write_file("config.json",
               "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
               "\"intermediate_size\": 128, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 2, \"vocab_size\": 300, \"max_position_embeddings\": 64, "
               "\"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false}\n");
    write_file("tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}\n");
    write_file("corpus.txt", "in the beginning\n");
    char job[512];
    snprintf(job, sizeof job, "{\"config\": \"config.json\", \"tokenizer\": \"tokenizer.json\", "
             "\"data\": {\"files\": [\"corpus.txt\"]}, \"seq_len\": 32, \"batch\": 8, "
             "\"micro_batch\": 2, \"steps\": %lld, \"lr\": 0.0003, \"out_dir\": \"out\"}\n",
             (long long)steps);
    write_file("job.json", job);
    S.steps = steps;
}

static void sim_done(void)
{
    world_free();
    pool_bundle_free(&S.bundle);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) printf("note: could not remove %s\n", root);
}

#endif

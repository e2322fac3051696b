/* pool_core.h — node/pool/, public to the rooms above it: a member's share
 * of a job on the pool as a pure state machine (docs/ARCHITECTURE.md, "The
 * pool core"), the shape of mesh/gossip.c: it is given the member view and
 * a clock and answers with actions (take a job up, profile, measure links,
 * save a vote, publish the document, start or stop the stage, gather the
 * model, log). It never forks, opens a socket or a file, or reads a clock:
 * the driver (pool.c in the daemon, tests/unit/test_pool_sim.c in a test)
 * does what the actions say and reports back through the pool_core_* calls
 * below, so many cores can run in one process on a simulated clock.
 *
 * Rules: docs/PROTOCOL.md, "Jobs and the plan election". */
#ifndef SHARDNODE_POOL_CORE_H
#define SHARDNODE_POOL_CORE_H

#include "pool_doc.h"

#define POOL_TICK_MS 500          /* the driver steps the core this often */
#define POOL_QUIET_MS 3000        /* the view must not change for this long before a vote */
#define POOL_QUIET_LOSS_MS 1000   /* ... in a recovery whose view already lacks a holder of
                                     the plan it recovers from (the loss is gossip's verdict,
                                     which reaches every member at once) */
#define POOL_DOC_MS 2000          /* progress goes into the record at most this often */
#define POOL_DEFAULT_LAT_NS 1000000
#define POOL_DEFAULT_BW 100000000 /* bytes/s: a link nobody measured */
#define POOL_MAX_MEMBERS 4096     /* members the core looks at (the view is longer: ignored) */
#define POOL_SNAP_MIN_MS 5000     /* the plan's snapshots come at most this often */
#define POOL_PULL_SHARE 0.25      /* a buddy's copies are paced to take this share of the
                                     planned time between two snapshots: the longer a
                                     copy takes, the more steps a loss in the meantime
                                     redoes */
#define POOL_PULL_MIN_RATE (1 << 20) /* ... and never slower than this, bytes a second */
#define POOL_HANDOVER_MS 60000    /* a planned switch whose old stages have not all handed
                                     their state over this long after its commit falls back
                                     to a recovery */
#define POOL_HANDOVER_ASK_MS 2000 /* HANDOVER is repeated this often until the stage ends */
#define POOL_DEPART_MS 90000 /* a member that leaves waits at most this long for its
                                 layers' hand-over (POOL_HANDOVER_MS, then the fetches),
                                 then goes, and the pool recovers without it */
#define POOL_SUSPECT_WAIT_MS 10000 /* no vote while gossip suspects a member that carries
                                      the job, for at most this long: a vote over a view
                                      that still lists a member about to be declared dead
                                      splits the epoch from the votes cast after the verdict
                                      (docs/PROTOCOL.md, "Votes") */
#define POOL_SWITCH_PAUSE_MS 2500 /* what a switch costs besides moving the layers (the
                                     stages stop, the new ones start), in the rule that a
                                     switch must pay for itself before the job ends, until
                                     the job's first switch is measured (swr); bench/elastic.py
                                     measured 1.0-3.7 s (docs/ARCHITECTURE.md) */
#define POOL_SWITCH_MIN_S 1.0     /* ... and at least this much once it is */

/* A member as the driver sees it this step. */
typedef struct {
    const char *name;
    const char *address;          /* overlay address, from its own signed record */
    int port;                     /* its gossip port (FETCH: link probes) */
    uint64_t mem_free;            /* bytes, from its record */
    bool live;                    /* alive or suspect */
    bool suspect;                 /* live, but gossip suspects it (SWIM's suspect state):
                                     no vote is cast meanwhile (POOL_SUSPECT_WAIT_MS) */
    bool self;                    /* this member (its document as last published) */
    const pool_doc *doc;          /* its job document; NULL: none, or refused */
    uint64_t serial;              /* differs whenever doc does: the view is recomputed
                                     only when some member's serial or liveness changed */
    const char *view_text;        /* pool_doc_view_text(name, doc) kept by the driver, or
                                     NULL (then computed when needed) */
} pool_member;

/* ---- links in the plan (pool_links.c; docs/ARCHITECTURE.md, "Links in the
 * plan") ---- */
/* A relayed link's bandwidth: the smaller of its path's (bw_path: measured,
 * else the slower hop) and its share of the relay's upload, upload / carried
 * (carried: the relayed pairs the relay carries among the candidates, plus
 * one when it computes itself). */
int64_t pool_link_relayed_bw(int64_t bw_path, int64_t upload, int carried);
/* The planner's f x f links (out[a * f + b]: a -> b) between the candidates
 * cand[0..f) (positions in the view m[in[0..k)]; in NULL: m[0..k)), from the
 * view members' documents. A relay that is no member of the view, or one of
 * the pair, is ignored, and note (if given) says so for the first one.
 * Returns 0, or -1 out of memory. */
int pool_link_costs(const pool_member *m, const int *in, int k, const int *cand, int f,
                    cost_link *out, char *note, size_t notelen);

typedef enum {
    POOL_ACT_LOG = 1,     /* text: one line for the log */
    POOL_ACT_PUBLISH,     /* the document changed: save pool_core_saved, gossip pool_core_doc */
    POOL_ACT_SETUP,       /* take the job pool_core_bundle up: check its files, write the job,
                             read what was saved for it; answer pool_core_setup_done */
    POOL_ACT_KILL,        /* stop every child (profile, probe, stage, gathering, and a
                             FETCH under way: the core asks for that again) */
    POOL_ACT_PROFILE,     /* profile at (micro_batch, seq_len); answer pool_core_profiled */
    POOL_ACT_PROBE,       /* measure the links to targets; answer pool_core_links_measured */
    POOL_ACT_SAVE_VOTE,   /* save pool_core_saved (which holds this vote) before it counts;
                             answer pool_core_vote_saved */
    POOL_ACT_RUN,         /* start this member's stage of pool_core_committed (epoch); answer
                             pool_core_run_ended when it ends or cannot start */
    POOL_ACT_GATHER,      /* gather the model (every stage is done); answer
                             pool_core_gathered */
    POOL_ACT_FETCH,       /* fetch the job blob `job` names from one of targets (FETCH of
                             jobs/ID/job-HASH.json; check its SHA-256); answer
                             pool_core_fetched */
    POOL_ACT_CHECKPOINT,  /* the submitter: write a pool checkpoint of step `step` from the
                             snapshots targets[i] serve (snaps[i]) into the job's
                             out_dir/checkpoints/step-N/, its manifest last; answer
                             pool_core_checkpointed */
    POOL_ACT_PULL,        /* copy snapshot snaps[0] (jobs/ID/snap/L<b>-<e>-s<step>.safetensors)
                             from targets[0] into this member's snapshots (this member is
                             the stage's buddy); answer pool_core_pulled */
    POOL_ACT_HANDOVER,    /* a planned switch: this member's running stage (of epoch `epoch`)
                             stops at the next step boundary, with every other stage, and
                             keeps its state as a snapshot of that step; answer
                             pool_core_run_ended (after pool_core_run_progress of the step)
                             as for any end of the stage */
} pool_act_type;

typedef struct {
    char name[MESH_NAME_MAX];
    char address[GOSSIP_ADDR_MAX];
    int port;
} pool_target;

typedef struct {
    pool_act_type type;
    char text[POOL_TEXT_MAX];     /* LOG */
    int64_t epoch;                /* SAVE_VOTE, RUN, HANDOVER */
    int64_t micro_batch, seq_len; /* PROFILE */
    int64_t step;                 /* CHECKPOINT; RUN: the step the stage starts after (0: the
                                     job's start; else from the snapshots of that step that
                                     targets and snaps name) */
    int ntargets;                 /* PROBE, FETCH, PULL, RUN */
    pool_target *targets;         /* PROBE, FETCH (in the order to try): owned by the list;
                                     RUN of a plan that resumes (its resume_step > 0): where
                                     each snapshot the stage starts from is (this member's
                                     own name: its own copy) */
    pool_snap *snaps;             /* PULL, RUN: targets[i] serves snaps[i] (owned) */
    pool_job_ref job;             /* FETCH */
    int64_t rate;                 /* PULL: the copy's pace, bytes a second (0: unpaced) */
} pool_action;

typedef struct {
    int n, cap;
    pool_action *a;
} pool_actions;

void pool_actions_clear(pool_actions *l);   /* frees what the actions own, keeps the list */
void pool_actions_free(pool_actions *l);

typedef struct {
    const char *name;             /* this member */
    bool no_compute;              /* votes and watches, never holds a stage */
    const char *host;             /* 16 hex digits: members on one machine share it */
    int cores, threads;           /* logical CPUs; compute threads (0: all) */
    bool switches;                /* the driver carries out HANDOVER: the core votes planned
                                     switches (docs/ARCHITECTURE.md, "Planned switches") */
} pool_core_config;

typedef struct pool_core pool_core;

/* What the driver found when it took a job up (POOL_ACT_SETUP). */
typedef struct {
    bool ok;                      /* false: the job cannot be set up here (error says why) */
    char error[POOL_TEXT_MAX];
    pool_lacks lacks;             /* the files this member lacks (copied) */
    cost_shape shape;             /* the model's, at the job's sequence length */
    int64_t batch, micro_batch, steps;
    int64_t snapshot_every;       /* the job's (0: the plan chooses) */
    int64_t checkpoint_every;     /* the job's pool checkpoints (0: none) */
    double replan_gain;           /* the job's (share of the step) */
    int64_t replan_min_steps;     /* the job's */
    const pool_saved *saved;      /* what this member saved for the job before, or NULL */
} pool_setup;

pool_core *pool_core_create(const pool_core_config *cfg);
void pool_core_destroy(pool_core *c);

/* One step at now_ms (monotonic) and wall_s (Unix seconds: a job's
 * submitted_at is judged against it): take up a later job, see a stop,
 * measure, vote or commit, start the stage, gather. members: the view, self
 * included. Appends to out. */
void pool_core_step(pool_core *c, const pool_member *members, int n, int64_t now_ms,
                    int64_t wall_s, pool_actions *out);

/* Whether an answer left the core something to do at once (a job's blob
 * came: it is taken up at the next step): the driver steps it again in the
 * same tick, so a fetched job is taken up as soon as it arrives. */
bool pool_core_due(const pool_core *c);

/* A job this member submits (its own: submitted_by is this member), going
 * to the live members of the view (its first epoch's members). Refused
 * (-1, err) for another submitter, a submitted_at ahead of wall_s, or while
 * a committed run is active. */
int pool_core_submit(pool_core *c, const pool_bundle *b, const pool_member *members, int n,
                     int64_t now_ms, int64_t wall_s, pool_actions *out, char *err,
                     size_t errlen);
/* Stops the job on every member (-1: none). */
int pool_core_stop(pool_core *c, int64_t now_ms, pool_actions *out);

/* The driver's answers. */
void pool_core_setup_done(pool_core *c, const pool_setup *s, pool_actions *out);
/* prof NULL: profiling failed (error says why). */
void pool_core_profiled(pool_core *c, const pool_profile *prof, const char *error,
                        pool_actions *out);
void pool_core_links_measured(pool_core *c, const pool_links *links, pool_actions *out);
void pool_core_vote_saved(pool_core *c, int64_t epoch, bool ok, const char *error,
                          pool_actions *out);
/* A stage's pace (pool_switch.c; docs/ARCHITECTURE.md, "Planned switches"):
 * after its first step, the median compute time of the next POOL_PACE_BASE
 * steps is what it runs at under its profile (its base); when at least
 * POOL_PACE_HITS of the last POOL_PACE_STEPS steps compute POOL_PACE_OFF
 * slower than the base (or that much faster), the member scales its profile
 * by the median of those steps over the base and gossips it. A few slow
 * steps in a row (a snapshot's copy going out, a neighbour starting) do
 * not count: a change must last. */
#define POOL_PACE_SKIP 1
#define POOL_PACE_BASE 5
#define POOL_PACE_STEPS 9
#define POOL_PACE_HITS 7
#define POOL_PACE_OFF 0.25

/* Progress of the running stage (a metrics line). */
void pool_core_run_progress(pool_core *c, const pool_progress *pr);
/* This member computes with n threads from now on (`shardnode set
 * --threads N`; 0: all its cores): its document says so at once. A running
 * stage of it changes pace and the profile follows what it measures; a
 * member that holds no stage of the committed plan is profiled again. */
void pool_core_set_threads(pool_core *c, int n, pool_actions *out);
void pool_core_run_ended(pool_core *c, bool ok, const char *error, pool_actions *out);
void pool_core_gathered(pool_core *c, bool ok, pool_actions *out);
/* The blob of job `ref` (NULL: it could not be fetched, tried again later). */
void pool_core_fetched(pool_core *c, const pool_job_ref *ref, const pool_job_blob *blob,
                       pool_actions *out);

/* The stage snapshots this member holds now (its own stage's and the copies
 * it keeps as a buddy: the files of jobs/ID/snap/), newest first. */
void pool_core_snapshots(pool_core *c, const pool_snaps *held);
/* The answer to CHECKPOINT. */
void pool_core_checkpointed(pool_core *c, int64_t step, bool ok, const char *error,
                            pool_actions *out);
/* The answer to PULL. */
void pool_core_pulled(pool_core *c, bool ok, const char *error, pool_actions *out);
/* This member's stage of the committed plan and its copies (docs/ARCHITECTURE.md,
 * "Recovery": a stage waits for its buddy's copy of one snapshot before it
 * completes the step of the next but one): out's layers are the stage's, out's
 * step the newest step of them that another live member's document lists (0:
 * none yet; POOL_COPIED_NONE: no other member can keep a copy, the stage never
 * waits). false: this member holds no stage, or no plan is committed. */
#define POOL_COPIED_NONE INT64_MAX
bool pool_core_copied(const pool_core *c, pool_snap *out);

/* What the core holds. */
const pool_doc *pool_core_doc(const pool_core *c);          /* what this member says */
const pool_bundle *pool_core_bundle(const pool_core *c);    /* NULL: no job */
/* The job blob's text (malloc'ed) and its SHA-256: what this member serves
 * to the others (NULL: no job). */
char *pool_core_blob_text(const pool_core *c, char hash[65]);
const pool_plan *pool_core_committed(const pool_core *c);   /* NULL: none */
bool pool_core_stopped(const pool_core *c);
/* What to save across restarts (with a vote waiting for SAVE_VOTE). */
void pool_core_saved(const pool_core *c, pool_saved *out); /* borrowed: do not free */
/* A committed run that has neither finished on every stage nor failed. */
bool pool_core_run_active(const pool_core *c, const pool_member *members, int n);
/* This member leaves (`shardnode leave`, SIGTERM to `up`): from now on it
 * computes nothing, and its document says so at once; where it holds a
 * stage of the running plan the pool switches to a plan without it, its
 * stage handing its layers over at a step boundary (docs/ARCHITECTURE.md,
 * "Planned switches"). True when it must stay up until pool_core_departed
 * says it may go (it holds a stage of a running plan, or of the plan a
 * committed handover replaces until the new stages have its layers, or of
 * one that finished the job before the model was gathered: its stage file
 * is still to be fetched). */
bool pool_core_depart(pool_core *c, const pool_member *members, int n);
/* Whether a departing member may go: no running plan needs it any more
 * (the committed plan does not name it, its own stage has ended, and the
 * plan's stages have done a step after the one they started after, so
 * they no longer fetch its snapshots), and a finished one was gathered. */
bool pool_core_departed(const pool_core *c, const pool_member *members, int n);

/* ---- checks on what other members gossip (pool_verify.c) ---- */

/* Whether the job that member `carrier` gossips (its record's reference)
 * may be taken up as its submitter's: the submitter of a job is the member
 * whose own signed record carried it first, so either the carrier is the
 * submitter it names, or the member it names carries the same job (id and
 * job blob) in its own document. */
bool pool_job_from_carrier(const pool_job_ref *r, const char *carrier,
                           const pool_member *members, int n);
/* Where the gathered model of a job goes on node `self`: the job's out_dir
 * when self submitted it, else JOB_DIR/model. */
void pool_bundle_gather_dir(const pool_bundle *b, const char *self, const char *job_dir,
                            char *out, size_t len);
/* Whether committed section c that some member gossips for job `id` may be
 * adopted: its content hashes to its hash; every stage names a member at
 * the overlay address of that member's own record; and the votes in the
 * members' own documents commit exactly (epoch, hash) on the base
 * (base_e, base_plan) with base membership `base`: a strict majority of it
 * and every named node voted for it (elect_decide, from the votes of that
 * epoch themselves, not a later base); its members' hash is that of those
 * votes' view members. Returns 0, or -1 with the reason in why. */
int pool_plan_verify(const pool_plan *c, const char *id, const pool_names *base, int64_t base_e,
                     uint64_t base_plan, const pool_member *members, int n, char *why,
                     size_t whylen);

#endif

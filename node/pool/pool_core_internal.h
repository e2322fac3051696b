/* pool_core_internal.h — what pool_core.c (the job's life on a member:
 * adoption, measuring, the stage, gathering) and pool_elect.c (the view,
 * the plan and the votes) share of the pool core. Private to node/pool/. */
#ifndef SHARDNODE_POOL_CORE_INTERNAL_H
#define SHARDNODE_POOL_CORE_INTERNAL_H

#include "pool_core.h"

#define POOL_RECENT_STEPS 9 /* run.step_ms is the median of this many last steps */

struct pool_core {
    char name[MESH_NAME_MAX];
    bool no_compute;
    char host[17];
    int cores, threads;

    pool_doc doc;                 /* what this member says; doc.bundle is the job */
    bool setup_pending, job_loaded;
    cost_shape shape;
    int64_t batch, micro_batch, steps;

    /* measuring */
    bool prof_pending, probe_pending, links_done;

    /* the view and its plan */
    uint64_t view_fp;             /* what the last view was computed from */
    bool view_ready;              /* every live member of it is ready */
    uint64_t view, plan;          /* the view hash and the plan hash (0: no plan fits) */
    bool plan_done;               /* plan, layout and why are those of this view */
    pool_names view_members;
    pool_plan layout;             /* the plan's content when plan != 0 */
    int64_t view_since_ms;

    /* the election */
    uint64_t failed_view;         /* the view of my vote in an epoch that failed */
    int64_t failed_epoch;         /* that epoch (my vote in it stays in my record) */
    int64_t next_epoch;           /* ... and the epoch my next vote goes to */
    bool vote_pending;            /* `pending` waits for SAVE_VOTE's answer */
    pool_vote pending;
    pool_plan pending_layout;     /* the plan `pending` is for (plan != 0) */
    pool_plan vote_layout;        /* the plan my vote is for: what I commit when it wins,
                                     whatever my view has become since */
    int64_t unsaved_epoch;        /* the last epoch whose vote could not be saved (logged) */
    int64_t suspect_since_ms;     /* the election has waited on suspected members since,
                                     in view suspect_view (0: not yet) */
    uint64_t suspect_view;
    char refused[160];            /* the last gossiped commit refused (logged once) */
    char job_refused[160];        /* the last gossiped job refused (logged once) */

    /* a later job another member gossips: its blob is fetched first */
    bool fetch_pending, has_fetched;
    pool_job_ref fetching;
    int64_t fetch_retry_ms;
    pool_job_blob fetched;        /* has_fetched: the blob of fetching */

    /* the run and gathering */
    bool run_pending, export_pending, exported;
    int64_t run_epoch;            /* the epoch whose stage this member ran or runs (0: none) */
    double recent_ms[POOL_RECENT_STEPS]; /* the running stage's last step times (a ring) */
    int nrecent;                  /* steps in recent_ms since the stage started */
    double pace_base;             /* compute ms a step under the profile (0: not yet) */
    double pace[POOL_PACE_STEPS]; /* the base's samples, then the last steps' (a ring) */
    int npace;                    /* compute samples since the stage started */
    double pace_due;              /* a re-profile to apply: its factor (0: none) */
    double pace_now;              /* ... and the median compute ms it was measured from */
    int paced;                    /* re-profiles from the stage's pace in this job */
    int64_t snapshot_every;       /* the job's (0: the plan chooses) */
    int64_t checkpoint_every;     /* the job's pool checkpoints (0: none) */
    int64_t ckpt_step;            /* the last checkpoint asked for (the submitter) */
    int64_t ckpt_done;            /* the last one written (or given up) */
    int ckpt_tries;               /* failures of ckpt_step */
    int64_t ckpt_retry_ms;        /* not before (-1: the next step sets it) */
    bool ckpt_pending;

    /* recovery (pool_recover.c) */
    bool recovering;              /* a holder of the committed plan was lost: re-planning */
    bool layers_lost;             /* no member keeps a copy of some layers: the job fails */
    int64_t lost_since_ms;        /* ... once that view has held this long */
    int64_t rec_base;             /* the epoch that was lost */
    int64_t loss_ms;              /* when the loss was seen */
    int futile;                   /* recoveries in a row with no step done after them */
    pool_recovery rec_before;     /* the record before this recovery, whether there was one,
                                     and the run state then: put back when the recovery is
                                     moot (core_moot) */
    bool rec_before_has;
    pool_run_state run_before;
    bool pull_pending;
    int64_t pull_retry_ms;
    bool has_copied;              /* this member holds a stage of the committed plan: */
    pool_snap copied;             /* its layers, and the newest step another live member
                                     lists a snapshot of (POOL_COPIED_NONE: no other member
                                     can keep one) */
    /* planned switches (pool_switch.c) */
    bool switches;                /* pool_core_config's */
    double replan_gain;           /* the job's */
    int64_t replan_min_steps;
    pool_switch_why switching;    /* this member votes for a switch (NONE: it does not) */
    pool_switch_why switch_why;   /* why the committed handover plan was voted (NONE:
                                     unknown here) */
    pool_plan prev;               /* a handover plan's base epoch's plan (epoch 0: unknown) */
    bool handover_asked;          /* HANDOVER went to this member's stage of prev ... */
    int64_t handover_ask_ms;      /* ... last at this time */
    int64_t handover_ms;          /* when this member saw the handover plan committed */
    int64_t handed_epoch;         /* the handover plan whose step is known ... */
    int64_t handed_step;          /* ... and that step */
    int64_t epoch_from;           /* the step the committed plan's stages started after */
    char stay[POOL_DOC_TEXT_MAX]; /* why the running plan stays (logged once) */

    int64_t next_doc_ms;
    bool dirty;
    bool urgent;                  /* publish at this step, whatever POOL_DOC_MS says (a
                                     handover waits on it) */

    /* scratch, kept between steps: no allocation per step once grown */
    int cap;
    elect_voter *voters;
    const char **names;
    int *order;
};

/* pool_core.c */
void core_log(pool_actions *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
pool_action *core_act(pool_actions *out, pool_act_type type);
bool core_doc_job(const pool_member *m, const char *id);
/* The model's state does not fit the computing members' free memory
 * (c->doc.why says by how much). */
bool core_too_small(pool_core *c, const pool_member *m, int n);
int core_scratch(pool_core *c, int n);

void core_kill(pool_core *c, pool_actions *out);
void core_set_run(pool_core *c, pool_run_state state, const char *error);

/* pool_switch.c: the running stage's pace. A step's compute time (ms). */
void core_pace_sample(pool_core *c, double compute_ms);
/* Applies a re-profile the samples call for (the profile scaled, gossiped). */
void core_pace(pool_core *c, pool_actions *out);
/* Scales this member's profile by f (its stage's base with it). */
void core_pace_scale(pool_core *c, double f);

/* pool_recover.c */
/* Some stage of epoch's plan (a member whose document commits it, running or
 * done) has done a step after `from`. */
bool core_stepped_after(const pool_core *c, const pool_member *m, int n, int64_t epoch,
                        int64_t from);
/* The member called name in m[0..n), or NULL. */
const pool_member *core_named(const pool_member *m, int n, const char *name);
/* What member q says about the job: this member's own document for itself. */
const pool_doc *core_doc_of(const pool_core *c, const pool_member *q);
/* Whether the snapshots of `step` (-1: of any step) among the members
 * in[0..k) cover a model of L layers; what they miss written into miss
 * (the embedding, the layers, the head) when it is not NULL. */
bool core_covered(const pool_core *c, const pool_member *m, const int *in, int k, int L,
                  int64_t step, char *miss, size_t len);
/* Sees a loss of the committed plan's stage holder (or a broken pipeline)
 * and starts the recovery: the stage stops, a new epoch is voted. */
void core_watch(pool_core *c, const pool_member *m, int n, int64_t now, pool_actions *out);
/* A recovery this member runs while some member says the job's model was
 * gathered (it learned of the end late: a healed minority, whose view of
 * the last plan's holders lost one that left after the end) is moot: it
 * stops, and its record and run state are put back as they were. */
void core_moot(pool_core *c, const pool_member *m, int n, pool_actions *out);
/* Some member says the job's model was gathered (its run's "gathered"). */
bool core_gathered(const pool_core *c, const pool_member *m, int n);
/* Another live member carries a later commit of the job than this one. */
bool core_behind(const pool_core *c, const pool_member *m, int n);
/* After an election during recovery: a later epoch committed. */
void core_recovered(pool_core *c, int64_t now, pool_actions *out);
/* The step the new plan resumes after (the newest every layer has a
 * snapshot of among the live members in[0..k)), 0 from the start; -1 when
 * layers are lost (c->doc.why names them). */
int64_t core_resume_step(pool_core *c, const pool_member *m, const int *in, int k);
/* snapshot_every for a plan: the job's, else what keeps a copy's streaming
 * within about 10% of the slowest link's time per step. */
int64_t core_snapshot_every(const pool_core *c, const plan *pl, const cost_link *links, int f);
/* The submitter: a CHECKPOINT of the newest step of checkpoint_every
 * that the snapshots cover. */
void core_checkpoint(pool_core *c, const pool_member *m, int n, int64_t now,
                     pool_actions *out);
/* What pool_core_copied says: this member's stage's newest copy elsewhere. */
void core_copied(pool_core *c, const pool_member *m, int n);
/* A buddy's copies: PULL the newest snapshot of each stage it keeps. */
void core_pull(pool_core *c, const pool_member *m, int n, int64_t now, pool_actions *out);
/* The record of the last recovery: the seconds to the first step after it. */
void core_rec_progress(pool_core *c, const pool_member *m, int n, int64_t now);
/* The base membership of the committed plan when this member adopted it
 * without knowing the list (only its hash): its own vote's, or every
 * member that carries the job, when either hashes to it. */
void core_fill_base(pool_core *c, const pool_member *m, int n);

/* Starts a recovery from plan pl: lost names the member lost ("" none), at
 * the step the run reached. */
void core_recover(pool_core *c, const pool_plan *pl, const char *lost, int64_t at, int64_t now,
                  pool_actions *out);
/* The snapshots of `step` that this member's stage of pl starts from: fills
 * a RUN action's targets and snaps; -1 when some layers have none. */
int core_pieces_at(pool_core *c, const pool_member *m, int n, const pool_plan *pl, int64_t step,
                   pool_action *a);
/* The bytes of a stage's state (layers [b, e): weights and both moments),
 * -1 when the shape cannot be costed. */
int64_t core_state_bytes(const pool_core *c, int b, int e);

/* pool_switch.c */
/* While the committed plan runs: whether the plan over the view is worth
 * a switch (sets c->switching, which makes the step vote). */
void core_switch_watch(pool_core *c, const pool_member *m, int n, int64_t now,
                       pool_actions *out);
/* A committed handover plan: stop this member's old stage, learn the step
 * the old stages stopped at (c->handed_step), or fall back to a recovery. */
void core_handover(pool_core *c, const pool_member *m, int n, int64_t now, pool_actions *out);
/* The record of the last switch: the time to the first step after it. */
void core_switch_progress(pool_core *c, const pool_member *m, int n, int64_t now);

/* pool_elect.c */
/* Plan pl's step (ns, with shared cores counted) over the profiles and
 * links of the live members of the view now, and the slowest link's
 * bandwidth among them (*bw); -1 when a holder of pl is no candidate. */
int64_t core_plan_step_now(pool_core *c, const pool_member *m, int n, const pool_plan *pl,
                           int64_t *bw);
/* Recomputes the view (and, when it changed, the plan); false while a live
 * member is not ready. */
bool core_view(pool_core *c, const pool_member *m, int n, int64_t now);
/* One step of the election: take a commit, decide the epoch, or vote. */
void core_elect(pool_core *c, const pool_member *m, int n, int64_t now, pool_actions *out);
/* The answer to SAVE_VOTE. */
void core_vote_saved(pool_core *c, int64_t epoch, bool ok, const char *error, pool_actions *out);

#endif

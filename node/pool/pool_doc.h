/* pool_doc.h — node/pool/, public to the rooms above it: the documents of a
 * job on the pool as C types (docs/PROTOCOL.md, "Jobs and the plan
 * election"): a list of member names, the plan (a layout, or a committed
 * section), a vote, a member's profile, links and run, the member's whole
 * job document, what a node saves across restarts, and the job section of
 * `status`. Each has one parse-and-validate function (_from_json: every key
 * known, every field typed and bounded, a refusal naming the field) and one
 * writer (_to_json: the same keys, the same bytes once dumped compact and
 * key-sorted). Nothing else in node/ reads these documents' keys.
 * pool_plan.c: names, plans, votes; pool_doc.c: profiles, links, runs, the
 * job blob, the document; pool_status.c: the saved state, the status
 * section, progress lines. */
#ifndef SHARDNODE_POOL_DOC_H
#define SHARDNODE_POOL_DOC_H

#include "mesh.h"
#include "pool_job.h"
#include "scheduler.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define POOL_TEXT_MAX 1024          /* a log line or an error, with the NUL */
#define POOL_DOC_TEXT_MAX 512       /* an error or a reason in a document, with the NUL */

/* ---- the readers' shared checks (pool_doc.c) ---- */
/* The first key of obj outside the NULL-ended list known, or NULL. */
const char *pool_json_unknown_key(json_t *obj, const char *const *known);
/* obj's string `key` (at most len - 1 bytes) into out, "" when absent;
 * -1 with err naming the key when it is no string or too long. */
int pool_json_text(json_t *obj, const char *key, char *out, size_t len, char *err, size_t errlen);

/* ---- names (pool_plan.c) ---- */

typedef struct {
    int n;
    char (*name)[MESH_NAME_MAX];    /* malloc'ed */
} pool_names;

/* A JSON list of node names (null or absent: empty). what names the field. */
int pool_names_from_json(json_t *j, pool_names *out, const char *what, char *err,
                         size_t errlen);
json_t *pool_names_to_json(const pool_names *n);
int pool_names_add(pool_names *n, const char *name);
int pool_names_copy(pool_names *dst, const pool_names *src);
bool pool_names_equal(const pool_names *a, const pool_names *b);
bool pool_names_has(const pool_names *n, const char *name);
/* What a record carries of a list of names: the first 8 bytes of the
 * SHA-256 of its compact JSON (never 0). */
uint64_t pool_names_hash(const pool_names *n);
void pool_names_free(pool_names *n);

/* ---- the plan (pool_plan.c) ----
 * A stage is a range of decoder layers held by members: one member today
 * (the wire form [name, first layer, end layer, overlay address, predicted
 * ns]); data parallelism inside a stage will let several hold it. */
#define POOL_STAGE_HOLDERS 1
#define POOL_MAX_STAGES ELECT_MAX_NAMED   /* a vote names every stage's member */

typedef struct {
    char name[MESH_NAME_MAX];
    char address[GOSSIP_ADDR_MAX];  /* its overlay address, from its own record */
} pool_holder;

typedef struct {
    int layer_begin, layer_end;     /* [begin, end) */
    int64_t time_ns;                /* predicted, one micro-batch */
    int nholders;                   /* 1 (POOL_STAGE_HOLDERS) */
    pool_holder holder[POOL_STAGE_HOLDERS];
} pool_stage;

/* A layout {"mb", "step_ns", "step_ns_shared", "stages"}; a committed
 * section adds {"e": epoch, "h": plan hash, "mh": the hash of the base
 * membership of the next epoch (pool_names_hash)}. The list itself is known
 * to the members that voted for the plan (their vote's view members), not
 * carried: it grows with the pool. */
typedef struct {
    int64_t mb, step_ns, step_ns_shared;
    bool has_shared;                /* step_ns_shared is present */
    int64_t resume_step;            /* "rs": the stages start after this step, from the
                                       members' snapshots of it (a recovery); 0: from the
                                       job's start (absent) */
    int64_t snapshot_every;         /* "se": stages snapshot every this many steps (0: never) */
    bool handover;                  /* "ho": true: a planned switch; the stages start after
                                       the step at which the base epoch's stages stopped and
                                       handed their state over (docs/ARCHITECTURE.md,
                                       "Planned switches") */
    int nstages;
    pool_stage stage[POOL_MAX_STAGES];
    int64_t epoch;                  /* committed: >= 1; 0: a layout */
    uint64_t hash;                  /* committed: the plan hash it claims */
    uint64_t members_hash;          /* committed: "mh" */
    pool_names members;             /* committed: the list, when this member knows it
                                       (never read from or written to a record) */
} pool_plan;

int pool_plan_from_json(json_t *j, bool committed, pool_plan *out, char *err, size_t errlen);
/* A committed section when p->epoch > 0, else a layout. */
json_t *pool_plan_to_json(const pool_plan *p);
/* The plan hash: the first 8 bytes (big-endian) of the SHA-256 of the
 * compact, key-sorted JSON of the layout (never 0). */
uint64_t pool_plan_hash(const pool_plan *p);
int pool_plan_copy(pool_plan *dst, const pool_plan *src);
void pool_plan_free(pool_plan *p);
/* The stage member holds, or -1. */
int pool_plan_stage_of(const pool_plan *p, const char *member);

/* ---- a vote (pool_plan.c) ---- */

/* Why a vote is for a planned switch, "sw" (absent: not a switch; a vote
 * after the committed epoch without it is a recovery's). */
typedef enum {
    POOL_SW_NONE = 0,
    POOL_SW_JOINED,                 /* "joined": a member the running plan does not use */
    POOL_SW_LEFT,                   /* "left": a holder leaves on purpose */
    POOL_SW_SLOWED,                 /* "slowed": a member's profile changed */
} pool_switch_why;

const char *pool_switch_why_name(pool_switch_why w);

typedef struct {
    elect_vote v;                   /* epoch 0: none */
    pool_switch_why sw;             /* "sw" */
    uint64_t members_hash;          /* "mh": pool_names_hash of the view members the voter saw */
    pool_names members;             /* that list, on the voter only (not in the record) */
} pool_vote;

/* {"e", "b", "bp", "v", "p", "n", "mh", "sw"} (hashes as hex; "sw" only in a
 * switch's vote). */
int pool_vote_from_json(json_t *j, pool_vote *out, char *err, size_t errlen);
json_t *pool_vote_to_json(const pool_vote *v);
int pool_vote_copy(pool_vote *dst, const pool_vote *src);
void pool_vote_free(pool_vote *v);

void pool_hex64(uint64_t v, char out[17]);
/* 1 to 16 lowercase hex digits into *v; -1 otherwise. */
int pool_hex64_parse(const char *s, uint64_t *v);

/* ---- profile, links, run (pool_doc.c) ---- */

typedef struct {
    cost_profile prof;              /* "b", "f", "k", "o", "mem", "s" */
    char device[128];               /* "d" */
} pool_profile;

/* The profile `shardnode profile --out` wrote for this shape (its
 * device_name as the device). */
int pool_profile_from_file(const char *path, const cost_shape *shape, pool_profile *out,
                           char *err, size_t errlen);

typedef struct {
    char name[MESH_NAME_MAX];
    int64_t latency_ns, bandwidth;  /* bytes per second */
    char via[MESH_NAME_MAX];        /* "": direct; else the member relaying it */
} pool_link;

typedef struct {
    int n;
    pool_link *l;                   /* malloc'ed */
} pool_links;

/* A record carries at most this many links exactly; with more members it
 * carries the most unusual ones and the typical link (docs/PROTOCOL.md). */
#define POOL_LINKS_MAX 16

/* {"NAME": [latency_ns, bytes_per_s], ...}: a document's "links", and the
 * file `shardnode probe-links` writes; a relayed link carries its relay's
 * name third: "NAME": [latency_ns, bytes_per_s, "RELAY"] (not NAME). */
int pool_links_from_json(json_t *j, pool_links *out, char *err, size_t errlen);
json_t *pool_links_to_json(const pool_links *l);
int pool_links_add(pool_links *l, const char *name, int64_t latency_ns, int64_t bandwidth);
/* The same with its relay (NULL or "": direct); -1 on a bad name. */
int pool_links_add_via(pool_links *l, const char *name, int64_t latency_ns, int64_t bandwidth,
                       const char *via);
const pool_link *pool_links_find(const pool_links *l, const char *name);
int pool_links_copy(pool_links *dst, const pool_links *src);
void pool_links_free(pool_links *l);
/* What a record says of the links measured: every one when there are at
 * most POOL_LINKS_MAX, else the POOL_LINKS_MAX that differ most from the
 * typical link (in latency or bandwidth by more than a factor of 2, the
 * largest factor first, ties by name), relayed links before all others; and
 * the typical link: the median latency and the median bandwidth of those
 * with a bandwidth (0, 0 when none was measured). */
int pool_links_summary(const pool_links *all, pool_links *exact, pool_link *typical);

typedef enum {
    POOL_RUN_NONE = 0,              /* no "state" (a run that holds only "gathered") */
    POOL_RUN_RUNNING,
    POOL_RUN_DONE,
    POOL_RUN_FAILED,
    POOL_RUN_STOPPED,
    POOL_RUN_RECOVERING,            /* a stage holder was lost: a new plan is being made */
    POOL_RUN_HANDED,                /* the stage stopped after "step" for a planned switch,
                                       its state kept as a snapshot of that step */
} pool_run_state;

const char *pool_run_state_name(pool_run_state s);

/* {"state", "step", "steps", "loss", "tps", "step_ms", "error", "gathered"}. */
typedef struct {
    pool_run_state state;
    bool has_step, has_steps, has_loss, has_tps, has_step_ms;
    int64_t step, steps;
    double loss, tps, step_ms;
    char error[POOL_DOC_TEXT_MAX];  /* "" none */
    int gathered;                   /* -1 absent, 0 failed, 1 done */
} pool_run;

int pool_run_from_json(json_t *j, pool_run *out, char *err, size_t errlen);
/* A line of a stage's metrics.jsonl (docs/FORMATS.md, "Metrics"). */
typedef struct {
    int64_t step;
    double loss, tps, step_ms;
    double compute_ms;              /* -1: the line has none */
    int threads;                    /* 0: the line has none */
} pool_progress;
/* -1 when the line holds no step. */
int pool_run_progress_from_line(const char *line, pool_progress *out);
json_t *pool_run_to_json(const pool_run *r);
void pool_run_init(pool_run *r);

/* ---- a member's job document (pool_doc.c) ---- */

#define POOL_DOC_VERSION 2        /* "v" of the job document (1: before issue 14) */
#define POOL_LACKS_MAX 4          /* lacks listed in a record (in at most POOL_LACKS_TEXT_MAX
                                     bytes); "lack_more" counts the rest */
#define POOL_LACKS_TEXT_MAX 1024
/* What a record gives a plan: its committed section and the names in a vote
 * for it, as JSON, at most this many bytes (a plan that needs more is not
 * voted for: why says so). */
#define POOL_PLAN_TEXT_MAX 2560

/* A job as a record names it: its id, submitter and submission time, and
 * the SHA-256 of its job blob (the bundle and the first epoch's members),
 * which members fetch from each other (pool_job_blob). */
typedef struct {
    char id[POOL_JOB_ID_LEN + 1];
    char by[MESH_NAME_MAX];
    int64_t at;
    char blob[65];                  /* 64 lowercase hex digits */
} pool_job_ref;

/* Whether job a (a record's) comes after b (NULL: none), as
 * pool_bundle_later orders bundles. */
bool pool_job_ref_later(const pool_job_ref *a, const pool_job_ref *b, int64_t now_s);

/* The job blob: {"bundle": the bundle, "pool": [the members alive when it
 * was submitted: the base membership of its first epoch]}, served by
 * FETCH as jobs/ID/job-SHA256.json. */
typedef struct {
    pool_bundle bundle;
    pool_names pool;
} pool_job_blob;

int pool_job_blob_from_json(json_t *j, pool_job_blob *out, char *err, size_t errlen);
json_t *pool_job_blob_to_json(const pool_job_blob *b);
/* Its text (compact, key-sorted; malloc'ed) and that text's SHA-256 in hex. */
char *pool_job_blob_text(const pool_job_blob *b, char hash[65]);
void pool_job_blob_free(pool_job_blob *b);
/* The reference a record carries of blob b (hash: of its text). */
void pool_job_blob_ref(const pool_job_blob *b, const char hash[65], pool_job_ref *out);

enum {
    POOL_HAS_POOL = 1 << 0, POOL_HAS_STOP = 1 << 1, POOL_HAS_COMPUTE = 1 << 2,
    POOL_HAS_HOST = 1 << 3, POOL_HAS_CORES = 1 << 4, POOL_HAS_THREADS = 1 << 5,
    POOL_HAS_FIRST = 1 << 6, POOL_HAS_ANY = 1 << 7, POOL_HAS_READY = 1 << 8,
    POOL_HAS_PROF = 1 << 9, POOL_HAS_LINKS = 1 << 10, POOL_HAS_VOTE = 1 << 11,
    POOL_HAS_COMMITTED = 1 << 12, POOL_HAS_RUN = 1 << 13, POOL_HAS_REC = 1 << 14,
    POOL_HAS_SWR = 1 << 15,
};

/* A stage snapshot a member holds and serves (FETCH of
 * jobs/ID/snap/L<b>-<e>-s<step>.safetensors): the state of layers [b, e)
 * (with the embedding when b is 0, the final norm and head when e is the
 * last layer) after `step` steps. "sn": [[b, e, step], ...]. */
#define POOL_SNAPS_MAX 8
typedef struct {
    int layer_begin, layer_end;
    int64_t step;
} pool_snap;

typedef struct {
    int n;
    pool_snap s[POOL_SNAPS_MAX];
} pool_snaps;

/* The last recovery this member took part in: "rec": {"lost": member,
 * "at": the step the run had reached, "from": the step it resumed after,
 * "e": the new epoch, "ms": from the loss to the first step done after it
 * (absent until then), "n": recoveries in this job}. */
typedef struct {
    char lost[MESH_NAME_MAX];       /* "" when the stages broke with every member alive */
    int64_t at, from, epoch, ms, n; /* ms -1: not yet */
} pool_recovery;

/* The last planned switch this member took part in (docs/ARCHITECTURE.md,
 * "Planned switches"): "swr": {"e": the new epoch, "from": the step the old
 * stages handed over after, "why": joined | left | slowed, "mb": the MB the
 * new stages fetch, "pred": the new plan's predicted step (ms), "old": the
 * running plan's measured step before it (ms, 0: unknown), "ms": from the
 * commit seen to the first step after the handover (absent until then), "n":
 * switches in this job}. */
typedef struct {
    int64_t epoch, from, ms, n;     /* ms -1: not yet */
    pool_switch_why why;
    double mb, pred_ms, old_ms;
} pool_switch_rec;

/* The `job` text of a member record: what that member knows and does about
 * the mesh's current job (PROTOCOL.md, "The job document"). "v", "id",
 * "by", "at" and "jb" are required, every other key optional; `has` says
 * which the document carries. Nothing in it grows with the pool or the job:
 * the bundle and the member lists are fetched or hashed, links and lacks
 * are capped. */
typedef struct {
    pool_job_ref job;               /* "id", "by", "at", "jb" */
    char id[POOL_JOB_ID_LEN + 1];   /* = job.id ("" no document) */
    pool_bundle *bundle;            /* the job, on the member only (not in the record) */
    unsigned has;                   /* POOL_HAS_* */
    pool_names pool;                /* the job blob's, on the member only */
    bool stop, compute, first, any, ready;
    char host[17];
    int64_t cores, threads;
    pool_lacks lacks;               /* "lack" (written when not empty, at most
                                       POOL_LACKS_MAX; the rest counted in lack_more) */
    int64_t lack_more;
    char error[POOL_DOC_TEXT_MAX];  /* "" none (so for prof_error and why) */
    char prof_error[POOL_DOC_TEXT_MAX];
    char why[POOL_DOC_TEXT_MAX];
    pool_profile prof;
    pool_links links;               /* "links": the exact ones (pool_links_summary) */
    pool_link typical;              /* "link": [latency_ns, bytes_per_s] (with links) */
    pool_vote vote;
    pool_plan committed;
    pool_run run;
    pool_snaps snaps;               /* "sn" (written when not empty) */
    pool_recovery rec;              /* "rec" (has POOL_HAS_REC) */
    pool_switch_rec swr;            /* "swr" (has POOL_HAS_SWR) */
} pool_doc;

int pool_doc_from_json(json_t *j, pool_doc *out, char *err, size_t errlen);
json_t *pool_snaps_to_json(const pool_snaps *s);
/* The record's text: "" is no document (*out zeroed, 0 returned). */
int pool_doc_from_text(const char *text, pool_doc *out, char *err, size_t errlen);
json_t *pool_doc_to_json(const pool_doc *d);
/* The compact, key-sorted text that goes into the record (malloc'ed). */
char *pool_doc_to_text(const pool_doc *d);
void pool_doc_init(pool_doc *d);
void pool_doc_free(pool_doc *d);
/* What the view hash covers of member `name` with document d: the compact,
 * key-sorted JSON of {"name", "host", "cores", "threads", "compute",
 * "first", "any", "prof", "links", "link"} (malloc'ed). The snapshots
 * ("sn") are hashed beside it only where the plan depends on them
 * (pool_elect.c, core_view). */
char *pool_doc_view_text(const char *name, const pool_doc *d);

/* ---- what a node saves across restarts: STATE/jobs/ID/state.json (pool_status.c) ---- */

typedef struct {
    bool has_committed, has_run, has_vote;
    pool_plan committed;
    pool_run run;
    bool stop;
    pool_vote vote;
} pool_saved;

/* {"committed", "run", "stop", "vote"}, null for absent. */
int pool_saved_from_json(json_t *j, pool_saved *out, char *err, size_t errlen);
json_t *pool_saved_to_json(const pool_saved *s);
void pool_saved_free(pool_saved *s);

/* ---- the job section of `status` (docs/FORMATS.md, "Control socket"; pool_status.c) ---- */

typedef struct {
    char name[MESH_NAME_MAX];
    char state[16];                 /* alive, suspect, dead, left */
    char address[GOSSIP_ADDR_MAX];
    pool_doc *doc;                  /* its document without bundle and pool */
} pool_status_member;

typedef struct {
    char id[POOL_JOB_ID_LEN + 1];
    char submitted_by[MESH_NAME_MAX];
    char *out_dir, *job_file;       /* malloc'ed */
    bool has_committed, has_run, stop;
    pool_plan committed;            /* this node's */
    pool_run run;                   /* this node's */
    int nmembers;
    pool_status_member *members;
} pool_status;

/* The "job" of a status reply; null gives 1 (no job) with *out zero. */
int pool_status_from_json(json_t *j, pool_status *out, char *err, size_t errlen);
json_t *pool_status_to_json(const pool_status *s);
void pool_status_free(pool_status *s);
/* The same from a whole status reply ({"self", "members", "job", ...}). */
int pool_status_from_reply(json_t *reply, pool_status *out, char *err, size_t errlen);
/* From a status reply's list of members: the gossip port of member `name`
 * (GOSSIP_DEFAULT_PORT when not listed), this node's overlay address (NULL
 * when not listed). */
int pool_reply_gossip_port(json_t *reply, const char *name);
const char *pool_reply_own_address(json_t *reply);
/* The member's entry of a status, or NULL. */
const pool_status_member *pool_status_member_of(const pool_status *s, const char *name);

#endif

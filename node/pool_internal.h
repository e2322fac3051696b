/* pool_internal.h — what pool.c (the job's life on this node: adoption,
 * measuring, the stage, gathering, status) and pool_elect.c (the view, the
 * plan and the votes) share. Private to node/. */
#ifndef SHARDNODE_POOL_INTERNAL_H
#define SHARDNODE_POOL_INTERNAL_H

#include "daemon_internal.h"
#include "pool_job.h"

#define POOL_TICK_MS 500
#define POOL_QUIET_MS 3000       /* the view must not change for this long before a vote */
#define POOL_DOC_MS 2000         /* progress goes into the record at most this often */
#define POOL_DEFAULT_LAT_NS 1000000
#define POOL_DEFAULT_BW 100000000 /* bytes/s: a link nobody measured */
#define POOL_MAX_PARTS 256

struct pool {
    json_t *bundle;              /* the job (NULL: none) */
    char id[POOL_JOB_ID_LEN + 1];
    char dir[DAEMON_PATH_MAX];   /* STATE/jobs/ID */
    json_t *pool_names;          /* M before any commit: the members when it was submitted */
    bool stop;                   /* the job was stopped (by anyone) */
    json_t *lacks;
    bool can_first, can_any;
    char setup_err[512];         /* the job could not be set up here */
    llama_config cfg;
    job_spec job;
    bool job_loaded;

    pid_t prof_pid, probe_pid, run_pid, export_pid;
    json_t *prof;                /* compact profile for the record, NULL until measured */
    json_t *links;               /* {name: [latency_ns, bytes_per_s]} */
    bool links_done;
    char prof_err[512];

    /* election */
    elect_vote vote;             /* mine (epoch 0: none) */
    json_t *vote_members;        /* the view members of my vote */
    uint64_t view, plan;         /* my current view and the plan computed from it */
    json_t *view_members, *layout; /* ... its members and stages */
    int64_t view_since_ms;
    char why[768];               /* why no plan fits this view */
    uint64_t failed_view;        /* the view of my vote in an epoch that failed */
    json_t *committed;           /* {e, h, m, mb, step_ns, stages} */
    char refused[160];           /* the last gossiped commit refused (logged once) */
    char job_refused[160];       /* the last gossiped job refused (logged once) */

    /* the run */
    json_t *run;                 /* {state, step, steps, loss, tps, error} */
    bool exported;
    int64_t next_ms, next_doc_ms;
    bool doc_dirty;
};

/* A member as this tick sees it. */
typedef struct {
    const gossip_member *m;
    json_t *doc;                 /* its job text, parsed (NULL: none) */
    bool live;                   /* alive or suspect */
} part;


void pool_hex64(uint64_t v, char out[17]);
uint64_t pool_unhex64(const char *s);
/* Whether q's job document names the job id. */
bool pool_doc_job(const part *q, const char *id);
/* The model's state does not fit the computing members' free memory (p->why
 * says by how much). */
bool pool_too_small(daemon_t *d, part *parts, int n);

/* A member as the checks below see it: its name and overlay address from
 * its signed record, whether it is alive or suspect, and its job document
 * (NULL: none). */
typedef struct {
    const char *name;
    const char *address;
    bool live;
    json_t *doc;
} pool_peer;

/* Whether the bundle that member `carrier` gossips may be taken up as its
 * submitter's: the submitter of a job is the member whose own signed record
 * carried it first, so either the carrier is the submitter it names, or
 * the member it names carries the same job (id) in its own document. A
 * record claiming that someone else submitted a job that someone does not
 * carry is ignored. */
bool pool_job_from(json_t *bundle, const char *carrier, const pool_peer *peers, int n);

/* Where the gathered model of a job goes on node `self`: the job's out_dir
 * when self submitted it (the bundle's submitter, bound by pool_job_from),
 * else JOB_DIR/model: a job from another member never makes this node
 * write outside its own state directory. */
void pool_gather_dir(json_t *bundle, const char *self, const char *job_dir, char *out,
                     size_t len);

/* The HELLO key of two stages of a run (mesh_net_peer_opts.hello_key):
 * HMAC-SHA256 under the X25519 secret of their WireGuard keys of
 * "shardnode pipeline" NUL run NUL and both public keys, lower first. Both
 * ends compute the same 32 bytes; nobody without one of the private keys
 * can. Returns 0 or -1. */
int pool_hello_key(const uint8_t own_priv[GOSSIP_KEY_LEN], const uint8_t own_pub[GOSSIP_KEY_LEN],
                   const uint8_t peer_pub[GOSSIP_KEY_LEN], const char *run,
                   uint8_t key[MESH_HELLO_KEY_LEN]);

/* pool_elect.c */
/* The plan hash of a layout or committed section: the first 8 bytes of the
 * SHA-256 of the compact, key-sorted JSON of its mb, step_ns,
 * step_ns_shared and stages (never 0). Every vote names a plan by it, so a
 * committed section carries its own proof of content. */
uint64_t pool_layout_hash(json_t *layout);
/* Whether a committed section c that some member gossips for job `id` may
 * be adopted: well formed; its content hashes to its "h"; every stage names
 * a member at the overlay address of that member's own record; and the
 * votes in the members' own documents (peers[0..n)) commit exactly (e, h)
 * on the base (base_e, base_plan) with base membership `base` (a JSON list
 * of names): a strict majority of it and every named node voted for it
 * (elect_decide, from the votes of epoch e themselves, not a later base);
 * its "m" is the view members of those votes. Returns 0, or -1 with the
 * reason in why. */
int pool_commit_verify(json_t *c, const char *id, json_t *base, int64_t base_e,
                       uint64_t base_plan, const pool_peer *peers, int n, char *why,
                       size_t whylen);

json_t *pool_vote_json(const elect_vote *v, json_t *members);
int pool_vote_parse(json_t *j, elect_vote *v);
/* Recomputes the view (and, when it changed, the plan); false while a live
 * member is not ready. */
bool pool_compute_view(daemon_t *d, part *parts, int n);
/* One step of the election: take a commit, decide the epoch, or vote. */
void pool_elect(daemon_t *d, part *parts, int n, int64_t now);

#endif

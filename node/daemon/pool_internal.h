/* pool_internal.h — the pool's driver in the daemon (pool.c: the core's
 * actions as processes, files and records; pool_run.c: a stage's run
 * files; pool_fetch_serve.c: FETCH). Private to node/daemon/ (and tests). */
#ifndef SHARDNODE_POOL_INTERNAL_H
#define SHARDNODE_POOL_INTERNAL_H

#include "daemon_internal.h"
#include "pool_core.h"
#include "pool_job.h"

#include <sys/types.h>

/* A member's job document as the driver keeps it: read once per change of
 * its record's text. */
typedef struct {
    char name[MESH_NAME_MAX];
    char *text;                  /* the record's job text it was read from */
    bool ok;                     /* doc holds it; false: "" or refused */
    pool_doc doc;
    char *view_text;             /* pool_doc_view_text of it */
    uint64_t serial;
    bool seen;                   /* in the view at the last tick */
} pool_cached;

struct pool {
    pool_core *core;
    char id[POOL_JOB_ID_LEN + 1]; /* the job the driver set up ("" none) */
    char dir[DAEMON_PATH_MAX];   /* STATE/jobs/ID */
    pid_t prof_pid, probe_pid, run_pid, export_pid, fetch_pid, pull_pid, ckpt_pid;
    int run_threads;             /* the threads run_pid started with (the most it can take) */
    int64_t threads_step;        /* the last step after which it was asked to change them */
    int64_t ckpt_step;           /* the pool checkpoint ckpt_pid writes */
    int64_t checkpoint_every;    /* the job's (its snapshots of those steps are kept) */
    pool_snap pulling;           /* the snapshot pull_pid copies */
    pool_snap copied;            /* what snap/copied-L<b>-<e> last said (step -1: nothing) */
    int64_t noted_rec;           /* the recovery last written to metrics.jsonl (its n) */
    char noted_job[POOL_JOB_ID_LEN + 1];   /* ... of this job */
    pool_job_ref fetching;       /* the job blob fetch_pid fetches */
    cost_shape shape;            /* the job's model, to check its profile */
    bool lora;                   /* the job trains adapters (their stages stay on the CPU) */
    int64_t next_ms;
    pool_cached **cache;          /* each allocated on its own: its doc does not move */
    int ncache, capcache;
    uint64_t serial;
    pool_member *view;
    int nview, capview;
    pool_actions acts;
    char save_err[512];          /* the last failure to save the state (logged once) */
};

/* The HELLO key of two stages of a run (mesh_net_peer_opts.hello_key):
 * HMAC-SHA256 under the X25519 secret of their WireGuard keys of
 * "shardnode pipeline" NUL run NUL and both public keys, lower first. Both
 * ends compute the same 32 bytes; nobody without one of the private keys
 * can. Returns 0 or -1. */
int pool_hello_key(const uint8_t own_priv[GOSSIP_KEY_LEN], const uint8_t own_pub[GOSSIP_KEY_LEN],
                   const uint8_t peer_pub[GOSSIP_KEY_LEN], const char *run,
                   uint8_t key[MESH_HELLO_KEY_LEN]);
/* pool.c: a child `shardnode ARGS...` (stdout and stderr appended to log,
 * keys: its HELLO keys' path or NULL; 0 when it cannot start), a child
 * stopped (SIGTERM, then SIGKILL), a file's last non-empty line. */
pid_t pool_spawn(daemon_t *d, const char *log, char *const *args, const char *keys,
                 int niceness);
#define POOL_COPY_NICE 10 /* a buddy's copy of a snapshot (setpriority) */
void pool_kill_child(pid_t *pid);
void pool_last_line(const char *path, char *out, size_t len);
/* pool_run.c: the core's RUN, PULL and CHECKPOINT as children; the
 * snapshot folder told to the core; a finished recovery's metrics line. */
void pool_start_run(daemon_t *d, const pool_action *a);
void pool_start_pull(daemon_t *d, const pool_action *a);
void pool_start_checkpoint(daemon_t *d, const pool_action *a);
void pool_scan_snaps(daemon_t *d);
void pool_note_recovery(daemon_t *d);
/* pool_run.c: STATE/jobs/ID/snap/copied-L<b>-<e>, what pool_core_copied says
 * of this member's stage: the newest step of its layers another member holds
 * a copy of, or "none"; the stage waits on it (docs/FORMATS.md). */
void pool_write_copied(daemon_t *d);
/* pool_run.c: this node's run files of committed plan c under the job's
 * folder (their paths in job_path, cl_path, keys_path). 0, or -1 with err. */
int pool_write_run_files(daemon_t *d, const pool_plan *c, char *job_path, char *cl_path,
                         char *keys_path, size_t len, char *err, size_t errlen);

/* The device this node's profile and stage of the job compute on: the
 * node's (--device) unless the job is LoRA, whose stages have no GPU
 * kernels yet ("cpu"). */
const char *pool_device(const daemon_t *d);

#endif

/* daemon.h — the running node (node/daemon/) as the commands see it: run
 * it, make its state directory, record an invite for it, talk to it through
 * its control socket, check a dashboard address, gather a finished job's
 * model, and the two internal commands it spawns as child processes
 * (`probe-links`, `fetch`). Everything else of the daemon is private
 * (daemon_internal.h, pool_internal.h). */
#ifndef SHARDNODE_DAEMON_H
#define SHARDNODE_DAEMON_H

#include "keys.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The software version node.json and the gossiped record carry; the
 * project() version in the top-level CMakeLists.txt. */
#ifndef SHARDNODE_VERSION
#define SHARDNODE_VERSION "0.1.0"
#endif

struct json_t;

/* ---- daemon.c: the running node ---- */
typedef struct {
    const char *token_text;   /* join: the invite token; NULL: `up` */
    int threads;              /* compute threads for profiling and training; 0: all */
    bool no_compute;          /* a member that votes and watches but holds no stage */
    const char *http;         /* dashboard ADDR:PORT, "off"; NULL: 127.0.0.1:7980 */
    bool no_relay;            /* never relay for other members (docs/PROTOCOL.md, "Relays") */
    const char *device;       /* where its stages compute: "cpu", "cuda:N", "hip:N"; NULL or
                               * "auto": the first usable GPU, else the CPU */
} daemon_options;
/* Runs the node of DIR in the foreground until SIGINT/SIGTERM or `leave`;
 * with a token, first joins the mesh through it. Returns 0, or 1 with the
 * reason printed. */
int daemon_run(const char *state, const daemon_options *opt);

/* ---- state_create.c: the state directory ---- */
/* Makes a node's state directory: keys (0600), node.json and mesh.json.
 * With join_mesh_id NULL the node founds a new mesh with the given prefix;
 * otherwise it is a joiner of that mesh ("joined": false, no members yet).
 * Fills the overlay address and the mesh id in hex. On failure nothing is
 * left behind. */
int state_create(const char *state, const char *name, long port, const char *endpoint,
                 const char *prefix, const uint8_t *join_mesh_id, char *overlay,
                 size_t overlay_len, char mesh_hex[33], char *err, size_t errlen);
/* Appends {secret, expires, issued} to STATE/invites.json, dropping
 * expired entries; refuses when DAEMON_MAX_INVITES invites are still open.
 * The caller holds STATE/invites.lock (the daemon takes it to redeem). */
int state_record_invite(const char *state, const uint8_t secret[TOKEN_SECRET_LEN],
                        int64_t expires, int64_t now, char *err, size_t errlen);

/* ---- control.c: the control socket's client ---- */
/* One request ({"cmd": CMD}) to the node running on STATE through its
 * control socket; the reply object (json_decref it), or NULL with err
 * ("no node is running on ..."). */
struct json_t *node_control_request(const char *state, const char *cmd, char *err,
                                    size_t errlen);
/* The same with a whole request object (it must hold "cmd"). */
struct json_t *node_control_call(const char *state, struct json_t *req, char *err, size_t errlen);

/* ---- daemon_http.c: the dashboard's address ---- */
/* ADDR:PORT or [IPv6]:PORT with an IP address; -1 with err otherwise. */
int dash_parse_spec(const char *spec, char *host, size_t hostlen, int *port, char *err,
                    size_t errlen);

/* ---- pool_fetch.c: FETCH clients ---- */
/* Gathers the stage files of the mesh's committed plan from their nodes
 * (FETCH over the overlay) into STATE/jobs/ID/gathered, then merges them
 * into out (NULL: the job's out_dir). */
int pool_export(const char *state, const char *out, char *err, size_t errlen);

int cmd_probe_links(int argc, char **argv); /* run by the daemon */
int cmd_fetch(int argc, char **argv);       /* run by the daemon */
int cmd_stage_resume(int argc, char **argv); /* run by the daemon (pool_resume.c) */
/* pool_resume.c: a pool checkpoint (docs/FORMATS.md, "Pool checkpoints"):
 * the newest complete one under OUT_DIR/checkpoints (every shard's SHA-256
 * as its manifest says), and its shards checked and (snap_dir not NULL)
 * placed into a job's snapshots. */
int pool_checkpoint_newest(const char *out_dir, char *dir, size_t len, long long *step,
                           char *err, size_t errlen);
int pool_checkpoint_place(const char *ckpt, const char *snap_dir, long long *step, char *err,
                          size_t errlen);

#endif

/* engine_internal.h — what the two halves of one pipeline stage's run
 * share (not part of runtime.h): engine.c, the step (schedule, tied
 * gradient, norm, commit, snapshots, the run's loop: engine_train), and
 * engine_net.c, the stage's links (opening the stage and its buffers, its
 * peers' connections and HELLO keys; the messages it awaits and sends, and
 * the abort that tells its peers why it stops). */
#ifndef ENGINE_INTERNAL_H
#define ENGINE_INTERNAL_H

#include "node_base.h"
#include "runtime.h"

#include "kernels.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STASH_MAX 512

typedef struct {
    mesh_msg msg;
    mesh_frame *frame;
    int peer;
} pending;

typedef struct {
    const job_spec *job;
    const llama_config *cfg;
    const cluster_spec *cl;
    data_set *data;
    int self, p, m, rows;      /* stage, stages, micro-batches, B*T */
    stage *st;
    int nslots;
    mesh_net *net;
    int prev, next, tied;      /* peer indices or -1 */
    uint64_t run_id;
    int32_t *ids, *labels;     /* [m][rows] */
    float *inbuf;              /* [rows*C] aligned copy of a received tensor */
    uint16_t *wirebuf;         /* [nslots][rows*C] bf16 activations, or the gradient */
    uint16_t *gradwire;
    long step;
    pending stash[STASH_MAX];
    int nstash;
    bool peer_done[8];         /* peers that said the run is over for them */
    long done_at;              /* a peer's "done" ended the run after this many steps; -1 */
    const volatile sig_atomic_t *stop_request;
    struct kdev *dev;          /* the stage's device (NULL: the CPU) */
    double compute_s;          /* this step's forwards, backwards and AdamW (no waits) */
} engine;

/* engine_net.c */
/* The stage, its buffers and its peers' connections (e->job, cfg, cl,
 * self, dev, data set by the caller); engine_close frees what it made. */
int engine_open(engine *e, char *err, size_t errlen);
void engine_close(engine *e);
/* The next message of `type` (and micro-batch, when micro >= 0) of the
 * current step; others that arrive first wait in the stash. Returns 1 when,
 * instead, a peer said the run is over (a "done" of the current step): e->
 * done_at is then set and the peer counted as done. Waiting for a "done"
 * itself (MESH_MSG_COMMIT with flags_total MESH_COMMIT_DONE) returns it.
 * flags_total >= 0: only a message whose flags bit 0 equals it. */
int engine_await_from(engine *e, mesh_msg_type type, int micro, int flags_total, mesh_msg *out,
                      mesh_frame **frame, int *from, char *err, size_t errlen);
int engine_await(engine *e, mesh_msg_type type, int micro, int flags_total, mesh_msg *out,
                 mesh_frame **frame, char *err, size_t errlen);
/* A received tensor of rows*C elements into e->inbuf. */
int engine_take_tensor(engine *e, const mesh_msg *msg, char *err, size_t errlen);
/* x (rows*C floats) to peer in the cluster's wire type (wire: its bf16
 * buffer), with the micro-batch's labels and kept count when given. */
int engine_send_tensor(engine *e, int peer, mesh_msg_type type, int micro, const float *x,
                       uint16_t *wire, const int32_t *labels, int64_t kept, char *err,
                       size_t errlen);
int engine_send_small(engine *e, int peer, mesh_msg_type type, double value, uint32_t flags,
                      char *err, size_t errlen);
/* Tells every peer why this node stops, so they stop with the reason. */
void engine_abort(engine *e, const char *reason);

#endif

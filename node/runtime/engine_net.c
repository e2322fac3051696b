/* engine_net.c — a pipeline stage's links (engine_internal.h): the stage
 * and its buffers opened, its peers' connections with their HELLO keys, the
 * messages of a step awaited (others that come first wait in a stash) and
 * sent, and the abort that tells the peers why this stage stops. The step
 * itself: engine.c. */
#include "engine_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *type_name(mesh_msg_type t)
{
    static const char *const names[] = {"?", "hello", "activations", "gradients", "norm",
                                        "tied gradient", "commit", "abort"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* A "done": the COMMIT with which the first stage ends the run. */
static bool is_done(const mesh_msg *m)
{
    return m->type == MESH_MSG_COMMIT && (m->flags & MESH_COMMIT_DONE);
}

/* (engine_internal.h) A "done" of the current step: the first stage ended
 * the run at this boundary. */
int engine_await_from(engine *e, mesh_msg_type type, int micro, int flags_total, mesh_msg *out,
                      mesh_frame **frame, int *from, char *err, size_t errlen)
{
    bool want_done = type == MESH_MSG_COMMIT && flags_total == MESH_COMMIT_DONE;
    if (type == MESH_MSG_COMMIT) flags_total = -1;
    for (int i = 0; i < e->nstash; i++) {
        mesh_msg *x = &e->stash[i].msg;
        if (x->type == type && (micro < 0 || x->micro == micro) && x->step == e->step &&
            is_done(x) == want_done &&
            (flags_total < 0 || (int)(x->flags & 1) == flags_total)) {
            *out = *x;
            *frame = e->stash[i].frame;
            *from = e->stash[i].peer;
            e->stash[i] = e->stash[--e->nstash];
            return 0;
        }
    }
    for (;;) {
        int peer;
        mesh_msg msg;
        mesh_frame *f;
        char why[512];
        if (mesh_net_recv(e->net, &peer, &msg, &f, e->cl->timeout_ms, why, sizeof why)) {
            /* a peer that has finished the run may close before we do */
            if (peer >= 0 && peer < 8 && e->peer_done[peer]) continue;
            snprintf(err, errlen, "step %ld, waiting for %s%s: %s", e->step + 1, type_name(type),
                     micro >= 0 ? " of a micro-batch" : "", why);
            return -1;
        }
        if (msg.type == MESH_MSG_ABORT) {
            snprintf(err, errlen, "node %s aborted the run: %.300s", mesh_net_peer_name(e->net, peer),
                     msg.text);
            mesh_frame_free(f);
            return -1;
        }
        if (msg.type == type && (micro < 0 || msg.micro == micro) && msg.step == e->step &&
            is_done(&msg) == want_done &&
            (flags_total < 0 || (int)(msg.flags & 1) == flags_total)) {
            *out = msg;
            *frame = f;
            *from = peer;
            return 0;
        }
        if (is_done(&msg) && !want_done && msg.step == e->step) {
            /* The first stage ended the run at the boundary before this
             * step (a "done" of step + 1 is the normal end: it waits). */
            if (peer >= 0 && peer < 8) e->peer_done[peer] = true;
            e->done_at = e->step;
            mesh_frame_free(f);
            return 1;
        }
        /* a faster neighbour may already be one step ahead (or done) */
        if ((msg.step != e->step && msg.step != e->step + 1) || e->nstash == STASH_MAX) {
            snprintf(err, errlen, "node %s sent %s of step %lld during step %ld",
                     mesh_net_peer_name(e->net, peer), type_name(msg.type), (long long)msg.step + 1,
                     e->step + 1);
            mesh_frame_free(f);
            return -1;
        }
        e->stash[e->nstash++] = (pending){msg, f, peer};
    }
}

int engine_await(engine *e, mesh_msg_type type, int micro, int flags_total, mesh_msg *out,
                 mesh_frame **frame, char *err, size_t errlen)
{
    int from;
    return engine_await_from(e, type, micro, flags_total, out, frame, &from, err, errlen);
}

/* A received tensor of rows*C elements into the aligned input buffer. */
int engine_take_tensor(engine *e, const mesh_msg *msg, char *err, size_t errlen)
{
    size_t n = (size_t)e->rows * e->cfg->hidden_size;
    size_t want = n * mesh_dtype_size(msg->dtype);
    if ((msg->dtype != MESH_F32 && msg->dtype != MESH_BF16) || msg->nbytes != want) {
        snprintf(err, errlen, "step %ld: a %s tensor of %zu bytes, expected %zu (%zu values)",
                 e->step + 1, type_name(msg->type), msg->nbytes, want, n);
        return -1;
    }
    if (msg->dtype == MESH_F32) {
        memcpy(e->inbuf, msg->data, want);
    } else {
        kernels_bf16_to_f32_n(e->inbuf, msg->data, n);
    }
    return 0;
}

int engine_send_tensor(engine *e, int peer, mesh_msg_type type, int micro, const float *x,
                       uint16_t *wire, const int32_t *labels, int64_t kept, char *err,
                       size_t errlen)
{
    size_t n = (size_t)e->rows * e->cfg->hidden_size;
    mesh_msg m = {0};
    m.type = type;
    m.run_id = e->run_id;
    m.step = e->step;
    m.micro = micro;
    m.stage = e->self;
    m.dtype = e->cl->wire;
    m.ndim = 3;
    m.shape[0] = e->job->micro_batch;
    m.shape[1] = e->job->seq_len;
    m.shape[2] = e->cfg->hidden_size;
    if (e->cl->wire == MESH_BF16) {
        kernels_f32_to_bf16_n(wire, x, n);
        m.data = wire;
        m.nbytes = n * 2;
    } else {
        m.data = x;
        m.nbytes = n * 4;
    }
    if (labels) {
        m.labels = labels;
        m.nlabels = (size_t)e->rows;
        m.kept = kept;
    }
    return mesh_net_send(e->net, peer, &m, err, errlen);
}

int engine_send_small(engine *e, int peer, mesh_msg_type type, double value, uint32_t flags,
                      char *err, size_t errlen)
{
    mesh_msg m = {0};
    m.type = type;
    m.run_id = e->run_id;
    m.step = e->step;
    m.stage = e->self;
    m.value = value;
    m.flags = flags;
    return mesh_net_send(e->net, peer, &m, err, errlen);
}

/* Tells every peer why this node stops, so they stop with the reason. */
void engine_abort(engine *e, const char *reason)
{
    int peers[3] = {e->prev, e->next, e->tied};
    for (int i = 0; i < 3; i++) {
        if (peers[i] < 0 || (i == 2 && (peers[2] == e->prev || peers[2] == e->next))) continue;
        mesh_msg m = {0};
        char ignore[256];
        m.type = MESH_MSG_ABORT;
        m.run_id = e->run_id;
        snprintf(m.text, sizeof m.text, "%.50s: %.200s", e->cl->nodes[e->self].name, reason);
        if (mesh_net_send(e->net, peers[i], &m, ignore, sizeof ignore) == 0)
            mesh_net_flush(e->net, peers[i], 2000, ignore, sizeof ignore);
    }
}

/* The HELLO keys a pool gives its stages: SHARDNODE_HELLO_KEYS names a JSON
 * file {"NAME": "64 hex digits", ...} (the daemon writes it, 0600, one key
 * per other stage of the plan). Unset: no keys (a cluster file run). */
static int hello_keys(json_t **out, char *err, size_t errlen)
{
    *out = NULL;
    const char *path = getenv("SHARDNODE_HELLO_KEYS");
    if (!path || !path[0]) return 0;
    json_error_t je;
    *out = json_load_file(path, 0, &je);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        snprintf(err, errlen, "%s (SHARDNODE_HELLO_KEYS): %s", path,
                 je.text[0] ? je.text : "not a JSON object");
        return -1;
    }
    return 0;
}

/* NAME's HELLO key from keys into buf (*key NULL without keys). */
static int hello_key(json_t *keys, const char *name, uint8_t buf[MESH_HELLO_KEY_LEN],
                     const uint8_t **key, char *err, size_t errlen)
{
    *key = NULL;
    if (!keys) return 0;
    const char *hex = json_string_value(json_object_get(keys, name));
    if (!hex || node_hex_decode(hex, buf, MESH_HELLO_KEY_LEN) != 0) {
        snprintf(err, errlen, "SHARDNODE_HELLO_KEYS: no key of %d bytes for peer %s",
                 MESH_HELLO_KEY_LEN, name);
        return -1;
    }
    *key = buf;
    return 0;
}

int engine_open(engine *e, char *err, size_t errlen)
{
    const cluster_spec *cl = e->cl;
    const cluster_node *me = &cl->nodes[e->self];
    e->p = cl->nnodes;
    e->m = e->job->batch / e->job->micro_batch;
    e->rows = e->job->micro_batch * e->job->seq_len;
    sched_op probe[2 * 1024];
    if (e->m > 1024) {
        snprintf(err, errlen, "%d micro-batches per step; at most 1024", e->m);
        return -1;
    }
    int n = sched_build(cl->policy, e->p, e->self, e->m, probe);
    e->nslots = sched_max_in_flight(probe, n);
    if (stage_create_on(&e->st, e->cfg, me->begin, me->end, e->self == 0, e->self == e->p - 1,
                        e->job->micro_batch, e->job->seq_len, e->nslots, job_lora(e->job), e->dev,
                        err, errlen))
        return -1;
    if (e->job->bf16 && kdev_set_precision(stage_device(e->st), 1) != 0)
        printf("train: note: %s has no bf16 matrix products: the job's \"precision\": "
               "\"bf16\" computes in fp32 here\n", kdev_name(stage_device(e->st)));
    size_t act = (size_t)e->rows * e->cfg->hidden_size;
    e->ids = malloc((size_t)e->m * e->rows * sizeof *e->ids);
    e->labels = malloc((size_t)e->m * e->rows * sizeof *e->labels);
    e->inbuf = malloc(act * sizeof *e->inbuf);
    e->wirebuf = malloc((size_t)e->nslots * act * sizeof *e->wirebuf);
    e->gradwire = malloc(act * sizeof *e->gradwire);
    if (!e->ids || !e->labels || !e->inbuf || !e->wirebuf || !e->gradwire) {
        snprintf(err, errlen, "out of memory for the stage's buffers");
        return -1;
    }
    char run[MESH_TEXT_MAX];
    snprintf(run, sizeof run, "%s", *cl->run ? cl->run : e->job->path);
    e->run_id = mesh_run_id(run);
    /* Listens on this node's address only; connects from it, so the peer
     * can check where the connection comes from. */
    mesh_net_config nc = {me->name, run, me->host, me->port, cl->timeout_ms, 0, 0, me->host,
                          true};
    if (mesh_net_start(&e->net, &nc, err, errlen)) return -1;
    /* What each peer may send, at most: the previous stage activations and
     * their labels, the next one gradients, the other end of a tied
     * embedding its gradient, all of them small messages; a connection
     * claiming a peer's name from another address than the cluster's is
     * dropped and the peer still awaited. */
    size_t tensor = act * mesh_dtype_size(cl->wire);
    size_t from_prev = MESH_HEAD_MAX + tensor + (size_t)e->rows * sizeof(int32_t);
    size_t from_next = MESH_HEAD_MAX + tensor;
    size_t tied_bytes = MESH_HEAD_MAX + (size_t)e->cfg->vocab_size * e->cfg->hidden_size * 4;
    bool tied = e->cfg->tie_word_embeddings && e->p > 1;
    /* stage s connects to s + 1 (and the first to the last for a tied
     * head); the other side waits for the connection */
    e->prev = e->next = e->tied = -1;
    const cluster_node *pn = e->self > 0 ? &cl->nodes[e->self - 1] : NULL;
    const cluster_node *nn = e->self < e->p - 1 ? &cl->nodes[e->self + 1] : NULL;
    bool pn_tied = tied && e->p == 2 && e->self == 1; /* two stages: the tied peer is the other */
    bool nn_tied = tied && e->p == 2 && e->self == 0;
    /* in a pool, HELLOs both ways also carry a MAC under the pair's key */
    json_t *keys;
    if (hello_keys(&keys, err, errlen)) return -1;
    uint8_t kbuf[3][MESH_HELLO_KEY_LEN];
    const uint8_t *kp = NULL, *kn = NULL, *kt = NULL;
    const cluster_node *tn = !tied || e->p == 2 ? NULL
                             : e->self == 0       ? &cl->nodes[e->p - 1]
                             : e->self == e->p - 1 ? &cl->nodes[0]
                                                  : NULL;
    int rc = (pn && hello_key(keys, pn->name, kbuf[0], &kp, err, errlen)) ||
             (nn && hello_key(keys, nn->name, kbuf[1], &kn, err, errlen)) ||
             (tn && hello_key(keys, tn->name, kbuf[2], &kt, err, errlen));
    json_decref(keys);
    if (rc) return -1;
    mesh_net_peer_opts po = {pn ? pn->host : NULL,
                             pn_tied && tied_bytes > from_prev ? tied_bytes : from_prev, kp};
    mesh_net_peer_opts no = {NULL, nn_tied && tied_bytes > from_next ? tied_bytes : from_next, kn};
    if (pn && (e->prev = mesh_net_add_peer_opts(e->net, pn->name, NULL, 0, &po, err, errlen)) < 0)
        return -1;
    if (nn &&
        (e->next = mesh_net_add_peer_opts(e->net, nn->name, nn->host, nn->port, &no, err, errlen)) < 0)
        return -1;
    if (tied) {
        if (e->p == 2) {
            e->tied = e->self == 0 ? e->next : e->prev;
        } else if (e->self == 0) {
            mesh_net_peer_opts lo = {NULL, tied_bytes, kt};
            if ((e->tied = mesh_net_add_peer_opts(e->net, tn->name, tn->host, tn->port, &lo, err,
                                                  errlen)) < 0)
                return -1;
        } else if (e->self == e->p - 1) {
            mesh_net_peer_opts fo = {tn->host, tied_bytes, kt};
            if ((e->tied = mesh_net_add_peer_opts(e->net, tn->name, NULL, 0, &fo, err, errlen)) < 0)
                return -1;
        }
    }
    /* every peer declared: a HELLO is judged against them all (one that
     * came sooner waited in the listen queue) */
    mesh_net_accept(e->net);
    return mesh_net_wait_connected(e->net, cl->timeout_ms, err, errlen);
}

void engine_close(engine *e)
{
    for (int i = 0; i < e->nstash; i++) mesh_frame_free(e->stash[i].frame);
    mesh_net_stop(e->net);
    stage_free(e->st);
    free(e->ids);
    free(e->labels);
    free(e->inbuf);
    free(e->wirebuf);
    free(e->gradwire);
}

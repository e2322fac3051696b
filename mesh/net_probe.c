/* net_probe.c — PROBE, the link measurement (mesh_net_probe): the compute
 * thread sends payloads of the sizes asked for and times each echo, taking
 * the replies out of the receive queue without disturbing other messages;
 * the loop thread answers a peer's PROBE with the same bytes, by reference,
 * before the compute thread ever sees it. See net_internal.h for who owns
 * what. */
#include "net_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Waits for the reply to probe seq from p and takes it out of the receive
 * queue, leaving every other message where it is. Older replies of p
 * (probes that gave up) are dropped. A loss of p is left in the queue for
 * mesh_net_recv to report too. */
static int probe_wait(mesh_net *n, struct net_peer *p, int64_t seq, size_t size,
                      struct mesh_frame **out, char *err, size_t errlen)
{
    int64_t deadline = net_deadline_after(n->timeout_ms);
    struct mesh_frame *stale = NULL;
    bool resume = false;
    int rc = -1;
    *out = NULL;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        bool lost = false;
        for (struct mesh_frame *prev = NULL, *f = n->rq, *next; f && !*out; f = next) {
            next = f->next;
            if (f->peer != p->index) {
                prev = f;
                continue;
            }
            if (f->lost) {
                lost = true;
                break;
            }
            if (f->msg.type != MESH_MSG_PROBE || !(f->msg.flags & MESH_PROBE_REPLY)) {
                prev = f;
                continue;
            }
            resume |= net_rq_unlink_locked(n, prev, f);
            if (f->msg.step == seq) {
                *out = f;
            } else {
                f->next = stale;
                stale = f;
            }
        }
        if (*out) {
            rc = 0;
            break;
        }
        if (lost || p->state == NET_PEER_DOWN) {
            mesh_errf(err, errlen, "probe of %zu bytes: %s", size, p->err);
            break;
        }
        if (n->stopping) {
            mesh_errf(err, errlen, "probe of %zu bytes to peer %s: the network is stopping", size,
                    p->name);
            break;
        }
        if (!net_wait_until(&n->recv_cond, &n->mu, deadline)) {
            mesh_errf(err, errlen, "probe of %zu bytes: no reply from peer %s (%s) within %d ms",
                    size, p->name, p->addr, n->timeout_ms);
            break;
        }
    }
    pthread_mutex_unlock(&n->mu);
    if (resume)
        net_wake_loop(n);
    while (stale) {
        struct mesh_frame *next = stale->next;
        mesh_frame_free(stale);
        stale = next;
    }
    return rc;
}

int mesh_net_probe(mesh_net *n, int peer, const size_t *sizes, int nsizes, int rounds,
                   int64_t *rtt_ns, char *err, size_t errlen)
{
    pthread_mutex_lock(&n->mu);
    struct net_peer *p = net_peer_at(n, peer, err, errlen);
    pthread_mutex_unlock(&n->mu);
    if (!p)
        return -1;
    if (!sizes || !rtt_ns || nsizes < 1 || rounds < 1) {
        mesh_errf(err, errlen, "probe of peer %s: needs at least one size and one round", p->name);
        return -1;
    }
    size_t max = 0;
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] > MESH_PROBE_MAX) {
            mesh_errf(err, errlen, "probe of peer %s: %zu bytes is over the limit of %zu", p->name,
                    sizes[i], MESH_PROBE_MAX);
            return -1;
        }
        if (sizes[i] > max)
            max = sizes[i];
    }
    uint8_t *buf = max ? malloc(max) : NULL;
    if (max && !buf) {
        mesh_errf(err, errlen, "probe of peer %s: out of memory for %zu bytes", p->name, max);
        return -1;
    }
    /* Not all zeros, so an echo of other bytes is noticed. */
    for (size_t i = 0; i < max; i++)
        buf[i] = (uint8_t)(i * 131u + 7u + (i >> 12));

    int rc = 0;
    for (int s = 0; s < nsizes && rc == 0; s++) {
        for (int r = 0; r < rounds && rc == 0; r++) {
            pthread_mutex_lock(&n->mu);
            int64_t seq = ++n->probe_seq;
            pthread_mutex_unlock(&n->mu);
            mesh_msg m;
            memset(&m, 0, sizeof m);
            m.type = MESH_MSG_PROBE;
            m.step = seq;
            m.data = buf;
            m.nbytes = sizes[s];
            char e[NET_ERR_MAX];
            struct mesh_frame *f = NULL;
            int64_t t0 = net_now_ns();
            if (mesh_net_send(n, peer, &m, e, sizeof e) != 0) {
                mesh_errf(err, errlen, "probe of %zu bytes: %s", sizes[s], e);
                rc = -1;
                break;
            }
            if (probe_wait(n, p, seq, sizes[s], &f, err, errlen) != 0) {
                rc = -1;
                break;
            }
            int64_t t1 = net_now_ns();
            if (f->msg.nbytes != sizes[s] ||
                (sizes[s] && memcmp(f->msg.data, buf, sizes[s]) != 0)) {
                mesh_errf(err, errlen, "probe of %zu bytes: peer %s (%s) echoed %s", sizes[s],
                        p->name, p->addr,
                        f->msg.nbytes != sizes[s] ? "another number of bytes" : "other bytes");
                rc = -1;
            }
            mesh_frame_free(f);
            rtt_ns[(size_t)s * (size_t)rounds + (size_t)r] = t1 > t0 ? t1 - t0 : 1;
        }
    }
    /* buf is referenced until the loop let go of it. */
    char e[NET_ERR_MAX];
    if (mesh_net_flush(n, peer, n->timeout_ms, e, sizeof e) != 0 && rc == 0) {
        mesh_errf(err, errlen, "probe: %s", e);
        rc = -1;
    }
    pthread_mutex_lock(&n->mu);
    bool released = p->refs == 0;
    pthread_mutex_unlock(&n->mu);
    /* Still referenced only when the flush timed out with the peer stuck:
     * leaking the buffer is safer than freeing memory libevent may read. */
    if (released)
        free(buf);
    return rc;
}

/* A PROBE echo the output buffer references: the received payload, freed
 * once its bytes are written (or the connection is freed). */
struct probe_echo {
    struct net_peer *peer;
    uint8_t *payload;
};

static void probe_echo_done(const void *data, size_t len, void *extra)
{
    (void)data;
    (void)len;
    struct probe_echo *e = extra;
    struct mesh_net *n = e->peer->net;
    pthread_mutex_lock(&n->mu);
    e->peer->probe_replies--;
    pthread_mutex_unlock(&n->mu);
    net_payload_free(e->payload);
    free(e);
}

/* A PROBE without the reply bit: answered here, on the loop thread, with
 * the same bytes (by reference, no copy) and the reply bit set; the
 * compute thread never sees it. The reply's bytes count in peer->queued
 * like any message's, since conn_out_cb counts every byte written. Takes
 * f. Returns -1 when the connection was closed. */
int net_conn_probe_echo(struct net_conn *c, struct mesh_frame *f)
{
    struct mesh_net *n = c->net;
    struct net_peer *p = c->peer;
    pthread_mutex_lock(&n->mu);
    bool busy = p->probe_replies > 0;
    pthread_mutex_unlock(&n->mu);
    if (busy) {
        mesh_frame_free(f);
        net_conn_close(c, "sent a PROBE before taking the reply to its last one; disconnecting");
        return -1;
    }
    mesh_msg r = f->msg;
    r.flags |= MESH_PROBE_REPLY;
    r.run_id = n->run_id;
    uint8_t *head = NULL;
    size_t head_len = 0;
    char e[256];
    struct probe_echo *pe = r.nbytes ? calloc(1, sizeof *pe) : NULL;
    if (r.nbytes && !pe)
        snprintf(e, sizeof e, "out of memory");
    if ((r.nbytes && !pe) || mesh_encode_head(&r, &head, &head_len, e, sizeof e) != 0) {
        free(pe);
        mesh_frame_free(f);
        net_conn_close(c, "cannot answer a PROBE: %s; disconnecting", e);
        return -1;
    }
    struct evbuffer *out = bufferevent_get_output(c->bev);
    pthread_mutex_lock(&n->mu);
    p->queued += head_len + r.nbytes;
    if (pe)
        p->probe_replies++;
    pthread_mutex_unlock(&n->mu);
    /* The head is small: copied. The payload now belongs to the echo. */
    int rc = evbuffer_add(out, head, head_len);
    free(head);
    if (pe) {
        pe->peer = p;
        pe->payload = f->payload;
        f->payload = NULL;
        if (rc != 0 ||
            evbuffer_add_reference(out, r.data, r.nbytes, probe_echo_done, pe) != 0) {
            probe_echo_done(NULL, 0, pe);
            rc = -1;
        }
    }
    mesh_frame_free(f);
    if (rc != 0) {
        net_conn_close(c, "cannot answer a PROBE: out of memory; disconnecting");
        return -1;
    }
    return 0;
}

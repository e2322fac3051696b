/* punch.c — when two members behind NAT try to punch through to each other
 * (docs/PROTOCOL.md, "Hole punching"), as a pure state machine on the
 * caller's monotonic clock: member states in (punch_update, from the
 * daemon's WireGuard polls and the view), PUNCHes accepted by gossip in
 * (punch_requested), requests and attempts out through hooks. No sockets,
 * no WireGuard, no clock of its own, so a test drives it with a simulated
 * clock and a simulated pair of NATs.
 *
 * A pair punches when this node and the peer both say "nat" in their
 * records (neither is reachable unasked), the peer is live, has endpoints
 * and no WireGuard handshake: after grace_ms (a handshake may come by
 * itself), a round asks the peer through up to `relays` members this node
 * reaches directly (public ones first) to punch too, and sends WireGuard
 * handshakes to one of the peer's endpoints (they take turns); the next
 * round comes retry_ms later, doubling up to retry_max_ms, until a
 * handshake. A PUNCH from the peer is answered with an attempt at once
 * (at most one per answer_ms), so both sides send at about the same time,
 * and brings this side's first round forward when it is still in its
 * grace. */
#include "mesh.h"
#include "mesh_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t key[GOSSIP_KEY_LEN];
    char name[MESH_NAME_MAX];
    bool live, direct, nat;
    int nendpoints;
    char endpoints[GOSSIP_MAX_ENDPOINTS][MESH_WG_ENDPOINT_MAX];
    int64_t since_ms;        /* when it last lacked a handshake; -1: it has one / not live */
    int64_t punched_ms;      /* handshake after punching; -1: not (yet) */
    int64_t took_ms;         /* since_ms to punched_ms; -1: not punched */
    int64_t next_ms;         /* next round; -1: none */
    int64_t last_attempt_ms; /* -1: none */
    int64_t backoff_ms;
    int rounds, attempts, requests_in, cand;
} pair;

struct punch {
    punch_timing t;
    punch_hooks h;
    bool self_nat;
    pair *p;
    size_t n, cap;
    size_t relay_rr; /* rotates the relays asked */
};

void punch_timing_default(punch_timing *t)
{
    t->grace_ms = 1000;
    t->retry_ms = 5000;
    t->retry_max_ms = 60000;
    t->pending_ms = 20000;
    t->answer_ms = 1000;
    t->relays = 2;
}

const char *punch_link_name(punch_link l)
{
    switch (l) {
    case PUNCH_LINK_NONE: return "none";
    case PUNCH_LINK_DIRECT: return "direct";
    case PUNCH_LINK_PUNCHED: return "punched";
    case PUNCH_LINK_PENDING: return "pending";
    case PUNCH_LINK_UNREACHABLE: return "unreachable";
    }
    return "?";
}

static void plog(punch *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void plog(punch *p, const char *fmt, ...)
{
    if (!p->h.log) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    p->h.log(p->h.ctx, line);
}

int punch_create(punch **out, const punch_timing *t, const punch_hooks *h, bool self_nat,
                 char *err, size_t errlen)
{
    *out = NULL;
    if (!h || !h->request || !h->attempt)
        return mesh_errf(err, errlen, "punch: the request and attempt hooks are required");
    punch *p = calloc(1, sizeof *p);
    if (!p) return mesh_errf(err, errlen, "punch: out of memory");
    punch_timing_default(&p->t);
    if (t) {
        if (t->grace_ms > 0) p->t.grace_ms = t->grace_ms;
        if (t->retry_ms > 0) p->t.retry_ms = t->retry_ms;
        if (t->retry_max_ms > 0) p->t.retry_max_ms = t->retry_max_ms;
        if (t->pending_ms > 0) p->t.pending_ms = t->pending_ms;
        if (t->answer_ms > 0) p->t.answer_ms = t->answer_ms;
        if (t->relays > 0) p->t.relays = t->relays;
    }
    if (p->t.retry_max_ms < p->t.retry_ms) p->t.retry_max_ms = p->t.retry_ms;
    p->h = *h;
    p->self_nat = self_nat;
    *out = p;
    return 0;
}

void punch_destroy(punch *p)
{
    if (!p) return;
    free(p->p);
    free(p);
}

static pair *find(const punch *p, const uint8_t key[GOSSIP_KEY_LEN])
{
    for (size_t i = 0; i < p->n; i++)
        if (memcmp(p->p[i].key, key, GOSSIP_KEY_LEN) == 0) return &p->p[i];
    return NULL;
}

/* Whether this pair punches at all: both behind NAT, endpoints to try. */
static bool eligible(const punch *p, const pair *q)
{
    return p->self_nat && q->nat && q->live && !q->direct && q->nendpoints > 0;
}

void punch_update(punch *p, const punch_peer *peer, int64_t now_ms)
{
    pair *q = find(p, peer->key);
    if (!q) {
        if (p->n == p->cap) {
            size_t cap = p->cap ? 2 * p->cap : 16;
            pair *np = realloc(p->p, cap * sizeof *np);
            if (!np) return; /* the next poll tries again */
            p->p = np;
            p->cap = cap;
        }
        q = &p->p[p->n++];
        memset(q, 0, sizeof *q);
        memcpy(q->key, peer->key, GOSSIP_KEY_LEN);
        q->since_ms = q->punched_ms = q->took_ms = q->next_ms = q->last_attempt_ms = -1;
    }
    snprintf(q->name, sizeof q->name, "%s", peer->name ? peer->name : "?");
    bool had = q->direct && q->live;
    q->live = peer->live;
    q->direct = peer->direct;
    q->nat = peer->nat;
    q->nendpoints = peer->nendpoints < 0 ? 0
                    : peer->nendpoints > GOSSIP_MAX_ENDPOINTS ? GOSSIP_MAX_ENDPOINTS
                                                              : peer->nendpoints;
    for (int i = 0; i < q->nendpoints; i++)
        snprintf(q->endpoints[i], sizeof q->endpoints[i], "%s", peer->endpoints[i]);
    if (!q->live) {
        q->since_ms = q->next_ms = -1;
        return;
    }
    if (q->direct) {
        if (q->since_ms >= 0 && (q->attempts > 0 || q->requests_in > 0)) {
            q->punched_ms = now_ms;
            q->took_ms = now_ms - q->since_ms;
            plog(p, "punch: %s: a WireGuard handshake after punching (%d rounds, %d attempts, "
                 "%d requests from it; %.1f s without one)", q->name, q->rounds, q->attempts,
                 q->requests_in, (double)(now_ms - q->since_ms) / 1e3);
        }
        q->since_ms = q->next_ms = -1;
        return;
    }
    if (q->since_ms < 0) {
        /* A new pair, or one that lost its handshake: a new session. */
        q->since_ms = now_ms;
        q->rounds = q->attempts = q->requests_in = 0;
        q->punched_ms = q->took_ms = -1;
        q->backoff_ms = p->t.retry_ms;
        q->next_ms = -1;
        if (had) plog(p, "punch: %s: no WireGuard handshake any more", q->name);
    }
    if (eligible(p, q) && q->next_ms < 0) {
        int64_t at = q->since_ms + p->t.grace_ms;
        q->next_ms = at > now_ms ? at : now_ms;
    } else if (!eligible(p, q)) {
        q->next_ms = -1;
    }
}

void punch_forget(punch *p, const uint8_t key[GOSSIP_KEY_LEN])
{
    pair *q = find(p, key);
    if (!q) return;
    *q = p->p[--p->n];
}

static void attempt(punch *p, pair *q, int64_t now_ms)
{
    const char *ep = q->endpoints[q->cand % q->nendpoints];
    q->cand = (q->cand + 1) % q->nendpoints;
    q->attempts++;
    q->last_attempt_ms = now_ms;
    p->h.attempt(p->h.ctx, q->key, ep);
}

/* Up to t.relays live members this node reaches directly, not q: public
 * ones (no "nat": everyone reaches them) first, rotating between rounds. */
static int pick_relays(punch *p, const pair *q, const pair **out)
{
    int k = 0;
    for (int pass = 0; pass < 2 && k < p->t.relays; pass++)
        for (size_t j = 0; j < p->n && k < p->t.relays; j++) {
            const pair *r = &p->p[(p->relay_rr + j) % p->n];
            if (r == q || !r->live || !r->direct || r->nat != (pass == 1)) continue;
            out[k++] = r;
        }
    p->relay_rr++;
    return k;
}

static void round_of(punch *p, pair *q, int64_t now_ms)
{
    const pair *relays[16];
    if (p->t.relays > 16) p->t.relays = 16;
    int k = pick_relays(p, q, relays);
    for (int i = 0; i < k; i++) p->h.request(p->h.ctx, q->key, relays[i]->key);
    q->rounds++;
    const char *ep = q->endpoints[q->cand % q->nendpoints];
    attempt(p, q, now_ms);
    if (q->rounds <= 3 || q->rounds % 10 == 0)
        plog(p, "punch: %s: round %d: handshakes to %s, %s%s%s%s (next in %.0f s)", q->name,
             q->rounds, ep, k ? "asked it through " : "no member to ask it through",
             k ? relays[0]->name : "", k > 1 ? " and " : "", k > 1 ? relays[1]->name : "",
             (double)q->backoff_ms / 1e3);
    q->next_ms = now_ms + q->backoff_ms;
    q->backoff_ms = q->backoff_ms * 2 > p->t.retry_max_ms ? p->t.retry_max_ms : q->backoff_ms * 2;
}

void punch_tick(punch *p, int64_t now_ms)
{
    for (size_t i = 0; i < p->n; i++) {
        pair *q = &p->p[i];
        if (q->next_ms < 0 || now_ms < q->next_ms) continue;
        if (!eligible(p, q)) {
            q->next_ms = -1;
            continue;
        }
        round_of(p, q, now_ms);
    }
}

void punch_requested(punch *p, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms)
{
    pair *q = find(p, key);
    if (!q || !q->live || q->direct) return;
    q->requests_in++;
    if (q->nendpoints == 0) {
        plog(p, "punch: %s asks for handshakes, but its record has no endpoint yet", q->name);
        return;
    }
    if (q->last_attempt_ms < 0 || now_ms - q->last_attempt_ms >= p->t.answer_ms)
        attempt(p, q, now_ms);
    /* Still in its grace: this side's first round comes now, with the
     * peer's. Later rounds keep their backoff (pulling them in on every
     * request would have two sides keep each other at retry_ms forever). */
    if (eligible(p, q) && q->rounds == 0 && q->next_ms > now_ms) q->next_ms = now_ms;
}

void punch_kick(punch *p, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms)
{
    pair *q = find(p, key);
    if (q && eligible(p, q) && (q->next_ms < 0 || q->next_ms > now_ms)) q->next_ms = now_ms;
}

punch_link punch_link_of(const punch *p, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms)
{
    const pair *q = find(p, key);
    if (!q || !q->live) return PUNCH_LINK_NONE;
    if (q->direct) return p->self_nat && q->nat ? PUNCH_LINK_PUNCHED : PUNCH_LINK_DIRECT;
    if (q->since_ms >= 0 && now_ms - q->since_ms < p->t.pending_ms) return PUNCH_LINK_PENDING;
    return PUNCH_LINK_UNREACHABLE;
}

int punch_stats_of(const punch *p, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms,
                   punch_stats *out)
{
    const pair *q = find(p, key);
    memset(out, 0, sizeof *out);
    if (!q) return -1;
    out->link = punch_link_of(p, key, now_ms);
    out->rounds = q->rounds;
    out->attempts = q->attempts;
    out->requests_in = q->requests_in;
    out->since_ms = q->since_ms;
    out->punched_ms = q->punched_ms;
    out->took_ms = q->took_ms;
    out->next_ms = q->next_ms;
    return 0;
}

/* relay.c — which member relays a pair that cannot meet directly, and when
 * (docs/PROTOCOL.md, "Relays"): a pure state machine on the caller's
 * monotonic clock, like punch.c. Member states in (relay_update, from the
 * daemon's WireGuard polls, the view and punch.c's verdicts), the relay's
 * answers in (relay_offered), requests and WireGuard endpoint changes out
 * through hooks. No sockets, no WireGuard, no clock of its own, so
 * tests/unit/test_relay.c drives whole pairs on a simulated clock.
 *
 * A pair that punching gave up on ("unreachable") is relayed. Only the side
 * with the smaller WireGuard key asks, so both sides end on the same relay:
 * it asks the live member with the least measured round trip among those
 * it reaches directly that are not behind NAT, skipping for skip_ms one
 * that did not answer within grant_ms. The relay answers both sides with a
 * UDP port each (relay_offered): the other side takes the offer only from a
 * member it reaches directly and that is not behind NAT itself. The asking
 * side repeats its request every refresh_ms while relayed (the relay's
 * lease; a lost offer is sent again). A relay that dies, or that either
 * side stops reaching directly, is dropped (unuse) and skipped, and the
 * asking side asks the next one at once. Every handback_ms a relayed pair
 * tries a direct path for trial_ms (unuse, then punching's own attempts);
 * a direct handshake in that time ends relaying, else the relay is used
 * again. */
#include "mesh.h"
#include "mesh_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RELAY_SKIPS 16

typedef struct {
    uint8_t key[GOSSIP_KEY_LEN];
    char name[MESH_NAME_MAX];
    bool live, nat, direct, unreachable;
    int64_t rtt_ms;
    /* The pair of this node and this member. */
    bool relayed, requested, trial;
    uint8_t via[GOSSIP_KEY_LEN]; /* relayed: the relay; requested: the one asked */
    uint16_t port;
    int64_t asked_ms, since_ms, next_handback_ms, trial_end_ms, next_refresh_ms;
    int requests, switches;
    bool said_none; /* "no member can relay" logged since the last change */
} entry;

typedef struct {
    uint8_t key[GOSSIP_KEY_LEN];
    int64_t until_ms;
} skip;

struct relays {
    relay_timing t;
    relay_hooks h;
    uint8_t self[GOSSIP_KEY_LEN];
    entry *e;
    size_t n, cap;
    skip skips[RELAY_SKIPS];
    size_t skip_rr;
};

void relay_timing_default(relay_timing *t)
{
    t->grant_ms = 4000;
    t->skip_ms = 60000;
    t->handback_ms = 300000;
    t->trial_ms = 8000;
    t->refresh_ms = 15000;
}

static void rlog(relays *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rlog(relays *r, const char *fmt, ...)
{
    if (!r->h.log) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    r->h.log(r->h.ctx, line);
}

int relay_create(relays **out, const relay_timing *t, const relay_hooks *h,
                 const uint8_t self_key[GOSSIP_KEY_LEN], char *err, size_t errlen)
{
    *out = NULL;
    if (!h || !h->request || !h->use || !h->unuse)
        return mesh_errf(err, errlen, "relay: the request, use and unuse hooks are required");
    relays *r = calloc(1, sizeof *r);
    if (!r) return mesh_errf(err, errlen, "relay: out of memory");
    relay_timing_default(&r->t);
    if (t) {
        if (t->grant_ms > 0) r->t.grant_ms = t->grant_ms;
        if (t->skip_ms > 0) r->t.skip_ms = t->skip_ms;
        if (t->handback_ms > 0) r->t.handback_ms = t->handback_ms;
        if (t->trial_ms > 0) r->t.trial_ms = t->trial_ms;
        if (t->refresh_ms > 0) r->t.refresh_ms = t->refresh_ms;
    }
    r->h = *h;
    memcpy(r->self, self_key, GOSSIP_KEY_LEN);
    *out = r;
    return 0;
}

void relay_destroy(relays *r)
{
    if (!r) return;
    free(r->e);
    free(r);
}

static entry *find(const relays *r, const uint8_t key[GOSSIP_KEY_LEN])
{
    for (size_t i = 0; i < r->n; i++)
        if (memcmp(r->e[i].key, key, GOSSIP_KEY_LEN) == 0) return &r->e[i];
    return NULL;
}

static const char *name_of(const relays *r, const uint8_t key[GOSSIP_KEY_LEN])
{
    const entry *e = find(r, key);
    return e ? e->name : "(unknown)";
}

static bool skipped(const relays *r, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms)
{
    for (int i = 0; i < RELAY_SKIPS; i++)
        if (r->skips[i].until_ms > now_ms && memcmp(r->skips[i].key, key, GOSSIP_KEY_LEN) == 0)
            return true;
    return false;
}

static void skip_for(relays *r, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms)
{
    skip *s = &r->skips[r->skip_rr++ % RELAY_SKIPS];
    memcpy(s->key, key, GOSSIP_KEY_LEN);
    s->until_ms = now_ms + r->t.skip_ms;
}

/* Whether e can relay for this node: live, reached directly, not behind NAT. */
static bool can_relay(const entry *e) { return e && e->live && e->direct && !e->nat; }

/* This node asks for the pair (the smaller key of the two). */
static bool asker(const relays *r, const entry *q)
{
    return memcmp(r->self, q->key, GOSSIP_KEY_LEN) < 0;
}

void relay_update(relays *r, const relay_peer *peer, int64_t now_ms)
{
    (void)now_ms;
    entry *q = find(r, peer->key);
    if (!q) {
        if (r->n == r->cap) {
            size_t cap = r->cap ? 2 * r->cap : 16;
            entry *ne = realloc(r->e, cap * sizeof *ne);
            if (!ne) return; /* the next poll tries again */
            r->e = ne;
            r->cap = cap;
        }
        q = &r->e[r->n++];
        memset(q, 0, sizeof *q);
        memcpy(q->key, peer->key, GOSSIP_KEY_LEN);
        q->since_ms = -1;
    }
    snprintf(q->name, sizeof q->name, "%s", peer->name ? peer->name : "?");
    q->live = peer->live;
    q->nat = peer->nat;
    q->direct = peer->direct;
    q->unreachable = peer->unreachable;
    q->rtt_ms = peer->rtt_ms;
}

static void stop(relays *r, entry *q, const char *why)
{
    if (q->relayed) {
        rlog(r, "relay: %s: no longer relayed via %s (%s)", q->name, name_of(r, q->via), why);
        r->h.unuse(r->h.ctx, q->key);
    }
    q->relayed = q->requested = q->trial = false;
    q->since_ms = -1;
}

void relay_forget(relays *r, const uint8_t key[GOSSIP_KEY_LEN])
{
    entry *q = find(r, key);
    if (!q) return;
    stop(r, q, "it left");
    /* Pairs relayed through it lose their relay at the next tick. */
    q->live = false;
    q->direct = false;
}

/* The best member to ask for q: least round trip (unknown counts as worst). */
static entry *pick(relays *r, const entry *q, int64_t now_ms)
{
    entry *best = NULL;
    for (size_t i = 0; i < r->n; i++) {
        entry *c = &r->e[i];
        if (c == q || !can_relay(c) || skipped(r, c->key, now_ms)) continue;
        if (!best) {
            best = c;
            continue;
        }
        int64_t a = c->rtt_ms < 0 ? INT64_MAX : c->rtt_ms;
        int64_t b = best->rtt_ms < 0 ? INT64_MAX : best->rtt_ms;
        if (a < b || (a == b && memcmp(c->key, best->key, GOSSIP_KEY_LEN) < 0)) best = c;
    }
    return best;
}

static void ask(relays *r, entry *q, int64_t now_ms)
{
    entry *v = pick(r, q, now_ms);
    if (!v) {
        if (!q->said_none)
            rlog(r, "relay: %s: unreachable, and no member reached directly outside NAT can "
                 "relay (or all were skipped)", q->name);
        q->said_none = true;
        return;
    }
    q->said_none = false;
    q->requested = true;
    memcpy(q->via, v->key, GOSSIP_KEY_LEN);
    q->asked_ms = now_ms;
    q->requests++;
    if (q->requests <= 3 || q->requests % 10 == 0)
        rlog(r, "relay: %s: unreachable directly; asking %s to relay (rtt %lld ms)", q->name,
             v->name, (long long)v->rtt_ms);
    r->h.request(r->h.ctx, q->key, v->key);
}

static void tick_one(relays *r, entry *q, int64_t now_ms)
{
    if (!q->live) {
        if (q->relayed || q->requested) stop(r, q, "it is not live");
        return;
    }
    if (q->relayed) {
        entry *v = find(r, q->via);
        if (!can_relay(v)) {
            const char *why = !v || !v->live ? "the relay is not live"
                              : !v->direct   ? "no direct link with the relay"
                                             : "the relay is behind NAT";
            skip_for(r, q->via, now_ms);
            stop(r, q, why);
            /* falls through: the asking side asks the next one now */
        } else if (q->trial) {
            if (q->direct) {
                rlog(r, "relay: %s: a direct handshake again; relaying via %s ends", q->name,
                     v->name);
                q->relayed = q->trial = false;
                q->since_ms = -1;
                return;
            }
            if (now_ms >= q->trial_end_ms) {
                q->trial = false;
                q->next_handback_ms = now_ms + r->t.handback_ms;
                r->h.use(r->h.ctx, q->key, q->via, q->port);
            }
            return;
        } else {
            if (now_ms >= q->next_handback_ms) {
                q->trial = true;
                q->trial_end_ms = now_ms + r->t.trial_ms;
                r->h.unuse(r->h.ctx, q->key);
                return;
            }
            if (asker(r, q) && now_ms >= q->next_refresh_ms) {
                q->next_refresh_ms = now_ms + r->t.refresh_ms;
                r->h.request(r->h.ctx, q->key, q->via);
            }
            return;
        }
    }
    if (q->direct || !q->unreachable) {
        q->requested = false;
        q->said_none = false;
        return;
    }
    if (!asker(r, q)) return; /* the other side asks; its relay offers */
    if (q->requested) {
        if (now_ms - q->asked_ms < r->t.grant_ms) return;
        rlog(r, "relay: %s: %s did not answer within %.0f s; skipping it for %.0f s", q->name,
             name_of(r, q->via), (double)r->t.grant_ms / 1e3, (double)r->t.skip_ms / 1e3);
        skip_for(r, q->via, now_ms);
        q->requested = false;
    }
    ask(r, q, now_ms);
}

void relay_tick(relays *r, int64_t now_ms)
{
    for (size_t i = 0; i < r->n; i++) tick_one(r, &r->e[i], now_ms);
}

void relay_offered(relays *r, const uint8_t peer[GOSSIP_KEY_LEN], const uint8_t via[GOSSIP_KEY_LEN],
                   uint16_t port, bool granted, int64_t now_ms)
{
    entry *q = find(r, peer), *v = find(r, via);
    if (!q || !q->live || port == 0) return;
    if (!can_relay(v)) {
        rlog(r, "relay: %s offers to relay for %s, but this node %s", name_of(r, via), q->name,
             !v || !v->live ? "does not hold it live"
             : v->nat       ? "holds it behind NAT"
                            : "has no direct link with it");
        return;
    }
    if (q->direct && !q->trial) return; /* already met (punched since) */
    bool same = q->relayed && memcmp(q->via, via, GOSSIP_KEY_LEN) == 0;
    if (same && q->port == port) return; /* a lease renewed */
    if (granted && !same && !(q->requested && memcmp(q->via, via, GOSSIP_KEY_LEN) == 0))
        return; /* an answer to a request this node no longer makes */
    if (q->relayed && !same) q->switches++;
    q->relayed = true;
    q->requested = q->trial = false;
    memcpy(q->via, via, GOSSIP_KEY_LEN);
    q->port = port;
    if (!same) q->since_ms = now_ms;
    q->next_handback_ms = now_ms + r->t.handback_ms;
    q->next_refresh_ms = now_ms + r->t.refresh_ms;
    rlog(r, "relay: %s: relayed via %s (its port %u, %s)", q->name, v->name, (unsigned)port,
         granted ? "this node asked" : "the peer asked");
    r->h.use(r->h.ctx, q->key, via, port);
}

int relay_stats_of(const relays *r, const uint8_t peer[GOSSIP_KEY_LEN], relay_stats *out)
{
    const entry *q = find(r, peer);
    memset(out, 0, sizeof *out);
    if (!q) return -1;
    out->relayed = q->relayed && !q->trial;
    out->requested = q->requested;
    out->trial = q->trial;
    memcpy(out->via, q->via, GOSSIP_KEY_LEN);
    out->port = q->port;
    out->requests = q->requests;
    out->switches = q->switches;
    out->since_ms = q->relayed ? q->since_ms : -1;
    return 0;
}

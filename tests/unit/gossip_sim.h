/* gossip_sim.h — the simulated world test_gossip.c, test_gossip_trust.c and
 * test_gossip_records.c share. Each node is a gossip instance (mesh/gossip.c)
 * with real keys drawn from a seeded stream (Ed25519 identity, X25519
 * WireGuard key, overlay address from mesh_overlay_address in 10.77.0.0/16,
 * gossip port 7946, one mesh id). A simulated clock advances 50 ms per step
 * and ticks every running node; a simulated overlay carries the datagrams of
 * the send hook to the next step (gossip_receive), with a deterministic loss
 * rate, crashed nodes (nothing to or from them, no ticks), partitions and
 * broken links. The sync hook does the TCP push-pull in memory at once,
 * through the codec (gossip_encode / gossip_decode). Nodes join the way the
 * daemon joins them: the admitting member gossip_admit's the joiner's signed
 * record, and the joiner merges the admitting member's view (JOIN_REPLY).
 * Every function is static, for one test file per binary; unused-function
 * warnings are silenced for this header alone. */
#ifndef SHARDNODE_TEST_GOSSIP_SIM_H
#define SHARDNODE_TEST_GOSSIP_SIM_H

#include "keys.h"
#include "mesh.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"

#define MAXN 8
#define STEP_MS 50
#define PORT GOSSIP_DEFAULT_PORT
#define PREFIX "10.77.0.0/16"
#define T0 ((int64_t)1760000000000) /* Unix ms: the clock only needs to move */

/* The mesh id: keys_mesh_id of the founder's (n0's) identity, set by
 * sim_start (a founder is recognised by it). */
static uint8_t MESH_ID[GOSSIP_MESH_ID_LEN];

/* ------------------------------------------------------------- the world */

typedef struct {
    int idx;
    gossip *g;
    uint8_t wg_priv[KEYS_LEN], wg_pub[KEYS_LEN], id_priv[KEYS_LEN], id_pub[KEYS_LEN];
    char name[MESH_NAME_MAX];
    char addr[GOSSIP_ADDR_MAX];
    gossip_admission adm; /* from the member that admitted it (zero: the founder) */
    bool down;  /* crashed (or gone after leaving): not ticked, nothing to or from it */
    int group;  /* partition: datagrams and syncs only within a group */
    int nlogs;
    char lastlog[512];
} node;

typedef struct {
    int src, dst;
    uint8_t *buf; /* exactly len bytes, so ASan sees a read past the datagram */
    size_t len;
} dgram;

static struct {
    node nd[MAXN];
    int n;
    int64_t now;
    dgram *q;
    size_t nq, capq;
    double loss;  /* 0..1, per datagram */
    uint64_t rng; /* the network's PRNG (loss) */
    long sent, delivered, lost, dropped, syncs;
    bool cut[MAXN][MAXN]; /* [a][b]: the link between a and b is broken (set both ways) */
    long cut_drops;
    char nat_addr[GOSSIP_ADDR_MAX]; /* observe hook: this address is seen at nat_ep */
    const char *nat_ep;
    bool verbose;
    bool allow_unknown; /* sends to an address that is no node's are expected */
    long unknown;
    long encode_failures; /* "cannot encode" log lines */
    long sync_bytes;      /* encoded SYNC payloads carried by push_pull */
    uint64_t keyrng;      /* keys are drawn from this seeded PRNG: no test is flaky */
    bool refusals_ok;     /* push-pulls may refuse records (a collision being healed) */
    int punch_in[MAXN][MAXN]; /* [target][requester]: PUNCHes gossip accepted (punch hook) */
    /* RELAY (relay_open and relay_offer hooks): requests a relay took up,
     * [relay][asker]; offers taken, [node][peer] with the relay, port and
     * whether the node asked; relays that refuse (--no-relay). */
    int relay_open[MAXN][MAXN];
    int offers[MAXN][MAXN], offer_via[MAXN][MAXN], offer_port[MAXN][MAXN];
    bool offer_granted[MAXN][MAXN];
    bool no_relay[MAXN];
    int64_t wall_off;     /* the wall clock (wall_ms hook) is S.now + wall_off: S.now is
                           * the monotonic clock every call gets; scenario 19 steps this */
} S;

/* What every observer saw happen to every subject (changed hook). */
typedef struct {
    int nsuspect, ndead, nleft, nalive; /* transitions into the state */
    int64_t suspect_ms, dead_ms, left_ms, alive_ms; /* the latest of each */
    bool pending;         /* a SUSPECT not resolved yet */
    uint64_t pending_inc; /* ... at this incarnation */
    int refuted;          /* SUSPECT (or DEAD) -> ALIVE with a higher incarnation */
    int flat;             /* ... without the incarnation rising (never right) */
} track;

static track TR[MAXN][MAXN]; /* [observer][subject] */
static long nchanged;

static void reset_tracking(void)
{
    memset(TR, 0, sizeof TR);
}

static double rnd01(void)
{
    /* xorshift64*: deterministic loss */
    S.rng ^= S.rng >> 12;
    S.rng ^= S.rng << 25;
    S.rng ^= S.rng >> 27;
    return (double)((S.rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

static double secs(int64_t ms)
{
    return (double)ms / 1000.0;
}

static int node_by_addr(const char *addr)
{
    for (int i = 0; i < S.n; i++)
        if (strcmp(S.nd[i].addr, addr) == 0)
            return i;
    return -1;
}

static int node_by_key(const uint8_t key[GOSSIP_KEY_LEN])
{
    for (int i = 0; i < S.n; i++)
        if (memcmp(S.nd[i].wg_pub, key, GOSSIP_KEY_LEN) == 0)
            return i;
    return -1;
}

/* ---------------------------------------------------------------- hooks */

static void hook_send(void *ctx, const char *addr, int port, const uint8_t *buf, size_t len)
{
    node *src = ctx;
    CHECK(port == PORT, "%s sent to %s port %d, not %d", src->name, addr, port, PORT);
    CHECK(len > 0 && len <= GOSSIP_UDP_MAX, "%s sent a %zu-byte datagram (at most %d)", src->name,
          len, GOSSIP_UDP_MAX);
    S.sent++;
    int dst = node_by_addr(addr);
    if (len > GOSSIP_MAC_LEN && len <= GOSSIP_UDP_MAX) {
        gossip_msg m;
        char err[256] = "";
        CHECK(gossip_decode(buf, len - GOSSIP_MAC_LEN, &m, err, sizeof err) == 0,
              "%s sent a datagram its peers refuse: %s", src->name, err);
        gossip_msg_free(&m);
        uint8_t key[32];
        if (dst >= 0 && gossip_mac_key(S.nd[dst].wg_priv, src->wg_pub, key, err,
                                       sizeof err) == 0)
            CHECK(gossip_mac_check(key, buf, len), "%s sent %s a datagram whose MAC does not "
                  "verify", src->name, S.nd[dst].name);
    }
    CHECK(dst >= 0 || S.allow_unknown, "%s sent a datagram to %s, no node's address", src->name,
          addr);
    if (dst < 0)
        S.unknown++;
    if (dst < 0 || src->down) {
        S.dropped++;
        return;
    }
    if (S.nq == S.capq) {
        S.capq = S.capq ? 2 * S.capq : 256;
        S.q = realloc(S.q, S.capq * sizeof *S.q);
        if (!S.q) {
            printf("FAIL: out of memory\n");
            exit(1);
        }
    }
    dgram *d = &S.q[S.nq++];
    d->src = src->idx;
    d->dst = dst;
    d->len = len;
    d->buf = malloc(len);
    memcpy(d->buf, buf, len);
}

/* Encodes m as the TCP frame's payload and decodes it back (what the peer
 * reads), from a heap block of exactly the payload's size. With from and to
 * (nodes of the world), the frame carries from's MAC for to
 * (gossip_frame_seal) and to checks it (gossip_frame_open), as the daemon
 * does. */
static int over_tcp_mac(const gossip_msg *m, gossip_msg *out, node *from, node *to);
static int over_tcp(const gossip_msg *m, gossip_msg *out)
{
    return over_tcp_mac(m, out, NULL, NULL);
}

static int over_tcp_mac(const gossip_msg *m, gossip_msg *out, node *from, node *to)
{
    uint8_t *buf = malloc(GOSSIP_TCP_MAX);
    size_t len = 0;
    char err[256] = "";
    int rc = gossip_encode(m, buf, GOSSIP_TCP_MAX - GOSSIP_MAC_LEN, &len, err, sizeof err);
    CHECK(rc == 0, "encode a %d message of %d updates for TCP: %s", (int)m->type, m->nupdates,
          err);
    if (rc == 0 && from && to) {
        CHECK(gossip_frame_seal(from->g, to->addr, buf, len, buf + len) == 0,
              "%s: no member at %s to seal a frame for", from->name, to->addr);
        uint8_t *exact = malloc(len + GOSSIP_MAC_LEN);
        memcpy(exact, buf, len + GOSSIP_MAC_LEN);
        const gossip_member *who = gossip_frame_open(to->g, from->addr, exact,
                                                     len + GOSSIP_MAC_LEN, S.now);
        CHECK(who && strcmp(who->rec.name, from->name) == 0,
              "%s refused %s's frame (MAC)", to->name, from->name);
        free(exact);
    }
    if (rc == 0) {
        S.sync_bytes += (long)len;
        uint8_t *exact = malloc(len);
        memcpy(exact, buf, len);
        rc = gossip_decode(exact, len, out, err, sizeof err);
        CHECK(rc == 0, "decode a %d message back: %s", (int)m->type, err);
        free(exact);
    }
    free(buf);
    return rc;
}

/* One push-pull, a -> b and back, over "TCP" (no loss). */
static void push_pull(node *a, node *b)
{
    char err[256] = "";
    gossip_msg m, wire;
    if (gossip_sync_message(a->g, &m, false, err, sizeof err) != 0) {
        CHECK(0, "%s: sync message: %s", a->name, err);
        return;
    }
    if (over_tcp_mac(&m, &wire, a, b) == 0) {
        int refused = gossip_merge(b->g, &wire, S.now);
        CHECK(refused == 0 || S.refusals_ok, "%s refused %d updates of %s's SYNC", b->name,
              refused, a->name);
        gossip_msg_free(&wire);
    }
    gossip_msg_free(&m);
    if (gossip_sync_message(b->g, &m, true, err, sizeof err) != 0) {
        CHECK(0, "%s: sync reply: %s", b->name, err);
        return;
    }
    if (over_tcp_mac(&m, &wire, b, a) == 0) {
        int refused = gossip_merge(a->g, &wire, S.now);
        CHECK(refused == 0 || S.refusals_ok, "%s refused %d updates of %s's SYNC reply", a->name,
              refused, b->name);
        gossip_msg_free(&wire);
    }
    gossip_msg_free(&m);
}

static void hook_sync(void *ctx, const gossip_member *m)
{
    node *a = ctx;
    int bi = node_by_addr(m->rec.address);
    CHECK(bi >= 0 || S.allow_unknown, "%s asked to sync with %s, no node's address", a->name,
          m->rec.address);
    CHECK(!m->self, "%s asked to sync with itself", a->name);
    if (bi < 0 || m->self)
        return;
    node *b = &S.nd[bi];
    S.syncs++;
    if (a->down || b->down || a->group != b->group || S.cut[a->idx][b->idx])
        return; /* the connection fails */
    push_pull(a, b);
}

static void hook_changed(void *ctx, const gossip_member *m, int before)
{
    node *o = ctx;
    nchanged++;
    if (m->self || before == (int)m->state)
        return;
    int s = node_by_key(m->rec.wg_pub);
    if (s < 0)
        return;
    track *t = &TR[o->idx][s];
    switch (m->state) {
    case GOSSIP_SUSPECT:
        t->nsuspect++;
        t->suspect_ms = S.now;
        t->pending = true;
        t->pending_inc = m->state_inc;
        break;
    case GOSSIP_DEAD:
        t->ndead++;
        t->dead_ms = S.now;
        if (!t->pending) {
            t->pending = true;
            t->pending_inc = m->state_inc;
        }
        break;
    case GOSSIP_LEFT:
        t->nleft++;
        t->left_ms = S.now;
        t->pending = false;
        break;
    case GOSSIP_ALIVE:
        t->nalive++;
        t->alive_ms = S.now;
        if (t->pending) {
            if (m->rec.incarnation > t->pending_inc)
                t->refuted++;
            else
                t->flat++;
            t->pending = false;
        }
        break;
    }
    if (S.verbose)
        printf("  [%7.2f] %s: %s %s -> %s (inc %" PRIu64 ")\n", secs(S.now - T0), o->name,
               m->rec.name, before < 0 ? "new" : gossip_state_name((gossip_state)before),
               gossip_state_name(m->state), m->state_inc);
}

static void hook_observe(void *ctx, const char *addr, char *out, size_t outlen)
{
    (void)ctx;
    if (S.nat_ep && strcmp(addr, S.nat_addr) == 0)
        snprintf(out, outlen, "%s", S.nat_ep);
    else if (outlen)
        out[0] = '\0';
}

static void hook_log(void *ctx, const char *line)
{
    node *o = ctx;
    o->nlogs++;
    if (strstr(line, "cannot encode"))
        S.encode_failures++;
    snprintf(o->lastlog, sizeof o->lastlog, "%s", line);
    if (S.verbose)
        printf("  [%7.2f] %s log: %s\n", secs(S.now - T0), o->name, line);
}

static void hook_punch(void *ctx, const gossip_member *m)
{
    node *x = ctx;
    int r = node_by_key(m->rec.wg_pub);
    CHECK(r >= 0, "%s accepted a PUNCH from %s, no node of the world", x->name, m->rec.name);
    if (r >= 0)
        S.punch_in[x->idx][r]++;
}

static int hook_relay_open(void *ctx, const gossip_member *a, const gossip_member *b,
                           uint16_t *pa, uint16_t *pb)
{
    node *x = ctx;
    int ia = node_by_key(a->rec.wg_pub), ib = node_by_key(b->rec.wg_pub);
    CHECK(ia >= 0 && ib >= 0, "%s asked to relay for nodes outside the world", x->name);
    if (ia < 0 || ib < 0 || S.no_relay[x->idx]) return -1;
    S.relay_open[x->idx][ia]++;
    *pa = (uint16_t)(40000 + 100 * x->idx + ia);
    *pb = (uint16_t)(40000 + 100 * x->idx + ib);
    return 0;
}

static void hook_relay_offer(void *ctx, const gossip_member *peer, const gossip_member *via,
                             uint16_t port, bool granted)
{
    node *x = ctx;
    int ip = node_by_key(peer->rec.wg_pub), iv = node_by_key(via->rec.wg_pub);
    CHECK(ip >= 0 && iv >= 0, "%s took an offer about nodes outside the world", x->name);
    if (ip < 0 || iv < 0) return;
    S.offers[x->idx][ip]++;
    S.offer_via[x->idx][ip] = iv;
    S.offer_port[x->idx][ip] = port;
    S.offer_granted[x->idx][ip] = granted;
}

static int64_t hook_wall(void *ctx)
{
    (void)ctx;
    return S.now + S.wall_off;
}

/* ----------------------------------------------------------------- nodes */

/* 32 bytes from a splitmix64 stream: keys in a test are seeded, never random. */
static void seeded_bytes(uint64_t *st, uint8_t out[32])
{
    for (int i = 0; i < 32; i += 8) {
        uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        memcpy(out + i, &z, 8);
    }
}

/* A WireGuard and an identity key pair from the stream. */
static int seeded_keys(uint64_t *st, node *x, char *err, size_t errlen)
{
    seeded_bytes(st, x->wg_priv);
    x->wg_priv[0] &= 248;
    x->wg_priv[31] = (uint8_t)((x->wg_priv[31] & 127) | 64);
    seeded_bytes(st, x->id_priv);
    return keys_x25519_public(x->wg_priv, x->wg_pub, err, errlen) != 0 ||
                   keys_ed25519_public(x->id_priv, x->id_pub, err, errlen) != 0
               ? -1
               : 0;
}

static void new_keys(node *x)
{
    char err[256] = "";
    for (int tries = 0; tries < 16; tries++) {
        if (seeded_keys(&S.keyrng, x, err, sizeof err) != 0 ||
            mesh_overlay_address(PREFIX, x->wg_pub, x->addr, sizeof x->addr, err,
                                 sizeof err) != 0) {
            printf("FAIL: keys: %s\n", err);
            exit(1);
        }
        int other = node_by_addr(x->addr);
        if (other < 0 || other == x->idx)
            return; /* else an overlay collision (1 in 65534): draw again */
    }
    printf("FAIL: no free overlay address\n");
    exit(1);
}

static void self_record(const node *x, uint64_t inc, gossip_record *r)
{
    memset(r, 0, sizeof *r);
    memcpy(r->mesh_id, MESH_ID, sizeof r->mesh_id);
    snprintf(r->name, sizeof r->name, "%s", x->name);
    memcpy(r->wg_pub, x->wg_pub, GOSSIP_KEY_LEN);
    memcpy(r->id_pub, x->id_pub, GOSSIP_KEY_LEN);
    snprintf(r->address, sizeof r->address, "%s", x->addr);
    r->port = PORT;
    r->incarnation = inc;
    snprintf(r->software, sizeof r->software, "shardnode test");
    r->protocol = MESH_PROTOCOL_VERSION;
    r->mem_free = (uint64_t)1 << 34;
    snprintf(r->devices, sizeof r->devices, "{\"cpus\":2,\"gpus\":[]}");
    r->signed_ms = S.now;
}

/* A gossip instance for x (fresh keys unless x has them). */
static void start_node(node *x, uint64_t inc)
{
    gossip_config c;
    memset(&c, 0, sizeof c);
    c.prefix = PREFIX;
    self_record(x, inc, &c.self);
    memcpy(c.id_priv, x->id_priv, GOSSIP_KEY_LEN);
    memcpy(c.wg_priv, x->wg_priv, GOSSIP_KEY_LEN);
    c.self_adm = x->adm;
    gossip_timing_default(&c.timing);
    c.hooks = (gossip_hooks){.ctx = x,
                             .send = hook_send,
                             .sync = hook_sync,
                             .changed = hook_changed,
                             .observe = hook_observe,
                             .log = hook_log,
                             .wall_ms = hook_wall,
                             .punch = hook_punch,
                             .relay_open = hook_relay_open,
                             .relay_offer = hook_relay_offer};
    c.seed = 0x9e37u + (uint64_t)x->idx * 7919u;
    char err[256] = "";
    if (gossip_create(&x->g, &c, S.now, err, sizeof err) != 0) {
        printf("FAIL: gossip_create %s: %s\n", x->name, err);
        exit(1);
    }
    x->down = false;
}

/* JOIN: a admits j's record (j starts with the admission a signed, as the
 * daemon does); j merges a's view (the JOIN_REPLY). */
static void join(int j, int a)
{
    char err[512] = "";
    node *x = &S.nd[j], *y = &S.nd[a];
    gossip_record r;
    gossip_signed sg;
    self_record(x, 1, &r);
    int rc = gossip_record_sign(&r, x->id_priv, &sg, err, sizeof err);
    CHECK(rc == 0, "%s: sign: %s", x->name, err);
    rc = gossip_admit(y->g, &sg, S.now, err, sizeof err);
    CHECK(rc == 0, "%s admitting %s: %s", y->name, x->name, err);
    const gossip_member *jm = gossip_find_addr(y->g, x->addr);
    if (jm)
        x->adm = jm->sig.adm;
    if (!x->g)
        start_node(x, 1);
    gossip_msg m, wire;
    if (gossip_sync_message(y->g, &m, false, err, sizeof err) != 0) {
        CHECK(0, "%s: join reply: %s", y->name, err);
        return;
    }
    m.type = GOSSIP_MSG_JOIN_REPLY;
    m.flags = 0;
    m.ok = 1;
    if (over_tcp(&m, &wire) == 0) {
        int refused = gossip_merge(x->g, &wire, S.now);
        CHECK(refused == 0, "%s refused %d updates of %s's JOIN_REPLY", x->name, refused,
              y->name);
        gossip_msg_free(&wire);
    }
    gossip_msg_free(&m);
}

static void sim_end(void)
{
    for (int i = 0; i < S.n; i++)
        gossip_destroy(S.nd[i].g);
    for (size_t i = 0; i < S.nq; i++)
        free(S.q[i].buf);
    free(S.q);
    bool verbose = S.verbose;
    memset(&S, 0, sizeof S);
    S.verbose = verbose;
}

/* n nodes n0..n{n-1}, each knowing only itself, joined one by one through
 * n0 (or, chained, each through the one before it). */
static void sim_start(int n, bool chain, uint64_t net_seed)
{
    sim_end();
    reset_tracking();
    S.now = T0;
    S.rng = net_seed ? net_seed : 0x2545f4914f6cdd1dull;
    S.keyrng = 0x6b657973ull ^ (S.rng * 0x9e3779b97f4a7c15ull);
    S.n = n;
    for (int i = 0; i < n; i++) {
        node *x = &S.nd[i];
        x->idx = i;
        snprintf(x->name, sizeof x->name, "n%d", i);
        new_keys(x);
    }
    char err[256] = "";
    if (keys_mesh_id(S.nd[0].id_pub, MESH_ID, err, sizeof err) != 0) {
        printf("FAIL: mesh id: %s\n", err);
        exit(1);
    }
    start_node(&S.nd[0], 1); /* the founder; the others start once admitted */
    for (int i = 1; i < n; i++)
        join(i, chain ? i - 1 : 0);
}

static void step(void)
{
    S.now += STEP_MS;
    dgram *q = S.q;
    size_t nq = S.nq;
    S.q = NULL;
    S.nq = S.capq = 0;
    for (size_t i = 0; i < nq; i++) {
        node *a = &S.nd[q[i].src], *b = &S.nd[q[i].dst];
        if (b->down || a->group != b->group) {
            S.dropped++;
        } else if (S.cut[a->idx][b->idx]) {
            S.cut_drops++;
        } else if (S.loss > 0 && rnd01() < S.loss) {
            S.lost++;
        } else {
            S.delivered++;
            gossip_receive(b->g, a->addr, PORT, q[i].buf, q[i].len, S.now);
        }
        free(q[i].buf);
    }
    free(q);
    for (int i = 0; i < S.n; i++)
        if (!S.nd[i].down)
            gossip_tick(S.nd[i].g, S.now);
}

static void run_for(int64_t ms)
{
    int64_t end = S.now + ms;
    while (S.now < end)
        step();
}

static void crash(int i)
{
    S.nd[i].down = true;
}

/* ------------------------------------------------------------- the views */

static const gossip_member *see(int obs, int subj)
{
    return gossip_find_addr(S.nd[obs].g, S.nd[subj].addr);
}

static bool sees(int obs, int subj, gossip_state st)
{
    const gossip_member *m = see(obs, subj);
    return m && m->state == st;
}

/* Every running node other than subj lists subj in st, at an incarnation
 * of at least min_inc. */
static bool all_see(int subj, gossip_state st, uint64_t min_inc)
{
    for (int o = 0; o < S.n; o++) {
        if (o == subj || S.nd[o].down)
            continue;
        const gossip_member *m = see(o, subj);
        if (!m || m->state != st || m->rec.incarnation < min_inc)
            return false;
    }
    return true;
}

/* Every running node lists every running node ALIVE (itself included). */
static bool converged(void)
{
    for (int o = 0; o < S.n; o++) {
        if (S.nd[o].down)
            continue;
        for (int s = 0; s < S.n; s++)
            if (!S.nd[s].down && !sees(o, s, GOSSIP_ALIVE))
                return false;
    }
    return true;
}

/* Steps until all_see(subj, st, min_inc) (subj < 0: converged()); returns the
 * simulated time it took, or -1 after max_ms. */
static int64_t run_until(int subj, gossip_state st, uint64_t min_inc, int64_t max_ms)
{
    int64_t start = S.now;
    for (;;) {
        if (subj < 0 ? converged() : all_see(subj, st, min_inc))
            return S.now - start;
        if (S.now - start >= max_ms)
            return -1;
        step();
    }
}

static const char *state_of(int obs, int subj)
{
    const gossip_member *m = see(obs, subj);
    return m ? gossip_state_name(m->state) : "unknown";
}

static void print_view(int obs)
{
    const gossip_member *const *list;
    size_t n = gossip_members(S.nd[obs].g, &list);
    printf("    view of %s:", S.nd[obs].name);
    for (size_t i = 0; i < n; i++)
        printf(" %s=%s/%" PRIu64, list[i]->rec.name, gossip_state_name(list[i]->state),
               list[i]->rec.incarnation);
    printf("\n");
}

/* A copy of what a node believes, to compare before and after. */
typedef struct {
    size_t n;
    struct {
        uint8_t key[GOSSIP_KEY_LEN];
        gossip_state state;
        uint64_t state_inc, inc;
        int64_t state_ms, heard_ms, acked_ms;
        size_t siglen;
        uint8_t bytes[GOSSIP_RECORD_MAX], sig[GOSSIP_SIG_LEN];
    } m[MAXN + 4];
} view;

static void snap(int obs, view *v)
{
    const gossip_member *const *list;
    memset(v, 0, sizeof *v);
    size_t n = gossip_members(S.nd[obs].g, &list);
    v->n = n;
    for (size_t i = 0; i < n && i < MAXN + 4; i++) {
        memcpy(v->m[i].key, list[i]->rec.wg_pub, GOSSIP_KEY_LEN);
        v->m[i].state = list[i]->state;
        v->m[i].state_inc = list[i]->state_inc;
        v->m[i].inc = list[i]->rec.incarnation;
        v->m[i].state_ms = list[i]->state_ms;
        v->m[i].heard_ms = list[i]->heard_ms;
        v->m[i].acked_ms = list[i]->acked_ms;
        v->m[i].siglen = list[i]->sig.len;
        memcpy(v->m[i].bytes, list[i]->sig.bytes, list[i]->sig.len);
        memcpy(v->m[i].sig, list[i]->sig.sig, GOSSIP_SIG_LEN);
    }
}

static bool same_view(const view *a, const view *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

/* ------------------------------------------------------ crafted messages */

/* Encodes m as `from` of the mesh `mesh` (NULL: this test's mesh). */
static size_t encode_msg(gossip_msg *m, const char *from, const uint8_t *mesh, uint8_t *buf,
                         size_t cap)
{
    m->version = GOSSIP_PROTOCOL_VERSION;
    memcpy(m->mesh_id, mesh ? mesh : MESH_ID, GOSSIP_MESH_ID_LEN);
    snprintf(m->from, sizeof m->from, "%s", from);
    size_t len = 0;
    char err[256] = "";
    if (gossip_encode(m, buf, cap, &len, err, sizeof err) != 0) {
        CHECK(0, "encode a crafted message: %s", err);
        return 0;
    }
    return len;
}

/* An UPDATE datagram from `from` carrying one update. */
static size_t update_datagram(const char *from, const gossip_update *u, uint8_t *buf, size_t cap)
{
    gossip_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOSSIP_MSG_UPDATE;
    m.nupdates = 1;
    m.updates = (gossip_update *)u;
    return encode_msg(&m, from, NULL, buf, cap);
}

/* Hands dst a datagram as if it came from src_addr:7946 (exact-size copy),
 * as is: no MAC is added. */
static void inject_raw(int dst, const char *src_addr, const uint8_t *buf, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, buf, len);
    gossip_receive(S.nd[dst].g, src_addr, PORT, copy, len, S.now);
    free(copy);
}

/* Appends to buf[0..len) the MAC of the pair (from's key, to's key). */
static size_t seal(const node *from, const node *to, uint8_t *buf, size_t len)
{
    uint8_t key[32];
    char err[256] = "";
    CHECK(gossip_mac_key(from->wg_priv, to->wg_pub, key, err, sizeof err) == 0, "mac key: %s",
          err);
    gossip_mac(key, buf, len, buf + len);
    return len + GOSSIP_MAC_LEN;
}

/* As the node at src_addr would send it: with the MAC of its key pair with
 * dst's (a member of the world made it; anyone else cannot). */
static void inject(int dst, const char *src_addr, const uint8_t *buf, size_t len)
{
    int src = node_by_addr(src_addr);
    if (src < 0) {
        inject_raw(dst, src_addr, buf, len);
        return;
    }
    uint8_t *sealed = malloc(len + GOSSIP_MAC_LEN);
    if (len)
        memcpy(sealed, buf, len);
    size_t n = seal(&S.nd[src], &S.nd[dst], sealed, len);
    inject_raw(dst, src_addr, sealed, n);
    free(sealed);
}

static void claim(gossip_update *u, gossip_state st, const node *about, uint64_t inc,
                  const char *by)
{
    memset(u, 0, sizeof *u);
    u->state = st;
    memcpy(u->wg_pub, about->wg_pub, GOSSIP_KEY_LEN);
    u->incarnation = inc;
    snprintf(u->from, sizeof u->from, "%s", by);
}

/* A job text of len bytes for member `who` (scenarios 14 and 15). */
static char jobtext[GOSSIP_JOB_MAX + 1];

static void make_job(int who, int version, size_t len)
{
    int o = snprintf(jobtext, sizeof jobtext, "{\"job\":\"run-%d\",\"v\":%d,\"pad\":\"", who,
                     version);
    for (size_t i = (size_t)o; i < len - 2; i++)
        jobtext[i] = (char)('a' + (i + (size_t)version) % 26);
    memcpy(jobtext + len - 2, "\"}", 3);
}

static int big_view_logs; /* scenario 15: "carries the first" log lines */
static void quiet_send(void *ctx, const char *addr, int port, const uint8_t *buf, size_t len)
{
    (void)ctx, (void)addr, (void)port, (void)buf, (void)len;
}
static void count_log(void *ctx, const char *line)
{
    (void)ctx;
    if (strstr(line, "carries the first"))
        big_view_logs++;
}

#pragma GCC diagnostic pop

#endif

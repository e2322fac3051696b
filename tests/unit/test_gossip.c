/* test_gossip.c — the SWIM state machine (mesh/gossip.c) with several nodes in
 * one process. Each node is a gossip instance with real keys (Ed25519
 * identity, X25519 WireGuard key, overlay address from mesh_overlay_address in
 * 10.77.0.0/16, gossip port 7946, one mesh id). A simulated clock advances
 * 50 ms per step and ticks every running node; a simulated overlay carries
 * the datagrams of the send hook to the next step (gossip_receive), with a
 * deterministic loss rate, crashed nodes (nothing to or from them, no ticks),
 * partitions and broken links. The sync hook does the TCP push-pull in memory at once,
 * through the codec (gossip_encode / gossip_decode). Nodes join the way the
 * daemon joins them: the admitting member gossip_admit's the joiner's signed
 * record, and the joiner merges the admitting member's view (JOIN_REPLY).
 *
 * Timing is the default (gossip_timing_default); every scenario
 * prints what it measured in simulated time. Scenarios 14 and 15 cover
 * records too big for a datagram (a job text: gossip_set_job), which the
 * sync hook carries, and the SYNC's size limit. Scenarios 10 to 13 check
 * behaviours found wrong while writing this test (see their comments); their
 * failures say "BUG". Scenario 19 steps the wall clock (the wall_ms hook)
 * while the monotonic clock every call gets runs on. GOSSIP_TEST_VERBOSE=1 prints every state change and
 * log line. */
#include "keys.h"
#include "mesh.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

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
                             .wall_ms = hook_wall};
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
    m->version = MESH_PROTOCOL_VERSION;
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

/* ------------------------------------------------------------- scenarios */

/* 1. Five nodes, each joined through the one before it (so most of them
 *    learn of each other only by gossip), converge within 3 s. */
static void scenario_converge(void)
{
    sim_start(5, true, 1);
    int64_t t = run_until(-1, GOSSIP_ALIVE, 0, 3000);
    CHECK(t >= 0, "1: 5 nodes not all ALIVE everywhere after 3 s");
    if (t < 0)
        for (int o = 0; o < S.n; o++)
            print_view(o);
    /* And it stays that way. */
    run_for(10000);
    CHECK(converged(), "1: the 5 nodes no longer all ALIVE 10 s later");
    for (int o = 0; o < S.n; o++) {
        const gossip_member *const *list;
        CHECK(gossip_members(S.nd[o].g, &list) == 5, "1: %s lists %zu members, not 5",
              S.nd[o].name, gossip_members(S.nd[o].g, &list));
        for (int s = 0; s < S.n; s++)
            CHECK(TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0,
                  "1: %s suspected %s %d times, declared it dead %d times", S.nd[o].name,
                  S.nd[s].name, TR[o][s].nsuspect, TR[o][s].ndead);
    }
    printf("scenario 1 (converge, 5 nodes joined in a chain): all ALIVE everywhere after "
           "%.2f s simulated (limit 3 s), and still 10 s later (%ld datagrams in all)\n",
           secs(t), S.sent);
}

/* 2. Crash one of six: every survivor declares it DEAD within 10 s, and
 *    nobody ever suspects a live node (0% loss, 60 s). Each of the six in
 *    turn, crashed at a different phase of the probe rounds. */
static void scenario_crash(void)
{
    int64_t worst = 0, worst_first = 0, best = INT64_MAX;
    int worst_victim = -1;
    for (int v = 0; v < 6; v++) {
        sim_start(6, false, 2 + (uint64_t)v);
        int64_t tc = run_until(-1, GOSSIP_ALIVE, 0, 3000);
        CHECK(tc >= 0, "2: 6 nodes did not converge in 3 s");
        run_for(2000 + 150 * v);
        reset_tracking();
        crash(v);
        int64_t t0 = S.now;
        int64_t t = run_until(v, GOSSIP_DEAD, 0, 20000);
        CHECK(t >= 0 && t <= 10000,
              "2: crashed %s not DEAD at every survivor within 10 s (took %s%.2f s)",
              S.nd[v].name, t < 0 ? "more than " : "", secs(t < 0 ? 20000 : t));
        int64_t max_dead = 0, first_dead = INT64_MAX, first_suspect = INT64_MAX;
        for (int o = 0; o < S.n; o++) {
            if (o == v)
                continue;
            if (TR[o][v].ndead && TR[o][v].dead_ms - t0 > max_dead)
                max_dead = TR[o][v].dead_ms - t0;
            if (TR[o][v].ndead && TR[o][v].dead_ms - t0 < first_dead)
                first_dead = TR[o][v].dead_ms - t0;
            if (TR[o][v].nsuspect && TR[o][v].suspect_ms - t0 < first_suspect)
                first_suspect = TR[o][v].suspect_ms - t0;
        }
        /* Never dead before the shortest suspicion timeout has run. */
        CHECK(t < 0 || first_dead - first_suspect >= 2500,
              "2: %s declared DEAD %.2f s after the first suspicion (at least 2.5 s)",
              S.nd[v].name, secs(first_dead - first_suspect));
        if (t >= 0 && max_dead > worst) {
            worst = max_dead;
            worst_first = first_suspect;
            worst_victim = v;
        }
        if (t >= 0 && max_dead < best)
            best = max_dead;
        /* 60 s after the crash: the dead stays dead, no live node suspected. */
        run_for(60000 - (S.now - t0));
        for (int o = 0; o < S.n; o++) {
            if (o == v)
                continue;
            CHECK(sees(o, v, GOSSIP_DEAD), "2: %s lists crashed %s as %s 60 s later",
                  S.nd[o].name, S.nd[v].name, state_of(o, v));
            CHECK(TR[o][v].ndead == 1, "2: %s declared crashed %s dead %d times", S.nd[o].name,
                  S.nd[v].name, TR[o][v].ndead);
            for (int s = 0; s < S.n; s++) {
                if (s == v || s == o)
                    continue;
                CHECK(TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0,
                      "2: with %s crashed, %s suspected live %s %d times, declared it dead %d "
                      "times (0%% loss)",
                      S.nd[v].name, S.nd[o].name, S.nd[s].name, TR[o][s].nsuspect,
                      TR[o][s].ndead);
                CHECK(sees(o, s, GOSSIP_ALIVE), "2: %s lists live %s as %s", S.nd[o].name,
                      S.nd[s].name, state_of(o, s));
            }
        }
    }
    printf("scenario 2 (crash 1 of 6, each in turn, 0%% loss): DEAD at every survivor after "
           "%.2f .. %.2f s simulated (worst: n%d, first suspected after %.2f s; limit 10 s); "
           "no live node suspected in 60 s\n",
           secs(best), secs(worst), worst_victim, secs(worst_first));
}

/* 2b. A broken link: n0 and n1 cannot reach each other (nothing passes
 *     between them either way), both reach everyone else. The indirect
 *     probes (PING_REQ through others) keep either from suspecting the other
 *     for 30 s. */
static void scenario_broken_link(void)
{
    sim_start(5, false, 21);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "2b: 5 nodes did not converge in 3 s");
    run_for(1000);
    reset_tracking();
    S.cut[0][1] = S.cut[1][0] = true;
    run_for(30000);
    for (int o = 0; o < S.n; o++)
        for (int s = 0; s < S.n; s++)
            CHECK(o == s || (TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0),
                  "2b: with the link n0-n1 broken, %s suspected %s %d times, declared it dead "
                  "%d times",
                  S.nd[o].name, S.nd[s].name, TR[o][s].nsuspect, TR[o][s].ndead);
    CHECK(converged(), "2b: not all ALIVE with the link n0-n1 broken");
    CHECK(S.cut_drops > 0, "2b: nothing crossed the broken link (no probe between n0 and n1)");
    printf("scenario 2b (link n0-n1 broken for 30 s, 5 nodes): no suspicion anywhere; %ld "
           "datagrams lost on the link\n",
           S.cut_drops);
}

/* 3. 10% datagram loss, six nodes, 120 s: suspicions may happen, but each is
 *    refuted (the owner's incarnation rises) and nobody is declared DEAD. */
static void scenario_loss(void)
{
    int total_suspect = 0, total_refuted = 0;
    long total_lost = 0, total_sent = 0;
    uint64_t max_inc = 0;
    static const uint64_t seeds[] = {3, 33, 333};
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
        sim_start(6, false, seeds[k]);
        CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "3: 6 nodes did not converge in 3 s");
        reset_tracking();
        long sent0 = S.sent;
        S.loss = 0.10;
        run_for(120000);
        total_lost += S.lost;
        total_sent += S.sent - sent0;
        /* The network heals; whatever suspicion is still open resolves. */
        S.loss = 0;
        run_for(10000);
        CHECK(converged(), "3 (seed %" PRIu64 "): not all ALIVE everywhere after the loss",
              seeds[k]);
        for (int o = 0; o < S.n; o++)
            for (int s = 0; s < S.n; s++) {
                if (o == s)
                    continue;
                track *t = &TR[o][s];
                total_suspect += t->nsuspect;
                total_refuted += t->refuted;
                CHECK(t->ndead == 0,
                      "3 (seed %" PRIu64 "): %s declared live %s DEAD %d times (10%% loss; "
                      "last at %.2f s)",
                      seeds[k], S.nd[o].name, S.nd[s].name, t->ndead, secs(t->dead_ms - T0));
                CHECK(!t->pending, "3 (seed %" PRIu64 "): %s's suspicion of %s never resolved",
                      seeds[k], S.nd[o].name, S.nd[s].name);
                CHECK(t->flat == 0,
                      "3 (seed %" PRIu64 "): %s took %s from SUSPECT back to ALIVE %d times "
                      "without a higher incarnation",
                      seeds[k], S.nd[o].name, S.nd[s].name, t->flat);
                CHECK(t->refuted == t->nsuspect,
                      "3 (seed %" PRIu64 "): %s suspected %s %d times, refuted %d", seeds[k],
                      S.nd[o].name, S.nd[s].name, t->nsuspect, t->refuted);
            }
        for (int s = 0; s < S.n; s++) {
            uint64_t inc = gossip_self(S.nd[s].g)->rec.incarnation;
            if (inc > max_inc)
                max_inc = inc;
            /* Everyone holds the owner's latest record. */
            for (int o = 0; o < S.n; o++)
                CHECK(see(o, s) && see(o, s)->rec.incarnation == inc,
                      "3: %s holds %s at incarnation %" PRIu64 ", the owner is at %" PRIu64,
                      S.nd[o].name, S.nd[s].name, see(o, s) ? see(o, s)->rec.incarnation : 0,
                      inc);
        }
    }
    printf("scenario 3 (6 nodes, 10%% loss, 120 s simulated, 3 runs): %ld of %ld datagrams "
           "lost; %d suspicions of live nodes (observer-subject pairs), %d refuted by a higher "
           "incarnation (highest incarnation %" PRIu64 "), none declared DEAD\n",
           total_lost, total_sent, total_suspect, total_refuted, max_inc);
}

/* 4. A forged SUSPECT about a node, in an UPDATE from another member's
 *    address and name, reaches the node itself (and one other member):
 *    the node refutes with a higher incarnation, everyone ends ALIVE. */
static void scenario_refute(void)
{
    sim_start(5, false, 4);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "4: 5 nodes did not converge in 3 s");
    run_for(1000);
    reset_tracking();
    const int target = 2, forger = 4, witness = 1;
    uint64_t inc = gossip_self(S.nd[target].g)->rec.incarnation;
    gossip_update u;
    claim(&u, GOSSIP_SUSPECT, &S.nd[target], inc, S.nd[forger].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[forger].name, &u, buf, sizeof buf);
    inject(witness, S.nd[forger].addr, buf, len);
    CHECK(sees(witness, target, GOSSIP_SUSPECT), "4: %s lists %s as %s after a SUSPECT claim",
          S.nd[witness].name, S.nd[target].name, state_of(witness, target));
    inject(target, S.nd[forger].addr, buf, len);
    CHECK(strstr(S.nd[target].lastlog, "refuting"), "4: the refutation was not logged (\"%s\")",
          S.nd[target].lastlog);
    uint64_t now_inc = gossip_self(S.nd[target].g)->rec.incarnation;
    CHECK(now_inc == inc + 1, "4: %s's incarnation went %" PRIu64 " -> %" PRIu64
          " on a SUSPECT about itself (want +1)", S.nd[target].name, inc, now_inc);
    CHECK(gossip_self(S.nd[target].g)->state == GOSSIP_ALIVE, "4: %s thinks itself %s",
          S.nd[target].name, gossip_state_name(gossip_self(S.nd[target].g)->state));
    int64_t t = run_until(target, GOSSIP_ALIVE, inc + 1, 3000);
    CHECK(t >= 0, "4: not every node lists %s ALIVE at incarnation %" PRIu64 " 3 s after the "
          "refutation", S.nd[target].name, inc + 1);
    run_for(10000);
    CHECK(all_see(target, GOSSIP_ALIVE, inc + 1) && converged(),
          "4: not all ALIVE 10 s after the refutation");
    CHECK(gossip_self(S.nd[target].g)->rec.incarnation == inc + 1,
          "4: %s's incarnation kept rising (%" PRIu64 ")", S.nd[target].name,
          gossip_self(S.nd[target].g)->rec.incarnation);
    for (int o = 0; o < S.n; o++) {
        if (o == target)
            continue;
        CHECK(see(o, target)->rec.incarnation == inc + 1,
              "4: %s holds %s at incarnation %" PRIu64, S.nd[o].name, S.nd[target].name,
              see(o, target)->rec.incarnation);
        CHECK(TR[o][target].ndead == 0, "4: %s declared %s dead", S.nd[o].name,
              S.nd[target].name);
    }
    CHECK(TR[witness][target].refuted == 1, "4: %s's suspicion of %s not refuted once (%d)",
          S.nd[witness].name, S.nd[target].name, TR[witness][target].refuted);
    printf("scenario 4 (forged SUSPECT from %s about %s): incarnation %" PRIu64 " -> %" PRIu64
           " at once; every node lists it ALIVE at the new incarnation after %.2f s "
           "simulated\n",
           S.nd[forger].name, S.nd[target].name, inc, now_inc, secs(t));
}

/* 5. A crashed node, once DEAD everywhere, restarts: same keys and name, a
 *    higher incarnation, the others' records from its saved view
 *    (gossip_add_known, no sync at start): ALIVE everywhere within 10 s. */
static void scenario_restart(void)
{
    sim_start(5, false, 5);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "5: 5 nodes did not converge in 3 s");
    run_for(3000);
    const int r = 2;
    uint64_t inc = gossip_self(S.nd[r].g)->rec.incarnation;
    crash(r);
    int64_t td = run_until(r, GOSSIP_DEAD, 0, 20000);
    CHECK(td >= 0 && td <= 10000, "5: crashed %s not DEAD everywhere within 10 s",
          S.nd[r].name);
    run_for(5000);
    reset_tracking();
    node *x = &S.nd[r];
    gossip_destroy(x->g);
    x->g = NULL;
    start_node(x, inc + 1);
    for (int o = 0; o < S.n; o++) {
        if (o == r)
            continue;
        char err[512] = "";
        int rc = gossip_add_known(x->g, &gossip_self(S.nd[o].g)->sig, S.now, err, sizeof err);
        CHECK(rc == 0, "5: restarted %s: add_known %s: %s", x->name, S.nd[o].name, err);
    }
    int64_t t = run_until(r, GOSSIP_ALIVE, inc + 1, 10000);
    CHECK(t >= 0, "5: restarted %s not ALIVE everywhere within 10 s", x->name);
    if (t < 0)
        for (int o = 0; o < S.n; o++)
            print_view(o);
    int64_t tall = run_until(-1, GOSSIP_ALIVE, 0, 10000);
    CHECK(tall >= 0, "5: not all ALIVE everywhere 10 s after the restart");
    run_for(20000);
    CHECK(converged(), "5: not all ALIVE everywhere 20 s after the restart");
    for (int o = 0; o < S.n; o++)
        for (int s = 0; s < S.n; s++)
            CHECK(o == s || (TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0),
                  "5: after the restart %s suspected %s %d times, declared it dead %d times",
                  S.nd[o].name, S.nd[s].name, TR[o][s].nsuspect, TR[o][s].ndead);
    printf("scenario 5 (restart of a dead node, incarnation %" PRIu64 " -> %" PRIu64
           "): DEAD everywhere %.2f s after the crash; ALIVE everywhere %.2f s simulated after "
           "the restart (limit 10 s)\n",
           inc, inc + 1, secs(td), secs(t));
}

/* 6. gossip_leave: LEFT everywhere within 2 s, and still LEFT (never
 *    SUSPECT or DEAD) 30 s later though it answers nothing any more. */
static void scenario_leave(void)
{
    sim_start(5, false, 6);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "6: 5 nodes did not converge in 3 s");
    run_for(2500);
    reset_tracking();
    const int l = 3;
    char err[256] = "";
    uint64_t inc = gossip_self(S.nd[l].g)->rec.incarnation;
    CHECK(gossip_leave(S.nd[l].g, S.now, err, sizeof err) == 0, "6: leave: %s", err);
    CHECK(gossip_self(S.nd[l].g)->state == GOSSIP_LEFT &&
              gossip_self(S.nd[l].g)->rec.left == 1 &&
              gossip_self(S.nd[l].g)->rec.incarnation == inc + 1,
          "6: the leaver's own record is not LEFT at the next incarnation");
    crash(l); /* what it sent on leaving is on its way; then it is gone */
    int64_t t = run_until(l, GOSSIP_LEFT, inc + 1, 2000);
    CHECK(t >= 0, "6: %s not LEFT everywhere within 2 s", S.nd[l].name);
    run_for(30000);
    for (int o = 0; o < S.n; o++) {
        if (o == l)
            continue;
        CHECK(sees(o, l, GOSSIP_LEFT), "6: %s lists %s as %s 30 s after it left", S.nd[o].name,
              S.nd[l].name, state_of(o, l));
        CHECK(TR[o][l].nsuspect == 0 && TR[o][l].ndead == 0 && TR[o][l].nleft == 1,
              "6: %s: %s suspected %d, dead %d, left %d times", S.nd[o].name, S.nd[l].name,
              TR[o][l].nsuspect, TR[o][l].ndead, TR[o][l].nleft);
        for (int s = 0; s < S.n; s++)
            CHECK(s == l || s == o || (TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0),
                  "6: %s suspected %s %d times after %s left", S.nd[o].name, S.nd[s].name,
                  TR[o][s].nsuspect, S.nd[l].name);
    }
    CHECK(converged(), "6: the others are not all ALIVE");
    printf("scenario 6 (leave): LEFT everywhere after %.2f s simulated (limit 2 s); still LEFT "
           "30 s later\n",
           secs(t));
}

/* 7. gossip_admit refuses, naming the problem, and changes nothing. */
static void expect_refused(const char *what, const gossip_signed *s, const char *want)
{
    const int a = 0;
    view before, after;
    snap(a, &before);
    long sent = S.sent, changed = nchanged;
    char err[512] = "";
    int rc = gossip_admit(S.nd[a].g, s, S.now, err, sizeof err);
    CHECK(rc != 0, "7: %s: admitted", what);
    CHECK(rc == 0 || strstr(err, want), "7: %s: refused with \"%s\", want \"%s\"", what, err,
          want);
    snap(a, &after);
    CHECK(same_view(&before, &after), "7: %s: the view changed", what);
    CHECK(S.sent == sent && nchanged == changed, "7: %s: %ld datagrams sent, %ld changes", what,
          S.sent - sent, nchanged - changed);
    printf("    refused %s: %s\n", what, err);
}

static void scenario_refusals(void)
{
    sim_start(4, false, 7);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "7: 4 nodes did not converge in 3 s");
    printf("scenario 7 (gossip_admit refusals):\n");
    char err[512] = "";
    node stranger;
    memset(&stranger, 0, sizeof stranger);
    stranger.idx = -1;
    snprintf(stranger.name, sizeof stranger.name, "stranger");
    new_keys(&stranger);
    gossip_record r;
    gossip_signed s, good;
    self_record(&stranger, 1, &r);
    CHECK(gossip_record_sign(&r, stranger.id_priv, &good, err, sizeof err) == 0, "7: sign: %s",
          err);

    /* Signed by another identity key than the record's own id. */
    s = good;
    CHECK(keys_sign(S.nd[1].id_priv, s.bytes, s.len, s.sig, err, sizeof err) == 0,
          "7: keys_sign: %s", err);
    expect_refused("a record signed by another identity key", &s, "signature does not verify");

    /* One byte of the signature flipped (each of a few positions). */
    for (int pos = 0; pos < GOSSIP_SIG_LEN; pos += 21) {
        s = good;
        s.sig[pos] ^= 0x01;
        expect_refused("a record with one signature byte flipped", &s,
                       "signature does not verify");
    }

    /* An address that is not the one its key gives. */
    gossip_record r2 = r;
    snprintf(r2.address, sizeof r2.address, "%s",
             strcmp(stranger.addr, "10.77.0.1") ? "10.77.0.1" : "10.77.0.2");
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record whose address is not derived from its key", &s,
                   "claims overlay address");
    /* ... nor one outside the prefix. */
    r2 = r;
    snprintf(r2.address, sizeof r2.address, "10.78.1.2");
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record with an address outside the prefix", &s, "claims overlay address");

    /* Another mesh. */
    r2 = r;
    r2.mesh_id[3] ^= 0x80;
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record of another mesh id", &s, "another mesh");

    /* A name a live member has (and our own). */
    r2 = r;
    snprintf(r2.name, sizeof r2.name, "%s", S.nd[2].name);
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record with a live member's name", &s, "name belongs to another member");
    r2 = r;
    snprintf(r2.name, sizeof r2.name, "%s", S.nd[0].name);
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record with the admitting node's own name", &s,
                   "name belongs to another member");

    /* A member's WireGuard key (and address) under another identity key. */
    node imp = S.nd[2];
    memcpy(imp.id_priv, stranger.id_priv, KEYS_LEN);
    memcpy(imp.id_pub, stranger.id_pub, KEYS_LEN);
    self_record(&imp, 99, &r2);
    CHECK(gossip_record_sign(&r2, imp.id_priv, &s, err, sizeof err) == 0, "7: sign: %s", err);
    expect_refused("a member's WireGuard key signed by another identity", &s,
                   "already a member's");

    /* None of it spread: a second later every view is as it was. */
    run_for(1000);
    CHECK(converged(), "7: not all ALIVE after the refusals");
    for (int o = 0; o < S.n; o++) {
        const gossip_member *const *list;
        CHECK(gossip_members(S.nd[o].g, &list) == 4, "7: %s lists %zu members",
              S.nd[o].name, gossip_members(S.nd[o].g, &list));
        CHECK(see(o, 2)->rec.incarnation == 1, "7: %s holds n2 at incarnation %" PRIu64,
              S.nd[o].name, see(o, 2)->rec.incarnation);
    }
    /* The good record is admitted (the refusals were for their reason). */
    S.allow_unknown = true; /* n0 announces the stranger to the stranger too */
    CHECK(gossip_admit(S.nd[0].g, &good, S.now, err, sizeof err) == 0,
          "7: the unaltered record refused: %s", err);
}

/* 8. NAT: the others see n2 at 198.51.100.7:40000 (their ACKs say so); n2's
 *    record gains that endpoint, and every copy of it too. */
static void scenario_observed(void)
{
    sim_start(4, false, 8);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "8: 4 nodes did not converge in 3 s");
    run_for(500);
    const int p = 2;
    const char *ep = "198.51.100.7:40000";
    snprintf(S.nat_addr, sizeof S.nat_addr, "%s", S.nd[p].addr);
    S.nat_ep = ep;
    uint64_t inc = gossip_self(S.nd[p].g)->rec.incarnation;
    int64_t start = S.now, t_self = -1, t_all = -1;
    while (S.now - start <= 5000 && t_all < 0) {
        const gossip_record *own = &gossip_self(S.nd[p].g)->rec;
        if (t_self < 0 && own->nendpoints == 1 && strcmp(own->endpoints[0], ep) == 0)
            t_self = S.now - start;
        bool all = t_self >= 0;
        for (int o = 0; o < S.n && all; o++) {
            const gossip_member *m = see(o, p);
            all = m && m->rec.nendpoints == 1 && strcmp(m->rec.endpoints[0], ep) == 0;
        }
        if (all)
            t_all = S.now - start;
        else
            step();
    }
    CHECK(t_self >= 0, "8: %s's record never gained the observed endpoint", S.nd[p].name);
    CHECK(t_all >= 0, "8: not every node's copy of %s's record has the observed endpoint",
          S.nd[p].name);
    uint64_t inc_after = gossip_self(S.nd[p].g)->rec.incarnation;
    CHECK(inc_after == inc + 1, "8: incarnation %" PRIu64 " -> %" PRIu64 " (want +1)", inc,
          inc_after);
    /* The same observation again and again changes nothing more. */
    run_for(10000);
    CHECK(gossip_self(S.nd[p].g)->rec.incarnation == inc_after &&
              gossip_self(S.nd[p].g)->rec.nendpoints == 1,
          "8: %s's record kept changing (incarnation %" PRIu64 ", %d endpoints)", S.nd[p].name,
          gossip_self(S.nd[p].g)->rec.incarnation, gossip_self(S.nd[p].g)->rec.nendpoints);
    for (int o = 0; o < S.n; o++) {
        CHECK(see(o, p)->rec.incarnation == inc_after, "8: %s holds %s at %" PRIu64,
              S.nd[o].name, S.nd[p].name, see(o, p)->rec.incarnation);
        if (o != p)
            CHECK(gossip_self(S.nd[o].g)->rec.nendpoints == 0,
                  "8: %s gained an endpoint nobody observed", S.nd[o].name);
    }
    CHECK(converged(), "8: not all ALIVE");
    printf("scenario 8 (observed endpoint %s for %s): in its own record after %.2f s, in every "
           "copy after %.2f s simulated; incarnation %" PRIu64 " -> %" PRIu64 "\n",
           ep, S.nd[p].name, secs(t_self), secs(t_all), inc, inc_after);
}

/* 9. Datagrams that are dropped: from an address that is no member's, and
 *    garbage (or a lie) from a member's. Nothing changes; a line is logged. */
static void expect_dropped_as(const char *what, const char *src_addr, const uint8_t *buf,
                              size_t len, const char *want, bool raw)
{
    const int d = 0;
    view before, after;
    snap(d, &before);
    long sent = S.sent, changed = nchanged;
    int logs = S.nd[d].nlogs;
    S.now += 1000; /* unauthenticated datagrams are logged once a second at most */
    if (raw)
        inject_raw(d, src_addr, buf, len);
    else
        inject(d, src_addr, buf, len);
    snap(d, &after);
    CHECK(same_view(&before, &after), "9: %s: the view changed", what);
    CHECK(S.sent == sent && nchanged == changed, "9: %s: %ld datagrams sent, %ld changes", what,
          S.sent - sent, nchanged - changed);
    CHECK(S.nd[d].nlogs == logs + 1 && strstr(S.nd[d].lastlog, want),
          "9: %s: %d lines logged, last \"%s\", want \"%s\"", what, S.nd[d].nlogs - logs,
          S.nd[d].lastlog, want);
    printf("    dropped %s: %s\n", what, S.nd[d].lastlog);
}

static void expect_dropped(const char *what, const char *src_addr, const uint8_t *buf,
                           size_t len, const char *want)
{
    expect_dropped_as(what, src_addr, buf, len, want, false);
}

static void scenario_dropped(void)
{
    sim_start(3, false, 9);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "9: 3 nodes did not converge in 3 s");
    run_for(700);
    printf("scenario 9 (datagrams dropped):\n");
    uint8_t buf[GOSSIP_UDP_MAX];
    gossip_msg m;
    /* A well-formed PING of n1's, with an update about n2. */
    gossip_update up;
    memset(&up, 0, sizeof up);
    up.state = GOSSIP_ALIVE;
    up.rec = gossip_self(S.nd[2].g)->sig;
    memset(&m, 0, sizeof m);
    m.type = GOSSIP_MSG_PING;
    m.seq = 77;
    m.nupdates = 1;
    m.updates = &up;
    size_t len = encode_msg(&m, S.nd[1].name, NULL, buf, sizeof buf);

    char stranger[GOSSIP_ADDR_MAX] = "10.77.250.250";
    if (node_by_addr(stranger) >= 0)
        snprintf(stranger, sizeof stranger, "10.77.250.251");
    expect_dropped("a PING from an address that is no member's", stranger, buf, len,
                   "not a member's address");
    expect_dropped("a PING from outside the overlay prefix", "192.0.2.1", buf, len,
                   "not a member's address");

    uint8_t garbage[64];
    uint64_t x = 0x1234567887654321ull;
    for (size_t i = 0; i < sizeof garbage; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        garbage[i] = (uint8_t)(x >> 56);
    }
    char want[128];
    snprintf(want, sizeof want, "dropped a datagram from %s", S.nd[1].name);
    expect_dropped("garbage from a member", S.nd[1].addr, garbage, sizeof garbage, want);
    expect_dropped("an empty datagram from a member", S.nd[1].addr, garbage, 0, want);
    expect_dropped("a truncated PING from a member", S.nd[1].addr, buf, len - 1, want);

    /* A PING from n1's address that says it is from n2. */
    gossip_msg lie;
    memset(&lie, 0, sizeof lie);
    lie.type = GOSSIP_MSG_PING;
    lie.seq = 78;
    uint8_t lbuf[GOSSIP_UDP_MAX];
    size_t llen = encode_msg(&lie, S.nd[2].name, NULL, lbuf, sizeof lbuf);
    expect_dropped("a PING from a member's address under another name", S.nd[1].addr, lbuf,
                   llen, "it says it is");
    /* A PING of another mesh. */
    memset(&lie, 0, sizeof lie);
    lie.type = GOSSIP_MSG_PING;
    lie.seq = 79;
    uint8_t other_mesh[GOSSIP_MESH_ID_LEN];
    memcpy(other_mesh, MESH_ID, GOSSIP_MESH_ID_LEN);
    other_mesh[0] ^= 0xff;
    llen = encode_msg(&lie, S.nd[1].name, other_mesh, lbuf, sizeof lbuf);
    expect_dropped("a PING of another mesh from a member's address", S.nd[1].addr, lbuf, llen,
                   "another mesh");

    /* Issue 12, 2: the source address is no credential. A local user on
     * n1's machine who binds n1's overlay address sends n1's PING without
     * the MAC (it cannot read n1's WireGuard key), or with a MAC of its own
     * key, or with one n2 made for n0; and a MAC made for n0 from n1's
     * address in a datagram from n2's. Each is dropped and counted. */
    uint64_t drops = gossip_auth_drops(S.nd[0].g);
    expect_dropped_as("n1's PING from n1's address without a MAC", S.nd[1].addr, buf, len,
                      "MAC does not verify", true);
    uint8_t sealed[GOSSIP_UDP_MAX];
    memcpy(sealed, buf, len);
    node intruder;
    memset(&intruder, 0, sizeof intruder);
    char kerr[256] = "";
    CHECK(seeded_keys(&S.keyrng, &intruder, kerr, sizeof kerr) == 0, "9: keys: %s", kerr);
    size_t slen = seal(&intruder, &S.nd[0], sealed, len);
    expect_dropped_as("n1's PING from n1's address with a MAC of another key", S.nd[1].addr,
                      sealed, slen, "MAC does not verify", true);
    slen = seal(&S.nd[2], &S.nd[0], sealed, len);
    expect_dropped_as("n1's PING from n1's address with n2's MAC for n0", S.nd[1].addr, sealed,
                      slen, "MAC does not verify", true);
    slen = seal(&S.nd[1], &S.nd[0], sealed, len);
    expect_dropped_as("n1's sealed PING from n2's address", S.nd[2].addr, sealed, slen,
                      "MAC does not verify", true);
    CHECK(gossip_auth_drops(S.nd[0].g) == drops + 4, "9: %" PRIu64 " unauthenticated "
          "datagrams counted, want 4", gossip_auth_drops(S.nd[0].g) - drops);
    /* The same for TCP frames (SYNC, FETCH): n1's frame sealed by n2 for n0,
     * a frame without a MAC, one from no member's address. */
    slen = seal(&S.nd[2], &S.nd[0], sealed, len);
    S.now += 1000;
    CHECK(gossip_frame_open(S.nd[0].g, S.nd[1].addr, sealed, slen, S.now) == NULL &&
              strstr(S.nd[0].lastlog, "MAC does not verify"),
          "9: a frame from n1's address with n2's MAC opened (\"%s\")", S.nd[0].lastlog);
    S.now += 1000;
    CHECK(gossip_frame_open(S.nd[0].g, S.nd[1].addr, buf, len, S.now) == NULL,
          "9: a frame without a MAC opened");
    S.now += 1000;
    CHECK(gossip_frame_open(S.nd[0].g, stranger, sealed, slen, S.now) == NULL &&
              strstr(S.nd[0].lastlog, "not a member's address"),
          "9: a frame from no member's address opened");
    slen = seal(&S.nd[1], &S.nd[0], sealed, len);
    CHECK(gossip_frame_open(S.nd[0].g, S.nd[1].addr, sealed, slen, S.now) == see(0, 1),
          "9: n1's own frame did not open");
    CHECK(gossip_auth_drops(S.nd[0].g) == drops + 7, "9: %" PRIu64 " unauthenticated "
          "datagrams and frames counted, want 7", gossip_auth_drops(S.nd[0].g) - drops);

    /* The control: the same PING from n1's own address is answered. */
    long sent = S.sent;
    inject(0, S.nd[1].addr, buf, len);
    CHECK(S.sent == sent + 1, "9: the PING from n1's address was not answered (%ld sent)",
          S.sent - sent);
    CHECK(see(0, 1)->heard_ms == S.now, "9: n0 did not note hearing from n1");
    run_for(3000);
    CHECK(converged(), "9: not all ALIVE afterwards");
}

/* ------------------------------------------- behaviours this test found */

/* 10. A partition heals. Five nodes split {n0 n1 n2} | {n3 n4} for 20 s:
 *     each side declares the other DEAD (right). When the network heals
 *     they must find each other again. gossip.c never sends anything to a
 *     DEAD member (no probe, no sync, no broadcast), so two sides that
 *     declared each other dead never talk again: any outage longer than the
 *     probe round plus the suspicion timeout (~7 s) splits the mesh for
 *     good (only a restart, which syncs with its saved view, mends it). */
static void scenario_partition(void)
{
    sim_start(5, false, 10);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "10: 5 nodes did not converge in 3 s");
    run_for(2000);
    S.nd[3].group = S.nd[4].group = 1;
    run_for(20000);
    bool split = true;
    for (int o = 0; o < S.n; o++)
        for (int s = 0; s < S.n; s++)
            if (S.nd[o].group != S.nd[s].group && !sees(o, s, GOSSIP_DEAD))
                split = false;
    CHECK(split, "10: after 20 s of partition the sides do not list each other DEAD");
    S.nd[3].group = S.nd[4].group = 0;
    reset_tracking();
    int64_t t = run_until(-1, GOSSIP_ALIVE, 0, 60000);
    CHECK(t >= 0,
          "10: BUG (gossip.c): a partition of 20 s healed, but 60 s later the two sides still "
          "list each other DEAD: nothing is ever sent to a DEAD member, so the mesh stays "
          "split");
    if (t < 0)
        for (int o = 0; o < S.n; o++)
            print_view(o);
    printf("scenario 10 (partition {n0 n1 n2} | {n3 n4} for 20 s, then healed): %s\n",
           t >= 0 ? "merged again" : "still split 60 s after the heal");
    if (t >= 0)
        printf("    all ALIVE everywhere %.2f s simulated after the heal\n", secs(t));
}

/* 11. A SUSPECT claim about the highest incarnation (2^64-1), from a member,
 *     to the node itself. refute() raises the node's incarnation to inc + 1,
 *     which wraps to 0: every later record of the node (0, 1, 2, ...) is
 *     older than what the others hold, so its changes never spread again.
 *     (Had another member taken the claim too, it would spread and no record
 *     could ever beat it: the node would be DEAD everywhere for good. The
 *     precedence rules allow that, so it is not checked here.) */
static void scenario_incarnation_wrap(void)
{
    sim_start(4, false, 11);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "11: 4 nodes did not converge in 3 s");
    run_for(1000);
    reset_tracking();
    const int target = 1, forger = 3;
    uint64_t inc = gossip_self(S.nd[target].g)->rec.incarnation;
    gossip_update u;
    claim(&u, GOSSIP_SUSPECT, &S.nd[target], UINT64_MAX, S.nd[forger].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[forger].name, &u, buf, sizeof buf);
    inject(target, S.nd[forger].addr, buf, len);
    uint64_t after = gossip_self(S.nd[target].g)->rec.incarnation;
    CHECK(after >= inc,
          "11: BUG (gossip.c refute): a SUSPECT claim at incarnation 2^64-1 wrapped %s's "
          "incarnation from %" PRIu64 " to %" PRIu64,
          S.nd[target].name, inc, after);
    CHECK(after == inc, "11: %s's incarnation went %" PRIu64 " -> %" PRIu64 " on a claim it "
          "never signed", S.nd[target].name, inc, after);
    /* Issue 12, 3: one unsigned DEAD claim at 2^64-1 to every other member
     * evicted the target for ever (its refutation is capped at its own
     * incarnation + 1). A claim beyond the record a member holds is ignored. */
    claim(&u, GOSSIP_DEAD, &S.nd[target], UINT64_MAX, S.nd[forger].name);
    len = update_datagram(S.nd[forger].name, &u, buf, sizeof buf);
    for (int o = 0; o < S.n; o++)
        if (o != target && o != forger)
            inject(o, S.nd[forger].addr, buf, len);
    for (int o = 0; o < S.n; o++)
        CHECK(o == target || o == forger || sees(o, target, GOSSIP_ALIVE),
              "11: a DEAD claim at 2^64-1 made %s list %s as %s", S.nd[o].name,
              S.nd[target].name, state_of(o, target));
    run_for(15000);
    for (int o = 0; o < S.n; o++)
        CHECK(o == target || sees(o, target, GOSSIP_ALIVE),
              "11: 15 s after the claim, %s lists %s as %s", S.nd[o].name, S.nd[target].name,
              state_of(o, target));
    /* Its own changes still reach the others. */
    const char *ep = "203.0.113.50:51820";
    gossip_add_observed(S.nd[target].g, ep, S.now);
    run_for(3000);
    bool spread = true;
    for (int o = 0; o < S.n; o++) {
        const gossip_member *m = see(o, target);
        if (o != target && (!m || m->rec.nendpoints < 1 || strcmp(m->rec.endpoints[0], ep)))
            spread = false;
    }
    CHECK(spread, "11: BUG (gossip.c): after the wrap, %s's new record (incarnation %" PRIu64
          ") does not reach the others",
          S.nd[target].name, gossip_self(S.nd[target].g)->rec.incarnation);
    printf("scenario 11 (SUSPECT at incarnation 2^64-1 to the node): %s's incarnation "
           "%" PRIu64 " -> %" PRIu64 "; its later changes %s\n",
           S.nd[target].name, inc, after, spread ? "spread" : "do not spread");
}

/* 12. Precedence (PROTOCOL.md) and the bound on claims (issue 12, 3): a
 *     claim names the incarnation of the record its maker holds. n0 holds
 *     n2 at incarnation i. A DEAD claim at i + 2 (beyond any record of n2
 *     n0 has seen; before the fix it stood until n2 outbid it) is ignored;
 *     DEAD at i stands, a record at i does not lift it, one at i + 1 does. */
static void scenario_precedence(void)
{
    sim_start(3, false, 12);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "12: 3 nodes did not converge in 3 s");
    run_for(1000);
    const int obs = 0, x = 2, relay = 1;
    char err[256] = "";
    uint64_t inc = gossip_self(S.nd[x].g)->rec.incarnation;
    gossip_update u;
    claim(&u, GOSSIP_DEAD, &S.nd[x], inc + 2, S.nd[relay].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[relay].name, &u, buf, sizeof buf);
    inject(obs, S.nd[relay].addr, buf, len);
    CHECK(sees(obs, x, GOSSIP_ALIVE), "12: %s lists %s %s after a DEAD claim at %" PRIu64
          ", beyond the record it holds (%" PRIu64 ")", S.nd[obs].name, S.nd[x].name,
          state_of(obs, x), inc + 2, inc);
    crash(x); /* so it does not refute what follows */
    claim(&u, GOSSIP_DEAD, &S.nd[x], inc, S.nd[relay].name);
    len = update_datagram(S.nd[relay].name, &u, buf, sizeof buf);
    inject(obs, S.nd[relay].addr, buf, len);
    CHECK(sees(obs, x, GOSSIP_DEAD), "12: %s lists %s %s after DEAD at %" PRIu64,
          S.nd[obs].name, S.nd[x].name, state_of(obs, x), inc);
    gossip_record r = gossip_self(S.nd[x].g)->rec;
    memset(&u, 0, sizeof u);
    u.state = GOSSIP_ALIVE;
    u.rec = gossip_self(S.nd[x].g)->sig;
    len = update_datagram(S.nd[relay].name, &u, buf, sizeof buf);
    inject(obs, S.nd[relay].addr, buf, len);
    CHECK(sees(obs, x, GOSSIP_DEAD), "12: DEAD at %" PRIu64 " lifted by the record of the same "
          "incarnation: %s lists %s %s", inc, S.nd[obs].name, S.nd[x].name, state_of(obs, x));
    r.incarnation = inc + 1;
    CHECK(gossip_record_sign(&r, S.nd[x].id_priv, &u.rec, err, sizeof err) == 0, "12: sign: %s",
          err);
    u.rec.adm = gossip_self(S.nd[x].g)->sig.adm;
    len = update_datagram(S.nd[relay].name, &u, buf, sizeof buf);
    inject(obs, S.nd[relay].addr, buf, len);
    CHECK(sees(obs, x, GOSSIP_ALIVE), "12: DEAD at %" PRIu64 " not lifted by the record at %"
          PRIu64 ": %s lists %s %s", inc, inc + 1, S.nd[obs].name, S.nd[x].name,
          state_of(obs, x));
    printf("scenario 12 (claims bounded by the record): DEAD at %" PRIu64 " ignored, DEAD at %"
           PRIu64 " stands until the record at %" PRIu64 "\n", inc + 2, inc, inc + 1);
}

/* 13. Lifeguard: a suspicion's timeout shrinks with *independent*
 *     confirmations (PROTOCOL.md; gossip_member.confirmations: "independent
 *     others that suspect it too"). One member accuses n4 (which is down,
 *     so it cannot refute); within 200 ms nobody can have probed n4 and
 *     failed (a failed probe takes 1 s). But every member that adopts the
 *     suspicion re-broadcasts it with itself as `by` (update_of writes this
 *     node's name into `from`), so each relay counts as a confirmation: one
 *     accusation reaches the shortest timeout, as if every member had
 *     found n4 unresponsive. */
static void scenario_confirmations(void)
{
    sim_start(5, false, 13);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "13: 5 nodes did not converge in 3 s");
    run_for(1000);
    const int x = 4, accuser = 0, b = 1;
    crash(x);
    gossip_update u;
    claim(&u, GOSSIP_SUSPECT, &S.nd[x], gossip_self(S.nd[x].g)->rec.incarnation,
          S.nd[accuser].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[accuser].name, &u, buf, sizeof buf);
    int64_t t0 = S.now;
    inject(b, S.nd[accuser].addr, buf, len);
    run_for(200);
    const gossip_member *m = see(b, x);
    CHECK(m && m->state == GOSSIP_SUSPECT, "13: %s lists %s as %s", S.nd[b].name, S.nd[x].name,
          state_of(b, x));
    int conf = m ? m->confirmations : -1;
    CHECK(conf == 0,
          "13: BUG (gossip.c update_of/apply_claim): 200 ms after one accusation, %s counts %d "
          "independent confirmations of %s's suspicion (by %s, %s, %s, %s): relayed claims "
          "count as confirmations",
          S.nd[b].name, conf, S.nd[x].name, m ? m->suspectors[0] : "", m ? m->suspectors[1] : "",
          m ? m->suspectors[2] : "", m ? m->suspectors[3] : "");
    int64_t t = run_until(x, GOSSIP_DEAD, 0, 10000);
    printf("scenario 13 (one accusation of a silent node, 5 nodes): %d confirmations counted "
           "after 200 ms (want 0); DEAD everywhere %.2f s simulated after the accusation\n",
           conf, secs(t < 0 ? -1 : S.now - t0));
}

/* 14. Job texts: records too big for a datagram travel by push-pull.
 *     A node sets a 6000-byte job text (gossip_set_job): its owner pushes the
 *     record to every member through the sync hook (the real codec: SYNC
 *     encoded, decoded, merged), and every other node holds the same text
 *     at the new incarnation at once (limit 2 s simulated). Nobody relays
 *     it again (one push per member), no datagram ever exceeds 1200 bytes
 *     or fails to encode. Then with big records everywhere the small-update
 *     path still works: a forged SUSPECT is refuted (the refutation is a big
 *     record: pushed the same way), a crash is DEAD everywhere within 10 s,
 *     and a leaver (its LEFT record drops the job text) is LEFT everywhere
 *     within 2 s. */
static char jobtext[GOSSIP_JOB_MAX + 1];

static void make_job(int who, int version, size_t len)
{
    int o = snprintf(jobtext, sizeof jobtext, "{\"job\":\"run-%d\",\"v\":%d,\"pad\":\"", who,
                     version);
    for (size_t i = (size_t)o; i < len - 2; i++)
        jobtext[i] = (char)('a' + (i + (size_t)version) % 26);
    memcpy(jobtext + len - 2, "\"}", 3);
}

/* Every running node other than subj holds subj's job text as `text`. */
static bool all_hold_job(int subj, const char *text, uint64_t min_inc)
{
    for (int o = 0; o < S.n; o++) {
        if (o == subj || S.nd[o].down)
            continue;
        const gossip_member *m = see(o, subj);
        if (!m || m->rec.incarnation < min_inc || strcmp(m->rec.job, text) != 0)
            return false;
    }
    return true;
}

static void scenario_job(void)
{
    sim_start(5, false, 14);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "14: 5 nodes did not converge in 3 s");
    run_for(1500);
    reset_tracking();
    char err[256] = "";
    const int j = 1;
    gossip *g = S.nd[j].g;
    uint64_t inc = gossip_self(g)->rec.incarnation;
    make_job(j, 1, 6000);
    CHECK(strlen(jobtext) == 6000, "14: job text of %zu bytes", strlen(jobtext));
    long syncs = S.syncs, dgrams = S.sent, bytes = S.sync_bytes;
    CHECK(gossip_set_job(g, jobtext, S.now, err, sizeof err) == 0, "14: set_job: %s", err);
    CHECK(gossip_self(g)->rec.incarnation == inc + 1 &&
              strcmp(gossip_self(g)->rec.job, jobtext) == 0,
          "14: own record not at incarnation %" PRIu64 " with the job text", inc + 1);
    CHECK(gossip_self(g)->sig.len > GOSSIP_UDP_MAX, "14: the record (%zu bytes) fits a datagram",
          gossip_self(g)->sig.len);
    long pushed = S.syncs - syncs;
    CHECK(pushed == S.n - 1, "14: set_job asked for %ld push-pulls, want one per member (%d)",
          pushed, S.n - 1);
    CHECK(S.sent == dgrams, "14: set_job sent %ld datagrams (the record does not fit one)",
          S.sent - dgrams);
    CHECK(all_hold_job(j, jobtext, inc + 1), "14: not every node holds the job text at once");
    int64_t t = run_until(j, GOSSIP_ALIVE, inc + 1, 2000);
    CHECK(t >= 0 && all_hold_job(j, jobtext, inc + 1),
          "14: not every node holds %s's job text within 2 s", S.nd[j].name);
    printf("scenario 14 (job text): a %zu-byte record reached the other %d nodes through %ld "
           "push-pulls (%ld bytes of SYNC) in %.2f s simulated (limit 2 s)\n",
           gossip_self(g)->sig.len, S.n - 1, pushed, S.sync_bytes - bytes, secs(t));

    /* The same text: nothing happens. Too long: refused, nothing changes. */
    syncs = S.syncs;
    CHECK(gossip_set_job(g, jobtext, S.now, err, sizeof err) == 0 &&
              gossip_self(g)->rec.incarnation == inc + 1 && S.syncs == syncs,
          "14: setting the same text again changed something");
    static char toolong[GOSSIP_JOB_MAX + 1];
    memset(toolong, 'x', GOSSIP_JOB_MAX);
    err[0] = 0;
    CHECK(gossip_set_job(g, toolong, S.now, err, sizeof err) != 0 && strstr(err, "8191") &&
              gossip_self(g)->rec.incarnation == inc + 1 &&
              strcmp(gossip_self(g)->rec.job, jobtext) == 0 && S.syncs == syncs,
          "14: an over-long job text: '%s'", err);
    gossip_record back;
    CHECK(gossip_record_open(&gossip_self(g)->sig, &back, err, sizeof err) == 0 &&
              back.incarnation == inc + 1,
          "14: own signed record after a refusal: %s", err);

    /* Big records everywhere (the longest job text the limit allows on one). */
    for (int i = 0; i < S.n; i++) {
        make_job(i, 2, i == 0 ? GOSSIP_JOB_MAX - 1 : 3000 + 1000 * (size_t)i);
        CHECK(gossip_set_job(S.nd[i].g, jobtext, S.now, err, sizeof err) == 0,
              "14: set_job on %s: %s", S.nd[i].name, err);
    }
    run_for(2000);
    for (int i = 0; i < S.n; i++) {
        make_job(i, 2, i == 0 ? GOSSIP_JOB_MAX - 1 : 3000 + 1000 * (size_t)i);
        CHECK(all_hold_job(i, jobtext, 0), "14: %s's new job text not everywhere",
              S.nd[i].name);
    }
    CHECK(converged(), "14: not all ALIVE with big records");

    /* A refutation is a big record too. */
    const int target = 2, forger = 4;
    uint64_t tinc = gossip_self(S.nd[target].g)->rec.incarnation;
    gossip_update u;
    claim(&u, GOSSIP_SUSPECT, &S.nd[target], tinc, S.nd[forger].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[forger].name, &u, buf, sizeof buf);
    inject(0, S.nd[forger].addr, buf, len);
    CHECK(sees(0, target, GOSSIP_SUSPECT), "14: n0 lists %s as %s after a SUSPECT claim",
          S.nd[target].name, state_of(0, target));
    inject(target, S.nd[forger].addr, buf, len);
    t = run_until(target, GOSSIP_ALIVE, tinc + 1, 2000);
    CHECK(t >= 0, "14: %s's refutation (a big record) not everywhere within 2 s",
          S.nd[target].name);

    /* A crash is still found while every record is big. */
    reset_tracking();
    const int v = 3;
    crash(v);
    t = run_until(v, GOSSIP_DEAD, 0, 10000);
    CHECK(t >= 0, "14: crashed %s not DEAD everywhere within 10 s (big records)", S.nd[v].name);
    printf("scenario 14: with big records everywhere, a refutation spread by push-pull and a "
           "crash was DEAD everywhere after %.2f s simulated (limit 10 s)\n", secs(t));
    for (int o = 0; o < S.n; o++)
        for (int s2 = 0; s2 < S.n; s2++)
            CHECK(o == v || s2 == v || o == s2 ||
                      (TR[o][s2].nsuspect == 0 && TR[o][s2].ndead == 0),
                  "14: %s suspected live %s %d times", S.nd[o].name, S.nd[s2].name,
                  TR[o][s2].nsuspect);

    /* Leaving drops the job text: the LEFT record goes by datagram. */
    const int l = 4;
    uint64_t linc = gossip_self(S.nd[l].g)->rec.incarnation;
    CHECK(gossip_leave(S.nd[l].g, S.now, err, sizeof err) == 0, "14: leave: %s", err);
    CHECK(gossip_self(S.nd[l].g)->rec.job[0] == 0 &&
              gossip_self(S.nd[l].g)->sig.len < GOSSIP_UDP_MAX,
          "14: the LEFT record keeps its job text (%zu bytes)", gossip_self(S.nd[l].g)->sig.len);
    CHECK(gossip_set_job(S.nd[l].g, "{}", S.now, err, sizeof err) != 0 && strstr(err, "left"),
          "14: set_job after leaving: '%s'", err);
    crash(l);
    t = run_until(l, GOSSIP_LEFT, linc + 1, 2000);
    CHECK(t >= 0, "14: %s not LEFT everywhere within 2 s", S.nd[l].name);
    CHECK(S.encode_failures == 0, "14: %ld messages failed to encode", S.encode_failures);
    run_for(20000);
    CHECK(S.encode_failures == 0, "14: %ld messages failed to encode", S.encode_failures);
}

/* 15. The SYNC stays within its limits: a view of 301 members, 260 of them
 *     DEAD (a record and a claim each), holds more updates than one message
 *     may carry (512). gossip_sync_message leaves members out (logged)
 *     rather than failing, this node first; the message encodes within
 *     GOSSIP_TCP_MAX and decodes. */
static int big_view_logs;
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

static void scenario_big_view(void)
{
    sim_end();
    enum { MEMBERS = 300, DEAD = 260 };
    static node other[MEMBERS];
    node self;
    memset(&self, 0, sizeof self);
    S.n = 0;
    char err[256] = "";
    /* Keys without the world's collision check: a collision only drops one. */
    node *all[MEMBERS + 1];
    all[0] = &self;
    for (int i = 0; i <= MEMBERS; i++) {
        node *x = i ? &other[i - 1] : &self;
        if (i) {
            memset(x, 0, sizeof *x);
            all[i] = x;
        }
        snprintf(x->name, sizeof x->name, "m%d", i);
        for (bool taken = true; taken;) {
            if (seeded_keys(&S.keyrng, x, err, sizeof err) != 0 ||
                mesh_overlay_address(PREFIX, x->wg_pub, x->addr, sizeof x->addr, err,
                                     sizeof err) != 0) {
                CHECK(0, "15: keys: %s", err);
                return;
            }
            /* A joiner whose address is taken draws a new key (scenario 18). */
            taken = false;
            for (int k = 0; k < i; k++)
                taken |= strcmp(all[k]->addr, x->addr) == 0;
        }
    }
    if (keys_mesh_id(self.id_pub, MESH_ID, err, sizeof err) != 0) {
        CHECK(0, "15: mesh id: %s", err);
        return;
    }
    gossip_config c;
    memset(&c, 0, sizeof c);
    c.prefix = PREFIX;
    self_record(&self, 1, &c.self);
    make_job(0, 15, 4000);
    memcpy(c.self.job, jobtext, strlen(jobtext) + 1);
    memcpy(c.id_priv, self.id_priv, GOSSIP_KEY_LEN);
    memcpy(c.wg_priv, self.wg_priv, GOSSIP_KEY_LEN);
    c.hooks = (gossip_hooks){.send = quiet_send, .log = count_log};
    gossip *g = NULL;
    if (gossip_create(&g, &c, S.now, err, sizeof err) != 0) {
        CHECK(0, "15: create: %s", err);
        return;
    }
    int known = 0;
    for (int i = 1; i <= MEMBERS; i++) {
        gossip_record r;
        self_record(all[i], 1, &r);
        make_job(i, 15, 4000);
        memcpy(r.job, jobtext, strlen(jobtext) + 1);
        gossip_signed sg;
        if (gossip_record_sign(&r, all[i]->id_priv, &sg, err, sizeof err) != 0 ||
            gossip_admission_sign(&r, self.id_priv, T0 + i, &sg.adm, err, sizeof err) != 0) {
            CHECK(0, "15: sign: %s", err);
            continue;
        }
        known += gossip_add_known(g, &sg, S.now, err, sizeof err) == 0;
    }
    /* Distinct addresses (drawn again on a collision): every one is known. */
    CHECK(known == MEMBERS, "15: only %d of %d members known", known, MEMBERS);
    /* DEAD claims from m1, eight to a datagram. */
    gossip_update u[8];
    uint8_t buf[GOSSIP_UDP_MAX];
    for (int i = 2; i < 2 + DEAD; i += 8) {
        gossip_msg m;
        memset(&m, 0, sizeof m);
        m.type = GOSSIP_MSG_UPDATE;
        for (int k = 0; k < 8 && i + k < 2 + DEAD; k++)
            claim(&u[m.nupdates++], GOSSIP_DEAD, all[i + k], 1, all[1]->name);
        m.updates = u;
        size_t len = encode_msg(&m, all[1]->name, NULL, buf, GOSSIP_UDP_MAX - GOSSIP_MAC_LEN);
        len = seal(all[1], &self, buf, len);
        uint8_t *copy = malloc(len);
        memcpy(copy, buf, len);
        gossip_receive(g, all[1]->addr, PORT, copy, len, S.now);
        free(copy);
    }
    const gossip_member *const *list;
    size_t n = gossip_members(g, &list), ndead = 0;
    for (size_t i = 0; i < n; i++)
        ndead += list[i]->state == GOSSIP_DEAD;
    CHECK(ndead == DEAD, "15: %zu members DEAD, want %d", ndead, DEAD);
    gossip_msg m, back;
    big_view_logs = 0;
    int rc = gossip_sync_message(g, &m, true, err, sizeof err);
    CHECK(rc == 0, "15: sync message: %s", err);
    if (rc == 0) {
        CHECK(m.nupdates <= GOSSIP_MAX_UPDATES && m.nupdates > 400,
              "15: %d updates in the SYNC", m.nupdates);
        CHECK(big_view_logs == 1, "15: leaving members out was logged %d times", big_view_logs);
        gossip_record r0;
        CHECK(m.nupdates > 0 && gossip_record_open(&m.updates[0].rec, &r0, err, sizeof err) == 0 &&
                  strcmp(r0.name, "m0") == 0,
              "15: the first update is not this node's record");
        uint8_t *tcp = malloc(GOSSIP_TCP_MAX);
        size_t len = 0;
        rc = gossip_encode(&m, tcp, GOSSIP_TCP_MAX, &len, err, sizeof err);
        CHECK(rc == 0 && len <= GOSSIP_TCP_MAX, "15: encode the SYNC: %s", err);
        if (rc == 0) {
            rc = gossip_decode(tcp, len, &back, err, sizeof err);
            CHECK(rc == 0 && back.nupdates == m.nupdates, "15: decode the SYNC: %s", err);
            if (rc == 0)
                gossip_msg_free(&back);
        }
        printf("scenario 15 (big view): %zu members, %zu DEAD: the SYNC carries %d updates "
               "(%zu bytes, limits %d updates, %zu bytes)\n",
               n, ndead, m.nupdates, len, GOSSIP_MAX_UPDATES, GOSSIP_TCP_MAX);
        free(tcp);
        gossip_msg_free(&m);
    }
    gossip_destroy(g);
}


/* ------------------------------------------ issue 12: membership is earned */

/* A SYNC from `from` (a member) to `to` carrying one ALIVE record. Returns
 * the number of updates `to` refused. */
static int sync_one_record(int from, int to, const gossip_signed *rec)
{
    gossip_update u;
    memset(&u, 0, sizeof u);
    u.state = GOSSIP_ALIVE;
    u.rec = *rec;
    gossip_msg m, wire;
    memset(&m, 0, sizeof m);
    m.type = GOSSIP_MSG_SYNC;
    m.version = MESH_PROTOCOL_VERSION;
    memcpy(m.mesh_id, MESH_ID, GOSSIP_MESH_ID_LEN);
    snprintf(m.from, sizeof m.from, "%s", S.nd[from].name);
    m.nupdates = 1;
    m.updates = &u;
    int refused = -1;
    if (over_tcp(&m, &wire) == 0) {
        refused = gossip_merge(S.nd[to].g, &wire, S.now);
        gossip_msg_free(&wire);
    }
    return refused;
}

/* 16. Issue 12, 1: a machine joined without an invite. A self-signed record
 *     sent in one SYNC was accepted as a new member (and the daemon then
 *     added a WireGuard peer for its key). Now a record enters only with an
 *     admission a member signed (gossip_admit, after JOIN checked the
 *     invite) or the founder's own (the mesh id derives from its identity).
 *     Each forgery is refused at every member: no new member, no changed
 *     hook (the daemon adds WireGuard peers from that hook). */
static void expect_not_admitted(const char *what, const gossip_signed *s, const char *want)
{
    long changed = nchanged;
    for (int o = 0; o < S.n; o++) {
        int from = o == 1 ? 2 : 1;
        S.now += 1;
        int logs = S.nd[o].nlogs;
        int refused = sync_one_record(from, o, s);
        CHECK(refused == 1, "16: %s: %s refused %d updates, want 1", what, S.nd[o].name,
              refused);
        CHECK(S.nd[o].nlogs > logs && strstr(S.nd[o].lastlog, want),
              "16: %s: %s logged \"%s\", want \"%s\"", what, S.nd[o].name, S.nd[o].lastlog,
              want);
        const gossip_member *const *list;
        CHECK(gossip_members(S.nd[o].g, &list) == (size_t)S.n, "16: %s: %s lists %zu members",
              what, S.nd[o].name, gossip_members(S.nd[o].g, &list));
    }
    CHECK(nchanged == changed, "16: %s: %ld member changes (WireGuard peers) followed", what,
          nchanged - changed);
    printf("    refused %s: %s\n", what, S.nd[0].lastlog);
}

static void scenario_admission(void)
{
    sim_start(4, false, 16);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "16: 4 nodes did not converge in 3 s");
    printf("scenario 16 (records without a valid admission):\n");
    char err[512] = "";
    node x;
    memset(&x, 0, sizeof x);
    x.idx = -1;
    snprintf(x.name, sizeof x.name, "intruder");
    new_keys(&x);
    gossip_record r;
    gossip_signed sg;
    self_record(&x, 1, &r);
    CHECK(gossip_record_sign(&r, x.id_priv, &sg, err, sizeof err) == 0, "16: sign: %s", err);
    expect_not_admitted("a self-signed record without an admission", &sg, "not admitted");
    /* Admitted by itself, as if it founded the mesh (the mesh id is n0's). */
    CHECK(gossip_admission_sign(&r, x.id_priv, S.now, &sg.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    expect_not_admitted("a record admitted by itself", &sg, "not admitted");
    /* An admission naming a member as admitter, signed by the intruder. */
    gossip_signed forged = sg;
    memcpy(forged.adm.by, S.nd[1].id_pub, GOSSIP_KEY_LEN);
    expect_not_admitted("an admission by n1 forged by the intruder", &forged,
                        "admission does not verify");
    /* A real admission, but for another name, another key, another time. */
    gossip_record other = r;
    snprintf(other.name, sizeof other.name, "guest");
    CHECK(gossip_admission_sign(&other, S.nd[1].id_priv, S.now, &forged.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    expect_not_admitted("n1's admission of the name guest on a record named intruder", &forged,
                        "admission does not verify");
    gossip_signed moved = forged;
    CHECK(gossip_admission_sign(&r, S.nd[1].id_priv, S.now, &moved.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    moved.adm.at_ms += 1;
    expect_not_admitted("n1's admission with its time changed", &moved, "admission does not verify");
    /* Backdated: n1 (a member) dates an admission an hour before its own, to
     * win a collision against members admitted since. */
    gossip_signed back = sg;
    CHECK(gossip_admission_sign(&r, S.nd[1].id_priv, see(0, 1)->sig.adm.at_ms - 3600000,
                                &back.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    expect_not_admitted("an admission n1 dated an hour before its own", &back,
                        "before n1 was admitted itself");
    /* Another identity's admission (a former member's, say: not in the view). */
    node former;
    memset(&former, 0, sizeof former);
    new_keys(&former);
    CHECK(gossip_admission_sign(&r, former.id_priv, S.now, &forged.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    expect_not_admitted("an admission by an identity that is no member", &forged,
                        "not admitted");
    /* The control: the same record with n1's real admission spreads. */
    CHECK(gossip_admission_sign(&r, S.nd[1].id_priv, S.now, &sg.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    S.allow_unknown = true; /* the others announce it to it; it is not running */
    CHECK(sync_one_record(1, 0, &sg) == 0, "16: n0 refused the intruder admitted by n1");
    run_for(2000);
    for (int o = 0; o < S.n; o++)
        CHECK(gossip_find_addr(S.nd[o].g, x.addr) != NULL, "16: %s does not know a member n1 "
              "admitted", S.nd[o].name);
    printf("    a record n1 admitted reached every member\n");
}

/* 17. Issue 12, 7: a newcomer took a dead member's name, after which the
 *     real member could never come back. A name belongs to its identity:
 *     free once its holder left, or GOSSIP_NAME_HOLD_MS after it died; the
 *     same identity gets it back (even with a new WireGuard key). */
static void scenario_names(void)
{
    sim_start(5, false, 17);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "17: 5 nodes did not converge in 3 s");
    printf("scenario 17 (names belong to identities):\n");
    const int dead = 2, leaver = 3;
    char err[512] = "";
    uint64_t inc = gossip_self(S.nd[dead].g)->rec.incarnation;
    crash(dead);
    CHECK(run_until(dead, GOSSIP_DEAD, 0, 20000) >= 0, "17: %s not DEAD everywhere",
          S.nd[dead].name);
    node newcomer;
    memset(&newcomer, 0, sizeof newcomer);
    newcomer.idx = -1;
    snprintf(newcomer.name, sizeof newcomer.name, "%s", S.nd[dead].name);
    new_keys(&newcomer);
    gossip_record r;
    gossip_signed sg;
    self_record(&newcomer, 1, &r);
    CHECK(gossip_record_sign(&r, newcomer.id_priv, &sg, err, sizeof err) == 0, "17: sign: %s",
          err);
    int rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "name belongs to another member"),
          "17: a newcomer took dead %s's name (%s)", S.nd[dead].name, rc ? err : "admitted");
    printf("    refused a newcomer named %s while %s is dead: %s\n", S.nd[dead].name,
           S.nd[dead].name, err);
    /* The real member comes back with its name. */
    node *x = &S.nd[dead];
    gossip_destroy(x->g);
    x->g = NULL;
    start_node(x, inc + 1);
    for (int o = 0; o < S.n; o++)
        if (o != dead)
            gossip_add_known(x->g, &gossip_self(S.nd[o].g)->sig, S.now, err, sizeof err);
    CHECK(run_until(dead, GOSSIP_ALIVE, inc + 1, 10000) >= 0, "17: %s did not come back",
          x->name);
    /* The same identity with a new WireGuard key (its wg.key lost) keeps its
     * name: admitted while its old key is still in the view. */
    crash(dead);
    CHECK(run_until(dead, GOSSIP_DEAD, 0, 20000) >= 0, "17: %s not DEAD again", x->name);
    int64_t died = S.now;
    node again = *x;
    new_keys(&again);
    memcpy(again.id_priv, x->id_priv, KEYS_LEN);
    memcpy(again.id_pub, x->id_pub, KEYS_LEN);
    self_record(&again, inc + 5, &r);
    CHECK(gossip_record_sign(&r, again.id_priv, &sg, err, sizeof err) == 0, "17: sign: %s", err);
    S.allow_unknown = true;
    rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc == 0, "17: %s's own identity with a new key refused its name: %s", x->name, err);
    /* A member that left frees its name at once. */
    CHECK(gossip_leave(S.nd[leaver].g, S.now, err, sizeof err) == 0, "17: leave: %s", err);
    crash(leaver);
    CHECK(run_until(leaver, GOSSIP_LEFT, 0, 3000) >= 0, "17: %s not LEFT", S.nd[leaver].name);
    node heir;
    memset(&heir, 0, sizeof heir);
    heir.idx = -1;
    snprintf(heir.name, sizeof heir.name, "%s", S.nd[leaver].name);
    new_keys(&heir);
    self_record(&heir, 1, &r);
    CHECK(gossip_record_sign(&r, heir.id_priv, &sg, err, sizeof err) == 0, "17: sign: %s", err);
    rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc == 0, "17: the name of %s, which left, is not free: %s", S.nd[leaver].name, err);
    /* A dead member's name is free after GOSSIP_NAME_HOLD_MS. */
    node late;
    memset(&late, 0, sizeof late);
    late.idx = -1;
    snprintf(late.name, sizeof late.name, "%s", S.nd[dead].name);
    new_keys(&late);
    /* n2's old key is dead, and so is its new one (it never ran). */
    run_for(20000);
    CHECK(gossip_find_addr(S.nd[0].g, again.addr) &&
              gossip_find_addr(S.nd[0].g, again.addr)->state == GOSSIP_DEAD,
          "17: n2's new key is not dead at n0");
    died = S.now;
    S.now = died + GOSSIP_NAME_HOLD_MS - 60000;
    run_for(1000);
    self_record(&late, 1, &r);
    CHECK(gossip_record_sign(&r, late.id_priv, &sg, err, sizeof err) == 0, "17: sign: %s", err);
    rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc != 0, "17: %s's name taken before %lld h", x->name,
          (long long)(GOSSIP_NAME_HOLD_MS / 3600000));
    S.now = died + GOSSIP_NAME_HOLD_MS + 60000;
    run_for(1000);
    rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc == 0, "17: %s's name not free %lld h after it died: %s", x->name,
          (long long)(GOSSIP_NAME_HOLD_MS / 3600000), err);
    printf("    the same identity got its name back (new key too); a left member's name was "
           "free at once, a dead one's after %lld h\n",
           (long long)(GOSSIP_NAME_HOLD_MS / 3600000));
}

/* 18. Issue 12, 11: overlay addresses collide (a hash of the key in a
 *     /16: among 300 members a collision is more likely than not). The
 *     admitting member refuses a joiner whose address is taken
 *     (GOSSIP_ADDRESS_TAKEN) and the joiner draws a new key: 1,000 members
 *     join one view, every address distinct. A collision made in a
 *     partition (two admitters, one address) is resolved the same way
 *     everywhere when it heals: the older admission keeps the address. */
static void quiet_send(void *ctx, const char *addr, int port, const uint8_t *buf, size_t len);
static void count_log(void *ctx, const char *line);

static void scenario_collisions(void)
{
    sim_end();
    printf("scenario 18 (overlay address collisions):\n");
    enum { JOINERS = 1000 };
    char err[512] = "";
    S.keyrng = 0x18;
    S.now = T0;
    node *self = calloc(1, sizeof *self);
    snprintf(self->name, sizeof self->name, "m0");
    if (seeded_keys(&S.keyrng, self, err, sizeof err) != 0 ||
        mesh_overlay_address(PREFIX, self->wg_pub, self->addr, sizeof self->addr, err,
                             sizeof err) != 0 ||
        keys_mesh_id(self->id_pub, MESH_ID, err, sizeof err) != 0) {
        CHECK(0, "18: keys: %s", err);
        free(self);
        return;
    }
    gossip_config c;
    memset(&c, 0, sizeof c);
    c.prefix = PREFIX;
    self_record(self, 1, &c.self);
    memcpy(c.id_priv, self->id_priv, GOSSIP_KEY_LEN);
    memcpy(c.wg_priv, self->wg_priv, GOSSIP_KEY_LEN);
    c.hooks = (gossip_hooks){.send = quiet_send, .log = count_log};
    gossip *g = NULL;
    if (gossip_create(&g, &c, S.now, err, sizeof err) != 0) {
        CHECK(0, "18: create: %s", err);
        free(self);
        return;
    }
    int retries = 0, admitted = 0;
    node j;
    for (int i = 1; i <= JOINERS; i++) {
        memset(&j, 0, sizeof j);
        snprintf(j.name, sizeof j.name, "m%d", i);
        for (int tries = 0; tries < 8; tries++) {
            if (seeded_keys(&S.keyrng, &j, err, sizeof err) != 0 ||
                mesh_overlay_address(PREFIX, j.wg_pub, j.addr, sizeof j.addr, err,
                                     sizeof err) != 0)
                break;
            gossip_record r;
            gossip_signed sg;
            self_record(&j, 1, &r);
            if (gossip_record_sign(&r, j.id_priv, &sg, err, sizeof err) != 0)
                break;
            S.now += 1;
            if (gossip_admit(g, &sg, S.now, err, sizeof err) == 0) {
                admitted++;
                break;
            }
            CHECK(strncmp(err, GOSSIP_ADDRESS_TAKEN, strlen(GOSSIP_ADDRESS_TAKEN)) == 0,
                  "18: m%d refused: %s", i, err);
            retries++;
        }
    }
    const gossip_member *const *list;
    size_t n = gossip_members(g, &list);
    int dup = 0;
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
            dup += strcmp(list[a]->rec.address, list[b]->rec.address) == 0;
    CHECK(admitted == JOINERS && n == JOINERS + 1, "18: %d of %d admitted, %zu in the view",
          admitted, JOINERS, n);
    CHECK(dup == 0, "18: %d addresses appear twice in the view", dup);
    CHECK(retries > 0, "18: no collision in %d seeded joiners (the retry is untested)", JOINERS);
    printf("    %d members joined one view with distinct addresses; %d joiners drew a new key "
           "after GOSSIP_ADDRESS_TAKEN\n", admitted, retries);
    gossip_destroy(g);
    free(self);

    /* A partition: n0 and n2 each admit a joiner; both joiners' keys give
     * one address. */
    sim_start(4, false, 18);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "18: 4 nodes did not converge in 3 s");
    S.allow_unknown = true; /* the joiners do not run here */
    node a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    snprintf(a.name, sizeof a.name, "early");
    snprintf(b.name, sizeof b.name, "late");
    static struct { node k; } pool[4096];
    int found = -1;
    for (int i = 0; i < 4096 && found < 0; i++) {
        seeded_keys(&S.keyrng, &pool[i].k, err, sizeof err);
        mesh_overlay_address(PREFIX, pool[i].k.wg_pub, pool[i].k.addr, sizeof pool[i].k.addr,
                             err, sizeof err);
        for (int k = 0; k < i && found < 0; k++)
            if (strcmp(pool[k].k.addr, pool[i].k.addr) == 0 && node_by_addr(pool[i].k.addr) < 0) {
                found = i;
                a = pool[k].k;
                b = pool[i].k;
            }
    }
    CHECK(found >= 0, "18: no colliding pair among 4096 seeded keys");
    if (found < 0)
        return;
    snprintf(a.name, sizeof a.name, "early");
    snprintf(b.name, sizeof b.name, "late");
    S.nd[0].group = S.nd[1].group = 0;
    S.nd[2].group = S.nd[3].group = 1;
    gossip_record r;
    gossip_signed sa, sb;
    self_record(&a, 1, &r);
    CHECK(gossip_record_sign(&r, a.id_priv, &sa, err, sizeof err) == 0, "18: sign: %s", err);
    CHECK(gossip_admit(S.nd[0].g, &sa, S.now, err, sizeof err) == 0, "18: n0 admits early: %s",
          err);
    S.now += 1000;
    self_record(&b, 1, &r);
    CHECK(gossip_record_sign(&r, b.id_priv, &sb, err, sizeof err) == 0, "18: sign: %s", err);
    CHECK(gossip_admit(S.nd[2].g, &sb, S.now, err, sizeof err) == 0, "18: n2 admits late: %s",
          err);
    run_for(20000);
    S.nd[2].group = S.nd[3].group = 0;
    int64_t t = run_until(-1, GOSSIP_ALIVE, 0, 40000);
    run_for(40000);
    bool agree = true;
    for (int o = 0; o < S.n; o++) {
        const gossip_member *m = gossip_find_addr(S.nd[o].g, a.addr);
        if (!m || memcmp(m->rec.wg_pub, a.wg_pub, GOSSIP_KEY_LEN) != 0)
            agree = false;
    }
    CHECK(t >= 0 && agree, "18: after the heal the members do not all give %s to the older "
          "admission", a.addr);
    printf("    a collision made in a partition (%s, admitted 1 s apart): after the heal every "
           "member gives it to the older admission\n", a.addr);

    /* One name given twice in a partition (two identities): the older
     * admission keeps it everywhere, the other is out of every view. */
    node t1, t2;
    memset(&t1, 0, sizeof t1);
    memset(&t2, 0, sizeof t2);
    new_keys(&t1);
    new_keys(&t2);
    snprintf(t1.name, sizeof t1.name, "twin");
    snprintf(t2.name, sizeof t2.name, "twin");
    S.nd[2].group = S.nd[3].group = 1;
    S.refusals_ok = true; /* the younger twin's record, until every view has the older */
    run_for(20000);
    self_record(&t2, 1, &r);
    CHECK(gossip_record_sign(&r, t2.id_priv, &sb, err, sizeof err) == 0, "18: sign: %s", err);
    CHECK(gossip_admit(S.nd[2].g, &sb, S.now, err, sizeof err) == 0, "18: n2 admits twin: %s",
          err);
    S.now += 1000;
    self_record(&t1, 1, &r);
    CHECK(gossip_record_sign(&r, t1.id_priv, &sa, err, sizeof err) == 0, "18: sign: %s", err);
    CHECK(gossip_admit(S.nd[0].g, &sa, S.now, err, sizeof err) == 0, "18: n0 admits twin: %s",
          err);
    run_for(20000);
    S.nd[2].group = S.nd[3].group = 0;
    t = run_until(-1, GOSSIP_ALIVE, 0, 40000);
    run_for(40000);
    agree = true;
    for (int o = 0; o < S.n; o++) {
        const gossip_member *m2 = gossip_find_addr(S.nd[o].g, t2.addr);
        if (!m2 || gossip_find_addr(S.nd[o].g, t1.addr))
            agree = false;
    }
    CHECK(t >= 0 && agree, "18: after the heal the members do not all give the name twin to "
          "the older admission");
    printf("    one name admitted twice in a partition: after the heal every member keeps the "
           "older admission's\n");
}

/* 19. The wall clock is stepped while the monotonic clock runs on (NTP, a
 *     laptop's suspend, an operator): gossip's timers run on now_ms only,
 *     so with the wall clock set back 1 h and then forward 1 day nobody is
 *     suspected, probes go on at their rate (no timer held back for an
 *     hour), a crash is still found DEAD no sooner than the suspicion
 *     timeout and no later than 10 s (no timer fired at once), while what
 *     is signed carries the wall clock: a record's signed_ms is the stepped
 *     time, and a member whose clock went back before its own admission
 *     still admits a joiner the others accept (its admission is dated no
 *     earlier than its own). Before the daemon's timers moved to
 *     CLOCK_MONOTONIC the daemon gave gossip one real-time clock for both. */
static void scenario_clock_steps(void)
{
    char err[512] = "";
    sim_start(4, false, 19);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "19: 4 nodes did not converge in 3 s");
    run_for(5000);
    reset_tracking();
    long s0 = S.sent;
    run_for(10000);
    long calm = S.sent - s0;

    S.wall_off = -(int64_t)3600 * 1000; /* back 1 h */
    s0 = S.sent;
    run_for(10000);
    long back = S.sent - s0;
    CHECK(gossip_set_job(S.nd[1].g, "{\"clock\":\"back\"}", S.now, err, sizeof err) == 0,
          "19: set_job: %s", err);
    CHECK(gossip_self(S.nd[1].g)->rec.signed_ms == S.now + S.wall_off,
          "19: n1's record signed at %lld, not the wall clock %lld",
          (long long)gossip_self(S.nd[1].g)->rec.signed_ms, (long long)(S.now + S.wall_off));

    /* A joiner admitted by n1, whose wall clock is now an hour before its
     * own admission. */
    S.n = 5;
    node *x = &S.nd[4];
    memset(x, 0, sizeof *x);
    x->idx = 4;
    snprintf(x->name, sizeof x->name, "n4");
    new_keys(x);
    join(4, 1);
    const gossip_member *jm = see(1, 4);
    CHECK(jm && jm->sig.adm.at_ms >= see(1, 1)->sig.adm.at_ms,
          "19: n1 dated n4's admission %lld, before its own %lld",
          jm ? (long long)jm->sig.adm.at_ms : -1LL, (long long)see(1, 1)->sig.adm.at_ms);
    int64_t tj = run_until(-1, GOSSIP_ALIVE, 0, 5000);
    CHECK(tj >= 0, "19: n4, admitted by n1 with its clock set back 1 h, is not ALIVE "
          "everywhere after 5 s");

    S.wall_off = (int64_t)24 * 3600 * 1000; /* forward 1 day */
    s0 = S.sent;
    run_for(10000);
    long fwd = S.sent - s0;
    for (int o = 0; o < S.n; o++)
        for (int m = 0; m < S.n; m++)
            CHECK(TR[o][m].nsuspect == 0 && TR[o][m].ndead == 0,
                  "19: with the wall clock stepped, %s suspected %s %d times (dead %d)",
                  S.nd[o].name, S.nd[m].name, TR[o][m].nsuspect, TR[o][m].ndead);
    /* 4 nodes then 5 probe once a second each: the rate per node holds. */
    double r_back = (double)back / calm, r_fwd = (double)fwd / calm * 4.0 / 5.0;
    CHECK(r_back > 0.75 && r_back < 1.33 && r_fwd > 0.75 && r_fwd < 1.33,
          "19: datagrams per 10 s: %ld steady, %ld after 1 h back, %ld after 1 day forward "
          "(a timer held back or fired early)", calm, back, fwd);

    crash(3);
    int64_t t0 = S.now;
    int64_t td = run_until(3, GOSSIP_DEAD, 0, 10000);
    CHECK(td >= 2500, "19: n3 found DEAD %.2f s after its crash (before the suspicion "
          "timeout: a timer fired early)", secs(td));
    CHECK(td >= 0, "19: n3 not DEAD everywhere 10 s after its crash (a timer never fired)");
    CHECK(TR[0][3].nsuspect >= 1 && TR[0][3].suspect_ms - t0 >= 500,
          "19: n0 suspected n3 %.2f s after the crash", secs(TR[0][3].suspect_ms - t0));
    printf("scenario 19 (wall clock 1 h back, then 1 day forward): no suspicion; datagrams per "
           "10 s %ld steady, %ld back, %ld forward (5 nodes); a joiner admitted across the "
           "step is ALIVE everywhere after %.2f s; a crash DEAD everywhere after %.2f s\n",
           calm, back, fwd, secs(tj), secs(td));
}

int main(void)
{
    S.verbose = getenv("GOSSIP_TEST_VERBOSE") != NULL;
    gossip_timing t;
    gossip_timing_default(&t);
    printf("timing: probe %d ms, probe timeout %d ms, indirect %d, suspicion %d..%d ms, "
           "sync %d ms, retransmit x%d; step %d ms\n",
           t.probe_interval_ms, t.probe_timeout_ms, t.indirect_k, t.suspicion_min_ms,
           t.suspicion_max_ms, t.sync_interval_ms, t.retransmit_mult, STEP_MS);
    scenario_converge();
    scenario_crash();
    scenario_broken_link();
    scenario_loss();
    scenario_refute();
    scenario_restart();
    scenario_leave();
    scenario_refusals();
    scenario_observed();
    scenario_dropped();
    scenario_partition();
    scenario_incarnation_wrap();
    scenario_precedence();
    scenario_confirmations();
    scenario_job();
    scenario_big_view();
    scenario_admission();
    scenario_names();
    scenario_collisions();
    scenario_clock_steps();
    sim_end();
    fflush(stdout);
    if (failures) {
        fprintf(stderr, "test_gossip: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gossip: ok\n");
    return 0;
}

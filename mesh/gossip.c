/* gossip.c — SWIM membership with Lifeguard's suspicion timeouts, as a pure
 * state machine: datagrams and ticks in, datagrams and hooks out. The
 * daemon (node/) owns the sockets, WireGuard and the clocks: every now_ms
 * here is monotonic and drives timers only; the timestamps signed (a
 * record's signed_ms, an admission's at_ms) come from the wall_ms hook.
 *
 * Every ALIVE or LEFT claim is a record its owner signed; SUSPECT and DEAD
 * are claims about a member's incarnation, made by whoever probed it. The
 * owner refutes suspicion by signing its record again with a higher
 * incarnation. State changes are sent to every member at once (small
 * meshes lose updates to gossip alone, see notes/wireguard.md) and ride on
 * the next probes; a periodic TCP push-pull heals whatever was missed. A
 * record too big for a datagram (a long job text) is pushed to every member
 * through the sync hook instead, and never piggybacked. */
#include "mesh.h"

#include "keys.h"
#include "mesh_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The view's bound (a SYNC carries at most GOSSIP_MAX_UPDATES of it). */
#define GOSSIP_MAX_MEMBERS 1024
/* Room for a datagram's map: its MAC follows. */
#define UDP_MAP_MAX (GOSSIP_UDP_MAX - GOSSIP_MAC_LEN)
#define GOSSIP_MAX_FORWARDS 64
#define GOSSIP_MAX_PIGGYBACK 8
/* What a PING or an ACK adds to an UPDATE carrying the same updates, at
 * most: "seq" (4 + 5 bytes) and "obs" (4 + 2 + 63). An update that fits an
 * UPDATE datagram with this much to spare fits any message alone. */
#define PIGGYBACK_EXTRA 80
/* Bounds for gossip_sync_message's size budget: the message without its
 * updates (a JOIN_REPLY's reason included), an ALIVE/LEFT update besides
 * its record's bytes, and a SUSPECT/DEAD claim. */
#define SYNC_HEAD_MAX 1024
#define SYNC_RECORD_EXTRA 96
#define SYNC_CLAIM_MAX 128

typedef struct {
    gossip_update u;
    uint8_t key[GOSSIP_KEY_LEN]; /* whose state: one queued update per member */
    int sent;                    /* times piggybacked */
} gossip_queued;

typedef struct {
    uint32_t seq;          /* the PING we sent to the target */
    uint32_t orig_seq;     /* the requester's PING_REQ seq */
    char addr[GOSSIP_ADDR_MAX];
    int port;
    int64_t expires_ms;
} gossip_forward;

struct gossip {
    char prefix[64];
    gossip_timing t;
    gossip_hooks h;
    uint8_t id_priv[GOSSIP_KEY_LEN];
    uint8_t wg_priv[GOSSIP_KEY_LEN];
    uint64_t auth_drops;       /* unauthenticated datagrams and frames */
    int64_t auth_log_ms;       /* when the last of them was logged */
    uint64_t rng;
    gossip_member *m[GOSSIP_MAX_MEMBERS]; /* m[0] is self */
    size_t n;
    gossip_queued *queue;
    size_t nqueue;
    gossip_forward fwd[GOSSIP_MAX_FORWARDS];
    uint32_t seq;
    /* The probe in flight. */
    int probe_target;      /* index into m, -1: none */
    uint32_t probe_seq;
    int64_t probe_start_ms;
    bool probe_acked, probe_indirect;
    int64_t next_probe_ms, next_sync_ms;
    bool announced; /* this node's record sent to everyone once */
    /* Round-robin order of the members to probe. */
    int order[GOSSIP_MAX_MEMBERS];
    size_t norder, order_pos;
    /* gossip_merge: the sender of the message being merged (an owner that
     * pushes its own big record needs no relay). */
    const char *via;
    gossip_update pig[GOSSIP_MAX_PIGGYBACK]; /* send_msg's piggybacked updates */
};

void gossip_timing_default(gossip_timing *t)
{
    t->probe_interval_ms = 1000;
    t->probe_timeout_ms = 500;
    t->indirect_k = 3;
    t->suspicion_min_ms = 2500;
    t->suspicion_max_ms = 5000;
    t->sync_interval_ms = 15000;
    t->retransmit_mult = 4;
}

const char *gossip_state_name(gossip_state s)
{
    switch (s) {
    case GOSSIP_ALIVE: return "alive";
    case GOSSIP_SUSPECT: return "suspect";
    case GOSSIP_DEAD: return "dead";
    case GOSSIP_LEFT: return "left";
    }
    return "?";
}

static void glog(gossip *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void glog(gossip *g, const char *fmt, ...)
{
    if (!g->h.log) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    g->h.log(g->h.ctx, line);
}

static uint64_t rng_next(gossip *g)
{
    /* splitmix64: the order only needs to differ between nodes. */
    uint64_t z = (g->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static gossip_member *self_of(gossip *g) { return g->m[0]; }

static int find_key(const gossip *g, const uint8_t key[GOSSIP_KEY_LEN])
{
    for (size_t i = 0; i < g->n; i++)
        if (memcmp(g->m[i]->rec.wg_pub, key, GOSSIP_KEY_LEN) == 0) return (int)i;
    return -1;
}

const gossip_member *gossip_find_addr(const gossip *g, const char *addr)
{
    for (size_t i = 0; i < g->n; i++)
        if (!g->m[i]->displaced && strcmp(g->m[i]->rec.address, addr) == 0) return g->m[i];
    return NULL;
}

/* The other member at addr (not this node, not displaced), or NULL. */
static gossip_member *peer_at(const gossip *g, const char *addr)
{
    for (size_t i = 1; i < g->n; i++)
        if (!g->m[i]->displaced && strcmp(g->m[i]->rec.address, addr) == 0) return g->m[i];
    return NULL;
}

uint64_t gossip_auth_drops(const gossip *g) { return g->auth_drops; }

const gossip_member *gossip_self(const gossip *g) { return g->m[0]; }

size_t gossip_members(const gossip *g, const gossip_member *const **list)
{
    *list = (const gossip_member *const *)g->m;
    return g->n;
}

/* Members that count for the suspicion formula and probing. */
static size_t live_count(const gossip *g)
{
    size_t c = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->m[i]->state == GOSSIP_ALIVE || g->m[i]->state == GOSSIP_SUSPECT) c++;
    return c;
}

static void notify(gossip *g, const gossip_member *m, int before)
{
    if (g->h.changed) g->h.changed(g->h.ctx, m, before);
}

/* ---- the update queue ---- */

/* Whether an UPDATE datagram carrying u alone fits GOSSIP_UDP_MAX with
 * `spare` bytes left over. */
static bool update_fits(gossip *g, const gossip_update *u, size_t spare)
{
    uint8_t buf[UDP_MAP_MAX];
    size_t len = 0;
    char err[256];
    gossip_msg m = {.type = GOSSIP_MSG_UPDATE, .version = MESH_PROTOCOL_VERSION, .nupdates = 1,
                    .updates = (gossip_update *)u};
    memcpy(m.mesh_id, self_of(g)->rec.mesh_id, GOSSIP_MESH_ID_LEN);
    snprintf(m.from, sizeof m.from, "%s", self_of(g)->rec.name);
    return gossip_encode(&m, buf, sizeof buf, &len, err, sizeof err) == 0 &&
           len + spare <= UDP_MAP_MAX;
}

/* Queues u to ride on the next PINGs and ACKs. An update that might not fit
 * one of them alone is not queued (it travels by push-pull), and it still
 * replaces the older claim about the member. */
static void queue_update(gossip *g, const gossip_update *u, const uint8_t key[GOSSIP_KEY_LEN])
{
    bool fits = update_fits(g, u, PIGGYBACK_EXTRA);
    for (size_t i = 0; i < g->nqueue; i++)
        if (memcmp(g->queue[i].key, key, GOSSIP_KEY_LEN) == 0) {
            if (!fits) {
                memmove(&g->queue[i], &g->queue[i + 1], (g->nqueue - i - 1) * sizeof *g->queue);
                g->nqueue--;
                return;
            }
            g->queue[i].u = *u; /* the newest claim about a member replaces the older */
            g->queue[i].sent = 0;
            return;
        }
    if (!fits) return;
    gossip_queued *q = realloc(g->queue, (g->nqueue + 1) * sizeof *q);
    if (!q) return; /* the periodic sync carries it anyway */
    g->queue = q;
    g->queue[g->nqueue].u = *u;
    memcpy(g->queue[g->nqueue].key, key, GOSSIP_KEY_LEN);
    g->queue[g->nqueue].sent = 0;
    g->nqueue++;
}

static int retransmit_limit(const gossip *g)
{
    double n = (double)g->n;
    int l = g->t.retransmit_mult * (int)ceil(log10(n + 1.0));
    return l < 1 ? 1 : l;
}

static void update_of(const gossip *g, const gossip_member *m, gossip_update *u)
{
    (void)g;
    memset(u, 0, sizeof *u);
    u->state = m->state;
    if (m->state == GOSSIP_ALIVE || m->state == GOSSIP_LEFT) {
        u->rec = m->sig;
    } else {
        memcpy(u->wg_pub, m->rec.wg_pub, GOSSIP_KEY_LEN);
        u->incarnation = m->state_inc;
        snprintf(u->from, sizeof u->from, "%s",
                 m->state == GOSSIP_SUSPECT && m->suspectors[0][0] ? m->suspectors[0]
                                                                   : self_of((gossip *)g)->rec.name);
    }
}

static void send_msg(gossip *g, const char *addr, int port, gossip_msg *m, bool piggyback)
{
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = 0;
    char err[256];
    gossip_update *ups = g->pig;
    const gossip_member *to = peer_at(g, addr);
    if (!to) {
        glog(g, "gossip: no member at %s to send a message to", addr);
        return;
    }
    int idx[GOSSIP_MAX_PIGGYBACK];
    int nup = 0;
    m->version = MESH_PROTOCOL_VERSION;
    memcpy(m->mesh_id, self_of(g)->rec.mesh_id, GOSSIP_MESH_ID_LEN);
    snprintf(m->from, sizeof m->from, "%s", self_of(g)->rec.name);
    if (piggyback && m->nupdates == 0) {
        /* Least-sent first, as many as fit: one that does not fit beside
         * the others is skipped (it goes first in a later message, once the
         * others have been sent more often), so a big one never holds back
         * the small ones behind it. */
        int limit = retransmit_limit(g);
        for (int round = 0; round < limit && nup < GOSSIP_MAX_PIGGYBACK; round++)
            for (size_t i = 0; i < g->nqueue && nup < GOSSIP_MAX_PIGGYBACK; i++) {
                if (g->queue[i].sent != round) continue;
                ups[nup] = g->queue[i].u;
                m->updates = ups;
                m->nupdates = nup + 1;
                if (gossip_encode(m, buf, UDP_MAP_MAX, &len, err, sizeof err) != 0) {
                    /* Not even alone (queue_update keeps such out): spent,
                     * so it leaves the queue below. */
                    if (nup == 0) g->queue[i].sent = limit;
                    continue;
                }
                idx[nup++] = (int)i;
            }
        m->nupdates = nup;
        m->updates = nup ? ups : NULL;
    }
    if (gossip_encode(m, buf, UDP_MAP_MAX, &len, err, sizeof err) != 0) {
        glog(g, "gossip: cannot encode a message to %s: %s", addr, err);
        return;
    }
    /* Only the holder of the member's or this node's WireGuard key can
     * compute this: a local process that binds our overlay address cannot. */
    gossip_mac(to->mac_key, buf, len, buf + len);
    len += GOSSIP_MAC_LEN;
    g->h.send(g->h.ctx, addr, port, buf, len);
    if (piggyback) {
        for (int k = 0; k < nup; k++) g->queue[idx[k]].sent++;
        /* Drop what has been sent often enough. */
        int limit = retransmit_limit(g);
        size_t w = 0;
        for (size_t i = 0; i < g->nqueue; i++)
            if (g->queue[i].sent < limit) g->queue[w++] = g->queue[i];
        g->nqueue = w;
    }
}

/* A state change goes to every member now (and rides later probes). A
 * record too big for an UPDATE datagram is pushed to every alive and
 * suspect member over TCP instead (the sync hook), by its owner and by
 * whoever learns it other than from its owner's own push (which reaches
 * every member by itself). */
static void broadcast(gossip *g, const gossip_member *about)
{
    gossip_update u;
    update_of(g, about, &u);
    queue_update(g, &u, about->rec.wg_pub);
    if (!update_fits(g, &u, 0)) {
        if (!about->self && g->via && strcmp(g->via, about->rec.name) == 0) return;
        if (!g->h.sync) {
            glog(g, "gossip: the record of %s (%zu bytes) does not fit a datagram and there "
                 "is no sync hook; members learn it only from push-pulls they start",
                 about->rec.name, u.rec.len);
            return;
        }
        for (size_t i = 1; i < g->n; i++) {
            const gossip_member *m = g->m[i];
            if (m->state != GOSSIP_ALIVE && m->state != GOSSIP_SUSPECT) continue;
            if (m == about) continue;
            g->h.sync(g->h.ctx, m);
        }
        return;
    }
    for (size_t i = 1; i < g->n; i++) {
        const gossip_member *m = g->m[i];
        if (m->state != GOSSIP_ALIVE && m->state != GOSSIP_SUSPECT) continue;
        gossip_msg msg = {.type = GOSSIP_MSG_UPDATE, .nupdates = 1, .updates = &u};
        send_msg(g, m->rec.address, m->rec.port, &msg, false);
    }
}

/* ---- self ---- */

/* Real time, for a timestamp this node signs; now_ms (monotonic) only
 * drives timers (mesh.h, the wall_ms hook). */
static int64_t wall_now(const gossip *g, int64_t now_ms)
{
    return g->h.wall_ms ? g->h.wall_ms(g->h.ctx) : now_ms;
}

/* The date of an admission this node signs: real time, but never before its
 * own admission (members refuse an admission dated more than
 * GOSSIP_ADMISSION_SKEW_MS before its admitter's, and a wall clock set back
 * must not make this node unable to admit). */
static int64_t admission_time(const gossip *g, int64_t now_ms)
{
    int64_t t = wall_now(g, now_ms), own = g->m[0]->sig.adm.at_ms;
    return t < own ? own : t;
}

static int resign_self(gossip *g, int64_t now_ms, char *err, size_t errlen)
{
    gossip_member *s = self_of(g);
    gossip_admission adm = s->sig.adm;
    s->rec.signed_ms = wall_now(g, now_ms); /* signed: real time */
    int rc = gossip_record_sign(&s->rec, g->id_priv, &s->sig, err, errlen);
    s->sig.adm = adm;
    if (rc != 0) return -1;
    s->state_inc = s->rec.incarnation;
    return 0;
}

static void refute(gossip *g, uint64_t inc, int64_t now_ms, const char *what, const char *by)
{
    gossip_member *s = self_of(g);
    if (s->rec.left) return;
    if (inc < s->rec.incarnation) return; /* about an older incarnation: already refuted */
    if (inc > s->rec.incarnation) inc = s->rec.incarnation; /* never signed: bogus, don't follow it up */
    s->rec.incarnation = inc + 1;
    char err[256];
    if (resign_self(g, now_ms, err, sizeof err) != 0) {
        glog(g, "gossip: cannot sign this node's record: %s", err);
        return;
    }
    glog(g, "gossip: %s says this node is %s; refuting with incarnation %llu", by, what,
         (unsigned long long)s->rec.incarnation);
    broadcast(g, s);
}

void gossip_add_observed(gossip *g, const char *endpoint, int64_t now_ms)
{
    gossip_member *s = self_of(g);
    if (!endpoint || !*endpoint || s->rec.left) return;
    for (int i = 0; i < s->rec.nendpoints; i++)
        if (strcmp(s->rec.endpoints[i], endpoint) == 0) return;
    if (strlen(endpoint) >= MESH_WG_ENDPOINT_MAX) return;
    gossip_record before = s->rec;
    gossip_signed sig_before = s->sig;
    if (s->rec.nendpoints < GOSSIP_MAX_ENDPOINTS) {
        s->rec.nendpoints++;
    } else {
        /* Keep the first (configured or first observed); the newest
         * observation replaces the oldest of the rest. */
        memmove(s->rec.endpoints[1], s->rec.endpoints[2],
                (GOSSIP_MAX_ENDPOINTS - 2) * sizeof s->rec.endpoints[0]);
    }
    snprintf(s->rec.endpoints[s->rec.nendpoints - 1], MESH_WG_ENDPOINT_MAX, "%s", endpoint);
    s->rec.incarnation++;
    char err[256];
    if (resign_self(g, now_ms, err, sizeof err) != 0) {
        s->rec = before;
        s->sig = sig_before;
        glog(g, "gossip: cannot sign this node's record: %s", err);
        return;
    }
    glog(g, "gossip: peers see this node at %s", endpoint);
    notify(g, s, GOSSIP_ALIVE);
    broadcast(g, s);
}

int gossip_set_job(gossip *g, const char *job, int64_t now_ms, char *err, size_t errlen)
{
    gossip_member *s = self_of(g);
    if (!job) job = "";
    size_t n = strlen(job);
    if (n >= GOSSIP_JOB_MAX)
        return mesh_errf(err, errlen, "gossip: the job text is %zu bytes, at most %d", n,
                         GOSSIP_JOB_MAX - 1);
    if (strcmp(s->rec.job, job) == 0) return 0;
    if (s->rec.left)
        return mesh_errf(err, errlen, "gossip: this node left the mesh; its record does not "
                         "change any more");
    gossip_record before = s->rec;
    gossip_signed sig_before = s->sig;
    memcpy(s->rec.job, job, n + 1);
    s->rec.incarnation++;
    if (resign_self(g, now_ms, err, errlen) != 0) {
        s->rec = before;
        s->sig = sig_before;
        return -1;
    }
    notify(g, s, (int)s->state);
    broadcast(g, s);
    return 0;
}

int gossip_leave(gossip *g, int64_t now_ms, char *err, size_t errlen)
{
    gossip_member *s = self_of(g);
    if (!s->rec.left) {
        /* A LEFT record is final: the job text is of no use any more, and
         * without it the record fits a datagram. */
        s->rec.job[0] = 0;
        s->rec.left = 1;
        s->rec.incarnation++;
        if (resign_self(g, now_ms, err, errlen) != 0) return -1;
        s->state = GOSSIP_LEFT;
        s->state_ms = now_ms;
    }
    broadcast(g, s);
    return 0;
}

/* ---- applying claims ---- */

static void set_state(gossip *g, gossip_member *m, gossip_state st, uint64_t inc, int64_t now_ms)
{
    int before = (int)m->state;
    m->state = st;
    m->state_inc = inc;
    m->state_ms = now_ms;
    if (st == GOSSIP_SUSPECT) {
        m->suspect_ms = now_ms;
        m->confirmations = 0;
        memset(m->suspectors, 0, sizeof m->suspectors);
    }
    if (before != (int)st)
        glog(g, "gossip: %s (%s) is %s (incarnation %llu)", m->rec.name, m->rec.address,
             gossip_state_name(st), (unsigned long long)inc);
    notify(g, m, before);
}

/* Whether admission a (of member ka) is older than b (of kb): the earlier
 * admission time, then the lower WireGuard key. Every node decides the same. */
static bool adm_older(const gossip_admission *a, const uint8_t *ka, const gossip_admission *b,
                      const uint8_t *kb)
{
    if (a->at_ms != b->at_ms) return a->at_ms < b->at_ms;
    return memcmp(ka, kb, GOSSIP_KEY_LEN) < 0;
}

static bool adm_same(const gossip_admission *a, const gossip_admission *b)
{
    return memcmp(a->by, b->by, GOSSIP_KEY_LEN) == 0 && a->at_ms == b->at_ms &&
           memcmp(a->sig, b->sig, GOSSIP_SIG_LEN) == 0;
}

#define ADMITTER_UNKNOWN (-2)

/* r's admission checks out in this view: the founder's own (the mesh id
 * derives from its identity), or signed by a member this node knows. 0, -1
 * (refused), or ADMITTER_UNKNOWN (refused for now: the admitter's record may
 * come later in the same message). */
static int check_admission(gossip *g, const gossip_record *r, const gossip_admission *a,
                           char *err, size_t errlen)
{
    if (gossip_admission_founder(r, a)) return 0;
    const gossip_member *by = NULL;
    for (size_t j = 0; j < g->n && !by; j++)
        if (!g->m[j]->displaced && memcmp(g->m[j]->rec.id_pub, a->by, GOSSIP_KEY_LEN) == 0)
            by = g->m[j];
    if (!by) {
        mesh_errf(err, errlen, "record of %s (%s): not admitted by any member this node knows "
                  "(members enter only through JOIN with an invite); dropped", r->name,
                  r->address);
        return ADMITTER_UNKNOWN;
    }
    if (!gossip_admission_verify(r, a))
        return mesh_errf(err, errlen, "record of %s (%s): its admission does not verify "
                         "(forged, or not for this name and keys); dropped", r->name,
                         r->address);
    /* Nobody admits before it was admitted itself (give or take the clocks'
     * skew): the older admission wins a collision, so a backdated one
     * could otherwise evict any member. */
    if (a->at_ms < by->sig.adm.at_ms - GOSSIP_ADMISSION_SKEW_MS)
        return mesh_errf(err, errlen, "record of %s (%s): admitted by %s at %lld ms, before %s "
                         "was admitted itself (%lld ms); dropped", r->name, r->address,
                         by->rec.name, (long long)a->at_ms, by->rec.name,
                         (long long)by->sig.adm.at_ms);
    return 0;
}

/* Whether member o still holds its name against another identity. */
static bool holds_name(const gossip_member *o, int64_t now_ms)
{
    if (o->displaced || o->state == GOSSIP_LEFT) return false;
    if (o->state == GOSSIP_DEAD) return now_ms - o->state_ms < GOSSIP_NAME_HOLD_MS;
    return true;
}

/* o loses its overlay address to an older admission: out of the view. */
static void displace(gossip *g, gossip_member *o, const gossip_record *winner,
                     const gossip_admission *wa)
{
    char by[9];
    for (int k = 0; k < 4; k++) snprintf(by + 2 * k, 3, "%02x", wa->by[k]);
    int before = (int)o->state;
    o->displaced = true;
    o->state = GOSSIP_LEFT;
    if (strcmp(o->rec.address, winner->address) == 0)
        glog(g, "gossip: %s's overlay address %s is also %s's, admitted earlier (by identity "
             "%s...): %s is out of the view (it must join again with a new WireGuard key)",
             o->rec.name, o->rec.address, winner->name, by, o->rec.name);
    else
        glog(g, "gossip: the name %s was also given to %s (%s), admitted earlier (by identity "
             "%s...): %s (%s) is out of the view (it must join again under another name)",
             o->rec.name, winner->address, winner->name, by, o->rec.name, o->rec.address);
    notify(g, o, before);
}

/* A signed record (ALIVE or LEFT). Returns 0 when accepted or stale, -1
 * (or ADMITTER_UNKNOWN) when refused. */
static int apply_record(gossip *g, const gossip_signed *sig, int64_t now_ms, bool announce,
                        char *err, size_t errlen)
{
    gossip_record r;
    if (gossip_record_open(sig, &r, err, errlen) != 0) return -1;
    const gossip_member *s = self_of(g);
    if (memcmp(r.mesh_id, s->rec.mesh_id, GOSSIP_MESH_ID_LEN) != 0)
        return mesh_errf(err, errlen, "record of %s belongs to another mesh", r.name);
    char want[GOSSIP_ADDR_MAX];
    if (mesh_overlay_address(g->prefix, r.wg_pub, want, sizeof want, err, errlen) != 0)
        return -1;
    if (strcmp(want, r.address) != 0)
        return mesh_errf(err, errlen, "record of %s claims overlay address %s, but its key "
                         "gives %s", r.name, r.address, want);
    int i = find_key(g, r.wg_pub);
    if (i == 0) return 0; /* our own record relayed back: only we sign it */
    if (i > 0 && g->m[i]->displaced) return 0; /* its address belongs to an older admission */
    if (i > 0 && memcmp(g->m[i]->rec.id_pub, r.id_pub, GOSSIP_KEY_LEN) != 0)
        return mesh_errf(err, errlen, "record of %s is signed by another identity than the "
                         "member with its WireGuard key", r.name);
    /* A known member's admission, once checked, only needs checking again
     * when it changes (the name is part of what it signs). */
    if (i < 0 || !adm_same(&g->m[i]->sig.adm, &sig->adm) ||
        strcmp(g->m[i]->rec.name, r.name) != 0) {
        int rc = check_admission(g, &r, &sig->adm, err, errlen);
        if (rc != 0) return rc;
    }
    for (size_t j = 0; j < g->n; j++) {
        gossip_member *o = g->m[j];
        if ((int)j == i || o->displaced) continue;
        if (strcmp(o->rec.address, r.address) == 0) {
            bool older = adm_older(&sig->adm, r.wg_pub, &o->sig.adm, o->rec.wg_pub);
            if (j == 0) {
                if (older)
                    glog(g, "gossip: this node's overlay address %s is also %s's, admitted "
                         "earlier: this node must join again with a new WireGuard key",
                         r.address, r.name);
                return mesh_errf(err, errlen, "record of %s: overlay address %s collides with "
                                 "this node's", r.name, r.address);
            }
            if (!older)
                return mesh_errf(err, errlen, "record of %s: overlay address %s collides with "
                                 "member %s's, admitted earlier; %s needs a new key", r.name,
                                 r.address, o->rec.name, r.name);
            displace(g, o, &r, &sig->adm);
            continue;
        }
        /* A name is claimed by a member's first record (or a new name); a
         * LEFT record claims nothing. */
        if (!r.left && (i < 0 || strcmp(g->m[i]->rec.name, r.name) != 0) &&
            strcmp(o->rec.name, r.name) == 0 &&
            memcmp(o->rec.id_pub, r.id_pub, GOSSIP_KEY_LEN) != 0 && holds_name(o, now_ms)) {
            /* Two admissions of one name (made on the two sides of a
             * partition): the older keeps it, everywhere alike. */
            if (j != 0 && !o->self &&
                adm_older(&sig->adm, r.wg_pub, &o->sig.adm, o->rec.wg_pub)) {
                displace(g, o, &r, &sig->adm);
                continue;
            }
            return mesh_errf(err, errlen, "record of %s: the name belongs to another member "
                             "(%s, %s)", r.name, o->rec.address, gossip_state_name(o->state));
        }
    }
    if (i < 0) {
        if (g->n >= GOSSIP_MAX_MEMBERS)
            return mesh_errf(err, errlen, "record of %s: the view is full (%d members)",
                             r.name, GOSSIP_MAX_MEMBERS);
        gossip_member *m = calloc(1, sizeof *m);
        if (!m) return mesh_errf(err, errlen, "record of %s: out of memory", r.name);
        if (gossip_mac_key(g->wg_priv, r.wg_pub, m->mac_key, err, errlen) != 0) {
            free(m);
            return -1;
        }
        m->rec = r;
        m->sig = *sig;
        m->state = r.left ? GOSSIP_LEFT : GOSSIP_ALIVE;
        m->state_inc = r.incarnation;
        m->state_ms = now_ms;
        g->m[g->n++] = m;
        glog(g, "gossip: new member %s (%s), %s", r.name, r.address,
             gossip_state_name(m->state));
        notify(g, m, -1);
        if (announce) broadcast(g, m);
        return 0;
    }
    gossip_member *m = g->m[i];
    if (m->state == GOSSIP_LEFT) return 0; /* leaving is for good */
    bool newer = r.incarnation > m->rec.incarnation;
    /* The same incarnation may still turn ALIVE into LEFT? No: leaving raises
     * the incarnation, so only newer records count. */
    if (!newer) return 0;
    m->rec = r;
    m->sig = *sig;
    gossip_state st = r.left ? GOSSIP_LEFT : GOSSIP_ALIVE;
    if (!r.left && (m->state == GOSSIP_SUSPECT || m->state == GOSSIP_DEAD) &&
        r.incarnation <= m->state_inc) {
        if (announce) broadcast(g, m);
        return 0; /* the claim is about this incarnation or a later one: it stands */
    }
    bool state_changes = st != m->state;
    if (state_changes || st == GOSSIP_ALIVE) {
        /* A newer record beats suspicion and death of older incarnations. */
        set_state(g, m, st, r.incarnation, now_ms);
    }
    if (announce) broadcast(g, m);
    return 0;
}

static double suspicion_timeout_ms(const gossip *g, const gossip_member *m)
{
    double lo = g->t.suspicion_min_ms, hi = g->t.suspicion_max_ms;
    size_t n = live_count(g);
    int k = n >= 2 ? (int)n - 2 : 0;
    if (k > 3) k = 3;
    if (k < 1 || hi <= lo) return lo;
    int c = m->confirmations < k ? m->confirmations : k;
    double t = hi - (hi - lo) * log((double)c + 1.0) / log((double)k + 1.0);
    return t < lo ? lo : t;
}

static void apply_claim(gossip *g, const gossip_update *u, int64_t now_ms)
{
    int i = find_key(g, u->wg_pub);
    if (i < 0) return; /* about someone we do not know: the sync brings the record */
    gossip_member *m = g->m[i];
    const char *what = u->state == GOSSIP_SUSPECT ? "suspect" : "dead";
    /* A claim names the incarnation of the accused's record the claimer
     * holds; it is unsigned, so it cannot say more than a record this node
     * has seen: a claim beyond the accused's latest known incarnation is
     * ignored (else one claim at 2^64-1 would outlast every refutation). */
    if (i == 0) {
        if (u->incarnation > m->rec.incarnation) {
            glog(g, "gossip: %s says this node is %s at incarnation %llu, which it never "
                 "signed; ignored", u->from, what, (unsigned long long)u->incarnation);
            return;
        }
        refute(g, u->incarnation, now_ms, what, u->from);
        return;
    }
    if (m->displaced || m->state == GOSSIP_LEFT || u->incarnation != m->rec.incarnation)
        return;
    if (u->state == GOSSIP_SUSPECT) {
        if (m->state == GOSSIP_ALIVE) {
            set_state(g, m, GOSSIP_SUSPECT, u->incarnation, now_ms);
            snprintf(m->suspectors[0], MESH_NAME_MAX, "%s", u->from);
            broadcast(g, m);
        } else if (m->state == GOSSIP_SUSPECT && m->state_inc == u->incarnation) {
            for (int k = 0; k < 4; k++) {
                if (strcmp(m->suspectors[k], u->from) == 0) return;
                if (!m->suspectors[k][0]) {
                    snprintf(m->suspectors[k], MESH_NAME_MAX, "%s", u->from);
                    if (k > 0) m->confirmations++;
                    return;
                }
            }
        }
    } else if (u->state == GOSSIP_DEAD && m->state != GOSSIP_DEAD) {
        set_state(g, m, GOSSIP_DEAD, u->incarnation, now_ms);
        broadcast(g, m);
    }
}

/* Returns -1 with err when the update was refused. */
static int apply_update(gossip *g, const gossip_update *u, int64_t now_ms, char *err,
                        size_t errlen)
{
    if (u->state == GOSSIP_ALIVE || u->state == GOSSIP_LEFT)
        return apply_record(g, &u->rec, now_ms, true, err, errlen);
    apply_claim(g, u, now_ms);
    return 0;
}

int gossip_merge(gossip *g, const gossip_msg *m, int64_t now_ms)
{
    int refused = 0, nlater = 0;
    char err[512];
    const char *via = g->via; /* a sync hook may merge into g while g merges */
    int *later = m->nupdates ? malloc((size_t)m->nupdates * sizeof *later) : NULL;
    g->via = m->from;
    for (int i = 0; i < m->nupdates; i++) {
        int rc = apply_update(g, &m->updates[i], now_ms, err, sizeof err);
        if (rc == ADMITTER_UNKNOWN && later) {
            later[nlater++] = i; /* its admitter may be further on */
        } else if (rc != 0) {
            glog(g, "gossip: from %s: %s", m->from, err);
            refused++;
        }
    }
    /* Records whose admitter came later in the message: again, while that
     * lets more in. */
    for (bool progress = true; progress && nlater;) {
        progress = false;
        int w = 0;
        for (int k = 0; k < nlater; k++) {
            int rc = apply_update(g, &m->updates[later[k]], now_ms, err, sizeof err);
            if (rc == ADMITTER_UNKNOWN) later[w++] = later[k];
            else progress = true;
            if (rc != 0 && rc != ADMITTER_UNKNOWN) {
                glog(g, "gossip: from %s: %s", m->from, err);
                refused++;
            }
        }
        nlater = w;
    }
    for (int k = 0; k < nlater; k++) {
        apply_update(g, &m->updates[later[k]], now_ms, err, sizeof err);
        glog(g, "gossip: from %s: %s", m->from, err);
        refused++;
    }
    free(later);
    g->via = via;
    return refused;
}

int gossip_add_known(gossip *g, const gossip_signed *s, int64_t now_ms, char *err,
                     size_t errlen)
{
    return apply_record(g, s, now_ms, false, err, errlen) == 0 ? 0 : -1;
}

int gossip_admit_check(gossip *g, const gossip_signed *s, int64_t now_ms, char *err,
                       size_t errlen)
{
    gossip_record r;
    if (gossip_record_open(s, &r, err, errlen) != 0) return -1;
    if (self_of(g)->rec.left)
        return mesh_errf(err, errlen, "this node left the mesh; it admits nobody");
    if (memcmp(r.mesh_id, self_of(g)->rec.mesh_id, GOSSIP_MESH_ID_LEN) != 0)
        return mesh_errf(err, errlen, "record of %s belongs to another mesh", r.name);
    if (find_key(g, r.wg_pub) >= 0)
        return mesh_errf(err, errlen, "%s's WireGuard key is already a member's", r.name);
    char want[GOSSIP_ADDR_MAX];
    if (mesh_overlay_address(g->prefix, r.wg_pub, want, sizeof want, err, errlen) != 0)
        return -1;
    if (strcmp(want, r.address) != 0)
        return mesh_errf(err, errlen, "record of %s claims overlay address %s, but its key "
                         "gives %s", r.name, r.address, want);
    /* Every address the view knows, dead and left members' included: an
     * address is never handed out twice. */
    for (size_t j = 0; j < g->n; j++) {
        const gossip_member *o = g->m[j];
        if (o->displaced) continue;
        if (strcmp(o->rec.address, r.address) == 0)
            return mesh_errf(err, errlen, GOSSIP_ADDRESS_TAKEN " overlay address %s is "
                             "already %s's; the joiner draws a new WireGuard key and asks again",
                             r.address, o->rec.name);
        if (strcmp(o->rec.name, r.name) == 0 &&
            memcmp(o->rec.id_pub, r.id_pub, GOSSIP_KEY_LEN) != 0 && holds_name(o, now_ms))
            return mesh_errf(err, errlen, "record of %s: the name belongs to another member "
                             "(%s, %s); join with another --name", r.name, o->rec.address,
                             gossip_state_name(o->state));
    }
    return 0;
}

int gossip_admit(gossip *g, const gossip_signed *s, int64_t now_ms, char *err, size_t errlen)
{
    gossip_record r;
    if (gossip_admit_check(g, s, now_ms, err, errlen) != 0 ||
        gossip_record_open(s, &r, err, errlen) != 0)
        return -1;
    gossip_signed *c = malloc(sizeof *c);
    if (!c) return mesh_errf(err, errlen, "out of memory");
    *c = *s;
    int rc = gossip_admission_sign(&r, g->id_priv, admission_time(g, now_ms), &c->adm, err,
                                   errlen);
    if (rc == 0) rc = apply_record(g, c, now_ms, true, err, errlen) == 0 ? 0 : -1;
    free(c);
    return rc;
}

static void auth_drop(gossip *g, int64_t now_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void auth_drop(gossip *g, int64_t now_ms, const char *fmt, ...)
{
    g->auth_drops++;
    if (g->auth_log_ms && now_ms - g->auth_log_ms < 1000) return; /* once a second at most */
    g->auth_log_ms = now_ms;
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    glog(g, "gossip: %s (%llu unauthenticated so far)", line,
         (unsigned long long)g->auth_drops);
}

int gossip_frame_seal(gossip *g, const char *addr, const void *buf, size_t len,
                      uint8_t mac[GOSSIP_MAC_LEN])
{
    const gossip_member *m = peer_at(g, addr);
    if (!m) return -1;
    gossip_mac(m->mac_key, buf, len, mac);
    return 0;
}

const gossip_member *gossip_frame_open(gossip *g, const char *addr, const void *buf, size_t len,
                                       int64_t now_ms)
{
    const gossip_member *m = peer_at(g, addr);
    if (!m) {
        auth_drop(g, now_ms, "dropped a frame from %s, not a member's address", addr);
        return NULL;
    }
    if (!gossip_mac_check(m->mac_key, buf, len)) {
        auth_drop(g, now_ms, "dropped a frame from %s: its MAC does not verify with %s's key",
                  addr, m->rec.name);
        return NULL;
    }
    return m;
}

int gossip_sync_message(gossip *g, gossip_msg *m, bool reply, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->type = GOSSIP_MSG_SYNC;
    m->version = MESH_PROTOCOL_VERSION;
    m->flags = reply ? GOSSIP_SYNC_REPLY : 0;
    memcpy(m->mesh_id, self_of(g)->rec.mesh_id, GOSSIP_MESH_ID_LEN);
    snprintf(m->from, sizeof m->from, "%s", self_of(g)->rec.name);
    size_t cap = g->n * 2 < GOSSIP_MAX_UPDATES ? g->n * 2 : GOSSIP_MAX_UPDATES;
    m->updates = calloc(cap ? cap : 1, sizeof *m->updates);
    if (!m->updates) return mesh_errf(err, errlen, "gossip sync: out of memory");
    /* Every record, and after it the claim that overrides it (SUSPECT or
     * DEAD), so a receiver that lacks the record learns both; this node
     * first. Members that would take the message past GOSSIP_MAX_UPDATES
     * updates or GOSSIP_TCP_MAX bytes are left out (logged): the receiver
     * learns them from another member's push-pull. */
    size_t bytes = SYNC_HEAD_MAX;
    size_t i;
    for (i = 0; i < g->n; i++) {
        const gossip_member *mm = g->m[i];
        if (mm->displaced) continue;
        bool claim = mm->state == GOSSIP_SUSPECT || mm->state == GOSSIP_DEAD;
        size_t more = SYNC_RECORD_EXTRA + mm->sig.len + (claim ? SYNC_CLAIM_MAX : 0);
        if ((size_t)m->nupdates + (claim ? 2 : 1) > cap || bytes + more > GOSSIP_TCP_MAX) break;
        bytes += more;
        gossip_update *u = &m->updates[m->nupdates++];
        memset(u, 0, sizeof *u);
        u->state = mm->rec.left ? GOSSIP_LEFT : GOSSIP_ALIVE;
        u->rec = mm->sig;
        if (claim) update_of(g, mm, &m->updates[m->nupdates++]);
    }
    if (i < g->n)
        glog(g, "gossip: the view has %zu members; this %s carries the first %zu (at most %d "
             "updates and %zu bytes in one message), the rest travel in other members' "
             "push-pulls", g->n, reply ? "SYNC reply" : "SYNC", i, GOSSIP_MAX_UPDATES,
             GOSSIP_TCP_MAX);
    return 0;
}

/* ---- probing ---- */

static void reshuffle(gossip *g)
{
    g->norder = 0;
    for (size_t i = 1; i < g->n; i++)
        if (g->m[i]->state == GOSSIP_ALIVE || g->m[i]->state == GOSSIP_SUSPECT)
            g->order[g->norder++] = (int)i;
    for (size_t i = g->norder; i > 1; i--) {
        size_t j = rng_next(g) % i;
        int t = g->order[i - 1];
        g->order[i - 1] = g->order[j];
        g->order[j] = t;
    }
    g->order_pos = 0;
}

static int next_target(gossip *g)
{
    for (int tries = 0; tries < 2; tries++) {
        while (g->order_pos < g->norder) {
            int i = g->order[g->order_pos++];
            if ((size_t)i < g->n &&
                (g->m[i]->state == GOSSIP_ALIVE || g->m[i]->state == GOSSIP_SUSPECT))
                return i;
        }
        reshuffle(g);
    }
    return -1;
}

static void ping(gossip *g, const char *addr, int port, uint32_t seq)
{
    gossip_msg m = {.type = GOSSIP_MSG_PING, .seq = seq};
    send_msg(g, addr, port, &m, true);
}

static void probe_failed(gossip *g, int64_t now_ms)
{
    gossip_member *m = g->m[g->probe_target];
    if (m->state == GOSSIP_SUSPECT) {
        const char *me = self_of(g)->rec.name;
        for (int k = 0; k < 4; k++) {
            if (strcmp(m->suspectors[k], me) == 0) return;
            if (!m->suspectors[k][0]) {
                snprintf(m->suspectors[k], MESH_NAME_MAX, "%s", me);
                if (k > 0) m->confirmations++;
                break;
            }
        }
        gossip_update u;
        memset(&u, 0, sizeof u);
        u.state = GOSSIP_SUSPECT;
        memcpy(u.wg_pub, m->rec.wg_pub, GOSSIP_KEY_LEN);
        u.incarnation = m->state_inc;
        snprintf(u.from, sizeof u.from, "%s", me);
        for (size_t i = 1; i < g->n; i++) {
            const gossip_member *o = g->m[i];
            if (o->state != GOSSIP_ALIVE && o->state != GOSSIP_SUSPECT) continue;
            gossip_msg msg = {.type = GOSSIP_MSG_UPDATE, .nupdates = 1, .updates = &u};
            send_msg(g, o->rec.address, o->rec.port, &msg, false);
        }
        return;
    }
    if (m->state != GOSSIP_ALIVE) return;
    set_state(g, m, GOSSIP_SUSPECT, m->rec.incarnation, now_ms);
    snprintf(m->suspectors[0], MESH_NAME_MAX, "%s", self_of(g)->rec.name);
    broadcast(g, m);
}

void gossip_tick(gossip *g, int64_t now_ms)
{
    const gossip_timing *t = &g->t;
    if (!g->announced) {
        /* A restarted node's new incarnation, or a joiner's first record. */
        g->announced = true;
        broadcast(g, self_of(g));
    }
    /* The probe in flight. */
    if (g->probe_target >= 0 && !g->probe_acked) {
        gossip_member *tm = g->m[g->probe_target];
        if (!g->probe_indirect && now_ms >= g->probe_start_ms + t->probe_timeout_ms) {
            g->probe_indirect = true;
            int cand[GOSSIP_MAX_MEMBERS], nc = 0;
            for (size_t i = 1; i < g->n; i++)
                if ((int)i != g->probe_target && g->m[i]->state == GOSSIP_ALIVE)
                    cand[nc++] = (int)i;
            for (int k = 0; k < t->indirect_k && nc > 0; k++) {
                int j = (int)(rng_next(g) % (uint64_t)nc);
                gossip_member *via = g->m[cand[j]];
                cand[j] = cand[--nc];
                gossip_msg m = {.type = GOSSIP_MSG_PING_REQ, .seq = g->probe_seq,
                                .target_port = tm->rec.port};
                snprintf(m.target, sizeof m.target, "%s", tm->rec.address);
                send_msg(g, via->rec.address, via->rec.port, &m, false);
            }
        }
        if (now_ms >= g->probe_start_ms + t->probe_interval_ms) {
            probe_failed(g, now_ms);
            g->probe_target = -1;
        }
    }
    /* A new probe each interval. */
    if (now_ms >= g->next_probe_ms) {
        if (g->probe_target >= 0 && !g->probe_acked) probe_failed(g, now_ms);
        g->next_probe_ms = now_ms + t->probe_interval_ms;
        g->probe_target = next_target(g);
        if (g->probe_target >= 0) {
            g->probe_seq = ++g->seq;
            g->probe_start_ms = now_ms;
            g->probe_acked = false;
            g->probe_indirect = false;
            gossip_member *tm = g->m[g->probe_target];
            ping(g, tm->rec.address, tm->rec.port, g->probe_seq);
        }
    }
    /* Suspicions that ran out. */
    for (size_t i = 1; i < g->n; i++) {
        gossip_member *m = g->m[i];
        if (m->state == GOSSIP_SUSPECT &&
            now_ms >= m->suspect_ms + (int64_t)suspicion_timeout_ms(g, m)) {
            set_state(g, m, GOSSIP_DEAD, m->state_inc, now_ms);
            broadcast(g, m);
        }
    }
    /* Forwarded probes that got no answer. */
    for (int i = 0; i < GOSSIP_MAX_FORWARDS; i++)
        if (g->fwd[i].seq && now_ms >= g->fwd[i].expires_ms) g->fwd[i].seq = 0;
    /* Push-pull with one member now and then. */
    if (now_ms >= g->next_sync_ms && g->h.sync) {
        g->next_sync_ms = now_ms + t->sync_interval_ms;
        int cand[GOSSIP_MAX_MEMBERS], nc = 0;
        for (size_t i = 1; i < g->n; i++)
            if (g->m[i]->state == GOSSIP_ALIVE) cand[nc++] = (int)i;
        if (nc) g->h.sync(g->h.ctx, g->m[cand[rng_next(g) % (uint64_t)nc]]);
        /* Reconnect: push-pull with one dead member too, so a healed partition (or a
         * member that was only unreachable) finds its way back. */
        int dc[GOSSIP_MAX_MEMBERS], nd = 0;
        for (size_t i = 1; i < g->n; i++)
            if (g->m[i]->state == GOSSIP_DEAD) dc[nd++] = (int)i;
        if (nd) {
            gossip_member *dm = g->m[dc[rng_next(g) % (uint64_t)nd]];
            g->h.sync(g->h.ctx, dm);
        }
    }
}

static void ack(gossip *g, const char *addr, int port, uint32_t seq)
{
    gossip_msg m = {.type = GOSSIP_MSG_ACK, .seq = seq};
    if (g->h.observe) g->h.observe(g->h.ctx, addr, m.observed, sizeof m.observed);
    send_msg(g, addr, port, &m, true);
}

void gossip_receive(gossip *g, const char *addr, int port, const void *buf, size_t len,
                    int64_t now_ms)
{
    gossip_member *from = peer_at(g, addr);
    if (!from) {
        auth_drop(g, now_ms, "dropped a datagram from %s:%d, not a member's address", addr,
                  port);
        return;
    }
    if (!gossip_mac_check(from->mac_key, buf, len)) {
        auth_drop(g, now_ms, "dropped a datagram from %s:%d: its MAC does not verify with "
                  "%s's key (not sent by %s)", addr, port, from->rec.name, from->rec.name);
        return;
    }
    len -= GOSSIP_MAC_LEN;
    gossip_msg m;
    char err[512];
    if (gossip_decode(buf, len, &m, err, sizeof err) != 0) {
        glog(g, "gossip: dropped a datagram from %s (%s): %s", from->rec.name, addr, err);
        return;
    }
    if (memcmp(m.mesh_id, self_of(g)->rec.mesh_id, GOSSIP_MESH_ID_LEN) != 0 ||
        strcmp(m.from, from->rec.name) != 0) {
        g->auth_drops++;
        glog(g, "gossip: dropped a datagram from %s: it says it is %s%s", addr, m.from,
             memcmp(m.mesh_id, self_of(g)->rec.mesh_id, GOSSIP_MESH_ID_LEN) ? " of another mesh"
                                                                           : "");
        gossip_msg_free(&m);
        return;
    }
    from->heard_ms = now_ms;
    if (from->state == GOSSIP_DEAD && m.type != GOSSIP_MSG_UPDATE) {
        /* It is back (a restart): tell it what we believe, so it refutes
         * with a newer record, and pull its state. */
        gossip_update u;
        update_of(g, from, &u);
        gossip_msg um = {.type = GOSSIP_MSG_UPDATE, .nupdates = 1, .updates = &u};
        send_msg(g, addr, port, &um, false);
    }
    for (int i = 0; i < m.nupdates; i++)
        if (apply_update(g, &m.updates[i], now_ms, err, sizeof err) != 0)
            glog(g, "gossip: from %s: %s", from->rec.name, err);
    switch (m.type) {
    case GOSSIP_MSG_PING:
        ack(g, addr, port, m.seq);
        break;
    case GOSSIP_MSG_ACK:
        if (m.observed[0]) gossip_add_observed(g, m.observed, now_ms);
        if (g->probe_target >= 0 && m.seq == g->probe_seq) {
            gossip_member *tm = g->m[g->probe_target];
            if (tm == from) tm->acked_ms = now_ms;
            g->probe_acked = true;
        }
        for (int i = 0; i < GOSSIP_MAX_FORWARDS; i++)
            if (g->fwd[i].seq && g->fwd[i].seq == m.seq) {
                gossip_msg a = {.type = GOSSIP_MSG_ACK, .seq = g->fwd[i].orig_seq};
                send_msg(g, g->fwd[i].addr, g->fwd[i].port, &a, true);
                g->fwd[i].seq = 0;
            }
        break;
    case GOSSIP_MSG_PING_REQ: {
        int slot = -1;
        for (int i = 0; i < GOSSIP_MAX_FORWARDS && slot < 0; i++)
            if (!g->fwd[i].seq) slot = i;
        if (slot < 0 || !gossip_find_addr(g, m.target)) break;
        gossip_forward *f = &g->fwd[slot];
        f->seq = ++g->seq;
        f->orig_seq = m.seq;
        snprintf(f->addr, sizeof f->addr, "%s", addr);
        f->port = port;
        f->expires_ms = now_ms + g->t.probe_interval_ms;
        ping(g, m.target, m.target_port, f->seq);
        break;
    }
    case GOSSIP_MSG_UPDATE:
        break;
    default:
        glog(g, "gossip: dropped a %d message from %s: not for UDP", (int)m.type,
             from->rec.name);
    }
    gossip_msg_free(&m);
}

/* ---- life ---- */

int gossip_create(gossip **out, const gossip_config *cfg, int64_t now_ms, char *err,
                  size_t errlen)
{
    *out = NULL;
    if (!cfg->hooks.send)
        return mesh_errf(err, errlen, "gossip: the send hook is required");
    gossip *g = calloc(1, sizeof *g);
    gossip_member *s = calloc(1, sizeof *s);
    if (!g || !s) {
        free(g);
        free(s);
        return mesh_errf(err, errlen, "gossip: out of memory");
    }
    snprintf(g->prefix, sizeof g->prefix, "%s", cfg->prefix ? cfg->prefix : "");
    gossip_timing_default(&g->t);
    const gossip_timing *c = &cfg->timing;
    if (c->probe_interval_ms > 0) g->t.probe_interval_ms = c->probe_interval_ms;
    if (c->probe_timeout_ms > 0) g->t.probe_timeout_ms = c->probe_timeout_ms;
    if (c->indirect_k > 0) g->t.indirect_k = c->indirect_k;
    if (c->suspicion_min_ms > 0) g->t.suspicion_min_ms = c->suspicion_min_ms;
    if (c->suspicion_max_ms > 0) g->t.suspicion_max_ms = c->suspicion_max_ms;
    if (c->sync_interval_ms > 0) g->t.sync_interval_ms = c->sync_interval_ms;
    if (c->retransmit_mult > 0) g->t.retransmit_mult = c->retransmit_mult;
    g->h = cfg->hooks;
    memcpy(g->id_priv, cfg->id_priv, GOSSIP_KEY_LEN);
    memcpy(g->wg_priv, cfg->wg_priv, GOSSIP_KEY_LEN);
    g->rng = cfg->seed ^ 0x5eedull;
    s->self = true;
    s->rec = cfg->self;
    s->state = s->rec.left ? GOSSIP_LEFT : GOSSIP_ALIVE;
    s->state_ms = now_ms;
    g->m[0] = s;
    g->n = 1;
    g->probe_target = -1;
    g->next_probe_ms = now_ms;
    g->next_sync_ms = now_ms + g->t.sync_interval_ms;
    char want[GOSSIP_ADDR_MAX];
    static const gossip_admission none;
    s->sig.adm = cfg->self_adm;
    if (mesh_overlay_address(g->prefix, s->rec.wg_pub, want, sizeof want, err, errlen) != 0 ||
        (adm_same(&cfg->self_adm, &none) &&
         gossip_admission_sign(&s->rec, g->id_priv, wall_now(g, now_ms), &s->sig.adm, err,
                               errlen) != 0) ||
        resign_self(g, now_ms, err, errlen) != 0) {
        gossip_destroy(g);
        return -1;
    }
    /* A node's own admission: the founder's (the mesh id derives from its
     * identity) or one a member signed; what it is signed by, members check. */
    if (!gossip_admission_verify(&s->rec, &s->sig.adm) ||
        (adm_same(&cfg->self_adm, &none) && !gossip_admission_founder(&s->rec, &s->sig.adm))) {
        mesh_errf(err, errlen, "this node (%s) has no admission to its mesh: it is not the "
                  "mesh's founder and no member admitted it (join with an invite)",
                  s->rec.name);
        gossip_destroy(g);
        return -1;
    }
    if (strcmp(want, s->rec.address) != 0) {
        mesh_errf(err, errlen, "this node's address %s is not the one its key gives in %s (%s)",
                  s->rec.address, g->prefix, want);
        gossip_destroy(g);
        return -1;
    }
    *out = g;
    return 0;
}

void gossip_destroy(gossip *g)
{
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) free(g->m[i]);
    free(g->queue);
    volatile uint8_t *p = g->id_priv, *q = g->wg_priv;
    for (size_t i = 0; i < GOSSIP_KEY_LEN; i++) p[i] = 0, q[i] = 0;
    free(g);
}

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
 * through the sync hook instead, and never piggybacked.
 *
 * Who and what the view lets in (admissions, names, overlay addresses,
 * the bounds on claims, the MACs of frames) is gossip_admit.c; what the two
 * files share is gossip_internal.h. */
#include "gossip_internal.h"

#include "keys.h"
#include "mesh_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for a datagram's map: its MAC follows. */
#define UDP_MAP_MAX (GOSSIP_UDP_MAX - GOSSIP_MAC_LEN)
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

void gossip_log(gossip *g, const char *fmt, ...)
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


int gossip_find_key(const gossip *g, const uint8_t key[GOSSIP_KEY_LEN])
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
gossip_member *gossip_peer_at(const gossip *g, const char *addr)
{
    for (size_t i = 1; i < g->n; i++)
        if (!g->m[i]->displaced && strcmp(g->m[i]->rec.address, addr) == 0) return g->m[i];
    return NULL;
}


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

void gossip_notify(gossip *g, const gossip_member *m, int before)
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
    gossip_msg m = {.type = GOSSIP_MSG_UPDATE, .version = GOSSIP_PROTOCOL_VERSION, .nupdates = 1,
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

static void send_msg(gossip *g, const char *addr, int port, gossip_msg *m, bool piggyback);

void gossip_send_to(gossip *g, const char *addr, int port, gossip_msg *m)
{
    send_msg(g, addr, port, m, false);
}

static void send_msg(gossip *g, const char *addr, int port, gossip_msg *m, bool piggyback)
{
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = 0;
    char err[256];
    gossip_update *ups = g->pig;
    const gossip_member *to = gossip_peer_at(g, addr);
    if (!to) {
        gossip_log(g, "gossip: no member at %s to send a message to", addr);
        return;
    }
    int idx[GOSSIP_MAX_PIGGYBACK];
    int nup = 0;
    m->version = GOSSIP_PROTOCOL_VERSION;
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
        gossip_log(g, "gossip: cannot encode a message to %s: %s", addr, err);
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
void gossip_broadcast(gossip *g, const gossip_member *about)
{
    gossip_update u;
    update_of(g, about, &u);
    queue_update(g, &u, about->rec.wg_pub);
    if (!update_fits(g, &u, 0)) {
        if (!about->self && g->via && strcmp(g->via, about->rec.name) == 0) return;
        if (!g->h.sync) {
            gossip_log(g, "gossip: the record of %s (%zu bytes) does not fit a datagram and there "
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
int64_t gossip_wall_now(const gossip *g, int64_t now_ms)
{
    return g->h.wall_ms ? g->h.wall_ms(g->h.ctx) : now_ms;
}
static int resign_self(gossip *g, int64_t now_ms, char *err, size_t errlen)
{
    gossip_member *s = self_of(g);
    gossip_admission adm = s->sig.adm;
    s->rec.signed_ms = gossip_wall_now(g, now_ms); /* signed: real time */
    int rc = gossip_record_sign(&s->rec, g->id_priv, &s->sig, err, errlen);
    s->sig.adm = adm;
    if (rc != 0) return -1;
    s->state_inc = s->rec.incarnation;
    return 0;
}

void gossip_refute(gossip *g, uint64_t inc, int64_t now_ms, const char *what, const char *by)
{
    gossip_member *s = self_of(g);
    if (s->rec.left) return;
    if (inc < s->rec.incarnation) return; /* about an older incarnation: already refuted */
    if (inc > s->rec.incarnation) inc = s->rec.incarnation; /* never signed: bogus, don't follow it up */
    s->rec.incarnation = inc + 1;
    char err[256];
    if (resign_self(g, now_ms, err, sizeof err) != 0) {
        gossip_log(g, "gossip: cannot sign this node's record: %s", err);
        return;
    }
    gossip_log(g, "gossip: %s says this node is %s; refuting with incarnation %llu", by, what,
               (unsigned long long)s->rec.incarnation);
    gossip_broadcast(g, s);
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
        gossip_log(g, "gossip: cannot sign this node's record: %s", err);
        return;
    }
    gossip_log(g, "gossip: peers see this node at %s", endpoint);
    gossip_notify(g, s, GOSSIP_ALIVE);
    gossip_broadcast(g, s);
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
    gossip_notify(g, s, (int)s->state);
    gossip_broadcast(g, s);
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
    gossip_broadcast(g, s);
    return 0;
}

/* ---- applying claims ---- */

void gossip_set_state(gossip *g, gossip_member *m, gossip_state st, uint64_t inc, int64_t now_ms)
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
        gossip_log(g, "gossip: %s (%s) is %s (incarnation %llu)", m->rec.name, m->rec.address,
                   gossip_state_name(st), (unsigned long long)inc);
    gossip_notify(g, m, before);
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

int gossip_sync_message(gossip *g, gossip_msg *m, bool reply, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->type = GOSSIP_MSG_SYNC;
    m->version = GOSSIP_PROTOCOL_VERSION;
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
        gossip_log(g, "gossip: the view has %zu members; this %s carries the first %zu (at most %d "
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
    gossip_set_state(g, m, GOSSIP_SUSPECT, m->rec.incarnation, now_ms);
    snprintf(m->suspectors[0], MESH_NAME_MAX, "%s", self_of(g)->rec.name);
    gossip_broadcast(g, m);
}

void gossip_tick(gossip *g, int64_t now_ms)
{
    const gossip_timing *t = &g->t;
    if (!g->announced) {
        /* A restarted node's new incarnation, or a joiner's first record. */
        g->announced = true;
        gossip_broadcast(g, self_of(g));
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
            gossip_set_state(g, m, GOSSIP_DEAD, m->state_inc, now_ms);
            gossip_broadcast(g, m);
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
    gossip_member *from = gossip_peer_at(g, addr);
    if (!from) {
        gossip_auth_drop(g, now_ms, "dropped a datagram from %s:%d, not a member's address", addr,
                         port);
        return;
    }
    if (!gossip_mac_check(from->mac_key, buf, len)) {
        gossip_auth_drop(g, now_ms, "dropped a datagram from %s:%d: its MAC does not verify with "
                         "%s's key (not sent by %s)", addr, port, from->rec.name, from->rec.name);
        return;
    }
    len -= GOSSIP_MAC_LEN;
    gossip_msg m;
    char err[512];
    if (gossip_decode(buf, len, &m, err, sizeof err) != 0) {
        gossip_log(g, "gossip: dropped a datagram from %s (%s): %s", from->rec.name, addr, err);
        return;
    }
    if (memcmp(m.mesh_id, self_of(g)->rec.mesh_id, GOSSIP_MESH_ID_LEN) != 0 ||
        strcmp(m.from, from->rec.name) != 0) {
        g->auth_drops++;
        gossip_log(g, "gossip: dropped a datagram from %s: it says it is %s%s", addr, m.from,
                   memcmp(m.mesh_id, self_of(g)->rec.mesh_id, GOSSIP_MESH_ID_LEN)
                       ? " of another mesh"
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
        if (gossip_apply_update(g, &m.updates[i], now_ms, err, sizeof err) != 0)
            gossip_log(g, "gossip: from %s: %s", from->rec.name, err);
    switch (m.type) {
    case GOSSIP_MSG_PING:
        ack(g, addr, port, m.seq);
        break;
    case GOSSIP_MSG_ACK:
        if (m.observed[0]) gossip_add_observed(g, m.observed, now_ms);
        if (g->probe_target >= 0 && m.seq == g->probe_seq) {
            gossip_member *tm = g->m[g->probe_target];
            if (tm == from) {
                tm->acked_ms = now_ms;
                tm->rtt_ms = now_ms - g->probe_start_ms;
            }
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
    case GOSSIP_MSG_PUNCH:
        gossip_punch_receive(g, from, &m, now_ms);
        break;
    case GOSSIP_MSG_RELAY:
        gossip_relay_receive(g, from, &m, now_ms);
        break;
    default:
        gossip_log(g, "gossip: dropped a %d message from %s: not for UDP", (int)m.type,
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
    s->rtt_ms = -1;
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
        (gossip_adm_same(&cfg->self_adm, &none) &&
         gossip_admission_sign(&s->rec, g->id_priv, gossip_wall_now(g, now_ms), &s->sig.adm, err,
                               errlen) != 0) ||
        resign_self(g, now_ms, err, errlen) != 0) {
        gossip_destroy(g);
        return -1;
    }
    /* A node's own admission: the founder's (the mesh id derives from its
     * identity) or one a member signed; what it is signed by, members check. */
    if (!gossip_admission_verify(&s->rec, &s->sig.adm) ||
        (gossip_adm_same(&cfg->self_adm, &none) &&
         !gossip_admission_founder(&s->rec, &s->sig.adm))) {
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

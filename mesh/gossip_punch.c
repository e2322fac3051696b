/* gossip_punch.c — the PUNCH message of hole punching (docs/PROTOCOL.md,
 * "Hole punching"): a member behind NAT asks another to send WireGuard
 * handshakes to its endpoints now, through a relay member both reach over
 * the overlay. When to ask is punch.c's business; this file builds the
 * request, relays it and judges it.
 *
 * A member speaks only for itself: the relay passes on only a request whose
 * requester is the member that sent it the datagram (its MAC says so), and
 * the target believes only a request that carries a MAC under the
 * requester-target pair key, which the relay cannot compute. A request
 * number that does not rise is a replay. Every refusal is counted
 * (gossip_punch_refusals) and logged at most once a second. */
#include "gossip_internal.h"

#include "mesh_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A relay passes on at most this many PUNCHes of one requester per second
 * (a round asks 2 relays about 1 peer; 8 leaves room for several peers). */
#define PUNCH_RELAY_BURST 8
#define PUNCH_RELAY_WINDOW_MS 1000

static const char PUNCH_LABEL[] = "shardnode punch v1";

void gossip_punch_mac(const uint8_t key[32], const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                      const uint8_t from[GOSSIP_KEY_LEN], const uint8_t to[GOSSIP_KEY_LEN],
                      uint64_t n, uint8_t mac[GOSSIP_PUNCH_MAC_LEN])
{
    /* The label keeps this MAC from standing for a datagram's (whose bytes
     * start with a msgpack map header, never with 's'). */
    uint8_t buf[sizeof PUNCH_LABEL + GOSSIP_MESH_ID_LEN + 2 * GOSSIP_KEY_LEN + 8];
    size_t o = 0;
    memcpy(buf, PUNCH_LABEL, sizeof PUNCH_LABEL); /* with its NUL */
    o += sizeof PUNCH_LABEL;
    memcpy(buf + o, mesh_id, GOSSIP_MESH_ID_LEN);
    o += GOSSIP_MESH_ID_LEN;
    memcpy(buf + o, from, GOSSIP_KEY_LEN);
    o += GOSSIP_KEY_LEN;
    memcpy(buf + o, to, GOSSIP_KEY_LEN);
    o += GOSSIP_KEY_LEN;
    for (int i = 0; i < 8; i++) buf[o++] = (uint8_t)(n >> (56 - 8 * i));
    uint8_t full[GOSSIP_MAC_LEN];
    _Static_assert(GOSSIP_PUNCH_MAC_LEN == GOSSIP_MAC_LEN, "one MAC length");
    gossip_mac(key, buf, o, full);
    memcpy(mac, full, GOSSIP_PUNCH_MAC_LEN);
}

uint64_t gossip_punch_refusals(const gossip *g) { return g->punch_refused; }

static bool live(const gossip_member *m)
{
    return m && !m->displaced && (m->state == GOSSIP_ALIVE || m->state == GOSSIP_SUSPECT);
}

static gossip_member *member_of(const gossip *g, const uint8_t key[GOSSIP_KEY_LEN])
{
    int i = gossip_find_key(g, key);
    return i < 0 ? NULL : g->m[i];
}

static const char *name_of(const gossip *g, const uint8_t key[GOSSIP_KEY_LEN])
{
    const gossip_member *m = member_of(g, key);
    return m ? m->rec.name : "(no member)";
}

static void refuse(gossip *g, int64_t now_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(gossip *g, int64_t now_ms, const char *fmt, ...)
{
    g->punch_refused++;
    if (g->punch_log_ms && now_ms - g->punch_log_ms < 1000) return;
    g->punch_log_ms = now_ms ? now_ms : 1;
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    gossip_log(g, "gossip: refused a PUNCH: %s (%llu refused so far)", line,
               (unsigned long long)g->punch_refused);
}

int gossip_punch_send(gossip *g, const uint8_t to[GOSSIP_KEY_LEN],
                      const uint8_t via[GOSSIP_KEY_LEN], int64_t now_ms, char *err,
                      size_t errlen)
{
    gossip_member *self = self_of(g);
    gossip_member *t = member_of(g, to), *v = member_of(g, via);
    if (!live(t) || t->self)
        return mesh_errf(err, errlen, "gossip PUNCH: the target (%s) is no live member",
                         name_of(g, to));
    if (!live(v) || v->self)
        return mesh_errf(err, errlen, "gossip PUNCH: the relay (%s) is no live member",
                         name_of(g, via));
    if (self->rec.left)
        return mesh_errf(err, errlen, "gossip PUNCH: this node left the mesh");
    /* Rises across restarts too: the wall clock, or one more than the last. */
    uint64_t n = (uint64_t)gossip_wall_now(g, now_ms);
    if (n <= g->punch_last_n) n = g->punch_last_n + 1;
    g->punch_last_n = n;
    gossip_msg m = {.type = GOSSIP_MSG_PUNCH, .punch_n = n};
    memcpy(m.punch_from, self->rec.wg_pub, GOSSIP_KEY_LEN);
    memcpy(m.punch_to, to, GOSSIP_KEY_LEN);
    gossip_punch_mac(t->mac_key, self->rec.mesh_id, m.punch_from, m.punch_to, n, m.punch_mac);
    gossip_send_to(g, v->rec.address, v->rec.port, &m);
    return 0;
}

/* This node is the target. */
static void for_me(gossip *g, gossip_member *from, const gossip_msg *m, int64_t now_ms)
{
    gossip_member *self = self_of(g);
    if (memcmp(m->punch_from, self->rec.wg_pub, GOSSIP_KEY_LEN) == 0) {
        refuse(g, now_ms, "%s sent one that asks this node to punch towards itself",
               from->rec.name);
        return;
    }
    gossip_member *r = member_of(g, m->punch_from);
    if (!live(r)) {
        refuse(g, now_ms, "from %s via %s: the requester is no live member here",
               name_of(g, m->punch_from), from->rec.name);
        return;
    }
    uint8_t mac[GOSSIP_PUNCH_MAC_LEN];
    gossip_punch_mac(r->mac_key, self->rec.mesh_id, m->punch_from, m->punch_to, m->punch_n,
                     mac);
    uint8_t diff = 0;
    for (int i = 0; i < GOSSIP_PUNCH_MAC_LEN; i++) diff |= (uint8_t)(mac[i] ^ m->punch_mac[i]);
    if (diff) {
        refuse(g, now_ms, "in %s's name via %s: its MAC does not verify with %s's key (not "
               "asked by %s)", r->rec.name, from->rec.name, r->rec.name, r->rec.name);
        return;
    }
    if (m->punch_n <= r->punch_seen) {
        refuse(g, now_ms, "from %s via %s: number %llu replayed (the last accepted is %llu)",
               r->rec.name, from->rec.name, (unsigned long long)m->punch_n,
               (unsigned long long)r->punch_seen);
        return;
    }
    r->punch_seen = m->punch_n;
    if (g->h.punch) g->h.punch(g->h.ctx, r);
}

/* This node relays: the requester must be the sender, the target a live
 * member, and the requester within its rate. */
static void relay(gossip *g, gossip_member *from, const gossip_msg *m, int64_t now_ms)
{
    if (memcmp(m->punch_from, from->rec.wg_pub, GOSSIP_KEY_LEN) != 0) {
        refuse(g, now_ms, "%s asked this node to relay a request of %s (a member asks only "
               "for itself)", from->rec.name, name_of(g, m->punch_from));
        return;
    }
    gossip_member *t = member_of(g, m->punch_to);
    if (!live(t) || t == from) {
        refuse(g, now_ms, "%s asked this node to relay one to %s, %s", from->rec.name,
               name_of(g, m->punch_to), t == from ? "itself" : "no live member here");
        return;
    }
    if (now_ms - from->punch_relay_ms >= PUNCH_RELAY_WINDOW_MS || from->punch_relay_ms == 0) {
        from->punch_relay_ms = now_ms ? now_ms : 1;
        from->punch_relayed = 0;
    }
    if (from->punch_relayed >= PUNCH_RELAY_BURST) {
        refuse(g, now_ms, "%s asked for more than %d relays in a second", from->rec.name,
               PUNCH_RELAY_BURST);
        return;
    }
    from->punch_relayed++;
    gossip_msg out = *m; /* unchanged but for the hop's own keys (from, MAC) */
    out.updates = NULL;
    out.nupdates = 0;
    out.data = NULL;
    out.data_len = 0;
    gossip_send_to(g, t->rec.address, t->rec.port, &out);
}

void gossip_punch_receive(gossip *g, gossip_member *from, const gossip_msg *m, int64_t now_ms)
{
    if (!live(from)) {
        refuse(g, now_ms, "from %s, which this node holds %s", from->rec.name,
               gossip_state_name(from->state));
        return;
    }
    if (self_of(g)->rec.left) return;
    if (memcmp(m->punch_to, self_of(g)->rec.wg_pub, GOSSIP_KEY_LEN) == 0)
        for_me(g, from, m, now_ms);
    else
        relay(g, from, m, now_ms);
}

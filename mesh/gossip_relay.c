/* gossip_relay.c — the RELAY message (docs/PROTOCOL.md, "Relays"): a member
 * that cannot reach a peer directly asks a third member to forward the
 * pair's WireGuard datagrams; the relay answers both sides with the UDP
 * port it opened for each. Which relay to ask, and when, is relay.c's
 * business; moving the datagrams is the daemon's; this file builds the
 * request and judges it at each hop.
 *
 * A member speaks only for itself: the relay acts only on a request whose
 * requester sent it the datagram (the datagram's MAC says so), and passes
 * it to the peer with the requester's MAC under the requester-peer pair
 * key (which the relay cannot compute), so the peer believes only what the
 * requester asked, through which relay; the ports are the relay's own word
 * (its datagram's MAC). Numbers that do not rise are replays. Every refusal
 * is counted (gossip_relay_refusals) and logged at most once a second. */
#include "gossip_internal.h"

#include "mesh_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A relay answers at most this many requests of one requester per second. */
#define RELAY_BURST 8
#define RELAY_WINDOW_MS 1000

static const char RELAY_LABEL[] = "shardnode relay v1";

void gossip_relay_mac(const uint8_t key[32], const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                      const uint8_t from[GOSSIP_KEY_LEN], const uint8_t to[GOSSIP_KEY_LEN],
                      const uint8_t via[GOSSIP_KEY_LEN], uint64_t n,
                      uint8_t mac[GOSSIP_PUNCH_MAC_LEN])
{
    uint8_t buf[sizeof RELAY_LABEL + GOSSIP_MESH_ID_LEN + 3 * GOSSIP_KEY_LEN + 8];
    size_t o = 0;
    memcpy(buf, RELAY_LABEL, sizeof RELAY_LABEL); /* with its NUL */
    o += sizeof RELAY_LABEL;
    memcpy(buf + o, mesh_id, GOSSIP_MESH_ID_LEN);
    o += GOSSIP_MESH_ID_LEN;
    memcpy(buf + o, from, GOSSIP_KEY_LEN);
    o += GOSSIP_KEY_LEN;
    memcpy(buf + o, to, GOSSIP_KEY_LEN);
    o += GOSSIP_KEY_LEN;
    memcpy(buf + o, via, GOSSIP_KEY_LEN);
    o += GOSSIP_KEY_LEN;
    for (int i = 0; i < 8; i++) buf[o++] = (uint8_t)(n >> (56 - 8 * i));
    uint8_t full[GOSSIP_MAC_LEN];
    gossip_mac(key, buf, o, full);
    memcpy(mac, full, GOSSIP_PUNCH_MAC_LEN);
}

uint64_t gossip_relay_refusals(const gossip *g) { return g->relay_refused; }

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
    g->relay_refused++;
    if (g->relay_log_ms && now_ms - g->relay_log_ms < 1000) return;
    g->relay_log_ms = now_ms ? now_ms : 1;
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    gossip_log(g, "gossip: refused a RELAY: %s (%llu refused so far)", line,
               (unsigned long long)g->relay_refused);
}

static bool same(const uint8_t a[GOSSIP_KEY_LEN], const uint8_t b[GOSSIP_KEY_LEN])
{
    return memcmp(a, b, GOSSIP_KEY_LEN) == 0;
}

int gossip_relay_send(gossip *g, const uint8_t peer[GOSSIP_KEY_LEN],
                      const uint8_t via[GOSSIP_KEY_LEN], int64_t now_ms, char *err,
                      size_t errlen)
{
    gossip_member *self = self_of(g);
    gossip_member *t = member_of(g, peer), *v = member_of(g, via);
    if (!live(t) || t->self)
        return mesh_errf(err, errlen, "gossip RELAY: the peer (%s) is no live member",
                         name_of(g, peer));
    if (!live(v) || v->self || v == t)
        return mesh_errf(err, errlen, "gossip RELAY: the relay (%s) is no live member",
                         name_of(g, via));
    if (self->rec.left) return mesh_errf(err, errlen, "gossip RELAY: this node left the mesh");
    uint64_t n = (uint64_t)gossip_wall_now(g, now_ms);
    if (n <= g->relay_last_n) n = g->relay_last_n + 1;
    g->relay_last_n = n;
    gossip_msg m = {.type = GOSSIP_MSG_RELAY, .punch_n = n};
    memcpy(m.punch_from, self->rec.wg_pub, GOSSIP_KEY_LEN);
    memcpy(m.punch_to, peer, GOSSIP_KEY_LEN);
    memcpy(m.relay_via, via, GOSSIP_KEY_LEN);
    gossip_relay_mac(t->mac_key, self->rec.mesh_id, m.punch_from, m.punch_to, m.relay_via, n,
                     m.punch_mac);
    gossip_send_to(g, v->rec.address, v->rec.port, &m);
    return 0;
}

/* This node is asked to relay: the requester must be the sender. */
static void as_relay(gossip *g, gossip_member *from, const gossip_msg *m, int64_t now_ms)
{
    if (m->relay_ports != 0) {
        refuse(g, now_ms, "%s sent this node, the relay, an answer", from->rec.name);
        return;
    }
    if (!same(m->punch_from, from->rec.wg_pub)) {
        refuse(g, now_ms, "%s asked this node to relay for %s (a member asks only for itself)",
               from->rec.name, name_of(g, m->punch_from));
        return;
    }
    gossip_member *t = member_of(g, m->punch_to);
    if (!live(t) || t == from || t->self) {
        refuse(g, now_ms, "%s asked this node to relay to %s, %s", from->rec.name,
               name_of(g, m->punch_to), t == from || (t && t->self) ? "a member of the request"
                                                                    : "no live member here");
        return;
    }
    if (now_ms - from->relay_ms >= RELAY_WINDOW_MS || from->relay_ms == 0) {
        from->relay_ms = now_ms ? now_ms : 1;
        from->relay_asked = 0;
    }
    if (from->relay_asked >= RELAY_BURST) {
        refuse(g, now_ms, "%s asked more than %d times in a second", from->rec.name, RELAY_BURST);
        return;
    }
    from->relay_asked++;
    uint16_t pa = 0, pb = 0;
    if (!g->h.relay_open || g->h.relay_open(g->h.ctx, from, t, &pa, &pb) != 0 || !pa || !pb)
        return; /* this node does not relay (the hook logged why): no answer */
    gossip_msg out = *m;
    out.updates = NULL;
    out.nupdates = 0;
    out.data = NULL;
    out.data_len = 0;
    out.relay_ports = (uint32_t)pa << 16 | pb;
    gossip_send_to(g, from->rec.address, from->rec.port, &out);
    gossip_send_to(g, t->rec.address, t->rec.port, &out);
}

/* The relay's answer to this node's request. */
static void as_requester(gossip *g, gossip_member *from, const gossip_msg *m, int64_t now_ms)
{
    gossip_member *t = member_of(g, m->punch_to);
    if (!live(t)) {
        refuse(g, now_ms, "an answer from %s about %s, no live member here", from->rec.name,
               name_of(g, m->punch_to));
        return;
    }
    if (g->h.relay_offer) g->h.relay_offer(g->h.ctx, t, from, (uint16_t)(m->relay_ports >> 16), true);
}

/* The relay passes on the peer's request: believed only with the peer's MAC. */
static void as_peer(gossip *g, gossip_member *from, const gossip_msg *m, int64_t now_ms)
{
    gossip_member *r = member_of(g, m->punch_from);
    if (!live(r) || r == from) {
        refuse(g, now_ms, "from %s via %s: the requester is %s", name_of(g, m->punch_from),
               from->rec.name, r == from ? "the relay itself" : "no live member here");
        return;
    }
    uint8_t mac[GOSSIP_PUNCH_MAC_LEN];
    gossip_relay_mac(r->mac_key, self_of(g)->rec.mesh_id, m->punch_from, m->punch_to,
                     m->relay_via, m->punch_n, mac);
    uint8_t diff = 0;
    for (int i = 0; i < GOSSIP_PUNCH_MAC_LEN; i++) diff |= (uint8_t)(mac[i] ^ m->punch_mac[i]);
    if (diff) {
        refuse(g, now_ms, "in %s's name via %s: its MAC does not verify with %s's key (not "
               "asked by %s)", r->rec.name, from->rec.name, r->rec.name, r->rec.name);
        return;
    }
    if (m->punch_n < r->relay_seen) {
        refuse(g, now_ms, "from %s via %s: number %llu replayed (the last accepted is %llu)",
               r->rec.name, from->rec.name, (unsigned long long)m->punch_n,
               (unsigned long long)r->relay_seen);
        return;
    }
    r->relay_seen = m->punch_n;
    if (g->h.relay_offer)
        g->h.relay_offer(g->h.ctx, r, from, (uint16_t)(m->relay_ports & 0xffff), false);
}

void gossip_relay_receive(gossip *g, gossip_member *from, const gossip_msg *m, int64_t now_ms)
{
    if (!live(from)) {
        refuse(g, now_ms, "from %s, which this node holds %s", from->rec.name,
               gossip_state_name(from->state));
        return;
    }
    gossip_member *self = self_of(g);
    if (self->rec.left) return;
    bool to_via = same(m->relay_via, self->rec.wg_pub);
    if (to_via) {
        as_relay(g, from, m, now_ms);
        return;
    }
    /* An answer: it must come from the relay it names, with ports. */
    if (!same(m->relay_via, from->rec.wg_pub)) {
        refuse(g, now_ms, "%s sent an answer in another relay's name", from->rec.name);
        return;
    }
    if ((m->relay_ports >> 16) == 0 || (m->relay_ports & 0xffff) == 0) {
        refuse(g, now_ms, "%s sent an answer without ports (%u, %u)", from->rec.name,
               (unsigned)(m->relay_ports >> 16), (unsigned)(m->relay_ports & 0xffff));
        return;
    }
    if (same(m->punch_from, self->rec.wg_pub))
        as_requester(g, from, m, now_ms);
    else if (same(m->punch_to, self->rec.wg_pub))
        as_peer(g, from, m, now_ms);
    else
        refuse(g, now_ms, "%s sent an answer about two other members", from->rec.name);
}

/* daemon_relay.c — relays (docs/PROTOCOL.md, "Relays"): the daemon's side of
 * mesh/relay.c (which member relays which pair, and when) and of
 * mesh/gossip_relay.c (the RELAY message).
 *
 * As a relay this node forwards WireGuard datagrams as they are, so it
 * never reads them: for each pair (a, b) it opens two UDP sockets on its
 * underlay, one port for each side. A datagram from a's address on a's port
 * leaves from b's port to b's address, and back; an address is learnt from
 * the first datagram that comes from the IP this node's own WireGuard sees
 * the member at (a NAT may give the relay its own port mapping), so no one
 * else can take a side. Only datagrams shaped as WireGuard's four message
 * types are forwarded (type, three zero bytes, their sizes); anything else
 * is dropped and counted. A pair is closed when its asker has not renewed
 * it for RELAY_LEASE_MS, or either side is no longer live.
 *
 * As a member of a relayed pair it points the peer's WireGuard endpoint at
 * the relay's port for it (and turns the keepalive off and on, which sends
 * a handshake at once), and back at the peer's own endpoint when relaying
 * stops; punching's attempts leave a relayed peer alone. */
#include "daemon_internal.h"
#include "node_base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RELAY_MAX_PAIRS 64
#define RELAY_MAX_PER_ASKER 8 /* pairs one member may have this node relay */
#define RELAY_LEASE_MS 60000
#define RELAY_DGRAM_MAX 65536
#define DAEMON_KEEPALIVE_S 25
#define RELAY_CROSS_MS 1000 /* an initiation this soon after the other side's crossed it */

typedef struct relay_fwd {
    daemon_t *d;
    uint8_t key[2][GOSSIP_KEY_LEN];     /* [0] the asker, [1] its peer */
    char name[2][MESH_NAME_MAX];
    int fd[2];                          /* fd[i]: the port side i sends to */
    uint16_t port[2];
    struct event *ev[2];
    char want_ip[2][64];                /* where this node's WireGuard sees each side */
    struct sockaddr_storage at[2];      /* each side's address, once learnt */
    socklen_t at_len[2];
    uint8_t *pend[2];                   /* one datagram from side i, waiting for the other */
    size_t pend_len[2];
    int64_t renewed_ms, opened_ms;
    uint64_t pkts[2], bytes[2];         /* forwarded from side i */
    uint64_t dropped;                   /* not WireGuard, or from elsewhere */
    int64_t init_ms[2];                 /* side i's last initiation sent on (0: none) */
    bool heard[2];                      /* side i sent something on since the other's */
    uint64_t crossed;                   /* initiations held back: they crossed */
} relay_fwd;

/* ---- helpers ---- */

/* host of "host:port" or "[v6]:port" into out; 0, or -1 when malformed. */
static int endpoint_host(const char *ep, char *out, size_t outlen)
{
    const char *colon;
    if (ep[0] == '[') {
        const char *end = strchr(ep, ']');
        if (!end || (size_t)(end - ep - 1) >= outlen) return -1;
        memcpy(out, ep + 1, (size_t)(end - ep - 1));
        out[end - ep - 1] = '\0';
        return 0;
    }
    colon = strrchr(ep, ':');
    if (!colon || (size_t)(colon - ep) >= outlen) return -1;
    memcpy(out, ep, (size_t)(colon - ep));
    out[colon - ep] = '\0';
    return 0;
}

static const gossip_member *member_by_key(daemon_t *d, const uint8_t key[GOSSIP_KEY_LEN])
{
    const gossip_member *const *ms;
    size_t n = gossip_members(d->g, &ms);
    for (size_t i = 0; i < n; i++)
        if (!ms[i]->displaced && memcmp(ms[i]->rec.wg_pub, key, GOSSIP_KEY_LEN) == 0)
            return ms[i];
    return NULL;
}

static bool live(const gossip_member *m)
{
    return m && !m->displaced && (m->state == GOSSIP_ALIVE || m->state == GOSSIP_SUSPECT);
}

bool daemon_peer_direct_path(const daemon_peer *p)
{
    return daemon_peer_direct(p) && !p->relayed && p->handshake_s > p->handshake_base;
}

/* WireGuard's four message types as they travel: type 1-4, three zero
 * bytes, and each type's size (a data message: a 16-byte header and at
 * least its 16-byte tag; its padding to 16 bytes stops at the MTU, so its
 * length is not always a multiple of 16). */
static bool wireguard_shaped(const uint8_t *b, size_t n)
{
    if (n < 4 || b[1] || b[2] || b[3]) return false;
    switch (b[0]) {
    case 1: return n == 148;
    case 2: return n == 92;
    case 3: return n == 64;
    case 4: return n >= 32;
    }
    return false;
}

static void addr_ip(const struct sockaddr_storage *ss, char *out, size_t outlen)
{
    int port;
    daemon_addr_string((const struct sockaddr *)ss, out, outlen, &port);
}

/* ---- forwarding (this node relays) ---- */

static void fwd_close(daemon_t *d, size_t i, const char *why)
{
    relay_fwd *f = d->fwd[i];
    daemon_log(d, "relay: stopped relaying %s <-> %s (%s; forwarded %llu + %llu datagrams, "
               "%llu dropped)", f->name[0], f->name[1], why, (unsigned long long)f->pkts[0],
               (unsigned long long)f->pkts[1], (unsigned long long)f->dropped);
    for (int s = 0; s < 2; s++) {
        if (f->ev[s]) event_free(f->ev[s]);
        if (f->fd[s] >= 0) close(f->fd[s]);
        free(f->pend[s]);
    }
    free(f);
    d->fwd[i] = d->fwd[--d->nfwd];
}

/* Sends one datagram from side s on to the other side (known), and keeps
 * what the crossing rule needs. */
static void fwd_send(relay_fwd *f, int s, const uint8_t *b, size_t n, int64_t now)
{
    int o = 1 - s;
    if (sendto(f->fd[o], b, n, MSG_DONTWAIT, (struct sockaddr *)&f->at[o], f->at_len[o]) !=
        (ssize_t)n)
        return;
    f->pkts[s]++;
    f->bytes[s] += (uint64_t)n;
    f->heard[s] = true;
    if (b[0] == 1) {
        f->init_ms[s] = now;
        f->heard[o] = false;
    }
}

/* Two handshake initiations that cross (each side sent its own before the
 * other's reached it) stall both: each side takes the other's, which
 * discards its own, and then refuses the response to it; WireGuard tries
 * again 5 s later. It happens whenever both sides start at once, and the
 * first datagram kept for a side not known yet makes it certain. So an
 * initiation from side s is not sent on when the other side's went to s
 * less than RELAY_CROSS_MS ago and s has sent nothing on since: s answers
 * the one it gets, and the handshake completes in one round trip. */
static bool fwd_crossed(const relay_fwd *f, int s, const uint8_t *b, int64_t now)
{
    int o = 1 - s;
    return b[0] == 1 && f->init_ms[o] > 0 && now - f->init_ms[o] < RELAY_CROSS_MS && !f->heard[s];
}

static void fwd_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    relay_fwd *f = arg;
    int s = fd == f->fd[0] ? 0 : 1, o = 1 - s;
    static uint8_t buf[RELAY_DGRAM_MAX];
    int64_t now = daemon_now_ms(); /* one batch: at most 64 datagrams read at once */
    for (int k = 0; k < 64; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        ssize_t n = recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&ss, &sl);
        if (n < 0) return;
        char ip[64];
        addr_ip(&ss, ip, sizeof ip);
        if (strcmp(ip, f->want_ip[s]) != 0 || !wireguard_shaped(buf, (size_t)n)) {
            f->dropped++;
            continue;
        }
        if (!f->at_len[s] || memcmp(&f->at[s], &ss, sl) != 0) {
            memcpy(&f->at[s], &ss, sl);
            f->at_len[s] = sl;
            /* What the other side sent before this one was known. */
            if (f->pend[o]) {
                fwd_send(f, o, f->pend[o], f->pend_len[o], now);
                free(f->pend[o]);
                f->pend[o] = NULL;
            }
        }
        if (!f->at_len[o]) {
            uint8_t *p = malloc((size_t)n);
            if (p) {
                free(f->pend[s]);
                memcpy(p, buf, (size_t)n);
                f->pend[s] = p;
                f->pend_len[s] = (size_t)n;
            }
            continue;
        }
        if (fwd_crossed(f, s, buf, now)) {
            f->crossed++;
            continue;
        }
        fwd_send(f, s, buf, (size_t)n, now);
    }
}

static int open_port(daemon_t *d, int family, uint16_t *port)
{
    int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_family = (sa_family_t)family;
    socklen_t sl = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        daemon_log(d, "relay: cannot open a UDP port: %s", strerror(errno));
        close(fd);
        return -1;
    }
    *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                    : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return fd;
}

int daemon_relay_open_hook(void *ctx, const gossip_member *a, const gossip_member *b,
                           uint16_t *port_a, uint16_t *port_b)
{
    daemon_t *d = ctx;
    if (d->no_relay || !d->endpoint[0] || !d->wg || !d->base) {
        daemon_log(d, "relay: %s asks this node to relay for it and %s; refused (%s)",
                   a->rec.name, b->rec.name,
                   d->no_relay ? "--no-relay" : !d->endpoint[0] ? "this node is behind NAT"
                                                                : "no WireGuard");
        return -1;
    }
    int64_t now = daemon_now_ms();
    const gossip_member *mm[2] = {a, b};
    char ip[2][64];
    for (int s = 0; s < 2; s++) {
        const daemon_peer *p = daemon_peer_find(d, mm[s]->rec.wg_pub);
        if (!daemon_peer_direct_path(p) || !p->endpoint[0] ||
            endpoint_host(p->endpoint, ip[s], sizeof ip[s]) != 0) {
            daemon_log(d, "relay: refused %s <-> %s: no direct WireGuard link with %s",
                       a->rec.name, b->rec.name, mm[s]->rec.name);
            return -1;
        }
    }
    int mine = 0;
    for (size_t i = 0; i < d->nfwd; i++) {
        relay_fwd *f = d->fwd[i];
        if (memcmp(f->key[0], a->rec.wg_pub, GOSSIP_KEY_LEN) != 0) continue;
        if (memcmp(f->key[1], b->rec.wg_pub, GOSSIP_KEY_LEN) == 0) {
            /* A renewal: where this node's WireGuard sees the two now (a side
             * that moved sends from its new address from here on). */
            f->renewed_ms = now;
            for (int s = 0; s < 2; s++)
                if (strcmp(f->want_ip[s], ip[s]) != 0) {
                    memcpy(f->want_ip[s], ip[s], sizeof f->want_ip[s]);
                    f->at_len[s] = 0;
                }
            *port_a = f->port[0];
            *port_b = f->port[1];
            return 0;
        }
        mine++;
    }
    if (d->nfwd == RELAY_MAX_PAIRS || mine >= RELAY_MAX_PER_ASKER) {
        daemon_log(d, "relay: refused %s <-> %s: already relaying %d pairs (%d of them for %s)",
                   a->rec.name, b->rec.name, (int)d->nfwd, mine, a->rec.name);
        return -1;
    }
    if (!d->fwd) {
        d->fwd = calloc(RELAY_MAX_PAIRS, sizeof *d->fwd);
        if (!d->fwd) return -1;
    }
    relay_fwd *f = calloc(1, sizeof *f);
    if (!f) return -1;
    f->d = d;
    f->fd[0] = f->fd[1] = -1;
    for (int s = 0; s < 2; s++) {
        memcpy(f->key[s], mm[s]->rec.wg_pub, GOSSIP_KEY_LEN);
        snprintf(f->name[s], sizeof f->name[s], "%s", mm[s]->rec.name);
        snprintf(f->want_ip[s], sizeof f->want_ip[s], "%s", ip[s]);
        int family = strchr(ip[s], ':') ? AF_INET6 : AF_INET;
        f->fd[s] = open_port(d, family, &f->port[s]);
        if (f->fd[s] >= 0)
            f->ev[s] = event_new(d->base, f->fd[s], EV_READ | EV_PERSIST, fwd_readable, f);
        if (f->fd[s] < 0 || !f->ev[s] || event_add(f->ev[s], NULL) != 0) {
            for (int k = 0; k <= s; k++) {
                if (f->ev[k]) event_free(f->ev[k]);
                if (f->fd[k] >= 0) close(f->fd[k]);
            }
            free(f);
            return -1;
        }
    }
    f->renewed_ms = f->opened_ms = now;
    d->fwd[d->nfwd++] = f;
    *port_a = f->port[0];
    *port_b = f->port[1];
    daemon_log(d, "relay: relaying %s (%s, port %u) <-> %s (%s, port %u), WireGuard datagrams "
               "as they are", f->name[0], f->want_ip[0], (unsigned)f->port[0], f->name[1],
               f->want_ip[1], (unsigned)f->port[1]);
    return 0;
}

json_t *daemon_relay_status_json(daemon_t *d)
{
    json_t *arr = json_array();
    int64_t now = daemon_now_ms();
    for (size_t i = 0; i < d->nfwd; i++) {
        const relay_fwd *f = d->fwd[i];
        json_array_append_new(
            arr, json_pack("{s:[s,s], s:[i,i], s:[I,I], s:[I,I], s:I, s:I, s:f}", "pair",
                           f->name[0], f->name[1], "ports", f->port[0], f->port[1], "datagrams",
                           (json_int_t)f->pkts[0], (json_int_t)f->pkts[1], "bytes",
                           (json_int_t)f->bytes[0], (json_int_t)f->bytes[1], "dropped",
                           (json_int_t)f->dropped, "crossed", (json_int_t)f->crossed, "since_s",
                           (double)(now - f->opened_ms) / 1e3));
    }
    return arr;
}

/* ---- this node's own pairs ---- */

static void request_hook(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN],
                         const uint8_t via[GOSSIP_KEY_LEN])
{
    daemon_t *d = ctx;
    char err[256];
    if (gossip_relay_send(d->g, peer, via, daemon_now_ms(), err, sizeof err) != 0)
        daemon_log(d, "relay: %s", err);
}

static int point(daemon_t *d, const gossip_member *m, const char *ep)
{
    char cidr[GOSSIP_ADDR_MAX + 8], err[512];
    daemon_host_cidr(m->rec.address, cidr, sizeof cidr);
    const char *allowed[1] = {cidr};
    if (mesh_wg_set_peer(d->wg, m->rec.wg_pub, ep, allowed, 1, 0, err, sizeof err) != 0 ||
        mesh_wg_set_peer(d->wg, m->rec.wg_pub, ep, allowed, 1, DAEMON_KEEPALIVE_S, err,
                         sizeof err) != 0) {
        daemon_log(d, "relay: wireguard: cannot point %s at %s: %s", m->rec.name,
                   ep ? ep : "(none)", err);
        return -1;
    }
    return 0;
}

static void use_hook(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN],
                     const uint8_t via[GOSSIP_KEY_LEN], uint16_t port)
{
    daemon_t *d = ctx;
    const gossip_member *m = member_by_key(d, peer), *v = member_by_key(d, via);
    daemon_peer *p = daemon_peer_of(d, peer);
    char host[64];
    if (!m || !v || !p || !d->wg || !v->rec.nendpoints ||
        endpoint_host(v->rec.endpoints[0], host, sizeof host) != 0)
        return;
    char ep[MESH_WG_ENDPOINT_MAX];
    snprintf(ep, sizeof ep, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, (unsigned)port);
    if (point(d, m, ep) != 0) return;
    p->relayed = true;
    p->relay_since_s = (int64_t)time(NULL); /* compared with WireGuard's handshake time */
    p->relay_rx0 = p->rx_bytes;
    snprintf(p->relay_ep, sizeof p->relay_ep, "%s", ep);
}

static void unuse_hook(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN])
{
    daemon_t *d = ctx;
    const gossip_member *m = member_by_key(d, peer);
    daemon_peer *p = daemon_peer_find(d, peer);
    if (!p) return;
    p->relayed = false;
    p->relay_ep[0] = '\0';
    p->handshake_base = p->handshake_s;
    if (m && d->wg) point(d, m, m->rec.nendpoints ? m->rec.endpoints[0] : NULL);
    /* A punching round now, both sides alike (the peer's relay.c stops or
     * starts its trial at about the same time): a direct path, if the
     * routers allow one by now, is found while the trial lasts. */
    if (d->punch) punch_kick(d->punch, peer, daemon_now_ms());
}

static void relay_log_hook(void *ctx, const char *line) { daemon_log(ctx, "%s", line); }

void daemon_relay_offer_hook(void *ctx, const gossip_member *peer, const gossip_member *via,
                             uint16_t port, bool granted)
{
    daemon_t *d = ctx;
    if (d->relay)
        relay_offered(d->relay, peer->rec.wg_pub, via->rec.wg_pub, port, granted,
                      daemon_now_ms());
}

int daemon_relay_open(daemon_t *d, char *err, size_t errlen)
{
    if (!d->wg) return 0; /* loopback: nothing to relay */
    relay_hooks h = {.ctx = d, .request = request_hook, .use = use_hook, .unuse = unuse_hook,
                     .log = relay_log_hook};
    return relay_create(&d->relay, NULL, &h, d->wg_pub, err, errlen);
}

void daemon_relay_close(daemon_t *d)
{
    while (d->nfwd) fwd_close(d, d->nfwd - 1, "the node stops");
    free(d->fwd);
    d->fwd = NULL;
    relay_destroy(d->relay);
    d->relay = NULL;
}

void daemon_relay_poll(daemon_t *d)
{
    if (!d->relay) return;
    const gossip_member *const *ms;
    size_t n = gossip_members(d->g, &ms);
    int64_t now = daemon_now_ms();
    for (size_t i = 0; i < n; i++) {
        const gossip_member *m = ms[i];
        if (m->self) continue;
        if (m->displaced || m->state == GOSSIP_LEFT) {
            relay_forget(d->relay, m->rec.wg_pub);
            continue;
        }
        const daemon_peer *p = daemon_peer_find(d, m->rec.wg_pub);
        relay_peer rp = {.name = m->rec.name, .live = live(m), .nat = m->rec.nat != 0,
                         .direct = daemon_peer_direct_path(p),
                         .unreachable = d->punch && punch_link_of(d->punch, m->rec.wg_pub, now) ==
                                                        PUNCH_LINK_UNREACHABLE,
                         .rtt_ms = m->rtt_ms};
        memcpy(rp.key, m->rec.wg_pub, GOSSIP_KEY_LEN);
        relay_update(d->relay, &rp, now);
    }
    /* Pairs this node relays: renewed, and both sides still live. */
    for (size_t i = d->nfwd; i-- > 0;) {
        relay_fwd *f = d->fwd[i];
        const gossip_member *a = member_by_key(d, f->key[0]), *b = member_by_key(d, f->key[1]);
        if (!live(a) || !live(b))
            fwd_close(d, i, !live(a) ? "the asker is not live" : "the peer is not live");
        else if (now - f->renewed_ms > RELAY_LEASE_MS)
            fwd_close(d, i, "not renewed");
    }
}

void daemon_relay_tick(daemon_t *d, int64_t now_ms)
{
    if (d->relay) relay_tick(d->relay, now_ms);
}

const gossip_member *daemon_relay_via(daemon_t *d, const gossip_member *m)
{
    relay_stats st;
    if (!d->relay || relay_stats_of(d->relay, m->rec.wg_pub, &st) != 0 || !st.relayed)
        return NULL;
    return member_by_key(d, st.via);
}

bool daemon_relay_up(daemon_t *d, const gossip_member *m)
{
    const daemon_peer *p = daemon_peer_find(d, m->rec.wg_pub);
    return daemon_relay_via(d, m) && p && p->relayed && daemon_peer_direct(p) &&
           (p->handshake_s >= p->relay_since_s || p->rx_bytes > p->relay_rx0);
}

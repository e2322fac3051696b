/* daemon.c — the running node (`shardnode up`, and `join` once admitted):
 * its WireGuard interface, SWIM gossip over UDP on the overlay address, TCP
 * on the same port for full-state sync and for joiners, and the control
 * socket the CLI talks to. One libevent loop on one thread drives it all;
 * gossip.c decides, this file moves bytes and keeps WireGuard's peers in
 * step with the view (PROTOCOL.md, "Gossip" and "Joining").
 *
 * WireGuard peers follow the member states: ALIVE and SUSPECT members are
 * peers with their overlay address; a DEAD member keeps its key but loses
 * its address, so nothing flows to or from it while a restarted node can
 * still complete a handshake ("knock"), after which it is let back in to
 * refute; a member that LEFT is removed. Invites are peers too: the key an
 * invite's secret stands for, with one address, admitted only to send a
 * JOIN over TCP. */
#include "daemon_internal.h"

#include "kernels.h"
#include "node_base.h"
#include "pool_core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define DAEMON_TICK_MS 100
#define DAEMON_WG_POLL_MS 1000
#define DAEMON_SAVE_MS 2000
#define DAEMON_KEEPALIVE_S 25
#define DAEMON_DEAD_KEEP_S 3600 /* a dead member stays reachable this long */

/* Every timer (gossip's, the pool's, the quiet period, JOIN's deadlines,
 * saves and polls): a monotonic clock, which a wall clock set back or
 * forward does not move. */
int64_t daemon_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Real time, only for what is signed (a record's signed_ms, an admission's
 * at_ms, through gossip's wall_ms hook) or shown. */
int64_t daemon_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t gossip_wall_hook(void *ctx)
{
    (void)ctx;
    return daemon_wall_ms();
}

void daemon_log(daemon_t *d, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    time_t t = time(NULL); /* shown: real time */
    struct tm tm;
    char ts[32];
    gmtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
    const char *mark = d->insecure ? "INSECURE (no overlay) " : "";
    fprintf(stderr, "%s %s: %s%s\n", ts, d->name, mark, line);
    if (d->logf) {
        fprintf(d->logf, "%s %s: %s%s\n", ts, d->name, mark, line);
        fflush(d->logf);
    }
}

static void gossip_log_hook(void *ctx, const char *line) { daemon_log(ctx, "%s", line); }

/* ---- addresses ---- */

int daemon_sockaddr(const char *addr, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        *len = sizeof *s4;
        return 0;
    }
    if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *len = sizeof *s6;
        return 0;
    }
    return -1;
}

void daemon_addr_string(const struct sockaddr *sa, char *out, size_t outlen, int *port)
{
    out[0] = '\0';
    *port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, out, (socklen_t)outlen);
        *port = ntohs(s4->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, out, (socklen_t)outlen);
        *port = ntohs(s6->sin6_port);
    }
}

/* "10.77.1.2/32" or "fd00::1/128" */
void daemon_host_cidr(const char *addr, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%d", addr, strchr(addr, ':') ? 128 : 32);
}

/* ---- WireGuard peers from member states ---- */

daemon_peer *daemon_peer_find(daemon_t *d, const uint8_t key[GOSSIP_KEY_LEN])
{
    for (size_t i = 0; i < d->npeers; i++)
        if (memcmp(d->peers[i].key, key, GOSSIP_KEY_LEN) == 0) return &d->peers[i];
    return NULL;
}

daemon_peer *daemon_peer_of(daemon_t *d, const uint8_t key[GOSSIP_KEY_LEN])
{
    daemon_peer *p = daemon_peer_find(d, key);
    if (p) return p;
    if (d->npeers == DAEMON_MAX_PEERS) return NULL;
    p = &d->peers[d->npeers++];
    memset(p, 0, sizeof *p);
    memcpy(p->key, key, GOSSIP_KEY_LEN);
    return p;
}

bool daemon_peer_direct(const daemon_peer *p)
{
    /* WireGuard reports the last handshake in wall-clock seconds: compared
     * with real time (a clock step misjudges one link for a while, no more). */
    return p && p->handshake_s > 0 && time(NULL) - p->handshake_s <= DAEMON_DIRECT_S;
}

bool daemon_prefix_insecure(const char *prefix)
{
    return prefix && strncmp(prefix, "127.", 4) == 0;
}

int daemon_set_member_peer(daemon_t *d, const gossip_member *m, const char *endpoint)
{
    char cidr[GOSSIP_ADDR_MAX + 8], err[512];
    if (!d->wg) return 0; /* insecure loopback: no WireGuard */
    daemon_host_cidr(m->rec.address, cidr, sizeof cidr);
    const char *allowed[1] = {cidr};
    if (mesh_wg_set_peer(d->wg, m->rec.wg_pub, endpoint, allowed, 1, DAEMON_KEEPALIVE_S, err,
                         sizeof err) != 0) {
        daemon_log(d, "wireguard: cannot add %s: %s", m->rec.name, err);
        return -1;
    }
    return 0;
}

static void member_changed(void *ctx, const gossip_member *m, int before)
{
    daemon_t *d = ctx;
    d->dirty = true;
    if (m->self) return;
    daemon_peer *p = daemon_peer_of(d, m->rec.wg_pub);
    char err[512];
    const char *ep = m->rec.nendpoints ? m->rec.endpoints[0] : NULL;
    switch (m->state) {
    case GOSSIP_ALIVE:
    case GOSSIP_SUSPECT:
        if (p) p->withdrawn = false;
        /* A new or returning member gets the endpoint it announced; a known
         * one keeps the endpoint WireGuard learned from its packets (the
         * roaming that makes NAT work) while the link is direct. */
        if (before == -1 || before == GOSSIP_DEAD || before == GOSSIP_LEFT ||
            (!daemon_peer_direct(p) && !(p && p->relayed)))
            daemon_set_member_peer(d, m, ep);
        break;
    case GOSSIP_DEAD:
        /* Kept reachable for a while: the dead may only have been cut off
         * (a partition, a network blip), and gossip still syncs with one
         * dead member now and then so both sides find each other again.
         * wg_poll withdraws the address after DAEMON_DEAD_KEEP_S. */
        break;
    case GOSSIP_LEFT:
        if (d->wg && mesh_wg_remove_peer(d->wg, m->rec.wg_pub, err, sizeof err) != 0)
            daemon_log(d, "wireguard: cannot remove %s: %s", m->rec.name, err);
        break;
    }
}

/* ---- hole punching (mesh/punch.c decides, gossip carries PUNCH) ---- */

static const gossip_member *member_by_key(daemon_t *d, const uint8_t key[GOSSIP_KEY_LEN])
{
    const gossip_member *const *ms;
    size_t n = gossip_members(d->g, &ms);
    for (size_t i = 0; i < n; i++)
        if (!ms[i]->displaced && memcmp(ms[i]->rec.wg_pub, key, GOSSIP_KEY_LEN) == 0)
            return ms[i];
    return NULL;
}

static void punch_request_hook(void *ctx, const uint8_t to[GOSSIP_KEY_LEN],
                               const uint8_t via[GOSSIP_KEY_LEN])
{
    daemon_t *d = ctx;
    char err[256];
    if (gossip_punch_send(d->g, to, via, daemon_now_ms(), err, sizeof err) != 0)
        daemon_log(d, "punch: %s", err);
}

/* Points the peer at endpoint and makes WireGuard send a handshake there now:
 * a persistent keepalive turned on sends one at once (wireguard-go and the
 * kernel alike), and with no session that keepalive starts a handshake. */
static void punch_attempt_hook(void *ctx, const uint8_t key[GOSSIP_KEY_LEN], const char *endpoint)
{
    daemon_t *d = ctx;
    const gossip_member *m = member_by_key(d, key);
    char cidr[GOSSIP_ADDR_MAX + 8], err[512];
    if (!m || !d->wg) return;
    const daemon_peer *p = daemon_peer_find(d, key);
    if (p && p->relayed) return; /* relayed: relay.c tries the direct path in its trials */
    daemon_host_cidr(m->rec.address, cidr, sizeof cidr);
    const char *allowed[1] = {cidr};
    if (mesh_wg_set_peer(d->wg, key, endpoint, allowed, 1, 0, err, sizeof err) != 0 ||
        mesh_wg_set_peer(d->wg, key, endpoint, allowed, 1, DAEMON_KEEPALIVE_S, err,
                         sizeof err) != 0)
        daemon_log(d, "punch: wireguard: cannot point %s at %s: %s", m->rec.name, endpoint, err);
}

static void punch_log_hook(void *ctx, const char *line) { daemon_log(ctx, "%s", line); }

static void gossip_punch_hook(void *ctx, const gossip_member *m)
{
    daemon_t *d = ctx;
    if (d->punch) punch_requested(d->punch, m->rec.wg_pub, daemon_now_ms());
}

/* Tells punch.c what WireGuard and the view say of every other member. */
static void punch_poll(daemon_t *d)
{
    if (!d->punch) return;
    const gossip_member *const *ms;
    size_t n = gossip_members(d->g, &ms);
    int64_t now = daemon_now_ms();
    for (size_t i = 0; i < n; i++) {
        const gossip_member *m = ms[i];
        if (m->self) continue;
        if (m->displaced || m->state == GOSSIP_LEFT) {
            punch_forget(d->punch, m->rec.wg_pub);
            continue;
        }
        punch_peer pp = {.name = m->rec.name,
                         .live = m->state == GOSSIP_ALIVE || m->state == GOSSIP_SUSPECT,
                         .direct = daemon_peer_direct_path(daemon_peer_find(d, m->rec.wg_pub)),
                         .nat = m->rec.nat != 0,
                         .nendpoints = m->rec.nendpoints,
                         .endpoints = m->rec.endpoints};
        memcpy(pp.key, m->rec.wg_pub, GOSSIP_KEY_LEN);
        punch_update(d->punch, &pp, now);
    }
}

/* What status calls the pair of this node and m (docs/FORMATS.md, status):
 * "self", "none" (not live), "loopback" (no WireGuard), "relayed" (through
 * the member daemon_relay_via names), else punch.c's "direct", "punched",
 * "pending" or "unreachable". */
const char *daemon_link_name(daemon_t *d, const gossip_member *m, int64_t now_ms)
{
    if (m->self) return "self";
    if (m->state != GOSSIP_ALIVE && m->state != GOSSIP_SUSPECT) return "none";
    if (d->insecure || !d->punch) return "loopback";
    if (daemon_relay_up(d, m)) return "relayed";
    if (daemon_relay_via(d, m)) return "pending"; /* no handshake through the relay yet */
    punch_link l = punch_link_of(d->punch, m->rec.wg_pub, now_ms);
    if (l == PUNCH_LINK_NONE) /* not polled yet: what WireGuard says */
        return daemon_peer_direct(daemon_peer_find(d, m->rec.wg_pub)) ? "direct" : "pending";
    return punch_link_name(l);
}

static int open_punch(daemon_t *d, char *err, size_t errlen)
{
    if (!d->wg) return 0; /* loopback: nothing to punch */
    punch_hooks h = {.ctx = d, .request = punch_request_hook, .attempt = punch_attempt_hook,
                     .log = punch_log_hook};
    return punch_create(&d->punch, NULL, &h, d->endpoint[0] == '\0', err, errlen);
}

static void observe_hook(void *ctx, const char *addr, char *out, size_t outlen)
{
    daemon_t *d = ctx;
    out[0] = '\0';
    const gossip_member *m = gossip_find_addr(d->g, addr);
    const daemon_peer *p = m ? daemon_peer_find(d, m->rec.wg_pub) : NULL;
    /* Through a relay WireGuard sees the relay's port, not the member's. */
    if (p && !p->relayed) snprintf(out, outlen, "%s", p->endpoint);
}

/* Reads WireGuard's view: endpoints as seen (for "observed" and status),
 * handshakes (direct links, and knocks of dead members). */
static void wg_poll(daemon_t *d)
{
    mesh_wg_peer_info *info = NULL;
    size_t n = 0;
    char err[512];
    if (!d->wg) return;
    if (mesh_wg_get_peers(d->wg, &info, &n, err, sizeof err) != 0) {
        daemon_log(d, "wireguard: %s", err);
        return;
    }
    const gossip_member *const *ms;
    size_t nm = gossip_members(d->g, &ms);
    for (size_t i = 0; i < n; i++) {
        daemon_peer *p = daemon_peer_find(d, info[i].public_key);
        if (!p) continue;
        snprintf(p->endpoint, sizeof p->endpoint, "%s", info[i].endpoint);
        p->handshake_s = info[i].last_handshake_sec;
        int64_t now_ms = daemon_now_ms();
        if (p->polled_ms > 0 && now_ms > p->polled_ms && info[i].rx_bytes >= p->rx_bytes &&
            info[i].tx_bytes >= p->tx_bytes) {
            double dt = (double)(now_ms - p->polled_ms) / 1e3;
            p->rx_rate = (double)(info[i].rx_bytes - p->rx_bytes) / dt;
            p->tx_rate = (double)(info[i].tx_bytes - p->tx_bytes) / dt;
        }
        p->polled_ms = now_ms;
        p->rx_bytes = info[i].rx_bytes;
        p->tx_bytes = info[i].tx_bytes;
        for (size_t j = 0; j < nm; j++) {
            const gossip_member *m = ms[j];
            if (memcmp(m->rec.wg_pub, p->key, GOSSIP_KEY_LEN) != 0) continue;
            if (m->state == GOSSIP_DEAD && !p->withdrawn &&
                daemon_now_ms() - m->state_ms > (int64_t)DAEMON_DEAD_KEEP_S * 1000) {
                /* Dead for long: nothing flows to or from it any more, but
                 * its key stays so a restart can still knock. */
                char err[512];
                p->withdrawn = true;
                p->knocked = false;
                p->handshake_at_death = p->handshake_s;
                if (mesh_wg_set_peer(d->wg, m->rec.wg_pub, NULL, NULL, 0, 0, err, sizeof err))
                    daemon_log(d, "wireguard: cannot withdraw %s's address: %s", m->rec.name,
                               err);
            }
            if (m->state == GOSSIP_DEAD && p->withdrawn && !p->knocked && p->handshake_s > 0 &&
                p->handshake_s != p->handshake_at_death) {
                /* It handshook after we declared it dead: a restart. Let
                 * its packets in so it can refute with a newer record. */
                p->knocked = true;
                daemon_log(d, "wireguard: %s (dead) completed a handshake; letting it back in "
                           "to show it is alive", m->rec.name);
                daemon_set_member_peer(d, m, NULL);
            }
            if (m->state != GOSSIP_DEAD) p->knocked = false;
        }
    }
    free(info);
    punch_poll(d);
    daemon_relay_poll(d);
}

/* ---- UDP ---- */

static void udp_send(void *ctx, const char *addr, int port, const uint8_t *buf, size_t len)
{
    daemon_t *d = ctx;
    struct sockaddr_storage ss;
    socklen_t sl;
    if (daemon_sockaddr(addr, port, &ss, &sl) != 0) return;
    /* A lost datagram is what SWIM is built for: no retry here. */
    (void)sendto(d->udp_fd, buf, len, MSG_DONTWAIT, (struct sockaddr *)&ss, sl);
}

static void udp_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    daemon_t *d = arg;
    uint8_t buf[65536];
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        ssize_t n = recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&ss, &sl);
        if (n < 0) return;
        char addr[GOSSIP_ADDR_MAX];
        int port;
        daemon_addr_string((struct sockaddr *)&ss, addr, sizeof addr, &port);
        gossip_receive(d->g, addr, port, buf, (size_t)n, daemon_now_ms());
    }
}

/* A socket bound to the overlay address only (FREEBIND: an IPv6 address may
 * still be tentative). */
static int bind_overlay(daemon_t *d, int type, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (daemon_sockaddr(d->overlay, d->gossip_port, &ss, &sl) != 0)
        return node_errf(err, errlen, "overlay address %s is not an IP address", d->overlay);
    int fd = socket(ss.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return node_errf(err, errlen, "socket: %s", strerror(errno));
    int one = 1;
    /* TCP only: on a UDP socket SO_REUSEADDR would let any local user bind
     * the same address and port (with SO_REUSEADDR too) and take the
     * datagrams meant for the daemon. */
    if (type == SOCK_STREAM) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss.ss_family == AF_INET)
        setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof one);
    else
        setsockopt(fd, IPPROTO_IPV6, IPV6_FREEBIND, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || (type == SOCK_STREAM && listen(fd, 64) != 0)) {
        node_errf(err, errlen, "cannot bind %s port %d (%s): %s", d->overlay, d->gossip_port,
                  type == SOCK_STREAM ? "tcp" : "udp", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- the loop ---- */

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    daemon_t *d = arg;
    int64_t now = daemon_now_ms();
    if (d->leaving) {
        /* The LEFT record goes out three times, 200 ms apart: datagrams
         * may be lost, and nobody will ask again. */
        char err[256];
        if (now >= d->leave_done_ms - 400 + 200 * d->leave_sends && d->leave_sends < 2 &&
            gossip_leave(d->g, now, err, sizeof err) == 0)
            d->leave_sends++;
        if (now >= d->leave_done_ms) event_base_loopexit(d->base, NULL);
        return;
    }
    gossip_tick(d->g, now);
    if (d->punch) punch_tick(d->punch, now);
    daemon_relay_tick(d, now);
    bool stepped = pool_tick(d, now);
    if (d->departing != DAEMON_STAYS && (stepped || now >= d->depart_until_ms)) {
        /* asked when the core has stepped, not at every tick */
        bool done = pool_departed(d);
        if (done || now >= d->depart_until_ms) {
            daemon_log(d, done ? "pool: this member's layers run on a plan without it: it goes"
                               : "pool: the hand-over of this member's layers did not finish in "
                                 "%d s: it goes, and the pool recovers without it",
                       POOL_DEPART_MS / 1000);
            if (d->departing == DAEMON_DEPART_LEAVE) {
                d->departing = DAEMON_STAYS;
                daemon_leave(d, true);
            } else {
                event_base_loopexit(d->base, NULL);
            }
            return;
        }
    }
    dash_tick(d, now);
    if (now >= d->next_poll_ms) {
        d->next_poll_ms = now + DAEMON_WG_POLL_MS;
        wg_poll(d);
        daemon_invites_refresh(d, false);
    }
    if (d->dirty && now >= d->next_save_ms) {
        d->next_save_ms = now + DAEMON_SAVE_MS;
        char err[1024];
        if (daemon_save(d, err, sizeof err) != 0)
            daemon_log(d, "%s", err);
        else
            d->dirty = false;
    }
}

static void on_child(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    pool_wake(arg);   /* reaped at the next tick (waitpid per child) */
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    daemon_t *d = arg;
    const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (d->departing != DAEMON_STAYS) {
        daemon_log(d, "%s again: stopping now, before the hand-over ends (the pool recovers "
                   "without this member)", name);
        event_base_loopexit(d->base, NULL);
        return;
    }
    if (!d->leaving && pool_depart(d)) {
        d->departing = DAEMON_DEPART_STOP;
        d->depart_until_ms = daemon_now_ms() + POOL_DEPART_MS;
        daemon_log(d, "%s: this member holds a stage of the running job: it hands its layers "
                   "over to a plan without it, then stops (at most %d s; a second %s stops "
                   "now)", name, POOL_DEPART_MS / 1000, name);
        return;
    }
    daemon_log(d, "%s: stopping (the mesh sees this node as dead until it is up again; "
               "`shardnode leave` leaves for good)", name);
    event_base_loopexit(d->base, NULL);
}

bool daemon_leave(daemon_t *d, bool now_)
{
    char err[512];
    int64_t now = daemon_now_ms();
    if (d->leaving) return false;
    if (!now_ && d->departing == DAEMON_STAYS && pool_depart(d)) {
        d->departing = DAEMON_DEPART_LEAVE;
        d->depart_until_ms = now + POOL_DEPART_MS;
        daemon_log(d, "leave: this member holds a stage of the running job: it hands its layers "
                   "over to a plan without it, then leaves (at most %d s)",
                   POOL_DEPART_MS / 1000);
        return true;
    }
    if (!now_ && d->departing != DAEMON_STAYS) {   /* already handing over */
        d->departing = DAEMON_DEPART_LEAVE;
        return true;
    }
    d->departing = DAEMON_STAYS;
    if (gossip_leave(d->g, now, err, sizeof err) != 0) {
        daemon_log(d, "leave: %s", err);
        return false;
    }
    d->leaving = true;
    d->leave_done_ms = now + 600;
    d->dirty = true;
    if (daemon_save(d, err, sizeof err) != 0) daemon_log(d, "%s", err);
    daemon_log(d, "left the mesh");
    return false;
}

static void sync_hook(void *ctx, const gossip_member *m)
{
    daemon_sync_start(ctx, m->rec.address, m->rec.port);
}

void daemon_self_record(daemon_t *d, gossip_record *r)
{
    memset(r, 0, sizeof *r);
    memcpy(r->mesh_id, d->mesh_id, sizeof r->mesh_id);
    snprintf(r->name, sizeof r->name, "%s", d->name);
    memcpy(r->wg_pub, d->wg_pub, GOSSIP_KEY_LEN);
    memcpy(r->id_pub, d->id_pub, GOSSIP_KEY_LEN);
    snprintf(r->address, sizeof r->address, "%s", d->overlay);
    r->port = (uint16_t)d->gossip_port;
    r->incarnation = d->incarnation;
    if (d->endpoint[0]) {
        snprintf(r->endpoints[0], sizeof r->endpoints[0], "%s", d->endpoint);
        r->nendpoints = 1;
    }
    snprintf(r->software, sizeof r->software, "shardnode %s", SHARDNODE_VERSION);
    r->protocol = MESH_PROTOCOL_VERSION;
    r->mem_free = daemon_mem_available();
    snprintf(r->devices, sizeof r->devices, "%s", d->devices_json);
    r->signed_ms = daemon_wall_ms(); /* signed: real time */
    r->nat = d->endpoint[0] ? 0 : 1;  /* no endpoint of its own: reached only after it sends */
}

static int open_gossip(daemon_t *d, char *err, size_t errlen)
{
    gossip_config gc;
    memset(&gc, 0, sizeof gc);
    gc.prefix = d->prefix;
    daemon_self_record(d, &gc.self);
    memcpy(gc.id_priv, d->id_priv, GOSSIP_KEY_LEN);
    memcpy(gc.wg_priv, d->wg_priv, GOSSIP_KEY_LEN);
    gc.self_adm = d->adm;
    gc.hooks = (gossip_hooks){.ctx = d, .send = udp_send, .sync = sync_hook,
                              .changed = member_changed, .observe = observe_hook,
                              .log = gossip_log_hook, .wall_ms = gossip_wall_hook,
                              .punch = gossip_punch_hook,
                              .relay_open = daemon_relay_open_hook,
                              .relay_offer = daemon_relay_offer_hook};
    /* A seed, not a timer: real time differs between restarts. */
    gc.seed = (uint64_t)daemon_wall_ms() ^ ((uint64_t)d->wg_pub[0] << 32 | d->wg_pub[1]);
    int rc = gossip_create(&d->g, &gc, daemon_now_ms(), err, errlen);
    memset(gc.id_priv, 0, sizeof gc.id_priv);
    memset(gc.wg_priv, 0, sizeof gc.wg_priv);
    if (rc == 0) d->adm = gossip_self(d->g)->sig.adm;
    return rc;
}

int daemon_open_wireguard(daemon_t *d, const uint8_t priv[GOSSIP_KEY_LEN], const char *address,
                          char *err, size_t errlen)
{
    if (d->insecure) {
        d->wg = NULL; /* loopback: nothing to bring up */
        return 0;
    }
    mesh_wg_config wc;
    memset(&wc, 0, sizeof wc);
    wc.ifname = d->ifname;
    wc.driver = MESH_WG_AUTO;
    memcpy(wc.private_key, priv, GOSSIP_KEY_LEN);
    wc.listen_port = d->listen_port;
    wc.address = address;
    wc.prefix_len = d->prefix_len;
    wc.wireguard_go = getenv("SHARDNODE_WIREGUARD_GO");
    int rc = mesh_wg_open(&d->wg, &wc, err, errlen);
    memset(wc.private_key, 0, sizeof wc.private_key);
    return rc;
}

void daemon_free(daemon_t *d)
{
    if (d->udp_ev) event_free(d->udp_ev);
    if (d->timer) event_free(d->timer);
    if (d->sigint) event_free(d->sigint);
    if (d->sigterm) event_free(d->sigterm);
    if (d->sigchld) event_free(d->sigchld);
    if (d->tcp) evconnlistener_free(d->tcp);
    if (d->ctl) evconnlistener_free(d->ctl);
    dash_close(d);
    pool_close(d);
    daemon_conns_close(d);
    daemon_relay_close(d);
    if (d->base) event_base_free(d->base);
    if (d->udp_fd >= 0) close(d->udp_fd);
    if (d->ctl_path[0]) unlink(d->ctl_path);
    punch_destroy(d->punch);
    gossip_destroy(d->g);
    mesh_wg_close(d->wg);
    if (d->lock_fd >= 0) close(d->lock_fd);
    if (d->logf) fclose(d->logf);
    json_decref(d->node);
    json_decref(d->mesh);
    memset(d->wg_priv, 0, sizeof d->wg_priv);
    memset(d->id_priv, 0, sizeof d->id_priv);
    free(d);
}

static int run_loop(daemon_t *d, char *err, size_t errlen)
{
    if (daemon_open_wireguard(d, d->wg_priv, d->overlay, err, errlen) != 0) return -1;
    if (open_gossip(d, err, errlen) != 0) return -1;
    if (open_punch(d, err, errlen) != 0) return -1;
    if (daemon_relay_open(d, err, errlen) != 0) return -1;
    daemon_load_members(d);
    d->udp_fd = bind_overlay(d, SOCK_DGRAM, err, errlen);
    if (d->udp_fd < 0) return -1;
    int tfd = bind_overlay(d, SOCK_STREAM, err, errlen);
    if (tfd < 0) return -1;
    d->base = event_base_new();
    if (!d->base) {
        close(tfd);
        return node_errf(err, errlen, "libevent: cannot create the event loop");
    }
    d->tcp = evconnlistener_new(d->base, daemon_tcp_accept, d,
                                LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, tfd);
    if (!d->tcp) {
        close(tfd);
        return node_errf(err, errlen, "libevent: cannot listen on the gossip port");
    }
    if (daemon_control_open(d, err, errlen) != 0) return -1;
    struct timeval tv = {0, DAEMON_TICK_MS * 1000};
    d->udp_ev = event_new(d->base, d->udp_fd, EV_READ | EV_PERSIST, udp_readable, d);
    d->timer = event_new(d->base, -1, EV_PERSIST, tick, d);
    d->sigint = evsignal_new(d->base, SIGINT, on_signal, d);
    d->sigterm = evsignal_new(d->base, SIGTERM, on_signal, d);
    d->sigchld = evsignal_new(d->base, SIGCHLD, on_child, d);
    if (!d->udp_ev || !d->timer || !d->sigint || !d->sigterm || !d->sigchld ||
        event_add(d->udp_ev, NULL) || event_add(d->timer, &tv) || event_add(d->sigint, NULL) ||
        event_add(d->sigterm, NULL) || event_add(d->sigchld, NULL))
        return node_errf(err, errlen, "libevent: cannot add events");
    daemon_invites_refresh(d, true);
    dash_open(d, d->http);
    /* Pull the current view from everyone we knew (a restart), and announce. */
    const gossip_member *const *ms;
    size_t nm = gossip_members(d->g, &ms);
    for (size_t i = 0; i < nm; i++)
        if (!ms[i]->self && ms[i]->state == GOSSIP_ALIVE)
            daemon_sync_start(d, ms[i]->rec.address, ms[i]->rec.port);
    daemon_log(d, "up: overlay %s, gossip %s:%d (udp, tcp), wireguard %s (%s) port %d, "
               "incarnation %llu, %zu members known", d->overlay, d->overlay, d->gossip_port,
               d->insecure ? "none" : d->ifname,
               !d->wg ? "loopback, not encrypted"
               : mesh_wg_driver_in_use(d->wg) == MESH_WG_KERNEL ? "kernel" : "wireguard-go",
               d->listen_port, (unsigned long long)d->incarnation, nm);
    event_base_dispatch(d->base);
    char e2[1024];
    if (!d->leaving && daemon_save(d, e2, sizeof e2) != 0) daemon_log(d, "%s", e2);
    return 0;
}

/* --device: a name is checked by opening it (a wrong or unusable one fails
 * the start, naming it); "auto" (or none) takes the first GPU a backend of
 * this build opens here, else the CPU. */
static int pick_device(const char *want, char *out, size_t outlen, char *err, size_t errlen)
{
    if (want && strcmp(want, "auto") != 0) {
        kdev *k = NULL;
        if (kdev_open(want, &k, err, errlen) != KDEV_OK) return -1;
        snprintf(out, outlen, "%s", kdev_name(k));
        kdev_close(k);
        return 0;
    }
    kdev_entry e[16];
    int n = kdev_list(e, 16);
    snprintf(out, outlen, "cpu");
    for (int i = 0; i < n; i++)
        if (e[i].status == KDEV_OK && strcmp(e[i].info.vendor, "cpu") != 0) {
            snprintf(out, outlen, "%s", e[i].name);
            break;
        }
    return 0;
}

int daemon_run(const char *state, const daemon_options *opt)
{
    char err[2048];
    daemon_t *d = NULL;
    int rc = 1;
    signal(SIGPIPE, SIG_IGN);
    if (daemon_open_state(&d, state, err, sizeof err) != 0) goto fail;
    /* The node's helpers (probe-links) MAC their FETCHes with this node's
     * WireGuard key: they find it through the state directory. */
    setenv("SHARDNODE_STATE", state, 1);
    if (opt) {
        d->threads = opt->threads;
        d->no_compute = opt->no_compute;
        d->http = opt->http;
        d->no_relay = opt->no_relay;
    }
    if (pick_device(opt ? opt->device : NULL, d->device, sizeof d->device, err, sizeof err))
        goto fail;
    if (pool_open(d) != 0) {
        node_errf(err, sizeof err, "out of memory");
        goto fail;
    }
    if (opt && opt->token_text && daemon_join(d, opt->token_text, err, sizeof err) != 0)
        goto fail;
    if (!d->joined) {
        node_errf(err, sizeof err, "%s/mesh.json: this node has not joined its mesh yet; run "
                  "`shardnode join TOKEN --state %s`", state, state);
        goto fail;
    }
    if (d->left) {
        node_errf(err, sizeof err, "%s: this node left its mesh; make a new state directory "
                  "with `shardnode join`", state);
        goto fail;
    }
    if (run_loop(d, err, sizeof err) != 0) goto fail;
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "shardnode %s: %s\n", opt && opt->token_text ? "join" : "up", err);
    if (d && d->logf) fprintf(d->logf, "error: %s\n", err);
out:
    if (d) daemon_free(d);
    return rc;
}

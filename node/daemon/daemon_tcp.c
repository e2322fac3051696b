/* daemon_tcp.c — the daemon's streams: gossip TCP on the overlay (full-state
 * push-pull between members, and JOIN from a holder of an invite) and the
 * control socket in the state directory that `shardnode status` and
 * `shardnode leave` talk to (one JSON line each way). */
#include "daemon_internal.h"
#include "node_base.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum { CONN_GOSSIP_IN, CONN_SYNC_OUT, CONN_CONTROL };

struct daemon_conn {
    daemon_t *d;
    struct bufferevent *bev;
    daemon_conn *next;
    int kind;
    char addr[GOSSIP_ADDR_MAX];
    bool closing; /* free once the output has drained */
    bool invite;  /* gossip: from an invite's address (JOIN only) */
    uint8_t key[32]; /* gossip: the MAC key of this node's and the peer's WireGuard keys */
};

static void conn_free(daemon_conn *c)
{
    daemon_t *d = c->d;
    for (daemon_conn **p = &d->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    bufferevent_free(c->bev);
    free(c);
}

void daemon_conns_close(daemon_t *d)
{
    while (d->conns) conn_free(d->conns);
}

static void conn_written(struct bufferevent *bev, void *arg)
{
    daemon_conn *c = arg;
    if (c->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0) conn_free(c);
}

static void conn_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    daemon_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) return;
    if (c->kind == CONN_SYNC_OUT && (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)))
        daemon_log(c->d, "gossip: sync with %s failed: %s", c->addr,
                   what & BEV_EVENT_TIMEOUT ? "timed out"
                                            : evutil_socket_error_to_string(
                                                  EVUTIL_SOCKET_ERROR()));
    conn_free(c);
}

static daemon_conn *conn_new(daemon_t *d, struct bufferevent *bev, int kind, const char *addr,
                             bufferevent_data_cb readcb)
{
    daemon_conn *c = calloc(1, sizeof *c);
    if (!c) {
        bufferevent_free(bev);
        return NULL;
    }
    c->d = d;
    c->bev = bev;
    c->kind = kind;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->next = d->conns;
    d->conns = c;
    bufferevent_setcb(bev, readcb, conn_written, conn_event, c);
    struct timeval tv = {kind == CONN_CONTROL ? 30 : 10, 0};
    bufferevent_set_timeouts(bev, &tv, &tv);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    return c;
}

int daemon_frame_mac(const gossip_msg *m, const uint8_t key[32], uint8_t **out, size_t *len,
                     char *err, size_t errlen)
{
    uint8_t *buf = malloc(4 + GOSSIP_TCP_MAX);
    size_t n;
    if (!buf) return node_errf(err, errlen, "out of memory");
    if (gossip_encode(m, buf + 4, GOSSIP_TCP_MAX - GOSSIP_MAC_LEN, &n, err, errlen) != 0) {
        free(buf);
        return -1;
    }
    gossip_mac(key, buf + 4, n, buf + 4 + n);
    n += GOSSIP_MAC_LEN;
    for (int i = 0; i < 4; i++) buf[i] = (uint8_t)(n >> (8 * i));
    *out = buf;
    *len = n + 4;
    return 0;
}

int daemon_unframe(const uint8_t *buf, size_t n, const uint8_t key[32], gossip_msg *out,
                   char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!gossip_mac_check(key, buf, n))
        return node_errf(err, errlen, "its MAC does not verify (not sent by the holder of the "
                         "peer's WireGuard key)");
    return gossip_decode(buf, n - GOSSIP_MAC_LEN, out, err, errlen);
}

int daemon_frame(const gossip_msg *m, uint8_t **out, size_t *len, char *err, size_t errlen)
{
    uint8_t *buf = malloc(4 + GOSSIP_TCP_MAX);
    size_t n;
    if (!buf) return node_errf(err, errlen, "out of memory");
    if (gossip_encode(m, buf + 4, GOSSIP_TCP_MAX, &n, err, errlen) != 0) {
        free(buf);
        return -1;
    }
    for (int i = 0; i < 4; i++) buf[i] = (uint8_t)(n >> (8 * i));
    *out = buf;
    *len = n + 4;
    return 0;
}

static void conn_send(daemon_conn *c, const gossip_msg *m)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[512];
    if (daemon_frame_mac(m, c->key, &buf, &len, err, sizeof err) != 0) {
        daemon_log(c->d, "gossip: cannot encode a reply to %s: %s", c->addr, err);
        return;
    }
    bufferevent_write(c->bev, buf, len);
    free(buf);
}

/* Takes one whole frame off the input: 1 with *m decoded, 0 when more bytes
 * are needed, -1 when the frame is bad (logged; drop the connection). */
static int conn_frame(daemon_conn *c, gossip_msg *m)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    uint8_t pre[4];
    if (evbuffer_copyout(in, pre, 4) < 4) return 0;
    size_t n = (size_t)pre[0] | (size_t)pre[1] << 8 | (size_t)pre[2] << 16 |
               (size_t)pre[3] << 24;
    if (n == 0 || n > GOSSIP_TCP_MAX) {
        daemon_log(c->d, "gossip: %s sent a frame of %zu bytes (limit %zu); dropped", c->addr,
                   n, GOSSIP_TCP_MAX);
        return -1;
    }
    if (evbuffer_get_length(in) < n + 4) return 0;
    uint8_t *buf = malloc(n);
    if (!buf) return -1;
    evbuffer_drain(in, 4);
    evbuffer_remove(in, buf, n);
    char err[512];
    int rc;
    if (c->invite) {
        rc = daemon_unframe(buf, n, c->key, m, err, sizeof err);
    } else {
        /* A member's frame: MACed with its key (counted and logged by
         * gossip when not), and "from" is that member. */
        const gossip_member *mm = gossip_frame_open(c->d->g, c->addr, buf, n, daemon_now_ms());
        rc = -1;
        snprintf(err, sizeof err, "not authenticated");
        if (mm && gossip_decode(buf, n - GOSSIP_MAC_LEN, m, err, sizeof err) == 0) {
            rc = 0;
            if (strcmp(m->from, mm->rec.name) != 0) {
                snprintf(err, sizeof err, "it says it is from %s, but %s's key MACed it",
                         m->from, mm->rec.name);
                gossip_msg_free(m);
                rc = -1;
            }
        }
    }
    free(buf);
    if (rc != 0) {
        daemon_log(c->d, "gossip: dropped a frame from %s: %s", c->addr, err);
        return -1;
    }
    return 1;
}

/* ---- joining (issuer side) ---- */

static void join_reply_refused(daemon_conn *c, const gossip_msg *m, const char *why)
{
    daemon_log(c->d, "join: refused %s (%s): %s", m->from, c->addr, why);
    gossip_msg r = {.type = GOSSIP_MSG_JOIN_REPLY, .version = GOSSIP_PROTOCOL_VERSION};
    memcpy(r.mesh_id, c->d->mesh_id, sizeof r.mesh_id);
    snprintf(r.from, sizeof r.from, "%s", c->d->name);
    snprintf(r.reason, sizeof r.reason, "%s", why);
    conn_send(c, &r);
}

static void bootstrap_endpoint(daemon_t *d, const uint8_t pub[GOSSIP_KEY_LEN], char *out,
                               size_t outlen)
{
    mesh_wg_peer_info *info = NULL;
    size_t n = 0;
    char err[256];
    out[0] = '\0';
    if (!d->wg || mesh_wg_get_peers(d->wg, &info, &n, err, sizeof err) != 0) return;
    for (size_t i = 0; i < n; i++)
        if (memcmp(info[i].public_key, pub, GOSSIP_KEY_LEN) == 0)
            snprintf(out, outlen, "%s", info[i].endpoint);
    free(info);
}

static void handle_join(daemon_conn *c, const gossip_msg *m, const daemon_invite *iv)
{
    daemon_t *d = c->d;
    char why[MESH_TEXT_MAX], err[512];
    gossip_record r;
    if (memcmp(m->mesh_id, d->mesh_id, sizeof d->mesh_id) != 0)
        return join_reply_refused(c, m, "the token is for another mesh");
    if (memcmp(m->secret, iv->secret, GOSSIP_SECRET_LEN) != 0)
        return join_reply_refused(c, m, "the secret does not match this invite");
    if (gossip_record_open(&m->updates[0].rec, &r, why, sizeof why) != 0)
        return join_reply_refused(c, m, why);
    if (iv->used)
        return join_reply_refused(c, m, "token already used");
    /* Everything gossip_admit judges (name, address, keys) before the
     * invite is spent: a joiner told GOSSIP_ADDRESS_TAKEN asks again with a
     * new key and the same token. */
    if (gossip_admit_check(d->g, &m->updates[0].rec, daemon_now_ms(), why, sizeof why) != 0)
        return join_reply_refused(c, m, why);
    /* Nor an invite's address: its WireGuard peer would lose the address
     * the JOIN_REPLY goes back to. */
    for (size_t i = 0; i < d->ninvites; i++)
        if (strcmp(d->invites[i].address, r.address) == 0) {
            snprintf(why, sizeof why, GOSSIP_ADDRESS_TAKEN " overlay address %s is an "
                     "invite's; the joiner draws a new WireGuard key and asks again", r.address);
            return join_reply_refused(c, m, why);
        }
    int rc = daemon_invite_redeem(d, m->secret, r.name, why, sizeof why, err, sizeof err);
    if (rc < 0) {
        daemon_log(d, "join: %s", err);
        return join_reply_refused(c, m, "the inviting node could not record the token's use");
    }
    if (rc > 0) return join_reply_refused(c, m, why);
    if (gossip_admit(d->g, &m->updates[0].rec, daemon_now_ms(), why, sizeof why) != 0)
        return join_reply_refused(c, m, why);
    /* Reach the joiner where its invite key's packets came from (its NAT's
     * mapping when it has one). */
    char ep[MESH_WG_ENDPOINT_MAX];
    bootstrap_endpoint(d, iv->pub, ep, sizeof ep);
    const gossip_member *jm = gossip_find_addr(d->g, r.address);
    if (jm) daemon_set_member_peer(d, jm, ep[0] ? ep : NULL);
    gossip_msg reply;
    if (gossip_sync_message(d->g, &reply, false, err, sizeof err) != 0) {
        daemon_log(d, "join: %s", err);
        return;
    }
    reply.type = GOSSIP_MSG_JOIN_REPLY;
    reply.ok = 1;
    conn_send(c, &reply);
    gossip_msg_free(&reply);
    /* The invite is spent: its WireGuard peer goes DAEMON_INVITE_GRACE_S
     * from now (daemon_invites_refresh), once the reply is out. */
    daemon_invites_refresh(d, true);
    daemon_log(d, "join: admitted %s (%s) from %s", r.name, r.address, ep[0] ? ep : "?");
}

/* ---- gossip streams ---- */

static void gossip_readable(struct bufferevent *bev, void *arg)
{
    (void)bev;
    daemon_conn *c = arg;
    daemon_t *d = c->d;
    if (c->closing) return;
    gossip_msg m;
    int rc = conn_frame(c, &m);
    if (rc == 0) return;
    if (rc < 0) {
        conn_free(c);
        return;
    }
    const daemon_invite *iv = c->invite ? daemon_invite_by_address(d, c->addr) : NULL;
    int64_t now = daemon_now_ms();
    if (c->invite) {
        if (!iv)
            daemon_log(d, "gossip: %s's invite is gone; dropped", c->addr);
        else if (m.type == GOSSIP_MSG_JOIN)
            handle_join(c, &m, iv);
        else
            daemon_log(d, "gossip: %s (an invite's address) sent type %d, not JOIN; dropped",
                       c->addr, (int)m.type);
    } else if (memcmp(m.mesh_id, d->mesh_id, sizeof d->mesh_id) != 0) {
        daemon_log(d, "gossip: %s belongs to another mesh; dropped", c->addr);
    } else if (m.type == GOSSIP_MSG_SYNC && c->kind == CONN_GOSSIP_IN &&
               !(m.flags & GOSSIP_SYNC_REPLY)) {
        gossip_merge(d->g, &m, now);
        gossip_msg r;
        char err[256];
        if (gossip_sync_message(d->g, &r, true, err, sizeof err) == 0) {
            conn_send(c, &r);
            gossip_msg_free(&r);
        }
    } else if (m.type == GOSSIP_MSG_SYNC && c->kind == CONN_SYNC_OUT &&
               (m.flags & GOSSIP_SYNC_REPLY)) {
        gossip_merge(d->g, &m, now);
    } else if (m.type == GOSSIP_MSG_FETCH && c->kind == CONN_GOSSIP_IN &&
               gossip_find_addr(d->g, c->addr)) {
        gossip_msg r;
        uint8_t *data = NULL;
        memset(&r, 0, sizeof r);
        if (pool_fetch(d, &m, &r, &data) == 0) conn_send(c, &r);
        free(data);
    } else {
        daemon_log(d, "gossip: unexpected message type %d from %s; dropped", (int)m.type,
                   c->addr);
    }
    gossip_msg_free(&m);
    c->closing = true;
    conn_written(c->bev, c);
}

void daemon_tcp_accept(struct evconnlistener *l, int fd, struct sockaddr *sa, int salen,
                       void *arg)
{
    (void)l;
    (void)salen;
    daemon_t *d = arg;
    char addr[GOSSIP_ADDR_MAX];
    int port;
    daemon_addr_string(sa, addr, sizeof addr, &port);
    /* Only members (any state: a restarted node syncs while we still think
     * it dead) and holders of an invite. */
    const gossip_member *m = gossip_find_addr(d->g, addr);
    const daemon_invite *iv = m ? NULL : daemon_invite_by_address(d, addr);
    uint8_t key[32];
    char err[256];
    if ((!m || m->self) && !iv) {
        daemon_log(d, "gossip: refused a connection from %s:%d, not a member's address", addr,
                   port);
        close(fd);
        return;
    }
    if (m) {
        memcpy(key, m->mac_key, sizeof key);
    } else if (gossip_mac_key(d->wg_priv, iv->pub, key, err, sizeof err) != 0) {
        daemon_log(d, "gossip: %s: %s", addr, err);
        close(fd);
        return;
    }
    struct bufferevent *bev = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        close(fd);
        return;
    }
    daemon_conn *c = conn_new(d, bev, CONN_GOSSIP_IN, addr, gossip_readable);
    if (c) {
        c->invite = iv != NULL;
        memcpy(c->key, key, sizeof key);
    }
}

void daemon_sync_start(daemon_t *d, const char *addr, int port)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    const gossip_member *peer = gossip_find_addr(d->g, addr);
    if (!d->base || !peer || peer->self || daemon_sockaddr(addr, port, &ss, &sl) != 0) return;
    uint8_t key[32];
    memcpy(key, peer->mac_key, sizeof key);
    /* From the overlay address: members are known by it (on loopback the
     * kernel would otherwise pick 127.0.0.1). */
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_storage own;
    socklen_t ol;
    if (fd < 0) return;
    if (daemon_sockaddr(d->overlay, 0, &own, &ol) == 0) {
        int one = 1;
        setsockopt(fd, SOL_IP, IP_FREEBIND, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&own, ol) != 0)
            daemon_log(d, "gossip: cannot bind a sync to %s: %s", d->overlay, strerror(errno));
    }
    struct bufferevent *bev = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        close(fd);
        return;
    }
    daemon_conn *c = conn_new(d, bev, CONN_SYNC_OUT, addr, gossip_readable);
    if (!c) return;
    memcpy(c->key, key, sizeof key);
    struct timeval tv = {5, 0};
    bufferevent_set_timeouts(bev, &tv, &tv);
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&ss, (int)sl) != 0) {
        conn_free(c);
        return;
    }
    gossip_msg m;
    char err[256];
    if (gossip_sync_message(d->g, &m, false, err, sizeof err) == 0) {
        conn_send(c, &m);
        gossip_msg_free(&m);
    }
}

/* ---- the control socket ---- */

json_t *daemon_status_json(daemon_t *d)
{
    char mesh_hex[2 * GOSSIP_MESH_ID_LEN + 1];
    node_hex_encode(d->mesh_id, sizeof d->mesh_id, mesh_hex);
    json_t *list = json_array();
    const gossip_member *const *ms;
    size_t n = gossip_members(d->g, &ms);
    int64_t now = daemon_now_ms();
    for (size_t i = 0; i < n; i++) {
        const gossip_member *m = ms[i];
        if (m->displaced) continue; /* out of the view: an older admission has its address or name */
        const daemon_peer *p = daemon_peer_find(d, m->rec.wg_pub);
        bool live = m->state == GOSSIP_ALIVE || m->state == GOSSIP_SUSPECT;
        const char *link = daemon_link_name(d, m, now);
        char wg[KEYS_BASE64_LEN + 1];
        keys_to_base64(m->rec.wg_pub, wg);
        const char *ep = p && p->endpoint[0] ? p->endpoint
                         : m->rec.nendpoints ? m->rec.endpoints[0] : NULL;
        json_t *dev = m->rec.devices[0] ? json_loads(m->rec.devices, 0, NULL) : NULL;
        json_t *endpoints = json_array();
        for (int k = 0; k < m->rec.nendpoints; k++)
            json_array_append_new(endpoints, json_string(m->rec.endpoints[k]));
        json_t *heard = m->self || !m->heard_ms ? json_null()
                                                 : json_real((double)(now - m->heard_ms) / 1e3);
        json_array_append_new(
            list, json_pack("{s:s, s:b, s:s, s:s, s:s?, s:o, s:s, s:I, s:o, s:s, s:s, s:I, "
                            "s:o}",
                            "name", m->rec.name, "self", m->self, "state",
                            gossip_state_name(m->state), "address", m->rec.address,
                            "endpoint", ep, "endpoints", endpoints, "wg_public_key", wg,
                            "incarnation", (json_int_t)m->rec.incarnation, "last_heard_s",
                            heard, "link", link, "software", m->rec.software, "mem_free",
                            (json_int_t)m->rec.mem_free, "devices",
                            dev ? dev : json_object()));
        json_t *row = json_array_get(list, json_array_size(list) - 1);
        json_object_set_new(row, "gossip_port", json_integer(m->rec.port));
        /* The pair's link: its round trip (the last direct gossip probe), and
         * what punching did (PROTOCOL.md, "Hole punching"). */
        json_object_set_new(row, "nat", json_boolean(m->rec.nat));
        json_object_set_new(row, "rtt_ms", !m->self && live && m->rtt_ms >= 0
                                               ? json_integer((json_int_t)m->rtt_ms)
                                               : json_null());
        /* What WireGuard carried to and from it between the last two polls
         * (about a second): the link's use, not its capacity. */
        if (!m->self && p && p->polled_ms > 0)
            json_object_set_new(row, "traffic",
                                json_pack("{s:f, s:f}", "rx_bytes_s", p->rx_rate, "tx_bytes_s",
                                          p->tx_rate));
        const gossip_member *via = m->self ? NULL : daemon_relay_via(d, m);
        if (via && daemon_relay_up(d, m)) {
            relay_stats rs;
            relay_stats_of(d->relay, m->rec.wg_pub, &rs);
            json_object_set_new(row, "relay",
                                json_pack("{s:s, s:i, s:f, s:i}", "via", via->rec.name, "port",
                                          (int)rs.port, "since_s",
                                          (double)(now - rs.since_ms) / 1e3, "switches",
                                          rs.switches));
        }
        punch_stats ps;
        if (!m->self && d->punch && punch_stats_of(d->punch, m->rec.wg_pub, now, &ps) == 0 &&
            (ps.attempts || ps.requests_in))
            json_object_set_new(
                row, "punch",
                json_pack("{s:i, s:i, s:i, s:o}", "rounds", ps.rounds, "attempts", ps.attempts,
                          "requests_in", ps.requests_in, "punched_after_s",
                          ps.took_ms >= 0 ? json_real((double)ps.took_ms / 1e3) : json_null()));
    }
    json_t *st = json_pack("{s:s, s:s, s:s, s:s, s:i, s:o, s:o}", "self", d->name, "mesh_id",
                           mesh_hex, "prefix", d->prefix, "interface", d->ifname, "gossip_port",
                           d->gossip_port, "members", list, "job", pool_status_json(d));
    /* Datagrams and frames dropped for want of a valid MAC (PROTOCOL.md, "Gossip"). */
    if (st)
        json_object_set_new(st, "gossip_unauthenticated",
                            json_integer((json_int_t)gossip_auth_drops(d->g)));
    /* PUNCHes refused (PROTOCOL.md, "Hole punching"). */
    if (st)
        json_object_set_new(st, "punch_refused",
                            json_integer((json_int_t)gossip_punch_refusals(d->g)));
    /* Relays (PROTOCOL.md, "Relays"): RELAYs refused, and the pairs this node
     * forwards for. */
    if (st) {
        json_object_set_new(st, "relay_refused",
                            json_integer((json_int_t)gossip_relay_refusals(d->g)));
        json_object_set_new(st, "relaying", daemon_relay_status_json(d));
        json_object_set_new(st, "relays", json_boolean(!d->no_relay && d->endpoint[0] && d->wg));
    }
    return st;
}

static void control_readable(struct bufferevent *bev, void *arg)
{
    daemon_conn *c = arg;
    daemon_t *d = c->d;
    if (c->closing) return;
    size_t n;
    char *line = evbuffer_readln(bufferevent_get_input(bev), &n, EVBUFFER_EOL_LF);
    if (!line) {
        if (evbuffer_get_length(bufferevent_get_input(bev)) > DAEMON_CONTROL_MAX) conn_free(c);
        return;
    }
    json_t *req = json_loads(line, 0, NULL);
    free(line);
    const char *cmd = node_json_str(req, "cmd");
    json_t *reply;
    if (cmd && strcmp(cmd, "status") == 0) {
        reply = daemon_status_json(d);
    } else if (cmd && strcmp(cmd, "invites") == 0) {
        /* `shardnode invite` just wrote one: admit its key now rather than
         * at the next poll, so the joiner's first handshake is answered. */
        daemon_invites_refresh(d, true);
        reply = json_pack("{s:i}", "invites", (int)d->ninvites);
    } else if (cmd && strcmp(cmd, "leave") == 0) {
        json_t *nw = json_object_get(req, "now");
        if (nw && !json_is_boolean(nw)) {
            reply = json_pack("{s:s}", "error", "\"now\" in a leave request must be true or "
                                                "false");
        } else {
            bool wait = daemon_leave(d, json_is_true(nw));
            reply = json_pack("{s:b,s:b}", "left", !wait, "handover", wait);
        }
    } else if (cmd && strcmp(cmd, "set") == 0) {
        /* as `up --threads N` takes them (cmd/mesh_cmd.c) */
        json_t *th = json_object_get(req, "threads");
        if (!json_is_integer(th) || json_integer_value(th) < 1 || json_integer_value(th) > 1024)
            reply = json_pack("{s:s}", "error", "\"threads\" in a set request must be an "
                                                "integer from 1 to 1024");
        else
            reply = pool_set_threads(d, (int)json_integer_value(th));
    } else if (cmd && strcmp(cmd, "submit") == 0) {
        reply = pool_submit(d, json_object_get(req, "bundle"), node_json_str(req, "resume"));
    } else if (cmd && strcmp(cmd, "stop") == 0) {
        reply = pool_stop(d);
    } else {
        reply = json_pack("{s:s}", "error", "unknown request: expected {\"cmd\": \"status\"}, "
                                            "\"leave\", \"set\", \"invites\", \"submit\" or \"stop\"");
    }
    json_decref(req);
    char *text = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
    json_decref(reply);
    if (text) {
        bufferevent_write(bev, text, strlen(text));
        bufferevent_write(bev, "\n", 1);
        free(text);
    }
    c->closing = true;
    conn_written(bev, c);
}

static void control_accept(struct evconnlistener *l, int fd, struct sockaddr *sa, int salen,
                           void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    daemon_t *d = arg;
    struct bufferevent *bev = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        close(fd);
        return;
    }
    conn_new(d, bev, CONN_CONTROL, "control", control_readable);
}

int daemon_control_open(daemon_t *d, char *err, size_t errlen)
{
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    int n = snprintf(un.sun_path, sizeof un.sun_path, "%s/control.sock", d->state);
    if (n < 0 || (size_t)n >= sizeof un.sun_path)
        return node_errf(err, errlen, "%s/control.sock: path longer than %zu bytes (a Unix "
                         "socket's limit); use a shorter --state", d->state,
                         sizeof un.sun_path - 1);
    /* The node lock is ours, so a socket file left here is a crashed
     * node's. */
    unlink(un.sun_path);
    /* Created 0600 (umask) and checked: status shows keys and addresses,
     * and leave is for the owner only. */
    mode_t old = umask(0177);
    d->ctl = evconnlistener_new_bind(d->base, control_accept, d,
                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 16,
                                     (struct sockaddr *)&un, (int)sizeof un);
    umask(old);
    if (!d->ctl)
        return node_errf(err, errlen, "%s: cannot listen: %s", un.sun_path, strerror(errno));
    snprintf(d->ctl_path, sizeof d->ctl_path, "%s", un.sun_path);
    chmod(d->ctl_path, 0600);
    return 0;
}

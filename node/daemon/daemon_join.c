/* daemon_join.c — the joiner's side of an invite (PROTOCOL.md, "Joining").
 *
 * The token's secret stands for a WireGuard key pair (keys_invite_key) that
 * the issuer added as a peer, with one overlay address, when it issued the
 * invite. The joiner brings its interface up with that key and address,
 * reaches the issuer's gossip port through the tunnel, and sends JOIN: the
 * secret and its own signed record (its real keys). The issuer records the
 * secret as used, adds the real key as a peer and answers with the whole
 * view. The joiner then restarts its interface with its own key. Nothing
 * but WireGuard ever listens on the underlay. */
#include "daemon_internal.h"
#include "node_base.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define JOIN_CONNECT_S 30 /* covers WireGuard's 5 s handshake retries */
#define JOIN_REPLY_S 15

/* "host:port" with a name resolved to a numeric endpoint WireGuard takes. */
static int resolve_endpoint(const char *ep, char *out, size_t outlen, char *err, size_t errlen)
{
    char host[TOKEN_STR_MAX + 1];
    const char *colon = strrchr(ep, ':');
    if (!colon) return node_errf(err, errlen, "endpoint %s has no port", ep);
    size_t hl = (size_t)(colon - ep);
    if (ep[0] == '[') {
        snprintf(out, outlen, "%s", ep);
        return 0;
    }
    memcpy(host, ep, hl);
    host[hl] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0) return node_errf(err, errlen, "endpoint %s: %s", ep, gai_strerror(rc));
    char addr[48];
    int port, n;
    daemon_addr_string(res->ai_addr, addr, sizeof addr, &port);
    port &= 0xffff;
    n = snprintf(out, outlen, res->ai_family == AF_INET6 ? "[%s]:%d" : "%s:%d", addr, port);
    freeaddrinfo(res);
    if (n < 0 || (size_t)n >= outlen) return node_errf(err, errlen, "endpoint %s: too long", ep);
    return 0;
}

int daemon_connect(const char *addr, int port, const char *from, int timeout_ms, char *err,
                   size_t errlen)
{
    struct sockaddr_storage ss, fs;
    socklen_t sl, fsl;
    if (daemon_sockaddr(addr, port, &ss, &sl) != 0)
        return node_errf(err, errlen, "%s: not an address", addr);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return node_errf(err, errlen, "socket: %s", strerror(errno));
    if (from && from[0] && (daemon_sockaddr(from, 0, &fs, &fsl) != 0 ||
                            bind(fd, (struct sockaddr *)&fs, fsl) != 0)) {
        node_errf(err, errlen, "cannot connect from %s: %s", from, strerror(errno));
        close(fd);
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&ss, sl) != 0 && errno != EINPROGRESS) {
        node_errf(err, errlen, "connect to %s port %d: %s", addr, port, strerror(errno));
        close(fd);
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int soerr = 0;
    socklen_t el = sizeof soerr;
    if (poll(&p, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &el) != 0 ||
        soerr != 0) {
        node_errf(err, errlen, "connect to %s port %d: %s", addr, port,
                  soerr ? strerror(soerr) : "timed out");
        close(fd);
        return -1;
    }
    return fd;
}

static int io_full(int fd, void *buf, size_t len, bool wr, int64_t deadline_ms)
{
    uint8_t *p = buf;
    while (len) {
        int left = (int)(deadline_ms - daemon_now_ms());
        struct pollfd pf = {.fd = fd, .events = wr ? POLLOUT : POLLIN};
        if (left <= 0 || poll(&pf, 1, left) != 1) return -1;
        ssize_t n = wr ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One JOIN exchange with a member: 0 with *reply filled, -1 with err. */
static int join_one(daemon_t *d, const char *addr, const char *from, const gossip_msg *join,
                    const uint8_t key[32], gossip_msg *reply, char *err, size_t errlen)
{
    int64_t deadline = daemon_now_ms() + JOIN_CONNECT_S * 1000;
    int fd = -1;
    while (fd < 0 && daemon_now_ms() < deadline) {
        char why[256];
        fd = daemon_connect(addr, d->gossip_port, from, 2000, why, sizeof why);
        if (fd < 0) nanosleep(&(struct timespec){0, 300000000}, NULL);
    }
    if (fd < 0)
        return node_errf(err, errlen, "no answer from %s:%d through WireGuard in %d s (is the "
                         "inviting node up, and its endpoint reachable from here? A token "
                         "already used or expired gets no answer: the inviting node withdraws "
                         "its key once it is used)", addr, d->gossip_port, JOIN_CONNECT_S);
    uint8_t *frame;
    size_t flen;
    int rc = -1;
    if (daemon_frame_mac(join, key, &frame, &flen, err, errlen) != 0) goto out;
    deadline = daemon_now_ms() + JOIN_REPLY_S * 1000;
    int wr = io_full(fd, frame, flen, true, deadline);
    free(frame);
    uint8_t pre[4];
    if (wr != 0 || io_full(fd, pre, 4, false, deadline) != 0) {
        node_errf(err, errlen, "%s:%d did not answer the join request", addr, d->gossip_port);
        goto out;
    }
    size_t n = (size_t)pre[0] | (size_t)pre[1] << 8 | (size_t)pre[2] << 16 |
               (size_t)pre[3] << 24;
    if (n == 0 || n > GOSSIP_TCP_MAX) {
        node_errf(err, errlen, "%s sent a reply of %zu bytes (limit %zu)", addr, n,
                  GOSSIP_TCP_MAX);
        goto out;
    }
    uint8_t *buf = malloc(n);
    if (!buf || io_full(fd, buf, n, false, deadline) != 0) {
        free(buf);
        node_errf(err, errlen, "%s closed the connection in the middle of its reply", addr);
        goto out;
    }
    char why[512];
    if (daemon_unframe(buf, n, key, reply, why, sizeof why) != 0) {
        node_errf(err, errlen, "%s: bad reply: %s", addr, why);
    } else if (reply->type != GOSSIP_MSG_JOIN_REPLY) {
        node_errf(err, errlen, "%s answered with message type %d, not JOIN_REPLY", addr,
                  (int)reply->type);
        gossip_msg_free(reply);
    } else {
        rc = 0;
    }
    free(buf);
out:
    close(fd);
    return rc;
}

/* The admitted view into mesh.json: every signed record of the reply (with
 * its admission), and this node's own admission. */
static int save_view(daemon_t *d, const gossip_msg *reply, char *err, size_t errlen)
{
    json_t *list = json_array();
    bool admitted = false;
    for (int i = 0; i < reply->nupdates; i++) {
        const gossip_update *u = &reply->updates[i];
        gossip_record r;
        char why[512];
        if (u->state != GOSSIP_ALIVE && u->state != GOSSIP_LEFT) continue;
        if (gossip_record_open(&u->rec, &r, why, sizeof why) != 0) {
            daemon_log(d, "join: a record in the reply: %s; skipped", why);
            continue;
        }
        char *rec = malloc(2 * u->rec.len + 1), sig[2 * GOSSIP_SIG_LEN + 1];
        if (!rec) continue;
        node_hex_encode(u->rec.bytes, u->rec.len, rec);
        node_hex_encode(u->rec.sig, GOSSIP_SIG_LEN, sig);
        char wg[KEYS_BASE64_LEN + 1];
        keys_to_base64(r.wg_pub, wg);
        json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o}", "name",
                                              r.name, "wg_public_key", wg, "overlay_address",
                                              r.address, "state", r.left ? "left" : "alive",
                                              "record", rec, "signature", sig, "admission",
                                              daemon_adm_json(&u->rec.adm)));
        free(rec);
        if (memcmp(r.wg_pub, d->wg_pub, GOSSIP_KEY_LEN) == 0 &&
            gossip_admission_verify(&r, &u->rec.adm)) {
            d->adm = u->rec.adm;
            admitted = true;
        }
    }
    if (!admitted) {
        json_decref(list);
        return node_errf(err, errlen, "%s answered the join without this node's admission",
                         reply->from);
    }
    json_object_set_new(d->mesh, "admission", daemon_adm_json(&d->adm));
    json_object_set_new(d->mesh, "members", list);
    d->joined = true;
    return daemon_save(d, err, errlen);
}

/* The admitting member found this node's overlay address taken: a new
 * WireGuard key (wg.key and node.json rewritten), so a new address. */
static int new_wireguard_key(daemon_t *d, char *err, size_t errlen)
{
    char path[DAEMON_PATH_MAX], wg[KEYS_BASE64_LEN + 1];
    uint8_t priv[KEYS_LEN], pub[KEYS_LEN];
    char overlay[GOSSIP_ADDR_MAX];
    if (keys_x25519_generate(priv, pub, err, errlen) != 0 ||
        mesh_overlay_address(d->prefix, pub, overlay, sizeof overlay, err, errlen) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/wg.key", d->state);
    if (keys_file_write(path, priv, err, errlen) != 0) return -1;
    memcpy(d->wg_priv, priv, KEYS_LEN);
    memcpy(d->wg_pub, pub, KEYS_LEN);
    snprintf(d->overlay, sizeof d->overlay, "%s", overlay);
    memset(priv, 0, sizeof priv);
    keys_to_base64(pub, wg);
    json_object_set_new(d->node, "wg_public_key", json_string(wg));
    json_object_set_new(d->node, "overlay_address", json_string(overlay));
    snprintf(path, sizeof path, "%s/node.json", d->state);
    if (node_write_json(path, d->node, 0644, err, errlen) != 0) return -1;
    fprintf(stderr, "shardnode join: the overlay address was taken; new WireGuard key, "
                    "overlay address %s\n", overlay);
    return 0;
}

int daemon_join(daemon_t *d, const char *token_text, char *err, size_t errlen)
{
    struct token t;
    char why[512];
    /* Real time: a token's expiry is Unix seconds. */
    if (token_decode(token_text, &t, (int64_t)time(NULL), why, sizeof why) != 0)
        return node_errf(err, errlen, "%s", why);
    if (memcmp(t.mesh_id, d->mesh_id, sizeof d->mesh_id) != 0)
        return node_errf(err, errlen, "%s already belongs to another mesh than the token's; "
                         "use another --state", d->state);
    if (d->joined)
        return node_errf(err, errlen, "%s is already a member of this mesh; start it with "
                         "`shardnode up --state %s`", d->state, d->state);
    uint8_t bpriv[KEYS_LEN], bpub[KEYS_LEN];
    char baddr[GOSSIP_ADDR_MAX];
    int rc = -1;
    gossip_signed self;
    gossip_record r;
    if (keys_invite_key(t.secret, sizeof t.secret, bpriv, bpub, err, errlen) != 0 ||
        mesh_overlay_address(d->prefix, bpub, baddr, sizeof baddr, err, errlen) != 0 ||
        daemon_open_wireguard(d, bpriv, baddr, err, errlen) != 0)
        goto out;
    daemon_self_record(d, &r);
    if (gossip_record_sign(&r, d->id_priv, &self, err, errlen) != 0) goto out;
    static gossip_update up;
    memset(&up, 0, sizeof up);
    up.state = GOSSIP_ALIVE;
    up.rec = self;
    gossip_msg join = {.type = GOSSIP_MSG_JOIN, .version = GOSSIP_PROTOCOL_VERSION,
                       .nupdates = 1, .updates = &up};
    memcpy(join.mesh_id, d->mesh_id, sizeof join.mesh_id);
    snprintf(join.from, sizeof join.from, "%s", d->name);
    memcpy(join.secret, t.secret, sizeof join.secret);
    /* The issuer first: it alone holds the secret's record. */
    int order[TOKEN_MAX_MEMBERS], no = 0;
    for (int i = 0; i < t.nmembers; i++)
        if (memcmp(t.members[i].id_pub, t.issuer_id_pub, KEYS_LEN) == 0) order[no++] = i;
    for (int i = 0; i < t.nmembers; i++)
        if (memcmp(t.members[i].id_pub, t.issuer_id_pub, KEYS_LEN) != 0) order[no++] = i;
    err[0] = '\0';
    int redraws = 0;
    for (int k = 0; k < no; k++) {
        const struct token_member *tm = &t.members[order[k]];
        char maddr[GOSSIP_ADDR_MAX], ep[MESH_WG_ENDPOINT_MAX], cidr[GOSSIP_ADDR_MAX + 8];
        if (mesh_overlay_address(d->prefix, tm->wg_pub, maddr, sizeof maddr, err, errlen) ||
            resolve_endpoint(tm->endpoint, ep, sizeof ep, err, errlen) != 0)
            continue;
        daemon_host_cidr(maddr, cidr, sizeof cidr);
        const char *allowed[1] = {cidr};
        if (d->wg && mesh_wg_set_peer(d->wg, tm->wg_pub, ep, allowed, 1, 25, err, errlen) != 0)
            continue;
        fprintf(stderr, "shardnode join: asking %s (%s, overlay %s) to admit %s\n",
                tm->endpoint, ep, maddr, d->name);
        gossip_msg reply;
        /* JOIN and its reply are MACed with the invite key's pair with this
         * member's WireGuard key. */
        uint8_t key[32];
        if (gossip_mac_key(bpriv, tm->wg_pub, key, err, errlen) != 0) continue;
        /* Insecure loopback: the invite's address is the source, as the
         * invite key's tunnel address would be. */
        if (join_one(d, maddr, d->insecure ? baddr : NULL, &join, key, &reply, err, errlen) != 0)
            continue;
        if (!reply.ok && strncmp(reply.reason, GOSSIP_ADDRESS_TAKEN,
                                 strlen(GOSSIP_ADDRESS_TAKEN)) == 0 && redraws < 8) {
            /* Not spent: ask the same member again with a new key. */
            redraws++;
            gossip_msg_free(&reply);
            if (new_wireguard_key(d, err, errlen) != 0) goto out;
            daemon_self_record(d, &r);
            if (gossip_record_sign(&r, d->id_priv, &up.rec, err, errlen) != 0) goto out;
            k--;
            continue;
        }
        if (!reply.ok) {
            node_errf(err, errlen, "%s refused the token: %s", reply.from, reply.reason);
            gossip_msg_free(&reply);
            goto out; /* a definite answer: another member would say the same */
        }
        rc = save_view(d, &reply, err, errlen);
        if (rc == 0)
            fprintf(stderr, "shardnode join: %s admitted %s; %d members known\n", reply.from,
                    d->name, reply.nupdates);
        gossip_msg_free(&reply);
        goto out;
    }
out:
    memset(bpriv, 0, sizeof bpriv);
    memset(&t, 0, sizeof t);
    /* The loop brings the interface up again with this node's own key. */
    mesh_wg_close(d->wg);
    d->wg = NULL;
    return rc;
}

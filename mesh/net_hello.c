/* net_hello.c — the HELLO exchange every transport connection starts with:
 * this node's HELLO frame (encoded once at start, or per peer with a MAC
 * when the peer was declared with a key), the MAC itself (HMAC-SHA256 over
 * sender, receiver and run under the pair's key, net_hello_mac), and the
 * loop thread's judgement of the first frame a connection sends: the right
 * run and protocol, a declared peer, the MAC, the address it comes from.
 * See net_internal.h for who owns what. */
#include "net_internal.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void net_hello_mac(const uint8_t key[MESH_HELLO_KEY_LEN], const char *sender,
                   const char *receiver, const char *run, char out[MESH_HELLO_MAC_HEX + 1])
{
    /* "shardnode hello" NUL sender NUL receiver NUL run */
    char msg[16 + 2 * MESH_NAME_MAX + MESH_TEXT_MAX + 4];
    size_t k = 0;
    const char *parts[] = {"shardnode hello", sender, receiver, run};
    for (int i = 0; i < 4; i++) {
        size_t l = strnlen(parts[i], MESH_TEXT_MAX);
        if (k + l + 1 > sizeof msg)
            l = sizeof msg - k - 1;
        memcpy(msg + k, parts[i], l);
        k += l;
        msg[k++] = 0;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!HMAC(EVP_sha256(), key, MESH_HELLO_KEY_LEN, (const unsigned char *)msg, k, md, &mdlen))
        memset(md, 0, sizeof md);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < MESH_HELLO_MAC_HEX / 2; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[MESH_HELLO_MAC_HEX] = 0;
}

int net_hello_encode(mesh_net *n, char *err, size_t errlen)
{
    mesh_msg h;
    memset(&h, 0, sizeof h);
    h.type = MESH_MSG_HELLO;
    h.version = MESH_PROTOCOL_VERSION;
    h.run_id = n->run_id;
    snprintf(h.name, sizeof h.name, "%s", n->self);
    snprintf(h.text, sizeof h.text, "%s", n->run);
    char e[256];
    if (mesh_encode_head(&h, &n->hello, &n->hello_len, e, sizeof e) != 0) {
        mesh_errf(err, errlen, "HELLO: %s", e);
        return -1;
    }
    return 0;
}

/* Returns -1 when the connection was closed. */
int net_conn_send_hello(struct net_conn *c)
{
    struct mesh_net *n = c->net;
    const uint8_t *hello = n->hello;
    size_t len = n->hello_len;
    uint8_t *own = NULL;
    if (c->peer && c->peer->has_key) {
        /* this peer's HELLO: the run name, then " #" and the MAC */
        mesh_msg h;
        memset(&h, 0, sizeof h);
        h.type = MESH_MSG_HELLO;
        h.run_id = n->run_id;
        snprintf(h.name, sizeof h.name, "%s", n->self);
        char mac[MESH_HELLO_MAC_HEX + 1], e[256];
        net_hello_mac(c->peer->key, n->self, c->peer->name, n->run, mac);
        /* fits: mesh_net_add_peer_opts checked the run name's length */
        size_t rl = strlen(n->run);
        memcpy(h.text, n->run, rl);
        memcpy(h.text + rl, " #", 2);
        memcpy(h.text + rl + 2, mac, MESH_HELLO_MAC_HEX + 1);
        if (mesh_encode_head(&h, &own, &len, e, sizeof e) != 0) {
            net_conn_close(c, "cannot encode HELLO: %s; disconnecting", e);
            return -1;
        }
        hello = own;
    }
    c->hello_unsent = len;
    int rc = evbuffer_add(bufferevent_get_output(c->bev), hello, len);
    free(own);
    if (rc != 0) {
        net_conn_close(c, "cannot queue HELLO: out of memory; disconnecting");
        return -1;
    }
    return 0;
}

/* Splits a HELLO's text into the run name and the MAC after its last " #"
 * (mac "" when there is none). */
static void hello_text(const char *text, char run[MESH_TEXT_MAX], char mac[MESH_HELLO_MAC_HEX + 1])
{
    const char *h = strrchr(text, '#');
    mac[0] = 0;
    if (h && h > text && h[-1] == ' ' && strlen(h + 1) == MESH_HELLO_MAC_HEX) {
        snprintf(run, MESH_TEXT_MAX, "%.*s", (int)(h - 1 - text), text);
        snprintf(mac, MESH_HELLO_MAC_HEX + 1, "%s", h + 1);
    } else {
        snprintf(run, MESH_TEXT_MAX, "%s", text);
    }
}

/* Equal strings of one length, compared in constant time. */
static bool same_mac(const char *a, const char *b)
{
    unsigned char d = 0;
    for (int i = 0; i < MESH_HELLO_MAC_HEX; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static const char *type_name(mesh_msg_type t)
{
    switch (t) {
    case MESH_MSG_HELLO: return "HELLO";
    case MESH_MSG_ACTIVATIONS: return "ACTIVATIONS";
    case MESH_MSG_GRADIENTS: return "GRADIENTS";
    case MESH_MSG_NORM: return "NORM";
    case MESH_MSG_TIED_GRAD: return "TIED_GRAD";
    case MESH_MSG_COMMIT: return "COMMIT";
    case MESH_MSG_ABORT: return "ABORT";
    case MESH_MSG_PROBE: return "PROBE";
    }
    return "an unknown type";
}

/* A peer's string made safe for a log line: no control bytes (a newline
 * would forge a line of its own). */
static void printable(const char *in, char *out, size_t outlen)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 1 < outlen; p++)
        out[o++] = *p < 0x20 || *p == 0x7f ? '?' : (char)*p;
    out[o] = 0;
}

static bool hello_mac_ok(const struct net_peer *p, const char *sender, const char *receiver,
                         const char *run, const char *mac)
{
    char want[MESH_HELLO_MAC_HEX + 1];
    net_hello_mac(p->key, sender, receiver, run, want);
    return strlen(mac) == MESH_HELLO_MAC_HEX && same_mac(want, mac);
}

/* The first frame: who is this, and is it our run? Returns -1 when the
 * connection was closed (c is freed). */
int net_conn_hello(struct net_conn *c, const mesh_msg *m)
{
    struct mesh_net *n = c->net;
    char name[MESH_NAME_MAX], text[MESH_TEXT_MAX];
    printable(m->name, name, sizeof name);
    printable(m->text, text, sizeof text);
    if (m->type != MESH_MSG_HELLO) {
        net_conn_close(c, "sent %s before HELLO; disconnecting", type_name(m->type));
        return -1;
    }
    if (m->version != MESH_PROTOCOL_VERSION) {
        net_conn_close(c, "HELLO in protocol version %u, this node speaks %d; disconnecting",
                       m->version, MESH_PROTOCOL_VERSION);
        return -1;
    }
    char run[MESH_TEXT_MAX], mac[MESH_HELLO_MAC_HEX + 1];
    hello_text(m->text, run, mac);
    if (m->run_id != n->run_id || strcmp(run, n->run) != 0) {
        net_conn_close(c, "HELLO from \"%s\" is for run \"%s\", this node is in \"%s\"; "
                       "disconnecting", name, text, n->run);
        return -1;
    }
    pthread_mutex_lock(&n->mu);
    const char *why = NULL;
    struct net_peer *p = NULL;
    if (c->outgoing) {
        p = c->peer;
        if (strcmp(m->name, p->name) != 0)
            why = "is not the peer this node dialled there";
        else if (p->has_key && !hello_mac_ok(p, m->name, n->self, n->run, mac))
            why = "did not prove it holds that peer's key (HELLO MAC)";
    } else {
        for (int i = 0; i < n->npeers && !p; i++)
            if (strcmp(n->peers[i]->name, m->name) == 0)
                p = n->peers[i];
        if (!p)
            why = "is not a declared peer";
        else if (p->outgoing)
            why = "is declared with an address: this node connects to it, not the other way";
        else if (p->state == NET_PEER_UP)
            why = "is already connected";
        else if (p->state == NET_PEER_DOWN)
            why = "already failed in this run";
        else if (p->has_key && !hello_mac_ok(p, m->name, n->self, n->run, mac))
            why = "did not prove it holds that peer's key (HELLO MAC; still waiting for it)";
        else if (p->nfrom > 0) {
            bool ok = false;
            for (int i = 0; i < p->nfrom && c->have_remote && !ok; i++)
                ok = net_same_host((struct sockaddr *)&c->remote, (struct sockaddr *)&p->from[i]);
            if (!ok)
                why = "comes from another address than that peer's (still waiting for it)";
        }
    }
    if (!why) {
        p->state = NET_PEER_UP;
        if (!c->outgoing)
            snprintf(p->addr, sizeof p->addr, "%s", c->addr);
        p->err[0] = 0;
        pthread_cond_broadcast(&n->state_cond);
    }
    pthread_mutex_unlock(&n->mu);
    if (why) {
        net_conn_close(c, "HELLO from \"%s\", which %s; disconnecting", name, why);
        return -1;
    }
    c->peer = p;
    c->hello_done = true;
    p->conn = c;
    if (p->retry_ev)
        evtimer_del(p->retry_ev);
    /* The HELLO timeout is over: a peer may now be quiet for as long as its
     * compute takes. (event_add keeps an old timeout when given none.) */
    event_del(c->rd_ev);
    event_add(c->rd_ev, NULL);
    net_log("%s peer %s (%s)", c->outgoing ? "connected to" : "accepted", p->name, c->addr);
    if (!c->outgoing && net_conn_send_hello(c) != 0)
        return -1;
    net_peer_write_queue(p);
    return 0;
}

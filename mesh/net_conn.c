/* net_conn.c — the loop thread's side of the transport: connecting with
 * backoff, accepting, reading length-prefixed frames into one buffer each,
 * writing queued messages without copying tensors, and closing connections
 * that misbehave; the HELLO a connection starts with is net_hello.c's, the
 * answer to a PROBE net_probe.c's. Every function here runs on the loop
 * thread; see net_internal.h for what is shared with net.c. */
#include "net_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BACKOFF_MAX_MS 1000
/* libevent writes at most 16 KiB per callback by default: for tensors of
 * many megabytes that is a syscall and a callback per 16 KiB. */
#define WRITE_CHUNK ((size_t)1 << 20)
/* Small frames and length prefixes are read through this buffer, many per
 * read(); the rest of a frame larger than it is read straight into the
 * frame's own buffer (libevent 2.1 reads sockets 4 KiB at a time, which
 * under load starves the socket long enough for TCP to back off). */
#define RBUF_SIZE ((size_t)64 << 10)
/* Bytes one callback reads before the loop serves others; the socket stays
 * readable, so the loop comes back. */
#define READ_BUDGET ((size_t)8 << 20)


void net_format_addr(const struct sockaddr *sa, char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
        snprintf(out, outlen, "%s:%d", host, ntohs(s->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
        snprintf(out, outlen, "[%s]:%d", host, ntohs(s->sin6_port));
    } else {
        snprintf(out, outlen, "(unknown address family %d)", sa->sa_family);
    }
}

/* The IPv4 address an IPv4-mapped IPv6 one stands for (else a copy). */
static void unmap(const struct sockaddr *in, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    if (in->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)in;
        if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
            struct sockaddr_in *s4 = (struct sockaddr_in *)out;
            s4->sin_family = AF_INET;
            memcpy(&s4->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
            return;
        }
        memcpy(out, in, sizeof *s6);
    } else if (in->sa_family == AF_INET) {
        memcpy(out, in, sizeof(struct sockaddr_in));
    }
}

bool net_same_host(const struct sockaddr *a, const struct sockaddr *b)
{
    struct sockaddr_storage x, y;
    unmap(a, &x);
    unmap(b, &y);
    if (x.ss_family != y.ss_family)
        return false;
    if (x.ss_family == AF_INET)
        return memcmp(&((struct sockaddr_in *)&x)->sin_addr, &((struct sockaddr_in *)&y)->sin_addr,
                      4) == 0;
    if (x.ss_family == AF_INET6)
        return memcmp(&((struct sockaddr_in6 *)&x)->sin6_addr,
                      &((struct sockaddr_in6 *)&y)->sin6_addr, 16) == 0;
    return false;
}

/* How logs and errors name the other end: by name once known. */
static void conn_who(const struct net_conn *c, char *out, size_t outlen)
{
    if (c->peer)
        snprintf(out, outlen, "peer %s (%s)", c->peer->name, c->addr);
    else
        snprintf(out, outlen, "peer %s", c->addr);
}

static void conn_read_cb(evutil_socket_t fd, short what, void *arg);
static void conn_event_cb(struct bufferevent *bev, short what, void *arg);
static void conn_out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);
static void peer_connect(struct net_peer *p);

static struct net_conn *conn_new(struct mesh_net *n, struct bufferevent *bev, const char *addr,
                                 struct net_peer *outgoing_peer)
{
    struct net_conn *c = calloc(1, sizeof *c);
    if (c && !(c->rbuf = malloc(RBUF_SIZE))) {
        free(c);
        c = NULL;
    }
    if (!c)
        return NULL;
    c->net = n;
    c->bev = bev;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->peer = outgoing_peer;
    c->outgoing = outgoing_peer != NULL;
    c->next = n->conns;
    if (n->conns)
        n->conns->prev = c;
    n->conns = c;
    bufferevent_setcb(bev, NULL, NULL, conn_event_cb, c);
    bufferevent_set_max_single_write(bev, WRITE_CHUNK);
    c->out_cb = evbuffer_add_cb(bufferevent_get_output(bev), conn_out_cb, c);
    return c;
}

/* Frees the connection and its bufferevent. Anything still in its output
 * buffer is dropped; libevent runs the reference cleanups when it frees the
 * buffer (now or from a finalizer in the loop). */
static void conn_free(struct net_conn *c)
{
    struct mesh_net *n = c->net;
    if (c->prev)
        c->prev->next = c->next;
    else
        n->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->rd_ev)
        event_free(c->rd_ev);
    if (c->out_cb)
        evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->out_cb);
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    bufferevent_free(c->bev); /* closes the socket */
    net_payload_free(c->payload);
    free(c->rbuf);
    free(c);
}

static void schedule_retry(struct net_peer *p)
{
    int64_t left_ms = (p->deadline_ns - net_now_ns()) / 1000000;
    int delay = p->backoff_ms < left_ms ? p->backoff_ms : (int)(left_ms > 0 ? left_ms : 0);
    p->backoff_ms = p->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : p->backoff_ms * 2;
    struct timeval tv = {.tv_sec = delay / 1000, .tv_usec = (delay % 1000) * 1000};
    evtimer_add(p->retry_ev, &tv);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    peer_connect(arg);
}

/* Closes a connection and records why. reason is the whole story after the
 * address ("closed the connection", "frame ... exceeds ...; disconnecting").
 * A declared peer that was up goes DOWN (recv reports it); an outgoing
 * connection that never finished its HELLO tries again until its deadline. */
void net_conn_close(struct net_conn *c, const char *fmt, ...)
{
    struct mesh_net *n = c->net;
    char reason[NET_ERR_MAX - NET_ADDR_MAX - MESH_NAME_MAX - 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    char who[NET_ADDR_MAX + MESH_NAME_MAX + 16];
    conn_who(c, who, sizeof who);
    char msg[NET_ERR_MAX + 8]; /* cut to NET_ERR_MAX when stored */
    snprintf(msg, sizeof msg, "%s: %s", who, reason);

    struct net_peer *p = c->peer;
    bool retry = false;
    if (p && c->hello_done) {
        net_log("%s", msg);
        pthread_mutex_lock(&n->mu);
        net_peer_down_locked(p, msg);
        pthread_mutex_unlock(&n->mu);
        p->conn = NULL;
    } else if (p && c->outgoing) {
        p->conn = NULL;
        pthread_mutex_lock(&n->mu);
        bool give_up = net_now_ns() >= p->deadline_ns || n->stopping;
        if (give_up) {
            char down[2 * NET_ERR_MAX]; /* cut to NET_ERR_MAX when stored */
            snprintf(down, sizeof down, "could not connect to peer %s (%s) within %d ms: %s",
                     p->name, p->addr, n->timeout_ms, reason);
            net_peer_down_locked(p, down);
            net_log("%s", down);
        } else {
            snprintf(p->err, sizeof p->err, "%s", reason);
            retry = true;
            if (!p->retry_logged)
                net_log("%s; retrying for up to %d ms", msg, n->timeout_ms);
            p->retry_logged = true;
        }
        pthread_mutex_unlock(&n->mu);
    } else {
        net_log("%s", msg);
    }
    if (c->paused) {
        pthread_mutex_lock(&n->mu);
        n->npaused--;
        pthread_mutex_unlock(&n->mu);
    }
    conn_free(c);
    if (retry)
        schedule_retry(p);
}

static void set_socket_options(struct mesh_net *n, evutil_socket_t fd)
{
    /* Small messages (norms, commits) must not wait for Nagle. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* A peer whose host vanished without a reset is noticed within about
     * timeout_ms while the connection is idle (Linux's default is hours).
     * Not TCP_USER_TIMEOUT: it would also kill a connection whose receiver
     * legitimately keeps its window shut while its compute catches up. */
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL) && defined(TCP_KEEPCNT)
    int idle = n->timeout_ms / 2000, intvl = n->timeout_ms / 6000, cnt = 3;
    idle = idle < 1 ? 1 : idle;
    intvl = intvl < 1 ? 1 : intvl;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
#else
    (void)n;
#endif
}

/* TCP is up: give the other side timeout_ms to say HELLO (the read
 * event's timeout, cleared at its HELLO). */
static void conn_start(struct net_conn *c)
{
    struct mesh_net *n = c->net;
    c->connected = true;
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    set_socket_options(n, fd);
    /* The connect timeout is over. */
    bufferevent_set_timeouts(c->bev, NULL, NULL);
    c->rd_ev = event_new(n->base, fd, EV_READ | EV_PERSIST, conn_read_cb, c);
    struct timeval tv = {.tv_sec = n->timeout_ms / 1000, .tv_usec = (n->timeout_ms % 1000) * 1000};
    if (!c->rd_ev || event_add(c->rd_ev, &tv) != 0) {
        net_conn_close(c, "cannot watch the socket: out of memory; disconnecting");
        return;
    }
    bufferevent_enable(c->bev, EV_WRITE);
    /* The dialling side speaks first; the accepting side answers with its
     * HELLO only once it accepted the caller's, so a HELLO received always
     * means "accepted": a caller refused (say, not declared there yet)
     * sees the connection close before any HELLO and tries again. */
    if (c->outgoing)
        net_conn_send_hello(c);
}

static void peer_connect(struct net_peer *p)
{
    struct mesh_net *n = p->net;
    if (!p->retry_ev)
        p->retry_ev = evtimer_new(n->base, retry_cb, p);
    /* From this node's own address when it has one to give (peers check
     * where a connection comes from). */
    evutil_socket_t fd = -1;
    if (n->have_bind) {
        fd = socket(n->bind_sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && (p->sa.ss_family != n->bind_sa.ss_family ||
                        bind(fd, (struct sockaddr *)&n->bind_sa, n->bind_len) != 0 ||
                        evutil_make_socket_nonblocking(fd) != 0)) {
            evutil_closesocket(fd);
            fd = -1;
        }
    }
    struct bufferevent *bev = bufferevent_socket_new(n->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev && fd >= 0)
        evutil_closesocket(fd);
    struct net_conn *c = bev ? conn_new(n, bev, p->addr, p) : NULL;
    if (!c) {
        if (bev)
            bufferevent_free(bev);
        pthread_mutex_lock(&n->mu);
        char down[NET_ERR_MAX];
        snprintf(down, sizeof down, "cannot connect to peer %s (%s): out of memory", p->name,
                 p->addr);
        net_peer_down_locked(p, down);
        pthread_mutex_unlock(&n->mu);
        net_log("%s", down);
        return;
    }
    p->conn = c;
    /* A SYN nobody answers must not outlive the connect deadline (libevent
     * times a connect with the write timeout). */
    int64_t left_ms = (p->deadline_ns - net_now_ns()) / 1000000;
    if (left_ms < 1)
        left_ms = 1;
    struct timeval tv = {.tv_sec = left_ms / 1000, .tv_usec = (left_ms % 1000) * 1000};
    bufferevent_set_timeouts(bev, NULL, &tv);
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&p->sa, (int)p->salen) != 0)
        net_conn_close(c, "connect: %s", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

/* Hands the peer's queued messages to libevent: the head by reference too
 * (it is already our own copy, freed by the cleanup), the tensor by
 * reference with a cleanup that counts it released. */
static void ref_done(const void *data, size_t len, void *extra)
{
    (void)data;
    (void)len;
    struct net_peer *p = extra;
    pthread_mutex_lock(&p->net->mu);
    p->refs--;
    if (p->refs == 0)
        pthread_cond_broadcast(&p->net->send_cond);
    pthread_mutex_unlock(&p->net->mu);
}

static void head_done(const void *data, size_t len, void *extra)
{
    (void)len;
    (void)extra;
    free((void *)data);
}

void net_peer_write_queue(struct net_peer *p)
{
    struct mesh_net *n = p->net;
    struct net_conn *c = p->conn;
    if (!c || !c->hello_done)
        return;
    pthread_mutex_lock(&n->mu);
    struct net_send_item *it = p->outq;
    p->outq = p->outq_tail = NULL;
    for (struct net_send_item *i = it; i; i = i->next)
        p->refs += i->nbytes > 0;
    pthread_mutex_unlock(&n->mu);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    bool failed = false;
    while (it) {
        struct net_send_item *next = it->next;
        if (failed || evbuffer_add_reference(out, it->head, it->head_len, head_done, NULL) != 0) {
            free(it->head);
            failed = true;
        }
        if (it->nbytes &&
            (failed || evbuffer_add_reference(out, it->data, it->nbytes, ref_done, p) != 0)) {
            ref_done(it->data, it->nbytes, p);
            failed = true;
        }
        free(it);
        it = next;
    }
    if (failed)
        net_conn_close(c, "cannot queue a message: out of memory; disconnecting");
}

/* Counts bytes the kernel took: backpressure and flush wait on this. */
static void conn_out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)buf;
    struct net_conn *c = arg;
    size_t n_del = info->n_deleted;
    if (n_del == 0)
        return;
    size_t hello = n_del < c->hello_unsent ? n_del : c->hello_unsent;
    c->hello_unsent -= hello;
    n_del -= hello;
    if (n_del == 0 || !c->peer)
        return;
    struct mesh_net *n = c->net;
    pthread_mutex_lock(&n->mu);
    struct net_peer *p = c->peer;
    p->queued = n_del < p->queued ? p->queued - n_del : 0;
    p->drained += n_del;
    pthread_cond_broadcast(&n->send_cond);
    pthread_mutex_unlock(&n->mu);
}

/* A whole payload has arrived (ownership passes here). Returns -1 when the
 * connection was closed. */
static int conn_frame(struct net_conn *c, uint8_t *payload, size_t len)
{
    struct mesh_net *n = c->net;
    struct mesh_frame *f = calloc(1, sizeof *f);
    if (!f) {
        net_payload_free(payload);
        net_conn_close(c, "frame of %zu bytes: out of memory; disconnecting", len);
        return -1;
    }
    f->payload = payload;
    f->len = len;
    char e[256];
    if (mesh_decode(payload, len, &f->msg, e, sizeof e) != 0) {
        mesh_frame_free(f);
        net_conn_close(c, "sent a frame that does not decode (%s); disconnecting", e);
        return -1;
    }
    if (!c->hello_done) {
        int rc = net_conn_hello(c, &f->msg);
        mesh_frame_free(f);
        return rc;
    }
    const char *why = NULL;
    if (f->msg.type == MESH_MSG_HELLO)
        why = "sent a second HELLO";
    else if (f->msg.version != MESH_PROTOCOL_VERSION)
        why = "changed protocol version";
    else if (f->msg.run_id != n->run_id)
        why = "sent a frame of another run";
    if (why) {
        uint64_t run_id = f->msg.run_id;
        mesh_frame_free(f);
        net_conn_close(c, "%s (run id %016llx, this run %016llx); disconnecting", why,
                       (unsigned long long)run_id, (unsigned long long)n->run_id);
        return -1;
    }
    if (f->msg.type == MESH_MSG_PROBE && !(f->msg.flags & MESH_PROBE_REPLY))
        return net_conn_probe_echo(c, f);
    f->peer = c->peer->index;
    pthread_mutex_lock(&n->mu);
    net_enqueue_locked(n, f);
    bool full = n->rq_bytes > n->recv_high_water || n->rq_frames > NET_RECV_MAX_FRAMES;
    if (full) {
        c->paused = true;
        n->npaused++;
    }
    pthread_mutex_unlock(&n->mu);
    if (full)
        event_del(c->rd_ev);
    return 0;
}

/* Starts a frame from its 4-byte length prefix. Returns -1 when the
 * connection was closed. */
static int conn_frame_start(struct net_conn *c, const uint8_t p[4])
{
    struct mesh_net *n = c->net;
    uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24;
    /* Refused before anything is allocated: after HELLO, what that peer
     * may send at most. */
    size_t limit = c->hello_done && c->peer ? c->peer->max_frame : n->max_frame;
    if (len > limit) {
        net_conn_close(c, "frame of %u bytes exceeds the limit of %zu; disconnecting", len, limit);
        return -1;
    }
    size_t checked;
    char e[200];
    if (mesh_decode_length(p, n->max_frame, &checked, e, sizeof e) != 0) {
        net_conn_close(c, "%s; disconnecting", e);
        return -1;
    }
    if (!c->hello_done && len > NET_HELLO_MAX) {
        net_conn_close(c,
                       "first frame of %u bytes is too large for a HELLO (limit %d); disconnecting",
                       len, NET_HELLO_MAX);
        return -1;
    }
    c->payload = net_payload_alloc(len);
    if (!c->payload) {
        net_conn_close(c, "frame of %u bytes: out of memory; disconnecting", len);
        return -1;
    }
    c->len = len;
    c->got = 0;
    c->have_len = true;
    return 0;
}

/* Parses what rbuf holds and reads more, until the socket has nothing, the
 * receive queue is full, or the budget is spent. Returns -1 when the
 * connection was closed (c is freed). */
static int conn_read(struct net_conn *c)
{
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    size_t budget = READ_BUDGET;
    for (;;) {
        if (c->paused)
            return 0;
        if (!c->have_len && c->rlen - c->roff >= 4) {
            c->roff += 4;
            if (conn_frame_start(c, c->rbuf + c->roff - 4) != 0)
                return -1;
            continue;
        }
        if (c->have_len && c->roff < c->rlen) {
            size_t take = c->rlen - c->roff;
            if (take > c->len - c->got)
                take = c->len - c->got;
            memcpy(c->payload + c->got, c->rbuf + c->roff, take);
            c->roff += take;
            c->got += take;
        }
        if (c->have_len && c->got == c->len) {
            uint8_t *payload = c->payload;
            c->payload = NULL;
            c->have_len = false;
            if (conn_frame(c, payload, c->len) != 0)
                return -1;
            continue;
        }
        /* Everything buffered is used: read more. */
        if (budget == 0)
            return 0;
        if (c->roff == c->rlen) {
            c->roff = c->rlen = 0;
        } else if (c->roff > 0) {
            memmove(c->rbuf, c->rbuf + c->roff, c->rlen - c->roff);
            c->rlen -= c->roff;
            c->roff = 0;
        }
        /* Mid-frame, rbuf is empty here: a large rest goes straight to the
         * frame's buffer. */
        bool direct = c->have_len && c->len - c->got >= RBUF_SIZE;
        uint8_t *dst = direct ? c->payload + c->got : c->rbuf + c->rlen;
        size_t room = direct ? c->len - c->got : RBUF_SIZE - c->rlen;
        if (room > budget)
            room = budget;
        ssize_t k = read(fd, dst, room);
        if (k > 0) {
            budget -= (size_t)k;
            *(direct ? &c->got : &c->rlen) += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (k < 0)
            net_conn_close(c, "connection broke: %s", strerror(errno));
        else if (c->have_len)
            net_conn_close(c, "closed the connection in the middle of a frame (%zu of %u bytes)",
                           c->got, c->len);
        else if (c->rlen > c->roff)
            net_conn_close(c, "closed the connection in the middle of a length prefix");
        else
            net_conn_close(c, "closed the connection");
        return -1;
    }
}

static void conn_read_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct net_conn *c = arg;
    if (what & EV_TIMEOUT) {
        net_conn_close(c, "sent no HELLO within %d ms; disconnecting", c->net->timeout_ms);
        return;
    }
    conn_read(c);
}

/* Connecting, and errors while writing (reading finds its own). */
static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct net_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        conn_start(c);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        net_conn_close(c, "connect: timed out");
        return;
    }
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) {
        int e = EVUTIL_SOCKET_ERROR();
        if (!c->connected)
            net_conn_close(c, "connect: %s", evutil_socket_error_to_string(e));
        else
            net_conn_close(c, "connection broke: %s", evutil_socket_error_to_string(e));
    }
}

void net_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                   void *arg)
{
    (void)l;
    struct mesh_net *n = arg;
    char addr[NET_ADDR_MAX];
    net_format_addr(sa, addr, sizeof addr);
    struct bufferevent *bev = bufferevent_socket_new(n->base, fd, BEV_OPT_CLOSE_ON_FREE);
    struct net_conn *c = bev ? conn_new(n, bev, addr, NULL) : NULL;
    if (c && salen > 0 && (size_t)salen <= sizeof c->remote) {
        memcpy(&c->remote, sa, (size_t)salen);
        c->have_remote = true;
    }
    if (!c) {
        net_log("peer %s: out of memory; disconnecting", addr);
        if (bev)
            bufferevent_free(bev);
        else
            evutil_closesocket(fd);
        return;
    }
    conn_start(c);
}

void net_accept_error_cb(struct evconnlistener *l, void *arg)
{
    (void)l;
    (void)arg;
    /* EMFILE and friends: the listener stays; the next accept may work. */
    net_log("accept: %s", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

static void loop_shutdown(struct mesh_net *n)
{
    if (n->listener) {
        evconnlistener_free(n->listener);
        n->listener = NULL;
    }
    while (n->conns)
        conn_free(n->conns);
    pthread_mutex_lock(&n->mu);
    int npeers = n->npeers;
    pthread_mutex_unlock(&n->mu);
    for (int i = 0; i < npeers; i++) {
        struct net_peer *p = n->peers[i];
        p->conn = NULL;
        if (p->retry_ev) {
            event_free(p->retry_ev);
            p->retry_ev = NULL;
        }
    }
}

/* Everything compute threads ask of the loop: stop, connect to new peers,
 * write queued messages, read again after recv drained the queue. */
void net_wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct mesh_net *n = arg;
    struct net_peer *todo[NET_MAX_PEERS];
    pthread_mutex_lock(&n->mu);
    bool stopping = n->stopping;
    bool resume = n->resume_wanted;
    n->resume_wanted = false;
    if (resume)
        n->npaused = 0;
    int npeers = n->npeers;
    for (int i = 0; i < npeers; i++)
        todo[i] = n->peers[i];
    pthread_mutex_unlock(&n->mu);
    if (stopping) {
        loop_shutdown(n);
        event_base_loopbreak(n->base);
        return;
    }
    for (int i = 0; i < npeers; i++) {
        struct net_peer *p = todo[i];
        if (p->outgoing && !p->connect_started) {
            p->connect_started = true;
            peer_connect(p);
        } else {
            net_peer_write_queue(p);
        }
    }
    if (resume) {
        /* conn_read may close (and unlink) c: take next first. */
        for (struct net_conn *c = n->conns, *next; c; c = next) {
            next = c->next;
            if (!c->paused)
                continue;
            c->paused = false;
            if (conn_read(c) == 0 && !c->paused)
                event_add(c->rd_ev, NULL);
        }
    }
}

void *net_loop_main(void *arg)
{
    struct mesh_net *n = arg;
    /* Writing to a connection the peer reset raises SIGPIPE, which would
     * kill the whole process. Blocked on this thread (the only one that
     * writes sockets), the write fails with EPIPE instead and the
     * connection is closed as broken, without touching the process's
     * signal dispositions. */
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, NULL);
    event_base_loop(n->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

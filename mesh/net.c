/* net.c — the peer transport's API, called from compute threads: start and
 * stop the loop thread, declare peers, queue messages with backpressure,
 * wait for flushes and for received frames. The loop thread's side (the
 * connections themselves) is net_conn.c, the HELLO exchange net_hello.c,
 * link probes net_probe.c; net_internal.h says who owns what. */
#include "net_internal.h"

#include <errno.h>
#include <event2/thread.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_HIGH_WATER ((size_t)64 << 20)

/* Appends to err at *k, never past errlen: for messages built in a loop. */
static void append_err(char *err, size_t errlen, size_t *k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append_err(char *err, size_t errlen, size_t *k, const char *fmt, ...)
{
    if (!err || *k + 1 >= errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(err + *k, errlen - *k, fmt, ap);
    va_end(ap);
    if (w > 0)
        *k += (size_t)w < errlen - *k ? (size_t)w : errlen - *k - 1;
}

void net_log(const char *fmt, ...)
{
    /* One fputs per line: lines from several threads or nodes in one
     * process never interleave mid-line. */
    char line[1024];
    int k = snprintf(line, sizeof line, "shardnode mesh: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + k, sizeof line - (size_t)k - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    fputs(line, stderr);
}

int64_t net_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void net_broadcast_all(struct mesh_net *n)
{
    pthread_cond_broadcast(&n->recv_cond);
    pthread_cond_broadcast(&n->send_cond);
    pthread_cond_broadcast(&n->state_cond);
}

void net_enqueue_locked(struct mesh_net *n, struct mesh_frame *f)
{
    f->next = NULL;
    if (n->rq_tail)
        n->rq_tail->next = f;
    else
        n->rq = f;
    n->rq_tail = f;
    n->rq_frames++;
    n->rq_bytes += f->len;
    /* Broadcast: mesh_net_recv and mesh_net_probe may both be waiting. */
    pthread_cond_broadcast(&n->recv_cond);
}

/* Takes f (after prev, or first when prev is NULL) out of the receive
 * queue (mu held). Returns true when the loop must be woken to read again. */
bool net_rq_unlink_locked(struct mesh_net *n, struct mesh_frame *prev, struct mesh_frame *f)
{
    if (prev)
        prev->next = f->next;
    else
        n->rq = f->next;
    if (n->rq_tail == f)
        n->rq_tail = prev;
    f->next = NULL;
    n->rq_frames--;
    n->rq_bytes -= f->len;
    /* Half the bound before reading again, so a queue at the limit does not
     * flip reading on and off for every frame. */
    bool resume = n->npaused > 0 && !n->resume_wanted && n->rq_bytes <= n->recv_high_water / 2 &&
                  n->rq_frames <= NET_RECV_MAX_FRAMES / 2;
    if (resume)
        n->resume_wanted = true;
    return resume;
}

static void free_send_items(struct net_send_item *it)
{
    while (it) {
        struct net_send_item *next = it->next;
        free(it->head);
        free(it);
        it = next;
    }
}

void net_peer_down_locked(struct net_peer *p, const char *err)
{
    if (p->state == NET_PEER_DOWN)
        return;
    p->state = NET_PEER_DOWN;
    snprintf(p->err, sizeof p->err, "%s", err);
    /* Bytes that will never be written no longer hold senders back; the
     * references libevent still holds are released (refs) when it frees
     * the connection's buffers. */
    free_send_items(p->outq);
    p->outq = p->outq_tail = NULL;
    p->discarded += p->queued;
    p->queued = 0;
    struct mesh_frame *f = calloc(1, sizeof *f);
    if (f) {
        /* In the queue, not a flag: frames that arrived before the loss are
         * still delivered first (an ABORT then a close reads in order). */
        f->lost = true;
        f->peer = p->index;
        snprintf(f->err, sizeof f->err, "%s", err);
        net_enqueue_locked(p->net, f);
    }
    net_broadcast_all(p->net);
}

/* An absolute CLOCK_MONOTONIC deadline for pthread_cond_timedwait. */
static struct timespec deadline_ts(int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = deadline_ns / 1000000000, .tv_nsec = deadline_ns % 1000000000};
    return ts;
}

/* Waits on cond until woken or deadline; returns false once the deadline
 * has passed. timeout_ms < 0 (deadline_ns < 0) waits without limit. */
bool net_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ns)
{
    if (deadline_ns < 0) {
        pthread_cond_wait(cond, mu);
        return true;
    }
    if (net_now_ns() >= deadline_ns)
        return false;
    struct timespec ts = deadline_ts(deadline_ns);
    pthread_cond_timedwait(cond, mu, &ts);
    return true;
}

int64_t net_deadline_after(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : net_now_ns() + (int64_t)timeout_ms * 1000000;
}

void net_wake_loop(struct mesh_net *n)
{
    event_active(n->wake_ev, 0, 0);
}

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;
static int evthread_status;
static void evthread_init(void)
{
    /* Before any event_base exists: bases created afterwards get locks and
     * a notification pipe, so event_active() from a compute thread wakes
     * the loop. */
    evthread_status = evthread_use_pthreads();
}

static int start_listener(mesh_net *n, const mesh_net_config *cfg, char *err, size_t errlen)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", cfg->listen_port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(cfg->listen_host, portstr, &hints, &res);
    if (rc != 0) {
        mesh_errf(err, errlen, "listen address %s: %s", cfg->listen_host, gai_strerror(rc));
        return -1;
    }
    n->listener = evconnlistener_new_bind(
        n->base, net_accept_cb, n,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC |
            (cfg->defer_accept ? LEV_OPT_DISABLED : 0),
        64, res->ai_addr,
        (int)res->ai_addrlen);
    freeaddrinfo(res);
    if (!n->listener) {
        mesh_errf(err, errlen, "cannot listen on %s:%d: %s", cfg->listen_host, cfg->listen_port,
                strerror(errno));
        return -1;
    }
    evconnlistener_set_error_cb(n->listener, net_accept_error_cb);
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof ss;
    if (getsockname(evconnlistener_get_fd(n->listener), (struct sockaddr *)&ss, &sslen) != 0) {
        mesh_errf(err, errlen, "listen socket: %s", strerror(errno));
        return -1;
    }
    n->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    char addr[NET_ADDR_MAX];
    net_format_addr((struct sockaddr *)&ss, addr, sizeof addr);
    net_log("%s listening on %s", n->self, addr);
    return 0;
}

/* The source address of outgoing connections, when it is one of this
 * host's (a trial bind says so). */
static void set_bind(mesh_net *n, const char *host)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, "0", &hints, &res) != 0 || !res)
        return;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool wildcard = false;
    if (res->ai_family == AF_INET)
        wildcard = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr == htonl(INADDR_ANY);
    else if (res->ai_family == AF_INET6)
        wildcard = IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr);
    if (fd >= 0 && !wildcard && bind(fd, res->ai_addr, res->ai_addrlen) == 0) {
        memcpy(&n->bind_sa, res->ai_addr, res->ai_addrlen);
        n->bind_len = (socklen_t)res->ai_addrlen;
        n->have_bind = true;
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
}

int mesh_net_start(mesh_net **out, const mesh_net_config *cfg, char *err, size_t errlen)
{
    *out = NULL;
    if (!cfg->self || !cfg->self[0] || strlen(cfg->self) >= MESH_NAME_MAX) {
        mesh_errf(err, errlen, "node name must be 1 to %d bytes", MESH_NAME_MAX - 1);
        return -1;
    }
    if (!cfg->run || strlen(cfg->run) >= MESH_TEXT_MAX) {
        mesh_errf(err, errlen, "run name must be at most %d bytes", MESH_TEXT_MAX - 1);
        return -1;
    }
    if (cfg->listen_host && (cfg->listen_port < 0 || cfg->listen_port > 65535)) {
        mesh_errf(err, errlen, "listen port %d is not in 0..65535", cfg->listen_port);
        return -1;
    }
    pthread_once(&evthread_once, evthread_init);
    if (evthread_status != 0) {
        mesh_errf(err, errlen, "libevent: cannot enable pthreads support");
        return -1;
    }
    mesh_net *n = calloc(1, sizeof *n);
    if (!n) {
        mesh_errf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(n->self, sizeof n->self, "%s", cfg->self);
    snprintf(n->run, sizeof n->run, "%s", cfg->run);
    n->run_id = mesh_run_id(cfg->run);
    n->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
    n->max_frame = cfg->max_frame ? cfg->max_frame : MESH_DEFAULT_MAX_FRAME;
    /* The 4-byte length prefix cannot say more. */
    if (n->max_frame > UINT32_MAX)
        n->max_frame = UINT32_MAX;
    n->send_high_water = cfg->send_high_water ? cfg->send_high_water : DEFAULT_HIGH_WATER;
    /* The same bound for what waits for this node's compute thread as for
     * what waits for a peer's. */
    n->recv_high_water = n->send_high_water;

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->recv_cond, &ca);
    pthread_cond_init(&n->send_cond, &ca);
    pthread_cond_init(&n->state_cond, &ca);
    pthread_condattr_destroy(&ca);

    if (net_hello_encode(n, err, errlen) != 0)
        goto fail;
    n->base = event_base_new();
    if (!n->base) {
        mesh_errf(err, errlen, "libevent: cannot create an event base");
        goto fail;
    }
    n->wake_ev = event_new(n->base, -1, 0, net_wake_cb, n);
    if (!n->wake_ev) {
        mesh_errf(err, errlen, "libevent: cannot create an event");
        goto fail;
    }
    if (cfg->listen_host && start_listener(n, cfg, err, errlen) != 0)
        goto fail;
    if (cfg->bind_host)
        set_bind(n, cfg->bind_host);
    int rc = pthread_create(&n->thread, NULL, net_loop_main, n);
    if (rc != 0) {
        mesh_errf(err, errlen, "cannot start the network thread: %s", strerror(rc));
        goto fail;
    }
    n->thread_started = true;
    *out = n;
    return 0;
fail:
    mesh_net_stop(n);
    return -1;
}

void mesh_net_accept(mesh_net *n)
{
    /* the base has locks (evthread): callable from the owner's thread */
    if (n && n->listener) evconnlistener_enable(n->listener);
}

void mesh_net_stop(mesh_net *n)
{
    if (!n)
        return;
    if (n->thread_started) {
        pthread_mutex_lock(&n->mu);
        n->stopping = true;
        net_broadcast_all(n);
        pthread_mutex_unlock(&n->mu);
        /* The loop closes every connection and timer itself, then breaks. */
        net_wake_loop(n);
        pthread_join(n->thread, NULL);
    } else if (n->listener) {
        evconnlistener_free(n->listener);
    }
    if (n->wake_ev)
        event_free(n->wake_ev);
    /* Runs the finalizers of freed bufferevents: their buffers, and with
     * them the reference cleanups that take mu, go here, so mu and the
     * peers must still exist. */
    if (n->base)
        event_base_free(n->base);
    for (int i = 0; i < n->npeers; i++) {
        free_send_items(n->peers[i]->outq);
        free(n->peers[i]);
    }
    while (n->rq) {
        struct mesh_frame *f = n->rq;
        n->rq = f->next;
        mesh_frame_free(f);
    }
    free(n->hello);
    pthread_cond_destroy(&n->recv_cond);
    pthread_cond_destroy(&n->send_cond);
    pthread_cond_destroy(&n->state_cond);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

int mesh_net_port(const mesh_net *n)
{
    return n->port;
}

int mesh_net_add_peer(mesh_net *n, const char *name, const char *host, int port, char *err,
                      size_t errlen)
{
    return mesh_net_add_peer_opts(n, name, host, port, NULL, err, errlen);
}

int mesh_net_add_peer_opts(mesh_net *n, const char *name, const char *host, int port,
                           const mesh_net_peer_opts *opts, char *err, size_t errlen)
{
    if (!name || !name[0] || strlen(name) >= MESH_NAME_MAX) {
        mesh_errf(err, errlen, "peer name must be 1 to %d bytes", MESH_NAME_MAX - 1);
        return -1;
    }
    if (strcmp(name, n->self) == 0) {
        mesh_errf(err, errlen, "peer %s: that is this node's own name", name);
        return -1;
    }
    struct net_peer *p = calloc(1, sizeof *p);
    if (!p) {
        mesh_errf(err, errlen, "out of memory");
        return -1;
    }
    p->net = n;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->backoff_ms = 50;
    if (opts && opts->hello_key) {
        if (strlen(n->run) + 2 + MESH_HELLO_MAC_HEX >= MESH_TEXT_MAX) {
            mesh_errf(err, errlen, "peer %s: a HELLO MAC needs a run name of at most %d bytes",
                      name, MESH_TEXT_MAX - 3 - MESH_HELLO_MAC_HEX);
            free(p);
            return -1;
        }
        p->has_key = true;
        memcpy(p->key, opts->hello_key, MESH_HELLO_KEY_LEN);
    }
    p->max_frame = opts && opts->max_frame && opts->max_frame < n->max_frame ? opts->max_frame
                                                                             : n->max_frame;
    if (opts && opts->from) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        int rc = getaddrinfo(opts->from, NULL, &hints, &res);
        if (rc != 0) {
            mesh_errf(err, errlen, "peer %s: address %s: %s", name, opts->from, gai_strerror(rc));
            free(p);
            return -1;
        }
        /* a wildcard (a cluster file's 0.0.0.0 for a node nobody dials)
         * says nothing about where the peer is: no check */
        bool any = false;
        for (struct addrinfo *a = res; a; a = a->ai_next)
            any |= (a->ai_family == AF_INET &&
                    ((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr == htonl(INADDR_ANY)) ||
                   (a->ai_family == AF_INET6 &&
                    IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr));
        for (struct addrinfo *a = res; a && !any && p->nfrom < NET_FROM_MAX; a = a->ai_next)
            memcpy(&p->from[p->nfrom++], a->ai_addr, a->ai_addrlen);
        freeaddrinfo(res);
    }
    if (host) {
        if (port <= 0 || port > 65535) {
            mesh_errf(err, errlen, "peer %s: port %d is not in 1..65535", name, port);
            free(p);
            return -1;
        }
        /* Resolved here, on the caller's thread, so a slow resolver never
         * stalls the loop and a bad host is reported to the caller. */
        char portstr[16];
        snprintf(portstr, sizeof portstr, "%d", port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICSERV};
        struct addrinfo *res = NULL;
        int rc = getaddrinfo(host, portstr, &hints, &res);
        if (rc != 0) {
            mesh_errf(err, errlen, "peer %s: host %s: %s", name, host, gai_strerror(rc));
            free(p);
            return -1;
        }
        memcpy(&p->sa, res->ai_addr, res->ai_addrlen);
        p->salen = (socklen_t)res->ai_addrlen;
        freeaddrinfo(res);
        p->outgoing = true;
        snprintf(p->addr, sizeof p->addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    } else {
        snprintf(p->addr, sizeof p->addr, "not connected yet");
    }
    p->deadline_ns = net_now_ns() + (int64_t)n->timeout_ms * 1000000;

    pthread_mutex_lock(&n->mu);
    const char *why = NULL;
    if (n->stopping)
        why = "the network is stopping";
    else if (n->npeers == NET_MAX_PEERS)
        why = "too many peers";
    for (int i = 0; !why && i < n->npeers; i++)
        if (strcmp(n->peers[i]->name, name) == 0)
            why = "declared twice";
    if (why) {
        pthread_mutex_unlock(&n->mu);
        mesh_errf(err, errlen, "peer %s: %s", name, why);
        free(p);
        return -1;
    }
    p->index = n->npeers;
    n->peers[n->npeers++] = p;
    pthread_mutex_unlock(&n->mu);
    if (p->outgoing)
        net_wake_loop(n);
    return p->index;
}

/* The peer at index, or NULL with err filled (mu held). */
struct net_peer *net_peer_at(mesh_net *n, int peer, char *err, size_t errlen)
{
    if (peer < 0 || peer >= n->npeers) {
        mesh_errf(err, errlen, "no peer with index %d (%d declared)", peer, n->npeers);
        return NULL;
    }
    return n->peers[peer];
}

int mesh_net_wait_connected(mesh_net *n, int timeout_ms, char *err, size_t errlen)
{
    int64_t deadline = net_deadline_after(timeout_ms);
    pthread_mutex_lock(&n->mu);
    for (;;) {
        int up = 0;
        for (int i = 0; i < n->npeers; i++) {
            struct net_peer *p = n->peers[i];
            if (p->state == NET_PEER_DOWN) {
                mesh_errf(err, errlen, "%s", p->err);
                pthread_mutex_unlock(&n->mu);
                return -1;
            }
            up += p->state == NET_PEER_UP;
        }
        if (up == n->npeers) {
            pthread_mutex_unlock(&n->mu);
            return 0;
        }
        if (n->stopping || !net_wait_until(&n->state_cond, &n->mu, deadline))
            break;
    }
    /* Name every missing peer and what is known about why. */
    size_t k = 0;
    if (err && errlen)
        err[0] = 0;
    if (n->stopping)
        append_err(err, errlen, &k, "the network is stopping");
    else
        append_err(err, errlen, &k, "not connected after %d ms:", timeout_ms);
    for (int i = 0; i < n->npeers && !n->stopping; i++) {
        struct net_peer *p = n->peers[i];
        if (p->state == NET_PEER_UP)
            continue;
        if (p->outgoing)
            append_err(err, errlen, &k, " %s (%s: %s);", p->name, p->addr,
                       p->err[0] ? p->err : "connecting");
        else
            append_err(err, errlen, &k, " %s (has not connected here);", p->name);
    }
    pthread_mutex_unlock(&n->mu);
    return -1;
}

int mesh_net_send(mesh_net *n, int peer, const mesh_msg *m, char *err, size_t errlen)
{
    pthread_mutex_lock(&n->mu);
    struct net_peer *p = net_peer_at(n, peer, err, errlen);
    pthread_mutex_unlock(&n->mu);
    if (!p)
        return -1;
    if (m->type == MESH_MSG_HELLO) {
        mesh_errf(err, errlen, "message to %s: HELLO is sent by the transport itself", p->name);
        return -1;
    }
    if (m->nbytes && !m->data) {
        mesh_errf(err, errlen, "message to %s: %zu tensor bytes but no data", p->name, m->nbytes);
        return -1;
    }
    /* The transport stamps what it knows; a caller that sets them keeps its
     * values (and a wrong run_id is refused by the receiver). */
    mesh_msg copy = *m;
    if (!copy.version)
        copy.version = MESH_PROTOCOL_VERSION;
    if (!copy.run_id)
        copy.run_id = n->run_id;
    struct net_send_item *it = calloc(1, sizeof *it);
    if (!it) {
        mesh_errf(err, errlen, "out of memory");
        return -1;
    }
    char e[256];
    if (mesh_encode_head(&copy, &it->head, &it->head_len, e, sizeof e) != 0) {
        mesh_errf(err, errlen, "message to %s: %s", p->name, e);
        free(it);
        return -1;
    }
    it->data = m->data;
    it->nbytes = m->nbytes;
    size_t frame = it->head_len - 4 + it->nbytes;
    if (frame > n->max_frame) {
        mesh_errf(err, errlen, "message to %s: frame of %zu bytes exceeds the limit of %zu",
                p->name, frame, n->max_frame);
        free(it->head);
        free(it);
        return -1;
    }

    pthread_mutex_lock(&n->mu);
    /* Blocks while the peer is behind; the clock restarts whenever the peer
     * accepts bytes, so only a peer that takes nothing for timeout_ms fails
     * the send, not a slow one. */
    int64_t deadline = net_deadline_after(n->timeout_ms);
    uint64_t drained = p->drained;
    while (p->state != NET_PEER_DOWN && !n->stopping && p->queued > n->send_high_water) {
        if (p->drained != drained) {
            drained = p->drained;
            deadline = net_deadline_after(n->timeout_ms);
        }
        if (!net_wait_until(&n->send_cond, &n->mu, deadline)) {
            mesh_errf(err, errlen,
                    "peer %s (%s) accepted no data for %d ms; %zu bytes are queued for it",
                    p->name, p->addr, n->timeout_ms, p->queued);
            pthread_mutex_unlock(&n->mu);
            free(it->head);
            free(it);
            return -1;
        }
    }
    if (p->state == NET_PEER_DOWN || n->stopping) {
        mesh_errf(err, errlen, "%s", n->stopping ? "the network is stopping" : p->err);
        pthread_mutex_unlock(&n->mu);
        free(it->head);
        free(it);
        return -1;
    }
    if (p->outq_tail)
        p->outq_tail->next = it;
    else
        p->outq = it;
    p->outq_tail = it;
    p->queued += it->head_len + it->nbytes;
    bool up = p->state == NET_PEER_UP;
    pthread_mutex_unlock(&n->mu);
    /* A peer not connected yet gets its queue when its HELLO arrives. */
    if (up)
        net_wake_loop(n);
    return 0;
}

int mesh_net_flush(mesh_net *n, int peer, int timeout_ms, char *err, size_t errlen)
{
    int64_t deadline = net_deadline_after(timeout_ms);
    pthread_mutex_lock(&n->mu);
    struct net_peer *p = net_peer_at(n, peer, err, errlen);
    if (!p) {
        pthread_mutex_unlock(&n->mu);
        return -1;
    }
    /* Done when the kernel has every byte and libevent has let go of every
     * tensor (refs): only then may the caller reuse the memory. A DOWN peer
     * has nothing queued, but its buffers may not be freed yet. */
    while (p->queued > 0 || p->refs > 0) {
        if (n->stopping || !net_wait_until(&n->send_cond, &n->mu, deadline)) {
            mesh_errf(err, errlen, "flush to peer %s (%s): %zu bytes still queued after %d ms",
                    p->name, p->addr, p->queued, timeout_ms);
            pthread_mutex_unlock(&n->mu);
            return -1;
        }
    }
    /* A peer that closed after taking every byte (it finished its part of
     * the run, say) is no failure of this flush. */
    int rc = 0;
    if (p->state == NET_PEER_DOWN && p->discarded > 0) {
        mesh_errf(err, errlen, "%s (%zu bytes queued for it were not sent)", p->err, p->discarded);
        rc = -1;
    }
    pthread_mutex_unlock(&n->mu);
    return rc;
}

int mesh_net_recv(mesh_net *n, int *peer, mesh_msg *msg, mesh_frame **frame, int timeout_ms,
                  char *err, size_t errlen)
{
    *frame = NULL;
    *peer = -1;
    int64_t deadline = net_deadline_after(timeout_ms);
    pthread_mutex_lock(&n->mu);
    while (!n->rq) {
        if (n->stopping || !net_wait_until(&n->recv_cond, &n->mu, deadline)) {
            size_t k = 0;
            if (err && errlen)
                err[0] = 0;
            if (n->stopping)
                append_err(err, errlen, &k, "the network is stopping");
            else if (n->npeers == 0)
                append_err(err, errlen, &k, "no message within %d ms: no peer declared",
                           timeout_ms);
            else
                append_err(err, errlen, &k, "no message within %d ms from", timeout_ms);
            for (int i = 0; i < n->npeers && !n->stopping; i++) {
                struct net_peer *p = n->peers[i];
                append_err(err, errlen, &k, "%s %s (%s)", i ? "," : "", p->name,
                           p->state == NET_PEER_UP     ? p->addr
                           : p->state == NET_PEER_DOWN ? "gone"
                                                       : "not connected");
            }
            pthread_mutex_unlock(&n->mu);
            return -1;
        }
    }
    struct mesh_frame *f = n->rq;
    bool resume = net_rq_unlink_locked(n, NULL, f);
    pthread_mutex_unlock(&n->mu);
    if (resume)
        net_wake_loop(n);
    *peer = f->peer;
    if (f->lost) {
        mesh_errf(err, errlen, "%s", f->err);
        mesh_frame_free(f);
        return -1;
    }
    *msg = f->msg;
    *frame = f;
    return 0;
}

/* The pool: a few large buffers, each with its capacity in a header. */
#define NET_POOL_MIN ((size_t)1 << 20)
#define NET_POOL_SLOTS 4
#define NET_POOL_HEADER 64 /* keeps the payload 16-byte aligned */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *pool[NET_POOL_SLOTS];

static size_t payload_cap(const uint8_t *payload)
{
    size_t cap;
    memcpy(&cap, payload - NET_POOL_HEADER, sizeof cap);
    return cap;
}

uint8_t *net_payload_alloc(size_t len)
{
    size_t cap = len;
    if (len >= NET_POOL_MIN) {
        cap = (len + NET_POOL_MIN - 1) / NET_POOL_MIN * NET_POOL_MIN;
        int best = -1;
        pthread_mutex_lock(&pool_mu);
        for (int i = 0; i < NET_POOL_SLOTS; i++)
            if (pool[i] && payload_cap(pool[i]) >= len &&
                (best < 0 || payload_cap(pool[i]) < payload_cap(pool[best])))
                best = i;
        uint8_t *p = best >= 0 ? pool[best] : NULL;
        if (best >= 0) pool[best] = NULL;
        pthread_mutex_unlock(&pool_mu);
        if (p) return p;
    }
    uint8_t *base = malloc(cap + NET_POOL_HEADER);
    if (!base) return NULL;
    memcpy(base, &cap, sizeof cap);
    return base + NET_POOL_HEADER;
}

void net_payload_free(uint8_t *payload)
{
    if (!payload) return;
    if (payload_cap(payload) >= NET_POOL_MIN) {
        pthread_mutex_lock(&pool_mu);
        for (int i = 0; i < NET_POOL_SLOTS; i++)
            if (!pool[i]) {
                pool[i] = payload;
                payload = NULL;
                break;
            }
        pthread_mutex_unlock(&pool_mu);
        if (!payload) return;
    }
    free(payload - NET_POOL_HEADER);
}

void mesh_frame_free(mesh_frame *f)
{
    if (!f)
        return;
    net_payload_free(f->payload);
    free(f);
}

const char *mesh_net_peer_name(const mesh_net *n, int peer)
{
    mesh_net *mn = (mesh_net *)n; /* the lock is not part of the value */
    pthread_mutex_lock(&mn->mu);
    const char *name = peer >= 0 && peer < n->npeers ? n->peers[peer]->name : NULL;
    pthread_mutex_unlock(&mn->mu);
    return name;
}

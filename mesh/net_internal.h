/* net_internal.h — what net.c (the API, called from compute threads) and
 * net_conn.c (connections, run by the event loop thread) share. Not public.
 *
 * Threads and ownership:
 * - The loop thread is the only one that calls libevent on connections
 *   (a bufferevent that writes, a read event on the same socket), the
 *   listener and timers, and the only one that touches struct net_conn
 *   (net_conn.c, and the parts of net_hello.c and net_probe.c that take one).
 *   So no bufferevent needs BEV_OPT_THREADSAFE, and no lock order between
 *   libevent's locks and ours can deadlock.
 * - Compute threads reach the loop through one user event (wake_ev), which
 *   event_active() fires thread-safely (evthread_use_pthreads).
 * - Everything both sides read or write is under mesh_net.mu; fields are
 *   marked below. mu is never held while calling into libevent, because
 *   libevent calls back into code that takes mu (the reference cleanups
 *   when it frees an evbuffer chain, the output callback when it writes). */
#ifndef SHARDNODE_MESH_NET_INTERNAL_H
#define SHARDNODE_MESH_NET_INTERNAL_H

#include "mesh.h"
#include "mesh_internal.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>

#define NET_MAX_PEERS 64
/* A HELLO is a few small fields; refusing a large first frame keeps an
 * unidentified connection from making this node allocate max_frame. */
#define NET_HELLO_MAX 4096
/* The receive queue stops reading from peers above this many frames too, so
 * many small frames are bounded as well as a few large ones. */
#define NET_RECV_MAX_FRAMES 1024
#define NET_ADDR_MAX 80
#define NET_FROM_MAX 4   /* addresses a peer's connections may come from */
#define NET_ERR_MAX 512

typedef enum {
    NET_PEER_WAITING,   /* declared, no HELLO yet */
    NET_PEER_UP,        /* HELLO exchanged */
    NET_PEER_DOWN,      /* connection closed or broke, or connecting gave up */
} net_peer_state;

/* One message waiting for the loop thread to put it on the wire. */
struct net_send_item {
    struct net_send_item *next;
    uint8_t *head;       /* malloc'ed by mesh_encode_head; freed by libevent's cleanup */
    size_t head_len;
    const void *data;    /* the caller's tensor, referenced */
    size_t nbytes;
};

struct net_conn;

struct net_peer {
    struct mesh_net *net;
    int index;
    /* Immutable once published in net->peers (under mu). */
    char name[MESH_NAME_MAX];
    bool outgoing;                 /* declared with a host: this node connects */
    struct sockaddr_storage sa;
    socklen_t salen;
    int64_t deadline_ns;           /* connecting gives up at this time */
    size_t max_frame;              /* the largest frame it may send after HELLO */
    bool has_key;                  /* HELLOs with it carry a MAC under key */
    uint8_t key[MESH_HELLO_KEY_LEN];
    int nfrom;                     /* incoming: its connections come from one of these */
    struct sockaddr_storage from[NET_FROM_MAX];

    /* Under net->mu. */
    char addr[NET_ADDR_MAX];       /* host:port; for incoming peers set at HELLO */
    net_peer_state state;
    char err[NET_ERR_MAX];         /* why it is DOWN, or the last connect error */
    struct net_send_item *outq, *outq_tail; /* not yet handed to libevent */
    size_t queued;                 /* bytes in outq and in the output evbuffer */
    uint64_t drained;              /* bytes written so far: send's progress clock */
    size_t refs;                   /* tensors libevent still references */
    size_t discarded;              /* bytes dropped unsent when it went DOWN */
    int probe_replies;             /* PROBE echoes to it libevent still holds (0 or 1) */

    /* Loop thread only. */
    struct net_conn *conn;
    struct event *retry_ev;
    bool connect_started;
    int backoff_ms;
    bool retry_logged;
};

/* A received message (or, with lost set, the news that a peer is gone),
 * queued for mesh_net_recv in arrival order. */
/* Frame payload buffers (net.c). Large ones are recycled: a fresh 64 MiB
 * malloc is a fresh mmap whose pages fault in and are zeroed during the
 * kernel's copy, which halved loopback throughput. */
uint8_t *net_payload_alloc(size_t len);
void net_payload_free(uint8_t *payload);

struct mesh_frame {
    struct mesh_frame *next;
    int peer;
    bool lost;
    mesh_msg msg;           /* pointers into payload */
    uint8_t *payload;
    size_t len;
    char err[NET_ERR_MAX];  /* lost: the peer's error */
};

struct mesh_net {
    /* Immutable after mesh_net_start. */
    char self[MESH_NAME_MAX];
    char run[MESH_TEXT_MAX];
    uint64_t run_id;
    int timeout_ms;
    size_t max_frame;
    size_t send_high_water;
    size_t recv_high_water;
    bool have_bind;          /* outgoing connections bind to bind_sa */
    struct sockaddr_storage bind_sa;
    socklen_t bind_len;
    uint8_t *hello;          /* this node's HELLO frame, sent first on every connection */
    size_t hello_len;
    int port;
    struct event_base *base;
    struct event *wake_ev;
    pthread_t thread;
    bool thread_started;

    /* Loop thread only. */
    struct evconnlistener *listener;
    struct net_conn *conns;  /* every open connection, identified or not */

    pthread_mutex_t mu;
    pthread_cond_t recv_cond;  /* the receive queue got a frame */
    pthread_cond_t send_cond;  /* a peer's queued bytes or refs went down: backpressure, flush */
    pthread_cond_t state_cond; /* a peer came up or went down */
    /* Under mu. */
    bool stopping;
    bool resume_wanted;        /* recv drained the queue: loop, read again */
    int npeers;
    struct net_peer *peers[NET_MAX_PEERS];
    struct mesh_frame *rq, *rq_tail;
    size_t rq_frames, rq_bytes;
    int npaused;               /* connections not read because the queue is full */
    int64_t probe_seq;         /* the last PROBE sequence number sent */
};

/* Writing goes through a bufferevent (its output evbuffer holds the
 * references to tensors); reading is a plain event on the same socket, so
 * payloads land in their frame's buffer without passing through one. */
struct net_conn {
    struct mesh_net *net;
    struct net_conn *prev, *next;
    struct bufferevent *bev;
    struct event *rd_ev;     /* created once TCP is up */
    struct evbuffer_cb_entry *out_cb;
    char addr[NET_ADDR_MAX];
    struct sockaddr_storage remote; /* incoming: where it comes from */
    bool have_remote;
    /* Outgoing: the peer dialled. Incoming: NULL until a valid HELLO. */
    struct net_peer *peer;
    bool outgoing;
    bool connected;          /* TCP is up (outgoing connects asynchronously) */
    bool hello_done;
    bool paused;             /* not reading: the receive queue is full */
    size_t hello_unsent;     /* our HELLO's bytes not written yet: not in peer->queued */
    /* Bytes read but not parsed yet: rbuf[roff..rlen). */
    uint8_t *rbuf;
    size_t roff, rlen;
    /* The frame being read. */
    bool have_len;
    uint32_t len;
    size_t got;
    uint8_t *payload;
};

/* net.c */
void net_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t net_now_ns(void);
void net_broadcast_all(struct mesh_net *n);
/* Appends to the receive queue (mu held). */
void net_enqueue_locked(struct mesh_net *n, struct mesh_frame *f);
/* Marks a peer DOWN with err and queues the news for recv (mu held). */
void net_peer_down_locked(struct net_peer *p, const char *err);
/* Takes f (after prev, or first when prev is NULL) out of the receive
 * queue (mu held). Returns true when the loop must be woken to read again. */
bool net_rq_unlink_locked(struct mesh_net *n, struct mesh_frame *prev, struct mesh_frame *f);
/* Waits on cond until woken or deadline; returns false once the deadline
 * has passed. deadline_ns < 0 waits without limit. */
bool net_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ns);
int64_t net_deadline_after(int timeout_ms);
void net_wake_loop(struct mesh_net *n);
/* The peer at index, or NULL with err filled (mu held). */
struct net_peer *net_peer_at(mesh_net *n, int peer, char *err, size_t errlen);

/* net_conn.c: the loop thread */
void *net_loop_main(void *arg);
void net_wake_cb(evutil_socket_t fd, short what, void *arg);
void net_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                   void *arg);
void net_accept_error_cb(struct evconnlistener *l, void *arg);
void net_format_addr(const struct sockaddr *sa, char *out, size_t outlen);
/* Whether two socket addresses name the same host (ports ignored; an IPv4
 * address mapped into IPv6 equals the IPv4 one). */
bool net_same_host(const struct sockaddr *a, const struct sockaddr *b);
/* Closes a connection (freeing c) and records why (see net_conn.c). */
void net_conn_close(struct net_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Hands the peer's queued messages to libevent once its HELLO is done. */
void net_peer_write_queue(struct net_peer *p);

/* net_hello.c */
/* The HELLO MAC of sender to receiver in run under key, as hex
 * (MESH_HELLO_MAC_HEX digits and a NUL). */
void net_hello_mac(const uint8_t key[MESH_HELLO_KEY_LEN], const char *sender,
                   const char *receiver, const char *run, char out[MESH_HELLO_MAC_HEX + 1]);
/* This node's HELLO frame for peers without a key, into n->hello (at start). */
int net_hello_encode(mesh_net *n, char *err, size_t errlen);
/* Sends this node's HELLO on c (the loop thread); -1 when c was closed. */
int net_conn_send_hello(struct net_conn *c);
/* Judges c's first frame m; -1 when c was closed (and freed). */
int net_conn_hello(struct net_conn *c, const mesh_msg *m);

/* net_probe.c */
/* Answers a PROBE on the loop thread; takes f; -1 when c was closed. */
int net_conn_probe_echo(struct net_conn *c, struct mesh_frame *f);

#endif

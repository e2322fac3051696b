/* daemon_internal.h — what the daemon's files share (daemon.c: the loop,
 * WireGuard peers, UDP; daemon_state.c: the state directory and invites;
 * daemon_tcp.c: sync, joins and the control socket; daemon_join.c: the
 * joiner's side). Private to node/daemon/ (and tests); the commands see
 * daemon.h. */
#ifndef SHARDNODE_DAEMON_INTERNAL_H
#define SHARDNODE_DAEMON_INTERNAL_H

#include "daemon.h"

#include "keys.h"
#include "mesh.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#define DAEMON_PATH_MAX 4096
#define DAEMON_MAX_PEERS 1024
#define DAEMON_MAX_INVITES 64
#define DAEMON_CONTROL_MAX 65536 /* one control request line */
#define DAEMON_DIRECT_S 180 /* a handshake this recent makes a link "direct" */

struct event_base;
struct event;
struct evconnlistener;
struct dash;

/* What this node knows of a WireGuard peer (members and invites alike). */
typedef struct {
    uint8_t key[GOSSIP_KEY_LEN];
    char endpoint[MESH_WG_ENDPOINT_MAX]; /* as WireGuard last saw it */
    int64_t handshake_s;                 /* last handshake, Unix seconds; 0: never */
    int64_t handshake_at_death;          /* handshake_s when we declared it dead */
    bool withdrawn;                      /* dead for long: address withdrawn */
    bool knocked;                        /* let back in after a handshake while withdrawn */
    uint64_t rx_bytes, tx_bytes;         /* WireGuard's counters at the last poll */
    int64_t polled_ms;                   /* that poll (monotonic; 0: none yet) */
    double rx_rate, tx_rate;             /* bytes/s between the last two polls */
    /* Relayed (daemon_relay.c): WireGuard sends to relay_ep, a relay's port. */
    bool relayed;
    char relay_ep[MESH_WG_ENDPOINT_MAX];
    int64_t handshake_base;              /* handshake_s when relaying last stopped: a
                                          * direct path needs a newer handshake */
    int64_t relay_since_s;               /* Unix seconds when WireGuard was pointed at the
                                          * relay: a handshake since then is the path's */
    uint64_t relay_rx0;                  /* rx_bytes then: more since came through it (a
                                          * session carried over from another path) */
} daemon_peer;

typedef struct {
    uint8_t secret[GOSSIP_SECRET_LEN];
    uint8_t pub[GOSSIP_KEY_LEN];         /* the key the secret stands for */
    char address[GOSSIP_ADDR_MAX];       /* the one address it may use */
    int64_t expires;                     /* Unix seconds */
    bool used;
    int64_t used_at;                     /* Unix seconds (when used) */
} daemon_invite;

/* A redeemed invite stays a WireGuard peer this long, so the JOIN_REPLY
 * reaches the joiner; then it is withdrawn (PROTOCOL.md, "Joining"). */
#define DAEMON_INVITE_GRACE_S 10

/* Whether iv's WireGuard peer is withdrawn at now_s (Unix seconds: real
 * time, as invites.json's "expires" and "used_at" are shared with
 * `shardnode invite` and survive restarts): from its expiry on, and once
 * used from used_at + DAEMON_INVITE_GRACE_S on; a used_at later than now_s
 * (the clock was set back since) withdraws it at once, so a clock step
 * never keeps a spent invite open. */
bool daemon_invite_withdrawn(const daemon_invite *iv, int64_t now_s);

typedef struct daemon_conn daemon_conn;
typedef struct pool pool;
#define POOL_DATA_PORT 7947 /* the pipeline's activations and gradients, on the overlay */

typedef struct daemon_t {
    char state[DAEMON_PATH_MAX - 64]; /* room for "/invites.json" and the like */
    char ctl_path[DAEMON_PATH_MAX];
    json_t *node, *mesh;
    char name[MESH_NAME_MAX];
    char prefix[64];
    char overlay[GOSSIP_ADDR_MAX];
    char endpoint[MESH_WG_ENDPOINT_MAX]; /* configured ("" none: behind NAT, say) */
    char ifname[MESH_WG_IFNAME_MAX];
    char devices_json[GOSSIP_DEVICES_MAX];
    uint8_t wg_priv[GOSSIP_KEY_LEN], wg_pub[GOSSIP_KEY_LEN];
    uint8_t id_priv[GOSSIP_KEY_LEN], id_pub[GOSSIP_KEY_LEN];
    uint8_t mesh_id[GOSSIP_MESH_ID_LEN];
    gossip_admission adm;               /* this node's admission (mesh.json "admission";
                                           zero: the founder's, made at start) */
    int listen_port, gossip_port, prefix_len;
    uint64_t incarnation;
    bool joined, left;
    int lock_fd;
    FILE *logf;

    mesh_wg *wg;
    gossip *g;
    punch *punch;                   /* hole punching (NULL: loopback, no WireGuard) */
    relays *relay;                  /* which member relays what (NULL: loopback) */
    struct relay_fwd **fwd;         /* pairs this node relays for (daemon_relay.c) */
    size_t nfwd;
    bool no_relay;                  /* --no-relay: never relays for others */
    struct event_base *base;
    int udp_fd;
    struct event *udp_ev, *timer, *sigint, *sigterm, *sigchld;
    struct evconnlistener *tcp, *ctl;
    daemon_conn *conns; /* open TCP and control connections */

    daemon_peer peers[DAEMON_MAX_PEERS];
    size_t npeers;
    daemon_invite invites[DAEMON_MAX_INVITES];
    size_t ninvites;
    int64_t invites_mtime_ns;

    pool *pool;                     /* the job (pool.c) */
    bool insecure;                  /* prefix in 127.0.0.0/8: the overlay is loopback, no
                                       WireGuard, nothing encrypted (the non-root demo) */
    int threads;                    /* --threads: compute threads (0: all) */
    char device[16];                /* --device, resolved: "cpu", "cuda:0", ... */
    int cores;                      /* the CPUs this process may use (devices_detect at start) */
    char host_id[17];               /* FNV of /etc/machine-id: members on one machine */
    bool no_compute;                /* --no-compute: votes, holds no stage */

    struct dash *dash;              /* the dashboard (daemon_http.c); NULL: none */
    const char *http;               /* --http ADDR:PORT or "off"; NULL: DASH_DEFAULT */

    bool dirty, leaving;
    int leave_sends;
    int64_t next_poll_ms, next_save_ms, leave_done_ms;
    /* leaving with a hand-over: the member stays up until its stage's
     * layers run on a plan without it (pool_departed), or until
     * depart_until_ms; then it stops (SIGTERM/SIGINT) or leaves */
    enum { DAEMON_STAYS, DAEMON_DEPART_STOP, DAEMON_DEPART_LEAVE } departing;
    int64_t depart_until_ms;
} daemon_t;

/* daemon_relay.c: relays (docs/PROTOCOL.md, "Relays"). The hooks gossip and
 * relay.c call, the forwarding this node does for others, and the polls. */
int daemon_relay_open(daemon_t *d, char *err, size_t errlen);
void daemon_relay_close(daemon_t *d);
void daemon_relay_poll(daemon_t *d);   /* after wg_poll and punch_poll */
void daemon_relay_tick(daemon_t *d, int64_t now_ms);
int daemon_relay_open_hook(void *ctx, const gossip_member *a, const gossip_member *b,
                           uint16_t *port_a, uint16_t *port_b);
void daemon_relay_offer_hook(void *ctx, const gossip_member *peer, const gossip_member *via,
                             uint16_t port, bool granted);
/* Whether WireGuard reaches the peer over a direct path now (a recent
 * handshake, not through a relay, newer than relaying's last end). */
bool daemon_peer_direct_path(const daemon_peer *p);
/* The member relaying this node's pair with m (NULL: none), for status. */
const gossip_member *daemon_relay_via(daemon_t *d, const gossip_member *m);
/* ... and a WireGuard handshake went through it since: the pair is "relayed". */
bool daemon_relay_up(daemon_t *d, const gossip_member *m);
/* status --json's "relaying": the pairs this node forwards for. */
json_t *daemon_relay_status_json(daemon_t *d);

/* daemon.c */
/* Monotonic ms: every timer. */
int64_t daemon_now_ms(void);
/* Unix ms: only what is signed or shown. */
int64_t daemon_wall_ms(void);
void daemon_log(daemon_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int daemon_sockaddr(const char *addr, int port, struct sockaddr_storage *ss, socklen_t *len);
void daemon_addr_string(const struct sockaddr *sa, char *out, size_t outlen, int *port);
void daemon_host_cidr(const char *addr, char *out, size_t outlen);
/* The peer entry of a key: _find returns NULL when there is none, _of adds
 * one (NULL only when the table is full). */
daemon_peer *daemon_peer_find(daemon_t *d, const uint8_t key[GOSSIP_KEY_LEN]);
daemon_peer *daemon_peer_of(daemon_t *d, const uint8_t key[GOSSIP_KEY_LEN]);
/* A WireGuard handshake in the last DAEMON_DIRECT_S: a direct link. */
bool daemon_peer_direct(const daemon_peer *p);
int daemon_set_member_peer(daemon_t *d, const gossip_member *m, const char *endpoint);
/* The link status shows for the pair of this node and m: "self", "none",
 * "loopback", "direct", "punched", "pending" or "unreachable". */
const char *daemon_link_name(daemon_t *d, const gossip_member *m, int64_t now_ms);
/* `shardnode leave`: now, or (now false) after handing this member's stage
 * over to a plan without it when it holds one; true when it waits for
 * that. */
bool daemon_leave(daemon_t *d, bool now);
/* This node's record as it stands (incarnation d->incarnation). */
void daemon_self_record(daemon_t *d, gossip_record *r);
int daemon_open_wireguard(daemon_t *d, const uint8_t priv[GOSSIP_KEY_LEN], const char *address,
                          char *err, size_t errlen);
void daemon_free(daemon_t *d);

/* A mesh prefix inside 127.0.0.0/8: members are processes on one machine
 * talking over loopback without WireGuard (insecure; the non-root demo). */
bool daemon_prefix_insecure(const char *prefix);

/* daemon_state.c */
/* mesh.json's form of an admission: {"by": hex, "at_ms": int, "sig": hex}. */
json_t *daemon_adm_json(const gossip_admission *a);
/* 0, or -1 when j is not an admission (a is then zero). */
int daemon_adm_parse(json_t *j, gossip_admission *a);
int daemon_open_state(daemon_t **out, const char *state, char *err, size_t errlen);
int daemon_save(daemon_t *d, char *err, size_t errlen);
/* The saved view of mesh.json into gossip; bad entries are logged and skipped. */
void daemon_load_members(daemon_t *d);
uint64_t daemon_mem_available(void);
/* Re-reads invites.json when it changed (or always with force) and keeps
 * WireGuard's invite peers in step: unexpired invites are peers. */
void daemon_invites_refresh(daemon_t *d, bool force);
const daemon_invite *daemon_invite_by_address(const daemon_t *d, const char *addr);
/* Marks the invite with this secret used by `name`, under invites.lock.
 * Returns 0 when it was free, 1 with *why filled when it cannot be used
 * (expired, used, unknown), -1 on an I/O error (err). */
int daemon_invite_redeem(daemon_t *d, const uint8_t secret[GOSSIP_SECRET_LEN],
                         const char *name, char *why, size_t whylen, char *err,
                         size_t errlen);

/* daemon_tcp.c */
void daemon_tcp_accept(struct evconnlistener *l, int fd, struct sockaddr *sa, int salen,
                       void *arg);
void daemon_sync_start(daemon_t *d, const char *addr, int port);
int daemon_control_open(daemon_t *d, char *err, size_t errlen);
void daemon_conns_close(daemon_t *d);
/* Frames a gossip message (4-byte LE length, then the map) into a malloc'ed
 * buffer, without a MAC: members refuse it (use daemon_frame_mac). */
int daemon_frame(const gossip_msg *m, uint8_t **out, size_t *len, char *err, size_t errlen);
/* Frames a gossip message with its MAC: 4-byte LE length (map and MAC),
 * the map, GOSSIP_MAC_LEN bytes of gossip_mac under key (the pairwise key of
 * this node's and the peer's WireGuard keys, gossip_mac_key). */
int daemon_frame_mac(const gossip_msg *m, const uint8_t key[32], uint8_t **out, size_t *len,
                     char *err, size_t errlen);
/* A frame's payload (map and MAC, n bytes) checked under key and decoded. */
int daemon_unframe(const uint8_t *buf, size_t n, const uint8_t key[32], gossip_msg *out,
                   char *err, size_t errlen);
/* The MAC key for talking to the member at overlay address addr from the
 * node of state directory `state` (its wg.key, and the member's WireGuard
 * key from its mesh.json): what a FETCH client needs. */
int daemon_peer_key(const char *state, const char *addr, uint8_t key[32], char *err,
                    size_t errlen);
json_t *daemon_status_json(daemon_t *d);

/* pool.c: the job's share of this node */
int pool_open(daemon_t *d);
void pool_close(daemon_t *d);
/* Steps the pool core when its interval has passed: true when it did. */
bool pool_tick(daemon_t *d, int64_t now_ms);
/* A child ended (SIGCHLD): the core steps at the next daemon tick
 * (DAEMON_TICK_MS) rather than at its own (POOL_TICK_MS), so that a stage
 * that handed its layers over is answered at once. */
void pool_wake(daemon_t *d);
/* This member leaves the job (pool_core_depart): true when it holds a
 * stage of the running plan and must wait for pool_departed. */
bool pool_depart(daemon_t *d);
bool pool_departed(daemon_t *d);
/* `shardnode set --threads N` (0: all cores): this node computes with n
 * threads from now on; a running stage changes at its next step (at most
 * the threads it started with). {"threads", "stage", "stage_threads"}. */
json_t *pool_set_threads(daemon_t *d, int n);
/* resume: a pool checkpoint's folder the job starts from (its shards go
 * into the job's snapshots), or NULL. */
json_t *pool_submit(daemon_t *d, json_t *bundle, const char *resume);
json_t *pool_stop(daemon_t *d);
json_t *pool_status_json(daemon_t *d);
/* Fills the FETCH_REPLY r for request m; *data (free it after sending)
 * holds the bytes r->data points at. -1: out of memory. */
int pool_fetch(daemon_t *d, const gossip_msg *m, gossip_msg *r, uint8_t **data);

/* daemon_http.c: the dashboard (docs/FORMATS.md, "Dashboard and metrics") */
#define DASH_DEFAULT "127.0.0.1:7980"
/* dash_parse_spec: daemon.h (the commands check --http with it). */
/* Serves the dashboard on spec (NULL: DASH_DEFAULT; "off": nothing) in
 * d->base. A failure is logged and the node runs without it: always 0. */
int dash_open(daemon_t *d, const char *spec);
void dash_close(daemon_t *d);
/* Turns changes of members, job, plan and runs into the page's events. */
void dash_tick(daemon_t *d, int64_t now_ms);

/* daemon_join.c: the joiner's side, before the loop starts. */
/* A TCP connection to addr:port from the local address `from` (NULL: any),
 * within timeout_ms: a non-blocking socket, or -1 with err. */
int daemon_connect(const char *addr, int port, const char *from, int timeout_ms, char *err,
                   size_t errlen);
int daemon_join(daemon_t *d, const char *token_text, char *err, size_t errlen);

#endif

/* mesh.h — moving framed bytes between nodes: the wire codec (msgpack frames)
 * and the peer transport (libevent TCP). mesh/ knows no math: a tensor is a
 * dtype, a shape and bytes. docs/PROTOCOL.md is the reference for the wire.
 *
 * Functions that can fail return 0, or -1 with a message naming the peer or
 * the field at fault in err (at most errlen bytes, NUL-terminated).
 * mesh/ may include keys/, libevent, msgpack-c and the C library. */
#ifndef SHARDNODE_MESH_H
#define SHARDNODE_MESH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ============================ wire codec (wire.c) ======================= */

/* The data plane's version (this file's frames); 2 since COMMIT carries
 * flags. Gossip has its own, GOSSIP_PROTOCOL_VERSION. */
#define MESH_PROTOCOL_VERSION 2
#define MESH_MAX_DIMS 4
#define MESH_NAME_MAX 64     /* node names, with the NUL */
#define MESH_TEXT_MAX 256    /* run names, abort reasons, with the NUL */
/* Default bound on one frame's payload (after the 4-byte length prefix). */
#define MESH_DEFAULT_MAX_FRAME ((size_t)1 << 30)

typedef enum {
    MESH_MSG_HELLO = 1,       /* name = node, text = run name */
    MESH_MSG_ACTIVATIONS = 2, /* tensor = stage output; labels; kept */
    MESH_MSG_GRADIENTS = 3,   /* tensor = gradient of the receiver's output */
    MESH_MSG_NORM = 4,        /* value = sum of squares; flags bit 0: total */
    MESH_MSG_TIED_GRAD = 5,   /* tensor = gradient of a weight two stages share */
    MESH_MSG_COMMIT = 6,      /* value = the step's loss; step committed; flags:
                               * MESH_COMMIT_STOP, MESH_COMMIT_DONE */
    MESH_MSG_ABORT = 7,       /* text = reason */
    MESH_MSG_PROBE = 8,       /* link echo: step = sequence number, flags bit 0
                               * (MESH_PROBE_REPLY): the answer; data = raw bytes
                               * (no dtype or shape), at most MESH_PROBE_MAX */
} mesh_msg_type;

#define MESH_PROBE_REPLY 1u
/* COMMIT flags: a stage wants the run to stop after this step; "done": the
 * sender's run ended after `step` steps (docs/PROTOCOL.md, "A step"). */
#define MESH_COMMIT_STOP 1u
#define MESH_COMMIT_DONE 2u
#define MESH_PROBE_MAX ((size_t)64 << 20)

typedef enum { MESH_F32 = 0, MESH_BF16 = 1, MESH_I32 = 2 } mesh_dtype;

/* One decoded or to-be-encoded message. Fields a type does not use are
 * zero. On decode, data and labels point into the frame (possibly
 * unaligned: read them with memcpy). */
typedef struct {
    mesh_msg_type type;
    uint32_t version;
    uint64_t run_id;          /* mesh_run_id(run name): frames of another run are refused */
    uint32_t epoch;           /* plan epoch */
    int64_t step;
    int32_t micro;            /* micro-batch index */
    int32_t stage;            /* sender's stage */
    int64_t kept;             /* activations: kept targets of the whole batch */
    double value;             /* norm: sum of squares; commit: loss */
    uint32_t flags;
    char name[MESH_NAME_MAX];
    char text[MESH_TEXT_MAX];
    mesh_dtype dtype;         /* of the tensor */
    int ndim;
    int64_t shape[MESH_MAX_DIMS];
    const void *data;         /* tensor bytes: numel(shape) * dtype size */
    size_t nbytes;
    const void *labels;       /* activations: int32 labels, nlabels of them */
    size_t nlabels;
} mesh_msg;

uint64_t mesh_run_id(const char *run);
size_t mesh_dtype_size(mesh_dtype d);

/* Encodes everything of the frame except the tensor bytes: the 4-byte
 * little-endian payload length, the msgpack map, and the header of the
 * final bin that holds the tensor. The frame on the wire is
 * head[0..head_len) followed by m->data[0..m->nbytes), so tensors leave
 * without a copy. *head is malloc'ed. Checks the message is consistent
 * (nbytes equals the shape's element count times the dtype size, ...).
 * m->version is not read: the encoder always writes MESH_PROTOCOL_VERSION. */
int mesh_encode_head(const mesh_msg *m, uint8_t **head, size_t *head_len, char *err,
                     size_t errlen);
/* Decodes one payload (the bytes after the length prefix). Bounded and
 * strict: known types and keys only, version, dims <= MESH_MAX_DIMS, exact
 * byte counts, strings within their limits, nothing after the map. Never
 * reads outside payload[0..len). A frame of another version is refused as
 * such before anything else is judged. On failure *out is all zero. */
int mesh_decode(const void *payload, size_t len, mesh_msg *out, char *err, size_t errlen);
/* Reads a frame's 4-byte little-endian length prefix into *len, refusing 0
 * and anything over max_frame (0: MESH_DEFAULT_MAX_FRAME), so a receiver
 * never buffers more than it would accept. */
int mesh_decode_length(const uint8_t prefix[4], size_t max_frame, size_t *len, char *err,
                       size_t errlen);

/* ============================ transport (net.c) ========================= */

typedef struct mesh_net mesh_net;
typedef struct mesh_frame mesh_frame;

typedef struct {
    const char *self;          /* this node's name (sent in HELLO) */
    const char *run;           /* run name: HELLO text; run_id of every frame */
    const char *listen_host;   /* NULL: do not listen */
    int listen_port;           /* 0 with a host: any free port (mesh_net_port) */
    int timeout_ms;            /* connect give-up and dead-peer timeout; 0: 30 s */
    size_t max_frame;          /* 0: MESH_DEFAULT_MAX_FRAME */
    size_t send_high_water;    /* bytes queued per peer before send blocks; 0: 64 MiB.
                                * Also the bound on received bytes waiting for
                                * mesh_net_recv: above it, peers are not read. */
    const char *bind_host;     /* source address of outgoing connections (NULL: the
                                * kernel's choice; one that is not local here is
                                * ignored), so peers that check it see this node's */
    bool defer_accept;         /* connections wait in the listen queue until
                                * mesh_net_accept: a HELLO that comes before the peers
                                * are declared is not refused as undeclared */
} mesh_net_config;

/* Bytes of a frame's payload besides its tensor and labels: an upper bound
 * on the msgpack map of any message with its longest strings and widest
 * integers (test_wire checks it). */
#define MESH_HEAD_MAX 768

/* What a declared peer may do besides connecting under its name. */
typedef struct {
    const char *from;          /* incoming: its connections must come from an address
                                * of this host (numeric or resolved here); one from
                                * elsewhere is logged and dropped and the peer is
                                * still awaited. NULL or a wildcard: any address */
    size_t max_frame;          /* the largest frame it may send after HELLO (0: the
                                * net's max_frame); a larger one closes its connection */
    const uint8_t *hello_key;  /* MESH_HELLO_KEY_LEN bytes both ends share (NULL: none):
                                * HELLOs both ways carry an HMAC-SHA256 under it of
                                * sender, receiver and run, and a HELLO without the
                                * right one is dropped (the peer still awaited) */
} mesh_net_peer_opts;
#define MESH_HELLO_KEY_LEN 32
#define MESH_HELLO_MAC_HEX 32      /* hex digits of the MAC after " #" in HELLO's text */

/* Starts the event loop on its own thread (and the listener). */
int mesh_net_start(mesh_net **out, const mesh_net_config *cfg, char *err, size_t errlen);
/* Closes every connection and joins the loop thread. NULL is fine. */
void mesh_net_stop(mesh_net *n);
int mesh_net_port(const mesh_net *n);
/* With defer_accept: connections are taken from now on (call it once every
 * peer is declared). */
void mesh_net_accept(mesh_net *n);

/* Declares a peer this node talks to. With a host, this node connects to
 * it (retrying with backoff until timeout_ms); without (NULL), the peer
 * connects here and is recognised by the name in its HELLO. Connections
 * from names that were not declared, frames that do not decode, frames
 * over max_frame, another protocol version or another run are logged to
 * stderr with the remote address and dropped; the node stays up. Returns
 * the peer's index (0, 1, ...) or -1. */
int mesh_net_add_peer(mesh_net *n, const char *name, const char *host, int port, char *err,
                      size_t errlen);
/* The same with what the peer may do (opts NULL: as mesh_net_add_peer). */
int mesh_net_add_peer_opts(mesh_net *n, const char *name, const char *host, int port,
                           const mesh_net_peer_opts *opts, char *err, size_t errlen);
/* Waits until every declared peer has exchanged HELLO, or fails after
 * timeout_ms naming the peers still missing (at once if one is gone).
 * Here and below, a timeout_ms of 0 does not wait and < 0 waits without
 * limit. */
int mesh_net_wait_connected(mesh_net *n, int timeout_ms, char *err, size_t errlen);

/* Queues a message to a peer: the head is copied, the tensor bytes are
 * referenced, not copied, so m->data must stay unchanged until
 * mesh_net_flush(n, peer) returns. Blocks (without spinning) while more than
 * send_high_water bytes are queued for that peer; fails if the peer takes
 * no byte for the config's timeout_ms meanwhile. Fails if the peer is gone.
 * A run_id of 0 is sent as this run's. A peer not connected yet gets its
 * messages once it is. */
int mesh_net_send(mesh_net *n, int peer, const mesh_msg *m, char *err, size_t errlen);
/* Waits until everything queued for the peer has been handed to the kernel
 * and no tensor of it is referenced any more. Fails if the peer went away
 * with bytes of it unsent (its tensors are released first) or on timeout
 * (they may then stay referenced until the peer is gone or mesh_net_stop
 * returns). */
int mesh_net_flush(mesh_net *n, int peer, int timeout_ms, char *err, size_t errlen);

/* The next message from any peer, in arrival order, waiting up to
 * timeout_ms (without spinning). Fails naming the peer (and setting *peer)
 * when a declared peer's connection closed or broke: reported once, after
 * the messages that peer sent before. Fails naming what is awaited on
 * timeout. msg's pointers live until mesh_frame_free(*frame). */
int mesh_net_recv(mesh_net *n, int *peer, mesh_msg *msg, mesh_frame **frame, int timeout_ms,
                  char *err, size_t errlen);
void mesh_frame_free(mesh_frame *f);
/* Link measurement over the same connection the pipeline uses: for each
 * size and round, sends a PROBE of sizes[i] bytes (at most MESH_PROBE_MAX;
 * 0 is fine) and waits for its echo, filling rtt_ns[i * rounds + round]
 * with the round trip (> 0). The peer's loop thread answers by itself, so
 * the peer's compute thread takes no part; an echo carries the payload both
 * ways (what scheduler's cost_link_estimate expects). Other messages that
 * arrive meanwhile stay in the receive queue, in order, for mesh_net_recv.
 * One probe at a time per peer (the peer closes a connection that sends a
 * probe before taking the last one's reply); each round trip waits up to
 * the config's timeout_ms, and does not finish while the receive queue is
 * full. Fails naming the peer when it is gone, when it does not answer in
 * time or answers with other bytes. A late reply to a probe that gave up
 * reaches mesh_net_recv as a PROBE with the reply bit (ignore it). */
int mesh_net_probe(mesh_net *n, int peer, const size_t *sizes, int nsizes, int rounds,
                   int64_t *rtt_ns, char *err, size_t errlen);
/* The name of a declared peer. */
const char *mesh_net_peer_name(const mesh_net *n, int peer);

/* BEGIN wireguard section */
/* ====================== WireGuard control (wg*.c) ======================= */
/* Two drivers behind one handle: the kernel module through netlink
 * (wireguard-tools' embeddable library, when it was found at build time) and
 * wireguard-go, started as a child and configured through its UAPI socket
 * /var/run/wireguard/IFNAME.sock. That path is global across network
 * namespaces, so every node needs its own interface name. Needs root. */

#define MESH_WG_KEY_LEN 32
#define MESH_WG_IFNAME_MAX 16   /* 15 characters and the NUL */
/* Works over a 1400-byte underlay (1420 does not): path MTU - 80 also
 * covers IPv6 underlays. */
#define MESH_WG_DEFAULT_MTU 1320
#define MESH_WG_ENDPOINT_MAX 64 /* "[v6]:port" with the NUL */

typedef enum { MESH_WG_AUTO = 0, MESH_WG_KERNEL = 1, MESH_WG_USERSPACE = 2 } mesh_wg_driver;

typedef struct mesh_wg mesh_wg;

typedef struct {
    const char *ifname;            /* 1..15 characters, unique per node */
    mesh_wg_driver driver;         /* AUTO: the kernel module if it answers */
    uint8_t private_key[MESH_WG_KEY_LEN];
    int listen_port;               /* 0: any */
    int mtu;                       /* 0: MESH_WG_DEFAULT_MTU */
    const char *address;           /* overlay address without prefix; NULL: none */
    int prefix_len;                /* of address (the mesh prefix's length) */
    const char *wireguard_go;      /* NULL: "wireguard-go" from PATH */
    int start_timeout_ms;          /* wait for the UAPI socket; 0: 5000 */
} mesh_wg_config;

typedef struct {
    uint8_t public_key[MESH_WG_KEY_LEN];
    char endpoint[MESH_WG_ENDPOINT_MAX]; /* as last seen ("" when unknown) */
    int64_t last_handshake_sec;          /* Unix time; 0: never */
    int64_t last_handshake_nsec;
    uint64_t rx_bytes, tx_bytes;
    int keepalive;                       /* seconds; 0: off */
} mesh_wg_peer_info;

/* Creates the interface, sets key and port, then MTU, address and up (ip(8)
 * as a child, no shell). On failure nothing is left behind. */
int mesh_wg_open(mesh_wg **out, const mesh_wg_config *cfg, char *err, size_t errlen);
/* Adds or updates a peer: endpoint "IP:port" or "[IPv6]:port" (NULL: keep
 * or learn it from the peer's handshake), allowed IPs as CIDR strings
 * (replacing the previous ones), keepalive seconds (0: off; set it for
 * nodes behind NAT). */
int mesh_wg_set_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], const char *endpoint,
                     const char *const *allowed_ips, size_t n_allowed, int keepalive_s,
                     char *err, size_t errlen);
int mesh_wg_remove_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], char *err,
                        size_t errlen);
/* *peers is malloc'ed (free() it; NULL when there are none). */
int mesh_wg_get_peers(mesh_wg *wg, mesh_wg_peer_info **peers, size_t *npeers, char *err,
                      size_t errlen);
mesh_wg_driver mesh_wg_driver_in_use(const mesh_wg *wg);
const char *mesh_wg_ifname(const mesh_wg *wg);
/* Userspace: SIGTERMs wireguard-go and waits (it removes socket and
 * interface); kernel: deletes the interface. NULL is fine. */
void mesh_wg_close(mesh_wg *wg);

/* The overlay address of a public key inside a mesh prefix ("10.77.0.0/16",
 * "fd5a::/64"): prefix bits kept, host bits from a hash of the key, never
 * the IPv4 network or broadcast address nor an all-zero IPv6 host part.
 * Writes the address without the length into out (46 bytes suffice).
 * Two keys may give one address: gossip refuses a JOIN whose address is
 * taken (GOSSIP_ADDRESS_TAKEN: the joiner draws a new key) and gives a
 * collision made anyway to the older admission (docs/PROTOCOL.md,
 * "Membership"). */
int mesh_overlay_address(const char *prefix, const uint8_t pub[MESH_WG_KEY_LEN], char *out,
                         size_t outlen, char *err, size_t errlen);

/* The UAPI reply parser, without a socket (for tests). reply[0..len) must
 * be one whole reply: key=value lines, the last "errno=N", then an empty
 * line. With peers NULL only "errno" is accepted (a set reply). Returns 0
 * with *uapi_errno set when well formed (the request may still have
 * failed: *uapi_errno != 0), -1 naming ifname when malformed. */
int mesh_wg_uapi_parse(const char *reply, size_t len, const char *ifname, int *uapi_errno,
                       mesh_wg_peer_info **peers, size_t *npeers, char *err, size_t errlen);
/* END wireguard section */

/* BEGIN gossip codec section */
/* ====================== gossip codec (gossip_wire.c) ===================== */
/* Membership gossip (SWIM) travels inside the overlay: UDP datagrams for
 * probes and piggybacked updates, TCP for full-state sync and for joining.
 * A message is one msgpack map; over TCP it is framed like the data plane
 * (a 4-byte little-endian length, then the map). docs/PROTOCOL.md,
 * "Gossip", is the reference. */

/* The gossip messages' `v` (docs/PROTOCOL.md, "Gossip"), apart from the data
 * plane's MESH_PROTOCOL_VERSION since that moved to 2. 2 since hole punching
 * (the PUNCH message and the record's "nat"). */
#define GOSSIP_PROTOCOL_VERSION 2
#define GOSSIP_DEFAULT_PORT 7946      /* UDP and TCP, on the overlay address only */
#define GOSSIP_UDP_MAX 1200           /* one datagram fits an overlay packet at MTU 1320 */
#define GOSSIP_TCP_MAX ((size_t)8u << 20) /* one TCP frame's payload (8 MiB) */
#define GOSSIP_MESH_ID_LEN 16
#define GOSSIP_ADDR_MAX 48            /* an overlay address, IPv4 or IPv6, with the NUL */
#define GOSSIP_MAX_ENDPOINTS 4
#define GOSSIP_SOFTWARE_MAX 32
#define GOSSIP_DEVICES_MAX 1024       /* the devices record: JSON text, with the NUL */
#define GOSSIP_JOB_MAX 8192           /* the job text: opaque (node/ puts JSON), with the NUL */
#define GOSSIP_RECORD_MAX 12288       /* an encoded record's bytes */
#define GOSSIP_MAX_UPDATES 512        /* updates in one message (a sync carries all) */
#define GOSSIP_SIG_LEN 64
#define GOSSIP_KEY_LEN 32
#define GOSSIP_SECRET_LEN 16
#define GOSSIP_PATH_MAX 256           /* FETCH: a file's path, with the NUL */
#define GOSSIP_FETCH_CHUNK (1u << 20) /* FETCH_REPLY: the most data bytes in one reply */

typedef enum {
    GOSSIP_ALIVE = 0,
    GOSSIP_SUSPECT = 1,
    GOSSIP_DEAD = 2,
    GOSSIP_LEFT = 3,
} gossip_state;

/* What a node says about itself. Signed by its identity key; others relay
 * it byte for byte and refuse it when the signature does not verify. */
typedef struct {
    uint8_t mesh_id[GOSSIP_MESH_ID_LEN];
    char name[MESH_NAME_MAX];
    uint8_t wg_pub[GOSSIP_KEY_LEN];     /* X25519: WireGuard */
    uint8_t id_pub[GOSSIP_KEY_LEN];     /* Ed25519: the key that signs this record */
    char address[GOSSIP_ADDR_MAX];      /* overlay address (derived from wg_pub) */
    uint16_t port;                      /* gossip port on the overlay address */
    uint64_t incarnation;               /* raised by the owner to refute suspicion */
    uint8_t left;                       /* 1: the owner left the mesh for good */
    int nendpoints;                     /* 0..GOSSIP_MAX_ENDPOINTS */
    char endpoints[GOSSIP_MAX_ENDPOINTS][MESH_WG_ENDPOINT_MAX]; /* configured first, then
                                                                  * as observed by peers */
    char software[GOSSIP_SOFTWARE_MAX]; /* "shardnode 0.1.0" */
    uint32_t protocol;                  /* the data plane's MESH_PROTOCOL_VERSION the
                                         * owner speaks */
    uint64_t mem_free;                  /* bytes */
    char devices[GOSSIP_DEVICES_MAX];   /* JSON text of the devices record ("" none) */
    int64_t signed_ms;                  /* Unix time in ms when the owner signed it */
    uint8_t nat;                        /* 1: the owner configured no endpoint (behind NAT):
                                         * every endpoint was observed by peers, so it is
                                         * reached only after it sent first */
    char job[GOSSIP_JOB_MAX];           /* opaque text ("" none): node/ puts the member's
                                         * view of the training job there (compact JSON);
                                         * on the wire only when not empty */
} gossip_record;

/* How a member got in: the member that admitted it (JOIN with a valid
 * invite) signed, with its identity key, the statement "in mesh M, identity
 * I with WireGuard key W is admitted under name N at time T". The founder
 * admits itself, and is recognised because the mesh id is derived from its
 * identity key (keys_mesh_id). Every receiver checks it against the
 * identity key of a member it knows (docs/PROTOCOL.md, "Membership"). All
 * zero: none (a JOIN's record, before it is admitted). */
typedef struct {
    uint8_t by[GOSSIP_KEY_LEN];   /* the admitting member's identity key */
    int64_t at_ms;                /* its clock when it admitted (Unix ms) */
    uint8_t sig[GOSSIP_SIG_LEN];  /* by's Ed25519 signature of the statement */
} gossip_admission;

#define GOSSIP_ADM_LEN (GOSSIP_KEY_LEN + 8 + GOSSIP_SIG_LEN) /* "a" on the wire: 104 bytes */
#define GOSSIP_MAC_LEN 16          /* the MAC after every datagram and TCP frame's map */
/* A dead member's name stays its own this long (then a newcomer may take it);
 * a member that left frees it at once. */
#define GOSSIP_NAME_HOLD_MS ((int64_t)24 * 3600 * 1000)
/* An admission may not be dated more than this before its admitter's own
 * (clocks differ a little; the older admission wins collisions). */
#define GOSSIP_ADMISSION_SKEW_MS ((int64_t)10 * 60 * 1000)

/* A record as it travels: its encoded bytes (a msgpack map), the owner's
 * Ed25519 signature over exactly those bytes, and the admission that lets
 * the owner in (bound to the record's mesh, identity, WireGuard key and
 * name, so it stays valid across the owner's later records). */
typedef struct {
    uint8_t bytes[GOSSIP_RECORD_MAX];
    size_t len;
    uint8_t sig[GOSSIP_SIG_LEN];
    gossip_admission adm;
} gossip_signed;

/* Signs the admission of r (its mesh_id, id_pub, wg_pub and name) at at_ms
 * with the admitting member's identity key. */
int gossip_admission_sign(const gossip_record *r, const uint8_t admitter_priv[GOSSIP_KEY_LEN],
                          int64_t at_ms, gossip_admission *out, char *err, size_t errlen);
/* 1 when a->sig is a->by's signature of r's admission statement (who a->by
 * is, is for the caller to judge), else 0. */
int gossip_admission_verify(const gossip_record *r, const gossip_admission *a);
/* 1 when a is the founder's self-admission: signed by r's own identity, and
 * r's mesh id is keys_mesh_id of that identity. */
int gossip_admission_founder(const gossip_record *r, const gossip_admission *a);
/* The pairwise MAC key of two WireGuard key pairs: HMAC-SHA256 under
 * X25519(own_priv, peer_pub) of a label and both public keys (in byte
 * order), so both sides compute the same 32 bytes and nobody without one of
 * the private keys can. */
int gossip_mac_key(const uint8_t own_priv[GOSSIP_KEY_LEN], const uint8_t peer_pub[GOSSIP_KEY_LEN],
                   uint8_t key[32], char *err, size_t errlen);
/* The first GOSSIP_MAC_LEN bytes of HMAC-SHA256(key, buf[0..len)). */
void gossip_mac(const uint8_t key[32], const void *buf, size_t len, uint8_t mac[GOSSIP_MAC_LEN]);
/* 1 when buf[0..len) ends with its MAC under key (constant time), else 0. */
int gossip_mac_check(const uint8_t key[32], const void *buf, size_t len);

/* Encodes r and signs the bytes with id_priv (whose public key must be
 * r->id_pub). Refuses a record the decoder would refuse. */
int gossip_record_sign(const gossip_record *r, const uint8_t id_priv[GOSSIP_KEY_LEN],
                       gossip_signed *out, char *err, size_t errlen);
/* Decodes s->bytes strictly into *r and verifies s->sig with r->id_pub.
 * Refuses (naming the record's name when it got that far) a malformed
 * record and one whose signature does not verify. */
int gossip_record_open(const gossip_signed *s, gossip_record *r, char *err, size_t errlen);

typedef enum {
    GOSSIP_MSG_PING = 1,       /* seq; updates piggybacked */
    GOSSIP_MSG_ACK = 2,        /* seq; observed; updates */
    GOSSIP_MSG_PING_REQ = 3,   /* seq; target, target_port: probe it for me */
    GOSSIP_MSG_SYNC = 4,       /* TCP: every record and state the sender knows;
                                * the receiver answers with its own SYNC (flags bit 0) */
    GOSSIP_MSG_JOIN = 5,       /* TCP: secret; updates[0] = the joiner's ALIVE record */
    GOSSIP_MSG_JOIN_REPLY = 6, /* TCP: ok, reason; updates = the whole view when ok */
    GOSSIP_MSG_UPDATE = 7,     /* UDP: updates only (a state change sent to everyone) */
    GOSSIP_MSG_FETCH = 8,      /* TCP: path, offset: send me this part of a file */
    GOSSIP_MSG_FETCH_REPLY = 9, /* TCP: ok; when ok offset, total (the file's size) and
                                 * data (0..GOSSIP_FETCH_CHUNK bytes, offset + data_len
                                 * <= total); when not ok reason */
    GOSSIP_MSG_PUNCH = 10,     /* UDP: punch_from asks punch_to to send WireGuard
                                * handshakes to its endpoints now; sent to a relay
                                * member, which passes it on unchanged */
    GOSSIP_MSG_RELAY = 11,     /* UDP: punch_from asks relay_via to forward its WireGuard
                                * datagrams to and from punch_to (relay_ports 0); the
                                * relay answers both with the ports it opened */
} gossip_msg_type;

#define GOSSIP_PUNCH_MAC_LEN 16

#define GOSSIP_SYNC_REPLY 1u

/* One state claim. ALIVE and LEFT carry the owner's signed record (its
 * incarnation and left flag inside); SUSPECT and DEAD name a member by its
 * WireGuard key and incarnation and are claimed by `from`. */
typedef struct {
    gossip_state state;
    gossip_signed rec;                  /* ALIVE, LEFT */
    uint8_t wg_pub[GOSSIP_KEY_LEN];     /* SUSPECT, DEAD */
    uint64_t incarnation;               /* SUSPECT, DEAD */
    char from[MESH_NAME_MAX];           /* SUSPECT, DEAD: who claims it */
} gossip_update;

typedef struct {
    gossip_msg_type type;
    uint32_t version;                   /* GOSSIP_PROTOCOL_VERSION */
    uint8_t mesh_id[GOSSIP_MESH_ID_LEN];
    char from[MESH_NAME_MAX];           /* the sender's name */
    uint32_t seq;                       /* PING, ACK, PING_REQ */
    uint32_t flags;                     /* SYNC: GOSSIP_SYNC_REPLY */
    char target[GOSSIP_ADDR_MAX];       /* PING_REQ: overlay address to probe */
    uint16_t target_port;               /* PING_REQ */
    char observed[MESH_WG_ENDPOINT_MAX]; /* ACK: the receiver's WireGuard endpoint as
                                           * the sender sees it ("" unknown) */
    uint8_t secret[GOSSIP_SECRET_LEN];  /* JOIN: the invite token's secret */
    uint8_t ok;                         /* JOIN_REPLY, FETCH_REPLY */
    char reason[MESH_TEXT_MAX];         /* JOIN_REPLY, FETCH_REPLY when refused */
    int nupdates;                       /* 0..GOSSIP_MAX_UPDATES */
    gossip_update *updates;             /* malloc'ed by the decoder; the encoder reads it */
    char path[GOSSIP_PATH_MAX];         /* FETCH: 1..255 bytes of printable ASCII */
    uint64_t offset;                    /* FETCH: where to start; FETCH_REPLY (ok): where
                                         * data starts */
    uint64_t total;                     /* FETCH_REPLY (ok): the file's size in bytes */
    uint8_t *data;                      /* FETCH_REPLY (ok): data_len bytes of the file
                                         * (NULL when 0); malloc'ed by the decoder, the
                                         * encoder reads it */
    size_t data_len;                    /* 0..GOSSIP_FETCH_CHUNK */
    uint8_t punch_from[GOSSIP_KEY_LEN]; /* PUNCH: the requester's WireGuard key */
    uint8_t punch_to[GOSSIP_KEY_LEN];   /* PUNCH: the target's WireGuard key */
    uint64_t punch_n;                   /* PUNCH: the requester's request number (rises) */
    uint8_t punch_mac[GOSSIP_PUNCH_MAC_LEN]; /* PUNCH: MAC under the requester-target
                                              * pair key (gossip_punch_mac); RELAY: the
                                              * same pair's (gossip_relay_mac) */
    uint8_t relay_via[GOSSIP_KEY_LEN];  /* RELAY: the relay's WireGuard key */
    uint32_t relay_ports;               /* RELAY: 0 (a request), or the relay's UDP port
                                         * for punch_from << 16 | its port for punch_to */
} gossip_msg;

/* Encodes m (without a length prefix) into buf[0..cap); *len gets the size.
 * Fails with "does not fit in N bytes" when cap is too small (the caller
 * then sends fewer updates), and for a message the decoder would refuse. */
int gossip_encode(const gossip_msg *m, uint8_t *buf, size_t cap, size_t *len, char *err,
                  size_t errlen);
/* Decodes one message strictly (known keys per type, exact lengths, bounds,
 * nothing after the map; records inside are only copied, not opened: call
 * gossip_record_open on each). Never reads outside buf[0..len). On success
 * out->updates is malloc'ed (free with gossip_msg_free); on failure *out is
 * all zero. */
int gossip_decode(const void *buf, size_t len, gossip_msg *out, char *err, size_t errlen);
/* Frees what gossip_decode allocated (updates, data) and zeroes those
 * fields. NULL is fine. */
void gossip_msg_free(gossip_msg *m);
/* END gossip codec section */

/* ================= membership: the SWIM state machine (gossip.c) ========= */
/* Pure logic driven by the caller's clock (now_ms: monotonic, for timers;
 * the wall_ms hook: real time, for what is signed): the daemon hands it
 * datagrams and ticks, and it answers through hooks (send a datagram, sync over TCP, a
 * member changed). No sockets and no threads here, so a test can run many
 * nodes in one process. Rules and defaults: docs/PROTOCOL.md, "Gossip". */

typedef struct {
    int probe_interval_ms;  /* 1000: one member probed per interval */
    int probe_timeout_ms;   /* 500: then PING_REQ through indirect_k others */
    int indirect_k;         /* 3 */
    int suspicion_min_ms;   /* 2500: suspect -> dead with K confirmations */
    int suspicion_max_ms;   /* 5000: ... with none (Lifeguard) */
    int sync_interval_ms;   /* 15000: full push-pull with one member */
    int retransmit_mult;    /* 4: an update rides mult * ceil(log10(n + 1)) messages */
} gossip_timing;

/* The defaults above (a crashed node is dead everywhere in < 10 s on a LAN). */
void gossip_timing_default(gossip_timing *t);

typedef struct {
    gossip_record rec;      /* the owner's latest record */
    gossip_signed sig;      /* ... as signed, for relaying */
    gossip_state state;
    uint64_t state_inc;     /* incarnation the state refers to */
    int64_t state_ms;       /* when this node adopted the state (these four: the
                             * caller's monotonic now_ms) */
    int64_t heard_ms;       /* last message received from it directly (0: never) */
    int64_t acked_ms;       /* last direct ACK to one of our PINGs (0: never) */
    int64_t suspect_ms;     /* SUSPECT: when the suspicion started */
    int64_t rtt_ms;         /* round trip of the last direct PING -> ACK (-1: none yet) */
    uint64_t punch_seen;    /* the last PUNCH number accepted from it (replays refused) */
    int64_t punch_relay_ms; /* window start, and PUNCHes relayed for it in the window */
    int punch_relayed;
    uint64_t relay_seen;    /* the last RELAY number accepted in its name */
    int64_t relay_ms;       /* window start, and RELAY requests answered for it in it */
    int relay_asked;
    int confirmations;      /* SUSPECT: independent others that suspect it too */
    char suspectors[4][MESH_NAME_MAX];
    bool self;
    bool displaced;         /* lost its overlay address to an older admission: out of
                             * the view (never probed, synced or found by address) */
    uint8_t mac_key[32];    /* gossip_mac_key with this node's WireGuard key */
} gossip_member;

typedef struct gossip gossip;

typedef struct {
    void *ctx;
    /* A datagram to addr:port on the overlay. */
    void (*send)(void *ctx, const char *addr, int port, const uint8_t *buf, size_t len);
    /* Please push-pull the whole state with this member over TCP
     * (gossip_sync_message out, gossip_merge what comes back). */
    void (*sync)(void *ctx, const gossip_member *m);
    /* m was added (before == -1) or its state or record changed. */
    void (*changed)(void *ctx, const gossip_member *m, int before);
    /* Where this node sees the member at addr (its WireGuard endpoint), for
     * the ACK's "observed" field; writes "" when unknown. May be NULL. */
    void (*observe)(void *ctx, const char *addr, char *out, size_t outlen);
    /* One line for the log (no newline). May be NULL. */
    void (*log)(void *ctx, const char *line);
    /* A PUNCH from member m for this node passed every check
     * (docs/PROTOCOL.md, "Hole punching"): send it handshakes now. May be NULL. */
    void (*punch)(void *ctx, const gossip_member *m);
    /* RELAY (docs/PROTOCOL.md, "Relays"), each after every check. May be NULL
     * (this node then neither relays nor takes offers).
     * relay_open: `a` asks this node to relay between it and `b`; fill the
     * UDP ports opened for each side and return 0, or -1 to refuse (this
     * node does not relay: --no-relay, behind NAT, out of sockets).
     * relay_offer: `via` relays between this node and `peer` (peer asked it,
     * under the pair's MAC): this node's datagrams for peer go to via's
     * port `port`. `granted` says this node asked (via answered it), else
     * the peer did. */
    int (*relay_open)(void *ctx, const gossip_member *a, const gossip_member *b,
                      uint16_t *port_a, uint16_t *port_b);
    void (*relay_offer)(void *ctx, const gossip_member *peer, const gossip_member *via,
                        uint16_t port, bool granted);
    /* Unix time in ms, for the timestamps this node signs (its record's
     * signed_ms, the at_ms of the admissions it signs). Every now_ms below
     * is a monotonic clock that drives the timers only, so a wall clock
     * set back or forward neither fires a timer early nor holds one back.
     * NULL: now_ms serves as both (tests on one simulated clock). */
    int64_t (*wall_ms)(void *ctx);
} gossip_hooks;

typedef struct {
    const char *prefix;                 /* the mesh prefix: records are refused unless
                                         * their address derives from their key in it */
    gossip_record self;                 /* this node's record (incarnation: the start value) */
    gossip_admission self_adm;          /* this node's admission (all zero: the founder's,
                                         * made here when the mesh id derives from self's
                                         * identity key; refused otherwise) */
    uint8_t id_priv[GOSSIP_KEY_LEN];    /* signs self */
    uint8_t wg_priv[GOSSIP_KEY_LEN];    /* this node's WireGuard key: MACs (gossip_mac_key) */
    gossip_timing timing;               /* zero fields take the defaults */
    gossip_hooks hooks;
    uint64_t seed;                      /* probe order and indirect choices */
} gossip_config;

int gossip_create(gossip **out, const gossip_config *cfg, int64_t now_ms, char *err,
                  size_t errlen);
void gossip_destroy(gossip *g);
/* Adds a member known from before (the state dir's saved view) as ALIVE
 * without announcing it: it is probed like any other, and declared dead if
 * it does not answer. Refuses what gossip_merge would refuse. */
int gossip_add_known(gossip *g, const gossip_signed *s, int64_t now_ms, char *err,
                     size_t errlen);
/* Admits a joiner's record (JOIN, whose invite the caller has checked):
 * counter-signs its admission with this node's identity key and announces
 * it to every member; err says why when refused (bad signature, name held by
 * another identity, an overlay address already in the view: then err starts
 * with GOSSIP_ADDRESS_TAKEN and the joiner draws a new WireGuard key). */
int gossip_admit(gossip *g, const gossip_signed *s, int64_t now_ms, char *err, size_t errlen);
#define GOSSIP_ADDRESS_TAKEN "address taken:"
/* What gossip_admit would refuse, without admitting (so a JOIN can be
 * refused before its invite is spent). */
int gossip_admit_check(gossip *g, const gossip_signed *s, int64_t now_ms, char *err,
                       size_t errlen);
/* TCP frames: the MAC to append to the frame's map for the member at addr
 * (0), or -1 when addr is no member's. */
int gossip_frame_seal(gossip *g, const char *addr, const void *buf, size_t len,
                      uint8_t mac[GOSSIP_MAC_LEN]);
/* A frame (map then MAC) that came from addr: the member whose key MACed
 * it, or NULL (logged, rate-limited, and counted) when addr is no member's or
 * the MAC does not verify. */
const gossip_member *gossip_frame_open(gossip *g, const char *addr, const void *buf, size_t len,
                                       int64_t now_ms);
/* Datagrams and frames dropped because they were not authenticated. */
uint64_t gossip_auth_drops(const gossip *g);
/* Timers: probes, indirect probes, suspicion timeouts, periodic sync. Call
 * it at least every 100 ms. */
void gossip_tick(gossip *g, int64_t now_ms);
/* A datagram from addr:port: the message's map, then its MAC under the key
 * shared with the member at addr (the send hook's datagrams end the same
 * way). Datagrams from an address that is not a member's, whose MAC does not
 * verify, or whose "from" is not that member are dropped (counted, logged at
 * most once a second), as are malformed ones. */
void gossip_receive(gossip *g, const char *addr, int port, const void *buf, size_t len,
                    int64_t now_ms);
/* Applies every update of a SYNC or JOIN_REPLY (or a JOIN's record) that
 * came over TCP. Returns the number of updates refused (each logged). */
int gossip_merge(gossip *g, const gossip_msg *m, int64_t now_ms);
/* Fills *m with a SYNC (or, with reply, a SYNC reply) carrying every
 * member's state; free with gossip_msg_free. Members are added in view
 * order (this node first) while the message stays within
 * GOSSIP_MAX_UPDATES updates and GOSSIP_TCP_MAX bytes; the ones left out
 * are logged (the next push-pull with another member carries them). */
int gossip_sync_message(gossip *g, gossip_msg *m, bool reply, char *err, size_t errlen);
/* Asks the member whose WireGuard key is `to` to punch towards this node now:
 * a PUNCH, MACed for `to`, sent to the member `via` (a relay both reach; `to`
 * itself is allowed). -1 with err when either is no live member. */
int gossip_punch_send(gossip *g, const uint8_t to[GOSSIP_KEY_LEN],
                      const uint8_t via[GOSSIP_KEY_LEN], int64_t now_ms, char *err,
                      size_t errlen);
/* The PUNCH's inner MAC: the first 16 bytes of HMAC-SHA256 under the pair key
 * of requester and target (gossip_mac_key) of "shardnode punch v1", the mesh
 * id, both keys and the number (8 bytes, big-endian). */
void gossip_punch_mac(const uint8_t key[32], const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                      const uint8_t from[GOSSIP_KEY_LEN], const uint8_t to[GOSSIP_KEY_LEN],
                      uint64_t n, uint8_t mac[GOSSIP_PUNCH_MAC_LEN]);
/* PUNCHes refused (each refusal is logged at most once a second). */
uint64_t gossip_punch_refusals(const gossip *g);
/* Asks the member `via` to relay between this node and the member `peer`: a
 * RELAY request carrying a MAC for `peer` (so via can pass on only what this
 * node asked). -1 with err when either is no live member. */
int gossip_relay_send(gossip *g, const uint8_t peer[GOSSIP_KEY_LEN],
                      const uint8_t via[GOSSIP_KEY_LEN], int64_t now_ms, char *err,
                      size_t errlen);
/* The RELAY's inner MAC: as gossip_punch_mac, of "shardnode relay v1", the
 * mesh id, requester, peer and relay keys and the number. */
void gossip_relay_mac(const uint8_t key[32], const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                      const uint8_t from[GOSSIP_KEY_LEN], const uint8_t to[GOSSIP_KEY_LEN],
                      const uint8_t via[GOSSIP_KEY_LEN], uint64_t n,
                      uint8_t mac[GOSSIP_PUNCH_MAC_LEN]);
/* RELAY messages refused. */
uint64_t gossip_relay_refusals(const gossip *g);
/* Adds an endpoint others observed for this node (NAT): re-signs the record
 * with a higher incarnation when it is new. */
void gossip_add_observed(gossip *g, const char *endpoint, int64_t now_ms);
/* Sets this node's job text (NULL: ""). The same text as now: returns 0 and
 * does nothing. Longer than GOSSIP_JOB_MAX - 1 bytes, or after
 * gossip_leave: -1 with err, nothing changed. Otherwise re-signs the record
 * with the next incarnation and announces it; a record that no longer fits
 * an UPDATE datagram is pushed to every alive and suspect member through
 * the sync hook (docs/PROTOCOL.md, "Gossip": records too big for a
 * datagram). */
int gossip_set_job(gossip *g, const char *job, int64_t now_ms, char *err, size_t errlen);
/* Signs this node's record as LEFT (with its job text cleared, so it fits
 * a datagram) and sends it to every member (call again to repeat the
 * datagrams). */
int gossip_leave(gossip *g, int64_t now_ms, char *err, size_t errlen);
/* The view, self included; pointers stay valid until the next call into g. */
size_t gossip_members(const gossip *g, const gossip_member *const **list);
const gossip_member *gossip_find_addr(const gossip *g, const char *addr);
const gossip_member *gossip_self(const gossip *g);
const char *gossip_state_name(gossip_state s);

/* Hole punching and relays (punch.c, relay.c): mesh_nat.h. */
#include "mesh_nat.h"

#endif

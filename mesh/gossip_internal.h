/* gossip_internal.h — private to gossip.c (the SWIM state machine) and
 * gossip_admit.c (who and what the view lets in): the state both work on
 * and the helpers one calls in the other. Not part of mesh.h. */
#ifndef SHARDNODE_MESH_GOSSIP_INTERNAL_H
#define SHARDNODE_MESH_GOSSIP_INTERNAL_H

#include "mesh.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The view's bound (a SYNC carries at most GOSSIP_MAX_UPDATES of it). */
#define GOSSIP_MAX_MEMBERS 1024
#define GOSSIP_MAX_FORWARDS 64
#define GOSSIP_MAX_PIGGYBACK 8

typedef struct {
    gossip_update u;
    uint8_t key[GOSSIP_KEY_LEN]; /* whose state: one queued update per member */
    int sent;                    /* times piggybacked */
} gossip_queued;

typedef struct {
    uint32_t seq;          /* the PING we sent to the target */
    uint32_t orig_seq;     /* the requester's PING_REQ seq */
    char addr[GOSSIP_ADDR_MAX];
    int port;
    int64_t expires_ms;
} gossip_forward;

struct gossip {
    char prefix[64];
    gossip_timing t;
    gossip_hooks h;
    uint8_t id_priv[GOSSIP_KEY_LEN];
    uint8_t wg_priv[GOSSIP_KEY_LEN];
    uint64_t auth_drops;       /* unauthenticated datagrams and frames */
    int64_t auth_log_ms;       /* when the last of them was logged */
    uint64_t rng;
    gossip_member *m[GOSSIP_MAX_MEMBERS]; /* m[0] is self */
    size_t n;
    gossip_queued *queue;
    size_t nqueue;
    gossip_forward fwd[GOSSIP_MAX_FORWARDS];
    uint32_t seq;
    /* The probe in flight. */
    int probe_target;      /* index into m, -1: none */
    uint32_t probe_seq;
    int64_t probe_start_ms;
    bool probe_acked, probe_indirect;
    int64_t next_probe_ms, next_sync_ms;
    bool announced; /* this node's record sent to everyone once */
    /* Round-robin order of the members to probe. */
    int order[GOSSIP_MAX_MEMBERS];
    size_t norder, order_pos;
    /* gossip_merge: the sender of the message being merged (an owner that
     * pushes its own big record needs no relay). */
    const char *via;
    gossip_update pig[GOSSIP_MAX_PIGGYBACK]; /* send_msg's piggybacked updates */
    /* Hole punching (gossip_punch.c). */
    uint64_t punch_last_n;     /* the number of this node's last PUNCH */
    uint64_t punch_refused;    /* PUNCHes refused */
    int64_t punch_log_ms;      /* when the last refusal was logged */
    /* Relays (gossip_relay.c). */
    uint64_t relay_last_n, relay_refused;
    int64_t relay_log_ms;
};

static inline gossip_member *self_of(gossip *g) { return g->m[0]; }

/* gossip.c */
void gossip_log(gossip *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gossip_find_key(const gossip *g, const uint8_t key[GOSSIP_KEY_LEN]);
/* The other member at addr (not this node, not displaced), or NULL. */
gossip_member *gossip_peer_at(const gossip *g, const char *addr);
void gossip_notify(gossip *g, const gossip_member *m, int before);
/* A state change to every member now (see gossip.c). */
void gossip_broadcast(gossip *g, const gossip_member *about);
/* Real time, for a timestamp this node signs. */
int64_t gossip_wall_now(const gossip *g, int64_t now_ms);
void gossip_refute(gossip *g, uint64_t inc, int64_t now_ms, const char *what, const char *by);
void gossip_set_state(gossip *g, gossip_member *m, gossip_state st, uint64_t inc, int64_t now_ms);

/* A message to the member at addr, without piggybacked updates. */
void gossip_send_to(gossip *g, const char *addr, int port, gossip_msg *m);

/* gossip_punch.c: a PUNCH datagram from member `from` (MAC checked). */
void gossip_punch_receive(gossip *g, gossip_member *from, const gossip_msg *m, int64_t now_ms);
/* gossip_relay.c: a RELAY datagram from member `from` (MAC checked). */
void gossip_relay_receive(gossip *g, gossip_member *from, const gossip_msg *m, int64_t now_ms);

/* gossip_admit.c */
bool gossip_adm_same(const gossip_admission *a, const gossip_admission *b);
/* Applies one update of a message; -1 with err when it was refused. */
int gossip_apply_update(gossip *g, const gossip_update *u, int64_t now_ms, char *err,
                        size_t errlen);
/* Counts an unauthenticated datagram or frame and logs it (once a second at
 * most). */
void gossip_auth_drop(gossip *g, int64_t now_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

/* mesh_nat.h — members behind NAT (part of mesh.h, which includes it):
 * when pairs punch (punch.c) and which member relays a pair that cannot
 * meet (relay.c). docs/PROTOCOL.md, "Hole punching" and "Relays". */
#ifndef SHARDNODE_MESH_NAT_H
#define SHARDNODE_MESH_NAT_H

#include "mesh.h"

#include <stdbool.h>
#include <stdint.h>

/* ===================== hole punching: when to try (punch.c) ============== */
/* Which pairs of members behind NAT try to punch, and when: pure logic on
 * the caller's monotonic clock, like gossip. The daemon reports what it
 * knows of each member (punch_update) and the PUNCHes gossip accepted
 * (punch_requested); punch_tick answers through hooks: ask the peer,
 * through a relay, to punch too (request: gossip_punch_send), and send
 * WireGuard handshakes to one of the peer's endpoints (attempt). Rules and
 * defaults: docs/PROTOCOL.md, "Hole punching". */

typedef struct {
    int grace_ms;      /* 1000: a pair first waits this long for a handshake by itself */
    int retry_ms;      /* 5000: the first retry (WireGuard starts at most one handshake
                        * per peer per 5 s), doubled each round ... */
    int retry_max_ms;  /* 60000: ... up to this */
    int pending_ms;    /* 20000: a pair without a handshake is "pending" this long */
    int answer_ms;     /* 1000: the least time between two attempts that answer PUNCHes */
    int relays;        /* 2: relays asked per round */
} punch_timing;

void punch_timing_default(punch_timing *t);

/* What a pair's link is, for status. */
typedef enum {
    PUNCH_LINK_NONE = 0,     /* the member is not live (or not known here) */
    PUNCH_LINK_DIRECT,       /* a WireGuard handshake, and one side reachable unasked */
    PUNCH_LINK_PUNCHED,      /* a handshake between two members behind NAT */
    PUNCH_LINK_PENDING,      /* no handshake yet, for less than pending_ms */
    PUNCH_LINK_UNREACHABLE,  /* no handshake for longer (later: relayed) */
} punch_link;

const char *punch_link_name(punch_link l);

typedef struct {
    void *ctx;
    /* Ask the peer `to` to punch, through the member `via`. */
    void (*request)(void *ctx, const uint8_t to[GOSSIP_KEY_LEN], const uint8_t via[GOSSIP_KEY_LEN]);
    /* Send WireGuard handshakes to the peer at endpoint now. */
    void (*attempt)(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN], const char *endpoint);
    /* One line for the log (no newline). May be NULL. */
    void (*log)(void *ctx, const char *line);
} punch_hooks;

/* A member as the daemon sees it. */
typedef struct {
    uint8_t key[GOSSIP_KEY_LEN];     /* its WireGuard key */
    const char *name;                /* for the log */
    bool live;                       /* alive or suspect */
    bool direct;                     /* a WireGuard handshake in the last 180 s */
    bool nat;                        /* its record's "nat" */
    int nendpoints;
    const char (*endpoints)[MESH_WG_ENDPOINT_MAX]; /* its record's, in order */
} punch_peer;

/* Per pair, for status and tests. */
typedef struct {
    punch_link link;
    int rounds;          /* rounds since the pair last lacked a handshake */
    int attempts;        /* attempts (rounds and answers) in that time */
    int requests_in;     /* PUNCHes accepted from the peer in that time */
    int64_t since_ms;    /* when it last lacked a handshake (-1: never) */
    int64_t punched_ms;  /* when the handshake came after punching (-1: not yet) */
    int64_t took_ms;     /* ... that long after the pair lacked one (-1: not punched) */
    int64_t next_ms;     /* the next round (-1: none planned) */
} punch_stats;

typedef struct punch punch;

/* self_nat: this node's record says "nat" (no configured endpoint). */
int punch_create(punch **out, const punch_timing *t, const punch_hooks *h, bool self_nat,
                 char *err, size_t errlen);
void punch_destroy(punch *p);
/* The member's state now (call for every other member, each poll). */
void punch_update(punch *p, const punch_peer *peer, int64_t now_ms);
/* The member is gone for good (left, displaced). */
void punch_forget(punch *p, const uint8_t key[GOSSIP_KEY_LEN]);
/* Gossip accepted a PUNCH from this member (the gossip hook `punch`). */
void punch_requested(punch *p, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms);
/* A round for this pair at the next punch_tick, whatever its backoff (a
 * relayed pair trying its direct path again: relay.c's trials). Nothing
 * for a pair that does not punch. */
void punch_kick(punch *p, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms);
/* Rounds that are due. Call it at least every 100 ms. */
void punch_tick(punch *p, int64_t now_ms);
punch_link punch_link_of(const punch *p, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms);
/* 0, or -1 when the member is not known here. */
int punch_stats_of(const punch *p, const uint8_t key[GOSSIP_KEY_LEN], int64_t now_ms,
                   punch_stats *out);

/* ===================== relays: which member, and when (relay.c) ========== */
/* For each peer this node cannot reach directly (punching gave up: the
 * pair is "unreachable"), which member relays the pair's WireGuard
 * datagrams: pure logic on the caller's clock, like punch.c. The side with
 * the smaller WireGuard key asks (request hook: gossip_relay_send) the
 * candidate with the least measured round trip among live members this
 * node reaches directly that are not behind NAT; the relay's answer
 * (relay_granted) or, on the other side, its offer (relay_offered) puts the
 * pair on it (use hook: point WireGuard at the relay's port). A relay that
 * stops answering, dies or loses its direct link is dropped (unuse hook)
 * and another asked at once. Every handback_ms the pair tries a direct
 * path again for trial_ms (unuse, then punching's attempts); a direct
 * handshake in that time ends relaying. Rules and defaults:
 * docs/PROTOCOL.md, "Relays". */

typedef struct {
    int grant_ms;      /* 4000: a relay that has not answered a request by then is skipped */
    int skip_ms;       /* 60000: ... for this long */
    int handback_ms;   /* 300000: how often a relayed pair tries a direct path again */
    int trial_ms;      /* 8000: how long such a trial lasts */
    int refresh_ms;    /* 15000: the asking side repeats its request this often */
} relay_timing;

void relay_timing_default(relay_timing *t);

typedef struct {
    void *ctx;
    /* Ask `via` to relay between this node and `peer`. */
    void (*request)(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN], const uint8_t via[GOSSIP_KEY_LEN]);
    /* Send peer's WireGuard datagrams to via's UDP port `port` now. */
    void (*use)(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN], const uint8_t via[GOSSIP_KEY_LEN],
                uint16_t port);
    /* Stop relaying: point peer back at its own endpoint (punching's). */
    void (*unuse)(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN]);
    void (*log)(void *ctx, const char *line);  /* may be NULL */
} relay_hooks;

/* A member as the daemon sees it (call relay_update for every other member). */
typedef struct {
    uint8_t key[GOSSIP_KEY_LEN];
    const char *name;
    bool live;         /* alive or suspect */
    bool nat;          /* its record's "nat" */
    bool direct;       /* a WireGuard handshake with it over a direct path */
    bool unreachable;  /* punching gave up on it (punch_link UNREACHABLE) */
    int64_t rtt_ms;    /* gossip's last direct round trip (-1: none) */
} relay_peer;

typedef struct {
    bool relayed;                      /* the pair's datagrams go through `via` */
    uint8_t via[GOSSIP_KEY_LEN];       /* relayed, or asked (requested) */
    bool requested;                    /* asked, no answer yet */
    bool trial;                        /* trying a direct path again */
    uint16_t port;                     /* relayed: via's UDP port for this side */
    int requests, switches;            /* requests sent; relays the pair moved between */
    int64_t since_ms;                  /* relayed since (-1: not) */
} relay_stats;

typedef struct relays relays;

int relay_create(relays **out, const relay_timing *t, const relay_hooks *h,
                 const uint8_t self_key[GOSSIP_KEY_LEN], char *err, size_t errlen);
void relay_destroy(relays *r);
void relay_update(relays *r, const relay_peer *peer, int64_t now_ms);
void relay_forget(relays *r, const uint8_t key[GOSSIP_KEY_LEN]);
/* The relay `via` answered this node's request (granted) or the peer's
 * (offered): the pair's datagrams go to via's port `port`. */
void relay_offered(relays *r, const uint8_t peer[GOSSIP_KEY_LEN], const uint8_t via[GOSSIP_KEY_LEN],
                   uint16_t port, bool granted, int64_t now_ms);
void relay_tick(relays *r, int64_t now_ms);
/* 0 and *out, or -1 when peer is not known here. */
int relay_stats_of(const relays *r, const uint8_t peer[GOSSIP_KEY_LEN], relay_stats *out);

#endif

/* test_relay.c — which member relays a pair that cannot meet, and when
 * (mesh/relay.c; docs/PROTOCOL.md, "Relays"), on a simulated clock (10 ms
 * steps, a poll of every member each second as the daemon's WireGuard
 * poll, relay_tick every step).
 *
 * The world: x and y behind NATs that never let each other in (punching
 * gave up: "unreachable"), public members r1, r2, r3 with round trips from
 * x of 30, 10 and 20 ms (from y: 25, 15, 35), and n1 behind NAT with the
 * least round trip of all (5 ms). r2 does not relay (--no-relay: it never
 * answers). A request reaches the relay in 20 ms when the relay is live;
 * the relay answers both sides 20 ms later with ports of its own (100 *
 * relay + 1 for the asker, + 2 for the peer), as gossip_relay.c does.
 *
 * 1. Only x (the smaller key) asks; it asks r2 first (least round trip
 *    among live, direct, public members: never n1 behind NAT, never y),
 *    skips it after grant_ms without an answer, then asks r3: x ends
 *    pointed at r3's port for it, y at r3's port for it, both `relayed`.
 * 2. While relayed, x repeats its request every refresh_ms (the lease).
 * 3. r3 dies: both drop it at their next poll (unuse), x asks the next
 *    (r1, r2 still skipped), and the pair is relayed via r1 within a poll
 *    and two round trips of the death being seen; one switch counted.
 * 4. Hand-back: after handback_ms a trial points the pair at its direct
 *    path (unuse); without a direct handshake the relay is used again at
 *    trial_ms; with one (punched meanwhile) relaying ends.
 * 5. Offers refused: from a member behind NAT, from one this node does not
 *    reach directly, an answer to a request no longer made; a pair that is
 *    not unreachable, or direct, asks nothing; a peer that stops being live
 *    ends relaying. */
#include "check.h"
#include "mesh.h"

#include <stdlib.h>
#include <string.h>

#define STEP 10
#define POLL 1000
#define LAT 20
enum { X, Y, R1, R2, R3, N1, NN };
static const char *NAMES[NN] = {"x", "y", "r1", "r2", "r3", "n1"};

static int64_t now;

typedef struct {
    int from, peer, via;
    int64_t at;
    int stage; /* 0: to the relay; 1: answers to both */
} msg;

static struct {
    relays *r[2]; /* x's and y's */
    bool live[NN];
    bool nat[NN];
    bool answers[NN];   /* relays when asked */
    bool direct_xy;     /* x and y punched */
    bool unreachable;   /* punching gave up on the pair */
    int64_t rtt[2][NN];
    msg q[256];
    int nq;
    int requests[2][NN]; /* requests sent by x/y to each relay */
    int use_via[2];      /* where x/y points the other: relay index, -1 its own endpoint */
    uint16_t use_port[2];
    int uses[2], unuses[2];
} W;

static void key_of(int i, uint8_t k[GOSSIP_KEY_LEN])
{
    memset(k, 0, GOSSIP_KEY_LEN);
    k[0] = (uint8_t)(i + 1);
}

static int idx(const uint8_t k[GOSSIP_KEY_LEN]) { return k[0] - 1; }

static void h_request(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN], const uint8_t via[GOSSIP_KEY_LEN])
{
    int self = (int)(intptr_t)ctx, v = idx(via);
    W.requests[self][v]++;
    CHECK(idx(peer) == 1 - self, "%s asked about %s", NAMES[self], NAMES[idx(peer)]);
    if (W.nq < 256) W.q[W.nq++] = (msg){self, idx(peer), v, now + LAT, 0};
}

static void h_use(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN], const uint8_t via[GOSSIP_KEY_LEN],
                  uint16_t port)
{
    int self = (int)(intptr_t)ctx;
    CHECK(idx(peer) == 1 - self, "use for %s", NAMES[idx(peer)]);
    W.use_via[self] = idx(via);
    W.use_port[self] = port;
    W.uses[self]++;
}

static void h_unuse(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN])
{
    int self = (int)(intptr_t)ctx;
    CHECK(idx(peer) == 1 - self, "unuse for %s", NAMES[idx(peer)]);
    W.use_via[self] = -1;
    W.use_port[self] = 0;
    W.unuses[self]++;
}

static void poll_one(int self)
{
    for (int j = 0; j < NN; j++) {
        if (j == self) continue;
        relay_peer p = {.name = NAMES[j], .live = W.live[j], .nat = W.nat[j],
                        .rtt_ms = W.live[j] ? W.rtt[self][j] : -1};
        key_of(j, p.key);
        if (j == 1 - self) {
            p.direct = W.direct_xy;
            p.unreachable = W.unreachable && !W.direct_xy;
        } else {
            p.direct = W.live[j]; /* x and y reach every live member but each other */
        }
        relay_update(W.r[self], &p, now);
    }
}

static void deliver(void)
{
    for (int i = 0; i < W.nq; i++) {
        msg *m = &W.q[i];
        if (m->at > now) continue;
        if (m->stage == 0 && W.live[m->via] && W.answers[m->via]) {
            *m = (msg){m->from, m->peer, m->via, now + LAT, 1};
            continue;
        }
        if (m->stage == 1 && W.live[m->via]) {
            uint8_t pk[GOSSIP_KEY_LEN], vk[GOSSIP_KEY_LEN], fk[GOSSIP_KEY_LEN];
            key_of(m->peer, pk);
            key_of(m->via, vk);
            key_of(m->from, fk);
            relay_offered(W.r[m->from], pk, vk, (uint16_t)(100 * m->via + 1), true, now);
            relay_offered(W.r[m->peer], fk, vk, (uint16_t)(100 * m->via + 2), false, now);
        }
        W.q[i--] = W.q[--W.nq];
    }
}

static void run_until(int64_t end)
{
    for (; now < end; now += STEP) {
        if (now % POLL == 0) {
            poll_one(X);
            poll_one(Y);
        }
        deliver();
        relay_tick(W.r[X], now);
        relay_tick(W.r[Y], now);
    }
}

/* Runs until cond or end; returns the time it held, -1 never. */
static int64_t run_while_not(bool (*cond)(void), int64_t end)
{
    for (; now < end; now += STEP) {
        if (now % POLL == 0) {
            poll_one(X);
            poll_one(Y);
        }
        deliver();
        relay_tick(W.r[X], now);
        relay_tick(W.r[Y], now);
        if (cond()) return now;
    }
    return -1;
}

static int via_r1_both(void) { return W.use_via[X] == R1 && W.use_via[Y] == R1; }
static bool on_r1(void) { return via_r1_both(); }

static relay_timing T;

static void world(void)
{
    for (int i = 0; i < 2; i++) relay_destroy(W.r[i]);
    memset(&W, 0, sizeof W);
    now = 0;
    for (int i = 0; i < NN; i++) {
        W.live[i] = true;
        W.answers[i] = i != R2 && i != X && i != Y;
    }
    W.nat[X] = W.nat[Y] = W.nat[N1] = true;
    int64_t rx[NN] = {0, -1, 30, 10, 20, 5}, ry[NN] = {-1, 0, 25, 15, 35, 5};
    for (int j = 0; j < NN; j++) {
        W.rtt[X][j] = rx[j];
        W.rtt[Y][j] = ry[j];
    }
    W.unreachable = true;
    W.use_via[X] = W.use_via[Y] = -1;
    relay_hooks h = {.request = h_request, .use = h_use, .unuse = h_unuse};
    for (int i = 0; i < 2; i++) {
        uint8_t k[GOSSIP_KEY_LEN];
        key_of(i, k);
        h.ctx = (void *)(intptr_t)i;
        char err[128];
        CHECK(relay_create(&W.r[i], &T, &h, k, err, sizeof err) == 0, "create: %s", err);
    }
}

static void test_choice_and_failover(void)
{
    world();
    run_until(3000);
    relay_timing d = T;
    /* 1. */
    CHECK(W.requests[X][R2] == 1, "x asked r2 (least rtt, public) %d times", W.requests[X][R2]);
    CHECK(W.requests[X][N1] == 0 && W.requests[X][Y] == 0, "x asked n1 (NAT) or y");
    int total_y = 0;
    for (int j = 0; j < NN; j++) total_y += W.requests[Y][j];
    CHECK(total_y == 0, "y (the larger key) asked %d times", total_y);
    CHECK(W.use_via[X] == -1, "x relayed before r2's grant time ran out");
    run_until(d.grant_ms + 2000);
    CHECK(W.requests[X][R3] == 1, "x asked r3 next (%d)", W.requests[X][R3]);
    CHECK(W.requests[X][R1] == 0, "x asked r1 (the slowest) before r3");
    CHECK(W.use_via[X] == R3 && W.use_port[X] == 100 * R3 + 1, "x uses %d port %u",
          W.use_via[X], W.use_port[X]);
    CHECK(W.use_via[Y] == R3 && W.use_port[Y] == 100 * R3 + 2, "y uses %d port %u",
          W.use_via[Y], W.use_port[Y]);
    relay_stats s;
    uint8_t ky[GOSSIP_KEY_LEN], kx[GOSSIP_KEY_LEN];
    key_of(Y, ky);
    key_of(X, kx);
    CHECK(relay_stats_of(W.r[X], ky, &s) == 0 && s.relayed && idx(s.via) == R3,
          "x's stats: relayed %d via %d", s.relayed, idx(s.via));
    CHECK(relay_stats_of(W.r[Y], kx, &s) == 0 && s.relayed && idx(s.via) == R3,
          "y's stats: relayed %d via %d", s.relayed, idx(s.via));
    /* 2. The lease. */
    int before = W.requests[X][R3];
    int64_t t2 = now;
    run_until(t2 + 3 * d.refresh_ms + 100);
    CHECK(W.requests[X][R3] - before == 3, "%d refreshes in 3 refresh periods",
          W.requests[X][R3] - before);
    CHECK(W.uses[X] == 1 && W.uses[Y] == 1, "renewed leases re-pointed WireGuard (%d, %d)",
          W.uses[X], W.uses[Y]);
    /* 3. r3 dies (seen at the next poll). */
    W.live[R3] = false;
    int64_t died = now;
    int64_t at = run_while_not(on_r1, now + 20000);
    CHECK(at >= 0, "the pair did not move to r1 (x on %d, y on %d)", W.use_via[X], W.use_via[Y]);
    CHECK(at - died <= POLL + 4 * LAT + 2 * STEP, "moved to r1 %lld ms after r3 died",
          (long long)(at - died));
    CHECK(W.requests[X][R2] == 1, "r2, still skipped, was asked again");
    CHECK(W.unuses[X] == 1 && W.unuses[Y] == 1, "unuse on r3's death: %d, %d", W.unuses[X],
          W.unuses[Y]);
    CHECK(W.use_port[X] == 100 * R1 + 1 && W.use_port[Y] == 100 * R1 + 2, "ports %u %u",
          W.use_port[X], W.use_port[Y]);
}

static void test_handback(void)
{
    world();
    W.answers[R2] = true;
    run_until(2000);
    CHECK(W.use_via[X] == R2 && W.use_via[Y] == R2, "relayed via r2: %d %d", W.use_via[X],
          W.use_via[Y]);
    int64_t relayed_at = now;
    /* 4. No direct path: a trial, then the relay again. */
    run_until(relayed_at + T.handback_ms + 2 * POLL);
    CHECK(W.use_via[X] == -1 && W.use_via[Y] == -1, "no trial at handback_ms (%d %d)",
          W.use_via[X], W.use_via[Y]);
    run_until(relayed_at + T.handback_ms + T.trial_ms + 2 * POLL);
    CHECK(W.use_via[X] == R2 && W.use_via[Y] == R2, "relay not used again after the trial");
    /* ... and with a direct path (punched during the next trial) it ends. */
    run_until(relayed_at + 2 * T.handback_ms + T.trial_ms + 3 * POLL);
    W.direct_xy = true;
    run_until(now + T.trial_ms + 2 * POLL);
    CHECK(W.use_via[X] == -1 && W.use_via[Y] == -1, "still relayed with a direct path");
    relay_stats s;
    uint8_t ky[GOSSIP_KEY_LEN];
    key_of(Y, ky);
    CHECK(relay_stats_of(W.r[X], ky, &s) == 0 && !s.relayed, "x still says relayed");
    int n = W.requests[X][R2];
    run_until(now + 30000);
    CHECK(W.requests[X][R2] == n, "requests while direct");
}

static void test_refusals(void)
{
    world();
    W.unreachable = false; /* pending: not yet */
    run_until(10000);
    int total = 0;
    for (int j = 0; j < NN; j++) total += W.requests[X][j];
    CHECK(total == 0, "%d requests for a pair punching has not given up on", total);
    uint8_t kx[GOSSIP_KEY_LEN], ky[GOSSIP_KEY_LEN], kn[GOSSIP_KEY_LEN], kr[GOSSIP_KEY_LEN];
    key_of(X, kx);
    key_of(Y, ky);
    key_of(N1, kn);
    key_of(R1, kr);
    relay_offered(W.r[Y], kx, kn, 501, false, now);
    CHECK(W.use_via[Y] == -1, "y took an offer from n1, behind NAT");
    relay_offered(W.r[X], ky, kr, 201, true, now);
    CHECK(W.use_via[X] == -1, "x took an answer to a request it never made");
    W.live[R1] = false;
    run_until(now + 2 * POLL);
    relay_offered(W.r[Y], kx, kr, 202, false, now);
    CHECK(W.use_via[Y] == -1, "y took an offer from r1, which is not live");
    relay_offered(W.r[Y], kx, kr, 0, false, now);
    /* The peer taken by an offer, then the peer dies. */
    W.live[R1] = true;
    run_until(now + 2 * POLL);
    relay_offered(W.r[Y], kx, kr, 202, false, now);
    CHECK(W.use_via[Y] == R1 && W.use_port[Y] == 202, "y did not take r1's offer");
    W.live[X] = false;
    run_until(now + 2 * POLL);
    CHECK(W.use_via[Y] == -1, "y still relays for x, which is not live");
    /* Direct pairs ask nothing. */
    world();
    W.direct_xy = true;
    run_until(20000);
    total = 0;
    for (int j = 0; j < NN; j++) total += W.requests[X][j];
    CHECK(total == 0, "%d requests for a direct pair", total);
    char err[128];
    relays *r = NULL;
    relay_hooks bad = {0};
    CHECK(relay_create(&r, NULL, &bad, kx, err, sizeof err) != 0 && strstr(err, "hooks"),
          "created without hooks: %s", err);
}

int main(void)
{
    relay_timing_default(&T);
    test_choice_and_failover();
    test_handback();
    test_refusals();
    for (int i = 0; i < 2; i++) relay_destroy(W.r[i]);
    if (failures) printf("test_relay: %d failures\n", failures);
    else printf("test_relay: all checks passed\n");
    return failures != 0;
}

/* test_punch.c — when pairs punch (mesh/punch.c; docs/PROTOCOL.md, "Hole
 * punching"), on a simulated clock (10 ms steps, a poll of every member
 * each second as the daemon's WireGuard poll, punch_tick every step).
 *
 * The world: p0 on a public address (no "nat"), a and b each behind a
 * router. A router lets a packet from X in only when its member sent one
 * to X within the last 30 s (a conntrack entry: Linux MASQUERADE's
 * filtering); a port-preserving router maps its member to one public
 * endpoint whatever the destination, a symmetric one (--random-fully) to
 * another port per destination, so the endpoint others observed is not the
 * one a new peer sees. An attempt is WireGuard's handshake to the endpoint
 * given: it completes when it reaches a member whose router lets it in.
 * PUNCH requests travel through the relay the hook names in 20 ms when the
 * requester and the relay, and the relay and the target, are direct.
 *
 * 1. Two port-preserving NATs, b's endpoint known to a only 3 s after the
 *    pair appears: b's first round (at grace) reaches a's router before a
 *    sent anything, its request reaches a, which cannot answer yet (no
 *    endpoint); a's first round once it knows b's endpoint completes the
 *    handshake (b's earlier send opened b's router): both `punched` within
 *    4 s, `pending` before; relays asked: p0 only (the one public, direct
 *    member), never the target.
 * 2. An accepted request is answered by an attempt at once (rate-limited by
 *    answer_ms) and brings the first round forward from its grace (later
 *    rounds keep their backoff); requests while direct are ignored.
 * 3. Symmetric NATs: never a handshake; rounds at grace, then retry_ms
 *    doubling to retry_max_ms (1, 6, 16, 36, 76, 136, 196 s); `pending` for
 *    pending_ms, then `unreachable`; the endpoints taken in turn.
 * 4. A public member never punches (no request, no attempt) and calls a
 *    pair with a NATed member `direct`; a pair that loses its handshake
 *    starts a new session (`pending`, rounds from 0).
 * 5. No punching without the peer's "nat", without endpoints, or before
 *    grace_ms; a forgotten member is unknown. */
#include "check.h"
#include "mesh.h"

#include <stdlib.h>
#include <string.h>

#define STEP 10
#define POLL 1000
#define CONNTRACK_MS 30000
#define NN 3 /* p0, a, b */

static int64_t now;
static const char *NAMES[NN] = {"p0", "a", "b"};

typedef struct {
    int to, via;
    int64_t at;
    bool used;
} req;

static struct {
    punch *p[NN];
    bool nat[NN];       /* behind a router */
    bool symmetric[NN]; /* its router maps per destination */
    bool direct[NN][NN];
    int64_t sent[NN][NN]; /* last attempt i -> j that left i's router (-1 never) */
    bool known_ep[NN][NN]; /* i knows j's observed endpoint */
    int attempts[NN][NN], requests[NN][NN], relay_used[NN][NN];
    int64_t attempt_at[NN][64]; /* i's attempt times towards its peer (scenario 3) */
    int nattempt_at[NN];
    char last_ep[NN][MESH_WG_ENDPOINT_MAX];
    req q[256];
    int nq;
    bool live[NN];
} W;

static uint8_t KEY[NN][GOSSIP_KEY_LEN];

static int idx_of(const uint8_t key[GOSSIP_KEY_LEN])
{
    for (int i = 0; i < NN; i++)
        if (memcmp(KEY[i], key, GOSSIP_KEY_LEN) == 0) return i;
    return -1;
}

/* The endpoint others observed for j (what its record says). */
static void observed_ep(int j, char *out, size_t n)
{
    snprintf(out, n, "198.51.100.%d:51820", 10 + j);
}

static void h_request(void *ctx, const uint8_t to[GOSSIP_KEY_LEN], const uint8_t via[GOSSIP_KEY_LEN])
{
    int from = (int)(intptr_t)ctx, t = idx_of(to), v = idx_of(via);
    CHECK(t >= 0 && v >= 0, "request to or via an unknown key");
    CHECK(v != t, "%s asked %s through %s itself", NAMES[from], NAMES[t], NAMES[v]);
    W.relay_used[from][v]++;
    if (W.nq < 256 && W.direct[from][v] && W.direct[v][t])
        W.q[W.nq++] = (req){.to = t, .via = from, .at = now + 20};
}

static void h_attempt(void *ctx, const uint8_t peer[GOSSIP_KEY_LEN], const char *ep)
{
    int i = (int)(intptr_t)ctx, j = idx_of(peer);
    CHECK(j >= 0, "attempt towards an unknown key");
    W.attempts[i][j]++;
    snprintf(W.last_ep[i], sizeof W.last_ep[i], "%s", ep);
    if (W.nattempt_at[i] < 64) W.attempt_at[i][W.nattempt_at[i]++] = now;
    /* Leaves i's router (opening it for j, unless it maps per destination,
     * which opens a port j never learns of: no use to j). */
    W.sent[i][j] = W.symmetric[i] ? -1 : now;
    char want[MESH_WG_ENDPOINT_MAX];
    observed_ep(j, want, sizeof want);
    bool right = strcmp(ep, want) == 0 && !W.symmetric[j];
    bool in = !W.nat[j] || (W.sent[j][i] >= 0 && now - W.sent[j][i] <= CONNTRACK_MS);
    if (right && in) W.direct[i][j] = W.direct[j][i] = true;
}

static void h_log(void *ctx, const char *line)
{
    (void)ctx;
    (void)line;
}

static void world(bool a_sym, bool b_sym)
{
    for (int i = 0; i < NN; i++) punch_destroy(W.p[i]);
    memset(&W, 0, sizeof W);
    now = 1000000;
    for (int i = 0; i < NN; i++) {
        memset(KEY[i], 0x10 * (i + 1), GOSSIP_KEY_LEN);
        W.live[i] = true;
        for (int j = 0; j < NN; j++) W.sent[i][j] = -1;
    }
    W.nat[1] = W.nat[2] = true;
    W.symmetric[1] = a_sym;
    W.symmetric[2] = b_sym;
    /* p0 is public: both NATed members reach it (they sent first). */
    W.direct[0][1] = W.direct[1][0] = W.direct[0][2] = W.direct[2][0] = true;
    for (int i = 0; i < NN; i++)
        for (int j = 0; j < NN; j++) W.known_ep[i][j] = i != j;
    for (int i = 0; i < NN; i++) {
        punch_hooks h = {.ctx = (void *)(intptr_t)i, .request = h_request, .attempt = h_attempt,
                         .log = h_log};
        char err[256] = "";
        CHECK(punch_create(&W.p[i], NULL, &h, W.nat[i], err, sizeof err) == 0, "%s", err);
    }
}

static void poll_all(void)
{
    for (int i = 0; i < NN; i++)
        for (int j = 0; j < NN; j++) {
            if (i == j) continue;
            char ep[1][MESH_WG_ENDPOINT_MAX];
            observed_ep(j, ep[0], sizeof ep[0]);
            punch_peer pp = {.name = NAMES[j], .live = W.live[j], .direct = W.direct[i][j],
                             .nat = W.nat[j], .nendpoints = W.known_ep[i][j] ? 1 : 0,
                             .endpoints = (const char(*)[MESH_WG_ENDPOINT_MAX])ep};
            memcpy(pp.key, KEY[j], GOSSIP_KEY_LEN);
            punch_update(W.p[i], &pp, now);
        }
}

static void run(int64_t ms)
{
    int64_t end = now + ms;
    while (now < end) {
        now += STEP;
        for (int k = 0; k < W.nq; k++)
            if (!W.q[k].used && W.q[k].at <= now) {
                W.q[k].used = true;
                W.requests[W.q[k].to][W.q[k].via]++;
                punch_requested(W.p[W.q[k].to], KEY[W.q[k].via], now);
            }
        if (now % POLL == 0) poll_all();
        for (int i = 0; i < NN; i++) punch_tick(W.p[i], now);
    }
}

static punch_link link_of(int i, int j) { return punch_link_of(W.p[i], KEY[j], now); }

static void scenario_port_preserving(void)
{
    printf("1. two port-preserving NATs, b's endpoint known to a only after 3 s:\n");
    world(false, false);
    W.known_ep[1][2] = false;
    poll_all();
    CHECK(link_of(1, 2) == PUNCH_LINK_PENDING && link_of(2, 1) == PUNCH_LINK_PENDING,
          "the new pair is %s/%s, not pending", punch_link_name(link_of(1, 2)),
          punch_link_name(link_of(2, 1)));
    CHECK(link_of(1, 0) == PUNCH_LINK_DIRECT, "a-p0 is %s, not direct",
          punch_link_name(link_of(1, 0)));
    run(900);
    CHECK(W.attempts[1][2] + W.attempts[2][1] == 0, "an attempt before grace");
    run(2100); /* t = 3 s */
    CHECK(W.attempts[2][1] == 1 && !W.direct[1][2], "b: %d attempts by 3 s, direct %d",
          W.attempts[2][1], W.direct[1][2]);
    CHECK(W.requests[1][2] == 1, "a got %d requests from b", W.requests[1][2]);
    CHECK(W.attempts[1][2] == 0, "a attempted without b's endpoint");
    CHECK(W.relay_used[2][0] == 1 && W.relay_used[2][1] == 0, "b asked through p0 %d times, "
          "a %d", W.relay_used[2][0], W.relay_used[2][1]);
    W.known_ep[1][2] = true;
    int64_t t0 = now;
    int64_t took = -1;
    while (now - t0 < 10000) {
        run(STEP);
        if (link_of(1, 2) == PUNCH_LINK_PUNCHED && link_of(2, 1) == PUNCH_LINK_PUNCHED) {
            took = now - t0;
            break;
        }
    }
    CHECK(took >= 0 && took <= 2000, "a-b punched %.2f s after a learnt b's endpoint",
          (double)took / 1e3);
    punch_stats sa, sb;
    punch_stats_of(W.p[1], KEY[2], now, &sa);
    punch_stats_of(W.p[2], KEY[1], now, &sb);
    CHECK(sa.took_ms > 0 && sa.took_ms <= 5000 && sb.took_ms > 0, "took %lld / %lld ms",
          (long long)sa.took_ms, (long long)sb.took_ms);
    printf("   punched %.2f s after a learnt b's endpoint (%.1f s after the pair appeared): "
           "a %d rounds %d attempts, b %d rounds %d attempts, %d request(s) a<-b\n",
           (double)took / 1e3, (double)sa.took_ms / 1e3, sa.rounds, sa.attempts, sb.rounds,
           sb.attempts, W.requests[1][2]);
    CHECK(link_of(0, 1) == PUNCH_LINK_DIRECT && link_of(1, 0) == PUNCH_LINK_DIRECT,
          "p0-a is %s/%s", punch_link_name(link_of(0, 1)), punch_link_name(link_of(1, 0)));
    /* Direct stays quiet: no more rounds. */
    int before = W.attempts[1][2] + W.attempts[2][1];
    run(120000);
    CHECK(W.attempts[1][2] + W.attempts[2][1] == before, "attempts after the handshake");
}

static void scenario_answer(void)
{
    printf("2. an accepted request is answered at once, at most once a second:\n");
    world(false, false);
    W.known_ep[1][2] = W.known_ep[2][1] = true;
    poll_all();
    /* Before grace, a request from b: a attempts at once. */
    run(100);
    punch_requested(W.p[1], KEY[2], now);
    CHECK(W.attempts[1][2] == 1, "a did not answer b's request (%d)", W.attempts[1][2]);
    punch_requested(W.p[1], KEY[2], now + 10);
    CHECK(W.attempts[1][2] == 1, "a answered twice within answer_ms");
    punch_stats st;
    punch_stats_of(W.p[1], KEY[2], now, &st);
    CHECK(st.requests_in == 2 && st.next_ms == now, "requests_in %d, first round in %lld ms",
          st.requests_in, (long long)(st.next_ms - now));
    /* Requests from an unknown key, or while direct: ignored. */
    uint8_t other[GOSSIP_KEY_LEN];
    memset(other, 0x99, sizeof other);
    punch_requested(W.p[1], other, now);
    W.direct[1][2] = W.direct[2][1] = true;
    run(1000);
    int n = W.attempts[1][2];
    punch_requested(W.p[1], KEY[2], now + 5000);
    CHECK(W.attempts[1][2] == n, "a answered a request while direct");
    printf("   answered once, ignored the second within 1 s and those while direct\n");
}

static void scenario_symmetric(void)
{
    printf("3. symmetric NATs: rounds with backoff, pending then unreachable:\n");
    world(true, true);
    poll_all();
    int64_t t0 = now;
    bool was_pending = false, became_unreachable = false;
    int64_t unreach_at = -1;
    while (now - t0 < 200000) {
        run(STEP);
        punch_link l = link_of(1, 2);
        if (l == PUNCH_LINK_PENDING) was_pending = true;
        if (l == PUNCH_LINK_UNREACHABLE && unreach_at < 0) {
            unreach_at = now - t0;
            became_unreachable = true;
        }
        CHECK(l != PUNCH_LINK_PUNCHED && l != PUNCH_LINK_DIRECT, "symmetric NATs punched");
    }
    CHECK(was_pending && became_unreachable && unreach_at >= 20000 && unreach_at <= 21000,
          "pending %d, unreachable after %.2f s (want 20)", was_pending,
          (double)unreach_at / 1e3);
    /* a's rounds (no requests arrive: symmetric routers never let a's
     * answers in, but requests do arrive through p0 and are answered; count
     * rounds from the stats). */
    punch_stats st;
    punch_stats_of(W.p[1], KEY[2], now, &st);
    CHECK(st.rounds == 7, "a made %d rounds in 200 s, want 7 (1, 6, 16, 36, 76, 136, 196 s)",
          st.rounds);
    static const int64_t gaps[] = {5000, 10000, 20000, 40000, 60000, 60000};
    CHECK(W.nattempt_at[1] == 7 && W.attempt_at[1][0] - t0 == 1000, "a's first attempt at "
          "%lld ms (want 1000), %d attempts", (long long)(W.attempt_at[1][0] - t0),
          W.nattempt_at[1]);
    for (int k = 1; k < W.nattempt_at[1] && k < 7; k++)
        CHECK(W.attempt_at[1][k] - W.attempt_at[1][k - 1] == gaps[k - 1],
              "a's round %d came %lld ms after the one before, want %lld", k + 1,
              (long long)(W.attempt_at[1][k] - W.attempt_at[1][k - 1]), (long long)gaps[k - 1]);
    printf("   %d rounds in 200 s, %d attempts (answers included), unreachable after %.1f s\n",
           st.rounds, st.attempts, (double)unreach_at / 1e3);
}

static void scenario_public_and_loss(void)
{
    printf("4. a public member never punches; a lost handshake starts again:\n");
    world(false, false);
    W.direct[0][1] = W.direct[1][0] = false; /* p0 and a before their handshake */
    poll_all();
    CHECK(link_of(0, 1) == PUNCH_LINK_PENDING, "p0-a is %s, not pending",
          punch_link_name(link_of(0, 1)));
    run(60000);
    CHECK(W.attempts[0][1] == 0 && W.relay_used[0][2] == 0 && W.attempts[1][0] == 0,
          "punching with a public member: %d %d %d", W.attempts[0][1], W.relay_used[0][2],
          W.attempts[1][0]);
    CHECK(link_of(0, 1) == PUNCH_LINK_UNREACHABLE, "p0-a without a handshake after 60 s is %s",
          punch_link_name(link_of(0, 1)));
    W.direct[0][1] = W.direct[1][0] = true;
    run(2000);
    CHECK(link_of(0, 1) == PUNCH_LINK_DIRECT && link_of(1, 0) == PUNCH_LINK_DIRECT,
          "p0-a with a handshake is %s/%s", punch_link_name(link_of(0, 1)),
          punch_link_name(link_of(1, 0)));
    /* a-b punched, then the handshake is lost. */
    run(10000);
    CHECK(link_of(1, 2) == PUNCH_LINK_PUNCHED, "a-b is %s", punch_link_name(link_of(1, 2)));
    W.direct[1][2] = W.direct[2][1] = false;
    for (int i = 0; i < NN; i++)
        for (int j = 0; j < NN; j++) W.sent[i][j] = -1; /* the routers forgot */
    run(1000);
    punch_stats st;
    punch_stats_of(W.p[1], KEY[2], now, &st);
    CHECK(link_of(1, 2) == PUNCH_LINK_PENDING && st.rounds == 0, "after the loss: %s, %d rounds",
          punch_link_name(link_of(1, 2)), st.rounds);
    run(10000);
    CHECK(link_of(1, 2) == PUNCH_LINK_PUNCHED, "a-b not punched again: %s",
          punch_link_name(link_of(1, 2)));
    printf("   p0 made no request or attempt; a-b punched again after losing its handshake\n");
}

static void scenario_not_eligible(void)
{
    printf("5. no punching without nat, endpoints or grace; forget:\n");
    world(false, false);
    W.nat[2] = false; /* b has an endpoint of its own */
    W.known_ep[1][2] = true;
    punch_hooks hb = {.ctx = (void *)(intptr_t)2, .request = h_request, .attempt = h_attempt,
                      .log = h_log};
    char e2[128] = "";
    punch_destroy(W.p[2]);
    CHECK(punch_create(&W.p[2], NULL, &hb, false, e2, sizeof e2) == 0, "%s", e2);
    poll_all();
    run(30000);
    CHECK(W.attempts[1][2] == 0, "a punched towards b, which says no nat");
    W.nat[2] = true;
    W.known_ep[1][2] = W.known_ep[2][1] = false;
    punch_destroy(W.p[2]);
    CHECK(punch_create(&W.p[2], NULL, &hb, true, e2, sizeof e2) == 0, "%s", e2);
    poll_all();
    run(30000);
    CHECK(W.attempts[1][2] == 0 && W.attempts[2][1] == 0, "punching without endpoints");
    punch_forget(W.p[1], KEY[2]);
    CHECK(link_of(1, 2) == PUNCH_LINK_NONE, "a forgotten member is %s",
          punch_link_name(link_of(1, 2)));
    punch_stats st;
    CHECK(punch_stats_of(W.p[1], KEY[2], now, &st) == -1, "stats of a forgotten member");
    W.live[2] = false;
    poll_all();
    CHECK(link_of(1, 2) == PUNCH_LINK_NONE, "a dead member is %s", punch_link_name(link_of(1, 2)));
    char err[128] = "";
    punch *bad = NULL;
    punch_hooks none = {0};
    CHECK(punch_create(&bad, NULL, &none, true, err, sizeof err) != 0 && !bad &&
              strstr(err, "hooks"), "punch_create without hooks: %s", err);
    printf("   none: b without nat, without endpoints; forgotten and dead are \"none\"\n");
}

static void scenario_kick(void)
{
    printf("6. a kick (a relayed pair's trial) makes a round now, whatever the backoff:\n");
    world(true, true);
    int64_t t0 = now;
    poll_all();
    run(100000); /* rounds at 1, 6, 16, 36, 76 s; the next at 136 s */
    int before = W.nattempt_at[1];
    int64_t kicked = now;
    punch_kick(W.p[1], KEY[2], now);
    run(STEP);
    CHECK(W.nattempt_at[1] == before + 1 && W.attempt_at[1][before] == now,
          "no attempt right after the kick at %.1f s (%d attempts before, %d after)",
          (double)(now - t0) / 1e3, before, W.nattempt_at[1]);
    int reqs = 0;
    for (int k = 0; k < W.nq; k++) reqs += W.q[k].to == 2 && W.q[k].at > now - 1000;
    CHECK(reqs > 0, "the kicked round asked b through no relay");
    /* A public member's pairs do not punch: a kick does nothing. */
    int p0 = W.nattempt_at[0];
    punch_kick(W.p[0], KEY[1], now);
    run(2 * POLL);
    CHECK(W.nattempt_at[0] == p0, "a kick made public p0 punch");
    printf("   a round at %.2f s, right after the kick at %.2f s (the backoff had it at 136 s)\n",
           (double)(W.attempt_at[1][before] - t0) / 1e3, (double)(kicked - t0) / 1e3);
}

int main(void)
{
    scenario_port_preserving();
    scenario_answer();
    scenario_symmetric();
    scenario_public_and_loss();
    scenario_not_eligible();
    scenario_kick();
    for (int i = 0; i < NN; i++) punch_destroy(W.p[i]);
    printf("test_punch: %s\n", failures ? "FAILED" : "all checks passed");
    return failures != 0;
}

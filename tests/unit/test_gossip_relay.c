/* test_gossip_relay.c — the RELAY message's trust rules (mesh/gossip_relay.c;
 * docs/PROTOCOL.md, "Relays"), each refusal on its own, in the simulated
 * world of gossip_sim.h (four members n0..n3, real keys, codec and MACs):
 * a genuine request of n1 for the pair n1-n2 through n0 is taken up by n0
 * (relay_open) and answered to both sides with n0's ports (n1 told it asked,
 * n2 told n1 asked); a relay that refuses (--no-relay) answers nothing. The
 * relay acts only on its sender's own request, for a live peer other than
 * the two; the peer believes an offer only with the requester-peer MAC over
 * the relay's key too, a number not below the last, from the relay the
 * message names; the requester takes an answer only from that relay. */
#include "gossip_sim.h"

/* A RELAY as node `hop` sends it: pa asks rv to relay for pa-pb, ports as
 * given; mac_by: the node whose pair key with pb's node MACs it (pa for a
 * genuine one; -1: zeros). */
static size_t relay_dgram(int hop, const uint8_t pa[GOSSIP_KEY_LEN], const uint8_t pb[GOSSIP_KEY_LEN],
                          const uint8_t rv[GOSSIP_KEY_LEN], uint64_t n, uint32_t ports, int mac_by,
                          uint8_t *buf, size_t cap)
{
    gossip_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOSSIP_MSG_RELAY;
    memcpy(m.punch_from, pa, GOSSIP_KEY_LEN);
    memcpy(m.punch_to, pb, GOSSIP_KEY_LEN);
    memcpy(m.relay_via, rv, GOSSIP_KEY_LEN);
    m.punch_n = n;
    m.relay_ports = ports;
    if (mac_by >= 0) {
        uint8_t key[32];
        char err[256] = "";
        CHECK(gossip_mac_key(S.nd[mac_by].wg_priv, pb, key, err, sizeof err) == 0, "%s", err);
        gossip_relay_mac(key, MESH_ID, pa, pb, rv, n, m.punch_mac);
    }
    return encode_msg(&m, S.nd[hop].name, NULL, buf, cap - GOSSIP_MAC_LEN);
}

static void deliver(int dst, int hop, const uint8_t pa[GOSSIP_KEY_LEN], const uint8_t pb[GOSSIP_KEY_LEN],
                    const uint8_t rv[GOSSIP_KEY_LEN], uint64_t n, uint32_t ports, int mac_by)
{
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = relay_dgram(hop, pa, pb, rv, n, ports, mac_by, buf, sizeof buf);
    inject(dst, S.nd[hop].addr, buf, len);
}

static int taken(void)
{
    int k = 0;
    for (int i = 0; i < S.n; i++)
        for (int j = 0; j < S.n; j++) k += S.relay_open[i][j] + S.offers[i][j];
    return k;
}

static void reset_counts(void)
{
    memset(S.relay_open, 0, sizeof S.relay_open);
    memset(S.offers, 0, sizeof S.offers);
}

static void expect_refusal(const char *what, int receiver, uint64_t before, const char *want)
{
    run_for(200);
    uint64_t after = gossip_relay_refusals(S.nd[receiver].g);
    CHECK(after == before + 1, "%s: %s counted %llu refusals, want 1", what, S.nd[receiver].name,
          (unsigned long long)(after - before));
    CHECK(taken() == 0, "%s: %d requests or offers taken", what, taken());
    CHECK(strstr(S.nd[receiver].lastlog, want) != NULL, "%s: %s logged \"%s\", want \"%s\"", what,
          S.nd[receiver].name, S.nd[receiver].lastlog, want);
    printf("    refused %s: %s\n", what, S.nd[receiver].lastlog);
    reset_counts();
    run_for(1000); /* refusals are logged at most once a second */
}

int main(void)
{
    char err[256] = "";
    sim_start(4, false, 23);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "4 nodes did not converge in 3 s");
    node *n0 = &S.nd[0], *n1 = &S.nd[1], *n2 = &S.nd[2], *n3 = &S.nd[3];
    printf("RELAY trust rules:\n");

    /* Accepted: n1 asks n0 to relay for n1-n2. */
    CHECK(gossip_relay_send(n1->g, n2->wg_pub, n0->wg_pub, S.now, err, sizeof err) == 0, "%s",
          err);
    run_for(200);
    CHECK(S.relay_open[0][1] == 1, "n0 took up %d requests of n1, want 1", S.relay_open[0][1]);
    CHECK(S.offers[1][2] == 1 && S.offer_via[1][2] == 0 && S.offer_granted[1][2] &&
              S.offer_port[1][2] == 40001,
          "n1's answer: %d, via n%d, port %d, granted %d", S.offers[1][2], S.offer_via[1][2],
          S.offer_port[1][2], S.offer_granted[1][2]);
    CHECK(S.offers[2][1] == 1 && S.offer_via[2][1] == 0 && !S.offer_granted[2][1] &&
              S.offer_port[2][1] == 40002,
          "n2's offer: %d, via n%d, port %d, granted %d", S.offers[2][1], S.offer_via[2][1],
          S.offer_port[2][1], S.offer_granted[2][1]);
    uint64_t total = 0;
    for (int i = 0; i < S.n; i++) total += gossip_relay_refusals(S.nd[i].g);
    CHECK(total == 0, "%llu refusals of a genuine RELAY", (unsigned long long)total);
    printf("    accepted: n0 relays n1 (port 40001) <-> n2 (port 40002), both told\n");
    reset_counts();
    /* A relay that does not relay answers nothing, and refuses nothing. */
    S.no_relay[3] = true;
    CHECK(gossip_relay_send(n1->g, n2->wg_pub, n3->wg_pub, S.now, err, sizeof err) == 0, "%s",
          err);
    run_for(200);
    CHECK(taken() == 0, "a --no-relay node's refusal still gave %d offers", taken());
    printf("    n3 (--no-relay) answered nothing\n");
    uint8_t nobody[GOSSIP_KEY_LEN];
    memset(nobody, 0x77, sizeof nobody);
    CHECK(gossip_relay_send(n1->g, nobody, n0->wg_pub, S.now, err, sizeof err) != 0 &&
              strstr(err, "no live member"), "send for no member: %s", err);
    CHECK(gossip_relay_send(n1->g, n2->wg_pub, n2->wg_pub, S.now, err, sizeof err) != 0 &&
              strstr(err, "relay"), "the peer as its own relay: %s", err);

    uint64_t base = (uint64_t)(S.now + S.wall_off) + 1000000;
    uint32_t ports = 40001u << 16 | 40002u;
    /* The relay: only its sender's own request, without ports, for a live peer. */
    uint64_t r0 = gossip_relay_refusals(n0->g);
    deliver(0, 3, n1->wg_pub, n2->wg_pub, n0->wg_pub, base, 0, 1);
    expect_refusal("n3 asking n0 to relay for n1-n2", 0, r0, "only for itself");
    r0 = gossip_relay_refusals(n0->g);
    deliver(0, 1, n1->wg_pub, nobody, n0->wg_pub, base + 1, 0, -1);
    expect_refusal("n1 asking n0 to relay to no member", 0, r0, "no live member");
    r0 = gossip_relay_refusals(n0->g);
    deliver(0, 1, n1->wg_pub, n0->wg_pub, n0->wg_pub, base + 2, 0, 1);
    expect_refusal("n1 asking n0 to relay to n0 itself", 0, r0, "a member of the request");
    r0 = gossip_relay_refusals(n0->g);
    deliver(0, 1, n1->wg_pub, n2->wg_pub, n0->wg_pub, base + 3, ports, 1);
    expect_refusal("n1 sending the relay an answer", 0, r0, "an answer");

    /* The peer: the requester's MAC, over the relay named too. */
    r0 = gossip_relay_refusals(n2->g);
    deliver(2, 0, n1->wg_pub, n2->wg_pub, n0->wg_pub, base + 10, ports, 0);
    expect_refusal("an offer in n1's name MACed by the relay n0", 2, r0, "does not verify");
    r0 = gossip_relay_refusals(n2->g);
    deliver(2, 3, n1->wg_pub, n2->wg_pub, n3->wg_pub, base + 11, ports, -1);
    expect_refusal("an offer in n1's name without its MAC", 2, r0, "does not verify");
    {   /* n1's genuine MAC for relay n0, passed on by n3 as its own offer. */
        gossip_msg m;
        memset(&m, 0, sizeof m);
        uint8_t key[32], buf[GOSSIP_UDP_MAX];
        CHECK(gossip_mac_key(n1->wg_priv, n2->wg_pub, key, err, sizeof err) == 0, "%s", err);
        m.type = GOSSIP_MSG_RELAY;
        memcpy(m.punch_from, n1->wg_pub, GOSSIP_KEY_LEN);
        memcpy(m.punch_to, n2->wg_pub, GOSSIP_KEY_LEN);
        memcpy(m.relay_via, n0->wg_pub, GOSSIP_KEY_LEN);
        m.punch_n = base + 12;
        m.relay_ports = ports;
        gossip_relay_mac(key, MESH_ID, n1->wg_pub, n2->wg_pub, n0->wg_pub, m.punch_n,
                         m.punch_mac);
        memcpy(m.relay_via, n3->wg_pub, GOSSIP_KEY_LEN); /* n3 names itself */
        size_t len = encode_msg(&m, n3->name, NULL, buf, sizeof buf - GOSSIP_MAC_LEN);
        r0 = gossip_relay_refusals(n2->g);
        inject(2, n3->addr, buf, len);
        expect_refusal("n1's request for relay n0 offered by n3 as its own", 2, r0,
                       "does not verify");
        memcpy(m.relay_via, n0->wg_pub, GOSSIP_KEY_LEN); /* ... or in n0's name */
        len = encode_msg(&m, n3->name, NULL, buf, sizeof buf - GOSSIP_MAC_LEN);
        r0 = gossip_relay_refusals(n2->g);
        inject(2, n3->addr, buf, len);
        expect_refusal("n1's request for relay n0 offered by n3 in n0's name", 2, r0,
                       "another relay's name");
    }
    r0 = gossip_relay_refusals(n2->g);
    deliver(2, 0, n1->wg_pub, n2->wg_pub, n0->wg_pub, base + 13, 40001u << 16, 1);
    expect_refusal("an offer with a zero port", 2, r0, "without ports");
    /* A genuine offer passes; an older number does not. */
    deliver(2, 0, n1->wg_pub, n2->wg_pub, n0->wg_pub, base + 20, ports, 1);
    run_for(100);
    CHECK(S.offers[2][1] == 1 && S.offer_port[2][1] == 40002, "the genuine offer: %d",
          S.offers[2][1]);
    reset_counts();
    r0 = gossip_relay_refusals(n2->g);
    deliver(2, 0, n1->wg_pub, n2->wg_pub, n0->wg_pub, base + 19, ports, 1);
    expect_refusal("an offer with an older number", 2, r0, "replayed");
    /* The requester: an answer about two other members. */
    r0 = gossip_relay_refusals(n3->g);
    deliver(3, 0, n1->wg_pub, n2->wg_pub, n0->wg_pub, base + 30, ports, 1);
    expect_refusal("an answer about n1-n2 sent to n3", 3, r0, "two other members");

    /* A relay's rate: at most 8 requests a second from one member. */
    r0 = gossip_relay_refusals(n0->g);
    for (int i = 0; i < 20; i++)
        deliver(0, 1, n1->wg_pub, n2->wg_pub, n0->wg_pub, base + 100 + (uint64_t)i, 0, 1);
    run_for(200);
    CHECK(gossip_relay_refusals(n0->g) == r0 + 12, "relay n0 refused %llu of 20, want 12",
          (unsigned long long)(gossip_relay_refusals(n0->g) - r0));
    CHECK(S.relay_open[0][1] == 8, "n0 took up %d of the burst, want 8", S.relay_open[0][1]);
    printf("    relay n0 answered 8 of a burst of 20, refused 12\n");

    sim_end();
    printf("test_gossip_relay: %s\n", failures ? "FAILED" : "all checks passed");
    return failures != 0;
}

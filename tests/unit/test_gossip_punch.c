/* test_gossip_punch.c — the PUNCH message's trust rules (mesh/gossip_punch.c;
 * docs/PROTOCOL.md, "Hole punching"), each refusal on its own, in the
 * simulated world of gossip_sim.h (four members n0..n3, real keys, real
 * codec and MACs): a request passes a relay only when its requester is the
 * member that sent it, for a live target other than the requester, within
 * the relay's rate; the target believes it only with the MAC of the
 * requester-target pair, a rising number, from a live member that is not
 * itself. What a stranger sends is dropped before any of this (the
 * datagram's own MAC). */
#include "gossip_sim.h"

/* A PUNCH in pa's name for the member with key pb, number n, as the node
 * `hop` sends it (the caller seals it for the receiver); mac_by: the node
 * whose pair key with pb's node MACs it (pa for a genuine one; -1: zeros). */
static size_t punch_dgram(int hop, const uint8_t pa[GOSSIP_KEY_LEN], const uint8_t pb[GOSSIP_KEY_LEN],
                          uint64_t n, int mac_by, uint8_t *buf, size_t cap)
{
    gossip_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOSSIP_MSG_PUNCH;
    memcpy(m.punch_from, pa, GOSSIP_KEY_LEN);
    memcpy(m.punch_to, pb, GOSSIP_KEY_LEN);
    m.punch_n = n;
    if (mac_by >= 0) {
        uint8_t key[32];
        char err[256] = "";
        CHECK(gossip_mac_key(S.nd[mac_by].wg_priv, pb, key, err, sizeof err) == 0, "%s", err);
        gossip_punch_mac(key, MESH_ID, pa, pb, n, m.punch_mac);
    }
    return encode_msg(&m, S.nd[hop].name, NULL, buf, cap - GOSSIP_MAC_LEN);
}

/* Hands dst the PUNCH as hop sends it (with hop's MAC for dst). */
static void deliver(int dst, int hop, const uint8_t pa[GOSSIP_KEY_LEN],
                    const uint8_t pb[GOSSIP_KEY_LEN], uint64_t n, int mac_by)
{
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = punch_dgram(hop, pa, pb, n, mac_by, buf, sizeof buf);
    inject(dst, S.nd[hop].addr, buf, len);
}

/* One refusal: the receiver counts it, nobody accepts anything, and the
 * log names why. */
static void expect_refusal(const char *what, int receiver, uint64_t before, const char *want)
{
    run_for(200); /* anything relayed arrives */
    uint64_t after = gossip_punch_refusals(S.nd[receiver].g);
    CHECK(after == before + 1, "%s: %s counted %llu refusals, want 1", what,
          S.nd[receiver].name, (unsigned long long)(after - before));
    int accepted = 0;
    for (int i = 0; i < S.n; i++)
        for (int j = 0; j < S.n; j++)
            accepted += S.punch_in[i][j];
    CHECK(accepted == 0, "%s: %d PUNCHes accepted", what, accepted);
    CHECK(strstr(S.nd[receiver].lastlog, want) != NULL, "%s: %s logged \"%s\", want \"%s\"",
          what, S.nd[receiver].name, S.nd[receiver].lastlog, want);
    printf("    refused %s: %s\n", what, S.nd[receiver].lastlog);
    run_for(1000); /* refusals are logged at most once a second */
}

static void reset_counts(void) { memset(S.punch_in, 0, sizeof S.punch_in); }

int main(void)
{
    char err[256] = "";
    sim_start(4, false, 19);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "4 nodes did not converge in 3 s");
    node *n0 = &S.nd[0], *n1 = &S.nd[1], *n2 = &S.nd[2], *n3 = &S.nd[3];
    printf("PUNCH trust rules:\n");

    /* Accepted: n1 asks n2 through n0, and through n2 itself. */
    CHECK(gossip_punch_send(n1->g, n2->wg_pub, n0->wg_pub, S.now, err, sizeof err) == 0, "%s",
          err);
    run_for(200);
    CHECK(S.punch_in[2][1] == 1, "n2 accepted %d PUNCHes of n1 relayed by n0, want 1",
          S.punch_in[2][1]);
    CHECK(gossip_punch_send(n1->g, n2->wg_pub, n2->wg_pub, S.now, err, sizeof err) == 0, "%s",
          err);
    run_for(200);
    CHECK(S.punch_in[2][1] == 2, "n2 accepted %d PUNCHes of n1 sent directly, want 2",
          S.punch_in[2][1]);
    uint64_t total = 0;
    for (int i = 0; i < S.n; i++) total += gossip_punch_refusals(S.nd[i].g);
    CHECK(total == 0, "%llu refusals of genuine PUNCHes", (unsigned long long)total);
    printf("    accepted n1 -> n2 relayed by n0 and sent directly\n");
    /* The sender refuses what it cannot send. */
    uint8_t nobody[GOSSIP_KEY_LEN];
    memset(nobody, 0x77, sizeof nobody);
    CHECK(gossip_punch_send(n1->g, nobody, n0->wg_pub, S.now, err, sizeof err) != 0 &&
              strstr(err, "no live member"), "send to no member: %s", err);
    CHECK(gossip_punch_send(n1->g, n2->wg_pub, nobody, S.now, err, sizeof err) != 0 &&
              strstr(err, "relay"), "send through no member: %s", err);
    reset_counts();

    /* A replay: a genuine request (through n0) accepted once, refused again,
     * and an older number refused too. */
    uint64_t base = (uint64_t)(S.now + S.wall_off) + 1000000;
    deliver(2, 0, n1->wg_pub, n2->wg_pub, base, 1);
    run_for(100);
    CHECK(S.punch_in[2][1] == 1, "a fresh genuine PUNCH was not accepted (%d)", S.punch_in[2][1]);
    reset_counts();
    uint64_t r0 = gossip_punch_refusals(n2->g);
    deliver(2, 0, n1->wg_pub, n2->wg_pub, base, 1);
    expect_refusal("a replayed PUNCH", 2, r0, "replayed");
    r0 = gossip_punch_refusals(n2->g);
    deliver(2, 0, n1->wg_pub, n2->wg_pub, base - 1, 1);
    expect_refusal("a PUNCH with an older number", 2, r0, "replayed");

    /* The relay forges one in n1's name (its own pair key with n2, or none). */
    r0 = gossip_punch_refusals(n2->g);
    deliver(2, 0, n1->wg_pub, n2->wg_pub, base + 10, 0);
    expect_refusal("a PUNCH in n1's name MACed by the relay n0", 2, r0, "does not verify");
    r0 = gossip_punch_refusals(n2->g);
    deliver(2, 0, n1->wg_pub, n2->wg_pub, base + 11, -1);
    expect_refusal("a PUNCH in n1's name without its MAC", 2, r0, "does not verify");
    /* ... and the genuine number after them still passes (nothing was spent). */
    deliver(2, 0, n1->wg_pub, n2->wg_pub, base + 12, 1);
    run_for(100);
    CHECK(S.punch_in[2][1] == 1, "the genuine PUNCH after the forgeries was not accepted");
    reset_counts();

    /* A relay passes on only the sender's own requests. */
    r0 = gossip_punch_refusals(n0->g);
    deliver(0, 3, n1->wg_pub, n2->wg_pub, base + 20, 1);
    expect_refusal("n3 asking relay n0 for the pair n1-n2", 0, r0, "only for itself");
    /* ... for a target that is a live member, not the requester itself. */
    r0 = gossip_punch_refusals(n0->g);
    deliver(0, 1, n1->wg_pub, nobody, base + 21, -1);
    expect_refusal("n1 asking relay n0 to pass one to no member", 0, r0, "no live member");
    r0 = gossip_punch_refusals(n0->g);
    deliver(0, 1, n1->wg_pub, n1->wg_pub, base + 22, 1);
    expect_refusal("n1 asking relay n0 to pass one to n1 itself", 0, r0, "itself");

    /* The target: a requester that is no member, itself, or dead. */
    r0 = gossip_punch_refusals(n2->g);
    deliver(2, 0, nobody, n2->wg_pub, base + 30, -1);
    expect_refusal("a PUNCH from no member, relayed by n0", 2, r0, "no live member");
    r0 = gossip_punch_refusals(n2->g);
    deliver(2, 0, n2->wg_pub, n2->wg_pub, base + 31, 2);
    expect_refusal("a PUNCH asking n2 to punch towards itself", 2, r0, "towards itself");

    /* A stranger's datagram is dropped before it is read (its MAC). */
    uint64_t drops = gossip_auth_drops(n2->g);
    {
        uint8_t buf[GOSSIP_UDP_MAX];
        size_t len = punch_dgram(1, n1->wg_pub, n2->wg_pub, base + 40, 1, buf, sizeof buf);
        inject_raw(2, "10.77.250.250", buf, len); /* no member's address, no MAC */
        run_for(100);
    }
    CHECK(gossip_auth_drops(n2->g) == drops + 1, "a stranger's PUNCH was not dropped as "
          "unauthenticated");
    CHECK(S.punch_in[2][1] == 0, "a stranger's PUNCH was accepted");
    printf("    dropped a stranger's PUNCH (unauthenticated)\n");

    /* A relay's rate: at most 8 a second from one requester. */
    r0 = gossip_punch_refusals(n0->g);
    for (int i = 0; i < 20; i++) deliver(0, 1, n1->wg_pub, n2->wg_pub, base + 100 + (uint64_t)i, 1);
    run_for(200);
    CHECK(gossip_punch_refusals(n0->g) == r0 + 12, "relay n0 refused %llu of 20 in one burst, "
          "want 12", (unsigned long long)(gossip_punch_refusals(n0->g) - r0));
    CHECK(S.punch_in[2][1] == 8, "n2 accepted %d of the burst, want 8", S.punch_in[2][1]);
    printf("    relay n0 passed 8 of a burst of 20, refused 12\n");
    reset_counts();

    /* A dead requester (n3 crashed, dead everywhere): refused. */
    crash(3);
    CHECK(run_until(3, GOSSIP_DEAD, 0, 15000) >= 0, "n3 is not dead everywhere within 15 s");
    reset_counts();
    r0 = gossip_punch_refusals(n2->g);
    deliver(2, 0, n3->wg_pub, n2->wg_pub, base + 200, 3);
    expect_refusal("a PUNCH from dead n3, relayed by n0", 2, r0, "no live member");

    sim_end();
    printf("test_gossip_punch: %s\n", failures ? "FAILED" : "all checks passed");
    return failures != 0;
}

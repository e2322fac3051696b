/* test_gossip.c — the SWIM state machine (mesh/gossip.c): failure detection
 * and membership, with several nodes in one simulated world (gossip_sim.h:
 * real keys drawn from a seeded stream, a clock advancing 50 ms per step, a
 * simulated overlay with deterministic loss, crashes, partitions and broken
 * links; nodes join the way the daemon joins them). Scenarios 1-6, 10-13,
 * 15 and 19; test_gossip_trust.c holds the refusals and admission (7, 9,
 * 16, 17), test_gossip_records.c the records themselves (8, 14, 18).
 * Timing is the default (gossip_timing_default); every scenario prints what
 * it measured in simulated time. Scenarios 10 to 13 check behaviours found
 * wrong while writing this test; their failures say "BUG". Scenario 19
 * steps the wall clock while the monotonic clock runs on.
 * GOSSIP_TEST_VERBOSE=1 prints every state change and log line. */
#include "gossip_sim.h"

/* 1. Five nodes, each joined through the one before it (so most of them
 *    learn of each other only by gossip), converge within 3 s. */
static void scenario_converge(void)
{
    sim_start(5, true, 1);
    int64_t t = run_until(-1, GOSSIP_ALIVE, 0, 3000);
    CHECK(t >= 0, "1: 5 nodes not all ALIVE everywhere after 3 s");
    if (t < 0)
        for (int o = 0; o < S.n; o++)
            print_view(o);
    /* And it stays that way. */
    run_for(10000);
    CHECK(converged(), "1: the 5 nodes no longer all ALIVE 10 s later");
    for (int o = 0; o < S.n; o++) {
        const gossip_member *const *list;
        CHECK(gossip_members(S.nd[o].g, &list) == 5, "1: %s lists %zu members, not 5",
              S.nd[o].name, gossip_members(S.nd[o].g, &list));
        for (int s = 0; s < S.n; s++)
            CHECK(TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0,
                  "1: %s suspected %s %d times, declared it dead %d times", S.nd[o].name,
                  S.nd[s].name, TR[o][s].nsuspect, TR[o][s].ndead);
    }
    printf("scenario 1 (converge, 5 nodes joined in a chain): all ALIVE everywhere after "
           "%.2f s simulated (limit 3 s), and still 10 s later (%ld datagrams in all)\n",
           secs(t), S.sent);
}

/* 2. Crash one of six: every survivor declares it DEAD within 10 s, and
 *    nobody ever suspects a live node (0% loss, 60 s). Each of the six in
 *    turn, crashed at a different phase of the probe rounds. */
static void scenario_crash(void)
{
    int64_t worst = 0, worst_first = 0, best = INT64_MAX;
    int worst_victim = -1;
    for (int v = 0; v < 6; v++) {
        sim_start(6, false, 2 + (uint64_t)v);
        int64_t tc = run_until(-1, GOSSIP_ALIVE, 0, 3000);
        CHECK(tc >= 0, "2: 6 nodes did not converge in 3 s");
        run_for(2000 + 150 * v);
        reset_tracking();
        crash(v);
        int64_t t0 = S.now;
        int64_t t = run_until(v, GOSSIP_DEAD, 0, 20000);
        CHECK(t >= 0 && t <= 10000,
              "2: crashed %s not DEAD at every survivor within 10 s (took %s%.2f s)",
              S.nd[v].name, t < 0 ? "more than " : "", secs(t < 0 ? 20000 : t));
        int64_t max_dead = 0, first_dead = INT64_MAX, first_suspect = INT64_MAX;
        for (int o = 0; o < S.n; o++) {
            if (o == v)
                continue;
            if (TR[o][v].ndead && TR[o][v].dead_ms - t0 > max_dead)
                max_dead = TR[o][v].dead_ms - t0;
            if (TR[o][v].ndead && TR[o][v].dead_ms - t0 < first_dead)
                first_dead = TR[o][v].dead_ms - t0;
            if (TR[o][v].nsuspect && TR[o][v].suspect_ms - t0 < first_suspect)
                first_suspect = TR[o][v].suspect_ms - t0;
        }
        /* Never dead before the shortest suspicion timeout has run. */
        CHECK(t < 0 || first_dead - first_suspect >= 2500,
              "2: %s declared DEAD %.2f s after the first suspicion (at least 2.5 s)",
              S.nd[v].name, secs(first_dead - first_suspect));
        if (t >= 0 && max_dead > worst) {
            worst = max_dead;
            worst_first = first_suspect;
            worst_victim = v;
        }
        if (t >= 0 && max_dead < best)
            best = max_dead;
        /* 60 s after the crash: the dead stays dead, no live node suspected. */
        run_for(60000 - (S.now - t0));
        for (int o = 0; o < S.n; o++) {
            if (o == v)
                continue;
            CHECK(sees(o, v, GOSSIP_DEAD), "2: %s lists crashed %s as %s 60 s later",
                  S.nd[o].name, S.nd[v].name, state_of(o, v));
            CHECK(TR[o][v].ndead == 1, "2: %s declared crashed %s dead %d times", S.nd[o].name,
                  S.nd[v].name, TR[o][v].ndead);
            for (int s = 0; s < S.n; s++) {
                if (s == v || s == o)
                    continue;
                CHECK(TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0,
                      "2: with %s crashed, %s suspected live %s %d times, declared it dead %d "
                      "times (0%% loss)",
                      S.nd[v].name, S.nd[o].name, S.nd[s].name, TR[o][s].nsuspect,
                      TR[o][s].ndead);
                CHECK(sees(o, s, GOSSIP_ALIVE), "2: %s lists live %s as %s", S.nd[o].name,
                      S.nd[s].name, state_of(o, s));
            }
        }
    }
    printf("scenario 2 (crash 1 of 6, each in turn, 0%% loss): DEAD at every survivor after "
           "%.2f .. %.2f s simulated (worst: n%d, first suspected after %.2f s; limit 10 s); "
           "no live node suspected in 60 s\n",
           secs(best), secs(worst), worst_victim, secs(worst_first));
}

/* 2b. A broken link: n0 and n1 cannot reach each other (nothing passes
 *     between them either way), both reach everyone else. The indirect
 *     probes (PING_REQ through others) keep either from suspecting the other
 *     for 30 s. */
static void scenario_broken_link(void)
{
    sim_start(5, false, 21);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "2b: 5 nodes did not converge in 3 s");
    run_for(1000);
    reset_tracking();
    S.cut[0][1] = S.cut[1][0] = true;
    run_for(30000);
    for (int o = 0; o < S.n; o++)
        for (int s = 0; s < S.n; s++)
            CHECK(o == s || (TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0),
                  "2b: with the link n0-n1 broken, %s suspected %s %d times, declared it dead "
                  "%d times",
                  S.nd[o].name, S.nd[s].name, TR[o][s].nsuspect, TR[o][s].ndead);
    CHECK(converged(), "2b: not all ALIVE with the link n0-n1 broken");
    CHECK(S.cut_drops > 0, "2b: nothing crossed the broken link (no probe between n0 and n1)");
    printf("scenario 2b (link n0-n1 broken for 30 s, 5 nodes): no suspicion anywhere; %ld "
           "datagrams lost on the link\n",
           S.cut_drops);
}

/* 3. 10% datagram loss, six nodes, 120 s: suspicions may happen, but each is
 *    refuted (the owner's incarnation rises) and nobody is declared DEAD. */
static void scenario_loss(void)
{
    int total_suspect = 0, total_refuted = 0;
    long total_lost = 0, total_sent = 0;
    uint64_t max_inc = 0;
    static const uint64_t seeds[] = {3, 33, 333};
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
        sim_start(6, false, seeds[k]);
        CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "3: 6 nodes did not converge in 3 s");
        reset_tracking();
        long sent0 = S.sent;
        S.loss = 0.10;
        run_for(120000);
        total_lost += S.lost;
        total_sent += S.sent - sent0;
        /* The network heals; whatever suspicion is still open resolves. */
        S.loss = 0;
        run_for(10000);
        CHECK(converged(), "3 (seed %" PRIu64 "): not all ALIVE everywhere after the loss",
              seeds[k]);
        for (int o = 0; o < S.n; o++)
            for (int s = 0; s < S.n; s++) {
                if (o == s)
                    continue;
                track *t = &TR[o][s];
                total_suspect += t->nsuspect;
                total_refuted += t->refuted;
                CHECK(t->ndead == 0,
                      "3 (seed %" PRIu64 "): %s declared live %s DEAD %d times (10%% loss; "
                      "last at %.2f s)",
                      seeds[k], S.nd[o].name, S.nd[s].name, t->ndead, secs(t->dead_ms - T0));
                CHECK(!t->pending, "3 (seed %" PRIu64 "): %s's suspicion of %s never resolved",
                      seeds[k], S.nd[o].name, S.nd[s].name);
                CHECK(t->flat == 0,
                      "3 (seed %" PRIu64 "): %s took %s from SUSPECT back to ALIVE %d times "
                      "without a higher incarnation",
                      seeds[k], S.nd[o].name, S.nd[s].name, t->flat);
                CHECK(t->refuted == t->nsuspect,
                      "3 (seed %" PRIu64 "): %s suspected %s %d times, refuted %d", seeds[k],
                      S.nd[o].name, S.nd[s].name, t->nsuspect, t->refuted);
            }
        for (int s = 0; s < S.n; s++) {
            uint64_t inc = gossip_self(S.nd[s].g)->rec.incarnation;
            if (inc > max_inc)
                max_inc = inc;
            /* Everyone holds the owner's latest record. */
            for (int o = 0; o < S.n; o++)
                CHECK(see(o, s) && see(o, s)->rec.incarnation == inc,
                      "3: %s holds %s at incarnation %" PRIu64 ", the owner is at %" PRIu64,
                      S.nd[o].name, S.nd[s].name, see(o, s) ? see(o, s)->rec.incarnation : 0,
                      inc);
        }
    }
    printf("scenario 3 (6 nodes, 10%% loss, 120 s simulated, 3 runs): %ld of %ld datagrams "
           "lost; %d suspicions of live nodes (observer-subject pairs), %d refuted by a higher "
           "incarnation (highest incarnation %" PRIu64 "), none declared DEAD\n",
           total_lost, total_sent, total_suspect, total_refuted, max_inc);
}

/* 4. A forged SUSPECT about a node, in an UPDATE from another member's
 *    address and name, reaches the node itself (and one other member):
 *    the node refutes with a higher incarnation, everyone ends ALIVE. */
static void scenario_refute(void)
{
    sim_start(5, false, 4);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "4: 5 nodes did not converge in 3 s");
    run_for(1000);
    reset_tracking();
    const int target = 2, forger = 4, witness = 1;
    uint64_t inc = gossip_self(S.nd[target].g)->rec.incarnation;
    gossip_update u;
    claim(&u, GOSSIP_SUSPECT, &S.nd[target], inc, S.nd[forger].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[forger].name, &u, buf, sizeof buf);
    inject(witness, S.nd[forger].addr, buf, len);
    CHECK(sees(witness, target, GOSSIP_SUSPECT), "4: %s lists %s as %s after a SUSPECT claim",
          S.nd[witness].name, S.nd[target].name, state_of(witness, target));
    inject(target, S.nd[forger].addr, buf, len);
    CHECK(strstr(S.nd[target].lastlog, "refuting"), "4: the refutation was not logged (\"%s\")",
          S.nd[target].lastlog);
    uint64_t now_inc = gossip_self(S.nd[target].g)->rec.incarnation;
    CHECK(now_inc == inc + 1, "4: %s's incarnation went %" PRIu64 " -> %" PRIu64
          " on a SUSPECT about itself (want +1)", S.nd[target].name, inc, now_inc);
    CHECK(gossip_self(S.nd[target].g)->state == GOSSIP_ALIVE, "4: %s thinks itself %s",
          S.nd[target].name, gossip_state_name(gossip_self(S.nd[target].g)->state));
    int64_t t = run_until(target, GOSSIP_ALIVE, inc + 1, 3000);
    CHECK(t >= 0, "4: not every node lists %s ALIVE at incarnation %" PRIu64 " 3 s after the "
          "refutation", S.nd[target].name, inc + 1);
    run_for(10000);
    CHECK(all_see(target, GOSSIP_ALIVE, inc + 1) && converged(),
          "4: not all ALIVE 10 s after the refutation");
    CHECK(gossip_self(S.nd[target].g)->rec.incarnation == inc + 1,
          "4: %s's incarnation kept rising (%" PRIu64 ")", S.nd[target].name,
          gossip_self(S.nd[target].g)->rec.incarnation);
    for (int o = 0; o < S.n; o++) {
        if (o == target)
            continue;
        CHECK(see(o, target)->rec.incarnation == inc + 1,
              "4: %s holds %s at incarnation %" PRIu64, S.nd[o].name, S.nd[target].name,
              see(o, target)->rec.incarnation);
        CHECK(TR[o][target].ndead == 0, "4: %s declared %s dead", S.nd[o].name,
              S.nd[target].name);
    }
    CHECK(TR[witness][target].refuted == 1, "4: %s's suspicion of %s not refuted once (%d)",
          S.nd[witness].name, S.nd[target].name, TR[witness][target].refuted);
    printf("scenario 4 (forged SUSPECT from %s about %s): incarnation %" PRIu64 " -> %" PRIu64
           " at once; every node lists it ALIVE at the new incarnation after %.2f s "
           "simulated\n",
           S.nd[forger].name, S.nd[target].name, inc, now_inc, secs(t));
}

/* 5. A crashed node, once DEAD everywhere, restarts: same keys and name, a
 *    higher incarnation, the others' records from its saved view
 *    (gossip_add_known, no sync at start): ALIVE everywhere within 10 s. */
static void scenario_restart(void)
{
    sim_start(5, false, 5);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "5: 5 nodes did not converge in 3 s");
    run_for(3000);
    const int r = 2;
    uint64_t inc = gossip_self(S.nd[r].g)->rec.incarnation;
    crash(r);
    int64_t td = run_until(r, GOSSIP_DEAD, 0, 20000);
    CHECK(td >= 0 && td <= 10000, "5: crashed %s not DEAD everywhere within 10 s",
          S.nd[r].name);
    run_for(5000);
    reset_tracking();
    node *x = &S.nd[r];
    gossip_destroy(x->g);
    x->g = NULL;
    start_node(x, inc + 1);
    for (int o = 0; o < S.n; o++) {
        if (o == r)
            continue;
        char err[512] = "";
        int rc = gossip_add_known(x->g, &gossip_self(S.nd[o].g)->sig, S.now, err, sizeof err);
        CHECK(rc == 0, "5: restarted %s: add_known %s: %s", x->name, S.nd[o].name, err);
    }
    int64_t t = run_until(r, GOSSIP_ALIVE, inc + 1, 10000);
    CHECK(t >= 0, "5: restarted %s not ALIVE everywhere within 10 s", x->name);
    if (t < 0)
        for (int o = 0; o < S.n; o++)
            print_view(o);
    int64_t tall = run_until(-1, GOSSIP_ALIVE, 0, 10000);
    CHECK(tall >= 0, "5: not all ALIVE everywhere 10 s after the restart");
    run_for(20000);
    CHECK(converged(), "5: not all ALIVE everywhere 20 s after the restart");
    for (int o = 0; o < S.n; o++)
        for (int s = 0; s < S.n; s++)
            CHECK(o == s || (TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0),
                  "5: after the restart %s suspected %s %d times, declared it dead %d times",
                  S.nd[o].name, S.nd[s].name, TR[o][s].nsuspect, TR[o][s].ndead);
    printf("scenario 5 (restart of a dead node, incarnation %" PRIu64 " -> %" PRIu64
           "): DEAD everywhere %.2f s after the crash; ALIVE everywhere %.2f s simulated after "
           "the restart (limit 10 s)\n",
           inc, inc + 1, secs(td), secs(t));
}

/* 6. gossip_leave: LEFT everywhere within 2 s, and still LEFT (never
 *    SUSPECT or DEAD) 30 s later though it answers nothing any more. */
static void scenario_leave(void)
{
    sim_start(5, false, 6);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "6: 5 nodes did not converge in 3 s");
    run_for(2500);
    reset_tracking();
    const int l = 3;
    char err[256] = "";
    uint64_t inc = gossip_self(S.nd[l].g)->rec.incarnation;
    CHECK(gossip_leave(S.nd[l].g, S.now, err, sizeof err) == 0, "6: leave: %s", err);
    CHECK(gossip_self(S.nd[l].g)->state == GOSSIP_LEFT &&
              gossip_self(S.nd[l].g)->rec.left == 1 &&
              gossip_self(S.nd[l].g)->rec.incarnation == inc + 1,
          "6: the leaver's own record is not LEFT at the next incarnation");
    crash(l); /* what it sent on leaving is on its way; then it is gone */
    int64_t t = run_until(l, GOSSIP_LEFT, inc + 1, 2000);
    CHECK(t >= 0, "6: %s not LEFT everywhere within 2 s", S.nd[l].name);
    run_for(30000);
    for (int o = 0; o < S.n; o++) {
        if (o == l)
            continue;
        CHECK(sees(o, l, GOSSIP_LEFT), "6: %s lists %s as %s 30 s after it left", S.nd[o].name,
              S.nd[l].name, state_of(o, l));
        CHECK(TR[o][l].nsuspect == 0 && TR[o][l].ndead == 0 && TR[o][l].nleft == 1,
              "6: %s: %s suspected %d, dead %d, left %d times", S.nd[o].name, S.nd[l].name,
              TR[o][l].nsuspect, TR[o][l].ndead, TR[o][l].nleft);
        for (int s = 0; s < S.n; s++)
            CHECK(s == l || s == o || (TR[o][s].nsuspect == 0 && TR[o][s].ndead == 0),
                  "6: %s suspected %s %d times after %s left", S.nd[o].name, S.nd[s].name,
                  TR[o][s].nsuspect, S.nd[l].name);
    }
    CHECK(converged(), "6: the others are not all ALIVE");
    printf("scenario 6 (leave): LEFT everywhere after %.2f s simulated (limit 2 s); still LEFT "
           "30 s later\n",
           secs(t));
}

/* 10. A partition heals. Five nodes split {n0 n1 n2} | {n3 n4} for 20 s:
 *     each side declares the other DEAD (right). When the network heals
 *     they must find each other again. gossip.c never sends anything to a
 *     DEAD member (no probe, no sync, no broadcast), so two sides that
 *     declared each other dead never talk again: any outage longer than the
 *     probe round plus the suspicion timeout (~7 s) splits the mesh for
 *     good (only a restart, which syncs with its saved view, mends it). */
static void scenario_partition(void)
{
    sim_start(5, false, 10);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "10: 5 nodes did not converge in 3 s");
    run_for(2000);
    S.nd[3].group = S.nd[4].group = 1;
    run_for(20000);
    bool split = true;
    for (int o = 0; o < S.n; o++)
        for (int s = 0; s < S.n; s++)
            if (S.nd[o].group != S.nd[s].group && !sees(o, s, GOSSIP_DEAD))
                split = false;
    CHECK(split, "10: after 20 s of partition the sides do not list each other DEAD");
    S.nd[3].group = S.nd[4].group = 0;
    reset_tracking();
    int64_t t = run_until(-1, GOSSIP_ALIVE, 0, 60000);
    CHECK(t >= 0,
          "10: BUG (gossip.c): a partition of 20 s healed, but 60 s later the two sides still "
          "list each other DEAD: nothing is ever sent to a DEAD member, so the mesh stays "
          "split");
    if (t < 0)
        for (int o = 0; o < S.n; o++)
            print_view(o);
    printf("scenario 10 (partition {n0 n1 n2} | {n3 n4} for 20 s, then healed): %s\n",
           t >= 0 ? "merged again" : "still split 60 s after the heal");
    if (t >= 0)
        printf("    all ALIVE everywhere %.2f s simulated after the heal\n", secs(t));
}

/* 11. A SUSPECT claim about the highest incarnation (2^64-1), from a member,
 *     to the node itself. refute() raises the node's incarnation to inc + 1,
 *     which wraps to 0: every later record of the node (0, 1, 2, ...) is
 *     older than what the others hold, so its changes never spread again.
 *     (Had another member taken the claim too, it would spread and no record
 *     could ever beat it: the node would be DEAD everywhere for good. The
 *     precedence rules allow that, so it is not checked here.) */
static void scenario_incarnation_wrap(void)
{
    sim_start(4, false, 11);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "11: 4 nodes did not converge in 3 s");
    run_for(1000);
    reset_tracking();
    const int target = 1, forger = 3;
    uint64_t inc = gossip_self(S.nd[target].g)->rec.incarnation;
    gossip_update u;
    claim(&u, GOSSIP_SUSPECT, &S.nd[target], UINT64_MAX, S.nd[forger].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[forger].name, &u, buf, sizeof buf);
    inject(target, S.nd[forger].addr, buf, len);
    uint64_t after = gossip_self(S.nd[target].g)->rec.incarnation;
    CHECK(after >= inc,
          "11: BUG (gossip.c refute): a SUSPECT claim at incarnation 2^64-1 wrapped %s's "
          "incarnation from %" PRIu64 " to %" PRIu64,
          S.nd[target].name, inc, after);
    CHECK(after == inc, "11: %s's incarnation went %" PRIu64 " -> %" PRIu64 " on a claim it "
          "never signed", S.nd[target].name, inc, after);
    /* Issue 12, 3: one unsigned DEAD claim at 2^64-1 to every other member
     * evicted the target for ever (its refutation is capped at its own
     * incarnation + 1). A claim beyond the record a member holds is ignored. */
    claim(&u, GOSSIP_DEAD, &S.nd[target], UINT64_MAX, S.nd[forger].name);
    len = update_datagram(S.nd[forger].name, &u, buf, sizeof buf);
    for (int o = 0; o < S.n; o++)
        if (o != target && o != forger)
            inject(o, S.nd[forger].addr, buf, len);
    for (int o = 0; o < S.n; o++)
        CHECK(o == target || o == forger || sees(o, target, GOSSIP_ALIVE),
              "11: a DEAD claim at 2^64-1 made %s list %s as %s", S.nd[o].name,
              S.nd[target].name, state_of(o, target));
    run_for(15000);
    for (int o = 0; o < S.n; o++)
        CHECK(o == target || sees(o, target, GOSSIP_ALIVE),
              "11: 15 s after the claim, %s lists %s as %s", S.nd[o].name, S.nd[target].name,
              state_of(o, target));
    /* Its own changes still reach the others. */
    const char *ep = "203.0.113.50:51820";
    gossip_add_observed(S.nd[target].g, ep, S.now);
    run_for(3000);
    bool spread = true;
    for (int o = 0; o < S.n; o++) {
        const gossip_member *m = see(o, target);
        if (o != target && (!m || m->rec.nendpoints < 1 || strcmp(m->rec.endpoints[0], ep)))
            spread = false;
    }
    CHECK(spread, "11: BUG (gossip.c): after the wrap, %s's new record (incarnation %" PRIu64
          ") does not reach the others",
          S.nd[target].name, gossip_self(S.nd[target].g)->rec.incarnation);
    printf("scenario 11 (SUSPECT at incarnation 2^64-1 to the node): %s's incarnation "
           "%" PRIu64 " -> %" PRIu64 "; its later changes %s\n",
           S.nd[target].name, inc, after, spread ? "spread" : "do not spread");
}

/* 12. Precedence (PROTOCOL.md) and the bound on claims (issue 12, 3): a
 *     claim names the incarnation of the record its maker holds. n0 holds
 *     n2 at incarnation i. A DEAD claim at i + 2 (beyond any record of n2
 *     n0 has seen; before the fix it stood until n2 outbid it) is ignored;
 *     DEAD at i stands, a record at i does not lift it, one at i + 1 does. */
static void scenario_precedence(void)
{
    sim_start(3, false, 12);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "12: 3 nodes did not converge in 3 s");
    run_for(1000);
    const int obs = 0, x = 2, relay = 1;
    char err[256] = "";
    uint64_t inc = gossip_self(S.nd[x].g)->rec.incarnation;
    gossip_update u;
    claim(&u, GOSSIP_DEAD, &S.nd[x], inc + 2, S.nd[relay].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[relay].name, &u, buf, sizeof buf);
    inject(obs, S.nd[relay].addr, buf, len);
    CHECK(sees(obs, x, GOSSIP_ALIVE), "12: %s lists %s %s after a DEAD claim at %" PRIu64
          ", beyond the record it holds (%" PRIu64 ")", S.nd[obs].name, S.nd[x].name,
          state_of(obs, x), inc + 2, inc);
    crash(x); /* so it does not refute what follows */
    claim(&u, GOSSIP_DEAD, &S.nd[x], inc, S.nd[relay].name);
    len = update_datagram(S.nd[relay].name, &u, buf, sizeof buf);
    inject(obs, S.nd[relay].addr, buf, len);
    CHECK(sees(obs, x, GOSSIP_DEAD), "12: %s lists %s %s after DEAD at %" PRIu64,
          S.nd[obs].name, S.nd[x].name, state_of(obs, x), inc);
    gossip_record r = gossip_self(S.nd[x].g)->rec;
    memset(&u, 0, sizeof u);
    u.state = GOSSIP_ALIVE;
    u.rec = gossip_self(S.nd[x].g)->sig;
    len = update_datagram(S.nd[relay].name, &u, buf, sizeof buf);
    inject(obs, S.nd[relay].addr, buf, len);
    CHECK(sees(obs, x, GOSSIP_DEAD), "12: DEAD at %" PRIu64 " lifted by the record of the same "
          "incarnation: %s lists %s %s", inc, S.nd[obs].name, S.nd[x].name, state_of(obs, x));
    r.incarnation = inc + 1;
    CHECK(gossip_record_sign(&r, S.nd[x].id_priv, &u.rec, err, sizeof err) == 0, "12: sign: %s",
          err);
    u.rec.adm = gossip_self(S.nd[x].g)->sig.adm;
    len = update_datagram(S.nd[relay].name, &u, buf, sizeof buf);
    inject(obs, S.nd[relay].addr, buf, len);
    CHECK(sees(obs, x, GOSSIP_ALIVE), "12: DEAD at %" PRIu64 " not lifted by the record at %"
          PRIu64 ": %s lists %s %s", inc, inc + 1, S.nd[obs].name, S.nd[x].name,
          state_of(obs, x));
    printf("scenario 12 (claims bounded by the record): DEAD at %" PRIu64 " ignored, DEAD at %"
           PRIu64 " stands until the record at %" PRIu64 "\n", inc + 2, inc, inc + 1);
}

/* 13. Lifeguard: a suspicion's timeout shrinks with *independent*
 *     confirmations (PROTOCOL.md; gossip_member.confirmations: "independent
 *     others that suspect it too"). One member accuses n4 (which is down,
 *     so it cannot refute); within 200 ms nobody can have probed n4 and
 *     failed (a failed probe takes 1 s). But every member that adopts the
 *     suspicion re-broadcasts it with itself as `by` (update_of writes this
 *     node's name into `from`), so each relay counts as a confirmation: one
 *     accusation reaches the shortest timeout, as if every member had
 *     found n4 unresponsive. */
static void scenario_confirmations(void)
{
    sim_start(5, false, 13);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "13: 5 nodes did not converge in 3 s");
    run_for(1000);
    const int x = 4, accuser = 0, b = 1;
    crash(x);
    gossip_update u;
    claim(&u, GOSSIP_SUSPECT, &S.nd[x], gossip_self(S.nd[x].g)->rec.incarnation,
          S.nd[accuser].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[accuser].name, &u, buf, sizeof buf);
    int64_t t0 = S.now;
    inject(b, S.nd[accuser].addr, buf, len);
    run_for(200);
    const gossip_member *m = see(b, x);
    CHECK(m && m->state == GOSSIP_SUSPECT, "13: %s lists %s as %s", S.nd[b].name, S.nd[x].name,
          state_of(b, x));
    int conf = m ? m->confirmations : -1;
    CHECK(conf == 0,
          "13: BUG (gossip.c update_of/apply_claim): 200 ms after one accusation, %s counts %d "
          "independent confirmations of %s's suspicion (by %s, %s, %s, %s): relayed claims "
          "count as confirmations",
          S.nd[b].name, conf, S.nd[x].name, m ? m->suspectors[0] : "", m ? m->suspectors[1] : "",
          m ? m->suspectors[2] : "", m ? m->suspectors[3] : "");
    int64_t t = run_until(x, GOSSIP_DEAD, 0, 10000);
    printf("scenario 13 (one accusation of a silent node, 5 nodes): %d confirmations counted "
           "after 200 ms (want 0); DEAD everywhere %.2f s simulated after the accusation\n",
           conf, secs(t < 0 ? -1 : S.now - t0));
}

/* 15. The SYNC stays within its limits: a view of 301 members, 260 of them
 *     DEAD (a record and a claim each), holds more updates than one message
 *     may carry (512). gossip_sync_message leaves members out (logged)
 *     rather than failing, this node first; the message encodes within
 *     GOSSIP_TCP_MAX and decodes. */

static void scenario_big_view(void)
{
    sim_end();
    enum { MEMBERS = 300, DEAD = 260 };
    static node other[MEMBERS];
    node self;
    memset(&self, 0, sizeof self);
    S.n = 0;
    char err[256] = "";
    /* Keys without the world's collision check: a collision only drops one. */
    node *all[MEMBERS + 1];
    all[0] = &self;
    for (int i = 0; i <= MEMBERS; i++) {
        node *x = i ? &other[i - 1] : &self;
        if (i) {
            memset(x, 0, sizeof *x);
            all[i] = x;
        }
        snprintf(x->name, sizeof x->name, "m%d", i);
        for (bool taken = true; taken;) {
            if (seeded_keys(&S.keyrng, x, err, sizeof err) != 0 ||
                mesh_overlay_address(PREFIX, x->wg_pub, x->addr, sizeof x->addr, err,
                                     sizeof err) != 0) {
                CHECK(0, "15: keys: %s", err);
                return;
            }
            /* A joiner whose address is taken draws a new key (scenario 18). */
            taken = false;
            for (int k = 0; k < i; k++)
                taken |= strcmp(all[k]->addr, x->addr) == 0;
        }
    }
    if (keys_mesh_id(self.id_pub, MESH_ID, err, sizeof err) != 0) {
        CHECK(0, "15: mesh id: %s", err);
        return;
    }
    gossip_config c;
    memset(&c, 0, sizeof c);
    c.prefix = PREFIX;
    self_record(&self, 1, &c.self);
    make_job(0, 15, 4000);
    memcpy(c.self.job, jobtext, strlen(jobtext) + 1);
    memcpy(c.id_priv, self.id_priv, GOSSIP_KEY_LEN);
    memcpy(c.wg_priv, self.wg_priv, GOSSIP_KEY_LEN);
    c.hooks = (gossip_hooks){.send = quiet_send, .log = count_log};
    gossip *g = NULL;
    if (gossip_create(&g, &c, S.now, err, sizeof err) != 0) {
        CHECK(0, "15: create: %s", err);
        return;
    }
    int known = 0;
    for (int i = 1; i <= MEMBERS; i++) {
        gossip_record r;
        self_record(all[i], 1, &r);
        make_job(i, 15, 4000);
        memcpy(r.job, jobtext, strlen(jobtext) + 1);
        gossip_signed sg;
        if (gossip_record_sign(&r, all[i]->id_priv, &sg, err, sizeof err) != 0 ||
            gossip_admission_sign(&r, self.id_priv, T0 + i, &sg.adm, err, sizeof err) != 0) {
            CHECK(0, "15: sign: %s", err);
            continue;
        }
        known += gossip_add_known(g, &sg, S.now, err, sizeof err) == 0;
    }
    /* Distinct addresses (drawn again on a collision): every one is known. */
    CHECK(known == MEMBERS, "15: only %d of %d members known", known, MEMBERS);
    /* DEAD claims from m1, eight to a datagram. */
    gossip_update u[8];
    uint8_t buf[GOSSIP_UDP_MAX];
    for (int i = 2; i < 2 + DEAD; i += 8) {
        gossip_msg m;
        memset(&m, 0, sizeof m);
        m.type = GOSSIP_MSG_UPDATE;
        for (int k = 0; k < 8 && i + k < 2 + DEAD; k++)
            claim(&u[m.nupdates++], GOSSIP_DEAD, all[i + k], 1, all[1]->name);
        m.updates = u;
        size_t len = encode_msg(&m, all[1]->name, NULL, buf, GOSSIP_UDP_MAX - GOSSIP_MAC_LEN);
        len = seal(all[1], &self, buf, len);
        uint8_t *copy = malloc(len);
        memcpy(copy, buf, len);
        gossip_receive(g, all[1]->addr, PORT, copy, len, S.now);
        free(copy);
    }
    const gossip_member *const *list;
    size_t n = gossip_members(g, &list), ndead = 0;
    for (size_t i = 0; i < n; i++)
        ndead += list[i]->state == GOSSIP_DEAD;
    CHECK(ndead == DEAD, "15: %zu members DEAD, want %d", ndead, DEAD);
    gossip_msg m, back;
    big_view_logs = 0;
    int rc = gossip_sync_message(g, &m, true, err, sizeof err);
    CHECK(rc == 0, "15: sync message: %s", err);
    if (rc == 0) {
        CHECK(m.nupdates <= GOSSIP_MAX_UPDATES && m.nupdates > 400,
              "15: %d updates in the SYNC", m.nupdates);
        CHECK(big_view_logs == 1, "15: leaving members out was logged %d times", big_view_logs);
        gossip_record r0;
        CHECK(m.nupdates > 0 && gossip_record_open(&m.updates[0].rec, &r0, err, sizeof err) == 0 &&
                  strcmp(r0.name, "m0") == 0,
              "15: the first update is not this node's record");
        uint8_t *tcp = malloc(GOSSIP_TCP_MAX);
        size_t len = 0;
        rc = gossip_encode(&m, tcp, GOSSIP_TCP_MAX, &len, err, sizeof err);
        CHECK(rc == 0 && len <= GOSSIP_TCP_MAX, "15: encode the SYNC: %s", err);
        if (rc == 0) {
            rc = gossip_decode(tcp, len, &back, err, sizeof err);
            CHECK(rc == 0 && back.nupdates == m.nupdates, "15: decode the SYNC: %s", err);
            if (rc == 0)
                gossip_msg_free(&back);
        }
        printf("scenario 15 (big view): %zu members, %zu DEAD: the SYNC carries %d updates "
               "(%zu bytes, limits %d updates, %zu bytes)\n",
               n, ndead, m.nupdates, len, GOSSIP_MAX_UPDATES, GOSSIP_TCP_MAX);
        free(tcp);
        gossip_msg_free(&m);
    }
    gossip_destroy(g);
}

/* 19. The wall clock is stepped while the monotonic clock runs on (NTP, a
 *     laptop's suspend, an operator): gossip's timers run on now_ms only,
 *     so with the wall clock set back 1 h and then forward 1 day nobody is
 *     suspected, probes go on at their rate (no timer held back for an
 *     hour), a crash is still found DEAD no sooner than the suspicion
 *     timeout and no later than 10 s (no timer fired at once), while what
 *     is signed carries the wall clock: a record's signed_ms is the stepped
 *     time, and a member whose clock went back before its own admission
 *     still admits a joiner the others accept (its admission is dated no
 *     earlier than its own). Before the daemon's timers moved to
 *     CLOCK_MONOTONIC the daemon gave gossip one real-time clock for both. */
static void scenario_clock_steps(void)
{
    char err[512] = "";
    sim_start(4, false, 19);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "19: 4 nodes did not converge in 3 s");
    run_for(5000);
    reset_tracking();
    long s0 = S.sent;
    run_for(10000);
    long calm = S.sent - s0;

    S.wall_off = -(int64_t)3600 * 1000; /* back 1 h */
    s0 = S.sent;
    run_for(10000);
    long back = S.sent - s0;
    CHECK(gossip_set_job(S.nd[1].g, "{\"clock\":\"back\"}", S.now, err, sizeof err) == 0,
          "19: set_job: %s", err);
    CHECK(gossip_self(S.nd[1].g)->rec.signed_ms == S.now + S.wall_off,
          "19: n1's record signed at %lld, not the wall clock %lld",
          (long long)gossip_self(S.nd[1].g)->rec.signed_ms, (long long)(S.now + S.wall_off));

    /* A joiner admitted by n1, whose wall clock is now an hour before its
     * own admission. */
    S.n = 5;
    node *x = &S.nd[4];
    memset(x, 0, sizeof *x);
    x->idx = 4;
    snprintf(x->name, sizeof x->name, "n4");
    new_keys(x);
    join(4, 1);
    const gossip_member *jm = see(1, 4);
    CHECK(jm && jm->sig.adm.at_ms >= see(1, 1)->sig.adm.at_ms,
          "19: n1 dated n4's admission %lld, before its own %lld",
          jm ? (long long)jm->sig.adm.at_ms : -1LL, (long long)see(1, 1)->sig.adm.at_ms);
    int64_t tj = run_until(-1, GOSSIP_ALIVE, 0, 5000);
    CHECK(tj >= 0, "19: n4, admitted by n1 with its clock set back 1 h, is not ALIVE "
          "everywhere after 5 s");

    S.wall_off = (int64_t)24 * 3600 * 1000; /* forward 1 day */
    s0 = S.sent;
    run_for(10000);
    long fwd = S.sent - s0;
    for (int o = 0; o < S.n; o++)
        for (int m = 0; m < S.n; m++)
            CHECK(TR[o][m].nsuspect == 0 && TR[o][m].ndead == 0,
                  "19: with the wall clock stepped, %s suspected %s %d times (dead %d)",
                  S.nd[o].name, S.nd[m].name, TR[o][m].nsuspect, TR[o][m].ndead);
    /* 4 nodes then 5 probe once a second each: the rate per node holds. */
    double r_back = (double)back / calm, r_fwd = (double)fwd / calm * 4.0 / 5.0;
    CHECK(r_back > 0.75 && r_back < 1.33 && r_fwd > 0.75 && r_fwd < 1.33,
          "19: datagrams per 10 s: %ld steady, %ld after 1 h back, %ld after 1 day forward "
          "(a timer held back or fired early)", calm, back, fwd);

    crash(3);
    int64_t t0 = S.now;
    int64_t td = run_until(3, GOSSIP_DEAD, 0, 10000);
    CHECK(td >= 2500, "19: n3 found DEAD %.2f s after its crash (before the suspicion "
          "timeout: a timer fired early)", secs(td));
    CHECK(td >= 0, "19: n3 not DEAD everywhere 10 s after its crash (a timer never fired)");
    CHECK(TR[0][3].nsuspect >= 1 && TR[0][3].suspect_ms - t0 >= 500,
          "19: n0 suspected n3 %.2f s after the crash", secs(TR[0][3].suspect_ms - t0));
    printf("scenario 19 (wall clock 1 h back, then 1 day forward): no suspicion; datagrams per "
           "10 s %ld steady, %ld back, %ld forward (5 nodes); a joiner admitted across the "
           "step is ALIVE everywhere after %.2f s; a crash DEAD everywhere after %.2f s\n",
           calm, back, fwd, secs(tj), secs(td));
}

int main(void)
{
    S.verbose = getenv("GOSSIP_TEST_VERBOSE") != NULL;
    gossip_timing t;
    gossip_timing_default(&t);
    printf("timing: probe %d ms, probe timeout %d ms, indirect %d, suspicion %d..%d ms, "
           "sync %d ms, retransmit x%d; step %d ms\n",
           t.probe_interval_ms, t.probe_timeout_ms, t.indirect_k, t.suspicion_min_ms,
           t.suspicion_max_ms, t.sync_interval_ms, t.retransmit_mult, STEP_MS);
    scenario_converge();
    scenario_crash();
    scenario_broken_link();
    scenario_loss();
    scenario_refute();
    scenario_restart();
    scenario_leave();
    scenario_partition();
    scenario_incarnation_wrap();
    scenario_precedence();
    scenario_confirmations();
    scenario_big_view();
    scenario_clock_steps();
    sim_end();
    fflush(stdout);
    if (failures) {
        fprintf(stderr, "test_gossip: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gossip: ok\n");
    return 0;
}

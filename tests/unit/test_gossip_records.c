/* test_gossip_records.c — the records the SWIM state machine (mesh/gossip.c)
 * carries: an endpoint learned through NAT (8), records too big for a
 * datagram (a job text, carried by the sync; 14), and overlay addresses that
 * collide (18). The simulated world is gossip_sim.h's; see test_gossip.c
 * for the membership scenarios. */
#include "gossip_sim.h"

/* 8. NAT: the others see n2 at 198.51.100.7:40000 (their ACKs say so); n2's
 *    record gains that endpoint, and every copy of it too. */
static void scenario_observed(void)
{
    sim_start(4, false, 8);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "8: 4 nodes did not converge in 3 s");
    run_for(500);
    const int p = 2;
    const char *ep = "198.51.100.7:40000";
    snprintf(S.nat_addr, sizeof S.nat_addr, "%s", S.nd[p].addr);
    S.nat_ep = ep;
    uint64_t inc = gossip_self(S.nd[p].g)->rec.incarnation;
    int64_t start = S.now, t_self = -1, t_all = -1;
    while (S.now - start <= 5000 && t_all < 0) {
        const gossip_record *own = &gossip_self(S.nd[p].g)->rec;
        if (t_self < 0 && own->nendpoints == 1 && strcmp(own->endpoints[0], ep) == 0)
            t_self = S.now - start;
        bool all = t_self >= 0;
        for (int o = 0; o < S.n && all; o++) {
            const gossip_member *m = see(o, p);
            all = m && m->rec.nendpoints == 1 && strcmp(m->rec.endpoints[0], ep) == 0;
        }
        if (all)
            t_all = S.now - start;
        else
            step();
    }
    CHECK(t_self >= 0, "8: %s's record never gained the observed endpoint", S.nd[p].name);
    CHECK(t_all >= 0, "8: not every node's copy of %s's record has the observed endpoint",
          S.nd[p].name);
    uint64_t inc_after = gossip_self(S.nd[p].g)->rec.incarnation;
    CHECK(inc_after == inc + 1, "8: incarnation %" PRIu64 " -> %" PRIu64 " (want +1)", inc,
          inc_after);
    /* The same observation again and again changes nothing more. */
    run_for(10000);
    CHECK(gossip_self(S.nd[p].g)->rec.incarnation == inc_after &&
              gossip_self(S.nd[p].g)->rec.nendpoints == 1,
          "8: %s's record kept changing (incarnation %" PRIu64 ", %d endpoints)", S.nd[p].name,
          gossip_self(S.nd[p].g)->rec.incarnation, gossip_self(S.nd[p].g)->rec.nendpoints);
    for (int o = 0; o < S.n; o++) {
        CHECK(see(o, p)->rec.incarnation == inc_after, "8: %s holds %s at %" PRIu64,
              S.nd[o].name, S.nd[p].name, see(o, p)->rec.incarnation);
        if (o != p)
            CHECK(gossip_self(S.nd[o].g)->rec.nendpoints == 0,
                  "8: %s gained an endpoint nobody observed", S.nd[o].name);
    }
    CHECK(converged(), "8: not all ALIVE");
    printf("scenario 8 (observed endpoint %s for %s): in its own record after %.2f s, in every "
           "copy after %.2f s simulated; incarnation %" PRIu64 " -> %" PRIu64 "\n",
           ep, S.nd[p].name, secs(t_self), secs(t_all), inc, inc_after);
}

/* 14. Job texts: records too big for a datagram travel by push-pull.
 *     A node sets a 6000-byte job text (gossip_set_job): its owner pushes the
 *     record to every member through the sync hook (the real codec: SYNC
 *     encoded, decoded, merged), and every other node holds the same text
 *     at the new incarnation at once (limit 2 s simulated). Nobody relays
 *     it again (one push per member), no datagram ever exceeds 1200 bytes
 *     or fails to encode. Then with big records everywhere the small-update
 *     path still works: a forged SUSPECT is refuted (the refutation is a big
 *     record: pushed the same way), a crash is DEAD everywhere within 10 s,
 *     and a leaver (its LEFT record drops the job text) is LEFT everywhere
 *     within 2 s. */

/* Every running node other than subj holds subj's job text as `text`. */
static bool all_hold_job(int subj, const char *text, uint64_t min_inc)
{
    for (int o = 0; o < S.n; o++) {
        if (o == subj || S.nd[o].down)
            continue;
        const gossip_member *m = see(o, subj);
        if (!m || m->rec.incarnation < min_inc || strcmp(m->rec.job, text) != 0)
            return false;
    }
    return true;
}

static void scenario_job(void)
{
    sim_start(5, false, 14);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "14: 5 nodes did not converge in 3 s");
    run_for(1500);
    reset_tracking();
    char err[256] = "";
    const int j = 1;
    gossip *g = S.nd[j].g;
    uint64_t inc = gossip_self(g)->rec.incarnation;
    make_job(j, 1, 6000);
    CHECK(strlen(jobtext) == 6000, "14: job text of %zu bytes", strlen(jobtext));
    long syncs = S.syncs, dgrams = S.sent, bytes = S.sync_bytes;
    CHECK(gossip_set_job(g, jobtext, S.now, err, sizeof err) == 0, "14: set_job: %s", err);
    CHECK(gossip_self(g)->rec.incarnation == inc + 1 &&
              strcmp(gossip_self(g)->rec.job, jobtext) == 0,
          "14: own record not at incarnation %" PRIu64 " with the job text", inc + 1);
    CHECK(gossip_self(g)->sig.len > GOSSIP_UDP_MAX, "14: the record (%zu bytes) fits a datagram",
          gossip_self(g)->sig.len);
    long pushed = S.syncs - syncs;
    CHECK(pushed == S.n - 1, "14: set_job asked for %ld push-pulls, want one per member (%d)",
          pushed, S.n - 1);
    CHECK(S.sent == dgrams, "14: set_job sent %ld datagrams (the record does not fit one)",
          S.sent - dgrams);
    CHECK(all_hold_job(j, jobtext, inc + 1), "14: not every node holds the job text at once");
    int64_t t = run_until(j, GOSSIP_ALIVE, inc + 1, 2000);
    CHECK(t >= 0 && all_hold_job(j, jobtext, inc + 1),
          "14: not every node holds %s's job text within 2 s", S.nd[j].name);
    printf("scenario 14 (job text): a %zu-byte record reached the other %d nodes through %ld "
           "push-pulls (%ld bytes of SYNC) in %.2f s simulated (limit 2 s)\n",
           gossip_self(g)->sig.len, S.n - 1, pushed, S.sync_bytes - bytes, secs(t));

    /* The same text: nothing happens. Too long: refused, nothing changes. */
    syncs = S.syncs;
    CHECK(gossip_set_job(g, jobtext, S.now, err, sizeof err) == 0 &&
              gossip_self(g)->rec.incarnation == inc + 1 && S.syncs == syncs,
          "14: setting the same text again changed something");
    static char toolong[GOSSIP_JOB_MAX + 1];
    memset(toolong, 'x', GOSSIP_JOB_MAX);
    err[0] = 0;
    CHECK(gossip_set_job(g, toolong, S.now, err, sizeof err) != 0 && strstr(err, "8191") &&
              gossip_self(g)->rec.incarnation == inc + 1 &&
              strcmp(gossip_self(g)->rec.job, jobtext) == 0 && S.syncs == syncs,
          "14: an over-long job text: '%s'", err);
    gossip_record back;
    CHECK(gossip_record_open(&gossip_self(g)->sig, &back, err, sizeof err) == 0 &&
              back.incarnation == inc + 1,
          "14: own signed record after a refusal: %s", err);

    /* Big records everywhere (the longest job text the limit allows on one). */
    for (int i = 0; i < S.n; i++) {
        make_job(i, 2, i == 0 ? GOSSIP_JOB_MAX - 1 : 3000 + 1000 * (size_t)i);
        CHECK(gossip_set_job(S.nd[i].g, jobtext, S.now, err, sizeof err) == 0,
              "14: set_job on %s: %s", S.nd[i].name, err);
    }
    run_for(2000);
    for (int i = 0; i < S.n; i++) {
        make_job(i, 2, i == 0 ? GOSSIP_JOB_MAX - 1 : 3000 + 1000 * (size_t)i);
        CHECK(all_hold_job(i, jobtext, 0), "14: %s's new job text not everywhere",
              S.nd[i].name);
    }
    CHECK(converged(), "14: not all ALIVE with big records");

    /* A refutation is a big record too. */
    const int target = 2, forger = 4;
    uint64_t tinc = gossip_self(S.nd[target].g)->rec.incarnation;
    gossip_update u;
    claim(&u, GOSSIP_SUSPECT, &S.nd[target], tinc, S.nd[forger].name);
    uint8_t buf[GOSSIP_UDP_MAX];
    size_t len = update_datagram(S.nd[forger].name, &u, buf, sizeof buf);
    inject(0, S.nd[forger].addr, buf, len);
    CHECK(sees(0, target, GOSSIP_SUSPECT), "14: n0 lists %s as %s after a SUSPECT claim",
          S.nd[target].name, state_of(0, target));
    inject(target, S.nd[forger].addr, buf, len);
    t = run_until(target, GOSSIP_ALIVE, tinc + 1, 2000);
    CHECK(t >= 0, "14: %s's refutation (a big record) not everywhere within 2 s",
          S.nd[target].name);

    /* A crash is still found while every record is big. */
    reset_tracking();
    const int v = 3;
    crash(v);
    t = run_until(v, GOSSIP_DEAD, 0, 10000);
    CHECK(t >= 0, "14: crashed %s not DEAD everywhere within 10 s (big records)", S.nd[v].name);
    printf("scenario 14: with big records everywhere, a refutation spread by push-pull and a "
           "crash was DEAD everywhere after %.2f s simulated (limit 10 s)\n", secs(t));
    for (int o = 0; o < S.n; o++)
        for (int s2 = 0; s2 < S.n; s2++)
            CHECK(o == v || s2 == v || o == s2 ||
                      (TR[o][s2].nsuspect == 0 && TR[o][s2].ndead == 0),
                  "14: %s suspected live %s %d times", S.nd[o].name, S.nd[s2].name,
                  TR[o][s2].nsuspect);

    /* Leaving drops the job text: the LEFT record goes by datagram. */
    const int l = 4;
    uint64_t linc = gossip_self(S.nd[l].g)->rec.incarnation;
    CHECK(gossip_leave(S.nd[l].g, S.now, err, sizeof err) == 0, "14: leave: %s", err);
    CHECK(gossip_self(S.nd[l].g)->rec.job[0] == 0 &&
              gossip_self(S.nd[l].g)->sig.len < GOSSIP_UDP_MAX,
          "14: the LEFT record keeps its job text (%zu bytes)", gossip_self(S.nd[l].g)->sig.len);
    CHECK(gossip_set_job(S.nd[l].g, "{}", S.now, err, sizeof err) != 0 && strstr(err, "left"),
          "14: set_job after leaving: '%s'", err);
    crash(l);
    t = run_until(l, GOSSIP_LEFT, linc + 1, 2000);
    CHECK(t >= 0, "14: %s not LEFT everywhere within 2 s", S.nd[l].name);
    CHECK(S.encode_failures == 0, "14: %ld messages failed to encode", S.encode_failures);
    run_for(20000);
    CHECK(S.encode_failures == 0, "14: %ld messages failed to encode", S.encode_failures);
}

/* 18. Issue 12, 11: overlay addresses collide (a hash of the key in a
 *     /16: among 300 members a collision is more likely than not). The
 *     admitting member refuses a joiner whose address is taken
 *     (GOSSIP_ADDRESS_TAKEN) and the joiner draws a new key: 1,000 members
 *     join one view, every address distinct. A collision made in a
 *     partition (two admitters, one address) is resolved the same way
 *     everywhere when it heals: the older admission keeps the address. */

static void scenario_collisions(void)
{
    sim_end();
    printf("scenario 18 (overlay address collisions):\n");
    enum { JOINERS = 1000 };
    char err[512] = "";
    S.keyrng = 0x18;
    S.now = T0;
    node *self = calloc(1, sizeof *self);
    snprintf(self->name, sizeof self->name, "m0");
    if (seeded_keys(&S.keyrng, self, err, sizeof err) != 0 ||
        mesh_overlay_address(PREFIX, self->wg_pub, self->addr, sizeof self->addr, err,
                             sizeof err) != 0 ||
        keys_mesh_id(self->id_pub, MESH_ID, err, sizeof err) != 0) {
        CHECK(0, "18: keys: %s", err);
        free(self);
        return;
    }
    gossip_config c;
    memset(&c, 0, sizeof c);
    c.prefix = PREFIX;
    self_record(self, 1, &c.self);
    memcpy(c.id_priv, self->id_priv, GOSSIP_KEY_LEN);
    memcpy(c.wg_priv, self->wg_priv, GOSSIP_KEY_LEN);
    c.hooks = (gossip_hooks){.send = quiet_send, .log = count_log};
    gossip *g = NULL;
    if (gossip_create(&g, &c, S.now, err, sizeof err) != 0) {
        CHECK(0, "18: create: %s", err);
        free(self);
        return;
    }
    int retries = 0, admitted = 0;
    node j;
    for (int i = 1; i <= JOINERS; i++) {
        memset(&j, 0, sizeof j);
        snprintf(j.name, sizeof j.name, "m%d", i);
        for (int tries = 0; tries < 8; tries++) {
            if (seeded_keys(&S.keyrng, &j, err, sizeof err) != 0 ||
                mesh_overlay_address(PREFIX, j.wg_pub, j.addr, sizeof j.addr, err,
                                     sizeof err) != 0)
                break;
            gossip_record r;
            gossip_signed sg;
            self_record(&j, 1, &r);
            if (gossip_record_sign(&r, j.id_priv, &sg, err, sizeof err) != 0)
                break;
            S.now += 1;
            if (gossip_admit(g, &sg, S.now, err, sizeof err) == 0) {
                admitted++;
                break;
            }
            CHECK(strncmp(err, GOSSIP_ADDRESS_TAKEN, strlen(GOSSIP_ADDRESS_TAKEN)) == 0,
                  "18: m%d refused: %s", i, err);
            retries++;
        }
    }
    const gossip_member *const *list;
    size_t n = gossip_members(g, &list);
    int dup = 0;
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
            dup += strcmp(list[a]->rec.address, list[b]->rec.address) == 0;
    CHECK(admitted == JOINERS && n == JOINERS + 1, "18: %d of %d admitted, %zu in the view",
          admitted, JOINERS, n);
    CHECK(dup == 0, "18: %d addresses appear twice in the view", dup);
    CHECK(retries > 0, "18: no collision in %d seeded joiners (the retry is untested)", JOINERS);
    printf("    %d members joined one view with distinct addresses; %d joiners drew a new key "
           "after GOSSIP_ADDRESS_TAKEN\n", admitted, retries);
    gossip_destroy(g);
    free(self);

    /* A partition: n0 and n2 each admit a joiner; both joiners' keys give
     * one address. */
    sim_start(4, false, 18);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "18: 4 nodes did not converge in 3 s");
    S.allow_unknown = true; /* the joiners do not run here */
    node a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    snprintf(a.name, sizeof a.name, "early");
    snprintf(b.name, sizeof b.name, "late");
    static struct { node k; } pool[4096];
    int found = -1;
    for (int i = 0; i < 4096 && found < 0; i++) {
        seeded_keys(&S.keyrng, &pool[i].k, err, sizeof err);
        mesh_overlay_address(PREFIX, pool[i].k.wg_pub, pool[i].k.addr, sizeof pool[i].k.addr,
                             err, sizeof err);
        for (int k = 0; k < i && found < 0; k++)
            if (strcmp(pool[k].k.addr, pool[i].k.addr) == 0 && node_by_addr(pool[i].k.addr) < 0) {
                found = i;
                a = pool[k].k;
                b = pool[i].k;
            }
    }
    CHECK(found >= 0, "18: no colliding pair among 4096 seeded keys");
    if (found < 0)
        return;
    snprintf(a.name, sizeof a.name, "early");
    snprintf(b.name, sizeof b.name, "late");
    S.nd[0].group = S.nd[1].group = 0;
    S.nd[2].group = S.nd[3].group = 1;
    gossip_record r;
    gossip_signed sa, sb;
    self_record(&a, 1, &r);
    CHECK(gossip_record_sign(&r, a.id_priv, &sa, err, sizeof err) == 0, "18: sign: %s", err);
    CHECK(gossip_admit(S.nd[0].g, &sa, S.now, err, sizeof err) == 0, "18: n0 admits early: %s",
          err);
    S.now += 1000;
    self_record(&b, 1, &r);
    CHECK(gossip_record_sign(&r, b.id_priv, &sb, err, sizeof err) == 0, "18: sign: %s", err);
    CHECK(gossip_admit(S.nd[2].g, &sb, S.now, err, sizeof err) == 0, "18: n2 admits late: %s",
          err);
    run_for(20000);
    S.nd[2].group = S.nd[3].group = 0;
    int64_t t = run_until(-1, GOSSIP_ALIVE, 0, 40000);
    run_for(40000);
    bool agree = true;
    for (int o = 0; o < S.n; o++) {
        const gossip_member *m = gossip_find_addr(S.nd[o].g, a.addr);
        if (!m || memcmp(m->rec.wg_pub, a.wg_pub, GOSSIP_KEY_LEN) != 0)
            agree = false;
    }
    CHECK(t >= 0 && agree, "18: after the heal the members do not all give %s to the older "
          "admission", a.addr);
    printf("    a collision made in a partition (%s, admitted 1 s apart): after the heal every "
           "member gives it to the older admission\n", a.addr);

    /* One name given twice in a partition (two identities): the older
     * admission keeps it everywhere, the other is out of every view. */
    node t1, t2;
    memset(&t1, 0, sizeof t1);
    memset(&t2, 0, sizeof t2);
    new_keys(&t1);
    new_keys(&t2);
    snprintf(t1.name, sizeof t1.name, "twin");
    snprintf(t2.name, sizeof t2.name, "twin");
    S.nd[2].group = S.nd[3].group = 1;
    S.refusals_ok = true; /* the younger twin's record, until every view has the older */
    run_for(20000);
    self_record(&t2, 1, &r);
    CHECK(gossip_record_sign(&r, t2.id_priv, &sb, err, sizeof err) == 0, "18: sign: %s", err);
    CHECK(gossip_admit(S.nd[2].g, &sb, S.now, err, sizeof err) == 0, "18: n2 admits twin: %s",
          err);
    S.now += 1000;
    self_record(&t1, 1, &r);
    CHECK(gossip_record_sign(&r, t1.id_priv, &sa, err, sizeof err) == 0, "18: sign: %s", err);
    CHECK(gossip_admit(S.nd[0].g, &sa, S.now, err, sizeof err) == 0, "18: n0 admits twin: %s",
          err);
    run_for(20000);
    S.nd[2].group = S.nd[3].group = 0;
    t = run_until(-1, GOSSIP_ALIVE, 0, 40000);
    run_for(40000);
    agree = true;
    for (int o = 0; o < S.n; o++) {
        const gossip_member *m2 = gossip_find_addr(S.nd[o].g, t2.addr);
        if (!m2 || gossip_find_addr(S.nd[o].g, t1.addr))
            agree = false;
    }
    CHECK(t >= 0 && agree, "18: after the heal the members do not all give the name twin to "
          "the older admission");
    printf("    one name admitted twice in a partition: after the heal every member keeps the "
           "older admission's\n");
}

int main(void)
{
    S.verbose = getenv("GOSSIP_TEST_VERBOSE") != NULL;
    scenario_observed();
    scenario_job();
    scenario_collisions();
    sim_end();
    fflush(stdout);
    if (failures) {
        fprintf(stderr, "test_gossip_records: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gossip_records: ok\n");
    return 0;
}

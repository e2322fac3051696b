/* test_gossip_trust.c — what the SWIM state machine (mesh/gossip.c) refuses:
 * records gossip_admit will not take (7), datagrams dropped from strangers
 * and lies from members (9), membership earned only through an admission
 * (16), names that belong to their identity (17). The simulated world is
 * gossip_sim.h's; see test_gossip.c for the membership scenarios. */
#include "gossip_sim.h"

/* 7. gossip_admit refuses, naming the problem, and changes nothing. */
static void expect_refused(const char *what, const gossip_signed *s, const char *want)
{
    const int a = 0;
    view before, after;
    snap(a, &before);
    long sent = S.sent, changed = nchanged;
    char err[512] = "";
    int rc = gossip_admit(S.nd[a].g, s, S.now, err, sizeof err);
    CHECK(rc != 0, "7: %s: admitted", what);
    CHECK(rc == 0 || strstr(err, want), "7: %s: refused with \"%s\", want \"%s\"", what, err,
          want);
    snap(a, &after);
    CHECK(same_view(&before, &after), "7: %s: the view changed", what);
    CHECK(S.sent == sent && nchanged == changed, "7: %s: %ld datagrams sent, %ld changes", what,
          S.sent - sent, nchanged - changed);
    printf("    refused %s: %s\n", what, err);
}

static void scenario_refusals(void)
{
    sim_start(4, false, 7);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "7: 4 nodes did not converge in 3 s");
    printf("scenario 7 (gossip_admit refusals):\n");
    char err[512] = "";
    node stranger;
    memset(&stranger, 0, sizeof stranger);
    stranger.idx = -1;
    snprintf(stranger.name, sizeof stranger.name, "stranger");
    new_keys(&stranger);
    gossip_record r;
    gossip_signed s, good;
    self_record(&stranger, 1, &r);
    CHECK(gossip_record_sign(&r, stranger.id_priv, &good, err, sizeof err) == 0, "7: sign: %s",
          err);

    /* Signed by another identity key than the record's own id. */
    s = good;
    CHECK(keys_sign(S.nd[1].id_priv, s.bytes, s.len, s.sig, err, sizeof err) == 0,
          "7: keys_sign: %s", err);
    expect_refused("a record signed by another identity key", &s, "signature does not verify");

    /* One byte of the signature flipped (each of a few positions). */
    for (int pos = 0; pos < GOSSIP_SIG_LEN; pos += 21) {
        s = good;
        s.sig[pos] ^= 0x01;
        expect_refused("a record with one signature byte flipped", &s,
                       "signature does not verify");
    }

    /* An address that is not the one its key gives. */
    gossip_record r2 = r;
    snprintf(r2.address, sizeof r2.address, "%s",
             strcmp(stranger.addr, "10.77.0.1") ? "10.77.0.1" : "10.77.0.2");
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record whose address is not derived from its key", &s,
                   "claims overlay address");
    /* ... nor one outside the prefix. */
    r2 = r;
    snprintf(r2.address, sizeof r2.address, "10.78.1.2");
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record with an address outside the prefix", &s, "claims overlay address");

    /* Another mesh. */
    r2 = r;
    r2.mesh_id[3] ^= 0x80;
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record of another mesh id", &s, "another mesh");

    /* A name a live member has (and our own). */
    r2 = r;
    snprintf(r2.name, sizeof r2.name, "%s", S.nd[2].name);
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record with a live member's name", &s, "name belongs to another member");
    r2 = r;
    snprintf(r2.name, sizeof r2.name, "%s", S.nd[0].name);
    CHECK(gossip_record_sign(&r2, stranger.id_priv, &s, err, sizeof err) == 0, "7: sign: %s",
          err);
    expect_refused("a record with the admitting node's own name", &s,
                   "name belongs to another member");

    /* A member's WireGuard key (and address) under another identity key. */
    node imp = S.nd[2];
    memcpy(imp.id_priv, stranger.id_priv, KEYS_LEN);
    memcpy(imp.id_pub, stranger.id_pub, KEYS_LEN);
    self_record(&imp, 99, &r2);
    CHECK(gossip_record_sign(&r2, imp.id_priv, &s, err, sizeof err) == 0, "7: sign: %s", err);
    expect_refused("a member's WireGuard key signed by another identity", &s,
                   "already a member's");

    /* None of it spread: a second later every view is as it was. */
    run_for(1000);
    CHECK(converged(), "7: not all ALIVE after the refusals");
    for (int o = 0; o < S.n; o++) {
        const gossip_member *const *list;
        CHECK(gossip_members(S.nd[o].g, &list) == 4, "7: %s lists %zu members",
              S.nd[o].name, gossip_members(S.nd[o].g, &list));
        CHECK(see(o, 2)->rec.incarnation == 1, "7: %s holds n2 at incarnation %" PRIu64,
              S.nd[o].name, see(o, 2)->rec.incarnation);
    }
    /* The good record is admitted (the refusals were for their reason). */
    S.allow_unknown = true; /* n0 announces the stranger to the stranger too */
    CHECK(gossip_admit(S.nd[0].g, &good, S.now, err, sizeof err) == 0,
          "7: the unaltered record refused: %s", err);
}

/* 9. Datagrams that are dropped: from an address that is no member's, and
 *    garbage (or a lie) from a member's. Nothing changes; a line is logged. */
static void expect_dropped_as(const char *what, const char *src_addr, const uint8_t *buf,
                              size_t len, const char *want, bool raw)
{
    const int d = 0;
    view before, after;
    snap(d, &before);
    long sent = S.sent, changed = nchanged;
    int logs = S.nd[d].nlogs;
    S.now += 1000; /* unauthenticated datagrams are logged once a second at most */
    if (raw)
        inject_raw(d, src_addr, buf, len);
    else
        inject(d, src_addr, buf, len);
    snap(d, &after);
    CHECK(same_view(&before, &after), "9: %s: the view changed", what);
    CHECK(S.sent == sent && nchanged == changed, "9: %s: %ld datagrams sent, %ld changes", what,
          S.sent - sent, nchanged - changed);
    CHECK(S.nd[d].nlogs == logs + 1 && strstr(S.nd[d].lastlog, want),
          "9: %s: %d lines logged, last \"%s\", want \"%s\"", what, S.nd[d].nlogs - logs,
          S.nd[d].lastlog, want);
    printf("    dropped %s: %s\n", what, S.nd[d].lastlog);
}

static void expect_dropped(const char *what, const char *src_addr, const uint8_t *buf,
                           size_t len, const char *want)
{
    expect_dropped_as(what, src_addr, buf, len, want, false);
}

static void scenario_dropped(void)
{
    sim_start(3, false, 9);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "9: 3 nodes did not converge in 3 s");
    run_for(700);
    printf("scenario 9 (datagrams dropped):\n");
    uint8_t buf[GOSSIP_UDP_MAX];
    gossip_msg m;
    /* A well-formed PING of n1's, with an update about n2. */
    gossip_update up;
    memset(&up, 0, sizeof up);
    up.state = GOSSIP_ALIVE;
    up.rec = gossip_self(S.nd[2].g)->sig;
    memset(&m, 0, sizeof m);
    m.type = GOSSIP_MSG_PING;
    m.seq = 77;
    m.nupdates = 1;
    m.updates = &up;
    size_t len = encode_msg(&m, S.nd[1].name, NULL, buf, sizeof buf);

    char stranger[GOSSIP_ADDR_MAX] = "10.77.250.250";
    if (node_by_addr(stranger) >= 0)
        snprintf(stranger, sizeof stranger, "10.77.250.251");
    expect_dropped("a PING from an address that is no member's", stranger, buf, len,
                   "not a member's address");
    expect_dropped("a PING from outside the overlay prefix", "192.0.2.1", buf, len,
                   "not a member's address");

    uint8_t garbage[64];
    uint64_t x = 0x1234567887654321ull;
    for (size_t i = 0; i < sizeof garbage; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        garbage[i] = (uint8_t)(x >> 56);
    }
    char want[128];
    snprintf(want, sizeof want, "dropped a datagram from %s", S.nd[1].name);
    expect_dropped("garbage from a member", S.nd[1].addr, garbage, sizeof garbage, want);
    expect_dropped("an empty datagram from a member", S.nd[1].addr, garbage, 0, want);
    expect_dropped("a truncated PING from a member", S.nd[1].addr, buf, len - 1, want);

    /* A PING from n1's address that says it is from n2. */
    gossip_msg lie;
    memset(&lie, 0, sizeof lie);
    lie.type = GOSSIP_MSG_PING;
    lie.seq = 78;
    uint8_t lbuf[GOSSIP_UDP_MAX];
    size_t llen = encode_msg(&lie, S.nd[2].name, NULL, lbuf, sizeof lbuf);
    expect_dropped("a PING from a member's address under another name", S.nd[1].addr, lbuf,
                   llen, "it says it is");
    /* A PING of another mesh. */
    memset(&lie, 0, sizeof lie);
    lie.type = GOSSIP_MSG_PING;
    lie.seq = 79;
    uint8_t other_mesh[GOSSIP_MESH_ID_LEN];
    memcpy(other_mesh, MESH_ID, GOSSIP_MESH_ID_LEN);
    other_mesh[0] ^= 0xff;
    llen = encode_msg(&lie, S.nd[1].name, other_mesh, lbuf, sizeof lbuf);
    expect_dropped("a PING of another mesh from a member's address", S.nd[1].addr, lbuf, llen,
                   "another mesh");

    /* Issue 12, 2: the source address is no credential. A local user on
     * n1's machine who binds n1's overlay address sends n1's PING without
     * the MAC (it cannot read n1's WireGuard key), or with a MAC of its own
     * key, or with one n2 made for n0; and a MAC made for n0 from n1's
     * address in a datagram from n2's. Each is dropped and counted. */
    uint64_t drops = gossip_auth_drops(S.nd[0].g);
    expect_dropped_as("n1's PING from n1's address without a MAC", S.nd[1].addr, buf, len,
                      "MAC does not verify", true);
    uint8_t sealed[GOSSIP_UDP_MAX];
    memcpy(sealed, buf, len);
    node intruder;
    memset(&intruder, 0, sizeof intruder);
    char kerr[256] = "";
    CHECK(seeded_keys(&S.keyrng, &intruder, kerr, sizeof kerr) == 0, "9: keys: %s", kerr);
    size_t slen = seal(&intruder, &S.nd[0], sealed, len);
    expect_dropped_as("n1's PING from n1's address with a MAC of another key", S.nd[1].addr,
                      sealed, slen, "MAC does not verify", true);
    slen = seal(&S.nd[2], &S.nd[0], sealed, len);
    expect_dropped_as("n1's PING from n1's address with n2's MAC for n0", S.nd[1].addr, sealed,
                      slen, "MAC does not verify", true);
    slen = seal(&S.nd[1], &S.nd[0], sealed, len);
    expect_dropped_as("n1's sealed PING from n2's address", S.nd[2].addr, sealed, slen,
                      "MAC does not verify", true);
    CHECK(gossip_auth_drops(S.nd[0].g) == drops + 4, "9: %" PRIu64 " unauthenticated "
          "datagrams counted, want 4", gossip_auth_drops(S.nd[0].g) - drops);
    /* The same for TCP frames (SYNC, FETCH): n1's frame sealed by n2 for n0,
     * a frame without a MAC, one from no member's address. */
    slen = seal(&S.nd[2], &S.nd[0], sealed, len);
    S.now += 1000;
    CHECK(gossip_frame_open(S.nd[0].g, S.nd[1].addr, sealed, slen, S.now) == NULL &&
              strstr(S.nd[0].lastlog, "MAC does not verify"),
          "9: a frame from n1's address with n2's MAC opened (\"%s\")", S.nd[0].lastlog);
    S.now += 1000;
    CHECK(gossip_frame_open(S.nd[0].g, S.nd[1].addr, buf, len, S.now) == NULL,
          "9: a frame without a MAC opened");
    S.now += 1000;
    CHECK(gossip_frame_open(S.nd[0].g, stranger, sealed, slen, S.now) == NULL &&
              strstr(S.nd[0].lastlog, "not a member's address"),
          "9: a frame from no member's address opened");
    slen = seal(&S.nd[1], &S.nd[0], sealed, len);
    CHECK(gossip_frame_open(S.nd[0].g, S.nd[1].addr, sealed, slen, S.now) == see(0, 1),
          "9: n1's own frame did not open");
    CHECK(gossip_auth_drops(S.nd[0].g) == drops + 7, "9: %" PRIu64 " unauthenticated "
          "datagrams and frames counted, want 7", gossip_auth_drops(S.nd[0].g) - drops);

    /* The control: the same PING from n1's own address is answered. */
    long sent = S.sent;
    inject(0, S.nd[1].addr, buf, len);
    CHECK(S.sent == sent + 1, "9: the PING from n1's address was not answered (%ld sent)",
          S.sent - sent);
    CHECK(see(0, 1)->heard_ms == S.now, "9: n0 did not note hearing from n1");
    run_for(3000);
    CHECK(converged(), "9: not all ALIVE afterwards");
}

/* ------------------------------------------- behaviours this test found */

/* A SYNC from `from` (a member) to `to` carrying one ALIVE record. Returns
 * the number of updates `to` refused. */
static int sync_one_record(int from, int to, const gossip_signed *rec)
{
    gossip_update u;
    memset(&u, 0, sizeof u);
    u.state = GOSSIP_ALIVE;
    u.rec = *rec;
    gossip_msg m, wire;
    memset(&m, 0, sizeof m);
    m.type = GOSSIP_MSG_SYNC;
    m.version = GOSSIP_PROTOCOL_VERSION;
    memcpy(m.mesh_id, MESH_ID, GOSSIP_MESH_ID_LEN);
    snprintf(m.from, sizeof m.from, "%s", S.nd[from].name);
    m.nupdates = 1;
    m.updates = &u;
    int refused = -1;
    if (over_tcp(&m, &wire) == 0) {
        refused = gossip_merge(S.nd[to].g, &wire, S.now);
        gossip_msg_free(&wire);
    }
    return refused;
}

/* 16. Issue 12, 1: a machine joined without an invite. A self-signed record
 *     sent in one SYNC was accepted as a new member (and the daemon then
 *     added a WireGuard peer for its key). Now a record enters only with an
 *     admission a member signed (gossip_admit, after JOIN checked the
 *     invite) or the founder's own (the mesh id derives from its identity).
 *     Each forgery is refused at every member: no new member, no changed
 *     hook (the daemon adds WireGuard peers from that hook). */
static void expect_not_admitted(const char *what, const gossip_signed *s, const char *want)
{
    long changed = nchanged;
    for (int o = 0; o < S.n; o++) {
        int from = o == 1 ? 2 : 1;
        S.now += 1;
        int logs = S.nd[o].nlogs;
        int refused = sync_one_record(from, o, s);
        CHECK(refused == 1, "16: %s: %s refused %d updates, want 1", what, S.nd[o].name,
              refused);
        CHECK(S.nd[o].nlogs > logs && strstr(S.nd[o].lastlog, want),
              "16: %s: %s logged \"%s\", want \"%s\"", what, S.nd[o].name, S.nd[o].lastlog,
              want);
        const gossip_member *const *list;
        CHECK(gossip_members(S.nd[o].g, &list) == (size_t)S.n, "16: %s: %s lists %zu members",
              what, S.nd[o].name, gossip_members(S.nd[o].g, &list));
    }
    CHECK(nchanged == changed, "16: %s: %ld member changes (WireGuard peers) followed", what,
          nchanged - changed);
    printf("    refused %s: %s\n", what, S.nd[0].lastlog);
}

static void scenario_admission(void)
{
    sim_start(4, false, 16);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "16: 4 nodes did not converge in 3 s");
    printf("scenario 16 (records without a valid admission):\n");
    char err[512] = "";
    node x;
    memset(&x, 0, sizeof x);
    x.idx = -1;
    snprintf(x.name, sizeof x.name, "intruder");
    new_keys(&x);
    gossip_record r;
    gossip_signed sg;
    self_record(&x, 1, &r);
    CHECK(gossip_record_sign(&r, x.id_priv, &sg, err, sizeof err) == 0, "16: sign: %s", err);
    expect_not_admitted("a self-signed record without an admission", &sg, "not admitted");
    /* Admitted by itself, as if it founded the mesh (the mesh id is n0's). */
    CHECK(gossip_admission_sign(&r, x.id_priv, S.now, &sg.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    expect_not_admitted("a record admitted by itself", &sg, "not admitted");
    /* An admission naming a member as admitter, signed by the intruder. */
    gossip_signed forged = sg;
    memcpy(forged.adm.by, S.nd[1].id_pub, GOSSIP_KEY_LEN);
    expect_not_admitted("an admission by n1 forged by the intruder", &forged,
                        "admission does not verify");
    /* A real admission, but for another name, another key, another time. */
    gossip_record other = r;
    snprintf(other.name, sizeof other.name, "guest");
    CHECK(gossip_admission_sign(&other, S.nd[1].id_priv, S.now, &forged.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    expect_not_admitted("n1's admission of the name guest on a record named intruder", &forged,
                        "admission does not verify");
    gossip_signed moved = forged;
    CHECK(gossip_admission_sign(&r, S.nd[1].id_priv, S.now, &moved.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    moved.adm.at_ms += 1;
    expect_not_admitted("n1's admission with its time changed", &moved, "admission does not verify");
    /* Backdated: n1 (a member) dates an admission an hour before its own, to
     * win a collision against members admitted since. */
    gossip_signed back = sg;
    CHECK(gossip_admission_sign(&r, S.nd[1].id_priv, see(0, 1)->sig.adm.at_ms - 3600000,
                                &back.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    expect_not_admitted("an admission n1 dated an hour before its own", &back,
                        "before n1 was admitted itself");
    /* Another identity's admission (a former member's, say: not in the view). */
    node former;
    memset(&former, 0, sizeof former);
    new_keys(&former);
    CHECK(gossip_admission_sign(&r, former.id_priv, S.now, &forged.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    expect_not_admitted("an admission by an identity that is no member", &forged,
                        "not admitted");
    /* The control: the same record with n1's real admission spreads. */
    CHECK(gossip_admission_sign(&r, S.nd[1].id_priv, S.now, &sg.adm, err, sizeof err) == 0,
          "16: admission: %s", err);
    S.allow_unknown = true; /* the others announce it to it; it is not running */
    CHECK(sync_one_record(1, 0, &sg) == 0, "16: n0 refused the intruder admitted by n1");
    run_for(2000);
    for (int o = 0; o < S.n; o++)
        CHECK(gossip_find_addr(S.nd[o].g, x.addr) != NULL, "16: %s does not know a member n1 "
              "admitted", S.nd[o].name);
    printf("    a record n1 admitted reached every member\n");
}

/* 17. Issue 12, 7: a newcomer took a dead member's name, after which the
 *     real member could never come back. A name belongs to its identity:
 *     free once its holder left, or GOSSIP_NAME_HOLD_MS after it died; the
 *     same identity gets it back (even with a new WireGuard key). */
static void scenario_names(void)
{
    sim_start(5, false, 17);
    CHECK(run_until(-1, GOSSIP_ALIVE, 0, 3000) >= 0, "17: 5 nodes did not converge in 3 s");
    printf("scenario 17 (names belong to identities):\n");
    const int dead = 2, leaver = 3;
    char err[512] = "";
    uint64_t inc = gossip_self(S.nd[dead].g)->rec.incarnation;
    crash(dead);
    CHECK(run_until(dead, GOSSIP_DEAD, 0, 20000) >= 0, "17: %s not DEAD everywhere",
          S.nd[dead].name);
    node newcomer;
    memset(&newcomer, 0, sizeof newcomer);
    newcomer.idx = -1;
    snprintf(newcomer.name, sizeof newcomer.name, "%s", S.nd[dead].name);
    new_keys(&newcomer);
    gossip_record r;
    gossip_signed sg;
    self_record(&newcomer, 1, &r);
    CHECK(gossip_record_sign(&r, newcomer.id_priv, &sg, err, sizeof err) == 0, "17: sign: %s",
          err);
    int rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "name belongs to another member"),
          "17: a newcomer took dead %s's name (%s)", S.nd[dead].name, rc ? err : "admitted");
    printf("    refused a newcomer named %s while %s is dead: %s\n", S.nd[dead].name,
           S.nd[dead].name, err);
    /* The real member comes back with its name. */
    node *x = &S.nd[dead];
    gossip_destroy(x->g);
    x->g = NULL;
    start_node(x, inc + 1);
    for (int o = 0; o < S.n; o++)
        if (o != dead)
            gossip_add_known(x->g, &gossip_self(S.nd[o].g)->sig, S.now, err, sizeof err);
    CHECK(run_until(dead, GOSSIP_ALIVE, inc + 1, 10000) >= 0, "17: %s did not come back",
          x->name);
    /* The same identity with a new WireGuard key (its wg.key lost) keeps its
     * name: admitted while its old key is still in the view. */
    crash(dead);
    CHECK(run_until(dead, GOSSIP_DEAD, 0, 20000) >= 0, "17: %s not DEAD again", x->name);
    int64_t died = S.now;
    node again = *x;
    new_keys(&again);
    memcpy(again.id_priv, x->id_priv, KEYS_LEN);
    memcpy(again.id_pub, x->id_pub, KEYS_LEN);
    self_record(&again, inc + 5, &r);
    CHECK(gossip_record_sign(&r, again.id_priv, &sg, err, sizeof err) == 0, "17: sign: %s", err);
    S.allow_unknown = true;
    rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc == 0, "17: %s's own identity with a new key refused its name: %s", x->name, err);
    /* A member that left frees its name at once. */
    CHECK(gossip_leave(S.nd[leaver].g, S.now, err, sizeof err) == 0, "17: leave: %s", err);
    crash(leaver);
    CHECK(run_until(leaver, GOSSIP_LEFT, 0, 3000) >= 0, "17: %s not LEFT", S.nd[leaver].name);
    node heir;
    memset(&heir, 0, sizeof heir);
    heir.idx = -1;
    snprintf(heir.name, sizeof heir.name, "%s", S.nd[leaver].name);
    new_keys(&heir);
    self_record(&heir, 1, &r);
    CHECK(gossip_record_sign(&r, heir.id_priv, &sg, err, sizeof err) == 0, "17: sign: %s", err);
    rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc == 0, "17: the name of %s, which left, is not free: %s", S.nd[leaver].name, err);
    /* A dead member's name is free after GOSSIP_NAME_HOLD_MS. */
    node late;
    memset(&late, 0, sizeof late);
    late.idx = -1;
    snprintf(late.name, sizeof late.name, "%s", S.nd[dead].name);
    new_keys(&late);
    /* n2's old key is dead, and so is its new one (it never ran). */
    run_for(20000);
    CHECK(gossip_find_addr(S.nd[0].g, again.addr) &&
              gossip_find_addr(S.nd[0].g, again.addr)->state == GOSSIP_DEAD,
          "17: n2's new key is not dead at n0");
    died = S.now;
    S.now = died + GOSSIP_NAME_HOLD_MS - 60000;
    run_for(1000);
    self_record(&late, 1, &r);
    CHECK(gossip_record_sign(&r, late.id_priv, &sg, err, sizeof err) == 0, "17: sign: %s", err);
    rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc != 0, "17: %s's name taken before %lld h", x->name,
          (long long)(GOSSIP_NAME_HOLD_MS / 3600000));
    S.now = died + GOSSIP_NAME_HOLD_MS + 60000;
    run_for(1000);
    rc = gossip_admit(S.nd[0].g, &sg, S.now, err, sizeof err);
    CHECK(rc == 0, "17: %s's name not free %lld h after it died: %s", x->name,
          (long long)(GOSSIP_NAME_HOLD_MS / 3600000), err);
    printf("    the same identity got its name back (new key too); a left member's name was "
           "free at once, a dead one's after %lld h\n",
           (long long)(GOSSIP_NAME_HOLD_MS / 3600000));
}

int main(void)
{
    S.verbose = getenv("GOSSIP_TEST_VERBOSE") != NULL;
    scenario_refusals();
    scenario_dropped();
    scenario_admission();
    scenario_names();
    sim_end();
    fflush(stdout);
    if (failures) {
        fprintf(stderr, "test_gossip_trust: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gossip_trust: ok\n");
    return 0;
}

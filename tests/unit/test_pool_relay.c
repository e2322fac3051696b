/* test_pool_relay.c — relayed links in the plan (node/pool/pool_links.c,
 * pool_doc.c; docs/ARCHITECTURE.md, "Links in the plan"): a document's link
 * names its relay and reads back the same; a malformed relay is refused with
 * a message naming it; a relayed link counts as its two hops and its share
 * of the relay's upload; the plan built from those links, with the
 * scheduler call and job settings pool_elect.c uses, keeps a relayed pair
 * from neighbouring stages when a direct order exists, and lets a fast relay
 * hold a stage. Seeded. */
#include "pool_core.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static uint64_t seed_state;

static uint64_t rnd(void)
{
    seed_state = seed_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return seed_state >> 33;
}

static int64_t between(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* ---- the document's links ---- */

static void test_round_trip(void)
{
    char err[256] = "";
    json_t *j = json_pack("{s:[i,i],s:[i,i,s]}", "c", 1000, 2000, "b", 3000, 4000, "r");
    pool_links l;
    CHECK(pool_links_from_json(j, &l, err, sizeof err) == 0 && l.n == 2, "reads: %s", err);
    const pool_link *b = pool_links_find(&l, "b"), *c = pool_links_find(&l, "c");
    CHECK(b && strcmp(b->via, "r") == 0 && b->latency_ns == 3000 && b->bandwidth == 4000,
          "b is relayed via r: %s", b ? b->via : "-");
    CHECK(c && c->via[0] == '\0', "two elements stay direct: %s", c ? c->via : "-");
    pool_links cp;
    CHECK(pool_links_copy(&cp, &l) == 0 && strcmp(pool_links_find(&cp, "b")->via, "r") == 0,
          "a copy keeps the relay");
    json_t *back = pool_links_to_json(&cp);
    CHECK(back && json_equal(back, j), "writes back the same");
    json_decref(back);
    pool_links_free(&cp);
    pool_links_free(&l);
    json_decref(j);

    /* a record of a large pool (34 unusual links, more than it lists) keeps
     * its relayed links first */
    pool_links all = {0, NULL}, exact;
    pool_link typical;
    for (int i = 0; i < 100; i++) {
        char n[16];
        snprintf(n, sizeof n, "m%03d", i);
        pool_links_add_via(&all, n, i % 3 ? 1000000 : 50000000, 100000000,
                           i == 57 ? "m001" : NULL);
    }
    CHECK(pool_links_summary(&all, &exact, &typical) == 0 && exact.n == POOL_LINKS_MAX,
          "summary: %d", exact.n);
    const pool_link *k = pool_links_find(&exact, "m057");
    CHECK(exact.n && strcmp(exact.l[0].name, "m057") == 0 && k && strcmp(k->via, "m001") == 0,
          "the relayed link (as fast as the typical one) is kept, first, with its relay: %s",
          exact.n ? exact.l[0].name : "-");
    pool_links_free(&exact);
    pool_links_free(&all);

    /* a relayed pair the probe could not measure ([0, 0, "r"]) leaves the
     * typical link to the links measured */
    pool_links few = {0, NULL};
    pool_links_add(&few, "c", 3000, 300);
    pool_links_add(&few, "d", 1000, 100);
    pool_links_add(&few, "r", 2000, 200);
    pool_links_add_via(&few, "b", 0, 0, "r");
    CHECK(pool_links_summary(&few, &exact, &typical) == 0 && exact.n == 4 &&
              typical.latency_ns == 2000 && typical.bandwidth == 200,
          "typical of the measured: %lld ns, %lld B/s", (long long)typical.latency_ns,
          (long long)typical.bandwidth);
    pool_links_free(&exact);
    pool_links_free(&few);
}

static void refused(json_t *j, const char *want1, const char *want2, const char *what)
{
    char err[256] = "";
    pool_links l;
    int rc = pool_links_from_json(j, &l, err, sizeof err);
    CHECK(rc != 0 && strstr(err, want1) && strstr(err, want2), "%s: refused (%d) naming %s "
          "and %s: %s", what, rc, want1, want2, err);
    if (rc == 0) pool_links_free(&l);
    json_decref(j);
}

static void test_refusals(void)
{
    char longname[80];
    memset(longname, 'x', 70);
    longname[70] = '\0';
    refused(json_pack("{s:[i,i,i]}", "b", 1, 2, 3), "\"b\"", "relay", "a number as relay");
    refused(json_pack("{s:[i,i,n]}", "b", 1, 2), "\"b\"", "relay", "null as relay");
    refused(json_pack("{s:[i,i,s]}", "b", 1, 2, longname), "\"b\"", "at most 63 bytes",
            "a relay name too long");
    refused(json_pack("{s:[i,i,s]}", "b", 1, 2, "bad name!"), "\"b\"", "relay",
            "a relay that is no node name");
    refused(json_pack("{s:[i,i,s]}", "b", 1, 2, "b"), "\"b\"", "another node",
            "a link relayed by its own peer");
    refused(json_pack("{s:[i,i,s,i]}", "b", 1, 2, "r", 4), "\"b\"", "RELAY",
            "four elements");
    refused(json_pack("{s:[i]}", "b", 1), "\"b\"", "latency_ns", "one element");
}

/* ---- the links as the planner counts them ---- */

#define MAXM 8

typedef struct {
    pool_doc doc[MAXM];
    pool_member m[MAXM];
    char name[MAXM][8];
    int n;
} view;

static void view_init(view *v, int n)
{
    memset(v, 0, sizeof *v);
    v->n = n;
    for (int i = 0; i < n; i++) {
        snprintf(v->name[i], sizeof v->name[i], "%c", i < 4 ? "abcd"[i] : 'r' + (i - 4));
        v->doc[i].has = POOL_HAS_LINKS;
        v->m[i] = (pool_member){.name = v->name[i], .live = true, .doc = &v->doc[i]};
    }
}

static void view_free(view *v)
{
    for (int i = 0; i < v->n; i++) pool_links_free(&v->doc[i].links);
}

static void link_set(view *v, int from, int to, int64_t lat, int64_t bw, const char *via)
{
    pool_links_add_via(&v->doc[from].links, v->name[to], lat, bw, via);
}

static void typical_set(view *v, int i)
{
    pool_links exact;
    if (pool_links_summary(&v->doc[i].links, &exact, &v->doc[i].typical) == 0)
        pool_links_free(&exact);
}

/* a, b, c, d and r: r reaches everyone at upload bw_r; a and b reach each
 * other only through r (a's document says so, b's lists no link to a;
 * unmeasured: the probe through r failed, [0, 0, "r"]); every other link
 * direct at 1 GB/s. */
static void relay_view(view *v, int64_t bw_r, bool measured)
{
    view_init(v, 5);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            if (i != j && !((i == 0 && j == 1) || (i == 1 && j == 0)))
                link_set(v, i, j, 100000, 1000000000, NULL);
    for (int i = 0; i < 4; i++) {
        link_set(v, i, 4, 200000, 800000000, NULL);
        link_set(v, 4, i, 300000, bw_r, NULL);
    }
    if (measured) link_set(v, 0, 1, 900000, 700000000, "r");
    else link_set(v, 0, 1, 0, 0, "r");
    for (int i = 0; i < 5; i++) typical_set(v, i);
}

static void test_effective(void)
{
    /* the rule itself: min(path, upload / K) */
    CHECK(pool_link_relayed_bw(50000000, 30000000, 1) == 30000000, "K = 1: the whole upload");
    CHECK(pool_link_relayed_bw(50000000, 30000000, 3) == 10000000, "K = 3: a third of it");
    CHECK(pool_link_relayed_bw(5000000, 30000000, 3) == 5000000, "a slower path stays");

    view v;
    cost_link out[25];
    int cand[5] = {0, 1, 2, 3, 4};
    char note[256];
    /* r does not compute (not a candidate) and carries one pair: K = 1 */
    relay_view(&v, 60000000, true);
    CHECK(pool_link_costs(v.m, NULL, 5, cand, 4, out, note, sizeof note) == 0, "costs");
    int64_t up = v.doc[4].typical.bandwidth;
    CHECK(up == 60000000, "r's typical upload: %lld", (long long)up);
    CHECK(out[0 * 4 + 1].latency_ns == 900000 && out[0 * 4 + 1].bandwidth == up &&
              out[1 * 4 + 0].bandwidth == up && out[1 * 4 + 0].latency_ns == 900000,
          "measured, K = 1: %lld ns, %lld B/s (want %lld)", (long long)out[1].latency_ns,
          (long long)out[1].bandwidth, (long long)up);
    CHECK(out[0 * 4 + 2].bandwidth == 1000000000 && out[2 * 4 + 3].latency_ns == 100000,
          "direct links as measured");
    CHECK(note[0] == '\0', "no note: %s", note);
    /* r computes too: K = 2 */
    cost_link o5[25];
    CHECK(pool_link_costs(v.m, NULL, 5, cand, 5, o5, NULL, 0) == 0, "costs");
    CHECK(o5[0 * 5 + 1].bandwidth == up / 2 && o5[1 * 5 + 0].bandwidth == up / 2,
          "K = 2: %lld B/s (want %lld)", (long long)o5[1].bandwidth, (long long)(up / 2));
    CHECK(o5[4 * 5 + 0].bandwidth == 60000000, "r's own links as measured");
    /* and carries c <-> d as well (c's document says so): K = 3 */
    v.doc[2].links.l[2].via[0] = '\0';
    CHECK(strcmp(v.doc[2].links.l[2].name, "d") == 0, "c's third link is to d");
    snprintf(v.doc[2].links.l[2].via, MESH_NAME_MAX, "r");
    CHECK(pool_link_costs(v.m, NULL, 5, cand, 5, o5, NULL, 0) == 0, "costs");
    CHECK(o5[0 * 5 + 1].bandwidth == up / 3 && o5[2 * 5 + 3].bandwidth == up / 3 &&
              o5[3 * 5 + 2].bandwidth == up / 3,
          "K = 3: a -> b %lld, c -> d %lld, d -> c %lld B/s (want %lld)",
          (long long)o5[1].bandwidth, (long long)o5[13].bandwidth, (long long)o5[17].bandwidth,
          (long long)(up / 3));
    view_free(&v);

    /* a relay that measured nothing: its upload is the path's own */
    relay_view(&v, 60000000, true);
    v.doc[4].has &= ~POOL_HAS_LINKS;
    CHECK(pool_link_costs(v.m, NULL, 5, cand, 4, out, NULL, 0) == 0 &&
              out[0 * 4 + 1].bandwidth == 700000000,
          "no upload known, K = 1: %lld B/s", (long long)out[1].bandwidth);
    CHECK(pool_link_costs(v.m, NULL, 5, cand, 5, o5, NULL, 0) == 0 &&
              o5[0 * 5 + 1].bandwidth == 350000000,
          "no upload known, K = 2: %lld B/s", (long long)o5[1].bandwidth);
    view_free(&v);

    /* unmeasured: the two hops, a -> r then r -> b */
    relay_view(&v, 60000000, false);
    pool_link_costs(v.m, NULL, 5, cand, 4, out, NULL, 0);
    CHECK(out[0 * 4 + 1].latency_ns == 200000 + 300000 && out[0 * 4 + 1].bandwidth == 60000000,
          "two hops: %lld ns, %lld B/s", (long long)out[1].latency_ns,
          (long long)out[1].bandwidth);
    view_free(&v);

    /* a relay that is no member of the view is named, and ignored */
    relay_view(&v, 60000000, true);
    snprintf(v.doc[0].links.l[v.doc[0].links.n - 1].via, MESH_NAME_MAX, "zed");
    pool_link_costs(v.m, NULL, 5, cand, 4, out, note, sizeof note);
    CHECK(strstr(note, "\"zed\"") && strstr(note, "no member of the view") &&
              out[1].bandwidth == 700000000,
          "unknown relay: %s (%lld B/s)", note, (long long)out[1].bandwidth);
    view_free(&v);
}

/* ---- the plan ---- */

#define SEEDS 40

static const cost_shape SHAPE = {.layers = 8, .hidden = 64, .intermediate = 128, .heads = 4,
                                  .kv_heads = 2, .vocab = 300, .seq = 32};

static cost_profile profile(int64_t speed_permille)
{
    cost_profile p;
    memset(&p, 0, sizeof p);
    p.micro_batch = 2;
    for (int u = 0; u < COST_UNITS; u++) {
        p.fwd_ns[u] = (int64_t)(u == COST_LAYER ? 1500000 : 400000) * 1000 / speed_permille;
        p.bwd_ns[u] = 2 * p.fwd_ns[u];
        p.opt_ns[u] = 50000;
    }
    p.memory_bytes = (int64_t)8 << 30;
    p.scratch_slots = 2;
    return p;
}

/* The plan of candidates cand[0..f) of v, as pool_elect.c computes it. */
static int plan_of(view *v, const int *cand, int f, const int64_t *speed, plan *pl)
{
    cost_link links[64];
    plan_node nodes[8];
    memset(nodes, 0, sizeof nodes);
    if (pool_link_costs(v->m, NULL, v->n, cand, f, links, NULL, 0)) return -1;
    for (int i = 0; i < f; i++) {
        snprintf(nodes[i].name, sizeof nodes[i].name, "%s", v->name[cand[i]]);
        nodes[i].prof = profile(speed[cand[i]]);
    }
    plan_fleet fleet = {.nnodes = f, .nodes = nodes, .links = links};
    plan_job pj = {.shape = SHAPE, .batch = 32, .max_micro_batch = 2, .min_micro_batch = 2,
                   .wire_bytes = 4, .margin_permille = 50};
    char err[700];
    int rc = plan_compute(pl, &fleet, &pj, PLAN_AUTO, NULL, err, sizeof err);
    if (rc) printf("plan: %s\n", err);
    return rc;
}

static bool holds(const plan *pl, const int *cand, int who)
{
    for (int s = 0; s < pl->nstages; s++)
        if (cand[pl->stage[s].node[0]] == who) return true;
    return false;
}

static bool neighbours(const plan *pl, const int *cand, int x, int y)
{
    for (int s = 0; s + 1 < pl->nstages; s++) {
        int p = cand[pl->stage[s].node[0]], q = cand[pl->stage[s + 1].node[0]];
        if ((p == x && q == y) || (p == y && q == x)) return true;
    }
    return false;
}

static void test_plan(void)
{
    int cand[5] = {0, 1, 2, 3, 4};
    int adjacent_without = 0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        seed_state = seed;
        int64_t speed[5];
        for (int i = 0; i < 5; i++) speed[i] = between(950, 1050);
        view v;
        plan pl;
        /* (a) four computing members, a and b only through r's slow upload */
        relay_view(&v, between(1000000, 4000000), seed % 2 == 0);
        if (plan_of(&v, cand, 4, speed, &pl) == 0) {
            CHECK(pl.nstages >= 3 && holds(&pl, cand, 0) && holds(&pl, cand, 1),
                  "seed %llu: a and b both hold stages (%d stages)", (unsigned long long)seed,
                  pl.nstages);
            CHECK(!neighbours(&pl, cand, 0, 1), "seed %llu: a and b neighbour stages over "
                  "the relay", (unsigned long long)seed);
        } else {
            CHECK(0, "seed %llu: no plan", (unsigned long long)seed);
        }
        /* the same pool without the relay's name: the pair counts as a
         * measured 700 MB/s link, and nothing keeps a and b apart (shows
         * the case discriminates; not a requirement) */
        for (int i = 0; i < v.doc[0].links.n; i++) v.doc[0].links.l[i].via[0] = '\0';
        for (int i = 0; i < v.doc[1].links.n; i++) v.doc[1].links.l[i].via[0] = '\0';
        if (plan_of(&v, cand, 4, speed, &pl) == 0 && neighbours(&pl, cand, 0, 1))
            adjacent_without++;
        view_free(&v);

        /* (b) the relay computes and is the fastest: it holds a stage */
        relay_view(&v, 1000000000, seed % 2 == 0);
        speed[4] = between(1800, 2200);
        if (plan_of(&v, cand, 5, speed, &pl) == 0)
            CHECK(holds(&pl, cand, 4), "seed %llu: the fast relay holds no stage",
                  (unsigned long long)seed);
        else
            CHECK(0, "seed %llu: no plan with the relay", (unsigned long long)seed);
        view_free(&v);
    }
    printf("without the relay's name, a and b neighboured in %d of %d plans\n",
           adjacent_without, SEEDS);
}

int main(void)
{
    test_round_trip();
    test_refusals();
    test_effective();
    test_plan();
    printf("%s\n", failures ? "FAILED" : "test_pool_relay: ok");
    return failures != 0;
}

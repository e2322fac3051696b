/* test_plan.c — the planner against an independent brute force: on random
 * fleets of 2 to 8 nodes, every order of every subset of nodes and every
 * split of the layers is evaluated by cost_evaluate, and the planner must
 * find the same step time; every plan respects memory; the plan hash does
 * not depend on runs or on the order nodes are listed in. */
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int64_t range(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

typedef struct {
    plan_fleet f;
    plan_job job;
} world;

static void world_free(world *w)
{
    free(w->f.nodes);
    free(w->f.links);
}

static plan_job small_job(int L)
{
    plan_job j;
    memset(&j, 0, sizeof j);
    j.shape = (cost_shape){.layers = L, .hidden = 32, .intermediate = 64, .heads = 4, .kv_heads = 2,
                           .vocab = 50, .seq = 8};
    j.batch = 4;
    j.max_micro_batch = 4;
    j.wire_bytes = 4;
    j.margin_permille = 50;
    return j;
}

/* Random speeds (a factor of 20 between nodes), memories from a fraction
 * of a layer to the whole model, links from a LAN to a bad uplink,
 * sometimes asymmetric. */
static void random_world(world *w, int n, int L)
{
    w->job = small_job(L);
    w->job.batch = (int64_t[]){1, 2, 4, 6, 8}[range(0, 4)];
    w->job.max_micro_batch = range(1, 4);
    w->job.shape.tied = range(0, 1);
    w->f.nnodes = n;
    w->f.nodes = calloc((size_t)n, sizeof *w->f.nodes);
    w->f.links = calloc((size_t)n * n, sizeof *w->f.links);
    cost_bytes cb;
    cost_bytes_compute(&cb, &w->job.shape, 1, 4, NULL, 0);
    int64_t layer = cost_stage_memory(&cb, false, 1, false, 1, false, 1);
    int64_t whole = cost_stage_memory(&cb, false, 1, true, L, true, 4);
    for (int i = 0; i < n; i++) {
        plan_node *nd = &w->f.nodes[i];
        snprintf(nd->name, sizeof nd->name, "node-%c%d", 'a' + (int)range(0, 25), i);
        cost_profile *pf = &nd->prof;
        pf->micro_batch = range(1, 2);
        int64_t speed = range(1, 20);
        for (int u = 0; u < COST_UNITS; u++) {
            pf->fwd_ns[u] = speed * range(500, 1500) * (u == COST_LAYER ? 10 : 3);
            pf->bwd_ns[u] = pf->fwd_ns[u] * range(15, 25) / 10;
            pf->opt_ns[u] = range(0, 3) ? speed * range(100, 3000) : 0;
        }
        pf->memory_bytes = range(layer / 2, whole + layer);
        pf->scratch_slots = (int)range(1, 2);
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            cost_link *l = &w->f.links[i * n + j];
            if (j < i && range(0, 3)) {
                *l = w->f.links[j * n + i];   /* mostly symmetric */
                continue;
            }
            l->latency_ns = range(0, 200000);
            l->bandwidth = range(1000000, 2000000000);
        }
}

/* ---- brute force: every order of every subset, every split ------------- */

typedef struct {
    const world *w;
    plan *p;
    int seq[16];
    bool used[16];
    int64_t best;
    int64_t leaves;
} brute;

static void brute_split(brute *x, int p, int s, int layer)
{
    int L = x->w->job.shape.layers;
    plan_stage *st = &x->p->stage[s];
    st->ndevices = 1;
    st->node[0] = x->seq[s];
    st->layer_begin = layer;
    st->embed = s == 0;
    st->head = s == p - 1;
    if (s == p - 1) {
        st->layer_end = L;
        x->p->nstages = p;
        x->leaves++;
        if (cost_evaluate(x->p, &x->w->f, &x->w->job, NULL, 0) == 0 && x->p->step_ns < x->best)
            x->best = x->p->step_ns;
        return;
    }
    /* middle stages hold at least one layer: leave one for each still to come */
    int min = s == 0 ? 0 : 1, later = p - 2 - s > 0 ? p - 2 - s : 0;
    for (int k = min; layer + k + later <= L; k++) {
        st->layer_end = layer + k;
        brute_split(x, p, s + 1, layer + k);
    }
}

static void brute_orders(brute *x, int depth)
{
    int n = x->w->f.nnodes;
    for (int i = 0; i < n; i++) {
        if (x->used[i]) continue;
        x->used[i] = true;
        x->seq[depth] = i;
        brute_split(x, depth + 1, 0, 0);
        if (depth + 1 < n) brute_orders(x, depth + 1);
        x->used[i] = false;
    }
}

static int64_t brute_force(const world *w, int64_t *leaves)
{
    brute x;
    memset(&x, 0, sizeof x);
    x.w = w;
    x.p = malloc(sizeof *x.p);
    x.best = INT64_MAX;
    for (int64_t b = 1; b <= w->job.max_micro_batch && b <= w->job.batch; b++) {
        if (w->job.batch % b) continue;
        memset(x.p, 0, sizeof *x.p);
        x.p->micro_batch = b;
        x.p->micro_batches = w->job.batch / b;
        brute_orders(&x, 0);
    }
    free(x.p);
    *leaves += x.leaves;
    return x.best;
}

/* The same fleet listed in another order. */
static void shuffled(const world *w, world *out)
{
    int n = w->f.nnodes, perm[PLAN_MAX_NODES];
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)range(0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    *out = *w;
    out->f.nodes = calloc((size_t)n, sizeof *out->f.nodes);
    out->f.links = calloc((size_t)n * n, sizeof *out->f.links);
    for (int i = 0; i < n; i++) {
        out->f.nodes[i] = w->f.nodes[perm[i]];
        for (int j = 0; j < n; j++) out->f.links[i * n + j] = w->f.links[perm[i] * n + perm[j]];
    }
}

static void check_memory(const plan *p, const world *w, const char *what)
{
    for (int s = 0; s < p->nstages; s++) {
        const plan_stage *st = &p->stage[s];
        const cost_profile *pf = &w->f.nodes[st->node[0]].prof;
        int64_t limit = pf->memory_bytes - pf->memory_bytes * w->job.margin_permille / 1000;
        CHECK(st->memory_bytes <= limit && st->memory_bytes == st->memory_bytes,
              "%s: stage %d uses %lld bytes, limit %lld", what, s, (long long)st->memory_bytes,
              (long long)limit);
    }
}

static void test_exact_against_brute_force(void)
{
    static const int max_layers[9] = {0, 0, 12, 8, 6, 5, 4, 3, 3};
    plan *p = malloc(sizeof *p), *q = malloc(sizeof *q);
    int fleets = 0, feasible = 0;
    int64_t leaves = 0;
    for (int t = 0; t < 217; t++) {
        int n = 2 + t % 7;
        int L = (int)range(1, max_layers[n]);
        world w;
        random_world(&w, n, L);
        int64_t want = brute_force(&w, &leaves);
        char err[512] = "";
        plan_stats st;
        int rc = plan_compute(p, &w.f, &w.job, PLAN_AUTO, &st, err, sizeof err);
        fleets++;
        if (want == INT64_MAX) {
            CHECK(rc != 0 && strstr(err, "missing") != NULL,
                  "fleet %d: brute force finds nothing, planner says rc %d \"%s\"", t, rc, err);
        } else {
            feasible++;
            CHECK(rc == 0, "fleet %d (%d nodes, %d layers): planner fails: %s", t, n, L, err);
            if (rc == 0) {
                CHECK(st.method == PLAN_EXACT, "fleet %d: method %d", t, st.method);
                CHECK(p->step_ns == want, "fleet %d (%d nodes, %d layers, batch %lld): planner "
                      "%lld ns, brute force %lld ns", t, n, L, (long long)w.job.batch,
                      (long long)p->step_ns, (long long)want);
                check_memory(p, &w, "exact");
                /* the same plan, whatever order the nodes are listed in */
                world s;
                shuffled(&w, &s);
                CHECK(plan_compute(q, &s.f, &s.job, PLAN_AUTO, NULL, err, sizeof err) == 0 &&
                          plan_hash(q, &s.f) == plan_hash(p, &w.f) && q->step_ns == p->step_ns,
                      "fleet %d: listing order changes the plan", t);
                world_free(&s);
                /* and the same plan again */
                CHECK(plan_compute(q, &w.f, &w.job, PLAN_AUTO, NULL, err, sizeof err) == 0 &&
                          plan_hash(q, &w.f) == plan_hash(p, &w.f),
                      "fleet %d: a second run gives another plan", t);
                /* the heuristic never beats the exact plan, and is valid */
                if (plan_compute(q, &w.f, &w.job, PLAN_HEURISTIC, NULL, err, sizeof err) == 0) {
                    CHECK(q->step_ns >= p->step_ns, "fleet %d: heuristic beats exact", t);
                    check_memory(q, &w, "heuristic");
                }
            }
        }
        world_free(&w);
    }
    printf("exact vs brute force: %d fleets (%d feasible), %lld plans evaluated by brute force\n",
           fleets, feasible, (long long)leaves);
    CHECK(fleets >= 200 && feasible >= 150, "only %d fleets, %d feasible", fleets, feasible);
    free(p);
    free(q);
}

/* A fleet whose nodes can hold nothing says what is missing, and where. */
static void test_errors(void)
{
    world w;
    random_world(&w, 3, 4);
    for (int i = 0; i < 3; i++) w.f.nodes[i].prof.memory_bytes = 1000;
    plan *p = malloc(sizeof *p);
    char err[512] = "";
    CHECK(plan_compute(p, &w.f, &w.job, PLAN_AUTO, NULL, err, sizeof err) != 0 &&
              strstr(err, "missing there") && strstr(err, "node-"),
          "tiny fleet: \"%s\"", err);
    /* enough for one layer per node, not for 4 layers on 3 nodes */
    cost_bytes cb;
    cost_bytes_compute(&cb, &w.job.shape, 1, 4, NULL, 0);
    for (int i = 0; i < 3; i++)
        w.f.nodes[i].prof.memory_bytes =
            cost_stage_memory(&cb, w.job.shape.tied, 2, true, 1, true, 1) * 1100 / 1000;
    CHECK(plan_compute(p, &w.f, &w.job, PLAN_AUTO, NULL, err, sizeof err) != 0 &&
              strstr(err, "of the 4 decoder layers") && strstr(err, "more memory"),
          "full fleet: \"%s\"", err);
    snprintf(w.f.nodes[2].name, sizeof w.f.nodes[2].name, "%s", w.f.nodes[0].name);
    CHECK(plan_compute(p, &w.f, &w.job, PLAN_AUTO, NULL, err, sizeof err) != 0 &&
              strstr(err, "appears twice"), "duplicate: \"%s\"", err);
    snprintf(w.f.nodes[2].name, sizeof w.f.nodes[2].name, "other");
    w.f.links[1 * 3 + 2].bandwidth = -5;
    CHECK(plan_compute(p, &w.f, &w.job, PLAN_AUTO, NULL, err, sizeof err) != 0 &&
              strstr(err, "-> other") && strstr(err, "bandwidth"), "negative link: \"%s\"", err);
    world_free(&w);
    free(p);
}

/* The uniform baseline and the conversion to the engine's split. */
static void test_uniform_and_split(void)
{
    world w;
    random_world(&w, 3, 7);
    for (int i = 0; i < 3; i++) w.f.nodes[i].prof.memory_bytes = (int64_t)1 << 40;
    plan *p = malloc(sizeof *p), *u = malloc(sizeof *u);
    char err[512] = "";
    int order[3] = {2, 0, 1};
    CHECK(plan_uniform(u, &w.f, &w.job, order, 3, err, sizeof err) == 0, "uniform: %s", err);
    CHECK(u->nstages == 3 && u->stage[0].node[0] == 2 && u->stage[0].layer_end == 3 &&
              u->stage[1].layer_end == 5 && u->stage[2].layer_end == 7,
          "uniform ranges");
    CHECK(plan_compute(p, &w.f, &w.job, PLAN_AUTO, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(p->step_ns <= u->step_ns, "plan %lld slower than uniform %lld",
          (long long)p->step_ns, (long long)u->step_ns);
    split_plan sp;
    plan_to_split(p, &sp);
    CHECK(sp.nstages == p->nstages && sp.begin[0] == 0 && sp.end[sp.nstages - 1] == 7,
          "split");
    for (int s = 1; s < sp.nstages; s++) CHECK(sp.begin[s] == sp.end[s - 1], "split chain");
    CHECK(plan_uniform(u, &w.f, &w.job, order, 3, err, sizeof err) == 0 &&
              plan_uniform(u, &w.f, &(plan_job){.shape = {2, 32, 64, 4, 2, 50, 8, false},
                                                  .batch = 1, .max_micro_batch = 1,
                                                  .wire_bytes = 4},
                           order, 3, err, sizeof err) != 0 &&
              strstr(err, "3 nodes for 2 layers"),
          "uniform with more nodes than layers: \"%s\"", err);
    world_free(&w);
    free(p);
    free(u);
}

/* Large fleets: the heuristic's plans are valid, fit and are deterministic. */
static void test_large(void)
{
    world w, s;
    random_world(&w, 64, 3);
    w.job.shape.layers = 40;
    cost_bytes cb;
    cost_bytes_compute(&cb, &w.job.shape, 1, 4, NULL, 0);
    int64_t layer = cost_stage_memory(&cb, false, 2, false, 1, false, 1);
    for (int i = 0; i < 64; i++) w.f.nodes[i].prof.memory_bytes = range(layer, 20 * layer);
    plan *p = malloc(sizeof *p), *q = malloc(sizeof *q);
    char err[512] = "";
    plan_stats st;
    CHECK(plan_compute(p, &w.f, &w.job, PLAN_AUTO, &st, err, sizeof err) == 0, "64 nodes: %s", err);
    CHECK(st.method == PLAN_HEURISTIC, "64 nodes use the heuristic");
    check_memory(p, &w, "64 nodes");
    shuffled(&w, &s);
    CHECK(plan_compute(q, &s.f, &s.job, PLAN_AUTO, NULL, err, sizeof err) == 0 &&
              plan_hash(q, &s.f) == plan_hash(p, &w.f),
          "64 nodes: listing order changes the plan");
    int order[64];
    for (int i = 0; i < 40; i++) order[i] = i;
    if (plan_uniform(q, &w.f, &w.job, order, 40, err, sizeof err) == 0)
        CHECK(p->step_ns <= q->step_ns, "64 nodes: plan slower than a uniform split");
    world_free(&w);
    world_free(&s);
    free(p);
    free(q);
}

/* The fastest node (by decoder-layer time), first of equals. */
static int fastest_node(const world *w)
{
    int best = 0;
    for (int i = 1; i < w->f.nnodes; i++) {
        const cost_profile *a = &w->f.nodes[i].prof, *b = &w->f.nodes[best].prof;
        if (a->fwd_ns[COST_LAYER] + a->bwd_ns[COST_LAYER] < b->fwd_ns[COST_LAYER] + b->bwd_ns[COST_LAYER])
            best = i;
    }
    return best;
}

/* Only nodes that hold the job's data may be the first stage: with the
 * fastest node marked no_data (and sometimes others), no method puts a
 * no_data node first, and exact = exhaustive = brute force (which, through
 * cost_evaluate, refuses such plans too). */
static void test_no_data_first_stage(void)
{
    static const int max_layers[8] = {0, 0, 10, 7, 5, 4, 4, 3};
    plan *p = malloc(sizeof *p), *q = malloc(sizeof *q), *r = malloc(sizeof *r);
    int feasible = 0, was_first = 0;
    int64_t leaves = 0;
    for (int t = 0; t < 120; t++) {
        int n = 2 + t % 6;
        int L = (int)range(1, max_layers[n]);
        world w;
        random_world(&w, n, L);
        char err[512] = "";
        int fast = fastest_node(&w);
        if (plan_compute(p, &w.f, &w.job, PLAN_EXACT, NULL, err, sizeof err) == 0 &&
            p->stage[0].node[0] == fast)
            was_first++;
        w.f.nodes[fast].no_data = true;
        for (int i = 0; i < n; i++)
            if (i != fast && range(0, 3) == 0) w.f.nodes[i].no_data = true;
        bool any = false;
        for (int i = 0; i < n; i++) any |= !w.f.nodes[i].no_data;
        if (!any) w.f.nodes[(fast + 1) % n].no_data = false;
        int64_t want = brute_force(&w, &leaves);
        int rc = plan_compute(p, &w.f, &w.job, PLAN_EXACT, NULL, err, sizeof err);
        int rx = plan_compute(q, &w.f, &w.job, PLAN_EXHAUSTIVE, NULL, err, sizeof err);
        int rh = plan_compute(r, &w.f, &w.job, PLAN_HEURISTIC, NULL, err, sizeof err);
        if (want == INT64_MAX) {
            CHECK(rc != 0 && rx != 0 && rh != 0, "no_data fleet %d: brute force finds nothing, "
                  "planner rc %d/%d/%d", t, rc, rx, rh);
        } else {
            feasible++;
            CHECK(rc == 0 && rx == 0, "no_data fleet %d: planner fails: %s", t, err);
            if (rc == 0 && rx == 0) {
                CHECK(p->step_ns == want && q->step_ns == want,
                      "no_data fleet %d: exact %lld, exhaustive %lld, brute force %lld", t,
                      (long long)p->step_ns, (long long)q->step_ns, (long long)want);
                CHECK(!w.f.nodes[p->stage[0].node[0]].no_data &&
                          !w.f.nodes[q->stage[0].node[0]].no_data,
                      "no_data fleet %d: a node without the data is the first stage", t);
                check_memory(p, &w, "no_data exact");
            }
            if (rh == 0) {
                CHECK(!w.f.nodes[r->stage[0].node[0]].no_data,
                      "no_data fleet %d: the heuristic puts a node without the data first", t);
                CHECK(r->step_ns >= want, "no_data fleet %d: heuristic beats exact", t);
            }
        }
        world_free(&w);
    }
    printf("no_data: %d fleets feasible; the fastest node was the first stage in %d of them "
           "before it lost its data\n", feasible, was_first);
    CHECK(feasible >= 60 && was_first >= 10, "only %d feasible, fastest first in %d", feasible,
          was_first);
    free(p);
    free(q);
    free(r);
}

/* No node holds the data; the data is only on nodes too small to be first;
 * the uniform split refuses a no_data node first. */
static void test_no_data_errors(void)
{
    world w;
    random_world(&w, 3, 4);
    for (int i = 0; i < 3; i++) {
        w.f.nodes[i].prof.memory_bytes = (int64_t)1 << 40;
        w.f.nodes[i].no_data = true;
    }
    plan *p = malloc(sizeof *p);
    char err[512] = "";
    for (int m = PLAN_AUTO; m <= PLAN_EXHAUSTIVE; m++)
        CHECK(plan_compute(p, &w.f, &w.job, (plan_method)m, NULL, err, sizeof err) != 0 &&
                  strstr(err, "no node that holds the job's data can be the first stage") &&
                  strstr(err, w.f.nodes[0].name),
              "all no_data, method %d: \"%s\"", m, err);
    /* node 0 holds the data but cannot hold the embedding */
    w.f.nodes[0].no_data = false;
    w.f.nodes[0].prof.memory_bytes = 1000;
    for (int m = PLAN_AUTO; m <= PLAN_EXHAUSTIVE; m++)
        CHECK(plan_compute(p, &w.f, &w.job, (plan_method)m, NULL, err, sizeof err) != 0 &&
                  strstr(err, "no node that holds the job's data can be the first stage") &&
                  strstr(err, w.f.nodes[0].name),
              "data on a tiny node, method %d: \"%s\"", m, err);
    /* with room on it, the plan starts there */
    w.f.nodes[0].prof.memory_bytes = (int64_t)1 << 40;
    CHECK(plan_compute(p, &w.f, &w.job, PLAN_AUTO, NULL, err, sizeof err) == 0 &&
              p->stage[0].node[0] == 0, "data on node 0: %s", err);
    /* memory missing everywhere is still reported as missing memory */
    for (int i = 0; i < 3; i++) w.f.nodes[i].prof.memory_bytes = 1000;
    CHECK(plan_compute(p, &w.f, &w.job, PLAN_AUTO, NULL, err, sizeof err) != 0 &&
              strstr(err, "missing there"), "tiny fleet with no_data: \"%s\"", err);
    for (int i = 0; i < 3; i++) w.f.nodes[i].prof.memory_bytes = (int64_t)1 << 40;
    int order[3] = {1, 0, 2};
    CHECK(plan_uniform(p, &w.f, &w.job, order, 3, err, sizeof err) != 0 &&
              strstr(err, w.f.nodes[1].name) && strstr(err, "first stage"),
          "uniform with a no_data node first: \"%s\"", err);
    order[0] = 0;
    order[1] = 1;
    CHECK(plan_uniform(p, &w.f, &w.job, order, 3, err, sizeof err) == 0, "uniform: %s", err);
    world_free(&w);
    free(p);
}

/* 64 nodes, the fastest half without the data: the heuristic still plans,
 * with a node that holds the data first, deterministically. */
static void test_no_data_large(void)
{
    world w, s;
    random_world(&w, 64, 3);
    w.job.shape.layers = 40;
    cost_bytes cb;
    cost_bytes_compute(&cb, &w.job.shape, 1, 4, NULL, 0);
    int64_t layer = cost_stage_memory(&cb, false, 2, false, 1, false, 1);
    int64_t median = 0;
    {
        int64_t t[64];
        for (int i = 0; i < 64; i++) {
            w.f.nodes[i].prof.memory_bytes = range(layer, 20 * layer);
            t[i] = w.f.nodes[i].prof.fwd_ns[COST_LAYER];
        }
        for (int a = 1; a < 64; a++)
            for (int j = a; j > 0 && t[j - 1] > t[j]; j--) {
                int64_t x = t[j];
                t[j] = t[j - 1];
                t[j - 1] = x;
            }
        median = t[32];
    }
    for (int i = 0; i < 64; i++) w.f.nodes[i].no_data = w.f.nodes[i].prof.fwd_ns[COST_LAYER] < median;
    plan *p = malloc(sizeof *p), *q = malloc(sizeof *q);
    char err[512] = "";
    CHECK(plan_compute(p, &w.f, &w.job, PLAN_AUTO, NULL, err, sizeof err) == 0, "64 nodes: %s", err);
    CHECK(!w.f.nodes[p->stage[0].node[0]].no_data, "64 nodes: no_data node first");
    check_memory(p, &w, "64 nodes no_data");
    shuffled(&w, &s);
    CHECK(plan_compute(q, &s.f, &s.job, PLAN_AUTO, NULL, err, sizeof err) == 0 &&
              plan_hash(q, &s.f) == plan_hash(p, &w.f),
          "64 nodes no_data: listing order changes the plan");
    world_free(&w);
    world_free(&s);
    free(p);
    free(q);
}

/* A pinned micro-batch (min = max, as a pool job keeps its own): every
 * plan found uses exactly it, and without the pin the planner may not. */
static void test_pinned_micro_batch(void)
{
    int pinned_differs = 0;
    for (int trial = 0; trial < 40; trial++) {
        world w;
        random_world(&w, 1 + trial % 4, 6);
        w.job.batch = 8;
        w.job.max_micro_batch = 8;
        plan *p = malloc(sizeof *p);
        for (int64_t b = 1; b <= 8; b *= 2) {
            w.job.min_micro_batch = b;
            w.job.max_micro_batch = b;
            if (plan_compute(p, &w.f, &w.job, PLAN_AUTO, NULL, NULL, 0) == 0) {
                CHECK(p->micro_batch == b && p->micro_batches == 8 / b,
                      "trial %d: pinned %lld, plan uses %lld x %lld", trial, (long long)b,
                      (long long)p->micro_batches, (long long)p->micro_batch);
                pinned_differs += b == 8;
            }
        }
        free(p);
        world_free(&w);
    }
    CHECK(pinned_differs > 0, "no pinned plan was feasible at micro-batch 8");
}

int main(void)
{
    test_exact_against_brute_force();
    test_errors();
    test_uniform_and_split();
    test_large();
    test_no_data_first_stage();
    test_no_data_errors();
    test_no_data_large();
    test_pinned_micro_batch();
    if (failures) printf("%d failures\n", failures);
    return failures ? 1 : 0;
}

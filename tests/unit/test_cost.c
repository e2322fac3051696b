/* test_cost.c — the cost model: bytes counted as model/stage.c allocates
 * them, exact integer arithmetic, spec-sheet times, link estimates, and the
 * predicted step of a hand-computed plan with its memory errors. */
#include "model.h"
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>

#include "check.h"
#endif

static llama_config config(bool tied)
{
    llama_config c = {0};
    c.hidden_size = 48;
    c.intermediate_size = 100;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 2;
    c.vocab_size = 67;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.tie_word_embeddings = tied;
    char err[256];
    if (llama_config_validate(&c, "test", err, sizeof err)) printf("config: %s\n", err);
    return c;
}

static cost_shape shape_of(const llama_config *c, int T)
{
    return (cost_shape){.layers = c->num_hidden_layers, .hidden = c->hidden_size,
                        .intermediate = c->intermediate_size, .heads = c->num_attention_heads,
                        .kv_heads = c->num_key_value_heads, .vocab = c->vocab_size, .seq = T,
                        .tied = c->tie_word_embeddings};
}

static size_t count_params(const llama_config *c, int a, int b, bool first, bool last)
{
    stage *s;
    char err[256];
    if (stage_create(&s, c, a, b, first, last, 1, 8, 1, err, sizeof err)) {
        printf("stage: %s\n", err);
        return 0;
    }
    size_t n = stage_num_params(s);
    stage_free(s);
    return n;
}

/* Parameter counts equal the real stages', for every kind of stage. */
static void test_params_match_stages(void)
{
    for (int tied = 0; tied < 2; tied++) {
        llama_config c = config(tied);
        cost_shape sh = shape_of(&c, 8);
        cost_bytes cb;
        char err[256];
        CHECK(cost_bytes_compute(&cb, &sh, 1, 4, err, sizeof err) == 0, "%s", err);
        int64_t E = cb.params[COST_EMBED], Y = cb.params[COST_LAYER], H = cb.params[COST_HEAD];
        CHECK((int64_t)count_params(&c, 0, 0, true, false) == E, "embedding");
        CHECK((int64_t)count_params(&c, 0, 2, false, false) == 2 * Y, "two layers");
        CHECK((int64_t)count_params(&c, 3, 3, false, true) == H, "head (tied %d)", tied);
        int64_t whole = E + 3 * Y + (tied ? c.hidden_size : H);
        CHECK((int64_t)count_params(&c, 0, 3, true, true) == whole, "whole model (tied %d)", tied);
        CHECK(cb.weight[COST_LAYER] == 4 * Y && cb.moments[COST_LAYER] == 8 * Y, "fp32 bytes");
    }
}

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && __GLIBC_PREREQ(2, 33)
static int64_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (int64_t)(mi.uordblks + mi.hblkhd);
}

static int64_t stage_heap(const llama_config *c, int a, int b, bool first, bool last, int B,
                          int T, int slots)
{
    stage *s;
    char err[256];
    int64_t before = heap_in_use();
    if (stage_create(&s, c, a, b, first, last, B, T, slots, err, sizeof err)) return -1;
    int64_t used = heap_in_use() - before;
    stage_free(s);
    return used;
}

/* The activations kept per in-flight micro-batch are what the stage
 * allocates per slot (allocator rounding aside). */
static void test_activation_bytes_match_stage(void)
{
    llama_config c = config(false);
    int B = 2, T = 32;
    cost_shape sh = shape_of(&c, T);
    cost_bytes cb;
    cost_bytes_compute(&cb, &sh, B, 4, NULL, 0);
    int64_t tol = 8192;   /* page rounding of the arena, chunk headers, small tables */
    int64_t per_slot = stage_heap(&c, 0, 2, false, false, B, T, 3) -
                       stage_heap(&c, 0, 2, false, false, B, T, 2);
    int64_t want = cb.slot + 2 * cb.act[COST_LAYER];
    CHECK(llabs(per_slot - want) < tol, "two layers: %lld bytes per slot, model says %lld",
          (long long)per_slot, (long long)want);
    per_slot = stage_heap(&c, 3, 3, false, true, B, T, 3) - stage_heap(&c, 3, 3, false, true, B, T, 2);
    want = cb.slot + cb.act[COST_HEAD];
    CHECK(llabs(per_slot - want) < tol, "head: %lld bytes per slot, model says %lld",
          (long long)per_slot, (long long)want);
    int64_t per_layer = stage_heap(&c, 0, 2, false, false, B, T, 1) -
                        stage_heap(&c, 0, 1, false, false, B, T, 1);
    want = cb.weight[COST_LAYER] + cb.grad[COST_LAYER] + cb.moments[COST_LAYER] + cb.act[COST_LAYER];
    CHECK(llabs(per_layer - want) < tol, "one more layer: %lld bytes, model says %lld",
          (long long)per_layer, (long long)want);
}
#else
static void test_activation_bytes_match_stage(void) {}
#endif

static void test_arithmetic(void)
{
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t a = (int64_t)(x >> (1 + x % 40)), b = (int64_t)((x * 31) >> (1 + (x >> 5) % 40));
        int64_t c = (int64_t)((x * 17) >> (1 + (x >> 11) % 50)) + 1;
#ifdef __SIZEOF_INT128__
        __extension__ unsigned __int128 q = (unsigned __int128)a * (unsigned __int128)b / (unsigned __int128)c;
        int64_t want = q > INT64_MAX ? INT64_MAX : (int64_t)q;
        CHECK(cost_muldiv(a, b, c) == want, "%lld * %lld / %lld", (long long)a, (long long)b,
              (long long)c);
#endif
    }
    CHECK(cost_muldiv(INT64_MAX, INT64_MAX, INT64_MAX) == INT64_MAX, "max");
    CHECK(cost_muldiv(INT64_MAX, 2, 1) == INT64_MAX, "saturates");
    cost_link l = {100000, 1000000000};   /* 100 us, 1 GB/s */
    CHECK(cost_transfer_ns(&l, 1000000) == 1100000, "1 MB: %lld", (long long)cost_transfer_ns(&l, 1000000));
    CHECK(cost_transfer_ns(&l, 1) == 100001, "rounded up");
    CHECK(cost_transfer_ns(&l, 0) == 0, "nothing to send");
    CHECK(cost_scale(1000, 1, 4) == 250 && cost_scale(999, 4, 4) == 999, "scale");
}

static void test_memory_and_specs(void)
{
    llama_config c = config(false);
    cost_shape sh = shape_of(&c, 16);
    cost_bytes cb;
    cost_bytes_compute(&cb, &sh, 1, 4, NULL, 0);
    int64_t m1 = cost_stage_memory(&cb, false, 1, false, 1, false, 1);
    int64_t m2 = cost_stage_memory(&cb, false, 1, false, 2, false, 1);
    int64_t m3 = cost_stage_memory(&cb, false, 1, false, 3, false, 1);
    CHECK(m3 - m2 == m2 - m1 && m2 - m1 > 0, "affine in layers");
    int64_t q2 = cost_stage_memory(&cb, false, 1, false, 2, false, 2);
    CHECK(q2 - m2 == cb.slot + 2 * cb.act[COST_LAYER], "in-flight micro-batch");
    /* a faster device is faster, memory bandwidth drives AdamW */
    cost_spec slow = {10000, 400, (int64_t)1 << 34, 500000000000, 2, 1};
    cost_spec fast = slow;
    fast.gflops *= 4;
    fast.mem_bandwidth *= 2;
    cost_profile ps, pf;
    char err[256];
    CHECK(cost_profile_from_spec(&ps, &slow, &sh, 2, err, sizeof err) == 0, "%s", err);
    CHECK(cost_profile_from_spec(&pf, &fast, &sh, 2, err, sizeof err) == 0, "%s", err);
    for (int u = 0; u < COST_UNITS; u++) {
        CHECK(pf.fwd_ns[u] <= ps.fwd_ns[u] && pf.opt_ns[u] <= ps.opt_ns[u], "unit %d", u);
        CHECK(ps.bwd_ns[u] == 2 * ps.fwd_ns[u], "backward twice forward");
    }
    CHECK(ps.opt_ns[COST_LAYER] == (cb.params[COST_LAYER] * 28 * 1000000000 + slow.mem_bandwidth - 1) /
                                       slow.mem_bandwidth,
          "AdamW: 28 bytes per parameter at memory bandwidth");
    cost_spec bad = slow;
    bad.mfu_permille = 0;
    CHECK(cost_profile_from_spec(&ps, &bad, &sh, 2, err, sizeof err) != 0, "zero efficiency");
}

/* Latency and bandwidth come back from synthetic echo round trips. */
static void test_link_estimate(void)
{
    cost_probe pr[12];
    int64_t lat = 15000000, bw = 12500000;   /* 15 ms, 100 Mb/s */
    for (int i = 0; i < 12; i++) {
        pr[i].bytes = i % 2 ? 4000000 : 64;
        pr[i].rtt_ns = 2 * lat + 2 * pr[i].bytes * 1000000000 / bw + (i % 3) * 20000;
    }
    cost_link l;
    char err[256];
    CHECK(cost_link_estimate(&l, pr, 12, err, sizeof err) == 0, "%s", err);
    CHECK(llabs(l.latency_ns - lat) < lat / 100 && llabs(l.bandwidth - bw) < bw / 100,
          "estimated %lld ns, %lld B/s", (long long)l.latency_ns, (long long)l.bandwidth);
    pr[1].bytes = 64;
    for (int i = 0; i < 12; i++) pr[i].bytes = 64;
    CHECK(cost_link_estimate(&l, pr, 12, err, sizeof err) != 0 && strstr(err, "two sizes"),
          "one size: %s", err);
}

/* Two nodes, numbers small enough to check by hand. */
static void test_evaluate(void)
{
    cost_shape sh = {.layers = 4, .hidden = 32, .intermediate = 64, .heads = 4, .kv_heads = 2,
                      .vocab = 50, .seq = 8};
    plan_job job = {.shape = sh, .batch = 4, .max_micro_batch = 1, .wire_bytes = 4};
    plan_node nodes[2];
    memset(nodes, 0, sizeof nodes);
    for (int i = 0; i < 2; i++) {
        snprintf(nodes[i].name, sizeof nodes[i].name, "n%d", i);
        cost_profile *p = &nodes[i].prof;
        p->micro_batch = 1;
        p->scratch_slots = 1;
        p->memory_bytes = (int64_t)1 << 30;
        p->fwd_ns[COST_EMBED] = 10, p->bwd_ns[COST_EMBED] = 20;
        p->fwd_ns[COST_LAYER] = 100 * (i + 1), p->bwd_ns[COST_LAYER] = 200 * (i + 1);
        p->fwd_ns[COST_HEAD] = 50, p->bwd_ns[COST_HEAD] = 100;
        p->opt_ns[COST_LAYER] = 7, p->opt_ns[COST_HEAD] = 3, p->opt_ns[COST_EMBED] = 1;
    }
    cost_bytes cb;
    cost_bytes_compute(&cb, &sh, 1, 4, NULL, 0);   /* boundary: 8 tokens * 32 * 4 = 1024 B */
    cost_link links[4] = {{0, 1}, {1000, 1024000000}, {2000, 512000000}, {0, 1}};
    plan_fleet f = {2, nodes, links};
    plan *p = calloc(1, sizeof *p);
    p->nstages = 2;
    p->micro_batch = 1;
    p->micro_batches = 4;
    p->stage[0] = (plan_stage){.ndevices = 1, .node = {0}, .layer_begin = 0, .layer_end = 3, .embed = true};
    p->stage[1] = (plan_stage){.ndevices = 1, .node = {1}, .layer_begin = 3, .layer_end = 4, .head = true};
    char err[512];
    CHECK(cost_evaluate(p, &f, &job, err, sizeof err) == 0, "%s", err);
    /* t0 = 30 + 3*300 + (1000 + 1000) + (2000 + 2000); t1 = 600 + 150 */
    int64_t t0 = 30 + 900 + 2000 + 4000, t1 = 750;
    CHECK(cb.boundary == 1024, "boundary %lld", (long long)cb.boundary);
    CHECK(p->stage[0].time_ns == t0 && p->stage[1].time_ns == t1, "t = %lld, %lld",
          (long long)p->stage[0].time_ns, (long long)p->stage[1].time_ns);
    CHECK(p->pipeline_ns == 3 * t0 + t0 + t1 && p->optimizer_ns == 22 &&
              p->step_ns == p->pipeline_ns + 22 && p->bottleneck == 0,
          "step %lld", (long long)p->step_ns);
    CHECK(p->stage[0].in_flight == 2 && p->stage[1].in_flight == 1, "in flight");
    /* memory: the first stage keeps two micro-batches; take its memory away */
    nodes[0].prof.memory_bytes = p->stage[0].memory_bytes;   /* the 5% margin no longer fits */
    job.margin_permille = 50;
    CHECK(cost_evaluate(p, &f, &job, err, sizeof err) != 0 && strstr(err, "node n0 (stage 0") &&
              strstr(err, "missing") && strstr(err, "5.0% margin"),
          "over memory: %s", err);
    job.margin_permille = 0;
    CHECK(cost_evaluate(p, &f, &job, err, sizeof err) == 0, "exactly full fits: %s", err);
    /* malformed plans */
    p->stage[1].layer_begin = 2;
    CHECK(cost_evaluate(p, &f, &job, err, sizeof err) != 0 && strstr(err, "stage 1"), "gap: %s", err);
    p->stage[1].layer_begin = 3;
    p->stage[1].node[0] = 0;
    CHECK(cost_evaluate(p, &f, &job, err, sizeof err) != 0 && strstr(err, "holds stages"),
          "same node twice: %s", err);
    p->stage[1].node[0] = 1;
    p->micro_batches = 3;
    CHECK(cost_evaluate(p, &f, &job, err, sizeof err) != 0 && strstr(err, "micro-batches"),
          "batch: %s", err);
    p->micro_batches = 4;
    p->stage[0].ndevices = 2;
    CHECK(cost_evaluate(p, &f, &job, err, sizeof err) != 0 && strstr(err, "data parallel"),
          "groups: %s", err);
    free(p);
}

int main(void)
{
    test_params_match_stages();
    test_activation_bytes_match_stage();
    test_arithmetic();
    test_memory_and_specs();
    test_link_estimate();
    test_evaluate();
    if (failures) printf("%d failures\n", failures);
    return failures ? 1 : 0;
}

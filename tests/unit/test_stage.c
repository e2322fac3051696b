/* test_stage.c — stages and chains of stages: what a pipeline relies on.
 * A model cut anywhere must initialise, compute and train as the uncut one. */
#include "kernels.h"
#include "model.h"
#include "runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config_fixture.h"

static void make_batch(int32_t *ids, int32_t *labels, int B, int T, int V, uint32_t seed)
{
    for (int i = 0; i < B * T; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = (int32_t)((seed >> 8) % (uint32_t)V);
    }
    for (int i = 0; i < B * T; i++)
        labels[i] = (i % T == T - 1 || i % 5 == 2) ? KERNELS_IGNORE_INDEX : ids[i + 1];
}

/* Finds parameter `name` in any stage of the chain. */
static const float *chain_param(chain *c, const char *name, bool grad, size_t *numel)
{
    for (int i = 0; i < c->plan.nstages; i++)
        for (int k = 0; k < stage_param_count(c->stages[i]); k++) {
            const stage_param *p = stage_param_at(c->stages[i], k);
            if (strcmp(p->name, name) == 0) {
                *numel = p->numel;
                return (grad ? stage_grads(c->stages[i]) : stage_params(c->stages[i])) +
                       p->offset;
            }
        }
    return NULL;
}

static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? e / m : e;
}

/* Trains both chains `steps` steps on the same batch; compares losses,
 * then every parameter of the whole model by name. */
static void compare_chains(bool tied, const char *cuts)
{
    llama_config cfg = fixture_config(tied);
    int B = 2, T = 9;
    char err[256];
    split_plan one, many;
    chain a, b;
    split_parse(&one, NULL, cfg.num_hidden_layers, "--split", err, sizeof err);
    CHECK(split_parse(&many, cuts, cfg.num_hidden_layers, "--split", err, sizeof err) == 0,
          "%s", err);
    CHECK(chain_create(&a, &cfg, &one, B, T, err, sizeof err) == 0, "%s", err);
    CHECK(chain_create(&b, &cfg, &many, B, T, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < a.plan.nstages; i++) stage_init_weights(a.stages[i], 7);
    for (int i = 0; i < b.plan.nstages; i++) stage_init_weights(b.stages[i], 7);

    int32_t ids[18], labels[18];
    make_batch(ids, labels, B, T, cfg.vocab_size, 3);
    const stage_adamw opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    double first = 0, la = 0, lb = 0;
    for (int step = 1; step <= 30; step++) {
        for (int i = 0; i < a.plan.nstages; i++) stage_zero_grads(a.stages[i]);
        for (int i = 0; i < b.plan.nstages; i++) stage_zero_grads(b.stages[i]);
        int ka = 0, kb = 0;
        CHECK(chain_forward_backward(&a, ids, labels, 0, &la, &ka, err, sizeof err) == 0,
              "%s", err);
        CHECK(chain_forward_backward(&b, ids, labels, 0, &lb, &kb, err, sizeof err) == 0,
              "%s", err);
        la /= ka;
        lb /= kb;
        if (step == 1) first = la;
        /* not close: equal. Where the model is cut must not change a bit. */
        CHECK(la == lb, "step %d loss %.9g vs split %s %.9g", step, la, cuts, lb);
        chain_adamw_step(&a, &opt, step, 1.0f);
        chain_adamw_step(&b, &opt, step, 1.0f);
    }
    /* memorising one batch: the loss must fall far below its start */
    CHECK(la < 0.5 * first, "30 steps on one batch: loss %.4f from %.4f", la, first);
    for (int k = 0; k < stage_param_count(a.stages[0]); k++) {
        const stage_param *p = stage_param_at(a.stages[0], k);
        size_t n1, n2;
        const float *x = chain_param(&a, p->name, false, &n1);
        const float *y = chain_param(&b, p->name, false, &n2);
        CHECK(y && n1 == n2 && max_rel_diff(y, x, n1) == 0.0,
              "%s differs after training (split %s)", p->name, cuts);
    }
    /* with tied embeddings, the head's copy stays equal to the embedding */
    if (tied && b.plan.nstages > 1) {
        stage *last = b.stages[b.plan.nstages - 1];
        for (int k = 0; k < stage_param_count(last); k++) {
            const stage_param *p = stage_param_at(last, k);
            if (!p->tied_copy) continue;
            size_t n;
            const float *emb = stage_params(b.stages[0]) + stage_param_at(b.stages[0], 0)->offset;
            (void)chain_param(&b, p->name, false, &n);
            CHECK(memcmp(emb, stage_params(last) + p->offset, n * sizeof(float)) == 0,
                  "tied copy drifted from the embedding (split %s)", cuts);
        }
    }
    printf("split %-6s tied %d: loss %.5f -> %.5f, equal to one stage\n", cuts, tied, first, la);
    chain_free(&a);
    chain_free(&b);
}

static void test_init_independent_of_split(void)
{
    llama_config cfg = fixture_config(false);
    char err[256];
    stage *whole, *part;
    stage_create(&whole, &cfg, 0, 4, true, true, 1, 4, 1, err, sizeof err);
    stage_create(&part, &cfg, 2, 4, false, true, 1, 4, 1, err, sizeof err);
    stage_init_weights(whole, 42);
    stage_init_weights(part, 42);
    int same = 0;
    for (int k = 0; k < stage_param_count(part); k++) {
        const stage_param *p = stage_param_at(part, k);
        for (int j = 0; j < stage_param_count(whole); j++) {
            const stage_param *q = stage_param_at(whole, j);
            if (strcmp(p->name, q->name) == 0 &&
                memcmp(stage_params(part) + p->offset, stage_params(whole) + q->offset,
                       p->numel * sizeof(float)) == 0)
                same++;
        }
    }
    CHECK(same == stage_param_count(part), "%d of %d tensors initialised alike", same,
          stage_param_count(part));
    /* a matrix has the requested spread; a norm is ones */
    const stage_param *q = stage_param_at(whole, 2); /* layers.0.q_proj */
    double ss = 0;
    for (size_t i = 0; i < q->numel; i++) {
        double x = stage_params(whole)[q->offset + i];
        ss += x * x;
    }
    double sd = sqrt(ss / (double)q->numel);
    CHECK(strstr(q->name, "q_proj") && sd > 0.015 && sd < 0.025, "%s std %.4f", q->name, sd);
    CHECK(stage_params(whole)[stage_param_at(whole, 1)->offset] == 1.0f, "norm not ones");
    stage_free(whole);
    stage_free(part);
}

static void test_errors(void)
{
    llama_config cfg = fixture_config(false);
    char err[256] = "";
    stage *s = NULL;
    CHECK(stage_create(&s, &cfg, 1, 3, true, false, 1, 4, 1, err, sizeof err) != 0 && !s,
          "embedding accepted on a stage starting at layer 1");
    CHECK(stage_create(&s, &cfg, 2, 5, false, true, 1, 4, 1, err, sizeof err) != 0,
          "layers past the model accepted");
    CHECK(stage_create(&s, &cfg, 0, 4, true, true, 1, 65, 1, err, sizeof err) != 0 &&
              strstr(err, "max_position_embeddings"),
          "sequence longer than the model accepted: %s", err);
    CHECK(stage_create(&s, &cfg, 0, 4, true, true, 2, 3, 1, err, sizeof err) == 0, "%s", err);
    stage_init_weights(s, 1);
    int32_t ids[6] = {1, 2, 3, 4, 29, 5}, labels[6] = {1, 2, -100, 4, 5, 6};
    double sum;
    int kept;
    CHECK(stage_forward(s, 0, ids, NULL, labels, &sum, &kept, err, sizeof err) != 0 &&
              strstr(err, "input_ids[1,1] = 29"),
          "id 29 of a 29-token vocabulary: %s", err);
    ids[4] = 0;
    labels[0] = -1;
    CHECK(stage_forward(s, 0, ids, NULL, labels, &sum, &kept, err, sizeof err) != 0 &&
              strstr(err, "labels[0,0] = -1"),
          "label -1: %s", err);
    labels[0] = 1;
    CHECK(stage_forward(s, 0, ids, NULL, labels, &sum, &kept, err, sizeof err) == 0 && kept == 5,
          "valid batch: %s", err);
    stage_free(s);
}

/* Two micro-batches forwarded into two slots before either is backwarded
 * (what a pipeline does) give the same gradients, bit for bit, as one slot
 * used forward-backward, forward-backward. */
static void test_slots_interleaved(void)
{
    llama_config cfg = fixture_config(true);
    char err[256] = "";
    stage *one = NULL, *two = NULL;
    int B = 2, T = 5;
    CHECK(stage_create(&one, &cfg, 0, 4, true, true, B, T, 1, err, sizeof err) == 0, "%s", err);
    CHECK(stage_create(&two, &cfg, 0, 4, true, true, B, T, 2, err, sizeof err) == 0, "%s", err);
    if (!one || !two) return;
    stage_init_weights(one, 9);
    stage_init_weights(two, 9);
    int32_t ids[2][10], labels[2][10];
    make_batch(ids[0], labels[0], B, T, cfg.vocab_size, 11);
    make_batch(ids[1], labels[1], B, T, cfg.vocab_size, 12);
    double sum;
    int kept;
    stage_zero_grads(one);
    stage_zero_grads(two);
    for (int m = 0; m < 2; m++) {
        stage_forward(one, 0, ids[m], NULL, labels[m], &sum, &kept, err, sizeof err);
        stage_backward(one, 0, NULL, 0.05f);
    }
    stage_forward(two, 0, ids[0], NULL, labels[0], &sum, &kept, err, sizeof err);
    stage_forward(two, 1, ids[1], NULL, labels[1], &sum, &kept, err, sizeof err);
    stage_backward(two, 0, NULL, 0.05f);
    stage_backward(two, 1, NULL, 0.05f);
    stage_sum_tied_grads(one);
    stage_sum_tied_grads(two);
    CHECK(memcmp(stage_grads(one), stage_grads(two), stage_num_params(one) * sizeof(float)) == 0,
          "interleaved slots change the gradients");
    CHECK(stage_forward(two, 2, ids[0], NULL, labels[0], &sum, &kept, err, sizeof err) != 0,
          "slot 2 of 2 accepted");
    stage_free(one);
    stage_free(two);
    printf("slots: two micro-batches in flight give the same gradients\n");
}

int main(void)
{
    kernels_set_threads(2);
    test_init_independent_of_split();
    test_errors();
    test_slots_interleaved();
    compare_chains(false, "1,3");
    compare_chains(true, "2");
    compare_chains(true, "0,4");
    compare_chains(false, "0");
    printf("%s\n", failures ? "FAILED" : "all stage checks passed");
    return failures ? 1 : 0;
}

/* test_generate.c — incremental decoding with a KV cache.
 *
 * What a user relies on: generating token by token gives exactly the
 * next-token distribution the training forward computes for the same
 * sequence (so a model samples what it was trained on), with grouped-query
 * and plain heads, tied and untied heads; greedy decoding is the argmax;
 * a seed reproduces a sample; a full cache or a bad token is an error, not
 * a crash; a reset sequence computes the same logits again. */
#include "kernels.h"
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { T = 9 };

static llama_config test_config(int NH, int NKV, bool tied)
{
    llama_config c = {0};
    c.hidden_size = 24;
    c.intermediate_size = 37;
    c.num_hidden_layers = 2;
    c.num_attention_heads = NH;
    c.num_key_value_heads = NKV;
    c.vocab_size = 37;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.tie_word_embeddings = tied;
    char err[256];
    if (llama_config_validate(&c, "test", err, sizeof err)) printf("config: %s\n", err);
    return c;
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* N(0, 0.02) weights give nearly uniform attention, under which a cache bug
 * (wrong position, wrong KV head) barely moves the loss. Scaling q/k up
 * makes attention peaked, other matrices up makes the logits spread, and
 * random norm weights make sure each norm's weight is applied. */
static stage *make_model(const llama_config *cfg, uint64_t seed)
{
    char err[256];
    stage *s;
    if (stage_create(&s, cfg, 0, cfg->num_hidden_layers, true, true, 1, T, 1, err, sizeof err)) {
        printf("stage_create: %s\n", err);
        exit(1);
    }
    stage_init_weights(s, seed);
    uint32_t r = (uint32_t)seed;
    for (int i = 0; i < stage_param_count(s); i++) {
        const stage_param *p = stage_param_at(s, i);
        float *x = stage_params(s) + p->offset;
        bool qk = strstr(p->name, "q_proj") || strstr(p->name, "k_proj");
        for (size_t j = 0; j < p->numel; j++) {
            if (p->ndim == 1)
                x[j] = 0.5f + (float)(lcg(&r) % 1000) / 1000.0f;
            else
                x[j] *= qk ? 12.0f : 6.0f;
        }
    }
    return s;
}

/* -log softmax(logits)[label], in double. */
static double token_loss(const float *logits, int V, int label)
{
    double mx = logits[0], sum = 0.0;
    for (int i = 1; i < V; i++) mx = fmax(mx, logits[i]);
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    return -((double)logits[label] - mx - log(sum));
}

/* The generator fed one token at a time must reproduce every per-token loss
 * of the stage's forward over the whole sequence. */
static void test_matches_stage(int NH, int NKV, bool tied, uint64_t seed)
{
    llama_config cfg = test_config(NH, NKV, tied);
    int V = cfg.vocab_size;
    stage *s = make_model(&cfg, seed);
    char err[256];
    int32_t ids[T], labels[T];
    uint32_t r = (uint32_t)seed * 7u + 1u;
    for (int t = 0; t < T; t++) ids[t] = (int32_t)(lcg(&r) % (uint32_t)V);
    for (int t = 0; t < T; t++) labels[t] = t + 1 < T ? ids[t + 1] : ids[0];
    double sum;
    int kept;
    if (stage_forward(s, 0, ids, NULL, labels, &sum, &kept, err, sizeof err)) {
        CHECK(0, "stage_forward: %s", err);
        stage_free(s);
        return;
    }
    const float *ref = stage_token_losses(s, 0);

    generator *g;
    /* a cache longer than the sequence: rows past the end must not matter */
    if (generator_create(&g, &cfg, s, 2 * T, err, sizeof err)) {
        CHECK(0, "generator_create: %s", err);
        stage_free(s);
        return;
    }
    double worst = 0, lo = INFINITY, hi = 0;
    for (int t = 0; t < T; t++) {
        const float *logits;
        if (generator_push(g, ids[t], &logits, err, sizeof err)) {
            CHECK(0, "push %d: %s", t, err);
            break;
        }
        double got = token_loss(logits, V, labels[t]);
        double rel = fabs(got - ref[t]) / fmax(fabs((double)ref[t]), 1e-3);
        worst = fmax(worst, rel);
        lo = fmin(lo, ref[t]);
        hi = fmax(hi, ref[t]);
        CHECK(rel <= 1e-4, "NH=%d NKV=%d tied=%d position %d: generator loss %.7f, stage %.7f",
              NH, NKV, tied, t, got, (double)ref[t]);
    }
    CHECK(generator_length(g) == T, "length %d after %d pushes", generator_length(g), T);
    /* a loss that hardly varies would mean the weights do not exercise much */
    CHECK(hi - lo > 1.0, "losses span only [%g, %g]", lo, hi);
    printf("NH=%d NKV=%d tied=%d: worst relative loss difference %.2e, losses in [%.2f, %.2f]\n",
           NH, NKV, tied, worst, lo, hi);
    generator_free(g);
    stage_free(s);
}

/* After a reset the same tokens give bit-identical logits: nothing of the
 * old sequence leaks into the new one. A different prefix must change the
 * logits of a later position (the cache is really read). */
static void test_reset(void)
{
    llama_config cfg = test_config(4, 2, false);
    int V = cfg.vocab_size;
    stage *s = make_model(&cfg, 11);
    generator *g;
    char err[256];
    if (generator_create(&g, &cfg, s, T, err, sizeof err)) {
        CHECK(0, "generator_create: %s", err);
        stage_free(s);
        return;
    }
    int32_t ids[T] = {3, 1, 4, 1, 5, 9, 2, 6, 5};
    float first[T][37];
    const float *logits = NULL;
    for (int t = 0; t < T; t++) {
        CHECK(generator_push(g, ids[t], &logits, err, sizeof err) == 0, "push: %s", err);
        memcpy(first[t], logits, sizeof first[t]);
    }
    generator_reset(g);
    CHECK(generator_length(g) == 0, "length %d after reset", generator_length(g));
    for (int t = 0; t < T; t++) {
        CHECK(generator_push(g, ids[t], &logits, err, sizeof err) == 0, "push: %s", err);
        CHECK(memcmp(first[t], logits, (size_t)V * sizeof(float)) == 0,
              "position %d differs after reset", t);
    }
    generator_reset(g);
    ids[0] = 7;
    for (int t = 0; t < T; t++)
        CHECK(generator_push(g, ids[t], &logits, err, sizeof err) == 0, "push: %s", err);
    CHECK(memcmp(first[T - 1], logits, (size_t)V * sizeof(float)) != 0,
          "the last position ignores a changed first token");
    generator_free(g);
    stage_free(s);
}

/* A full sequence and a token outside the vocabulary are errors that leave
 * the generator as it was. */
static void test_errors(void)
{
    llama_config cfg = test_config(4, 4, true);
    stage *s = make_model(&cfg, 5);
    generator *g;
    char err[256];
    const float *logits = NULL;
    if (generator_create(&g, &cfg, s, 3, err, sizeof err)) {
        CHECK(0, "generator_create: %s", err);
        stage_free(s);
        return;
    }
    for (int t = 0; t < 3; t++)
        CHECK(generator_push(g, t, &logits, err, sizeof err) == 0, "push %d: %s", t, err);
    float saved[37];
    memcpy(saved, logits, sizeof saved);
    const float *untouched = logits;
    CHECK(generator_push(g, 1, &logits, err, sizeof err) != 0 && strstr(err, "full"),
          "push past max_len: %s", err);
    CHECK(logits == untouched && memcmp(saved, logits, sizeof saved) == 0 &&
              generator_length(g) == 3,
          "a failed push changed the generator");
    generator_reset(g);
    CHECK(generator_push(g, 37, &logits, err, sizeof err) != 0 && strstr(err, "37"),
          "token 37 of a 37-token vocabulary: %s", err);
    CHECK(generator_push(g, -1, &logits, err, sizeof err) != 0 && strstr(err, "-1"),
          "token -1: %s", err);
    CHECK(generator_length(g) == 0, "a refused token counted");
    generator_free(g);

    CHECK(generator_create(&g, &cfg, s, 0, err, sizeof err) != 0 && !g, "max_len 0 accepted");
    CHECK(generator_create(&g, &cfg, s, 65, err, sizeof err) != 0 &&
              strstr(err, "max_position_embeddings"),
          "max_len past max_position_embeddings: %s", err);
    /* a config that does not describe the stage */
    llama_config other = cfg;
    other.num_hidden_layers = 1;
    CHECK(generator_create(&g, &other, s, 4, err, sizeof err) != 0 && !g,
          "a config with fewer layers accepted");
    other = cfg;
    other.tie_word_embeddings = false;
    CHECK(generator_create(&g, &other, s, 4, err, sizeof err) != 0 && !g,
          "an untied config on a tied stage accepted");
    other = cfg;
    other.intermediate_size = 36;
    CHECK(generator_create(&g, &other, s, 4, err, sizeof err) != 0 && strstr(err, "gate_proj"),
          "another intermediate size: %s", err);
    other = cfg;
    other.num_key_value_heads = 3;
    CHECK(generator_create(&g, &other, s, 4, err, sizeof err) != 0 &&
              strstr(err, "num_key_value_heads"),
          "an invalid config: %s", err);
    stage_free(s);

    /* a stage without the head cannot generate */
    if (stage_create(&s, &cfg, 0, 1, true, false, 1, 1, 1, err, sizeof err) == 0) {
        CHECK(generator_create(&g, &cfg, s, 4, err, sizeof err) != 0 &&
                  strstr(err, "whole model"),
              "a first-only stage: %s", err);
        stage_free(s);
    }
}

static void test_sampling(void)
{
    /* greedy: the argmax, the lowest id on ties, whatever the state */
    const float tie[5] = {1.0f, 3.0f, -2.0f, 3.0f, 2.9f};
    uint64_t st = 42;
    CHECK(generator_sample(tie, 5, 0.0f, &st) == 1, "greedy picks %d",
          generator_sample(tie, 5, 0.0f, &st));
    for (int i = 0; i < 10; i++)
        CHECK(generator_sample(tie, 5, 0.0f, &st) == 1, "greedy is not deterministic");

    /* a fixed seed reproduces the sequence of draws; another seed does not */
    float logits[37];
    uint32_t r = 3;
    for (int i = 0; i < 37; i++) logits[i] = (float)(lcg(&r) % 1000) / 400.0f;
    uint64_t a = 7, b = 7, c = 8;
    int same_other = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = generator_sample(logits, 37, 0.8f, &a);
        int32_t y = generator_sample(logits, 37, 0.8f, &b);
        int32_t z = generator_sample(logits, 37, 0.8f, &c);
        CHECK(x == y, "draw %d: %d then %d with the same seed", i, x, y);
        CHECK(x >= 0 && x < 37, "draw %d out of range", x);
        same_other += x == z;
    }
    CHECK(same_other < 100, "seeds 7 and 8 agree on %d of 200 draws", same_other);

    /* the draws follow softmax(logits / T): frequencies within 5 sigma */
    const float l4[4] = {0.0f, 1.0f, 2.0f, -1.0f};
    for (int k = 0; k < 2; k++) {
        float temp = k ? 2.0f : 0.5f;
        int counts[4] = {0};
        int n = 20000;
        uint64_t s2 = 99;
        for (int i = 0; i < n; i++) counts[generator_sample(l4, 4, temp, &s2)]++;
        double z = 0;
        for (int i = 0; i < 4; i++) z += exp(l4[i] / temp);
        for (int i = 0; i < 4; i++) {
            double p = exp(l4[i] / temp) / z, sd = sqrt(n * p * (1 - p));
            CHECK(fabs(counts[i] - n * p) <= 5 * sd + 1,
                  "T=%g id %d drawn %d times, expected %.0f", temp, i, counts[i], n * p);
        }
    }

    /* a tiny temperature is greedy; huge logit gaps never overflow */
    const float big[3] = {-1e30f, 1e30f, 0.0f};
    uint64_t s3 = 1;
    CHECK(generator_sample(big, 3, 1e-6f, &s3) == 1, "tiny temperature is not the argmax");
    CHECK(generator_sample(big, 3, 1.0f, &s3) == 1, "a 1e30 gap is not certain");
}

int main(void)
{
    kernels_set_threads(2);
    test_matches_stage(4, 2, false, 1);   /* grouped-query heads */
    test_matches_stage(4, 2, true, 2);
    test_matches_stage(3, 3, false, 3);   /* plain multi-head, head_dim 8 */
    test_matches_stage(4, 4, true, 4);
    test_matches_stage(6, 1, true, 5);    /* one KV head for all */
    test_reset();
    test_errors();
    test_sampling();
    printf("%s\n", failures ? "FAILED" : "all generation checks passed");
    return failures ? 1 : 0;
}

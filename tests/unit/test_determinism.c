/* test_determinism.c — the promise of docs/ARCHITECTURE.md "Determinism":
 * every kernel, and a whole model's forward, backward and optimizer step,
 * give the same bits with 1, 2 and 3 threads, on whichever OpenBLAS core
 * type runs (ctest runs this once per core type, numerics.coretype.<Name>,
 * with OPENBLAS_CORETYPE set). Sizes are odd and larger than the kernels'
 * tiles (256 x 256 output tiles in matmul, 64-column blocks, 4096-element
 * sum blocks) so that tile edges are exercised. Inputs are seeded.
 *
 * Exit 77 (skipped) when OPENBLAS_CORETYPE names a core type whose
 * instructions this CPU lacks; failure when OpenBLAS runs another core type
 * than the one named (the test would check the wrong kernels). */
#include "kernels.h"
#include "model.h"
#include "runtime.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"

#define MAX_OUTS 64

typedef struct {
    const char *name[MAX_OUTS];
    void *buf[MAX_OUTS];
    size_t bytes[MAX_OUTS];
    int n;
} outputs;

static void keep(outputs *o, const char *name, const void *buf, size_t bytes)
{
    if (o->n == MAX_OUTS) {
        CHECK(0, "too many outputs (raise MAX_OUTS)");
        return;
    }
    o->name[o->n] = name;
    o->buf[o->n] = malloc(bytes ? bytes : 1);
    memcpy(o->buf[o->n], buf, bytes);
    o->bytes[o->n++] = bytes;
}

static void outputs_free(outputs *o)
{
    for (int i = 0; i < o->n; i++) free(o->buf[i]);
    o->n = 0;
}

static uint64_t rng;

static float frand(void) /* uniform in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static float *rand_buf(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
    return x;
}

/* Every kernel on seeded inputs; outputs (and in-place results) kept. */
static void run_kernels(outputs *o)
{
    rng = 0x5eed5eed12345677ull;
    /* matmul: all three products, every dimension over one tile and odd */
    {
        int N = 301, IC = 517, OC = 263;
        float *inp = rand_buf((size_t)N * IC, 1), *w = rand_buf((size_t)OC * IC, 0.1f);
        float *out = rand_buf((size_t)N * OC, 1), *dout = rand_buf((size_t)N * OC, 1);
        float *dinp = rand_buf((size_t)N * IC, 1), *dw = rand_buf((size_t)OC * IC, 1);
        matmul_forward(out, inp, w, N, IC, OC, 0);
        keep(o, "matmul_forward", out, (size_t)N * OC * sizeof *out);
        matmul_forward(out, inp, w, N, IC, OC, 1);
        keep(o, "matmul_forward accumulate", out, (size_t)N * OC * sizeof *out);
        matmul_backward(dinp, dw, dout, inp, w, N, IC, OC);
        keep(o, "matmul_backward dinp", dinp, (size_t)N * IC * sizeof *dinp);
        keep(o, "matmul_backward dweight", dw, (size_t)OC * IC * sizeof *dw);
        free(inp), free(w), free(out), free(dout), free(dinp), free(dw);
    }
    /* a deep inner dimension (OpenBLAS blocks it) with a thin output */
    {
        int N = 7, IC = 3001, OC = 5;
        float *inp = rand_buf((size_t)N * IC, 1), *w = rand_buf((size_t)OC * IC, 1);
        float *out = rand_buf((size_t)N * OC, 1), *dout = rand_buf((size_t)N * OC, 1);
        float *dinp = rand_buf((size_t)N * IC, 1), *dw = rand_buf((size_t)OC * IC, 1);
        matmul_forward(out, inp, w, N, IC, OC, 0);
        keep(o, "matmul_forward deep", out, (size_t)N * OC * sizeof *out);
        matmul_backward(dinp, dw, dout, inp, w, N, IC, OC);
        keep(o, "matmul_backward deep dinp", dinp, (size_t)N * IC * sizeof *dinp);
        keep(o, "matmul_backward deep dweight", dw, (size_t)OC * IC * sizeof *dw);
        free(inp), free(w), free(out), free(dout), free(dinp), free(dw);
    }
    /* embedding, with repeated ids (the scatter-add sums rows) */
    {
        int N = 203, C = 197, V = 11;
        int32_t ids[203];
        for (int n = 0; n < N; n++) ids[n] = (int32_t)((n * 7 + n / 5) % V);
        float *wte = rand_buf((size_t)V * C, 1), *out = rand_buf((size_t)N * C, 1);
        float *dout = rand_buf((size_t)N * C, 1), *dwte = rand_buf((size_t)V * C, 1);
        embedding_forward(out, ids, wte, N, C);
        keep(o, "embedding_forward", out, (size_t)N * C * sizeof *out);
        embedding_backward(dwte, dout, ids, N, C);
        keep(o, "embedding_backward", dwte, (size_t)V * C * sizeof *dwte);
        free(wte), free(out), free(dout), free(dwte);
    }
    /* RMSNorm */
    {
        int N = 263, C = 197;
        float *inp = rand_buf((size_t)N * C, 2), *w = rand_buf((size_t)C, 1);
        float *out = rand_buf((size_t)N * C, 1), *rstd = rand_buf((size_t)N, 1);
        float *dout = rand_buf((size_t)N * C, 1), *dinp = rand_buf((size_t)N * C, 1);
        float *dw = rand_buf((size_t)C, 1);
        rmsnorm_forward(out, rstd, inp, w, N, C, 1e-5f);
        keep(o, "rmsnorm_forward out", out, (size_t)N * C * sizeof *out);
        keep(o, "rmsnorm_forward rstd", rstd, (size_t)N * sizeof *rstd);
        rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
        keep(o, "rmsnorm_backward dinp", dinp, (size_t)N * C * sizeof *dinp);
        keep(o, "rmsnorm_backward dweight", dw, (size_t)C * sizeof *dw);
        free(inp), free(w), free(out), free(rstd), free(dout), free(dinp), free(dw);
    }
    /* RoPE and attention, grouped-query, T not a multiple of anything */
    {
        int B = 3, T = 41, NH = 6, NKV = 2, HD = 16, ld = (NH + 2 * NKV) * HD, N = B * T;
        float *cs = malloc((size_t)T * HD / 2 * sizeof *cs), *sn = malloc((size_t)T * HD / 2 * sizeof *sn);
        rope_tables(cs, sn, T, HD, 10000.0f);
        float *qkv = rand_buf((size_t)N * ld, 1), *out = rand_buf((size_t)N * NH * HD, 1);
        float *att = rand_buf((size_t)B * NH * T * T, 1), *dout = rand_buf((size_t)N * NH * HD, 1);
        float *dqkv = rand_buf((size_t)N * ld, 1);
        int nscratch = 4;
        float *scratch = malloc((size_t)nscratch * attention_scratch_floats(T) * sizeof(float));
        rope_forward(qkv, cs, sn, N, T, NH + NKV, HD, ld);
        keep(o, "rope_forward", qkv, (size_t)N * ld * sizeof *qkv);
        attention_forward(out, att, qkv, B, T, NH, NKV, HD);
        keep(o, "attention_forward out", out, (size_t)N * NH * HD * sizeof *out);
        keep(o, "attention_forward att", att, (size_t)B * NH * T * T * sizeof *att);
        attention_backward(dqkv, dout, qkv, att, scratch, nscratch, B, T, NH, NKV, HD);
        keep(o, "attention_backward", dqkv, (size_t)N * ld * sizeof *dqkv);
        rope_backward(dqkv, cs, sn, N, T, NH + NKV, HD, ld);
        keep(o, "rope_backward", dqkv, (size_t)N * ld * sizeof *dqkv);
        free(cs), free(sn), free(qkv), free(out), free(att), free(dout), free(dqkv), free(scratch);
    }
    /* SwiGLU */
    {
        int N = 131, F = 301;
        float *gu = rand_buf((size_t)N * 2 * F, 3), *h = rand_buf((size_t)N * F, 1);
        float *dh = rand_buf((size_t)N * F, 1), *dgu = rand_buf((size_t)N * 2 * F, 1);
        swiglu_forward(h, gu, N, F);
        keep(o, "swiglu_forward", h, (size_t)N * F * sizeof *h);
        swiglu_backward(dgu, dh, gu, N, F);
        keep(o, "swiglu_backward", dgu, (size_t)N * 2 * F * sizeof *dgu);
        free(gu), free(h), free(dh), free(dgu);
    }
    /* cross-entropy: the total is a reduction over rows */
    {
        int N = 517, V = 259, kept = 0;
        int32_t *labels = malloc((size_t)N * sizeof *labels);
        for (int n = 0; n < N; n++) labels[n] = n % 9 == 4 ? KERNELS_IGNORE_INDEX : (n * 31) % V;
        float *x = rand_buf((size_t)N * V, 5), *losses = rand_buf((size_t)N, 1);
        float *dl = rand_buf((size_t)N * V, 1);
        double total = crossentropy_forward(x, losses, labels, N, V, &kept);
        keep(o, "crossentropy_forward probs", x, (size_t)N * V * sizeof *x);
        keep(o, "crossentropy_forward losses", losses, (size_t)N * sizeof *losses);
        keep(o, "crossentropy_forward total", &total, sizeof total);
        keep(o, "crossentropy_forward kept", &kept, sizeof kept);
        crossentropy_backward(dl, x, labels, N, V, 1.0f / (float)kept);
        keep(o, "crossentropy_backward", dl, (size_t)N * V * sizeof *dl);
        free(labels), free(x), free(losses), free(dl);
    }
    /* the squared gradient norm (a reduction over everything) and AdamW */
    {
        size_t n = 1000003;
        float *g = rand_buf(n, 1), *p = rand_buf(n, 1), *m = rand_buf(n, 0.1f);
        float *v = rand_buf(n, 0.1f);
        for (size_t i = 0; i < n; i++) v[i] *= v[i];
        double ss = grad_sumsq(g, n), small = grad_sumsq(g, 4099);
        keep(o, "grad_sumsq", &ss, sizeof ss);
        keep(o, "grad_sumsq small", &small, sizeof small);
        adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.7f);
        keep(o, "adamw_update p", p, n * sizeof *p);
        keep(o, "adamw_update m", m, n * sizeof *m);
        keep(o, "adamw_update v", v, n * sizeof *v);
        free(g), free(p), free(m), free(v);
    }
    /* helpers */
    {
        size_t n = 100003;
        float *y = rand_buf(n, 1), *x = rand_buf(n, 1);
        kernels_add(y, x, n);
        keep(o, "kernels_add", y, n * sizeof *y);
        free(y), free(x);
    }
}

/* A small model, whole and cut in two, on sizes over one tile (N = 3 x 91 =
 * 273 rows, 2F = 600, V = 300): two training steps with clipping, keeping
 * both losses, every gradient and every weight. */
static void run_model(outputs *o, const char *cuts)
{
    llama_config cfg = {0};
    cfg.hidden_size = 80;
    cfg.intermediate_size = 300;
    cfg.num_hidden_layers = 3;
    cfg.num_attention_heads = 5;
    cfg.num_key_value_heads = 1;
    cfg.vocab_size = 300;
    cfg.max_position_embeddings = 128;
    cfg.rms_norm_eps = 1e-5f;
    cfg.rope_theta = 10000.0f;
    cfg.tie_word_embeddings = true;
    char err[256];
    CHECK(llama_config_validate(&cfg, "test", err, sizeof err) == 0, "config: %s", err);
    int B = 3, T = 91;
    split_plan plan;
    chain c = {0};
    CHECK(split_parse(&plan, cuts, cfg.num_hidden_layers, "--split", err, sizeof err) == 0,
          "%s", err);
    if (chain_create(&c, &cfg, &plan, B, T, err, sizeof err)) {
        CHECK(0, "chain_create: %s", err);
        return;
    }
    for (int i = 0; i < plan.nstages; i++) stage_init_weights(c.stages[i], 42);
    int32_t ids[3 * 91], labels[3 * 91];
    uint32_t seed = 7;
    for (int i = 0; i < B * T; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = (int32_t)((seed >> 8) % (uint32_t)cfg.vocab_size);
    }
    for (int i = 0; i < B * T; i++)
        labels[i] = (i % T == T - 1 || i % 5 == 2) ? KERNELS_IGNORE_INDEX : ids[i + 1];
    const stage_adamw opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int step = 1; step <= 2; step++) {
        double loss = 0;
        int kept = 0;
        for (int i = 0; i < plan.nstages; i++) stage_zero_grads(c.stages[i]);
        CHECK(chain_forward_backward(&c, ids, labels, 0.0f, &loss, &kept, err, sizeof err) == 0,
              "%s", err);
        keep(o, "model loss", &loss, sizeof loss);
        chain_sum_tied_grads(&c);
        for (int i = 0; i < plan.nstages; i++)
            keep(o, "model gradients", stage_grads(c.stages[i]),
                 stage_num_params(c.stages[i]) * sizeof(float));
        double norm = chain_adamw_step(&c, &opt, step, 0.05); /* clipping engages */
        keep(o, "model gradient norm", &norm, sizeof norm);
        for (int i = 0; i < plan.nstages; i++)
            keep(o, "model weights", stage_params(c.stages[i]),
                 stage_num_params(c.stages[i]) * sizeof(float));
    }
    chain_free(&c);
}

static void run_all(outputs *o)
{
    run_kernels(o);
    run_model(o, NULL);
    run_model(o, "2");
}

/* The ISA a core type's kernels need, as __builtin_cpu_supports names it. */
static int coretype_runs_here(const char *name)
{
#if defined(__x86_64__) && defined(__GNUC__)
    static const struct {
        const char *core;
        const char *need[6];
    } table[] = {
        {"Prescott", {"sse3"}},
        {"Core2", {"ssse3"}},
        {"Nehalem", {"sse4.2"}},
        {"Sandybridge", {"avx"}},
        {"Haswell", {"avx2", "fma"}},
        {"Zen", {"avx2", "fma"}},
        {"SkylakeX", {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"}},
        {"Cooperlake", {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512bf16"}},
    };
    __builtin_cpu_init();
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcasecmp(table[i].core, name)) continue;
        for (int k = 0; k < 6 && table[i].need[k]; k++) {
            const char *f = table[i].need[k];
            int ok = !strcmp(f, "sse3")       ? __builtin_cpu_supports("sse3")
                     : !strcmp(f, "ssse3")    ? __builtin_cpu_supports("ssse3")
                     : !strcmp(f, "sse4.2")   ? __builtin_cpu_supports("sse4.2")
                     : !strcmp(f, "avx")      ? __builtin_cpu_supports("avx")
                     : !strcmp(f, "avx2")     ? __builtin_cpu_supports("avx2")
                     : !strcmp(f, "fma")      ? __builtin_cpu_supports("fma")
                     : !strcmp(f, "avx512f")  ? __builtin_cpu_supports("avx512f")
                     : !strcmp(f, "avx512bw") ? __builtin_cpu_supports("avx512bw")
                     : !strcmp(f, "avx512dq") ? __builtin_cpu_supports("avx512dq")
                     : !strcmp(f, "avx512vl") ? __builtin_cpu_supports("avx512vl")
                     : !strcmp(f, "avx512cd") ? __builtin_cpu_supports("avx512cd")
                                              : __builtin_cpu_supports("avx512bf16");
            if (!ok) {
                printf("this CPU lacks %s, which OpenBLAS's %s kernels need\n", f, name);
                return 0;
            }
        }
        return 1;
    }
    printf("core type %s is not in this test's table of instruction sets\n", name);
    return 0;
#else
    (void)name;
    return 1;
#endif
}

int main(void)
{
    const char *want = getenv("OPENBLAS_CORETYPE");
    if (want && *want) {
        if (!coretype_runs_here(want)) {
            printf("SKIP: OPENBLAS_CORETYPE=%s cannot run on this CPU\n", want);
            return 77;
        }
        CHECK(strcasecmp(kernels_blas_corename(), want) == 0,
              "OPENBLAS_CORETYPE=%s but OpenBLAS runs %s: this test would check other kernels",
              want, kernels_blas_corename());
    }
    printf("OpenBLAS core type %s, matrix products by %s\n", kernels_blas_corename(),
           kernels_gemm_name());
    outputs ref = {0};
    kernels_set_threads(1);
    run_all(&ref);
    for (int threads = 2; threads <= 3; threads++) {
        outputs o = {0};
        kernels_set_threads(threads);
        run_all(&o);
        CHECK(o.n == ref.n, "%d outputs with %d threads, %d with 1", o.n, threads, ref.n);
        int same = 0;
        for (int i = 0; i < o.n && i < ref.n; i++) {
            int eq = o.bytes[i] == ref.bytes[i] && !memcmp(o.buf[i], ref.buf[i], o.bytes[i]);
            CHECK(eq, "%s (output %d): %d threads differ from 1 thread", o.name[i], i, threads);
            same += eq;
        }
        printf("%d threads: %d of %d outputs bit-identical to 1 thread\n", threads, same, o.n);
        outputs_free(&o);
    }
    outputs_free(&ref);
    printf("%s\n", failures ? "FAILED" : "all outputs bit-identical for 1 to 3 threads");
    return failures ? 1 : 0;
}

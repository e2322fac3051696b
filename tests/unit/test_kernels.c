/* test_kernels.c — every kernel's backward against central finite
 * differences of its forward, on odd sizes. The scalar checked is
 * L = sum(out * R) for a fixed random R, so dL/dout = R. */
#include "kernels.h"

#include "../../kernels/cpu/elementwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static uint64_t rng = 0x1234567887654321ull;

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

static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Compares analytic gradient g of parameter x against finite differences of
 * loss(), perturbing up to `probes` evenly spaced entries. */
typedef double (*loss_fn)(void *ctx);
static void check_grad(const char *what, float *x, const float *g, size_t n, loss_fn loss,
                       void *ctx, int probes, double tol)
{
    double max_err = 0, max_ref = 0;
    size_t stride = n / (size_t)probes ? n / (size_t)probes : 1;
    for (size_t i = 0; i < n; i += stride) {
        float keep = x[i], h = 1e-2f * (fabsf(keep) > 1 ? fabsf(keep) : 1.0f);
        x[i] = keep + h;
        double lp = loss(ctx);
        x[i] = keep - h;
        double lm = loss(ctx);
        x[i] = keep;
        double fd = (lp - lm) / (2.0 * h);
        double e = fabs(fd - g[i]);
        if (e > max_err) max_err = e;
        if (fabs(fd) > max_ref) max_ref = fabs(fd);
    }
    double rel = max_err / (max_ref > 1e-12 ? max_ref : 1e-12);
    printf("%-28s max|g-fd| %.3e  max|fd| %.3e  rel %.2e %s\n", what, max_err, max_ref, rel,
           rel <= tol ? "ok" : "FAIL");
    if (!(rel <= tol)) failures++;
}

/* ---- matmul --------------------------------------------------------------- */
typedef struct { int N, IC, OC; float *inp, *w, *out, *R; } mm_ctx;
static double mm_loss(void *p)
{
    mm_ctx *c = p;
    matmul_forward(c->out, c->inp, c->w, c->N, c->IC, c->OC, 0);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}
static void test_matmul(void)
{
    mm_ctx c = {7, 13, 11, NULL, NULL, NULL, NULL};
    c.inp = rand_buf(7 * 13, 1);
    c.w = rand_buf(11 * 13, 1);
    c.out = zeros(7 * 11);
    c.R = rand_buf(7 * 11, 1);
    float *dinp = zeros(7 * 13), *dw = zeros(11 * 13);
    matmul_backward(dinp, dw, c.R, c.inp, c.w, 7, 13, 11);
    check_grad("matmul dinp", c.inp, dinp, 7 * 13, mm_loss, &c, 40, 1e-3);
    check_grad("matmul dweight", c.w, dw, 11 * 13, mm_loss, &c, 40, 1e-3);
    /* accumulate mode adds onto what is there */
    float *o2 = rand_buf(7 * 11, 1), *o3 = malloc(7 * 11 * sizeof(float));
    memcpy(o3, o2, 7 * 11 * sizeof(float));
    matmul_forward(o2, c.inp, c.w, 7, 13, 11, 1);
    matmul_forward(c.out, c.inp, c.w, 7, 13, 11, 0);
    double e = 0;
    for (int i = 0; i < 77; i++) e = fmax(e, fabs(o2[i] - (o3[i] + c.out[i])));
    printf("%-28s %.2e %s\n", "matmul accumulate", e, e < 1e-5 ? "ok" : "FAIL");
    if (!(e < 1e-5)) failures++;
    free(o2); free(o3); free(dinp); free(dw);
    free(c.inp); free(c.w); free(c.out); free(c.R);
}

/* All three products against a double-precision reference, on sizes that
 * cross the 256 x 256 output tiles, the micro-tiles (8 x 32) and the 256-deep
 * passes of the inner dimension, with accumulation onto nonzero outputs. */
static void test_matmul_reference(int N, int IC, int OC)
{
    float *inp = rand_buf((size_t)N * IC, 1), *w = rand_buf((size_t)OC * IC, 1);
    float *out = rand_buf((size_t)N * OC, 1), *dout = rand_buf((size_t)N * OC, 1);
    float *dinp = rand_buf((size_t)N * IC, 1), *dw = rand_buf((size_t)OC * IC, 1);
    float *out0 = malloc((size_t)N * OC * sizeof *out0), *dinp0 = malloc((size_t)N * IC * sizeof *dinp0);
    float *dw0 = malloc((size_t)OC * IC * sizeof *dw0);
    memcpy(out0, out, (size_t)N * OC * sizeof *out0);
    memcpy(dinp0, dinp, (size_t)N * IC * sizeof *dinp0);
    memcpy(dw0, dw, (size_t)OC * IC * sizeof *dw0);
    matmul_forward(out, inp, w, N, IC, OC, 1);
    matmul_backward(dinp, dw, dout, inp, w, N, IC, OC);
    double ef = 0, ei = 0, ew = 0; /* errors relative to sqrt(depth): sums of +-1 terms */
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double r = out0[(size_t)n * OC + o];
            for (int i = 0; i < IC; i++) r += (double)inp[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            ef = fmax(ef, fabs(r - out[(size_t)n * OC + o]) / sqrt((double)IC));
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            double r = dinp0[(size_t)n * IC + i];
            for (int o = 0; o < OC; o++) r += (double)dout[(size_t)n * OC + o] * w[(size_t)o * IC + i];
            ei = fmax(ei, fabs(r - dinp[(size_t)n * IC + i]) / sqrt((double)OC));
        }
    for (int o = 0; o < OC; o++)
        for (int i = 0; i < IC; i++) {
            double r = dw0[(size_t)o * IC + i];
            for (int n = 0; n < N; n++) r += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * IC + i];
            ew = fmax(ew, fabs(r - dw[(size_t)o * IC + i]) / sqrt((double)N));
        }
    double e = fmax(ef, fmax(ei, ew));
    char what[64];
    snprintf(what, sizeof what, "matmul %dx%dx%d vs double", N, IC, OC);
    printf("%-28s fwd %.1e dinp %.1e dw %.1e (%s) %s\n", what, ef, ei, ew, kernels_gemm_name(),
           e < 1e-5 ? "ok" : "FAIL");
    if (!(e < 1e-5)) failures++;
    free(inp); free(w); free(out); free(dout); free(dinp); free(dw);
    free(out0); free(dinp0); free(dw0);
}

/* ---- embedding -------------------------------------------------------------- */
typedef struct { int N, C; int32_t *ids; float *wte, *out, *R; } emb_ctx;
static double emb_loss(void *p)
{
    emb_ctx *c = p;
    embedding_forward(c->out, c->ids, c->wte, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}
static void test_embedding(void)
{
    int V = 5, N = 9, C = 7;
    int32_t ids[9] = {0, 3, 3, 4, 1, 3, 0, 2, 4}; /* repeats: gradients add */
    emb_ctx c = {N, C, ids, rand_buf((size_t)V * C, 1), zeros((size_t)N * C),
                 rand_buf((size_t)N * C, 1)};
    float *dwte = zeros((size_t)V * C);
    embedding_backward(dwte, c.R, ids, N, C);
    check_grad("embedding dwte", c.wte, dwte, (size_t)V * C, emb_loss, &c, 35, 1e-3);
    free(dwte); free(c.wte); free(c.out); free(c.R);
}

/* ---- rmsnorm ---------------------------------------------------------------- */
typedef struct { int N, C; float *inp, *w, *out, *rstd, *R; } rms_ctx;
static double rms_loss(void *p)
{
    rms_ctx *c = p;
    rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, 1e-5f);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}
static void test_rmsnorm(void)
{
    int N = 5, C = 19;
    rms_ctx c = {N, C, rand_buf((size_t)N * C, 2), rand_buf((size_t)C, 1),
                 zeros((size_t)N * C), zeros((size_t)N), rand_buf((size_t)N * C, 1)};
    for (int i = 0; i < C; i++) c.w[i] += 1.0f;
    float *dinp = zeros((size_t)N * C), *dw = zeros((size_t)C);
    rms_loss(&c);
    rmsnorm_backward(dinp, dw, c.R, c.inp, c.w, c.rstd, N, C);
    check_grad("rmsnorm dinp", c.inp, dinp, (size_t)N * C, rms_loss, &c, 95, 2e-3);
    check_grad("rmsnorm dweight", c.w, dw, (size_t)C, rms_loss, &c, 19, 2e-3);
    free(dinp); free(dw); free(c.inp); free(c.w); free(c.out); free(c.rstd); free(c.R);
}

/* ---- rope ------------------------------------------------------------------- */
typedef struct { int N, T, nh, HD, ld; float *x, *tmp, *cs, *sn, *R; } rope_ctx;
static double rope_loss(void *p)
{
    rope_ctx *c = p;
    memcpy(c->tmp, c->x, (size_t)c->N * c->ld * sizeof(float));
    rope_forward(c->tmp, c->cs, c->sn, c->N, c->T, c->nh, c->HD, c->ld);
    return dot(c->tmp, c->R, (size_t)c->N * c->ld);
}
static void test_rope(void)
{
    int B = 2, T = 6, nh = 3, HD = 8, ld = nh * HD + 5, N = B * T;
    rope_ctx c = {N, T, nh, HD, ld, rand_buf((size_t)N * ld, 1), zeros((size_t)N * ld),
                  zeros((size_t)T * HD / 2), zeros((size_t)T * HD / 2),
                  rand_buf((size_t)N * ld, 1)};
    rope_tables(c.cs, c.sn, T, HD, 500.0f);
    /* the columns past the heads are untouched: their gradient is R itself */
    float *dx = malloc((size_t)N * ld * sizeof(float));
    memcpy(dx, c.R, (size_t)N * ld * sizeof(float));
    rope_backward(dx, c.cs, c.sn, N, T, nh, HD, ld);
    check_grad("rope dx", c.x, dx, (size_t)N * ld, rope_loss, &c, 150, 1e-3);
    /* position 0 is the identity, HF rotate_half pairs (i, i + HD/2) */
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, cs[8], sn[8];
    rope_tables(cs, sn, 2, 8, 10000.0f);
    rope_forward(v, cs, sn, 1, 2, 1, 8, 8); /* row 0 -> position 0 */
    int ident = v[0] == 1 && v[4] == 5;
    float w[16] = {0};
    w[8] = 1.0f; /* row 1 (position 1), element 0 */
    rope_forward(w, cs, sn, 2, 2, 1, 8, 8);
    int pair = fabsf(w[8] - cosf(1.0f)) < 1e-6f && fabsf(w[12] - sinf(1.0f)) < 1e-6f;
    printf("%-28s %s\n", "rope convention", ident && pair ? "ok" : "FAIL");
    if (!(ident && pair)) failures++;
    free(dx); free(c.x); free(c.tmp); free(c.cs); free(c.sn); free(c.R);
}

/* ---- attention -------------------------------------------------------------- */
typedef struct { int B, T, NH, NKV, HD; float *qkv, *out, *att, *R; } att_ctx;
static double att_loss(void *p)
{
    att_ctx *c = p;
    attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->NH, c->NKV, c->HD);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->NH * c->HD);
}
static void test_attention(int NH, int NKV)
{
    int B = 2, T = 7, HD = 6, N = B * T, ld = (NH + 2 * NKV) * HD;
    att_ctx c = {B, T, NH, NKV, HD, rand_buf((size_t)N * ld, 1.5f),
                 zeros((size_t)N * NH * HD), zeros((size_t)B * NH * T * T),
                 rand_buf((size_t)N * NH * HD, 1)};
    int nscratch = kernels_threads();
    float *scratch = zeros((size_t)nscratch * attention_scratch_floats(T));
    float *dqkv = zeros((size_t)N * ld);
    att_loss(&c);
    attention_backward(dqkv, c.R, c.qkv, c.att, scratch, nscratch, B, T, NH, NKV, HD);
    char name[64];
    snprintf(name, sizeof name, "attention dqkv NH=%d NKV=%d", NH, NKV);
    check_grad(name, c.qkv, dqkv, (size_t)N * ld, att_loss, &c, 300, 2e-3);
    /* causality: the output at t = 0 ignores every later key and value */
    float keep = c.qkv[(size_t)(T - 1) * ld + NH * HD];
    float before = (att_loss(&c), c.out[0]);
    c.qkv[(size_t)(T - 1) * ld + NH * HD] = keep + 5.0f;
    float after = (att_loss(&c), c.out[0]);
    c.qkv[(size_t)(T - 1) * ld + NH * HD] = keep;
    printf("%-28s %s\n", "attention causal", before == after ? "ok" : "FAIL");
    if (before != after) failures++;
    free(scratch); free(dqkv); free(c.qkv); free(c.out); free(c.att); free(c.R);
}

/* ---- swiglu ----------------------------------------------------------------- */
typedef struct { int N, F; float *gu, *h, *R; } sw_ctx;
static double sw_loss(void *p)
{
    sw_ctx *c = p;
    swiglu_forward(c->h, c->gu, c->N, c->F);
    return dot(c->h, c->R, (size_t)c->N * c->F);
}
static void test_swiglu(void)
{
    int N = 5, F = 11;
    sw_ctx c = {N, F, rand_buf((size_t)N * 2 * F, 3), zeros((size_t)N * F),
                rand_buf((size_t)N * F, 1)};
    float *dgu = zeros((size_t)N * 2 * F);
    swiglu_backward(dgu, c.R, c.gu, N, F);
    check_grad("swiglu dgu", c.gu, dgu, (size_t)N * 2 * F, sw_loss, &c, 110, 2e-3);
    free(dgu); free(c.gu); free(c.h); free(c.R);
}

/* ---- cross-entropy ------------------------------------------------------------ */
typedef struct { int N, V; float *logits, *work, *losses; int32_t *labels; } ce_ctx;
static double ce_loss(void *p)
{
    ce_ctx *c = p;
    int kept;
    memcpy(c->work, c->logits, (size_t)c->N * c->V * sizeof(float));
    double s = crossentropy_forward(c->work, c->losses, c->labels, c->N, c->V, &kept);
    return s / kept;
}
static void test_crossentropy(void)
{
    int N = 6, V = 13;
    int32_t labels[6] = {3, KERNELS_IGNORE_INDEX, 0, 12, KERNELS_IGNORE_INDEX, 7};
    ce_ctx c = {N, V, rand_buf((size_t)N * V, 4), zeros((size_t)N * V), zeros((size_t)N),
                labels};
    int kept;
    memcpy(c.work, c.logits, (size_t)N * V * sizeof(float));
    double sum = crossentropy_forward(c.work, c.losses, labels, N, V, &kept);
    /* the reference loss of row 0, by the definition */
    double mx = -1e30, z = 0;
    for (int i = 0; i < V; i++) mx = fmax(mx, c.logits[i]);
    for (int i = 0; i < V; i++) z += exp(c.logits[i] - mx);
    double l0 = log(z) + mx - c.logits[3];
    int ok = kept == 4 && fabs(c.losses[0] - l0) < 1e-5 && c.losses[1] == 0.0f && sum > 0;
    printf("%-28s kept %d loss0 %.6f ref %.6f %s\n", "crossentropy forward", kept,
           c.losses[0], l0, ok ? "ok" : "FAIL");
    if (!ok) failures++;
    float *dl = zeros((size_t)N * V);
    crossentropy_backward(dl, c.work, labels, N, V, 1.0f / (float)kept);
    check_grad("crossentropy dlogits", c.logits, dl, (size_t)N * V, ce_loss, &c, 78, 2e-3);
    free(dl); free(c.logits); free(c.work); free(c.losses);
}

/* ---- AdamW: two steps against torch.optim.AdamW's update, written out ---- */
static void test_adamw(void)
{
    float p[3] = {0.5f, -1.0f, 2.0f}, g[3] = {0.1f, -0.2f, 0.0f}, m[3] = {0}, v[3] = {0};
    double P[3] = {0.5, -1.0, 2.0}, M[3] = {0}, Vv[3] = {0};
    double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, gs = 0.5;
    double err = 0;
    for (int t = 1; t <= 2; t++) {
        adamw_update(p, g, m, v, 3, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t,
                     (float)gs);
        for (int i = 0; i < 3; i++) {
            double gi = g[i] * gs;
            P[i] *= 1 - lr * wd;
            M[i] = b1 * M[i] + (1 - b1) * gi;
            Vv[i] = b2 * Vv[i] + (1 - b2) * gi * gi;
            double mh = M[i] / (1 - pow(b1, t)), vh = Vv[i] / (1 - pow(b2, t));
            P[i] -= lr * mh / (sqrt(vh) + eps);
            err = fmax(err, fabs(P[i] - p[i]));
        }
    }
    /* step 1 moves each weight with a gradient by about lr: bias correction */
    int ok = err < 1e-6 && fabs((0.5 * (1 - lr * wd) - lr) - 0.4895) < 1e-9;
    printf("%-28s max err %.2e %s\n", "adamw two steps", err, ok ? "ok" : "FAIL");
    if (!ok) failures++;
    float gg[4] = {3, 4, 0, 0};
    double ss = grad_sumsq(gg, 4);
    printf("%-28s %.1f %s\n", "grad_sumsq", ss, ss == 25.0 ? "ok" : "FAIL");
    if (ss != 25.0) failures++;
}

/* the vectorisable exp against libm's, over the range softmax meets */
static void test_expf(void)
{
    double worst = 0;
    for (int i = -870000; i <= 880000; i++) {
        float x = (float)i * 1e-4f;
        double ref = exp((double)x), rel = fabs(kernels_expf(x) - ref) / ref;
        if (rel > worst) worst = rel;
    }
    int ok = worst < 5e-7 && kernels_expf(-1e30f) > 0.0f && isfinite(kernels_expf(1e30f));
    printf("%-28s max rel err %.2e %s\n", "kernels_expf", worst, ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

static void test_half(void)
{
    int ok = kernels_f16_to_f32(0x3c00) == 1.0f && kernels_f16_to_f32(0xc100) == -2.5f &&
             kernels_f16_to_f32(0x0001) == ldexpf(1.0f, -24) &&
             kernels_bf16_to_f32(0x3f80) == 1.0f && kernels_bf16_to_f32(0xc020) == -2.5f;
    printf("%-28s %s\n", "f16/bf16 conversion", ok ? "ok" : "FAIL");
    if (!ok) failures++;
    /* The wire's n-value conversions: nearest even on ties, NaN kept, an
     * odd (unaligned) destination, and back exactly for bf16 values. */
    uint32_t in_bits[7] = {0x3f808000u, /* tie, even below: 0x3f80 */
                           0x3f818000u, /* tie, odd below: up to 0x3f82 */
                           0x3f808001u, /* above the tie: 0x3f81 */
                           0x7f800000u, /* inf */
                           0x7f800001u, /* a NaN whose top bits are inf's: stays NaN */
                           0xff7fffffu, /* -max: rounds to -inf, as torch does */
                           0x00000001u}; /* the least subnormal: 0 */
    uint16_t want[7] = {0x3f80, 0x3f82, 0x3f81, 0x7f80, 0x7fc0, 0xff80, 0x0000};
    float in[7], back[7];
    memcpy(in, in_bits, sizeof in);
    unsigned char wire[1 + 14];
    kernels_f32_to_bf16_n(wire + 1, in, 7);
    int okn = 1;
    for (int i = 0; i < 7; i++) {
        uint16_t h;
        memcpy(&h, wire + 1 + 2 * i, 2);
        okn &= i == 4 ? ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) : h == want[i];
    }
    kernels_bf16_to_f32_n(back, wire + 1, 7);
    okn &= back[0] == 1.0f && isinf(back[3]) && isnan(back[4]) && back[6] == 0.0f;
    printf("%-28s %s\n", "bf16 wire conversion", okn ? "ok" : "FAIL");
    if (!okn) failures++;
}

int main(void)
{
    kernels_set_threads(2);
    test_matmul();
    test_matmul_reference(1, 1, 1);
    test_matmul_reference(9, 33, 17);
    test_matmul_reference(263, 521, 301);
    test_embedding();
    test_rmsnorm();
    test_rope();
    test_attention(4, 2);
    test_attention(3, 3);
    test_attention(4, 1);
    test_swiglu();
    test_crossentropy();
    test_adamw();
    test_half();
    test_expf();
    printf("%s\n", failures ? "FAILED" : "all kernel checks passed");
    return failures ? 1 : 0;
}

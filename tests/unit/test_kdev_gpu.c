/* test_kdev_gpu.c — every operation of each GPU device this machine opens
 * (cuda:0, hip:0) against the CPU kernels, on random shapes that include
 * odd sizes: fp32 results within 1e-5 of the CPU's, relative to the
 * largest magnitude of the CPU's result (max |gpu - cpu| / max |cpu|; sums
 * run in another order on a GPU, so bits differ). With CUDA both matrix
 * kernels are checked, cuBLAS and the project's own tiled one (the only one
 * HIP has without hipBLAS). Without a usable GPU the test is skipped (77)
 * with one line saying why for each vendor.
 *
 * Then a bf16 pass (kdev_set_precision(dev, 1) must succeed): the matrix
 * products (matmul and attention's) take bf16-rounded inputs with fp32
 * sums, compared with the CPU's fp32 results within BF16_TOL = 2e-2
 * relative (measured in the emulation, tests/gpu_emu: 1.6e-3 to 5e-3 for
 * the matmuls, 4e-4 to 3.8e-3 for attention); the 256x768x2304 matmul's
 * products must also differ by at least 1e-4 (measured: 1.9e-3 and more;
 * fp32 gives ~1e-7: bf16 really applied). The rounding itself must be the
 * CPU's bit for bit (bf16_rounding). Both matrix kernels where there are
 * two must agree within 1e-5 in bf16 (same rounded inputs, fp32 sums;
 * measured: 7e-7). Everything else stays fp32 (1e-5), and
 * kdev_set_precision(dev, 0) brings fp32 products back. */
#include "check.h"
#include "rand_fixture.h"

#include "kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5
#define BF16_TOL 2e-2      /* bf16 products against the CPU's fp32 */
#define BF16_MIN_DIFF 1e-4 /* ... and at least this far on the big matmul */


/* A host array and its copy on the device. */
typedef struct {
    float *h, *d;
    size_t n;
} buf;

static kdev *dev;

static buf up(const float *h, size_t n)
{
    buf b = {malloc((n ? n : 1) * sizeof(float)), kdev_alloc(dev, (n ? n : 1) * sizeof(float)), n};
    memcpy(b.h, h, n * sizeof(float));
    if (b.d) kdev_to_device(dev, b.d, b.h, n * sizeof(float));
    return b;
}
static buf rbuf(size_t n)
{
    float *h = rnd(n);
    buf b = up(h, n);
    free(h);
    return b;
}
static void drop(buf *b)
{
    free(b->h);
    kdev_free(dev, b->d);
}
static int32_t *up_i32(const int32_t *h, int n)
{
    int32_t *d = kdev_alloc(dev, (size_t)n * sizeof *d);
    if (d) kdev_to_device(dev, d, h, (size_t)n * sizeof *d);
    return d;
}

/* The tolerance of matrix products (matmul, attention): TOL in fp32,
 * BF16_TOL in the bf16 pass. */
static double prod_tol = TOL;
static int bf16_pass;

/* max |gpu - cpu| / max |cpu| of b after the operation ran on both, within
 * tol; returns it (-1 when the device failed). */
static double agree_tol(const buf *b, const char *what, int dims[4], double tol)
{
    float *g = malloc((b->n ? b->n : 1) * sizeof *g);
    char err[256] = "";
    int ok = kdev_to_host(dev, g, b->d, b->n * sizeof(float)) == KDEV_OK &&
             kdev_sync(dev, err, sizeof err) == KDEV_OK;
    CHECK(ok, "%s %s: device error %s", kdev_name(dev), what, err);
    double md = 0, mx = 0;
    size_t bad = 0;
    for (size_t i = 0; ok && i < b->n; i++) {
        double diff = fabs((double)g[i] - b->h[i]);
        if (!(diff <= 1e30)) bad++; /* nan or inf where the CPU has none */
        md = diff > md ? diff : md;
        mx = fabs(b->h[i]) > mx ? fabs(b->h[i]) : mx;
    }
    double rel = mx > 0 ? md / mx : md;
    CHECK(ok && !bad && rel <= tol, "%s %s [%d %d %d %d]: max diff %.3g of max %.3g (rel %.3g > %g)%s",
          kdev_name(dev), what, dims[0], dims[1], dims[2], dims[3], md, mx, rel, tol,
          bad ? ", non-finite values" : "");
    free(g);
    return ok ? rel : -1;
}
static double agree(const buf *b, const char *what, int dims[4])
{
    return agree_tol(b, what, dims, TOL);
}
/* a result of matrix products */
static double agree_prod(const buf *b, const char *what, int dims[4])
{
    return agree_tol(b, what, dims, prod_tol);
}

/* The three products on random data against the CPU's; in the bf16 pass
 * prints the differences and returns the smallest of them. */
static double matmuls(int N, int IC, int OC)
{
    int dims[4] = {N, IC, OC, 0};
    double r[5];
    buf inp = rbuf((size_t)N * IC), w = rbuf((size_t)OC * IC), out = rbuf((size_t)N * OC);
    buf out2 = rbuf((size_t)N * OC);
    matmul_forward(out.h, inp.h, w.h, N, IC, OC, 0);
    kdev_matmul_forward(dev, out.d, inp.d, w.d, N, IC, OC, 0);
    r[0] = agree_prod(&out, "matmul_forward", dims);
    matmul_forward(out2.h, inp.h, w.h, N, IC, OC, 1);
    kdev_matmul_forward(dev, out2.d, inp.d, w.d, N, IC, OC, 1);
    r[1] = agree_prod(&out2, "matmul_forward accumulate", dims);
    buf dinp = rbuf((size_t)N * IC), dw = rbuf((size_t)OC * IC);
    matmul_backward(dinp.h, dw.h, out.h, inp.h, w.h, N, IC, OC);
    kdev_matmul_backward(dev, dinp.d, dw.d, out.d, inp.d, w.d, N, IC, OC);
    r[2] = agree_prod(&dinp, "matmul_backward dinp", dims);
    r[3] = agree_prod(&dw, "matmul_backward dweight", dims);
    matmul_backward(NULL, dw.h, out.h, inp.h, w.h, N, IC, OC);
    kdev_matmul_backward(dev, NULL, dw.d, out.d, inp.d, w.d, N, IC, OC);
    r[4] = agree_prod(&dw, "matmul_backward dweight only", dims);
    drop(&inp), drop(&w), drop(&out), drop(&out2), drop(&dinp), drop(&dw);
    double lo = r[0];
    for (int i = 1; i < 5; i++) lo = r[i] < lo ? r[i] : lo;
    if (bf16_pass)
        printf("    bf16 %dx%dx%d: rel diff forward %.3g, accumulate %.3g, dinp %.3g, "
               "dweight %.3g, dweight only %.3g\n",
               N, IC, OC, r[0], r[1], r[2], r[3], r[4]);
    return lo;
}

/* bf16 rounding exactly as the CPU's (kernels_f32_to_bf16_n and back):
 * products with 1.0 and an inner dimension of 1 return each rounded
 * operand, for either operand: ties to even, overflow to infinity,
 * infinities, NaN (normal numbers only: no subnormals, whose handling by
 * tensor cores is not the question here). */
static void bf16_rounding(void)
{
    enum { n = 64 };
    float v[n], want[n], one = 1.0f;
    uint16_t h[n];
    const float special[] = {1.0f + 0x1p-8f,  1.0f + 0x3p-8f,  -1.0f - 0x1p-8f, 1.0f + 0x1.02p-8f,
                             3.4028235e38f,   -3.4028235e38f,  INFINITY,        -INFINITY,
                             NAN,             0.0f,            -0.0f,           1.1754944e-38f,
                             65504.0f + 1.0f, 0.1f,            -2.7182818f,     3.1415927f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    float *r = rnd(n);
    for (int i = 0; i < n; i++) v[i] = i < ns ? special[i] : r[i] * 1e3f;
    free(r);
    kernels_f32_to_bf16_n(h, v, n);
    kernels_bf16_to_f32_n(want, h, n);
    buf x = up(v, n), o = up(&one, 1), y = rbuf(n);
    float got[2][n];
    kdev_matmul_forward(dev, y.d, o.d, x.d, 1, 1, n, 0); /* weights rounded */
    kdev_to_host(dev, got[0], y.d, sizeof got[0]);
    kdev_matmul_forward(dev, y.d, x.d, o.d, n, 1, 1, 0); /* inputs rounded */
    kdev_to_host(dev, got[1], y.d, sizeof got[1]);
    int bad = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n; i++) {
            int same = isnan(want[i]) ? isnan(got[k][i]) : got[k][i] == want[i];
            if (!same && bad++ < 4)
                printf("    %s %s: %.9g rounds to %.9g, bf16 is %.9g\n", kdev_name(dev),
                       kdev_gemm_name(dev), v[i], got[k][i], want[i]);
        }
    CHECK(!bad, "%s %s: %d products not on the CPU's bf16 rounding", kdev_name(dev),
          kdev_gemm_name(dev), bad);
    drop(&x), drop(&o), drop(&y);
}

/* The device's two matrix kernels on the same data, in the current
 * precision: every product within TOL of each other (relative to the
 * largest magnitude of the BLAS result). Skipped (0) without two kernels. */
static void fetch(float *h, const buf *b)
{
    kdev_to_host(dev, h, b->d, b->n * sizeof(float));
}
static double close_to(const float *a, const float *b, size_t n)
{
    double md = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= 1e30)) return INFINITY;
        md = d > md ? d : md;
        mx = fabs(a[i]) > mx ? fabs(a[i]) : mx;
    }
    return mx > 0 ? md / mx : md;
}
static void gemm_pair(int N, int IC, int OC)
{
    if (kdev_set_gemm(dev, "blas") != 0 || kdev_set_gemm(dev, "own") != 0) {
        printf("    %s: one matrix kernel only, no BLAS/own comparison\n", kdev_name(dev));
        return;
    }
    buf inp = rbuf((size_t)N * IC), w = rbuf((size_t)OC * IC), dout = rbuf((size_t)N * OC);
    buf out = rbuf((size_t)N * OC), dinp = rbuf((size_t)N * IC), dw = rbuf((size_t)OC * IC);
    float *res[2][3];
    const char *gemms[] = {"blas", "own"};
    for (int gi = 0; gi < 2; gi++) {
        kdev_set_gemm(dev, gemms[gi]);
        /* the accumulating products start from the same values each time */
        kdev_to_device(dev, dinp.d, dinp.h, dinp.n * sizeof(float));
        kdev_to_device(dev, dw.d, dw.h, dw.n * sizeof(float));
        kdev_matmul_forward(dev, out.d, inp.d, w.d, N, IC, OC, 0);
        kdev_matmul_backward(dev, dinp.d, dw.d, dout.d, inp.d, w.d, N, IC, OC);
        res[gi][0] = malloc(out.n * sizeof(float));
        res[gi][1] = malloc(dinp.n * sizeof(float));
        res[gi][2] = malloc(dw.n * sizeof(float));
        fetch(res[gi][0], &out), fetch(res[gi][1], &dinp), fetch(res[gi][2], &dw);
    }
    char err[256] = "";
    CHECK(kdev_sync(dev, err, sizeof err) == KDEV_OK, "%s blas/own: device error %s",
          kdev_name(dev), err);
    size_t ns[3] = {out.n, dinp.n, dw.n};
    const char *names[3] = {"forward", "dinp", "dweight"};
    double r[3];
    for (int k = 0; k < 3; k++) {
        r[k] = close_to(res[0][k], res[1][k], ns[k]);
        CHECK(r[k] <= TOL, "%s %s %dx%dx%d: blas and own differ by %.3g (> %g)", kdev_name(dev),
              names[k], N, IC, OC, r[k], TOL);
        free(res[0][k]), free(res[1][k]);
    }
    printf("    blas vs own %dx%dx%d: rel diff forward %.3g, dinp %.3g, dweight %.3g\n", N, IC, OC,
           r[0], r[1], r[2]);
    kdev_set_gemm(dev, "blas");
    drop(&inp), drop(&w), drop(&dout), drop(&out), drop(&dinp), drop(&dw);
}

static void layer_ops(int B, int T, int NH, int NKV, int HD, int C, int F, int V)
{
    int N = B * T, QKV = (NH + 2 * NKV) * HD;
    int dims[4] = {B, T, NH * 100 + NKV, HD};
    /* rope */
    float *cs = malloc((size_t)T * HD / 2 * sizeof(float)), *sn = malloc((size_t)T * HD / 2 * sizeof(float));
    rope_tables(cs, sn, T, HD, 10000.0f);
    buf c = up(cs, (size_t)T * HD / 2), s = up(sn, (size_t)T * HD / 2);
    buf qkv = rbuf((size_t)N * QKV);
    rope_forward(qkv.h, cs, sn, N, T, NH, HD, QKV);
    kdev_rope_forward(dev, qkv.d, c.d, s.d, N, T, NH, HD, QKV);
    rope_forward(qkv.h + NH * HD, cs, sn, N, T, NKV, HD, QKV);
    kdev_rope_forward(dev, qkv.d + NH * HD, c.d, s.d, N, T, NKV, HD, QKV);
    agree(&qkv, "rope_forward", dims);
    buf dq = rbuf((size_t)N * QKV);
    rope_backward(dq.h, cs, sn, N, T, NH, HD, QKV);
    kdev_rope_backward(dev, dq.d, c.d, s.d, N, T, NH, HD, QKV);
    agree(&dq, "rope_backward", dims);
    /* attention */
    size_t natt = (size_t)B * NH * T * T;
    buf out = rbuf((size_t)N * NH * HD), att = rbuf(natt);
    attention_forward(out.h, att.h, qkv.h, B, T, NH, NKV, HD);
    kdev_attention_forward(dev, out.d, att.d, qkv.d, B, T, NH, NKV, HD);
    double ra = agree_prod(&out, "attention_forward out", dims);
    double rb = agree_prod(&att, "attention_forward att", dims);
    int nthr = kernels_threads();
    float *scr = malloc(attention_scratch_floats(T) * (size_t)nthr * sizeof(float));
    size_t ns = kdev_attention_scratch_floats(dev, B, T, NH, HD);
    float *dscr = kdev_alloc(dev, (ns ? ns : 1) * sizeof(float));
    buf dqkv = rbuf((size_t)N * QKV);
    attention_backward(dqkv.h, out.h, qkv.h, att.h, scr, nthr, B, T, NH, NKV, HD);
    kdev_attention_backward(dev, dqkv.d, out.d, qkv.d, att.d, dscr, B, T, NH, NKV, HD);
    double rc = agree_prod(&dqkv, "attention_backward", dims);
    if (bf16_pass)
        printf("    bf16 attention B %d T %d NH %d NKV %d HD %d: rel diff out %.3g, att %.3g, "
               "dqkv %.3g\n",
               B, T, NH, NKV, HD, ra, rb, rc);
    free(scr);
    kdev_free(dev, dscr);
    /* rmsnorm */
    int d2[4] = {N, C, 0, 0};
    buf x = rbuf((size_t)N * C), nw = rbuf(C), y = rbuf((size_t)N * C), rstd = rbuf(N);
    rmsnorm_forward(y.h, rstd.h, x.h, nw.h, N, C, 1e-5f);
    kdev_rmsnorm_forward(dev, y.d, rstd.d, x.d, nw.d, N, C, 1e-5f);
    agree(&y, "rmsnorm_forward", d2);
    agree(&rstd, "rmsnorm_forward rstd", d2);
    buf dx = rbuf((size_t)N * C), dnw = rbuf(C);
    rmsnorm_backward(dx.h, dnw.h, y.h, x.h, nw.h, rstd.h, N, C);
    kdev_rmsnorm_backward(dev, dx.d, dnw.d, y.d, x.d, nw.d, rstd.d, N, C);
    agree(&dx, "rmsnorm_backward dinp", d2);
    agree(&dnw, "rmsnorm_backward dweight", d2);
    /* swiglu */
    int d3[4] = {N, F, 0, 0};
    buf gu = rbuf((size_t)N * 2 * F), h = rbuf((size_t)N * F), dgu = rbuf((size_t)N * 2 * F);
    swiglu_forward(h.h, gu.h, N, F);
    kdev_swiglu_forward(dev, h.d, gu.d, N, F);
    agree(&h, "swiglu_forward", d3);
    swiglu_backward(dgu.h, h.h, gu.h, N, F);
    kdev_swiglu_backward(dev, dgu.d, h.d, gu.d, N, F);
    agree(&dgu, "swiglu_backward", d3);
    /* embedding, with repeated ids (the backward adds rows into one) */
    int d4[4] = {N, C, V, 0};
    int32_t *ids = malloc((size_t)N * sizeof *ids), *labels = malloc((size_t)N * sizeof *labels);
    for (int i = 0; i < N; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % V);
        labels[i] = i % 5 == 2 ? KERNELS_IGNORE_INDEX : (int32_t)((i * 11 + 1) % V);
    }
    int32_t *dids = up_i32(ids, N), *dlabels = up_i32(labels, N);
    buf wte = rbuf((size_t)V * C), emb = rbuf((size_t)N * C), dwte = rbuf((size_t)V * C);
    embedding_forward(emb.h, ids, wte.h, N, C);
    kdev_embedding_forward(dev, emb.d, dids, wte.d, N, C);
    agree(&emb, "embedding_forward", d4);
    embedding_backward(dwte.h, emb.h, ids, N, C);
    kdev_embedding_backward(dev, dwte.d, emb.d, dids, N, C);
    agree(&dwte, "embedding_backward", d4);
    /* cross-entropy */
    buf lg = rbuf((size_t)N * V), ls = rbuf(N), dl = rbuf((size_t)N * V);
    for (size_t i = 0; i < lg.n; i++) lg.h[i] *= 4.0f;
    kdev_to_device(dev, lg.d, lg.h, lg.n * sizeof(float));
    int k1 = 0, k2 = 0;
    double s1 = crossentropy_forward(lg.h, ls.h, labels, N, V, &k1);
    double s2 = kdev_crossentropy_forward(dev, lg.d, ls.d, dlabels, N, V, &k2);
    CHECK(k1 == k2 && fabs(s1 - s2) <= TOL * fabs(s1), "%s crossentropy sum %.9g vs %.9g, kept %d vs %d",
          kdev_name(dev), s2, s1, k2, k1);
    agree(&lg, "crossentropy_forward probs", d4);
    agree(&ls, "crossentropy_forward losses", d4);
    crossentropy_backward(dl.h, lg.h, labels, N, V, 0.3f);
    kdev_crossentropy_backward(dev, dl.d, lg.d, dlabels, N, V, 0.3f);
    agree(&dl, "crossentropy_backward", d4);
    /* optimizer and helpers, on an odd length */
    size_t np = (size_t)V * C + 3;
    int d5[4] = {(int)np, 0, 0, 0};
    buf p = rbuf(np), g = rbuf(np), m = rbuf(np), v = rbuf(np);
    for (size_t i = 0; i < np; i++) v.h[i] = v.h[i] * v.h[i];
    kdev_to_device(dev, v.d, v.h, np * sizeof(float));
    double q1 = grad_sumsq(g.h, np), q2 = kdev_grad_sumsq(dev, g.d, np);
    CHECK(fabs(q1 - q2) <= TOL * q1, "%s grad_sumsq %.12g vs %.12g", kdev_name(dev), q2, q1);
    for (int t = 1; t <= 3; t++) {
        adamw_update(p.h, g.h, m.h, v.h, np, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f);
        kdev_adamw_update(dev, p.d, g.d, m.d, v.d, np, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f);
    }
    agree(&p, "adamw_update params", d5);
    agree(&m, "adamw_update m", d5);
    agree(&v, "adamw_update v", d5);
    kernels_add(p.h, g.h, np);
    kdev_add(dev, p.d, g.d, np);
    agree(&p, "add", d5);
    kernels_zero(m.h, np);
    kdev_zero(dev, m.d, np);
    agree(&m, "zero", d5);
    buf bufs[] = {c, s, qkv, dq, out, att, dqkv, x, nw, y, rstd, dx, dnw, gu, h, dgu, wte, emb,
                  dwte, lg, ls, dl, p, g, m, v};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) drop(&bufs[i]);
    kdev_free(dev, dids);
    kdev_free(dev, dlabels);
    free(ids), free(labels), free(cs), free(sn);
}

static void run_device(void)
{
    printf("%s: %s (%s), matrix kernel %s\n", kdev_name(dev), kdev_get_info(dev)->name,
           kdev_get_info(dev)->arch, kdev_gemm_name(dev));
    static const int mm[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 64, 64}, {33, 257, 129},
                                {256, 768, 2304}, {130, 1000, 77}};
    const char *gemms[] = {"blas", "own"};
    for (int gi = 0; gi < 2; gi++) {
        if (kdev_set_gemm(dev, gemms[gi]) != 0) {
            printf("  %s: no '%s' matrix kernel here\n", kdev_name(dev), gemms[gi]);
            continue;
        }
        printf("  matrix products with %s\n", kdev_gemm_name(dev));
        for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) matmuls(mm[i][0], mm[i][1], mm[i][2]);
    }
    kdev_set_gemm(dev, "blas");
    /* grouped-query and odd sizes, plain multi-head, a longer sequence */
    layer_ops(2, 7, 4, 2, 6, 21, 13, 17);
    layer_ops(1, 64, 12, 12, 64, 768, 2048, 1000);
    layer_ops(3, 129, 8, 1, 16, 130, 77, 259);

    /* bf16 products with fp32 sums; the rest unchanged */
    int e = kdev_set_precision(dev, 1);
    CHECK(e == 0, "%s: kdev_set_precision(bf16) returned %d", kdev_name(dev), e);
    if (e != 0) return;
    bf16_pass = 1;
    prod_tol = BF16_TOL;
    for (int gi = 0; gi < 2; gi++) {
        if (kdev_set_gemm(dev, gemms[gi]) != 0) continue;
        printf("  bf16 matrix products with %s\n", kdev_gemm_name(dev));
        bf16_rounding();
        for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
            double lo = matmuls(mm[i][0], mm[i][1], mm[i][2]);
            if (mm[i][0] == 256)
                CHECK(lo >= BF16_MIN_DIFF,
                      "%s %s bf16 %dx%dx%d: smallest difference from fp32 %.3g (< %g): "
                      "bf16 not applied?",
                      kdev_name(dev), kdev_gemm_name(dev), mm[i][0], mm[i][1], mm[i][2], lo,
                      BF16_MIN_DIFF);
        }
    }
    gemm_pair(256, 768, 2304);
    gemm_pair(33, 257, 129);
    kdev_set_gemm(dev, "blas");
    layer_ops(2, 7, 4, 2, 6, 21, 13, 17);
    layer_ops(1, 64, 12, 12, 64, 768, 2048, 1000);
    layer_ops(3, 129, 8, 1, 16, 130, 77, 259);

    /* back to fp32 */
    e = kdev_set_precision(dev, 0);
    CHECK(e == 0, "%s: kdev_set_precision(fp32) returned %d", kdev_name(dev), e);
    bf16_pass = 0;
    prod_tol = TOL;
    printf("  fp32 again with %s\n", kdev_gemm_name(dev));
    matmuls(33, 257, 129);
}

int main(void)
{
    rng = 0x2545f4914f6cdd1dull;
    const char *names[] = {"cuda:0", "hip:0"};
    char why[2][512];
    int ran = 0;
    for (int i = 0; i < 2; i++) {
        why[i][0] = '\0';
        if (kdev_open(names[i], &dev, why[i], sizeof why[i]) != KDEV_OK) continue;
        ran++;
        run_device();
        kdev_close(dev);
        dev = NULL;
    }
    if (!ran) {
        printf("skip: no GPU usable here (%s; %s)\n", why[0], why[1]);
        return 77;
    }
    if (failures) printf("%d failure(s)\n", failures);
    else
        printf("every GPU operation agrees with the CPU within %g (bf16 products: %g)\n", TOL,
               BF16_TOL);
    return failures != 0;
}

/* matmul.c — linear layers through OpenBLAS sgemm.
 * Weights are HF-style [OC, IC] row-major, so forward is inp @ W^T.
 *
 * Determinism: a multithreaded OpenBLAS call splits its work by the thread
 * count, and on some core types (Haswell, Zen) that changes how an element's
 * inner sum is blocked, so the same product gives other bits with 1 and 2
 * threads. Here every product is cut into tiles of its OUTPUT whose size is
 * a function of the product's shape (256 x 256, smaller for small products,
 * the last row/column of tiles shorter), never of the thread count; each tile is one single-threaded
 * sgemm over the whole inner dimension (OpenBLAS runs single-threaded inside
 * an active OpenMP region, or when the pool has one thread), and OpenMP
 * hands tiles to threads. An element is therefore always computed by the
 * same call with the same operands: the same bits whatever the thread count,
 * on every core type. Tiles also suit the caches: a 256 x 256 tile packs its
 * panels once and never re-reads C (tiles of the inner dimension did). */
#include "kernels.h"

#include "gemm.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MATMUL_TM 256 /* rows of an output tile, at most */
#define MATMUL_TN 256 /* columns of an output tile, at most */
/* Small products get smaller tiles (down to 32 x 64), halved until there are
 * this many, so that they too spread over threads. The sizes depend on the
 * product's shape alone, never on the thread count. */
#define MATMUL_MIN_TILES 16

/* Which tile kernel runs, decided once: shardnode's own AVX-512 one where the
 * CPU has AVX-512 (about 2x OpenBLAS's Haswell kernels, and the same whatever
 * OPENBLAS_CORETYPE says), OpenBLAS sgemm elsewhere, or where
 * SHARDNODE_GEMM=openblas asks for it. */
enum { GEMM_UNDECIDED, GEMM_OPENBLAS, GEMM_AVX512 };
static _Atomic int gemm_kind = GEMM_UNDECIDED;

static int gemm_choice(void)
{
    int k = atomic_load_explicit(&gemm_kind, memory_order_relaxed);
    if (k != GEMM_UNDECIDED) return k;
    const char *env = getenv("SHARDNODE_GEMM");
    k = (env && strcmp(env, "openblas") == 0) || !gemm_avx512_supported() ? GEMM_OPENBLAS
                                                                            : GEMM_AVX512;
    atomic_store_explicit(&gemm_kind, k, memory_order_relaxed);
    return k;
}

int gemm_single_is_own(void) { return gemm_choice() == GEMM_AVX512; }

const char *kernels_gemm_name(void)
{
    return gemm_choice() == GEMM_AVX512 ? "shardnode-avx512" : "openblas";
}

void gemm_single(int transa, int transb, int m, int n, int K, const float *a, int lda,
                 const float *b, int ldb, int accumulate, float *c, int ldc)
{
    if (m <= 0 || n <= 0) return;
    if (K > 0 && gemm_choice() == GEMM_AVX512) {
        gemm_tile_avx512(transa, transb, m, n, K, a, lda, b, ldb, accumulate, c, ldc);
    } else if (K > 0) {
        cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                    transb ? CblasTrans : CblasNoTrans, m, n, K, 1.0f, a, lda, b, ldb,
                    accumulate ? 1.0f : 0.0f, c, ldc);
    } else if (!accumulate) {
        for (int i = 0; i < m; i++) memset(c + (size_t)i * ldc, 0, (size_t)n * sizeof *c);
    }
}

void gemm_tile_sizes(int M, int N, int *tm, int *tn)
{
    int TM = MATMUL_TM, TN = MATMUL_TN;
    while ((long)((M + TM - 1) / TM) * ((N + TN - 1) / TN) < MATMUL_MIN_TILES) {
        if (TN > 64 && (TN >= TM || TM <= 32))
            TN /= 2;
        else if (TM > 32)
            TM /= 2;
        else
            break;
    }
    *tm = TM;
    *tn = TN;
}

/* c[M,N] = alpha op(a)[M,K] op(b)[K,N] + beta c, tile by tile. */
static void sgemm_tiled(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc)
{
    if (M <= 0 || N <= 0) return;
    int TM, TN;
    gemm_tile_sizes(M, N, &TM, &TN);
    int mt = (M + TM - 1) / TM, nt = (N + TN - 1) / TN;
    int own = gemm_choice() == GEMM_AVX512 && (beta == 0.0f || beta == 1.0f);
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < mt * nt; t++) {
        int i0 = t / nt * TM, j0 = t % nt * TN;
        int m = M - i0 < TM ? M - i0 : TM;
        int n = N - j0 < TN ? N - j0 : TN;
        /* rows i0.. of op(a), columns j0.. of op(b) */
        const float *ai = ta == CblasNoTrans ? a + (size_t)i0 * lda : a + i0;
        const float *bj = tb == CblasNoTrans ? b + j0 : b + (size_t)j0 * ldb;
        float *cij = c + (size_t)i0 * ldc + j0;
        if (K == 0) { /* no products: only the beta part */
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    float *e = cij + (size_t)i * ldc + j;
                    *e = beta == 0.0f ? 0.0f : beta * *e;
                }
            continue;
        }
        if (own)
            gemm_tile_avx512(ta != CblasNoTrans, tb != CblasNoTrans, m, n, K, ai, lda, bj, ldb,
                             beta != 0.0f, cij, ldc);
        else
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, K, 1.0f, ai, lda, bj, ldb, beta, cij, ldc);
    }
}

/* out[N,OC] = inp[N,IC] @ weight[OC,IC]^T (+ out when accumulate) */
void matmul_forward(float *out, const float *inp, const float *weight,
                    int N, int IC, int OC, int accumulate)
{
    sgemm_tiled(CblasNoTrans, CblasTrans, N, OC, IC, inp, IC, weight, IC,
                accumulate ? 1.0f : 0.0f, out, OC);
}

/* dinp[N,IC] += dout[N,OC] @ weight[OC,IC]; dweight[OC,IC] += dout^T @ inp */
void matmul_backward(float *dinp, float *dweight, const float *dout,
                     const float *inp, const float *weight, int N, int IC, int OC)
{
    if (dinp)
        sgemm_tiled(CblasNoTrans, CblasNoTrans, N, IC, OC, dout, OC, weight, IC, 1.0f, dinp,
                    IC);
    if (dweight)
        sgemm_tiled(CblasTrans, CblasNoTrans, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight,
                    IC);
}

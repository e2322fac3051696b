/* matmul.c — linear layers through OpenBLAS sgemm.
 * Weights are HF-style [OC, IC] row-major, so forward is inp @ W^T.
 *
 * OpenBLAS sums a long inner dimension in blocks whose order depends on the
 * number of threads, so the same product gives other bits on a node with
 * another thread cap. The inner dimension is therefore cut here into fixed
 * chunks of MATMUL_KC, each short enough that OpenBLAS sums it in one block,
 * and the chunks are added in order: the same bits whatever the thread
 * count, as a pool of unequal nodes needs to match one process. */
#include "kernels.h"

#include <cblas.h>

#define MATMUL_KC 256

/* c[M,N] = beta c + sum over k of op(a)[M,k] op(b)[k,N], k in chunks. */
static void sgemm_chunked(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                          const float *a, int lda, const float *b, int ldb, float beta, float *c,
                          int ldc)
{
    for (int k0 = 0; k0 < K || k0 == 0; k0 += MATMUL_KC) {
        int kc = K - k0 < MATMUL_KC ? K - k0 : MATMUL_KC;
        /* a chunk starts k0 columns into op(a) and k0 rows into op(b) */
        const float *ak = ta == CblasNoTrans ? a + k0 : a + (size_t)k0 * lda;
        const float *bk = tb == CblasNoTrans ? b + (size_t)k0 * ldb : b + k0;
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, kc, 1.0f, ak, lda, bk, ldb,
                    k0 == 0 ? beta : 1.0f, c, ldc);
        if (K == 0) break;
    }
}

/* out[N,OC] = inp[N,IC] @ weight[OC,IC]^T (+ out when accumulate) */
void matmul_forward(float *out, const float *inp, const float *weight,
                    int N, int IC, int OC, int accumulate)
{
    sgemm_chunked(CblasNoTrans, CblasTrans, N, OC, IC, inp, IC, weight, IC,
                  accumulate ? 1.0f : 0.0f, out, OC);
}

/* dinp[N,IC] += dout[N,OC] @ weight[OC,IC]; dweight[OC,IC] += dout^T @ inp */
void matmul_backward(float *dinp, float *dweight, const float *dout,
                     const float *inp, const float *weight, int N, int IC, int OC)
{
    if (dinp)
        sgemm_chunked(CblasNoTrans, CblasNoTrans, N, IC, OC, dout, OC, weight, IC, 1.0f, dinp,
                      IC);
    if (dweight)
        sgemm_chunked(CblasTrans, CblasNoTrans, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight,
                      IC);
}

/* gemm.cu — linear layers: out[N,OC] (=|+=) inp[N,IC] @ weight[OC,IC]^T and
 * the two backward products, through the vendor BLAS (cuBLAS; hipBLAS when
 * built with SHARDNODE_HIPBLAS) or the project's own tiled kernel below.
 *
 * The own kernel computes C[M,Nc] (=|+=) op(A)[M,K] op(B)[K,Nc], all
 * row-major, fp32 with fp32 accumulation, any sizes (edge tiles are
 * zero-padded in shared memory and their outside outputs not written):
 *   forward  M=N,  Nc=OC, K=IC: A = inp,          B = weight^T
 *   dinp     M=N,  Nc=IC, K=OC: A = dout,         B = weight,  accumulate
 *   dweight  M=OC, Nc=IC, K=N:  A = dout^T,       B = inp,     accumulate
 *
 * bf16 precision (sn_ctx.bf16, set_precision): every operand element is
 * rounded to bf16 where it is read (the own kernel: as it enters shared
 * memory; cuBLAS: converted into the context's two bf16 buffers, then
 * cublasGemmEx with CUDA_R_16BF inputs, CUDA_R_32F results and
 * CUBLAS_COMPUTE_32F); products of bf16 values are exact in fp32 and the
 * sums stay fp32. hipBLAS builds take the own kernel for bf16 products. */
#include "internal.h"

#define GT_M 64        /* rows of C per block */
#define GT_N 64        /* columns of C per block */
#define GT_K 16        /* depth of one shared-memory stage */
#define GT_THREADS 256 /* 16 x 16 threads, 4 x 4 outputs each */

/* TA: A is stored transposed (element (m, k) at A[k * lda + m]);
 * TB: B is stored transposed (element (k, n) at B[n * ldb + k]). */
template <int TA, int TB>
static __global__ __launch_bounds__(GT_THREADS) void gemm_own_kernel(
    int M, int Nc, int K, const float *__restrict__ A, int lda, const float *__restrict__ B,
    int ldb, float *C, int ldc, int accumulate, int bf16)
{
    /* k-major tiles; the +1 keeps the transposing stores off one bank */
    __shared__ float As[GT_K][GT_M + 1];
    __shared__ float Bs[GT_K][GT_N + 1];
    const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = (int)blockIdx.x * GT_M, n0 = (int)blockIdx.y * GT_N;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += GT_K) {
        /* A tile [GT_M x GT_K]: consecutive threads walk the stored rows */
        for (int e = tid; e < GT_M * GT_K; e += GT_THREADS) {
            int mm, kk;
            if (TA) {
                mm = e % GT_M;
                kk = e / GT_M;
            } else {
                kk = e % GT_K;
                mm = e / GT_K;
            }
            int gm = m0 + mm, gk = k0 + kk;
            float v = 0.0f;
            if (gm < M && gk < K) v = TA ? A[(size_t)gk * lda + gm] : A[(size_t)gm * lda + gk];
            As[kk][mm] = sn_prod_in(v, bf16);
        }
        /* B tile [GT_K x GT_N] */
        for (int e = tid; e < GT_K * GT_N; e += GT_THREADS) {
            int kk, nn;
            if (TB) {
                kk = e % GT_K;
                nn = e / GT_K;
            } else {
                nn = e % GT_N;
                kk = e / GT_N;
            }
            int gk = k0 + kk, gn = n0 + nn;
            float v = 0.0f;
            if (gk < K && gn < Nc) v = TB ? B[(size_t)gn * ldb + gk] : B[(size_t)gk * ldb + gn];
            Bs[kk][nn] = sn_prod_in(v, bf16);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GT_K; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        int m = m0 + ty + 16 * i;
        if (m >= M) continue;
        for (int j = 0; j < 4; j++) {
            int n = n0 + tx + 16 * j;
            if (n >= Nc) continue;
            float *c = C + (size_t)m * ldc + n;
            *c = accumulate ? *c + acc[i][j] : acc[i][j];
        }
    }
}

static void gemm_own(sn_ctx *c, int ta, int tb, int M, int Nc, int K, const float *A, int lda,
                     const float *B, int ldb, float *C, int ldc, int accumulate, const char *what)
{
    dim3 grid((unsigned)((M + GT_M - 1) / GT_M), (unsigned)((Nc + GT_N - 1) / GT_N));
    if (grid.y > 65535u) {
        sn_fail(c, what, "too many output columns for the own GEMM's grid");
        return;
    }
    const int bf16 = c->bf16;
    if (!ta && tb)
        gemm_own_kernel<0, 1>
            <<<grid, GT_THREADS, 0, c->stream>>>(M, Nc, K, A, lda, B, ldb, C, ldc, accumulate,
                                                 bf16);
    else if (!ta && !tb)
        gemm_own_kernel<0, 0>
            <<<grid, GT_THREADS, 0, c->stream>>>(M, Nc, K, A, lda, B, ldb, C, ldc, accumulate,
                                                 bf16);
    else if (ta && !tb)
        gemm_own_kernel<1, 0>
            <<<grid, GT_THREADS, 0, c->stream>>>(M, Nc, K, A, lda, B, ldb, C, ldc, accumulate,
                                                 bf16);
    else
        gemm_own_kernel<1, 1>
            <<<grid, GT_THREADS, 0, c->stream>>>(M, Nc, K, A, lda, B, ldb, C, ldc, accumulate,
                                                 bf16);
    sn_launched(c, what);
}

#ifdef SN_BLAS
static void blas_check(sn_ctx *c, cublasStatus_t s, const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS) sn_fail(c, what, SN_BLAS_STATUS_STRING(s));
}
#endif

#ifdef SN_BLAS_BF16
static __global__ __launch_bounds__(SN_THREADS) void to_bf16_kernel(uint16_t *dst,
                                                                    const float *src, size_t n)
{
    SN_GRID_STRIDE(i, n) dst[i] = sn_bf16_bits(src[i]);
}

/* src[n] converted into the context's bf16 buffer `which` (0 or 1), queued;
 * NULL with the error kept when it could not be. A buffer too small is
 * replaced: the new one allocated first, then the old one freed by
 * cudaFree, which waits for the work already queued that reads it. */
static const uint16_t *bf16_operand(sn_ctx *c, int which, const float *src, size_t n,
                                    const char *what)
{
    uint16_t **buf = which ? &c->bf_b : &c->bf_a;
    size_t *cap = which ? &c->bf_b_n : &c->bf_a_n;
    if (*cap < n) {
        uint16_t *p = NULL;
        cudaError_t e = cudaMalloc((void **)&p, n * sizeof(uint16_t));
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            sn_check(c, e, what);
            return NULL;
        }
        uint16_t *old = *buf;
        *buf = p;
        *cap = n;
        if (old && sn_check(c, cudaFree(old), what)) return NULL;
    }
    to_bf16_kernel<<<sn_blocks(n, SN_THREADS), SN_THREADS, 0, c->stream>>>(*buf, src, n);
    sn_launched(c, what);
    return c->failed ? NULL : *buf;
}

/* C = alpha op(A) op(B) + beta C (column-major, cuBLAS's arguments) on the
 * bf16 copies a16, b16 of A and B: fp32 results and accumulation. */
static void blas_gemm_bf16(sn_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, const uint16_t *a16, int lda, const uint16_t *b16, int ldb,
                           float beta, float *C, int ldc, const char *what)
{
    const float one = 1.0f;
    blas_check(c,
               cublasGemmEx(c->blas, ta, tb, m, n, k, &one, a16, CUDA_R_16BF, lda, b16,
                            CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               what);
}
#endif

/* out[N,OC] (=|+=) inp[N,IC] @ weight[OC,IC]^T */
void sn_matmul_forward(void *ctx, float *out, const float *inp, const float *weight, int N, int IC,
                       int OC, int accumulate)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || N <= 0 || OC <= 0) return;
    if (IC <= 0) { /* an empty inner dimension: out = 0 or unchanged */
        if (!accumulate)
            sn_check(c, cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(float), c->stream),
                     "matmul_forward");
        return;
    }
#ifdef SN_BLAS_BF16
    if (!c->own_gemm && c->bf16) { /* the same product on bf16 copies */
        const uint16_t *w16 = bf16_operand(c, 0, weight, (size_t)OC * IC, "matmul_forward");
        const uint16_t *x16 =
            w16 ? bf16_operand(c, 1, inp, (size_t)N * IC, "matmul_forward") : NULL;
        if (x16)
            blas_gemm_bf16(c, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w16, IC, x16, IC,
                           accumulate ? 1.0f : 0.0f, out, OC, "matmul_forward");
        return;
    }
#endif
#ifdef SN_BLAS
    if (!c->own_gemm && !c->bf16) {
        /* column-major view: out^T[OC,N] = weight[OC,IC] (stored as IC x OC,
         * transposed) times inp^T[IC,N] (stored as IC x N) */
        const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        blas_check(c,
                   cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, weight, IC, inp,
                               IC, &beta, out, OC),
                   "matmul_forward");
        return;
    }
#endif
    gemm_own(c, 0, 1, N, OC, IC, inp, IC, weight, IC, out, OC, accumulate, "matmul_forward");
}

/* dinp[N,IC] += dout[N,OC] @ weight[OC,IC]; dweight[OC,IC] += dout^T @ inp */
void sn_matmul_backward(void *ctx, float *dinp, float *dweight, const float *dout, const float *inp,
                        const float *weight, int N, int IC, int OC)
{
    sn_ctx *c = (sn_ctx *)ctx;
    /* an empty inner dimension adds nothing */
    if (sn_enter(c) || N <= 0 || IC <= 0 || OC <= 0) return;
#ifdef SN_BLAS_BF16
    if (!c->own_gemm && c->bf16) { /* dout converted once, then weight, inp in turn */
        const uint16_t *d16 = bf16_operand(c, 0, dout, (size_t)N * OC, "matmul_backward");
        if (!d16) return;
        if (dinp) {
            const uint16_t *w16 =
                bf16_operand(c, 1, weight, (size_t)OC * IC, "matmul_backward dinp");
            if (!w16) return;
            blas_gemm_bf16(c, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w16, IC, d16, OC, 1.0f, dinp, IC,
                           "matmul_backward dinp");
        }
        if (dweight) {
            /* stream order: the dinp product has read the buffer before this
             * conversion overwrites it */
            const uint16_t *x16 =
                bf16_operand(c, 1, inp, (size_t)N * IC, "matmul_backward dweight");
            if (!x16) return;
            blas_gemm_bf16(c, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, x16, IC, d16, OC, 1.0f, dweight,
                           IC, "matmul_backward dweight");
        }
        return;
    }
#endif
#ifdef SN_BLAS
    if (!c->own_gemm && !c->bf16) {
        const float one = 1.0f;
        /* dinp^T[IC,N] += weight^T[IC,OC] (weight stored as IC x OC) @ dout^T[OC,N] */
        if (dinp)
            blas_check(c,
                       cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, weight, IC,
                                   dout, OC, &one, dinp, IC),
                       "matmul_backward dinp");
        /* dweight^T[IC,OC] += inp^T[IC,N] @ dout[N,OC] (dout stored as OC x N) */
        if (dweight)
            blas_check(c,
                       cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, IC,
                                   dout, OC, &one, dweight, IC),
                       "matmul_backward dweight");
        return;
    }
#endif
    if (dinp)
        gemm_own(c, 0, 0, N, IC, OC, dout, OC, weight, IC, dinp, IC, 1, "matmul_backward dinp");
    if (dweight)
        gemm_own(c, 1, 0, OC, IC, N, dout, OC, inp, IC, dweight, IC, 1, "matmul_backward dweight");
}

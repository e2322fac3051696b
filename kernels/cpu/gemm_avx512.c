/* gemm_avx512.c — one output tile of a matrix product, single-threaded, with
 * AVX-512 (compiled for it whatever -march says; called only where the CPU
 * has it, see matmul.c).
 *
 * Why not OpenBLAS: Debian's OpenBLAS 0.3.21 misdetects recent CPUs, and a
 * machine preset to its Haswell kernels (OPENBLAS_CORETYPE) runs AVX-512
 * hardware at half its width. This kernel is the same on every such CPU, so
 * the matrix products no longer depend on which core type OpenBLAS runs.
 *
 * c[m,n] = A[m,K] B[K,n] (+ c when `accumulate`), where
 *   A(i,k) = a[i*lda + k] (NoTrans) or a[k*lda + i] (Trans),
 *   B(k,j) = b[k*ldb + j] (NoTrans) or b[j*ldb + k] (Trans).
 * A is read in place (a broadcast per element); B is read in place when its
 * rows are contiguous and otherwise packed, GEMM_KC rows at a time, into
 * panels of GEMM_NR columns.
 *
 * Every element of c is one chain of fused multiply-adds over k in order,
 * restarted from c every GEMM_KC values of k: its bits depend on K alone,
 * never on the tile it lies in, the tile sizes or the thread count. */
#include "gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <stddef.h>

#define GEMM_MR 8   /* rows of a micro-tile: one broadcast each per k */
#define GEMM_NR 32  /* columns: two 16-float vectors */
#define GEMM_KC 256 /* depth of one pass over c */

#define TARGET __attribute__((target("avx512f")))

/* One micro-tile: c[mr, nr] (= or +=) sum over k < kc of A(r,k) B(k,j),
 * A(r,k) = ak[off[r] + k*sak], B(k, j) = b[k*ldb + j]. Rows r >= mr repeat
 * row mr - 1 (their results are not stored). */
TARGET static void micro_8x32(int kc, const float *ak, const ptrdiff_t *off, ptrdiff_t sak,
                              const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int mr,
                              int nr, int load_c)
{
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    __m512 x0 = _mm512_setzero_ps(), y0 = x0, x1 = x0, y1 = x0, x2 = x0, y2 = x0, x3 = x0,
           y3 = x0, x4 = x0, y4 = x0, x5 = x0, y5 = x0, x6 = x0, y6 = x0, x7 = x0, y7 = x0;
#define LOAD_ROW(r)                                                   \
    if (load_c && r < mr) {                                           \
        x##r = _mm512_maskz_loadu_ps(m0, c + (ptrdiff_t)r * ldc);      \
        y##r = _mm512_maskz_loadu_ps(m1, c + (ptrdiff_t)r * ldc + 16); \
    }
    LOAD_ROW(0) LOAD_ROW(1) LOAD_ROW(2) LOAD_ROW(3)
    LOAD_ROW(4) LOAD_ROW(5) LOAD_ROW(6) LOAD_ROW(7)
#undef LOAD_ROW
    const ptrdiff_t o0 = off[0], o1 = off[1], o2 = off[2], o3 = off[3], o4 = off[4],
                    o5 = off[5], o6 = off[6], o7 = off[7];
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16), s;
#define FMA_ROW(r)                          \
    s = _mm512_set1_ps(ak[o##r]);           \
    x##r = _mm512_fmadd_ps(s, b0, x##r);    \
    y##r = _mm512_fmadd_ps(s, b1, y##r);
        FMA_ROW(0) FMA_ROW(1) FMA_ROW(2) FMA_ROW(3)
        FMA_ROW(4) FMA_ROW(5) FMA_ROW(6) FMA_ROW(7)
#undef FMA_ROW
        b += ldb;
        ak += sak;
    }
#define STORE_ROW(r)                                                 \
    if (r < mr) {                                                    \
        _mm512_mask_storeu_ps(c + (ptrdiff_t)r * ldc, m0, x##r);      \
        _mm512_mask_storeu_ps(c + (ptrdiff_t)r * ldc + 16, m1, y##r); \
    }
    STORE_ROW(0) STORE_ROW(1) STORE_ROW(2) STORE_ROW(3)
    STORE_ROW(4) STORE_ROW(5) STORE_ROW(6) STORE_ROW(7)
#undef STORE_ROW
}

TARGET void gemm_tile_avx512(int transa, int transb, int m, int n, int K, const float *a,
                             int lda, const float *b, int ldb, int accumulate, float *c, int ldc)
{
    /* one packed panel of B: GEMM_KC rows of GEMM_NR columns (32 KiB) */
    float pack[GEMM_KC * GEMM_NR] __attribute__((aligned(64)));
    ptrdiff_t sai = transa ? 1 : lda, sak = transa ? lda : 1;
    for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
        int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
        int load_c = accumulate || k0 > 0;
        for (int j0 = 0; j0 < n; j0 += GEMM_NR) {
            int nr = n - j0 < GEMM_NR ? n - j0 : GEMM_NR;
            if (!transb) { /* rows of B are contiguous: copy a panel */
                __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
                __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
                const float *src = b + (ptrdiff_t)k0 * ldb + j0;
                for (int k = 0; k < kc; k++, src += ldb) {
                    _mm512_store_ps(pack + k * GEMM_NR, _mm512_maskz_loadu_ps(m0, src));
                    _mm512_store_ps(pack + k * GEMM_NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
                }
            } else { /* B(k, j) = b[j*ldb + k]: transpose into the panel */
                for (int jj = 0; jj < GEMM_NR; jj++) {
                    if (jj < nr) {
                        const float *src = b + (ptrdiff_t)(j0 + jj) * ldb + k0;
                        for (int k = 0; k < kc; k++) pack[k * GEMM_NR + jj] = src[k];
                    } else {
                        for (int k = 0; k < kc; k++) pack[k * GEMM_NR + jj] = 0.0f;
                    }
                }
            }
            const float *bp = pack;
            ptrdiff_t ldbp = GEMM_NR;
            for (int i0 = 0; i0 < m; i0 += GEMM_MR) {
                int mr = m - i0 < GEMM_MR ? m - i0 : GEMM_MR;
                ptrdiff_t off[GEMM_MR];
                for (int r = 0; r < GEMM_MR; r++) off[r] = (ptrdiff_t)(r < mr ? r : mr - 1) * sai;
                const float *ak = a + (ptrdiff_t)i0 * sai + (ptrdiff_t)k0 * sak;
                micro_8x32(kc, ak, off, sak, bp, ldbp, c + (ptrdiff_t)i0 * ldc + j0, ldc, mr, nr,
                           load_c);
            }
        }
    }
}

int gemm_avx512_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

#else

void gemm_tile_avx512(int transa, int transb, int m, int n, int K, const float *a, int lda,
                      const float *b, int ldb, int accumulate, float *c, int ldc)
{
    (void)transa, (void)transb, (void)m, (void)n, (void)K, (void)a, (void)lda, (void)b;
    (void)ldb, (void)accumulate, (void)c, (void)ldc;
}

int gemm_avx512_supported(void) { return 0; }

#endif

/* gemm.h — the CPU kernels' own matrix-product tile (private to kernels/cpu).
 * See gemm_avx512.c for what it computes and why its bits never depend on
 * tiles or threads. */
#ifndef SHARDNODE_KERNELS_GEMM_H
#define SHARDNODE_KERNELS_GEMM_H

/* 1 when this CPU runs gemm_tile_avx512. */
int gemm_avx512_supported(void);
/* c[m,n] = op(a)[m,K] op(b)[K,n] (+ c when accumulate), single-threaded;
 * trans* nonzero: the operand is stored transposed (row-major). K >= 1. */
void gemm_tile_avx512(int transa, int transb, int m, int n, int K, const float *a, int lda,
                      const float *b, int ldb, int accumulate, float *c, int ldc);

/* One single-threaded product with whichever kernel matmul uses (matmul.c):
 * c[m,n] = op(a) op(b) (+ c when accumulate). For products inside an OpenMP
 * loop (attention's per-head products). */
void gemm_single(int transa, int transb, int m, int n, int K, const float *a, int lda,
                 const float *b, int ldb, int accumulate, float *c, int ldc);

/* 1 when gemm_single runs gemm_tile_avx512, 0 when it runs OpenBLAS's sgemm. */
int gemm_single_is_own(void);

/* The output tile of every tiled product of an M x N output (matmul.c and
 * nf4_matmul.c): at most 256 x 256, halved down to 32 x 64 until there are
 * 16 tiles. A function of the shape alone, never of the thread count: the
 * determinism promise (docs/ARCHITECTURE.md) rests on it. */
void gemm_tile_sizes(int M, int N, int *tm, int *tn);

#endif

/* nf4_matmul.c — linear layers whose weight [OC, IC] is NF4 (frozen):
 * out = inp @ W^T and dinp += dout @ W, W dequantized a tile at a time.
 *
 * The products are cut into tiles of their output exactly as matmul.c cuts
 * them (the same sizes, functions of the shape alone), and each tile is one
 * single-threaded gemm_single over the whole inner dimension, the kernel
 * matmul uses. Its B operand is the tile's slice of W dequantized into the
 * thread's scratch, laid out so that the kernel reads it by rows: rows
 * [j0, j0+n) of W transposed ([IC, n]) for the forward, columns [j0, j0+n)
 * of every row ([OC, n]) for the backward. matmul_forward hands the kernel
 * W itself, transposed (the AVX-512 kernel gathers it into its panels; here
 * the panels are plain copies, once per tile, not a gather per tile); the
 * values and the order of every element's multiply-adds are the same. With
 * OpenBLAS's sgemm the forward's slice stays as W's rows ([n, IC]) and is
 * handed over transposed, as matmul_forward does: OpenBLAS's AVX-512 core
 * types (SkylakeX, Cooperlake) add in another order for a transposed B than
 * for a plain one (their small-matrix kernels differ), so only the same call
 * gives the same bits. So an
 * output element equals matmul_forward's / matmul_backward's on the
 * dequantized W bit for bit, whatever the thread count (unit.test_nf4
 * checks it with both kernels). No whole fp32 copy of W ever exists.
 *
 * Tiles are numbered slice-major (all row tiles of one W slice in a row) and
 * a thread keeps the slice it dequantized last, so with few threads a slice
 * is dequantized about once per thread that touches it. */
#include "kernels.h"

#include "gemm.h"

#include <omp.h>

/* The tiles are matmul.c's (gemm_tile_sizes), so a product on an NF4 weight
 * adds in the same order as one on its dequantized fp32 copy. */

size_t nf4_matmul_scratch_floats(int N, int IC, int OC)
{
    int tm, tn_f, tn_b;
    gemm_tile_sizes(N, OC, &tm, &tn_f);
    gemm_tile_sizes(N, IC, &tm, &tn_b);
    size_t fwd = (size_t)(tn_f < OC ? tn_f : OC) * (size_t)IC;
    size_t bwd = (size_t)OC * (size_t)(tn_b < IC ? tn_b : IC);
    return fwd > bwd ? fwd : bwd;
}

static int threads_for(int nscratch)
{
    int t = omp_get_max_threads();
    return t < nscratch ? t : nscratch;
}

/* wt[k * n + j] = W[j0 + j][k] for j < n, k < IC: the slice of rows
 * [j0, j0 + n) of W transposed, so the tile's B operand is read with
 * contiguous rows (the kernel copies such panels instead of transposing
 * them, once per tile). Groups of 16 rows, 64 columns at a time: each
 * k writes 16 consecutive floats. */
enum { DQ_ROWS = 16, DQ_COLS = 64 };

static void dequantize_rows_transposed(const nf4_matrix *w, int j0, int n, float *wt)
{
    const int IC = (int)w->cols;
    float buf[DQ_ROWS][DQ_COLS];
    for (int g = 0; g < n; g += DQ_ROWS) {
        int rows = n - g < DQ_ROWS ? n - g : DQ_ROWS;
        for (int k0 = 0; k0 < IC; k0 += DQ_COLS) {
            int kc = IC - k0 < DQ_COLS ? IC - k0 : DQ_COLS;
            for (int r = 0; r < rows; r++)
                nf4_dequantize_range(w, (int64_t)(j0 + g + r) * IC + k0, kc, buf[r]);
            for (int k = 0; k < kc; k++) {
                float *d = wt + (size_t)(k0 + k) * n + g;
                for (int r = 0; r < rows; r++) d[r] = buf[r][k];
            }
        }
    }
}

void nf4_matmul_forward(float *out, const float *inp, const nf4_matrix *w, int N,
                        int accumulate, float *scratch, int nscratch)
{
    nf4_matmul_forward_ld(out, (int)w->rows, inp, w, N, accumulate, scratch, nscratch);
}

void nf4_matmul_forward_ld(float *out, int ldo, const float *inp, const nf4_matrix *w, int N,
                           int accumulate, float *scratch, int nscratch)
{
    const int IC = (int)w->cols, OC = (int)w->rows;
    if (N <= 0 || OC <= 0 || nscratch < 1) return;
    int TM, TN;
    gemm_tile_sizes(N, OC, &TM, &TN);
    const int mt = (N + TM - 1) / TM, nt = (OC + TN - 1) / TN;
    const size_t slot = nf4_matmul_scratch_floats(N, IC, OC);
    const int own = gemm_single_is_own();
#pragma omp parallel num_threads(threads_for(nscratch))
    {
        float *wt = scratch + (size_t)omp_get_thread_num() * slot;
        int have = -1; /* the W slice in wt */
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < mt * nt; t++) {
            int jt = t / mt, i0 = t % mt * TM, j0 = jt * TN;
            int m = N - i0 < TM ? N - i0 : TM;
            int n = OC - j0 < TN ? OC - j0 : TN;
            if (have != jt) {
                if (own)
                    dequantize_rows_transposed(w, j0, n, wt);
                else
                    for (int r = 0; r < n; r++)
                        nf4_dequantize_range(w, (int64_t)(j0 + r) * IC, IC, wt + (size_t)r * IC);
                have = jt;
            }
            /* own: wt is [IC, n]; OpenBLAS: [n, IC], handed over transposed */
            gemm_single(0, !own, m, n, IC, inp + (size_t)i0 * IC, IC, wt, own ? n : IC,
                        accumulate, out + (size_t)i0 * ldo + j0, ldo);
        }
    }
}

void nf4_matmul_backward(float *dinp, const float *dout, const nf4_matrix *w, int N,
                         float *scratch, int nscratch)
{
    nf4_matmul_backward_ld(dinp, dout, (int)w->rows, w, N, scratch, nscratch);
}

void nf4_matmul_backward_ld(float *dinp, const float *dout, int ldd, const nf4_matrix *w,
                            int N, float *scratch, int nscratch)
{
    const int IC = (int)w->cols, OC = (int)w->rows;
    if (N <= 0 || IC <= 0 || nscratch < 1) return;
    int TM, TN;
    gemm_tile_sizes(N, IC, &TM, &TN);
    const int mt = (N + TM - 1) / TM, nt = (IC + TN - 1) / TN;
    const size_t slot = nf4_matmul_scratch_floats(N, IC, OC);
#pragma omp parallel num_threads(threads_for(nscratch))
    {
        float *wt = scratch + (size_t)omp_get_thread_num() * slot;
        int have = -1;
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < mt * nt; t++) {
            int jt = t / mt, i0 = t % mt * TM, j0 = jt * TN;
            int m = N - i0 < TM ? N - i0 : TM;
            int n = IC - j0 < TN ? IC - j0 : TN;
            if (have != jt) {
                for (int r = 0; r < OC; r++)
                    nf4_dequantize_range(w, (int64_t)r * IC + j0, n, wt + (size_t)r * n);
                have = jt;
            }
            gemm_single(0, 0, m, n, OC, dout + (size_t)i0 * ldd, ldd, wt, n, 1,
                        dinp + (size_t)i0 * IC + j0, IC);
        }
    }
}

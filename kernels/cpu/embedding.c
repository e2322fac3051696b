/* embedding.c — token embedding lookup and its scatter-add backward. */
#include "kernels.h"

#include "elementwise.h"

#include <string.h>

void embedding_forward(float *out, const int32_t *ids, const float *wte, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)ids[n] * C, (size_t)C * sizeof(float));
}

/* Rows with the same id add into the same gradient row, so threads split the
 * columns, not the rows, in blocks of a fixed width: no two threads ever touch
 * the same element, and each element sums its rows in order (the same bits for
 * any thread count). */
void embedding_backward(float *dwte, const float *dout, const int32_t *ids, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += KERNELS_COLUMN_BLOCK) {
        int c1 = c0 + KERNELS_COLUMN_BLOCK < C ? c0 + KERNELS_COLUMN_BLOCK : C;
        for (int n = 0; n < N; n++) {
            float *d = dwte + (size_t)ids[n] * C;
            const float *g = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

/* embedding.c — token embedding lookup and its scatter-add backward. */
#include "kernels.h"

#include <omp.h>
#include <string.h>

void embedding_forward(float *out, const int32_t *ids, const float *wte, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)ids[n] * C, (size_t)C * sizeof(float));
}

/* Rows with the same id add into the same gradient row, so threads split the
 * columns, not the rows: no two threads ever touch the same element. */
void embedding_backward(float *dwte, const float *dout, const int32_t *ids, int N, int C)
{
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int c0 = (int)((long)C * t / nt), c1 = (int)((long)C * (t + 1) / nt);
        for (int n = 0; n < N; n++) {
            float *d = dwte + (size_t)ids[n] * C;
            const float *g = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

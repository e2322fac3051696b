/* rmsnorm.c — RMSNorm as LLaMA uses it: y = w * x / sqrt(mean(x^2) + eps).
 *   inp, out, dout, dinp [N, C]; weight, dweight [C]; rstd [N] saved. */
#include "kernels.h"

#include "elementwise.h"

#include <math.h>

void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                     int N, int C, float eps)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[n] = r;
        for (int c = 0; c < C; c++) y[c] = x[c] * r * weight[c];
    }
}

/* dx_i = r w_i dy_i - (r^3 / C) x_i sum_j dy_j w_j x_j;  dw_j += sum_n dy_nj x_nj r_n */
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                      const float *weight, const float *rstd, int N, int C)
{
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float r = rstd[n], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++) dot += dy[c] * weight[c] * x[c];
            float k = r * r * r * dot / (float)C;
            for (int c = 0; c < C; c++) dx[c] += r * weight[c] * dy[c] - k * x[c];
        }
        /* Blocks of columns of dweight, each summed over n in order by one
         * thread: no atomics, no scratch, and block bounds that do not depend
         * on the thread count. */
#pragma omp for schedule(static)
        for (int c0 = 0; c0 < C; c0 += KERNELS_COLUMN_BLOCK) {
            int c1 = c0 + KERNELS_COLUMN_BLOCK < C ? c0 + KERNELS_COLUMN_BLOCK : C;
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
                float r = rstd[n];
                for (int c = c0; c < c1; c++) dweight[c] += dy[c] * x[c] * r;
            }
        }
    }
}

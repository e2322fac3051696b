/* swiglu.c — the gated MLP nonlinearity h = silu(gate) * up.
 *   gu, dgu [N, 2F] with per row [gate (F) | up (F)]; h, dh [N, F] */
#include "kernels.h"

#include "elementwise.h"

void swiglu_forward(float *h, const float *gu, int N, int F)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F;
        float *o = h + (size_t)n * F;
#pragma omp simd
        for (int i = 0; i < F; i++) o[i] = g[i] * kernels_sigmoidf(g[i]) * u[i];
    }
}

/* d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g) */
void swiglu_backward(float *dgu, const float *dh, const float *gu, int N, int F)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F, *d = dh + (size_t)n * F;
        float *dg = dgu + (size_t)n * 2 * F, *du = dg + F;
#pragma omp simd
        for (int i = 0; i < F; i++) {
            float s = kernels_sigmoidf(g[i]);
            dg[i] += d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
            du[i] += d[i] * g[i] * s;
        }
    }
}

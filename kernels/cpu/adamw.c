/* adamw.c — AdamW (decoupled weight decay, bias correction) as
 * torch.optim.AdamW, and the squared gradient norm for global clipping. */
#include "kernels.h"

#include <math.h>

/* Blocks of a size fixed by n alone, each summed by one thread, then the
 * block sums in order: the same bits for any thread count. */
#define SUMSQ_MAX_BLOCKS 256
#define SUMSQ_MIN_BLOCK 4096

double grad_sumsq(const float *g, size_t n)
{
    double part[SUMSQ_MAX_BLOCKS];
    size_t nb = (n + SUMSQ_MIN_BLOCK - 1) / SUMSQ_MIN_BLOCK;
    if (nb > SUMSQ_MAX_BLOCKS) nb = SUMSQ_MAX_BLOCKS;
    if (nb == 0) return 0.0;
    size_t bs = (n + nb - 1) / nb;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * bs, i1 = i0 + bs < n ? i0 + bs : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += (double)g[i] * (double)g[i];
        part[b] = s;
    }
    double s = 0.0;
    for (size_t b = 0; b < nb; b++) s += part[b];
    return s;
}

void adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t,
                  float grad_scale)
{
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    float step = lr / bc1, rbc2 = 1.0f / sqrtf(bc2), decay = 1.0f - lr * weight_decay;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        p[i] = p[i] * decay - step * m[i] / (sqrtf(v[i]) * rbc2 + eps);
    }
}

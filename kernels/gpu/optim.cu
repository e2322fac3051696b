/* optim.cu — AdamW and the squared gradient norm, the semantics of
 * kernels/cpu/adamw.c (torch.optim.AdamW: grad_scale multiplies g first,
 * decoupled weight decay, bias correction with step t). */
#include "internal.h"

#include <math.h>

/* SN_SUMSQ_BLOCKS blocks, a fixed grid-stride split: each block's double
 * partial sum by a fixed tree into part[block]. */
static __global__ __launch_bounds__(SN_THREADS) void sumsq_partial_kernel(double *part,
                                                                          const float *g, size_t n)
{
    __shared__ double sh[SN_THREADS];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * SN_THREADS + threadIdx.x; i < n;
         i += (size_t)SN_SUMSQ_BLOCKS * SN_THREADS) {
        double x = (double)g[i];
        s += x * x;
    }
    s = sn_block_sum_double(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

/* One thread: the partial sums in block order. */
static __global__ void sumsq_total_kernel(sn_result *res, const double *part)
{
    double s = 0.0;
    for (int b = 0; b < SN_SUMSQ_BLOCKS; b++) s += part[b];
    res->total = s;
    res->kept = 0;
}

double sn_grad_sumsq(void *ctx, const float *g, size_t n)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c)) return NAN; /* the kept error says why */
    if (n == 0) return 0.0;
    sumsq_partial_kernel<<<SN_SUMSQ_BLOCKS, SN_THREADS, 0, c->stream>>>(c->d_part, g, n);
    sn_launched(c, "grad_sumsq");
    sumsq_total_kernel<<<1, 1, 0, c->stream>>>(c->d_res, c->d_part);
    sn_launched(c, "grad_sumsq total");
    sn_result r;
    if (c->failed || sn_fetch_result(c, &r)) return NAN;
    return r.total;
}

static __global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                    float beta1, float beta2, float eps, float step, float rbc2,
                                    float decay, float grad_scale)
{
    SN_GRID_STRIDE(i, n)
    {
        float gi = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * rbc2 + eps);
    }
}

void sn_adamw_update(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int t,
                     float grad_scale)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || n == 0) return;
    /* the scalars exactly as adamw.c computes them, on the host */
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    float step = lr / bc1, rbc2 = 1.0f / sqrtf(bc2), decay = 1.0f - lr * weight_decay;
    adamw_kernel<<<sn_blocks(n, SN_THREADS), SN_THREADS, 0, c->stream>>>(
        p, g, m, v, n, beta1, beta2, eps, step, rbc2, decay, grad_scale);
    sn_launched(c, "adamw_update");
}

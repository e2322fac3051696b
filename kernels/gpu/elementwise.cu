/* elementwise.cu — embedding, RMSNorm, RoPE, SwiGLU, zero and add: the
 * semantics of kernels/cpu/{embedding,rmsnorm,rope,swiglu,util}.c, with the
 * same expressions in the same order where the CPU fixes one. */
#include "internal.h"

#define EW_THREADS 256
/* rows of one block of rmsnorm's dweight partial sums */
#define DW_ROWS 128

/* ---- embedding ----------------------------------------------------------- */

static __global__ void embedding_forward_kernel(float *out, const int32_t *ids, const float *wte,
                                                int C, size_t total)
{
    SN_GRID_STRIDE(i, total)
    {
        size_t n = i / (size_t)C, col = i % (size_t)C;
        out[i] = wte[(size_t)ids[n] * C + col];
    }
}

/* rows with the same id meet in one gradient row: atomic adds */
static __global__ void embedding_backward_kernel(float *dwte, const float *dout, const int32_t *ids,
                                                 int C, size_t total)
{
    SN_GRID_STRIDE(i, total)
    {
        size_t n = i / (size_t)C, col = i % (size_t)C;
        atomicAdd(dwte + (size_t)ids[n] * C + col, dout[i]);
    }
}

void sn_embedding_forward(void *ctx, float *out, const int32_t *ids, const float *wte, int N, int C)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || N <= 0 || C <= 0) return;
    size_t total = (size_t)N * C;
    embedding_forward_kernel<<<sn_blocks(total, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        out, ids, wte, C, total);
    sn_launched(c, "embedding_forward");
}

void sn_embedding_backward(void *ctx, float *dwte, const float *dout, const int32_t *ids, int N,
                           int C)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || N <= 0 || C <= 0) return;
    size_t total = (size_t)N * C;
    embedding_backward_kernel<<<sn_blocks(total, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        dwte, dout, ids, C, total);
    sn_launched(c, "embedding_backward");
}

/* ---- RMSNorm: one block per row ------------------------------------------ */

static __global__ __launch_bounds__(SN_THREADS) void rmsnorm_forward_kernel(float *out, float *rstd,
                                                                            const float *inp,
                                                                            const float *weight,
                                                                            int C, float eps)
{
    __shared__ float slots[SN_MAX_WARPS];
    const float *x = inp + (size_t)blockIdx.x * C;
    float *y = out + (size_t)blockIdx.x * C;
    float ss = 0.0f;
    for (int i = (int)threadIdx.x; i < C; i += (int)blockDim.x) ss += x[i] * x[i];
    ss = sn_block_sum(ss, slots);
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int i = (int)threadIdx.x; i < C; i += (int)blockDim.x) y[i] = x[i] * r * weight[i];
}

/* dx_i += r w_i dy_i - (r^3 / C) x_i sum_j dy_j w_j x_j */
static __global__ __launch_bounds__(SN_THREADS) void rmsnorm_backward_dinp_kernel(
    float *dinp, const float *dout, const float *inp, const float *weight, const float *rstd, int C)
{
    __shared__ float slots[SN_MAX_WARPS];
    size_t off = (size_t)blockIdx.x * C;
    const float *x = inp + off, *dy = dout + off;
    float *dx = dinp + off;
    float r = rstd[blockIdx.x], dot = 0.0f;
    for (int i = (int)threadIdx.x; i < C; i += (int)blockDim.x) dot += dy[i] * weight[i] * x[i];
    dot = sn_block_sum(dot, slots);
    float k = r * r * r * dot / (float)C;
    for (int i = (int)threadIdx.x; i < C; i += (int)blockDim.x)
        dx[i] += r * weight[i] * dy[i] - k * x[i];
}

/* dweight_c += sum_n dy_nc x_nc r_n: block (column chunk, DW_ROWS rows),
 * one column per thread summed over its rows, then one atomic add. */
static __global__ void rmsnorm_backward_dweight_kernel(float *dweight, const float *dout,
                                                       const float *inp, const float *rstd, int N,
                                                       int C)
{
    int col = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (col >= C) return;
    int n0 = (int)blockIdx.y * DW_ROWS, n1 = n0 + DW_ROWS < N ? n0 + DW_ROWS : N;
    float s = 0.0f;
    for (int n = n0; n < n1; n++) {
        size_t i = (size_t)n * C + col;
        s += dout[i] * inp[i] * rstd[n];
    }
    atomicAdd(dweight + col, s);
}

void sn_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp, const float *weight,
                        int N, int C, float eps)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || N <= 0 || C <= 0) return;
    rmsnorm_forward_kernel<<<(unsigned)N, SN_THREADS, 0, c->stream>>>(out, rstd, inp, weight, C,
                                                                      eps);
    sn_launched(c, "rmsnorm_forward");
}

void sn_rmsnorm_backward(void *ctx, float *dinp, float *dweight, const float *dout,
                         const float *inp, const float *weight, const float *rstd, int N, int C)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || N <= 0 || C <= 0) return;
    rmsnorm_backward_dinp_kernel<<<(unsigned)N, SN_THREADS, 0, c->stream>>>(dinp, dout, inp, weight,
                                                                            rstd, C);
    sn_launched(c, "rmsnorm_backward dinp");
    unsigned chunks = (unsigned)((N + DW_ROWS - 1) / DW_ROWS);
    if (chunks > 65535u) {
        sn_fail(c, "rmsnorm_backward", "too many rows for the dweight grid");
        return;
    }
    dim3 grid((unsigned)((C + EW_THREADS - 1) / EW_THREADS), chunks);
    rmsnorm_backward_dweight_kernel<<<grid, EW_THREADS, 0, c->stream>>>(dweight, dout, inp, rstd, N,
                                                                        C);
    sn_launched(c, "rmsnorm_backward dweight");
}

/* ---- RoPE: one thread per rotated pair ----------------------------------- */

/* sign = +1 rotates forward; -1 applies the transpose (the backward). */
static __global__ void rope_kernel(float *x, const float *cos_tab, const float *sin_tab, int T,
                                   int nheads, int HD, int ld, float sign, size_t total)
{
    int h = HD / 2;
    SN_GRID_STRIDE(e, total)
    {
        size_t i = e % (size_t)h, rest = e / (size_t)h;
        size_t hd = rest % (size_t)nheads, n = rest / (size_t)nheads;
        size_t t = n % (size_t)T;
        float cs = cos_tab[t * h + i], s = sign * sin_tab[t * h + i];
        float *v = x + n * (size_t)ld + hd * (size_t)HD;
        float a = v[i], b = v[i + h];
        v[i] = a * cs - b * s;
        v[i + h] = b * cs + a * s;
    }
}

static void rope_launch(sn_ctx *c, float *x, const float *cos_tab, const float *sin_tab, int N,
                        int T, int nheads, int HD, int ld, float sign, const char *what)
{
    if (sn_enter(c) || N <= 0 || T <= 0 || nheads <= 0 || HD < 2) return;
    size_t total = (size_t)N * nheads * (HD / 2);
    rope_kernel<<<sn_blocks(total, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        x, cos_tab, sin_tab, T, nheads, HD, ld, sign, total);
    sn_launched(c, what);
}

void sn_rope_forward(void *ctx, float *x, const float *cos_tab, const float *sin_tab, int N, int T,
                     int nheads, int HD, int ld)
{
    rope_launch((sn_ctx *)ctx, x, cos_tab, sin_tab, N, T, nheads, HD, ld, 1.0f, "rope_forward");
}

void sn_rope_backward(void *ctx, float *dx, const float *cos_tab, const float *sin_tab, int N,
                      int T, int nheads, int HD, int ld)
{
    rope_launch((sn_ctx *)ctx, dx, cos_tab, sin_tab, N, T, nheads, HD, ld, -1.0f, "rope_backward");
}

/* ---- SwiGLU -------------------------------------------------------------- */

static __device__ __forceinline__ float sn_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

static __global__ void swiglu_forward_kernel(float *h, const float *gu, int F, size_t total)
{
    SN_GRID_STRIDE(e, total)
    {
        size_t n = e / (size_t)F, i = e % (size_t)F;
        const float *g = gu + n * 2 * (size_t)F;
        float gi = g[i];
        h[e] = gi * sn_sigmoid(gi) * g[i + F];
    }
}

/* d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g) */
static __global__ void swiglu_backward_kernel(float *dgu, const float *dh, const float *gu, int F,
                                              size_t total)
{
    SN_GRID_STRIDE(e, total)
    {
        size_t n = e / (size_t)F, i = e % (size_t)F;
        const float *g = gu + n * 2 * (size_t)F;
        float *dg = dgu + n * 2 * (size_t)F;
        float gi = g[i], ui = g[i + F], d = dh[e], s = sn_sigmoid(gi);
        dg[i] += d * ui * s * (1.0f + gi * (1.0f - s));
        dg[i + F] += d * gi * s;
    }
}

void sn_swiglu_forward(void *ctx, float *h, const float *gu, int N, int F)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || N <= 0 || F <= 0) return;
    size_t total = (size_t)N * F;
    swiglu_forward_kernel<<<sn_blocks(total, EW_THREADS), EW_THREADS, 0, c->stream>>>(h, gu, F,
                                                                                      total);
    sn_launched(c, "swiglu_forward");
}

void sn_swiglu_backward(void *ctx, float *dgu, const float *dh, const float *gu, int N, int F)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || N <= 0 || F <= 0) return;
    size_t total = (size_t)N * F;
    swiglu_backward_kernel<<<sn_blocks(total, EW_THREADS), EW_THREADS, 0, c->stream>>>(dgu, dh, gu,
                                                                                       F, total);
    sn_launched(c, "swiglu_backward");
}

/* ---- helpers ------------------------------------------------------------- */

static __global__ void add_kernel(float *y, const float *x, size_t n)
{
    SN_GRID_STRIDE(i, n) y[i] += x[i];
}

void sn_zero(void *ctx, float *x, size_t n)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || n == 0) return;
    sn_check(c, cudaMemsetAsync(x, 0, n * sizeof(float), c->stream), "zero");
}

void sn_add(void *ctx, float *y, const float *x, size_t n)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || n == 0) return;
    add_kernel<<<sn_blocks(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(y, x, n);
    sn_launched(c, "add");
}

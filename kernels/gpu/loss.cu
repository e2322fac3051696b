/* loss.cu — softmax cross-entropy with ignore index, the semantics of
 * kernels/cpu/crossentropy.c: the forward turns logits into probabilities in
 * place, writes each row's loss (0 for ignored rows) and returns the sum of
 * the kept losses in double with their count (it waits for the device); the
 * backward OVERWRITES dlogits = scale * (probs - onehot) for kept rows, 0
 * for ignored ones. */
#include "internal.h"

/* One block per row. The label's logit is read (thread 0) before the first
 * barrier of the max reduction, so before any thread overwrites it. */
static __global__ __launch_bounds__(SN_THREADS) void ce_forward_kernel(float *x_all, float *losses,
                                                                       const int32_t *labels, int V)
{
    __shared__ float slots[SN_MAX_WARPS];
    __shared__ float xl_sh;
    float *x = x_all + (size_t)blockIdx.x * V;
    const int l = labels[blockIdx.x], ignore = l == KERNELS_IGNORE_INDEX;
    const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
    if (tid == 0) xl_sh = ignore ? 0.0f : x[l];
    float mx = -INFINITY;
    for (int i = tid; i < V; i += nt) mx = fmaxf(mx, x[i]);
    mx = sn_block_max(mx, slots);
    const float xl = xl_sh;
    float sum = 0.0f;
    for (int i = tid; i < V; i += nt) {
        float e = expf(x[i] - mx);
        x[i] = e;
        sum += e;
    }
    sum = sn_block_sum(sum, slots);
    const float inv = 1.0f / sum;
    for (int i = tid; i < V; i += nt) x[i] *= inv;
    /* the loss from the logit itself: log(sum) - (x[l] - max) */
    if (tid == 0) losses[blockIdx.x] = ignore ? 0.0f : logf(sum) - (xl - mx);
}

/* One block: the kept losses summed in double and counted, by a fixed
 * split of rows over threads and a fixed tree (the same bits every run). */
static __global__ __launch_bounds__(SN_THREADS) void ce_total_kernel(sn_result *res,
                                                                     const float *losses,
                                                                     const int32_t *labels, int N)
{
    __shared__ double sh[SN_THREADS];
    double s = 0.0, k = 0.0;
    for (int n = (int)threadIdx.x; n < N; n += SN_THREADS)
        if (labels[n] != KERNELS_IGNORE_INDEX) {
            s += (double)losses[n];
            k += 1.0;
        }
    s = sn_block_sum_double(s, sh);
    k = sn_block_sum_double(k, sh);
    if (threadIdx.x == 0) {
        res->total = s;
        res->kept = (int)k;
    }
}

static __global__ void ce_backward_kernel(float *dlogits, const float *probs, const int32_t *labels,
                                          int V, float scale, size_t total)
{
    SN_GRID_STRIDE(e, total)
    {
        size_t n = e / (size_t)V;
        int i = (int)(e % (size_t)V), l = labels[n];
        float d = 0.0f;
        if (l != KERNELS_IGNORE_INDEX) {
            d = scale * probs[e];
            if (i == l) d -= scale;
        }
        dlogits[e] = d;
    }
}

double sn_crossentropy_forward(void *ctx, float *probs_inplace, float *losses,
                               const int32_t *labels, int N, int V, int *kept)
{
    sn_ctx *c = (sn_ctx *)ctx;
    *kept = 0;
    if (sn_enter(c)) return NAN; /* the kept error says why */
    if (N <= 0 || V <= 0) return 0.0;
    ce_forward_kernel<<<(unsigned)N, SN_THREADS, 0, c->stream>>>(probs_inplace, losses, labels, V);
    sn_launched(c, "crossentropy_forward");
    ce_total_kernel<<<1, SN_THREADS, 0, c->stream>>>(c->d_res, losses, labels, N);
    sn_launched(c, "crossentropy_forward total");
    sn_result r;
    if (c->failed || sn_fetch_result(c, &r)) return NAN;
    *kept = r.kept;
    return r.total;
}

void sn_crossentropy_backward(void *ctx, float *dlogits, const float *probs, const int32_t *labels,
                              int N, int V, float scale)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c) || N <= 0 || V <= 0) return;
    size_t total = (size_t)N * V;
    ce_backward_kernel<<<sn_blocks(total, SN_THREADS), SN_THREADS, 0, c->stream>>>(
        dlogits, probs, labels, V, scale, total);
    sn_launched(c, "crossentropy_backward");
}

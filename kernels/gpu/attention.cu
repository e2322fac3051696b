/* attention.cu — causal self-attention with grouped-query heads, the
 * semantics of kernels/cpu/attention.c:
 *   qkv [B*T, ld], ld = (NH + 2*NKV) * HD, per row [q heads | k heads | v heads]
 *   out, dout [B*T, NH*HD]; att [B, NH, T, T] softmax probabilities, exact
 *   zeros above the diagonal; scale 1/sqrt(HD); query head h reads
 *   key/value head h / (NH / NKV).
 *
 * Straightforward, not fast: one block per (batch, head, query row) for the
 * forward and for dq; one block per (batch, kv head, key row) for dk and dv,
 * looping over the query heads of its group, so every gradient element has
 * exactly one writer (no atomics, no races). The backward keeps
 * dS = scale * P * (dP - rowsum(P * dP)) in scratch: B*NH*T*T floats.
 *
 * bf16 (sn_ctx.bf16): the operands of the products q.k, p.v and, backward,
 * dO.v, dS.k, p.dO, dS.q are rounded to bf16 where they are read (sums in
 * fp32); scores, softmax, dS and everything stored stay fp32. */
#include "internal.h"

#define ATT_THREADS 128 /* a multiple of 64 and 32 */

/* Block (b, h, i): p = softmax(scale * q_i . k_j, j <= i), zeros for j > i,
 * written to att's row; out_i = sum_j p_j v_j. The row lives in att itself
 * (global memory): any T fits. Each thread owns the same columns j in every
 * pass, and the barrier inside the reductions / before the product orders
 * the rest. */
static __global__ __launch_bounds__(ATT_THREADS) void attention_forward_kernel(
    float *out, float *att, const float *qkv, int T, int NH, int NKV, int HD, float scale,
    int bf16)
{
    extern __shared__ float q_sh[]; /* HD */
    __shared__ float slots[SN_MAX_WARPS];
    const size_t blk = blockIdx.x, bh = blk / (size_t)T;
    const int i = (int)(blk % (size_t)T), h = (int)(bh % (size_t)NH);
    const size_t b = bh / (size_t)NH;
    const int kvh = h / (NH / NKV), ld = (NH + 2 * NKV) * HD, C = NH * HD;
    const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
    const float *base = qkv + b * (size_t)T * ld;
    const float *q = base + (size_t)i * ld + (size_t)h * HD;
    const float *k = base + (size_t)(NH + kvh) * HD;
    const float *v = base + (size_t)(NH + NKV + kvh) * HD;
    float *p = att + (bh * (size_t)T + (size_t)i) * (size_t)T;

    for (int d = tid; d < HD; d += nt) q_sh[d] = sn_prod_in(q[d], bf16);
    __syncthreads();

    float mx = -INFINITY;
    for (int j = tid; j <= i; j += nt) {
        const float *kj = k + (size_t)j * ld;
        float s = 0.0f;
        for (int d = 0; d < HD; d++) s += q_sh[d] * sn_prod_in(kj[d], bf16);
        s *= scale;
        p[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = sn_block_max(mx, slots);
    float sum = 0.0f;
    for (int j = tid; j <= i; j += nt) {
        float e = expf(p[j] - mx);
        p[j] = e;
        sum += e;
    }
    sum = sn_block_sum(sum, slots);
    float inv = 1.0f / sum;
    for (int j = tid; j < T; j += nt) p[j] = j <= i ? p[j] * inv : 0.0f;
    __syncthreads(); /* the whole row, written by all, read by all */

    float *o = out + (b * (size_t)T + (size_t)i) * C + (size_t)h * HD;
    for (int d = tid; d < HD; d += nt) {
        float acc = 0.0f;
        for (int j = 0; j <= i; j++)
            acc += sn_prod_in(p[j], bf16) * sn_prod_in(v[(size_t)j * ld + d], bf16);
        o[d] = acc;
    }
}

/* Block (b, h, i): dP_ij = dO_i . v_j, D = sum_j P_ij dP_ij,
 * dS_ij = scale * P_ij (dP_ij - D) into scratch (j <= i), dq_i += sum_j dS_ij k_j. */
static __global__ __launch_bounds__(ATT_THREADS) void attention_backward_dq_kernel(
    float *dqkv, float *ds_all, const float *dout, const float *qkv, const float *att, int T,
    int NH, int NKV, int HD, float scale, int bf16)
{
    extern __shared__ float do_sh[]; /* HD */
    __shared__ float slots[SN_MAX_WARPS];
    const size_t blk = blockIdx.x, bh = blk / (size_t)T;
    const int i = (int)(blk % (size_t)T), h = (int)(bh % (size_t)NH);
    const size_t b = bh / (size_t)NH;
    const int kvh = h / (NH / NKV), ld = (NH + 2 * NKV) * HD, C = NH * HD;
    const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
    const float *base = qkv + b * (size_t)T * ld;
    const float *k = base + (size_t)(NH + kvh) * HD;
    const float *v = base + (size_t)(NH + NKV + kvh) * HD;
    const float *dO = dout + (b * (size_t)T + (size_t)i) * C + (size_t)h * HD;
    const size_t row = (bh * (size_t)T + (size_t)i) * (size_t)T;
    const float *p = att + row;
    float *ds = ds_all + row;

    for (int d = tid; d < HD; d += nt) do_sh[d] = sn_prod_in(dO[d], bf16);
    __syncthreads();

    float dot = 0.0f;
    for (int j = tid; j <= i; j += nt) {
        const float *vj = v + (size_t)j * ld;
        float dp = 0.0f;
        for (int d = 0; d < HD; d++) dp += do_sh[d] * sn_prod_in(vj[d], bf16);
        ds[j] = dp;
        dot += p[j] * dp;
    }
    dot = sn_block_sum(dot, slots);
    for (int j = tid; j <= i; j += nt) ds[j] = scale * (p[j] * (ds[j] - dot));
    __syncthreads(); /* dS row complete for every thread */

    float *dq = dqkv + (b * (size_t)T + (size_t)i) * ld + (size_t)h * HD;
    for (int d = tid; d < HD; d += nt) {
        float acc = 0.0f;
        for (int j = 0; j <= i; j++)
            acc += sn_prod_in(ds[j], bf16) * sn_prod_in(k[(size_t)j * ld + d], bf16);
        dq[d] += acc;
    }
}

/* Block (b, kvh, j): over the group's query heads h and rows i >= j,
 * dv_j += sum P_hij dO_hi, dk_j += sum dS_hij q_hi. One writer per element. */
static __global__ __launch_bounds__(ATT_THREADS) void attention_backward_dkv_kernel(
    float *dqkv, const float *ds_all, const float *dout, const float *qkv, const float *att, int T,
    int NH, int NKV, int HD, int bf16)
{
    const size_t blk = blockIdx.x, bk = blk / (size_t)T;
    const int j = (int)(blk % (size_t)T), kvh = (int)(bk % (size_t)NKV);
    const size_t b = bk / (size_t)NKV;
    const int group = NH / NKV, ld = (NH + 2 * NKV) * HD, C = NH * HD;
    const size_t rowbase = b * (size_t)T * ld;
    float *dk = dqkv + rowbase + (size_t)j * ld + (size_t)(NH + kvh) * HD;
    float *dv = dqkv + rowbase + (size_t)j * ld + (size_t)(NH + NKV + kvh) * HD;
    for (int d = (int)threadIdx.x; d < HD; d += (int)blockDim.x) {
        float accv = 0.0f, acck = 0.0f;
        for (int h = kvh * group; h < (kvh + 1) * group; h++) {
            const size_t plane = (b * (size_t)NH + (size_t)h) * (size_t)T * (size_t)T;
            const float *p = att + plane + (size_t)j, *ds = ds_all + plane + (size_t)j;
            const float *q = qkv + rowbase + (size_t)h * HD + d;
            const float *dO = dout + b * (size_t)T * C + (size_t)h * HD + d;
            for (int i = j; i < T; i++) {
                float pi = sn_prod_in(p[(size_t)i * T], bf16);
                float dsi = sn_prod_in(ds[(size_t)i * T], bf16);
                accv += pi * sn_prod_in(dO[(size_t)i * C], bf16);
                acck += dsi * sn_prod_in(q[(size_t)i * ld], bf16);
            }
        }
        dv[d] += accv;
        dk[d] += acck;
    }
}

size_t sn_attention_scratch_floats(void *ctx, int B, int T, int NH, int HD)
{
    (void)ctx;
    (void)HD;
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    return (size_t)B * NH * T * T;
}

/* The (batch, head, query row) blocks both passes launch; 0 when there is
 * nothing to do or the shapes are refused (the error kept in c). */
static unsigned att_blocks(sn_ctx *c, int B, int T, int NH, int NKV, int HD, const char *what)
{
    if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0) return 0; /* nothing to do */
    if (NKV <= 0 || NH % NKV != 0) {
        sn_fail(c, what, "NH must be a positive multiple of NKV");
        return 0;
    }
    if ((size_t)HD * sizeof(float) > 32768) {
        sn_fail(c, what, "head dimension too large (shared memory)");
        return 0;
    }
    size_t blocks = (size_t)B * NH * T;
    if (blocks > 0x7fffffffu) {
        sn_fail(c, what, "too many (batch, head, row) blocks");
        return 0;
    }
    return (unsigned)blocks;
}

void sn_attention_forward(void *ctx, float *out, float *att, const float *qkv, int B, int T, int NH,
                          int NKV, int HD)
{
    sn_ctx *c = (sn_ctx *)ctx;
    unsigned blocks;
    if (sn_enter(c) || !(blocks = att_blocks(c, B, T, NH, NKV, HD, "attention_forward"))) return;
    float scale = 1.0f / sqrtf((float)HD);
    attention_forward_kernel<<<blocks, ATT_THREADS, (size_t)HD * sizeof(float),
                               c->stream>>>(out, att, qkv, T, NH, NKV, HD, scale, c->bf16);
    sn_launched(c, "attention_forward");
}

void sn_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                           const float *att, float *scratch, int B, int T, int NH, int NKV, int HD)
{
    sn_ctx *c = (sn_ctx *)ctx;
    unsigned blocks;
    if (sn_enter(c) || !(blocks = att_blocks(c, B, T, NH, NKV, HD, "attention_backward")))
        return;
    float scale = 1.0f / sqrtf((float)HD);
    attention_backward_dq_kernel<<<blocks, ATT_THREADS, (size_t)HD * sizeof(float),
                                   c->stream>>>(dqkv, scratch, dout, qkv, att, T, NH, NKV, HD,
                                                scale, c->bf16);
    sn_launched(c, "attention_backward dq");
    /* stream order: every dS row is complete before dk, dv read its columns */
    attention_backward_dkv_kernel<<<(unsigned)((size_t)B * NKV * T), ATT_THREADS, 0, c->stream>>>(
        dqkv, scratch, dout, qkv, att, T, NH, NKV, HD, c->bf16);
    sn_launched(c, "attention_backward dk dv");
}

/* internal.h — what the .cu files of kernels/gpu/ share: the context, the
 * error keeping, launch sizes, block reductions and the operations the table
 * in backend.cu points at. Nothing here is exported from the shared object
 * (SN_HIDDEN, besides -fvisibility=hidden). */
#ifndef SHARDNODE_GPU_INTERNAL_H
#define SHARDNODE_GPU_INTERNAL_H

#include "compat.h"
#include "kdev_backend.h"

#include <stddef.h>
#include <stdint.h>

#define SN_HIDDEN __attribute__((visibility("hidden")))

/* Partial sums of grad_sumsq: a fixed count, so the order of the final sum
 * (one thread, in block order) never depends on the device. */
#define SN_SUMSQ_BLOCKS 256
/* Threads of the row kernels and the reductions: a multiple of 64 and 32. */
#define SN_THREADS 256

/* What the value-returning operations bring back to the host. */
typedef struct sn_result {
    double total;
    int kept;
    int unused;
} sn_result;

typedef struct sn_ctx {
    int device;
    cudaStream_t stream;
#ifdef SN_BLAS
    cublasHandle_t blas;
#endif
    int own_gemm; /* 1: the tiled kernel of gemm.cu; 0: the vendor BLAS */
    int bf16;     /* 1: matrix products take bf16-rounded inputs (fp32 sums) */
#ifdef SN_BLAS_BF16
    /* bf16 copies of the BLAS path's two operands, grown on demand */
    uint16_t *bf_a, *bf_b;
    size_t bf_a_n, bf_b_n; /* their sizes in elements */
#endif
    int failed;   /* an error is kept in err: the context is unusable */
    char err[512];
    double *d_part;   /* SN_SUMSQ_BLOCKS partial sums */
    sn_result *d_res; /* device side of the returned values */
    sn_result *h_res; /* page-locked host copy */
} sn_ctx;

/* Keeps the first error ("what: msg"); later ones are dropped. */
SN_HIDDEN void sn_fail(sn_ctx *c, const char *what, const char *msg);
/* 0 when e is cudaSuccess, else keeps it and returns -1. */
SN_HIDDEN int sn_check(sn_ctx *c, cudaError_t e, const char *what);
/* Before an operation: -1 when the context already failed (nothing is
 * queued then), else makes its device current; 0 when work may go. */
SN_HIDDEN int sn_enter(sn_ctx *c);
/* After a launch: keeps the launch error, if any. */
SN_HIDDEN void sn_launched(sn_ctx *c, const char *what);

/* A grid-stride loop over [0, n) with a size_t index. */
#define SN_GRID_STRIDE(i, n)                                                                       \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* Blocks for a grid-stride loop over n items of `threads` each. */
static inline unsigned sn_blocks(size_t n, int threads)
{
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    const size_t cap = (size_t)1 << 20;
    return (unsigned)(b < cap ? (b ? b : 1) : cap);
}

/* x rounded to bf16 (round to nearest even; a NaN stays a quiet NaN) and
 * back to float: the same bits as the CPU's kernels_f32_to_bf16_n followed
 * by kernels_bf16_to_f32. Infinities stay, overflow rounds to infinity. */
static __device__ __forceinline__ uint16_t sn_bf16_bits(float x)
{
    unsigned b = __float_as_uint(x);
    if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu)) return (uint16_t)((b >> 16) | 0x40u);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

static __device__ __forceinline__ float sn_round_bf16(float x)
{
    return __uint_as_float((unsigned)sn_bf16_bits(x) << 16);
}

/* An operand of a matrix product: rounded to bf16 when bf16 is set. */
static __device__ __forceinline__ float sn_prod_in(float x, int bf16)
{
    return bf16 ? sn_round_bf16(x) : x;
}

/* ---- block reductions: blockDim.x a multiple of SN_WARP, at most
 * SN_MAX_BLOCK; every thread of the block calls them and gets the result.
 * slots: __shared__ float[SN_MAX_WARPS] of the caller, reusable at once (the
 * leading barrier keeps the previous call's readers safe). Warp partial sums
 * are added in warp order: the same bits on every run. */
static __device__ __forceinline__ float sn_warp_sum(float v)
{
    for (int o = SN_WARP / 2; o > 0; o >>= 1) v += sn_shfl_xor(v, o);
    return v;
}

static __device__ __forceinline__ float sn_warp_max(float v)
{
    for (int o = SN_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, sn_shfl_xor(v, o));
    return v;
}

static __device__ __forceinline__ float sn_block_sum(float v, float *slots)
{
    int lane = (int)threadIdx.x % SN_WARP, w = (int)threadIdx.x / SN_WARP;
    int nw = (int)blockDim.x / SN_WARP;
    v = sn_warp_sum(v);
    __syncthreads();
    if (lane == 0) slots[w] = v;
    __syncthreads();
    float r = 0.0f;
    for (int i = 0; i < nw; i++) r += slots[i];
    return r;
}

static __device__ __forceinline__ float sn_block_max(float v, float *slots)
{
    int lane = (int)threadIdx.x % SN_WARP, w = (int)threadIdx.x / SN_WARP;
    int nw = (int)blockDim.x / SN_WARP;
    v = sn_warp_max(v);
    __syncthreads();
    if (lane == 0) slots[w] = v;
    __syncthreads();
    float r = slots[0];
    for (int i = 1; i < nw; i++) r = fmaxf(r, slots[i]);
    return r;
}

/* Double sum over a block of exactly SN_THREADS threads through shared
 * memory (sh: __shared__ double[SN_THREADS]), by a fixed tree: every thread
 * gets the result; sh is reusable at once (leading barrier). */
static __device__ __forceinline__ double sn_block_sum_double(double v, double *sh)
{
    __syncthreads();
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = SN_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

/* ---- the operations (kdev_backend.h's signatures; ctx is an sn_ctx) ---- */
/* gemm.cu */
SN_HIDDEN void sn_matmul_forward(void *ctx, float *out, const float *inp, const float *weight,
                                 int N, int IC, int OC, int accumulate);
SN_HIDDEN void sn_matmul_backward(void *ctx, float *dinp, float *dweight, const float *dout,
                                  const float *inp, const float *weight, int N, int IC, int OC);
/* elementwise.cu */
SN_HIDDEN void sn_embedding_forward(void *ctx, float *out, const int32_t *ids, const float *wte,
                                    int N, int C);
SN_HIDDEN void sn_embedding_backward(void *ctx, float *dwte, const float *dout, const int32_t *ids,
                                     int N, int C);
SN_HIDDEN void sn_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp,
                                  const float *weight, int N, int C, float eps);
SN_HIDDEN void sn_rmsnorm_backward(void *ctx, float *dinp, float *dweight, const float *dout,
                                   const float *inp, const float *weight, const float *rstd, int N,
                                   int C);
SN_HIDDEN void sn_rope_forward(void *ctx, float *x, const float *cos_tab, const float *sin_tab,
                               int N, int T, int nheads, int HD, int ld);
SN_HIDDEN void sn_rope_backward(void *ctx, float *dx, const float *cos_tab, const float *sin_tab,
                                int N, int T, int nheads, int HD, int ld);
SN_HIDDEN void sn_swiglu_forward(void *ctx, float *h, const float *gu, int N, int F);
SN_HIDDEN void sn_swiglu_backward(void *ctx, float *dgu, const float *dh, const float *gu, int N,
                                  int F);
SN_HIDDEN void sn_zero(void *ctx, float *x, size_t n);
SN_HIDDEN void sn_add(void *ctx, float *y, const float *x, size_t n);
/* attention.cu */
SN_HIDDEN size_t sn_attention_scratch_floats(void *ctx, int B, int T, int NH, int HD);
SN_HIDDEN void sn_attention_forward(void *ctx, float *out, float *att, const float *qkv, int B,
                                    int T, int NH, int NKV, int HD);
SN_HIDDEN void sn_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                     const float *att, float *scratch, int B, int T, int NH,
                                     int NKV, int HD);
/* loss.cu */
SN_HIDDEN double sn_crossentropy_forward(void *ctx, float *probs_inplace, float *losses,
                                         const int32_t *labels, int N, int V, int *kept);
SN_HIDDEN void sn_crossentropy_backward(void *ctx, float *dlogits, const float *probs,
                                        const int32_t *labels, int N, int V, float scale);
/* optim.cu */
SN_HIDDEN double sn_grad_sumsq(void *ctx, const float *g, size_t n);
SN_HIDDEN void sn_adamw_update(void *ctx, float *p, const float *g, float *m, float *v, size_t n,
                               float lr, float beta1, float beta2, float eps, float weight_decay,
                               int t, float grad_scale);
/* backend.cu: waits for the stream and copies the result to the host;
 * 0, or -1 with the error kept. */
SN_HIDDEN int sn_fetch_result(sn_ctx *c, sn_result *out);

#endif

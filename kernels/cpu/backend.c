/* backend.c — the CPU as a kdev backend: the table of kdev_backend.h filled
 * with this folder's functions. Memory is host memory (64-byte aligned, as
 * the matrix kernels like it), copies are memcpy, there is nothing queued
 * (sync always succeeds) and there is one device, "cpu" (index 0), with
 * the threads kernels_set_threads gave it. */
#include "kdev_backend.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* Attention's scratch: one T x T slot per thread that may run it. The
 * thread cap can change between sizing and use (`shardnode set
 * --threads`), so size for the larger of the cap and the cores. */
static int cpu_slots(void) { return kernels_thread_slots(); }

static int cpu_count(char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    return 1;
}

static int cpu_info(int index, kdev_info *out, char *err, size_t errlen)
{
    if (index != 0) {
        snprintf(err, errlen, "the CPU backend has one device, cpu (index 0), not %d", index);
        return -1;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->vendor, sizeof out->vendor, "cpu");
    struct utsname u;
    snprintf(out->arch, sizeof out->arch, "%.31s", uname(&u) == 0 ? u.machine : "unknown");
    out->units = omp_get_num_procs();
    snprintf(out->name, sizeof out->name, "CPU, %d cores", out->units);
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    long page = sysconf(_SC_PAGE_SIZE);
    out->mem_total = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
    out->mem_free = avail > 0 && page > 0 ? (int64_t)avail * page : 0;
    return 0;
}

static int cpu_open(int index, void **ctx, char *err, size_t errlen)
{
    if (index != 0) {
        snprintf(err, errlen, "the CPU backend has one device, cpu (index 0), not %d", index);
        return -1;
    }
    *ctx = NULL;
    return 0;
}

static void cpu_close(void *ctx) { (void)ctx; }

static void *cpu_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    size_t n = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, n ? n : 64);
}

static void cpu_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

static int cpu_sync(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    (void)err;
    (void)errlen;
    return 0;
}

/* The CPU's matrix kernel is chosen at start (kernels_gemm_name): "blas"
 * names it; "own" is the GPU backends' tiled kernel, which the CPU has not. */
static int cpu_set_gemm(void *ctx, const char *which)
{
    (void)ctx;
    return strcmp(which, "blas") == 0 ? 0 : -1;
}

static const char *cpu_gemm_name(void *ctx)
{
    (void)ctx;
    return kernels_gemm_name();
}

/* The CPU computes in fp32 (its determinism promise is fp32's). */
static int cpu_set_precision(void *ctx, int bf16)
{
    (void)ctx;
    return bf16 ? -1 : 0;
}

#define UNUSED_CTX (void)ctx

static void cpu_matmul_forward(void *ctx, float *out, const float *inp, const float *weight,
                               int N, int IC, int OC, int accumulate)
{
    UNUSED_CTX;
    matmul_forward(out, inp, weight, N, IC, OC, accumulate);
}

static void cpu_matmul_backward(void *ctx, float *dinp, float *dweight, const float *dout,
                                const float *inp, const float *weight, int N, int IC, int OC)
{
    UNUSED_CTX;
    matmul_backward(dinp, dweight, dout, inp, weight, N, IC, OC);
}

static void cpu_embedding_forward(void *ctx, float *out, const int32_t *ids, const float *wte,
                                  int N, int C)
{
    UNUSED_CTX;
    embedding_forward(out, ids, wte, N, C);
}

static void cpu_embedding_backward(void *ctx, float *dwte, const float *dout, const int32_t *ids,
                                   int N, int C)
{
    UNUSED_CTX;
    embedding_backward(dwte, dout, ids, N, C);
}

static void cpu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp,
                                const float *weight, int N, int C, float eps)
{
    UNUSED_CTX;
    rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}

static void cpu_rmsnorm_backward(void *ctx, float *dinp, float *dweight, const float *dout,
                                 const float *inp, const float *weight, const float *rstd,
                                 int N, int C)
{
    UNUSED_CTX;
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
}

static void cpu_rope_forward(void *ctx, float *x, const float *cos_tab, const float *sin_tab,
                             int N, int T, int nheads, int HD, int ld)
{
    UNUSED_CTX;
    rope_forward(x, cos_tab, sin_tab, N, T, nheads, HD, ld);
}

static void cpu_rope_backward(void *ctx, float *dx, const float *cos_tab, const float *sin_tab,
                              int N, int T, int nheads, int HD, int ld)
{
    UNUSED_CTX;
    rope_backward(dx, cos_tab, sin_tab, N, T, nheads, HD, ld);
}

static size_t cpu_attention_scratch(void *ctx, int B, int T, int NH, int HD)
{
    UNUSED_CTX;
    (void)B;
    (void)NH;
    (void)HD;
    return attention_scratch_floats(T) * (size_t)cpu_slots();
}

static void cpu_attention_forward(void *ctx, float *out, float *att, const float *qkv, int B,
                                  int T, int NH, int NKV, int HD)
{
    UNUSED_CTX;
    attention_forward(out, att, qkv, B, T, NH, NKV, HD);
}

static void cpu_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                   const float *att, float *scratch, int B, int T, int NH,
                                   int NKV, int HD)
{
    UNUSED_CTX;
    attention_backward(dqkv, dout, qkv, att, scratch, cpu_slots(), B, T, NH, NKV, HD);
}

static void cpu_swiglu_forward(void *ctx, float *h, const float *gu, int N, int F)
{
    UNUSED_CTX;
    swiglu_forward(h, gu, N, F);
}

static void cpu_swiglu_backward(void *ctx, float *dgu, const float *dh, const float *gu, int N,
                                int F)
{
    UNUSED_CTX;
    swiglu_backward(dgu, dh, gu, N, F);
}

static double cpu_ce_forward(void *ctx, float *probs, float *losses, const int32_t *labels,
                             int N, int V, int *kept)
{
    UNUSED_CTX;
    return crossentropy_forward(probs, losses, labels, N, V, kept);
}

static void cpu_ce_backward(void *ctx, float *dlogits, const float *probs,
                            const int32_t *labels, int N, int V, float scale)
{
    UNUSED_CTX;
    crossentropy_backward(dlogits, probs, labels, N, V, scale);
}

static double cpu_grad_sumsq(void *ctx, const float *g, size_t n)
{
    UNUSED_CTX;
    return grad_sumsq(g, n);
}

static void cpu_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                      float grad_scale)
{
    UNUSED_CTX;
    adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}

static void cpu_zero(void *ctx, float *x, size_t n)
{
    UNUSED_CTX;
    kernels_zero(x, n);
}

static void cpu_add(void *ctx, float *y, const float *x, size_t n)
{
    UNUSED_CTX;
    kernels_add(y, x, n);
}

static const kdev_backend cpu_backend = {
    .abi = KDEV_ABI,
    .vendor = "cpu",
    .count = cpu_count,
    .info = cpu_info,
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .set_gemm = cpu_set_gemm,
    .gemm_name = cpu_gemm_name,
    .set_precision = cpu_set_precision,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .attention_scratch_floats = cpu_attention_scratch,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .crossentropy_forward = cpu_ce_forward,
    .crossentropy_backward = cpu_ce_backward,
    .grad_sumsq = cpu_grad_sumsq,
    .adamw_update = cpu_adamw,
    .zero = cpu_zero,
    .add = cpu_add,
};

const kdev_backend *kdev_cpu_backend(void) { return &cpu_backend; }

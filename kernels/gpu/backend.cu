/* backend.cu — the GPU backend's table (kdev_backend.h): devices, contexts,
 * memory, copies, the first error kept, the GEMM choice, the precision of
 * the matrix products. The operations live in the other .cu files of this
 * folder. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------ */

void sn_fail(sn_ctx *c, const char *what, const char *msg)
{
    if (c->failed) return;
    c->failed = 1;
    snprintf(c->err, sizeof c->err, "%s device %d: %s: %s", SN_VENDOR, c->device, what, msg);
}

int sn_check(sn_ctx *c, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 0;
    sn_fail(c, what, cudaGetErrorString(e));
    return -1;
}

int sn_enter(sn_ctx *c)
{
    if (c->failed) return -1;
    return sn_check(c, cudaSetDevice(c->device), "cudaSetDevice");
}

void sn_launched(sn_ctx *c, const char *what)
{
    sn_check(c, cudaGetLastError(), what);
}

static void put_err(char *err, size_t errlen, const char *what, cudaError_t e)
{
    if (err && errlen) snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
}

/* ---- devices ----------------------------------------------------------- */

static int gpu_count(char *err, size_t errlen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice) {
        (void)cudaGetLastError();
        return 0;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        put_err(err, errlen, SN_VENDOR " runtime", e);
        return -1;
    }
    return n;
}

/* src up to `stop` (or its end), cut to fit dst:
 * copy_upto(.., "gfx90a:sramecc+:xnack-", ':') -> "gfx90a" */
static void copy_upto(char *dst, size_t len, const char *src, char stop)
{
    size_t i = 0;
    for (; src[i] && src[i] != stop && i + 1 < len; i++) dst[i] = src[i];
    dst[i] = 0;
}

static int gpu_info(int index, kdev_info *out, char *err, size_t errlen)
{
    int n = gpu_count(err, errlen);
    if (n < 0) return -1;
    if (index < 0 || index >= n) {
        if (err && errlen) snprintf(err, errlen, "%s: no device %d (%d seen)", SN_VENDOR, index, n);
        return -1;
    }
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, index);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        put_err(err, errlen, "cudaGetDeviceProperties", e);
        return -1;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->vendor, sizeof out->vendor, "%s", SN_VENDOR);
    copy_upto(out->name, sizeof out->name, prop.name, 0);
#ifdef SN_HIP
    copy_upto(out->arch, sizeof out->arch, prop.gcnArchName, ':');
#else
    snprintf(out->arch, sizeof out->arch, "sm_%d%d", prop.major, prop.minor);
#endif
    int v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess) {
#ifdef SN_HIP
        /* HIP_VERSION encoding: major * 10^7 + minor * 10^5 + patch */
        snprintf(out->driver, sizeof out->driver, "%d.%d", v / 10000000, v / 100000 % 100);
#else
        snprintf(out->driver, sizeof out->driver, "%d.%d", v / 1000, v % 1000 / 10);
#endif
    }
    (void)cudaGetLastError();
    out->units = prop.multiProcessorCount;
    out->warp = prop.warpSize;
    /* memory: needs the device current (and its context made); put back
     * the caller's current device afterwards */
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    e = cudaSetDevice(index);
    size_t fr = 0, tot = 0;
    if (e == cudaSuccess) e = cudaMemGetInfo(&fr, &tot);
    if (prev >= 0 && prev != index) (void)cudaSetDevice(prev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        put_err(err, errlen, "cudaMemGetInfo", e);
        return -1;
    }
    out->mem_total = (int64_t)tot;
    out->mem_free = (int64_t)fr;
    return 0;
}

/* ---- contexts ---------------------------------------------------------- */

static void gpu_close(void *ctx);

static int gpu_open(int index, void **ctx, char *err, size_t errlen)
{
    *ctx = NULL;
    int n = gpu_count(err, errlen);
    if (n < 0) return -1;
    if (index < 0 || index >= n) {
        if (err && errlen) snprintf(err, errlen, "%s: no device %d (%d seen)", SN_VENDOR, index, n);
        return -1;
    }
    sn_ctx *c = (sn_ctx *)calloc(1, sizeof *c);
    if (!c) {
        if (err && errlen) snprintf(err, errlen, "%s: out of host memory", SN_VENDOR);
        return -1;
    }
    c->device = index;
    const char *what = "cudaSetDevice";
    cudaError_t e = cudaSetDevice(index);
    if (e == cudaSuccess) {
        what = "cudaStreamCreate";
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    }
    if (e == cudaSuccess) {
        what = "cudaMalloc";
        e = cudaMalloc((void **)&c->d_part, SN_SUMSQ_BLOCKS * sizeof(double));
    }
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_res, sizeof(sn_result));
    if (e == cudaSuccess) {
        what = "cudaMallocHost";
        e = cudaMallocHost((void **)&c->h_res, sizeof(sn_result));
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        put_err(err, errlen, what, e);
        gpu_close(c);
        return -1;
    }
#ifdef SN_BLAS
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(c->blas, c->stream);
#ifndef SN_HIP
    /* plain fp32 arithmetic: no TF32 tensor cores */
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
#endif
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (err && errlen)
            snprintf(err, errlen, "%s: BLAS handle: %s", SN_VENDOR, SN_BLAS_STATUS_STRING(s));
        gpu_close(c);
        return -1;
    }
    c->own_gemm = 0;
#else
    c->own_gemm = 1;
#endif
    *ctx = c;
    return 0;
}

static void gpu_close(void *ctx)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (!c) return;
    (void)cudaSetDevice(c->device);
    if (c->stream) (void)cudaStreamSynchronize(c->stream);
#ifdef SN_BLAS
    if (c->blas) (void)cublasDestroy(c->blas);
#endif
#ifdef SN_BLAS_BF16
    if (c->bf_a) (void)cudaFree(c->bf_a);
    if (c->bf_b) (void)cudaFree(c->bf_b);
#endif
    if (c->h_res) (void)cudaFreeHost(c->h_res);
    if (c->d_res) (void)cudaFree(c->d_res);
    if (c->d_part) (void)cudaFree(c->d_part);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c);
}

/* ---- memory and copies ------------------------------------------------- */

/* Out of memory is an answer (NULL), not an error of the context. */
static void *gpu_alloc(void *ctx, size_t bytes)
{
    sn_ctx *c = (sn_ctx *)ctx;
    void *p = NULL;
    if (cudaSetDevice(c->device) != cudaSuccess ||
        cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void gpu_free(void *ctx, void *p)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (!p) return;
    (void)cudaSetDevice(c->device);
    sn_check(c, cudaFree(p), "cudaFree");
}

static void *gpu_host_alloc(void *ctx, size_t bytes)
{
    sn_ctx *c = (sn_ctx *)ctx;
    void *p = NULL;
    if (cudaSetDevice(c->device) != cudaSuccess ||
        cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void gpu_host_free(void *ctx, void *p)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (!p) return;
    (void)cudaSetDevice(c->device);
    sn_check(c, cudaFreeHost(p), "cudaFreeHost");
}

static int gpu_to_device(void *ctx, void *dst, const void *src, size_t bytes)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c)) return -1;
    if (!bytes) return 0;
    return sn_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream),
                    "to_device");
}

static int gpu_to_host(void *ctx, void *dst, const void *src, size_t bytes)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c)) return -1;
    if (bytes &&
        sn_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "to_host"))
        return -1;
    return sn_check(c, cudaStreamSynchronize(c->stream), "to_host");
}

static int gpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (sn_enter(c)) return -1;
    if (!bytes) return 0;
    return sn_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
                    "copy");
}

static int gpu_sync(void *ctx, char *err, size_t errlen)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (!c->failed && sn_enter(c) == 0) {
        sn_check(c, cudaStreamSynchronize(c->stream), "sync");
        sn_launched(c, "sync");
    }
    if (!c->failed) return 0;
    if (err && errlen) snprintf(err, errlen, "%s", c->err);
    return -1;
}

int sn_fetch_result(sn_ctx *c, sn_result *out)
{
    if (sn_check(c,
                 cudaMemcpyAsync(c->h_res, c->d_res, sizeof(sn_result), cudaMemcpyDeviceToHost,
                                 c->stream),
                 "result copy"))
        return -1;
    if (sn_check(c, cudaStreamSynchronize(c->stream), "result wait")) return -1;
    *out = *c->h_res;
    return 0;
}

/* ---- GEMM choice -------------------------------------------------------- */

static int gpu_set_gemm(void *ctx, const char *which)
{
    sn_ctx *c = (sn_ctx *)ctx;
    if (strcmp(which, "own") == 0) {
        c->own_gemm = 1;
        return 0;
    }
#ifdef SN_BLAS
    if (strcmp(which, "blas") == 0) {
        c->own_gemm = 0;
        return 0;
    }
#endif
    return -1;
}

static const char *gpu_gemm_name(void *ctx)
{
    sn_ctx *c = (sn_ctx *)ctx;
#ifdef SN_BLAS
    if (!c->own_gemm) return SN_BLAS_NAME;
#else
    (void)c;
#endif
    return "own";
}

/* ---- precision ------------------------------------------------------------ */

/* bf16 matrix products (inputs rounded to bf16, fp32 sums and results) or
 * fp32: a flag the products of gemm.cu and attention.cu read when queued,
 * so a switch applies to the operations queued after it. */
static int gpu_set_precision(void *ctx, int bf16)
{
    sn_ctx *c = (sn_ctx *)ctx;
    c->bf16 = bf16 ? 1 : 0;
    return 0;
}

/* ---- the table ---------------------------------------------------------- */

static const kdev_backend gpu_backend = {
    KDEV_ABI,
    SN_VENDOR,
    gpu_count,
    gpu_info,
    gpu_open,
    gpu_close,
    gpu_alloc,
    gpu_free,
    gpu_host_alloc,
    gpu_host_free,
    gpu_to_device,
    gpu_to_host,
    gpu_copy,
    gpu_sync,
    gpu_set_gemm,
    gpu_gemm_name,
    gpu_set_precision,
    sn_matmul_forward,
    sn_matmul_backward,
    sn_embedding_forward,
    sn_embedding_backward,
    sn_rmsnorm_forward,
    sn_rmsnorm_backward,
    sn_rope_forward,
    sn_rope_backward,
    sn_attention_scratch_floats,
    sn_attention_forward,
    sn_attention_backward,
    sn_swiglu_forward,
    sn_swiglu_backward,
    sn_crossentropy_forward,
    sn_crossentropy_backward,
    sn_grad_sumsq,
    sn_adamw_update,
    sn_zero,
    sn_add,
};

extern "C" __attribute__((visibility("default"))) const kdev_backend *shardnode_kdev_backend(void)
{
    return &gpu_backend;
}

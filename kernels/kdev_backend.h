/* kdev_backend.h — the table a compute backend fills: the ABI between
 * shardnode (kernels/device.c, which opens devices by name) and each backend:
 * the CPU one linked in (kernels/cpu/backend.c) and the GPU ones built as
 * shared objects (libshardnode-cuda.so, libshardnode-hip.so from the same
 * kernels/gpu/ sources) that device.c loads with dlopen.
 *
 * A GPU backend exports one C symbol, KDEV_BACKEND_SYMBOL, a function that
 * returns its table. Every pointer an operation takes is device memory of the
 * context's device (for the CPU backend, host memory); sizes and shapes are
 * those of kernels.h, with the same conventions (forward writes, backward
 * adds into every gradient). Operations are asynchronous on a GPU: they
 * queue work on the context's stream and never fail on their own; a launch
 * or execution error is kept in the context and returned by the next `sync`
 * (and by every later one: a context with an error is unusable). Only
 * `crossentropy_forward` and `grad_sumsq`, which return a value, wait.
 *
 * Bump KDEV_ABI whenever this table changes: device.c refuses a backend of
 * another version (its error names both), so a stale .so beside a newer
 * binary says so instead of calling through a wrong table. */
#ifndef SHARDNODE_KDEV_BACKEND_H
#define SHARDNODE_KDEV_BACKEND_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDEV_ABI 2
#define KDEV_BACKEND_SYMBOL "shardnode_kdev_backend"

typedef struct kdev_backend {
    int abi;            /* KDEV_ABI of the build that made it */
    const char *vendor; /* "cpu", "cuda" or "hip": the name's prefix */

    /* Devices this runtime sees: >= 0, or -1 with err filled (no driver,
     * runtime too old for the driver, ...). */
    int (*count)(char *err, size_t errlen);
    /* What device `index` is (kdev_info in kernels.h); 0, or -1 with err. */
    int (*info)(int index, kdev_info *out, char *err, size_t errlen);
    /* A context on device `index` (its stream, BLAS handle, first error). */
    int (*open)(int index, void **ctx, char *err, size_t errlen);
    void (*close)(void *ctx);

    /* Device memory; alloc returns NULL when the device has not `bytes`. */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    /* Page-locked host memory for frames to and from the device (plain
     * aligned memory on the CPU); NULL when none is left. */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);
    /* Copies, in stream order with the operations; to_host returns once
     * dst holds the bytes. 0, or -1 (the error is kept for sync). */
    int (*to_device)(void *ctx, void *dst, const void *src, size_t bytes);
    int (*to_host)(void *ctx, void *dst, const void *src, size_t bytes);
    int (*copy)(void *ctx, void *dst, const void *src, size_t bytes); /* device to device */
    /* Waits for everything queued; 0, or -1 with the first error in err. */
    int (*sync)(void *ctx, char *err, size_t errlen);
    /* Which matrix-product kernel the context uses: "blas" (cuBLAS, hipBLAS
     * or the CPU's choice) or "own" (the project's tiled kernel); returns 0,
     * or -1 when the context has no such kernel. */
    int (*set_gemm)(void *ctx, const char *which);
    const char *(*gemm_name)(void *ctx);
    /* Matrix products in bf16 (inputs rounded to bf16, fp32 accumulation
     * and results; everything else stays fp32) when bf16 is 1, in fp32 when
     * 0. Returns 0, or -1 when the context has no bf16 products. */
    int (*set_precision)(void *ctx, int bf16);

    /* ---- operations: kernels.h's, on the context's device ---------------- */
    void (*matmul_forward)(void *ctx, float *out, const float *inp, const float *weight,
                           int N, int IC, int OC, int accumulate);
    void (*matmul_backward)(void *ctx, float *dinp, float *dweight, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC);
    void (*embedding_forward)(void *ctx, float *out, const int32_t *ids, const float *wte,
                              int N, int C);
    void (*embedding_backward)(void *ctx, float *dwte, const float *dout, const int32_t *ids,
                               int N, int C);
    void (*rmsnorm_forward)(void *ctx, float *out, float *rstd, const float *inp,
                            const float *weight, int N, int C, float eps);
    void (*rmsnorm_backward)(void *ctx, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *weight, const float *rstd,
                             int N, int C);
    void (*rope_forward)(void *ctx, float *x, const float *cos_tab, const float *sin_tab,
                         int N, int T, int nheads, int HD, int ld);
    void (*rope_backward)(void *ctx, float *dx, const float *cos_tab, const float *sin_tab,
                          int N, int T, int nheads, int HD, int ld);
    /* Scratch attention_backward needs, in floats, for these shapes. */
    size_t (*attention_scratch_floats)(void *ctx, int B, int T, int NH, int HD);
    void (*attention_forward)(void *ctx, float *out, float *att, const float *qkv,
                              int B, int T, int NH, int NKV, int HD);
    void (*attention_backward)(void *ctx, float *dqkv, const float *dout, const float *qkv,
                               const float *att, float *scratch, int B, int T, int NH,
                               int NKV, int HD);
    void (*swiglu_forward)(void *ctx, float *h, const float *gu, int N, int F);
    void (*swiglu_backward)(void *ctx, float *dgu, const float *dh, const float *gu, int N,
                            int F);
    /* Waits; *kept on the host. */
    double (*crossentropy_forward)(void *ctx, float *probs_inplace, float *losses,
                                   const int32_t *labels, int N, int V, int *kept);
    void (*crossentropy_backward)(void *ctx, float *dlogits, const float *probs,
                                  const int32_t *labels, int N, int V, float scale);
    double (*grad_sumsq)(void *ctx, const float *g, size_t n); /* waits */
    void (*adamw_update)(void *ctx, float *p, const float *g, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         int t, float grad_scale);
    void (*zero)(void *ctx, float *x, size_t n);
    void (*add)(void *ctx, float *y, const float *x, size_t n);
} kdev_backend;

/* The function a GPU backend's shared object exports under KDEV_BACKEND_SYMBOL. */
typedef const kdev_backend *(*kdev_backend_fn)(void);

/* The CPU backend (kernels/cpu/backend.c). */
const kdev_backend *kdev_cpu_backend(void);

#ifdef __cplusplus
}
#endif

#endif

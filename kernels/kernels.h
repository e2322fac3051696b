/* kernels.h — tensor operations of one LLaMA decoder, per backend.
 *
 * Shape vocabulary, shared by every kernel and by model/:
 *   N   rows = B * T (micro-batch times sequence), row-major activations [N, C]
 *   B   micro-batch size, T sequence length
 *   C   hidden size, F intermediate size, V vocabulary
 *   NH  attention heads, NKV key/value heads (NH % NKV == 0), HD head dim
 *   QKV row of the fused projection: [q (NH*HD) | k (NKV*HD) | v (NKV*HD)]
 *
 * Conventions (as llm.c): forward writes its outputs; backward ADDS into
 * every gradient it produces (parameter and input gradients alike), so the
 * caller zeroes gradient buffers once and residual branches need no copies.
 * Nothing here allocates; scratch space is passed in by the caller.
 * kernels/ knows no model, no file and no network.
 */
#ifndef SHARDNODE_KERNELS_H
#define SHARDNODE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KERNELS_IGNORE_INDEX (-100)

/* ---- matmul: out[N,OC] (=|+=) inp[N,IC] @ weight[OC,IC]^T --------------- */
/* accumulate = 0 overwrites out, 1 adds to it (fused residual). */
void matmul_forward(float *out, const float *inp, const float *weight,
                    int N, int IC, int OC, int accumulate);
/* dinp[N,IC] += dout @ weight; dweight[OC,IC] += dout^T @ inp.
 * Either output may be NULL to skip it. */
void matmul_backward(float *dinp, float *dweight, const float *dout,
                     const float *inp, const float *weight, int N, int IC, int OC);

/* ---- embedding: out[N,C] = wte[ids[n]] ----------------------------------- */
void embedding_forward(float *out, const int32_t *ids, const float *wte, int N, int C);
void embedding_backward(float *dwte, const float *dout, const int32_t *ids, int N, int C);

/* ---- RMSNorm: out = inp * rstd * weight, rstd[n] = 1/sqrt(mean(inp^2)+eps) */
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                     int N, int C, float eps);
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                      const float *weight, const float *rstd, int N, int C);

/* ---- rotary embedding, HF rotate_half convention ---------------------------
 * cos/sin tables are [T, HD/2]: angle(t, i) = t * theta^(-2i/HD).
 * Applied in place to the first `nheads` heads of each row, row stride `ld`,
 * position of row n is n % T. */
void rope_tables(float *cos_tab, float *sin_tab, int T, int HD, float theta);
/* Plain RoPE's HD/2 inverse frequencies theta^(-2i/HD), as HF computes them
 * in float32; rope_tables_freq builds the tables from any such list
 * (angle(t, i) = t * inv_freq[i]), e.g. one rescaled for Llama 3.1. */
void rope_inv_freq(float *inv_freq, int HD, float theta);
void rope_tables_freq(float *cos_tab, float *sin_tab, int T, int HD, const float *inv_freq);
void rope_forward(float *x, const float *cos_tab, const float *sin_tab,
                  int N, int T, int nheads, int HD, int ld);
/* In place: dx = R^T dy (the rotation is orthogonal; no saved input needed). */
void rope_backward(float *dx, const float *cos_tab, const float *sin_tab,
                   int N, int T, int nheads, int HD, int ld);

/* ---- causal self-attention with grouped-query heads ----------------------
 * qkv [N, (NH+2*NKV)*HD] after RoPE; out [N, NH*HD];
 * att [B, NH, T, T] saved softmax probabilities (upper triangle zero).
 * scratch: attention_scratch_floats(T) floats per thread, nthreads slots. */
size_t attention_scratch_floats(int T);
void attention_forward(float *out, float *att, const float *qkv,
                       int B, int T, int NH, int NKV, int HD);
/* dqkv += gradient through attention; dout [N, NH*HD]. */
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                        float *scratch, int nscratch, int B, int T, int NH, int NKV, int HD);

/* One query row over cached keys and values, for generation: q [NH*HD]
 * after RoPE; kcache / vcache [ntok] rows of ldkv floats, [k heads] at the
 * row's start; out [NH*HD]; scores: NH * ldscores floats of scratch
 * (ldscores >= ntok). */
void attention_decode(float *out, const float *q, const float *kcache, const float *vcache,
                      int ntok, int ldkv, int NH, int NKV, int HD, float *scores,
                      int ldscores);

/* ---- SwiGLU: h[N,F] = silu(gate) * up, gu [N, 2F] = [gate | up] per row --- */
void swiglu_forward(float *h, const float *gu, int N, int F);
void swiglu_backward(float *dgu, const float *dh, const float *gu, int N, int F);

/* ---- cross-entropy with ignore index --------------------------------------
 * forward: turns logits [N,V] into probabilities in place, writes per-row
 * loss (0 for ignored rows) and returns the sum of kept losses; *kept gets
 * the count of rows whose label is not KERNELS_IGNORE_INDEX. Labels must be
 * checked by the caller (0 <= label < V or ignore). */
double crossentropy_forward(float *probs_inplace, float *losses, const int32_t *labels,
                            int N, int V, int *kept);
/* dlogits[N,V] = scale * (probs - onehot(label)) for kept rows, 0 otherwise.
 * Overwrites (the logits gradient is the start of the backward chain). */
void crossentropy_backward(float *dlogits, const float *probs, const int32_t *labels,
                           int N, int V, float scale);

/* ---- optimizer ----------------------------------------------------------- */
/* Sum of squares of g[0..n), in double. */
double grad_sumsq(const float *g, size_t n);
/* AdamW as torch.optim.AdamW: p -= lr*wd*p; m,v moments; bias corrected with
 * step t (>= 1); g is multiplied by grad_scale first (clipping). */
void adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t,
                  float grad_scale);

/* ---- helpers ------------------------------------------------------------- */
void kernels_zero(float *x, size_t n);
void kernels_add(float *y, const float *x, size_t n); /* y += x */
/* Threads used by OpenMP regions and BLAS alike (one pool: OpenBLAS is the
 * OpenMP build, so the two never spin against each other). */
void kernels_set_threads(int n);
int kernels_threads(void);
/* Per-thread scratch slots to size for: the larger of the thread cap and
 * the cores (the cap can change between sizing and use). */
int kernels_thread_slots(void);
/* OpenBLAS 0.3.21 (Debian bookworm) picks its kernels from the CPU model
 * and falls back to a generic SSE3 core ("Prescott") on CPUs newer than it
 * knows, running sgemm 4-6x below peak. The choice is made when the library
 * loads and can only be overridden by OPENBLAS_CORETYPE in the environment.
 * Returns the core type this CPU should use when OpenBLAS chose a weaker one
 * and the variable is unset, else NULL: SkylakeX on an AVX-512 CPU that
 * OpenBLAS runs with a narrower core type (Haswell, Zen: half the width, by
 * the figures in bench/README.md), Haswell on an AVX2 CPU that it runs with
 * a pre-AVX2 one. */
const char *kernels_blas_coretype_hint(void);
const char *kernels_blas_corename(void);
/* The matrix-product kernel matmul uses: "shardnode-avx512" (its own, on
 * AVX-512 CPUs) or "openblas" (elsewhere, or with SHARDNODE_GEMM=openblas). */
const char *kernels_gemm_name(void);
/* Run sgemm of M x N x K `reps` times; returns seconds (peak measurement). */
double kernels_sgemm_seconds(int M, int N, int K, int reps);

/* fp16 / bf16 to fp32 (exact, including subnormals, inf and nan). */
float kernels_f16_to_f32(uint16_t h);
float kernels_bf16_to_f32(uint16_t h);
/* n values to bf16 (round to nearest even, NaN kept) and back, as the wire
 * carries activations and gradients; buffers need no alignment. */
void kernels_f32_to_bf16_n(void *dst, const float *src, size_t n);
void kernels_bf16_to_f32_n(float *dst, const void *src, size_t n);

/* ---- NF4: bitsandbytes' 4-bit NormalFloat, double-quantized (nf4*.c) ----
 * A frozen weight [rows = out, cols = in] exactly as bitsandbytes lays it
 * out (nf4.c has the rules, rounding and tie-breaking included): blocks of
 * NF4_BLOCK values in row-major order, 4-bit codes two per byte (first
 * element in the high nibble), each block's absmax minus `offset` (their
 * mean) quantized to 8 bits with the dynamic map in blocks of
 * NF4_NESTED_BLOCK (scale nested_absmax). One buffer of nf4_bytes() holds
 * it all; nf4_init carves it (4-byte aligned buffer). */
#define NF4_BLOCK 64
#define NF4_NESTED_BLOCK 256
typedef struct {
    int64_t rows, cols;
    uint8_t *codes;         /* (rows*cols + 1) / 2 */
    uint8_t *absmax_q;      /* nf4_blocks() 8-bit codes of absmax - offset */
    float *nested_absmax;   /* nf4_nested_blocks() */
    float offset;
    float *quant_map;       /* 16: the NF4 values */
    float *nested_map;      /* 256: bitsandbytes' signed dynamic map */
} nf4_matrix;
int64_t nf4_blocks(int64_t rows, int64_t cols);
int64_t nf4_nested_blocks(int64_t rows, int64_t cols);
/* Memory of the format, and the buffer nf4_init needs: codes, 8-bit absmax,
 * nested absmax, offset and both maps (about 0.516 bytes per value). */
size_t nf4_bytes(int64_t rows, int64_t cols);
/* Points q's arrays into buf and fills both maps (offset 0). */
void nf4_init(nf4_matrix *q, int64_t rows, int64_t cols, void *buf);
const float *nf4_table(void);               /* the 16 NF4 values */
void nf4_dynamic_map(float map[256]);       /* create_dynamic_map(signed=True) */
/* w [rows, cols] into q (nf4_init'ed); absmax: nf4_blocks() floats of
 * scratch, left holding every block's fp32 absmax. */
void nf4_quantize(nf4_matrix *q, const float *w, float *absmax);
/* A block's absmax back from its 8-bit code: map[q] * nested + offset. */
float nf4_block_absmax(const nf4_matrix *q, int64_t block);
/* count values from flat index start (row-major) into dst; whole matrix. */
void nf4_dequantize_range(const nf4_matrix *q, int64_t start, int64_t count, float *dst);
void nf4_dequantize(const nf4_matrix *q, float *w);
/* out[N,OC] (=|+=) inp[N,IC] @ W^T and dinp[N,IC] += dout[N,OC] @ W with
 * W = w (IC = cols, OC = rows) dequantized tile by tile into scratch:
 * nf4_matmul_scratch_floats(N, IC, OC) floats per thread, nscratch slots
 * (never more threads than slots). Bit-identical to matmul_forward /
 * matmul_backward(dinp only) on nf4_dequantize(w), for any thread count. */
size_t nf4_matmul_scratch_floats(int N, int IC, int OC);
void nf4_matmul_forward(float *out, const float *inp, const nf4_matrix *w, int N,
                        int accumulate, float *scratch, int nscratch);
void nf4_matmul_backward(float *dinp, const float *dout, const nf4_matrix *w, int N,
                         float *scratch, int nscratch);
/* The same with out's rows ldo floats apart (out may be some columns of a
 * wider matrix) and dout's rows ldd apart. */
void nf4_matmul_forward_ld(float *out, int ldo, const float *inp, const nf4_matrix *w, int N,
                           int accumulate, float *scratch, int nscratch);
void nf4_matmul_backward_ld(float *dinp, const float *dout, int ldd, const nf4_matrix *w,
                            int N, float *scratch, int nscratch);

/* ---- devices: where a stage computes (kernels/device.c) -------------------
 * A device is opened by name: "cpu", "cuda:N" or "hip:N". The CPU backend
 * is linked in; the GPU ones are shared objects built from kernels/gpu/
 * (libshardnode-cuda.so, libshardnode-hip.so) that kdev_open loads with
 * dlopen, found beside the executable (or in its parent folder, for the
 * test binaries of a build tree), or only in $SHARDNODE_BACKEND_DIR when
 * that is set, so one binary runs
 * on machines with and without a GPU stack. Pointers passed to kdev_*
 * operations are the device's memory (kdev_alloc; host memory on "cpu").
 * GPU operations are queued: errors come back from kdev_sync as values. */
typedef struct kdev kdev;
typedef struct kdev_info {
    char vendor[16];  /* "cpu", "cuda", "hip" */
    char name[128];   /* the CPU's model name, the GPU's product name */
    char arch[32];    /* "sm_90", "gfx1100", "x86_64" */
    char driver[32];  /* GPU driver / runtime version; "" on the CPU */
    int64_t mem_total, mem_free; /* bytes */
    int units;        /* cores, or the GPU's multiprocessors / compute units */
    int warp;         /* warp / wavefront width; 0 on the CPU */
} kdev_info;
enum {
    KDEV_OK = 0,
    KDEV_EBADNAME = -1,   /* not "cpu", "cuda:N" or "hip:N" */
    KDEV_ENOTBUILT = -2,  /* this build has no such backend (no .so found) */
    KDEV_ENORUNTIME = -3, /* the backend is built but its vendor runtime (or
                           * driver) is missing on this machine */
    KDEV_ENODEV = -4,     /* the runtime is there, the device index is not */
    KDEV_EFAIL = -5       /* the device is there and failed to open */
};
/* KDEV_OK with *out set, or one of the errors above with err saying what
 * and where (the name, the file looked for, the runtime's own message). */
int kdev_open(const char *name, kdev **out, char *err, size_t errlen);
void kdev_close(kdev *d);
/* The process's CPU device: always there, never closed (kdev_close on it
 * does nothing). */
kdev *kdev_cpu(void);
const char *kdev_name(const kdev *d);          /* as opened: "cuda:0" */
const kdev_info *kdev_get_info(const kdev *d);
int kdev_is_host(const kdev *d);               /* memory is host memory */

/* One line per backend for `shardnode devices`: every device it sees, or
 * why it has none. entry i: name ("cpu", "cuda:0") or "cuda"/"hip" with
 * status < 0 and why filled. Returns the number written (at most max). */
typedef struct kdev_entry {
    char name[16];
    int status;       /* KDEV_OK, or why this backend offers nothing */
    kdev_info info;   /* when status is KDEV_OK */
    char why[256];
} kdev_entry;
int kdev_list(kdev_entry *out, int max);

void *kdev_alloc(kdev *d, size_t bytes);       /* NULL when out of memory */
void kdev_free(kdev *d, void *p);
void *kdev_host_alloc(kdev *d, size_t bytes);  /* pinned on a GPU */
void kdev_host_free(kdev *d, void *p);
int kdev_to_device(kdev *d, void *dst, const void *src, size_t bytes);
int kdev_to_host(kdev *d, void *dst, const void *src, size_t bytes);
int kdev_copy(kdev *d, void *dst, const void *src, size_t bytes);
/* Waits for the queued work: KDEV_OK, or KDEV_EFAIL with the first
 * asynchronous error in err. */
int kdev_sync(kdev *d, char *err, size_t errlen);
/* "blas" or "own" (the project's tiled GEMM): 0, or -1 if not offered. */
int kdev_set_gemm(kdev *d, const char *which);
const char *kdev_gemm_name(kdev *d);
/* Matrix products in bf16 with fp32 accumulation (1) or fp32 (0): 0, or -1
 * when d has no bf16 products (the CPU: it stays fp32). */
int kdev_set_precision(kdev *d, int bf16);

/* The operations above, on device d (same arguments; attention_backward's
 * scratch is kdev_attention_scratch_floats floats of d's memory). */
void kdev_matmul_forward(kdev *d, float *out, const float *inp, const float *weight,
                         int N, int IC, int OC, int accumulate);
void kdev_matmul_backward(kdev *d, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, int N, int IC, int OC);
void kdev_embedding_forward(kdev *d, float *out, const int32_t *ids, const float *wte,
                            int N, int C);
void kdev_embedding_backward(kdev *d, float *dwte, const float *dout, const int32_t *ids,
                             int N, int C);
void kdev_rmsnorm_forward(kdev *d, float *out, float *rstd, const float *inp,
                          const float *weight, int N, int C, float eps);
void kdev_rmsnorm_backward(kdev *d, float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight, const float *rstd, int N,
                           int C);
void kdev_rope_forward(kdev *d, float *x, const float *cos_tab, const float *sin_tab, int N,
                       int T, int nheads, int HD, int ld);
void kdev_rope_backward(kdev *d, float *dx, const float *cos_tab, const float *sin_tab, int N,
                        int T, int nheads, int HD, int ld);
size_t kdev_attention_scratch_floats(kdev *d, int B, int T, int NH, int HD);
void kdev_attention_forward(kdev *d, float *out, float *att, const float *qkv, int B, int T,
                            int NH, int NKV, int HD);
void kdev_attention_backward(kdev *d, float *dqkv, const float *dout, const float *qkv,
                             const float *att, float *scratch, int B, int T, int NH, int NKV,
                             int HD);
void kdev_swiglu_forward(kdev *d, float *h, const float *gu, int N, int F);
void kdev_swiglu_backward(kdev *d, float *dgu, const float *dh, const float *gu, int N, int F);
double kdev_crossentropy_forward(kdev *d, float *probs_inplace, float *losses,
                                 const int32_t *labels, int N, int V, int *kept);
void kdev_crossentropy_backward(kdev *d, float *dlogits, const float *probs,
                                const int32_t *labels, int N, int V, float scale);
double kdev_grad_sumsq(kdev *d, const float *g, size_t n);
void kdev_adamw_update(kdev *d, float *p, const float *g, float *m, float *v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                       float grad_scale);
void kdev_zero(kdev *d, float *x, size_t n);
void kdev_add(kdev *d, float *y, const float *x, size_t n);

#ifdef __cplusplus
}
#endif

#endif

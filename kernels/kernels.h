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

#endif

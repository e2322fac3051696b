/* attention.c — causal self-attention with grouped-query heads.
 *   qkv [B*T, ld], ld = (NH + 2*NKV) * HD: per row [q heads | k heads | v heads]
 *   out, dout [B*T, NH*HD]; att [B, NH, T, T] softmax probabilities
 * Query head h reads key/value head h / (NH / NKV), as HF's repeat_kv. Each
 * (batch, head) is a pair of small single-threaded products on strided views
 * of qkv (gemm_single: the kernel matmul uses) inside the OpenMP loop, so one
 * pool is busy and every task computes the same bits on any thread. */
#include "kernels.h"

#include "elementwise.h"
#include "gemm.h"

#include <math.h>
#include <omp.h>

size_t attention_scratch_floats(int T) { return (size_t)T * T; }

/* Row-wise causal softmax of scale * s [T, T] in place; entries above the
 * diagonal become exact zeros so the backward can use plain products. */
static void causal_softmax(float *s, int T, float scale)
{
    for (int i = 0; i < T; i++) {
        float *row = s + (size_t)i * T;
        for (int j = 0; j <= i; j++) row[j] *= scale;
        float mx = row[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j <= i; j++) {
            row[j] = kernels_expf(row[j] - mx);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j <= i; j++) row[j] *= inv;
        for (int j = i + 1; j < T; j++) row[j] = 0.0f;
    }
}

void attention_forward(float *out, float *att, const float *qkv,
                       int B, int T, int NH, int NKV, int HD)
{
    int ld = (NH + 2 * NKV) * HD, C = NH * HD, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, kvh = h / group;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * HD;
        const float *k = qkv + (size_t)b * T * ld + (size_t)(NH + kvh) * HD;
        const float *v = qkv + (size_t)b * T * ld + (size_t)(NH + NKV + kvh) * HD;
        float *p = att + (size_t)bh * T * T;
        /* p = scale * q k^T, then causal softmax; o = p v */
        gemm_single(0, 1, T, T, HD, q, ld, k, ld, 0, p, T);
        causal_softmax(p, T, scale);
        gemm_single(0, 0, T, HD, T, p, T, v, ld, 0, out + (size_t)b * T * C + (size_t)h * HD, C);
    }
}

/* Heads of one KV group share dk/dv, so a task is one (batch, KV head) and
 * walks its query heads in order: no two threads write the same gradient. */
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                        float *scratch, int nscratch, int B, int T, int NH, int NKV, int HD)
{
    int ld = (NH + 2 * NKV) * HD, C = NH * HD, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
    /* one scratch slot per thread: never more threads than slots */
    int nthr = omp_get_max_threads() < nscratch ? omp_get_max_threads() : nscratch;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr)
    for (int bk = 0; bk < B * NKV; bk++) {
        float *dp = scratch + (size_t)omp_get_thread_num() * T * T;
        int b = bk / NKV, kvh = bk % NKV;
        size_t base = (size_t)b * T * ld;
        const float *k = qkv + base + (size_t)(NH + kvh) * HD;
        const float *v = qkv + base + (size_t)(NH + NKV + kvh) * HD;
        float *dk = dqkv + base + (size_t)(NH + kvh) * HD;
        float *dv = dqkv + base + (size_t)(NH + NKV + kvh) * HD;
        for (int h = kvh * group; h < (kvh + 1) * group; h++) {
            const float *q = qkv + base + (size_t)h * HD;
            float *dq = dqkv + base + (size_t)h * HD;
            const float *p = att + ((size_t)b * NH + h) * T * T;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * HD;
            /* dv += p^T dO;  dp = dO v^T */
            gemm_single(1, 0, T, HD, T, p, T, dO, C, 1, dv, ld);
            gemm_single(0, 1, T, T, HD, dO, C, v, ld, 0, dp, T);
            /* softmax backward, with the scale of the scores folded in:
             * ds = scale * p * (dp - sum_j p dp), in place in dp */
            for (int i = 0; i < T; i++) {
                const float *pr = p + (size_t)i * T;
                float *dr = dp + (size_t)i * T, dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int j = 0; j <= i; j++) dot += pr[j] * dr[j];
                for (int j = 0; j <= i; j++) dr[j] = scale * (pr[j] * (dr[j] - dot));
                for (int j = i + 1; j < T; j++) dr[j] = 0.0f;
            }
            /* dq += ds k;  dk += ds^T q */
            gemm_single(0, 0, T, HD, T, dp, T, k, ld, 1, dq, ld);
            gemm_single(1, 0, T, HD, T, dp, T, q, ld, 1, dk, ld);
        }
    }
}

/* One query row over cached keys and values (generation): q [NH*HD] after
 * RoPE, kcache/vcache rows [ntok, ldkv] of [NKV*HD]; out [NH*HD]. Query
 * head h reads key/value head h / (NH / NKV). scores: NH rows of ldscores
 * (>= ntok) floats of scratch, one per head so heads run in parallel. */
void attention_decode(float *out, const float *q, const float *kcache, const float *vcache,
                      int ntok, int ldkv, int NH, int NKV, int HD, float *scores,
                      int ldscores)
{
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
    /* A parallel region costs more than a short prefix of a small model. */
#pragma omp parallel for schedule(static) if ((long)NH * ntok * HD >= 65536)
    for (int h = 0; h < NH; h++) {
        const float *qh = q + (size_t)h * HD;
        const float *kc = kcache + (size_t)(h / group) * HD;
        const float *vc = vcache + (size_t)(h / group) * HD;
        float *sc = scores + (size_t)h * ldscores;
        float *o = out + (size_t)h * HD;
        float mx = -INFINITY;
        for (int t = 0; t < ntok; t++) {
            const float *k = kc + (size_t)t * ldkv;
            float dot = 0.0f;
            for (int i = 0; i < HD; i++) dot += qh[i] * k[i];
            sc[t] = dot * scale;
            mx = sc[t] > mx ? sc[t] : mx;
        }
        /* max subtracted: scores of scaled-up weights overflow expf otherwise */
        float sum = 0.0f;
        for (int t = 0; t < ntok; t++) {
            sc[t] = expf(sc[t] - mx);
            sum += sc[t];
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < HD; i++) o[i] = 0.0f;
        for (int t = 0; t < ntok; t++) {
            const float *v = vc + (size_t)t * ldkv;
            float p = sc[t] * inv;
            for (int i = 0; i < HD; i++) o[i] += p * v[i];
        }
    }
}

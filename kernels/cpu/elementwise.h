/* elementwise.h — scalar math shared by the CPU kernels (and, to come, the
 * GPU ones), written branch-free so `omp simd` loops vectorise: libm's expf
 * is a call per element that no loop around it can vectorise. */
#ifndef SHARDNODE_KERNELS_ELEMENTWISE_H
#define SHARDNODE_KERNELS_ELEMENTWISE_H

#include <stdint.h>

/* Columns per task where threads split the columns of a reduction over rows
 * (RMSNorm's dweight, the embedding's scatter-add): a constant, so the split
 * never depends on the thread count. */
#define KERNELS_COLUMN_BLOCK 64

/* exp(x) to about 2 ulp for x in [-87, 88] (clamped outside, so it never
 * returns 0 or inf): x = n ln2 + r, |r| <= ln2/2, exp(r) by its Taylor
 * polynomial of degree 7 (truncation below 2e-8), times 2^n through the
 * exponent bits (a union: C11 allows the type pun, and memcpy here
 * keeps GCC 12 from vectorising). */
static inline float kernels_expf(float x)
{
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    /* n = round(x / ln2) by the 1.5 * 2^23 trick: floorf would block
     * vectorisation (it may trap on inexact); strict FP keeps (a + c) - c */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f; /* ln2 split in two for exactness */
    r = r - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { int32_t i; float f; } scale = {.i = ((int32_t)n + 127) << 23};
    return p * scale.f;
}

static inline float kernels_sigmoidf(float x) { return 1.0f / (1.0f + kernels_expf(-x)); }

#endif

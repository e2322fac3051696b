/* nf4.c — bitsandbytes' 4-bit NormalFloat format with double quantization,
 * laid out and rounded as bitsandbytes' CUDA kernels do (the ones that
 * wrote the 4-bit checkpoints people share):
 *
 *   - the [out, in] matrix is read in row-major order in blocks of 64
 *     values (the last one shorter); absmax = max |x| of a block;
 *   - each x becomes the 4-bit code of x * (1 / absmax) (the reciprocal
 *     rounded to fp32 first, then an fp32 product): the count of the 15
 *     midpoints between adjacent NF4 values that are strictly below it
 *     (bitsandbytes' decision tree: "x > midpoint" goes up, so a value on a
 *     midpoint takes the lower code, and NaN, from an all-zero block, takes
 *     code 0); the midpoints are the fp64 means of adjacent fp32 table
 *     values rounded to fp32, which are the literals of the tree;
 *   - two codes per byte, the first element in the high nibble; with an odd
 *     count the last low nibble is the code of 0.0 in the last block (the
 *     CUDA kernel quantizes its zero padding);
 *   - double quantization: offset = mean of all absmax (summed in fp64,
 *     rounded to fp32: CUDA torch sums in fp32 in its own order, so an offset
 *     of a checkpoint may differ from ours in the last bit; a checkpoint's is
 *     read, never recomputed), then absmax - offset quantized to 8 bits in
 *     blocks of 256 with the signed dynamic map: nested_absmax = max |v| of
 *     a block, code = bitsandbytes' 7-step binary search over the 256-entry
 *     map from entry 127, then the midpoint test ((a + b) * 0.5f in fp32;
 *     above the upper midpoint goes up, below the lower one goes down);
 *   - dequantization: absmax = map8[q] * nested_absmax + offset (two fp32
 *     roundings), x = nf4[code] * absmax (whole blocks with AVX-512 where
 *     the CPU has it: the same products, a table lookup by permute).
 *
 * Nothing here allocates: a matrix lives in one caller-provided buffer of
 * nf4_bytes(). */
#include "kernels.h"

#include "gemm.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

/* bitsandbytes' NF4 values (QLoRA, appendix E), as fp32. */
static const float nf4_values[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};

const float *nf4_table(void) { return nf4_values; }

int64_t nf4_blocks(int64_t rows, int64_t cols)
{
    return (rows * cols + NF4_BLOCK - 1) / NF4_BLOCK;
}

int64_t nf4_nested_blocks(int64_t rows, int64_t cols)
{
    return (nf4_blocks(rows, cols) + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK;
}

/* Buffer layout: quant_map[16] | nested_map[256] | nested_absmax | offset |
 * codes | absmax_q (floats first, so every part is aligned). */
size_t nf4_bytes(int64_t rows, int64_t cols)
{
    int64_t n = rows * cols;
    return (size_t)(16 + 256 + nf4_nested_blocks(rows, cols) + 1) * sizeof(float) +
           (size_t)((n + 1) / 2) + (size_t)nf4_blocks(rows, cols);
}

void nf4_init(nf4_matrix *q, int64_t rows, int64_t cols, void *buf)
{
    float *f = buf;
    q->rows = rows;
    q->cols = cols;
    q->quant_map = f;
    q->nested_map = f + 16;
    q->nested_absmax = f + 16 + 256;
    q->offset = 0.0f;
    q->codes = (uint8_t *)(f + 16 + 256 + nf4_nested_blocks(rows, cols) + 1);
    q->absmax_q = q->codes + (rows * cols + 1) / 2;
    memcpy(q->quant_map, nf4_values, sizeof nf4_values);
    nf4_dynamic_map(q->nested_map);
}

/* torch.linspace(0.1, 1, n, dtype=float32) as PyTorch's CPU kernel computes
 * it (measured against Debian's torch 1.13, AVX2 build): a scalar element is
 * start + step * i (i < n / 2) or end - step * (n - 1 - i), each one fused
 * multiply-add; while 16 or more remain, two vectors of 8, each from such a
 * base plus lane * step (product and sum rounded apart). bitsandbytes' map
 * is this recipe run on whatever torch its user has: checkpoints carry
 * theirs (nested_quant_map), which is what reading uses. */
static float linspace_at(float start, float end, float step, int n, int i)
{
    return i < n / 2 ? fmaf(step, (float)i, start) : fmaf(-step, (float)(n - 1 - i), end);
}

static void linspace(float *out, int n)
{
    const float start = 0.1f, end = 1.0f;
    float step = (end - start) / (float)(n - 1);
    int i = 0;
    for (; i + 16 <= n; i += 16) /* two vectors, each from its own base */
        for (int v = i; v < i + 16; v += 8) {
            float base = linspace_at(start, end, step, n, v);
            for (int l = 0; l < 8; l++) out[v + l] = base + (float)l * step;
        }
    for (; i < n; i++) out[i] = linspace_at(start, end, step, n, i);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7,
 * total_bits=8): for e = 0..6, the 2^e midpoints of linspace(0.1, 1,
 * 2^e + 1) times 10^(e-6) (an fp32 product), both signs; then 0 and 1;
 * sorted. */
void nf4_dynamic_map(float map[256])
{
    static const double pow10[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    float b[65];
    int k = 0;
    for (int e = 0; e < 7; e++) {
        int items = (1 << e) + 1;
        linspace(b, items);
        float scale = (float)pow10[e];
        for (int j = 0; j + 1 < items; j++) {
            float mean = (b[j] + b[j + 1]) / 2.0f;
            map[k++] = scale * mean;
            map[k++] = -scale * mean;
        }
    }
    map[k++] = 0.0f;
    map[k++] = 1.0f;
    qsort(map, 256, sizeof *map, cmp_float);
}

/* The 4-bit code of x (x already scaled): how many midpoints are below it. */
static inline uint8_t nf4_code(float x, const float mid[15])
{
    int c = 0;
    for (int k = 0; k < 15; k++) c += x > mid[k];
    return (uint8_t)c;
}

static void nf4_midpoints(float mid[15])
{
    for (int k = 0; k < 15; k++)
        mid[k] = (float)(((double)nf4_values[k] + (double)nf4_values[k + 1]) * 0.5);
}

/* bitsandbytes' 8-bit code of x (scaled) in a sorted 256-entry map. */
static uint8_t quantize8(const float *map, float x)
{
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f, val = map[pivot];
    for (int step = 64; step > 0; step >>= 1) {
        if (x > val) {
            lower_pivot = pivot;
            lower = val;
            pivot += step;
        } else {
            upper_pivot = pivot;
            upper = val;
            pivot -= step;
        }
        val = map[pivot];
    }
    if (upper_pivot == 255) upper = map[upper_pivot];
    if (lower_pivot == 0) lower = map[lower_pivot];
    if (x > val) return (uint8_t)(x > (upper + val) * 0.5f ? upper_pivot : pivot);
    return (uint8_t)(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

void nf4_quantize(nf4_matrix *q, const float *w, float *absmax)
{
    const int64_t n = q->rows * q->cols, nb = nf4_blocks(q->rows, q->cols);
    const int64_t nb2 = nf4_nested_blocks(q->rows, q->cols);
    float mid[15];
    nf4_midpoints(mid);
    /* 4-bit codes and the fp32 absmax of every block */
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; b++) {
        int64_t i0 = b * NF4_BLOCK, i1 = i0 + NF4_BLOCK < n ? i0 + NF4_BLOCK : n;
        float amax = 0.0f;
        for (int64_t i = i0; i < i1; i++) amax = fmaxf(amax, fabsf(w[i]));
        absmax[b] = amax;
        float r = 1.0f / amax;
        for (int64_t i = i0; i < i1; i += 2) {
            uint8_t hi = nf4_code(w[i] * r, mid);
            uint8_t lo = nf4_code((i + 1 < n ? w[i + 1] : 0.0f) * r, mid);
            q->codes[i / 2] = (uint8_t)(hi << 4 | lo);
        }
    }
    /* offset = mean of absmax */
    double sum = 0.0;
    for (int64_t b = 0; b < nb; b++) sum += absmax[b];
    float offset = nb ? (float)(sum / (double)nb) : 0.0f;
    q->offset = offset;
    /* absmax - offset, 8 bits in blocks of 256 */
#pragma omp parallel for schedule(static)
    for (int64_t b2 = 0; b2 < nb2; b2++) {
        int64_t j0 = b2 * NF4_NESTED_BLOCK;
        int64_t j1 = j0 + NF4_NESTED_BLOCK < nb ? j0 + NF4_NESTED_BLOCK : nb;
        float amax = 0.0f;
        for (int64_t j = j0; j < j1; j++) amax = fmaxf(amax, fabsf(absmax[j] - offset));
        q->nested_absmax[b2] = amax;
        float r = 1.0f / amax;
        for (int64_t j = j0; j < j1; j++)
            q->absmax_q[j] = quantize8(q->nested_map, (absmax[j] - offset) * r);
    }
}

float nf4_block_absmax(const nf4_matrix *q, int64_t block)
{
    float a = q->nested_map[q->absmax_q[block]] * q->nested_absmax[block / NF4_NESTED_BLOCK];
    return a + q->offset;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* Whole blocks b0 .. b0 + nb - 1 into dst with AVX-512: each block's 16
 * table values times its absmax (the same fp32 products as the scalar
 * loop's lut), 64 codes looked up with one permute per 16. The same bits as
 * the scalar path below. */
__attribute__((target("avx512f"))) static void dequantize_blocks_avx512(const nf4_matrix *q,
                                                                      int64_t b0, int64_t nb,
                                                                      float *dst)
{
    /* element 2j is the high nibble of byte j, element 2j + 1 the low one */
    const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7,
                                            23);
    const __m512i second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14,
                                             30, 15, 31);
    const __m512i low = _mm512_set1_epi32(15);
    const __m512 map = _mm512_loadu_ps(q->quant_map);
    for (int64_t b = b0; b < b0 + nb; b++, dst += NF4_BLOCK) {
        __m512 lut = _mm512_mul_ps(map, _mm512_set1_ps(nf4_block_absmax(q, b)));
        const uint8_t *c = q->codes + b * (NF4_BLOCK / 2);
        for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + 16 * h)));
            __m512i hi = _mm512_srli_epi32(v, 4), lo = _mm512_and_epi32(v, low);
            _mm512_storeu_ps(dst + 32 * h,
                             _mm512_permutexvar_ps(_mm512_permutex2var_epi32(hi, first, lo), lut));
            _mm512_storeu_ps(dst + 32 * h + 16,
                             _mm512_permutexvar_ps(_mm512_permutex2var_epi32(hi, second, lo), lut));
        }
    }
}

#else
static void dequantize_blocks_avx512(const nf4_matrix *q, int64_t b0, int64_t nb, float *dst)
{
    (void)q, (void)b0, (void)nb, (void)dst;
}
#endif

/* 1 where the CPU has AVX-512 (gemm_avx512_supported, decided once). */
static int use_avx512(void)
{
    static _Atomic int have = -1;
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        h = gemm_avx512_supported();
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}

void nf4_dequantize_range(const nf4_matrix *q, int64_t start, int64_t count, float *dst)
{
    int64_t i = start, end = start + count;
    const int vec = use_avx512();
    while (i < end) {
        int64_t b = i / NF4_BLOCK, bend = (b + 1) * NF4_BLOCK < end ? (b + 1) * NF4_BLOCK : end;
        if (vec && i % NF4_BLOCK == 0 && end - i >= NF4_BLOCK) { /* whole blocks */
            int64_t nb = (end - i) / NF4_BLOCK;
            dequantize_blocks_avx512(q, b, nb, dst + (i - start));
            i += nb * NF4_BLOCK;
            continue;
        }
        float a = nf4_block_absmax(q, b), lut[16];
        for (int k = 0; k < 16; k++) lut[k] = q->quant_map[k] * a;
        float *d = dst + (i - start);
        if (i & 1) *d++ = lut[q->codes[i++ / 2] & 15];
        for (; i + 1 < bend; i += 2) {
            uint8_t c = q->codes[i / 2];
            *d++ = lut[c >> 4];
            *d++ = lut[c & 15];
        }
        if (i < bend) *d = lut[q->codes[i++ / 2] >> 4];
    }
}

void nf4_dequantize(const nf4_matrix *q, float *w)
{
    const int64_t n = q->rows * q->cols;
    const int64_t chunk = 64 * NF4_BLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < n; s += chunk)
        nf4_dequantize_range(q, s, n - s < chunk ? n - s : chunk, w + s);
}

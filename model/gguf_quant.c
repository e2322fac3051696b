/* gguf_quant.c — ggml's tensor types: block sizes of every type a GGUF
 * file may name, and dequantization to fp32 of F32, F16, BF16, Q8_0, Q4_0,
 * Q4_1, Q4_K and Q6_K.
 *
 * Block layouts (little-endian, f16 = IEEE half):
 *   Q8_0 (32 values, 34 bytes): f16 d; int8 q[32];            x = d*q
 *   Q4_0 (32, 18): f16 d; u8 qs[16]: value j in the low nibble of qs[j],
 *                  value j+16 in the high nibble;             x = d*(q-8)
 *   Q4_1 (32, 20): f16 d, f16 m; qs[16] as Q4_0;              x = d*q + m
 *   Q4_K (256, 144): f16 d, f16 dmin; u8 scales[12]: eight 6-bit scales
 *                  and eight 6-bit mins; u8 qs[128]. Sub-block s (32
 *                  values) takes the low nibbles (s even) or high nibbles
 *                  (s odd) of qs[32*(s/2) ..]; x = (d*sc_s)*q - dmin*m_s.
 *                  For s < 4: sc = scales[s] & 63, m = scales[s+4] & 63;
 *                  else sc = scales[s+4] & 15 | (scales[s-4] >> 6) << 4,
 *                       m  = scales[s+4] >> 4 | (scales[s]   >> 6) << 4.
 *   Q6_K (256, 210): u8 ql[128], u8 qh[64], int8 scales[16], f16 d. In
 *                  each half h (128 values), value 32*g + l (g < 4, l < 32)
 *                  has low 4 bits from ql[64h + l + 32*(g&1)] (low nibble
 *                  for g < 2, high nibble else), high 2 bits from bits
 *                  2g, 2g+1 of qh[32h + l]; q in [0, 64) minus 32;
 *                  x = (d*scales[i/16])*q for value i of the block.
 * Products are rounded as ggml's reference C (no fused multiply-add: C11
 * without contraction), so results equal the gguf Python package's. */
#include "import.h"
#include "kernels.h"

#include <string.h>

typedef struct {
    const char *name;
    int64_t elems;
    size_t bytes;
} type_info;

/* Indexed by ggml type number; NULL names are numbers ggml retired. */
static const type_info types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 40},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},
};
#define NUM_TYPES (sizeof types / sizeof types[0])

const char *gguf_type_name(uint32_t type)
{
    return type < NUM_TYPES ? types[type].name : NULL;
}

int gguf_type_block(uint32_t type, int64_t *elems, size_t *bytes)
{
    if (type >= NUM_TYPES || !types[type].name) return -1;
    *elems = types[type].elems;
    *bytes = types[type].bytes;
    return 0;
}

bool gguf_type_supported(uint32_t type)
{
    switch (type) {
    case GGML_F32: case GGML_F16: case GGML_BF16: case GGML_Q8_0: case GGML_Q4_0:
    case GGML_Q4_1: case GGML_Q4_K: case GGML_Q6_K:
        return true;
    default:
        return false;
    }
}

static float half(const unsigned char *p)
{
    return kernels_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void q8_0(const unsigned char *b, float *y)
{
    float d = half(b);
    for (int j = 0; j < 32; j++) y[j] = d * (float)(int8_t)b[2 + j];
}

static void q4_0(const unsigned char *b, float *y)
{
    float d = half(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((b[2 + j] & 15) - 8);
        y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
    }
}

static void q4_1(const unsigned char *b, float *y)
{
    float d = half(b), m = half(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(b[4 + j] & 15) + m;
        y[j + 16] = d * (float)(b[4 + j] >> 4) + m;
    }
}

static void scale_min_k4(int s, const unsigned char *q, int *sc, int *m)
{
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 15) | (q[s - 4] >> 6) << 4;
        *m = (q[s + 4] >> 4) | (q[s] >> 6) << 4;
    }
}

static void q4_k(const unsigned char *b, float *y)
{
    float d = half(b), dmin = half(b + 2);
    const unsigned char *scales = b + 4, *qs = b + 16;
    for (int s = 0; s < 8; s++) {
        int sc, m;
        scale_min_k4(s, scales, &sc, &m);
        float ds = d * (float)sc, ms = dmin * (float)m;
        const unsigned char *q = qs + 32 * (s / 2);
        int shift = (s & 1) * 4;
        for (int l = 0; l < 32; l++) y[32 * s + l] = ds * (float)((q[l] >> shift) & 15) - ms;
    }
}

static void q6_k(const unsigned char *b, float *y)
{
    const unsigned char *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    float d = half(b + 208);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, g = (i % 128) / 32, l = i % 32;
        int lo = ql[64 * h + l + 32 * (g & 1)] >> (g < 2 ? 0 : 4) & 15;
        int hi = qh[32 * h + l] >> (2 * g) & 3;
        y[i] = d * (float)scales[i / 16] * (float)((lo | hi << 4) - 32);
    }
}

int gguf_dequantize(uint32_t type, const void *src, float *dst, int64_t n)
{
    const unsigned char *p = src;
    int64_t be;
    size_t bb;
    if (!gguf_type_supported(type) || n < 0 || gguf_type_block(type, &be, &bb) || n % be)
        return -1;
    switch (type) {
    case GGML_F32:
        memcpy(dst, p, (size_t)n * 4);
        return 0;
    case GGML_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = half(p + 2 * i);
        return 0;
    case GGML_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = kernels_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    }
    void (*block)(const unsigned char *, float *) =
        type == GGML_Q8_0 ? q8_0 : type == GGML_Q4_0 ? q4_0 : type == GGML_Q4_1 ? q4_1
        : type == GGML_Q4_K ? q4_k : q6_k;
    for (int64_t k = 0; k < n / be; k++) block(p + (size_t)k * bb, dst + k * be);
    return 0;
}

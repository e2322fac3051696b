/* util.c — zero/add helpers, the thread count, sgemm peak, half floats. */
#include "kernels.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

void kernels_zero(float *x, size_t n) { memset(x, 0, n * sizeof(float)); }

void kernels_add(float *y, const float *x, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void kernels_set_threads(int n)
{
    if (n < 1) n = 1;
    omp_set_num_threads(n);
    /* The OpenMP build of OpenBLAS follows omp_set_num_threads, but keep it
     * explicit so a pthread build linked by mistake is capped too. */
    openblas_set_num_threads(n);
}

int kernels_threads(void) { return omp_get_max_threads(); }

int kernels_thread_slots(void)
{
    return omp_get_max_threads() > omp_get_num_procs() ? omp_get_max_threads()
                                                       : omp_get_num_procs();
}

const char *kernels_blas_corename(void) { return openblas_get_corename(); }

/* From figures (bench/coretypes.py, bench/README.md): on an AVX-512 CPU
 * (AMD EPYC, Zen 5) OpenBLAS's SkylakeX kernels run sgemm at 477 GFLOP/s on
 * 2 threads, its Haswell and Zen ones at 245, the generic Prescott one at
 * 30-60. So: an AVX-512 CPU gets SkylakeX unless OpenBLAS already runs an
 * AVX-512 core type (Cooperlake, SapphireRapids); an AVX2 CPU gets Haswell
 * when OpenBLAS fell back to a pre-AVX2 core type. */
const char *kernels_blas_coretype_hint(void)
{
    if (getenv("OPENBLAS_CORETYPE")) return NULL; /* the user decided */
    const char *core = openblas_get_corename();
    int avx512_core = strcasecmp(core, "SkylakeX") == 0 || strcasecmp(core, "Cooperlake") == 0 ||
                      strcasecmp(core, "SapphireRapids") == 0;
    int pre_avx2 = strcasecmp(core, "Prescott") == 0 || strcasecmp(core, "Core2") == 0 ||
                   strcasecmp(core, "Nehalem") == 0 || strcasecmp(core, "Sandybridge") == 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!avx512_core && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (pre_avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    (void)avx512_core;
    (void)pre_avx2;
    return NULL;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double kernels_sgemm_seconds(int M, int N, int K, int reps)
{
    /* Caller-owned memory would be cleaner, but this is a one-off
     * measurement, never on a training path. */
    float *a = calloc((size_t)M * K, sizeof(float)), *b = calloc((size_t)K * N, sizeof(float)),
          *c = calloc((size_t)M * N, sizeof(float));
    double best = 0;
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) * 0.1f;
        for (size_t i = 0; i < (size_t)K * N; i++) b[i] = (float)(i % 5) * 0.1f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N,
                    0.0f, c, N); /* warm-up */
        double t0 = now_seconds();
        for (int r = 0; r < reps; r++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b,
                        N, 0.0f, c, N);
        best = now_seconds() - t0;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

float kernels_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: renormalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float kernels_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The wire's two conversions, for n values (docs/PROTOCOL.md: bf16 frames):
 * round to nearest even, a NaN stays a NaN (quiet). Unaligned buffers are
 * fine: a received frame's payload has no alignment. */
void kernels_f32_to_bf16_n(void *dst, const float *src, size_t n)
{
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &src[i], 4);
        uint16_t h;
        if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu)) {
            h = (uint16_t)((b >> 16) | 0x40); /* keep NaN a NaN */
        } else {
            b += 0x7fffu + ((b >> 16) & 1); /* round to nearest even */
            h = (uint16_t)(b >> 16);
        }
        memcpy(d + 2 * i, &h, 2);
    }
}

void kernels_bf16_to_f32_n(float *dst, const void *src, size_t n)
{
    const unsigned char *b = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        dst[i] = kernels_bf16_to_f32(h);
    }
}

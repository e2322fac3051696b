/* nf4.c — NF4 linear layers (kernels/cpu/nf4_matmul.c) against fp32 matmul
 * of the same shape, in one process.
 *
 *     build/bench_nf4 [--threads T] [--reps R] [--tokens N]
 *
 * For the linear layers of a 768-wide (12 heads, FFN 2048) and a 2048-wide
 * (32 heads, 8 KV heads, FFN 5632) LLaMA, with N rows (tokens of a
 * micro-batch, default 2048): the forward out = x W^T and the input
 * gradient dx += dy W, each timed R times (median) with W in fp32
 * (matmul_forward / matmul_backward, dweight skipped) and in NF4
 * (nf4_matmul_forward / _backward, W dequantized tile by tile), alternating.
 * Prints the times, the ratio NF4 / fp32 and the memory of W in each form
 * (nf4_bytes against 4 bytes a value), then one JSON line. */
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    const char *model, *name;
    int in, out;
} shape;

int main(int argc, char **argv)
{
    int threads = 2, reps = 5, N = 2048;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) N = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_nf4 [--threads T] [--reps R] [--tokens N]\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1 || reps > 100 || N < 1) {
        fprintf(stderr, "bench_nf4: bad arguments\n");
        return 2;
    }
    kernels_set_threads(threads);
    static const shape shapes[] = {
        {"768", "qkv", 768, 3 * 768},   {"768", "o", 768, 768},
        {"768", "gate_up", 768, 4096},  {"768", "down", 2048, 768},
        {"2048", "qkv", 2048, 3072},    {"2048", "o", 2048, 2048},
        {"2048", "gate_up", 2048, 11264}, {"2048", "down", 5632, 2048},
    };
    printf("bench_nf4: %d threads, %d tokens, median of %d, kernel %s\n", threads, N, reps,
           kernels_gemm_name());
    printf("%-6s %-8s %11s | %9s %9s %6s | %9s %9s %6s | %6s\n", "model", "layer", "W [out,in]",
           "fwd fp32", "fwd nf4", "ratio", "bwd fp32", "bwd nf4", "ratio", "memory");
    char json[4096];
    size_t jl = (size_t)snprintf(json, sizeof json, "{\"threads\":%d,\"tokens\":%d,\"layers\":[",
                                 threads, N);
    uint64_t seed = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int IC = shapes[s].in, OC = shapes[s].out;
        size_t nw = (size_t)IC * OC;
        float *w = malloc(nw * 4), *x = malloc((size_t)N * IC * 4);
        float *y = malloc((size_t)N * OC * 4), *dx = malloc((size_t)N * IC * 4);
        float *absmax = malloc((size_t)nf4_blocks(OC, IC) * 4);
        size_t slot = nf4_matmul_scratch_floats(N, IC, OC);
        float *scratch = malloc(slot * (size_t)threads * 4);
        void *buf = malloc(nf4_bytes(OC, IC));
        if (!w || !x || !y || !dx || !absmax || !scratch || !buf) {
            fprintf(stderr, "bench_nf4: out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < nw; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            w[i] = ((float)(seed >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
        }
        for (size_t i = 0; i < (size_t)N * IC; i++) x[i] = w[i % nw] * 25.0f;
        nf4_matrix q;
        nf4_init(&q, OC, IC, buf);
        nf4_quantize(&q, w, absmax);
        double t[4][100];
        for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
            double t0 = now();
            matmul_forward(y, x, w, N, IC, OC, 0);
            double t1 = now();
            nf4_matmul_forward(y, x, &q, N, 0, scratch, threads);
            double t2 = now();
            matmul_backward(dx, NULL, y, x, w, N, IC, OC);
            double t3 = now();
            nf4_matmul_backward(dx, y, &q, N, scratch, threads);
            double t4 = now();
            if (r >= 0) t[0][r] = t1 - t0, t[1][r] = t2 - t1, t[2][r] = t3 - t2, t[3][r] = t4 - t3;
        }
        for (int k = 0; k < 4; k++) qsort(t[k], (size_t)reps, sizeof(double), cmp_double);
        double m[4];
        for (int k = 0; k < 4; k++) m[k] = t[k][reps / 2] * 1e3;
        double mem = (double)nf4_bytes(OC, IC) / (double)(nw * 4);
        char dims[32];
        snprintf(dims, sizeof dims, "%dx%d", OC, IC);
        printf("%-6s %-8s %11s | %7.2fms %7.2fms %5.2fx | %7.2fms %7.2fms %5.2fx | %5.3fx\n",
               shapes[s].model, shapes[s].name, dims, m[0], m[1], m[1] / m[0], m[2], m[3],
               m[3] / m[2], mem);
        jl += (size_t)snprintf(json + jl, sizeof json - jl,
                               "%s{\"model\":\"%s\",\"layer\":\"%s\",\"out\":%d,\"in\":%d,"
                               "\"fwd_fp32_ms\":%.3f,\"fwd_nf4_ms\":%.3f,\"bwd_fp32_ms\":%.3f,"
                               "\"bwd_nf4_ms\":%.3f,\"memory_ratio\":%.4f}",
                               s ? "," : "", shapes[s].model, shapes[s].name, OC, IC, m[0],
                               m[1], m[2], m[3], mem);
        free(w), free(x), free(y), free(dx), free(absmax), free(scratch), free(buf);
    }
    printf("%s]}\n", json);
    return 0;
}

/* bench.c — `shardnode bench`: timed training steps on random tokens, and
 * this machine's sgemm peak, as JSON lines for bench/ scripts.
 *
 * --sgemm prints two rates for a 2048^3 product on --threads threads:
 * sgemm_gflops, OpenBLAS's cblas_sgemm (the core type OPENBLAS_CORETYPE or
 * OpenBLAS's detection chose, blas_core), and matmul_gflops, the kernels'
 * matmul_forward as training runs it (fixed tiles; its kernel is "gemm":
 * shardnode's own AVX-512 one, or OpenBLAS). */
#include "commands.h"
#include "runtime.h"

#include "kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* matmul_forward of n x n x n, `reps` times after a warm-up; seconds. */
static double matmul_seconds(int n, int reps)
{
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    double s = 0;
    if (a && b && c) {
        for (size_t i = 0; i < nn; i++) {
            a[i] = (float)(i % 7) * 0.1f;
            b[i] = (float)(i % 5) * 0.1f;
        }
        matmul_forward(c, a, b, n, n, n, 0);
        double t0 = now_ms();
        for (int r = 0; r < reps; r++) matmul_forward(c, a, b, n, n, n, 0);
        s = (now_ms() - t0) * 1e-3;
    }
    free(a);
    free(b);
    free(c);
    return s;
}

static int bench_sgemm(void)
{
    int n = 2048, reps = 10;
    double s = kernels_sgemm_seconds(n, n, n, reps), m = matmul_seconds(n, reps);
    if (s <= 0 || m <= 0) {
        fprintf(stderr, "shardnode bench: out of memory for the sgemm measurement\n");
        return 1;
    }
    double flops = 2.0 * n * n * (double)n * reps;
    printf("{\"sgemm_gflops\": %.1f, \"matmul_gflops\": %.1f, \"n\": %d, \"threads\": %d, "
           "\"blas_core\": \"%s\", \"gemm\": \"%s\"}\n",
           flops / s * 1e-9, flops / m * 1e-9, n, kernels_threads(), kernels_blas_corename(),
           kernels_gemm_name());
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    const char *config = NULL, *batch = "4", *seq = "256", *steps = "3", *threads = NULL,
               *seed = "1", *device = "cpu";
    bool sgemm = false;
    const args_option opts[] = {
        {"--config", &config, NULL}, {"--batch", &batch, NULL}, {"--seq", &seq, NULL},
        {"--steps", &steps, NULL},   {"--threads", &threads, NULL},
        {"--seed", &seed, NULL},     {"--sgemm", NULL, &sgemm},
        {"--device", &device, NULL},
    };
    int nopts = (int)(sizeof opts / sizeof opts[0]);
    char err[512];
    long B, T, K, nthreads = 0, sd;
    llama_config cfg;
    split_plan plan;
    chain c = {0};
    kdev *dev = NULL;
    int32_t *ids = NULL, *labels = NULL;
    int rc = 1;

    if (args_parse(argc, argv, 2, opts, nopts, err, sizeof err)) goto done;
    if (threads && args_int(threads, "--threads", 1, 1024, &nthreads, err, sizeof err))
        goto done;
    if (nthreads) kernels_set_threads((int)nthreads);
    if (sgemm) return bench_sgemm();
    if (!config) {
        snprintf(err, sizeof err, "--config is required (or --sgemm)");
        goto done;
    }
    if (args_int(batch, "--batch", 1, 4096, &B, err, sizeof err) ||
        args_int(seq, "--seq", 1, 1 << 20, &T, err, sizeof err) ||
        args_int(steps, "--steps", 1, 1000000, &K, err, sizeof err) ||
        args_int(seed, "--seed", 0, INT32_MAX, &sd, err, sizeof err) ||
        llama_config_load(&cfg, config, err, sizeof err) ||
        split_parse(&plan, NULL, cfg.num_hidden_layers, "--split", err, sizeof err) ||
        kdev_open(device, &dev, err, sizeof err) != KDEV_OK ||
        chain_create_on(&c, &cfg, &plan, (int)B, (int)T, NULL, dev, err, sizeof err))
        goto done;
    stage_init_weights(c.stages[0], (uint64_t)sd);
    ids = malloc((size_t)(B * T) * sizeof *ids);
    labels = malloc((size_t)(B * T) * sizeof *labels);
    if (!ids || !labels) {
        snprintf(err, sizeof err, "out of memory for the batch");
        goto done;
    }
    /* Random tokens from a fixed generator: the figure must not depend on data. */
    uint64_t x = (uint64_t)sd * 2654435761u + 1;
    for (long i = 0; i < B * T; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)cfg.vocab_size);
    }
    for (long i = 0; i < B * T; i++)
        labels[i] = i % T == T - 1 ? KERNELS_IGNORE_INDEX : ids[i + 1];
    const stage_adamw opt = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (long step = 0; step <= K; step++) { /* step 0 is the unmeasured warm-up */
        double t0 = now_ms(), loss;
        int kept = 0;
        stage_zero_grads(c.stages[0]);
        if (chain_forward_backward(&c, ids, labels, 0.0f, &loss, &kept, err, sizeof err))
            goto done;
        loss /= kept;
        chain_adamw_step(&c, &opt, (int)step + 1, 1.0f);
        if (chain_sync(&c, err, sizeof err)) goto done; /* a GPU's step has ended */
        double ms = now_ms() - t0;
        if (step > 0) {
            printf("{\"step\": %ld, \"step_ms\": %.1f, \"tokens_per_s\": %.1f, \"loss\": %.6f}\n",
                   step, ms, (double)(B * T) / ms * 1e3, loss);
            fflush(stdout);
        }
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "shardnode bench: %s\n", err);
    chain_free(&c);
    kdev_close(dev);
    free(ids);
    free(labels);
    return rc;
}

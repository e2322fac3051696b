/* crossentropy.c — softmax cross-entropy over the vocabulary with ignore index.
 *   logits/probs, dlogits [N, V]; labels [N] in [0, V) or KERNELS_IGNORE_INDEX */
#include "kernels.h"

#include "elementwise.h"

#include <math.h>

double crossentropy_forward(float *probs_inplace, float *losses, const int32_t *labels,
                            int N, int V, int *kept)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = probs_inplace + (size_t)n * V;
        float mx = x[0];
#pragma omp simd reduction(max : mx)
        for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
        int l = labels[n];
        /* the loss from the logit itself, before it is overwritten */
        float target = l == KERNELS_IGNORE_INDEX ? 0.0f : x[l] - mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; i++) {
            x[i] = kernels_expf(x[i] - mx);
            sum += x[i];
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) x[i] *= inv;
        float loss = l == KERNELS_IGNORE_INDEX ? 0.0f : logf(sum) - target;
        losses[n] = loss;
    }
    /* The total in row order, by one thread: the same bits for any thread
     * count (an OpenMP reduction adds per-thread partial sums). */
    double total = 0.0;
    int count = 0;
    for (int n = 0; n < N; n++)
        if (labels[n] != KERNELS_IGNORE_INDEX) {
            total += losses[n];
            count++;
        }
    *kept = count;
    return total;
}

void crossentropy_backward(float *dlogits, const float *probs, const int32_t *labels,
                           int N, int V, float scale)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        int l = labels[n];
        if (l == KERNELS_IGNORE_INDEX) {
            for (int i = 0; i < V; i++) d[i] = 0.0f;
            continue;
        }
        for (int i = 0; i < V; i++) d[i] = scale * p[i];
        d[l] -= scale;
    }
}

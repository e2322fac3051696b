/* rope.c — rotary position embedding, HF rotate_half convention: the pair
 * rotated together is (x[i], x[i + HD/2]), angle t * theta^(-2i/HD).
 *   x [N, ld] with `nheads` heads of HD at the start of each row;
 *   cos_tab, sin_tab [T, HD/2]; row n has position n % T. */
#include "kernels.h"

#include <math.h>

void rope_tables(float *cos_tab, float *sin_tab, int T, int HD, float theta)
{
    int h = HD / 2;
    for (int i = 0; i < h; i++) {
        /* HF computes inv_freq in fp32; the angle in double keeps large t exact. */
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)HD);
        for (int t = 0; t < T; t++) {
            double a = (double)t * (double)inv_freq;
            cos_tab[(size_t)t * h + i] = (float)cos(a);
            sin_tab[(size_t)t * h + i] = (float)sin(a);
        }
    }
}

/* sign = +1 rotates forward; -1 applies the transpose (the backward). */
static void rope_apply(float *x, const float *cos_tab, const float *sin_tab,
                       int N, int T, int nheads, int HD, int ld, float sign)
{
    int h = HD / 2;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *cs = cos_tab + (size_t)(n % T) * h, *sn = sin_tab + (size_t)(n % T) * h;
        for (int hd = 0; hd < nheads; hd++) {
            float *v = x + (size_t)n * ld + (size_t)hd * HD;
            for (int i = 0; i < h; i++) {
                float a = v[i], b = v[i + h], s = sign * sn[i];
                v[i] = a * cs[i] - b * s;
                v[i + h] = b * cs[i] + a * s;
            }
        }
    }
}

void rope_forward(float *x, const float *cos_tab, const float *sin_tab,
                  int N, int T, int nheads, int HD, int ld)
{
    rope_apply(x, cos_tab, sin_tab, N, T, nheads, HD, ld, 1.0f);
}

void rope_backward(float *dx, const float *cos_tab, const float *sin_tab,
                   int N, int T, int nheads, int HD, int ld)
{
    rope_apply(dx, cos_tab, sin_tab, N, T, nheads, HD, ld, -1.0f);
}

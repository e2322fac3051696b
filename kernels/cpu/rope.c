/* rope.c — rotary position embedding, HF rotate_half convention: the pair
 * rotated together is (x[i], x[i + HD/2]), angle t * theta^(-2i/HD).
 *   x [N, ld] with `nheads` heads of HD at the start of each row;
 *   cos_tab, sin_tab [T, HD/2]; row n has position n % T. */
#include "kernels.h"

#include <math.h>

/* HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all fp32. */
static float default_inv_freq(int i, int HD, float theta)
{
    return 1.0f / powf(theta, (float)(2 * i) / (float)HD);
}

/* Column i of the tables; the angle in double keeps large t exact. */
static void fill_column(float *cos_tab, float *sin_tab, int T, int h, int i, float inv_freq)
{
    for (int t = 0; t < T; t++) {
        double a = (double)t * (double)inv_freq;
        cos_tab[(size_t)t * h + i] = (float)cos(a);
        sin_tab[(size_t)t * h + i] = (float)sin(a);
    }
}

void rope_inv_freq(float *inv_freq, int HD, float theta)
{
    for (int i = 0; i < HD / 2; i++) inv_freq[i] = default_inv_freq(i, HD, theta);
}

void rope_tables_freq(float *cos_tab, float *sin_tab, int T, int HD, const float *inv_freq)
{
    for (int i = 0; i < HD / 2; i++) fill_column(cos_tab, sin_tab, T, HD / 2, i, inv_freq[i]);
}

void rope_tables(float *cos_tab, float *sin_tab, int T, int HD, float theta)
{
    for (int i = 0; i < HD / 2; i++)
        fill_column(cos_tab, sin_tab, T, HD / 2, i, default_inv_freq(i, HD, theta));
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

/* matmul.c — linear layers through OpenBLAS sgemm.
 * Weights are HF-style [OC, IC] row-major, so forward is inp @ W^T. */
#include "kernels.h"

#include <cblas.h>

/* out[N,OC] = inp[N,IC] @ weight[OC,IC]^T (+ out when accumulate) */
void matmul_forward(float *out, const float *inp, const float *weight,
                    int N, int IC, int OC, int accumulate)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, weight,
                IC, accumulate ? 1.0f : 0.0f, out, OC);
}

/* dinp[N,IC] += dout[N,OC] @ weight[OC,IC]; dweight[OC,IC] += dout^T @ inp */
void matmul_backward(float *dinp, float *dweight, const float *dout,
                     const float *inp, const float *weight, int N, int IC, int OC)
{
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC,
                    weight, IC, 1.0f, dinp, IC);
    if (dweight)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp,
                    IC, 1.0f, dweight, IC);
}

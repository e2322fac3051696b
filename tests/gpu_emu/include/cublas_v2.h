/* cublas_v2.h — tests/gpu_emu's stand-in for cuBLAS: the handle calls and
 * cublasSgemm that kernels/gpu/gemm.cu makes, with cuBLAS's documented
 * semantics (column-major, op(A) m x k, op(B) k x n, lda >= rows of A as
 * stored, alpha and beta read on the host at the call, C not read when beta
 * is 0), queued on the handle's stream and computed by a plain loop on the
 * host (../runtime.cpp); cublasGemmEx for bf16 operands likewise. It
 * checks how gemm.cu calls cuBLAS, not cuBLAS.
 * Not NVIDIA's header: only the names kernels/gpu uses. */
#ifndef SHARDNODE_GPU_EMU_CUBLAS_V2_H
#define SHARDNODE_GPU_EMU_CUBLAS_V2_H

#include "cuda_runtime.h"

#include <new>

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
/* cublasGemmEx's types (library_types.h and cublas_api.h's numbers): only
 * those gemm.cu passes are accepted by the stand-in */
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
typedef cudaDataType_t cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

struct emu_blas_handle {
    cudaStream_t stream;
    cublasMath_t math;
};
typedef emu_blas_handle *cublasHandle_t;

inline cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new (std::nothrow) emu_blas_handle{nullptr, CUBLAS_DEFAULT_MATH};
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m != CUBLAS_DEFAULT_MATH && m != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}
inline const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN (emulated)";
}

inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const float *alpha, const float *A, int lda, const float *B,
                                  int ldb, const float *beta, float *C, int ldc)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (h->math != CUBLAS_DEFAULT_MATH) return CUBLAS_STATUS_INVALID_VALUE; /* no TF32 here */
    int ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    int rows_a = ta ? k : m, rows_b = tb ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < (rows_a > 1 ? rows_a : 1) ||
        ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    int e = emu::sgemm(h->stream, ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    return e ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

/* cublasGemmEx as gemm.cu calls it: A and B bf16 (CUDA_R_16BF), C fp32,
 * CUBLAS_COMPUTE_32F (alpha and beta floats); or all fp32, as cublasSgemm.
 * Other type combinations: CUBLAS_STATUS_NOT_SUPPORTED. The same argument
 * checks as cublasSgemm; the products of bf16 values are exact in fp32. */
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType_t Atype, int lda,
                                   const void *B, cudaDataType_t Btype, int ldb, const void *beta,
                                   void *C, cudaDataType_t Ctype, int ldc,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (computeType != CUBLAS_COMPUTE_32F || Ctype != CUDA_R_32F || Atype != Btype ||
        (Atype != CUDA_R_16BF && Atype != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (Atype == CUDA_R_32F)
        return cublasSgemm(h, transa, transb, m, n, k, (const float *)alpha, (const float *)A, lda,
                           (const float *)B, ldb, (const float *)beta, (float *)C, ldc);
    int ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    int rows_a = ta ? k : m, rows_b = tb ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < (rows_a > 1 ? rows_a : 1) ||
        ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    int e = emu::gemm_bf16(h->stream, ta, tb, m, n, k, *(const float *)alpha, (const uint16_t *)A,
                           lda, (const uint16_t *)B, ldb, *(const float *)beta, (float *)C, ldc);
    return e ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

#endif

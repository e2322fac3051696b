/* compat.h — one source for NVIDIA and AMD: the CUDA runtime names this
 * folder uses, mapped to HIP's when hipcc (clang, AMD) compiles it, the warp
 * width as a compile-time constant, and the warp shuffle.
 *
 * On NVIDIA: cuda_runtime.h, cuBLAS, warps of 32, __shfl_xor_sync.
 * On AMD: hip_runtime.h, the cuda* names below #defined to hip*, wavefronts
 * of __AMDGCN_WAVEFRONT_SIZE in device code (64 on GCN/CDNA, 32 on RDNA),
 * __shfl_xor with a width and no mask. hipBLAS only when SHARDNODE_HIPBLAS
 * is defined (Debian bookworm has none); otherwise the project's own GEMM.
 *
 * Only names the sources use are mapped: add one here before using it. */
#ifndef SHARDNODE_GPU_COMPAT_H
#define SHARDNODE_GPU_COMPAT_H

#if defined(__HIPCC__) || defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#define SN_HIP 1
#include <hip/hip_runtime.h>

#define SN_VENDOR "hip"

/* runtime */
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDevice hipGetDevice
#define cudaSetDevice hipSetDevice
#define cudaDeviceProp hipDeviceProp_t
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaMemGetInfo hipMemGetInfo
#define cudaStream_t hipStream_t
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMallocHost(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)
#define cudaFreeHost hipHostFree
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice

#ifdef SHARDNODE_HIPBLAS
#define SN_BLAS 1
#define SN_BLAS_NAME "hipblas"
#if __has_include(<hipblas/hipblas.h>)
#include <hipblas/hipblas.h>
#else
#include <hipblas.h>
#endif
#define cublasHandle_t hipblasHandle_t
#define cublasStatus_t hipblasStatus_t
#define CUBLAS_STATUS_SUCCESS HIPBLAS_STATUS_SUCCESS
#define CUBLAS_OP_N HIPBLAS_OP_N
#define CUBLAS_OP_T HIPBLAS_OP_T
#define cublasCreate hipblasCreate
#define cublasDestroy hipblasDestroy
#define cublasSetStream hipblasSetStream
#define cublasSgemm hipblasSgemm
#define SN_BLAS_STATUS_STRING(s) hipblasStatusToString(s)
#endif

/* The wavefront width of the target being compiled. The host pass of
 * hipcc sees some value too, never used there: device code only. */
#ifdef __AMDGCN_WAVEFRONT_SIZE
#define SN_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define SN_WARP 64
#endif

static __device__ __forceinline__ float sn_shfl_xor(float v, int mask)
{
    return __shfl_xor(v, mask, SN_WARP);
}

#else /* NVIDIA */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define SN_VENDOR "cuda"
#define SN_BLAS 1
#define SN_BLAS_NAME "cublas"
#define SN_BLAS_STATUS_STRING(s) cublasGetStatusString(s)
/* cublasGemmEx with bf16 operands (CUDA_R_16BF), fp32 results and sums */
#define SN_BLAS_BF16 1
#define SN_WARP 32

static __device__ __forceinline__ float sn_shfl_xor(float v, int mask)
{
    return __shfl_xor_sync(0xffffffffu, v, mask, SN_WARP);
}
#endif

/* Largest block any kernel here launches, and the most warps it can hold
 * at the narrowest width (32): the size of a block reduction's slots. */
#define SN_MAX_BLOCK 1024
#define SN_MAX_WARPS (SN_MAX_BLOCK / 32)

#endif

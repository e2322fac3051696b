/* cuda_runtime.h — tests/gpu_emu's stand-in for the CUDA runtime header,
 * found before any real one by the emulated build's include path: the
 * runtime calls kernels/gpu makes, with the CUDA documentation's semantics,
 * on the emulated device of ../runtime.cpp. Not NVIDIA's header: only the
 * names kernels/gpu uses (add one here when it uses another). */
#ifndef SHARDNODE_GPU_EMU_CUDA_RUNTIME_H
#define SHARDNODE_GPU_EMU_CUDA_RUNTIME_H

#include "emu_device.h"

#include <stdio.h>

enum cudaError {
    cudaSuccess = emu::ok,
    cudaErrorInvalidValue = emu::err_invalid_value,
    cudaErrorMemoryAllocation = emu::err_memory_allocation,
    cudaErrorInvalidConfiguration = emu::err_invalid_configuration,
    cudaErrorNoDevice = emu::err_no_device,
    cudaErrorInvalidDevice = emu::err_invalid_device,
    cudaErrorInvalidResourceHandle = emu::err_invalid_handle,
    cudaErrorIllegalAddress = emu::err_illegal_address,
    cudaErrorLaunchOutOfResources = emu::err_launch_out_of_resources,
    cudaErrorLaunchFailure = emu::err_launch_failure,
};
typedef enum cudaError cudaError_t;
typedef emu_stream *cudaStream_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = emu::copy_h2h,
    cudaMemcpyHostToDevice = emu::copy_h2d,
    cudaMemcpyDeviceToHost = emu::copy_d2h,
    cudaMemcpyDeviceToDevice = emu::copy_d2d,
    cudaMemcpyDefault = emu::copy_default,
};
#define cudaStreamDefault 0x00u
#define cudaStreamNonBlocking 0x01u

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int warpSize;
    int maxThreadsPerBlock;
    int multiProcessorCount;
    int major;
    int minor;
};

inline cudaError_t cudaGetLastError(void) { return (cudaError_t)emu::get_last_error(); }
inline cudaError_t cudaPeekAtLastError(void) { return (cudaError_t)emu::peek_last_error(); }
inline const char *cudaGetErrorName(cudaError_t e) { return emu::error_name(e); }
inline const char *cudaGetErrorString(cudaError_t e) { return emu::error_string(e); }
inline cudaError_t cudaGetDeviceCount(int *n) { return (cudaError_t)emu::device_count(n); }
inline cudaError_t cudaSetDevice(int d) { return (cudaError_t)emu::set_device(d); }
inline cudaError_t cudaGetDevice(int *d) { return (cudaError_t)emu::get_device(d); }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    emu::device_desc dd;
    int e = emu::device_describe(d, &dd);
    if (e) return (cudaError_t)e;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", dd.name);
    p->totalGlobalMem = dd.total;
    p->warpSize = dd.warp;
    p->maxThreadsPerBlock = 1024;
    p->multiProcessorCount = dd.units;
    /* no compute capability: the emulation is none ("sm_00") */
    p->major = 0;
    p->minor = 0;
    return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int *v) { return (cudaError_t)emu::driver_version(v); }
inline cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot)
{
    return (cudaError_t)emu::mem_info(fr, tot);
}
inline cudaError_t cudaDeviceSynchronize(void) { return (cudaError_t)emu::device_sync(); }

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    return (cudaError_t)emu::stream_create(s, flags);
}
inline cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) { return (cudaError_t)emu::stream_destroy(s); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    return (cudaError_t)emu::stream_sync(s);
}

inline cudaError_t cudaMalloc(void **p, size_t n) { return (cudaError_t)emu::dev_malloc(p, n); }
template <class T> inline cudaError_t cudaMalloc(T **p, size_t n)
{
    return cudaMalloc((void **)p, n);
}
inline cudaError_t cudaFree(void *p) { return (cudaError_t)emu::dev_free(p); }
inline cudaError_t cudaMallocHost(void **p, size_t n)
{
    return (cudaError_t)emu::host_malloc(p, n);
}
template <class T> inline cudaError_t cudaMallocHost(T **p, size_t n)
{
    return cudaMallocHost((void **)p, n);
}
inline cudaError_t cudaFreeHost(void *p) { return (cudaError_t)emu::host_free(p); }
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t s = 0)
{
    return (cudaError_t)emu::memcpy_async(dst, src, n, (int)kind, s);
}
inline cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s = 0)
{
    return (cudaError_t)emu::memset_async(dst, v, n, s);
}

#endif

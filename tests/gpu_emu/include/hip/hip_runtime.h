/* hip/hip_runtime.h — tests/gpu_emu's stand-in for the HIP runtime header
 * (the warp-64 build defines __HIP_PLATFORM_AMD__, so kernels/gpu/compat.h
 * takes its AMD branch and maps its cuda* names to these): the runtime calls
 * kernels/gpu makes, on the emulated device of ../../runtime.cpp. Not AMD's
 * header: only the names kernels/gpu uses through compat.h. */
#ifndef SHARDNODE_GPU_EMU_HIP_RUNTIME_H
#define SHARDNODE_GPU_EMU_HIP_RUNTIME_H

#include "../emu_device.h"

#include <stdio.h>

enum hipError_t {
    hipSuccess = emu::ok,
    hipErrorInvalidValue = emu::err_invalid_value,
    hipErrorOutOfMemory = emu::err_memory_allocation,
    hipErrorInvalidConfiguration = emu::err_invalid_configuration,
    hipErrorNoDevice = emu::err_no_device,
    hipErrorInvalidDevice = emu::err_invalid_device,
    hipErrorInvalidHandle = emu::err_invalid_handle,
    hipErrorIllegalAddress = emu::err_illegal_address,
    hipErrorLaunchOutOfResources = emu::err_launch_out_of_resources,
    hipErrorLaunchFailure = emu::err_launch_failure,
};
typedef emu_stream *hipStream_t;

enum hipMemcpyKind {
    hipMemcpyHostToHost = emu::copy_h2h,
    hipMemcpyHostToDevice = emu::copy_h2d,
    hipMemcpyDeviceToHost = emu::copy_d2h,
    hipMemcpyDeviceToDevice = emu::copy_d2d,
    hipMemcpyDefault = emu::copy_default,
};
#define hipStreamDefault 0x00u
#define hipStreamNonBlocking 0x01u
#define hipHostMallocDefault 0x0u

struct hipDeviceProp_t {
    char name[256];
    char gcnArchName[256];
    size_t totalGlobalMem;
    int warpSize;
    int maxThreadsPerBlock;
    int multiProcessorCount;
    int major;
    int minor;
};

inline hipError_t hipGetLastError(void) { return (hipError_t)emu::get_last_error(); }
inline hipError_t hipPeekAtLastError(void) { return (hipError_t)emu::peek_last_error(); }
inline const char *hipGetErrorName(hipError_t e) { return emu::error_name(e); }
inline const char *hipGetErrorString(hipError_t e) { return emu::error_string(e); }
inline hipError_t hipGetDeviceCount(int *n) { return (hipError_t)emu::device_count(n); }
inline hipError_t hipSetDevice(int d) { return (hipError_t)emu::set_device(d); }
inline hipError_t hipGetDevice(int *d) { return (hipError_t)emu::get_device(d); }
inline hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int d)
{
    emu::device_desc dd;
    int e = emu::device_describe(d, &dd);
    if (e) return (hipError_t)e;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", dd.name);
    /* an architecture no compiler targets, with a feature suffix as AMD's
     * names have (backend.cu cuts at ':') */
    snprintf(p->gcnArchName, sizeof p->gcnArchName, "emu-wave%d:emulated", dd.warp);
    p->totalGlobalMem = dd.total;
    p->warpSize = dd.warp;
    p->maxThreadsPerBlock = 1024;
    p->multiProcessorCount = dd.units;
    return hipSuccess;
}
inline hipError_t hipDriverGetVersion(int *v) { return (hipError_t)emu::driver_version(v); }
inline hipError_t hipMemGetInfo(size_t *fr, size_t *tot)
{
    return (hipError_t)emu::mem_info(fr, tot);
}
inline hipError_t hipDeviceSynchronize(void) { return (hipError_t)emu::device_sync(); }

inline hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned flags)
{
    return (hipError_t)emu::stream_create(s, flags);
}
inline hipError_t hipStreamCreate(hipStream_t *s) { return hipStreamCreateWithFlags(s, 0); }
inline hipError_t hipStreamDestroy(hipStream_t s) { return (hipError_t)emu::stream_destroy(s); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return (hipError_t)emu::stream_sync(s); }

inline hipError_t hipMalloc(void **p, size_t n) { return (hipError_t)emu::dev_malloc(p, n); }
template <class T> inline hipError_t hipMalloc(T **p, size_t n) { return hipMalloc((void **)p, n); }
inline hipError_t hipFree(void *p) { return (hipError_t)emu::dev_free(p); }
inline hipError_t hipHostMalloc(void **p, size_t n, unsigned flags)
{
    if (flags != hipHostMallocDefault) return hipErrorInvalidValue; /* none emulated */
    return (hipError_t)emu::host_malloc(p, n);
}
template <class T> inline hipError_t hipHostMalloc(T **p, size_t n, unsigned flags)
{
    return hipHostMalloc((void **)p, n, flags);
}
inline hipError_t hipHostFree(void *p) { return (hipError_t)emu::host_free(p); }
inline hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, hipMemcpyKind kind,
                                 hipStream_t s = 0)
{
    return (hipError_t)emu::memcpy_async(dst, src, n, (int)kind, s);
}
inline hipError_t hipMemsetAsync(void *dst, int v, size_t n, hipStream_t s = 0)
{
    return (hipError_t)emu::memset_async(dst, v, n, s);
}

#endif

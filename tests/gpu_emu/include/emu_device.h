/* emu_device.h — what the emulated vendor headers (cuda_runtime.h,
 * hip/hip_runtime.h, cublas_v2.h in this folder) share: the CUDA/HIP
 * keywords as host C++, the built-in variables, barriers, shuffles and
 * atomics of device code, the launch that transform.py writes for
 * `kernel<<<grid, block, shmem, stream>>>(args)`, and the runtime of
 * ../runtime.cpp behind every emulated API call.
 *
 * Test code of tests/gpu_emu only: none of this is NVIDIA's or AMD's; it
 * holds the subset of their APIs kernels/gpu uses, with their documented
 * semantics. EMU_WARP (32 or 64) is the warp width of the build. */
#ifndef SHARDNODE_GPU_EMU_DEVICE_H
#define SHARDNODE_GPU_EMU_DEVICE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#ifndef EMU_WARP
#error "EMU_WARP, the warp width of the emulated device, must be defined (32 or 64)"
#endif

/* ---- keywords: device code is host code here ---------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

/* A stream: its queue of work lives in runtime.cpp. */
struct emu_stream;

#pragma GCC visibility push(hidden)

/* The emulated thread's coordinates: set by the scheduler before it resumes
 * a thread; threads switch only inside the runtime's barrier calls, so one
 * global each is exact. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

namespace emu {

/* Error codes: the CUDA runtime's numbers (HIP uses the same ones). */
enum {
    ok = 0,
    err_invalid_value = 1,
    err_memory_allocation = 2,
    err_invalid_configuration = 9,
    err_no_device = 100,
    err_invalid_device = 101,
    err_invalid_handle = 400,
    err_illegal_address = 700,
    err_launch_out_of_resources = 701,
    err_launch_failure = 719,
};
/* cudaMemcpyKind / hipMemcpyKind values */
enum { copy_h2h = 0, copy_h2d = 1, copy_d2h = 2, copy_d2d = 3, copy_default = 4 };

/* ---- the runtime (runtime.cpp); every call sets the thread's last error
 * when it fails, as the vendor runtimes do ---- */
int get_last_error();  /* and clears it (a sticky error stays) */
int peek_last_error();
const char *error_name(int e);
const char *error_string(int e);
int device_count(int *n);
int set_device(int dev);
int get_device(int *dev);
struct device_desc {
    const char *name;
    int warp, units;
    size_t total;
};
int device_describe(int dev, device_desc *out);
int driver_version(int *v);
int mem_info(size_t *free_bytes, size_t *total_bytes);
int stream_create(emu_stream **s, unsigned flags);
int stream_destroy(emu_stream *s);
int stream_sync(emu_stream *s);
int device_sync();
int dev_malloc(void **p, size_t bytes);
int dev_free(void *p);
int host_malloc(void **p, size_t bytes);
int host_free(void *p);
int memcpy_async(void *dst, const void *src, size_t bytes, int kind, emu_stream *s);
int memset_async(void *dst, int value, size_t bytes, emu_stream *s);
/* C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, column-major (BLAS), queued
 * on s; the arguments were checked by the caller (cublas_v2.h). */
int sgemm(emu_stream *s, int transa, int transb, int m, int n, int k, float alpha, const float *A,
          int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* The same with bf16 operands (their bits; cublasGemmEx with CUDA_R_16BF
 * inputs, CUDA_R_32F output and CUBLAS_COMPUTE_32F): fp32 products and sums. */
int gemm_bf16(emu_stream *s, int transa, int transb, int m, int n, int k, float alpha,
              const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta, float *C,
              int ldc);

/* ---- device side ---- */
/* file:line of the __syncthreads() call: threads of a block waiting at
 * different barriers are a fault, named with them */
void syncthreads_at(const char *file, int line);
/* One value per lane in, lane ^ lane_mask's value out (the vendors'
 * width rule: a lane whose partner lies in a later group of `width` lanes
 * gets its own value). mask: CUDA's member mask, or ~0u for HIP. */
uint64_t shfl_xor_bits(uint64_t v, int lane_mask, int width, unsigned mask);
/* Static __shared__ arrays are fresh in every block: the first thread of a
 * block to pass a declaration fills it with 0xff bytes (NaN as floats), as
 * uninitialised as a GPU's shared memory, never the previous block's. */
void shared_fresh(unsigned long long *serial, void *p, size_t bytes);
void *dynamic_shared();

/* Kernel launches: checked at once (the launch error of
 * cudaGetLastError), queued on the stream, run when the stream is waited
 * for. ptrs: each pointer argument (index, value), checked when it runs:
 * device memory of a live allocation, or null. */
void submit_kernel(const char *name, const char *where, unsigned max_threads, dim3 grid,
                   dim3 block, size_t shmem, emu_stream *s, std::function<void()> body,
                   std::vector<std::pair<int, const void *>> ptrs);

template <class T> inline dim3 to_dim3(T v)
{
    if constexpr (std::is_same_v<T, dim3> || std::is_same_v<T, uint3>) {
        return dim3(v);
    } else {
        static_assert(std::is_integral_v<T> || std::is_enum_v<T>,
                      "a launch dimension is a dim3 or an integer");
        long long n = (long long)v;
        if (n < 0 || n > 0xffffffffll) return dim3(0, 0, 0); /* refused by the launch */
        return dim3((unsigned)n);
    }
}
inline emu_stream *to_stream(emu_stream *s) { return s; }

template <class T>
inline void collect_ptr(std::vector<std::pair<int, const void *>> &out, int i, const T &v)
{
    if constexpr (std::is_pointer_v<T>) out.emplace_back(i, (const void *)v);
    else (void)out, (void)i, (void)v;
}

/* transform.py's replacement of name<<<grid, block, shmem, stream>>>(args):
 * the arguments converted to the kernel's parameter types now, at the
 * launch, as CUDA copies them; the kernel runs later. */
template <class... P, class... A>
inline void launch(const char *name, const char *where, unsigned max_threads, dim3 grid,
                   dim3 block, size_t shmem, emu_stream *s, void (*kernel)(P...), A &&...a)
{
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with a wrong argument count");
    auto args = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(a)...);
    std::vector<std::pair<int, const void *>> ptrs;
    std::apply(
        [&ptrs](const auto &...x) {
            int i = 0;
            (collect_ptr(ptrs, i++, x), ...);
        },
        *args);
    submit_kernel(name, where, max_threads, grid, block, shmem, s,
                  [kernel, args]() { std::apply(kernel, *args); }, std::move(ptrs));
}

} // namespace emu

#pragma GCC visibility pop

/* ---- device built-ins ---------------------------------------------------- */
inline void __syncthreads(const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    emu::syncthreads_at(file, line);
}

template <class T> inline T emu_shfl_xor(T v, int lane_mask, int width, unsigned mask)
{
    static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>,
                  "shuffled type");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = emu::shfl_xor_bits(bits, lane_mask, width, mask);
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}
/* CUDA */
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = EMU_WARP)
{
    return emu_shfl_xor(v, lane_mask, width, mask);
}
/* HIP: no member mask */
template <class T> inline T __shfl_xor(T v, int lane_mask, int width = EMU_WARP)
{
    return emu_shfl_xor(v, lane_mask, width, ~0u);
}

/* Bit casts between float and its 32 bits (CUDA's and HIP's intrinsics) */
inline unsigned __float_as_uint(float x)
{
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return u;
}
inline float __uint_as_float(unsigned u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Atomics: one emulated thread runs at a time and switches only at
 * barriers, so a plain read-modify-write is atomic here. */
template <class T> inline T emu_atomic_add(T *p, T v)
{
    T old = *p;
    *p = old + v;
    return old;
}
inline float atomicAdd(float *p, float v) { return emu_atomic_add(p, v); }
inline double atomicAdd(double *p, double v) { return emu_atomic_add(p, v); }
inline int atomicAdd(int *p, int v) { return emu_atomic_add(p, v); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return emu_atomic_add(p, v); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    return emu_atomic_add(p, v);
}

/* transform.py writes this after each static __shared__ declaration */
#define EMU_SHARED_FRESH(name)                                                                     \
    static unsigned long long emu_fresh_##name = 0;                                                \
    ::emu::shared_fresh(&emu_fresh_##name, (void *)&(name), sizeof(name))

#endif

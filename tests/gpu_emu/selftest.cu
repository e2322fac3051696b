/* selftest.cu — the emulation checked against itself (ctest
 * unit.gpu_emu.selftest): CUDA kernels, some right and some deliberately
 * wrong, rewritten by transform.py and run on runtime.cpp (warps of 32) as
 * kernels/gpu's are. Each case runs in a child process of its own (a
 * device fault is sticky for the process); the parent checks how it ended
 * and what it printed. A wrong kernel must end as a GPU would make it end:
 * a launch error, a sticky error at the next wait, or a crash for a host
 * access to device memory; and the right ones must compute right. */
#include <cuda_runtime.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- kernels ---------------------------------------------------------------- */

/* per block: sum of in[block*256 .. +256) by shuffles and one slot per warp */
static __global__ __launch_bounds__(256) void block_sum(float *out, const float *in)
{
    __shared__ float slots[8];
    float v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, 32);
    if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < 8; w++) s += slots[w];
        out[blockIdx.x] = s;
    }
}

/* thread 0 of each block reads its slot before any thread wrote it: a
 * GPU's shared memory is not the previous block's */
static __global__ void read_before_write(float *out)
{
    __shared__ float slot;
    if (threadIdx.x == 0) out[blockIdx.x] = slot;
    __syncthreads();
    if (threadIdx.x == 0) slot = 1.0f;
}

static __global__ void divergent_barrier(float *out)
{
    if (threadIdx.x < 32) __syncthreads();
    out[threadIdx.x] = 1.0f;
}

static __global__ void early_return(float *out)
{
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

static __global__ void add_one(float *x, int n)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] += 1.0f;
}

/* writes one element past n */
static __global__ void off_by_one(float *x, int n)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i <= n) x[i] = 2.0f;
}

static __global__ __launch_bounds__(64) void bounded(float *x)
{
    x[threadIdx.x] = 0.0f;
}

/* a shuffle in a block of 48 threads: the second warp is partial */
static __global__ void partial_warp(float *x)
{
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1, 32);
}

/* reads dynamic shared memory one float past the bytes launched with */
static __global__ void dyn_overrun(float *out, int n)
{
    extern __shared__ float dyn[];
    if (threadIdx.x == 0) out[0] = dyn[n];
}

/* ---- cases ------------------------------------------------------------------- */

#define OK(cond, ...)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "CASE FAILED at line %d: ", __LINE__);                                 \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static cudaStream_t st;

static float *dev_floats(int n)
{
    float *p = NULL;
    if (cudaMalloc(&p, (size_t)n * sizeof(float)) != cudaSuccess) return NULL;
    return p;
}

static int c_block_sum(void)
{
    enum { B = 5, T = 256 };
    static float h[B * T], got[B];
    for (int i = 0; i < B * T; i++) h[i] = (float)(i % 7) - 3.0f + (float)(i / T);
    float *in = dev_floats(B * T), *out = dev_floats(B);
    OK(in && out, "cudaMalloc");
    OK(cudaMemcpyAsync(in, h, sizeof h, cudaMemcpyHostToDevice, st) == cudaSuccess, "to device");
    block_sum<<<B, T, 0, st>>>(out, in);
    OK(cudaGetLastError() == cudaSuccess, "launch");
    OK(cudaMemcpyAsync(got, out, sizeof got, cudaMemcpyDeviceToHost, st) == cudaSuccess, "to host");
    OK(cudaStreamSynchronize(st) == cudaSuccess, "sync");
    for (int b = 0; b < B; b++) {
        float want = 0.0f;
        for (int i = 0; i < T; i++) want += h[b * T + i];
        OK(got[b] == want, "block %d: %g, want %g", b, got[b], want);
    }
    return 0;
}

static int c_fresh_memory(void)
{
    float *d = dev_floats(3), h[3] = {0, 0, 0};
    OK(d, "cudaMalloc");
    OK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, st) == cudaSuccess, "to host");
    unsigned bits;
    memcpy(&bits, &h[2], 4);
    OK(bits == 0xffffffffu, "a fresh allocation holds %#x, not the 0xff bytes of undefined memory",
       bits);
    float *out = dev_floats(3);
    read_before_write<<<3, 32, 0, st>>>(out);
    OK(cudaMemcpyAsync(h, out, sizeof h, cudaMemcpyDeviceToHost, st) == cudaSuccess, "to host");
    OK(cudaStreamSynchronize(st) == cudaSuccess, "sync");
    for (int b = 0; b < 3; b++) {
        memcpy(&bits, &h[b], 4);
        OK(bits == 0xffffffffu, "block %d read %#x from shared memory nobody wrote", b, bits);
    }
    return 0;
}

/* a launch the device refuses: the error at cudaGetLastError, nothing runs */
static int c_launch_bounds(void)
{
    float *d = dev_floats(128);
    bounded<<<1, 128, 0, st>>>(d);
    OK(cudaGetLastError() == cudaErrorLaunchOutOfResources, "128 threads past bounds of 64");
    add_one<<<dim3(1, 70000), 32, 0, st>>>(d, 1);
    OK(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y of 70000");
    add_one<<<1, 2048, 0, st>>>(d, 1);
    OK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads");
    OK(cudaStreamSynchronize(st) == cudaSuccess, "the refused launches left no error behind");
    return 0;
}

/* a kernel fault: the next wait returns it, and every later call */
static int sticky(cudaError_t want)
{
    cudaError_t e = cudaStreamSynchronize(st);
    OK(e == want, "sync returned %d (%s), want %d", (int)e, cudaGetErrorString(e), (int)want);
    float *p = NULL;
    OK(cudaMalloc(&p, 4) == want, "the error is sticky");
    return 0;
}

static int c_divergent_barrier(void)
{
    float *d = dev_floats(64);
    divergent_barrier<<<1, 64, 0, st>>>(d);
    return sticky(cudaErrorLaunchFailure);
}

static int c_early_return(void)
{
    float *d = dev_floats(64);
    early_return<<<1, 64, 0, st>>>(d);
    return sticky(cudaErrorLaunchFailure);
}

static int c_partial_warp(void)
{
    float *d = dev_floats(48);
    partial_warp<<<1, 48, 0, st>>>(d);
    return sticky(cudaErrorLaunchFailure);
}

static int c_host_pointer(void)
{
    static float h[32];
    add_one<<<1, 32, 0, st>>>(h, 32);
    return sticky(cudaErrorIllegalAddress);
}

static int c_freed_pointer(void)
{
    float *d = dev_floats(32);
    OK(cudaFree(d) == cudaSuccess, "cudaFree");
    add_one<<<1, 32, 0, st>>>(d, 32);
    return sticky(cudaErrorIllegalAddress);
}

static int c_write_past_end(void)
{
    float *d = dev_floats(100);
    off_by_one<<<4, 32, 0, st>>>(d, 100);
    return sticky(cudaErrorIllegalAddress);
}

static int c_copy_bounds(void)
{
    static float h[101];
    float *d = dev_floats(100);
    OK(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, st) == cudaErrorInvalidValue,
       "a copy longer than its allocation");
    OK(cudaMemcpyAsync(h, d, 16, cudaMemcpyHostToDevice, st) == cudaErrorInvalidValue,
       "host to device, the wrong way round");
    OK(cudaFree(h) == cudaErrorInvalidValue, "cudaFree of host memory");
    OK(cudaStreamSynchronize(st) == cudaSuccess, "refused copies are no device fault");
    return 0;
}

/* page-locked memory is read when the copy runs (at the wait), pageable
 * memory when the call returns */
static int c_async_copies(void)
{
    float *d = dev_floats(2), *pin = NULL, page[1], h[2];
    OK(cudaMallocHost(&pin, sizeof(float)) == cudaSuccess, "cudaMallocHost");
    pin[0] = 1.0f;
    OK(cudaMemcpyAsync(d, pin, 4, cudaMemcpyHostToDevice, st) == cudaSuccess, "pinned");
    pin[0] = 2.0f; /* before the wait: a race on a GPU */
    page[0] = 3.0f;
    OK(cudaMemcpyAsync(d + 1, page, 4, cudaMemcpyHostToDevice, st) == cudaSuccess, "pageable");
    page[0] = 4.0f;
    OK(cudaMemcpyAsync(h, d, 8, cudaMemcpyDeviceToHost, st) == cudaSuccess, "back");
    OK(cudaStreamSynchronize(st) == cudaSuccess, "sync");
    OK(h[0] == 2.0f && h[1] == 3.0f, "device got %g and %g, want 2 (pinned: read late) and 3", h[0],
       h[1]);
    /* a kernel runs when its stream is waited for, not at the launch */
    add_one<<<1, 32, 0, st>>>(d, 2);
    float *back = NULL;
    OK(cudaMallocHost(&back, 8) == cudaSuccess, "cudaMallocHost");
    back[0] = -1.0f;
    OK(cudaMemcpyAsync(back, d, 8, cudaMemcpyDeviceToHost, st) == cudaSuccess, "to pinned");
    OK(back[0] == -1.0f, "a copy to page-locked memory done before the wait");
    OK(cudaStreamSynchronize(st) == cudaSuccess, "sync");
    OK(back[0] == 3.0f && back[1] == 4.0f, "after the wait: %g %g, want 3 4", back[0], back[1]);
    return 0;
}

/* host code reading device memory: SIGSEGV, named */
static int c_host_reads_device(void)
{
    float *d = dev_floats(4);
    volatile float v = d[1];
    (void)v;
    return 0; /* not reached */
}

static int c_host_writes_device(void)
{
    float *d = dev_floats(4);
    d[0] = 1.0f;
    return 0; /* not reached */
}

static int c_dyn_overrun(void)
{
    float *d = dev_floats(1);
    dyn_overrun<<<1, 32, 16 * sizeof(float), st>>>(d, 16);
    cudaStreamSynchronize(st);
    return 0; /* not reached */
}

/* ---- the parent -------------------------------------------------------------- */

enum { ENDS_OK, ENDS_SEGV };
static const struct {
    const char *name;
    int (*fn)(void);
    int ends;
    const char *says; /* on stderr, or NULL */
} cases[] = {
    {"block sum by shuffles", c_block_sum, ENDS_OK, NULL},
    {"fresh device and shared memory", c_fresh_memory, ENDS_OK, NULL},
    {"launches refused", c_launch_bounds, ENDS_OK, "__launch_bounds__: 64"},
    {"barrier in divergent code", c_divergent_barrier, ENDS_OK, "not every thread reaches"},
    {"return before a barrier", c_early_return, ENDS_OK, "has returned"},
    {"shuffle in a partial warp", c_partial_warp, ENDS_OK, "partial warp"},
    {"host pointer to a kernel", c_host_pointer, ENDS_OK, "argument 1 is"},
    {"freed pointer to a kernel", c_freed_pointer, ENDS_OK, "outside every live allocation"},
    {"kernel writes past the end", c_write_past_end, ENDS_OK, "bytes 0 to 3 after its end"},
    {"copies out of bounds", c_copy_bounds, ENDS_OK, "refused"},
    {"asynchronous copies and kernels", c_async_copies, ENDS_OK, NULL},
    {"host reads device memory", c_host_reads_device, ENDS_SEGV, "host code touched device memory"},
    {"host writes device memory", c_host_writes_device, ENDS_SEGV,
     "host code touched device memory"},
    {"dynamic shared memory overrun", c_dyn_overrun, ENDS_SEGV, "past its 64 bytes of dynamic"},
};

int main(void)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd[2];
        if (pipe(fd) != 0) return 2;
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 2;
        if (pid == 0) {
            struct rlimit no_core = {0, 0}; /* the SIGSEGV cases leave no core file */
            setrlimit(RLIMIT_CORE, &no_core);
            dup2(fd[1], 2);
            close(fd[0]);
            close(fd[1]);
            if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) _exit(3);
            _exit(cases[i].fn());
        }
        close(fd[1]);
        static char out[16384];
        size_t len = 0;
        ssize_t r;
        while ((r = read(fd[0], out + len, sizeof out - 1 - len)) > 0) len += (size_t)r;
        out[len] = 0;
        close(fd[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        int ended_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        int segv = WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
        int good = (cases[i].ends == ENDS_OK ? ended_ok : segv) &&
                   (!cases[i].says || strstr(out, cases[i].says));
        printf("%s %s\n", good ? "ok  " : "FAIL", cases[i].name);
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
            if (!good || strncmp(line, "gpu_emu: ", 9) == 0) printf("       | %.300s\n", line);
        if (!good) {
            printf("       ended %s; wanted %s%s%s\n",
                   WIFSIGNALED(status) ? strsignal(WTERMSIG(status))
                                       : (WEXITSTATUS(status) ? "with a failure" : "normally"),
                   cases[i].ends == ENDS_OK ? "a normal end" : "SIGSEGV",
                   cases[i].says ? " saying: " : "", cases[i].says ? cases[i].says : "");
            failures++;
        }
    }
    printf(failures ? "%d case(s) failed\n" : "every case ends as it should\n", failures);
    return failures != 0;
}

/* runtime.cpp — the emulated GPU behind the headers of include/ (README.md): one device
 * whose memory the host cannot touch, streams that run their work when they
 * are waited for, kernels whose threads run as fibers on the calling thread
 * (a block's threads until each reaches a barrier, then the next phase;
 * blocks one after another), cuBLAS's SGEMM as a plain loop.
 *
 * Everything a kernel or a copy does wrong that a GPU would fault on (an
 * argument that is not device memory, a write past an allocation, threads
 * waiting at different barriers, a shuffle of a partial warp) is reported
 * on stderr, "gpu_emu: ...", and becomes the context's sticky error
 * (cudaErrorIllegalAddress / LaunchFailure), so sync returns it. Host code
 * touching device memory gets SIGSEGV, reported with a backtrace. */
#include "emu_device.h"

#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>

#if !defined(__x86_64__) || defined(EMU_UCONTEXT)
#define EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

/* the stream: its queued work, run in order by drain() */
struct emu_stream {
    std::deque<std::function<void()>> q;
    unsigned flags = 0;
};

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace emu {
namespace {

/* ---- constants ------------------------------------------------------------ */
const size_t ALIGN = 256;            /* cudaMalloc's alignment */
const size_t FRONT = 256;            /* guard bytes before each allocation */
const size_t BACK = 256;             /* and at least this many after it */
const size_t DEFAULT_MEM = 4ull << 30; /* reserved, not committed */
const unsigned MAX_THREADS = 1024;   /* per block */
const size_t STACK = 256u << 10;     /* per emulated thread (address space) */
const size_t DYN_MAX = 48u << 10;    /* dynamic shared memory per block */
/* the guard bytes around allocations: 0xc700face, as a float -33018.8: a
 * kernel reading it is far off, one adding an ordinary value into it
 * changes it (a NaN would stay the same NaN, a huge value absorb it) */
const unsigned char GUARD[4] = {0xce, 0xfa, 0x00, 0xc7};
const char *const DEVICE_NAME = "emulated GPU (shardnode tests/gpu_emu)";

/* ---- state: everything below is under `mu`, but for the fault handler's
 * reads (best effort, the process is dying) ---- */
std::mutex mu;
std::atomic<int> sticky{0};
thread_local int last_error = 0;
thread_local int current_device = 0;

struct allocation {
    size_t off, len;   /* the block in the region, guards included */
    size_t size;       /* what was asked for */
    unsigned long long id;
};
char *region = nullptr;
size_t region_size = 0, extent = 0, used = 0; /* extent: pages ever handed out */
int open_depth = 0;
std::map<uintptr_t, allocation> allocs; /* by the pointer handed out */
std::map<size_t, size_t> free_blocks;   /* offset -> length */
unsigned long long next_id = 1;
std::map<uintptr_t, size_t> pinned;     /* cudaMallocHost: pointer -> bytes */
std::set<emu_stream *> streams;
emu_stream null_stream;

/* ---- configuration (environment, read once) -------------------------------- */
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void report(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gpu_emu: %s\n", buf);
    fflush(stderr);
}

size_t mem_limit()
{
    static size_t v = [] {
        const char *e = getenv("SHARDNODE_GPU_EMU_MEM");
        if (!e || !*e) return DEFAULT_MEM;
        char *end = nullptr;
        errno = 0;
        unsigned long long n = strtoull(e, &end, 10);
        int shift = 0;
        if (end && (*end == 'K' || *end == 'k')) shift = 10, end++;
        else if (end && (*end == 'M' || *end == 'm')) shift = 20, end++;
        else if (end && (*end == 'G' || *end == 'g')) shift = 30, end++;
        if (errno || end == e || *end || n == 0 || n > (1ull << 40) >> shift) {
            report("SHARDNODE_GPU_EMU_MEM=%s: not a size (bytes, or with K, M or G); using %zu "
                   "GiB",
                   e, DEFAULT_MEM >> 30);
            return DEFAULT_MEM;
        }
        return (size_t)(n << shift);
    }();
    return v;
}

bool reverse_order()
{
    static bool v = [] {
        const char *e = getenv("SHARDNODE_GPU_EMU_ORDER");
        if (!e || !*e || strcmp(e, "forward") == 0) return false;
        if (strcmp(e, "reverse") == 0) return true;
        report("SHARDNODE_GPU_EMU_ORDER=%s: not forward or reverse; using forward", e);
        return false;
    }();
    return v;
}

/* ---- errors --------------------------------------------------------------- */
int fail(int e)
{
    last_error = e;
    return e;
}

void clear_queues()
{
    null_stream.q.clear();
    for (emu_stream *s : streams) s->q.clear();
}

/* A fault of the device: reported, sticky, queued work dropped. */
void fault(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fault(int code, const char *fmt, ...)
{
    char buf[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gpu_emu: %s\n", buf);
    fflush(stderr);
    int expected = 0;
    sticky.compare_exchange_strong(expected, code);
    last_error = sticky.load();
    clear_queues();
}

/* ---- the region of device memory ------------------------------------------- */
size_t page()
{
    static size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

bool in_region(const void *p)
{
    uintptr_t a = (uintptr_t)p, r = (uintptr_t)region;
    return region && a >= r && a < r + region_size;
}

void protect(size_t from, size_t to, int prot)
{
    if (to <= from) return;
    if (mprotect(region + from, to - from, prot) != 0)
        fault(err_launch_failure, "mprotect of the emulated device memory: %s", strerror(errno));
}
void open_region()
{
    if (open_depth++ == 0) protect(0, extent, PROT_READ | PROT_WRITE);
}
void close_region()
{
    if (--open_depth == 0) protect(0, extent, PROT_NONE);
}
struct opened {
    opened() { open_region(); }
    ~opened() { close_region(); }
    opened(const opened &) = delete;
    opened &operator=(const opened &) = delete;
};

/* the allocation holding [p, p + n) (n = 0: p may be its end), or null */
const allocation *alloc_of(const void *p, size_t n)
{
    auto it = allocs.upper_bound((uintptr_t)p);
    if (it == allocs.begin()) return nullptr;
    --it;
    uintptr_t a = (uintptr_t)p, base = it->first;
    if (a + n < a || a + n > base + it->second.size) return nullptr;
    return &it->second;
}
/* [p, p + n) lies in one cudaMallocHost buffer */
bool pinned_of(const void *p, size_t n)
{
    auto it = pinned.upper_bound((uintptr_t)p);
    if (it == pinned.begin()) return false;
    --it;
    uintptr_t a = (uintptr_t)p;
    return a + n >= a && a + n <= it->first + it->second;
}

/* what p is, for a message (no allocation: the fault handler uses it) */
void describe(char *out, size_t len, const void *p)
{
    if (in_region(p)) {
        auto it = allocs.upper_bound((uintptr_t)p);
        if (it != allocs.begin()) {
            --it;
            uintptr_t a = (uintptr_t)p;
            if (a <= it->first + it->second.size) {
                snprintf(out, len, "device memory, %zu bytes into allocation #%llu of %zu bytes",
                         (size_t)(a - it->first), it->second.id, it->second.size);
                return;
            }
        }
        snprintf(out, len, "device memory outside every live allocation (freed, or past one)");
    } else if (pinned_of(p, 0)) {
        snprintf(out, len, "page-locked host memory (cudaMallocHost), not device memory");
    } else {
        snprintf(out, len, "host memory, not device memory");
    }
}

void fill_guard(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = GUARD[((uintptr_t)(p + i)) & 3];
}
/* whether [p, p+n) still holds the guard pattern; else the offsets of the
 * first and last changed bytes */
bool guard_intact(const unsigned char *p, size_t n, size_t *first, size_t *last)
{
    bool ok_ = true;
    for (size_t i = 0; i < n; i++)
        if (p[i] != GUARD[((uintptr_t)(p + i)) & 3]) {
            if (ok_) *first = i;
            *last = i;
            ok_ = false;
        }
    return ok_;
}

/* 0 when both guards of the allocation at `base` are intact; else a fault */
int check_guards(uintptr_t base, const allocation &a, const char *who)
{
    const unsigned char *front = (const unsigned char *)region + a.off;
    const unsigned char *back = (const unsigned char *)base + a.size;
    size_t back_len = (size_t)((const unsigned char *)region + a.off + a.len - back);
    size_t first = 0, last = 0;
    if (!guard_intact(front, FRONT, &first, &last)) {
        fault(err_illegal_address,
              "%s wrote before the start of allocation #%llu (%zu bytes at %p): bytes %zu to "
              "%zu before it changed",
              who, a.id, a.size, (void *)base, FRONT - first, FRONT - last);
        return -1;
    }
    if (!guard_intact(back, back_len, &first, &last)) {
        fault(err_illegal_address,
              "%s wrote past the end of allocation #%llu (%zu bytes at %p): bytes %zu to %zu "
              "after its end changed",
              who, a.id, a.size, (void *)base, first, last);
        return -1;
    }
    return 0;
}

void install_fault_handler();

int reserve_region()
{
    if (region) return ok;
    size_t n = round_up(mem_limit(), page());
    void *p = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        report("cannot reserve %zu bytes of address space for the device: %s", n,
               strerror(errno));
        return err_memory_allocation;
    }
    region = (char *)p;
    region_size = n;
    free_blocks[0] = n;
    install_fault_handler();
    return ok;
}

/* ---- streams -------------------------------------------------------------- */
emu_stream *resolve(emu_stream *s)
{
    if (!s) return &null_stream;
    return streams.count(s) ? s : nullptr;
}

/* Runs the stream's queued work, in order, with device memory open. */
void drain(emu_stream *s)
{
    if (s->q.empty()) return;
    opened o;
    while (!s->q.empty()) {
        std::function<void()> f = std::move(s->q.front());
        s->q.pop_front();
        if (!sticky.load()) f();
    }
}
void drain_all()
{
    drain(&null_stream);
    for (emu_stream *s : streams) drain(s);
}

/* ---- profile (SHARDNODE_GPU_EMU_PROFILE=1: per kernel at exit) -------------- */
double now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
struct profile_t {
    bool on = getenv("SHARDNODE_GPU_EMU_PROFILE") != nullptr;
    std::map<std::string, std::pair<unsigned long long, double>> by_name;
    void add(const char *name, double s)
    {
        if (!on) return;
        auto &e = by_name[name];
        e.first++;
        e.second += s;
    }
    ~profile_t()
    {
        if (!on) return;
        double total = 0;
        for (auto &e : by_name) total += e.second.second;
        fprintf(stderr, "gpu_emu profile: %.2f s in all\n", total);
        for (auto &e : by_name)
            fprintf(stderr, "gpu_emu profile: %8.3f s %8llu x %s\n", e.second.second,
                    e.second.first, e.first.c_str());
    }
};
profile_t profile;

/* ---- emulated threads: fibers ------------------------------------------------ */
enum { READY, AT_BLOCK, AT_WARP, DONE, DEAD };
struct fiber {
    void *sp;
    int state;
    unsigned lin;
    uint3 tid;
    const char *file; /* where it waits */
    int line;
    unsigned shuffles; /* how many it has done in this block */
#ifdef EMU_USE_UCONTEXT
    ucontext_t uc;
#endif
};
fiber *fibers = nullptr;
char *stacks = nullptr;
fiber *cur = nullptr; /* the running emulated thread */
/* a pass runs every READY thread of the block once, in order: position
 * pass_pos of pass_nt, counted backwards when pass_rev */
unsigned pass_nt = 0, pass_pos = 0;
bool pass_rev = false;
#ifdef EMU_USE_UCONTEXT
ucontext_t sched_uc;
#else
void *sched_sp = nullptr;
#endif
/* a shuffle's values, by the parity of the shuffle: a lane writes the next
 * shuffle's slot only after every lane passed this one's barrier, so one
 * barrier per shuffle suffices */
uint64_t shfl_slots[2][MAX_THREADS];
/* the block's threads that have returned, wait at __syncthreads, wait at a
 * shuffle (per warp); the first waiter of each, and one that waits
 * elsewhere than the first (a fault once the barrier is full) */
const unsigned MAX_WARPS = MAX_THREADS / EMU_WARP;
unsigned n_done, n_block, n_warp[MAX_WARPS];
fiber *block_first, *block_odd, *warp_first[MAX_WARPS], *warp_odd[MAX_WARPS];
unsigned long long block_serial = 0;

struct kernel_run {
    const char *name, *where;
    dim3 grid, block;
    size_t shmem;
    std::function<void()> body;
    std::vector<std::pair<int, const void *>> ptrs;
};
kernel_run *cur_kernel = nullptr; /* while a kernel runs */
volatile pid_t kernel_thread = 0;  /* the host thread running it, for the fault handler */

/* dynamic shared memory: the last DYN_MAX bytes before a guard page */
char *dyn_area = nullptr;
char *dyn_ptr = nullptr;
size_t dyn_len = 0;

} // namespace
} // namespace emu

#ifndef EMU_USE_UCONTEXT
/* Switches stacks: saves the callee-saved registers on the current stack
 * and its pointer in *save, then loads the same from `load`. The floating
 * point control state (mxcsr, x87 control word) is the thread's, shared by
 * all fibers: kernels never change it. emu_fiber_start is where a new
 * fiber's first switch returns to. */
extern "C" {
__attribute__((visibility("hidden"))) void emu_ctx_swap(void **save, void *load);
__attribute__((visibility("hidden"))) void emu_fiber_start();
__attribute__((visibility("hidden"))) void emu_fiber_main();
}
asm(R"(
    .pushsection .text
    .p2align 4
    .globl emu_ctx_swap
    .hidden emu_ctx_swap
    .type emu_ctx_swap, @function
emu_ctx_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_swap, .-emu_ctx_swap

    .p2align 4
    .globl emu_fiber_start
    .hidden emu_fiber_start
    .type emu_fiber_start, @function
emu_fiber_start:
    call emu_fiber_main
    ud2
    .size emu_fiber_start, .-emu_fiber_start
    .popsection
)");
#else
extern "C" __attribute__((visibility("hidden"))) void emu_fiber_main();
#endif

namespace emu {
namespace {

fiber *at(unsigned pos) { return &fibers[pass_rev ? pass_nt - 1 - pos : pos]; }

/* from the scheduler (from == null) or a thread to a thread (to != null,
 * made current) or back to the scheduler (to == null) */
void switch_to(fiber *from, fiber *to)
{
    if (to) {
        cur = to;
        threadIdx = to->tid;
    } else {
        cur = nullptr;
    }
#ifdef EMU_USE_UCONTEXT
    swapcontext(from ? &from->uc : &sched_uc, to ? &to->uc : &sched_uc);
#else
    emu_ctx_swap(from ? &from->sp : &sched_sp, to ? to->sp : sched_sp);
#endif
}

/* The running thread stops (it waits, returned or faulted): the next READY
 * thread of the pass runs, straight from this one, or the pass ends. */
void yield_thread()
{
    fiber *f = cur;
    unsigned k = pass_pos + 1;
    while (k < pass_nt && at(k)->state != READY) k++;
    pass_pos = k;
#ifndef EMU_USE_UCONTEXT
    /* the thread after that one: its stack is cold, start loading it now
     * (the switches spend most of their time waiting for it) */
    if (k + 1 < pass_nt && at(k + 1)->state == READY) __builtin_prefetch(at(k + 1)->sp);
#endif
    switch_to(f, k < pass_nt && !sticky.load() ? at(k) : nullptr);
}

int make_fibers()
{
    if (fibers) return ok;
    size_t n = (size_t)MAX_THREADS * STACK;
    void *s = mmap(nullptr, n, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    void *d = mmap(nullptr, DYN_MAX + page(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fiber *f = new (std::nothrow) fiber[MAX_THREADS];
    if (s == MAP_FAILED || d == MAP_FAILED || !f) {
        report("cannot map the emulated threads' stacks: %s", strerror(errno));
        if (s != MAP_FAILED) munmap(s, n);
        if (d != MAP_FAILED) munmap(d, DYN_MAX + page());
        delete[] f;
        return err_launch_out_of_resources;
    }
    /* a guard page below every stack, one after the shared memory */
    for (unsigned i = 0; i < MAX_THREADS; i++)
        mprotect((char *)s + (size_t)i * STACK, page(), PROT_NONE);
    mprotect((char *)d + DYN_MAX, page(), PROT_NONE);
    stacks = (char *)s;
    dyn_area = (char *)d;
    fibers = f;
    return ok;
}

void init_fiber(fiber *f, unsigned i)
{
    f->state = READY;
    f->file = nullptr;
    f->line = 0;
    f->shuffles = 0;
    char *lo = stacks + (size_t)i * STACK + page(), *hi = stacks + (size_t)(i + 1) * STACK;
#ifdef EMU_USE_UCONTEXT
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = lo;
    f->uc.uc_stack.ss_size = (size_t)(hi - lo);
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, emu_fiber_main, 0);
#else
    (void)lo;
    /* the frame emu_ctx_swap pops: r15..r12, rbx, rbp and the return
     * address emu_fiber_start, which then runs on a 16-byte aligned stack */
    /* stacks lie STACK (a power of two) apart: without an offset of their
     * own the threads' frames would all fall in the same cache sets */
    uintptr_t top = ((uintptr_t)hi - 64 - (uintptr_t)(i % 64) * 1088) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 56);
    for (int k = 0; k < 6; k++) sp[k] = 0;
    sp[6] = (uint64_t)(uintptr_t)&emu_fiber_start;
    f->sp = sp;
#endif
}

/* Stops the running emulated thread for good (after a fault). */
[[noreturn]] void kill_current()
{
    cur->state = DEAD;
    switch_to(cur, nullptr); /* the block ends: sticky is set */
    __builtin_trap();        /* never resumed */
}

const char *state_name(int s)
{
    switch (s) {
    case AT_BLOCK: return "waits at __syncthreads";
    case AT_WARP: return "waits at a warp shuffle";
    case DONE: return "has returned";
    case DEAD: return "faulted";
    }
    return "runs";
}

/* "thread 3 waits at __syncthreads (internal.h:95)" */
void thread_line(char *out, size_t len, const fiber &f)
{
    const char *file = f.file ? strrchr(f.file, '/') : nullptr;
    file = file ? file + 1 : f.file;
    if (f.state == AT_WARP)
        snprintf(out, len, "thread (%u,%u,%u) waits at its warp shuffle number %d", f.tid.x,
                 f.tid.y, f.tid.z, f.line + 1);
    else if (f.file && f.state == AT_BLOCK)
        snprintf(out, len, "thread (%u,%u,%u) %s (%s:%d)", f.tid.x, f.tid.y, f.tid.z,
                 state_name(f.state), file, f.line);
    else
        snprintf(out, len, "thread (%u,%u,%u) %s", f.tid.x, f.tid.y, f.tid.z, state_name(f.state));
}

void block_fault(const kernel_run &k, const char *what, const fiber &a, const fiber &b)
{
    char ta[256], tb[256];
    thread_line(ta, sizeof ta, a);
    thread_line(tb, sizeof tb, b);
    fault(err_launch_failure, "kernel %s (%s), block (%u,%u,%u) of %u threads: %s: %s, %s",
          k.name, k.where, blockIdx.x, blockIdx.y, blockIdx.z,
          k.block.x * k.block.y * k.block.z, what, ta, tb);
}

bool same_site(const fiber &a, const fiber &b)
{
    return a.line == b.line && (a.file == b.file || (a.file && b.file && !strcmp(a.file, b.file)));
}

/* One block: every thread runs until it returns or waits; a barrier opens
 * when all the threads it needs wait at it. false after a fault. */
bool run_block(kernel_run &k, uint3 b)
{
    const unsigned nt = k.block.x * k.block.y * k.block.z;
    blockIdx = b;
    block_serial++;
    if (dyn_len) memset(dyn_ptr, 0xff, dyn_len);
    for (unsigned i = 0; i < nt; i++) {
        fiber *f = &fibers[i];
        f->lin = i;
        f->tid = uint3{i % k.block.x, i / k.block.x % k.block.y, i / (k.block.x * k.block.y)};
        init_fiber(f, i);
    }
    pass_nt = nt;
    pass_rev = reverse_order();
    const unsigned nw = (nt + EMU_WARP - 1) / EMU_WARP;
    n_done = n_block = 0;
    block_odd = nullptr;
    for (unsigned w = 0; w < nw; w++) n_warp[w] = 0, warp_odd[w] = nullptr;
    for (;;) {
        /* a pass: the first READY thread; each hands on to the next */
        unsigned first = 0;
        while (first < nt && at(first)->state != READY) first++;
        if (first < nt) {
            pass_pos = first;
            switch_to(nullptr, at(first));
        }
        if (sticky.load()) return false;
        if (n_done == nt) return true;
        bool moved = false;
        /* warps whose every lane waits at a shuffle */
        for (unsigned w = 0; w < nw; w++) {
            unsigned lo = w * EMU_WARP, hi = lo + EMU_WARP < nt ? lo + EMU_WARP : nt;
            if (!n_warp[w] || n_warp[w] != hi - lo) continue;
            if (warp_odd[w]) {
                block_fault(k, "the lanes of a warp at different shuffles", *warp_first[w],
                            *warp_odd[w]);
                return false;
            }
            for (unsigned i = lo; i < hi; i++) fibers[i].state = READY;
            n_warp[w] = 0;
            moved = true;
        }
        if (!moved && n_block == nt) {
            if (block_odd) {
                block_fault(k, "threads wait at different __syncthreads", *block_first,
                            *block_odd);
                return false;
            }
            for (unsigned i = 0; i < nt; i++) fibers[i].state = READY;
            n_block = 0;
            moved = true;
        }
        if (!moved) {
            /* nobody can go on: name a waiting thread and one that keeps it
             * waiting (returned, or waiting elsewhere) */
            unsigned wi = nt, oi = nt;
            for (unsigned i = 0; i < nt && wi == nt; i++)
                if (fibers[i].state == AT_BLOCK || fibers[i].state == AT_WARP) wi = i;
            for (unsigned i = 0; i < nt && oi == nt; i++)
                if (i != wi && (fibers[i].state != fibers[wi].state ||
                                !same_site(fibers[i], fibers[wi])))
                    oi = i;
            if (oi == nt) oi = wi;
            block_fault(k, "a barrier that not every thread reaches (a GPU hangs or misbehaves)",
                        fibers[wi], fibers[oi]);
            return false;
        }
    }
}

void run_kernel(kernel_run &k)
{
    char what[256];
    for (auto &a : k.ptrs) {
        if (!a.second || alloc_of(a.second, 0)) continue;
        describe(what, sizeof what, a.second);
        fault(err_illegal_address, "kernel %s (%s): argument %d is %p, %s", k.name, k.where,
              a.first + 1, a.second, what);
        return;
    }
    if (make_fibers()) {
        fault(err_launch_out_of_resources, "kernel %s (%s): no emulated threads", k.name, k.where);
        return;
    }
    double t0 = profile.on ? now() : 0;
    gridDim = k.grid;
    blockDim = k.block;
    dyn_len = round_up(k.shmem, 16);
    dyn_ptr = dyn_area + DYN_MAX - dyn_len;
    cur_kernel = &k;
    kernel_thread = (pid_t)syscall(SYS_gettid);
    const unsigned long long nb = (unsigned long long)k.grid.x * k.grid.y * k.grid.z;
    const bool rev = reverse_order();
    for (unsigned long long i = 0; i < nb; i++) {
        unsigned long long b = rev ? nb - 1 - i : i;
        uint3 bi{(unsigned)(b % k.grid.x), (unsigned)(b / k.grid.x % k.grid.y),
                 (unsigned)(b / ((unsigned long long)k.grid.x * k.grid.y))};
        if (!run_block(k, bi)) break;
    }
    kernel_thread = 0;
    cur_kernel = nullptr;
    if (sticky.load()) return;
    snprintf(what, sizeof what, "kernel %s (%s)", k.name, k.where);
    for (auto &a : k.ptrs) {
        if (!a.second) continue;
        auto it = allocs.upper_bound((uintptr_t)a.second);
        --it; /* alloc_of found it above */
        if (check_guards(it->first, it->second, what)) return;
    }
    profile.add(k.name, profile.on ? now() - t0 : 0);
}

/* An element of a BLAS operand as float: fp32 as stored, bf16 (its 16 bits
 * the high half of a float) widened exactly. */
inline float blas_load(const float *p, size_t i) { return p[i]; }
inline float blas_load(const uint16_t *p, size_t i)
{
    uint32_t bits = (uint32_t)p[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* cuBLAS's C = alpha op(A) op(B) + beta C, column-major, fp32 sums: T is
 * float (cublasSgemm) or uint16_t (cublasGemmEx on bf16 operands). */
template <class T>
void run_gemm(const char *api, int ta, int tb, int m, int n, int k, float alpha, const T *A,
              int lda, const T *B, int ldb, float beta, float *C, int ldc)
{
    double t0 = profile.on ? now() : 0;
    bool reads_ab = k > 0 && alpha != 0.0f;
    struct {
        const void *p;
        size_t elems, size;
        const char *name;
    } need[3] = {
        {A, reads_ab ? (size_t)((ta ? m : k) - 1) * lda + (size_t)(ta ? k : m) : 0, sizeof(T),
         "A"},
        {B, reads_ab ? (size_t)((tb ? k : n) - 1) * ldb + (size_t)(tb ? n : k) : 0, sizeof(T),
         "B"},
        {C, (size_t)(n - 1) * ldc + (size_t)m, sizeof(float), "C"},
    };
    char what[256];
    for (auto &x : need) {
        if (!x.elems || alloc_of(x.p, x.elems * x.size)) continue;
        describe(what, sizeof what, x.p);
        fault(err_illegal_address,
              "%s(%c, %c, m %d, n %d, k %d, lda %d, ldb %d, ldc %d): %s at %p reaches "
              "%zu elements of %zu bytes, past its memory (%s)",
              api, ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, lda, ldb, ldc, x.name, x.p, x.elems,
              x.size, what);
        return;
    }
    std::vector<float> acc((size_t)m);
    for (int j = 0; j < n; j++) {
        float *cj = C + (size_t)j * ldc;
        if (!reads_ab) {
            for (int i = 0; i < m; i++) acc[i] = 0.0f;
        } else if (ta) { /* op(A) row i is stored column i: dot products */
            for (int i = 0; i < m; i++) {
                const T *ai = A + (size_t)i * lda;
                float s[4] = {0, 0, 0, 0};
                int l = 0;
                if (!tb) {
                    const T *bj = B + (size_t)j * ldb;
                    for (; l + 4 <= k; l += 4)
                        for (int u = 0; u < 4; u++)
                            s[u] += blas_load(ai, l + u) * blas_load(bj, l + u);
                    for (; l < k; l++) s[0] += blas_load(ai, l) * blas_load(bj, l);
                } else {
                    for (; l < k; l++)
                        s[l & 3] += blas_load(ai, l) * blas_load(B, j + (size_t)l * ldb);
                }
                acc[i] = (s[0] + s[1]) + (s[2] + s[3]);
            }
        } else { /* columns of A scaled by op(B)'s entries */
            for (int i = 0; i < m; i++) acc[i] = 0.0f;
            for (int l = 0; l < k; l++) {
                float b =
                    tb ? blas_load(B, j + (size_t)l * ldb) : blas_load(B, l + (size_t)j * ldb);
                const T *al = A + (size_t)l * lda;
                for (int i = 0; i < m; i++) acc[i] += blas_load(al, i) * b;
            }
        }
        for (int i = 0; i < m; i++)
            cj[i] = beta == 0.0f ? alpha * acc[i] : alpha * acc[i] + beta * cj[i];
    }
    profile.add(api, profile.on ? now() - t0 : 0);
}

/* ---- fault handler ------------------------------------------------------------ */
struct sigaction old_segv, old_bus;

void say(const char *s) { (void)!write(2, s, strlen(s)); }

void on_fault(int sig, siginfo_t *si, void *uctx)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    char msg[1024], what[256], who[512] = "";
    /* a kernel of this thread faulted, or host code did */
    const kernel_run *k =
        kernel_thread && kernel_thread == (pid_t)syscall(SYS_gettid) ? cur_kernel : nullptr;
    if (k)
        snprintf(who, sizeof who, "kernel %s (%s), block (%u,%u,%u), thread (%u,%u,%u)", k->name,
                 k->where, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
                 threadIdx.z);
    if (in_region((void *)a)) {
        describe(what, sizeof what, (void *)a);
        if (k)
            snprintf(msg, sizeof msg, "gpu_emu: %s touched %p: %s\n", who, (void *)a, what);
        else
            snprintf(msg, sizeof msg,
                     "gpu_emu: host code touched device memory at %p (%s). Only the device's "
                     "copies and kernels may (kdev_to_host / kdev_to_device): a copy is "
                     "missing, or a device pointer is used as a host one. Backtrace (addr2line "
                     "-e BINARY OFFSET names the lines):\n",
                     (void *)a, what);
    } else if (dyn_area && a >= (uintptr_t)dyn_area + DYN_MAX &&
               a < (uintptr_t)dyn_area + DYN_MAX + page()) {
        snprintf(msg, sizeof msg,
                 "gpu_emu: %s read or wrote past its %zu bytes of dynamic shared memory\n",
                 k ? who : "a kernel", k ? k->shmem : (size_t)0);
    } else if (stacks && a >= (uintptr_t)stacks && a < (uintptr_t)stacks + MAX_THREADS * STACK) {
        snprintf(msg, sizeof msg, "gpu_emu: %s overflowed its emulated thread's %zu KiB stack\n",
                 k ? who : "a kernel", STACK >> 10);
    } else if (k) {
        snprintf(msg, sizeof msg,
                 "gpu_emu: %s faulted at %p: not device memory (a host pointer in a kernel?)\n",
                 who, (void *)a);
    } else {
        msg[0] = 0; /* not ours: the previous handler's */
    }
    if (msg[0]) {
        say(msg);
        void *frames[64];
        int nf = backtrace(frames, 64);
        backtrace_symbols_fd(frames, nf, 2);
    }
    /* the previous disposition (the default: the process dies of it) takes
     * the access, which runs again when this returns */
    (void)uctx;
    struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;
    if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler == SIG_IGN) signal(sig, SIG_DFL);
    else sigaction(sig, old, nullptr);
}

void install_fault_handler()
{
    void *frames[2];
    (void)backtrace(frames, 2); /* loads what backtrace needs now, not in the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
}

} // namespace

/* ---- the API of emu_device.h ---------------------------------------------------- */

int get_last_error()
{
    if (int s = sticky.load()) return s;
    int e = last_error;
    last_error = 0;
    return e;
}
int peek_last_error()
{
    if (int s = sticky.load()) return s;
    return last_error;
}

const char *error_name(int e)
{
    switch (e) {
    case ok: return "success";
    case err_invalid_value: return "invalid_value";
    case err_memory_allocation: return "memory_allocation";
    case err_invalid_configuration: return "invalid_configuration";
    case err_no_device: return "no_device";
    case err_invalid_device: return "invalid_device";
    case err_invalid_handle: return "invalid_handle";
    case err_illegal_address: return "illegal_address";
    case err_launch_out_of_resources: return "launch_out_of_resources";
    case err_launch_failure: return "launch_failure";
    }
    return "unknown";
}

const char *error_string(int e)
{
    switch (e) {
    case ok: return "no error";
    case err_invalid_value: return "invalid argument";
    case err_memory_allocation: return "out of memory";
    case err_invalid_configuration: return "invalid configuration argument";
    case err_no_device: return "no device";
    case err_invalid_device: return "invalid device ordinal";
    case err_invalid_handle: return "invalid resource handle";
    case err_illegal_address:
        return "an illegal memory access was encountered (emulated device: the reason is on "
               "stderr, gpu_emu: ...)";
    case err_launch_out_of_resources: return "too many resources requested for launch";
    case err_launch_failure:
        return "unspecified launch failure (emulated device: the reason is on stderr, gpu_emu: "
               "...)";
    }
    return "unknown error";
}

int device_count(int *n)
{
    if (!n) return fail(err_invalid_value);
    *n = 1;
    return ok;
}

int set_device(int dev)
{
    if (dev != 0) return fail(err_invalid_device);
    current_device = dev;
    if (int s = sticky.load()) return fail(s);
    return ok;
}

int get_device(int *dev)
{
    if (!dev) return fail(err_invalid_value);
    *dev = current_device;
    return ok;
}

int device_describe(int dev, device_desc *out)
{
    if (dev != 0) return fail(err_invalid_device);
    out->name = DEVICE_NAME;
    out->warp = EMU_WARP;
    out->units = 1;
    out->total = round_up(mem_limit(), page());
    return ok;
}

int driver_version(int *v)
{
    if (!v) return fail(err_invalid_value);
    *v = 0; /* what the vendors answer without a driver */
    return ok;
}

int mem_info(size_t *free_bytes, size_t *total_bytes)
{
    std::lock_guard<std::mutex> g(mu);
    if (int s = sticky.load()) return fail(s);
    size_t total = round_up(mem_limit(), page());
    if (free_bytes) *free_bytes = total - used;
    if (total_bytes) *total_bytes = total;
    return ok;
}

int stream_create(emu_stream **s, unsigned flags)
{
    std::lock_guard<std::mutex> g(mu);
    if (!s) return fail(err_invalid_value);
    if (int e = sticky.load()) return fail(e);
    emu_stream *st = new (std::nothrow) emu_stream;
    if (!st) return fail(err_memory_allocation);
    st->flags = flags;
    streams.insert(st);
    *s = st;
    return ok;
}

int stream_destroy(emu_stream *s)
{
    std::lock_guard<std::mutex> g(mu);
    if (!s || !streams.count(s)) return fail(err_invalid_handle);
    drain(s);
    streams.erase(s);
    delete s;
    return ok;
}

int stream_sync(emu_stream *s)
{
    std::lock_guard<std::mutex> g(mu);
    emu_stream *st = resolve(s);
    if (!st) return fail(err_invalid_handle);
    drain(st);
    if (int e = sticky.load()) return fail(e);
    return ok;
}

int device_sync()
{
    std::lock_guard<std::mutex> g(mu);
    drain_all();
    if (int e = sticky.load()) return fail(e);
    return ok;
}

int dev_malloc(void **p, size_t bytes)
{
    std::lock_guard<std::mutex> g(mu);
    if (!p) return fail(err_invalid_value);
    *p = nullptr;
    if (int e = sticky.load()) return fail(e);
    if (bytes == 0) return ok;
    if (int e = reserve_region()) return fail(e);
    size_t body = round_up(bytes, ALIGN);
    if (body < bytes || body > region_size) return fail(err_memory_allocation);
    size_t need = FRONT + body + BACK;
    auto it = free_blocks.begin();
    while (it != free_blocks.end() && it->second < need) ++it;
    if (it == free_blocks.end()) return fail(err_memory_allocation); /* an answer, not a fault */
    size_t off = it->first, len = it->second;
    free_blocks.erase(it);
    if (len > need) free_blocks[off + need] = len - need;
    used += need;
    if (off + need > extent) {
        size_t grown = round_up(off + need, page());
        if (open_depth) protect(extent, grown, PROT_READ | PROT_WRITE);
        extent = grown;
    }
    unsigned char *user = (unsigned char *)region + off + FRONT;
    allocs[(uintptr_t)user] = allocation{off, need, bytes, next_id++};
    {
        opened o;
        fill_guard((unsigned char *)region + off, FRONT);
        memset(user, 0xff, bytes); /* as undefined as cudaMalloc's: NaN as floats */
        fill_guard(user + bytes, need - FRONT - bytes);
    }
    *p = user;
    return ok;
}

int dev_free(void *p)
{
    std::lock_guard<std::mutex> g(mu);
    if (!p) return ok;
    drain_all(); /* cudaFree waits for the device */
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end()) {
        char what[256];
        describe(what, sizeof what, p);
        report("cudaFree(%p): not a pointer cudaMalloc returned (%s)", p, what);
        return fail(err_invalid_value);
    }
    allocation a = it->second;
    {
        opened o;
        char who[64];
        snprintf(who, sizeof who, "a kernel or copy (seen at cudaFree)");
        if (!sticky.load()) check_guards(it->first, a, who);
    }
    allocs.erase(it);
    used -= a.len;
    size_t off = a.off, len = a.len;
    auto next = free_blocks.lower_bound(off);
    if (next != free_blocks.end() && off + len == next->first) {
        len += next->second;
        next = free_blocks.erase(next);
    }
    if (next != free_blocks.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == off) {
            prev->second += len;
            return sticky.load() ? fail(sticky.load()) : ok;
        }
    }
    free_blocks[off] = len;
    return sticky.load() ? fail(sticky.load()) : ok;
}

int host_malloc(void **p, size_t bytes)
{
    std::lock_guard<std::mutex> g(mu);
    if (!p) return fail(err_invalid_value);
    *p = nullptr;
    if (int e = sticky.load()) return fail(e);
    void *q = nullptr;
    if (posix_memalign(&q, 4096, bytes ? bytes : 1) != 0) return fail(err_memory_allocation);
    memset(q, 0xff, bytes);
    pinned[(uintptr_t)q] = bytes;
    *p = q;
    return ok;
}

int host_free(void *p)
{
    std::lock_guard<std::mutex> g(mu);
    if (!p) return ok;
    drain_all(); /* cudaFreeHost waits for the device */
    auto it = pinned.find((uintptr_t)p);
    if (it == pinned.end()) {
        char what[256];
        describe(what, sizeof what, p);
        report("cudaFreeHost(%p): not a pointer cudaMallocHost returned (%s)", p, what);
        return fail(err_invalid_value);
    }
    pinned.erase(it);
    free(p);
    return ok;
}

int memcpy_async(void *dst, const void *src, size_t n, int kind, emu_stream *s)
{
    std::lock_guard<std::mutex> g(mu);
    if (int e = sticky.load()) return fail(e);
    emu_stream *st = resolve(s);
    if (!st) return fail(err_invalid_handle);
    if (n == 0) return ok;
    bool dd = in_region(dst), sd = in_region(src);
    if (kind == copy_default) kind = sd ? (dd ? copy_d2d : copy_d2h) : (dd ? copy_h2d : copy_h2h);
    static const char *const names[] = {"host to host", "host to device", "device to host",
                                        "device to device"};
    const bool dst_dev = kind == copy_h2d || kind == copy_d2d;
    const bool src_dev = kind == copy_d2h || kind == copy_d2d;
    const bool dst_ok = dst_dev ? alloc_of(dst, n) != nullptr : (dst && !dd);
    const bool src_ok = src_dev ? alloc_of(src, n) != nullptr : (src && !sd);
    if (kind < copy_h2d || kind > copy_d2d || !dst_ok || !src_ok) {
        char wd[256], ws[256];
        describe(wd, sizeof wd, dst);
        describe(ws, sizeof ws, src);
        report("cudaMemcpyAsync %s of %zu bytes refused: destination %p is %s%s; source %p is %s%s",
               kind >= 0 && kind <= 3 ? names[kind] : "of an unknown kind", n, dst, wd,
               dst_ok ? "" : " (wrong, or too short)", src, ws,
               src_ok ? "" : " (wrong, or too short)");
        return fail(err_invalid_value);
    }
    if (kind == copy_d2d) {
        uintptr_t a = (uintptr_t)dst, b = (uintptr_t)src;
        if (a < b + n && b < a + n) {
            report("cudaMemcpyAsync device to device of %zu bytes: %p and %p overlap", n, dst, src);
            return fail(err_invalid_value);
        }
    }
    /* Page-locked host memory and device-to-device copies are fully
     * asynchronous: run in stream order at the next wait (the host buffer
     * must stay as it is until then). Pageable host memory: the stream's
     * earlier work first, then the copy, before the call returns (CUDA's
     * documented behaviour for pageable memory). */
    bool async = kind == copy_d2d || (kind == copy_h2d && pinned_of(src, n)) ||
                 (kind == copy_d2h && pinned_of(dst, n));
    if (async) {
        st->q.emplace_back([dst, src, n] {
            double t0 = profile.on ? now() : 0;
            memcpy(dst, src, n);
            profile.add("memcpy (queued)", profile.on ? now() - t0 : 0);
        });
        return ok;
    }
    drain(st);
    if (int e = sticky.load()) return fail(e);
    opened o;
    memcpy(dst, src, n);
    return ok;
}

int memset_async(void *dst, int value, size_t n, emu_stream *s)
{
    std::lock_guard<std::mutex> g(mu);
    if (int e = sticky.load()) return fail(e);
    emu_stream *st = resolve(s);
    if (!st) return fail(err_invalid_handle);
    if (n == 0) return ok;
    if (!alloc_of(dst, n)) {
        char wd[256];
        describe(wd, sizeof wd, dst);
        report("cudaMemsetAsync of %zu bytes at %p refused: %s (or too short)", n, dst, wd);
        return fail(err_invalid_value);
    }
    st->q.emplace_back([dst, value, n] { memset(dst, value, n); });
    return ok;
}

int sgemm(emu_stream *s, int transa, int transb, int m, int n, int k, float alpha, const float *A,
          int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    std::lock_guard<std::mutex> g(mu);
    if (int e = sticky.load()) return fail(e);
    emu_stream *st = resolve(s);
    if (!st) return fail(err_invalid_handle);
    st->q.emplace_back(
        [=] { run_gemm("cublasSgemm", transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C,
                       ldc); });
    return ok;
}

int gemm_bf16(emu_stream *s, int transa, int transb, int m, int n, int k, float alpha,
              const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
    std::lock_guard<std::mutex> g(mu);
    if (int e = sticky.load()) return fail(e);
    emu_stream *st = resolve(s);
    if (!st) return fail(err_invalid_handle);
    st->q.emplace_back([=] {
        run_gemm("cublasGemmEx", transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    });
    return ok;
}

void submit_kernel(const char *name, const char *where, unsigned max_threads, dim3 grid,
                   dim3 block, size_t shmem, emu_stream *s, std::function<void()> body,
                   std::vector<std::pair<int, const void *>> ptrs)
{
    std::lock_guard<std::mutex> g(mu);
    if (int e = sticky.load()) {
        fail(e);
        return;
    }
    emu_stream *st = resolve(s);
    if (!st) {
        report("kernel %s (%s): launched on a stream that does not exist", name, where);
        fail(err_invalid_handle);
        return;
    }
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    if (grid.x < 1 || grid.x > 0x7fffffffu || grid.y < 1 || grid.y > 65535 || grid.z < 1 ||
        grid.z > 65535 || block.x < 1 || block.x > 1024 || block.y < 1 || block.y > 1024 ||
        block.z < 1 || block.z > 64 || nt > MAX_THREADS) {
        report("kernel %s (%s): launch refused: grid (%u,%u,%u), block (%u,%u,%u)", name, where,
               grid.x, grid.y, grid.z, block.x, block.y, block.z);
        fail(err_invalid_configuration);
        return;
    }
    if ((max_threads && nt > max_threads) || shmem > DYN_MAX) {
        report("kernel %s (%s): launch refused: %llu threads (its __launch_bounds__: %u), %zu "
               "bytes of dynamic shared memory (at most %zu)",
               name, where, nt, max_threads, shmem, DYN_MAX);
        fail(err_launch_out_of_resources);
        return;
    }
    kernel_run k{name, where, grid, block, shmem, std::move(body), std::move(ptrs)};
    st->q.emplace_back([k]() mutable { run_kernel(k); });
}

/* ---- device side ---------------------------------------------------------- */

void syncthreads_at(const char *file, int line)
{
    fiber *f = cur;
    if (!f) {
        report("__syncthreads() outside a kernel (%s:%d)", file, line);
        return;
    }
    f->file = file;
    f->line = line;
    f->state = AT_BLOCK;
    if (n_block++ == 0) block_first = f;
    else if (!block_odd && !same_site(*f, *block_first)) block_odd = f;
    yield_thread();
}

uint64_t shfl_xor_bits(uint64_t v, int lane_mask, int width, unsigned mask)
{
    fiber *f = cur;
    const kernel_run &k = *cur_kernel;
    const unsigned nt = k.block.x * k.block.y * k.block.z;
    const unsigned lane = f->lin % EMU_WARP, base = f->lin - lane;
    const unsigned lanes = nt - base < (unsigned)EMU_WARP ? nt - base : (unsigned)EMU_WARP;
    const char *bad = nullptr;
    if (width <= 0 || width > EMU_WARP || (width & (width - 1)))
        bad = "a shuffle width that is not a power of two up to the warp width";
    else if (mask != ~0u)
        bad = "a shuffle with a partial member mask (not emulated)";
    else if (lanes != (unsigned)EMU_WARP)
        bad = "a shuffle in a partial warp (blockDim not a multiple of the warp width)";
    if (bad) {
        fault(err_launch_failure,
              "kernel %s (%s), block (%u,%u,%u), thread (%u,%u,%u): %s (width %d, mask %#x, %u "
              "lanes of %d)",
              k.name, k.where, blockIdx.x, blockIdx.y, blockIdx.z, f->tid.x, f->tid.y, f->tid.z,
              bad, width, mask, lanes, EMU_WARP);
        kill_current();
    }
    uint64_t *slots = shfl_slots[f->shuffles & 1];
    slots[f->lin] = v;
    f->file = "a warp shuffle";
    f->line = (int)f->shuffles++; /* the lanes of a warp must be at the same one */
    f->state = AT_WARP;
    const unsigned w = f->lin / EMU_WARP;
    if (n_warp[w]++ == 0) warp_first[w] = f;
    else if (!warp_odd[w] && f->line != warp_first[w]->line) warp_odd[w] = f;
    yield_thread(); /* every lane has written its value */
    unsigned src = lane ^ (unsigned)lane_mask, group = lane & ~(unsigned)(width - 1);
    return src >= group + (unsigned)width ? v : slots[base + src];
}

void shared_fresh(unsigned long long *serial, void *p, size_t bytes)
{
    if (*serial == block_serial) return;
    *serial = block_serial;
    memset(p, 0xff, bytes);
}

void *dynamic_shared() { return dyn_ptr; }

} // namespace emu

extern "C" void emu_fiber_main()
{
    emu::cur_kernel->body();
    emu::cur->state = emu::DONE;
    emu::n_done++;
    emu::yield_thread();
    __builtin_trap(); /* a returned thread is never resumed */
}

/* device.c — devices by name: the CPU backend linked in, the GPU backends
 * loaded from their shared objects on first use (kdev_backend.h is the
 * table each one fills). One binary thus runs on a machine without any GPU
 * stack: a missing .so is "not built", a .so whose vendor runtime cannot
 * load is "no runtime", and `shardnode devices` says which. */
#include "kdev_backend.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct kdev {
    const kdev_backend *be;
    void *ctx;
    int index;
    char name[16];
    kdev_info info;
};

/* One per GPU vendor: where its table came from, or why there is none. */
typedef struct {
    const char *vendor, *label, *file;
    int tried, status;
    const kdev_backend *be;
    char why[256];
} gpu_slot;

static gpu_slot gpu_slots[] = {
    {"cuda", "CUDA", "libshardnode-cuda.so", 0, 0, NULL, ""},
    {"hip", "HIP", "libshardnode-hip.so", 0, 0, NULL, ""},
};
#define NGPU ((int)(sizeof gpu_slots / sizeof gpu_slots[0]))
static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;

/* The folders a backend's .so is looked for in: the one
 * $SHARDNODE_BACKEND_DIR names, alone, when it is set; else the
 * executable's and its parent (the test binaries of a build tree live one
 * folder below the shardnode binary). Folders longer than DIR_MAX are
 * skipped rather than cut. */
#define DIR_MAX 1024
static int backend_dirs(char dirs[3][DIR_MAX])
{
    int n = 0;
    const char *env = getenv("SHARDNODE_BACKEND_DIR");
    if (env && *env) {
        if (strlen(env) < DIR_MAX) snprintf(dirs[n++], DIR_MAX, "%s", env);
        return n;
    }
    char exe[DIR_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0 || len >= (ssize_t)sizeof exe - 1) return n;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return n;
    *slash = '\0';
    memcpy(dirs[n++], exe[0] ? exe : "/", strlen(exe[0] ? exe : "/") + 1);
    slash = strrchr(exe, '/');
    if (slash && slash != exe) {
        *slash = '\0';
        memcpy(dirs[n++], exe, strlen(exe) + 1);
    }
    return n;
}

static void gpu_load(gpu_slot *g)
{
    char dirs[3][DIR_MAX], path[DIR_MAX + 64], looked[600] = "";
    int nd = backend_dirs(dirs), found = 0;
    for (int i = 0; i < nd && !found; i++) {
        memcpy(path, dirs[i], strlen(dirs[i]) + 1);
        strcat(path, "/");
        strcat(path, g->file); /* DIR_MAX + 64 holds both */
        if (access(path, R_OK) == 0) {
            found = 1;
        } else {
            size_t l = strlen(looked);
            snprintf(looked + l, sizeof looked - l, "%s%.280s", l ? ", " : "", dirs[i]);
        }
    }
    if (!found) {
        g->status = KDEV_ENOTBUILT;
        snprintf(g->why, sizeof g->why, "this build has no %s backend (%s not in %.180s)",
                 g->label, g->file, looked[0] ? looked : "any folder");
        return;
    }
    /* shardnode often runs as root: never load code that another user could
     * have written (the file or its folder owned by someone else, or
     * writable by group or others) */
    struct stat fst, dst;
    char dir[DIR_MAX + 64];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    uid_t me = geteuid();
    if (stat(path, &fst) != 0 || stat(slash ? dir : ".", &dst) != 0 ||
        (fst.st_uid != me && fst.st_uid != 0) || (dst.st_uid != me && dst.st_uid != 0) ||
        (fst.st_mode & 022) || (dst.st_mode & 022)) {
        g->status = KDEV_EFAIL;
        snprintf(g->why, sizeof g->why,
                 "%.150s is not loaded: it or its folder is another user's or writable by "
                 "group or others", path);
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        g->status = KDEV_ENORUNTIME;
        snprintf(g->why, sizeof g->why, "%.100s cannot load (the %s runtime missing?): %.100s",
                 path, g->label, e ? e : "unknown dlopen error");
        return;
    }
    kdev_backend_fn fn;
    void *sym = dlsym(h, KDEV_BACKEND_SYMBOL);
    memcpy(&fn, &sym, sizeof fn);
    const kdev_backend *be = sym ? fn() : NULL;
    if (!be) {
        g->status = KDEV_EFAIL;
        snprintf(g->why, sizeof g->why, "%.150s is not a shardnode backend (no %s)", path,
                 KDEV_BACKEND_SYMBOL);
        dlclose(h);
        return;
    }
    if (be->abi != KDEV_ABI || !be->vendor || strcmp(be->vendor, g->vendor) != 0) {
        g->status = KDEV_EFAIL;
        snprintf(g->why, sizeof g->why,
                 "%.100s is a backend of ABI %d for '%.8s'; this shardnode needs ABI %d for "
                 "'%s' (a stale build? rebuild both)",
                 path, be->abi, be->vendor ? be->vendor : "?", KDEV_ABI, g->vendor);
        dlclose(h);
        return;
    }
    g->be = be; /* the handle stays open for the life of the process */
    g->status = KDEV_OK;
}

static gpu_slot *gpu_get(int i)
{
    pthread_mutex_lock(&gpu_lock);
    if (!gpu_slots[i].tried) {
        gpu_load(&gpu_slots[i]);
        gpu_slots[i].tried = 1;
    }
    pthread_mutex_unlock(&gpu_lock);
    return &gpu_slots[i];
}

/* "cpu", "cuda", "cuda:N", "hip", "hip:N": which backend (-1 cpu, else the
 * slot) and which device; -1 when the name is none of these. */
static int parse_name(const char *name, int *slot, int *index)
{
    if (!name) return -1;
    *index = 0;
    if (strcmp(name, "cpu") == 0 || strcmp(name, "cpu:0") == 0) {
        *slot = -1;
        return 0;
    }
    for (int i = 0; i < NGPU; i++) {
        size_t vl = strlen(gpu_slots[i].vendor);
        if (strncmp(name, gpu_slots[i].vendor, vl) != 0) continue;
        const char *rest = name + vl;
        if (*rest == '\0') {
            *slot = i;
            return 0;
        }
        if (*rest != ':' || rest[1] < '0' || rest[1] > '9') return -1;
        errno = 0;
        char *end;
        long v = strtol(rest + 1, &end, 10);
        if (*end || errno || v < 0 || v > 1023) return -1;
        *slot = i;
        *index = (int)v;
        return 0;
    }
    return -1;
}

int kdev_open(const char *name, kdev **out, char *err, size_t errlen)
{
    *out = NULL;
    int slot, index;
    if (parse_name(name, &slot, &index) != 0) {
        snprintf(err, errlen, "device '%s': not a device name (cpu, cuda:N or hip:N)",
                 name ? name : "(null)");
        return KDEV_EBADNAME;
    }
    const kdev_backend *be = kdev_cpu_backend();
    char why[256] = "";
    if (slot >= 0) {
        gpu_slot *g = gpu_get(slot);
        if (g->status != KDEV_OK) {
            snprintf(err, errlen, "device '%s': %s", name, g->why);
            return g->status;
        }
        be = g->be;
        int n = be->count(why, sizeof why);
        if (n < 0) {
            snprintf(err, errlen, "device '%s': the %s runtime finds no usable driver: %s", name,
                     g->label, why);
            return KDEV_ENORUNTIME;
        }
        if (index >= n) {
            snprintf(err, errlen, "device '%s': no such device (this machine has %d %s device%s%s)",
                     name, n, g->label, n == 1 ? "" : "s",
                     n ? ", numbered from 0" : "");
            return KDEV_ENODEV;
        }
    }
    kdev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "device '%s': out of memory", name);
        return KDEV_EFAIL;
    }
    d->be = be;
    d->index = index;
    snprintf(d->name, sizeof d->name, "%s:%d", be->vendor, index);
    if (slot < 0) snprintf(d->name, sizeof d->name, "cpu");
    if (be->info(index, &d->info, why, sizeof why) != 0 ||
        be->open(index, &d->ctx, why, sizeof why) != 0) {
        snprintf(err, errlen, "device '%s': %s", d->name, why);
        free(d);
        return KDEV_EFAIL;
    }
    *out = d;
    return KDEV_OK;
}

static kdev cpu_device;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static void cpu_device_init(void)
{
    char why[256];
    cpu_device.be = kdev_cpu_backend();
    snprintf(cpu_device.name, sizeof cpu_device.name, "cpu");
    cpu_device.be->info(0, &cpu_device.info, why, sizeof why); /* cannot fail for 0 */
    cpu_device.be->open(0, &cpu_device.ctx, why, sizeof why);
}

kdev *kdev_cpu(void)
{
    pthread_once(&cpu_once, cpu_device_init);
    return &cpu_device;
}

void kdev_close(kdev *d)
{
    if (!d || d == &cpu_device) return;
    d->be->close(d->ctx);
    free(d);
}

const char *kdev_name(const kdev *d) { return d->name; }
const kdev_info *kdev_get_info(const kdev *d) { return &d->info; }
int kdev_is_host(const kdev *d) { return d->be == kdev_cpu_backend(); }

int kdev_list(kdev_entry *out, int max)
{
    int n = 0;
    char why[256];
    if (n < max) {
        memset(&out[n], 0, sizeof out[n]);
        snprintf(out[n].name, sizeof out[n].name, "cpu");
        out[n].status = kdev_cpu_backend()->info(0, &out[n].info, why, sizeof why) == 0
                            ? KDEV_OK : KDEV_EFAIL;
        n++;
    }
    for (int i = 0; i < NGPU && n < max; i++) {
        gpu_slot *g = gpu_get(i);
        int count = 0;
        why[0] = '\0';
        if (g->status == KDEV_OK) {
            count = g->be->count(why, sizeof why);
            for (int k = 0; k < count && n < max; k++) {
                memset(&out[n], 0, sizeof out[n]);
                snprintf(out[n].name, sizeof out[n].name, "%s:%d", g->vendor, k);
                if (g->be->info(k, &out[n].info, why, sizeof why) == 0) {
                    out[n].status = KDEV_OK;
                } else {
                    out[n].status = KDEV_EFAIL;
                    snprintf(out[n].why, sizeof out[n].why, "%s", why);
                }
                n++;
            }
            if (count > 0 || n >= max) continue;
        }
        memset(&out[n], 0, sizeof out[n]);
        snprintf(out[n].name, sizeof out[n].name, "%s", g->vendor);
        if (g->status != KDEV_OK) {
            out[n].status = g->status;
            snprintf(out[n].why, sizeof out[n].why, "%s", g->why);
        } else if (count < 0) {
            out[n].status = KDEV_ENORUNTIME;
            snprintf(out[n].why, sizeof out[n].why, "the %s runtime finds no usable driver: %.200s",
                     g->label, why);
        } else {
            out[n].status = KDEV_ENODEV;
            snprintf(out[n].why, sizeof out[n].why, "the %s runtime sees no device", g->label);
        }
        n++;
    }
    return n;
}

void *kdev_alloc(kdev *d, size_t bytes) { return d->be->alloc(d->ctx, bytes); }
void kdev_free(kdev *d, void *p)
{
    if (p) d->be->free(d->ctx, p);
}
void *kdev_host_alloc(kdev *d, size_t bytes) { return d->be->host_alloc(d->ctx, bytes); }
void kdev_host_free(kdev *d, void *p)
{
    if (p) d->be->host_free(d->ctx, p);
}
int kdev_to_device(kdev *d, void *dst, const void *src, size_t bytes)
{
    return d->be->to_device(d->ctx, dst, src, bytes) == 0 ? KDEV_OK : KDEV_EFAIL;
}
int kdev_to_host(kdev *d, void *dst, const void *src, size_t bytes)
{
    return d->be->to_host(d->ctx, dst, src, bytes) == 0 ? KDEV_OK : KDEV_EFAIL;
}
int kdev_copy(kdev *d, void *dst, const void *src, size_t bytes)
{
    return d->be->copy(d->ctx, dst, src, bytes) == 0 ? KDEV_OK : KDEV_EFAIL;
}
int kdev_sync(kdev *d, char *err, size_t errlen)
{
    char why[256] = "";
    if (d->be->sync(d->ctx, why, sizeof why) == 0) return KDEV_OK;
    snprintf(err, errlen, "device '%s': %s", d->name, why);
    return KDEV_EFAIL;
}
int kdev_set_gemm(kdev *d, const char *which) { return d->be->set_gemm(d->ctx, which); }
const char *kdev_gemm_name(kdev *d) { return d->be->gemm_name(d->ctx); }
int kdev_set_precision(kdev *d, int bf16) { return d->be->set_precision(d->ctx, bf16); }

void kdev_matmul_forward(kdev *d, float *out, const float *inp, const float *weight, int N,
                         int IC, int OC, int accumulate)
{
    d->be->matmul_forward(d->ctx, out, inp, weight, N, IC, OC, accumulate);
}
void kdev_matmul_backward(kdev *d, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, int N, int IC, int OC)
{
    d->be->matmul_backward(d->ctx, dinp, dweight, dout, inp, weight, N, IC, OC);
}
void kdev_embedding_forward(kdev *d, float *out, const int32_t *ids, const float *wte, int N,
                            int C)
{
    d->be->embedding_forward(d->ctx, out, ids, wte, N, C);
}
void kdev_embedding_backward(kdev *d, float *dwte, const float *dout, const int32_t *ids, int N,
                             int C)
{
    d->be->embedding_backward(d->ctx, dwte, dout, ids, N, C);
}
void kdev_rmsnorm_forward(kdev *d, float *out, float *rstd, const float *inp,
                          const float *weight, int N, int C, float eps)
{
    d->be->rmsnorm_forward(d->ctx, out, rstd, inp, weight, N, C, eps);
}
void kdev_rmsnorm_backward(kdev *d, float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight, const float *rstd, int N,
                           int C)
{
    d->be->rmsnorm_backward(d->ctx, dinp, dweight, dout, inp, weight, rstd, N, C);
}
void kdev_rope_forward(kdev *d, float *x, const float *cos_tab, const float *sin_tab, int N,
                       int T, int nheads, int HD, int ld)
{
    d->be->rope_forward(d->ctx, x, cos_tab, sin_tab, N, T, nheads, HD, ld);
}
void kdev_rope_backward(kdev *d, float *dx, const float *cos_tab, const float *sin_tab, int N,
                        int T, int nheads, int HD, int ld)
{
    d->be->rope_backward(d->ctx, dx, cos_tab, sin_tab, N, T, nheads, HD, ld);
}
size_t kdev_attention_scratch_floats(kdev *d, int B, int T, int NH, int HD)
{
    return d->be->attention_scratch_floats(d->ctx, B, T, NH, HD);
}
void kdev_attention_forward(kdev *d, float *out, float *att, const float *qkv, int B, int T,
                            int NH, int NKV, int HD)
{
    d->be->attention_forward(d->ctx, out, att, qkv, B, T, NH, NKV, HD);
}
void kdev_attention_backward(kdev *d, float *dqkv, const float *dout, const float *qkv,
                             const float *att, float *scratch, int B, int T, int NH, int NKV,
                             int HD)
{
    d->be->attention_backward(d->ctx, dqkv, dout, qkv, att, scratch, B, T, NH, NKV, HD);
}
void kdev_swiglu_forward(kdev *d, float *h, const float *gu, int N, int F)
{
    d->be->swiglu_forward(d->ctx, h, gu, N, F);
}
void kdev_swiglu_backward(kdev *d, float *dgu, const float *dh, const float *gu, int N, int F)
{
    d->be->swiglu_backward(d->ctx, dgu, dh, gu, N, F);
}
double kdev_crossentropy_forward(kdev *d, float *probs_inplace, float *losses,
                                 const int32_t *labels, int N, int V, int *kept)
{
    return d->be->crossentropy_forward(d->ctx, probs_inplace, losses, labels, N, V, kept);
}
void kdev_crossentropy_backward(kdev *d, float *dlogits, const float *probs,
                                const int32_t *labels, int N, int V, float scale)
{
    d->be->crossentropy_backward(d->ctx, dlogits, probs, labels, N, V, scale);
}
double kdev_grad_sumsq(kdev *d, const float *g, size_t n)
{
    return d->be->grad_sumsq(d->ctx, g, n);
}
void kdev_adamw_update(kdev *d, float *p, const float *g, float *m, float *v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                       float grad_scale)
{
    d->be->adamw_update(d->ctx, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t,
                        grad_scale);
}
void kdev_zero(kdev *d, float *x, size_t n) { d->be->zero(d->ctx, x, n); }
void kdev_add(kdev *d, float *y, const float *x, size_t n) { d->be->add(d->ctx, y, x, n); }

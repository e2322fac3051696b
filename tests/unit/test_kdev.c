/* test_kdev.c — devices by name (kernels.h, kernels/device.c): the CPU
 * device runs every operation exactly as the CPU kernels called directly;
 * every way a GPU device can be missing is refused with its own status and
 * a message naming the device and what is wrong (a bad name, no backend
 * file, a file that cannot load, a backend of another ABI). Each refusal
 * runs in a child process: device.c loads a backend once per process. */
#include "check.h"
#include "rand_fixture.h"

#include "kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static float *fdup(const float *x, size_t n)
{
    float *p = malloc(n * sizeof *p);
    memcpy(p, x, n * sizeof *p);
    return p;
}
static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * 4) == 0; }

/* Opens `name` in a child with SHARDNODE_BACKEND_DIR = dir (NULL: unset);
 * checks the status and that the message holds each of the words. */
static void refused(const char *name, const char *dir, int want, const char *w1, const char *w2)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (dir) setenv("SHARDNODE_BACKEND_DIR", dir, 1);
        else unsetenv("SHARDNODE_BACKEND_DIR");
        kdev *d = NULL;
        char err[512] = "";
        int st = kdev_open(name, &d, err, sizeof err);
        CHECK(st == want, "open %s (dir %s): status %d, want %d (%s)", name, dir ? dir : "-",
              st, want, err);
        CHECK(!d, "open %s: a refused open returns no device", name);
        CHECK(strstr(err, name) != NULL, "open %s: message names the device: %s", name, err);
        CHECK(!w1 || strstr(err, w1), "open %s: message says '%s': %s", name, w1, err);
        CHECK(!w2 || strstr(err, w2), "open %s: message says '%s': %s", name, w2, err);
        printf("  %s -> %d: %s\n", name, st, err);
        fflush(stdout);
        _exit(failures ? 1 : 0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child for %s failed", name);
}

static void test_refusals(void)
{
    printf("refusals\n");
    refused("gpu", NULL, KDEV_EBADNAME, "cpu, cuda:N or hip:N", NULL);
    refused("cuda:", NULL, KDEV_EBADNAME, NULL, NULL);
    refused("cuda:-1", NULL, KDEV_EBADNAME, NULL, NULL);
    refused("cuda:1x", NULL, KDEV_EBADNAME, NULL, NULL);
    refused("hip:99999", NULL, KDEV_EBADNAME, NULL, NULL);
    refused("cpu:1", NULL, KDEV_EBADNAME, NULL, NULL);

    char empty[256];
    snprintf(empty, sizeof empty, "%s/kdev_empty.%d", SHARDNODE_TEST_TMP, (int)getpid());
    mkdir(empty, 0755);
    refused("cuda:0", empty, KDEV_ENOTBUILT, "libshardnode-cuda.so", empty);
    refused("hip:1", empty, KDEV_ENOTBUILT, "libshardnode-hip.so", empty);

    /* Not a shared object at all: dlopen's own reason is passed on. */
    char bad[256], path[320];
    snprintf(bad, sizeof bad, "%s/kdev_bad.%d", SHARDNODE_TEST_TMP, (int)getpid());
    mkdir(bad, 0755);
    snprintf(path, sizeof path, "%s/libshardnode-hip.so", bad);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "write %s", path);
    if (f) {
        fputs("not an ELF file\n", f);
        fclose(f);
    }
    refused("hip:0", bad, KDEV_ENORUNTIME, path, "cannot load");

    /* A backend file others could have written is never loaded. */
    chmod(path, 0666);
    refused("hip:0", bad, KDEV_EFAIL, path, "writable by group or others");
    chmod(path, 0644);
    chmod(bad, 0777);   /* its folder: anyone could swap the file */
    refused("hip:0", bad, KDEV_EFAIL, path, "writable by group or others");
    chmod(bad, 0755);
    /* another user's file (root can hand it to nobody; elsewhere skipped) */
    if (geteuid() == 0 && chown(path, 65534, 65534) == 0) {
        refused("hip:0", bad, KDEV_EFAIL, path, "another user's");
        CHECK(chown(path, 0, 0) == 0, "chown %s back", path);
    }
    /* the file as it was: refused by dlopen again, not by the check */
    refused("hip:0", bad, KDEV_ENORUNTIME, path, "cannot load");

    /* A backend of another ABI version (a stale build) is named and refused. */
    refused("cuda:0", KDEV_FAKE_DIR, KDEV_EFAIL, "ABI", "stale");
    unlink(path);
    rmdir(bad);
    rmdir(empty);
}

/* The list always has the CPU first, and says for each GPU vendor either
 * its devices or why none. */
static void test_list(void)
{
    printf("list\n");
    kdev_entry e[32];
    int n = kdev_list(e, 32);
    CHECK(n >= 3, "cpu plus a line per GPU vendor at least: %d", n);
    CHECK(n > 0 && strcmp(e[0].name, "cpu") == 0 && e[0].status == KDEV_OK, "cpu first");
    CHECK(n > 0 && e[0].info.units >= 1 && e[0].info.mem_total > 0, "cpu has cores and memory");
    int cuda = 0, hip = 0;
    for (int i = 0; i < n; i++) {
        printf("  %-8s %d %s %s\n", e[i].name, e[i].status,
               e[i].status == KDEV_OK ? e[i].info.name : "", e[i].why);
        if (strncmp(e[i].name, "cuda", 4) == 0) cuda++;
        if (strncmp(e[i].name, "hip", 3) == 0) hip++;
        CHECK(e[i].status == KDEV_OK || e[i].why[0], "%s: a reason when not ok", e[i].name);
    }
    CHECK(cuda >= 1 && hip >= 1, "a line for CUDA (%d) and HIP (%d)", cuda, hip);
    kdev_entry one[1];
    CHECK(kdev_list(one, 1) == 1, "kdev_list writes at most max");
}

/* The CPU device: each operation through the handle gives the bits of the
 * kernel called directly (the table is wired to the right functions). */
static void test_cpu(void)
{
    printf("cpu device\n");
    kdev *d = NULL;
    char err[256];
    CHECK(kdev_open("cpu", &d, err, sizeof err) == KDEV_OK, "open cpu: %s", err);
    if (!d) return;
    CHECK(strcmp(kdev_name(d), "cpu") == 0, "name %s", kdev_name(d));
    CHECK(kdev_is_host(d), "cpu memory is host memory");
    CHECK(kdev_set_gemm(d, "own") == -1 && kdev_set_gemm(d, "blas") == 0, "cpu gemm choice");
    const int B = 2, T = 5, NH = 4, NKV = 2, HD = 6, C = 21, F = 13, V = 17;
    const int N = B * T, QKV = (NH + 2 * NKV) * HD;
    size_t nq = (size_t)N * QKV;

    float *inp = rnd((size_t)N * C), *w = rnd((size_t)F * C), *o1 = rnd((size_t)N * F);
    float *o2 = fdup(o1, (size_t)N * F);
    matmul_forward(o1, inp, w, N, C, F, 1);
    kdev_matmul_forward(d, o2, inp, w, N, C, F, 1);
    CHECK(same(o1, o2, (size_t)N * F), "matmul_forward");
    float *di1 = rnd((size_t)N * C), *dw1 = rnd((size_t)F * C);
    float *di2 = fdup(di1, (size_t)N * C), *dw2 = fdup(dw1, (size_t)F * C);
    matmul_backward(di1, dw1, o1, inp, w, N, C, F);
    kdev_matmul_backward(d, di2, dw2, o1, inp, w, N, C, F);
    CHECK(same(di1, di2, (size_t)N * C) && same(dw1, dw2, (size_t)F * C), "matmul_backward");

    float *qkv1 = rnd(nq), *qkv2 = fdup(qkv1, nq);
    float cs[5 * 3], sn[5 * 3];
    rope_tables(cs, sn, T, HD, 10000.0f);
    rope_forward(qkv1, cs, sn, N, T, NH, HD, QKV);
    kdev_rope_forward(d, qkv2, cs, sn, N, T, NH, HD, QKV);
    CHECK(same(qkv1, qkv2, nq), "rope_forward");
    rope_backward(qkv1, cs, sn, N, T, NKV, HD, QKV);
    kdev_rope_backward(d, qkv2, cs, sn, N, T, NKV, HD, QKV);
    CHECK(same(qkv1, qkv2, nq), "rope_backward");

    size_t natt = (size_t)B * NH * T * T;
    float *att1 = rnd(natt), *att2 = rnd(natt), *ao1 = rnd((size_t)N * NH * HD);
    float *ao2 = rnd((size_t)N * NH * HD);
    attention_forward(ao1, att1, qkv1, B, T, NH, NKV, HD);
    kdev_attention_forward(d, ao2, att2, qkv1, B, T, NH, NKV, HD);
    CHECK(same(ao1, ao2, (size_t)N * NH * HD) && same(att1, att2, natt), "attention_forward");
    size_t ns = kdev_attention_scratch_floats(d, B, T, NH, HD);
    CHECK(ns >= attention_scratch_floats(T), "attention scratch %zu", ns);
    float *scr = kdev_alloc(d, ns * sizeof(float));
    float *dq1 = rnd(nq), *dq2 = fdup(dq1, nq);
    int nthr = kernels_threads();
    float *scr1 = malloc(attention_scratch_floats(T) * (size_t)nthr * sizeof(float));
    attention_backward(dq1, ao1, qkv1, att1, scr1, nthr, B, T, NH, NKV, HD);
    kdev_attention_backward(d, dq2, ao1, qkv1, att1, scr, B, T, NH, NKV, HD);
    CHECK(same(dq1, dq2, nq), "attention_backward");

    float *gu = rnd((size_t)N * 2 * F), *h1 = rnd((size_t)N * F), *h2 = rnd((size_t)N * F);
    swiglu_forward(h1, gu, N, F);
    kdev_swiglu_forward(d, h2, gu, N, F);
    CHECK(same(h1, h2, (size_t)N * F), "swiglu_forward");
    float *dg1 = rnd((size_t)N * 2 * F), *dg2 = fdup(dg1, (size_t)N * 2 * F);
    swiglu_backward(dg1, h1, gu, N, F);
    kdev_swiglu_backward(d, dg2, h1, gu, N, F);
    CHECK(same(dg1, dg2, (size_t)N * 2 * F), "swiglu_backward");

    float *nw = rnd(C), *r1 = rnd(N), *r2 = rnd(N), *n1 = rnd((size_t)N * C);
    float *n2 = rnd((size_t)N * C);
    rmsnorm_forward(n1, r1, inp, nw, N, C, 1e-5f);
    kdev_rmsnorm_forward(d, n2, r2, inp, nw, N, C, 1e-5f);
    CHECK(same(n1, n2, (size_t)N * C) && same(r1, r2, N), "rmsnorm_forward");
    float *dnw1 = rnd(C), *dnw2 = fdup(dnw1, C);
    rmsnorm_backward(di1, dnw1, n1, inp, nw, r1, N, C);
    kdev_rmsnorm_backward(d, di2, dnw2, n1, inp, nw, r1, N, C);
    CHECK(same(di1, di2, (size_t)N * C) && same(dnw1, dnw2, C), "rmsnorm_backward");

    int32_t ids[10], labels[10];
    for (int i = 0; i < N; i++) {
        ids[i] = (i * 7) % V;
        labels[i] = i == 3 ? KERNELS_IGNORE_INDEX : (i * 5) % V;
    }
    float *wte = rnd((size_t)V * C), *e1 = rnd((size_t)N * C), *e2 = rnd((size_t)N * C);
    embedding_forward(e1, ids, wte, N, C);
    kdev_embedding_forward(d, e2, ids, wte, N, C);
    CHECK(same(e1, e2, (size_t)N * C), "embedding_forward");
    float *dwte1 = rnd((size_t)V * C), *dwte2 = fdup(dwte1, (size_t)V * C);
    embedding_backward(dwte1, e1, ids, N, C);
    kdev_embedding_backward(d, dwte2, e1, ids, N, C);
    CHECK(same(dwte1, dwte2, (size_t)V * C), "embedding_backward");

    float *lg1 = rnd((size_t)N * V), *lg2 = fdup(lg1, (size_t)N * V), *ls1 = rnd(N), *ls2 = rnd(N);
    int k1 = 0, k2 = 0;
    double s1 = crossentropy_forward(lg1, ls1, labels, N, V, &k1);
    double s2 = kdev_crossentropy_forward(d, lg2, ls2, labels, N, V, &k2);
    CHECK(s1 == s2 && k1 == k2 && k1 == N - 1 && same(lg1, lg2, (size_t)N * V) && same(ls1, ls2, N),
          "crossentropy_forward %g/%g kept %d/%d", s1, s2, k1, k2);
    float *dl1 = rnd((size_t)N * V), *dl2 = rnd((size_t)N * V);
    crossentropy_backward(dl1, lg1, labels, N, V, 0.25f);
    kdev_crossentropy_backward(d, dl2, lg1, labels, N, V, 0.25f);
    CHECK(same(dl1, dl2, (size_t)N * V), "crossentropy_backward");

    size_t np = (size_t)F * C;
    CHECK(grad_sumsq(dw1, np) == kdev_grad_sumsq(d, dw1, np), "grad_sumsq");
    float *p1 = rnd(np), *p2 = fdup(p1, np), *m1 = rnd(np), *m2 = fdup(m1, np);
    float *v1 = rnd(np), *v2 = NULL;
    for (size_t i = 0; i < np; i++) v1[i] = v1[i] * v1[i];
    v2 = fdup(v1, np);
    adamw_update(p1, dw1, m1, v1, np, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f);
    kdev_adamw_update(d, p2, dw1, m2, v2, np, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f);
    CHECK(same(p1, p2, np) && same(m1, m2, np) && same(v1, v2, np), "adamw_update");
    kernels_add(p1, m1, np);
    kdev_add(d, p2, m1, np);
    CHECK(same(p1, p2, np), "add");
    kdev_zero(d, p2, np);
    float zero = 0;
    int all0 = 1;
    for (size_t i = 0; i < np; i++) all0 &= memcmp(&p2[i], &zero, 4) == 0;
    CHECK(all0, "zero");

    float host[7] = {1, 2, 3, 4, 5, 6, 7}, back[7] = {0};
    float *dev = kdev_alloc(d, sizeof host);
    CHECK(dev && kdev_to_device(d, dev, host, sizeof host) == KDEV_OK &&
              kdev_to_host(d, back, dev, sizeof host) == KDEV_OK && memcmp(host, back, sizeof host) == 0,
          "copies round trip");
    CHECK(kdev_sync(d, err, sizeof err) == KDEV_OK, "sync: %s", err);
    kdev_free(d, dev);
    kdev_free(d, scr);
    free(scr1);
    float *bufs[] = {inp, w, o1, o2, di1, dw1, di2, dw2, qkv1, qkv2, att1, att2, ao1, ao2, dq1,
                     dq2, gu, h1, h2, dg1, dg2, nw, r1, r2, n1, n2, dnw1, dnw2, wte, e1, e2,
                     dwte1, dwte2, lg1, lg2, ls1, ls2, dl1, dl2, p1, p2, m1, m2, v1, v2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    kdev_close(d);
}

int main(void)
{
    rng = 0x9e3779b97f4a7c15ull;
    test_refusals();
    test_list();
    test_cpu();
    if (failures) printf("%d failure(s)\n", failures);
    else printf("all kdev checks passed\n");
    return failures != 0;
}

/* profile_cmd.c — `shardnode profile`: the real forward, backward and AdamW
 * of the embedding, one decoder layer and the head on this node's device,
 * timed over a few iterations, with its usable memory and the bytes each
 * part holds (--device cpu|cuda:N|hip:N: on that device, each part timed
 * to its end with kdev_sync). The result is cached per (device, model shape, micro-batch
 * shape) and is what a fleet file's "profile" reads. */
#include "commands.h"
#include "runtime.h"

#include "kernels.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The first line of /proc/FILE that starts with `key`, after its colon. */
static void proc_field(const char *file, const char *key, char *out, size_t len)
{
    FILE *f = fopen(file, "r");
    char line[512];
    snprintf(out, len, "unknown");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0) {
            char *v = strchr(line, ':');
            if (!v) continue;
            for (v++; *v == ' ' || *v == '\t'; v++) {}
            v[strcspn(v, "\n")] = 0;
            snprintf(out, len, "%s", v);
            break;
        }
    fclose(f);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Median over iterations of each part's forward, backward and update. */
typedef struct {
    int64_t fwd[COST_UNITS], bwd[COST_UNITS], opt[COST_UNITS];
} part_times;

/* The decoder layers are timed as a stage of nl of them, divided by nl
 * (--layers): one small layer alone may keep its weights in cache between
 * its forward and its backward, which a stage of many layers does not. */
/* The queued work of a GPU stage done, so the clock reads what it took. */
static int settle(stage *s, char *err, size_t errlen)
{
    return kdev_sync(stage_device(s), err, errlen) == KDEV_OK ? 0 : -1;
}

static int measure(const llama_config *cfg, int B, int T, int nl, int iters, kdev *dev,
                   part_times *out, char *err, size_t errlen)
{
    int L = cfg->num_hidden_layers, N = B * T, C = cfg->hidden_size, rc = -1;
    stage *st[COST_UNITS] = {NULL, NULL, NULL};
    int32_t *ids = malloc((size_t)N * sizeof *ids), *labels = malloc((size_t)N * sizeof *labels);
    float *act = malloc((size_t)N * C * sizeof *act), *dout = malloc((size_t)N * C * sizeof *dout);
    int64_t *samples = calloc((size_t)iters * 9, sizeof *samples);
    if (!ids || !labels || !act || !dout || !samples) {
        snprintf(err, errlen, "out of memory for a micro-batch of %d x %d", B, T);
        goto out;
    }
    if (stage_create_on(&st[COST_EMBED], cfg, 0, 0, true, false, B, T, 1, NULL, dev, err,
                        errlen) ||
        stage_create_on(&st[COST_LAYER], cfg, 0, nl, false, false, B, T, 1, NULL, dev, err,
                        errlen) ||
        stage_create_on(&st[COST_HEAD], cfg, L, L, false, true, B, T, 1, NULL, dev, err, errlen))
        goto out;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)cfg->vocab_size);
        labels[i] = i % T == T - 1 ? KERNELS_IGNORE_INDEX : (int32_t)((x >> 13) % (uint64_t)cfg->vocab_size);
    }
    for (size_t i = 0; i < (size_t)N * C; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        act[i] = (float)((double)(x >> 40) / (double)(1ull << 24) - 0.5);
        dout[i] = act[i] * 1e-3f;
    }
    for (int u = 0; u < COST_UNITS; u++) stage_init_weights(st[u], 1);
    const stage_adamw opt = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int it = -1; it < iters; it++) {   /* iteration -1 warms caches and pages up */
        int64_t t[9];
        double loss;
        int kept = 0;
        for (int u = 0; u < COST_UNITS; u++) stage_zero_grads(st[u]);
        if (settle(st[0], err, errlen)) goto out;
        int64_t t0 = now_ns();
        if (stage_forward(st[COST_EMBED], 0, ids, NULL, NULL, NULL, NULL, err, errlen)) goto out;
        int64_t t1 = now_ns();
        if (stage_forward(st[COST_LAYER], 0, NULL, act, NULL, NULL, NULL, err, errlen)) goto out;
        int64_t t2 = now_ns();
        if (stage_forward(st[COST_HEAD], 0, NULL, act, labels, &loss, &kept, err, errlen)) goto out;
        int64_t t3 = now_ns();
        stage_backward(st[COST_HEAD], 0, NULL, 1.0f / (float)(kept ? kept : 1));
        if (settle(st[0], err, errlen)) goto out;
        int64_t t4 = now_ns();
        stage_backward(st[COST_LAYER], 0, dout, 0.0f);
        if (settle(st[0], err, errlen)) goto out;
        int64_t t5 = now_ns();
        stage_backward(st[COST_EMBED], 0, dout, 0.0f);
        if (settle(st[0], err, errlen)) goto out;
        int64_t t6 = now_ns();
        t[0] = t1 - t0, t[1] = t2 - t1, t[2] = t3 - t2;
        t[3] = t6 - t5, t[4] = t5 - t4, t[5] = t4 - t3;
        for (int u = 0; u < COST_UNITS; u++) {
            int64_t a = now_ns();
            stage_adamw_step(st[u], &opt, it + 2, 1.0f);
            if (settle(st[u], err, errlen)) goto out;
            t[6 + u] = now_ns() - a;
        }
        if (it >= 0)
            for (int k = 0; k < 9; k++) samples[(size_t)k * iters + it] = t[k];
    }
    for (int k = 0; k < 9; k++) {
        qsort(samples + (size_t)k * iters, (size_t)iters, sizeof *samples, cmp_i64);
        int64_t med = samples[(size_t)k * iters + iters / 2];
        if (k % 3 == COST_LAYER) med /= nl;
        (k < 3 ? out->fwd : k < 6 ? out->bwd : out->opt)[k % 3] = med;
    }
    rc = 0;
out:
    for (int u = 0; u < COST_UNITS; u++) stage_free(st[u]);
    free(ids);
    free(labels);
    free(act);
    free(dout);
    free(samples);
    return rc;
}

static int mkdirs(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

static json_t *unit_json(const part_times *t, const cost_bytes *cb, int u)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "forward_ns", (json_int_t)t->fwd[u],
                     "backward_ns", (json_int_t)t->bwd[u], "optimizer_ns", (json_int_t)t->opt[u],
                     "weight_bytes", (json_int_t)cb->weight[u], "grad_bytes", (json_int_t)cb->grad[u],
                     "moment_bytes", (json_int_t)cb->moments[u],
                     "activation_bytes", (json_int_t)cb->act[u]);
}

int cmd_profile(int argc, char **argv)
{
    const char *model = NULL, *micro = "1", *seq = NULL, *iters_s = "3", *threads = NULL,
               *cache = NULL, *out_path = NULL, *layers_s = "1", *lock_path = NULL,
               *device = "cpu";
    bool as_json = false, fresh = false;
    const args_option opts[] = {
        {"--model", &model, NULL},  {"--micro-batch", &micro, NULL}, {"--seq", &seq, NULL},
        {"--iters", &iters_s, NULL}, {"--threads", &threads, NULL}, {"--cache", &cache, NULL},
        {"--out", &out_path, NULL}, {"--json", NULL, &as_json},     {"--fresh", NULL, &fresh},
        {"--layers", &layers_s, NULL}, {"--lock", &lock_path, NULL},
        {"--device", &device, NULL},
    };
    const char *required[] = {"--model", NULL};
    int nopts = (int)(sizeof opts / sizeof opts[0]);
    char err[1024], cfgs[512], cpu[256], dir[768], path[1024];
    long B, T = 0, iters, nthreads = 0, nl;
    llama_config cfg;
    json_t *pj = NULL;
    kdev *dev = NULL;
    if (args_parse(argc, argv, 2, opts, nopts, err, sizeof err) ||
        args_require(opts, nopts, required, err, sizeof err) ||
        llama_config_load(&cfg, model, err, sizeof err) ||
        args_int(micro, "--micro-batch", 1, 4096, &B, err, sizeof err) ||
        args_int(iters_s, "--iters", 1, 1000, &iters, err, sizeof err) ||
        args_int(layers_s, "--layers", 1, 1000, &nl, err, sizeof err) ||
        (threads && args_int(threads, "--threads", 1, 1024, &nthreads, err, sizeof err)) ||
        (seq && args_int(seq, "--seq", 1, cfg.max_position_embeddings, &T, err, sizeof err))) {
        fprintf(stderr, "shardnode profile: %s\n", err);
        return 2;
    }
    if (kdev_open(device, &dev, err, sizeof err) != KDEV_OK) {
        fprintf(stderr, "shardnode profile: %s\n", err);
        return 1;
    }
    const kdev_info *di = kdev_get_info(dev);
    bool on_cpu = kdev_is_host(dev);
    if (!seq) T = cfg.max_position_embeddings < 256 ? cfg.max_position_embeddings : 256;
    if (nl > cfg.num_hidden_layers) nl = cfg.num_hidden_layers;
    if (nthreads) kernels_set_threads((int)nthreads);
    /* A GPU profile is keyed by the GPU (and its driver), a CPU one by the
     * CPU, its threads and BLAS (the key a CPU profile always had). */
    if (on_cpu) proc_field("/proc/cpuinfo", "model name", cpu, sizeof cpu);
    else snprintf(cpu, sizeof cpu, "%s %s driver %s", di->name, di->arch, di->driver);
    int nthr = kernels_threads();
    int slots = kernels_thread_slots(); /* stage_create's attention scratch */
    checkpoint_config_string(&cfg, cfgs, sizeof cfgs);
    char key[1024];
    if (on_cpu)
        snprintf(key, sizeof key, "%s|B=%ld|T=%ld|cpu=%s|threads=%d|blas=%s|layers=%ld", cfgs, B,
                 T, cpu, nthr, kernels_blas_corename(), nl);
    else
        snprintf(key, sizeof key, "%s|B=%ld|T=%ld|%s=%s|gemm=%s|layers=%ld", cfgs, B, T,
                 di->vendor, cpu, kdev_gemm_name(dev), nl);
    uint64_t h = 14695981039346656037ull;
    for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (cache)
        snprintf(dir, sizeof dir, "%s", cache);
    else if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/shardnode/profiles", xdg);
    else
        snprintf(dir, sizeof dir, "%s/.cache/shardnode/profiles", home ? home : ".");
    snprintf(path, sizeof path, "%s/%s-%016llx.json", dir, di->vendor, (unsigned long long)h);

    bool cached = false;
    if (!fresh) {
        json_error_t je;
        pj = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        const char *k = pj ? json_string_value(json_object_get(pj, "key")) : NULL;
        cached = k && strcmp(k, key) == 0;   /* a hash collision re-measures */
        if (!cached) {
            json_decref(pj);
            pj = NULL;
        }
    }
    cost_shape shape = fleet_shape(&cfg, T);
    cost_bytes cb;
    if (cost_bytes_compute(&cb, &shape, B, 4, err, sizeof err)) goto fail;
    char avail[64];
    proc_field("/proc/meminfo", "MemAvailable", avail, sizeof avail);
    json_int_t mem = on_cpu ? (json_int_t)strtoll(avail, NULL, 10) * 1024 /* "123 kB" */
                            : (json_int_t)di->mem_free; /* now, not cached */
    if (cached) json_object_set_new(pj, "memory_bytes", json_integer(mem));
    /* --lock FILE: nodes sharing one machine measure one at a time, or
     * they would time each other's load. Held until the process exits. */
    int lock_fd = -1;
    if (!cached && lock_path) {
        /* never through a link, never someone else's file */
        lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
        struct stat lst;
        if (lock_fd < 0)
            fprintf(stderr, "shardnode profile: cannot open the lock file %s (%s); profiling "
                            "without it\n", lock_path,
                    errno == ELOOP ? "a symbolic link" : strerror(errno));
        if (lock_fd >= 0 && (fstat(lock_fd, &lst) != 0 || !S_ISREG(lst.st_mode) ||
                             lst.st_uid != geteuid())) {
            fprintf(stderr, "shardnode profile: %s is not this user's lock file; profiling "
                            "without it\n", lock_path);
            close(lock_fd);
            lock_fd = -1;
        }
        if (lock_fd >= 0) flock(lock_fd, LOCK_EX);
    }
    if (!cached) {
        part_times t;
        if (measure(&cfg, (int)B, (int)T, (int)nl, (int)iters, dev, &t, err, sizeof err))
            goto fail;
        char name[300];
        if (on_cpu) snprintf(name, sizeof name, "%s (%d threads)", cpu, nthr);
        else snprintf(name, sizeof name, "%s", cpu);
        pj = json_pack("{s:s,s:i,s:s,s:s,s:s,s:i,s:{s:i,s:i,s:i,s:i,s:i,s:i,s:b},s:I,s:I,s:I,s:i,"
                       "s:o,s:o,s:o,s:I,s:I,s:I,s:I,s:i,s:i}",
                       "format", "shardnode-profile", "version", 1, "key", key, "device", kdev_name(dev),
                       "device_name", name, "threads", nthr, "model", "hidden_size", cfg.hidden_size,
                       "intermediate_size", cfg.intermediate_size, "num_hidden_layers",
                       cfg.num_hidden_layers, "num_attention_heads", cfg.num_attention_heads,
                       "num_key_value_heads", cfg.num_key_value_heads, "vocab_size", cfg.vocab_size,
                       "tie_word_embeddings", cfg.tie_word_embeddings, "micro_batch", (json_int_t)B,
                       "seq", (json_int_t)T, "memory_bytes", mem, "scratch_slots", slots,
                       "embedding", unit_json(&t, &cb, COST_EMBED), "layer",
                       unit_json(&t, &cb, COST_LAYER), "head", unit_json(&t, &cb, COST_HEAD),
                       "slot_bytes", (json_int_t)cb.slot, "stage_bytes", (json_int_t)cb.stage,
                       "layer_work_bytes", (json_int_t)cb.layer_work, "boundary_bytes",
                       (json_int_t)cb.boundary, "iterations", (int)iters, "timed_layers", (int)nl);
        char *text = pj ? json_dumps(pj, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        atomic_file af;
        if (!text || mkdirs(dir) ||
            atomic_file_begin(&af, path, err, sizeof err) ||
            atomic_file_write(&af, text, strlen(text)) || atomic_file_write(&af, "\n", 1) ||
            atomic_file_commit(&af, err, sizeof err))
            fprintf(stderr, "shardnode profile: note: could not cache the profile at %s\n", path);
        free(text);
    }
    if (out_path && json_dump_file(pj, out_path, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) {
        snprintf(err, sizeof err, "%s: cannot write the profile", out_path);
        goto fail;
    }
    if (as_json) {
        char *text = json_dumps(pj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", text ? text : "{}");
        free(text);
    } else {
        char mem[32];
        cost_format_bytes(mem, sizeof mem, (int64_t)json_integer_value(json_object_get(pj, "memory_bytes")));
        printf("device %s: %s, %s %s; usable memory %s\n", kdev_name(dev),
               json_string_value(json_object_get(pj, "device_name")),
               on_cpu ? "OpenBLAS" : "matrix kernel",
               on_cpu ? kernels_blas_corename() : kdev_gemm_name(dev), mem);
        printf("model %s, micro-batch %ld x %ld tokens, median of %lld iterations%s\n", model, B, T,
               (long long)json_integer_value(json_object_get(pj, "iterations")),
               cached ? " (cached)" : "");
        printf("%-10s %12s %12s %12s %12s %12s %12s %16s\n", "part", "forward", "backward", "AdamW",
               "weights", "gradients", "moments", "act/micro-batch");
        static const char *const parts[COST_UNITS] = {"embedding", "layer", "head"};
        for (int u = 0; u < COST_UNITS; u++) {
            json_t *o = json_object_get(pj, parts[u]);
            char b[4][32];
            cost_format_bytes(b[0], sizeof b[0], cb.weight[u]);
            cost_format_bytes(b[1], sizeof b[1], cb.grad[u]);
            cost_format_bytes(b[2], sizeof b[2], cb.moments[u]);
            cost_format_bytes(b[3], sizeof b[3], cb.act[u]);
            printf("%-10s %9.3f ms %9.3f ms %9.3f ms %12s %12s %12s %16s\n", parts[u],
                   (double)json_integer_value(json_object_get(o, "forward_ns")) * 1e-6,
                   (double)json_integer_value(json_object_get(o, "backward_ns")) * 1e-6,
                   (double)json_integer_value(json_object_get(o, "optimizer_ns")) * 1e-6, b[0], b[1],
                   b[2], b[3]);
        }
        printf("profile: %s (a fleet file's node can name it as \"profile\")\n", path);
    }
    json_decref(pj);
    kdev_close(dev);
    return 0;
fail:
    fprintf(stderr, "shardnode profile: %s\n", err);
    json_decref(pj);
    kdev_close(dev);
    return 1;
}

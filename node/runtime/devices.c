/* devices.c — what this build of shardnode can compute on, for node.json's
 * "devices" and, later, the member record a node gossips. The planner needs
 * memory and a name it can look up in configs/devices.json; measured speed
 * comes from `shardnode profile`, not from here. */
#include "runtime.h"

#include "kernels.h"
#include "node_base.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* The value of the first "key<spaces>: value" line of /proc/cpuinfo among
 * keys, in the order given: x86 says "model name", while arm64 kernels often
 * name no model at all and other architectures use their own keys. */
static int cpuinfo_value(const char *const *keys, char *out, size_t outlen)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    char line[512];
    int best = -1; /* index into keys of the value in out */
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *kend = colon;
        while (kend > line && (kend[-1] == ' ' || kend[-1] == '\t')) kend--;
        size_t klen = (size_t)(kend - line);
        for (int k = 0; keys[k] && (best < 0 || k < best); k++) {
            if (strlen(keys[k]) != klen || strncmp(line, keys[k], klen) != 0) continue;
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t') v++;
            size_t vlen = strcspn(v, "\r\n");
            while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t')) vlen--;
            if (vlen == 0) break;
            snprintf(out, outlen, "%.*s", (int)vlen, v);
            best = k;
            break;
        }
        if (best == 0) break;
    }
    fclose(f);
    return best >= 0 ? 0 : -1;
}

/* MemTotal from /proc/meminfo, else pages x page size. */
static int64_t memory_total(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        long long kib = -1;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %lld kB", &kib) == 1) break;
        fclose(f);
        if (kib > 0) return (int64_t)kib * 1024;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (int64_t)pages * page : 0;
}

void devices_detect(devices_info *out)
{
    memset(out, 0, sizeof *out);
    static const char *const model_keys[] = {"model name", "cpu model", "Model", "Hardware",
                                             "cpu", "Processor", NULL};
    if (cpuinfo_value(model_keys, out->cpu_model, sizeof out->cpu_model) != 0) {
        /* Say at least which architecture it is rather than nothing. */
        struct utsname u;
        if (uname(&u) == 0)
            snprintf(out->cpu_model, sizeof out->cpu_model, "unknown %.100s", u.machine);
        else
            snprintf(out->cpu_model, sizeof out->cpu_model, "unknown");
    }
    out->cpu_cores = node_usable_cpus(); /* this process's, not the machine's */
    out->memory_bytes = memory_total();
    /* GPUs: every device a GPU backend of this build opens (kernels.h,
     * kdev_list: libshardnode-cuda.so / -hip.so with their runtime and a
     * driver present). A machine without them lists none. */
    kdev_entry e[1 + DEVICES_MAX_GPUS];
    int n_e = kdev_list(e, (int)(sizeof e / sizeof e[0]));
    out->ngpus = 0;
    for (int i = 0; i < n_e && out->ngpus < DEVICES_MAX_GPUS; i++) {
        if (e[i].status != KDEV_OK || strcmp(e[i].info.vendor, "cpu") == 0) continue;
        devices_gpu *g = &out->gpus[out->ngpus++];
        snprintf(g->device, sizeof g->device, "%s", e[i].name);
        snprintf(g->vendor, sizeof g->vendor, "%s",
                 strcmp(e[i].info.vendor, "cuda") == 0 ? "nvidia" : "amd");
        snprintf(g->name, sizeof g->name, "%s", e[i].info.name);
        snprintf(g->arch, sizeof g->arch, "%s", e[i].info.arch);
        snprintf(g->driver, sizeof g->driver, "%s", e[i].info.driver);
        g->memory_bytes = e[i].info.mem_total;
        g->memory_free_bytes = e[i].info.mem_free;
    }
}

struct json_t *devices_to_json(const devices_info *d)
{
    json_t *gpus = json_array();
    for (int i = 0; gpus && i < d->ngpus; i++) {
        const devices_gpu *g = &d->gpus[i];
        if (json_array_append_new(
                gpus, json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:s}", "device", g->device,
                                "vendor", g->vendor, "name", g->name, "memory_bytes",
                                (json_int_t)g->memory_bytes, "memory_free_bytes",
                                (json_int_t)g->memory_free_bytes, "arch", g->arch, "driver",
                                g->driver)) != 0) {
            json_decref(gpus);
            return NULL;
        }
    }
    if (!gpus) return NULL;
    /* "o" steals gpus, also when json_pack fails. */
    return json_pack("{s:{s:s, s:i, s:I}, s:o}", "cpu", "model", d->cpu_model, "cores",
                     d->cpu_cores, "memory_bytes", (json_int_t)d->memory_bytes, "gpus", gpus);
}

/* Compact JSON of j into out when it fits (strlen < size). */
static int dump_fits(json_t *j, char *out, size_t size)
{
    char *t = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    int ok = t && strlen(t) < size;
    if (ok) memcpy(out, t, strlen(t) + 1);
    free(t);
    return ok;
}

int devices_gossip_text(json_t *devices, char *out, size_t size)
{
    if (size) out[0] = 0;
    if (!size || !json_is_object(devices)) return -1;
    if (dump_fits(devices, out, size)) return 0;
    /* Too big (many GPUs, long names): the CPU's part, then the GPUs by
     * device, name and memory, as many as fit, and a count of the rest. */
    json_t *gpus = json_object_get(devices, "gpus");
    size_t ng = json_array_size(gpus);
    json_t *cut = json_pack("{s:O?, s:[]}", "cpu", json_object_get(devices, "cpu"), "gpus");
    if (!cut) return -1;
    json_t *arr = json_object_get(cut, "gpus");
    char *trial = malloc(size);
    int rc = trial && dump_fits(cut, out, size) ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < ng; i++) {
        json_t *g = json_array_get(gpus, i);
        json_t *small = json_pack("{s:O?, s:O?, s:O?}", "device", json_object_get(g, "device"),
                                  "name", json_object_get(g, "name"), "memory_bytes",
                                  json_object_get(g, "memory_bytes"));
        if (!small || json_array_append_new(arr, small) != 0) break;
        json_object_set_new(cut, "gpus_more", json_integer((json_int_t)(ng - i - 1)));
        if (!dump_fits(cut, trial, size)) {
            /* this GPU does not fit: the record as it was before it */
            json_array_remove(arr, json_array_size(arr) - 1);
            json_object_set_new(cut, "gpus_more", json_integer((json_int_t)(ng - i)));
            if (!dump_fits(cut, out, size)) rc = -1;
            break;
        }
        memcpy(out, trial, strlen(trial) + 1);
    }
    free(trial);
    json_decref(cut);
    if (rc != 0) out[0] = 0;
    return rc;
}

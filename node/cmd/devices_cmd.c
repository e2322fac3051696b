/* devices_cmd.c — `shardnode devices [--json]`: what this binary can compute
 * on here. The CPU always; for each GPU backend (CUDA, HIP) every device it
 * opens, or one line saying why it offers none: not built into this build,
 * its vendor runtime or driver missing, no device. Exit 0 either way: a
 * machine without a GPU is not an error. */
#include "commands.h"

#include "kernels.h"
#include "runtime.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *status_word(int status)
{
    switch (status) {
    case KDEV_OK: return "ok";
    case KDEV_ENOTBUILT: return "not built";
    case KDEV_ENORUNTIME: return "no runtime";
    case KDEV_ENODEV: return "no device";
    default: return "failed";
    }
}

int cmd_devices(int argc, char **argv)
{
    bool as_json = false;
    const args_option opts[] = {{"--json", NULL, &as_json}};
    char err[256];
    if (args_parse(argc, argv, 2, opts, 1, err, sizeof err)) {
        fprintf(stderr, "shardnode devices: %s\n", err);
        return 2;
    }
    kdev_entry e[64];
    int n = kdev_list(e, 64);
    /* The CPU by the name /proc/cpuinfo gives it (runtime's devices_detect). */
    devices_info host;
    devices_detect(&host);
    if (n > 0 && e[0].status == KDEV_OK)
        snprintf(e[0].info.name, sizeof e[0].info.name, "%.100s, %d core%s", host.cpu_model,
                 host.cpu_cores, host.cpu_cores == 1 ? "" : "s");
    if (as_json) {
        json_t *arr = json_array();
        for (int i = 0; arr && i < n; i++) {
            const kdev_info *in = &e[i].info;
            json_t *o = e[i].status == KDEV_OK
                ? json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:i, s:i}", "device",
                            e[i].name, "status", "ok", "vendor", in->vendor, "name", in->name,
                            "arch", in->arch, "driver", in->driver, "memory_bytes",
                            (json_int_t)in->mem_total, "memory_free_bytes",
                            (json_int_t)in->mem_free, "units", in->units, "warp", in->warp)
                : json_pack("{s:s, s:s, s:s}", "device", e[i].name, "status",
                            status_word(e[i].status), "why", e[i].why);
            if (!o || json_array_append_new(arr, o) != 0) {
                json_decref(arr);
                arr = NULL;
            }
        }
        char *text = arr ? json_dumps(arr, JSON_INDENT(2)) : NULL;
        json_decref(arr);
        if (!text) {
            fprintf(stderr, "shardnode devices: out of memory\n");
            return 1;
        }
        printf("%s\n", text);
        free(text);
        return 0;
    }
    int gpus = 0;
    for (int i = 0; i < n; i++) {
        const kdev_info *in = &e[i].info;
        if (e[i].status != KDEV_OK) {
            printf("%-8s %s: %s\n", e[i].name, status_word(e[i].status), e[i].why);
            continue;
        }
        if (strcmp(in->vendor, "cpu") != 0) gpus++;
        printf("%-8s %s, %s%s%s, %.1f GiB (%.1f GiB free)", e[i].name, in->name, in->arch,
               in->driver[0] ? ", driver " : "", in->driver,
               (double)in->mem_total / (1 << 30), (double)in->mem_free / (1 << 30));
        if (strcmp(in->vendor, "cpu") == 0) printf(", matrix kernel %s", kernels_gemm_name());
        printf("\n");
    }
    if (!gpus) printf("no GPU is usable here: stages compute on the CPU\n");
    return 0;
}

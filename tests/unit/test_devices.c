/* test_devices.c — the devices record as gossip carries it
 * (devices_gossip_text, node/runtime/devices.c): whole where it fits the
 * record's 1023 bytes; a machine of many GPUs keeps its CPU, each GPU it can
 * fit by device, name and memory, in order, and says how many it left out;
 * a record that cannot fit at all is empty, never cut mid-JSON. */
#include "check.h"
#include "runtime.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define GOSSIP_MAX 1024 /* the daemon's buffer: 1023 bytes and the NUL */

static devices_info machine(int ngpus)
{
    devices_info d;
    memset(&d, 0, sizeof d);
    snprintf(d.cpu_model, sizeof d.cpu_model, "AMD EPYC 9654 96-Core Processor");
    d.cpu_cores = 192;
    d.memory_bytes = 1600LL << 30;
    d.ngpus = ngpus;
    for (int i = 0; i < ngpus; i++) {
        devices_gpu *g = &d.gpus[i];
        snprintf(g->device, sizeof g->device, "cuda:%d", i % 100);
        snprintf(g->vendor, sizeof g->vendor, "nvidia");
        snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3 (unit %d)", i);
        g->memory_bytes = 85045346304LL + i;
        g->memory_free_bytes = 84494712832LL - i;
        snprintf(g->arch, sizeof g->arch, "sm_90");
        snprintf(g->driver, sizeof g->driver, "13.0");
    }
    return d;
}

int main(void)
{
    char out[GOSSIP_MAX];
    /* no GPU, and one: the whole record, byte for byte */
    for (int n = 0; n <= 1; n++) {
        devices_info d = machine(n);
        json_t *j = devices_to_json(&d);
        char *whole = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
        CHECK(devices_gossip_text(j, out, sizeof out) == 0 && strcmp(out, whole) == 0,
              "%d GPU(s): gossip carries %s, want the whole record %s", n, out, whole);
        free(whole);
        json_decref(j);
    }
    /* 2..16 GPUs: what fits, as JSON, with every GPU counted */
    for (int n = 2; n <= DEVICES_MAX_GPUS; n++) {
        devices_info d = machine(n);
        json_t *j = devices_to_json(&d);
        char *whole = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
        int rc = devices_gossip_text(j, out, sizeof out);
        json_error_t je;
        json_t *got = json_loads(out, 0, &je);
        CHECK(rc == 0 && strlen(out) < sizeof out && got, "%d GPUs: rc %d, %zu bytes, %s", n, rc,
              strlen(out), got ? "JSON" : je.text);
        if (strlen(whole) < sizeof out) {
            CHECK(strcmp(out, whole) == 0, "%d GPUs fit whole but gossip carries %s", n, out);
        } else if (got) {
            CHECK(json_equal(json_object_get(got, "cpu"), json_object_get(j, "cpu")),
                  "%d GPUs: the CPU's part changed: %s", n, out);
            json_t *gpus = json_object_get(got, "gpus"), *more = json_object_get(got, "gpus_more");
            size_t k = json_array_size(gpus);
            long long left = json_is_integer(more) ? (long long)json_integer_value(more) : -1;
            CHECK(k >= 1 && left >= 0 && (size_t)left + k == (size_t)n,
                  "%d GPUs: %zu listed and gpus_more %lld", n, k, left);
            for (size_t i = 0; i < k; i++) {
                json_t *g = json_array_get(gpus, i), *f = json_array_get(json_object_get(j, "gpus"), i);
                CHECK(json_object_size(g) == 3 &&
                          json_equal(json_object_get(g, "device"), json_object_get(f, "device")) &&
                          json_equal(json_object_get(g, "name"), json_object_get(f, "name")) &&
                          json_equal(json_object_get(g, "memory_bytes"),
                                     json_object_get(f, "memory_bytes")),
                      "%d GPUs: GPU %zu is %s", n, i, out);
            }
            /* as many as fit: one more would not */
            if (k < (size_t)n) {
                json_t *g1 = json_array_get(json_object_get(j, "gpus"), k);
                json_array_append_new(gpus, json_pack("{s:O, s:O, s:O}", "device",
                                                      json_object_get(g1, "device"), "name",
                                                      json_object_get(g1, "name"),
                                                      "memory_bytes",
                                                      json_object_get(g1, "memory_bytes")));
                json_object_set_new(got, "gpus_more", json_integer(n - (json_int_t)k - 1));
                char *bigger = json_dumps(got, JSON_COMPACT | JSON_PRESERVE_ORDER);
                CHECK(strlen(bigger) >= sizeof out, "%d GPUs: %zu listed, but %zu fit (%s)", n, k,
                      k + 1, bigger);
                free(bigger);
            }
            if (n == DEVICES_MAX_GPUS)
                printf("%d GPUs: %zu listed, %lld more, %zu bytes\n", n, k, left, strlen(out));
        }
        json_decref(got);
        free(whole);
        json_decref(j);
    }
    /* a buffer too small for the CPU's part: nothing, and said */
    devices_info d = machine(3);
    json_t *j = devices_to_json(&d);
    char tiny[40];
    memset(tiny, 'x', sizeof tiny);
    CHECK(devices_gossip_text(j, tiny, sizeof tiny) == -1 && tiny[0] == 0,
          "a 40-byte buffer: want -1 and an empty text, got \"%.40s\"", tiny);
    CHECK(devices_gossip_text(NULL, out, sizeof out) == -1 && out[0] == 0,
          "no record: want -1 and an empty text");
    json_decref(j);
    return failures != 0;
}

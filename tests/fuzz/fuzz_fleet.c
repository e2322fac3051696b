/* fuzz_fleet.c — libFuzzer target for the files that describe machines:
 * fleet files with the device table they name and the profiles their nodes
 * name (fleet_load, node/runtime/fleet.c), profiles alone (fleet_profile_parse), and
 * static cluster files (cluster_load, node/runtime/cluster.c).
 *
 * The first input byte picks the decoder:
 *  - 0 (mod 3): the rest is up to three files cut at "\n#--\n": a fleet file
 *    (written as fleets/fleet.json), the device table (devices.json, which
 *    a fleet names as "../devices.json", as in configs/) and a profile
 *    (fleets/profile.json), read for the shape of configs/tiny.
 *  - 1: a cluster file for a model of (second byte % 16) + 1 layers.
 *  - 2: a profile on its own.
 * Refusals are one line. An accepted fleet has 1..PLAN_MAX_NODES nodes with
 * distinct names and a link for every pair; an accepted cluster covers every
 * layer once, in order, with distinct node names. */
#include "fuzz_util.h"
#include "runtime.h"

#include <jansson.h>

#define T "fuzz_fleet"

static const llama_config TINY = {96, 260, 4, 6, 2, 259, 256, 16, 1e-5f, 10000.0f, false, {0}, LLAMA_ARCH_LLAMA};

static void fleet(const uint8_t *data, size_t size)
{
    char fleet_path[512], path[512], err[512];
    size_t n1, n2, n3;
    const uint8_t *p2, *p3, *rest;
    fuzz_split(data, size, "\n#--\n", &n1, &p2, &n2);
    fuzz_split(p2, n2, "\n#--\n", &n2, &p3, &n3);
    fuzz_split(p3, n3, "\n#--\n", &n3, &rest, &(size_t){0});
    snprintf(path, sizeof path, "%s/fleets", fuzz_dir());
    mkdir(path, 0700);
    fuzz_write_file("fleets/fleet.json", data, n1, fleet_path, sizeof fleet_path);
    fuzz_write_file("devices.json", p2, n2, path, sizeof path);
    fuzz_write_file("fleets/profile.json", p3, n3, path, sizeof path);
    cost_shape shape = fleet_shape(&TINY, 64);
    fleet_file ff;
    memset(err, 'x', sizeof err);
    if (fleet_load(&ff, fleet_path, NULL, &shape, 2, err, sizeof err) != 0) {
        fuzz_check_refusal(T, err, sizeof err);
        return;
    }
    int n = ff.fleet.nnodes;
    fuzz_require(n >= 1 && n <= PLAN_MAX_NODES, T, "accepted node count", NULL);
    for (int i = 0; i < n; i++) {
        fuzz_require(memchr(ff.fleet.nodes[i].name, 0, PLAN_NAME_MAX) != NULL, T,
                     "node name not terminated", NULL);
        for (int k = 0; k < i; k++)
            fuzz_require(strcmp(ff.fleet.nodes[i].name, ff.fleet.nodes[k].name) != 0, T,
                         "two nodes of one name", ff.fleet.nodes[i].name);
    }
    fleet_free(&ff);
}

static void cluster(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    int layers = data[0] % 16 + 1;
    char path[512], err[512];
    fuzz_write_file("cluster.json", data + 1, size - 1, path, sizeof path);
    cluster_spec *c = calloc(1, sizeof *c);
    memset(err, 'x', sizeof err);
    if (cluster_load(c, path, layers, err, sizeof err) != 0) {
        fuzz_check_refusal(T, err, sizeof err);
    } else {
        fuzz_require(c->nnodes >= 1 && c->nnodes <= SPLIT_MAX_STAGES, T, "cluster size", NULL);
        int at = 0;
        for (int i = 0; i < c->nnodes; i++) {
            fuzz_require(c->nodes[i].begin == at && c->nodes[i].end >= at, T,
                         "stages not contiguous", c->nodes[i].name);
            at = c->nodes[i].end;
            fuzz_require(cluster_find(c, c->nodes[i].name) == i, T, "two nodes of one name",
                         c->nodes[i].name);
        }
        fuzz_require(at == layers, T, "stages do not cover every layer", NULL);
    }
    free(c);
}

static void profile(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, 0, NULL);
    if (!j)
        return;
    char err[512];
    cost_shape shape = fleet_shape(&TINY, 64);
    cost_profile pf;
    memset(&pf, 0, sizeof pf);
    memset(err, 'x', sizeof err);
    if (fleet_profile_parse(j, &shape, &pf, "profile.json", err, sizeof err) != 0)
        fuzz_check_refusal(T, err, sizeof err);
    else
        fuzz_require(pf.micro_batch >= 1 && pf.memory_bytes >= 0, T, "accepted profile", NULL);
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 3) {
    case 0: fleet(data + 1, size - 1); break;
    case 1: cluster(data + 1, size - 1); break;
    default: profile(data + 1, size - 1); break;
    }
    return 0;
}

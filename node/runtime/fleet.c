/* fleet.c — fleet files: nodes (a device from configs/devices.json, or a
 * profile measured by `shardnode profile`), sites and links, read strictly
 * and turned into the plain structs scheduler/ plans over. Decimal figures
 * (GiB, TFLOPS, ms, Mb/s) become integers here, once: strtod and llround are
 * exact and the same everywhere, so every node gets the same integers. */
#include "node_base.h"
#include "runtime.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

cost_shape fleet_shape(const llama_config *cfg, int64_t seq)
{
    return (cost_shape){.layers = cfg->num_hidden_layers,     .hidden = cfg->hidden_size,
                        .intermediate = cfg->intermediate_size, .heads = cfg->num_attention_heads,
                        .kv_heads = cfg->num_key_value_heads,   .vocab = cfg->vocab_size,
                        .seq = seq,                             .tied = cfg->tie_word_embeddings};
}

/* Only the listed keys: a typo ("bandwith_mbps") must not silently become
 * a default. */
static int known_keys(json_t *obj, const char *const *keys, const char *where, char *err,
                      size_t errlen)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        const char *const *k = keys;
        while (*k && strcmp(*k, key)) k++;
        if (!*k) return node_errf(err, errlen, "%s: \"%s\" is not a known key", where, key);
    }
    return 0;
}

/* A number at `key` (absent: *out untouched, 0 returned unless required),
 * in [min, max], times scale, rounded to an integer. */
static int get_scaled(json_t *obj, const char *key, bool required, double min, double max,
                      double scale, int64_t *out, const char *where, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return required ? node_errf(err, errlen, "%s: \"%s\" is required", where, key) : 0;
    if (!json_is_number(v)) return node_errf(err, errlen, "%s: \"%s\" must be a number", where, key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < min || x > max)
        return node_errf(err, errlen, "%s: \"%s\" is %g, must be in [%g, %g]", where, key, x, min, max);
    *out = llround(x * scale);
    return 0;
}

static int get_positive(json_t *obj, const char *key, double max, double scale, int64_t *out,
                        const char *where, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (v && json_is_number(v) && json_number_value(v) <= 0)
        return node_errf(err, errlen, "%s: \"%s\" is %g, must be positive", where, key,
                    json_number_value(v));
    return get_scaled(obj, key, v != NULL, 0, max, scale, out, where, err, errlen);
}

/* {"latency_ms": ..., "bandwidth_mbps" | "bandwidth_gbps": ...} */
static int parse_link(json_t *obj, cost_link *l, const char *where, const char *const *extra,
                      char *err, size_t errlen)
{
    const char *keys[8] = {"latency_ms", "bandwidth_mbps", "bandwidth_gbps"};
    int nk = 3;
    for (; extra && *extra && nk < 7; extra++) keys[nk++] = *extra;
    if (!json_is_object(obj)) return node_errf(err, errlen, "%s: must be an object", where);
    if (known_keys(obj, keys, where, err, errlen)) return -1;
    if (get_scaled(obj, "latency_ms", true, 0, 1e7, 1e6, &l->latency_ns, where, err, errlen))
        return -1;
    bool mb = json_object_get(obj, "bandwidth_mbps"), gb = json_object_get(obj, "bandwidth_gbps");
    if (mb == gb)
        return node_errf(err, errlen, "%s: needs one of \"bandwidth_mbps\" or \"bandwidth_gbps\"", where);
    /* bits per second to bytes per second */
    if (mb) return get_positive(obj, "bandwidth_mbps", 1e9, 125000.0, &l->bandwidth, where, err, errlen);
    return get_positive(obj, "bandwidth_gbps", 1e6, 125000000.0, &l->bandwidth, where, err, errlen);
}

/* ---- devices.json ------------------------------------------------------------ */

static json_t *find_device(json_t *devices, const char *name)
{
    json_t *d = json_object_get(devices, name);
    if (d) return d;
    const char *key;
    json_t *v;
    json_object_foreach(devices, key, v) if (strcasecmp(key, name) == 0) return v;
    return NULL;
}

static int device_spec(json_t *table, const char *table_path, const char *name, json_t *node,
                       cost_spec *sp, int64_t *memory, const char *where, char *err, size_t errlen)
{
    json_t *devices = json_object_get(table, "devices"), *defs = json_object_get(table, "defaults");
    json_t *d = find_device(devices, name);
    if (!d) {
        char known[600] = "";
        size_t used = 0;
        const char *key;
        json_t *v;
        json_object_foreach(devices, key, v) if (used + strlen(key) + 4 < sizeof known)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", key);
        return node_errf(err, errlen, "%s: unknown device \"%s\" (%s knows: %s)", where, name,
                    table_path, known);
    }
    char dwhere[300];
    snprintf(dwhere, sizeof dwhere, "%s: device \"%s\"", table_path, name);
    static const char *const keys[] = {"vendor", "memory_gib", "memory_bandwidth_gbs",
                                       "fp32_tflops", "tensor_tflops", "mfu", "reserve_gib",
                                       "scratch_slots", "notes", NULL};
    if (!json_is_object(d))
        return node_errf(err, errlen, "%s: a device is an object of figures", dwhere);
    if (known_keys(d, keys, dwhere, err, errlen)) return -1;
    int64_t fp32 = 0, tensor = 0, mfu = 400, reserve = (int64_t)1 << 30, slots = 1;
    if (json_is_object(defs) &&
        (get_scaled(defs, "mfu", false, 0.01, 1, 1000, &mfu, table_path, err, errlen) ||
         get_scaled(defs, "reserve_gib", false, 0, 1e4, 1073741824.0, &reserve, table_path, err, errlen)))
        return -1;
    if (get_positive(d, "memory_gib", 1e6, 1073741824.0, memory, dwhere, err, errlen) ||
        get_positive(d, "memory_bandwidth_gbs", 1e6, 1e9, &sp->mem_bandwidth, dwhere, err, errlen) ||
        get_positive(d, "fp32_tflops", 1e6, 1000, &fp32, dwhere, err, errlen) ||
        get_scaled(d, "tensor_tflops", false, 0, 1e6, 1000, &tensor, dwhere, err, errlen) ||
        get_scaled(d, "mfu", false, 0.01, 1, 1000, &mfu, dwhere, err, errlen) ||
        get_scaled(d, "reserve_gib", false, 0, 1e4, 1073741824.0, &reserve, dwhere, err, errlen) ||
        get_scaled(d, "scratch_slots", false, 1, 1024, 1, &slots, dwhere, err, errlen))
        return -1;
    /* per-node overrides: a 12 GB M40, a box with more RAM, a tuned kernel */
    if (get_positive(node, "memory_gib", 1e6, 1073741824.0, memory, where, err, errlen) ||
        get_scaled(node, "mfu", false, 0.01, 1, 1000, &mfu, where, err, errlen))
        return -1;
    /* training computes in 16 bits where the device has matrix units for
     * it (DESIGN.md §3), else in fp32 */
    sp->gflops = tensor > 0 ? tensor : fp32;
    sp->weight_bytes = tensor > 0 ? 2 : 4;
    sp->mfu_permille = mfu;
    sp->memory_bytes = *memory > reserve ? *memory - reserve : 0;
    sp->scratch_slots = (int)slots;
    return 0;
}

/* ---- profiles written by `shardnode profile` --------------------------------- */

int fleet_profile_parse(json_t *pj, const cost_shape *shape, cost_profile *pf, const char *where,
                        char *err, size_t errlen)
{
    static const struct { const char *key; size_t off; } model_keys[] = {
        {"hidden_size", offsetof(cost_shape, hidden)},
        {"intermediate_size", offsetof(cost_shape, intermediate)},
        {"num_attention_heads", offsetof(cost_shape, heads)},
        {"num_key_value_heads", offsetof(cost_shape, kv_heads)},
        {"vocab_size", offsetof(cost_shape, vocab)},
    };
    json_t *model = json_object_get(pj, "model");
    const char *format = json_string_value(json_object_get(pj, "format"));
    if (!json_is_object(pj) || !format || strcmp(format, "shardnode-profile") || !json_is_object(model))
        return node_errf(err, errlen, "%s: not a profile written by shardnode profile", where);
    for (size_t i = 0; i < sizeof model_keys / sizeof model_keys[0]; i++) {
        int64_t want = *(const int64_t *)((const char *)shape + model_keys[i].off);
        json_t *v = json_object_get(model, model_keys[i].key);
        if (!json_is_integer(v) || json_integer_value(v) != want)
            return node_errf(err, errlen, "%s: the profile was measured for another model (%s %lld, "
                        "the model has %lld)", where, model_keys[i].key,
                        v ? (long long)json_integer_value(v) : -1LL, (long long)want);
    }
    json_t *seq = json_object_get(pj, "seq");
    if (!json_is_integer(seq) || json_integer_value(seq) != shape->seq)
        return node_errf(err, errlen, "%s: the profile was measured at sequence length %lld, the plan "
                    "uses %lld", where, seq ? (long long)json_integer_value(seq) : -1LL,
                    (long long)shape->seq);
    int64_t slots = 1;
    if (get_scaled(pj, "micro_batch", true, 1, 1 << 24, 1, &pf->micro_batch, where, err, errlen) ||
        get_scaled(pj, "memory_bytes", true, 0, 1e18, 1, &pf->memory_bytes, where, err, errlen) ||
        get_scaled(pj, "scratch_slots", false, 1, 1 << 16, 1, &slots, where, err, errlen))
        return -1;
    pf->scratch_slots = (int)slots;
    static const char *const units[COST_UNITS] = {"embedding", "layer", "head"};
    for (int u = 0; u < COST_UNITS; u++) {
        json_t *o = json_object_get(pj, units[u]);
        char uw[340];
        snprintf(uw, sizeof uw, "%s: \"%s\"", where, units[u]);
        if (!json_is_object(o)) return node_errf(err, errlen, "%s is missing", uw);
        if (get_scaled(o, "forward_ns", true, 0, 7e13, 1, &pf->fwd_ns[u], uw, err, errlen) ||
            get_scaled(o, "backward_ns", true, 0, 7e13, 1, &pf->bwd_ns[u], uw, err, errlen) ||
            get_scaled(o, "optimizer_ns", true, 0, 7e13, 1, &pf->opt_ns[u], uw, err, errlen))
            return -1;
    }
    return 0;
}

/* Relative paths in a fleet file are relative to its folder. */
static char *beside(const char *file, const char *rel)
{
    const char *slash = strrchr(file, '/');
    size_t dir = rel[0] == '/' || !slash ? 0 : (size_t)(slash - file) + 1;
    char *out = malloc(dir + strlen(rel) + 1);
    if (!out) return NULL;
    memcpy(out, file, dir);
    strcpy(out + dir, rel);
    return out;
}

/* ---- the fleet file ------------------------------------------------------------ */

typedef struct {
    char name[PLAN_NAME_MAX];
    bool lan_set, wan_set;
    cost_link lan, wan;
} site_def;

typedef struct {
    const char *path;
    json_t *root, *devices;
    char *devices_path;
    site_def *sites;
    int nsites;
    fleet_file *ff;
    char *err;
    size_t errlen;
} loader;

static int site_index(const loader *ld, const char *name)
{
    for (int s = 0; s < ld->nsites; s++)
        if (strcmp(ld->sites[s].name, name) == 0) return s;
    return -1;
}

static int load_devices(loader *ld, const char *given)
{
    if (ld->devices) return 0;
    const char *rel = json_string_value(json_object_get(ld->root, "devices"));
    ld->devices_path = given ? strdup(given) : beside(ld->path, rel ? rel : "../devices.json");
    if (!ld->devices_path) return node_errf(ld->err, ld->errlen, "out of memory");
    json_error_t je;
    ld->devices = json_load_file(ld->devices_path, JSON_REJECT_DUPLICATES, &je);
    if (!ld->devices)
        return node_errf(ld->err, ld->errlen, "%s:%d:%d: %s (the devices table; pass --devices FILE)",
                    ld->devices_path, je.line, je.column, je.text);
    if (!json_is_object(json_object_get(ld->devices, "devices")))
        return node_errf(ld->err, ld->errlen, "%s: \"devices\" must be an object of device names",
                    ld->devices_path);
    return 0;
}

static int parse_node(loader *ld, json_t *nj, int entry, int *at, const char *devices_arg,
                      const cost_shape *shape, int64_t micro_batch)
{
    static const char *const keys[] = {"name", "device", "profile", "site", "memory_gib", "mfu",
                                       "count", NULL};
    char where[300];
    const char *name = json_string_value(json_object_get(nj, "name"));
    snprintf(where, sizeof where, "%s: nodes[%d]%s%s%s", ld->path, entry, name ? " (" : "",
             name ? name : "", name ? ")" : "");
    if (!json_is_object(nj))
        return node_errf(ld->err, ld->errlen, "%s: a node is an object, got %s", where,
                         json_is_array(nj) ? "a list" : json_is_string(nj) ? "a string"
                                                                            : "a scalar");
    if (known_keys(nj, keys, where, ld->err, ld->errlen)) return -1;
    if (!name || !*name || strlen(name) >= PLAN_NAME_MAX - 8)
        return node_errf(ld->err, ld->errlen, "%s: \"name\" must be a string of 1 to %d bytes", where,
                    PLAN_NAME_MAX - 9);
    int64_t count = 1;
    if (get_scaled(nj, "count", false, 1, PLAN_MAX_NODES, 1, &count, where, ld->err, ld->errlen))
        return -1;
    json_t *device = json_object_get(nj, "device"), *prof = json_object_get(nj, "profile");
    const char *site = json_string_value(json_object_get(nj, "site"));
    if (!device == !prof)
        return node_errf(ld->err, ld->errlen, "%s: needs one of \"device\" (a name in devices.json) "
                    "or \"profile\" (from shardnode profile)", where);
    if (json_object_get(nj, "site") && (!site || site_index(ld, site) < 0))
        return node_errf(ld->err, ld->errlen, "%s: \"site\" must name an entry of \"sites\"", where);
    plan_node proto;
    memset(&proto, 0, sizeof proto);
    if (device) {
        if (!json_is_string(device))
            return node_errf(ld->err, ld->errlen, "%s: \"device\" must be a string", where);
        cost_spec sp;
        int64_t memory = 0;
        if (load_devices(ld, devices_arg) ||
            device_spec(ld->devices, ld->devices_path, json_string_value(device), nj, &sp, &memory,
                        where, ld->err, ld->errlen))
            return -1;
        char why[256];
        if (cost_profile_from_spec(&proto.prof, &sp, shape, micro_batch, why, sizeof why))
            return node_errf(ld->err, ld->errlen, "%s: %s", where, why);
        snprintf(proto.device, sizeof proto.device, "%s", json_string_value(device));
    } else {
        if (json_object_get(nj, "mfu"))
            return node_errf(ld->err, ld->errlen, "%s: \"mfu\" applies to spec-sheet devices; a "
                        "profile is measured", where);
        json_t *pj = prof;
        char *ppath = NULL;
        if (json_is_string(prof)) {
            json_error_t je;
            if (!(ppath = beside(ld->path, json_string_value(prof))))
                return node_errf(ld->err, ld->errlen, "out of memory");
            if (!(pj = json_load_file(ppath, JSON_REJECT_DUPLICATES, &je))) {
                int rc = node_errf(ld->err, ld->errlen, "%s: profile %s:%d:%d: %s", where, ppath,
                              je.line, je.column, je.text);
                free(ppath);
                return rc;
            }
        }
        /* A profile that does not fit the model is the profile file's fault:
         * name it, not only the fleet file that points to it. */
        char pwhere[sizeof where + 4200];
        snprintf(pwhere, sizeof pwhere, "%s: profile %s", where, ppath ? ppath : "(inline)");
        int rc = fleet_profile_parse(pj, shape, &proto.prof, pwhere, ld->err, ld->errlen);
        const char *dn = json_string_value(json_object_get(pj, "device_name"));
        snprintf(proto.device, sizeof proto.device, "%s", dn ? dn : "profiled");
        if (pj != prof) json_decref(pj);
        free(ppath);
        if (rc) return -1;
        int64_t memory = 0;
        if (get_positive(nj, "memory_gib", 1e6, 1073741824.0, &memory, where, ld->err, ld->errlen))
            return -1;
        if (memory) proto.prof.memory_bytes = memory;
    }
    if (*at + count > PLAN_MAX_NODES)
        return node_errf(ld->err, ld->errlen, "%s: more than %d nodes", where, PLAN_MAX_NODES);
    int width = count >= 100 ? 3 : count >= 10 ? 2 : 1;
    for (int64_t c = 0; c < count; c++) {
        plan_node *nd = &ld->ff->fleet.nodes[*at];
        *nd = proto;
        if (count == 1)
            snprintf(nd->name, sizeof nd->name, "%s", name);
        else
            snprintf(nd->name, sizeof nd->name, "%s-%0*lld", name, width, (long long)c + 1);
        for (int j = 0; j < *at; j++)
            if (strcmp(ld->ff->fleet.nodes[j].name, nd->name) == 0)
                return node_errf(ld->err, ld->errlen, "%s: node name \"%s\" appears twice", where,
                            nd->name);
        snprintf(ld->ff->site[*at], PLAN_NAME_MAX, "%s", site ? site : "");
        (*at)++;
    }
    return 0;
}

static int parse_sites(loader *ld)
{
    json_t *sites = json_object_get(ld->root, "sites");
    if (!sites) return 0;
    if (!json_is_object(sites))
        return node_errf(ld->err, ld->errlen, "%s: \"sites\" must be an object of site names", ld->path);
    ld->sites = calloc(json_object_size(sites) + 1, sizeof *ld->sites);
    if (!ld->sites) return node_errf(ld->err, ld->errlen, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(sites, key, v) {
        site_def *s = &ld->sites[ld->nsites++];
        char where[300];
        snprintf(where, sizeof where, "%s: sites.%s", ld->path, key);
        if (!*key || strlen(key) >= PLAN_NAME_MAX)
            return node_errf(ld->err, ld->errlen, "%s: site names are 1 to %d bytes", where,
                        PLAN_NAME_MAX - 1);
        snprintf(s->name, sizeof s->name, "%s", key);
        static const char *const extra[] = {"wan", NULL};
        if (!json_is_object(v)) return node_errf(ld->err, ld->errlen, "%s: must be an object", where);
        json_t *wan = json_object_get(v, "wan");
        if (json_object_get(v, "latency_ms") || json_object_size(v) > (wan ? 1u : 0u)) {
            if (parse_link(v, &s->lan, where, extra, ld->err, ld->errlen)) return -1;
            s->lan_set = true;
        }
        if (wan) {
            char ww[320];
            snprintf(ww, sizeof ww, "%s.wan", where);
            if (parse_link(wan, &s->wan, ww, NULL, ld->err, ld->errlen)) return -1;
            s->wan_set = true;
        }
    }
    return 0;
}

/* A "between" end: a node name, or a site name (sites and nodes may not
 * share names, so this is never ambiguous). */
static bool end_matches(const loader *ld, const char *end, int node)
{
    return strcmp(ld->ff->fleet.nodes[node].name, end) == 0 ||
           (ld->ff->site[node][0] && strcmp(ld->ff->site[node], end) == 0);
}

/* Resolution, most specific first: a node pair, the nodes' shared site, a
 * site pair, both sites' uplinks (latencies add, the slower uplink
 * limits), the default link. */
static int resolve_links(loader *ld)
{
    plan_fleet *f = &ld->ff->fleet;
    int n = f->nnodes;
    json_t *links = json_object_get(ld->root, "links"), *deflt = json_object_get(ld->root, "default_link");
    cost_link dl;
    char dwhere[300];
    snprintf(dwhere, sizeof dwhere, "%s: default_link", ld->path);
    if (deflt && parse_link(deflt, &dl, dwhere, NULL, ld->err, ld->errlen)) return -1;
    if (links && !json_is_array(links))
        return node_errf(ld->err, ld->errlen, "%s: \"links\" must be a list", ld->path);
    size_t nl = links ? json_array_size(links) : 0;
    cost_link *lv = calloc(nl + 1, sizeof *lv);
    int *is_node_pair = calloc(nl + 1, sizeof *is_node_pair);
    int rc = -1;
    if (!lv || !is_node_pair) {
        node_errf(ld->err, ld->errlen, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < nl; k++) {
        json_t *e = json_array_get(links, k), *btw = json_object_get(e, "between");
        char where[300];
        snprintf(where, sizeof where, "%s: links[%zu]", ld->path, k);
        static const char *const extra[] = {"between", NULL};
        if (parse_link(e, &lv[k], where, extra, ld->err, ld->errlen)) goto out;
        if (!json_is_array(btw) || json_array_size(btw) != 2 ||
            !json_is_string(json_array_get(btw, 0)) || !json_is_string(json_array_get(btw, 1))) {
            node_errf(ld->err, ld->errlen, "%s: \"between\" must be two node or site names", where);
            goto out;
        }
        int node_ends = 0;
        for (int e2 = 0; e2 < 2; e2++) {
            const char *end = json_string_value(json_array_get(btw, (size_t)e2));
            bool node = false;
            for (int i = 0; i < n && !node; i++) node = strcmp(f->nodes[i].name, end) == 0;
            if (!node && site_index(ld, end) < 0) {
                node_errf(ld->err, ld->errlen, "%s: \"%s\" is neither a node nor a site", where, end);
                goto out;
            }
            node_ends += node;
        }
        is_node_pair[k] = node_ends == 2;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j) continue;
            const cost_link *found = NULL;
            cost_link sum;
            for (int pass = 0; pass < 2 && !found; pass++)   /* node pairs first */
                for (size_t k = 0; k < nl && !found; k++) {
                    if (is_node_pair[k] != (pass == 0)) continue;
                    json_t *btw = json_object_get(json_array_get(links, k), "between");
                    const char *a = json_string_value(json_array_get(btw, 0));
                    const char *b = json_string_value(json_array_get(btw, 1));
                    if ((end_matches(ld, a, i) && end_matches(ld, b, j)) ||
                        (end_matches(ld, a, j) && end_matches(ld, b, i)))
                        found = &lv[k];
                }
            int si = ld->ff->site[i][0] ? site_index(ld, ld->ff->site[i]) : -1;
            int sj = ld->ff->site[j][0] ? site_index(ld, ld->ff->site[j]) : -1;
            if (!found && si >= 0 && si == sj && ld->sites[si].lan_set) found = &ld->sites[si].lan;
            if (!found && si >= 0 && sj >= 0 && si != sj && ld->sites[si].wan_set &&
                ld->sites[sj].wan_set) {
                sum.latency_ns = ld->sites[si].wan.latency_ns + ld->sites[sj].wan.latency_ns;
                sum.bandwidth = ld->sites[si].wan.bandwidth < ld->sites[sj].wan.bandwidth
                                    ? ld->sites[si].wan.bandwidth : ld->sites[sj].wan.bandwidth;
                found = &sum;
            }
            if (!found && deflt) found = &dl;
            if (!found) {
                node_errf(ld->err, ld->errlen, "%s: no link between nodes %s and %s: add a \"links\" "
                     "entry, \"wan\" figures for their sites, or a \"default_link\"", ld->path,
                     f->nodes[i].name, f->nodes[j].name);
                goto out;
            }
            f->links[(size_t)i * n + j] = *found;
        }
    rc = 0;
out:
    free(lv);
    free(is_node_pair);
    return rc;
}

/* A message on one line: a control character a key or a name put in it
 * becomes '?', so a file cannot forge lines in a log. */
static int one_line(char *err, size_t errlen)
{
    for (size_t i = 0; err && i < errlen && err[i]; i++)
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f) err[i] = '?';
    return -1;
}

static int fleet_parse(fleet_file *ff, const char *path, const char *devices,
                       const cost_shape *shape, int64_t micro_batch, char *err, size_t errlen);

int fleet_load(fleet_file *ff, const char *path, const char *devices, const cost_shape *shape,
               int64_t micro_batch, char *err, size_t errlen)
{
    return fleet_parse(ff, path, devices, shape, micro_batch, err, errlen) ? one_line(err, errlen)
                                                                           : 0;
}

static int fleet_parse(fleet_file *ff, const char *path, const char *devices,
                       const cost_shape *shape, int64_t micro_batch, char *err, size_t errlen)
{
    memset(ff, 0, sizeof *ff);
    loader ld = {.path = path, .ff = ff, .err = err, .errlen = errlen};
    json_error_t je;
    int rc = -1;
    ld.root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!ld.root) return node_errf(err, errlen, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    static const char *const keys[] = {"name", "devices", "memory_margin", "nodes", "sites",
                                       "links", "default_link", "notes", NULL};
    json_t *nodes = json_object_get(ld.root, "nodes");
    int64_t margin = 50;
    if (!json_is_object(ld.root)) {
        node_errf(err, errlen, "%s: a fleet file is a JSON object", path);
        goto out;
    }
    if (known_keys(ld.root, keys, path, err, errlen) ||
        get_scaled(ld.root, "memory_margin", false, 0, 0.5, 1000, &margin, path, err, errlen) ||
        parse_sites(&ld))
        goto out;
    if (!json_is_array(nodes) || json_array_size(nodes) < 1) {
        node_errf(err, errlen, "%s: \"nodes\" must be a non-empty list", path);
        goto out;
    }
    const char *name = json_string_value(json_object_get(ld.root, "name"));
    const char *base = strrchr(path, '/');
    snprintf(ff->name, sizeof ff->name, "%s", name ? name : base ? base + 1 : path);
    ff->margin_permille = (int)margin;
    ff->fleet.nodes = calloc(PLAN_MAX_NODES, sizeof *ff->fleet.nodes);
    ff->site = calloc(PLAN_MAX_NODES, sizeof *ff->site);
    if (!ff->fleet.nodes || !ff->site) {
        node_errf(err, errlen, "out of memory");
        goto out;
    }
    int at = 0;
    for (size_t k = 0; k < json_array_size(nodes); k++)
        if (parse_node(&ld, json_array_get(nodes, k), (int)k, &at, devices, shape, micro_batch))
            goto out;
    ff->fleet.nnodes = at;
    for (int i = 0; i < at; i++)
        if (site_index(&ld, ff->fleet.nodes[i].name) >= 0) {
            node_errf(err, errlen, "%s: \"%s\" names both a node and a site", path, ff->fleet.nodes[i].name);
            goto out;
        }
    ff->fleet.links = calloc((size_t)at * at, sizeof *ff->fleet.links);
    if (!ff->fleet.links) {
        node_errf(err, errlen, "out of memory for %d x %d links", at, at);
        goto out;
    }
    if (resolve_links(&ld) || plan_fleet_check(&ff->fleet, err, errlen)) goto out;
    rc = 0;
out:
    json_decref(ld.root);
    json_decref(ld.devices);
    free(ld.devices_path);
    free(ld.sites);
    if (rc) fleet_free(ff);
    return rc;
}

void fleet_free(fleet_file *ff)
{
    free(ff->fleet.nodes);
    free(ff->fleet.links);
    free(ff->site);
    memset(ff, 0, sizeof *ff);
}

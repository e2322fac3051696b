/* cluster.c — the static cluster file: which node runs which stage, where
 * it listens, how the pipeline is scheduled. Later the mesh and the planner
 * produce the same description automatically. */
#include "node_base.h"
#include "runtime.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_node(cluster_spec *c, int i, json_t *v, const char *path, char *err,
                      size_t errlen)
{
    cluster_node *n = &c->nodes[i];
    const char *key;
    json_t *x;
    if (!json_is_object(v)) return node_errf(err, errlen, "%s: nodes[%d] must be an object", path, i);
    json_object_foreach(v, key, x) {
        if (strcmp(key, "name") && strcmp(key, "host") && strcmp(key, "port") &&
            strcmp(key, "layers"))
            return node_errf(err, errlen, "%s: nodes[%d]: \"%s\" is not a known key", path, i, key);
    }
    json_t *name = json_object_get(v, "name"), *host = json_object_get(v, "host");
    json_t *port = json_object_get(v, "port"), *layers = json_object_get(v, "layers");
    if (!json_is_string(name) || !*json_string_value(name) ||
        strlen(json_string_value(name)) >= sizeof n->name)
        return node_errf(err, errlen, "%s: nodes[%d]: \"name\" must be a string of 1 to %zu bytes",
                    path, i, sizeof n->name - 1);
    snprintf(n->name, sizeof n->name, "%s", json_string_value(name));
    if (!json_is_string(host) || strlen(json_string_value(host)) >= sizeof n->host)
        return node_errf(err, errlen, "%s: node %s: \"host\" must be a string", path, n->name);
    snprintf(n->host, sizeof n->host, "%s", json_string_value(host));
    if (!json_is_integer(port) || json_integer_value(port) < 1 ||
        json_integer_value(port) > 65535)
        return node_errf(err, errlen, "%s: node %s: \"port\" must be an integer in [1, 65535]", path,
                    n->name);
    n->port = (int)json_integer_value(port);
    if (!json_is_array(layers) || json_array_size(layers) != 2 ||
        !json_is_integer(json_array_get(layers, 0)) || !json_is_integer(json_array_get(layers, 1)))
        return node_errf(err, errlen, "%s: node %s: \"layers\" must be [first, end) as two integers",
                    path, n->name);
    json_int_t b = json_integer_value(json_array_get(layers, 0));
    json_int_t e = json_integer_value(json_array_get(layers, 1));
    /* checked before the cast: 4294967296 must not become layer 0 */
    if (b < 0 || e < 0 || b > INT_MAX || e > INT_MAX)
        return node_errf(err, errlen, "%s: node %s: \"layers\" [%lld, %lld) is outside 0..%d",
                         path, n->name, (long long)b, (long long)e, INT_MAX);
    n->begin = (int)b;
    n->end = (int)e;
    for (int k = 0; k < i; k++)
        if (strcmp(c->nodes[k].name, n->name) == 0)
            return node_errf(err, errlen, "%s: node name %s appears twice", path, n->name);
    return 0;
}

/* A message on one line: a control character a key or a name put in it
 * becomes '?', so a file cannot forge lines in a log. */
static int one_line(char *err, size_t errlen)
{
    for (size_t i = 0; err && i < errlen && err[i]; i++)
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f) err[i] = '?';
    return -1;
}

static int cluster_parse(cluster_spec *c, const char *path, int num_layers, char *err,
                         size_t errlen);

int cluster_load(cluster_spec *c, const char *path, int num_layers, char *err, size_t errlen)
{
    return cluster_parse(c, path, num_layers, err, errlen) ? one_line(err, errlen) : 0;
}

static int cluster_parse(cluster_spec *c, const char *path, int num_layers, char *err,
                         size_t errlen)
{
    memset(c, 0, sizeof *c);
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return node_errf(err, errlen, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    int rc = -1;
    const char *key;
    json_t *v;
    c->timeout_ms = 60000;
    c->policy = SCHED_1F1B;
    c->wire = MESH_F32;
    if (!json_is_object(root)) {
        node_errf(err, errlen, "%s: a cluster file is a JSON object", path);
        goto out;
    }
    json_object_foreach(root, key, v) {
        if (strcmp(key, "nodes") == 0) continue;
        if (strcmp(key, "run") == 0 && json_is_string(v) &&
            strlen(json_string_value(v)) < sizeof c->run) {
            snprintf(c->run, sizeof c->run, "%s", json_string_value(v));
        } else if (strcmp(key, "schedule") == 0 && json_is_string(v) &&
                   (!strcmp(json_string_value(v), "1f1b") ||
                    !strcmp(json_string_value(v), "gpipe"))) {
            c->policy = strcmp(json_string_value(v), "gpipe") ? SCHED_1F1B : SCHED_GPIPE;
        } else if (strcmp(key, "wire_dtype") == 0 && json_is_string(v) &&
                   (!strcmp(json_string_value(v), "f32") || !strcmp(json_string_value(v), "bf16"))) {
            c->wire = strcmp(json_string_value(v), "bf16") ? MESH_F32 : MESH_BF16;
        } else if (strcmp(key, "timeout_ms") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 100 && json_integer_value(v) <= 86400000) {
            c->timeout_ms = (int)json_integer_value(v);
        } else {
            node_errf(err, errlen, "%s: \"%s\" is not a known key or has a wrong value (known: nodes, "
                 "run, schedule \"1f1b\"|\"gpipe\", wire_dtype \"f32\"|\"bf16\", timeout_ms)",
                 path, key);
            goto out;
        }
    }
    json_t *nodes = json_object_get(root, "nodes");
    if (!json_is_array(nodes) || json_array_size(nodes) < 1 ||
        json_array_size(nodes) > SPLIT_MAX_STAGES) {
        node_errf(err, errlen, "%s: \"nodes\" must be a list of 1 to %d nodes", path, SPLIT_MAX_STAGES);
        goto out;
    }
    c->nnodes = (int)json_array_size(nodes);
    for (int i = 0; i < c->nnodes; i++)
        if (parse_node(c, i, json_array_get(nodes, (size_t)i), path, err, errlen)) goto out;
    /* stages in list order, contiguous, covering every layer once */
    int expect = 0;
    for (int i = 0; i < c->nnodes; i++) {
        cluster_node *n = &c->nodes[i];
        bool ends = i == 0 || i == c->nnodes - 1;
        if (n->begin != expect || n->end < n->begin || n->end > num_layers ||
            (n->begin == n->end && !ends)) {
            node_errf(err, errlen, "%s: node %s holds layers [%d, %d); stages must be contiguous in "
                 "list order, start at %d and stay within the model's %d layers", path, n->name,
                 n->begin, n->end, expect, num_layers);
            goto out;
        }
        expect = n->end;
    }
    if (expect != num_layers) {
        node_errf(err, errlen, "%s: the stages end at layer %d, the model has %d", path, expect,
             num_layers);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int cluster_find(const cluster_spec *c, const char *name)
{
    for (int i = 0; i < c->nnodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0) return i;
    return -1;
}

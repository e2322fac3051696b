/* hf_import.c — a Hugging Face model directory: config.json and its
 * weights, one model.safetensors or shards listed by
 * model.safetensors.index.json ({"weight_map": {tensor: shard file}}).
 *
 * A node loads only the tensors of its own stage: the index says which
 * shard holds a tensor, the shard's header where its bytes are, and only
 * those shards are opened (memory-mapped, header validated; the pages of a
 * tensor are read when it is copied). */
#include "import.h"
#include "model_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char *file;               /* name inside the directory */
    safetensors_file *st;     /* opened on first use */
    bnb_file *bnb;            /* instead, a file bitsandbytes saved 4-bit */
} shard;

struct hf_model {
    char *dir;
    llama_config cfg;
    shard *shards;
    int nshards;
    json_t *weight_map;       /* tensor → shard file; NULL without an index */
};

static int join(char *buf, size_t len, const char *dir, const char *name, char *err,
                size_t errlen)
{
    if (snprintf(buf, len, "%s/%s", dir, name) < (int)len) return 0;
    return model_errf(err, errlen, "%s: path too long", dir);
}

static int shard_index(hf_model *m, const char *file)
{
    for (int i = 0; i < m->nshards; i++)
        if (strcmp(m->shards[i].file, file) == 0) return i;
    return -1;
}

static int add_shard(hf_model *m, const char *file)
{
    shard *s = realloc(m->shards, (size_t)(m->nshards + 1) * sizeof *s);
    if (!s) return -1;
    m->shards = s;
    if (!(s[m->nshards].file = strdup(file))) return -1;
    s[m->nshards].bnb = NULL;
    s[m->nshards++].st = NULL;
    return 0;
}


/* "[64, 32]" (at most 2 dimensions shown, "..." for more). */
static const char *shape_text(char *buf, size_t len, int ndim, const int64_t *shape)
{
    if (ndim == 1) snprintf(buf, len, "[%lld]", (long long)shape[0]);
    else if (ndim == 2) snprintf(buf, len, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
    else snprintf(buf, len, "[%d dimensions]", ndim);
    return buf;
}

/* A shard's name must stay inside the directory. */
static bool plain_name(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int read_index(hf_model *m, const char *path, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr), *map, *v;
    const char *key;
    if (!root)
        return model_errf(err, errlen, "%s: invalid JSON at line %d, column %d: %s", path,
                          jerr.line, jerr.column, jerr.text);
    map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        json_decref(root);
        return model_errf(err, errlen, "%s: weight_map must be an object of tensor → file", path);
    }
    json_object_foreach(map, key, v) {
        const char *file = json_string_value(v);
        if (!file || !plain_name(file)) {
            /* key lives in root: the message first */
            model_errf(err, errlen, "%s: weight_map[\"%s\"] must be a file name in the "
                       "model's directory", path, key);
            json_decref(root);
            return -1;
        }
        if (shard_index(m, file) < 0 && add_shard(m, file)) {
            json_decref(root);
            return model_errf(err, errlen, "%s: out of memory", path);
        }
    }
    m->weight_map = json_incref(map);
    json_decref(root);
    return 0;
}

int hf_open(hf_model **out, const char *dir, char *err, size_t errlen)
{
    hf_model *m = calloc(1, sizeof *m);
    char path[4096];
    struct stat st;
    *out = NULL;
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        return model_errf(err, errlen, "%s: out of memory", dir);
    }
    if (join(path, sizeof path, dir, "config.json", err, errlen) ||
        llama_config_load(&m->cfg, path, err, errlen) ||
        join(path, sizeof path, dir, "model.safetensors.index.json", err, errlen))
        goto fail;
    if (stat(path, &st) == 0) {
        if (read_index(m, path, err, errlen)) goto fail;
    } else {
        if (join(path, sizeof path, dir, "model.safetensors", err, errlen)) goto fail;
        if (stat(path, &st) != 0) {
            model_errf(err, errlen, "%s: neither model.safetensors nor "
                       "model.safetensors.index.json is there", dir);
            goto fail;
        }
        if (add_shard(m, "model.safetensors")) {
            model_errf(err, errlen, "%s: out of memory", dir);
            goto fail;
        }
    }
    *out = m;
    return 0;
fail:
    hf_close(m);
    return -1;
}

void hf_close(hf_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->nshards; i++) {
        safetensors_close(m->shards[i].st);
        bnb_close(m->shards[i].bnb);
        free(m->shards[i].file);
    }
    free(m->shards);
    json_decref(m->weight_map);
    free(m->dir);
    free(m);
}

const llama_config *hf_config(const hf_model *m) { return &m->cfg; }
int hf_shard_count(const hf_model *m) { return m->nshards; }

const char *hf_tensor_file(const hf_model *m, const char *name)
{
    if (!m->weight_map) return m->shards[0].file;
    return json_string_value(json_object_get(m->weight_map, name));
}

/* A shard safetensors_open refuses may be a bitsandbytes 4-bit file (U8
 * tensors): then it is read through bnb_import.c; otherwise the first
 * refusal stands. */
static int open_shard(shard *s, const char *path, char *err, size_t errlen)
{
    char bnb_err[512];
    if (safetensors_open(&s->st, path, err, errlen) == 0) return 0;
    if (bnb_open(&s->bnb, path, bnb_err, sizeof bnb_err) == 0) {
        if (bnb_is_quantized_file(s->bnb)) return 0;
        bnb_close(s->bnb);
        s->bnb = NULL;
    }
    return -1;
}

/* The opened shard holding name. */
static shard *open_shard_of(hf_model *m, const char *name, char *err, size_t errlen)
{
    const char *file = hf_tensor_file(m, name);
    char path[4096];
    if (!file) {
        model_errf(err, errlen, "%s/model.safetensors.index.json: tensor %s is not in the "
                   "weight_map", m->dir, name);
        return NULL;
    }
    shard *s = &m->shards[shard_index(m, file)];
    if (!s->st && !s->bnb &&
        (join(path, sizeof path, m->dir, file, err, errlen) ||
         open_shard(s, path, err, errlen)))
        return NULL;
    return s;
}

/* The HF shape cfg gives a tensor (2-D matrices, 1-D norms). */
static int expected_shape(const hf_model *m, const char *name, int *ndim, int64_t shape[2],
                          char *err, size_t errlen)
{
    if (gguf_llama_shape(&m->cfg, name, ndim, shape) == 0) return 0;
    return model_errf(err, errlen, "%s: %s is not a tensor of this model's config", m->dir, name);
}

int hf_read_f32(hf_model *m, const char *name, float *dst, size_t n, char *err, size_t errlen)
{
    int ndim;
    int64_t shape[2];
    if (expected_shape(m, name, &ndim, shape, err, errlen)) return -1;
    size_t numel = (size_t)shape[0] * (ndim == 2 ? (size_t)shape[1] : 1);
    if (numel != n)
        return model_errf(err, errlen, "%s: tensor %s has %zu values, the caller expects %zu",
                          m->dir, name, numel, n);
    shard *s = open_shard_of(m, name, err, errlen);
    if (s && s->bnb) return bnb_read_f32(s->bnb, name, ndim, shape, dst, err, errlen);
    return s ? safetensors_read_f32(s->st, name, ndim, shape, dst, err, errlen) : -1;
}

int hf_read_nf4(hf_model *m, const char *name, nf4_matrix *q, void **buf, char *err,
                size_t errlen)
{
    int ndim;
    int64_t shape[2];
    *buf = NULL;
    if (expected_shape(m, name, &ndim, shape, err, errlen)) return -1;
    shard *s = open_shard_of(m, name, err, errlen);
    if (!s) return -1;
    if (!s->bnb || !bnb_is_quantized(s->bnb, name)) return 1;
    if (ndim != 2)
        return model_errf(err, errlen, "%s: tensor %s is stored 4-bit but is not a matrix",
                          bnb_path(s->bnb), name);
    return bnb_read_nf4(s->bnb, name, shape[0], shape[1], q, buf, err, errlen);
}

/* A frozen base (stage_lora.c): NF4 kept as stored, or read and written
 * (quantized for an NF4 entry, one matrix at a time). */
static int load_frozen(hf_model *m, stage *s, char *err, size_t errlen)
{
    for (int i = 0; i < stage_frozen_count(s); i++) {
        const stage_param *p = stage_frozen_at(s, i);
        float *dst = stage_frozen_data(s, i);
        if (dst) {
            if (hf_read_f32(m, p->name, dst, p->numel, err, errlen)) return -1;
            continue;
        }
        nf4_matrix q;
        void *buf;
        int rc = hf_read_nf4(m, p->name, &q, &buf, err, errlen);
        if (rc < 0) return -1;
        if (rc == 0) {
            if (stage_frozen_adopt_nf4(s, i, &q, buf, err, errlen)) {
                free(buf);
                return -1;
            }
            continue;
        }
        float *w = malloc(p->numel * sizeof *w);
        if (!w) return model_errf(err, errlen, "%s: out of memory reading %s", m->dir, p->name);
        rc = hf_read_f32(m, p->name, w, p->numel, err, errlen) ||
             stage_frozen_write(s, i, w, p->numel, err, errlen);
        free(w);
        if (rc) return -1;
    }
    return 0;
}

int hf_load_stage(hf_model *m, stage *s, char *err, size_t errlen)
{
    if (stage_lora_config(s)) return load_frozen(m, s, err, errlen);
    float *params = stage_params(s);
    for (int i = 0; i < stage_param_count(s); i++) {
        const stage_param *p = stage_param_at(s, i);
        if (hf_read_f32(m, p->name, params + p->offset, p->numel, err, errlen)) return -1;
    }
    return 0;
}

int hf_check(hf_model *m, char *err, size_t errlen)
{
    char **names;
    int n, rc = 0;
    if (gguf_llama_names(&m->cfg, &names, &n))
        return model_errf(err, errlen, "%s: out of memory", m->dir);
    for (int i = 0; i < n && rc == 0; i++) {
        int ndim;
        int64_t shape[2];
        shard *sh = open_shard_of(m, names[i], err, errlen);
        const safetensors_file *st = sh ? sh->st : NULL;
        const safetensors_tensor *t = st ? safetensors_find(st, names[i]) : NULL;
        expected_shape(m, names[i], &ndim, shape, err, errlen);
        if (sh && sh->bnb) {
            rc = bnb_check(sh->bnb, names[i], ndim, shape, err, errlen);
        } else if (!st) {
            rc = -1;
        } else if (!t) {
            rc = model_errf(err, errlen, "%s: tensor %s is missing", safetensors_path(st),
                            names[i]);
        } else if (t->dtype != SAFETENSORS_F32 && t->dtype != SAFETENSORS_F16 &&
                   t->dtype != SAFETENSORS_BF16) {
            rc = model_errf(err, errlen, "%s: tensor %s is not F32, F16 or BF16",
                            safetensors_path(st), names[i]);
        } else if (t->ndim != ndim || t->shape[0] != shape[0] ||
                   (ndim == 2 && t->shape[1] != shape[1])) {
            char have[64], want[64];
            shape_text(want, sizeof want, ndim, shape);
            shape_text(have, sizeof have, t->ndim, t->shape);
            rc = model_errf(err, errlen, "%s: tensor %s has shape %s, the config says %s",
                            safetensors_path(st), names[i], have, want);
        }
    }
    gguf_free_names(names, n);
    return rc;
}

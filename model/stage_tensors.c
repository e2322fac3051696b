/* stage_tensors.c — a stage's tensors by HF name and by range of decoder
 * layers, weights and both AdamW moments (model.h): what moving layers
 * from one member's stage to another's needs, bit for bit. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const moment_prefix[3] = {"", "optim.exp_avg.", "optim.exp_avg_sq."};

static float *buffer_of(stage *s, stage_buffer b)
{
    return b == STAGE_WEIGHTS ? stage_params(s) : b == STAGE_MOMENT1 ? stage_moment1(s)
                                                                     : stage_moment2(s);
}

int stage_tensor_layer(const char *name)
{
    static const char prefix[] = "model.layers.", peft[] = "base_model.model.";
    /* an adapter, as PEFT names it: base_model.model.model.layers.L.... */
    if (strncmp(name, peft, sizeof peft - 1) == 0) name += sizeof peft - 1;
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
    const char *p = name + sizeof prefix - 1;
    char *end;
    long l = strtol(p, &end, 10);
    if (end == p || *end != '.' || l < 0 || l > 1 << 20) return -1;
    return (int)l;
}

/* The stage's entry for name: its own tensor, else the head's copy of a
 * tied embedding (what a last stage without the embedding holds of it). */
bool stage_tensor_needed(const char *name, int begin, int end, int layers, bool tied)
{
    for (int k = 1; k < 3; k++)
        if (strncmp(name, moment_prefix[k], strlen(moment_prefix[k])) == 0) {
            name += strlen(moment_prefix[k]);
            break;
        }
    int l = stage_tensor_layer(name);
    if (l >= 0) return l >= begin && l < end;
    bool last = end >= layers;
    if (strstr(name, "embed_tokens")) return begin == 0 || (last && tied);
    return last;
}

static const stage_param *param_of(stage *s, const char *name)
{
    const stage_param *copy = NULL;
    for (int i = 0; i < stage_param_count(s); i++) {
        const stage_param *p = stage_param_at(s, i);
        if (strcmp(p->name, name) != 0) continue;
        if (!p->tied_copy) return p;
        copy = p;
    }
    return copy;
}

static int tensor_copy(stage *s, stage_buffer b, const char *name, float *out, const float *in,
                       size_t n, char *err, size_t errlen)
{
    const stage_param *p = param_of(s, name);
    if (!p) {
        snprintf(err, errlen, "%s: not a tensor of this stage", name);
        return -1;
    }
    if (n != p->numel) {
        snprintf(err, errlen, "%s: has %zu values, not %zu", name, p->numel, n);
        return -1;
    }
    float *t = buffer_of(s, b) + p->offset;
    if (out) memcpy(out, t, n * sizeof *t);
    else memcpy(t, in, n * sizeof *t);
    return 0;
}

int stage_tensor_read(stage *s, stage_buffer b, const char *name, float *out, size_t n,
                      char *err, size_t errlen)
{
    return tensor_copy(s, b, name, out, NULL, n, err, errlen);
}

int stage_tensor_write(stage *s, stage_buffer b, const char *name, const float *in, size_t n,
                       char *err, size_t errlen)
{
    return tensor_copy(s, b, name, NULL, in, n, err, errlen);
}

/* The stage's tensors of layers [begin, end), or -1 when it does not hold
 * them all. */
static int layer_params(stage *s, int begin, int end, const stage_param **out, int *n,
                        char *err, size_t errlen)
{
    int held_lo = -1, held_hi = -1;
    *n = 0;
    for (int i = 0; i < stage_param_count(s); i++) {
        const stage_param *p = stage_param_at(s, i);
        int l = stage_tensor_layer(p->name);
        if (l < 0 || p->tied_copy) continue;
        if (held_lo < 0 || l < held_lo) held_lo = l;
        if (l + 1 > held_hi) held_hi = l + 1;
        if (l >= begin && l < end) out[(*n)++] = p;
    }
    if (begin < 0 || begin >= end || held_lo < 0 || begin < held_lo || end > held_hi) {
        snprintf(err, errlen, "layers [%d, %d): this stage holds [%d, %d)", begin, end,
                 held_lo < 0 ? 0 : held_lo, held_hi < 0 ? 0 : held_hi);
        return -1;
    }
    return 0;
}

int stage_save_layers(stage *s, int begin, int end, const char *path, char *err,
                      size_t errlen)
{
    int cap = stage_param_count(s), n = 0, k = 0;
    const stage_param **ps = calloc((size_t)cap + 1, sizeof *ps);
    safetensors_entry *e = calloc(3 * (size_t)cap + 1, sizeof *e);
    char (*names)[128] = calloc(3 * (size_t)cap + 1, sizeof *names);
    int rc = -1;
    if (!ps || !e || !names) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (layer_params(s, begin, end, ps, &n, err, errlen) != 0) goto out;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < n; i++) {
            snprintf(names[k], sizeof names[k], "%s%s", moment_prefix[b], ps[i]->name);
            e[k] = (safetensors_entry){names[k], SAFETENSORS_F32, ps[i]->ndim,
                                       {ps[i]->shape[0], ps[i]->shape[1]},
                                       buffer_of(s, (stage_buffer)b) + ps[i]->offset};
            k++;
        }
    char range[48];
    snprintf(range, sizeof range, "%d,%d", begin, end);
    const char *meta[] = {"layers", range, NULL};
    rc = safetensors_write_meta(path, e, k, meta, err, errlen);
out:
    free(ps);
    free(e);
    free(names);
    return rc;
}

int stage_load_layers(stage *s, int begin, int end, const char *path, char *err,
                      size_t errlen)
{
    int cap = stage_param_count(s), n = 0;
    const stage_param **ps = calloc((size_t)cap + 1, sizeof *ps);
    safetensors_file *f = NULL;
    int rc = -1;
    if (!ps) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (layer_params(s, begin, end, ps, &n, err, errlen) != 0) goto out;
    if (safetensors_open(&f, path, err, errlen) != 0) goto out;
    char range[48];
    snprintf(range, sizeof range, "%d,%d", begin, end);
    const char *have = safetensors_metadata(f, "layers");
    if (!have || strcmp(have, range) != 0) {
        snprintf(err, errlen, "%s: holds layers %s, not [%d, %d)", path, have ? have : "(none)",
                 begin, end);
        goto out;
    }
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < n; i++) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", moment_prefix[b], ps[i]->name);
            if (safetensors_read_f32(f, name, ps[i]->ndim, ps[i]->shape,
                                     buffer_of(s, (stage_buffer)b) + ps[i]->offset, err,
                                     errlen) != 0)
                goto out;
        }
    rc = 0;
out:
    safetensors_close(f);
    free(ps);
    return rc;
}

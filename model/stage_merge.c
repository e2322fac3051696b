/* stage_merge.c — LoRA adapters merged into their base matrices, as PEFT's
 * merge_and_unload does with fp32 weights:
 *
 *   W = W0 + scaling (B A),   A [r, in], B [out, r]
 *
 * (B A is one matrix product, then multiplied by scaling, then added.)
 * Two users: `shardnode export --merge` writes the frozen base of a stage
 * with adapters, merged, as model.safetensors one tensor at a time
 * (stage_lora_write_merged: an NF4 matrix is dequantized first), and
 * `shardnode generate --adapter` merges an adapter file into a whole model
 * loaded as an ordinary stage (stage_merge_adapters). */
#include "model.h"
#include "model_util.h"

#include "kernels.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void stage_lora_adapter_name(char *buf, size_t len, int layer, int m, bool b)
{
    snprintf(buf, len, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", layer,
             m <= STAGE_LORA_O ? "self_attn" : "mlp", stage_lora_module_name(m), b ? 'B' : 'A');
}

int stage_merge_delta(float *w, const float *A, const float *B, int out, int in, int r,
                      float scaling, char *err, size_t errlen)
{
    /* delta [out, in] = B [out, r] x (A^T)^T: matmul_forward takes the
     * weight as [OC, IC] = A^T [in, r] */
    size_t nd = (size_t)out * (size_t)in;
    float *at = malloc((size_t)in * (size_t)r * sizeof *at);
    float *delta = malloc(nd * sizeof *delta);
    if (!at || !delta) {
        free(at);
        free(delta);
        return model_errf(err, errlen, "out of memory merging an adapter into a [%d, %d] "
                          "matrix", out, in);
    }
    for (int k = 0; k < r; k++)
        for (int i = 0; i < in; i++) at[(size_t)i * (size_t)r + (size_t)k] = A[(size_t)k * (size_t)in + (size_t)i];
    matmul_forward(delta, B, at, out, r, in, 0);
    for (size_t j = 0; j < nd; j++) w[j] += delta[j] * scaling;
    free(at);
    free(delta);
    return 0;
}

static const stage_param *find_param(const stage *s, const char *name)
{
    for (int i = 0; i < stage_param_count(s); i++)
        if (strcmp(stage_param_at(s, i)->name, name) == 0) return stage_param_at(s, i);
    return NULL;
}

/* The layer and module of an HF projection name
 * (model.layers.L.self_attn.q_proj.weight, ...); -1 for other tensors. */
static int projection_of(const char *name, int *layer)
{
    int l, n = 0;
    char part[16], mod[16];
    if (sscanf(name, "model.layers.%d.%15[a-z_].%15[a-z_].weight%n", &l, part, mod, &n) != 3 ||
        name[n] != 0)
        return -1;
    for (int m = 0; m < STAGE_LORA_MODULES; m++)
        if (strcmp(mod, stage_lora_module_name(m)) == 0 &&
            strcmp(part, m <= STAGE_LORA_O ? "self_attn" : "mlp") == 0) {
            *layer = l;
            return m;
        }
    return -1;
}

/* The adapter (A, B) of projection `name` in a stage whose parameters hold
 * them (a stage with adapters), or -1 when it has none (not targeted). */
static int adapter_of(stage *s, const char *name, const float **A, const float **B, int *r)
{
    int l, m = projection_of(name, &l);
    if (m < 0) return -1;
    char an[96], bn[96];
    stage_lora_adapter_name(an, sizeof an, l, m, false);
    stage_lora_adapter_name(bn, sizeof bn, l, m, true);
    const stage_param *pa = find_param(s, an), *pb = find_param(s, bn);
    if (!pa || !pb) return -1;
    *A = stage_params(s) + pa->offset;
    *B = stage_params(s) + pb->offset;
    *r = (int)pa->shape[0];
    return 0;
}

int stage_merge_adapters(stage *s, const stage_lora *lora, const safetensors_file *f,
                         char *err, size_t errlen)
{
    if (stage_lora_config(s))
        return model_errf(err, errlen, "%s: adapters merge into a stage whose base is not "
                          "frozen", safetensors_path(f));
    if (stage_lora_check(lora, err, errlen)) return -1;
    float scaling = stage_lora_scaling(lora);
    float *A = NULL, *B = NULL;
    int rc = 0;
    for (int i = 0; i < stage_param_count(s) && rc == 0; i++) {
        const stage_param *p = stage_param_at(s, i);
        int l, m = projection_of(p->name, &l);
        if (m < 0 || !(lora->modules & (1u << m))) continue;
        int out = (int)p->shape[0], in = (int)p->shape[1], r = lora->r;
        int64_t sa[2] = {r, in}, sb[2] = {out, r};
        char an[96], bn[96];
        stage_lora_adapter_name(an, sizeof an, l, m, false);
        stage_lora_adapter_name(bn, sizeof bn, l, m, true);
        free(A);
        free(B);
        A = malloc((size_t)r * (size_t)in * sizeof *A);
        B = malloc((size_t)out * (size_t)r * sizeof *B);
        if (!A || !B) {
            rc = model_errf(err, errlen, "%s: out of memory reading %s", safetensors_path(f),
                            an);
            break;
        }
        rc = safetensors_read_f32(f, an, 2, sa, A, err, errlen) ||
                     safetensors_read_f32(f, bn, 2, sb, B, err, errlen) ||
                     stage_merge_delta(stage_params(s) + p->offset, A, B, out, in, r, scaling,
                                       err, errlen)
                 ? -1
                 : 0;
    }
    free(A);
    free(B);
    return rc;
}

/* The safetensors header of the frozen base (F32, back to back in table
 * order), padded with spaces to a multiple of 8. */
static char *merged_header(const stage *s, size_t *maxn)
{
    json_t *h = json_pack("{s:{s:s}}", "__metadata__", "format", "pt");
    uint64_t off = 0;
    *maxn = 0;
    for (int i = 0; h && i < stage_frozen_count(s); i++) {
        const stage_param *p = stage_frozen_at(s, i);
        json_t *shape = p->ndim == 2
                            ? json_pack("[I,I]", (json_int_t)p->shape[0], (json_int_t)p->shape[1])
                            : json_pack("[I]", (json_int_t)p->shape[0]);
        json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape", shape,
                              "data_offsets", (json_int_t)off,
                              (json_int_t)(off + 4 * p->numel));
        if (!e || json_object_set_new(h, p->name, e)) {
            json_decref(h);
            return NULL;
        }
        off += 4 * p->numel;
        if (p->numel > *maxn) *maxn = p->numel;
    }
    char *text = h ? json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(h);
    if (!text) return NULL;
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    char *p = realloc(text, padded + 1);
    if (!p) {
        free(text);
        return NULL;
    }
    memset(p + len, ' ', padded - len);
    p[padded] = 0;
    return p;
}

int stage_lora_write_merged(stage *s, const char *path, uint64_t *params, char *err,
                            size_t errlen)
{
    const stage_lora *lora = stage_lora_config(s);
    if (!lora)
        return model_errf(err, errlen, "%s: the stage has no adapters to merge", path);
    float scaling = stage_lora_scaling(lora);
    size_t maxn = 0;
    char *hdr = merged_header(s, &maxn);
    float *buf = hdr ? malloc((maxn ? maxn : 1) * sizeof *buf) : NULL;
    atomic_file af;
    int rc = -1;
    if (params) *params = 0;
    if (!buf) {
        model_errf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (atomic_file_begin(&af, path, err, errlen)) goto out;
    size_t hlen = strlen(hdr);
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    atomic_file_write(&af, prefix, 8);
    atomic_file_write(&af, hdr, hlen);
    for (int i = 0; i < stage_frozen_count(s); i++) {
        const stage_param *p = stage_frozen_at(s, i);
        const float *A, *B;
        int r;
        if (stage_frozen_read(s, i, buf, p->numel, err, errlen) ||
            (adapter_of(s, p->name, &A, &B, &r) == 0 &&
             stage_merge_delta(buf, A, B, (int)p->shape[0], (int)p->shape[1], r, scaling, err,
                               errlen))) {
            atomic_file_abort(&af);
            goto out;
        }
        atomic_file_write(&af, buf, p->numel * sizeof *buf);
        if (params) *params += p->numel;
    }
    rc = atomic_file_commit(&af, err, errlen);
out:
    free(hdr);
    free(buf);
    return rc;
}

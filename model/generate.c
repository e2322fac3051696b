/* generate.c — incremental decoding of one sequence with a KV cache.
 *
 * A push runs one token (N = 1 row) through the same kernels a stage uses,
 * reading the weights in place from a stage that holds the whole model, and
 * keeps each layer's rotated keys and values so that position t attends to
 * [0, t] without recomputing the prefix. Shapes as in kernels.h; per layer
 * the caches are [max_len, KVD], KVD = NKV * HD. Everything is carved from
 * one allocation made by generator_create; a push allocates nothing. */
#include "model.h"
#include "model_util.h"

#include "kernels.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const float *ln1, *wqkv, *wo, *ln2, *wgu, *wdown;
    float *kcache, *vcache;   /* [max_len, KVD] */
} gen_layer;

struct generator {
    llama_config cfg;
    int C, F, V, NH, NKV, HD, KVD, QKV, L;
    int max_len, pos;
    gen_layer *layers;        /* [L] */
    const float *wte, *lnf, *head;

    float *arena;
    float *x;                 /* [C] residual stream */
    float *xn;                /* [C] normalised input of a sublayer */
    float *qkv;               /* [QKV] */
    float *atty;              /* [C] attention output before o_proj */
    float *gu;                /* [2F] */
    float *h;                 /* [F] */
    float *logits;            /* [V] */
    float *scores;            /* [NH, max_len]: one row per head, so heads run in parallel */
    float *rope_cos, *rope_sin; /* [max_len, HD/2] */
    float rstd;               /* rmsnorm_forward writes one; nothing reads it */
};

/* The parameter `name` of the stage, checked to have numel floats, so a
 * stage built from another config is refused instead of read out of bounds. */
static const stage_param *find_param(stage *s, const char *name, size_t numel, char *err,
                                     size_t errlen)
{
    for (int i = 0; i < stage_param_count(s); i++) {
        const stage_param *p = stage_param_at(s, i);
        if (strcmp(p->name, name) != 0) continue;
        if (p->numel != numel) {
            model_errf(err, errlen, "generator: stage tensor %s has %zu values, the config says %zu",
                 name, p->numel, numel);
            return NULL;
        }
        return p;
    }
    model_errf(err, errlen, "generator: the stage has no tensor %s (it must hold the whole model)",
         name);
    return NULL;
}

/* Looks up the parts of a fused projection and checks they are adjacent in
 * the buffer, which is what lets one matmul compute all of them. */
static const float *fused_param(stage *s, int layer, const char *const *parts, int nparts,
                                const size_t *numel, char *err, size_t errlen)
{
    const stage_param *prev = NULL, *first = NULL;
    char name[80];
    for (int i = 0; i < nparts; i++) {
        snprintf(name, sizeof name, "model.layers.%d.%s", layer, parts[i]);
        const stage_param *p = find_param(s, name, numel[i], err, errlen);
        if (!p) return NULL;
        if (prev && prev->offset + prev->numel != p->offset) {
            model_errf(err, errlen, "generator: stage tensor %s does not follow %s in the buffer",
                 name, prev->name);
            return NULL;
        }
        if (!first) first = p;
        prev = p;
    }
    return stage_params(s) + first->offset;
}

static const float *plain_param(stage *s, int layer, const char *part, size_t numel,
                                char *err, size_t errlen)
{
    char name[80];
    if (layer >= 0)
        snprintf(name, sizeof name, "model.layers.%d.%s", layer, part);
    else
        snprintf(name, sizeof name, "%s", part);
    const stage_param *p = find_param(s, name, numel, err, errlen);
    return p ? stage_params(s) + p->offset : NULL;
}

static float *alloc_floats(size_t n)
{
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes);
    return p;
}

/* Carves every buffer from base; with base == NULL only counts. */
static size_t gen_layout(generator *g, float *base)
{
    size_t used = 0;
    size_t KV = (size_t)g->max_len * g->KVD;
#define CARVE(ptr, n)                                                     \
    do {                                                                  \
        if (base) (ptr) = base + used;                                    \
        used += ((size_t)(n) + 15) & ~(size_t)15; /* 64-byte aligned */   \
    } while (0)
    for (int l = 0; l < g->L; l++) {
        CARVE(g->layers[l].kcache, KV);
        CARVE(g->layers[l].vcache, KV);
    }
    CARVE(g->x, g->C);
    CARVE(g->xn, g->C);
    CARVE(g->qkv, g->QKV);
    CARVE(g->atty, g->C);
    CARVE(g->gu, 2 * (size_t)g->F);
    CARVE(g->h, g->F);
    CARVE(g->logits, g->V);
    CARVE(g->scores, (size_t)g->NH * g->max_len);
    CARVE(g->rope_cos, (size_t)g->max_len * g->HD / 2);
    CARVE(g->rope_sin, (size_t)g->max_len * g->HD / 2);
#undef CARVE
    return used;
}

int generator_create(generator **out, const llama_config *cfg, stage *s, int max_len,
                     char *err, size_t errlen)
{
    *out = NULL;
    /* A config that never went through llama_config_load (tests, callers
     * that build one) could divide by zero heads below. */
    llama_config checked = *cfg;
    if (llama_config_validate(&checked, "generator", err, errlen)) return -1;
    cfg = &checked;
    if (!stage_is_first(s) || !stage_is_last(s))
        return model_errf(err, errlen, "generator: the stage must hold the whole model "
                                 "(embedding, every layer and the head)");
    if (max_len < 1 || max_len > cfg->max_position_embeddings)
        return model_errf(err, errlen, "generator: max_len %d is outside [1, %d] "
                                 "(max_position_embeddings)",
                    max_len, cfg->max_position_embeddings);

    generator *g = calloc(1, sizeof *g);
    if (!g) return model_errf(err, errlen, "generator: out of memory");
    g->cfg = *cfg;
    g->C = cfg->hidden_size;
    g->F = cfg->intermediate_size;
    g->V = cfg->vocab_size;
    g->NH = cfg->num_attention_heads;
    g->NKV = cfg->num_key_value_heads;
    g->HD = cfg->head_dim;
    g->KVD = g->NKV * g->HD;
    g->QKV = (g->NH + 2 * g->NKV) * g->HD;
    g->L = cfg->num_hidden_layers;
    g->max_len = max_len;
    g->layers = calloc((size_t)g->L + 1, sizeof *g->layers);
    if (!g->layers) goto oom;

    /* Every tensor is looked up by name and size, and the count must match
     * too: a stage with more layers than cfg says would otherwise pass. */
    size_t C = (size_t)g->C, F = (size_t)g->F, V = (size_t)g->V, KVD = (size_t)g->KVD;
    int expected = 9 * g->L + 2 + (cfg->tie_word_embeddings ? 0 : 1);
    if (stage_param_count(s) != expected) {
        model_errf(err, errlen, "generator: the stage has %d tensors, a whole model of this config "
                          "has %d", stage_param_count(s), expected);
        goto out_err;
    }
    static const char *const qkv_parts[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                            "self_attn.v_proj.weight"};
    static const char *const gu_parts[] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
    const size_t qkv_numel[] = {C * C, KVD * C, KVD * C}, gu_numel[] = {F * C, F * C};
    for (int l = 0; l < g->L; l++) {
        gen_layer *w = &g->layers[l];
        if (!(w->ln1 = plain_param(s, l, "input_layernorm.weight", C, err, errlen)) ||
            !(w->wqkv = fused_param(s, l, qkv_parts, 3, qkv_numel, err, errlen)) ||
            !(w->wo = plain_param(s, l, "self_attn.o_proj.weight", C * C, err, errlen)) ||
            !(w->ln2 = plain_param(s, l, "post_attention_layernorm.weight", C, err, errlen)) ||
            !(w->wgu = fused_param(s, l, gu_parts, 2, gu_numel, err, errlen)) ||
            !(w->wdown = plain_param(s, l, "mlp.down_proj.weight", C * F, err, errlen)))
            goto out_err;
    }
    if (!(g->wte = plain_param(s, -1, "model.embed_tokens.weight", V * C, err, errlen)) ||
        !(g->lnf = plain_param(s, -1, "model.norm.weight", C, err, errlen)))
        goto out_err;
    g->head = cfg->tie_word_embeddings
                  ? g->wte
                  : plain_param(s, -1, "lm_head.weight", V * C, err, errlen);
    if (!g->head) goto out_err;

    g->arena = alloc_floats(gen_layout(g, NULL));
    if (!g->arena) goto oom;
    gen_layout(g, g->arena);
    /* Same tables as a stage of T = max_len, so position t rotates exactly
     * as row t of a training sequence does. */
    if (llama_rope_tables(cfg, g->rope_cos, g->rope_sin, max_len)) goto oom;
    *out = g;
    return 0;
oom:
    model_errf(err, errlen, "generator: out of memory for a KV cache of %d positions", max_len);
out_err:
    generator_free(g);
    return -1;
}

void generator_free(generator *g)
{
    if (!g) return;
    free(g->arena);
    free(g->layers);
    free(g);
}

int generator_length(const generator *g) { return g->pos; }

void generator_reset(generator *g) { g->pos = 0; }

int generator_push(generator *g, int32_t token, const float **logits, char *err,
                   size_t errlen)
{
    if (token < 0 || token >= g->V)
        return model_errf(err, errlen, "generator: token %d is outside the vocabulary [0, %d)", token,
                    g->V);
    if (g->pos >= g->max_len)
        return model_errf(err, errlen, "generator: the sequence is full (%d tokens, its max_len)",
                    g->max_len);
    int C = g->C, F = g->F, NH = g->NH, NKV = g->NKV, HD = g->HD, KVD = g->KVD, QKV = g->QKV;
    int pos = g->pos;
    float eps = g->cfg.rms_norm_eps;
    /* Row `pos` of the tables; with T = 1 rope_forward reads row 0 of the
     * offset pointers. */
    const float *cs = g->rope_cos + (size_t)pos * (HD / 2);
    const float *sn = g->rope_sin + (size_t)pos * (HD / 2);

    memcpy(g->x, g->wte + (size_t)token * C, (size_t)C * sizeof(float));
    for (int l = 0; l < g->L; l++) {
        gen_layer *w = &g->layers[l];
        /* attention: x += o(attn(rope(qkv(rmsnorm(x))))) */
        rmsnorm_forward(g->xn, &g->rstd, g->x, w->ln1, 1, C, eps);
        matmul_forward(g->qkv, g->xn, w->wqkv, 1, C, QKV, 0);
        rope_forward(g->qkv, cs, sn, 1, 1, NH, HD, QKV);
        rope_forward(g->qkv + (size_t)NH * HD, cs, sn, 1, 1, NKV, HD, QKV);
        memcpy(w->kcache + (size_t)pos * KVD, g->qkv + (size_t)NH * HD,
               (size_t)KVD * sizeof(float));
        memcpy(w->vcache + (size_t)pos * KVD, g->qkv + (size_t)(NH + NKV) * HD,
               (size_t)KVD * sizeof(float));
        attention_decode(g->atty, g->qkv, w->kcache, w->vcache, pos + 1, KVD, NH, NKV, HD,
                         g->scores, g->max_len);
        matmul_forward(g->x, g->atty, w->wo, 1, C, C, 1);
        /* MLP: x += down(swiglu(gate_up(rmsnorm(x)))) */
        rmsnorm_forward(g->xn, &g->rstd, g->x, w->ln2, 1, C, eps);
        matmul_forward(g->gu, g->xn, w->wgu, 1, C, 2 * F, 0);
        swiglu_forward(g->h, g->gu, 1, F);
        matmul_forward(g->x, g->h, w->wdown, 1, F, C, 1);
    }
    rmsnorm_forward(g->xn, &g->rstd, g->x, g->lnf, 1, C, eps);
    matmul_forward(g->logits, g->xn, g->head, 1, C, g->V, 0);
    g->pos++;
    *logits = g->logits;
    return 0;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int32_t generator_sample(const float *logits, int V, float temperature, uint64_t *rng_state)
{
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;   /* strict: the lowest id wins ties */
    if (!(temperature > 0.0f)) return best;

    /* Two passes over exp((l - max) / T) in double instead of a buffer of
     * probabilities: sampling allocates nothing and the logits stay const. */
    double mx = logits[best], inv_t = 1.0 / (double)temperature, sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp(((double)logits[i] - mx) * inv_t);
    double u = (double)(splitmix64(rng_state) >> 11) * 0x1.0p-53 * sum, acc = 0.0;
    int32_t last = best;
    for (int i = 0; i < V; i++) {
        double p = exp(((double)logits[i] - mx) * inv_t);
        if (p <= 0.0) continue;
        acc += p;
        last = i;
        if (u < acc) return i;
    }
    /* rounding left u at the very top: the last id with any probability */
    return last;
}

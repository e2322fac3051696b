/* stage.c — a contiguous slice of the LLaMA model: [embedding] + layers
 * [a, b) + [final norm, head, loss], forward and backward of micro-batches.
 *
 * Shapes (see kernels.h): N = B*T rows, C hidden, F intermediate, V vocab,
 * QKV = (NH + 2*NKV) * HD per row of the fused q/k/v projection.
 * Parameters live in one flat buffer laid out by the table of HF tensors;
 * q/k/v and gate/up are adjacent there, so each pair or triple is one GEMM.
 * Activations live in one arena carved once by stage_layout. */
#include "model_util.h"
#include "stage_internal.h"

#include "kernels.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- parameter table ------------------------------------------------------ */

void stage_table_add(stage *s, const char *name, int64_t d0, int64_t d1)
{
    stage_param *p = &s->table[s->ntable++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = d1 ? 2 : 1;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    p->offset = s->nparams;
    p->decay = d1 != 0;
    p->tied_copy = false;
    s->nparams += p->numel;
}

/* The order here is the buffer order: q,k,v and gate,up must stay adjacent. */
void stage_build_table(stage *s)
{
    const llama_config *c = &s->cfg;
    int C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    int KVD = c->num_key_value_heads * c->head_dim;
    char name[80];
    if (s->first) stage_table_add(s, "model.embed_tokens.weight", V, C);
    for (int l = s->l0; l < s->l1; l++) {
        static const struct { const char *suffix; int kind; } parts[] = {
            {"input_layernorm.weight", 0}, {"self_attn.q_proj.weight", 1},
            {"self_attn.k_proj.weight", 2}, {"self_attn.v_proj.weight", 2},
            {"self_attn.o_proj.weight", 1}, {"post_attention_layernorm.weight", 0},
            {"mlp.gate_proj.weight", 3}, {"mlp.up_proj.weight", 3}, {"mlp.down_proj.weight", 4},
        };
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, parts[i].suffix);
            switch (parts[i].kind) {
            case 0: stage_table_add(s, name, C, 0); break;
            case 1: stage_table_add(s, name, C, C); break;
            case 2: stage_table_add(s, name, KVD, C); break;
            case 3: stage_table_add(s, name, F, C); break;
            default: stage_table_add(s, name, C, F); break;
            }
        }
    }
    if (s->last) {
        stage_table_add(s, "model.norm.weight", C, 0);
        if (!c->tie_word_embeddings) {
            stage_table_add(s, "lm_head.weight", V, C);
        } else if (!s->first) {
            stage_table_add(s, "model.embed_tokens.weight", V, C);
            s->table[s->ntable - 1].tied_copy = true;
        }
    }
}

/* Points the per-layer views of one flat buffer (params or grads). */
static void bind_views(stage *s, float *base, layer_weights *lw, float **wte, float **lnf,
                       float **head)
{
    int k = 0;
    *wte = *lnf = *head = NULL;
    if (s->first) *wte = base + s->table[k++].offset;
    for (int l = 0; l < s->nl; l++, k += 9) {
        lw[l].ln1 = base + s->table[k].offset;
        lw[l].wqkv = base + s->table[k + 1].offset;
        lw[l].wo = base + s->table[k + 4].offset;
        lw[l].ln2 = base + s->table[k + 5].offset;
        lw[l].wgu = base + s->table[k + 6].offset;
        lw[l].wdown = base + s->table[k + 8].offset;
    }
    if (s->last) {
        *lnf = base + s->table[k++].offset;
        *head = k < s->ntable ? base + s->table[k].offset : *wte;
    }
}

/* ---- activation arena ------------------------------------------------------ */

/* Carves every activation buffer from base; with base == NULL only counts
 * (and touches no pointer of s, so a stage not yet allocated can be
 * measured). Returns the number of floats needed; *total (if given) gets the
 * same count as a double, which cannot overflow for absurd sizes. One table
 * of sizes, one allocation. */
static size_t stage_layout(stage *s, float *base, double *total)
{
    size_t used = 0;
    double sum = 0;
    const llama_config *c = &s->cfg;
    size_t N = (size_t)s->N, C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t V = (size_t)c->vocab_size, TT = (size_t)s->T * s->T;
#define CARVE(ptr, n)                                                     \
    do {                                                                  \
        if (base) (ptr) = base + used;                                    \
        used += ((size_t)(n) + 15) & ~(size_t)15; /* 64-byte aligned */   \
        sum += (double)(n) + 15;                                          \
    } while (0)
    for (int k = 0; k < s->nslots; k++) {
    slot_acts *sl = base ? &s->slots[k] : NULL;
    for (int l = 0; l < s->nl; l++) {
        layer_acts *a = base ? &sl->acts[l] : NULL;
        CARVE(a->res_in, N * C);
        CARVE(a->ln1, N * C);
        CARVE(a->rstd1, N);
        CARVE(a->qkv, N * s->QKV);
        CARVE(a->att, (size_t)s->B * c->num_attention_heads * TT);
        CARVE(a->atty, N * C);
        CARVE(a->mid, N * C);
        CARVE(a->ln2, N * C);
        CARVE(a->rstd2, N);
        CARVE(a->gu, N * 2 * F);
        CARVE(a->h, N * F);
    }
    CARVE(sl->out, N * C);
    if (s->last) {
        CARVE(sl->lnf_out, N * C);
        CARVE(sl->rstdf, N);
        CARVE(sl->logits, N * V);
        CARVE(sl->losses, N);
    }
    }
    CARVE(s->dres, N * C);
    CARVE(s->dln, N * C);
    if (s->nl > 0) {
        CARVE(s->dqkv, N * s->QKV);
        CARVE(s->datty, N * C);
        CARVE(s->dgu, N * 2 * F);
        CARVE(s->dh, N * F);
            CARVE(s->att_scratch, kdev_attention_scratch_floats(s->dev, s->B, s->T,
                                                            c->num_attention_heads,
                                                            c->head_dim));
    }
    CARVE(s->rope_cos, (size_t)s->T * c->head_dim / 2);
    CARVE(s->rope_sin, (size_t)s->T * c->head_dim / 2);
#undef CARVE
    if (total) *total = sum;
    return used;
}

float *stage_alloc_floats(size_t n)
{
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes);
    return p;
}

int stage_threads(void) { return kernels_thread_slots(); }

/* n floats of the stage's device, zeroed, 64-byte aligned as
 * stage_alloc_floats (the CPU device's allocation is the same). */
static float *dev_floats(stage *s, size_t n)
{
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    if (!bytes) bytes = 64;
    float *p = kdev_alloc(s->dev, bytes);
    if (p) kdev_zero(s->dev, p, bytes / sizeof(float));
    return p;
}

double stage_act_bytes(const llama_config *cfg, int layer_begin, int layer_end, bool first,
                       bool last, int B, int T, int slots)
{
    (void)first;
    double nl = layer_end > layer_begin ? layer_end - layer_begin : 0;
    /* the table, the slots' ids and labels, and every activation (stage_layout) */
    double bytes = (nl * 9 + 3) * sizeof(stage_param);
    bytes += (double)slots * ((double)B * T * 2 * sizeof(int32_t) + (nl + 1) * sizeof(layer_acts));
    stage probe;
    memset(&probe, 0, sizeof probe);
    probe.cfg = *cfg;
    probe.nl = (int)nl;
    probe.last = last;
    probe.B = B;
    probe.T = T;
    /* N and QKV only feed products below; the double total is exact enough
     * even where the int fields would overflow, so they are clamped. */
    double N = (double)B * T;
    probe.N = N > 1e9 ? 1000000000 : (int)N;
    probe.QKV = (cfg->num_attention_heads + 2 * cfg->num_key_value_heads) * cfg->head_dim;
    probe.nslots = slots;
    probe.nscratch = stage_threads();
    probe.dev = kdev_cpu(); /* estimated with the CPU's attention scratch */
    double acts;
    stage_layout(&probe, NULL, &acts);
    if (N > 1e9) acts *= N / 1e9;
    return bytes + acts * sizeof(float);
}

double stage_memory_bytes(const llama_config *cfg, int layer_begin, int layer_end, bool first,
                          bool last, int B, int T, int slots)
{
    double C = cfg->hidden_size, F = cfg->intermediate_size, V = cfg->vocab_size;
    double KVD = (double)cfg->num_key_value_heads * cfg->head_dim;
    double nl = layer_end > layer_begin ? layer_end - layer_begin : 0;
    /* The parameter table (build_table), each tensor 64-byte aligned. */
    double params = nl * (2 * C + 2 * C * C + 2 * KVD * C + 3 * F * C);
    if (first) params += V * C;
    if (last) params += C + (cfg->tie_word_embeddings && first ? 0 : V * C);
    /* params, grads and two moments; a tied head kept apart */
    double bytes = 4 * params * sizeof(float);
    if (first && last && cfg->tie_word_embeddings) bytes += V * C * sizeof(float);
    return bytes + stage_act_bytes(cfg, layer_begin, layer_end, first, last, B, T, slots);
}

/* Physical memory of this machine in bytes, or 0 if the system does not say. */
static double machine_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * size : 0;
}

static void bytes_text(double b, char *out, size_t len)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (b >= 1024 && u < 6) {
        b /= 1024;
        u++;
    }
    if (u >= 6 && b >= 1024)
        snprintf(out, len, "%.3g EiB", b);
    else
        snprintf(out, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

int stage_create(stage **out, const llama_config *cfg, int layer_begin, int layer_end,
                 bool first, bool last, int B, int T, int slots, char *err, size_t errlen)
{
    return stage_create_lora(out, cfg, layer_begin, layer_end, first, last, B, T, slots, NULL,
                             err, errlen);
}

int stage_create_lora(stage **out, const llama_config *cfg, int layer_begin, int layer_end,
                      bool first, bool last, int B, int T, int slots, const stage_lora *lora,
                      char *err, size_t errlen)
{
    return stage_create_on(out, cfg, layer_begin, layer_end, first, last, B, T, slots, lora,
                           NULL, err, errlen);
}

int stage_create_on(stage **out, const llama_config *cfg, int layer_begin, int layer_end,
                    bool first, bool last, int B, int T, int slots, const stage_lora *lora,
                    kdev *dev, char *err, size_t errlen)
{
    *out = NULL;
    if (!dev) dev = kdev_cpu();
    if (lora && !kdev_is_host(dev))
        return model_errf(err, errlen,
                          "a LoRA stage computes on the CPU only in this version, not on %s",
                          kdev_name(dev));
    int L = cfg->num_hidden_layers;
    if (layer_begin < 0 || layer_end > L || layer_begin > layer_end)
        return model_errf(err, errlen, "stage layers [%d, %d) are not inside the model's %d layers",
                    layer_begin, layer_end, L);
    if ((first && layer_begin != 0) || (last && layer_end != L))
        return model_errf(err, errlen, "stage layers [%d, %d) cannot hold the %s", layer_begin,
                    layer_end, first && layer_begin != 0 ? "embedding" : "head");
    if (!first && !last && layer_begin == layer_end)
        return model_errf(err, errlen, "stage layers [%d, %d) hold nothing", layer_begin, layer_end);
    if (slots < 1 || slots > 1024)
        return model_errf(err, errlen, "a stage needs 1 to 1024 micro-batch slots, not %d", slots);
    if (B < 1 || T < 1)
        return model_errf(err, errlen, "micro-batch shape [%d, %d] must be positive", B, T);
    if (T > cfg->max_position_embeddings)
        return model_errf(err, errlen, "sequence length %d exceeds max_position_embeddings %d", T,
                    cfg->max_position_embeddings);
    if ((double)B * T > 1e9 || (double)B * T * cfg->vocab_size > 4e12)
        return model_errf(err, errlen, "micro-batch [%d, %d] is too large", B, T);
    /* What the stage will allocate, before any of it is: an absurd config
     * (a million layers, sequences of 65536 in micro-batches of 64) is
     * refused with the figure instead of failing somewhere in the middle. */
    if (lora && stage_lora_check(lora, err, errlen)) return -1;
    double need = stage_lora_memory_bytes(cfg, layer_begin, layer_end, first, last, B, T,
                                          slots, lora);
    double have = kdev_is_host(dev) ? machine_memory() : (double)kdev_get_info(dev)->mem_free;
    if ((have > 0 && need > have) || need > 0x1p62) {
        char needs[32], has[32];
        bytes_text(need, needs, sizeof needs);
        bytes_text(have, has, sizeof has);
        return model_errf(err, errlen,
                          "a stage of layers [%d, %d) at micro-batch [%d, %d] needs %s "
                          "(weights, gradients, AdamW moments and activations), more than "
                          "%s's %s of %smemory",
                          layer_begin, layer_end, B, T, needs,
                          kdev_is_host(dev) ? "this machine" : kdev_name(dev), has,
                          kdev_is_host(dev) ? "" : "free ");
    }

    stage *s = calloc(1, sizeof *s);
    if (!s) return model_errf(err, errlen, "out of memory for the stage");
    s->cfg = *cfg;
    s->dev = dev;
    s->host = kdev_is_host(dev);
    s->l0 = layer_begin;
    s->l1 = layer_end;
    s->nl = layer_end - layer_begin;
    s->first = first;
    s->last = last;
    s->B = B;
    s->T = T;
    s->N = B * T;
    s->QKV = (cfg->num_attention_heads + 2 * cfg->num_key_value_heads) * cfg->head_dim;
    s->nscratch = stage_threads();

    s->table = calloc((size_t)s->nl * 9 + 3, sizeof *s->table);
    s->w = calloc((size_t)s->nl + 1, sizeof *s->w);
    s->dw = calloc((size_t)s->nl + 1, sizeof *s->dw);
    s->nslots = slots;
    s->slots = calloc((size_t)slots, sizeof *s->slots);
    if (!s->table || !s->w || !s->dw || !s->slots) goto oom;
    s->h_out = calloc((size_t)slots, sizeof *s->h_out);
    s->h_losses = calloc((size_t)slots, sizeof *s->h_losses);
    if (!s->h_out || !s->h_losses) goto oom;
    for (int k = 0; k < slots; k++) {
        slot_acts *sl = &s->slots[k];
        sl->acts = calloc((size_t)s->nl + 1, sizeof *sl->acts);
        /* int32 ids and labels in the device's memory (zero bits are 0) */
        sl->ids = (int32_t *)dev_floats(s, (size_t)s->N);
        sl->labels = (int32_t *)dev_floats(s, (size_t)s->N);
        if (!sl->acts || !sl->ids || !sl->labels) goto oom;
    }
    stage_build_table(s);
    if (lora && stage_lora_setup(s, lora, err, errlen)) {
        stage_free(s);
        return -1;
    }
    s->params = dev_floats(s, s->nparams);
    s->grads = dev_floats(s, s->nparams);
    s->m = dev_floats(s, s->nparams);
    s->v = dev_floats(s, s->nparams);
    s->arena = dev_floats(s, stage_layout(s, NULL, NULL));
    if (!s->params || !s->grads || !s->m || !s->v || !s->arena) goto oom;
    stage_layout(s, s->arena, NULL);
    if (s->host) {
        s->h_params = s->params, s->h_grads = s->grads, s->h_m = s->m, s->h_v = s->v;
        s->h_dres = s->dres;
        for (int k = 0; k < slots; k++) {
            s->h_out[k] = s->slots[k].out;
            s->h_losses[k] = s->slots[k].losses;
        }
    } else {
        s->h_params = stage_alloc_floats(s->nparams);
        s->h_grads = stage_alloc_floats(s->nparams);
        s->h_m = stage_alloc_floats(s->nparams);
        s->h_v = stage_alloc_floats(s->nparams);
        s->h_dres = kdev_host_alloc(dev, (size_t)s->N * cfg->hidden_size * sizeof(float));
        if (!s->h_params || !s->h_grads || !s->h_m || !s->h_v || !s->h_dres) goto oom;
        for (int k = 0; k < slots; k++) {
            s->h_out[k] = kdev_host_alloc(dev, (size_t)s->N * cfg->hidden_size * sizeof(float));
            if (!s->h_out[k]) goto oom;
            if (last) {
                s->h_losses[k] = kdev_host_alloc(dev, (size_t)s->N * sizeof(float));
                if (!s->h_losses[k]) goto oom;
            }
        }
    }
    if (lora) stage_lora_bind(s);
    if (!lora) {
        bind_views(s, s->params, s->w, &s->wte, &s->lnf, &s->head);
        bind_views(s, s->grads, s->dw, &s->dwte, &s->dlnf, &s->dhead);
    }
    if (!lora && first && last && cfg->tie_word_embeddings) {
        s->dhead_apart = dev_floats(s, (size_t)cfg->vocab_size * cfg->hidden_size);
        if (!s->dhead_apart) goto oom;
        s->dhead = s->dhead_apart;
    }
    if (s->host) {
        if (llama_rope_tables(cfg, s->rope_cos, s->rope_sin, T)) goto oom;
    } else {
        size_t nt = (size_t)T * cfg->head_dim / 2;
        float *tab = stage_alloc_floats(2 * nt);
        int bad = !tab || llama_rope_tables(cfg, tab, tab + nt, T) ||
                  kdev_to_device(dev, s->rope_cos, tab, nt * sizeof(float)) ||
                  kdev_to_device(dev, s->rope_sin, tab + nt, nt * sizeof(float)) ||
                  kdev_sync(dev, err, errlen);
        free(tab);
        if (bad) goto oom;
    }
    *out = s;
    return 0;
oom:
    stage_free(s);
    return model_errf(err, errlen, "out of memory for a stage of layers [%d, %d) at micro-batch [%d, %d]",
                layer_begin, layer_end, B, T);
}

void stage_free(stage *s)
{
    if (!s) return;
    free(s->table);
    free(s->w);
    free(s->dw);
    for (int k = 0; s->slots && k < s->nslots; k++) {
        free(s->slots[k].acts);
        kdev_free(s->dev, s->slots[k].ids);
        kdev_free(s->dev, s->slots[k].labels);
        if (!s->host && s->h_out) kdev_host_free(s->dev, s->h_out[k]);
        if (!s->host && s->h_losses) kdev_host_free(s->dev, s->h_losses[k]);
    }
    if (!s->host) {
        free(s->h_params);
        free(s->h_grads);
        free(s->h_m);
        free(s->h_v);
        kdev_host_free(s->dev, s->h_dres);
    }
    free(s->h_out);
    free(s->h_losses);
    free(s->slots);
    kdev_free(s->dev, s->params);
    kdev_free(s->dev, s->grads);
    kdev_free(s->dev, s->m);
    kdev_free(s->dev, s->v);
    kdev_free(s->dev, s->arena);
    kdev_free(s->dev, s->dhead_apart);
    stage_lora_free(s);
    free(s);
}

bool stage_is_first(const stage *s) { return s->first; }
bool stage_is_last(const stage *s) { return s->last; }
int stage_param_count(const stage *s) { return s->ntable; }
const stage_param *stage_param_at(const stage *s, int i) { return &s->table[i]; }
float *stage_params(stage *s) { return s->h_params; }
float *stage_grads(stage *s) { return s->h_grads; }
float *stage_moment1(stage *s) { return s->h_m; }
float *stage_moment2(stage *s) { return s->h_v; }
size_t stage_num_params(const stage *s) { return s->nparams; }
const float *stage_output(const stage *s, int slot) { return s->h_out[slot]; }
int stage_slots(const stage *s) { return s->nslots; }
const float *stage_input_grad(const stage *s) { return s->h_dres; }
float *stage_param_data(stage *s, const char *name)
{
    for (int i = 0; i < s->ntable; i++)
        if (strcmp(s->table[i].name, name) == 0) return s->h_params + s->table[i].offset;
    return NULL;
}

const float *stage_token_losses(const stage *s, int slot) { return s->h_losses[slot]; }

kdev *stage_device(const stage *s) { return s->dev; }

/* The four parameter-sized buffers between the device and their host
 * copies: to_host 1 pulls, 0 pushes. */
static int stage_move(stage *s, int to_host, char *err, size_t errlen)
{
    if (s->host) return 0;
    float *d[4] = {s->params, s->grads, s->m, s->v};
    float *h[4] = {s->h_params, s->h_grads, s->h_m, s->h_v};
    size_t bytes = s->nparams * sizeof(float);
    for (int i = 0; i < 4; i++)
        if ((to_host ? kdev_to_host(s->dev, h[i], d[i], bytes)
                     : kdev_to_device(s->dev, d[i], h[i], bytes)) != KDEV_OK)
            break;
    return kdev_sync(s->dev, err, errlen) == KDEV_OK ? 0 : -1;
}

int stage_pull(stage *s, char *err, size_t errlen) { return stage_move(s, 1, err, errlen); }
int stage_push(stage *s, char *err, size_t errlen) { return stage_move(s, 0, err, errlen); }

void stage_zero_grads(stage *s)
{
    kdev_zero(s->dev, s->grads, s->nparams);
    if (s->lora) stage_lora_zero(s);
    if (s->dhead_apart)
        kdev_zero(s->dev, s->dhead_apart, (size_t)s->cfg.vocab_size * s->cfg.hidden_size);
}

void stage_sum_tied_grads(stage *s)
{
    if (!s->dhead_apart) return;
    size_t n = (size_t)s->cfg.vocab_size * s->cfg.hidden_size;
    kdev_add(s->dev, s->dwte, s->dhead_apart, n);
    kdev_zero(s->dev, s->dhead_apart, n);
}

/* ---- initialisation and loading ------------------------------------------- */

uint64_t stage_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t stage_fnv1a(const char *str)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *str; str++) h = (h ^ (uint8_t)*str) * 0x100000001b3ull;
    return h;
}

void stage_fill_init(float *x, size_t numel, int ndim, const char *name, uint64_t seed)
{
    if (ndim == 1) {
        for (size_t j = 0; j < numel; j++) x[j] = 1.0f;
        return;
    }
    uint64_t state = seed ^ stage_fnv1a(name);
    for (size_t j = 0; j < numel; j += 2) { /* Box-Muller, two at a time */
        double u1 = ((double)(stage_splitmix64(&state) >> 11) + 1.0) * 0x1.0p-53;
        double u2 = (double)(stage_splitmix64(&state) >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1)) * 0.02;
        x[j] = (float)(r * cos(6.283185307179586 * u2));
        if (j + 1 < numel) x[j + 1] = (float)(r * sin(6.283185307179586 * u2));
    }
}

void stage_init_weights(stage *s, uint64_t seed)
{
    if (s->lora) {
        stage_lora_init(s, seed);
        return;
    }
    for (int i = 0; i < s->ntable; i++) {
        const stage_param *p = &s->table[i];
        stage_fill_init(s->h_params + p->offset, p->numel, p->ndim, p->name, seed);
    }
    if (!s->host) /* an error here comes back from the next sync */
        kdev_to_device(s->dev, s->params, s->h_params, s->nparams * sizeof(float));
}

int stage_load_weights(stage *s, const safetensors_file *f, char *err, size_t errlen)
{
    if (s->lora) return stage_lora_load(s, f, err, errlen);
    for (int i = 0; i < s->ntable; i++) {
        const stage_param *p = &s->table[i];
        if (safetensors_read_f32(f, p->name, p->ndim, p->shape, s->h_params + p->offset, err,
                                 errlen))
            return -1;
    }
    if (!s->host &&
        (kdev_to_device(s->dev, s->params, s->h_params, s->nparams * sizeof(float)) != KDEV_OK ||
         kdev_sync(s->dev, err, errlen) != KDEV_OK))
        return -1;
    return 0;
}

/* ---- forward ---------------------------------------------------------------- */

/* The layer's products: out (=|+=) inp W^T; with adapters, through
 * stage_lora.c (frozen base, maybe NF4, plus the adapters). */
static void proj_forward(stage *s, slot_acts *sl, int l, int g, float *out, const float *inp,
                         const float *w, int IC, int OC, int accumulate)
{
    if (s->lora)
        stage_lora_forward(s, (int)(sl - s->slots), l, g, out, inp, accumulate);
    else
        kdev_matmul_forward(s->dev, out, inp, w, s->N, IC, OC, accumulate);
}

/* dinp += dout W, and W's gradient (or the adapters'). */
static void proj_backward(stage *s, slot_acts *sl, int l, int g, float *dinp, float *dw,
                          const float *dout, const float *inp, const float *w, int IC, int OC)
{
    if (s->lora)
        stage_lora_backward(s, (int)(sl - s->slots), l, g, dinp, dout, inp);
    else
        kdev_matmul_backward(s->dev, dinp, dw, dout, inp, w, s->N, IC, OC);
}

static void layer_forward(stage *s, slot_acts *sl, int l)
{
    const llama_config *c = &s->cfg;
    int N = s->N, C = c->hidden_size, F = c->intermediate_size, HD = c->head_dim;
    int NH = c->num_attention_heads, NKV = c->num_key_value_heads;
    layer_acts *a = &sl->acts[l];
    const layer_weights *w = &s->w[l];
    float *res_out = l + 1 < s->nl ? sl->acts[l + 1].res_in : sl->out;

    kdev_rmsnorm_forward(s->dev, a->ln1, a->rstd1, a->res_in, w->ln1, N, C, c->rms_norm_eps);
    proj_forward(s, sl, l, STAGE_G_QKV, a->qkv, a->ln1, w->wqkv, C, s->QKV, 0);
    kdev_rope_forward(s->dev, a->qkv, s->rope_cos, s->rope_sin, N, s->T, NH, HD, s->QKV);
    kdev_rope_forward(s->dev, a->qkv + NH * HD, s->rope_cos, s->rope_sin, N, s->T, NKV, HD, s->QKV);
    kdev_attention_forward(s->dev, a->atty, a->att, a->qkv, s->B, s->T, NH, NKV, HD);
    kdev_copy(s->dev, a->mid, a->res_in, (size_t)N * C * sizeof(float));
    proj_forward(s, sl, l, STAGE_G_O, a->mid, a->atty, w->wo, C, C, 1);
    kdev_rmsnorm_forward(s->dev, a->ln2, a->rstd2, a->mid, w->ln2, N, C, c->rms_norm_eps);
    proj_forward(s, sl, l, STAGE_G_GU, a->gu, a->ln2, w->wgu, C, 2 * F, 0);
    kdev_swiglu_forward(s->dev, a->h, a->gu, N, F);
    kdev_copy(s->dev, res_out, a->mid, (size_t)N * C * sizeof(float));
    proj_forward(s, sl, l, STAGE_G_DOWN, res_out, a->h, w->wdown, F, C, 1);
}

/* ids/labels are checked here, once, so kernels can index without checks. */
static int check_tokens(const int32_t *x, const char *what, bool allow_ignore, int B, int T,
                        int V, char *err, size_t errlen)
{
    for (int n = 0; n < B * T; n++) {
        if ((x[n] >= 0 && x[n] < V) || (allow_ignore && x[n] == KERNELS_IGNORE_INDEX)) continue;
        return model_errf(err, errlen, "%s[%d,%d] = %d is outside the vocabulary [0, %d)%s", what,
                    n / T, n % T, x[n], V, allow_ignore ? " and is not -100" : "");
    }
    return 0;
}

int stage_forward(stage *s, int slot, const int32_t *ids, const float *in_act,
                  const int32_t *labels, double *loss_sum, int *kept, char *err, size_t errlen)
{
    int N = s->N, C = s->cfg.hidden_size, V = s->cfg.vocab_size;
    if (slot < 0 || slot >= s->nslots) {
        snprintf(err, errlen, "micro-batch slot %d outside the stage's %d", slot, s->nslots);
        return -1;
    }
    slot_acts *sl = &s->slots[slot];
    float *x0 = s->nl > 0 ? sl->acts[0].res_in : sl->out;
    if (s->first) {
        if (check_tokens(ids, "input_ids", false, s->B, s->T, V, err, errlen)) return -1;
        kdev_to_device(s->dev, sl->ids, ids, (size_t)N * sizeof *ids);
        kdev_embedding_forward(s->dev, x0, sl->ids, s->wte, N, C);
    } else {
        kdev_to_device(s->dev, x0, in_act, (size_t)N * C * sizeof(float));
    }
    if (s->last && check_tokens(labels, "labels", true, s->B, s->T, V, err, errlen)) return -1;

    for (int l = 0; l < s->nl; l++) layer_forward(s, sl, l);

    if (s->last) {
        kdev_to_device(s->dev, sl->labels, labels, (size_t)N * sizeof *labels);
        kdev_rmsnorm_forward(s->dev, sl->lnf_out, sl->rstdf, sl->out, s->lnf, N, C,
                             s->cfg.rms_norm_eps);
        kdev_matmul_forward(s->dev, sl->logits, sl->lnf_out, s->head, N, C, V, 0);
        int k = 0;
        double sum = kdev_crossentropy_forward(s->dev, sl->logits, sl->losses, sl->labels, N, V,
                                               &k);
        if (loss_sum) *loss_sum = sum;
        if (kept) *kept = k;
        if (!s->host) kdev_to_host(s->dev, s->h_losses[slot], sl->losses, (size_t)N * sizeof(float));
    } else if (!s->host) {
        kdev_to_host(s->dev, s->h_out[slot], sl->out, (size_t)N * C * sizeof(float));
    }
    if (!s->host && kdev_sync(s->dev, err, errlen) != KDEV_OK) return -1;
    return 0;
}

/* ---- backward --------------------------------------------------------------- */

/* On entry s->dres holds the gradient of the layer's output; on return, the
 * gradient of its input. */
static void layer_backward(stage *s, slot_acts *sl, int l)
{
    const llama_config *c = &s->cfg;
    int N = s->N, C = c->hidden_size, F = c->intermediate_size, HD = c->head_dim;
    int NH = c->num_attention_heads, NKV = c->num_key_value_heads;
    layer_acts *a = &sl->acts[l];
    const layer_weights *w = &s->w[l];
    layer_weights *dw = &s->dw[l];

    /* MLP: res_out = mid + down(swiglu(gate_up(rmsnorm(mid)))) */
    kdev_zero(s->dev, s->dh, (size_t)N * F);
    proj_backward(s, sl, l, STAGE_G_DOWN, s->dh, dw->wdown, s->dres, a->h, w->wdown, F, C);
    kdev_zero(s->dev, s->dgu, (size_t)N * 2 * F);
    kdev_swiglu_backward(s->dev, s->dgu, s->dh, a->gu, N, F);
    kdev_zero(s->dev, s->dln, (size_t)N * C);
    proj_backward(s, sl, l, STAGE_G_GU, s->dln, dw->wgu, s->dgu, a->ln2, w->wgu, C, 2 * F);
    kdev_rmsnorm_backward(s->dev, s->dres, dw->ln2, s->dln, a->mid, w->ln2, a->rstd2, N, C);

    /* attention: mid = res_in + o(attn(rope(qkv(rmsnorm(res_in))))) */
    kdev_zero(s->dev, s->datty, (size_t)N * C);
    proj_backward(s, sl, l, STAGE_G_O, s->datty, dw->wo, s->dres, a->atty, w->wo, C, C);
    kdev_zero(s->dev, s->dqkv, (size_t)N * s->QKV);
    kdev_attention_backward(s->dev, s->dqkv, s->datty, a->qkv, a->att, s->att_scratch, s->B,
                            s->T, NH, NKV, HD);
    kdev_rope_backward(s->dev, s->dqkv, s->rope_cos, s->rope_sin, N, s->T, NH, HD, s->QKV);
    kdev_rope_backward(s->dev, s->dqkv + NH * HD, s->rope_cos, s->rope_sin, N, s->T, NKV, HD, s->QKV);
    kdev_zero(s->dev, s->dln, (size_t)N * C);
    proj_backward(s, sl, l, STAGE_G_QKV, s->dln, dw->wqkv, s->dqkv, a->ln1, w->wqkv, C, s->QKV);
    kdev_rmsnorm_backward(s->dev, s->dres, dw->ln1, s->dln, a->res_in, w->ln1, a->rstd1, N, C);
}

void stage_backward(stage *s, int slot, const float *dout, float loss_scale)
{
    int N = s->N, C = s->cfg.hidden_size, V = s->cfg.vocab_size;
    slot_acts *sl = &s->slots[slot];
    if (s->last) {
        kdev_crossentropy_backward(s->dev, sl->logits, sl->logits, sl->labels, N, V, loss_scale);
        kdev_zero(s->dev, s->dln, (size_t)N * C);
        kdev_matmul_backward(s->dev, s->dln, s->dhead, sl->logits, sl->lnf_out, s->head, N, C, V);
        kdev_zero(s->dev, s->dres, (size_t)N * C);
        kdev_rmsnorm_backward(s->dev, s->dres, s->dlnf, s->dln, sl->out, s->lnf, sl->rstdf, N, C);
    } else {
        kdev_to_device(s->dev, s->dres, dout, (size_t)N * C * sizeof(float));
    }
    for (int l = s->nl - 1; l >= 0; l--) layer_backward(s, sl, l);
    if (s->first && s->dwte) kdev_embedding_backward(s->dev, s->dwte, s->dres, sl->ids, N, C);
    /* the input gradient for the stage before (a device error surfaces at
     * the next sync: the next forward or stage_pull) */
    if (!s->host && !s->first)
        kdev_to_host(s->dev, s->h_dres, s->dres, (size_t)N * C * sizeof(float));
}

/* ---- optimizer ------------------------------------------------------------- */

double stage_grad_sumsq(const stage *s)
{
    double sum = 0.0;
    for (int i = 0; i < s->ntable; i++)
        if (!s->table[i].tied_copy)
            sum += kdev_grad_sumsq(s->dev, s->grads + s->table[i].offset, s->table[i].numel);
    return sum;
}

void stage_adamw_step(stage *s, const stage_adamw *o, int t, float grad_scale)
{
    for (int i = 0; i < s->ntable; i++) {
        const stage_param *p = &s->table[i];
        kdev_adamw_update(s->dev, s->params + p->offset, s->grads + p->offset, s->m + p->offset,
                     s->v + p->offset, p->numel, o->lr, o->beta1, o->beta2, o->eps,
                     p->decay ? o->weight_decay : 0.0f, t, grad_scale);
    }
}

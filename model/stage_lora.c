/* stage_lora.c — a stage whose base is frozen (fp32, or its layer matrices
 * in NF4) and whose only parameters are LoRA adapters, as PEFT's LoRA
 * Linear computes them with dropout 0:
 *
 *   y = x W0^T + scaling (x A^T) B^T,   A [r, in], B [out, r]
 *
 * The forward saves v = scaling x A^T [N, r] per slot; the backward gives
 * dB += dy^T v, dv = dy B, dA += (scaling dv)^T x, dx += dy W0 +
 * (scaling dv) A. Every product is matmul's (or NF4's, which equals matmul
 * on the dequantized W0 bit for bit): results do not depend on the thread
 * count, and a layer computes the same whatever stage holds it. The base
 * gets no gradient and no AdamW moments; the norms' weight gradients that
 * rmsnorm_backward always produces go to a sink of C floats. */
#include "import.h"
#include "model_util.h"
#include "stage_internal.h"

#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int in, out;           /* W0 is [out, in] */
    int col, ld;           /* its columns [col, col + out) in the group's rows of ld */
    float *A, *B, *dA, *dB; /* NULL when the module has no adapter */
    size_t voff;           /* its v [N, r] in a slot's save area */
    nf4_matrix q;          /* the NF4 base (nf4 stages) */
    void *qbuf;
} lora_mod;

struct stage_lora_state {
    stage_lora cfg;
    float scaling;
    stage_param *frozen;   /* the base's table (HF names, model order) */
    int nfrozen;
    int *fmod;             /* [nfrozen]: the module an NF4 entry is (l * 7 + m), else -1 */
    size_t nfloats;
    float *base;           /* fp32 frozen tensors */
    lora_mod *mods;        /* [nl * STAGE_LORA_MODULES] */
    float *vsave;          /* [nslots][per_slot] */
    size_t per_slot;
    float *tmp;            /* [N, max(C, F)] one module's rows */
    float *dv;             /* [N, r] */
    float *nf4s;           /* NF4 products' scratch, nscratch slots */
    float *sink;           /* [C] */
};

static const char *const module_names[STAGE_LORA_MODULES] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

const char *stage_lora_module_name(int m)
{
    return m >= 0 && m < STAGE_LORA_MODULES ? module_names[m] : NULL;
}

float stage_lora_scaling(const stage_lora *l)
{
    return (float)(l->use_rslora ? l->alpha / sqrt((double)l->r) : l->alpha / (double)l->r);
}

int stage_lora_check(const stage_lora *l, char *err, size_t errlen)
{
    if (l->r < 1 || l->r > 65536)
        return model_errf(err, errlen, "LoRA rank r = %d must be in [1, 65536]", l->r);
    if (!(l->alpha > 0) || !isfinite(l->alpha))
        return model_errf(err, errlen, "LoRA alpha = %g must be a finite number > 0", l->alpha);
    if ((l->modules & ((1u << STAGE_LORA_MODULES) - 1)) == 0 ||
        (l->modules >> STAGE_LORA_MODULES) != 0)
        return model_errf(err, errlen, "LoRA target modules must be some of q_proj, k_proj, "
                          "v_proj, o_proj, gate_proj, up_proj, down_proj");
    return 0;
}

void stage_lora_module_shape(const llama_config *c, int m, int *out, int *in)
{
    int C = c->hidden_size, F = c->intermediate_size;
    int QD = c->num_attention_heads * c->head_dim, KVD = c->num_key_value_heads * c->head_dim;
    const int outs[STAGE_LORA_MODULES] = {QD, KVD, KVD, C, F, F, C};
    const int ins[STAGE_LORA_MODULES] = {C, C, C, QD, C, C, F};
    *out = outs[m];
    *in = ins[m];
}

/* Columns of module m in its group's output rows, and their stride. */
static void module_cols(const stage *s, int m, int *col, int *ld)
{
    const llama_config *c = &s->cfg;
    int F = c->intermediate_size, QD = c->num_attention_heads * c->head_dim;
    int KVD = c->num_key_value_heads * c->head_dim;
    switch (m) {
    case STAGE_LORA_Q: *col = 0; *ld = s->QKV; break;
    case STAGE_LORA_K: *col = QD; *ld = s->QKV; break;
    case STAGE_LORA_V: *col = QD + KVD; *ld = s->QKV; break;
    case STAGE_LORA_GATE: *col = 0; *ld = 2 * F; break;
    case STAGE_LORA_UP: *col = F; *ld = 2 * F; break;
    default: *col = 0; *ld = c->hidden_size; break;   /* o_proj, down_proj: whole rows */
    }
}

double stage_lora_memory_bytes(const llama_config *cfg, int layer_begin, int layer_end,
                               bool first, bool last, int B, int T, int slots,
                               const stage_lora *lora)
{
    if (!lora)
        return stage_memory_bytes(cfg, layer_begin, layer_end, first, last, B, T, slots);
    double C = cfg->hidden_size, F = cfg->intermediate_size, V = cfg->vocab_size;
    double nl = layer_end > layer_begin ? layer_end - layer_begin : 0, N = (double)B * T;
    double frozen = nl * 2 * C, nf4 = 0, adapters = 0, nsaved = 0, scratch = 0;
    if (first) frozen += V * C;
    if (last) frozen += C + (cfg->tie_word_embeddings && first ? 0 : V * C);
    int Ni = N > 1e9 ? 1000000000 : (int)N;
    for (int m = 0; m < STAGE_LORA_MODULES; m++) {
        int out, in;
        stage_lora_module_shape(cfg, m, &out, &in);
        if (lora->nf4) {
            nf4 += (double)nf4_bytes(out, in);
            double sc = nl > 0 ? (double)nf4_matmul_scratch_floats(Ni, in, out) : 0;
            if (sc > scratch) scratch = sc;
        } else {
            frozen += nl * out * in;
        }
        if (lora->modules & (1u << m)) {
            adapters += (double)lora->r * (in + out);
            nsaved += N * lora->r + 16;
        }
    }
    double bytes = frozen * sizeof(float) + nl * nf4 + 4 * nl * adapters * sizeof(float);
    bytes += (double)slots * nl * nsaved * sizeof(float);
    bytes += (N * (C > F ? C : F) + N * lora->r + C + scratch * stage_threads()) *
             sizeof(float);
    bytes += nl * STAGE_LORA_MODULES * (2 * sizeof(stage_param) + sizeof(lora_mod) + sizeof(int));
    return bytes + stage_act_bytes(cfg, layer_begin, layer_end, first, last, B, T, slots);
}

/* Module of the entries of a layer, in stage_build_table order (-1: a norm). */
static const int entry_module[9] = {-1, STAGE_LORA_Q, STAGE_LORA_K, STAGE_LORA_V, STAGE_LORA_O,
                                    -1, STAGE_LORA_GATE, STAGE_LORA_UP, STAGE_LORA_DOWN};

static void *alloc_aligned(size_t bytes)
{
    bytes = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes);
    return p;
}

int stage_lora_setup(stage *s, const stage_lora *lc, char *err, size_t errlen)
{
    struct stage_lora_state *L = calloc(1, sizeof *L);
    if (!L) return model_errf(err, errlen, "out of memory for the stage's adapters");
    s->lora = L;
    L->cfg = *lc;
    L->scaling = stage_lora_scaling(lc);
    const llama_config *c = &s->cfg;
    int C = c->hidden_size, F = c->intermediate_size, r = lc->r;
    size_t N = (size_t)s->N;
    int nmods = s->nl * STAGE_LORA_MODULES;

    /* the table stage_build_table made is the frozen base's */
    L->frozen = s->table;
    L->nfrozen = s->ntable;
    L->fmod = calloc((size_t)L->nfrozen + 1, sizeof *L->fmod);
    L->mods = calloc((size_t)nmods + 1, sizeof *L->mods);
    s->table = calloc((size_t)nmods * 2 + 1, sizeof *s->table);
    s->ntable = 0;
    s->nparams = 0;
    if (!L->fmod || !L->mods || !s->table) goto oom;
    int first_layer = s->first ? 1 : 0;
    size_t off = 0;
    for (int i = 0; i < L->nfrozen; i++) {
        stage_param *p = &L->frozen[i];
        int k = i - first_layer, l = k / 9;
        L->fmod[i] = -1;
        if (k >= 0 && l < s->nl && entry_module[k % 9] >= 0)
            L->fmod[i] = l * STAGE_LORA_MODULES + entry_module[k % 9];
        if (L->fmod[i] >= 0 && lc->nf4) {
            p->offset = 0;   /* no fp32 data */
            continue;
        }
        p->offset = off;
        off += p->numel;
    }
    L->nfloats = off;
    L->base = stage_alloc_floats(off);
    if (!L->base) goto oom;

    /* the modules, their adapters in the table (PEFT's names and order) */
    size_t vsz = 0;
    for (int l = 0; l < s->nl; l++)
        for (int m = 0; m < STAGE_LORA_MODULES; m++) {
            lora_mod *md = &L->mods[l * STAGE_LORA_MODULES + m];
            stage_lora_module_shape(c, m, &md->out, &md->in);
            module_cols(s, m, &md->col, &md->ld);
            if (lc->nf4) {
                if (!(md->qbuf = alloc_aligned(nf4_bytes(md->out, md->in)))) goto oom;
                nf4_init(&md->q, md->out, md->in, md->qbuf);
            }
            if (!(lc->modules & (1u << m))) continue;
            char name[80];
            const char *part = m <= STAGE_LORA_O ? "self_attn" : "mlp";
            snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_A.weight",
                     s->l0 + l, part, module_names[m]);
            stage_table_add(s, name, r, md->in);
            snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_B.weight",
                     s->l0 + l, part, module_names[m]);
            stage_table_add(s, name, md->out, r);
            md->voff = vsz;
            vsz += (N * (size_t)r + 15) & ~(size_t)15;
        }
    L->per_slot = vsz;
    size_t scratch = 0;
    if (lc->nf4 && s->nl > 0) /* a stage of no layers (embedding or head alone) has no
                               * NF4 products, and L->mods no entries to size them by */
        for (int m = 0; m < STAGE_LORA_MODULES; m++) {
            size_t sc = nf4_matmul_scratch_floats(s->N, L->mods[m].in, L->mods[m].out);
            if (sc > scratch) scratch = sc;
        }
    L->vsave = stage_alloc_floats((size_t)s->nslots * vsz);
    L->tmp = stage_alloc_floats(N * (size_t)(C > F ? C : F));
    L->dv = stage_alloc_floats(N * (size_t)r);
    L->sink = stage_alloc_floats((size_t)C);
    L->nf4s = stage_alloc_floats(scratch * (size_t)s->nscratch);
    if (!L->vsave || !L->tmp || !L->dv || !L->sink || !L->nf4s) goto oom;

    /* views of the frozen base; the norms' gradients go to the sink */
    float *b = L->base;
    int k = 0;
    if (s->first) s->wte = b + L->frozen[k++].offset;
    for (int l = 0; l < s->nl; l++, k += 9) {
        layer_weights *w = &s->w[l];
        w->ln1 = b + L->frozen[k].offset;
        w->ln2 = b + L->frozen[k + 5].offset;
        if (!lc->nf4) {
            w->wqkv = b + L->frozen[k + 1].offset;
            w->wo = b + L->frozen[k + 4].offset;
            w->wgu = b + L->frozen[k + 6].offset;
            w->wdown = b + L->frozen[k + 8].offset;
        }
        s->dw[l].ln1 = s->dw[l].ln2 = L->sink;
    }
    if (s->last) {
        s->lnf = b + L->frozen[k++].offset;
        s->head = k < L->nfrozen ? b + L->frozen[k].offset : s->wte;
        s->dlnf = L->sink;
    }
    return 0;
oom:
    return model_errf(err, errlen, "out of memory for the frozen base and adapters of layers "
                      "[%d, %d)", s->l0, s->l1);
}

/* Points every module's adapters and gradients at the parameter buffers
 * (once they exist: stage_create allocates them after the setup). */
void stage_lora_bind(stage *s)
{
    struct stage_lora_state *L = s->lora;
    int t = 0;
    for (int i = 0; i < s->nl * STAGE_LORA_MODULES; i++) {
        lora_mod *md = &L->mods[i];
        if (!(L->cfg.modules & (1u << (i % STAGE_LORA_MODULES)))) continue;
        md->A = s->params + s->table[t].offset;
        md->dA = s->grads + s->table[t].offset;
        md->B = s->params + s->table[t + 1].offset;
        md->dB = s->grads + s->table[t + 1].offset;
        t += 2;
    }
}

void stage_lora_free(stage *s)
{
    struct stage_lora_state *L = s->lora;
    if (!L) return;
    for (int i = 0; L->mods && i < s->nl * STAGE_LORA_MODULES; i++) free(L->mods[i].qbuf);
    free(L->mods);
    free(L->frozen);
    free(L->fmod);
    free(L->base);
    free(L->vsave);
    free(L->tmp);
    free(L->dv);
    free(L->nf4s);
    free(L->sink);
    free(L);
    s->lora = NULL;
}

void stage_lora_zero(stage *s)
{
    kernels_zero(s->lora->sink, (size_t)s->cfg.hidden_size);
}

const stage_lora *stage_lora_config(const stage *s)
{
    return s->lora ? &s->lora->cfg : NULL;
}

/* ---- products -------------------------------------------------------------- */

static const int group_first[4] = {STAGE_LORA_Q, STAGE_LORA_O, STAGE_LORA_GATE, STAGE_LORA_DOWN};
static const int group_count[4] = {3, 1, 2, 1};

/* out[n, col + j] (=|+=) x[n, j] for a module's columns. */
static void put_cols(float *out, int ld, int col, const float *x, int w, int N, int accumulate)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * ld + col;
        const float *xi = x + (size_t)n * w;
        if (accumulate)
            for (int j = 0; j < w; j++) o[j] += xi[j];
        else
            memcpy(o, xi, (size_t)w * sizeof *o);
    }
}

static void get_cols(float *x, const float *in, int ld, int col, int w, int N)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(x + (size_t)n * w, in + (size_t)n * ld + col, (size_t)w * sizeof *x);
}

/* Serial: x is one v [N, r], a few thousand floats; a parallel region
 * costs more than it saves (and each is a barrier, costly on a loaded CPU). */
static void scale(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++) x[i] *= a;
}

static const float *fused_base(const stage *s, int l, int g)
{
    const layer_weights *w = &s->w[l];
    return g == STAGE_G_QKV ? w->wqkv : g == STAGE_G_O ? w->wo : g == STAGE_G_GU ? w->wgu
                                                                                  : w->wdown;
}

void stage_lora_forward(stage *s, int slot, int l, int g, float *out, const float *inp,
                        int accumulate)
{
    struct stage_lora_state *L = s->lora;
    int N = s->N, r = L->cfg.r;
    int m0 = group_first[g], nm = group_count[g];
    if (!L->cfg.nf4) {
        const lora_mod *a = &L->mods[l * STAGE_LORA_MODULES + m0];
        int OC = a->ld;
        matmul_forward(out, inp, fused_base(s, l, g), N, a->in, OC, accumulate);
    }
    for (int m = m0; m < m0 + nm; m++) {
        lora_mod *md = &L->mods[l * STAGE_LORA_MODULES + m];
        bool whole = nm == 1;
        if (L->cfg.nf4) {
            /* straight into the module's columns (the same bits as through
             * tmp; accumulating, tmp keeps the sum's order as before) */
            if (whole || !accumulate) {
                nf4_matmul_forward_ld(out + md->col, md->ld, inp, &md->q, N, accumulate,
                                      L->nf4s, s->nscratch);
            } else {
                nf4_matmul_forward(L->tmp, inp, &md->q, N, 0, L->nf4s, s->nscratch);
                put_cols(out, md->ld, md->col, L->tmp, md->out, N, accumulate);
            }
        }
        if (!md->A) continue;
        float *v = L->vsave + (size_t)slot * L->per_slot + md->voff;
        matmul_forward(v, inp, md->A, N, md->in, r, 0);
        scale(v, (size_t)N * r, L->scaling);
        if (whole) {
            matmul_forward(out, v, md->B, N, r, md->out, 1);
        } else {
            matmul_forward(L->tmp, v, md->B, N, r, md->out, 0);
            put_cols(out, md->ld, md->col, L->tmp, md->out, N, 1);
        }
    }
}

void stage_lora_backward(stage *s, int slot, int l, int g, float *dinp, const float *dout,
                         const float *inp)
{
    struct stage_lora_state *L = s->lora;
    int N = s->N, r = L->cfg.r;
    int m0 = group_first[g], nm = group_count[g];
    if (!L->cfg.nf4) {
        const lora_mod *a = &L->mods[l * STAGE_LORA_MODULES + m0];
        matmul_backward(dinp, NULL, dout, inp, fused_base(s, l, g), N, a->in, a->ld);
    }
    for (int m = m0; m < m0 + nm; m++) {
        lora_mod *md = &L->mods[l * STAGE_LORA_MODULES + m];
        if (!md->A) { /* the base alone: read dout's columns in place */
            if (L->cfg.nf4)
                nf4_matmul_backward_ld(dinp, dout + md->col, md->ld, &md->q, N, L->nf4s,
                                       s->nscratch);
            continue;
        }
        const float *dy = dout;
        if (nm > 1) {
            get_cols(L->tmp, dout, md->ld, md->col, md->out, N);
            dy = L->tmp;
        }
        if (L->cfg.nf4) nf4_matmul_backward(dinp, dy, &md->q, N, L->nf4s, s->nscratch);
        const float *v = L->vsave + (size_t)slot * L->per_slot + md->voff;
        kernels_zero(L->dv, (size_t)N * r);
        matmul_backward(L->dv, md->dB, dy, v, md->B, N, r, md->out);
        scale(L->dv, (size_t)N * r, L->scaling);
        matmul_backward(dinp, md->dA, L->dv, inp, md->A, N, md->in, r);
    }
}

/* ---- initialisation, loading, the frozen tensors --------------------------- */

void stage_init_adapters(stage *s, uint64_t seed)
{
    if (!s->lora) return;
    for (int i = 0; i < s->ntable; i++) {
        const stage_param *p = &s->table[i];
        float *x = s->params + p->offset;
        if (!strstr(p->name, ".lora_A.")) {
            memset(x, 0, p->numel * sizeof *x);
            continue;
        }
        /* torch.nn.init.kaiming_uniform_(A, a=sqrt(5)): fan_in = in,
         * gain = sqrt(2 / (1 + a^2)), bound = sqrt(3) gain / sqrt(fan_in) */
        double a = sqrt(5.0), gain = sqrt(2.0 / (1.0 + a * a));
        double bound = sqrt(3.0) * (gain / sqrt((double)p->shape[1]));
        uint64_t state = seed ^ stage_fnv1a(p->name);
        for (size_t j = 0; j < p->numel; j++) {
            double u = (double)(stage_splitmix64(&state) >> 11) * 0x1.0p-53;
            x[j] = (float)(-bound + 2.0 * bound * u);
        }
    }
}

int stage_load_adapters(stage *s, const safetensors_file *f, char *err, size_t errlen)
{
    for (int i = 0; i < s->ntable; i++) {
        const stage_param *p = &s->table[i];
        if (safetensors_read_f32(f, p->name, p->ndim, p->shape, s->params + p->offset, err,
                                 errlen))
            return -1;
    }
    return 0;
}

int stage_frozen_count(const stage *s) { return s->lora ? s->lora->nfrozen : 0; }
const stage_param *stage_frozen_at(const stage *s, int i) { return &s->lora->frozen[i]; }
bool stage_frozen_is_nf4(const stage *s, int i)
{
    return s->lora->cfg.nf4 && s->lora->fmod[i] >= 0;
}
float *stage_frozen_data(stage *s, int i)
{
    return stage_frozen_is_nf4(s, i) ? NULL : s->lora->base + s->lora->frozen[i].offset;
}

int stage_frozen_read(stage *s, int i, float *dst, size_t n, char *err, size_t errlen)
{
    struct stage_lora_state *L = s->lora;
    const stage_param *p = &L->frozen[i];
    if (n != p->numel)
        return model_errf(err, errlen, "%s: room for %zu values, the stage holds %zu", p->name,
                          n, p->numel);
    if (stage_frozen_is_nf4(s, i)) nf4_dequantize(&L->mods[L->fmod[i]].q, dst);
    else memcpy(dst, L->base + p->offset, n * sizeof *dst);
    return 0;
}

int stage_frozen_write(stage *s, int i, const float *w, size_t n, char *err, size_t errlen)
{
    struct stage_lora_state *L = s->lora;
    const stage_param *p = &L->frozen[i];
    if (n != p->numel)
        return model_errf(err, errlen, "%s: %zu values, the stage holds %zu", p->name, n,
                          p->numel);
    if (!stage_frozen_is_nf4(s, i)) {
        memcpy(L->base + p->offset, w, n * sizeof *w);
        return 0;
    }
    lora_mod *md = &L->mods[L->fmod[i]];
    float *absmax = malloc((size_t)nf4_blocks(md->out, md->in) * sizeof *absmax);
    if (!absmax) return model_errf(err, errlen, "%s: out of memory quantizing it", p->name);
    nf4_quantize(&md->q, w, absmax);
    free(absmax);
    return 0;
}

int stage_frozen_adopt_nf4(stage *s, int i, const nf4_matrix *q, void *buf, char *err,
                           size_t errlen)
{
    const stage_param *p = &s->lora->frozen[i];
    if (!stage_frozen_is_nf4(s, i) || q->rows != p->shape[0] || q->cols != p->shape[1])
        return model_errf(err, errlen, "%s: not an NF4 matrix [%lld, %lld] of this stage",
                          p->name, (long long)p->shape[0], (long long)p->shape[1]);
    lora_mod *md = &s->lora->mods[s->lora->fmod[i]];
    free(md->qbuf);
    md->q = *q;
    md->qbuf = buf;
    return 0;
}

double stage_frozen_bytes(const stage *s)
{
    if (!s->lora) return 0;
    double b = (double)s->lora->nfloats * sizeof(float);
    if (s->lora->cfg.nf4)
        for (int i = 0; i < s->nl * STAGE_LORA_MODULES; i++)
            b += (double)nf4_bytes(s->lora->mods[i].out, s->lora->mods[i].in);
    return b;
}

/* Reads the frozen base from f: fp32 tensors straight into the stage, NF4
 * ones through one buffer (the largest matrix and its absmax), allocated
 * once for the whole stage: a malloc and free per matrix left several MB of
 * freed heap resident after the load (glibc raises its mmap threshold to
 * each freed size, so the next matrices came from the heap). */
int stage_lora_load(stage *s, const safetensors_file *f, char *err, size_t errlen)
{
    struct stage_lora_state *L = s->lora;
    size_t most = 0, blocks = 0;
    for (int i = 0; i < L->nfrozen; i++) {
        if (!stage_frozen_is_nf4(s, i)) continue;
        const lora_mod *md = &L->mods[L->fmod[i]];
        size_t n = (size_t)md->out * (size_t)md->in, nb = (size_t)nf4_blocks(md->out, md->in);
        most = n > most ? n : most;
        blocks = nb > blocks ? nb : blocks;
    }
    float *w = NULL;
    if (most && !(w = malloc((most + blocks) * sizeof *w)))
        return model_errf(err, errlen, "out of memory reading the base of layers [%d, %d)",
                          s->l0, s->l1);
    int rc = 0;
    for (int i = 0; i < L->nfrozen && rc == 0; i++) {
        const stage_param *p = &L->frozen[i];
        float *dst = stage_frozen_data(s, i);
        rc = safetensors_read_f32(f, p->name, p->ndim, p->shape, dst ? dst : w, err, errlen);
        if (rc == 0 && !dst) nf4_quantize(&L->mods[L->fmod[i]].q, w, w + most);
    }
    free(w);
    return rc ? -1 : 0;
}

void stage_lora_init(stage *s, uint64_t seed)
{
    struct stage_lora_state *L = s->lora;
    for (int i = 0; i < L->nfrozen; i++) {
        const stage_param *p = &L->frozen[i];
        float *dst = stage_frozen_data(s, i);
        if (dst) {
            stage_fill_init(dst, p->numel, p->ndim, p->name, seed);
            continue;
        }
        /* one matrix in fp32 while it is quantized (stage_init_weights
         * cannot fail: without the memory the matrix stays all zero, which
         * no training mistakes for a base) */
        float *w = malloc(p->numel * sizeof *w);
        char ignore[64];
        if (!w) continue;
        stage_fill_init(w, p->numel, p->ndim, p->name, seed);
        stage_frozen_write(s, i, w, p->numel, ignore, sizeof ignore);
        free(w);
    }
    stage_init_adapters(s, seed);
}

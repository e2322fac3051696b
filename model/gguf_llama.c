/* gguf_llama.c — a LLaMA in a GGUF file seen as an HF checkpoint: its
 * config from the llama.* metadata, llama.cpp's tensor names mapped to
 * HF's, and each tensor read back in HF's layout.
 *
 * llama.cpp's converter (convert_hf_to_gguf.py) stores q_proj and k_proj
 * with the rows of each head reordered for its RoPE, which rotates
 * adjacent pairs where HF rotates the two halves of a head: HF row
 * h*HD + s*HD/2 + j (s in {0, 1}, j < HD/2) is stored as row h*HD + 2j + s
 * (heads: attention heads for q, KV heads for k). Reading undoes it. */
#include "import.h"
#include "model_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* "[64, 32]" (at most 2 dimensions shown, "..." for more). */
static const char *shape_text(char *buf, size_t len, int ndim, const int64_t *shape)
{
    if (ndim == 1) snprintf(buf, len, "[%lld]", (long long)shape[0]);
    else if (ndim == 2) snprintf(buf, len, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
    else snprintf(buf, len, "[%d dimensions]", ndim);
    return buf;
}

/* llama.cpp's per-layer names and HF's, in HF's model order. */
static const struct { const char *gguf, *hf; int ndim; } layer_names[] = {
    {"attn_norm", "input_layernorm", 1},
    {"attn_q", "self_attn.q_proj", 2},
    {"attn_k", "self_attn.k_proj", 2},
    {"attn_v", "self_attn.v_proj", 2},
    {"attn_output", "self_attn.o_proj", 2},
    {"ffn_norm", "post_attention_layernorm", 1},
    {"ffn_gate", "mlp.gate_proj", 2},
    {"ffn_up", "mlp.up_proj", 2},
    {"ffn_down", "mlp.down_proj", 2},
};
#define NUM_LAYER_NAMES (sizeof layer_names / sizeof layer_names[0])

static const struct { const char *gguf, *hf; } global_names[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

/* "blk.N.REST" → N and REST; -1 if name is not of that form. */
static int split_layer(const char *name, const char *prefix, long *layer, const char **rest)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) return -1;
    const char *p = name + pl;
    char *end;
    if (*p < '0' || *p > '9') return -1;
    *layer = strtol(p, &end, 10);
    if (*end != '.' || *layer < 0 || *layer > 1 << 20 || (p[0] == '0' && end - p > 1)) return -1;
    *rest = end + 1;
    return 0;
}

int gguf_hf_name(const char *gguf_name, char *buf, size_t len)
{
    long l;
    const char *rest;
    for (size_t i = 0; i < sizeof global_names / sizeof global_names[0]; i++)
        if (strcmp(gguf_name, global_names[i].gguf) == 0)
            return snprintf(buf, len, "%s", global_names[i].hf) < (int)len ? 0 : -1;
    if (split_layer(gguf_name, "blk.", &l, &rest)) return -1;
    for (size_t i = 0; i < NUM_LAYER_NAMES; i++) {
        size_t n = strlen(layer_names[i].gguf);
        if (strncmp(rest, layer_names[i].gguf, n) == 0 && strcmp(rest + n, ".weight") == 0)
            return snprintf(buf, len, "model.layers.%ld.%s.weight", l, layer_names[i].hf) <
                   (int)len ? 0 : -1;
    }
    return -1;
}

int gguf_gguf_name(const char *hf_name, char *buf, size_t len)
{
    long l;
    const char *rest;
    for (size_t i = 0; i < sizeof global_names / sizeof global_names[0]; i++)
        if (strcmp(hf_name, global_names[i].hf) == 0)
            return snprintf(buf, len, "%s", global_names[i].gguf) < (int)len ? 0 : -1;
    if (split_layer(hf_name, "model.layers.", &l, &rest)) return -1;
    for (size_t i = 0; i < NUM_LAYER_NAMES; i++) {
        size_t n = strlen(layer_names[i].hf);
        if (strncmp(rest, layer_names[i].hf, n) == 0 && strcmp(rest + n, ".weight") == 0)
            return snprintf(buf, len, "blk.%ld.%s.weight", l, layer_names[i].gguf) < (int)len
                       ? 0 : -1;
    }
    return -1;
}

int gguf_llama_shape(const llama_config *c, const char *hf_name, int *ndim, int64_t shape[2])
{
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    int64_t Q = (int64_t)c->num_attention_heads * c->head_dim;
    int64_t KV = (int64_t)c->num_key_value_heads * c->head_dim;
    long l;
    const char *rest;
    *ndim = 2;
    if (strcmp(hf_name, "model.embed_tokens.weight") == 0 ||
        (strcmp(hf_name, "lm_head.weight") == 0 && !c->tie_word_embeddings)) {
        shape[0] = V, shape[1] = C;
        return 0;
    }
    if (strcmp(hf_name, "model.norm.weight") == 0) {
        *ndim = 1, shape[0] = C;
        return 0;
    }
    if (split_layer(hf_name, "model.layers.", &l, &rest) || l >= c->num_hidden_layers) return -1;
    static const char *const names[] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                        "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                        "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                        "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                        "mlp.down_proj.weight"};
    const int64_t rows[] = {C, C, Q, KV, KV, C, F, F, C}, cols[] = {0, 0, C, C, C, Q, C, C, F};
    for (int i = 0; i < 9; i++) {
        if (strcmp(rest, names[i]) != 0) continue;
        shape[0] = rows[i], shape[1] = cols[i];
        if (!cols[i]) *ndim = 1;
        return 0;
    }
    return -1;
}

int gguf_llama_names(const llama_config *c, char ***names, int *n)
{
    int cap = 3 + (int)NUM_LAYER_NAMES * c->num_hidden_layers, k = 0;
    char **v = calloc((size_t)cap, sizeof *v);
    char buf[128];
    *names = NULL, *n = 0;
    if (!v) return -1;
    v[k++] = strdup("model.embed_tokens.weight");
    for (int l = 0; l < c->num_hidden_layers; l++)
        for (size_t i = 0; i < NUM_LAYER_NAMES; i++) {
            snprintf(buf, sizeof buf, "model.layers.%d.%s.weight", l, layer_names[i].hf);
            v[k++] = strdup(buf);
        }
    v[k++] = strdup("model.norm.weight");
    if (!c->tie_word_embeddings) v[k++] = strdup("lm_head.weight");
    for (int i = 0; i < k; i++)
        if (!v[i]) {
            gguf_free_names(v, k);
            return -1;
        }
    *names = v, *n = k;
    return 0;
}

void gguf_free_names(char **names, int n)
{
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
}

/* ---- config ---------------------------------------------------------------- */

static int get_dim(const gguf_file *f, const char *key, bool required, int *out, char *err,
                   size_t errlen)
{
    int64_t v = *out;
    int rc = gguf_get_int(f, key, required, &v, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0 && (v <= 0 || v > 1 << 30))
        return model_errf(err, errlen, "%s: key %s is %lld, expected a positive size up to 2^30",
                          gguf_path(f), key, (long long)v);
    *out = (int)v;
    return 0;
}

static int check_unsupported(const gguf_file *f, const llama_config *c, char *err, size_t errlen)
{
    const char *path = gguf_path(f);
    int64_t v = 0;
    char *s = NULL;
    if (gguf_get_int(f, "llama.expert_count", false, &v, err, errlen) < 0) return -1;
    if (v > 0)
        return model_errf(err, errlen, "%s: key llama.expert_count is %lld: mixture-of-experts "
                          "models are not supported", path, (long long)v);
    if (gguf_get_string(f, "llama.rope.scaling.type", false, &s, err, errlen) < 0) return -1;
    if (s && strcmp(s, "none") != 0) {
        model_errf(err, errlen, "%s: key llama.rope.scaling.type is \"%s\": RoPE scaling is not "
                   "supported (plain RoPE only)", path, s);
        free(s);
        return -1;
    }
    free(s);
    if (gguf_tensor_find(f, "rope_freqs.weight"))
        return model_errf(err, errlen, "%s: tensor rope_freqs.weight: Llama 3.1-style RoPE "
                          "scaling is not imported from GGUF (the file keeps per-frequency "
                          "factors, not rope_scaling's parameters); import the model's Hugging "
                          "Face directory instead (rope_scaling \"llama3\" is supported there)",
                          path);
    static const char *const lengths[] = {"llama.attention.key_length",
                                          "llama.attention.value_length",
                                          "llama.rope.dimension_count"};
    for (int i = 0; i < 3; i++) {
        int d = c->head_dim;
        if (get_dim(f, lengths[i], false, &d, err, errlen)) return -1;
        if (d != c->head_dim)
            return model_errf(err, errlen, "%s: key %s is %d, but the head dimension "
                              "(embedding_length / head_count) is %d", path, lengths[i], d,
                              c->head_dim);
    }
    return 0;
}

int gguf_llama_config(const gguf_file *f, llama_config *out, char *err, size_t errlen)
{
    const char *path = gguf_path(f);
    llama_config c;
    char *arch = NULL;
    double eps = 1e-5, theta = 10000;
    memset(&c, 0, sizeof c);
    if (gguf_get_string(f, "general.architecture", true, &arch, err, errlen)) return -1;
    if (strcmp(arch, "llama") != 0) {
        model_errf(err, errlen, "%s: key general.architecture is \"%s\": only \"llama\" is "
                   "supported", path, arch);
        free(arch);
        return -1;
    }
    free(arch);
    c.max_position_embeddings = 2048;
    if (get_dim(f, "llama.embedding_length", true, &c.hidden_size, err, errlen) ||
        get_dim(f, "llama.feed_forward_length", true, &c.intermediate_size, err, errlen) ||
        get_dim(f, "llama.block_count", true, &c.num_hidden_layers, err, errlen) ||
        get_dim(f, "llama.attention.head_count", true, &c.num_attention_heads, err, errlen))
        return -1;
    c.num_key_value_heads = c.num_attention_heads;
    if (get_dim(f, "llama.attention.head_count_kv", false, &c.num_key_value_heads, err,
                errlen) ||
        get_dim(f, "llama.context_length", false, &c.max_position_embeddings, err, errlen) ||
        gguf_get_float(f, "llama.rope.freq_base", false, &theta, err, errlen) < 0 ||
        gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", true, &eps, err, errlen))
        return -1;
    const gguf_tensor *emb = gguf_tensor_find(f, "token_embd.weight");
    if (!emb)
        return model_errf(err, errlen, "%s: tensor token_embd.weight is missing", path);
    c.vocab_size = emb->ndim == 2 && emb->ne[1] <= 1 << 30 ? (int)emb->ne[1] : 0;
    if (get_dim(f, "llama.vocab_size", false, &c.vocab_size, err, errlen)) return -1;
    if (!(fabs(eps) < 1e30) || !(fabs(theta) < 1e30))
        return model_errf(err, errlen, "%s: rms epsilon %g or rope freq_base %g is out of range",
                          path, eps, theta);
    c.rms_norm_eps = (float)eps;
    c.rope_theta = (float)theta;
    c.tie_word_embeddings = gguf_tensor_find(f, "output.weight") == NULL;
    if (llama_config_validate(&c, path, err, errlen) || check_unsupported(f, &c, err, errlen))
        return -1;
    *out = c;
    return 0;
}

/* ---- tensors ------------------------------------------------------------------- */

/* Rows of each head back from llama.cpp's order into HF's (see top). */
static int unpermute(float *w, int heads, int hd, int64_t cols)
{
    size_t head = (size_t)hd * (size_t)cols;
    float *tmp = malloc(head * sizeof *tmp);
    if (!tmp) return -1;
    for (int h = 0; h < heads; h++) {
        float *base = w + (size_t)h * head;
        memcpy(tmp, base, head * sizeof *tmp);
        for (int j = 0; j < hd / 2; j++)
            for (int s = 0; s < 2; s++)
                memcpy(base + (size_t)(s * (hd / 2) + j) * (size_t)cols,
                       tmp + (size_t)(2 * j + s) * (size_t)cols, (size_t)cols * sizeof *tmp);
    }
    free(tmp);
    return 0;
}

int gguf_llama_read(const gguf_file *f, const llama_config *c, const char *hf_name, float *dst,
                    size_t n, char *err, size_t errlen)
{
    const char *path = gguf_path(f);
    char gname[128];
    int ndim;
    int64_t shape[2];
    if (gguf_llama_shape(c, hf_name, &ndim, shape) ||
        gguf_gguf_name(hf_name, gname, sizeof gname))
        return model_errf(err, errlen, "%s: %s is not a tensor of this model", path, hf_name);
    const gguf_tensor *t = gguf_tensor_find(f, gname);
    if (!t) return model_errf(err, errlen, "%s: tensor %s (HF %s) is missing", path, gname, hf_name);
    /* GGUF lists dimensions innermost first: HF [out, in] is ne {in, out}. */
    bool same = t->ndim == ndim && t->ne[0] == shape[ndim - 1] && (ndim == 1 || t->ne[1] == shape[0]);
    if (!same)
    {
        char want[64];
        shape_text(want, sizeof want, ndim, shape);
        return model_errf(err, errlen, "%s: byte %llu: tensor %s has %d dimensions (ne %lld, "
                          "%lld, %lld, %lld), expected HF shape %s for %s", path,
                          (unsigned long long)t->info_offset, gname, t->ndim, (long long)t->ne[0],
                          (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], want,
                          hf_name);
    }
    if ((size_t)t->numel != n)
        return model_errf(err, errlen, "%s: tensor %s has %lld values, the caller expects %zu",
                          path, gname, (long long)t->numel, n);
    if (gguf_tensor_read_f32(f, t, dst, err, errlen)) return -1;
    const char *q = strstr(hf_name, ".self_attn.q_proj."), *k = strstr(hf_name, ".self_attn.k_proj.");
    if ((q || k) &&
        unpermute(dst, q ? c->num_attention_heads : c->num_key_value_heads, c->head_dim, shape[1]))
        return model_errf(err, errlen, "%s: out of memory reordering %s", path, gname);
    return 0;
}

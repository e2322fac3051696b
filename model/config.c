/* config.c — HF config.json of a LlamaForCausalLM (or a Mistral that computes
 * as one): load, validate, save.
 *
 * Parsing is strict on the keys the model uses (a value of the wrong type is
 * an error, never silently coerced) and ignores every other HF key, so a
 * config.json taken straight from the Hub loads. */
#include "model.h"
#include "model_util.h"

#include "kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* HF writes null for "use the default" (e.g. num_key_value_heads: null), so
 * an optional key that is null counts as absent. */
static json_t *optional_key(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    return (v && json_is_null(v)) ? NULL : v;
}

/* A positive int. Integral reals (64.0) are accepted because Python writers
 * sometimes emit them; 7.5, strings, booleans, <= 0 and > INT_MAX are not. */
static int get_positive_int(const json_t *v, const char *src, const char *key, int *out,
                            char *err, size_t errlen)
{
    double d;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i <= 0 || i > INT_MAX) {
            model_errf(err, errlen, "%s: %s must be a positive integer up to %d, got %lld", src,
                    key, INT_MAX, (long long)i);
            return -1;
        }
        *out = (int)i;
        return 0;
    }
    if (!json_is_real(v)) {
        model_errf(err, errlen, "%s: %s must be a positive integer, got %s", src, key,
                model_json_kind(v));
        return -1;
    }
    d = json_real_value(v);
    if (d != floor(d) || d <= 0 || d > INT_MAX) {
        model_errf(err, errlen, "%s: %s must be a positive integer up to %d, got %g", src, key,
                INT_MAX, d);
        return -1;
    }
    *out = (int)d;
    return 0;
}

static int get_required_int(json_t *root, const char *src, const char *key, int *out,
                            char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        model_errf(err, errlen, "%s: required key %s is missing", src, key);
        return -1;
    }
    return get_positive_int(v, src, key, out, err, errlen);
}

static int get_optional_int(json_t *root, const char *src, const char *key, int *out,
                            char *err, size_t errlen)
{
    json_t *v = optional_key(root, key);
    return v ? get_positive_int(v, src, key, out, err, errlen) : 0;
}

/* Range and sign are llama_config_validate's job; here only the type. */
static int get_optional_float(json_t *root, const char *src, const char *key, float *out,
                              char *err, size_t errlen)
{
    json_t *v = optional_key(root, key);
    if (!v)
        return 0;
    if (!json_is_number(v)) {
        model_errf(err, errlen, "%s: %s must be a number, got %s", src, key, model_json_kind(v));
        return -1;
    }
    double d = json_number_value(v);
    /* Converting an out-of-range double to float is undefined behaviour. */
    if (fabs(d) > FLT_MAX) {
        model_errf(err, errlen, "%s: %s (%g) is out of float32 range", src, key, d);
        return -1;
    }
    *out = (float)d;
    return 0;
}

static int get_optional_bool(json_t *root, const char *src, const char *key, bool *out,
                             char *err, size_t errlen)
{
    json_t *v = optional_key(root, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v)) {
        model_errf(err, errlen, "%s: %s must be true or false, got %s", src, key, model_json_kind(v));
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

static const char *const arch_names[] = {"LlamaForCausalLM", "MistralForCausalLM"};

/* The family: model_type when it is "llama" or "mistral" (what transformers'
 * AutoConfig goes by), else the first of the architectures we know. The
 * architectures list, if present, must name one of them. */
static int parse_family(json_t *root, const char *src, llama_arch *arch, char *err,
                        size_t errlen)
{
    json_t *v = optional_key(root, "architectures"), *item, *mt;
    size_t i;
    int listed = -1;
    *arch = LLAMA_ARCH_LLAMA;
    if (v) {
        if (!json_is_array(v)) {
            model_errf(err, errlen, "%s: architectures must be a list, got %s", src,
                    model_json_kind(v));
            return -1;
        }
        json_array_foreach(v, i, item) {
            for (int a = 0; a < 2 && listed < 0; a++)
                if (json_is_string(item) && strcmp(json_string_value(item), arch_names[a]) == 0)
                    listed = a;
        }
        if (listed < 0) {
            model_errf(err, errlen, "%s: architectures lists neither LlamaForCausalLM nor "
                    "MistralForCausalLM (only LLaMA-family models are supported)", src);
            return -1;
        }
        *arch = listed == 1 ? LLAMA_ARCH_MISTRAL : LLAMA_ARCH_LLAMA;
    }
    mt = optional_key(root, "model_type");
    if (mt && !json_is_string(mt)) {
        model_errf(err, errlen, "%s: model_type must be a string, got %s", src,
                model_json_kind(mt));
        return -1;
    }
    if (mt && strcmp(json_string_value(mt), "mistral") == 0)
        *arch = LLAMA_ARCH_MISTRAL;
    else if (mt && strcmp(json_string_value(mt), "llama") == 0)
        *arch = LLAMA_ARCH_LLAMA;
    return 0;
}

/* MistralConfig's sliding_window: absent means its default 4096, null means
 * none. Accepted only when it can never bind (every query sees at most
 * max_position_embeddings keys), so the network is plain causal LLaMA. */
static int check_sliding_window(json_t *root, const llama_config *cfg, const char *src,
                                char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "sliding_window");
    int w = 4096;
    if (cfg->arch != LLAMA_ARCH_MISTRAL || (v && json_is_null(v)))
        return 0;
    if (v && get_positive_int(v, src, "sliding_window", &w, err, errlen))
        return -1;
    if (w < cfg->max_position_embeddings) {
        model_errf(err, errlen, "%s: sliding_window %d%s < max_position_embeddings %d: "
                "sliding-window attention is not supported", src, w,
                v ? "" : " (MistralConfig's default, the key is absent)",
                cfg->max_position_embeddings);
        return -1;
    }
    return 0;
}

static int parse_config(llama_config *cfg, json_t *root, const char *src, char *err,
                        size_t errlen)
{
    static const struct { const char *key; size_t off; } required[] = {
        {"hidden_size", offsetof(llama_config, hidden_size)},
        {"intermediate_size", offsetof(llama_config, intermediate_size)},
        {"num_hidden_layers", offsetof(llama_config, num_hidden_layers)},
        {"num_attention_heads", offsetof(llama_config, num_attention_heads)},
        {"vocab_size", offsetof(llama_config, vocab_size)},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        int *field = (int *)((char *)cfg + required[i].off);
        if (get_required_int(root, src, required[i].key, field, err, errlen))
            return -1;
    }
    if (parse_family(root, src, &cfg->arch, err, errlen))
        return -1;
    cfg->num_key_value_heads = cfg->num_attention_heads;
    cfg->max_position_embeddings = 2048;
    if (cfg->arch == LLAMA_ARCH_MISTRAL) {
        /* MistralConfig: an absent num_key_value_heads is 8 (null is "as many as
         * the heads"), max_position_embeddings 4096 * 32. */
        if (!json_object_get(root, "num_key_value_heads"))
            cfg->num_key_value_heads = 8;
        cfg->max_position_embeddings = 4096 * 32;
    }
    cfg->rms_norm_eps = 1e-6f;
    cfg->rope_theta = 10000.0f;
    cfg->tie_word_embeddings = false;
    if (get_optional_int(root, src, "num_key_value_heads", &cfg->num_key_value_heads, err,
                         errlen) ||
        get_optional_int(root, src, "max_position_embeddings",
                         &cfg->max_position_embeddings, err, errlen) ||
        get_optional_float(root, src, "rms_norm_eps", &cfg->rms_norm_eps, err, errlen) ||
        get_optional_float(root, src, "rope_theta", &cfg->rope_theta, err, errlen) ||
        get_optional_bool(root, src, "tie_word_embeddings", &cfg->tie_word_embeddings, err,
                          errlen))
        return -1;
    return check_sliding_window(root, cfg, src, err, errlen);
}

/* Newer HF configs spell head_dim out. The model derives it from the hidden
 * size, so a config whose head_dim differs describes a model we would get
 * silently wrong: refuse it. */
static int check_explicit_head_dim(json_t *root, const llama_config *cfg, const char *src,
                                   char *err, size_t errlen)
{
    json_t *v = optional_key(root, "head_dim");
    int hd;
    if (!v)
        return 0;
    if (get_positive_int(v, src, "head_dim", &hd, err, errlen))
        return -1;
    if (hd != cfg->head_dim) {
        model_errf(err, errlen, "%s: head_dim (%d) differs from hidden_size / "
                "num_attention_heads (%d), which this model requires", src, hd,
                cfg->head_dim);
        return -1;
    }
    return 0;
}

/* Keys this implementation does not model but which change the network: a
 * config that sets them would otherwise load as a silently different model. */
static int check_unsupported(json_t *root, const char *src, char *err, size_t errlen)
{
    json_t *v;
    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < sizeof biases / sizeof biases[0]; i++) {
        v = optional_key(root, biases[i]);
        if (v && !json_is_false(v)) {
            model_errf(err, errlen, "%s: %s must be false (bias terms are not supported)", src,
                    biases[i]);
            return -1;
        }
    }
    v = optional_key(root, "hidden_act");
    if (v && !(json_is_string(v) && strcmp(json_string_value(v), "silu") == 0)) {
        model_errf(err, errlen, "%s: hidden_act must be \"silu\" (the LLaMA MLP)", src);
        return -1;
    }
    return 0;
}

/* ---- rope_scaling ------------------------------------------------------------ */

static const char *const llama3_keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                          "original_max_position_embeddings"};

/* rope_type, or its older spelling type; both present must agree. */
static int rope_scaling_type(json_t *rs, const char *src, const char **type, char *err,
                             size_t errlen)
{
    static const char *const names[] = {"rope_type", "type"};
    const char *seen[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(rs, names[i]);
        if (!v) continue;
        if (!json_is_string(v)) {
            model_errf(err, errlen, "%s: rope_scaling.%s must be a string, got %s", src,
                    names[i], model_json_kind(v));
            return -1;
        }
        seen[i] = json_string_value(v);
    }
    if (!seen[0] && !seen[1]) {
        model_errf(err, errlen, "%s: rope_scaling has no rope_type (nor type)", src);
        return -1;
    }
    if (seen[0] && seen[1] && strcmp(seen[0], seen[1]) != 0) {
        model_errf(err, errlen, "%s: rope_scaling.rope_type (\"%.40s\") and rope_scaling.type "
                "(\"%.40s\") disagree", src, seen[0], seen[1]);
        return -1;
    }
    *type = seen[0] ? seen[0] : seen[1];
    return 0;
}

/* Any key of rs other than rope_type, type and the n in `allowed`. */
static int rope_scaling_extra_key(json_t *rs, const char *src, const char *type,
                                  const char *const *allowed, size_t n, char *err,
                                  size_t errlen)
{
    const char *key;
    json_t *v;
    json_object_foreach(rs, key, v) {
        bool known = strcmp(key, "rope_type") == 0 || strcmp(key, "type") == 0;
        for (size_t i = 0; i < n && !known; i++) known = strcmp(key, allowed[i]) == 0;
        if (!known) {
            model_errf(err, errlen, "%s: rope_scaling.%.60s is not a key of rope_type \"%s\"%s",
                    src, key, type, n ? " (its keys: factor, low_freq_factor, high_freq_factor, "
                    "original_max_position_embeddings)" : "");
            return -1;
        }
    }
    return 0;
}

/* HF's rope_scaling: null or absent, {"rope_type": "default"} (plain RoPE),
 * or Llama 3.1's {"rope_type": "llama3", factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings}; ranges are
 * llama_config_validate's job. */
static int parse_rope_scaling(json_t *root, llama_config *cfg, const char *src, char *err,
                              size_t errlen)
{
    json_t *rs = optional_key(root, "rope_scaling");
    const char *type;
    llama_rope_scaling r = {.llama3 = true};
    if (!rs)
        return 0;
    if (!json_is_object(rs)) {
        model_errf(err, errlen, "%s: rope_scaling must be an object or null, got %s", src,
                model_json_kind(rs));
        return -1;
    }
    if (rope_scaling_type(rs, src, &type, err, errlen))
        return -1;
    if (strcmp(type, "default") == 0)
        return rope_scaling_extra_key(rs, src, type, NULL, 0, err, errlen);
    if (cfg->arch == LLAMA_ARCH_MISTRAL) {
        model_errf(err, errlen, "%s: rope_scaling type \"%.40s\" in a Mistral config is not "
                "supported (transformers' MistralForCausalLM ignores it or applies it, by "
                "version; null for plain RoPE)", src, type);
        return -1;
    }
    if (strcmp(type, "llama3") != 0) {
        model_errf(err, errlen, "%s: rope_scaling type \"%.40s\" is not supported (only "
                "\"llama3\", Llama 3.1/3.2's; null for plain RoPE)", src, type);
        return -1;
    }
    if (rope_scaling_extra_key(rs, src, type, llama3_keys, 4, err, errlen))
        return -1;
    double *reals[] = {&r.factor, &r.low_freq_factor, &r.high_freq_factor};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(rs, llama3_keys[i]);
        char name[64];
        snprintf(name, sizeof name, "rope_scaling.%s", llama3_keys[i]);
        if (!v) {
            model_errf(err, errlen, "%s: %s is missing (rope_type \"llama3\" needs it)", src,
                    name);
            return -1;
        }
        if (i == 3) {
            if (get_positive_int(v, src, name, &r.original_max_position_embeddings, err,
                                 errlen))
                return -1;
        } else if (!json_is_number(v)) {
            model_errf(err, errlen, "%s: %s must be a number, got %s", src, name,
                    model_json_kind(v));
            return -1;
        } else {
            *reals[i] = json_number_value(v);
        }
    }
    cfg->rope_scaling = r;
    return 0;
}

/* Range checks of a llama3 rope_scaling (see llama_rope_inv_freq's
 * divisions). */
static int validate_rope_scaling(const llama_rope_scaling *r, const char *src, char *err,
                                 size_t errlen)
{
    if (!r->llama3)
        return 0;
    if (!(r->factor >= 1.0) || !(r->factor <= FLT_MAX)) {
        model_errf(err, errlen, "%s: rope_scaling.factor must be a finite number >= 1, got %g",
                src, r->factor);
        return -1;
    }
    if (!(r->low_freq_factor > 0) || !(r->low_freq_factor <= FLT_MAX)) {
        model_errf(err, errlen, "%s: rope_scaling.low_freq_factor must be positive and finite, "
                "got %g", src, r->low_freq_factor);
        return -1;
    }
    if (!(r->high_freq_factor > r->low_freq_factor) || !(r->high_freq_factor <= FLT_MAX)) {
        model_errf(err, errlen, "%s: rope_scaling.high_freq_factor (%g) must be finite and "
                "greater than low_freq_factor (%g)", src, r->high_freq_factor,
                r->low_freq_factor);
        return -1;
    }
    if (r->original_max_position_embeddings <= 0) {
        model_errf(err, errlen, "%s: rope_scaling.original_max_position_embeddings must be "
                "positive, got %d", src, r->original_max_position_embeddings);
        return -1;
    }
    return 0;
}

/* A double as torch casts a Python scalar for a float32 operation (finite
 * values past float32's range become infinities, never undefined). */
static float to_f32(double d)
{
    return d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
}

/* transformers 4.46's _compute_llama3_parameters, operation by operation in
 * float32: a Python scalar divided by a tensor is reciprocal() * scalar,
 * comparisons against a scalar cast it to float32, one float32 rounding per
 * operation (each on its own line: no contraction into an FMA). */
void llama_rope_inv_freq(const llama_config *cfg, float *inv_freq)
{
    const llama_rope_scaling *r = &cfg->rope_scaling;
    rope_inv_freq(inv_freq, cfg->head_dim, cfg->rope_theta);
    if (!r->llama3)
        return;
    double old = r->original_max_position_embeddings;
    float factor = to_f32(r->factor), low = to_f32(r->low_freq_factor), oldf = to_f32(old);
    float span = to_f32(r->high_freq_factor - r->low_freq_factor);
    float low_wavelen = to_f32(old / r->low_freq_factor);
    float high_wavelen = to_f32(old / r->high_freq_factor);
    float two_pi = (float)6.283185307179586;
    for (int i = 0; i < cfg->head_dim / 2; i++) {
        float f = inv_freq[i];
        float wavelen = 1.0f / f;
        wavelen = wavelen * two_pi;
        float scaled = wavelen > low_wavelen ? f / factor : f;
        float smooth = 1.0f / wavelen;
        smooth = smooth * oldf;
        smooth = smooth - low;
        smooth = smooth / span;
        float a = 1.0f - smooth;
        a = a * scaled;
        a = a / factor;
        float b = smooth * scaled;
        bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        inv_freq[i] = medium ? a + b : scaled;
    }
}

int llama_rope_tables(const llama_config *cfg, float *cos_tab, float *sin_tab, int T)
{
    float *inv = malloc((size_t)(cfg->head_dim / 2 > 0 ? cfg->head_dim / 2 : 1) * sizeof *inv);
    if (!inv)
        return -1;
    llama_rope_inv_freq(cfg, inv);
    rope_tables_freq(cos_tab, sin_tab, T, cfg->head_dim, inv);
    free(inv);
    return 0;
}

int llama_config_load(llama_config *cfg, const char *path, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    llama_config c;
    int rc = -1;

    memset(&c, 0, sizeof c);
    if (!root) {
        if (json_error_code(&jerr) == json_error_cannot_open_file)
            model_errf(err, errlen, "%s: cannot read: %s", path, jerr.text);
        else
            model_errf(err, errlen, "%s: invalid JSON at line %d, column %d: %s", path,
                    jerr.line, jerr.column, jerr.text);
        return -1;
    }
    if (!json_is_object(root))
        model_errf(err, errlen, "%s: expected a JSON object, got %s", path, model_json_kind(root));
    else if (parse_config(&c, root, path, err, errlen) == 0 &&
             llama_config_validate(&c, path, err, errlen) == 0 &&
             check_explicit_head_dim(root, &c, path, err, errlen) == 0 &&
             check_unsupported(root, path, err, errlen) == 0 &&
             parse_rope_scaling(root, &c, path, err, errlen) == 0 &&
             validate_rope_scaling(&c.rope_scaling, path, err, errlen) == 0) {
        *cfg = c;
        rc = 0;
    }
    json_decref(root);
    return rc;
}

static int check_positive(int v, const char *src, const char *key, char *err, size_t errlen)
{
    if (v > 0)
        return 0;
    model_errf(err, errlen, "%s: %s must be positive, got %d", src, key, v);
    return -1;
}

int llama_config_validate(llama_config *cfg, const char *src, char *err, size_t errlen)
{
    if (check_positive(cfg->hidden_size, src, "hidden_size", err, errlen) ||
        check_positive(cfg->intermediate_size, src, "intermediate_size", err, errlen) ||
        check_positive(cfg->num_hidden_layers, src, "num_hidden_layers", err, errlen) ||
        check_positive(cfg->num_attention_heads, src, "num_attention_heads", err, errlen) ||
        check_positive(cfg->num_key_value_heads, src, "num_key_value_heads", err, errlen) ||
        check_positive(cfg->vocab_size, src, "vocab_size", err, errlen) ||
        check_positive(cfg->max_position_embeddings, src, "max_position_embeddings", err,
                       errlen))
        return -1;
    if (cfg->num_hidden_layers > LLAMA_MAX_LAYERS) {
        model_errf(err, errlen, "%s: num_hidden_layers is %d, more than the %d this build takes",
                   src, cfg->num_hidden_layers, LLAMA_MAX_LAYERS);
        return -1;
    }
    if (cfg->hidden_size % cfg->num_attention_heads != 0) {
        model_errf(err, errlen, "%s: num_attention_heads (%d) does not divide hidden_size (%d)",
                src, cfg->num_attention_heads, cfg->hidden_size);
        return -1;
    }
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0) {
        model_errf(err, errlen, "%s: num_key_value_heads (%d) does not divide "
                "num_attention_heads (%d)", src, cfg->num_key_value_heads,
                cfg->num_attention_heads);
        return -1;
    }
    int head_dim = cfg->hidden_size / cfg->num_attention_heads;
    if (head_dim % 2 != 0) {
        model_errf(err, errlen, "%s: head dimension hidden_size / num_attention_heads = %d / %d "
                "= %d, which must be even for rotary embeddings", src, cfg->hidden_size,
                cfg->num_attention_heads, head_dim);
        return -1;
    }
    /* !(x > 0) also catches NaN. */
    if (!(cfg->rms_norm_eps > 0) || !isfinite(cfg->rms_norm_eps)) {
        model_errf(err, errlen, "%s: rms_norm_eps must be positive and finite in float32, got %g",
                src, (double)cfg->rms_norm_eps);
        return -1;
    }
    if (!(cfg->rope_theta > 0) || !isfinite(cfg->rope_theta)) {
        model_errf(err, errlen, "%s: rope_theta must be positive and finite in float32, got %g",
                src, (double)cfg->rope_theta);
        return -1;
    }
    if (validate_rope_scaling(&cfg->rope_scaling, src, err, errlen))
        return -1;
    if (cfg->arch != LLAMA_ARCH_LLAMA && cfg->arch != LLAMA_ARCH_MISTRAL) {
        model_errf(err, errlen, "%s: unknown architecture family %d", src, (int)cfg->arch);
        return -1;
    }
    if (cfg->arch == LLAMA_ARCH_MISTRAL && cfg->rope_scaling.llama3) {
        model_errf(err, errlen, "%s: rope_scaling \"llama3\" is not supported in a Mistral "
                "config", src);
        return -1;
    }
    cfg->head_dim = head_dim;
    return 0;
}

/* ---- save ------------------------------------------------------------------ */

/* The shortest decimal that reads back as the same float, so the file says
 * 1e-06 rather than 9.99999997e-07 (what HF itself writes). */
static double shortest_decimal(float f)
{
    char buf[32];
    for (int digits = 1; digits < 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return (double)f;
}

static int add(json_t *obj, const char *key, json_t *value)
{
    return json_object_set_new(obj, key, value);
}

static json_t *config_to_json(const llama_config *c)
{
    bool mistral = c->arch == LLAMA_ARCH_MISTRAL;
    json_t *o = json_object(), *arch = json_array();
    int bad = !o || !arch || json_array_append_new(arch, json_string(arch_names[mistral]));
    bad |= add(o, "architectures", arch);
    bad |= add(o, "model_type", json_string(mistral ? "mistral" : "llama"));
    /* The window never bound (load checked it): none is the same network. */
    if (mistral)
        bad |= add(o, "sliding_window", json_null());
    bad |= add(o, "torch_dtype", json_string("float32"));
    bad |= add(o, "hidden_act", json_string("silu"));
    bad |= add(o, "hidden_size", json_integer(c->hidden_size));
    bad |= add(o, "intermediate_size", json_integer(c->intermediate_size));
    bad |= add(o, "num_hidden_layers", json_integer(c->num_hidden_layers));
    bad |= add(o, "num_attention_heads", json_integer(c->num_attention_heads));
    bad |= add(o, "num_key_value_heads", json_integer(c->num_key_value_heads));
    bad |= add(o, "head_dim", json_integer(c->head_dim));
    bad |= add(o, "vocab_size", json_integer(c->vocab_size));
    bad |= add(o, "max_position_embeddings", json_integer(c->max_position_embeddings));
    bad |= add(o, "rms_norm_eps", json_real(shortest_decimal(c->rms_norm_eps)));
    bad |= add(o, "rope_theta", json_real(shortest_decimal(c->rope_theta)));
    bad |= add(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    if (c->rope_scaling.llama3) {
        const llama_rope_scaling *r = &c->rope_scaling;
        json_t *rs = json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3",
                               "factor", r->factor, "low_freq_factor", r->low_freq_factor,
                               "high_freq_factor", r->high_freq_factor,
                               "original_max_position_embeddings",
                               r->original_max_position_embeddings);
        bad |= !rs || add(o, "rope_scaling", rs);
    } else {
        bad |= add(o, "rope_scaling", json_null());
    }
    /* HF's defaults too, spelled out so no reader has to guess them. */
    bad |= add(o, "attention_bias", json_false());
    bad |= add(o, "mlp_bias", json_false());
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int llama_config_save(const llama_config *cfg, const char *path, char *err, size_t errlen)
{
    llama_config c = *cfg;
    json_t *root;
    char *text;
    int rc;

    /* Never write a file our own loader (or HF) would refuse. */
    if (llama_config_validate(&c, path, err, errlen))
        return -1;
    /* The file carries reals with 9 significant digits (what float32 needs);
     * rope_scaling's are doubles: refuse one that would read back changed. */
    if (c.rope_scaling.llama3) {
        const double v[] = {c.rope_scaling.factor, c.rope_scaling.low_freq_factor,
                            c.rope_scaling.high_freq_factor};
        for (int i = 0; i < 3; i++) {
            char buf[40];
            snprintf(buf, sizeof buf, "%.9g", v[i]);
            if (strtod(buf, NULL) != v[i]) {
                model_errf(err, errlen, "%s: rope_scaling.%s (%.17g) needs more than 9 "
                        "significant digits, which config.json is written with", path,
                        llama3_keys[i], v[i]);
                return -1;
            }
        }
    }
    root = config_to_json(&c);
    text = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(root);
    if (!text) {
        model_errf(err, errlen, "%s: out of memory encoding the config", path);
        return -1;
    }
    size_t len = strlen(text);
    /* json_dumps leaves no final newline; text files end with one. */
    char *with_nl = realloc(text, len + 2);
    if (!with_nl) {
        free(text);
        model_errf(err, errlen, "%s: out of memory encoding the config", path);
        return -1;
    }
    with_nl[len] = '\n';
    with_nl[len + 1] = '\0';
    atomic_file f;
    rc = atomic_file_begin(&f, path, err, errlen);
    if (rc == 0) {
        atomic_file_write(&f, with_nl, len + 1);
        rc = atomic_file_commit(&f, err, errlen);
    }
    free(with_nl);
    return rc;
}

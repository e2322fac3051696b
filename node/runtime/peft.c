/* peft.c — the adapters of a LoRA job handed out as Hugging Face PEFT reads
 * them, and read back:
 *
 *   - a PEFT adapter directory: adapter_config.json (LoraConfig's fields as
 *     PEFT 0.13 saves them) and adapter_model.safetensors (PEFT's names,
 *     base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight, ...),
 *     plus the job's tokenizer.json;
 *   - with merge, a whole HF model directory: every targeted projection
 *     W0 + scaling B A (W0 of an NF4 base dequantized), config.json,
 *     tokenizer.json (and the base's tokenizer_config.json).
 *
 * The adapters come from the single process's OUT/adapter_model.safetensors
 * or from a pipeline's stage files (stage-NAME.safetensors, each holding
 * the adapters of its layers). */
#define _DEFAULT_SOURCE /* realpath */
#include "node_base.h"
#include "runtime.h"

#include <errno.h>
#include <limits.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Every adapter of the whole model in PEFT's order (layer, module, A then
 * B), with its data once read. */
typedef struct {
    char name[96];
    int64_t shape[2];
    float *data;
} peft_tensor;

static void free_tensors(peft_tensor *t, int n)
{
    for (int i = 0; t && i < n; i++) free(t[i].data);
    free(t);
}

static int adapter_list(const llama_config *cfg, const stage_lora *lora, peft_tensor **out,
                        int *n, char *err, size_t errlen)
{
    int cap = cfg->num_hidden_layers * STAGE_LORA_MODULES * 2;
    peft_tensor *t = calloc((size_t)cap + 1, sizeof *t);
    if (!t) return node_errf(err, errlen, "out of memory");
    int k = 0;
    for (int l = 0; l < cfg->num_hidden_layers; l++)
        for (int m = 0; m < STAGE_LORA_MODULES; m++) {
            if (!(lora->modules & (1u << m))) continue;
            int o, in;
            stage_lora_module_shape(cfg, m, &o, &in);
            for (int b = 0; b < 2; b++, k++) {
                stage_lora_adapter_name(t[k].name, sizeof t[k].name, l, m, b);
                t[k].shape[0] = b ? o : lora->r;
                t[k].shape[1] = b ? lora->r : in;
            }
        }
    *out = t;
    *n = k;
    return 0;
}

/* Reads every adapter from the files (each from the first that holds it). */
static int read_adapters(peft_tensor *t, int n, safetensors_file **files, int nfiles,
                         const char *where, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        int from = -1;
        for (int f = 0; f < nfiles && from < 0; f++)
            if (safetensors_find(files[f], t[i].name)) from = f;
        if (from < 0)
            return node_errf(err, errlen, "%s: no file holds adapter %s", where, t[i].name);
        size_t numel = (size_t)t[i].shape[0] * (size_t)t[i].shape[1];
        if (!(t[i].data = malloc(numel * sizeof *t[i].data)))
            return node_errf(err, errlen, "%s: out of memory", where);
        if (safetensors_read_f32(files[from], t[i].name, 2, t[i].shape, t[i].data, err, errlen))
            return -1;
    }
    return 0;
}

int peft_config_write(const char *path, const job_spec *j, char *err, size_t errlen)
{
    const stage_lora *l = &j->lora;
    json_t *mods = json_array();
    for (int m = 0; mods && m < STAGE_LORA_MODULES; m++)
        if (l->modules & (1u << m)) json_array_append_new(mods, json_string(stage_lora_module_name(m)));
    /* an integral alpha as an integer, as PEFT writes its int default */
    json_t *alpha = l->alpha == floor(l->alpha) && l->alpha < 1e15
                        ? json_integer((json_int_t)l->alpha)
                        : json_real(l->alpha);
    /* absolute when it exists: a path relative to where export ran would
     * mean nothing elsewhere */
    const char *base = j->base_model ? j->base_model : j->init_weights;
    char abs[PATH_MAX];
    if (base && realpath(base, abs)) base = abs;
    json_t *o = json_object();
    if (!o || !mods || !alpha) {
        json_decref(o);
        json_decref(mods);
        json_decref(alpha);
        return node_errf(err, errlen, "%s: out of memory", path);
    }
    /* LoraConfig's fields in the order PEFT 0.13's to_dict gives them:
     * from_pretrained passes every key to LoraConfig(...), so no other key
     * may appear */
    json_object_set_new(o, "alpha_pattern", json_object());
    json_object_set_new(o, "auto_mapping", json_null());
    json_object_set_new(o, "base_model_name_or_path", base ? json_string(base) : json_null());
    json_object_set_new(o, "bias", json_string("none"));
    json_object_set_new(o, "fan_in_fan_out", json_false());
    json_object_set_new(o, "inference_mode", json_true());
    json_object_set_new(o, "init_lora_weights", json_true());
    json_object_set_new(o, "layer_replication", json_null());
    json_object_set_new(o, "layers_pattern", json_null());
    json_object_set_new(o, "layers_to_transform", json_null());
    json_object_set_new(o, "loftq_config", json_object());
    json_object_set_new(o, "lora_alpha", alpha);
    json_object_set_new(o, "lora_dropout", json_real(j->lora_dropout));
    json_object_set_new(o, "megatron_config", json_null());
    json_object_set_new(o, "megatron_core", json_string("megatron.core"));
    json_object_set_new(o, "modules_to_save", json_null());
    json_object_set_new(o, "peft_type", json_string("LORA"));
    json_object_set_new(o, "r", json_integer(l->r));
    json_object_set_new(o, "rank_pattern", json_object());
    json_object_set_new(o, "revision", json_null());
    json_object_set_new(o, "target_modules", mods);
    json_object_set_new(o, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(o, "use_dora", json_false());
    json_object_set_new(o, "use_rslora", json_boolean(l->use_rslora));
    int rc = node_write_json(path, o, 0644, err, errlen);
    json_decref(o);
    return rc;
}

/* A key of adapter_config.json that must hold a value shardnode computes
 * alike (or be absent). */
static int refuse_unless(json_t *o, const char *path, const char *key, bool ok, const char *want,
                         char *err, size_t errlen)
{
    if (!json_object_get(o, key) || ok) return 0;
    return node_errf(err, errlen, "%s: \"%s\" must be %s (shardnode merges plain LoRA only)",
                     path, key, want);
}

static bool empty_or_null(json_t *v)
{
    return !v || json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0);
}

int peft_config_read(const char *path, stage_lora *out, char *err, size_t errlen)
{
    json_t *o = node_load_json(path, err, errlen);
    if (!o) return -1;
    int rc = -1;
    memset(out, 0, sizeof *out);
    const char *type = node_json_str(o, "peft_type");
    json_t *r = json_object_get(o, "r"), *alpha = json_object_get(o, "lora_alpha");
    json_t *tm = json_object_get(o, "target_modules"), *rs = json_object_get(o, "use_rslora");
    if (!type || strcmp(type, "LORA") != 0) {
        node_errf(err, errlen, "%s: \"peft_type\" is %s%s%s, not \"LORA\"", path,
                  type ? "\"" : "", type ? type : "missing", type ? "\"" : "");
        goto done;
    }
    if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 65536) {
        node_errf(err, errlen, "%s: \"r\" must be an integer in [1, 65536]", path);
        goto done;
    }
    if (!json_is_number(alpha)) {
        node_errf(err, errlen, "%s: \"lora_alpha\" must be a number", path);
        goto done;
    }
    if (rs && !json_is_boolean(rs) && !json_is_null(rs)) {
        node_errf(err, errlen, "%s: \"use_rslora\" must be true or false", path);
        goto done;
    }
    json_t *fan = json_object_get(o, "fan_in_fan_out"), *dora = json_object_get(o, "use_dora");
    const char *bias = node_json_str(o, "bias");
    if (refuse_unless(o, path, "fan_in_fan_out", json_is_false(fan) || json_is_null(fan),
                      "false", err, errlen) ||
        refuse_unless(o, path, "use_dora", json_is_false(dora) || json_is_null(dora), "false",
                      err, errlen) ||
        refuse_unless(o, path, "bias", bias && strcmp(bias, "none") == 0, "\"none\"", err,
                      errlen) ||
        refuse_unless(o, path, "rank_pattern", empty_or_null(json_object_get(o, "rank_pattern")),
                      "empty", err, errlen) ||
        refuse_unless(o, path, "alpha_pattern",
                      empty_or_null(json_object_get(o, "alpha_pattern")), "empty", err, errlen) ||
        refuse_unless(o, path, "layers_to_transform",
                      empty_or_null(json_object_get(o, "layers_to_transform")), "null", err,
                      errlen) ||
        refuse_unless(o, path, "modules_to_save",
                      empty_or_null(json_object_get(o, "modules_to_save")), "null", err, errlen) ||
        refuse_unless(o, path, "layer_replication",
                      empty_or_null(json_object_get(o, "layer_replication")), "null", err,
                      errlen))
        goto done;
    if (json_is_string(tm) && strcmp(json_string_value(tm), "all-linear") == 0) {
        out->modules = (1u << STAGE_LORA_MODULES) - 1;
    } else if (json_is_array(tm) && json_array_size(tm) > 0) {
        for (size_t i = 0; i < json_array_size(tm); i++) {
            const char *name = json_string_value(json_array_get(tm, i));
            int m = 0;
            while (name && m < STAGE_LORA_MODULES && strcmp(stage_lora_module_name(m), name))
                m++;
            if (!name || m == STAGE_LORA_MODULES) {
                node_errf(err, errlen, "%s: \"target_modules\" entry %zu is not one of q_proj, "
                          "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj", path, i);
                goto done;
            }
            out->modules |= 1u << m;
        }
    } else {
        node_errf(err, errlen, "%s: \"target_modules\" must be a non-empty list of module names "
                  "or \"all-linear\"", path);
        goto done;
    }
    out->r = (int)json_integer_value(r);
    out->alpha = json_number_value(alpha);
    out->use_rslora = rs && json_is_true(rs);
    if (stage_lora_check(out, err, errlen)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", err);
        node_errf(err, errlen, "%s: %s", path, msg);
        goto done;
    }
    rc = 0;
done:
    json_decref(o);
    return rc;
}

/* Copies a small text file (the base's tokenizer_config.json) if it exists. */
static int copy_if_present(const char *from, const char *to, char *err, size_t errlen)
{
    FILE *f = fopen(from, "rb");
    if (!f) return errno == ENOENT ? 0 : node_errf(err, errlen, "%s: %s", from, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            char *nb = cap < (64u << 20) ? realloc(buf, cap = cap ? 2 * cap : 65536) : NULL;
            if (!nb) {
                free(buf);
                fclose(f);
                return node_errf(err, errlen, "%s: too large or out of memory", from);
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    atomic_file af;
    int rc = -1;
    if (bad) node_errf(err, errlen, "%s: read error", from);
    else if (atomic_file_begin(&af, to, err, errlen) == 0) {
        atomic_file_write(&af, buf, len);
        rc = atomic_file_commit(&af, err, errlen);
    }
    free(buf);
    return rc;
}

/* The whole model with the adapters merged into OUT/model.safetensors. */
static int write_merged(const job_spec *j, const llama_config *cfg, peft_tensor *t, int n,
                        const char *out, char *err, size_t errlen)
{
    char path[4400];
    stage *s = NULL;
    uint64_t params = 0;
    int rc = -1;
    if (stage_create_lora(&s, cfg, 0, cfg->num_hidden_layers, true, true, 1, 1, 1, &j->lora,
                          err, errlen) ||
        job_init_stage(j, cfg, s, err, errlen))
        goto done;
    for (int i = 0; i < n; i++) {
        float *dst = stage_param_data(s, t[i].name);
        if (!dst) {
            node_errf(err, errlen, "%s: the model has no adapter %s", out, t[i].name);
            goto done;
        }
        memcpy(dst, t[i].data, (size_t)t[i].shape[0] * (size_t)t[i].shape[1] * sizeof *dst);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    if (stage_lora_write_merged(s, path, &params, err, errlen)) goto done;
    printf("export: %s/model.safetensors: %.2fM parameters, adapters merged (W0 + %g B A%s)\n",
           out, 1e-6 * (double)params, (double)stage_lora_scaling(&j->lora),
           j->base_nf4 ? ", W0 the NF4 base dequantized" : "");
    rc = 0;
done:
    stage_free(s);
    return rc;
}

int peft_export(const job_spec *j, const llama_config *cfg, const char *stage_dir,
                const char *const *names, int nstages, const char *out, bool merge, char *err,
                size_t errlen)
{
    char path[4400];
    safetensors_file *files[SPLIT_MAX_STAGES] = {0};
    peft_tensor *t = NULL;
    tokenizer *tok = NULL;
    int nt = 0, nfiles = nstages > 0 ? nstages : 1, rc = -1;
    if (!j->has_lora) return node_errf(err, errlen, "%s: the job has no \"lora\"", j->path);
    if (nstages > SPLIT_MAX_STAGES)
        return node_errf(err, errlen, "export: %d stages", nstages);
    for (int i = 0; i < nfiles; i++) {
        if (nstages > 0)
            snprintf(path, sizeof path, "%s/stage-%s.safetensors", stage_dir, names[i]);
        else
            snprintf(path, sizeof path, "%s/adapter_model.safetensors", stage_dir);
        if (safetensors_open(&files[i], path, err, errlen)) goto done;
    }
    if (adapter_list(cfg, &j->lora, &t, &nt, err, errlen) ||
        read_adapters(t, nt, files, nfiles, stage_dir, err, errlen))
        goto done;
    for (int i = 0; i < nfiles; i++) {   /* the stage files may be replaced below */
        safetensors_close(files[i]);
        files[i] = NULL;
    }
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        node_errf(err, errlen, "%s: cannot create: %s", out, strerror(errno));
        goto done;
    }
    if (merge) {
        if (write_merged(j, cfg, t, nt, out, err, errlen)) goto done;
        snprintf(path, sizeof path, "%s/config.json", out);
        if (llama_config_save(cfg, path, err, errlen)) goto done;
        if (j->base_model) {
            char from[4400];
            snprintf(from, sizeof from, "%s/tokenizer_config.json", j->base_model);
            snprintf(path, sizeof path, "%s/tokenizer_config.json", out);
            if (copy_if_present(from, path, err, errlen)) goto done;
        }
    } else {
        safetensors_entry *e = calloc((size_t)nt + 1, sizeof *e);
        if (!e) {
            node_errf(err, errlen, "%s: out of memory", out);
            goto done;
        }
        for (int i = 0; i < nt; i++)
            e[i] = (safetensors_entry){t[i].name, SAFETENSORS_F32, 2,
                                       {t[i].shape[0], t[i].shape[1]}, t[i].data};
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", out);
        int w = safetensors_write(path, e, nt, err, errlen);
        free(e);
        snprintf(path, sizeof path, "%s/adapter_config.json", out);
        if (w || peft_config_write(path, j, err, errlen)) goto done;
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    if (tokenizer_load(&tok, j->tokenizer, err, errlen) ||
        tokenizer_save(tok, path, err, errlen))
        goto done;
    if (merge)
        printf("export: %s: model.safetensors, config.json, tokenizer.json (a whole HF model)\n",
               out);
    else
        printf("export: %d adapters (r %d, %s%s) from %d %s into %s: adapter_model.safetensors, "
               "adapter_config.json, tokenizer.json (PEFT)\n", nt / 2, j->lora.r,
               j->base_nf4 ? "NF4 base" : "fp32 base", j->lora.use_rslora ? ", rslora" : "",
               nfiles, nstages > 0 ? "stage files" : "adapter file", out);
    rc = 0;
done:
    for (int i = 0; i < SPLIT_MAX_STAGES; i++) safetensors_close(files[i]);
    free_tensors(t, nt);
    tokenizer_free(tok);
    return rc;
}

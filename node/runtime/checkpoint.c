/* checkpoint.c — everything a run needs to continue bit for bit: weights,
 * both AdamW moments, the number of completed steps, the model config and
 * the job, in one safetensors file written through atomic_file. Data order
 * needs no state of its own: every batch is a function of (seed, step,
 * micro-batch), so the step count is the data position, and there is no
 * other randomness in a step. */
#include "runtime.h"

#include "node_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_FORMAT "shardnode-checkpoint-1"

static const char *const kind_prefix[3] = {"", "optim.exp_avg.", "optim.exp_avg_sq."};

static float *kind_buffer(stage *s, int kind)
{
    return kind == 0 ? stage_params(s) : kind == 1 ? stage_moment1(s) : stage_moment2(s);
}

void checkpoint_config_string(const llama_config *c, char *buf, size_t len)
{
    snprintf(buf, len,
             "hidden_size=%d,intermediate_size=%d,num_hidden_layers=%d,num_attention_heads=%d,"
             "num_key_value_heads=%d,vocab_size=%d,max_position_embeddings=%d,rms_norm_eps=%.9g,"
             "rope_theta=%.9g,tie_word_embeddings=%d",
             c->hidden_size, c->intermediate_size, c->num_hidden_layers,
             c->num_attention_heads, c->num_key_value_heads, c->vocab_size,
             c->max_position_embeddings, (double)c->rms_norm_eps, (double)c->rope_theta,
             (int)c->tie_word_embeddings);
    /* only when set: strings of plain-RoPE configs stay what older
     * checkpoints carry */
    const llama_rope_scaling *r = &c->rope_scaling;
    size_t used = strlen(buf);
    if (r->llama3 && used < len)
        snprintf(buf + used, len - used,
                 ",rope_scaling=llama3,rope_factor=%.17g,rope_low_freq_factor=%.17g,"
                 "rope_high_freq_factor=%.17g,rope_original_max_position_embeddings=%d",
                 r->factor, r->low_freq_factor, r->high_freq_factor,
                 r->original_max_position_embeddings);
}

/* Whether a stage of the chain holds the embedding itself (a first stage). */
static bool chain_holds_embedding(const chain *c)
{
    for (int i = 0; i < c->plan.nstages; i++)
        for (int k = 0; k < stage_param_count(c->stages[i]); k++) {
            const stage_param *p = stage_param_at(c->stages[i], k);
            if (!p->tied_copy && strcmp(p->name, "model.embed_tokens.weight") == 0) return true;
        }
    return false;
}

int checkpoint_save(const char *path, chain *c, long step, const char *job_text, char *err,
                    size_t errlen)
{
    int cap = 0, n = 0;
    for (int i = 0; i < c->plan.nstages; i++) cap += 3 * stage_param_count(c->stages[i]);
    safetensors_entry *e = calloc((size_t)cap, sizeof *e);
    char (*names)[128] = calloc((size_t)cap, sizeof *names);
    if (!e || !names) {
        free(e);
        free(names);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int kind = 0; kind < 3; kind++)
        for (int i = 0; i < c->plan.nstages; i++)
            for (int k = 0; k < stage_param_count(c->stages[i]); k++) {
                const stage_param *p = stage_param_at(c->stages[i], k);
                /* the head's copy of a tied embedding is the embedding: saved
                 * once, from the first stage, unless the chain lacks it (one
                 * pipeline stage's state) */
                if (p->tied_copy && chain_holds_embedding(c)) continue;
                snprintf(names[n], sizeof names[n], "%s%s", kind_prefix[kind], p->name);
                e[n] = (safetensors_entry){names[n], SAFETENSORS_F32, p->ndim,
                                           {p->shape[0], p->shape[1]},
                                           kind_buffer(c->stages[i], kind) + p->offset};
                n++;
            }
    char steps[32], cfg[512];
    snprintf(steps, sizeof steps, "%ld", step);
    checkpoint_config_string(&c->cfg, cfg, sizeof cfg);
    const char *meta[] = {"shardnode", CKPT_FORMAT, "step", steps, "config", cfg,
                          "job", job_text ? job_text : "", NULL};
    int rc = safetensors_write_meta(path, e, n, meta, err, errlen);
    free(e);
    free(names);
    return rc;
}

/* Names the first field that differs between two config strings. */
static void config_difference(const char *a, const char *b, char *out, size_t len)
{
    char x[512], y[512];
    snprintf(x, sizeof x, "%s", a);
    snprintf(y, sizeof y, "%s", b);
    char *sx, *sy, *tx = strtok_r(x, ",", &sx), *ty = strtok_r(y, ",", &sy);
    while (tx && ty && strcmp(tx, ty) == 0) {
        tx = strtok_r(NULL, ",", &sx);
        ty = strtok_r(NULL, ",", &sy);
    }
    snprintf(out, len, "checkpoint has %s, the job's model has %s", tx ? tx : "(nothing)",
             ty ? ty : "(nothing)");
}

/* Checks one checkpoint file's metadata against the chain's config and the
 * job; its step into *step. */
static int check_file(safetensors_file *f, const char *path, const chain *c, const job_spec *job,
                      long *step, char *err, size_t errlen)
{
    const char *format = safetensors_metadata(f, "shardnode");
    const char *steps = safetensors_metadata(f, "step");
    const char *cfg = safetensors_metadata(f, "config");
    char want[512], diff[1100];
    checkpoint_config_string(&c->cfg, want, sizeof want);
    char *end = NULL;
    long s = steps ? strtol(steps, &end, 10) : -1;
    if (!format || strcmp(format, CKPT_FORMAT) != 0)
        return node_errf(err, errlen, "%s: not a shardnode checkpoint (no \"shardnode\": \"%s\" "
                         "metadata)", path, CKPT_FORMAT);
    if (!steps || !end || *end || s < 0)
        return node_errf(err, errlen, "%s: checkpoint metadata \"step\" is missing or invalid",
                         path);
    if (!cfg || strcmp(cfg, want) != 0) {
        config_difference(cfg ? cfg : "", want, diff, sizeof diff);
        return node_errf(err, errlen, "%s: checkpoint is from a different model config: %s",
                         path, diff);
    }
    const char *saved_job = safetensors_metadata(f, "job");
    if (job && saved_job && *saved_job) {
        job_spec old;
        char what[256];
        if (job_parse(&old, path, saved_job, err, errlen)) return -1;
        int same = job_compare(&old, job, what, sizeof what);
        job_free(&old);
        if (same != 0)
            return node_errf(err, errlen, "%s: the job changed since this checkpoint (%s); "
                             "resume with the same job, or start a new out_dir", path, what);
    }
    *step = s;
    return 0;
}

int checkpoint_load_files(const char *const *paths, int n, chain *c, const job_spec *job,
                          long *step, char *err, size_t errlen)
{
    if (n < 1) return node_errf(err, errlen, "no checkpoint file to load");
    safetensors_file **f = calloc((size_t)n, sizeof *f);
    if (!f) return node_errf(err, errlen, "out of memory");
    int rc = -1;
    long s0 = -1;
    for (int i = 0; i < n; i++) {
        long s;
        if (safetensors_open(&f[i], paths[i], err, errlen) ||
            check_file(f[i], paths[i], c, job, &s, err, errlen))
            goto out;
        if (i && s != s0) {
            node_errf(err, errlen, "%s holds step %ld, %s step %ld: a stage's state comes from "
                      "one step", paths[i], s, paths[0], s0);
            goto out;
        }
        s0 = s;
    }
    for (int kind = 0; kind < 3; kind++)
        for (int i = 0; i < c->plan.nstages; i++)
            for (int k = 0; k < stage_param_count(c->stages[i]); k++) {
                const stage_param *p = stage_param_at(c->stages[i], k);
                char name[128];
                snprintf(name, sizeof name, "%s%s", kind_prefix[kind], p->name);
                int from = -1;
                for (int j = 0; j < n && from < 0; j++)
                    if (safetensors_find(f[j], name)) from = j;
                if (from < 0) {
                    if (n == 1) /* the file's own message names the tensor */
                        from = 0;
                    else {
                        node_errf(err, errlen, "tensor %s is in none of the %d checkpoint files "
                                  "(first: %s)", name, n, paths[0]);
                        goto out;
                    }
                }
                if (safetensors_read_f32(f[from], name, p->ndim, p->shape,
                                         kind_buffer(c->stages[i], kind) + p->offset, err,
                                         errlen))
                    goto out;
            }
    *step = s0;
    rc = 0;
out:
    for (int i = 0; i < n; i++) safetensors_close(f[i]);
    free(f);
    return rc;
}

int checkpoint_load(const char *path, chain *c, const job_spec *job, long *step, char *err,
                    size_t errlen)
{
    return checkpoint_load_files(&path, 1, c, job, step, err, errlen);
}

int checkpoint_export(const char *path, chain *c, char *err, size_t errlen)
{
    int cap = 0, n = 0;
    for (int i = 0; i < c->plan.nstages; i++) cap += stage_param_count(c->stages[i]);
    safetensors_entry *e = calloc((size_t)(cap ? cap : 1), sizeof *e);
    if (!e) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int i = 0; i < c->plan.nstages; i++)
        for (int k = 0; k < stage_param_count(c->stages[i]); k++) {
            const stage_param *p = stage_param_at(c->stages[i], k);
            if (p->tied_copy) continue;
            e[n++] = (safetensors_entry){p->name, SAFETENSORS_F32, p->ndim,
                                         {p->shape[0], p->shape[1]},
                                         stage_params(c->stages[i]) + p->offset};
        }
    int rc = safetensors_write(path, e, n, err, errlen);
    free(e);
    return rc;
}

/* ---- a stage's part of another stage's checkpoint (a planned switch) ---- */

/* An integer field of a checkpoint's "config" metadata ("key=value,..."). */
static bool config_field(const char *cfg, const char *key, long *out)
{
    size_t n = strlen(key);
    for (const char *p = cfg; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, key, n) == 0 && p[n] == '=') {
            char *end;
            *out = strtol(p + n + 1, &end, 10);
            return end != p + n + 1 && (*end == ',' || *end == 0);
        }
    return false;
}

/* Opens checkpoint path and marks the tensors a stage of layers [begin,
 * end) needs (keep[i] for safetensors_at(*f, i)). */
static int layers_open(const char *path, int begin, int end, safetensors_file **f, bool **keep,
                       char *err, size_t errlen)
{
    *keep = NULL;
    if (safetensors_open(f, path, err, errlen)) return -1;
    const char *format = safetensors_metadata(*f, "shardnode");
    const char *cfg = safetensors_metadata(*f, "config");
    long layers = 0, tied = 0;
    if (!format || strcmp(format, CKPT_FORMAT) != 0 || !cfg ||
        !config_field(cfg, "num_hidden_layers", &layers) ||
        !config_field(cfg, "tie_word_embeddings", &tied) || layers < 1) {
        node_errf(err, errlen, "%s: not a shardnode checkpoint (no \"shardnode\": \"%s\" and "
                  "\"config\" metadata with num_hidden_layers and tie_word_embeddings)", path,
                  CKPT_FORMAT);
        goto fail;
    }
    if (begin < 0 || end <= begin || end > layers) {
        node_errf(err, errlen, "%s: layers %d-%d are not a range of the model's %ld", path, begin,
                  end, layers);
        goto fail;
    }
    int n = safetensors_count(*f);
    *keep = calloc((size_t)(n > 0 ? n : 1), sizeof **keep);
    if (!*keep) {
        node_errf(err, errlen, "out of memory");
        goto fail;
    }
    for (int i = 0; i < n; i++)
        (*keep)[i] = stage_tensor_needed(safetensors_at(*f, i)->name, begin, end, (int)layers,
                                         tied != 0);
    return 0;
fail:
    safetensors_close(*f);
    *f = NULL;
    return -1;
}

int checkpoint_layer_ranges(const char *path, int begin, int end, uint64_t **ranges,
                            int64_t *bytes, char *err, size_t errlen)
{
    safetensors_file *f;
    bool *keep;
    *ranges = NULL;
    *bytes = 0;
    if (layers_open(path, begin, end, &f, &keep, err, errlen)) return -1;
    int n = safetensors_count(f), nr = 0;
    uint64_t *r = calloc((size_t)(2 * (n > 0 ? n : 1)), sizeof *r);
    if (!r) {
        node_errf(err, errlen, "out of memory");
        nr = -1;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const safetensors_tensor *t = safetensors_at(f, i);
        if (!keep[i] || !t->nbytes) continue;
        r[2 * nr] = safetensors_offset(f, t);
        r[2 * nr + 1] = r[2 * nr] + t->nbytes;
        *bytes += (int64_t)t->nbytes;
        nr++;
    }
    /* ascending, adjacent ranges merged (the tensors tile the data) */
    for (int i = 1; i < nr; i++)
        for (int j = i; j > 0 && r[2 * (j - 1)] > r[2 * j]; j--) {
            uint64_t b = r[2 * j], e = r[2 * j + 1];
            r[2 * j] = r[2 * (j - 1)];
            r[2 * j + 1] = r[2 * (j - 1) + 1];
            r[2 * (j - 1)] = b;
            r[2 * (j - 1) + 1] = e;
        }
    int m = 0;
    for (int i = 0; i < nr; i++) {
        if (m && r[2 * (m - 1) + 1] == r[2 * i]) {
            r[2 * (m - 1) + 1] = r[2 * i + 1];
            continue;
        }
        r[2 * m] = r[2 * i];
        r[2 * m + 1] = r[2 * i + 1];
        m++;
    }
    nr = m;
    *ranges = r;
    r = NULL;
out:
    free(r);
    free(keep);
    safetensors_close(f);
    return nr;
}

int checkpoint_copy_layers(const char *src, const char *dst, int begin, int end, char *err,
                           size_t errlen)
{
    safetensors_file *f;
    bool *keep;
    if (layers_open(src, begin, end, &f, &keep, err, errlen)) return -1;
    int n = safetensors_count(f), k = 0, rc = -1;
    safetensors_entry *e = calloc((size_t)(n > 0 ? n : 1), sizeof *e);
    if (!e) {
        node_errf(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const safetensors_tensor *t = safetensors_at(f, i);
        if (!keep[i]) continue;
        if (t->dtype != SAFETENSORS_F32) {
            node_errf(err, errlen, "%s: tensor %s is not F32, as a checkpoint's are", src,
                      t->name);
            goto out;
        }
        e[k] = (safetensors_entry){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(e[k].shape, t->shape, sizeof e[k].shape);
        k++;
    }
    const char *keys[] = {"shardnode", "step", "config", "job"};
    const char *meta[2 * 4 + 1];
    int m = 0;
    for (int i = 0; i < 4; i++) {
        const char *v = safetensors_metadata(f, keys[i]);
        if (!v) continue;
        meta[m++] = keys[i];
        meta[m++] = v;
    }
    meta[m] = NULL;
    rc = safetensors_write_meta(dst, e, k, meta, err, errlen);
out:
    free(e);
    free(keep);
    safetensors_close(f);
    return rc;
}

/* export_merge.c — one model from the stage files of a pipeline run
 * (stage-NAME.safetensors): model.safetensors, config.json and
 * tokenizer.json as a single-node run writes them; for a LoRA job, whose
 * stage files hold adapters, a PEFT adapter directory (peft.c). Used by `shardnode
 * export` (export_cmd.c) and by the pool's gathering (pool_export,
 * daemon/pool_fetch.c). */
#include "node_base.h"
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int export_merge(const char *job_path, const char *stage_dir, const char *const *names, int n,
                 const char *out, char *err, size_t errlen)
{
    char path[4400];
    job_spec job = {0};
    llama_config cfg;
    safetensors_file *files[SPLIT_MAX_STAGES] = {0};
    chain c = {0};
    tokenizer *tok = NULL;
    int rc = -1;
    if (n < 1 || n > SPLIT_MAX_STAGES) return node_errf(err, errlen, "export: %d stages", n);
    if (job_load(&job, job_path, err, errlen) ||
        llama_config_load(&cfg, job.config, err, errlen))
        goto done;
    if (job.has_lora) {   /* the stage files hold adapters: a PEFT directory */
        rc = peft_export(&job, &cfg, stage_dir, names, n, out, false, err, errlen);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/stage-%s.safetensors", stage_dir, names[i]);
        if (safetensors_open(&files[i], path, err, errlen)) goto done;
    }
    /* the whole model's table names every tensor the stages must provide */
    split_plan whole;
    split_parse(&whole, NULL, cfg.num_hidden_layers, "--split", err, errlen);
    if (chain_create(&c, &cfg, &whole, 1, 1, err, errlen)) goto done;
    stage *s = c.stages[0];
    for (int k = 0; k < stage_param_count(s); k++) {
        const stage_param *p = stage_param_at(s, k);
        int from = -1;
        for (int i = 0; i < n && from < 0; i++)
            if (safetensors_find(files[i], p->name)) from = i;
        if (from < 0) {
            node_errf(err, errlen, "%s: no stage file has tensor %s", stage_dir, p->name);
            goto done;
        }
        if (safetensors_read_f32(files[from], p->name, p->ndim, p->shape,
                                 stage_params(s) + p->offset, err, errlen))
            goto done;
    }
    mkdir(out, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    if (checkpoint_export(path, &c, err, errlen)) goto done;
    snprintf(path, sizeof path, "%s/config.json", out);
    if (llama_config_save(&cfg, path, err, errlen)) goto done;
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    if (tokenizer_load(&tok, job.tokenizer, err, errlen) ||
        tokenizer_save(tok, path, err, errlen))
        goto done;
    printf("export: %d stages merged into %s/model.safetensors, config.json, tokenizer.json\n",
           n, out);
    rc = 0;
done:
    for (int i = 0; i < SPLIT_MAX_STAGES; i++) safetensors_close(files[i]);
    tokenizer_free(tok);
    chain_free(&c);
    job_free(&job);
    return rc;
}

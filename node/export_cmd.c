/* export_cmd.c — `shardnode export`: the stages of a pipeline run, saved by
 * each node as OUT/stage-NAME.safetensors, merged into one model directory
 * (model.safetensors, config.json, tokenizer.json) as a single-node run
 * writes it. */
#include "node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_export(int argc, char **argv)
{
    const char *job_path = NULL, *cluster_path = NULL, *out = NULL;
    const args_option opts[] = {
        {"--job", &job_path, NULL}, {"--cluster", &cluster_path, NULL}, {"--out", &out, NULL}};
    const char *required[] = {"--job", "--cluster", NULL};
    char err[1024], path[4400];
    job_spec job = {0};
    llama_config cfg;
    cluster_spec *cl = calloc(1, sizeof *cl);
    safetensors_file *files[SPLIT_MAX_STAGES] = {0};
    chain c = {0};
    tokenizer *tok = NULL;
    int rc = 1;
    if (!cl) return 1;
    if (args_parse(argc, argv, 2, opts, 3, err, sizeof err) ||
        args_require(opts, 3, required, err, sizeof err) ||
        job_load(&job, job_path, err, sizeof err) ||
        llama_config_load(&cfg, job.config, err, sizeof err) ||
        cluster_load(cl, cluster_path, cfg.num_hidden_layers, err, sizeof err))
        goto done;
    if (!out) out = job.out_dir;
    for (int i = 0; i < cl->nnodes; i++) {
        snprintf(path, sizeof path, "%s/stage-%s.safetensors", job.out_dir, cl->nodes[i].name);
        if (safetensors_open(&files[i], path, err, sizeof err)) goto done;
    }
    /* the whole model's table names every tensor the stages must provide */
    split_plan whole;
    split_parse(&whole, NULL, cfg.num_hidden_layers, "--split", err, sizeof err);
    if (chain_create(&c, &cfg, &whole, 1, 1, err, sizeof err)) goto done;
    stage *s = c.stages[0];
    for (int k = 0; k < stage_param_count(s); k++) {
        const stage_param *p = stage_param_at(s, k);
        int from = -1;
        for (int i = 0; i < cl->nnodes && from < 0; i++)
            if (safetensors_find(files[i], p->name)) from = i;
        if (from < 0) {
            snprintf(err, sizeof err, "%s: no stage file of %s has tensor %s", job.out_dir,
                     cluster_path, p->name);
            goto done;
        }
        if (safetensors_read_f32(files[from], p->name, p->ndim, p->shape,
                                 stage_params(s) + p->offset, err, sizeof err))
            goto done;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    if (checkpoint_export(path, &c, err, sizeof err)) goto done;
    snprintf(path, sizeof path, "%s/config.json", out);
    if (llama_config_save(&cfg, path, err, sizeof err)) goto done;
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    if (tokenizer_load(&tok, job.tokenizer, err, sizeof err) ||
        tokenizer_save(tok, path, err, sizeof err))
        goto done;
    printf("export: %d stages merged into %s/model.safetensors, config.json, tokenizer.json\n",
           cl->nnodes, out);
    rc = 0;
done:
    if (rc) fprintf(stderr, "shardnode export: %s\n", err);
    for (int i = 0; i < SPLIT_MAX_STAGES; i++) safetensors_close(files[i]);
    tokenizer_free(tok);
    chain_free(&c);
    job_free(&job);
    free(cl);
    return rc;
}

/* export_cmd.c — `shardnode export`: the stages of a pipeline run, saved by
 * each node as stage-NAME.safetensors, merged into one model directory
 * (model.safetensors, config.json, tokenizer.json) as a single-node run
 * writes it (export_merge, node/runtime/). With --cluster the stage files
 * are in the job's out_dir; with --state they are first gathered from the
 * members over the mesh (pool_export, node/daemon/pool_fetch.c).
 *
 * A LoRA job's output is a PEFT adapter directory (peft_export): from the
 * stage files with --cluster, from OUT/adapter_model.safetensors of a
 * single process without it. --merge writes instead a whole HF model with
 * the adapters merged into the base (default folder OUT/merged). */
#include "commands.h"
#include "daemon.h"
#include "node_base.h"
#include "runtime.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cmd_export(int argc, char **argv)
{
    const char *job_path = NULL, *cluster_path = NULL, *out = NULL, *state = NULL;
    bool merge = false;
    const args_option opts[] = {{"--job", &job_path, NULL},
                                {"--cluster", &cluster_path, NULL},
                                {"--out", &out, NULL},
                                {"--state", &state, NULL},
                                {"--merge", NULL, &merge}};
    char err[1024], merged[4200];
    int rc = 1;
    if (args_parse(argc, argv, 2, opts, 5, err, sizeof err)) goto done;
    if (state) {
        if (job_path || cluster_path || merge) {
            snprintf(err, sizeof err, "--state gathers the mesh's job; it takes no --job, "
                     "--cluster or --merge (merge its adapters with export --job JOB --merge "
                     "once they are in the job's out_dir)");
            goto done;
        }
        rc = pool_export(state, out, err, sizeof err) ? 1 : 0;
        goto done;
    }
    if (!job_path) {
        snprintf(err, sizeof err, "give --state DIR (the mesh's job) or --job (and --cluster "
                 "for a pipeline's stage files)");
        goto done;
    }
    job_spec job = {0};
    llama_config cfg;
    cluster_spec *cl = calloc(1, sizeof *cl);
    if (!cl) goto done;
    if (job_load(&job, job_path, err, sizeof err) ||
        llama_config_load(&cfg, job.config, err, sizeof err) ||
        (cluster_path &&
         cluster_load(cl, cluster_path, cfg.num_hidden_layers, err, sizeof err))) {
        job_free(&job);
        free(cl);
        goto done;
    }
    if (!job.has_lora && (!cluster_path || merge)) {
        snprintf(err, sizeof err, "%s has no \"lora\": %s", job_path,
                 merge ? "--merge merges adapters into their base"
                       : "export --cluster CLUSTER merges a pipeline's stage files (a single "
                         "process already wrote the model to its out_dir)");
        job_free(&job);
        free(cl);
        goto done;
    }
    const char *names[SPLIT_MAX_STAGES];
    for (int i = 0; i < cl->nnodes; i++) names[i] = cl->nodes[i].name;
    if (merge && !out) {
        snprintf(merged, sizeof merged, "%s/merged", job.out_dir);
        out = merged;
    }
    if (job.has_lora)
        rc = peft_export(&job, &cfg, job.out_dir, names, cluster_path ? cl->nnodes : 0,
                         out ? out : job.out_dir, merge, err, sizeof err)
                 ? 1
                 : 0;
    else
        rc = export_merge(job_path, job.out_dir, names, cl->nnodes, out ? out : job.out_dir,
                          err, sizeof err)
                 ? 1
                 : 0;
    job_free(&job);
    free(cl);
done:
    if (rc) fprintf(stderr, "shardnode export: %s\n", err);
    return rc;
}

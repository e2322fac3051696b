/* train.c — `shardnode train`: a job on one node, from text to a model
 * directory HF tools load. The loop is the pipeline's loop with one stage:
 * the same batches (a function of seed, step, micro-batch), the same
 * normaliser (kept targets of the whole batch), the same commit point. */
#include "commands.h"
#include "daemon.h"
#include "node_base.h"
#include "runtime.h"

#include "kernels.h"
#include "pool_doc.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    job_spec job;
    llama_config cfg;
    tokenizer *tok;
    data_set *data;
    chain chain;
    kdev *dev;                 /* --device: where the chain computes (NULL: the CPU) */
    int nmicro, rows;          /* micro-batches per step, rows B*T of one */
    int32_t *ids, *labels;     /* [nmicro][rows] */
    FILE *metrics;
    bool tty;
    char ckpt_path[4096];
} trainer;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int make_dir(const char *path, char *err, size_t errlen)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) goto bad;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) goto bad;
    if (access(path, W_OK) != 0) goto bad;
    return 0;
bad:
    snprintf(err, errlen, "%s: cannot create or write the output dir: %s", path,
             strerror(errno));
    return -1;
}

static void out_path(const trainer *t, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", t->job.out_dir, name);
}

/* The job, the model config and the output dir: what every node needs. */
static int trainer_open(trainer *t, const char *job_path, long threads, char *err,
                        size_t errlen)
{
    if (job_load(&t->job, job_path, err, errlen)) return -1;
    const job_spec *j = &t->job;
    if (threads || j->threads) kernels_set_threads(threads ? (int)threads : j->threads);
    if (llama_config_load(&t->cfg, j->config, err, errlen)) return -1;
    return make_dir(j->out_dir, err, errlen);
}

/* The tokenizer, the data and the batch buffers (and, with_model, the
 * model): what a node that reads data needs; a pipeline stage other than
 * the first gets its tokens from its neighbour. */
static int trainer_open_data(trainer *t, bool with_model, char *err, size_t errlen)
{
    const job_spec *j = &t->job;
    if (tokenizer_load(&t->tok, j->tokenizer, err, errlen)) return -1;
    if (tokenizer_vocab_size(t->tok) > t->cfg.vocab_size) {
        snprintf(err, errlen, "%s: tokenizer has %d tokens, more than vocab_size %d of %s",
                 j->tokenizer, tokenizer_vocab_size(t->tok), t->cfg.vocab_size, j->config);
        return -1;
    }
    data_spec spec = {(const char *const *)j->data_files, j->ndata, j->format, j->separator,
                      j->prompt_template, j->val_fraction, j->seq_len};
    char cache[4096];
    out_path(t, "data-cache.bin", cache, sizeof cache);
    if (data_open(&t->data, &spec, t->tok, cache, err, errlen)) return -1;
    split_plan plan;
    split_parse(&plan, NULL, t->cfg.num_hidden_layers, "--split", err, errlen);
    if (with_model &&
        chain_create_on(&t->chain, &t->cfg, &plan, j->micro_batch, j->seq_len, job_lora(j),
                        t->dev, err, errlen))
        return -1;
    if (with_model && j->bf16) {
        kdev *dev = stage_device(t->chain.stages[0]);
        if (kdev_set_precision(dev, 1) != 0)
            printf("train: note: %s has no bf16 matrix products: the job's \"precision\": "
                   "\"bf16\" computes in fp32 here\n", kdev_name(dev));
    }
    t->nmicro = j->batch / j->micro_batch;
    t->rows = j->micro_batch * j->seq_len;
    t->ids = malloc((size_t)t->nmicro * t->rows * sizeof *t->ids);
    t->labels = malloc((size_t)t->nmicro * t->rows * sizeof *t->labels);
    if (!t->ids || !t->labels) {
        snprintf(err, errlen, "out of memory for a batch of %d x %d", j->batch, j->seq_len);
        return -1;
    }
    out_path(t, "checkpoint.safetensors", t->ckpt_path, sizeof t->ckpt_path);
    t->tty = isatty(STDOUT_FILENO);
    return 0;
}

static void trainer_close(trainer *t)
{
    chain_free(&t->chain);
    kdev_close(t->dev);
    data_close(t->data);
    tokenizer_free(t->tok);
    free(t->ids);
    free(t->labels);
    if (t->metrics) fclose(t->metrics);
    job_free(&t->job);
}

/* Initial weights: the job's (base model, init_weights or the seeded
 * initialisation; adapters with lora), then the checkpoint over them when
 * resuming (with lora it holds only the adapters and their moments).
 * Returns the number of completed steps. */
static int trainer_start(trainer *t, bool resume, long *start, char *err, size_t errlen)
{
    *start = 0;
    if (resume && access(t->ckpt_path, F_OK) != 0) {
        snprintf(err, errlen, "%.900s: no checkpoint to resume from", t->ckpt_path);
        return -1;
    }
    if (!resume || t->job.has_lora)
        for (int i = 0; i < t->chain.plan.nstages; i++)
            if (job_init_stage(&t->job, &t->cfg, t->chain.stages[i], err, errlen)) return -1;
    if (resume && checkpoint_load(t->ckpt_path, &t->chain, &t->job, start, err, errlen))
        return -1;
    return chain_push(&t->chain, err, errlen); /* what was written to the host copies */
}

/* Mean loss over the fixed validation windows (val_batches micro-batches). */
static int validate(trainer *t, double *val_loss, char *err, size_t errlen)
{
    int64_t avail = data_val_samples(t->data);
    int mb = t->job.micro_batch;
    double sum = 0;
    long kept = 0;
    if (avail == 0) {
        *val_loss = NAN;
        return 0;
    }
    /* data_val_batch wraps around, so a short validation set still fills
     * the last micro-batch; stop once every window has been seen. */
    for (int b = 0; b < t->job.val_batches && (int64_t)b * mb < avail; b++) {
        double s = 0;
        int k = 0;
        data_val_batch(t->data, (int64_t)b * mb, mb, t->ids, t->labels);
        if (chain_forward(&t->chain, t->ids, t->labels, &s, &k, err, errlen)) return -1;
        sum += s;
        kept += k;
    }
    *val_loss = kept ? sum / (double)kept : NAN;
    return 0;
}

/* One optimizer step: every micro-batch's data first (the normaliser is the
 * kept targets of the whole batch), then forward/backward of each, then
 * clipping and AdamW. Returns the mean loss over the batch's kept targets. */
static int train_step(trainer *t, long step, double lr, double *loss, double *gnorm, char *err,
                      size_t errlen)
{
    const job_spec *j = &t->job;
    long kept = 0;
    for (int m = 0; m < t->nmicro; m++) {
        int32_t *ids = t->ids + (size_t)m * t->rows, *lab = t->labels + (size_t)m * t->rows;
        data_train_batch(t->data, j->seed, step, m, j->micro_batch, j->batch, ids, lab);
        for (int i = 0; i < t->rows; i++) kept += lab[i] != KERNELS_IGNORE_INDEX;
    }
    if (kept == 0) {
        snprintf(err, errlen, "step %ld: every target of the batch is masked (-100)", step + 1);
        return -1;
    }
    for (int i = 0; i < t->chain.plan.nstages; i++) stage_zero_grads(t->chain.stages[i]);
    double sum = 0;
    for (int m = 0; m < t->nmicro; m++) {
        double s = 0;
        int k = 0;
        if (chain_forward_backward(&t->chain, t->ids + (size_t)m * t->rows,
                                   t->labels + (size_t)m * t->rows, (float)(1.0 / kept), &s, &k,
                                   err, errlen))
            return -1;
        sum += s;
    }
    stage_adamw opt = {(float)lr, (float)j->beta1, (float)j->beta2, (float)j->eps,
                       (float)j->weight_decay};
    *gnorm = chain_adamw_step(&t->chain, &opt, (int)(step + 1), j->grad_clip);
    *loss = sum / (double)kept;
    return 0;
}

static void format_eta(double seconds, char *buf, size_t len)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, len, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else if (s >= 60) snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, len, "%lds", s);
}

static int write_outputs(trainer *t, char *err, size_t errlen)
{
    char path[4096];
    /* with lora, the adapters alone under PEFT's names */
    out_path(t, t->job.has_lora ? "adapter_model.safetensors" : "model.safetensors", path,
             sizeof path);
    if (chain_pull(&t->chain, err, errlen) || checkpoint_export(path, &t->chain, err, errlen))
        return -1;
    out_path(t, "config.json", path, sizeof path);
    if (llama_config_save(&t->cfg, path, err, errlen)) return -1;
    out_path(t, "tokenizer.json", path, sizeof path);
    return tokenizer_save(t->tok, path, err, errlen);
}

static int run(trainer *t, long stop, bool resume, const char *metrics_path, char *err,
               size_t errlen)
{
    const job_spec *j = &t->job;
    long step;
    if (trainer_start(t, resume, &step, err, errlen)) return -1;
    if (metrics_path && !(t->metrics = fopen(metrics_path, resume ? "a" : "w"))) {
        snprintf(err, errlen, "%s: cannot open for writing: %s", metrics_path, strerror(errno));
        return -1;
    }
    if (stop > j->steps) {
        snprintf(err, errlen, "--steps %ld is past the job's last step (%ld, \"steps\" in %.900s)",
                 stop, j->steps, j->path);
        return -1;
    }
    if (stop <= 0) stop = j->steps;
    printf("train: %s: %d layers, hidden %d, %.2fM %sparameters; %lld training tokens, "
           "batch %d x %d, %ld steps%s\n",
           j->config, t->cfg.num_hidden_layers, t->cfg.hidden_size,
           1e-6 * (double)stage_num_params(t->chain.stages[0]),
           j->has_lora ? (j->base_nf4 ? "LoRA (NF4 base) " : "LoRA ") : "",
           (long long)data_train_tokens(t->data), j->batch, j->seq_len, j->steps,
           step ? " (resumed)" : "");
    if (step) printf("train: resuming after step %ld from %s\n", step, t->ckpt_path);
    double t_start = now_s();
    long first = step, tokens = step * (long)j->batch * j->seq_len;
    for (; step < stop; step++) {
        double t0 = now_s(), lr = job_lr(j, step), loss, gnorm, val = NAN;
        if (train_step(t, step, lr, &loss, &gnorm, err, errlen)) return -1;
        long done = step + 1;
        double ms = 1e3 * (now_s() - t0);
        tokens += (long)j->batch * j->seq_len;
        bool last = done == stop;
        if ((j->val_interval && done % j->val_interval == 0) || (last && done == j->steps))
            if (validate(t, &val, err, errlen)) return -1;
        if ((j->checkpoint_interval && done % j->checkpoint_interval == 0) || last)
            if (chain_pull(&t->chain, err, errlen) ||
                checkpoint_save(t->ckpt_path, &t->chain, done, j->text, err, errlen))
                return -1;
        double tps = (double)(done - first) * j->batch * j->seq_len / (now_s() - t_start);
        if (t->metrics) {
            fprintf(t->metrics, "{\"step\": %ld, \"loss\": %.17g, \"lr\": %.6g, \"tokens\": %ld, "
                    "\"step_ms\": %.1f, \"tokens_per_s\": %.1f", done, loss, lr, tokens, ms,
                    (double)j->batch * j->seq_len / ms * 1e3);
            if (!isnan(val)) fprintf(t->metrics, ", \"val_loss\": %.17g", val);
            struct timespec wall;   /* the step's end, as a pipeline stage's lines say */
            clock_gettime(CLOCK_REALTIME, &wall);
            fprintf(t->metrics, ", \"time\": %.3f}\n",
                    (double)wall.tv_sec + 1e-9 * (double)wall.tv_nsec);
            fflush(t->metrics);
        }
        char eta[32];
        format_eta((double)(stop - done) * (double)j->batch * j->seq_len / tps, eta, sizeof eta);
        if (t->tty) {
            printf("\rstep %ld/%ld  loss %.4f  lr %.2e  %.0f tok/s  ETA %s   ", done, j->steps,
                   loss, lr, tps, eta);
            if (!isnan(val)) printf("\nstep %ld/%ld  val_loss %.4f\n", done, j->steps, val);
            fflush(stdout);
        } else if (done % j->log_interval == 0 || last || !isnan(val)) {
            printf("step %ld/%ld  loss %.4f  lr %.2e  %.0f tok/s  ETA %s", done, j->steps, loss,
                   lr, tps, eta);
            if (!isnan(val)) printf("  val_loss %.4f", val);
            printf("\n");
            fflush(stdout);
        }
    }
    if (t->tty) printf("\n");
    if (step == j->steps) {
        if (write_outputs(t, err, errlen)) return -1;
        printf("train: wrote %s/%s, config.json, tokenizer.json\n", j->out_dir,
               j->has_lora ? "adapter_model.safetensors" : "model.safetensors");
    } else {
        printf("train: stopped after step %ld of %ld; continue with --resume\n", step,
               j->steps);
    }
    return 0;
}

/* SIGUSR1: stop the pipeline at the next step boundary (engine.c). */
static volatile sig_atomic_t stop_signal;
static void on_stop_signal(int sig)
{
    (void)sig;
    stop_signal = 1;
}
/* SIGUSR2 queued with a count (sigqueue): compute with that many threads
 * from the next step (the pool's daemon sends it: `shardnode set`). */
static volatile sig_atomic_t threads_signal;
static void on_threads_signal(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    if (si && si->si_code == SI_QUEUE && si->si_value.sival_int > 0)
        threads_signal = si->si_value.sival_int;
}

/* `train --cluster C --node NAME`: this node's stage of a pipeline run. */
/* The *.safetensors files of DIR (sorted by name, malloc'ed), or -1. */
static int dir_files(const char *dir, char ***out, int *n, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) return node_errf(err, errlen, "--resume-from %.900s: %s", dir, strerror(errno));
    char **list = NULL;
    int k = 0, cap = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 13 || strcmp(de->d_name + l - 12, ".safetensors") != 0) continue;
        if (k == cap) {
            cap = cap ? 2 * cap : 8;
            char **g = realloc(list, (size_t)cap * sizeof *g);
            if (!g) { rc = node_errf(err, errlen, "out of memory"); break; }
            list = g;
        }
        size_t pl = strlen(dir) + l + 2;
        if (!(list[k] = malloc(pl))) { rc = node_errf(err, errlen, "out of memory"); break; }
        snprintf(list[k++], pl, "%s/%s", dir, de->d_name);
    }
    closedir(d);
    if (!rc && k == 0) rc = node_errf(err, errlen, "--resume-from %.900s: no .safetensors file "
                                      "in it", dir);
    if (rc) {
        for (int i = 0; i < k; i++) free(list[i]);
        free(list);
        return -1;
    }
    for (int i = 1; i < k; i++) /* sorted: the same files load in the same order */
        for (int j = i; j > 0 && strcmp(list[j - 1], list[j]) > 0; j--) {
            char *x = list[j];
            list[j] = list[j - 1];
            list[j - 1] = x;
        }
    *out = list;
    *n = k;
    return 0;
}

static int run_cluster(trainer *t, const char *job, const char *cluster_path, const char *node,
                       long threads, long stop, bool resume, const char *metrics, bool append,
                       const char *snapshots, bool wait_copies, const char *resume_from,
                       char *err, size_t errlen)
{
    char **files = NULL;
    int nfiles = 0;
    cluster_spec *cl = calloc(1, sizeof *cl);
    int rc = -1, self;
    if (!cl) return -1;
    if (!node) {
        snprintf(err, errlen, "--cluster needs --node NAME (which entry of %.900s this is)",
                 cluster_path);
        goto out;
    }
    /* only the first stage reads data; find out which stage this is first */
    if (trainer_open(t, job, threads, err, errlen) ||
        cluster_load(cl, cluster_path, t->cfg.num_hidden_layers, err, errlen))
        goto out;
    if ((self = cluster_find(cl, node)) < 0) {
        snprintf(err, errlen, "%.900s: no node named \"%s\"", cluster_path, node);
        goto out;
    }
    if (self == 0 && trainer_open_data(t, false, err, errlen)) goto out;
    if (stop > t->job.steps) {
        snprintf(err, errlen, "--steps %ld is past the job's last step (%ld)", stop, t->job.steps);
        goto out;
    }
    if (metrics && !(t->metrics = fopen(metrics, resume || resume_from || append ? "a" : "w"))) {
        snprintf(err, errlen, "%s: cannot open for writing: %s", metrics, strerror(errno));
        goto out;
    }
    /* OUT/checkpoint-NAME.safetensors: this stage's state when the run
     * stops early (SIGUSR1 to any stage, or --steps), resumed with --resume */
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-%s.safetensors", t->job.out_dir, node);
    if (resume && access(ckpt, F_OK) != 0) {
        snprintf(err, errlen, "%.900s: no state of node %s to resume from", ckpt, node);
        goto out;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    struct sigaction st = {0};
    st.sa_sigaction = on_threads_signal;
    st.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&st.sa_mask);
    sigaction(SIGUSR2, &st, NULL);
    engine_options eo = {.stop = stop > 0 ? stop : t->job.steps,
                         .resume = resume ? ckpt : NULL,
                         .checkpoint = ckpt,
                         .stop_request = &stop_signal,
                         .threads_request = &threads_signal,
                         .device = t->dev,
                         .stopped_at = -1};
    if (snapshots) {
        eo.snapshot_dir = snapshots;
        eo.snapshot_every = t->job.snapshot_every;
        eo.checkpoint_every = t->job.checkpoint_every;
        eo.wait_copies = wait_copies;
    }
    if (resume_from) {
        if (resume) {
            snprintf(err, errlen, "--resume and --resume-from both say where to start; give one");
            goto out;
        }
        if (dir_files(resume_from, &files, &nfiles, err, errlen)) goto out;
        eo.resume_files = (const char *const *)files;
        eo.nresume_files = nfiles;
    }
    rc = engine_train(&t->job, &t->cfg, t->data, cl, self, &eo, t->metrics, err, errlen);
out:
    for (int i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    free(cl);
    return rc;
}

/* `train --state DIR --job JOB.json [--wait]`: the job goes to the mesh
 * through the running node; `--stop` stops the mesh's job on every node. */
static int run_mesh(const char *state, const char *job, bool stop, bool wait, bool resume)
{
    char err[2048], path[4200];
    json_t *reply = NULL;
    if (stop) {
        if (job || wait) {
            fprintf(stderr, "shardnode train: --stop takes only --state\n");
            return 2;
        }
        reply = node_control_request(state, "stop", err, sizeof err);
    } else {
        if (!job) {
            fprintf(stderr, "shardnode train: --state needs --job JOB.json (or --stop)\n");
            return 2;
        }
        snprintf(path, sizeof path, "%s/node.json", state);
        json_t *nodej = node_load_json(path, err, sizeof err);
        const char *name = nodej ? node_json_str(nodej, "name") : NULL;
        json_t *bundle = name ? pool_bundle_make(job, name, (int64_t)time(NULL), err, sizeof err)
                              : NULL;
        if (nodej && !name) snprintf(err, sizeof err, "%.1000s: no \"name\"", path);
        json_decref(nodej);
        char ckpt[4200] = "";
        if (bundle && resume) {
            /* the newest complete pool checkpoint in the job's out_dir */
            job_spec js;
            long long step = 0;
            if (job_load(&js, job, err, sizeof err) != 0 ||
                pool_checkpoint_newest(js.out_dir, ckpt, sizeof ckpt, &step, err,
                                       sizeof err) != 0) {
                if (js.path) job_free(&js);
                json_decref(bundle);
                fprintf(stderr, "shardnode train: --resume: %s\n", err);
                return 1;
            }
            job_free(&js);
            printf("train: resuming from the pool checkpoint %s (after step %lld)\n", ckpt, step);
        }
        if (bundle) {
            json_t *req = json_pack("{s:s,s:o}", "cmd", "submit", "bundle", bundle);
            if (ckpt[0]) json_object_set_new(req, "resume", json_string(ckpt));
            reply = node_control_call(state, req, err, sizeof err);
            json_decref(req);
        }
    }
    if (reply && node_json_str(reply, "error")) {
        snprintf(err, sizeof err, "%s", node_json_str(reply, "error"));
        json_decref(reply);
        reply = NULL;
    }
    if (!reply) {
        fprintf(stderr, "shardnode train: %s\n", err);
        return 1;
    }
    if (stop) {
        printf("train: job %s stopped on every node\n", node_json_str(reply, "stopped"));
        json_decref(reply);
        return 0;
    }
    char id[POOL_JOB_ID_LEN + 1];
    snprintf(id, sizeof id, "%s", node_json_str(reply, "job"));
    printf("train: job %s submitted to the mesh (%lld members); follow it with `shardnode "
           "status --state %s`\n", id, (long long)json_integer_value(json_object_get(reply, "members")),
           state);
    json_decref(reply);
    if (!wait) return 0;
    /* --wait: the plan, then progress, until the run ends */
    char last[512] = "", last_rec[512] = "", last_sw[768] = "";
    int64_t plan_said = 0;   /* the last epoch whose plan was printed */
    /* the committed plan and the one before it, briefly ("a 0-2, d 3-7"):
     * a switch's line shows both */
    char cur_plan[192] = "", prev_plan[192] = "";
    int64_t cur_epoch = 0;
    char plans[400] = "";    /* ... as said for the switch to sw_epoch */
    int64_t sw_epoch = 0;
    int noplan = 0, failing = 0;
    for (;;) {
        sleep(2);
        json_t *st = node_control_request(state, "status", err, sizeof err);
        if (!st) {
            fprintf(stderr, "shardnode train: %s\n", err);
            return 1;
        }
        pool_status j;
        int jrc = pool_status_from_json(json_object_get(st, "job"), &j, err, sizeof err);
        if (jrc < 0) {
            json_decref(st);
            fprintf(stderr, "shardnode train: the node's status does not read: %s\n", err);
            return 1;
        }
        if (jrc > 0 || strcmp(j.id, id) != 0) {
            if (jrc == 0) pool_status_free(&j);
            json_decref(st);
            fprintf(stderr, "shardnode train: the mesh moved on to another job\n");
            return 1;
        }
        const pool_plan *c = j.has_committed ? &j.committed : NULL;
        char line[512] = "", problem[512] = "";
        const pool_run *best = NULL;
        int done = 0, failed = 0, named = 0;
        for (int i = 0; i < j.nmembers; i++) {
            const char *nm = j.members[i].name;
            const pool_doc *d = j.members[i].doc;
            const pool_run *r = d->has & POOL_HAS_RUN ? &d->run : NULL;
            pool_run_state rs = r ? r->state : POOL_RUN_NONE;
            bool now = c && (d->has & POOL_HAS_COMMITTED) && d->committed.epoch == c->epoch;
            if (rs == POOL_RUN_DONE && now && pool_plan_stage_of(c, nm) >= 0) done++;
            if (rs == POOL_RUN_FAILED || rs == POOL_RUN_STOPPED) {
                failed++;
                snprintf(problem, sizeof problem, "%s: %.400s", nm,
                         r->error[0] ? r->error : pool_run_state_name(rs));
            }
            if (r && (!c || now) && (!best || r->step > best->step)) best = r;
            if (!c && d->why[0])
                snprintf(problem, sizeof problem, "no plan fits: %.480s", d->why);
            for (int k = 0; k < d->lacks.n; k++)
                snprintf(problem, sizeof problem, "%s lacks %s (%s)", nm, d->lacks.l[k].path,
                         d->lacks.l[k].why);
        }
        named = c ? c->nstages : 0;
        if (c && c->epoch != cur_epoch) {
            memcpy(prev_plan, cur_plan, sizeof prev_plan);
            cur_epoch = c->epoch;
            int off = 0;
            cur_plan[0] = 0;
            for (int i = 0; i < c->nstages && off < (int)sizeof cur_plan - 48; i++)
                off += snprintf(cur_plan + off, sizeof cur_plan - (size_t)off, "%s%s %d-%d",
                                i ? ", " : "", c->stage[i].holder[0].name,
                                c->stage[i].layer_begin, c->stage[i].layer_end - 1);
        }
        if (!c) {
            snprintf(line, sizeof line, "train: waiting for a plan%s%.400s", problem[0] ? ": " : "", problem);
        } else if (!best || !best->has_step || c->epoch != plan_said) {
            /* each plan once, also one that a switch or recovery commits
             * while the stages it replaces still say their steps */
            plan_said = c->epoch;
            int off = snprintf(line, sizeof line, "train: plan committed (epoch %lld):",
                               (long long)c->epoch);
            for (int i = 0; i < c->nstages; i++)
                if (off < (int)sizeof line - 64)
                    off += snprintf(line + off, sizeof line - (size_t)off, " %s layers %d-%d;",
                                    c->stage[i].holder[0].name, c->stage[i].layer_begin,
                                    c->stage[i].layer_end - 1);
        } else {
            snprintf(line, sizeof line, "train: step %lld/%lld  loss %.4f  %.0f tok/s",
                     (long long)best->step, (long long)best->steps, best->loss, best->tps);
        }
        /* a recovery this node took part in (docs/ARCHITECTURE.md, "Recovery"),
         * said once when it begins and once when the run goes on */
        const pool_status_member *me = pool_status_member_of(&j, node_json_str(st, "self"));
        const pool_doc *own = me ? me->doc : NULL;
        if (own && (own->has & POOL_HAS_REC)) {
            const pool_recovery *rv = &own->rec;
            char who[96], rl[512];
            snprintf(who, sizeof who, "%s%s", rv->lost[0] ? "the loss of " : "a broken pipeline",
                     rv->lost);
            if (rv->ms >= 0)
                snprintf(rl, sizeof rl, "train: recovered from %s at step %lld: %lld steps "
                         "redone, %.1f s (epoch %lld)", who, (long long)rv->at,
                         (long long)(rv->at > rv->from ? rv->at - rv->from : 0),
                         (double)rv->ms / 1e3, (long long)rv->epoch);
            else
                snprintf(rl, sizeof rl, "train: recovering from %s at step %lld", who,
                         (long long)rv->at);
            if (strcmp(rl, last_rec) != 0) {
                printf("%s\n", rl);
                fflush(stdout);
                snprintf(last_rec, sizeof last_rec, "%s", rl);
            }
        }
        /* a planned switch (docs/ARCHITECTURE.md, "Planned switches"), said
         * when the new plan starts and when its first step is done */
        if (own && (own->has & POOL_HAS_SWR)) {
            const pool_switch_rec *sw = &own->swr;
            char sl[768];
            if (sw->epoch == cur_epoch && prev_plan[0] && sw_epoch != sw->epoch) {
                snprintf(plans, sizeof plans, " (%s; was %s)", cur_plan, prev_plan);
                sw_epoch = sw->epoch;
            }
            if (sw_epoch != sw->epoch) plans[0] = 0;
            int k = snprintf(sl, sizeof sl, "train: %s after step %lld (%s) to epoch "
                             "%lld%s: %.1f MB moved, predicted step %.1f ms",
                             sw->ms >= 0 ? "switched" : "switching", (long long)sw->from,
                             pool_switch_why_name(sw->why), (long long)sw->epoch, plans, sw->mb,
                             sw->pred_ms);
            if (sw->old_ms > 0 && k > 0 && k < (int)sizeof sl)
                k += snprintf(sl + k, sizeof sl - (size_t)k, " (was %.1f ms)", sw->old_ms);
            if (sw->ms >= 0 && k > 0 && k < (int)sizeof sl)
                snprintf(sl + k, sizeof sl - (size_t)k, "; first step %.1f s after the commit",
                         (double)sw->ms / 1e3);
            if (strcmp(sl, last_sw) != 0) {
                printf("%s\n", sl);
                fflush(stdout);
                snprintf(last_sw, sizeof last_sw, "%s", sl);
            }
        }
        if (strcmp(line, last) != 0) {
            printf("%s\n", line);
            fflush(stdout);
            snprintf(last, sizeof last, "%s", line);
        }
        bool gathered = j.has_run && j.run.gathered >= 0;
        bool submitter = node_json_str(st, "self") &&
                         strcmp(j.submitted_by, node_json_str(st, "self")) == 0;
        int rc = -1;
        noplan = !c && strncmp(problem, "no plan fits", 12) == 0 ? noplan + 1 : 0;
        if (noplan >= 10) {
            /* 20 s of the same verdict: say so rather than wait for ever (the
             * job stays submitted; members that join make a new view) */
            fprintf(stderr, "shardnode train: %s\n", problem);
            rc = 1;
        } else if (failed && (++failing >= 5 || (j.has_run && j.run.state == POOL_RUN_FAILED))) {
            /* a stage that failed is recovered from within seconds (the pool
             * re-plans): the run failed when this node's core says so, or
             * when a failure stays 10 s */
            fprintf(stderr, "shardnode train: the run failed: %s\n",
                    j.has_run && j.run.state == POOL_RUN_FAILED && j.run.error[0] ? j.run.error
                                                                                  : problem);
            rc = 1;
        } else if (c && named && done >= named && (!submitter || gathered)) {
            if (gathered && j.run.gathered != 1) {
                fprintf(stderr, "shardnode train: gathering the model failed (see %s/jobs/%s/export.log)\n",
                        state, id);
                rc = 1;
            } else {
                printf("train: done%s%s\n", gathered ? "; model gathered into " : "",
                       gathered ? j.out_dir : "");
                rc = 0;
            }
        }
        if (!failed) failing = 0;
        pool_status_free(&j);
        json_decref(st);
        if (rc >= 0) return rc;
    }
}

int cmd_train(int argc, char **argv)
{
    const char *job = NULL, *steps = NULL, *metrics = NULL, *threads = NULL, *cluster = NULL,
               *node = NULL, *state = NULL, *snapshots = NULL, *resume_from = NULL,
               *device = NULL;
    bool resume = false, stop_job = false, wait = false, append = false, wait_copies = false;
    const args_option opts[] = {
        {"--job", &job, NULL},         {"--steps", &steps, NULL},
        {"--metrics", &metrics, NULL}, {"--threads", &threads, NULL},
        {"--resume", NULL, &resume},   {"--cluster", &cluster, NULL},
        {"--node", &node, NULL},       {"--state", &state, NULL},
        {"--stop", NULL, &stop_job},   {"--wait", NULL, &wait},
        {"--snapshots", &snapshots, NULL}, {"--resume-from", &resume_from, NULL},
        {"--append-metrics", NULL, &append}, {"--wait-copies", NULL, &wait_copies},
        {"--device", &device, NULL},
    };
    const char *required[] = {"--job", NULL};
    int nopts = (int)(sizeof opts / sizeof opts[0]);
    char err[1024];
    long stop = 0, nthreads = 0;
    trainer t;
    memset(&t, 0, sizeof t);
    int rc = 1;
    if (args_parse(argc, argv, 2, opts, nopts, err, sizeof err) == 0 && state) {
        if (steps || metrics || threads || cluster || node || snapshots || resume_from ||
            append || wait_copies || device) {
            fprintf(stderr, "shardnode train: --state submits to the mesh; it takes --job, "
                            "--wait, --resume or --stop only\n");
            return 2;
        }
        return run_mesh(state, job, stop_job, wait, resume);
    }
    if (stop_job || wait) {
        fprintf(stderr, "shardnode train: --stop and --wait need --state DIR\n");
        return 2;
    }
    if ((snapshots || resume_from || append || wait_copies) && !cluster) {
        fprintf(stderr, "shardnode train: --snapshots, --resume-from, --append-metrics and "
                        "--wait-copies are for a pipeline stage: they need --cluster\n");
        return 2;
    }
    if (wait_copies && !snapshots) {
        fprintf(stderr, "shardnode train: --wait-copies waits for copies of the stage's "
                        "snapshots: it needs --snapshots DIR\n");
        return 2;
    }
    if (args_parse(argc, argv, 2, opts, nopts, err, sizeof err) ||
        args_require(opts, nopts, required, err, sizeof err) ||
        (steps && args_int(steps, "--steps", 1, 1L << 40, &stop, err, sizeof err)) ||
        (threads && args_int(threads, "--threads", 1, 1024, &nthreads, err, sizeof err)) ||
        (device && kdev_open(device, &t.dev, err, sizeof err) != KDEV_OK) ||
        (cluster ? run_cluster(&t, job, cluster, node, nthreads, stop, resume, metrics, append,
                               snapshots, wait_copies, resume_from, err, sizeof err)
                 : trainer_open(&t, job, nthreads, err, sizeof err) ||
                   trainer_open_data(&t, true, err, sizeof err)) ||
        (!cluster && run(&t, stop, resume, metrics, err, sizeof err)))
        goto done;
    rc = 0;
done:
    if (rc) {
        if (t.tty) printf("\n");
        fflush(stdout);
        fprintf(stderr, "shardnode train: %s\n", err);
    }
    trainer_close(&t);
    return rc;
}

/* `shardnode batches`: the exact token batches a job trains on, for
 * inspection and for the PyTorch reference: input_ids/labels [steps*batch, T]
 * in step order, and the validation windows the job evaluates. */
int cmd_batches(int argc, char **argv)
{
    const char *job = NULL, *steps = NULL, *out = NULL;
    const args_option opts[] = {
        {"--job", &job, NULL}, {"--steps", &steps, NULL}, {"--out", &out, NULL}};
    const char *required[] = {"--job", "--out", NULL};
    char err[1024];
    long nsteps = 0;
    trainer t;
    memset(&t, 0, sizeof t);
    int32_t *ids = NULL, *labels = NULL, *vids = NULL, *vlabels = NULL;
    int rc = 1;
    if (args_parse(argc, argv, 2, opts, 3, err, sizeof err) ||
        args_require(opts, 3, required, err, sizeof err) ||
        (steps && args_int(steps, "--steps", 1, 1L << 30, &nsteps, err, sizeof err)) ||
        trainer_open(&t, job, 0, err, sizeof err) ||
        trainer_open_data(&t, false, err, sizeof err))
        goto done;
    const job_spec *j = &t.job;
    if (nsteps > j->steps) {
        snprintf(err, sizeof err, "--steps %ld is past the job's last step (%ld)", nsteps,
                 j->steps);
        goto done;
    }
    if (!nsteps) nsteps = j->steps;
    size_t per_step = (size_t)j->batch * j->seq_len;
    int mb = j->micro_batch;
    /* the windows validate() evaluates: whole micro-batches, wrapping */
    int64_t avail = data_val_samples(t.data), nval = (avail + mb - 1) / mb * mb;
    if (nval > (int64_t)j->val_batches * mb) nval = (int64_t)j->val_batches * mb;
    ids = malloc((size_t)nsteps * per_step * sizeof *ids);
    labels = malloc((size_t)nsteps * per_step * sizeof *labels);
    vids = malloc(((size_t)nval + 1) * j->seq_len * sizeof *vids);
    vlabels = malloc(((size_t)nval + 1) * j->seq_len * sizeof *vlabels);
    if (!ids || !labels || !vids || !vlabels) {
        snprintf(err, sizeof err, "out of memory for %ld steps of batches", nsteps);
        goto done;
    }
    for (long s = 0; s < nsteps; s++)
        for (int m = 0; m < t.nmicro; m++) {
            size_t at = (size_t)s * per_step + (size_t)m * t.rows;
            data_train_batch(t.data, j->seed, s, m, mb, j->batch, ids + at, labels + at);
        }
    for (int64_t b = 0; b < nval; b += mb)
        data_val_batch(t.data, b, mb, vids + b * j->seq_len, vlabels + b * j->seq_len);
    safetensors_entry e[4] = {
        {"input_ids", SAFETENSORS_I32, 2, {nsteps * j->batch, j->seq_len}, ids},
        {"labels", SAFETENSORS_I32, 2, {nsteps * j->batch, j->seq_len}, labels},
        {"val_input_ids", SAFETENSORS_I32, 2, {nval, j->seq_len}, vids},
        {"val_labels", SAFETENSORS_I32, 2, {nval, j->seq_len}, vlabels},
    };
    if (safetensors_write(out, e, 4, err, sizeof err)) goto done;
    rc = 0;
done:
    if (rc) fprintf(stderr, "shardnode batches: %s\n", err);
    free(ids);
    free(labels);
    free(vids);
    free(vlabels);
    trainer_close(&t);
    return rc;
}

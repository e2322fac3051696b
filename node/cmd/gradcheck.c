/* gradcheck.c — `shardnode gradcheck`: loss and every parameter gradient of
 * one batch, for comparison with an independent implementation (PyTorch).
 *
 * --random B,T,SEED replaces --weights and --batch: weights from
 * stage_init_weights(SEED) and a batch of B x T random tokens (every 7th
 * label ignored) from the same seed, so that two runs that differ only in
 * --threads (or OPENBLAS_CORETYPE) can be compared bit for bit with cmp(1)
 * without any other program (tests/CMakeLists.txt, numerics.coretype.*).
 *
 * --lora R,ALPHA,MODULES[,rslora] (MODULES: q_proj:v_proj:..., or all) makes
 * every stage a frozen base with adapters (--nf4: its layer matrices in
 * NF4, quantized from the weights); the gradients written are then the
 * adapters' (PEFT names), which --weights must hold beside the base (with
 * --random: the seeded init, B zero). --input-grads adds the gradient of
 * each stage's input but the first's, as input_grad.layer.L [B*T, C]
 * (L the stage's first layer). --device cpu|cuda:N|hip:N: every stage on
 * that device (kernels.h), the gradients copied back to write them. */
#include "commands.h"
#include "runtime.h"

#include "kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads input_ids and labels, int32 [B, T] of the same shape. */
static int read_batch(const safetensors_file *f, int32_t **ids, int32_t **labels, int *B,
                      int *T, char *err, size_t errlen)
{
    const safetensors_tensor *t = safetensors_find(f, "input_ids");
    if (!t) {
        snprintf(err, errlen, "%s: tensor input_ids is missing", safetensors_path(f));
        return -1;
    }
    if (t->ndim != 2 || t->shape[0] < 1 || t->shape[1] < 1 || t->shape[0] > 1 << 20 ||
        t->shape[1] > 1 << 20) {
        snprintf(err, errlen, "%s: tensor input_ids must have shape [B, T] with B, T >= 1",
                 safetensors_path(f));
        return -1;
    }
    *B = (int)t->shape[0];
    *T = (int)t->shape[1];
    *ids = malloc((size_t)*B * *T * sizeof **ids);
    *labels = malloc((size_t)*B * *T * sizeof **labels);
    if (!*ids || !*labels) {
        snprintf(err, errlen, "%s: out of memory for the batch", safetensors_path(f));
        return -1;
    }
    if (safetensors_read_i32(f, "input_ids", 2, t->shape, *ids, err, errlen)) return -1;
    if (safetensors_read_i32(f, "labels", 2, t->shape, *labels, err, errlen)) return -1;
    return 0;
}

/* Collects loss and one gradient per distinct parameter name, in model
 * order; tied copies were already summed by chain_sum_tied_grads. */
static int write_grads(chain *c, const char *path, float loss, bool input_grads, char *err,
                       size_t errlen)
{
    int cap = 1 + c->plan.nstages;
    char (*names)[48] = calloc((size_t)c->plan.nstages + 1, sizeof *names);
    for (int i = 0; i < c->plan.nstages; i++) cap += stage_param_count(c->stages[i]);
    safetensors_entry *e = calloc((size_t)cap, sizeof *e);
    if (!e || !names) {
        free(e);
        free(names);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    int n = 0;
    e[n++] = (safetensors_entry){"loss", SAFETENSORS_F32, 1, {1}, &loss};
    for (int i = 0; i < c->plan.nstages; i++) {
        stage *s = c->stages[i];
        for (int k = 0; k < stage_param_count(s); k++) {
            const stage_param *p = stage_param_at(s, k);
            if (p->tied_copy) continue;
            safetensors_entry *x = &e[n++];
            x->name = p->name;
            x->dtype = SAFETENSORS_F32;
            x->ndim = p->ndim;
            x->shape[0] = p->shape[0];
            x->shape[1] = p->shape[1];
            x->data = stage_grads(s) + p->offset;
        }
        if (input_grads && i > 0) {
            snprintf(names[i], sizeof names[i], "input_grad.layer.%d", c->plan.begin[i]);
            e[n++] = (safetensors_entry){names[i], SAFETENSORS_F32, 2,
                                         {(int64_t)c->B * c->T, c->cfg.hidden_size},
                                         stage_input_grad(s)};
        }
    }
    int rc = safetensors_write(path, e, n, err, errlen);
    free(e);
    free(names);
    return rc;
}

/* "B,T,SEED" */
static int parse_random(const char *s, int *B, int *T, uint64_t *seed, char *err, size_t errlen)
{
    long b, t;
    unsigned long long sd;
    char tail;
    if (sscanf(s, "%ld,%ld,%llu%c", &b, &t, &sd, &tail) != 3 || b < 1 || t < 1 || b > 4096 ||
        t > 1 << 16) {
        snprintf(err, errlen, "--random: expected B,T,SEED (B in 1..4096, T in 1..65536), got '%s'",
                 s);
        return -1;
    }
    *B = (int)b;
    *T = (int)t;
    *seed = (uint64_t)sd;
    return 0;
}

/* "R,ALPHA,MODULES[,rslora]" */
static int parse_lora(const char *s, bool nf4, stage_lora *l, char *err, size_t errlen)
{
    char mods[256], tail[16] = "";
    int r;
    double alpha;
    memset(l, 0, sizeof *l);
    int got = sscanf(s, "%d,%lf,%255[a-z_:],%15s", &r, &alpha, mods, tail);
    if (got < 3 || (got == 4 && strcmp(tail, "rslora") != 0)) {
        snprintf(err, errlen, "--lora: expected R,ALPHA,MODULES[,rslora] (MODULES q_proj:v_proj:... "
                 "or all), got '%s'", s);
        return -1;
    }
    l->r = r;
    l->alpha = alpha;
    l->use_rslora = got == 4;
    l->nf4 = nf4;
    char *save, *tok = strtok_r(mods, ":", &save);
    for (; tok; tok = strtok_r(NULL, ":", &save)) {
        int m = 0;
        if (strcmp(tok, "all") == 0) {
            l->modules = (1u << STAGE_LORA_MODULES) - 1;
            continue;
        }
        while (m < STAGE_LORA_MODULES && strcmp(stage_lora_module_name(m), tok) != 0) m++;
        if (m == STAGE_LORA_MODULES) {
            snprintf(err, errlen, "--lora: %s is not a module (q_proj ... down_proj)", tok);
            return -1;
        }
        l->modules |= 1u << m;
    }
    return stage_lora_check(l, err, errlen);
}

static int random_batch(int32_t **ids, int32_t **labels, int B, int T, int V, uint64_t seed,
                        char *err, size_t errlen)
{
    size_t n = (size_t)B * T;
    *ids = malloc(n * sizeof **ids);
    *labels = malloc(n * sizeof **labels);
    if (!*ids || !*labels) {
        snprintf(err, errlen, "out of memory for the batch");
        return -1;
    }
    uint64_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        (*ids)[i] = (int32_t)((x >> 33) % (uint64_t)V);
    }
    for (size_t i = 0; i < n; i++)
        (*labels)[i] = i % (size_t)T == (size_t)T - 1 || i % 7 == 3 ? KERNELS_IGNORE_INDEX
                                                                   : (*ids)[i + 1];
    return 0;
}

int cmd_gradcheck(int argc, char **argv)
{
    const char *config = NULL, *weights = NULL, *batch = NULL, *out = NULL, *split = NULL,
               *threads = NULL, *random = NULL, *lora_arg = NULL, *device = "cpu";
    bool nf4 = false, input_grads = false;
    const args_option opts[] = {
        {"--random", &random, NULL},
        {"--config", &config, NULL}, {"--weights", &weights, NULL},
        {"--batch", &batch, NULL},   {"--out", &out, NULL},
        {"--split", &split, NULL},   {"--threads", &threads, NULL},
        {"--lora", &lora_arg, NULL}, {"--nf4", NULL, &nf4},
        {"--input-grads", NULL, &input_grads}, {"--device", &device, NULL},
    };
    const char *where = "";
    const char *required[] = {"--config", "--out", NULL};
    int nopts = (int)(sizeof opts / sizeof opts[0]);
    char err[512];
    llama_config cfg;
    split_plan plan;
    safetensors_file *wf = NULL, *bf = NULL;
    int32_t *ids = NULL, *labels = NULL;
    chain c = {0};
    kdev *dev = NULL;
    int B = 0, T = 0, rc = 1;
    long nthreads = 0;
    double loss = 0;
    uint64_t seed = 0;
    stage_lora lora;

    if (args_parse(argc, argv, 2, opts, nopts, err, sizeof err) ||
        args_require(opts, nopts, required, err, sizeof err))
        goto done;
    if (threads && args_int(threads, "--threads", 1, 1024, &nthreads, err, sizeof err))
        goto done;
    if (nthreads) kernels_set_threads((int)nthreads);
    if (llama_config_load(&cfg, config, err, sizeof err)) goto done;
    if (split_parse(&plan, split, cfg.num_hidden_layers, "--split", err, sizeof err))
        goto done;
    if (random && (weights || batch)) {
        snprintf(err, sizeof err, "--random replaces --weights and --batch: give one or the other");
        goto done;
    }
    if (!random && (!weights || !batch)) {
        snprintf(err, sizeof err, "--weights and --batch are required (or --random B,T,SEED)");
        goto done;
    }
    if (random) {
        if (parse_random(random, &B, &T, &seed, err, sizeof err) ||
            random_batch(&ids, &labels, B, T, cfg.vocab_size, seed, err, sizeof err))
            goto done;
    } else {
        if (safetensors_open(&wf, weights, err, sizeof err)) goto done;
        if (safetensors_open(&bf, batch, err, sizeof err)) goto done;
        if (read_batch(bf, &ids, &labels, &B, &T, err, sizeof err)) goto done;
    }
    if (nf4 && !lora_arg) {
        snprintf(err, sizeof err, "--nf4 needs --lora: an NF4 base is frozen");
        goto done;
    }
    if (lora_arg && parse_lora(lora_arg, nf4, &lora, err, sizeof err)) goto done;
    if (kdev_open(device, &dev, err, sizeof err) != KDEV_OK ||
        chain_create_on(&c, &cfg, &plan, B, T, lora_arg ? &lora : NULL, dev, err, sizeof err))
        goto done;
    for (int i = 0; i < plan.nstages; i++) {
        if (random)
            stage_init_weights(c.stages[i], seed);
        else if (stage_load_weights(c.stages[i], wf, err, sizeof err) ||
                 (lora_arg && stage_load_adapters(c.stages[i], wf, err, sizeof err)))
            goto done;
    }
    for (int i = 0; i < plan.nstages; i++) stage_zero_grads(c.stages[i]);
    int kept = 0;
    if (chain_forward_backward(&c, ids, labels, 0.0f, &loss, &kept, err, sizeof err)) {
        where = batch ? batch : ""; /* the only input a forward can reject */
        goto done;
    }
    chain_sum_tied_grads(&c);
    if (chain_pull(&c, err, sizeof err)) goto done;
    if (write_grads(&c, out, (float)(loss / kept), input_grads, err, sizeof err)) goto done;
    rc = 0;
done:
    if (rc) fprintf(stderr, "shardnode gradcheck: %s%s%s\n", where, *where ? ": " : "", err);
    chain_free(&c);
    kdev_close(dev);
    free(ids);
    free(labels);
    safetensors_close(wf);
    safetensors_close(bf);
    return rc;
}

/* chain.c — a split plan's stages in one process, passing activations and
 * gradients between neighbours the way the pipeline does over the wire. */
#include "runtime.h"

#include "import.h"
#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int chain_create(chain *c, const llama_config *cfg, const split_plan *plan, int B, int T,
                 char *err, size_t errlen)
{
    return chain_create_lora(c, cfg, plan, B, T, NULL, err, errlen);
}

int chain_create_lora(chain *c, const llama_config *cfg, const split_plan *plan, int B, int T,
                      const stage_lora *lora, char *err, size_t errlen)
{
    return chain_create_on(c, cfg, plan, B, T, lora, NULL, err, errlen);
}

int chain_create_on(chain *c, const llama_config *cfg, const split_plan *plan, int B, int T,
                    const stage_lora *lora, kdev *dev, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    c->plan = *plan;
    c->B = B;
    c->T = T;
    for (int i = 0; i < plan->nstages; i++)
        if (stage_create_on(&c->stages[i], cfg, plan->begin[i], plan->end[i], i == 0,
                            i == plan->nstages - 1, B, T, 1, lora, dev, err, errlen)) {
            chain_free(c);
            return -1;
        }
    return 0;
}

void chain_free(chain *c)
{
    for (int i = 0; i < c->plan.nstages; i++) stage_free(c->stages[i]);
    memset(c->stages, 0, sizeof c->stages);
}

int chain_forward(chain *c, const int32_t *ids, const int32_t *labels, double *loss_sum,
                  int *kept, char *err, size_t errlen)
{
    for (int i = 0; i < c->plan.nstages; i++) {
        const float *in = i ? stage_output(c->stages[i - 1], 0) : NULL;
        if (stage_forward(c->stages[i], 0, ids, in, labels, loss_sum, kept, err, errlen)) return -1;
    }
    return 0;
}

int chain_forward_backward(chain *c, const int32_t *ids, const int32_t *labels,
                           float loss_scale, double *loss_sum, int *kept, char *err,
                           size_t errlen)
{
    int n = c->plan.nstages, k = 0;
    if (chain_forward(c, ids, labels, loss_sum, &k, err, errlen)) return -1;
    if (loss_scale <= 0 && k == 0) {
        snprintf(err, errlen, "labels: every target is -100, so the loss is undefined");
        return -1;
    }
    if (kept) *kept = k;
    for (int i = n - 1; i >= 0; i--) {
        const float *dout = i < n - 1 ? stage_input_grad(c->stages[i + 1]) : NULL;
        stage_backward(c->stages[i], 0, dout, loss_scale > 0 ? loss_scale : 1.0f / (float)k);
    }
    return 0;
}

/* Finds a parameter by name in a stage; -1 if absent. */
static int find_param(const stage *s, const char *name)
{
    for (int i = 0; i < stage_param_count(s); i++)
        if (strcmp(stage_param_at(s, i)->name, name) == 0) return i;
    return -1;
}

void chain_sum_tied_grads(chain *c)
{
    int n = c->plan.nstages;
    if (n == 1) stage_sum_tied_grads(c->stages[0]);
    if (n < 2 || !c->cfg.tie_word_embeddings) return;
    stage *first = c->stages[0], *last = c->stages[n - 1];
    int a = find_param(first, "model.embed_tokens.weight");
    int b = find_param(last, "model.embed_tokens.weight");
    if (a < 0 || b < 0) return;
    const stage_param *pa = stage_param_at(first, a), *pb = stage_param_at(last, b);
    /* On a GPU through the host copies (a split chain on one device is for
     * tests; pull and push move every buffer, so both stay consistent). */
    char err[256];
    if (stage_pull(first, err, sizeof err) || stage_pull(last, err, sizeof err)) return;
    float *ga = stage_grads(first) + pa->offset, *gb = stage_grads(last) + pb->offset;
    kernels_add(ga, gb, pa->numel);
    memcpy(gb, ga, pa->numel * sizeof(float));
    stage_push(first, err, sizeof err);
    stage_push(last, err, sizeof err);
}

int chain_pull(chain *c, char *err, size_t errlen)
{
    for (int i = 0; i < c->plan.nstages; i++)
        if (stage_pull(c->stages[i], err, errlen)) return -1;
    return 0;
}

int chain_push(chain *c, char *err, size_t errlen)
{
    for (int i = 0; i < c->plan.nstages; i++)
        if (stage_push(c->stages[i], err, errlen)) return -1;
    return 0;
}

int chain_sync(chain *c, char *err, size_t errlen)
{
    for (int i = 0; i < c->plan.nstages; i++)
        if (kdev_sync(stage_device(c->stages[i]), err, errlen) != KDEV_OK) return -1;
    return 0;
}

double chain_adamw_step(chain *c, const stage_adamw *opt, int t, double max_norm)
{
    chain_sum_tied_grads(c);
    double sumsq = 0.0;
    for (int i = 0; i < c->plan.nstages; i++) sumsq += stage_grad_sumsq(c->stages[i]);
    double norm = sqrt(sumsq);
    /* as torch.nn.utils.clip_grad_norm_ */
    double coef = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
    float scale = coef < 1.0 ? (float)coef : 1.0f;
    for (int i = 0; i < c->plan.nstages; i++) stage_adamw_step(c->stages[i], opt, t, scale);
    return norm;
}

int job_init_stage(const job_spec *j, const llama_config *cfg, stage *s, char *err,
                   size_t errlen)
{
    int rc = 0;
    if (j->base_model) {
        hf_model *m;
        if (hf_open(&m, j->base_model, err, errlen)) return -1;
        char have[512], want[512];
        checkpoint_config_string(hf_config(m), have, sizeof have);
        checkpoint_config_string(cfg, want, sizeof want);
        if (strcmp(have, want) != 0) {
            snprintf(err, errlen, "%.900s: the base model's config.json is not the job's "
                     "\"config\" (%.400s against %.400s)", j->base_model, have, want);
            rc = -1;
        } else {
            rc = hf_load_stage(m, s, err, errlen);
        }
        hf_close(m);
    } else if (j->init_weights) {
        safetensors_file *f;
        if (safetensors_open(&f, j->init_weights, err, errlen)) return -1;
        rc = stage_load_weights(s, f, err, errlen);
        safetensors_close(f);
    } else {
        stage_init_weights(s, j->seed);   /* with lora: the adapters too */
        return 0;
    }
    if (rc == 0 && j->has_lora) stage_init_adapters(s, j->seed);
    return rc;
}

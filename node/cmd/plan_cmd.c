/* plan_cmd.c — `shardnode plan`: the planner and the 1F1B simulator run
 * offline on a fleet file, beside the uniform split a user would otherwise
 * write by hand (the Megatron/DeepSpeed default), as text or JSON. */
#include "commands.h"
#include "node_base.h"
#include "plan_svg.h"
#include "pool_job.h"
#include "runtime.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void fmt_ns(char *buf, size_t len, int64_t ns)
{
    if (ns >= 1000000000)
        snprintf(buf, len, "%.3f s", (double)ns * 1e-9);
    else if (ns >= 1000000)
        snprintf(buf, len, "%.1f ms", (double)ns * 1e-6);
    else
        snprintf(buf, len, "%.1f us", (double)ns * 1e-3);
}

/* What the report says of one plan. */
typedef struct {
    const char *title;
    bool ok;
    char error[512];
    plan *p;
    sim_result sim;
    bool sim_ok;
} report;

/* --svg FILE: the plan as the dashboard draws it (plan_svg.c). */
static int write_svg(const plan *p, const fleet_file *ff, const char *hash, const char *path,
                     char *err, size_t errlen)
{
    plan_svg *ps = calloc(1, sizeof *ps);
    if (!ps) return node_errf(err, errlen, "--svg %s: out of memory", path);
    char step[32];
    fmt_ns(step, sizeof step, p->step_ns);
    snprintf(ps->title, sizeof ps->title, "fleet %.60s: plan %s, %d stages, micro-batch %lld, "
             "step %s", ff->name, hash, p->nstages, (long long)p->micro_batch, step);
    ps->bottleneck = p->bottleneck;
    ps->nstages = p->nstages < PLAN_SVG_MAX_STAGES ? p->nstages : PLAN_SVG_MAX_STAGES;
    int n = ff->fleet.nnodes;
    for (int s = 0; s < ps->nstages; s++) {
        const plan_stage *st = &p->stage[s];
        plan_svg_stage *o = &ps->stage[s];
        snprintf(o->member, sizeof o->member, "%s", ff->fleet.nodes[st->node[0]].name);
        snprintf(o->device, sizeof o->device, "%s", ff->fleet.nodes[st->node[0]].device);
        o->layer_begin = st->layer_begin;
        o->layer_end = st->layer_end;
        o->embed = st->embed;
        o->head = st->head;
        o->mem_used = st->memory_bytes;
        o->mem_limit = st->memory_limit;
        o->predicted_ns = st->time_ns;
        if (s + 1 < p->nstages)
            o->link_bw = ff->fleet.links[st->node[0] * n + p->stage[s + 1].node[0]].bandwidth;
    }
    int rc = plan_svg_write(ps, path, err, errlen);
    free(ps);
    return rc;
}

static double tokens_per_s(const plan *p, const plan_job *job)
{
    return (double)job->batch * (double)job->shape.seq * 1e9 / (double)p->step_ns;
}

static void simulate(report *r)
{
    char e[256];
    r->sim_ok = r->ok && sim_run(&r->sim, r->p, e, sizeof e) == 0;
}

static void layers_text(char *buf, size_t len, const plan_stage *st)
{
    snprintf(buf, len, "%s[%d, %d)%s", st->embed ? "emb + " : "", st->layer_begin, st->layer_end,
             st->head ? " + head" : "");
}

static void print_plan(const report *r, const fleet_file *ff, const plan_job *job, bool stages)
{
    char a[32], b[32], c[32];
    const plan *p = r->p;
    if (stages) {
        printf("  %-5s %-16s %-14s %-22s %12s %11s %9s  %s\n", "stage", "node", "device", "layers",
               "t/micro", "transfers", "in flight", "memory used / limit");
        for (int s = 0; s < p->nstages; s++) {
            const plan_stage *st = &p->stage[s];
            char lay[64];
            layers_text(lay, sizeof lay, st);
            fmt_ns(a, sizeof a, st->time_ns);
            fmt_ns(b, sizeof b, st->send_ns + st->recv_ns);
            char mu[32], ml[32];
            cost_format_bytes(mu, sizeof mu, st->memory_bytes);
            cost_format_bytes(ml, sizeof ml, st->memory_limit);
            printf("  %-5d %-16s %-14s %-22s %12s %11s %9lld  %s / %s%s\n", s,
                   ff->fleet.nodes[st->node[0]].name, ff->fleet.nodes[st->node[0]].device, lay, a,
                   b, (long long)st->in_flight, mu, ml, s == p->bottleneck ? "  <- bottleneck" : "");
        }
    }
    fmt_ns(a, sizeof a, p->step_ns);
    fmt_ns(b, sizeof b, p->pipeline_ns);
    fmt_ns(c, sizeof c, p->optimizer_ns);
    printf("  %lld micro-batches of %lld; step %s = pipeline %s + optimizer %s; %.0f tokens/s; "
           "bubble %.1f%%\n", (long long)p->micro_batches, (long long)p->micro_batch, a, b, c,
           tokens_per_s(p, job), (double)p->bubble_ppm / 1e4);
    if (r->sim_ok) {
        fmt_ns(a, sizeof a, r->sim.step_ns);
        printf("  simulated 1F1B, event by event: step %s; the cost model is %+.2f%% from it\n", a,
               100.0 * (double)(p->step_ns - r->sim.step_ns) / (double)r->sim.step_ns);
    }
}

static json_t *plan_json(const report *r, const fleet_file *ff, const plan_job *job,
                         const plan *best)
{
    if (!r->ok) return json_pack("{s:s}", "error", r->error);
    const plan *p = r->p;
    json_t *stages = json_array();
    for (int s = 0; s < p->nstages; s++) {
        const plan_stage *st = &p->stage[s];
        json_array_append_new(stages, json_pack(
            "{s:s,s:s,s:i,s:i,s:b,s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
            "node", ff->fleet.nodes[st->node[0]].name, "device", ff->fleet.nodes[st->node[0]].device,
            "layer_begin", st->layer_begin, "layer_end", st->layer_end, "embedding", st->embed,
            "head", st->head, "time_ns", (json_int_t)st->time_ns, "forward_ns", (json_int_t)st->fwd_ns,
            "backward_ns", (json_int_t)st->bwd_ns, "send_ns", (json_int_t)st->send_ns,
            "recv_ns", (json_int_t)st->recv_ns, "optimizer_ns", (json_int_t)st->opt_ns,
            "in_flight", (json_int_t)st->in_flight, "memory_bytes", (json_int_t)st->memory_bytes,
            "memory_limit", (json_int_t)st->memory_limit));
    }
    char hash[20];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)plan_hash(p, &ff->fleet));
    json_t *o = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:o}", "hash", hash,
                          "micro_batches", (json_int_t)p->micro_batches,
                          "micro_batch", (json_int_t)p->micro_batch, "step_ns", (json_int_t)p->step_ns,
                          "pipeline_ns", (json_int_t)p->pipeline_ns,
                          "optimizer_ns", (json_int_t)p->optimizer_ns,
                          "tokens_per_s", tokens_per_s(p, job), "bubble", (double)p->bubble_ppm / 1e6,
                          "stages", stages);
    if (r->sim_ok)
        json_object_set_new(o, "simulated", json_pack("{s:I,s:I,s:f}", "step_ns",
                            (json_int_t)r->sim.step_ns, "pipeline_ns", (json_int_t)r->sim.pipeline_ns,
                            "model_vs_simulated", (double)(p->step_ns - r->sim.step_ns) /
                                                      (double)r->sim.step_ns));
    if (best && best != p)
        json_object_set_new(o, "plan_speedup", json_real((double)p->step_ns / (double)best->step_ns));
    return o;
}

/* "full fine-tuning", or "LoRA r 16 on q_proj, v_proj, NF4 base". */
static void kind_text(char *buf, size_t len, const cost_shape *s)
{
    if (s->lora_r <= 0) {
        snprintf(buf, len, "full fine-tuning");
        return;
    }
    size_t used = (size_t)snprintf(buf, len, "LoRA r %lld on ", (long long)s->lora_r);
    for (int m = 0, k = 0; m < STAGE_LORA_MODULES && used < len; m++)
        if (s->lora_modules & (1u << m))
            used += (size_t)snprintf(buf + used, len - used, "%s%s", k++ ? ", " : "",
                                     stage_lora_module_name(m));
    if (used < len) snprintf(buf + used, len - used, ", %s base", s->nf4 ? "NF4" : "frozen fp32");
}

/* The uniform split a user who knows only memory sizes would pick: the p
 * nodes with the most memory (largest first, as early stages keep more
 * micro-batches in flight), for the best p. Returns that p (0: none fits;
 * the error of the largest count that was tried is kept). */
static int uniform_best_count(report *r, const fleet_file *ff, const plan_job *job, int *order)
{
    int n = ff->fleet.nnodes, best_p = 0;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int a = 1; a < n; a++)
        for (int j = a; j > 0 && ff->fleet.nodes[order[j]].prof.memory_bytes >
                                     ff->fleet.nodes[order[j - 1]].prof.memory_bytes; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    plan *tmp = malloc(sizeof *tmp);
    if (!tmp) return 0;
    for (int p = 1; p <= n && p <= job->shape.layers && p <= PLAN_MAX_STAGES; p++) {
        char e[512];
        if (plan_uniform(tmp, &ff->fleet, job, order, p, e, sizeof e)) {
            if (!best_p) snprintf(r->error, sizeof r->error, "%s", e);
            continue;
        }
        if (!best_p || tmp->step_ns < r->p->step_ns) {
            *r->p = *tmp;
            best_p = p;
        }
    }
    r->ok = best_p > 0;
    free(tmp);
    return best_p;
}

static const char *method_name(plan_method m)
{
    return m == PLAN_EXACT ? "exact" : m == PLAN_HEURISTIC ? "heuristic" : m == PLAN_EXHAUSTIVE
                                                                               ? "exhaustive" : "auto";
}

int cmd_plan(int argc, char **argv)
{
    const char *fleet = NULL, *model = NULL, *micro = NULL, *seq = NULL, *batch = NULL,
               *devices = NULL, *method = "auto", *wire = "f32", *budget = "0", *svg = NULL,
               *job_path = NULL;
    bool exhaustive = false, as_json = false;
    const args_option opts[] = {
        {"--fleet", &fleet, NULL},        {"--model", &model, NULL},
        {"--micro-batch", &micro, NULL},  {"--seq", &seq, NULL},
        {"--batch", &batch, NULL},        {"--devices", &devices, NULL},
        {"--method", &method, NULL},      {"--wire", &wire, NULL},
        {"--budget", &budget, NULL},
        {"--exhaustive", NULL, &exhaustive}, {"--json", NULL, &as_json},
        {"--svg", &svg, NULL},            {"--job", &job_path, NULL},
    };
    const char *required[] = {"--fleet", NULL};
    int nopts = (int)(sizeof opts / sizeof opts[0]), rc = 1;
    char err[1024];
    long B, T = 0, N, budget_n;
    llama_config cfg;
    job_spec js;
    bool has_job = false;
    fleet_file ff = {0};
    report rp = {"plan", false, "", NULL, {0}, false};
    report ua = {"uniform, all nodes", false, "", NULL, {0}, false};
    report un = {"uniform, the plan's nodes", false, "", NULL, {0}, false};
    report ex = {"exhaustive", false, "", NULL, {0}, false};
    report ub = {"uniform, best stage count", false, "", NULL, {0}, false};
    int best_p = 0;
    int *order = NULL;
    plan_method pm = PLAN_AUTO;
    if (args_parse(argc, argv, 2, opts, nopts, err, sizeof err) ||
        args_require(opts, nopts, required, err, sizeof err)) {
        fprintf(stderr, "shardnode plan: %s\n", err);
        return 2;
    }
    /* --job: the model, sequence, batch, micro-batch and LoRA/NF4 settings
     * of a job file, as the pool plans it; else --model and the flags */
    if (job_path && (model || micro || seq || batch)) {
        fprintf(stderr, "shardnode plan: --job %s gives the model, --seq, --batch and "
                        "--micro-batch; do not give them as well\n", job_path);
        return 2;
    }
    if (!job_path && !model) {
        fprintf(stderr, "shardnode plan: --model or --job is required\n");
        return 2;
    }
    if (job_path) {
        if (job_load(&js, job_path, err, sizeof err)) {
            fprintf(stderr, "shardnode plan: %s\n", err);
            return 2;
        }
        has_job = true;
        model = js.config;
    }
    char seq_s[32], batch_s[32], micro_s[32];
    if (has_job) {
        snprintf(seq_s, sizeof seq_s, "%d", js.seq_len);
        snprintf(batch_s, sizeof batch_s, "%d", js.batch);
        snprintf(micro_s, sizeof micro_s, "%d", js.micro_batch);
        seq = seq_s, batch = batch_s, micro = micro_s;
    }
    if (!micro) micro = "1";
    if (!batch) batch = "32";
    if (llama_config_load(&cfg, model, err, sizeof err) ||
        args_int(micro, "--micro-batch", 1, 1 << 20, &B, err, sizeof err) ||
        args_int(batch, "--batch", 1, 1 << 24, &N, err, sizeof err) ||
        args_int(budget, "--budget", 0, 1L << 40, &budget_n, err, sizeof err) ||
        (seq && args_int(seq, "--seq", 1, cfg.max_position_embeddings, &T, err, sizeof err))) {
        fprintf(stderr, "shardnode plan: %s\n", err);
        if (has_job) job_free(&js);
        return 2;
    }
    if (!seq) T = cfg.max_position_embeddings < 1024 ? cfg.max_position_embeddings : 1024;
    if (strcmp(method, "auto") && strcmp(method, "exact") && strcmp(method, "heuristic")) {
        fprintf(stderr, "shardnode plan: --method \"%s\": expected auto, exact or heuristic\n", method);
        if (has_job) job_free(&js);
        return 2;
    }
    if (strcmp(wire, "f32") && strcmp(wire, "bf16")) {   /* as a cluster file's wire_dtype */
        fprintf(stderr, "shardnode plan: --wire \"%s\": expected f32 or bf16\n", wire);
        if (has_job) job_free(&js);
        return 2;
    }
    pm = !strcmp(method, "exact") ? PLAN_EXACT : !strcmp(method, "heuristic") ? PLAN_HEURISTIC
                                                                             : PLAN_AUTO;
    cost_shape shape = has_job ? pool_job_shape(&cfg, &js) : fleet_shape(&cfg, T);
    char kind[160];
    kind_text(kind, sizeof kind, &shape);
    if (fleet_load(&ff, fleet, devices, &shape, B, err, sizeof err)) {
        /* A profile measured for another model or sequence: say which model
         * the plan is for, so both files of the mismatch are named. */
        if (strstr(err, "the profile was measured")) {
            size_t l = strlen(err);
            snprintf(err + l, sizeof err - l, " (--model %s, --seq %lld)", model,
                     (long long)T);
        }
        goto fail;
    }
    plan_job job = {.shape = shape,
                    .batch = N,
                    .max_micro_batch = B,
                    .min_micro_batch = has_job ? B : 0,   /* a job keeps its micro-batch */
                    .wire_bytes = strcmp(wire, "bf16") ? 4 : 2,
                    .margin_permille = ff.margin_permille,
                    .search_budget = budget_n};
    int n = ff.fleet.nnodes;
    rp.p = malloc(sizeof *rp.p);
    ua.p = malloc(sizeof *ua.p);
    un.p = malloc(sizeof *un.p);
    ex.p = malloc(sizeof *ex.p);
    ub.p = malloc(sizeof *ub.p);
    order = malloc((size_t)n * sizeof *order);
    if (!rp.p || !ua.p || !un.p || !ex.p || !ub.p || !order) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    plan_stats st = {0}, xst = {0};
    double t0 = now_ms();
    if (plan_compute(rp.p, &ff.fleet, &job, pm, &st, err, sizeof err)) {
        fprintf(stderr, "shardnode plan: %s does not fit: %s\n", kind, err);
        goto out;
    }
    double plan_ms = now_ms() - t0, ex_ms = 0;
    rp.ok = true;
    for (int i = 0; i < n; i++) order[i] = i;
    ua.ok = plan_uniform(ua.p, &ff.fleet, &job, order, n, ua.error, sizeof ua.error) == 0;
    for (int s = 0; s < rp.p->nstages; s++) order[s] = rp.p->stage[s].node[0];
    un.ok = plan_uniform(un.p, &ff.fleet, &job, order, rp.p->nstages, un.error, sizeof un.error) == 0;
    best_p = uniform_best_count(&ub, &ff, &job, order);
    if (exhaustive) {
        t0 = now_ms();
        ex.ok = plan_compute(ex.p, &ff.fleet, &job, PLAN_EXHAUSTIVE, &xst, ex.error,
                             sizeof ex.error) == 0;
        ex_ms = now_ms() - t0;
    }
    simulate(&rp);
    simulate(&ua);
    simulate(&un);
    simulate(&ub);
    char hash[20];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)plan_hash(rp.p, &ff.fleet));
    if (svg && write_svg(rp.p, &ff, hash, svg, err, sizeof err) != 0) goto fail;
    cost_bytes cb;
    cost_bytes_compute(&cb, &shape, 1, 4, NULL, 0);
    int64_t params = cb.params[COST_EMBED] + shape.layers * cb.params[COST_LAYER] +
                     (shape.tied ? shape.hidden : cb.params[COST_HEAD]);
    int64_t trainable = shape.lora_r > 0 ? shape.layers * cb.trainable[COST_LAYER] : params;
    if (as_json) {
        json_t *o = json_pack("{s:{s:s,s:s,s:i},s:{s:s,s:i,s:I,s:I,s:I},s:{s:I,s:I,s:I,s:s,s:f}}",
                              "fleet", "name", ff.name, "path", fleet, "nodes", n,
                              "model", "path", model, "layers", shape.layers, "hidden_size",
                              (json_int_t)shape.hidden, "vocab_size", (json_int_t)shape.vocab,
                              "parameters", (json_int_t)params,
                              "job", "batch", (json_int_t)N, "seq", (json_int_t)T,
                              "max_micro_batch", (json_int_t)B, "wire", wire,
                              "memory_margin", ff.margin_permille / 1000.0);
        json_t *jo = json_object_get(o, "job");
        if (has_job) json_object_set_new(jo, "path", json_string(job_path));
        json_object_set_new(jo, "trainable_parameters", json_integer((json_int_t)trainable));
        if (shape.lora_r > 0) {
            json_t *mods = json_array();
            for (int m = 0; m < STAGE_LORA_MODULES; m++)
                if (shape.lora_modules & (1u << m))
                    json_array_append_new(mods, json_string(stage_lora_module_name(m)));
            json_object_set_new(jo, "lora", json_pack("{s:I,s:o,s:s}", "r",
                                (json_int_t)shape.lora_r, "target_modules", mods, "base",
                                shape.nf4 ? "nf4" : "fp32"));
        } else {
            json_object_set_new(jo, "lora", json_null());
        }
        json_t *pj = plan_json(&rp, &ff, &job, NULL);
        json_object_set_new(pj, "method", json_string(method_name(st.method)));
        json_object_set_new(pj, "orders", json_integer((json_int_t)st.orders));
        json_object_set_new(pj, "planning_ms", json_real(plan_ms));
        json_object_set_new(o, "plan", pj);
        json_object_set_new(o, "uniform_all_nodes", plan_json(&ua, &ff, &job, rp.p));
        json_object_set_new(o, "uniform_plan_nodes", plan_json(&un, &ff, &job, rp.p));
        json_t *bj = plan_json(&ub, &ff, &job, rp.p);
        if (ub.ok) json_object_set_new(bj, "nodes", json_integer(best_p));
        json_object_set_new(o, "uniform_best_count", bj);
        if (exhaustive) {
            json_t *xj = plan_json(&ex, &ff, &job, NULL);
            if (ex.ok) {
                json_object_set_new(xj, "orders", json_integer((json_int_t)xst.orders));
                json_object_set_new(xj, "time_ms", json_real(ex_ms));
                json_object_set_new(xj, "gap", json_real((double)(rp.p->step_ns - ex.p->step_ns) /
                                                         (double)ex.p->step_ns));
            }
            json_object_set_new(o, "exhaustive", xj);
        }
        char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        printf("%s\n", text ? text : "{}");
        free(text);
        json_decref(o);
    } else {
        printf("fleet \"%s\" (%s): %d nodes\n", ff.name, fleet, n);
        printf("model %s: %d layers, hidden %lld, vocab %lld, %.2f B parameters; batch %ld x %ld "
               "tokens, micro-batches of %s %ld; %s on the wire; %.1f%% memory margin\n",
               model, shape.layers, (long long)shape.hidden, (long long)shape.vocab,
               (double)params * 1e-9, N, T, has_job ? "exactly" : "at most", B, wire,
               ff.margin_permille / 10.0);
        if (shape.lora_r > 0)
            printf("training: %s (job %s); %.2f M trainable parameters\n\n", kind,
                   has_job ? job_path : "-", (double)trainable * 1e-6);
        else if (has_job)
            printf("training: full fine-tuning (job %s)\n\n", job_path);
        else
            printf("training: full fine-tuning\n\n");
        printf("plan: %d stage%s, hash %s, %s search over %lld orders in %.1f ms\n",
               rp.p->nstages, rp.p->nstages == 1 ? "" : "s", hash, method_name(st.method),
               (long long)st.orders, plan_ms);
        print_plan(&rp, &ff, &job, true);
        report *base[3] = {&ua, &un, &ub};
        char best_what[96];
        snprintf(best_what, sizeof best_what, "the %d nodes with the most memory (the best count)",
                 best_p);
        const char *what[3] = {"all nodes in file order, the Megatron/DeepSpeed default",
                               "the plan's nodes in its order", best_what};
        for (int k = 0; k < 3; k++) {
            printf("\nuniform split, %s:\n", what[k]);
            if (!base[k]->ok) {
                printf("  does not run: %s\n", base[k]->error);
                continue;
            }
            print_plan(base[k], &ff, &job, false);
            printf("  the plan is %.2fx faster\n",
                   (double)base[k]->p->step_ns / (double)rp.p->step_ns);
        }
        if (exhaustive) {
            printf("\nexhaustive search: ");
            if (!ex.ok) {
                printf("%s\n", ex.error);
            } else {
                char a[32];
                fmt_ns(a, sizeof a, ex.p->step_ns);
                printf("%lld orders in %.1f ms: step %s; the plan is %.3f%% slower\n",
                       (long long)xst.orders, ex_ms, a,
                       100.0 * (double)(rp.p->step_ns - ex.p->step_ns) / (double)ex.p->step_ns);
            }
        }
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "shardnode plan: %s\n", err);
out:
    fleet_free(&ff);
    if (has_job) job_free(&js);
    free(rp.p);
    free(ua.p);
    free(un.p);
    free(ex.p);
    free(ub.p);
    free(order);
    return rc;
}

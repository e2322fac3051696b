/* plan.c — the planner's entry points: a fleet checked and put in canonical
 * order, reduced to integer tables per micro-batch size, searched
 * (plan_search.c), and turned into a plan that cost_evaluate confirms; the
 * uniform baseline; the plan hash; and, when nothing fits, what is missing
 * and where. */
#include "plan_internal.h"
#include "sched_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Bounds that keep every product of the search inside int64: a unit takes
 * at most ~28 hours per micro-batch, memory at most 1 PiB. */
#define MAX_UNIT_NS ((int64_t)1 << 46)
#define MAX_MEMORY ((int64_t)1 << 50)

int plan_fleet_check(const plan_fleet *f, char *err, size_t errlen)
{
    if (f->nnodes < 1 || f->nnodes > PLAN_MAX_NODES)
        return sched_errf(err, errlen, "fleet: %d nodes, must be 1 to %d", f->nnodes, PLAN_MAX_NODES);
    for (int i = 0; i < f->nnodes; i++) {
        const plan_node *nd = &f->nodes[i];
        const cost_profile *pf = &nd->prof;
        if (!nd->name[0] || !memchr(nd->name, 0, sizeof nd->name))
            return sched_errf(err, errlen, "fleet: node %d has no name", i);
        for (int j = 0; j < i; j++)
            if (strcmp(f->nodes[j].name, nd->name) == 0)
                return sched_errf(err, errlen, "fleet: node name \"%s\" appears twice (entries %d and %d)",
                            nd->name, j, i);
        if (pf->micro_batch < 1 || pf->micro_batch > ((int64_t)1 << 24) ||
            pf->scratch_slots < 1 || pf->memory_bytes < 0 || pf->memory_bytes > MAX_MEMORY)
            return sched_errf(err, errlen, "node %s: profile needs a micro-batch in [1, 2^24], "
                        "scratch slots >= 1 and memory in [0, 1 PiB]", nd->name);
        for (int u = 0; u < COST_UNITS; u++)
            if (pf->fwd_ns[u] < 0 || pf->bwd_ns[u] < 0 || pf->opt_ns[u] < 0 ||
                pf->fwd_ns[u] > MAX_UNIT_NS || pf->bwd_ns[u] > MAX_UNIT_NS ||
                pf->opt_ns[u] > MAX_UNIT_NS)
                return sched_errf(err, errlen, "node %s: profile times must be in [0, 2^46] ns",
                            nd->name);
    }
    for (int i = 0; i < f->nnodes; i++)
        for (int j = 0; j < f->nnodes; j++) {
            const cost_link *l = &f->links[(size_t)i * f->nnodes + j];
            if (i != j && (l->bandwidth < 1 || l->latency_ns < 0 || l->latency_ns > MAX_UNIT_NS))
                return sched_errf(err, errlen, "link %s -> %s: bandwidth must be positive and latency "
                            "in [0, 2^46] ns (have %lld B/s, %lld ns)", f->nodes[i].name,
                            f->nodes[j].name, (long long)l->bandwidth,
                            (long long)l->latency_ns);
        }
    return 0;
}

static int job_check(const plan_job *job, char *err, size_t errlen)
{
    cost_bytes cb;
    if (job->batch < 1 || job->batch > ((int64_t)1 << 24) || job->max_micro_batch < 1)
        return sched_errf(err, errlen, "batch %lld and micro-batch %lld must be in [1, 2^24]",
                    (long long)job->batch, (long long)job->max_micro_batch);
    if (job->margin_permille < 0 || job->margin_permille > 999)
        return sched_errf(err, errlen, "memory margin %d per mille: must be in [0, 999]",
                    job->margin_permille);
    return cost_bytes_compute(&cb, &job->shape, 1, job->wire_bytes, err, errlen);
}

/* ---- canonical order and problem tables --------------------------------- */

/* Canonical order: by name, byte by byte, so every node agrees on it
 * whatever the order it heard of its peers in. Names are unique
 * (plan_fleet_check), so the order is total. */
static void canonical(const plan_fleet *f, int *canon)
{
    for (int i = 0; i < f->nnodes; i++) {
        int j = i;
        while (j > 0 && strcmp(f->nodes[canon[j - 1]].name, f->nodes[i].name) > 0) {
            canon[j] = canon[j - 1];
            j--;
        }
        canon[j] = i;
    }
}

static void problem_free(plan_problem *pr)
{
    if (!pr) return;
    free(pr->E);
    free(pr->X);
    free(pr->K);
    free(pr);
}

/* A node without the job's data (no_data) gets no room for the embedding
 * (cap -1 with flag 1), so no search can make it the first stage; with
 * honour_no_data false the rule is lifted (to tell whether it is what leaves
 * no plan). */
static plan_problem *problem_build(const plan_fleet *f, const plan_job *job, const int *canon,
                                   int64_t b, bool honour_no_data, char *err, size_t errlen)
{
    int n = f->nnodes, L = job->shape.layers;
    cost_bytes cb;
    if (cost_bytes_compute(&cb, &job->shape, b, job->wire_bytes, err, errlen)) return NULL;
    plan_problem *pr = calloc(1, sizeof *pr);
    if (!pr) goto oom;
    pr->n = n;
    pr->L = L;
    pr->b = b;
    pr->m = job->batch / b;
    int maxp = n < L + 2 ? n : L + 2;
    pr->qmax = (int)(pr->m < maxp ? pr->m : maxp);
    /* one block for the per-node arrays */
    pr->E = calloc((size_t)n * 7, sizeof(int64_t));
    pr->X = calloc((size_t)n * n, sizeof(int64_t));
    pr->K = calloc((size_t)n * (pr->qmax + 1) * 4, sizeof(int));
    if (!pr->E || !pr->X || !pr->K) goto oom;
    pr->Y = pr->E + n;
    pr->H = pr->E + 2 * n;
    pr->oE = pr->E + 3 * n;
    pr->oY = pr->E + 4 * n;
    pr->oH = pr->E + 5 * n;
    pr->mem = pr->E + 6 * n;
    pr->canon = canon;
    int64_t worst = 0;
    for (int c = 0; c < n; c++) {
        cost_profile adj;   /* the job's kind of step (LoRA: cost_profile_for_shape) */
        cost_profile_for_shape(&adj, &f->nodes[canon[c]].prof, &job->shape);
        const cost_profile *pf = &adj;
        int64_t B = pf->micro_batch;
        pr->E[c] = cost_scale(pf->fwd_ns[COST_EMBED], b, B) + cost_scale(pf->bwd_ns[COST_EMBED], b, B);
        pr->Y[c] = cost_scale(pf->fwd_ns[COST_LAYER], b, B) + cost_scale(pf->bwd_ns[COST_LAYER], b, B);
        pr->H[c] = cost_scale(pf->fwd_ns[COST_HEAD], b, B) + cost_scale(pf->bwd_ns[COST_HEAD], b, B);
        pr->oE[c] = pf->opt_ns[COST_EMBED];
        pr->oY[c] = pf->opt_ns[COST_LAYER];
        pr->oH[c] = pf->opt_ns[COST_HEAD];
        pr->mem[c] = pf->memory_bytes;
        int64_t xmax = 0;
        for (int d = 0; d < n; d++) {
            if (d == c) continue;
            const cost_link *there = &f->links[(size_t)canon[c] * n + canon[d]];
            const cost_link *back = &f->links[(size_t)canon[d] * n + canon[c]];
            int64_t x = cost_transfer_ns(there, cb.boundary) + cost_transfer_ns(back, cb.boundary);
            if (x > MAX_UNIT_NS * 2) x = MAX_UNIT_NS * 2;   /* too slow to matter, never overflow */
            pr->X[(size_t)c * n + d] = x;
            if (x > xmax) xmax = x;
        }
        int64_t t = pr->E[c] + pr->H[c] + L * pr->Y[c] + xmax;
        int64_t o = pr->oE[c] + pr->oH[c] + L * pr->oY[c];
        if (t + o > worst) worst = t + o;
        int64_t limit = pf->memory_bytes - cost_muldiv(pf->memory_bytes, job->margin_permille, 1000);
        for (int q = 1; q <= pr->qmax; q++)
            for (int flags = 0; flags < 4; flags++) {
                bool e = flags & 1, h = flags & 2;
                int64_t m1 = cost_stage_memory(&cb, job->shape.tied, pf->scratch_slots, e, 1, h, q);
                int cap;
                if (m1 <= limit) {
                    int64_t d = cost_stage_memory(&cb, job->shape.tied, pf->scratch_slots, e, 2, h, q) - m1;
                    int64_t k = 1 + (d > 0 ? (limit - m1) / d : L);
                    cap = (int)(k < L ? k : L);
                } else {
                    cap = cost_stage_memory(&cb, job->shape.tied, pf->scratch_slots, e, 0, h, q) <= limit
                              ? 0 : -1;
                }
                if (e && honour_no_data && f->nodes[canon[c]].no_data) cap = -1;
                pr->K[((size_t)c * (pr->qmax + 1) + q) * 4 + flags] = cap;
            }
    }
    /* (m - 1) * max t + sum t + max o must stay far below INT64_MAX */
    if (worst > 0 && (pr->m + maxp) > (INT64_MAX / 8) / worst) {
        problem_free(pr);
        sched_errf(err, errlen, "fleet: stage times of up to %lld ns over %lld micro-batches are "
             "beyond the cost model's range", (long long)worst, (long long)(job->batch / b));
        return NULL;
    }
    return pr;
oom:
    problem_free(pr);
    sched_errf(err, errlen, "out of memory for the planner's tables (%d nodes)", n);
    return NULL;
}

/* Micro-batch sizes tried: divisors of the batch up to the largest allowed,
 * smallest first (so ties go to more, smaller micro-batches: less memory). */
static int micro_sizes(const plan_job *job, int64_t *sizes, int max)
{
    int n = 0;
    int64_t lo = job->min_micro_batch > 0 ? job->min_micro_batch : 1;
    for (int64_t b = lo; b <= job->max_micro_batch && b <= job->batch && n < max; b++)
        if (job->batch % b == 0) sizes[n++] = b;
    return n;
}

#define MAX_SIZES 64

/* ---- plans ----------------------------------------------------------------- */

static void fill_stages(plan *out, const plan_best *best, const int *canon, int64_t batch)
{
    memset(out, 0, sizeof *out);
    out->nstages = best->p;
    out->micro_batch = best->b;
    out->micro_batches = batch / best->b;
    int layer = 0;
    for (int s = 0; s < best->p; s++) {
        plan_stage *st = &out->stage[s];
        st->ndevices = 1;
        st->node[0] = canon[best->seq[s]];
        st->layer_begin = layer;
        layer += best->k[s];
        st->layer_end = layer;
        st->embed = s == 0;
        st->head = s == best->p - 1;
    }
}

int plan_uniform(plan *out, const plan_fleet *f, const plan_job *job, const int *order, int n,
                 char *err, size_t errlen)
{
    int L = job->shape.layers;
    if (plan_fleet_check(f, err, errlen) || job_check(job, err, errlen)) return -1;
    if (n < 1 || n > f->nnodes || n > PLAN_MAX_STAGES)
        return sched_errf(err, errlen, "uniform split: %d nodes", n);
    if (n > L)
        return sched_errf(err, errlen, "uniform split: %d nodes for %d layers leaves stages empty", n, L);
    if (order[0] < 0 || order[0] >= f->nnodes)
        return sched_errf(err, errlen, "uniform split: no node %d", order[0]);
    if (f->nodes[order[0]].no_data)
        return sched_errf(err, errlen, "uniform split: node %s cannot be the first stage: it does "
                          "not hold the job's data (tokenizer and data files)",
                          f->nodes[order[0]].name);
    int64_t sizes[MAX_SIZES];
    int nsizes = micro_sizes(job, sizes, MAX_SIZES);
    plan *tmp = malloc(sizeof *tmp);
    if (!tmp) return sched_errf(err, errlen, "out of memory");
    int64_t best = INT64_MAX;
    char first_err[512] = "";
    for (int r = 0; r < nsizes; r++) {
        plan_best pb;
        pb.p = n;
        pb.b = sizes[r];
        for (int s = 0; s < n; s++) {
            pb.seq[s] = s;
            pb.k[s] = L / n + (s < L % n ? 1 : 0);
        }
        fill_stages(tmp, &pb, order, job->batch);
        char e[512];
        if (cost_evaluate(tmp, f, job, e, sizeof e)) {
            if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", e);
            continue;
        }
        if (tmp->step_ns < best) {
            best = tmp->step_ns;
            *out = *tmp;
        }
    }
    free(tmp);
    if (best == INT64_MAX)
        return sched_errf(err, errlen, "uniform split over %d nodes does not fit: %s", n, first_err);
    return 0;
}

uint64_t plan_hash(const plan *p, const plan_fleet *f)
{
    char buf[PLAN_NAME_MAX + 64];
    uint64_t h = 14695981039346656037ull;
    int len = snprintf(buf, sizeof buf, "m=%lld b=%lld", (long long)p->micro_batches,
                       (long long)p->micro_batch);
    for (int i = 0; i < len; i++) h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
    for (int s = 0; s < p->nstages; s++) {
        const plan_stage *st = &p->stage[s];
        for (int d = 0; d < st->ndevices; d++) {
            len = snprintf(buf, sizeof buf, "|%s:%d:%d:%d%d", f->nodes[st->node[d]].name,
                           st->layer_begin, st->layer_end, st->embed, st->head);
            for (int i = 0; i < len; i++) h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
        }
    }
    return h;
}

void plan_to_split(const plan *p, split_plan *out)
{
    out->nstages = p->nstages;
    for (int s = 0; s < p->nstages; s++) {
        out->begin[s] = p->stage[s].layer_begin;
        out->end[s] = p->stage[s].layer_end;
    }
}

/* ---- when nothing fits ------------------------------------------------------ */

static int64_t unit_need(const cost_bytes *cb, const plan_job *job, const cost_profile *pf,
                         bool e, int k, bool h)
{
    return cost_stage_memory(cb, job->shape.tied, pf->scratch_slots, e, k, h, 1);
}

/* Says what is missing and where: a part that fits on no node, else the
 * layers the nodes cannot hold even with one micro-batch in flight, else
 * the in-flight activations of 1F1B. */
static int diagnose(const plan_fleet *f, const plan_job *job, const int *canon, char *err,
                    size_t errlen)
{
    int n = f->nnodes, L = job->shape.layers;
    cost_bytes cb;
    if (cost_bytes_compute(&cb, &job->shape, 1, job->wire_bytes, err, errlen)) return -1;
    static const struct { bool e; int k; bool h; const char *what; } parts[] = {
        {true, 0, false, "the embedding"},
        {false, 0, true, "the head (final norm, LM head and the logits of one micro-batch)"},
        {false, 1, false, "one decoder layer"},
    };
    int64_t *limit = malloc((size_t)n * sizeof *limit);
    if (!limit) return sched_errf(err, errlen, "out of memory");
    int largest = canon[0];
    for (int c = 0; c < n; c++) {
        int i = canon[c];
        const cost_profile *pf = &f->nodes[i].prof;
        limit[i] = pf->memory_bytes - cost_muldiv(pf->memory_bytes, job->margin_permille, 1000);
        if (limit[i] > limit[largest]) largest = i;
    }
    for (size_t u = 0; u < sizeof parts / sizeof parts[0]; u++) {
        int64_t best_gap = INT64_MAX;
        int at = largest;
        for (int i = 0; i < n; i++) {
            int64_t need = unit_need(&cb, job, &f->nodes[i].prof, parts[u].e, parts[u].k, parts[u].h);
            if (need - limit[i] < best_gap) {
                best_gap = need - limit[i];
                at = i;
            }
        }
        if (best_gap > 0) {
            int64_t need = unit_need(&cb, job, &f->nodes[at].prof, parts[u].e, parts[u].k, parts[u].h);
            char a[32], b[32], c[32];
            cost_format_bytes(a, sizeof a, need);
            cost_format_bytes(b, sizeof b, limit[at]);
            cost_format_bytes(c, sizeof c, best_gap);
            free(limit);
            return sched_errf(err, errlen, "the fleet cannot hold the model: %s needs %s with a "
                        "micro-batch of 1; the closest node, %s, has %s after the margin: "
                        "%s missing there", parts[u].what, a, f->nodes[at].name, b, c);
        }
    }
    /* layers each node can hold as a middle stage with one micro-batch in flight */
    int64_t total = 0;
    char list[400] = "";
    size_t used = 0;
    for (int c = 0; c < n; c++) {
        int i = canon[c];
        const cost_profile *pf = &f->nodes[i].prof;
        int64_t base = unit_need(&cb, job, pf, false, 1, false);
        int64_t per = unit_need(&cb, job, pf, false, 2, false) - base;
        int64_t k = base <= limit[i] ? 1 + (limit[i] - base) / per : 0;
        total += k;
        if (used + PLAN_NAME_MAX + 32 < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s %lld", c ? ", " : "",
                                     f->nodes[i].name, (long long)k);
        else if (used + 8 < sizeof list && !strstr(list, "..."))
            used += (size_t)snprintf(list + used, sizeof list - used, ", ...");
    }
    free(limit);
    int64_t per_layer = cb.weight[COST_LAYER] + cb.grad[COST_LAYER] + cb.moments[COST_LAYER] +
                        cb.act[COST_LAYER];
    char a[32], b[32];
    cost_format_bytes(a, sizeof a, (L - total) * per_layer);
    cost_format_bytes(b, sizeof b, per_layer);
    if (total < L)
        return sched_errf(err, errlen, "the fleet cannot hold the model: its %d nodes hold at most "
                    "%lld of the %d decoder layers even with one micro-batch in flight (%s); the "
                    "other %lld are missing: about %s more memory (%s per layer: %s)", n,
                    (long long)total, L, list, (long long)(L - total), a, b,
                    job->shape.lora_r > 0
                        ? (job->shape.nf4 ? "NF4 base, adapters with their gradients and AdamW "
                                            "moments, activations"
                                          : "frozen fp32 base, adapters with their gradients and "
                                            "AdamW moments, activations")
                        : "weights, gradients, AdamW moments, activations");
    /* the layers fit one by one, but not with 1F1B's p - s micro-batches in
     * flight on stage s: show where a uniform split by memory falls short */
    int *order = malloc((size_t)n * sizeof *order);
    plan *tmp = malloc(sizeof *tmp);
    char why[400] = "no split fits";
    if (order && tmp) {
        memcpy(order, canon, (size_t)n * sizeof *order);
        for (int a = 1; a < n; a++)
            for (int j = a; j > 0 && f->nodes[order[j - 1]].prof.memory_bytes <
                                        f->nodes[order[j]].prof.memory_bytes; j--) {
                int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        for (int a = 0; a < n; a++)   /* the largest node that holds the data goes first */
            if (!f->nodes[order[a]].no_data) {
                int t = order[a];
                memmove(order + 1, order, (size_t)a * sizeof *order);
                order[0] = t;
                break;
            }
        plan_job one = *job;
        one.max_micro_batch = 1;
        one.min_micro_batch = 0;
        int p = n < L ? n : L;
        if (plan_uniform(tmp, f, &one, order, p, why, sizeof why) == 0)
            snprintf(why, sizeof why, "only splits the planner did not reach fit");
    }
    free(order);
    free(tmp);
    return sched_errf(err, errlen, "the fleet cannot hold the model with 1F1B's in-flight micro-batches "
                "(stage s keeps min(p - s, m) of them): the nodes hold %lld layers with one in "
                "flight, but %s", (long long)total, why);
}

/* ---- entry point ------------------------------------------------------------ */

static void search(plan_problem *const *prs, int nsizes, const plan_job *job, plan_method method,
                   plan_best *best, int64_t *orders)
{
    if (method == PLAN_HEURISTIC)
        plan_search_heuristic((const plan_problem *const *)prs, nsizes,
                              job->search_budget > 0 ? job->search_budget : PLAN_SEARCH_BUDGET,
                              best, orders);
    else
        for (int r = 0; r < nsizes; r++)
            plan_search_exact(prs[r], best, method == PLAN_EXACT, orders);
}

/* The names of the nodes with (lacking true) or without the job's data, in
 * canonical order, ", "-separated, cut with "..." when too long. */
static void no_data_names(const plan_fleet *f, const int *canon, bool lacking, char *buf,
                          size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int c = 0; c < f->nnodes; c++) {
        const plan_node *nd = &f->nodes[canon[c]];
        if (nd->no_data != lacking) continue;
        if (used + strlen(nd->name) + 8 >= len) {
            snprintf(buf + used, len - used, "%s...", used ? ", " : "");
            return;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", nd->name);
    }
}

/* Whether some plan would fit if any node could be the first stage: tells
 * "the data is in the wrong place" from "the memory is missing". */
static bool fits_without_data_rule(const plan_fleet *f, const plan_job *job, const int *canon,
                                   const int64_t *sizes, int nsizes, plan_method method)
{
    plan_problem *prs[MAX_SIZES];
    int built = 0;
    bool fits = false;
    plan_best *best = malloc(sizeof *best);
    if (!best) return false;
    for (; built < nsizes; built++)
        if (!(prs[built] = problem_build(f, job, canon, sizes[built], false, NULL, 0))) goto out;
    best->cost = PLAN_INF;
    best->p = 0;
    int64_t orders = 0;
    search(prs, nsizes, job, method, best, &orders);
    fits = best->cost < PLAN_INF;
out:
    for (int r = 0; r < built; r++) problem_free(prs[r]);
    free(best);
    return fits;
}

int plan_compute(plan *out, const plan_fleet *f, const plan_job *job, plan_method method,
                 plan_stats *stats, char *err, size_t errlen)
{
    if (plan_fleet_check(f, err, errlen) || job_check(job, err, errlen)) return -1;
    int n = f->nnodes;
    if (method == PLAN_AUTO) method = n <= PLAN_EXACT_MAX_NODES ? PLAN_EXACT : PLAN_HEURISTIC;
    if ((method == PLAN_EXACT || method == PLAN_EXHAUSTIVE) && n > PLAN_EXHAUSTIVE_MAX_NODES)
        return sched_errf(err, errlen, "an exhaustive search over %d nodes is out of reach (the limit "
                    "is %d nodes: %d nodes already have millions of orders)", n,
                    PLAN_EXHAUSTIVE_MAX_NODES, PLAN_EXHAUSTIVE_MAX_NODES);
    int *canon = malloc((size_t)n * sizeof *canon);
    plan_problem *prs[MAX_SIZES];
    int64_t sizes[MAX_SIZES];
    int nsizes = micro_sizes(job, sizes, MAX_SIZES), built = 0, rc = -1;
    plan_best *best = malloc(sizeof *best);
    if (!canon || !best) {
        sched_errf(err, errlen, "out of memory");
        goto out;
    }
    canonical(f, canon);
    int nodata = 0;
    for (int i = 0; i < n; i++) nodata += f->nodes[i].no_data;
    if (nodata == n) {
        char names[300];
        no_data_names(f, canon, true, names, sizeof names);
        sched_errf(err, errlen, "no node that holds the job's data can be the first stage: none "
                   "of the %d nodes holds it (%s)", n, names);
        goto out;
    }
    for (; built < nsizes; built++)
        if (!(prs[built] = problem_build(f, job, canon, sizes[built], true, err, errlen))) goto out;
    best->cost = PLAN_INF;
    best->p = 0;
    int64_t orders = 0;
    search(prs, nsizes, job, method, best, &orders);
    if (stats) {
        stats->method = method;
        stats->orders = orders;
    }
    if (best->cost >= PLAN_INF) {
        if (nodata > 0 && fits_without_data_rule(f, job, canon, sizes, nsizes, method)) {
            char names[300];
            no_data_names(f, canon, false, names, sizeof names);
            sched_errf(err, errlen, "no node that holds the job's data can be the first stage: "
                       "the %d that hold it (%s) cannot take the embedding and their share of "
                       "the layers within memory, and a plan would fit only with a node that "
                       "lacks the data first", n - nodata, names);
        } else {
            diagnose(f, job, canon, err, errlen);
        }
        goto out;
    }
    fill_stages(out, best, canon, job->batch);
    if (cost_evaluate(out, f, job, err, errlen)) goto out;
    if (out->step_ns != best->cost) {
        sched_errf(err, errlen, "internal: the planner predicted %lld ns, the cost model says %lld ns",
             (long long)best->cost, (long long)out->step_ns);
        goto out;
    }
    rc = 0;
out:
    for (int r = 0; r < built; r++) problem_free(prs[r]);
    free(canon);
    free(best);
    return rc;
}

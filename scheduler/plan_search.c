/* plan_search.c — the split of one order of nodes, solved exactly, and the
 * search over orders: branch and bound over every order of every subset on
 * small fleets, ordered candidates and local search on large ones.
 *
 * For a fixed order the step is (m-1) max_s t_s + sum_s t_s + max_s o_s,
 * with t_s and o_s affine and increasing in the layer count k_s, k_s capped
 * by memory. For caps M on t and O on o, the smallest sum is a greedy fill
 * (cheapest layer time first). The optimum has max t = M* and max o = O*,
 * both breakpoints c_s + k l_s; enumerating breakpoints in increasing order
 * from the smallest feasible one, with the bound (m-1) M + sum_lb + O_lb to
 * stop, visits (M*, O*) and so is exact. */
#include "plan_internal.h"

#include <string.h>

typedef struct {
    int p, L;
    int64_t c[PLAN_MAX_STAGES], l[PLAN_MAX_STAGES];     /* t_s = c + k l */
    int64_t oc[PLAN_MAX_STAGES], ol[PLAN_MAX_STAGES];   /* o_s = oc + k ol */
    int lo[PLAN_MAX_STAGES], K[PLAN_MAX_STAGES];
    int by_l[PLAN_MAX_STAGES];                          /* stages by layer time */
} order_in;

static bool build(const plan_problem *pr, const int *seq, int p, order_in *in)
{
    int L = pr->L;
    int64_t sumK = 0, sumlo = 0;
    in->p = p;
    in->L = L;
    for (int s = 0; s < p; s++) {
        int i = seq[s];
        bool first = s == 0, last = s == p - 1;
        int64_t q = p - s < pr->m ? p - s : pr->m;
        in->c[s] = (first ? pr->E[i] : 0) + (last ? pr->H[i] : 0) +
                   (last ? 0 : pr->X[(size_t)i * pr->n + seq[s + 1]]);
        in->l[s] = pr->Y[i];
        in->oc[s] = (first ? pr->oE[i] : 0) + (last ? pr->oH[i] : 0);
        in->ol[s] = pr->oY[i];
        in->lo[s] = p == 1 ? L : (first || last ? 0 : 1);
        int cap = plan_cap(pr, i, q, (first ? 1 : 0) | (last ? 2 : 0));
        in->K[s] = cap > L ? L : cap;
        if (in->K[s] < in->lo[s]) return false;
        sumK += in->K[s];
        sumlo += in->lo[s];
        /* insertion by layer time, stage index breaking ties */
        int j = s;
        while (j > 0 && in->l[in->by_l[j - 1]] > in->l[s]) {
            in->by_l[j] = in->by_l[j - 1];
            j--;
        }
        in->by_l[j] = s;
    }
    return sumK >= L && sumlo <= L;
}

/* Smallest possible max_s (a_s + k_s d_s) with lo <= k <= cap, sum k = L:
 * hand out layers one by one to the stage that stays lowest. */
static int64_t minmax(const order_in *in, const int64_t *a, const int64_t *d, const int *cap)
{
    int k[PLAN_MAX_STAGES], left = in->L;
    int64_t max = 0;
    for (int s = 0; s < in->p; s++) {
        k[s] = in->lo[s];
        left -= k[s];
        int64_t v = a[s] + k[s] * d[s];
        if (v > max) max = v;
    }
    for (; left > 0; left--) {
        int best = -1;
        int64_t bv = PLAN_INF;
        for (int s = 0; s < in->p; s++) {
            if (k[s] >= cap[s]) continue;
            int64_t v = a[s] + (k[s] + 1) * d[s];
            if (v < bv) {
                bv = v;
                best = s;
            }
        }
        if (best < 0) return PLAN_INF;
        k[best]++;
        if (bv > max) max = bv;
    }
    return max;
}

/* Smallest sum_s k_s l_s under caps: the fastest stages take what they can. */
static int64_t fill(const order_in *in, const int *cap, int *k)
{
    int left = in->L;
    int64_t sum = 0;
    for (int s = 0; s < in->p; s++) {
        k[s] = in->lo[s];
        left -= k[s];
    }
    for (int r = 0; r < in->p && left > 0; r++) {
        int s = in->by_l[r];
        int add = cap[s] - k[s];
        if (add > left) add = left;
        if (add > 0) {
            k[s] += add;
            left -= add;
        }
    }
    if (left > 0) return PLAN_INF;
    for (int s = 0; s < in->p; s++) sum += k[s] * in->l[s];
    return sum;
}

static int cap_at(int64_t a, int64_t d, int K, int64_t bound)
{
    if (bound < a) return -1;
    if (d == 0) return K;
    int64_t k = (bound - a) / d;
    return k < K ? (int)k : K;
}

static int64_t actual(const order_in *in, const int *k, int64_t m1)
{
    int64_t max = 0, sum = 0, omax = 0;
    for (int s = 0; s < in->p; s++) {
        int64_t t = in->c[s] + k[s] * in->l[s], o = in->oc[s] + k[s] * in->ol[s];
        sum += t;
        if (t > max) max = t;
        if (o > omax) omax = o;
    }
    return m1 * max + sum + omax;
}

bool plan_solve_order(const plan_problem *pr, const int *seq, int p, int64_t best,
                      int64_t *cost, int *kout, bool bounds)
{
    order_in in;
    if (p < 1 || p > PLAN_MAX_STAGES || !build(pr, seq, p, &in)) return false;
    int64_t m1 = pr->m - 1, sc = 0;
    for (int s = 0; s < p; s++) sc += in.c[s];
    if (bounds) {
        /* cheap bound before any greedy: every layer at the fastest stage's
         * speed, the max at least the mean */
        int64_t lmin = PLAN_INF, mlb = 0, olb = 0, slb = sc;
        int left = in.L;
        for (int s = 0; s < p; s++) {
            if (in.l[s] < lmin) lmin = in.l[s];
            int64_t t = in.c[s] + in.lo[s] * in.l[s], o = in.oc[s] + in.lo[s] * in.ol[s];
            if (t > mlb) mlb = t;
            if (o > olb) olb = o;
            slb += in.lo[s] * in.l[s];
            left -= in.lo[s];
        }
        slb += left * lmin;
        if ((slb + p - 1) / p > mlb) mlb = (slb + p - 1) / p;
        if (m1 * mlb + slb + olb >= best) return false;
    }
    int k[PLAN_MAX_STAGES], capM[PLAN_MAX_STAGES], cap[PLAN_MAX_STAGES];
    int64_t ginf = fill(&in, in.K, k);
    if (ginf >= PLAN_INF) return false;
    int64_t olb = minmax(&in, in.oc, in.ol, in.K);
    int64_t M = minmax(&in, in.c, in.l, in.K);
    bool found = false;
    while (M < PLAN_INF) {
        if (m1 * M + sc + ginf + olb >= best) break;
        for (int s = 0; s < p; s++) capM[s] = cap_at(in.c[s], in.l[s], in.K[s], M);
        int64_t gM = fill(&in, capM, k);
        int64_t O = minmax(&in, in.oc, in.ol, capM), ofree = 0;
        for (int s = 0; s < p; s++) {
            int64_t o = in.oc[s] + capM[s] * in.ol[s];
            if (o > ofree) ofree = o;
        }
        while (O < PLAN_INF && m1 * M + sc + gM + O < best) {
            for (int s = 0; s < p; s++) {
                int c = cap_at(in.oc[s], in.ol[s], in.K[s], O);
                cap[s] = c < capM[s] ? c : capM[s];
            }
            if (fill(&in, cap, k) < PLAN_INF) {
                int64_t v = actual(&in, k, m1);
                if (v < best) {
                    best = v;
                    *cost = v;
                    memcpy(kout, k, (size_t)p * sizeof *k);
                    found = true;
                }
            }
            if (O >= ofree) break;
            int64_t next = PLAN_INF;
            for (int s = 0; s < p; s++)
                if (cap[s] < capM[s] && in.ol[s] > 0) {
                    int64_t o = in.oc[s] + (cap[s] + 1) * in.ol[s];
                    if (o > O && o < next) next = o;
                }
            O = next;
        }
        int64_t next = PLAN_INF;
        for (int s = 0; s < p; s++)
            if (capM[s] < in.K[s] && in.l[s] > 0) {
                int64_t t = in.c[s] + (capM[s] + 1) * in.l[s];
                if (t > M && t < next) next = t;
            }
        M = next;
    }
    return found;
}

/* ---- exact: every order of every subset, depth first ---------------------- */

typedef struct {
    const plan_problem *pr;
    plan_best *best;
    bool bounds;
    int64_t orders;
    int seq[PLAN_MAX_STAGES];
    bool used[PLAN_EXHAUSTIVE_MAX_NODES];
    int maxp;
} exact_ctx;

static void try_order(const plan_problem *pr, plan_best *best, const int *seq, int p,
                      bool bounds, int64_t *orders)
{
    int64_t cost;
    int k[PLAN_MAX_STAGES];
    (*orders)++;
    if (plan_solve_order(pr, seq, p, best->cost, &cost, k, bounds)) {
        best->p = p;
        best->cost = cost;
        best->b = pr->b;
        memcpy(best->seq, seq, (size_t)p * sizeof *seq);
        memcpy(best->k, k, (size_t)p * sizeof *k);
    }
}

static void exact_dfs(exact_ctx *x, int depth)
{
    for (int i = 0; i < x->pr->n; i++) {
        if (x->used[i]) continue;
        x->seq[depth] = i;
        x->used[i] = true;
        try_order(x->pr, x->best, x->seq, depth + 1, x->bounds, &x->orders);
        if (depth + 1 < x->maxp) exact_dfs(x, depth + 1);
        x->used[i] = false;
    }
}

void plan_search_exact(const plan_problem *pr, plan_best *best, bool bounds, int64_t *orders)
{
    exact_ctx x;
    memset(&x, 0, sizeof x);
    x.pr = pr;
    x.best = best;
    x.bounds = bounds;
    x.maxp = pr->n < pr->L + 2 ? pr->n : pr->L + 2;
    if (pr->n > PLAN_EXHAUSTIVE_MAX_NODES) return;
    exact_dfs(&x, 0);
    *orders += x.orders;
}

/* ---- heuristic: ordered candidates, then local search --------------------- */

/* Evaluations the local search may spend: a count, not a clock, so that
 * every machine stops at the same plan. */
#define HEUR_BUDGET 60000
#define HEUR_POOL 24   /* unused nodes tried for insertion and replacement */

typedef struct {
    const plan_problem *pr;
    plan_best *best;
    int64_t evals;
} heur_ctx;

static bool heur_try(heur_ctx *h, const int *seq, int p)
{
    int64_t before = h->best->cost;
    try_order(h->pr, h->best, seq, p, true, &h->evals);
    return h->best->cost < before;
}

/* Nodes by layer time, larger memory then canonical index breaking ties. */
static void by_speed(const plan_problem *pr, int *idx, int n)
{
    for (int a = 1; a < n; a++)
        for (int j = a; j > 0; j--) {
            int x = idx[j - 1], y = idx[j];
            bool after = pr->Y[x] > pr->Y[y] ||
                         (pr->Y[x] == pr->Y[y] &&
                          (pr->mem[x] < pr->mem[y] || (pr->mem[x] == pr->mem[y] && x > y)));
            if (!after) break;
            idx[j - 1] = y;
            idx[j] = x;
        }
}

/* Orders of a subset: by memory (early stages keep more micro-batches in
 * flight), and a chain that always takes the cheapest next link (so slow
 * links are crossed once). */
static void by_memory(const plan_problem *pr, int *seq, int p)
{
    for (int a = 1; a < p; a++)
        for (int j = a; j > 0; j--) {
            int x = seq[j - 1], y = seq[j];
            if (pr->mem[x] > pr->mem[y] || (pr->mem[x] == pr->mem[y] && x < y)) break;
            seq[j - 1] = y;
            seq[j] = x;
        }
}

static void nearest_chain(const plan_problem *pr, const int *by_mem, int *seq, int p)
{
    bool taken[PLAN_MAX_STAGES] = {false};
    seq[0] = by_mem[0];
    taken[0] = true;
    for (int s = 1; s < p; s++) {
        int best = -1;
        for (int r = 0; r < p; r++) {
            if (taken[r]) continue;
            if (best < 0 ||
                pr->X[(size_t)seq[s - 1] * pr->n + by_mem[r]] <
                    pr->X[(size_t)seq[s - 1] * pr->n + by_mem[best]])
                best = r;
        }
        taken[best] = true;
        seq[s] = by_mem[best];
    }
}

static void local_search(heur_ctx *h)
{
    const plan_problem *pr = h->pr;
    int seq[PLAN_MAX_STAGES], cand[PLAN_MAX_STAGES + 1], pool[HEUR_POOL];
    int *all = NULL;
    bool improved = true;
    int nall = pr->n;
    int idx[PLAN_MAX_NODES];
    if (nall > PLAN_MAX_NODES) nall = PLAN_MAX_NODES;
    all = idx;
    for (int i = 0; i < nall; i++) all[i] = i;
    by_speed(pr, all, nall);
    while (improved && h->evals < HEUR_BUDGET) {
        improved = false;
        int p = h->best->p;
        memcpy(seq, h->best->seq, (size_t)p * sizeof *seq);
        /* unused nodes, fastest first */
        int npool = 0;
        for (int r = 0; r < nall && npool < HEUR_POOL; r++) {
            bool used = false;
            for (int s = 0; s < p && !used; s++) used = seq[s] == all[r];
            if (!used) pool[npool++] = all[r];
        }
        for (int i = 0; i < p && !improved && p > 1; i++) {   /* drop a node */
            int q = 0;
            for (int s = 0; s < p; s++)
                if (s != i) cand[q++] = seq[s];
            improved = heur_try(h, cand, q);
        }
        for (int i = 0; i < p && !improved; i++)   /* move a node elsewhere */
            for (int j = 0; j < p && !improved; j++) {
                if (j == i) continue;
                int q = 0;
                for (int s = 0; s < p; s++)
                    if (s != i) cand[q++] = seq[s];
                memmove(cand + j + 1, cand + j, (size_t)(q - j) * sizeof *cand);
                cand[j] = seq[i];
                improved = heur_try(h, cand, p);
            }
        for (int i = 0; i < p && !improved; i++)   /* swap two nodes */
            for (int j = i + 1; j < p && !improved; j++) {
                memcpy(cand, seq, (size_t)p * sizeof *seq);
                cand[i] = seq[j];
                cand[j] = seq[i];
                improved = heur_try(h, cand, p);
            }
        for (int u = 0; u < npool && !improved; u++)   /* replace by an unused node */
            for (int i = 0; i < p && !improved; i++) {
                memcpy(cand, seq, (size_t)p * sizeof *seq);
                cand[i] = pool[u];
                improved = heur_try(h, cand, p);
            }
        for (int u = 0; u < npool && !improved && p < pr->L + 2 && p < PLAN_MAX_STAGES; u++)
            for (int i = 0; i <= p && !improved; i++) {   /* insert an unused node */
                memcpy(cand, seq, (size_t)i * sizeof *seq);
                cand[i] = pool[u];
                memcpy(cand + i + 1, seq + i, (size_t)(p - i) * sizeof *seq);
                improved = heur_try(h, cand, p + 1);
            }
    }
}

void plan_search_heuristic(const plan_problem *const *prs, int nprs, plan_best *best,
                           int64_t *orders)
{
    int64_t evals = 0;
    int idx[PLAN_MAX_NODES], seq[PLAN_MAX_STAGES], mem_sorted[PLAN_MAX_STAGES];
    /* 1. the k fastest nodes, for every k, in two orders, at every b */
    for (int r = 0; r < nprs; r++) {
        const plan_problem *pr = prs[r];
        int n = pr->n < PLAN_MAX_NODES ? pr->n : PLAN_MAX_NODES;
        for (int i = 0; i < n; i++) idx[i] = i;
        by_speed(pr, idx, n);
        int maxp = n < pr->L + 2 ? n : pr->L + 2;
        if (maxp > PLAN_MAX_STAGES) maxp = PLAN_MAX_STAGES;
        for (int p = 1; p <= maxp; p++) {
            memcpy(mem_sorted, idx, (size_t)p * sizeof *idx);
            by_memory(pr, mem_sorted, p);
            try_order(pr, best, mem_sorted, p, true, &evals);
            nearest_chain(pr, mem_sorted, seq, p);
            try_order(pr, best, seq, p, true, &evals);
        }
    }
    if (best->cost >= PLAN_INF) {
        *orders += evals;
        return;
    }
    /* 2. local search at the best micro-batch size */
    const plan_problem *at = prs[0];
    for (int r = 0; r < nprs; r++)
        if (prs[r]->b == best->b) at = prs[r];
    heur_ctx h = {at, best, evals};
    local_search(&h);
    evals = h.evals;
    /* 3. the final order at every micro-batch size */
    memcpy(seq, best->seq, (size_t)best->p * sizeof *seq);
    int p = best->p;
    for (int r = 0; r < nprs; r++) try_order(prs[r], best, seq, p, true, &evals);
    *orders += evals;
}

/* plan_search.c — the split of one order of nodes, solved exactly, and the
 * search over orders: every order of every subset on small fleets (with a
 * bound that skips orders which cannot win), constructed chains and a local
 * search on large ones.
 *
 * For a fixed order the step is (m-1) max_s t_s + sum_s t_s + max_s o_s,
 * with t_s and o_s affine and increasing in the layer count k_s, k_s capped
 * by memory. For caps M on t and O on o, the smallest sum is a greedy fill
 * (cheapest layer time first). The optimum has max t = M* and max o = O*,
 * both breakpoints c_s + k l_s; enumerating breakpoints in increasing order
 * from the smallest feasible one, with the bound (m-1) M + sum_lb + O_lb to
 * stop, visits (M*, O*) and so is exact. */
#include "plan_internal.h"

#include <stdlib.h>
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
 * hand out layers one by one to the stage that stays lowest (a heap of
 * each stage's value with one more layer). Which of equal stages takes a
 * layer does not change the max. */
static int64_t minmax(const order_in *in, const int64_t *a, const int64_t *d, const int *cap)
{
    int k[PLAN_MAX_STAGES], heap[PLAN_MAX_STAGES], nh = 0, left = in->L;
    int64_t key[PLAN_MAX_STAGES], max = 0;
    for (int s = 0; s < in->p; s++) {
        k[s] = in->lo[s];
        left -= k[s];
        int64_t v = a[s] + k[s] * d[s];
        if (v > max) max = v;
        if (k[s] >= cap[s]) continue;
        key[s] = v + d[s];
        int at = nh++;   /* sift up */
        while (at > 0 && key[heap[(at - 1) / 2]] > key[s]) {
            heap[at] = heap[(at - 1) / 2];
            at = (at - 1) / 2;
        }
        heap[at] = s;
    }
    for (; left > 0; left--) {
        if (nh == 0) return PLAN_INF;
        int s = heap[0];
        if (key[s] > max) max = key[s];
        k[s]++;
        int moving;
        if (k[s] < cap[s]) {
            key[s] += d[s];
            moving = s;
        } else {
            moving = heap[--nh];
        }
        int at = 0;   /* sift the moving stage down from the root */
        for (;;) {
            int c = 2 * at + 1;
            if (c >= nh) break;
            if (c + 1 < nh && key[heap[c + 1]] < key[heap[c]]) c++;
            if (key[heap[c]] >= key[moving]) break;
            heap[at] = heap[c];
            at = c;
        }
        if (nh > 0) heap[at] = moving;
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
    int64_t M = minmax(&in, in.c, in.l, in.K), olb = 0;
    for (int s = 0; s < p; s++)   /* a cheap bound on max o first, the exact one if needed */
        if (in.oc[s] + in.lo[s] * in.ol[s] > olb) olb = in.oc[s] + in.lo[s] * in.ol[s];
    if (M >= PLAN_INF || m1 * M + sc + ginf + olb >= best) return false;
    olb = minmax(&in, in.oc, in.ol, in.K);
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

/* ---- heuristic: constructed chains, then local search ---------------------- */

#define HEUR_POOL 12     /* unused nodes tried per position, by speed and by links */
#define HEUR_STARTS 8    /* chain starts per pool: fastest and largest nodes */

typedef struct {
    const plan_problem *pr;
    plan_best *best;
    int64_t evals, budget;
} heur_ctx;

static bool heur_try(heur_ctx *h, const int *seq, int p)
{
    int64_t before = h->best->cost;
    try_order(h->pr, h->best, seq, p, true, &h->evals);
    return h->best->cost < before;
}

static bool faster(const plan_problem *pr, int x, int y)
{
    return pr->Y[x] < pr->Y[y] ||
           (pr->Y[x] == pr->Y[y] && (pr->mem[x] > pr->mem[y] || (pr->mem[x] == pr->mem[y] && x < y)));
}

static bool larger(const plan_problem *pr, int x, int y)
{
    return pr->mem[x] > pr->mem[y] || (pr->mem[x] == pr->mem[y] && faster(pr, x, y));
}

/* Whether node i can be the first stage at all: room for the embedding
 * with one micro-batch in flight (a node without the job's data has none). */
static bool can_first(const plan_problem *pr, int i)
{
    return plan_cap(pr, i, 1, 1) >= 0;
}

/* Moves the first node of seq[0..p) that can be the first stage to the
 * front, keeping the others in order; false when none can. */
static bool front_first(const plan_problem *pr, int *seq, int p)
{
    for (int s = 0; s < p; s++)
        if (can_first(pr, seq[s])) {
            int t = seq[s];
            memmove(seq + 1, seq, (size_t)s * sizeof *seq);
            seq[0] = t;
            return true;
        }
    return false;
}

static void sort_nodes(const plan_problem *pr, int *idx, int n,
                       bool (*before)(const plan_problem *, int, int))
{
    for (int a = 1; a < n; a++)
        for (int j = a; j > 0 && before(pr, idx[j], idx[j - 1]); j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
}

/* The best few distinct constructions, cheapest first: local search starts
 * from each, so one misleading construction cannot decide the plan. */
#define HEUR_TOP 4
typedef struct {
    plan_best c[HEUR_TOP];
    int n;
    int64_t evals;
} top_k;

static void consider(const plan_problem *pr, top_k *t, const int *seq, int p)
{
    int64_t cost;
    int k[PLAN_MAX_STAGES];
    t->evals++;
    int64_t bound = t->n < HEUR_TOP ? PLAN_INF : t->c[t->n - 1].cost;
    if (!plan_solve_order(pr, seq, p, bound, &cost, k, true)) return;
    for (int r = 0; r < t->n; r++)
        if (t->c[r].p == p && t->c[r].b == pr->b && !memcmp(t->c[r].seq, seq, (size_t)p * sizeof *seq))
            return;
    int at = t->n < HEUR_TOP ? t->n++ : HEUR_TOP - 1;
    while (at > 0 && t->c[at - 1].cost > cost) {
        t->c[at] = t->c[at - 1];
        at--;
    }
    plan_best *b = &t->c[at];
    b->p = p;
    b->cost = cost;
    b->b = pr->b;
    memcpy(b->seq, seq, (size_t)p * sizeof *seq);
    memcpy(b->k, k, (size_t)p * sizeof *k);
}

/* A chain through `pool` from `start` that always takes the cheapest next
 * link (faster nodes first among equal links): nodes of one site stay
 * together and slow links are crossed as seldom as possible. Every prefix
 * is a candidate; the exact split decides what each node holds. */
static void chain_prefixes(const plan_problem *pr, top_k *best, const int *pool, int npool,
                           int start, int maxp)
{
    int seq[PLAN_MAX_STAGES];
    bool taken[PLAN_MAX_NODES] = {false};
    seq[0] = start;
    taken[start] = true;
    consider(pr, best, seq, 1);
    for (int p = 1; p < maxp && p < npool; p++) {
        int tail = seq[p - 1], next = -1;
        for (int r = 0; r < npool; r++) {
            int j = pool[r];
            if (taken[j]) continue;
            int64_t xj = pr->X[(size_t)tail * pr->n + j];
            if (next < 0 || xj < pr->X[(size_t)tail * pr->n + next] ||
                (xj == pr->X[(size_t)tail * pr->n + next] && faster(pr, j, next)))
                next = j;
        }
        seq[p] = next;
        taken[next] = true;
        consider(pr, best, seq, p + 1);
    }
}

static void construct(const plan_problem *pr, top_k *best)
{
    int n = pr->n < PLAN_MAX_NODES ? pr->n : PLAN_MAX_NODES;
    int maxp = n < pr->L + 2 ? n : pr->L + 2;
    if (maxp > PLAN_MAX_STAGES) maxp = PLAN_MAX_STAGES;
    int speed[PLAN_MAX_NODES], pool[PLAN_MAX_NODES], seq[PLAN_MAX_STAGES];
    for (int i = 0; i < n; i++) speed[i] = i;
    sort_nodes(pr, speed, n, faster);
    /* the k fastest, largest memory first (early stages keep the most
     * micro-batches in flight) */
    for (int p = 1; p <= maxp; p++) {
        memcpy(seq, speed, (size_t)p * sizeof *seq);
        sort_nodes(pr, seq, p, larger);
        if (front_first(pr, seq, p)) consider(pr, best, seq, p);
    }
    /* link-following chains through the fastest quarter, half, ... of the fleet */
    int last = 0;
    for (int cut = n; cut >= 1; cut = cut * 3 / 4) {
        if (cut == last) break;
        last = cut;
        memcpy(pool, speed, (size_t)cut * sizeof *pool);
        /* starts: the fastest and the largest nodes that can be the first
         * stage (a chain from any other start has no plan) */
        int starts[2 * HEUR_STARTS], ns = 0;
        for (int r = 0; r < cut && ns < HEUR_STARTS; r++)
            if (can_first(pr, pool[r])) starts[ns++] = pool[r];
        memcpy(seq, pool, (size_t)(cut < PLAN_MAX_STAGES ? cut : PLAN_MAX_STAGES) * sizeof *seq);
        int nl = cut < PLAN_MAX_STAGES ? cut : PLAN_MAX_STAGES, nlarge = 0;
        sort_nodes(pr, seq, nl, larger);
        for (int r = 0; r < nl && nlarge < HEUR_STARTS; r++) {
            if (!can_first(pr, seq[r])) continue;
            nlarge++;
            bool dup = false;
            for (int q = 0; q < ns && !dup; q++) dup = starts[q] == seq[r];
            if (!dup) starts[ns++] = seq[r];
        }
        for (int q = 0; q < ns; q++) chain_prefixes(pr, best, pool, cut, starts[q], maxp);
        if (cut < 4) break;
    }
}

/* The R unused nodes that best fit between `before` and `after` (-1: none):
 * cheapest links, then speed. */
static int link_pool(const plan_problem *pr, const bool *used, int before, int after, int *out,
                     int R)
{
    int k = 0;
    for (int j = 0; j < pr->n; j++) {
        if (used[j]) continue;
        int64_t c = (before >= 0 ? pr->X[(size_t)before * pr->n + j] : 0) +
                    (after >= 0 ? pr->X[(size_t)j * pr->n + after] : 0);
        int at = k < R ? k++ : R;
        while (at > 0) {
            int y = out[at - 1];
            int64_t cy = (before >= 0 ? pr->X[(size_t)before * pr->n + y] : 0) +
                         (after >= 0 ? pr->X[(size_t)y * pr->n + after] : 0);
            if (cy < c || (cy == c && !faster(pr, j, y))) break;
            if (at < R) out[at] = y;
            at--;
        }
        if (at < R) out[at] = j;
    }
    return k;
}

/* Keeps seq[0..keep) and grows a new link-following chain after it (or,
 * backwards, keeps seq[keep..p) and grows before it), trying every length:
 * one move that replaces a whole run of badly linked nodes. */
static bool rechain(heur_ctx *h, const int *seq, int p, int keep, bool tail)
{
    const plan_problem *pr = h->pr;
    int cand[PLAN_MAX_STAGES], buf[PLAN_MAX_STAGES];
    bool taken[PLAN_MAX_NODES] = {false};
    int maxp = pr->n < pr->L + 2 ? pr->n : pr->L + 2;
    if (maxp > PLAN_MAX_STAGES) maxp = PLAN_MAX_STAGES;
    int kept = tail ? keep : p - keep;
    if (kept < 1) return false;
    /* buf holds the chain in growing order: the kept nodes, the newest last */
    for (int r = 0; r < kept; r++) {
        buf[r] = tail ? seq[r] : seq[p - 1 - r];
        taken[buf[r]] = true;
    }
    bool improved = false;
    for (int len = kept; len < maxp; len++) {
        int end = buf[len - 1], next = -1;
        for (int j = 0; j < pr->n; j++) {
            if (taken[j]) continue;
            int64_t xj = tail ? pr->X[(size_t)end * pr->n + j] : pr->X[(size_t)j * pr->n + end];
            int64_t xn = next < 0 ? 0
                         : tail ? pr->X[(size_t)end * pr->n + next] : pr->X[(size_t)next * pr->n + end];
            if (next < 0 || xj < xn || (xj == xn && faster(pr, j, next))) next = j;
        }
        if (next < 0) break;
        buf[len] = next;
        taken[next] = true;
        for (int r = 0; r <= len; r++) cand[r] = tail ? buf[r] : buf[len - r];
        improved |= heur_try(h, cand, len + 1);
        if (h->evals >= h->budget) break;
    }
    return improved;
}

/* The moves of the local search, each a scan that stops at the first
 * improvement. */
enum { MV_DROP, MV_TAIL, MV_HEAD, MV_REVERSE, MV_MOVE, MV_REPLACE, MV_INSERT, MV_TYPES };

static bool try_moves(heur_ctx *h, int type, const int *speed)
{
    const plan_problem *pr = h->pr;
    int seq[PLAN_MAX_STAGES], cand[PLAN_MAX_STAGES + 1], pool[2 * HEUR_POOL], fast[HEUR_POOL];
    bool used[PLAN_MAX_NODES];
    int p = h->best->p, nfast = 0;
    memcpy(seq, h->best->seq, (size_t)p * sizeof *seq);
    memset(used, 0, (size_t)pr->n * sizeof *used);
    for (int s = 0; s < p; s++) used[seq[s]] = true;
    for (int r = 0; r < pr->n && nfast < HEUR_POOL; r++)
        if (!used[speed[r]]) fast[nfast++] = speed[r];
    switch (type) {
    case MV_DROP:   /* leave a node out */
        for (int i = 0; i < p && p > 1; i++) {
            int q = 0;
            for (int s = 0; s < p; s++)
                if (s != i) cand[q++] = seq[s];
            if (heur_try(h, cand, q)) return true;
        }
        return false;
    case MV_TAIL:
        for (int i = 1; i < p; i++)
            if (rechain(h, seq, p, i, true)) return true;
        return false;
    case MV_HEAD:
        for (int i = p - 1; i > 0; i--)
            if (rechain(h, seq, p, i, false)) return true;
        return false;
    case MV_REVERSE:   /* reverse a run (2-opt) */
        for (int i = 0; i < p; i++)
            for (int j = i + 1; j < p; j++) {
                memcpy(cand, seq, (size_t)p * sizeof *seq);
                for (int a = i, b = j; a < b; a++, b--) {
                    int t = cand[a];
                    cand[a] = cand[b];
                    cand[b] = t;
                }
                if (heur_try(h, cand, p)) return true;
            }
        return false;
    case MV_MOVE:   /* move one node elsewhere */
        for (int i = 0; i < p; i++)
            for (int j = 0; j < p; j++) {
                if (j == i || j == i + 1) continue;   /* j == i+1 is a 2-opt of two */
                int q = 0;
                for (int s = 0; s < p; s++)
                    if (s != i) cand[q++] = seq[s];
                memmove(cand + j + 1, cand + j, (size_t)(q - j) * sizeof *cand);
                cand[j] = seq[i];
                if (heur_try(h, cand, p)) return true;
            }
        return false;
    case MV_REPLACE:   /* an unused node instead of a used one */
        for (int i = 0; i < p; i++) {
            int np = link_pool(pr, used, i > 0 ? seq[i - 1] : -1, i < p - 1 ? seq[i + 1] : -1,
                               pool, HEUR_POOL);
            memcpy(pool + np, fast, (size_t)nfast * sizeof *fast);
            for (int u = 0; u < np + nfast; u++) {
                memcpy(cand, seq, (size_t)p * sizeof *seq);
                cand[i] = pool[u];
                if (heur_try(h, cand, p)) return true;
            }
        }
        return false;
    default:   /* MV_INSERT: one more node */
        for (int i = 0; i <= p && p < pr->L + 2 && p < PLAN_MAX_STAGES; i++) {
            int np = link_pool(pr, used, i > 0 ? seq[i - 1] : -1, i < p ? seq[i] : -1, pool,
                               HEUR_POOL);
            memcpy(pool + np, fast, (size_t)nfast * sizeof *fast);
            for (int u = 0; u < np + nfast; u++) {
                memcpy(cand, seq, (size_t)i * sizeof *seq);
                cand[i] = pool[u];
                memcpy(cand + i + 1, seq + i, (size_t)(p - i) * sizeof *seq);
                if (heur_try(h, cand, p + 1)) return true;
            }
        }
        return false;
    }
}

/* Round robin over the move types: a type that improves runs again, one
 * that does not hands over to the next; done when every type in a row has
 * failed (a local optimum) or the budget is spent. */
static void local_search(heur_ctx *h, const int *speed)
{
    int type = 0, failed = 0;
    while (failed < MV_TYPES && h->evals < h->budget) {
        if (try_moves(h, type, speed)) {
            failed = 0;
        } else {
            failed++;
            type = (type + 1) % MV_TYPES;
        }
    }
}

void plan_search_heuristic(const plan_problem *const *prs, int nprs, int64_t budget,
                           plan_best *best, int64_t *orders)
{
    top_k *top = malloc(sizeof *top);
    plan_best *local = malloc(sizeof *local);
    if (!top || !local) {   /* no tables, no plan: the caller reports no fit */
        free(top);
        free(local);
        return;
    }
    top->n = 0;
    top->evals = 0;
    for (int r = 0; r < nprs; r++) construct(prs[r], top);
    int64_t evals = top->evals;
    for (int t = 0; t < top->n; t++) {
        const plan_problem *at = prs[0];
        for (int r = 0; r < nprs; r++)
            if (prs[r]->b == top->c[t].b) at = prs[r];
        int speed[PLAN_MAX_NODES];
        for (int i = 0; i < at->n; i++) speed[i] = i;
        sort_nodes(at, speed, at->n, faster);
        *local = top->c[t];
        heur_ctx h = {at, local, 0, budget};
        local_search(&h, speed);
        evals += h.evals;
        if (local->cost < best->cost) *best = *local;
    }
    if (best->cost < PLAN_INF) {   /* the final order at every micro-batch size */
        int seq[PLAN_MAX_STAGES], p = best->p;
        memcpy(seq, best->seq, (size_t)p * sizeof *seq);
        for (int r = 0; r < nprs; r++) try_order(prs[r], best, seq, p, true, &evals);
    }
    *orders += evals;
    free(top);
    free(local);
}

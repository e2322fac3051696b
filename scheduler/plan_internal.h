/* plan_internal.h — what plan.c and plan_search.c share: a fleet reduced to
 * the integers the search needs at one micro-batch size. Not public. */
#ifndef SHARDNODE_PLAN_INTERNAL_H
#define SHARDNODE_PLAN_INTERNAL_H

#include "scheduler.h"

#define PLAN_INF (INT64_MAX / 4)

/* A fleet at micro-batch size b, nodes in canonical order (by name). A stage
 * s of p on node i holding k layers costs, per micro-batch,
 *   t = [s = 0] E[i] + k Y[i] + [s = p-1] H[i] + (s < p-1 ? X[i][next] : 0)
 * and per step o = [s = 0] oE[i] + k oY[i] + [s = p-1] oH[i]: affine in k,
 * which is what makes the exact split cheap. */
typedef struct {
    int n, L;
    int64_t b, m;
    int qmax;                       /* in-flight counts 1..qmax are tabulated */
    int64_t *E, *Y, *H;             /* [n] forward + backward of one micro-batch */
    int64_t *oE, *oY, *oH;          /* [n] AdamW per step */
    int64_t *X;                     /* [n*n] activations i->j plus gradient j->i */
    int *K;                         /* [n][qmax+1][4]: most layers that fit; -1 none */
    int64_t *mem;                   /* [n] usable memory (for heuristic orderings) */
    const int *canon;               /* [n] canonical index -> fleet index */
} plan_problem;

/* The layer cap of node i at position flags (1 embedding, 2 head) with q
 * micro-batches in flight. */
static inline int plan_cap(const plan_problem *pr, int i, int64_t q, int flags)
{
    if (q > pr->qmax) q = pr->qmax;
    return pr->K[((size_t)i * (pr->qmax + 1) + (size_t)q) * 4 + (size_t)flags];
}

/* Solves the split of one order of nodes exactly. Returns true and fills
 * k[0..p) and *cost when it finds a plan cheaper than `best`. */
bool plan_solve_order(const plan_problem *pr, const int *seq, int p, int64_t best,
                      int64_t *cost, int *k, bool bounds);

/* Search over orders of the problem's nodes: fills the best seq, k, p and
 * cost found below *cost (PLAN_INF: none yet). */
typedef struct {
    int p;
    int seq[PLAN_MAX_STAGES];
    int k[PLAN_MAX_STAGES];
    int64_t cost;
    int64_t b;
} plan_best;

void plan_search_exact(const plan_problem *pr, plan_best *best, bool bounds, int64_t *orders);
void plan_search_heuristic(const plan_problem *const *prs, int nprs, int64_t budget,
                           plan_best *best, int64_t *orders);

#endif

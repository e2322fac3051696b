/* pool_links.c — the links between a plan's candidates as the planner
 * counts them (docs/ARCHITECTURE.md, "Links in the plan"): each member's
 * measured links, the typical links where nobody measured one, and a
 * relayed link as its two hops and its share of the relay's upload. Pure
 * and deterministic: every member computes the same matrix from the same
 * documents. */
#include "pool_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t pool_link_relayed_bw(int64_t bw_path, int64_t upload, int carried)
{
    if (carried < 1) carried = 1;
    if (upload <= 0) return bw_path;
    int64_t share = upload / carried;
    if (share < 1) share = 1;
    return bw_path > 0 && bw_path < share ? bw_path : share;
}

typedef struct {
    const pool_member *m;
    const int *in;
    int k;
    int *sorted;                  /* positions 0..k by name */
} view_t;

static const pool_member *vm(const view_t *v, int p) { return &v->m[v->in ? v->in[p] : p]; }

static const view_t *sort_view;

static int by_name(const void *a, const void *b)
{
    return strcmp(vm(sort_view, *(const int *)a)->name, vm(sort_view, *(const int *)b)->name);
}

/* The view position of the member called name, or -1. */
static int find(const view_t *v, const char *name)
{
    int lo = 0, hi = v->k - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(vm(v, v->sorted[mid])->name, name);
        if (c == 0) return v->sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* x's measurement of its link to y (NULL: none). */
static const pool_link *measured(const view_t *v, int x, int y)
{
    const pool_doc *d = vm(v, x)->doc;
    return d && (d->has & POOL_HAS_LINKS) ? pool_links_find(&d->links, vm(v, y)->name) : NULL;
}

static const pool_link *typical(const view_t *v, int x)
{
    const pool_doc *d = vm(v, x)->doc;
    return d && (d->has & POOL_HAS_LINKS) && d->typical.bandwidth > 0 ? &d->typical : NULL;
}

/* x -> y when neither measured it: the slower of their typical links, else
 * the default. */
static cost_link typicals(const view_t *v, int x, int y)
{
    const pool_link *a = typical(v, x), *b = typical(v, y);
    if (!a && !b) return (cost_link){POOL_DEFAULT_LAT_NS, POOL_DEFAULT_BW};
    if (!a) a = b;
    if (!b) b = a;
    return (cost_link){a->latency_ns > b->latency_ns ? a->latency_ns : b->latency_ns,
                       a->bandwidth < b->bandwidth ? a->bandwidth : b->bandwidth};
}

/* x -> y as a direct link: as its sender measured it, else as the receiver
 * did, else typicals(). */
static cost_link direct(const view_t *v, int x, int y)
{
    const pool_link *l = measured(v, x, y);
    if (!l) l = measured(v, y, x);
    return l ? (cost_link){l->latency_ns, l->bandwidth} : typicals(v, x, y);
}

static cost_link sane(cost_link l)
{
    if (l.latency_ns < 0) l.latency_ns = POOL_DEFAULT_LAT_NS;
    if (l.bandwidth <= 0) l.bandwidth = POOL_DEFAULT_BW;
    return l;
}

/* Relayed a -> b (both measurements read before either is written). */
static cost_link relayed(const view_t *v, int a, int b, int r, const cost_link *ab,
                         const cost_link *ba, int carried)
{
    cost_link h1 = sane(direct(v, a, r)), h2 = sane(direct(v, r, b));
    /* a measurement through the relay (one with a bandwidth), else the hops */
    const cost_link *l = ab && ab->bandwidth > 0 ? ab : ba && ba->bandwidth > 0 ? ba : NULL;
    cost_link path = l ? *l
                       : (cost_link){h1.latency_ns + h2.latency_ns,
                                     h1.bandwidth < h2.bandwidth ? h1.bandwidth : h2.bandwidth};
    path = sane(path);
    /* the relay's upload: its typical link (the median of what it measured
     * sending to the others); one that measured nothing (a member that does
     * not compute probes no links) counts the path's own: the hop b
     * measured towards r is b's upload, not r's */
    const pool_link *t = typical(v, r);
    int64_t up = t ? t->bandwidth : path.bandwidth;
    path.bandwidth = pool_link_relayed_bw(path.bandwidth, up, carried);
    return path;
}

int pool_link_costs(const pool_member *m, const int *in, int k, const int *cand, int f,
                    cost_link *out, char *note, size_t notelen)
{
    size_t ff = (size_t)f * (size_t)f;
    view_t v = {m, in, k, calloc((size_t)k + 1, sizeof(int))};
    int *cpos = calloc((size_t)k + 1, sizeof *cpos);       /* view position -> candidate */
    int *carried = calloc((size_t)k + 1, sizeof *carried);
    int *said = malloc((ff + 1) * sizeof *said);    /* the relay a's document names for b */
    unsigned char *own = calloc(ff + 1, 1);          /* a measured b */
    int rc = -1;
    if (note && notelen) note[0] = '\0';
    if (!v.sorted || !cpos || !carried || !said || !own) goto out;
    for (int p = 0; p < k; p++) {
        v.sorted[p] = p;
        cpos[p] = -1;
    }
    sort_view = &v;
    qsort(v.sorted, (size_t)k, sizeof *v.sorted, by_name);
    for (int a = 0; a < f; a++) cpos[cand[a]] = a;
    for (size_t i = 0; i < ff; i++) said[i] = -1;
    /* each candidate's measurements, names found by binary search (a pool
     * of hundreds); a relay that is no member of the view, or one of the
     * pair, is ignored (the link counts as measured) */
    for (int a = 0; a < f; a++) {
        const pool_doc *d = vm(&v, cand[a])->doc;
        const pool_links *ls = d && (d->has & POOL_HAS_LINKS) ? &d->links : NULL;
        for (int i = 0; ls && i < ls->n; i++) {
            const pool_link *l = &ls->l[i];
            int p = find(&v, l->name), b = p < 0 ? -1 : cpos[p];
            if (b < 0 || b == a) continue;
            out[a * f + b] = (cost_link){l->latency_ns, l->bandwidth};
            own[a * f + b] = 1;
            if (!l->via[0]) continue;
            int r = find(&v, l->via);
            if (r >= 0 && r != cand[a] && r != cand[b]) {
                said[a * f + b] = r;
            } else if (note && notelen && !note[0]) {
                snprintf(note, notelen, "%.63s's link to %.63s names relay \"%.63s\", %s: "
                         "counted as measured", vm(&v, cand[a])->name, l->name, l->via,
                         r < 0 ? "no member of the view" : "one of the pair");
            }
        }
    }
    /* either end may name the relay, the sender first; each relayed pair
     * is one more the relay carries (its two directions are one boundary
     * of the pipeline, whose send and receive the cost model already adds
     * one after the other) */
    for (int a = 0; a < f; a++)
        for (int b = a + 1; b < f; b++) {
            int *ab = &said[a * f + b], *ba = &said[b * f + a];
            if (*ab < 0) *ab = *ba;
            if (*ba < 0) *ba = *ab;
            if (*ab >= 0) carried[*ab]++;
            if (*ba >= 0 && *ba != *ab) carried[*ba]++;
        }
    /* a relay that computes also sends its own stage's traffic */
    for (int a = 0; a < f; a++)
        if (carried[cand[a]] > 0) carried[cand[a]]++;
    for (int a = 0; a < f; a++)
        for (int b = 0; b < f; b++) {
            cost_link *o = &out[a * f + b];
            int r = said[a * f + b];
            if (a == b || r < 0) {
                if (!own[a * f + b])
                    *o = own[b * f + a] ? out[b * f + a] : typicals(&v, cand[a], cand[b]);
                *o = sane(*o);
            } else if (a < b) {
                cost_link ab = out[a * f + b], ba = out[b * f + a];
                const cost_link *pab = own[a * f + b] ? &ab : NULL;
                const cost_link *pba = own[b * f + a] ? &ba : NULL;
                *o = relayed(&v, cand[a], cand[b], r, pab, pba, carried[r]);
                int q = said[b * f + a];   /* the ends may name different relays */
                out[b * f + a] = relayed(&v, cand[b], cand[a], q, pba, pab, carried[q]);
            }
        }
    rc = 0;
out:
    free(v.sorted);
    free(cpos);
    free(carried);
    free(said);
    free(own);
    return rc;
}

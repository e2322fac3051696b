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

/* x -> y as a direct link: as its sender measured it, else as the receiver
 * did, else the slower of their typical links, else the default. */
static cost_link direct(const view_t *v, int x, int y)
{
    const pool_link *l = measured(v, x, y);
    if (!l) l = measured(v, y, x);
    if (l) return (cost_link){l->latency_ns, l->bandwidth};
    const pool_link *a = typical(v, x), *b = typical(v, y);
    if (!a && !b) return (cost_link){POOL_DEFAULT_LAT_NS, POOL_DEFAULT_BW};
    if (!a) a = b;
    if (!b) b = a;
    return (cost_link){a->latency_ns > b->latency_ns ? a->latency_ns : b->latency_ns,
                       a->bandwidth < b->bandwidth ? a->bandwidth : b->bandwidth};
}

static cost_link sane(cost_link l)
{
    if (l.latency_ns < 0) l.latency_ns = POOL_DEFAULT_LAT_NS;
    if (l.bandwidth <= 0) l.bandwidth = POOL_DEFAULT_BW;
    return l;
}

int pool_link_costs(const pool_member *m, const int *in, int k, const int *cand, int f,
                    cost_link *out, char *note, size_t notelen)
{
    view_t v = {m, in, k, calloc((size_t)k + 1, sizeof(int))};
    int *relay = calloc((size_t)f * (size_t)f + 1, sizeof *relay);
    int *carried = calloc((size_t)k + 1, sizeof *carried);
    int rc = -1;
    if (note && notelen) note[0] = '\0';
    if (!v.sorted || !relay || !carried) goto out;
    for (int p = 0; p < k; p++) v.sorted[p] = p;
    sort_view = &v;
    qsort(v.sorted, (size_t)k, sizeof *v.sorted, by_name);
    /* which pairs are relayed, and through whom: either end may say so
     * (the sender first); a relay that is no member of the view, or one of
     * the pair, is ignored (the link counts as measured) */
    for (int a = 0; a < f; a++)
        for (int b = 0; b < f; b++) {
            relay[a * f + b] = -1;
            if (a == b) continue;
            const pool_link *l = measured(&v, cand[a], cand[b]);
            const char *said = vm(&v, cand[a])->name;
            if (!l || !l->via[0]) {
                l = measured(&v, cand[b], cand[a]);
                said = vm(&v, cand[b])->name;
            }
            if (!l || !l->via[0]) continue;
            int r = find(&v, l->via);
            if (r < 0 || r == cand[a] || r == cand[b]) {
                if (note && notelen && !note[0])
                    snprintf(note, notelen, "%.63s's link to %.63s names relay \"%.63s\", %s: "
                             "counted as measured", said,
                             said == vm(&v, cand[a])->name ? vm(&v, cand[b])->name
                                                           : vm(&v, cand[a])->name,
                             l->via, r < 0 ? "no member of the view" : "one of the pair");
                continue;
            }
            relay[a * f + b] = r;
            carried[r]++;
        }
    /* a relay that computes also sends its own stage's traffic */
    for (int a = 0; a < f; a++)
        if (carried[cand[a]] > 0) carried[cand[a]]++;
    for (int a = 0; a < f; a++)
        for (int b = 0; b < f; b++) {
            cost_link *o = &out[a * f + b];
            int r = relay[a * f + b];
            if (a == b || r < 0) {
                *o = sane(direct(&v, cand[a], cand[b]));
                continue;
            }
            /* a measurement through the relay (one with a bandwidth), else
             * the two hops */
            const pool_link *l = measured(&v, cand[a], cand[b]);
            if (!l || l->bandwidth <= 0) l = measured(&v, cand[b], cand[a]);
            if (l && l->bandwidth <= 0) l = NULL;
            cost_link h1 = sane(direct(&v, cand[a], r)), h2 = sane(direct(&v, r, cand[b]));
            cost_link path = l ? (cost_link){l->latency_ns, l->bandwidth}
                               : (cost_link){h1.latency_ns + h2.latency_ns,
                                             h1.bandwidth < h2.bandwidth ? h1.bandwidth
                                                                         : h2.bandwidth};
            path = sane(path);
            /* the relay's upload: its typical link, else the hop it sends on */
            const pool_link *t = typical(&v, r);
            int64_t up = t ? t->bandwidth : h2.bandwidth;
            path.bandwidth = pool_link_relayed_bw(path.bandwidth, up, carried[r]);
            *o = path;
        }
    rc = 0;
out:
    free(v.sorted);
    free(relay);
    free(carried);
    return rc;
}

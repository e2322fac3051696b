/* elect.c — the outcome of one epoch of the leaderless plan election, as a
 * pure function of the votes (rules in scheduler.h and docs/PROTOCOL.md,
 * "Plan election"). */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

uint64_t elect_hash(uint64_t h, const void *bytes, size_t n)
{
    const unsigned char *b = bytes;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* The voters by name, for lookups in O(log n): a pool of hundreds decides
 * each epoch from hundreds of votes, each naming its plan's nodes. Sorted
 * by name, then by position, so a lookup finds the first voter of a name,
 * as a scan in order would. NULL (no memory): lookups scan. */
typedef struct {
    const elect_voter *v;
    int n;
    const elect_voter **by_name;
} voter_index;

static int by_name(const void *a, const void *b)
{
    const elect_voter *x = *(const elect_voter *const *)a, *y = *(const elect_voter *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x < y ? -1 : x > y);
}

static void index_build(voter_index *ix, const elect_voter *v, int n)
{
    ix->v = v;
    ix->n = n;
    ix->by_name = n > 0 ? malloc((size_t)n * sizeof *ix->by_name) : NULL;
    if (!ix->by_name) return;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i].name) ix->by_name[k++] = &v[i];
    qsort(ix->by_name, (size_t)k, sizeof *ix->by_name, by_name);
    ix->n = k;
}

static const elect_voter *voter_of(const char *name, const voter_index *ix)
{
    if (!ix->by_name) {
        for (int i = 0; i < ix->n; i++)
            if (ix->v[i].name && strcmp(ix->v[i].name, name) == 0) return &ix->v[i];
        return NULL;
    }
    int lo = 0, hi = ix->n;   /* the first of the name */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (strcmp(ix->by_name[mid]->name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < ix->n && strcmp(ix->by_name[lo]->name, name) == 0 ? ix->by_name[lo] : NULL;
}

static const elect_vote *vote_of(const char *name, const voter_index *ix)
{
    const elect_voter *e = voter_of(name, ix);
    return e ? e->vote : NULL;
}

static bool same_choice(const elect_vote *a, const elect_vote *b)
{
    return a->epoch == b->epoch && a->base == b->base && a->base_plan == b->base_plan &&
           a->view == b->view && a->plan == b->plan;
}

static bool in_epoch(const elect_vote *v, int64_t epoch)
{
    return v && v->epoch == epoch;
}

/* Whether the plan of vote c (plan != 0) can still commit, and whether it
 * has. */
static void plan_state(const elect_vote *c, int64_t epoch, const char *const *members,
                       int nmembers, const voter_index *ix, bool *possible, bool *done)
{
    bool all_named = true, blocked = false;
    for (int k = 0; k < c->nnamed; k++) {
        const elect_voter *w = voter_of(c->named[k], ix);
        const elect_vote *v = w ? w->vote : NULL;
        if (in_epoch(v, epoch)) {
            if (!same_choice(v, c)) blocked = true;
        } else {
            all_named = false;
            if (w && w->gone) blocked = true;
        }
    }
    int yes = 0, open = 0;
    for (int i = 0; i < nmembers; i++) {
        const elect_vote *v = vote_of(members[i], ix);
        if (!in_epoch(v, epoch)) open++;
        else if (same_choice(v, c)) yes++;
    }
    *done = !blocked && all_named && 2 * yes > nmembers;
    *possible = !blocked && 2 * (yes + open) > nmembers;
}

/* Whether an earlier voter cast the same vote (choice and named nodes):
 * its plan's state is the same, so it is weighed once. */
static bool seen_before(const elect_voter *voters, int i, int64_t epoch)
{
    const elect_vote *c = voters[i].vote;
    for (int j = 0; j < i; j++) {
        const elect_vote *p = voters[j].vote;
        if (!in_epoch(p, epoch) || p->plan == 0 || !same_choice(p, c) || p->nnamed != c->nnamed)
            continue;
        bool same = true;
        for (int k = 0; k < c->nnamed && same; k++) same = strcmp(p->named[k], c->named[k]) == 0;
        if (same) return true;
    }
    return false;
}

void elect_decide(int64_t epoch, const char *const *members, int nmembers,
                  const elect_voter *voters, int nvoters, elect_result *out)
{
    memset(out, 0, sizeof *out);
    /* A vote at a later epoch was cast by a member that decided this one. */
    for (int i = 0; i < nvoters; i++) {
        const elect_vote *v = voters[i].vote;
        if (!v || v->epoch <= epoch) continue;
        out->from_later = true;
        out->base = v->base;
        out->base_plan = v->base_plan;
        out->outcome = v->base >= epoch ? ELECT_COMMITTED : ELECT_FAILED;
        return;
    }
    voter_index ix;
    index_build(&ix, voters, nvoters);
    for (int i = 0; i < nmembers; i++) {
        const elect_vote *v = vote_of(members[i], &ix);
        if (in_epoch(v, epoch)) out->votes++;
        else out->unvoted++;
    }
    bool any_possible = false;
    for (int i = 0; i < nvoters; i++) {
        const elect_vote *c = voters[i].vote;
        if (!in_epoch(c, epoch) || c->plan == 0 || seen_before(voters, i, epoch)) continue;
        bool possible, done;
        plan_state(c, epoch, members, nmembers, &ix, &possible, &done);
        if (done) {
            out->outcome = ELECT_COMMITTED;
            out->winner = c;
            free(ix.by_name);
            return;
        }
        any_possible |= possible;
    }
    free(ix.by_name);
    /* A plan nobody has voted for yet needs a majority of M among those
     * that have not voted. */
    if (!any_possible && !(2 * out->unvoted > nmembers)) out->outcome = ELECT_FAILED;
}

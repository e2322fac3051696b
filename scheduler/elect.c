/* elect.c — the outcome of one epoch of the leaderless plan election, as a
 * pure function of the votes (rules in scheduler.h and docs/PROTOCOL.md,
 * "Plan election"). */
#include "scheduler.h"

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

static const elect_voter *voter_of(const char *name, const elect_voter *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i].name && strcmp(v[i].name, name) == 0) return &v[i];
    return NULL;
}

static const elect_vote *vote_of(const char *name, const elect_voter *v, int n)
{
    const elect_voter *e = voter_of(name, v, n);
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
                       int nmembers, const elect_voter *voters, int nvoters, bool *possible,
                       bool *done)
{
    bool all_named = true, blocked = false;
    for (int k = 0; k < c->nnamed; k++) {
        const elect_voter *w = voter_of(c->named[k], voters, nvoters);
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
        const elect_vote *v = vote_of(members[i], voters, nvoters);
        if (!in_epoch(v, epoch)) open++;
        else if (same_choice(v, c)) yes++;
    }
    *done = !blocked && all_named && 2 * yes > nmembers;
    *possible = !blocked && 2 * (yes + open) > nmembers;
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
    for (int i = 0; i < nmembers; i++) {
        const elect_vote *v = vote_of(members[i], voters, nvoters);
        if (in_epoch(v, epoch)) out->votes++;
        else out->unvoted++;
    }
    bool any_possible = false;
    for (int i = 0; i < nvoters; i++) {
        const elect_vote *c = voters[i].vote;
        if (!in_epoch(c, epoch) || c->plan == 0) continue;
        bool possible, done;
        plan_state(c, epoch, members, nmembers, voters, nvoters, &possible, &done);
        if (done) {
            out->outcome = ELECT_COMMITTED;
            out->winner = c;
            return;
        }
        any_possible |= possible;
    }
    /* A plan nobody has voted for yet needs a majority of M among those
     * that have not voted. */
    if (!any_possible && !(2 * out->unvoted > nmembers)) out->outcome = ELECT_FAILED;
}

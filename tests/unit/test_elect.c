/* test_elect.c — the outcome of an epoch of the plan election: commits,
 * failures, a minority that never commits, later votes, gone nodes; and,
 * over every vote assignment of a 5-member pool, that a decision taken on
 * part of the votes (a member seeing only some records yet) is never
 * contradicted by the rest: no two different plans can commit in an epoch
 * and a failed epoch cannot commit later. */
#include "scheduler.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

static elect_vote make_vote(int64_t epoch, uint64_t plan, const char *named)
{
    elect_vote v;
    memset(&v, 0, sizeof v);
    v.epoch = epoch;
    v.base = epoch - 1;
    v.base_plan = epoch > 1 ? 77 : 0;
    v.view = 1000 + plan;
    v.plan = plan;
    for (const char *p = named; p && *p; p++) snprintf(v.named[v.nnamed++], PLAN_NAME_MAX, "%c", *p);
    return v;
}

static const char *NAMES[] = {"a", "b", "c", "d", "e"};

static elect_result decide(int64_t epoch, int nm, elect_vote *const *votes, int nv)
{
    elect_voter voters[8];
    for (int i = 0; i < nv; i++) voters[i] = (elect_voter){NAMES[i], votes[i], false};
    elect_result r;
    elect_decide(epoch, NAMES, nm, voters, nv, &r);
    return r;
}

static void basics(void)
{
    elect_vote p = make_vote(1, 11, "abc"), q = make_vote(1, 22, "ab");
    elect_vote pab = make_vote(1, 33, "ab"), qc = make_vote(1, 44, "c");
    /* everyone agrees */
    elect_vote *all[] = {&p, &p, &p};
    elect_result r = decide(1, 3, all, 3);
    CHECK(r.outcome == ELECT_COMMITTED && r.winner && r.winner->plan == 11, "unanimous: %d", r.outcome);
    /* a node the plan leaves out votes otherwise: the plan still commits */
    elect_vote *two[] = {&pab, &pab, &qc};
    r = decide(1, 3, two, 3);
    CHECK(r.outcome == ELECT_COMMITTED && r.winner->plan == 33, "left-out dissent: %d", r.outcome);
    /* a split where each plan has a named node against it: failed */
    elect_vote *split[] = {&p, &q, &p};
    r = decide(1, 3, split, 3);
    CHECK(r.outcome == ELECT_FAILED, "split: %d", r.outcome);
    /* not everyone has voted yet: open */
    elect_vote *part[] = {&p, &p, NULL};
    r = decide(1, 3, part, 3);
    CHECK(r.outcome == ELECT_OPEN, "partial: %d", r.outcome);
    /* a named node that is gone blocks the plan */
    elect_voter gone[3] = {{"a", &p, false}, {"b", &p, false}, {"c", NULL, true}};
    elect_decide(1, NAMES, 3, gone, 3, &r);
    CHECK(r.outcome == ELECT_FAILED, "gone named node: %d", r.outcome);
}

static void partition(void)
{
    /* M = a..e split 2 | 3: the two never commit, the three do */
    elect_vote two = make_vote(2, 5, "ab"), three = make_vote(2, 6, "cde");
    elect_voter minority[5] = {{"a", &two, false}, {"b", &two, false},
                               {"c", NULL, true}, {"d", NULL, true}, {"e", NULL, true}};
    elect_result r;
    elect_decide(2, NAMES, 5, minority, 5, &r);
    CHECK(r.outcome == ELECT_OPEN, "minority side must neither commit nor fail: %d", r.outcome);
    CHECK(r.votes == 2 && r.unvoted == 3, "counts %d %d", r.votes, r.unvoted);
    elect_voter majority[5] = {{"a", NULL, true}, {"b", NULL, true},
                               {"c", &three, false}, {"d", &three, false}, {"e", &three, false}};
    elect_decide(2, NAMES, 5, majority, 5, &r);
    CHECK(r.outcome == ELECT_COMMITTED && r.winner->plan == 6, "majority side: %d", r.outcome);
}

static void later_votes(void)
{
    elect_vote p = make_vote(3, 9, "ab");
    elect_vote next = make_vote(4, 10, "ab");
    next.base = 3;
    next.base_plan = 9;
    elect_vote *v[] = {&p, &next};
    elect_result r = decide(3, 2, v, 2);
    CHECK(r.outcome == ELECT_COMMITTED && r.from_later && r.base_plan == 9,
          "a vote at 4 on base 3 says 3 committed: %d", r.outcome);
    next.base = 2;
    r = decide(3, 2, v, 2);
    CHECK(r.outcome == ELECT_FAILED && r.from_later, "a vote at 4 on base 2 says 3 failed: %d",
          r.outcome);
}

/* Every assignment of {never votes, P1, P2, P3, no plan} to a..e, and every
 * subset of those votes visible: what is decided on the subset holds on the
 * whole. */
static void stable_decisions(void)
{
    elect_vote choices[4] = {make_vote(1, 1, "abc"), make_vote(1, 2, "cde"),
                             make_vote(1, 3, "abd"), make_vote(1, 0, "")};
    int checked = 0, commits = 0, fails = 0;
    for (int code = 0; code < 5 * 5 * 5 * 5 * 5; code++) {
        elect_vote *full[5];
        for (int i = 0, c = code; i < 5; i++, c /= 5) full[i] = c % 5 ? &choices[c % 5 - 1] : NULL;
        elect_result whole = decide(1, 5, full, 5);
        for (int mask = 0; mask < 32; mask++) {
            elect_vote *seen[5];
            for (int i = 0; i < 5; i++) seen[i] = (mask >> i) & 1 ? full[i] : NULL;
            elect_result r = decide(1, 5, seen, 5);
            checked++;
            if (r.outcome == ELECT_COMMITTED) {
                commits++;
                CHECK(whole.outcome == ELECT_COMMITTED && whole.winner->plan == r.winner->plan,
                      "code %d mask %d: committed %llu on part, %d on all", code, mask,
                      (unsigned long long)r.winner->plan, whole.outcome);
            } else if (r.outcome == ELECT_FAILED) {
                fails++;
                CHECK(whole.outcome == ELECT_FAILED, "code %d mask %d: failed on part, %d on all",
                      code, mask, whole.outcome);
            }
        }
    }
    CHECK(commits > 100 && fails > 1000, "the property was exercised: %d commits %d fails",
          commits, fails);
    printf("stable decisions: %d partial views checked, %d commits, %d failures\n", checked,
           commits, fails);
}

int main(void)
{
    basics();
    partition();
    later_votes();
    stable_decisions();
    if (!failures) printf("test_elect: all passed\n");
    return failures != 0;
}

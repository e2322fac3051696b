/* fuzz_pool.c — libFuzzer target for what members gossip about a job
 * (node/pool*.c): each member's job document (the "job" text of its signed
 * record), with the bundle, its vote and the committed section it adopted.
 * Any member can put anything there, so the checks a member makes before
 * acting on another's document must hold for any input.
 *
 * The input is one JSON object: {"id": JOB ID, "base": [names], "base_e": N,
 * "base_plan": HEX, "self": NAME, "carrier": NAME, "committed": {...},
 * "peers": [{"name", "address", "live", "doc": {...}}, ...]}, each peer
 * standing for a member's signed record (name, overlay address) and its
 * document. The first input byte is a mode: bit 0 rehashes the committed
 * section (its "h" set to pool_layout_hash of its content, as an honest
 * member writes it), bit 1 makes every peer's vote name that hash, so the
 * fuzzer gets past the hash to the votes and stages. On it run:
 *  - pool_vote_parse of every peer's vote; a vote that parses survives
 *    pool_vote_json and parses back to the same vote;
 *  - pool_layout_hash (never 0) and pool_commit_verify (a refusal has a
 *    reason);
 *  - pool_job_from for the bundle the carrier's document holds;
 *  - pool_gather_dir: a job whose bundle names another submitter than self
 *    is gathered under self's job folder, never into the bundle's out_dir;
 *  - pool_job_later between the valid bundles of any two documents: never
 *    both ways, never a job itself, never one from the far future.
 * The harness stays thin: it calls the pool's own checks, no copy of them. */
#include "fuzz_util.h"
#include "daemon_internal.h" /* DAEMON_PATH_MAX */
#include "pool_verify.h"

#include <jansson.h>

#define T "fuzz_pool"
#define MAX_PEERS 64

static int same_vote(const elect_vote *a, const elect_vote *b)
{
    if (a->epoch != b->epoch || a->base != b->base || a->base_plan != b->base_plan ||
        a->view != b->view || a->plan != b->plan || a->nnamed != b->nnamed)
        return 0;
    for (int i = 0; i < a->nnamed; i++)
        if (strcmp(a->named[i], b->named[i]) != 0)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    json_t *in = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    if (!json_is_object(in)) {
        json_decref(in);
        return 0;
    }
    const char *id = json_string_value(json_object_get(in, "id"));
    json_t *base = json_object_get(in, "base");
    int64_t base_e = json_integer_value(json_object_get(in, "base_e"));
    uint64_t base_plan = pool_unhex64(json_string_value(json_object_get(in, "base_plan")));
    json_t *committed = json_object_get(in, "committed");
    json_t *plist = json_object_get(in, "peers");
    pool_peer peers[MAX_PEERS];
    int n = 0;
    char hash[17] = "";
    if (json_is_object(committed)) {
        pool_hex64(pool_layout_hash(committed), hash);
        fuzz_require(strcmp(hash, "0000000000000000") != 0, T, "a layout hash of 0", NULL);
        if (mode & 1)
            json_object_set_new(committed, "h", json_string(hash));
    }
    size_t i;
    json_t *p;
    json_array_foreach(plist, i, p) {
        if (n == MAX_PEERS)
            break;
        json_t *doc = json_object_get(p, "doc");
        json_t *vote = json_object_get(doc, "vote");
        if ((mode & 2) && json_is_object(vote) && hash[0])
            json_object_set_new(vote, "p", json_string(hash));
        elect_vote v, back;
        if (pool_vote_parse(vote, &v) == 0) {
            fuzz_require(v.epoch > 0 && v.nnamed >= 0 && v.nnamed <= ELECT_MAX_NAMED, T,
                         "a vote parsed out of range", NULL);
            json_t *again = pool_vote_json(&v, json_object_get(vote, "m"));
            fuzz_require(again && pool_vote_parse(again, &back) == 0 && same_vote(&v, &back), T,
                         "a parsed vote does not survive pool_vote_json", NULL);
            json_decref(again);
        }
        peers[n].name = json_string_value(json_object_get(p, "name"));
        peers[n].address = json_string_value(json_object_get(p, "address"));
        peers[n].live = json_is_true(json_object_get(p, "live"));
        peers[n].doc = json_is_object(doc) ? doc : NULL;
        if (peers[n].name)
            n++;
    }
    if (id && json_is_object(committed)) {
        char why[512];
        memset(why, 'x', sizeof why);
        if (pool_commit_verify(committed, id, base, base_e, base_plan, peers, n, why,
                               sizeof why) != 0)
            fuzz_require(memchr(why, 0, sizeof why) && why[0], T, "a refusal without a reason",
                         NULL);
    }
    /* jobs order one way only, at a fixed "now" so runs repeat */
    const int64_t now = 1800000000;
    for (int a = 0; a < n; a++) {
        json_t *ba = peers[a].doc ? json_object_get(peers[a].doc, "bundle") : NULL;
        char err[512];
        if (!json_is_object(ba) || pool_bundle_valid(ba, err, sizeof err) != 0)
            continue;
        fuzz_require(!pool_job_later(ba, ba, now), T, "a job is later than itself", NULL);
        json_t *at = json_object_get(ba, "submitted_at");
        if (json_integer_value(at) > now + 3600)
            fuzz_require(!pool_job_later(ba, NULL, now), T, "a job from the far future taken",
                         NULL);
        for (int b = 0; b < a; b++) {
            json_t *bb = peers[b].doc ? json_object_get(peers[b].doc, "bundle") : NULL;
            if (json_is_object(bb) && pool_bundle_valid(bb, err, sizeof err) == 0)
                fuzz_require(!(pool_job_later(ba, bb, now) && pool_job_later(bb, ba, now)), T,
                             "two jobs each later than the other", NULL);
        }
    }
    const char *carrier = json_string_value(json_object_get(in, "carrier"));
    const char *self = json_string_value(json_object_get(in, "self"));
    for (int k = 0; k < n && carrier; k++) {
        if (!peers[k].doc || strcmp(peers[k].name, carrier) != 0)
            continue;
        json_t *bundle = json_object_get(peers[k].doc, "bundle");
        char err[512];
        if (!json_is_object(bundle) || pool_bundle_valid(bundle, err, sizeof err) != 0)
            break;
        (void)pool_job_from(bundle, carrier, peers, n);
        if (self) {
            char out[DAEMON_PATH_MAX + 64];
            const char *job_dir = "/state/jobs/0123456789abcdef";
            pool_gather_dir(bundle, self, job_dir, out, sizeof out);
            const char *by = json_string_value(json_object_get(bundle, "submitted_by"));
            if (!by || strcmp(by, self) != 0)
                fuzz_require(strncmp(out, job_dir, strlen(job_dir)) == 0, T,
                             "another member's job is gathered outside self's job folder", out);
        }
        break;
    }
    json_decref(in);
    return 0;
}

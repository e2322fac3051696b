/* test_pool_trust.c — what one member can make the others do through its
 * job document (docs/PROTOCOL.md, "Threat model: pool and pipeline"):
 * a gossiped commit is taken only when the members' own signed votes made
 * it, its content hashes to the plan voted for and it names members at the
 * addresses of their own records (pool_commit_verify); a job is bound to
 * the member whose record carried it first, and ordered by a time no
 * member can push past the receiver's clock (pool_job_from, pool_job_later). */
#include "pool_internal.h"
#include "pool_verify.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define JOB "0123456789abcdef"
#define JB "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* A plan naming a then b at their overlay addresses. */
static json_t *layout(const char *addr_a, const char *addr_b, const char *name_b)
{
    return json_pack("{s:i,s:I,s:I,s:[[s,i,i,s,I],[s,i,i,s,I]]}", "mb", 2, "step_ns",
                     (json_int_t)5000000, "step_ns_shared", (json_int_t)5000000, "stages", "a", 0,
                     2, addr_a, (json_int_t)2000000, name_b, 2, 4, addr_b, (json_int_t)3000000);
}

/* A record carries a list of members as its hash. */
static json_t *members_hash(json_t *members)
{
    pool_names n;
    char err[256], h[17];
    if (pool_names_from_json(members, &n, "m", err, sizeof err) != 0) return NULL;
    pool_hex64(pool_names_hash(&n), h);
    pool_names_free(&n);
    return json_string(h);
}

static json_t *committed_of(json_t *lay, int64_t e, json_t *members)
{
    char h[17];
    pool_hex64(pool_layout_hash(lay), h);
    json_t *c = json_deep_copy(lay);
    json_object_set_new(c, "e", json_integer(e));
    json_object_set_new(c, "h", json_string(h));
    json_object_set_new(c, "mh", members_hash(members));
    return c;
}

/* A member's job document with its vote for (e, plan) naming a and b. */
static json_t *doc_voting(int64_t e, uint64_t plan, json_t *members, const char *name_b)
{
    elect_vote v;
    memset(&v, 0, sizeof v);
    v.epoch = e;
    v.view = 0x1234;
    v.plan = plan;
    v.nnamed = 2;
    snprintf(v.named[0], PLAN_NAME_MAX, "a");
    snprintf(v.named[1], PLAN_NAME_MAX, "%s", name_b);
    return json_pack("{s:i,s:s,s:s,s:i,s:s,s:o}", "v", POOL_DOC_VERSION, "id", JOB, "by", "a",
                     "at", 1700000000, "jb", JB, "vote", pool_vote_json(&v, members));
}

typedef struct {
    json_t *docs[3];
    pool_peer peers[3];
    json_t *members;
} world;

static const char *addr[3] = {"10.77.0.1", "10.77.0.2", "10.77.0.3"};
static const char *names[3] = {"a", "b", "c"};

static void world_init(world *w)
{
    memset(w, 0, sizeof *w);
    w->members = json_pack("[s,s,s]", "a", "b", "c");
    for (int i = 0; i < 3; i++) w->peers[i] = (pool_peer){names[i], addr[i], true, NULL};
}

static void world_vote(world *w, int i, int64_t e, uint64_t plan)
{
    json_decref(w->docs[i]);
    w->docs[i] = doc_voting(e, plan, w->members, "b");
    w->peers[i].doc = w->docs[i];
}

static void world_free(world *w)
{
    for (int i = 0; i < 3; i++) json_decref(w->docs[i]);
    json_decref(w->members);
}

static int verify(world *w, json_t *c, char *why, size_t len)
{
    return pool_commit_verify(c, JOB, w->members, 0, 0, w->peers, 3, why, len);
}

static void test_commit_verify(void)
{
    char why[400];
    world w;
    world_init(&w);
    json_t *lay = layout(addr[0], addr[1], "b");
    uint64_t h = pool_layout_hash(lay);
    json_t *c = committed_of(lay, 1, w.members);

    /* nobody voted: refused */
    CHECK(verify(&w, c, why, sizeof why) != 0, "a commit without votes was taken");
    /* every stage and a majority voted for it: taken */
    world_vote(&w, 0, 1, h);
    world_vote(&w, 1, 1, h);
    CHECK(verify(&w, c, why, sizeof why) == 0, "a commit the votes made was refused: %s", why);
    /* the same section for another epoch than the votes': refused */
    json_t *c2 = committed_of(lay, 2, w.members);
    CHECK(verify(&w, c2, why, sizeof why) != 0, "a commit for an epoch nobody voted in was taken");
    json_decref(c2);

    /* one member's vote alone (a minority of the base membership): refused */
    world_vote(&w, 1, 1, h ^ 1);
    CHECK(verify(&w, c, why, sizeof why) != 0, "a commit by a minority was taken");
    CHECK(strstr(why, "votes do not commit it") != NULL, "why: %s", why);
    /* a majority, but a named stage voted otherwise: refused */
    world_vote(&w, 2, 1, h);
    CHECK(verify(&w, c, why, sizeof why) != 0, "a commit a named stage did not vote for was taken");
    world_vote(&w, 1, 1, h);

    /* altered content under the voted hash (stage a on 0.0.0.0): refused */
    json_t *bad = json_deep_copy(c);
    json_array_set_new(json_array_get(json_object_get(bad, "stages"), 0), 3, json_string("0.0.0.0"));
    CHECK(verify(&w, bad, why, sizeof why) != 0, "altered content was taken");
    CHECK(strstr(why, "hashes to") != NULL, "why: %s", why);
    json_decref(bad);

    /* a plan with a stage on 0.0.0.0 that its (colluding) voters hashed
     * honestly: refused for the address */
    json_t *lay0 = layout("0.0.0.0", addr[1], "b");
    json_t *c0 = committed_of(lay0, 1, w.members);
    uint64_t h0 = pool_layout_hash(lay0);
    for (int i = 0; i < 3; i++) world_vote(&w, i, 1, h0);
    CHECK(verify(&w, c0, why, sizeof why) != 0, "a stage on 0.0.0.0 was taken");
    CHECK(strstr(why, "its record says 10.77.0.1") != NULL, "why: %s", why);

    /* a plan naming a non-member: refused even with votes */
    json_t *layz = layout(addr[0], "10.77.0.9", "zz");
    json_t *cz = committed_of(layz, 1, w.members);
    CHECK(verify(&w, cz, why, sizeof why) != 0, "a plan naming a non-member was taken");
    CHECK(strstr(why, "zz, not a member") != NULL, "why: %s", why);

    /* votes in a document of another job do not count */
    for (int i = 0; i < 3; i++) world_vote(&w, i, 1, h);
    CHECK(verify(&w, c, why, sizeof why) == 0, "refused: %s", why);
    json_object_set_new(w.docs[1], "id", json_string("fedcba9876543210"));
    json_object_set_new(w.docs[2], "id", json_string("fedcba9876543210"));
    CHECK(verify(&w, c, why, sizeof why) != 0, "votes of another job counted");

    /* m must be the members the votes saw */
    world_vote(&w, 1, 1, h);
    world_vote(&w, 2, 1, h);
    json_t *cm = json_deep_copy(c);
    json_t *only_a = json_pack("[s]", "a");
    json_object_set_new(cm, "mh", members_hash(only_a));
    json_decref(only_a);
    CHECK(verify(&w, cm, why, sizeof why) != 0, "a commit with other members was taken");
    json_decref(cm);

    json_decref(cz);
    json_decref(layz);
    json_decref(c0);
    json_decref(lay0);
    json_decref(c);
    json_decref(lay);
    world_free(&w);
}

/* Issue 12, finding 5: the submitter of a job is the member whose own
 * record carried it first; only it uses the job's out_dir. (The bundle and
 * the documents are the typed ones the core checks; pool_job_from and
 * pool_gather_dir do the same on JSON, through the same parsers.) */
static void test_submitter(void)
{
    pool_bundle bundle;
    memset(&bundle, 0, sizeof bundle);
    snprintf(bundle.id, sizeof bundle.id, "%s", JOB);
    snprintf(bundle.submitted_by, sizeof bundle.submitted_by, "a");
    bundle.out_dir = "/etc/cron.d";
    /* the job as records name it (its blob: the bundle and the first
     * epoch's members) */
    pool_job_ref job = {.id = JOB, .by = "a", .at = 1700000000, .blob = JB};
    pool_doc carrying, other;
    pool_doc_init(&carrying);
    pool_doc_init(&other);
    carrying.job = job;
    snprintf(carrying.id, sizeof carrying.id, "%s", JOB);
    snprintf(other.id, sizeof other.id, "fedcba9876543210");
    snprintf(other.job.id, sizeof other.job.id, "fedcba9876543210");
    pool_member peers[3] = {{.name = "a", .address = addr[0], .live = true},
                            {.name = "b", .address = addr[1], .live = true},
                            {.name = "evil", .address = addr[2], .live = true, .doc = &carrying}};
    /* evil gossips a job it says a submitted; a carries nothing: ignored */
    CHECK(!pool_job_from_carrier(&job, "evil", peers, 3), "a job pinned on a member was taken up");
    /* a carries another job: still ignored */
    peers[0].doc = &other;
    CHECK(!pool_job_from_carrier(&job, "evil", peers, 3), "a job pinned on a member was taken up");
    /* a submitter no longer in the view: ignored */
    CHECK(!pool_job_from_carrier(&job, "evil", peers + 1, 2), "a job of an unknown submitter");
    /* a carries the job with another blob (other first-epoch members): ignored */
    pool_doc reblobbed = carrying;
    reblobbed.job.blob[0] = 'f';
    peers[0].doc = &reblobbed;
    CHECK(!pool_job_from_carrier(&job, "evil", peers, 3), "a job relayed with another blob "
          "than its submitter's was taken up");
    /* a's own record carries it: anyone may relay it */
    peers[0].doc = &carrying;
    CHECK(pool_job_from_carrier(&job, "evil", peers, 3) &&
              pool_job_from_carrier(&job, "b", peers, 3),
          "a relayed job of its submitter was refused");
    /* the submitter itself */
    peers[0].doc = NULL;
    CHECK(pool_job_from_carrier(&job, "a", peers, 3), "a submitter's own job was refused");

    /* out_dir is the submitter's only */
    char out[512];
    pool_bundle_gather_dir(&bundle, "a", "/var/lib/shardnode/jobs/" JOB, out, sizeof out);
    CHECK(strcmp(out, "/etc/cron.d") == 0, "the submitter gathers into its out_dir: %s", out);
    pool_bundle_gather_dir(&bundle, "b", "/var/lib/shardnode/jobs/" JOB, out, sizeof out);
    CHECK(strcmp(out, "/var/lib/shardnode/jobs/" JOB "/model") == 0,
          "another member gathers under its state directory: %s", out);
}

/* Issue 12, finding 9: the pipeline's HELLO key of two stages is the same
 * on both ends, and another member's or another run's differs. */
static void test_hello_key(void)
{
    uint8_t priv[3][32], pub[3][32], ab[32], ba[32], ac[32], ab2[32];
    char err[256];
    for (int i = 0; i < 3; i++)
        CHECK(keys_x25519_generate(priv[i], pub[i], err, sizeof err) == 0, "%s", err);
    CHECK(pool_hello_key(priv[0], pub[0], pub[1], "job-1-e1", ab) == 0 &&
              pool_hello_key(priv[1], pub[1], pub[0], "job-1-e1", ba) == 0 &&
              pool_hello_key(priv[0], pub[0], pub[2], "job-1-e1", ac) == 0 &&
              pool_hello_key(priv[0], pub[0], pub[1], "job-1-e2", ab2) == 0,
          "pool_hello_key failed");
    CHECK(memcmp(ab, ba, 32) == 0, "the two ends of a pair derive different keys");
    CHECK(memcmp(ab, ac, 32) != 0, "two pairs share a key");
    CHECK(memcmp(ab, ab2, 32) != 0, "two runs share a key");
}

/* A vote naming a member by a name longer than any member may have is
 * refused, never cut: a cut name would be another member's. */
static void test_vote_names(void)
{
    char longname[101];
    memset(longname, 'a', 100);
    longname[100] = 0;
    elect_vote v;
    json_t *ok = json_pack("{s:I,s:I,s:s,s:s,s:s,s:[s,s],s:s}", "e", (json_int_t)1, "b",
                           (json_int_t)0, "bp", "0", "v", "00000000000000aa", "p",
                           "00000000000000bb", "n", "a", "b", "mh", "00000000000000cc");
    json_t *bad = json_deep_copy(ok);
    json_array_append_new(json_object_get(bad, "n"), json_string(longname));
    CHECK(pool_vote_parse(ok, &v) == 0 && v.nnamed == 2, "a vote naming a and b was refused");
    CHECK(pool_vote_parse(bad, &v) != 0, "a vote naming a 100-character member was taken");
    json_decref(ok);
    json_decref(bad);
}

int main(void)
{
    test_vote_names();
    test_commit_verify();
    test_submitter();
    test_hello_key();
    if (failures) printf("%d failure(s)\n", failures);
    else printf("ok\n");
    return failures != 0;
}

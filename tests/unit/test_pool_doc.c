/* test_pool_doc.c — the pool's documents as C types (node/pool/pool_doc.h,
 * pool_plan.c, pool_doc.c): a member's job document, a vote, a committed
 * plan, the saved state and the job section of status read and write back
 * to the same bytes; every malformed field is refused with a message that
 * names it; the plan hash is the SHA-256 of the layout's canonical text and
 * the view text the canonical JSON docs/PROTOCOL.md describes (so members
 * of this build and of the one before hash alike). */
#include "pool_doc.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define ID "0123456789abcdef"

#define JB "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* A full document as a member gossips it (compact, key-sorted). */
static json_t *full_doc(void)
{
    return json_pack(
        "{s:i,s:s,s:s,s:i,s:s,s:b,s:s,s:i,s:i,s:b,s:b,"
        "s:[{s:s,s:s,s:s,s:s}],s:i,s:s,"
        "s:{s:i,s:[i,i,i],s:[i,i,i],s:[i,i,i],s:I,s:i,s:s},"
        "s:{s:[i,i],s:[i,i]},s:[i,i],s:b,"
        "s:{s:i,s:i,s:s,s:s,s:s,s:[s,s],s:s},"
        "s:s,"
        "s:{s:i,s:I,s:I,s:[[s,i,i,s,i],[s,i,i,s,i]],s:i,s:i,s:i,s:s,s:s},"
        "s:{s:s,s:i,s:i,s:f,s:f,s:f},"
        "s:[[i,i,i],[i,i,i]],s:{s:s,s:i,s:i,s:i,s:i,s:i}}",
        "v", 2, "id", ID, "by", "c", "at", 1700000000, "jb", JB, "compute", 1, "host",
        "00000000deadbeef", "cores", 2, "threads", 2, "first", 0, "any", 1,
        "lack", "role", "data", "path", "/data/kjv.txt", "local", "/data/kjv.txt", "why",
        "missing", "lack_more", 3, "prof_error", "profiling failed: no",
        "prof", "b", 2, "f", 10, 20, 30, "k", 40, 50, 60, "o", 7, 8, 9, "mem",
        (json_int_t)8589934592, "s", 2, "d", "AMD EPYC",
        "links", "a", 1000, 2000, "c", 3000, 4000, "link", 2000, 3000, "ready", 1,
        "vote", "e", 2, "b", 1, "bp", "00000000000000aa", "v", "00000000000000bb", "p",
        "00000000000000cc", "n", "a", "b", "mh", "00000000000000dd",
        "why", "the model needs at least more",
        "committed", "mb", 2, "step_ns", (json_int_t)5000000, "step_ns_shared",
        (json_int_t)6000000, "stages", "a", 0, 2, "10.77.0.1", 2000000, "b", 2, 4, "10.77.0.2",
        3000000, "rs", 10, "se", 5, "e", 1, "h", "1111111111111111", "mh", "00000000000000ee",
        "run", "state", "running", "step", 3, "steps", 30, "loss", 5.25, "tps", 1234.5,
        "step_ms", 250.0,
        "sn", 0, 2, 10, 2, 4, 5, "rec", "lost", "b", "at", 12, "from", 10, "e", 2, "ms", 6100,
        "n", 1);
}

static char *text_of(json_t *j) { return json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS); }

static void test_round_trip(void)
{
    json_t *j = full_doc();
    CHECK(j != NULL, "the test's document");
    char *want = text_of(j), err[512] = "";
    pool_doc d;
    CHECK(pool_doc_from_text(want, &d, err, sizeof err) == 0, "full document refused: %s", err);
    char *got = pool_doc_to_text(&d);
    CHECK(got && strcmp(got, want) == 0, "the document writes back otherwise:\n%s\n%s", want, got);
    CHECK(d.vote.v.epoch == 2 && d.vote.v.nnamed == 2 && d.vote.members_hash == 0xdd &&
              d.committed.members_hash == 0xee && d.job.at == 1700000000 &&
              strcmp(d.job.by, "c") == 0 && d.lack_more == 3 && d.typical.bandwidth == 3000 &&
              d.committed.nstages == 2 && d.committed.stage[1].layer_end == 4 &&
              strcmp(d.committed.stage[1].holder[0].address, "10.77.0.2") == 0 &&
              d.links.n == 2 && d.prof.prof.fwd_ns[1] == 20 && d.run.state == POOL_RUN_RUNNING &&
              d.lacks.n == 1 && !d.first && d.any && d.committed.resume_step == 10 &&
              d.committed.snapshot_every == 5 && d.snaps.n == 2 && d.snaps.s[1].layer_end == 4 &&
              d.snaps.s[1].step == 5 && (d.has & POOL_HAS_REC) && d.rec.ms == 6100 &&
              strcmp(d.rec.lost, "b") == 0 && d.rec.from == 10,
          "the fields read");
    /* the view text: the canonical JSON of PROTOCOL.md, "The view and the
     * plan" (without the snapshots, which core_view hashes beside it where
     * the plan depends on them) */
    json_t *canon = json_pack("{s:s,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O}", "name", "x", "host",
                              json_object_get(j, "host"), "cores", json_object_get(j, "cores"),
                              "threads", json_object_get(j, "threads"), "compute",
                              json_object_get(j, "compute"), "first", json_object_get(j, "first"),
                              "any", json_object_get(j, "any"), "prof",
                              json_object_get(j, "prof"), "links", json_object_get(j, "links"),
                              "link", json_object_get(j, "link"));
    char *cv = text_of(canon), *vt = pool_doc_view_text("x", &d);
    CHECK(vt && strcmp(cv, vt) == 0, "the view text differs:\n%s\n%s", cv, vt);
    free(cv);
    free(vt);
    json_decref(canon);
    /* the saved state and the status section round-trip too */
    pool_saved sv = {.has_committed = true, .committed = d.committed, .has_run = true,
                     .run = d.run, .stop = true, .has_vote = true, .vote = d.vote};
    pool_names_add(&sv.vote.members, "a");   /* kept in state.json, not in the record */
    pool_names_add(&sv.committed.members, "b");
    json_t *sj = pool_saved_to_json(&sv);
    char *st = text_of(sj);
    pool_saved back;
    CHECK(pool_saved_from_json(sj, &back, err, sizeof err) == 0, "saved state refused: %s", err);
    json_t *sj2 = pool_saved_to_json(&back);
    char *st2 = text_of(sj2);
    CHECK(strcmp(st, st2) == 0 && back.vote.members.n == 1 && back.committed.members.n == 1,
          "the saved state writes back otherwise");
    pool_names_free(&sv.vote.members);
    pool_names_free(&sv.committed.members);
    free(st);
    free(st2);
    json_decref(sj);
    json_decref(sj2);
    pool_saved_free(&back);
    pool_status_member mem = {.name = "a", .state = "alive", .address = "10.77.0.1", .doc = &d};
    pool_status s = {.id = ID, .submitted_by = "c", .out_dir = "/o", .job_file = "/j",
                     .has_committed = true, .committed = d.committed, .has_run = true,
                     .run = d.run, .nmembers = 1, .members = &mem};
    json_t *sj3 = pool_status_to_json(&s);
    char *t3 = text_of(sj3);
    pool_status s2;
    CHECK(pool_status_from_json(sj3, &s2, err, sizeof err) == 0, "status refused: %s", err);
    json_t *sj4 = pool_status_to_json(&s2);
    char *t4 = text_of(sj4);
    CHECK(t3 && t4 && strcmp(t3, t4) == 0, "the status writes back otherwise");
    pool_status_free(&s2);
    CHECK(pool_status_from_json(json_null(), &s2, err, sizeof err) == 1, "a null job is no job");
    free(t3);
    free(t4);
    json_decref(sj3);
    json_decref(sj4);
    pool_doc_free(&d);
    free(want);
    free(got);
    json_decref(j);
    /* the empty document is no text at all */
    pool_doc_init(&d);
    char *empty = pool_doc_to_text(&d);
    CHECK(empty && !empty[0], "an empty document has text \"%s\"", empty);
    free(empty);
}

/* Each change makes the document malformed; the refusal names `field`. */
typedef struct {
    const char *path;    /* key, or key.sub, or key#index */
    json_t *value;       /* NULL: delete the key */
    const char *field;   /* what the message must name */
} mutation;

static json_t *at_path(json_t *j, const char *path, char *last, size_t len)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    char *dot = strchr(buf, '.');
    if (!dot) {
        snprintf(last, len, "%s", buf);
        return j;
    }
    *dot = 0;
    snprintf(last, len, "%s", dot + 1);
    return json_object_get(j, buf);
}

/* Each mutation of make()'s document is refused, the refusal naming its
 * field. */
static void all_refused(const mutation *muts, size_t n, json_t *(*make)(void))
{
    for (size_t i = 0; i < n; i++) {
        json_t *j = make();
        char key[128], err[512] = "";
        json_t *obj = at_path(j, muts[i].path, key, sizeof key);
        if (muts[i].value) json_object_set_new(obj, key, muts[i].value);
        else json_object_del(obj, key);
        pool_doc d;
        int rc = pool_doc_from_json(j, &d, err, sizeof err);
        CHECK(rc != 0, "%s: a malformed document was taken", muts[i].path);
        CHECK(rc == 0 || strstr(err, muts[i].field), "%s: the refusal does not name %s: %s",
              muts[i].path, muts[i].field, err);
        if (rc == 0) pool_doc_free(&d);
        json_decref(j);
    }
}

static void test_refusals(void)
{
    mutation muts[] = {
        {"id", json_string("../etc"), "\"id\""},
        {"id", NULL, "\"id\""},
        {"extra", json_true(), "\"extra\""},
        {"pool", json_pack("[s]", "a"), "\"pool\""},
        {"bundle", json_object(), "\"bundle\""},
        {"v", json_integer(1), "\"v\""},
        {"v", NULL, "\"v\""},
        {"by", json_string("no/slash"), "\"by\""},
        {"at", json_integer(-1), "\"at\""},
        {"jb", json_string("00"), "\"jb\""},
        {"lack_more", json_integer(0), "\"lack_more\""},
        {"link", NULL, "\"link\""},
        {"link", json_pack("[i]", 1), "\"link\""},
        {"stop", json_integer(1), "\"stop\""},
        {"compute", json_string("yes"), "\"compute\""},
        {"host", json_string("zz"), "\"host\""},
        {"cores", json_integer(0), "\"cores\""},
        {"threads", json_string("2"), "\"threads\""},
        {"first", json_integer(0), "\"first\""},
        {"any", json_null(), "\"any\""},
        {"ready", json_string("no"), "\"ready\""},
        {"lack", json_object(), "\"lack\""},
        {"error", json_integer(3), "\"error\""},
        {"prof_error", json_true(), "\"prof_error\""},
        {"why", json_array(), "\"why\""},
        {"prof", json_string("fast"), "\"prof\""},
        {"prof.b", json_integer(0), "\"prof\".\"b\""},
        {"prof.f", json_pack("[i,i]", 1, 2), "\"prof\".\"f\""},
        {"prof.k", json_pack("[i,i,i]", 1, -2, 3), "\"prof\".\"k\""},
        {"prof.o", NULL, "\"prof\".\"o\""},
        {"prof.mem", json_integer(-1), "\"prof\".\"mem\""},
        {"prof.s", json_string("2"), "\"prof\".\"s\""},
        {"prof.d", json_integer(1), "\"prof\".\"d\""},
        {"prof.x", json_integer(1), "\"prof\".\"x\""},
        {"links", json_array(), "\"links\""},
        {"links.a", json_pack("[i]", 1), "\"links\".\"a\""},
        {"links.a", json_pack("[i,i]", -1, 2), "\"links\".\"a\""},
        {"vote", json_integer(1), "\"vote\""},
        {"vote.e", json_integer(0), "\"vote\".\"e\""},
        {"vote.b", json_integer(2), "\"vote\".\"b\""},
        {"vote.bp", json_string("xyz"), "\"vote\".\"bp\""},
        {"vote.v", json_integer(5), "\"vote\".\"v\""},
        {"vote.p", NULL, "\"vote\".\"p\""},
        {"vote.n", json_pack("[s]", "no/slash"), "\"vote\".\"n\""},
        {"vote.mh", json_pack("[s]", "a"), "\"vote\".\"mh\""},
        {"vote.m", json_pack("[s]", "a"), "\"vote\".\"m\""},
        {"vote.q", json_integer(1), "\"vote\".\"q\""},
        {"committed", json_integer(1), "\"committed\""},
        {"committed.mb", json_integer(0), "\"mb\""},
        {"committed.step_ns", json_real(1.5), "\"step_ns\""},
        {"committed.step_ns_shared", json_integer(-5), "\"step_ns_shared\""},
        {"committed.stages", json_array(), "\"stages\""},
        {"committed.stages", json_pack("[[s,i,i,s]]", "a", 0, 2, "x"), "\"stages\" entry 0"},
        {"committed.stages", json_pack("[[s,i,i,s,i]]", "a", 3, 2, "x", 1), "\"stages\" entry 0"},
        {"committed.e", json_integer(0), "\"e\""},
        {"committed.h", json_string("11"), "\"h\""},
        {"committed.mh", NULL, "\"mh\""},
        {"committed.zz", json_integer(1), "\"zz\""},
        {"run", json_string("done"), "\"run\""},
        {"run.state", json_string("sleeping"), "\"run\".\"state\""},
        {"run.step", json_real(1.5), "\"run\".\"step\""},
        {"run.steps", json_string("30"), "\"run\".\"steps\""},
        {"run.loss", json_string("low"), "\"run\".\"loss\""},
        {"run.tps", json_true(), "\"run\".\"tps\""},
        {"run.step_ms", json_null(), "\"run\".\"step_ms\""},
        {"run.error", json_integer(1), "\"run\".\"error\""},
        {"run.gathered", json_integer(1), "\"run\".\"gathered\""},
        {"run.who", json_integer(1), "\"run\".\"who\""},
        {"committed.rs", json_integer(0), "\"rs\""},
        {"committed.se", json_string("5"), "\"se\""},
        {"sn", json_array(), "\"sn\""},
        {"sn", json_pack("[[i,i]]", 0, 2), "\"sn\""},
        {"sn", json_pack("[[i,i,i]]", 3, 2, 5), "\"sn\""},
        {"sn", json_pack("[[i,i,i]]", 0, 2, 0), "\"sn\""},
        {"sn", json_pack("[[i,i,i],[i,i,i],[i,i,i],[i,i,i],[i,i,i],[i,i,i],[i,i,i],[i,i,i],"
                         "[i,i,i]]", 0, 1, 1, 0, 1, 2, 0, 1, 3, 0, 1, 4, 0, 1, 5, 0, 1, 6, 0, 1,
                         7, 0, 1, 8, 0, 1, 9), "\"sn\""},
        {"rec", json_integer(1), "\"rec\""},
        {"rec.lost", json_string("no/slash"), "\"rec\".\"lost\""},
        {"rec.at", json_integer(-1), "\"rec\".\"at\""},
        {"rec.from", NULL, "\"rec\".\"from\""},
        {"rec.ms", json_real(1.5), "\"rec\".\"ms\""},
        {"rec.why", json_integer(1), "\"rec\".\"why\""},
    };
    all_refused(muts, sizeof muts / sizeof muts[0], full_doc);
    /* more links than a record carries */
    json_t *j = full_doc();
    json_t *links = json_object_get(j, "links");
    for (int i = 0; i < POOL_LINKS_MAX; i++) {
        char n[16];
        snprintf(n, sizeof n, "n%02d", i);
        json_object_set_new(links, n, json_pack("[i,i]", 1, 1));
    }
    pool_doc d;
    char err[512];
    CHECK(pool_doc_from_json(j, &d, err, sizeof err) != 0 && strstr(err, "\"links\""),
          "too many links: %s", err);
    json_decref(j);
    CHECK(pool_doc_from_text("{\"v\": 2, \"v\": 2}", &d, err, sizeof err) != 0,
          "a document with a key twice was taken");
}

/* A planned switch's fields (docs/PROTOCOL.md, "Planned switches"): a
 * handover plan ("ho"), a switch's vote ("sw"), a stage that handed over
 * ("handed") and the record of the switch ("swr") read and write back; each
 * malformed one is refused naming it. */
static json_t *switch_doc(void)
{
    json_t *j = full_doc();
    json_t *c = json_object_get(j, "committed");
    json_object_del(c, "rs");
    json_object_set_new(c, "ho", json_true());
    json_object_set_new(json_object_get(j, "vote"), "sw", json_string("joined"));
    json_object_set_new(json_object_get(j, "run"), "state", json_string("handed"));
    json_object_set_new(j, "swr", json_pack("{s:i,s:i,s:s,s:f,s:f,s:f,s:i,s:i}", "e", 3, "from",
                                            40, "why", "joined", "mb", 12.5, "pred", 250.5,
                                            "old", 410.25, "ms", 3100, "n", 1));
    return j;
}

static void test_switch_fields(void)
{
    json_t *j = switch_doc();
    char *want = text_of(j), err[512] = "";
    pool_doc d;
    CHECK(pool_doc_from_text(want, &d, err, sizeof err) == 0, "switch document refused: %s", err);
    char *got = pool_doc_to_text(&d);
    CHECK(got && strcmp(got, want) == 0, "the switch document writes back otherwise:\n%s\n%s",
          want, got);
    CHECK(d.committed.handover && d.committed.resume_step == 0 && d.vote.sw == POOL_SW_JOINED &&
              d.run.state == POOL_RUN_HANDED && (d.has & POOL_HAS_SWR) && d.swr.epoch == 3 &&
              d.swr.from == 40 && d.swr.why == POOL_SW_JOINED && d.swr.mb == 12.5 &&
              d.swr.ms == 3100 && d.swr.n == 1,
          "the switch fields read back otherwise");
    /* a handover plan hashes otherwise than the same stages from the start */
    pool_plan other;
    CHECK(pool_plan_copy(&other, &d.committed) == 0, "plan copy");
    other.handover = false;
    CHECK(pool_plan_hash(&other) != pool_plan_hash(&d.committed),
          "\"ho\" is not covered by the plan hash");
    pool_plan_free(&other);
    free(want);
    free(got);
    pool_doc_free(&d);
    json_decref(j);
    mutation muts[] = {
        {"committed.ho", json_false(), "\"ho\""},
        {"committed.ho", json_integer(1), "\"ho\""},
        {"committed.rs", json_integer(10), "\"ho\" and \"rs\""},
        {"vote.sw", json_string("bored"), "\"vote\".\"sw\""},
        {"vote.sw", json_integer(1), "\"vote\".\"sw\""},
        {"swr", json_integer(1), "\"swr\""},
        {"swr.e", json_integer(0), "\"swr\".\"e\""},
        {"swr.from", json_integer(-1), "\"swr\".\"from\""},
        {"swr.n", NULL, "\"swr\".\"n\""},
        {"swr.why", json_string("bored"), "\"swr\".\"why\""},
        {"swr.mb", json_real(-1), "\"swr\".\"mb\""},
        {"swr.pred", json_string("fast"), "\"swr\".\"pred\""},
        {"swr.old", NULL, "\"swr\".\"old\""},
        {"swr.ms", json_real(1.5), "\"swr\".\"ms\""},
        {"swr.zz", json_integer(1), "\"swr\".\"zz\""},
    };
    all_refused(muts, sizeof muts / sizeof muts[0], switch_doc);
}

/* The plan hash is the first 8 bytes of the SHA-256 of the layout's
 * compact, key-sorted JSON: the bytes every member of any build hashes. */
static void test_plan_hash(void)
{
    const char *layout = "{\"mb\":2,\"stages\":[[\"a\",0,2,\"10.77.0.1\",2000000],[\"b\",2,4,"
                         "\"10.77.0.2\",3000000]],\"step_ns\":5000000,\"step_ns_shared\":6000000}";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_Digest(layout, strlen(layout), md, &mdlen, EVP_sha256(), NULL);
    uint64_t want = 0;
    for (int i = 0; i < 8; i++) want = want << 8 | md[i];
    json_t *j = json_loads(layout, 0, NULL);
    pool_plan p;
    char err[256];
    CHECK(pool_plan_from_json(j, false, &p, err, sizeof err) == 0, "layout refused: %s", err);
    CHECK(pool_plan_hash(&p) == want, "plan hash %016llx, want %016llx",
          (unsigned long long)pool_plan_hash(&p), (unsigned long long)want);
    /* a committed section hashes its layout only, and writes back */
    p.epoch = 3;
    p.hash = want;
    pool_names_add(&p.members, "a");
    p.members_hash = pool_names_hash(&p.members);
    CHECK(pool_plan_hash(&p) == want, "the committed section's hash covers more than its layout");
    json_t *c = pool_plan_to_json(&p);
    pool_plan q;
    /* the members travel as their hash, not as a list that grows with the pool */
    CHECK(pool_plan_from_json(c, true, &q, err, sizeof err) == 0 && q.epoch == 3 &&
              q.hash == want && q.members.n == 0 && q.members_hash == p.members_hash &&
              pool_plan_hash(&q) == want,
          "committed section: %s", err);
    pool_plan_free(&q);
    CHECK(pool_plan_from_json(c, false, &q, err, sizeof err) != 0 && strstr(err, "\"e\""),
          "a committed section taken as a layout");
    pool_plan_free(&p);
    json_decref(c);
    json_decref(j);
}

/* A record carries every link of a small pool, and of a large one the
 * typical link and the most unusual ones. */
static void test_links_summary(void)
{
    pool_links all = {0, NULL}, exact;
    pool_link typical;
    for (int i = 0; i < 10; i++) {
        char n[16];
        snprintf(n, sizeof n, "m%02d", i);
        pool_links_add(&all, n, 1000000 + i, 100000000);
    }
    CHECK(pool_links_summary(&all, &exact, &typical) == 0 && exact.n == 10 &&
              typical.latency_ns == 1000004 && typical.bandwidth == 100000000,
          "small pool: %d exact, typical %lld", exact.n, (long long)typical.latency_ns);
    pool_links_free(&exact);
    for (int i = 10; i < 300; i++) {
        char n[16];
        snprintf(n, sizeof n, "m%03d", i);
        /* every 10th is slow: 20 of them, more than a record lists */
        pool_links_add(&all, n, i % 10 ? 1000000 : 1000000 * (int64_t)(1 + i / 10),
                       100000000);
    }
    CHECK(pool_links_summary(&all, &exact, &typical) == 0 && exact.n == POOL_LINKS_MAX &&
              typical.latency_ns == 1000000,
          "large pool: %d exact, typical %lld", exact.n, (long long)typical.latency_ns);
    /* the slowest first */
    CHECK(exact.n && strcmp(exact.l[0].name, "m290") == 0, "the most unusual link first: %s",
          exact.n ? exact.l[0].name : "-");
    pool_links_free(&exact);
    pool_links_free(&all);
}

int main(void)
{
    test_links_summary();
    test_round_trip();
    test_refusals();
    test_switch_fields();
    test_plan_hash();
    printf("%s\n", failures ? "FAILED" : "test_pool_doc: ok");
    return failures != 0;
}

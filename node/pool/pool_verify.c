/* pool_verify.c — what a member checks before acting on another member's
 * job document (docs/PROTOCOL.md, "Threat model: pool and pipeline"): that
 * a job is its submitter's, where its model may be gathered, and that a
 * gossiped commit is what the members' own votes made. Typed checks for the
 * core, and the same checks on JSON documents (pool_verify.h) for tests
 * and fuzz targets, which read them through the typed parsers. */
#include "node_base.h"
#include "pool_core.h"
#include "pool_verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pool_member *member_named(const pool_member *m, int n, const char *name)
{
    for (int i = 0; name && i < n; i++)
        if (m[i].name && strcmp(m[i].name, name) == 0) return &m[i];
    return NULL;
}

static bool doc_of_job(const pool_doc *d, const char *id)
{
    return d && id && strcmp(d->id, id) == 0;
}

bool pool_job_from_carrier(const pool_job_ref *r, const char *carrier,
                           const pool_member *members, int n)
{
    if (!r || !carrier || !r->by[0] || !r->id[0]) return false;
    if (strcmp(r->by, carrier) == 0) return true;
    const pool_member *s = member_named(members, n, r->by);
    return s && doc_of_job(s->doc, r->id) && strcmp(s->doc->job.blob, r->blob) == 0;
}

void pool_bundle_gather_dir(const pool_bundle *b, const char *self, const char *job_dir,
                            char *out, size_t len)
{
    if (b && self && b->out_dir && strcmp(b->submitted_by, self) == 0)
        snprintf(out, len, "%s", b->out_dir);
    else
        snprintf(out, len, "%s/model", job_dir);
}

int pool_plan_verify(const pool_plan *c, const char *id, const pool_names *base, int64_t base_e,
                     uint64_t base_plan, const pool_member *members, int n, char *why,
                     size_t whylen)
{
    int64_t e = c->epoch;
    char h[17], got[17];
    pool_hex64(c->hash, h);
    if (e < 1 || c->nstages < 1) return node_errf(why, whylen, "a malformed committed section");
    pool_hex64(pool_plan_hash(c), got);
    if (strcmp(got, h) != 0)
        return node_errf(why, whylen, "epoch %lld plan %s: its content hashes to %s, not to the "
                         "plan voted for", (long long)e, h, got);
    for (int i = 0; i < c->nstages; i++)
        for (int k = 0; k < c->stage[i].nholders; k++) {
            const pool_holder *s = &c->stage[i].holder[k];
            const pool_member *q = member_named(members, n, s->name);
            if (!q)
                return node_errf(why, whylen, "epoch %lld plan %s: stage %d names %.64s, not a "
                                 "member", (long long)e, h, i, s->name);
            if (!q->address || strcmp(q->address, s->address) != 0)
                return node_errf(why, whylen, "epoch %lld plan %s: stage %d puts %.64s at "
                                 "%.64s, its record says %.64s", (long long)e, h, i, s->name,
                                 s->address, q->address ? q->address : "nothing");
        }
    /* the votes, each from its owner's own document */
    elect_voter *voters = calloc((size_t)(n > 0 ? n : 1), sizeof *voters);
    const char **names = calloc((size_t)(base->n > 0 ? base->n : 1), sizeof *names);
    int rc = -1;
    if (!voters || !names) {
        node_errf(why, whylen, "out of memory");
        goto out;
    }
    for (int k = 0; k < n; k++) {
        voters[k].name = members[k].name;
        voters[k].gone = !members[k].live;
        if (doc_of_job(members[k].doc, id) && (members[k].doc->has & POOL_HAS_VOTE))
            voters[k].vote = &members[k].doc->vote.v;
    }
    for (int i = 0; i < base->n; i++) names[i] = base->name[i];
    elect_result r;
    elect_decide(e, names, base->n, voters, n, &r);
    if (r.outcome != ELECT_COMMITTED || r.from_later || !r.winner || r.winner->plan != c->hash ||
        r.winner->epoch != e || r.winner->base != base_e || r.winner->base_plan != base_plan) {
        node_errf(why, whylen, "epoch %lld plan %s: the members' own votes do not commit it "
                  "(%d of %d base members voted in that epoch)", (long long)e, h, r.votes,
                  base->n);
        goto out;
    }
    /* every stage's own vote is for it (elect_decide went by the votes'
     * list of named nodes) and its members are those the votes saw */
    for (int i = 0; i < c->nstages; i++)
        for (int k = 0; k < c->stage[i].nholders; k++) {
            const char *name = c->stage[i].holder[k].name;
            const elect_vote *v = voters[member_named(members, n, name) - members].vote;
            if (!v || v->epoch != e || v->plan != c->hash) {
                node_errf(why, whylen, "epoch %lld plan %s: stage %.64s did not vote for it",
                          (long long)e, h, name);
                goto out;
            }
        }
    bool members_ok = false;
    for (int k = 0; k < n && !members_ok; k++)
        if (voters[k].vote && voters[k].vote->epoch == e && voters[k].vote->plan == c->hash)
            members_ok = members[k].doc->vote.members_hash == c->members_hash;
    if (!members_ok) {
        node_errf(why, whylen, "epoch %lld plan %s: its members are not those its votes saw",
                  (long long)e, h);
        goto out;
    }
    rc = 0;
out:
    free(voters);
    free(names);
    return rc;
}

/* ---- the same checks on JSON documents ---- */

uint64_t pool_unhex64(const char *s)
{
    uint64_t v;
    return pool_hex64_parse(s, &v) == 0 ? v : 0;
}

json_t *pool_vote_json(const elect_vote *v, json_t *members)
{
    pool_vote pv;
    char err[256];
    memset(&pv, 0, sizeof pv);
    pv.v = *v;
    if (pool_names_from_json(members, &pv.members, "m", err, sizeof err) != 0) return NULL;
    pv.members_hash = pool_names_hash(&pv.members);
    json_t *j = pool_vote_to_json(&pv);
    pool_vote_free(&pv);
    return j;
}

int pool_vote_parse(json_t *j, elect_vote *v)
{
    pool_vote pv;
    char err[256];
    memset(v, 0, sizeof *v);
    if (pool_vote_from_json(j, &pv, err, sizeof err) != 0) return -1;
    *v = pv.v;
    pool_vote_free(&pv);
    return 0;
}

uint64_t pool_layout_hash(json_t *layout)
{
    /* the layout part of a layout or a committed section */
    json_t *l = json_is_object(layout) ? json_copy(layout) : NULL;
    pool_plan p;
    char err[256];
    json_object_del(l, "e");
    json_object_del(l, "h");
    json_object_del(l, "mh");
    int rc = pool_plan_from_json(l, false, &p, err, sizeof err);
    json_decref(l);
    if (rc != 0) return 1;
    uint64_t h = pool_plan_hash(&p);
    pool_plan_free(&p);
    return h;
}

/* Peers as members, their documents read by pool_doc_from_json (one that
 * does not read is none). */
static pool_member *members_of(const pool_peer *peers, int n, pool_doc **docs)
{
    pool_member *m = calloc((size_t)(n > 0 ? n : 1), sizeof *m);
    *docs = calloc((size_t)(n > 0 ? n : 1), sizeof **docs);
    if (!m || !*docs) {
        free(m);
        free(*docs);
        *docs = NULL;
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        char err[256];
        m[i] = (pool_member){.name = peers[i].name, .address = peers[i].address,
                             .live = peers[i].live};
        if (peers[i].doc && pool_doc_from_json(peers[i].doc, &(*docs)[i], err, sizeof err) == 0)
            m[i].doc = &(*docs)[i];
    }
    return m;
}

static void members_free(pool_member *m, pool_doc *docs, int n)
{
    for (int i = 0; docs && i < n; i++) pool_doc_free(&docs[i]);
    free(docs);
    free(m);
}

int pool_commit_verify(json_t *c, const char *id, json_t *base, int64_t base_e,
                       uint64_t base_plan, const pool_peer *peers, int n, char *why,
                       size_t whylen)
{
    pool_plan plan;
    pool_names names;
    char err[400];
    if (pool_plan_from_json(c, true, &plan, err, sizeof err) != 0)
        return node_errf(why, whylen, "a malformed committed section (%s)", err);
    if (pool_names_from_json(base, &names, "base", err, sizeof err) != 0) {
        pool_plan_free(&plan);
        return node_errf(why, whylen, "a malformed base membership (%s)", err);
    }
    pool_doc *docs;
    pool_member *m = members_of(peers, n, &docs);
    int rc = m ? pool_plan_verify(&plan, id, &names, base_e, base_plan, m, n, why, whylen)
               : node_errf(why, whylen, "out of memory");
    members_free(m, docs, n);
    pool_names_free(&names);
    pool_plan_free(&plan);
    return rc;
}

bool pool_job_from(json_t *bundle, const char *carrier, const pool_peer *peers, int n)
{
    pool_bundle b;
    char err[600];
    if (pool_bundle_from_json(bundle, &b, err, sizeof err) != 0) return false;
    pool_doc *docs;
    pool_member *m = members_of(peers, n, &docs);
    /* the job as the carrier's own document names it (its blob), else as
     * the bundle says with no blob */
    pool_job_ref r;
    memset(&r, 0, sizeof r);
    snprintf(r.id, sizeof r.id, "%s", b.id);
    snprintf(r.by, sizeof r.by, "%s", b.submitted_by);
    r.at = b.submitted_at;
    const pool_member *cm = m ? member_named(m, n, carrier) : NULL;
    if (cm && doc_of_job(cm->doc, b.id)) r = cm->doc->job;
    bool ok = m && strcmp(r.by, b.submitted_by) == 0 && pool_job_from_carrier(&r, carrier, m, n);
    members_free(m, docs, n);
    pool_bundle_free(&b);
    return ok;
}

void pool_gather_dir(json_t *bundle, const char *self, const char *job_dir, char *out,
                     size_t len)
{
    pool_bundle b;
    char err[600];
    bool ok = pool_bundle_from_json(bundle, &b, err, sizeof err) == 0;
    pool_bundle_gather_dir(ok ? &b : NULL, self, job_dir, out, len);
    if (ok) pool_bundle_free(&b);
}

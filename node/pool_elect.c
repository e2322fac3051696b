/* pool_elect.c — this node's part in the leaderless plan election
 * (docs/PROTOCOL.md, "Jobs and the plan election"): the view of the members
 * that have the job, the plan every member computes from it, the vote, and
 * the outcome of each epoch (scheduler/elect.c decides it from the votes). */
#include "pool_internal.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

json_t *pool_vote_json(const elect_vote *v, json_t *members)
{
    char b[17], view[17], plan[17];
    pool_hex64(v->base_plan, b);
    pool_hex64(v->view, view);
    pool_hex64(v->plan, plan);
    json_t *named = json_array();
    for (int i = 0; i < v->nnamed; i++) json_array_append_new(named, json_string(v->named[i]));
    return json_pack("{s:I,s:I,s:s,s:s,s:s,s:o,s:O}", "e", (json_int_t)v->epoch, "b",
                     (json_int_t)v->base, "bp", b, "v", view, "p", plan, "n", named, "m",
                     members ? members : json_null());
}

int pool_vote_parse(json_t *j, elect_vote *v)
{
    memset(v, 0, sizeof *v);
    if (!json_is_object(j)) return -1;
    v->epoch = json_integer_value(json_object_get(j, "e"));
    v->base = json_integer_value(json_object_get(j, "b"));
    v->base_plan = pool_unhex64(json_string_value(json_object_get(j, "bp")));
    v->view = pool_unhex64(json_string_value(json_object_get(j, "v")));
    v->plan = pool_unhex64(json_string_value(json_object_get(j, "p")));
    json_t *n = json_object_get(j, "n");
    size_t i;
    json_t *x;
    json_array_foreach(n, i, x) {
        if (v->nnamed >= ELECT_MAX_NAMED || !json_is_string(x) ||
            strlen(json_string_value(x)) >= PLAN_NAME_MAX) /* never cut: a cut name is another */
            return -1;
        snprintf(v->named[v->nnamed++], PLAN_NAME_MAX, "%s", json_string_value(x));
    }
    return v->epoch > 0 ? 0 : -1;
}

/* The plan part of a committed section (or of a layout). NULL when a part
 * is missing. */
static json_t *layout_of(json_t *c)
{
    return json_pack("{s:O,s:O,s:O*,s:O}", "mb", json_object_get(c, "mb"), "step_ns",
                     json_object_get(c, "step_ns"), "step_ns_shared",
                     json_object_get(c, "step_ns_shared"), "stages", json_object_get(c, "stages"));
}

uint64_t pool_layout_hash(json_t *layout)
{
    json_t *l = layout_of(layout);
    char *text = l ? json_dumps(l, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(l);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    uint64_t h = 0;
    if (text && EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha256(), NULL) && mdlen >= 8)
        for (int i = 0; i < 8; i++) h = h << 8 | md[i];
    free(text);
    return h ? h : 1;
}

static const pool_peer *peer_named(const pool_peer *peers, int n, const char *name)
{
    for (int i = 0; name && i < n; i++)
        if (peers[i].name && strcmp(peers[i].name, name) == 0) return &peers[i];
    return NULL;
}

static bool doc_names(json_t *doc, const char *id)
{
    const char *x = json_string_value(json_object_get(doc, "id"));
    return x && id && strcmp(x, id) == 0;
}

int pool_commit_verify(json_t *c, const char *id, json_t *base, int64_t base_e,
                       uint64_t base_plan, const pool_peer *peers, int n, char *why,
                       size_t whylen)
{
    json_t *je = json_object_get(c, "e"), *jh = json_object_get(c, "h");
    json_t *stages = json_object_get(c, "stages"), *m = json_object_get(c, "m");
    const char *h = json_string_value(jh);
    if (!json_is_object(c) || !json_is_integer(je) || json_integer_value(je) < 1 || !h ||
        strlen(h) != 16 || strspn(h, "0123456789abcdef") != 16 || !json_is_array(stages) ||
        json_array_size(stages) < 1 || json_array_size(stages) > ELECT_MAX_NAMED ||
        !json_is_array(m) || !json_is_integer(json_object_get(c, "mb")) ||
        !json_is_integer(json_object_get(c, "step_ns")))
        return node_errf(why, whylen, "a malformed committed section");
    int64_t e = json_integer_value(je);
    uint64_t plan = pool_unhex64(h);
    char got[17];
    pool_hex64(pool_layout_hash(c), got);
    if (strcmp(got, h) != 0)
        return node_errf(why, whylen, "epoch %lld plan %s: its content hashes to %s, not to the "
                         "plan voted for", (long long)e, h, got);
    size_t i;
    json_t *s;
    json_array_foreach(stages, i, s) {
        const char *name = json_string_value(json_array_get(s, 0));
        const char *addr = json_string_value(json_array_get(s, 3));
        if (!json_is_array(s) || json_array_size(s) != 5 || !name || !addr ||
            !json_is_integer(json_array_get(s, 1)) || !json_is_integer(json_array_get(s, 2)))
            return node_errf(why, whylen, "epoch %lld plan %s: stage %zu is malformed",
                             (long long)e, h, i);
        const pool_peer *q = peer_named(peers, n, name);
        if (!q)
            return node_errf(why, whylen, "epoch %lld plan %s: stage %zu names %.64s, not a "
                             "member", (long long)e, h, i, name);
        if (!q->address || strcmp(q->address, addr) != 0)
            return node_errf(why, whylen, "epoch %lld plan %s: stage %zu puts %.64s at %.64s, "
                             "its record says %.64s", (long long)e, h, i, name, addr,
                             q->address ? q->address : "nothing");
    }
    /* the votes, each from its owner's own document */
    elect_vote *votes = calloc((size_t)(n > 0 ? n : 1), sizeof *votes);
    elect_voter *voters = calloc((size_t)(n > 0 ? n : 1), sizeof *voters);
    const char *names[POOL_MAX_PARTS];
    int nm = 0, rc = -1;
    if (!votes || !voters) {
        node_errf(why, whylen, "out of memory");
        goto out;
    }
    for (int k = 0; k < n; k++) {
        voters[k].name = peers[k].name;
        voters[k].gone = !peers[k].live;
        if (doc_names(peers[k].doc, id) &&
            pool_vote_parse(json_object_get(peers[k].doc, "vote"), &votes[k]) == 0)
            voters[k].vote = &votes[k];
    }
    json_t *x;
    json_array_foreach(base, i, x) if (nm < POOL_MAX_PARTS && json_is_string(x)) names[nm++] =
        json_string_value(x);
    elect_result r;
    elect_decide(e, names, nm, voters, n, &r);
    if (r.outcome != ELECT_COMMITTED || r.from_later || !r.winner || r.winner->plan != plan ||
        r.winner->epoch != e || r.winner->base != base_e || r.winner->base_plan != base_plan) {
        node_errf(why, whylen, "epoch %lld plan %s: the members' own votes do not commit it "
                  "(%d of %d base members voted in that epoch)", (long long)e, h, r.votes, nm);
        goto out;
    }
    /* every stage's own vote is for it (elect_decide went by the votes'
     * list of named nodes) and its members are those the votes saw */
    json_array_foreach(stages, i, s) {
        const char *name = json_string_value(json_array_get(s, 0));
        int k = (int)(peer_named(peers, n, name) - peers);
        if (!voters[k].vote || votes[k].epoch != e || votes[k].plan != plan) {
            node_errf(why, whylen, "epoch %lld plan %s: stage %.64s did not vote for it",
                      (long long)e, h, name);
            goto out;
        }
    }
    bool members_ok = false;
    for (int k = 0; k < n && !members_ok; k++)
        if (voters[k].vote && votes[k].epoch == e && votes[k].plan == plan)
            members_ok = json_equal(json_object_get(json_object_get(peers[k].doc, "vote"), "m"), m);
    if (!members_ok) {
        node_errf(why, whylen, "epoch %lld plan %s: its members are not those its votes saw",
                  (long long)e, h);
        goto out;
    }
    rc = 0;
out:
    free(votes);
    free(voters);
    return rc;
}

/* ---- the plan this node's view gives ---- */

typedef struct {
    const char *name;
    json_t *doc;
    const char *address;
} voter_in;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const voter_in *)a)->name, ((const voter_in *)b)->name);
}

static int64_t jint(json_t *a, size_t i) { return (int64_t)json_integer_value(json_array_get(a, i)); }

/* The step of a plan whose stages share machines' cores (a report beside the
 * plan's own step, which takes every member as alone): stages whose members
 * gossip the same host share its cores, each computing with the threads its
 * profile was measured with, replayed by sim_run_shared. A member without a
 * host or cores counts as alone. 0 when the replay refuses the plan. */
static int64_t shared_step_ns(const plan *pl, json_t *const *docs)
{
    sim_placement place[PLAN_MAX_STAGES];
    int cores[PLAN_MAX_STAGES], nhosts = 0;
    const char *host[PLAN_MAX_STAGES];
    for (int s = 0; s < pl->nstages; s++) {
        json_t *doc = docs[pl->stage[s].node[0]];
        const char *h = json_string_value(json_object_get(doc, "host"));
        json_int_t c = json_integer_value(json_object_get(doc, "cores"));
        json_int_t t = json_integer_value(json_object_get(doc, "threads"));
        if (c < 1 || c > 4096) c = 1;
        if (t < 1 || t > 4096) t = c;
        int k = -1;
        for (int j = 0; h && j < nhosts; j++)
            if (host[j] && strcmp(host[j], h) == 0) k = j;
        if (k < 0) {
            k = nhosts++;
            host[k] = h;
            cores[k] = h ? (int)c : (int)t; /* no host: alone with its threads */
        }
        place[s] = (sim_placement){.host = k, .threads = (int)t};
    }
    sim_result r;
    char err[256];
    return sim_run_shared(&r, pl, place, cores, nhosts, err, sizeof err) == 0 ? r.step_ns : 0;
}

/* Computes view hash, members, plan hash and layout from the live members
 * that have the job. Returns false while someone is not ready. */
bool pool_compute_view(daemon_t *d, part *parts, int n)
{
    pool *p = d->pool;
    voter_in in[POOL_MAX_PARTS];
    int k = 0;
    bool ready = true;
    for (int i = 0; i < n && k < POOL_MAX_PARTS; i++) {
        if (!parts[i].live) continue;
        /* a live member that has not taken the job up yet: wait for it */
        if (!pool_doc_job(&parts[i], p->id)) {
            ready = false;
            continue;
        }
        json_t *doc = parts[i].doc;
        bool compute = json_is_true(json_object_get(doc, "compute")) &&
                       json_is_true(json_object_get(doc, "any"));
        if (compute && !json_is_true(json_object_get(doc, "ready")) &&
            !json_object_get(doc, "prof_error"))
            ready = false;
        in[k++] = (voter_in){parts[i].m->rec.name, doc, parts[i].m->rec.address};
    }
    qsort(in, (size_t)k, sizeof in[0], by_name);
    /* the canonical inputs: what each says that the plan depends on */
    json_t *canon = json_array(), *members = json_array();
    for (int i = 0; i < k; i++) {
        json_t *doc = in[i].doc;
        json_array_append_new(members, json_string(in[i].name));
        json_array_append_new(
            canon, json_pack("{s:s,s:O*,s:O*,s:O*,s:O,s:O,s:O,s:O,s:O}", "name", in[i].name,
                             "host", json_object_get(doc, "host"), "cores",
                             json_object_get(doc, "cores"), "threads",
                             json_object_get(doc, "threads"), "compute",
                             json_object_get(doc, "compute"), "first", json_object_get(doc, "first"),
                             "any", json_object_get(doc, "any"), "prof",
                             json_object_get(doc, "prof") ? json_object_get(doc, "prof") : json_null(),
                             "links",
                             json_object_get(doc, "links") ? json_object_get(doc, "links") : json_null()));
    }
    char *text = json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS);
    uint64_t view = elect_hash(ELECT_HASH_INIT, p->id, strlen(p->id));
    if (text) view = elect_hash(view, text, strlen(text));
    free(text);
    json_decref(canon);
    if (view != p->view) {
        p->view = view;
        p->view_since_ms = daemon_now_ms();
        json_decref(p->view_members);
        p->view_members = members;
    } else {
        json_decref(members);
    }
    if (!ready || !p->job_loaded) return false;
    if (p->layout && p->plan) return true;  /* same view: same plan */

    /* the fleet: members that compute and can hold a stage, by name */
    plan_node nodes[POOL_MAX_PARTS];
    const char *addr[POOL_MAX_PARTS];
    json_t *links_of[POOL_MAX_PARTS], *docs[POOL_MAX_PARTS];
    int f = 0;
    memset(nodes, 0, sizeof nodes);
    for (int i = 0; i < k; i++) {
        json_t *doc = in[i].doc, *pr = json_object_get(doc, "prof");
        if (!json_is_true(json_object_get(doc, "compute")) ||
            !json_is_true(json_object_get(doc, "any")) || !json_is_object(pr))
            continue;
        plan_node *nd = &nodes[f];
        snprintf(nd->name, sizeof nd->name, "%s", in[i].name);
        snprintf(nd->device, sizeof nd->device, "%s",
                 json_string_value(json_object_get(pr, "d")) ? json_string_value(json_object_get(pr, "d")) : "cpu");
        nd->no_data = !json_is_true(json_object_get(doc, "first"));
        nd->prof.micro_batch = json_integer_value(json_object_get(pr, "b"));
        for (int u = 0; u < COST_UNITS; u++) {
            nd->prof.fwd_ns[u] = jint(json_object_get(pr, "f"), (size_t)u);
            nd->prof.bwd_ns[u] = jint(json_object_get(pr, "k"), (size_t)u);
            nd->prof.opt_ns[u] = jint(json_object_get(pr, "o"), (size_t)u);
        }
        nd->prof.memory_bytes = json_integer_value(json_object_get(pr, "mem"));
        nd->prof.scratch_slots = (int)json_integer_value(json_object_get(pr, "s"));
        addr[f] = in[i].address;
        docs[f] = doc;
        links_of[f] = json_object_get(doc, "links");
        f++;
    }
    json_decref(p->layout);
    p->layout = NULL;
    p->plan = 0;
    p->why[0] = 0;
    if (pool_too_small(d, parts, n)) return true;
    if (f == 0) {
        snprintf(p->why, sizeof p->why, "no member can hold a stage (none computes with the "
                                        "job's files)");
        return true;
    }
    cost_link *links = calloc((size_t)f * (size_t)f, sizeof *links);
    plan *pl = calloc(1, sizeof *pl);
    if (!links || !pl) {
        free(links);
        free(pl);
        return false;
    }
    for (int i = 0; i < f; i++)
        for (int j = 0; j < f; j++) {
            json_t *l = json_object_get(links_of[i], nodes[j].name);
            if (!l) l = json_object_get(links_of[j], nodes[i].name);
            cost_link *c = &links[i * f + j];
            c->latency_ns = l ? jint(l, 0) : POOL_DEFAULT_LAT_NS;
            c->bandwidth = l ? jint(l, 1) : POOL_DEFAULT_BW;
            if (c->latency_ns < 0) c->latency_ns = POOL_DEFAULT_LAT_NS;
            if (c->bandwidth <= 0) c->bandwidth = POOL_DEFAULT_BW;
        }
    plan_fleet fleet = {.nnodes = f, .nodes = nodes, .links = links};
    plan_job pj = {.shape = fleet_shape(&p->cfg, p->job.seq_len),
                   .batch = p->job.batch,
                   .max_micro_batch = p->job.micro_batch,
                   .min_micro_batch = p->job.micro_batch,
                   .wire_bytes = 4,
                   .margin_permille = 50};
    char err[700];
    if (plan_fleet_check(&fleet, err, sizeof err) != 0 ||
        plan_compute(pl, &fleet, &pj, PLAN_AUTO, NULL, err, sizeof err) != 0) {
        snprintf(p->why, sizeof p->why, "%s", err);
    } else {
        json_t *stages = json_array();
        for (int s = 0; s < pl->nstages; s++) {
            int nd = pl->stage[s].node[0];
            json_array_append_new(stages, json_pack("[s,i,i,s,I]", nodes[nd].name,
                                                    pl->stage[s].layer_begin, pl->stage[s].layer_end,
                                                    addr[nd], (json_int_t)pl->stage[s].time_ns));
        }
        int64_t shared = shared_step_ns(pl, docs);
        p->layout = json_pack("{s:I,s:I,s:I,s:o}", "mb", (json_int_t)pl->micro_batch, "step_ns",
                              (json_int_t)pl->step_ns, "step_ns_shared",
                              (json_int_t)(shared > 0 ? shared : pl->step_ns), "stages", stages);
        p->plan = pool_layout_hash(p->layout);
    }
    free(links);
    free(pl);
    return true;
}

/* ---- the election ---- */

static json_t *base_members(pool *p)
{
    return p->committed ? json_object_get(p->committed, "m") : p->pool_names;
}

static int64_t base_epoch(pool *p)
{
    return p->committed ? json_integer_value(json_object_get(p->committed, "e")) : 0;
}

static uint64_t base_plan(pool *p)
{
    return p->committed ? pool_unhex64(json_string_value(json_object_get(p->committed, "h"))) : 0;
}


static void cast(daemon_t *d, int64_t epoch)
{
    pool *p = d->pool;
    elect_vote *v = &p->vote;
    memset(v, 0, sizeof *v);
    v->epoch = epoch;
    v->base = p->committed ? json_integer_value(json_object_get(p->committed, "e")) : 0;
    v->base_plan = p->committed ? pool_unhex64(json_string_value(json_object_get(p->committed, "h"))) : 0;
    v->view = p->view;
    v->plan = p->plan;
    json_t *st = p->layout ? json_object_get(p->layout, "stages") : NULL;
    size_t i;
    json_t *x;
    json_array_foreach(st, i, x) {
        if (v->nnamed < ELECT_MAX_NAMED)
            snprintf(v->named[v->nnamed++], PLAN_NAME_MAX, "%s",
                     json_string_value(json_array_get(x, 0)));
    }
    json_decref(p->vote_members);
    p->vote_members = json_deep_copy(p->view_members);
    p->doc_dirty = true;
    char vh[17], ph[17];
    pool_hex64(v->view, vh);
    pool_hex64(v->plan, ph);
    daemon_log(d, "pool: vote epoch %lld: view %s plan %s (%d stages)%s%s", (long long)epoch, vh,
               ph, v->nnamed, p->plan ? "" : ": ", p->plan ? "" : p->why);
}

static void commit(daemon_t *d, int64_t epoch, uint64_t plan, json_t *members, json_t *layout)
{
    pool *p = d->pool;
    char h[17];
    pool_hex64(plan, h);
    json_decref(p->committed);
    p->committed = layout_of(layout);
    json_object_set_new(p->committed, "e", json_integer((json_int_t)epoch));
    json_object_set_new(p->committed, "h", json_string(h));
    json_object_set(p->committed, "m", members);
    p->doc_dirty = true;
    daemon_log(d, "pool: epoch %lld committed plan %s", (long long)epoch, h);
}

static int peers_of(const part *parts, int n, pool_peer *out)
{
    for (int i = 0; i < n; i++)
        out[i] = (pool_peer){parts[i].m->rec.name, parts[i].m->rec.address, parts[i].live,
                             parts[i].doc};
    return n;
}

/* A committed section for (epoch, plan) that a member gossips and that the
 * members' own votes prove (pool_commit_verify). */
static json_t *committed_from(daemon_t *d, part *parts, int n, int64_t epoch, const char *h)
{
    pool *p = d->pool;
    pool_peer peers[POOL_MAX_PARTS];
    peers_of(parts, n, peers);
    for (int i = 0; i < n; i++) {
        json_t *c = pool_doc_job(&parts[i], p->id) ? json_object_get(parts[i].doc, "committed") : NULL;
        const char *ch = json_string_value(json_object_get(c, "h"));
        char why[300];
        if (c && json_integer_value(json_object_get(c, "e")) == epoch && ch &&
            (!h || strcmp(ch, h) == 0) &&
            pool_commit_verify(c, p->id, base_members(p), base_epoch(p), base_plan(p), peers, n,
                               why, sizeof why) == 0)
            return c;
    }
    return NULL;
}

/* Logs a gossiped commit this node does not take, once per member and plan. */
static void refuse(daemon_t *d, const char *who, const char *h, const char *why)
{
    pool *p = d->pool;
    char key[sizeof p->refused];
    snprintf(key, sizeof key, "%.64s/%.17s", who, h ? h : "");
    if (strcmp(key, p->refused) == 0) return;
    snprintf(p->refused, sizeof p->refused, "%s", key);
    daemon_log(d, "pool: %s gossips a commit this node does not take: %s", who, why);
}

void pool_elect(daemon_t *d, part *parts, int n, int64_t now)
{
    pool *p = d->pool;
    int64_t ce = p->committed ? json_integer_value(json_object_get(p->committed, "e")) : 0;
    /* what the others voted (live or not: a gone member's last vote stands) */
    elect_vote votes[POOL_MAX_PARTS];
    elect_voter voters[POOL_MAX_PARTS];
    int nv = 0;
    int64_t later = 0;
    for (int i = 0; i < n && nv < POOL_MAX_PARTS; i++) {
        voters[nv].name = parts[i].m->rec.name;
        voters[nv].gone = !parts[i].live;
        voters[nv].vote = NULL;
        if (parts[i].m->self) {
            if (p->vote.epoch) voters[nv].vote = &p->vote;
        } else if (pool_doc_job(&parts[i], p->id) &&
                   pool_vote_parse(json_object_get(parts[i].doc, "vote"), &votes[nv]) == 0) {
            voters[nv].vote = &votes[nv];
            if (votes[nv].epoch > later) later = votes[nv].epoch;
        }
        nv++;
    }
    json_t *m = base_members(p);
    const char *names[POOL_MAX_PARTS];
    int nm = 0;
    size_t i;
    json_t *x;
    json_array_foreach(m, i, x) if (nm < POOL_MAX_PARTS && json_is_string(x)) names[nm++] =
        json_string_value(x);
    int64_t epoch = p->vote.epoch ? p->vote.epoch : ce + 1;
    /* A commit another member gossips for this epoch or a later one: the
     * votes that made it may already be gone from their records. */
    pool_peer peers[POOL_MAX_PARTS];
    peers_of(parts, n, peers);
    for (int k = 0; k < n; k++) {
        json_t *c = pool_doc_job(&parts[k], p->id) ? json_object_get(parts[k].doc, "committed") : NULL;
        int64_t e = c ? (int64_t)json_integer_value(json_object_get(c, "e")) : 0;
        const char *h = json_string_value(json_object_get(c, "h"));
        if (!c || e < epoch || !h) continue;
        char why[300];
        /* only what the members' own signed votes made */
        if (pool_commit_verify(c, p->id, base_members(p), base_epoch(p), base_plan(p), peers, n,
                               why, sizeof why) != 0) {
            refuse(d, parts[k].m->rec.name, h, why);
            continue;
        }
        commit(d, e, pool_unhex64(h), json_object_get(c, "m"), c);
        return;
    }
    if (p->vote.epoch) {
        elect_result r;
        elect_decide(epoch, names, nm, voters, nv, &r);
        if (r.outcome == ELECT_COMMITTED) {
            char h[17];
            uint64_t plan = r.winner ? r.winner->plan : r.base_plan;
            int64_t ep = r.winner ? epoch : r.base;
            pool_hex64(plan, h);
            if (r.winner && plan == p->plan && p->layout) {
                commit(d, ep, plan, p->vote_members, p->layout);
            } else {
                json_t *c = committed_from(d, parts, n, ep, h);
                if (!c) return; /* wait until a member that ran the numbers says it */
                commit(d, ep, plan, json_object_get(c, "m"), c);
            }
            /* The vote stays in the record: members that decide later
             * still need to see it. */
            return;
        }
        if (r.outcome == ELECT_FAILED) {
            daemon_log(d, "pool: epoch %lld failed (%d of %d base members voted)", (long long)epoch,
                       r.votes, nm);
            p->failed_view = r.from_later ? 0 : p->vote.view;
            if (r.from_later && r.base > ce) return; /* learn the commit first */
            int64_t next = r.from_later && later > epoch ? later : epoch + 1;
            memset(&p->vote, 0, sizeof p->vote);
            epoch = next;
        } else {
            return; /* open: wait */
        }
    } else if (later > epoch) {
        /* the others are ahead: the epochs between are decided */
        elect_result r;
        elect_decide(epoch, names, nm, voters, nv, &r);
        if (r.outcome == ELECT_COMMITTED && r.from_later && r.base > ce) {
            char h[17];
            pool_hex64(r.base_plan, h);
            json_t *c = committed_from(d, parts, n, r.base, h);
            if (!c) return;
            commit(d, r.base, r.base_plan, json_object_get(c, "m"), c);
            return;
        }
        epoch = later;
    }
    /* vote when the view has been quiet, unless it is the one that just failed */
    if (now - p->view_since_ms < POOL_QUIET_MS) return;
    if (p->failed_view && p->failed_view == p->view && !p->plan) return;
    cast(d, epoch);
}


/* pool_plan.c — the plan election's documents as C types (pool_doc.h):
 * lists of member names, the plan (a layout or a committed section) with
 * its hash, and a vote. Each is read by one function that checks every key
 * and written by one that gives back the same keys. */
#include "pool_doc.h"

#include "node_base.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pool_hex64(uint64_t v, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

int pool_hex64_parse(const char *s, uint64_t *v)
{
    size_t n = s ? strlen(s) : 0;
    *v = 0;
    if (n < 1 || n > 16 || strspn(s, "0123456789abcdef") != n) return -1;
    *v = (uint64_t)strtoull(s, NULL, 16);
    return 0;
}

/* ---- names ---- */

int pool_names_add(pool_names *n, const char *name)
{
    if (!name || strlen(name) >= MESH_NAME_MAX) return -1;
    /* grow in steps of 16 so that a list built name by name stays linear */
    if (n->n % 16 == 0) {
        void *g = realloc(n->name, (size_t)(n->n + 16) * sizeof *n->name);
        if (!g) return -1;
        n->name = g;
    }
    snprintf(n->name[n->n++], MESH_NAME_MAX, "%s", name);
    return 0;
}

void pool_names_free(pool_names *n)
{
    free(n->name);
    n->name = NULL;
    n->n = 0;
}

int pool_names_copy(pool_names *dst, const pool_names *src)
{
    memset(dst, 0, sizeof *dst);
    for (int i = 0; i < src->n; i++)
        if (pool_names_add(dst, src->name[i]) != 0) {
            pool_names_free(dst);
            return -1;
        }
    return 0;
}

bool pool_names_equal(const pool_names *a, const pool_names *b)
{
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->name[i], b->name[i]) != 0) return false;
    return true;
}

bool pool_names_has(const pool_names *n, const char *name)
{
    for (int i = 0; i < n->n; i++)
        if (strcmp(n->name[i], name) == 0) return true;
    return false;
}

int pool_names_from_json(json_t *j, pool_names *out, const char *what, char *err,
                         size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!j || json_is_null(j)) return 0;
    if (!json_is_array(j)) return node_errf(err, errlen, "\"%s\" must be a list of names", what);
    size_t i;
    json_t *x;
    json_array_foreach(j, i, x) {
        const char *s = json_string_value(x);
        if (!s || !node_name_valid(s)) {
            pool_names_free(out);
            return node_errf(err, errlen, "\"%s\" entry %zu is not a node name", what, i);
        }
        if (pool_names_add(out, s) != 0) {
            pool_names_free(out);
            return node_errf(err, errlen, "\"%s\": out of memory", what);
        }
    }
    return 0;
}

static uint64_t sha64(const char *text)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    uint64_t h = 0;
    if (text && EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha256(), NULL) && mdlen >= 8)
        for (int i = 0; i < 8; i++) h = h << 8 | md[i];
    return h ? h : 1;
}

uint64_t pool_names_hash(const pool_names *n)
{
    json_t *a = pool_names_to_json(n);
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    uint64_t h = sha64(text);
    free(text);
    json_decref(a);
    return h;
}

json_t *pool_names_to_json(const pool_names *n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n->n; i++)
        if (json_array_append_new(a, json_string(n->name[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* ---- the plan ---- */

static int stage_from_json(json_t *s, size_t i, pool_stage *st, char *err, size_t errlen)
{
    json_t *name = json_array_get(s, 0), *b = json_array_get(s, 1), *e = json_array_get(s, 2);
    json_t *addr = json_array_get(s, 3), *ns = json_array_get(s, 4);
    memset(st, 0, sizeof *st);
    if (!json_is_array(s) || json_array_size(s) != 5)
        return node_errf(err, errlen, "\"stages\" entry %zu must be [name, first layer, end "
                         "layer, address, ns]", i);
    if (!json_is_string(name) || !node_name_valid(json_string_value(name)))
        return node_errf(err, errlen, "\"stages\" entry %zu: the name is not a node name", i);
    if (!json_is_string(addr) || strlen(json_string_value(addr)) >= GOSSIP_ADDR_MAX)
        return node_errf(err, errlen, "\"stages\" entry %zu: the address must be an overlay "
                         "address", i);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b) || json_integer_value(e) > 1 << 20)
        return node_errf(err, errlen, "\"stages\" entry %zu: the layers must be 0 <= first <= "
                         "end", i);
    if (!json_is_integer(ns) || json_integer_value(ns) < 0)
        return node_errf(err, errlen, "\"stages\" entry %zu: the time must be ns >= 0", i);
    st->layer_begin = (int)json_integer_value(b);
    st->layer_end = (int)json_integer_value(e);
    st->time_ns = (int64_t)json_integer_value(ns);
    st->nholders = 1;
    snprintf(st->holder[0].name, sizeof st->holder[0].name, "%s", json_string_value(name));
    snprintf(st->holder[0].address, sizeof st->holder[0].address, "%s", json_string_value(addr));
    return 0;
}

static int plan_read(json_t *j, bool committed, pool_plan *out, char *err, size_t errlen)
{
    static const char *const layout_keys[] = {"mb", "step_ns", "step_ns_shared", "stages",
                                              "rs", "se", "ho", NULL};
    static const char *const committed_keys[] = {"mb", "step_ns", "step_ns_shared", "stages",
                                                 "rs", "se", "ho", "e", "h", "mh", NULL};
    if (!json_is_object(j)) return node_errf(err, errlen, "not an object");
    const char *bad = pool_json_unknown_key(j, committed ? committed_keys : layout_keys);
    if (bad) return node_errf(err, errlen, "\"%s\" is not a known key", bad);
    json_t *mb = json_object_get(j, "mb"), *step = json_object_get(j, "step_ns");
    json_t *shared = json_object_get(j, "step_ns_shared"), *stages = json_object_get(j, "stages");
    if (!json_is_integer(mb) || json_integer_value(mb) < 1)
        return node_errf(err, errlen, "\"mb\" must be a micro-batch size >= 1");
    if (!json_is_integer(step) || json_integer_value(step) < 0)
        return node_errf(err, errlen, "\"step_ns\" must be ns >= 0");
    if (shared && (!json_is_integer(shared) || json_integer_value(shared) < 0))
        return node_errf(err, errlen, "\"step_ns_shared\" must be ns >= 0");
    if (!json_is_array(stages) || json_array_size(stages) < 1 ||
        json_array_size(stages) > POOL_MAX_STAGES)
        return node_errf(err, errlen, "\"stages\" must be a list of 1 to %d stages",
                         POOL_MAX_STAGES);
    out->mb = (int64_t)json_integer_value(mb);
    out->step_ns = (int64_t)json_integer_value(step);
    out->has_shared = shared != NULL;
    out->step_ns_shared = shared ? (int64_t)json_integer_value(shared) : 0;
    json_t *rs = json_object_get(j, "rs"), *se = json_object_get(j, "se");
    if (rs && (!json_is_integer(rs) || json_integer_value(rs) < 1))
        return node_errf(err, errlen, "\"rs\" must be a step >= 1 (absent: 0)");
    if (se && (!json_is_integer(se) || json_integer_value(se) < 1))
        return node_errf(err, errlen, "\"se\" must be a number of steps >= 1 (absent: none)");
    out->resume_step = rs ? (int64_t)json_integer_value(rs) : 0;
    out->snapshot_every = se ? (int64_t)json_integer_value(se) : 0;
    json_t *ho = json_object_get(j, "ho");
    if (ho && !json_is_true(ho))
        return node_errf(err, errlen, "\"ho\" must be true (absent: not a switch)");
    if (ho && rs)
        return node_errf(err, errlen, "\"ho\" and \"rs\" both say where the stages start; a "
                         "plan has one");
    out->handover = ho != NULL;
    size_t i;
    json_t *s;
    json_array_foreach(stages, i, s) {
        if (stage_from_json(s, i, &out->stage[i], err, errlen) != 0) return -1;
        out->nstages++;
    }
    if (!committed) return 0;
    json_t *e = json_object_get(j, "e");
    const char *h = json_string_value(json_object_get(j, "h"));
    if (!json_is_integer(e) || json_integer_value(e) < 1)
        return node_errf(err, errlen, "\"e\" must be an epoch >= 1");
    if (!h || strlen(h) != 16 || pool_hex64_parse(h, &out->hash) != 0)
        return node_errf(err, errlen, "\"h\" must be 16 lowercase hex digits");
    out->epoch = (int64_t)json_integer_value(e);
    const char *mh = json_string_value(json_object_get(j, "mh"));
    if (!mh || strlen(mh) != 16 || pool_hex64_parse(mh, &out->members_hash) != 0)
        return node_errf(err, errlen, "\"mh\" must be 16 lowercase hex digits");
    return 0;
}

int pool_plan_from_json(json_t *j, bool committed, pool_plan *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (plan_read(j, committed, out, err, errlen) == 0) return 0;
    pool_plan_free(out);
    return -1;
}

/* The layout part: what the plan hash covers. */
static json_t *layout_json(const pool_plan *p)
{
    json_t *stages = json_array();
    for (int i = 0; stages && i < p->nstages; i++) {
        const pool_stage *s = &p->stage[i];
        if (s->nholders != 1) {   /* no wire form yet for a stage held by several */
            json_decref(stages);
            return NULL;
        }
        json_array_append_new(stages, json_pack("[s,i,i,s,I]", s->holder[0].name, s->layer_begin,
                                                s->layer_end, s->holder[0].address,
                                                (json_int_t)s->time_ns));
    }
    json_t *l = json_pack("{s:I,s:I,s:o}", "mb", (json_int_t)p->mb, "step_ns",
                          (json_int_t)p->step_ns, "stages", stages);
    if (l && p->has_shared)
        json_object_set_new(l, "step_ns_shared", json_integer((json_int_t)p->step_ns_shared));
    if (l && p->resume_step > 0)
        json_object_set_new(l, "rs", json_integer((json_int_t)p->resume_step));
    if (l && p->snapshot_every > 0)
        json_object_set_new(l, "se", json_integer((json_int_t)p->snapshot_every));
    if (l && p->handover) json_object_set_new(l, "ho", json_true());
    return l;
}

json_t *pool_plan_to_json(const pool_plan *p)
{
    json_t *l = layout_json(p);
    if (!l || p->epoch <= 0) return l;
    char h[17], mh[17];
    pool_hex64(p->hash, h);
    pool_hex64(p->members_hash, mh);
    json_object_set_new(l, "e", json_integer((json_int_t)p->epoch));
    json_object_set_new(l, "h", json_string(h));
    json_object_set_new(l, "mh", json_string(mh));
    return l;
}

uint64_t pool_plan_hash(const pool_plan *p)
{
    json_t *l = layout_json(p);
    char *text = l ? json_dumps(l, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(l);
    uint64_t h = sha64(text);
    free(text);
    return h;
}

int pool_plan_copy(pool_plan *dst, const pool_plan *src)
{
    *dst = *src;
    return pool_names_copy(&dst->members, &src->members);
}

void pool_plan_free(pool_plan *p)
{
    pool_names_free(&p->members);
    memset(p, 0, sizeof *p);
}

int pool_plan_stage_of(const pool_plan *p, const char *member)
{
    for (int s = 0; member && s < p->nstages; s++)
        for (int k = 0; k < p->stage[s].nholders; k++)
            if (strcmp(p->stage[s].holder[k].name, member) == 0) return s;
    return -1;
}

/* ---- a vote ---- */

static int vote_read(json_t *j, pool_vote *out, char *err, size_t errlen)
{
    static const char *const keys[] = {"e", "b", "bp", "v", "p", "n", "mh", "sw", NULL};
    elect_vote *v = &out->v;
    if (!json_is_object(j)) return node_errf(err, errlen, "\"vote\" must be an object");
    const char *bad = pool_json_unknown_key(j, keys);
    if (bad) return node_errf(err, errlen, "\"vote\".\"%s\" is not a known key", bad);
    json_t *e = json_object_get(j, "e"), *b = json_object_get(j, "b");
    if (!json_is_integer(e) || json_integer_value(e) < 1)
        return node_errf(err, errlen, "\"vote\".\"e\" must be an epoch >= 1");
    if (!json_is_integer(b) || json_integer_value(b) < 0 ||
        json_integer_value(b) >= json_integer_value(e))
        return node_errf(err, errlen, "\"vote\".\"b\" must be an epoch before \"e\"");
    v->epoch = (int64_t)json_integer_value(e);
    v->base = (int64_t)json_integer_value(b);
    static const char *const hk[] = {"bp", "v", "p"};
    uint64_t *hv[] = {&v->base_plan, &v->view, &v->plan};
    for (int k = 0; k < 3; k++)
        if (pool_hex64_parse(json_string_value(json_object_get(j, hk[k])), hv[k]) != 0)
            return node_errf(err, errlen, "\"vote\".\"%s\" must be 1 to 16 hex digits", hk[k]);
    json_t *n = json_object_get(j, "n");
    if (!json_is_array(n) || json_array_size(n) > ELECT_MAX_NAMED)
        return node_errf(err, errlen, "\"vote\".\"n\" must be a list of at most %d names",
                         ELECT_MAX_NAMED);
    size_t i;
    json_t *x;
    json_array_foreach(n, i, x) {
        const char *s = json_string_value(x);
        /* never cut: a cut name is another member's */
        if (!s || strlen(s) >= PLAN_NAME_MAX || !node_name_valid(s))
            return node_errf(err, errlen, "\"vote\".\"n\" entry %zu is not a node name", i);
        snprintf(v->named[v->nnamed++], PLAN_NAME_MAX, "%s", s);
    }
    const char *mh = json_string_value(json_object_get(j, "mh"));
    if (!mh || strlen(mh) != 16 || pool_hex64_parse(mh, &out->members_hash) != 0)
        return node_errf(err, errlen, "\"vote\".\"mh\" must be 16 lowercase hex digits");
    json_t *sw = json_object_get(j, "sw");
    if (sw) {
        const char *w = json_string_value(sw);
        for (int k = POOL_SW_JOINED; w && k <= POOL_SW_SLOWED; k++)
            if (strcmp(w, pool_switch_why_name((pool_switch_why)k)) == 0)
                out->sw = (pool_switch_why)k;
        if (out->sw == POOL_SW_NONE)
            return node_errf(err, errlen, "\"vote\".\"sw\" must be joined, left or slowed");
    }
    return 0;
}

const char *pool_switch_why_name(pool_switch_why w)
{
    static const char *const names[] = {"", "joined", "left", "slowed"};
    return w >= POOL_SW_NONE && w <= POOL_SW_SLOWED ? names[w] : "";
}

int pool_vote_from_json(json_t *j, pool_vote *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (vote_read(j, out, err, errlen) == 0) return 0;
    pool_vote_free(out);
    return -1;
}

json_t *pool_vote_to_json(const pool_vote *v)
{
    char b[17], view[17], plan[17], mh[17];
    pool_hex64(v->v.base_plan, b);
    pool_hex64(v->v.view, view);
    pool_hex64(v->v.plan, plan);
    pool_hex64(v->members_hash, mh);
    json_t *named = json_array();
    for (int i = 0; named && i < v->v.nnamed; i++)
        json_array_append_new(named, json_string(v->v.named[i]));
    json_t *j = json_pack("{s:I,s:I,s:s,s:s,s:s,s:o,s:s}", "e", (json_int_t)v->v.epoch, "b",
                          (json_int_t)v->v.base, "bp", b, "v", view, "p", plan, "n", named, "mh",
                          mh);
    if (j && v->sw != POOL_SW_NONE)
        json_object_set_new(j, "sw", json_string(pool_switch_why_name(v->sw)));
    return j;
}

int pool_vote_copy(pool_vote *dst, const pool_vote *src)
{
    dst->v = src->v;
    dst->sw = src->sw;
    dst->members_hash = src->members_hash;
    return pool_names_copy(&dst->members, &src->members);
}

void pool_vote_free(pool_vote *v)
{
    pool_names_free(&v->members);
    memset(v, 0, sizeof *v);
}

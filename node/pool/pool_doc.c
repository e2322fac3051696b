/* pool_doc.c — a member's job document as a C type (pool_doc.h): its
 * profile, links and run, the job's reference and blob, and the document
 * itself (the `job` text of a member record). One reader and one writer
 * each (what a node saves and shows of them: pool_status.c). */
#include "pool_doc.h"

#include "node_base.h"
#include "runtime.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *pool_json_unknown_key(json_t *obj, const char *const *known)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        const char *const *k = known;
        while (*k && strcmp(*k, key) != 0) k++;
        if (!*k) return key;
    }
    return NULL;
}

/* A string of at most len - 1 bytes into out ("" when absent). */
int pool_json_text(json_t *obj, const char *key, char *out, size_t len, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    out[0] = 0;
    if (!v) return 0;
    if (!json_is_string(v) || strlen(json_string_value(v)) >= len)
        return node_errf(err, errlen, "\"%s\" must be a text of at most %zu bytes", key, len - 1);
    snprintf(out, len, "%s", json_string_value(v));
    return 0;
}

/* ---- profile ---- */

static const char *const unit_keys[3] = {"f", "k", "o"};

static int profile_read(json_t *j, pool_profile *out, char *err, size_t errlen)
{
    static const char *const keys[] = {"b", "f", "k", "o", "mem", "s", "d", NULL};
    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) return node_errf(err, errlen, "\"prof\" must be an object");
    const char *bad = pool_json_unknown_key(j, keys);
    if (bad) return node_errf(err, errlen, "\"prof\".\"%s\" is not a known key", bad);
    json_t *b = json_object_get(j, "b"), *mem = json_object_get(j, "mem");
    json_t *s = json_object_get(j, "s"), *d = json_object_get(j, "d");
    if (!json_is_integer(b) || json_integer_value(b) < 1)
        return node_errf(err, errlen, "\"prof\".\"b\" must be a micro-batch size >= 1");
    if (!json_is_integer(mem) || json_integer_value(mem) < 0)
        return node_errf(err, errlen, "\"prof\".\"mem\" must be bytes >= 0");
    if (!json_is_integer(s) || json_integer_value(s) < 0 || json_integer_value(s) > 1 << 16)
        return node_errf(err, errlen, "\"prof\".\"s\" must be scratch slots, 0 to 65536");
    if (!json_is_string(d) || strlen(json_string_value(d)) >= sizeof out->device)
        return node_errf(err, errlen, "\"prof\".\"d\" must be a device name of at most %zu "
                         "bytes", sizeof out->device - 1);
    int64_t *units[3] = {out->prof.fwd_ns, out->prof.bwd_ns, out->prof.opt_ns};
    for (int k = 0; k < 3; k++) {
        json_t *a = json_object_get(j, unit_keys[k]);
        if (!json_is_array(a) || json_array_size(a) != COST_UNITS)
            return node_errf(err, errlen, "\"prof\".\"%s\" must be %d times in ns", unit_keys[k],
                             COST_UNITS);
        for (int u = 0; u < COST_UNITS; u++) {
            json_t *x = json_array_get(a, (size_t)u);
            if (!json_is_integer(x) || json_integer_value(x) < 0)
                return node_errf(err, errlen, "\"prof\".\"%s\" entry %d must be ns >= 0",
                                 unit_keys[k], u);
            units[k][u] = (int64_t)json_integer_value(x);
        }
    }
    out->prof.micro_batch = (int64_t)json_integer_value(b);
    out->prof.memory_bytes = (int64_t)json_integer_value(mem);
    out->prof.scratch_slots = (int)json_integer_value(s);
    snprintf(out->device, sizeof out->device, "%s", json_string_value(d));
    return 0;
}

static json_t *profile_json(const pool_profile *p)
{
    const cost_profile *c = &p->prof;
    return json_pack("{s:I,s:[I,I,I],s:[I,I,I],s:[I,I,I],s:I,s:i,s:s}", "b",
                     (json_int_t)c->micro_batch, "f", (json_int_t)c->fwd_ns[0],
                     (json_int_t)c->fwd_ns[1], (json_int_t)c->fwd_ns[2], "k",
                     (json_int_t)c->bwd_ns[0], (json_int_t)c->bwd_ns[1], (json_int_t)c->bwd_ns[2],
                     "o", (json_int_t)c->opt_ns[0], (json_int_t)c->opt_ns[1],
                     (json_int_t)c->opt_ns[2], "mem", (json_int_t)c->memory_bytes, "s",
                     c->scratch_slots, "d", p->device);
}

int pool_profile_from_file(const char *path, const cost_shape *shape, pool_profile *out,
                           char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_t *pj = node_load_json(path, err, errlen);
    if (!pj) return -1;
    int rc = fleet_profile_parse(pj, shape, &out->prof, path, err, errlen);
    const char *dev = json_string_value(json_object_get(pj, "device_name"));
    if (rc == 0 && (!dev || strlen(dev) >= sizeof out->device))
        rc = node_errf(err, errlen, "%s: \"device_name\" must be a device name", path);
    if (rc == 0) snprintf(out->device, sizeof out->device, "%s", dev);
    json_decref(pj);
    return rc;
}

/* ---- links ---- */

int pool_links_add_via(pool_links *l, const char *name, int64_t latency_ns, int64_t bandwidth,
                       const char *via)
{
    if (!name || strlen(name) >= MESH_NAME_MAX || (via && strlen(via) >= MESH_NAME_MAX))
        return -1;
    if (l->n % 16 == 0) {
        pool_link *g = realloc(l->l, (size_t)(l->n + 16) * sizeof *g);
        if (!g) return -1;
        l->l = g;
    }
    pool_link *k = &l->l[l->n++];
    snprintf(k->name, sizeof k->name, "%s", name);
    k->latency_ns = latency_ns;
    k->bandwidth = bandwidth;
    snprintf(k->via, sizeof k->via, "%s", via ? via : "");
    return 0;
}

int pool_links_add(pool_links *l, const char *name, int64_t latency_ns, int64_t bandwidth)
{
    return pool_links_add_via(l, name, latency_ns, bandwidth, NULL);
}

void pool_links_free(pool_links *l)
{
    free(l->l);
    l->l = NULL;
    l->n = 0;
}

int pool_links_copy(pool_links *dst, const pool_links *src)
{
    memset(dst, 0, sizeof *dst);
    for (int i = 0; i < src->n; i++)
        if (pool_links_add_via(dst, src->l[i].name, src->l[i].latency_ns, src->l[i].bandwidth,
                               src->l[i].via)) {
            pool_links_free(dst);
            return -1;
        }
    return 0;
}

const pool_link *pool_links_find(const pool_links *l, const char *name)
{
    for (int i = 0; name && i < l->n; i++)
        if (strcmp(l->l[i].name, name) == 0) return &l->l[i];
    return NULL;
}

int pool_links_from_json(json_t *j, pool_links *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) return node_errf(err, errlen, "\"links\" must be an object");
    const char *name;
    json_t *l;
    json_object_foreach(j, name, l) {
        json_t *lat = json_array_get(l, 0), *bw = json_array_get(l, 1), *via = json_array_get(l, 2);
        size_t n = json_array_size(l);
        if (!node_name_valid(name) || !json_is_array(l) || n < 2 || n > 3 ||
            !json_is_integer(lat) || !json_is_integer(bw) || json_integer_value(lat) < 0 ||
            json_integer_value(bw) < 0) {
            pool_links_free(out);
            return node_errf(err, errlen, "\"links\".\"%.63s\" must be [latency_ns, "
                             "bytes_per_s] or [latency_ns, bytes_per_s, \"RELAY\"] of a node "
                             "name", name);
        }
        const char *v = via ? json_string_value(via) : NULL;
        if (via && (!v || strlen(v) >= MESH_NAME_MAX || !node_name_valid(v) ||
                    strcmp(v, name) == 0)) {
            pool_links_free(out);
            return node_errf(err, errlen, "\"links\".\"%.63s\": its third element (the "
                             "relay) must be the name of another node, at most %d bytes",
                             name, MESH_NAME_MAX - 1);
        }
        if (pool_links_add_via(out, name, (int64_t)json_integer_value(lat),
                               (int64_t)json_integer_value(bw), v) != 0) {
            pool_links_free(out);
            return node_errf(err, errlen, "\"links\": out of memory");
        }
    }
    return 0;
}

json_t *pool_links_to_json(const pool_links *l)
{
    json_t *o = json_object();
    for (int i = 0; o && i < l->n; i++) {
        const pool_link *k = &l->l[i];
        json_object_set_new(o, k->name,
                            k->via[0] ? json_pack("[I,I,s]", (json_int_t)k->latency_ns,
                                                  (json_int_t)k->bandwidth, k->via)
                                      : json_pack("[I,I]", (json_int_t)k->latency_ns,
                                                  (json_int_t)k->bandwidth));
    }
    return o;
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[(n - 1) / 2];
}

/* How far x is from m, as a factor in thousandths (>= 1000). */
static int64_t factor(int64_t x, int64_t m)
{
    if (x < 1) x = 1;
    if (m < 1) m = 1;
    return x >= m ? cost_muldiv(x, 1000, m) : cost_muldiv(m, 1000, x);
}

typedef struct {
    int64_t score;
    int i;
} link_score;

static const pool_links *score_links;

static int by_score(const void *a, const void *b)
{
    const link_score *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return strcmp(score_links->l[x->i].name, score_links->l[y->i].name);
}

int pool_links_summary(const pool_links *all, pool_links *exact, pool_link *typical)
{
    memset(exact, 0, sizeof *exact);
    memset(typical, 0, sizeof *typical);
    if (all->n == 0) return 0;
    int64_t *v = malloc((size_t)all->n * sizeof *v);
    link_score *sc = malloc((size_t)all->n * sizeof *sc);
    int rc = -1, k = 0;
    if (!v || !sc) goto out;
    /* the medians of the links measured (a relayed pair whose probe failed
     * is listed with bandwidth 0) */
    int nm = 0;
    for (int i = 0; i < all->n; i++)
        if (all->l[i].bandwidth > 0) v[nm++] = all->l[i].latency_ns;
    typical->latency_ns = nm ? median(v, nm) : 0;
    nm = 0;
    for (int i = 0; i < all->n; i++)
        if (all->l[i].bandwidth > 0) v[nm++] = all->l[i].bandwidth;
    typical->bandwidth = nm ? median(v, nm) : 0;
    for (int i = 0; i < all->n; i++) {
        int64_t f = factor(all->l[i].latency_ns, typical->latency_ns);
        int64_t g = factor(all->l[i].bandwidth, typical->bandwidth);
        /* every link when they fit; else the relayed ones (the planner
         * cannot guess them from the typical link), then those off by more
         * than a factor of 2 */
        if (all->l[i].via[0]) sc[k++] = (link_score){INT64_MAX, i};
        else if (all->n <= POOL_LINKS_MAX || f > 2000 || g > 2000)
            sc[k++] = (link_score){f > g ? f : g, i};
    }
    score_links = all;
    qsort(sc, (size_t)k, sizeof *sc, by_score);
    if (k > POOL_LINKS_MAX) k = POOL_LINKS_MAX;
    rc = 0;
    for (int i = 0; i < k && rc == 0; i++)
        rc = pool_links_add_via(exact, all->l[sc[i].i].name, all->l[sc[i].i].latency_ns,
                                all->l[sc[i].i].bandwidth, all->l[sc[i].i].via);
out:
    free(v);
    free(sc);
    if (rc) pool_links_free(exact);
    return rc;
}

/* ---- the job: a record's reference and the blob ---- */

bool pool_job_ref_later(const pool_job_ref *a, const pool_job_ref *b, int64_t now_s)
{
    if (!a || !a->id[0] || a->at > now_s + POOL_JOB_SKEW_S) return false;
    if (!b || !b->id[0]) return true;
    if (a->at != b->at) return a->at > b->at;
    return strcmp(a->id, b->id) > 0;
}

int pool_job_blob_from_json(json_t *j, pool_job_blob *out, char *err, size_t errlen)
{
    static const char *const keys[] = {"bundle", "pool", NULL};
    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) return node_errf(err, errlen, "job blob: not a JSON object");
    const char *bad = pool_json_unknown_key(j, keys);
    if (bad) return node_errf(err, errlen, "job blob: \"%s\" is not a known key", bad);
    if (!json_is_array(json_object_get(j, "pool")))
        return node_errf(err, errlen, "job blob: \"pool\" must be a list of names");
    if (pool_bundle_from_json(json_object_get(j, "bundle"), &out->bundle, err, errlen) != 0)
        return -1;
    if (pool_names_from_json(json_object_get(j, "pool"), &out->pool, "pool", err, errlen) != 0) {
        pool_bundle_free(&out->bundle);
        return -1;
    }
    return 0;
}

json_t *pool_job_blob_to_json(const pool_job_blob *b)
{
    return json_pack("{s:o,s:o}", "bundle", pool_bundle_to_json(&b->bundle), "pool",
                     pool_names_to_json(&b->pool));
}

char *pool_job_blob_text(const pool_job_blob *b, char hash[65])
{
    json_t *j = pool_job_blob_to_json(b);
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!text || !EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha256(), NULL) || mdlen != 32) {
        free(text);
        return NULL;
    }
    for (int i = 0; i < 32; i++) snprintf(hash + 2 * i, 3, "%02x", md[i]);
    return text;
}

void pool_job_blob_free(pool_job_blob *b)
{
    pool_bundle_free(&b->bundle);
    pool_names_free(&b->pool);
}

void pool_job_blob_ref(const pool_job_blob *b, const char hash[65], pool_job_ref *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", b->bundle.id);
    snprintf(out->by, sizeof out->by, "%s", b->bundle.submitted_by);
    out->at = b->bundle.submitted_at;
    snprintf(out->blob, sizeof out->blob, "%s", hash);
}

/* ---- run ---- */

static const char *const run_states[] = {"", "running", "done", "failed", "stopped",
                                         "recovering", "handed"};

const char *pool_run_state_name(pool_run_state s)
{
    return s >= POOL_RUN_NONE && s <= POOL_RUN_HANDED ? run_states[s] : "";
}

void pool_run_init(pool_run *r)
{
    memset(r, 0, sizeof *r);
    r->gathered = -1;
}

static int number_at(json_t *j, const char *key, bool integer, bool *has, double *d, int64_t *i,
                     char *err, size_t errlen)
{
    json_t *v = json_object_get(j, key);
    *has = v != NULL;
    if (!v) return 0;
    if (integer ? !json_is_integer(v) : !json_is_number(v))
        return node_errf(err, errlen, "\"run\".\"%s\" must be %s", key,
                         integer ? "an integer" : "a number");
    if (integer) *i = (int64_t)json_integer_value(v);
    else *d = json_number_value(v);
    return 0;
}

int pool_run_from_json(json_t *j, pool_run *out, char *err, size_t errlen)
{
    static const char *const keys[] = {"state", "step", "steps", "loss", "tps", "step_ms",
                                       "error", "gathered", NULL};
    pool_run_init(out);
    if (!json_is_object(j)) return node_errf(err, errlen, "\"run\" must be an object");
    const char *bad = pool_json_unknown_key(j, keys);
    if (bad) return node_errf(err, errlen, "\"run\".\"%s\" is not a known key", bad);
    json_t *st = json_object_get(j, "state"), *g = json_object_get(j, "gathered");
    if (st) {
        const char *s = json_string_value(st);
        for (int k = POOL_RUN_RUNNING; s && k <= POOL_RUN_HANDED; k++)
            if (strcmp(s, run_states[k]) == 0) out->state = (pool_run_state)k;
        if (out->state == POOL_RUN_NONE)
            return node_errf(err, errlen, "\"run\".\"state\" must be running, done, failed, "
                             "stopped, recovering or handed");
    }
    if (g && !json_is_boolean(g))
        return node_errf(err, errlen, "\"run\".\"gathered\" must be true or false");
    out->gathered = g ? json_is_true(g) : -1;
    double unused_d;
    int64_t unused_i;
    if (number_at(j, "step", true, &out->has_step, &unused_d, &out->step, err, errlen) ||
        number_at(j, "steps", true, &out->has_steps, &unused_d, &out->steps, err, errlen) ||
        number_at(j, "loss", false, &out->has_loss, &out->loss, &unused_i, err, errlen) ||
        number_at(j, "tps", false, &out->has_tps, &out->tps, &unused_i, err, errlen) ||
        number_at(j, "step_ms", false, &out->has_step_ms, &out->step_ms, &unused_i, err, errlen))
        return -1;
    json_t *e = json_object_get(j, "error");
    if (e && (!json_is_string(e) || strlen(json_string_value(e)) >= sizeof out->error))
        return node_errf(err, errlen, "\"run\".\"error\" must be a text of at most %zu bytes",
                         sizeof out->error - 1);
    if (e) snprintf(out->error, sizeof out->error, "%s", json_string_value(e));
    return 0;
}

json_t *pool_run_to_json(const pool_run *r)
{
    json_t *o = json_object();
    if (!o) return NULL;
    if (r->state != POOL_RUN_NONE)
        json_object_set_new(o, "state", json_string(pool_run_state_name(r->state)));
    if (r->error[0]) json_object_set_new(o, "error", json_string(r->error));
    if (r->has_steps) json_object_set_new(o, "steps", json_integer((json_int_t)r->steps));
    if (r->has_step) json_object_set_new(o, "step", json_integer((json_int_t)r->step));
    if (r->has_loss) json_object_set_new(o, "loss", json_real(r->loss));
    if (r->has_tps) json_object_set_new(o, "tps", json_real(r->tps));
    if (r->has_step_ms) json_object_set_new(o, "step_ms", json_real(r->step_ms));
    if (r->gathered >= 0) json_object_set_new(o, "gathered", json_boolean(r->gathered));
    return o;
}

/* ---- the document ---- */

void pool_doc_init(pool_doc *d)
{
    memset(d, 0, sizeof *d);
    pool_run_init(&d->run);
}

void pool_doc_free(pool_doc *d)
{
    if (d->bundle) {
        pool_bundle_free(d->bundle);
        free(d->bundle);
    }
    pool_names_free(&d->pool);
    pool_lacks_free(&d->lacks);
    pool_links_free(&d->links);
    pool_vote_free(&d->vote);
    pool_plan_free(&d->committed);
    pool_doc_init(d);
}

static int bool_at(json_t *j, const char *key, unsigned flag, bool *out, unsigned *has,
                   char *err, size_t errlen)
{
    json_t *v = json_object_get(j, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return node_errf(err, errlen, "\"%s\" must be true or false", key);
    *out = json_is_true(v);
    *has |= flag;
    return 0;
}

static int count_at(json_t *j, const char *key, unsigned flag, int64_t *out, unsigned *has,
                    char *err, size_t errlen)
{
    json_t *v = json_object_get(j, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 20)
        return node_errf(err, errlen, "\"%s\" must be a count from 1 to %d", key, 1 << 20);
    *out = (int64_t)json_integer_value(v);
    *has |= flag;
    return 0;
}

static int lacks_read(json_t *j, pool_lacks *out, char *err, size_t errlen)
{
    static const char *const keys[] = {"role", "path", "local", "why", NULL};
    if (!json_is_array(j) || json_array_size(j) > POOL_LACKS_MAX)
        return node_errf(err, errlen, "\"lack\" must be a list of at most %d", POOL_LACKS_MAX);
    size_t i;
    json_t *l;
    json_array_foreach(j, i, l) {
        const char *role = json_string_value(json_object_get(l, "role"));
        const char *path = json_string_value(json_object_get(l, "path"));
        const char *local = json_string_value(json_object_get(l, "local"));
        const char *why = json_string_value(json_object_get(l, "why"));
        if (!json_is_object(l) || pool_json_unknown_key(l, keys) || !role || !path || !local ||
            !why || (strcmp(role, "tokenizer") && strcmp(role, "weights") && strcmp(role, "data") &&
                      strcmp(role, "base")))
            return node_errf(err, errlen, "\"lack\" entry %zu must be {role, path, local, why}",
                             i);
        if (pool_lacks_add(out, role, path, local, why) != 0)
            return node_errf(err, errlen, "\"lack\": out of memory");
    }
    return 0;
}

static int ref_read(json_t *j, pool_job_ref *r, char *err, size_t errlen)
{
    const char *id = json_string_value(json_object_get(j, "id"));
    const char *by = json_string_value(json_object_get(j, "by"));
    const char *jb = json_string_value(json_object_get(j, "jb"));
    json_t *at = json_object_get(j, "at");
    if (!id || strlen(id) != POOL_JOB_ID_LEN || strspn(id, "0123456789abcdef") != POOL_JOB_ID_LEN)
        return node_errf(err, errlen, "\"id\" must be %d lowercase hex digits", POOL_JOB_ID_LEN);
    if (!by || !node_name_valid(by))
        return node_errf(err, errlen, "\"by\" must be the submitter's node name");
    if (!json_is_integer(at) || json_integer_value(at) < 0)
        return node_errf(err, errlen, "\"at\" must be unix seconds");
    if (!jb || strlen(jb) != 64 || strspn(jb, "0123456789abcdef") != 64)
        return node_errf(err, errlen, "\"jb\" must be 64 lowercase hex digits");
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->by, sizeof r->by, "%s", by);
    r->at = (int64_t)json_integer_value(at);
    snprintf(r->blob, sizeof r->blob, "%s", jb);
    return 0;
}

static int link_read(json_t *l, pool_link *out, char *err, size_t errlen)
{
    json_t *lat = json_array_get(l, 0), *bw = json_array_get(l, 1);
    if (!json_is_array(l) || json_array_size(l) != 2 || !json_is_integer(lat) ||
        !json_is_integer(bw) || json_integer_value(lat) < 0 || json_integer_value(bw) < 0)
        return node_errf(err, errlen, "\"link\" must be [latency_ns, bytes_per_s]");
    out->latency_ns = (int64_t)json_integer_value(lat);
    out->bandwidth = (int64_t)json_integer_value(bw);
    return 0;
}

static int snaps_read(json_t *j, pool_snaps *out, char *err, size_t errlen)
{
    if (!json_is_array(j) || json_array_size(j) < 1 || json_array_size(j) > POOL_SNAPS_MAX)
        return node_errf(err, errlen, "\"sn\" must be a list of 1 to %d snapshots",
                         POOL_SNAPS_MAX);
    size_t i;
    json_t *v;
    json_array_foreach(j, i, v) {
        json_t *b = json_array_get(v, 0), *e = json_array_get(v, 1), *st = json_array_get(v, 2);
        if (!json_is_array(v) || json_array_size(v) != 3 || !json_is_integer(b) ||
            !json_is_integer(e) || !json_is_integer(st) || json_integer_value(b) < 0 ||
            json_integer_value(e) < json_integer_value(b) || json_integer_value(e) > 1 << 20 ||
            json_integer_value(st) < 1)
            return node_errf(err, errlen, "\"sn\"[%zu] must be [first layer, end layer, step "
                             ">= 1] with 0 <= first <= end", i);
        out->s[out->n++] = (pool_snap){(int)json_integer_value(b), (int)json_integer_value(e),
                                       (int64_t)json_integer_value(st)};
    }
    return 0;
}

json_t *pool_snaps_to_json(const pool_snaps *s)
{
    json_t *a = json_array();
    for (int i = 0; a && i < s->n; i++)
        json_array_append_new(a, json_pack("[i,i,I]", s->s[i].layer_begin, s->s[i].layer_end,
                                           (json_int_t)s->s[i].step));
    return a;
}

static int rec_read(json_t *j, pool_recovery *r, char *err, size_t errlen)
{
    static const char *const keys[] = {"lost", "at", "from", "e", "ms", "n", NULL};
    if (!json_is_object(j)) return node_errf(err, errlen, "\"rec\" must be an object");
    const char *bad = pool_json_unknown_key(j, keys);
    if (bad) return node_errf(err, errlen, "\"rec\".\"%s\" is not a known key", bad);
    if (pool_json_text(j, "lost", r->lost, sizeof r->lost, err, errlen)) return -1;
    if (r->lost[0] && !node_name_valid(r->lost))
        return node_errf(err, errlen, "\"rec\".\"lost\" must be a member name");
    const char *k[] = {"at", "from", "e", "n"};
    int64_t *dst[] = {&r->at, &r->from, &r->epoch, &r->n};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(j, k[i]);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return node_errf(err, errlen, "\"rec\".\"%s\" must be an integer >= 0", k[i]);
        *dst[i] = (int64_t)json_integer_value(v);
    }
    json_t *ms = json_object_get(j, "ms");
    if (ms && (!json_is_integer(ms) || json_integer_value(ms) < 0))
        return node_errf(err, errlen, "\"rec\".\"ms\" must be milliseconds >= 0");
    r->ms = ms ? (int64_t)json_integer_value(ms) : -1;
    return 0;
}

static json_t *rec_json(const pool_recovery *r)
{
    json_t *o = json_pack("{s:s,s:I,s:I,s:I,s:I}", "lost", r->lost, "at", (json_int_t)r->at,
                          "from", (json_int_t)r->from, "e", (json_int_t)r->epoch, "n",
                          (json_int_t)r->n);
    if (o && r->ms >= 0) json_object_set_new(o, "ms", json_integer((json_int_t)r->ms));
    return o;
}

static int swr_read(json_t *j, pool_switch_rec *r, char *err, size_t errlen)
{
    static const char *const keys[] = {"e", "from", "why", "mb", "pred", "old", "ms", "n", NULL};
    if (!json_is_object(j)) return node_errf(err, errlen, "\"swr\" must be an object");
    const char *bad = pool_json_unknown_key(j, keys);
    if (bad) return node_errf(err, errlen, "\"swr\".\"%s\" is not a known key", bad);
    const char *k[] = {"e", "from", "n"};
    int64_t *dst[] = {&r->epoch, &r->from, &r->n};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(j, k[i]);
        if (!json_is_integer(v) || json_integer_value(v) < (i == 1 ? 0 : 1))
            return node_errf(err, errlen, "\"swr\".\"%s\" must be an integer >= %d", k[i],
                             i == 1 ? 0 : 1);
        *dst[i] = (int64_t)json_integer_value(v);
    }
    const char *w = json_string_value(json_object_get(j, "why"));
    r->why = POOL_SW_NONE;
    for (int x = POOL_SW_JOINED; w && x <= POOL_SW_SLOWED; x++)
        if (strcmp(w, pool_switch_why_name((pool_switch_why)x)) == 0) r->why = (pool_switch_why)x;
    if (r->why == POOL_SW_NONE)
        return node_errf(err, errlen, "\"swr\".\"why\" must be joined, left or slowed");
    const char *f[] = {"mb", "pred", "old"};
    double *fd[] = {&r->mb, &r->pred_ms, &r->old_ms};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(j, f[i]);
        if (!json_is_number(v) || !(json_number_value(v) >= 0) || json_number_value(v) > 1e15)
            return node_errf(err, errlen, "\"swr\".\"%s\" must be a number >= 0", f[i]);
        *fd[i] = json_number_value(v);
    }
    json_t *ms = json_object_get(j, "ms");
    if (ms && (!json_is_integer(ms) || json_integer_value(ms) < 0))
        return node_errf(err, errlen, "\"swr\".\"ms\" must be milliseconds >= 0");
    r->ms = ms ? (int64_t)json_integer_value(ms) : -1;
    return 0;
}

static json_t *swr_json(const pool_switch_rec *r)
{
    json_t *o = json_pack("{s:I,s:I,s:s,s:f,s:f,s:f,s:I}", "e", (json_int_t)r->epoch, "from",
                          (json_int_t)r->from, "why", pool_switch_why_name(r->why), "mb", r->mb,
                          "pred", r->pred_ms, "old", r->old_ms, "n", (json_int_t)r->n);
    if (o && r->ms >= 0) json_object_set_new(o, "ms", json_integer((json_int_t)r->ms));
    return o;
}

static int doc_read(json_t *j, pool_doc *d, char *err, size_t errlen)
{
    static const char *const keys[] = {"v", "id", "by", "at", "jb", "stop", "compute", "host",
                                       "cores", "threads", "first", "any", "lack", "lack_more",
                                       "error", "prof_error", "prof", "links", "link", "ready",
                                       "vote", "why", "committed", "run", "sn", "rec", "swr",
                                       NULL};
    if (!json_is_object(j)) return node_errf(err, errlen, "not a JSON object");
    json_t *ver = json_object_get(j, "v");
    if (!json_is_integer(ver) || json_integer_value(ver) != POOL_DOC_VERSION)
        return node_errf(err, errlen, "\"v\" must be %d (a job document of another version)",
                         POOL_DOC_VERSION);
    const char *bad = pool_json_unknown_key(j, keys);
    if (bad) return node_errf(err, errlen, "\"%s\" is not a known key", bad);
    if (ref_read(j, &d->job, err, errlen) != 0) return -1;
    snprintf(d->id, sizeof d->id, "%s", d->job.id);
    json_t *v;
    if (bool_at(j, "stop", POOL_HAS_STOP, &d->stop, &d->has, err, errlen) ||
        bool_at(j, "compute", POOL_HAS_COMPUTE, &d->compute, &d->has, err, errlen) ||
        bool_at(j, "first", POOL_HAS_FIRST, &d->first, &d->has, err, errlen) ||
        bool_at(j, "any", POOL_HAS_ANY, &d->any, &d->has, err, errlen) ||
        bool_at(j, "ready", POOL_HAS_READY, &d->ready, &d->has, err, errlen) ||
        count_at(j, "cores", POOL_HAS_CORES, &d->cores, &d->has, err, errlen) ||
        count_at(j, "threads", POOL_HAS_THREADS, &d->threads, &d->has, err, errlen))
        return -1;
    if ((v = json_object_get(j, "host"))) {
        const char *h = json_string_value(v);
        if (!h || strlen(h) != 16 || strspn(h, "0123456789abcdef") != 16)
            return node_errf(err, errlen, "\"host\" must be 16 lowercase hex digits");
        snprintf(d->host, sizeof d->host, "%s", h);
        d->has |= POOL_HAS_HOST;
    }
    if ((v = json_object_get(j, "lack")) && lacks_read(v, &d->lacks, err, errlen)) return -1;
    if ((v = json_object_get(j, "lack_more")) &&
        (!json_is_integer(v) || json_integer_value(v) < 1))
        return node_errf(err, errlen, "\"lack_more\" must count lacks beyond those listed");
    d->lack_more = v ? (int64_t)json_integer_value(v) : 0;
    if (pool_json_text(j, "error", d->error, sizeof d->error, err, errlen) ||
        pool_json_text(j, "prof_error", d->prof_error, sizeof d->prof_error, err, errlen) ||
        pool_json_text(j, "why", d->why, sizeof d->why, err, errlen))
        return -1;
    if ((v = json_object_get(j, "prof"))) {
        if (profile_read(v, &d->prof, err, errlen)) return -1;
        d->has |= POOL_HAS_PROF;
    }
    if ((v = json_object_get(j, "links"))) {
        if (pool_links_from_json(v, &d->links, err, errlen)) return -1;
        if (d->links.n > POOL_LINKS_MAX)
            return node_errf(err, errlen, "\"links\" lists %d links, at most %d", d->links.n,
                             POOL_LINKS_MAX);
        if (!json_object_get(j, "link"))
            return node_errf(err, errlen, "\"link\" must come with \"links\"");
        if (link_read(json_object_get(j, "link"), &d->typical, err, errlen)) return -1;
        d->has |= POOL_HAS_LINKS;
    } else if (json_object_get(j, "link")) {
        return node_errf(err, errlen, "\"link\" without \"links\"");
    }
    if ((v = json_object_get(j, "vote"))) {
        if (pool_vote_from_json(v, &d->vote, err, errlen)) return -1;
        d->has |= POOL_HAS_VOTE;
    }
    if ((v = json_object_get(j, "committed"))) {
        char perr[400];
        if (pool_plan_from_json(v, true, &d->committed, perr, sizeof perr))
            return node_errf(err, errlen, "\"committed\": %s", perr);
        d->has |= POOL_HAS_COMMITTED;
    }
    if ((v = json_object_get(j, "run"))) {
        if (pool_run_from_json(v, &d->run, err, errlen)) return -1;
        d->has |= POOL_HAS_RUN;
    }
    if ((v = json_object_get(j, "sn")) && snaps_read(v, &d->snaps, err, errlen)) return -1;
    if ((v = json_object_get(j, "rec"))) {
        if (rec_read(v, &d->rec, err, errlen)) return -1;
        d->has |= POOL_HAS_REC;
    }
    if ((v = json_object_get(j, "swr"))) {
        if (swr_read(v, &d->swr, err, errlen)) return -1;
        d->has |= POOL_HAS_SWR;
    }
    return 0;
}

int pool_doc_from_json(json_t *j, pool_doc *out, char *err, size_t errlen)
{
    pool_doc_init(out);
    if (doc_read(j, out, err, errlen) == 0) return 0;
    pool_doc_free(out);
    return -1;
}

int pool_doc_from_text(const char *text, pool_doc *out, char *err, size_t errlen)
{
    pool_doc_init(out);
    if (!text || !text[0]) return 0;
    json_error_t je;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!j) return node_errf(err, errlen, "not JSON: %s", je.text);
    int rc = pool_doc_from_json(j, out, err, errlen);
    json_decref(j);
    return rc;
}

json_t *pool_doc_to_json(const pool_doc *d)
{
    json_t *o = json_object();
    if (!o || !d->id[0]) return o;
    unsigned h = d->has;
    json_object_set_new(o, "v", json_integer(POOL_DOC_VERSION));
    json_object_set_new(o, "id", json_string(d->id));
    json_object_set_new(o, "by", json_string(d->job.by));
    json_object_set_new(o, "at", json_integer((json_int_t)d->job.at));
    json_object_set_new(o, "jb", json_string(d->job.blob));
    if (h & POOL_HAS_STOP) json_object_set_new(o, "stop", json_boolean(d->stop));
    if (h & POOL_HAS_COMPUTE) json_object_set_new(o, "compute", json_boolean(d->compute));
    if (h & POOL_HAS_HOST) json_object_set_new(o, "host", json_string(d->host));
    if (h & POOL_HAS_CORES) json_object_set_new(o, "cores", json_integer((json_int_t)d->cores));
    if (h & POOL_HAS_THREADS)
        json_object_set_new(o, "threads", json_integer((json_int_t)d->threads));
    if (h & POOL_HAS_FIRST) json_object_set_new(o, "first", json_boolean(d->first));
    if (h & POOL_HAS_ANY) json_object_set_new(o, "any", json_boolean(d->any));
    if (d->lacks.n || d->lack_more) {
        /* the first lacks, within POOL_LACKS_MAX and POOL_LACKS_TEXT_MAX bytes */
        json_t *a = json_array();
        int n = 0;
        size_t bytes = 2;
        for (; a && n < d->lacks.n && n < POOL_LACKS_MAX; n++) {
            const pool_lack *l = &d->lacks.l[n];
            size_t sz = strlen(l->role) + strlen(l->path) + strlen(l->why) + strlen(l->local) + 40;
            if (bytes + sz > POOL_LACKS_TEXT_MAX) break;
            bytes += sz;
            json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:s}", "role", l->role, "path",
                                               l->path, "why", l->why, "local", l->local));
        }
        int64_t more = d->lack_more + d->lacks.n - n;
        if (n) json_object_set_new(o, "lack", a);
        else json_decref(a);
        if (more > 0) json_object_set_new(o, "lack_more", json_integer((json_int_t)more));
    }
    if (d->error[0]) json_object_set_new(o, "error", json_string(d->error));
    if (h & POOL_HAS_PROF) json_object_set_new(o, "prof", profile_json(&d->prof));
    if (d->prof_error[0]) json_object_set_new(o, "prof_error", json_string(d->prof_error));
    if (h & POOL_HAS_LINKS) {
        json_object_set_new(o, "links", pool_links_to_json(&d->links));
        json_object_set_new(o, "link", json_pack("[I,I]", (json_int_t)d->typical.latency_ns,
                                                 (json_int_t)d->typical.bandwidth));
    }
    if (h & POOL_HAS_READY) json_object_set_new(o, "ready", json_boolean(d->ready));
    if (h & POOL_HAS_VOTE) json_object_set_new(o, "vote", pool_vote_to_json(&d->vote));
    if (d->why[0]) json_object_set_new(o, "why", json_string(d->why));
    if (h & POOL_HAS_COMMITTED)
        json_object_set_new(o, "committed", pool_plan_to_json(&d->committed));
    if (h & POOL_HAS_RUN) json_object_set_new(o, "run", pool_run_to_json(&d->run));
    if (d->snaps.n) json_object_set_new(o, "sn", pool_snaps_to_json(&d->snaps));
    if (h & POOL_HAS_REC) json_object_set_new(o, "rec", rec_json(&d->rec));
    if (h & POOL_HAS_SWR) json_object_set_new(o, "swr", swr_json(&d->swr));
    return o;
}

char *pool_doc_to_text(const pool_doc *d)
{
    json_t *j = pool_doc_to_json(d);
    char *text = j && json_object_size(j) ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS)
                                          : strdup("");
    json_decref(j);
    return text;
}

char *pool_doc_view_text(const char *name, const pool_doc *d)
{
    json_t *o = json_pack("{s:s,s:b,s:b,s:b}", "name", name, "compute", d->compute, "first",
                          d->first, "any", d->any);
    if (!o) return NULL;
    if (d->has & POOL_HAS_HOST) json_object_set_new(o, "host", json_string(d->host));
    if (d->has & POOL_HAS_CORES) json_object_set_new(o, "cores", json_integer((json_int_t)d->cores));
    if (d->has & POOL_HAS_THREADS)
        json_object_set_new(o, "threads", json_integer((json_int_t)d->threads));
    json_object_set_new(o, "prof", d->has & POOL_HAS_PROF ? profile_json(&d->prof) : json_null());
    json_object_set_new(o, "links",
                        d->has & POOL_HAS_LINKS ? pool_links_to_json(&d->links) : json_null());
    json_object_set_new(o, "link", d->has & POOL_HAS_LINKS
                                       ? json_pack("[I,I]", (json_int_t)d->typical.latency_ns,
                                                   (json_int_t)d->typical.bandwidth)
                                       : json_null());
    char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return text;
}

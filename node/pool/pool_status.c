/* pool_status.c — what a node keeps and shows of its job (pool_doc.h): the
 * state it saves across restarts (STATE/jobs/ID/state.json), the job
 * section of `status` with every member's document, and a stage's progress
 * line. One reader and one writer each. */
#include "pool_doc.h"

#include "node_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- saved state ---- */

void pool_saved_free(pool_saved *s)
{
    pool_plan_free(&s->committed);
    pool_vote_free(&s->vote);
    memset(s, 0, sizeof *s);
    pool_run_init(&s->run);
}

int pool_saved_from_json(json_t *j, pool_saved *out, char *err, size_t errlen)
{
    static const char *const keys[] = {"committed", "committed_m", "run", "stop", "vote",
                                       "vote_m", NULL};
    memset(out, 0, sizeof *out);
    pool_run_init(&out->run);
    if (!json_is_object(j)) return node_errf(err, errlen, "not a JSON object");
    const char *bad = pool_json_unknown_key(j, keys);
    if (bad) return node_errf(err, errlen, "\"%s\" is not a known key", bad);
    json_t *c = json_object_get(j, "committed"), *r = json_object_get(j, "run");
    json_t *st = json_object_get(j, "stop"), *v = json_object_get(j, "vote");
    char perr[400];
    int rc = 0;
    if (st && !json_is_boolean(st)) rc = node_errf(err, errlen, "\"stop\" must be true or false");
    out->stop = json_is_true(st);
    if (!rc && c && !json_is_null(c)) {
        rc = pool_plan_from_json(c, true, &out->committed, perr, sizeof perr)
                 ? node_errf(err, errlen, "\"committed\": %s", perr) : 0;
        out->has_committed = rc == 0;
        if (!rc) /* the base membership behind its "mh", when this node knows it */
            rc = pool_names_from_json(json_object_get(j, "committed_m"),
                                      &out->committed.members, "committed_m", err, errlen);
    }
    if (!rc && r && !json_is_null(r)) {
        rc = pool_run_from_json(r, &out->run, err, errlen);
        out->has_run = rc == 0;
    }
    if (!rc && v && !json_is_null(v)) {
        rc = pool_vote_from_json(v, &out->vote, err, errlen);
        out->has_vote = rc == 0;
        if (!rc) /* the list the vote's "mh" is of: kept here, not in the record */
            rc = pool_names_from_json(json_object_get(j, "vote_m"), &out->vote.members,
                                      "vote_m", err, errlen);
    }
    if (rc) pool_saved_free(out);
    return rc;
}

json_t *pool_saved_to_json(const pool_saved *s)
{
    return json_pack("{s:o,s:o,s:o,s:b,s:o,s:o}", "committed",
                     s->has_committed ? pool_plan_to_json(&s->committed) : json_null(),
                     "committed_m",
                     s->has_committed && s->committed.members.n
                         ? pool_names_to_json(&s->committed.members) : json_null(), "run",
                     s->has_run ? pool_run_to_json(&s->run) : json_null(), "stop", s->stop,
                     "vote", s->has_vote ? pool_vote_to_json(&s->vote) : json_null(), "vote_m",
                     s->has_vote ? pool_names_to_json(&s->vote.members) : json_null());
}

/* ---- the job section of status ---- */

void pool_status_free(pool_status *s)
{
    for (int i = 0; i < s->nmembers; i++) {
        if (!s->members[i].doc) continue;
        pool_doc_free(s->members[i].doc);
        free(s->members[i].doc);
    }
    free(s->members);
    free(s->out_dir);
    free(s->job_file);
    pool_plan_free(&s->committed);
    memset(s, 0, sizeof *s);
    pool_run_init(&s->run);
}

static int status_member(const char *name, json_t *m, pool_status_member *out, char *err,
                         size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_t *doc = json_copy(m);   /* the document is the entry without state and address */
    char derr[700];
    if (!doc) return node_errf(err, errlen, "out of memory");
    int rc = pool_json_text(doc, "state", out->state, sizeof out->state, err, errlen) ||
             pool_json_text(doc, "address", out->address, sizeof out->address, err, errlen) ? -1 : 0;
    json_object_del(doc, "state");
    json_object_del(doc, "address");
    snprintf(out->name, sizeof out->name, "%s", name);
    if (!rc && (strlen(name) >= sizeof out->name || !(out->doc = calloc(1, sizeof *out->doc))))
        rc = node_errf(err, errlen, "\"members\".\"%.63s\": not a member name", name);
    if (!rc && pool_doc_from_json(doc, out->doc, derr, sizeof derr) != 0)
        rc = node_errf(err, errlen, "\"members\".\"%.63s\": %s", name, derr);
    json_decref(doc);
    if (rc) {
        free(out->doc);
        out->doc = NULL;
    }
    return rc;
}

static int status_read(json_t *j, pool_status *s, char *err, size_t errlen)
{
    static const char *const keys[] = {"id", "submitted_by", "out_dir", "job_file", "committed",
                                       "run", "stop", "members", NULL};
    const char *bad = pool_json_unknown_key(j, keys);
    if (bad) return node_errf(err, errlen, "job: \"%s\" is not a known key", bad);
    const char *id = json_string_value(json_object_get(j, "id"));
    const char *by = json_string_value(json_object_get(j, "submitted_by"));
    const char *out = json_string_value(json_object_get(j, "out_dir"));
    const char *jf = json_string_value(json_object_get(j, "job_file"));
    json_t *c = json_object_get(j, "committed"), *r = json_object_get(j, "run");
    json_t *members = json_object_get(j, "members");
    if (!id || strlen(id) != POOL_JOB_ID_LEN || !by || strlen(by) >= sizeof s->submitted_by ||
        !out || !jf || !json_is_boolean(json_object_get(j, "stop")) || !json_is_object(members))
        return node_errf(err, errlen, "job: id, submitted_by, out_dir, job_file, stop and "
                         "members are required");
    snprintf(s->id, sizeof s->id, "%s", id);
    snprintf(s->submitted_by, sizeof s->submitted_by, "%s", by);
    s->out_dir = strdup(out);
    s->job_file = strdup(jf);
    s->stop = json_is_true(json_object_get(j, "stop"));
    s->members = calloc(json_object_size(members) + 1, sizeof *s->members);
    if (!s->out_dir || !s->job_file || !s->members) return node_errf(err, errlen, "out of memory");
    char perr[400];
    if (c && !json_is_null(c)) {
        if (pool_plan_from_json(c, true, &s->committed, perr, sizeof perr))
            return node_errf(err, errlen, "job: \"committed\": %s", perr);
        s->has_committed = true;
    }
    if (r && !json_is_null(r)) {
        if (pool_run_from_json(r, &s->run, err, errlen)) return -1;
        s->has_run = true;
    }
    const char *name;
    json_t *m;
    json_object_foreach(members, name, m) {
        if (status_member(name, m, &s->members[s->nmembers], err, errlen)) return -1;
        s->nmembers++;
    }
    return 0;
}

int pool_status_from_json(json_t *j, pool_status *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    pool_run_init(&out->run);
    if (!j || json_is_null(j)) return 1;
    if (!json_is_object(j)) return node_errf(err, errlen, "job: not an object");
    if (status_read(j, out, err, errlen) == 0) return 0;
    pool_status_free(out);
    return -1;
}

json_t *pool_status_to_json(const pool_status *s)
{
    json_t *members = json_object();
    for (int i = 0; members && i < s->nmembers; i++) {
        const pool_status_member *m = &s->members[i];
        json_t *doc = pool_doc_to_json(m->doc);
        json_object_set_new(doc, "state", json_string(m->state));
        json_object_set_new(doc, "address", json_string(m->address));
        json_object_set_new(members, m->name, doc);
    }
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:b,s:o}", "id", s->id, "submitted_by",
                     s->submitted_by, "out_dir", s->out_dir ? s->out_dir : "", "job_file",
                     s->job_file ? s->job_file : "", "committed",
                     s->has_committed ? pool_plan_to_json(&s->committed) : json_null(), "run",
                     s->has_run ? pool_run_to_json(&s->run) : json_null(), "stop", s->stop,
                     "members", members);
}

int pool_status_from_reply(json_t *reply, pool_status *out, char *err, size_t errlen)
{
    return pool_status_from_json(json_object_get(reply, "job"), out, err, errlen);
}

int pool_reply_gossip_port(json_t *reply, const char *name)
{
    int port = GOSSIP_DEFAULT_PORT;
    size_t k;
    json_t *m;
    json_array_foreach(json_object_get(reply, "members"), k, m) {
        const char *n = json_string_value(json_object_get(m, "name"));
        json_t *gp = json_object_get(m, "gossip_port");
        if (n && name && strcmp(n, name) == 0 && json_is_integer(gp))
            port = (int)json_integer_value(gp);
    }
    return port;
}

const char *pool_reply_own_address(json_t *reply)
{
    const char *own = NULL;
    size_t k;
    json_t *m;
    json_array_foreach(json_object_get(reply, "members"), k, m)
        if (json_is_true(json_object_get(m, "self")))
            own = json_string_value(json_object_get(m, "address"));
    return own;
}

const pool_status_member *pool_status_member_of(const pool_status *s, const char *name)
{
    for (int i = 0; name && i < s->nmembers; i++)
        if (strcmp(s->members[i].name, name) == 0) return &s->members[i];
    return NULL;
}

/* ---- a stage's progress: the last line of its metrics.jsonl ---- */

int pool_run_progress_from_line(const char *line, pool_progress *out)
{
    json_t *m = line && line[0] ? json_loads(line, 0, NULL) : NULL;
    json_t *s = json_object_get(m, "step"), *c = json_object_get(m, "compute_ms"),
           *t = json_object_get(m, "threads");
    int rc = json_is_integer(s) ? 0 : -1;
    if (rc == 0) {
        out->step = (int64_t)json_integer_value(s);
        out->loss = json_number_value(json_object_get(m, "loss"));
        out->tps = json_number_value(json_object_get(m, "tokens_per_s"));
        out->step_ms = json_number_value(json_object_get(m, "step_ms"));
        out->compute_ms = json_is_number(c) && json_number_value(c) >= 0 ? json_number_value(c)
                                                                          : -1;
        out->threads = json_is_integer(t) && json_integer_value(t) > 0 &&
                               json_integer_value(t) <= 4096
                           ? (int)json_integer_value(t)
                           : 0;
    }
    json_decref(m);
    return rc;
}

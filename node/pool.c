/* pool.c — the running node's share of a training job (docs/PROTOCOL.md,
 * "Jobs" and "Plan election"): it adopts the job a member submitted,
 * checks its files, profiles itself and measures its links (child
 * processes, so gossip never waits), votes in the leaderless election
 * (pool_elect.c),
 * runs its stage of the committed plan as a `shardnode train --cluster`
 * child, and gossips all of it in the `job` text of its signed record. */
#include "pool_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void pool_hex64(uint64_t v, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

uint64_t pool_unhex64(const char *s)
{
    return s ? (uint64_t)strtoull(s, NULL, 16) : 0;
}

static void self_exe(char *out, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", out, len - 1);
    out[n > 0 ? n : 0] = 0;
}

/* A child `shardnode ARGS...` with stdout and stderr appended to log;
 * keys: the path of its HELLO keys (SHARDNODE_HELLO_KEYS), or NULL. */
static pid_t spawn(daemon_t *d, const char *log, char *const *args, const char *keys)
{
    char exe[DAEMON_PATH_MAX];
    self_exe(exe, sizeof exe);
    pid_t pid = fork();
    if (pid < 0) {
        daemon_log(d, "pool: cannot start %s: %s", args[1], strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        for (int k = 3; k < 1024; k++) close(k); /* not the daemon's sockets */
        if (keys) setenv("SHARDNODE_HELLO_KEYS", keys, 1);
        else unsetenv("SHARDNODE_HELLO_KEYS");
        setpgid(0, 0);
        execv(exe, args);
        _exit(127);
    }
    return pid;
}

/* 1: the child ended (status in *st), 0: still running or none. */
static int reaped(pid_t *pid, int *st)
{
    if (*pid <= 0) return 0;
    pid_t r = waitpid(*pid, st, WNOHANG);
    if (r == 0) return 0;
    if (r < 0) *st = -1;
    *pid = 0;
    return 1;
}

static void kill_child(pid_t *pid)
{
    if (*pid <= 0) return;
    kill(-*pid, SIGTERM);
    kill(*pid, SIGTERM);
    for (int i = 0; i < 50; i++) {
        if (waitpid(*pid, NULL, WNOHANG) != 0) {
            *pid = 0;
            return;
        }
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    kill(-*pid, SIGKILL);
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
    *pid = 0;
}

/* The last non-empty line of a file: only its tail is read, so a metrics
 * file of a long run costs the same each tick. */
static void last_line(const char *path, char *out, size_t len)
{
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size > 4096) fseek(f, size - 4096, SEEK_SET);
        else rewind(f);
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0]) snprintf(out, len, "%.*s", (int)(len - 1), line);
    }
    fclose(f);
}

/* The machine's profile lock: members sharing a machine (network
 * namespaces, several state directories) profile and probe one at a time.
 * Never in a world-writable folder, where another user could take it or
 * plant a link: as root /run/shardnode (0700, root's), else the user's
 * private runtime folder ($XDG_RUNTIME_DIR when it is the user's and 0700),
 * else the state directory. */
static void profile_lock_path(daemon_t *d, char *out, size_t len)
{
    struct stat st;
    if (geteuid() == 0) {
        const char *dir = "/run/shardnode";
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) dir = NULL;
        if (dir && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
            !(st.st_mode & 022)) {
            snprintf(out, len, "%s/profile.lock", dir);
            return;
        }
    } else {
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        if (xdg && xdg[0] == '/' && lstat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
            st.st_uid == geteuid() && !(st.st_mode & 077)) {
            snprintf(out, len, "%s/shardnode-profile.lock", xdg);
            return;
        }
    }
    snprintf(out, len, "%s/profile.lock", d->state);
}

/* ---- the job ---- */

static void pool_clear(pool *p)
{
    json_decref(p->bundle);
    json_decref(p->pool_names);
    json_decref(p->lacks);
    json_decref(p->prof);
    json_decref(p->links);
    json_decref(p->vote_members);
    json_decref(p->view_members);
    json_decref(p->layout);
    json_decref(p->committed);
    json_decref(p->run);
    if (p->job_loaded) job_free(&p->job);
    memset(p, 0, sizeof *p);
}

static void pool_stop_children(pool *p)
{
    kill_child(&p->prof_pid);
    kill_child(&p->probe_pid);
    kill_child(&p->run_pid);
    kill_child(&p->export_pid);
}

static void set_run(pool *p, const char *state, const char *error)
{
    if (!p->run) p->run = json_object();
    json_object_set_new(p->run, "state", json_string(state));
    if (error) json_object_set_new(p->run, "error", json_string(error));
    p->doc_dirty = true;
}

static void load_state(daemon_t *d);

/* Takes up a job: the bundle's files checked here, job.json written. */
static void adopt(daemon_t *d, json_t *bundle, json_t *names)
{
    pool *p = d->pool;
    pool_stop_children(p);
    pool_clear(p);
    p->bundle = json_incref(bundle);
    p->pool_names = json_incref(names);
    snprintf(p->id, sizeof p->id, "%s", json_string_value(json_object_get(bundle, "id")));
    snprintf(p->dir, sizeof p->dir, "%s/jobs/%s", d->state, p->id);
    p->doc_dirty = true;
    char err[1024];
    json_t *paths = json_object_get(d->node, "paths");
    if (pool_bundle_check(bundle, d->state, paths, &p->lacks, err, sizeof err) != 0) {
        snprintf(p->setup_err, sizeof p->setup_err, "%.500s", err);
        daemon_log(d, "pool: job %s cannot be set up here: %s", p->id, err);
        return;
    }
    pool_lacks_roles(p->lacks, &p->can_first, &p->can_any);
    char path[DAEMON_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/job.json", p->dir);
    if (job_load(&p->job, path, err, sizeof err) != 0 ||
        llama_config_load(&p->cfg, p->job.config, err, sizeof err) != 0) {
        snprintf(p->setup_err, sizeof p->setup_err, "%.500s", err);
        daemon_log(d, "pool: job %s: %s", p->id, err);
        return;
    }
    p->job_loaded = true;
    daemon_log(d, "pool: took up job %s (submitted by %s); %zu file(s) lacking here", p->id,
               json_string_value(json_object_get(bundle, "submitted_by")),
               json_array_size(p->lacks));
    load_state(d);
}

/* ---- what this node says in its record ---- */

/* What must survive a restart: the committed plan and this node's run, so
 * a restarted node neither votes again nor re-runs a finished stage. */
static void save_state(pool *p)
{
    if (!p->bundle || !p->dir[0]) return;
    char path[DAEMON_PATH_MAX + 32], tmp[DAEMON_PATH_MAX + 40];
    snprintf(path, sizeof path, "%s/state.json", p->dir);
    snprintf(tmp, sizeof tmp, "%s/state.json.tmp", p->dir);
    json_t *st = json_pack("{s:O,s:O,s:b,s:o}", "committed",
                           p->committed ? p->committed : json_null(), "run",
                           p->run ? p->run : json_null(), "stop", p->stop, "vote",
                           p->vote.epoch ? pool_vote_json(&p->vote, p->vote_members) : json_null());
    if (st && json_dump_file(st, tmp, JSON_COMPACT) == 0) rename(tmp, path);
    json_decref(st);
}

static void load_state(daemon_t *d)
{
    pool *p = d->pool;
    char path[DAEMON_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/state.json", p->dir);
    json_t *st = json_load_file(path, 0, NULL);
    if (!st) return;
    json_t *c = json_object_get(st, "committed"), *r = json_object_get(st, "run");
    if (json_is_object(c) && json_is_array(json_object_get(c, "stages"))) p->committed = json_incref(c);
    if (json_is_true(json_object_get(st, "stop"))) p->stop = true;
    /* a vote once cast stands, across restarts too (one vote per epoch) */
    if (pool_vote_parse(json_object_get(st, "vote"), &p->vote) == 0) {
        json_t *m = json_object_get(json_object_get(st, "vote"), "m");
        p->vote_members = json_is_array(m) ? json_incref(m) : NULL;
    } else {
        memset(&p->vote, 0, sizeof p->vote);
    }
    if (json_is_object(r)) {
        p->run = json_deep_copy(r);
        const char *rs = json_string_value(json_object_get(p->run, "state"));
        if (rs && strcmp(rs, "running") == 0)
            set_run(p, "failed", "this node restarted during the run");
    }
    daemon_log(d, "pool: job %s resumed from %s", p->id, path);
    json_decref(st);
}

static void publish(daemon_t *d, int64_t now)
{
    pool *p = d->pool;
    save_state(p);
    json_t *doc = json_object();
    if (p->bundle) {
        json_object_set(doc, "id", json_object_get(p->bundle, "id"));
        json_object_set(doc, "bundle", p->bundle);
        if (p->pool_names) json_object_set(doc, "pool", p->pool_names);
        if (p->stop) json_object_set_new(doc, "stop", json_true());
        json_object_set_new(doc, "compute", json_boolean(!d->no_compute));
        json_object_set_new(doc, "host", json_string(d->host_id));
        json_object_set_new(doc, "cores", json_integer(d->cores));
        json_object_set_new(doc, "threads", json_integer(d->threads ? d->threads : d->cores));
        json_object_set_new(doc, "first", json_boolean(p->can_first));
        json_object_set_new(doc, "any", json_boolean(p->can_any));
        if (json_array_size(p->lacks)) json_object_set(doc, "lack", p->lacks);
        if (p->setup_err[0]) json_object_set_new(doc, "error", json_string(p->setup_err));
        if (p->prof) json_object_set(doc, "prof", p->prof);
        if (p->prof_err[0]) json_object_set_new(doc, "prof_error", json_string(p->prof_err));
        if (p->links) json_object_set(doc, "links", p->links);
        json_object_set_new(doc, "ready", json_boolean(p->prof && p->links_done));
        if (p->vote.epoch) json_object_set_new(doc, "vote", pool_vote_json(&p->vote, p->vote_members));
        if (p->why[0]) json_object_set_new(doc, "why", json_string(p->why));
        if (p->committed) json_object_set(doc, "committed", p->committed);
        if (p->run) json_object_set(doc, "run", p->run);
    }
    char *text = json_object_size(doc) ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    char err[256];
    if (gossip_set_job(d->g, text ? text : "", now, err, sizeof err) != 0)
        daemon_log(d, "pool: cannot publish the job state: %s", err);
    free(text);
    p->doc_dirty = false;
    p->next_doc_ms = now + POOL_DOC_MS;
}

/* ---- reading the others ---- */

static int gather(daemon_t *d, part *parts, int max)
{
    const gossip_member *const *list;
    size_t n = gossip_members(d->g, &list);
    int k = 0;
    for (size_t i = 0; i < n && k < max; i++) {
        const gossip_member *m = list[i];
        parts[k].m = m;
        parts[k].live = m->state == GOSSIP_ALIVE || m->state == GOSSIP_SUSPECT;
        parts[k].doc = m->rec.job[0] ? json_loads(m->rec.job, 0, NULL) : NULL;
        k++;
    }
    return k;
}

static void release(part *parts, int n)
{
    for (int i = 0; i < n; i++) json_decref(parts[i].doc);
}

bool pool_doc_job(const part *q, const char *id)
{
    const char *x = json_string_value(json_object_get(q->doc, "id"));
    return x && id && strcmp(x, id) == 0;
}

bool pool_job_from(json_t *bundle, const char *carrier, const pool_peer *peers, int n)
{
    const char *by = json_string_value(json_object_get(bundle, "submitted_by"));
    const char *id = json_string_value(json_object_get(bundle, "id"));
    if (!by || !id || !carrier) return false;
    if (strcmp(by, carrier) == 0) return true;
    for (int i = 0; i < n; i++) {
        if (!peers[i].name || strcmp(peers[i].name, by) != 0) continue;
        json_t *b = json_object_get(peers[i].doc, "bundle");
        const char *x = json_string_value(json_object_get(peers[i].doc, "id"));
        const char *bid = json_string_value(json_object_get(b, "id"));
        return x && bid && strcmp(x, id) == 0 && strcmp(bid, id) == 0;
    }
    return false;
}

void pool_gather_dir(json_t *bundle, const char *self, const char *job_dir, char *out,
                     size_t len)
{
    const char *by = json_string_value(json_object_get(bundle, "submitted_by"));
    const char *dir = json_string_value(json_object_get(json_object_get(bundle, "job"), "out_dir"));
    if (by && self && dir && strcmp(by, self) == 0)
        snprintf(out, len, "%s", dir);
    else
        snprintf(out, len, "%s/model", job_dir);
}

/* The submitter's own document of a job (NULL: it carries it no more). */
static json_t *submitter_doc(part *parts, int n, json_t *bundle)
{
    const char *by = json_string_value(json_object_get(bundle, "submitted_by"));
    const char *id = json_string_value(json_object_get(bundle, "id"));
    for (int i = 0; by && i < n; i++)
        if (strcmp(parts[i].m->rec.name, by) == 0 && pool_doc_job(&parts[i], id))
            return parts[i].doc;
    return NULL;
}

/* ---- profile and links (children) ---- */

/* Whether the model's state cannot fit the free memory of the members that
 * compute, even as one stage with one micro-batch in flight: then nobody
 * profiles (a layer that big would take long to time) and the shortfall is
 * the report. */
bool pool_too_small(daemon_t *d, part *parts, int n)
{
    pool *p = d->pool;
    cost_shape shape = fleet_shape(&p->cfg, p->job.seq_len);
    cost_bytes cb;
    char err[256];
    if (cost_bytes_compute(&cb, &shape, 1, 4, err, sizeof err) != 0) return false;
    int64_t need = cost_stage_memory(&cb, shape.tied, 1, true, shape.layers, true, 1);
    int64_t have = 0;
    int members = 0;
    for (int i = 0; i < n; i++) {
        json_t *doc = parts[i].doc;
        bool compute = parts[i].m->self ? !d->no_compute && p->can_any
                                        : json_is_true(json_object_get(doc, "compute")) &&
                                              json_is_true(json_object_get(doc, "any"));
        if (!parts[i].live || !compute || (!parts[i].m->self && !pool_doc_job(&parts[i], p->id)))
            continue;
        have += (int64_t)(parts[i].m->rec.mem_free / 1000 * 950);
        members++;
    }
    if (members == 0 || need <= have) return false;
    char a[32], b[32], c[32];
    cost_format_bytes(a, sizeof a, need);
    cost_format_bytes(b, sizeof b, have);
    cost_format_bytes(c, sizeof c, need - have);
    snprintf(p->why, sizeof p->why, "the model needs at least %s (weights, gradients and AdamW "
             "moments of %d layers) and the %d member(s) that compute have %s free: %s missing",
             a, shape.layers, members, b, c);
    return true;
}

static void measure(daemon_t *d, part *parts, int n)
{
    pool *p = d->pool;
    if (!p->job_loaded || d->no_compute || !p->can_any) return;
    if (!p->prof && !p->prof_pid && pool_too_small(d, parts, n)) {
        p->doc_dirty = true;
        return;
    }
    char log[DAEMON_PATH_MAX + 32], out[DAEMON_PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/measure.log", p->dir);
    int st;
    if (reaped(&p->prof_pid, &st)) {
        snprintf(out, sizeof out, "%s/profile.json", p->dir);
        json_t *pj = json_load_file(out, 0, NULL);
        cost_profile pf;
        char err[512];
        cost_shape shape = fleet_shape(&p->cfg, p->job.seq_len);
        if (st == 0 && pj && fleet_profile_parse(pj, &shape, &pf, out, err, sizeof err) == 0) {
            p->prof = json_pack("{s:I,s:[I,I,I],s:[I,I,I],s:[I,I,I],s:I,s:i,s:s}", "b",
                                (json_int_t)pf.micro_batch, "f", (json_int_t)pf.fwd_ns[0],
                                (json_int_t)pf.fwd_ns[1], (json_int_t)pf.fwd_ns[2], "k",
                                (json_int_t)pf.bwd_ns[0], (json_int_t)pf.bwd_ns[1],
                                (json_int_t)pf.bwd_ns[2], "o", (json_int_t)pf.opt_ns[0],
                                (json_int_t)pf.opt_ns[1], (json_int_t)pf.opt_ns[2], "mem",
                                (json_int_t)pf.memory_bytes, "s", pf.scratch_slots, "d",
                                json_string_value(json_object_get(pj, "device_name")));
            daemon_log(d, "pool: profiled: layer forward %.2f ms, backward %.2f ms",
                       (double)pf.fwd_ns[1] * 1e-6, (double)pf.bwd_ns[1] * 1e-6);
        } else {
            char line[400];
            last_line(log, line, sizeof line);
            snprintf(p->prof_err, sizeof p->prof_err, "profiling failed: %.480s",
                     pj ? err : line);
            daemon_log(d, "pool: %s", p->prof_err);
        }
        json_decref(pj);
        p->doc_dirty = true;
    }
    if (reaped(&p->probe_pid, &st)) {
        snprintf(out, sizeof out, "%s/links.json", p->dir);
        json_t *lj = json_load_file(out, 0, NULL);
        json_decref(p->links);
        p->links = json_is_object(lj) ? lj : json_object();
        if (!json_is_object(lj)) json_decref(lj);
        p->links_done = true;
        p->doc_dirty = true;
    }
    if (!p->prof && !p->prof_err[0] && !p->prof_pid) {
        char mb[32], seq[32], thr[32], cache[DAEMON_PATH_MAX], cfgp[DAEMON_PATH_MAX + 32],
            lock[DAEMON_PATH_MAX + 32];
        profile_lock_path(d, lock, sizeof lock);
        snprintf(out, sizeof out, "%s/profile.json", p->dir);
        snprintf(cfgp, sizeof cfgp, "%s/config.json", p->dir);
        snprintf(cache, sizeof cache, "%s/profiles", d->state);
        snprintf(mb, sizeof mb, "%d", p->job.micro_batch);
        snprintf(seq, sizeof seq, "%d", p->job.seq_len);
        snprintf(thr, sizeof thr, "%d", d->threads);
        char *args[] = {"shardnode", "profile", "--model", cfgp, "--iters", "5",
                        "--micro-batch", mb, "--seq", seq,
                        "--cache", cache, "--out", out, "--lock", lock,
                        d->threads ? "--threads" : NULL, thr, NULL};
        p->prof_pid = spawn(d, log, args, NULL);
    }
    /* links: once the profile is in, to every live member with the job */
    if (p->prof && !p->links_done && !p->probe_pid) {
        char *args[POOL_MAX_PARTS + 8];
        char targets[64][GOSSIP_ADDR_MAX + MESH_NAME_MAX + 16], lock[DAEMON_PATH_MAX + 32];
        profile_lock_path(d, lock, sizeof lock);
        int a = 0, t = 0;
        snprintf(out, sizeof out, "%s/links.json", p->dir);
        args[a++] = "shardnode";
        args[a++] = "probe-links";
        char mesh_hex[2 * GOSSIP_MESH_ID_LEN + 1];
        node_hex_encode(d->mesh_id, GOSSIP_MESH_ID_LEN, mesh_hex);
        args[a++] = "--out";
        args[a++] = out;
        args[a++] = "--mesh";
        args[a++] = mesh_hex;
        args[a++] = "--from";
        args[a++] = d->name;
        args[a++] = "--bind";
        args[a++] = d->overlay;
        args[a++] = "--lock";
        args[a++] = lock;
        for (int i = 0; i < n && t < 64; i++) {
            if (parts[i].m->self || !parts[i].live || !pool_doc_job(&parts[i], p->id)) continue;
            snprintf(targets[t], sizeof targets[t], "%s=%s:%d", parts[i].m->rec.name,
                     parts[i].m->rec.address, parts[i].m->rec.port);
            args[a++] = targets[t++];
        }
        args[a] = NULL;
        p->probe_pid = spawn(d, log, args, NULL);
    }
}

/* ---- running this node's stage ---- */

int pool_hello_key(const uint8_t own_priv[GOSSIP_KEY_LEN], const uint8_t own_pub[GOSSIP_KEY_LEN],
                   const uint8_t peer_pub[GOSSIP_KEY_LEN], const char *run,
                   uint8_t key[MESH_HELLO_KEY_LEN])
{
    EVP_PKEY *a = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, own_priv, GOSSIP_KEY_LEN);
    EVP_PKEY *b = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer_pub, GOSSIP_KEY_LEN);
    EVP_PKEY_CTX *ctx = a ? EVP_PKEY_CTX_new(a, NULL) : NULL;
    uint8_t shared[32];
    size_t slen = sizeof shared;
    int ok = ctx && b && EVP_PKEY_derive_init(ctx) > 0 && EVP_PKEY_derive_set_peer(ctx, b) > 0 &&
             EVP_PKEY_derive(ctx, shared, &slen) > 0 && slen == sizeof shared;
    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_free(a);
    EVP_PKEY_free(b);
    if (!ok) return -1;
    /* "shardnode pipeline" NUL run NUL, then both public keys, lower first */
    uint8_t msg[20 + MESH_TEXT_MAX + 2 * GOSSIP_KEY_LEN];
    size_t k = 0, rl = strnlen(run, MESH_TEXT_MAX - 1);
    memcpy(msg, "shardnode pipeline", 19);
    k = 19;
    memcpy(msg + k, run, rl);
    k += rl;
    msg[k++] = 0;
    bool own_first = memcmp(own_pub, peer_pub, GOSSIP_KEY_LEN) < 0;
    memcpy(msg + k, own_first ? own_pub : peer_pub, GOSSIP_KEY_LEN);
    memcpy(msg + k + GOSSIP_KEY_LEN, own_first ? peer_pub : own_pub, GOSSIP_KEY_LEN);
    k += 2 * GOSSIP_KEY_LEN;
    unsigned int mdlen = 0;
    ok = HMAC(EVP_sha256(), shared, sizeof shared, msg, k, key, &mdlen) && mdlen == 32;
    OPENSSL_cleanse(shared, sizeof shared);
    return ok ? 0 : -1;
}

/* The HELLO keys of this node's stage with every other stage of the plan
 * (pool_hello_key with each one's WireGuard key from its own record), 0600. */
static int write_hello_keys(daemon_t *d, const char *run, const char *path, char *err,
                            size_t errlen)
{
    const gossip_member *const *list;
    size_t n = gossip_members(d->g, &list);
    json_t *keys = json_object();
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(d->pool->committed, "stages"), i, s) {
        const char *name = json_string_value(json_array_get(s, 0));
        if (!name || strcmp(name, d->name) == 0) continue;
        for (size_t k = 0; k < n; k++) {
            uint8_t key[MESH_HELLO_KEY_LEN];
            char hex[2 * MESH_HELLO_KEY_LEN + 1];
            if (strcmp(list[k]->rec.name, name) != 0 ||
                pool_hello_key(d->wg_priv, d->wg_pub, list[k]->rec.wg_pub, run, key) != 0)
                continue;
            node_hex_encode(key, sizeof key, hex);
            OPENSSL_cleanse(key, sizeof key);
            json_object_set_new(keys, name, json_string(hex));
        }
    }
    int rc = node_write_json(path, keys, 0600, err, errlen);
    json_decref(keys);
    return rc;
}

static int write_run_files(daemon_t *d, char *job_path, char *cl_path, char *keys_path,
                           size_t len, char *err, size_t errlen)
{
    pool *p = d->pool;
    json_t *c = p->committed;
    int64_t e = json_integer_value(json_object_get(c, "e"));
    char src[DAEMON_PATH_MAX + 32];
    snprintf(src, sizeof src, "%s/job.json", p->dir);
    snprintf(job_path, len, "%s/job-e%lld.json", p->dir, (long long)e);
    snprintf(cl_path, len, "%s/cluster-e%lld.json", p->dir, (long long)e);
    snprintf(keys_path, len, "%s/hello-e%lld.json", p->dir, (long long)e);
    json_error_t je;
    json_t *job = json_load_file(src, 0, &je);
    if (!job) return node_errf(err, errlen, "%s: %s", src, je.text);
    json_object_set(job, "micro_batch", json_object_get(c, "mb"));
    json_t *nodes = json_array();
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(c, "stages"), i, s)
        json_array_append_new(nodes, json_pack("{s:O,s:O,s:i,s:[O,O]}", "name",
                                               json_array_get(s, 0), "host", json_array_get(s, 3),
                                               "port", POOL_DATA_PORT, "layers",
                                               json_array_get(s, 1), json_array_get(s, 2)));
    char run[64];
    snprintf(run, sizeof run, "job-%s-e%lld", p->id, (long long)e);
    json_t *cl = json_pack("{s:s,s:s,s:i,s:o}", "run", run, "schedule", "1f1b", "timeout_ms",
                           60000, "nodes", nodes);
    int rc = 0;
    if (node_write_json(job_path, job, 0644, err, errlen) ||
        node_write_json(cl_path, cl, 0644, err, errlen) ||
        write_hello_keys(d, run, keys_path, err, errlen))
        rc = -1;
    json_decref(job);
    json_decref(cl);
    return rc;
}

static bool named_here(daemon_t *d)
{
    json_t *st = json_object_get(d->pool->committed, "stages");
    size_t i;
    json_t *s;
    json_array_foreach(st, i, s) {
        const char *name = json_string_value(json_array_get(s, 0));
        if (name && strcmp(name, d->name) == 0) return true;
    }
    return false;
}

static void progress(pool *p)
{
    char path[DAEMON_PATH_MAX + 32], line[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", p->dir);
    last_line(path, line, sizeof line);
    json_t *m = line[0] ? json_loads(line, 0, NULL) : NULL;
    if (m && p->run) {
        json_t *step = json_object_get(m, "step");
        if (!json_equal(step, json_object_get(p->run, "step"))) {
            json_object_set(p->run, "step", step);
            json_object_set(p->run, "loss", json_object_get(m, "loss"));
            json_object_set(p->run, "tps", json_object_get(m, "tokens_per_s"));
            json_object_set(p->run, "step_ms", json_object_get(m, "step_ms"));
            p->doc_dirty = true;
        }
    }
    json_decref(m);
}

static void run_stage(daemon_t *d, part *parts, int n)
{
    pool *p = d->pool;
    (void)parts;
    (void)n;
    int st;
    if (reaped(&p->run_pid, &st)) {
        progress(p);
        if (st == 0) {
            set_run(p, "done", NULL);
            daemon_log(d, "pool: stage finished");
        } else {
            char path[DAEMON_PATH_MAX + 32], line[800];
            snprintf(path, sizeof path, "%s/train.log", p->dir);
            last_line(path, line, sizeof line);
            set_run(p, "failed", line[0] ? line : "the training process failed");
            daemon_log(d, "pool: stage failed: %s", line);
        }
        return;
    }
    if (p->run_pid) {
        progress(p);
        return;
    }
    if (p->run || !p->committed || !named_here(d)) return;
    char job_path[DAEMON_PATH_MAX + 64], cl_path[DAEMON_PATH_MAX + 64],
        keys_path[DAEMON_PATH_MAX + 64], err[1024];
    if (write_run_files(d, job_path, cl_path, keys_path, sizeof job_path, err, sizeof err) != 0) {
        set_run(p, "failed", err);
        return;
    }
    char log[DAEMON_PATH_MAX + 32], metrics[DAEMON_PATH_MAX + 32], thr[32];
    snprintf(log, sizeof log, "%s/train.log", p->dir);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", p->dir);
    snprintf(thr, sizeof thr, "%d", d->threads);
    char *args[] = {"shardnode", "train", "--job", job_path, "--cluster", cl_path, "--node",
                    d->name, "--metrics", metrics, d->threads ? "--threads" : NULL, thr, NULL};
    p->run_pid = spawn(d, log, args, keys_path);
    set_run(p, p->run_pid > 0 ? "running" : "failed",
            p->run_pid > 0 ? NULL : "cannot start the training process");
    json_object_set_new(p->run, "steps", json_integer(p->job.steps));
}

/* The submitter gathers the model when every stage is done. */
static void gather_model(daemon_t *d, part *parts, int n)
{
    pool *p = d->pool;
    int st;
    if (reaped(&p->export_pid, &st)) {
        p->exported = true;
        json_object_set_new(p->run ? p->run : (p->run = json_object()), "gathered",
                            json_boolean(st == 0));
        p->doc_dirty = true;
        daemon_log(d, "pool: gathering the model %s", st == 0 ? "done" : "failed (see export.log)");
    }
    const char *by = json_string_value(json_object_get(p->bundle, "submitted_by"));
    if (p->exported || p->export_pid || !p->committed || !by || strcmp(by, d->name) != 0) return;
    json_t *stages = json_object_get(p->committed, "stages");
    size_t i;
    json_t *s;
    json_array_foreach(stages, i, s) {
        const char *name = json_string_value(json_array_get(s, 0));
        bool done = false;
        if (!name) return;
        for (int k = 0; k < n; k++)
            if (strcmp(parts[k].m->rec.name, name) == 0 && pool_doc_job(&parts[k], p->id)) {
                const char *rs = json_string_value(
                    json_object_get(json_object_get(parts[k].doc, "run"), "state"));
                done = rs && strcmp(rs, "done") == 0;
            }
        if (!done) return;
    }
    char log[DAEMON_PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/export.log", p->dir);
    char *args[] = {"shardnode", "export", "--state", d->state, NULL};
    p->export_pid = spawn(d, log, args, NULL);
}

/* ---- the daemon's entry points ---- */

int pool_open(daemon_t *d)
{
    d->pool = calloc(1, sizeof *d->pool);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    d->cores = n > 0 ? (int)n : 1;
    /* which members share a machine (network namespaces do): a hash of
     * the machine id, not the id itself */
    char id[128] = "";
    FILE *f = fopen("/etc/machine-id", "r");
    if (f) {
        if (!fgets(id, sizeof id, f)) id[0] = 0;
        fclose(f);
    }
    if (!id[0]) gethostname(id, sizeof id - 1);
    id[strcspn(id, "\n")] = 0;
    pool_hex64(elect_hash(ELECT_HASH_INIT, id, strlen(id)), d->host_id);
    return d->pool ? 0 : -1;
}

void pool_close(daemon_t *d)
{
    if (!d->pool) return;
    pool_stop_children(d->pool);
    pool_clear(d->pool);
    free(d->pool);
    d->pool = NULL;
}

/* Logs a gossiped job this node does not take up, once per member and job. */
static void refuse_job(daemon_t *d, const char *who, const char *id, const char *why)
{
    pool *p = d->pool;
    char key[sizeof p->job_refused];
    snprintf(key, sizeof key, "%.64s/%.20s", who, id);
    if (strcmp(key, p->job_refused) == 0) return;
    snprintf(p->job_refused, sizeof p->job_refused, "%s", key);
    daemon_log(d, "pool: %s gossips a job this node refuses: %s", who, why);
}

void pool_tick(daemon_t *d, int64_t now)
{
    pool *p = d->pool;
    if (!p || now < p->next_ms) return;
    p->next_ms = now + POOL_TICK_MS;
    part parts[POOL_MAX_PARTS];
    int n = gather(d, parts, POOL_MAX_PARTS);
    pool_peer peers[POOL_MAX_PARTS];
    for (int i = 0; i < n; i++)
        peers[i] = (pool_peer){parts[i].m->rec.name, parts[i].m->rec.address, parts[i].live,
                               parts[i].doc};
    /* a job someone else submitted or stopped */
    for (int i = 0; i < n; i++) {
        if (parts[i].m->self || !parts[i].doc) continue;
        json_t *doc = parts[i].doc;
        const char *id = json_string_value(json_object_get(doc, "id"));
        if (!id) continue;
        if (p->bundle && strcmp(id, p->id) == 0) {
            if (json_is_true(json_object_get(doc, "stop")) && !p->stop) {
                p->stop = true;
                pool_stop_children(p);
                set_run(p, "stopped", NULL);
                daemon_log(d, "pool: job %s stopped by %s", p->id, parts[i].m->rec.name);
            }
            continue;
        }
        json_t *b = json_object_get(doc, "bundle");
        if (!parts[i].live) continue;
        /* later jobs replace earlier ones, in an order every member sees
         * the same, with no job from the far future */
        if (!pool_job_later(b, p->bundle, (int64_t)time(NULL))) continue;
        char err[512];
        if (pool_bundle_valid(b, err, sizeof err) != 0) {
            refuse_job(d, parts[i].m->rec.name, id, err);
            continue;
        }
        if (!pool_job_from(b, parts[i].m->rec.name, peers, n)) {
            snprintf(err, sizeof err, "it says %.64s submitted it, and %.64s's own record does "
                     "not carry it",
                     json_string_value(json_object_get(b, "submitted_by")),
                     json_string_value(json_object_get(b, "submitted_by")));
            refuse_job(d, parts[i].m->rec.name, id, err);
            continue;
        }
        /* the first epoch's members as the submitter said */
        json_t *sdoc = submitter_doc(parts, n, b);
        json_t *names = json_object_get(sdoc ? sdoc : doc, "pool");
        /* a stopped job is taken up too, as stopped: status then shows it */
        adopt(d, b, names);
        if (json_is_true(json_object_get(doc, "stop")) && !p->stop) {
            p->stop = true;
            set_run(p, "stopped", NULL);
        }
    }
    if (p->bundle && !p->stop) {
        measure(d, parts, n);
        if (!p->committed || !p->run) {
            if (pool_compute_view(d, parts, n) && !p->committed) pool_elect(d, parts, n, now);
        }
        run_stage(d, parts, n);
        gather_model(d, parts, n);
    }
    release(parts, n);
    if (p->doc_dirty && now >= p->next_doc_ms) publish(d, now);
}

/* A committed run that has neither finished on every stage nor failed. */
static bool run_active(daemon_t *d)
{
    pool *p = d->pool;
    if (!p->bundle || p->stop || !p->committed) return false;
    part parts[POOL_MAX_PARTS];
    int n = gather(d, parts, POOL_MAX_PARTS);
    bool active = false;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(p->committed, "stages"), i, s) {
        const char *name = json_string_value(json_array_get(s, 0)), *rs = NULL;
        if (!name) continue;
        for (int k = 0; k < n; k++)
            if (strcmp(parts[k].m->rec.name, name) == 0 && pool_doc_job(&parts[k], p->id))
                rs = json_string_value(json_object_get(json_object_get(parts[k].doc, "run"), "state"));
        if (rs && (strcmp(rs, "failed") == 0 || strcmp(rs, "stopped") == 0)) {
            active = false;
            break;
        }
        if (!rs || strcmp(rs, "done") != 0) active = true;
    }
    release(parts, n);
    return active;
}

json_t *pool_submit(daemon_t *d, json_t *bundle)
{
    char err[512];
    if (pool_bundle_valid(bundle, err, sizeof err) != 0)
        return json_pack("{s:s}", "error", err);
    /* a job is its submitter's: this node submits its own only */
    const char *by = json_string_value(json_object_get(bundle, "submitted_by"));
    if (strcmp(by, d->name) != 0)
        return json_pack("{s:s}", "error", "the job names another submitter than this node");
    if (!pool_job_later(bundle, NULL, (int64_t)time(NULL)))
        return json_pack("{s:s}", "error", "the job's submitted_at is ahead of this node's "
                                           "clock");
    pool *p = d->pool;
    if (run_active(d))
        return json_pack("{s:s}", "error", "a job is running in this mesh; stop it first with "
                                           "shardnode train --state DIR --stop");
    /* the members it goes to: the base membership of its first epoch */
    json_t *names = json_array();
    const gossip_member *const *list;
    size_t n = gossip_members(d->g, &list);
    for (size_t i = 0; i < n; i++)
        if (list[i]->state == GOSSIP_ALIVE || list[i]->state == GOSSIP_SUSPECT)
            json_array_append_new(names, json_string(list[i]->rec.name));
    adopt(d, bundle, names);
    json_decref(names);
    p->next_doc_ms = 0;
    publish(d, daemon_now_ms());
    return json_pack("{s:s,s:I}", "job", p->id, "members", (json_int_t)n);
}

json_t *pool_stop(daemon_t *d)
{
    pool *p = d->pool;
    if (!p->bundle) return json_pack("{s:s}", "error", "no job in this mesh");
    p->stop = true;
    pool_stop_children(p);
    set_run(p, "stopped", NULL);
    publish(d, daemon_now_ms());
    return json_pack("{s:s}", "stopped", p->id);
}

/* Every member's job state, for status. */
json_t *pool_status_json(daemon_t *d)
{
    pool *p = d->pool;
    if (!p || !p->bundle) return json_null();
    part parts[POOL_MAX_PARTS];
    int n = gather(d, parts, POOL_MAX_PARTS);
    json_t *members = json_object();
    for (int i = 0; i < n; i++) {
        if (!pool_doc_job(&parts[i], p->id)) continue;
        json_t *doc = json_deep_copy(parts[i].doc);
        json_object_del(doc, "bundle");
        json_object_del(doc, "pool");
        json_object_set_new(doc, "state", json_string(gossip_state_name(parts[i].m->state)));
        json_object_set_new(doc, "address", json_string(parts[i].m->rec.address));
        json_object_set_new(members, parts[i].m->rec.name, doc);
    }
    release(parts, n);
    char path[DAEMON_PATH_MAX + 32], model[DAEMON_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/job.json", p->dir);
    pool_gather_dir(p->bundle, d->name, p->dir, model, sizeof model);
    json_t *out = json_string(model);
    return json_pack("{s:s,s:O,s:o,s:s,s:O,s:O,s:O,s:o}", "id", p->id, "submitted_by",
                     json_object_get(p->bundle, "submitted_by"), "out_dir", out,
                     "job_file", path, "committed", p->committed ? p->committed : json_null(),
                     "run", p->run ? p->run : json_null(), "stop", json_boolean(p->stop), "members",
                     members);
}

/* FETCH: "probe/N" (N zero bytes, for link measurement) and the stage files
 * under jobs/ID/out/ (export gathers them). Nothing else is served. */
int pool_fetch(daemon_t *d, const gossip_msg *m, gossip_msg *r, uint8_t **data)
{
    *data = NULL;
    r->type = GOSSIP_MSG_FETCH_REPLY;
    r->version = MESH_PROTOCOL_VERSION;
    memcpy(r->mesh_id, d->mesh_id, GOSSIP_MESH_ID_LEN);
    snprintf(r->from, sizeof r->from, "%s", d->name);
    r->ok = false;
    if (strncmp(m->path, "probe/", 6) == 0) {
        long nbytes = strtol(m->path + 6, NULL, 10);
        if (nbytes < 0 || nbytes > (long)GOSSIP_FETCH_CHUNK) {
            snprintf(r->reason, sizeof r->reason, "probe size %ld out of range", nbytes);
            return 0;
        }
        *data = calloc(1, (size_t)nbytes + 1);
        if (!*data) return -1;
        r->ok = true;
        r->total = (uint64_t)nbytes;
        r->offset = 0;
        r->data = *data;
        r->data_len = (size_t)nbytes;
        return 0;
    }
    /* jobs/<16 hex>/out/stage-<name>.safetensors */
    const char *s = m->path;
    bool ok = strncmp(s, "jobs/", 5) == 0 && strlen(s) > 5 + POOL_JOB_ID_LEN + 11;
    for (int i = 0; ok && i < POOL_JOB_ID_LEN; i++)
        ok = strchr("0123456789abcdef", s[5 + i]) != NULL;
    const char *rest = s + 5 + POOL_JOB_ID_LEN;
    ok = ok && strncmp(rest, "/out/stage-", 11) == 0;
    const char *name = rest + 11, *dot = ok ? strstr(name, ".safetensors") : NULL;
    if (ok && dot && strcmp(dot, ".safetensors") == 0) {
        char nm[MESH_NAME_MAX];
        size_t nl = (size_t)(dot - name);
        ok = nl > 0 && nl < sizeof nm;
        if (ok) {
            memcpy(nm, name, nl);
            nm[nl] = 0;
            ok = node_name_valid(nm);
        }
    } else {
        ok = false;
    }
    if (!ok) {
        snprintf(r->reason, sizeof r->reason, "%.200s: not a file this node serves", m->path);
        return 0;
    }
    char path[DAEMON_PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", d->state, m->path);
    int fd = pool_fetch_open(d->state, m->path);   /* no symbolic link is followed */
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(r->reason, sizeof r->reason, "%.200s: %s", m->path, strerror(errno));
        if (fd >= 0) close(fd);
        return 0;
    }
    uint64_t total = (uint64_t)sb.st_size;
    if (m->offset > total) {
        close(fd);
        snprintf(r->reason, sizeof r->reason, "offset %llu is past the end (%llu bytes)",
                 (unsigned long long)m->offset, (unsigned long long)total);
        return 0;
    }
    size_t want = total - m->offset < GOSSIP_FETCH_CHUNK ? (size_t)(total - m->offset)
                                                          : GOSSIP_FETCH_CHUNK;
    *data = malloc(want + 1);
    ssize_t got = *data ? pread(fd, *data, want, (off_t)m->offset) : -1;
    close(fd);
    if (got != (ssize_t)want) {
        snprintf(r->reason, sizeof r->reason, "%.200s: short read", m->path);
        return 0;
    }
    r->ok = true;
    r->total = total;
    r->offset = m->offset;
    r->data = *data;
    r->data_len = want;
    return 0;
}

/* pool.c — the driver of the pool core in the running node (docs/PROTOCOL.md,
 * "Jobs" and "Plan election"; docs/ARCHITECTURE.md, "The pool core"): it
 * hands the core the member view from gossip every POOL_TICK_MS, and does
 * what the core's actions say: checks a job's files, profiles this machine
 * and measures its links in child processes (so gossip never waits), saves
 * the vote and the state (fsynced), runs this node's stage as a
 * `shardnode train --cluster` child, gathers the model, and puts the
 * core's job document into the `job` text of the node's signed record.
 * Every decision is the core's (pool_core.c, pool_elect.c). */
#include "node_base.h"
#include "pool_internal.h"
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A child `shardnode ARGS...` with stdout and stderr appended to log;
 * keys: the path of its HELLO keys (SHARDNODE_HELLO_KEYS), or NULL;
 * niceness: added to the daemon's (0: the same). */
pid_t pool_spawn(daemon_t *d, const char *log, char *const *args, const char *keys,
                 int niceness)
{
    /* No signal may reach the child before its handlers are the default
     * ones: libevent's would write the signal into the daemon's own loop (a
     * SIGTERM to a child just forked stopped the daemon). */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        daemon_log(d, "pool: cannot start %s: %s", args[1], strerror(errno));
        return 0;
    }
    if (pid == 0) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int s = 1; s < 65; s++) sigaction(s, &dfl, NULL); /* EINVAL past the last */
        /* SIGUSR1 asks a stage to stop at a step boundary (a planned
         * switch); until `train` installs its handler it is ignored rather
         * than fatal (the core asks again until the stage ends) */
        signal(SIGUSR1, SIG_IGN);
        signal(SIGUSR2, SIG_IGN);   /* a thread count (pool.c asks again) */
        sigprocmask(SIG_SETMASK, &old, NULL);
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
        if (niceness > 0)
            (void)setpriority(PRIO_PROCESS, 0, getpriority(PRIO_PROCESS, 0) + niceness);
        /* this very binary, even when its file was replaced or removed
         * since the node started (an upgrade): /proc/self/exe still names
         * the inode that runs */
        execv("/proc/self/exe", args);
        _exit(127);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return pid;
}

/* The stage computes with the threads `shardnode set --threads` asked for
 * (at most those it started with: its scratch): asked by a queued SIGUSR2
 * carrying the count, again after each step that shows it has not taken
 * them yet (a signal sent before its handler was in place is ignored). */
static void ask_threads(daemon_t *d, const pool_progress *pr)
{
    pool *p = d->pool;
    int want = d->threads ? d->threads : d->cores;
    if (want > p->run_threads) want = p->run_threads;
    if (p->run_pid <= 0 || pr->threads <= 0 || pr->threads == want ||
        pr->step == p->threads_step)
        return;
    p->threads_step = pr->step;
    union sigval v = {.sival_int = want};
    if (sigqueue(p->run_pid, SIGUSR2, v) != 0)
        daemon_log(d, "pool: cannot ask the stage for %d threads: %s", want, strerror(errno));
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

void pool_kill_child(pid_t *pid)
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

static void stop_children(pool *p)
{
    pool_kill_child(&p->fetch_pid);
    pool_kill_child(&p->prof_pid);
    pool_kill_child(&p->probe_pid);
    pool_kill_child(&p->run_pid);
    pool_kill_child(&p->export_pid);
    pool_kill_child(&p->pull_pid);
    pool_kill_child(&p->ckpt_pid);
}

/* The last non-empty line of a file: only its tail is read, so a metrics
 * file of a long run costs the same each tick. */
void pool_last_line(const char *path, char *out, size_t len)
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

/* ---- the member view ---- */

static pool_cached *cached_of(pool *p, const char *name)
{
    for (int i = 0; i < p->ncache; i++)
        if (strcmp(p->cache[i]->name, name) == 0) return p->cache[i];
    if (p->ncache == p->capcache) {
        int cap = p->capcache ? 2 * p->capcache : 16;
        pool_cached **c = realloc(p->cache, (size_t)cap * sizeof *c);
        if (!c) return NULL;
        p->cache = c;
        p->capcache = cap;
    }
    pool_cached *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    snprintf(e->name, sizeof e->name, "%s", name);
    pool_doc_init(&e->doc);
    p->cache[p->ncache++] = e;
    return e;
}

static void cached_free(pool_cached *e)
{
    free(e->text);
    free(e->view_text);
    pool_doc_free(&e->doc);
    free(e);
}

/* The members as gossip has them, each job document read once per change
 * of its text (a document that does not read is logged and counts as none). */
static int build_view(daemon_t *d)
{
    pool *p = d->pool;
    const gossip_member *const *list;
    size_t n = gossip_members(d->g, &list);
    if ((int)n > p->capview) {
        pool_member *v = realloc(p->view, n * sizeof *v);
        if (!v) return 0;
        p->view = v;
        p->capview = (int)n;
    }
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        const gossip_member *m = list[i];
        pool_cached *e = cached_of(p, m->rec.name);
        if (!e) continue;
        if (!e->text || strcmp(e->text, m->rec.job) != 0) {
            char err[POOL_TEXT_MAX];
            free(e->text);
            free(e->view_text);
            e->view_text = NULL;
            pool_doc_free(&e->doc);
            e->text = strdup(m->rec.job);
            e->ok = false;
            e->serial = ++p->serial;
            if (m->rec.job[0] && pool_doc_from_text(m->rec.job, &e->doc, err, sizeof err) == 0) {
                e->ok = true;
                e->view_text = pool_doc_view_text(m->rec.name, &e->doc);
            } else if (m->rec.job[0]) {
                daemon_log(d, "pool: %s gossips a job document this node refuses: %s",
                           m->rec.name, err);
            }
        }
        p->view[k++] = (pool_member){.name = m->rec.name,
                                     .address = m->rec.address,
                                     .port = m->rec.port,
                                     .mem_free = m->rec.mem_free,
                                     .live = m->state == GOSSIP_ALIVE ||
                                             m->state == GOSSIP_SUSPECT,
                                     .suspect = m->state == GOSSIP_SUSPECT,
                                     .self = m->self,
                                     .doc = e->ok ? &e->doc : NULL,
                                     .serial = e->serial,
                                     .view_text = e->view_text};
    }
    p->nview = k;
    return k;
}

/* ---- what the actions do ---- */

/* STATE/jobs/ID/state.json through the atomic, fsynced writer. */
static int save_state(daemon_t *d, char *err, size_t errlen)
{
    pool *p = d->pool;
    if (!p->id[0]) return 0;
    char path[DAEMON_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/state.json", p->dir);
    pool_saved s;
    pool_core_saved(p->core, &s);
    json_t *j = pool_saved_to_json(&s);
    int rc = j ? node_write_json(path, j, 0644, err, errlen)
               : node_errf(err, errlen, "%s: out of memory", path);
    json_decref(j);
    return rc;
}

static void publish(daemon_t *d, int64_t now)
{
    pool *p = d->pool;
    char err[512];
    if (save_state(d, err, sizeof err) != 0) {
        if (strcmp(err, p->save_err) != 0) daemon_log(d, "pool: cannot save the state: %s", err);
        snprintf(p->save_err, sizeof p->save_err, "%s", err);
    } else {
        p->save_err[0] = 0;
    }
    char *text = pool_doc_to_text(pool_core_doc(p->core));
    if (gossip_set_job(d->g, text ? text : "", now, err, sizeof err) != 0)
        daemon_log(d, "pool: cannot publish the job state: %s", err);
    free(text);
}

/* Takes the core's job up here: its files, job.json, the saved state. */
static void setup(daemon_t *d)
{
    pool *p = d->pool;
    const pool_bundle *b = pool_core_bundle(p->core);
    if (!b) return;
    snprintf(p->id, sizeof p->id, "%s", b->id);
    snprintf(p->dir, sizeof p->dir, "%s/jobs/%s", d->state, p->id);
    p->copied = (pool_snap){0, 0, -1};   /* the new job's folder has no copied-* yet */
    p->lora = false;
    pool_setup s;
    pool_saved saved;
    memset(&s, 0, sizeof s);
    memset(&saved, 0, sizeof saved);
    s.ok = pool_bundle_check(b, d->state, pool_node_paths(d->node), &s.lacks, s.error,
                             sizeof s.error) == 0;
    char path[DAEMON_PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/job.json", p->dir);
    job_spec js;
    llama_config cfg;
    char err[POOL_TEXT_MAX];
    if (s.ok && job_load(&js, path, err, sizeof err) == 0) {
        if (llama_config_load(&cfg, js.config, err, sizeof err) == 0) {
            s.shape = p->shape = pool_job_shape(&cfg, &js);   /* LoRA and NF4 too */
            p->lora = js.has_lora;
            s.batch = js.batch;
            s.micro_batch = js.micro_batch;
            s.steps = js.steps;
            s.snapshot_every = js.snapshot_every;
            s.checkpoint_every = p->checkpoint_every = js.checkpoint_every;
            s.replan_gain = js.replan_gain;
            s.replan_min_steps = js.replan_min_steps;
        } else {
            s.ok = false;
            snprintf(s.error, sizeof s.error, "%s", err);
        }
        job_free(&js);
    } else if (s.ok) {
        s.ok = false;
        snprintf(s.error, sizeof s.error, "%s", err);
    }
    /* the job blob, served to the members that fetch it (its exact bytes:
     * they check its SHA-256) */
    char hash[65];
    char *blob = s.ok ? pool_core_blob_text(p->core, hash) : NULL;
    if (blob) {
        atomic_file f;
        snprintf(path, sizeof path, "%s/job-%s.json", p->dir, hash);
        if (atomic_file_begin(&f, path, err, sizeof err) != 0 ||
            (atomic_file_write(&f, blob, strlen(blob)), atomic_file_commit(&f, err, sizeof err)))
            daemon_log(d, "pool: cannot keep the job blob: %s", err);
        free(blob);
    }
    snprintf(path, sizeof path, "%s/state.json", p->dir);
    json_t *st = s.ok ? json_load_file(path, 0, NULL) : NULL;
    if (st && pool_saved_from_json(st, &saved, err, sizeof err) == 0) {
        s.saved = &saved;
        daemon_log(d, "pool: job %s resumed from %s", p->id, path);
    } else if (st) {
        daemon_log(d, "pool: %s: %s; not resumed", path, err);
    }
    json_decref(st);
    pool_core_setup_done(p->core, &s, &p->acts);
    pool_saved_free(&saved);
    pool_lacks_free(&s.lacks);
}

const char *pool_device(const daemon_t *d)
{
    return d->pool->lora || !d->device[0] ? "cpu" : d->device;
}

static void start_profile(daemon_t *d, const pool_action *a)
{
    pool *p = d->pool;
    char mb[32], seq[32], thr[32], cache[DAEMON_PATH_MAX], cfgp[DAEMON_PATH_MAX + 32],
        lock[DAEMON_PATH_MAX + 32], log[DAEMON_PATH_MAX + 32], out[DAEMON_PATH_MAX + 32];
    profile_lock_path(d, lock, sizeof lock);
    snprintf(log, sizeof log, "%s/measure.log", p->dir);
    snprintf(out, sizeof out, "%s/profile.json", p->dir);
    snprintf(cfgp, sizeof cfgp, "%s/config.json", p->dir);
    snprintf(cache, sizeof cache, "%s/profiles", d->state);
    snprintf(mb, sizeof mb, "%lld", (long long)a->micro_batch);
    snprintf(seq, sizeof seq, "%lld", (long long)a->seq_len);
    snprintf(thr, sizeof thr, "%d", d->threads);
    char *args[] = {"shardnode", "profile", "--model", cfgp, "--iters", "5",
                    "--micro-batch", mb, "--seq", seq,
                    "--cache", cache, "--out", out, "--lock", lock,
                    "--device", (char *)pool_device(d),
                    d->threads ? "--threads" : NULL, thr, NULL};
    p->prof_pid = pool_spawn(d, log, args, NULL, 0);
    if (!p->prof_pid) pool_core_profiled(p->core, NULL, "cannot start the profiler", &p->acts);
}


/* args[k..]: "NAME=ADDRESS:PORT" for each of a's targets (written into
 * targets), then the NULL that ends the argument list. */
static void target_args(const pool_action *a, char **args, int k,
                        char (*targets)[GOSSIP_ADDR_MAX + MESH_NAME_MAX + 16])
{
    for (int i = 0; i < a->ntargets; i++) {
        snprintf(targets[i], sizeof targets[i], "%s=%s:%d", a->targets[i].name,
                 a->targets[i].address, a->targets[i].port);
        args[k++] = targets[i];
    }
    args[k] = NULL;
}
/* Links to every target the core names (no cap: probe-links takes them
 * one after the other). */
static void start_probe(daemon_t *d, const pool_action *a)
{
    pool *p = d->pool;
    char **args = calloc((size_t)a->ntargets + 16, sizeof *args);
    char (*targets)[GOSSIP_ADDR_MAX + MESH_NAME_MAX + 16] =
        calloc((size_t)a->ntargets + 1, sizeof *targets);
    char lock[DAEMON_PATH_MAX + 32], out[DAEMON_PATH_MAX + 32], log[DAEMON_PATH_MAX + 32];
    char mesh_hex[2 * GOSSIP_MESH_ID_LEN + 1];
    if (!args || !targets) {
        free(args);
        free(targets);
        pool_core_links_measured(p->core, NULL, &p->acts);
        return;
    }
    profile_lock_path(d, lock, sizeof lock);
    snprintf(out, sizeof out, "%s/links.json", p->dir);
    snprintf(log, sizeof log, "%s/measure.log", p->dir);
    node_hex_encode(d->mesh_id, GOSSIP_MESH_ID_LEN, mesh_hex);
    int k = 0;
    char *fixed[] = {"shardnode", "probe-links", "--out", out, "--mesh", mesh_hex, "--from",
                     d->name, "--bind", d->overlay, "--lock", lock};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) args[k++] = fixed[i];
    target_args(a, args, k, targets);
    p->probe_pid = pool_spawn(d, log, args, NULL, 0);
    free(args);
    free(targets);
    if (!p->probe_pid) pool_core_links_measured(p->core, NULL, &p->acts);
}

static int read_blob(daemon_t *d, const char *path, const pool_job_ref *ref, pool_job_blob *blob);

/* The job blob a.job names: this node's own copy, else from the first of
 * a.targets that serves it. */
static void start_fetch(daemon_t *d, const pool_action *a)
{
    pool *p = d->pool;
    char **args = calloc((size_t)a->ntargets + 20, sizeof *args);
    char (*targets)[GOSSIP_ADDR_MAX + MESH_NAME_MAX + 16] =
        calloc((size_t)a->ntargets + 1, sizeof *targets);
    char out[DAEMON_PATH_MAX + 64], log[DAEMON_PATH_MAX + 32], rel[200];
    char mesh_hex[2 * GOSSIP_MESH_ID_LEN + 1];
    /* this node's own copy first: it keeps the blob of every job it took
     * up, so a restarted node takes its job up again at once */
    pool_job_blob own;
    char mine[DAEMON_PATH_MAX + 128];
    snprintf(mine, sizeof mine, "%s/jobs/%s/job-%s.json", d->state, a->job.id, a->job.blob);
    if (read_blob(d, mine, &a->job, &own) == 0) {
        free(args);
        free(targets);
        pool_core_fetched(p->core, &a->job, &own, &p->acts);
        pool_job_blob_free(&own);
        return;
    }
    if (!args || !targets || !a->ntargets) {
        free(args);
        free(targets);
        pool_core_fetched(p->core, &a->job, NULL, &p->acts);
        return;
    }
    snprintf(out, sizeof out, "%s/jobs", d->state);
    mkdir(out, 0700);
    snprintf(out, sizeof out, "%s/jobs/fetch-%s.json", d->state, a->job.blob);
    snprintf(log, sizeof log, "%s/jobs/fetch.log", d->state);
    snprintf(rel, sizeof rel, "jobs/%s/job-%s.json", a->job.id, a->job.blob);
    node_hex_encode(d->mesh_id, GOSSIP_MESH_ID_LEN, mesh_hex);
    int k = 0;
    char *fixed[] = {"shardnode", "fetch", "--out", out, "--mesh", mesh_hex, "--from",
                     d->name, "--bind", d->overlay, "--path", rel};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) args[k++] = fixed[i];
    target_args(a, args, k, targets);
    pool_kill_child(&p->fetch_pid);
    p->fetching = a->job;
    p->fetch_pid = pool_spawn(d, log, args, NULL, 0);
    free(args);
    free(targets);
    if (!p->fetch_pid) pool_core_fetched(p->core, &a->job, NULL, &p->acts);
}

/* A job blob read from path: its bytes must have the SHA-256 ref names.
 * 0 with *blob filled (pool_job_blob_free it), -1 otherwise. */
static int read_blob(daemon_t *d, const char *path, const pool_job_ref *ref, pool_job_blob *blob)
{
    char err[POOL_TEXT_MAX];
    json_t *j = NULL;
    int rc = -1;
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= (long)GOSSIP_FETCH_CHUNK &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdlen = 0;
        char hex[65];
        buf[n] = 0;
        if (EVP_Digest(buf, (size_t)n, md, &mdlen, EVP_sha256(), NULL) && mdlen == 32) {
            for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
            if (strcmp(hex, ref->blob) == 0 && (j = json_loads(buf, 0, NULL)) &&
                pool_job_blob_from_json(j, blob, err, sizeof err) == 0)
                rc = 0;
            else if (j)
                daemon_log(d, "pool: the blob of job %s does not read: %s", ref->id, err);
        }
    }
    if (f) fclose(f);
    free(buf);
    json_decref(j);
    return rc;
}

/* A fetched job blob (the child ended with status st). */
static void fetched(daemon_t *d, int st)
{
    pool *p = d->pool;
    char path[DAEMON_PATH_MAX + 64];
    pool_job_blob blob;
    snprintf(path, sizeof path, "%s/jobs/fetch-%s.json", d->state, p->fetching.blob);
    bool ok = st == 0 && read_blob(d, path, &p->fetching, &blob) == 0;
    unlink(path);
    pool_core_fetched(p->core, &p->fetching, ok ? &blob : NULL, &p->acts);
    if (ok) pool_job_blob_free(&blob);
}

static void start_gather(daemon_t *d)
{
    pool *p = d->pool;
    char log[DAEMON_PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/export.log", p->dir);
    char *args[] = {"shardnode", "export", "--state", d->state, NULL};
    p->export_pid = pool_spawn(d, log, args, NULL, 0);
    if (!p->export_pid) pool_core_gathered(p->core, false, &p->acts);
}

/* Does what the core asked, in order; answers append to the same list. */
static void execute(daemon_t *d, int64_t now)
{
    pool *p = d->pool;
    for (int i = 0; i < p->acts.n; i++) {
        pool_action a = p->acts.a[i];   /* the list may grow (and move) meanwhile */
        char err[512];
        switch (a.type) {
        case POOL_ACT_LOG: daemon_log(d, "%s", a.text); break;
        case POOL_ACT_PUBLISH: publish(d, now); break;
        case POOL_ACT_SETUP: setup(d); break;
        case POOL_ACT_KILL: stop_children(p); break;
        case POOL_ACT_PROFILE: start_profile(d, &a); break;
        case POOL_ACT_PROBE: start_probe(d, &a); break;
        case POOL_ACT_SAVE_VOTE: {
            /* one vote per epoch across restarts: it counts only once saved */
            int rc = save_state(d, err, sizeof err);
            pool_core_vote_saved(p->core, a.epoch, rc == 0, err, &p->acts);
            break;
        }
        case POOL_ACT_RUN: pool_start_run(d, &a); break;
        case POOL_ACT_PULL: pool_start_pull(d, &a); break;
        case POOL_ACT_HANDOVER:
            /* the stage stops at the next step boundary (engine.c), writes
             * the snapshot of that step and exits; reap() answers */
            if (p->run_pid > 0) kill(p->run_pid, SIGUSR1);
            break;
        case POOL_ACT_CHECKPOINT: pool_start_checkpoint(d, &a); break;
        case POOL_ACT_GATHER: start_gather(d); break;
        case POOL_ACT_FETCH: start_fetch(d, &a); break;
        }
    }
    pool_actions_clear(&p->acts);
}

/* Each link whose pair the mesh relays now names its relay (the planner
 * counts it as two hops sharing the relay's upload: pool_links.c); a
 * relayed member of the view that probe-links could not measure is listed
 * with bandwidth 0, so the planner takes its hops, not the typical link. */
static void relayed_links(daemon_t *d, pool_links *links)
{
    const gossip_member *const *ms;
    size_t n = d->g ? gossip_members(d->g, &ms) : 0;
    for (int i = 0; i < links->n; i++) links->l[i].via[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        if (ms[k]->self || ms[k]->displaced) continue;
        const gossip_member *via = daemon_relay_via(d, ms[k]);
        if (!via || strcmp(via->rec.name, ms[k]->rec.name) == 0) continue;
        pool_link *l = NULL;
        for (int i = 0; i < links->n && !l; i++)
            if (strcmp(links->l[i].name, ms[k]->rec.name) == 0) l = &links->l[i];
        if (l) {
            snprintf(l->via, sizeof l->via, "%s", via->rec.name);
            continue;
        }
        bool in_view = false;
        for (int v = 0; v < d->pool->nview && !in_view; v++)
            in_view = !d->pool->view[v].self && d->pool->view[v].doc &&
                      strcmp(d->pool->view[v].name, ms[k]->rec.name) == 0;
        if (in_view) pool_links_add_via(links, ms[k]->rec.name, 0, 0, via->rec.name);
    }
}

/* The children that ended, and the stage's progress, told to the core. */
static void reap(daemon_t *d)
{
    pool *p = d->pool;
    char path[DAEMON_PATH_MAX + 32], line[800], err[512];
    int st;
    if (reaped(&p->prof_pid, &st)) {
        pool_profile prof;
        snprintf(path, sizeof path, "%s/profile.json", p->dir);
        if (st == 0 && pool_profile_from_file(path, &p->shape, &prof, err, sizeof err) == 0) {
            pool_core_profiled(p->core, &prof, NULL, &p->acts);
        } else {
            if (st != 0) {
                snprintf(path, sizeof path, "%s/measure.log", p->dir);
                pool_last_line(path, err, sizeof err);
            }
            pool_core_profiled(p->core, NULL, err, &p->acts);
        }
    }
    if (reaped(&p->probe_pid, &st)) {
        pool_links links = {0, NULL};
        snprintf(path, sizeof path, "%s/links.json", p->dir);
        json_t *lj = json_load_file(path, 0, NULL);
        if (!lj || pool_links_from_json(lj, &links, err, sizeof err) != 0)
            memset(&links, 0, sizeof links);   /* nothing measured: the defaults */
        json_decref(lj);
        relayed_links(d, &links);
        pool_core_links_measured(p->core, &links, &p->acts);
        pool_links_free(&links);
    }
    if (p->run_pid > 0) {
        pool_progress pr;
        int ended = reaped(&p->run_pid, &st);
        snprintf(path, sizeof path, "%s/metrics.jsonl", p->dir);
        pool_last_line(path, line, sizeof line);
        if (pool_run_progress_from_line(line, &pr) == 0) {
            pool_core_run_progress(p->core, &pr);
            if (!ended) ask_threads(d, &pr);
        }
        if (ended) {
            snprintf(path, sizeof path, "%s/train.log", p->dir);
            pool_last_line(path, line, sizeof line);
            pool_core_run_ended(p->core, st == 0, st == 0 ? NULL : line, &p->acts);
        }
    }
    if (reaped(&p->export_pid, &st)) pool_core_gathered(p->core, st == 0, &p->acts);
    if (reaped(&p->fetch_pid, &st)) fetched(d, st);
    if (reaped(&p->ckpt_pid, &st)) {
        snprintf(path, sizeof path, "%s/checkpoint.log", p->dir);
        pool_last_line(path, line, sizeof line);
        pool_core_checkpointed(p->core, p->ckpt_step, st == 0, st == 0 ? NULL : line, &p->acts);
    }
    if (reaped(&p->pull_pid, &st)) {
        snprintf(path, sizeof path, "%s/snap.log", p->dir);
        pool_last_line(path, line, sizeof line);
        pool_core_pulled(p->core, st == 0, st == 0 ? NULL : line, &p->acts);
    }
}

/* ---- the daemon's entry points ---- */

int pool_open(daemon_t *d)
{
    d->pool = calloc(1, sizeof *d->pool);
    if (!d->pool) return -1;
    /* d->cores: the devices record's, detected at this start (daemon_state.c) */
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
    pool_core_config cfg = {.name = d->name, .no_compute = d->no_compute, .host = d->host_id,
                            .cores = d->cores, .threads = d->threads, .switches = true};
    d->pool->core = pool_core_create(&cfg);
    if (!d->pool->core) {
        free(d->pool);
        d->pool = NULL;
        return -1;
    }
    return 0;
}

void pool_close(daemon_t *d)
{
    pool *p = d->pool;
    if (!p) return;
    stop_children(p);
    pool_core_destroy(p->core);
    for (int i = 0; i < p->ncache; i++) cached_free(p->cache[i]);
    free(p->cache);
    free(p->view);
    pool_actions_free(&p->acts);
    free(p);
    d->pool = NULL;
}

void pool_wake(daemon_t *d)
{
    if (d->pool) d->pool->next_ms = 0;
}

bool pool_tick(daemon_t *d, int64_t now)
{
    pool *p = d->pool;
    if (!p || now < p->next_ms) return false;
    p->next_ms = now + POOL_TICK_MS;
    reap(d);
    pool_scan_snaps(d);
    int n = build_view(d);
    pool_core_step(p->core, p->view, n, now, (int64_t)time(NULL), &p->acts);
    execute(d, now);
    pool_note_recovery(d);
    pool_write_copied(d);
    if (pool_core_due(p->core)) {   /* a job's blob came: take it up now */
        n = build_view(d);
        pool_core_step(p->core, p->view, n, now, (int64_t)time(NULL), &p->acts);
        execute(d, now);
    }
    return true;
}

bool pool_depart(daemon_t *d)
{
    pool *p = d->pool;
    if (!p) return false;
    int64_t now = daemon_now_ms();
    int n = build_view(d);
    bool wait = pool_core_depart(p->core, p->view, n);
    /* its document says at once that it computes nothing: the others
     * plan without it */
    pool_core_step(p->core, p->view, n, now, (int64_t)time(NULL), &p->acts);
    execute(d, now);
    return wait;
}

json_t *pool_set_threads(daemon_t *d, int n)
{
    pool *p = d->pool;
    d->threads = n;
    daemon_log(d, "computes with %d thread%s from now on (shardnode set)", n ? n : d->cores,
               (n ? n : d->cores) == 1 ? "" : "s");
    bool stage = p && p->run_pid > 0;
    int now = n ? n : d->cores;
    if (stage && now > p->run_threads) now = p->run_threads;
    if (p) {
        int64_t t = daemon_now_ms();
        pool_core_set_threads(p->core, n, &p->acts);
        execute(d, t);
        if (stage) {
            p->threads_step = -1;
            union sigval v = {.sival_int = now};
            (void)sigqueue(p->run_pid, SIGUSR2, v);
        }
    }
    return json_pack("{s:i,s:b,s:i}", "threads", n ? n : d->cores, "stage", stage,
                     "stage_threads", stage ? now : 0);
}

bool pool_departed(daemon_t *d)
{
    pool *p = d->pool;
    if (!p) return true;
    int n = build_view(d);
    return pool_core_departed(p->core, p->view, n);
}

json_t *pool_submit(daemon_t *d, json_t *bundle, const char *resume)
{
    pool *p = d->pool;
    pool_bundle b;
    char err[768];
    long long from = 0;
    if (pool_bundle_from_json(bundle, &b, err, sizeof err) != 0)
        return json_pack("{s:s}", "error", err);
    /* the checkpoint is checked before the job goes anywhere */
    if (resume && (resume[0] != '/' || pool_checkpoint_place(resume, NULL, &from, err,
                                                             sizeof err) != 0)) {
        pool_bundle_free(&b);
        return json_pack("{s:s}", "error", resume[0] != '/' ? "\"resume\" must be an absolute "
                                                             "path" : err);
    }
    int64_t now = daemon_now_ms();
    int n = build_view(d);
    int rc = pool_core_submit(p->core, &b, p->view, n, now, (int64_t)time(NULL), &p->acts, err,
                              sizeof err);
    pool_bundle_free(&b);
    execute(d, now);
    if (rc != 0) return json_pack("{s:s}", "error", err);
    if (resume) {
        /* the checkpoint's shards become this member's snapshots of the new
         * job: its first plan resumes after their step (pool_recover.c) */
        char snap[DAEMON_PATH_MAX + 32];
        snprintf(snap, sizeof snap, "%s/snap", p->dir);
        if (!p->id[0] || pool_checkpoint_place(resume, snap, &from, err, sizeof err) != 0) {
            pool_core_stop(p->core, now, &p->acts);
            execute(d, now);
            return json_pack("{s:s}", "error", p->id[0] ? err : "the job was not set up here");
        }
        pool_scan_snaps(d);
        daemon_log(d, "pool: job %s resumes from the pool checkpoint %s (step %lld)", p->id,
                   resume, from);
    }
    const gossip_member *const *list;
    size_t members = gossip_members(d->g, &list);
    return json_pack("{s:s,s:I}", "job", pool_core_doc(p->core)->id, "members",
                     (json_int_t)members);
}

json_t *pool_stop(daemon_t *d)
{
    pool *p = d->pool;
    int64_t now = daemon_now_ms();
    if (pool_core_stop(p->core, now, &p->acts) != 0)
        return json_pack("{s:s}", "error", "no job in this mesh");
    execute(d, now);
    return json_pack("{s:s}", "stopped", pool_core_doc(p->core)->id);
}

/* Every member's job state, for status. */
json_t *pool_status_json(daemon_t *d)
{
    pool *p = d->pool;
    const pool_bundle *b = p ? pool_core_bundle(p->core) : NULL;
    if (!b) return json_null();
    build_view(d);   /* the documents as gossip has them now */
    const pool_doc *own = pool_core_doc(p->core);
    const pool_plan *c = pool_core_committed(p->core);
    const gossip_member *const *list;
    size_t n = gossip_members(d->g, &list);
    char path[DAEMON_PATH_MAX + 32], model[DAEMON_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/job.json", p->dir);
    pool_bundle_gather_dir(b, d->name, p->dir, model, sizeof model);
    pool_status s;
    memset(&s, 0, sizeof s);
    snprintf(s.id, sizeof s.id, "%s", own->id);
    snprintf(s.submitted_by, sizeof s.submitted_by, "%s", b->submitted_by);
    s.out_dir = model;
    s.job_file = path;
    s.stop = own->stop;
    if (c) {
        s.has_committed = true;
        s.committed = *c;   /* borrowed */
    }
    s.has_run = (own->has & POOL_HAS_RUN) != 0;
    s.run = own->run;
    s.members = calloc(n + 1, sizeof *s.members);
    for (size_t i = 0; s.members && i < n; i++) {
        pool_cached *e = cached_of(p, list[i]->rec.name);
        if (!e || !e->ok || !e->text || strcmp(e->text, list[i]->rec.job) != 0 ||
            strcmp(e->doc.id, own->id) != 0)
            continue;
        pool_status_member *m = &s.members[s.nmembers++];
        snprintf(m->name, sizeof m->name, "%s", list[i]->rec.name);
        snprintf(m->state, sizeof m->state, "%s", gossip_state_name(list[i]->state));
        snprintf(m->address, sizeof m->address, "%s", list[i]->rec.address);
        m->doc = &e->doc;   /* borrowed */
    }
    json_t *j = pool_status_to_json(&s);
    free(s.members);
    return j;
}

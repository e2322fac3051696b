/* pool_run.c — a member's stage of a committed plan, for the pool's driver
 * (pool.c): the files it runs from (docs/FORMATS.md, "State directory":
 * job-eE.json, the job at the plan's micro-batch; cluster-eE.json, the
 * stages at their overlay addresses; hello-eE.json, the HELLO keys of this
 * stage with every other, 0600), its start (through `shardnode
 * stage-resume` when the plan resumes after a step), its snapshots told to
 * the core, a buddy's copies, the submitter's pool checkpoints, and a
 * finished recovery's line in metrics.jsonl (docs/ARCHITECTURE.md,
 * "Recovery"). */
#include "node_base.h"
#include "pool_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
static int write_hello_keys(daemon_t *d, const pool_plan *c, const char *run, const char *path,
                            char *err, size_t errlen)
{
    const gossip_member *const *list;
    size_t n = gossip_members(d->g, &list);
    json_t *keys = json_object();
    for (int s = 0; s < c->nstages; s++)
        for (int h = 0; h < c->stage[s].nholders; h++) {
            const char *name = c->stage[s].holder[h].name;
            if (strcmp(name, d->name) == 0) continue;
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

/* job-eE.json (the job at the plan's micro-batch), cluster-eE.json (the
 * stages at their overlay addresses) and hello-eE.json. */
int pool_write_run_files(daemon_t *d, const pool_plan *c, char *job_path, char *cl_path,
                         char *keys_path, size_t len, char *err, size_t errlen)
{
    pool *p = d->pool;
    long long e = (long long)c->epoch;
    char src[DAEMON_PATH_MAX + 32];
    snprintf(src, sizeof src, "%s/job.json", p->dir);
    snprintf(job_path, len, "%s/job-e%lld.json", p->dir, e);
    snprintf(cl_path, len, "%s/cluster-e%lld.json", p->dir, e);
    snprintf(keys_path, len, "%s/hello-e%lld.json", p->dir, e);
    json_t *job = node_load_json(src, err, errlen);
    if (!job) return -1;
    json_object_set_new(job, "micro_batch", json_integer((json_int_t)c->mb));
    if (c->snapshot_every > 0)
        json_object_set_new(job, "snapshot_every", json_integer((json_int_t)c->snapshot_every));
    json_t *nodes = json_array();
    for (int s = 0; s < c->nstages; s++)
        json_array_append_new(nodes, json_pack("{s:s,s:s,s:i,s:[i,i]}", "name",
                                               c->stage[s].holder[0].name, "host",
                                               c->stage[s].holder[0].address, "port",
                                               POOL_DATA_PORT, "layers", c->stage[s].layer_begin,
                                               c->stage[s].layer_end));
    char run[64];
    snprintf(run, sizeof run, "job-%s-e%lld", p->id, e);
    json_t *cl = json_pack("{s:s,s:s,s:i,s:o}", "run", run, "schedule", "1f1b", "timeout_ms",
                           60000, "nodes", nodes);
    int rc = 0;
    if (node_write_json(job_path, job, 0644, err, errlen) ||
        node_write_json(cl_path, cl, 0644, err, errlen) ||
        write_hello_keys(d, c, run, keys_path, err, errlen))
        rc = -1;
    json_decref(job);
    json_decref(cl);
    return rc;
}

/* ---- this member's stage: its start, snapshots, copies and checkpoints ---- */

typedef char piece_text[GOSSIP_ADDR_MAX + MESH_NAME_MAX + 96];

/* args[k..]: `shardnode stage-resume` and its options for the snapshots a
 * names (written into pieces), into folder `into`; returns the new k. */
static int stage_resume_args(daemon_t *d, const pool_action *a, char **args, int k,
                             piece_text *pieces, char *mesh_hex, char *snap, char *into)
{
    pool *p = d->pool;
    node_hex_encode(d->mesh_id, GOSSIP_MESH_ID_LEN, mesh_hex);
    char *fixed[] = {"shardnode", "stage-resume", "--mesh", mesh_hex, "--from", d->name,
                     "--bind", d->overlay, "--job-id", p->id, "--snap-dir", snap,
                     "--into", into};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) args[k++] = fixed[i];
    for (int i = 0; i < a->ntargets; i++) {
        const pool_snap *x = &a->snaps[i];
        snprintf(pieces[i], sizeof pieces[i], "L%d-%d-s%lld.safetensors=%s=%s:%d",
                 x->layer_begin, x->layer_end, (long long)x->step, a->targets[i].name,
                 a->targets[i].address, a->targets[i].port);
        args[k++] = "--piece";
        args[k++] = pieces[i];
    }
    return k;
}

/* This node's stage of the committed plan: `shardnode train --cluster`,
 * snapshotting into STATE/jobs/ID/snap; a stage that starts after a step
 * (a->step: a recovery, or a planned switch) starts it through `shardnode
 * stage-resume`, which gathers the snapshots a's targets name first. */
void pool_start_run(daemon_t *d, const pool_action *a)
{
    pool *p = d->pool;
    const pool_plan *c = pool_core_committed(p->core);
    char job_path[DAEMON_PATH_MAX + 64], cl_path[DAEMON_PATH_MAX + 64],
        keys_path[DAEMON_PATH_MAX + 64], err[1024];
    if (!c || pool_write_run_files(d, c, job_path, cl_path, keys_path, sizeof job_path, err,
                              sizeof err) != 0) {
        pool_core_run_ended(p->core, false, c ? err : "no committed plan", &p->acts);
        return;
    }
    char log[DAEMON_PATH_MAX + 32], metrics[DAEMON_PATH_MAX + 32], thr[32],
        snap[DAEMON_PATH_MAX + 32], into[DAEMON_PATH_MAX + 64];
    snprintf(log, sizeof log, "%s/train.log", p->dir);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", p->dir);
    snprintf(snap, sizeof snap, "%s/snap", p->dir);
    mkdir(snap, 0700);
    snprintf(thr, sizeof thr, "%d", d->threads);
    /* metrics.jsonl keeps every epoch's steps and the recoveries' lines */
    char *train[] = {"shardnode", "train", "--job", job_path, "--cluster", cl_path, "--node",
                     d->name, "--metrics", metrics, "--append-metrics", "--snapshots", snap,
                     "--wait-copies", "--device", (char *)pool_device(d),
                     d->threads ? "--threads" : NULL, thr, NULL};
    int ntrain = d->threads ? 18 : 16;
    char **args = calloc((size_t)(26 + 2 * a->ntargets + ntrain), sizeof *args);
    piece_text *pieces = calloc((size_t)a->ntargets + 1, sizeof *pieces);
    char mesh_hex[2 * GOSSIP_MESH_ID_LEN + 1];
    if (!args || !pieces) {
        free(args);
        free(pieces);
        pool_core_run_ended(p->core, false, "out of memory", &p->acts);
        return;
    }
    int k = 0, s = pool_plan_stage_of(c, d->name);
    char need[32];
    if (a->step > 0) {
        snprintf(into, sizeof into, "%s/resume-e%lld", p->dir, (long long)c->epoch);
        k = stage_resume_args(d, a, args, k, pieces, mesh_hex, snap, into);
        /* only the layers this stage takes of the others' snapshots */
        if (s >= 0) {
            snprintf(need, sizeof need, "%d-%d", c->stage[s].layer_begin, c->stage[s].layer_end);
            args[k++] = "--need";
            args[k++] = need;
        }
        args[k++] = "--";
    }
    for (int i = 0; i < ntrain; i++) args[k++] = train[i];
    args[k] = NULL;
    p->run_pid = pool_spawn(d, log, args, keys_path, 0);
    p->run_threads = d->threads ? d->threads : d->cores;
    p->threads_step = -1;
    free(args);
    free(pieces);
    if (!p->run_pid)
        pool_core_run_ended(p->core, false, "cannot start the training process", &p->acts);
}

/* A buddy's copy: the snapshot a names, from its stage's holder into this
 * node's snapshot folder (`shardnode fetch`: a part file renamed once
 * complete, so the previous copy stays until the new one is whole), at a
 * lower CPU priority: insurance gives way to this member's own stage. */
void pool_start_pull(daemon_t *d, const pool_action *a)
{
    pool *p = d->pool;
    char out[DAEMON_PATH_MAX + 128], log[DAEMON_PATH_MAX + 32], rel[POOL_JOB_ID_LEN + 128],
        file[96], target[GOSSIP_ADDR_MAX + MESH_NAME_MAX + 16];
    char mesh_hex[2 * GOSSIP_MESH_ID_LEN + 1];
    const pool_snap *x = &a->snaps[0];
    snprintf(file, sizeof file, "L%d-%d-s%lld.safetensors", x->layer_begin, x->layer_end,
             (long long)x->step);
    snprintf(out, sizeof out, "%s/snap", p->dir);
    mkdir(out, 0700);
    snprintf(out, sizeof out, "%s/snap/%s", p->dir, file);
    snprintf(log, sizeof log, "%s/snap.log", p->dir);
    snprintf(rel, sizeof rel, "jobs/%s/snap/%s", p->id, file);
    snprintf(target, sizeof target, "%s=%s:%d", a->targets[0].name, a->targets[0].address,
             a->targets[0].port);
    node_hex_encode(d->mesh_id, GOSSIP_MESH_ID_LEN, mesh_hex);
    char rate[32];
    snprintf(rate, sizeof rate, "%lld", (long long)a->rate);
    /* paced (pool_core.h, POOL_PULL_SHARE) unless the core gave no rate */
    char *args[] = {"shardnode", "fetch", "--out", out, "--mesh", mesh_hex, "--from", d->name,
                    "--bind", d->overlay, "--path", rel, "--rate", rate, target, NULL};
    if (a->rate <= 0) {
        args[12] = target;
        args[13] = NULL;
    }
    pool_kill_child(&p->pull_pid);
    p->pulling = *x;
    p->pull_pid = pool_spawn(d, log, args, NULL, POOL_COPY_NICE);
    if (!p->pull_pid) pool_core_pulled(p->core, false, "cannot start the copy", &p->acts);
}

/* The submitter's pool checkpoint of step a.step: `shardnode stage-resume
 * --checkpoint` gathers the snapshots a names into the job's
 * out_dir/checkpoints/step-N/ and writes its manifest last. */
void pool_start_checkpoint(daemon_t *d, const pool_action *a)
{
    pool *p = d->pool;
    const pool_bundle *b = pool_core_bundle(p->core);
    char into[DAEMON_PATH_MAX + 64], man[DAEMON_PATH_MAX + 96], snap[DAEMON_PATH_MAX + 32],
        log[DAEMON_PATH_MAX + 32], step[32], mesh_hex[2 * GOSSIP_MESH_ID_LEN + 1];
    if (!b || !b->out_dir) {
        pool_core_checkpointed(p->core, a->step, false, "the job has no out_dir", &p->acts);
        return;
    }
    snprintf(into, sizeof into, "%s", b->out_dir);
    mkdir(into, 0755);
    snprintf(into, sizeof into, "%s/checkpoints", b->out_dir);
    mkdir(into, 0755);
    snprintf(into, sizeof into, "%s/checkpoints/step-%lld", b->out_dir, (long long)a->step);
    snprintf(man, sizeof man, "%s/manifest.json", into);
    if (access(man, F_OK) == 0) {   /* written before (a restart): kept as it is */
        pool_core_checkpointed(p->core, a->step, true, NULL, &p->acts);
        return;
    }
    snprintf(snap, sizeof snap, "%s/snap", p->dir);
    snprintf(log, sizeof log, "%s/checkpoint.log", p->dir);
    snprintf(step, sizeof step, "%lld", (long long)a->step);
    char **args = calloc((size_t)(24 + 2 * a->ntargets), sizeof *args);
    piece_text *pieces = calloc((size_t)a->ntargets + 1, sizeof *pieces);
    if (!args || !pieces) {
        free(args);
        free(pieces);
        pool_core_checkpointed(p->core, a->step, false, "out of memory", &p->acts);
        return;
    }
    int k = stage_resume_args(d, a, args, 0, pieces, mesh_hex, snap, into);
    args[k++] = "--checkpoint";
    args[k++] = step;
    args[k] = NULL;
    pool_kill_child(&p->ckpt_pid);
    p->ckpt_step = a->step;
    p->ckpt_pid = pool_spawn(d, log, args, NULL, 0);
    free(args);
    free(pieces);
    if (!p->ckpt_pid)
        pool_core_checkpointed(p->core, a->step, false, "cannot start the copy", &p->acts);
}

/* The snapshots in STATE/jobs/ID/snap: told to the core (newest first, at
 * most POOL_SNAPS_MAX); superseded ones are removed (snapshot_superseded). */
void pool_scan_snaps(daemon_t *d)
{
    pool *p = d->pool;
    if (!p->id[0]) return;
    char dir[DAEMON_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/snap", p->dir);
    pool_snaps all = {0}, held = {0};
    pool_snap list[256];
    int n = 0;
    DIR *dh = opendir(dir);
    struct dirent *de;
    while (dh && (de = readdir(dh)) && n < 256) {
        int b, e, len = 0;
        long long st;
        if (sscanf(de->d_name, "L%d-%d-s%lld.safetensors%n", &b, &e, &st, &len) == 3 &&
            (size_t)len == strlen(de->d_name) && b >= 0 && e >= b && st >= 1)
            list[n++] = (pool_snap){b, e, (int64_t)st};
    }
    if (dh) closedir(dh);
    /* newest first */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && list[j - 1].step < list[j].step; j--) {
            pool_snap t = list[j];
            list[j] = list[j - 1];
            list[j - 1] = t;
        }
    /* the interval of the committed plan's snapshots (0: none known) */
    const pool_plan *pl = pool_core_committed(p->core);
    long h = pl ? job_snapshot_interval((long)pl->snapshot_every) : 0;
    for (int i = 0; i < n; i++) {
        /* a copy of a range goes once superseded: two newer ones at the
         * plan's interval, and not the newest of a pool checkpoint's step
         * (its submitter copies it) */
        long steps[256];
        int same = 0;
        for (int j = 0; j < n; j++)
            if (list[j].layer_begin == list[i].layer_begin &&
                list[j].layer_end == list[i].layer_end)
                steps[same++] = (long)list[j].step;
        if (snapshot_superseded(steps, same, (long)list[i].step, h, (long)p->checkpoint_every)) {
            char path[DAEMON_PATH_MAX + 128];
            snprintf(path, sizeof path, "%s/L%d-%d-s%lld.safetensors", dir, list[i].layer_begin,
                     list[i].layer_end, (long long)list[i].step);
            unlink(path);
            continue;
        }
        if (all.n < POOL_SNAPS_MAX) all.s[all.n++] = list[i];
    }
    held = all;
    pool_core_snapshots(p->core, &held);
}

void pool_write_copied(daemon_t *d)
{
    pool *p = d->pool;
    pool_snap x;
    if (!p->id[0] || !pool_core_copied(p->core, &x)) return;
    if (x.layer_begin == p->copied.layer_begin && x.layer_end == p->copied.layer_end &&
        x.step == p->copied.step)
        return;
    char path[DAEMON_PATH_MAX + 96], part[DAEMON_PATH_MAX + 112], text[32];
    snprintf(path, sizeof path, "%s/snap", p->dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/snap/copied-L%d-%d", p->dir, x.layer_begin, x.layer_end);
    snprintf(part, sizeof part, "%s.part", path);
    if (x.step == POOL_COPIED_NONE) snprintf(text, sizeof text, "none\n");
    else snprintf(text, sizeof text, "%lld\n", (long long)x.step);
    /* written whole, then renamed: the stage never reads half a number */
    int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    size_t len = strlen(text);
    bool ok = fd >= 0 && write(fd, text, len) == (ssize_t)len;
    if (fd >= 0) ok &= close(fd) == 0;
    if (!ok || rename(part, path) != 0) {
        daemon_log(d, "pool: %s: cannot write it: %s", path, strerror(errno));
        unlink(part);
        return;
    }
    p->copied = x;
}

/* A recovery this member took part in, once its new plan did a step: one
 * line of the member's metrics.jsonl (docs/FORMATS.md, "Metrics"). */
void pool_note_recovery(daemon_t *d)
{
    pool *p = d->pool;
    const pool_doc *doc = pool_core_doc(p->core);
    if (!p->id[0] || !(doc->has & POOL_HAS_REC) || doc->rec.ms < 0) return;
    const pool_recovery *r = &doc->rec;
    if (r->n == p->noted_rec && strcmp(p->noted_job, p->id) == 0) return;
    p->noted_rec = r->n;
    snprintf(p->noted_job, sizeof p->noted_job, "%s", p->id);
    char path[DAEMON_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", p->dir);
    json_t *j = json_pack("{s:{s:s,s:I,s:I,s:I,s:I,s:f}}", "recovery", "lost", r->lost, "at",
                          (json_int_t)r->at, "from", (json_int_t)r->from, "redone",
                          (json_int_t)(r->at > r->from ? r->at - r->from : 0), "epoch",
                          (json_int_t)r->epoch, "seconds", (double)r->ms / 1e3);
    char *line = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    int fd = line ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644) : -1;
    if (fd >= 0) {
        size_t n = strlen(line);
        line[n] = '\n';   /* the NUL becomes the line's end: one write, appended whole */
        if (write(fd, line, n + 1) != (ssize_t)(n + 1))
            daemon_log(d, "pool: %s: cannot record the recovery: %s", path, strerror(errno));
        close(fd);
    }
    free(line);
}

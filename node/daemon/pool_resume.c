/* pool_resume.c — `shardnode stage-resume`, run by the daemon to start its
 * stage of a plan that resumes after a step (a recovery, docs/ARCHITECTURE.md
 * "Recovery"): it gathers the snapshots the stage starts from — this
 * node's own copies from its snapshot folder, the others fetched member to
 * member over the overlay (FETCH of jobs/ID/snap/..., into the snapshot
 * folder, where they count as this node's copies too) — links them into a
 * folder of their own and becomes `shardnode train ... --resume-from` it.
 *
 *   shardnode stage-resume --mesh HEX --from NAME [--bind OVERLAY] --job-id ID
 *       --snap-dir DIR --into DIR [--need BEGIN-END] --piece FILE=NAME=ADDR:PORT ...
 *       -- TRAIN-ARGS...
 *
 * A piece whose NAME is --from's is this node's own. With --need (the
 * layers [BEGIN, END) of the stage it starts), a piece of another member
 * that holds layers outside them is fetched in part: the snapshot of the
 * layers it shares with the stage (`shardnode fetch --layers`, named
 * L<b>-<e>-s<step> for those, kept in the snapshot folder too). With --checkpoint STEP
 * instead of `-- TRAIN-ARGS` it writes a pool checkpoint instead (the job's
 * submitter, docs/FORMATS.md "Pool checkpoints"): the pieces copied into
 * DIR, then DIR/manifest.json with the SHA-256 of each, written last. */
#include "daemon_internal.h"
#include "node_base.h"
#include "pool_job.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A snapshot's file name: L<b>-<e>-s<step>.safetensors, nothing else. */
static bool snap_name(const char *f)
{
    int b, e, n = 0;
    long long s;
    if (sscanf(f, "L%d-%d-s%lld.safetensors%n", &b, &e, &s, &n) != 3 || (size_t)n != strlen(f))
        return false;
    return b >= 0 && e >= b && s >= 1 && strchr(f, '/') == NULL;
}

/* dest as a copy of src (a hard link when both are on one file system). */
static int place(const char *src, const char *dest)
{
    /* a regular file only: a link planted among a checkpoint's shards must
     * not bring another file into the snapshots members are served */
    struct stat ls;
    if (lstat(src, &ls) != 0 || !S_ISREG(ls.st_mode)) {
        errno = EINVAL;
        return -1;
    }
    unlink(dest);
    if (link(src, dest) == 0) return 0;
    int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), out = -1, rc = -1;
    char buf[1 << 16];
    if (in >= 0) out = open(dest, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out >= 0) {
        ssize_t n;
        rc = 0;
        while ((n = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, (size_t)n) != n) {
                rc = -1;
                break;
            }
        if (n < 0 || close(out) != 0) rc = -1;
    }
    if (in >= 0) close(in);
    return rc;
}

/* The SHA-256 of a file in hex; its size in *bytes. */
static int file_sha256(const char *path, char hex[65], int64_t *bytes)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);   /* a link is no shard */
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE], buf[1 << 16];
    unsigned int mdlen = 0;
    int rc = -1;
    *bytes = 0;
    if (fd >= 0 && ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0) {
            EVP_DigestUpdate(ctx, buf, (size_t)n);
            *bytes += n;
        }
        if (n == 0 && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32) rc = 0;
    }
    for (unsigned i = 0; rc == 0 && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(ctx);
    if (fd >= 0) close(fd);
    return rc;
}

/* DIR/manifest.json of a pool checkpoint, written last (atomically). */
static int write_manifest(const char *dir, const char *id, long long step, char **files, int n)
{
    json_t *shards = json_array();
    for (int k = 0; k < n; k++) {
        char path[DAEMON_PATH_MAX + 200], hex[65];
        int64_t bytes;
        int b, e;
        long long st;
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        if (sscanf(files[k], "L%d-%d-s%lld", &b, &e, &st) != 3 ||
            file_sha256(path, hex, &bytes) != 0) {
            fprintf(stderr, "shardnode stage-resume: %s cannot be read back\n", path);
            json_decref(shards);
            return -1;
        }
        json_array_append_new(shards, json_pack("{s:s,s:[i,i],s:s,s:I}", "file", files[k],
                                                "layers", b, e, "sha256", hex, "bytes",
                                                (json_int_t)bytes));
    }
    json_t *m = json_pack("{s:s,s:s,s:I,s:o}", "shardnode", "pool-checkpoint-1", "job", id,
                          "step", (json_int_t)step, "shards", shards);
    char path[DAEMON_PATH_MAX + 32], err[600];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    int rc = node_write_json(path, m, 0644, err, sizeof err);
    if (rc) fprintf(stderr, "shardnode stage-resume: %s\n", err);
    json_decref(m);
    return rc;
}

/* Reads CKPT/manifest.json and checks every shard against its SHA-256;
 * with snap_dir, places each shard there (a link or a copy). */
static int checkpoint_check(const char *ckpt, const char *snap_dir, long long *step, char *err,
                            size_t errlen)
{
    char path[DAEMON_PATH_MAX + 200];
    snprintf(path, sizeof path, "%s/manifest.json", ckpt);
    json_t *m = node_load_json(path, err, errlen);
    if (!m) return -1;
    int rc = -1;
    const char *fmt = node_json_str(m, "shardnode");
    json_t *shards = json_object_get(m, "shards"), *sh;
    json_t *st = json_object_get(m, "step");
    size_t i;
    if (!fmt || strcmp(fmt, "pool-checkpoint-1") != 0 || !json_is_integer(st) ||
        json_integer_value(st) < 1 || !json_is_array(shards) || json_array_size(shards) < 1) {
        node_errf(err, errlen, "%s: not a pool checkpoint's manifest (\"shardnode\": "
                  "\"pool-checkpoint-1\", \"step\" >= 1, \"shards\")", path);
        goto out;
    }
    *step = (long long)json_integer_value(st);
    json_array_foreach(shards, i, sh) {
        const char *file = node_json_str(sh, "file"), *want = node_json_str(sh, "sha256");
        int b, e, n = 0;
        long long s2;
        char hex[65];
        int64_t bytes;
        if (!file || !want || sscanf(file, "L%d-%d-s%lld.safetensors%n", &b, &e, &s2, &n) != 3 ||
            (size_t)n != strlen(file) || strchr(file, '/') || s2 != *step) {
            node_errf(err, errlen, "%s: shard %zu is not a snapshot of step %lld", path, i, *step);
            goto out;
        }
        snprintf(path, sizeof path, "%s/%s", ckpt, file);
        if (file_sha256(path, hex, &bytes) != 0 || strcmp(hex, want) != 0) {
            node_errf(err, errlen, "%s: %s", path, access(path, R_OK) ? "missing or unreadable"
                                                                       : "SHA-256 differs from "
                                                                         "the manifest's");
            goto out;
        }
        if (snap_dir) {
            char dest[DAEMON_PATH_MAX + 200];
            snprintf(dest, sizeof dest, "%s/%s", snap_dir, file);
            if (place(path, dest) != 0) {
                node_errf(err, errlen, "%s: cannot be placed in %s: %s", path, snap_dir,
                          strerror(errno));
                goto out;
            }
        }
    }
    rc = 0;
out:
    json_decref(m);
    return rc;
}

int pool_checkpoint_newest(const char *out_dir, char *dir, size_t len, long long *step,
                           char *err, size_t errlen)
{
    char base[DAEMON_PATH_MAX + 32];
    snprintf(base, sizeof base, "%s/checkpoints", out_dir);
    DIR *d = opendir(base);
    if (!d) return node_errf(err, errlen, "%s: no pool checkpoint (%s)", base, strerror(errno));
    long long best = -1;
    struct dirent *de;
    char why[700] = "";
    while ((de = readdir(d))) {
        long long s;
        int n = 0;
        if (sscanf(de->d_name, "step-%lld%n", &s, &n) != 1 || (size_t)n != strlen(de->d_name) ||
            s <= best)
            continue;
        char cand[DAEMON_PATH_MAX + 300], e2[600];
        long long ms;
        snprintf(cand, sizeof cand, "%s/%s", base, de->d_name);
        /* incomplete (no manifest: a crash while writing) or damaged: skipped */
        if (checkpoint_check(cand, NULL, &ms, e2, sizeof e2) != 0 || ms != s) {
            snprintf(why, sizeof why, "%.590s", e2);
            continue;
        }
        best = s;
        snprintf(dir, len, "%s", cand);
    }
    closedir(d);
    if (best < 0)
        return node_errf(err, errlen, "%s: no complete pool checkpoint%s%s", base,
                         why[0] ? " (the last refused: " : "", why[0] ? why : "");
    *step = best;
    return 0;
}

int pool_checkpoint_place(const char *ckpt, const char *snap_dir, long long *step, char *err,
                          size_t errlen)
{
    if (snap_dir && mkdir(snap_dir, 0700) != 0 && errno != EEXIST)
        return node_errf(err, errlen, "%s: %s", snap_dir, strerror(errno));
    return checkpoint_check(ckpt, snap_dir, step, err, errlen);
}

int cmd_stage_resume(int argc, char **argv)
{
    const char *mesh = NULL, *from = NULL, *bind_addr = NULL, *snap = NULL, *into = NULL,
               *id = NULL, *ckpt = NULL, *need = NULL;
    char *files[64];
    uint8_t mesh_id[GOSSIP_MESH_ID_LEN];
    int i = 2, npieces = 0;
    const char *pieces[64];
    for (; i + 1 < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (strcmp(argv[i], "--mesh") == 0) mesh = argv[i + 1];
        else if (strcmp(argv[i], "--from") == 0) from = argv[i + 1];
        else if (strcmp(argv[i], "--bind") == 0) bind_addr = argv[i + 1];
        else if (strcmp(argv[i], "--snap-dir") == 0) snap = argv[i + 1];
        else if (strcmp(argv[i], "--into") == 0) into = argv[i + 1];
        else if (strcmp(argv[i], "--job-id") == 0) id = argv[i + 1];
        else if (strcmp(argv[i], "--checkpoint") == 0) ckpt = argv[i + 1];
        else if (strcmp(argv[i], "--need") == 0) need = argv[i + 1];
        else if (strcmp(argv[i], "--piece") == 0 && npieces < 64) pieces[npieces++] = argv[i + 1];
        else {
            fprintf(stderr, "shardnode stage-resume: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    bool train = !ckpt && i < argc && strcmp(argv[i], "--") == 0 && i + 1 < argc;
    int nb = 0, ne = 0, nn = 0;
    if (need && (sscanf(need, "%d-%d%n", &nb, &ne, &nn) != 2 || (size_t)nn != strlen(need) ||
                 nb < 0 || ne <= nb || ckpt)) {
        fprintf(stderr, "shardnode stage-resume: --need %s is not BEGIN-END (0 <= BEGIN < END), "
                        "or comes with --checkpoint\n", need);
        return 2;
    }
    if (!mesh || !from || !snap || !into || !id || npieces == 0 || (!train && !ckpt) ||
        node_hex_decode(mesh, mesh_id, sizeof mesh_id) != 0 || strlen(id) != POOL_JOB_ID_LEN ||
        strspn(id, "0123456789abcdef") != POOL_JOB_ID_LEN) {
        fprintf(stderr, "usage: shardnode stage-resume --mesh HEX --from NAME [--bind OVERLAY] "
                        "--job-id ID --snap-dir DIR --into DIR [--need BEGIN-END] "
                        "--piece FILE=NAME=ADDR:PORT ... "
                        "(-- TRAIN-ARGS... | --checkpoint STEP)\n");
        return 2;
    }
    if (mkdir(into, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "shardnode stage-resume: %s: %s\n", into, strerror(errno));
        return 1;
    }
    for (int k = 0; k < npieces; k++) {
        char file[128], name[MESH_NAME_MAX], target[GOSSIP_ADDR_MAX + MESH_NAME_MAX + 16];
        const char *eq = strchr(pieces[k], '=');
        if (!eq || (size_t)(eq - pieces[k]) >= sizeof file) {
            fprintf(stderr, "shardnode stage-resume: --piece %s is not FILE=NAME=ADDR:PORT\n",
                    pieces[k]);
            return 2;
        }
        snprintf(file, sizeof file, "%.*s", (int)(eq - pieces[k]), pieces[k]);
        snprintf(target, sizeof target, "%s", eq + 1);
        const char *eq2 = strchr(target, '=');
        if (!snap_name(file) || !eq2 || (size_t)(eq2 - target) >= sizeof name) {
            fprintf(stderr, "shardnode stage-resume: --piece %s is not a snapshot "
                            "FILE=NAME=ADDR:PORT\n", pieces[k]);
            return 2;
        }
        snprintf(name, sizeof name, "%.*s", (int)(eq2 - target), target);
        char have[DAEMON_PATH_MAX + 200], link_to[DAEMON_PATH_MAX + 200], part[128] = "";
        int pb, pe;
        long long ps;
        sscanf(file, "L%d-%d-s%lld", &pb, &pe, &ps);   /* snap_name said so */
        snprintf(have, sizeof have, "%s/%s", snap, file);
        /* only the layers the stage takes of another member's piece (its
         * own is here already, whole) */
        int kb = pb > nb ? pb : nb, ke = pe < ne ? pe : ne;
        if (need && strcmp(name, from) != 0 && access(have, R_OK) != 0 && kb < ke &&
            (kb > pb || ke < pe)) {
            snprintf(part, sizeof part, "L%d-%d-s%lld.safetensors", kb, ke, ps);
            snprintf(have, sizeof have, "%s/%s", snap, part);
        }
        snprintf(link_to, sizeof link_to, "%s/%s", into, part[0] ? part : file);
        if (access(have, R_OK) != 0) {
            if (strcmp(name, from) == 0) {
                fprintf(stderr, "shardnode stage-resume: this node's own %s is gone\n", have);
                return 1;
            }
            char rel[POOL_JOB_ID_LEN + 200];
            snprintf(rel, sizeof rel, "jobs/%s/snap/%s", id, file);
            /* the copy goes into the snapshot folder: this node holds it too */
            char *fa[20], range[32];
            int na = 0;
            const char *fixed[] = {"shardnode", "fetch", "--out", have, "--mesh", mesh,
                                   "--from", from, "--path", rel};
            for (size_t x = 0; x < sizeof fixed / sizeof fixed[0]; x++)
                fa[na++] = (char *)fixed[x];
            if (part[0]) {
                snprintf(range, sizeof range, "%d-%d", kb, ke);
                fa[na++] = "--layers";
                fa[na++] = range;
            }
            if (bind_addr) {
                fa[na++] = "--bind";
                fa[na++] = (char *)bind_addr;
            }
            fa[na++] = target;
            fa[na] = NULL;
            double t0 = daemon_now_ms();
            if (cmd_fetch(na, fa) != 0) {
                fprintf(stderr, "shardnode stage-resume: %s could not be fetched from %s\n",
                        file, name);
                return 1;
            }
            struct stat sb;
            double s = (daemon_now_ms() - t0) / 1e3;
            if (stat(have, &sb) == 0)
                printf("stage-resume: %s (%.1f MB) from %s in %.2f s (%.1f MB/s)\n",
                       part[0] ? part : file, (double)sb.st_size / 1e6, name, s,
                       s > 0 ? (double)sb.st_size / 1e6 / s : 0.0);
        } else {
            printf("stage-resume: %s from this node's own copies\n", part[0] ? part : file);
        }
        files[k] = (char *)pieces[k];   /* argv's own bytes */
        files[k][eq - pieces[k]] = 0;   /* the file's name, for the manifest */
        if (place(have, link_to) != 0) {
            fprintf(stderr, "shardnode stage-resume: %s -> %s: %s\n", have, link_to,
                    strerror(errno));
            return 1;
        }
    }
    fflush(stdout);
    if (ckpt) {
        if (write_manifest(into, id, atoll(ckpt), files, npieces) != 0) return 1;
        printf("stage-resume: pool checkpoint of step %s in %s (%d shards)\n", ckpt, into,
               npieces);
        return 0;
    }
    /* the stage itself, from the folder just made */
    int n = argc - (i + 1);
    char **targs = calloc((size_t)n + 4, sizeof *targs);
    if (!targs) return 1;
    for (int k = 0; k < n; k++) targs[k] = argv[i + 1 + k];
    targs[n] = "--resume-from";
    targs[n + 1] = (char *)into;
    targs[n + 2] = NULL;
    execv("/proc/self/exe", targs);   /* this binary, whatever its file became */
    fprintf(stderr, "shardnode stage-resume: cannot run train: %s\n", strerror(errno));
    free(targs);
    return 1;
}

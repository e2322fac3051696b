/* pool_resume.c — `shardnode stage-resume`, run by the daemon to start its
 * stage of a plan that resumes after a step (a recovery, docs/ARCHITECTURE.md
 * "Recovery"): it gathers the snapshots the stage starts from — this
 * node's own copies from its snapshot folder, the others fetched member to
 * member over the overlay (FETCH of jobs/ID/snap/..., into the snapshot
 * folder, where they count as this node's copies too) — links them into a
 * folder of their own and becomes `shardnode train ... --resume-from` it.
 *
 *   shardnode stage-resume --mesh HEX --from NAME [--bind OVERLAY] --job-id ID
 *       --snap-dir DIR --into DIR --piece FILE=NAME=ADDR:PORT ... -- TRAIN-ARGS...
 *
 * A piece whose NAME is --from's is this node's own. */
#include "daemon_internal.h"
#include "node_base.h"
#include "pool_job.h"

#include <errno.h>
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

int cmd_stage_resume(int argc, char **argv)
{
    const char *mesh = NULL, *from = NULL, *bind_addr = NULL, *snap = NULL, *into = NULL,
               *id = NULL;
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
        else if (strcmp(argv[i], "--piece") == 0 && npieces < 64) pieces[npieces++] = argv[i + 1];
        else {
            fprintf(stderr, "shardnode stage-resume: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!mesh || !from || !snap || !into || !id || npieces == 0 || i >= argc ||
        strcmp(argv[i], "--") != 0 || i + 1 >= argc ||
        node_hex_decode(mesh, mesh_id, sizeof mesh_id) != 0) {
        fprintf(stderr, "usage: shardnode stage-resume --mesh HEX --from NAME [--bind OVERLAY] "
                        "--job-id ID --snap-dir DIR --into DIR --piece FILE=NAME=ADDR:PORT ... "
                        "-- TRAIN-ARGS...\n");
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
        char have[DAEMON_PATH_MAX + 200], link_to[DAEMON_PATH_MAX + 200];
        snprintf(have, sizeof have, "%s/%s", snap, file);
        snprintf(link_to, sizeof link_to, "%s/%s", into, file);
        if (access(have, R_OK) != 0) {
            if (strcmp(name, from) == 0) {
                fprintf(stderr, "shardnode stage-resume: this node's own %s is gone\n", have);
                return 1;
            }
            char rel[POOL_JOB_ID_LEN + 200];
            snprintf(rel, sizeof rel, "jobs/%s/snap/%s", id, file);
            /* the copy goes into the snapshot folder: this node holds it too */
            char *fa[16];
            int na = 0;
            const char *fixed[] = {"shardnode", "fetch", "--out", have, "--mesh", mesh,
                                   "--from", from, "--path", rel};
            for (size_t x = 0; x < sizeof fixed / sizeof fixed[0]; x++)
                fa[na++] = (char *)fixed[x];
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
                printf("stage-resume: %s (%.1f MB) from %s in %.2f s (%.1f MB/s)\n", file,
                       (double)sb.st_size / 1e6, name, s,
                       s > 0 ? (double)sb.st_size / 1e6 / s : 0.0);
        } else {
            printf("stage-resume: %s from this node's own copies\n", file);
        }
        unlink(link_to);
        if (link(have, link_to) != 0) {
            fprintf(stderr, "shardnode stage-resume: %s -> %s: %s\n", have, link_to,
                    strerror(errno));
            return 1;
        }
    }
    fflush(stdout);
    /* the stage itself, from the folder just made */
    int n = argc - (i + 1);
    char **targs = calloc((size_t)n + 4, sizeof *targs);
    if (!targs) return 1;
    for (int k = 0; k < n; k++) targs[k] = argv[i + 1 + k];
    targs[n] = "--resume-from";
    targs[n + 1] = (char *)into;
    targs[n + 2] = NULL;
    char exe[DAEMON_PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[l > 0 ? l : 0] = 0;
    execv(exe, targs);
    fprintf(stderr, "shardnode stage-resume: cannot run %s: %s\n", exe, strerror(errno));
    free(targs);
    return 1;
}

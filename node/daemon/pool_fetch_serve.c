/* pool_fetch_serve.c — the serving side of FETCH (docs/PROTOCOL.md, "FETCH
 * paths served"), beside its client in pool_fetch.c: a member answers
 * another member's FETCH for "probe/N" (link measurement), for a job's blob
 * jobs/ID/job-SHA256.json (members fetch it before they take the job up),
 * for the stage files of a finished run under jobs/ID/out/ (export
 * gathers them) and for stage snapshots jobs/ID/snap/L<b>-<e>-s<n>.safetensors
 * (a buddy's copies, a recovery's moves), never through a symbolic link (pool_fetch_open). Nothing
 * else is served. */
#include "daemon_internal.h"
#include "node_base.h"
#include "pool_job.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* FETCH: "probe/N" (N zero bytes, for link measurement), a job's blob, the
 * stage files under jobs/ID/out/ and the snapshots under jobs/ID/snap/.
 * Nothing else is served. */
int pool_fetch(daemon_t *d, const gossip_msg *m, gossip_msg *r, uint8_t **data)
{
    *data = NULL;
    r->type = GOSSIP_MSG_FETCH_REPLY;
    r->version = GOSSIP_PROTOCOL_VERSION;
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
    /* jobs/<16 hex>/out/stage-<name>.safetensors, jobs/<16 hex>/job-<64 hex>.json */
    const char *s = m->path;
    bool ok = strncmp(s, "jobs/", 5) == 0 && strlen(s) > 5 + POOL_JOB_ID_LEN + 11;
    for (int i = 0; ok && i < POOL_JOB_ID_LEN; i++)
        ok = strchr("0123456789abcdef", s[5 + i]) != NULL;
    const char *rest = s + 5 + POOL_JOB_ID_LEN;
    bool blob = ok && strncmp(rest, "/job-", 5) == 0 && strlen(rest) == 5 + 64 + 5 &&
                strspn(rest + 5, "0123456789abcdef") == 64 && strcmp(rest + 69, ".json") == 0;
    int sb_, se_, slen = 0;
    long long ss_;
    /* a stage snapshot (docs/ARCHITECTURE.md, "Recovery"): its buddy and the
     * members a recovery moves layers to fetch it */
    bool snap = ok && !blob && strncmp(rest, "/snap/", 6) == 0 &&
                sscanf(rest + 6, "L%d-%d-s%lld.safetensors%n", &sb_, &se_, &ss_, &slen) == 3 &&
                (size_t)slen == strlen(rest + 6) && sb_ >= 0 && se_ >= sb_ && ss_ >= 1;
    ok = ok && (blob || snap || strncmp(rest, "/out/stage-", 11) == 0);
    const char *name = rest + 11, *dot = ok && !blob && !snap ? strstr(name, ".safetensors") : NULL;
    if (blob || snap) {
        /* the job blob (issue 14): any member that took the job up serves it */
    } else if (ok && dot && strcmp(dot, ".safetensors") == 0) {
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

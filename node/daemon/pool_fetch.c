/* pool_fetch.c — the client side of FETCH (the serving side: pool_fetch_serve.c) over a member's gossip TCP port
 * (blocking, for child processes and commands, never the daemon's loop):
 * `shardnode probe-links` (link latency and bandwidth, run by the daemon
 * for each job) and `shardnode export --state DIR` (the stage files of a
 * finished run gathered into one model). */
#include "daemon_internal.h"
#include "node_base.h"
#include "pool_doc.h"
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define FETCH_TIMEOUT_MS 10000
/* A paced fetch's receive buffer: what the sender may have in flight, so
 * that the pace holds on the wire and not only in this process's reads:
 * FETCH_PACE_MS of the pace, within these bounds */
#define FETCH_PACE_WINDOW (64 * 1024)
#define FETCH_PACE_WINDOW_MAX (4 * 1024 * 1024)
#define FETCH_PACE_MS 10
/* the most header a ranged fetch takes of a snapshot (a checkpoint's
 * header is a few kB a layer) */
#define FETCH_HEADER_MAX (16 << 20)

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* from: this node's overlay address (members are known by it), or NULL.
 * A blocking socket with send and receive timeouts. */
static int connect_to(const char *addr, int port, const char *from, int timeout_ms, char *err,
                      size_t errlen)
{
    int fd = daemon_connect(addr, port, from, timeout_ms, err, errlen);
    if (fd < 0) return -1;
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* A fetch's pace (docs/PROTOCOL.md, "Recovery", 2): at most rate
 * bytes a second over the whole file, however many requests it takes. */
typedef struct {
    int64_t rate;                 /* bytes a second; 0: as fast as the link goes */
    int window;                   /* the receive buffer, bytes */
    int64_t t0;                   /* mono_ns of the first byte asked for */
    uint64_t got;                 /* bytes received since t0 */
} fetch_pace;

static int io_all(int fd, void *buf, size_t n, bool rd)
{
    uint8_t *b = buf;
    while (n) {
        ssize_t k = rd ? read(fd, b, n) : write(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads n bytes, never more than pace->rate a second on average since
 * pace->t0: a piece of at most the window at a time, then a sleep until the
 * pace allows the next (the sender waits on the closed window meanwhile). */
static int read_paced(int fd, uint8_t *b, size_t n, fetch_pace *pace)
{
    if (!pace || pace->rate <= 0) return io_all(fd, b, n, true);
    while (n) {
        size_t want = n < (size_t)pace->window ? n : (size_t)pace->window;
        if (io_all(fd, b, want, true) != 0) return -1;
        b += want;
        n -= want;
        pace->got += want;
        int64_t due = pace->t0 + (int64_t)((double)pace->got * 1e9 / (double)pace->rate),
                now = mono_ns();
        if (due > now) {
            struct timespec ts = {(time_t)((due - now) / 1000000000),
                                  (long)((due - now) % 1000000000)};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            }
        }
    }
    return 0;
}

/* One FETCH and its reply (decoded into *r: gossip_msg_free it). */
static int fetch_once(const char *addr, int port, const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                      const char *from, const char *bind_addr, const char *path, uint64_t off,
                      fetch_pace *pace, gossip_msg *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    gossip_msg q;
    memset(&q, 0, sizeof q);
    q.type = GOSSIP_MSG_FETCH;
    q.version = GOSSIP_PROTOCOL_VERSION;
    memcpy(q.mesh_id, mesh_id, GOSSIP_MESH_ID_LEN);
    snprintf(q.from, sizeof q.from, "%s", from);
    snprintf(q.path, sizeof q.path, "%s", path);
    q.offset = off;
    uint8_t *buf = NULL;
    size_t len = 0;
    /* MACed with this node's WireGuard key (issue 12, 2): the state
     * directory is the daemon's (its helpers inherit SHARDNODE_STATE). */
    uint8_t key[32];
    const char *state = getenv("SHARDNODE_STATE");
    if (!state) return node_errf(err, errlen, "FETCH: SHARDNODE_STATE is not set");
    if (daemon_peer_key(state, addr, key, err, errlen) != 0 ||
        daemon_frame_mac(&q, key, &buf, &len, err, errlen) != 0)
        return -1;
    int fd = connect_to(addr, port, bind_addr, FETCH_TIMEOUT_MS, err, errlen);
    if (fd < 0) {
        free(buf);
        return -1;
    }
    if (pace && pace->rate > 0) {
        /* after connect is soon enough: the window this buffer leaves is
         * what the sender sees from the first data on */
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &pace->window, sizeof pace->window);
        if (!pace->t0) pace->t0 = mono_ns();
    }
    uint8_t pre[4];
    int rc = -1;
    if (io_all(fd, buf, len, false) != 0 || io_all(fd, pre, 4, true) != 0) {
        node_errf(err, errlen, "%s port %d: the connection broke or timed out", addr, port);
        goto out;
    }
    size_t n = (size_t)pre[0] | (size_t)pre[1] << 8 | (size_t)pre[2] << 16 | (size_t)pre[3] << 24;
    if (n == 0 || n > GOSSIP_TCP_MAX) {
        node_errf(err, errlen, "%s port %d: a reply frame of %zu bytes", addr, port, n);
        goto out;
    }
    free(buf);
    buf = malloc(n);
    if (!buf || read_paced(fd, buf, n, pace) != 0) {
        node_errf(err, errlen, "%s port %d: the reply was cut short", addr, port);
        goto out;
    }
    if (daemon_unframe(buf, n, key, r, err, errlen) != 0) goto out;
    if (r->type != GOSSIP_MSG_FETCH_REPLY) {
        node_errf(err, errlen, "%s port %d: answered with message type %d", addr, port, (int)r->type);
        gossip_msg_free(r);
        goto out;
    }
    if (!r->ok) {
        node_errf(err, errlen, "%s refused %s: %s", addr, path, r->reason);
        gossip_msg_free(r);
        goto out;
    }
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

/* ---- shardnode probe-links --out FILE --mesh HEX --from NAME NAME=ADDR:PORT ... ---- */

int cmd_probe_links(int argc, char **argv)
{
    const char *out = NULL, *mesh = NULL, *from = NULL, *bind_addr = NULL, *lock_path = NULL;
    uint8_t mesh_id[GOSSIP_MESH_ID_LEN];
    int first = 2;
    for (; first + 1 < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
        if (strcmp(argv[first], "--out") == 0) out = argv[first + 1];
        else if (strcmp(argv[first], "--mesh") == 0) mesh = argv[first + 1];
        else if (strcmp(argv[first], "--from") == 0) from = argv[first + 1];
        else if (strcmp(argv[first], "--bind") == 0) bind_addr = argv[first + 1];
        else if (strcmp(argv[first], "--lock") == 0) lock_path = argv[first + 1];
        else break;
    }
    if (!out || !mesh || !from || node_hex_decode(mesh, mesh_id, sizeof mesh_id) != 0) {
        fprintf(stderr, "usage: shardnode probe-links --out FILE --mesh HEX --from NAME "
                        "[--bind OVERLAY] [--lock FILE] NAME=ADDR:PORT ...\n");
        return 2;
    }
    /* --lock FILE: the profile lock of this machine; probing loads the
     * machine too, so nobody profiles meanwhile (held until exit) */
    if (lock_path) {
        int lfd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lfd >= 0) flock(lfd, LOCK_EX);
    }
    static const size_t sizes[] = {64, 262144};
    pool_links links = {0, NULL};
    for (int i = first; i < argc; i++) {
        char name[MESH_NAME_MAX], addr[GOSSIP_ADDR_MAX];
        int port;
        char *eq = strchr(argv[i], '='), *colon = strrchr(argv[i], ':');
        if (!eq || !colon || colon < eq || (size_t)(eq - argv[i]) >= sizeof name ||
            (size_t)(colon - eq - 1) >= sizeof addr) {
            fprintf(stderr, "shardnode probe-links: %s is not NAME=ADDR:PORT\n", argv[i]);
            continue;
        }
        snprintf(name, sizeof name, "%.*s", (int)(eq - argv[i]), argv[i]);
        snprintf(addr, sizeof addr, "%.*s", (int)(colon - eq - 1), eq + 1);
        port = atoi(colon + 1);
        cost_probe pr[16];
        int np = 0;
        char err[512] = "";
        for (int round = 0; round < 5; round++)
            for (int s = 0; s < 2; s++) {
                char path[64];
                snprintf(path, sizeof path, "probe/%zu", sizes[s]);
                gossip_msg r;
                int64_t t0 = mono_ns();
                if (fetch_once(addr, port, mesh_id, from, bind_addr, path, 0, NULL, &r, err,
                               sizeof err) != 0)
                    continue;
                int64_t dt = mono_ns() - t0;
                bool full = r.data_len == sizes[s];
                gossip_msg_free(&r);
                if (round == 0 || !full || np >= 16) continue; /* the first round warms up */
                pr[np++] = (cost_probe){(int64_t)sizes[s] / 2, dt};
            }
        cost_link l;
        if (np >= 4 && cost_link_estimate(&l, pr, np, err, sizeof err) == 0) {
            pool_links_add(&links, name, l.latency_ns, l.bandwidth);
            printf("link to %s: latency %.3f ms, bandwidth %.1f MB/s\n", name,
                   (double)l.latency_ns * 1e-6, (double)l.bandwidth * 1e-6);
        } else {
            fprintf(stderr, "shardnode probe-links: %s (%s): %s\n", name, addr,
                    err[0] ? err : "too few probes answered");
        }
    }
    json_t *lj = pool_links_to_json(&links);
    int rc = lj && json_dump_file(lj, out, JSON_COMPACT | JSON_SORT_KEYS) == 0 ? 0 : 1;
    if (rc) fprintf(stderr, "shardnode probe-links: cannot write %s\n", out);
    json_decref(lj);
    pool_links_free(&links);
    return rc;
}

/* ---- shardnode fetch --out FILE --mesh HEX --from NAME [--bind OVERLAY]
 *      [--rate BYTES_PER_S | --layers BEGIN-END] --path PATH NAME=ADDR:PORT ...:
 *      the file PATH from the first member that serves it (run by the daemon
 *      for a job's blob and for a buddy's copy of a snapshot, which is paced),
 *      or with --layers the snapshot of layers [BEGIN, END) out of the
 *      snapshot PATH (stage-resume, for a planned switch's new stage) ---- */

static int fetch_file(const char *addr, int port, const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                      const char *from, const char *bind_addr, const char *path,
                      const char *dest, fetch_pace *pace, char *err, size_t errlen);
static int fetch_layers(const char *addr, int port, const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                        const char *from, const char *bind_addr, const char *path,
                        const char *dest, int begin, int end, uint64_t *got, uint64_t *total,
                        char *err, size_t errlen);

int cmd_fetch(int argc, char **argv)
{
    const char *out = NULL, *mesh = NULL, *from = NULL, *bind_addr = NULL, *path = NULL,
               *rate = NULL, *layers = NULL;
    uint8_t mesh_id[GOSSIP_MESH_ID_LEN];
    int first = 2, lb = 0, le = 0, n = 0;
    for (; first + 1 < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
        if (strcmp(argv[first], "--out") == 0) out = argv[first + 1];
        else if (strcmp(argv[first], "--mesh") == 0) mesh = argv[first + 1];
        else if (strcmp(argv[first], "--from") == 0) from = argv[first + 1];
        else if (strcmp(argv[first], "--bind") == 0) bind_addr = argv[first + 1];
        else if (strcmp(argv[first], "--path") == 0) path = argv[first + 1];
        else if (strcmp(argv[first], "--rate") == 0) rate = argv[first + 1];
        else if (strcmp(argv[first], "--layers") == 0) layers = argv[first + 1];
        else break;
    }
    if (layers && (sscanf(layers, "%d-%d%n", &lb, &le, &n) != 2 || (size_t)n != strlen(layers) ||
                   lb < 0 || le <= lb || rate)) {
        fprintf(stderr, "shardnode fetch: --layers %s is not BEGIN-END (0 <= BEGIN < END), or "
                        "comes with --rate\n", layers);
        return 2;
    }
    if (!out || !mesh || !from || !path || first >= argc ||
        node_hex_decode(mesh, mesh_id, sizeof mesh_id) != 0) {
        fprintf(stderr, "usage: shardnode fetch --out FILE --mesh HEX --from NAME "
                        "[--bind OVERLAY] [--rate BYTES_PER_S | --layers BEGIN-END] --path PATH "
                        "NAME=ADDR:PORT ...\n");
        return 2;
    }
    fetch_pace pace = {0, 0, 0, 0};
    if (rate) {
        char *end = NULL;
        errno = 0;
        long long r = strtoll(rate, &end, 10);
        if (errno || end == rate || *end || r < FETCH_PACE_WINDOW) {
            fprintf(stderr, "shardnode fetch: --rate %s: not a whole number of bytes a second "
                            "of at least %d\n", rate, FETCH_PACE_WINDOW);
            return 2;
        }
        pace.rate = r;
        int64_t w = r / (1000 / FETCH_PACE_MS);
        pace.window = w < FETCH_PACE_WINDOW       ? FETCH_PACE_WINDOW
                      : w > FETCH_PACE_WINDOW_MAX ? FETCH_PACE_WINDOW_MAX
                                                  : (int)w;
    }
    for (int i = first; i < argc; i++) {
        char name[MESH_NAME_MAX], addr[GOSSIP_ADDR_MAX], err[512] = "";
        char *eq = strchr(argv[i], '='), *colon = strrchr(argv[i], ':');
        if (!eq || !colon || colon < eq || (size_t)(eq - argv[i]) >= sizeof name ||
            (size_t)(colon - eq - 1) >= sizeof addr) {
            fprintf(stderr, "shardnode fetch: %s is not NAME=ADDR:PORT\n", argv[i]);
            continue;
        }
        snprintf(name, sizeof name, "%.*s", (int)(eq - argv[i]), argv[i]);
        snprintf(addr, sizeof addr, "%.*s", (int)(colon - eq - 1), eq + 1);
        pace.t0 = 0;
        pace.got = 0;
        if (layers) {
            uint64_t got = 0, total = 0;
            if (fetch_layers(addr, atoi(colon + 1), mesh_id, from, bind_addr, path, out, lb, le,
                             &got, &total, err, sizeof err) == 0) {
                printf("fetch: layers %d-%d of %s from %s: %.1f of its %.1f MB\n", lb, le, path,
                       name, (double)got / 1e6, (double)total / 1e6);
                return 0;
            }
        } else if (fetch_file(addr, atoi(colon + 1), mesh_id, from, bind_addr, path, out, &pace, err,
                       sizeof err) == 0) {
            printf("fetch: %s from %s\n", path, name);
            return 0;
        }
        fprintf(stderr, "shardnode fetch: %s from %s (%s): %s\n", path, name, addr, err);
    }
    return 1;
}

/* ---- a snapshot's layers alone (a planned switch; docs/PROTOCOL.md,
 * "Planned switches") ---- */

/* Bytes of path from `off` on, into fd at their own offsets, until `end`
 * is covered (FETCH has no length: each reply brings up to a chunk, all of
 * which is kept); *reach: where they end; *got: bytes received in all;
 * *total: the file's size (UINT64_MAX: not known yet). */
static int fetch_range(const char *addr, int port, const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                       const char *from, const char *bind_addr, const char *path, uint64_t off,
                       uint64_t end, int fd, uint64_t *reach, uint64_t *got, uint64_t *total,
                       char *err, size_t errlen)
{
    uint64_t t = *total;
    while (off < end && off < t) {
        gossip_msg r;
        if (fetch_once(addr, port, mesh_id, from, bind_addr, path, off, NULL, &r, err, errlen))
            return -1;
        bool bad = r.offset != off || (r.data_len == 0 && off < r.total) ||
                   (t != UINT64_MAX && r.total != t);
        t = r.total;
        for (size_t w = 0; !bad && w < r.data_len;) {
            ssize_t k = pwrite(fd, r.data + w, r.data_len - w, (off_t)(off + w));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) bad = true;
            else w += (size_t)k;
        }
        off += r.data_len;
        *got += r.data_len;
        gossip_msg_free(&r);
        if (bad)
            return node_errf(err, errlen, "%s from %s: a chunk at offset %llu is wrong, or the "
                             "file changed size, or it cannot be written", path, addr,
                             (unsigned long long)off);
    }
    *total = t;
    *reach = off;
    if (end != UINT64_MAX && end > t)
        return node_errf(err, errlen, "%s from %s: %llu bytes, not the %llu its header says",
                         path, addr, (unsigned long long)t, (unsigned long long)end);
    return 0;
}

/* dest: the snapshot of layers [begin, end) that checkpoint `path` of a
 * member holds (checkpoint_layer_ranges: its header first, then only the
 * byte ranges of the tensors those layers need, into a sparse file, then
 * checkpoint_copy_layers). *got: the bytes fetched; *total: the file's. */
static int fetch_layers(const char *addr, int port, const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                        const char *from, const char *bind_addr, const char *path,
                        const char *dest, int begin, int end, uint64_t *got, uint64_t *total,
                        char *err, size_t errlen)
{
    char tmp[DAEMON_PATH_MAX + 320];
    snprintf(tmp, sizeof tmp, "%s.ranged", dest);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return node_errf(err, errlen, "%s: %s", tmp, strerror(errno));
    uint64_t *ranges = NULL, hlen = 0, reach = 0;
    uint8_t pre[8];
    int rc = -1, nr;
    int64_t want;
    *got = 0;
    *total = UINT64_MAX;
    /* the first reply (a chunk), then the rest of the header if longer */
    if (fetch_range(addr, port, mesh_id, from, bind_addr, path, 0, 8, fd, &reach, got, total,
                    err, errlen))
        goto out;
    if (pread(fd, pre, 8, 0) != 8) {
        node_errf(err, errlen, "%s from %s: shorter than a safetensors header", path, addr);
        goto out;
    }
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | pre[i];
    if (hlen > *total - 8 || hlen > FETCH_HEADER_MAX) {
        node_errf(err, errlen, "%s from %s: header length %llu is larger than the file (%llu "
                  "bytes) or than a snapshot's header may be (%d)", path, addr,
                  (unsigned long long)hlen, (unsigned long long)*total, FETCH_HEADER_MAX);
        goto out;
    }
    if (fetch_range(addr, port, mesh_id, from, bind_addr, path, reach, 8 + hlen, fd, &reach,
                    got, total, err, errlen))
        goto out;
    if (ftruncate(fd, (off_t)*total) != 0) {
        node_errf(err, errlen, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    nr = checkpoint_layer_ranges(tmp, begin, end, &ranges, &want, err, errlen);
    if (nr < 0) goto out;
    /* ascending: what one range's last chunk brought of the next is kept */
    for (int i = 0; i < nr; i++) {
        if (ranges[2 * i + 1] <= reach) continue;
        uint64_t b = ranges[2 * i] > reach ? ranges[2 * i] : reach;
        if (fetch_range(addr, port, mesh_id, from, bind_addr, path, b, ranges[2 * i + 1], fd,
                        &reach, got, total, err, errlen))
            goto out;
    }
    if (close(fd) != 0) {
        fd = -1;
        node_errf(err, errlen, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    rc = checkpoint_copy_layers(tmp, dest, begin, end, err, errlen);
out:
    if (fd >= 0) close(fd);
    free(ranges);
    unlink(tmp);
    return rc;
}

/* ---- FETCH's files: no symbolic link is followed ---- */

int pool_fetch_open(const char *state, const char *rel)
{
    if (!*rel || rel[0] == '/') {
        errno = EINVAL;
        return -1;
    }
    int dir = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return -1;
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        char part[256];
        if (n == 0 || n >= sizeof part || (n == 1 && p[0] == '.') ||
            (n == 2 && p[0] == '.' && p[1] == '.')) {
            close(dir);
            errno = EINVAL;
            return -1;
        }
        memcpy(part, p, n);
        part[n] = 0;
        int fd = openat(dir, part,
                        (slash ? O_DIRECTORY : 0) | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            /* a link in the middle fails as "not a directory": say it is a link */
            int saved = errno;
            struct stat ls;
            if (fstatat(dir, part, &ls, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(ls.st_mode))
                saved = ELOOP;
            close(dir);
            errno = saved;
            return -1;
        }
        close(dir);
        if (!slash) {
            struct stat st;
            if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                errno = EINVAL;
                return -1;
            }
            return fd;
        }
        dir = fd;
        p = slash + 1;
    }
}

/* ---- export --state DIR: gather the stages of the committed plan ---- */

static int fetch_file(const char *addr, int port, const uint8_t mesh_id[GOSSIP_MESH_ID_LEN],
                      const char *from, const char *bind_addr, const char *path,
                      const char *dest, fetch_pace *pace, char *err, size_t errlen)
{
    char tmp[DAEMON_PATH_MAX + 320];
    snprintf(tmp, sizeof tmp, "%s.part", dest);
    /* never through a symbolic link planted where the part file goes */
    int tfd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = tfd >= 0 ? fdopen(tfd, "wb") : NULL;
    if (!f) {
        int e = errno;
        if (tfd >= 0) close(tfd);
        return node_errf(err, errlen, "%s: %s", tmp, strerror(e));
    }
    uint64_t off = 0, total = 1;
    int rc = -1;
    while (off < total) {
        gossip_msg r;
        if (fetch_once(addr, port, mesh_id, from, bind_addr, path, off, pace, &r, err, errlen) !=
            0)
            goto out;
        total = r.total;
        bool bad = r.offset != off || (r.data_len == 0 && off < total);
        if (!bad && r.data_len && fwrite(r.data, 1, r.data_len, f) != r.data_len) bad = true;
        off += r.data_len;
        gossip_msg_free(&r);
        if (bad) {
            node_errf(err, errlen, "%s from %s: a chunk at offset %llu is wrong or cannot be "
                                   "written", path, addr, (unsigned long long)off);
            goto out;
        }
    }
    rc = 0;
out:
    if (fclose(f) != 0 && rc == 0) rc = node_errf(err, errlen, "%s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, dest) != 0)
        rc = node_errf(err, errlen, "%s: %s", dest, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

/* This node's own stage: copied from its state directory (the gossip port
 * serves members, never the node itself), through the same path rules as
 * FETCH (no link followed) and the same part file and rename. */
static int copy_local(const char *state, const char *path, const char *dest, char *err,
                      size_t errlen)
{
    char tmp[DAEMON_PATH_MAX + 320], buf[1 << 16];
    snprintf(tmp, sizeof tmp, "%s.part", dest);
    int in = pool_fetch_open(state, path);
    if (in < 0) return node_errf(err, errlen, "%s/%s: %s", state, path, strerror(errno));
    int tfd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (tfd < 0) {
        int e = errno;
        close(in);
        return node_errf(err, errlen, "%s: %s", tmp, strerror(e));
    }
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = node_errf(err, errlen, "%s/%s: %s", state, path, strerror(errno));
            break;
        }
        if (n == 0) break;
        if (io_all(tfd, buf, (size_t)n, false) != 0) {
            rc = node_errf(err, errlen, "%s: %s", tmp, strerror(errno));
            break;
        }
    }
    close(in);
    if (close(tfd) != 0 && rc == 0) rc = node_errf(err, errlen, "%s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, dest) != 0)
        rc = node_errf(err, errlen, "%s: %s", dest, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

int pool_export(const char *state, const char *out, char *err, size_t errlen)
{
    setenv("SHARDNODE_STATE", state, 1); /* fetch_once: the MAC key */
    json_t *st = node_control_request(state, "status", err, errlen);
    if (!st) return -1;
    int rc = -1;
    uint8_t mesh_id[GOSSIP_MESH_ID_LEN];
    pool_status job;
    const char *self = node_json_str(st, "self"), *mesh = node_json_str(st, "mesh_id");
    int jrc = pool_status_from_reply(st, &job, err, errlen);
    if (!mesh || !self || node_hex_decode(mesh, mesh_id, sizeof mesh_id) != 0) {
        node_errf(err, errlen, "the node on %s gave no mesh id", state);
        goto done;
    }
    if (jrc < 0) goto done;
    if (jrc > 0) {
        node_errf(err, errlen, "no job in the mesh of %s", state);
        goto done;
    }
    if (!job.has_committed) {
        node_errf(err, errlen, "job %s has no committed plan yet (see shardnode status)", job.id);
        goto done;
    }
    char gdir[DAEMON_PATH_MAX], dest[DAEMON_PATH_MAX + 200], path[300];
    snprintf(gdir, sizeof gdir, "%s/jobs/%s/gathered", state, job.id);
    mkdir(gdir, 0755);
    /* connect from this node's overlay address: members are known by it */
    const char *own = pool_reply_own_address(st);
    const pool_plan *c = &job.committed;
    const char *names[SPLIT_MAX_STAGES];
    int ns = 0;
    for (int i = 0; i < c->nstages && ns < SPLIT_MAX_STAGES; i++) {
        const char *name = c->stage[i].holder[0].name, *addr = c->stage[i].holder[0].address;
        names[ns++] = name;
        snprintf(path, sizeof path, "jobs/%s/out/stage-%s.safetensors", job.id, name);
        snprintf(dest, sizeof dest, "%s/stage-%s.safetensors", gdir, name);
        if (strcmp(name, self) == 0) {
            if (copy_local(state, path, dest, err, errlen) != 0) goto done;
            printf("export: stage %s (layers %d..%d) copied from this node\n", name,
                   c->stage[i].layer_begin, c->stage[i].layer_end);
            continue;
        }
        if (fetch_file(addr, pool_reply_gossip_port(st, name), mesh_id, self, own, path, dest,
                       NULL, err, errlen) != 0)
            goto done;
        printf("export: stage %s (layers %d..%d) fetched from %s\n", name,
               c->stage[i].layer_begin, c->stage[i].layer_end, addr);
    }
    const char *dir = out ? out : job.out_dir;
    if (!dir || !dir[0]) {
        node_errf(err, errlen, "job %s names no out_dir; give --out", job.id);
        goto done;
    }
    rc = export_merge(job.job_file, gdir, names, ns, dir, err, errlen);
done:
    if (jrc == 0) pool_status_free(&job);
    json_decref(st);
    return rc;
}

/* wg_uapi.c — the userspace driver: wireguard-go as a child process,
 * configured through the text protocol on its UAPI socket
 * (wireguard.com/xplatform). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wg_internal.h"

extern char **environ;

#define UAPI_DIR "/var/run/wireguard"
#define UAPI_MAX_REPLY ((size_t)4 << 20) /* ~10,000 peers; beyond that is not a reply */
#define UAPI_TIMEOUT_MS 5000

/* ---------------------------------------------------------------- parser */

static int parse_u64(const char *s, size_t n, uint64_t *out) {
    if (n == 0 || n > 20) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int mesh_wg_uapi_parse(const char *reply, size_t len, const char *ifname, int *uapi_errno,
                       mesh_wg_peer_info **peers, size_t *npeers, char *err, size_t errlen) {
    mesh_wg_peer_info *list = NULL;
    size_t n = 0, cap = 0;
    int have_errno = 0, line_no = 0;
    const char *why = NULL;
    if (peers) *peers = NULL;
    if (npeers) *npeers = 0;
    if (len < 2 || reply[len - 1] != '\n' || reply[len - 2] != '\n') {
        why = "does not end with an empty line";
        goto bad;
    }
    if (memchr(reply, '\0', len)) {
        why = "has a NUL byte";
        goto bad;
    }
    size_t pos = 0;
    for (;;) {
        const char *line = reply + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = (size_t)(nl - line);
        pos += ll + 1;
        line_no++;
        if (ll == 0) { /* the blank line: must be the last, right after errno */
            if (!have_errno) {
                why = "ends without errno=N";
                goto bad;
            }
            if (pos != len) {
                why = "has bytes after the empty line";
                goto bad;
            }
            break;
        }
        if (have_errno) {
            why = "has lines after errno=N";
            goto bad;
        }
        const char *eq = memchr(line, '=', ll);
        if (!eq || eq == line) {
            why = "has a line that is not key=value";
            goto bad;
        }
        size_t kl = (size_t)(eq - line), vl = ll - kl - 1;
        const char *v = eq + 1;
#define KEY(s) (kl == sizeof(s) - 1 && !memcmp(line, s, kl))
        if (KEY("errno")) {
            /* 0, or negative (wireguard-go answers -EINVAL as "-22"); a
             * positive number is accepted too, the caller reports it. */
            uint64_t e;
            int neg = vl > 0 && v[0] == '-';
            if (parse_u64(v + neg, vl - (size_t)neg, &e) || e > 4095) {
                why = "has an errno that is not a small integer";
                goto bad;
            }
            *uapi_errno = neg ? -(int)e : (int)e;
            have_errno = 1;
            continue;
        }
        if (!peers) {
            why = "has a line other than errno in a set reply";
            goto bad;
        }
        if (KEY("public_key")) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 8;
                mesh_wg_peer_info *nl2 = realloc(list, nc * sizeof *list);
                if (!nl2) {
                    free(list);
                    mesh_errf(err, errlen, "wireguard %s: out of memory for UAPI peers", ifname);
                    return -1;
                }
                list = nl2;
                cap = nc;
            }
            memset(&list[n], 0, sizeof list[n]);
            if (wg_unhex(v, vl, list[n].public_key)) {
                why = "has a public_key that is not 64 lowercase hex digits";
                goto bad;
            }
            n++;
            continue;
        }
        mesh_wg_peer_info *p = n ? &list[n - 1] : NULL;
        uint64_t u;
        if (KEY("endpoint") || KEY("last_handshake_time_sec") ||
            KEY("last_handshake_time_nsec") || KEY("rx_bytes") || KEY("tx_bytes") ||
            KEY("persistent_keepalive_interval") || KEY("allowed_ip") ||
            KEY("preshared_key") || KEY("protocol_version")) {
            if (!p) {
                why = "has a peer field before any public_key";
                goto bad;
            }
        }
        if (KEY("endpoint")) {
            if (vl == 0 || vl >= MESH_WG_ENDPOINT_MAX) {
                why = "has an endpoint of bad length";
                goto bad;
            }
            memcpy(p->endpoint, v, vl);
            p->endpoint[vl] = '\0';
        } else if (KEY("last_handshake_time_sec") || KEY("last_handshake_time_nsec") ||
                   KEY("rx_bytes") || KEY("tx_bytes") ||
                   KEY("persistent_keepalive_interval")) {
            if (parse_u64(v, vl, &u) || u > INT64_MAX) {
                why = "has a counter that is not a decimal number";
                goto bad;
            }
            if (KEY("last_handshake_time_sec")) p->last_handshake_sec = (int64_t)u;
            else if (KEY("last_handshake_time_nsec")) p->last_handshake_nsec = (int64_t)u;
            else if (KEY("rx_bytes")) p->rx_bytes = u;
            else if (KEY("tx_bytes")) p->tx_bytes = u;
            else if (u > 65535) {
                why = "has a keepalive over 65535";
                goto bad;
            } else p->keepalive = (int)u;
        }
        /* Other keys (private_key, listen_port, fwmark, allowed_ip, ...) are
         * not reported; unknown ones are tolerated so a newer wireguard-go
         * with more fields still works. */
#undef KEY
    }
    if (peers) {
        *peers = list;
        *npeers = n;
    } else {
        free(list);
    }
    return 0;
bad:
    free(list);
    mesh_errf(err, errlen, "wireguard %s: malformed UAPI reply (line %d %s)", ifname, line_no,
            why);
    return -1;
}

/* ---------------------------------------------------------------- client */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int uapi_connect(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* One request, one reply, on a fresh connection. The daemon keeps the
 * connection open after answering, so the reply ends at the first empty
 * line, not at EOF. Every wait is bounded. */
static int uapi_call(mesh_wg *wg, const char *req, size_t reqlen, int *uapi_errno,
                     mesh_wg_peer_info **peers, size_t *npeers, char *err, size_t errlen) {
    int fd = uapi_connect(wg->sock_path);
    if (fd < 0) {
        mesh_errf(err, errlen, "wireguard %s: cannot connect to %s: %s", wg->ifname,
                wg->sock_path, strerror(errno));
        return -1;
    }
    int64_t deadline = now_ms() + UAPI_TIMEOUT_MS;
    char *buf = NULL;
    size_t got = 0, cap = 0;
    int rc = -1;
    size_t sent = 0;
    while (sent < reqlen) {
        ssize_t w = send(fd, req + sent, reqlen - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
            mesh_errf(err, errlen, "wireguard %s: UAPI send: %s", wg->ifname, strerror(errno));
            goto out;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int left = (int)(deadline - now_ms());
        if (left <= 0 || poll(&pf, 1, left) == 0) {
            mesh_errf(err, errlen, "wireguard %s: UAPI send timed out", wg->ifname);
            goto out;
        }
    }
    size_t end = 0; /* length of the reply once its empty line arrived */
    while (!end) {
        if (got == cap) {
            if (cap >= UAPI_MAX_REPLY) {
                mesh_errf(err, errlen, "wireguard %s: UAPI reply over %zu bytes", wg->ifname,
                        UAPI_MAX_REPLY);
                goto out;
            }
            size_t nc = cap ? cap * 2 : 4096;
            char *nb = realloc(buf, nc);
            if (!nb) {
                mesh_errf(err, errlen, "wireguard %s: out of memory for UAPI reply", wg->ifname);
                goto out;
            }
            buf = nb;
            cap = nc;
        }
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int left = (int)(deadline - now_ms());
        int pr = left > 0 ? poll(&pf, 1, left) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) {
            mesh_errf(err, errlen, "wireguard %s: no complete UAPI reply within %d ms",
                    wg->ifname, UAPI_TIMEOUT_MS);
            goto out;
        }
        ssize_t r = recv(fd, buf + got, cap - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            mesh_errf(err, errlen, "wireguard %s: UAPI recv: %s", wg->ifname, strerror(errno));
            goto out;
        }
        if (r == 0) {
            mesh_errf(err, errlen, "wireguard %s: UAPI connection closed before the reply "
                    "ended (%zu bytes)", wg->ifname, got);
            goto out;
        }
        /* The reply ends at the first empty line: "\n\n", or a reply that
         * starts with "\n" (malformed, the parser says why). Anything after
         * it is not ours and is ignored. */
        for (size_t i = got; i < got + (size_t)r && !end; i++)
            if (buf[i] == '\n' && (i == 0 || buf[i - 1] == '\n')) end = i + 1;
        got += (size_t)r;
    }
    rc = mesh_wg_uapi_parse(buf, end, wg->ifname, uapi_errno, peers, npeers, err, errlen);
out:
    free(buf);
    close(fd);
    return rc;
}

/* A set request; a nonzero errno in the reply is an error naming what. */
static int uapi_set(mesh_wg *wg, const char *req, size_t reqlen, const char *what, char *err,
                    size_t errlen) {
    int e = 0;
    if (uapi_call(wg, req, reqlen, &e, NULL, NULL, err, errlen)) return -1;
    if (e) {
        mesh_errf(err, errlen, "wireguard %s: %s refused: errno=%d (%s)", wg->ifname, what, e,
                strerror(e < 0 ? -e : e));
        return -1;
    }
    return 0;
}

/* A growing request buffer; appends that do not fit set ->bad. */
typedef struct {
    char b[4096];
    size_t n;
    int bad;
} reqbuf;

static void rb_add(reqbuf *r, const char *s) {
    size_t l = strlen(s);
    if (r->n + l >= sizeof r->b) {
        r->bad = 1;
        return;
    }
    memcpy(r->b + r->n, s, l);
    r->n += l;
}

/* ---------------------------------------------------------------- driver */

static int find_in_path(const char *name, char *out, size_t outlen) {
    if (strchr(name, '/')) {
        snprintf(out, outlen, "%s", name);
        return access(out, X_OK);
    }
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *c = strchr(path, ':');
        size_t l = c ? (size_t)(c - path) : strlen(path);
        if (l && (size_t)snprintf(out, outlen, "%.*s/%s", (int)l, path, name) < outlen &&
            access(out, X_OK) == 0)
            return 0;
        path += l + (c ? 1 : 0);
    }
    return -1;
}

static void reap(mesh_wg *wg, int timeout_ms) {
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(wg->child, &st, WNOHANG);
        if (r == wg->child || (r < 0 && errno != EINTR)) break;
        if (now_ms() >= deadline) {
            /* It did not stop in time: kill it, and remove what it could not. */
            kill(wg->child, SIGKILL);
            while (waitpid(wg->child, &st, 0) < 0 && errno == EINTR) {}
            unlink(wg->sock_path);
            break;
        }
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    wg->child = -1;
}

int wg_uapi_open(mesh_wg *wg, const mesh_wg_config *cfg, char *err, size_t errlen) {
    snprintf(wg->sock_path, sizeof wg->sock_path, UAPI_DIR "/%s.sock", wg->ifname);
    /* A live socket at that path belongs to another wireguard-go (the path
     * is shared by every network namespace): talking to it would configure
     * someone else's interface. A stale one (no listener) is fine:
     * wireguard-go replaces it. */
    int probe = uapi_connect(wg->sock_path);
    if (probe >= 0) {
        close(probe);
        mesh_errf(err, errlen, "wireguard %s: %s is in use by another wireguard-go (interface "
                "names must be unique per node)", wg->ifname, wg->sock_path);
        return -1;
    }
    char exe[4096];
    const char *name = cfg->wireguard_go ? cfg->wireguard_go : "wireguard-go";
    if (find_in_path(name, exe, sizeof exe)) {
        mesh_errf(err, errlen, "wireguard %s: '%s' not found (apt-get install wireguard-go)",
                wg->ifname, name);
        return -1;
    }
    /* Everything the child needs is built before fork: in a threaded
     * process only async-signal-safe calls may follow it. */
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **envp = calloc(ne + 3, sizeof *envp);
    if (!envp) {
        mesh_errf(err, errlen, "wireguard %s: out of memory", wg->ifname);
        return -1;
    }
    size_t k = 0;
    int has_log = 0;
    for (size_t i = 0; i < ne; i++) {
        if (!strncmp(environ[i], "WG_PROCESS_FOREGROUND=", 22)) continue;
        if (!strncmp(environ[i], "LOG_LEVEL=", 10)) has_log = 1;
        envp[k++] = environ[i];
    }
    envp[k++] = "WG_PROCESS_FOREGROUND=1";
    if (!has_log) envp[k++] = "LOG_LEVEL=error";
    char ifname[MESH_WG_IFNAME_MAX];
    snprintf(ifname, sizeof ifname, "%s", wg->ifname);
    /* -f: without it wireguard-go re-executes itself and the parent exits,
     * so our child would not be the daemon. */
    char *argv[] = {exe, "-f", ifname, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        free(envp);
        mesh_errf(err, errlen, "wireguard %s: fork: %s", wg->ifname, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        execve(exe, argv, envp);
        _exit(127);
    }
    free(envp);
    wg->child = pid;
    int timeout = cfg->start_timeout_ms > 0 ? cfg->start_timeout_ms : 5000;
    int64_t deadline = now_ms() + timeout;
    for (;;) {
        int fd = uapi_connect(wg->sock_path);
        if (fd >= 0) {
            close(fd);
            break;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            wg->child = -1;
            mesh_errf(err, errlen, "wireguard %s: wireguard-go exited (status %d) before its "
                    "UAPI socket appeared (root and /dev/net/tun needed)", wg->ifname,
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
            return -1;
        }
        if (now_ms() >= deadline) {
            kill(pid, SIGTERM);
            reap(wg, 2000);
            mesh_errf(err, errlen, "wireguard %s: no UAPI socket at %s within %d ms", wg->ifname,
                    wg->sock_path, timeout);
            return -1;
        }
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    char hex[2 * MESH_WG_KEY_LEN + 1], line[64];
    reqbuf r = {.n = 0};
    wg_hex(cfg->private_key, hex);
    rb_add(&r, "set=1\nprivate_key=");
    rb_add(&r, hex);
    snprintf(line, sizeof line, "\nlisten_port=%d\nreplace_peers=true\n\n", cfg->listen_port);
    rb_add(&r, line);
    int rc = uapi_set(wg, r.b, r.n, "private key and listen port", err, errlen);
    memset(&r, 0, sizeof r); /* the private key does not linger */
    memset(hex, 0, sizeof hex);
    if (rc) {
        wg_uapi_close(wg);
        return -1;
    }
    return 0;
}

int wg_uapi_set_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], const char *endpoint,
                     const char *const *allowed, size_t n, int keepalive, char *err,
                     size_t errlen) {
    char hex[2 * MESH_WG_KEY_LEN + 1], line[96];
    reqbuf r = {.n = 0};
    wg_hex(pub, hex);
    rb_add(&r, "set=1\npublic_key=");
    rb_add(&r, hex);
    rb_add(&r, "\n");
    if (endpoint) {
        snprintf(line, sizeof line, "endpoint=%s\n", endpoint);
        rb_add(&r, line);
    }
    snprintf(line, sizeof line, "persistent_keepalive_interval=%d\nreplace_allowed_ips=true\n",
             keepalive);
    rb_add(&r, line);
    for (size_t i = 0; i < n; i++) {
        snprintf(line, sizeof line, "allowed_ip=%s\n", allowed[i]);
        rb_add(&r, line);
    }
    rb_add(&r, "\n");
    char what[128];
    snprintf(what, sizeof what, "peer %.16s...", hex);
    if (r.bad) {
        mesh_errf(err, errlen, "wireguard %s: %s: too many allowed IPs (%zu)", wg->ifname, what,
                n);
        return -1;
    }
    return uapi_set(wg, r.b, r.n, what, err, errlen);
}

int wg_uapi_remove_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], char *err,
                        size_t errlen) {
    char hex[2 * MESH_WG_KEY_LEN + 1], req[160], what[64];
    wg_hex(pub, hex);
    int l = snprintf(req, sizeof req, "set=1\npublic_key=%s\nremove=true\n\n", hex);
    snprintf(what, sizeof what, "removing peer %.16s...", hex);
    return uapi_set(wg, req, (size_t)l, what, err, errlen);
}

int wg_uapi_get_peers(mesh_wg *wg, mesh_wg_peer_info **peers, size_t *npeers, char *err,
                      size_t errlen) {
    int e = 0;
    if (uapi_call(wg, "get=1\n\n", 7, &e, peers, npeers, err, errlen)) return -1;
    if (e) {
        free(*peers);
        *peers = NULL;
        *npeers = 0;
        mesh_errf(err, errlen, "wireguard %s: get refused: errno=%d", wg->ifname, e);
        return -1;
    }
    return 0;
}

void wg_uapi_close(mesh_wg *wg) {
    if (wg->child <= 0) return;
    /* SIGTERM: wireguard-go removes its socket and the interface itself. */
    kill(wg->child, SIGTERM);
    reap(wg, 5000);
}
